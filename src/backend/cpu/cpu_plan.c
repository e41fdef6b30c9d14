/* Building a CPU plan: one pass over the graph choosing an implementation
 * per node, layout conversions where producer and consumer disagree, then a
 * lifetime-based memory plan for the activation arena. */
#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "core/freelist.h"

#include <inttypes.h>
#include <string.h>

sg_status cpu_check_tensor(const sg_cpu_plan *p, const char *role, const char *name, sg_dtype dt, int32_t rank,
                           const int64_t *dims, int64_t bytes)
{
    int32_t big = -1;
    for (int32_t d = 0; d < rank && big < 0; d++)
        if (dims[d] > CPU_MAX_DIM)
            big = d;
    if (big < 0 && bytes >= 0 && bytes <= CPU_MAX_TENSOR_BYTES)
        return SEGRT_OK;
    char shape[160], where[320] = "", what[320];
    sg_dims_format(dims, rank, shape, sizeof shape);
    if (p->cur)
        snprintf(where, sizeof where, "node `%s` (%s): ", p->cur->name, sg_op_name(p->cur->op));
    if (name && *name)
        snprintf(what, sizeof what, "%s `%s` (%s %s)", role, name, segrt_dtype_name(dt), shape);
    else
        snprintf(what, sizeof what, "%s (%s %s)", role, segrt_dtype_name(dt), shape);
    if (big >= 0)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s%s has %" PRId64 " elements along axis %d, 2^31 or more; the CPU backend's "
                        "kernels (oneDNN's among them) index an axis in 32 bits",
                        where, what, dims[big], big);
    if (bytes < 0)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s%s has more bytes than 64 bits count", where, what);
    return sg_error(SEGRT_ERROR_UNSUPPORTED,
                    "%s%s takes %.1f GiB; the CPU backend's kernels (oneDNN's among them) index a tensor's "
                    "bytes in 32 bits (at most 2 GiB)",
                    where, what, (double)bytes / (1024.0 * 1024 * 1024));
}

/* Checks graph value v (read or written by p->cur) at its plain size. */
static sg_status check_value(const sg_cpu_plan *p, const char *role, int32_t v)
{
    const sg_value *val = &p->g->values[v];
    int64_t dims[SEGRT_MAX_RANK], numel, bytes;
    if (!sg_shape_dims(&val->shape, dims))
        return SEGRT_OK; /* the builders say what they need of it */
    if (!sg_shape_numel(&val->shape, &numel) || !sg_mul_i64(numel, (int64_t)segrt_dtype_size(val->dtype), &bytes))
        bytes = -1;
    return cpu_check_tensor(p, role, val->name, val->dtype, val->shape.rank, dims, bytes);
}

const char *cpu_dnnl_status(dnnl_status_t s)
{
    switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    }
    return "unknown status";
}

bool cpu_dnnl_dtype(sg_dtype t, dnnl_data_type_t *out)
{
    switch (t) {
    case SEGRT_DTYPE_FLOAT32: *out = dnnl_f32; return true;
    case SEGRT_DTYPE_FLOAT16: *out = dnnl_f16; return true;
    case SEGRT_DTYPE_BFLOAT16: *out = dnnl_bf16; return true;
    case SEGRT_DTYPE_INT32: *out = dnnl_s32; return true;
    case SEGRT_DTYPE_INT8: *out = dnnl_s8; return true;
    case SEGRT_DTYPE_UINT8: *out = dnnl_u8; return true;
    default: return false;
    }
}

void *cpu_plan_alloc(sg_cpu_plan *p, size_t bytes)
{
    if (sg_grow((void **)&p->owned, &p->cap_owned, p->n_owned + 1, sizeof *p->owned) != SEGRT_OK)
        return NULL;
    void *m = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!m) {
        sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    p->owned[p->n_owned++] = m;
    return m;
}

static void plain_strides(int32_t rank, const int64_t *dims, dnnl_dims_t strides)
{
    int64_t s = 1;
    for (int32_t i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i] > 0 ? dims[i] : 1;
    }
}

void cpu_plain_md(const cpu_tensor *t, dnnl_memory_desc_t *md)
{
    dnnl_data_type_t dt = dnnl_f32;
    cpu_dnnl_dtype(t->dtype, &dt);
    /* oneDNN has no rank-0 tensors: a scalar is one element of rank 1. */
    int32_t rank = t->rank ? t->rank : 1;
    dnnl_dims_t dims, strides;
    for (int32_t i = 0; i < rank; i++)
        dims[i] = t->rank ? t->dims[i] : 1;
    plain_strides(rank, dims, strides);
    dnnl_memory_desc_init_by_strides(md, rank, dims, dt, strides);
}

