/* Data movement and everything else oneDNN lacks, on the CPU with threads:
 *  - Transpose as a oneDNN reorder from a strided view of its input (a
 *    transpose is exactly that), threaded by oneDNN;
 *  - every other operator that computes each index of axis 0 from that index
 *    alone (Softmax, LayerNorm, reductions and gathers along other axes, Pad
 *    and Slice that leave axis 0 alone, elementwise operators with
 *    broadcasting, ...) on its reference kernel over chunks of axis 0 in
 *    parallel: exact libm arithmetic (oneDNN's softmax loses NaN), on every
 *    core. */
#include "backend/cpu/cpu_internal.h"
#include "backend/ref/ref.h"

#include <omp.h>
#include <string.h>

sg_status cpu_build_transpose(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->outputs[0] < 0 || n->inputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    if (x < 0 || !p->tensors[x].has_md || !cpu_tensor_is_plain(&p->tensors[x]) || p->tensors[x].rank < 2)
        return SEGRT_ERROR_UNSUPPORTED;
    const cpu_tensor xt = p->tensors[x];
    int32_t rank = xt.rank, np;
    int32_t perm[SEGRT_MAX_RANK];
    const int64_t *pa = sg_attr_ints(n, "perm", &np);
    for (int32_t d = 0; d < rank; d++)
        perm[d] = pa ? (int32_t)pa[d] : rank - 1 - d;
    if (pa && np != rank)
        return SEGRT_ERROR_UNSUPPORTED;
    /* The input read in the output's dim order: dims and strides permuted. */
    dnnl_dims_t xs, vdims, vstrides;
    int64_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        xs[d] = s;
        s *= xt.dims[d];
    }
    int64_t ydims[SEGRT_MAX_RANK];
    for (int32_t d = 0; d < rank; d++) {
        if (perm[d] < 0 || perm[d] >= rank)
            return SEGRT_ERROR_UNSUPPORTED;
        vdims[d] = xt.dims[perm[d]];
        vstrides[d] = xs[perm[d]];
        ydims[d] = vdims[d];
    }
    dnnl_memory_desc_t view;
    if (dnnl_memory_desc_init_by_strides(&view, rank, vdims, xt.md.data_type, vstrides) != dnnl_success)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t xv;
    SG_TRY(cpu_tensor_new_alias(p, x, &view, &xv));
    int32_t y;
    SG_TRY(cpu_tensor_new_plain(p, CPU_T_ARENA, xt.dtype, rank, ydims, &y));
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, &view, p->engine, &p->tensors[y].md, p->engine, NULL) !=
        dnnl_success) {
        p->n_tensors -= 2;
        return SEGRT_ERROR_UNSUPPORTED;
    }
    cpu_step *st;
    sg_status s2 = cpu_step_new(p, n->name, &st);
    if (s2 != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s2;
    }
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    st->args[0] = (cpu_arg){DNNL_ARG_FROM, xv};
    st->args[1] = (cpu_arg){DNNL_ARG_TO, y};
    st->n_args = 2;
    p->value_tensor[n->outputs[0]] = y;
    return SEGRT_OK;
}

typedef struct rows_params {
    int64_t rows;      /* extent of axis 0 */
    int32_t rank;      /* of the outputs, and of the operands that are cut */
    int64_t row_elems; /* elements of one index of axis 0, per tensor arg */
} rows_params;

