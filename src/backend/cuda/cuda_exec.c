/* Executors: the device half of a context. One stream, one cuDNN and one
 * cuBLASLt handle, the activation arena, scratch and workspace, a device
 * error word, pinned staging for the caller's host tensors, and each
 * plan's per-context step state (cuDNN execution plans), all made before
 * the first run so that a run only enqueues work. */
#include "backend/cuda/cuda_internal.h"
#include "core/sort.h"

#include <stdlib.h>
#include <string.h>

#define EXEC_MAX_IO 64
/* What a captured CUDA graph depends on: the arena, scratch and workspace
 * and every input and output pointer. */
#define GRAPH_KEY_MAX (3 + 2 * EXEC_MAX_IO)

typedef struct graph_key {
    int32_t n;
    void *ptr[GRAPH_KEY_MAX];
} graph_key;

typedef struct exec_plan {
    const sg_cuda_plan *plan;
    void **state;          /* per step, from ctx_init */
    cudaEvent_t *events;   /* 2 per step while profiling */
    double *step_ms;
    int64_t runs;
    /* The plan's steps captured as one CUDA graph for the pointers in
     * graph_for, replayed while they stay the same (one launch instead of
     * one per kernel). Captured on the second run in a row with the same
     * pointers, so callers whose buffers change every call never pay for
     * a capture. */
    cudaGraphExec_t graph;
    graph_key graph_for, last;
    bool no_graph;         /* capture failed once: run step by step */
} exec_plan;

struct sg_cuda_exec {
    int32_t device;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasLtHandle_t lt;
    void *arena, *scratch, *workspace;
    size_t arena_bytes, scratch_bytes, workspace_bytes;
    int *err;              /* device */
    int *err_host;         /* pinned */
    void *host_scratch;    /* pinned, for CPU fallback steps */
    size_t host_scratch_bytes;
    /* The caller's host tensors pass through pinned staging and a device
     * buffer per input and output. */
    void *pinned;
    size_t pinned_bytes;
    void **io_dev;
    size_t *io_bytes;      /* capacity of each (inputs first, then outputs) */
    int32_t n_io;
    exec_plan *plans;
    int32_t n_plans, cap_plans;
    void **ptr;
    int32_t cap_ptr;
    cudaEvent_t waited; /* sg_cuda_exec_wait_stream's, made at its first call */
    bool profiling;
};

static size_t tensor_data_bytes(const cuda_tensor *t)
{
    size_t n = segrt_dtype_size(t->dtype);
    for (int32_t i = 0; i < t->rank; i++)
        n *= (size_t)t->dims[i];
    return n;
}

/* Replaces a device buffer with a larger one (contents are not kept). */
static sg_status grow_device(void **buf, size_t *have, size_t need, const char *what, int32_t device)
{
    if (need <= *have && *buf)
        return SEGRT_OK;
    cudaFree(*buf);
    *buf = NULL;
    *have = 0;
    cudaError_t ce = cudaMalloc(buf, cuda_padded_bytes(need));
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return sg_error(ce == cudaErrorMemoryAllocation ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_ERROR_DEVICE,
                        "cannot allocate %.1f MiB of %s on CUDA device %d (%.1f MiB free of %.1f MiB): %s",
                        need / 1048576.0, what, device, free_b / 1048576.0, total_b / 1048576.0,
                        cudaGetErrorString(ce));
    }
    *have = need;
    return SEGRT_OK;
}

static sg_status grow_pinned(void **buf, size_t *have, size_t need)
{
    if (need <= *have && *buf)
        return SEGRT_OK;
    cudaFreeHost(*buf);
    *buf = NULL;
    *have = 0;
    CUDA_TRY(cudaMallocHost(buf, need ? need : 256));
    *have = need;
    return SEGRT_OK;
}

/* Device and pinned staging for the host tensors among p's inputs and
 * outputs, grown on the first run that needs it. */
