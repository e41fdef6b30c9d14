/* Accuracy metrics (core/compare.h) on cases computed by hand. */
#include "core/compare.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sg_tensor view(sg_dtype dt, int32_t rank, const int64_t *dims, void *data)
{
    sg_tensor t = {dt, rank, {0}, data};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    return t;
}

static bool near(double x, double y) { return fabs(x - y) <= 1e-12 * (1 + fabs(y)); }

static void test_identical(void)
{
    float a[4] = {1, 2, 3, 4};
    int64_t d[1] = {4};
    sg_tensor ta = view(SEGRT_DTYPE_FLOAT32, 1, d, a);
    sg_compare_stats s;
    CHECK(sg_compare(&ta, &ta, &s) == SEGRT_OK);
    CHECK(s.count == 4 && s.nan_mismatches == 0);
    CHECK(s.max_abs == 0 && s.mae == 0 && s.mse == 0 && s.rel_l2 == 0);
    CHECK(s.range == 3);
    CHECK(isinf(s.psnr_db) && s.psnr_db > 0);
}

static void test_offsets(void)
{
    double b[4] = {0, 1, 2, 3};
    double a[4] = {0.5, 0.5, 3, 3}; /* errors 0.5, -0.5, 1, 0 */
    int64_t d[2] = {2, 2};
    sg_tensor ta = view(SEGRT_DTYPE_FLOAT64, 2, d, a), tb = view(SEGRT_DTYPE_FLOAT64, 2, d, b);
    sg_compare_stats s;
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(s.count == 4);
    CHECK(near(s.max_abs, 1.0));
    CHECK(near(s.mae, 0.5));
    CHECK(near(s.mse, 0.375));
    CHECK(near(s.rel_l2, sqrt(1.5) / sqrt(14.0)));
    CHECK(near(s.range, 3.0));
    CHECK_MSG(near(s.psnr_db, 10 * log10(9 / 0.375)), "psnr %g", s.psnr_db);

    /* A chunk boundary is no boundary: 3000 elements, all off by one. */
    enum { N = 3000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) {
        y[i] = (float)(i % 7);
        x[i] = y[i] + 1;
    }
    int64_t dn[1] = {N};
    ta = view(SEGRT_DTYPE_FLOAT32, 1, dn, x);
    tb = view(SEGRT_DTYPE_FLOAT32, 1, dn, y);
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(s.count == N && near(s.max_abs, 1) && near(s.mae, 1) && near(s.mse, 1));
    CHECK(near(s.psnr_db, 10 * log10(36.0)));
    free(x);
    free(y);
}

static void test_zeros_and_constants(void)
{
    float z[3] = {0, 0, 0}, o[3] = {0, 1, 0};
    int64_t d[1] = {3};
    sg_tensor tz = view(SEGRT_DTYPE_FLOAT32, 1, d, z), to = view(SEGRT_DTYPE_FLOAT32, 1, d, o);
    sg_compare_stats s;
    CHECK(sg_compare(&tz, &tz, &s) == SEGRT_OK);
    CHECK(s.rel_l2 == 0 && isinf(s.psnr_db) && s.psnr_db > 0); /* both all zero */
    CHECK(sg_compare(&to, &tz, &s) == SEGRT_OK);
    CHECK(isinf(s.rel_l2) && s.rel_l2 > 0); /* error against an all-zero reference */
    CHECK(isinf(s.psnr_db) && s.psnr_db < 0); /* a constant reference has no range */
    CHECK(near(s.max_abs, 1) && near(s.mae, 1.0 / 3));

    /* No elements at all. */
    int64_t d0[2] = {0, 5};
    sg_tensor te = view(SEGRT_DTYPE_FLOAT32, 2, d0, NULL);
    CHECK(sg_compare(&te, &te, &s) == SEGRT_OK);
    CHECK(s.count == 0 && s.max_abs == 0 && s.mae == 0 && s.rel_l2 == 0 && isinf(s.psnr_db));
}

