/* Whole-slide images as region sources, through OpenSlide: every format it
 * reads (Aperio .svs, Hamamatsu .ndpi/.vms/.vmu, MIRAX .mrxs, Leica .scn,
 * Philips TIFF, Ventana .bif, Sakura .svslide, and generic tiled TIFF when
 * opened by sg_source_open_slide), plus its associated images and
 * properties (slide.h).
 *
 * Pixels: OpenSlide gives premultiplied ARGB; a region is un-premultiplied
 * to RGB (rounded as openslide-python does), fully transparent pixels
 * (outside the scanned area) white, as OpenSlide's viewers and QuPath show
 * them, and written planar (R plane, G, B). A level's box is read at
 * level-0 coordinates round(x * downsample): exact pixels where the
 * downsample is a whole number (what OpenSlide computes for levels that
 * divide level 0 exactly); elsewhere OpenSlide places the box at the
 * fraction it computes, as its own read_region does for those coordinates.
 * OpenSlide allocates nothing per region but the caller's buffer, which it
 * fills width x height x 4 bytes: a box is read in pieces of at most
 * SLIDE_PIECE_PIXELS pixels (and the caller's cap) into one buffer.
 *
 * Threads: each source opens a handle of its own, with OpenSlide's own
 * tile cache; sources of one file share nothing (no handle, no cache), so
 * the contract's "sources of one file are independent" holds as OpenSlide
 * handles are themselves thread-safe.
 *
 * Errors: OpenSlide's handle goes into an error state it keeps (its text
 * from openslide_get_error); the source reports it naming the file, as
 * INVALID_MODEL (a corrupt or truncated slide, at open or at a read).
 *
 * Hostile files: OpenSlide (Debian's 3.4) trusts a TIFF header more than
 * segrt's readers do: it allocates a tag's count before reading it, a
 * tile's size with g_malloc (which aborts when refused), and divides by a
 * level's rounded downsample (zero for an Aperio level larger than page
 * 0). So a TIFF-based slide is checked before OpenSlide opens it
 * (check_tiff: raw entries within the file, libtiff's directories with
 * segrt's caps, tile sizes, Aperio's level order), the checks fuzz_slide
 * showed were needed; other vendors' non-TIFF files (MIRAX, Hamamatsu VMS)
 * are OpenSlide's alone. */
#include "io/slide.h"

#include "core/file.h"
#include "core/mem.h"
#include "io/image.h"
#include "io/tiff_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SEGRT_HAVE_OPENSLIDE
#include <openslide.h>
#include <pthread.h>
#include <tiffio.h>

/* The most one tile may decode to, as ARGB: OpenSlide allocates a tile's
 * buffer with g_malloc, which aborts the process when refused, so a
 * corrupt header's tile size is refused before OpenSlide sees it (real
 * slides' tiles are 256 to 4096 pixels a side: 64 MiB at most). */
#define SLIDE_MAX_TILE_BYTES ((uint64_t)256 << 20)
/* The most one associated image may decode to, as ARGB (read whole). */
#define SLIDE_MAX_ASSOCIATED_BYTES ((uint64_t)1 << 30)
/* The most TIFF directories a slide may have. */
#define SLIDE_MAX_DIRS 4096

/* One piece of a box: 4 Mi pixels, 16 MiB of ARGB. */
#define SLIDE_PIECE_PIXELS ((int64_t)1 << 22)

typedef struct slide_source {
    openslide_t *osr;
    uint64_t assoc_cap; /* the most an associated image's ARGB may take */
    uint32_t *buf; /* one piece's ARGB */
    int64_t buf_pixels;
    size_t n_assoc;
    const char *const *assoc; /* OpenSlide's names */
    int64_t (*assoc_dims)[2]; /* height, width */
} slide_source;

static const sg_source_ops slide_ops;

/* OpenSlide opens TIFFs without handlers of its own, so libtiff's global
 * ones would print each corrupt tile's complaint on stderr; its errors
 * reach segrt through openslide_get_error instead. segrt's own TIFF
 * handles have per-handle handlers (image_tiff.c) that keep the global
 * ones from being called, so silencing them changes nothing there. */
