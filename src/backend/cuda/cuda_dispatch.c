/* Dispatch by table: each operator's ordered list of implementations
 * (cuda_impl, cuda_internal.h) and the walk that takes the first one that
 * matches and builds. Ops with one implementation have a list of one; the
 * convolutions' lists, segrt's kernels before cuDNN, are cuda_conv.c's. */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>

/* An op family with one implementation: a list of one. */
#define ONE_IMPL(list, name, fn) static const cuda_impl list[] = {{name, NULL, NULL, fn}, {NULL, NULL, NULL, NULL}}

/* The convolutions' lists are cuda_conv.c's (the order of segrt's kernels
 * and cuDNN's), reached through their family's builder. */
ONE_IMPL(conv_impls, "conv", cuda_build_conv);
ONE_IMPL(conv_transpose_impls, "conv transpose", cuda_build_conv_transpose);
ONE_IMPL(batch_norm_impls, "segrt batch norm", cuda_build_batch_norm);
ONE_IMPL(norm_impls, "segrt norm", cuda_build_norm);
ONE_IMPL(unary_impls, "segrt map", cuda_build_unary);
ONE_IMPL(prelu_impls, "segrt prelu", cuda_build_prelu);
ONE_IMPL(clip_impls, "segrt clip", cuda_build_clip);
ONE_IMPL(softmax_impls, "segrt softmax", cuda_build_softmax);
ONE_IMPL(binary_impls, "segrt binary", cuda_build_binary);
ONE_IMPL(variadic_impls, "segrt variadic", cuda_build_variadic);
ONE_IMPL(where_impls, "segrt where", cuda_build_where);
ONE_IMPL(pool_impls, "segrt pool", cuda_build_pool);
ONE_IMPL(reduce_impls, "segrt reduce", cuda_build_reduce);
ONE_IMPL(resize_impls, "segrt resize", cuda_build_resize);
ONE_IMPL(concat_impls, "segrt concat", cuda_build_concat);
ONE_IMPL(split_impls, "segrt split", cuda_build_split);
ONE_IMPL(slice_impls, "segrt slice", cuda_build_slice);
ONE_IMPL(pad_impls, "segrt pad", cuda_build_pad);
ONE_IMPL(reshape_impls, "segrt reshape", cuda_build_reshape);
ONE_IMPL(transpose_impls, "segrt transpose", cuda_build_transpose);
ONE_IMPL(expand_impls, "segrt expand", cuda_build_expand);
ONE_IMPL(tile_impls, "segrt tile", cuda_build_tile);
ONE_IMPL(gather_impls, "segrt gather", cuda_build_gather);
ONE_IMPL(scatter_nd_impls, "segrt scatter nd", cuda_build_scatter_nd);
ONE_IMPL(gather_elements_impls, "segrt gather elements", cuda_build_gather_elements);
ONE_IMPL(gather_nd_impls, "segrt gather nd", cuda_build_gather_nd);
ONE_IMPL(scatter_elements_impls, "segrt scatter elements", cuda_build_scatter_elements);
ONE_IMPL(cumsum_impls, "segrt cumsum", cuda_build_cumsum);
ONE_IMPL(trilu_impls, "segrt trilu", cuda_build_trilu);
ONE_IMPL(grid_sample_impls, "segrt grid sample", cuda_build_grid_sample);
ONE_IMPL(top_k_impls, "segrt top k", cuda_build_top_k);
ONE_IMPL(one_hot_impls, "segrt one hot", cuda_build_one_hot);
ONE_IMPL(depth_space_impls, "segrt depth space", cuda_build_depth_space);
ONE_IMPL(cast_impls, "segrt cast", cuda_build_cast);
ONE_IMPL(matmul_impls, "matmul", cuda_build_matmul);
ONE_IMPL(gemm_impls, "gemm", cuda_build_gemm);
ONE_IMPL(einsum_impls, "einsum", cuda_build_einsum);
ONE_IMPL(sdpa_impls, "segrt attention", cuda_build_sdpa);

