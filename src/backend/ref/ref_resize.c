/* Resize (opsets 13-19 attributes: nearest, linear and cubic over any
 * number of dims; every coordinate transformation and nearest mode;
 * cubic_coeff_a, exclude_outside, extrapolation_value, axes and
 * keep_aspect_ratio_policy) and the older Upsample.
 *
 * Each output coordinate along each dim is mapped once to a few input taps
 * with weights (1 for nearest, 2 for linear, 4 for cubic); an output
 * element is the sum over the product of its dims' taps, in double. Taps
 * outside the input take the edge value, as the spec's reference does. */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

typedef enum { M_NEAREST, M_LINEAR, M_CUBIC } resize_mode;

typedef enum {
    C_HALF_PIXEL,
    C_HALF_PIXEL_SYMMETRIC,
    C_PYTORCH_HALF_PIXEL,
    C_ALIGN_CORNERS,
    C_ASYMMETRIC,
    C_TF_CROP_AND_RESIZE
} coord_mode;

typedef enum { N_ROUND_PREFER_FLOOR, N_ROUND_PREFER_CEIL, N_FLOOR, N_CEIL } nearest_mode;

typedef struct resize_params {
    resize_mode mode;
    coord_mode coord;
    nearest_mode nearest;
    double cubic_a, extrapolation;
    bool exclude_outside;
    /* float, as the attribute and input values are and as onnxruntime
     * computes coordinates */
    float scale[SEGRT_MAX_RANK];
    float roi_start[SEGRT_MAX_RANK], roi_end[SEGRT_MAX_RANK];
} resize_params;

/* Taps of one output coordinate along one dim. */
typedef struct resize_taps {
    int32_t count;
    bool outside; /* tf_crop_and_resize: the whole element is extrapolated */
    int64_t idx[4];
    double w[4];
} resize_taps;

/* The input coordinate of output coordinate x along dim d. Computed in
 * float with onnxruntime's operation order: nearest mode is decided by
 * where a coordinate falls against integers and halves, and for
 * non-integer scales the float and double results land on different
 * sides often enough to matter. */
static double to_input_coord(const resize_params *p, int32_t d, int64_t xi, int64_t in, int64_t out)
{
    float x = (float)xi, s = p->scale[d], lin = (float)in, lout = (float)out;
    switch (p->coord) {
    case C_HALF_PIXEL: return ((x + 0.5f) / s) - 0.5f;
    case C_HALF_PIXEL_SYMMETRIC: {
        float adjustment = lout / (s * lin);
        float center = lin / 2;
        float offset = center * (1 - adjustment);
        /* onnxruntime finishes this one in double. */
        return (float)((double)offset + ((double)x + 0.5) / (double)s - 0.5);
    }
    case C_PYTORCH_HALF_PIXEL: return out > 1 ? ((x + 0.5f) / s) - 0.5f : 0.0f;
    case C_ALIGN_CORNERS: return out == 1 ? 0.0f : x * (lin - 1) / (lout - 1);
    case C_ASYMMETRIC: return x / s;
    case C_TF_CROP_AND_RESIZE: {
        float a = p->roi_start[d], b = p->roi_end[d];
        if (out > 1)
            return a * (lin - 1) + (x * (b - a) * (lin - 1)) / (lout - 1);
        return (float)(0.5 * (double)(a + b) * (double)(lin - 1));
    }
    }
    return x;
}

static int64_t clamp_index(double v, int64_t in)
{
    if (!(v > 0)) /* also NaN */
        return 0;
    if (v >= (double)(in - 1))
        return in - 1;
    return (int64_t)v;
}

