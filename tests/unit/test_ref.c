/* The reference backend's kernels against hand-computed results: one
 * sg_node per case, tensors as views over local arrays. */
#include "backend/ref/ref.h"
#include "graph/ir.h"
#include "testlib.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static sg_graph *graph;

/* A fresh node; valid until the next call. */
static sg_node *node(sg_op op, int32_t n_in, int32_t n_out)
{
    sg_node *n = NULL;
    if (sg_graph_add_node(graph, op, sg_op_name(op), n_in, n_out, &n) != SEGRT_OK)
        abort();
    return n;
}

static sg_attr *new_attr(sg_node *n, const char *name, sg_attr_kind kind)
{
    sg_attr *a = realloc(n->attrs, sizeof *a * (size_t)(n->n_attrs + 1));
    if (!a)
        abort();
    n->attrs = a;
    a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    a->kind = kind;
    return a;
}

static void attr_int(sg_node *n, const char *name, int64_t v)
{
    new_attr(n, name, SG_ATTR_INT)->i = v;
}

static void attr_float(sg_node *n, const char *name, float v)
{
    new_attr(n, name, SG_ATTR_FLOAT)->f = v;
}

static void attr_str(sg_node *n, const char *name, const char *v)
{
    new_attr(n, name, SG_ATTR_STRING)->s = strdup(v);
}

static void attr_ints(sg_node *n, const char *name, int32_t count, ...)
{
    sg_attr *a = new_attr(n, name, SG_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    a->n = count;
    va_list ap;
    va_start(ap, count);
    for (int32_t i = 0; i < count; i++)
        a->ints[i] = va_arg(ap, int);
    va_end(ap);
}

/* A one-element tensor attribute (ConstantOfShape's value). */
static void attr_scalar_tensor(sg_node *n, const char *name, sg_dtype t, const void *v)
{
    sg_attr *a = new_attr(n, name, SG_ATTR_TENSOR);
    a->t_dtype = t;
    a->t_rank = 1;
    a->t_dims[0] = 1;
    if (sg_blob_new(segrt_dtype_size(t), false, &a->t_data) != SEGRT_OK)
        abort();
    memcpy(sg_blob_data(a->t_data), v, segrt_dtype_size(t));
}

static sg_tensor tensor(sg_dtype t, void *data, int32_t rank, ...)
{
    sg_tensor x;
    memset(&x, 0, sizeof x);
    x.dtype = t;
    x.rank = rank;
    x.data = data;
    va_list ap;
    va_start(ap, rank);
    for (int32_t i = 0; i < rank; i++)
        x.dims[i] = va_arg(ap, int);
    va_end(ap);
    return x;
}

#define F32 SEGRT_DTYPE_FLOAT32
#define I64 SEGRT_DTYPE_INT64

static sg_status run(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                     sg_tensor *const *out, int32_t n_out)
{
    sg_ref_kernel_fn fn = sg_ref_kernel(n->op);
    if (!fn)
        return SEGRT_ERROR_UNSUPPORTED;
    return fn(n, in, n_in, out, n_out);
}

static bool close_f(const float *got, const float *want, int n, float tol)
{
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tol * (1 + fabsf(want[i])))) {
            fprintf(stderr, "  element %d: got %.9g, want %.9g\n", i, got[i], want[i]);
            return false;
        }
    return true;
}

static bool same_i(const int64_t *got, const int64_t *want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "  element %d: got %lld, want %lld\n", i, (long long)got[i],
                    (long long)want[i]);
            return false;
        }
    return true;
}

static void test_table(void)
{
    int missing = 0;
    for (int op = 0; op < SG_OP_COUNT; op++)
        missing += sg_ref_kernel((sg_op)op) == NULL;
    CHECK_MSG(missing == 0, "%d operators have no kernel", missing);
    CHECK(sg_ref_kernel(SG_OP_COUNT) == NULL);
}