/* Each op's list; NULL for ops folded at build (Shape, Size, Range,
 * ConstantOfShape, Constant) and those the GPU does not run. */
static const cuda_impl *const op_impls[SG_OP_COUNT] = {
    [SG_OP_CONV] = conv_impls,
    [SG_OP_CONV_TRANSPOSE] = conv_transpose_impls,
    [SG_OP_BATCH_NORMALIZATION] = batch_norm_impls,
    [SG_OP_INSTANCE_NORMALIZATION] = norm_impls,
    [SG_OP_GROUP_NORMALIZATION] = norm_impls,
    [SG_OP_LAYER_NORMALIZATION] = norm_impls,
    [SG_OP_RELU] = unary_impls,
    [SG_OP_LEAKY_RELU] = unary_impls,
    [SG_OP_ELU] = unary_impls,
    [SG_OP_SELU] = unary_impls,
    [SG_OP_SIGMOID] = unary_impls,
    [SG_OP_HARD_SIGMOID] = unary_impls,
    [SG_OP_HARD_SWISH] = unary_impls,
    [SG_OP_TANH] = unary_impls,
    [SG_OP_SOFTPLUS] = unary_impls,
    [SG_OP_GELU] = unary_impls,
    [SG_OP_ERF] = unary_impls,
    [SG_OP_SQRT] = unary_impls,
    [SG_OP_EXP] = unary_impls,
    [SG_OP_LOG] = unary_impls,
    [SG_OP_NEG] = unary_impls,
    [SG_OP_ABS] = unary_impls,
    [SG_OP_RECIPROCAL] = unary_impls,
    [SG_OP_FLOOR] = unary_impls,
    [SG_OP_CEIL] = unary_impls,
    [SG_OP_NOT] = unary_impls,
    [SG_OP_SIN] = unary_impls,
    [SG_OP_COS] = unary_impls,
    [SG_OP_ROUND] = unary_impls,
    [SG_OP_SIGN] = unary_impls,
    [SG_OP_SOFTSIGN] = unary_impls,
    [SG_OP_MISH] = unary_impls,
    [SG_OP_IS_NAN] = unary_impls,
    [SG_OP_IS_INF] = unary_impls,
    [SG_OP_PRELU] = prelu_impls,
    [SG_OP_CLIP] = clip_impls,
    [SG_OP_SOFTMAX] = softmax_impls,
    [SG_OP_LOG_SOFTMAX] = softmax_impls,
    [SG_OP_ADD] = binary_impls,
    [SG_OP_SUB] = binary_impls,
    [SG_OP_MUL] = binary_impls,
    [SG_OP_DIV] = binary_impls,
    [SG_OP_POW] = binary_impls,
    [SG_OP_EQUAL] = binary_impls,
    [SG_OP_LESS] = binary_impls,
    [SG_OP_GREATER] = binary_impls,
    [SG_OP_AND] = binary_impls,
    [SG_OP_OR] = binary_impls,
    [SG_OP_LESS_OR_EQUAL] = binary_impls,
    [SG_OP_GREATER_OR_EQUAL] = binary_impls,
    [SG_OP_XOR] = binary_impls,
    [SG_OP_MOD] = binary_impls,
    [SG_OP_BIT_SHIFT] = binary_impls,
    [SG_OP_MIN] = variadic_impls,
    [SG_OP_MAX] = variadic_impls,
    [SG_OP_SUM] = variadic_impls,
    [SG_OP_MEAN] = variadic_impls,
    [SG_OP_WHERE] = where_impls,
    [SG_OP_MAX_POOL] = pool_impls,
    [SG_OP_AVERAGE_POOL] = pool_impls,
    [SG_OP_GLOBAL_AVERAGE_POOL] = reduce_impls,
    [SG_OP_GLOBAL_MAX_POOL] = reduce_impls,
    [SG_OP_RESIZE] = resize_impls,
    [SG_OP_UPSAMPLE] = resize_impls,
    [SG_OP_CONCAT] = concat_impls,
    [SG_OP_SPLIT] = split_impls,
    [SG_OP_SLICE] = slice_impls,
    [SG_OP_PAD] = pad_impls,
    [SG_OP_RESHAPE] = reshape_impls,
    [SG_OP_FLATTEN] = reshape_impls,
    [SG_OP_SQUEEZE] = reshape_impls,
    [SG_OP_UNSQUEEZE] = reshape_impls,
    [SG_OP_IDENTITY] = reshape_impls,
    [SG_OP_DROPOUT] = reshape_impls,
    [SG_OP_TRANSPOSE] = transpose_impls,
    [SG_OP_EXPAND] = expand_impls,
    [SG_OP_TILE] = tile_impls,
    [SG_OP_GATHER] = gather_impls,
    [SG_OP_SCATTER_ND] = scatter_nd_impls,
    [SG_OP_GATHER_ELEMENTS] = gather_elements_impls,
    [SG_OP_GATHER_ND] = gather_nd_impls,
    [SG_OP_SCATTER_ELEMENTS] = scatter_elements_impls,
    [SG_OP_CUM_SUM] = cumsum_impls,
    [SG_OP_TRILU] = trilu_impls,
    [SG_OP_GRID_SAMPLE] = grid_sample_impls,
    [SG_OP_TOP_K] = top_k_impls,
    [SG_OP_ONE_HOT] = one_hot_impls,
    [SG_OP_DEPTH_TO_SPACE] = depth_space_impls,
    [SG_OP_SPACE_TO_DEPTH] = depth_space_impls,
    [SG_OP_CAST] = cast_impls,
    [SG_OP_REDUCE_MEAN] = reduce_impls,
    [SG_OP_REDUCE_SUM] = reduce_impls,
    [SG_OP_REDUCE_MAX] = reduce_impls,
    [SG_OP_REDUCE_MIN] = reduce_impls,
    [SG_OP_REDUCE_PROD] = reduce_impls,
    [SG_OP_REDUCE_L1] = reduce_impls,
    [SG_OP_REDUCE_L2] = reduce_impls,
    [SG_OP_REDUCE_SUM_SQUARE] = reduce_impls,
    [SG_OP_REDUCE_LOG_SUM] = reduce_impls,
    [SG_OP_REDUCE_LOG_SUM_EXP] = reduce_impls,
    [SG_OP_ARG_MAX] = reduce_impls,
    [SG_OP_ARG_MIN] = reduce_impls,
    [SG_OP_MAT_MUL] = matmul_impls,
    [SG_OP_GEMM] = gemm_impls,
    [SG_OP_EINSUM] = einsum_impls,
    [SG_OP_SDPA] = sdpa_impls,
};

