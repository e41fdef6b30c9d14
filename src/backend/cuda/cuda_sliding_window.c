/* Sliding-window inference on the device (pipeline/sw_device.h).
 *
 * One pass (or, under a tight memory budget, one per slab of rows) walks
 * the windows that touch its rows in MONAI's order, sw_batch at a time:
 * gather (per model and flip) -> run -> combine flips and models ->
 * accumulate (a launch per run of windows between finished rows, each
 * voxel's windows in order) -> finish the rows no later window touches.
 * The pipeline's kernels run on its own stream and the networks on their
 * contexts' streams, ordered by events (a run waits for its gather, the
 * blending waits for the run), so the host enqueues ahead of the GPU and
 * never waits between batches; it stays at most SW_IN_FLIGHT batches
 * ahead. Host images go up on a copy stream that the gathers wait for, a
 * pinned buffer's worth of rows after each batch, ahead of the windows
 * that need them. A host result made whole on the device goes down in
 * pieces as its rows are finished, on a third stream, while later
 * windows run: the host would only wait for the GPU otherwise. */
#include "pipeline/sw_device.h"

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_window.h"
#include "core/copy_team.h"
#include "engine/engine_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Host results up to this size are made whole on the device and
 * downloaded once; larger ones (many classes of probabilities) go down
 * slab by slab. */
#define SW_STAGE_WHOLE_BYTES ((size_t)256 << 20)
#define SW_PINNED_BYTES ((size_t)8 << 20)
/* Batches enqueued ahead of the GPU: enough to hide the host's launches
 * and uploads behind the networks, few enough that progress reports mean
 * windows done. */
#define SW_IN_FLIGHT 3

/* A host image's rows on the device. */
typedef struct img_rows {
    int64_t image;   /* the image whose rows are held, -1: none */
    int64_t lo, hi;  /* rows [lo, hi) are uploaded or on their way */
    float *ring;     /* C x img_ring rows x plane; row r at r mod img_ring */
} img_rows;

/* One model's outputs for a batch of windows. */
typedef struct dev_model {
    size_t n;
    segrt_tensor t[SG_SW_MAX_OUTPUTS]; /* t[0] -> d_pred; others into extra */
    void *extra[SG_SW_MAX_OUTPUTS];
} dev_model;

/* The pipeline's streams (s: gathers, blending, finishing; up: uploads;
 * down: a host result's finished rows) and the events that order them. */
typedef struct sw_streams {
    cudaStream_t s, up, down;
    cudaEvent_t ev_gathered, ev_uploaded, ev_net;
    cudaEvent_t ev_batch[SW_IN_FLIGHT]; /* recorded after batch i's blending at i % SW_IN_FLIGHT */
} sw_streams;

/* What the first model's context keeps of its last run for the next:
 * streams and events, the pinned buffers, the importance map's key, and
 * the device buffers in the order the run allocated them. A run takes
 * the buffers back in that order while each one's size is what it asks
 * for; at the first that is not, it frees the rest, so it never holds
 * more than its own buffers. Allocating the 3D benchmark's 517 MB and
 * its pinned memory took 21 ms of a 164 ms job on the H100. */
struct sg_sw_cache {
    int32_t device;
    sw_streams st;
    void *pinned[2];
    size_t pinned_bytes;
    cudaEvent_t ev_pinned[2];
    sg_copy_team *team;
    int32_t n;        /* device buffers; a taken one is NULL */
    void **block;
    size_t *bytes;
    /* What the first buffer (the importance map) holds. */
    bool w_valid;
    int32_t w_dims, w_blend;
    int64_t w_roi[SG_SW_MAX_DIMS];
    float w_sigma;
};

typedef struct dev_run {
    const sg_sw_options *o;
    const sg_sw_model *models;
    int32_t n_models, device;
    sg_sw_grid g;
    sgk_win_geom geom;
    int64_t B, C, K, roi_numel, img_plane, pad_plane, image_numel, n_img;
    uint32_t flips[SG_SW_MAX_FLIPS];
    int32_t n_flips;
    sw_streams st;
    int64_t batches;                    /* batches enqueued so far */
    bool have_upload;
    bool enqueued;                      /* network runs enqueued and not yet finished */
    float *d_w, *d_in, *d_pred, *d_model, *d_out, *d_acc;
    dev_model *dm;
    int64_t ring_rows, pass_rows;
    /* The image: the caller's device buffer, or host rows in a ring. */
    const float *d_image, *h_image;
    img_rows rows;
    int64_t img_ring;
    void *pinned[2];
    size_t pinned_bytes;
    cudaEvent_t ev_pinned[2];
    int32_t pinned_next;
    sg_copy_team *team;  /* the host's side of copies through the pinned buffers */
    /* The result. */
    sgk_win_final final;
    segrt_dtype out_dtype;
    int64_t out_ch;
    size_t out_esize;
    segrt_memory_kind out_memory;
    void *d_result;      /* the whole result on the device, or NULL */
    void *d_stage;       /* else a slab of it */
    int64_t stage_rows;
    void *h_result;
    size_t h_bytes, h_populated; /* its size, and its bytes populate_while_busy has made resident */
    /* A host result made whole on the device goes down as it is finished:
     * through batch i, image fin_image[i % SW_IN_FLIGHT]'s rows below
     * fin_row[...] are final; rows before (dl_image, dl_row) are down. */
    bool progressive;
    int64_t fin_image[SW_IN_FLIGHT], fin_row[SW_IN_FLIGHT];
    int64_t dl_image, dl_row;
    uint64_t pipeline_bytes;
    int64_t runs, total_runs;
    int64_t *batch;      /* window indices of a batch larger than run_image_pass's own array */
    int64_t release_row;  /* a host image's rows below it: no later batch of the pass reads them */
    double t_setup, t_upload, t_wait, t_download, t_total; /* host seconds: see sg_sw_stats */
    /* Device buffers in allocation order (what the cache gets back), and
     * the cache this run took from its first context. */
    int32_t n_blocks, cap_blocks;
    void **block;
    size_t *bytes;
    sg_sw_cache *cache;
    int32_t cache_next;  /* the cache's next buffer to offer */
    bool reused;         /* dev_alloc's last buffer came from the cache */
    bool w_ready;        /* d_w already holds this run's importance map */
    bool result_listed;  /* d_result is one of block[] (a host result's staging) */
} dev_run;

static double sw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool sg_sw_device_capable(const sg_sw_model *models, int32_t n_models)
{
    int32_t device = -1;
    for (int32_t m = 0; m < n_models; m++) {
        segrt_engine_info info;
        if (segrt_engine_get_info(models[m].engine, &info) != SEGRT_OK || info.device != SEGRT_DEVICE_CUDA ||
            info.fallback_steps > 0)
            return false;
        if (m > 0 && info.device_index != device)
            return false;
        device = info.device_index;
    }
    return n_models > 0;
}

