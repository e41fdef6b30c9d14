/* Composite operators as the primitive ones the ONNX spec defines them
 * by (passes.h, sg_pass_lower): RMSNormalization as Mul, ReduceMean, Add,
 * Sqrt, Div and Mul; DequantizeLinear as Cast, Sub and Mul;
 * QuantizeLinear as Div, Round, Add, Clip and Cast; Attention as MatMul,
 * masks, Softmax and MatMul (its fused kernel is later work). A backend with no
 * kernel of its own for one then runs it through kernels it has and that
 * are tested on their own (the CUDA backend today), instead of refusing
 * the model or sending the node to the CPU. The arithmetic is the
 * reference kernels' in float32 (ref_norm.c, ref_quant.c,
 * ref_attention.c), which compute in double and round once: results
 * agree to float32 rounding.
 *
 * Lowered only where the pieces are exact or the forms are plain: a
 * QuantizeLinear or DequantizeLinear with blocks, int32 data (float32
 * cannot hold every difference) or a scale whose shape is not known is
 * left as it is (a backend without the kernel refuses it, naming it). */
#include "graph/einsum.h"
#include "graph/infer.h"
#include "graph/ir.h"
#include "graph/passes.h"
#include "graph/rewrite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RMSNormalization(X, scale): X / sqrt(mean(X^2 over axis..) + epsilon)
 * * scale, in float32 (stash_type), the result cast to the output's type. */
static sg_status lower_rms(sg_rw *L, const sg_node *n, bool *done)
{
    L->fp32 = true;
    sg_graph *g = L->g;
    const sg_value *x = &g->values[n->inputs[0]];
    int32_t rank = x->shape.rank, y = n->outputs[0];
    int64_t axis = sg_attr_int(n, "axis", -1);
    if (rank < 1 || axis < -rank || axis >= rank || !sg_dtype_is_float(x->dtype) ||
        sg_attr_int(n, "stash_type", SEGRT_DTYPE_FLOAT32) != SEGRT_DTYPE_FLOAT32 || y < 0)
        return SEGRT_OK;
    if (axis < 0)
        axis += rank;
    int64_t axes[SEGRT_MAX_RANK], n_axes = rank - axis;
    for (int64_t i = 0; i < n_axes; i++)
        axes[i] = axis + i;
    sg_dtype out_dt = g->values[y].dtype, f = SEGRT_DTYPE_FLOAT32;
    int32_t xs = -1, sq = -1, ms = -1, ax, eps, ve = -1, rt = -1, nrm = -1, sc = -1, prod = out_dt == f ? y : -1;
    SG_TRY(sg_rw_cast(L, n->inputs[0], f, &xs));
    SG_TRY(sg_rw_emit2(L, SG_OP_MUL, xs, xs, f, &sq));
    SG_TRY(sg_rw_const(L, SEGRT_DTYPE_INT64, 1, &n_axes, axes, sizeof(int64_t) * (size_t)n_axes, &ax));
    sg_node *mean;
    int32_t mi[2] = {sq, ax};
    SG_TRY(sg_rw_emit(L, SG_OP_REDUCE_MEAN, mi, 2, f, &ms, &mean));
    SG_TRY(sg_rw_add_int_attr(mean, "keepdims", 1));
    SG_TRY(sg_rw_scalar_f32(L, sg_attr_float(n, "epsilon", 1e-5f), &eps));
    SG_TRY(sg_rw_emit2(L, SG_OP_ADD, ms, eps, f, &ve));
    SG_TRY(sg_rw_emit1(L, SG_OP_SQRT, ve, f, &rt));
    SG_TRY(sg_rw_emit2(L, SG_OP_DIV, xs, rt, f, &nrm));
    SG_TRY(sg_rw_cast(L, n->inputs[1], f, &sc));
    SG_TRY(sg_rw_emit2(L, SG_OP_MUL, nrm, sc, f, &prod));
    if (prod != y)
        SG_TRY(sg_rw_cast(L, prod, out_dt, &y));
    *done = true;
    return SEGRT_OK;
}

/* A quantization's scale or zero point v as float32, shaped to broadcast
 * against x along `axis` (a scalar, or one per index of it); false in
 * *ok where v's shape is not one of those. */
