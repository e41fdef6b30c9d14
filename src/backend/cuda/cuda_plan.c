/* Building a CUDA plan: one pass over the graph asking each node's
 * implementations (cuda_dispatch.c: the first that takes it) for steps (or
 * a CPU fallback step where the user allowed it), copies of the results
 * into the caller's outputs, then a lifetime-based memory plan for the
 * activation arena. */
#include "backend/cuda/cuda_internal.h"
#include "backend/ref/ref.h"
#include "core/arena_pack.h"
#include "graph/passes.h"

#include <stdlib.h>
#include <string.h>

/* Precision ------------------------------------------------------------------ */

bool cuda_node_fp32(const sg_cuda_plan *p, const sg_node *n)
{
    if (sg_attr_int(n, SG_ATTR_FP32, 0)) /* a composite operator's pieces (graph/pass_lower.c) */
        return true;
    const char *list = p->opts.fp32_ops;
    if (!list || !*list)
        return false;
    const char *op = sg_op_name(n->op);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if ((strlen(op) == len && strncmp(op, s, len) == 0) ||
            (n->name && strlen(n->name) == len && strncmp(n->name, s, len) == 0))
            return true;
        s += len + (e ? 1 : 0);
    }
    return false;
}

cuda_math cuda_node_math(const sg_cuda_plan *p, const sg_node *n)
{
    /* A model's own float16/bfloat16 tensors keep their type: the plan's
     * precision only lowers what the model computes in float32. */
    sg_dtype in = n->n_inputs > 0 && n->inputs[0] >= 0 ? p->g->values[n->inputs[0]].dtype : SEGRT_DTYPE_FLOAT32;
    if (in == SEGRT_DTYPE_FLOAT16)
        return CUDA_MATH_FP16;
    if (in == SEGRT_DTYPE_BFLOAT16)
        return CUDA_MATH_BF16;
    if (cuda_node_fp32(p, n))
        return CUDA_MATH_FP32;
    switch (p->opts.precision) {
    case SEGRT_PRECISION_TF32: return CUDA_MATH_TF32;
    case SEGRT_PRECISION_FP16: return CUDA_MATH_FP16;
    case SEGRT_PRECISION_BF16: return CUDA_MATH_BF16;
    default: return CUDA_MATH_FP32;
    }
}

sg_dtype cuda_out_dtype(const sg_cuda_plan *p, const sg_node *n, int32_t value)
{
    sg_dtype dt = p->g->values[value].dtype;
    if (dt != SEGRT_DTYPE_FLOAT32 || cuda_node_fp32(p, n))
        return dt;
    /* A graph output goes to the caller in float32: segrt's own kernels
     * write it so directly instead of rounding it first. Convolutions and
     * products keep their compute dtype (cuDNN's and cuBLASLt's engines for
     * mixed output types are few), and the final copy widens it. */
    bool product = n->op == SG_OP_CONV || n->op == SG_OP_CONV_TRANSPOSE || n->op == SG_OP_MAT_MUL ||
                   n->op == SG_OP_GEMM || n->op == SG_OP_EINSUM;
    if (p->g->values[value].is_output && !product)
        return dt;
    if (p->opts.precision == SEGRT_PRECISION_FP16)
        return SEGRT_DTYPE_FLOAT16;
    if (p->opts.precision == SEGRT_PRECISION_BF16)
        return SEGRT_DTYPE_BFLOAT16;
    return dt;
}

/* Steps ------------------------------------------------------------------------ */

sg_status cuda_step_new(sg_cuda_plan *p, const sg_node *n, const char *impl, cuda_run_fn fn,
                        const int32_t *args, int32_t n_args, int32_t n_outputs, void *params,
                        void (*params_free)(void *), cuda_step **out)
{
    sg_status s = SEGRT_OK;
    if (n_args > CUDA_MAX_ARGS)
        s = sg_error(SEGRT_ERROR_UNSUPPORTED, "a step with %d tensors (at most %d)", n_args, CUDA_MAX_ARGS);
    if (s == SEGRT_OK)
        s = sg_grow((void **)&p->steps, &p->cap_steps, p->n_steps + 1, sizeof *p->steps);
    if (s != SEGRT_OK) {
        if (params)
            (params_free ? params_free : free)(params);
        return s;
    }
    /* Record the step with each tensor it names (once per tensor). */
    for (int32_t a = 0; a < n_args && s == SEGRT_OK; a++) {
        int32_t t = args[a];
        bool again = false;
        for (int32_t b = 0; b < a && !again; b++)
            again = args[b] == t;
        if (t < 0 || again)
            continue;
        s = sg_grow((void **)&p->touch_serial, &p->cap_touch_serial, p->n_touch + 1, sizeof *p->touch_serial);
        if (s == SEGRT_OK)
            s = sg_grow((void **)&p->touch_next, &p->cap_touch_next, p->n_touch + 1, sizeof *p->touch_next);
        if (s != SEGRT_OK)
            break;
        cuda_tensor *ct = &p->tensors[t];
        p->touch_serial[p->n_touch] = p->next_serial;
        p->touch_next[p->n_touch] = 0;
        if (ct->touch_tail)
            p->touch_next[ct->touch_tail - 1] = p->n_touch + 1;
        else
            ct->touch_head = p->n_touch + 1;
        ct->touch_tail = ++p->n_touch;
    }
    if (s != SEGRT_OK) {
        if (params)
            (params_free ? params_free : free)(params);
        return s;
    }
    cuda_step *st = &p->steps[p->n_steps++];
    memset(st, 0, sizeof *st);
    st->serial = p->next_serial++;
    st->name = n ? n->name : "";
    st->impl = impl;
    st->node = n;
    st->run = fn;
    if (n_args)
        memcpy(st->args, args, sizeof(int32_t) * (size_t)n_args);
    st->n_args = n_args;
    st->n_outputs = n_outputs;
    st->params = params;
    st->params_free = params_free;
    if (out)
        *out = st;
    return SEGRT_OK;
}

