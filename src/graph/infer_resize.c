/* Shape inference for Resize, the deprecated Upsample and GridSample. */
#include "graph/infer_util.h"

#include <math.h>
#include <string.h>

static bool one_of(const char *s, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, set[i]) == 0)
            return true;
    return false;
}

static sg_status check_string_attr(const sg_node *n, const char *name, const char *def,
                                   const char *const *set, size_t count)
{
    const char *v = sg_attr_string(n, name, def);
    if (one_of(v, set, count))
        return SEGRT_OK;
    return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s `%s` is not a known value", name, v);
}

#define CHECK_STRING_ATTR(n, name, def, set)                                                       \
    check_string_attr((n), (name), (def), (set), sizeof(set) / sizeof((set)[0]))

/* floor(in * scale) in float arithmetic, as the ONNX reference shape
 * inference and onnxruntime compute it (so 10 x 0.7f gives 7, not 6). */
static sg_status scaled_dim(const sg_node *n, sg_dim in, float scale, sg_dim *out)
{
    if (!(scale > 0) || isinf(scale))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scale %g must be positive and finite",
                             (double)scale);
    if (in.size < 0) {
        *out = scale == 1.0f ? in : sg_dim_unknown();
        return SEGRT_OK;
    }
    float o = floorf((float)in.size * scale);
    if (!(o <= (float)SG_MAX_DIM))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "scaling %lld by %g gives too large a dim",
                             (long long)in.size, (double)scale);
    *out = sg_dim_of((int64_t)o);
    return SEGRT_OK;
}

/* An optional input given as an empty tensor means "absent" (exporters
 * write "" or a 0-element constant for roi and scales). Returns whether
 * input i is present and non-empty (or of unknown length). */
static bool given(const sg_graph *g, const sg_node *n, int32_t i)
{
    if (!sg_iu_has_input(n, i))
        return false;
    const sg_value *v = sg_infer_input(g, n, i);
    int64_t numel;
    return !(sg_shape_numel(&v->shape, &numel) && numel == 0);
}

