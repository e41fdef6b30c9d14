/* `segrt run` over an image larger than the model's window: the
 * sliding-window options, their checks, and the file job of the library
 * (segrt_window_job_run) that runs them. */
#ifndef SEGRT_CLI_SW_H
#define SEGRT_CLI_SW_H

#include "cli_engine.h"
#include "cli_prep.h"

#define CLI_SW_MAX_MODELS 16
#define CLI_SW_MAX_DIMS 3 /* spatial dims of a window */

typedef struct cli_sw_opts {
    bool on;                    /* --roi given */
    int32_t n_roi;
    int64_t roi[CLI_SW_MAX_DIMS];
    int32_t n_overlap;          /* 0: the default; 1: every axis; else one per axis */
    double overlap[CLI_SW_MAX_DIMS];
    segrt_window_job_options sw; /* the rest, parsed into place */
    bool any;                   /* some sliding-window option was given */
    bool tta_all;               /* --tta mirror: every spatial axis */
    int32_t n_tta_axes;         /* --tta mirror=AXES */
    int64_t tta_axes[CLI_SW_MAX_DIMS];
    int32_t n_models;           /* --model: ensemble members after MODEL */
    const char *models[CLI_SW_MAX_MODELS];
    bool auto_batch;            /* --sw-batch auto */
    bool output_set;            /* --output-kind (or --output KIND) given */
    const char *overlay;        /* --overlay PATH */
    bool raw_input;             /* --raw-input: no normalisation of image files */
    /* Given on the command line, for the check that each applies. */
    bool accumulate_set, accumulator_set, sigma_set, pad_value_set, threshold_set;
    /* ... and those an nnU-Net folder's window options must not override. */
    bool blend_set, grid_set, tta_set;
    cli_prep_opts prep; /* a volume's preprocessing */
} cli_sw_opts;

#define CLI_SW_USAGE                                                                                  \
    "sliding window (an image larger than the model's window; -o OUT takes the result):\n"           \
    "  IMAGE is .npy (float32 N x C x spatial) or PNG, JPEG or TIFF (8/16-bit grey or RGB), which\n" \
    "  is normalised as the model's metadata says (segrt.input.scale/mean/std), or a volume: NIfTI\n" \
    "  (.nii, .nii.gz) or DICOM (a file, or a folder holding a series), read as its values (HU for\n"\
    "  CT). OUT is .npy; .png/.tif for a label map; .nii/.nii.gz in a volume's own grid (its\n"     \
    "  spacing, origin and orientation); .dcm for a DICOM series' labels as a DICOM SEG referencing\n"\
    "  its slices (segments named by the model's segrt.classes). The window and overlap default to\n"\
    "  the model's segrt.roi and segrt.overlap metadata, so `segrt run MODEL IMAGE.png -o\n"         \
    "  LABELS.png` needs nothing else.\n"                                                            \
    "  --series UID              the DICOM series to read where a folder holds several\n"          \
    "  --allow-uneven            a DICOM series with missing slices or uneven spacing: resample it to\n"\
    "                            even spacing along the normal (with a warning) instead of refusing\n"\
    "  --overlay PATH.png        also write the image with the labels tinted and outlined\n"       \
    "  whole slides (any file OpenSlide reads, or a pyramidal tiled TIFF; OUT must be .tif: a tiled\n" \
    "  pyramidal BigTIFF of labels, streamed, host memory bounded):\n"                           \
    "  --mpp UM                  microns per pixel the windows run at (default: the model's segrt.mpp,\n"\
    "                            else the slide's full resolution); the nearest finer level is read,\n"\
    "                            shrunk by area where none matches; --threads N sets its readers\n"\
    "  --tissue otsu|none        run only windows touching tissue (default otsu) or all of them\n"  \
    "  --tissue-mask PATH.png    also write the tissue mask\n"                                      \
    "  --thumbnail PATH.png      also write the slide's thumbnail with the labels tinted over it\n" \
    "  --geojson PATH.geojson    also write the label regions as polygons QuPath imports\n"       \
    "  --raw-input               do not normalise image files\n"                                  \
    "  --roi D,H,W               the window (<= 0: the whole axis); turns sliding windows on\n"      \
    "  --overlap F[,F,F]         overlap of neighbouring windows, in [0, 1) (default 0.25)\n"         \
    "  --sw-batch N|auto         windows per run of the model (default 1; auto: the most that fit\n" \
    "                            the device's free memory or --max-memory, halved on running out)\n" \
    "  --max-memory SIZE|auto    CUDA: device memory the run may hold, networks included (e.g. 2G;\n" \
    "                            auto: what is free less 5% of the device, at least 256 MiB);\n"    \
    "                            accumulators then go in strips (shared sums in host memory), or\n" \
    "                            thinner slabs of rows if they must\n"                              \
    "  --max-host-memory SIZE    host memory the job may hold: image, accumulators, result (default:\n" \
    "                            what the machine has available); checked before the job starts\n" \
    "  --accumulate slabs|whole  CUDA: a ring of a window's rows of accumulators (default), or the\n" \
    "                            whole image's (the unbounded reference; same numbers)\n"         \
    "  --accumulator fp32|fp16|bf16  CUDA: the accumulators' type (default fp32); fp16 halves their\n" \
    "                            memory (many classes under --max-memory) at 11 bits a sum\n"     \
    "  --host-blend              CUDA: gather and blend on the host instead of the GPU (reference)\n" \
    "  --blend constant|gaussian|gaussian-nnunet  importance of a window's voxels (default\n"     \
    "                            constant; gaussian-nnunet: nnU-Net's map, centred on n/2)\n"      \
    "  --sigma-scale S           Gaussian sigma as a fraction of the window (default 0.125)\n"     \
    "  --pad constant|reflect|replicate  padding of axes smaller than the window (default constant)\n" \
    "  --pad-value V             the constant (default 0)\n"                                         \
    "  --grid monai|nnunet       window placement (default monai)\n"                               \
    "  --output logits|probs|labels  what is written (default logits; also --output-kind)\n"     \
    "  --activation softmax|sigmoid|none  for probs and labels (default softmax)\n"              \
    "  --threshold T             sigmoid labels: probability above T (default 0.5)\n"               \
    "  --tta mirror[=AXES]|none  also run each window mirrored along every combination of the\n"   \
    "                            spatial axes (or AXES, e.g. 0,2) and average (nnU-Net's)\n"       \
    "  --model OTHER.onnx        an ensemble: average with MODEL per window (repeatable)\n"        \
    "A progress line goes to stderr when it is a terminal (not with --quiet); a summary line to\n"    \
    "stdout at the end.\n"