static sg_status fit_staging(sg_cuda_exec *e, const sg_cuda_plan *p, const segrt_tensor *inputs,
                             const segrt_tensor *outputs)
{
    size_t pinned = 0;
    for (int32_t i = 0; i < p->g->n_inputs + p->g->n_outputs; i++) {
        bool host = i < p->g->n_inputs ? inputs[i].memory != SEGRT_MEMORY_DEVICE
                                       : outputs[i - p->g->n_inputs].memory != SEGRT_MEMORY_DEVICE;
        if (!host)
            continue;
        int32_t t = i < p->g->n_inputs ? p->inputs[i] : p->outputs[i - p->g->n_inputs];
        size_t bytes = p->tensors[t].bytes;
        SG_TRY(grow_device(&e->io_dev[i], &e->io_bytes[i], bytes, "input/output buffers", e->device));
        pinned += bytes;
    }
    if (pinned > e->pinned_bytes)
        SG_TRY(grow_pinned(&e->pinned, &e->pinned_bytes, pinned));
    return SEGRT_OK;
}

/* Makes every buffer large enough for plan p. */
static sg_status fit_plan(sg_cuda_exec *e, const sg_cuda_plan *p)
{
    SG_TRY(grow_device(&e->arena, &e->arena_bytes, p->arena_bytes, "activations", e->device));
    SG_TRY(grow_device(&e->scratch, &e->scratch_bytes, p->scratch_bytes, "kernel scratch", e->device));
    SG_TRY(grow_device(&e->workspace, &e->workspace_bytes, p->workspace_bytes, "cuDNN/cuBLASLt workspace",
                       e->device));
    if (p->host_scratch_bytes)
        SG_TRY(grow_pinned(&e->host_scratch, &e->host_scratch_bytes, p->host_scratch_bytes));
    int32_t n_io = p->g->n_inputs + p->g->n_outputs;
    if (n_io > e->n_io) {
        void **d = sg_realloc(e->io_dev, sizeof *d * (size_t)n_io);
        if (!d)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        e->io_dev = d;
        size_t *b = sg_realloc(e->io_bytes, sizeof *b * (size_t)n_io);
        if (!b)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        e->io_bytes = b;
        for (int32_t i = e->n_io; i < n_io; i++) {
            e->io_dev[i] = NULL;
            e->io_bytes[i] = 0;
        }
        e->n_io = n_io;
    }
    /* Staging for host tensors is made by the first run that passes one
     * (fit_staging): a caller that passes device pointers, such as the
     * sliding-window pipeline with a 100-class output, never pays for it. */
    if (p->n_tensors > e->cap_ptr) {
        void **np = sg_realloc(e->ptr, sizeof *np * (size_t)p->n_tensors);
        if (!np)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        e->ptr = np;
        e->cap_ptr = p->n_tensors;
    }
    return SEGRT_OK;
}

static void plan_state_free(exec_plan *ep)
{
    const sg_cuda_plan *p = ep->plan;
    if (ep->state)
        for (int32_t s = 0; s < p->n_steps; s++)
            if (ep->state[s] && p->steps[s].ctx_free)
                p->steps[s].ctx_free(ep->state[s]);
    if (ep->events)
        for (int32_t i = 0; i < 2 * p->n_steps; i++)
            if (ep->events[i])
                cudaEventDestroy(ep->events[i]);
    if (ep->graph)
        cudaGraphExecDestroy(ep->graph);
    free(ep->state);
    free(ep->events);
    free(ep->step_ms);
}

static sg_status profile_init(sg_cuda_exec *e, exec_plan *ep)
{
    if (ep->events || !e->profiling)
        return SEGRT_OK;
    int32_t n = ep->plan->n_steps;
    ep->events = sg_calloc((size_t)(2 * n + 1), sizeof *ep->events);
    ep->step_ms = sg_calloc((size_t)(n + 1), sizeof *ep->step_ms);
    if (!ep->events || !ep->step_ms)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t i = 0; i < 2 * n; i++)
        CUDA_TRY(cudaEventCreate(&ep->events[i]));
    return SEGRT_OK;
}

