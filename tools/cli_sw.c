/* `segrt run --roi ...` and `segrt run MODEL IMAGE.png`: the
 * sliding-window options, the checks of what the command line alone
 * decides, and the library's file job (segrt_window_job_run). */
#include "cli_sw.h"

#include "cli_files.h"
#include "cli_sw_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void cli_sw_opts_init(cli_sw_opts *o)
{
    memset(o, 0, sizeof *o);
    segrt_window_job_options_init(&o->sw, 0);
}

/* "64,64,32": 1 to CLI_SW_MAX_DIMS integers (negative allowed for roi). */
static int parse_ints(const char *s, int64_t *out)
{
    int n = 0;
    while (*s && n < CLI_SW_MAX_DIMS) {
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
    while (*s && n < CLI_SW_MAX_DIMS) {
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
    o->sw.output = (segrt_window_output)k;
    o->any = true;
    o->output_set = true;
    return true;
}

int cli_sw_option(cli_sw_opts *o, int argc, char **argv, int *i)
{
    static const char *const blends[] = {"constant", "gaussian", "gaussian-nnunet"};
    static const char *const pads[] = {"constant", "reflect", "replicate"};
    static const char *const grids[] = {"monai", "nnunet"};
    static const char *const acts[] = {"default", "none", "softmax", "sigmoid"};
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int k;
    double f;
    int64_t n;
    int taken = cli_prep_option(&o->prep, argc, argv, i);
    if (taken) {
        o->any |= taken > 0;
        return taken;
    }
    if (strcmp(a, "--roi") == 0) {
        if (!v || (o->n_roi = parse_ints(v, o->roi)) < 1)
            return cli_usage_error("--roi wants 1 to %d window sizes such as 96,96,96", CLI_SW_MAX_DIMS), -1;
        o->on = true;
    } else if (strcmp(a, "--overlap") == 0) {
        if (!v || (o->n_overlap = parse_doubles(v, o->overlap)) < 1)
            return cli_usage_error("--overlap wants a fraction in [0, 1), or one per axis"), -1;
    } else if (strcmp(a, "--sw-batch") == 0) {
        o->auto_batch = v && strcmp(v, "auto") == 0;
        if (!o->auto_batch && (!v || !cli_parse_int(v, &n) || n < 1 || n > 65536))
            return cli_usage_error("--sw-batch wants a number of windows, 1 to 65536, or auto"), -1;
        o->sw.batch = o->auto_batch ? 1 : (int32_t)n;
        o->sw.auto_batch = o->auto_batch;
    } else if (strcmp(a, "--max-memory") == 0) {
        size_t bytes;
        if (v && strcmp(v, "auto") == 0)
            o->sw.max_memory = SEGRT_MAX_MEMORY_AUTO;
        else if (!v || !cli_parse_size(v, &bytes) || bytes == 0)
            return cli_usage_error("--max-memory wants a size such as 2G or 1500M, or auto, not `%s`", v ? v : ""),
                   -1;
        else
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
        o->sw.whole_accumulators = k == 1;
        o->accumulate_set = true;
    } else if (strcmp(a, "--accumulator") == 0) {
        static const char *const types[] = {"fp32", "fp16", "bf16"};
        static const segrt_dtype dtypes[] = {SEGRT_DTYPE_FLOAT32, SEGRT_DTYPE_FLOAT16, SEGRT_DTYPE_BFLOAT16};
        if (!v || (k = pick(v, types, 3)) < 0)
            return cli_usage_error("--accumulator wants fp32, fp16 or bf16"), -1;
        o->sw.accumulator = dtypes[k];
        o->accumulator_set = true;
    } else if (strcmp(a, "--overlay") == 0) {
        if (!v)
            return cli_usage_error("--overlay wants a .png or .tif file"), -1;
        o->overlay = v;
    } else if (strcmp(a, "--mpp") == 0) {
        if (!v || !parse_float(v, &f) || !(f > 0) || f > 1e6)
            return cli_usage_error("--mpp wants microns per pixel, a number > 0 such as 0.5"), -1;
        o->sw.mpp = f;
    } else if (strcmp(a, "--tissue") == 0) {
        static const char *const kinds[] = {"otsu", "none"};
        if (!v || (k = pick(v, kinds, 2)) < 0)
            return cli_usage_error("--tissue wants otsu or none"), -1;
        o->sw.tissue = k == 0 ? SEGRT_TISSUE_OTSU : SEGRT_TISSUE_NONE;
    } else if (strcmp(a, "--tissue-mask") == 0 || strcmp(a, "--thumbnail") == 0) {
        if (!v || !*v)
            return cli_usage_error("%s wants a .png file", a), -1;
        *(strcmp(a, "--thumbnail") == 0 ? &o->sw.thumbnail_path : &o->sw.tissue_mask_path) = v;
    } else if (strcmp(a, "--geojson") == 0) {
        if (!v || !*v)
            return cli_usage_error("--geojson wants a .geojson file"), -1;
        o->sw.geojson_path = v;
    } else if (strcmp(a, "--series") == 0) {
        if (!v || !*v)
            return cli_usage_error("--series wants a DICOM SeriesInstanceUID"), -1;
        o->sw.series_uid = v;
    } else if (strcmp(a, "--allow-uneven") == 0) {
        o->sw.allow_uneven = 1;
        o->any = true;
        return 1;
    } else if (strcmp(a, "--raw-input") == 0) {
        o->raw_input = true;
        o->any = true;
        return 1;
    } else if (strcmp(a, "--host-blend") == 0) {
        o->sw.host_path = 1;
        o->any = true;
        return 1;
    } else if (strcmp(a, "--blend") == 0) {
        if (!v || (k = pick(v, blends, 3)) < 0)
            return cli_usage_error("--blend wants constant, gaussian or gaussian-nnunet"), -1;
        o->sw.blend = (segrt_window_blend)k;
        o->blend_set = true;
    } else if (strcmp(a, "--sigma-scale") == 0) {
        if (!v || !parse_float(v, &f) || !(f > 0))
            return cli_usage_error("--sigma-scale wants a number > 0"), -1;
        o->sw.sigma_scale = f;
        o->sigma_set = true;
    } else if (strcmp(a, "--pad") == 0) {
        if (!v || (k = pick(v, pads, 3)) < 0)
            return cli_usage_error("--pad wants constant, reflect or replicate"), -1;
        o->sw.pad = (segrt_window_pad)k;
    } else if (strcmp(a, "--pad-value") == 0) {
        if (!v || !parse_float(v, &f))
            return cli_usage_error("--pad-value wants a number"), -1;
        o->sw.pad_value = (float)f;
        o->pad_value_set = true;
    } else if (strcmp(a, "--grid") == 0) {
        if (!v || (k = pick(v, grids, 2)) < 0)
            return cli_usage_error("--grid wants monai or nnunet"), -1;
        o->sw.grid = (segrt_window_grid)k;
        o->grid_set = true;
    } else if (strcmp(a, "--output-kind") == 0) {
        if (!v || !cli_sw_output_kind(o, v))
            return cli_usage_error("--output-kind wants logits, probs or labels"), -1;
    } else if (strcmp(a, "--activation") == 0) {
        if (!v || (k = pick(v, acts, 4)) < 1)
            return cli_usage_error("--activation wants softmax, sigmoid or none"), -1;
        o->sw.activation = (segrt_window_activation)k;
    } else if (strcmp(a, "--tta") == 0) {
        o->tta_set = true;
        o->n_tta_axes = 0;
        o->tta_all = false;
        if (v && strcmp(v, "none") == 0) {
            ++*i;
            return 1;
        }
        if (!v || strncmp(v, "mirror", 6) != 0 || (v[6] && v[6] != '='))
            return cli_usage_error("--tta wants mirror, mirror=AXES (spatial axes such as 0,2) or none"), -1;
        o->tta_all = v[6] == '\0';
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
                                : so->accumulator_set ? "--accumulator"
                                : so->sw.host_path ? "--host-blend"
                                                   : NULL;
        if (cuda_only)
            return cli_usage_error("%s applies to CUDA devices: on the CPU the windows are blended in host memory "
                                   "(add --device cuda)",
                                   cuda_only);
    }
    const segrt_window_job_options *o = &so->sw;
    if (so->sigma_set && o->blend == SEGRT_WINDOW_BLEND_CONSTANT && !so->prep.nnunet_dir)
        return cli_usage_error("--sigma-scale applies to a Gaussian --blend (the blend is constant)");
    if (so->pad_value_set && o->pad != SEGRT_WINDOW_PAD_CONSTANT)
        return cli_usage_error("--pad-value applies to --pad constant, not the padding asked for");
    if (o->activation != SEGRT_WINDOW_ACTIVATION_DEFAULT && o->output == SEGRT_WINDOW_OUTPUT_LOGITS)
        return cli_usage_error("--activation applies to --output probs or labels; logits are written as the "
                               "network gives them");
    if (so->threshold_set &&
        !(o->output == SEGRT_WINDOW_OUTPUT_LABELS && o->activation == SEGRT_WINDOW_ACTIVATION_SIGMOID))
        return cli_usage_error("--threshold applies to --output labels with --activation sigmoid");
    if (so->raw_input && !image_file)
        return cli_usage_error("--raw-input applies to image files (PNG, JPEG, TIFF): an NPY array is read as it is");
    return CLI_OK;
}

/* The sliding-window options resolved against the image's rank. */
static int resolve(cli_sw_opts *so, const segrt_tensor *image, const char *in)
{
    int32_t nd = so->n_roi;
    if (image->rank != nd + 2)
        return cli_usage_error("%s: a %d-D image (%d dims); --roi gives %d window dims for N x C x %d spatial",
                               in, image->rank - 2, image->rank, nd, nd);
    so->sw.spatial_dims = nd;
    for (int32_t d = 0; d < nd; d++) {
        so->sw.roi[d] = so->roi[d];
        so->sw.overlap[d] = so->n_overlap == 0 ? 0.25 : so->overlap[so->n_overlap == 1 ? 0 : d];
        if (so->n_overlap > 1 && so->n_overlap != nd)
            return cli_usage_error("--overlap gives %d values for %d window dims", so->n_overlap, nd);
        if (!(so->sw.overlap[d] >= 0.0 && so->sw.overlap[d] < 1.0))
            return cli_usage_error("--overlap %g: it must be in [0, 1)", so->sw.overlap[d]);
    }
    so->sw.mirror_axes = so->tta_all ? (1u << nd) - 1 : 0;
    for (int32_t k = 0; k < so->n_tta_axes; k++) {
        if (so->tta_axes[k] < 0 || so->tta_axes[k] >= nd)
            return cli_usage_error("--tta mirror=%lld: a %d-D image has spatial axes 0 to %d",
                                   (long long)so->tta_axes[k], nd, nd - 1);
        so->sw.mirror_axes |= 1u << so->tta_axes[k];
    }
    return CLI_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct sw_state {
    int32_t n;
    const char *path[1 + CLI_SW_MAX_MODELS];
    segrt_model *model[1 + CLI_SW_MAX_MODELS];
    double load_seconds; /* reading and checking the models */
} sw_state;

static void sw_state_free(sw_state *st)
{
    for (int32_t m = 0; m < st->n; m++)
        segrt_model_destroy(st->model[m]);
}

/* Model m of the ensemble loaded and checked against the image. */
static int load_member(sw_state *st, int32_t m, const char *path)
{
    segrt_status s;
    if (cli_is_plan_file(path))
        return cli_usage_error("%s: sliding windows build the engine for their window; give the .onnx model",
                               path);
    double t0 = now_s();
    if ((s = segrt_model_load(path, &st->model[m])) != SEGRT_OK)
        return cli_fail(s);
    st->load_seconds += now_s() - t0;
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
    int32_t nd = so->sw.spatial_dims;
    if (nd == 3 && cli_files_format(out) == CLI_PNG)
        return cli_usage_error("%s: a PNG holds one 2-D picture; a 3-D job's labels go to .tif (a page a slice) or "
                               ".npy",
                               out);
    if (so->overlay && nd != 2)
        return cli_usage_error("--overlay draws over a 2-D picture; %s is a %d-D image", in, nd);
    return CLI_OK;
}

/* The job's engines: the command line's engine options with the model's
 * input bound to the window batch, through the plan cache on CUDA unless
 * --no-cache (the job builds once per member, again when --sw-batch auto
 * changes the batch). */
static segrt_status build_engine(void *user, const segrt_model *model, const char *input, int32_t rank,
                                 const int64_t *dims, segrt_engine **out)
{
    const cli_engine_opts *eo = user;
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s == SEGRT_OK && (s = segrt_build_options_set_device(opts, eo->device, eo->device_index)) == SEGRT_OK &&
        (s = segrt_build_options_set_threads(opts, (int32_t)eo->threads)) == SEGRT_OK &&
        (s = segrt_build_options_set_precision(opts, eo->precision)) == SEGRT_OK &&
        (s = segrt_build_options_set_fp32_ops(opts, eo->fp32_ops)) == SEGRT_OK &&
        (s = segrt_build_options_set_allow_cpu_fallback(opts, eo->allow_cpu_fallback)) == SEGRT_OK &&
        (!eo->workspace || (s = segrt_build_options_set_workspace(opts, eo->workspace)) == SEGRT_OK) &&
        (eo->autotune < 0 || (s = segrt_build_options_set_autotune(opts, (int32_t)eo->autotune)) == SEGRT_OK) &&
        (s = segrt_build_options_set_shape(opts, input, rank, dims)) == SEGRT_OK) {
        int hit = 0;
        if (eo->device == SEGRT_DEVICE_CUDA && !eo->no_cache)
            s = segrt_engine_build_cached(model, opts, eo->cache_dir, &hit, out);
        else
            s = segrt_engine_build(model, opts, out);
    }
    segrt_build_options_destroy(opts);
    return s;
}

static void show_notice(void *user, const char *line)
{
    (void)user;
    fprintf(stderr, "segrt: %s\n", line);
}

/* A progress line on a terminal: windows done, rate, time left; after
 * `prefix` (a folder job's case) and ended where the windows are (not
 * for a case: its own line follows). */
typedef struct progress_line {
    double t0, last;
    char prefix[160];
    bool end_line;
} progress_line;

static void show_progress(void *user, int64_t done, int64_t total)
{
    progress_line *p = user;
    double t = now_s();
    if (done == 0) { /* the windows start: the rate counts from here */
        p->t0 = t;
        return;
    }
    if (done < total && t - p->last < 0.1)
        return;
    p->last = t;
    double rate = (double)done / (t - p->t0 > 1e-9 ? t - p->t0 : 1e-9);
    fprintf(stderr, "\r%swindows %lld/%lld  %.1f/s  ETA %.1f s   ", p->prefix, (long long)done, (long long)total, rate,
            (double)(total - done) / (rate > 0 ? rate : 1));
    if (done == total && p->end_line)
        fputc('\n', stderr);
    fflush(stderr);
}

/* The summary lines of a finished job. */
static void print_summary(const char *in, const char *out, const cli_engine_opts *eo, const segrt_window_job_report *r,
                          double load_seconds)
{
    char img[128], res[128], where[64];
    cli_dims(r->image.dims, r->image.rank, img, sizeof img);
    cli_dims(r->result.dims, r->result.rank, res, sizeof res);
    static const char *const prec[] = {"fp32", "tf32", "fp16", "bf16"};
    if (eo->device == SEGRT_DEVICE_CUDA)
        snprintf(where, sizeof where, "cuda:%d %s", eo->device_index,
                 (int)eo->precision >= 0 && (int)eo->precision < 4 ? prec[eo->precision] : "?");
    else
        snprintf(where, sizeof where, "cpu fp32");
    printf("segrt: %s %s -> %s %s %s: %lld windows (%d a run), %s, %.3f s", in, img, out,
           segrt_dtype_name(r->result.dtype), res, (long long)r->windows, r->batch, where, r->seconds);
    const segrt_window_stats *st = &r->stats;
    if (st->on_device)
        printf(", blended on the GPU in %d pass%s, device memory %.2f MiB (networks %.2f + windows %.2f)", st->passes,
               st->passes == 1 ? "" : "es", (double)(st->context_bytes + st->pipeline_bytes) / 1048576.0,
               (double)st->context_bytes / 1048576.0, (double)st->pipeline_bytes / 1048576.0);
    if (st->on_device && r->strips > 1 && r->seam_host_bytes)
        printf(", %d strips (shared sums: %.2f MiB of host memory)", r->strips, (double)r->seam_host_bytes / 1048576.0);
    else if (st->on_device && r->strips > 1)
        printf(", %d strips (shared sums on the device)", r->strips);
    printf("\n");
    if (st->on_device)
        printf("segrt: host time: setup %.3f s, windows %.3f s (copying image rows %.3f, waiting for the GPU "
               "%.3f, result out %.3f)\n",
               r->times.setup, r->times.run, r->times.uploading, r->times.waiting, r->times.downloading);
    const segrt_window_job_seconds *p = &r->parts;
    printf("segrt: time: loading the model %.3f s, reading the image %.3f s, engines %.3f s, preprocessing %.3f s, "
           "windows %.3f s, labels back %.3f s, writing %.3f s\n",
           load_seconds, p->read, p->build, p->prep, p->windows, p->back, p->write);
}

/* A volume's preprocessing (cli_prep.c; in NULL: a folder's cases) and
 * what it implies for the window: an nnU-Net folder's window options where
 * the command line gave none, and labels by default wherever something is
 * preprocessed (the scores would lie in the model's grid, not the
 * volume's). */
static int volume_preprocessing(cli_sw_opts *so, const segrt_model *model, const char *in)
{
    segrt_window_job_options nn;
    bool nnunet, declared;
    int rc = cli_prep_resolve(&so->prep, model, in, &nn, &nnunet, &declared);
    if (rc != CLI_OK)
        return rc;
    if (nnunet) {
        if (!so->on) {
            so->n_roi = 3;
            memcpy(so->roi, nn.roi, sizeof so->roi);
            so->on = true;
        }
        if (so->n_overlap == 0) {
            so->n_overlap = 1;
            so->overlap[0] = nn.overlap[0];
        }
        if (!so->blend_set)
            so->sw.blend = nn.blend;
        if (!so->sigma_set)
            so->sw.sigma_scale = nn.sigma_scale;
        if (!so->grid_set)
            so->sw.grid = nn.grid;
        if (!so->tta_set)
            so->tta_all = nn.mirror_axes != 0;
    }
    if (declared && !so->output_set)
        so->sw.output = SEGRT_WINDOW_OUTPUT_LABELS;
    so->sw.preprocess = declared || so->prep.no_preprocess ? &so->prep.p : NULL;
    return CLI_OK;
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
            so->sw.output = SEGRT_WINDOW_OUTPUT_LABELS;
        /* (A whole slide's probabilities go to a .tif: the library knows
         * a slide from other images.) */
        if (so->sw.output != SEGRT_WINDOW_OUTPUT_LABELS &&
            !(so->sw.output == SEGRT_WINDOW_OUTPUT_PROBS && cli_files_format(out) == CLI_TIFF))
            return cli_usage_error("%s: an image file takes a label map; write logits or probs to .npy", out);
    }
    bool image_file = cli_is_image_file(in);
    if (cli_files_format(out) == CLI_DICOM) {
        if (segrt_file_format_of_file(in) != SEGRT_FILE_DICOM)
            return cli_usage_error("%s: a DICOM SEG (.dcm) is written over a DICOM series; %s is not one (write "
                                   ".nii.gz)",
                                   out, in);
        if (!so->output_set)
            so->sw.output = SEGRT_WINDOW_OUTPUT_LABELS;
        if (so->sw.output != SEGRT_WINDOW_OUTPUT_LABELS)
            return cli_usage_error("%s: a DICOM SEG takes a label map; write logits or probs to .npy or .nii", out);
    }
    if ((rc = check_applicable(so, eo, image_file)) != CLI_OK)
        return rc;
    if (so->overlay && !image_file)
        return cli_usage_error("--overlay draws over an image file (PNG, JPEG, TIFF); %s is an array", in);
    if (so->overlay && so->sw.output != SEGRT_WINDOW_OUTPUT_LABELS)
        return cli_usage_error("--overlay draws labels: add --output labels");
    for (int32_t m = 0; m <= so->n_models; m++)
        if ((rc = load_member(st, m, m == 0 ? model : so->models[m - 1])) != CLI_OK)
            return rc;
    segrt_tensor shape;
    if ((rc = volume_preprocessing(so, st->model[0], in)) != CLI_OK ||
        (rc = cli_sw_model_defaults(st->model[0], model, so)) != CLI_OK)
        return rc;
    if ((s = segrt_window_job_probe_with(&so->sw, in, &shape, NULL)) != SEGRT_OK)
        return cli_fail(s);
    if ((rc = resolve(so, &shape, in)) != CLI_OK)
        return rc;
    if (shape.dtype != SEGRT_DTYPE_FLOAT32)
        return cli_usage_error("%s: the image is %s; sliding windows read float32", in, segrt_dtype_name(shape.dtype));
    if ((rc = check_ranks(st, shape.rank)) != CLI_OK || (rc = check_outputs_suit(so, in, out)) != CLI_OK)
        return rc;
    /* The job builds the engines from the image's header, checks the host
     * memory, reads the image and runs the windows. */
    segrt_window_job_options jo = so->sw;
    jo.max_host_memory_name = "--max-host-memory";
    jo.build = build_engine;
    jo.build_user = (void *)eo;
    jo.slide_threads = (int32_t)eo->threads; /* a slide's readers: the host's threads */
    if (!quiet)
        jo.notice = show_notice;
    progress_line pl = {now_s(), 0.0, "", true};
    if (!quiet && isatty(STDERR_FILENO)) {
        jo.progress = show_progress;
        jo.progress_user = &pl;
    }
    segrt_window_job_report report;
    s = segrt_window_job_run(&jo, st->model, st->path, (size_t)st->n, in, files->out[0].out,
                             so->overlay ? files->out[1].out : NULL, &report);
    if (s != SEGRT_OK && report.write_failed) {
        /* A write into a checked, open output fails only at run time (a
         * full disk, say). */
        fprintf(stderr, "segrt: %s\n", segrt_last_error());
        return CLI_RUNTIME;
    }
    if (s != SEGRT_OK)
        return cli_fail(s);
    /* Committing flushes the outputs to disk (fsync), which for a large
     * result takes as long as writing it: counted as writing. */
    double tc = now_s();
    if ((rc = cli_files_commit(files, 0)) != CLI_OK || (so->overlay && (rc = cli_files_commit(files, 1)) != CLI_OK))
        return rc;
    report.parts.write += now_s() - tc;
    if (!quiet)
        print_summary(in, out, eo, &report, st->load_seconds);
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
    cli_files_output(&files, out, "-o", CLI_NPY | CLI_PNG | CLI_TIFF | CLI_NIFTI | CLI_DICOM);
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

/* --- a folder of cases (`segrt run MODEL -i IN_DIR -o OUT_DIR`) ---------- */

/* What the folder's progress line shows: the case that runs, and its
 * windows (show_progress's line, prefixed). */
typedef struct cases_line {
    bool tty, quiet;
    progress_line windows; /* the case's, prefixed with its place and name */
} cases_line;

static void show_case(void *user, const segrt_case_info *c)
{
    cases_line *p = user;
    if (c->state == SEGRT_CASE_STARTED) {
        snprintf(p->windows.prefix, sizeof p->windows.prefix, "case %zu/%zu %s: ", c->index + 1, c->count, c->name);
        if (p->tty && !p->quiet) {
            fprintf(stderr, "\rcase %zu/%zu %s: read (%d x %lldx%lldx%lld)   ", c->index + 1, c->count, c->name,
                    c->channels, (long long)c->dims[0], (long long)c->dims[1], (long long)c->dims[2]);
            fflush(stderr);
        }
        return;
    }
    if (p->tty && !p->quiet)
        fputs("\r\033[K", stderr); /* the progress line gives way to the case's own */
    if (c->state == SEGRT_CASE_FAILED) {
        fprintf(stderr, "segrt: case %zu/%zu %s failed: %s\n", c->index + 1, c->count, c->name, c->error);
        return;
    }
    if (p->quiet)
        return;
    if (c->state == SEGRT_CASE_SKIPPED)
        printf("segrt: case %zu/%zu %s: skipped, %s exists\n", c->index + 1, c->count, c->name, c->output);
    else
        printf("segrt: case %zu/%zu %s -> %s (%d x %lldx%lldx%lld): read %.3f s, run %.3f s, write %.3f s, "
               "total %.3f s\n",
               c->index + 1, c->count, c->name, c->output, c->channels, (long long)c->dims[0], (long long)c->dims[1],
               (long long)c->dims[2], c->seconds_read, c->seconds_run, c->seconds_write, c->seconds_total);
    fflush(stdout);
}

/* The model's input rank: a folder's volumes take it (1 x C x D x H x W). */
static int model_rank(const sw_state *st, int32_t *rank)
{
    segrt_tensor_desc d;
    segrt_status s = segrt_model_input(st->model[0], 0, &d);
    if (s != SEGRT_OK)
        return cli_fail(s);
    *rank = d.rank;
    return CLI_OK;
}

static int cases_run(sw_state *st, const char *model, const char *in_dir, const char *out_dir, cli_sw_opts *so,
                     const cli_engine_opts *eo, bool quiet, const cli_cases_opts *co)
{
    segrt_status s;
    int rc;
    if (eo->n_shapes)
        return cli_usage_error("--shape does not go with a folder of cases: the window and --sw-batch give the "
                               "model's shape");
    if (so->overlay)
        return cli_usage_error("--overlay draws over a 2-D picture; a folder's cases are volumes");
    if ((rc = check_applicable(so, eo, false)) != CLI_OK)
        return rc;
    if (!so->output_set)
        so->sw.output = SEGRT_WINDOW_OUTPUT_LABELS; /* nnU-Net's results: a label map per case */
    for (int32_t m = 0; m <= so->n_models; m++)
        if ((rc = load_member(st, m, m == 0 ? model : so->models[m - 1])) != CLI_OK)
            return rc;
    if ((rc = volume_preprocessing(so, st->model[0], NULL)) != CLI_OK ||
        (rc = cli_sw_model_defaults(st->model[0], model, so)) != CLI_OK)
        return rc;
    int32_t rank = 0;
    if ((rc = model_rank(st, &rank)) != CLI_OK)
        return rc;
    segrt_tensor shape;
    memset(&shape, 0, sizeof shape);
    shape.rank = rank;
    if ((rc = resolve(so, &shape, model)) != CLI_OK || (rc = check_ranks(st, rank)) != CLI_OK)
        return rc;
    segrt_window_job_options jo = so->sw;
    jo.max_host_memory_name = "--max-host-memory";
    jo.build = build_engine;
    jo.build_user = (void *)eo;
    if (!quiet)
        jo.notice = show_notice;
    cases_line line;
    memset(&line, 0, sizeof line);
    line.tty = isatty(STDERR_FILENO);
    line.quiet = quiet;
    if (!quiet && line.tty) {
        jo.progress = show_progress;
        jo.progress_user = &line.windows;
    }
    segrt_cases_options c;
    segrt_cases_options_init(&c);
    c.in_dir = in_dir;
    c.out_dir = out_dir;
    c.extension = co->extension;
    c.skip_existing = co->skip_existing;
    c.no_prefetch = co->no_prefetch;
    c.on_case = show_case;
    c.on_case_user = &line;
    segrt_cases_report r;
    s = segrt_cases_run(&jo, st->model, st->path, (size_t)st->n, &c, &r);
    if (s == SEGRT_OK || s == SEGRT_ERROR_CASES_FAILED) {
        if (!quiet)
            printf("segrt: %zu cases: %zu done, %zu skipped, %zu failed, %.3f s; summary in %s/summary.json\n", r.cases,
                   r.done, r.skipped, r.failed, r.seconds, out_dir);
        if (s != SEGRT_OK)
            fprintf(stderr, "segrt: %s\n", segrt_last_error());
        rc = s == SEGRT_OK ? CLI_OK : CLI_RUNTIME;
    } else {
        rc = cli_fail(s);
    }
    segrt_cases_report_free(&r);
    return rc;
}

int cli_cases_option(cli_cases_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (strcmp(a, "--continue") == 0) {
        o->skip_existing = 1;
    } else if (strcmp(a, "--no-prefetch") == 0) {
        o->no_prefetch = 1;
    } else if (strcmp(a, "--ext") == 0) {
        const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
        if (!v || (strcmp(v, ".nii.gz") != 0 && strcmp(v, ".nii") != 0))
            return cli_usage_error("--ext wants .nii.gz or .nii"), -1;
        o->extension = v;
        ++*i;
    } else {
        return 0;
    }
    o->on = true;
    return 1;
}

int cli_cases_run(const char *model, const char *in_dir, const char *out_dir, cli_sw_opts *so,
                  const cli_engine_opts *eo, bool quiet, const cli_cases_opts *co)
{
    struct stat st_out;
    if (stat(out_dir, &st_out) != 0 && mkdir(out_dir, 0777) != 0)
        return cli_usage_error("%s: cannot create the results' folder: %s", out_dir, strerror(errno));
    cli_files files;
    memset(&files, 0, sizeof files);
    cli_files_input(&files, model, "the model");
    for (int32_t m = 0; m < so->n_models; m++)
        cli_files_input(&files, so->models[m], "the --model");
    int rc = cli_files_check(&files, false);
    if (rc != CLI_OK)
        return rc;
    sw_state st;
    memset(&st, 0, sizeof st);
    rc = cases_run(&st, model, in_dir, out_dir, so, eo, quiet, co);
    sw_state_free(&st);
    return rc;
}
