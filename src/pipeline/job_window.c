/* The sliding-window file job (segrt.h, "A sliding-window job from
 * files"): an image file in, the engines built for the window, host memory
 * checked before the image is read, the windows run on the device path
 * or the host path (chosen in run_windows, the one place), the result and
 * the overlay written into outputs the caller opened. `segrt run` is a
 * client of it.
 *
 * On the device path the image streams where its format allows: a
 * float32 NPY (memory-mapped) or a TIFF of one level whose samples the
 * whole reader takes (strips or tiles decoded as the windows reach them;
 * alpha dropped and normalised row by row, as the whole read does it) is
 * opened as a region source and read through a row reader, never held
 * whole, and host memory is counted without it (open_stream says exactly
 * when). Everything else is read whole first: the host path (its
 * accumulators hold the whole image anyway), PNG and JPEG (decoded
 * forward only), an overlay (drawn over the whole image's pixels), and
 * arrays the source does not take (N > 1, 1-D). */
#include "backend/backend.h"
#include "core/api_file.h"
#include "core/clock.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "io/api_volume.h"
#include "io/dicom_seg.h"
#include "io/image.h"
#include "io/npy.h"
#include "io/sink.h"
#include "io/source.h"
#include "pipeline/job_slide.h"
#include "pipeline/job_window.h"
#include "pipeline/overlay.h"
#include "pipeline/sliding_window.h"
#include "pipeline/sw_device.h"
#include "pipeline/sw_job.h"
#include "pipeline/vol_prep.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define JOB_MAX_MODELS 64
#define META_MAX_VALUES 16

_Static_assert(SG_SW_MAX_DIMS == 3, "segrt_window_job_options holds 3 spatial dims");

void segrt_window_job_options_init(segrt_window_job_options *o, int32_t spatial_dims)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    sg_sw_options d;
    sg_sw_options_default(&d, spatial_dims);
    o->spatial_dims = spatial_dims;
    for (int32_t k = 0; k < SG_SW_MAX_DIMS; k++)
        o->overlap[k] = d.overlap[k];
    o->batch = d.sw_batch;
    o->blend = (segrt_window_blend)d.blend;
    o->sigma_scale = d.sigma_scale;
    o->pad = (segrt_window_pad)d.pad;
    o->pad_value = d.pad_value;
    o->grid = (segrt_window_grid)d.grid;
    o->output = (segrt_window_output)d.output;
    o->activation = (segrt_window_activation)d.activation;
    o->threshold = d.threshold;
}

/* The pipeline's options from the public ones, checked. */
static sg_status job_sw_options(const segrt_window_job_options *j, sg_sw_options *o)
{
    if (j->spatial_dims < 1 || j->spatial_dims > SG_SW_MAX_DIMS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a window job of %d spatial dims (1 to %d)", j->spatial_dims,
                        SG_SW_MAX_DIMS);
    sg_sw_options_default(o, j->spatial_dims);
    for (int32_t d = 0; d < j->spatial_dims; d++) {
        if (!(j->overlap[d] >= 0.0 && j->overlap[d] < 1.0))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "overlap %g along dim %d: it must be in [0, 1)",
                            j->overlap[d], d);
        o->roi[d] = j->roi[d];
        o->overlap[d] = j->overlap[d];
    }
    if (j->batch < 1 && !j->auto_batch)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a batch of %d windows", j->batch);
    if ((unsigned)j->blend > SEGRT_WINDOW_BLEND_GAUSSIAN_NNUNET || (unsigned)j->pad > SEGRT_WINDOW_PAD_REPLICATE ||
        (unsigned)j->grid > SEGRT_WINDOW_GRID_NNUNET || (unsigned)j->output > SEGRT_WINDOW_OUTPUT_LABELS ||
        (unsigned)j->activation > SEGRT_WINDOW_ACTIVATION_SIGMOID)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "a window job's blend, padding, grid, output or activation is outside its enum");
    if (j->blend != SEGRT_WINDOW_BLEND_CONSTANT && !(j->sigma_scale > 0.0))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sigma scale %g: it must be > 0", j->sigma_scale);
    if (j->mirror_axes >> j->spatial_dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "mirroring axes 0x%x: the window has %d spatial dims",
                        j->mirror_axes, j->spatial_dims);
    o->sw_batch = j->auto_batch ? 1 : j->batch;
    o->grid = (sg_sw_grid_kind)j->grid;
    o->blend = (sg_sw_blend)j->blend;
    o->sigma_scale = j->sigma_scale;
    o->pad = (sg_sw_pad)j->pad;
    o->pad_value = j->pad_value;
    o->output = (sg_sw_output)j->output;
    o->activation = (sg_sw_activation)j->activation;
    o->threshold = j->threshold;
    o->tta_axes = j->mirror_axes;
    o->max_memory = j->max_memory == SEGRT_MAX_MEMORY_AUTO ? SG_SW_MEMORY_AUTO : (size_t)j->max_memory;
    o->whole = j->whole_accumulators != 0;
    if (j->accumulator != SEGRT_DTYPE_UNDEFINED && j->accumulator != SEGRT_DTYPE_FLOAT32 &&
        j->accumulator != SEGRT_DTYPE_FLOAT16 && j->accumulator != SEGRT_DTYPE_BFLOAT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "accumulators are float32, float16 or bfloat16, not dtype %d",
                        (int)j->accumulator);
    o->acc_dtype = j->accumulator == SEGRT_DTYPE_UNDEFINED ? SEGRT_DTYPE_FLOAT32 : j->accumulator;
    o->host_path = j->host_path != 0;
    o->max_host_memory = (size_t)j->max_host_memory;
    o->progress = j->progress;
    o->progress_user = j->progress_user;
    return SEGRT_OK;
}

/* --- the image file ------------------------------------------------------ */

/* "0.1,0.2,0.3": 1 to META_MAX_VALUES finite numbers; -1 if malformed. */
static int parse_list(const char *s, double *out)
{
    int n = 0;
    while (*s && n < META_MAX_VALUES) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || (*end && *end != ','))
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

/* A per-channel list from metadata key: C values, or one for all. */
static sg_status channel_values(const segrt_model *model, const char *model_path, const char *key, int64_t C,
                                double fallback, double *out)
{
    const char *s = segrt_model_metadata_value(model, key);
    for (int64_t c = 0; c < C; c++)
        out[c] = fallback;
    if (!s)
        return SEGRT_OK;
    double v[META_MAX_VALUES];
    int n = parse_list(s, v);
    if (n < 1 || (n != 1 && n != C))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: metadata %s is `%s`; the image has %lld channels (give one value or one each)", model_path,
                        key, s, (long long)C);
    for (int64_t c = 0; c < C; c++)
        out[c] = v[n == 1 ? 0 : c];
    return SEGRT_OK;
}

/* An image file's normalisation, x = (x * scale - mean[c]) / std[c], as
 * the model was trained: per pixel, so the whole read and a row reader
 * apply it alike. */
typedef struct norm {
    bool on; /* off for more channels than META_MAX_VALUES */
    float scale, mean[META_MAX_VALUES], std[META_MAX_VALUES];
} norm;

/* The normalisation of a C-channel image from the model's metadata. */
static sg_status norm_of(const segrt_model *model, const char *model_path, int64_t C, norm *nm)
{
    memset(nm, 0, sizeof *nm);
    if (C > META_MAX_VALUES)
        return SEGRT_OK;
    double scale = 1.0, mean[META_MAX_VALUES], std[META_MAX_VALUES];
    const char *s = segrt_model_metadata_value(model, "segrt.input.scale");
    if (s) {
        double v[META_MAX_VALUES];
        if (parse_list(s, v) != 1 || v[0] == 0.0)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: metadata segrt.input.scale is `%s`; it wants one non-zero number", model_path, s);
        scale = v[0];
    }
    SG_TRY(channel_values(model, model_path, "segrt.input.mean", C, 0.0, mean));
    SG_TRY(channel_values(model, model_path, "segrt.input.std", C, 1.0, std));
    for (int64_t c = 0; c < C; c++)
        if (!(std[c] > 0.0))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: metadata segrt.input.std has %g; each must be > 0",
                            model_path, std[c]);
    nm->on = true;
    nm->scale = (float)scale;
    for (int64_t c = 0; c < C; c++) {
        nm->mean[c] = (float)mean[c];
        nm->std[c] = (float)std[c];
    }
    return SEGRT_OK;
}

/* Channel c's n samples at p, normalised in place: the one loop both the
 * whole read and the row reader run, so their numbers are the same. */
static void norm_apply(const norm *nm, int64_t c, float *p, int64_t n)
{
    if (!nm->on)
        return;
    float sc = nm->scale, m = nm->mean[c], sd = nm->std[c];
    for (int64_t i = 0; i < n; i++) /* in float32, step by step, as numpy and torch do it */
        p[i] = (p[i] * sc - m) / sd;
}