static sg_status rows_chunk(const cpu_step *s, sg_cpu_exec *e, int64_t from, int64_t to)
{
    sg_ref_kernel_fn fn = sg_ref_kernel(s->node->op);
    sg_tensor views[CPU_MAX_ARGS];
    const sg_tensor *in[CPU_MAX_ARGS];
    sg_tensor *out[CPU_MAX_ARGS];
    const rows_params *rp = s->params;
    int32_t n_in = s->n_args - s->n_outputs;
    for (int32_t a = 0; a < s->n_args; a++) {
        if (s->args[a].tensor < 0) {
            if (a < n_in)
                in[a] = NULL;
            else
                out[a - n_in] = NULL;
            continue;
        }
        const cpu_tensor *t = &e->plan->tensors[s->args[a].tensor];
        sg_tensor *v = &views[a];
        memset(v, 0, sizeof *v);
        v->dtype = t->dtype;
        v->rank = t->rank;
        memcpy(v->dims, t->dims, sizeof v->dims);
        v->data = e->ptr[s->args[a].tensor];
        /* Tensors of the output's rank with the full axis 0 are cut to the
         * chunk; the rest (broadcast operands, scale, bias, pads, indices
         * of lower rank) stay whole. */
        if (t->rank == rp->rank && t->dims[0] == rp->rows) {
            int64_t per = 1;
            for (int32_t d = 1; d < t->rank; d++)
                per *= t->dims[d];
            v->dims[0] = to - from;
            v->data = (char *)v->data + from * per * (int64_t)segrt_dtype_size(t->dtype);
        }
        if (a < n_in)
            in[a] = v;
        else
            out[a - n_in] = v;
    }
    return fn(s->node, in, n_in, out, s->n_outputs);
}

static sg_status rows_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const rows_params *rp = s->params;
    int threads = omp_get_max_threads();
    int64_t chunks = rp->rows < threads ? rp->rows : threads;
    if (rp->rows * rp->row_elems < CPU_PARALLEL_MIN)
        chunks = 1;
    int failed = 0;
#pragma omp parallel for schedule(static) if (chunks > 1) reduction(| : failed)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t from = rp->rows * c / chunks, to = rp->rows * (c + 1) / chunks;
        failed |= rows_chunk(s, e, from, to) != SEGRT_OK;
    }
    /* A worker's message is in its own thread's buffer: redo it here. */
    return failed ? rows_chunk(s, e, 0, rp->rows) : SEGRT_OK;
}

/* A constant int input's values, or false. */
static bool const_ints(const sg_cpu_plan *p, const sg_node *n, int32_t i, int64_t *vals, int32_t cap, int32_t *count)
{
    if (i >= n->n_inputs || n->inputs[i] < 0)
        return false;
    const sg_value *v = &p->g->values[n->inputs[i]];
    int64_t numel;
    if (!v->data || !sg_dtype_is_integer(v->dtype) || !sg_shape_numel(&v->shape, &numel) || numel > cap)
        return false;
    for (int64_t k = 0; k < numel; k++)
        vals[k] = sg_dtype_load_i64(v->dtype, sg_blob_data(v->data), k);
    *count = (int32_t)numel;
    return true;
}

/* Whether node n computes each index of axis 0 from that index alone, so
 * that chunks of axis 0 can run apart. Beyond the shape rule checked by the
 * caller (outputs of the same rank with the same axis 0), the operators
 * that act along an axis must not act along axis 0. */