int32_t cuda_step_of_serial(const sg_cuda_plan *p, int32_t serial)
{
    int32_t lo = 0, hi = p->n_steps;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (p->steps[mid].serial < serial)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n_steps && p->steps[lo].serial == serial ? lo : -1;
}

void cuda_step_remove(sg_cuda_plan *p, int32_t i)
{
    cuda_step *st = &p->steps[i];
    if (st->params)
        (st->params_free ? st->params_free : free)(st->params);
    memmove(st, st + 1, sizeof *st * (size_t)(p->n_steps - i - 1));
    p->n_steps--;
}

int32_t cuda_node_index(const sg_cuda_plan *p, const sg_node *n) { return (int32_t)(n - p->g->nodes); }

void cuda_mark_fused(sg_cuda_plan *p, int32_t node) { p->fused[node] = 1; }

bool cuda_node_reads(const sg_node *n, int32_t v)
{
    if (n->dead)
        return false;
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] == v)
            return true;
    return false;
}

const int32_t *cuda_readers(const sg_cuda_plan *p, int32_t v, int32_t *n)
{
    *n = p->reader_at[v + 1] - p->reader_at[v];
    return p->readers + p->reader_at[v];
}

int32_t cuda_single_reader(const sg_cuda_plan *p, int32_t v)
{
    if (p->uses[v] != 1 || p->g->values[v].is_output)
        return -1;
    int32_t n;
    const int32_t *r = cuda_readers(p, v, &n);
    return n ? r[0] : -1;
}

/* The live readers of every value (cuda_readers), so that fusion and
 * deferral ask for a value's readers without scanning the graph, which
 * made building quadratic in the node count. The plan never rewires its
 * graph, so they hold for the whole build. */
static sg_status readers_init(sg_cuda_plan *p)
{
    const sg_graph *g = p->g;
    int32_t nv = g->n_values;
    p->reader_at = sg_calloc((size_t)nv + 2, sizeof *p->reader_at);
    int32_t *seen = sg_malloc(sizeof(int32_t) * ((size_t)nv + 1)); /* the last node counted per value */
    if (!p->reader_at || !seen) {
        free(seen);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    /* Two passes over the readers: count them per value, then (with the
     * counts summed into starts) list them; filling moves each value's
     * start up, leaving reader_at[v] its start. */
    int64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t v = 0; v < nv; v++)
            seen[v] = -1;
        for (int32_t i = 0; i < g->n_nodes; i++)
            for (int32_t k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++) {
                int32_t v = g->nodes[i].inputs[k];
                if (v < 0 || seen[v] == i)
                    continue;
                seen[v] = i;
                if (pass == 0) {
                    p->reader_at[v + 2]++;
                    total++;
                } else {
                    p->readers[p->reader_at[v + 1]++] = i;
                }
            }
        if (pass == 1)
            break;
        for (int32_t v = 2; v <= nv; v++)
            p->reader_at[v] += p->reader_at[v - 1];
        p->readers = total < INT32_MAX ? sg_malloc(sizeof(int32_t) * (size_t)(total + 1)) : NULL;
        if (!p->readers) {
            free(seen);
            return SEGRT_ERROR_OUT_OF_MEMORY;
        }
    }
    free(seen);
    return SEGRT_OK;
}

bool cuda_const_float(const sg_value *v, int64_t numel)
{
    int64_t have = -1;
    return v->data && sg_dtype_is_float(v->dtype) && sg_shape_numel(&v->shape, &have) && have == numel;
}

bool cuda_conv_consts_float(const sg_cuda_plan *p, const sg_node *n, int64_t wnumel, int64_t K)
{
    const sg_graph *g = p->g;
    return cuda_const_float(&g->values[n->inputs[1]], wnumel) &&
           (n->n_inputs <= 2 || n->inputs[2] < 0 || cuda_const_float(&g->values[n->inputs[2]], K));
}

bool cuda_output_geometry(const sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, sgk_view *out)
{
    const sg_value *val = &p->g->values[v];
    memset(out, 0, sizeof *out);
    out->dtype = dt;
    out->rank = val->shape.rank;
    if (!sg_shape_dims(&val->shape, out->dims))
        return false;
    cuda_layout_strides(l, out->rank, out->dims, out->strides);
    return true;
}

sg_status cuda_sm_count(const sg_cuda_plan *p, int32_t *out)
{
    int sms = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p->device));
    *out = sms;
    return SEGRT_OK;
}

