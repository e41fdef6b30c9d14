/* TIFF through libtiff (4.5 or later): strips and tiles, contiguous and
 * separate planes, 8- and 16-bit unsigned samples; grey (min-is-black or
 * min-is-white), RGB, 8-bit palettes and JPEG-compressed YCbCr. Every page
 * of the main IFD chain, as a volume when they agree (image.h). Errors and
 * warnings go to per-handle handlers set through TIFFOpenOptions, so
 * libtiff's global handlers (which print to stderr) are neither called nor
 * replaced.
 *
 * A read is two passes over the file, each with its own handle. The scan
 * reads every page's directory and checks it (the pages agree; each is a
 * kind segrt takes; its strips or tiles lie inside the file and their
 * codec can decode them to no more than the pixels claimed); a probe stops
 * there. The decode then allocates the volume once and fills it page by
 * page. Two handles because libtiff caps its own allocations per handle,
 * and the cap that suits directories (their arrays come from the file) is
 * tighter than one that lets a codec hold a whole strip. */
#include "io/image.h"
#include "io/tiff_internal.h"

#include "core/mem.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>
#include <unistd.h>

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
    job->failed = true;
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

/* Options for a handle whose single allocations libtiff caps at
 * max_alloc. */
TIFFOpenOptions *sg_tiff_open_options(tiff_job *job, uint64_t max_alloc)
{
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    if (!opts)
        return NULL;
    TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, job);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, job);
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)max_alloc);
#if TIFFLIB_AT_LEAST(4, 7, 0)
    /* All of a handle's live allocations together: one directory's arrays
     * and one codec's buffers at a time, each under the single cap. */
    TIFFOpenOptionsSetMaxCumulatedMemAlloc(opts, (tmsize_t)(2 * max_alloc));
#endif
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

sg_status sg_tiff_bad(const char *name, const tiff_job *job, const char *what)
{
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: %s", name, job->msg[0] ? job->msg : what);
}

/* "NAME" for page 0, "NAME, page K" after it: where a message points. */
const char *sg_tiff_page_name(const char *name, uint32_t page, char *buf, size_t cap)
{
    if (page == 0)
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "%s, page %u", name, page);
    return buf;
}

static const char *format_name(uint16_t format)
{
    switch (format) {
    case SAMPLEFORMAT_UINT:
    case SAMPLEFORMAT_VOID:
        return "unsigned integers";
    case SAMPLEFORMAT_INT:
        return "signed integers";
    case SAMPLEFORMAT_IEEEFP:
        return "floating-point";
    default:
        return "complex or unknown";
    }
}

/* The current directory's tags, before anything is checked. */
sg_status sg_tiff_read_tags(TIFF *tif, const tiff_job *job, const char *where, tiff_layout *l)
{
    memset(l, 0, sizeof *l);
    if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l->width) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l->height))
        return sg_tiff_bad(where, job, "no ImageWidth or ImageLength");
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l->bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l->samples);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &l->format);
    if (l->format == SAMPLEFORMAT_VOID) /* untyped: read as unsigned, as libtiff's tools do */
        l->format = SAMPLEFORMAT_UINT;
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l->planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &l->compression);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SUBFILETYPE, &l->subfile);
    uint16_t old = 0;
    if (TIFFGetField(tif, TIFFTAG_OSUBFILETYPE, &old) && old == OFILETYPE_REDUCEDIMAGE)
        l->subfile |= FILETYPE_REDUCEDIMAGE;
    /* Photometric is required, but files without it exist; guess as
     * libtiff's own tools do. */
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l->photometric))
        l->photometric = l->samples < 3 ? PHOTOMETRIC_MINISBLACK : PHOTOMETRIC_RGB;
    l->tiled = TIFFIsTiled(tif) != 0;
    return SEGRT_OK;
}

/* Refuses a page that is not a slice of the z-stack page 0 starts: a
 * reduced-resolution level or a mask, then any difference in size or
 * sample type. Checked before the page's own kind, so that a pyramid of
 * another type is called a pyramid. */
