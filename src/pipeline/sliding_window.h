/* Sliding-window inference over an image larger than the network's
 * window, on host memory: windows gathered (with MONAI's padding), run in
 * batches through an engine, blended with the importance map, divided by
 * the summed weights, cropped back, then turned into probabilities or
 * labels. Numbers follow MONAI's sliding_window_inference with the same
 * settings (../shared/notes/sliding_window.md).
 *
 * This is the reference path: it works with any engine (the CPU or a GPU
 * through host buffers) and keeps the whole N x K x image accumulator in
 * memory. The device-resident, slab-streaming path builds on the same
 * geometry (sw_grid.h). */
#ifndef SG_PIPELINE_SLIDING_WINDOW_H
#define SG_PIPELINE_SLIDING_WINDOW_H

#include "core/tensor.h"
#include "pipeline/sw_grid.h"
#include "pipeline/sw_image.h"

#include <stdbool.h>

#define SG_SW_MAX_OUTPUTS 16
#define SG_SW_MAX_FLIPS 8 /* the identity and every combination of up to 3 axes */

typedef enum sg_sw_pad {
    SG_SW_PAD_CONSTANT = 0, /* pad_value */
    SG_SW_PAD_REFLECT,      /* mirror without repeating the edge (numpy "reflect") */
    SG_SW_PAD_REPLICATE     /* repeat the edge (numpy "edge") */
} sg_sw_pad;

typedef enum sg_sw_output {
    SG_SW_OUTPUT_LOGITS = 0, /* the blended network output, float32 N x K x spatial */
    SG_SW_OUTPUT_PROBS,      /* the activation of it, float32 N x K x spatial */
    SG_SW_OUTPUT_LABELS      /* softmax/none: argmax, N x 1 x spatial; sigmoid: > threshold, N x K x spatial */
} sg_sw_output;

typedef enum sg_sw_activation {
    SG_SW_ACTIVATION_DEFAULT = 0, /* none for logits, softmax for probs and labels */
    SG_SW_ACTIVATION_NONE,
    SG_SW_ACTIVATION_SOFTMAX,     /* over the channel axis */
    SG_SW_ACTIVATION_SIGMOID
} sg_sw_activation;

typedef struct sg_sw_options {
    int32_t n_dims;                   /* spatial dims of the image and the window */
    int64_t roi[SG_SW_MAX_DIMS];      /* <= 0: the whole axis */
    double overlap[SG_SW_MAX_DIMS];   /* [0, 1) */
    int32_t sw_batch;                 /* windows per engine run: the engine's batch dim */
    sg_sw_grid_kind grid;
    sg_sw_blend blend;
    double sigma_scale;
    sg_sw_pad pad;
    float pad_value;
    sg_sw_output output;
    sg_sw_activation activation;
    float threshold;                  /* sigmoid labels */
    /* SG_SW_OUTPUT_PROBS as uint8: each probability p as round(255 p)
     * (a whole slide's probabilities: a quarter of float32's bytes, as
     * many levels as a viewer shows). Needs a softmax or sigmoid. */
    bool probs_u8;
    /* Mirroring test-time augmentation (nnU-Net's): bit d flips spatial
     * axis d. Each window is also run flipped along every non-empty
     * combination of those axes (fewer first, then in axis order), each
     * result flipped back, and the sum divided by the count. 0: off. */
    uint32_t tta_axes;
    /* The device path (sw_device.h): the most device memory the windows'
     * buffers, accumulators, staging and the contexts may hold together
     * (0: no limit; SG_SW_MEMORY_AUTO: what the device has). Under a tight
     * budget the accumulators are held for a slab of rows thinner than a
     * window and windows run once per slab they touch. */
    size_t max_memory;
    /* The device path's accumulators: SEGRT_DTYPE_FLOAT32 (or 0),
     * FLOAT16, BFLOAT16 (segrt_window_options_set_accumulator). */
    segrt_dtype acc_dtype;
    /* The device path: accumulators for the whole image instead of a
     * stream of slabs (the unbounded reference; same numbers). */
    bool whole;
    /* Gather and blend on the host even when every model runs on CUDA. */
    bool host_path;
    /* The most host memory the job may hold, the image included (0: no
     * limit but what the machine has available). */
    size_t max_host_memory;
    /* Windows whose box (in the image, clipped to it: start and size per
     * spatial axis) it returns false for are not run: their voxels get no
     * sums. A voxel no window that ran covers is background: label 0,
     * probabilities 0 (every class), logits 0. NULL: every window runs.
     * Asked once per window of the grid, in MONAI's order, before any runs
     * (sg_sw_kept_windows); the answer holds for every image of the batch. */
    bool (*keep_window)(void *user, const int64_t *start, const int64_t *size);
    void *keep_window_user;
    /* Called after each batch of windows with the windows done and the
     * total (NULL: nothing). The total counts the windows kept. */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
    /* The device path only: the result's rows handed to row_sink as they
     * are final, image by image and rows in order, instead of a result
     * tensor (which comes back with its dims and dtype and no data): rows
     * [r0, r1) of image n, channel c's at rows + c * channel_stride
     * elements of the result's dtype. The device then holds a ring of the
     * result's rows, not the whole result, so that an image of any height
     * (a whole slide) runs in bounded memory. Called on the job's thread
     * while later windows run; an error it returns ends the job. NULL: a
     * result tensor. */
    sg_status (*row_sink)(void *user, int64_t n, int64_t r0, int64_t r1, const void *rows, int64_t channel_stride);
    void *row_sink_user;
} sg_sw_options;

