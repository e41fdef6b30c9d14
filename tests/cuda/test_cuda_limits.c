/* segrt's shared-memory-hungry CUDA kernels plan within the shared memory
 * a block may hold on the GPU they are planned for (smem_limit in their
 * parameters, the plan's: 64 KB on 7.5, 99 KB on 8.6, 8.9 and 12.x, 163 KB
 * on 8.0, 227 KB on 9.0), so that a layer the H200 runs on a kernel is
 * left to another path on a GPU that could not launch it. Planning needs
 * no GPU (the views' data are NULL, as when a builder asks). */
#include "backend/cuda/k_conv_mma.h"
#include "backend/cuda/k_conv_up_k3.h"
#include "backend/cuda/k_conv_upsample.h"
#include "testlib.h"

#include <string.h>

/* A channels-last [1, C, spatial...] view of dtype dt. */
static sgk_view view_cl(segrt_dtype dt, int64_t C, int32_t nsp, const int64_t *spatial)
{
    sgk_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = 2 + nsp;
    v.dims[0] = 1;
    v.dims[1] = C;
    int64_t s = C;
    for (int32_t d = nsp - 1; d >= 0; d--) {
        v.dims[2 + d] = spatial[d];
        v.strides[2 + d] = s;
        s *= spatial[d];
    }
    v.strides[1] = 1;
    v.strides[0] = s;
    return v;
}

/* The limits in the order they allow more, 0 (the kernel's own most)
 * last: a layer that fits under one fits under every later one. */
static const int32_t limits[] = {16 * 1024, 48 * 1024, 64 * 1024, 99 * 1024, 163 * 1024, 227 * 1024, 0};
#define N_LIMITS ((int)(sizeof limits / sizeof *limits))

/* fits[i] for limits[i]: monotonic; *tighter set where some limit turned
 * a layer the kernel takes at its most away. */
static void check_monotonic(const char *what, const bool *fits, bool *tighter)
{
    for (int i = 1; i < N_LIMITS; i++)
        CHECK_MSG(!fits[i - 1] || fits[i], "%s: fits under %d bytes but not under %d", what, limits[i - 1], limits[i]);
    for (int i = 0; i < N_LIMITS - 1; i++)
        *tighter |= fits[N_LIMITS - 1] && !fits[i];
}

/* Whether each kernel takes a layer of n_spatial dims, C inputs and K
 * outputs (float16, channels-last, 32 positions a side; the ConvTransposes
 * from 16) under a limit. */
typedef bool (*fits_fn)(int32_t nsp, int64_t C, int32_t K, int32_t limit);

static bool mma_fits(int32_t nsp, int64_t C, int32_t K, int32_t limit)
{
    const int64_t sp[3] = {32, 32, 32};
    sgk_view x = view_cl(SEGRT_DTYPE_FLOAT16, C, nsp, sp), y = view_cl(SEGRT_DTYPE_FLOAT16, K, nsp, sp);
    sgk_conv_mma_params p;
    memset(&p, 0, sizeof p);
    p.n_spatial = nsp;
    p.C = (int32_t)C;
    p.K = K;
    p.sm_count = 132;
    p.smem_limit = limit;
    bool fits = sgk_conv_mma_fits(&p, &y, &x, NULL, NULL);
    /* The statistics' sums are static shared memory: they take from the
     * same limit. */
    p.stats = true;
    CHECK_MSG(!sgk_conv_mma_fits(&p, &y, &x, NULL, NULL) || fits,
              "mma %dd C %lld K %d: fits with statistics but not without", nsp, (long long)C, K);
    return fits;
}

static bool up_k3_fits(int32_t nsp, int64_t C, int32_t K, int32_t limit)
{
    const int64_t sp[3] = {16, 16, 16}, up[3] = {32, 32, 32};
    sgk_view x = view_cl(SEGRT_DTYPE_FLOAT16, C, nsp, sp), y = view_cl(SEGRT_DTYPE_FLOAT16, K, nsp, up);
    sgk_conv_up_k3_params p;
    memset(&p, 0, sizeof p);
    p.n_spatial = nsp;
    p.C = (int32_t)C;
    p.K = K;
    p.sm_count = 132;
    p.smem_limit = limit;
    return sgk_conv_up_k3_fits(&p, &y, &x);
}

static bool upsample_fits(int32_t nsp, int64_t C, int32_t K, int32_t limit)
{
    const int64_t sp[3] = {16, 16, 16}, up[3] = {32, 32, 32};
    sgk_view x = view_cl(SEGRT_DTYPE_FLOAT16, C, nsp, sp), y = view_cl(SEGRT_DTYPE_FLOAT16, K, nsp, up);
    sgk_conv_up_params p;
    memset(&p, 0, sizeof p);
    p.n_spatial = nsp;
    for (int32_t d = 0; d < nsp; d++)
        p.kernel[d] = 2;
    p.C = (int32_t)C;
    p.K = K;
    p.sm_count = 132;
    p.smem_limit = limit;
    return sgk_conv_up_fits(&p, &y, &x);
}

/* Every layer of C in [c_step, c_max] by c_step and K in [k_min, k_max]
 * by doubling (3-D: K at most k_max_3d), 2-D and 3-D: the kernel takes
 * some of them, and some limit turns away a layer it takes at its most. */
static void sweep(const char *kernel, fits_fn fits_at, int64_t c_step, int64_t c_max, int32_t k_min, int32_t k_max,
                  int32_t k_max_3d)
{
    bool tighter = false, any = false;
    for (int32_t nsp = 2; nsp <= 3; nsp++)
        for (int64_t C = c_step; C <= c_max; C += c_step)
            for (int32_t K = k_min; K <= (nsp == 3 ? k_max_3d : k_max); K *= 2) {
                bool fits[N_LIMITS];
                for (int i = 0; i < N_LIMITS; i++)
                    fits[i] = fits_at(nsp, C, K, limits[i]);
                char what[64];
                snprintf(what, sizeof what, "%s %dd C %lld K %d", kernel, nsp, (long long)C, K);
                check_monotonic(what, fits, &tighter);
                any |= fits[N_LIMITS - 1];
            }
    CHECK_MSG(any, "the %s kernel takes none of the layers", kernel);
    CHECK_MSG(tighter, "no limit turned away a layer the %s kernel takes at its most", kernel);
}

int main(void)
{
    sweep("mma", mma_fits, 16, 256, 8, 32, 16);
    sweep("up-k3", up_k3_fits, 8, 64, 2, 64, 64);
    sweep("upsample", upsample_fits, 8, 64, 8, 256, 256);
    return sg_test_finish("test_cuda_limits");
}