static sg_status per_axis(sg_rw *L, int32_t v, int32_t x_rank, int64_t axis, int64_t axis_len, int32_t *out,
                          bool *ok)
{
    const sg_value *p = &L->g->values[v];
    int64_t numel;
    *ok = false;
    if (!sg_shape_numel(&p->shape, &numel) || (numel != 1 && (p->shape.rank != 1 || numel != axis_len)))
        return SEGRT_OK;
    int32_t f = -1;
    SG_TRY(sg_rw_cast(L, v, SEGRT_DTYPE_FLOAT32, &f));
    if (numel == 1 || axis == x_rank - 1) {
        /* A scalar, or per index of the last axis: broadcasts as it is
         * (a one-element 1-D tensor broadcasts too). */
        *out = f;
        *ok = true;
        return SEGRT_OK;
    }
    int64_t dims[SEGRT_MAX_RANK], one = x_rank - axis;
    dims[0] = axis_len;
    for (int32_t d = 1; d < one; d++)
        dims[d] = 1;
    int32_t shape;
    SG_TRY(sg_rw_const(L, SEGRT_DTYPE_INT64, 1, &one, dims, sizeof(int64_t) * (size_t)one, &shape));
    *out = -1;
    SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, f, shape, SEGRT_DTYPE_FLOAT32, out));
    *ok = true;
    return SEGRT_OK;
}

static bool small_int(sg_dtype dt)
{
    double lo, hi;
    return sg_dtype_quant_range(dt, &lo, &hi);
}

/* The scale's and zero point's broadcasting forms for node n (x its
 * input 0); false in *ok where the node is not a plain per-tensor or
 * per-axis one. */
static sg_status quant_params(sg_rw *L, const sg_node *n, int32_t *scale, int32_t *zp, bool *ok)
{
    const sg_value *x = &L->g->values[n->inputs[0]];
    int32_t rank = x->shape.rank;
    int64_t axis = sg_attr_int(n, "axis", 1);
    *ok = false;
    *zp = -1;
    if (sg_attr_int(n, "block_size", 0) != 0 || rank < 0 || (rank > 0 && (axis < -rank || axis >= rank)))
        return SEGRT_OK;
    if (axis < 0)
        axis += rank;
    int64_t len = rank > 0 ? x->shape.d[axis].size : 1;
    const sg_value *s = &L->g->values[n->inputs[1]];
    int64_t ns;
    if (!sg_shape_numel(&s->shape, &ns) || (ns != 1 && (rank == 0 || len < 0)))
        return SEGRT_OK;
    SG_TRY(per_axis(L, n->inputs[1], rank, axis, len, scale, ok));
    if (*ok && n->n_inputs > 2 && n->inputs[2] >= 0)
        SG_TRY(per_axis(L, n->inputs[2], rank, axis, len, zp, ok));
    return SEGRT_OK;
}

/* DequantizeLinear(x, scale, zero_point): (x - zero_point) * scale, the
 * difference exact in float32 for 8- and 16-bit x. */
static sg_status lower_dequantize(sg_rw *L, const sg_node *n, bool *done)
{
    L->fp32 = true;
    sg_graph *g = L->g;
    int32_t y = n->outputs[0];
    if (y < 0 || !small_int(g->values[n->inputs[0]].dtype) || !sg_dtype_is_float(g->values[y].dtype))
        return SEGRT_OK;
    int32_t scale, zp, xf = -1, d;
    bool ok;
    SG_TRY(quant_params(L, n, &scale, &zp, &ok));
    if (!ok)
        return SEGRT_OK; /* (what it added is read by nothing: dead) */
    sg_dtype f = SEGRT_DTYPE_FLOAT32, out_dt = g->values[y].dtype;
    SG_TRY(sg_rw_cast(L, n->inputs[0], f, &xf));
    d = xf;
    if (zp >= 0) {
        d = -1;
        SG_TRY(sg_rw_emit2(L, SG_OP_SUB, xf, zp, f, &d));
    }
    int32_t prod = out_dt == f ? y : -1;
    SG_TRY(sg_rw_emit2(L, SG_OP_MUL, d, scale, f, &prod));
    if (prod != y)
        SG_TRY(sg_rw_cast(L, prod, out_dt, &y));
    *done = true;
    return SEGRT_OK;
}

