/* The whole-slide part of the window job (job_slide.h). */
#include "pipeline/job_slide.h"

#include "core/mem.h"
#include "io/image.h"
#include "io/sink.h"
#include "io/slide.h"
#include "io/source.h"
#include "pipeline/geojson.h"
#include "pipeline/overlay.h"
#include "pipeline/slide_gpu.h"
#include "pipeline/tissue.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLIDE_MAX_THREADS 16
/* A reader thread's stripe is at least this wide: narrower ones decode
 * the same tiles twice for little gain. */
#define SLIDE_MIN_STRIPE 512
/* Level pixels per grid pixel within 1 % of 1: the level is read as it is. */
#define SLIDE_EXACT 0.01
/* Bands of labels waiting for the writer thread. */
#define SLIDE_WRITE_QUEUE 4
/* Rows read ahead: a band of this many bytes as float32 (at least 16
 * rows): a few windows' rows of a wide slide, each reader's stripe a tile
 * row or two of the level. */
#define SLIDE_AHEAD_BYTES ((int64_t)64 << 20)
/* A band larger than this is written in line (the host path's whole
 * result), not copied for the writer. */
#define SLIDE_WRITE_COPY_MAX ((int64_t)64 << 20)

/* Area weights along one axis: grid pixel i covers level pixels
 * [first[i], first[i] + count[i]) with weights w[i * span ...] summing
 * to 1. */
typedef struct area_axis {
    int64_t n, span;
    int64_t *first;
    int32_t *count;
    float *w;
} area_axis;

static void area_free(area_axis *a)
{
    free(a->first);
    free(a->count);
    free(a->w);
    memset(a, 0, sizeof *a);
}

/* n grid pixels over `len` level pixels at f level pixels each (the last
 * ones clipped to the level). */
static sg_status area_make(int64_t n, int64_t len, double f, area_axis *a)
{
    memset(a, 0, sizeof *a);
    a->n = n;
    a->span = (int64_t)ceil(f) + 1;
    a->first = malloc(sizeof(int64_t) * (size_t)n);
    a->count = malloc(sizeof(int32_t) * (size_t)n);
    a->w = malloc(sizeof(float) * (size_t)(n * a->span));
    if (!a->first || !a->count || !a->w) {
        area_free(a);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < n; i++) {
        double lo = (double)i * f, hi = (double)(i + 1) * f;
        hi = hi > (double)len ? (double)len : hi;
        lo = lo > hi - 1e-9 ? hi - 1.0 : lo; /* a pixel past the level's end repeats its last */
        lo = lo < 0 ? 0 : lo;
        int64_t k0 = (int64_t)floor(lo), k1 = (int64_t)ceil(hi);
        k1 = k1 > len ? len : k1;
        k1 = k1 - k0 > a->span ? k0 + a->span : k1;
        a->first[i] = k0;
        a->count[i] = (int32_t)(k1 - k0);
        double total = 0;
        for (int64_t k = k0; k < k1; k++) {
            double o = fmin(hi, (double)(k + 1)) - fmax(lo, (double)k);
            a->w[i * a->span + (k - k0)] = (float)(o > 0 ? o : 0);
            total += o > 0 ? o : 0;
        }
        for (int64_t k = k0; k < k1; k++)
            a->w[i * a->span + (k - k0)] = total > 0 ? (float)(a->w[i * a->span + (k - k0)] / total) : 0.0f;
    }
    return SEGRT_OK;
}

/* A reader thread's share of a read: grid rows [r0, r1) and columns
 * [c0, c1), into dst (channel c's rows at dst + c * cstride, rows
 * `pitch` floats apart, starting at column c0 of the row). */
typedef struct stripe {
    struct sg_slide_job *j;
    int32_t t;
    int64_t r0, r1, c0, c1;
    float *dst;
    int64_t cstride, pitch;
    sg_status status;
    char error[512];
} stripe;

