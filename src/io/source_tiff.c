/* TIFF files as region sources: a region decodes only the strips or tiles
 * it touches (libtiff maps the file), so a tiled or stripped TIFF larger
 * than memory can be read by parts.
 *
 * What the pages of a file are (decided at open, from every directory of
 * the main chain; SubIFDs are not looked at):
 * - one page: a 2-D image, one level;
 * - pages that agree with page 0 (size, samples, sample type: what
 *   sg_image_read takes as a volume): a 3-D volume, its pages the depth,
 *   one level;
 * - pages after page 0 that are reduced-resolution images (NewSubfileType
 *   bit 0, or smaller than page 0 both ways) with page 0's channels and
 *   sample type: a pyramid, each such page a level in file order (level 0
 *   is page 0; an SVS's thumbnail is a level like the others);
 * - anything else (slices and levels mixed, masks, pages of another type)
 *   is refused naming the page, as is a pyramid of more than
 *   SG_SOURCE_MAX_LEVELS levels.
 * Samples are those sg_image_read takes (8- and 16-bit unsigned; grey,
 * grey+alpha, RGB, RGBA; 8-bit palettes, expanded to RGB; min-is-white,
 * inverted; JPEG-compressed YCbCr, as RGB), and also signed 8-, 16- and
 * 32-bit integers and 32- and 64-bit floats, kept as stored (the source's
 * dtype). For the files both take, every region equals the same box of
 * sg_image_read's image (test_source checks every box); the whole-image
 * reader stays a reader of its own (image_tiff.c, two passes), kept for
 * its messages and its probe.
 *
 * Limits, as the whole reader's: libtiff's directory allocations capped by
 * the file's size; every strip and tile inside the file; what all of them
 * decode to at most what their codecs can make of the file's bytes; no
 * strip or tile over SG_IMAGE_MAX_BYTES (or the caller's cap). The pixel cap does not apply to
 * the image (a source is for images larger than memory), only to
 * read_all's allocation; a level may hold up to TIFF_SOURCE_MAX_LEVEL
 * bytes. So memory is one strip or tile (the last one decoded is kept:
 * boxes that share it decode it once) and libtiff's directory arrays. */
#include "core/mem.h"
#include "io/image.h"
#include "io/source.h"
#include "io/tiff_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The most bytes one level may hold: 256 TiB, far past any slide, and low
 * enough that no product of dims and sample bytes wraps. */
#define TIFF_SOURCE_MAX_LEVEL ((uint64_t)1 << 48)

typedef struct tiff_source {
    tiff_job job;
    TIFF *tif;
    bool volume;                              /* pages are depth */
    uint32_t level_dir[SG_SOURCE_MAX_LEVELS]; /* a pyramid's level to its page */
    tiff_layout first;                        /* page 0 */
    uint64_t unit_max;                        /* the largest strip or tile, decoded */
    uint8_t *buf;                             /* one strip or tile */
    int64_t dir;                              /* the current directory; -1 none yet */
    tiff_layout cur;                          /* its layout */
    uint8_t cmap[3][256];                     /* its palette, at 8 bits */
    int64_t cached;                           /* the strip or tile in buf (of dir); -1 none */
} tiff_source;

/* Reads the current directory's layout with the open's checks, for page
 * (a name for messages). */
