/* Pyramidal tiled BigTIFF (sink.h's pyramid option), the layout OpenSlide's
 * generic-tiff reader and tifffile read as a slide: level 0 in the first
 * directory, then each level halved from the one before (rounding up) as
 * the following directories (SubFileType reduced image), down to the first
 * level that fits in one tile.
 *
 * Rows arrive once, in order, and every level is built as they come: each
 * level holds one row of tiles; when level k has a pair of rows (or its
 * odd last row) it reduces them into the next row of level k+1, and when a
 * row of tiles is full it is encoded. Memory is then about twice one row of
 * level 0's tiles, whatever the height.
 *
 * libtiff writes one directory at a time, so the tiles of the reduced
 * levels cannot go into the destination while level 0 is still arriving:
 * each reduced level is a tiled TIFF of its own in a scratch output beside
 * the destination (core/file.h: exclusive, removed however the sink ends),
 * and at the end its compressed tiles are copied as they are
 * (TIFFReadRawTile, TIFFWriteRawTile) into the destination's next
 * directory. The copy reads a tile at a time and costs a third of level
 * 0's compressed bytes at most.
 *
 * Reduction, each 2x2 block of level k to a pixel of level k+1 (a block on
 * an odd edge has 2 or 1 pixels):
 * - one channel (a label map): the mode of the block, ties to the smallest
 *   label; the smallest rather than the top-left pixel's so that the result
 *   does not depend on where the block falls, and background (0) wins a
 *   2-2 tie against an object, so thin objects are not thickened;
 * - several channels (probabilities, an RGB overlay), or one channel of
 *   class probabilities (sink.h's classes): the mean of each channel,
 *   rounded half up.
 * Level k+1 is reduced from level k, not from level 0 (what a viewer shows
 * at each level is what the next level down reduces).
 *
 * A row of tiles is encoded by several threads (OpenMP, on the thread that
 * writes): each tile's horizontal differencing (TIFF's predictor 2) and
 * deflate (zlib, level 1) are done here, and libtiff, whose handle one
 * thread at a time may use, writes the finished tiles in order
 * (TIFFWriteRawTile). One thread encoding a 25000-pixel-wide mask's tiles
 * kept the GPU's labels waiting (about 120 M pixels a second on the H200's
 * host, under the windows' rate). */
#include "io/sink_slide.h"

#include "core/mem.h"
#include "io/tiff_internal.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define SLIDE_MAX_LEVELS 40

typedef struct slide_level {
    TIFF *tif;
    tiff_job job;      /* libtiff's first message on this handle */
    sg_output *scratch; /* levels past 0: the scratch file; level 0 writes the destination */
    uint32_t w, h;
    uint32_t y;      /* rows received */
    uint32_t filled; /* rows of the current row of tiles in buf */
    uint8_t *buf;    /* one row of tiles: th rows of w pixels */
} slide_level;

struct sg_slide_writer {
    sg_output *out;
    const char *path;
    int n;             /* levels */
    uint32_t tw, th;   /* tile width and height */
    uint32_t channels; /* samples per pixel */
    bool classes;      /* sink.h's: grey samples, reduced by their mean even when one */
    size_t es, px;     /* bytes of a sample, of a pixel */
    double mpp[2];     /* along height and width at level 0; 0: unknown */
    slide_level lv[SLIDE_MAX_LEVELS];
    /* A row of tiles' deflated bytes, tile by tile (flush_tiles). */
    struct encoded {
        uint8_t *bytes;
        size_t n;
    } *enc;
    uint32_t n_enc;
    size_t enc_cap; /* bytes each of enc's buffers holds: deflate's bound for a tile */
};

static sg_status fail(sg_slide_writer *w, const slide_level *l, sg_status s)
{
    if (s == SEGRT_ERROR_OUT_OF_MEMORY)
        return sg_error_prefix(s, "%s: ", w->path);
    const char *msg = l && l->job.msg[0] ? l->job.msg : w->lv[0].job.msg[0] ? w->lv[0].job.msg : "libtiff failed";
    return sg_error(s, "%s: cannot write TIFF: %s", w->path, msg);
}

void sg_slide_writer_free(sg_slide_writer *w)
{
    if (!w)
        return;
    for (int k = 0; k < w->n; k++) {
        if (w->lv[k].tif)
            TIFFClose(w->lv[k].tif);
        sg_output_discard(w->lv[k].scratch);
        free(w->lv[k].buf);
    }
    for (uint32_t t = 0; t < w->n_enc; t++)
        free(w->enc[t].bytes);
    free(w->enc);
    free(w);
}

