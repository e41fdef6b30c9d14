/* GridSample (opset 16: 2-D; opset 20: any number of spatial dims): each
 * output point samples X at the location its grid entry gives, in
 * normalised coordinates [-1, 1] with the last spatial axis first
 * (x, y[, z]). Modes nearest (halves to even), linear (bilinear,
 * trilinear...) and cubic (Keys' kernel, alpha -0.75, 4 taps an axis);
 * padding zeros, border or reflection; align_corners. Computed in double,
 * as the spec's reference does it step by step: a location outside the
 * borders is first clamped or reflected (border, reflection), then each
 * tap outside the input is 0, clamped or reflected. */
#include "backend/grid_sample_math.h"
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

#define GS_MAX_DIMS (SEGRT_MAX_RANK - 2)

typedef struct gs_job {
    int32_t nd;
    int64_t dims[GS_MAX_DIMS], strides[GS_MAX_DIMS];
    double lo[GS_MAX_DIMS], hi[GS_MAX_DIMS]; /* the borders: -0.5 and size - 0.5, or 0 and size - 1 */
    int32_t mode, pad;
    const sg_tensor *x;
    int64_t base; /* the (n, c) plane's first element */
} gs_job;

/* The input at integer coordinates idx, padded as the job says. */
static double gs_pixel(const gs_job *j, const int64_t *idx)
{
    int64_t off = j->base;
    for (int32_t d = 0; d < j->nd; d++) {
        int64_t i = idx[d], n = j->dims[d];
        if (i < 0 || i >= n) {
            if (j->pad == SG_GS_ZEROS)
                return 0.0;
            if (j->pad == SG_GS_BORDER)
                i = i < 0 ? 0 : n - 1;
            else
                i = (int64_t)sg_gs_reflect((double)i, j->lo[d], j->hi[d]);
            i = i < 0 ? 0 : i >= n ? n - 1 : i; /* reflection of a 1-pixel axis */
        }
        off += i * j->strides[d];
    }
    return sg_dtype_load_f64(j->x->dtype, j->x->data, off);
}

/* The interpolation of axes d.. at the location v, the earlier axes' taps
 * fixed in idx. */
static double gs_interp(const gs_job *j, const double *v, int64_t *idx, int32_t d)
{
    if (d == j->nd)
        return gs_pixel(j, idx);
    double f = floor(v[d]), t = v[d] - f, sum = 0;
    if (j->mode == SG_GS_LINEAR) {
        idx[d] = (int64_t)f;
        sum += (1 - t) * gs_interp(j, v, idx, d + 1);
        idx[d] = (int64_t)f + 1;
        sum += t * gs_interp(j, v, idx, d + 1);
        return sum;
    }
    double c[4];
    sg_gs_cubic(t, c);
    for (int k = 0; k < 4; k++) {
        idx[d] = (int64_t)f - 1 + k;
        sum += c[k] * gs_interp(j, v, idx, d + 1);
    }
    return sum;
}

REF_KERNEL(sg_ref_grid_sample)
{
    const sg_tensor *x, *grid;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &grid));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (!sg_dtype_is_float(x->dtype) || !sg_dtype_is_float(grid->dtype))
        return sg_ref_unsupported_dtype(n, sg_dtype_is_float(x->dtype) ? grid->dtype : x->dtype);
    int32_t nd = x->rank - 2;
    if (nd < 1 || nd > GS_MAX_DIMS || grid->rank != x->rank || grid->dims[grid->rank - 1] != nd ||
        grid->dims[0] != x->dims[0])
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "the grid must be N x outputs x %d for an input of rank %d", nd,
                             x->rank);
    int64_t want[SEGRT_MAX_RANK] = {x->dims[0], x->dims[1]};
    for (int32_t d = 0; d < nd; d++)
        want[2 + d] = grid->dims[1 + d];
    SG_TRY(sg_ref_check_out_dims(n, y, want, x->rank));
    const char *mode = sg_attr_string(n, "mode", "linear"), *pad = sg_attr_string(n, "padding_mode", "zeros");
    gs_job j;
    memset(&j, 0, sizeof j);
    j.nd = nd;
    j.x = x;
    j.mode = sg_gs_mode(mode);
    j.pad = sg_gs_padding(pad);
    if (j.mode < 0 || j.pad < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "mode `%s` or padding_mode `%s` is not one GridSample has",
                             mode, pad);
    bool align = sg_attr_int(n, "align_corners", 0) != 0;
    int64_t plane = 1;
    for (int32_t d = nd - 1; d >= 0; d--) {
        j.dims[d] = x->dims[2 + d];
        j.strides[d] = plane;
        plane *= j.dims[d];
        j.lo[d] = align ? 0.0 : -0.5;
        j.hi[d] = align ? (double)(j.dims[d] - 1) : (double)j.dims[d] - 0.5;
    }
    int64_t points = 1;
    for (int32_t d = 0; d < nd; d++)
        points *= grid->dims[1 + d];
    int64_t N = x->dims[0], C = x->dims[1];
    for (int64_t b = 0; b < N; b++)
        for (int64_t p = 0; p < points; p++) {
            double v[GS_MAX_DIMS];
            for (int32_t d = 0; d < nd; d++) {
                /* The grid's last entry is the last axis (x first). */
                double g = sg_dtype_load_f64(grid->dtype, grid->data, (b * points + p) * nd + (nd - 1 - d));
                double size = (double)j.dims[d];
                v[d] = align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
                if (j.mode == SG_GS_NEAREST)
                    v[d] = nearbyint(v[d]);
                if (v[d] < j.lo[d] || v[d] > j.hi[d]) {
                    if (j.pad == SG_GS_BORDER)
                        v[d] = v[d] < 0 ? 0 : v[d] > size - 1 ? size - 1 : v[d];
                    else if (j.pad == SG_GS_REFLECTION)
                        v[d] = sg_gs_reflect(v[d], j.lo[d], j.hi[d]);
                }
            }
            for (int64_t c = 0; c < C; c++) {
                j.base = (b * C + c) * plane;
                int64_t idx[GS_MAX_DIMS];
                double r;
                if (j.mode == SG_GS_NEAREST) {
                    for (int32_t d = 0; d < nd; d++)
                        idx[d] = (int64_t)v[d];
                    r = gs_pixel(&j, idx);
                } else {
                    r = gs_interp(&j, v, idx, 0);
                }
                sg_dtype_store_f64(y->dtype, y->data, (b * C + c) * points + p, r);
            }
        }
    return SEGRT_OK;
}
