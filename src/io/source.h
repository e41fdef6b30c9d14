/* Images as region sources: a reader opens a file, describes it, and
 * answers read_region(level, box) into a caller's buffer, so that a job
 * holds only the rows it works on where the format allows.
 *
 * Contract of every source:
 * - sg_source_open tells the format by the file's first bytes (image.h's
 *   signatures; anything else is tried as NPY) and reads headers only,
 *   with every check the format's whole read makes before it allocates.
 * - info describes level 0 and any reduced levels: spatial dims (2 or 3),
 *   channels, the samples' dtype as stored, and what the file says of the
 *   pixel's physical size (0 where it says nothing).
 * - A region is a box of depth x height x width pixels at one level,
 *   written to dst planar: channel, then depth, height, width, in the
 *   source's dtype (channels x box volume samples). A box outside the
 *   level is INVALID_ARGUMENT; a file that changed or broke since open is
 *   IO or INVALID_MODEL, naming the file.
 * - A source is used by one thread at a time; sources of one file are
 *   independent.
 *
 * What a region costs, by format:
 * - NPY (source_npy.c): the file is mapped; a region copies its rows.
 * - TIFF (source_tiff.c): the strips or tiles the box touches are decoded
 *   (the last one is kept for the next box); any order is cheap. Pages
 *   are a volume's depth when they agree, or a pyramid's levels when they
 *   are reduced images (source_tiff.c says exactly when).
 * - PNG and JPEG (source_image.c) are not random-access: rows are decoded
 *   in order, forward. The source holds the rows from the last region's
 *   first row to its last. The rule: a region whose first row is at or
 *   below the previous region's first row costs only the rows not decoded
 *   yet, and memory for the rows from its first row on (a window job that
 *   reads slabs top to bottom, overlapping or not, decodes each row once
 *   and holds one slab); a region that starts above the previous one
 *   restarts the decoder from the top of the file. An interlaced PNG
 *   cannot be read by rows and is decoded whole at the first read. */
#ifndef SG_IO_SOURCE_H
#define SG_IO_SOURCE_H

#include "core/tensor.h"

#include <stdint.h>

#define SG_SOURCE_MAX_LEVELS 16

typedef struct sg_source_info {
    const char *format;                    /* "npy", "png", "jpeg", "tiff" */
    sg_dtype dtype;                        /* samples as stored */
    int32_t n_dims;                        /* spatial dims: 2 or 3 */
    int32_t channels;                      /* alpha included, where the file has it */
    int32_t n_levels;                      /* 1 unless the file is a pyramid */
    int64_t dims[SG_SOURCE_MAX_LEVELS][3]; /* per level: depth (1 in 2-D), height, width */
    double spacing[3];                     /* a pixel's size along depth, height, width in mm; 0 where
                                              unknown */
    int64_t tile[3];                       /* the box the file stores together: reads aligned to it cost
                                              least */
} sg_source_info;

/* A box at one level: start and size along depth, height, width. */
typedef struct sg_box {
    int64_t start[3], size[3];
} sg_box;

typedef struct sg_source sg_source;

/* Each format fills one of these (designated initializers); close may be
 * NULL where the state is freed by free(). */
typedef struct sg_source_ops {
    sg_status (*read_region)(sg_source *s, int32_t level, const sg_box *box, void *dst);
    void (*close)(sg_source *s);
} sg_source_ops;

struct sg_source {
    const sg_source_ops *ops;
    sg_source_info info;
    char *path;             /* for messages */
    void *state;            /* the format's */
    uint64_t max_all_bytes; /* the most read_all allocates: the format's whole-read cap */
    uint64_t max_bytes;     /* the caller's cap (sg_source_open_max), for the openers */
};

/* Opens path as a source (contract above). Errors name the file, as the
 * format's whole read would: IO, INVALID_MODEL, UNSUPPORTED. */
sg_status sg_source_open(const char *path, sg_source **out);

/* As sg_source_open, with a cap of the caller's on what the source may
 * allocate at once: an image's pixels where the format is decoded whole
 * (PNG, JPEG: as sg_image_read_memory_max), a strip or tile (TIFF), and
 * read_all's tensor; the formats' own caps apply beside it
 * (SG_IMAGE_MAX_BYTES for images). The fuzzer's form; sg_source_open has
 * no cap but the formats'. */
sg_status sg_source_open_max(const char *path, uint64_t max_bytes, sg_source **out);

/* Reads box of level into dst (contract above). */
sg_status sg_source_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst);

/* The whole of level as a tensor 1 x C x H x W (1 x C x D x H x W in
 * 3-D) in the source's dtype, out->data malloc'd and owned by the caller.
 * A level over the format's whole-read cap (SG_IMAGE_MAX_BYTES for
 * images, 64 GiB for NPY) is INVALID_MODEL, before anything is allocated:
 * read such an image by regions. */
sg_status sg_source_read_all(sg_source *s, int32_t level, sg_tensor *out);

/* Closes s; NULL is fine. */
void sg_source_close(sg_source *s);

/* The formats' openers (source_npy.c, source_image.c, source_tiff.c):
 * fill s->ops, info, state and max_all_bytes. open_image takes PNG and
 * JPEG. */
sg_status sg_source_open_npy(sg_source *s);
sg_status sg_source_open_image(sg_source *s);
sg_status sg_source_open_tiff(sg_source *s);

#endif
