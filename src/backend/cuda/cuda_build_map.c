/* Builders for the elementwise operators: each becomes one sgk_map step
 * (a few for Clip with computed bounds and for variadic ops with more
 * inputs than one map takes).
 *
 * Inputs are taken in whatever dtype and layout they have: sgk_map
 * converts on load and walks any strides, so asking for a particular
 * layout would only add conversion steps. Broadcasting is done at run time
 * with cuda_view_bcast (stride 0 along broadcast dims). The output takes
 * the layout of the first input with the output's dims when that input is
 * dense (PLAIN or CHANNELS_LAST), so chains of elementwise ops between
 * convolutions stay channels-last. */
#include "backend/cuda/cuda_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A map step's parameters: the map and the output's dims, which every
 * input is broadcast to. */
typedef struct map_step {
    sgk_map_params mp;
    int32_t n_in;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
} map_step;

static sg_status run_map(const cuda_step *s, cuda_run *r)
{
    const map_step *m = s->params;
    sgk_view in[SGK_MAP_MAX_IN];
    for (int32_t i = 0; i < m->n_in; i++)
        in[i] = cuda_view_bcast(r, s->args[i], m->rank, m->dims);
    sgk_view out = cuda_view(r, s->args[m->n_in]);
    return sgk_map(r->stream, &m->mp, &out, m->n_in, in);
}

/* Appends a step of node n mapping tensors in[0..n_in) into tensor out. */
static sg_status map_add(sg_cuda_plan *p, const sg_node *n, const sgk_map_params *mp, const int32_t *in,
                         int32_t n_in, int32_t out)
{
    if (n_in < 1 || n_in > SGK_MAP_MAX_IN)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "a map of %d inputs", n_in);
    map_step *m = sg_calloc(1, sizeof *m);
    if (!m)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    m->mp = *mp;
    m->n_in = n_in;
    const cuda_tensor *t = &p->tensors[out];
    m->rank = t->rank;
    memcpy(m->dims, t->dims, sizeof m->dims);
    int32_t args[SGK_MAP_MAX_IN + 1];
    memcpy(args, in, sizeof(int32_t) * (size_t)n_in);
    args[n_in] = out;
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "segrt map", run_map, args, n_in + 1, 1, m, NULL, &st));
    cuda_step_any_view(st);
    int64_t numel = 1;
    for (int32_t d = 0; d < m->rank; d++)
        numel *= m->dims[d];
    st->flops = (double)numel;
    return SEGRT_OK;
}

static sgk_map_params map_params(sgk_map_op op)
{
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = op;
    mp.act = SGK_ACT_NONE;
    return mp;
}

/* Graph value v's static dims. */
static sg_status value_dims(const sg_cuda_plan *p, const sg_node *n, int32_t v, int32_t *rank, int64_t *dims)
{
    const sg_value *val = &p->g->values[v];
    *rank = 0;
    if (!sg_shape_dims(&val->shape, dims))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "value `%s` has no static shape", val->name);
    *rank = val->shape.rank;
    return SEGRT_OK;
}

/* The layout of the first of tensors in[] with the output's dims, when
 * that one is dense; PLAIN otherwise. */
static cuda_layout out_layout(const sg_cuda_plan *p, const int32_t *in, int32_t n_in, int32_t rank,
                              const int64_t *dims)
{
    for (int32_t i = 0; i < n_in; i++) {
        const cuda_tensor *t = &p->tensors[in[i]];
        if (t->rank == rank && memcmp(t->dims, dims, sizeof(int64_t) * (size_t)rank) == 0)
            return cuda_dense_layout(p, in[i]);
    }
    return CUDA_LAYOUT_PLAIN;
}

