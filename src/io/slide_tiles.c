/* A slide level's JPEG tiles as complete JPEG streams (slide.h), read
 * from the file beside OpenSlide for a decoder of its own (the GPU's).
 *
 * The level is the TIFF directory whose size is the level's: tiled, 8-bit,
 * three samples interleaved, JPEG (TIFF compression 7). Most such files
 * keep the quantisation and Huffman tables once, in the JPEGTables tag,
 * and each tile as an abbreviated stream without them; a complete stream
 * is the tables' stream without its end marker followed by the tile's
 * without its start marker (what libtiff's codec feeds libjpeg).
 *
 * Every tile's frame header is checked before its stream leaves here: a
 * decoder writes what the header says, so a corrupt tile claiming a larger
 * frame would write past its place in the caller's band. */
#include "io/slide.h"

#include "core/file.h"
#include "core/mem.h"
#include "io/tiff_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest tile stream taken (a 4096 x 4096 tile at 4 bytes a pixel:
 * far above any JPEG of the sizes slides use). */
#define TILES_MAX_TILE_BYTES ((uint64_t)64 << 20)
/* The largest JPEGTables taken (they hold a few tables of at most a few
 * hundred bytes each). */
#define TILES_MAX_TABLES_BYTES ((uint64_t)1 << 20)

struct sg_slide_tiles {
    char *path;
    int fd;
    int32_t level;
    sg_slide_tiles_info info;
    uint64_t *offset, *bytes; /* per tile, row-major */
    uint8_t *tables;          /* the JPEGTables stream, or NULL */
    size_t tables_len;
};

void sg_slide_tiles_close(sg_slide_tiles *t)
{
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    free(t->path);
    free(t->offset);
    free(t->bytes);
    free(t->tables);
    free(t);
}

const sg_slide_tiles_info *sg_slide_tiles_get_info(const sg_slide_tiles *t)
{
    return &t->info;
}

static sg_status not_here(const char *path, int32_t level, const char *why)
{
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: level %d: %s", path, (int)level, why);
}

/* The directory's tiles and tables into t; UNSUPPORTED where the
 * directory is not one the decoder takes. */