static sg_status tensor_push(sg_cpu_plan *p, const cpu_tensor *t, int32_t *out)
{
    SG_TRY(sg_grow((void **)&p->tensors, &p->cap_tensors, p->n_tensors + 1, sizeof *p->tensors));
    p->tensors[p->n_tensors] = *t;
    *out = p->n_tensors++;
    return SEGRT_OK;
}

sg_status cpu_tensor_new_plain(sg_cpu_plan *p, cpu_tensor_kind kind, sg_dtype dt, int32_t rank,
                               const int64_t *dims, int32_t *out)
{
    cpu_tensor t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    t.dtype = dt;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++)
        numel *= dims[i];
    t.bytes = (size_t)numel * segrt_dtype_size(dt);
    dnnl_data_type_t ddt;
    t.has_md = cpu_dnnl_dtype(dt, &ddt);
    if (t.has_md)
        cpu_plain_md(&t, &t.md);
    t.first = t.last = -1;
    t.io_index = -1;
    t.alias = -1;
    t.layouts = -1;
    return tensor_push(p, &t, out);
}

sg_status cpu_tensor_new_alias(sg_cpu_plan *p, int32_t of, const dnnl_memory_desc_t *md, int32_t *out)
{
    cpu_tensor t = p->tensors[of];
    while (t.alias >= 0) /* a view of a view reads the original */
        t = p->tensors[of = t.alias];
    t.md = *md;
    t.has_md = true;
    t.rank = md->ndims;
    for (int32_t d = 0; d < md->ndims; d++)
        t.dims[d] = md->dims[d];
    t.alias = of;
    t.first = t.last = -1;
    t.layouts = -1;
    return tensor_push(p, &t, out);
}

sg_status cpu_tensor_new_md(sg_cpu_plan *p, sg_dtype dt, const dnnl_memory_desc_t *md, int32_t *out)
{
    cpu_tensor t;
    memset(&t, 0, sizeof t);
    t.kind = CPU_T_ARENA;
    t.dtype = dt;
    t.rank = md->ndims;
    for (int32_t i = 0; i < md->ndims; i++)
        t.dims[i] = md->dims[i];
    t.has_md = true;
    t.md = *md;
    t.bytes = dnnl_memory_desc_get_size(md);
    t.first = t.last = -1;
    t.io_index = -1;
    t.alias = -1;
    t.layouts = -1;
    /* Layout padding (channels blocked by 8 or 16) can take a tensor of
     * allowed plain size over the limit. */
    SG_TRY(cpu_check_tensor(p, "a tensor in oneDNN's layout", "", dt, t.rank, t.dims,
                            t.bytes > (size_t)INT64_MAX ? -1 : (int64_t)t.bytes));
    return tensor_push(p, &t, out);
}

bool cpu_tensor_is_plain(const cpu_tensor *t)
{
    if (!t->has_md)
        return true;
    dnnl_memory_desc_t md;
    cpu_plain_md(t, &md);
    return dnnl_memory_desc_equal(&md, &t->md) != 0;
}

sg_status cpu_step_new(sg_cpu_plan *p, const char *name, cpu_step **out)
{
    SG_TRY(sg_grow((void **)&p->steps, &p->cap_steps, p->n_steps + 1, sizeof *p->steps));
    cpu_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof *s);
    s->name = name;
    *out = s;
    return SEGRT_OK;
}

sg_status cpu_kernel_step(sg_cpu_plan *p, const sg_node *n, cpu_kernel_fn kernel, void *params, const int32_t *in,
                          int32_t n_in, const dnnl_memory_desc_t *md, int32_t value, cpu_step **out)
{
    const dnnl_memory_desc_t y_md = *md; /* md may point into the tensor array */
    int32_t y;
    cpu_step *st = NULL;
    sg_status s = n_in < CPU_MAX_ARGS ? SEGRT_OK : sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "too many inputs");
    if (s == SEGRT_OK)
        s = cpu_tensor_new_md(p, p->g->values[value].dtype, &y_md, &y);
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        free(params);
        return s;
    }
    st->kernel = kernel;
    st->params = params;
    st->n_outputs = 1;
    for (int32_t k = 0; k < n_in; k++)
        st->args[k] = (cpu_arg){k, in[k]};
    st->args[n_in] = (cpu_arg){n_in, y};
    st->n_args = n_in + 1;
    p->value_tensor[value] = y;
    if (out)
        *out = st;
    return SEGRT_OK;
}

