/* Builders for the reductions (the Reduce* operators, ArgMax, ArgMin,
 * GlobalAveragePool, GlobalMaxPool) and Softmax/LogSoftmax.
 *
 * The reduction kernel works on keepdims-shaped views. Where the graph
 * drops the reduced dims, the step's output tensor has the graph's dims
 * and the run function views it with the reduced dims put back (size 1),
 * so no alias or copy is needed. The input is taken in whatever layout it
 * has: the kernel reads any strides and is coalesced for the usual ones
 * (a contiguous row, or the spatial plane of a channels-last tensor). */
#include "backend/cuda/cuda_internal.h"

#include "graph/infer.h"

#include <string.h>

typedef struct reduce_params {
    sgk_reduce_op op;
    bool select_last;
    bool drop;                       /* the output lacks the reduced dims */
    int32_t rank;                    /* the input's */
    bool reduced[SEGRT_MAX_RANK];
} reduce_params;

/* y seen with x's rank, size 1 (stride 0) along the reduced dims. */
static sgk_view keepdims_view(const reduce_params *rp, const sgk_view *y)
{
    if (!rp->drop)
        return *y;
    sgk_view k = *y;
    k.rank = rp->rank;
    for (int32_t d = 0, j = 0; d < rp->rank; d++) {
        if (rp->reduced[d]) {
            k.dims[d] = 1;
            k.strides[d] = 0;
        } else {
            k.dims[d] = y->dims[j];
            k.strides[d] = y->strides[j];
            j++;
        }
    }
    return k;
}

static sg_status reduce_run(const cuda_step *s, cuda_run *r)
{
    const reduce_params *rp = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[1]);
    sgk_view k = keepdims_view(rp, &y);
    return sgk_reduce(r->stream, rp->op, &k, &x, rp->select_last, s->scratch_bytes ? r->scratch : NULL);
}

/* A plain copy (noop_with_empty_axes with no axes), converting the dtype
 * where the output's storage differs. */
static sg_status copy_run(const cuda_step *s, cuda_run *r)
{
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[1]);
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    return sgk_map(r->stream, &mp, &y, 1, &x);
}

/* The axes of a Reduce* node, from the input (constant) or the attribute,
 * whichever is present (exporters mix the opset forms up; shape inference
 * reads either too). *count -1: the input is computed at run time. */
static sg_status read_axes(const sg_cuda_plan *p, const sg_node *n, int64_t *axes, int32_t *count)
{
    *count = 0;
    if (n->n_inputs > 1 && n->inputs[1] >= 0) {
        const sg_value *av = &p->g->values[n->inputs[1]];
        int64_t numel = 0;
        if (!sg_shape_numel(&av->shape, &numel))
            return sg_node_error(n, SEGRT_ERROR_INTERNAL, "axes input has no static shape");
        if (numel == 0)
            return SEGRT_OK;
        if (!av->data) {
            *count = -1;
            return SEGRT_OK;
        }
        if (numel > SEGRT_MAX_RANK || !sg_dtype_is_integer(av->dtype))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axes must be at most %d integers",
                                 SEGRT_MAX_RANK);
        const void *data = sg_blob_data(av->data);
        for (int64_t i = 0; i < numel; i++)
            axes[i] = sg_dtype_load_i64(av->dtype, data, i);
        *count = (int32_t)numel;
        return SEGRT_OK;
    }
    const int64_t *a = sg_attr_ints(n, "axes", count);
    if (*count > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axes has %d values", *count);
    if (a)
        memcpy(axes, a, sizeof(int64_t) * (size_t)*count);
    return SEGRT_OK;
}

/* Adds the step: x's tensor reduced into node n's output 0 (keepdims or
 * not, as the graph's output dims say). */