static void quiet_libtiff(void)
{
    TIFFSetErrorHandler(NULL);
    TIFFSetWarningHandler(NULL);
}

static void slide_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, quiet_libtiff);
}

/* OpenSlide's error text, on one line, naming the file. */
static sg_status slide_failed(const sg_source *s, const char *what, const char *err)
{
    char line[512];
    snprintf(line, sizeof line, "%s", err ? err : "unknown error");
    for (char *c = line; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s: %s", s->path, what, line);
}

static void slide_close(sg_source *s)
{
    slide_source *ss = s->state;
    if (!ss)
        return;
    if (ss->osr)
        openslide_close(ss->osr);
    free(ss->buf);
    free(ss->assoc_dims);
    free(ss);
}

/* ARGB premultiplied (n pixels) to RGB planes at r, g, b, each plane's row
 * step 1 (the caller points at the row). */
static void argb_to_planes(const uint32_t *src, int64_t n, uint8_t *r, uint8_t *g, uint8_t *b)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t p = src[i], a = p >> 24, cr = (p >> 16) & 255, cg = (p >> 8) & 255, cb = p & 255;
        if (a == 0) {
            cr = cg = cb = 255;
        } else if (a != 255) {
            /* openslide-python's rounding; a premultiplied channel is at
             * most a, but a corrupt one is clamped rather than wrapped. */
            cr = (cr * 255 + a / 2) / a;
            cg = (cg * 255 + a / 2) / a;
            cb = (cb * 255 + a / 2) / a;
            cr = cr > 255 ? 255 : cr;
            cg = cg > 255 ? 255 : cg;
            cb = cb > 255 ? 255 : cb;
        }
        r[i] = (uint8_t)cr;
        g[i] = (uint8_t)cg;
        b[i] = (uint8_t)cb;
    }
}

static sg_status slide_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    slide_source *ss = s->state;
    const int64_t h = box->size[1], w = box->size[2], plane = h * w;
    const double ds = s->info.downsample[level];
    int64_t pw = w < ss->buf_pixels ? w : ss->buf_pixels;
    int64_t ph = ss->buf_pixels / pw;
    ph = ph > h ? h : ph;
    uint8_t *out = dst;
    for (int64_t y = 0; y < h; y += ph) {
        int64_t th = h - y < ph ? h - y : ph;
        for (int64_t x = 0; x < w; x += pw) {
            int64_t tw = w - x < pw ? w - x : pw;
            int64_t x0 = llround((double)(box->start[2] + x) * ds), y0 = llround((double)(box->start[1] + y) * ds);
            openslide_read_region(ss->osr, ss->buf, x0, y0, level, tw, th);
            const char *err = openslide_get_error(ss->osr);
            if (err)
                return slide_failed(s, "cannot read a region", err);
            for (int64_t r = 0; r < th; r++) {
                int64_t at = (y + r) * w + x;
                argb_to_planes(ss->buf + r * tw, tw, out + at, out + plane + at, out + 2 * plane + at);
            }
        }
    }
    return SEGRT_OK;
}

static const sg_source_ops slide_ops = {.read_region = slide_read_region, .close = slide_close};

/* A property as a positive number, or 0 where absent or not one. */
static double property_number(openslide_t *osr, const char *name)
{
    const char *v = openslide_get_property_value(osr, name);
    if (!v)
        return 0;
    char *end;
    double d = strtod(v, &end);
    return end != v && *end == '\0' && isfinite(d) && d > 0 ? d : 0;
}

static uint64_t read_uint(const uint8_t *p, int n, bool le)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[le ? i : n - 1 - i] << (8 * i);
    return v;
}

/* A TIFF's raw directory chain, as OpenSlide's own TIFF parser walks it
 * (its "tifflike" reader, beside libtiff): that parser allocates each
 * entry's count x type size before it reads the data, so an entry whose
 * data would not fit in the file (a corrupt count of billions) is refused
 * here. f is the open file of size bytes. */