static sg_status normalise(const segrt_model *model, const char *model_path, sg_tensor *t)
{
    int64_t C = t->dims[1], plane = 1;
    for (int32_t d = 2; d < t->rank; d++)
        plane *= t->dims[d];
    norm nm;
    SG_TRY(norm_of(model, model_path, C, &nm));
    float *x = t->data;
    for (int64_t n = 0; n < t->dims[0]; n++)
        for (int64_t c = 0; c < C; c++)
            norm_apply(&nm, c, x + (n * C + c) * plane, plane);
    return SEGRT_OK;
}

/* Whether path is a medical volume: a NIfTI file, a DICOM file or a
 * folder of a DICOM series. */
static bool is_volume(const char *path)
{
    segrt_file_format f = segrt_file_format_of_file(path);
    return f == SEGRT_FILE_NIFTI || f == SEGRT_FILE_DICOM;
}

/* A volume's tensor as the windows read it, float32 1 x C x [D x] H x W,
 * from its source's header (data NULL), and what reading it holds besides:
 * the samples as stored. */
static void volume_shape(const sg_source_info *in, sg_tensor *image, uint64_t *extra_bytes)
{
    memset(image, 0, sizeof *image);
    image->dtype = SEGRT_DTYPE_FLOAT32;
    image->dims[image->rank++] = 1;
    image->dims[image->rank++] = in->channels;
    if (in->n_dims == 3)
        image->dims[image->rank++] = in->dims[0][0];
    image->dims[image->rank++] = in->dims[0][1];
    image->dims[image->rank++] = in->dims[0][2];
    *extra_bytes = (uint64_t)sg_tensor_numel(image) * segrt_dtype_size(in->dtype);
}

/* Opens a volume's source with the job's DICOM options (o may be NULL):
 * the series o->series_uid where it is given, uneven series resampled
 * where o->allow_uneven. */
static sg_status open_volume(const char *path, const segrt_window_job_options *o, sg_source **src)
{
    sg_source_options so = {0, o ? o->series_uid : NULL, o && o->allow_uneven};
    return sg_source_open_with(path, &so, src);
}

/* A volume read whole as float32 (the values its reader gives: NIfTI's
 * scaling and DICOM's rescale applied), and where it lies. No
 * normalisation here: a volume's intensities are the modality's (HU for
 * CT), and its preprocessing (prep_forward) scales them as the model
 * says. */
static sg_status read_volume(const char *path, const segrt_window_job_options *jo, sg_tensor *image,
                             sg_source_info *where)
{
    sg_source *src;
    SG_TRY(open_volume(path, jo, &src));
    if (jo->notice && sg_source_notice(src))
        jo->notice(jo->notice_user, sg_source_notice(src));
    sg_tensor raw;
    sg_status s = sg_source_read_all(src, 0, &raw);
    if (s == SEGRT_OK) {
        *where = src->info;
        where->format = NULL; /* the source's, gone with it */
    }
    sg_source_close(src);
    SG_TRY(s);
    uint64_t extra;
    volume_shape(where, image, &extra);
    int64_t n = sg_tensor_numel(&raw);
    if (n != sg_tensor_numel(image)) {
        free(raw.data);
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the file changed while segrt read it", path);
    }
    float *f = sg_malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!f) {
        free(raw.data);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the volume", path);
    }
    sg_dtype_to_f32(raw.dtype, raw.data, f, n);
    free(raw.data);
    image->data = f;
    return SEGRT_OK;
}

sg_status sg_window_job_read_volume(const segrt_window_job_options *o, const char *path, sg_tensor *image,
                                    sg_source_info *where)
{
    return read_volume(path, o, image, where);
}

/* The image's tensor from its header (data NULL) and the bytes the read
 * holds besides it; a volume's header also into *header where given (its
 * format string is the source's, gone with it: NULL). */
static sg_status probe_image(const char *path, const segrt_window_job_options *jo, sg_tensor *image,
                             uint64_t *extra_bytes, sg_source_info *header)
{
    memset(image, 0, sizeof *image);
    *extra_bytes = 0;
    if (is_volume(path)) {
        sg_source *src;
        SG_TRY(open_volume(path, jo, &src));
        volume_shape(&src->info, image, extra_bytes);
        if (header) {
            *header = src->info;
            header->format = NULL;
        }
        sg_source_close(src);
        return SEGRT_OK;
    }
    if (sg_slide_job_takes(path)) {
        sg_slide_job *sj;
        sg_slide_job_options so = {jo ? jo->mpp : 0, 1};
        SG_TRY(sg_slide_job_open(path, &so, &sj));
        sg_slide_job_shape(sj, image);
        sg_slide_job_close(sj);
        return SEGRT_OK;
    }
    if (!sg_image_is_image_file(path))
        return sg_npy_probe(path, image);
    sg_image_info info;
    SG_TRY(sg_image_probe(path, &info));
    /* As sg_image_to_tensor gives it: alpha dropped, pages a spatial axis. */
    int32_t c = info.channels == 2 || info.channels == 4 ? info.channels - 1 : info.channels;
    image->dtype = SEGRT_DTYPE_FLOAT32;
    image->dims[image->rank++] = 1;
    image->dims[image->rank++] = c;
    if (info.depth > 1)
        image->dims[image->rank++] = info.depth;
    image->dims[image->rank++] = info.height;
    image->dims[image->rank++] = info.width;
    /* The pixels stay beside the tensor (the overlay draws over them), and
     * the decoder holds its scratch while it reads. */
    *extra_bytes = info.pixel_bytes + info.scratch_bytes;
    return SEGRT_OK;
}

segrt_status segrt_window_job_probe_with(const segrt_window_job_options *o, const char *image_path, segrt_tensor *image,
                                         uint64_t *extra_bytes)
{
    if (!image_path || !image)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_job_probe: image_path and image must not be NULL");
    sg_tensor t;
    uint64_t extra;
    SG_TRY(probe_image(image_path, o, &t, &extra, NULL));
    memset(image, 0, sizeof *image);
    image->dtype = t.dtype;
    image->rank = t.rank;
    memcpy(image->dims, t.dims, sizeof image->dims);
    image->memory = SEGRT_MEMORY_HOST;
    if (extra_bytes)
        *extra_bytes = extra;
    return SEGRT_OK;
}

segrt_status segrt_window_job_probe(const char *image_path, segrt_tensor *image, uint64_t *extra_bytes)
{
    return segrt_window_job_probe_with(NULL, image_path, image, extra_bytes);
}

/* The input as float32 N x C x spatial; an image file also fills *pixels
 * (for the overlay) and is normalised as the model's metadata says unless
 * raw. */
static sg_status read_image(const char *path, const segrt_model *model, const char *model_path, bool raw,
                            sg_tensor *image, sg_image *pixels)
{
    memset(pixels, 0, sizeof *pixels);
    if (!sg_image_is_image_file(path))
        return sg_npy_read(path, image);
    SG_TRY(sg_image_read(path, pixels));
    SG_TRY(sg_image_to_tensor(pixels, false, image));
    return raw ? SEGRT_OK : normalise(model, model_path, image);
}

/* Whether path names a NIfTI file (.nii, .nii.gz). */
static bool is_nifti_output(const char *path)
{
    size_t n = strlen(path);
    return (n > 4 && strcasecmp(path + n - 4, ".nii") == 0) || (n > 7 && strcasecmp(path + n - 7, ".nii.gz") == 0);
}

/* Whether path names an image file segrt writes (.png, .tif, .tiff). */
static bool is_image_output(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    return dot && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".tif") == 0 || strcasecmp(dot, ".tiff") == 0);
}

/* --- the job ------------------------------------------------------------- */

/* A volume read on a thread of its own while the engines are built:
 * building is the host's work of loading plans and choosing kernels on
 * one core, reading the disk's and the decoders' on others. */
typedef struct read_ahead {
    pthread_t th;
    bool started;
    const char *path;
    const segrt_window_job_options *jo;
    sg_tensor vol;
    sg_source_info where;
    sg_status status;
    char error[1024]; /* the reading thread's message */
    double seconds;
} read_ahead;

typedef struct sg_window_job {
    const segrt_window_job_options *jo;
    sg_sw_options sw;
    const char *in; /* the image's path */
    sg_tensor image, result;
    sg_image pixels; /* an image file's pixels, for the overlay */
    /* A streamed image (open_stream): the source, its row reader, and the
     * reader the windows read (src_rows itself, or rows over it that drop
     * alpha and normalise). */
    sg_source *src;
    sg_sw_image src_rows, rows;
    bool streamed;
    bool volume;          /* a NIfTI or DICOM input, read whole (read_volume) */
    sg_slide_job *slide;  /* a whole-slide input (job_slide.h) */
    sg_source_info where; /* ... its dims, spacing and geometry, for a NIfTI result */
    /* A volume's preprocessing where it changes something (prep_begin):
     * the settings, the plan, the volume's header, the networks' image and
     * their scores (on the models' device on the device path, else host
     * memory in image and result), and the output the caller asked for
     * (labels; the windows themselves give scores). */
    segrt_preprocess prep_p;
    sg_prep *prep;
    sg_source_info prep_in; /* the volume's header */
    segrt_tensor prep_image, prep_scores;
    sg_sw_output prep_output;
    bool prep_output_saved; /* sw.output asks for scores until prep_back (or the run's reset) */
    norm nm;
    float *scratch; /* the source's rows with alpha, before it is dropped */
    size_t scratch_bytes;
    uint64_t src_held; /* host bytes the source holds at once: a strip or tile */
    int32_t n;
    segrt_model *const *model;
    const char *path[JOB_MAX_MODELS]; /* the models' names in messages */
    segrt_engine *engine[JOB_MAX_MODELS];
    segrt_context *ctx[JOB_MAX_MODELS];
    sg_sw_model members[JOB_MAX_MODELS];
    /* The window input dims the engines were built for (built: they are). */
    bool built;
    int64_t built_dims[SEGRT_MAX_RANK];
    /* A run over a volume the caller read (sg_window_job_run_volume): the
     * volume, taken by the run; the host bytes the caller holds meanwhile;
     * whether the host-memory check refused the run. */
    sg_tensor given;
    sg_source_info given_where;
    uint64_t held_elsewhere;
    bool memory_refused;
    void (*checked)(void *user);
    void *checked_user;
    double seconds_write;
    segrt_window_job_seconds parts; /* this run's, into its report */
    read_ahead ahead;
} job;

