// Resize (nearest, n-linear, cubic over any dims) as src/backend/ref/ref_resize.c
// computes it.
//
// One thread per output element maps its coordinate along each dim to a
// few input taps with weights and sums the products of every dim's taps.
// Input coordinates are computed in float with the reference's (and
// onnxruntime's) operation order, with the round-to-nearest intrinsics so
// that the compiler cannot fuse a multiply and an add: the nearest mode is
// decided by where a coordinate falls against integers and halves, and a
// fused operation would move it across. The fraction and the cubic
// coefficients are then computed in double as in the reference; the sum is
// accumulated in float (double for float64 tensors). Dims that the
// transform maps onto themselves (batch, channels) take their one tap
// directly. Consecutive threads take consecutive indices along the
// output's smallest-stride dim, so stores coalesce.
#include "backend/cuda/k_common.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define RS_BATCH 8

// Geometry ---------------------------------------------------------------------------

struct rsgeom {
    int rank;
    int nd;                   // dims the work index is decomposed over
    int order[SGK_MAX_RANK];  // those dims, fastest-varying first
    fastdiv fd[SGK_MAX_RANK];    // their sizes, for the 32-bit path
    ll xd[SGK_MAX_RANK], xs[SGK_MAX_RANK], yd[SGK_MAX_RANK], ys[SGK_MAX_RANK];
    bool ident[SGK_MAX_RANK]; // output coordinate i reads input i alone
    int vdim;                 // identity dim a thread walks V elements of (-1: none)
    ll nv;                    // chunks of V along vdim
    fastdiv fnv;
    ll work;                  // work items: output elements / V
    bool small;               // every index fits the 32-bit path
    bool raw;                 // nearest between equal dtypes: copy the element's bytes
    int esize;
    int nmd;                  // the dims that are not identities, in dim order (the vector path's)
    int md[SGK_MAX_RANK];
    sgk_resize_params p;
};

// The input coordinate of output coordinate xi along dim d (the
// reference's to_input_coord, operation for operation).
__device__ __forceinline__ float input_coord(const sgk_resize_params &p, int d, ll xi, ll in, ll out)
{
    float x = (float)xi, s = p.scale[d], lin = (float)in, lout = (float)out;
    switch (p.coord) {
    case SGK_COORD_HALF_PIXEL: return __fsub_rn(__fdiv_rn(__fadd_rn(x, 0.5f), s), 0.5f);
    case SGK_COORD_HALF_PIXEL_SYMMETRIC: {
        float adjustment = __fdiv_rn(lout, __fmul_rn(s, lin));
        float center = __fdiv_rn(lin, 2.0f);
        float offset = __fmul_rn(center, __fsub_rn(1.0f, adjustment));
        // onnxruntime finishes this one in double.
        double v = __dadd_rn(__dadd_rn((double)offset, __ddiv_rn(__dadd_rn((double)x, 0.5), (double)s)), -0.5);
        return (float)v;
    }
    case SGK_COORD_PYTORCH_HALF_PIXEL:
        return out > 1 ? __fsub_rn(__fdiv_rn(__fadd_rn(x, 0.5f), s), 0.5f) : 0.0f;
    case SGK_COORD_ALIGN_CORNERS:
        return out == 1 ? 0.0f : __fdiv_rn(__fmul_rn(x, __fsub_rn(lin, 1.0f)), __fsub_rn(lout, 1.0f));
    case SGK_COORD_ASYMMETRIC: return __fdiv_rn(x, s);
    case SGK_COORD_TF_CROP_AND_RESIZE: {
        float a = p.roi_start[d], b = p.roi_end[d];
        float l1 = __fsub_rn(lin, 1.0f);
        if (out > 1)
            return __fadd_rn(__fmul_rn(a, l1),
                             __fdiv_rn(__fmul_rn(__fmul_rn(x, __fsub_rn(b, a)), l1), __fsub_rn(lout, 1.0f)));
        return (float)__dmul_rn(__dmul_rn(0.5, (double)__fadd_rn(a, b)), (double)l1);
    }
    }
    return x;
}