/* The context's state for plan p, made on first use. */
static sg_status attach(sg_cuda_exec *e, const sg_cuda_plan *p, exec_plan **out)
{
    for (int32_t i = 0; i < e->n_plans; i++)
        if (e->plans[i].plan == p) {
            *out = &e->plans[i];
            return SEGRT_OK;
        }
    /* Growing the buffers frees ones that enqueued runs may still use. */
    CUDA_TRY(cudaStreamSynchronize(e->stream));
    SG_TRY(fit_plan(e, p));
    SG_TRY(sg_grow((void **)&e->plans, &e->cap_plans, e->n_plans + 1, sizeof *e->plans));
    exec_plan *ep = &e->plans[e->n_plans];
    memset(ep, 0, sizeof *ep);
    ep->plan = p;
    ep->state = sg_calloc((size_t)(p->n_steps + 1), sizeof *ep->state);
    if (!ep->state)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    e->n_plans++;
    for (int32_t s = 0; s < p->n_steps; s++)
        if (p->steps[s].ctx_init) {
            sg_status st = p->steps[s].ctx_init(&p->steps[s], e->cudnn, e->lt, &ep->state[s]);
            if (st != SEGRT_OK)
                return sg_error_prefix(st, "step `%s` (%s): ", p->steps[s].name, p->steps[s].impl);
        }
    SG_TRY(profile_init(e, ep));
    *out = ep;
    return SEGRT_OK;
}

sg_status sg_cuda_exec_create(int32_t device, const sg_cuda_plan *const *plans, int32_t n_plans,
                              sg_cuda_exec **out)
{
    sg_cuda_exec *e = sg_calloc(1, sizeof *e);
    if (!e)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    e->device = device;
    int prev = 0;
    cudaGetDevice(&prev);
    sg_status s = SEGRT_OK;
#define EXEC_TRY(x)             \
    do {                        \
        if (s == SEGRT_OK)      \
            s = (x);            \
    } while (0)
    EXEC_TRY(cudaSetDevice(device) == cudaSuccess
                 ? SEGRT_OK
                 : sg_error(SEGRT_ERROR_DEVICE, "cannot use CUDA device %d: %s", device,
                            cudaGetErrorString(cudaGetLastError())));
    if (s == SEGRT_OK) {
        cudaError_t ce = cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking);
        if (ce != cudaSuccess)
            s = cuda_error(ce, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    if (s == SEGRT_OK) {
        cudnnStatus_t cs = cudnnCreate(&e->cudnn);
        if (cs == CUDNN_STATUS_SUCCESS)
            cs = cudnnSetStream(e->cudnn, e->stream);
        if (cs != CUDNN_STATUS_SUCCESS)
            s = cudnn_error(cs, "cudnnCreate", __FILE__, __LINE__);
    }
    if (s == SEGRT_OK) {
        cublasStatus_t bs = cublasLtCreate(&e->lt);
        if (bs != CUBLAS_STATUS_SUCCESS)
            s = cublas_error(bs, "cublasLtCreate", __FILE__, __LINE__);
    }
    if (s == SEGRT_OK) {
        cudaError_t ce = cudaMalloc((void **)&e->err, sizeof(int));
        if (ce == cudaSuccess)
            ce = cudaMemset(e->err, 0, sizeof(int));
        if (ce == cudaSuccess)
            ce = cudaMallocHost((void **)&e->err_host, sizeof(int));
        if (ce != cudaSuccess)
            s = cuda_error(ce, "cudaMalloc(error word)", __FILE__, __LINE__);
    }
    /* Size for every plan first, then make their states, so buffers are
     * allocated once at their largest. */
    for (int32_t i = 0; i < n_plans && s == SEGRT_OK; i++)
        s = fit_plan(e, plans[i]);
    for (int32_t i = 0; i < n_plans && s == SEGRT_OK; i++) {
        exec_plan *ep;
        s = attach(e, plans[i], &ep);
    }
#undef EXEC_TRY
    cudaSetDevice(prev);
    if (s != SEGRT_OK) {
        sg_cuda_exec_free(e);
        return s;
    }
    *out = e;
    return SEGRT_OK;
}

void sg_cuda_exec_free(sg_cuda_exec *e)
{
    if (!e)
        return;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(e->device);
    if (e->stream)
        cudaStreamSynchronize(e->stream);
    for (int32_t i = 0; i < e->n_plans; i++)
        plan_state_free(&e->plans[i]);
    free(e->plans);
    for (int32_t i = 0; i < e->n_io; i++)
        cudaFree(e->io_dev[i]);
    free(e->io_dev);
    free(e->io_bytes);
    cudaFree(e->arena);
    cudaFree(e->scratch);
    cudaFree(e->workspace);
    cudaFree(e->err);
    cudaFreeHost(e->err_host);
    cudaFreeHost(e->host_scratch);
    cudaFreeHost(e->pinned);
    if (e->lt)
        cublasLtDestroy(e->lt);
    if (e->cudnn)
        cudnnDestroy(e->cudnn);
    if (e->waited)
        cudaEventDestroy(e->waited);
    if (e->stream)
        cudaStreamDestroy(e->stream);
    free(e->ptr);
    cudaSetDevice(prev);
    free(e);
}

/* A caller's device pointer must be memory of this executor's device. */
static sg_status check_device_ptr(const sg_cuda_exec *e, const segrt_tensor *t, const char *what, int32_t i)
{
    struct cudaPointerAttributes a;
    cudaError_t ce = cudaPointerGetAttributes(&a, t->data);
    if (ce != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
        (void)cudaGetLastError();
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s %d is marked as device memory but is not CUDA device memory",
                        what, i);
    }
    if (a.device != e->device)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s %d is on CUDA device %d; the engine runs on device %d", what,
                        i, a.device, e->device);
    return SEGRT_OK;
}