/* Frees the cache's device buffers not taken yet. */
static void cache_drop_blocks(sg_sw_cache *c)
{
    for (int32_t i = 0; c && i < c->n; i++) {
        segrt_device_free(c->block[i]);
        c->block[i] = NULL;
    }
    if (c)
        c->n = 0;
}

static void pinned_destroy(void *pinned[2], cudaEvent_t ev[2])
{
    for (int i = 0; i < 2; i++) {
        if (pinned[i])
            cudaFreeHost(pinned[i]);
        if (ev[i])
            cudaEventDestroy(ev[i]);
        pinned[i] = NULL;
        ev[i] = NULL;
    }
}

static void streams_destroy(sw_streams *t)
{
    cudaEvent_t ev[3 + SW_IN_FLIGHT] = {t->ev_gathered, t->ev_uploaded, t->ev_net};
    for (int i = 0; i < SW_IN_FLIGHT; i++)
        ev[3 + i] = t->ev_batch[i];
    for (int i = 0; i < 3 + SW_IN_FLIGHT; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    if (t->s)
        cudaStreamDestroy(t->s);
    if (t->up)
        cudaStreamDestroy(t->up);
    if (t->down)
        cudaStreamDestroy(t->down);
    memset(t, 0, sizeof *t);
}

void sg_sw_cache_free(sg_sw_cache *c)
{
    if (!c)
        return;
    int prev = 0;
    bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != c->device && cudaSetDevice(c->device) == cudaSuccess;
    cache_drop_blocks(c);
    free(c->block);
    free(c->bytes);
    pinned_destroy(c->pinned, c->ev_pinned);
    sg_copy_team_free(c->team);
    streams_destroy(&c->st);
    if (switched)
        cudaSetDevice(prev);
    free(c);
}

/* A device buffer of the pipeline: the cache's next one when it has the
 * size asked for, else a new one (and the cache's others go). Listed in
 * r->block for dev_run_free, which gives them back to the cache. */
static sg_status dev_alloc(dev_run *r, size_t bytes, const char *what, void **out)
{
    size_t want = bytes ? bytes : 256;
    sg_sw_cache *c = r->cache;
    *out = NULL;
    if (c && r->cache_next < c->n) {
        if (c->bytes[r->cache_next] == want) {
            *out = c->block[r->cache_next];
            c->block[r->cache_next++] = NULL;
        } else {
            cache_drop_blocks(c);
        }
    }
    r->reused = *out != NULL;
    if (r->n_blocks == r->cap_blocks) {
        int32_t cap = r->cap_blocks ? 2 * r->cap_blocks : 16;
        void **b = realloc(r->block, sizeof *b * (size_t)cap);
        if (b)
            r->block = b;
        size_t *n = b ? realloc(r->bytes, sizeof *n * (size_t)cap) : NULL;
        if (n)
            r->bytes = n;
        if (!b || !n) {
            segrt_device_free(*out);
            *out = NULL;
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "sliding windows: %s: no host memory", what);
        }
        r->cap_blocks = cap;
    }
    if (!*out) {
        sg_status s = segrt_device_alloc(r->device, want, out);
        if (s != SEGRT_OK)
            return sg_error_prefix(s, "sliding windows: %s: ", what);
    }
    r->block[r->n_blocks] = *out;
    r->bytes[r->n_blocks++] = want;
    r->pipeline_bytes += bytes;
    return SEGRT_OK;
}

/* A buffer handed to the caller (a device result): never cached. */
static sg_status dev_alloc_owned(dev_run *r, size_t bytes, const char *what, void **out)
{
    sg_status s = segrt_device_alloc(r->device, bytes ? bytes : 256, out);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "sliding windows: %s: ", what);
    r->pipeline_bytes += bytes;
    return SEGRT_OK;
}

/* Waits for the contexts' enqueued runs (they read and write the
 * pipeline's buffers) without replacing the error that ended the run. */
static void finish_contexts_quietly(dev_run *r)
{
    if (!r->enqueued)
        return;
    char keep[512];
    snprintf(keep, sizeof keep, "%s", sg_last_error());
    for (int32_t m = 0; m < r->n_models; m++)
        (void)sg_context_finish(r->models[m].ctx);
    (void)sg_error(SEGRT_ERROR_DEVICE, "%s", keep);
    r->enqueued = false;
}

/* The run's streams, events, pinned and device buffers into a new cache
 * for the next run, or NULL when there is no memory for one. What the
 * run's own cache still holds is freed with it (dev_run_free). */
static sg_sw_cache *cache_from_run(dev_run *r)
{
    sg_sw_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    /* The importance map is the first buffer (plan_memory). */
    c->w_valid = r->n_blocks > 0 && r->block[0] == (void *)r->d_w;
    c->device = r->device;
    c->block = r->block;
    c->bytes = r->bytes;
    c->n = r->n_blocks;
    r->block = NULL;
    r->bytes = NULL;
    r->n_blocks = r->cap_blocks = 0;
    c->st = r->st;
    memset(&r->st, 0, sizeof r->st);
    for (int i = 0; i < 2; i++) {
        c->pinned[i] = r->pinned[i];
        c->ev_pinned[i] = r->ev_pinned[i];
        r->pinned[i] = NULL;
        r->ev_pinned[i] = NULL;
    }
    c->pinned_bytes = r->pinned_bytes;
    c->team = r->team;
    r->team = NULL;
    c->w_dims = r->g.n_dims;
    c->w_blend = (int32_t)r->o->blend;
    c->w_sigma = r->o->sigma_scale;
    memset(c->w_roi, 0, sizeof c->w_roi);
    memcpy(c->w_roi, r->g.roi, sizeof(int64_t) * (size_t)r->g.n_dims);
    return c;
}

/* Waits for the GPU, then frees what the run holds. With keep (a run that
 * succeeded), streams, events and buffers go into the first context's
 * cache instead. */
static void dev_run_free(dev_run *r, bool keep)
{
    finish_contexts_quietly(r);
    if (r->st.s)
        cudaStreamSynchronize(r->st.s);
    if (r->st.up)
        cudaStreamSynchronize(r->st.up);
    if (r->st.down)
        cudaStreamSynchronize(r->st.down);
    if (keep && r->models && r->models[0].ctx && !r->models[0].ctx->sw_cache) {
        sg_sw_cache *c = cache_from_run(r);
        if (c)
            r->models[0].ctx->sw_cache = c;
    }
    for (int32_t i = 0; i < r->n_blocks; i++)
        segrt_device_free(r->block[i]);
    free(r->block);
    free(r->bytes);
    sg_sw_cache_free(r->cache);
    free(r->dm);
    pinned_destroy(r->pinned, r->ev_pinned);
    sg_copy_team_free(r->team);
    free(r->batch);
    streams_destroy(&r->st);
    sg_sw_grid_free(&r->g);
}

