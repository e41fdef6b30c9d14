/* Region sources (io/source.h) against the whole reads they stand for and
 * against the pixels written: every box of NPY arrays (2-D, 3-D, every
 * channel count, bools), of TIFF files made here by libtiff (tiles of
 * several sizes and strips, 8/16-bit, signed, float, palettes, min-is-white,
 * separate planes, volumes and pyramids), and of PNG and JPEG read as
 * slabs forward and back; read_all equals the whole; and boxes, levels and
 * files that are wrong are refused naming the file. */
#include "io/image.h"
#include "io/npy.h"
#include "io/source.h"
#include "testlib.h"

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <tiffio.h>

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

static void check_level_boxes(sg_source *s, int32_t level, const void *whole, cut_fn cut)
{
    const sg_source_info *in = &s->info;
    size_t es = segrt_dtype_size(in->dtype);
    const int64_t *d = in->dims[level];
    uint8_t *buf = malloc((size_t)(in->channels * d[0] * d[1] * d[2]) * es);
    int boxes = 0, bad = 0;
    for (int64_t z0 = 0; z0<d[0]; z0 += d[0]> 2 ? 2 : 1)
        for (int64_t y0 = 0; y0 < d[1]; y0 += 3)
            for (int64_t x0 = 0; x0 < d[2]; x0 += 4)
                for (int64_t h = 1; y0 + h <= d[1]; h += 2)
                    for (int64_t w = 1; x0 + w <= d[2]; w += 3) {
                        sg_box b = {{z0, y0, x0}, {d[0] - z0, h, w}};
                        if (sg_source_read_region(s, level, &b, buf) != SEGRT_OK) {
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
    CHECK_MSG(boxes > 0 && bad == 0, "%s: level %d: %d of %d boxes differ (%s)", s->path, (int)level, bad, boxes,
              bad ? segrt_last_error() : "");
    free(buf);
}

static void check_boxes(sg_source *s, const void *whole, cut_fn cut)
{
    check_level_boxes(s, 0, whole, cut);
}

static const uint8_t *cut_npy(const void *whole, const sg_source_info *in, int64_t c, int64_t z, int64_t y, int64_t x)
{
    return planar_at(whole, in->dims[0], c, z, y, x, segrt_dtype_size(in->dtype));
}

/* The planar level being checked (cut_level's whole): its dims beside the
 * samples. */
typedef struct planar_level {
    int64_t dims[3];
    const uint8_t *data;
} planar_level;

static const uint8_t *cut_level(const void *whole, const sg_source_info *in, int64_t c, int64_t z, int64_t y, int64_t x)
{
    const planar_level *p = whole;
    return planar_at(p->data, p->dims, c, z, y, x, segrt_dtype_size(in->dtype));
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

/* --- TIFF made by libtiff here: tiles and strips, every layout ------------ */

typedef struct tiff_spec {
    uint32_t w, h, pages;
    uint16_t spp, bits, format, photo, planar, comp;
    uint32_t tw, th; /* tiles; 0: strips of rps rows */
    uint32_t rps;
    bool pyramid;    /* pages after 0 are reduced levels, each half the last */
    bool narrow_map; /* a palette's map holds 8-bit values */
} tiff_spec;

static uint32_t page_w(const tiff_spec *t, uint32_t p)
{
    return t->pyramid && p > 0 ? (t->w >> p) + 1 : t->w;
}

static uint32_t page_h(const tiff_spec *t, uint32_t p)
{
    return t->pyramid && p > 0 ? (t->h >> p) + 1 : t->h;
}

/* Sample i of page p: every byte varies, floats stay finite. */
static void fill_sample(const tiff_spec *t, uint32_t p, size_t i, uint8_t *o)
{
    size_t es = t->bits / 8;
    if (t->format == SAMPLEFORMAT_IEEEFP && es == 4) {
        float v = (float)((int)(i * 7 % 1001) - 500) * 0.37f + (float)p;
        memcpy(o, &v, 4);
    } else if (t->format == SAMPLEFORMAT_IEEEFP) {
        double v = (double)((int)(i * 11 % 999) - 400) * 1.25 + p;
        memcpy(o, &v, 8);
    } else {
        for (size_t b = 0; b < es; b++)
            o[b] = (uint8_t)(i * 31 + b * 101 + p * 17 + 3);
    }
}

static uint16_t cmap_of(const tiff_spec *t, int c, int i)
{
    int v = (i * (c + 3) * 29 + c * 50) & 255;
    return t->narrow_map ? (uint16_t)v : (uint16_t)(v << 8 | ((i * 7) & 255));
}

/* Writes the file; returns page p's samples (interleaved) through pages[p]. */
static bool write_tiff(const char *path, const tiff_spec *t, uint8_t **pages)
{
    TIFF *tif = TIFFOpen(path, "w");
    if (!tif)
        return false;
    size_t es = t->bits / 8;
    bool ok = true;
    for (uint32_t p = 0; p < t->pages && ok; p++) {
        uint32_t w = page_w(t, p), h = page_h(t, p);
        size_t n = (size_t)w * h * t->spp;
        pages[p] = malloc(n * es);
        for (size_t i = 0; i < n; i++)
            fill_sample(t, p, i, pages[p] + i * es);
        TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, w);
        TIFFSetField(tif, TIFFTAG_IMAGELENGTH, h);
        TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, t->bits);
        TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, t->spp);
        TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, t->format);
        TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, t->photo);
        TIFFSetField(tif, TIFFTAG_PLANARCONFIG, t->planar);
        TIFFSetField(tif, TIFFTAG_COMPRESSION, t->comp);
        if (t->spp == 2 || t->spp == 4) {
            uint16_t extra[1] = {EXTRASAMPLE_UNASSALPHA};
            TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, 1, extra);
        }
        if (t->pyramid && p > 0)
            TIFFSetField(tif, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
        if (p == 0) {
            TIFFSetField(tif, TIFFTAG_XRESOLUTION, 4.0f);
            TIFFSetField(tif, TIFFTAG_YRESOLUTION, 2.0f);
            TIFFSetField(tif, TIFFTAG_RESOLUTIONUNIT, RESUNIT_CENTIMETER);
        }
        if (t->photo == PHOTOMETRIC_PALETTE) {
            uint16_t r[256], g[256], b[256];
            for (int i = 0; i < 256; i++)
                r[i] = cmap_of(t, 0, i), g[i] = cmap_of(t, 1, i), b[i] = cmap_of(t, 2, i);
            TIFFSetField(tif, TIFFTAG_COLORMAP, r, g, b);
        }
        bool sep = t->planar == PLANARCONFIG_SEPARATE;
        size_t per = sep ? 1 : t->spp, planes = sep ? t->spp : 1;
        if (t->tw) {
            TIFFSetField(tif, TIFFTAG_TILEWIDTH, t->tw);
            TIFFSetField(tif, TIFFTAG_TILELENGTH, t->th);
            uint8_t *tile = malloc((size_t)t->tw * t->th * per * es);
            for (size_t pl = 0; pl < planes && ok; pl++)
                for (uint32_t y = 0; y < h && ok; y += t->th)
                    for (uint32_t x = 0; x < w && ok; x += t->tw) {
                        memset(tile, 0, (size_t)t->tw * t->th * per * es);
                        for (uint32_t r = 0; r < t->th && y + r < h; r++)
                            for (uint32_t c = 0; c < t->tw && x + c < w; c++)
                                for (size_t k = 0; k < per; k++)
                                    memcpy(tile + (((size_t)r * t->tw + c) * per + k) * es,
                                           pages[p] + (((size_t)(y + r) * w + x + c) * t->spp + (sep ? pl : k)) * es,
                                           es);
                        ok = TIFFWriteTile(tif, tile, x, y, 0, (uint16_t)pl) >= 0;
                    }
            free(tile);
        } else {
            TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, t->rps);
            uint8_t *strip = malloc((size_t)t->rps * w * per * es);
            for (size_t pl = 0; pl < planes && ok; pl++)
                for (uint32_t y = 0, k = 0; y < h && ok; y += t->rps, k++) {
                    uint32_t rows = h - y < t->rps ? h - y : t->rps;
                    for (uint32_t r = 0; r < rows; r++)
                        for (uint32_t c = 0; c < w; c++)
                            for (size_t q = 0; q < per; q++)
                                memcpy(strip + (((size_t)r * w + c) * per + q) * es,
                                       pages[p] + (((size_t)(y + r) * w + c) * t->spp + (sep ? pl : q)) * es, es);
                    uint32_t strip_no = (uint32_t)pl * ((h + t->rps - 1) / t->rps) + k;
                    ok = TIFFWriteEncodedStrip(tif, strip_no, strip, (tmsize_t)((size_t)rows * w * per * es)) >= 0;
                }
            free(strip);
        }
        ok = ok && TIFFWriteDirectory(tif);
    }
    TIFFClose(tif);
    return ok;
}

