/* What the TIFF reader (image_tiff.c), the TIFF region source
 * (source_tiff.c) and the TIFF sink (sink.c) share: the caps, libtiff's
 * handle set-up with per-handle handlers, a page's layout and its checks,
 * and the strip writer. Private to src/io. */
#ifndef SG_IO_TIFF_INTERNAL_H
#define SG_IO_TIFF_INTERNAL_H

#include "core/file.h"
#include "core/tensor.h"
#include "io/image.h"

#include <stdbool.h>
#include <stdint.h>
#include <tiffio.h>

/* The most pages a volume may have. libtiff counted directories in 16 bits
 * until 4.5, so files with more are not portable anyway; z-stacks have
 * hundreds of slices. Past the cap a chain of tiny directories would cost
 * time for nothing. */
#define TIFF_MAX_PAGES 65536

/* The largest single allocation libtiff may make while reading
 * directories: four times the file (a 2-byte StripByteCounts value in the
 * file is 8 bytes in libtiff's arrays), and never less than this floor for
 * the fixed tables of small files (a 16-bit colour map is 384 KiB), nor
 * more than the pixel cap. Without it, a directory of a few bytes can
 * claim millions of strips, and libtiff sizes its arrays by the claim. */
#define TIFF_LIB_MIN_ALLOC ((uint64_t)16 << 20)

/* The most each codec decodes per byte of compressed data:
 * - none: 1 (the bytes are the samples);
 * - PackBits: 64 (a 2-byte run gives at most 128 bytes);
 * - deflate: 1032 (a 258-byte match in 2 bits; see image_png.c);
 * - LZW: 1704: after a Clear code, the i-th code gives at most i bytes, a
 *   code takes 9 to 12 bits, and libtiff's table takes 4862 codes before it
 *   needs another Clear (1024 entries past the 4096 of the format), which
 *   gives 11.8 MB from 6943 bytes at best;
 * - zstd: 32768 (a block decodes to at most 128 KiB, an RLE block takes 4
 *   bytes, and no other block type does better);
 * - everything else (JPEG, whose strips may be arithmetic-coded; LZMA,
 *   WebP, LERC, ...): SG_IMAGE_UNBOUNDED_RATIO.
 * The decoded size of a page counts full tiles (edge tiles are coded
 * whole) and each strip's rows. */
#define TIFF_PACKBITS_MAX_RATIO 64
#define TIFF_DEFLATE_MAX_RATIO 1032
#define TIFF_LZW_MAX_RATIO 1704
#define TIFF_ZSTD_MAX_RATIO 32768
/* Decoded bytes the ratios do not account for, over the whole file: the
 * fixed start of each codec's stream (a literal, a code table). Any file
 * this lets through is tiny. */
#define TIFF_RATIO_SLACK 4096

/* What the handlers and the memory procs need. */
typedef struct tiff_job {
    const uint8_t *bytes; /* the file, for reads from memory */
    uint64_t n, pos;      /* n: the file's size, whether in memory or not */
    char msg[256];        /* libtiff's first error */
    bool failed;          /* libtiff reported an error */
    bool truncated;       /* tag data past the end of the file */
} tiff_job;

/* One page's layout, checked, and where its data lies. */
typedef struct tiff_layout {
    uint32_t width, height;
    uint16_t bits, samples, photometric, planar, format, compression;
    uint32_t subfile; /* NewSubfileType, with the old SubfileType's reduced image as bit 0 */
    int32_t channels; /* as read: 3 for a palette */
    bool palette, min_is_white;
    bool tiled;
    uint32_t tw, th;   /* tile size, or width x rows per strip */
    uint32_t units;    /* strips or tiles a read decodes (all planes) */
    uint64_t unit_max; /* the decoded bytes of the largest */
    uint64_t decoded;  /* the decoded bytes of them all */
    uint64_t coded;    /* their bytes in the file */
} tiff_layout;

/* Options for a handle whose single allocations libtiff caps at
 * max_alloc, errors and warnings into job. NULL when out of memory. */
TIFFOpenOptions *sg_tiff_open_options(tiff_job *job, uint64_t max_alloc);

/* Opens the file for reading, libtiff's single allocations capped at
 * max_alloc: from job's bytes when path is NULL, else by path (mapped by
 * libtiff). NULL when libtiff refuses it (job->msg says why). */
TIFF *sg_tiff_open_pass(tiff_job *job, const char *name, const char *path, uint64_t max_alloc);

/* INVALID_MODEL "NAME: bad TIFF: " libtiff's first message, or what. */
sg_status sg_tiff_bad(const char *name, const tiff_job *job, const char *what);

/* "NAME" for page 0, "NAME, page K" after it. Returns buf. */
const char *sg_tiff_page_name(const char *name, uint32_t page, char *buf, size_t cap);

/* The current directory's tags into l, before anything is checked. */
sg_status sg_tiff_read_tags(TIFF *tif, const tiff_job *job, const char *where, tiff_layout *l);

/* Checks that segrt takes the page's kind and sets up its decoding (YCbCr
 * to RGB). any_type false: what sg_image_read takes (8- and 16-bit
 * unsigned samples). any_type true: what a region source takes beside
 * them: signed 8-, 16- and 32-bit integers and 32- and 64-bit floats
 * (sg_tiff_dtype names them), with palettes and min-is-white for unsigned
 * samples only. */
sg_status sg_tiff_check_kind(TIFF *tif, const tiff_job *job, const char *where, tiff_layout *l, bool any_type);

/* The samples' dtype of a layout sg_tiff_check_kind passed. */
sg_dtype sg_tiff_dtype(const tiff_layout *l);

/* The page's strips or tiles: their size, how many there are, how many
 * bytes they decode to; a strip or tile over max_bytes is refused. */
sg_status sg_tiff_check_geometry(TIFF *tif, const tiff_job *job, const char *where, uint64_t max_bytes, tiff_layout *l);

/* Checks that each strip or tile lies inside the file (job->n bytes) and
 * adds up their bytes into l->coded. */
sg_status sg_tiff_check_data(TIFF *tif, const tiff_job *job, const char *where, tiff_layout *l);

/* The most a codec decodes per byte of compressed data (above), and
 * whether it holds a decoded strip or tile of its own as it decodes. */
uint64_t sg_tiff_codec_ratio(uint16_t compression);
bool sg_tiff_codec_buffers(uint16_t compression);

/* --- writing: segrt's TIFF, strip by strip --------------------------------- */

/* A TIFF being written into an output: deflate with horizontal
 * prediction, strips of about 256 KiB, a volume's slices as pages,
 * BigTIFF past 2 GiB of pixels. Rows come interleaved (as sg_image holds
 * them), in order, page after page; each strip is encoded once its rows
 * are in. sg_tiff_encode is this writer fed the whole image, so the sink
 * and the whole-image writer write the same bytes. */
typedef struct sg_tiff_writer sg_tiff_writer;

/* shape: an image's dims, channels and bits (pixels unused). */
sg_status sg_tiff_writer_open(sg_output *o, const sg_image *shape, sg_tiff_writer **out);
/* n more rows (interleaved, sg_image_row_bytes each). */
sg_status sg_tiff_writer_rows(sg_tiff_writer *w, const uint8_t *rows, uint32_t n);
/* Ends the file (every row must be in) and frees w. */
sg_status sg_tiff_writer_finish(sg_tiff_writer *w);
/* Frees w without ending the file (the caller discards the output). NULL
 * is fine. */
void sg_tiff_writer_free(sg_tiff_writer *w);

#endif