static sg_status reduce_step(sg_cuda_plan *p, const sg_node *n, const reduce_params *proto)
{
    int32_t xv = n->inputs[0], yv = n->outputs[0];
    int32_t x, y;
    SG_TRY(cuda_value_as(p, xv, SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &x));
    cuda_layout l = proto->drop ? CUDA_LAYOUT_PLAIN : cuda_dense_layout(p, x);
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, yv), l, &y));
    reduce_params *rp = sg_malloc(sizeof *rp);
    if (!rp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *rp = *proto;
    sgk_view xg = cuda_geometry_view(p, x), yg = cuda_geometry_view(p, y);
    sgk_view kg = keepdims_view(rp, &yg);
    size_t scratch = sgk_reduce_scratch(rp->op, &kg, &xg);
    int32_t args[2] = {x, y};
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "segrt reduce", reduce_run, args, 2, 1, rp, NULL, &st));
    st->scratch_bytes = scratch;
    return SEGRT_OK;
}

static bool float_dtype(sg_dtype t) { return sg_dtype_is_float(t); }

static sgk_reduce_op reduce_op_of(sg_op op)
{
    switch (op) {
    case SG_OP_REDUCE_MEAN: return SGK_REDUCE_MEAN;
    case SG_OP_REDUCE_SUM: return SGK_REDUCE_SUM;
    case SG_OP_REDUCE_MAX: return SGK_REDUCE_MAX;
    case SG_OP_REDUCE_MIN: return SGK_REDUCE_MIN;
    case SG_OP_REDUCE_PROD: return SGK_REDUCE_PROD;
    case SG_OP_REDUCE_L1: return SGK_REDUCE_L1;
    case SG_OP_REDUCE_L2: return SGK_REDUCE_L2;
    case SG_OP_REDUCE_SUM_SQUARE: return SGK_REDUCE_SUM_SQUARE;
    case SG_OP_REDUCE_LOG_SUM: return SGK_REDUCE_LOG_SUM;
    default: return SGK_REDUCE_LOG_SUM_EXP;
    }
}