static sg_status check_tiff_entries(const char *path, FILE *f, uint64_t size)
{
    uint8_t head[16];
    if (fread(head, 1, 8, f) != 8)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: truncated header", path);
    bool le = head[0] == 'I';
    uint16_t magic = le ? (uint16_t)(head[2] | head[3] << 8) : (uint16_t)(head[2] << 8 | head[3]);
    bool big = magic == 43;
#define RD(p, n) read_uint(p, n, le)
    uint64_t next;
    if (big) {
        if (fread(head + 8, 1, 8, f) != 8)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: truncated header", path);
        next = RD(head + 8, 8);
    } else {
        next = RD(head + 4, 4);
    }
    static const uint8_t type_size[19] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8, 4, 0, 0, 8, 8, 8};
    const size_t entry = big ? 20 : 12, inline_max = big ? 8 : 4;
    for (int dirs = 0; next != 0; dirs++) {
        if (dirs >= SLIDE_MAX_DIRS || next >= size || fseeko(f, (off_t)next, SEEK_SET) != 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: directory %d at %llu is outside the file",
                            path, dirs, (unsigned long long)next);
        uint8_t b[20];
        if (fread(b, 1, big ? 8 : 2, f) != (big ? 8u : 2u))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: directory %d is truncated", path, dirs);
        uint64_t n = RD(b, big ? 8 : 2);
        if (n > size / entry)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: directory %d has %llu entries", path, dirs,
                            (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            if (fread(b, 1, entry, f) != entry)
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: directory %d is truncated", path, dirs);
            uint16_t type = (uint16_t)RD(b + 2, 2);
            uint64_t count = RD(b + 4, big ? 8 : 4);
            uint64_t bytes = type < sizeof type_size && type_size[type] ? type_size[type] : 1;
            if (count > size / bytes)
                return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                "%s: bad TIFF: directory %d: tag %u has %llu values, more than the file holds",
                                path, dirs, (unsigned)RD(b, 2), (unsigned long long)count);
            bytes *= count;
            uint64_t at = RD(b + (big ? 12 : 8), big ? 8 : 4);
            if (bytes > inline_max && (at > size || bytes > size - at))
                return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                "%s: bad TIFF: directory %d: tag %u's %llu bytes lie past the end of the file",
                                path, dirs, (unsigned)RD(b, 2), (unsigned long long)bytes);
        }
        if (fread(b, 1, big ? 8 : 4, f) != (big ? 8u : 4u))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: directory %d is truncated", path, dirs);
        next = RD(b, big ? 8 : 4);
    }
#undef RD
    return SEGRT_OK;
}

/* Whether path is a TIFF, its size, and (where it is) its raw directory
 * chain checked: this comes before anything of OpenSlide's touches the
 * file, its vendor detection included, which already parses the TIFF. */