/* What a source should give for the pages first .. first + n - 1 (one
 * level: a volume's pages, or one page of a pyramid), planar. */
static uint8_t *expect_planar(const tiff_spec *t, uint8_t **pages, uint32_t first, uint32_t n, int32_t channels)
{
    uint32_t w = page_w(t, first), h = page_h(t, first);
    size_t es = t->bits / 8, plane = (size_t)w * h * n;
    uint8_t *o = malloc(plane * (size_t)channels * es);
    for (uint32_t z = 0; z < n; z++)
        for (size_t i = 0; i < (size_t)w * h; i++)
            for (int32_t c = 0; c < channels; c++) {
                uint8_t *dst = o + ((size_t)c * plane + (size_t)z * w * h + i) * es;
                const uint8_t *src =
                    pages[first + z] + (i * t->spp + (size_t)(t->photo == PHOTOMETRIC_PALETTE ? 0 : c)) * es;
                if (t->photo == PHOTOMETRIC_PALETTE) {
                    uint16_t v = cmap_of(t, c, src[0]);
                    dst[0] = (uint8_t)(t->narrow_map ? v : v >> 8);
                } else if (t->photo == PHOTOMETRIC_MINISWHITE && c == 0 && es == 1) {
                    dst[0] = (uint8_t)(255 - src[0]);
                } else if (t->photo == PHOTOMETRIC_MINISWHITE && c == 0) {
                    uint16_t v;
                    memcpy(&v, src, 2);
                    v = (uint16_t)(65535 - v);
                    memcpy(dst, &v, 2);
                } else {
                    memcpy(dst, src, es);
                }
            }
    return o;
}