static void test_conv(void)
{
    /* 4x4 ramp, 3x3 ones, pads 1, stride 2, bias 1: window sums + 1. */
    float x[16], w[9], b[1] = {1}, y[4];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    for (int i = 0; i < 9; i++)
        w[i] = 1;
    sg_node *n = node(SG_OP_CONV, 3, 1);
    attr_ints(n, "pads", 4, 1, 1, 1, 1);
    attr_ints(n, "strides", 2, 2, 2);
    sg_tensor tx = tensor(F32, x, 4, 1, 1, 4, 4), tw = tensor(F32, w, 4, 1, 1, 3, 3),
              tb = tensor(F32, b, 1, 1), ty = tensor(F32, y, 4, 1, 1, 2, 2);
    const sg_tensor *in[3] = {&tx, &tw, &tb};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 3, out, 1) == SEGRT_OK);
    const float want[4] = {11, 25, 52, 91};
    CHECK(close_f(y, want, 4, 0));

    /* Two groups, dilation 2, asymmetric pads, no bias. */
    float x2[50], w2[8] = {1, -1, 2, 0.5f, 0, 1, -2, 1}, y2[32];
    for (int i = 0; i < 50; i++)
        x2[i] = (float)(i % 7);
    n = node(SG_OP_CONV, 2, 1);
    attr_int(n, "group", 2);
    attr_ints(n, "dilations", 2, 2, 2);
    attr_ints(n, "pads", 4, 1, 0, 0, 1);
    sg_tensor tx2 = tensor(F32, x2, 4, 1, 2, 5, 5), tw2 = tensor(F32, w2, 4, 2, 1, 2, 2),
              ty2 = tensor(F32, y2, 4, 1, 2, 4, 4);
    const sg_tensor *in2[2] = {&tx2, &tw2};
    sg_tensor *out2[1] = {&ty2};
    CHECK(run(n, in2, 2, out2, 1) == SEGRT_OK);
    const float want2[32] = {10, 12.5f, 1,  2,    6.5f, 9,  8,  15, 8.5f, 11, 6.5f,
                             9,  10.5f, -1, 8.5f, 10,   0,  -1, -2, -10,  8,  1,
                             1,  -6,    -6, -6,   8,    -2, 1,  1,  -6,   -12};
    CHECK(close_f(y2, want2, 32, 0));

    /* Output dims that contradict the attributes are an error, not a
     * write past the buffer. */
    sg_tensor bad = tensor(F32, y2, 4, 1, 2, 5, 4);
    sg_tensor *outb[1] = {&bad};
    n = node(SG_OP_CONV, 2, 1);
    attr_int(n, "group", 2);
    CHECK(run(n, in2, 2, outb, 1) == SEGRT_ERROR_SHAPE);
}

static void test_conv_transpose(void)
{
    /* Stride 2 with output_padding 1: each input pixel stamps w into a 2x2
     * block; the extra row and column hold only the bias. */
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 2, 3, 4}, b[1] = {0.5f}, y[25];
    sg_node *n = node(SG_OP_CONV_TRANSPOSE, 3, 1);
    attr_ints(n, "strides", 2, 2, 2);
    attr_ints(n, "output_padding", 2, 1, 1);
    sg_tensor tx = tensor(F32, x, 4, 1, 1, 2, 2), tw = tensor(F32, w, 4, 1, 1, 2, 2),
              tb = tensor(F32, b, 1, 1), ty = tensor(F32, y, 4, 1, 1, 5, 5);
    const sg_tensor *in[3] = {&tx, &tw, &tb};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 3, out, 1) == SEGRT_OK);
    const float want[25] = {1.5f,  2.5f, 2.5f, 4.5f, 0.5f, 3.5f, 4.5f, 6.5f,  8.5f,
                            0.5f,  3.5f, 6.5f, 4.5f, 8.5f, 0.5f, 9.5f, 12.5f, 12.5f,
                            16.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    CHECK(close_f(y, want, 25, 0));
}

