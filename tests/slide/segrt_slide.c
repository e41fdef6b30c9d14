/* The slide tests' driver (test_slide.py): opens a file as a region source
 * (sg_source_open, or sg_source_open_slide with --slide) and
 *   segrt_slide [--slide] PATH info [PROPERTY...]  prints the source's info,
 *       its associated images and the named properties as JSON;
 *   segrt_slide [--slide] PATH region OUT.npy LEVEL Y X H W [...]  writes
 *       each box (3 x H x W planar, uint8) to OUT.npy, OUT.1.npy, ...;
 *   segrt_slide [--slide] PATH assoc OUT.npy NAME  writes an associated
 *       image (3 x H x W);
 *   segrt_slide [--slide] PATH tissue OUT.npy MAX_PX MIN_OBJECT MIN_HOLE
 *       [PNG] [BOXES.npy HITS.npy]  computes the tissue mask
 *       (pipeline/tissue.h; the numbers as sg_tissue_options'), prints its
 *       level, threshold, grid, scale and sizes as JSON, writes it (H x W
 *       uint8) to OUT.npy and as a PNG to PNG ("-": none), and answers
 *       sg_tissue_box for each row (y0, x0, h, w) of BOXES.npy (float64
 *       n x 4) into HITS.npy (uint8 n).
 *   segrt_slide --slide PATH ring LEVEL F R0:R1...  reads the level's JPEG
 *       tiles through the device reader (pipeline/slide_gpu.c: its decoder
 *       thread, ring and row steps) with a host stand-in for the device
 *       (fake_ops below: synchronous "streams", a "decoder" that fills each
 *       tile with a pattern of its stream's hash, area_u8 as
 *       backend_window.h states it), the level shrunk F times (1 or 2) by
 *       area, for each range of grid rows in turn (backwards and forwards
 *       jumps restart the thread), and checks every row against the same
 *       pattern computed from the tiles directly; prints {"rows": N,
 *       "tiles": decoded} or exits 1 naming the first wrong value.
 * A failure prints "STATUS: message" on stderr and exits 1; a slide the
 * tissue mask cannot be made of, one line and exit 2. */
#include "backend/backend_window.h"
#include "io/npy.h"
#include "io/slide.h"
#include "io/source.h"
#include "pipeline/slide_gpu.h"
#include "pipeline/tissue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(sg_status st)
{
    fprintf(stderr, "%s: %s\n", segrt_status_name(st), sg_last_error());
    return 1;
}

