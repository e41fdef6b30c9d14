/* Sliding-window inference on the device: the same numbers as the host
 * path (sliding_window.h) within float rounding, with every window's data
 * kept on the GPU. The job is the pipeline's (sw_job.h); the device does
 * what the backend's window operations offer (backend_window.h).
 *
 * - The image stays where it is when it is on the device; a host image is
 *   uploaded in slabs of rows (the slowest spatial axis) through pinned
 *   double buffers on a copy stream, ahead of the windows that read them,
 *   read through its row reader (sw_image.h): in place from host memory,
 *   or from a region source's file as the windows reach the rows.
 * - A batch's windows are gathered from the image by one kernel (padding
 *   and the flips of test-time augmentation included), the networks run
 *   on device buffers, and one kernel per run of windows (those between
 *   two finished rows) multiplies the predictions by the importance map
 *   and adds them into float32 accumulators, each voxel's windows in
 *   order (the summed weights are one more channel, so every voxel's sums
 *   add the same terms in the same order as MONAI's).
 * - Accumulators are a ring of rows: a row is finished (divided by its
 *   weight, turned into probabilities or labels, written out) as soon as
 *   no later window touches it, so they hold at most one window's rows,
 *   not the whole image times the classes. With a memory budget too small
 *   even for that, the image is done in passes over thinner slabs and a
 *   window runs once per slab it touches; the sums are unchanged.
 * - The result is written once into a device buffer, or downloaded once
 *   (or per slab when it is too large to stage whole).
 * Unlike the host path, a batch of windows never spans two images (a
 * short batch ends each image); each window's sums are the same. A short
 * batch runs at its own size where every engine was built for a range of
 * batches that holds it (a plan compiled on its first run, then kept),
 * else padded with repeats of its last window. */
#ifndef SG_PIPELINE_SW_DEVICE_H
#define SG_PIPELINE_SW_DEVICE_H

#include "pipeline/sliding_window.h"
#include "pipeline/sw_image.h"

typedef struct sg_sw_stats {
    int64_t windows;        /* windows of the grid over all images */
    int64_t runs;           /* windows run through the networks (each model, each flip counts once) */
    int32_t passes;         /* slabs the image was done in (1 unless the budget forced more) */
    int64_t slab_rows;      /* accumulator rows held at once */
    int32_t strips;         /* strips of axis 1 the windows went in (1: whole planes) */
    uint64_t seam_host_bytes; /* pinned host memory holding the sums strips share */
    int32_t sw_batch;       /* windows per network run */
    uint64_t pipeline_bytes;/* device memory of the pipeline's buffers */
    uint64_t context_bytes; /* device memory of the engines' weights and the contexts */
    /* Where the calling thread's time went (seconds): buffers, streams
     * and the importance map; the run after that, result in place; of the
     * run, copying image rows into pinned memory (and waiting for those
     * buffers); waiting for the GPU (to come within SW_IN_FLIGHT batches,
     * and to finish after the last batch); copying a host result's
     * finished rows down (during the run and after it). */
    double seconds_setup, seconds_run, seconds_uploading, seconds_waiting, seconds_downloading;
} sg_sw_stats;

/* What a device run leaves for the next run of the same window session
 * (sw_job.h): the pipeline's streams, events, pinned and device buffers,
 * so that repeating a job does not allocate them again. Owned by the
 * session (api_window.c); sg_sw_keep_free(NULL) does nothing. */
typedef struct sg_sw_keep sg_sw_keep;
void sg_sw_keep_free(sg_sw_keep *k);

/* True when every model's context has window operations (a backend that
 * runs window jobs on its device: CUDA), the same for all, on one device,
 * without CPU fallback: sg_sw_device_run can take the job. False in a
 * build without CUDA. */
bool sg_sw_device_capable(const sg_sw_model *models, int32_t n_models);

/* Runs the windows of image (float32 N x C x spatial, host or device
 * memory; a device image must be on the models' device) through the
 * models as sg_sliding_window does. *out gets the result in out_memory
 * (host: malloc'd, free with free(); device: segrt_device_alloc'd, free
 * with segrt_device_free). stats may be NULL. Errors: as
 * sg_sliding_window's, OUT_OF_MEMORY naming what did not fit (the budget
 * or the device), DEVICE. */
sg_status sg_sw_device_run(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                           const segrt_tensor *image, segrt_memory_kind out_memory, segrt_tensor *out,
                           sg_sw_stats *stats);

/* sg_sw_device_run reusing what *keep holds (it is taken: *keep becomes
 * NULL) and, when the run succeeds, leaving its own streams and buffers in
 * *keep for the next. keep may be NULL (sg_sw_device_run). A result handed
 * out is never kept. */
sg_status sg_sw_device_run_keep(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                const segrt_tensor *image, segrt_memory_kind out_memory, segrt_tensor *out,
                                sg_sw_stats *stats, sg_sw_keep **keep);

/* sg_sw_device_run_keep over a host image read through a row reader
 * (sw_image.h): rows come from it as the windows reach them (a region
 * source streams from its file), never the whole image at once. */
sg_status sg_sw_device_run_image(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                 sg_sw_image *image, segrt_memory_kind out_memory, segrt_tensor *out,
                                 sg_sw_stats *stats, sg_sw_keep **keep);
#endif
