// Tensor-core building blocks shared by segrt's mma.sync kernels
// (k_conv_upsample.cu, k_conv_mma.cu, k_conv_up_k3.cu): the 16-bit element
// type of a segrt dtype, rounding into it, the m16n8k16 product, ldmatrix,
// cp.async and the epilogue's two-channel store.
#ifndef SG_BACKEND_CUDA_K_MMA_CUH
#define SG_BACKEND_CUDA_K_MMA_CUH

#include "backend/cuda/k_common.cuh"

// The m16n8k16 product and cp.async need compute capability 8.0. Below it
// (sm_75's code in a fat binary) they trap, and the plan never chooses
// their kernels there (cuda_kernel_runs in cuda_internal.h); the host pass
// sees the real form, which it does not compile.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define SG_MMA_SYNC 1
#define SG_MS_ASM(...) asm volatile(__VA_ARGS__)
#else
#define SG_MMA_SYNC 0
#define SG_MS_ASM(...) __trap()
#endif

template <int XT> struct mma_elem {
    typedef __half type;
};
template <> struct mma_elem<SEGRT_DTYPE_BFLOAT16> {
    typedef __nv_bfloat16 type;
};

template <int XT> __device__ __forceinline__ typename mma_elem<XT>::type mma_round(float v)
{
    if constexpr (XT == SEGRT_DTYPE_BFLOAT16)
        return __float2bfloat16_rn(v);
    else
        return __float2half_rn(v);
}

