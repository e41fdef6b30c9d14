/* Where a whole-slide image has tissue: a low-resolution mask, so that a
 * slide job runs only the windows that touch tissue (sliding_window.h's
 * keep_window). Most of a slide is glass: skipping it saves most of the
 * network's time.
 *
 * The method, and why:
 * - The mask is computed on one level of the pyramid: the finest whose
 *   width x height is at most max_mask_pixels. Tissue is millimetres
 *   across, so a level of a few million pixels (a few um per pixel) draws
 *   it well; finer levels cost reads and memory for nothing. A slide with
 *   no level that small (a single-level TIFF, say) is read from its
 *   coarsest level, each f x f block of its pixels averaged (RGB, rounded)
 *   into one mask pixel, f the smallest factor that brings the grid under
 *   max_mask_pixels: what a coarser level of the pyramid would have held.
 *   The level is read by boxes of at most 16 MiB (and of at most
 *   max_mask_pixels x 3 bytes), so nothing of the slide is whole in memory
 *   but the mask.
 * - Stain makes colour, glass and background are grey: the feature is
 *   the saturation S = (max - min) / max of R, G, B (HSV's; 0 for black),
 *   quantised to 256 bins q = round(255 S) in integers.
 * - Pixels with max(R, G, B) < SG_TISSUE_DARK are left out of the
 *   histogram and of the mask: for them S is the ratio of noise to a small
 *   number (RGB (10, 5, 3) has S 0.7), so the black borders of some
 *   scanners, black pen and dust would make a spurious high-saturation
 *   mode that pulls the threshold up. Stained tissue at mask resolution is
 *   never that dark (each mask pixel averages many cells and the stroma
 *   around them). White pixels stay in: their low S is the background mode
 *   Otsu's threshold separates tissue from.
 * - Otsu's threshold t on that histogram (the split between bins, over
 *   the bins from the least to the largest present, that maximises the
 *   between-class variance; the first of equal maxima: skimage's
 *   threshold_otsu on the integer image), tissue where q > t. A slide
 *   whose pixels all fall in one bin (all background) has no split: the
 *   mask is empty, threshold that bin. Otsu always splits what it is
 *   given, so on a slide of glass alone it would split the glass's noise:
 *   tissue also needs q > SG_TISSUE_MIN_BIN (S about 0.05), above glass
 *   and its JPEG noise (a grey of 240 +- 5 has S under 0.04) and well
 *   below the faintest stain (eosin's pink is about 0.3).
 * - Then pieces of tissue smaller than min_object are dropped (dust,
 *   debris, stray fibres: 8-connected components of tissue) and holes
 *   smaller than min_hole filled (4-connected components of background,
 *   those touching the mask's edge included: skimage's
 *   remove_small_objects then remove_small_holes with connectivity 2 and
 *   1). A component is visited breadth-first with one queue of the mask's
 *   size, so memory stays a few bytes per mask pixel.
 * - Default sizes, with the slide's mpp: pieces under 10 000 um^2 (a
 *   square 100 um on a side, a few dozen cells; smaller than any biopsy
 *   fragment worth segmenting, larger than dust) are dropped and holes
 *   under 10 000 um^2 filled (vessels, fat cells and tears inside tissue;
 *   a hole of that size holds no window a network could use, so filling
 *   it costs nothing). Without mpp, sizes are in mask pixels and both
 *   default to 64 (skimage's defaults for the two functions).
 * - Box queries use a summed-area table of the mask: O(1) each. */
#ifndef SG_PIPELINE_TISSUE_H
#define SG_PIPELINE_TISSUE_H

#include "core/status.h"
#include "io/source.h"

#include <stdbool.h>
#include <stdint.h>

/* Pixels whose max(R, G, B) is below this are not tissue (above). */
#define SG_TISSUE_DARK 32
/* Saturation bins at or below this are never tissue (above). */
#define SG_TISSUE_MIN_BIN 12
/* max_mask_pixels when the options leave it 0. */
#define SG_TISSUE_DEFAULT_PIXELS 4194304.0
/* The default sizes (above): um^2 with mpp, mask pixels without. */
#define SG_TISSUE_DEFAULT_UM2 10000.0
#define SG_TISSUE_DEFAULT_PX 64.0

typedef struct sg_tissue_options {
    double max_mask_pixels; /* the level used: the finest whose width*height <= this (0: 4M); where none is,
                               the coarsest reduced f times (above). At most 2^31 - 1 */
    double min_object_um2;  /* tissue pieces smaller than this (in level-0 um^2 via mpp; pixels of the mask
                               when the slide has no mpp) are dropped (0: the default above; < 0: none) */
    double min_hole_um2;    /* holes smaller than this filled (0: the default above; < 0: none) */
} sg_tissue_options;

typedef struct sg_tissue_mask {
    int64_t height, width; /* the mask's grid */
    double scale[2];       /* level-0 pixels per mask pixel along y, x: the level's downsample times the
                              reduction */
    uint8_t *mask;         /* height*width, 1 = tissue, malloc'd */
    double threshold;      /* the saturation threshold chosen (Otsu): tissue where S > threshold, S in [0, 1]
                              (t / 255 for the bin t above) */
    int32_t level;         /* the slide level it was computed on */
    int32_t reduce;        /* f: level pixels per mask pixel along each axis (1 but for the case above) */
    double min_object_px;  /* the sizes applied, in mask pixels (pieces and holes with fewer pixels went) */
    double min_hole_px;
    uint32_t *sat; /* (height+1) x (width+1): tissue pixels above and left of each corner */
} sg_tissue_mask;

/* The tissue mask of slide (a source of RGB uint8 images, 2-D: a slide
 * source, or any image). o NULL: every default. Errors name the file:
 * INVALID_ARGUMENT (a source that is not RGB uint8 2-D, options out of
 * range), OUT_OF_MEMORY, and the source's read errors. *out is zeroed on
 * failure. */
sg_status sg_tissue_detect(sg_source *slide, const sg_tissue_options *o, sg_tissue_mask *out);

/* Frees what detect allocated; NULL and a zeroed mask are fine. */
void sg_tissue_mask_free(sg_tissue_mask *m);

/* Whether any tissue pixel of the mask touches the level-0 box [y0, y0+h)
 * x [x0, x0+w) (conservative: mask pixel (i, j) counts when its level-0
 * footprint [i sy, (i+1) sy) x [j sx, (j+1) sx) overlaps the box). An empty
 * box (h or w <= 0) touches nothing. O(1). */
bool sg_tissue_box(const sg_tissue_mask *m, double y0, double x0, double h, double w);

/* The mask as an 8-bit grey PNG (0 background, 255 tissue) at path,
 * written to a temporary file and renamed when complete (io/sink.h).
 * Errors name path. */
sg_status sg_tissue_write_png(const sg_tissue_mask *m, const char *path);

#endif