static void drop_engines(job *st)
{
    for (int32_t m = 0; m < st->n; m++) {
        segrt_context_destroy(st->ctx[m]);
        segrt_engine_destroy(st->engine[m]);
        st->ctx[m] = NULL;
        st->engine[m] = NULL;
    }
}

static void prep_free_device(segrt_tensor *t)
{
    if (t->memory == SEGRT_MEMORY_DEVICE && t->data)
        segrt_device_free(t->data);
    memset(t, 0, sizeof *t);
}

static void *read_ahead_main(void *arg)
{
    read_ahead *ra = arg;
    double t0 = sg_now_seconds();
    ra->status = read_volume(ra->path, ra->jo, &ra->vol, &ra->where);
    if (ra->status != SEGRT_OK)
        snprintf(ra->error, sizeof ra->error, "%s", sg_last_error());
    ra->seconds = sg_now_seconds() - t0;
    return NULL;
}

/* Starts reading path on a thread of its own; false where the thread did
 * not start (the job then reads in line, as without). */
static bool read_ahead_start(read_ahead *ra, const char *path, const segrt_window_job_options *jo)
{
    memset(ra, 0, sizeof *ra);
    ra->path = path;
    ra->jo = jo;
    ra->started = pthread_create(&ra->th, NULL, read_ahead_main, ra) == 0;
    return ra->started;
}

/* The read's volume once it is done, or its error raised on this thread. */
static sg_status read_ahead_take(read_ahead *ra, sg_tensor *vol, sg_source_info *where, double *seconds)
{
    pthread_join(ra->th, NULL);
    ra->started = false;
    *seconds += ra->seconds;
    if (ra->status != SEGRT_OK)
        return sg_error(ra->status, "%s", ra->error);
    *vol = ra->vol;
    *where = ra->where;
    memset(&ra->vol, 0, sizeof ra->vol);
    return SEGRT_OK;
}

/* A read the run did not take (it failed before): waited for, dropped. */
static void read_ahead_drop(read_ahead *ra)
{
    if (ra->started)
        pthread_join(ra->th, NULL);
    ra->started = false;
    free(ra->vol.data);
    memset(&ra->vol, 0, sizeof ra->vol);
}

static void job_free(job *st)
{
    read_ahead_drop(&st->ahead);
    sg_slide_job_close(st->slide);
    prep_free_device(&st->prep_image);
    prep_free_device(&st->prep_scores);
    sg_prep_free(st->prep);
    free(st->given.data);
    sg_sw_image_free(&st->src_rows);
    sg_source_close(st->src);
    free(st->scratch);
    sg_image_free(&st->pixels);
    free(st->image.data);
    free(st->result.data);
    drop_engines(st);
}

/* The engine of a model for the window batch when the caller gave no
 * builder: the library's defaults (the CPU). */
static segrt_status default_build(void *user, const segrt_model *model, const char *input, int32_t rank,
                                  const int64_t *dims, segrt_engine **out)
{
    (void)user;
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_shape(opts, input, rank, dims);
    if (s == SEGRT_OK)
        s = segrt_engine_build(model, opts, out);
    segrt_build_options_destroy(opts);
    return s;
}

/* Every member's engine and context for the options' window batch. */
static sg_status build_members_now(job *st)
{
    drop_engines(st);
    st->built = false; /* until every member is built again */
    int64_t dims[SEGRT_MAX_RANK];
    SG_TRY(sg_sw_input_dims(&st->sw, &st->image, dims));
    segrt_engine_builder build = st->jo->build ? st->jo->build : default_build;
    for (int32_t m = 0; m < st->n; m++) {
        segrt_tensor_desc d;
        SG_TRY(segrt_model_input(st->model[m], 0, &d));
        SG_TRY(build(st->jo->build_user, st->model[m], d.name, d.rank, dims, &st->engine[m]));
        SG_TRY(segrt_context_create(st->engine[m], &st->ctx[m]));
        st->members[m] = (sg_sw_model){st->ctx[m], st->engine[m]};
    }
    memcpy(st->built_dims, dims, sizeof dims);
    st->built = true;
    return SEGRT_OK;
}

static sg_status build_members(job *st)
{
    double t0 = sg_now_seconds();
    sg_status s = build_members_now(st);
    st->parts.build += sg_now_seconds() - t0;
    return s;
}
/* Whether the engines built for an earlier image take this one's window
 * batch: the same input dims (a window of fixed size over any image). */
static bool engines_fit(const job *st)
{
    int64_t dims[SEGRT_MAX_RANK];
    if (!st->built || sg_sw_input_dims(&st->sw, &st->image, dims) != SEGRT_OK) {
        sg_error_clear();
        return false;
    }
    return memcmp(dims, st->built_dims, sizeof(int64_t) * (size_t)st->image.rank) == 0;
}

/* The one place that chooses between the device path and the host path. */
static bool device_path(const job *st)
{
    return !st->sw.host_path && sg_sw_device_capable(st->members, st->n);
}

/* --- the image streamed ------------------------------------------------- */

/* Rows of a streamed image file (the reader's `read`): the source's rows
 * as float32, alpha dropped, normalised as normalise() does the whole
 * image. */
static sg_status stream_read(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride)
{
    job *st = im->state;
    int64_t numel = (r1 - r0) * sg_sw_image_row_numel(im), C = im->dims[1], C_src = st->src_rows.dims[1];
    if (C_src == C) {
        SG_TRY(sg_sw_image_read(&st->src_rows, n, r0, r1, dst, channel_stride));
    } else {
        size_t bytes = sizeof(float) * (size_t)(C_src * numel);
        if (bytes > st->scratch_bytes) {
            float *p = realloc(st->scratch, bytes);
            if (!p)
                return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %lld rows of the image", st->in,
                                (long long)(r1 - r0));
            st->scratch = p;
            st->scratch_bytes = bytes;
        }
        SG_TRY(sg_sw_image_read(&st->src_rows, n, r0, r1, st->scratch, numel));
        for (int64_t c = 0; c < C; c++)
            memcpy(dst + c * channel_stride, st->scratch + c * numel, sizeof(float) * (size_t)numel);
    }
    for (int64_t c = 0; c < C; c++)
        norm_apply(&st->nm, c, dst + c * channel_stride, numel);
    return SEGRT_OK;
}

/* A slide's rows made on the device (its tiles decoded there): the slide
 * job normalises them as stream_read does (open_stream gave it st->nm). */
static sg_status stream_read_device(sg_sw_image *im, const sg_window_ops *ops, int64_t n, int64_t r0, int64_t r1,
                                    float *dst, int64_t channel_stride, sg_backend_stream *stream)
{
    job *st = im->state;
    return st->src_rows.read_device(&st->src_rows, ops, n, r0, r1, dst, channel_stride, stream);
}

/* Whether the image streams, and if so its source and row reader: on the
 * device path, without an overlay, a float32 NPY the source takes
 * (1 x C x spatial) or a TIFF of one level with 8- or 16-bit unsigned
 * samples (what the whole reader takes; its regions equal the whole
 * read's pixels, io/source_tiff.c), with the dims the probe gave. The
 * whole read is kept for the rest, as it was: the host path holds
 * accumulators for the whole image anyway; PNG and JPEG decode forward
 * only; a pyramid or samples the whole reader refuses are refused by it
 * as before; an overlay draws over the whole image's pixels. A file the
 * source does not open is left to the whole read and its messages. */