struct sg_slide_job {
    char *path;
    sg_source *src;                       /* the first reader's handle; the tissue and the thumbnail read it */
    sg_source *reader[SLIDE_MAX_THREADS]; /* a handle each: [0] is src */
    int32_t n_threads;
    int32_t level;
    double f;   /* level pixels per grid pixel (1: the level as it is) */
    double ds;  /* level-0 pixels per grid pixel */
    double mpp; /* the grid's, 0 where the slide says none */
    int64_t H, W, LH, LW;
    area_axis ax_rows, ax_cols;
    uint8_t *buf[SLIDE_MAX_THREADS]; /* a thread's level region */
    size_t cap[SLIDE_MAX_THREADS];
    float *tmp[SLIDE_MAX_THREADS]; /* its rows after the vertical pass */
    size_t tmp_cap[SLIDE_MAX_THREADS];
    sg_sw_image rows;
    char describe[512];
    /* The level's JPEG tiles for the device's decoder (NULL: the level is
     * read through OpenSlide, tiles_why says why), and that decoder once
     * the device path asks for rows (gpu_why: why it did not start). */
    sg_slide_tiles *tiles;
    char tiles_why[256];
    sg_slide_gpu *gpu;
    sg_window_norm norm; /* what the device's rows are normalised by */
    bool gpu_failed;
    char gpu_why[256];
    sg_tissue_mask tissue;
    bool have_tissue;
    /* Rows read ahead: the band of rows after the last read, on a thread
     * of its own while the job goes on (its reads come in order, in pieces
     * of a pinned buffer cut where its ring of rows wraps); valid: rows
     * [r0, r1) are in buf, channel c at c * (r1 - r0) rows. */
    struct {
        pthread_t th;
        bool running, valid;
        int64_t r0, r1;
        float *buf;
        size_t cap;
        sg_status status;
        char error[512];
    } ahead;
    /* The labels' writer thread: bands queued by put_rows, written into
     * the pyramid (which deflates tiles and builds the reduced levels) while
     * the windows go on. */
    pthread_t writer;
    bool writer_on, closing;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct {
        uint8_t *data;
        size_t cap;
        int64_t r0, r1;
    } q[SLIDE_WRITE_QUEUE];
    int32_t q_head, q_count;
    sg_status write_status;
    char write_error[512];
    /* The output. */
    sg_sink *sink;
    segrt_dtype out_dtype;
    int32_t out_ch; /* 1 (labels) or the classes of uint8 probabilities */
    uint8_t *pack;  /* a band of probability planes packed for in-line writing */
    size_t pack_cap;
    int64_t next_row;
    uint8_t *small;
    int64_t sh, sw;
    double s_step; /* grid pixels per small pixel */
};

bool sg_slide_job_takes(const char *path)
{
    if (sg_slide_detect(path))
        return true;
    if (!sg_image_is_image_file(path))
        return false;
    sg_source *s;
    if (sg_source_open(path, &s) != SEGRT_OK) {
        sg_error_clear();
        return false;
    }
    bool pyramid = strcmp(s->info.format, "tiff") == 0 && s->info.n_levels > 1 && s->info.n_dims == 2;
    sg_source_close(s);
    if (!pyramid)
        return false;
    /* A pyramid OpenSlide does not read (stripped pages, say) stays the
     * image reader's, which refuses it with its own reasons. */
    if (sg_source_open_slide(path, NULL, &s) != SEGRT_OK) {
        sg_error_clear();
        return false;
    }
    sg_source_close(s);
    return true;
}

