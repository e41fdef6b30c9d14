// The mma.sync form of the 3x3(x3) stride-1 convolution as an implicit
// matrix product on the tensor cores (see k_conv_mma.h): conv_mma and its
// launcher, instantiated for k_conv_mma_instances.cuh's list.
//
// Shared memory holds every weight, [tap][K][C] rounded to the input's
// dtype, and two tiles' input halos, [position][C]: while the warps
// multiply one, cp.async fills the other with the block's next tile
// (zeros where the halo leaves the image). Rows are 16 bytes longer than
// the data so that ldmatrix's eight row reads, of the halo (the A operand)
// and of the weights (B), fall in distinct banks. Each warp owns 32 of the
// tile's 128 output positions (two m16 blocks) and all K channels (K/8 n8
// blocks); for a tap, the A operand of a position is the halo row the tap
// shifts it to, so a tap costs no data movement, only another row address.
#include "backend/cuda/k_conv_mma_common.cuh"
#include "backend/cuda/k_conv_mma_instances.cuh"

// KS: C / 16 where it is 1, 2 or 4 (C, the shared-memory rows and every
// step are then compile-time constants, and the next step's fragments load
// while this step's products run), else 0 (a loop over the 16-channel
// slices). EPI: one of the above.
template <int XT, int NT, bool D3, int KS, int EPI>
__global__ void __launch_bounds__(CM_THREADS, CM_BLOCKS_PER_SM)
    conv_mma(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
             const float *__restrict__ bias, const void *__restrict__ z, float2 *__restrict__ part, cmgeom g)
{
#if SG_MMA_SYNC
    typedef typename mma_elem<XT>::type T;
    typedef cm_shape<D3> S;
    constexpr int K = NT * 8;
    const int C = KS ? KS * 16 : g.C, ldx = cm_ld(C), ldw = cm_ld(C);
    const int ksteps = C / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    T *wsh = (T *)smem;                   // [tap][K][ldw]
    T *xsh0 = wsh + S::taps * K * ldw;    // two of [halo position][ldx]
    T *osh_own = xsh0 + 2 * S::halo * ldx; // the staging tile, where it has its own space
    __shared__ __align__(8) float ssh[cm_static_smem(K, EPI == EPI_STATS) / 4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, t4 = lane & 3;

    // Four weights a load (C is a multiple of 16), several loads in flight.
#pragma unroll 4
    for (int e = threadIdx.x * 4; e < S::taps * K * C; e += CM_THREADS * 4) {
        float4 v = *(const float4 *)(w + e);
        T *d = wsh + (e / C) * ldw + e % C;
        d[0] = mma_round<XT>(v.x);
        d[1] = mma_round<XT>(v.y);
        d[2] = mma_round<XT>(v.z);
        d[3] = mma_round<XT>(v.w);
    }
    // This lane's output channels' biases, read once.
    float bz[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int c = nt * 8 + 2 * t4;
        bz[nt][0] = bias ? bias[c] : 0.0f;
        bz[nt][1] = bias ? bias[c + 1] : 0.0f;
    }
    // This lane's ldmatrix row in each of the warp's two 16-position
    // blocks, as a halo index at tap (0, 0, 0).
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 8;
    int hb[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        int d, h, wi;
        tile_pos<D3>(warp * 32 + mt * 16 + lrow, &d, &h, &wi);
        hb[mt] = (d * S::h1 + h) * S::h2 + wi;
    }
    // The weights as ldmatrix reads them for a pair of n8 blocks: lanes
    // 0-7 and 8-15 address the first block's rows (output channels) at
    // input channels 0-7 and 8-15 of a slice, lanes 16-31 the second's: in
    // mma's b0, b1 order, one instruction for what took four loads.
    const int wrow = (lane & 7) + (lane >> 4) * 8, wcol = ((lane >> 3) & 1) * 8;
    const T *wb = wsh + wrow * ldw + wcol, *wodd = wsh + ((NT - 1) * 8 + grp) * ldw + 2 * t4;
    const T *xt = (const T *)x;
    if (blockIdx.x < g.ntiles)
        halo_issue<D3>(g, xt, blockIdx.x, xsh0, C, ldx);
    cp_async_commit();
    for (int tile = blockIdx.x, it = 0; tile < g.ntiles; tile += gridDim.x, it++) {
        T *xsh = xsh0 + (it & 1) * S::halo * ldx;
        if (tile + (int)gridDim.x < g.ntiles)
            halo_issue<D3>(g, xt, tile + gridDim.x, xsh0 + ((it + 1) & 1) * S::halo * ldx, C, ldx);
        cp_async_commit(); // possibly empty: one group per iteration
        cp_async_wait1();  // this tile's halo has landed (this thread's part)
        __syncthreads();   // everyone's part, and the weights, the first time
        float acc[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[mt][nt][i] = 0.0f;
        const T *xa[2] = {xsh + hb[0] * ldx + lcol, xsh + hb[1] * ldx + lcol};
        if constexpr (KS > 0) {
            // Every tap and slice unrolled, the next step's fragments in
            // flight while this step's products run (loaded just before
            // their products, ldmatrix's latency stalled the tensor pipe).
            constexpr int STEPS = S::taps * KS;
            cm_frags<NT> f[2];
            frags_load<D3>(f[0], xa, wb, wodd, 0, KS, ldx, ldw);
#pragma unroll
            for (int s = 0; s < STEPS; s++) {
                if (s + 1 < STEPS)
                    frags_load<D3>(f[(s + 1) & 1], xa, wb, wodd, s + 1, KS, ldx, ldw);
                frags_mma<XT, NT>(acc, f[s & 1]);
            }
        } else {
#pragma unroll
            for (int tap = 0; tap < S::taps; tap++)
                for (int ks = 0; ks < ksteps; ks++) {
                    cm_frags<NT> f;
                    frags_load<D3>(f, xa, wb, wodd, tap * ksteps + ks, ksteps, ldx, ldw);
                    frags_mma<XT, NT>(acc, f);
                }
        }
        __syncthreads(); // the halo is read: the next iteration may refill it
        tile_epilogue<XT, NT, D3, EPI, false>(g, acc, bz, tile, xsh, osh_own, ssh, threadIdx.x,
                                              [] { __syncthreads(); }, y, z, bias, part);
    }
#else
    __trap(); // never launched here (cuda_kernel_runs)
#endif
}

template <int XT, int NT, bool D3, int KS, int EPI>
segrt_status cm_launch_mma(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if (!smem_opt_in(conv_mma<XT, NT, D3, KS, EPI>, CM_SMEM_MAX, cm_static_smem(NT * 8, EPI == EPI_STATS)))
        return launched("conv_mma (shared memory)");
    conv_mma<XT, NT, D3, KS, EPI><<<grid, CM_THREADS, smem, stream>>>(a.x->data, a.y->data, a.w, a.bias,
                                                                        a.z ? a.z->data : NULL, a.part, g);
    return launched("conv_mma");
}

#define CM_MMA_DEFINE(XT, NT, D3, KS, EPI)                                                                             \
    template segrt_status cm_launch_mma<XT, NT, D3, KS, EPI>(cudaStream_t, unsigned, size_t, const cmargs &,          \
                                                             const cmgeom &);
CM_MMA_INSTANCES(CM_MMA_DEFINE)