/* What the result is: its kernel, dtype and channel count. */
static void result_kind(dev_run *r)
{
    const sg_sw_options *o = r->o;
    sg_sw_activation act = sg_sw_effective_activation(o);
    r->out_ch = r->K;
    r->out_dtype = SEGRT_DTYPE_FLOAT32;
    if (o->output == SG_SW_OUTPUT_LABELS) {
        if (act == SG_SW_ACTIVATION_SIGMOID) {
            r->final = SGK_WIN_FINAL_THRESHOLD;
            r->out_dtype = SEGRT_DTYPE_UINT8;
        } else {
            r->final = SGK_WIN_FINAL_ARGMAX; /* softmax is monotonic: argmax needs none */
            r->out_ch = 1;
            r->out_dtype = r->K > 256 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
        }
    } else if (o->output == SG_SW_OUTPUT_LOGITS || act == SG_SW_ACTIVATION_NONE) {
        r->final = SGK_WIN_FINAL_VALUES;
    } else {
        r->final = act == SG_SW_ACTIVATION_SIGMOID ? SGK_WIN_FINAL_SIGMOID : SGK_WIN_FINAL_SOFTMAX;
    }
    r->out_esize = r->out_dtype == SEGRT_DTYPE_FLOAT32 ? 4 : r->out_dtype == SEGRT_DTYPE_UINT16 ? 2 : 1;
}

/* The device memory the contexts hold (weights, activations, workspace). */
static uint64_t context_bytes(const dev_run *r)
{
    uint64_t b = 0;
    for (int32_t m = 0; m < r->n_models; m++) {
        segrt_engine_info info;
        if (segrt_engine_get_info(r->models[m].engine, &info) == SEGRT_OK)
            b += info.weight_bytes + info.arena_bytes + info.workspace_bytes;
    }
    return b;
}

/* The most image rows any sw_batch consecutive windows of one image
 * read: batches never span two images here, and a pass's windows are a
 * run of consecutive ones. */
static int64_t batch_span(const dev_run *r)
{
    int64_t nw = r->g.n_windows, span = 0, start[SG_SW_MAX_DIMS];
    int64_t *s0 = malloc(sizeof(int64_t) * (size_t)nw);
    if (!s0)
        return r->g.size[0];
    for (int64_t w = 0; w < nw; w++) {
        sg_sw_window_start(&r->g, w, start);
        s0[w] = start[0];
    }
    for (int64_t w = 0; w < nw; w++) { /* starts do not decrease: the first and last bound the batch */
        int64_t last = w + r->B - 1 < nw ? w + r->B - 1 : nw - 1;
        int64_t rows = s0[last] + r->g.roi[0] - s0[w];
        span = rows > span ? rows : span;
    }
    free(s0);
    return span;
}

/* A host result of `bytes`, to be freed with free(). A large one sits on
 * 2 MiB boundaries and asks for huge pages: the copy out of the pinned
 * buffers takes its first-touch faults, and on the GPU machine 4 KiB
 * pages made that fault-bound (a 67 MB result: 6.5 ms for eight threads,
 * 4 ms with huge pages). */
static void *host_result_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < 2 * huge)
        return malloc(bytes ? bytes : 1);
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

/* Sizes the accumulators (ring and passes), the image ring and the result
 * staging against the memory budget, then allocates everything. */
