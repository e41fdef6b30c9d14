/* TIFF through libtiff (4.5 or later): strips and tiles, contiguous and
 * separate planes, 8- and 16-bit unsigned samples; grey (min-is-black or
 * min-is-white), RGB, 8-bit palettes and JPEG-compressed YCbCr. The first
 * page (IFD 0) only. Errors and warnings go to per-handle handlers set
 * through TIFFOpenOptions, so libtiff's global handlers (which print to
 * stderr) are neither called nor replaced. */
#include "io/image.h"

#include "core/mem.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <tiffio.h>
#include <unistd.h>

/* What the handlers and the memory procs need. */
typedef struct tiff_job {
    const uint8_t *bytes; /* the file, for reads from memory */
    uint64_t n, pos;
    char msg[256];  /* libtiff's first error */
    bool truncated; /* tag data past the end of the file */
} tiff_job;

/* libtiff reports the cause first and the consequences after it
 * ("cannot read strip" after "unexpected end of data"), so keep the first. */
static void record(tiff_job *job, const char *module, const char *text)
{
    if (job->msg[0] != '\0')
        return;
    char line[sizeof job->msg + 64];
    snprintf(line, sizeof line, "%s%s%s", module ? module : "", module ? ": " : "", text);
    sg_image_one_line(job->msg, sizeof job->msg, line);
}

SG_PRINTF(4, 0)
static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    tiff_job *job = user;
    char text[sizeof job->msg];
    vsnprintf(text, sizeof text, fmt, ap);
    record(job, module, text);
    return 1; /* handled: libtiff's global handler is not called */
}

/* Warnings are dropped, except one: libtiff reads a directory whose tag
 * data lies past the end of the file as "IO error during reading of X;
 * tag ignored" and goes on without X (a palette image without its colour
 * map turns grey), which to segrt is a truncated file. */
SG_PRINTF(4, 0)
static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    tiff_job *job = user;
    char text[sizeof job->msg];
    vsnprintf(text, sizeof text, fmt, ap);
    if (strstr(text, "IO error")) {
        job->truncated = true;
        record(job, module, text);
    }
    return 1;
}

static TIFFOpenOptions *open_options(tiff_job *job, uint64_t max_bytes)
{
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    if (!opts)
        return NULL;
    TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, job);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, job);
    /* libtiff's own buffers (a strip's compressed bytes, tag arrays) never
     * need more than the image itself may take. */
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)(max_bytes < 1024 * 1024 ? 1024 * 1024 : max_bytes));
    return opts;
}

/* --- a file in memory, for TIFFClientOpenExt -------------------------------- */

static tmsize_t mem_read(thandle_t h, void *buf, tmsize_t size)
{
    tiff_job *job = (tiff_job *)h;
    if (size < 0)
        return -1;
    uint64_t left = job->pos < job->n ? job->n - job->pos : 0;
    uint64_t take = (uint64_t)size < left ? (uint64_t)size : left;
    memcpy(buf, job->bytes + job->pos, (size_t)take);
    job->pos += take;
    return (tmsize_t)take;
}

static tmsize_t mem_write(thandle_t h, void *buf, tmsize_t size)
{
    (void)h;
    (void)buf;
    (void)size;
    return -1;
}

/* Offsets wrap modulo 2^64 as libtiff passes them (a negative SEEK_CUR
 * offset comes as a large unsigned one); positions past the end read as
 * end of file. */
static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
    tiff_job *job = (tiff_job *)h;
    uint64_t base = whence == SEEK_CUR ? job->pos : whence == SEEK_END ? job->n : 0;
    job->pos = base + off;
    return job->pos;
}

static int mem_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t mem_size(thandle_t h)
{
    return ((tiff_job *)h)->n;
}

/* Lets libtiff read strips in place. It only reads through the mapping of
 * a file opened for reading. */
static int mem_map(thandle_t h, void **base, toff_t *size)
{
    tiff_job *job = (tiff_job *)h;
    *base = (void *)(uintptr_t)job->bytes;
    *size = job->n;
    return 1;
}