static sg_status page_layout(tiff_source *ts, const char *name, uint32_t page, tiff_layout *l)
{
    char where[512];
    sg_tiff_page_name(name, page, where, sizeof where);
    if (ts->job.truncated)
        return sg_tiff_bad(where, &ts->job, "truncated");
    SG_TRY(sg_tiff_read_tags(ts->tif, &ts->job, where, l));
    SG_TRY(sg_tiff_check_kind(ts->tif, &ts->job, where, l, true));
    return SEGRT_OK;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/* Sets the directory dir current, checking it is still what the open saw,
 * and loads its palette. */
static sg_status use_dir(sg_source *s, uint32_t dir)
{
    tiff_source *ts = s->state;
    if (ts->dir == (int64_t)dir)
        return SEGRT_OK;
    ts->dir = -1;
    ts->cached = -1;
    char where[512];
    sg_tiff_page_name(s->path, dir, where, sizeof where);
    if (!TIFFSetDirectory(ts->tif, (tdir_t)dir))
        return sg_tiff_bad(where, &ts->job, "cannot read the page's directory");
    tiff_layout *l = &ts->cur;
    SG_TRY(page_layout(ts, s->path, dir, l));
    SG_TRY(sg_tiff_check_geometry(ts->tif, &ts->job, where, s->max_bytes, l));
    if (l->channels != s->info.channels || sg_tiff_dtype(l) != s->info.dtype || l->unit_max > ts->unit_max)
        return sg_error(SEGRT_ERROR_IO, "%s: the file changed while it was open", where);
    if (l->palette) {
        uint16_t *r, *g, *b;
        if (!TIFFGetField(ts->tif, TIFFTAG_COLORMAP, &r, &g, &b))
            return sg_tiff_bad(where, &ts->job, "a palette image without a ColorMap");
        /* As the whole reader: 16-bit maps, or 8-bit values in them. */
        bool wide = false;
        for (int i = 0; i < 256; i++)
            wide = wide || r[i] > 255 || g[i] > 255 || b[i] > 255;
        int shift = wide ? 8 : 0;
        for (int i = 0; i < 256; i++) {
            ts->cmap[0][i] = (uint8_t)(r[i] >> shift);
            ts->cmap[1][i] = (uint8_t)(g[i] >> shift);
            ts->cmap[2][i] = (uint8_t)(b[i] >> shift);
        }
    }
    ts->dir = dir;
    return SEGRT_OK;
}

/* Decodes strip or tile idx of the current directory into buf (need
 * bytes), unless it is there already. */
static sg_status decode_unit(sg_source *s, uint32_t idx, tmsize_t need)
{
    tiff_source *ts = s->state;
    if (ts->cached == (int64_t)idx)
        return SEGRT_OK;
    ts->cached = -1;
    /* libtiff can report a whole strip or tile while its codec wrote less
     * (deflate data that ends early); what it leaves is 0, as in the whole
     * reader. */
    memset(ts->buf, 0, (size_t)need);
    tmsize_t got = ts->cur.tiled ? TIFFReadEncodedTile(ts->tif, idx, ts->buf, need)
                                 : TIFFReadEncodedStrip(ts->tif, idx, ts->buf, need);
    if (got != need) {
        char where[512];
        return sg_tiff_bad(sg_tiff_page_name(s->path, (uint32_t)ts->dir, where, sizeof where), &ts->job,
                           ts->cur.tiled ? "a tile cannot be read" : "a strip cannot be read");
    }
    ts->cached = idx;
    return SEGRT_OK;
}

/* Copies the part of the unit in buf (at ux, uy, uw x uh pixels, src_row
 * bytes a row; plane p of separate planes, or -1) that lies in box into
 * dst's page z (planar C x D x H x W). */
static void place_unit(sg_source *s, const sg_box *box, int64_t z, int64_t ux, int64_t uy, int64_t uw, int64_t uh,
                       size_t src_row, int p, uint8_t *dst)
{
    const tiff_source *ts = s->state;
    const tiff_layout *l = &ts->cur;
    size_t es = l->bits / 8;
    size_t per_pixel = p < 0 ? l->samples : 1;
    int64_t x0 = box->start[2] > ux ? box->start[2] : ux;
    int64_t x1 = box->start[2] + box->size[2] < ux + uw ? box->start[2] + box->size[2] : ux + uw;
    int64_t y0 = box->start[1] > uy ? box->start[1] : uy;
    int64_t y1 = box->start[1] + box->size[1] < uy + uh ? box->start[1] + box->size[1] : uy + uh;
    if (x0 >= x1 || y0 >= y1)
        return;
    size_t plane = (size_t)box->size[0] * (size_t)box->size[1] * (size_t)box->size[2];
    size_t n = (size_t)(x1 - x0);
    for (int64_t y = y0; y < y1; y++) {
        const uint8_t *in = ts->buf + (size_t)(y - uy) * src_row + (size_t)(x0 - ux) * per_pixel * es;
        size_t at = ((size_t)z * (size_t)box->size[1] + (size_t)(y - box->start[1])) * (size_t)box->size[2] +
                    (size_t)(x0 - box->start[2]);
        if (l->palette) {
            for (int c = 0; c < 3; c++)
                for (size_t i = 0; i < n; i++)
                    dst[(size_t)c * plane + at + i] = ts->cmap[c][in[i]];
            continue;
        }
        for (size_t k = 0; k < per_pixel; k++) {
            size_t c = p < 0 ? k : (size_t)p;
            uint8_t *o = dst + ((size_t)c * plane + at) * es;
            const uint8_t *from = in + k * es;
            size_t step = per_pixel * es;
            if (es == 1)
                for (size_t i = 0; i < n; i++)
                    o[i] = from[i * step];
            else
                for (size_t i = 0; i < n; i++)
                    memcpy(o + i * es, from + i * step, es);
            if (l->min_is_white && c == 0) { /* unsigned grey, alpha untouched */
                if (es == 1)
                    for (size_t i = 0; i < n; i++)
                        o[i] = (uint8_t)(255 - o[i]);
                else
                    for (size_t i = 0; i < n; i++) {
                        uint16_t v;
                        memcpy(&v, o + 2 * i, 2);
                        v = (uint16_t)(65535 - v);
                        memcpy(o + 2 * i, &v, 2);
                    }
            }
        }
    }
}

static sg_status tiff_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    tiff_source *ts = s->state;
    for (int64_t z = 0; z < box->size[0]; z++) {
        SG_TRY(use_dir(s, ts->volume ? (uint32_t)(box->start[0] + z) : ts->level_dir[level]));
        const tiff_layout *l = &ts->cur;
        bool separate = l->planar == PLANARCONFIG_SEPARATE;
        int planes = separate ? l->samples : 1;
        size_t unit = (size_t)(l->bits / 8) * (separate ? 1 : l->samples);
        size_t src_row = (size_t)l->tw * unit;
        int64_t ty0 = box->start[1] / l->th, ty1 = (box->start[1] + box->size[1] - 1) / l->th;
        int64_t tx0 = box->start[2] / l->tw, tx1 = (box->start[2] + box->size[2] - 1) / l->tw;
        uint32_t per_plane = (l->height - 1) / l->th + 1;
        for (int p = 0; p < planes; p++)
            for (int64_t ty = ty0; ty <= ty1; ty++)
                for (int64_t tx = tx0; tx <= tx1; tx++) {
                    int64_t ux = tx * l->tw, uy = ty * l->th;
                    uint32_t idx;
                    tmsize_t need;
                    int64_t uh = l->th;
                    if (l->tiled) {
                        idx = TIFFComputeTile(ts->tif, (uint32_t)ux, (uint32_t)uy, 0, (uint16_t)p);
                        need = (tmsize_t)l->unit_max;
                    } else {
                        /* A strip holds its rows only; the last may be short. */
                        uh = (int64_t)l->height - uy < uh ? (int64_t)l->height - uy : uh;
                        idx = (uint32_t)p * per_plane + (uint32_t)ty;
                        need = (tmsize_t)((size_t)uh * src_row);
                    }
                    SG_TRY(decode_unit(s, idx, need));
                    place_unit(s, box, z, ux, uy, l->tw, uh, src_row, separate ? p : -1, dst);
                }
    }
    return SEGRT_OK;
}

