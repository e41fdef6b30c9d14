/* Builders for MaxPool and AveragePool, and for Resize and Upsample.
 *
 * Both read their input in whatever layout it has and write the output in
 * the same one (channels-last between convolutions). Pads are resolved
 * here the way the reference kernel resolves them (auto_pad included); the
 * output dims are the graph's, which shape inference computed with
 * ceil_mode. Resize's per-dim scale is computed exactly as
 * src/backend/ref/ref_resize.c does, in float, so the kernel's coordinates
 * match the reference's bit for bit. */
#include "backend/cuda/cuda_internal.h"

#include "graph/infer.h"
#include "graph/infer_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* Pooling ------------------------------------------------------------------------ */

typedef struct pool_step {
    sgk_pool_params pp;
    bool norm; /* x's normalisation deferred to this pool: ab is args[1] */
    sgk_act act;
    float act_alpha;
} pool_step;

/* args: x, [ab], y, [indices] */
static sg_status pool_run(const cuda_step *s, cuda_run *r)
{
    const pool_step *ps = s->params;
    int32_t k = ps->norm ? 2 : 1;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[k]);
    sgk_view idx;
    memset(&idx, 0, sizeof idx);
    if (s->n_outputs > 1)
        idx = cuda_view(r, s->args[k + 1]);
    sgk_norm_in norm = {ps->norm ? r->ptr[s->args[1]] : NULL, ps->act, ps->act_alpha};
    return sgk_pool(r->stream, &ps->pp, &y, &idx, &x, ps->norm ? &norm : NULL);
}

bool cuda_pool_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn)
{
    const sg_value *xv = &p->g->values[dn->value];
    /* (The kernel pools the raw values and normalises the result: an
     * activation that never decreases.) */
    return cuda_act_monotone(dn->act, dn->act_alpha) && cuda_reads_only_as_x(p, n, SG_OP_MAX_POOL, dn->value) &&
           cuda_deferred_norm_whole(p, dn) &&
           (n->n_outputs < 2 || n->outputs[1] < 0) && sg_dtype_is_float(xv->dtype) && xv->shape.rank >= 3 &&
           xv->shape.rank <= 5;
}