__device__ __forceinline__ ll clamp_index(double v, ll in)
{
    if (!(v > 0)) // also NaN
        return 0;
    if (v >= (double)(in - 1))
        return in - 1;
    return (ll)v;
}

struct taps {
    int count;
    bool outside; // tf_crop_and_resize: the whole element takes extrapolation_value
    ll idx[4];
    double w[4];
};

// The reference's make_taps.
__device__ __forceinline__ void make_taps(const sgk_resize_params &p, int d, ll o, ll in, ll out, taps *t)
{
    double x = (double)input_coord(p, d, o, in, out);
    t->count = 1;
    t->outside = false;
    t->idx[0] = 0;
    t->w[0] = 1.0;
    if (p.coord == SGK_COORD_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(in - 1))) {
        t->outside = true;
        return;
    }
    double fl = floor(x), r = __dadd_rn(x, -fl);
    if (p.mode == SGK_RESIZE_NEAREST) {
        double v;
        switch (p.nearest) {
        case SGK_NEAREST_ROUND_PREFER_FLOOR: v = r <= 0.5 ? fl : fl + 1; break;
        case SGK_NEAREST_ROUND_PREFER_CEIL: v = r < 0.5 ? fl : fl + 1; break;
        case SGK_NEAREST_FLOOR: v = fl; break;
        default: v = r > 0 ? fl + 1 : fl; break;
        }
        t->idx[0] = clamp_index(v, in);
        return;
    }
    if (r == 0) {
        // On a sample: one tap, and NaN or Inf neighbours do not leak in
        // through a zero weight.
        t->idx[0] = clamp_index(fl, in);
        return;
    }
    if (p.mode == SGK_RESIZE_LINEAR) {
        t->count = 2;
        t->idx[0] = clamp_index(fl, in);
        t->idx[1] = clamp_index(fl + 1, in);
        t->w[0] = 1 - r;
        t->w[1] = r;
        return;
    }
    double A = p.cubic_a, s = 1 - r;
    double c[4] = {
        ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
        ((A + 2) * r - (A + 3)) * r * r + 1,
        ((A + 2) * s - (A + 3)) * s * s + 1,
        ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A,
    };
    double sum = 0;
    t->count = 4;
    for (int k = 0; k < 4; k++) {
        double pos = fl - 1 + k;
        if (p.exclude_outside && (pos < 0 || pos > (double)(in - 1)))
            c[k] = 0;
        sum += c[k];
        t->idx[k] = clamp_index(pos, in);
    }
    for (int k = 0; k < 4; k++)
        t->w[k] = p.exclude_outside && sum != 0 ? c[k] / sum : c[k];
}

__device__ __forceinline__ void copy_elem(char *dst, const char *src, int es)
{
    switch (es) {
    case 1: *(uint8_t *)dst = *(const uint8_t *)src; return;
    case 2: *(uint16_t *)dst = *(const uint16_t *)src; return;
    case 4: *(uint32_t *)dst = *(const uint32_t *)src; return;
    default: *(uint64_t *)dst = *(const uint64_t *)src; return;
    }
}

