/* Images as region sinks: a writer opens a destination with the image's
 * description, accepts its regions in order, and commits the file whole
 * or discards it, so that a job can write a result larger than memory
 * slab by slab.
 *
 * Contract of every sink:
 * - sg_sink_open takes the format from path's extension (.npy, .png,
 *   .tif/.tiff; sg_image_format_of_name), the image's dims, channels and
 *   dtype, and opens an output of core/file.h (a temporary file beside the
 *   destination, exclusive; nothing is at the destination until commit).
 * - sg_sink_write takes one region in the layout sources give (planar:
 *   channel, then depth, height, width, in the sink's dtype). Regions come
 *   in order: full-width rows of one page starting where the last region
 *   ended, or whole pages starting at the next page. Anything else is
 *   INVALID_ARGUMENT naming the file (and the sink can still be
 *   discarded).
 * - sg_sink_commit fails (INVALID_ARGUMENT) when rows are missing; it
 *   flushes, fsyncs and renames the file over the destination
 *   (sg_output_commit). Commit and discard free the sink.
 *
 * The formats:
 * - NPY: any dtype NPY holds, as the array 1 x C x H x W (1 x C x D x H x
 *   W in 3-D), the bytes sg_npy_write writes for that tensor; channels
 *   after the first are placed by seeking, so any channel count streams.
 * - PNG: 2-D, 1 to 4 channels (grey, grey+alpha, RGB, RGBA), uint8 or
 *   uint16, written row by row: the bytes sg_image_write writes.
 * - TIFF: 2-D or 3-D (pages), the same channels and dtypes, strip by strip
 *   (deflate, horizontal prediction, BigTIFF past 2 GiB of pixels): the
 *   bytes sg_image_write writes.
 * - Pyramidal TIFF (desc.pyramid, .tif/.tiff only; sink_slide.c): 2-D, 1 to
 *   4 channels (grey, grey+alpha, RGB, RGBA; with desc.classes up to
 *   SG_SINK_MAX_CLASSES grey samples) of uint8 or uint16, tiled BigTIFF,
 *   deflate with horizontal prediction; level 0, then levels of half the
 *   width and height (rounding up) as the following directories (SubFileType
 *   reduced image) down to the first that fits in one tile, each with
 *   X/YResolution (centimetre) from mpp times 2^level where mpp is known. A
 *   level reduces each 2x2 block of the one before (fewer pixels on an odd
 *   edge): the mode for one channel (labels; ties to the smallest label),
 *   the mean rounded half up per channel for several or for classes. Reduced
 *   levels are built as rows arrive, in scratch outputs beside the
 *   destination (removed at commit or discard), and appended at commit.
 * - NIfTI (.nii, .nii.gz; sink_nifti.c): 2-D or 3-D, channels as the 4th
 *   dim, any dtype but bool, float16 and bfloat16 (uint8 for bool), with
 *   the description's spacing and geometry as both qform and sform (the
 *   rules are sink_nifti.c's); NIfTI-1, or NIfTI-2 where a dim passes
 *   32767. A .nii.gz is deflated as it goes and takes one channel; a .nii
 *   places channels after the first by seeking.
 * Memory: one strip (TIFF) or row (PNG, NPY) beside the caller's
 * regions; a pyramid holds one row of tiles per level (about twice one row
 * of level 0's tiles). */
#ifndef SG_IO_SINK_H
#define SG_IO_SINK_H

#include "core/file.h"
#include "core/tensor.h"
#include "io/source.h"

#include <stdint.h>

typedef struct sg_sink_desc {
    sg_dtype dtype;
    int32_t n_dims;   /* spatial dims: 2 or 3 */
    int32_t channels; /* >= 1 (1 to 4 for PNG and TIFF) */
    int64_t dims[3];  /* depth (1 in 2-D), height, width */
    /* Where the image lies (NIfTI only; other formats ignore it): spacing
     * along depth, height, width (0: 1 mm) and source.h's geometry (a
     * zeroed one is known false). */
    double spacing[3];
    sg_geometry geometry;
    /* A pyramidal tiled TIFF (.tif, .tiff; 2-D only) instead of strips:
     * tiles of tile[0] rows by tile[1] columns (0: 512; multiples of 16,
     * 16 to 4096), mpp the microns per pixel along height and width at
     * level 0 (both 0: unknown, no resolution tags). */
    bool pyramid;
    int64_t tile[2];
    double mpp[2];
    /* The channels are a class each (probabilities), not colours: a
     * pyramid stores them as grey samples (MinIsBlack, the ones after the
     * first unspecified extra samples), 1 to SG_SINK_MAX_CLASSES of them. */
    bool classes;
} sg_sink_desc;

#define SG_SINK_MAX_CLASSES 256

typedef struct sg_sink sg_sink;

/* Opens a sink for path (contract above). INVALID_ARGUMENT for an
 * extension segrt does not write or a description the format cannot hold
 * (UNSUPPORTED for .jpg, a volume to .png, a dtype PNG or TIFF lacks),
 * IO when the output cannot be created; every message names path. */
sg_status sg_sink_open(const char *path, const sg_sink_desc *desc, sg_sink **out);

/* A sink writing into o, an output of the caller's (its path's extension
 * says the format): commit finishes the file's format and leaves o to its
 * owner to commit; discard leaves o as it is (its owner discards it). */
sg_status sg_sink_open_output(sg_output *o, const sg_sink_desc *desc, sg_sink **out);

/* Writes the next region, box at level 0 (contract above). */
sg_status sg_sink_write(sg_sink *s, const sg_box *box, const void *src);

/* Ends the file and commits it; frees s. */
sg_status sg_sink_commit(sg_sink *s);

/* Removes the temporary file and frees s. NULL is fine. */
void sg_sink_discard(sg_sink *s);

#endif
