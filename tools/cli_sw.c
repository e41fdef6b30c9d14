/* `segrt run --roi ...`: sliding-window inference from an NPY image to an
 * NPY result. */
#include "cli_sw.h"

#include "core/tensor.h"
#include "cli_files.h"
#include "cli_sw_io.h"
#include "io/npy.h"
#include "pipeline/sw_device.h"

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
    o->output_set = true;
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
        o->auto_batch = v && strcmp(v, "auto") == 0;
        if (!o->auto_batch && (!v || !cli_parse_int(v, &n) || n < 1 || n > 65536))
            return cli_usage_error("--sw-batch wants a number of windows, 1 to 65536, or auto"), -1;
        o->sw.sw_batch = o->auto_batch ? 1 : (int32_t)n;
    } else if (strcmp(a, "--max-memory") == 0) {
        size_t bytes;
        if (!v || !cli_parse_size(v, &bytes) || bytes == 0)
            return cli_usage_error("--max-memory wants a size such as 2G or 1500M, not `%s`", v ? v : ""), -1;
        o->sw.max_memory = bytes;
    } else if (strcmp(a, "--max-host-memory") == 0) {
        size_t bytes;
        if (!v || !cli_parse_size(v, &bytes) || bytes == 0)
            return cli_usage_error("--max-host-memory wants a size such as 8G or 1500M, not `%s`", v ? v : ""), -1;
        o->sw.max_host_memory = bytes;
    } else if (strcmp(a, "--accumulate") == 0) {
        static const char *const accs[] = {"slabs", "whole"};
        if (!v || (k = pick(v, accs, 2)) < 0)
            return cli_usage_error("--accumulate wants slabs or whole"), -1;
        o->sw.whole = k == 1;
        o->accumulate_set = true;
    } else if (strcmp(a, "--overlay") == 0) {
        if (!v)
            return cli_usage_error("--overlay wants a .png or .tif file"), -1;
        o->overlay = v;
    } else if (strcmp(a, "--raw-input") == 0) {
        o->raw_input = true;
        o->any = true;
        return 1;
    } else if (strcmp(a, "--host-blend") == 0) {
        o->sw.host_path = true;
        o->any = true;
        return 1;
    } else if (strcmp(a, "--blend") == 0) {
        if (!v || (k = pick(v, blends, 2)) < 0)
            return cli_usage_error("--blend wants constant or gaussian"), -1;
        o->sw.blend = (sg_sw_blend)k;
    } else if (strcmp(a, "--sigma-scale") == 0) {
        if (!v || !parse_float(v, &f) || !(f > 0))
            return cli_usage_error("--sigma-scale wants a number > 0"), -1;
        o->sw.sigma_scale = f;
        o->sigma_set = true;
    } else if (strcmp(a, "--pad") == 0) {
        if (!v || (k = pick(v, pads, 3)) < 0)
            return cli_usage_error("--pad wants constant, reflect or replicate"), -1;
        o->sw.pad = (sg_sw_pad)k;
    } else if (strcmp(a, "--pad-value") == 0) {
        if (!v || !parse_float(v, &f))
            return cli_usage_error("--pad-value wants a number"), -1;
        o->sw.pad_value = (float)f;
        o->pad_value_set = true;
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
        o->threshold_set = true;
    } else {
        return 0;
    }
    o->any = true;
    ++*i;
    return 1;
}

/* Every option given applies to this job: CUDA's options are not taken on
 * the CPU, and an option another one makes moot is refused rather than
 * ignored. Run once the output kind is known. */