static void tiff_case(const char *what, const tiff_spec *t)
{
    const char *path = in_dir("t.tif");
    uint8_t *pages[8] = {0};
    CHECK_MSG(write_tiff(path, t, pages), "%s: libtiff cannot write it", what);
    sg_source *s;
    sg_status st = sg_source_open(path, &s);
    CHECK_MSG(st == SEGRT_OK, "%s: %s", what, segrt_last_error());
    if (st == SEGRT_OK) {
        const sg_source_info *in = &s->info;
        int32_t channels = t->photo == PHOTOMETRIC_PALETTE ? 3 : t->spp;
        uint32_t depth = t->pyramid ? 1 : t->pages, levels = t->pyramid ? t->pages : 1;
        CHECK_MSG(strcmp(in->format, "tiff") == 0 && in->channels == channels && in->n_levels == (int32_t)levels &&
                      in->n_dims == (depth > 1 ? 3 : 2) && in->dims[0][0] == depth && in->dims[0][1] == t->h &&
                      in->dims[0][2] == t->w && in->spacing[1] == 5.0 && in->spacing[2] == 2.5 &&
                      segrt_dtype_size(in->dtype) == t->bits / 8u && in->tile[1] == (t->tw ? t->th : t->rps) &&
                      in->tile[2] == (t->tw ? t->tw : t->w),
                  "%s: info", what);
        for (uint32_t lv = 0; lv < levels; lv++) {
            uint8_t *exp = expect_planar(t, pages, lv, depth, channels);
            planar_level pl = {{depth, page_h(t, lv), page_w(t, lv)}, exp};
            CHECK(in->dims[lv][1] == pl.dims[1] && in->dims[lv][2] == pl.dims[2]);
            check_level_boxes(s, (int32_t)lv, &pl, cut_level);
            /* read_all is the whole level. */
            sg_tensor all;
            size_t bytes = (size_t)channels * depth * pl.dims[1] * pl.dims[2] * (t->bits / 8);
            CHECK_MSG(sg_source_read_all(s, (int32_t)lv, &all) == SEGRT_OK && sg_tensor_bytes(&all) == bytes &&
                          memcmp(all.data, exp, bytes) == 0,
                      "%s: read_all of level %u", what, lv);
            free(all.data);
            free(exp);
        }
        /* The whole reader gives the same pixels, where it takes the file. */
        sg_image whole;
        if (t->format == SAMPLEFORMAT_UINT && t->bits <= 16 && !t->pyramid) {
            CHECK_MSG(sg_image_read(path, &whole) == SEGRT_OK, "%s: %s", what, segrt_last_error());
            check_boxes(s, &whole, cut_image);
            sg_image_free(&whole);
        } else {
            CHECK(sg_image_read(path, &whole) == SEGRT_ERROR_UNSUPPORTED);
        }
        sg_source_close(s);
    }
    for (int i = 0; i < 8; i++)
        free(pages[i]);
    unlink(path);
}