sg_status cuda_build_reduce(sg_cuda_plan *p, const sg_node *n)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs an input and an output");
    const sg_value *xv = &p->g->values[n->inputs[0]];
    int32_t rank = xv->shape.rank;
    sg_dtype xt = xv->dtype;
    reduce_params rp;
    memset(&rp, 0, sizeof rp);
    rp.rank = rank;
    bool keep = true;
    switch (n->op) {
    case SG_OP_GLOBAL_AVERAGE_POOL:
    case SG_OP_GLOBAL_MAX_POOL:
        if (rank < 2)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
        if (!float_dtype(xt))
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xt));
        rp.op = n->op == SG_OP_GLOBAL_MAX_POOL ? SGK_REDUCE_MAX : SGK_REDUCE_MEAN;
        for (int32_t d = 2; d < rank; d++)
            rp.reduced[d] = true;
        break;
    case SG_OP_ARG_MAX:
    case SG_OP_ARG_MIN: {
        if (rank < 1)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
        if (!float_dtype(xt) && !sg_dtype_is_integer(xt) && xt != SEGRT_DTYPE_BOOL)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xt));
        int32_t axis;
        SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), rank, &axis));
        /* The reference refuses an empty axis when there is anything to
         * index; the shapes are known, so refuse it here. */
        int64_t others = 1;
        for (int32_t d = 0; d < rank; d++)
            if (d != axis)
                others *= xv->shape.d[d].size;
        if (xv->shape.d[axis].size == 0 && others > 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot take %s over an empty axis",
                                 sg_op_name(n->op));
        rp.op = n->op == SG_OP_ARG_MAX ? SGK_REDUCE_ARGMAX : SGK_REDUCE_ARGMIN;
        rp.select_last = sg_attr_int(n, "select_last_index", 0) != 0;
        rp.reduced[axis] = true;
        keep = sg_attr_int(n, "keepdims", 1) != 0;
        break;
    }
    case SG_OP_REDUCE_MEAN:
    case SG_OP_REDUCE_SUM:
    case SG_OP_REDUCE_MAX:
    case SG_OP_REDUCE_MIN:
    case SG_OP_REDUCE_PROD:
    case SG_OP_REDUCE_L1:
    case SG_OP_REDUCE_L2:
    case SG_OP_REDUCE_SUM_SQUARE:
    case SG_OP_REDUCE_LOG_SUM:
    case SG_OP_REDUCE_LOG_SUM_EXP: {
        bool minmax = n->op == SG_OP_REDUCE_MAX || n->op == SG_OP_REDUCE_MIN;
        /* ReduceMax/Min take bool from opset 20: any and all. */
        if (!float_dtype(xt) && !sg_dtype_is_integer(xt) && !(minmax && xt == SEGRT_DTYPE_BOOL))
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xt));
        int64_t axes[SEGRT_MAX_RANK];
        int32_t count;
        SG_TRY(read_axes(p, n, axes, &count));
        if (count < 0)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "axes computed at run time");
        rp.op = reduce_op_of(n->op);
        /* No axes with noop_with_empty_axes: the input itself, or for the
         * reductions that map their elements, each element's image (a
         * reduction over no dims). */
        bool maps = rp.op != SGK_REDUCE_MEAN && rp.op != SGK_REDUCE_SUM && rp.op != SGK_REDUCE_MAX &&
                    rp.op != SGK_REDUCE_MIN && rp.op != SGK_REDUCE_PROD;
        bool noop = count == 0 && sg_attr_int(n, "noop_with_empty_axes", 0) != 0;
        if (noop && !maps) {
            int32_t x, y;
            SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &x));
            SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, x), &y));
            int32_t args[2] = {x, y};
            cuda_step *st;
            return cuda_step_new(p, n, "segrt copy", copy_run, args, 2, 1, NULL, NULL, &st);
        }
        for (int32_t d = 0; d < rank; d++)
            rp.reduced[d] = count == 0 && !noop;
        for (int32_t i = 0; i < count; i++) {
            int32_t a;
            SG_TRY(sg_infer_axis(n, axes[i], rank, &a));
            rp.reduced[a] = true;
        }
        keep = sg_attr_int(n, "keepdims", 1) != 0;
        break;
    }
    default:
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "not a reduction");
    }
    /* keepdims only matters where some dim is reduced. */
    for (int32_t d = 0; d < rank && !keep; d++)
        rp.drop |= rp.reduced[d];
    const sg_value *yv = &p->g->values[n->outputs[0]];
    int32_t want = 0;
    for (int32_t d = 0; d < rank; d++)
        want += !(rp.drop && rp.reduced[d]);
    if (yv->shape.rank != want)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output rank %d; the reduction gives %d", yv->shape.rank,
                             want);
    return reduce_step(p, n, &rp);
}

/* Softmax, LogSoftmax ---------------------------------------------------------- */

typedef struct softmax_params {
    int32_t axis;
    bool log_form;
} softmax_params;

static sg_status softmax_run(const cuda_step *s, cuda_run *r)
{
    const softmax_params *sp = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[1]);
    return sgk_softmax(r->stream, &y, &x, sp->axis, sp->log_form);
}

sg_status cuda_build_softmax(sg_cuda_plan *p, const sg_node *n)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs an input and an output");
    /* Before opset 13 the input was coerced to 2-D at axis (default 1)
     * and normalised over all of [axis, rank); the reference implements
     * the opset 13 form only, and the importer takes opset 13 and later. */
    if (p->g->opset < 13)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "opset %lld semantics (coerced to 2-D)",
                             (long long)p->g->opset);
    const sg_value *xv = &p->g->values[n->inputs[0]];
    if (!float_dtype(xv->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xv->dtype));
    if (xv->shape.rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    int32_t axis;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), xv->shape.rank, &axis));
    int32_t x, y;
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &x));
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, x), &y));
    softmax_params *sp = sg_malloc(sizeof *sp);
    if (!sp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sp->axis = axis;
    sp->log_form = n->op == SG_OP_LOG_SOFTMAX;
    int32_t args[2] = {x, y};
    cuda_step *st;
    return cuda_step_new(p, n, "segrt softmax", softmax_run, args, 2, 1, sp, NULL, &st);
}