/* s as a JSON string (the test's properties are plain text). */
static void json_string(const char *s)
{
    if (!s) {
        printf("null");
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 32)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

static int info(sg_source *s, int argc, char **argv)
{
    const sg_source_info *in = &s->info;
    printf("{\"format\": ");
    json_string(in->format);
    printf(", \"vendor\": ");
    json_string(in->vendor);
    printf(", \"dtype\": \"%s\", \"n_dims\": %d, \"channels\": %d, \"levels\": [", segrt_dtype_name(in->dtype),
           (int)in->n_dims, (int)in->channels);
    for (int32_t l = 0; l < in->n_levels; l++)
        printf("%s{\"dims\": [%lld, %lld, %lld], \"downsample\": %.17g}", l ? ", " : "", (long long)in->dims[l][0],
               (long long)in->dims[l][1], (long long)in->dims[l][2], in->downsample[l]);
    printf("], \"spacing\": [%.17g, %.17g, %.17g], \"tile\": [%lld, %lld, %lld], \"associated\": {", in->spacing[0],
           in->spacing[1], in->spacing[2], (long long)in->tile[0], (long long)in->tile[1], (long long)in->tile[2]);
    for (size_t i = 0; i < sg_slide_associated_count(s); i++) {
        const char *name;
        int64_t h, w;
        sg_status st = sg_slide_associated_info(s, i, &name, &h, &w);
        if (st != SEGRT_OK)
            return fail(st);
        printf("%s", i ? ", " : "");
        json_string(name);
        printf(": [%lld, %lld]", (long long)h, (long long)w);
    }
    printf("}, \"properties\": {");
    for (int i = 0; i < argc; i++) {
        printf("%s", i ? ", " : "");
        json_string(argv[i]);
        printf(": ");
        json_string(sg_slide_property(s, argv[i]));
    }
    printf("}}\n");
    return 0;
}

static int write_planes(const char *path, int64_t h, int64_t w, void *data)
{
    sg_tensor t = {.dtype = SEGRT_DTYPE_UINT8, .rank = 3, .dims = {3, h, w}, .data = data};
    sg_status st = sg_npy_write(path, &t);
    return st == SEGRT_OK ? 0 : fail(st);
}

static int regions(sg_source *s, const char *out, int argc, char **argv)
{
    for (int i = 0; i + 5 <= argc; i += 5) {
        int32_t level = atoi(argv[i]);
        sg_box b = {{0, atoll(argv[i + 1]), atoll(argv[i + 2])}, {1, atoll(argv[i + 3]), atoll(argv[i + 4])}};
        size_t n = b.size[1] > 0 && b.size[2] > 0 ? (size_t)(3 * b.size[1] * b.size[2]) : 1;
        uint8_t *buf = malloc(n);
        if (!buf)
            return 1;
        sg_status st = sg_source_read_region(s, level, &b, buf);
        if (st != SEGRT_OK) {
            free(buf);
            return fail(st);
        }
        char path[4096];
        if (i == 0)
            snprintf(path, sizeof path, "%s", out);
        else
            snprintf(path, sizeof path, "%.*s.%d.npy", (int)(strlen(out) - 4), out, i / 5);
        int rc = write_planes(path, b.size[1], b.size[2], buf);
        free(buf);
        if (rc)
            return rc;
    }
    return 0;
}

static int assoc(sg_source *s, const char *out, const char *name)
{
    for (size_t i = 0; i < sg_slide_associated_count(s); i++) {
        const char *n;
        int64_t h, w;
        sg_status st = sg_slide_associated_info(s, i, &n, &h, &w);
        if (st != SEGRT_OK)
            return fail(st);
        if (strcmp(n, name) != 0)
            continue;
        uint8_t *buf = malloc((size_t)(3 * h * w));
        if (!buf)
            return 1;
        if ((st = sg_slide_read_associated(s, name, buf)) != SEGRT_OK) {
            free(buf);
            return fail(st);
        }
        int rc = write_planes(out, h, w, buf);
        free(buf);
        return rc;
    }
    uint8_t none;
    return fail(sg_slide_read_associated(s, name, &none));
}

static int tissue(sg_source *s, int argc, char **argv)
{
    sg_tissue_options o = {atof(argv[1]), atof(argv[2]), atof(argv[3])};
    sg_tissue_mask m;
    sg_status st = sg_tissue_detect(s, &o, &m);
    if (st != SEGRT_OK) {
        fprintf(stderr, "%s: %s\n", segrt_status_name(st), sg_last_error());
        return 2;
    }
    printf("{\"level\": %d, \"reduce\": %d, \"threshold\": %.17g, \"height\": %lld, \"width\": %lld, "
           "\"scale\": [%.17g, %.17g], \"min_object_px\": %.17g, \"min_hole_px\": %.17g}\n",
           (int)m.level, (int)m.reduce, m.threshold, (long long)m.height, (long long)m.width, m.scale[0], m.scale[1],
           m.min_object_px, m.min_hole_px);
    sg_tensor t = {.dtype = SEGRT_DTYPE_UINT8, .rank = 2, .dims = {m.height, m.width}, .data = m.mask};
    st = sg_npy_write(argv[0], &t);
    if (st == SEGRT_OK && argc > 4 && strcmp(argv[4], "-") != 0)
        st = sg_tissue_write_png(&m, argv[4]);
    if (st == SEGRT_OK && argc > 6) {
        sg_tensor boxes = {0}, hits = {.dtype = SEGRT_DTYPE_UINT8, .rank = 1};
        st = sg_npy_read(argv[5], &boxes);
        if (st == SEGRT_OK && (boxes.dtype != SEGRT_DTYPE_FLOAT64 || boxes.rank != 2 || boxes.dims[1] != 4))
            st = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: boxes are float64 n x 4", argv[5]);
        if (st == SEGRT_OK) {
            hits.dims[0] = boxes.dims[0];
            if (!(hits.data = malloc((size_t)(boxes.dims[0] ? boxes.dims[0] : 1))))
                st = SEGRT_ERROR_OUT_OF_MEMORY;
            const double *b = boxes.data;
            for (int64_t i = 0; st == SEGRT_OK && i < boxes.dims[0]; i++)
                ((uint8_t *)hits.data)[i] = sg_tissue_box(&m, b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]);
            if (st == SEGRT_OK)
                st = sg_npy_write(argv[6], &hits);
        }
        free(boxes.data);
        free(hits.data);
    }
    sg_tissue_mask_free(&m);
    return st == SEGRT_OK ? 0 : fail(st);
}