static sg_status check_agrees(const char *name, uint32_t page, const tiff_layout *l, const tiff_layout *first)
{
    const char *stack = "a multi-page TIFF is read as a volume only when its pages agree";
    if (l->subfile & FILETYPE_REDUCEDIMAGE)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: page %u is a reduced-resolution image (NewSubfileType %u): a pyramid or thumbnail, not "
                        "a z-stack; segrt does not read pyramidal TIFFs yet",
                        name, page, l->subfile);
    if (l->subfile & FILETYPE_MASK)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: page %u is a transparency mask (NewSubfileType %u), not a slice of a z-stack", name, page,
                        l->subfile);
    if (l->width < first->width && l->height < first->height)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: page %u is %ux%u, smaller than page 0 (%ux%u) both ways: a pyramid, not a z-stack; "
                        "segrt does not read pyramidal TIFFs yet",
                        name, page, l->width, l->height, first->width, first->height);
    if (l->width != first->width || l->height != first->height)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: page %u is %ux%u, page 0 is %ux%u; %s in size", name, page,
                        l->width, l->height, first->width, first->height, stack);
    if (l->samples != first->samples)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: page %u has %u samples per pixel, page 0 has %u; %s", name,
                        page, l->samples, first->samples, stack);
    if (l->bits != first->bits)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: page %u has %u-bit samples, page 0 %u-bit; %s", name, page,
                        l->bits, first->bits, stack);
    if (l->format != first->format)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: page %u has %s samples, page 0 %s; %s", name, page,
                        format_name(l->format), format_name(first->format), stack);
    return SEGRT_OK;
}

sg_dtype sg_tiff_dtype(const tiff_layout *l)
{
    switch (l->format) {
    case SAMPLEFORMAT_UINT:
        return l->bits == 8 ? SEGRT_DTYPE_UINT8 : l->bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UNDEFINED;
    case SAMPLEFORMAT_INT:
        return l->bits == 8    ? SEGRT_DTYPE_INT8
               : l->bits == 16 ? SEGRT_DTYPE_INT16
               : l->bits == 32 ? SEGRT_DTYPE_INT32
                               : SEGRT_DTYPE_UNDEFINED;
    case SAMPLEFORMAT_IEEEFP:
        return l->bits == 32 ? SEGRT_DTYPE_FLOAT32 : l->bits == 64 ? SEGRT_DTYPE_FLOAT64 : SEGRT_DTYPE_UNDEFINED;
    default:
        return SEGRT_DTYPE_UNDEFINED;
    }
}

/* Checks that segrt takes the page's kind, and sets up its decoding
 * (YCbCr to RGB is a codec setting of each directory). */
sg_status sg_tiff_check_kind(TIFF *tif, const tiff_job *job, const char *where, tiff_layout *l, bool any_type)
{
    if (!TIFFIsCODECConfigured(l->compression))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF compression %u is not in this libtiff", where,
                        l->compression);
    if (!any_type && l->format != SAMPLEFORMAT_UINT)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF %s samples are not supported (unsigned integers only)",
                        where, l->format == SAMPLEFORMAT_IEEEFP ? "floating-point" : "signed or complex");
    if (!any_type && l->bits != 8 && l->bits != 16)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %u-bit TIFF samples are not supported (8 or 16 only)", where,
                        l->bits);
    if (any_type && sg_tiff_dtype(l) == SEGRT_DTYPE_UNDEFINED)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: %u-bit TIFF %s samples are not supported (unsigned 8 or 16 bits, signed 8, 16 or 32, "
                        "floating-point 32 or 64)",
                        where, l->bits, format_name(l->format));
    /* Palettes index with unsigned samples; min-is-white inverts over an
     * unsigned range. */
    if (any_type && l->format != SAMPLEFORMAT_UINT &&
        (l->photometric == PHOTOMETRIC_PALETTE || l->photometric == PHOTOMETRIC_MINISWHITE))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF %s samples with photometric %u are not supported", where,
                        format_name(l->format), l->photometric);
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
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: 16-bit TIFF palettes are not supported", where);
        l->palette = true;
        base = 1;
        break;
    case PHOTOMETRIC_YCBCR:
        /* JPEG-compressed YCbCr (whole-slide tiles, scanners): libjpeg
         * converts to RGB and upsamples. Other YCbCr is rare. */
        if (l->compression != COMPRESSION_JPEG)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: YCbCr TIFF other than JPEG-compressed is not supported",
                            where);
        if (!TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
            return sg_tiff_bad(where, job, "cannot convert its YCbCr to RGB");
        base = 3;
        break;
    default:
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: TIFF photometric interpretation %u (CMYK, Lab, ...) is not supported", where,
                        l->photometric);
    }
    if (l->samples != base && !(l->samples == base + 1 && !l->palette))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF with %u samples per pixel for photometric %u", where,
                        l->samples, l->photometric);
    if (l->planar != PLANARCONFIG_CONTIG && l->planar != PLANARCONFIG_SEPARATE)
        return sg_tiff_bad(where, job, "unknown PlanarConfiguration");
    if (l->samples == 1)
        l->planar = PLANARCONFIG_CONTIG; /* the same bytes either way */
    l->channels = l->palette ? 3 : l->samples;
    return SEGRT_OK;
}