sg_status cpu_primitive_step(sg_cpu_plan *p, const sg_node *n, dnnl_primitive_desc_t pd, const cpu_arg *args,
                             int32_t n_args, int dst_arg)
{
    int32_t y;
    sg_status s = n_args < CPU_MAX_ARGS ? SEGRT_OK : sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "too many inputs");
    if (s == SEGRT_OK)
        s = cpu_tensor_new_md(p, p->g->values[n->outputs[0]].dtype,
                              dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &y);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s;
    }
    p->value_tensor[n->outputs[0]] = y;
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    for (int32_t a = 0; a < n_args; a++)
        st->args[a] = args[a];
    st->args[n_args] = (cpu_arg){dst_arg, y};
    st->n_args = n_args + 1;
    return SEGRT_OK;
}

sg_status cpu_plain_outputs(sg_cpu_plan *p, const sg_node *n, int32_t *out)
{
    for (int32_t k = 0; k < n->n_outputs; k++) {
        int32_t v = n->outputs[k];
        out[k] = -1;
        if (v < 0)
            continue;
        const sg_value *val = &p->g->values[v];
        int64_t dims[SEGRT_MAX_RANK];
        if (!sg_shape_dims(&val->shape, dims))
            return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output `%s` has no static shape", val->name);
        SG_TRY(cpu_tensor_new_plain(p, CPU_T_ARENA, val->dtype, val->shape.rank, dims, &out[k]));
        p->value_tensor[v] = out[k];
    }
    return SEGRT_OK;
}

sg_status cpu_attr_new(dnnl_primitive_attr_t *out)
{
    DNNL_TRY(dnnl_primitive_attr_create(out));
    dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(*out, dnnl_scratchpad_mode_user);
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(*out);
        DNNL_TRY(s);
    }
    return SEGRT_OK;
}

sg_status cpu_primitive(sg_cpu_plan *p, dnnl_primitive_desc_t pd, dnnl_primitive_t *out)
{
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
    if (bytes > p->scratch_bytes)
        p->scratch_bytes = bytes;
    dnnl_status_t s = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    DNNL_TRY(s);
    return SEGRT_OK;
}

int32_t cpu_value(const sg_cpu_plan *p, int32_t v) { return v < 0 ? -1 : p->value_tensor[v]; }

int32_t cpu_single_reader(const sg_cpu_plan *p, int32_t v)
{
    const sg_graph *g = p->g;
    if (v < 0 || g->values[v].is_output || p->uses[v] != 1 || p->reader[v] < 0)
        return -1;
    return p->fused[p->reader[v]] ? -1 : p->reader[v];
}

/* The first node that reads each value (-1 if none), so that fusion asks
 * for a value's reader without scanning the graph. */
static int32_t *first_readers(const sg_graph *g)
{
    int32_t *r = sg_malloc(sizeof(int32_t) * ((size_t)g->n_values + 1));
    if (!r)
        return NULL;
    for (int32_t v = 0; v < g->n_values; v++)
        r[v] = -1;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--)
        for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0)
                r[g->nodes[i].inputs[k]] = i;
    return r;
}

/* Conversions made so far: each tensor's layout steps are chained from
 * cpu_tensor.layouts through cpu_step.next_layout, newest first. A value
 * read in another layout by several consumers is converted once. */
