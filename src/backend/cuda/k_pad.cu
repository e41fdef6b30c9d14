// Channel padding (cuda_kernels.h): a few-channel input (an RGB image)
// becomes a channels-last tensor of 8 channels, the rest zero, so that the
// first convolution runs on cuDNN's tensor-core kernels. One thread writes
// one 16-byte run of 8 channels at one position; reading x through its
// strides, consecutive threads read consecutive positions of each plain
// channel plane.
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/k_common.cuh"

#include <stdint.h>

namespace {

struct padgeom {
    int C, runs;          // x's channels; runs of 8 channels per position (Cp / 8)
    uint32_t per_sample;  // positions times runs in one sample
    fastdiv fruns, fs2, fs1;
    ll xn, xc, xs[3];     // x strides, lifted to 3 spatial dims (0 along the leading unit dims)
};

template <int YT>
__global__ void pad_channels_kernel(const void *__restrict__ x, segrt_dtype xdt, uint4 *__restrict__ y, padgeom g)
{
    const int n = blockIdx.y;
    uint4 *yn = y + (ll)n * g.per_sample;
    const ll xb = (ll)n * g.xn;
    for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < g.per_sample; t += gridDim.x * blockDim.x) {
        uint32_t pos = fastdiv_div(t, g.fruns);
        const int run = (int)(t - pos * g.fruns.d);
        uint32_t r = fastdiv_div(pos, g.fs2);
        const int i2 = (int)(pos - r * g.fs2.d);
        const uint32_t i0 = fastdiv_div(r, g.fs1);
        const int i1 = (int)(r - i0 * g.fs1.d);
        const ll xo = xb + (ll)i0 * g.xs[0] + (ll)i1 * g.xs[1] + (ll)i2 * g.xs[2];
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = run * 8 + j;
            v[j] = c < g.C ? ld_f32(x, xo + (ll)c * g.xc, xdt) : 0.0f;
        }
        yn[t] = vec16_pack<YT>(v);
    }
}

bool dense_channels_last(const sgk_view *y)
{
    ll want = 1;
    if (y->strides[1] != 1)
        return false;
    want = y->dims[1];
    for (int d = y->rank - 1; d >= 2; d--) {
        if (y->dims[d] > 1 && y->strides[d] != want)
            return false;
        want *= y->dims[d];
    }
    return y->dims[0] <= 1 || y->strides[0] == want;
}

} // namespace

extern "C" bool sgk_pad_channels_fits(const sgk_view *y, const sgk_view *x)
{
    if ((y->dtype != SEGRT_DTYPE_FLOAT16 && y->dtype != SEGRT_DTYPE_BFLOAT16) || y->rank < 3 || y->rank > 5 ||
        x->rank != y->rank || y->dims[1] % 8 != 0 || x->dims[1] > y->dims[1] || x->dims[0] != y->dims[0] ||
        y->dims[0] > 65535 || !dense_channels_last(y))
        return false;
    if (x->dtype != SEGRT_DTYPE_FLOAT32 && x->dtype != SEGRT_DTYPE_FLOAT16 && x->dtype != SEGRT_DTYPE_BFLOAT16)
        return false;
    ll per_sample = y->dims[1] / 8;
    for (int d = 2; d < y->rank; d++) {
        if (x->dims[d] != y->dims[d])
            return false;
        per_sample *= y->dims[d];
    }
    return per_sample < ((ll)1 << 31);
}

extern "C" segrt_status sgk_pad_channels(cudaStream_t stream, const sgk_view *y, const sgk_view *x)
{
    if (!sgk_pad_channels_fits(y, x))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "sgk_pad_channels: %s to %s with %lld of %lld channels is outside "
                        "what the kernel takes", segrt_dtype_name(x->dtype), segrt_dtype_name(y->dtype),
                        (long long)x->dims[1], (long long)y->dims[1]);
    if (((uintptr_t)y->data & 15) != 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pad_channels: the output is not 16-byte aligned");
    padgeom g;
    g.C = (int)x->dims[1];
    g.runs = (int)(y->dims[1] / 8);
    g.xn = x->strides[0];
    g.xc = x->strides[1];
    ll sp[3];
    const int nsp = y->rank - 2;
    for (int a = 0; a < 3; a++) {
        const int s = a - (3 - nsp);
        sp[a] = s >= 0 ? y->dims[2 + s] : 1;
        g.xs[a] = s >= 0 ? x->strides[2 + s] : 0;
    }
    ll per_sample = (ll)g.runs * sp[0] * sp[1] * sp[2];
    if (per_sample == 0 || y->dims[0] == 0)
        return SEGRT_OK;
    g.per_sample = (uint32_t)per_sample;
    g.fruns = fastdiv_make((uint32_t)g.runs);
    g.fs2 = fastdiv_make((uint32_t)sp[2]);
    g.fs1 = fastdiv_make((uint32_t)sp[1]);
    const int threads = 256;
    ll blocks = ceil_div(per_sample, threads);
    blocks = blocks < 4096 ? blocks : 4096;
    dim3 grid((unsigned)blocks, (unsigned)y->dims[0]);
    if (y->dtype == SEGRT_DTYPE_FLOAT16)
        pad_channels_kernel<SEGRT_DTYPE_FLOAT16><<<grid, threads, 0, stream>>>(x->data, x->dtype, (uint4 *)y->data, g);
    else
        pad_channels_kernel<SEGRT_DTYPE_BFLOAT16><<<grid, threads, 0, stream>>>(x->data, x->dtype, (uint4 *)y->data, g);
    return launched("pad_channels_kernel");
}