/* The page's strips or tiles: their size, how many a read decodes and how
 * many bytes they decode to. The page's dims have passed the pixel cap. */
sg_status sg_tiff_check_geometry(TIFF *tif, const tiff_job *job, const char *where, uint64_t max_bytes, tiff_layout *l)
{
    bool separate = l->planar == PLANARCONFIG_SEPARATE;
    uint64_t sample = l->bits / 8, unit = separate ? sample : sample * l->samples;
    uint64_t planes = separate ? l->samples : 1, per_plane, have;
    if (l->tiled) {
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &l->tw) || !TIFFGetField(tif, TIFFTAG_TILELENGTH, &l->th) ||
            !l->tw || !l->th)
            return sg_tiff_bad(where, job, "no tile size");
        if ((uint64_t)l->tw * l->th > max_bytes / unit)
            return sg_tiff_bad(where, job, "tiles larger than an image may be");
        l->unit_max = (uint64_t)l->tw * l->th * unit;
        if ((uint64_t)TIFFTileSize64(tif) < l->unit_max)
            return sg_tiff_bad(where, job, "tile size does not fit the image");
        per_plane = ((uint64_t)l->width + l->tw - 1) / l->tw * (((uint64_t)l->height + l->th - 1) / l->th);
        l->decoded = per_plane * planes * l->unit_max;
        have = TIFFNumberOfTiles(tif);
    } else {
        uint32_t rps = 0;
        TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
        if (rps == 0 || rps > l->height)
            rps = l->height;
        /* Within an image the pixel cap passed, a strip always fits; a
         * region source takes larger images, but no larger strips. */
        if ((uint64_t)rps * l->width > max_bytes / unit)
            return sg_tiff_bad(where, job, "strips larger than an image may be");
        l->tw = l->width;
        l->th = rps;
        l->unit_max = (uint64_t)rps * l->width * unit;
        per_plane = (l->height - 1) / rps + 1;
        l->decoded = (uint64_t)l->height * l->width * unit * planes;
        have = TIFFNumberOfStrips(tif);
    }
    if (have < per_plane * planes)
        return sg_tiff_bad(where, job,
                           l->tiled ? "fewer tiles than the image needs" : "fewer strips than the image has rows for");
    l->units = (uint32_t)(per_plane * planes); /* at most have, a uint32 */
    return SEGRT_OK;
}

/* Checks that each strip or tile a read decodes lies inside the file (n
 * bytes), and adds up their bytes. */
sg_status sg_tiff_check_data(TIFF *tif, const tiff_job *job, const char *where, tiff_layout *l)
{
    const char *what = l->tiled ? "tile" : "strip";
    l->coded = 0;
    for (uint32_t i = 0; i < l->units; i++) {
        int err = 0;
        uint64_t off = TIFFGetStrileOffsetWithErr(tif, i, &err);
        uint64_t len = err ? 0 : TIFFGetStrileByteCountWithErr(tif, i, &err);
        if (err)
            return sg_tiff_bad(where, job, "cannot read where the strips or tiles lie");
        if (len == 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "%s: bad TIFF: %s %u has no data (libtiff reads no sparse TIFFs)", where, what, i);
        if (off > job->n || len > job->n - off)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "%s: bad TIFF: %s %u (bytes %llu to %llu) runs past the end of the file (%llu bytes)",
                            where, what, i, (unsigned long long)off, (unsigned long long)(off + len),
                            (unsigned long long)job->n);
        l->coded += len;
    }
    return SEGRT_OK;
}

uint64_t sg_tiff_codec_ratio(uint16_t compression)
{
    switch (compression) {
    case COMPRESSION_NONE:
        return 1;
    case COMPRESSION_PACKBITS:
        return TIFF_PACKBITS_MAX_RATIO;
    case COMPRESSION_ADOBE_DEFLATE:
    case COMPRESSION_DEFLATE:
        return TIFF_DEFLATE_MAX_RATIO;
    case COMPRESSION_LZW:
        return TIFF_LZW_MAX_RATIO;
    case COMPRESSION_ZSTD:
        return TIFF_ZSTD_MAX_RATIO;
    default:
        return SG_IMAGE_UNBOUNDED_RATIO;
    }
}