sg_status cpu_value_as(sg_cpu_plan *p, int32_t v, const dnnl_memory_desc_t *md, int32_t *out)
{
    int32_t src = cpu_value(p, v);
    SG_ASSERT(src >= 0);
    if (p->tensors[src].has_md && dnnl_memory_desc_equal(&p->tensors[src].md, md)) {
        *out = src;
        return SEGRT_OK;
    }
    int32_t found = -1; /* the oldest match, as a scan of the steps would find */
    for (int32_t i = p->tensors[src].layouts; i >= 0; i = p->steps[i].next_layout) {
        const cpu_step *s = &p->steps[i];
        SG_ASSERT(s->layout && s->args[0].tensor == src);
        if (dnnl_memory_desc_equal(&p->tensors[s->args[1].tensor].md, md))
            found = s->args[1].tensor;
    }
    if (found >= 0) {
        *out = found;
        return SEGRT_OK;
    }
    if (!p->tensors[src].has_md)
        return sg_error(SEGRT_ERROR_INTERNAL, "value `%s` (%s) has no oneDNN layout to convert",
                        p->g->values[v].name, segrt_dtype_name(p->tensors[src].dtype));
    int32_t dst;
    SG_TRY(cpu_tensor_new_md(p, p->tensors[src].dtype, md, &dst));
    dnnl_primitive_desc_t pd;
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&pd, &p->tensors[src].md, p->engine, md, p->engine, NULL));
    cpu_step *s;
    SG_TRY(cpu_step_new(p, p->g->values[v].name, &s));
    SG_TRY(cpu_primitive(p, pd, &s->prim));
    s->args[0] = (cpu_arg){DNNL_ARG_FROM, src};
    s->args[1] = (cpu_arg){DNNL_ARG_TO, dst};
    s->n_args = 2;
    s->layout = true;
    s->next_layout = p->tensors[src].layouts;
    p->tensors[src].layouts = p->n_steps - 1;
    *out = dst;
    return SEGRT_OK;
}

sg_status cpu_value_plain(sg_cpu_plan *p, int32_t v, int32_t *out)
{
    int32_t t = cpu_value(p, v);
    SG_ASSERT(t >= 0);
    if (cpu_tensor_is_plain(&p->tensors[t])) {
        *out = t;
        return SEGRT_OK;
    }
    dnnl_memory_desc_t md;
    cpu_plain_md(&p->tensors[t], &md);
    return cpu_value_as(p, v, &md, out);
}

sg_status cpu_const_reordered(sg_cpu_plan *p, const dnnl_memory_desc_t *src_md, const void *src,
                              const dnnl_memory_desc_t *dst_md, void **out)
{
    size_t dst_bytes = dnnl_memory_desc_get_size(dst_md);
    SG_TRY(cpu_check_tensor(p, "a constant in oneDNN's layout", "", SEGRT_DTYPE_FLOAT32, dst_md->ndims,
                            dst_md->dims, dst_bytes > (size_t)INT64_MAX ? -1 : (int64_t)dst_bytes));
    void *dst = cpu_plan_alloc(p, dst_bytes);
    if (!dst)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (dnnl_memory_desc_equal(src_md, dst_md)) {
        memcpy(dst, src, dst_bytes);
        *out = dst;
        return SEGRT_OK;
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, src_md, p->engine, dst_md, p->engine, NULL);
    if (s == dnnl_success)
        s = dnnl_primitive_create(&prim, pd);
    if (s == dnnl_success)
        s = dnnl_memory_create(&ms, src_md, p->engine, (void *)src);
    if (s == dnnl_success)
        s = dnnl_memory_create(&md, dst_md, p->engine, dst);
    if (s == dnnl_success)
        s = dnnl_stream_create(&stream, p->engine, dnnl_stream_default_flags);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
        s = dnnl_primitive_execute(prim, stream, 2, args);
        if (s == dnnl_success)
            s = dnnl_stream_wait(stream);
    }
    dnnl_stream_destroy(stream);
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(md);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    DNNL_TRY(s);
    *out = dst;
    return SEGRT_OK;
}

/* ------------------------------------------------------------------------ */

static sg_status bind_graph_values(sg_cpu_plan *p)
{
    const sg_graph *g = p->g;
    for (int32_t v = 0; v < g->n_values; v++) {
        const sg_value *val = &g->values[v];
        p->value_tensor[v] = -1;
        if (!val->data && !val->is_input)
            continue;
        int64_t dims[SEGRT_MAX_RANK];
        if (!sg_shape_dims(&val->shape, dims))
            return sg_error(SEGRT_ERROR_INTERNAL, "value `%s` has no static shape", val->name);
        SG_TRY(check_value(p, val->data ? "constant" : "input", v));
        int32_t t;
        SG_TRY(cpu_tensor_new_plain(p, val->data ? CPU_T_CONST : CPU_T_INPUT, val->dtype, val->shape.rank,
                                    dims, &t));
        if (val->data)
            p->tensors[t].data = sg_blob_data(val->data);
        p->value_tensor[v] = t;
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        p->inputs[i] = p->value_tensor[g->inputs[i]];
        p->tensors[p->inputs[i]].io_index = i;
    }
    return SEGRT_OK;
}