static void mem_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h;
    (void)base;
    (void)size;
}

/* --- reading ------------------------------------------------------------------ */

static sg_status bad(const char *name, const tiff_job *job, const char *what)
{
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: %s", name, job->msg[0] ? job->msg : what);
}

/* The page's layout, checked. */
typedef struct tiff_layout {
    uint32_t width, height;
    uint16_t bits, samples, photometric, planar;
    bool palette;
    bool min_is_white;
} tiff_layout;

static sg_status read_layout(TIFF *tif, const tiff_job *job, const char *name, tiff_layout *l)
{
    memset(l, 0, sizeof *l);
    uint16_t format, compression;
    if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l->width) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l->height))
        return bad(name, job, "no ImageWidth or ImageLength");
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l->bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l->samples);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &format);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l->planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
    /* Photometric is required, but files without it exist; guess as
     * libtiff's own tools do. */
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l->photometric))
        l->photometric = l->samples < 3 ? PHOTOMETRIC_MINISBLACK : PHOTOMETRIC_RGB;
    if (!TIFFIsCODECConfigured(compression))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF compression %u is not in this libtiff", name,
                        compression);
    if (format != SAMPLEFORMAT_UINT && format != SAMPLEFORMAT_VOID)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF %s samples are not supported (unsigned integers only)",
                        name, format == SAMPLEFORMAT_IEEEFP ? "floating-point" : "signed or complex");
    if (l->bits != 8 && l->bits != 16)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %u-bit TIFF samples are not supported (8 or 16 only)", name,
                        l->bits);
    uint16_t base;
    switch (l->photometric) {
    case PHOTOMETRIC_MINISWHITE:
        l->min_is_white = true;
        base = 1;
        break;
    case PHOTOMETRIC_MINISBLACK:
        base = 1;
        break;
    case PHOTOMETRIC_RGB:
        base = 3;
        break;
    case PHOTOMETRIC_PALETTE:
        if (l->bits != 8)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: 16-bit TIFF palettes are not supported", name);
        l->palette = true;
        base = 1;
        break;
    case PHOTOMETRIC_YCBCR:
        /* JPEG-compressed YCbCr (whole-slide tiles, scanners): libjpeg
         * converts to RGB and upsamples. Other YCbCr is rare. */
        if (compression != COMPRESSION_JPEG)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: YCbCr TIFF other than JPEG-compressed is not supported",
                            name);
        if (!TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
            return bad(name, job, "cannot convert its YCbCr to RGB");
        base = 3;
        break;
    default:
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: TIFF photometric interpretation %u (CMYK, Lab, ...) is not supported", name,
                        l->photometric);
    }
    if (l->samples != base && !(l->samples == base + 1 && !l->palette))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF with %u samples per pixel for photometric %u", name,
                        l->samples, l->photometric);
    if (l->planar != PLANARCONFIG_CONTIG && l->planar != PLANARCONFIG_SEPARATE)
        return bad(name, job, "unknown PlanarConfiguration");
    if (l->samples == 1)
        l->planar = PLANARCONFIG_CONTIG; /* the same bytes either way */
    return SEGRT_OK;
}

/* Copies rows x cols pixels of one tile or strip (src, src_row bytes a
 * row) to dst at (x, y). One plane of separate planes (sample s) is
 * scattered to its place among the interleaved samples. */
static void place(const tiff_layout *l, const uint8_t *src, size_t src_row, uint32_t x, uint32_t y, uint32_t cols,
                  uint32_t rows, int s, sg_image *dst)
{
    size_t sample = l->bits / 8, pixel = sample * l->samples, dst_row = sg_image_row_bytes(dst);
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *in = src + (size_t)r * src_row;
        uint8_t *o = (uint8_t *)dst->pixels + (size_t)(y + r) * dst_row + (size_t)x * pixel;
        if (s < 0) {
            memcpy(o, in, (size_t)cols * pixel);
            continue;
        }
        o += (size_t)s * sample;
        for (uint32_t c = 0; c < cols; c++)
            memcpy(o + (size_t)c * pixel, in + (size_t)c * sample, sample);
    }
}

