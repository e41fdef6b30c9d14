/* PNG through libpng 1.6: errors come back through setjmp/longjmp on a
 * per-read handler (libpng's default handler would print to stderr), and
 * nothing global is touched. */
#include "io/image.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deflate's largest expansion: a 258-byte match coded in 2 bits (a 1-bit
 * length code and a 1-bit distance code in a dynamic block) gives 1032
 * bytes out per byte in, and nothing codes more output per bit. zlib gets
 * about 1030:1 on zeros. */
#define PNG_DEFLATE_MAX_RATIO 1032
/* Output the ratio does not account for: a stream's first byte is a
 * literal, and the smallest images are all header. Any file this lets
 * through is tiny. */
#define PNG_DEFLATE_SLACK 4096

/* What libpng's callbacks need: the input (reads), the first message. */
typedef struct png_job {
    const uint8_t *bytes;
    size_t n, pos;
    char msg[256];
} png_job;

static void on_error(png_structp png, png_const_charp msg)
{
    png_job *job = png_get_error_ptr(png);
    sg_image_one_line(job->msg, sizeof job->msg, msg);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk, a known-incorrect sRGB profile) do not
 * touch pixel values. */
static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void read_bytes(png_structp png, png_bytep data, size_t len)
{
    png_job *job = png_get_io_ptr(png);
    if (len > job->n - job->pos)
        png_error(png, "the file ends early (truncated)");
    memcpy(data, job->bytes + job->pos, len);
    job->pos += len;
}

static bool little_endian(void)
{
    const uint16_t one = 1;
    uint8_t low;
    memcpy(&low, &one, 1);
    return low == 1;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The bytes of compressed pixel data the file holds: the lengths of its
 * IDAT chunks, each cut to what is left of the file. The walk over the
 * chunk headers stops at IEND or where a chunk runs past the end (libpng
 * then reports the damage); it never reads a chunk's data. */
static uint64_t idat_bytes(const uint8_t *b, size_t n)
{
    uint64_t sum = 0;
    for (size_t pos = 8; n >= pos + 8;) {
        uint64_t len = be32(b + pos), left = n - pos - 8;
        if (memcmp(b + pos + 4, "IDAT", 4) == 0)
            sum += len < left ? len : left;
        if (memcmp(b + pos + 4, "IEND", 4) == 0 || len + 4 > left)
            break;
        pos += 12 + (size_t)len;
    }
    return sum;
}

/* a * b, or UINT64_MAX where that would wrap. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

/* The bytes deflate must give for the image: each row's filter byte and
 * its samples packed at the file's depth, over Adam7's seven passes when
 * interlaced (a pass with no pixels has no rows). */
static uint64_t filtered_bytes(uint32_t width, uint32_t height, int depth, int color, int interlace)
{
    uint64_t samples = color == PNG_COLOR_TYPE_RGB_ALPHA    ? 4
                       : color == PNG_COLOR_TYPE_RGB        ? 3
                       : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                            : 1,
             bpp = samples * (uint64_t)depth;
    if (interlace == PNG_INTERLACE_NONE)
        return mul_sat(height, 1 + ((uint64_t)width * bpp + 7) / 8);
    static const uint8_t x0[7] = {0, 4, 0, 2, 0, 1, 0}, y0[7] = {0, 0, 4, 0, 2, 0, 1};
    static const uint8_t dx[7] = {8, 8, 4, 4, 2, 2, 1}, dy[7] = {8, 8, 8, 4, 4, 2, 2};
    uint64_t sum = 0;
    for (int p = 0; p < 7; p++) {
        uint64_t cols = width > x0[p] ? (width - x0[p] + dx[p] - 1) / dx[p] : 0;
        uint64_t rows = height > y0[p] ? (height - y0[p] + dy[p] - 1) / dy[p] : 0;
        if (cols && rows) {
            uint64_t pass = mul_sat(rows, 1 + (cols * bpp + 7) / 8);
            sum = pass > UINT64_MAX - sum ? UINT64_MAX : sum + pass;
        }
    }
    return sum;
}

/* Fills info from the header libpng has read, with the checks made before
 * anything the size of the image is allocated: the pixel cap, and the rows
 * against what the IDAT chunks can inflate to (libpng would allocate the
 * pixels' rows and only then find the data missing). */
static sg_status check_header(png_structp png, png_infop info, const png_job *job, const char *name,
                              uint64_t max_bytes, sg_image_info *out)
{
    png_uint_32 width, height;
    int depth, color, interlace;
    png_get_IHDR(png, info, &width, &height, &depth, &color, &interlace, NULL, NULL);
    /* What png_set_expand makes of it (decode checks libpng agrees):
     * palettes to RGB, grey under 8 bits to 8 bits, tRNS to alpha. */
    bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    int32_t channels = color == PNG_COLOR_TYPE_RGB_ALPHA    ? 4
                       : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                       : color == PNG_COLOR_TYPE_GRAY       ? 1 + trns
                                                            : 3 + trns; /* RGB, palette */
    SG_TRY(sg_image_check_dims(width, height, 1, channels, depth == 16 ? 16 : 8, max_bytes, name, out));
    uint64_t need = filtered_bytes(width, height, depth, color, interlace);
    uint64_t have = idat_bytes(job->bytes, job->n);
    if (need > have * PNG_DEFLATE_MAX_RATIO + PNG_DEFLATE_SLACK) {
        char what[128], rows[32], data[32], least[32];
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: PNG claims %s from %s of compressed data (IDAT chunks): its %s of filtered rows "
                        "need at least %s, as deflate expands at most %d:1",
                        name, sg_image_describe(out, what, sizeof what), sg_image_format_bytes(have, data, sizeof data),
                        sg_image_format_bytes(need, rows, sizeof rows),
                        sg_image_format_bytes(need / PNG_DEFLATE_MAX_RATIO, least, sizeof least),
                        PNG_DEFLATE_MAX_RATIO);
    }
    /* libpng's row and previous row at the widest a transform makes them,
     * and zlib's window and state. */
    uint64_t row = (uint64_t)width * (uint64_t)out->channels * (uint64_t)(out->bits / 8);
    out->scratch_bytes = 2 * (row + 64) + (64 << 10);
    return SEGRT_OK;
}