// A work item: V consecutive indices of vdim (where there is one) at one
// index of the other dims. The taps are found once for the item.
template <int XT, typename T, int V>
__global__ void __launch_bounds__(256, 2) resize_kernel(const void *x, segrt_dtype xt, void *y, segrt_dtype yt, rsgeom g)
{
    for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < g.work; i += (ll)gridDim.x * blockDim.x) {
        ll co[SGK_MAX_RANK];
        for (int d = 0; d < g.rank; d++)
            co[d] = 0;
        ll j0 = 0;
        if (g.small) {
            unsigned rest = (unsigned)i;
            if (g.vdim >= 0) {
                unsigned q = fastdiv_div(rest, g.fnv);
                j0 = (ll)(rest - q * g.fnv.d) * V;
                rest = q;
            }
            for (int k = 0; k < g.nd; k++) {
                unsigned q = fastdiv_div(rest, g.fd[k]);
                co[g.order[k]] = rest - q * g.fd[k].d;
                rest = q;
            }
        } else {
            ll rest = i;
            if (g.vdim >= 0) {
                j0 = (rest % g.nv) * V;
                rest /= g.nv;
            }
            for (int k = 0; k < g.nd; k++) {
                int d = g.order[k];
                ll q = rest / g.yd[d];
                co[d] = rest - q * g.yd[d];
                rest = q;
            }
        }
        int cnt = 1;
        ll xv = 0, yv = 0;
        if (g.vdim >= 0) {
            ll left = g.yd[g.vdim] - j0;
            cnt = left < V ? (int)left : V;
            xv = g.xs[g.vdim];
            yv = g.ys[g.vdim];
            co[g.vdim] = j0;
        }
        ll yo = 0, base = 0;
        for (int d = 0; d < g.rank; d++)
            yo += co[d] * g.ys[d];
        // Dims with more than one tap, in dim order.
        taps mt[SGK_MAX_RANK];
        ll mstride[SGK_MAX_RANK];
        int nm = 0;
        bool outside = false;
        for (int d = 0; d < g.rank && !outside; d++) {
            if (g.ident[d]) {
                base += co[d] * g.xs[d];
                continue;
            }
            taps t;
            make_taps(g.p, d, co[d], g.xd[d], g.yd[d], &t);
            outside = t.outside;
            if (t.count == 1) {
                base += t.idx[0] * g.xs[d];
                continue;
            }
            mt[nm] = t;
            mstride[nm++] = g.xs[d];
        }
        if (outside) {
#pragma unroll
            for (int u = 0; u < V; u++)
                if (u < cnt)
                    st<T>(y, yt, yo + u * yv, (T)g.p.extrapolation_value);
            continue;
        }
        if (nm == 0) {
#pragma unroll
            for (int u = 0; u < V; u++) {
                if (u >= cnt)
                    break;
                if (g.raw)
                    copy_elem((char *)y + (yo + u * yv) * g.esize, (const char *)x + (base + u * xv) * g.esize,
                              g.esize);
                else
                    st<T>(y, yt, yo + u * yv, ldr<XT, T>(x, xt, base + u * xv));
            }
            continue;
        }
        // Every combination of the multi-tap dims' taps, the first dim's
        // slowest; the weight is the product of the dims' weights. The loads
        // of a batch are issued before any is used, so that several are in
        // flight: V per combination, or (V = 1) RS_BATCH combinations.
        int k[SGK_MAX_RANK];
        for (int m = 0; m < nm; m++)
            k[m] = 0;
        T acc[V];
#pragma unroll
        for (int u = 0; u < V; u++)
            acc[u] = 0;
        bool more = true;
        while (more) {
            T wb[RS_BATCH];
            ll ob[RS_BATCH];
            int nb = 0;
#pragma unroll
            for (int b = 0; b < (V == 1 ? RS_BATCH : 1); b++) {
                if (!more)
                    break;
                T w = 1;
                ll off = base;
                for (int m = 0; m < nm; m++) {
                    w *= (T)mt[m].w[k[m]];
                    off += mt[m].idx[k[m]] * mstride[m];
                }
                wb[b] = w;
                ob[b] = off;
                nb = b + 1;
                int m = nm - 1;
                while (m >= 0 && ++k[m] == mt[m].count)
                    k[m--] = 0;
                more = m >= 0;
            }
            T v[V == 1 ? RS_BATCH : V];
            if (V == 1) {
#pragma unroll
                for (int b = 0; b < RS_BATCH; b++)
                    v[b] = b < nb ? ldr<XT, T>(x, xt, ob[b]) : (T)0;
#pragma unroll
                for (int b = 0; b < RS_BATCH; b++)
                    if (b < nb)
                        acc[0] += wb[b] * v[b];
            } else {
#pragma unroll
                for (int u = 0; u < V; u++)
                    v[u] = u < cnt ? ldr<XT, T>(x, xt, ob[0] + u * xv) : (T)0;
#pragma unroll
                for (int u = 0; u < V; u++)
                    acc[u] += wb[0] * v[u];
            }
        }
#pragma unroll
        for (int u = 0; u < V; u++)
            if (u < cnt)
                st<T>(y, yt, yo + u * yv, acc[u]);
    }
}