static sg_status read_tiles(TIFF *tif, const tiff_job *job, const char *name, const tiff_layout *l,
                            uint64_t max_bytes, sg_image *dst)
{
    uint32_t tw = 0, th = 0;
    if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) || !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || !tw || !th)
        return bad(name, job, "no tile size");
    bool separate = l->planar == PLANARCONFIG_SEPARATE;
    size_t sample = l->bits / 8, unit = separate ? sample : sample * l->samples;
    if ((uint64_t)tw * th > max_bytes / unit)
        return bad(name, job, "tiles larger than an image may be");
    uint64_t need = (uint64_t)tw * th * unit;
    if (TIFFTileSize64(tif) < need)
        return bad(name, job, "tile size does not fit the image");
    uint8_t *buf = sg_malloc((size_t)need);
    if (!buf)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    sg_status s = SEGRT_OK;
    int planes = separate ? l->samples : 1;
    for (uint32_t y = 0; y < l->height && s == SEGRT_OK; y += th)
        for (uint32_t x = 0; x < l->width && s == SEGRT_OK; x += tw)
            for (int p = 0; p < planes && s == SEGRT_OK; p++) {
                uint32_t tile = TIFFComputeTile(tif, x, y, 0, (uint16_t)p);
                if (TIFFReadEncodedTile(tif, tile, buf, (tmsize_t)need) != (tmsize_t)need) {
                    s = bad(name, job, "a tile cannot be read");
                    break;
                }
                uint32_t cols = l->width - x < tw ? l->width - x : tw;
                uint32_t rows = l->height - y < th ? l->height - y : th;
                place(l, buf, (size_t)tw * unit, x, y, cols, rows, separate ? p : -1, dst);
            }
    free(buf);
    return s;
}

static sg_status read_strips(TIFF *tif, const tiff_job *job, const char *name, const tiff_layout *l,
                             uint64_t max_bytes, sg_image *dst)
{
    uint32_t rps = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
    if (rps == 0 || rps > l->height)
        rps = l->height;
    bool separate = l->planar == PLANARCONFIG_SEPARATE;
    size_t sample = l->bits / 8, row = (size_t)l->width * sample * (separate ? 1 : l->samples);
    uint32_t per_plane = (l->height - 1) / rps + 1;
    int planes = separate ? l->samples : 1;
    if ((uint64_t)TIFFNumberOfStrips(tif) < (uint64_t)per_plane * (uint64_t)planes)
        return bad(name, job, "fewer strips than the image has rows for");
    /* Contiguous strips decode straight into the image; separate planes go
     * through one strip's buffer. */
    uint8_t *buf = NULL;
    if (separate) {
        if ((uint64_t)rps * row > max_bytes)
            return bad(name, job, "strips larger than the image");
        buf = sg_malloc((size_t)rps * row);
        if (!buf)
            return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    }
    sg_status s = SEGRT_OK;
    for (int p = 0; p < planes && s == SEGRT_OK; p++)
        for (uint32_t k = 0; k < per_plane; k++) {
            uint32_t y = k * rps, rows = l->height - y < rps ? l->height - y : rps;
            tmsize_t need = (tmsize_t)(rows * row);
            uint8_t *to = separate ? buf : (uint8_t *)dst->pixels + (size_t)y * row;
            if (TIFFReadEncodedStrip(tif, (uint32_t)p * per_plane + k, to, need) != need) {
                s = bad(name, job, "a strip cannot be read");
                break;
            }
            if (separate)
                place(l, buf, row, 0, y, l->width, rows, p, dst);
        }
    free(buf);
    return s;
}

/* Palette indices (1 channel, 8 bits) to 8-bit RGB through the colour map.
 * Maps are 16-bit; some old writers stored 8-bit values in them, which
 * shows as no entry above 255 (libtiff's tools test the same). */