static const char *codec_name(uint16_t compression, char *buf, size_t cap)
{
    const TIFFCodec *c = compression == COMPRESSION_NONE ? NULL : TIFFFindCODEC(compression);
    if (compression == COMPRESSION_NONE)
        snprintf(buf, cap, "no compression");
    else if (c)
        snprintf(buf, cap, "%s", c->name);
    else
        snprintf(buf, cap, "compression %u", compression);
    return buf;
}

/* Codecs that hold a decoded strip or tile of their own (about twice its
 * size at most) as they decode; the others decode into the caller's. */
bool sg_tiff_codec_buffers(uint16_t compression)
{
    return compression == COMPRESSION_WEBP || compression == COMPRESSION_LERC ||
           compression == COMPRESSION_PIXARLOG || compression == COMPRESSION_JXL;
}

/* What the scan learns of the whole file. */
typedef struct tiff_scan {
    tiff_layout first;  /* page 0 */
    uint32_t pages;
    uint64_t decoded;   /* decoded bytes of every page's strips or tiles */
    uint64_t allowed;   /* the most their codecs can decode them to */
    uint64_t coded;     /* their bytes in the file */
    uint64_t ratio_max; /* of the codecs seen */
    uint16_t loosest;   /* the codec with that ratio */
    uint64_t unit_max;  /* the largest strip or tile, decoded */
    bool staged;        /* some page is tiled or has separate planes: read through a buffer of unit_max */
    bool buffers;       /* a codec that buffers a strip or tile is used */
} tiff_scan;

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/* Checks the current directory, page (0 first), against page 0's and adds
 * its data to sc. */
static sg_status scan_page(TIFF *tif, const tiff_job *job, const char *name, uint32_t page, uint64_t max_bytes,
                           tiff_scan *sc)
{
    char where[512];
    sg_tiff_page_name(name, page, where, sizeof where);
    if (job->truncated)
        return sg_tiff_bad(where, job, "truncated");
    tiff_layout l;
    SG_TRY(sg_tiff_read_tags(tif, job, where, &l));
    if (page > 0)
        SG_TRY(check_agrees(name, page, &l, &sc->first));
    SG_TRY(sg_tiff_check_kind(tif, job, where, &l, false));
    if (page > 0 && l.channels != sc->first.channels)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: page %u reads as %d channel(s) (photometric %u), page 0 as %d (photometric %u); a "
                        "multi-page TIFF is read as a volume only when its pages agree",
                        name, page, l.channels, l.photometric, sc->first.channels, sc->first.photometric);
    if (page == 0) {
        /* The volume's dims against the pixel cap before any page's strips
         * are looked at. */
        sg_image_info dims = {0};
        SG_TRY(sg_image_check_dims(l.width, l.height, sc->pages, l.channels, l.bits, max_bytes, name, &dims));
    }
    SG_TRY(sg_tiff_check_geometry(tif, job, where, max_bytes, &l));
    SG_TRY(sg_tiff_check_data(tif, job, where, &l));
    uint64_t ratio = sg_tiff_codec_ratio(l.compression);
    /* A page's strips may share bytes; it cannot have more of its own
     * than the file. */
    uint64_t coded = l.coded < job->n ? l.coded : job->n;
    sc->decoded = add_sat(sc->decoded, l.decoded);
    sc->allowed = add_sat(sc->allowed, ratio > UINT64_MAX / (coded + 1) ? UINT64_MAX : ratio * coded);
    sc->coded = add_sat(sc->coded, l.coded);
    if (ratio > sc->ratio_max) {
        sc->ratio_max = ratio;
        sc->loosest = l.compression;
    }
    sc->unit_max = l.unit_max > sc->unit_max ? l.unit_max : sc->unit_max;
    sc->staged = sc->staged || l.tiled || l.planar == PLANARCONFIG_SEPARATE;
    sc->buffers = sc->buffers || sg_tiff_codec_buffers(l.compression);
    if (page == 0)
        sc->first = l;
    return SEGRT_OK;
}

/* The scan (see the top of the file): fills info and sc, or says what is
 * wrong, naming the page. */