// The channels-last case of float16, bfloat16 and float32 (the upsampling
// of decoders and segmentation heads): a work item is one 16-byte vector of
// channels at one output position, read and written as such, and the NS
// dims that are not identities (1 to 3) take their taps into registers
// (the general kernel's per-item arrays of taps are indexed at run time,
// so they live in local memory). Linear and nearest modes: at most two taps
// a dim. The arithmetic is the general kernel's, in its order: the same
// bits.
template <int XT, int NS> __global__ void __launch_bounds__(256) resize_vec_kernel(const void *x, void *y, rsgeom g)
{
    constexpr int V = V16<XT>();
    const int es = dtype_bytes(XT);
    for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < g.work; i += (ll)gridDim.x * blockDim.x) {
        ll co[SGK_MAX_RANK];
        for (int d = 0; d < g.rank; d++)
            co[d] = 0;
        unsigned rest = (unsigned)i;
        unsigned q = fastdiv_div(rest, g.fnv);
        co[g.vdim] = (ll)(rest - q * g.fnv.d) * V;
        rest = q;
        for (int k = 0; k < g.nd; k++) {
            unsigned r = fastdiv_div(rest, g.fd[k]);
            co[g.order[k]] = rest - r * g.fd[k].d;
            rest = r;
        }
        ll yo = 0, base = 0;
        for (int d = 0; d < g.rank; d++) {
            yo += co[d] * g.ys[d];
            if (g.ident[d])
                base += co[d] * g.xs[d];
        }
        ll off0[NS], off1[NS];
        float w0[NS], w1[NS];
        bool two[NS];
#pragma unroll
        for (int m = 0; m < NS; m++) {
            int d = g.md[m];
            taps t;
            make_taps(g.p, d, co[d], g.xd[d], g.yd[d], &t);
            two[m] = t.count > 1;
            off0[m] = t.idx[0] * g.xs[d];
            off1[m] = two[m] ? t.idx[1] * g.xs[d] : off0[m];
            w0[m] = (float)t.w[0];
            w1[m] = (float)t.w[1];
        }
        float acc[V];
#pragma unroll
        for (int u = 0; u < V; u++)
            acc[u] = 0;
        // Combinations with the first dim's tap slowest, as the general kernel.
#pragma unroll
        for (int c = 0; c < (1 << NS); c++) {
            bool skip = false;
            float w = 1;
            ll off = base;
#pragma unroll
            for (int m = 0; m < NS; m++) {
                bool hi = (c >> (NS - 1 - m)) & 1;
                skip |= hi && !two[m];
                off += hi ? off1[m] : off0[m];
                if (two[m])
                    w *= hi ? w1[m] : w0[m];
            }
            if (skip)
                continue;
            float v[V];
            vec16_unpack<XT>(*reinterpret_cast<const uint4 *>(static_cast<const char *>(x) + off * es), v);
#pragma unroll
            for (int u = 0; u < V; u++)
                acc[u] += w * v[u];
        }
        *reinterpret_cast<uint4 *>(static_cast<char *>(y) + yo * es) = vec16_pack<XT>(acc);
    }
}

// Whether the vector kernel takes the resize: channels-last (a contiguous
// identity dim innermost) float16/bfloat16/float32 on both sides, linear or
// nearest, 1 to 3 dims resized, 16-byte aligned vectors everywhere.
static bool vec_path(const sgk_resize_params *p, const sgk_view *y, const sgk_view *x, const rsgeom &g)
{
    int w = vec16_width(x->dtype);
    if (w == 0 || x->dtype != y->dtype || g.vdim < 0 || !g.small || g.nmd < 1 || g.nmd > 3 ||
        (p->mode != SGK_RESIZE_LINEAR && p->mode != SGK_RESIZE_NEAREST) || p->coord == SGK_COORD_TF_CROP_AND_RESIZE)
        return false;
    if (x->strides[g.vdim] != 1 || y->strides[g.vdim] != 1 || y->dims[g.vdim] % w != 0 || !aligned16(x->data) ||
        !aligned16(y->data))
        return false;
    for (int d = 0; d < g.rank; d++)
        if (d != g.vdim && ((x->dims[d] > 1 && x->strides[d] % w != 0) || (y->dims[d] > 1 && y->strides[d] % w != 0)))
            return false;
    return true;
}