/* Input i of n as a tensor, as it is. */
static sg_status input(sg_cuda_plan *p, const sg_node *n, int32_t i, int32_t *t)
{
    if (i >= n->n_inputs || n->inputs[i] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input %d is missing", i);
    return cuda_value_as(p, n->inputs[i], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, t);
}

/* Creates output 0 of n for inputs in[] (layout as out_layout), dtype
 * cuda_out_dtype of value `as_value` (the node's output, or that of a
 * fused activation whose value the tensor ends up holding). */
static sg_status output(sg_cuda_plan *p, const sg_node *n, const sg_node *dtype_node, int32_t as_value,
                        const int32_t *in, int32_t n_in, int32_t *out)
{
    if (n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output 0 is missing");
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    SG_TRY(value_dims(p, n, n->outputs[0], &rank, dims));
    return cuda_output_new(p, n, 0, cuda_out_dtype(p, dtype_node, as_value),
                           out_layout(p, in, n_in, rank, dims), out);
}

/* Unary ---------------------------------------------------------------------- */

sg_status cuda_build_unary(sg_cuda_plan *p, const sg_node *n)
{
    sgk_map_params mp = map_params(SGK_COPY);
    switch (n->op) {
    case SG_OP_RELU: mp.op = SGK_RELU; break;
    case SG_OP_LEAKY_RELU:
        mp.op = SGK_LEAKY_RELU;
        mp.alpha = sg_attr_float(n, "alpha", 0.01f);
        break;
    case SG_OP_ELU:
        mp.op = SGK_ELU;
        mp.alpha = sg_attr_float(n, "alpha", 1.0f);
        break;
    case SG_OP_SELU:
        mp.op = SGK_SELU;
        mp.alpha = sg_attr_float(n, "alpha", 1.67326319217681884765625f);
        mp.beta = sg_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case SG_OP_SIGMOID: mp.op = SGK_SIGMOID; break;
    case SG_OP_HARD_SIGMOID:
        mp.op = SGK_HARD_SIGMOID;
        mp.alpha = sg_attr_float(n, "alpha", 0.2f);
        mp.beta = sg_attr_float(n, "beta", 0.5f);
        break;
    case SG_OP_HARD_SWISH: mp.op = SGK_HARD_SWISH; break;
    case SG_OP_TANH: mp.op = SGK_TANH; break;
    case SG_OP_SOFTPLUS: mp.op = SGK_SOFTPLUS; break;
    case SG_OP_GELU: {
        const char *approx = sg_attr_string(n, "approximate", "none");
        if (strcmp(approx, "tanh") == 0)
            mp.op = SGK_GELU_TANH;
        else if (strcmp(approx, "none") == 0)
            mp.op = SGK_GELU;
        else
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "approximate=\"%s\" is not supported", approx);
        break;
    }
    case SG_OP_ERF: mp.op = SGK_ERF; break;
    case SG_OP_SQRT: mp.op = SGK_SQRT; break;
    case SG_OP_EXP: mp.op = SGK_EXP; break;
    case SG_OP_LOG: mp.op = SGK_LOG; break;
    case SG_OP_NEG: mp.op = SGK_NEG; break;
    case SG_OP_ABS: mp.op = SGK_ABS; break;
    case SG_OP_RECIPROCAL: mp.op = SGK_RECIPROCAL; break;
    case SG_OP_FLOOR: mp.op = SGK_FLOOR; break;
    case SG_OP_CEIL: mp.op = SGK_CEIL; break;
    case SG_OP_NOT: mp.op = SGK_NOT; break;
    case SG_OP_SIN: mp.op = SGK_SIN; break;
    case SG_OP_COS: mp.op = SGK_COS; break;
    case SG_OP_ROUND: mp.op = SGK_ROUND; break;
    case SG_OP_SIGN: mp.op = SGK_SIGN; break;
    case SG_OP_SOFTSIGN: mp.op = SGK_SOFTSIGN; break;
    case SG_OP_MISH: mp.op = SGK_MISH; break;
    case SG_OP_IS_NAN: mp.op = SGK_IS_NAN; break;
    case SG_OP_IS_INF:
        mp.op = SGK_IS_INF;
        mp.alpha = sg_attr_int(n, "detect_negative", 1) != 0 ? 1.0f : 0.0f;
        mp.beta = sg_attr_int(n, "detect_positive", 1) != 0 ? 1.0f : 0.0f;
        break;
    default: return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "not a unary operator");
    }
    if (n->n_inputs < 1 || n->inputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input 0 is missing");
    /* The dtypes the reference accepts: bool for Not; integers only for
     * the ops the spec defines on them; floats for the rest. */
    sg_dtype xdt = p->g->values[n->inputs[0]].dtype;
    bool ok = n->op == SG_OP_NOT ? xdt == SEGRT_DTYPE_BOOL
              : sg_dtype_is_integer(xdt)
                  ? (n->op == SG_OP_RELU || n->op == SG_OP_NEG || n->op == SG_OP_ABS || n->op == SG_OP_SIGN)
                  : sg_dtype_is_float(xdt);
    if (!ok)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s inputs are not supported", segrt_dtype_name(xdt));
    int32_t x, y;
    SG_TRY(input(p, n, 0, &x));
    SG_TRY(output(p, n, n, n->outputs[0], &x, 1, &y));
    return map_add(p, n, &mp, &x, 1, y);
}

/* Binary ----------------------------------------------------------------------- */

/* A Relu or LeakyRelu that only reads n's output and can be applied as
 * n's post activation: its node index (act and alpha set), or -1. */
static int32_t fusable_act(const sg_cuda_plan *p, const sg_node *n, sgk_act *act, float *alpha)
{
    int32_t v = n->outputs[0];
    if (!sg_dtype_is_float(p->g->values[v].dtype))
        return -1;
    int32_t r = cuda_single_reader(p, v);
    if (r < 0 || r >= p->g->n_nodes || p->fused[r])
        return -1;
    const sg_node *rn = &p->g->nodes[r];
    if (rn->dead || rn->n_inputs < 1 || rn->inputs[0] != v || rn->n_outputs < 1 || rn->outputs[0] < 0)
        return -1;
    if (rn->op == SG_OP_RELU) {
        *act = SGK_ACT_RELU;
        *alpha = 0;
        return r;
    }
    if (rn->op == SG_OP_LEAKY_RELU) {
        *act = SGK_ACT_LEAKY_RELU;
        *alpha = sg_attr_float(rn, "alpha", 0.01f);
        return r;
    }
    return -1;
}

sg_status cuda_build_binary(sg_cuda_plan *p, const sg_node *n)
{
    sgk_map_params mp = map_params(SGK_ADD);
    switch (n->op) {
    case SG_OP_ADD: mp.op = SGK_ADD; break;
    case SG_OP_SUB: mp.op = SGK_SUB; break;
    case SG_OP_MUL: mp.op = SGK_MUL; break;
    case SG_OP_DIV: mp.op = SGK_DIV; break;
    case SG_OP_POW: mp.op = SGK_POW; break;
    case SG_OP_EQUAL: mp.op = SGK_EQUAL; break;
    case SG_OP_LESS: mp.op = SGK_LESS; break;
    case SG_OP_GREATER: mp.op = SGK_GREATER; break;
    case SG_OP_AND: mp.op = SGK_AND; break;
    case SG_OP_OR: mp.op = SGK_OR; break;
    case SG_OP_LESS_OR_EQUAL: mp.op = SGK_LESS_EQUAL; break;
    case SG_OP_GREATER_OR_EQUAL: mp.op = SGK_GREATER_EQUAL; break;
    case SG_OP_XOR: mp.op = SGK_XOR; break;
    case SG_OP_MOD:
        mp.op = SGK_MOD;
        mp.alpha = sg_attr_int(n, "fmod", 0) != 0 ? 1.0f : 0.0f;
        break;
    case SG_OP_BIT_SHIFT: {
        const char *dir = sg_attr_string(n, "direction", "");
        if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "direction must be LEFT or RIGHT, not `%s`", dir);
        mp.op = SGK_BIT_SHIFT;
        mp.alpha = strcmp(dir, "LEFT") == 0 ? 1.0f : 0.0f;
        break;
    }
    default: return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "not a binary operator");
    }
    /* Mod on floats is C's remainder only (the spec's fmod=1); BitShift on
     * unsigned integers only. */
    sg_dtype adt = n->n_inputs > 0 && n->inputs[0] >= 0 ? p->g->values[n->inputs[0]].dtype : SEGRT_DTYPE_UNDEFINED;
    if (n->op == SG_OP_MOD && sg_dtype_is_float(adt) && mp.alpha == 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "Mod of floats needs fmod=1");
    if (n->op == SG_OP_BIT_SHIFT && !sg_dtype_is_integer(adt))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "BitShift of %s is not supported", segrt_dtype_name(adt));
    int32_t in[2], y;
    SG_TRY(input(p, n, 0, &in[0]));
    SG_TRY(input(p, n, 1, &in[1]));
    if (n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output 0 is missing");
    /* A residual Add (or a gate's Mul) followed by its ReLU: one pass. */
    int32_t fused = -1;
    if (n->op == SG_OP_ADD || n->op == SG_OP_SUB || n->op == SG_OP_MUL)
        fused = fusable_act(p, n, &mp.act, &mp.act_alpha);
    if (fused >= 0) {
        const sg_node *rn = &p->g->nodes[fused];
        SG_TRY(output(p, n, rn, rn->outputs[0], in, 2, &y));
        SG_TRY(map_add(p, n, &mp, in, 2, y));
        cuda_mark_fused(p, fused);
        cuda_value_set(p, rn->outputs[0], y);
        return SEGRT_OK;
    }
    SG_TRY(output(p, n, n, n->outputs[0], in, 2, &y));
    return map_add(p, n, &mp, in, 2, y);
}

