/* Shape and dtype inference: a representative case of every operator
 * family, the error cases that matter (broadcast, channels, concat,
 * reshape counts, bad axes and attributes) and hostile attribute values. */
#include "graph/infer.h"
#include "testlib.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define F32 SEGRT_DTYPE_FLOAT32
#define I64 SEGRT_DTYPE_INT64
#define BOOL SEGRT_DTYPE_BOOL

/* Shapes are written "N,3,32,32": numbers are fixed, names are symbols,
 * "?" is unknown, "" is a scalar and NULL an unknown rank. */
static sg_shape parse_shape(sg_graph *g, const char *spec)
{
    sg_shape s = sg_shape_unknown();
    if (!spec)
        return s;
    s.rank = 0;
    const char *p = spec;
    while (*p && s.rank < SEGRT_MAX_RANK) {
        char tok[32];
        size_t k = 0;
        while (*p && *p != ',' && k + 1 < sizeof tok)
            tok[k++] = *p++;
        tok[k] = '\0';
        if (*p == ',')
            p++;
        if (strcmp(tok, "?") == 0) {
            s.d[s.rank++] = sg_dim_unknown();
        } else if (isdigit((unsigned char)tok[0])) {
            s.d[s.rank++] = sg_dim_of(strtoll(tok, NULL, 10));
        } else {
            int32_t sym = -1;
            sg_graph_intern_sym(g, tok, &sym);
            sg_dim d = {SG_DIM_UNKNOWN, sym};
            s.d[s.rank++] = d;
        }
    }
    return s;
}

static sg_graph *new_graph(int64_t opset)
{
    sg_graph *g = NULL;
    if (sg_graph_new(&g) != SEGRT_OK)
        abort();
    g->opset = opset;
    return g;
}

/* A graph input of dtype t and shape spec. */
static int32_t in(sg_graph *g, const char *name, sg_dtype t, const char *spec)
{
    int32_t v;
    if (sg_graph_add_value(g, name, &v) != SEGRT_OK || sg_graph_add_input(g, v) != SEGRT_OK)
        abort();
    g->values[v].dtype = t;
    g->values[v].shape = parse_shape(g, spec);
    g->values[v].declared = g->values[v].shape;
    return v;
}

/* A constant of dtype t (int64 or float32 here) and dims, from doubles. */
static int32_t cst(sg_graph *g, const char *name, sg_dtype t, int32_t rank, const int64_t *dims,
                   const double *vals)
{
    int32_t v;
    if (sg_graph_add_value(g, name, &v) != SEGRT_OK)
        abort();
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++)
        numel *= dims[i];
    sg_blob *b;
    if (sg_blob_new((size_t)numel * segrt_dtype_size(t), true, &b) != SEGRT_OK)
        abort();
    for (int64_t i = 0; i < numel; i++)
        sg_dtype_store_f64(t, sg_blob_data(b), i, vals[i]);
    g->values[v].dtype = t;
    g->values[v].shape = sg_shape_of_dims(dims, rank);
    g->values[v].data = b;
    g->values[v].is_initializer = true;
    return v;
}

/* A 1-D int64 constant from int64 values (exact for sentinels). */
static int32_t ints(sg_graph *g, const char *name, int32_t count, const int64_t *vals)
{
    int32_t v;
    if (sg_graph_add_value(g, name, &v) != SEGRT_OK)
        abort();
    sg_blob *b;
    if (sg_blob_new(sizeof(int64_t) * (size_t)(count ? count : 1), true, &b) != SEGRT_OK)
        abort();
    if (count)
        memcpy(sg_blob_data(b), vals, sizeof(int64_t) * (size_t)count);
    int64_t d = count;
    g->values[v].dtype = I64;
    g->values[v].shape = sg_shape_of_dims(&d, 1);
    g->values[v].data = b;
    return v;
}

#define INTS(g, name, ...)                                                                         \
    ints((g), (name), (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),               \
         (int64_t[]){__VA_ARGS__})

static int32_t scalar(sg_graph *g, const char *name, sg_dtype t, double x)
{
    return cst(g, name, t, 0, NULL, &x);
}

/* A node of op over inputs ins (-1 omitted); its n_out outputs are fresh
 * values whose indices go to outs. */
static sg_node *node(sg_graph *g, sg_op op, int32_t n_in, const int32_t *ins, int32_t n_out,
                     int32_t *outs)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%d", sg_op_name(op), g->n_nodes);
    for (int32_t j = 0; j < n_out; j++) {
        char vname[80];
        snprintf(vname, sizeof vname, "%s_out%d", name, j);
        if (sg_graph_add_value(g, vname, &outs[j]) != SEGRT_OK)
            abort();
    }
    sg_node *n;
    if (sg_graph_add_node(g, op, name, n_in, n_out, &n) != SEGRT_OK)
        abort();
    for (int32_t i = 0; i < n_in; i++)
        n->inputs[i] = ins[i];
    for (int32_t j = 0; j < n_out; j++) {
        n->outputs[j] = outs[j];
        g->values[outs[j]].producer = g->n_nodes - 1;
    }
    return n;
}

#define IN(...)                                                                                    \
    (int32_t)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)), (int32_t[]) { __VA_ARGS__ }

static sg_attr *attr_new(sg_node *n, const char *name, sg_attr_kind kind)
{
    n->attrs = realloc(n->attrs, sizeof *n->attrs * (size_t)(n->n_attrs + 1));
    if (!n->attrs)
        abort();
    sg_attr *a = &n->attrs[n->n_attrs++];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    a->kind = kind;
    return a;
}

static void attr_int(sg_node *n, const char *name, int64_t v)
{
    attr_new(n, name, SG_ATTR_INT)->i = v;
}

static void attr_float(sg_node *n, const char *name, float v)
{
    attr_new(n, name, SG_ATTR_FLOAT)->f = v;
}

static void attr_str(sg_node *n, const char *name, const char *v)
{
    attr_new(n, name, SG_ATTR_STRING)->s = strdup(v);
}

static void attr_ints(sg_node *n, const char *name, int32_t count, const int64_t *v)
{
    sg_attr *a = attr_new(n, name, SG_ATTR_INTS);
    a->ints = malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)count);
    a->n = count;
}

