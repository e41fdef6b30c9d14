/* Einsum: explicit ("ij,jk->ik") and implicit ("ij,jk") forms, repeated
 * labels (diagonals), "..." broadcasting, any number of operands.
 *
 * The evaluation is the definition: one loop over every output label and
 * every summed label, adding the product of the operands. That is slow for
 * big contractions but Einsum in segmentation networks is small (attention
 * heads, channel mixing) and this backend is the oracle. Floats sum in
 * double, integers in int64 with wrap-around. */
#include "backend/ref/ref_internal.h"
#include "graph/einsum.h"

#include <string.h>

REF_KERNEL(sg_ref_einsum)
{
    sg_tensor *y;
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (n_in < 1 || n_in > SG_EINSUM_MAX_IN)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d operands; at most %d are supported",
                             n_in, SG_EINSUM_MAX_IN);
    const sg_tensor *ops[SG_EINSUM_MAX_IN];
    int32_t rank[SG_EINSUM_MAX_IN];
    int64_t dims[SG_EINSUM_MAX_IN][SEGRT_MAX_RANK];
    for (int32_t i = 0; i < n_in; i++) {
        SG_TRY(sg_ref_need_in(n, in, n_in, i, &ops[i]));
        SG_TRY(sg_ref_check_dtype(n, ops[i], y->dtype, "input"));
        rank[i] = ops[i]->rank;
        memcpy(dims[i], ops[i]->dims, sizeof dims[i]);
    }
    bool fl = sg_dtype_is_float(y->dtype);
    if (!fl && !sg_dtype_is_integer(y->dtype))
        return sg_ref_unsupported_dtype(n, y->dtype);
    sg_einsum es;
    SG_TRY(sg_einsum_resolve(n, n_in, rank, (const int64_t(*)[SEGRT_MAX_RANK])dims, &es));
    if (es.n_out > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output rank is too large");
    SG_TRY(sg_ref_check_out_dims(n, y, es.size, es.n_out));
    /* Each letter's stride in each operand: a size-1 dim broadcasts, a
     * letter repeated in one operand walks the diagonal. */
    int64_t strides[SG_EINSUM_MAX_IN][SG_EINSUM_MAX_LETTERS];
    memset(strides, 0, sizeof strides);
    for (int32_t i = 0; i < n_in; i++) {
        int64_t st[SEGRT_MAX_RANK];
        sg_ref_strides(ops[i]->dims, ops[i]->rank, st);
        for (int32_t d = 0; d < ops[i]->rank; d++)
            if (ops[i]->dims[d] != 1)
                strides[i][es.letter[i][d]] += st[d];
    }
    int32_t n_sum = es.n_letters - es.n_out;
    const int64_t *sum_size = es.size + es.n_out;
    int64_t sum_count = 1;
    for (int32_t k = 0; k < n_sum; k++)
        if (!sg_mul_i64(sum_count, sum_size[k], &sum_count))
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "the contraction is too large");
    int64_t numel = sg_ref_numel(y);
    int64_t oidx[SG_EINSUM_MAX_LETTERS] = {0};
    for (int64_t o = 0; o < numel; o++) {
        int64_t base[SG_EINSUM_MAX_IN] = {0};
        for (int32_t i = 0; i < n_in; i++)
            for (int32_t k = 0; k < es.n_out; k++)
                base[i] += oidx[k] * strides[i][k];
        double accf = 0;
        int64_t acci = 0;
        int64_t sidx[SG_EINSUM_MAX_LETTERS] = {0};
        for (int64_t s = 0; s < sum_count; s++) {
            double pf = 1;
            int64_t pi = 1;
            for (int32_t i = 0; i < n_in; i++) {
                int64_t off = base[i];
                for (int32_t k = 0; k < n_sum; k++)
                    off += sidx[k] * strides[i][es.n_out + k];
                if (fl)
                    pf *= sg_dtype_load_f64(ops[i]->dtype, ops[i]->data, off);
                else
                    pi = ref_mul_wrap(pi, sg_dtype_load_i64(ops[i]->dtype, ops[i]->data, off));
            }
            accf += pf;
            acci = ref_add_wrap(acci, pi);
            for (int32_t k = n_sum - 1; k >= 0; k--) {
                if (++sidx[k] < sum_size[k])
                    break;
                sidx[k] = 0;
            }
        }
        if (fl)
            sg_dtype_store_f64(y->dtype, y->data, o, accf);
        else
            sg_dtype_store_i64(y->dtype, y->data, o, acci);
        for (int32_t k = es.n_out - 1; k >= 0; k--) {
            if (++oidx[k] < es.size[k])
                break;
            oidx[k] = 0;
        }
    }
    return SEGRT_OK;
}