static void test_pool(void)
{
    float x[16], y[4];
    int64_t idx[4];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    sg_node *n = node(SG_OP_MAX_POOL, 1, 2);
    attr_ints(n, "kernel_shape", 2, 3, 3);
    attr_ints(n, "strides", 2, 2, 2);
    attr_int(n, "ceil_mode", 1);
    sg_tensor tx = tensor(F32, x, 4, 1, 1, 4, 4), ty = tensor(F32, y, 4, 1, 1, 2, 2),
              ti = tensor(I64, idx, 4, 1, 1, 2, 2);
    const sg_tensor *in[1] = {&tx};
    sg_tensor *out[2] = {&ty, &ti};
    CHECK(run(n, in, 1, out, 2) == SEGRT_OK);
    const float want[4] = {10, 11, 14, 15};
    const int64_t want_idx[4] = {10, 11, 14, 15};
    CHECK(close_f(y, want, 4, 0));
    CHECK(same_i(idx, want_idx, 4));

    /* NaN wins a max window. */
    x[5] = NAN;
    CHECK(run(n, in, 1, out, 2) == SEGRT_OK);
    CHECK(isnan(y[0]) && idx[0] == 5);
    x[5] = 5;

    n = node(SG_OP_AVERAGE_POOL, 1, 1);
    attr_ints(n, "kernel_shape", 2, 3, 3);
    attr_ints(n, "strides", 2, 2, 2);
    attr_ints(n, "pads", 4, 1, 1, 1, 1);
    attr_int(n, "count_include_pad", 1);
    CHECK(run(n, in, 1, out, 1) == SEGRT_OK);
    const float want_avg[4] = {10.0f / 9, 24.0f / 9, 51.0f / 9, 10};
    CHECK(close_f(y, want_avg, 4, 1e-6f));
}

static void test_norm(void)
{
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 9}, s[2] = {1, 2}, b[2] = {0, 1}, y[8];
    sg_node *n = node(SG_OP_INSTANCE_NORMALIZATION, 3, 1);
    attr_float(n, "epsilon", 0);
    sg_tensor tx = tensor(F32, x, 4, 1, 2, 2, 2), ts = tensor(F32, s, 1, 2),
              tb = tensor(F32, b, 1, 2), ty = tensor(F32, y, 4, 1, 2, 2, 2);
    const sg_tensor *in[3] = {&tx, &ts, &tb};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 3, out, 1) == SEGRT_OK);
    const float want[8] = {-1.34164083f, -0.447213650f,  0.447213411f, 1.34164071f,
                           -1.36643171f, -0.0141849518f, 1.33806133f,  4.04255581f};
    CHECK(close_f(y, want, 8, 1e-5f));

    float lx[8] = {1, 2, 3, 4, 2, 2, 2, 6}, ls[4] = {1, 1, 2, 2}, lb[4] = {0, 0, 0, 1}, ly[8];
    n = node(SG_OP_LAYER_NORMALIZATION, 3, 1);
    attr_float(n, "epsilon", 0);
    sg_tensor tlx = tensor(F32, lx, 2, 2, 4), tls = tensor(F32, ls, 1, 4),
              tlb = tensor(F32, lb, 1, 4), tly = tensor(F32, ly, 2, 2, 4);
    const sg_tensor *lin[3] = {&tlx, &tls, &tlb};
    sg_tensor *lout[1] = {&tly};
    CHECK(run(n, lin, 3, lout, 1) == SEGRT_OK);
    const float lwant[8] = {-1.34164071f, -0.44721359f, 0.89442718f,  3.68328142f,
                            -0.57735026f, -0.57735026f, -1.15470052f, 4.46410179f};
    CHECK(close_f(ly, lwant, 8, 1e-5f));
}