const cuda_impl *cuda_impls_of(const sg_node *n)
{
    return (unsigned)n->op < SG_OP_COUNT ? op_impls[n->op] : NULL;
}

sg_status cuda_impls_run(sg_cuda_plan *p, const sg_node *n, const cuda_impl *list, bool *taken)
{
    *taken = false;
    for (const cuda_impl *im = list; im->name; im++) {
        if (im->match && !im->match(p, n))
            continue;
        if (im->build) {
            *taken = true;
            return im->build(p, n);
        }
        SG_TRY(im->try_build(p, n, taken));
        if (*taken)
            return SEGRT_OK;
    }
    return SEGRT_OK;
}

sg_status cuda_impls_build(sg_cuda_plan *p, const sg_node *n, const cuda_impl *list)
{
    bool taken;
    SG_TRY(cuda_impls_run(p, n, list, &taken));
    if (taken)
        return SEGRT_OK;
    char names[512];
    size_t k = 0;
    names[0] = '\0';
    for (const cuda_impl *im = list; im->name && k < sizeof names; im++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", im->name);
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "none of the CUDA implementations (%s) takes this node", names);
}

bool sg_cuda_plan_has_op(sg_op op)
{
    return (unsigned)op < SG_OP_COUNT && op_impls[op] != NULL;
}