static void make_taps(const resize_params *p, int32_t d, int64_t o, int64_t in, int64_t out,
                      resize_taps *t)
{
    double x = to_input_coord(p, d, o, in, out);
    memset(t, 0, sizeof *t);
    if (p->coord == C_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(in - 1))) {
        t->outside = true;
        return;
    }
    double fl = floor(x), r = x - fl;
    if (p->mode == M_NEAREST) {
        double v;
        switch (p->nearest) {
        case N_ROUND_PREFER_FLOOR: v = r <= 0.5 ? fl : fl + 1; break;
        case N_ROUND_PREFER_CEIL: v = r < 0.5 ? fl : fl + 1; break;
        case N_FLOOR: v = fl; break;
        default: v = r > 0 ? fl + 1 : fl; break;
        }
        t->count = 1;
        t->idx[0] = clamp_index(v, in);
        t->w[0] = 1;
        return;
    }
    if (r == 0) {
        /* On a sample: one tap, and NaN or Inf neighbours do not leak in
         * through a zero weight. */
        t->count = 1;
        t->idx[0] = clamp_index(fl, in);
        t->w[0] = 1;
        return;
    }
    if (p->mode == M_LINEAR) {
        t->count = 2;
        t->idx[0] = clamp_index(fl, in);
        t->idx[1] = clamp_index(fl + 1, in);
        t->w[0] = 1 - r;
        t->w[1] = r;
        return;
    }
    double A = p->cubic_a, s = 1 - r;
    double c[4] = {
        ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
        ((A + 2) * r - (A + 3)) * r * r + 1,
        ((A + 2) * s - (A + 3)) * s * s + 1,
        ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A,
    };
    double sum = 0;
    t->count = 4;
    for (int32_t k = 0; k < 4; k++) {
        double pos = fl - 1 + k;
        if (p->exclude_outside && (pos < 0 || pos > (double)(in - 1)))
            c[k] = 0;
        sum += c[k];
        t->idx[k] = clamp_index(pos, in);
    }
    for (int32_t k = 0; k < 4; k++)
        t->w[k] = p->exclude_outside && sum != 0 ? c[k] / sum : c[k];
}