sg_status sg_infer_RESIZE(sg_graph *g, sg_node *n)
{
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"};
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
    SG_TRY(CHECK_STRING_ATTR(n, "mode", "nearest", modes));
    SG_TRY(CHECK_STRING_ATTR(n, "coordinate_transformation_mode", "half_pixel", coords));
    SG_TRY(CHECK_STRING_ATTR(n, "nearest_mode", "round_prefer_floor", nearest));
    SG_TRY(CHECK_STRING_ATTR(n, "keep_aspect_ratio_policy", "stretch", policies));
    const char *policy = sg_attr_string(n, "keep_aspect_ratio_policy", "stretch");

    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    bool has_scales = given(g, n, 2), has_sizes = given(g, n, 3);
    if (has_scales && has_sizes)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "gives both scales and sizes");
    if (!has_scales && !has_sizes)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs scales or sizes");
    float scales[SEGRT_MAX_RANK];
    int64_t sizes[SEGRT_MAX_RANK];
    int32_t count;
    if (has_scales)
        SG_TRY(sg_infer_const_floats(g, n, 2, scales, SEGRT_MAX_RANK, &count));
    else
        SG_TRY(sg_infer_const_ints(g, n, 3, sizes, SEGRT_MAX_RANK, &count));
    int32_t n_axes_attr;
    const int64_t *axes_attr = sg_attr_ints(n, "axes", &n_axes_attr);

    sg_shape out = sg_shape_unknown();
    if (x.rank < 0) {
        /* Scales or sizes over every axis tell the rank. */
        int64_t k = count >= 0 ? count : sg_iu_static_len(g, n, has_scales ? 2 : 3);
        if (!axes_attr && k >= 0 && k <= SEGRT_MAX_RANK) {
            out.rank = (int32_t)k;
            for (int32_t i = 0; i < out.rank; i++)
                out.d[i] = sg_dim_unknown();
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    int32_t ax[SEGRT_MAX_RANK];
    int32_t n_axes = axes_attr ? n_axes_attr : x.rank;
    if (axes_attr)
        SG_TRY(sg_iu_axes(n, axes_attr, n_axes_attr, x.rank, ax, "`axes`"));
    else
        for (int32_t i = 0; i < x.rank; i++)
            ax[i] = i;
    out = x;
    if (count < 0) {
        for (int32_t i = 0; i < n_axes; i++)
            out.d[ax[i]] = sg_dim_unknown();
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (count != n_axes)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s has %d values; expected %d",
                             has_scales ? "scales" : "sizes", count, n_axes);
    if (has_scales) {
        for (int32_t i = 0; i < n_axes; i++)
            SG_TRY(scaled_dim(n, x.d[ax[i]], scales[i], &out.d[ax[i]]));
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    for (int32_t i = 0; i < n_axes; i++)
        SG_TRY(sg_infer_check_dim(n, sizes[i], "a value of sizes"));
    if (strcmp(policy, "stretch") == 0) {
        for (int32_t i = 0; i < n_axes; i++)
            out.d[ax[i]] = sg_dim_of(sizes[i]);
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    /* One scale for all the axes, the smallest (not_larger) or largest
     * (not_smaller) of sizes / in, then round(scale * in) per axis, in
     * float as onnxruntime does. */
    bool larger = strcmp(policy, "not_smaller") == 0;
    float scale = larger ? 0.0f : INFINITY;
    for (int32_t i = 0; i < n_axes; i++) {
        int64_t in = x.d[ax[i]].size;
        if (in < 0) {
            for (int32_t k = 0; k < n_axes; k++)
                out.d[ax[k]] = sg_dim_unknown();
            return sg_infer_set_output(g, n, 0, t, &out);
        }
        if (in == 0)
            continue;
        float r = (float)sizes[i] / (float)in;
        scale = larger ? fmaxf(scale, r) : fminf(scale, r);
    }
    for (int32_t i = 0; i < n_axes; i++) {
        int64_t in = x.d[ax[i]].size;
        float o = in == 0 || isinf(scale) ? 0.0f : roundf(scale * (float)in);
        if (!(o <= (float)SG_MAX_DIM))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "resized dim %d is too large", ax[i]);
        out.d[ax[i]] = sg_dim_of((int64_t)o);
    }
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_UPSAMPLE(sg_graph *g, sg_node *n)
{
    /* "bilinear" is what opset 7 files from some exporters say for linear. */
    static const char *const modes[] = {"nearest", "linear", "bilinear"};
    SG_TRY(CHECK_STRING_ATTR(n, "mode", "nearest", modes));
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    float scales[SEGRT_MAX_RANK];
    int32_t count;
    SG_TRY(sg_infer_const_floats(g, n, 1, scales, SEGRT_MAX_RANK, &count));
    sg_shape out = sg_shape_unknown();
    if (x.rank < 0) {
        int64_t k = count >= 0 ? count : sg_iu_static_len(g, n, 1);
        if (k >= 0 && k <= SEGRT_MAX_RANK) {
            out.rank = (int32_t)k;
            for (int32_t i = 0; i < out.rank; i++)
                out.d[i] = sg_dim_unknown();
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    out = x;
    if (count < 0) {
        for (int32_t i = 0; i < x.rank; i++)
            out.d[i] = sg_dim_unknown();
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (count != x.rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales has %d values for rank %d",
                             count, x.rank);
    for (int32_t i = 0; i < x.rank; i++)
        SG_TRY(scaled_dim(n, x.d[i], scales[i], &out.d[i]));
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* GridSample: N x C x spatial sampled at a grid of N x outputs x r (r the
 * spatial rank): N x C x outputs. */
sg_status sg_infer_GRID_SAMPLE(sg_graph *g, sg_node *n)
{
    sg_shape x, grid;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &grid));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    sg_shape out = sg_shape_unknown();
    if (x.rank >= 0 && x.rank < 3)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` has rank %d; GridSample wants N x C x spatial",
                             sg_iu_name(g, n, 0), x.rank);
    if (x.rank >= 0 && grid.rank >= 0 &&
        (grid.rank != x.rank || (grid.d[grid.rank - 1].size >= 0 && grid.d[grid.rank - 1].size != x.rank - 2)))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "grid `%s` must be N x outputs x %d for input `%s` of rank %d",
                             sg_iu_name(g, n, 1), x.rank - 2, sg_iu_name(g, n, 0), x.rank);
    if (x.rank < 0 || grid.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    out = sg_iu_unknown_dims(x.rank);
    out.d[0] = x.d[0];
    out.d[1] = x.d[1];
    for (int32_t d = 2; d < x.rank; d++)
        out.d[d] = grid.d[d - 1];
    return sg_infer_set_output(g, n, 0, t, &out);
}