static void test_nan_and_inf(void)
{
    int64_t d[1] = {3};
    float a[3] = {NAN, 1, NAN}, b[3] = {NAN, 1, 2};
    sg_tensor ta = view(SEGRT_DTYPE_FLOAT32, 1, d, a), tb = view(SEGRT_DTYPE_FLOAT32, 1, d, b);
    sg_compare_stats s;
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(s.nan_mismatches == 1 && s.count == 3);
    CHECK(isnan(s.max_abs) && isnan(s.mae) && isnan(s.rel_l2) && isnan(s.psnr_db));
    /* The mismatch counts the other way round too. */
    CHECK(sg_compare(&tb, &ta, &s) == SEGRT_OK);
    CHECK(s.nan_mismatches == 1 && isnan(s.rel_l2));

    /* NaN in both, and the same infinity in both, are matches. */
    float c[3] = {NAN, INFINITY, 3}, e[3] = {NAN, INFINITY, 1};
    sg_tensor tc = view(SEGRT_DTYPE_FLOAT32, 1, d, c), te = view(SEGRT_DTYPE_FLOAT32, 1, d, e);
    CHECK(sg_compare(&tc, &tc, &s) == SEGRT_OK);
    CHECK(s.nan_mismatches == 0 && s.max_abs == 0 && s.rel_l2 == 0 && isinf(s.psnr_db));
    CHECK(sg_compare(&tc, &te, &s) == SEGRT_OK);
    CHECK(s.nan_mismatches == 0 && near(s.max_abs, 2) && near(s.mae, 2.0 / 3));
    CHECK(s.range == 0); /* over B's finite elements: just 1 */
    /* An infinity against a finite value is an infinite error, not NaN. */
    float f[3] = {NAN, 5, 1};
    sg_tensor tf = view(SEGRT_DTYPE_FLOAT32, 1, d, f);
    CHECK(sg_compare(&te, &tf, &s) == SEGRT_OK);
    CHECK(isinf(s.max_abs) && s.nan_mismatches == 0);
}

static void test_dtypes(void)
{
    int64_t d[1] = {3};
    int32_t ai[3] = {1, 2, 3};
    float bf[3] = {1.5f, 2, 2};
    sg_tensor ta = view(SEGRT_DTYPE_INT32, 1, d, ai), tb = view(SEGRT_DTYPE_FLOAT32, 1, d, bf);
    sg_compare_stats s;
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(near(s.max_abs, 1) && near(s.mae, 0.5) && near(s.mse, 1.25 / 3));

    /* Bool reads as 0/1 whatever byte is stored; against int64 and uint8. */
    uint8_t ab[3] = {1, 0, 7};
    int64_t bi[3] = {1, 0, 2};
    uint8_t bu[3] = {1, 0, 1};
    ta = view(SEGRT_DTYPE_BOOL, 1, d, ab);
    tb = view(SEGRT_DTYPE_INT64, 1, d, bi);
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(near(s.max_abs, 1) && near(s.mae, 1.0 / 3));
    tb = view(SEGRT_DTYPE_UINT8, 1, d, bu);
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(s.max_abs == 0);

    /* float16 1.0, 2.0, -2.0 against int8 1, 2, -1. */
    uint16_t h[3] = {0x3c00, 0x4000, 0xc000};
    int8_t i8[3] = {1, 2, -1};
    ta = view(SEGRT_DTYPE_FLOAT16, 1, d, h);
    tb = view(SEGRT_DTYPE_INT8, 1, d, i8);
    CHECK(sg_compare(&ta, &tb, &s) == SEGRT_OK);
    CHECK(near(s.max_abs, 1) && near(s.range, 3));
}

