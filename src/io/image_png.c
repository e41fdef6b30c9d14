/* PNG through libpng 1.6: errors come back through setjmp/longjmp on a
 * per-read handler (libpng's default handler would print to stderr), and
 * nothing global is touched. */
#include "io/image.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

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

/* Everything that may longjmp back. Only job and out, which live in the
 * caller, carry state across the jump. */
static sg_status decode_body(png_structp png, png_infop info, png_job *job, const char *name, uint64_t max_bytes,
                             sg_image *out)
{
    if (setjmp(png_jmpbuf(png)))
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad PNG: %s", name, job->msg);
    png_set_read_fn(png, job, read_bytes);
    /* libpng refuses more than 10^6 pixels a side by default; the byte cap
     * below is what bounds memory. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 width, height;
    int depth, color, interlace;
    png_get_IHDR(png, info, &width, &height, &depth, &color, &interlace, NULL, NULL);
    /* Palettes to RGB, grey under 8 bits to 8 bits, tRNS to an alpha
     * channel; 16-bit samples kept, in the host's byte order. */
    png_set_expand(png);
    if (depth == 16 && little_endian())
        png_set_swap(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info), bits = png_get_bit_depth(png, info);
    if (channels < 1 || channels > 4 || (bits != 8 && bits != 16))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: PNG of %d channel(s) at %d bits", name, channels, bits);
    SG_TRY(sg_image_alloc(width, height, channels, bits, max_bytes, name, out));
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

sg_status sg_png_decode(const void *bytes, size_t n, const char *name, uint64_t max_bytes, sg_image *out)
{
    memset(out, 0, sizeof *out);
    png_job job = {.bytes = bytes, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", name);
    }
    sg_status s = decode_body(png, info, &job, name, max_bytes, out);
    png_destroy_read_struct(&png, &info, NULL);
    if (s != SEGRT_OK)
        sg_image_free(out);
    return s;
}

static sg_status encode_body(png_structp png, png_infop info, png_job *job, const sg_image *img, FILE *f,
                             const char *path)
{
    if (setjmp(png_jmpbuf(png)))
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write PNG: %s", path, job->msg);
    static const int color_types[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                      PNG_COLOR_TYPE_RGB_ALPHA};
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, img->bits,
                 color_types[img->channels - 1], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    if (img->bits == 16 && little_endian())
        png_set_swap(png);
    size_t row = sg_image_row_bytes(img);
    for (int32_t y = 0; y < img->height; y++)
        png_write_row(png, (png_const_bytep)img->pixels + (size_t)y * row);
    png_write_end(png, NULL);
    return SEGRT_OK;
}

sg_status sg_png_encode(const sg_image *img, sg_output *o)
{
    const char *path = sg_output_path(o);
    FILE *f = sg_output_stream(o);
    if (!f)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
    png_job job = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    sg_status s = info ? encode_body(png, info, &job, img, f, path)
                       : sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libpng", path);
    png_destroy_write_struct(&png, &info);
    return s;
}