static sg_status apply_palette(TIFF *tif, const tiff_job *job, const char *name, const sg_image *index,
                               sg_image *rgb)
{
    uint16_t *r, *g, *b;
    if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &r, &g, &b))
        return bad(name, job, "a palette image without a ColorMap");
    bool wide = false;
    for (int i = 0; i < 256; i++)
        wide = wide || r[i] > 255 || g[i] > 255 || b[i] > 255;
    int shift = wide ? 8 : 0;
    size_t n = (size_t)index->width * (size_t)index->height;
    const uint8_t *in = index->pixels;
    uint8_t *o = rgb->pixels;
    for (size_t i = 0; i < n; i++) {
        o[3 * i] = (uint8_t)(r[in[i]] >> shift);
        o[3 * i + 1] = (uint8_t)(g[in[i]] >> shift);
        o[3 * i + 2] = (uint8_t)(b[in[i]] >> shift);
    }
    return SEGRT_OK;
}

static void invert_grey(sg_image *img)
{
    size_t n = (size_t)img->width * (size_t)img->height;
    int32_t c = img->channels; /* 1, or 2 with alpha, which stays */
    if (img->bits == 8) {
        uint8_t *p = img->pixels;
        for (size_t i = 0; i < n; i++)
            p[i * (size_t)c] = (uint8_t)(255 - p[i * (size_t)c]);
    } else {
        uint16_t *p = img->pixels;
        for (size_t i = 0; i < n; i++)
            p[i * (size_t)c] = (uint16_t)(65535 - p[i * (size_t)c]);
    }
}

static sg_status decode(TIFF *tif, const tiff_job *job, const char *name, uint64_t max_bytes, sg_image *out)
{
    tiff_layout l;
    SG_TRY(read_layout(tif, job, name, &l));
    /* Check the final image's size before anything is allocated. */
    SG_TRY(sg_image_alloc(l.width, l.height, l.palette ? 3 : l.samples, l.bits, max_bytes, name, out));
    sg_image index = {0};
    sg_image *dst = out;
    if (l.palette) {
        SG_TRY(sg_image_alloc(l.width, l.height, 1, 8, max_bytes, name, &index));
        dst = &index;
    }
    sg_status s = TIFFIsTiled(tif) ? read_tiles(tif, job, name, &l, max_bytes, dst)
                                   : read_strips(tif, job, name, &l, max_bytes, dst);
    if (s == SEGRT_OK && l.palette)
        s = apply_palette(tif, job, name, &index, out);
    if (s == SEGRT_OK && l.min_is_white)
        invert_grey(out);
    sg_image_free(&index);
    return s;
}

static sg_status decode_and_close(TIFF *tif, const tiff_job *job, const char *name, uint64_t max_bytes,
                                  sg_image *out)
{
    if (!tif)
        return bad(name, job, "cannot open");
    sg_status s = job->truncated ? bad(name, job, "truncated") : decode(tif, job, name, max_bytes, out);
    TIFFClose(tif);
    if (s != SEGRT_OK)
        sg_image_free(out);
    return s;
}

sg_status sg_tiff_decode_memory(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                sg_image *out)
{
    memset(out, 0, sizeof *out);
    tiff_job job = {.bytes = bytes, .n = n};
    TIFFOpenOptions *opts = open_options(&job, max_bytes);
    if (!opts)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libtiff", name);
    TIFF *tif = TIFFClientOpenExt(name, "r", (thandle_t)&job, mem_read, mem_write, mem_seek, mem_close, mem_size,
                                  mem_map, mem_unmap, opts);
    TIFFOpenOptionsFree(opts);
    return decode_and_close(tif, &job, name, max_bytes, out);
}

sg_status sg_tiff_decode_file(const char *path, uint64_t max_bytes, sg_image *out)
{
    memset(out, 0, sizeof *out);
    tiff_job job = {0};
    TIFFOpenOptions *opts = open_options(&job, max_bytes);
    if (!opts)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libtiff", path);
    TIFF *tif = TIFFOpenExt(path, "r", opts);
    TIFFOpenOptionsFree(opts);
    return decode_and_close(tif, &job, path, max_bytes, out);
}

