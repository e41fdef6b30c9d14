/* Region sources (io/source.h) against the whole reads they stand for:
 * every box of NPY arrays (2-D, 3-D, every channel count, bools) and of
 * PNG and multi-page TIFF images equals the same box cut from
 * sg_npy_read's or sg_image_read's result; read_all equals the whole; and
 * boxes, levels and files that are wrong are refused naming the file. */
#include "io/image.h"
#include "io/npy.h"
#include "io/source.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/segrt_test_source_XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Sample i of channel c at (z, y, x) of a whole planar 1 x C x D x H x W
 * array (as sg_npy_read gives it), es bytes each. */
static const uint8_t *planar_at(const uint8_t *data, const int64_t d[3], int64_t c, int64_t z, int64_t y, int64_t x,
                                size_t es)
{
    return data + (size_t)(((c * d[0] + z) * d[1] + y) * d[2] + x) * es;
}

/* Every box of a small grid of starts and sizes, against cut. */
typedef const uint8_t *(*cut_fn)(const void *whole, const sg_source_info *in, int64_t c, int64_t z, int64_t y,
                                 int64_t x);

static void check_boxes(sg_source *s, const void *whole, cut_fn cut)
{
    const sg_source_info *in = &s->info;
    size_t es = segrt_dtype_size(in->dtype);
    const int64_t *d = in->dims[0];
    uint8_t *buf = malloc((size_t)(in->channels * d[0] * d[1] * d[2]) * es);
    int boxes = 0, bad = 0;
    for (int64_t z0 = 0; z0<d[0]; z0 += d[0]> 2 ? 2 : 1)
        for (int64_t y0 = 0; y0 < d[1]; y0 += 3)
            for (int64_t x0 = 0; x0 < d[2]; x0 += 4)
                for (int64_t h = 1; y0 + h <= d[1]; h += 2)
                    for (int64_t w = 1; x0 + w <= d[2]; w += 3) {
                        sg_box b = {{z0, y0, x0}, {d[0] - z0, h, w}};
                        if (sg_source_read_region(s, 0, &b, buf) != SEGRT_OK) {
                            bad++;
                            continue;
                        }
                        const uint8_t *o = buf;
                        for (int64_t c = 0; c < in->channels; c++)
                            for (int64_t z = 0; z < b.size[0]; z++)
                                for (int64_t y = 0; y < h; y++)
                                    for (int64_t x = 0; x < w; x++, o += es)
                                        bad += memcmp(o, cut(whole, in, c, z0 + z, y0 + y, x0 + x), es) != 0;
                        boxes++;
                    }
    CHECK_MSG(boxes > 0 && bad == 0, "%s: %d of %d boxes differ", s->path, bad, boxes);
    free(buf);
}

static const uint8_t *cut_npy(const void *whole, const sg_source_info *in, int64_t c, int64_t z, int64_t y, int64_t x)
{
    return planar_at(whole, in->dims[0], c, z, y, x, segrt_dtype_size(in->dtype));
}

static void npy_case(sg_dtype dt, int32_t rank, const int64_t *dims, int32_t n_dims, int32_t channels)
{
    sg_tensor t = {dt, rank, {0}, NULL};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    size_t bytes = sg_tensor_bytes(&t);
    t.data = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) /* bools get bytes other than 0 and 1, which read as 1 */
        ((uint8_t *)t.data)[i] = (uint8_t)(i * 37 + 11);
    CHECK(sg_npy_write(in_dir("a.npy"), &t) == SEGRT_OK);
    sg_tensor whole;
    CHECK(sg_npy_read(in_dir("a.npy"), &whole) == SEGRT_OK);
    sg_source *s;
    sg_status st = sg_source_open(in_dir("a.npy"), &s);
    CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
    if (st == SEGRT_OK) {
        CHECK(strcmp(s->info.format, "npy") == 0 && s->info.dtype == dt && s->info.n_dims == n_dims &&
              s->info.channels == channels && s->info.n_levels == 1);
        check_boxes(s, whole.data, cut_npy);
        sg_tensor all;
        CHECK(sg_source_read_all(s, 0, &all) == SEGRT_OK && sg_tensor_bytes(&all) == bytes &&
              memcmp(all.data, whole.data, bytes) == 0);
        free(all.data);
        sg_source_close(s);
    }
    free(whole.data);
    free(t.data);
}

static const uint8_t *cut_image(const void *whole, const sg_source_info *in, int64_t c, int64_t z, int64_t y, int64_t x)
{
    const sg_image *img = whole;
    (void)in;
    return (const uint8_t *)img->pixels + (size_t)z * sg_image_page_bytes(img) + (size_t)y * sg_image_row_bytes(img) +
           ((size_t)x * (size_t)img->channels + (size_t)c) * (size_t)(img->bits / 8);
}