static sg_status open_stream(job *st, bool overlay, int64_t classes)
{
    /* (A volume is read whole, read_volume: opening it here would scan a
     * DICOM folder's headers once more for nothing.) */
    if (overlay || st->volume || !device_path(st))
        return SEGRT_OK;
    if (st->slide) { /* rows from the slide's readers, labels on to its pyramid as they finish */
        st->src_rows = *sg_slide_job_rows(st->slide);
        st->rows = st->src_rows;
        st->rows.read = stream_read;
        st->rows.read_device = st->src_rows.read_device ? stream_read_device : NULL;
        st->rows.state = st;
        if (!st->jo->raw_input)
            SG_TRY(norm_of(st->model[0], st->path[0], 3, &st->nm));
        sg_window_norm dn = {.on = st->nm.on, .scale = st->nm.scale};
        for (int c = 0; c < 3 && dn.on; c++) {
            dn.mean[c] = st->nm.mean[c];
            dn.std[c] = st->nm.std[c];
        }
        sg_slide_job_set_norm(st->slide, &dn);
        int64_t fill = (int64_t)(SW_PINNED_BYTES / (sizeof(float) * 3 * (size_t)st->image.dims[3]));
        int32_t out_bytes = st->sw.probs_u8 ? (int32_t)classes : 2;
        st->src_held = sg_slide_job_held_bytes(st->slide, fill > 1 ? fill : 1, out_bytes) +
                       (uint64_t)(fill > 1 ? fill : 1) * 3 * (uint64_t)st->image.dims[3] * sizeof(float);
        st->sw.row_sink = sg_slide_job_put_rows;
        st->sw.row_sink_user = st->slide;
        st->streamed = true;
        return SEGRT_OK;
    }
    bool image_file = sg_image_is_image_file(st->in);
    if (sg_source_open(st->in, &st->src) != SEGRT_OK) {
        sg_error_clear();
        return SEGRT_OK;
    }
    const sg_source_info *in = &st->src->info;
    int32_t keep = in->channels;
    bool ok = in->n_levels == 1 && in->n_dims + 2 == st->image.rank;
    if (image_file) {
        ok &= strcmp(in->format, "tiff") == 0 && (in->dtype == SEGRT_DTYPE_UINT8 || in->dtype == SEGRT_DTYPE_UINT16);
        keep = in->channels == 2 || in->channels == 4 ? in->channels - 1 : in->channels; /* as sg_image_to_tensor */
    } else {
        ok &= strcmp(in->format, "npy") == 0 && in->dtype == SEGRT_DTYPE_FLOAT32;
    }
    if (ok && sg_sw_image_of_source(st->src, &st->src_rows) != SEGRT_OK) {
        sg_error_clear();
        ok = false;
    }
    if (ok) {
        ok = st->image.dims[0] == 1 && st->image.dims[1] == keep;
        for (int32_t d = 2; d < st->image.rank; d++)
            ok &= st->src_rows.dims[d] == st->image.dims[d];
    }
    if (!ok) {
        sg_sw_image_free(&st->src_rows);
        sg_source_close(st->src);
        st->src = NULL;
        return SEGRT_OK;
    }
    if (image_file && !st->jo->raw_input)
        SG_TRY(norm_of(st->model[0], st->path[0], keep, &st->nm));
    if (image_file) {
        st->rows = st->src_rows;
        st->rows.dims[1] = keep;
        st->rows.read = stream_read;
        st->rows.state = st;
    } else {
        st->rows = st->src_rows;
    }
    /* What the source holds at once: one strip or tile decoded (NPY: a
     * row; the mapped file's pages are the kernel's to drop); and what the
     * readers hold besides the pinned buffer they fill (sw_take_pinned's
     * size): the rows of one fill in the stored dtype where that is not
     * float32, and with alpha where it is dropped. */
    uint64_t dsize = segrt_dtype_size(in->dtype), plane = 1;
    for (int32_t d = 3; d < st->image.rank; d++)
        plane *= (uint64_t)st->image.dims[d];
    uint64_t fill = SW_PINNED_BYTES;
    fill = (uint64_t)keep * plane * sizeof(float) > fill ? (uint64_t)keep * plane * sizeof(float) : fill;
    uint64_t per_channel = fill / sizeof(float) / (uint64_t)keep;
    st->src_held =
        (uint64_t)in->tile[0] * (uint64_t)in->tile[1] * (uint64_t)in->tile[2] * (uint64_t)in->channels * dsize;
    if (in->dtype != SEGRT_DTYPE_FLOAT32)
        st->src_held += per_channel * (uint64_t)in->channels * dsize;
    if (in->channels != keep)
        st->src_held += per_channel * (uint64_t)in->channels * sizeof(float);
    st->streamed = true;
    return SEGRT_OK;
}

/* With auto_batch on CUDA: the estimate segrt_window_auto_batch makes,
 * from the engines built for one window; a run that still runs out halves
 * it (segrt_window_job_run). */
static int32_t auto_batch(job *st, int32_t device)
{
    int32_t b = 1;
    if (sg_sw_auto_batch(&st->sw, &st->image, st->engine, st->n, device, &b) != SEGRT_OK)
        return 1;
    return b;
}

/* Once the engines are built, before the windows run: the class count,
 * and whether the result can be written where it goes (an image file
 * takes one label map: one image, one channel). */
static sg_status check_result_fits(const job *st, const char *out, int64_t *classes_out)
{
    const sg_sw_options *o = &st->sw;
    sg_sw_grid g;
    segrt_tensor in, t[SG_SW_MAX_OUTPUTS];
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = st->image.rank;
    size_t n = 0;
    int64_t classes = 0;
    SG_TRY(sg_sw_grid_make(o->n_dims, st->image.dims + 2, o->roi, o->overlap, o->grid, &g));
    sg_status s = sg_sw_input_dims(o, &st->image, in.dims);
    if (s == SEGRT_OK)
        s = sg_sw_model_outputs(st->members, 0, o, g.roi, &in, &n, t, &classes);
    sg_sw_grid_free(&g);
    SG_TRY(s);
    *classes_out = classes;
    if (!is_image_output(out))
        return SEGRT_OK;
    if (o->probs_u8) {
        if (classes > SG_SINK_MAX_CLASSES)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: a slide's probabilities are a sample a class, at most %d; this model has %lld", out,
                            SG_SINK_MAX_CLASSES, (long long)classes);
        return SEGRT_OK;
    }
    if (st->image.dims[0] != 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: an image file holds the labels of one image; this job has %lld (write .npy)", out,
                        (long long)st->image.dims[0]);
    if (sg_sw_effective_activation(o) == SG_SW_ACTIVATION_SIGMOID && classes > 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: sigmoid labels are a mask per class (%lld here); an image file holds one label map "
                        "(write .npy)",
                        out, (long long)classes);
    return SEGRT_OK;
}

/* The host bytes of a volume the caller read already, held before the
 * check: the machine's available memory has them counted out. */
static uint64_t given_bytes(const job *st)
{
    return st->given.data ? (uint64_t)sg_tensor_numel(&st->given) * sizeof(float) : 0;
}

static const char *limit_name(const job *st)
{
    return st->jo->max_host_memory_name ? st->jo->max_host_memory_name : "max_host_memory";
}

/* Once the engines are built (from the image's header), before the image
 * is read: the host memory the job will hold (the image with its pixels
 * and the decoder's scratch, or a streamed image's strip or tile,
 * accumulators, windows, result, the CPU engines' arenas) against
 * max_host_memory (INVALID_ARGUMENT) and what the machine has
 * (OUT_OF_MEMORY). The paths check again before they allocate. */
static sg_status check_host_memory(job *st, int64_t classes, uint64_t extra_bytes)
{
    uint64_t networks = 0;
    for (int32_t m = 0; m < st->n; m++) {
        segrt_engine_info info;
        if (segrt_engine_get_info(st->engine[m], &info) == SEGRT_OK && info.device == SEGRT_DEVICE_CPU)
            networks += info.arena_bytes + info.workspace_bytes;
    }
    sg_sw_host_need need;
    sg_status s = sg_sw_host_need_of(&st->sw, st->image.dims, classes, device_path(st), extra_bytes, networks, &need);
    if (s == SEGRT_OK && st->streamed)
        sg_sw_host_need_streamed(&need, st->src_held);
    if (s == SEGRT_OK)
        s = sg_sw_host_need_check(&st->sw, &need, networks + given_bytes(st), limit_name(st));
    st->memory_refused = s != SEGRT_OK;
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", st->in);
}

/* One windowed run: on the device path with its statistics when every
 * member runs on CUDA, else the host path. (The pipeline's calls of
 * sg_sw_device_run and sg_sliding_window for this job are here alone.) */