static void epilogue_of(const sg_cuda_plan *p, const sg_node *n, bool residual, cuda_kernel_epilogue *e)
{
    memset(e, 0, sizeof *e);
    e->z_tensor = -1;
    e->act_node = cuda_conv_activation(p, n, &e->act, &e->act_alpha);
    if (e->act_node < 0) {
        e->act = SGK_ACT_NONE;
        e->act_alpha = 0.0f;
    }
    const sg_node *last = e->act_node >= 0 ? &p->g->nodes[e->act_node] : n;
    e->act_value = last->outputs[0];
    int32_t z_value = -1;
    e->res_node = residual ? cuda_residual_add(p, e->act_value, &z_value) : -1;
    if (e->res_node >= 0) {
        /* cuda_residual_add took only a computed value of y's dims and
         * float dtype. */
        e->z_tensor = cuda_value(p, z_value);
        last = &p->g->nodes[e->res_node];
    }
    e->out_value = last->outputs[0];
    e->out_dtype = cuda_out_dtype(p, last, e->out_value);
    /* cuda_out_dtype keeps a convolution's graph output in the compute
     * dtype for cuDNN's sake; segrt's kernels store the graph's own dtype
     * directly, so the copy to the caller's buffer needs no rounding. */
    if (p->g->values[e->out_value].is_output)
        e->out_dtype = p->g->values[e->out_value].dtype;
}

void cuda_kernel_epilogue_of(const sg_cuda_plan *p, const sg_node *n, cuda_kernel_epilogue *e)
{
    epilogue_of(p, n, true, e);
}

void cuda_kernel_act_epilogue_of(const sg_cuda_plan *p, const sg_node *n, cuda_kernel_epilogue *e)
{
    epilogue_of(p, n, false, e);
}

void cuda_kernel_epilogue_bind(sg_cuda_plan *p, const cuda_kernel_epilogue *e, int32_t y)
{
    if (e->act_node >= 0) {
        cuda_mark_fused(p, e->act_node);
        cuda_value_set(p, e->act_value, y);
    }
    if (e->res_node >= 0) {
        cuda_mark_fused(p, e->res_node);
        cuda_value_set(p, e->out_value, y);
    }
}

sg_status cuda_conv_args_make(sg_cuda_plan *p, const sg_node *n, int32_t x, int32_t w, const char *bias_tag,
                              int64_t K, int32_t z, sg_dtype out_dt, cuda_layout out_layout, cuda_conv_args *a)
{
    memset(a, 0, sizeof *a);
    a->has_bias = n->n_inputs > 2 && n->inputs[2] >= 0;
    a->has_residual = z >= 0;
    a->t[a->n++] = x;
    a->t[a->n++] = w;
    if (a->has_bias) {
        int32_t b;
        SG_TRY(cuda_const_f32_tensor(p, n->inputs[2], bias_tag, NULL, K, &b));
        a->t[a->n++] = b;
    }
    if (a->has_residual)
        a->t[a->n++] = z;
    SG_TRY(cuda_output_new(p, n, 0, out_dt, out_layout, &a->y));
    a->t[a->n++] = a->y;
    return SEGRT_OK;
}

uint64_t cuda_conv_args_views(const cuda_conv_args *a)
{
    uint64_t m = (uint64_t)1 | ((uint64_t)1 << (a->n - 1));
    if (a->has_residual)
        m |= (uint64_t)1 << (a->n - 2);
    return m;
}

int32_t cuda_conv_args_insert(const cuda_conv_args *a, int32_t extra, int32_t *args, uint64_t *views)
{
    memcpy(args, a->t, sizeof(int32_t) * (size_t)a->n);
    *views = cuda_conv_args_views(a);
    if (extra < 0)
        return a->n;
    args[a->n] = args[a->n - 1];
    args[a->n - 1] = extra;
    *views = (*views & ~((uint64_t)1 << (a->n - 1))) | (uint64_t)1 << a->n;
    return a->n + 1;
}

/* Choices ----------------------------------------------------------------------- */

static char *choice_key(const char *node, const char *tag)
{
    size_t len = strlen(node) + strlen(tag) + 2;
    char *k = sg_malloc(len);
    if (k)
        snprintf(k, len, "%s\x1f%s", tag, node);
    return k;
}

const cuda_choice *cuda_choice_find(const sg_cuda_plan *p, const char *node, const char *tag)
{
    const sg_cuda_plan *src = p->given ? p->given : NULL;
    if (!src)
        return NULL;
    char *k = choice_key(node, tag);
    if (!k)
        return NULL;
    int32_t i = sg_strmap_get(&p->given_keys, k);
    free(k);
    return i >= 0 ? &src->choices[i] : NULL;
}

/* Indexes given's choices by key (the first of a key, as a scan finds):
 * a scan per look-up was quadratic in the layers of a plan file. */
static sg_status given_index(sg_cuda_plan *p)
{
    for (int32_t i = 0; p->given && i < p->given->n_choices; i++)
        if (sg_strmap_get(&p->given_keys, p->given->choices[i].key) < 0)
            SG_TRY(sg_strmap_put(&p->given_keys, p->given->choices[i].key, i));
    return SEGRT_OK;
}