static sg_status build_node(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    p->cur = n;
    /* Every tensor the node reads or writes within what the kernels index,
     * before any builder hands it to oneDNN or a kernel of its own. */
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0)
            SG_TRY(check_value(p, "input", n->inputs[k]));
    for (int32_t k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0)
            SG_TRY(check_value(p, "output", n->outputs[k]));
    sg_status s = SEGRT_ERROR_UNSUPPORTED;
    int32_t steps_before = p->n_steps;
    /* oneDNN takes no empty tensors (a Conv over 0 channels is "invalid
     * arguments"), and segrt's kernels divide by the dims they split: a
     * node with an empty input or output runs on its reference kernel. */
    bool empty = false;
    for (int32_t k = 0; k < n->n_inputs + n->n_outputs && !empty; k++) {
        int32_t v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
        int64_t numel;
        empty = v >= 0 && sg_shape_numel(&p->g->values[v].shape, &numel) && numel == 0;
    }
    if (empty)
        goto reference;
    switch (n->op) {
    case SG_OP_CONV: s = cpu_build_conv(p, i); break;
    case SG_OP_CONV_TRANSPOSE:
        s = cpu_build_deconv_gemm(p, i);
        if (s == SEGRT_ERROR_UNSUPPORTED)
            s = cpu_build_conv(p, i);
        break;
    case SG_OP_MAX_POOL:
    case SG_OP_AVERAGE_POOL:
    case SG_OP_GLOBAL_AVERAGE_POOL:
    case SG_OP_GLOBAL_MAX_POOL: s = cpu_build_pool(p, i); break;
    case SG_OP_CONCAT: s = cpu_build_concat(p, i); break;
    case SG_OP_PRELU: s = cpu_build_prelu(p, i); break;
    case SG_OP_ADD:
    case SG_OP_SUB:
    case SG_OP_MUL:
    case SG_OP_DIV: s = cpu_build_binary(p, i); break;
    case SG_OP_MAT_MUL: s = cpu_build_matmul(p, i); break;
    case SG_OP_RESIZE: s = cpu_build_resize(p, i); break;
    case SG_OP_TRANSPOSE: s = cpu_build_transpose(p, i); break;
    case SG_OP_SDPA: s = cpu_build_sdpa(p, i); break;
    case SG_OP_LAYER_NORMALIZATION: s = cpu_build_layer_norm(p, i); break;
    case SG_OP_SOFTMAX:
    case SG_OP_LOG_SOFTMAX: s = cpu_build_softmax(p, i); break;
    case SG_OP_INSTANCE_NORMALIZATION:
    case SG_OP_GROUP_NORMALIZATION: s = cpu_build_instance_norm(p, i); break;
    default: s = cpu_build_eltwise(p, i); break;
    }
    /* What no specific builder took runs on its reference kernel: over
     * chunks of axis 0 in parallel where the operator allows, else whole. */
    if (s == SEGRT_ERROR_UNSUPPORTED)
        s = cpu_build_rows(p, i);
    if (s != SEGRT_ERROR_UNSUPPORTED)
        return s;
    /* A builder declines before adding steps, so the reference kernel
     * takes the node from a clean slate. */
    SG_ASSERT(p->n_steps == steps_before);
reference:
    sg_error_clear();
    return cpu_build_fallback(p, i);
}

/* The caller's output buffers are plain: each graph output is copied (or
 * reordered) into them by a final step. */
static sg_status bind_outputs(sg_cpu_plan *p)
{
    const sg_graph *g = p->g;
    for (int32_t j = 0; j < g->n_outputs; j++) {
        int32_t v = g->outputs[j];
        int32_t src = cpu_value(p, v);
        SG_ASSERT(src >= 0);
        /* A copy: adding tensors below may move the array. */
        const cpu_tensor ts_copy = p->tensors[src];
        const cpu_tensor *ts = &ts_copy;
        int32_t dst;
        SG_TRY(cpu_tensor_new_plain(p, CPU_T_OUTPUT, ts->dtype, ts->rank, ts->dims, &dst));
        p->tensors[dst].io_index = j;
        p->outputs[j] = dst;
        cpu_step *s;
        SG_TRY(cpu_step_new(p, g->values[v].name, &s));
        s->args[0] = (cpu_arg){DNNL_ARG_FROM, src};
        s->args[1] = (cpu_arg){DNNL_ARG_TO, dst};
        s->n_args = 2;
        if (ts->has_md && !cpu_tensor_is_plain(ts)) {
            dnnl_primitive_desc_t pd;
            DNNL_TRY(dnnl_reorder_primitive_desc_create(&pd, &ts->md, p->engine, &p->tensors[dst].md,
                                                        p->engine, NULL));
            SG_TRY(cpu_primitive(p, pd, &p->steps[p->n_steps - 1].prim));
        } else {
            s->kernel = cpu_copy_kernel;
            s->n_outputs = 1;
        }
    }
    return SEGRT_OK;
}