/* Everything that may longjmp back. Only job, header and out, which live
 * in the caller, carry state across the jump. */
static sg_status decode_body(png_structp png, png_infop info, png_job *job, const char *name, uint64_t max_bytes,
                             sg_image_info *header, sg_image *out)
{
    if (setjmp(png_jmpbuf(png)))
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad PNG: %s", name, job->msg);
    png_set_read_fn(png, job, read_bytes);
    /* libpng refuses more than 10^6 pixels a side by default; the pixel
     * cap and the IDAT check are what bound memory. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    SG_TRY(check_header(png, info, job, name, max_bytes, header));
    if (!out)
        return SEGRT_OK;
    /* 16-bit samples are kept, in the host's byte order. */
    png_set_expand(png);
    if (png_get_bit_depth(png, info) == 16 && little_endian())
        png_set_swap(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info), bits = png_get_bit_depth(png, info);
    if (channels != header->channels || bits != header->bits)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: libpng expands the PNG to %d channel(s) at %d bits, not %d at %d",
                        name, channels, bits, header->channels, header->bits);
    SG_TRY(sg_image_alloc_info(header, name, out));
    png_uint_32 height = (png_uint_32)out->height;
    size_t row = sg_image_row_bytes(out);
    if (png_get_rowbytes(png, info) != row)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: libpng's rows are %zu bytes, not %zu", name,
                        (size_t)png_get_rowbytes(png, info), row);
    /* Row by row, with no array of row pointers (which would be larger than
     * the pixels for a tall, narrow image); an interlaced image fills each
     * row in over its passes. */
    for (int p = 0; p < passes; p++)
        for (png_uint_32 y = 0; y < height; y++)
            png_read_row(png, (png_bytep)out->pixels + (size_t)y * row, NULL);
    return SEGRT_OK;
}

sg_status sg_png_decode(const void *bytes, size_t n, const char *name, uint64_t max_bytes, sg_image_info *header,
                        sg_image *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    png_job job = {.bytes = bytes, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", name);
    }
    sg_status s = decode_body(png, info, &job, name, max_bytes, header, out);
    png_destroy_read_struct(&png, &info, NULL);
    if (s != SEGRT_OK && out)
        sg_image_free(out);
    return s;
}

struct sg_png_writer {
    png_structp png;
    png_infop info;
    png_job job;
    const char *path;
    int32_t rows_left;
};

static sg_status writer_start(sg_png_writer *w, const sg_image *shape, FILE *f)
{
    if (setjmp(png_jmpbuf(w->png)))
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write PNG: %s", w->path, w->job.msg);
    static const int color_types[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                      PNG_COLOR_TYPE_RGB_ALPHA};
    png_init_io(w->png, f);
    png_set_IHDR(w->png, w->info, (png_uint_32)shape->width, (png_uint_32)shape->height, shape->bits,
                 color_types[shape->channels - 1], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(w->png, w->info);
    if (shape->bits == 16 && little_endian())
        png_set_swap(w->png);
    return SEGRT_OK;
}

void sg_png_writer_free(sg_png_writer *w)
{
    if (!w)
        return;
    png_destroy_write_struct(&w->png, w->info ? &w->info : NULL);
    free(w);
}

sg_status sg_png_writer_open(sg_output *o, const sg_image *shape, sg_png_writer **out)
{
    *out = NULL;
    const char *path = sg_output_path(o);
    FILE *f = sg_output_stream(o);
    if (!f)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
    sg_png_writer *w = calloc(1, sizeof *w);
    if (!w)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", path);
    w->path = path;
    w->rows_left = shape->height;
    w->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w->job, on_error, on_warning);
    w->info = w->png ? png_create_info_struct(w->png) : NULL;
    sg_status s = w->info ? writer_start(w, shape, f)
                          : sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", path);
    if (s != SEGRT_OK) {
        sg_png_writer_free(w);
        return s;
    }
    *out = w;
    return SEGRT_OK;
}