static sg_status plan_memory(dev_run *r)
{
    const sg_sw_options *o = r->o;
    int64_t rows0 = r->g.padded[0], roi0 = r->g.roi[0];
    size_t f = sizeof(float);
    size_t win_in = (size_t)(r->B * r->C * r->roi_numel) * f, win_out = (size_t)(r->B * r->K * r->roi_numel) * f;
    uint64_t fixed = context_bytes(r) + (uint64_t)r->roi_numel * f + win_in + win_out;
    if (r->n_flips > 1)
        fixed += win_out;
    if (r->n_models > 1)
        fixed += win_out;
    for (int32_t m = 0; m < r->n_models; m++)
        for (size_t j = 1; j < r->dm[m].n; j++) {
            sg_tensor t = {r->dm[m].t[j].dtype, r->dm[m].t[j].rank, {0}, NULL};
            memcpy(t.dims, r->dm[m].t[j].dims, sizeof t.dims);
            fixed += sg_tensor_bytes(&t);
        }
    /* The image rows one batch reads, and room to upload the next ahead. */
    if (!r->d_image) {
        r->img_ring = batch_span(r) + roi0;
        if (r->img_ring > r->g.size[0])
            r->img_ring = r->g.size[0];
        fixed += (uint64_t)(r->C * r->img_ring * r->img_plane) * f;
    }
    size_t result_bytes = (size_t)(r->n_img * r->out_ch * r->image_numel) * r->out_esize;
    bool whole_result = r->out_memory == SEGRT_MEMORY_DEVICE || result_bytes <= SW_STAGE_WHOLE_BYTES;
    r->progressive = whole_result && r->out_memory == SEGRT_MEMORY_HOST;
    if (whole_result)
        fixed += result_bytes;
    uint64_t row_bytes = (uint64_t)(r->K + 1) * (uint64_t)r->pad_plane * f;
    uint64_t stage_row = (uint64_t)(r->out_ch * r->img_plane) * r->out_esize;
    r->ring_rows = o->whole ? rows0 : (roi0 < rows0 ? roi0 : rows0);
    r->pass_rows = rows0;
    if (o->max_memory) {
        uint64_t need = fixed + (uint64_t)r->ring_rows * (row_bytes + (whole_result ? 0 : stage_row));
        /* A budget the job cannot run in is a bad option, not a failure
         * of the run: INVALID_ARGUMENT, with the least that would do. */
        if (need > o->max_memory) {
            if (o->whole)
                return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                                "sliding windows: whole-image accumulators need %.1f MiB; the device-memory budget "
                                "is %.1f MiB",
                                need / 1048576.0, o->max_memory / 1048576.0);
            uint64_t per_row = row_bytes + (whole_result ? 0 : stage_row);
            uint64_t room = fixed < o->max_memory ? o->max_memory - fixed : 0;
            int64_t rows = (int64_t)(room / per_row);
            if (rows < 1)
                return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                                "sliding windows: a device-memory budget of %.1f MiB is less than one window "
                                "needs: %.1f MiB (the networks, the window buffers%s %.1f MiB, one row of "
                                "accumulators %.1f MiB)",
                                o->max_memory / 1048576.0, (fixed + per_row) / 1048576.0,
                                whole_result ? " and the result" : "", fixed / 1048576.0, per_row / 1048576.0);
            r->ring_rows = r->pass_rows = rows;
        }
    }
    r->stage_rows = whole_result ? 0 : (r->pass_rows < r->ring_rows ? r->pass_rows : r->ring_rows);
    if (r->stage_rows > r->g.size[0])
        r->stage_rows = r->g.size[0];

    SG_TRY(dev_alloc(r, (size_t)r->roi_numel * f, "the importance map", (void **)&r->d_w));
    const sg_sw_cache *c = r->cache;
    r->w_ready = r->reused && c->w_valid && c->w_dims == r->g.n_dims && c->w_blend == (int32_t)o->blend &&
                 c->w_sigma == o->sigma_scale &&
                 memcmp(c->w_roi, r->g.roi, sizeof(int64_t) * (size_t)r->g.n_dims) == 0;
    SG_TRY(dev_alloc(r, win_in, "the window batch", (void **)&r->d_in));
    SG_TRY(dev_alloc(r, win_out, "the predictions", (void **)&r->d_pred));
    r->d_model = r->d_pred;
    if (r->n_flips > 1)
        SG_TRY(dev_alloc(r, win_out, "the mirrored predictions", (void **)&r->d_model));
    r->d_out = r->d_model;
    if (r->n_models > 1)
        SG_TRY(dev_alloc(r, win_out, "the ensemble's predictions", (void **)&r->d_out));
    for (int32_t m = 0; m < r->n_models; m++)
        for (size_t j = 1; j < r->dm[m].n; j++) {
            sg_tensor t = {r->dm[m].t[j].dtype, r->dm[m].t[j].rank, {0}, NULL};
            memcpy(t.dims, r->dm[m].t[j].dims, sizeof t.dims);
            SG_TRY(dev_alloc(r, sg_tensor_bytes(&t), "a model's other outputs", &r->dm[m].extra[j]));
            r->dm[m].t[j].data = r->dm[m].extra[j];
            r->dm[m].t[j].memory = SEGRT_MEMORY_DEVICE;
            r->dm[m].t[j].device = r->device;
        }
    size_t acc_bytes = (size_t)(r->ring_rows * (int64_t)row_bytes);
    SG_TRY(dev_alloc(r, acc_bytes, "the accumulators", (void **)&r->d_acc));
    CUDA_TRY(cudaMemsetAsync(r->d_acc, 0, acc_bytes, r->st.s));
    if (whole_result && r->out_memory == SEGRT_MEMORY_DEVICE) {
        SG_TRY(dev_alloc_owned(r, result_bytes, "the result", &r->d_result));
    } else if (whole_result) {
        SG_TRY(dev_alloc(r, result_bytes, "the result", &r->d_result));
        r->result_listed = true;
    } else
        SG_TRY(dev_alloc(r, (size_t)(r->stage_rows * (int64_t)stage_row), "the result's staging", &r->d_stage));
    r->h_bytes = result_bytes;
    if (r->out_memory == SEGRT_MEMORY_HOST && !(r->h_result = host_result_alloc(result_bytes)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "sliding windows: no host memory for the %.1f MiB result",
                        result_bytes / 1048576.0);
    if (!r->d_image) {
        r->rows.image = -1;
        SG_TRY(dev_alloc(r, (size_t)(r->C * r->img_ring * r->img_plane) * f, "the image's rows",
                         (void **)&r->rows.ring));
    }
    /* A cached buffer this run has not taken is not held through it. */
    cache_drop_blocks(r->cache);
    /* Two pinned buffers: one fills on the host while the other is on its
     * way, for uploads of image rows and the download of a host result.
     * Small (8 MiB, or one row of the image): pinning is slow to allocate. */
    if (!r->d_image || r->out_memory == SEGRT_MEMORY_HOST) {
        r->pinned_bytes = SW_PINNED_BYTES;
        if ((size_t)r->img_plane * f > r->pinned_bytes)
            r->pinned_bytes = (size_t)r->img_plane * f;
        sg_sw_cache *k = r->cache;
        if (k && k->team) {
            r->team = k->team;
            k->team = NULL;
        } else {
            SG_TRY(sg_copy_team_new(0, &r->team));
        }
        if (k && k->pinned[0] && k->pinned[1] && k->pinned_bytes == r->pinned_bytes) {
            for (int i = 0; i < 2; i++) {
                r->pinned[i] = k->pinned[i];
                r->ev_pinned[i] = k->ev_pinned[i];
                k->pinned[i] = NULL;
                k->ev_pinned[i] = NULL;
            }
            return SEGRT_OK;
        }
        for (int i = 0; i < 2; i++) {
            CUDA_TRY(cudaMallocHost(&r->pinned[i], r->pinned_bytes));
            CUDA_TRY(cudaEventCreateWithFlags(&r->ev_pinned[i], cudaEventDisableTiming));
        }
    }
    return SEGRT_OK;
}

/* Host rows [a, b) of image n, every channel, into the ring through the
 * pinned buffers, on the copy stream, the host's side by the copy team
 * (an OpenMP team was slower than one thread here: its idle threads spin
 * beside the two that had a piece of an 8 MiB chunk). */
static sg_status upload_rows(dev_run *r, img_rows *sl, int64_t n, int64_t a, int64_t b)
{
    int64_t chunk = (int64_t)(r->pinned_bytes / sizeof(float)) / r->img_plane;
    for (int64_t c = 0; c < r->C; c++)
        for (int64_t row = a; row < b;) {
            int64_t at = row % r->img_ring;
            int64_t len = b - row;
            len = len < chunk ? len : chunk;
            len = len < r->img_ring - at ? len : r->img_ring - at; /* no wrap within one copy */
            int32_t k = r->pinned_next;
            r->pinned_next ^= 1;
            CUDA_TRY(cudaEventSynchronize(r->ev_pinned[k])); /* its last copy has left */
            size_t bytes = (size_t)(len * r->img_plane) * sizeof(float);
            sg_copy_team_memcpy(r->team, r->pinned[k],
                                r->h_image + (n * r->C + c) * r->image_numel + row * r->img_plane, bytes);
            CUDA_TRY(cudaMemcpyAsync(sl->ring + (c * r->img_ring + at) * r->img_plane, r->pinned[k], bytes,
                                     cudaMemcpyHostToDevice, r->st.up));
            CUDA_TRY(cudaEventRecord(r->ev_pinned[k], r->st.up));
            row += len;
        }
    return SEGRT_OK;
}

/* Image rows the window starting at padded row s0 reads: [*a, *b). */
static void window_rows(const dev_run *r, int64_t s0, int64_t *a, int64_t *b)
{
    if (r->o->pad != SG_SW_PAD_CONSTANT && r->g.padded[0] > r->g.size[0]) {
        *a = 0; /* reflected or replicated rows can come from anywhere */
        *b = r->g.size[0];
        return;
    }
    *a = s0 - r->g.pad_begin[0];
    *b = *a + r->g.roi[0];
    *a = *a < 0 ? 0 : *a;
    *b = *b > r->g.size[0] ? r->g.size[0] : *b;
}

/* Puts image n's rows [sl->hi, to) on their way into the ring. The rows
 * they replace are below the batch being gathered (no later window reads
 * them), and the copy stream waits for the gathers enqueued so far before
 * overwriting them. The next gather waits for the copy. */
static sg_status upload_to(dev_run *r, int64_t n, int64_t to)
{
    img_rows *sl = &r->rows;
    CUDA_TRY(cudaStreamWaitEvent(r->st.up, r->st.ev_gathered, 0));
    SG_TRY(upload_rows(r, sl, n, sl->hi, to));
    sl->hi = to;
    if (sl->hi - r->img_ring > sl->lo)
        sl->lo = sl->hi - r->img_ring;
    CUDA_TRY(cudaEventRecord(r->st.ev_uploaded, r->st.up));
    r->have_upload = true;
    return SEGRT_OK;
}