/* QuantizeLinear(x, scale, zero_point): saturate(round(x / scale) +
 * zero_point), rounding half to even (Round), NaN to 0 as the reference
 * kernel does, into an 8- or 16-bit integer. */
static sg_status lower_quantize(sg_rw *L, const sg_node *n, bool *done)
{
    L->fp32 = true;
    sg_graph *g = L->g;
    int32_t y = n->outputs[0];
    if (y < 0 || !sg_dtype_is_float(g->values[n->inputs[0]].dtype))
        return SEGRT_OK;
    sg_dtype out_dt = g->values[y].dtype, f = SEGRT_DTYPE_FLOAT32;
    double lo, hi;
    if (!sg_dtype_quant_range(out_dt, &lo, &hi))
        return SEGRT_OK;
    int32_t scale, zp, xf = -1, q = -1, r = -1, lo_v, hi_v, c = -1, nan = -1, zero, w = -1;
    bool ok;
    SG_TRY(quant_params(L, n, &scale, &zp, &ok));
    if (!ok)
        return SEGRT_OK;
    SG_TRY(sg_rw_cast(L, n->inputs[0], f, &xf));
    SG_TRY(sg_rw_emit2(L, SG_OP_DIV, xf, scale, f, &q));
    SG_TRY(sg_rw_emit1(L, SG_OP_ROUND, q, f, &r));
    if (zp >= 0) {
        int32_t s = -1;
        SG_TRY(sg_rw_emit2(L, SG_OP_ADD, r, zp, f, &s));
        r = s;
    }
    SG_TRY(sg_rw_scalar_f32(L, (float)lo, &lo_v));
    SG_TRY(sg_rw_scalar_f32(L, (float)hi, &hi_v));
    int32_t clip_in[3] = {r, lo_v, hi_v};
    SG_TRY(sg_rw_emit(L, SG_OP_CLIP, clip_in, 3, f, &c, NULL));
    SG_TRY(sg_rw_emit1(L, SG_OP_IS_NAN, c, SEGRT_DTYPE_BOOL, &nan));
    SG_TRY(sg_rw_scalar_f32(L, 0.0f, &zero));
    int32_t where_in[3] = {nan, zero, c};
    SG_TRY(sg_rw_emit(L, SG_OP_WHERE, where_in, 3, f, &w, NULL));
    SG_TRY(sg_rw_cast(L, w, out_dt, &y));
    *done = true;
    return SEGRT_OK;
}

/* A 3-D [B, S, heads * size] input as [B, heads, S, size]; a 4-D one as
 * it is. */
static sg_status heads_first(sg_rw *L, int32_t v, bool three, int64_t heads, sg_dtype dt, int32_t *out)
{
    if (!three) {
        *out = v;
        return SEGRT_OK;
    }
    static const int64_t perm[4] = {0, 2, 1, 3};
    int64_t dims[4] = {0, 0, heads, -1};
    int32_t shape, r = -1;
    SG_TRY(sg_rw_ints(L, dims, 4, &shape));
    SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, v, shape, dt, &r));
    *out = -1;
    return sg_rw_transpose(L, r, perm, 4, dt, out);
}

/* Attention (opset 23) as the spec's reference computes it (and
 * ref_attention.c): Q and K each times sqrt(scale), their product, plus
 * the mask (a boolean one as 0 / -inf, its last axis padded to the keys
 * with -inf) and the causal mask (-inf above the diagonal, upper-left
 * aligned), softcap, Softmax over the keys, times V. Key/value heads are
 * tiled for grouped queries (query head h reads head h mod kv_num_heads),
 * the cache concatenated before the new keys (present_key/present_value
 * are those). Left as it is: the QK product as an output, and a causal or
 * short mask over lengths not known at build. */