static sg_status choice_add(sg_cuda_plan *p, char *key, const void *data, size_t size)
{
    SG_TRY(sg_grow((void **)&p->choices, &p->cap_choices, p->n_choices + 1, sizeof *p->choices));
    void *d = sg_malloc(size ? size : 1);
    if (!d) {
        free(key);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    if (size)
        memcpy(d, data, size);
    p->choices[p->n_choices++] = (cuda_choice){key, d, size};
    return SEGRT_OK;
}

sg_status cuda_choice_put(sg_cuda_plan *p, const char *node, const char *tag, const void *data, size_t size)
{
    char *k = choice_key(node, tag);
    if (!k)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    return choice_add(p, k, data, size);
}

sg_status cuda_tile_stats_put(sg_cuda_plan *p, int32_t of, int32_t part, const sgk_tile_grid *grid, int32_t pooled,
                              int32_t pool_node)
{
    int32_t had = p->cap_tile_stats_of;
    SG_TRY(sg_grow((void **)&p->tile_stats_of, &p->cap_tile_stats_of, of + 1, sizeof *p->tile_stats_of));
    for (int32_t t = had; t < p->cap_tile_stats_of; t++)
        p->tile_stats_of[t] = -1;
    SG_TRY(sg_grow((void **)&p->tile_stats, &p->cap_tile_stats, p->n_tile_stats + 1, sizeof *p->tile_stats));
    if (p->tile_stats_of[of] < 0) /* the first entry of a tensor is the one found */
        p->tile_stats_of[of] = p->n_tile_stats;
    p->tile_stats[p->n_tile_stats++] = (cuda_tile_stats){of, part, *grid, pooled, pool_node};
    return SEGRT_OK;
}

const cuda_tile_stats *cuda_tile_stats_find(const sg_cuda_plan *p, int32_t of)
{
    if (of < 0 || of >= p->cap_tile_stats_of || p->tile_stats_of[of] < 0)
        return NULL;
    return &p->tile_stats[p->tile_stats_of[of]];
}

sg_status cuda_deferred_norm_put(sg_cuda_plan *p, const cuda_deferred_norm *d)
{
    SG_TRY(sg_grow((void **)&p->deferred, &p->cap_deferred, p->n_deferred + 1, sizeof *p->deferred));
    SG_TRY(sg_grow((void **)&p->deferred_next, &p->cap_deferred_next, p->n_deferred + 1, sizeof *p->deferred_next));
    int32_t i = p->n_deferred++;
    p->deferred[i] = *d;
    p->deferred_next[i] = -1;
    if (d->value >= 0 && d->value < p->g->n_values) {
        p->deferred_next[i] = p->deferred_of[d->value];
        p->deferred_of[d->value] = i;
    }
    return SEGRT_OK;
}

/* The first entry still deferring value (applying one sets its value to
 * -1), found through the value's chain instead of a scan of all entries. */
static int32_t deferred_index(const sg_cuda_plan *p, int32_t value)
{
    if (value < 0 || value >= p->g->n_values)
        return -1;
    int32_t found = -1;
    for (int32_t i = p->deferred_of[value]; i >= 0; i = p->deferred_next[i])
        if (p->deferred[i].value == value)
            found = i; /* the chain runs newest first */
    return found;
}

const cuda_deferred_norm *cuda_deferred_norm_find(const sg_cuda_plan *p, int32_t value)
{
    int32_t i = deferred_index(p, value);
    return i >= 0 ? &p->deferred[i] : NULL;
}

int32_t cuda_deferred_norm_index(const sg_cuda_plan *p, int32_t value) { return deferred_index(p, value); }

bool cuda_deferred_norm_whole(const sg_cuda_plan *p, const cuda_deferred_norm *d)
{
    const cuda_tensor *t = &p->tensors[d->raw];
    return d->c_at == 0 && t->rank >= 2 && d->c_len == t->dims[1];
}

bool cuda_reads_deferred(const sg_node *n, int32_t k)
{
    switch (n->op) {
    case SG_OP_CONV:
    case SG_OP_CONV_TRANSPOSE:
    case SG_OP_MAX_POOL: return k == 0;
    case SG_OP_CONCAT: return true;
    default: return false;
    }
}

bool cuda_reads_only_as_x(const sg_cuda_plan *p, const sg_node *n, sg_op op, int32_t v)
{
    if (n->op != op || n->n_inputs < 1 || n->inputs[0] != v || p->fused[n - p->g->nodes])
        return false;
    for (int32_t k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] == v)
            return false;
    return true;
}

int32_t sg_cuda_plan_choice_count(const sg_cuda_plan *p) { return p->n_choices; }

void sg_cuda_plan_choice(const sg_cuda_plan *p, int32_t i, const char **key, const void **data, size_t *size)
{
    *key = p->choices[i].key;
    *data = p->choices[i].data;
    *size = p->choices[i].size;
}

sg_status sg_cuda_plan_choices_new(sg_cuda_plan **out)
{
    *out = sg_calloc(1, sizeof **out);
    return *out ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}

sg_status sg_cuda_plan_choices_add(sg_cuda_plan *holder, const char *key, const void *data, size_t size)
{
    char *k = sg_strdup(key);
    if (!k)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    return choice_add(holder, k, data, size);
}

/* CPU fallback ------------------------------------------------------------------ */

/* A node the GPU cannot run, run by its reference kernel on the CPU:
 * inputs come down through pinned memory, outputs go back up. Only with
 * --allow-cpu-fallback, and slow by nature (the stream is synchronised). */