sg_status cuda_build_pool(sg_cuda_plan *p, const sg_node *n)
{
    bool is_max = n->op == SG_OP_MAX_POOL;
    if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs an input and an output");
    const sg_value *xv = &p->g->values[n->inputs[0]];
    int32_t rank = xv->shape.rank, ns = rank - 2;
    if (ns < 1 || ns > 3)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "input of rank %d: only 1, 2 or 3 spatial dims are supported", rank);
    bool dtype_ok = sg_dtype_is_float(xv->dtype) ||
                    (is_max && (xv->dtype == SEGRT_DTYPE_INT8 || xv->dtype == SEGRT_DTYPE_UINT8));
    if (!dtype_ok)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xv->dtype));
    sg_conv_attrs a;
    SG_TRY(sg_conv_attrs_read(p->g, n, ns, NULL, NULL, &a));
    int64_t so = is_max ? sg_attr_int(n, "storage_order", 0) : 0;
    if (so != 0 && so != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "storage_order must be 0 or 1");

    /* x's normalisation left to this pool (cuda_build_norm.c asked
     * cuda_pool_takes_norm): x is the norm's input, normalised as it is
     * read. A part of the channels only (a Concat's) is applied first. */
    cuda_deferred_norm dn;
    memset(&dn, 0, sizeof dn);
    const cuda_deferred_norm *found = cuda_deferred_norm_find(p, n->inputs[0]);
    bool norm = found && cuda_pool_takes_norm(p, n, found);
    /* The layer that produced x already pooled it (cuda_conv_mma.c's
     * mma_pool_of): the result is that tensor with the same deferred
     * norm, left to this pool's readers in turn. */
    const cuda_tile_stats *ts = norm ? cuda_tile_stats_find(p, found->raw) : NULL;
    if (ts && ts->pooled >= 0 && ts->pool_node == cuda_node_index(p, n) && cuda_deferred_norm_whole(p, found)) {
        dn = *found;
        dn.value = n->outputs[0];
        dn.raw = ts->pooled;
        cuda_value_set(p, dn.value, dn.raw);
        return cuda_deferred_norm_put(p, &dn);
    }
    if (found)
        dn = *found;
    if (found && !norm)
        SG_TRY(cuda_deferred_norm_apply(p, n->inputs[0]));

    pool_step *ps = sg_malloc(sizeof *ps);
    if (!ps)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    memset(ps, 0, sizeof *ps);
    sgk_pool_params *pp = &ps->pp;
    if (norm) {
        ps->norm = true;
        ps->act = dn.act;
        ps->act_alpha = dn.act_alpha;
    }
    pp->kind = is_max ? SGK_POOL_MAX : SGK_POOL_AVG;
    pp->n_spatial = ns;
    pp->count_include_pad = !is_max && sg_attr_int(n, "count_include_pad", 0) != 0;
    pp->storage_order = (int32_t)so;
    bool same = a.auto_pad == SG_AUTO_PAD_SAME_UPPER || a.auto_pad == SG_AUTO_PAD_SAME_LOWER;
    for (int32_t d = 0; d < ns; d++) {
        int64_t in = xv->shape.d[2 + d].size;
        pp->kernel[d] = a.kernel[d];
        pp->strides[d] = a.strides[d];
        pp->dilations[d] = a.dilations[d];
        if (same) {
            /* The padding that gives ceil(in / stride) outputs, the odd
             * element at the end (SAME_UPPER) or the beginning. */
            int64_t ext = (a.kernel[d] - 1) * a.dilations[d] + 1;
            int64_t want = (in + a.strides[d] - 1) / a.strides[d];
            int64_t total = (want - 1) * a.strides[d] + ext - in;
            total = total < 0 ? 0 : total;
            pp->pads_begin[d] = sg_conv_pad_begin(&a, d, total);
            pp->pads_end[d] = total - pp->pads_begin[d];
        } else {
            /* Explicit pads (VALID: none, the reader zeroed them). With
             * ceil_mode a last window may run past the end pad; the kernel
             * counts only the declared pads toward an average's divisor. */
            pp->pads_begin[d] = a.pads[d];
            pp->pads_end[d] = a.pads[ns + d];
        }
    }

    int32_t args[4], x = -1, k = 0;
    sg_status s = cuda_sm_count(p, &pp->sm_count);
    if (s == SEGRT_OK && !norm)
        s = cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &x);
    if (norm)
        x = dn.raw;
    cuda_layout l = s == SEGRT_OK ? cuda_dense_layout(p, x) : CUDA_LAYOUT_PLAIN;
    args[k++] = x;
    if (norm)
        args[k++] = dn.ab;
    /* (A deferred norm's result has the graph's dtype; raw may not.) */
    if (s == SEGRT_OK)
        s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), l, &args[k++]);
    int32_t n_out = 1;
    /* Indices in the output's layout, so the kernel's stores of both
     * coalesce alike; their values are flat NCHW offsets whatever the
     * layout. */
    if (s == SEGRT_OK && is_max && n->n_outputs > 1 && n->outputs[1] >= 0) {
        s = cuda_output_new(p, n, 1, SEGRT_DTYPE_INT64, l, &args[k++]);
        n_out = 2;
    }
    if (s != SEGRT_OK) {
        free(ps);
        return s;
    }
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, is_max ? "segrt max pool" : "segrt average pool", pool_run, args, k, n_out, ps, NULL,
                         &st));
    st->any_view = norm ? (1 | 4) : 3; /* x and y; ab and the indices stay dense */
    return SEGRT_OK;
}

/* Resize and Upsample -------------------------------------------------------------- */

static sg_status resize_run(const cuda_step *s, cuda_run *r)
{
    const sgk_resize_params *rp = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[1]);
    return sgk_resize(r->stream, rp, &y, &x);
}

static sg_status parse_enum(const sg_node *n, const char *attr, const char *def, const char *const *names,
                            int32_t count, int32_t *out)
{
    *out = 0;
    const char *v = sg_attr_string(n, attr, def);
    for (int32_t i = 0; i < count; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return SEGRT_OK;
        }
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s \"%s\" is not supported", attr, v);
}

/* Input i when it is given and not empty (exporters write "" or an empty
 * constant for an absent roi or scales); NULL otherwise. */