/* Min, Max, Sum, Mean -------------------------------------------------------------- */

sg_status cuda_build_variadic(sg_cuda_plan *p, const sg_node *n)
{
    sgk_map_op op;
    switch (n->op) {
    case SG_OP_MIN: op = SGK_MIN; break;
    case SG_OP_MAX: op = SGK_MAX; break;
    case SG_OP_SUM: op = SGK_SUM; break;
    case SG_OP_MEAN: op = SGK_MEAN; break;
    default: return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "not a variadic operator");
    }
    int32_t count = n->n_inputs;
    if (count < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs at least one input");
    if (count > CUDA_MAX_ARGS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d inputs; at most %d are supported", count,
                             CUDA_MAX_ARGS);
    if (n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output 0 is missing");
    sg_dtype gdt = p->g->values[n->outputs[0]].dtype;
    if (count > SGK_MAP_MAX_IN && op == SGK_MEAN && !sg_dtype_is_float(gdt))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "integer Mean of more than %d inputs",
                             SGK_MAP_MAX_IN);
    int32_t ts[CUDA_MAX_ARGS], y;
    for (int32_t i = 0; i < count; i++)
        SG_TRY(input(p, n, i, &ts[i]));
    SG_TRY(output(p, n, n, n->outputs[0], ts, count, &y));
    sgk_map_params mp = map_params(op);
    if (count <= SGK_MAP_MAX_IN)
        return map_add(p, n, &mp, ts, count, y);

    /* More inputs than one map takes: fold SGK_MAP_MAX_IN at a time into
     * an accumulator that enters the next map as its first input. Float
     * accumulators are float32 (float64 for float64) whatever the storage
     * precision, so a long sum rounds to the storage dtype once. Mean sums
     * and then scales by 1/count. */
    sg_dtype acc_dt = gdt == SEGRT_DTYPE_FLOAT64 ? SEGRT_DTYPE_FLOAT64
                      : sg_dtype_is_float(gdt)   ? SEGRT_DTYPE_FLOAT32
                                                 : p->tensors[y].dtype;
    const cuda_tensor yt = p->tensors[y];
    cuda_layout l = cuda_tensor_layout(&yt);
    mp.op = op == SGK_MEAN ? SGK_SUM : op;
    int32_t done = 0, acc = -1;
    while (done < count) {
        int32_t args[SGK_MAP_MAX_IN], k = 0;
        if (acc >= 0)
            args[k++] = acc;
        while (k < SGK_MAP_MAX_IN && done < count)
            args[k++] = ts[done++];
        int32_t dst = y;
        if (done < count || op == SGK_MEAN)
            SG_TRY(cuda_tensor_new(p, acc_dt, yt.rank, yt.dims, l, &dst));
        SG_TRY(map_add(p, n, &mp, args, k, dst));
        acc = dst;
    }
    if (op == SGK_MEAN) {
        sgk_map_params scale = map_params(SGK_AFFINE);
        scale.alpha = (float)(1.0 / count);
        scale.beta = 0;
        SG_TRY(map_add(p, n, &scale, &acc, 1, y));
    }
    return SEGRT_OK;
}