static sg_status run_fallback(const cuda_step *s, cuda_run *r)
{
    const sg_node *n = s->node;
    int32_t n_in = s->n_args - s->n_outputs;
    sg_tensor tin[CUDA_MAX_ARGS], tout[CUDA_MAX_ARGS];
    const sg_tensor *pin[CUDA_MAX_ARGS];
    sg_tensor *pout[CUDA_MAX_ARGS];
    uint8_t *host = r->host_scratch;
    size_t off = 0;
    for (int32_t i = 0; i < s->n_args; i++) {
        int32_t t = s->args[i];
        bool is_in = i < n_in;
        sg_tensor *x = is_in ? &tin[i] : &tout[i - n_in];
        if (is_in)
            pin[i] = t < 0 ? NULL : x;
        else
            pout[i - n_in] = t < 0 ? NULL : x;
        if (t < 0)
            continue;
        const cuda_tensor *ct = &r->plan->tensors[t];
        memset(x, 0, sizeof *x);
        x->dtype = ct->dtype;
        x->rank = ct->rank;
        memcpy(x->dims, ct->dims, sizeof x->dims);
        x->data = host + off;
        size_t bytes = sg_tensor_bytes(x);
        if (is_in && bytes)
            CUDA_TRY(cudaMemcpyAsync(x->data, r->ptr[t], bytes, cudaMemcpyDeviceToHost, r->stream));
        off += (bytes + 255) & ~(size_t)255;
    }
    CUDA_TRY(cudaStreamSynchronize(r->stream));
    SG_TRY(sg_ref_kernel(n->op)(n, pin, n_in, pout, s->n_outputs));
    for (int32_t j = 0; j < s->n_outputs; j++) {
        int32_t t = s->args[n_in + j];
        if (t >= 0 && sg_tensor_bytes(&tout[j]))
            CUDA_TRY(cudaMemcpyAsync(r->ptr[t], tout[j].data, sg_tensor_bytes(&tout[j]), cudaMemcpyHostToDevice,
                                     r->stream));
    }
    /* The next fallback step reuses the host buffer: let the uploads finish. */
    CUDA_TRY(cudaStreamSynchronize(r->stream));
    return SEGRT_OK;
}

static sg_status build_fallback(sg_cuda_plan *p, const sg_node *n)
{
    if (!sg_ref_kernel(n->op))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "no kernel on the GPU or the CPU");
    int32_t args[CUDA_MAX_ARGS];
    int32_t na = 0;
    size_t host = 0;
    if (n->n_inputs + n->n_outputs > CUDA_MAX_ARGS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "too many inputs and outputs for a CPU fallback");
    for (int32_t i = 0; i < n->n_inputs; i++) {
        int32_t v = n->inputs[i];
        args[na] = -1;
        if (v >= 0) {
            SG_TRY(cuda_value_as(p, v, p->g->values[v].dtype, CUDA_LAYOUT_PLAIN, &args[na]));
            host += (p->tensors[args[na]].bytes + 255) & ~(size_t)255;
        }
        na++;
    }
    for (int32_t k = 0; k < n->n_outputs; k++) {
        int32_t v = n->outputs[k];
        args[na] = -1;
        if (v >= 0) {
            SG_TRY(cuda_output_new(p, n, k, p->g->values[v].dtype, CUDA_LAYOUT_PLAIN, &args[na]));
            host += (p->tensors[args[na]].bytes + 255) & ~(size_t)255;
        }
        na++;
    }
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "cpu fallback", run_fallback, args, na, n->n_outputs, NULL, NULL, &st));
    st->fallback = true;
    if (host > p->host_scratch_bytes)
        p->host_scratch_bytes = host;
    p->has_fallback = true;
    return SEGRT_OK;
}

/* Building ------------------------------------------------------------------------ */

/* Every tensor of a CUDA plan has dims below 2^31: segrt's kernels keep
 * per-axis sizes and coordinates in 32-bit ints (fastdiv divisors, tile
 * counts) and cuDNN's descriptors take no more. Element counts past 2^31
 * are each kernel's own question (sgk_*_fits, cuDNN's below). A node with
 * a larger dim fails the build, named, whatever the fallback setting: the
 * copies to and from the CPU index the same way. */
static sg_status check_dims(const sg_cuda_plan *p, const sg_node *n)
{
    for (int32_t io = 0; io < 2; io++) {
        int32_t count = io ? n->n_outputs : n->n_inputs;
        const int32_t *vals = io ? n->outputs : n->inputs;
        for (int32_t k = 0; k < count; k++) {
            if (vals[k] < 0)
                continue;
            const sg_value *v = &p->g->values[vals[k]];
            for (int32_t d = 0; d < v->shape.rank; d++)
                if (v->shape.d[d].size > INT32_MAX) {
                    char b[160];
                    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                         "%s `%s` (%s) has %lld elements along axis %d, 2^31 or more; the CUDA "
                                         "backend's kernels and cuDNN index an axis in 32 bits",
                                         io ? "output" : "input", v->name,
                                         sg_shape_format(p->g, &v->shape, b, sizeof b),
                                         (long long)v->shape.d[d].size, d);
                }
        }
    }
    return SEGRT_OK;
}

