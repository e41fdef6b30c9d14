#include "core/compare.h"

#include "core/mem.h"

#include <math.h>
#include <string.h>

/* Elements are converted a chunk at a time into stack buffers, so that the
 * dtype switch runs once per chunk rather than once per element and memory
 * use does not grow with the tensors. */
enum { CHUNK = 1024, CLASS_CHUNK = 256 };

#define COPY_AS(type)                                   \
    do {                                                \
        const type *p = (const type *)t->data + start;  \
        for (int64_t i = 0; i < n; i++)                 \
            out[i] = (double)p[i];                      \
    } while (0)

/* Elements start .. start+n-1 of t as double. */
static void load_chunk(const sg_tensor *t, int64_t start, int64_t n, double *out)
{
    switch (t->dtype) {
    case SEGRT_DTYPE_FLOAT32: COPY_AS(float); return;
    case SEGRT_DTYPE_FLOAT64: COPY_AS(double); return;
    case SEGRT_DTYPE_INT64: COPY_AS(int64_t); return;
    case SEGRT_DTYPE_INT32: COPY_AS(int32_t); return;
    case SEGRT_DTYPE_UINT8: COPY_AS(uint8_t); return;
    default:
        /* Halves, bool and the narrow integers go through the general
         * loader, which also maps bool to 0 or 1 whatever byte is stored. */
        for (int64_t i = 0; i < n; i++)
            out[i] = sg_dtype_load_f64(t->dtype, t->data, start + i);
        return;
    }
}

#undef COPY_AS

static sg_status check_pair(const sg_tensor *a, const sg_tensor *b)
{
    if (!a || !b)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: tensors must not be NULL");
    const sg_tensor *t[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        if (!sg_dtype_is_supported(t[k]->dtype))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: unsupported dtype %d",
                            (int)t[k]->dtype);
        if (t[k]->rank < 0 || t[k]->rank > SEGRT_MAX_RANK)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: rank %d out of range",
                            (int)t[k]->rank);
        for (int32_t d = 0; d < t[k]->rank; d++)
            if (t[k]->dims[d] < 0)
                return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: negative dim");
    }
    bool same = a->rank == b->rank;
    for (int32_t d = 0; same && d < a->rank; d++)
        same = a->dims[d] == b->dims[d];
    if (!same) {
        char da[128], db[128];
        return sg_error(SEGRT_ERROR_SHAPE, "shapes differ: %s and %s",
                        sg_dims_format(a->dims, a->rank, da, sizeof da),
                        sg_dims_format(b->dims, b->rank, db, sizeof db));
    }
    if (sg_tensor_numel(a) > 0 && (!a->data || !b->data))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: tensor data must not be NULL");
    return SEGRT_OK;
}

sg_status sg_compare(const sg_tensor *a, const sg_tensor *b, sg_compare_stats *out)
{
    SG_TRY(check_pair(a, b));
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: out must not be NULL");
    int64_t n = sg_tensor_numel(a), mismatches = 0;
    double va[CHUNK], vb[CHUNK];
    double sum_abs = 0, sum_sq = 0, sum_bsq = 0, max_abs = 0;
    double bmin = INFINITY, bmax = -INFINITY;
    for (int64_t start = 0; start < n; start += CHUNK) {
        int64_t m = n - start < CHUNK ? n - start : CHUNK;
        load_chunk(a, start, m, va);
        load_chunk(b, start, m, vb);
        /* Per-chunk partial sums keep the rounding error of long sums down. */
        double c_abs = 0, c_sq = 0, c_bsq = 0;
        for (int64_t j = 0; j < m; j++) {
            double x = va[j], y = vb[j];
            bool xn = isnan(x), yn = isnan(y);
            if (xn || yn) {
                mismatches += xn != yn;
                continue;
            }
            if (isfinite(y)) {
                bmin = y < bmin ? y : bmin;
                bmax = y > bmax ? y : bmax;
            }
            c_bsq += y * y;
            /* x == y first: equal infinities are a match, not inf - inf. */
            double d = x == y ? 0.0 : fabs(x - y);
            c_abs += d;
            c_sq += d * d;
            if (d > max_abs)
                max_abs = d;
        }
        sum_abs += c_abs;
        sum_sq += c_sq;
        sum_bsq += c_bsq;
    }
    sg_compare_stats r;
    memset(&r, 0, sizeof r);
    r.count = n;
    r.nan_mismatches = mismatches;
    r.max_abs = max_abs;
    r.mae = n ? sum_abs / (double)n : 0.0;
    r.mse = n ? sum_sq / (double)n : 0.0;
    if (sum_sq == 0)
        r.rel_l2 = 0.0;
    else
        r.rel_l2 = sum_bsq > 0 ? sqrt(sum_sq) / sqrt(sum_bsq) : INFINITY;
    r.range = bmax >= bmin ? bmax - bmin : 0.0;
    /* A constant reference (range 0) gives -inf for any error at all:
     * there is no signal to speak of. */
    r.psnr_db = r.mse == 0 ? INFINITY : 10.0 * log10(r.range * r.range / r.mse);
    if (mismatches) {
        r.max_abs = r.mae = r.mse = r.rel_l2 = r.psnr_db = NAN;
    }
    *out = r;
    return SEGRT_OK;
}