/* Makes image n's rows [a, b) resident in the ring: what a batch about to
 * be gathered needs and upload_ahead has not sent yet. Another image, or
 * a later pass going back before the ring's rows (or jumping past them),
 * starts the ring afresh at a. */
static sg_status ensure_rows(dev_run *r, int64_t n, int64_t a, int64_t b)
{
    img_rows *sl = &r->rows;
    if (sl->image != n || a < sl->lo || a > sl->hi) {
        sl->image = n;
        sl->lo = sl->hi = a;
    }
    r->release_row = a;
    return b <= sl->hi ? SEGRT_OK : upload_to(r, n, b);
}

/* After a batch's gathers: one pinned buffer's worth of the rows the next
 * windows will read (per channel), as far as the ring has slots whose rows
 * no later batch reads, so that uploads overlap the networks instead of
 * stalling the batch that first needs them. */
static sg_status upload_ahead(dev_run *r)
{
    img_rows *sl = &r->rows;
    if (r->d_image || sl->image < 0 || sl->hi >= r->g.size[0])
        return SEGRT_OK;
    int64_t chunk = (int64_t)(r->pinned_bytes / sizeof(float)) / r->img_plane;
    int64_t to = sl->hi + (chunk > 0 ? chunk : 1);
    if (to > r->release_row + r->img_ring)
        to = r->release_row + r->img_ring;
    if (to > r->g.size[0])
        to = r->g.size[0];
    return to > sl->hi ? upload_to(r, sl->image, to) : SEGRT_OK;
}

/* The rows every window of a batch (of one image) reads, made resident
 * before any of them is gathered. */
static sg_status ensure_batch_rows(dev_run *r, const int64_t *win, int64_t got)
{
    int64_t nw = r->g.n_windows, lo = INT64_MAX, hi = 0, start[SG_SW_MAX_DIMS];
    for (int64_t b = 0; b < got; b++) {
        int64_t a, e;
        sg_sw_window_start(&r->g, win[b] % nw, start);
        window_rows(r, start[0], &a, &e);
        lo = a < lo ? a : lo;
        hi = e > hi ? e : hi;
    }
    return ensure_rows(r, win[0] / nw, lo, hi);
}

/* The image rows of image n as the gather kernel addresses them. */
static sgk_win_rows image_rows(const dev_run *r, int64_t n)
{
    sgk_win_rows v;
    if (r->d_image) {
        v.data = (void *)(r->d_image + n * r->C * r->image_numel);
        v.channel_stride = r->image_numel;
        v.row0 = 0;
        v.ring = 0;
    } else {
        v.data = r->rows.ring;
        v.channel_stride = r->img_ring * r->img_plane;
        v.row0 = 0;
        v.ring = r->img_ring;
    }
    return v;
}

/* The batch's windows (global indices) into d_in, flipped by mask, in
 * launches of up to SGK_WIN_BATCH windows: run_b of them, the got given
 * and, past those, the last one repeated. */
static sg_status gather_batch(dev_run *r, const int64_t *win, int64_t got, int64_t run_b, uint32_t mask)
{
    int64_t nw = r->g.n_windows, nd = r->g.n_dims, starts[SGK_WIN_BATCH * SG_SW_MAX_DIMS];
    if (r->have_upload) {
        CUDA_TRY(cudaStreamWaitEvent(r->st.s, r->st.ev_uploaded, 0));
        r->have_upload = false;
    }
    sgk_win_rows src = image_rows(r, win[0] / nw); /* a batch never spans two images */
    for (int64_t first = 0; first < run_b; first += SGK_WIN_BATCH) {
        int64_t n = run_b - first < SGK_WIN_BATCH ? run_b - first : SGK_WIN_BATCH;
        for (int64_t i = 0; i < n; i++) {
            int64_t b = first + i < got ? first + i : got - 1; /* a short batch repeats its last window */
            sg_sw_window_start(&r->g, win[b] % nw, starts + i * nd);
        }
        SG_TRY(sgk_win_gather(r->st.s, &r->geom, starts, n, (int32_t)r->o->pad, r->o->pad_value, mask, &src, r->C,
                              r->d_in + first * r->C * r->roi_numel));
    }
    CUDA_TRY(cudaEventRecord(r->st.ev_gathered, r->st.s));
    return SEGRT_OK;
}

/* The networks' input: `batch` windows of the roi, on the device, in d_in. */
static segrt_tensor window_input(const dev_run *r, int64_t batch)
{
    segrt_tensor in;
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = r->g.n_dims + 2;
    in.dims[0] = batch;
    in.dims[1] = r->C;
    memcpy(in.dims + 2, r->g.roi, sizeof(int64_t) * (size_t)r->g.n_dims);
    in.data = r->d_in;
    in.memory = SEGRT_MEMORY_DEVICE;
    in.device = r->device;
    return in;
}

/* Whether a short batch of `got` windows runs at its own size: where
 * every model's engine was built for a range of batches that holds it
 * (the engine compiles a plan for it on its first run and keeps it; the
 * caller asked for the range), and every model has one output (the
 * prediction). Otherwise it repeats its last window up to the batch the
 * plan was built for. */
static bool runs_at_own_size(const dev_run *r, int64_t got)
{
    if (got >= r->B)
        return false;
    segrt_tensor in = window_input(r, got);
    for (int32_t m = 0; m < r->n_models; m++)
        if (r->dm[m].n != 1 || !sg_context_in_profile(r->models[m].ctx, 1, &in))
            return false;
    return true;
}

/* Every model and flip over the batch: the averaged prediction in d_out. */
static sg_status predict_batch(dev_run *r, const int64_t *win, int64_t got)
{
    int64_t run_b = runs_at_own_size(r, got) ? got : r->B;
    segrt_tensor in = window_input(r, run_b);
    int64_t rows = run_b * r->K;
    for (int32_t m = 0; m < r->n_models; m++) {
        dev_model *dm = &r->dm[m];
        dm->t[0].data = r->d_pred;
        dm->t[0].memory = SEGRT_MEMORY_DEVICE;
        dm->t[0].device = r->device;
        dm->t[0].dims[0] = run_b; /* the prediction: [windows, K, roi...] */
        for (int32_t f = 0; f < r->n_flips; f++) {
            SG_TRY(gather_batch(r, win, got, run_b, r->flips[f]));
            /* The run reads d_in after the gather and writes d_pred after
             * the last batch's blending (both before ev_gathered on s); the
             * next gather and the blending wait for the run. */
            r->enqueued = true;
            SG_TRY(sg_context_enqueue(r->models[m].ctx, 1, &in, dm->n, dm->t, (sg_backend_event *)r->st.ev_gathered,
                                      (sg_backend_event *)r->st.ev_net));
            CUDA_TRY(cudaStreamWaitEvent(r->st.s, r->st.ev_net, 0));
            r->runs += got;
            if (r->n_flips > 1)
                SG_TRY(sgk_win_combine(r->st.s, &r->geom, r->flips[f], f > 0,
                                       f == r->n_flips - 1 ? (float)r->n_flips : 1.0f, r->d_pred, r->d_model,
                                       rows));
        }
        if (r->n_models > 1)
            SG_TRY(sgk_win_combine(r->st.s, &r->geom, 0, m > 0, m == r->n_models - 1 ? (float)r->n_models : 1.0f,
                                   r->d_model, r->d_out, rows));
    }
    return SEGRT_OK;
}