/* Where --------------------------------------------------------------------------- */

sg_status cuda_build_where(sg_cuda_plan *p, const sg_node *n)
{
    int32_t in[3], y;
    for (int32_t i = 0; i < 3; i++)
        SG_TRY(input(p, n, i, &in[i]));
    if (p->tensors[in[0]].dtype != SEGRT_DTYPE_BOOL)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "condition must be bool");
    SG_TRY(output(p, n, n, n->outputs[0], in, 3, &y));
    sgk_map_params mp = map_params(SGK_WHERE);
    return map_add(p, n, &mp, in, 3, y);
}

/* Clip -------------------------------------------------------------------------------- */

/* Clip's bound k (0 min, 1 max): from input 1 + k when given (opset 11+),
 * else from the attribute (opset 6). *tensor_v is the bound's value
 * (-1 when not an input), *has whether there is a bound at all. */
static void clip_bound(const sg_node *n, int32_t k, int32_t *tensor_v, bool *has, double *attr)
{
    *tensor_v = n->n_inputs > 1 + k ? n->inputs[1 + k] : -1;
    const char *name = k ? "max" : "min";
    *has = *tensor_v >= 0 || sg_attr_find(n, name) != NULL;
    *attr = *tensor_v < 0 && *has ? sg_attr_float(n, name, 0) : 0;
}