/* One network of an ensemble: an engine and a context of it. */
typedef struct sg_sw_model {
    segrt_context *ctx;
    const segrt_engine *engine;
} sg_sw_model;

/* The output shapes of models[m] for the window batch `in`, checked:
 * one input, float32 [sw_batch, K, roi...] first, K the same as
 * *classes when m > 0 (m == 0 sets it). t receives all n outputs' shapes. */
sg_status sg_sw_model_outputs(const sg_sw_model *models, int32_t m, const sg_sw_options *o, const int64_t *roi,
                              const segrt_tensor *in, size_t *n, segrt_tensor *t, int64_t *classes);

/* Whether an image of these rank, dtype and dims suits the options:
 * float32 N x C x spatial with o->n_dims spatial dims, none empty, and a
 * window batch of at least 1. INVALID_ARGUMENT naming what does not. */
sg_status sg_sw_check_image(const sg_sw_options *o, int32_t rank, segrt_dtype dtype, const int64_t *dims);

/* Whether the buffers of a run over grid g fit 64-bit element and byte
 * counts: the batch of windows (sw_batch x channels x window), of results
 * (sw_batch x classes x window) and the accumulators (n_img x classes x
 * padded image). Both paths check this once the classes are known, before
 * computing any size. INVALID_ARGUMENT saying which does not. */
sg_status sg_sw_check_buffers(const sg_sw_options *o, const sg_sw_grid *g, int64_t n_img, int64_t channels,
                              int64_t classes);

/* The windows of grid g that o's keep_window keeps (all of them when it
 * is NULL), as window numbers (sg_sw_window_start's) in increasing order,
 * MONAI's: *list (*n entries; malloc'd, the caller frees it; NULL when
 * *n is 0). A window's box given to the filter is its part of the image:
 * per axis start max(s - pad_begin, 0), size up to min(s - pad_begin +
 * roi, size) from there, s its start in the padded image (never empty:
 * padding is only added where one window spans the axis). The host path
 * runs only these windows, sums weights only over them and finishes
 * voxels with no weight as background; so does the device path
 * (sw_device.c). OUT_OF_MEMORY. */
sg_status sg_sw_kept_windows(const sg_sw_options *o, const sg_sw_grid *g, int64_t **list, int64_t *n);

/* The flips of test-time augmentation in nnU-Net's order: the identity,
 * then the combinations of the chosen axes, fewer axes first. */
void sg_sw_flips(uint32_t axes, int32_t n_dims, uint32_t *flips, int32_t *n);

/* The activation an output kind applies when the options say "default". */
sg_sw_activation sg_sw_effective_activation(const sg_sw_options *o);

/* max_memory's "auto" (segrt.h's SEGRT_MAX_MEMORY_AUTO): what the device
 * has free when the run plans its memory, plus what the job's contexts
 * and kept buffers hold there already, less room for others on the card
 * (a display, another process): sg_sw_auto_budget. */
#define SG_SW_MEMORY_AUTO SIZE_MAX

/* The "auto" budget: free + held less the larger of 5 % of the device's
 * total and 256 MiB (0 where that leaves nothing). */
uint64_t sg_sw_auto_budget(uint64_t free_bytes, uint64_t total_bytes, uint64_t held_bytes);

/* MONAI's defaults: overlap 0.25, one window a run, constant blend, sigma
 * scale 0.125, constant padding with 0, MONAI's grid, logits. */
void sg_sw_options_default(sg_sw_options *o, int32_t n_dims);

/* The engine's input shape for an image with `channels` channels:
 * [sw_batch, channels, roi...] with roi resolved against image dims. */
sg_status sg_sw_input_dims(const sg_sw_options *o, const sg_tensor *image, int64_t *dims);