static void tiff_cases(void)
{
    const uint16_t U = SAMPLEFORMAT_UINT, I = SAMPLEFORMAT_INT, F = SAMPLEFORMAT_IEEEFP;
    const uint16_t CONTIG = PLANARCONFIG_CONTIG, SEP = PLANARCONFIG_SEPARATE;
    const uint16_t GREY = PHOTOMETRIC_MINISBLACK, RGB = PHOTOMETRIC_RGB;
    const uint16_t NONE = COMPRESSION_NONE, DEFL = COMPRESSION_ADOBE_DEFLATE, LZW = COMPRESSION_LZW;
    /* Tiles of several sizes, over images that are not a whole number of
     * them. */
    tiff_spec a = {37, 29, 1, 1, 8, U, GREY, CONTIG, DEFL, 16, 16, 0, false, false};
    tiff_case("8-bit grey, 16x16 tiles", &a);
    tiff_spec b = {37, 29, 1, 3, 16, U, RGB, CONTIG, NONE, 32, 16, 0, false, false};
    tiff_case("16-bit RGB, 32x16 tiles", &b);
    tiff_spec c = {40, 35, 1, 4, 8, U, RGB, SEP, LZW, 16, 48, 0, false, false};
    tiff_case("RGBA separate planes, 16x48 tiles", &c);
    tiff_spec d = {21, 50, 1, 1, 32, F, GREY, CONTIG, DEFL, 16, 32, 0, false, false};
    tiff_case("float32, tiles", &d);
    /* Strips: one row, several, a short last one, separate planes. */
    tiff_spec e = {23, 17, 1, 3, 8, U, RGB, CONTIG, DEFL, 0, 0, 1, false, false};
    tiff_case("RGB, one-row strips", &e);
    tiff_spec f = {23, 17, 1, 2, 16, U, GREY, SEP, NONE, 0, 0, 5, false, false};
    tiff_case("16-bit grey+alpha, separate strips", &f);
    tiff_spec g = {19, 13, 1, 1, 64, F, GREY, CONTIG, LZW, 0, 0, 4, false, false};
    tiff_case("float64 strips", &g);
    tiff_spec h = {19, 13, 1, 1, 16, I, GREY, CONTIG, NONE, 0, 0, 3, false, false};
    tiff_case("int16 strips", &h);
    tiff_spec i = {25, 18, 1, 1, 8, U, PHOTOMETRIC_PALETTE, CONTIG, DEFL, 16, 16, 0, false, false};
    tiff_case("palette, tiles", &i);
    tiff_spec j = {25, 18, 1, 1, 8, U, PHOTOMETRIC_PALETTE, CONTIG, NONE, 0, 0, 7, false, true};
    tiff_case("palette with an 8-bit map, strips", &j);
    tiff_spec k = {20, 11, 1, 1, 16, U, PHOTOMETRIC_MINISWHITE, CONTIG, NONE, 0, 0, 4, false, false};
    tiff_case("16-bit min-is-white", &k);
    tiff_spec l = {20, 11, 1, 2, 8, U, PHOTOMETRIC_MINISWHITE, CONTIG, NONE, 16, 16, 0, false, false};
    tiff_case("8-bit min-is-white with alpha, tiles", &l);
    /* A volume of tiled pages; a pyramid of tiled levels. */
    tiff_spec m = {18, 17, 4, 3, 8, U, RGB, CONTIG, DEFL, 16, 16, 0, false, false};
    tiff_case("a tiled volume", &m);
    tiff_spec n = {45, 38, 3, 1, 16, U, GREY, CONTIG, DEFL, 16, 16, 0, true, false};
    tiff_case("a tiled pyramid", &n);
    tiff_spec o = {45, 38, 3, 3, 8, U, RGB, CONTIG, NONE, 0, 0, 6, true, false};
    tiff_case("a stripped pyramid", &o);
}

/* --- PNG and JPEG, streamed ------------------------------------------------ */

/* Slabs top to bottom (overlapping, as a window job's), then back up (a
 * restart), then one row past a gap: each equals the whole read. */