static void test_binary(void)
{
    /* int64 [2,3] + [3] */
    int64_t a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, INT64_MAX}, y[6];
    sg_node *n = node(SG_OP_ADD, 2, 1);
    sg_tensor ta = tensor(I64, a, 2, 2, 3), tb = tensor(I64, b, 1, 3), ty = tensor(I64, y, 2, 2, 3);
    const sg_tensor *in[2] = {&ta, &tb};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 2, out, 1) == SEGRT_OK);
    /* INT64_MAX + 3 wraps instead of overflowing. */
    const int64_t want[6] = {11, 22, INT64_MIN + 2, 14, 25, INT64_MIN + 5};
    CHECK(same_i(y, want, 6));

    /* float [2,1] + [1,3] */
    float fa[2] = {1, 2}, fb[3] = {0.5f, NAN, -INFINITY}, fy[6];
    sg_tensor tfa = tensor(F32, fa, 2, 2, 1), tfb = tensor(F32, fb, 2, 1, 3),
              tfy = tensor(F32, fy, 2, 2, 3);
    const sg_tensor *fin[2] = {&tfa, &tfb};
    sg_tensor *fout[1] = {&tfy};
    CHECK(run(n, fin, 2, fout, 1) == SEGRT_OK);
    CHECK(fy[0] == 1.5f && isnan(fy[1]) && fy[2] == -INFINITY && fy[3] == 2.5f);

    /* Broadcast that does not fit the output is an error. */
    sg_tensor bad = tensor(F32, fy, 2, 3, 2);
    sg_tensor *bout[1] = {&bad};
    CHECK(run(n, fin, 2, bout, 1) == SEGRT_ERROR_SHAPE);

    /* Integer division truncates; by zero is an error. */
    int64_t da[3] = {-7, 7, INT64_MIN}, db[3] = {2, -2, -1}, dy[3];
    n = node(SG_OP_DIV, 2, 1);
    sg_tensor tda = tensor(I64, da, 1, 3), tdb = tensor(I64, db, 1, 3), tdy = tensor(I64, dy, 1, 3);
    const sg_tensor *din[2] = {&tda, &tdb};
    sg_tensor *dout[1] = {&tdy};
    CHECK(run(n, din, 2, dout, 1) == SEGRT_OK);
    const int64_t dwant[3] = {-3, -3, INT64_MIN};
    CHECK(same_i(dy, dwant, 3));
    db[1] = 0;
    CHECK(run(n, din, 2, dout, 1) == SEGRT_ERROR_INVALID_MODEL);

    /* Max propagates NaN. */
    float ma[2] = {NAN, 1}, mb[2] = {3, NAN}, my[2];
    n = node(SG_OP_MAX, 2, 1);
    sg_tensor tma = tensor(F32, ma, 1, 2), tmb = tensor(F32, mb, 1, 2), tmy = tensor(F32, my, 1, 2);
    const sg_tensor *min_[2] = {&tma, &tmb};
    sg_tensor *mout[1] = {&tmy};
    CHECK(run(n, min_, 2, mout, 1) == SEGRT_OK);
    CHECK(isnan(my[0]) && isnan(my[1]));

    /* bfloat16 computes through float: 1.5 + 2.25 = 3.75. */
    uint16_t ba[1] = {0x3fc0}, bb[1] = {0x4010}, by[1];
    n = node(SG_OP_ADD, 2, 1);
    sg_tensor tba = tensor(SEGRT_DTYPE_BFLOAT16, ba, 1, 1),
              tbb = tensor(SEGRT_DTYPE_BFLOAT16, bb, 1, 1),
              tby = tensor(SEGRT_DTYPE_BFLOAT16, by, 1, 1);
    const sg_tensor *bin[2] = {&tba, &tbb};
    sg_tensor *bout2[1] = {&tby};
    CHECK(run(n, bin, 2, bout2, 1) == SEGRT_OK);
    CHECK(by[0] == 0x4070);

    /* Relu keeps NaN. */
    float rx[3] = {-1, NAN, 2}, ry[3];
    n = node(SG_OP_RELU, 1, 1);
    sg_tensor trx = tensor(F32, rx, 1, 3), try_ = tensor(F32, ry, 1, 3);
    const sg_tensor *rin[1] = {&trx};
    sg_tensor *rout[1] = {&try_};
    CHECK(run(n, rin, 1, rout, 1) == SEGRT_OK);
    CHECK(ry[0] == 0 && isnan(ry[1]) && ry[2] == 2);
}