static int tiles(sg_source *s, int32_t level, const char *dir, int argc, char **argv)
{
    sg_slide_tiles *t;
    sg_status st = sg_slide_tiles_open(s, level, &t);
    if (st == SEGRT_ERROR_UNSUPPORTED) {
        printf("{\"unsupported\": ");
        json_string(sg_last_error());
        printf("}\n");
        return 0;
    }
    if (st != SEGRT_OK)
        return fail(st);
    const sg_slide_tiles_info *ti = sg_slide_tiles_get_info(t);
    printf("{\"tile_w\": %lld, \"tile_h\": %lld, \"across\": %lld, \"down\": %lld, \"ycbcr\": %s, "
           "\"max_bytes\": %zu}\n",
           (long long)ti->tile_w, (long long)ti->tile_h, (long long)ti->across, (long long)ti->down,
           ti->ycbcr ? "true" : "false", ti->max_bytes);
    uint8_t *buf = malloc(ti->max_bytes);
    int rc = buf ? 0 : 1;
    for (int i = 0; i + 1 < argc && rc == 0; i += 2) {
        size_t len;
        long long row = atoll(argv[i]), col = atoll(argv[i + 1]);
        if ((st = sg_slide_tiles_read(t, row, col, buf, &len)) != SEGRT_OK) {
            rc = fail(st);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%lld_%lld.jpg", dir, row, col);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len)
            rc = 1;
        if (f && fclose(f) != 0)
            rc = 1;
    }
    free(buf);
    sg_slide_tiles_close(t);
    return rc;
}

/* --- the device reader on a host stand-in (ring) ----------------------- */

struct sg_backend_jpeg {
    int unused;
};

static sg_status f_device_get(int32_t *d)
{
    *d = 0;
    return SEGRT_OK;
}
static sg_status f_device_set(int32_t d)
{
    (void)d;
    return SEGRT_OK;
}
static sg_status f_alloc(int32_t d, size_t n, void **out)
{
    (void)d;
    *out = malloc(n);
    return *out ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}
static sg_status f_host_alloc(size_t n, void **out) { return f_alloc(0, n, out); }
/* Streams and events: the work is done when enqueued, so none waits. */
static sg_status f_stream_create(sg_backend_stream **out)
{
    *out = malloc(1);
    return *out ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}
static void f_stream_destroy(sg_backend_stream *s) { free(s); }
static sg_status f_stream_sync(sg_backend_stream *s)
{
    (void)s;
    return SEGRT_OK;
}
static sg_status f_stream_wait(sg_backend_stream *s, sg_backend_event *e)
{
    (void)s;
    (void)e;
    return SEGRT_OK;
}
static sg_status f_event_create(sg_backend_event **out)
{
    *out = malloc(1);
    return *out ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}
static void f_event_destroy(sg_backend_event *e) { free(e); }
static sg_status f_event_record(sg_backend_event *e, sg_backend_stream *s)
{
    (void)e;
    (void)s;
    return SEGRT_OK;
}
static sg_status f_event_sync(sg_backend_event *e)
{
    (void)e;
    return SEGRT_OK;
}
static sg_status f_copy(void *dst, const void *src, size_t n, sg_window_copy k)
{
    (void)k;
    memcpy(dst, src, n);
    return SEGRT_OK;
}
static sg_status f_jpeg_create(sg_backend_jpeg **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}
static void f_jpeg_destroy(sg_backend_jpeg *d) { free(d); }
static const char *f_jpeg_engine(const sg_backend_jpeg *d)
{
    (void)d;
    return "the host stand-in";
}

static int64_t ring_tw, ring_th; /* the level's tile size, for the stand-in decoder */

static uint32_t stream_hash(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Channel c of a tile whose stream hashes to h, at (y, x) within it. */
static uint8_t pattern(uint32_t h, int c, int64_t y, int64_t x)
{
    return (uint8_t)((h >> (8 * c)) + (uint32_t)(y * 3 + x * 5));
}

static sg_status f_jpeg_decode(sg_backend_jpeg *d, sg_backend_stream *s, int32_t count, const uint8_t *const *data,
                               const size_t *bytes, bool ycbcr, uint8_t *const *planes, size_t pitch)
{
    (void)d;
    (void)s;
    (void)ycbcr;
    for (int32_t i = 0; i < count; i++) {
        uint32_t h = stream_hash(data[i], bytes[i]);
        for (int c = 0; c < 3; c++)
            for (int64_t y = 0; y < ring_th; y++)
                for (int64_t x = 0; x < ring_tw; x++)
                    planes[3 * i + c][(size_t)y * pitch + (size_t)x] = pattern(h, c, y, x);
    }
    return SEGRT_OK;
}

/* backend_window.h's area_u8, norm off. */
static sg_status f_area_u8(sg_backend_stream *s, const uint8_t *src, int64_t src_pitch, int64_t src_plane,
                           int64_t src_ring, int32_t channels, const sg_window_axis *rows, int64_t row0, int64_t n_rows,
                           const sg_window_axis *cols, int64_t n_cols, const sg_window_norm *norm, float *dst,
                           int64_t dst_pitch, int64_t dst_cstride)
{
    (void)s;
    (void)norm;
    for (int32_t c = 0; c < channels; c++)
        for (int64_t i = row0; i < row0 + n_rows; i++)
            for (int64_t x = 0; x < n_cols; x++) {
                float v = 0;
                for (int32_t k = 0; k < rows->count[i]; k++)
                    for (int32_t l = 0; l < cols->count[x]; l++)
                        v += rows->w[i * rows->span + k] * cols->w[x * cols->span + l] *
                             (float)src[c * src_plane + ((rows->first[i] + k) % src_ring) * src_pitch +
                                        cols->first[x] + l];
                dst[c * dst_cstride + (i - row0) * dst_pitch + x] = v;
            }
    return SEGRT_OK;
}

static const sg_window_ops fake_ops = {
    .name = "host stand-in",
    .device_get = f_device_get,
    .device_set = f_device_set,
    .device_alloc = f_alloc,
    .device_free = free,
    .host_alloc = f_host_alloc,
    .host_free = free,
    .stream_create = f_stream_create,
    .stream_destroy = f_stream_destroy,
    .stream_synchronize = f_stream_sync,
    .stream_wait = f_stream_wait,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_synchronize = f_event_sync,
    .copy = f_copy,
    .jpeg_create = f_jpeg_create,
    .jpeg_destroy = f_jpeg_destroy,
    .jpeg_decode = f_jpeg_decode,
    .jpeg_engine = f_jpeg_engine,
    .area_u8 = f_area_u8,
};

/* An axis of n outputs over m inputs shrunk f times (f 1 or 2; the last
 * output of an odd m takes one input). */
static bool axis_make(int64_t m, int f, sg_slide_axis *a, int64_t **first, int32_t **count, float **w)
{
    a->n = (m + f - 1) / f;
    a->span = f;
    *first = malloc(sizeof **first * (size_t)a->n);
    *count = malloc(sizeof **count * (size_t)a->n);
    *w = calloc((size_t)(a->n * f), sizeof **w);
    if (!*first || !*count || !*w)
        return false;
    for (int64_t i = 0; i < a->n; i++) {
        (*first)[i] = i * f;
        (*count)[i] = (int32_t)(f * i + f <= m ? f : m - f * i);
        for (int32_t k = 0; k < (*count)[i]; k++)
            (*w)[i * f + k] = 1.0f / (float)(*count)[i];
    }
    a->first = *first;
    a->count = *count;
    a->w = *w;
    return true;
}

static int ring(sg_source *s, int32_t level, int f, int argc, char **argv)
{
    sg_slide_tiles *t;
    sg_status st = sg_slide_tiles_open(s, level, &t);
    if (st != SEGRT_OK)
        return fail(st);
    const sg_slide_tiles_info *ti = sg_slide_tiles_get_info(t);
    ring_tw = ti->tile_w;
    ring_th = ti->tile_h;
    int64_t LH = s->info.dims[level][1], LW = s->info.dims[level][2];
    /* The tiles' hashes, read directly, for the expected rows. */
    uint32_t *hash = malloc(sizeof *hash * (size_t)(ti->across * ti->down));
    uint8_t *buf = malloc(ti->max_bytes);
    int rc = hash && buf ? 0 : 1;
    for (int64_t ty = 0; ty < ti->down && rc == 0; ty++)
        for (int64_t tx = 0; tx < ti->across && rc == 0; tx++) {
            size_t len;
            if ((st = sg_slide_tiles_read(t, ty, tx, buf, &len)) != SEGRT_OK)
                rc = fail(st);
            else
                hash[ty * ti->across + tx] = stream_hash(buf, len);
        }
    sg_slide_axis rows, cols;
    int64_t *rf = NULL, *cf = NULL;
    int32_t *rn = NULL, *cn = NULL;
    float *rw = NULL, *cw = NULL;
    if (rc == 0 && (!axis_make(LH, f, &rows, &rf, &rn, &rw) || !axis_make(LW, f, &cols, &cf, &cn, &cw)))
        rc = 1;
    sg_slide_gpu *g = NULL;
    sg_window_norm norm = {0};
    if (rc == 0 && (st = sg_slide_gpu_open(&fake_ops, t, &rows, &cols, &norm, &g)) != SEGRT_OK)
        rc = fail(st);
    float *out = NULL;
    int64_t n_rows = 0;
    for (int i = 0; i < argc && rc == 0; i++) {
        long long r0, r1;
        if (sscanf(argv[i], "%lld:%lld", &r0, &r1) != 2 || r0 < 0 || r1 <= r0 || r1 > rows.n) {
            fprintf(stderr, "ring: bad range %s (rows 0:%lld)\n", argv[i], (long long)rows.n);
            rc = 1;
            break;
        }
        int64_t n = r1 - r0;
        float *more = realloc(out, sizeof *out * (size_t)(3 * n * cols.n));
        if (!more) {
            rc = 1;
            break;
        }
        out = more;
        if ((st = sg_slide_gpu_rows(g, r0, r1, out, n * cols.n, NULL)) != SEGRT_OK) {
            rc = fail(st);
            break;
        }
        for (int c = 0; c < 3 && rc == 0; c++)
            for (int64_t r = r0; r < r1 && rc == 0; r++)
                for (int64_t x = 0; x < cols.n && rc == 0; x++) {
                    float v = 0;
                    for (int32_t k = 0; k < rows.count[r]; k++)
                        for (int32_t l = 0; l < cols.count[x]; l++) {
                            int64_t y = rows.first[r] + k, xx = cols.first[x] + l;
                            uint32_t h = hash[(y / ring_th) * ti->across + xx / ring_tw];
                            v += rows.w[r * rows.span + k] * cols.w[x * cols.span + l] *
                                 (float)pattern(h, c, y % ring_th, xx % ring_tw);
                        }
                    float got = out[c * n * cols.n + (r - r0) * cols.n + x];
                    if (got != v) {
                        fprintf(stderr, "ring: range %s, channel %d, row %lld, column %lld: %g, expected %g\n",
                                argv[i], c, (long long)r, (long long)x, (double)got, (double)v);
                        rc = 1;
                    }
                }
        n_rows += n;
    }
    if (rc == 0)
        printf("{\"rows\": %lld, \"tiles\": %lld, \"engine\": \"%s\"}\n", (long long)n_rows,
               (long long)sg_slide_gpu_tiles_decoded(g), sg_slide_gpu_engine(g));
    sg_slide_gpu_close(g);
    free(out);
    free(rf);
    free(rn);
    free(rw);
    free(cf);
    free(cn);
    free(cw);
    free(hash);
    free(buf);
    sg_slide_tiles_close(t);
    return rc;
}

int main(int argc, char **argv)
{
    int a = 1;
    bool slide = argc > 1 && strcmp(argv[1], "--slide") == 0;
    a += slide;
    if (argc - a < 2) {
        fprintf(stderr, "usage: segrt_slide [--slide] PATH info|region|assoc ...\n");
        return 2;
    }
    sg_source *s;
    sg_source_options o = {0, NULL, false};
    const char *cmd = argv[a + 1];
    sg_status st = slide ? sg_source_open_slide(argv[a], &o, &s) : sg_source_open_with(argv[a], &o, &s);
    if (st != SEGRT_OK) /* the tissue mask's callers take a slide it cannot be made of as bad input */
        return fail(st) + (strcmp(cmd, "tissue") == 0);
    int rc = 2;
    if (strcmp(cmd, "info") == 0)
        rc = info(s, argc - a - 2, argv + a + 2);
    else if (strcmp(cmd, "region") == 0 && argc - a >= 8)
        rc = regions(s, argv[a + 2], argc - a - 3, argv + a + 3);
    else if (strcmp(cmd, "assoc") == 0 && argc - a == 4)
        rc = assoc(s, argv[a + 2], argv[a + 3]);
    else if (strcmp(cmd, "tissue") == 0 && argc - a >= 6)
        rc = tissue(s, argc - a - 2, argv + a + 2);
    else if (strcmp(cmd, "ring") == 0 && argc - a >= 5)
        rc = ring(s, atoi(argv[a + 2]), atoi(argv[a + 3]), argc - a - 4, argv + a + 4);
    else if (strcmp(cmd, "tiles") == 0 && argc - a >= 4)
        rc = tiles(s, atoi(argv[a + 2]), argv[a + 3], argc - a - 4, argv + a + 4);
    sg_source_close(s);
    return rc;
}
