/* Attention (opset 23): scaled dot-product attention over 4-D inputs
 * (batch x heads x sequence x head size) or 3-D ones (batch x sequence x
 * heads * head size, with q_num_heads and kv_num_heads), grouped-query
 * heads (query head h reads key/value head h mod kv_num_heads: the spec's
 * reference tiles the key/value heads), a key/value cache (past_key/past_value before the new keys;
 * present_key/present_value out), a boolean or additive mask (its last
 * axis padded to the keys' length, with false or -inf) or a causal one
 * (upper-left aligned), softcap, and the QK product out in any of its
 * four stages. In double, each step as the spec's reference takes it:
 * Q and K each scaled by sqrt(scale), the product, + bias, softcap,
 * softmax, times V. */
#include "backend/ref/ref_internal.h"
#include "backend/sdpa_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

REF_KERNEL(sg_ref_attention)
{
    const sg_tensor *q, *k, *v, *mask, *pk, *pv;
    sg_tensor *y, *ok, *ov, *oqk;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &q));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &k));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &v));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 3, &mask));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 4, &pk));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 5, &pv));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_opt_out(n, out, n_out, 1, &ok));
    SG_TRY(sg_ref_opt_out(n, out, n_out, 2, &ov));
    SG_TRY(sg_ref_opt_out(n, out, n_out, 3, &oqk));
    if (!sg_dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "Q, K and V must be of one float dtype");
    if ((pk == NULL) != (pv == NULL))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "past_key and past_value come together");
    bool three = q->rank == 3;
    if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "Q, K and V must all be 3-D or all 4-D");
    int64_t B = q->dims[0], Hq, Hkv, Sq, Skv, D, Dv;
    if (three) {
        Hq = sg_attr_int(n, "q_num_heads", 0);
        Hkv = sg_attr_int(n, "kv_num_heads", 0);
        if (Hq < 1 || Hkv < 1 || q->dims[2] % Hq || k->dims[2] % Hkv || v->dims[2] % Hkv)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "3-D inputs need q_num_heads and kv_num_heads dividing their hidden sizes");
        Sq = q->dims[1];
        Skv = k->dims[1];
        D = q->dims[2] / Hq;
        Dv = v->dims[2] / Hkv;
        if (k->dims[2] / Hkv != D || v->dims[1] != Skv)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "K's head size or V's length differ from Q's and K's");
    } else {
        Hq = q->dims[1];
        Hkv = k->dims[1];
        Sq = q->dims[2];
        Skv = k->dims[2];
        D = q->dims[3];
        Dv = v->dims[3];
        if (k->dims[3] != D || v->dims[1] != Hkv || v->dims[2] != Skv)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "K and V do not fit Q");
    }
    if (k->dims[0] != B || v->dims[0] != B || Hkv < 1 || Hq % Hkv)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%lld query heads over %lld key/value heads", (long long)Hq,
                             (long long)Hkv);
    int64_t P = 0;
    if (pk) {
        P = pk->dims[2];
        if (pk->rank != 4 || pv->rank != 4 || pk->dims[0] != B || pk->dims[1] != Hkv || pk->dims[3] != D ||
            pv->dims[0] != B || pv->dims[1] != Hkv || pv->dims[2] != P || pv->dims[3] != Dv)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "past_key and past_value must be B x kv heads x length x "
                                 "head size");
    }
    int64_t T = P + Skv; /* keys in all */
    int64_t wy[4] = {B, Hq, Sq, Dv}, wy3[3] = {B, Sq, Hq * Dv}, wk[4] = {B, Hkv, T, D}, wv[4] = {B, Hkv, T, Dv},
            wq[4] = {B, Hq, Sq, T};
    SG_TRY(three ? sg_ref_check_out_dims(n, y, wy3, 3) : sg_ref_check_out_dims(n, y, wy, 4));
    if (ok)
        SG_TRY(sg_ref_check_out_dims(n, ok, wk, 4));
    if (ov)
        SG_TRY(sg_ref_check_out_dims(n, ov, wv, 4));
    if (oqk)
        SG_TRY(sg_ref_check_out_dims(n, oqk, wq, 4));
    bool causal = sg_attr_int(n, "is_causal", 0) != 0;
    int64_t mode = sg_attr_int(n, "qk_matmul_output_mode", 0);
    double softcap = sg_attr_float(n, "softcap", 0.0f);
    double scale = sg_attr_find(n, "scale") ? sg_attr_float(n, "scale", 1.0f) : 1.0 / sqrt((double)D);
    double s = sqrt(scale);
    /* The mask: broadcast to B x Hq x Sq x (its last axis, padded to T). */
    int64_t mdims[4] = {1, 1, 1, 1}, mst[4] = {0, 0, 0, 0};
    bool mbool = false;
    if (mask) {
        if (mask->rank < 2 || mask->rank > 4)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "attn_mask must have rank 2 to 4");
        mbool = mask->dtype == SEGRT_DTYPE_BOOL;
        if (!mbool && !sg_dtype_is_float(mask->dtype))
            return sg_ref_unsupported_dtype(n, mask->dtype);
        for (int32_t d = 0; d < mask->rank; d++)
            mdims[4 - mask->rank + d] = mask->dims[d];
        int64_t full[4] = {B, Hq, Sq, T};
        for (int32_t d = 0; d < 3; d++)
            if (mdims[d] != 1 && mdims[d] != full[d])
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "attn_mask does not broadcast to B x heads x Sq x keys");
        if (mdims[3] > T)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "attn_mask covers %lld keys of %lld", (long long)mdims[3],
                                 (long long)T);
        mst[3] = 1;
        for (int32_t d = 2; d >= 0; d--)
            mst[d] = mst[d + 1] * mdims[d + 1];
        for (int32_t d = 0; d < 4; d++)
            mst[d] = mdims[d] == 1 && d < 3 ? 0 : mst[d];
    }
    double *row = malloc(sizeof(double) * (size_t)(T ? T : 1)), *raw = malloc(sizeof(double) * (size_t)(T ? T : 1));
    if (!row || !raw) {
        free(row);
        free(raw);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    /* Element (b, h, t, d) of the keys with the cache before them. */
#define KEY(b, h, t, d)                                                                                                \
    ((t) < P ? sg_dtype_load_f64(pk->dtype, pk->data, (((b)*Hkv + (h)) * P + (t)) * D + (d))                           \
             : sg_dtype_load_f64(k->dtype, k->data,                                                                    \
                                 three ? (((b)*Skv + (t)-P) * Hkv + (h)) * D + (d)                                     \
                                       : (((b)*Hkv + (h)) * Skv + (t)-P) * D + (d)))
#define VAL(b, h, t, d)                                                                                                \
    ((t) < P ? sg_dtype_load_f64(pv->dtype, pv->data, (((b)*Hkv + (h)) * P + (t)) * Dv + (d))                          \
             : sg_dtype_load_f64(v->dtype, v->data,                                                                    \
                                 three ? (((b)*Skv + (t)-P) * Hkv + (h)) * Dv + (d)                                    \
                                       : (((b)*Hkv + (h)) * Skv + (t)-P) * Dv + (d)))
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Sq; i++) {
                int64_t hk = h % Hkv;
                for (int64_t t = 0; t < T; t++) {
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) {
                        double qv = sg_dtype_load_f64(q->dtype, q->data,
                                                      three ? ((b * Sq + i) * Hq + h) * D + d
                                                            : ((b * Hq + h) * Sq + i) * D + d);
                        dot += (qv * s) * (KEY(b, hk, t, d) * s);
                    }
                    double bias = 0;
                    if (mask) {
                        if (t >= mdims[3]) {
                            bias = -INFINITY; /* past the mask's keys: false, or -inf */
                        } else {
                            int64_t at = (mdims[0] > 1 ? b : 0) * mst[0] + (mdims[1] > 1 ? h : 0) * mst[1] +
                                         (mdims[2] > 1 ? i : 0) * mst[2] + t;
                            bias = mbool ? (((const uint8_t *)mask->data)[at] ? 0.0 : -INFINITY)
                                         : sg_dtype_load_f64(mask->dtype, mask->data, at);
                        }
                    }
                    if (causal && t > i)
                        bias += -INFINITY;
                    raw[t] = dot;
                    row[t] = dot + bias;
                    if (mode == 1)
                        raw[t] = row[t];
                    if (softcap > 0)
                        row[t] = tanh(row[t] / softcap) * softcap;
                    if (mode == 2)
                        raw[t] = row[t];
                }
                double mx = -INFINITY, sum = 0;
                for (int64_t t = 0; t < T; t++)
                    mx = row[t] > mx || row[t] != row[t] ? row[t] : mx;
                for (int64_t t = 0; t < T; t++) {
                    row[t] = exp(row[t] - mx);
                    sum += row[t];
                }
                for (int64_t t = 0; t < T; t++) {
                    row[t] /= sum;
                    if (mode == 3)
                        raw[t] = row[t];
                    if (oqk)
                        sg_dtype_store_f64(oqk->dtype, oqk->data, ((b * Hq + h) * Sq + i) * T + t, raw[t]);
                }
                for (int64_t d = 0; d < Dv; d++) {
                    double acc = 0;
                    for (int64_t t = 0; t < T; t++)
                        acc += row[t] * VAL(b, hk, t, d);
                    sg_dtype_store_f64(y->dtype, y->data,
                                       three ? ((b * Sq + i) * Hq + h) * Dv + d : ((b * Hq + h) * Sq + i) * Dv + d,
                                       acc);
                }
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t t = 0; t < T; t++) {
                for (int64_t d = 0; ok && d < D; d++)
                    sg_dtype_store_f64(ok->dtype, ok->data, ((b * Hkv + h) * T + t) * D + d, KEY(b, h, t, d));
                for (int64_t d = 0; ov && d < Dv; d++)
                    sg_dtype_store_f64(ov->dtype, ov->data, ((b * Hkv + h) * T + t) * Dv + d, VAL(b, h, t, d));
            }