/* The tags of level k (the file's directory k). */
static bool set_tags(const sg_slide_writer *w, TIFF *tif, int k)
{
    const slide_level *l = &w->lv[k];
    bool alpha = !w->classes && (w->channels == 2 || w->channels == 4);
    uint16_t extra[SG_SINK_MAX_CLASSES] = {EXTRASAMPLE_UNASSALPHA}; /* classes: EXTRASAMPLE_UNSPECIFIED (0) */
    bool ok = TIFFSetField(tif, TIFFTAG_SUBFILETYPE, (uint32_t)(k ? FILETYPE_REDUCEDIMAGE : 0)) &&
              TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, l->w) && TIFFSetField(tif, TIFFTAG_IMAGELENGTH, l->h) &&
              TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)(w->es * 8)) &&
              TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)w->channels) &&
              TIFFSetField(tif, TIFFTAG_PHOTOMETRIC,
                           w->channels >= 3 && !w->classes ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK) &&
              TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
              TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT) &&
              TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE) &&
              TIFFSetField(tif, TIFFTAG_PREDICTOR, PREDICTOR_HORIZONTAL) &&
              /* deflate's fastest level: a label map's runs compress about
               * as well, and at libtiff's default (6) deflating a slide's
               * mask took longer than its windows (14 s for 25000^2 on the
               * GPU machine) */
              TIFFSetField(tif, TIFFTAG_ZIPQUALITY, 1) &&
              TIFFSetField(tif, TIFFTAG_TILEWIDTH, w->tw) && TIFFSetField(tif, TIFFTAG_TILELENGTH, w->th) &&
              (!alpha || TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, (uint16_t)1, extra)) &&
              (!w->classes || w->channels == 1 ||
               TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, (uint16_t)(w->channels - 1), extra + 1));
    if (ok && w->mpp[0] > 0) {
        /* Pixels per centimetre: 10^4 um over the level's um per pixel,
         * level k being level 0 downsampled by 2^k. */
        double scale = ldexp(1.0, k);
        ok = TIFFSetField(tif, TIFFTAG_RESOLUTIONUNIT, (uint16_t)RESUNIT_CENTIMETER) &&
             TIFFSetField(tif, TIFFTAG_XRESOLUTION, (float)(1e4 / (w->mpp[1] * scale))) &&
             TIFFSetField(tif, TIFFTAG_YRESOLUTION, (float)(1e4 / (w->mpp[0] * scale)));
    }
    return ok;
}

/* A BigTIFF handle writing fd (libtiff closes it), errors into job. */
static TIFF *open_tiff(int fd, const char *name, const char *mode, tiff_job *job)
{
    TIFFOpenOptions *opts = sg_tiff_open_options(job, SG_IMAGE_MAX_BYTES);
    if (!opts) {
        close(fd);
        return NULL;
    }
    TIFF *tif = TIFFFdOpenExt(fd, name, mode, opts);
    TIFFOpenOptionsFree(opts);
    if (!tif)
        close(fd);
    return tif;
}

static sg_status check(const char *path, const sg_sink_desc *d, uint32_t *tw, uint32_t *th)
{
    if (d->n_dims != 2 || d->dims[0] != 1)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a pyramidal TIFF holds one 2-D image, not %lld pages", path,
                        (long long)d->dims[0]);
    if (d->dtype != SEGRT_DTYPE_UINT8 && d->dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a pyramidal TIFF holds uint8 or uint16 samples, not %s", path,
                        segrt_dtype_name(d->dtype));
    if (d->channels < 1 || d->channels > (d->classes ? SG_SINK_MAX_CLASSES : 4))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %d channels; a pyramidal TIFF has 1 to 4 (or up to %d classes)",
                        path, (int)d->channels, SG_SINK_MAX_CLASSES);
    int64_t t[2];
    for (int a = 0; a < 2; a++) {
        t[a] = d->tile[a] ? d->tile[a] : 512;
        if (t[a] < 16 || t[a] > 4096 || t[a] % 16 != 0)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: tiles of %lldx%lld; a TIFF tile's sides are multiples of 16 from 16 to 4096", path,
                            (long long)d->tile[0], (long long)d->tile[1]);
    }
    bool known[2], bad = false;
    for (int a = 0; a < 2; a++) {
        known[a] = d->mpp[a] != 0;
        bad |= !(d->mpp[a] >= 0 && d->mpp[a] < 1e9); /* NaN and negative too */
    }
    if (bad || known[0] != known[1])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: microns per pixel %g x %g; give both as positive numbers, or both 0 (unknown)", path,
                        d->mpp[0], d->mpp[1]);
    *th = (uint32_t)t[0];
    *tw = (uint32_t)t[1];
    return SEGRT_OK;
}