/* Whether the memory plan places tensor t in the arena (views share their
 * base's place; tensors no step uses get none). */
static bool in_arena(const cpu_tensor *t) { return t->kind == CPU_T_ARENA && t->first >= 0 && t->alias < 0; }

/* Lifetimes in steps, then first-fit offsets: a tensor may reuse memory of
 * tensors whose last reader ran before its first writer. */
static sg_status plan_memory(sg_cpu_plan *p)
{
    for (int32_t si = 0; si < p->n_steps; si++) {
        const cpu_step *s = &p->steps[si];
        for (int32_t a = 0; a < s->n_args; a++) {
            int32_t t = s->args[a].tensor;
            if (t < 0)
                continue;
            cpu_tensor *ct = &p->tensors[t];
            if (ct->first < 0)
                ct->first = si;
            ct->last = si;
        }
    }
    /* A view keeps the memory it reads alive. */
    for (int32_t t = 0; t < p->n_tensors; t++) {
        cpu_tensor *ct = &p->tensors[t];
        if (ct->alias < 0 || ct->first < 0)
            continue;
        cpu_tensor *of = &p->tensors[ct->alias];
        if (of->first < 0 || ct->first < of->first)
            of->first = ct->first;
        if (ct->last > of->last)
            of->last = ct->last;
    }
    /* Arena tensors bucketed by the step that writes them first and by
     * the step that reads them last, in tensor order within a bucket. */
    int32_t ns = p->n_steps;
    int32_t *first_at = sg_calloc((size_t)ns + 2, sizeof *first_at);
    int32_t *last_at = sg_calloc((size_t)ns + 2, sizeof *last_at);
    int32_t *by_first = sg_malloc(sizeof(int32_t) * ((size_t)p->n_tensors + 1));
    int32_t *by_last = sg_malloc(sizeof(int32_t) * ((size_t)p->n_tensors + 1));
    sg_status s = first_at && last_at && by_first && by_last ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
    if (s == SEGRT_OK) {
        for (int32_t t = 0; t < p->n_tensors; t++)
            if (in_arena(&p->tensors[t])) {
                first_at[p->tensors[t].first + 2]++;
                last_at[p->tensors[t].last + 2]++;
            }
        for (int32_t si = 2; si <= ns; si++) {
            first_at[si] += first_at[si - 1];
            last_at[si] += last_at[si - 1];
        }
        /* Placing each tensor moves its bucket's start up by one: after
         * this, bucket si runs from [si] to [si + 1]. */
        for (int32_t t = 0; t < p->n_tensors; t++)
            if (in_arena(&p->tensors[t])) {
                by_first[first_at[p->tensors[t].first + 1]++] = t;
                by_last[last_at[p->tensors[t].last + 1]++] = t;
            }
    }
    sg_freelist arena;
    sg_freelist_init(&arena);
    size_t peak = 0;
    for (int32_t si = 0; s == SEGRT_OK && si < ns; si++) {
        /* Memory of tensors last read before this step is free again. */
        for (int32_t k = si ? last_at[si - 1] : 0; si && k < last_at[si] && s == SEGRT_OK; k++) {
            const cpu_tensor *ct = &p->tensors[by_last[k]];
            s = sg_freelist_release(&arena, ct->offset, (ct->bytes + 63) & ~(size_t)63);
        }
        for (int32_t k = first_at[si]; k < first_at[si + 1] && s == SEGRT_OK; k++) {
            cpu_tensor *ct = &p->tensors[by_first[k]];
            size_t need = (ct->bytes + 63) & ~(size_t)63;
            s = sg_freelist_alloc(&arena, need, &ct->offset);
            if (s == SEGRT_OK && ct->offset + need > peak)
                peak = ct->offset + need;
        }
    }
    sg_freelist_free(&arena);
    free(first_at);
    free(last_at);
    free(by_first);
    free(by_last);
    if (s != SEGRT_OK)
        return s;
    p->arena_bytes = peak;
    int32_t n_aliases = 0;
    for (int32_t t = 0; t < p->n_tensors; t++) {
        cpu_tensor *ct = &p->tensors[t];
        if (ct->alias < 0)
            continue;
        ct->offset = p->tensors[ct->alias].offset;
        if (ct->kind == CPU_T_INPUT || ct->kind == CPU_T_OUTPUT)
            n_aliases++;
    }
    p->aliases = sg_calloc((size_t)n_aliases + 1, sizeof *p->aliases);
    if (!p->aliases)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t t = 0; t < p->n_tensors; t++)
        if (p->tensors[t].alias >= 0 && (p->tensors[t].kind == CPU_T_INPUT || p->tensors[t].kind == CPU_T_OUTPUT))
            p->aliases[p->n_aliases++] = t;
    return SEGRT_OK;
}

