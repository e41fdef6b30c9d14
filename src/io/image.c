/* Image files: format detection, dispatch to the per-library codecs
 * (image_png.c, image_jpeg.c, image_tiff.c) and conversions to tensors. */
#include "io/image.h"

#include "core/file.h"
#include "core/mem.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest PNG or JPEG file read. Compressed data bigger than the pixel
 * cap is possible (PNG stores raw pixels with little overhead) but not by
 * much; a file past this cannot decode to an image segrt takes. */
#define IMAGE_MAX_FILE_BYTES (SG_IMAGE_MAX_BYTES + ((uint64_t)1 << 30))

sg_image_format sg_image_format_of_bytes(const void *head, size_t n)
{
    const uint8_t *b = head;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
        return SG_IMAGE_PNG;
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return SG_IMAGE_JPEG;
    /* Classic TIFF has 42 after the byte-order mark, BigTIFF 43. */
    if (n >= 4 && ((b[0] == 'I' && b[1] == 'I' && (b[2] == 42 || b[2] == 43) && b[3] == 0) ||
                   (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && (b[3] == 42 || b[3] == 43))))
        return SG_IMAGE_TIFF;
    return SG_IMAGE_UNKNOWN;
}

sg_image_format sg_image_format_of_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot)
        return SG_IMAGE_UNKNOWN;
    static const struct {
        const char *ext;
        sg_image_format format;
    } exts[] = {{".png", SG_IMAGE_PNG},  {".jpg", SG_IMAGE_JPEG},  {".jpeg", SG_IMAGE_JPEG},
                {".tif", SG_IMAGE_TIFF}, {".tiff", SG_IMAGE_TIFF}};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (strcasecmp(dot, exts[i].ext) == 0)
            return exts[i].format;
    return SG_IMAGE_UNKNOWN;
}

/* Reads up to cap bytes from the start of path, which must be a regular
 * file (sg_open_input: never waits on a FIFO). The thread's error names
 * the failure. */
static sg_status read_head(const char *path, uint8_t *head, size_t cap, size_t *got)
{
    int fd;
    SG_TRY(sg_open_input(path, &fd));
    ssize_t n = read(fd, head, cap);
    int err = errno;
    close(fd);
    if (n < 0)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(err));
    *got = (size_t)n;
    return SEGRT_OK;
}

bool sg_image_is_image_file(const char *path)
{
    uint8_t head[8];
    size_t got = 0;
    /* The thread's error message is left as it was. */
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", sg_last_error());
    bool yes = read_head(path, head, sizeof head, &got) == SEGRT_OK &&
               sg_image_format_of_bytes(head, got) != SG_IMAGE_UNKNOWN;
    sg_error(SEGRT_OK, "%s", saved);
    return yes;
}

static sg_status unknown_format(const char *name)
{
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: not a PNG, JPEG or TIFF file (by its first bytes)", name);
}

/* A read (out) or a probe (out NULL) of bytes in memory. */
static sg_status decode_memory(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                               sg_image_info *info, sg_image *out)
{
    memset(info, 0, sizeof *info);
    if (out)
        memset(out, 0, sizeof *out);
    if (max_bytes > SG_IMAGE_MAX_BYTES)
        max_bytes = SG_IMAGE_MAX_BYTES;
    info->format = sg_image_format_of_bytes(bytes, n);
    switch (info->format) {
    case SG_IMAGE_PNG:
        return sg_png_decode(bytes, n, name, max_bytes, info, out);
    case SG_IMAGE_JPEG:
        return sg_jpeg_decode(bytes, n, name, max_bytes, info, out);
    case SG_IMAGE_TIFF:
        return sg_tiff_decode_memory(bytes, n, name, max_bytes, info, out);
    case SG_IMAGE_UNKNOWN:
        break;
    }
    return unknown_format(name);
}

sg_status sg_image_read_memory_max(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                   sg_image *out)
{
    sg_image_info info;
    return decode_memory(bytes, n, name, max_bytes, &info, out);
}

sg_status sg_image_read_memory(const void *bytes, size_t n, const char *name, sg_image *out)
{
    return sg_image_read_memory_max(bytes, n, name, SG_IMAGE_MAX_BYTES, out);
}