static void test_where(void)
{
    uint8_t c[3] = {1, 0, 1};
    float x[3] = {1, 2, 3}, yv[1] = {-1}, o[6];
    sg_node *n = node(SG_OP_WHERE, 3, 1);
    sg_tensor tc = tensor(SEGRT_DTYPE_BOOL, c, 1, 3), tx = tensor(F32, x, 1, 3),
              tyv = tensor(F32, yv, 1, 1), to = tensor(F32, o, 2, 2, 3);
    const sg_tensor *in[3] = {&tc, &tx, &tyv};
    sg_tensor *out[1] = {&to};
    CHECK(run(n, in, 3, out, 1) == SEGRT_OK);
    const float want[6] = {1, -1, 3, 1, -1, 3};
    CHECK(close_f(o, want, 6, 0));
}

static void test_slice_pad_gather(void)
{
    /* x[::-2] along axis 1 of a 2x5 ramp: starts -1, ends -100, step -2. */
    float x[10], y[6];
    for (int i = 0; i < 10; i++)
        x[i] = (float)i;
    int64_t st[1] = {-1}, en[1] = {-100}, ax[1] = {1}, sp[1] = {-2};
    sg_node *n = node(SG_OP_SLICE, 5, 1);
    sg_tensor tx = tensor(F32, x, 2, 2, 5), ts = tensor(I64, st, 1, 1), te = tensor(I64, en, 1, 1),
              ta = tensor(I64, ax, 1, 1), tp = tensor(I64, sp, 1, 1), ty = tensor(F32, y, 2, 2, 3);
    const sg_tensor *in[5] = {&tx, &ts, &te, &ta, &tp};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 5, out, 1) == SEGRT_OK);
    const float want[6] = {4, 2, 0, 9, 7, 5};
    CHECK(close_f(y, want, 6, 0));

    /* Pad [1,2,3] by 2 before and 3 after, reflect and edge. */
    float px[3] = {1, 2, 3}, py[8];
    int64_t pads[2] = {2, 3};
    sg_tensor tpx = tensor(F32, px, 1, 3), tpp = tensor(I64, pads, 1, 2),
              tpy = tensor(F32, py, 1, 8);
    const sg_tensor *pin[2] = {&tpx, &tpp};
    sg_tensor *pout[1] = {&tpy};
    n = node(SG_OP_PAD, 2, 1);
    attr_str(n, "mode", "reflect");
    CHECK(run(n, pin, 2, pout, 1) == SEGRT_OK);
    const float want_r[8] = {3, 2, 1, 2, 3, 2, 1, 2};
    CHECK(close_f(py, want_r, 8, 0));
    n = node(SG_OP_PAD, 2, 1);
    attr_str(n, "mode", "edge");
    CHECK(run(n, pin, 2, pout, 1) == SEGRT_OK);
    const float want_e[8] = {1, 1, 1, 2, 3, 3, 3, 3};
    CHECK(close_f(py, want_e, 8, 0));
    /* Constant with a value, and a crop at the front. */
    float cv[1] = {9};
    int64_t cpads[2] = {-1, 1};
    sg_tensor tcv = tensor(F32, cv, 0), tcp = tensor(I64, cpads, 1, 2), tcy = tensor(F32, py, 1, 3);
    const sg_tensor *cin[3] = {&tpx, &tcp, &tcv};
    sg_tensor *cout[1] = {&tcy};
    n = node(SG_OP_PAD, 3, 1);
    CHECK(run(n, cin, 3, cout, 1) == SEGRT_OK);
    const float want_c[3] = {2, 3, 9};
    CHECK(close_f(py, want_c, 3, 0));

    /* Gather rows with a negative index; out of range is an error. */
    int64_t gi[2] = {-1, 0};
    float gy[10];
    n = node(SG_OP_GATHER, 2, 1);
    sg_tensor tgi = tensor(I64, gi, 1, 2), tgy = tensor(F32, gy, 2, 2, 5);
    const sg_tensor *gin[2] = {&tx, &tgi};
    sg_tensor *gout[1] = {&tgy};
    CHECK(run(n, gin, 2, gout, 1) == SEGRT_OK);
    CHECK(gy[0] == 5 && gy[4] == 9 && gy[5] == 0 && gy[9] == 4);
    gi[0] = 2;
    CHECK(run(n, gin, 2, gout, 1) == SEGRT_ERROR_INVALID_MODEL);
}