void cli_sw_opts_init(cli_sw_opts *o);
/* Consumes the sliding-window option at argv[*i] (and its value): 1 if it
 * was one, 0 if not, -1 after reporting a usage error. */
int cli_sw_option(cli_sw_opts *o, int argc, char **argv, int *i);
/* Whether s names an output kind (logits, probs, labels). */
bool cli_sw_output_kind(cli_sw_opts *o, const char *s);
/* Runs MODEL over the image in `in` and writes the result to `out`; returns
 * an exit code. Without --roi the window comes from the model's metadata. */
int cli_sw_run(const char *model, const char *in, const char *out, cli_sw_opts *so, const cli_engine_opts *eo,
               bool quiet);

/* `segrt run MODEL -i IN_DIR -o OUT_DIR`: every case of a folder. */
typedef struct cli_cases_opts {
    bool on;               /* a folder job: -o names a folder, or one of these was given */
    int32_t skip_existing; /* --continue */
    int32_t no_prefetch;   /* --no-prefetch */
    const char *extension; /* --ext: .nii.gz (NULL) or .nii */
} cli_cases_opts;

#define CLI_CASES_USAGE                                                                                                \
    "a folder of cases (segrt run MODEL -i IN_DIR -o OUT_DIR; the sliding-window options apply to\n"                   \
    "  each case; labels by default): NIfTI files named CASE_0000.nii.gz, CASE_0001.nii.gz... (one\n"                  \
    "  per channel, nnU-Net's naming), other .nii/.nii.gz files (one channel), and subfolders holding\n"               \
    "  a DICOM series are cases, in name order; each result is OUT_DIR/CASE.nii.gz, written whole.\n"                  \
    "  The engines are built once; the next case is read while one runs. A case that fails is\n"                       \
    "  reported and the others run; the exit code is then 1, naming them. OUT_DIR/summary.json\n"                      \
    "  records each case: inputs, output, status, error, shape, seconds (read, run, write).\n"                         \
    "  --continue                skip cases whose result exists (resume a job)\n"                                      \
    "  --no-prefetch             read each case when its turn comes\n"                                                 \
    "  --ext .nii.gz|.nii        the results' extension (default .nii.gz)\n"

/* Whether argv[*i] is a folder-job option (consumed with its value): 1,
 * 0 if not one, -1 after reporting a usage error. */
int cli_cases_option(cli_cases_opts *o, int argc, char **argv, int *i);
/* Runs MODEL over every case of in_dir into out_dir (created if absent);
 * returns an exit code. */
int cli_cases_run(const char *model, const char *in_dir, const char *out_dir, cli_sw_opts *so,
                  const cli_engine_opts *eo, bool quiet, const cli_cases_opts *co);

#endif