static void tiff_close(sg_source *s)
{
    tiff_source *ts = s->state;
    if (!ts)
        return;
    if (ts->tif)
        TIFFClose(ts->tif);
    free(ts->buf);
    free(ts);
}

static const sg_source_ops tiff_ops = {
    .read_region = tiff_read_region,
    .close = tiff_close,
};

/* What the file says of a pixel's size, in mm; 0 where it says nothing. */
static double resolution_mm(TIFF *tif, uint32_t tag)
{
    float res = 0;
    uint16_t unit = RESUNIT_INCH;
    if (!TIFFGetField(tif, tag, &res) || !(res > 0))
        return 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_RESOLUTIONUNIT, &unit);
    return unit == RESUNIT_CENTIMETER ? 10.0 / res : unit == RESUNIT_INCH ? 25.4 / res : 0;
}

/* Checks a level's (or the volume's) bytes against TIFF_SOURCE_MAX_LEVEL. */
static sg_status check_level(const char *where, const tiff_layout *l, uint64_t depth)
{
    uint64_t px = (uint64_t)l->width * l->height; /* < 2^64: each < 2^32 */
    uint64_t per = (uint64_t)l->channels * (uint64_t)(l->bits / 8);
    if (px > TIFF_SOURCE_MAX_LEVEL / per / depth)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: a %ux%u image of %d channel(s) at %u bits%s is more than %llu bytes", where, l->width,
                        l->height, (int)l->channels, l->bits, depth > 1 ? " in every page" : "",
                        (unsigned long long)TIFF_SOURCE_MAX_LEVEL);
    return SEGRT_OK;
}