static sg_status run_windows(job *st, sg_sw_stats *stats, bool *on_device)
{
    memset(stats, 0, sizeof *stats);
    free(st->result.data);
    memset(&st->result, 0, sizeof st->result);
    *on_device = device_path(st);
    if (st->streamed) { /* open_stream chose it for the device path */
        if (!*on_device)
            return sg_error(SEGRT_ERROR_INTERNAL, "a streamed image on the host path");
        SG_TRY(sg_sw_check_host_memory_streamed(st->members, st->n, &st->sw, st->image.rank, st->image.dims,
                                                st->src_held, limit_name(st)));
        segrt_tensor res;
        SG_TRY(sg_sw_device_run_image(st->members, st->n, &st->sw, &st->rows, SEGRT_MEMORY_HOST, &res, stats, NULL));
        st->result.dtype = res.dtype;
        st->result.rank = res.rank;
        memcpy(st->result.dims, res.dims, sizeof st->result.dims);
        st->result.data = res.data;
        return SEGRT_OK;
    }
    prep_free_device(&st->prep_scores);
    if (st->prep && *on_device) { /* the preprocessed image on the device, the scores kept there for prep_back */
        SG_TRY(sg_sw_check_host_memory(st->members, st->n, &st->sw, st->image.rank, st->image.dims, false, true,
                                       limit_name(st)));
        return sg_sw_device_run(st->members, st->n, &st->sw, &st->prep_image, SEGRT_MEMORY_DEVICE, &st->prep_scores,
                                stats);
    }
    SG_TRY(sg_sw_check_host_memory(st->members, st->n, &st->sw, st->image.rank, st->image.dims, true, *on_device,
                                   limit_name(st)));
    if (!*on_device)
        return sg_sliding_window(st->members, st->n, &st->sw, &st->image, &st->result);
    segrt_tensor in, res;
    memset(&in, 0, sizeof in);
    in.dtype = st->image.dtype;
    in.rank = st->image.rank;
    memcpy(in.dims, st->image.dims, sizeof in.dims);
    in.data = st->image.data;
    in.memory = SEGRT_MEMORY_HOST;
    SG_TRY(sg_sw_device_run(st->members, st->n, &st->sw, &in, SEGRT_MEMORY_HOST, &res, stats));
    st->result.dtype = res.dtype;
    st->result.rank = res.rank;
    memcpy(st->result.dims, res.dims, sizeof st->result.dims);
    st->result.data = res.data;
    return SEGRT_OK;
}

/* The result as NIfTI: in the input volume's grid (its spacing and
 * geometry, so that the labels overlay it in a viewer), or without a
 * position for another input. One image (N = 1); its classes or
 * probabilities as channels (a .nii.gz takes one: labels). */
static sg_status write_nifti(sg_output *o, const sg_tensor *result, const job *st, bool *write_failed)
{
    const char *path = sg_output_path(o);
    if (result->rank < 4 || result->rank > 5 || result->dims[0] != 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a NIfTI file holds one image; the result has %lld", path,
                        (long long)(result->rank ? result->dims[0] : 0));
    sg_sink_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = result->dtype;
    d.channels = (int32_t)result->dims[1];
    d.n_dims = result->rank - 2;
    d.dims[0] = d.n_dims == 3 ? result->dims[2] : 1;
    d.dims[1] = result->dims[result->rank - 2];
    d.dims[2] = result->dims[result->rank - 1];
    if (st->volume) {
        memcpy(d.spacing, st->where.spacing, sizeof d.spacing);
        d.geometry = st->where.geometry;
    } else {
        sg_geometry_identity(&d.geometry);
    }
    sg_sink *s;
    SG_TRY(sg_sink_open_output(o, &d, &s));
    sg_box box = {{0, 0, 0}, {d.dims[0], d.dims[1], d.dims[2]}};
    sg_status e = sg_sink_write(s, &box, result->data);
    if (e != SEGRT_OK) {
        sg_sink_discard(s);
        *write_failed = true;
        return e;
    }
    e = sg_sink_commit(s);
    *write_failed = e != SEGRT_OK;
    return e;
}

/* A .dcm result, before anything runs: labels over a DICOM series. */
static sg_status check_seg_output(const job *st, const char *out)
{
    if (segrt_file_format_of_file(st->in) != SEGRT_FILE_DICOM)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a DICOM SEG (.dcm) is written over a DICOM series; %s is not one (write .nii.gz)", out,
                        st->in);
    if (st->sw.output != SG_SW_OUTPUT_LABELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a DICOM SEG takes a label map; write logits or probs to "
                                                      ".npy or .nii",
                        out);
    return SEGRT_OK;
}

/* The first model's segrt.classes ("background,liver,...": the name of
 * each label value) split into names (up to 256; *n of them): the copy
 * they point into, the caller's to free (NULL where there are none). */
static char *class_names(const job *st, const char **names, size_t *n)
{
    const char *classes = segrt_model_metadata_value(st->model[0], "segrt.classes");
    char *copy = classes ? strdup(classes) : NULL;
    *n = 0;
    for (char *p = copy; p && *n < 256;) { /* empty names kept in place: "background,,spleen" */
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        while (*p == ' ')
            p++;
        names[(*n)++] = p;
        p = comma ? comma + 1 : NULL;
    }
    return copy;
}

/* The labels as a DICOM SEG over the input series (opened again for its
 * references), segments named by the first model's segrt.classes
 * ("background,liver,...": the name of each label value). */
static sg_status write_seg(sg_output *o, const sg_tensor *result, const job *st, bool *write_failed)
{
    SG_TRY(check_seg_output(st, sg_output_path(o)));
    sg_source *src;
    SG_TRY(open_volume(st->in, st->jo, &src));
    const char *names[256];
    size_t n_names;
    char *copy = class_names(st, names, &n_names);
    sg_status s = sg_dicom_seg_write(o, result, src, names, n_names);
    *write_failed = s == SEGRT_ERROR_IO;
    free(copy);
    sg_source_close(src);
    return s;
}

/* The result into o: NPY, NIfTI, a DICOM SEG, or a label map as a
 * PNG/TIFF image, as its destination's extension says. *write_failed
 * tells a failed write from a refused result. */
static sg_status write_result(sg_output *o, const sg_tensor *result, const job *st, bool *write_failed)
{
    const char *path = sg_output_path(o);
    sg_status s;
    if (is_nifti_output(path))
        return write_nifti(o, result, st, write_failed);
    if (sg_dicom_seg_name(path))
        return write_seg(o, result, st, write_failed);
    if (!is_image_output(path)) {
        s = sg_npy_write_to(o, result);
        *write_failed = s != SEGRT_OK;
        return s;
    }
    sg_image img;
    s = sg_image_from_labels(result, &img);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s: ", path);
    s = sg_image_write_to(o, &img);
    sg_image_free(&img);
    *write_failed = s != SEGRT_OK;
    return s;
}

/* The overlay picture of labels over the input image, as PNG or TIFF. */
static sg_status write_overlay(sg_output *o, const sg_image *pixels, const sg_tensor *labels, bool *write_failed)
{
    sg_image img;
    sg_status s = sg_overlay_render(pixels, labels, NULL, &img);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s: ", sg_output_path(o));
    s = sg_image_write_to(o, &img);
    sg_image_free(&img);
    *write_failed = s != SEGRT_OK;
    return s;
}

static void fill_report(const job *st, const sg_sw_stats *stats, bool on_device, segrt_window_job_report *r)
{
    r->image.dtype = st->image.dtype;
    r->image.rank = st->image.rank;
    memcpy(r->image.dims, st->image.dims, sizeof r->image.dims);
    r->result.dtype = st->result.dtype;
    r->result.rank = st->result.rank;
    memcpy(r->result.dims, st->result.dims, sizeof r->result.dims);
    r->batch = st->sw.sw_batch;
    sg_sw_grid g;
    if (sg_sw_grid_make(st->sw.n_dims, st->image.dims + 2, st->sw.roi, st->sw.overlap, st->sw.grid, &g) == SEGRT_OK) {
        r->windows = g.n_windows * st->image.dims[0];
        sg_sw_grid_free(&g);
    }
    r->stats.windows = stats->windows;
    r->stats.runs = stats->runs;
    if (!on_device && st->image.rank >= 3) { /* the host path counts none: the windows it kept, each model and flip */
        int64_t *kept = NULL, n_kept = 0;
        uint32_t flips[SG_SW_MAX_FLIPS];
        int32_t n_flips;
        sg_sw_flips(st->sw.tta_axes, st->sw.n_dims, flips, &n_flips);
        if (sg_sw_grid_make(st->sw.n_dims, st->image.dims + 2, st->sw.roi, st->sw.overlap, st->sw.grid, &g) ==
            SEGRT_OK) {
            if (sg_sw_kept_windows(&st->sw, &g, &kept, &n_kept) == SEGRT_OK)
                r->stats.runs = n_kept * st->image.dims[0] * st->n * n_flips;
            free(kept);
            sg_sw_grid_free(&g);
        }
        sg_error_clear();
    }
    r->stats.passes = stats->passes;
    r->stats.on_device = on_device;
    r->stats.slab_rows = stats->slab_rows;
    r->strips = stats->strips > 0 ? stats->strips : 1;
    r->seam_host_bytes = stats->seam_host_bytes;
    r->stats.pipeline_bytes = stats->pipeline_bytes;
    r->stats.context_bytes = stats->context_bytes;
    r->times.setup = stats->seconds_setup;
    r->times.run = stats->seconds_run;
    r->times.uploading = stats->seconds_uploading;
    r->times.waiting = stats->seconds_waiting;
    r->times.downloading = stats->seconds_downloading;
}

/* --- a volume's preprocessing ------------------------------------------- */

static int64_t dims_numel(const int64_t d[3])
{
    return d[0] * d[1] * d[2];
}

/* Whether p asks for any step, whatever the volume. */
static bool prep_asks(const segrt_preprocess *p)
{
    bool any = p->orientation[0] || p->crop != SEGRT_CROP_NONE || p->spacing[0] != 0.0 || p->spacing[1] != 0.0 ||
               p->spacing[2] != 0.0;
    for (int32_t a = 0; a < 3; a++)
        any |= p->transpose[a] != a;
    for (int32_t c = 0; c < p->n_intensity && c < SEGRT_PREPROCESS_MAX_CHANNELS; c++)
        any |= p->intensity[c].kind != SEGRT_INTENSITY_NONE;
    return any;
}