/* --- writing ------------------------------------------------------------------ */

/* Rows per strip for strips of about 256 KiB: deflate finds more to
 * compress than in libtiff's default 8 KiB, and readers still read a
 * strip at a time. */
static uint32_t strip_rows(const sg_image *img)
{
    size_t row = sg_image_row_bytes(img), rows = ((size_t)256 << 10) / row;
    if (rows < 1)
        rows = 1;
    return rows > (size_t)img->height ? (uint32_t)img->height : (uint32_t)rows;
}

static sg_status write_tags(TIFF *tif, const sg_image *img, uint32_t rps)
{
    bool alpha = img->channels == 2 || img->channels == 4;
    uint16_t extra[1] = {EXTRASAMPLE_UNASSALPHA};
    bool ok = TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)img->width) &&
              TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)img->height) &&
              TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)img->bits) &&
              TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)img->channels) &&
              TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, img->channels >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK) &&
              TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
              TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT) &&
              TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE) &&
              TIFFSetField(tif, TIFFTAG_PREDICTOR, PREDICTOR_HORIZONTAL) &&
              TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, rps) &&
              (!alpha || TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, (uint16_t)1, extra));
    return ok ? SEGRT_OK : SEGRT_ERROR_IO;
}

/* libtiff may change a strip's bytes as it encodes it (prediction, byte
 * swapping), so each strip goes through a copy. */
static sg_status write_strips(TIFF *tif, const sg_image *img, uint32_t rps)
{
    size_t row = sg_image_row_bytes(img);
    uint8_t *buf = sg_malloc((size_t)rps * row);
    if (!buf)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status s = SEGRT_OK;
    for (uint32_t y = 0, k = 0; y < (uint32_t)img->height; y += rps, k++) {
        uint32_t rows = (uint32_t)img->height - y < rps ? (uint32_t)img->height - y : rps;
        memcpy(buf, (const uint8_t *)img->pixels + (size_t)y * row, (size_t)rows * row);
        if (TIFFWriteEncodedStrip(tif, k, buf, (tmsize_t)((size_t)rows * row)) < 0) {
            s = SEGRT_ERROR_IO;
            break;
        }
    }
    free(buf);
    return s;
}

sg_status sg_tiff_encode(const sg_image *img, sg_output *o)
{
    const char *path = sg_output_path(o);
    if (!TIFFIsCODECConfigured(COMPRESSION_ADOBE_DEFLATE))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: this libtiff has no deflate codec", path);
    /* libtiff closes the descriptor it is given; the output keeps its own
     * to fsync and close when it commits. */
    int fd = dup(sg_output_fd(o));
    if (fd < 0)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
    tiff_job job = {0};
    TIFFOpenOptions *opts = open_options(&job, SG_IMAGE_MAX_BYTES);
    if (!opts) {
        close(fd);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libtiff", path);
    }
    /* Classic TIFF's offsets are 32-bit; BigTIFF where the file might
     * pass 4 GiB (few readers lack it now). */
    bool big = sg_image_bytes(img) > ((size_t)2 << 30);
    TIFF *tif = TIFFFdOpenExt(fd, path, big ? "w8" : "w", opts);
    TIFFOpenOptionsFree(opts);
    if (!tif) {
        close(fd);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, job.msg[0] ? job.msg : "libtiff failed");
    }
    uint32_t rps = strip_rows(img);
    sg_status s = write_tags(tif, img, rps);
    if (s == SEGRT_OK)
        s = write_strips(tif, img, rps);
    /* TIFFClose writes the directory but cannot fail; TIFFFlush can. */
    if (s == SEGRT_OK && !TIFFFlush(tif))
        s = SEGRT_ERROR_IO;
    TIFFClose(tif);
    if (s == SEGRT_ERROR_OUT_OF_MEMORY)
        return sg_error_prefix(s, "%s: ", path);
    if (s != SEGRT_OK)
        return sg_error(s, "%s: cannot write TIFF: %s", path, job.msg[0] ? job.msg : "libtiff failed");
    return SEGRT_OK;
}