static void test_errors(void)
{
    float a[6] = {0};
    int64_t d23[2] = {2, 3}, d32[2] = {3, 2}, d6[1] = {6};
    sg_tensor t23 = view(SEGRT_DTYPE_FLOAT32, 2, d23, a), t32 = view(SEGRT_DTYPE_FLOAT32, 2, d32, a),
              t6 = view(SEGRT_DTYPE_FLOAT32, 1, d6, a);
    sg_compare_stats s;
    CHECK(sg_compare(&t23, &t32, &s) == SEGRT_ERROR_SHAPE);
    CHECK(strstr(segrt_last_error(), "2x3") && strstr(segrt_last_error(), "3x2"));
    CHECK(sg_compare(&t23, &t6, &s) == SEGRT_ERROR_SHAPE);
    sg_class_stats cs;
    memset(&cs, 0, sizeof cs);
    CHECK(sg_compare_classes(&t23, &t32, 0, &cs) == SEGRT_ERROR_SHAPE);
    CHECK(sg_compare_classes(&t23, &t23, 2, &cs) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_compare_classes(&t23, &t23, -3, &cs) == SEGRT_ERROR_INVALID_ARGUMENT);
    int64_t d0[2] = {2, 0};
    sg_tensor t0 = view(SEGRT_DTYPE_FLOAT32, 2, d0, NULL);
    CHECK(sg_compare_classes(&t0, &t0, 1, &cs) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_tensor bad = t23;
    bad.dtype = (sg_dtype)8; /* string */
    CHECK(sg_compare(&bad, &bad, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(cs.dice == NULL);
    sg_class_stats_free(&cs);
    sg_class_stats_free(NULL);
}

static void test_classes(void)
{
    /* Shape 1x3x4: classes on axis 1, four positions. Argmax of A is
     * 0 0 1 1, of B 0 1 1 1; class 2 wins nowhere. */
    float a[12] = {
        5, 1, 0, 0,  /* class 0 */
        1, 1, 9, 3,  /* class 1 */
        0, 0, 1, 2,  /* class 2; position 1 ties 0 with 1: the first wins */
    };
    float b[12] = {
        2, 0, 0, 0,
        1, 3, 5, 4,
        1, 2, 3, 3,
    };
    int64_t d[3] = {1, 3, 4};
    sg_tensor ta = view(SEGRT_DTYPE_FLOAT32, 3, d, a), tb = view(SEGRT_DTYPE_FLOAT32, 3, d, b);
    for (int k = 0; k < 2; k++) {
        int32_t axis = k ? -2 : 1;
        sg_class_stats cs;
        CHECK(sg_compare_classes(&ta, &tb, axis, &cs) == SEGRT_OK);
        CHECK(cs.axis == 1 && cs.n_classes == 3 && cs.positions == 4);
        CHECK(cs.agree == 3 && near(cs.argmax_agreement, 0.75));
        CHECK(cs.count_a[0] == 2 && cs.count_a[1] == 2 && cs.count_a[2] == 0);
        CHECK(cs.count_b[0] == 1 && cs.count_b[1] == 3 && cs.count_b[2] == 0);
        CHECK(cs.inter[0] == 1 && cs.inter[1] == 2 && cs.inter[2] == 0);
        CHECK(near(cs.dice[0], 2.0 / 3) && near(cs.dice[1], 0.8));
        CHECK(isnan(cs.dice[2])); /* in neither map */
        CHECK(cs.n_present == 2 && near(cs.mean_dice, (2.0 / 3 + 0.8) / 2));
        sg_class_stats_free(&cs);
        CHECK(cs.dice == NULL);
    }

    /* Classes on the last axis, a float tensor against an int64 one; a NaN
     * is the maximum, as in numpy. Rows: A 2 0 1, B 1 0 1. */
    double x[9] = {1, 2, 3, 3, 2, 1, 0, NAN, 7};
    int64_t y[9] = {0, 5, 0, 9, 1, 1, 0, 4, 4};
    int64_t d2[2] = {3, 3};
    ta = view(SEGRT_DTYPE_FLOAT64, 2, d2, x);
    tb = view(SEGRT_DTYPE_INT64, 2, d2, y);
    sg_class_stats cs;
    CHECK(sg_compare_classes(&ta, &tb, -1, &cs) == SEGRT_OK);
    CHECK(cs.axis == 1 && cs.positions == 3 && cs.agree == 2);
    CHECK(near(cs.dice[0], 1) && near(cs.dice[1], 2.0 / 3) && near(cs.dice[2], 0));
    CHECK(cs.n_present == 3 && near(cs.mean_dice, (1 + 2.0 / 3) / 3));
    sg_class_stats_free(&cs);
}

/* More positions than one chunk, against a brute-force count. */
static void test_classes_long(void)
{
    enum { OUTER = 2, C = 3, INNER = 700 };
    float *a = malloc(OUTER * C * INNER * sizeof *a);
    uint8_t *b = malloc(OUTER * C * INNER);
    uint32_t r = 12345;
    for (int i = 0; i < OUTER * C * INNER; i++) {
        r = r * 1103515245u + 12345u;
        a[i] = (float)((r >> 16) % 100) / 10;
        b[i] = (uint8_t)((r >> 8) % 4); /* many ties: first maximum wins */
    }
    int64_t agree = 0, inter[C] = {0}, ca[C] = {0}, cb[C] = {0};
    for (int o = 0; o < OUTER; o++)
        for (int i = 0; i < INNER; i++) {
            int la = 0, lb = 0;
            for (int c = 1; c < C; c++) {
                if (a[(o * C + c) * INNER + i] > a[(o * C + la) * INNER + i])
                    la = c;
                if (b[(o * C + c) * INNER + i] > b[(o * C + lb) * INNER + i])
                    lb = c;
            }
            ca[la]++;
            cb[lb]++;
            if (la == lb) {
                agree++;
                inter[la]++;
            }
        }
    int64_t d[3] = {OUTER, C, INNER};
    sg_tensor ta = view(SEGRT_DTYPE_FLOAT32, 3, d, a), tb = view(SEGRT_DTYPE_UINT8, 3, d, b);
    sg_class_stats cs;
    CHECK(sg_compare_classes(&ta, &tb, 1, &cs) == SEGRT_OK);
    CHECK(cs.positions == OUTER * INNER && cs.agree == agree);
    for (int c = 0; c < C; c++) {
        CHECK(cs.count_a[c] == ca[c] && cs.count_b[c] == cb[c] && cs.inter[c] == inter[c]);
        CHECK(near(cs.dice[c], 2.0 * (double)inter[c] / (double)(ca[c] + cb[c])));
    }
    sg_class_stats_free(&cs);
    free(a);
    free(b);
}

int main(void)
{
    test_identical();
    test_offsets();
    test_zeros_and_constants();
    test_nan_and_inf();
    test_dtypes();
    test_errors();
    test_classes();
    test_classes_long();
    return sg_test_finish("test_compare");
}