/* Before the engines are built: the volume's preprocessing (the options',
 * else the first model's metadata), planned on its header. Where it
 * changes something, *shape becomes the networks' image before the crop
 * (the largest it can be: engines and memory checks are sized by it), the
 * windows are asked for scores, and *extra_bytes counts what the job
 * holds besides the image: the volume as read and as float32, and the
 * labels in its grid. A plan that changes nothing leaves the job as it
 * was. */
static sg_status prep_begin(job *st, sg_tensor *shape, uint64_t *extra_bytes)
{
    const segrt_window_job_options *jo = st->jo;
    if (jo->preprocess) {
        st->prep_p = *jo->preprocess;
    } else {
        int32_t declared = 0;
        SG_TRY(segrt_preprocess_from_model(st->model[0], &st->prep_p, &declared));
        if (!declared)
            return SEGRT_OK;
    }
    const sg_source_info *in = &st->prep_in; /* probe_image's */
    int64_t dims[3] = {in->n_dims == 3 ? in->dims[0][0] : 1, in->dims[0][1], in->dims[0][2]};
    segrt_geometry g;
    sg_api_geometry(in, &g);
    sg_prep *pp;
    sg_status s = sg_prep_plan(&st->prep_p, in->channels, dims, &g, -1, &pp);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s: ", st->in);
    if (sg_prep_is_identity(pp)) {
        sg_prep_free(pp);
        return SEGRT_OK;
    }
    st->prep = pp;
    const char *from = st->prep_p.source ? st->prep_p.source : "the job's options";
    if (in->n_dims != 3 || shape->rank != 5)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a 2-D image; the preprocessing %s declares is for 3-D volumes", st->in, from);
    if (st->sw.output != SG_SW_OUTPUT_LABELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: preprocessed as %s declares, the network's %s lie in its own grid, not the volume's; "
                        "segrt brings labels back to the volume (ask for labels, or no preprocessing)",
                        st->in, from, st->sw.output == SG_SW_OUTPUT_PROBS ? "probabilities" : "logits");
    if (sg_sw_effective_activation(&st->sw) == SG_SW_ACTIVATION_SIGMOID)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: sigmoid labels are a mask per class; a preprocessed volume's labels come back from "
                        "class scores by argmax (use softmax, or no preprocessing)",
                        st->in);
    int64_t md[3];
    sg_prep_model_grid(pp, md, NULL);
    for (int32_t a = 0; a < 3; a++)
        shape->dims[2 + a] = md[a];
    st->prep_output = st->sw.output;
    st->prep_output_saved = true;
    st->sw.output = st->prep_p.result_probs ? SG_SW_OUTPUT_PROBS : SG_SW_OUTPUT_LOGITS;
    /* A volume the caller read is held already (given_bytes): only the
     * labels; else the samples as stored while they become float32. */
    uint64_t n = (uint64_t)in->channels * (uint64_t)dims_numel(dims);
    *extra_bytes = n * sizeof(float) + 2 * (uint64_t)dims_numel(dims);
    if (!st->given.data)
        *extra_bytes += n * segrt_dtype_size(in->dtype);
    return SEGRT_OK;
}

/* Host bytes the plan's steps hold beside the image and the scores: its
 * scratch where the host runs them (the host path, or a device whose
 * backend has no volume operations). */
static uint64_t prep_host_scratch(const job *st, int64_t classes)
{
    if (!st->prep)
        return 0;
    const sg_backend *cuda = sg_backend_for(SEGRT_DEVICE_CUDA);
    if (device_path(st) && cuda && cuda->volume)
        return 0;
    return sg_prep_scratch_bytes(st->prep, classes);
}

/* Once the engines are built and the memory checked: the plan made again
 * for the models' device (the host's on the host path), the volume read
 * and run forward into the networks' image. The crop may make that image
 * smaller than the engines were built for; a window spanning a whole axis
 * (roi <= 0) is then built again for it. */
static sg_status prep_forward(job *st)
{
    int32_t device = -1;
    if (device_path(st)) {
        segrt_engine_info info;
        SG_TRY(segrt_engine_get_info(st->engine[0], &info));
        device = info.device_index;
    }
    const sg_source_info *in = &st->prep_in;
    int64_t dims[3] = {in->dims[0][0], in->dims[0][1], in->dims[0][2]};
    segrt_geometry g;
    sg_api_geometry(in, &g);
    sg_prep_free(st->prep);
    st->prep = NULL;
    sg_status s = sg_prep_plan(&st->prep_p, in->channels, dims, &g, device, &st->prep);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s: ", st->in);
    sg_tensor vol;
    if (st->given.data) { /* the caller's volume, taken */
        vol = st->given;
        st->where = st->given_where;
        memset(&st->given, 0, sizeof st->given);
    } else if (st->ahead.started) {
        SG_TRY(read_ahead_take(&st->ahead, &vol, &st->where, &st->parts.read));
    } else {
        double t0 = sg_now_seconds();
        SG_TRY(read_volume(st->in, st->jo, &vol, &st->where));
        st->parts.read += sg_now_seconds() - t0;
    }
    if (vol.rank != 5 || vol.dims[1] != in->channels || vol.dims[2] != dims[0] || vol.dims[3] != dims[1] ||
        vol.dims[4] != dims[2]) {
        free(vol.data);
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the file changed while segrt read it", st->in);
    }
    segrt_tensor img;
    double t0 = sg_now_seconds();
    s = sg_prep_forward(st->prep, vol.data, &img);
    free(vol.data);
    st->parts.prep += sg_now_seconds() - t0;
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s: ", st->in);
    int64_t before[SEGRT_MAX_RANK], after[SEGRT_MAX_RANK];
    sg_status d = sg_sw_input_dims(&st->sw, &st->image, before);
    st->image.rank = img.rank;
    memcpy(st->image.dims, img.dims, sizeof st->image.dims);
    if (img.memory == SEGRT_MEMORY_HOST) {
        st->image.data = img.data;
    } else {
        st->prep_image = img;
        st->image.data = NULL;
    }
    if (d == SEGRT_OK)
        d = sg_sw_input_dims(&st->sw, &st->image, after);
    if (d != SEGRT_OK || memcmp(before, after, sizeof(int64_t) * (size_t)st->image.rank) != 0)
        SG_TRY(build_members(st));
    return SEGRT_OK;
}

/* After the windows: their scores back to labels in the volume's grid,
 * the job's result. */
static sg_status prep_back(job *st)
{
    segrt_tensor scores, labels;
    if (st->prep_scores.data) {
        scores = st->prep_scores;
    } else {
        memset(&scores, 0, sizeof scores);
        scores.dtype = st->result.dtype;
        scores.rank = st->result.rank;
        memcpy(scores.dims, st->result.dims, sizeof scores.dims);
        scores.data = st->result.data;
        scores.memory = SEGRT_MEMORY_HOST;
    }
    sg_status s = sg_prep_back(st->prep, &scores, &labels);
    prep_free_device(&st->prep_scores);
    free(st->result.data);
    memset(&st->result, 0, sizeof st->result);
    SG_TRY(s);
    st->result.dtype = labels.dtype;
    st->result.rank = labels.rank;
    memcpy(st->result.dims, labels.dims, sizeof st->result.dims);
    st->result.data = labels.data;
    st->sw.output = st->prep_output;
    st->prep_output_saved = false;
    return SEGRT_OK;
}

/* The volume the caller read (sg_window_job_run_volume), taken as the
 * job's image, as read_volume would have read it. */
static sg_status take_given(job *st)
{
    st->image = st->given;
    st->where = st->given_where;
    memset(&st->given, 0, sizeof st->given);
    return SEGRT_OK;
}

/* --- a whole slide -------------------------------------------------------- */

/* The labels' small grid for a thumbnail and polygons: pixels a side. */
#define SLIDE_SMALL_SIDE 4096

/* The slide opened at the resolution the job asks (its option, else the
 * first model's segrt.mpp), and the image the windows see. */
static sg_status open_slide(job *st, sg_tensor *shape)
{
    const segrt_window_job_options *jo = st->jo;
    sg_slide_job_options so = {jo->mpp, jo->slide_threads};
    const char *meta = segrt_model_metadata_value(st->model[0], "segrt.mpp");
    if (!(so.mpp > 0) && meta) {
        double v[META_MAX_VALUES];
        if (parse_list(meta, v) != 1 || !(v[0] > 0))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: metadata segrt.mpp is `%s`; it wants one positive number (microns per pixel)",
                            st->path[0], meta);
        so.mpp = v[0];
    }
    SG_TRY(sg_slide_job_open(st->in, &so, &st->slide));
    sg_slide_job_shape(st->slide, shape);
    if (jo->tissue == SEGRT_TISSUE_OTSU || jo->tissue_mask_path)
        SG_TRY(sg_slide_job_detect_tissue(st->slide));
    if (jo->tissue == SEGRT_TISSUE_OTSU) {
        st->sw.keep_window = sg_slide_job_keep_window;
        st->sw.keep_window_user = st->slide;
    } else if (jo->tissue != SEGRT_TISSUE_NONE) {
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "tissue is %d: SEGRT_TISSUE_OTSU or SEGRT_TISSUE_NONE",
                        (int)jo->tissue);
    }
    return SEGRT_OK;
}

