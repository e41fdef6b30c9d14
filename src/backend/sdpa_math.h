/* How ScaledDotProductAttention (graph/infer_matmul.c) reads its masks, one
 * copy for the reference kernel (ref/ref_attention.c) and the CPU's
 * (cpu/cpu_attention.c): a mask broadcast (numpy's rule) to the scores'
 * dims [batch..., S, L] is read at strides that are 0 along the dims it
 * broadcasts over, and a batch index's element of it is found from the
 * linear batch index. */
#ifndef SG_BACKEND_SDPA_MATH_H
#define SG_BACKEND_SDPA_MATH_H

#include <stdbool.h>
#include <stdint.h>

/* The strides (in elements) at which a mask of dims md (mr of them), read
 * as the r dims of `full`, is read; false where it does not broadcast to
 * them. */
static inline bool sg_sdpa_mask_strides(const int64_t *md, int32_t mr, const int64_t *full, int32_t r, int64_t *st)
{
    if (mr > r)
        return false;
    int64_t s = 1;
    for (int32_t d = r - 1; d >= 0; d--) {
        int32_t at = d - (r - mr);
        int64_t size = at >= 0 ? md[at] : 1;
        if (size != 1 && size != full[d])
            return false;
        st[d] = size == 1 ? 0 : s;
        s *= size;
    }
    return true;
}

/* The offset of linear batch index b (over the nbd dims `batch`) in a
 * tensor read at strides st (its first nbd). */
static inline int64_t sg_sdpa_batch_offset(const int64_t *batch, int32_t nbd, int64_t b, const int64_t *st)
{
    int64_t off = 0;
    for (int32_t d = nbd - 1; d >= 0; d--) {
        off += b % batch[d] * st[d];
        b /= batch[d];
    }
    return off;
}

#endif