static sg_status lower_attention(sg_rw *L, const sg_node *n, bool *done)
{
    sg_graph *g = L->g;
    int32_t qv = n->inputs[0], kv = n->inputs[1], vv = n->inputs[2];
    int32_t mask = n->n_inputs > 3 ? n->inputs[3] : -1, pk = n->n_inputs > 4 ? n->inputs[4] : -1,
            pv = n->n_inputs > 5 ? n->inputs[5] : -1;
    if ((n->n_outputs > 3 && n->outputs[3] >= 0) || (pk < 0) != (pv < 0) || n->outputs[0] < 0)
        return SEGRT_OK;
    const sg_shape *qs = &g->values[qv].shape, *ks = &g->values[kv].shape;
    sg_dtype dt = g->values[qv].dtype;
    bool three = qs->rank == 3;
    if (!sg_dtype_is_float(dt) || (qs->rank != 3 && qs->rank != 4) || ks->rank != qs->rank ||
        g->values[vv].shape.rank != qs->rank || g->values[kv].dtype != dt || g->values[vv].dtype != dt)
        return SEGRT_OK;
    int64_t Hq = three ? sg_attr_int(n, "q_num_heads", 0) : qs->d[1].size;
    int64_t Hkv = three ? sg_attr_int(n, "kv_num_heads", 0) : ks->d[1].size;
    int64_t hidden = three ? qs->d[2].size : qs->d[3].size;
    int64_t D = three ? (Hq > 0 && hidden > 0 ? hidden / Hq : -1) : hidden;
    if (Hq < 1 || Hkv < 1 || Hq % Hkv || D < 1 || (three && hidden % Hq))
        return SEGRT_OK;
    int64_t Sq = qs->d[three ? 1 : 2].size, Skv = ks->d[three ? 1 : 2].size, P = 0;
    if (pk >= 0) {
        const sg_shape *ps = &g->values[pk].shape;
        P = ps->rank == 4 ? ps->d[2].size : -1;
    }
    int64_t T = Skv >= 0 && P >= 0 ? P + Skv : -1;
    bool causal = sg_attr_int(n, "is_causal", 0) != 0;
    int64_t mlast = -1;
    if (mask >= 0) {
        const sg_shape *ms = &g->values[mask].shape;
        sg_dtype mdt = g->values[mask].dtype;
        if (ms->rank < 2 || ms->rank > 4 || (mdt != SEGRT_DTYPE_BOOL && !sg_dtype_is_float(mdt)))
            return SEGRT_OK;
        mlast = ms->d[ms->rank - 1].size;
        if (mlast < 0 || T < 0 || mlast > T)
            return SEGRT_OK; /* padding it needs the lengths */
    }
    if (causal && (Sq < 0 || T < 0 || Sq * T > ((int64_t)1 << 24)))
        return SEGRT_OK;
    double scale = sg_attr_find(n, "scale") ? sg_attr_float(n, "scale", 1.0f) : 1.0 / sqrt((double)D);
    float softcap = sg_attr_float(n, "softcap", 0.0f);

    int32_t q4, k4, v4, sc, qsc = -1, ksc = -1, kt = -1, scores = -1;
    SG_TRY(heads_first(L, qv, three, Hq, dt, &q4));
    SG_TRY(heads_first(L, kv, three, Hkv, dt, &k4));
    SG_TRY(heads_first(L, vv, three, Hkv, dt, &v4));
    if (pk >= 0) { /* the cache before the new keys and values: present_key/present_value */
        int32_t kin[2] = {pk, k4}, vin[2] = {pv, v4}, kc = n->n_outputs > 1 ? n->outputs[1] : -1,
                vc = n->n_outputs > 2 ? n->outputs[2] : -1;
        sg_node *c;
        SG_TRY(sg_rw_emit(L, SG_OP_CONCAT, kin, 2, dt, &kc, &c));
        SG_TRY(sg_rw_add_int_attr(c, "axis", 2));
        SG_TRY(sg_rw_emit(L, SG_OP_CONCAT, vin, 2, dt, &vc, &c));
        SG_TRY(sg_rw_add_int_attr(c, "axis", 2));
        k4 = kc;
        v4 = vc;
    } else if (n->n_outputs > 1 && (n->outputs[1] >= 0 || (n->n_outputs > 2 && n->outputs[2] >= 0))) {
        /* present_* without a cache: the keys and values themselves */
        int32_t kc = n->outputs[1], vc = n->n_outputs > 2 ? n->outputs[2] : -1;
        if (kc >= 0)
            SG_TRY(sg_rw_emit1(L, SG_OP_IDENTITY, k4, dt, &kc));
        if (vc >= 0)
            SG_TRY(sg_rw_emit1(L, SG_OP_IDENTITY, v4, dt, &vc));
    }
    if (Hq != Hkv) { /* grouped queries: head h reads key/value head h mod Hkv */
        int64_t reps[4] = {1, Hq / Hkv, 1, 1};
        int32_t r, kt2 = -1, vt2 = -1;
        SG_TRY(sg_rw_ints(L, reps, 4, &r));
        SG_TRY(sg_rw_emit2(L, SG_OP_TILE, k4, r, dt, &kt2));
        SG_TRY(sg_rw_emit2(L, SG_OP_TILE, v4, r, dt, &vt2));
        k4 = kt2;
        v4 = vt2;
    }
    /* sqrt(scale) on each side, as the reference: the product stays in
     * range where the plan computes in float16. */
    SG_TRY(sg_rw_scalar_as(L, (float)sqrt(scale), dt, &sc));
    SG_TRY(sg_rw_emit2(L, SG_OP_MUL, q4, sc, dt, &qsc));
    SG_TRY(sg_rw_emit2(L, SG_OP_MUL, k4, sc, dt, &ksc));
    static const int64_t swap[4] = {0, 1, 3, 2};
    SG_TRY(sg_rw_transpose(L, ksc, swap, 4, dt, &kt));
    SG_TRY(sg_rw_emit2(L, SG_OP_MAT_MUL, qsc, kt, dt, &scores));
    if (mask >= 0) {
        int32_t bias = -1, ninf;
        SG_TRY(sg_rw_scalar_as(L, -INFINITY, dt, &ninf));
        if (g->values[mask].dtype == SEGRT_DTYPE_BOOL) {
            int32_t zero;
            SG_TRY(sg_rw_scalar_as(L, 0.0f, dt, &zero));
            int32_t win[3] = {mask, zero, ninf};
            SG_TRY(sg_rw_emit(L, SG_OP_WHERE, win, 3, dt, &bias, NULL));
        } else {
            SG_TRY(sg_rw_cast(L, mask, dt, &bias));
        }
        if (mlast < T) { /* keys past the mask's: -inf */
            int32_t mr = g->values[mask].shape.rank, pads, padded = -1;
            int64_t pv8[8] = {0};
            pv8[2 * mr - 1] = T - mlast;
            SG_TRY(sg_rw_ints(L, pv8, 2 * mr, &pads));
            int32_t pin[3] = {bias, pads, ninf};
            SG_TRY(sg_rw_emit(L, SG_OP_PAD, pin, 3, dt, &padded, NULL));
            bias = padded;
        }
        int32_t sum = -1;
        SG_TRY(sg_rw_emit2(L, SG_OP_ADD, scores, bias, dt, &sum));
        scores = sum;
    }
    if (causal) { /* -inf where a key comes after the query (t > i) */
        float *tri = sg_malloc(sizeof(float) * (size_t)(Sq * T));
        if (!tri)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t t = 0; t < T; t++)
                tri[i * T + t] = t > i ? -INFINITY : 0.0f;
        int64_t td[2] = {Sq, T};
        int32_t tv, tvd = -1, sum = -1;
        sg_status st = sg_rw_const(L, SEGRT_DTYPE_FLOAT32, 2, td, tri, sizeof(float) * (size_t)(Sq * T), &tv);
        free(tri);
        SG_TRY(st);
        SG_TRY(sg_rw_cast(L, tv, dt, &tvd));
        SG_TRY(sg_rw_emit2(L, SG_OP_ADD, scores, tvd, dt, &sum));
        scores = sum;
    }
    if (softcap > 0) { /* softcap * tanh(scores / softcap) */
        int32_t cd, d1 = -1, t1 = -1, m1 = -1;
        SG_TRY(sg_rw_scalar_as(L, softcap, dt, &cd));
        SG_TRY(sg_rw_emit2(L, SG_OP_DIV, scores, cd, dt, &d1));
        SG_TRY(sg_rw_emit1(L, SG_OP_TANH, d1, dt, &t1));
        SG_TRY(sg_rw_emit2(L, SG_OP_MUL, t1, cd, dt, &m1));
        scores = m1;
    }
    sg_node *sm;
    int32_t probs = -1, y4 = three ? -1 : n->outputs[0];
    SG_TRY(sg_rw_emit(L, SG_OP_SOFTMAX, &scores, 1, dt, &probs, &sm));
    SG_TRY(sg_rw_add_int_attr(sm, "axis", -1));
    SG_TRY(sg_rw_emit2(L, SG_OP_MAT_MUL, probs, v4, dt, &y4));
    if (three) { /* [B, heads, S, size] back to [B, S, heads * size] */
        static const int64_t perm[4] = {0, 2, 1, 3};
        int64_t dims[3] = {0, 0, -1};
        int32_t yt = -1, shape, y = n->outputs[0];
        SG_TRY(sg_rw_transpose(L, y4, perm, 4, dt, &yt));
        SG_TRY(sg_rw_ints(L, dims, 3, &shape));
        SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, yt, shape, dt, &y));
    }
    *done = true;
    return SEGRT_OK;
}