sg_status sg_slide_writer_open(sg_output *o, const sg_sink_desc *d, sg_slide_writer **out)
{
    *out = NULL;
    const char *path = sg_output_path(o);
    uint32_t tw = 0, th = 0;
    SG_TRY(check(path, d, &tw, &th));
    if (!TIFFIsCODECConfigured(COMPRESSION_ADOBE_DEFLATE))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: this libtiff has no deflate codec", path);
    sg_slide_writer *w = sg_calloc(1, sizeof *w);
    if (!w)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    w->out = o;
    w->path = path;
    w->tw = tw;
    w->th = th;
    w->channels = (uint32_t)d->channels;
    w->classes = d->classes;
    w->es = segrt_dtype_size(d->dtype);
    w->px = w->es * w->channels;
    w->mpp[0] = d->mpp[0];
    w->mpp[1] = d->mpp[1];
    uint32_t lw = (uint32_t)d->dims[2], lh = (uint32_t)d->dims[1];
    for (;;) {
        w->lv[w->n].w = lw;
        w->lv[w->n].h = lh;
        w->n++;
        if (lw <= tw && lh <= th)
            break;
        lw = (lw + 1) / 2;
        lh = (lh + 1) / 2;
    }
    sg_status s = SEGRT_OK;
    /* A tile row of level 0 has the most tiles. */
    uint32_t n_enc = (w->lv[0].w + tw - 1) / tw;
    w->enc_cap = compressBound((uLong)((size_t)tw * th * w->px));
    if (!(w->enc = sg_calloc(n_enc, sizeof *w->enc)))
        s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    for (uint32_t t = 0; t < n_enc && s == SEGRT_OK; t++, w->n_enc++)
        if (!(w->enc[t].bytes = sg_malloc(w->enc_cap)))
            s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    for (int k = 0; k < w->n && s == SEGRT_OK; k++) {
        slide_level *l = &w->lv[k];
        if (!(l->buf = sg_malloc((size_t)th * l->w * w->px))) {
            s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
            break;
        }
        sg_output *dst = o;
        if (k > 0) {
            /* A name of its own beside the destination, for the output's
             * exclusive temporary file; it is discarded, never committed. */
            char name[4096];
            if (snprintf(name, sizeof name, "%s.level%d", path, k) >= (int)sizeof name) {
                s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: path too long", path);
                break;
            }
            if ((s = sg_output_open(name, &l->scratch)) != SEGRT_OK)
                break;
            dst = l->scratch;
        }
        /* libtiff closes the descriptor it is given; the output keeps its
         * own to fsync, close or remove. */
        int fd = dup(sg_output_fd(dst));
        if (fd < 0) {
            s = sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
            break;
        }
        if (!(l->tif = open_tiff(fd, path, "w8", &l->job)) || !set_tags(w, l->tif, k)) {
            s = sg_error(SEGRT_ERROR_IO, "%s: cannot write TIFF: %s", path,
                         l->job.msg[0] ? l->job.msg : "libtiff failed");
            break;
        }
    }
    if (s != SEGRT_OK) {
        sg_slide_writer_free(w);
        return s;
    }
    *out = w;
    return SEGRT_OK;
}

/* Tile t of level k's row of tiles into enc as TIFF stores it: the
 * rows past the image and the columns past its right edge zeros, each row
 * differenced sample by sample (predictor 2, in the file's byte order,
 * which is the host's), deflated as a zlib stream. false if deflate
 * fails. tile is scratch of a whole tile. */