/* Finishes padded rows [a, b) of image n: the kernel, then the copy down
 * when the result is staged by slabs. */
static sg_status finish_rows(dev_run *r, int64_t n, int64_t a, int64_t b)
{
    int64_t pb = r->g.pad_begin[0];
    sgk_win_rows acc = {r->d_acc, r->ring_rows * r->pad_plane, 0, r->ring_rows};
    if (r->d_result) {
        sgk_win_rows dst = {(uint8_t *)r->d_result + (size_t)(n * r->out_ch * r->image_numel) * r->out_esize,
                            r->image_numel, 0, 0};
        SG_TRY(sgk_win_finalize(r->st.s, &r->geom, r->final, r->o->threshold, r->K, a, b, &acc, r->out_dtype, &dst));
    } else {
        /* Image rows [lo, hi) in chunks of the staging's rows. */
        int64_t lo = a - pb < 0 ? 0 : a - pb, hi = b - pb > r->g.size[0] ? r->g.size[0] : b - pb;
        for (int64_t x = lo; x < hi; x += r->stage_rows) {
            int64_t y = x + r->stage_rows < hi ? x + r->stage_rows : hi;
            sgk_win_rows dst = {r->d_stage, r->stage_rows * r->img_plane, x, 0};
            SG_TRY(sgk_win_finalize(r->st.s, &r->geom, r->final, r->o->threshold, r->K, x + pb, y + pb, &acc,
                                    r->out_dtype, &dst));
            size_t width = (size_t)((y - x) * r->img_plane) * r->out_esize;
            uint8_t *h = (uint8_t *)r->h_result + (size_t)(n * r->out_ch * r->image_numel + x * r->img_plane) *
                                                      r->out_esize;
            CUDA_TRY(cudaMemcpy2DAsync(h, (size_t)r->image_numel * r->out_esize, r->d_stage,
                                       (size_t)(r->stage_rows * r->img_plane) * r->out_esize, width,
                                       (size_t)r->out_ch, cudaMemcpyDeviceToHost, r->st.s));
        }
    }
    /* The ring's rows [a, b) are free again: zero them for the rows that
     * come next (at most two runs, where the ring wraps). */
    for (int64_t x = a; x < b;) {
        int64_t at = x % r->ring_rows, len = b - x < r->ring_rows - at ? b - x : r->ring_rows - at;
        CUDA_TRY(cudaMemset2DAsync(r->d_acc + at * r->pad_plane, (size_t)(r->ring_rows * r->pad_plane) * sizeof(float),
                                   0, (size_t)(len * r->pad_plane) * sizeof(float), (size_t)(r->K + 1), r->st.s));
        x += len;
    }
    return SEGRT_OK;
}

/* While the GPU has not reached ev, the host makes the result's pages
 * resident ahead of the downloads, 2 MiB at a time, keeping what they
 * hold (MADV_POPULATE_WRITE): their first-touch faults (zeroing huge
 * pages) otherwise fall on the copies out of the pinned buffers, and the
 * copies of the last rows come after the GPU has finished. A kernel
 * without the advice refuses it, and the pages fault as before. */
static void populate_while_busy(dev_run *r, cudaEvent_t ev)
{
#ifdef MADV_POPULATE_WRITE
    const size_t step = (size_t)2 << 20;
    if (!r->h_result || (uintptr_t)r->h_result % step) /* host_result_alloc aligns large results only */
        return;
    cudaError_t q = cudaSuccess;
    while (r->h_populated < r->h_bytes && (q = cudaEventQuery(ev)) == cudaErrorNotReady) {
        size_t len = r->h_bytes - r->h_populated < step ? r->h_bytes - r->h_populated : step;
        if (madvise((uint8_t *)r->h_result + r->h_populated, len, MADV_POPULATE_WRITE) != 0) {
            r->h_populated = r->h_bytes;
            break;
        }
        r->h_populated += len;
    }
    if (q == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady)
        (void)cudaGetLastError(); /* not an error: the GPU was busy */
#else
    (void)r;
    (void)ev;
#endif
}

/* Bytes [at, at + len) of the device result into the host result, on
 * the download stream through the pinned buffers (the two alternate, so
 * one piece's DMA overlaps the host's copy of the one before; the host's
 * copy also takes the result's first-touch page faults). The bytes must
 * be final: the stream waits for nothing. */
static sg_status download_bytes(dev_run *r, size_t at, size_t len)
{
    size_t piece = r->pinned_bytes, n = (len + piece - 1) / piece;
    int32_t k0 = r->pinned_next;
    for (size_t i = 0; i <= n; i++) {
        int32_t k = k0 ^ (int32_t)(i & 1);
        if (i < n) {
            size_t off = i * piece, l = len - off < piece ? len - off : piece;
            CUDA_TRY(cudaEventSynchronize(r->ev_pinned[k])); /* an upload's last copy out of it has left */
            CUDA_TRY(cudaMemcpyAsync(r->pinned[k], (const uint8_t *)r->d_result + at + off, l,
                                     cudaMemcpyDeviceToHost, r->st.down));
            CUDA_TRY(cudaEventRecord(r->ev_pinned[k], r->st.down));
        }
        if (i > 0) {
            size_t off = (i - 1) * piece, l = len - off < piece ? len - off : piece;
            CUDA_TRY(cudaEventSynchronize(r->ev_pinned[k ^ 1]));
            sg_copy_team_memcpy(r->team, (uint8_t *)r->h_result + at + off, r->pinned[k ^ 1], l);
        }
    }
    r->pinned_next = k0 ^ (int32_t)(n & 1);
    return SEGRT_OK;
}

/* Rows [a, b) of image n (every channel of the result) down. */
static sg_status download_rows(dev_run *r, int64_t n, int64_t a, int64_t b)
{
    if (b <= a)
        return SEGRT_OK;
    size_t len = (size_t)((b - a) * r->img_plane) * r->out_esize;
    for (int64_t c = 0; c < r->out_ch; c++)
        SG_TRY(download_bytes(r, (size_t)((n * r->out_ch + c) * r->image_numel + a * r->img_plane) * r->out_esize,
                              len));
    return SEGRT_OK;
}

/* Down everything before image n's row `row` that is not down yet: it is
 * final on the device (images finish in order, rows in order). */