static void test_cast(void)
{
    float x[5] = {2.9f, -2.9f, 0.5f, 1e20f, -0.0f};
    int64_t y[5];
    sg_node *n = node(SG_OP_CAST, 1, 1);
    attr_int(n, "to", I64);
    sg_tensor tx = tensor(F32, x, 1, 5), ty = tensor(I64, y, 1, 5);
    const sg_tensor *in[1] = {&tx};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 1, out, 1) == SEGRT_OK);
    const int64_t want[5] = {2, -2, 0, INT64_MAX, 0};
    CHECK(same_i(y, want, 5));

    int64_t hx[5] = {1, 2049, 65504, 70000, -3};
    uint16_t hy[5];
    n = node(SG_OP_CAST, 1, 1);
    attr_int(n, "to", SEGRT_DTYPE_FLOAT16);
    sg_tensor thx = tensor(I64, hx, 1, 5), thy = tensor(SEGRT_DTYPE_FLOAT16, hy, 1, 5);
    const sg_tensor *hin[1] = {&thx};
    sg_tensor *hout[1] = {&thy};
    CHECK(run(n, hin, 1, hout, 1) == SEGRT_OK);
    /* 1, 2048 (ties to even), 65504, inf, -3 */
    CHECK(hy[0] == 0x3c00 && hy[1] == 0x6800 && hy[2] == 0x7bff && hy[3] == 0x7c00 &&
          hy[4] == 0xc200);
}

static void test_layout(void)
{
    float x[6] = {0, 1, 2, 3, 4, 5}, y[6];
    int64_t shape[2] = {3, -1};
    sg_node *n = node(SG_OP_RESHAPE, 2, 1);
    sg_tensor tx = tensor(F32, x, 2, 2, 3), ts = tensor(I64, shape, 1, 2),
              ty = tensor(F32, y, 2, 3, 2);
    const sg_tensor *in[2] = {&tx, &ts};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 2, out, 1) == SEGRT_OK);
    CHECK(close_f(y, x, 6, 0));
    sg_tensor bad = tensor(F32, y, 2, 2, 2);
    sg_tensor *bout[1] = {&bad};
    CHECK(run(n, in, 2, bout, 1) == SEGRT_ERROR_SHAPE);

    n = node(SG_OP_TRANSPOSE, 1, 1);
    attr_ints(n, "perm", 2, 1, 0);
    CHECK(run(n, in, 1, out, 1) == SEGRT_OK);
    const float want[6] = {0, 3, 1, 4, 2, 5};
    CHECK(close_f(y, want, 6, 0));

    /* Concat on axis 1 of [2,3] and [2,1]. */
    float c2[2] = {-1, -2}, cy[8];
    n = node(SG_OP_CONCAT, 2, 1);
    attr_int(n, "axis", 1);
    sg_tensor tc2 = tensor(F32, c2, 2, 2, 1), tcy = tensor(F32, cy, 2, 2, 4);
    const sg_tensor *cin[2] = {&tx, &tc2};
    sg_tensor *cout[1] = {&tcy};
    CHECK(run(n, cin, 2, cout, 1) == SEGRT_OK);
    const float cwant[8] = {0, 1, 2, -1, 3, 4, 5, -2};
    CHECK(close_f(cy, cwant, 8, 0));
}