/* The scan of every page: the kind of file (above), the limits, and the
 * largest strip or tile. Leaves info filled. */
static sg_status scan_pages(sg_source *s, tiff_source *ts)
{
    const char *name = s->path;
    tiff_job *job = &ts->job;
    tiff_layout *f = &ts->first;
    SG_TRY(page_layout(ts, name, 0, f));
    job->failed = false;
    tdir_t pages = TIFFNumberOfDirectories(ts->tif);
    if (job->failed || pages == 0)
        return sg_tiff_bad(name, job, "cannot follow the chain of pages");
    if (pages > TIFF_MAX_PAGES)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: TIFF of %u pages; segrt reads at most %u", name, (unsigned)pages,
                        TIFF_MAX_PAGES);
    sg_source_info *in = &s->info;
    int32_t levels = 1, slices = 1;
    uint64_t decoded = 0, allowed = 0, ratio_max = 0;
    for (uint32_t page = 0; page < (uint32_t)pages; page++) {
        char where[512];
        sg_tiff_page_name(name, page, where, sizeof where);
        if (page > 0 && !TIFFReadDirectory(ts->tif))
            return sg_tiff_bad(where, job, "cannot read the page's directory");
        tiff_layout l;
        SG_TRY(page_layout(ts, name, page, &l));
        if (page > 0) {
            bool reduced = (l.subfile & FILETYPE_REDUCEDIMAGE) || (l.width < f->width && l.height < f->height);
            if (l.subfile & FILETYPE_MASK)
                return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                "%s: page %u is a transparency mask (NewSubfileType %u), neither a slice nor a level",
                                name, page, l.subfile);
            if (l.channels != f->channels || sg_tiff_dtype(&l) != sg_tiff_dtype(f))
                return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                "%s: page %u has %d channel(s) of %s, page 0 %d of %s; the pages of a TIFF source "
                                "agree",
                                name, page, (int)l.channels, segrt_dtype_name(sg_tiff_dtype(&l)), (int)f->channels,
                                segrt_dtype_name(sg_tiff_dtype(f)));
            if (reduced) {
                if (l.width > f->width || l.height > f->height)
                    return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                    "%s: page %u (%ux%u) is marked reduced but is larger than page 0 (%ux%u)", name,
                                    page, l.width, l.height, f->width, f->height);
                if (levels == SG_SOURCE_MAX_LEVELS)
                    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a pyramid of more than %d levels", name,
                                    SG_SOURCE_MAX_LEVELS);
                ts->level_dir[levels] = page;
                in->dims[levels][0] = 1, in->dims[levels][1] = l.height, in->dims[levels][2] = l.width;
                levels++;
            } else if (l.width == f->width && l.height == f->height && l.samples == f->samples) {
                slices++;
            } else {
                return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                "%s: page %u is %ux%u, page 0 is %ux%u: neither a slice of a volume nor a reduced "
                                "level",
                                name, page, l.width, l.height, f->width, f->height);
            }
            if (levels > 1 && slices > 1)
                return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                "%s: page %u: the file mixes slices of page 0's size and reduced levels", name, page);
        }
        SG_TRY(check_level(where, &l, 1));
        SG_TRY(sg_tiff_check_geometry(ts->tif, job, where, s->max_bytes, &l));
        SG_TRY(sg_tiff_check_data(ts->tif, job, where, &l));
        uint64_t ratio = sg_tiff_codec_ratio(l.compression);
        uint64_t coded = l.coded < job->n ? l.coded : job->n;
        decoded = add_sat(decoded, l.decoded);
        allowed = add_sat(allowed, ratio > UINT64_MAX / (coded + 1) ? UINT64_MAX : ratio * coded);
        ratio_max = ratio > ratio_max ? ratio : ratio_max;
        ts->unit_max = l.unit_max > ts->unit_max ? l.unit_max : ts->unit_max;
        if (page == 0) {
            in->spacing[1] = resolution_mm(ts->tif, TIFFTAG_YRESOLUTION);
            in->spacing[2] = resolution_mm(ts->tif, TIFFTAG_XRESOLUTION);
            in->tile[0] = 1, in->tile[1] = l.th, in->tile[2] = l.tw;
        }
    }
    SG_TRY(check_level(name, f, (uint64_t)slices));
    /* As the whole reader: no more than the file's bytes times the loosest
     * codec, whatever the strips share. */
    uint64_t file_cap = ratio_max > UINT64_MAX / (job->n + 1) ? UINT64_MAX : ratio_max * job->n;
    allowed = add_sat(allowed < file_cap ? allowed : file_cap, TIFF_RATIO_SLACK);
    if (decoded > allowed)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: TIFF claims %llu bytes decoded from its strips and tiles; their codecs make at most "
                        "%llu of the file's %llu bytes",
                        name, (unsigned long long)decoded, (unsigned long long)allowed, (unsigned long long)job->n);
    in->format = "tiff";
    in->dtype = sg_tiff_dtype(f);
    in->channels = f->channels;
    in->n_levels = levels;
    in->n_dims = slices > 1 ? 3 : 2;
    ts->volume = slices > 1;
    in->dims[0][0] = slices, in->dims[0][1] = f->height, in->dims[0][2] = f->width;
    return SEGRT_OK;
}

