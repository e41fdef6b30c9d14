/* Region sinks (io/sink.h): a file written by slabs is byte for byte the
 * file the whole-image writers write (sg_npy_write, sg_image_write) and
 * reads back through a source as the pixels given; regions out of order,
 * missing rows and descriptions a format cannot hold are refused naming
 * the file, and a refused or discarded sink leaves nothing at the
 * destination. */
#include "io/image.h"
#include "io/npy.h"
#include "io/sink.h"
#include "io/source.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/segrt_test_sink_XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)size + 1);
    *n = fread(b, 1, (size_t)size, f);
    fclose(f);
    return b;
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Writes planar (C x D x H x W) through a sink in slabs of `slab` rows
 * (whole pages when slab is 0). */
static sg_status write_by_slabs(const char *path, const sg_sink_desc *d, const uint8_t *planar, int64_t slab)
{
    sg_sink *s;
    SG_TRY(sg_sink_open(path, d, &s));
    size_t es = segrt_dtype_size(d->dtype);
    int64_t D = d->dims[0], H = d->dims[1], W = d->dims[2], C = d->channels;
    uint8_t *buf = malloc((size_t)(C * D * H * W) * es);
    sg_status st = SEGRT_OK;
    if (slab == 0) {
        sg_box b = {{0, 0, 0}, {D, H, W}};
        st = sg_sink_write(s, &b, planar);
    }
    for (int64_t z = 0; slab > 0 && z < D && st == SEGRT_OK; z++)
        for (int64_t y = 0; y < H && st == SEGRT_OK; y += slab) {
            int64_t rows = H - y < slab ? H - y : slab;
            sg_box b = {{z, y, 0}, {1, rows, W}};
            uint8_t *o = buf;
            for (int64_t c = 0; c < C; c++)
                for (int64_t r = 0; r < rows; r++, o += (size_t)W * es)
                    memcpy(o, planar + (size_t)(((c * D + z) * H + y + r) * W) * es, (size_t)W * es);
            st = sg_sink_write(s, &b, buf);
        }
    free(buf);
    if (st != SEGRT_OK) {
        sg_sink_discard(s);
        return st;
    }
    return sg_sink_commit(s);
}

static uint8_t *pattern(size_t n, int seed)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 29 + (i >> 7) * 3 + (size_t)seed);
    return p;
}

/* The source reads back what was given. */
static void reads_back(const char *path, const sg_sink_desc *d, const uint8_t *planar)
{
    sg_source *s;
    sg_status st = sg_source_open(path, &s);
    CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
    if (st != SEGRT_OK)
        return;
    sg_tensor all;
    size_t bytes = (size_t)(d->channels * d->dims[0] * d->dims[1] * d->dims[2]) * segrt_dtype_size(d->dtype);
    CHECK_MSG(s->info.dtype == d->dtype && s->info.channels == d->channels && s->info.n_dims == d->n_dims &&
                  sg_source_read_all(s, 0, &all) == SEGRT_OK && sg_tensor_bytes(&all) == bytes &&
                  memcmp(all.data, planar, bytes) == 0,
              "%s: read back differs", path);
    free(all.data);
    sg_source_close(s);
}