static void slabs_case(const char *path)
{
    sg_image whole;
    CHECK_MSG(sg_image_read(path, &whole) == SEGRT_OK, "%s: %s", path, segrt_last_error());
    sg_source *s;
    sg_status st = sg_source_open(path, &s);
    CHECK_MSG(st == SEGRT_OK, "%s: %s", path, segrt_last_error());
    if (st != SEGRT_OK) {
        sg_image_free(&whole);
        return;
    }
    const int64_t H = whole.height, W = whole.width;
    size_t es = (size_t)whole.bits / 8;
    uint8_t *buf = malloc((size_t)whole.channels * (size_t)H * (size_t)W * es);
    const int64_t slabs[][2] = {{0, 7}, {5, 9}, {12, 3}, {12, 8}, {30, H - 30}, {2, 4}, {H - 1, 1}, {0, H}, {9, 1}};
    int bad = 0;
    for (size_t k = 0; k < sizeof slabs / sizeof slabs[0]; k++) {
        sg_box b = {{0, slabs[k][0], 3}, {1, slabs[k][1], W - 5}};
        if (sg_source_read_region(s, 0, &b, buf) != SEGRT_OK) {
            bad++;
            continue;
        }
        const uint8_t *o = buf;
        for (int64_t c = 0; c < whole.channels; c++)
            for (int64_t y = 0; y < b.size[1]; y++)
                for (int64_t x = 0; x < b.size[2]; x++, o += es)
                    bad += memcmp(o, cut_image(&whole, &s->info, c, 0, b.start[1] + y, b.start[2] + x), es) != 0;
    }
    CHECK_MSG(bad == 0, "%s: %d samples or slabs differ (%s)", path, bad, segrt_last_error());
    free(buf);
    sg_source_close(s);
    sg_image_free(&whole);
}

static void write_png_file(const char *path, int w, int h, int color, int depth, int interlace)
{
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        CHECK(!"libpng failed");
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    int passes = png_set_interlace_handling(png);
    size_t rb = png_get_rowbytes(png, info);
    uint8_t *row = malloc(rb);
    for (int p = 0; p < passes; p++)
        for (int y = 0; y < h; y++) {
            for (size_t i = 0; i < rb; i++)
                row[i] = (uint8_t)((i * i * 31 + (size_t)y * y * 17) ^ (i * (size_t)y) ^ (i >> 3));
            png_write_row(png, row);
        }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    fclose(f);
}

static void write_jpeg_file(const char *path, int w, int h, int comps, bool progressive)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * (size_t)comps);
    while (c.next_scanline < c.image_height) {
        for (int i = 0; i < w * comps; i++)
            row[i] = (uint8_t)(i * 5 + (int)c.next_scanline * 9);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    fclose(f);
}

static void stream_cases(void)
{
    write_png_file(in_dir("s.png"), 33, 41, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE);
    slabs_case(in_dir("s.png"));
    write_png_file(in_dir("s.png"), 17, 40, PNG_COLOR_TYPE_GRAY_ALPHA, 16, PNG_INTERLACE_NONE);
    slabs_case(in_dir("s.png"));
    write_png_file(in_dir("s.png"), 20, 35, PNG_COLOR_TYPE_GRAY, 4, PNG_INTERLACE_NONE);
    slabs_case(in_dir("s.png"));
    write_png_file(in_dir("s.png"), 19, 37, PNG_COLOR_TYPE_RGB_ALPHA, 8, PNG_INTERLACE_ADAM7);
    slabs_case(in_dir("s.png"));
    write_jpeg_file(in_dir("s.jpg"), 29, 45, 3, false);
    slabs_case(in_dir("s.jpg"));
    write_jpeg_file(in_dir("s.jpg"), 24, 38, 1, true);
    slabs_case(in_dir("s.jpg"));
    /* A PNG cut short: open passes (the probe reads headers), the read
     * that reaches the cut fails naming the file, and a read of the rows
     * before it still works after the failure (the decoder restarts). */
    write_png_file(in_dir("s.png"), 256, 256, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE);
    FILE *f = fopen(in_dir("s.png"), "rb");
    static uint8_t bytes[1 << 20];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    f = fopen(in_dir("s.png"), "wb");
    fwrite(bytes, 1, n * 2 / 3, f);
    fclose(f);
    sg_source *s;
    sg_status st = sg_source_open(in_dir("s.png"), &s);
    if (st == SEGRT_OK) {
        uint8_t *buf = malloc(3 * 256 * 256);
        sg_box all = {{0, 0, 0}, {1, 256, 256}}, top = {{0, 0, 0}, {1, 2, 256}};
        CHECK(sg_source_read_region(s, 0, &all, buf) == SEGRT_ERROR_INVALID_MODEL &&
              strstr(segrt_last_error(), "s.png"));
        CHECK(sg_source_read_region(s, 0, &top, buf) == SEGRT_OK);
        free(buf);
        sg_source_close(s);
    } else {
        CHECK_MSG(st == SEGRT_ERROR_INVALID_MODEL, "%s", segrt_last_error());
    }
    unlink(in_dir("s.png"));
    unlink(in_dir("s.jpg"));
}

/* A tiled TIFF of 5.4 GB of pixels (past the whole reader's 4 GiB cap) in
 * a file of a few MB: the source opens it and reads boxes by parts, which
 * decode only their tiles; the whole read and read_all refuse it. Tile
 * (tx, ty) is filled with (tx * 7 + ty) % 251, coded once by libtiff
 * (deflate) and stored raw for every tile of that value. */