static sg_status download_through(dev_run *r, int64_t n, int64_t row)
{
    double t0 = sw_now();
    for (; r->dl_image < n; r->dl_image++, r->dl_row = 0)
        SG_TRY(download_rows(r, r->dl_image, r->dl_row, r->g.size[0]));
    if (r->dl_image == n && row > r->dl_row) {
        SG_TRY(download_rows(r, n, r->dl_row, row));
        r->dl_row = row;
    }
    r->t_download += sw_now() - t0;
    return SEGRT_OK;
}

/* The windows of one image touching padded rows [pa, pb): a run
 * [*w_lo, *w_hi) of MONAI's order, since axis 0 is the slowest. */
static void pass_windows(const dev_run *r, int64_t pa, int64_t pb, int64_t *w_lo, int64_t *w_hi)
{
    int64_t start[SG_SW_MAX_DIMS];
    *w_lo = *w_hi = 0;
    bool any = false;
    for (int64_t w = 0; w < r->g.n_windows; w++) {
        sg_sw_window_start(&r->g, w, start);
        if (start[0] < pb && start[0] + r->g.roi[0] > pa) {
            if (!any)
                *w_lo = w;
            any = true;
            *w_hi = w + 1;
        }
    }
}

/* Image n over padded rows [pa, pb): its windows in batches, each
 * accumulated in order, rows finished as soon as no later window touches
 * them. Batches never span two images. */
static sg_status run_image_pass(dev_run *r, int64_t n, int64_t pa, int64_t pb)
{
    /* The starts of a run of windows, and of the window after it. */
    int64_t w_lo, w_hi, starts[(SGK_WIN_BATCH + 1) * SG_SW_MAX_DIMS], done = pa, nw = r->g.n_windows;
    int64_t win[1024];
    pass_windows(r, pa, pb, &w_lo, &w_hi);
    sgk_win_rows acc = {r->d_acc, r->ring_rows * r->pad_plane, 0, r->ring_rows};
    /* Where the short batch runs at its own size, it goes first: from a
     * host image, the network then starts on the rows its few windows read
     * while the rest are uploaded (a full first batch of the 2-D job's
     * 5 × 5 windows reads 81 % of the image's rows, 9 windows 44 %). The
     * windows keep their order, and so does the blending. */
    int64_t lead = (w_hi - w_lo) % r->B, got;
    if (lead == 0 || !runs_at_own_size(r, lead))
        lead = r->B;
    for (int64_t first = w_lo; first < w_hi; first += got) {
        got = first == w_lo ? lead : r->B;
        got = w_hi - first < got ? w_hi - first : got;
        /* At most SW_IN_FLIGHT batches ahead of the GPU. */
        cudaEvent_t slot = r->st.ev_batch[r->batches % SW_IN_FLIGHT];
        int32_t si = (int32_t)(r->batches % SW_IN_FLIGHT);
        if (r->batches >= SW_IN_FLIGHT) {
            populate_while_busy(r, slot);
            double t0 = sw_now();
            CUDA_TRY(cudaEventSynchronize(slot));
            r->t_wait += sw_now() - t0;
            if (r->progressive)
                SG_TRY(download_through(r, r->fin_image[si], r->fin_row[si]));
        }
        int64_t *batch = r->B <= 1024 ? win : r->batch;
        for (int64_t b = 0; b < got; b++)
            batch[b] = n * nw + first + b;
        if (!r->d_image) {
            double t0 = sw_now();
            SG_TRY(ensure_batch_rows(r, batch, got));
            r->t_upload += sw_now() - t0;
        }
        SG_TRY(predict_batch(r, batch, got));
        if (!r->d_image) {
            double t0 = sw_now();
            SG_TRY(upload_ahead(r));
            r->t_upload += sw_now() - t0;
        }
        /* Windows accumulate in runs between the rows they finish: one
         * launch a run (of up to SGK_WIN_BATCH), every window of a run
         * starting at the same row. */
        int64_t run0 = 0, nd = r->g.n_dims;
        for (int64_t b = 0; b <= got; b++) {
            int64_t ready = pb;
            if (b < got) {
                int64_t *st = starts + (b - run0) * nd;
                sg_sw_window_start(&r->g, first + b, st);
                ready = st[0] > pa ? st[0] : pa; /* rows before it: no later window touches them */
                ready = ready < pb ? ready : pb;
            }
            if (b > run0 && (b == got || ready > done || b - run0 == SGK_WIN_BATCH)) {
                SG_TRY(sgk_win_accumulate(r->st.s, &r->geom, starts, b - run0, r->d_out + run0 * r->K * r->roi_numel,
                                          r->d_w, r->K, pa, pb, &acc));
                if (b < got)
                    memcpy(starts, starts + (b - run0) * nd, sizeof(int64_t) * (size_t)nd);
                run0 = b;
            }
            if (b < got && ready > done) {
                SG_TRY(finish_rows(r, n, done, ready));
                done = ready;
            }
        }
        /* Padded rows before `done` are final once the slot's event is. */
        int64_t fin = done - r->g.pad_begin[0];
        r->fin_image[si] = n;
        r->fin_row[si] = fin < 0 ? 0 : fin > r->g.size[0] ? r->g.size[0] : fin;
        CUDA_TRY(cudaEventRecord(slot, r->st.s));
        r->batches++;
        if (r->o->progress)
            r->o->progress(r->o->progress_user, r->runs / (r->n_models * r->n_flips),
                           r->total_runs / (r->n_models * r->n_flips));
    }
    return finish_rows(r, n, done, pb);
}

/* The streams and events: the cache's, or new ones. Streams and events
 * are all or none in a cache (cache_from_run moves them together). */
static sg_status take_streams(dev_run *r)
{
    sg_sw_cache *c = r->cache;
    if (c && c->st.s) {
        r->st = c->st;
        memset(&c->st, 0, sizeof c->st);
        return SEGRT_OK;
    }
    CUDA_TRY(cudaStreamCreateWithFlags(&r->st.s, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&r->st.up, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&r->st.down, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&r->st.ev_gathered, cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&r->st.ev_uploaded, cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&r->st.ev_net, cudaEventDisableTiming));
    for (int i = 0; i < SW_IN_FLIGHT; i++)
        CUDA_TRY(cudaEventCreateWithFlags(&r->st.ev_batch[i], cudaEventDisableTiming));
    return SEGRT_OK;
}

