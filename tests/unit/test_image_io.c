/* Image files: PNG and TIFF round trips at every bit depth and channel
 * count, files written here with libpng, libjpeg and libtiff directly
 * (palettes, interlacing, tiles, separate planes, other codecs), bad files
 * of each format, the size cap, tensors, label maps and overlays. */
#include "io/image.h"
#include "pipeline/overlay.h"
#include "testlib.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <tiffio.h>

static char dir[] = "/tmp/segrt_test_image_XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Pixels that use the whole range of their bits and differ between
 * neighbours, channels and rows. */
static sg_image pattern(int32_t w, int32_t h, int32_t c, int32_t bits)
{
    sg_image img = {.width = w, .height = h, .depth = 1, .channels = c, .bits = bits};
    size_t n = (size_t)w * (size_t)h * (size_t)c;
    img.pixels = malloc(n * (size_t)(bits / 8));
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(i * 2654435761u) >> 7;
        if (bits == 8)
            ((uint8_t *)img.pixels)[i] = (uint8_t)v;
        else
            ((uint16_t *)img.pixels)[i] = (uint16_t)v;
    }
    return img;
}

/* A volume of d pages of pattern's pixels, continuing from page to page. */
static sg_image volume(int32_t w, int32_t h, int32_t d, int32_t c, int32_t bits)
{
    sg_image img = pattern(w, h * d, c, bits);
    img.height = h;
    img.depth = d;
    return img;
}

/* Page k of a volume, as a 2-D image sharing its pixels. */
static sg_image page_of(const sg_image *vol, int32_t k)
{
    sg_image page = *vol;
    page.depth = 1;
    page.pixels = (uint8_t *)vol->pixels + (size_t)k * sg_image_page_bytes(vol);
    return page;
}

static bool same(const sg_image *a, const sg_image *b)
{
    return a->width == b->width && a->height == b->height && a->depth == b->depth && a->channels == b->channels &&
           a->bits == b->bits && memcmp(a->pixels, b->pixels, sg_image_bytes(a)) == 0;
}