sg_status sg_cpu_plan_build(const sg_graph *g, int32_t threads, sg_cpu_plan **out)
{
    sg_cpu_plan *p = sg_calloc(1, sizeof *p);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    p->threads = threads;
    sg_status s = sg_graph_clone(g, &p->g);
    if (s == SEGRT_OK && dnnl_engine_create(&p->engine, dnnl_cpu, 0) != dnnl_success)
        s = sg_error(SEGRT_ERROR_INTERNAL, "oneDNN could not create its CPU engine");
    if (s == SEGRT_OK) {
        p->value_tensor = sg_calloc((size_t)p->g->n_values + 1, sizeof *p->value_tensor);
        p->fused = sg_calloc((size_t)p->g->n_nodes + 1, 1);
        p->inputs = sg_calloc((size_t)p->g->n_inputs + 1, sizeof *p->inputs);
        p->outputs = sg_calloc((size_t)p->g->n_outputs + 1, sizeof *p->outputs);
        p->uses = sg_graph_use_counts(p->g);
        p->reader = first_readers(p->g);
        if (!p->value_tensor || !p->fused || !p->inputs || !p->outputs || !p->uses || !p->reader)
            s = SEGRT_ERROR_OUT_OF_MEMORY;
    }
    if (s == SEGRT_OK)
        s = bind_graph_values(p);
    for (int32_t i = 0; s == SEGRT_OK && i < p->g->n_nodes; i++)
        if (!p->g->nodes[i].dead && !p->fused[i]) {
            double t0 = sg_now_seconds();
            s = build_node(p, i);
            sg_report_node(&p->report, p->g->nodes[i].name, sg_op_name(p->g->nodes[i].op), sg_now_seconds() - t0);
        }
    p->cur = NULL;
    if (s == SEGRT_OK)
        s = bind_outputs(p);
    if (s == SEGRT_OK)
        s = plan_memory(p);
    if (s != SEGRT_OK) {
        sg_cpu_plan_free(p);
        return s;
    }
    *out = p;
    return SEGRT_OK;
}

const segrt_build_report *sg_cpu_plan_report(const sg_cpu_plan *p) { return &p->report; }

void sg_cpu_plan_free(sg_cpu_plan *p)
{
    if (!p)
        return;
    for (int32_t i = 0; i < p->n_steps; i++) {
        dnnl_primitive_destroy(p->steps[i].prim);
        free(p->steps[i].params);
    }
    free(p->steps);
    free(p->tensors);
    for (int32_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->value_tensor);
    free(p->fused);
    free(p->uses);
    free(p->reader);
    free(p->inputs);
    free(p->outputs);
    free(p->aliases);
    if (p->engine)
        dnnl_engine_destroy(p->engine);
    sg_graph_free(p->g);
    free(p);
}

size_t sg_cpu_plan_arena_bytes(const sg_cpu_plan *p) { return p->arena_bytes; }

size_t sg_cpu_plan_scratch_bytes(const sg_cpu_plan *p) { return p->scratch_bytes + p->kscratch_bytes; }

int32_t sg_cpu_plan_step_count(const sg_cpu_plan *p, int32_t *fallback_steps)
{
    int32_t f = 0;
    for (int32_t i = 0; i < p->n_steps; i++)
        f += p->steps[i].fallback;
    if (fallback_steps)
        *fallback_steps = f;
    return p->n_steps;
}