static void test_reduce_matmul_softmax(void)
{
    float x[24], y[3];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    int64_t axes[2] = {0, 2};
    sg_node *n = node(SG_OP_REDUCE_MEAN, 2, 1);
    attr_int(n, "keepdims", 0);
    sg_tensor tx = tensor(F32, x, 3, 2, 3, 4), ta = tensor(I64, axes, 1, 2),
              ty = tensor(F32, y, 1, 3);
    const sg_tensor *in[2] = {&tx, &ta};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 2, out, 1) == SEGRT_OK);
    const float want[3] = {7.5f, 11.5f, 15.5f};
    CHECK(close_f(y, want, 3, 1e-6f));

    /* [2,2,3] x [3,2] */
    float b[6] = {1, 0, 0, 1, 1, -1}, my[8];
    n = node(SG_OP_MAT_MUL, 2, 1);
    sg_tensor tma = tensor(F32, x, 3, 2, 2, 3), tmb = tensor(F32, b, 2, 3, 2),
              tmy = tensor(F32, my, 3, 2, 2, 2);
    const sg_tensor *min_[2] = {&tma, &tmb};
    sg_tensor *mout[1] = {&tmy};
    CHECK(run(n, min_, 2, mout, 1) == SEGRT_OK);
    const float mwant[8] = {2, -1, 8, -1, 14, -1, 20, -1};
    CHECK(close_f(my, mwant, 8, 0));

    float sx[6] = {1, 2, 3, 0, 0, logf(2)}, sy[6];
    n = node(SG_OP_SOFTMAX, 1, 1);
    sg_tensor tsx = tensor(F32, sx, 2, 2, 3), tsy = tensor(F32, sy, 2, 2, 3);
    const sg_tensor *sin_[1] = {&tsx};
    sg_tensor *sout[1] = {&tsy};
    CHECK(run(n, sin_, 1, sout, 1) == SEGRT_OK);
    const float swant[6] = {0.0900305733f, 0.244728476f, 0.665240943f, 0.25f, 0.25f, 0.5f};
    CHECK(close_f(sy, swant, 6, 1e-6f));
}

static void test_resize(void)
{
    float x[4] = {1, 2, 3, 4}, scales[4] = {1, 1, 2, 2}, y[16];
    sg_node *n = node(SG_OP_RESIZE, 3, 1);
    attr_str(n, "mode", "linear");
    sg_tensor tx = tensor(F32, x, 4, 1, 1, 2, 2), tsc = tensor(F32, scales, 1, 4),
              ty = tensor(F32, y, 4, 1, 1, 4, 4);
    const sg_tensor *in[3] = {&tx, NULL, &tsc};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 3, out, 1) == SEGRT_OK);
    const float want[16] = {1,    1.25f, 1.75f, 2,    1.5f, 1.75f, 2.25f, 2.5f,
                            2.5f, 2.75f, 3.25f, 3.5f, 3,    3.25f, 3.75f, 4};
    CHECK(close_f(y, want, 16, 1e-6f));

    float s2[4] = {1, 1, 1.5f, 2}, y2[12];
    n = node(SG_OP_RESIZE, 3, 1);
    attr_str(n, "mode", "nearest");
    attr_str(n, "coordinate_transformation_mode", "asymmetric");
    attr_str(n, "nearest_mode", "floor");
    sg_tensor ts2 = tensor(F32, s2, 1, 4), ty2 = tensor(F32, y2, 4, 1, 1, 3, 4);
    const sg_tensor *in2[3] = {&tx, NULL, &ts2};
    sg_tensor *out2[1] = {&ty2};
    CHECK(run(n, in2, 3, out2, 1) == SEGRT_OK);
    const float want2[12] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4};
    CHECK(close_f(y2, want2, 12, 0));
}