static const sg_value *given(const sg_cuda_plan *p, const sg_node *n, int32_t i)
{
    if (n->n_inputs <= i || n->inputs[i] < 0)
        return NULL;
    const sg_value *v = &p->g->values[n->inputs[i]];
    int64_t numel;
    if (sg_shape_numel(&v->shape, &numel) && numel == 0)
        return NULL;
    return v;
}

/* The values of constant input v as doubles (room for cap). */
static sg_status read_floats(const sg_node *n, const sg_value *v, double *vals, int32_t cap, int32_t *count,
                             const char *what)
{
    int64_t numel;
    if (!v->data)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s computed at run time", what);
    if (!sg_shape_numel(&v->shape, &numel) || numel > cap || v->dtype == SEGRT_DTYPE_BOOL)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s must be at most %d numbers", what, cap);
    const void *data = sg_blob_data(v->data);
    for (int64_t i = 0; i < numel; i++)
        vals[i] = sg_dtype_load_f64(v->dtype, data, i);
    *count = (int32_t)numel;
    return SEGRT_OK;
}

/* The Resize attributes and inputs as ref_resize.c reads them. */
static sg_status resize_read(const sg_cuda_plan *p, const sg_node *n, int32_t r, const int64_t *xdims,
                             sgk_resize_params *rp)
{
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
                                         "align_corners", "asymmetric",           "tf_crop_and_resize"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
    int32_t mode = 0, coord = 0, nearest = 0, policy = 0;
    SG_TRY(parse_enum(n, "mode", "nearest", modes, 3, &mode));
    SG_TRY(parse_enum(n, "coordinate_transformation_mode", "half_pixel", coords, 6, &coord));
    SG_TRY(parse_enum(n, "nearest_mode", "round_prefer_floor", nearests, 4, &nearest));
    SG_TRY(parse_enum(n, "keep_aspect_ratio_policy", "stretch", policies, 3, &policy));
    rp->mode = (sgk_resize_mode)mode;
    rp->coord = (sgk_resize_coord)coord;
    rp->nearest = (sgk_resize_nearest)nearest;
    rp->cubic_a = sg_attr_float(n, "cubic_coeff_a", -0.75f);
    rp->exclude_outside = sg_attr_int(n, "exclude_outside", 0) != 0;
    rp->extrapolation_value = sg_attr_float(n, "extrapolation_value", 0.0f);

    int64_t axes[SEGRT_MAX_RANK];
    int32_t na;
    const int64_t *aa = sg_attr_ints(n, "axes", &na);
    if (aa) {
        if (na > r)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axes has %d values for rank %d", na, r);
        for (int32_t i = 0; i < na; i++) {
            int32_t a;
            SG_TRY(sg_infer_axis(n, aa[i], r, &a));
            axes[i] = a;
        }
    } else {
        na = r;
        for (int32_t i = 0; i < r; i++)
            axes[i] = i;
    }
    for (int32_t d = 0; d < r; d++) {
        rp->scale[d] = 1;
        rp->roi_start[d] = 0;
        rp->roi_end[d] = 1;
    }
    double vals[2 * SEGRT_MAX_RANK];
    int32_t count = 0;
    const sg_value *tscales = given(p, n, 2), *tsizes = given(p, n, 3);
    if (tscales) {
        SG_TRY(read_floats(n, tscales, vals, SEGRT_MAX_RANK, &count, "scales"));
        if (count != na)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales has %d values for %d axes", count, na);
        for (int32_t i = 0; i < na; i++) {
            if (!(vals[i] > 0))
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales must be positive");
            rp->scale[axes[i]] = (float)vals[i];
        }
    } else if (tsizes) {
        if (!tsizes->data)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "sizes computed at run time");
        int64_t numel;
        if (!sg_shape_numel(&tsizes->shape, &numel) || numel != na || !sg_dtype_is_integer(tsizes->dtype))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "sizes must be %d integers", na);
        const void *data = sg_blob_data(tsizes->data);
        /* Scale sizes / in per axis in float; with a keep-aspect-ratio
         * policy, the smallest (not_larger) or largest of them for all. */
        float common = policy == 1 ? INFINITY : 0;
        for (int32_t i = 0; i < na; i++) {
            int64_t d = axes[i], size = sg_dtype_load_i64(tsizes->dtype, data, i);
            if (size < 0 || xdims[d] == 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "sizes must be >= 0");
            float s = (float)size / (float)xdims[d];
            rp->scale[d] = s;
            common = policy == 1 ? fminf(common, s) : fmaxf(common, s);
        }
        if (policy != 0)
            for (int32_t i = 0; i < na; i++)
                rp->scale[axes[i]] = common;
    } else {
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs scales or sizes");
    }
    if (rp->coord == SGK_COORD_TF_CROP_AND_RESIZE) {
        const sg_value *troi = given(p, n, 1);
        if (!troi)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "tf_crop_and_resize needs roi");
        SG_TRY(read_floats(n, troi, vals, 2 * SEGRT_MAX_RANK, &count, "roi"));
        /* roi lists the listed axes (opset 18) or every dim. */
        int32_t m = count == 2 * na ? na : count == 2 * r ? r : -1;
        if (m < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "roi has %d values", count);
        for (int32_t i = 0; i < m; i++) {
            int64_t d = m == na ? axes[i] : i;
            rp->roi_start[d] = (float)vals[i];
            rp->roi_end[d] = (float)vals[m + i];
        }
    }
    /* Antialiasing changes the filter only when downscaling. */
    if (sg_attr_int(n, "antialias", 0) != 0 && rp->mode != SGK_RESIZE_NEAREST)
        for (int32_t d = 0; d < r; d++)
            if (rp->scale[d] < 1)
                return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "antialias when downscaling is not supported");
    return SEGRT_OK;
}