static sg_status scan(TIFF *tif, tiff_job *job, const char *name, uint64_t max_bytes, sg_image_info *info,
                      tiff_scan *sc)
{
    memset(sc, 0, sizeof *sc);
    /* Page 0's own checks come first: a single-page file of a kind segrt
     * does not take is told so before anything else. */
    char where[512];
    sg_tiff_page_name(name, 0, where, sizeof where);
    if (job->truncated)
        return sg_tiff_bad(name, job, "truncated");
    tiff_layout l;
    SG_TRY(sg_tiff_read_tags(tif, job, where, &l));
    SG_TRY(sg_tiff_check_kind(tif, job, where, &l, false));
    /* Counting follows only the chain of directory offsets (and refuses a
     * loop); it leaves page 0 current. An error before it did not stop the
     * open and is not the count's. */
    job->failed = false;
    tdir_t pages = TIFFNumberOfDirectories(tif);
    if (job->failed || pages == 0)
        return sg_tiff_bad(name, job, "cannot follow the chain of pages");
    if (pages > TIFF_MAX_PAGES)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF of %u pages; segrt reads at most %u", name,
                        (unsigned)pages, TIFF_MAX_PAGES);
    sc->pages = (uint32_t)pages;
    for (uint32_t page = 0; page < sc->pages; page++) {
        if (page > 0 && !TIFFReadDirectory(tif)) {
            char at[512];
            return sg_tiff_bad(sg_tiff_page_name(name, page, at, sizeof at), job, "cannot read the page's directory");
        }
        SG_TRY(scan_page(tif, job, name, page, max_bytes, sc));
    }
    /* No more than the file's bytes times the loosest codec, whatever the
     * strips share. */
    uint64_t file_cap = sc->ratio_max > UINT64_MAX / (job->n + 1) ? UINT64_MAX : sc->ratio_max * job->n;
    uint64_t allowed = add_sat(sc->allowed < file_cap ? sc->allowed : file_cap, TIFF_RATIO_SLACK);
    const tiff_layout *f = &sc->first;
    SG_TRY(sg_image_check_dims(f->width, f->height, sc->pages, f->channels, f->bits, max_bytes, name, info));
    if (sc->decoded > allowed) {
        /* The decoded size is the pixels', or more where tiles overhang
         * the image. */
        char what[160], decoded[32], coded[32], most[32], codec[64];
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: TIFF claims %s, %s decoded from %s of strip and tile data; with %s that is at most %s "
                        "(%llu:1)",
                        name, sg_image_describe(info, what, sizeof what),
                        sg_image_format_bytes(sc->decoded, decoded, sizeof decoded),
                        sg_image_format_bytes(sc->coded, coded, sizeof coded),
                        codec_name(sc->loosest, codec, sizeof codec), sg_image_format_bytes(allowed, most, sizeof most),
                        (unsigned long long)sc->ratio_max);
    }
    /* Beside the pixels: a palette page's indices, a strip or tile of
     * separate planes or tiles, a buffering codec's strip, and codec
     * state. */
    info->scratch_bytes = (f->palette ? (uint64_t)f->width * f->height : 0) + (sc->staged ? sc->unit_max : 0) +
                          (sc->buffers ? 2 * sc->unit_max : 0) + (1 << 20);
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

/* The page's tiles into dst (one page), through buf (one tile). */
static sg_status read_tiles(TIFF *tif, const tiff_job *job, const char *where, const tiff_layout *l, uint8_t *buf,
                            sg_image *dst)
{
    bool separate = l->planar == PLANARCONFIG_SEPARATE;
    size_t unit = (size_t)(l->bits / 8) * (separate ? 1 : l->samples);
    tmsize_t need = (tmsize_t)l->unit_max;
    int planes = separate ? l->samples : 1;
    for (uint32_t y = 0; y < l->height; y += l->th)
        for (uint32_t x = 0; x < l->width; x += l->tw)
            for (int p = 0; p < planes; p++) {
                uint32_t tile = TIFFComputeTile(tif, x, y, 0, (uint16_t)p);
                /* libtiff can report a whole tile while its codec wrote less
                 * (deflate data that ends early): what it leaves is 0, not
                 * the last tile's bytes. */
                memset(buf, 0, (size_t)need);
                if (TIFFReadEncodedTile(tif, tile, buf, need) != need)
                    return sg_tiff_bad(where, job, "a tile cannot be read");
                uint32_t cols = l->width - x < l->tw ? l->width - x : l->tw;
                uint32_t rows = l->height - y < l->th ? l->height - y : l->th;
                place(l, buf, (size_t)l->tw * unit, x, y, cols, rows, separate ? p : -1, dst);
            }
    return SEGRT_OK;
}

/* The page's strips into dst (one page): contiguous strips straight into
 * it, separate planes through buf (one strip). */
