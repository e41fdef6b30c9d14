/* segrt_model_* and segrt_build_options_*: the public face of the graph. */
#include "backend/kernel_switches.h"
#include "engine/api_internal.h"
#include "graph/infer.h"
#include "graph/passes.h"
#include "graph/stats.h"
#include "onnx/onnx_import.h"

#include <stdio.h>
#include <string.h>

#define CHECK_ARG(cond, what)                                                        \
    do {                                                                             \
        if (!(cond))                                                                 \
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: %s", __func__, what); \
    } while (0)

static sg_status model_wrap(sg_graph *g, segrt_model **out)
{
    segrt_model *m = sg_calloc(1, sizeof *m);
    if (!m) {
        sg_graph_free(g);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    m->g = g;
    *out = m;
    return SEGRT_OK;
}

segrt_status segrt_model_load(const char *path, segrt_model **out)
{
    CHECK_ARG(path && out, "path and out must not be NULL");
    sg_graph *g;
    SG_TRY(sg_onnx_import_file(path, &g));
    return model_wrap(g, out);
}

segrt_status segrt_model_load_from_memory(const void *data, size_t size, const char *base_dir,
                                          const char *name, segrt_model **out)
{
    CHECK_ARG((data || !size) && out, "data and out must not be NULL");
    sg_graph *g;
    const char *label = name ? name : "<memory>";
    sg_status s = sg_onnx_import(data, size, base_dir, label, &g);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s: ", label);
    return model_wrap(g, out);
}

void segrt_model_destroy(segrt_model *model)
{
    if (!model)
        return;
    sg_graph_free(model->g);
    free(model);
}

void sg_value_desc(const sg_graph *g, const sg_value *v, bool use_declared, segrt_tensor_desc *out)
{
    const sg_shape *s = use_declared && v->declared.rank >= 0 ? &v->declared : &v->shape;
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->dtype;
    out->rank = s->rank;
    for (int32_t i = 0; i < s->rank && i < SEGRT_MAX_RANK; i++) {
        out->dims[i] = s->d[i].size;
        out->dim_names[i] = s->d[i].size < 0 && s->d[i].sym >= 0 ? g->syms[s->d[i].sym] : NULL;
    }
}

size_t segrt_model_input_count(const segrt_model *model)
{
    return model ? (size_t)model->g->n_inputs : 0;
}

size_t segrt_model_output_count(const segrt_model *model)
{
    return model ? (size_t)model->g->n_outputs : 0;
}

segrt_status segrt_model_input(const segrt_model *model, size_t index, segrt_tensor_desc *out)
{
    CHECK_ARG(model && out, "model and out must not be NULL");
    CHECK_ARG(index < (size_t)model->g->n_inputs, "input index out of range");
    const sg_graph *g = model->g;
    sg_value_desc(g, &g->values[g->inputs[index]], false, out);
    return SEGRT_OK;
}

segrt_status segrt_model_output(const segrt_model *model, size_t index, segrt_tensor_desc *out)
{
    CHECK_ARG(model && out, "model and out must not be NULL");
    CHECK_ARG(index < (size_t)model->g->n_outputs, "output index out of range");
    const sg_graph *g = model->g;
    sg_value_desc(g, &g->values[g->outputs[index]], false, out);
    return SEGRT_OK;
}

segrt_status segrt_model_metadata(const segrt_model *model, segrt_model_meta *out)
{
    CHECK_ARG(model && out, "model and out must not be NULL");
    const sg_graph *g = model->g;
    memset(out, 0, sizeof *out);
    out->path = g->path;
    out->producer_name = g->producer_name;
    out->producer_version = g->producer_version;
    out->ir_version = g->ir_version;
    out->opset = g->opset;
    return sg_graph_params(g, &out->parameter_count, &out->parameter_bytes);
}

const char *segrt_model_metadata_value(const segrt_model *model, const char *key)
{
    if (!model || !key)
        return NULL;
    for (int32_t i = 0; i < model->g->n_meta; i++)
        if (strcmp(model->g->meta[i].key, key) == 0)
            return model->g->meta[i].value;
    return NULL;
}

size_t segrt_model_node_count(const segrt_model *model)
{
    return model ? (size_t)model->g->n_nodes : 0;
}

segrt_status segrt_model_node(const segrt_model *model, size_t index, segrt_node_desc *out)
{
    CHECK_ARG(model && out, "model and out must not be NULL");
    CHECK_ARG(index < (size_t)model->g->n_nodes, "node index out of range");
    const sg_node *n = &model->g->nodes[index];
    out->name = n->name;
    out->op_type = sg_op_name(n->op);
    out->domain = "";
    return SEGRT_OK;
}

segrt_status segrt_model_flops(const segrt_model *model, double *out)
{
    CHECK_ARG(model && out, "model and out must not be NULL");
    sg_status s = sg_graph_flops(model->g, out);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", model->g->path);
}

/* ------------------------------------------------------------------------ */

segrt_status segrt_build_options_create(segrt_build_options **out)
{
    CHECK_ARG(out, "out must not be NULL");
    segrt_build_options *o = sg_calloc(1, sizeof *o);
    if (!o)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    o->device = SEGRT_DEVICE_CPU;
    o->autotune = -1;
    *out = o;
    return SEGRT_OK;
}

void segrt_build_options_destroy(segrt_build_options *opts)
{
    if (!opts)
        return;
    for (int32_t i = 0; i < opts->n_shapes; i++)
        free(opts->shapes[i].name);
    free(opts->shapes);
    free(opts->fp32_ops);
    free(opts);
}

segrt_status segrt_build_options_set_shape(segrt_build_options *opts, const char *name,
                                           int32_t rank, const int64_t *dims)
{
    CHECK_ARG(opts && name && (dims || rank == 0), "opts, name and dims must not be NULL");
    return segrt_build_options_set_shape_range(opts, name, rank, dims, dims, dims);
}

segrt_status segrt_build_options_set_shape_range(segrt_build_options *opts, const char *name,
                                                 int32_t rank, const int64_t *min, const int64_t *opt,
                                                 const int64_t *max)
{
    CHECK_ARG(opts && name && ((min && opt && max) || rank == 0),
              "opts, name, min, opt and max must not be NULL");
    const int64_t *dims = opt;
    if (rank < 0 || rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "shape of `%s`: rank %d is outside 0..%d", name,
                        rank, SEGRT_MAX_RANK);
    for (int32_t i = 0; i < rank; i++) {
        if (min[i] < 0)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "shape of `%s`: dim %d is negative", name, i);
        if (min[i] > opt[i] || opt[i] > max[i])
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "shape of `%s`: dim %d has min %lld, opt %lld, max %lld; it needs min <= opt <= max",
                            name, i, (long long)min[i], (long long)opt[i], (long long)max[i]);
    }
    sg_shape_binding *b = NULL;
    for (int32_t i = 0; i < opts->n_shapes && !b; i++)
        if (strcmp(opts->shapes[i].name, name) == 0)
            b = &opts->shapes[i];
    if (!b) {
        SG_TRY(sg_grow((void **)&opts->shapes, &opts->cap_shapes, opts->n_shapes + 1,
                       sizeof *opts->shapes));
        b = &opts->shapes[opts->n_shapes];
        if (!(b->name = sg_strdup(name)))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        opts->n_shapes++;
    }
    b->rank = rank;
    b->ranged = false;
    for (int32_t i = 0; i < rank; i++) {
        b->dims[i] = dims[i];
        b->min[i] = min[i];
        b->max[i] = max[i];
        b->ranged |= min[i] != max[i];
    }
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_precision(segrt_build_options *opts, segrt_precision precision)
{
    CHECK_ARG(opts, "opts must not be NULL");
    CHECK_ARG(segrt_precision_name(precision), "unknown precision");
    opts->precision = precision;
    return SEGRT_OK;
}

const char *segrt_precision_name(segrt_precision precision)
{
    switch (precision) {
    case SEGRT_PRECISION_FP32: return "fp32";
    case SEGRT_PRECISION_TF32: return "tf32";
    case SEGRT_PRECISION_FP16: return "fp16";
    case SEGRT_PRECISION_BF16: return "bf16";
    }
    return NULL;
}

segrt_status segrt_build_options_set_fp32_ops(segrt_build_options *opts, const char *list)
{
    CHECK_ARG(opts, "opts must not be NULL");
    char *copy = NULL;
    if (list && *list && !(copy = sg_strdup(list)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    free(opts->fp32_ops);
    opts->fp32_ops = copy;
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_allow_cpu_fallback(segrt_build_options *opts, int allow)
{
    CHECK_ARG(opts, "opts must not be NULL");
    opts->allow_cpu_fallback = allow != 0;
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_workspace(segrt_build_options *opts, size_t bytes)
{
    CHECK_ARG(opts, "opts must not be NULL");
    opts->workspace = bytes;
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_autotune(segrt_build_options *opts, int32_t candidates)
{
    CHECK_ARG(opts, "opts must not be NULL");
    if (candidates < 0 || candidates > SG_MAX_AUTOTUNE)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: autotune candidates must be 0 to %d, not %d", __func__,
                        SG_MAX_AUTOTUNE, candidates);
    opts->autotune = candidates;
    return SEGRT_OK;
}

/* The switches' names, in the order of their bits. */
static const char *const kernel_switch_names[SG_KERNEL_SWITCH_COUNT] = {
#define SG_KERNEL_SWITCH_NAME(id, name, what) name,
    SG_KERNEL_SWITCHES(SG_KERNEL_SWITCH_NAME)
#undef SG_KERNEL_SWITCH_NAME
};

void sg_disabled_kernels_text(uint32_t mask, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap)
        buf[0] = '\0';
    for (int32_t k = 0; k < SG_KERNEL_SWITCH_COUNT; k++) {
        if (!(mask & SG_KERNEL_BIT(k)) || n >= cap)
            continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? "," : "", kernel_switch_names[k]);
        n = w < 0 ? cap : n + (size_t)w;
    }
}

segrt_status segrt_build_options_set_disabled_kernels(segrt_build_options *opts, const char *list)
{
    CHECK_ARG(opts, "opts must not be NULL");
    uint32_t mask = 0;
    for (const char *s = list ? list : ""; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *a = s, *b = s + len;
        s = e ? e + 1 : s + len;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (a == b)
            continue;
        int32_t k = 0;
        while (k < SG_KERNEL_SWITCH_COUNT &&
               !(strlen(kernel_switch_names[k]) == (size_t)(b - a) && memcmp(kernel_switch_names[k], a, b - a) == 0))
            k++;
        if (k == SG_KERNEL_SWITCH_COUNT) {
            char valid[512];
            sg_disabled_kernels_text(SG_KERNEL_ALL, valid, sizeof valid);
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no kernel is named `%.*s`; the names are %s", __func__,
                            (int)(b - a), a, valid);
        }
        mask |= SG_KERNEL_BIT(k);
    }
    opts->disabled_kernels = mask;
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_target_arch(segrt_build_options *opts, const char *arch)
{
    CHECK_ARG(opts, "opts must not be NULL");
    if (!arch || !*arch) {
        opts->target_cc = 0;
        return SEGRT_OK;
    }
    const char *a = strncmp(arch, "sm_", 3) == 0 ? arch + 3 : arch;
    int major = 0, minor = 0, len = 0;
    bool ok = false;
    if (*a < '0' || *a > '9') /* sscanf would skip spaces and take a sign */
        ok = false;
    else if (strchr(a, '.'))
        ok = sscanf(a, "%d.%d%n", &major, &minor, &len) == 2 && minor >= 0 && minor <= 9;
    else if (sscanf(a, "%d%n", &major, &len) == 1 && major >= 10) {
        minor = major % 10;
        major /= 10;
        ok = true;
    }
    /* sm_90a and the like: the same capability, its architecture-specific
     * features the plan uses where the GPU is that one. */
    if (ok && a[len] == 'a')
        len++;
    int cc = 10 * major + minor;
    if (!ok || a[len] != '\0' || cc < 75 || major > 12)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: `%s` is not a compute capability segrt supports (sm_75 to sm_12x, e.g. sm_80 or 8.6)",
                        __func__, arch);
    opts->target_cc = cc;
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_threads(segrt_build_options *opts, int32_t threads)
{
    CHECK_ARG(opts, "opts must not be NULL");
    CHECK_ARG(threads >= 0, "threads must be 0 (all cores) or positive");
    opts->threads = threads;
    return SEGRT_OK;
}

segrt_status segrt_build_options_set_device(segrt_build_options *opts, segrt_device_kind kind,
                                            int32_t index)
{
    CHECK_ARG(opts, "opts must not be NULL");
    CHECK_ARG(kind == SEGRT_DEVICE_CPU || kind == SEGRT_DEVICE_CUDA, "unknown device kind");
    CHECK_ARG(index >= 0, "device index must not be negative");
    opts->device = kind;
    opts->device_index = index;
    return SEGRT_OK;
}

sg_status sg_options_bind(const segrt_build_options *opts, sg_graph *g)
{
    for (int32_t i = 0; opts && i < opts->n_shapes; i++)
        SG_TRY(sg_graph_bind_input(g, opts->shapes[i].name, opts->shapes[i].rank, opts->shapes[i].dims));
    return SEGRT_OK;
}

sg_status sg_options_bind_fixed(const segrt_build_options *opts, sg_graph *g)
{
    for (int32_t i = 0; opts && i < opts->n_shapes; i++)
        if (!opts->shapes[i].ranged)
            SG_TRY(sg_graph_bind_input(g, opts->shapes[i].name, opts->shapes[i].rank, opts->shapes[i].dims));
    return SEGRT_OK;
}

sg_status sg_options_copy(const segrt_build_options *src, segrt_build_options **out)
{
    segrt_build_options *o;
    SG_TRY(segrt_build_options_create(&o));
    if (!src) {
        *out = o;
        return SEGRT_OK;
    }
    *o = *src;
    o->shapes = NULL;
    o->fp32_ops = NULL;
    o->n_shapes = o->cap_shapes = 0;
    sg_status s = SEGRT_OK;
    if (src->fp32_ops && !(o->fp32_ops = sg_strdup(src->fp32_ops)))
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s == SEGRT_OK && src->n_shapes) {
        o->shapes = sg_calloc((size_t)src->n_shapes, sizeof *o->shapes);
        if (!o->shapes)
            s = SEGRT_ERROR_OUT_OF_MEMORY;
        else
            o->cap_shapes = src->n_shapes;
    }
    for (int32_t i = 0; s == SEGRT_OK && i < src->n_shapes; i++) {
        o->shapes[i] = src->shapes[i];
        if (!(o->shapes[i].name = sg_strdup(src->shapes[i].name)))
            s = SEGRT_ERROR_OUT_OF_MEMORY;
        else
            o->n_shapes++;
    }
    if (s != SEGRT_OK) {
        segrt_build_options_destroy(o);
        return s;
    }
    *out = o;
    return SEGRT_OK;
}

void sg_options_backend(const segrt_build_options *opts, sg_backend_options *out)
{
    memset(out, 0, sizeof *out);
    out->autotune = -1;
    if (!opts)
        return;
    out->device = opts->device_index;
    out->threads = opts->threads;
    out->precision = opts->precision;
    out->fp32_ops = opts->fp32_ops;
    out->allow_cpu_fallback = opts->allow_cpu_fallback;
    out->workspace = opts->workspace;
    out->autotune = opts->autotune;
    out->disabled_kernels = opts->disabled_kernels;
    out->target_cc = opts->target_cc;
    out->shapes = opts->shapes;
    out->n_shapes = opts->n_shapes;
}

segrt_status segrt_model_optimize(const segrt_model *model, const segrt_build_options *opts, segrt_model **out)
{
    CHECK_ARG(model && out, "model and out must not be NULL");
    sg_graph *g;
    SG_TRY(sg_graph_clone(model->g, &g));
    sg_status s = sg_options_bind(opts, g);
    if (s == SEGRT_OK)
        s = sg_graph_optimize(g, sg_backend_host_eval());
    if (s != SEGRT_OK) {
        sg_graph_free(g);
        return sg_error_prefix(s, "%s: ", model->g->path);
    }
    return model_wrap(g, out);
}