sg_status sg_source_open_tiff(sg_source *s)
{
    tiff_source *ts = sg_calloc(1, sizeof *ts);
    if (!ts)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    s->ops = &tiff_ops;
    s->state = ts;
    s->max_all_bytes = SG_IMAGE_MAX_BYTES;
    if (s->max_bytes > SG_IMAGE_MAX_BYTES)
        s->max_bytes = SG_IMAGE_MAX_BYTES;
    ts->dir = ts->cached = -1;
    struct stat st;
    if (stat(s->path, &st) != 0)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", s->path, strerror(errno));
    ts->job.n = (uint64_t)st.st_size;
    /* The scan's handle: directory arrays capped as the whole reader's. */
    uint64_t dir_cap = 4 * ts->job.n;
    dir_cap = dir_cap < TIFF_LIB_MIN_ALLOC ? TIFF_LIB_MIN_ALLOC : dir_cap;
    dir_cap = dir_cap > s->max_bytes ? s->max_bytes : dir_cap;
    if (!(ts->tif = sg_tiff_open_pass(&ts->job, s->path, s->path, dir_cap)))
        return sg_tiff_bad(s->path, &ts->job, "cannot open");
    SG_TRY(scan_pages(s, ts));
    TIFFClose(ts->tif);
    /* The reads' handle lets a codec hold a strip or tile of its own beside
     * the directories' arrays, as the whole reader's decode does. */
    uint64_t codec_cap = 2 * ts->unit_max > dir_cap ? 2 * ts->unit_max : dir_cap;
    if (!(ts->tif = sg_tiff_open_pass(&ts->job, s->path, s->path, codec_cap > s->max_bytes ? s->max_bytes : codec_cap)))
        return sg_tiff_bad(s->path, &ts->job, "cannot open");
    if (!(ts->buf = sg_malloc((size_t)ts->unit_max)))
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", s->path);
    return SEGRT_OK;
}