static sg_status resize_run(const sg_node *n, const sg_tensor *x, sg_tensor *y,
                            const resize_params *p)
{
    int32_t r = x->rank;
    if (y->rank != r)
        return sg_ref_out_dims_error(n, y, x->dims, r);
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (p->mode != M_NEAREST && !sg_dtype_is_float(x->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "linear and cubic modes support float dtypes only, not %s",
                             segrt_dtype_name(x->dtype));
    int64_t numel = sg_ref_numel(y);
    if (numel == 0)
        return SEGRT_OK;
    if (r == 0) { /* a scalar resizes to itself */
        memcpy(y->data, x->data, segrt_dtype_size(x->dtype));
        return SEGRT_OK;
    }
    for (int32_t d = 0; d < r; d++)
        if (x->dims[d] == 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot resize an empty input");
    int64_t total = 0;
    for (int32_t d = 0; d < r; d++)
        total += y->dims[d];
    resize_taps *taps = sg_malloc(sizeof *taps * (size_t)(total ? total : 1));
    if (!taps)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    resize_taps *dt[SEGRT_MAX_RANK];
    int64_t at = 0, xs[SEGRT_MAX_RANK];
    for (int32_t d = 0; d < r; d++) {
        dt[d] = taps + at;
        for (int64_t o = 0; o < y->dims[d]; o++)
            make_taps(p, d, o, x->dims[d], y->dims[d], &dt[d][o]);
        at += y->dims[d];
    }
    sg_ref_strides(x->dims, r, xs);
    /* Walk the output a row (last dim) at a time: the taps of the outer
     * dims are combined once per row into (offset, weight) pairs, so the
     * inner loop only adds the last dim's taps. Rows are independent: the
     * CPU backend runs this kernel for the modes oneDNN lacks, so they are
     * shared among threads, each with its own pair buffers. */
    int64_t max_combos = 1;
    for (int32_t d = 0; d < r - 1; d++)
        max_combos *= p->mode == M_CUBIC ? 4 : p->mode == M_LINEAR ? 2 : 1;
    size_t es = segrt_dtype_size(x->dtype);
    const float *xf = x->dtype == SEGRT_DTYPE_FLOAT32 ? x->data : NULL;
    const resize_taps *tl = dt[r - 1];
    int64_t inner = y->dims[r - 1];
    int64_t rows = numel / inner;
    int failed = 0;
#pragma omp parallel if (numel >= 65536) reduction(| : failed)
    {
        int64_t *coff = malloc(sizeof(int64_t) * 2 * (size_t)max_combos);
        double *cw = malloc(sizeof(double) * 2 * (size_t)max_combos);
        failed |= !coff || !cw;
#pragma omp for schedule(static)
        for (int64_t row = 0; row < rows; row++) {
            if (!coff || !cw)
                continue;
            int64_t idx[SEGRT_MAX_RANK] = {0};
            for (int64_t d = r - 2, rest = row; d >= 0; d--) {
                idx[d] = rest % y->dims[d];
                rest /= y->dims[d];
            }
            bool outside = false;
            int64_t n_comb = 1;
            int64_t *co = coff, *cn = coff + max_combos;
            double *wo = cw, *wn = cw + max_combos;
            co[0] = 0;
            wo[0] = 1;
            for (int32_t d = 0; d < r - 1; d++) {
                const resize_taps *t = &dt[d][idx[d]];
                outside |= t->outside;
                if (outside)
                    break;
                int64_t m = 0;
                for (int64_t c = 0; c < n_comb; c++)
                    for (int32_t k = 0; k < t->count; k++, m++) {
                        cn[m] = co[c] + t->idx[k] * xs[d];
                        wn[m] = wo[c] * t->w[k];
                    }
                n_comb = m;
                int64_t *ts = co;
                co = cn, cn = ts;
                double *tw = wo;
                wo = wn, wn = tw;
            }
            int64_t yo = row * inner;
            for (int64_t j = 0; j < inner; j++) {
                const resize_taps *t = &tl[j];
                if (outside || t->outside) {
                    sg_dtype_store_f64(y->dtype, y->data, yo + j, p->extrapolation);
                    continue;
                }
                if (p->mode == M_NEAREST) {
                    int64_t off = co[0] + t->idx[0];
                    ref_copy_elem((char *)y->data + (size_t)(yo + j) * es,
                                  (const char *)x->data + (size_t)off * es, es);
                    continue;
                }
                double acc = 0;
                for (int64_t c = 0; c < n_comb; c++) {
                    double part = 0;
                    for (int32_t k = 0; k < t->count; k++) {
                        int64_t off = co[c] + t->idx[k];
                        part += t->w[k] * (xf ? xf[off] : sg_dtype_load_f64(x->dtype, x->data, off));
                    }
                    acc += wo[c] * part;
                }
                sg_dtype_store_f64(y->dtype, y->data, yo + j, acc);
            }
        }
        free(coff);
        free(cw);
    }
    free(taps);
    if (failed)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "node `%s` (Resize): out of memory", n->name);
    return SEGRT_OK;
}

static sg_status parse_enum(const sg_node *n, const char *attr, const char *def,
                            const char *const *names, int32_t count, int32_t *out)
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

/* Reads float values (any dtype) of a 1-D input into vals. */
static sg_status read_floats(const sg_node *n, const sg_tensor *t, double *vals, int32_t cap,
                             int32_t *count, const char *what)
{
    *count = 0;
    int64_t c = sg_ref_numel(t);
    if (c > cap)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s has %lld values; at most %d allowed",
                             what, (long long)c, cap);
    for (int64_t i = 0; i < c; i++)
        vals[i] = sg_dtype_load_f64(t->dtype, t->data, i);
    *count = (int32_t)c;
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_resize)
{
    const sg_tensor *x, *troi, *tscales, *tsizes;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &troi));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &tscales));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 3, &tsizes));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    int32_t r = x->rank;
    resize_params p;
    memset(&p, 0, sizeof p);
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const coords[] = {"half_pixel",         "half_pixel_symmetric",
                                         "pytorch_half_pixel", "align_corners",
                                         "asymmetric",         "tf_crop_and_resize"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"};
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
    int32_t mode = 0, coord = 0, nearest = 0, policy = 0;
    SG_TRY(parse_enum(n, "mode", "nearest", modes, 3, &mode));
    SG_TRY(parse_enum(n, "coordinate_transformation_mode", "half_pixel", coords, 6, &coord));
    SG_TRY(parse_enum(n, "nearest_mode", "round_prefer_floor", nearests, 4, &nearest));
    SG_TRY(parse_enum(n, "keep_aspect_ratio_policy", "stretch", policies, 3, &policy));
    p.mode = (resize_mode)mode;
    p.coord = (coord_mode)coord;
    p.nearest = (nearest_mode)nearest;
    p.cubic_a = sg_attr_float(n, "cubic_coeff_a", -0.75f);
    p.exclude_outside = sg_attr_int(n, "exclude_outside", 0) != 0;
    p.extrapolation = sg_attr_float(n, "extrapolation_value", 0.0f);

    int64_t axes[SEGRT_MAX_RANK];
    int32_t na;
    const int64_t *aa = sg_attr_ints(n, "axes", &na);
    if (aa) {
        if (na > r)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axes has %d values for rank %d", na,
                                 r);
        for (int32_t i = 0; i < na; i++) {
            int32_t a = 0;
            SG_TRY(sg_ref_axis(n, aa[i], r, &a));
            axes[i] = a;
        }
    } else {
        na = r;
        for (int32_t i = 0; i < r; i++)
            axes[i] = i;
    }
    for (int32_t d = 0; d < r; d++) {
        p.scale[d] = 1;
        p.roi_start[d] = 0;
        p.roi_end[d] = 1;
    }
    double vals[2 * SEGRT_MAX_RANK];
    int32_t count = 0;
    if (tscales && sg_ref_numel(tscales) > 0) {
        SG_TRY(read_floats(n, tscales, vals, SEGRT_MAX_RANK, &count, "scales"));
        if (count != na)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales has %d values for %d axes",
                                 count, na);
        for (int32_t i = 0; i < na; i++) {
            if (!(vals[i] > 0))
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales must be positive");
            p.scale[axes[i]] = (float)vals[i];
        }
    } else if (tsizes && sg_ref_numel(tsizes) > 0) {
        int64_t sizes[SEGRT_MAX_RANK];
        SG_TRY(sg_ref_read_ints(n, tsizes, sizes, SEGRT_MAX_RANK, &count, "sizes"));
        if (count != na)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "sizes has %d values for %d axes",
                                 count, na);
        float common = policy == 1 ? INFINITY : 0;
        for (int32_t i = 0; i < na; i++) {
            int64_t d = axes[i];
            if (sizes[i] < 0 || x->dims[d] == 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "sizes must be >= 0");
            float s = (float)sizes[i] / (float)x->dims[d];
            p.scale[d] = s;
            common = policy == 1 ? fminf(common, s) : fmaxf(common, s);
        }
        if (policy != 0)
            for (int32_t i = 0; i < na; i++)
                p.scale[axes[i]] = common;
    } else {
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs scales or sizes");
    }
    if (p.coord == C_TF_CROP_AND_RESIZE) {
        if (!troi)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "tf_crop_and_resize needs roi");
        SG_TRY(read_floats(n, troi, vals, 2 * SEGRT_MAX_RANK, &count, "roi"));
        /* roi lists the listed axes (opset 18) or every dim. */
        int32_t m = count == 2 * na ? na : count == 2 * r ? r : -1;
        if (m < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "roi has %d values", count);
        for (int32_t i = 0; i < m; i++) {
            int64_t d = m == na ? axes[i] : i;
            p.roi_start[d] = (float)vals[i];
            p.roi_end[d] = (float)vals[m + i];
        }
    }
    if (sg_attr_int(n, "antialias", 0) != 0 && p.mode != M_NEAREST)
        for (int32_t d = 0; d < r; d++)
            if (p.scale[d] < 1)
                return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                     "antialias when downscaling is not supported");
    return resize_run(n, x, y, &p);
}

/* Upsample (opset 9): scales for every dim; nearest picks floor(x / s),
 * linear interpolates with asymmetric coordinates, as onnxruntime does. */
REF_KERNEL(sg_ref_upsample)
{
    const sg_tensor *x, *tscales;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &tscales));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    resize_params p;
    memset(&p, 0, sizeof p);
    const char *mode = sg_attr_string(n, "mode", "nearest");
    if (strcmp(mode, "nearest") == 0)
        p.mode = M_NEAREST;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0)
        p.mode = M_LINEAR;
    else
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "mode \"%s\" is not supported", mode);
    p.coord = C_ASYMMETRIC;
    p.nearest = N_FLOOR;
    double vals[SEGRT_MAX_RANK];
    int32_t count = 0;
    SG_TRY(read_floats(n, tscales, vals, SEGRT_MAX_RANK, &count, "scales"));
    if (count != x->rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales has %d values for rank %d",
                             count, x->rank);
    for (int32_t d = 0; d < count; d++) {
        if (!(vals[d] > 0))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "scales must be positive");
        p.scale[d] = (float)vals[d];
    }
    return resize_run(n, x, y, &p);
}