static sg_status tiff_precheck(const char *path, bool *is_tiff, uint64_t *size)
{
    *is_tiff = false;
    int fd;
    SG_TRY(sg_open_input(path, &fd));
    uint8_t head[8];
    ssize_t n = read(fd, head, sizeof head);
    struct stat sb;
    int st_ok = fstat(fd, &sb);
    FILE *f = NULL;
    if (n >= 0 && st_ok == 0 && sg_image_format_of_bytes(head, (size_t)n) != SG_IMAGE_TIFF) {
        close(fd);
        return SEGRT_OK;
    }
    if (n < 0 || st_ok != 0 || lseek(fd, 0, SEEK_SET) != 0 || !(f = fdopen(fd, "rb"))) {
        int err = errno;
        close(fd);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    *is_tiff = true;
    *size = (uint64_t)sb.st_size;
    sg_status st = check_tiff_entries(path, f, *size);
    fclose(f);
    return st;
}

bool sg_slide_detect(const char *path)
{
    slide_init();
    /* A TIFF whose raw chain fails the check is not OpenSlide's to look
     * at; the TIFF source reports what is wrong with it. */
    bool is_tiff;
    uint64_t size;
    if (tiff_precheck(path, &is_tiff, &size) != SEGRT_OK) {
        sg_error_clear();
        return false;
    }
    const char *v = openslide_detect_vendor(path);
    return v && strcmp(v, "generic-tiff") != 0;
}

/* A TIFF of size bytes (any TIFF-based slide: Aperio, Hamamatsu NDPI,
 * Leica, Philips, Ventana, generic), its raw chain already checked by
 * tiff_precheck, has its directories checked with segrt's own libtiff
 * handle, allocations capped by the file's size, before OpenSlide opens
 * it: OpenSlide trusts a header's tile size and aborts (g_malloc) on what
 * a corrupt one asks for. Each directory: a size, a tile of at most
 * tile_cap bytes of ARGB, no more tiles than the file could hold offsets
 * for. */
static sg_status check_tiff(const sg_source *s, const char *vendor, uint64_t tile_cap, uint64_t size)
{
    tiff_job job = {.n = size};
    uint64_t dir_cap = 4 * job.n < TIFF_LIB_MIN_ALLOC ? TIFF_LIB_MIN_ALLOC : 4 * job.n;
    TIFF *tif = sg_tiff_open_pass(&job, s->path, s->path, dir_cap);
    if (!tif)
        return sg_tiff_bad(s->path, &job, "cannot open");
    sg_status st = SEGRT_OK;
    int dirs = 0;
    uint32_t w0 = 0, h0 = 0;
    /* An Aperio slide's levels are its tiled pages in file order, page 0
     * the largest: OpenSlide 3.4 divides by the rounded ratio of page 0 to
     * a level, zero for a level more than twice as large (SIGFPE). */
    bool aperio = vendor && strcmp(vendor, "aperio") == 0;
    do {
        char where[512];
        sg_tiff_page_name(s->path, (uint32_t)dirs, where, sizeof where);
        uint32_t w = 0, h = 0, tw = 0, th = 0;
        if (++dirs > SLIDE_MAX_DIRS) {
            st = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: more than %d pages", s->path, SLIDE_MAX_DIRS);
            break;
        }
        if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h) || !w || !h) {
            st = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: no image size", where);
            break;
        }
        if (!TIFFIsTiled(tif))
            continue;
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) || !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || !tw || !th) {
            st = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: no tile size", where);
            break;
        }
        if (dirs == 1) {
            w0 = w;
            h0 = h;
        } else if (aperio && (w > w0 || h > h0)) {
            st = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad Aperio slide: a level of %u x %u after one of %u x %u",
                          where, w, h, w0, h0);
            break;
        }
        uint64_t tiles = ((uint64_t)w + tw - 1) / tw * (((uint64_t)h + th - 1) / th);
        if ((uint64_t)tw * th * 4 > tile_cap || tiles > job.n / 4) {
            st = sg_error(SEGRT_ERROR_INVALID_MODEL,
                          "%s: bad TIFF: %u x %u pixels in tiles of %u x %u, more than the file holds or segrt "
                          "decodes at once",
                          where, w, h, tw, th);
            break;
        }
        /* OpenSlide allocates a tile's byte count before reading it: each
         * tile's data must lie inside the file. */
        uint64_t *off = NULL, *cnt = NULL;
        uint32_t n_tiles = TIFFNumberOfTiles(tif);
        if (!TIFFGetField(tif, TIFFTAG_TILEOFFSETS, &off) || !TIFFGetField(tif, TIFFTAG_TILEBYTECOUNTS, &cnt) ||
            !off || !cnt) {
            st = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: no tile offsets", where);
            break;
        }
        for (uint32_t i = 0; i < n_tiles && st == SEGRT_OK; i++)
            if (off[i] > job.n || cnt[i] > job.n - off[i])
                st = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad TIFF: tile %u's data past the end of the file", where,
                              i);
        if (st != SEGRT_OK)
            break;
    } while (TIFFReadDirectory(tif));
    /* Tag data past the end of the file: OpenSlide's own TIFF parser
     * allocates a tag's count before it finds the data missing. */
    if (st == SEGRT_OK && job.truncated)
        st = sg_tiff_bad(s->path, &job, "truncated");
    TIFFClose(tif);
    return st;
}