/* Upsample (opset 9): scales for every dim; nearest picks floor(x / s),
 * linear interpolates with asymmetric coordinates, as onnxruntime does. */
static sg_status upsample_read(const sg_cuda_plan *p, const sg_node *n, int32_t r, sgk_resize_params *rp)
{
    const char *mode = sg_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") == 0)
        rp->mode = SGK_RESIZE_NEAREST;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
        rp->mode = SGK_RESIZE_LINEAR;
    else
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "mode \"%s\" is not supported", mode);
    rp->coord = SGK_COORD_ASYMMETRIC;
    rp->nearest = SGK_NEAREST_FLOOR;
    rp->cubic_a = -0.75f;
    if (n->n_inputs < 2 || n->inputs[1] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs scales");
    double vals[SEGRT_MAX_RANK];
    int32_t count = 0;
    SG_TRY(read_floats(n, &p->g->values[n->inputs[1]], vals, SEGRT_MAX_RANK, &count, "scales"));
    if (count != r)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales has %d values for rank %d", count, r);
    for (int32_t d = 0; d < r; d++) {
        if (!(vals[d] > 0))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales must be positive");
        rp->scale[d] = (float)vals[d];
        rp->roi_start[d] = 0;
        rp->roi_end[d] = 1;
    }
    return SEGRT_OK;
}

sg_status cuda_build_resize(sg_cuda_plan *p, const sg_node *n)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs an input and an output");
    const sg_value *xv = &p->g->values[n->inputs[0]], *yv = &p->g->values[n->outputs[0]];
    int32_t r = xv->shape.rank;
    if (yv->shape.rank != r)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output rank %d for input rank %d", yv->shape.rank, r);
    int64_t xdims[SEGRT_MAX_RANK], numel_y = 1;
    for (int32_t d = 0; d < r; d++) {
        xdims[d] = xv->shape.d[d].size;
        numel_y *= yv->shape.d[d].size;
    }
    sgk_resize_params rp;
    memset(&rp, 0, sizeof rp);
    if (n->op == SG_OP_UPSAMPLE)
        SG_TRY(upsample_read(p, n, r, &rp));
    else
        SG_TRY(resize_read(p, n, r, xdims, &rp));
    if (rp.mode != SGK_RESIZE_NEAREST && !sg_dtype_is_float(xv->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "linear and cubic modes support float dtypes only, not %s",
                             segrt_dtype_name(xv->dtype));
    for (int32_t d = 0; d < r && numel_y > 0; d++)
        if (xdims[d] == 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot resize an empty input");
    int32_t x, y;
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &x));
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, x), &y));
    sgk_resize_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = rp;
    int32_t args[2] = {x, y};
    cuda_step *st;
    return cuda_step_new(p, n, "segrt resize", resize_run, args, 2, 1, params, NULL, &st);
}