template <int XT> static void resize_vec_launch(cudaStream_t stream, const sgk_view *y, const sgk_view *x, rsgeom g)
{
    ll blocks = ceil_div(g.work, 256);
    blocks = blocks > (1 << 20) ? (1 << 20) : blocks;
    switch (g.nmd) {
    case 1: resize_vec_kernel<XT, 1><<<(unsigned)blocks, 256, 0, stream>>>(x->data, y->data, g); break;
    case 2: resize_vec_kernel<XT, 2><<<(unsigned)blocks, 256, 0, stream>>>(x->data, y->data, g); break;
    default: resize_vec_kernel<XT, 3><<<(unsigned)blocks, 256, 0, stream>>>(x->data, y->data, g); break;
    }
}

template <int XT, typename T>
static void resize_launch(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const rsgeom &g, int v)
{
    ll blocks = ceil_div(g.work, 256);
    blocks = blocks > (1 << 20) ? (1 << 20) : blocks;
    switch (v) {
    case 8:
        resize_kernel<XT, T, 8><<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, g);
        break;
    case 4:
        resize_kernel<XT, T, 4><<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, g);
        break;
    default:
        resize_kernel<XT, T, 1><<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, g);
        break;
    }
}

// The work's geometry of resizing x into y (*empty: nothing to do), and the
// channels per item of the general kernel (*v).
static segrt_status resize_geom(const sgk_resize_params *p, const sgk_view *y, const sgk_view *x, rsgeom &g, int *v,
                                bool *empty)
{
    *empty = false;
    if (x->rank != y->rank)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_resize: ranks differ (%d, %d)", x->rank, y->rank);
    if (p->mode != SGK_RESIZE_NEAREST && (!is_float(x->dtype) || !is_float(y->dtype)))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_resize: linear and cubic modes take float dtypes only");
    memset(&g, 0, sizeof g);
    g.rank = x->rank;
    g.p = *p;
    ll total = 1;
    for (int d = 0; d < g.rank; d++) {
        g.xd[d] = x->dims[d];
        g.xs[d] = x->strides[d];
        g.yd[d] = y->dims[d];
        g.ys[d] = y->strides[d];
        total *= y->dims[d];
    }
    if (total == 0) {
        *empty = true;
        return SEGRT_OK;
    }
    for (int d = 0; d < g.rank; d++)
        if (x->dims[d] == 0)
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_resize: empty input");
    // A dim whose transform is the identity (same size, scale exactly 1)
    // reads its own coordinate: every coordinate transform gives x back
    // exactly while x + 0.5 and x * (in - 1) are exact in float, and
    // tf_crop_and_resize only with the whole ROI.
    for (int d = 0; d < g.rank; d++) {
        bool products = p->coord == SGK_COORD_ALIGN_CORNERS || p->coord == SGK_COORD_TF_CROP_AND_RESIZE;
        bool whole_roi = p->roi_start[d] == 0.0f && p->roi_end[d] == 1.0f;
        g.ident[d] = x->dims[d] == y->dims[d] && p->scale[d] == 1.0f && x->dims[d] <= (products ? 4096 : (1 << 22)) &&
                     (p->coord != SGK_COORD_TF_CROP_AND_RESIZE || whole_roi);
    }
    // Work order: smallest output stride first (later dims first among
    // equals); size-1 dims drop out.
    int perm[SGK_MAX_RANK], np = 0;
    for (int d = 0; d < g.rank; d++)
        if (y->dims[d] > 1)
            perm[np++] = d;
    for (int i = 1; i < np; i++)
        for (int k = i; k > 0; k--) {
            int a = perm[k - 1], b = perm[k];
            bool swap = llabs_(g.ys[b]) < llabs_(g.ys[a]) || (llabs_(g.ys[b]) == llabs_(g.ys[a]) && b > a);
            if (!swap)
                break;
            perm[k - 1] = b;
            perm[k] = a;
        }
    // The innermost dim, when the transform leaves it alone (channels of a
    // channels-last tensor), is walked V elements per thread.
    *v = 1;
    g.vdim = -1;
    if (np > 0 && g.ident[perm[0]] && y->dims[perm[0]] >= 4) {
        g.vdim = perm[0];
        *v = y->dims[perm[0]] >= 8 ? 8 : 4;
        g.nv = ceil_div(y->dims[perm[0]], *v);
    }
    g.nd = 0;
    for (int i = g.vdim >= 0 ? 1 : 0; i < np; i++)
        g.order[g.nd++] = perm[i];
    g.work = total / (g.vdim >= 0 ? y->dims[g.vdim] : 1) * (g.vdim >= 0 ? g.nv : 1);
    g.small = g.work < ((ll)1 << 31);
    if (g.small) {
        for (int k = 0; k < g.nd; k++)
            g.fd[k] = fastdiv_make((unsigned)g.yd[g.order[k]]);
        if (g.vdim >= 0)
            g.fnv = fastdiv_make((unsigned)g.nv);
    }
    g.raw = x->dtype == y->dtype;
    g.esize = (int)segrt_dtype_size(x->dtype);
    for (int d = 0; d < g.rank; d++)
        if (!g.ident[d])
            g.md[g.nmd++] = d;
    return SEGRT_OK;
}