static int check_applicable(const cli_sw_opts *so, const cli_engine_opts *eo, bool image_file)
{
    int rc;
    if ((rc = cli_engine_check_cpu(eo)) != CLI_OK)
        return rc;
    if (eo->device == SEGRT_DEVICE_CPU) {
        const char *cuda_only = so->sw.max_memory ? "--max-memory"
                                : so->accumulate_set ? "--accumulate"
                                : so->sw.host_path ? "--host-blend"
                                                   : NULL;
        if (cuda_only)
            return cli_usage_error("%s applies to CUDA devices: on the CPU the windows are blended in host memory "
                                   "(add --device cuda)",
                                   cuda_only);
    }
    const sg_sw_options *o = &so->sw;
    if (so->sigma_set && o->blend != SG_SW_BLEND_GAUSSIAN)
        return cli_usage_error("--sigma-scale applies to --blend gaussian (the blend is constant)");
    if (so->pad_value_set && o->pad != SG_SW_PAD_CONSTANT)
        return cli_usage_error("--pad-value applies to --pad constant, not the padding asked for");
    if (o->activation != SG_SW_ACTIVATION_DEFAULT && o->output == SG_SW_OUTPUT_LOGITS)
        return cli_usage_error("--activation applies to --output probs or labels; logits are written as the "
                               "network gives them");
    if (so->threshold_set && !(o->output == SG_SW_OUTPUT_LABELS && o->activation == SG_SW_ACTIVATION_SIGMOID))
        return cli_usage_error("--threshold applies to --output labels with --activation sigmoid");
    if (so->raw_input && !image_file)
        return cli_usage_error("--raw-input applies to image files (PNG, JPEG, TIFF): an NPY array is read as it is");
    return CLI_OK;
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
    sg_image pixels; /* an image file's pixels, for the overlay */
    segrt_build_options *opts;
    int32_t n;
    const char *path[1 + CLI_SW_MAX_MODELS];
    segrt_model *model[1 + CLI_SW_MAX_MODELS];
    segrt_engine *engine[1 + CLI_SW_MAX_MODELS];
    segrt_context *ctx[1 + CLI_SW_MAX_MODELS];
    sg_sw_model members[1 + CLI_SW_MAX_MODELS];
} sw_state;

static void drop_engines(sw_state *st)
{
    for (int32_t m = 0; m < st->n; m++) {
        segrt_context_destroy(st->ctx[m]);
        segrt_engine_destroy(st->engine[m]);
        st->ctx[m] = NULL;
        st->engine[m] = NULL;
    }
}

static void sw_state_free(sw_state *st)
{
    sg_image_free(&st->pixels);
    free(st->image.data);
    free(st->result.data);
    drop_engines(st);
    for (int32_t m = 0; m < st->n; m++)
        segrt_model_destroy(st->model[m]);
    segrt_build_options_destroy(st->opts);
}

/* Model m of the ensemble loaded and checked against the image. */
static int load_member(sw_state *st, int32_t m, const char *path)
{
    segrt_status s;
    if (cli_is_plan_file(path))
        return cli_usage_error("%s: sliding windows build the engine for their window; give the .onnx model",
                               path);
    if ((s = segrt_model_load(path, &st->model[m])) != SEGRT_OK)
        return cli_fail(s);
    st->n = m + 1;
    st->path[m] = path;
    if (segrt_model_input_count(st->model[m]) != 1)
        return cli_usage_error("%s: sliding windows feed models of one input; this one has %zu", path,
                               segrt_model_input_count(st->model[m]));
    return CLI_OK;
}

/* Every member takes an input of the image's rank. */
static int check_ranks(const sw_state *st, int32_t rank)
{
    segrt_status s;
    for (int32_t m = 0; m < st->n; m++) {
        segrt_tensor_desc d;
        if ((s = segrt_model_input(st->model[m], 0, &d)) != SEGRT_OK)
            return cli_fail(s);
        if (d.rank != rank)
            return cli_usage_error("%s: the model takes rank-%d input `%s`; the image has rank %d", st->path[m],
                                   d.rank, d.name, rank);
    }
    return CLI_OK;
}

/* Before anything is read: the image's shape, from its header, against
 * the outputs asked for. */
