/* ONNX export: every test model, as loaded and as optimized (with and
 * without bound shapes), exported and loaded back through the ONNX loader
 * must give the same graph (inputs, outputs, nodes, attributes, constants
 * bit for bit) and bit-identical results on the CPU engine; a hand-built
 * graph covers every attribute kind, omitted inputs and outputs, dead
 * nodes and the errors. */
#include "engine/api_internal.h"
#include "graph/infer.h"
#include "onnx.pb-c.h"
#include "onnx/onnx_export.h"
#include "segrt.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define F32 SEGRT_DTYPE_FLOAT32
#define I64 SEGRT_DTYPE_INT64

/* ------------------------------------------------------------------------ */
/* Graph comparison                                                          */

static const char *sym_name(const sg_graph *g, const sg_dim *d)
{
    return d->size < 0 && d->sym >= 0 ? g->syms[d->sym] : NULL;
}

static bool shape_eq(const sg_graph *ga, const sg_shape *a, const sg_graph *gb, const sg_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int32_t i = 0; i < a->rank; i++) {
        if (a->d[i].size != b->d[i].size)
            return false;
        const char *sa = sym_name(ga, &a->d[i]), *sb = sym_name(gb, &b->d[i]);
        if ((sa == NULL) != (sb == NULL) || (sa && strcmp(sa, sb) != 0))
            return false;
    }
    return true;
}

static bool blob_eq(const sg_blob *a, const sg_blob *b)
{
    size_t na = a ? sg_blob_size(a) : 0, nb = b ? sg_blob_size(b) : 0;
    return na == nb && (na == 0 || memcmp(sg_blob_data(a), sg_blob_data(b), na) == 0);
}

static bool attr_eq(const sg_attr *a, const sg_attr *b)
{
    if (strcmp(a->name, b->name) != 0 || a->kind != b->kind)
        return false;
    switch (a->kind) {
    case SG_ATTR_INT:
        return a->i == b->i;
    case SG_ATTR_FLOAT:
        return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case SG_ATTR_STRING:
        return strcmp(a->s ? a->s : "", b->s ? b->s : "") == 0;
    case SG_ATTR_INTS:
        return a->n == b->n && (a->n == 0 || memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n) == 0);
    case SG_ATTR_FLOATS:
        return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->n) == 0);
    case SG_ATTR_STRINGS:
        if (a->n != b->n)
            return false;
        for (int32_t i = 0; i < a->n; i++)
            if (strcmp(a->strings[i] ? a->strings[i] : "", b->strings[i] ? b->strings[i] : "") != 0)
                return false;
        return true;
    case SG_ATTR_TENSOR:
        return a->t_dtype == b->t_dtype && a->t_rank == b->t_rank &&
               memcmp(a->t_dims, b->t_dims, sizeof(int64_t) * (size_t)a->t_rank) == 0 &&
               blob_eq(a->t_data, b->t_data);
    case SG_ATTR_GRAPH: /* never exported: If is folded before a plan is written */
        return false;
    }
    return false;
}

static const char *vname(const sg_graph *g, int32_t v) { return v >= 0 ? g->values[v].name : ""; }

static int32_t find_value(const sg_graph *g, const char *name)
{
    for (int32_t v = 0; v < g->n_values; v++)
        if (strcmp(g->values[v].name, name) == 0)
            return v;
    return -1;
}