static sg_status take_directory(TIFF *tif, const tiff_job *job, uint64_t file_size, sg_slide_tiles *t)
{
    uint16_t compression = 0, samples = 0, bits = 0, planar = PLANARCONFIG_CONTIG, photometric = 0;
    uint32_t tw = 0, th = 0, w = 0, h = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
    TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric);
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    if (compression != COMPRESSION_JPEG)
        return not_here(t->path, t->level, "tiles not JPEG");
    if (samples != 3 || bits != 8 || planar != PLANARCONFIG_CONTIG)
        return not_here(t->path, t->level, "not 8-bit RGB in one plane");
    if (photometric != PHOTOMETRIC_RGB && photometric != PHOTOMETRIC_YCBCR)
        return not_here(t->path, t->level, "neither RGB nor YCbCr");
    if (tw < 16 || th < 16 || tw > 4096 || th > 4096 || tw % 16 || th % 16)
        return not_here(t->path, t->level, "tile size not a multiple of 16 from 16 to 4096");
    uint64_t across = ((uint64_t)w + tw - 1) / tw, down = ((uint64_t)h + th - 1) / th;
    if ((uint64_t)TIFFNumberOfTiles(tif) != across * down)
        return not_here(t->path, t->level, "tile count not the level's");
    uint64_t *off = NULL, *cnt = NULL;
    if (!TIFFGetField(tif, TIFFTAG_TILEOFFSETS, &off) || !TIFFGetField(tif, TIFFTAG_TILEBYTECOUNTS, &cnt) || !off ||
        !cnt || job->failed)
        return not_here(t->path, t->level, "no tile offsets");
    size_t n = (size_t)(across * down);
    t->offset = malloc(sizeof(uint64_t) * n);
    t->bytes = malloc(sizeof(uint64_t) * n);
    if (!t->offset || !t->bytes)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %zu tiles' offsets", t->path, n);
    uint64_t largest = 0;
    for (size_t i = 0; i < n; i++) {
        /* A missing tile (no bytes) OpenSlide paints as it chooses; the
         * level stays OpenSlide's. */
        if (cnt[i] < 4 || cnt[i] > TILES_MAX_TILE_BYTES || off[i] > file_size || cnt[i] > file_size - off[i])
            return not_here(t->path, t->level, "a tile missing or outside the file");
        t->offset[i] = off[i];
        t->bytes[i] = cnt[i];
        largest = cnt[i] > largest ? cnt[i] : largest;
    }
    uint32_t tables_len = 0;
    void *tables = NULL;
    if (TIFFGetField(tif, TIFFTAG_JPEGTABLES, &tables_len, &tables) && tables && tables_len > 0) {
        const uint8_t *p = tables;
        if (tables_len < 4 || tables_len > TILES_MAX_TABLES_BYTES || p[0] != 0xFF || p[1] != 0xD8 ||
            p[tables_len - 2] != 0xFF || p[tables_len - 1] != 0xD9)
            return not_here(t->path, t->level, "JPEGTables not a tables-only JPEG stream");
        if (!(t->tables = malloc(tables_len)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the JPEG tables", t->path);
        memcpy(t->tables, p, tables_len);
        t->tables_len = tables_len;
    }
    t->info.tile_w = tw;
    t->info.tile_h = th;
    t->info.across = (int64_t)across;
    t->info.down = (int64_t)down;
    t->info.ycbcr = photometric == PHOTOMETRIC_YCBCR;
    t->info.max_bytes = (size_t)largest + t->tables_len;
    return SEGRT_OK;
}

sg_status sg_slide_tiles_open(const sg_source *s, int32_t level, sg_slide_tiles **out)
{
    *out = NULL;
    if (level < 0 || level >= s->info.n_levels || s->info.n_dims != 2 || s->info.channels != 3)
        return not_here(s->path, level, "not an RGB level");
    int64_t want_h = s->info.dims[level][1], want_w = s->info.dims[level][2];
    sg_slide_tiles *t = sg_calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(s->path))) {
        free(t);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", s->path);
    }
    t->fd = -1;
    t->level = level;
    sg_status st = sg_open_input(s->path, &t->fd);
    struct stat sb;
    if (st == SEGRT_OK && fstat(t->fd, &sb) != 0)
        st = sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", s->path, strerror(errno));
    if (st != SEGRT_OK) {
        sg_slide_tiles_close(t);
        return st;
    }
    uint8_t head[8];
    if (pread(t->fd, head, sizeof head, 0) != (ssize_t)sizeof head ||
        sg_image_format_of_bytes(head, sizeof head) != SG_IMAGE_TIFF) {
        sg_slide_tiles_close(t);
        return not_here(s->path, level, "not a TIFF");
    }
    tiff_job job = {.n = (uint64_t)sb.st_size};
    uint64_t cap = 4 * job.n < TIFF_LIB_MIN_ALLOC ? TIFF_LIB_MIN_ALLOC : 4 * job.n;
    TIFF *tif = sg_tiff_open_pass(&job, s->path, s->path, cap);
    if (!tif) {
        sg_slide_tiles_close(t);
        return not_here(s->path, level, "libtiff does not open it");
    }
    /* The first tiled directory of the level's size (an Aperio file's
     * thumbnail, label and macro are stripped, or of other sizes). */
    st = not_here(s->path, level, "no tiled TIFF directory of the level's size");
    int pages = 0;
    do {
        uint32_t w = 0, h = 0;
        TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
        TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
        if (TIFFIsTiled(tif) && w == want_w && h == want_h) {
            st = take_directory(tif, &job, (uint64_t)sb.st_size, t);
            break;
        }
    } while (++pages < TIFF_MAX_PAGES && TIFFReadDirectory(tif));
    TIFFClose(tif);
    if (st != SEGRT_OK) {
        sg_slide_tiles_close(t);
        return st;
    }
    *out = t;
    return SEGRT_OK;
}

