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
 * A failure prints "STATUS: message" on stderr and exits 1; a slide the
 * tissue mask cannot be made of, one line and exit 2. */
#include "io/npy.h"
#include "io/slide.h"
#include "io/source.h"
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
    else if (strcmp(cmd, "tiles") == 0 && argc - a >= 4)
        rc = tiles(s, atoi(argv[a + 2]), argv[a + 3], argc - a - 4, argv + a + 4);
    sg_source_close(s);
    return rc;
}
