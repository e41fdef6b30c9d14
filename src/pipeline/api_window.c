/* The public sliding-window API (segrt.h, "Sliding windows"): options,
 * window sessions and the one-shot runs, over the device path
 * (sw_device.h) where the contexts have one and the host path
 * (sliding_window.h) otherwise. */
#include "engine/engine_internal.h"
#include "pipeline/sliding_window.h"
#include "pipeline/sw_device.h"

#include <stdlib.h>
#include <string.h>

/* The public enums mirror the pipeline's value for value. */
_Static_assert((int)SEGRT_WINDOW_BLEND_GAUSSIAN == (int)SG_SW_BLEND_GAUSSIAN, "blend values agree");
_Static_assert((int)SEGRT_WINDOW_BLEND_GAUSSIAN_NNUNET == (int)SG_SW_BLEND_GAUSSIAN_NNUNET, "blend values agree");
_Static_assert((int)SEGRT_WINDOW_PAD_REPLICATE == (int)SG_SW_PAD_REPLICATE, "pad values agree");
_Static_assert((int)SEGRT_WINDOW_GRID_NNUNET == (int)SG_SW_GRID_NNUNET, "grid values agree");
_Static_assert((int)SEGRT_WINDOW_OUTPUT_LABELS == (int)SG_SW_OUTPUT_LABELS, "output values agree");
_Static_assert((int)SEGRT_WINDOW_ACTIVATION_SIGMOID == (int)SG_SW_ACTIVATION_SIGMOID, "activation values agree");

#define WINDOW_MAX_CONTEXTS 64

struct segrt_window_options {
    sg_sw_options o;
    segrt_memory_kind result_memory;
};

#define CHECK_OPTS(o)                                                                       \
    do {                                                                                    \
        if (!(o))                                                                           \
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: opts must not be NULL", __func__); \
    } while (0)

segrt_status segrt_window_options_create(int32_t spatial_dims, const int64_t *roi, segrt_window_options **out)
{
    if (!out || !roi)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_options_create: roi and out must not be NULL");
    *out = NULL;
    if (spatial_dims < 1 || spatial_dims > SG_SW_MAX_DIMS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_options_create: %d spatial dims (1 to %d)",
                        spatial_dims, SG_SW_MAX_DIMS);
    for (int32_t d = 0; d < spatial_dims; d++)
        if (roi[d] > SG_SW_MAX_VOXELS)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "segrt_window_options_create: a window of %lld voxels along dim %d; sliding windows "
                            "take at most 2^40",
                            (long long)roi[d], d);
    segrt_window_options *w = sg_calloc(1, sizeof *w);
    if (!w)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_sw_options_default(&w->o, spatial_dims);
    memcpy(w->o.roi, roi, sizeof(int64_t) * (size_t)spatial_dims);
    *out = w;
    return SEGRT_OK;
}

void segrt_window_options_destroy(segrt_window_options *opts) { free(opts); }