sg_status cuda_build_clip(sg_cuda_plan *p, const sg_node *n)
{
    int32_t x, y;
    SG_TRY(input(p, n, 0, &x));
    SG_TRY(output(p, n, n, n->outputs[0], &x, 1, &y));
    sg_dtype gdt = p->g->values[n->inputs[0]].dtype;
    int32_t bv[2];
    bool has[2];
    double bval[2];
    for (int32_t k = 0; k < 2; k++)
        clip_bound(n, k, &bv[k], &has[k], &bval[k]);

    /* One SGK_CLIP map when both bounds are known now and exact in the
     * map's float parameters: every float32/float16/bfloat16 Clip with
     * constant bounds. An absent bound is the dtype's largest finite
     * value, as in the reference (so +-inf clips to it); float64 has
     * none that fits a float, and uses +-inf instead. */
    bool direct = sg_dtype_is_float(gdt);
    for (int32_t k = 0; direct && k < 2; k++) {
        if (bv[k] >= 0) {
            const sg_value *v = &p->g->values[bv[k]];
            int64_t numel;
            direct = v->data && sg_shape_numel(&v->shape, &numel) && numel >= 1;
            if (direct) {
                bval[k] = sg_dtype_load_f64(v->dtype, sg_blob_data(v->data), 0);
                direct = bval[k] != bval[k] || (double)(float)bval[k] == bval[k];
            }
        } else if (!has[k]) {
            double big = gdt == SEGRT_DTYPE_FLOAT64    ? INFINITY
                         : gdt == SEGRT_DTYPE_FLOAT16  ? 65504.0
                         : gdt == SEGRT_DTYPE_BFLOAT16 ? 3.3895313892515355e38
                                                       : FLT_MAX;
            bval[k] = k ? big : -big;
        }
    }
    if (direct) {
        sgk_map_params mp = map_params(SGK_CLIP);
        mp.alpha = (float)bval[0];
        mp.beta = (float)bval[1];
        return map_add(p, n, &mp, &x, 1, y);
    }

    /* Otherwise Max with the lower bound, then Min with the upper one, as
     * maps over the bound tensors (exact for integers and float64, and
     * for bounds computed at run time). A bound given as an attribute (a
     * float) becomes SGK_CLIP with the other side open. */
    if (!has[0] && !has[1]) {
        sgk_map_params mp = map_params(SGK_COPY);
        return map_add(p, n, &mp, &x, 1, y);
    }
    int32_t cur = x;
    for (int32_t k = 0; k < 2; k++) {
        if (!has[k])
            continue;
        bool last = k == 1 || !has[1];
        int32_t dst = y;
        if (!last) {
            const cuda_tensor yt = p->tensors[y];
            SG_TRY(cuda_tensor_new(p, yt.dtype, yt.rank, yt.dims, cuda_tensor_layout(&yt), &dst));
        }
        if (bv[k] >= 0) {
            int32_t args[2] = {cur, -1};
            SG_TRY(cuda_value_as(p, bv[k], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[1]));
            sgk_map_params mp = map_params(k ? SGK_MIN : SGK_MAX);
            SG_TRY(map_add(p, n, &mp, args, 2, dst));
        } else {
            sgk_map_params mp = map_params(SGK_CLIP);
            mp.alpha = k ? -INFINITY : (float)bval[0];
            mp.beta = k ? (float)bval[1] : INFINITY;
            SG_TRY(map_add(p, n, &mp, &cur, 1, dst));
        }
        cur = dst;
    }
    return SEGRT_OK;
}