static void npy_case(sg_dtype dt, int32_t n_dims, int32_t C, int64_t D, int64_t H, int64_t W)
{
    sg_sink_desc d = {dt, n_dims, C, {D, H, W}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false};
    size_t bytes = (size_t)(C * D * H * W) * segrt_dtype_size(dt);
    uint8_t *planar = pattern(bytes, C);
    if (dt == SEGRT_DTYPE_FLOAT32) /* finite floats */
        for (size_t i = 0; i < bytes / 4; i++) {
            float v = (float)i * 0.25f - 3.0f;
            memcpy(planar + 4 * i, &v, 4);
        }
    sg_tensor t = {dt, 0, {0}, planar};
    t.dims[t.rank++] = 1;
    t.dims[t.rank++] = C;
    if (n_dims == 3)
        t.dims[t.rank++] = D;
    t.dims[t.rank++] = H;
    t.dims[t.rank++] = W;
    CHECK(sg_npy_write(in_dir("whole.npy"), &t) == SEGRT_OK);
    for (int64_t slab = 0; slab <= 4; slab += 3) {
        sg_status st = write_by_slabs(in_dir("sink.npy"), &d, planar, slab);
        CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
        CHECK_MSG(same_bytes(in_dir("sink.npy"), in_dir("whole.npy")), "npy %s C=%d slab %lld: bytes differ",
                  segrt_dtype_name(dt), (int)C, (long long)slab);
        reads_back(in_dir("sink.npy"), &d, planar);
    }
    free(planar);
}

/* The image's interleaved pixels from planar ones. */
static void interleave(const uint8_t *planar, sg_image *img)
{
    size_t es = (size_t)img->bits / 8, C = (size_t)img->channels;
    size_t n = (size_t)img->width * img->height * (img->depth > 1 ? img->depth : 1);
    for (size_t c = 0; c < C; c++)
        for (size_t i = 0; i < n; i++)
            memcpy((uint8_t *)img->pixels + (i * C + c) * es, planar + (c * n + i) * es, es);
}

static void image_case(const char *ext, int32_t C, int32_t bits, int64_t D, int64_t H, int64_t W)
{
    sg_dtype dt = bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    sg_sink_desc d = {dt, D > 1 ? 3 : 2, C, {D, H, W}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false};
    size_t bytes = (size_t)(C * D * H * W) * (size_t)(bits / 8);
    uint8_t *planar = pattern(bytes, bits);
    sg_image img = {(int32_t)W, (int32_t)H, (int32_t)D, C, bits, malloc(bytes)};
    interleave(planar, &img);
    char whole[32], sink[32];
    snprintf(whole, sizeof whole, "whole%s", ext);
    snprintf(sink, sizeof sink, "sink%s", ext);
    CHECK_MSG(sg_image_write(in_dir(whole), &img) == SEGRT_OK, "%s", segrt_last_error());
    for (int64_t slab = 0; slab <= 7; slab += 7) {
        sg_status st = write_by_slabs(in_dir(sink), &d, planar, slab);
        CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
        CHECK_MSG(same_bytes(in_dir(sink), in_dir(whole)), "%s C=%d %d-bit %lldx%lldx%lld slab %lld: bytes differ", ext,
                  (int)C, (int)bits, (long long)D, (long long)H, (long long)W, (long long)slab);
        reads_back(in_dir(sink), &d, planar);
    }
    free(img.pixels);
    free(planar);
}

