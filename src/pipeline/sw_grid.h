/* Sliding-window geometry: how an image is padded, where the windows go
 * and how much each voxel of a window weighs when windows are blended.
 *
 * The default follows MONAI's sliding_window_inference exactly, so a user
 * moving from MONAI gets the same windows and weights from the same
 * settings; nnU-Net v2's evenly spread grid is the alternative. Both are
 * described in ../shared/notes/sliding_window.md. Nothing here touches
 * image data: the pipeline (CPU or GPU) asks for window positions and the
 * importance map and does the gathering and blending itself. */
#ifndef SG_PIPELINE_SW_GRID_H
#define SG_PIPELINE_SW_GRID_H

#include "core/status.h"

#include <stdint.h>

#define SG_SW_MAX_DIMS 3
/* The most voxels (per channel) of a window, an image axis and an image
 * padded to the window. Far beyond any image; keeps the pipelines' element
 * counts, times batch, channels and classes, checkable in int64. */
#define SG_SW_MAX_VOXELS ((int64_t)1 << 40)

typedef enum sg_sw_grid_kind {
    SG_SW_GRID_MONAI = 0, /* interval int(roi * (1 - overlap)), the last window flush with the end */
    SG_SW_GRID_NNUNET     /* as many steps as overlap asks for, spread evenly, starts rounded */
} sg_sw_grid_kind;

typedef enum sg_sw_blend {
    SG_SW_BLEND_CONSTANT = 0, /* every voxel weighs 1 */
    SG_SW_BLEND_GAUSSIAN,     /* MONAI's separable Gaussian, peak 1, clamped below */
    SG_SW_BLEND_GAUSSIAN_NNUNET /* nnU-Net's: centred on n / 2, cut at 4 sigma, peak 10, float16 values */
} sg_sw_blend;

/* The windows over one image. Positions are in the padded image: a
 * window starting at s along an axis covers [s, s + roi). */
typedef struct sg_sw_grid {
    int32_t n_dims;                    /* spatial dims, 1 to SG_SW_MAX_DIMS */
    int64_t size[SG_SW_MAX_DIMS];      /* the image as given */
    int64_t roi[SG_SW_MAX_DIMS];       /* the window */
    int64_t pad_begin[SG_SW_MAX_DIMS]; /* padding where the image is smaller than the window */
    int64_t pad_end[SG_SW_MAX_DIMS];
    int64_t padded[SG_SW_MAX_DIMS];    /* size + pads: at least roi */
    int64_t n_starts[SG_SW_MAX_DIMS];
    int64_t *starts[SG_SW_MAX_DIMS];   /* owned */
    int64_t n_windows;                 /* product of n_starts */
} sg_sw_grid;

/* Lays out the windows over an image of n_dims spatial dims.
 * roi[d] <= 0 stands for the whole axis (MONAI's fall-back). Overlap per
 * axis must be in [0, 1). Errors: INVALID_ARGUMENT (a dim count, size,
 * overlap or window count outside what is possible, a window or padded
 * image over SG_SW_MAX_VOXELS), OUT_OF_MEMORY. */
sg_status sg_sw_grid_make(int32_t n_dims, const int64_t *size, const int64_t *roi, const double *overlap,
                          sg_sw_grid_kind kind, sg_sw_grid *out);
void sg_sw_grid_free(sg_sw_grid *g);

/* Window w's start along each axis, for w in [0, n_windows): windows are
 * numbered with the last axis fastest, as MONAI enumerates them. */
void sg_sw_window_start(const sg_sw_grid *g, int64_t w, int64_t *start);

/* The most rows along axis 0 that B windows in a row read, among the
 * windows batched together: those kept (keep[w] != 0; keep NULL: all) of
 * one strip of `per` axis-1 starts (per <= 0: one strip), in increasing
 * window order, whose axis-0 starts do not decrease. Any B in a row (a
 * short first batch shifts where batches start). Kept windows over a
 * slide's tissue, and one strip's windows, span more rows than B windows
 * of the whole grid do: a ring of image rows sized by the whole grid
 * overwrote rows that a batch still read. 0 where no window is kept, -1
 * without memory to measure. */
int64_t sg_sw_batch_span(const sg_sw_grid *g, int64_t B, const uint8_t *keep, int64_t per);

/* The importance map over a window of roi (all > 0), float32, row-major
 * over the window's dims (roi[0] slowest). Gaussian: per axis
 * exp(-x^2 / (2 sigma^2)) for x = -(n-1)/2 .. (n-1)/2, sigma =
 * sigma_scale * n, their product, then clamped below at
 * max(its minimum, 1e-3); computed in float32 as MONAI computes it.
 * Errors: INVALID_ARGUMENT (sigma_scale <= 0 for a Gaussian). */
sg_status sg_sw_importance(int32_t n_dims, const int64_t *roi, sg_sw_blend blend, double sigma_scale, float *out);

#endif