// One m16n8k16 product, float32 accumulators d += a * b (PTX ISA's
// fragment layouts: lane = 4 * group + t holds rows group and group + 8,
// columns 2t and 2t + 1 of d).
template <int XT> __device__ __forceinline__ void mma16816(float *d, const uint32_t *a, const uint32_t *b)
{
    if constexpr (XT == SEGRT_DTYPE_BFLOAT16)
        SG_MS_ASM("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        SG_MS_ASM("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A 16x16 operand from shared memory: lanes 8m..8m+7 address rows of 8x8
// matrix m (rows 0-7 / 8-15, columns 0-7 / 8-15, in mma's a0..a3 order).
__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const void *row)
{
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Two 8x8 matrices (lanes 0-7 and 8-15 address their rows): a B operand
// of one n8 block, in mma's b0, b1 order.
__device__ __forceinline__ void ldmatrix_x2(uint32_t *r, const void *row)
{
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// A 16-byte copy from global to shared memory that does not wait; zeros
// when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    SG_MS_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}

// A 4-byte copy the same way (cp.async's smallest; .ca, the only
// caching mode below 16 bytes).
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    SG_MS_ASM("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { SG_MS_ASM("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most one committed group is still in flight. (The
// "memory" clobbers keep the compiler from moving shared-memory loads of
// the landed data above the wait, as it may across an asm without them.)
__device__ __forceinline__ void cp_async_wait1() { SG_MS_ASM("cp.async.wait_group 1;\n" ::: "memory"); }
// ... until none is.
__device__ __forceinline__ void cp_async_wait0() { SG_MS_ASM("cp.async.wait_group 0;\n" ::: "memory"); }
// ... until at most N are.
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    SG_MS_ASM("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Channels c and c + 1 of one output position at element yo of y (dtype
// yt): as one vector where pair says y's channels are contiguous and
// every position's first channel 4-byte (16-bit) or 8-byte (float32)
// aligned, else one element at a time (channel stride yc).
template <int XT>
__device__ __forceinline__ void mma_store_pair(void *y, segrt_dtype yt, bool pair, ll yo, ll yc, float v0, float v1)
{
    typedef typename mma_elem<XT>::type T;
    if (pair && yt == (segrt_dtype)XT) {
        if constexpr (XT == SEGRT_DTYPE_BFLOAT16)
            *(__nv_bfloat162 *)((T *)y + yo) = __floats2bfloat162_rn(v0, v1);
        else
            *(__half2 *)((T *)y + yo) = __floats2half2_rn(v0, v1);
    } else if (pair && yt == SEGRT_DTYPE_FLOAT32) {
        *(float2 *)((float *)y + yo) = make_float2(v0, v1);
    } else {
        st_f32(y, yo, yt, v0);
        st_f32(y, yo + yc, yt, v1);
    }
}

// Hopper's warpgroup products (sm_90a only: elsewhere these trap, and the
// host never launches their kernels; see k_conv_mma.cu).
//
// A shared-memory matrix descriptor without swizzling: 8x8 core matrices
// of 16-byte rows, the eight rows of one 128 contiguous bytes; lbo: bytes
// from one core matrix to the next along K, sbo: along M (or N).
__device__ __forceinline__ uint64_t wg_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3ffff) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SG_WGMMA 1
#define SG_WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define SG_WGMMA 0
#define SG_WG_ASM(...) __trap()
#endif

// Shared-memory stores of the generic proxy (st.shared, cp.async) made
// visible to the warpgroup products, which read through the async proxy.
__device__ __forceinline__ void wg_fence_smem() { SG_WG_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Before a warpgroup's first product over accumulators other instructions wrote.
__device__ __forceinline__ void wg_fence() { SG_WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { SG_WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { SG_WG_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Keeps the compiler from moving reads or writes of an accumulator across
// the asynchronous products' issue and wait.
__device__ __forceinline__ void wg_pin(float &v) { asm volatile("" : "+f"(v)::"memory"); }

// (p: scale-d, 1 to add to d; operand pn holds it.)
#define SG_WG_OP(pn) "{\n.reg .pred p;\nsetp.ne.b32 p, %" pn ", 0;\nwgmma.mma_async.sync.aligned.m64n"
#define SG_WG_D8 "{%0,%1,%2,%3}"
#define SG_WG_D16 "{%0,%1,%2,%3,%4,%5,%6,%7}"
#define SG_WG_D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"

// d (64 x 8 NT, float32; lane layout as mma.sync's m16n8 over the
// warpgroup's four warps, 16 rows each) += a (64 x 16, descriptor da) *
// b (16 x 8 NT, K-major, descriptor db).
template <int XT, int NT> __device__ __forceinline__ void wgmma_k16(float (&d)[NT][4], uint64_t da, uint64_t db)
{
    constexpr bool BF = XT == SEGRT_DTYPE_BFLOAT16;
    if constexpr (NT == 1) {
        if constexpr (BF)
            SG_WG_ASM(SG_WG_OP("6") "8k16.f32.bf16.bf16 " SG_WG_D8 ", %4, %5, p, 1, 1, 0, 0;\n}\n"
                      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
                      : "l"(da), "l"(db), "r"(1));
        else
            SG_WG_ASM(SG_WG_OP("6") "8k16.f32.f16.f16 " SG_WG_D8 ", %4, %5, p, 1, 1, 0, 0;\n}\n"
                      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
                      : "l"(da), "l"(db), "r"(1));
    } else if constexpr (NT == 2) {
        if constexpr (BF)
            SG_WG_ASM(SG_WG_OP("10") "16k16.f32.bf16.bf16 " SG_WG_D16 ", %8, %9, p, 1, 1, 0, 0;\n}\n"
                      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                        "+f"(d[1][2]), "+f"(d[1][3])
                      : "l"(da), "l"(db), "r"(1));
        else
            SG_WG_ASM(SG_WG_OP("10") "16k16.f32.f16.f16 " SG_WG_D16 ", %8, %9, p, 1, 1, 0, 0;\n}\n"
                      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                        "+f"(d[1][2]), "+f"(d[1][3])
                      : "l"(da), "l"(db), "r"(1));
    } else {
        static_assert(NT == 4, "n8, n16 or n32");
        if constexpr (BF)
            SG_WG_ASM(SG_WG_OP("18") "32k16.f32.bf16.bf16 " SG_WG_D32 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
                      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                      : "l"(da), "l"(db), "r"(1));
        else
            SG_WG_ASM(SG_WG_OP("18") "32k16.f32.f16.f16 " SG_WG_D32 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
                      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                      : "l"(da), "l"(db), "r"(1));
    }
}

#endif