static void resolve_pointers(sg_cuda_exec *e, const sg_cuda_plan *p, void *const *in_ptr, void *const *out_ptr)
{
    for (int32_t t = 0; t < p->n_tensors; t++) {
        const cuda_tensor *ct = &p->tensors[t];
        switch (ct->kind) {
        case CUDA_T_CONST: e->ptr[t] = ct->dev; break;
        case CUDA_T_ARENA: e->ptr[t] = (uint8_t *)e->arena + ct->offset; break;
        case CUDA_T_INPUT: e->ptr[t] = in_ptr[ct->io_index]; break;
        case CUDA_T_OUTPUT: e->ptr[t] = out_ptr[ct->io_index]; break;
        case CUDA_T_ALIAS: e->ptr[t] = NULL; break;
        }
    }
    /* Views after their bases (a view always points at a base, never at a view). */
    for (int32_t t = 0; t < p->n_tensors; t++) {
        const cuda_tensor *ct = &p->tensors[t];
        if (ct->kind == CUDA_T_ALIAS)
            e->ptr[t] = (uint8_t *)e->ptr[ct->alias] + ct->alias_offset * (int64_t)segrt_dtype_size(ct->dtype);
    }
}

static void key_make(const sg_cuda_exec *e, const sg_cuda_plan *p, void *const *in_ptr, void *const *out_ptr,
                     graph_key *k)
{
    k->n = 0;
    k->ptr[k->n++] = e->arena;
    k->ptr[k->n++] = e->scratch;
    k->ptr[k->n++] = e->workspace;
    for (int32_t i = 0; i < p->g->n_inputs; i++)
        k->ptr[k->n++] = in_ptr[i];
    for (int32_t j = 0; j < p->g->n_outputs; j++)
        k->ptr[k->n++] = out_ptr[j];
}

static bool key_same(const graph_key *a, const graph_key *b)
{
    return a->n == b->n && a->n > 0 && memcmp(a->ptr, b->ptr, sizeof(void *) * (size_t)a->n) == 0;
}

/* Enqueues every step of p on the context's stream. */
static sg_status run_steps(sg_cuda_exec *e, exec_plan *ep, cuda_run *r)
{
    const sg_cuda_plan *p = ep->plan;
    for (int32_t s = 0; s < p->n_steps; s++) {
        const cuda_step *st = &p->steps[s];
        r->state = ep->state[s];
        if (ep->events)
            CUDA_TRY(cudaEventRecord(ep->events[2 * s], e->stream));
        sg_status rs = st->run(st, r);
        if (rs != SEGRT_OK)
            return sg_error_prefix(rs, "step `%s` (%s): ", st->name, st->impl);
        if (ep->events)
            CUDA_TRY(cudaEventRecord(ep->events[2 * s + 1], e->stream));
    }
    return SEGRT_OK;
}

/* Captures the steps into a CUDA graph for key k. false (and the context
 * goes on step by step for this plan) when something in the plan cannot
 * be captured; errors of the steps themselves are returned. */
