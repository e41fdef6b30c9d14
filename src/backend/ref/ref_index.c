/* Transpose, Expand, Tile, Gather, ScatterND, DepthToSpace and
 * SpaceToDepth: ops that move elements by index arithmetic, for every
 * dtype. */
#include "backend/ref/ref_internal.h"

#include <string.h>

REF_KERNEL(sg_ref_transpose)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    int32_t r = x->rank, count;
    const int64_t *pa = sg_attr_ints(n, "perm", &count);
    int64_t perm[SEGRT_MAX_RANK];
    bool used[SEGRT_MAX_RANK] = {false};
    if (pa && count != r)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "perm has %d values for rank %d", count,
                             r);
    for (int32_t i = 0; i < r; i++) {
        perm[i] = pa ? pa[i] : r - 1 - i;
        if (perm[i] < 0 || perm[i] >= r || used[perm[i]])
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "perm is not a permutation");
        used[perm[i]] = true;
    }
    int64_t want[SEGRT_MAX_RANK], xs[SEGRT_MAX_RANK], st[SEGRT_MAX_RANK];
    sg_ref_strides(x->dims, r, xs);
    for (int32_t i = 0; i < r; i++) {
        want[i] = x->dims[perm[i]];
        st[i] = xs[perm[i]];
    }
    SG_TRY(sg_ref_check_out_dims(n, y, want, r));
    sg_ref_strided_copy(y->data, x->data, segrt_dtype_size(x->dtype), r, want, 0, st);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_expand)
{
    const sg_tensor *x, *tshape;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &tshape));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    int64_t shape[SEGRT_MAX_RANK];
    int32_t ns = 0;
    SG_TRY(sg_ref_read_ints(n, tshape, shape, SEGRT_MAX_RANK, &ns, "shape"));
    /* The output is the broadcast of the input and the requested shape. */
    int32_t r = x->rank > ns ? x->rank : ns;
    int64_t want[SEGRT_MAX_RANK];
    for (int32_t i = 0; i < r; i++) {
        int32_t xi = i - (r - x->rank), si = i - (r - ns);
        int64_t a = xi >= 0 ? x->dims[xi] : 1, b = si >= 0 ? shape[si] : 1;
        if (a != b && a != 1 && b != 1)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "cannot expand dim %lld to %lld",
                                 (long long)a, (long long)b);
        want[i] = a == 1 ? b : a;
    }
    SG_TRY(sg_ref_check_out_dims(n, y, want, r));
    ref_bcast bc;
    SG_TRY(sg_ref_bcast_init(n, &bc, y->dims, y->rank, &x, 1));
    sg_ref_strided_copy(y->data, x->data, segrt_dtype_size(x->dtype), bc.rank, bc.dims, 0,
                        bc.strides[0]);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_tile)
{
    const sg_tensor *x, *trep;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &trep));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    int64_t rep[SEGRT_MAX_RANK], want[SEGRT_MAX_RANK];
    int32_t nr, r = x->rank;
    SG_TRY(sg_ref_read_ints(n, trep, rep, SEGRT_MAX_RANK, &nr, "repeats"));
    if (nr != r)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "repeats has %d values for rank %d", nr,
                             r);
    for (int32_t i = 0; i < r; i++) {
        if (rep[i] < 0 || !sg_mul_i64(x->dims[i], rep[i], &want[i]))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "repeats[%d] is invalid", i);
    }
    SG_TRY(sg_ref_check_out_dims(n, y, want, r));
    int64_t numel = sg_ref_numel(y);
    if (numel == 0)
        return SEGRT_OK;
    size_t es = segrt_dtype_size(x->dtype);
    if (r == 0) {
        memcpy(y->data, x->data, es);
        return SEGRT_OK;
    }
    /* Copy each source row once per repeat of the last dim, walking the
     * outer output dims with a counter. */
    int64_t xs[SEGRT_MAX_RANK], idx[SEGRT_MAX_RANK] = {0};
    sg_ref_strides(x->dims, r, xs);
    int64_t inner = x->dims[r - 1];
    size_t row = (size_t)inner * es;
    char *dst = y->data;
    for (int64_t o = 0; o < numel / y->dims[r - 1]; o++) {
        int64_t base = 0;
        for (int32_t d = 0; d < r - 1; d++)
            base += (idx[d] % x->dims[d]) * xs[d];
        for (int64_t k = 0; k < rep[r - 1]; k++, dst += row)
            memcpy(dst, (const char *)x->data + (size_t)base * es, row);
        for (int32_t d = r - 2; d >= 0; d--) {
            if (++idx[d] < y->dims[d])
                break;
            idx[d] = 0;
        }
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_gather)
{
    const sg_tensor *x, *ti;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ti));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (ti->dtype != SEGRT_DTYPE_INT64 && ti->dtype != SEGRT_DTYPE_INT32)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must be int32 or int64");
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "data must have rank >= 1");
    int32_t axis = 0;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 0), x->rank, &axis));
    int32_t r = x->rank + ti->rank - 1;
    if (r > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output rank %d is too large", r);
    int64_t want[SEGRT_MAX_RANK];
    int32_t k = 0;
    for (int32_t d = 0; d < axis; d++)
        want[k++] = x->dims[d];
    for (int32_t d = 0; d < ti->rank; d++)
        want[k++] = ti->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        want[k++] = x->dims[d];
    SG_TRY(sg_ref_check_out_dims(n, y, want, r));
    size_t es = segrt_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1, dim = x->dims[axis], count = sg_ref_numel(ti);
    for (int32_t d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    size_t block = (size_t)inner * es;
    /* Check every index first so a bad one leaves no partial output. */
    for (int64_t j = 0; j < count; j++) {
        int64_t v = sg_dtype_load_i64(ti->dtype, ti->data, j);
        if (v < -dim || v >= dim)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "index %lld is out of range for axis %d of size %lld",
                                 (long long)v, axis, (long long)dim);
    }
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < count; j++, dst += block) {
            int64_t v = sg_dtype_load_i64(ti->dtype, ti->data, j);
            v = v < 0 ? v + dim : v;
            memcpy(dst, (const char *)x->data + ((size_t)(o * dim + v) * block), block);
        }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_scatter_nd)
{
    const sg_tensor *x, *ti, *u;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ti));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &u));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    SG_TRY(sg_ref_check_dtype(n, u, x->dtype, "updates"));
    if (ti->dtype != SEGRT_DTYPE_INT64 && ti->dtype != SEGRT_DTYPE_INT32)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must be int64");
    sg_op rop;
    SG_TRY(sg_ref_scatter_reduction(n, &rop));
    if (ti->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must have rank >= 1");
    int64_t k = ti->dims[ti->rank - 1];
    if (k > x->rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index tuples of %lld exceed rank %d",
                             (long long)k, x->rank);
    /* updates: indices.dims[:-1] + data.dims[k:] */
    int32_t ur = ti->rank - 1 + x->rank - (int32_t)k;
    bool ok = u->rank == ur;
    for (int32_t d = 0; ok && d < ti->rank - 1; d++)
        ok = u->dims[d] == ti->dims[d];
    for (int32_t d = 0; ok && d < x->rank - k; d++)
        ok = u->dims[ti->rank - 1 + d] == x->dims[k + d];
    if (!ok)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "updates do not match indices and data");
    size_t es = segrt_dtype_size(x->dtype);
    int64_t xs[SEGRT_MAX_RANK];
    sg_ref_strides(x->dims, x->rank, xs);
    int64_t slice = 1;
    for (int32_t d = (int32_t)k; d < x->rank; d++)
        slice *= x->dims[d];
    int64_t tuples = 1;
    for (int32_t d = 0; d < ti->rank - 1; d++)
        tuples *= ti->dims[d];
    for (int64_t t = 0; t < tuples * k; t++) {
        int64_t v = sg_dtype_load_i64(ti->dtype, ti->data, t), dim = x->dims[t % k];
        if (v < -dim || v >= dim)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index %lld is out of range",
                                 (long long)v);
    }
    if (y->data != x->data && sg_ref_numel(x) > 0)
        memmove(y->data, x->data, sg_tensor_bytes(x));
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t v = sg_dtype_load_i64(ti->dtype, ti->data, t * k + j);
            off += (v < 0 ? v + x->dims[j] : v) * xs[j];
        }
        if (rop == SG_OP_COUNT) {
            memcpy((char *)y->data + (size_t)off * es,
                   (const char *)u->data + (size_t)(t * slice) * es, (size_t)slice * es);
            continue;
        }
        for (int64_t i = 0; i < slice; i++)
            sg_ref_scatter_combine(y, off + i, u, t * slice + i, rop);
    }
    return SEGRT_OK;
}