/* The largest window batch whose activations, window buffers and
 * accumulators fit the budget (o's max_memory, else device's free memory),
 * at most one batch per image's windows and 64, from engines built for one
 * window (o's sw_batch is taken as 1); 1 where an engine runs on the CPU,
 * whose host path runs a window at a time. An estimate: a run that still
 * runs out of memory is retried with half by its caller. */
sg_status sg_sw_auto_batch(const sg_sw_options *o, const sg_tensor *image, segrt_engine *const *engines, int32_t n,
                           int32_t device, int32_t *out);

/* The host memory a job holds at its peak, by part, in bytes. */
typedef struct sg_sw_host_need {
    uint64_t image;        /* the image in float32, and what the caller keeps beside it */
    uint64_t accumulators; /* host path: N x K x the padded image, and the summed weights */
    uint64_t windows;      /* host path: a batch of windows in and out; device path: pinned staging */
    uint64_t result;       /* what the job returns, where not in the accumulators' memory */
    uint64_t networks;     /* engines that run on the CPU: weights and activations */
    uint64_t total;
} sg_sw_host_need;

/* What a job over an image of dims (N x C x spatial, o->n_dims spatial)
 * holds in host memory with `classes` output channels, on the host path
 * or the device path; extra_image is added to the image's part (pixels the
 * caller keeps for an overlay) and networks is taken as given.
 * INVALID_ARGUMENT when the geometry is refused, OUT_OF_MEMORY (naming
 * the sizes) when the sums pass 64 bits. */
sg_status sg_sw_host_need_of(const sg_sw_options *o, const int64_t *dims, int64_t classes, bool device_path,
                              uint64_t extra_image, uint64_t networks, sg_sw_host_need *need);

/* A message naming the need, its parts and the limit: INVALID_ARGUMENT
 * when need->total exceeds o->max_host_memory (when set; limit_name says
 * what set it, "max_host_memory" say), OUT_OF_MEMORY when what it still
 * has to allocate (need->total less `held`, what of it the caller already
 * holds) exceeds the host memory available now (sg_host_memory_available). */
sg_status sg_sw_host_need_check(const sg_sw_options *o, const sg_sw_host_need *need, uint64_t held,
                                const char *limit_name);

/* need without the image: a device job that streams its image's rows
 * from a region source (sw_image.h) holds only what the source holds at
 * once (image_held: a strip or tile it decodes, say) besides the pinned
 * staging the windows' part counts already. */
void sg_sw_host_need_streamed(sg_sw_host_need *need, uint64_t image_held);

/* The check of sg_sw_host_need_check for a job about to run: models'
 * class count asked of their engines, engines on the CPU counted with
 * their activation arenas (held already, as is the image when
 * image_on_host). sg_sliding_window and the device path's entry points
 * call it before allocating; limit_name as for sg_sw_host_need_check. */
sg_status sg_sw_check_host_memory(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                  int32_t rank, const int64_t *dims, bool image_on_host, bool device_path,
                                  const char *limit_name);

/* sg_sw_check_host_memory for a device-path job whose image streams from
 * a region source: the image is counted as image_held
 * (sg_sw_host_need_streamed), none of it held yet. */
sg_status sg_sw_check_host_memory_streamed(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                           int32_t rank, const int64_t *dims, uint64_t image_held,
                                           const char *limit_name);

/* Runs the windows of image (float32, N x C x spatial with o->n_dims
 * spatial dims, host memory) through each model (on the device path of
 * sw_device.h when they all run on CUDA, unless o->host_path), whose engine takes [sw_batch, C,
 * roi...] as its only input and gives [sw_batch, K, roi...] as its first
 * output (K the same for all). Per window the models' results (after
 * test-time augmentation) are averaged in float32, in the order given
 * (nnU-Net's ensembles). *out is allocated here (free out->data). Errors
 * name the problem: INVALID_ARGUMENT (options, image rank or dtype, an
 * engine that does not take the windows, gives another spatial size or
 * another class count), OUT_OF_MEMORY, and the engines' own. */
sg_status sg_sliding_window(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                            const sg_tensor *image, sg_tensor *out);

/* sg_sliding_window over an image given as a row reader (sw_image.h). A
 * reader with the whole image in memory is sg_sliding_window's image. A
 * reader over a region source streams: on the device path its rows are
 * read as the windows reach them, so the image is never whole in host
 * memory; the host path, which holds accumulators for the whole image
 * anyway, reads it whole through the reader first. */
sg_status sg_sliding_window_image(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                  sg_sw_image *image, sg_tensor *out);

#endif