static void big_tiff_by_parts(void)
{
    const char *small = in_dir("codes.tif"), *path = in_dir("big.tif");
    enum { T = 256, VALUES = 251 };
    const uint32_t W = 320 * T, H = 256 * T;
    static uint8_t tile[T * T];
    static uint8_t *codes[VALUES];
    static tmsize_t lens[VALUES];
    TIFF *tif = TIFFOpen(small, "w");
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)T * VALUES);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)T);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
    TIFFSetField(tif, TIFFTAG_TILEWIDTH, T);
    TIFFSetField(tif, TIFFTAG_TILELENGTH, T);
    for (int v = 0; v < VALUES; v++) {
        memset(tile, v, sizeof tile);
        TIFFWriteTile(tif, tile, (uint32_t)v * T, 0, 0, 0);
    }
    TIFFClose(tif);
    tif = TIFFOpen(small, "r");
    for (int v = 0; v < VALUES; v++) {
        lens[v] = (tmsize_t)TIFFGetStrileByteCount(tif, (uint32_t)v);
        codes[v] = malloc((size_t)lens[v]);
        CHECK(TIFFReadRawTile(tif, (uint32_t)v, codes[v], lens[v]) == lens[v]);
    }
    TIFFClose(tif);
    tif = TIFFOpen(path, "w");
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, W);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, H);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
    TIFFSetField(tif, TIFFTAG_TILEWIDTH, T);
    TIFFSetField(tif, TIFFTAG_TILELENGTH, T);
    bool ok = true;
    for (uint32_t ty = 0; ty < H / T && ok; ty++)
        for (uint32_t tx = 0; tx < W / T && ok; tx++) {
            int v = (int)((tx * 7 + ty) % VALUES);
            ok = TIFFWriteRawTile(tif, TIFFComputeTile(tif, tx * T, ty * T, 0, 0), codes[v], lens[v]) == lens[v];
        }
    TIFFClose(tif);
    CHECK(ok);
    for (int v = 0; v < VALUES; v++)
        free(codes[v]);
    sg_image img;
    CHECK(sg_image_read(path, &img) == SEGRT_ERROR_INVALID_MODEL);
    sg_source *s;
    sg_status st = sg_source_open(path, &s);
    CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
    if (st == SEGRT_OK) {
        CHECK(s->info.dims[0][1] == H && s->info.dims[0][2] == W && s->info.tile[1] == T && s->info.tile[2] == T);
        /* Boxes over tile corners, near the start and the far end. */
        const int64_t at[][2] = {{0, 0}, {T - 3, T - 5}, {100 * T - 1, 200 * T - 2}, {H - 9, W - 13}};
        static uint8_t buf[9 * 13];
        int bad = 0;
        for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
            sg_box b = {{0, at[k][0], at[k][1]}, {1, 9, 13}};
            if (b.start[1] + 9 > H)
                b.start[1] = H - 9;
            if (sg_source_read_region(s, 0, &b, buf) != SEGRT_OK) {
                bad++;
                continue;
            }
            for (int64_t y = 0; y < 9; y++)
                for (int64_t x = 0; x < 13; x++) {
                    int64_t ty = (b.start[1] + y) / T, tx = (b.start[2] + x) / T;
                    bad += buf[y * 13 + x] != (uint8_t)((tx * 7 + ty) % VALUES);
                }
        }
        CHECK_MSG(bad == 0, "%d samples or boxes of the big TIFF differ (%s)", bad, segrt_last_error());
        sg_tensor all;
        CHECK(sg_source_read_all(s, 0, &all) == SEGRT_ERROR_INVALID_MODEL && strstr(segrt_last_error(), "regions"));
        sg_source_close(s);
    }
    unlink(small);
    unlink(path);
}

/* A file fuzz_image found (three 8x6 pages in deflate strips of 5 rows):
 * page 0's first strip is a deflate stream that goes bad after 32 bytes
 * (a distance too far back), and libtiff 4.5 reports the whole 40-byte
 * strip read with the last 8 bytes left as they were. The source and the
 * whole reader both give 0 there (before, the source gave the bytes of a
 * strip decoded earlier and the whole reader uninitialised memory) and
 * agree on every sample. */