static void refusals(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s", in_dir("r.png"));
    sg_sink *s = (sg_sink *)1;
    sg_sink_desc rgb = {SEGRT_DTYPE_UINT8, 2, 3, {1, 10, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false};
    /* Formats and descriptions. */
    CHECK(sg_sink_open(in_dir("r.jpg"), &rgb, &s) == SEGRT_ERROR_UNSUPPORTED && s == NULL);
    CHECK(sg_sink_open(in_dir("r.bmp"), &rgb, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_sink_desc vol = {SEGRT_DTYPE_UINT8, 3, 1, {3, 10, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false},
                 flt = {SEGRT_DTYPE_FLOAT32, 2, 1, {1, 10, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false},
                 five = {SEGRT_DTYPE_UINT8, 2, 5, {1, 10, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false},
                 empty = {SEGRT_DTYPE_UINT8, 2, 1, {1, 0, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false},
                 flat3 = {SEGRT_DTYPE_UINT8, 2, 1, {2, 10, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false};
    CHECK(sg_sink_open(path, &vol, &s) == SEGRT_ERROR_UNSUPPORTED && strstr(segrt_last_error(), "r.png"));
    CHECK(sg_sink_open(in_dir("r.tif"), &flt, &s) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(sg_sink_open(path, &five, &s) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(sg_sink_open(in_dir("r.npy"), &empty, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sink_open(in_dir("r.npy"), &flat3, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sink_open(in_dir("missing/r.npy"), &rgb, &s) == SEGRT_ERROR_IO);
    /* Out of order, not full width, past the end; then a commit with rows
     * missing: nothing is at the destination. */
    uint8_t buf[3 * 10 * 8] = {0};
    CHECK(sg_sink_open(path, &rgb, &s) == SEGRT_OK);
    sg_box skip = {{0, 1, 0}, {1, 2, 8}}, narrow = {{0, 0, 1}, {1, 2, 7}}, first = {{0, 0, 0}, {1, 4, 8}},
           again = {{0, 0, 0}, {1, 4, 8}}, over = {{0, 4, 0}, {1, 7, 8}};
    CHECK(sg_sink_write(s, &skip, buf) == SEGRT_ERROR_INVALID_ARGUMENT && strstr(segrt_last_error(), "r.png"));
    CHECK(sg_sink_write(s, &narrow, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sink_write(s, &first, buf) == SEGRT_OK);
    CHECK(sg_sink_write(s, &again, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sink_write(s, &over, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sink_commit(s) == SEGRT_ERROR_INVALID_ARGUMENT && !exists(path));
    /* The same for TIFF and NPY, and a discard. */
    sg_sink_desc grey = {SEGRT_DTYPE_UINT16, 2, 1, {1, 10, 8}, {0, 0, 0}, {0}, false, {0, 0}, {0, 0}, false};
    CHECK(sg_sink_open(in_dir("r.tif"), &grey, &s) == SEGRT_OK && sg_sink_write(s, &first, buf) == SEGRT_OK &&
          sg_sink_commit(s) == SEGRT_ERROR_INVALID_ARGUMENT && !exists(in_dir("r.tif")));
    CHECK(sg_sink_open(in_dir("r.npy"), &grey, &s) == SEGRT_OK && sg_sink_write(s, &first, buf) == SEGRT_OK &&
          sg_sink_commit(s) == SEGRT_ERROR_INVALID_ARGUMENT && !exists(in_dir("r.npy")));
    CHECK(sg_sink_open(in_dir("r.npy"), &grey, &s) == SEGRT_OK);
    sg_sink_discard(s);
    sg_sink_discard(NULL);
    CHECK(!exists(in_dir("r.npy")));
    /* Nothing but what was committed is left in the folder. */
    int left = -1;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
    FILE *p = popen(cmd, "r");
    if (p) {
        CHECK(fscanf(p, "%d", &left) == 1);
        pclose(p);
    }
    CHECK_MSG(left == 0, "%d files left in %s", left, dir);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    refusals();
    npy_case(SEGRT_DTYPE_UINT8, 2, 1, 1, 9, 13);
    npy_case(SEGRT_DTYPE_FLOAT32, 2, 3, 1, 10, 7);
    npy_case(SEGRT_DTYPE_UINT16, 3, 2, 4, 5, 6);
    image_case(".png", 1, 8, 1, 20, 17);
    image_case(".png", 3, 8, 1, 19, 23);
    image_case(".png", 2, 16, 1, 15, 9);
    image_case(".png", 4, 16, 1, 8, 30);
    image_case(".tif", 1, 8, 1, 300, 1100); /* several strips of 256 KiB */
    image_case(".tiff", 4, 16, 1, 21, 11);
    image_case(".tif", 3, 8, 5, 13, 12);
    image_case(".tif", 1, 16, 3, 600, 300);
    const char *names[] = {"whole.npy", "sink.npy", "whole.png",  "sink.png",
                           "whole.tif", "sink.tif", "whole.tiff", "sink.tiff"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(in_dir(names[i]));
    rmdir(dir);
    return sg_test_finish("test_sink");
}
