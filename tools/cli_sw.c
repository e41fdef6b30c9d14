/* `segrt run --roi ...`: sliding-window inference from an NPY image to an
 * NPY result. */
#include "cli_sw.h"

#include "core/tensor.h"
#include "io/npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cli_sw_opts_init(cli_sw_opts *o)
{
    memset(o, 0, sizeof *o);
    sg_sw_options_default(&o->sw, 0);
}

/* "64,64,32": 1 to SG_SW_MAX_DIMS integers (negative allowed for roi). */
static int parse_ints(const char *s, int64_t *out)
{
    int n = 0;
    while (*s && n < SG_SW_MAX_DIMS) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || (*end && *end != ','))
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static int parse_doubles(const char *s, double *out)
{
    int n = 0;
    while (*s && n < SG_SW_MAX_DIMS) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || (*end && *end != ','))
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static bool parse_float(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return end != s && !*end && isfinite(*out);
}

/* Index of s in names (n of them), or -1. */
static int pick(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

bool cli_sw_output_kind(cli_sw_opts *o, const char *s)
{
    static const char *const kinds[] = {"logits", "probs", "labels"};
    int k = pick(s, kinds, 3);
    if (k < 0)
        return false;
    o->sw.output = (sg_sw_output)k;
    o->any = true;
    return true;
}

int cli_sw_option(cli_sw_opts *o, int argc, char **argv, int *i)
{
    static const char *const blends[] = {"constant", "gaussian"};
    static const char *const pads[] = {"constant", "reflect", "replicate"};
    static const char *const grids[] = {"monai", "nnunet"};
    static const char *const acts[] = {"default", "none", "softmax", "sigmoid"};
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int k;
    double f;
    int64_t n;
    if (strcmp(a, "--roi") == 0) {
        if (!v || (o->n_roi = parse_ints(v, o->roi)) < 1)
            return cli_usage_error("--roi wants 1 to %d window sizes such as 96,96,96", SG_SW_MAX_DIMS), -1;
        o->on = true;
    } else if (strcmp(a, "--overlap") == 0) {
        if (!v || (o->n_overlap = parse_doubles(v, o->overlap)) < 1)
            return cli_usage_error("--overlap wants a fraction in [0, 1), or one per axis"), -1;
    } else if (strcmp(a, "--sw-batch") == 0) {
        if (!v || !cli_parse_int(v, &n) || n < 1 || n > 65536)
            return cli_usage_error("--sw-batch wants a number of windows, 1 to 65536"), -1;
        o->sw.sw_batch = (int32_t)n;
    } else if (strcmp(a, "--blend") == 0) {
        if (!v || (k = pick(v, blends, 2)) < 0)
            return cli_usage_error("--blend wants constant or gaussian"), -1;
        o->sw.blend = (sg_sw_blend)k;
    } else if (strcmp(a, "--sigma-scale") == 0) {
        if (!v || !parse_float(v, &f) || !(f > 0))
            return cli_usage_error("--sigma-scale wants a number > 0"), -1;
        o->sw.sigma_scale = f;
    } else if (strcmp(a, "--pad") == 0) {
        if (!v || (k = pick(v, pads, 3)) < 0)
            return cli_usage_error("--pad wants constant, reflect or replicate"), -1;
        o->sw.pad = (sg_sw_pad)k;
    } else if (strcmp(a, "--pad-value") == 0) {
        if (!v || !parse_float(v, &f))
            return cli_usage_error("--pad-value wants a number"), -1;
        o->sw.pad_value = (float)f;
    } else if (strcmp(a, "--grid") == 0) {
        if (!v || (k = pick(v, grids, 2)) < 0)
            return cli_usage_error("--grid wants monai or nnunet"), -1;
        o->sw.grid = (sg_sw_grid_kind)k;
    } else if (strcmp(a, "--output-kind") == 0) {
        if (!v || !cli_sw_output_kind(o, v))
            return cli_usage_error("--output-kind wants logits, probs or labels"), -1;
    } else if (strcmp(a, "--activation") == 0) {
        if (!v || (k = pick(v, acts, 4)) < 1)
            return cli_usage_error("--activation wants softmax, sigmoid or none"), -1;
        o->sw.activation = (sg_sw_activation)k;
    } else if (strcmp(a, "--tta") == 0) {
        if (!v || strncmp(v, "mirror", 6) != 0 || (v[6] && v[6] != '='))
            return cli_usage_error("--tta wants mirror or mirror=AXES (spatial axes such as 0,2)"), -1;
        o->tta_all = v[6] == '\0';
        o->n_tta_axes = 0;
        if (!o->tta_all && (o->n_tta_axes = parse_ints(v + 7, o->tta_axes)) < 1)
            return cli_usage_error("--tta mirror=AXES wants spatial axes such as 0,2"), -1;
    } else if (strcmp(a, "--model") == 0) {
        if (!v || o->n_models == CLI_SW_MAX_MODELS)
            return cli_usage_error("--model wants an .onnx file (at most %d)", CLI_SW_MAX_MODELS), -1;
        o->models[o->n_models++] = v;
    } else if (strcmp(a, "--threshold") == 0) {
        if (!v || !parse_float(v, &f))
            return cli_usage_error("--threshold wants a number"), -1;
        o->sw.threshold = (float)f;
    } else {
        return 0;
    }
    o->any = true;
    ++*i;
    return 1;
}

/* The sliding-window options resolved against the image's rank. */
static int resolve(cli_sw_opts *so, const sg_tensor *image, const char *in)
{
    int32_t nd = so->n_roi;
    if (image->rank != nd + 2)
        return cli_usage_error("%s: a %d-D image (%d dims); --roi gives %d window dims for N x C x %d spatial",
                               in, image->rank - 2, image->rank, nd, nd);
    so->sw.n_dims = nd;
    for (int32_t d = 0; d < nd; d++) {
        so->sw.roi[d] = so->roi[d];
        so->sw.overlap[d] = so->n_overlap == 0 ? 0.25 : so->overlap[so->n_overlap == 1 ? 0 : d];
        if (so->n_overlap > 1 && so->n_overlap != nd)
            return cli_usage_error("--overlap gives %d values for %d window dims", so->n_overlap, nd);
        if (!(so->sw.overlap[d] >= 0.0 && so->sw.overlap[d] < 1.0))
            return cli_usage_error("--overlap %g: it must be in [0, 1)", so->sw.overlap[d]);
    }
    so->sw.tta_axes = so->tta_all ? (1u << nd) - 1 : 0;
    for (int32_t k = 0; k < so->n_tta_axes; k++) {
        if (so->tta_axes[k] < 0 || so->tta_axes[k] >= nd)
            return cli_usage_error("--tta mirror=%lld: a %d-D image has spatial axes 0 to %d",
                                   (long long)so->tta_axes[k], nd, nd - 1);
        so->sw.tta_axes |= 1u << so->tta_axes[k];
    }
    return CLI_OK;
}

typedef struct sw_state {
    sg_tensor image, result;
    segrt_build_options *opts;
    int32_t n;
    segrt_model *model[1 + CLI_SW_MAX_MODELS];
    segrt_engine *engine[1 + CLI_SW_MAX_MODELS];
    segrt_context *ctx[1 + CLI_SW_MAX_MODELS];
    sg_sw_model members[1 + CLI_SW_MAX_MODELS];
} sw_state;

static void sw_state_free(sw_state *st)
{
    free(st->image.data);
    free(st->result.data);
    for (int32_t m = 0; m < st->n; m++) {
        segrt_context_destroy(st->ctx[m]);
        segrt_engine_destroy(st->engine[m]);
        segrt_model_destroy(st->model[m]);
    }
    segrt_build_options_destroy(st->opts);
}

/* Model m of the ensemble loaded and built for the window batch. */
static int load_member(sw_state *st, int32_t m, const char *path, const cli_sw_opts *so, const cli_engine_opts *eo)
{
    segrt_status s;
    int rc;
    if (cli_is_plan_file(path))
        return cli_usage_error("%s: sliding windows build the engine for their window; give the .onnx model",
                               path);
    if ((s = segrt_model_load(path, &st->model[m])) != SEGRT_OK)
        return cli_fail(s);
    st->n = m + 1;
    if (segrt_model_input_count(st->model[m]) != 1)
        return cli_usage_error("%s: sliding windows feed models of one input; this one has %zu", path,
                               segrt_model_input_count(st->model[m]));
    segrt_tensor_desc d;
    if ((s = segrt_model_input(st->model[m], 0, &d)) != SEGRT_OK)
        return cli_fail(s);
    if (d.rank != st->image.rank)
        return cli_usage_error("%s: the model takes rank-%d input `%s`; the image has rank %d", path, d.rank, d.name,
                               st->image.rank);
    int64_t dims[SEGRT_MAX_RANK];
    if ((s = sg_sw_input_dims(&so->sw, &st->image, dims)) != SEGRT_OK)
        return cli_fail(s);
    segrt_build_options_destroy(st->opts);
    st->opts = NULL;
    if ((rc = cli_engine_options(eo, &st->opts)) != CLI_OK)
        return rc;
    if ((s = segrt_build_options_set_shape(st->opts, d.name, d.rank, dims)) != SEGRT_OK)
        return cli_fail(s);
    if ((rc = cli_engine_build(st->model[m], st->opts, eo, &st->engine[m], NULL)) != CLI_OK)
        return rc;
    if ((s = segrt_context_create(st->engine[m], &st->ctx[m])) != SEGRT_OK)
        return cli_fail(s);
    st->members[m] = (sg_sw_model){st->ctx[m], st->engine[m]};
    return CLI_OK;
}

/* A progress line on a terminal: windows done, rate, time left. */
typedef struct progress_line {
    double t0, last;
} progress_line;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void show_progress(void *user, int64_t done, int64_t total)
{
    progress_line *p = user;
    double t = now_s();
    if (done < total && t - p->last < 0.1)
        return;
    p->last = t;
    double rate = (double)done / (t - p->t0 > 1e-9 ? t - p->t0 : 1e-9);
    fprintf(stderr, "\rwindows %lld/%lld  %.1f/s  ETA %.1f s   ", (long long)done, (long long)total, rate,
            (double)(total - done) / (rate > 0 ? rate : 1));
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

static int sw_run(sw_state *st, const char *model, const char *in, const char *out, cli_sw_opts *so,
                  const cli_engine_opts *eo, bool quiet)
{
    segrt_status s;
    int rc;
    if (eo->n_shapes)
        return cli_usage_error("--shape does not go with --roi: the window and --sw-batch give the model's shape");
    if ((s = sg_npy_read(in, &st->image)) != SEGRT_OK)
        return cli_fail(s);
    if ((rc = resolve(so, &st->image, in)) != CLI_OK)
        return rc;
    if (st->image.dtype != SEGRT_DTYPE_FLOAT32)
        return cli_usage_error("%s: the image is %s; sliding windows read float32", in,
                               segrt_dtype_name(st->image.dtype));
    for (int32_t m = 0; m <= so->n_models; m++)
        if ((rc = load_member(st, m, m == 0 ? model : so->models[m - 1], so, eo)) != CLI_OK)
            return rc;
    progress_line pl = {now_s(), 0.0};
    if (!quiet && isatty(STDERR_FILENO)) {
        so->sw.progress = show_progress;
        so->sw.progress_user = &pl;
    }
    if ((s = sg_sliding_window(st->members, st->n, &so->sw, &st->image, &st->result)) != SEGRT_OK) {
        sg_error_prefix(s, "%s over %s: ", model, in);
        return cli_fail(s);
    }
    if ((s = sg_npy_write(out, &st->result)) != SEGRT_OK)
        return cli_fail(s);
    if (!quiet) {
        char dimtxt[256];
        printf("wrote %s %s to %s\n", segrt_dtype_name(st->result.dtype),
               sg_dims_format(st->result.dims, st->result.rank, dimtxt, sizeof dimtxt), out);
    }
    return CLI_OK;
}

int cli_sw_run(const char *model, const char *in, const char *out, cli_sw_opts *so, const cli_engine_opts *eo,
               bool quiet)
{
    sw_state st;
    memset(&st, 0, sizeof st);
    int rc = sw_run(&st, model, in, out, so, eo, quiet);
    sw_state_free(&st);
    return rc;
}