static void test_misc(void)
{
    /* Range(10, 0, -3) = 10, 7, 4, 1 */
    int64_t s[1] = {10}, l[1] = {0}, d[1] = {-3}, y[4];
    sg_node *n = node(SG_OP_RANGE, 3, 1);
    sg_tensor ts = tensor(I64, s, 0), tl = tensor(I64, l, 0), td = tensor(I64, d, 0),
              ty = tensor(I64, y, 1, 4);
    const sg_tensor *in[3] = {&ts, &tl, &td};
    sg_tensor *out[1] = {&ty};
    CHECK(run(n, in, 3, out, 1) == SEGRT_OK);
    const int64_t want[4] = {10, 7, 4, 1};
    CHECK(same_i(y, want, 4));
    sg_tensor wrong = tensor(I64, y, 1, 3);
    sg_tensor *wout[1] = {&wrong};
    CHECK(run(n, in, 3, wout, 1) == SEGRT_ERROR_SHAPE);

    /* ConstantOfShape: default float zero, and an int64 value. */
    int64_t shape[2] = {2, 3};
    float fz[6] = {1, 1, 1, 1, 1, 1};
    n = node(SG_OP_CONSTANT_OF_SHAPE, 1, 1);
    sg_tensor tsh = tensor(I64, shape, 1, 2), tfz = tensor(F32, fz, 2, 2, 3);
    const sg_tensor *cin[1] = {&tsh};
    sg_tensor *cout[1] = {&tfz};
    CHECK(run(n, cin, 1, cout, 1) == SEGRT_OK);
    CHECK(fz[0] == 0 && fz[5] == 0);
    int64_t seven = 7, iv[6];
    n = node(SG_OP_CONSTANT_OF_SHAPE, 1, 1);
    attr_scalar_tensor(n, "value", I64, &seven);
    sg_tensor tiv = tensor(I64, iv, 2, 2, 3);
    sg_tensor *iout[1] = {&tiv};
    CHECK(run(n, cin, 1, iout, 1) == SEGRT_OK);
    CHECK(iv[0] == 7 && iv[5] == 7);

    /* Shape with start and end. */
    float dummy[1];
    int64_t sh[2];
    n = node(SG_OP_SHAPE, 1, 1);
    attr_int(n, "start", 1);
    attr_int(n, "end", -1);
    sg_tensor tdm = tensor(F32, dummy, 4, 1, 2, 3, 4), tshp = tensor(I64, sh, 1, 2);
    tdm.dims[0] = 0; /* no data needed for an empty tensor */
    const sg_tensor *shin[1] = {&tdm};
    sg_tensor *shout[1] = {&tshp};
    CHECK(run(n, shin, 1, shout, 1) == SEGRT_OK);
    CHECK(sh[0] == 2 && sh[1] == 3);

    /* Size needs only dims: no data at all. */
    int64_t size = 0;
    n = node(SG_OP_SIZE, 1, 1);
    sg_tensor tnd = tensor(F32, NULL, 2, 3, 4), tsz = tensor(I64, &size, 0);
    const sg_tensor *szin[1] = {&tnd};
    sg_tensor *szout[1] = {&tsz};
    CHECK(run(n, szin, 1, szout, 1) == SEGRT_OK && size == 12);

    /* Einsum matrix product. */
    float ea[6] = {0, 1, 2, 3, 4, 5}, ey[4];
    n = node(SG_OP_EINSUM, 2, 1);
    attr_str(n, "equation", "ij,jk->ik");
    sg_tensor tea = tensor(F32, ea, 2, 2, 3), teb = tensor(F32, ea, 2, 3, 2),
              tey = tensor(F32, ey, 2, 2, 2);
    const sg_tensor *ein[2] = {&tea, &teb};
    sg_tensor *eout[1] = {&tey};
    CHECK(run(n, ein, 2, eout, 1) == SEGRT_OK);
    const float ewant[4] = {10, 13, 28, 40};
    CHECK(close_f(ey, ewant, 4, 0));

    /* A missing required input is an error. */
    const sg_tensor *none[1] = {NULL};
    n = node(SG_OP_RELU, 1, 1);
    CHECK(run(n, none, 1, out, 1) == SEGRT_ERROR_INVALID_MODEL);
}

int main(void)
{
    if (sg_graph_new(&graph) != SEGRT_OK)
        return 1;
    test_table();
    test_conv();
    test_conv_transpose();
    test_pool();
    test_norm();
    test_binary();
    test_where();
    test_slice_pad_gather();
    test_cast();
    test_layout();
    test_reduce_matmul_softmax();
    test_resize();
    test_misc();
    sg_graph_free(graph);
    return sg_test_finish("test_ref");
}