static int check_outputs_suit(const cli_sw_opts *so, const char *in, const char *out)
{
    int32_t nd = so->sw.n_dims;
    if (nd == 3 && cli_files_format(out) == CLI_PNG)
        return cli_usage_error("%s: a PNG holds one 2-D picture; a 3-D job's labels go to .tif (a page a slice) or "
                               ".npy",
                               out);
    if (so->overlay && nd != 2)
        return cli_usage_error("--overlay draws over a 2-D picture; %s is a %d-D image", in, nd);
    return CLI_OK;
}

/* Once the engines are built (from the image's header), before the image
 * is read: the host memory the job will hold (the image with its pixels
 * and the decoder's scratch, accumulators, windows, result, the CPU
 * engines' arenas) against --max-host-memory (exit 2) and what the
 * machine has (exit 1). The library checks again before it allocates. */
static int check_host_memory(const sw_state *st, const cli_sw_opts *so, const char *in, int64_t classes,
                             uint64_t extra_bytes)
{
    uint64_t networks = 0;
    for (int32_t m = 0; m < st->n; m++) {
        segrt_engine_info info;
        if (segrt_engine_get_info(st->engine[m], &info) == SEGRT_OK && info.device == SEGRT_DEVICE_CPU)
            networks += info.arena_bytes + info.workspace_bytes;
    }
    bool device_path = !so->sw.host_path && sg_sw_device_capable(st->members, st->n);
    sg_sw_host_need need;
    segrt_status s = sg_sw_host_need_of(&so->sw, st->image.dims, classes, device_path, extra_bytes, networks, &need);
    if (s == SEGRT_OK)
        s = sg_sw_host_need_check(&so->sw, &need, networks, "--max-host-memory");
    if (s != SEGRT_OK) {
        sg_error_prefix(s, "%s: ", in);
        return cli_fail(s);
    }
    return CLI_OK;
}

/* Once the engines are built, before the windows run: the class count
 * (*classes_out), and whether the result can be written where -o says (an
 * image file takes one label map: one image, one channel). */
static int check_result_fits(const sw_state *st, const cli_sw_opts *so, const char *out, int64_t *classes_out)
{
    sg_sw_grid g;
    segrt_tensor in, t[SG_SW_MAX_OUTPUTS];
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = st->image.rank;
    size_t n = 0;
    int64_t classes = 0;
    segrt_status s = sg_sw_grid_make(so->sw.n_dims, st->image.dims + 2, so->sw.roi, so->sw.overlap, so->sw.grid, &g);
    if (s != SEGRT_OK)
        return cli_fail(s);
    s = sg_sw_input_dims(&so->sw, &st->image, in.dims);
    if (s == SEGRT_OK)
        s = sg_sw_model_outputs(st->members, 0, &so->sw, g.roi, &in, &n, t, &classes);
    sg_sw_grid_free(&g);
    if (s != SEGRT_OK)
        return cli_fail(s);
    *classes_out = classes;
    if (!cli_sw_is_image_output(out))
        return CLI_OK;
    if (st->image.dims[0] != 1)
        return cli_usage_error("%s: an image file holds the labels of one image; this job has %lld (write .npy)", out,
                               (long long)st->image.dims[0]);
    if (sg_sw_effective_activation(&so->sw) == SG_SW_ACTIVATION_SIGMOID && classes > 1)
        return cli_usage_error("%s: sigmoid labels are a mask per class (%lld here); an image file holds one label "
                               "map (write .npy)",
                               out, (long long)classes);
    return CLI_OK;
}

/* Every member's engine and context for the options' window batch. */
static int build_members(sw_state *st, const cli_sw_opts *so, const cli_engine_opts *eo)
{
    segrt_status s;
    int rc;
    drop_engines(st);
    int64_t dims[SEGRT_MAX_RANK];
    if ((s = sg_sw_input_dims(&so->sw, &st->image, dims)) != SEGRT_OK)
        return cli_fail(s);
    for (int32_t m = 0; m < st->n; m++) {
        segrt_tensor_desc d;
        if ((s = segrt_model_input(st->model[m], 0, &d)) != SEGRT_OK)
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
    }
    return CLI_OK;
}