#define ATTR_INTS(n, name, ...)                                                                    \
    attr_ints((n), (name), (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),          \
              (int64_t[]){__VA_ARGS__})

static void attr_tensor(sg_node *n, const char *name, sg_dtype t, int32_t rank, const int64_t *dims)
{
    sg_attr *a = attr_new(n, name, SG_ATTR_TENSOR);
    a->t_dtype = t;
    a->t_rank = rank;
    for (int32_t i = 0; i < rank; i++)
        a->t_dims[i] = dims[i];
}

static sg_status infer(sg_graph *g, sg_node *n)
{
    sg_error_clear();
    return sg_infer_node(g, n);
}

static void check_shape(const sg_graph *g, int32_t v, const char *want, int line)
{
    char buf[256];
    sg_shape_format(g, &g->values[v].shape, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, want) == 0, "line %d: `%s` is %s, want %s (last error: %s)", line,
              g->values[v].name, buf, want, sg_last_error());
}

#define SHAPE_IS(g, v, want) check_shape((g), (v), (want), __LINE__)
#define DTYPE_IS(g, v, t)                                                                          \
    CHECK_MSG((g)->values[v].dtype == (t), "line %d: dtype %s", __LINE__,                          \
              segrt_dtype_name((g)->values[v].dtype))
#define FAILS(expr, status)                                                                        \
    do {                                                                                           \
        sg_status s_ = (expr);                                                                     \
        CHECK_MSG(s_ == (status), "got %s: %s", segrt_status_name(s_), sg_last_error());           \
    } while (0)
#define ERR_HAS(text)                                                                              \
    CHECK_MSG(strstr(sg_last_error(), (text)) != NULL, "message: %s", sg_last_error())

/* Convolution and pooling ------------------------------------------------- */

static void test_conv(void)
{
    sg_graph *g = new_graph(17);
    int32_t o[2];
    int32_t x = in(g, "x", F32, "N,3,32,32"), w = in(g, "w", F32, "16,3,3,3");
    sg_node *n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    ATTR_INTS(n, "strides", 2, 2);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx16x16x16");
    DTYPE_IS(g, o[0], F32);

    x = in(g, "x2", F32, "1,8,15,15");
    w = in(g, "w2", F32, "8,2,3,3");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    attr_str(n, "auto_pad", "SAME_UPPER");
    ATTR_INTS(n, "strides", 2, 2);
    ATTR_INTS(n, "dilations", 2, 2);
    attr_int(n, "group", 4);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x8x8x8");

    /* 1x1 convolution over symbolic spatial dims keeps the symbols. */
    x = in(g, "x3", F32, "N,3,H,W");
    w = in(g, "w3", F32, "8,3,1,1");
    int32_t b = in(g, "b3", F32, "8");
    n = node(g, SG_OP_CONV, IN(x, w, b), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx8xHxW");

    x = in(g, "x4", F32, "1,3,10,10");
    w = in(g, "w4", F32, "4,3,3,3");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    attr_str(n, "auto_pad", "VALID");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x4x8x8");

    /* Unknown input rank: the weight gives rank and output channels. */
    x = in(g, "x5", F32, NULL);
    w = in(g, "w5", F32, "8,3,3,3");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "?x8x?x?");

    /* 3-D convolution, as in volumetric segmentation. */
    x = in(g, "x6", F32, "1,1,64,128,128");
    w = in(g, "w6", F32, "32,1,3,3,3");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "pads", 1, 1, 1, 1, 1, 1);
    ATTR_INTS(n, "strides", 2, 2, 2);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x32x32x64x64");

    /* Errors. */
    x = in(g, "xe", F32, "1,16,8,8");
    w = in(g, "we", F32, "32,16,3,3");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    attr_int(n, "group", 2);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("input `xe` has 16 channels but weight `we` expects 32 (16 per group x 2 groups)");

    x = in(g, "xp", F32, "1,3,8,8");
    w = in(g, "wp", F32, "4,3,3,3");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "pads", 1, 1);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "kernel_shape", 5, 5);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    ERR_HAS("kernel_shape");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "strides", 0, 1);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    attr_int(n, "group", 3);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    attr_str(n, "auto_pad", "SAME");
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    b = in(g, "be", F32, "5");
    n = node(g, SG_OP_CONV, IN(x, w, b), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("bias `be`");
    /* A kernel larger than the padded input. */
    x = in(g, "xs", F32, "1,3,2,2");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    /* Mixed dtypes. */
    x = in(g, "xh", SEGRT_DTYPE_FLOAT16, "1,3,8,8");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("float16");
    /* Hostile: a dilation that overflows the kernel's extent. */
    x = in(g, "xd", F32, "1,3,8,8");
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "dilations", (int64_t)1 << 62, 1);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_CONV, IN(x, w), 1, o);
    ATTR_INTS(n, "pads", INT64_MAX, 0, INT64_MAX, 0);
    CHECK(infer(g, n) != SEGRT_OK);
    sg_graph_free(g);
}