static bool listed(const int32_t *list, int32_t n, int32_t v)
{
    for (int32_t i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}

/* The constants an export of a must hold: data, not a graph input, not
 * computed by a live node, and read by a live node or a graph output. */
static bool expect_initializer(const sg_graph *a, int32_t v)
{
    if (!a->values[v].data || listed(a->inputs, a->n_inputs, v))
        return false;
    bool read = listed(a->outputs, a->n_outputs, v);
    for (int32_t i = 0; i < a->n_nodes; i++) {
        const sg_node *n = &a->nodes[i];
        if (n->dead)
            continue;
        if (listed(n->outputs, n->n_outputs, v))
            return false;
        read |= listed(n->inputs, n->n_inputs, v);
    }
    return read;
}

/* b is a loaded back from its export. */
static void compare_graphs(const char *what, const sg_graph *a, const sg_graph *b)
{
    CHECK_MSG(a->opset == b->opset, "%s: opset %lld vs %lld", what, (long long)a->opset, (long long)b->opset);
    CHECK_MSG(a->ir_version == b->ir_version, "%s: ir_version", what);
    /* A graph without a producer is stamped as segrt's. */
    bool stamped = !a->producer_name[0];
    CHECK_MSG(strcmp(stamped ? "segrt" : a->producer_name, b->producer_name) == 0 &&
                  strcmp(stamped ? segrt_version() : a->producer_version, b->producer_version) == 0,
              "%s: producer", what);
    CHECK_MSG(a->n_meta == b->n_meta, "%s: %d vs %d metadata entries", what, a->n_meta, b->n_meta);
    for (int32_t i = 0; i < a->n_meta && i < b->n_meta; i++)
        CHECK_MSG(strcmp(a->meta[i].key, b->meta[i].key) == 0 &&
                      strcmp(a->meta[i].value, b->meta[i].value) == 0,
                  "%s: metadata %d", what, i);

    CHECK_MSG(a->n_inputs == b->n_inputs, "%s: %d vs %d inputs", what, a->n_inputs, b->n_inputs);
    for (int32_t i = 0; i < a->n_inputs && i < b->n_inputs; i++) {
        const sg_value *va = &a->values[a->inputs[i]], *vb = &b->values[b->inputs[i]];
        CHECK_MSG(strcmp(va->name, vb->name) == 0 && va->dtype == vb->dtype, "%s: input %d is `%s`, was `%s`",
                  what, i, vb->name, va->name);
        CHECK_MSG(shape_eq(a, &va->declared, b, &vb->declared), "%s: input `%s`: declared shape", what,
                  va->name);
        CHECK_MSG(!vb->data && !vb->is_initializer, "%s: input `%s` became a constant", what, vb->name);
    }
    CHECK_MSG(a->n_outputs == b->n_outputs, "%s: %d vs %d outputs", what, a->n_outputs, b->n_outputs);
    for (int32_t i = 0; i < a->n_outputs && i < b->n_outputs; i++) {
        const sg_value *va = &a->values[a->outputs[i]], *vb = &b->values[b->outputs[i]];
        CHECK_MSG(strcmp(va->name, vb->name) == 0 && va->dtype == vb->dtype,
                  "%s: output %d is `%s` (%d), was `%s` (%d)", what, i, vb->name, vb->dtype, va->name,
                  va->dtype);
        if (va->data || va->is_input)
            continue; /* its shape is that of the constant or input */
        const sg_shape *want = va->declared.rank >= 0 ? &va->declared : &va->shape;
        CHECK_MSG(shape_eq(a, want, b, &vb->declared), "%s: output `%s`: declared shape", what, va->name);
    }

    int32_t live = 0;
    for (int32_t i = 0; i < a->n_nodes; i++)
        live += !a->nodes[i].dead;
    CHECK_MSG(live == b->n_nodes, "%s: %d nodes, was %d", what, b->n_nodes, live);
    int32_t bad_nodes = 0;
    for (int32_t i = 0, j = 0; i < a->n_nodes && j < b->n_nodes; i++) {
        const sg_node *na = &a->nodes[i], *nb = &b->nodes[j];
        if (na->dead)
            continue;
        j++;
        bool ok = na->op == nb->op && strcmp(na->name, nb->name) == 0 &&
                  na->n_outputs == nb->n_outputs && na->n_attrs == nb->n_attrs && !nb->dead;
        int32_t n_in = na->n_inputs;
        while (n_in > 0 && na->inputs[n_in - 1] < 0)
            n_in--; /* the loader drops trailing omitted inputs */
        ok = ok && n_in == nb->n_inputs;
        for (int32_t k = 0; ok && k < n_in; k++)
            ok = strcmp(vname(a, na->inputs[k]), vname(b, nb->inputs[k])) == 0;
        for (int32_t k = 0; ok && k < na->n_outputs; k++)
            ok = strcmp(vname(a, na->outputs[k]), vname(b, nb->outputs[k])) == 0;
        for (int32_t k = 0; ok && k < na->n_attrs; k++)
            ok = attr_eq(&na->attrs[k], &nb->attrs[k]);
        if (!ok && bad_nodes++ < 5)
            fprintf(stderr, "%s: node `%s` (%s) differs from `%s` (%s)\n", what, nb->name,
                    sg_op_name(nb->op), na->name, sg_op_name(na->op));
    }
    CHECK_MSG(bad_nodes == 0, "%s: %d nodes differ", what, bad_nodes);

    int32_t want_init = 0, have_init = 0, bad_init = 0;
    for (int32_t v = 0; v < a->n_values; v++) {
        if (!expect_initializer(a, v))
            continue;
        want_init++;
        const sg_value *va = &a->values[v];
        int32_t w = find_value(b, va->name);
        const sg_value *vb = w >= 0 ? &b->values[w] : NULL;
        bool ok = vb && vb->data && vb->is_initializer && vb->dtype == va->dtype &&
                  shape_eq(a, &va->shape, b, &vb->shape) && blob_eq(va->data, vb->data);
        if (!ok && bad_init++ < 5)
            fprintf(stderr, "%s: constant `%s` differs\n", what, va->name);
    }
    for (int32_t v = 0; v < b->n_values; v++)
        have_init += b->values[v].is_initializer;
    CHECK_MSG(bad_init == 0, "%s: %d constants differ", what, bad_init);
    CHECK_MSG(want_init == have_init, "%s: %d initializers, want %d", what, have_init, want_init);
}

/* Structural checks on the protobuf itself: raw_data only, each
 * initializer once, one opset import of the default domain. */
static void check_proto(const char *what, const uint8_t *bytes, size_t size)
{
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, bytes);
    CHECK_MSG(m != NULL, "%s: the export does not parse", what);
    if (!m)
        return;
    CHECK(m->has_ir_version && m->n_opset_import == 1 && m->opset_import[0]->has_version);
    CHECK(m->opset_import[0]->domain == NULL || m->opset_import[0]->domain[0] == '\0');
    CHECK(m->graph && m->graph->name && m->graph->name[0]);
    bool raw = true, unique = true;
    for (size_t i = 0; m->graph && i < m->graph->n_initializer; i++) {
        const Onnx__TensorProto *t = m->graph->initializer[i];
        raw &= t->has_raw_data && t->n_float_data == 0 && t->n_int64_data == 0 && t->n_int32_data == 0 &&
               t->n_external_data == 0 && !t->has_data_location;
        for (size_t k = 0; k < i; k++)
            unique &= strcmp(t->name, m->graph->initializer[k]->name) != 0;
    }
    CHECK_MSG(raw, "%s: an initializer is not plain raw_data", what);
    CHECK_MSG(unique, "%s: an initializer is stored twice", what);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* Exports model, loads it back, compares, and checks that a second export
 * of the loaded graph gives the same bytes. Returns the loaded model. */
static segrt_model *round_trip(const char *what, const segrt_model *model)
{
    uint8_t *bytes = NULL;
    size_t size = 0;
    sg_status s = sg_onnx_export(model->g, &bytes, &size);
    CHECK_MSG(s == SEGRT_OK, "%s: export: %s", what, segrt_last_error());
    if (s != SEGRT_OK)
        return NULL;
    check_proto(what, bytes, size);
    segrt_model *back = NULL;
    s = segrt_model_load_from_memory(bytes, size, NULL, what, &back);
    CHECK_MSG(s == SEGRT_OK, "%s: load: %s", what, segrt_last_error());
    if (back) {
        compare_graphs(what, model->g, back->g);
        uint8_t *again = NULL;
        size_t again_size = 0;
        CHECK(sg_onnx_export(back->g, &again, &again_size) == SEGRT_OK);
        CHECK_MSG(again && again_size == size && memcmp(again, bytes, size) == 0,
                  "%s: exporting the loaded graph again gives other bytes", what);
        free(again);
    }
    free(bytes);
    return back;
}

/* ------------------------------------------------------------------------ */
/* Running                                                                   */

static uint32_t rng = 12345;

static float next_float(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Runs model on the CPU with opts; outputs are returned malloc'd. */
static bool run_model(const char *what, const segrt_model *model, const segrt_build_options *opts,
                      size_t n_in, const segrt_tensor *in, size_t n_out, segrt_tensor *out)
{
    segrt_engine *e = NULL;
    segrt_context *ctx = NULL;
    sg_status s = segrt_engine_build(model, opts, &e);
    CHECK_MSG(s == SEGRT_OK, "%s: build: %s", what, segrt_last_error());
    if (s != SEGRT_OK)
        return false;
    memset(out, 0, sizeof *out * n_out);
    bool ok = segrt_context_create(e, &ctx) == SEGRT_OK &&
              segrt_engine_output_shapes(e, n_in, in, n_out, out) == SEGRT_OK;
    for (size_t i = 0; ok && i < n_out; i++) {
        size_t bytes = segrt_dtype_size(out[i].dtype);
        for (int32_t d = 0; d < out[i].rank; d++)
            bytes *= (size_t)out[i].dims[d];
        ok = (out[i].data = calloc(bytes ? bytes : 1, 1)) != NULL;
    }
    ok = ok && segrt_context_run(ctx, n_in, in, n_out, out) == SEGRT_OK;
    CHECK_MSG(ok, "%s: run: %s", what, segrt_last_error());
    segrt_context_destroy(ctx);
    segrt_engine_destroy(e);
    return ok;
}

static size_t tensor_bytes(const segrt_tensor *t)
{
    size_t bytes = segrt_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->rank; d++)
        bytes *= (size_t)t->dims[d];
    return bytes;
}

#define MAX_IO 8

/* Both models on the same input: outputs must be bit-identical. */
static void compare_runs(const char *what, const segrt_model *a, const segrt_model *b,
                         const segrt_build_options *opts, size_t n_in, const segrt_tensor *in)
{
    size_t n_out = segrt_model_output_count(a);
    if (n_out > MAX_IO || n_out != segrt_model_output_count(b)) {
        CHECK_MSG(false, "%s: output counts", what);
        return;
    }
    segrt_tensor oa[MAX_IO], ob[MAX_IO];
    memset(oa, 0, sizeof oa);
    memset(ob, 0, sizeof ob);
    if (run_model(what, a, opts, n_in, in, n_out, oa) && run_model(what, b, opts, n_in, in, n_out, ob)) {
        for (size_t i = 0; i < n_out; i++) {
            size_t bytes = tensor_bytes(&oa[i]);
            CHECK_MSG(oa[i].dtype == ob[i].dtype && oa[i].rank == ob[i].rank &&
                          memcmp(oa[i].dims, ob[i].dims, sizeof oa[i].dims) == 0 && bytes > 0 &&
                          memcmp(oa[i].data, ob[i].data, bytes) == 0,
                      "%s: output %zu differs after the round trip", what, i);
        }
    }
    for (size_t i = 0; i < n_out; i++) {
        free(oa[i].data);
        free(ob[i].data);
    }
}

/* ------------------------------------------------------------------------ */
/* The test models (tests/models/make_models.py)                            */

static void test_model(const char *file)
{
    segrt_model *raw = NULL;
    sg_status s = segrt_model_load(sg_test_model(file), &raw);
    CHECK_MSG(s == SEGRT_OK, "%s", segrt_last_error());
    if (s != SEGRT_OK)
        return;
    /* A small input: batch 1, the declared channels, 32x32 or 16x16x16. */
    size_t n_in = segrt_model_input_count(raw);
    if (n_in > MAX_IO) {
        CHECK(n_in <= MAX_IO);
        segrt_model_destroy(raw);
        return;
    }
    segrt_tensor in[MAX_IO];
    segrt_build_options *opts = NULL;
    segrt_build_options_create(&opts);
    memset(in, 0, sizeof in);
    for (size_t i = 0; i < n_in; i++) {
        segrt_tensor_desc d;
        segrt_model_input(raw, i, &d);
        in[i].dtype = d.dtype;
        in[i].rank = d.rank;
        for (int32_t k = 0; k < d.rank; k++)
            in[i].dims[k] = d.dims[k] >= 0 ? d.dims[k] : k == 0 ? 1 : d.rank >= 5 ? 16 : 32;
        size_t numel = tensor_bytes(&in[i]) / segrt_dtype_size(d.dtype);
        float *x = malloc(numel * sizeof *x);
        for (size_t k = 0; x && k < numel; k++)
            x[k] = next_float();
        in[i].data = x;
        CHECK(d.dtype == F32 && x != NULL);
        CHECK(segrt_build_options_set_shape(opts, d.name, in[i].rank, in[i].dims) == SEGRT_OK);
    }

    char what[256];
    snprintf(what, sizeof what, "%s as loaded", file);
    segrt_model *back = round_trip(what, raw);
    if (back)
        compare_runs(what, raw, back, opts, n_in, in);
    segrt_model_destroy(back);

    segrt_model *opt = NULL;
    snprintf(what, sizeof what, "%s optimized, shapes unbound", file);
    CHECK_MSG(segrt_model_optimize(raw, NULL, &opt) == SEGRT_OK, "%s: %s", what, segrt_last_error());
    if (opt) {
        back = round_trip(what, opt);
        if (back)
            compare_runs(what, opt, back, opts, n_in, in);
        segrt_model_destroy(back);
        segrt_model_destroy(opt);
        opt = NULL;
    }

    snprintf(what, sizeof what, "%s optimized for its input shape", file);
    CHECK_MSG(segrt_model_optimize(raw, opts, &opt) == SEGRT_OK, "%s: %s", what, segrt_last_error());
    if (opt) {
        back = round_trip(what, opt);
        if (back) {
            /* The public descriptors of the inputs and outputs match once the
             * loaded model is optimized for the same shapes. */
            segrt_model *back_opt = NULL;
            CHECK(segrt_model_optimize(back, opts, &back_opt) == SEGRT_OK);
            for (size_t i = 0; back_opt && i < segrt_model_output_count(opt); i++) {
                segrt_tensor_desc da, db;
                segrt_model_output(opt, i, &da);
                segrt_model_output(back_opt, i, &db);
                CHECK(strcmp(da.name, db.name) == 0 && da.dtype == db.dtype && da.rank == db.rank &&
                      memcmp(da.dims, db.dims, sizeof da.dims) == 0);
            }
            CHECK(back_opt && segrt_model_node_count(back_opt) == segrt_model_node_count(opt));
            segrt_model_destroy(back_opt);
            compare_runs(what, opt, back, opts, n_in, in);
        }
        segrt_model_destroy(back);
        segrt_model_destroy(opt);
    }
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    segrt_build_options_destroy(opts);
    segrt_model_destroy(raw);
}

/* ------------------------------------------------------------------------ */
/* A hand-built graph                                                        */

static void must(sg_status s)
{
    if (s != SEGRT_OK) {
        fprintf(stderr, "setup failed: %s\n", segrt_last_error());
        abort();
    }
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

static sg_blob *blob_of(const void *data, size_t size)
{
    sg_blob *b;
    must(sg_blob_new(size, true, &b));
    if (size)
        memcpy(sg_blob_data(b), data, size);
    return b;
}

static int32_t add_const(sg_graph *g, const char *name, sg_dtype dt, int32_t rank, const int64_t *dims,
                         const void *data, size_t size)
{
    int32_t v;
    must(sg_graph_add_value(g, name, &v));
    g->values[v].dtype = dt;
    g->values[v].shape = sg_shape_of_dims(dims, rank);
    g->values[v].declared = g->values[v].shape;
    g->values[v].data = blob_of(data, size);
    g->values[v].is_initializer = true;
    return v;
}

static int32_t add_value(sg_graph *g, const char *name)
{
    int32_t v;
    must(sg_graph_add_value(g, name, &v));
    return v;
}

static sg_node *add_node(sg_graph *g, sg_op op, const char *name, int32_t n_in, int32_t n_out)
{
    sg_node *n;
    must(sg_graph_add_node(g, op, name, n_in, n_out, &n));
    return n;
}

/* x[batch,4,?] -> Relu (an attribute of every kind) -> Add w -> Mul w ->
 * Clip(min omitted) -> Dropout(mask omitted) -> Add Constant -> y; a dead
 * Sub reads a constant nothing else reads; a constant table and the input
 * are graph outputs too; bias_in is a graph input carrying data. */
static sg_graph *hand_graph(void)
{
    sg_graph *g;
    must(sg_graph_new(&g));
    g->opset = 17;
    g->ir_version = 8;
    must(sg_graph_add_meta(g, "author", "test"));
    must(sg_graph_add_meta(g, "empty", ""));
    int32_t batch;
    must(sg_graph_intern_sym(g, "batch", &batch));

    int32_t x = add_value(g, "x");
    sg_shape xs = sg_shape_unknown();
    xs.rank = 3;
    xs.d[0] = (sg_dim){SG_DIM_UNKNOWN, batch};
    xs.d[1] = (sg_dim){4, SG_NO_SYM};
    xs.d[2] = (sg_dim){SG_DIM_UNKNOWN, SG_NO_SYM};
    g->values[x].dtype = F32;
    g->values[x].shape = g->values[x].declared = xs;
    must(sg_graph_add_input(g, x));

    const float wv[4] = {1, 2, 3, 4}, hiv = 2.5f, deadv[1] = {9};
    const int64_t d4[1] = {4}, d1[1] = {1}, d3[1] = {3}, d22[2] = {2, 2};
    int32_t bias = add_const(g, "bias_in", F32, 1, d4, wv, sizeof wv);
    g->values[bias].is_initializer = false;
    must(sg_graph_add_input(g, bias));
    int32_t w = add_const(g, "w", F32, 1, d4, wv, sizeof wv);
    int32_t hi = add_const(g, "hi", F32, 0, NULL, &hiv, sizeof hiv);
    int32_t dead_c = add_const(g, "dead_const", F32, 1, d1, deadv, sizeof deadv);
    const int64_t table_v[3] = {-1, 0, 1};
    int32_t table = add_const(g, "table", I64, 1, d3, table_v, sizeof table_v);
    int32_t unused = add_const(g, "unused", F32, 1, d4, wv, sizeof wv);
    (void)unused;
    int32_t r = add_value(g, "r"), k = add_value(g, "k"), a = add_value(g, "a"), mu = add_value(g, "mu");
    int32_t cl = add_value(g, "cl"), d = add_value(g, "d"), dead_out = add_value(g, "dead_out"),
            y = add_value(g, "y"), b = add_value(g, "b");

    sg_node *n = add_node(g, SG_OP_RELU, "relu_all_attrs", 1, 1);
    n->inputs[0] = x;
    n->outputs[0] = r;
    new_attr(n, "i", SG_ATTR_INT)->i = -7;
    new_attr(n, "f", SG_ATTR_FLOAT)->f = -0.1f;
    new_attr(n, "s", SG_ATTR_STRING)->s = strdup("hello world");
    new_attr(n, "s_empty", SG_ATTR_STRING)->s = strdup("");
    sg_attr *at = new_attr(n, "ints", SG_ATTR_INTS);
    at->n = 3;
    at->ints = malloc(3 * sizeof(int64_t));
    at->ints[0] = 1, at->ints[1] = -2, at->ints[2] = INT64_MAX;
    at = new_attr(n, "ints_empty", SG_ATTR_INTS);
    at->ints = malloc(sizeof(int64_t));
    at = new_attr(n, "floats", SG_ATTR_FLOATS);
    at->n = 2;
    at->floats = malloc(2 * sizeof(float));
    at->floats[0] = 1.5f, at->floats[1] = -0.0f;
    at = new_attr(n, "strings", SG_ATTR_STRINGS);
    at->n = 3;
    at->strings = malloc(3 * sizeof(char *));
    at->strings[0] = strdup("a"), at->strings[1] = strdup(""), at->strings[2] = strdup("ccc");
    at = new_attr(n, "t", SG_ATTR_TENSOR);
    const int64_t tv[4] = {1, 2, 3, -4};
    at->t_dtype = I64;
    at->t_rank = 2;
    memcpy(at->t_dims, d22, sizeof d22);
    at->t_data = blob_of(tv, sizeof tv);
    at = new_attr(n, "t_scalar", SG_ATTR_TENSOR);
    at->t_dtype = SEGRT_DTYPE_FLOAT16;
    at->t_rank = 0;
    const uint16_t half = 0x3c00;
    at->t_data = blob_of(&half, sizeof half);
    at = new_attr(n, "t_empty", SG_ATTR_TENSOR);
    at->t_dtype = F32;
    at->t_rank = 1;
    at->t_data = blob_of(NULL, 0);

    n = add_node(g, SG_OP_CONSTANT, "const", 0, 1);
    n->outputs[0] = k;
    at = new_attr(n, "value", SG_ATTR_TENSOR);
    const float kv[4] = {0.5f, -1, 1e-3f, 7};
    at->t_dtype = F32;
    at->t_rank = 1;
    at->t_dims[0] = 4;
    at->t_data = blob_of(kv, sizeof kv);

    n = add_node(g, SG_OP_ADD, "add", 2, 1);
    n->inputs[0] = r, n->inputs[1] = w, n->outputs[0] = a;
    n = add_node(g, SG_OP_MUL, "mul", 2, 1);
    n->inputs[0] = a, n->inputs[1] = w, n->outputs[0] = mu;
    n = add_node(g, SG_OP_CLIP, "clip", 3, 1);
    n->inputs[0] = mu, n->inputs[2] = hi, n->outputs[0] = cl;
    n = add_node(g, SG_OP_DROPOUT, "drop", 1, 2);
    n->inputs[0] = cl, n->outputs[0] = d;
    n = add_node(g, SG_OP_SUB, "dead_sub", 2, 1);
    n->inputs[0] = d, n->inputs[1] = dead_c, n->outputs[0] = dead_out;
    n->dead = true;
    n = add_node(g, SG_OP_ADD, "add_k", 2, 1);
    n->inputs[0] = d, n->inputs[1] = k, n->outputs[0] = y;
    n = add_node(g, SG_OP_ADD, "add_bias", 2, 1);
    n->inputs[0] = y, n->inputs[1] = bias, n->outputs[0] = b;
    /* Trailing omitted inputs, as a pass may leave them. */
    n = add_node(g, SG_OP_CLIP, "clip_trailing", 3, 1);
    n->inputs[0] = b, n->outputs[0] = add_value(g, "out");

    must(sg_graph_add_output(g, g->nodes[g->n_nodes - 1].outputs[0]));
    must(sg_graph_add_output(g, table));
    must(sg_graph_add_output(g, x));
    must(sg_graph_infer(g));
    return g;
}

static void test_hand_graph(void)
{
    sg_graph *g = hand_graph();
    segrt_model model = {g};
    segrt_model *back = round_trip("hand-built graph", &model);
    if (back) {
        const sg_graph *h = back->g;
        CHECK(strcmp(h->producer_name, "segrt") == 0);
        CHECK(find_value(h, "dead_out") < 0 && find_value(h, "dead_const") < 0 &&
              find_value(h, "unused") < 0);
        int32_t bias = find_value(h, "bias_in");
        CHECK(bias >= 0 && h->values[bias].is_input && !h->values[bias].data);
        const sg_value *x = &h->values[h->inputs[0]];
        CHECK(x->declared.rank == 3 && x->declared.d[0].size < 0 && x->declared.d[0].sym >= 0 &&
              strcmp(h->syms[x->declared.d[0].sym], "batch") == 0 && x->declared.d[1].size == 4 &&
              x->declared.d[2].size < 0 && x->declared.d[2].sym < 0);
        const sg_node *clip = &h->nodes[4], *drop = &h->nodes[5];
        CHECK(clip->op == SG_OP_CLIP && clip->n_inputs == 3 && clip->inputs[1] < 0 && clip->inputs[2] >= 0);
        CHECK(drop->op == SG_OP_DROPOUT && drop->n_outputs == 2 && drop->outputs[1] < 0);
        const sg_node *last = &h->nodes[h->n_nodes - 1];
        CHECK(last->op == SG_OP_CLIP && last->n_inputs == 1);
        int32_t table = h->outputs[1];
        CHECK(h->values[table].data && h->values[table].dtype == I64);
        /* A constant read twice is stored once (check_proto), and a graph
         * input that is also an output stays an input. */
        CHECK(h->values[h->outputs[2]].is_input);
    }
    segrt_model_destroy(back);

    /* What the loader would refuse is refused at export, with the reason. */
    uint8_t *bytes = NULL;
    size_t size = 0;
    sg_graph *c;
    must(sg_graph_clone(g, &c));
    int32_t renamed = find_value(c, "a");
    free(c->values[renamed].name);
    c->values[renamed].name = strdup("mu");
    CHECK(sg_onnx_export(c, &bytes, &size) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "two values are named `mu`") != NULL);
    sg_graph_free(c);

    must(sg_graph_clone(g, &c));
    c->nodes[2].dead = true; /* "add" computes `a`, which "mul" reads */
    CHECK(sg_onnx_export(c, &bytes, &size) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "`a` is read") != NULL);
    sg_graph_free(c);

    must(sg_graph_clone(g, &c));
    c->opset = 0;
    CHECK(sg_onnx_export(c, &bytes, &size) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_graph_free(c);

    must(sg_graph_clone(g, &c));
    int32_t emptied = find_value(c, "w");
    sg_blob_unref(c->values[emptied].data);
    c->values[emptied].data = blob_of(NULL, 0);
    CHECK(sg_onnx_export(c, &bytes, &size) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "constant `w` holds 0 bytes") != NULL);
    sg_graph_free(c);

    /* Past protobuf's 2 GiB: three constants sharing one 768 MiB blob
     * (never touched, so it costs address space only). */
    must(sg_graph_clone(g, &c));
    int64_t big = (int64_t)3 << 28;
    sg_blob *blob = NULL;
    CHECK(sg_blob_new((size_t)big, false, &blob) == SEGRT_OK);
    if (blob) {
        const char *names[3] = {"w", "hi", "table"};
        for (int i = 0; i < 3; i++) {
            sg_value *v = &c->values[find_value(c, names[i])];
            sg_blob_unref(v->data);
            v->data = sg_blob_ref(blob);
            v->dtype = SEGRT_DTYPE_UINT8;
            v->shape = sg_shape_of_dims(&big, 1);
        }
        CHECK(sg_onnx_export(c, &bytes, &size) == SEGRT_ERROR_UNSUPPORTED);
        CHECK(strstr(segrt_last_error(), "constants take 2415919104 bytes") != NULL);
        CHECK(strstr(segrt_last_error(), "2 GiB") != NULL);
        sg_graph_free(c);
        /* The same in tensor attributes, which only the packed size shows. */
        must(sg_graph_clone(g, &c));
        for (int i = 0; i < 3; i++) {
            char name[16];
            snprintf(name, sizeof name, "big%d", i);
            sg_node *n = add_node(c, SG_OP_CONSTANT, name, 0, 1);
            n->outputs[0] = add_value(c, name);
            sg_attr *at = new_attr(&c->nodes[c->n_nodes - 1], "value", SG_ATTR_TENSOR);
            at->t_dtype = SEGRT_DTYPE_UINT8;
            at->t_rank = 1;
            at->t_dims[0] = big;
            at->t_data = sg_blob_ref(blob);
        }
        CHECK(sg_onnx_export(c, &bytes, &size) == SEGRT_ERROR_UNSUPPORTED);
        CHECK(strstr(segrt_last_error(), "more than the 2 GiB") != NULL);
        sg_blob_unref(blob);
    }
    sg_graph_free(c);
    CHECK(bytes == NULL);
    sg_graph_free(g);
}

int main(void)
{
    test_hand_graph();
    test_model("basicunet2d_tiny.onnx");
    test_model("basicunet2d_ts.onnx");
    test_model("basicunet2d.onnx");
    test_model("unet3d_spleen.onnx");
    return sg_test_finish("test_onnx_export");
}