/* --sw-batch auto on CUDA: from the engines built for one window, the
 * largest batch whose activations, window buffers and accumulators fit
 * the budget (--max-memory, else the device's free memory), at most one
 * batch per image's windows and 64. Estimates: a run that still runs out
 * halves it (sw_run). */
static int32_t auto_batch(sw_state *st, const cli_sw_opts *so, int32_t device)
{
    sg_sw_grid g;
    if (sg_sw_grid_make(so->sw.n_dims, st->image.dims + 2, so->sw.roi, so->sw.overlap, so->sw.grid, &g) != SEGRT_OK)
        return 1;
    int64_t roi_numel = 1, pad_plane = 1, plane = 1;
    for (int32_t d = 0; d < g.n_dims; d++) {
        roi_numel *= g.roi[d];
        if (d > 0) {
            pad_plane *= g.padded[d];
            plane *= g.size[d];
        }
    }
    int64_t windows = g.n_windows, rows = g.roi[0] < g.padded[0] ? g.roi[0] : g.padded[0];
    sg_sw_grid_free(&g);
    int64_t C = st->image.dims[1], K = 1;
    uint64_t held = 0, fixed = 0, per_window = 0;
    for (int32_t m = 0; m < st->n; m++) {
        segrt_engine_info info;
        segrt_tensor in = {0}, y[16];
        in.dtype = SEGRT_DTYPE_FLOAT32;
        in.rank = st->image.rank;
        sg_sw_input_dims(&so->sw, &st->image, in.dims);
        if (segrt_engine_get_info(st->engine[m], &info) != SEGRT_OK ||
            segrt_engine_output_shapes(st->engine[m], 1, &in, segrt_engine_output_count(st->engine[m]) < 16
                                                               ? segrt_engine_output_count(st->engine[m]) : 16,
                                       y) != SEGRT_OK)
            return 1;
        K = y[0].rank > 1 ? y[0].dims[1] : 1;
        held += info.weight_bytes + info.arena_bytes + info.workspace_bytes;
        fixed += info.weight_bytes + info.workspace_bytes;
        per_window += info.arena_bytes;
    }
    int32_t flips = 1 << __builtin_popcount(so->sw.tta_axes);
    per_window += 4u * (uint64_t)roi_numel * (uint64_t)(C + K * (1 + (flips > 1) + (st->n > 1)));
    fixed += 4u * (uint64_t)((K + 1) * rows * pad_plane) + 4u * (uint64_t)(C * 2 * rows * plane);
    uint64_t budget = so->sw.max_memory;
    if (!budget) {
        segrt_device_info di;
        if (segrt_cuda_device_info(device, &di) != SEGRT_OK)
            return 1;
        budget = di.free_memory_bytes + held;
    }
    budget = budget / 10 * 9; /* room for what the estimate misses */
    int64_t b = budget > fixed ? (int64_t)((budget - fixed) / per_window) : 1;
    b = b < windows ? b : windows;
    b = b < 64 ? b : 64;
    return b < 1 ? 1 : (int32_t)b;
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

/* One windowed run: on the device path with its statistics when every
 * member runs on CUDA, else the host path. */
static sg_status run_windows(sw_state *st, const cli_sw_opts *so, sg_sw_stats *stats, bool *on_device)
{
    memset(stats, 0, sizeof *stats);
    free(st->result.data);
    memset(&st->result, 0, sizeof st->result);
    *on_device = !so->sw.host_path && sg_sw_device_capable(st->members, st->n);
    SG_TRY(sg_sw_check_host_memory(st->members, st->n, &so->sw, st->image.rank, st->image.dims, true, *on_device,
                                   "--max-host-memory"));
    if (!*on_device)
        return sg_sliding_window(st->members, st->n, &so->sw, &st->image, &st->result);
    segrt_tensor in, res;
    memset(&in, 0, sizeof in);
    in.dtype = st->image.dtype;
    in.rank = st->image.rank;
    memcpy(in.dims, st->image.dims, sizeof in.dims);
    in.data = st->image.data;
    in.memory = SEGRT_MEMORY_HOST;
    SG_TRY(sg_sw_device_run(st->members, st->n, &so->sw, &in, SEGRT_MEMORY_HOST, &res, stats));
    st->result.dtype = res.dtype;
    st->result.rank = res.rank;
    memcpy(st->result.dims, res.dims, sizeof st->result.dims);
    st->result.data = res.data;
    return SEGRT_OK;
}

static int sw_run(sw_state *st, const char *model, const char *in, const char *out, cli_sw_opts *so,
                  const cli_engine_opts *eo, bool quiet, cli_files *files)
{
    segrt_status s;
    int rc;
    if (eo->n_shapes)
        return cli_usage_error("--shape does not go with --roi: the window and --sw-batch give the model's shape");
    /* Everything the command line alone decides, before any work. */
    if (cli_sw_is_image_output(out)) {
        if (!so->output_set)
            so->sw.output = SG_SW_OUTPUT_LABELS;
        if (so->sw.output != SG_SW_OUTPUT_LABELS)
            return cli_usage_error("%s: an image file takes a label map; write logits or probs to .npy", out);
    }
    bool image_file = sg_image_is_image_file(in);
    if ((rc = check_applicable(so, eo, image_file)) != CLI_OK)
        return rc;
    if (so->overlay && !image_file)
        return cli_usage_error("--overlay draws over an image file (PNG, JPEG, TIFF); %s is an array", in);
    if (so->overlay && so->sw.output != SG_SW_OUTPUT_LABELS)
        return cli_usage_error("--overlay draws labels: add --output labels");
    for (int32_t m = 0; m <= so->n_models; m++)
        if ((rc = load_member(st, m, m == 0 ? model : so->models[m - 1])) != CLI_OK)
            return rc;
    sg_tensor shape;
    uint64_t extra_bytes;
    if ((rc = cli_sw_model_defaults(st->model[0], model, so)) != CLI_OK ||
        (rc = cli_sw_probe_input(in, &shape, &extra_bytes)) != CLI_OK || (rc = resolve(so, &shape, in)) != CLI_OK)
        return rc;
    if (shape.dtype != SEGRT_DTYPE_FLOAT32)
        return cli_usage_error("%s: the image is %s; sliding windows read float32", in, segrt_dtype_name(shape.dtype));
    if ((rc = check_ranks(st, shape.rank)) != CLI_OK || (rc = check_outputs_suit(so, in, out)) != CLI_OK)
        return rc;
    /* The engines are built for the window from the image's header; the
     * image is read once they are, and the memory check passed. */
    st->image = shape;
    bool cuda = eo->device == SEGRT_DEVICE_CUDA;
    if (so->auto_batch)
        so->sw.sw_batch = 1;
    if ((rc = build_members(st, so, eo)) != CLI_OK)
        return rc;
    if (so->auto_batch && cuda) {
        int32_t b = auto_batch(st, so, eo->device_index);
        if (b > 1) {
            so->sw.sw_batch = b;
            if ((rc = build_members(st, so, eo)) != CLI_OK)
                return rc;
        }
    }
    int64_t classes = 0;
    if ((rc = check_result_fits(st, so, out, &classes)) != CLI_OK ||
        (rc = check_host_memory(st, so, in, classes, extra_bytes)) != CLI_OK ||
        (rc = cli_sw_read_input(in, st->model[0], model, so->raw_input, &st->image, &st->pixels)) != CLI_OK)
        return rc;
    if (st->image.rank != shape.rank || memcmp(st->image.dims, shape.dims, sizeof(int64_t) * (size_t)shape.rank))
        return cli_usage_error("%s: the file changed while segrt read it", in);
    progress_line pl = {now_s(), 0.0};
    if (!quiet && isatty(STDERR_FILENO)) {
        so->sw.progress = show_progress;
        so->sw.progress_user = &pl;
    }
    sg_sw_stats stats;
    bool on_device = false;
    double t0 = now_s();
    while ((s = run_windows(st, so, &stats, &on_device)) == SEGRT_ERROR_OUT_OF_MEMORY && so->auto_batch &&
           so->sw.sw_batch > 1) {
        if (!quiet)
            fprintf(stderr, "segrt: out of device memory with %d windows a run; retrying with %d\n", so->sw.sw_batch,
                    so->sw.sw_batch / 2);
        so->sw.sw_batch /= 2;
        if ((rc = build_members(st, so, eo)) != CLI_OK)
            return rc;
        t0 = now_s();
    }
    double seconds = now_s() - t0;
    if (s != SEGRT_OK) {
        sg_error_prefix(s, "%s over %s: ", model, in);
        return cli_fail(s);
    }
    if ((rc = cli_sw_write_result(files->out[0].out, &st->result)) != CLI_OK ||
        (so->overlay && (rc = cli_sw_write_overlay(files->out[1].out, &st->pixels, &st->result)) != CLI_OK))
        return rc;
    if ((rc = cli_files_commit(files, 0)) != CLI_OK || (so->overlay && (rc = cli_files_commit(files, 1)) != CLI_OK))
        return rc;
    if (!quiet) {
        char img[128], res[128], where[64];
        sg_dims_format(st->image.dims, st->image.rank, img, sizeof img);
        sg_dims_format(st->result.dims, st->result.rank, res, sizeof res);
        static const char *const prec[] = {"fp32", "tf32", "fp16", "bf16"};
        if (cuda)
            snprintf(where, sizeof where, "cuda:%d %s", eo->device_index,
                     (int)eo->precision >= 0 && (int)eo->precision < 4 ? prec[eo->precision] : "?");
        else
            snprintf(where, sizeof where, "cpu fp32");
        sg_sw_grid g;
        int64_t windows = 0;
        if (sg_sw_grid_make(so->sw.n_dims, st->image.dims + 2, so->sw.roi, so->sw.overlap, so->sw.grid, &g) ==
            SEGRT_OK) {
            windows = g.n_windows * st->image.dims[0];
            sg_sw_grid_free(&g);
        }
        printf("segrt: %s %s -> %s %s %s: %lld windows (%d a run), %s, %.3f s", in, img, out,
               segrt_dtype_name(st->result.dtype), res, (long long)windows, so->sw.sw_batch, where, seconds);
        if (on_device)
            printf(", blended on the GPU in %d pass%s, device memory %.2f MiB (networks %.2f + windows %.2f)",
                   stats.passes, stats.passes == 1 ? "" : "es",
                   (double)(stats.context_bytes + stats.pipeline_bytes) / 1048576.0,
                   (double)stats.context_bytes / 1048576.0, (double)stats.pipeline_bytes / 1048576.0);
        printf("\n");
        if (on_device)
            printf("segrt: host time: setup %.3f s, windows %.3f s (copying image rows %.3f, waiting for the GPU "
                   "%.3f, result out %.3f)\n",
                   stats.seconds_setup, stats.seconds_run, stats.seconds_uploading, stats.seconds_waiting,
                   stats.seconds_downloading);
    }
    return CLI_OK;
}

int cli_sw_run(const char *model, const char *in, const char *out, cli_sw_opts *so, const cli_engine_opts *eo,
               bool quiet)
{
    cli_files files;
    memset(&files, 0, sizeof files);
    cli_files_input(&files, model, "the model");
    for (int32_t m = 0; m < so->n_models; m++)
        cli_files_input(&files, so->models[m], "the --model");
    cli_files_input(&files, in, "the image");
    cli_files_output(&files, out, "-o", CLI_NPY | CLI_PNG | CLI_TIFF);
    if (so->overlay)
        cli_files_output(&files, so->overlay, "--overlay", CLI_PNG | CLI_TIFF);
    int rc = cli_files_check(&files, true);
    if (rc != CLI_OK)
        return rc;
    sw_state st;
    memset(&st, 0, sizeof st);
    rc = sw_run(&st, model, in, out, so, eo, quiet, &files);
    sw_state_free(&st);
    cli_files_close(&files);
    return rc;
}