static const uint8_t bad_deflate_tif[] = {
    0x49, 0x49, 0x2a, 0x00, 0x4e, 0x00, 0x00, 0x00, 0x78, 0x9c, 0x63, 0xf8, 0xfc, 0xec, 0xd6, 0xd9, 0x03, 0x5b, 0x96,
    0xcf, 0xee, 0x6b, 0x2c, 0xcd, 0x88, 0xf6, 0x77, 0x32, 0xd3, 0x94, 0x11, 0x60, 0xfe, 0xfe, 0xea, 0xee, 0xc5, 0x14,
    0xdb, 0x57, 0xcf, 0x9b, 0xd4, 0x5a, 0x91, 0x13, 0x1f, 0xec, 0x66, 0xa9, 0xab, 0x20, 0x0c, 0x00, 0xbb, 0x4c, 0x13,
    0x7c, 0x78, 0x9c, 0x01, 0x08, 0x00, 0xf7, 0xff, 0x07, 0xfa, 0xee, 0xe1, 0xd4, 0xc8, 0xbb, 0xae, 0x18, 0xdb, 0x05,
    0xd6, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x02, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00,
    0x00, 0x00, 0x03, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x06, 0x01, 0x03, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x11, 0x01, 0x04, 0x00, 0x02, 0x00, 0x00, 0x00, 0xcc, 0x00, 0x00, 0x00,
    0x15, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x16, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x05, 0x00, 0x00, 0x00, 0x17, 0x01, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00, 0x32, 0x00, 0x13, 0x00, 0x1c, 0x01,
    0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x1a, 0x01, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x3a,
    0x00, 0x00, 0x00, 0x78, 0x9c, 0x5b, 0x34, 0xb5, 0xb3, 0x26, 0x3f, 0x39, 0xcc, 0xcb, 0xd6, 0x40, 0x45, 0x9c, 0xeb,
    0xdf, 0xc7, 0xa7, 0x37, 0x4e, 0xef, 0xdf, 0xb4, 0x6c, 0x66, 0x4f, 0x43, 0x71, 0x5a, 0x94, 0xaf, 0xa3, 0x89, 0xba,
    0x34, 0x1f, 0xd3, 0xd7, 0x17, 0x77, 0xce, 0x1f, 0xda, 0x06, 0x00, 0x88, 0x5a, 0x13, 0xdb, 0x78, 0x9c, 0x01, 0x08,
    0x00, 0xf7, 0xff, 0xa9, 0x9d, 0x90, 0x83, 0x77, 0x6a, 0x5d, 0x51, 0x13, 0xaf, 0x03, 0xe9, 0x00, 0x0a, 0x00, 0x00,
    0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x06, 0x00, 0x00, 0x00, 0x02, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, 0x01, 0x03,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x06, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x11, 0x01, 0x04, 0x00, 0x02, 0x00, 0x00, 0x00, 0x98, 0x01, 0x00, 0x00, 0x15, 0x01, 0x03, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x16, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00,
    0x17, 0x01, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00, 0x32, 0x00, 0x13, 0x00, 0x1c, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0xe6, 0x01, 0x00, 0x00, 0xd4, 0x00, 0x00, 0x00, 0x06, 0x01, 0x00, 0x00, 0x78, 0x9c,
    0x73, 0xb1, 0xd0, 0x96, 0x13, 0x62, 0xfd, 0xf9, 0xe6, 0xfe, 0xe5, 0x63, 0x3b, 0xd7, 0x2e, 0x98, 0xd2, 0x5e, 0x95,
    0x97, 0x18, 0xea, 0x61, 0xad, 0xaf, 0x24, 0xca, 0xf9, 0xe7, 0xc3, 0xe3, 0x6b, 0xa7, 0xf6, 0x6e, 0x5c, 0x32, 0xbd,
    0xbb, 0xae, 0x30, 0x35, 0x02, 0x00, 0x89, 0x77, 0x14, 0x3a, 0x78, 0x9c, 0x01, 0x08, 0x00, 0xf7, 0xff, 0x4c, 0x3f,
    0x32, 0x26, 0x19, 0x0c, 0x00, 0xf3, 0x07, 0x86, 0x01, 0xfc, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x03, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x02,
    0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x00, 0x00, 0x06, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x11, 0x01, 0x04,
    0x00, 0x02, 0x00, 0x00, 0x00, 0x64, 0x02, 0x00, 0x00, 0x15, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x16, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x17, 0x01, 0x03, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x32, 0x00, 0x13, 0x00, 0x1c, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0xa0, 0x01, 0x00, 0x00, 0xd2, 0x01, 0x00, 0x00,
};