/* A slide read whole for the host path (its rows through the same reader
 * and normalisation as the device path's). */
static sg_status read_slide_whole(job *st)
{
    sg_sw_image *rows = sg_slide_job_rows(st->slide);
    int64_t H = rows->dims[2], W = rows->dims[3], plane = H * W;
    float *p = sg_malloc(sizeof(float) * (size_t)(3 * plane));
    if (!p)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the slide's %lld x %lld pixels", st->in,
                        (long long)W, (long long)H);
    sg_status s = sg_sw_image_read(rows, 0, 0, H, p, plane);
    if (s == SEGRT_OK && !st->jo->raw_input)
        s = norm_of(st->model[0], st->path[0], 3, &st->nm);
    if (s != SEGRT_OK) {
        free(p);
        return s;
    }
    for (int64_t c = 0; c < 3; c++)
        norm_apply(&st->nm, c, p + c * plane, plane);
    st->image.data = p;
    return SEGRT_OK;
}

/* A slide's labels: rows of a result made on the host into the pyramid
 * (the device path's went as they finished), the pyramid ended, then the
 * thumbnail. */
static sg_status write_slide(job *st, bool *write_failed)
{
    const segrt_window_job_options *jo = st->jo;
    if (st->result.data) {
        int64_t H = st->result.dims[2], W = st->result.dims[3];
        sg_status s = sg_slide_job_put_rows(st->slide, 0, 0, H, st->result.data, H * W);
        if (s != SEGRT_OK) {
            *write_failed = true;
            return s;
        }
    }
    sg_status s = sg_slide_job_end_output(st->slide);
    if (s == SEGRT_OK && jo->thumbnail_path)
        s = sg_slide_job_write_thumbnail(st->slide, jo->thumbnail_path);
    if (s == SEGRT_OK && jo->tissue_mask_path)
        s = sg_slide_job_write_tissue_mask(st->slide, jo->tissue_mask_path);
    if (s == SEGRT_OK && jo->geojson_path) {
        const char *names[256];
        size_t n_names;
        char *copy = class_names(st, names, &n_names);
        s = sg_slide_job_write_geojson(st->slide, jo->geojson_path, names, (int32_t)n_names);
        free(copy);
    }
    *write_failed = s != SEGRT_OK;
    return s;
}

static sg_status job_run_body(job *st, sg_output *result, sg_output *overlay, segrt_window_job_report *r)
{
    const segrt_window_job_options *jo = st->jo;
    /* Everything the header of the image and the models say, before any
     * engine is built. */
    sg_tensor shape;
    uint64_t extra_bytes;
    if (st->given.data) { /* a volume the caller read: its header is the tensor's */
        st->volume = true;
        shape = st->given;
        shape.data = NULL;
        extra_bytes = 0;
        st->prep_in = st->given_where;
    } else if (!is_volume(st->in) && sg_slide_job_takes(st->in)) {
        SG_TRY(open_slide(st, &shape));
        extra_bytes = 0;
    } else {
        st->volume = is_volume(st->in);
        SG_TRY(probe_image(st->in, jo, &shape, &extra_bytes, &st->prep_in));
    }
    if (shape.dtype != SEGRT_DTYPE_FLOAT32)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the image is %s; sliding windows read float32", st->in,
                        segrt_dtype_name(shape.dtype));
    if (shape.rank != st->sw.n_dims + 2)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a %d-D image (%d dims); the window has %d dims for N x C x %d spatial", st->in,
                        shape.rank - 2, shape.rank, st->sw.n_dims, st->sw.n_dims);
    for (int32_t m = 0; m < st->n; m++) {
        if (segrt_model_input_count(st->model[m]) != 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: sliding windows feed models of one input; this one has %zu", st->path[m],
                            segrt_model_input_count(st->model[m]));
        segrt_tensor_desc d;
        SG_TRY(segrt_model_input(st->model[m], 0, &d));
        if (d.rank != shape.rank)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: the model takes rank-%d input `%s`; the image has rank %d", st->path[m], d.rank,
                            d.name, shape.rank);
    }
    const char *out = sg_output_path(result);
    /* A slide's probabilities go to its pyramid as uint8, a class a sample. */
    st->sw.probs_u8 = st->slide && st->sw.output == SG_SW_OUTPUT_PROBS;
    if (st->slide && st->sw.output == SG_SW_OUTPUT_LOGITS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a slide's result is its labels or its probabilities (uint8, a class a sample), not "
                        "logits",
                        out);
    if (is_image_output(out) && st->sw.output != SG_SW_OUTPUT_LABELS && !st->sw.probs_u8)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: an image file takes a label map; write logits or probs to .npy", out);
    if (sg_dicom_seg_name(out))
        SG_TRY(check_seg_output(st, out));
    if (st->slide && (!is_image_output(out) || sg_image_format_of_name(out) != SG_IMAGE_TIFF))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a slide's labels are written as a pyramidal tiled TIFF: name it .tif or .tiff", out);
    if (st->slide && overlay)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a slide is too large to draw whole: ask for a thumbnail with the labels over it instead",
                        st->in);
    if (!st->slide && (jo->thumbnail_path || jo->geojson_path || jo->tissue_mask_path))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a thumbnail, polygons and a tissue mask are written for whole-slide images; this is "
                        "not one",
                        st->in);
    bool image_file = sg_image_is_image_file(st->in);
    if (overlay && (!image_file || st->sw.output != SG_SW_OUTPUT_LABELS || st->sw.n_dims != 2))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: an overlay draws labels over a 2-D image file (PNG, JPEG, TIFF)", st->in);
    if (st->volume)
        SG_TRY(prep_begin(st, &shape, &extra_bytes));
    else if (jo->preprocess && prep_asks(jo->preprocess))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: preprocessing (from %s) applies to volumes (NIfTI, DICOM)",
                        st->in, jo->preprocess->source ? jo->preprocess->source : "the job's options");
    /* The engines are built for the window from the image's header; the
     * image is read once they are, and the memory check passed; but a
     * volume whose read alone (its samples as stored and as float32)
     * fits the host budget is read meanwhile, on a thread of its own: the
     * whole need is still checked before the windows, and a refusal
     * drops it. */
    if (st->volume && !st->given.data) {
        const sg_source_info *in = &st->prep_in;
        uint64_t n = (uint64_t)in->channels * (uint64_t)(in->n_dims == 3 ? in->dims[0][0] : 1) *
                     (uint64_t)in->dims[0][1] * (uint64_t)in->dims[0][2];
        uint64_t read_bytes = n * (sizeof(float) + segrt_dtype_size(in->dtype));
        if (!st->sw.max_host_memory || read_bytes + st->held_elsewhere <= st->sw.max_host_memory)
            read_ahead_start(&st->ahead, st->in, jo);
    }
    if (st->slide && jo->notice) /* what was chosen, once the job is known to suit it */
        jo->notice(jo->notice_user, sg_slide_job_describe(st->slide));
    st->image = shape;
    /* Built once while the window's input dims stay (a folder's cases). */
    bool build = !engines_fit(st);
    if (build && jo->auto_batch)
        st->sw.sw_batch = 1; /* the estimate starts from engines for one window */
    if (build)
        SG_TRY(build_members(st));
    if (build && jo->auto_batch) {
        segrt_engine_info info;
        if (segrt_engine_get_info(st->engine[0], &info) == SEGRT_OK && info.device == SEGRT_DEVICE_CUDA) {
            int32_t b = auto_batch(st, info.device_index);
            if (b > 1) {
                st->sw.sw_batch = b;
                SG_TRY(build_members(st));
            }
        }
    }
    int64_t classes = 0;
    SG_TRY(check_result_fits(st, out, &classes));
    SG_TRY(open_stream(st, overlay != NULL, classes));
    SG_TRY(check_host_memory(st, classes,
                             (st->streamed ? 0 : extra_bytes + prep_host_scratch(st, classes)) + st->held_elsewhere));
    if (st->checked)
        st->checked(st->checked_user);
    if (st->prep) {
        SG_TRY(prep_forward(st));
    } else if (st->volume) {
        if (st->ahead.started) {
            SG_TRY(read_ahead_take(&st->ahead, &st->image, &st->where, &st->parts.read));
        } else {
            double tr = sg_now_seconds();
            SG_TRY(st->given.data ? take_given(st) : read_volume(st->in, jo, &st->image, &st->where));
            st->parts.read += sg_now_seconds() - tr;
        }
        if (st->image.rank != shape.rank || memcmp(st->image.dims, shape.dims, sizeof(int64_t) * (size_t)shape.rank))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the file changed while segrt read it", st->in);
    } else if (st->slide && !st->streamed) {
        double tr = sg_now_seconds();
        SG_TRY(read_slide_whole(st));
        st->parts.read += sg_now_seconds() - tr;
    } else if (!st->streamed) {
        double tr = sg_now_seconds();
        SG_TRY(read_image(st->in, st->model[0], st->path[0], jo->raw_input != 0, &st->image, &st->pixels));
        st->parts.read += sg_now_seconds() - tr;
        if (st->image.rank != shape.rank || memcmp(st->image.dims, shape.dims, sizeof(int64_t) * (size_t)shape.rank))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the file changed while segrt read it", st->in);
    }
    sg_sw_stats stats;
    bool on_device = false;
    sg_status s;
    if (jo->progress) { /* the windows start now: a caller's clock for the rate starts here */
        fill_report(st, &(sg_sw_stats){0}, false, r);
        jo->progress(jo->progress_user, 0, r->windows);
    }
    if (st->slide)
        SG_TRY(sg_slide_job_begin_output(st->slide, result, classes > 256 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8,
                                         st->sw.probs_u8 ? (int32_t)classes : 0,
                                         jo->thumbnail_path || jo->geojson_path ? SLIDE_SMALL_SIDE : 0));
    double t0 = sg_now_seconds();
    /* (A slide's rows go to its pyramid as they finish: a retry would
     * write them twice.) */
    while ((s = run_windows(st, &stats, &on_device)) == SEGRT_ERROR_OUT_OF_MEMORY && jo->auto_batch &&
           st->sw.sw_batch > 1 && !st->slide) {
        if (jo->notice) {
            char line[160];
            snprintf(line, sizeof line, "out of device memory with %d windows a run; retrying with %d", st->sw.sw_batch,
                     st->sw.sw_batch / 2);
            jo->notice(jo->notice_user, line);
        }
        st->sw.sw_batch /= 2;
        SG_TRY(build_members(st));
        t0 = sg_now_seconds();
    }
    double tb = sg_now_seconds();
    st->parts.windows = tb - t0;
    if (s == SEGRT_OK && st->prep) {
        s = prep_back(st);
        st->parts.back = sg_now_seconds() - tb;
    }
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "%s over %s: ", st->path[0], st->in);
    r->seconds = st->parts.windows;
    fill_report(st, &stats, on_device, r);
    if (st->slide && jo->notice) {
        char line[400];
        jo->notice(jo->notice_user, sg_slide_job_decoder(st->slide, line, sizeof line));
        uint32_t flips[SG_SW_MAX_FLIPS];
        int32_t n_flips;
        sg_sw_flips(st->sw.tta_axes, st->sw.n_dims, flips, &n_flips);
        int64_t per = (int64_t)st->n * (n_flips > 0 ? n_flips : 1), ran = per > 0 ? r->stats.runs / per : 0;
        if (st->sw.keep_window && ran < r->windows) {
            snprintf(line, sizeof line, "%lld of the %lld windows ran (the others are over glass: label 0)",
                     (long long)ran, (long long)r->windows);
            jo->notice(jo->notice_user, line);
        }
    }
    bool write_failed = false;
    double tw = sg_now_seconds();
    s = st->slide ? write_slide(st, &write_failed) : write_result(result, &st->result, st, &write_failed);
    if (s == SEGRT_OK && overlay)
        s = write_overlay(overlay, &st->pixels, &st->result, &write_failed);
    st->seconds_write = sg_now_seconds() - tw;
    st->parts.write = st->seconds_write;
    r->parts = st->parts;
    r->write_failed = write_failed;
    return s;
}