static sg_status capture(sg_cuda_exec *e, exec_plan *ep, cuda_run *r, const graph_key *k, bool *ok)
{
    *ok = false;
    if (cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        ep->no_graph = true;
        return SEGRT_OK;
    }
    sg_status s = run_steps(e, ep, r);
    cudaGraph_t g = NULL;
    cudaError_t ce = cudaStreamEndCapture(e->stream, &g);
    if (s != SEGRT_OK || ce != cudaSuccess || !g) {
        (void)cudaGetLastError();
        if (g)
            cudaGraphDestroy(g);
        ep->no_graph = true;
        if (s != SEGRT_OK) /* a failing step; the eager run says the same */
            sg_error_clear();
        return SEGRT_OK;
    }
    /* The same steps with other pointers (a new caller buffer, say) keep
     * the graph's shape: updating the instantiated graph in place costs a
     * fraction of instantiating it again, which a short job of a few runs
     * per buffer set would otherwise pay every time. */
    if (ep->graph) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(ep->graph, g, &info) == cudaSuccess) {
            cudaGraphDestroy(g);
            ep->graph_for = *k;
            *ok = true;
            return SEGRT_OK;
        }
        (void)cudaGetLastError();
    }
    cudaGraphExec_t x = NULL;
    ce = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        ep->no_graph = true;
        return SEGRT_OK;
    }
    if (ep->graph)
        cudaGraphExecDestroy(ep->graph);
    ep->graph = x;
    ep->graph_for = *k;
    *ok = true;
    return SEGRT_OK;
}

/* Enqueues p over the callers' buffers: the captured graph where one was
 * made for these pointers, else step by step (capturing on the second
 * run with the same pointers). */
static sg_status launch(sg_cuda_exec *e, exec_plan *ep, void *const *in_ptr, void *const *out_ptr)
{
    const sg_cuda_plan *p = ep->plan;
    resolve_pointers(e, p, in_ptr, out_ptr);
    cuda_run r = {p,          e->stream,          e->cudnn,     e->lt,  e->ptr, e->scratch, e->workspace,
                  e->workspace_bytes, e->err, e->host_scratch, NULL};
    /* CPU fallback steps synchronise the stream and profiles time each
     * step: both run step by step. */
    bool graphs = !cuda_off(p, SG_KERNEL_GRAPHS) && !ep->events && !p->has_fallback && !ep->no_graph;
    graph_key key;
    key_make(e, p, in_ptr, out_ptr, &key);
    bool launched_graph = false;
    if (graphs && !(ep->graph && key_same(&key, &ep->graph_for)) && key_same(&key, &ep->last))
        SG_TRY(capture(e, ep, &r, &key, &launched_graph));
    if (graphs && ep->graph && key_same(&key, &ep->graph_for)) {
        CUDA_TRY(cudaGraphLaunch(ep->graph, e->stream));
        launched_graph = true;
    }
    if (!launched_graph)
        SG_TRY(run_steps(e, ep, &r));
    ep->last = key;
    return SEGRT_OK;
}

/* Waits for the stream, then turns an error a kernel reported (kept in
 * e->err until now) into a status and clears it. */
static sg_status drain(sg_cuda_exec *e)
{
    CUDA_TRY(cudaMemcpyAsync(e->err_host, e->err, sizeof(int), cudaMemcpyDeviceToHost, e->stream));
    CUDA_TRY(cudaStreamSynchronize(e->stream));
    if (*e->err_host != SGK_ERR_NONE) {
        int code = *e->err_host;
        CUDA_TRY(cudaMemsetAsync(e->err, 0, sizeof(int), e->stream));
        CUDA_TRY(cudaStreamSynchronize(e->stream));
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        code == SGK_ERR_INDEX ? "an index input was out of range (Gather or ScatterND)"
                                              : "a kernel reported error %d",
                        code);
    }
    return SEGRT_OK;
}

/* Adds each step's device time of the run just drained to the profile. */
static sg_status profile_collect(exec_plan *ep)
{
    if (!ep->events)
        return SEGRT_OK;
    for (int32_t s = 0; s < ep->plan->n_steps; s++) {
        float ms = 0;
        CUDA_TRY(cudaEventElapsedTime(&ms, ep->events[2 * s], ep->events[2 * s + 1]));
        ep->step_ms[s] += ms;
    }
    ep->runs++;
    return SEGRT_OK;
}