/* A two-operand Einsum whose letters are each a batch letter (both
 * operands and the output), a row letter (the first and the output), a
 * column letter (the second and the output) or a contracted one (both
 * operands only), over static dims without diagonals or broadcasting:
 * the operands transposed to [batch, rows, contracted] and [batch,
 * contracted, columns], reshaped to three dims, one batched MatMul, and
 * the product reshaped and transposed to the output's letters. What runs
 * a MatMul well (cuBLASLt's batched products, oneDNN's) then runs it;
 * identity transposes and reshapes go in the simplify pass. */
static sg_status lower_einsum(sg_rw *L, const sg_node *n, bool *done)
{
    sg_graph *g = L->g;
    if (n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return SEGRT_OK;
    int32_t rank[2];
    int64_t dims[2][SEGRT_MAX_RANK];
    sg_dtype dt = g->values[n->inputs[0]].dtype;
    if ((dt != SEGRT_DTYPE_FLOAT32 && dt != SEGRT_DTYPE_FLOAT16 && dt != SEGRT_DTYPE_BFLOAT16) ||
        g->values[n->inputs[1]].dtype != dt)
        return SEGRT_OK;
    for (int32_t i = 0; i < 2; i++) {
        const sg_value *v = &g->values[n->inputs[i]];
        rank[i] = v->shape.rank;
        if (rank[i] < 0 || !sg_shape_dims(&v->shape, dims[i]))
            return SEGRT_OK;
    }
    sg_einsum e;
    if (sg_einsum_resolve(n, 2, rank, (const int64_t(*)[SEGRT_MAX_RANK])dims, &e) != SEGRT_OK) {
        sg_error_clear(); /* the backend's build says what is wrong */
        return SEGRT_OK;
    }
    /* Where each letter is: the operand dim (-1: absent), the output's (l < n_out). */
    int32_t at[2][SG_EINSUM_MAX_LETTERS];
    for (int32_t i = 0; i < 2; i++) {
        for (int32_t l = 0; l < e.n_letters; l++)
            at[i][l] = -1;
        for (int32_t d = 0; d < rank[i]; d++) {
            int32_t l = e.letter[i][d];
            if (at[i][l] >= 0 || dims[i][d] != e.size[l] || e.size[l] < 1)
                return SEGRT_OK; /* a diagonal, a broadcast dim, or nothing to multiply */
            at[i][l] = d;
        }
    }
    int32_t batch[SG_EINSUM_MAX_LETTERS], rows[SG_EINSUM_MAX_LETTERS], cols[SG_EINSUM_MAX_LETTERS],
        sum[SG_EINSUM_MAX_LETTERS], nb = 0, nr = 0, nc = 0, nk = 0;
    int64_t B = 1, M = 1, N = 1, K = 1;
    for (int32_t l = 0; l < e.n_letters; l++) {
        bool a = at[0][l] >= 0, b = at[1][l] >= 0, out = l < e.n_out;
        if (a && b && out)
            batch[nb++] = l, B *= e.size[l];
        else if (a && !b && out)
            rows[nr++] = l, M *= e.size[l];
        else if (!a && b && out)
            cols[nc++] = l, N *= e.size[l];
        else if (a && b && !out)
            sum[nk++] = l, K *= e.size[l];
        else
            return SEGRT_OK; /* summed over one operand only, or an output letter of neither */
    }
    int64_t perm_a[SEGRT_MAX_RANK], perm_b[SEGRT_MAX_RANK], perm_y[SEGRT_MAX_RANK], mid[SEGRT_MAX_RANK];
    int32_t order[SG_EINSUM_MAX_LETTERS], no = 0; /* the product's letters: batch, rows, columns */
    for (int32_t k = 0; k < nb; k++)
        perm_a[k] = at[0][batch[k]], perm_b[k] = at[1][batch[k]], order[no++] = batch[k];
    for (int32_t k = 0; k < nr; k++)
        perm_a[nb + k] = at[0][rows[k]], order[no++] = rows[k];
    for (int32_t k = 0; k < nk; k++)
        perm_a[nb + nr + k] = at[0][sum[k]], perm_b[nb + k] = at[1][sum[k]];
    for (int32_t k = 0; k < nc; k++)
        perm_b[nb + nk + k] = at[1][cols[k]], order[no++] = cols[k];
    for (int32_t k = 0; k < no; k++)
        mid[k] = e.size[order[k]];
    for (int32_t j = 0; j < e.n_out; j++) /* output dim j is letter j */
        for (int32_t k = 0; k < no; k++)
            if (order[k] == j)
                perm_y[j] = k;
    int32_t ta = -1, tb = -1, sa, sb, ra = -1, rb = -1, prod = -1, sy, ry = -1, y = n->outputs[0];
    int64_t shape_a[3] = {B, M, K}, shape_b[3] = {B, K, N};
    SG_TRY(sg_rw_transpose(L, n->inputs[0], perm_a, rank[0], dt, &ta));
    SG_TRY(sg_rw_transpose(L, n->inputs[1], perm_b, rank[1], dt, &tb));
    SG_TRY(sg_rw_ints(L, shape_a, 3, &sa));
    SG_TRY(sg_rw_ints(L, shape_b, 3, &sb));
    SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, ta, sa, dt, &ra));
    SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, tb, sb, dt, &rb));
    SG_TRY(sg_rw_emit2(L, SG_OP_MAT_MUL, ra, rb, dt, &prod));
    SG_TRY(sg_rw_ints(L, mid, no, &sy));
    SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, prod, sy, dt, &ry));
    SG_TRY(sg_rw_transpose(L, ry, perm_y, e.n_out, dt, &y));
    *done = true;
    return SEGRT_OK;
}