static void test_conv_transpose(void)
{
    sg_graph *g = new_graph(17);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "1,16,8,8"), w = in(g, "w", F32, "16,8,4,4");
    sg_node *n = node(g, SG_OP_CONV_TRANSPOSE, IN(x, w), 1, o);
    ATTR_INTS(n, "strides", 2, 2);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x8x16x16");

    w = in(g, "w3", F32, "16,8,3,3");
    n = node(g, SG_OP_CONV_TRANSPOSE, IN(x, w), 1, o);
    ATTR_INTS(n, "strides", 2, 2);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    ATTR_INTS(n, "output_padding", 1, 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x8x16x16");

    int32_t wg = in(g, "wg", F32, "16,4,3,3");
    n = node(g, SG_OP_CONV_TRANSPOSE, IN(x, wg), 1, o);
    attr_int(n, "group", 2);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x8x8x8");

    n = node(g, SG_OP_CONV_TRANSPOSE, IN(x, w), 1, o);
    ATTR_INTS(n, "strides", 2, 2);
    ATTR_INTS(n, "output_shape", 20, 20);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x8x20x20");

    n = node(g, SG_OP_CONV_TRANSPOSE, IN(x, w), 1, o);
    ATTR_INTS(n, "strides", 2, 2);
    attr_str(n, "auto_pad", "SAME_UPPER");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x8x16x16");

    int32_t xs = in(g, "xs", F32, "N,16,H,W");
    n = node(g, SG_OP_CONV_TRANSPOSE, IN(xs, w), 1, o);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx8xHxW");

    int32_t xb = in(g, "xb", F32, "1,8,8,8");
    n = node(g, SG_OP_CONV_TRANSPOSE, IN(xb, w), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("8 channels");
    n = node(g, SG_OP_CONV_TRANSPOSE, IN(x, w), 1, o);
    ATTR_INTS(n, "output_padding", 1);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

static void test_pool(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[2];
    int32_t x = in(g, "x", F32, "1,3,32,32");
    sg_node *n = node(g, SG_OP_MAX_POOL, IN(x), 2, o);
    ATTR_INTS(n, "kernel_shape", 3, 3);
    ATTR_INTS(n, "strides", 2, 2);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x15x15");
    SHAPE_IS(g, o[1], "1x3x15x15");
    DTYPE_IS(g, o[1], I64);

    n = node(g, SG_OP_MAX_POOL, IN(x), 1, o);
    ATTR_INTS(n, "kernel_shape", 3, 3);
    ATTR_INTS(n, "strides", 2, 2);
    attr_int(n, "ceil_mode", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x16x16");

    /* ceil_mode drops a last window that would start in the end padding. */
    int32_t x5 = in(g, "x5", F32, "1,1,5,5");
    n = node(g, SG_OP_MAX_POOL, IN(x5), 1, o);
    ATTR_INTS(n, "kernel_shape", 2, 2);
    ATTR_INTS(n, "strides", 2, 2);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    attr_int(n, "ceil_mode", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x1x3x3");

    int32_t x10 = in(g, "x10", F32, "N,4,10,H");
    n = node(g, SG_OP_MAX_POOL, IN(x10), 1, o);
    ATTR_INTS(n, "kernel_shape", 3, 1);
    ATTR_INTS(n, "dilations", 2, 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx4x6xH");

    int32_t x7 = in(g, "x7", F32, "1,3,7,7");
    n = node(g, SG_OP_AVERAGE_POOL, IN(x7), 1, o);
    ATTR_INTS(n, "kernel_shape", 3, 3);
    ATTR_INTS(n, "strides", 2, 2);
    attr_str(n, "auto_pad", "SAME_LOWER");
    attr_int(n, "count_include_pad", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x4x4");

    n = node(g, SG_OP_AVERAGE_POOL, IN(x7), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    ERR_HAS("kernel_shape");

    int32_t xg = in(g, "xg", F32, "N,64,H,W");
    n = node(g, SG_OP_GLOBAL_AVERAGE_POOL, IN(xg), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx64x1x1");
    n = node(g, SG_OP_GLOBAL_MAX_POOL, IN(x5), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x1x1x1");

    int32_t x2 = in(g, "x2", F32, "3,4");
    n = node(g, SG_OP_MAX_POOL, IN(x2), 1, o);
    ATTR_INTS(n, "kernel_shape", 2);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    sg_graph_free(g);
}

/* Normalisations ---------------------------------------------------------- */

static void test_norm(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[3];
    int32_t x = in(g, "x", F32, "N,3,H,W"), c3 = in(g, "c3", F32, "3"), c4 = in(g, "c4", F32, "4");
    sg_node *n = node(g, SG_OP_BATCH_NORMALIZATION, IN(x, c3, c3, c3, c3), 3, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3xHxW");
    SHAPE_IS(g, o[1], "3");
    n = node(g, SG_OP_BATCH_NORMALIZATION, IN(x, c3, c4, c3, c3), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("bias `c4` has 4 values but input `x` has 3 channels");

    int32_t xi = in(g, "xi", F32, "2,4,8,8");
    n = node(g, SG_OP_INSTANCE_NORMALIZATION, IN(xi, c4, c4), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x4x8x8");

    int32_t x8 = in(g, "x8", F32, "2,8,4,4"), c8 = in(g, "c8", F32, "8");
    n = node(g, SG_OP_GROUP_NORMALIZATION, IN(x8, c4, c4), 1, o);
    attr_int(n, "num_groups", 4);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x8x4x4");
    n = node(g, SG_OP_GROUP_NORMALIZATION, IN(x8, c8, c8), 1, o);
    attr_int(n, "num_groups", 4);
    CHECK(infer(g, n) == SEGRT_OK);
    n = node(g, SG_OP_GROUP_NORMALIZATION, IN(x8, c3, c3), 1, o);
    attr_int(n, "num_groups", 4);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_GROUP_NORMALIZATION, IN(x8, c3, c3), 1, o);
    attr_int(n, "num_groups", 3);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    int32_t xl = in(g, "xl", SEGRT_DTYPE_FLOAT16, "2,5,16"),
            s16 = in(g, "s16", SEGRT_DTYPE_FLOAT16, "16");
    n = node(g, SG_OP_LAYER_NORMALIZATION, IN(xl, s16, s16), 3, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x5x16");
    DTYPE_IS(g, o[0], SEGRT_DTYPE_FLOAT16);
    SHAPE_IS(g, o[1], "2x5x1");
    DTYPE_IS(g, o[2], F32);
    int32_t s2 = in(g, "s2", SEGRT_DTYPE_FLOAT16, "5,16");
    n = node(g, SG_OP_LAYER_NORMALIZATION, IN(xl, s2), 2, o);
    attr_int(n, "axis", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[1], "2x1x1");
    int32_t s8 = in(g, "s8", SEGRT_DTYPE_FLOAT16, "8");
    n = node(g, SG_OP_LAYER_NORMALIZATION, IN(xl, s8), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_LAYER_NORMALIZATION, IN(xl, s16), 1, o);
    attr_int(n, "axis", 3);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

/* Elementwise ------------------------------------------------------------- */

static void test_elementwise(void)
{
    sg_graph *g = new_graph(17);
    int32_t o[1];
    int32_t a = in(g, "a", F32, "N,3,1,W"), b = in(g, "b", F32, "3,5,1");
    sg_node *n = node(g, SG_OP_ADD, IN(a, b), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3x5xW");

    int32_t p = in(g, "p", F32, "2,3"), q = in(g, "q", F32, "4,3");
    n = node(g, SG_OP_MUL, IN(p, q), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("`p` (2x3) and `q` (4x3)");

    int32_t qi = in(g, "qi", I64, "2,3");
    n = node(g, SG_OP_SUB, IN(p, qi), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("float32");
    ERR_HAS("int64");

    n = node(g, SG_OP_POW, IN(p, qi), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    DTYPE_IS(g, o[0], F32);

    n = node(g, SG_OP_GREATER, IN(a, b), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    DTYPE_IS(g, o[0], BOOL);
    SHAPE_IS(g, o[0], "Nx3x5xW");

    int32_t m = in(g, "m", BOOL, "N,1"), m2 = in(g, "m2", BOOL, "4");
    n = node(g, SG_OP_AND, IN(m, m2), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx4");
    n = node(g, SG_OP_OR, IN(m, p), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_NOT, IN(m), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    DTYPE_IS(g, o[0], BOOL);
    n = node(g, SG_OP_RELU, IN(m), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t x14 = in(g, "x14", I64, "1,4"), y4 = in(g, "y4", I64, "4");
    n = node(g, SG_OP_WHERE, IN(m, x14, y4), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx4");
    DTYPE_IS(g, o[0], I64);
    n = node(g, SG_OP_WHERE, IN(p, x14, y4), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_WHERE, IN(m, x14, p), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t s1 = in(g, "s1", F32, "2,1"), s2 = in(g, "s2", F32, "1,3"), s3 = in(g, "s3", F32, "3");
    n = node(g, SG_OP_SUM, IN(s1, s2, s3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x3");
    int32_t s4 = in(g, "s4", F32, "4");
    n = node(g, SG_OP_MAX, IN(s1, s2, s4), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("`s4`");

    int32_t x = in(g, "x", F32, "N,16,H,W"), sl = in(g, "sl", F32, "16,1,1"),
            sb = in(g, "sb", F32, "8,1,1");
    n = node(g, SG_OP_PRELU, IN(x, sl), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx16xHxW");
    n = node(g, SG_OP_PRELU, IN(x, sb), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t lo = scalar(g, "lo", F32, 0), hi = in(g, "hi", F32, "2");
    n = node(g, SG_OP_CLIP, IN(x, lo, -1), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx16xHxW");
    n = node(g, SG_OP_CLIP, IN(x, lo, hi), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    n = node(g, SG_OP_SOFTMAX, IN(x), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx16xHxW");
    n = node(g, SG_OP_LOG_SOFTMAX, IN(x), 1, o);
    attr_int(n, "axis", 4);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    n = node(g, SG_OP_GELU, IN(x), 1, o);
    attr_str(n, "approximate", "tanh");
    CHECK(infer(g, n) == SEGRT_OK);
    n = node(g, SG_OP_GELU, IN(x), 1, o);
    attr_str(n, "approximate", "erf");
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    int32_t u = in(g, "u", F32, NULL);
    n = node(g, SG_OP_SIGMOID, IN(u), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "?");
    sg_graph_free(g);
}

/* Layout ------------------------------------------------------------------ */

static void test_concat_split(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[3];
    int32_t a = in(g, "a", F32, "N,3,H,W"), b = in(g, "b", F32, "N,5,H,W");
    sg_node *n = node(g, SG_OP_CONCAT, IN(a, b, a), 1, o);
    attr_int(n, "axis", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx11xHxW");

    int32_t c = in(g, "c", F32, "1,3,4,4"), d = in(g, "d", F32, "1,3,5,4");
    n = node(g, SG_OP_CONCAT, IN(c, d), 1, o);
    attr_int(n, "axis", 1);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("`c` (1x3x4x4) and `d` (1x3x5x4)");
    n = node(g, SG_OP_CONCAT, IN(c, d), 1, o);
    attr_int(n, "axis", -2);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x9x4");
    n = node(g, SG_OP_CONCAT, IN(c, d), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_CONCAT, IN(c, d), 1, o);
    attr_int(n, "axis", 4);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    int32_t e = in(g, "e", F32, "3,4,4");
    n = node(g, SG_OP_CONCAT, IN(c, e), 1, o);
    attr_int(n, "axis", 0);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t x = in(g, "x", F32, "N,5"), sp = INTS(g, "sp", 2, 3);
    n = node(g, SG_OP_SPLIT, IN(x, sp), 2, o);
    attr_int(n, "axis", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx2");
    SHAPE_IS(g, o[1], "Nx3");
    int32_t x10 = in(g, "x10", F32, "10,N");
    n = node(g, SG_OP_SPLIT, IN(x10), 3, o);
    attr_int(n, "num_outputs", 3);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4xN");
    SHAPE_IS(g, o[2], "2xN");
    n = node(g, SG_OP_SPLIT, IN(x10), 2, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[1], "5xN");
    n = node(g, SG_OP_SPLIT, IN(x10), 3, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_SPLIT, IN(x10, sp), 2, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("sum to 5");
    sg_graph_free(g);
}

static void test_slice_pad(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "10,20,30");
    int32_t st = INTS(g, "st", 1, -1), en = INTS(g, "en", INT64_MAX, INT64_MIN);
    int32_t ax = INTS(g, "ax", 0, 2), sp = INTS(g, "sp", 2, -1);
    sg_node *n = node(g, SG_OP_SLICE, IN(x, st, en, ax, sp), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "5x20x30");

    int32_t st2 = INTS(g, "st2", -3), en2 = INTS(g, "en2", -1), ax2 = INTS(g, "ax2", 1);
    n = node(g, SG_OP_SLICE, IN(x, st2, en2, ax2), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "10x2x30");

    int32_t st3 = INTS(g, "st3", 5), en3 = INTS(g, "en3", 2);
    n = node(g, SG_OP_SLICE, IN(x, st3, en3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "0x20x30");

    /* Backwards with a step of -3 from the end: 29, 26, ..., 2. */
    int32_t st4 = INTS(g, "st4", 100), en4 = INTS(g, "en4", -100), sp4 = INTS(g, "sp4", -3);
    int32_t ax4 = INTS(g, "ax4", -1);
    n = node(g, SG_OP_SLICE, IN(x, st4, en4, ax4, sp4), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "10x20x10");

    int32_t xs = in(g, "xs", F32, "N,8"), z = INTS(g, "z", 0), big = INTS(g, "big", INT64_MAX);
    n = node(g, SG_OP_SLICE, IN(xs, z, big, z), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx8");

    int32_t dyn = in(g, "dyn", I64, "1");
    n = node(g, SG_OP_SLICE, IN(x, dyn, big, ax2), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "10x?x30");

    int32_t zero = INTS(g, "zero", 0);
    n = node(g, SG_OP_SLICE, IN(x, z, big, z, zero), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    int32_t ax9 = INTS(g, "ax9", 3);
    n = node(g, SG_OP_SLICE, IN(x, z, big, ax9), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    int32_t nine = INTS(g, "nine", 0, 0, 0, 0, 0, 0, 0, 0, 0);
    n = node(g, SG_OP_SLICE, IN(x, nine, nine), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    int32_t xp = in(g, "xp", F32, "1,3,10,10");
    int32_t pads = INTS(g, "pads", 0, 0, 1, 2, 0, 0, 3, 4);
    n = node(g, SG_OP_PAD, IN(xp, pads), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x14x16");
    int32_t pads2 = INTS(g, "pads2", 1, -1, 1, -1), axes = INTS(g, "axes", 2, 3);
    int32_t cv = scalar(g, "cv", F32, 0);
    n = node(g, SG_OP_PAD, IN(xp, pads2, cv, axes), 1, o);
    attr_str(n, "mode", "reflect");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x12x8");
    n = node(g, SG_OP_PAD, IN(xp, pads2), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_PAD, IN(xp, pads), 1, o);
    attr_str(n, "mode", "mirror");
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    int32_t crop = INTS(g, "crop", 0, 0, -11, 0, 0, 0, 0, 0);
    n = node(g, SG_OP_PAD, IN(xp, crop), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    int32_t xps = in(g, "xps", F32, "N,3,H,W");
    n = node(g, SG_OP_PAD, IN(xps, pads), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3x?x?");
    sg_graph_free(g);
}

static void test_reshape(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "N,3,4"), sh = INTS(g, "sh", 0, -1);
    sg_node *n = node(g, SG_OP_RESHAPE, IN(x, sh), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx12");

    int32_t y = in(g, "y", F32, "2,3,4"), s2 = INTS(g, "s2", 4, -1);
    n = node(g, SG_OP_RESHAPE, IN(y, s2), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4x6");
    int32_t s3 = INTS(g, "s3", 0, 0, -1);
    n = node(g, SG_OP_RESHAPE, IN(y, s3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x3x4");

    int32_t s4 = INTS(g, "s4", 5, 5);
    n = node(g, SG_OP_RESHAPE, IN(y, s4), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("24 elements vs 25");
    int32_t s5 = INTS(g, "s5", 5, -1);
    n = node(g, SG_OP_RESHAPE, IN(y, s5), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    int32_t s6 = INTS(g, "s6", -1, -1);
    n = node(g, SG_OP_RESHAPE, IN(y, s6), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    int32_t s7 = INTS(g, "s7", 0, 24);
    n = node(g, SG_OP_RESHAPE, IN(y, s7), 1, o);
    attr_int(n, "allowzero", 1);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    int32_t s8 = INTS(g, "s8", 1, 1, 1, 1, 1, 1, 1, 1, 24);
    n = node(g, SG_OP_RESHAPE, IN(y, s8), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_UNSUPPORTED);

    /* A computed shape: only the rank is known. */
    int32_t dyn = in(g, "dyn", I64, "3");
    n = node(g, SG_OP_RESHAPE, IN(y, dyn), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "?x?x?");
    /* Symbolic element count: no check possible, -1 stays unknown. */
    int32_t z = in(g, "z", F32, "N,6"), s9 = INTS(g, "s9", 3, -1);
    n = node(g, SG_OP_RESHAPE, IN(z, s9), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "3x?");
    sg_graph_free(g);
}

static void test_transpose_flatten_squeeze(void)
{
    sg_graph *g = new_graph(13);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "N,3,H,W");
    sg_node *n = node(g, SG_OP_TRANSPOSE, IN(x), 1, o);
    ATTR_INTS(n, "perm", 0, 2, 3, 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "NxHxWx3");
    n = node(g, SG_OP_TRANSPOSE, IN(x), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "WxHx3xN");
    n = node(g, SG_OP_TRANSPOSE, IN(x), 1, o);
    ATTR_INTS(n, "perm", 0, 0, 1, 2);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_TRANSPOSE, IN(x), 1, o);
    ATTR_INTS(n, "perm", 0, 1, 2, INT64_MAX);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_TRANSPOSE, IN(x), 1, o);
    ATTR_INTS(n, "perm", 1, 0);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    int32_t y = in(g, "y", F32, "2,3,4,5");
    n = node(g, SG_OP_FLATTEN, IN(x), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx?");
    n = node(g, SG_OP_FLATTEN, IN(y), 1, o);
    attr_int(n, "axis", 0);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x120");
    n = node(g, SG_OP_FLATTEN, IN(y), 1, o);
    attr_int(n, "axis", -1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "24x5");
    n = node(g, SG_OP_FLATTEN, IN(y), 1, o);
    attr_int(n, "axis", 4);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "120x1");
    n = node(g, SG_OP_FLATTEN, IN(y), 1, o);
    attr_int(n, "axis", 5);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    int32_t s = in(g, "s", F32, "1,3,1,5"), a02 = INTS(g, "a02", 0, 2), a1 = INTS(g, "a1", 1);
    n = node(g, SG_OP_SQUEEZE, IN(s, a02), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "3x5");
    n = node(g, SG_OP_SQUEEZE, IN(s), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "3x5");
    n = node(g, SG_OP_SQUEEZE, IN(s, a1), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("its size is 3");

    int32_t u = in(g, "u", F32, "3,N"), a0m = INTS(g, "a0m", 0, -1);
    n = node(g, SG_OP_UNSQUEEZE, IN(u, a0m), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3xNx1");
    int32_t r8 = in(g, "r8", F32, "1,1,1,1,1,1,1,1"), a0 = INTS(g, "a0", 0);
    n = node(g, SG_OP_UNSQUEEZE, IN(r8, a0), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_UNSUPPORTED);
    int32_t a00 = INTS(g, "a00", 0, 0);
    n = node(g, SG_OP_UNSQUEEZE, IN(u, a00), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

static void test_expand_tile_gather(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "3,1"), sh = INTS(g, "sh", 2, 1, 4);
    sg_node *n = node(g, SG_OP_EXPAND, IN(x, sh), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x3x4");
    int32_t xn = in(g, "xn", F32, "N,1"), sh2 = INTS(g, "sh2", 1, 5);
    n = node(g, SG_OP_EXPAND, IN(xn, sh2), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx5");
    int32_t x32 = in(g, "x32", F32, "3,2"), sh3 = INTS(g, "sh3", 4);
    n = node(g, SG_OP_EXPAND, IN(x32, sh3), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t t = in(g, "t", F32, "2,N"), rep = INTS(g, "rep", 3, 1);
    n = node(g, SG_OP_TILE, IN(t, rep), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "6xN");
    int32_t rep3 = INTS(g, "rep3", 1, 1, 1);
    n = node(g, SG_OP_TILE, IN(t, rep3), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    int32_t huge = in(g, "huge", F32, "1099511627776"), reph = INTS(g, "reph", (int64_t)1 << 40);
    n = node(g, SG_OP_TILE, IN(huge, reph), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t d = in(g, "d", F32, "10,20,30"), idx = in(g, "idx", I64, "N,4");
    n = node(g, SG_OP_GATHER, IN(d, idx), 1, o);
    attr_int(n, "axis", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "10xNx4x30");
    int32_t i0 = scalar(g, "i0", I64, 3);
    n = node(g, SG_OP_GATHER, IN(d, i0), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "20x30");
    n = node(g, SG_OP_GATHER, IN(d, x), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t data = in(g, "data", F32, "4,5,6"), ind = in(g, "ind", I64, "2,1");
    int32_t upd = in(g, "upd", F32, "2,5,6"), bad = in(g, "bad", F32, "2,5,7");
    n = node(g, SG_OP_SCATTER_ND, IN(data, ind, upd), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4x5x6");
    n = node(g, SG_OP_SCATTER_ND, IN(data, ind, bad), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t ds = in(g, "ds", F32, "1,16,8,8");
    n = node(g, SG_OP_DEPTH_TO_SPACE, IN(ds), 1, o);
    attr_int(n, "blocksize", 2);
    attr_str(n, "mode", "CRD");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x4x16x16");
    int32_t d6 = in(g, "d6", F32, "1,6,8,8");
    n = node(g, SG_OP_DEPTH_TO_SPACE, IN(d6), 1, o);
    attr_int(n, "blocksize", 2);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_SPACE_TO_DEPTH, IN(ds), 1, o);
    attr_int(n, "blocksize", 2);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x64x4x4");
    n = node(g, SG_OP_SPACE_TO_DEPTH, IN(ds), 1, o);
    attr_int(n, "blocksize", 0);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

/* Shapes, types and constants -------------------------------------------- */

static void test_misc(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[2];
    int32_t x = in(g, "x", F32, "N,3,H,W");
    sg_node *n = node(g, SG_OP_CAST, IN(x), 1, o);
    attr_int(n, "to", SEGRT_DTYPE_FLOAT16);
    CHECK(infer(g, n) == SEGRT_OK);
    DTYPE_IS(g, o[0], SEGRT_DTYPE_FLOAT16);
    SHAPE_IS(g, o[0], "Nx3xHxW");
    n = node(g, SG_OP_CAST, IN(x), 1, o);
    attr_int(n, "to", 8); /* string */
    FAILS(infer(g, n), SEGRT_ERROR_UNSUPPORTED);
    n = node(g, SG_OP_CAST, IN(x), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    n = node(g, SG_OP_SHAPE, IN(x), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4");
    DTYPE_IS(g, o[0], I64);
    n = node(g, SG_OP_SHAPE, IN(x), 1, o);
    attr_int(n, "start", 1);
    attr_int(n, "end", -1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2");
    n = node(g, SG_OP_SHAPE, IN(x), 1, o);
    attr_int(n, "start", -10);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4");
    n = node(g, SG_OP_SIZE, IN(x), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "scalar");

    int32_t sh = INTS(g, "sh", 2, 3);
    n = node(g, SG_OP_CONSTANT_OF_SHAPE, IN(sh), 1, o);
    attr_tensor(n, "value", I64, 1, (int64_t[]){1});
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x3");
    DTYPE_IS(g, o[0], I64);
    n = node(g, SG_OP_CONSTANT_OF_SHAPE, IN(sh), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    DTYPE_IS(g, o[0], F32);
    int32_t neg = INTS(g, "neg", 2, -3);
    n = node(g, SG_OP_CONSTANT_OF_SHAPE, IN(neg), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t i0 = scalar(g, "i0", I64, 0), i10 = scalar(g, "i10", I64, 10),
            i3 = scalar(g, "i3", I64, 3);
    int32_t im3 = scalar(g, "im3", I64, -3);
    n = node(g, SG_OP_RANGE, IN(i0, i10, i3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4");
    DTYPE_IS(g, o[0], I64);
    n = node(g, SG_OP_RANGE, IN(i10, i0, im3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "4");
    n = node(g, SG_OP_RANGE, IN(i0, i10, im3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "0");
    int32_t f0 = scalar(g, "f0", F32, 0), f1 = scalar(g, "f1", F32, 1),
            fd = scalar(g, "fd", F32, 0.1);
    n = node(g, SG_OP_RANGE, IN(f0, f1, fd), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "10");
    n = node(g, SG_OP_RANGE, IN(f0, i10, fd), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    int32_t dyn = in(g, "dyn", I64, "");
    n = node(g, SG_OP_RANGE, IN(i0, dyn, i3), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "?");
    int32_t imax = scalar(g, "imax", I64, 9.2e18), imin = scalar(g, "imin", I64, -9.2e18);
    int32_t i1 = scalar(g, "i1", I64, 1);
    n = node(g, SG_OP_RANGE, IN(imin, imax, i1), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    n = node(g, SG_OP_CONSTANT, 0, NULL, 1, o);
    attr_tensor(n, "value", F32, 2, (int64_t[]){2, 5});
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x5");
    n = node(g, SG_OP_CONSTANT, 0, NULL, 1, o);
    ATTR_INTS(n, "value_ints", 1, 2, 3);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "3");
    DTYPE_IS(g, o[0], I64);
    n = node(g, SG_OP_CONSTANT, 0, NULL, 1, o);
    attr_float(n, "value_float", 1.5f);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "scalar");
    n = node(g, SG_OP_CONSTANT, 0, NULL, 1, o);
    attr_str(n, "value_string", "hello");
    FAILS(infer(g, n), SEGRT_ERROR_UNSUPPORTED);

    n = node(g, SG_OP_IDENTITY, IN(x), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3xHxW");
    int32_t ratio = scalar(g, "ratio", F32, 0.5);
    n = node(g, SG_OP_DROPOUT, IN(x, ratio), 2, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[1], "Nx3xHxW");
    DTYPE_IS(g, o[1], BOOL);
    n = node(g, SG_OP_DROPOUT, IN(x, ratio, ratio), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    sg_graph_free(g);
}

/* Reductions -------------------------------------------------------------- */

static void test_reduce(void)
{
    sg_graph *g = new_graph(17);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "N,3,H,W");
    sg_node *n = node(g, SG_OP_REDUCE_MEAN, IN(x), 1, o);
    ATTR_INTS(n, "axes", 1);
    attr_int(n, "keepdims", 0);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "NxHxW");
    int32_t am1 = INTS(g, "am1", -1);
    n = node(g, SG_OP_REDUCE_SUM, IN(x, am1), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3xHx1");
    n = node(g, SG_OP_REDUCE_MEAN, IN(x), 1, o);
    ATTR_INTS(n, "axes", 1, -3);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_REDUCE_MIN, IN(x), 1, o);
    ATTR_INTS(n, "axes", 4);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);

    g->opset = 18;
    n = node(g, SG_OP_REDUCE_MAX, IN(x), 1, o);
    attr_int(n, "keepdims", 0);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "scalar");
    int32_t none = ints(g, "none", 0, NULL);
    n = node(g, SG_OP_REDUCE_SUM, IN(x, none), 1, o);
    attr_int(n, "noop_with_empty_axes", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3xHxW");
    int32_t a23 = INTS(g, "a23", 2, 3);
    n = node(g, SG_OP_REDUCE_MEAN, IN(x, a23), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3x1x1");
    int32_t dyn = in(g, "dyn", I64, "2");
    n = node(g, SG_OP_REDUCE_MEAN, IN(x, dyn), 1, o);
    attr_int(n, "keepdims", 0);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "?x?");

    n = node(g, SG_OP_ARG_MAX, IN(x), 1, o);
    attr_int(n, "axis", 1);
    attr_int(n, "keepdims", 0);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "NxHxW");
    DTYPE_IS(g, o[0], I64);
    n = node(g, SG_OP_ARG_MAX, IN(x), 1, o);
    attr_int(n, "axis", -5);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

/* Matrix products --------------------------------------------------------- */

static void test_matmul(void)
{
    sg_graph *g = new_graph(18);
    int32_t o[1];
    int32_t a = in(g, "a", F32, "B,4,5"), b = in(g, "b", F32, "5,6");
    sg_node *n = node(g, SG_OP_MAT_MUL, IN(a, b), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Bx4x6");
    int32_t v = in(g, "v", F32, "5");
    n = node(g, SG_OP_MAT_MUL, IN(v, b), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "6");
    n = node(g, SG_OP_MAT_MUL, IN(v, v), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "scalar");
    int32_t c = in(g, "c", F32, "2,1,3,4"), d = in(g, "d", F32, "5,4,7");
    n = node(g, SG_OP_MAT_MUL, IN(c, d), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x5x3x7");
    n = node(g, SG_OP_MAT_MUL, IN(a, d), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    ERR_HAS("5 columns");
    int32_t e = in(g, "e", F32, "3,5,6");
    n = node(g, SG_OP_MAT_MUL, IN(c, e), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t ga = in(g, "ga", F32, "M,4"), gb = in(g, "gb", F32, "6,4"), gc = in(g, "gc", F32, "6");
    int32_t gbad = in(g, "gbad", F32, "5");
    n = node(g, SG_OP_GEMM, IN(ga, gb, gc), 1, o);
    attr_int(n, "transB", 1);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Mx6");
    n = node(g, SG_OP_GEMM, IN(ga, gb, gbad), 1, o);
    attr_int(n, "transB", 1);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_GEMM, IN(ga, gb), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);

    int32_t p = in(g, "p", F32, "2,3,4"), q = in(g, "q", F32, "2,4,5");
    n = node(g, SG_OP_EINSUM, IN(p, q), 1, o);
    attr_str(n, "equation", "bij,bjk->bik");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "2x3x5");
    int32_t m1 = in(g, "m1", F32, "3,4"), m2 = in(g, "m2", F32, "4,5");
    n = node(g, SG_OP_EINSUM, IN(m1, m2), 1, o);
    attr_str(n, "equation", "ij,jk");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "3x5");
    int32_t el = in(g, "el", F32, "N,2,3,4");
    n = node(g, SG_OP_EINSUM, IN(el, m2), 1, o);
    attr_str(n, "equation", "...ij, jk -> ...ik");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx2x3x5");
    n = node(g, SG_OP_EINSUM, IN(el), 1, o);
    attr_str(n, "equation", "nchw->nhwc");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3x4x2");
    int32_t sq = in(g, "sq", F32, "3,3");
    n = node(g, SG_OP_EINSUM, IN(sq), 1, o);
    attr_str(n, "equation", "ii->i");
    CHECK(infer(g, n) == SEGRT_OK); /* a diagonal */
    SHAPE_IS(g, o[0], "3");
    n = node(g, SG_OP_EINSUM, IN(m1), 1, o);
    attr_str(n, "equation", "ii->i");
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE); /* a diagonal of a non-square matrix */
    n = node(g, SG_OP_EINSUM, IN(m1, m1), 1, o);
    attr_str(n, "equation", "ij,jk->ik");
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_EINSUM, IN(m1), 1, o);
    attr_str(n, "equation", "ijk->i");
    FAILS(infer(g, n), SEGRT_ERROR_SHAPE);
    n = node(g, SG_OP_EINSUM, IN(m1), 1, o);
    attr_str(n, "equation", "ij->iz");
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_EINSUM, IN(m1), 1, o);
    attr_str(n, "equation", "ij,jk->ik");
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

/* Resampling -------------------------------------------------------------- */

static void test_resize(void)
{
    sg_graph *g = new_graph(19);
    int32_t o[1];
    int32_t x = in(g, "x", F32, "N,3,10,10");
    int64_t four = 4;
    int32_t sc = cst(g, "sc", F32, 1, &four, (double[]){1, 1, 2, 0.7});
    sg_node *n = node(g, SG_OP_RESIZE, IN(x, -1, sc), 1, o);
    attr_str(n, "mode", "linear");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3x20x7");

    int32_t roi = ints(g, "roi", 0, NULL), none = cst(g, "none", F32, 1, (int64_t[]){0}, NULL);
    int32_t sizes = INTS(g, "sizes", 1, 3, 64, 64);
    n = node(g, SG_OP_RESIZE, IN(x, roi, none, sizes), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x64x64");

    int32_t y = in(g, "y", F32, "1,3,100,200"), s2 = INTS(g, "s2", 64, 32);
    n = node(g, SG_OP_RESIZE, IN(y, -1, -1, s2), 1, o);
    ATTR_INTS(n, "axes", 2, 3);
    attr_str(n, "keep_aspect_ratio_policy", "not_larger");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x16x32");
    n = node(g, SG_OP_RESIZE, IN(y, -1, -1, s2), 1, o);
    ATTR_INTS(n, "axes", 2, 3);
    attr_str(n, "keep_aspect_ratio_policy", "not_smaller");
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "1x3x64x128");

    n = node(g, SG_OP_RESIZE, IN(x, -1, sc, sizes), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_RESIZE, IN(x, -1, -1, s2), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    n = node(g, SG_OP_RESIZE, IN(x, -1, sc), 1, o);
    attr_str(n, "mode", "bicubic");
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    int32_t dyn = in(g, "dyn", F32, "4");
    n = node(g, SG_OP_RESIZE, IN(x, -1, dyn), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "?x?x?x?");

    int32_t up = cst(g, "up", F32, 1, &four, (double[]){1, 1, 2, 2});
    n = node(g, SG_OP_UPSAMPLE, IN(x, up), 1, o);
    CHECK(infer(g, n) == SEGRT_OK);
    SHAPE_IS(g, o[0], "Nx3x20x20");
    int32_t zero = cst(g, "zero", F32, 1, &four, (double[]){1, 1, 0, 2});
    n = node(g, SG_OP_UPSAMPLE, IN(x, zero), 1, o);
    FAILS(infer(g, n), SEGRT_ERROR_INVALID_MODEL);
    sg_graph_free(g);
}

/* A whole graph through sg_graph_infer, with a declared output. ----------- */

static void test_graph(void)
{
    sg_graph *g = new_graph(17);
    int32_t x = in(g, "image", F32, "N,1,H,W");
    int32_t w = in(g, "w", F32, "8,1,3,3"), fw = in(g, "fw", F32, "10,8"),
            fb = in(g, "fb", F32, "10");
    int32_t c[1], r[1], p[1], f[1], y[1];
    sg_node *n = node(g, SG_OP_CONV, IN(x, w), 1, c);
    ATTR_INTS(n, "pads", 1, 1, 1, 1);
    node(g, SG_OP_RELU, IN(c[0]), 1, r);
    node(g, SG_OP_GLOBAL_AVERAGE_POOL, IN(r[0]), 1, p);
    node(g, SG_OP_FLATTEN, IN(p[0]), 1, f);
    n = node(g, SG_OP_GEMM, IN(f[0], fw, fb), 1, y);
    attr_int(n, "transB", 1);
    sg_graph_add_output(g, y[0]);
    g->values[y[0]].dtype = F32;
    g->values[y[0]].declared = parse_shape(g, "N,10");
    sg_error_clear();
    CHECK(sg_graph_infer(g) == SEGRT_OK);
    SHAPE_IS(g, c[0], "Nx8xHxW");
    SHAPE_IS(g, f[0], "Nx8");
    SHAPE_IS(g, y[0], "Nx10");

    /* A declared output that contradicts the computation. */
    g->values[y[0]].declared = parse_shape(g, "N,12");
    FAILS(sg_graph_infer(g), SEGRT_ERROR_SHAPE);
    /* A declared symbol that the computation gives another size is a
     * wrong name (an exporter's), not a contradiction: the computed size
     * stands once N is bound. */
    g->values[y[0]].declared = parse_shape(g, "N,N");
    g->sym_size[g->values[x].shape.d[0].sym] = 2;
    g->values[x].shape.d[0].size = 2;
    CHECK(sg_graph_infer(g) == SEGRT_OK);
    SHAPE_IS(g, y[0], "2x10");
    sg_graph_free(g);
}

int main(void)
{
    test_conv();
    test_conv_transpose();
    test_pool();
    test_norm();
    test_elementwise();
    test_concat_split();
    test_slice_pad();
    test_reshape();
    test_transpose_flatten_squeeze();
    test_expand_tile_gather();
    test_misc();
    test_reduce();
    test_matmul();
    test_resize();
    test_graph();
    return sg_test_finish("test_infer");
}