static void image_case(const char *name, int32_t w, int32_t h, int32_t depth, int32_t channels, int32_t bits)
{
    sg_image img = {w, h, depth, channels, bits, NULL};
    size_t n = sg_image_bytes(&img);
    img.pixels = malloc(n);
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)img.pixels)[i] = (uint8_t)(i * 13 + 5);
    CHECK_MSG(sg_image_write(in_dir(name), &img) == SEGRT_OK, "%s", segrt_last_error());
    sg_image whole;
    CHECK(sg_image_read(in_dir(name), &whole) == SEGRT_OK);
    sg_source *s;
    sg_status st = sg_source_open(in_dir(name), &s);
    CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
    if (st == SEGRT_OK) {
        CHECK(s->info.n_dims == (depth > 1 ? 3 : 2) && s->info.channels == channels &&
              s->info.dtype == (bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8) && s->info.dims[0][0] == depth &&
              s->info.dims[0][1] == h && s->info.dims[0][2] == w);
        check_boxes(s, &whole, cut_image);
        sg_source_close(s);
    }
    sg_image_free(&whole);
    free(img.pixels);
}

static void refusals(void)
{
    sg_tensor t = {SEGRT_DTYPE_FLOAT32, 4, {1, 2, 5, 6}, NULL};
    t.data = calloc(60, sizeof(float));
    CHECK(sg_npy_write(in_dir("b.npy"), &t) == SEGRT_OK);
    sg_source *s;
    CHECK(sg_source_open(in_dir("b.npy"), &s) == SEGRT_OK);
    float buf[64];
    sg_box outside = {{0, 3, 0}, {1, 3, 6}}, empty = {{0, 0, 0}, {1, 0, 6}}, negative = {{0, -1, 0}, {1, 2, 2}},
           deep = {{1, 0, 0}, {1, 1, 1}};
    CHECK(sg_source_read_region(s, 0, &outside, buf) == SEGRT_ERROR_INVALID_ARGUMENT &&
          strstr(segrt_last_error(), "b.npy"));
    CHECK(sg_source_read_region(s, 0, &empty, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_source_read_region(s, 0, &negative, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_source_read_region(s, 0, &deep, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_box ok = {{0, 0, 0}, {1, 1, 1}};
    CHECK(sg_source_read_region(s, 1, &ok, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_source_close(s);
    /* Not an image's layout: C x H x W without the batch, 2 x C x H x W. */
    sg_tensor chw = {SEGRT_DTYPE_FLOAT32, 3, {2, 5, 6}, t.data}, two = {SEGRT_DTYPE_FLOAT32, 4, {2, 1, 5, 6}, t.data};
    CHECK(sg_npy_write(in_dir("c.npy"), &chw) == SEGRT_OK && sg_npy_write(in_dir("d.npy"), &two) == SEGRT_OK);
    s = (sg_source *)1;
    CHECK(sg_source_open(in_dir("c.npy"), &s) == SEGRT_ERROR_UNSUPPORTED && s == NULL &&
          strstr(segrt_last_error(), "c.npy") && strstr(segrt_last_error(), "2x5x6"));
    CHECK(sg_source_open(in_dir("d.npy"), &s) == SEGRT_ERROR_UNSUPPORTED);
    /* Truncated, missing, a folder; NPY bytes under a picture's name are NPY
     * (the bytes decide). */
    CHECK(truncate(in_dir("b.npy"), 100) == 0);
    CHECK(sg_source_open(in_dir("b.npy"), &s) == SEGRT_ERROR_INVALID_MODEL && strstr(segrt_last_error(), "b.npy"));
    CHECK(sg_source_open(in_dir("missing.npy"), &s) == SEGRT_ERROR_IO);
    CHECK(sg_source_open(dir, &s) != SEGRT_OK && s == NULL);
    CHECK(sg_npy_write(in_dir("e.png"), &t) == SEGRT_OK && sg_source_open(in_dir("e.png"), &s) == SEGRT_OK);
    sg_source_close(s);
    sg_source_close(NULL);
    free(t.data);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    const int64_t d2[4] = {1, 3, 7, 10}, d3[5] = {1, 2, 4, 6, 9}, hw[2] = {5, 11}, one[5] = {1, 1, 1, 1, 1};
    npy_case(SEGRT_DTYPE_FLOAT32, 4, d2, 2, 3);
    npy_case(SEGRT_DTYPE_UINT16, 5, d3, 3, 2);
    npy_case(SEGRT_DTYPE_BOOL, 2, hw, 2, 1);
    npy_case(SEGRT_DTYPE_FLOAT64, 5, one, 3, 1);
    image_case("rgb.png", 13, 9, 1, 3, 8);
    image_case("ga16.png", 7, 6, 1, 2, 16);
    image_case("stack.tif", 10, 7, 4, 1, 16);
    image_case("rgba.tiff", 6, 5, 3, 4, 8);
    refusals();
    const char *names[] = {"a.npy",   "b.npy",    "c.npy",     "d.npy",    "e.png",
                           "rgb.png", "ga16.png", "stack.tif", "rgba.tiff"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(in_dir(names[i]));
    rmdir(dir);
    return sg_test_finish("test_source");
}