sg_status sg_cuda_exec_run(sg_cuda_exec *e, const sg_cuda_plan *p, const segrt_tensor *inputs,
                           segrt_tensor *outputs)
{
    const sg_graph *g = p->g;
    if (g->n_inputs > EXEC_MAX_IO || g->n_outputs > EXEC_MAX_IO)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "more than %d inputs or outputs", EXEC_MAX_IO);
    CUDA_TRY(cudaSetDevice(e->device));
    exec_plan *ep = NULL;
    SG_TRY(attach(e, p, &ep));
    SG_TRY(profile_init(e, ep));
    SG_TRY(fit_staging(e, p, inputs, outputs));
    void *in_ptr[EXEC_MAX_IO], *out_ptr[EXEC_MAX_IO];
    size_t in_off[EXEC_MAX_IO], out_off[EXEC_MAX_IO];
    size_t off = 0;
    uint8_t *pinned = e->pinned;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const cuda_tensor *t = &p->tensors[p->inputs[i]];
        size_t bytes = tensor_data_bytes(t);
        if (inputs[i].memory == SEGRT_MEMORY_DEVICE) {
            SG_TRY(check_device_ptr(e, &inputs[i], "input", i));
            in_ptr[i] = inputs[i].data;
            continue;
        }
        in_off[i] = off;
        off += t->bytes;
        in_ptr[i] = e->io_dev[i];
        if (bytes) {
            memcpy(pinned + in_off[i], inputs[i].data, bytes);
            CUDA_TRY(cudaMemcpyAsync(in_ptr[i], pinned + in_off[i], bytes, cudaMemcpyHostToDevice, e->stream));
        }
    }
    for (int32_t j = 0; j < g->n_outputs; j++) {
        const cuda_tensor *t = &p->tensors[p->outputs[j]];
        if (outputs[j].memory == SEGRT_MEMORY_DEVICE) {
            SG_TRY(check_device_ptr(e, &outputs[j], "output", j));
            out_ptr[j] = outputs[j].data;
            continue;
        }
        out_off[j] = off;
        off += t->bytes;
        out_ptr[j] = e->io_dev[g->n_inputs + j];
    }
    SG_TRY(launch(e, ep, in_ptr, out_ptr));
    for (int32_t j = 0; j < g->n_outputs; j++) {
        if (outputs[j].memory == SEGRT_MEMORY_DEVICE)
            continue;
        size_t bytes = tensor_data_bytes(&p->tensors[p->outputs[j]]);
        if (bytes)
            CUDA_TRY(cudaMemcpyAsync(pinned + out_off[j], out_ptr[j], bytes, cudaMemcpyDeviceToHost, e->stream));
    }
    SG_TRY(drain(e));
    for (int32_t j = 0; j < g->n_outputs; j++) {
        if (outputs[j].memory == SEGRT_MEMORY_DEVICE)
            continue;
        size_t bytes = tensor_data_bytes(&p->tensors[p->outputs[j]]);
        if (bytes)
            memcpy(outputs[j].data, pinned + out_off[j], bytes);
    }
    return profile_collect(ep);
}

sg_status sg_cuda_exec_enqueue(sg_cuda_exec *e, const sg_cuda_plan *p, const segrt_tensor *inputs,
                               segrt_tensor *outputs, cudaEvent_t after, cudaEvent_t done)
{
    const sg_graph *g = p->g;
    if (g->n_inputs > EXEC_MAX_IO || g->n_outputs > EXEC_MAX_IO)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "more than %d inputs or outputs", EXEC_MAX_IO);
    CUDA_TRY(cudaSetDevice(e->device));
    void *in_ptr[EXEC_MAX_IO], *out_ptr[EXEC_MAX_IO];
    for (int32_t i = 0; i < g->n_inputs + g->n_outputs; i++) {
        const segrt_tensor *t = i < g->n_inputs ? &inputs[i] : &outputs[i - g->n_inputs];
        const char *what = i < g->n_inputs ? "input" : "output";
        int32_t k = i < g->n_inputs ? i : i - g->n_inputs;
        if (t->memory != SEGRT_MEMORY_DEVICE)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "an enqueued run takes device memory only; %s %d is not",
                            what, k);
        SG_TRY(check_device_ptr(e, t, what, k));
        (i < g->n_inputs ? in_ptr : out_ptr)[k] = t->data;
    }
    exec_plan *ep = NULL;
    SG_TRY(attach(e, p, &ep));
    SG_TRY(profile_init(e, ep));
    if (after)
        CUDA_TRY(cudaStreamWaitEvent(e->stream, after, 0));
    SG_TRY(launch(e, ep, in_ptr, out_ptr));
    if (ep->events) { /* a profile reads its step events once the run is done */
        SG_TRY(drain(e));
        SG_TRY(profile_collect(ep));
    }
    if (done)
        CUDA_TRY(cudaEventRecord(done, e->stream));
    return SEGRT_OK;
}