sg_status sg_png_writer_row(sg_png_writer *w, const void *row)
{
    if (w->rows_left == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: more rows than the image has", w->path);
    if (setjmp(png_jmpbuf(w->png)))
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write PNG: %s", w->path, w->job.msg);
    png_write_row(w->png, (png_const_bytep)row);
    w->rows_left--;
    return SEGRT_OK;
}

static sg_status writer_end(sg_png_writer *w)
{
    if (setjmp(png_jmpbuf(w->png)))
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write PNG: %s", w->path, w->job.msg);
    png_write_end(w->png, NULL);
    return SEGRT_OK;
}

sg_status sg_png_writer_finish(sg_png_writer *w)
{
    sg_status s = w->rows_left > 0 ? sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: %d rows were never written", w->path,
                                              (int)w->rows_left)
                                   : writer_end(w);
    sg_png_writer_free(w);
    return s;
}

sg_status sg_png_encode(const sg_image *img, sg_output *o)
{
    sg_png_writer *w;
    SG_TRY(sg_png_writer_open(o, img, &w));
    size_t row = sg_image_row_bytes(img);
    for (int32_t y = 0; y < img->height; y++) {
        sg_status s = sg_png_writer_row(w, (const uint8_t *)img->pixels + (size_t)y * row);
        if (s != SEGRT_OK) {
            sg_png_writer_free(w);
            return s;
        }
    }
    return sg_png_writer_finish(w);
}

/* --- row by row, for the region source ----------------------------------- */

struct sg_png_rows {
    png_structp png;
    png_infop info;
    png_job job;
    const char *name;
};

static sg_status rows_start(sg_png_rows *r, const sg_image_info *header, bool *interlaced)
{
    if (setjmp(png_jmpbuf(r->png)))
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad PNG: %s", r->name, r->job.msg);
    png_set_read_fn(r->png, &r->job, read_bytes);
    png_set_user_limits(r->png, 0x7fffffff, 0x7fffffff);
    png_read_info(r->png, r->info);
    if (png_get_interlace_type(r->png, r->info) != PNG_INTERLACE_NONE) {
        *interlaced = true;
        return SEGRT_OK;
    }
    /* As the whole read: expanded, 16-bit samples in the host's order. */
    png_set_expand(r->png);
    if (png_get_bit_depth(r->png, r->info) == 16 && little_endian())
        png_set_swap(r->png);
    png_read_update_info(r->png, r->info);
    if (png_get_channels(r->png, r->info) != header->channels || png_get_bit_depth(r->png, r->info) != header->bits ||
        png_get_image_width(r->png, r->info) != (png_uint_32)header->width ||
        png_get_image_height(r->png, r->info) != (png_uint_32)header->height)
        return sg_error(SEGRT_ERROR_IO, "%s: the file changed while it was open", r->name);
    return SEGRT_OK;
}

sg_status sg_png_rows_open(const void *bytes, size_t n, const char *name, const sg_image_info *header,
                           sg_png_rows **out, bool *interlaced)
{
    *out = NULL;
    *interlaced = false;
    sg_png_rows *r = calloc(1, sizeof *r);
    if (!r)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", name);
    r->job.bytes = bytes;
    r->job.n = n;
    r->name = name;
    r->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r->job, on_error, on_warning);
    r->info = r->png ? png_create_info_struct(r->png) : NULL;
    if (!r->info) {
        sg_png_rows_close(r);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", name);
    }
    sg_status s = rows_start(r, header, interlaced);
    if (s != SEGRT_OK || *interlaced) {
        sg_png_rows_close(r);
        return s;
    }
    *out = r;
    return SEGRT_OK;
}

sg_status sg_png_rows_next(sg_png_rows *r, void *row)
{
    if (setjmp(png_jmpbuf(r->png)))
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad PNG: %s", r->name, r->job.msg);
    png_read_row(r->png, row, NULL);
    return SEGRT_OK;
}

void sg_png_rows_close(sg_png_rows *r)
{
    if (!r)
        return;
    png_destroy_read_struct(&r->png, r->info ? &r->info : NULL, NULL);
    free(r);
}