/* Folds class c's values v[0..n) into the running argmax, numpy's way: the
 * first maximum wins, and a NaN beats everything and is never replaced. */
static void argmax_step(const double *v, int64_t n, int64_t c, double *best, int64_t *arg)
{
    for (int64_t j = 0; j < n; j++)
        if (c == 0 || (!isnan(best[j]) && (isnan(v[j]) || v[j] > best[j]))) {
            best[j] = v[j];
            arg[j] = c;
        }
}

sg_status sg_compare_classes(const sg_tensor *a, const sg_tensor *b, int32_t axis, sg_class_stats *out)
{
    SG_TRY(check_pair(a, b));
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: out must not be NULL");
    int32_t rank = a->rank;
    if (axis < -rank || axis >= rank)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "class axis %d out of range for rank %d", (int)axis,
                        (int)rank);
    if (axis < 0)
        axis += rank;
    int64_t n_classes = a->dims[axis], outer = 1, inner = 1;
    if (n_classes == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the class axis %d has size 0", (int)axis);
    for (int32_t d = 0; d < axis; d++)
        outer *= a->dims[d];
    for (int32_t d = axis + 1; d < rank; d++)
        inner *= a->dims[d];

    sg_class_stats r;
    memset(&r, 0, sizeof r);
    r.axis = axis;
    r.n_classes = n_classes;
    r.positions = outer * inner;
    r.dice = sg_malloc((size_t)n_classes * sizeof *r.dice);
    r.count_a = sg_calloc((size_t)n_classes, sizeof *r.count_a);
    r.count_b = sg_calloc((size_t)n_classes, sizeof *r.count_b);
    r.inter = sg_calloc((size_t)n_classes, sizeof *r.inter);
    if (!r.dice || !r.count_a || !r.count_b || !r.inter) {
        sg_class_stats_free(&r);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }

    /* Row-major: element (o, c, i) sits at (o * n_classes + c) * inner + i.
     * For a run of inner positions, each class is one contiguous load, so
     * the argmax is built class by class over the run in small buffers. */
    double v[CLASS_CHUNK], best_a[CLASS_CHUNK], best_b[CLASS_CHUNK];
    int64_t arg_a[CLASS_CHUNK], arg_b[CLASS_CHUNK];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i0 = 0; i0 < inner; i0 += CLASS_CHUNK) {
            int64_t m = inner - i0 < CLASS_CHUNK ? inner - i0 : CLASS_CHUNK;
            for (int64_t c = 0; c < n_classes; c++) {
                int64_t start = (o * n_classes + c) * inner + i0;
                load_chunk(a, start, m, v);
                argmax_step(v, m, c, best_a, arg_a);
                load_chunk(b, start, m, v);
                argmax_step(v, m, c, best_b, arg_b);
            }
            for (int64_t j = 0; j < m; j++) {
                r.count_a[arg_a[j]]++;
                r.count_b[arg_b[j]]++;
                if (arg_a[j] == arg_b[j]) {
                    r.agree++;
                    r.inter[arg_a[j]]++;
                }
            }
        }

    double dice_sum = 0;
    for (int64_t c = 0; c < n_classes; c++) {
        int64_t denom = r.count_a[c] + r.count_b[c];
        if (denom == 0) {
            r.dice[c] = NAN;
            continue;
        }
        r.dice[c] = 2.0 * (double)r.inter[c] / (double)denom;
        dice_sum += r.dice[c];
        r.n_present++;
    }
    r.mean_dice = r.n_present ? dice_sum / (double)r.n_present : NAN;
    r.argmax_agreement = r.positions ? (double)r.agree / (double)r.positions : NAN;
    *out = r;
    return SEGRT_OK;
}

void sg_class_stats_free(sg_class_stats *s)
{
    if (!s)
        return;
    free(s->dice);
    free(s->count_a);
    free(s->count_b);
    free(s->inter);
    s->dice = NULL;
    s->count_a = s->count_b = s->inter = NULL;
}