#undef KEY
#undef VAL
    free(row);
    free(raw);
    return SEGRT_OK;
}

/* segrt's ScaledDotProductAttention (graph/infer_matmul.c states it): in
 * double, a query row at a time, the softmax as the Attention kernel's. */
REF_KERNEL(sg_ref_sdpa)
{
    const sg_tensor *q, *k, *v, *mk[2];
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &q));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &k));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &v));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 3, &mk[0]));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 4, &mk[1]));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (!sg_dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "Q, K and V must be of one float dtype");
    int32_t r = q->rank;
    bool kt = sg_attr_int(n, "k_transposed", 0) != 0;
    if (r < 2 || k->rank != r || v->rank != r)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "Q, K and V must have one rank of at least 2");
    int64_t nb = 1;
    for (int32_t d = 0; d < r - 2; d++) {
        if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "Q, K and V must have the same batch dims");
        nb *= q->dims[d];
    }
    int64_t S = q->dims[r - 2], D = q->dims[r - 1], L = k->dims[r - 2 + kt], Dv = v->dims[r - 1];
    if (k->dims[r - 1 - kt] != D || v->dims[r - 2] != L)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "K and V do not fit Q");
    int64_t full[SEGRT_MAX_RANK], st[2][SEGRT_MAX_RANK];
    memcpy(full, q->dims, sizeof(int64_t) * (size_t)r);
    full[r - 1] = L;
    for (int32_t m = 0; m < 2; m++)
        if (mk[m] && (mk[m]->dtype != q->dtype || !sg_sdpa_mask_strides(mk[m]->dims, mk[m]->rank, full, r, st[m])))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "mask %d does not broadcast to the scores", m);
    full[r - 1] = Dv;
    SG_TRY(sg_ref_check_out_dims(n, y, full, r));
    double scale = sg_attr_find(n, "scale") ? sg_attr_float(n, "scale", 1.0f) : 1.0 / sqrt((double)(D ? D : 1));
    /* K's element (key t, dim d) of batch b, in either layout. */
    int64_t kst_t = kt ? 1 : D, kst_d = kt ? L : 1;
    double *row = malloc(sizeof(double) * (size_t)(L ? L : 1));
    if (!row)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < nb; b++) {
        int64_t moff[2];
        for (int32_t m = 0; m < 2; m++)
            moff[m] = mk[m] ? sg_sdpa_batch_offset(q->dims, r - 2, b, st[m]) : 0;
        for (int64_t i = 0; i < S; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t t = 0; t < L; t++) {
                double dot = 0;
                for (int64_t d = 0; d < D; d++)
                    dot += sg_dtype_load_f64(q->dtype, q->data, (b * S + i) * D + d) *
                           sg_dtype_load_f64(k->dtype, k->data, b * L * D + t * kst_t + d * kst_d);
                double s = dot * scale;
                for (int32_t m = 0; m < 2; m++)
                    if (mk[m])
                        s += sg_dtype_load_f64(mk[m]->dtype, mk[m]->data,
                                               moff[m] + i * st[m][r - 2] + t * st[m][r - 1]);
                row[t] = s;
                mx = s > mx || s != s ? s : mx;
            }
            for (int64_t t = 0; t < L; t++) {
                row[t] = exp(row[t] - mx);
                sum += row[t];
            }
            for (int64_t t = 0; t < L; t++)
                row[t] /= sum;
            for (int64_t d = 0; d < Dv; d++) {
                double acc = 0;
                for (int64_t t = 0; t < L; t++)
                    acc += row[t] * sg_dtype_load_f64(v->dtype, v->data, (b * L + t) * Dv + d);
                sg_dtype_store_f64(y->dtype, y->data, (b * S + i) * Dv + d, acc);
            }
        }
    }
    free(row);
    return SEGRT_OK;
}