static sg_status build_node(sg_cuda_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    SG_TRY(check_dims(p, n));
    const cuda_impl *impls = cuda_impls_of(n);
    sg_status s;
    int32_t mark_steps = p->n_steps;
    /* A normalisation left to the readers of its result (cuda_build_norm.c
     * asked them): a builder that knows nothing of it gets the normalised
     * tensor. */
    for (int32_t k = 0; impls && k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && !cuda_reads_deferred(n, k) && cuda_deferred_norm_find(p, n->inputs[k]))
            SG_TRY(cuda_deferred_norm_apply(p, n->inputs[k]));
    if (impls) {
        s = cuda_impls_build(p, n, impls);
    } else {
        s = sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "the CUDA backend has no kernel for this operator");
    }
    if (s != SEGRT_ERROR_UNSUPPORTED)
        return s;
    if (!p->opts.allow_cpu_fallback) {
        char why[1024];
        snprintf(why, sizeof why, "%s", sg_last_error());
        return sg_error(s, "%s; the GPU cannot run it (--allow-cpu-fallback runs such nodes on the CPU)", why);
    }
    /* Drop whatever the builder appended before giving up. */
    for (int32_t k = mark_steps; k < p->n_steps; k++)
        if (p->steps[k].params)
            (p->steps[k].params_free ? p->steps[k].params_free : free)(p->steps[k].params);
    p->n_steps = mark_steps;
    sg_error_clear();
    /* The CPU reads what the graph says: normalised inputs. */
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && cuda_deferred_norm_find(p, n->inputs[k]))
            SG_TRY(cuda_deferred_norm_apply(p, n->inputs[k]));
    return build_fallback(p, n);
}

/* Copies of the results into the caller's output buffers (float32 and
 * plain whatever the plan computed in). */
static sg_status build_outputs(sg_cuda_plan *p)
{
    const sg_graph *g = p->g;
    for (int32_t j = 0; j < g->n_outputs; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        int64_t dims[SEGRT_MAX_RANK];
        if (!sg_shape_dims(&v->shape, dims))
            return sg_error(SEGRT_ERROR_SHAPE, "output `%s` has no static shape", v->name);
        int32_t src, dst;
        SG_TRY(cuda_value_as(p, g->outputs[j], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &src));
        SG_TRY(cuda_tensor_io(p, CUDA_T_OUTPUT, j, v->dtype, v->shape.rank, dims, &dst));
        p->outputs[j] = dst;
        /* Where the producer writes through views, it writes the caller's
         * buffer itself (converting layout on the way) and no copy runs. */
        if (cuda_place_in_slice(p, src, dst, 0, 0))
            continue;
        SG_TRY(cuda_copy_step(p, NULL, src, dst));
        p->steps[p->n_steps - 1].name = v->name;
    }
    return SEGRT_OK;
}

/* The bytes each step's tensors hold (broadcast dims counted once), as
 * if each were read or written once: the traffic a profile divides by
 * the step's time for GB/s. A lower bound for kernels that read twice. */
static void count_step_bytes(sg_cuda_plan *p)
{
    for (int32_t s = 0; s < p->n_steps; s++) {
        cuda_step *st = &p->steps[s];
        double b = 0;
        for (int32_t a = 0; a < st->n_args; a++) {
            if (st->args[a] < 0)
                continue;
            const cuda_tensor *t = &p->tensors[st->args[a]];
            double n = (double)segrt_dtype_size(t->dtype);
            for (int32_t d = 0; d < t->rank; d++)
                if (t->strides[d] != 0)
                    n *= (double)t->dims[d];
            b += n;
        }
        st->bytes = b;
    }
}

static int32_t tensor_root(const sg_cuda_plan *p, int32_t t)
{
    return p->tensors[t].kind == CUDA_T_ALIAS ? p->tensors[t].alias : t;
}

typedef struct by_size {
    size_t bytes;
    int32_t first, tensor;
} by_size;

/* Largest first, then by first use, then by index: the order the stable
 * insertion sort this replaced gave, in n log n. */