/* The largest difference between two 8-bit images of the same shape. */
static int max_diff8(const sg_image *a, const sg_image *b)
{
    int worst = 0;
    for (size_t i = 0; i < sg_image_bytes(a); i++) {
        int d = abs((int)((uint8_t *)a->pixels)[i] - (int)((uint8_t *)b->pixels)[i]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

static bool one_line(const char *msg)
{
    return msg[0] != '\0' && strchr(msg, '\n') == NULL;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
    *n = fread(buf, 1, (size_t)size, f);
    fclose(f);
    return buf;
}

static void spit(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

/* Only the files the test made are in dir: no temporary left behind. */
static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_round_trips(void)
{
    const char *names[] = {"rt.png", "rt.tif", "RT.TIFF"};
    for (size_t f = 0; f < 3; f++)
        for (int32_t bits = 8; bits <= 16; bits += 8)
            for (int32_t c = 1; c <= 4; c++) {
                sg_image img = pattern(37, 23, c, bits), back;
                const char *path = in_dir(names[f]);
                CHECK_MSG(sg_image_write(path, &img) == SEGRT_OK, "%s", sg_last_error());
                CHECK(sg_image_is_image_file(path));
                CHECK_MSG(sg_image_read(path, &back) == SEGRT_OK, "%s", sg_last_error());
                CHECK_MSG(same(&img, &back), "%s %d-bit %d channels", names[f], bits, c);
                sg_image_free(&back);
                sg_image_free(&img);
                CHECK(img.pixels == NULL);
                unlink(path);
            }
    /* Large enough for several strips and deflate blocks. */
    for (size_t f = 0; f < 2; f++) {
        sg_image img = pattern(301, 517, 4, 16), back;
        CHECK(sg_image_write(in_dir(names[f]), &img) == SEGRT_OK);
        CHECK(sg_image_read(in_dir(names[f]), &back) == SEGRT_OK && same(&img, &back));
        sg_image_free(&back);
        sg_image_free(&img);
        unlink(in_dir(names[f]));
    }
    CHECK(files_in_dir() == 0);
}

static void test_write_errors(void)
{
    sg_image img = pattern(4, 4, 3, 8);
    CHECK(sg_image_write(in_dir("x.jpg"), &img) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(sg_image_write(in_dir("x.bmp"), &img) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_image_write(in_dir("noext"), &img) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_image_write("/nonexistent/dir/x.png", &img) == SEGRT_ERROR_IO);
    CHECK(strstr(sg_last_error(), "/nonexistent/dir/x.png") != NULL);
    CHECK(sg_image_write("/nonexistent/dir/x.tif", &img) == SEGRT_ERROR_IO);
    CHECK(one_line(sg_last_error()));
    sg_image bad = img;
    bad.bits = 12;
    CHECK(sg_image_write(in_dir("x.png"), &bad) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(files_in_dir() == 0);
    /* An existing file is replaced whole. */
    spit(in_dir("x.png"), "old", 3);
    CHECK(sg_image_write(in_dir("x.png"), &img) == SEGRT_OK);
    sg_image back;
    CHECK(sg_image_read(in_dir("x.png"), &back) == SEGRT_OK && same(&img, &back));
    sg_image_free(&back);
    unlink(in_dir("x.png"));
    CHECK(files_in_dir() == 0);
    sg_image_free(&img);
}

static void test_formats(void)
{
    CHECK(sg_image_format_of_bytes("\x89PNG\r\n\x1a\n", 8) == SG_IMAGE_PNG);
    CHECK(sg_image_format_of_bytes("\x89PNG\r\n\x1a", 7) == SG_IMAGE_UNKNOWN);
    CHECK(sg_image_format_of_bytes("\xff\xd8\xff\xe0", 4) == SG_IMAGE_JPEG);
    CHECK(sg_image_format_of_bytes("II*\0", 4) == SG_IMAGE_TIFF);
    CHECK(sg_image_format_of_bytes("MM\0*", 4) == SG_IMAGE_TIFF);
    CHECK(sg_image_format_of_bytes("II+\0", 4) == SG_IMAGE_TIFF);
    CHECK(sg_image_format_of_bytes("BM", 2) == SG_IMAGE_UNKNOWN);
    CHECK(sg_image_format_of_bytes("", 0) == SG_IMAGE_UNKNOWN);
    CHECK(sg_image_format_of_name("a/b.PNG") == SG_IMAGE_PNG);
    CHECK(sg_image_format_of_name("b.jpeg") == SG_IMAGE_JPEG);
    CHECK(sg_image_format_of_name("b.JPG") == SG_IMAGE_JPEG);
    CHECK(sg_image_format_of_name("b.tif") == SG_IMAGE_TIFF);
    CHECK(sg_image_format_of_name("b.Tiff") == SG_IMAGE_TIFF);
    CHECK(sg_image_format_of_name("dir.png/b") == SG_IMAGE_UNKNOWN);
    CHECK(sg_image_format_of_name("b.npy") == SG_IMAGE_UNKNOWN);
    /* By content, not by name. */
    sg_image img = pattern(5, 3, 1, 8), back;
    CHECK(sg_image_write(in_dir("a.tif"), &img) == SEGRT_OK);
    char from[512];
    snprintf(from, sizeof from, "%s", in_dir("a.tif"));
    rename(from, in_dir("a.png"));
    CHECK_MSG(sg_image_read(in_dir("a.png"), &back) == SEGRT_OK && same(&img, &back), "%s", sg_last_error());
    sg_image_free(&back);
    unlink(in_dir("a.png"));
    sg_image_free(&img);
    sg_image none;
    CHECK(sg_image_read(in_dir("missing.png"), &none) == SEGRT_ERROR_IO);
    CHECK(sg_image_read(dir, &none) == SEGRT_ERROR_IO);
    CHECK(!sg_image_is_image_file(dir) && !sg_image_is_image_file(in_dir("missing.png")));
    spit(in_dir("empty.png"), "", 0);
    CHECK(sg_image_read(in_dir("empty.png"), &none) == SEGRT_ERROR_INVALID_MODEL);
    spit(in_dir("text.png"), "hello, world", 12);
    CHECK(sg_image_read(in_dir("text.png"), &none) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(strstr(sg_last_error(), "text.png") != NULL && one_line(sg_last_error()));
    CHECK(!sg_image_is_image_file(in_dir("text.png")));
    unlink(in_dir("empty.png"));
    unlink(in_dir("text.png"));
}

/* --- files written with the libraries themselves ---------------------------- */

typedef struct png_spec {
    int color, depth, interlace;
    int n_palette;
    int n_trans;
} png_spec;

/* Writes rows (already in PNG's byte order and packing) with libpng. */
static void write_png(const char *path, int w, int h, const png_spec *s, const uint8_t *rows, size_t row_bytes)
{
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, s->depth, s->color, s->interlace, 0, 0);
    if (s->n_palette) {
        png_color pal[16];
        for (int i = 0; i < 16; i++)
            pal[i] = (png_color){(png_byte)(i * 16), (png_byte)(255 - i * 8), (png_byte)(i * 3)};
        png_set_PLTE(png, info, pal, s->n_palette);
    }
    if (s->n_trans) {
        png_byte alpha[16];
        for (int i = 0; i < 16; i++)
            alpha[i] = (png_byte)(i * 17);
        png_set_tRNS(png, info, alpha, s->n_trans, NULL);
    }
    png_write_info(png, info);
    for (int y = 0, passes = png_set_interlace_handling(png); passes-- > 0; y = 0)
        for (; y < h; y++)
            png_write_row(png, rows + (size_t)y * row_bytes);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

static void test_png_kinds(void)
{
    enum { W = 13, H = 9 };
    uint8_t rows[H][W];
    /* 4-bit palette indices, two a byte, high nibble first. */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            rows[y][x] = (uint8_t)(((2 * x) % 16) << 4 | ((2 * x + 1 + y) % 16));
    png_spec pal = {PNG_COLOR_TYPE_PALETTE, 4, PNG_INTERLACE_NONE, 16, 6};
    write_png(in_dir("pal.png"), 2 * W - 1, H, &pal, &rows[0][0], W);
    sg_image img;
    CHECK_MSG(sg_image_read(in_dir("pal.png"), &img) == SEGRT_OK, "%s", sg_last_error());
    CHECK(img.channels == 4 && img.bits == 8 && img.width == 2 * W - 1 && img.height == H);
    bool ok = img.pixels != NULL;
    for (int y = 0; ok && y < H; y++)
        for (int x = 0; x < 2 * W - 1; x++) {
            int i = x % 2 ? (2 * (x / 2) + 1 + y) % 16 : (2 * (x / 2)) % 16;
            const uint8_t *p = (uint8_t *)img.pixels + 4 * ((size_t)y * img.width + x);
            ok = ok && p[0] == i * 16 && p[1] == 255 - i * 8 && p[2] == i * 3 && p[3] == (i < 6 ? i * 17 : 255);
        }
    CHECK_MSG(ok, "palette + tRNS expanded to RGBA");
    sg_image_free(&img);

    /* The same without tRNS: RGB; interlaced. */
    pal.n_trans = 0;
    pal.interlace = PNG_INTERLACE_ADAM7;
    write_png(in_dir("pal.png"), 2 * W, H, &pal, &rows[0][0], W);
    CHECK(sg_image_read(in_dir("pal.png"), &img) == SEGRT_OK && img.channels == 3 && img.bits == 8);
    /* Row 1, column 1: index (1 + 1) % 16 = 2. */
    CHECK(img.pixels && ((uint8_t *)img.pixels)[0] == 0 && ((uint8_t *)img.pixels)[3 * (2 * W + 1)] == 2 * 16);
    sg_image_free(&img);

    /* 1-bit grey to 0 and 255. */
    png_spec bw = {PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE, 0, 0};
    uint8_t bits[2][2] = {{0xA0, 0x00}, {0x5F, 0xC0}};
    write_png(in_dir("bw.png"), 10, 2, &bw, &bits[0][0], 2);
    CHECK(sg_image_read(in_dir("bw.png"), &img) == SEGRT_OK && img.channels == 1 && img.bits == 8);
    const uint8_t want[2][10] = {{255, 0, 255, 0, 0, 0, 0, 0, 0, 0}, {0, 255, 0, 255, 255, 255, 255, 255, 255, 255}};
    CHECK(img.pixels && memcmp(img.pixels, want, sizeof want) == 0);
    sg_image_free(&img);

    /* 16-bit RGB, interlaced, big-endian in the file. */
    sg_image ref = pattern(11, 7, 3, 16);
    uint8_t be[7][11 * 6];
    for (int y = 0; y < 7; y++)
        for (int i = 0; i < 33; i++) {
            uint16_t v = ((uint16_t *)ref.pixels)[y * 33 + i];
            be[y][2 * i] = (uint8_t)(v >> 8);
            be[y][2 * i + 1] = (uint8_t)v;
        }
    png_spec rgb16 = {PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_ADAM7, 0, 0};
    write_png(in_dir("rgb16.png"), 11, 7, &rgb16, &be[0][0], sizeof be[0]);
    CHECK(sg_image_read(in_dir("rgb16.png"), &img) == SEGRT_OK && same(&ref, &img));
    sg_image_free(&img);
    sg_image_free(&ref);
    unlink(in_dir("pal.png"));
    unlink(in_dir("bw.png"));
    unlink(in_dir("rgb16.png"));
}

/* How encode_jpeg codes; a loop over `bool prog` passes 0 or 1. */
enum { JPEG_BASELINE = 0, JPEG_PROGRESSIVE = 1, JPEG_ARITHMETIC = 2 };

/* A JPEG of img (8-bit, 1 or 3 channels; or 4 as CMYK) in memory. */
static uint8_t *encode_jpeg(const sg_image *img, int coding, int quality, size_t *n)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &buf, &size);
    c.image_width = (JDIMENSION)img->width;
    c.image_height = (JDIMENSION)img->height;
    c.input_components = img->channels;
    c.in_color_space = img->channels == 1 ? JCS_GRAYSCALE : img->channels == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    if (coding == JPEG_PROGRESSIVE)
        jpeg_simple_progression(&c);
    c.arith_code = coding == JPEG_ARITHMETIC;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)img->pixels + (size_t)c.next_scanline * sg_image_row_bytes(img);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *n = size;
    return buf;
}

/* A smooth image: what JPEG keeps nearly exactly at high quality. */
static sg_image smooth(int32_t w, int32_t h, int32_t c)
{
    sg_image img = {.width = w, .height = h, .depth = 1, .channels = c, .bits = 8, .pixels = malloc((size_t)w * h * c)};
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++)
            for (int32_t k = 0; k < c; k++)
                ((uint8_t *)img.pixels)[((size_t)y * w + x) * c + k] = (uint8_t)(20 + 2 * x + 2 * y + 30 * k);
    return img;
}

static void test_jpeg(void)
{
    for (int32_t c = 1; c <= 3; c += 2)
        for (int prog = 0; prog < 2; prog++) {
            sg_image ref = smooth(40, 24, c), img;
            size_t n = 0;
            uint8_t *bytes = encode_jpeg(&ref, prog, 100, &n);
            spit(in_dir("a.jpg"), bytes, n);
            CHECK_MSG(sg_image_read(in_dir("a.jpg"), &img) == SEGRT_OK, "%s", sg_last_error());
            CHECK(img.width == 40 && img.height == 24 && img.channels == c && img.bits == 8);
            CHECK_MSG(img.pixels && max_diff8(&ref, &img) <= 4, "JPEG %d channel(s) differs by %d", c,
                      img.pixels ? max_diff8(&ref, &img) : -1);
            sg_image_free(&img);
            free(bytes);
            sg_image_free(&ref);
        }
    sg_image cmyk = smooth(16, 16, 4), img;
    size_t n = 0;
    uint8_t *bytes = encode_jpeg(&cmyk, JPEG_BASELINE, 90, &n);
    CHECK(sg_image_read_memory(bytes, n, "cmyk.jpg", &img) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(strstr(sg_last_error(), "cmyk.jpg") && strstr(sg_last_error(), "CMYK"));
    free(bytes);
    sg_image_free(&cmyk);
    unlink(in_dir("a.jpg"));
}

/* --- TIFF kinds ------------------------------------------------------------------ */

typedef struct tiff_spec {
    uint16_t photometric, planar, compression;
    uint32_t tile; /* 0: strips of 5 rows */
    const char *mode;
} tiff_spec;

/* Writes img (one page, interleaved, host order) as the current directory
 * of t, as s says. */
static void write_page(TIFF *t, const sg_image *img, const tiff_spec *s)
{
    uint16_t spp = (uint16_t)img->channels, extra[1] = {EXTRASAMPLE_ASSOCALPHA};
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)img->width);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)img->height);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, (uint16_t)img->bits);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, spp);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s->photometric);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, s->planar);
    TIFFSetField(t, TIFFTAG_COMPRESSION, s->compression);
    if (spp == 2 || spp == 4)
        TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, extra);
    if (s->photometric == PHOTOMETRIC_PALETTE) {
        uint16_t r[256], g[256], b[256];
        for (int i = 0; i < 256; i++) {
            r[i] = (uint16_t)(i * 257);
            g[i] = (uint16_t)((255 - i) * 257);
            b[i] = (uint16_t)((i / 2) * 257);
        }
        TIFFSetField(t, TIFFTAG_COLORMAP, r, g, b);
    }
    if (s->compression == COMPRESSION_JPEG) {
        TIFFSetField(t, TIFFTAG_JPEGQUALITY, 100);
        TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    }
    size_t sample = (size_t)img->bits / 8;
    int planes = s->planar == PLANARCONFIG_SEPARATE ? spp : 1;
    size_t px = planes > 1 ? sample : sample * spp, full = sample * spp;
    uint32_t bw = s->tile ? s->tile : (uint32_t)img->width, bh = s->tile ? s->tile : 5;
    uint8_t *buf = calloc((size_t)bw * bh, px);
    if (s->tile) {
        TIFFSetField(t, TIFFTAG_TILEWIDTH, s->tile);
        TIFFSetField(t, TIFFTAG_TILELENGTH, s->tile);
    } else {
        TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, bh);
    }
    for (int p = 0; p < planes; p++)
        for (uint32_t y0 = 0; y0 < (uint32_t)img->height; y0 += bh)
            for (uint32_t x0 = 0; x0 < (uint32_t)img->width; x0 += bw) {
                memset(buf, 0, (size_t)bw * bh * px);
                uint32_t rows = 0;
                for (uint32_t y = y0; y < y0 + bh && y < (uint32_t)img->height; y++, rows++)
                    for (uint32_t x = x0; x < x0 + bw && x < (uint32_t)img->width; x++) {
                        const uint8_t *src = (uint8_t *)img->pixels + ((size_t)y * img->width + x) * full;
                        uint8_t *dst = buf + ((size_t)(y - y0) * bw + (x - x0)) * px;
                        memcpy(dst, planes > 1 ? src + p * sample : src, px);
                    }
                if (s->tile)
                    TIFFWriteEncodedTile(t, TIFFComputeTile(t, x0, y0, 0, (uint16_t)p), buf,
                                         (tmsize_t)((size_t)bw * bh * px));
                else
                    TIFFWriteEncodedStrip(t, TIFFComputeStrip(t, y0, (uint16_t)p), buf,
                                          (tmsize_t)((size_t)rows * bw * px));
            }
    free(buf);
}