static sg_status read_strips(TIFF *tif, const tiff_job *job, const char *where, const tiff_layout *l, uint8_t *buf,
                             sg_image *dst)
{
    bool separate = l->planar == PLANARCONFIG_SEPARATE;
    uint32_t rps = l->th;
    size_t row = (size_t)l->width * (l->bits / 8) * (separate ? 1 : l->samples);
    uint32_t per_plane = (l->height - 1) / rps + 1;
    int planes = separate ? l->samples : 1;
    for (int p = 0; p < planes; p++)
        for (uint32_t k = 0; k < per_plane; k++) {
            uint32_t y = k * rps, rows = l->height - y < rps ? l->height - y : rps;
            tmsize_t need = (tmsize_t)(rows * row);
            uint8_t *to = separate ? buf : (uint8_t *)dst->pixels + (size_t)y * row;
            /* As for tiles: what the codec leaves is 0, not uninitialised
             * memory. */
            memset(to, 0, (size_t)need);
            if (TIFFReadEncodedStrip(tif, (uint32_t)p * per_plane + k, to, need) != need)
                return sg_tiff_bad(where, job, "a strip cannot be read");
            if (separate)
                place(l, buf, row, 0, y, l->width, rows, p, dst);
        }
    return SEGRT_OK;
}

/* Palette indices (1 channel, 8 bits) to 8-bit RGB through the colour map.
 * Maps are 16-bit; some old writers stored 8-bit values in them, which
 * shows as no entry above 255 (libtiff's tools test the same). */
static sg_status apply_palette(TIFF *tif, const tiff_job *job, const char *where, const sg_image *index,
                               sg_image *rgb)
{
    uint16_t *r, *g, *b;
    if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &r, &g, &b))
        return sg_tiff_bad(where, job, "a palette image without a ColorMap");
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

/* The decode (see the top of the file): every page into out, allocated
 * here for info's dims. Each page's layout is read again from this
 * handle; a file that no longer matches the scan is refused. */
static sg_status decode_pages(TIFF *tif, const tiff_job *job, const char *name, const sg_image_info *info,
                              const tiff_scan *sc, sg_image *out)
{
    SG_TRY(sg_image_alloc_info(info, name, out));
    const tiff_layout *f = &sc->first;
    sg_image index = {0};
    uint8_t *buf = NULL;
    sg_status s = SEGRT_OK;
    if (f->palette)
        s = sg_image_alloc(f->width, f->height, 1, 8, SG_IMAGE_MAX_BYTES, name, &index);
    if (s == SEGRT_OK && sc->staged && !(buf = sg_malloc(sc->unit_max)))
        s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    size_t page_bytes = sg_image_page_bytes(out);
    for (uint32_t page = 0; page < sc->pages && s == SEGRT_OK; page++) {
        char where[512];
        sg_tiff_page_name(name, page, where, sizeof where);
        if (page > 0 && !TIFFReadDirectory(tif)) {
            s = sg_tiff_bad(where, job, "cannot read the page's directory");
            break;
        }
        tiff_layout l;
        if (job->truncated)
            s = sg_tiff_bad(where, job, "truncated");
        if (s == SEGRT_OK)
            s = sg_tiff_read_tags(tif, job, where, &l);
        if (s == SEGRT_OK)
            s = sg_tiff_check_kind(tif, job, where, &l, false);
        if (s == SEGRT_OK)
            s = sg_tiff_check_geometry(tif, job, where, SG_IMAGE_MAX_BYTES, &l);
        if (s == SEGRT_OK && (l.width != f->width || l.height != f->height || l.channels != f->channels ||
                              l.bits != f->bits || l.samples != f->samples || l.palette != f->palette ||
                              l.unit_max > sc->unit_max || ((l.tiled || l.planar == PLANARCONFIG_SEPARATE) && !buf)))
            s = sg_error(SEGRT_ERROR_IO, "%s: the file changed while it was read", where);
        if (s != SEGRT_OK)
            break;
        sg_image slice = *out;
        slice.depth = 1;
        slice.pixels = (uint8_t *)out->pixels + (size_t)page * page_bytes;
        sg_image *dst = l.palette ? &index : &slice;
        s = l.tiled ? read_tiles(tif, job, where, &l, buf, dst) : read_strips(tif, job, where, &l, buf, dst);
        if (s == SEGRT_OK && l.palette)
            s = apply_palette(tif, job, where, &index, &slice);
        if (s == SEGRT_OK && l.min_is_white)
            invert_grey(&slice);
    }
    free(buf);
    sg_image_free(&index);
    return s;
}

/* Opens the file for one pass, libtiff's single allocations capped at
 * max_alloc: from job's bytes when path is NULL, else by path. */