static bool rows_independent(const sg_cpu_plan *p, const sg_node *n, int32_t rank)
{
    int64_t v[2 * SEGRT_MAX_RANK];
    int32_t c = 0;
    switch (n->op) {
    case SG_OP_SOFTMAX:
    case SG_OP_LOG_SOFTMAX:
    case SG_OP_LAYER_NORMALIZATION:
    case SG_OP_ARG_MAX:
    case SG_OP_GATHER:
    case SG_OP_SPLIT:
    case SG_OP_CONCAT: {
        int64_t axis = sg_attr_int(n, "axis", n->op == SG_OP_SOFTMAX || n->op == SG_OP_LOG_SOFTMAX ||
                                                      n->op == SG_OP_LAYER_NORMALIZATION ? -1 : 0);
        return (axis < 0 ? axis + rank : axis) >= 1;
    }
    case SG_OP_PAD: /* pads [begin..., end...]: none on axis 0 */
        if (!const_ints(p, n, 1, v, 2 * SEGRT_MAX_RANK, &c) || c != 2 * rank || (n->n_inputs > 3 && n->inputs[3] >= 0))
            return false;
        return v[0] == 0 && v[rank] == 0;
    case SG_OP_SLICE: /* explicit axes, none of them 0 */
        if (!const_ints(p, n, 3, v, SEGRT_MAX_RANK, &c))
            return false;
        for (int32_t k = 0; k < c; k++)
            if (v[k] == 0 || v[k] == -rank)
                return false;
        return true;
    case SG_OP_TRANSPOSE: {
        int32_t np;
        const int64_t *perm = sg_attr_ints(n, "perm", &np);
        return perm && np == rank && perm[0] == 0;
    }
    case SG_OP_REDUCE_MEAN: case SG_OP_REDUCE_SUM: case SG_OP_REDUCE_MAX: case SG_OP_REDUCE_MIN:
    case SG_OP_CAST: case SG_OP_WHERE: case SG_OP_EQUAL: case SG_OP_LESS: case SG_OP_GREATER: case SG_OP_NOT:
    case SG_OP_AND: case SG_OP_OR: case SG_OP_POW: case SG_OP_MAX: case SG_OP_MIN: case SG_OP_SUM: case SG_OP_MEAN:
    case SG_OP_ADD: case SG_OP_SUB: case SG_OP_MUL: case SG_OP_DIV: case SG_OP_CLIP: case SG_OP_PRELU:
    case SG_OP_BATCH_NORMALIZATION: case SG_OP_TILE: case SG_OP_EXPAND: case SG_OP_DEPTH_TO_SPACE:
    case SG_OP_SPACE_TO_DEPTH: case SG_OP_RELU: case SG_OP_LEAKY_RELU: case SG_OP_ELU: case SG_OP_SELU:
    case SG_OP_SIGMOID: case SG_OP_HARD_SIGMOID: case SG_OP_HARD_SWISH: case SG_OP_TANH: case SG_OP_SOFTPLUS:
    case SG_OP_GELU: case SG_OP_ERF: case SG_OP_SQRT: case SG_OP_EXP: case SG_OP_LOG: case SG_OP_NEG:
    case SG_OP_ABS: case SG_OP_RECIPROCAL: case SG_OP_FLOOR: case SG_OP_CEIL: case SG_OP_SIN: case SG_OP_COS:
    case SG_OP_SIGN: case SG_OP_ROUND: case SG_OP_MISH: case SG_OP_IS_NAN: case SG_OP_IS_INF:
    case SG_OP_LESS_OR_EQUAL: case SG_OP_GREATER_OR_EQUAL: case SG_OP_XOR: case SG_OP_MOD:
        /* Elementwise, per-channel or along other axes: the shape rule
         * (same rank, same axis 0 in and out) is the whole condition. A
         * reduction over axis 0 changes it, or the rank. */
        return true;
    default:
        return false;
    }
}

sg_status cpu_build_rows(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    const sg_value *xv = n->n_inputs > 0 && n->inputs[0] >= 0 ? &p->g->values[n->inputs[0]] : NULL;
    if (!xv || xv->shape.rank < 2 || n->outputs[0] < 0 || !sg_ref_kernel(n->op))
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t rank = xv->shape.rank;
    int64_t rows = xv->shape.d[0].size;
    /* Every output keeps the rank and axis 0 of input 0. */
    for (int32_t k = 0; k < n->n_outputs; k++) {
        const sg_value *ov = n->outputs[k] >= 0 ? &p->g->values[n->outputs[k]] : NULL;
        if (ov && (ov->shape.rank != rank || ov->shape.d[0].size != rows))
            return SEGRT_ERROR_UNSUPPORTED;
    }
    /* LayerNormalization's optional Mean/InvStdDev keep axis 0 too; a
     * reference kernel with fewer outputs is handled by the same rule. */
    if (rows < 2 || !rows_independent(p, n, rank) || n->n_inputs + n->n_outputs > CPU_MAX_ARGS)
        return SEGRT_ERROR_UNSUPPORTED;
    rows_params *rp = sg_malloc(sizeof *rp);
    if (!rp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    rp->rows = rows;
    rp->rank = rank;
    rp->row_elems = 1;
    for (int32_t d = 1; d < rank; d++)
        rp->row_elems *= xv->shape.d[d].size;
    return cpu_reference_step(p, n, rows_kernel, rp);
}