/* Grows *p to at least n bytes. */
static bool reserve(void **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    void *q = realloc(*p, n);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

/* One stripe: the level's box under it read through the thread's
 * handle, then shrunk by area (or converted, where the level is read as
 * it is). */
static sg_status stripe_read(stripe *s)
{
    struct sg_slide_job *j = s->j;
    int32_t t = s->t;
    int64_t nr = s->r1 - s->r0, nc = s->c1 - s->c0;
    bool exact = j->f == 1.0;
    int64_t y0 = exact ? s->r0 : j->ax_rows.first[s->r0];
    int64_t y1 = exact ? s->r1 : j->ax_rows.first[s->r1 - 1] + j->ax_rows.count[s->r1 - 1];
    int64_t x0 = exact ? s->c0 : j->ax_cols.first[s->c0];
    int64_t x1 = exact ? s->c1 : j->ax_cols.first[s->c1 - 1] + j->ax_cols.count[s->c1 - 1];
    int64_t bh = y1 - y0, bw = x1 - x0;
    if (!reserve((void **)&j->buf[t], &j->cap[t], (size_t)(3 * bh * bw)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %lld x %lld pixels of the slide", j->path,
                        (long long)bh, (long long)bw);
    sg_box box = {{0, y0, x0}, {1, bh, bw}};
    SG_TRY(sg_source_read_region(j->reader[t], j->level, &box, j->buf[t]));
    const uint8_t *in = j->buf[t];
    if (exact) {
        for (int64_t c = 0; c < 3; c++)
            for (int64_t r = 0; r < nr; r++) {
                const uint8_t *p = in + (c * bh + r) * bw;
                float *d = s->dst + c * s->cstride + r * s->pitch;
                for (int64_t x = 0; x < nc; x++)
                    d[x] = (float)p[x];
            }
        return SEGRT_OK;
    }
    /* Rows first (the level's columns of the box), then columns. */
    if (!reserve((void **)&j->tmp[t], &j->tmp_cap[t], sizeof(float) * (size_t)(3 * nr * bw)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %lld rows of the slide", j->path, (long long)nr);
    float *mid = j->tmp[t];
    const area_axis *ar = &j->ax_rows, *ac = &j->ax_cols;
    for (int64_t c = 0; c < 3; c++)
        for (int64_t r = 0; r < nr; r++) {
            int64_t i = s->r0 + r;
            float *m = mid + (c * nr + r) * bw;
            for (int64_t x = 0; x < bw; x++)
                m[x] = 0;
            for (int32_t k = 0; k < ar->count[i]; k++) {
                float w = ar->w[i * ar->span + k];
                const uint8_t *p = in + (c * bh + (ar->first[i] + k - y0)) * bw;
                for (int64_t x = 0; x < bw; x++)
                    m[x] += w * (float)p[x];
            }
        }
    for (int64_t c = 0; c < 3; c++)
        for (int64_t r = 0; r < nr; r++) {
            const float *m = mid + (c * nr + r) * bw;
            float *d = s->dst + c * s->cstride + r * s->pitch;
            for (int64_t x = 0; x < nc; x++) {
                int64_t i = s->c0 + x;
                const float *w = ac->w + i * ac->span;
                const float *p = m + (ac->first[i] - x0);
                float v = 0;
                for (int32_t k = 0; k < ac->count[i]; k++)
                    v += w[k] * p[k];
                d[x] = v;
            }
        }
    return SEGRT_OK;
}

static void *stripe_main(void *arg)
{
    stripe *s = arg;
    s->status = stripe_read(s);
    if (s->status != SEGRT_OK)
        snprintf(s->error, sizeof s->error, "%s", sg_last_error());
    return NULL;
}

/* Rows [r0, r1) in stripes of columns on the reader threads (the first
 * on this one). */
static sg_status read_stripes(struct sg_slide_job *j, int64_t r0, int64_t r1, float *dst, int64_t channel_stride)
{
    int32_t T = j->n_threads;
    stripe s[SLIDE_MAX_THREADS];
    pthread_t th[SLIDE_MAX_THREADS];
    bool started[SLIDE_MAX_THREADS] = {false};
    for (int32_t t = 0; t < T; t++) {
        s[t] = (stripe){.j = j,
                        .t = t,
                        .r0 = r0,
                        .r1 = r1,
                        .c0 = j->W * t / T,
                        .c1 = j->W * (t + 1) / T,
                        .cstride = channel_stride,
                        .pitch = j->W};
        s[t].dst = dst + s[t].c0;
    }
    for (int32_t t = 1; t < T; t++)
        started[t] = pthread_create(&th[t], NULL, stripe_main, &s[t]) == 0;
    stripe_main(&s[0]);
    for (int32_t t = 1; t < T; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            stripe_main(&s[t]); /* no thread: in line */
    }
    for (int32_t t = 0; t < T; t++)
        if (s[t].status != SEGRT_OK)
            return sg_error(s[t].status, "%s", s[t].error);
    return SEGRT_OK;
}

static void *ahead_main(void *arg)
{
    struct sg_slide_job *j = arg;
    j->ahead.status = read_stripes(j, j->ahead.r0, j->ahead.r1, j->ahead.buf, (j->ahead.r1 - j->ahead.r0) * j->W);
    if (j->ahead.status != SEGRT_OK)
        snprintf(j->ahead.error, sizeof j->ahead.error, "%s", sg_last_error());
    return NULL;
}

/* The read ahead finished (its result stays for the next read). */
static void ahead_join(struct sg_slide_job *j)
{
    if (j->ahead.running)
        pthread_join(j->ahead.th, NULL);
    j->ahead.running = false;
}

/* The row reader's read: what the band read ahead holds of the rows,
 * the rest read now; then, once the band is used up, the next band
 * started ahead from the last row asked. */
static sg_status slide_rows_read(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride)
{
    struct sg_slide_job *j = im->state;
    if (n != 0 || r0 < 0 || r1 > j->H || r1 < r0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: rows [%lld, %lld) of a slide of %lld rows", j->path,
                        (long long)r0, (long long)r1, (long long)j->H);
    if (r1 == r0)
        return SEGRT_OK;
    ahead_join(j);
    int64_t x = r0;
    if (j->ahead.valid && j->ahead.r0 <= r0 && r0 < j->ahead.r1) {
        if (j->ahead.status != SEGRT_OK)
            return sg_error(j->ahead.status, "%s", j->ahead.error);
        int64_t e = r1 < j->ahead.r1 ? r1 : j->ahead.r1, band = (j->ahead.r1 - j->ahead.r0) * j->W;
        for (int64_t c = 0; c < 3; c++)
            memcpy(dst + c * channel_stride, j->ahead.buf + c * band + (r0 - j->ahead.r0) * j->W,
                   sizeof(float) * (size_t)((e - r0) * j->W));
        x = e;
    }
    if (x < r1)
        SG_TRY(read_stripes(j, x, r1, dst + (x - r0) * j->W, channel_stride));
    if (j->ahead.valid && r1 < j->ahead.r1)
        return SEGRT_OK; /* the band still holds the next rows */
    int64_t rows = SLIDE_AHEAD_BYTES / (int64_t)(3 * sizeof(float)) / j->W;
    rows = rows < 16 ? 16 : rows;
    rows = rows < r1 - r0 ? r1 - r0 : rows;
    int64_t a = r1, b = r1 + rows < j->H ? r1 + rows : j->H;
    j->ahead.valid = false;
    if (a < b && reserve((void **)&j->ahead.buf, &j->ahead.cap, sizeof(float) * (size_t)(3 * (b - a) * j->W))) {
        j->ahead.r0 = a;
        j->ahead.r1 = b;
        j->ahead.running = j->ahead.valid = pthread_create(&j->ahead.th, NULL, ahead_main, j) == 0;
    }
    return SEGRT_OK;
}

/* The device path's read: the level's tiles decoded on the device
 * (slide_gpu.h), started on the first call; UNSUPPORTED (the rows then
 * come through slide_rows_read) where that cannot start. */
static sg_status slide_rows_read_device(sg_sw_image *im, const sg_window_ops *ops, int64_t n, int64_t r0, int64_t r1,
                                        float *dst, int64_t channel_stride, sg_backend_stream *stream)
{
    struct sg_slide_job *j = im->state;
    if (n != 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: image %lld of a slide", j->path, (long long)n);
    if (!j->gpu) {
        if (j->gpu_failed)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s", j->gpu_why);
        sg_slide_axis rows = {j->ax_rows.n, j->ax_rows.span, j->ax_rows.first, j->ax_rows.count, j->ax_rows.w};
        sg_slide_axis cols = {j->ax_cols.n, j->ax_cols.span, j->ax_cols.first, j->ax_cols.count, j->ax_cols.w};
        if (sg_slide_gpu_open(ops, j->tiles, &rows, &cols, &j->norm, &j->gpu) != SEGRT_OK) {
            /* Whatever stops it (no nvJPEG, no device memory for the
             * ring), OpenSlide still reads the level. */
            j->gpu_failed = true;
            snprintf(j->gpu_why, sizeof j->gpu_why, "%s", sg_last_error());
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s", j->gpu_why);
        }
    }
    sg_status s = sg_slide_gpu_rows(j->gpu, r0, r1, dst, channel_stride, stream);
    if (s == SEGRT_ERROR_UNSUPPORTED) { /* its decoder did not start (no nvJPEG): OpenSlide reads */
        j->gpu_failed = true;
        snprintf(j->gpu_why, sizeof j->gpu_why, "%s", sg_last_error());
        sg_slide_gpu_close(j->gpu);
        j->gpu = NULL;
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s", j->gpu_why);
    }
    return s;
}

/* The level's JPEG tiles, where the device may decode them: the rows'
 * reader then offers read_device. Area weights are made for both axes
 * (identity ones where the level is read as it is), as the device
 * resamples through them whatever the factor. */
static void offer_tiles(struct sg_slide_job *j)
{
    if (sg_slide_tiles_open(j->src, j->level, &j->tiles) != SEGRT_OK) {
        snprintf(j->tiles_why, sizeof j->tiles_why, "%s", sg_last_error());
        sg_error_clear();
        return;
    }
    if (j->f == 1.0 &&
        (area_make(j->H, j->LH, 1.0, &j->ax_rows) != SEGRT_OK || area_make(j->W, j->LW, 1.0, &j->ax_cols) != SEGRT_OK)) {
        snprintf(j->tiles_why, sizeof j->tiles_why, "%s: no memory for the rows' weights", j->path);
        sg_slide_tiles_close(j->tiles);
        j->tiles = NULL;
        return;
    }
    j->rows.read_device = slide_rows_read_device;
}

void sg_slide_job_set_norm(sg_slide_job *j, const sg_window_norm *norm)
{
    j->norm = *norm;
}

const char *sg_slide_job_decoder(const sg_slide_job *j, char *buf, size_t cap)
{
    if (j->gpu)
        snprintf(buf, cap, "%lld JPEG tiles decoded on the device by %s", (long long)sg_slide_gpu_tiles_decoded(j->gpu),
                 sg_slide_gpu_engine(j->gpu));
    else
        snprintf(buf, cap, "read through OpenSlide on %d thread%s (%s)", (int)j->n_threads, j->n_threads == 1 ? "" : "s",
                 j->gpu_failed ? j->gpu_why
                 : j->tiles    ? "its JPEG tiles are decoded on the GPU on the device path only"
                               : j->tiles_why);
    return buf;
}

/* The level and factor for `mpp` (see job_slide.h). */
static sg_status choose_grid(struct sg_slide_job *j, double mpp)
{
    const sg_source_info *in = &j->src->info;
    double mpp0 = in->spacing[2] * 1000.0;
    j->level = 0;
    j->f = 1.0;
    if (mpp > 0) {
        if (!(mpp0 > 0))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: the slide does not say its microns per pixel, so %g um/px cannot be found in it "
                            "(run without --mpp and without the model's segrt.mpp to use its full resolution)",
                            j->path, mpp);
        for (int32_t l = in->n_levels - 1; l >= 0; l--)
            if (mpp0 * in->downsample[l] <= mpp * (1.0 + SLIDE_EXACT)) {
                j->level = l;
                break;
            }
        j->f = mpp / (mpp0 * in->downsample[j->level]);
        if (fabs(j->f - 1.0) <= SLIDE_EXACT)
            j->f = 1.0;
        if (j->f < 0.25 || j->f > 64)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: %g um/px is %.3gx the slide's %s level (%g um/px); segrt resamples by 1/4 to 64",
                            j->path, mpp, j->f, j->f < 1 ? "finest" : "coarsest", mpp0 * in->downsample[j->level]);
    }
    j->LH = in->dims[j->level][1];
    j->LW = in->dims[j->level][2];
    j->H = j->f == 1.0 ? j->LH : llround((double)j->LH / j->f);
    j->W = j->f == 1.0 ? j->LW : llround((double)j->LW / j->f);
    j->H = j->H < 1 ? 1 : j->H;
    j->W = j->W < 1 ? 1 : j->W;
    j->ds = in->downsample[j->level] * j->f;
    j->mpp = mpp0 > 0 ? mpp0 * j->ds : 0;
    if (j->f != 1.0) {
        if (area_make(j->H, j->LH, j->f, &j->ax_rows) != SEGRT_OK ||
            area_make(j->W, j->LW, j->f, &j->ax_cols) != SEGRT_OK)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the resampling weights", j->path);
    }
    snprintf(j->describe, sizeof j->describe, "%s: level %d (%lld x %lld)%s, windows over %lld x %lld px at %s",
             j->path, j->level, (long long)j->LW, (long long)j->LH, j->f == 1.0 ? "" : ", shrunk by area",
             (long long)j->W, (long long)j->H, j->mpp > 0 ? "" : "the level's resolution (the slide says no um/px)");
    if (j->mpp > 0) {
        size_t n = strlen(j->describe);
        snprintf(j->describe + n, sizeof j->describe - n, "%.4g um/px", j->mpp);
    }
    return SEGRT_OK;
}

sg_status sg_slide_job_open(const char *path, const sg_slide_job_options *o, sg_slide_job **out)
{
    *out = NULL;
    struct sg_slide_job *j = sg_calloc(1, sizeof *j);
    if (!j || !(j->path = strdup(path))) {
        free(j);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the slide", path);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    sg_status s = sg_source_open_slide(path, NULL, &j->src);
    if (s == SEGRT_OK)
        s = choose_grid(j, o ? o->mpp : 0);
    if (s != SEGRT_OK) {
        sg_slide_job_close(j);
        return s;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t want = o && o->threads > 0 ? o->threads : (int32_t)(cores > 0 ? cores : 1);
    want = want > SLIDE_MAX_THREADS ? SLIDE_MAX_THREADS : want;
    int64_t by_width = j->W / SLIDE_MIN_STRIPE;
    want = by_width < want ? (int32_t)(by_width > 1 ? by_width : 1) : want;
    j->reader[0] = j->src;
    j->n_threads = 1;
    for (int32_t t = 1; t < want; t++) {
        if (sg_source_open_slide(path, NULL, &j->reader[t]) != SEGRT_OK) {
            sg_error_clear(); /* fewer readers: the job still runs */
            break;
        }
        j->n_threads++;
    }
    j->rows.rank = 4;
    j->rows.dims[0] = 1;
    j->rows.dims[1] = 3;
    j->rows.dims[2] = j->H;
    j->rows.dims[3] = j->W;
    j->rows.read = slide_rows_read;
    j->rows.state = j;
    offer_tiles(j);
    *out = j;
    return SEGRT_OK;
}

void sg_slide_job_shape(const sg_slide_job *j, sg_tensor *shape)
{
    memset(shape, 0, sizeof *shape);
    shape->dtype = SEGRT_DTYPE_FLOAT32;
    shape->rank = 4;
    shape->dims[0] = 1;
    shape->dims[1] = 3;
    shape->dims[2] = j->H;
    shape->dims[3] = j->W;
}

const char *sg_slide_job_describe(const sg_slide_job *j)
{
    return j->describe;
}

sg_sw_image *sg_slide_job_rows(sg_slide_job *j)
{
    return &j->rows;
}

uint64_t sg_slide_job_held_bytes(const sg_slide_job *j, int64_t rows, int32_t out_bytes)
{
    /* Each thread's level box (3 bytes a pixel) and, when shrinking, its
     * rows after the vertical pass (3 floats a level column); OpenSlide's
     * own tile cache beside each handle. */
    double f = j->f < 1 ? 1 : j->f;
    uint64_t box = (uint64_t)(3.0 * ((double)rows * f + 2) * ((double)j->W * f + 2 * j->n_threads));
    uint64_t mid = j->f == 1.0 ? 0 : (uint64_t)(3.0 * 4.0 * (double)rows * ((double)j->W * f + 2 * j->n_threads));
    /* ... and the band read ahead, and the result's bands queued for the
     * writer (at most a pinned buffer's worth each, 8 MiB). */
    uint64_t band = (uint64_t)SLIDE_AHEAD_BYTES > 3 * 4 * 16 * (uint64_t)j->W ? (uint64_t)SLIDE_AHEAD_BYTES
                                                                              : 3 * 4 * 16 * (uint64_t)j->W;
    /* ... and the pyramid writer's: a row of 512^2 tiles of each level
     * (twice level 0's in all), that row deflated, and a tile for each
     * encoding thread (out_bytes a pixel). */
    uint64_t tile = 512 * 512 * (uint64_t)(out_bytes > 0 ? out_bytes : 1), across = (uint64_t)j->W / 512 + 1;
    uint64_t writer = 2 * across * tile + across * (tile + tile / 1000 + 64) + (uint64_t)omp_get_max_threads() * tile;
    return box + mid + (uint64_t)j->n_threads * ((uint64_t)32 << 20) + band + SLIDE_WRITE_QUEUE * ((uint64_t)8 << 20) +
           writer;
}

double sg_slide_job_scale(const sg_slide_job *j)
{
    return j->ds;
}

struct sg_source *sg_slide_job_source(sg_slide_job *j)
{
    return j->src;
}

static void *writer_main(void *arg);

sg_status sg_slide_job_begin_output(sg_slide_job *j, sg_output *o, segrt_dtype labels, int32_t probs,
                                    int64_t small_side)
{
    sg_sink_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = probs > 0 ? SEGRT_DTYPE_UINT8 : labels;
    d.n_dims = 2;
    d.channels = probs > 0 ? probs : 1;
    d.classes = probs > 0;
    d.dims[0] = 1;
    d.dims[1] = j->H;
    d.dims[2] = j->W;
    d.pyramid = true;
    d.mpp[0] = d.mpp[1] = j->mpp;
    SG_TRY(sg_sink_open_output(o, &d, &j->sink));
    j->out_dtype = d.dtype;
    j->out_ch = d.channels;
    j->next_row = 0;
    j->write_status = SEGRT_OK;
    j->q_head = j->q_count = 0;
    j->writer_on = pthread_create(&j->writer, NULL, writer_main, j) == 0; /* else: written in line */
    free(j->small);
    j->small = NULL;
    if (small_side > 0) {
        int64_t side = j->H > j->W ? j->H : j->W;
        j->s_step = side > small_side ? (double)side / (double)small_side : 1.0;
        j->sh = (int64_t)ceil((double)j->H / j->s_step);
        j->sw = (int64_t)ceil((double)j->W / j->s_step);
        if (!(j->small = calloc((size_t)(j->sh * j->sw), 1)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the labels' thumbnail", j->path);
    }
    return SEGRT_OK;
}

/* The grid pixel small pixel i samples along an axis of n. */
static int64_t small_at(double step, int64_t i, int64_t n)
{
    int64_t p = (int64_t)floor(((double)i + 0.5) * step);
    return p < n ? p : n - 1;
}

/* Pixel `at` of a band's planes (plane elements apart) on the small
 * grid: the label, or the most probable class (the first of the largest). */
static uint8_t small_value(const struct sg_slide_job *j, const void *rows, int64_t at, int64_t plane)
{
    if (j->out_ch > 1) {
        const uint8_t *p = rows;
        int32_t best = 0;
        for (int32_t c = 1; c < j->out_ch; c++)
            if (p[c * plane + at] > p[best * plane + at])
                best = c;
        return (uint8_t)(best > 255 ? 255 : best);
    }
    int64_t v = j->out_dtype == SEGRT_DTYPE_UINT16 ? ((const uint16_t *)rows)[at] : ((const uint8_t *)rows)[at];
    return (uint8_t)(v > 255 ? 255 : v);
}

/* Rows [r0, r1) of the result (its channels' planes one after another)
 * into the pyramid and the small grid (the writer thread's work, or the
 * caller's in line). */
static sg_status write_band(struct sg_slide_job *j, int64_t r0, int64_t r1, const void *rows)
{
    sg_box box = {{0, r0, 0}, {1, r1 - r0, j->W}};
    SG_TRY(sg_sink_write(j->sink, &box, rows));
    if (j->small) {
        /* The small rows whose sample row is among these. */
        int64_t i0 = (int64_t)floor((double)r0 / j->s_step - 0.5);
        for (int64_t i = i0 < 0 ? 0 : i0; i < j->sh; i++) {
            int64_t y = small_at(j->s_step, i, j->H);
            if (y >= r1)
                break;
            if (y < r0)
                continue;
            for (int64_t x = 0; x < j->sw; x++)
                j->small[i * j->sw + x] =
                    small_value(j, rows, (y - r0) * j->W + small_at(j->s_step, x, j->W), (r1 - r0) * j->W);
        }
    }
    return SEGRT_OK;
}

static void *writer_main(void *arg)
{
    struct sg_slide_job *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (j->q_count == 0 && !j->closing)
            pthread_cond_wait(&j->cv, &j->mu);
        if (j->q_count == 0)
            break;
        int32_t k = j->q_head;
        bool ok = j->write_status == SEGRT_OK; /* after an error the bands are only dropped */
        pthread_mutex_unlock(&j->mu);
        sg_status s = ok ? write_band(j, j->q[k].r0, j->q[k].r1, j->q[k].data) : SEGRT_OK;
        pthread_mutex_lock(&j->mu);
        if (s != SEGRT_OK) {
            j->write_status = s;
            snprintf(j->write_error, sizeof j->write_error, "%s", sg_last_error());
        }
        j->q_head = (j->q_head + 1) % SLIDE_WRITE_QUEUE;
        j->q_count--;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Every band queued written, the writer stopped; its status (the message
 * is in write_error, not raised: see writer_end). */
static sg_status writer_stop(struct sg_slide_job *j)
{
    if (!j->writer_on)
        return j->write_status;
    pthread_mutex_lock(&j->mu);
    j->closing = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->writer, NULL);
    j->writer_on = false;
    j->closing = false;
    return j->write_status;
}

/* writer_stop with its error raised. */
static sg_status writer_end(struct sg_slide_job *j)
{
    sg_status s = writer_stop(j);
    return s == SEGRT_OK ? s : sg_error(s, "%s", j->write_error);
}

/* Waits until the writer has at most `most` bands queued; its error, if
 * any. */
static sg_status writer_wait(struct sg_slide_job *j, int32_t most)
{
    pthread_mutex_lock(&j->mu);
    while (j->q_count > most && j->write_status == SEGRT_OK)
        pthread_cond_wait(&j->cv, &j->mu);
    sg_status s = j->write_status;
    pthread_mutex_unlock(&j->mu);
    return s == SEGRT_OK ? s : sg_error(s, "%s", j->write_error);
}

/* The planes of rows (channel_stride elements apart) one after another
 * in dst. */
static void pack_planes(const struct sg_slide_job *j, uint8_t *dst, const void *rows, size_t plane_bytes,
                        int64_t channel_stride)
{
    size_t stride = (size_t)channel_stride * segrt_dtype_size(j->out_dtype);
    for (int32_t c = 0; c < j->out_ch; c++)
        memcpy(dst + c * plane_bytes, (const uint8_t *)rows + c * stride, plane_bytes);
}

sg_status sg_slide_job_put_rows(void *user, int64_t n, int64_t r0, int64_t r1, const void *rows, int64_t channel_stride)
{
    struct sg_slide_job *j = user;
    if (!j->sink || n != 0 || r0 != j->next_row || r1 < r0 || r1 > j->H)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: result rows [%lld, %lld) out of order", j->path, (long long)r0,
                        (long long)r1);
    j->next_row = r1;
    size_t plane = (size_t)((r1 - r0) * j->W) * segrt_dtype_size(j->out_dtype), bytes = plane * (size_t)j->out_ch;
    if (!j->writer_on || (int64_t)bytes > SLIDE_WRITE_COPY_MAX) {
        SG_TRY(writer_wait(j, 0)); /* in order: what is queued first */
        if (j->out_ch == 1 || channel_stride == (r1 - r0) * j->W)
            return write_band(j, r0, r1, rows);
        if (!reserve((void **)&j->pack, &j->pack_cap, bytes))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %lld rows of probabilities", j->path,
                            (long long)(r1 - r0));
        pack_planes(j, j->pack, rows, plane, channel_stride);
        return write_band(j, r0, r1, j->pack);
    }
    SG_TRY(writer_wait(j, SLIDE_WRITE_QUEUE - 1));
    pthread_mutex_lock(&j->mu);
    int32_t k = (j->q_head + j->q_count) % SLIDE_WRITE_QUEUE;
    pthread_mutex_unlock(&j->mu);
    /* Slot k is the caller's until counted in: the writer reads only the
     * counted ones. */
    if (!reserve((void **)&j->q[k].data, &j->q[k].cap, bytes))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %lld rows of the result", j->path,
                        (long long)(r1 - r0));
    pack_planes(j, j->q[k].data, rows, plane, channel_stride);
    j->q[k].r0 = r0;
    j->q[k].r1 = r1;
    pthread_mutex_lock(&j->mu);
    j->q_count++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return SEGRT_OK;
}

sg_status sg_slide_job_end_output(sg_slide_job *j)
{
    if (!j->sink)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: no labels output to end", j->path);
    SG_TRY(writer_end(j));
    sg_sink *s = j->sink;
    j->sink = NULL;
    return sg_sink_commit(s); /* ends the format; the output is its owner's */
}

const uint8_t *sg_slide_job_small_labels(const sg_slide_job *j, int64_t *height, int64_t *width, double scale[2])
{
    *height = j->sh;
    *width = j->sw;
    scale[0] = scale[1] = j->s_step * j->ds;
    return j->small;
}

sg_status sg_slide_job_write_thumbnail(sg_slide_job *j, const char *path)
{
    if (!j->small)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: no labels kept for a thumbnail", j->path);
    /* The slide on the small grid: the coarsest level no coarser than it,
     * shrunk by area, a band of rows at a time. */
    const sg_source_info *in = &j->src->info;
    double want = j->s_step * j->ds; /* level-0 pixels per small pixel */
    int32_t level = 0;
    for (int32_t l = in->n_levels - 1; l >= 0; l--)
        if (in->downsample[l] <= want * (1.0 + SLIDE_EXACT)) {
            level = l;
            break;
        }
    double f = want / in->downsample[level];
    int64_t LH = in->dims[level][1], LW = in->dims[level][2];
    area_axis ar, ac;
    sg_status s = area_make(j->sh, LH, f, &ar);
    if (s == SEGRT_OK && (s = area_make(j->sw, LW, f, &ac)) != SEGRT_OK)
        area_free(&ar);
    if (s != SEGRT_OK)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the thumbnail", j->path);
    sg_image base = {(int32_t)j->sw, (int32_t)j->sh, 1, 3, 8, malloc((size_t)(j->sh * j->sw * 3))};
    int64_t band = 64;
    uint8_t *region = NULL;
    float *mid = NULL;
    size_t region_cap = 0, mid_cap = 0;
    if (!base.pixels)
        s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the thumbnail", j->path);
    for (int64_t i0 = 0; s == SEGRT_OK && i0 < j->sh; i0 += band) {
        int64_t i1 = i0 + band < j->sh ? i0 + band : j->sh;
        int64_t y0 = ar.first[i0], y1 = ar.first[i1 - 1] + ar.count[i1 - 1], bh = y1 - y0;
        if (!reserve((void **)&region, &region_cap, (size_t)(3 * bh * LW)) ||
            !reserve((void **)&mid, &mid_cap, sizeof(float) * (size_t)LW)) {
            s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the thumbnail", j->path);
            break;
        }
        sg_box box = {{0, y0, 0}, {1, bh, LW}};
        if ((s = sg_source_read_region(j->src, level, &box, region)) != SEGRT_OK)
            break;
        for (int64_t c = 0; c < 3; c++)
            for (int64_t i = i0; i < i1; i++) {
                for (int64_t x = 0; x < LW; x++)
                    mid[x] = 0;
                for (int32_t k = 0; k < ar.count[i]; k++) {
                    float w = ar.w[i * ar.span + k];
                    const uint8_t *p = region + (c * bh + (ar.first[i] + k - y0)) * LW;
                    for (int64_t x = 0; x < LW; x++)
                        mid[x] += w * (float)p[x];
                }
                uint8_t *d = (uint8_t *)base.pixels + i * j->sw * 3 + c;
                for (int64_t x = 0; x < j->sw; x++) {
                    float v = 0;
                    for (int32_t k = 0; k < ac.count[x]; k++)
                        v += ac.w[x * ac.span + k] * mid[ac.first[x] + k];
                    d[x * 3] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lrintf(v));
                }
            }
    }
    free(region);
    free(mid);
    area_free(&ar);
    area_free(&ac);
    if (s == SEGRT_OK) {
        sg_tensor labels = {SEGRT_DTYPE_UINT8, 2, {j->sh, j->sw}, j->small};
        sg_image out;
        memset(&out, 0, sizeof out);
        sg_overlay_options oo;
        sg_overlay_options_default(&oo);
        oo.boundaries = false; /* a thumbnail's regions are a few pixels wide: outlines would hide them */
        if ((s = sg_overlay_render(&base, &labels, &oo, &out)) == SEGRT_OK)
            s = sg_image_write(path, &out);
        sg_image_free(&out);
    }
    sg_image_free(&base);
    return s;
}

sg_status sg_slide_job_detect_tissue(sg_slide_job *j)
{
    sg_tissue_mask_free(&j->tissue);
    j->have_tissue = false;
    SG_TRY(sg_tissue_detect(j->src, NULL, &j->tissue));
    j->have_tissue = true;
    return SEGRT_OK;
}

bool sg_slide_job_keep_window(void *user, const int64_t *start, const int64_t *size)
{
    const struct sg_slide_job *j = user;
    if (!j->have_tissue)
        return true;
    return sg_tissue_box(&j->tissue, (double)start[0] * j->ds, (double)start[1] * j->ds, (double)size[0] * j->ds,
                         (double)size[1] * j->ds);
}

sg_status sg_slide_job_write_tissue_mask(sg_slide_job *j, const char *path)
{
    if (!j->have_tissue)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: no tissue mask to write", j->path);
    return sg_tissue_write_png(&j->tissue, path);
}

sg_status sg_slide_job_write_geojson(sg_slide_job *j, const char *path, const char *const *names, int32_t n_names)
{
    if (!j->small)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: no labels kept for polygons", j->path);
    double scale[2] = {j->s_step * j->ds, j->s_step * j->ds};
    return sg_labels_write_geojson(j->small, j->sh, j->sw, scale, NULL, names, n_names, NULL, 0, path);
}

void sg_slide_job_close(sg_slide_job *j)
{
    if (!j)
        return;
    ahead_join(j);
    writer_stop(j); /* a write that failed: reported by the job's end, or the job is being given up */
    sg_slide_gpu_close(j->gpu);
    sg_slide_tiles_close(j->tiles);
    for (int32_t k = 0; k < SLIDE_WRITE_QUEUE; k++)
        free(j->q[k].data);
    free(j->pack);
    free(j->ahead.buf);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    sg_tissue_mask_free(&j->tissue);
    sg_sink_discard(j->sink);
    for (int32_t t = 0; t < SLIDE_MAX_THREADS; t++) {
        if (t > 0)
            sg_source_close(j->reader[t]);
        free(j->buf[t]);
        free(j->tmp[t]);
    }
    sg_source_close(j->src);
    area_free(&j->ax_rows);
    area_free(&j->ax_cols);
    free(j->small);
    free(j->path);
    free(j);
}