static bool encode_tile(const sg_slide_writer *w, const slide_level *l, uint32_t t, uint8_t *tile,
                        struct encoded *enc)
{
    uint32_t x0 = t * w->tw, cols = l->w - x0 < w->tw ? l->w - x0 : w->tw;
    size_t row = (size_t)l->w * w->px, trow = (size_t)w->tw * w->px;
    memset(tile, 0, trow * w->th);
    for (uint32_t r = 0; r < l->filled; r++)
        memcpy(tile + r * trow, l->buf + r * row + (size_t)x0 * w->px, (size_t)cols * w->px);
    size_t C = w->channels, n = (size_t)w->tw * C;
    for (uint32_t r = 0; r < l->filled; r++) { /* rows past them are zeros: differenced, still zeros */
        if (w->es == 1) {
            uint8_t *p = tile + r * trow;
            for (size_t i = n - 1; i >= C; i--)
                p[i] = (uint8_t)(p[i] - p[i - C]);
        } else {
            uint16_t *p = (uint16_t *)(void *)(tile + r * trow);
            for (size_t i = n - 1; i >= C; i--)
                p[i] = (uint16_t)(p[i] - p[i - C]);
        }
    }
    uLongf len = (uLongf)w->enc_cap;
    if (compress2(enc->bytes, &len, tile, (uLong)(trow * w->th), 1) != Z_OK)
        return false;
    enc->n = (size_t)len;
    return true;
}

/* Encodes level k's row of tiles (its last may be partial), the tiles on
 * several threads, and writes them in order. */
static sg_status flush_tiles(sg_slide_writer *w, int k)
{
    slide_level *l = &w->lv[k];
    uint32_t y0 = l->y - l->filled;
    uint32_t n = (l->w + w->tw - 1) / w->tw;
    size_t tile_bytes = (size_t)w->tw * w->th * w->px;
    int threads = omp_get_max_threads();
    threads = threads < (int)n ? threads : (int)n;
    int bad = 0;
#pragma omp parallel num_threads(threads)
    {
        uint8_t *tile = malloc(tile_bytes);
#pragma omp for schedule(dynamic, 1)
        for (uint32_t t = 0; t < n; t++)
            if (!tile || !encode_tile(w, l, t, tile, &w->enc[t])) {
#pragma omp atomic write
                bad = 1;
            }
        free(tile);
    }
    if (bad)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to deflate a row of %u tiles", w->path, n);
    for (uint32_t t = 0; t < n; t++)
        if (TIFFWriteRawTile(l->tif, TIFFComputeTile(l->tif, t * w->tw, y0, 0, 0), w->enc[t].bytes,
                             (tmsize_t)w->enc[t].n) != (tmsize_t)w->enc[t].n)
            return fail(w, l, SEGRT_ERROR_IO);
    l->filled = 0;
    return SEGRT_OK;
}

/* The mode of n labels, ties to the smallest. */
static uint32_t mode_of(const uint32_t *v, int n)
{
    uint32_t best = v[0];
    int best_count = 0;
    for (int i = 0; i < n; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            c += v[j] == v[i];
        if (c > best_count || (c == best_count && v[i] < best)) {
            best = v[i];
            best_count = c;
        }
    }
    return best;
}