/* Whether marker m starts a frame (SOF0-3, 5-7, 9-11, 13-15). */
static bool is_frame(uint8_t m)
{
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

/* The frame header of a stream that starts after its SOI at p[0..n): its
 * size, component count and whether every component is sampled 1x1.
 * false where the markers end or break before one. */
static bool frame_of(const uint8_t *p, size_t n, uint32_t *w, uint32_t *h, uint32_t *comps, bool *full)
{
    size_t i = 0;
    while (i + 4 <= n) {
        if (p[i] != 0xFF)
            return false;
        uint8_t m = p[i + 1];
        if (m == 0xFF) { /* fill */
            i++;
            continue;
        }
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
            i += 2;
            continue;
        }
        if (m == 0xDA || m == 0xD9 || m == 0xD8)
            return false; /* a scan or an end before any frame */
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        if (len < 2 || i + 2 + len > n)
            return false;
        if (is_frame(m)) {
            const uint8_t *f = p + i + 4;
            if (len < 8 || f[0] != 8)
                return false; /* 8-bit samples only */
            *h = (uint32_t)f[1] << 8 | f[2];
            *w = (uint32_t)f[3] << 8 | f[4];
            *comps = f[5];
            if (len < 8 + 3 * (size_t)f[5])
                return false;
            *full = true;
            for (uint32_t c = 0; c < f[5]; c++)
                *full = *full && f[6 + 3 * c + 1] == 0x11;
            return true;
        }
        i += 2 + len;
    }
    return false;
}

sg_status sg_slide_tiles_read(const sg_slide_tiles *t, int64_t row, int64_t col, uint8_t *dst, size_t *len)
{
    *len = 0;
    if (row < 0 || col < 0 || row >= t->info.down || col >= t->info.across)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: level %d: no tile (%lld, %lld)", t->path, (int)t->level,
                        (long long)row, (long long)col);
    size_t i = (size_t)(row * t->info.across + col);
    /* With tables: their stream but its end marker, then the tile's but
     * its start marker. The tile is read in place two bytes early (its
     * start marker over the tables' last two bytes, restored after). */
    size_t head = t->tables ? t->tables_len - 2 : 0;
    uint8_t *tile = dst + (t->tables ? head - 2 : 0);
    if (t->tables)
        memcpy(dst, t->tables, head);
    uint8_t keep[2] = {0, 0};
    if (t->tables)
        memcpy(keep, tile, 2);
    size_t want = (size_t)t->bytes[i];
    ssize_t got = pread(t->fd, tile, want, (off_t)t->offset[i]);
    if (got != (ssize_t)want)
        return sg_error(SEGRT_ERROR_IO, "%s: level %d: cannot read tile (%lld, %lld): %s", t->path, (int)t->level,
                        (long long)row, (long long)col, got < 0 ? strerror(errno) : "the file is shorter");
    if (tile[0] != 0xFF || tile[1] != 0xD8)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: level %d: tile (%lld, %lld) is not a JPEG stream", t->path,
                        (int)t->level, (long long)row, (long long)col);
    if (t->tables)
        memcpy(tile, keep, 2);
    size_t total = (t->tables ? head - 2 : 0) + want;
    uint32_t w = 0, h = 0, comps = 0;
    bool full = false;
    if (!frame_of(dst + 2, total - 2, &w, &h, &comps, &full) || w != (uint32_t)t->info.tile_w ||
        h != (uint32_t)t->info.tile_h || comps != 3 || (!t->info.ycbcr && !full))
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: level %d: tile (%lld, %lld) is not a 3-component JPEG of the tile's %lld x %lld pixels",
                        t->path, (int)t->level, (long long)row, (long long)col, (long long)t->info.tile_w,
                        (long long)t->info.tile_h);
    *len = total;
    return SEGRT_OK;
}
