/* Conv and ConvTranspose: each family's ordered list of implementations,
 * segrt's kernels first (cuda_conv_small.c, cuda_conv_mma.c,
 * cuda_conv_upsample.c, cuda_conv_up_k3.c) and cuDNN's last (cudnn_conv.c),
 * and the lists of the kernels that take an input's normalisation left to
 * the layer (cuda_build_norm.c), asked first where there is one. */
#include "backend/cuda/cuda_internal.h"

static sg_status cudnn_conv(sg_cuda_plan *p, const sg_node *n)
{
    return cuda_build_conv_cudnn(p, n, false);
}

static sg_status cudnn_dgrad(sg_cuda_plan *p, const sg_node *n)
{
    return cuda_build_conv_cudnn(p, n, true);
}

static sg_status small_conv(sg_cuda_plan *p, const sg_node *n, bool *taken)
{
    return cuda_build_conv_small(p, n, false, taken);
}

static sg_status small_conv_transpose(sg_cuda_plan *p, const sg_node *n, bool *taken)
{
    return cuda_build_conv_small(p, n, true, taken);
}

/* Whether a kernel switch leaves the implementation on (each builder asks
 * again; the table says it where the order is read). */
static bool small_on(const sg_cuda_plan *p, const sg_node *n)
{
    (void)n;
    return !cuda_off(p, SG_KERNEL_SMALL_CONV);
}

static bool mma_on(const sg_cuda_plan *p, const sg_node *n)
{
    (void)n;
    return !cuda_off(p, SG_KERNEL_MMA_CONV);
}

static bool upsample_on(const sg_cuda_plan *p, const sg_node *n)
{
    (void)n;
    return !cuda_off(p, SG_KERNEL_UPSAMPLE_CONV);
}

static bool up_k3_on(const sg_cuda_plan *p, const sg_node *n)
{
    (void)n;
    return !cuda_off(p, SG_KERNEL_UP_K3);
}

/* A Conv whose input's normalisation was left to it (cuda_build_norm.c):
 * only these kernels apply it as they load x; had none taken the layer
 * (they said they would), it reads the normalised tensor and goes down
 * conv_impls. */
static const cuda_impl conv_norm_takers[] = {
    {"segrt small conv", small_on, small_conv, NULL},
    {"segrt mma conv", mma_on, cuda_build_conv_mma, NULL},
    {NULL, NULL, NULL, NULL}, /* the end */
};

/* Conv, in order. A few output channels leave tensor cores idle: segrt's
 * direct kernel (cuda_conv_small.c) runs those layers faster than cuDNN.
 * Then 3x3(x3) convolutions with few output channels (cuda_conv_mma.c),
 * which leave most of cuDNN's channel tiles empty. Then an image's other
 * first layers (few input channels: a stride-2 one, say), which cuDNN
 * would read from a copy padded to 8 channels, 8 times the image's bytes
 * (cuda_build_conv_few_inputs). cuDNN takes the rest. */
static const cuda_impl conv_impls[] = {
    {"segrt small conv", small_on, small_conv, NULL},
    {"segrt mma conv", mma_on, cuda_build_conv_mma, NULL},
    {"segrt small conv (few inputs)", small_on, cuda_build_conv_few_inputs, NULL},
    {"cudnn conv", NULL, NULL, cudnn_conv},
    {NULL, NULL, NULL, NULL}, /* the end */
};

/* A ConvTranspose whose input's normalisation was left to it. */
static const cuda_impl conv_transpose_norm_takers[] = {
    {"segrt upsample conv", upsample_on, cuda_build_conv_upsample, NULL},
    {NULL, NULL, NULL, NULL}, /* the end */
};

/* ConvTranspose, in order: MONAI UNet's upsampling (kernel 3, stride 2)
 * on segrt's tensor-core kernel (cuda_conv_up_k3.c), whatever its output
 * channels; few output channels on the direct kernel; the kernel == stride
 * upsampling of a UNet's decoder (cuda_conv_upsample.c), which cuDNN runs
 * as a strided dgrad; cuDNN's dgrad for the rest. */
static const cuda_impl conv_transpose_impls[] = {
    {"segrt convT k3s2", up_k3_on, cuda_build_conv_up_k3, NULL},
    {"segrt small conv", small_on, small_conv_transpose, NULL},
    {"segrt upsample conv", upsample_on, cuda_build_conv_upsample, NULL},
    {"cudnn dgrad", NULL, NULL, cudnn_dgrad},
    {NULL, NULL, NULL, NULL}, /* the end */
};

static sg_status build(sg_cuda_plan *p, const sg_node *n, const cuda_impl *norm_takers, const cuda_impl *impls)
{
    bool taken = false;
    if (n->n_inputs >= 1 && cuda_deferred_norm_find(p, n->inputs[0])) {
        SG_TRY(cuda_impls_run(p, n, norm_takers, &taken));
        if (taken)
            return SEGRT_OK;
        SG_TRY(cuda_deferred_norm_apply(p, n->inputs[0]));
    }
    return cuda_impls_build(p, n, impls);
}

sg_status cuda_build_conv(sg_cuda_plan *p, const sg_node *n)
{
    return build(p, n, conv_norm_takers, conv_impls);
}

sg_status cuda_build_conv_transpose(sg_cuda_plan *p, const sg_node *n)
{
    return build(p, n, conv_transpose_norm_takers, conv_transpose_impls);
}