static uint32_t sample(const uint8_t *p, size_t es)
{
    if (es == 1)
        return *p;
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static void put_sample(uint8_t *p, size_t es, uint32_t v)
{
    if (es == 1) {
        *p = (uint8_t)v;
    } else {
        uint16_t u = (uint16_t)v;
        memcpy(p, &u, 2);
    }
}

/* Reduces rows a and b (b NULL on an odd last row) of width sw into dst. */
static void reduce(const sg_slide_writer *w, const uint8_t *a, const uint8_t *b, uint32_t sw, uint8_t *dst)
{
    size_t es = w->es, C = w->channels;
    bool labels = C == 1 && !w->classes;
    uint32_t x = 0;
    if (labels && es == 1 && b) {
        /* A label map's blocks are mostly one label: those need no count. */
        for (; 2 * x + 1 < sw; x++) {
            uint8_t v = a[2 * x];
            if (a[2 * x + 1] == v && b[2 * x] == v && b[2 * x + 1] == v) {
                dst[x] = v;
            } else {
                uint32_t q[4] = {v, a[2 * x + 1], b[2 * x], b[2 * x + 1]};
                dst[x] = (uint8_t)mode_of(q, 4);
            }
        }
    }
    for (; x < (sw + 1) / 2; x++) {
        uint32_t x0 = 2 * x, nx = x0 + 1 < sw ? 2 : 1;
        for (size_t c = 0; c < C; c++) {
            uint32_t v[4];
            int n = 0;
            for (uint32_t i = 0; i < nx; i++) {
                v[n++] = sample(a + ((x0 + i) * C + c) * es, es);
                if (b)
                    v[n++] = sample(b + ((x0 + i) * C + c) * es, es);
            }
            uint32_t out;
            if (labels) {
                out = mode_of(v, n);
            } else {
                uint32_t sum = 0;
                for (int i = 0; i < n; i++)
                    sum += v[i];
                out = (sum + (uint32_t)n / 2) / (uint32_t)n;
            }
            put_sample(dst + (x * C + c) * es, es, out);
        }
    }
}

/* Level k's buf has one more row: reduce a finished pair into level k+1,
 * and encode the row of tiles once it is full. */
static sg_status row_added(sg_slide_writer *w, int k)
{
    slide_level *l = &w->lv[k];
    l->filled++;
    l->y++;
    bool last = l->y == l->h;
    size_t row = (size_t)l->w * w->px;
    if (k + 1 < w->n && (l->y % 2 == 0 || last)) {
        slide_level *up = &w->lv[k + 1];
        /* th is even, so a pair never straddles two rows of tiles. */
        const uint8_t *b = l->buf + (size_t)(l->filled - 1) * row;
        const uint8_t *a = l->y % 2 == 0 ? b - row : b;
        reduce(w, a, a == b ? NULL : b, l->w, up->buf + (size_t)up->filled * up->w * w->px);
        SG_TRY(row_added(w, k + 1));
    }
    if (l->filled == w->th || last)
        SG_TRY(flush_tiles(w, k));
    return SEGRT_OK;
}

sg_status sg_slide_writer_row(sg_slide_writer *w, const uint8_t *row)
{
    slide_level *l = &w->lv[0];
    if (l->y >= l->h)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: more rows than the image has", w->path);
    memcpy(l->buf + (size_t)l->filled * l->w * w->px, row, (size_t)l->w * w->px);
    return row_added(w, 0);
}

/* Copies level k's compressed tiles from its scratch file into the
 * destination's current directory. */
static sg_status append_level(sg_slide_writer *w, int k)
{
    slide_level *l = &w->lv[k];
    TIFF *dst = w->lv[0].tif;
    if (!TIFFFlush(l->tif))
        return fail(w, l, SEGRT_ERROR_IO);
    TIFFClose(l->tif);
    l->tif = NULL;
    int fd = dup(sg_output_fd(l->scratch));
    if (fd < 0 || lseek(fd, 0, SEEK_SET) != 0) {
        if (fd >= 0)
            close(fd);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read back a level: %s", w->path, strerror(errno));
    }
    if (!(l->tif = open_tiff(fd, w->path, "rm", &l->job))) /* m: read, not map */
        return fail(w, l, SEGRT_ERROR_IO);
    if (!set_tags(w, dst, k))
        return fail(w, NULL, SEGRT_ERROR_IO);
    uint32_t tiles = TIFFNumberOfTiles(l->tif);
    uint8_t *raw = NULL;
    size_t cap = 0;
    sg_status s = SEGRT_OK;
    for (uint32_t t = 0; t < tiles && s == SEGRT_OK; t++) {
        uint64_t n = TIFFGetStrileByteCount(l->tif, t);
        if (n == 0 || n > (uint64_t)SIZE_MAX / 2) {
            s = fail(w, l, SEGRT_ERROR_IO);
            break;
        }
        if (n > cap) {
            uint8_t *bigger = realloc(raw, (size_t)n);
            if (!bigger) {
                s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", w->path);
                break;
            }
            raw = bigger;
            cap = (size_t)n;
        }
        if (TIFFReadRawTile(l->tif, t, raw, (tmsize_t)n) != (tmsize_t)n)
            s = fail(w, l, SEGRT_ERROR_IO);
        else if (TIFFWriteRawTile(dst, t, raw, (tmsize_t)n) != (tmsize_t)n)
            s = fail(w, NULL, SEGRT_ERROR_IO);
    }
    free(raw);
    return s;
}

sg_status sg_slide_writer_finish(sg_slide_writer *w)
{
    sg_status s = SEGRT_OK;
    if (w->lv[0].y < w->lv[0].h)
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: ended at row %u of %u", w->path, w->lv[0].y, w->lv[0].h);
    for (int k = 1; k < w->n && s == SEGRT_OK; k++) {
        if (!TIFFWriteDirectory(w->lv[0].tif))
            s = fail(w, NULL, SEGRT_ERROR_IO);
        else
            s = append_level(w, k);
    }
    /* TIFFClose writes the last directory but cannot fail; TIFFFlush can. */
    if (s == SEGRT_OK && !TIFFFlush(w->lv[0].tif))
        s = fail(w, NULL, SEGRT_ERROR_IO);
    sg_slide_writer_free(w);
    return s;
}