/* A run, and whatever read it started and did not take dropped on any
 * way out. */
static sg_status job_run(job *st, sg_output *result, sg_output *overlay, segrt_window_job_report *r)
{
    sg_status s = job_run_body(st, result, overlay, r);
    read_ahead_drop(&st->ahead);
    return s;
}

sg_status sg_window_job_create(const segrt_window_job_options *o, segrt_model *const *models,
                               const char *const *model_paths, size_t n_models, sg_window_job **out)
{
    *out = NULL;
    if (n_models < 1 || n_models > JOB_MAX_MODELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_job_run: %zu models (1 to %d)", n_models,
                        JOB_MAX_MODELS);
    job *st = sg_calloc(1, sizeof *st);
    if (!st)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "segrt_window_job_run: no memory for the job");
    st->jo = o;
    st->model = models;
    st->n = (int32_t)n_models;
    sg_status s = SEGRT_OK;
    for (int32_t m = 0; m < st->n && s == SEGRT_OK; m++) {
        if (!models[m])
            s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_window_job_run: model %d is NULL", m);
        st->path[m] = model_paths && model_paths[m] ? model_paths[m] : "the model";
    }
    if (s == SEGRT_OK)
        s = job_sw_options(o, &st->sw);
    if (s != SEGRT_OK) {
        sg_window_job_free(st);
        return s;
    }
    *out = st;
    return SEGRT_OK;
}

void sg_window_job_free(sg_window_job *st)
{
    if (!st)
        return;
    job_free(st);
    free(st);
}

/* What one run leaves that the next must not see; the engines stay. */
static void job_reset_run(job *st)
{
    read_ahead_drop(&st->ahead);
    sg_slide_job_close(st->slide);
    st->slide = NULL;
    st->sw.row_sink = NULL;
    st->sw.row_sink_user = NULL;
    st->sw.keep_window = NULL;
    st->sw.keep_window_user = NULL;
    prep_free_device(&st->prep_image);
    prep_free_device(&st->prep_scores);
    sg_prep_free(st->prep);
    st->prep = NULL;
    if (st->prep_output_saved) /* a run that failed between prep_begin and prep_back */
        st->sw.output = st->prep_output;
    st->prep_output_saved = false;
    memset(&st->prep_in, 0, sizeof st->prep_in);
    sg_sw_image_free(&st->src_rows);
    sg_source_close(st->src);
    st->src = NULL;
    memset(&st->rows, 0, sizeof st->rows);
    st->streamed = false;
    st->src_held = 0;
    sg_image_free(&st->pixels);
    memset(&st->pixels, 0, sizeof st->pixels);
    free(st->image.data);
    free(st->result.data);
    free(st->given.data);
    memset(&st->image, 0, sizeof st->image);
    memset(&st->result, 0, sizeof st->result);
    memset(&st->given, 0, sizeof st->given);
    memset(&st->where, 0, sizeof st->where);
    memset(&st->nm, 0, sizeof st->nm);
    st->held_elsewhere = 0;
    st->memory_refused = false;
    st->checked = NULL;
    st->checked_user = NULL;
    st->seconds_write = 0.0;
    memset(&st->parts, 0, sizeof st->parts);
}

sg_status sg_window_job_run_volume(sg_window_job *st, const char *name, sg_tensor *image, const sg_source_info *where,
                                   sg_output *result, segrt_window_job_report *report, sg_window_run_more *more)
{
    segrt_window_job_report scratch;
    segrt_window_job_report *r = report ? report : &scratch;
    memset(r, 0, sizeof *r);
    job_reset_run(st);
    st->given = *image;
    memset(image, 0, sizeof *image);
    st->given_where = *where;
    st->given_where.format = NULL;
    st->in = name;
    if (more) {
        st->held_elsewhere = more->held_elsewhere;
        st->checked = more->checked;
        st->checked_user = more->checked_user;
    }
    sg_status s = SEGRT_OK;
    if (!st->given.data || st->given.dtype != SEGRT_DTYPE_FLOAT32)
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a volume run takes a float32 volume read whole", name);
    if (s == SEGRT_OK)
        s = job_run(st, result, NULL, r);
    if (more) {
        more->memory_refused = s != SEGRT_OK && st->memory_refused;
        more->seconds_write = st->seconds_write;
        if (more->memory_refused && st->given.data) { /* not taken: the caller's for another try */
            *image = st->given;
            memset(&st->given, 0, sizeof st->given);
        }
    }
    job_reset_run(st); /* the volume and result go now, not with the next run */
    return s;
}

sg_status sg_window_job_run_file(sg_window_job *st, const char *path, sg_output *result,
                                 segrt_window_job_report *report, double *seconds_write)
{
    segrt_window_job_report scratch;
    segrt_window_job_report *r = report ? report : &scratch;
    memset(r, 0, sizeof *r);
    job_reset_run(st);
    st->in = path;
    sg_status s = job_run(st, result, NULL, r);
    if (seconds_write)
        *seconds_write = st->seconds_write;
    job_reset_run(st);
    return s;
}

segrt_status segrt_window_job_run(const segrt_window_job_options *o, segrt_model *const *models,
                                  const char *const *model_paths, size_t n_models, const char *image_path,
                                  segrt_output *result, segrt_output *overlay, segrt_window_job_report *report)
{
    segrt_window_job_report scratch;
    segrt_window_job_report *r = report ? report : &scratch;
    memset(r, 0, sizeof *r);
    if (!o || !models || !image_path || !result)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_window_job_run: options, models, image_path and result must not be NULL");
    job *st;
    SG_TRY(sg_window_job_create(o, models, model_paths, n_models, &st));
    st->in = image_path;
    sg_status s = job_run(st, sg_output_of(result), overlay ? sg_output_of(overlay) : NULL, r);
    sg_window_job_free(st);
    return s;
}