static sg_status prepare(dev_run *r, const segrt_tensor *image)
{
    const sg_sw_options *o = r->o;
    int32_t nd = o->n_dims;
    SG_TRY(sg_sw_grid_make(nd, image->dims + 2, o->roi, o->overlap, o->grid, &r->g));
    if (o->tta_axes >> nd)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "mirroring asks for a spatial axis beyond the image's %d", nd);
    sg_sw_flips(o->tta_axes, nd, r->flips, &r->n_flips);
    r->B = o->sw_batch;
    if (r->B > 1024 && !(r->batch = malloc(sizeof(int64_t) * (size_t)r->B)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    r->C = image->dims[1];
    r->n_img = image->dims[0];
    r->roi_numel = r->img_plane = r->pad_plane = 1;
    r->image_numel = image->dims[2];
    memset(&r->geom, 0, sizeof r->geom);
    r->geom.n_dims = nd;
    for (int32_t d = 0; d < nd; d++) {
        r->roi_numel *= r->g.roi[d];
        if (d > 0) {
            r->img_plane *= r->g.size[d];
            r->pad_plane *= r->g.padded[d];
            r->image_numel *= r->g.size[d];
        }
        r->geom.roi[d] = r->g.roi[d];
        r->geom.size[d] = r->g.size[d];
        r->geom.padded[d] = r->g.padded[d];
        r->geom.pad_begin[d] = r->g.pad_begin[d];
    }
    segrt_tensor in;
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = nd + 2;
    in.dims[0] = r->B;
    in.dims[1] = r->C;
    memcpy(in.dims + 2, r->g.roi, sizeof(int64_t) * (size_t)nd);
    if (!(r->dm = calloc((size_t)r->n_models, sizeof *r->dm)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t m = 0; m < r->n_models; m++)
        SG_TRY(sg_sw_model_outputs(r->models, m, o, r->g.roi, &in, &r->dm[m].n, r->dm[m].t, &r->K));
    SG_TRY(sg_sw_check_buffers(o, &r->g, r->n_img, r->C, r->K));
    result_kind(r);
    CUDA_TRY(cudaSetDevice(r->device));
    SG_TRY(take_streams(r));
    SG_TRY(plan_memory(r));
    if (r->w_ready)
        return SEGRT_OK;
    float *w = malloc(sizeof(float) * (size_t)r->roi_numel);
    if (!w)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status s = sg_sw_importance(nd, r->g.roi, o->blend, o->sigma_scale, w);
    cudaError_t ce = s == SEGRT_OK ? cudaMemcpy(r->d_w, w, sizeof(float) * (size_t)r->roi_numel,
                                                 cudaMemcpyHostToDevice)
                                   : cudaSuccess;
    free(w);
    SG_TRY(s);
    CUDA_TRY(ce);
    return SEGRT_OK;
}

/* The host path's checks, then where the image lives. */
static sg_status check_image(const sg_sw_options *o, const segrt_tensor *image, int32_t device)
{
    if (image->rank < 0 || image->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has rank %d", image->rank);
    SG_TRY(sg_sw_check_image(o, image->rank, image->dtype, image->dims));
    if (image->memory == SEGRT_MEMORY_DEVICE && image->device != device)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image is on CUDA device %d; the models run on %d",
                        image->device, device);
    if (!image->data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has no data");
    return SEGRT_OK;
}

static sg_status run_all(dev_run *r)
{
    double t_start = sw_now();
    int64_t rows0 = r->g.padded[0];
    r->total_runs = 0;
    for (int64_t pa = 0; pa < rows0; pa += r->pass_rows) {
        int64_t pb = pa + r->pass_rows < rows0 ? pa + r->pass_rows : rows0, w_lo, w_hi;
        pass_windows(r, pa, pb, &w_lo, &w_hi);
        r->total_runs += r->n_img * (w_hi - w_lo) * r->n_models * r->n_flips;
    }
    /* Image by image, pass by pass: an image's rows are finished before
     * the next image starts, so one ring of accumulators serves all. */
    for (int64_t n = 0; n < r->n_img; n++)
        for (int64_t pa = 0; pa < rows0; pa += r->pass_rows) {
            int64_t pb = pa + r->pass_rows < rows0 ? pa + r->pass_rows : rows0;
            SG_TRY(run_image_pass(r, n, pa, pb));
        }
    double t0 = sw_now();
    CUDA_TRY(cudaStreamSynchronize(r->st.s));
    r->t_wait += sw_now() - t0;
    if (r->progressive)
        SG_TRY(download_through(r, r->n_img, 0));
    /* Every run is done (the blending waited for each); what remains is
     * an error a network's kernel reported. */
    for (int32_t m = 0; m < r->n_models; m++)
        SG_TRY(sg_context_finish(r->models[m].ctx));
    r->enqueued = false;
    r->t_total = sw_now() - t_start;
    return SEGRT_OK;
}

sg_status sg_sw_device_run(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                           const segrt_tensor *image, segrt_memory_kind out_memory, segrt_tensor *out,
                           sg_sw_stats *stats)
{
    memset(out, 0, sizeof *out);
    if (!sg_sw_device_capable(models, n_models))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "sliding windows on the device need CUDA engines on one device without CPU fallback");
    dev_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.models = models;
    r.n_models = n_models;
    r.out_memory = out_memory;
    segrt_engine_info info;
    SG_TRY(segrt_engine_get_info(models[0].engine, &info));
    r.device = info.device_index;
    SG_TRY(check_image(o, image, r.device));
    /* The first context's buffers from its last run (contexts are one
     * thread's at a time, so nothing else takes them meanwhile). */
    r.cache = models[0].ctx->sw_cache;
    models[0].ctx->sw_cache = NULL;
    if (r.cache && r.cache->device != r.device) {
        sg_sw_cache_free(r.cache);
        r.cache = NULL;
    }
    if (image->memory == SEGRT_MEMORY_DEVICE)
        r.d_image = image->data;
    else
        r.h_image = image->data;
    double t0 = sw_now();
    sg_status s = prepare(&r, image);
    r.t_setup = sw_now() - t0;
    if (s == SEGRT_OK)
        s = run_all(&r);
    if (s == SEGRT_OK) {
        out->dtype = r.out_dtype;
        out->rank = image->rank;
        out->dims[0] = r.n_img;
        out->dims[1] = r.out_ch;
        memcpy(out->dims + 2, image->dims + 2, sizeof(int64_t) * (size_t)o->n_dims);
        out->memory = out_memory;
        out->device = out_memory == SEGRT_MEMORY_DEVICE ? r.device : 0;
        if (out_memory == SEGRT_MEMORY_DEVICE) {
            out->data = r.d_result;
            r.d_result = NULL;
        } else {
            out->data = r.h_result;
            r.h_result = NULL;
        }
        if (stats) {
            memset(stats, 0, sizeof *stats);
            stats->windows = r.n_img * r.g.n_windows;
            stats->runs = r.runs;
            stats->passes = (int32_t)((r.g.padded[0] + r.pass_rows - 1) / r.pass_rows);
            stats->slab_rows = r.ring_rows;
            stats->sw_batch = (int32_t)r.B;
            stats->pipeline_bytes = r.pipeline_bytes;
            stats->context_bytes = context_bytes(&r);
            stats->seconds_setup = r.t_setup;
            stats->seconds_run = r.t_total;
            stats->seconds_uploading = r.t_upload;
            stats->seconds_waiting = r.t_wait;
            stats->seconds_downloading = r.t_download;
        }
    }
    free(r.h_result);
    dev_run_free(&r, s == SEGRT_OK);
    if (!r.result_listed)
        segrt_device_free(r.d_result); /* a device result the run failed to hand over */
    return s;
}