TIFF *sg_tiff_open_pass(tiff_job *job, const char *name, const char *path, uint64_t max_alloc)
{
    job->pos = 0;
    job->msg[0] = '\0';
    job->failed = job->truncated = false;
    TIFFOpenOptions *opts = sg_tiff_open_options(job, max_alloc);
    if (!opts)
        return NULL;
    TIFF *tif = path ? TIFFOpenExt(path, "r", opts)
                     : TIFFClientOpenExt(name, "r", (thandle_t)job, mem_read, mem_write, mem_seek, mem_close,
                                         mem_size, mem_map, mem_unmap, opts);
    TIFFOpenOptionsFree(opts);
    return tif;
}

static sg_status decode(tiff_job *job, const char *name, const char *path, uint64_t max_bytes, sg_image_info *info,
                        sg_image *out)
{
    uint64_t dir_cap = 4 * job->n;
    dir_cap = dir_cap < TIFF_LIB_MIN_ALLOC ? TIFF_LIB_MIN_ALLOC : dir_cap;
    dir_cap = dir_cap > max_bytes ? max_bytes : dir_cap;
    TIFF *tif = sg_tiff_open_pass(job, name, path, dir_cap);
    if (!tif)
        return sg_tiff_bad(name, job, "cannot open");
    tiff_scan sc;
    sg_status s = scan(tif, job, name, max_bytes, info, &sc);
    TIFFClose(tif);
    if (s != SEGRT_OK || !out)
        return s;
    /* The decode lets a codec hold a strip or tile of its own (about
     * twice its size, for PixarLog) beside the directories' arrays. */
    uint64_t codec_cap = 2 * sc.unit_max > dir_cap ? 2 * sc.unit_max : dir_cap;
    tif = sg_tiff_open_pass(job, name, path, codec_cap > max_bytes ? max_bytes : codec_cap);
    if (!tif)
        return sg_tiff_bad(name, job, "cannot open");
    s = decode_pages(tif, job, name, info, &sc, out);
    TIFFClose(tif);
    if (s != SEGRT_OK)
        sg_image_free(out);
    return s;
}

sg_status sg_tiff_decode_memory(const void *bytes, size_t n, const char *name, uint64_t max_bytes,
                                sg_image_info *info, sg_image *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    tiff_job job = {.bytes = bytes, .n = n};
    return decode(&job, name, NULL, max_bytes, info, out);
}

sg_status sg_tiff_decode_file(const char *path, uint64_t max_bytes, sg_image_info *info, sg_image *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(errno));
    tiff_job job = {.n = (uint64_t)st.st_size};
    return decode(&job, path, path, max_bytes, info, out);
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

struct sg_tiff_writer {
    TIFF *tif;
    tiff_job job; /* libtiff's first message */
    const char *path;
    sg_image shape;  /* pixels unused */
    uint32_t rps;    /* rows per strip */
    size_t row;      /* bytes of a row */
    uint8_t *buf;    /* one strip: libtiff may change a strip's bytes as it encodes it (prediction, byte
                        swapping), so each strip goes through a copy */
    uint32_t filled; /* rows of the strip in buf */
    uint32_t strip;  /* the page's next strip */
    int32_t page, y; /* the next row's page and row */
    bool tags;       /* the page's tags are set */
};

static sg_status writer_fail(sg_tiff_writer *w, sg_status s)
{
    if (s == SEGRT_ERROR_OUT_OF_MEMORY)
        return sg_error_prefix(s, "%s: ", w->path);
    return sg_error(s, "%s: cannot write TIFF: %s", w->path, w->job.msg[0] ? w->job.msg : "libtiff failed");
}

void sg_tiff_writer_free(sg_tiff_writer *w)
{
    if (!w)
        return;
    if (w->tif)
        TIFFClose(w->tif);
    free(w->buf);
    free(w);
}

sg_status sg_tiff_writer_open(sg_output *o, const sg_image *shape, sg_tiff_writer **out)
{
    *out = NULL;
    const char *path = sg_output_path(o);
    if (!TIFFIsCODECConfigured(COMPRESSION_ADOBE_DEFLATE))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: this libtiff has no deflate codec", path);
    sg_tiff_writer *w = sg_calloc(1, sizeof *w);
    if (!w)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    w->path = path;
    w->shape = *shape;
    w->shape.pixels = NULL;
    if (w->shape.depth < 1)
        w->shape.depth = 1;
    w->rps = strip_rows(&w->shape);
    w->row = sg_image_row_bytes(&w->shape);
    if (!(w->buf = sg_malloc((size_t)w->rps * w->row))) {
        free(w);
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    }
    /* libtiff closes the descriptor it is given; the output keeps its own
     * to fsync and close when it commits. */
    int fd = dup(sg_output_fd(o));
    if (fd < 0) {
        sg_tiff_writer_free(w);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    TIFFOpenOptions *opts = sg_tiff_open_options(&w->job, SG_IMAGE_MAX_BYTES);
    if (!opts) {
        close(fd);
        sg_tiff_writer_free(w);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libtiff", path);
    }
    /* Classic TIFF's offsets are 32-bit; BigTIFF where the file might
     * pass 4 GiB (few readers lack it now). */
    bool big = sg_image_bytes(&w->shape) > ((size_t)2 << 30);
    w->tif = TIFFFdOpenExt(fd, path, big ? "w8" : "w", opts);
    TIFFOpenOptionsFree(opts);
    if (!w->tif) {
        close(fd);
        sg_status s =
            sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, w->job.msg[0] ? w->job.msg : "libtiff failed");
        sg_tiff_writer_free(w);
        return s;
    }
    *out = w;
    return SEGRT_OK;
}