/* The composite node's sg_rw (its required inputs present), or NULL. */
static sg_rw_fn composite_lowering(const sg_node *n)
{
    for (int32_t k = 0; k < 2; k++)
        if (n->n_inputs <= k || n->inputs[k] < 0)
            return NULL;
    switch (n->op) {
    case SG_OP_RMS_NORMALIZATION: return lower_rms;
    case SG_OP_DEQUANTIZE_LINEAR: return lower_dequantize;
    case SG_OP_QUANTIZE_LINEAR: return lower_quantize;
    case SG_OP_ATTENTION: return n->n_inputs > 2 && n->inputs[2] >= 0 ? lower_attention : NULL;
    default: return NULL;
    }
}

typedef struct lower_pick {
    bool (*lower)(const sg_graph *g, const sg_node *n, void *user);
    void *user;
} lower_pick;

static sg_rw_fn pick_composite(const sg_graph *g, const sg_node *n, void *user)
{
    const lower_pick *p = user;
    sg_rw_fn fn = composite_lowering(n);
    return fn && p->lower(g, n, p->user) ? fn : NULL;
}

sg_status sg_pass_lower(sg_graph *g, bool (*lower)(const sg_graph *g, const sg_node *n, void *user), void *user,
                        int32_t *changed)
{
    lower_pick p = {lower, user};
    return sg_rw_rewrite(g, "lowered", pick_composite, &p, changed);
}

sg_status sg_pass_einsum_matmul(sg_graph *g, int32_t *changed)
{
    return sg_rw_rewrite_op(g, "lowered", SG_OP_EINSUM, lower_einsum, changed);
}