sg_status sg_image_probe_memory_max(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                    sg_image_info *out)
{
    return decode_memory(bytes, n, name, max_bytes, out, NULL);
}

sg_status sg_image_probe_memory(const void *bytes, size_t n, const char *name, sg_image_info *out)
{
    return sg_image_probe_memory_max(bytes, n, name, SG_IMAGE_MAX_BYTES, out);
}

/* A read (out) or a probe (out NULL) of the file at path. PNG and JPEG are
 * mapped rather than read into memory: the probe touches only headers (and
 * a PNG's chunk headers), and a read holds the pixels, not the file too. A
 * TIFF may hold many pages and gigabytes of other data; libtiff maps the
 * file and touches only what the pages need. */
static sg_status decode_file(const char *path, sg_image_info *info, sg_image *out)
{
    memset(info, 0, sizeof *info);
    if (out)
        memset(out, 0, sizeof *out);
    uint8_t head[8];
    size_t got = 0;
    SG_TRY(read_head(path, head, sizeof head, &got));
    if (got == 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the file is empty", path);
    sg_image_format format = sg_image_format_of_bytes(head, got);
    if (format == SG_IMAGE_UNKNOWN)
        return unknown_format(path);
    if (format == SG_IMAGE_TIFF) {
        info->format = format;
        return sg_tiff_decode_file(path, SG_IMAGE_MAX_BYTES, info, out);
    }
    sg_mapped_file map;
    SG_TRY(sg_map_file(path, IMAGE_MAX_FILE_BYTES, "an image file segrt reads (5 GiB)", &map));
    sg_status s = decode_memory(map.data, map.size, path, SG_IMAGE_MAX_BYTES, info, out);
    sg_unmap_file(&map);
    return s;
}

sg_status sg_image_read(const char *path, sg_image *out)
{
    sg_image_info info;
    return decode_file(path, &info, out);
}

sg_status sg_image_probe(const char *path, sg_image_info *out)
{
    return decode_file(path, out, NULL);
}

void sg_image_free(sg_image *img)
{
    if (!img)
        return;
    free(img->pixels);
    memset(img, 0, sizeof *img);
}

size_t sg_image_row_bytes(const sg_image *img)
{
    return (size_t)img->width * (size_t)img->channels * (size_t)(img->bits / 8);
}

size_t sg_image_page_bytes(const sg_image *img)
{
    return sg_image_row_bytes(img) * (size_t)img->height;
}

size_t sg_image_bytes(const sg_image *img)
{
    return sg_image_page_bytes(img) * (size_t)(img->depth > 1 ? img->depth : 1);
}

const char *sg_image_format_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
    if (n < 1000) {
        snprintf(buf, cap, "%llu byte%s", (unsigned long long)n, n == 1 ? "" : "s");
        return buf;
    }
    double v = (double)n / 1000.0;
    size_t u = 0;
    while (v >= 999.95 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

/* Pixel bytes of the dims as a double: exact to 2^53, and never wrapping
 * where the dims are hostile. For messages. */
static double dims_bytes(int64_t width, int64_t height, int64_t depth, int32_t channels, int32_t bits)
{
    return (double)width * (double)height * (double)depth * (double)channels * (double)(bits / 8);
}

const char *sg_image_describe(const sg_image_info *info, char *buf, size_t cap)
{
    char size[32];
    double bytes = dims_bytes(info->width, info->height, info->depth, info->channels, info->bits);
    sg_image_format_bytes(bytes >= 1.8e19 ? UINT64_MAX : (uint64_t)bytes, size, sizeof size);
    if (info->depth > 1)
        snprintf(buf, cap, "%dx%dx%d, %d pages, %d-bit (%s)", info->width, info->height, info->channels,
                 info->depth, info->bits, size);
    else
        snprintf(buf, cap, "%dx%dx%d, %d-bit (%s)", info->width, info->height, info->channels, info->bits, size);
    return buf;
}

sg_status sg_image_check_dims(int64_t width, int64_t height, int64_t depth, int32_t channels, int32_t bits,
                              uint64_t max_bytes, const char *name, sg_image_info *info)
{
    SG_ASSERT(channels >= 1 && channels <= 4 && (bits == 8 || bits == 16));
    if (width <= 0 || height <= 0 || width > INT32_MAX || height > INT32_MAX)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: image dims %lldx%lld are not valid", name,
                        (long long)width, (long long)height);
    if (depth <= 0 || depth > INT32_MAX)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %lld pages is not a valid depth", name, (long long)depth);
    /* width * height is below 2^62; compared with max_bytes over the
     * bytes of a pixel before it is multiplied out, nothing wraps (a
     * product of the full dims could pass 2^64 and come back small). */
    uint64_t pixel = (uint64_t)channels * (uint64_t)(bits / 8), plane = (uint64_t)width * (uint64_t)height;
    if (plane > max_bytes / pixel || plane * pixel > max_bytes / (uint64_t)depth) {
        char pages[32] = "";
        if (depth > 1)
            snprintf(pages, sizeof pages, ", %lld pages,", (long long)depth);
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: a %lldx%lld image%s of %d channel(s) at %d bits needs %.0f bytes, more than the "
                        "%llu segrt reads",
                        name, (long long)width, (long long)height, pages, channels, bits,
                        dims_bytes(width, height, depth, channels, bits), (unsigned long long)max_bytes);
    }
    info->width = (int32_t)width;
    info->height = (int32_t)height;
    info->depth = (int32_t)depth;
    info->channels = channels;
    info->bits = bits;
    info->pixel_bytes = plane * pixel * (uint64_t)depth;
    return SEGRT_OK;
}