static int larger_first(const void *a, const void *b)
{
    const by_size *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* Lifetimes in steps, then first-fit offsets: a tensor may take memory
 * that no tensor alive at the same time holds. Views keep their base
 * alive. Steps run in order on one stream, so reuse after the last read
 * is safe. */
static sg_status plan_memory(sg_cuda_plan *p)
{
    for (int32_t t = 0; t < p->n_tensors; t++)
        p->tensors[t].first = p->tensors[t].last = -1;
    for (int32_t s = 0; s < p->n_steps; s++) {
        const cuda_step *st = &p->steps[s];
        for (int32_t a = 0; a < st->n_args; a++) {
            if (st->args[a] < 0)
                continue;
            cuda_tensor *t = &p->tensors[tensor_root(p, st->args[a])];
            if (t->first < 0)
                t->first = s;
            t->last = s;
        }
    }
    /* Largest first packs better; ties by first use keep it stable. */
    int32_t nt = p->n_tensors;
    by_size *order = sg_malloc(sizeof *order * (size_t)(nt + 1));
    int32_t *ids = sg_malloc(sizeof(int32_t) * (size_t)(nt + 1));
    int32_t *first = sg_malloc(sizeof(int32_t) * (size_t)(nt + 1));
    int32_t *last = sg_malloc(sizeof(int32_t) * (size_t)(nt + 1));
    size_t *bytes = sg_malloc(sizeof(size_t) * (size_t)(nt + 1));
    size_t *offset = sg_malloc(sizeof(size_t) * (size_t)(nt + 1));
    size_t top = 0;
    sg_status st = order && ids && first && last && bytes && offset ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
    int32_t n = 0;
    for (int32_t t = 0; st == SEGRT_OK && t < nt; t++)
        if (p->tensors[t].kind == CUDA_T_ARENA && p->tensors[t].first >= 0)
            order[n++] = (by_size){p->tensors[t].bytes, p->tensors[t].first, t};
    if (st == SEGRT_OK) {
        qsort(order, (size_t)n, sizeof *order, larger_first);
        /* Each tensor at the lowest offset clear of every tensor placed
         * before it that is alive at the same time. */
        for (int32_t i = 0; i < n; i++) {
            const cuda_tensor *t = &p->tensors[order[i].tensor];
            ids[i] = i;
            first[i] = t->first;
            last[i] = t->last;
            bytes[i] = t->bytes;
        }
        st = sg_arena_pack(n, ids, first, last, bytes, p->n_steps, offset, &top);
    }
    for (int32_t i = 0; st == SEGRT_OK && i < n; i++)
        p->tensors[order[i].tensor].offset = offset[i];
    free(order);
    free(ids);
    free(first);
    free(last);
    free(bytes);
    free(offset);
    SG_TRY(st);
    p->arena_bytes = top;
    for (int32_t s = 0; s < p->n_steps; s++) {
        if (p->steps[s].scratch_bytes > p->scratch_bytes)
            p->scratch_bytes = p->steps[s].scratch_bytes;
        if (p->steps[s].workspace_bytes > p->workspace_bytes)
            p->workspace_bytes = p->steps[s].workspace_bytes;
    }
    return SEGRT_OK;
}

static sg_status plan_init(sg_cuda_plan *p, const sg_graph *g)
{
    SG_TRY(sg_graph_clone(g, &p->g));
    int32_t nv = p->g->n_values ? p->g->n_values : 1, nn = p->g->n_nodes ? p->g->n_nodes : 1;
    p->value_tensor = sg_malloc(sizeof(int32_t) * (size_t)nv);
    p->fused = sg_calloc((size_t)nn, 1);
    p->inputs = sg_malloc(sizeof(int32_t) * (size_t)(p->g->n_inputs ? p->g->n_inputs : 1));
    p->outputs = sg_malloc(sizeof(int32_t) * (size_t)(p->g->n_outputs ? p->g->n_outputs : 1));
    p->uses = sg_graph_use_counts(p->g);
    p->conv_of = sg_malloc(sizeof(int32_t) * (size_t)nv);
    p->deferred_of = sg_malloc(sizeof(int32_t) * (size_t)nv);
    if (!p->value_tensor || !p->fused || !p->inputs || !p->outputs || !p->uses || !p->conv_of || !p->deferred_of)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t v = 0; v < p->g->n_values; v++)
        p->value_tensor[v] = p->conv_of[v] = p->deferred_of[v] = -1;
    SG_TRY(readers_init(p));
    SG_TRY(given_index(p));
    for (int32_t i = 0; i < p->g->n_inputs; i++) {
        const sg_value *v = &p->g->values[p->g->inputs[i]];
        int64_t dims[SEGRT_MAX_RANK];
        if (!sg_shape_dims(&v->shape, dims))
            return sg_error(SEGRT_ERROR_SHAPE, "input `%s` has no static shape", v->name);
        SG_TRY(cuda_tensor_io(p, CUDA_T_INPUT, i, v->dtype, v->shape.rank, dims, &p->inputs[i]));
        p->value_tensor[p->g->inputs[i]] = p->inputs[i];
    }
    return SEGRT_OK;
}

#ifndef SEGRT_CUDA_CODE
#error "CMake defines SEGRT_CUDA_CODE: the CUDA code libsegrt holds"
#endif

static sg_status build_handles(sg_cuda_plan *p)
{
    CUDA_TRY(cudaSetDevice(p->device));
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, p->device));
    int cc = 10 * prop.major + prop.minor;
    if (!sg_cuda_code_in(SEGRT_CUDA_CODE, cc, &p->code_cc, &p->code_a))
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "this libsegrt holds CUDA code for %s only, none of which runs on GPU %d (%s, compute "
                        "capability %d.%d); rebuild it with that architecture in -DSEGRT_CUDA_ARCHS",
                        SEGRT_CUDA_CODE, p->device, prop.name, prop.major, prop.minor);
    int target = p->opts.target_cc;
    if (target > cc)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "the target architecture sm_%d is newer than GPU %d (%s, compute capability %d.%d): a plan "
                        "can be restricted to an older GPU's kernels only",
                        target, p->device, prop.name, prop.major, prop.minor);
    cc = target ? target : cc;
    p->sm_major = cc / 10;
    p->sm_minor = cc % 10;
    p->smem_limit = (int32_t)prop.sharedMemPerBlockOptin;
    if (target) {
        /* The most shared memory a block may opt in to, by capability
         * (CUDA's table of compute capabilities). */
        int32_t most = cc < 80                      ? 64 * 1024
                       : cc == 80 || cc == 87        ? 163 * 1024
                       : cc / 10 == 9 || cc / 10 == 10 ? 227 * 1024
                                                     : 99 * 1024;
        p->smem_limit = most < p->smem_limit ? most : p->smem_limit;
    }
    /* cuDNN and cuBLASLt take bfloat16 from Ampere on, as do segrt's
     * kernels (the mma.sync products). */
    if (cc < 80 && p->opts.precision == SEGRT_PRECISION_BF16)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "bfloat16 needs compute capability 8.0 or later; the plan is for %d.%d (float16 runs there)",
                        p->sm_major, p->sm_minor);
    CUDA_TRY(cudaStreamCreateWithFlags(&p->build_stream, cudaStreamNonBlocking));
    CUDNN_TRY(cudnnCreate(&p->build_cudnn));
    CUDNN_TRY(cudnnSetStream(p->build_cudnn, p->build_stream));
    CUBLAS_TRY(cublasLtCreate(&p->build_lt));
    return SEGRT_OK;
}