segrt_status segrt_window_options_set_max_host_memory(segrt_window_options *opts, uint64_t bytes)
{
    CHECK_OPTS(opts);
    opts->o.max_host_memory = (size_t)bytes;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_overlap(segrt_window_options *opts, const double *overlap)
{
    CHECK_OPTS(opts);
    if (!overlap)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_options_set_overlap: overlap is NULL");
    for (int32_t d = 0; d < opts->o.n_dims; d++)
        if (!(overlap[d] >= 0.0 && overlap[d] < 1.0))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "overlap %g along dim %d: it must be in [0, 1)",
                            overlap[d], d);
    memcpy(opts->o.overlap, overlap, sizeof(double) * (size_t)opts->o.n_dims);
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_batch(segrt_window_options *opts, int32_t windows)
{
    CHECK_OPTS(opts);
    if (windows < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a batch of %d windows", windows);
    opts->o.sw_batch = windows;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_blend(segrt_window_options *opts, segrt_window_blend blend, double sigma_scale)
{
    CHECK_OPTS(opts);
    if ((unsigned)blend > SEGRT_WINDOW_BLEND_GAUSSIAN_NNUNET)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown blend %d", (int)blend);
    if (blend != SEGRT_WINDOW_BLEND_CONSTANT && !(sigma_scale > 0.0))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sigma scale %g: it must be > 0", sigma_scale);
    opts->o.blend = (sg_sw_blend)blend;
    if (blend != SEGRT_WINDOW_BLEND_CONSTANT)
        opts->o.sigma_scale = sigma_scale;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_padding(segrt_window_options *opts, segrt_window_pad pad, float value)
{
    CHECK_OPTS(opts);
    if (pad != SEGRT_WINDOW_PAD_CONSTANT && pad != SEGRT_WINDOW_PAD_REFLECT && pad != SEGRT_WINDOW_PAD_REPLICATE)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown padding %d", (int)pad);
    opts->o.pad = (sg_sw_pad)pad;
    opts->o.pad_value = value;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_grid(segrt_window_options *opts, segrt_window_grid grid)
{
    CHECK_OPTS(opts);
    if (grid != SEGRT_WINDOW_GRID_MONAI && grid != SEGRT_WINDOW_GRID_NNUNET)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown window grid %d", (int)grid);
    opts->o.grid = (sg_sw_grid_kind)grid;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_output(segrt_window_options *opts, segrt_window_output output,
                                             segrt_window_activation activation, float threshold)
{
    CHECK_OPTS(opts);
    if (output < SEGRT_WINDOW_OUTPUT_LOGITS || output > SEGRT_WINDOW_OUTPUT_LABELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown window output %d", (int)output);
    if (activation < SEGRT_WINDOW_ACTIVATION_DEFAULT || activation > SEGRT_WINDOW_ACTIVATION_SIGMOID)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown activation %d", (int)activation);
    opts->o.output = (sg_sw_output)output;
    opts->o.activation = (sg_sw_activation)activation;
    opts->o.threshold = threshold;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_mirroring(segrt_window_options *opts, uint32_t axes)
{
    CHECK_OPTS(opts);
    if (axes >> opts->o.n_dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "mirroring axes 0x%x: the window has %d spatial dims", axes,
                        opts->o.n_dims);
    opts->o.tta_axes = axes;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_max_memory(segrt_window_options *opts, uint64_t bytes)
{
    CHECK_OPTS(opts);
    opts->o.max_memory = bytes == SEGRT_MAX_MEMORY_AUTO ? SG_SW_MEMORY_AUTO : (size_t)bytes;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_accumulator(segrt_window_options *opts, segrt_dtype dtype)
{
    CHECK_OPTS(opts);
    if (dtype != SEGRT_DTYPE_FLOAT32 && dtype != SEGRT_DTYPE_FLOAT16 && dtype != SEGRT_DTYPE_BFLOAT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "accumulators are float32, float16 or bfloat16, not dtype %d", (int)dtype);
    opts->o.acc_dtype = dtype;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_result_memory(segrt_window_options *opts, segrt_memory_kind memory)
{
    CHECK_OPTS(opts);
    if (memory != SEGRT_MEMORY_HOST && memory != SEGRT_MEMORY_DEVICE)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown memory kind %d", (int)memory);
    opts->result_memory = memory;
    return SEGRT_OK;
}

segrt_status segrt_window_options_set_progress(segrt_window_options *opts,
                                               void (*fn)(void *user, int64_t done, int64_t total), void *user)
{
    CHECK_OPTS(opts);
    opts->o.progress = fn;
    opts->o.progress_user = user;
    return SEGRT_OK;
}

/* The image as an sg_tensor in host memory: a view of a host image, or a
 * copy of a device one (*copy then owns it). */
static sg_status host_image(const segrt_tensor *image, sg_tensor *t, void **copy)
{
    *copy = NULL;
    if (image->rank < 0 || image->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has rank %d", image->rank);
    memset(t, 0, sizeof *t);
    t->dtype = image->dtype;
    t->rank = image->rank;
    memcpy(t->dims, image->dims, sizeof(int64_t) * (size_t)image->rank);
    t->data = image->data;
    if (image->memory == SEGRT_MEMORY_HOST)
        return SEGRT_OK;
    if (image->memory != SEGRT_MEMORY_DEVICE)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has an unknown memory kind");
    size_t bytes = sg_tensor_bytes(t);
    if (!(*copy = malloc(bytes ? bytes : 1)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    t->data = *copy;
    return segrt_device_copy(*copy, SEGRT_MEMORY_HOST, image->data, SEGRT_MEMORY_DEVICE, bytes, image->device);
}

/* The image's dtype and dims as a tensor without data (the planners read
 * its shape only). */
static sg_status image_shape(const segrt_tensor *image, sg_tensor *t)
{
    if (image->rank < 0 || image->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has rank %d", image->rank);
    memset(t, 0, sizeof *t);
    t->dtype = image->dtype;
    t->rank = image->rank;
    memcpy(t->dims, image->dims, sizeof(int64_t) * (size_t)t->rank);
    return SEGRT_OK;
}

segrt_status segrt_window_input_dims(const segrt_window_options *opts, const segrt_tensor *image, int64_t *dims)
{
    CHECK_OPTS(opts);
    if (!image || !dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_input_dims: image and dims must not be NULL");
    sg_tensor t;
    SG_TRY(image_shape(image, &t));
    return sg_sw_input_dims(&opts->o, &t, dims);
}

segrt_status segrt_window_auto_batch(const segrt_window_options *opts, const segrt_tensor *image,
                                     segrt_engine *const *engines, size_t n_engines, int32_t *out)
{
    CHECK_OPTS(opts);
    if (!image || !engines || !out || n_engines < 1 || n_engines > WINDOW_MAX_CONTEXTS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_window_auto_batch: image, engines (1 to %d) and out must be given", WINDOW_MAX_CONTEXTS);
    sg_tensor t;
    SG_TRY(image_shape(image, &t));
    int32_t device = 0;
    for (size_t m = 0; m < n_engines; m++) {
        if (!engines[m])
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_auto_batch: engine %zu is NULL", m);
        segrt_engine_info info;
        SG_TRY(segrt_engine_get_info(engines[m], &info));
        if (m == 0)
            device = info.device_index;
    }
    int32_t b = 1;
    SG_TRY(sg_sw_auto_batch(&opts->o, &t, engines, (int32_t)n_engines, device, &b));
    *out = b;
    return SEGRT_OK;
}

/* A session: the contexts (borrowed), a copy of the options, and what the
 * device path kept of the last run for the next. */
struct segrt_window_session {
    sg_sw_model models[WINDOW_MAX_CONTEXTS];
    int32_t n_models;
    segrt_window_options opts;
    bool one_shot; /* segrt_window_run's: keeps nothing */
    sg_sw_keep *keep;
};

/* The checks of a session's contexts and options; fn names the caller in
 * messages. */
static sg_status session_init(segrt_window_session *s, segrt_context *const *contexts, size_t n_contexts,
                              const segrt_window_options *opts, const char *fn)
{
    memset(s, 0, sizeof *s);
    if (!opts)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: opts must not be NULL", fn);
    if (!contexts || n_contexts < 1 || n_contexts > WINDOW_MAX_CONTEXTS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: contexts (1 to %d) must be given", fn, WINDOW_MAX_CONTEXTS);
    for (size_t m = 0; m < n_contexts; m++) {
        if (!contexts[m])
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: context %zu is NULL", fn, m);
        s->models[m] = (sg_sw_model){contexts[m], contexts[m]->engine};
    }
    s->n_models = (int32_t)n_contexts;
    s->opts = *opts;
    return SEGRT_OK;
}

/* One run of the session's job over image. */
static sg_status session_run(segrt_window_session *ses, const segrt_tensor *image, segrt_tensor *out,
                             segrt_window_stats *stats, segrt_window_times *times)
{
    const sg_sw_model *models = ses->models;
    int32_t n_models = ses->n_models;
    const segrt_window_options *opts = &ses->opts;
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (times)
        memset(times, 0, sizeof *times);
    if (sg_sw_device_capable(models, n_models)) {
        sg_sw_stats st;
        /* A result left on the device takes no host memory but staging. */
        if (opts->result_memory == SEGRT_MEMORY_HOST)
            SG_TRY(sg_sw_check_host_memory(models, n_models, &opts->o, image->rank, image->dims,
                                           image->memory == SEGRT_MEMORY_HOST, true, "max_host_memory"));
        SG_TRY(sg_sw_device_run_keep(models, n_models, &opts->o, image, opts->result_memory, out, &st,
                                     ses->one_shot ? NULL : &ses->keep));
        if (stats) {
            stats->windows = st.windows;
            stats->runs = st.runs;
            stats->passes = st.passes;
            stats->on_device = 1;
            stats->slab_rows = st.slab_rows;
            stats->pipeline_bytes = st.pipeline_bytes;
            stats->context_bytes = st.context_bytes;
        }
        if (times)
            *times = (segrt_window_times){st.seconds_setup, st.seconds_run, st.seconds_uploading, st.seconds_waiting,
                                          st.seconds_downloading};
        return SEGRT_OK;
    }
    if (opts->result_memory != SEGRT_MEMORY_HOST)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "a device result needs CUDA contexts on one device without CPU fallback");
    sg_tensor img, res;
    void *copy = NULL;
    sg_status s = host_image(image, &img, &copy);
    if (s == SEGRT_OK)
        s = sg_sliding_window(models, n_models, &opts->o, &img, &res);
    free(copy);
    SG_TRY(s);
    out->dtype = res.dtype;
    out->rank = res.rank;
    memcpy(out->dims, res.dims, sizeof out->dims);
    out->data = res.data;
    out->memory = SEGRT_MEMORY_HOST;
    out->device = 0;
    if (stats) {
        sg_sw_grid g;
        if (sg_sw_grid_make(opts->o.n_dims, image->dims + 2, opts->o.roi, opts->o.overlap, opts->o.grid, &g) ==
            SEGRT_OK) {
            uint32_t flips[SG_SW_MAX_FLIPS];
            int32_t n_flips;
            sg_sw_flips(opts->o.tta_axes, opts->o.n_dims, flips, &n_flips);
            stats->windows = image->dims[0] * g.n_windows;
            stats->runs = stats->windows * (int64_t)n_models * n_flips;
            sg_sw_grid_free(&g);
        }
        stats->passes = 1;
    }
    return SEGRT_OK;
}

segrt_status segrt_window_session_create(segrt_context *const *contexts, size_t n_contexts,
                                         const segrt_window_options *opts, segrt_window_session **out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_session_create: out must not be NULL");
    *out = NULL;
    segrt_window_session *s = sg_calloc(1, sizeof *s);
    if (!s)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status st = session_init(s, contexts, n_contexts, opts, "segrt_window_session_create");
    if (st != SEGRT_OK) {
        free(s);
        return st;
    }
    *out = s;
    return SEGRT_OK;
}

segrt_status segrt_window_session_run(segrt_window_session *session, const segrt_tensor *image, segrt_tensor *out,
                                      segrt_window_stats *stats)
{
    return segrt_window_session_run_timed(session, image, out, stats, NULL);
}

segrt_status segrt_window_session_run_timed(segrt_window_session *session, const segrt_tensor *image, segrt_tensor *out,
                                            segrt_window_stats *stats, segrt_window_times *times)
{
    if (!session || !image || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_window_session_run: session, image and out must not be NULL");
    memset(out, 0, sizeof *out);
    return session_run(session, image, out, stats, times);
}

void segrt_window_session_destroy(segrt_window_session *session)
{
    if (!session)
        return;
    sg_sw_keep_free(session->keep);
    free(session);
}

segrt_status segrt_window_run(segrt_context *const *contexts, size_t n_contexts, const segrt_window_options *opts,
                              const segrt_tensor *image, segrt_tensor *out)
{
    return segrt_window_run_with_stats(contexts, n_contexts, opts, image, out, NULL);
}

segrt_status segrt_window_run_with_stats(segrt_context *const *contexts, size_t n_contexts,
                                         const segrt_window_options *opts, const segrt_tensor *image,
                                         segrt_tensor *out, segrt_window_stats *stats)
{
    return segrt_window_run_timed(contexts, n_contexts, opts, image, out, stats, NULL);
}

/* A one-shot session: on the stack, nothing kept past the run. */
segrt_status segrt_window_run_timed(segrt_context *const *contexts, size_t n_contexts,
                                    const segrt_window_options *opts, const segrt_tensor *image, segrt_tensor *out,
                                    segrt_window_stats *stats, segrt_window_times *times)
{
    CHECK_OPTS(opts);
    if (!contexts || !image || !out || n_contexts < 1 || n_contexts > WINDOW_MAX_CONTEXTS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_window_run: contexts (1 to %d), image and out must be given", WINDOW_MAX_CONTEXTS);
    memset(out, 0, sizeof *out);
    segrt_window_session s;
    SG_TRY(session_init(&s, contexts, n_contexts, opts, "segrt_window_run"));
    s.one_shot = true;
    return session_run(&s, image, out, stats, times);
}

void segrt_window_result_free(segrt_tensor *result)
{
    if (!result)
        return;
    if (result->memory == SEGRT_MEMORY_DEVICE)
        segrt_device_free(result->data);
    else
        free(result->data);
    result->data = NULL;
}