/* DepthToSpace and SpaceToDepth on [N, C, H, W]: a view of the input as
 * six dims, transposed. */
static sg_status depth_space(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                             sg_tensor *const *out, int32_t n_out, bool to_space)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (x->rank != 4)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank 4");
    int64_t b = sg_attr_int(n, "blocksize", 0);
    if (b < 1 || b > ((int64_t)1 << 20))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "blocksize must be >= 1");
    const char *mode = sg_attr_string(n, "mode", "DCR");
    bool crd = to_space && strcmp(mode, "CRD") == 0;
    if (to_space && !crd && strcmp(mode, "DCR") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "mode \"%s\" is not valid", mode);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t want[4], dims6[6], st6[6];
    if (to_space) {
        if (C % (b * b) != 0)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "channels %lld do not divide by blocksize^2",
                                 (long long)C);
        int64_t c = C / (b * b);
        want[0] = N, want[1] = c, want[2] = H * b, want[3] = W * b;
        /* Output viewed as [N, c, H, b, W, b]; the input channel is
         * (i*b + j)*c + ch for DCR and ch*b*b + i*b + j for CRD. */
        int64_t cs = H * W;
        dims6[0] = N, dims6[1] = c, dims6[2] = H, dims6[3] = b, dims6[4] = W, dims6[5] = b;
        st6[0] = C * cs;
        st6[1] = crd ? b * b * cs : cs;
        st6[2] = W;
        st6[3] = crd ? b * cs : b * c * cs;
        st6[4] = 1;
        st6[5] = crd ? cs : c * cs;
    } else {
        if (H % b != 0 || W % b != 0)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "spatial dims do not divide by blocksize");
        int64_t h = H / b, w = W / b;
        want[0] = N, want[1] = C * b * b, want[2] = h, want[3] = w;
        /* Output viewed as [N, b, b, C, h, w]: channel (i*b + j)*C + ch
         * reads input [n, ch, y*b + i, x*b + j]. */
        dims6[0] = N, dims6[1] = b, dims6[2] = b, dims6[3] = C, dims6[4] = h, dims6[5] = w;
        st6[0] = C * H * W;
        st6[1] = W;
        st6[2] = 1;
        st6[3] = H * W;
        st6[4] = b * W;
        st6[5] = b;
    }
    SG_TRY(sg_ref_check_out_dims(n, y, want, 4));
    sg_ref_strided_copy(y->data, x->data, segrt_dtype_size(x->dtype), 6, dims6, 0, st6);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_depth_to_space) { return depth_space(n, in, n_in, out, n_out, true); }

REF_KERNEL(sg_ref_space_to_depth) { return depth_space(n, in, n_in, out, n_out, false); }
