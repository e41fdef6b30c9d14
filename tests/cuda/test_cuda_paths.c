/* Which of segrt's CUDA kernels a geometry takes, decided on the host
 * without a GPU (the views' data NULL, as when a builder asks): the
 * resize's vector kernel (k_resize.cu) for channels-last activations and
 * not for what it cannot read as 16-byte vectors, and the attention's
 * tensor-core kernel (k_attention.cu) for float16/bfloat16 head dims up to
 * 128. A kernel that quietly never runs passes every numerical test, so
 * the choice itself is checked here. */
#include "backend/cuda/cuda_kernels.h"
#include "testlib.h"

#include <string.h>

/* [N, C, spatial...] of dtype dt, channels-last (cl) or row-major. */
static sgk_view view(segrt_dtype dt, int64_t N, int64_t C, int32_t nsp, const int64_t *spatial, bool cl)
{
    sgk_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = 2 + nsp;
    v.dims[0] = N;
    v.dims[1] = C;
    for (int32_t d = 0; d < nsp; d++)
        v.dims[2 + d] = spatial[d];
    int64_t s = 1;
    if (cl) {
        v.strides[1] = 1;
        s = C;
        for (int32_t d = v.rank - 1; d >= 2; d--) {
            v.strides[d] = s;
            s *= v.dims[d];
        }
        v.strides[0] = s;
    } else {
        for (int32_t d = v.rank - 1; d >= 0; d--) {
            v.strides[d] = s;
            s *= v.dims[d];
        }
    }
    return v;
}

static sgk_resize_params params(sgk_resize_mode mode, sgk_resize_coord coord, const sgk_view *y, const sgk_view *x)
{
    sgk_resize_params p;
    memset(&p, 0, sizeof p);
    p.mode = mode;
    p.coord = coord;
    p.cubic_a = -0.75f;
    for (int32_t d = 0; d < x->rank; d++) {
        p.scale[d] = (float)y->dims[d] / (float)x->dims[d];
        p.roi_end[d] = 1;
    }
    return p;
}

static bool fits(segrt_dtype dt, int64_t C, int32_t nsp, const int64_t *in, const int64_t *out, bool x_cl, bool y_cl,
                 sgk_resize_mode mode, sgk_resize_coord coord)
{
    sgk_view x = view(dt, 2, C, nsp, in, x_cl), y = view(dt, 2, C, nsp, out, y_cl);
    sgk_resize_params p = params(mode, coord, &y, &x);
    return sgk_resize_vec_fits(&p, &y, &x);
}

static void test_resize(void)
{
    const int64_t a2[] = {32, 32}, b2[] = {128, 128}, c2[] = {17, 40}, a3[] = {8, 9, 10}, b3[] = {16, 18, 20};
    const segrt_dtype dts[] = {SEGRT_DTYPE_FLOAT16, SEGRT_DTYPE_BFLOAT16, SEGRT_DTYPE_FLOAT32};
    for (int i = 0; i < 3; i++) {
        segrt_dtype dt = dts[i];
        /* A decoder's upsampling: 2-D and 3-D, linear and nearest, any coordinates but a crop. */
        CHECK(fits(dt, 256, 2, a2, b2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_PYTORCH_HALF_PIXEL));
        CHECK(fits(dt, 16, 2, a2, c2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_ALIGN_CORNERS));
        CHECK(fits(dt, 8, 3, a3, b3, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
        CHECK(fits(dt, 32, 3, a3, b3, true, true, SGK_RESIZE_NEAREST, SGK_COORD_ASYMMETRIC));
        CHECK(fits(dt, 64, 2, b2, a2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
        /* Not: row-major on either side, cubic, a crop, channels that do not fill vectors. */
        CHECK(!fits(dt, 256, 2, a2, b2, false, false, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
        CHECK(!fits(dt, 256, 2, a2, b2, true, false, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
        CHECK(!fits(dt, 256, 2, a2, b2, true, true, SGK_RESIZE_CUBIC, SGK_COORD_HALF_PIXEL));
        CHECK(!fits(dt, 256, 2, a2, b2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_TF_CROP_AND_RESIZE));
        CHECK(!fits(dt, 6, 2, a2, b2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
    }
    CHECK(fits(SEGRT_DTYPE_FLOAT32, 4, 2, a2, b2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
    CHECK(!fits(SEGRT_DTYPE_FLOAT16, 4, 2, a2, b2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
    CHECK(!fits(SEGRT_DTYPE_FLOAT64, 256, 2, a2, b2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
    /* Nothing resized: a copy, not the vector kernel's work. */
    CHECK(!fits(SEGRT_DTYPE_FLOAT16, 256, 2, a2, a2, true, true, SGK_RESIZE_LINEAR, SGK_COORD_HALF_PIXEL));
    /* A slice of a channels-last Concat (its channel stride 1, position stride the Concat's channels). */
    sgk_view x = view(SEGRT_DTYPE_FLOAT16, 2, 256, 2, a2, true),
             whole = view(SEGRT_DTYPE_FLOAT16, 2, 1024, 2, b2, true);
    sgk_view y = whole;
    y.dims[1] = 256;
    sgk_resize_params p = params(SGK_RESIZE_LINEAR, SGK_COORD_PYTORCH_HALF_PIXEL, &y, &x);
    CHECK(sgk_resize_vec_fits(&p, &y, &x));
}

static void test_attention(void)
{
    const int64_t takes[] = {1, 8, 16, 32, 48, 64, 96, 128};
    for (int i = 0; i < (int)(sizeof takes / sizeof *takes); i++) {
        CHECK(sgk_sdpa_mma_takes(SEGRT_DTYPE_FLOAT16, takes[i], takes[i]));
        CHECK(sgk_sdpa_mma_takes(SEGRT_DTYPE_BFLOAT16, takes[i], 16));
        CHECK(!sgk_sdpa_mma_takes(SEGRT_DTYPE_FLOAT32, takes[i], takes[i]));
        CHECK(!sgk_sdpa_mma_takes(SEGRT_DTYPE_FLOAT64, takes[i], takes[i]));
    }
    CHECK(!sgk_sdpa_mma_takes(SEGRT_DTYPE_FLOAT16, 160, 64));
    CHECK(!sgk_sdpa_mma_takes(SEGRT_DTYPE_FLOAT16, 64, 129));
}

int main(void)
{
    test_resize();
    test_attention();
    return sg_test_finish("test_cuda_paths");
}