/* Cast ------------------------------------------------------------------------------- */

sg_status cuda_build_cast(sg_cuda_plan *p, const sg_node *n)
{
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    if (n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output 0 is missing");
    /* At reduced precision a Cast between float dtypes is often none in
     * storage (float16 -> float32 stored as float16): the output is then
     * the input's tensor itself. */
    if (p->tensors[x].dtype == cuda_out_dtype(p, n, n->outputs[0])) {
        cuda_value_set(p, n->outputs[0], x);
        return SEGRT_OK;
    }
    int32_t y;
    SG_TRY(output(p, n, n, n->outputs[0], &x, 1, &y));
    sgk_map_params mp = map_params(SGK_COPY);
    return map_add(p, n, &mp, &x, 1, y);
}

/* PRelu ------------------------------------------------------------------------------ */

sg_status cuda_build_prelu(sg_cuda_plan *p, const sg_node *n)
{
    int32_t in[2], y;
    SG_TRY(input(p, n, 0, &in[0]));
    SG_TRY(input(p, n, 1, &in[1]));
    /* The slope broadcasts to X (numpy rules, aligned right), as in the
     * reference; cuda_view_bcast does exactly that at run time. */
    if (p->tensors[in[1]].rank > p->tensors[in[0]].rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "slope has a larger rank than X");
    SG_TRY(output(p, n, n, n->outputs[0], in, 1, &y));
    sgk_map_params mp = map_params(SGK_PRELU);
    return map_add(p, n, &mp, in, 2, y);
}

/* BatchNormalization (inference) ------------------------------------------------------- */

/* FNV-1a over bytes: names the folded constants by their contents, so two
 * nodes sharing one scale tensor (deduplicated ones, say) but not the same
 * statistics never share an upload. */
static uint64_t fnv1a(const void *data, size_t n, uint64_t h)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Uploads c floats as a [1, C, 1, ...] CONST tensor of the given rank. */
static sg_status channel_const(sg_cuda_plan *p, const void *key, const char *what, const float *host,
                               int64_t c, int32_t rank, int32_t *out)
{
    char tag[64];
    snprintf(tag, sizeof tag, "bn_%s:%016llx", what,
             (unsigned long long)fnv1a(host, sizeof(float) * (size_t)c, 1469598103934665603ull));
    void *dev;
    SG_TRY(cuda_const_upload(p, key, tag, host, sizeof(float) * (size_t)c, &dev));
    int64_t dims[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
    for (int32_t d = 0; d < rank; d++)
        dims[d] = d == 1 ? c : 1;
    cuda_layout_strides(CUDA_LAYOUT_PLAIN, rank, dims, strides);
    return cuda_tensor_const(p, dev, SEGRT_DTYPE_FLOAT32, rank, dims, strides, out);
}

/* BatchNormalization with parameters computed at run time: the per-channel
 * factors a = scale / sqrt(var + eps) and b = B - mean * a are made on the
 * device in float32 (args 5, 6; arg 7 is a temporary), then y = x * a + b. */
typedef struct bn_dyn {
    float eps;
} bn_dyn;

/* A [C] tensor seen as [1, C, 1, ...] of rank `rank`. */
static sgk_view channel_view(const cuda_run *r, int32_t t, int32_t rank, const int64_t *dims)
{
    sgk_view v = cuda_view(r, t);
    sgk_view o;
    memset(&o, 0, sizeof o);
    o.data = v.data;
    o.dtype = v.dtype;
    o.rank = rank;
    for (int32_t i = 0; i < rank; i++)
        o.dims[i] = dims[i];
    o.strides[1] = v.rank ? v.strides[v.rank - 1] : 0;
    return o;
}

static sg_status run_bn_dynamic(const cuda_step *s, cuda_run *r)
{
    const bn_dyn *bp = s->params;
    sgk_view scale = cuda_view(r, s->args[1]), bias = cuda_view(r, s->args[2]);
    sgk_view mean = cuda_view(r, s->args[3]), var = cuda_view(r, s->args[4]);
    sgk_view a = cuda_view(r, s->args[5]), b = cuda_view(r, s->args[6]), t = cuda_view(r, s->args[7]);
    sgk_map_params mp = map_params(SGK_AFFINE);
    mp.alpha = 1.0f;
    mp.beta = bp->eps;
    SG_TRY(sgk_map(r->stream, &mp, &t, 1, &var)); /* t = var + eps */
    mp = map_params(SGK_SQRT);
    SG_TRY(sgk_map(r->stream, &mp, &t, 1, &t));
    sgk_view in2[2] = {scale, t};
    mp = map_params(SGK_DIV);
    SG_TRY(sgk_map(r->stream, &mp, &a, 2, in2)); /* a = scale / sqrt(var + eps) */
    sgk_view in3[2] = {mean, a};
    mp = map_params(SGK_MUL);
    SG_TRY(sgk_map(r->stream, &mp, &t, 2, in3)); /* t = mean * a */
    sgk_view in4[2] = {bias, t};
    mp = map_params(SGK_SUB);
    SG_TRY(sgk_map(r->stream, &mp, &b, 2, in4)); /* b = B - mean * a */
    sgk_view y = cuda_view(r, s->args[8]);
    sgk_view in5[3] = {cuda_view(r, s->args[0]), channel_view(r, s->args[5], y.rank, y.dims),
                       channel_view(r, s->args[6], y.rank, y.dims)};
    mp = map_params(SGK_FMA);
    return sgk_map(r->stream, &mp, &y, 3, in5);
}

static sg_status build_bn_dynamic(sg_cuda_plan *p, const sg_node *n)
{
    int32_t args[9];
    for (int32_t i = 0; i < 5; i++)
        SG_TRY(cuda_value_as(p, n->inputs[i], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[i]));
    const cuda_tensor *xt = &p->tensors[args[0]];
    if (xt->rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    for (int32_t i = 1; i < 5; i++)
        if (p->tensors[args[i]].rank != 1 || p->tensors[args[i]].dims[0] != xt->dims[1])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "parameter %d does not have %lld values", i,
                                 (long long)xt->dims[1]);
    int64_t c = xt->dims[1];
    for (int32_t i = 5; i < 8; i++)
        SG_TRY(cuda_tensor_new(p, SEGRT_DTYPE_FLOAT32, 1, &c, CUDA_LAYOUT_PLAIN, &args[i]));
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, args[0]), &args[8]));
    bn_dyn *bp = sg_malloc(sizeof *bp);
    if (!bp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    bp->eps = sg_attr_float(n, "epsilon", 1e-5f);
    /* a, b and the temporary are written too: 4 outputs for the memory plan. */
    return cuda_step_new(p, n, "segrt batchnorm", run_bn_dynamic, args, 9, 4, bp, NULL, NULL);
}