sg_status sg_source_open_slide_in(sg_source *s)
{
    slide_source *ss = sg_calloc(1, sizeof *ss);
    if (!ss)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    s->ops = &slide_ops;
    s->state = ss;
    slide_init();
    uint64_t cap = s->max_bytes < SG_IMAGE_MAX_BYTES ? s->max_bytes : SG_IMAGE_MAX_BYTES;
    bool is_tiff;
    uint64_t size = 0;
    SG_TRY(tiff_precheck(s->path, &is_tiff, &size));
    const char *vendor = openslide_detect_vendor(s->path);
    /* Other files (MIRAX, Hamamatsu VMS) are left to OpenSlide. */
    if (is_tiff)
        SG_TRY(check_tiff(s, vendor, cap < SLIDE_MAX_TILE_BYTES ? cap : SLIDE_MAX_TILE_BYTES, size));
    ss->assoc_cap = cap < SLIDE_MAX_ASSOCIATED_BYTES ? cap : SLIDE_MAX_ASSOCIATED_BYTES;
    if (!(ss->osr = openslide_open(s->path)))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: not a slide OpenSlide reads", s->path);
    const char *err = openslide_get_error(ss->osr);
    if (err)
        return slide_failed(s, "cannot open the slide", err);
    int32_t n = openslide_get_level_count(ss->osr);
    if (n < 1 || n > SG_SOURCE_MAX_LEVELS)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %d levels; segrt reads 1 to %d", s->path, (int)n,
                        SG_SOURCE_MAX_LEVELS);
    sg_source_info *in = &s->info;
    in->format = "slide";
    /* OpenSlide's vendor names are static strings of the library. */
    in->vendor = vendor ? vendor : openslide_get_property_value(ss->osr, OPENSLIDE_PROPERTY_NAME_VENDOR);
    in->dtype = SEGRT_DTYPE_UINT8;
    in->n_dims = 2;
    in->channels = 3;
    in->n_levels = n;
    for (int32_t l = 0; l < n; l++) {
        int64_t w = -1, h = -1;
        openslide_get_level_dimensions(ss->osr, l, &w, &h);
        double ds = openslide_get_level_downsample(ss->osr, l);
        /* Dims and the downsample below 2^31 keep a level's bytes and
         * level-0 coordinates (x * downsample) far from wrapping. */
        if (w < 1 || h < 1 || w > INT32_MAX || h > INT32_MAX || !(ds >= 1 && ds <= 2147483648.0))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: level %d is %lld x %lld at downsample %g", s->path,
                            (int)l, (long long)w, (long long)h, ds);
        in->dims[l][0] = 1;
        in->dims[l][1] = h;
        in->dims[l][2] = w;
        in->downsample[l] = l == 0 ? 1 : ds;
    }
    /* mpp is micrometres per pixel at level 0; spacing is mm. */
    in->spacing[0] = 0;
    in->spacing[1] = property_number(ss->osr, OPENSLIDE_PROPERTY_NAME_MPP_Y) / 1000;
    in->spacing[2] = property_number(ss->osr, OPENSLIDE_PROPERTY_NAME_MPP_X) / 1000;
    double th = property_number(ss->osr, "openslide.level[0].tile-height"),
           tw = property_number(ss->osr, "openslide.level[0].tile-width");
    in->tile[0] = 1;
    in->tile[1] = th >= 1 && th <= INT32_MAX ? (int64_t)th : 0;
    in->tile[2] = tw >= 1 && tw <= INT32_MAX ? (int64_t)tw : 0;

    const char *const *names = openslide_get_associated_image_names(ss->osr);
    for (ss->n_assoc = 0; names && names[ss->n_assoc]; ss->n_assoc++)
        ;
    ss->assoc = names;
    if (ss->n_assoc && !(ss->assoc_dims = sg_calloc(ss->n_assoc, sizeof *ss->assoc_dims)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    for (size_t i = 0; i < ss->n_assoc; i++) {
        int64_t w = -1, h = -1;
        openslide_get_associated_image_dimensions(ss->osr, names[i], &w, &h);
        if ((err = openslide_get_error(ss->osr)))
            return slide_failed(s, "cannot read an associated image's size", err);
        ss->assoc_dims[i][0] = h;
        ss->assoc_dims[i][1] = w;
    }

    s->max_all_bytes = SG_IMAGE_MAX_BYTES;
    ss->buf_pixels = SLIDE_PIECE_PIXELS;
    if ((uint64_t)ss->buf_pixels * 4 > cap)
        ss->buf_pixels = cap / 4 > 0 ? (int64_t)(cap / 4) : 1;
    if (!(ss->buf = sg_malloc((size_t)ss->buf_pixels * 4)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for a region's piece", s->path);
    return SEGRT_OK;
}

static slide_source *slide_of(const sg_source *s)
{
    return s && s->ops == &slide_ops ? s->state : NULL;
}

size_t sg_slide_associated_count(const sg_source *s)
{
    slide_source *ss = slide_of(s);
    return ss ? ss->n_assoc : 0;
}

sg_status sg_slide_associated_info(const sg_source *s, size_t i, const char **name, int64_t *height,
                                   int64_t *width)
{
    slide_source *ss = slide_of(s);
    if (!ss || i >= ss->n_assoc)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no associated image %zu", s ? s->path : "(none)", i);
    *name = ss->assoc[i];
    *height = ss->assoc_dims[i][0];
    *width = ss->assoc_dims[i][1];
    return SEGRT_OK;
}

sg_status sg_slide_read_associated(sg_source *s, const char *name, uint8_t *dst)
{
    slide_source *ss = slide_of(s);
    size_t i = 0;
    while (ss && i < ss->n_assoc && strcmp(ss->assoc[i], name) != 0)
        i++;
    if (!ss || i == ss->n_assoc)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no associated image \"%s\"", s ? s->path : "(none)", name);
    int64_t h = ss->assoc_dims[i][0], w = ss->assoc_dims[i][1];
    if (h < 1 || w < 1 || h > INT32_MAX || w > INT32_MAX || (uint64_t)h * (uint64_t)w * 4 > ss->assoc_cap)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: associated image \"%s\" is %lld x %lld, more than segrt reads",
                        s->path, name, (long long)w, (long long)h);
    /* OpenSlide reads an associated image whole, into w x h x 4 bytes. */
    uint32_t *argb = sg_malloc((size_t)(h * w) * 4);
    if (!argb)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for associated image \"%s\"", s->path, name);
    openslide_read_associated_image(ss->osr, name, argb);
    const char *err = openslide_get_error(ss->osr);
    if (!err)
        argb_to_planes(argb, h * w, dst, dst + h * w, dst + 2 * h * w);
    free(argb);
    return err ? slide_failed(s, "cannot read an associated image", err) : SEGRT_OK;
}

const char *sg_slide_property(const sg_source *s, const char *name)
{
    slide_source *ss = slide_of(s);
    return ss ? openslide_get_property_value(ss->osr, name) : NULL;
}

#else /* no OpenSlide */

bool sg_slide_detect(const char *path)
{
    (void)path;
    return false;
}

sg_status sg_source_open_slide_in(sg_source *s)
{
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a whole-slide image, and segrt was built without OpenSlide",
                    s->path);
}

size_t sg_slide_associated_count(const sg_source *s)
{
    (void)s;
    return 0;
}

sg_status sg_slide_associated_info(const sg_source *s, size_t i, const char **name, int64_t *height,
                                   int64_t *width)
{
    (void)name, (void)height, (void)width;
    return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no associated image %zu", s ? s->path : "(none)", i);
}

sg_status sg_slide_read_associated(sg_source *s, const char *name, uint8_t *dst)
{
    (void)dst;
    return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no associated image \"%s\"", s ? s->path : "(none)", name);
}

const char *sg_slide_property(const sg_source *s, const char *name)
{
    (void)s, (void)name;
    return NULL;
}

#endif