/* The strip in buf, then the page's directory when it was the page's
 * last (TIFFWriteDirectory ends a page; the last is ended by TIFFFlush).
 * A volume's slices are its pages, one directory each, in order: what
 * sg_tiff_decode reads back as depth. */
static sg_status writer_strip(sg_tiff_writer *w)
{
    if (TIFFWriteEncodedStrip(w->tif, w->strip, w->buf, (tmsize_t)((size_t)w->filled * w->row)) < 0)
        return SEGRT_ERROR_IO;
    w->strip++;
    w->filled = 0;
    if (w->y == w->shape.height) {
        w->page++;
        w->y = 0;
        w->strip = 0;
        w->tags = false;
        if (w->page < w->shape.depth && !TIFFWriteDirectory(w->tif))
            return SEGRT_ERROR_IO;
    }
    return SEGRT_OK;
}

sg_status sg_tiff_writer_rows(sg_tiff_writer *w, const uint8_t *rows, uint32_t n)
{
    int32_t pages = w->shape.depth;
    while (n > 0) {
        if (w->page >= pages)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: more rows than the image has", w->path);
        sg_status s = SEGRT_OK;
        if (!w->tags) {
            s = write_tags(w->tif, &w->shape, w->rps);
            if (s == SEGRT_OK && pages > 1 &&
                !(TIFFSetField(w->tif, TIFFTAG_SUBFILETYPE, (uint32_t)FILETYPE_PAGE) &&
                  TIFFSetField(w->tif, TIFFTAG_PAGENUMBER, (uint16_t)(w->page < 65535 ? w->page : 65535),
                               (uint16_t)(pages < 65535 ? pages : 65535))))
                s = SEGRT_ERROR_IO;
            if (s != SEGRT_OK)
                return writer_fail(w, s);
            w->tags = true;
        }
        /* The strip's rows: rps, or what is left of the page. */
        uint32_t left = (uint32_t)w->shape.height - (uint32_t)w->y + w->filled;
        uint32_t want = (left < w->rps ? left : w->rps) - w->filled;
        uint32_t take = n < want ? n : want;
        memcpy(w->buf + (size_t)w->filled * w->row, rows, (size_t)take * w->row);
        w->filled += take;
        w->y += (int32_t)take;
        rows += (size_t)take * w->row;
        n -= take;
        if (take == want && (s = writer_strip(w)) != SEGRT_OK)
            return writer_fail(w, s);
    }
    return SEGRT_OK;
}

sg_status sg_tiff_writer_finish(sg_tiff_writer *w)
{
    sg_status s = SEGRT_OK;
    if (w->page < w->shape.depth)
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: ended at page %d, row %d of %d pages of %d rows", w->path,
                     w->page, w->y, w->shape.depth, w->shape.height);
    /* TIFFClose writes the directory but cannot fail; TIFFFlush can. */
    else if (!TIFFFlush(w->tif))
        s = writer_fail(w, SEGRT_ERROR_IO);
    sg_tiff_writer_free(w);
    return s;
}

sg_status sg_tiff_encode(const sg_image *img, sg_output *o)
{
    sg_tiff_writer *w;
    SG_TRY(sg_tiff_writer_open(o, img, &w));
    int32_t pages = img->depth > 1 ? img->depth : 1;
    sg_status s = SEGRT_OK;
    for (int32_t z = 0; z < pages && s == SEGRT_OK; z++)
        s = sg_tiff_writer_rows(w, (const uint8_t *)img->pixels + (size_t)z * sg_image_page_bytes(img),
                                (uint32_t)img->height);
    if (s != SEGRT_OK) {
        sg_tiff_writer_free(w);
        return s;
    }
    return sg_tiff_writer_finish(w);
}