extern "C" bool sgk_resize_vec_fits(const sgk_resize_params *p, const sgk_view *y, const sgk_view *x)
{
    rsgeom g;
    int v;
    bool empty;
    return resize_geom(p, y, x, g, &v, &empty) == SEGRT_OK && !empty && vec_path(p, y, x, g);
}

extern "C" segrt_status sgk_resize(cudaStream_t stream, const sgk_resize_params *p, const sgk_view *y,
                                   const sgk_view *x)
{
    rsgeom g;
    int v;
    bool empty;
    segrt_status st = resize_geom(p, y, x, g, &v, &empty);
    if (st != SEGRT_OK || empty)
        return st;
    ll total = 1;
    for (int d = 0; d < y->rank; d++)
        total *= y->dims[d];
    if (vec_path(p, y, x, g)) {
        // Work items of a whole vector: the channel chunks recounted.
        int w = vec16_width(x->dtype);
        g.nv = y->dims[g.vdim] / w;
        g.fnv = fastdiv_make((unsigned)g.nv);
        g.work = total / y->dims[g.vdim] * g.nv;
        switch (x->dtype) {
        case SEGRT_DTYPE_FLOAT16: resize_vec_launch<SEGRT_DTYPE_FLOAT16>(stream, y, x, g); break;
        case SEGRT_DTYPE_BFLOAT16: resize_vec_launch<SEGRT_DTYPE_BFLOAT16>(stream, y, x, g); break;
        default: resize_vec_launch<SEGRT_DTYPE_FLOAT32>(stream, y, x, g); break;
        }
        return launched("resize_vec_kernel");
    }
    switch (x->dtype) {
    case SEGRT_DTYPE_FLOAT16: resize_launch<SEGRT_DTYPE_FLOAT16, float>(stream, y, x, g, v); break;
    case SEGRT_DTYPE_BFLOAT16: resize_launch<SEGRT_DTYPE_BFLOAT16, float>(stream, y, x, g, v); break;
    case SEGRT_DTYPE_FLOAT32: resize_launch<SEGRT_DTYPE_FLOAT32, float>(stream, y, x, g, v); break;
    default: resize_launch<0, double>(stream, y, x, g, v); break; // float64, and integers (nearest)
    }
    return launched("resize_kernel");
}