static void free_handles(sg_cuda_plan *p)
{
    if (p->build_lt)
        cublasLtDestroy(p->build_lt);
    if (p->build_cudnn)
        cudnnDestroy(p->build_cudnn);
    if (p->build_stream)
        cudaStreamDestroy(p->build_stream);
    p->build_lt = NULL;
    p->build_cudnn = NULL;
    p->build_stream = NULL;
}

sg_status sg_cuda_plan_build(const sg_graph *g, const sg_cuda_options *opts, sg_cuda_weights *w,
                             const sg_cuda_plan *given, sg_cuda_plan **out)
{
    sg_cuda_plan *p = sg_calloc(1, sizeof *p);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    p->opts = *opts;
    p->weights = w;
    p->device = opts->device;
    p->given = given;
    int prev_dev = 0;
    cudaGetDevice(&prev_dev);
    sg_status s = build_handles(p);
    if (s == SEGRT_OK)
        s = plan_init(p, g);
    if (s == SEGRT_OK)
        s = cuda_conv_descs_read(p);
    if (s == SEGRT_OK)
        s = cuda_fusion_pass(p);
    for (int32_t i = 0; s == SEGRT_OK && i < p->g->n_nodes; i++)
        if (!p->g->nodes[i].dead && !p->fused[i]) {
            double t0 = sg_now_seconds();
            s = build_node(p, i);
            sg_report_node(&p->report, p->g->nodes[i].name, sg_op_name(p->g->nodes[i].op), sg_now_seconds() - t0);
        }
    if (s == SEGRT_OK)
        s = build_outputs(p);
    for (int32_t i = 0; s == SEGRT_OK && i < p->n_steps; i++)
        if (p->steps[i].build_done)
            s = p->steps[i].build_done(p, &p->steps[i]);
    if (s == SEGRT_OK)
        s = plan_memory(p);
    if (s == SEGRT_OK)
        count_step_bytes(p);
    free_handles(p);
    cuda_cudnn_seen_free(p); /* the searches are over */
    p->given = NULL;
    sg_strmap_free(&p->given_keys); /* it borrowed given's keys */
    cudaSetDevice(prev_dev);
    if (s != SEGRT_OK) {
        sg_cuda_plan_free(p);
        return s;
    }
    *out = p;
    return SEGRT_OK;
}

void sg_cuda_plan_free(sg_cuda_plan *p)
{
    if (!p)
        return;
    free_handles(p);
    for (int32_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].params)
            (p->steps[i].params_free ? p->steps[i].params_free : free)(p->steps[i].params);
    for (int32_t i = 0; i < p->n_choices; i++) {
        free(p->choices[i].key);
        free(p->choices[i].data);
    }
    free(p->choices);
    free(p->tile_stats);
    free(p->tile_stats_of);
    free(p->conv_descs);
    free(p->node_folds);
    free(p->value_folds);
    free(p->deferred);
    free(p->deferred_of);
    free(p->deferred_next);
    free(p->conv_of);
    free(p->reader_at);
    free(p->readers);
    sg_strmap_free(&p->given_keys);
    cuda_cudnn_seen_free(p);
    free(p->steps);
    free(p->touch_serial);
    free(p->touch_next);
    free(p->tensors);
    free(p->conv);
    free(p->value_tensor);
    free(p->uses);
    free(p->fused);
    free(p->inputs);
    free(p->outputs);
    sg_graph_free(p->g);
    free(p);
}

void sg_cuda_plan_get_info(const sg_cuda_plan *p, sg_cuda_plan_info *out)
{
    memset(out, 0, sizeof *out);
    out->arena_bytes = p->arena_bytes;
    out->scratch_bytes = p->scratch_bytes;
    out->workspace_bytes = p->workspace_bytes;
    for (int32_t i = 0; i < p->g->n_inputs; i++)
        out->io_bytes += p->tensors[p->inputs[i]].bytes;
    for (int32_t j = 0; j < p->g->n_outputs; j++)
        out->io_bytes += p->tensors[p->outputs[j]].bytes;
    out->steps = p->n_steps;
    for (int32_t i = 0; i < p->n_steps; i++)
        out->fallback_steps += p->steps[i].fallback;
}

const sg_graph *sg_cuda_plan_graph(const sg_cuda_plan *p) { return p->g; }

const segrt_build_report *sg_cuda_plan_report(const sg_cuda_plan *p) { return &p->report; }