sg_status sg_image_alloc_info(const sg_image_info *info, const char *name, sg_image *out)
{
    memset(out, 0, sizeof *out);
    out->pixels = sg_malloc((size_t)info->pixel_bytes);
    if (!out->pixels)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    out->width = info->width;
    out->height = info->height;
    out->depth = info->depth;
    out->channels = info->channels;
    out->bits = info->bits;
    return SEGRT_OK;
}

sg_status sg_image_alloc(int64_t width, int64_t height, int32_t channels, int32_t bits, uint64_t max_bytes,
                         const char *name, sg_image *out)
{
    memset(out, 0, sizeof *out);
    sg_image_info info = {0};
    SG_TRY(sg_image_check_dims(width, height, 1, channels, bits, max_bytes, name, &info));
    return sg_image_alloc_info(&info, name, out);
}

void sg_image_one_line(char *buf, size_t cap, const char *msg)
{
    if (cap == 0)
        return;
    size_t n = 0;
    for (; msg && msg[n] && n + 1 < cap; n++)
        buf[n] = iscntrl((unsigned char)msg[n]) ? ' ' : msg[n];
    while (n > 0 && buf[n - 1] == ' ')
        n--;
    buf[n] = '\0';
}

static bool image_is_valid(const sg_image *img)
{
    return img && img->pixels && img->width > 0 && img->height > 0 && img->depth >= 1 && img->channels >= 1 &&
           img->channels <= 4 && (img->bits == 8 || img->bits == 16);
}

/* The format the destination's extension names, for writing. */
static sg_status write_format(const char *path, sg_image_format *format)
{
    *format = sg_image_format_of_name(path);
    if (*format == SG_IMAGE_JPEG)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: segrt writes no JPEG (lossy); use .png or .tif", path);
    if (*format == SG_IMAGE_UNKNOWN)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: cannot tell the format to write: use .png or .tif",
                        path);
    return SEGRT_OK;
}

sg_status sg_image_check_writable_name(const char *path)
{
    sg_image_format format;
    return write_format(path, &format);
}

sg_status sg_image_write_to(sg_output *o, const sg_image *img)
{
    const char *path = sg_output_path(o);
    sg_image_format format;
    SG_TRY(write_format(path, &format));
    if (!image_is_valid(img))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: nothing to write (an empty or malformed image)", path);
    if (img->depth > 1 && format == SG_IMAGE_PNG)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a PNG holds one 2-D picture, not %d pages; use .tif", path,
                        img->depth);
    return format == SG_IMAGE_PNG ? sg_png_encode(img, o) : sg_tiff_encode(img, o);
}

