// Slide kernels (k_slide.h). A thread per output pixel of one channel:
// its rows' weights are the block's (one output row a block row), its
// columns' its own.
#include "backend/cuda/k_slide.h"

#include "backend/cuda/k_common.cuh"

namespace {

#define AREA_THREADS 256

struct area_args {
    const unsigned char *src;
    ll src_pitch, src_plane, src_ring;
    sgk_area_axis rows, cols;
    ll row0, n_cols;
    sgk_norm3 norm;
    float *dst;
    ll dst_pitch, dst_cstride;
};

__global__ void area_u8_kernel(area_args a)
{
    const ll x = (ll)blockIdx.x * AREA_THREADS + threadIdx.x;
    if (x >= a.n_cols)
        return;
    const ll i = a.row0 + blockIdx.y, c = blockIdx.z;
    const unsigned char *plane = a.src + c * a.src_plane;
    const ll r0 = a.rows.first[i], c0 = a.cols.first[x];
    const int nr = a.rows.count[i], nc = a.cols.count[x];
    const float *wr = a.rows.w + i * a.rows.span, *wc = a.cols.w + x * a.cols.span;
    float v = 0.0f;
    for (int k = 0; k < nr; k++) {
        const unsigned char *line = plane + ((r0 + k) % a.src_ring) * a.src_pitch + c0;
        float s = 0.0f;
        for (int l = 0; l < nc; l++)
            s += wc[l] * (float)line[l];
        v += wr[k] * s;
    }
    if (a.norm.on) // rounded at each step, as the host's float32 loop
        v = __fdiv_rn(__fsub_rn(__fmul_rn(v, a.norm.scale), a.norm.mean[c]), a.norm.std[c]);
    a.dst[c * a.dst_cstride + (ll)blockIdx.y * a.dst_pitch + x] = v;
}

} // namespace

extern "C" segrt_status sgk_area_u8(cudaStream_t stream, const uint8_t *src, int64_t src_pitch, int64_t src_plane,
                                    int64_t src_ring, int32_t channels, const sgk_area_axis *rows, int64_t row0,
                                    int64_t n_rows, const sgk_area_axis *cols, int64_t n_cols,
                                    const sgk_norm3 *norm, float *dst, int64_t dst_pitch, int64_t dst_cstride)
{
    if (n_rows < 1 || n_cols < 1)
        return SEGRT_OK;
    if (n_rows > 65535 || channels < 1 || channels > 3 || src_ring < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "slide resampling: %lld rows of %d channels in one launch",
                        (long long)n_rows, (int)channels);
    area_args a = {src, src_pitch, src_plane, src_ring, *rows, *cols, row0, n_cols, *norm, dst, dst_pitch, dst_cstride};
    dim3 grid((unsigned)((n_cols + AREA_THREADS - 1) / AREA_THREADS), (unsigned)n_rows, (unsigned)channels);
    area_u8_kernel<<<grid, AREA_THREADS, 0, stream>>>(a);
    return launched("sgk_area_u8");
}