sg_status cuda_build_batch_norm(sg_cuda_plan *p, const sg_node *n)
{
    if (sg_attr_int(n, "training_mode", 0) != 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "training_mode=1 is not supported");
    for (int32_t j = 1; j < n->n_outputs; j++)
        if (n->outputs[j] >= 0)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                 "the running mean/variance outputs are not supported");
    if (n->n_inputs < 5)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs 5 inputs");
    for (int32_t i = 1; i < 5; i++)
        if (n->inputs[i] < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input %d is missing", i);
    for (int32_t i = 1; i < 5; i++)
        if (!p->g->values[n->inputs[i]].data)
            return build_bn_dynamic(p, n);
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    if (xt.rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    int64_t c = xt.dims[1];
    float *prm[4] = {NULL, NULL, NULL, NULL};
    float *ab = NULL;
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < 4 && s == SEGRT_OK; i++) {
        int32_t v = n->inputs[i + 1];
        int64_t numel;
        if (!sg_shape_numel(&p->g->values[v].shape, &numel) || numel != c)
            s = sg_node_error(n, SEGRT_ERROR_SHAPE, "parameter %d does not have %lld values", i + 1,
                              (long long)c);
        else if (!(prm[i] = cuda_const_f32(p, v)))
            s = SEGRT_ERROR_OUT_OF_MEMORY;
    }
    if (s == SEGRT_OK && !(ab = sg_malloc(sizeof(float) * 2 * (size_t)(c ? c : 1))))
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s == SEGRT_OK) {
        /* y = x * a + b with a = scale / sqrt(var + eps), b = B - mean * a,
         * folded in double as the reference does. */
        double eps = sg_attr_float(n, "epsilon", 1e-5f);
        for (int64_t ch = 0; ch < c; ch++) {
            double a = prm[0][ch] / sqrt((double)prm[3][ch] + eps);
            ab[ch] = (float)a;
            ab[c + ch] = (float)(prm[1][ch] - prm[2][ch] * a);
        }
    }
    int32_t in[3] = {x, -1, -1}, y;
    const void *key = p->g->values[n->inputs[1]].data;
    if (s == SEGRT_OK)
        s = channel_const(p, key, "a", ab, c, xt.rank, &in[1]);
    if (s == SEGRT_OK)
        s = channel_const(p, key, "b", ab + c, c, xt.rank, &in[2]);
    for (int32_t i = 0; i < 4; i++)
        free(prm[i]);
    free(ab);
    SG_TRY(s);
    SG_TRY(output(p, n, n, n->outputs[0], &x, 1, &y));
    sgk_map_params mp = map_params(SGK_FMA);
    return map_add(p, n, &mp, in, 3, y);
}

bool cuda_act_of(const sg_cuda_plan *p, const sg_node *a, sgk_act *act, float *alpha)
{
    switch (a->op) {
    case SG_OP_RELU:
        *act = SGK_ACT_RELU;
        *alpha = 0.0f;
        return true;
    case SG_OP_LEAKY_RELU:
        *act = SGK_ACT_LEAKY_RELU;
        *alpha = sg_attr_float(a, "alpha", 0.01f);
        return true;
    case SG_OP_PRELU: {
        /* MONAI's PReLU has one slope for every channel. */
        if (a->n_inputs < 2 || a->inputs[1] < 0)
            return false;
        const sg_value *sv = &p->g->values[a->inputs[1]];
        int64_t numel = 0;
        if (!sv->data || !sg_dtype_is_float(sv->dtype) || !sg_shape_numel(&sv->shape, &numel) || numel != 1)
            return false;
        double slope = sg_dtype_load_f64(sv->dtype, sg_blob_data(sv->data), 0);
        if (!(slope == slope) || slope > 3.0e38 || slope < -3.0e38)
            return false;
        *act = SGK_ACT_LEAKY_RELU;
        *alpha = (float)slope;
        return true;
    }
    default: return false;
    }
}