sg_status sg_cuda_exec_finish(sg_cuda_exec *e)
{
    CUDA_TRY(cudaSetDevice(e->device));
    return drain(e);
}

void *sg_cuda_exec_stream(const sg_cuda_exec *e)
{
    return (void *)e->stream;
}

sg_status sg_cuda_exec_wait_stream(sg_cuda_exec *e, void *stream)
{
    CUDA_TRY(cudaSetDevice(e->device));
    if (!e->waited)
        CUDA_TRY(cudaEventCreateWithFlags(&e->waited, cudaEventDisableTiming));
    /* Recording and waiting queue nothing on the host: the event may be
     * recorded again at once, as the wait took its state as it was. */
    CUDA_TRY(cudaEventRecord(e->waited, (cudaStream_t)stream));
    CUDA_TRY(cudaStreamWaitEvent(e->stream, e->waited, 0));
    return SEGRT_OK;
}

sg_status sg_cuda_exec_profile(sg_cuda_exec *e, bool on)
{
    e->profiling = on;
    return SEGRT_OK;
}

size_t sg_cuda_exec_device_bytes(const sg_cuda_exec *e)
{
    size_t b = e->arena_bytes + e->scratch_bytes + e->workspace_bytes;
    for (int32_t i = 0; i < e->n_io; i++)
        b += e->io_bytes[i];
    return b;
}

void sg_cuda_exec_profile_print(const sg_cuda_exec *e, FILE *f)
{
    for (int32_t k = 0; k < e->n_plans; k++) {
        const exec_plan *ep = &e->plans[k];
        if (!ep->runs)
            continue;
        const sg_cuda_plan *p = ep->plan;
        double total = 0;
        for (int32_t s = 0; s < p->n_steps; s++)
            total += ep->step_ms[s];
        int32_t *order = sg_order_desc(ep->step_ms, p->n_steps);
        if (!order)
            return;
        fprintf(f, "%-40s %-26s %10s %7s %9s %8s\n", "step", "kernel", "ms/run", "share", "TFLOP/s", "GB/s");
        for (int32_t i = 0; i < p->n_steps; i++) {
            const cuda_step *st = &p->steps[order[i]];
            double ms = ep->step_ms[order[i]] / (double)ep->runs;
            double tf = st->flops > 0 && ms > 0 ? st->flops / (ms * 1e-3) / 1e12 : 0;
            double gbs = st->bytes > 0 && ms > 0 ? st->bytes / (ms * 1e-3) / 1e9 : 0;
            fprintf(f, "%-40.40s %-26.26s %10.4f %6.1f%% ", st->name, st->impl, ms,
                    total > 0 ? 100.0 * ep->step_ms[order[i]] / total : 0.0);
            if (tf > 0)
                fprintf(f, "%9.1f", tf);
            else
                fprintf(f, "%9s", "-");
            fprintf(f, " %8.0f\n", gbs);
        }
        fprintf(f, "%-40s %-26s %10.4f\n", "total (sum of steps)", "", total / (double)ep->runs);
        free(order);
    }
}

sg_status sg_cuda_identity_get(int32_t device, sg_cuda_identity *out)
{
    memset(out, 0, sizeof *out);
    struct cudaDeviceProp prop;
    cudaError_t ce = cudaGetDeviceProperties(&prop, device);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return sg_error(SEGRT_ERROR_DEVICE, "CUDA device %d: %s", device, cudaGetErrorString(ce));
    }
    snprintf(out->gpu, sizeof out->gpu, "%s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    int v = 0;
    cudaRuntimeGetVersion(&v);
    out->cuda_runtime = v;
    out->cudnn = (int32_t)cudnnGetVersion();
    return SEGRT_OK;
}