/* Writes img through libtiff as s says: a page for each of its pages. */
static void write_tiff(const char *path, const sg_image *img, const tiff_spec *s)
{
    TIFF *t = TIFFOpen(path, s->mode);
    for (int32_t k = 0; k < img->depth; k++) {
        sg_image page = page_of(img, k);
        write_page(t, &page, s);
        TIFFWriteDirectory(t);
    }
    TIFFClose(t);
}

static void test_tiff_kinds(void)
{
    const struct {
        int32_t c, bits;
        tiff_spec s;
    } cases[] = {
        {3, 16, {PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 16, "w"}},
        {3, 16, {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_ADOBE_DEFLATE, 16, "w"}},
        {4, 8, {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_LZW, 0, "w"}},
        {2, 16, {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_PACKBITS, 0, "wb"}},
        {1, 16, {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 32, "wb8"}},
        {3, 8, {PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 32, "wl"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sg_image ref = pattern(37, 23, cases[i].c, cases[i].bits), img;
        write_tiff(in_dir("k.tif"), &ref, &cases[i].s);
        CHECK_MSG(sg_image_read(in_dir("k.tif"), &img) == SEGRT_OK, "case %zu: %s", i, sg_last_error());
        CHECK_MSG(img.pixels && same(&ref, &img), "TIFF case %zu", i);
        /* The memory reader (the fuzzer's) gives the same. */
        size_t n = 0;
        uint8_t *bytes = slurp(in_dir("k.tif"), &n);
        sg_image mem;
        CHECK(sg_image_read_memory(bytes, n, "k.tif", &mem) == SEGRT_OK && same(&ref, &mem));
        sg_image_free(&mem);
        free(bytes);
        sg_image_free(&img);
        sg_image_free(&ref);
    }

    /* Min-is-white grey comes back as min-is-black. */
    sg_image ref = pattern(9, 6, 1, 8), img;
    tiff_spec white = {PHOTOMETRIC_MINISWHITE, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_tiff(in_dir("k.tif"), &ref, &white);
    CHECK(sg_image_read(in_dir("k.tif"), &img) == SEGRT_OK);
    CHECK(img.pixels && ((uint8_t *)img.pixels)[7] == 255 - ((uint8_t *)ref.pixels)[7]);
    sg_image_free(&img);

    /* A palette through its 16-bit colour map. */
    tiff_spec pal = {PHOTOMETRIC_PALETTE, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_tiff(in_dir("k.tif"), &ref, &pal);
    CHECK_MSG(sg_image_read(in_dir("k.tif"), &img) == SEGRT_OK, "%s", sg_last_error());
    CHECK(img.channels == 3 && img.bits == 8);
    uint8_t i5 = ((uint8_t *)ref.pixels)[5];
    CHECK(img.pixels && ((uint8_t *)img.pixels)[15] == i5 && ((uint8_t *)img.pixels)[16] == 255 - i5 &&
          ((uint8_t *)img.pixels)[17] == i5 / 2);
    sg_image_free(&img);
    /* Cut inside its colour map: libtiff drops the map and calls the image
     * grey; segrt calls the file truncated. */
    size_t n = 0;
    uint8_t *bytes = slurp(in_dir("k.tif"), &n);
    CHECK(sg_image_read_memory(bytes, n - 3, "cut.tif", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), "ColorMap") != NULL, "%s", sg_last_error());
    free(bytes);
    sg_image_free(&ref);

    /* JPEG-compressed YCbCr tiles, as scanners write them (whole tiles:
     * write_tiff pads partial ones with black, which JPEG smears). */
    sg_image sm = smooth(32, 32, 3);
    tiff_spec ycc = {PHOTOMETRIC_YCBCR, PLANARCONFIG_CONTIG, COMPRESSION_JPEG, 16, "w"};
    write_tiff(in_dir("k.tif"), &sm, &ycc);
    CHECK_MSG(sg_image_read(in_dir("k.tif"), &img) == SEGRT_OK, "%s", sg_last_error());
    CHECK_MSG(img.pixels && img.channels == 3 && max_diff8(&sm, &img) <= 6, "YCbCr JPEG TIFF differs by %d",
              img.pixels ? max_diff8(&sm, &img) : -1);
    sg_image_free(&img);
    sg_image_free(&sm);

    /* Two pages of different sizes: refused, naming the page (the first
     * alone used to be read). */
    sg_image p0 = pattern(8, 8, 1, 8), p1 = pattern(16, 4, 3, 16);
    TIFF *t = TIFFOpen(in_dir("k.tif"), "w");
    tiff_spec plain = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_page(t, &p0, &plain);
    TIFFWriteDirectory(t);
    plain.photometric = PHOTOMETRIC_RGB;
    write_page(t, &p1, &plain);
    TIFFClose(t);
    CHECK(sg_image_read(in_dir("k.tif"), &img) == SEGRT_ERROR_UNSUPPORTED && img.pixels == NULL);
    CHECK_MSG(strstr(sg_last_error(), "page 1 is 16x4, page 0 is 8x8"), "%s", sg_last_error());
    sg_image_free(&p0);
    sg_image_free(&p1);

    /* Float samples: well-formed, not taken. */
    t = TIFFOpen(in_dir("k.tif"), "w");
    float fl[4] = {0.5f, 1, 2, 3};
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 2u);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, 2u);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 32);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFWriteEncodedStrip(t, 0, fl, sizeof fl);
    TIFFClose(t);
    CHECK(sg_image_read(in_dir("k.tif"), &img) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(strstr(sg_last_error(), "floating-point") != NULL && one_line(sg_last_error()));
    unlink(in_dir("k.tif"));
}

/* --- multi-page TIFF -------------------------------------------------------------- */

/* Reads path by name, from memory and by probe, and checks each gives
 * want (a volume), voxel for voxel. */
static void check_volume(const char *path, const sg_image *want, const char *what)
{
    sg_image img;
    CHECK_MSG(sg_image_read(path, &img) == SEGRT_OK, "%s: %s", what, sg_last_error());
    CHECK_MSG(img.pixels && same(want, &img), "%s: %dx%dx%d pages %d, want %dx%dx%d pages %d", what, img.width,
              img.height, img.channels, img.depth, want->width, want->height, want->channels, want->depth);
    sg_image_free(&img);
    size_t n = 0;
    uint8_t *bytes = slurp(path, &n);
    CHECK_MSG(sg_image_read_memory(bytes, n, "m.tif", &img) == SEGRT_OK && same(want, &img), "%s (memory): %s",
              what, sg_last_error());
    sg_image_free(&img);
    sg_image_info a, b;
    CHECK_MSG(sg_image_probe(path, &a) == SEGRT_OK && sg_image_probe_memory(bytes, n, "m.tif", &b) == SEGRT_OK,
              "%s (probe): %s", what, sg_last_error());
    CHECK_MSG(a.format == SG_IMAGE_TIFF && a.width == want->width && a.height == want->height &&
                  a.depth == want->depth && a.channels == want->channels && a.bits == want->bits &&
                  a.pixel_bytes == sg_image_bytes(want) && a.scratch_bytes > 0 && memcmp(&a, &b, sizeof a) == 0,
              "%s: the probe says %dx%dx%d, %d pages, %d-bit", what, a.width, a.height, a.channels, a.depth, a.bits);
    free(bytes);
}

static void test_volumes(void)
{
    const struct {
        int32_t c, bits, pages;
        tiff_spec s;
    } cases[] = {
        {1, 8, 5, {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"}},
        {1, 16, 4, {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 16, "w"}},
        {3, 8, 3, {PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 0, "w"}},
        {3, 16, 3, {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_ADOBE_DEFLATE, 0, "wb"}},
        {3, 8, 2, {PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 32, "w8"}},
        {2, 16, 3, {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_PACKBITS, 0, "wl"}},
        {4, 8, 2, {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_NONE, 16, "w"}},
        {1, 16, 2, {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 16, "wb8"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sg_image ref = volume(37, 23, cases[i].pages, cases[i].c, cases[i].bits);
        write_tiff(in_dir("v.tif"), &ref, &cases[i].s);
        char what[64];
        snprintf(what, sizeof what, "volume case %zu", i);
        check_volume(in_dir("v.tif"), &ref, what);
        sg_image_free(&ref);
    }

    /* Pages may be stored each their own way: strips, tiles, separate
     * planes, other codecs. */
    sg_image mixed = volume(37, 23, 4, 3, 16);
    const tiff_spec ways[4] = {{PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"},
                               {PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 32, "w"},
                               {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_LZW, 0, "w"},
                               {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_PACKBITS, 16, "w"}};
    TIFF *tm = TIFFOpen(in_dir("v.tif"), "w");
    for (int32_t k = 0; k < 4; k++) {
        sg_image page = page_of(&mixed, k);
        write_page(tm, &page, &ways[k]);
        TIFFWriteDirectory(tm);
    }
    TIFFClose(tm);
    check_volume(in_dir("v.tif"), &mixed, "pages stored four ways");
    sg_image_free(&mixed);

    /* A tensor of a volume is 1 x C x D x H x W. */
    sg_image vol = volume(5, 3, 4, 4, 16), img;
    sg_tensor t;
    CHECK(sg_image_to_tensor(&vol, false, &t) == SEGRT_OK);
    CHECK(t.rank == 5 && t.dims[0] == 1 && t.dims[1] == 3 && t.dims[2] == 4 && t.dims[3] == 3 && t.dims[4] == 5);
    /* channel 2, page 3, row 1, column 4 */
    CHECK(t.data && ((float *)t.data)[((2 * 4 + 3) * 3 + 1) * 5 + 4] ==
                        (float)((uint16_t *)vol.pixels)[((3 * 3 + 1) * 5 + 4) * 4 + 2]);
    free(t.data);
    /* Written as a TIFF of a page a slice, read back the same; a PNG holds
     * one picture, and there is no overlay of a volume. */
    CHECK(sg_image_write(in_dir("v.tif"), &vol) == SEGRT_OK);
    check_volume(in_dir("v.tif"), &vol, "a volume written by segrt");
    CHECK(sg_image_write(in_dir("v.png"), &vol) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(strstr(sg_last_error(), "4 pages") != NULL);
    uint8_t lab[15] = {0};
    sg_tensor labels = {SEGRT_DTYPE_UINT8, 2, {3, 5}, lab};
    CHECK(sg_overlay_render(&vol, &labels, NULL, &img) == SEGRT_ERROR_UNSUPPORTED);
    sg_image_free(&vol);

    /* The pixel cap is the volume's. */
    vol = volume(16, 16, 8, 1, 16);
    tiff_spec deflate = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 0, "w"};
    write_tiff(in_dir("v.tif"), &vol, &deflate);
    size_t n = 0;
    uint8_t *bytes = slurp(in_dir("v.tif"), &n);
    sg_image_info info;
    CHECK(sg_image_read_memory_max(bytes, n, "v.tif", 16 * 16 * 2 * 8 - 1, &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), "16x16 image, 8 pages,"), "%s", sg_last_error());
    CHECK(sg_image_probe_memory_max(bytes, n, "v.tif", 16 * 16 * 2 * 8 - 1, &info) == SEGRT_ERROR_INVALID_MODEL);
    CHECK(sg_image_read_memory_max(bytes, n, "v.tif", 16 * 16 * 2 * 8, &img) == SEGRT_OK && same(&vol, &img));
    sg_image_free(&img);
    free(bytes);

    /* Min-is-white pages each come back min-is-black; palette pages each
     * through their colour map. */
    sg_image grey = volume(9, 6, 3, 1, 8);
    tiff_spec white = {PHOTOMETRIC_MINISWHITE, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 0, "w"};
    write_tiff(in_dir("v.tif"), &grey, &white);
    CHECK(sg_image_read(in_dir("v.tif"), &img) == SEGRT_OK && img.depth == 3);
    CHECK(img.pixels && ((uint8_t *)img.pixels)[2 * 54 + 7] == 255 - ((uint8_t *)grey.pixels)[2 * 54 + 7]);
    sg_image_free(&img);
    tiff_spec pal = {PHOTOMETRIC_PALETTE, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_tiff(in_dir("v.tif"), &grey, &pal);
    CHECK_MSG(sg_image_read(in_dir("v.tif"), &img) == SEGRT_OK, "%s", sg_last_error());
    CHECK(img.depth == 3 && img.channels == 3);
    uint8_t i5 = ((uint8_t *)grey.pixels)[2 * 54 + 5];
    const uint8_t *p5 = img.pixels ? (uint8_t *)img.pixels + 3 * (2 * 54 + 5) : NULL;
    CHECK(p5 && p5[0] == i5 && p5[1] == 255 - i5 && p5[2] == i5 / 2);
    sg_image_free(&img);
    sg_image_free(&grey);

    /* SubIFDs (an OME-TIFF's reduced levels of a plane) are not pages. */
    TIFF *tf = TIFFOpen(in_dir("v.tif"), "w");
    sg_image small = pattern(18, 11, 1, 16);
    tiff_spec strips = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 0, "w"};
    for (int32_t k = 0; k < vol.depth; k++) {
        sg_image page = page_of(&vol, k);
        if (k == 1) {
            toff_t sub[1] = {0};
            TIFFSetField(tf, TIFFTAG_SUBIFD, 1, sub);
        }
        write_page(tf, &page, &strips);
        TIFFWriteDirectory(tf);
        if (k == 1) { /* the SubIFD follows its parent */
            TIFFSetField(tf, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
            write_page(tf, &small, &strips);
            TIFFWriteDirectory(tf);
        }
    }
    TIFFClose(tf);
    check_volume(in_dir("v.tif"), &vol, "SubIFD");
    sg_image_free(&small);
    sg_image_free(&vol);
    unlink(in_dir("v.tif"));
}

/* Writes pages whose k-th image is imgs[k] (and whose NewSubfileType is
 * subfile[k] where subfile is given), each as s says, and checks the read
 * is refused as UNSUPPORTED with a message holding want. */
static void check_refused(const sg_image *imgs, int n, const uint32_t *subfile, const tiff_spec *s,
                          const char *want)
{
    TIFF *t = TIFFOpen(in_dir("r.tif"), "w");
    for (int k = 0; k < n; k++) {
        if (subfile)
            TIFFSetField(t, TIFFTAG_SUBFILETYPE, subfile[k]);
        write_page(t, &imgs[k], s);
        TIFFWriteDirectory(t);
    }
    TIFFClose(t);
    sg_image img;
    sg_image_info info;
    CHECK(sg_image_read(in_dir("r.tif"), &img) == SEGRT_ERROR_UNSUPPORTED && img.pixels == NULL);
    CHECK_MSG(strstr(sg_last_error(), want) && strstr(sg_last_error(), "r.tif") && one_line(sg_last_error()),
              "want \"%s\": %s", want, sg_last_error());
    CHECK(sg_image_probe(in_dir("r.tif"), &info) == SEGRT_ERROR_UNSUPPORTED && strstr(sg_last_error(), want));
    unlink(in_dir("r.tif"));
}

static void test_volumes_refused(void)
{
    tiff_spec s = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 0, "w"};
    sg_image p[4] = {pattern(37, 23, 1, 8), pattern(37, 23, 1, 8), pattern(37, 23, 1, 8), pattern(37, 20, 1, 8)};
    check_refused(p, 4, NULL, &s, "page 3 is 37x20, page 0 is 37x23");
    sg_image_free(&p[3]);
    p[3] = pattern(37, 23, 1, 16);
    check_refused(p, 4, NULL, &s, "page 3 has 16-bit samples, page 0 8-bit");
    sg_image_free(&p[3]);
    p[3] = pattern(37, 23, 2, 8);
    check_refused(p, 4, NULL, &s, "page 3 has 2 samples per pixel, page 0 has 1");
    sg_image_free(&p[3]);

    /* A palette page among grey ones: the same samples, not the same
     * image. */
    TIFF *t = TIFFOpen(in_dir("r.tif"), "w");
    tiff_spec pal = {PHOTOMETRIC_PALETTE, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_page(t, &p[0], &s);
    TIFFWriteDirectory(t);
    write_page(t, &p[1], &pal);
    TIFFClose(t);
    sg_image img;
    CHECK(sg_image_read(in_dir("r.tif"), &img) == SEGRT_ERROR_UNSUPPORTED);
    CHECK_MSG(strstr(sg_last_error(), "page 1 reads as 3 channel(s)"), "%s", sg_last_error());

    /* A float page. */
    t = TIFFOpen(in_dir("r.tif"), "w");
    write_page(t, &p[0], &s);
    TIFFWriteDirectory(t);
    float fl[4] = {0.5f, 1, 2, 3};
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 37u);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, 23u);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_INT);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFWriteEncodedStrip(t, 0, fl, sizeof fl);
    TIFFClose(t);
    CHECK(sg_image_read(in_dir("r.tif"), &img) == SEGRT_ERROR_UNSUPPORTED);
    CHECK_MSG(strstr(sg_last_error(), "page 1 has signed integers samples, page 0 unsigned integers"), "%s",
              sg_last_error());

    /* Pyramids: reduced levels marked so, or only smaller. */
    sg_image levels[3] = {pattern(64, 48, 3, 8), pattern(32, 24, 3, 8), pattern(16, 12, 3, 8)};
    tiff_spec rgb = {PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 16, "w"};
    const uint32_t reduced[3] = {0, FILETYPE_REDUCEDIMAGE, FILETYPE_REDUCEDIMAGE};
    check_refused(levels, 3, reduced, &rgb, "page 1 is a reduced-resolution image");
    check_refused(levels, 3, NULL, &rgb, "page 1 is 32x24, smaller than page 0 (64x48) both ways: a pyramid");
    /* A thumbnail of the same size after a stack is no slice either. */
    sg_image stack[3] = {levels[0], levels[0], levels[0]};
    check_refused(stack, 3, reduced, &rgb, "page 1 is a reduced-resolution image");
    for (int k = 0; k < 3; k++)
        sg_image_free(&levels[k]);
    for (int k = 0; k < 3; k++)
        sg_image_free(&p[k]);
    unlink(in_dir("r.tif"));
}

/* --- bad files ------------------------------------------------------------------ */

/* Every prefix, every single-byte corruption and a run of garbage after
 * the signature: each read ends with a status, and a failure with one
 * line naming the file. Returns how many prefixes were refused. */
static int mangle(const uint8_t *good, size_t n, const char *name, size_t must_fail_below)
{
    int refused = 0;
    uint8_t *buf = malloc(n + 64);
    for (size_t len = 0; len < n; len++) {
        sg_image img;
        memcpy(buf, good, len);
        sg_status s = sg_image_read_memory(buf, len, name, &img);
        if (s == SEGRT_OK) {
            CHECK_MSG(len >= must_fail_below, "%s cut to %zu bytes was read", name, len);
            sg_image_free(&img);
        } else {
            refused++;
            CHECK(s == SEGRT_ERROR_INVALID_MODEL || s == SEGRT_ERROR_UNSUPPORTED);
            CHECK_MSG(strstr(sg_last_error(), name) && one_line(sg_last_error()), "%s", sg_last_error());
        }
    }
    uint32_t rng = 12345;
    for (size_t i = 0; i < n; i++) {
        memcpy(buf, good, n);
        rng = rng * 1103515245u + 12345u;
        buf[i] ^= (uint8_t)(1u << (rng >> 16) % 8);
        sg_image img;
        if (sg_image_read_memory(buf, n, name, &img) == SEGRT_OK)
            sg_image_free(&img);
        else
            CHECK_MSG(one_line(sg_last_error()), "%s", sg_last_error());
    }
    memcpy(buf, good, 8);
    for (size_t i = 8; i < n + 64; i++) {
        rng = rng * 1103515245u + 12345u;
        buf[i] = (uint8_t)(rng >> 16);
    }
    sg_image img;
    sg_status s = sg_image_read_memory(buf, n + 64, name, &img);
    CHECK(s != SEGRT_OK);
    if (s == SEGRT_OK)
        sg_image_free(&img);
    free(buf);
    return refused;
}

static void test_bad_files(void)
{
    sg_image ref = pattern(19, 11, 3, 8);
    size_t n = 0;
    CHECK(sg_image_write(in_dir("g.png"), &ref) == SEGRT_OK);
    uint8_t *png = slurp(in_dir("g.png"), &n);
    /* The pixels are all there once IDAT is: only IEND (12 bytes) may go. */
    CHECK(mangle(png, n, "g.png", n - 12) > 0);
    free(png);

    CHECK(sg_image_write(in_dir("g.tif"), &ref) == SEGRT_OK);
    uint8_t *tif = slurp(in_dir("g.tif"), &n);
    CHECK(mangle(tif, n, "g.tif", n) > 0);
    free(tif);
    /* Uncompressed, tiled, big-endian too. */
    tiff_spec tiles = {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_NONE, 16, "wb"};
    write_tiff(in_dir("g.tif"), &ref, &tiles);
    tif = slurp(in_dir("g.tif"), &n);
    CHECK(mangle(tif, n, "t.tif", 8) > 0);
    free(tif);

    sg_image sm = smooth(24, 16, 3);
    uint8_t *jpg = encode_jpeg(&sm, JPEG_PROGRESSIVE, 90, &n);
    CHECK(mangle(jpg, n, "g.jpg", n) > 0);
    free(jpg);
    sg_image_free(&sm);
    sg_image_free(&ref);

    sg_image img;
    CHECK(sg_image_read_memory("\x89PNG\r\n\x1a\n", 8, "sig.png", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK(sg_image_read_memory("II*\0", 4, "sig.tif", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK(sg_image_read_memory("\xff\xd8\xff", 3, "sig.jpg", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK(sg_image_read_memory("GIF89a", 6, "x.gif", &img) == SEGRT_ERROR_UNSUPPORTED);
    /* Each library's own words come through. */
    uint8_t *bytes = slurp(in_dir("g.png"), &n);
    CHECK(sg_image_read_memory(bytes, n / 2, "half.png", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), "half.png: bad PNG: ") != NULL, "%s", sg_last_error());
    free(bytes);
    bytes = slurp(in_dir("g.tif"), &n);
    bytes[2] = 99;
    CHECK(sg_image_read_memory(bytes, n, "v99.tif", &img) == SEGRT_ERROR_UNSUPPORTED); /* no longer TIFF */
    memcpy(bytes, "II*\0\xff\xff\xff\x7f", 8);
    CHECK(sg_image_read_memory(bytes, n, "far.tif", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), "far.tif: bad TIFF: ") && one_line(sg_last_error()), "%s", sg_last_error());
    free(bytes);
    unlink(in_dir("g.png"));
    unlink(in_dir("g.tif"));
}

/* --- the size cap ------------------------------------------------------------------ */

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c >> 1 ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A PNG signature, an IHDR declaring w x h RGBA at 16 bits and the header
 * of an empty IDAT: a reader that allocates first asks for w * h * 8
 * bytes. */
static size_t png_header(uint8_t *b, uint32_t w, uint32_t h)
{
    memcpy(b, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    put32(b + 16, w);
    put32(b + 20, h);
    memcpy(b + 24, "\x10\x06\0\0\0", 5);
    put32(b + 29, crc32_of(b + 12, 17));
    memcpy(b + 33, "\0\0\0\0IDAT", 8);
    put32(b + 41, crc32_of(b + 37, 4));
    return 45;
}

static void test_size_cap(void)
{
    uint8_t b[64];
    sg_image img;
    size_t n = png_header(b, 100000, 100000); /* 80 GB */
    CHECK(sg_image_read_memory(b, n, "huge.png", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), "100000x100000") && strstr(sg_last_error(), "more than"), "%s",
              sg_last_error());
    n = png_header(b, 0, 5);
    CHECK(sg_image_read_memory(b, n, "zero.png", &img) == SEGRT_ERROR_INVALID_MODEL);

    /* JPEG: the frame header's dims raised to 65000 x 65000 (12.7 GB). */
    sg_image sm = smooth(8, 8, 3);
    uint8_t *jpg = encode_jpeg(&sm, JPEG_BASELINE, 90, &n);
    for (size_t i = 0; i + 9 < n; i++)
        if (jpg[i] == 0xff && jpg[i + 1] == 0xc0) {
            jpg[i + 5] = jpg[i + 7] = 0xfd;
            jpg[i + 6] = jpg[i + 8] = 0xe8;
            break;
        }
    CHECK(sg_image_read_memory(jpg, n, "huge.jpg", &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK(strstr(sg_last_error(), "65000x65000") != NULL);
    free(jpg);
    sg_image_free(&sm);

    /* TIFF: a directory for 60000 x 60000 RGBA 16-bit (28.8 GB) and no
     * pixel data. */
    TIFF *t = TIFFOpen(in_dir("huge.tif"), "w");
    uint16_t extra[1] = {EXTRASAMPLE_UNASSALPHA};
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 60000u);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, 60000u);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 4);
    TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, extra);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 60000u);
    TIFFWriteRawStrip(t, 0, "x", 1);
    TIFFClose(t);
    CHECK(sg_image_read(in_dir("huge.tif"), &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), "60000x60000") != NULL, "%s", sg_last_error());
    unlink(in_dir("huge.tif"));

    /* A caller's lower cap (the fuzzer's). */
    sg_image ref = pattern(64, 64, 4, 16);
    CHECK(sg_image_write(in_dir("cap.png"), &ref) == SEGRT_OK);
    uint8_t *png = slurp(in_dir("cap.png"), &n);
    CHECK(sg_image_read_memory_max(png, n, "cap.png", 32767, &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK(sg_image_read_memory_max(png, n, "cap.png", 32768, &img) == SEGRT_OK && same(&ref, &img));
    sg_image_free(&img);
    free(png);
    sg_image_free(&ref);
    unlink(in_dir("cap.png"));
}

/* --- claims a file cannot hold ------------------------------------------------------ */

/* A PNG of w x h at depth bits of color type color (a palette gets a
 * PLTE of 16 black entries) whose one IDAT chunk holds idat zero bytes
 * (not a valid deflate stream), then IEND. */
static uint8_t *png_claim(uint32_t w, uint32_t h, int depth, int color, int interlace, uint32_t idat, size_t *n)
{
    uint32_t plte = color == PNG_COLOR_TYPE_PALETTE ? 48 : 0;
    *n = 8 + 25 + (plte ? 12 + plte : 0) + 12 + idat + 12;
    uint8_t *b = calloc(1, *n), *p = b + 33;
    memcpy(b, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    put32(b + 16, w);
    put32(b + 20, h);
    b[24] = (uint8_t)depth;
    b[25] = (uint8_t)color;
    b[28] = (uint8_t)interlace;
    put32(b + 29, crc32_of(b + 12, 17));
    if (plte) {
        put32(p, plte);
        memcpy(p + 4, "PLTE", 4);
        put32(p + 8 + plte, crc32_of(p + 4, 4 + plte));
        p += 12 + plte;
    }
    put32(p, idat);
    memcpy(p + 4, "IDAT", 4);
    put32(p + 8 + idat, crc32_of(p + 4, 4 + idat));
    p += 12 + idat;
    memcpy(p + 4, "IEND", 4);
    put32(p + 8, crc32_of(p + 4, 4));
    return b;
}

/* A reader may allocate this much while refusing a claim: far less than
 * any claim below (at least 400 MB each). */
#define CLAIM_BUDGET ((size_t)128 << 20)

/* In the budget's child: reads and probes the file at arg; returns the
 * read's status when the probe gave the same status and message, with the
 * message in text. */
static int read_claim(void *arg, char *text, size_t cap)
{
    const char *path = arg;
    sg_image img;
    sg_image_info info;
    sg_status s = sg_image_read(path, &img);
    snprintf(text, cap, "%s", sg_last_error());
    if (s == SEGRT_OK) {
        sg_image_free(&img);
        return 100;
    }
    if (sg_image_probe(path, &info) != s || strcmp(text, sg_last_error()) != 0)
        return 101;
    return (int)s;
}

/* Writes the n bytes to a file and checks that reading it in a child of
 * small memory is refused as INVALID_MODEL with a message holding both
 * wants (want2 may be NULL); the memory reader refuses it the same. */
static void check_claim(const char *name, const void *bytes, size_t n, const char *want1, const char *want2)
{
    spit(in_dir(name), bytes, n);
    char text[1024];
    int rc = sg_test_small_memory(CLAIM_BUDGET, read_claim, (void *)in_dir(name), text, sizeof text);
    CHECK_MSG(rc == SEGRT_ERROR_INVALID_MODEL, "%s: %d: %s", name, rc, text);
    CHECK_MSG(strstr(text, name) && strstr(text, want1) && (!want2 || strstr(text, want2)) && one_line(text),
              "%s: %s", name, text);
    sg_image img;
    CHECK(sg_image_read_memory(bytes, n, name, &img) == SEGRT_ERROR_INVALID_MODEL);
    CHECK_MSG(strstr(sg_last_error(), want1) != NULL, "%s: %s", name, sg_last_error());
    unlink(in_dir(name));
}

/* Reads img written as name (by sg_image_write or by the caller, bytes n)
 * back: the checks must not refuse a real file however well it
 * compresses. */
static void check_reads(const char *name, const void *bytes, size_t n, const sg_image *want, int tolerance)
{
    spit(in_dir(name), bytes, n);
    sg_image img;
    CHECK_MSG(sg_image_read(in_dir(name), &img) == SEGRT_OK, "%s: %s", name, sg_last_error());
    CHECK_MSG(img.pixels && img.width == want->width && img.height == want->height &&
                  (tolerance ? max_diff8(want, &img) <= tolerance : same(want, &img)),
              "%s read back differs", name);
    sg_image_free(&img);
    unlink(in_dir(name));
}

/* A flat image: what compresses best. */
static sg_image flat(int32_t w, int32_t h, int32_t c, int32_t bits, uint8_t v)
{
    sg_image img = pattern(w, h, c, bits);
    memset(img.pixels, v, sg_image_bytes(&img));
    return img;
}

static void test_png_claims(void)
{
    /* 2.7 GB of RGB (under the pixel cap) from no compressed data: the
     * claim the issue names. */
    size_t n;
    uint8_t *b = png_claim(30000, 30000, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, 0, &n);
    check_claim("rgb.png", b, n, "30000x30000x3, 8-bit (2.7 GB) from 0 bytes", "1032:1");
    free(b);
    /* Interlaced 16-bit grey, from 1000 bytes: 1.8 GB of rows need more. */
    b = png_claim(30000, 30000, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_ADAM7, 1000, &n);
    check_claim("adam7.png", b, n, "30000x30000x1, 16-bit", "from 1.0 kB of compressed data");
    free(b);
    /* A 4-bit palette counts its rows at 4 bits, expands to RGB. */
    b = png_claim(60000, 20000, 4, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE, 100, &n);
    check_claim("pal.png", b, n, "60000x20000x3, 8-bit (3.6 GB)", "600.0 MB of filtered rows");
    free(b);
    /* The probe of a well-formed header under the cap says what it claims. */
    b = png_claim(3000, 2000, 8, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_INTERLACE_NONE, 12000, &n);
    sg_image_info info;
    CHECK_MSG(sg_image_probe_memory(b, n, "ga.png", &info) == SEGRT_OK, "%s", sg_last_error());
    CHECK(info.format == SG_IMAGE_PNG && info.width == 3000 && info.height == 2000 && info.depth == 1 &&
          info.channels == 2 && info.bits == 8 && info.pixel_bytes == 12000000);
    free(b);

    /* Zeros, deflate's best case, are read. */
    sg_image zeros = flat(4000, 3000, 1, 8, 0);
    CHECK(sg_image_write(in_dir("z.png"), &zeros) == SEGRT_OK);
    uint8_t *png = slurp(in_dir("z.png"), &n);
    check_reads("z.png", png, n, &zeros, 0);
    free(png);
    sg_image_free(&zeros);
}

/* Sets the dims of the frame header (marker sof) to w x h. */
static void set_jpeg_dims(uint8_t *jpg, size_t n, int sof, uint16_t w, uint16_t h)
{
    for (size_t i = 0; i + 9 < n; i++)
        if (jpg[i] == 0xff && jpg[i + 1] == sof) {
            jpg[i + 5] = (uint8_t)(h >> 8);
            jpg[i + 6] = (uint8_t)h;
            jpg[i + 7] = (uint8_t)(w >> 8);
            jpg[i + 8] = (uint8_t)w;
            return;
        }
    CHECK_MSG(false, "no frame header 0x%x", sof);
}

static void test_jpeg_claims(void)
{
    /* 900 MB of grey, 14 million blocks, from a 8x8 file's bytes. */
    sg_image sm = smooth(8, 8, 1), sm3 = smooth(8, 8, 3);
    size_t n;
    uint8_t *jpg = encode_jpeg(&sm, JPEG_BASELINE, 90, &n);
    set_jpeg_dims(jpg, n, 0xc0, 30000, 30000);
    check_claim("grey.jpg", jpg, n, "30000x30000x1, 8-bit (900.0 MB)", "14062500 8x8 blocks need at least 1.8 MB");
    free(jpg);
    /* Progressive 4:2:0 colour: its chroma's blocks are counted at their
     * sampling (a quarter each). */
    jpg = encode_jpeg(&sm3, JPEG_PROGRESSIVE, 90, &n);
    set_jpeg_dims(jpg, n, 0xc2, 24000, 16000);
    check_claim("prog.jpg", jpg, n, "24000x16000x3, 8-bit (1.2 GB)", "9000000 8x8 blocks");
    free(jpg);
    /* Arithmetic coding: the fixed ratio. */
    jpg = encode_jpeg(&sm, JPEG_ARITHMETIC, 75, &n);
    set_jpeg_dims(jpg, n, 0xc9, 30000, 30000);
    check_claim("arith.jpg", jpg, n, "arithmetic-coded JPEG claims 30000x30000x1", "32768 times its size");
    free(jpg);
    sg_image_free(&sm);
    sg_image_free(&sm3);

    /* Real files at their most compressible are read: a flat grey image
     * (about 6 bits a block; progressive, its DC scan alone is at least one
     * bit a block) and an arithmetic-coded one. */
    sg_image grey = flat(2048, 2048, 1, 8, 77);
    for (int prog = 0; prog < 2; prog++) {
        jpg = encode_jpeg(&grey, prog, 50, &n);
        check_reads("flat.jpg", jpg, n, &grey, 1);
        free(jpg);
    }
    sg_image_free(&grey);
    sg_image rgb = smooth(40, 24, 3);
    jpg = encode_jpeg(&rgb, JPEG_ARITHMETIC, 75, &n);
    check_reads("arith.jpg", jpg, n, &rgb, 4);
    free(jpg);
    sg_image_free(&rgb);
}

/* Finds tag in the first directory of a little-endian classic TIFF and
 * sets its value (a LONG held in the entry) to v. */
static void set_tiff_tag(uint8_t *b, uint16_t tag, uint32_t v)
{
    uint32_t ifd = b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24;
    uint16_t count = (uint16_t)(b[ifd] | b[ifd + 1] << 8);
    for (uint16_t i = 0; i < count; i++) {
        uint8_t *e = b + ifd + 2 + 12 * i;
        if ((e[0] | e[1] << 8) == tag) {
            e[8] = (uint8_t)v;
            e[9] = (uint8_t)(v >> 8);
            e[10] = (uint8_t)(v >> 16);
            e[11] = (uint8_t)(v >> 24);
            return;
        }
    }
    CHECK_MSG(false, "no tag %u", tag);
}

/* A TIFF of pages of w x h 8-bit grey in strips of rps rows (or tiles of
 * tile x tile) compressed as compression, each strip or tile of one raw
 * byte. */
static uint8_t *tiff_claim(uint32_t w, uint32_t h, int pages, uint32_t rps, uint32_t tile, uint16_t compression,
                           size_t *n)
{
    TIFF *t = TIFFOpen(in_dir("claim.tif"), "w");
    for (int k = 0; k < pages; k++) {
        TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
        TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
        TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
        TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
        TIFFSetField(t, TIFFTAG_COMPRESSION, compression);
        if (tile) {
            TIFFSetField(t, TIFFTAG_TILEWIDTH, tile);
            TIFFSetField(t, TIFFTAG_TILELENGTH, tile);
            for (uint32_t i = 0; i < TIFFNumberOfTiles(t); i++)
                TIFFWriteRawTile(t, i, "x", 1);
        } else {
            TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, rps);
            for (uint32_t i = 0; i < TIFFNumberOfStrips(t); i++)
                TIFFWriteRawStrip(t, i, "x", 1);
        }
        TIFFWriteDirectory(t);
    }
    TIFFClose(t);
    uint8_t *b = slurp(in_dir("claim.tif"), n);
    unlink(in_dir("claim.tif"));
    return b;
}

static void test_tiff_claims(void)
{
    /* Uncompressed, libtiff takes a strip's byte count for a mistake and
     * makes one up from the image's size, which runs past the end. */
    size_t n;
    uint8_t *b = tiff_claim(30000, 30000, 1, 30000, 0, COMPRESSION_NONE, &n);
    check_claim("none.tif", b, n, "strip 0 (bytes 8 to ", "runs past the end of the file");
    free(b);
    b = tiff_claim(30000, 30000, 1, 30000, 0, COMPRESSION_ADOBE_DEFLATE, &n);
    check_claim("one.tif", b, n, "30000x30000x1, 8-bit (900.0 MB), 900.0 MB decoded from 1 byte of strip and tile data",
                "; with AdobeDeflate that is at most 5.1 kB (1032:1)");
    free(b);
    b = tiff_claim(30000, 30000, 1, 100, 0, COMPRESSION_ADOBE_DEFLATE, &n);
    check_claim("deflate.tif", b, n, "from 300 bytes of strip and tile data", "(1032:1)");
    free(b);
    b = tiff_claim(20000, 20000, 1, 0, 256, COMPRESSION_LZW, &n);
    check_claim("lzw.tif", b, n, "(400.0 MB), 409.0 MB decoded from 6.2 kB of strip and tile data",
                "with LZW that is at most 10.6 MB (1704:1)");
    free(b);
    b = tiff_claim(30000, 30000, 1, 30000, 0, COMPRESSION_PACKBITS, &n);
    check_claim("packbits.tif", b, n, "PackBits", "(64:1)");
    free(b);
    /* Each page a little, the volume too much. */
    b = tiff_claim(3000, 3000, 50, 3000, 0, COMPRESSION_LZW, &n);
    check_claim("pages.tif", b, n, "3000x3000x1, 50 pages, 8-bit (450.0 MB), 450.0 MB decoded from 50 bytes", NULL);
    free(b);
    /* A strip past the end of the file. */
    b = tiff_claim(30000, 30000, 1, 30000, 0, COMPRESSION_ADOBE_DEFLATE, &n);
    set_tiff_tag(b, TIFFTAG_STRIPOFFSETS, 0x7fff0000u);
    check_claim("past.tif", b, n, "strip 0 (bytes 2147418112 to 2147418113) runs past the end of the file", NULL);
    free(b);

    /* Zeros, deflate's and zstd's best case, are read. */
    sg_image zeros = flat(4000, 3000, 1, 8, 0);
    CHECK(sg_image_write(in_dir("z.tif"), &zeros) == SEGRT_OK);
    uint8_t *tif = slurp(in_dir("z.tif"), &n);
    check_reads("z.tif", tif, n, &zeros, 0);
    free(tif);
    if (TIFFIsCODECConfigured(COMPRESSION_ZSTD)) {
        tiff_spec zstd = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_ZSTD, 512, "w"};
        write_tiff(in_dir("zstd.tif"), &zeros, &zstd);
        tif = slurp(in_dir("zstd.tif"), &n);
        check_reads("zstd.tif", tif, n, &zeros, 0);
        free(tif);
        unlink(in_dir("zstd.tif"));
    }
    sg_image_free(&zeros);
}


/* --- tensors and label maps ------------------------------------------------------ */

static void test_tensors(void)
{
    sg_image img = pattern(5, 3, 4, 16);
    sg_tensor t;
    CHECK(sg_image_to_tensor(&img, false, &t) == SEGRT_OK);
    CHECK(t.dtype == SEGRT_DTYPE_FLOAT32 && t.rank == 4 && t.dims[0] == 1 && t.dims[1] == 3 && t.dims[2] == 3 &&
          t.dims[3] == 5);
    const uint16_t *p = img.pixels;
    const float *f = t.data;
    /* channel 2, row 1, column 4 */
    CHECK(f[2 * 15 + 1 * 5 + 4] == (float)p[(1 * 5 + 4) * 4 + 2]);
    free(t.data);
    CHECK(sg_image_to_tensor(&img, true, &t) == SEGRT_OK && t.dims[1] == 4);
    f = t.data;
    CHECK(f[3 * 15 + 2 * 5 + 1] == (float)p[(2 * 5 + 1) * 4 + 3]);
    free(t.data);
    sg_image_free(&img);
    img = pattern(4, 2, 2, 8);
    CHECK(sg_image_to_tensor(&img, false, &t) == SEGRT_OK && t.dims[1] == 1);
    CHECK(((float *)t.data)[5] == (float)((uint8_t *)img.pixels)[10]);
    free(t.data);
    sg_image_free(&img);

    uint16_t lab16[2 * 3] = {0, 1, 2, 300, 65535, 7};
    sg_tensor labels = {SEGRT_DTYPE_UINT16, 4, {1, 1, 2, 3}, lab16};
    CHECK(sg_image_from_labels(&labels, &img) == SEGRT_OK);
    CHECK(img.width == 3 && img.height == 2 && img.channels == 1 && img.bits == 16);
    CHECK(img.pixels && memcmp(img.pixels, lab16, sizeof lab16) == 0);
    CHECK(sg_image_write(in_dir("labels.png"), &img) == SEGRT_OK);
    sg_image back;
    CHECK(sg_image_read(in_dir("labels.png"), &back) == SEGRT_OK && same(&img, &back));
    sg_image_free(&back);
    sg_image_free(&img);
    unlink(in_dir("labels.png"));
    uint8_t lab8[4] = {0, 1, 2, 3};
    sg_tensor l8 = {SEGRT_DTYPE_UINT8, 2, {2, 2}, lab8};
    CHECK(sg_image_from_labels(&l8, &img) == SEGRT_OK && img.bits == 8);
    sg_image_free(&img);
    sg_tensor two = {SEGRT_DTYPE_UINT8, 4, {1, 2, 1, 2}, lab8};
    CHECK(sg_image_from_labels(&two, &img) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_tensor fl = {SEGRT_DTYPE_FLOAT32, 2, {1, 1}, lab8};
    CHECK(sg_image_from_labels(&fl, &img) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_tensor empty = {SEGRT_DTYPE_UINT8, 2, {0, 4}, lab8};
    CHECK(sg_image_from_labels(&empty, &img) == SEGRT_ERROR_INVALID_ARGUMENT);
}

/* --- overlays ------------------------------------------------------------------------ */

static const uint8_t *px(const sg_image *img, int x, int y)
{
    return (const uint8_t *)img->pixels + 3 * ((size_t)y * img->width + x);
}

static void test_overlay(void)
{
    enum { W = 10, H = 8 };
    sg_image base = {.width = W, .height = H, .depth = 1, .channels = 1, .bits = 8, .pixels = malloc(W * H)};
    memset(base.pixels, 100, W * H);
    /* Label 2 on columns 1..8 of rows 1..6, label 1 on a 2 x 2 inside. */
    int64_t lab[H][W] = {{0}};
    for (int y = 1; y <= 6; y++)
        for (int x = 1; x <= 8; x++)
            lab[y][x] = (x == 3 || x == 4) && (y == 3 || y == 4) ? 1 : 2;
    sg_tensor labels = {SEGRT_DTYPE_INT64, 4, {1, 1, H, W}, lab};
    sg_image out;
    CHECK_MSG(sg_overlay_render(&base, &labels, NULL, &out) == SEGRT_OK, "%s", sg_last_error());
    CHECK(out.width == W && out.height == H && out.channels == 3 && out.bits == 8);
    const uint8_t *c1 = sg_overlay_color(1), *c2 = sg_overlay_color(2);
    CHECK(memcmp(c1, c2, 3) != 0);
    CHECK(memcmp(px(&out, 0, 0), "\x64\x64\x64", 3) == 0); /* background untouched */
    CHECK(memcmp(px(&out, 1, 1), c2, 3) == 0);             /* label 2 next to background */
    CHECK(memcmp(px(&out, 3, 3), c1, 3) == 0);             /* label 1 next to label 2 */
    CHECK(memcmp(px(&out, 2, 3), c2, 3) == 0);             /* label 2 next to label 1 */
    /* Label 2 inside its region: 60 % grey, 40 % colour. */
    const uint8_t *in = px(&out, 6, 3);
    for (int k = 0; k < 3; k++)
        CHECK_MSG(abs(in[k] - (int)(0.6 * 100 + 0.4 * c2[k] + 0.5)) <= 1, "channel %d: %d", k, in[k]);
    sg_image_free(&out);

    /* Without boundaries every labelled pixel is blended; alpha 1 is the
     * colour itself. */
    sg_overlay_options o;
    sg_overlay_options_default(&o);
    CHECK(o.alpha == 0.4f && o.boundaries);
    o.alpha = 1.0f;
    o.boundaries = false;
    CHECK(sg_overlay_render(&base, &labels, &o, &out) == SEGRT_OK);
    CHECK(memcmp(px(&out, 3, 3), c1, 3) == 0 && memcmp(px(&out, 6, 3), c2, 3) == 0);
    sg_image_free(&out);
    o.alpha = 0.0f;
    CHECK(sg_overlay_render(&base, &labels, &o, &out) == SEGRT_OK);
    CHECK(memcmp(px(&out, 3, 3), "\x64\x64\x64", 3) == 0);
    sg_image_free(&out);
    o.alpha = 1.5f;
    CHECK(sg_overlay_render(&base, &labels, &o, &out) == SEGRT_ERROR_INVALID_ARGUMENT);

    /* A 16-bit RGBA base: stretched from its min to its max, alpha ignored. */
    sg_image b16 = {.width = 2, .height = 1, .depth = 1, .channels = 4, .bits = 16, .pixels = malloc(16)};
    uint16_t v[8] = {1000, 2000, 3000, 0, 1000, 1000, 1000, 65535};
    memcpy(b16.pixels, v, sizeof v);
    uint8_t none[2] = {0, 0};
    sg_tensor l0 = {SEGRT_DTYPE_UINT8, 2, {1, 2}, none};
    CHECK(sg_overlay_render(&b16, &l0, NULL, &out) == SEGRT_OK);
    CHECK(memcmp(px(&out, 0, 0), "\x00\x80\xff", 3) == 0 && memcmp(px(&out, 1, 0), "\0\0\0", 3) == 0);
    sg_image_free(&out);
    sg_image_free(&b16);

    /* Sizes that differ: both named. */
    sg_tensor wrong = {SEGRT_DTYPE_INT64, 4, {1, 1, W, H}, lab};
    CHECK(sg_overlay_render(&base, &wrong, NULL, &out) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(sg_last_error(), "10x8") && strstr(sg_last_error(), "8x10"), "%s", sg_last_error());
    sg_tensor fl = {SEGRT_DTYPE_FLOAT32, 4, {1, 1, H, W}, lab};
    CHECK(sg_overlay_render(&base, &fl, NULL, &out) == SEGRT_ERROR_INVALID_ARGUMENT);
    /* Labels past the palette repeat it. */
    CHECK(memcmp(sg_overlay_color(1 + SG_OVERLAY_COLORS), c1, 3) == 0);
    sg_image_free(&base);
}

/* test_image_io --seeds DIR writes the fuzzer's seed corpus
 * (tests/fuzz/seeds/image/): one tiny file of each kind read here. */
static int write_seeds(const char *out)
{
    char path[512];
#define SEED(name) (snprintf(path, sizeof path, "%s/%s", out, name), path)
    sg_image g8 = pattern(8, 8, 1, 8), rgba16 = pattern(4, 4, 4, 16), ga16 = pattern(6, 5, 2, 16);
    sg_image sm = smooth(16, 16, 3), sm1 = smooth(8, 8, 1);
    bool ok = sg_image_write(SEED("grey8.png"), &g8) == SEGRT_OK &&
              sg_image_write(SEED("rgba16.png"), &rgba16) == SEGRT_OK &&
              sg_image_write(SEED("grey8_deflate.tif"), &g8) == SEGRT_OK &&
              sg_image_write(SEED("ga16_deflate.tif"), &ga16) == SEGRT_OK;
    uint8_t rows[4][4];
    for (int i = 0; i < 16; i++)
        rows[i / 4][i % 4] = (uint8_t)(i * 37);
    png_spec pal = {PNG_COLOR_TYPE_PALETTE, 4, PNG_INTERLACE_ADAM7, 16, 5};
    write_png(SEED("pal4_trns_interlaced.png"), 8, 4, &pal, &rows[0][0], 4);
    png_spec bw = {PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE, 0, 0};
    write_png(SEED("grey1.png"), 30, 4, &bw, &rows[0][0], 4);
    size_t n;
    uint8_t *jpg = encode_jpeg(&sm, JPEG_PROGRESSIVE, 50, &n);
    spit(SEED("rgb_progressive.jpg"), jpg, n);
    free(jpg);
    jpg = encode_jpeg(&sm1, JPEG_BASELINE, 50, &n);
    spit(SEED("grey.jpg"), jpg, n);
    free(jpg);
    tiff_spec tiles = {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_LZW, 16, "wb"};
    write_tiff(SEED("rgb_tiles_separate_lzw_be.tif"), &sm, &tiles);
    tiff_spec strips = {PHOTOMETRIC_MINISWHITE, PLANARCONFIG_CONTIG, COMPRESSION_PACKBITS, 0, "w"};
    write_tiff(SEED("white_strips_packbits.tif"), &g8, &strips);
    tiff_spec pal8 = {PHOTOMETRIC_PALETTE, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_tiff(SEED("palette8.tif"), &sm1, &pal8);
    tiff_spec ycc = {PHOTOMETRIC_YCBCR, PLANARCONFIG_CONTIG, COMPRESSION_JPEG, 16, "w"};
    write_tiff(SEED("ycbcr_jpeg_tiles.tif"), &sm, &ycc);
    tiff_spec big = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w8"};
    write_tiff(SEED("bigtiff16.tif"), &ga16, &big);
    /* Volumes: a grey stack in deflate strips, an RGB stack whose pages
     * are stored two ways, and a two-level pyramid (refused). */
    sg_image stack = volume(8, 6, 3, 1, 8), rgb = volume(16, 16, 2, 3, 16);
    tiff_spec stack_strips = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_ADOBE_DEFLATE, 0, "w"};
    write_tiff(SEED("stack3_deflate.tif"), &stack, &stack_strips);
    TIFF *t = TIFFOpen(SEED("stack2_rgb16_tiles_lzw_strips_none.tif"), "w");
    tiff_spec rgb_ways[2] = {{PHOTOMETRIC_RGB, PLANARCONFIG_CONTIG, COMPRESSION_LZW, 16, "w"},
                             {PHOTOMETRIC_RGB, PLANARCONFIG_SEPARATE, COMPRESSION_NONE, 0, "w"}};
    for (int32_t k = 0; k < 2; k++) {
        sg_image page = page_of(&rgb, k);
        write_page(t, &page, &rgb_ways[k]);
        TIFFWriteDirectory(t);
    }
    TIFFClose(t);
    t = TIFFOpen(SEED("pyramid2.tif"), "w");
    tiff_spec grey_strips = {PHOTOMETRIC_MINISBLACK, PLANARCONFIG_CONTIG, COMPRESSION_NONE, 0, "w"};
    write_page(t, &g8, &grey_strips);
    TIFFWriteDirectory(t);
    sg_image half = pattern(4, 4, 1, 8);
    TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
    write_page(t, &half, &grey_strips);
    TIFFClose(t);
    sg_image_free(&half);
    sg_image_free(&stack);
    sg_image_free(&rgb);
#undef SEED
    sg_image_free(&g8);
    sg_image_free(&rgba16);
    sg_image_free(&ga16);
    sg_image_free(&sm);
    sg_image_free(&sm1);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--seeds") == 0)
        return write_seeds(argv[2]);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_formats();
    test_round_trips();
    test_write_errors();
    test_png_kinds();
    test_jpeg();
    test_tiff_kinds();
    test_volumes();
    test_volumes_refused();
    test_bad_files();
    test_size_cap();
    test_png_claims();
    test_jpeg_claims();
    test_tiff_claims();
    test_tensors();
    test_overlay();
    CHECK(files_in_dir() == 0);
    rmdir(dir);
    return sg_test_finish("test_image_io");
}