sg_status sg_image_write(const char *path, const sg_image *img)
{
    SG_TRY(sg_image_check_writable_name(path));
    sg_output *o;
    SG_TRY(sg_output_open(path, &o));
    sg_status s = sg_image_write_to(o, img);
    if (s != SEGRT_OK) {
        sg_output_discard(o);
        return s;
    }
    return sg_output_commit(o);
}

sg_status sg_image_to_tensor(const sg_image *img, bool keep_alpha, sg_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (!image_is_valid(img))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "an empty or malformed image");
    int32_t c_in = img->channels;
    int32_t c_out = keep_alpha || c_in == 1 || c_in == 3 ? c_in : c_in - 1;
    /* A volume's pages are its slowest axis, in the tensor as in the
     * pixels, so the conversion is the same over all of them. */
    size_t plane = (size_t)img->width * (size_t)img->height * (size_t)img->depth;
    float *data = sg_malloc(plane * (size_t)c_out * sizeof(float));
    if (!data)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    /* Interleaved (D)HWC to planar C(D)HW, one channel at a time so that the
     * writes stream. */
    for (int32_t c = 0; c < c_out; c++) {
        float *dst = data + (size_t)c * plane;
        if (img->bits == 8) {
            const uint8_t *src = (const uint8_t *)img->pixels + c;
            for (size_t i = 0; i < plane; i++)
                dst[i] = (float)src[i * (size_t)c_in];
        } else {
            const uint16_t *src = (const uint16_t *)img->pixels + c;
            for (size_t i = 0; i < plane; i++)
                dst[i] = (float)src[i * (size_t)c_in];
        }
    }
    out->dtype = SEGRT_DTYPE_FLOAT32;
    out->rank = 0;
    out->dims[out->rank++] = 1;
    out->dims[out->rank++] = c_out;
    if (img->depth > 1)
        out->dims[out->rank++] = img->depth;
    out->dims[out->rank++] = img->height;
    out->dims[out->rank++] = img->width;
    out->data = data;
    return SEGRT_OK;
}

sg_status sg_image_label_dims(const sg_tensor *labels, int64_t *height, int64_t *width)
{
    char dims[256];
    sg_dims_format(labels->dims, labels->rank, dims, sizeof dims);
    if (labels->rank < 2)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a label map must be H x W, not %s", dims);
    for (int32_t i = 0; i + 2 < labels->rank; i++)
        if (labels->dims[i] != 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "a label map must be 1 x 1 x H x W (one image, one channel), not %s", dims);
    *height = labels->dims[labels->rank - 2];
    *width = labels->dims[labels->rank - 1];
    if (*height <= 0 || *width <= 0 || !labels->data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "an empty label map (%s)", dims);
    return SEGRT_OK;
}

sg_status sg_image_from_labels(const sg_tensor *labels, sg_image *out)
{
    memset(out, 0, sizeof *out);
    if (labels->dtype != SEGRT_DTYPE_UINT8 && labels->dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a label map must be uint8 or uint16, not %s",
                        segrt_dtype_name(labels->dtype));
    /* N x C x D x H x W (a 3-D job's): the pages are D, and the rest must
     * be one image and one channel as for a 2-D map. */
    sg_tensor plane = *labels;
    int64_t depth = 1;
    if (labels->rank >= 5) {
        depth = labels->dims[labels->rank - 3];
        plane.dims[labels->rank - 3] = 1;
    }
    int64_t h, w;
    SG_TRY(sg_image_label_dims(&plane, &h, &w));
    sg_image_info info;
    sg_status s = sg_image_check_dims(w, h, depth, 1, labels->dtype == SEGRT_DTYPE_UINT8 ? 8 : 16,
                                      SG_IMAGE_MAX_BYTES, "label map", &info);
    if (s == SEGRT_OK)
        s = sg_image_alloc_info(&info, "label map", out);
    if (s != SEGRT_OK)
        return s == SEGRT_ERROR_INVALID_MODEL ? SEGRT_ERROR_INVALID_ARGUMENT : s;
    memcpy(out->pixels, labels->data, sg_image_bytes(out));
    return SEGRT_OK;
}
