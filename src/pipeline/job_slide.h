/* The whole-slide part of the window job (job_window.c): a slide read at
 * the resolution the model was trained at, its windows only where there
 * is tissue, its labels streamed into a pyramidal TIFF, a thumbnail and
 * polygons beside it. job_window.c owns the job; this file owns what is
 * particular to slides, so that the job's flow stays one.
 *
 * The grid the windows run on: the slide's level L shrunk by a factor
 * f >= 1, L the coarsest level whose pixels are no larger than the
 * resolution asked for, f what is left (1 where a level matches within
 * 1 %). Shrinking is by area: each pixel the mean of the level's pixels
 * its footprint covers, with fractional weights at its edges (for f = 2
 * the mean of 2 x 2 blocks). Rows of that grid are read by several
 * threads at once, a stripe of columns each, each through its own handle
 * on the slide, since decoding the slide's tiles is the job's largest
 * host cost. */
#ifndef SG_PIPELINE_JOB_SLIDE_H
#define SG_PIPELINE_JOB_SLIDE_H

#include "core/file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "pipeline/sw_image.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sg_slide_job sg_slide_job;

/* Whether the window job takes path as a whole slide: a file OpenSlide
 * reads as a vendor's slide, or a tiled TIFF with reduced levels that
 * OpenSlide reads. False in a build without OpenSlide. */
bool sg_slide_job_takes(const char *path);

/* What a slide job is asked. */
typedef struct sg_slide_job_options {
    double mpp;      /* microns per pixel the windows run at (0: the slide's level 0) */
    int32_t threads; /* reader threads (0: one per core, at most 16) */
} sg_slide_job_options;

/* Opens path as a slide and chooses the grid (above). INVALID_ARGUMENT
 * naming the file for an mpp asked of a slide that does not say its own,
 * or an mpp coarser than the slide's coarsest level by more than 64x;
 * the source's errors otherwise. */
sg_status sg_slide_job_open(const char *path, const sg_slide_job_options *o, sg_slide_job **out);

/* The image the windows see: float32 1 x 3 x H x W (data NULL). */
void sg_slide_job_shape(const sg_slide_job *j, sg_tensor *shape);

/* A line saying what was chosen (level, factor, microns per pixel), for
 * the job's notice. */
const char *sg_slide_job_describe(const sg_slide_job *j);

/* The normalisation the rows read_device makes are given (the host's
 * `read` gives raw 0..255 samples, the caller normalising them). */
void sg_slide_job_set_norm(sg_slide_job *j, const sg_window_norm *norm);

/* How the level's pixels were read, after the run: the tiles the device
 * decoded, or OpenSlide's threads and why the device did not decode
 * them. Into buf; returns buf. */
const char *sg_slide_job_decoder(const sg_slide_job *j, char *buf, size_t cap);

/* The rows of that image, RGB as 0..255 floats (the job normalises). */
sg_sw_image *sg_slide_job_rows(sg_slide_job *j);

/* Host bytes the reader and the writer hold at once beside their
 * caller's buffers, for a result of out_bytes a pixel (2 for labels, the
 * classes for uint8 probabilities). */
uint64_t sg_slide_job_held_bytes(const sg_slide_job *j, int64_t rows, int32_t out_bytes);

/* Level-0 pixels per pixel of the grid the windows see. */
double sg_slide_job_scale(const sg_slide_job *j);

/* The slide's source (tissue detection and the thumbnail read it). */
struct sg_source *sg_slide_job_source(sg_slide_job *j);

/* The result's output: a pyramidal tiled TIFF of the grid's size written
 * into o (the caller's output, committed by it), with the grid's microns
 * per pixel: labels of dtype `labels` (uint8 or uint16), or with probs > 0
 * that many classes' probabilities as uint8 samples of a pixel (sink.h's
 * classes). Also keeps the labels (for probabilities the most probable
 * class) sampled on a small grid (at most `small_side` pixels a side; 0:
 * none) for a thumbnail and polygons. */
sg_status sg_slide_job_begin_output(sg_slide_job *j, sg_output *o, segrt_dtype labels, int32_t probs,
                                   int64_t small_side);

/* Rows [r0, r1) of the result, in order (sw_device.h's row_sink: user is
 * the job, n must be 0; the channels' planes channel_stride elements
 * apart). */
sg_status sg_slide_job_put_rows(void *user, int64_t n, int64_t r0, int64_t r1, const void *rows,
                                int64_t channel_stride);

/* Every row in: the reduced levels appended and the file's format ended
 * (o is still the caller's to commit). */
sg_status sg_slide_job_end_output(sg_slide_job *j);

/* The labels sampled on the small grid (uint8; labels over 255 saturate):
 * its size and the level-0 pixels each of its pixels spans. NULL before
 * begin_output or where none was asked. */
const uint8_t *sg_slide_job_small_labels(const sg_slide_job *j, int64_t *height, int64_t *width, double scale[2]);

/* The slide's picture on the small grid with the labels tinted over it,
 * as a PNG at path (written whole, atomically). */
sg_status sg_slide_job_write_thumbnail(sg_slide_job *j, const char *path);

/* The slide's tissue mask (tissue.h, with its defaults), kept for
 * keep_window and write_tissue_mask. */
sg_status sg_slide_job_detect_tissue(sg_slide_job *j);

/* sliding_window.h's keep_window over the grid the windows see (user is
 * the job): whether the window's box touches tissue. Every window before
 * detect_tissue. */
bool sg_slide_job_keep_window(void *user, const int64_t *start, const int64_t *size);

/* The tissue mask as a PNG at path (atomically). */
sg_status sg_slide_job_write_tissue_mask(sg_slide_job *j, const char *path);

/* The labels' regions on the small grid as GeoJSON polygons in level-0
 * pixels at path (geojson.h), label k named names[k] where given. */
sg_status sg_slide_job_write_geojson(sg_slide_job *j, const char *path, const char *const *names, int32_t n_names);

/* Closes j, discarding an output not ended. NULL is fine. */
void sg_slide_job_close(sg_slide_job *j);

#endif