static void short_strip(void)
{
    const char *path = in_dir("short.tif");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(bad_deflate_tif, 1, sizeof bad_deflate_tif, f) == sizeof bad_deflate_tif);
    if (f)
        fclose(f);
    sg_image whole;
    sg_source *s = NULL;
    sg_tensor all = {0};
    sg_status r = sg_image_read(path, &whole), o = sg_source_open(path, &s);
    if (o == SEGRT_OK) /* page 1 first: the source's buffer then holds a whole strip */
    {
        uint8_t buf[48];
        sg_box page1 = {{1, 0, 0}, {1, 6, 8}};
        o = sg_source_read_region(s, 0, &page1, buf);
    }
    if (o == SEGRT_OK)
        o = sg_source_read_all(s, 0, &all);
    /* A libtiff that reports the bad strip is as good, if both say so. */
    CHECK_MSG((r == SEGRT_OK) == (o == SEGRT_OK), "whole read %d, source %d", (int)r, (int)o);
    if (r == SEGRT_OK && o == SEGRT_OK) {
        const uint8_t *a = all.data;
        int bad = memcmp(a, whole.pixels, 3 * 48) != 0;
        for (int i = 32; i < 40; i++)
            bad += a[i] != 0;
        CHECK_MSG(bad == 0, "a bad deflate strip: %d differences", bad);
        free(all.data);
        sg_image_free(&whole);
    }
    sg_source_close(s);
    unlink(path);
}

/* TIFF files the source refuses, naming the file. */
static void tiff_refusals(void)
{
    const char *path = in_dir("r.tif");
    uint8_t *pages[8] = {0};
    sg_source *s;
    /* Truncated: the strip runs past the end. One strip, so that every
     * value of its directory (which libtiff writes after the data) is in
     * the directory itself, and the directory can be moved down over the
     * data's last 2000 bytes. */
    TIFF *tif = TIFFOpen(path, "w");
    static uint8_t bytes[1 << 16];
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 64);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 64);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 64);
    CHECK(TIFFWriteEncodedStrip(tif, 0, bytes, 64 * 64) == 64 * 64);
    TIFFClose(tif);
    FILE *f = fopen(path, "rb");
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    uint32_t ifd;
    memcpy(&ifd, bytes + 4, 4);
    size_t cut = 2000, ifd_len = n - ifd;
    memmove(bytes + ifd - cut, bytes + ifd, ifd_len);
    ifd -= (uint32_t)cut;
    memcpy(bytes + 4, &ifd, 4);
    f = fopen(path, "wb");
    fwrite(bytes, 1, n - cut, f);
    fclose(f);
    CHECK_MSG(sg_source_open(path, &s) == SEGRT_ERROR_INVALID_MODEL && strstr(segrt_last_error(), "r.tif") &&
                  strstr(segrt_last_error(), "past the end"),
              "%s", segrt_last_error());
    /* A box outside, a level the file lacks. */
    tiff_spec b = {
        20, 20, 1, 1,     8,    SAMPLEFORMAT_UINT, PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE,
        16, 16, 0, false, false};
    CHECK(write_tiff(path, &b, pages));
    free(pages[0]);
    CHECK(sg_source_open(path, &s) == SEGRT_OK);
    uint8_t buf[400];
    sg_box outside = {{0, 10, 10}, {1, 11, 5}}, ok = {{0, 0, 0}, {1, 2, 2}};
    CHECK(sg_source_read_region(s, 0, &outside, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_source_read_region(s, 1, &ok, buf) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_source_close(s);
    /* Complex samples; 32-bit unsigned (no such dtype). */
    tiff_spec c = {
        20, 20, 1,  1,     32,   SAMPLEFORMAT_UINT, PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE,
        0,  0,  20, false, false};
    CHECK(write_tiff(path, &c, pages));
    free(pages[0]);
    CHECK(sg_source_open(path, &s) == SEGRT_ERROR_UNSUPPORTED && strstr(segrt_last_error(), "r.tif"));
    /* A page of another size that is not reduced: neither slice nor level. */
    tif = TIFFOpen(path, "w");
    uint8_t row[64] = {0};
    for (int p = 0; p < 2; p++) {
        TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, p ? 30 : 20);
        TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 10);
        TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
        TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
        TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
        TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 10);
        for (int y = 0; y < 10; y++)
            TIFFWriteScanline(tif, row, (uint32_t)y, 0);
        TIFFWriteDirectory(tif);
    }
    TIFFClose(tif);
    CHECK(sg_source_open(path, &s) == SEGRT_ERROR_UNSUPPORTED && strstr(segrt_last_error(), "page 1"));
    unlink(path);
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
    tiff_cases();
    tiff_refusals();
    big_tiff_by_parts();
    short_strip();
    stream_cases();
    refusals();
    const char *names[] = {"a.npy",   "b.npy",    "c.npy",     "d.npy",    "e.png",
                           "rgb.png", "ga16.png", "stack.tif", "rgba.tiff"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(in_dir(names[i]));
    rmdir(dir);
    return sg_test_finish("test_source");
}
