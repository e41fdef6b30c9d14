/* The device path's job (sw_device.h), shared by its files:
 *
 *   sw_device.c    the entry points and the walk: passes, batches, gathers,
 *                  the networks, blending, finishing rows
 *   sw_budget.c    what the result is, and the sizes of the accumulator
 *                  ring, passes, image ring and staging under the budget
 *   sw_upload.c    a host image's rows up to the device ahead of the windows
 *   sw_download.c  a host result's finished rows down during the run
 *   sw_keep.c      buffers, streams and events: made, kept for the next run
 *                  of a window session, freed
 *
 * Everything on the device goes through the backend's window operations
 * (backend_window.h), so this code is the same in every build; a build or
 * a context without them never gets here (sg_sw_device_capable). */
#ifndef SG_PIPELINE_SW_JOB_H
#define SG_PIPELINE_SW_JOB_H

#include "backend/backend_window.h"
#include "core/clock.h"
#include "core/copy_team.h"
#include "pipeline/sw_device.h"
#include "pipeline/sw_image.h"

/* Host results up to this size are made whole on the device and
 * downloaded once; larger ones (many classes of probabilities) go down
 * slab by slab. */
#define SW_STAGE_WHOLE_BYTES ((size_t)256 << 20)
#define SW_PINNED_BYTES ((size_t)8 << 20)
/* Batches enqueued ahead of the GPU: enough to hide the host's launches
 * and uploads behind the networks, few enough that progress reports mean
 * windows done. */
#define SW_IN_FLIGHT 3

/* What the job is: the grid, the sizes derived from it, and the flips. */
typedef struct sw_geometry {
    sg_sw_grid g;
    sg_window_geom geom;
    int64_t B, C, K; /* windows a batch, image channels, classes */
    int64_t roi_numel, img_plane, pad_plane, image_numel, n_img;
    uint32_t flips[SG_SW_MAX_FLIPS];
    int32_t n_flips;
} sw_geometry;

/* The pipeline's streams (s: gathers, blending, finishing; up: uploads;
 * down: a host result's finished rows) and the events that order them. */
typedef struct sw_streams {
    sg_backend_stream *s, *up, *down;
    sg_backend_event *ev_gathered, *ev_uploaded, *ev_net;
    sg_backend_event *ev_batch[SW_IN_FLIGHT]; /* recorded after batch i's blending at i % SW_IN_FLIGHT */
} sw_streams;

/* One model's outputs for a batch of windows. */
typedef struct sw_model_out {
    size_t n;
    segrt_tensor t[SG_SW_MAX_OUTPUTS]; /* t[0] -> d_pred; others into extra */
    void *extra[SG_SW_MAX_OUTPUTS];
} sw_model_out;

/* The window buffers and the ring of accumulator rows. */
typedef struct sw_accum {
    float *d_w;     /* the importance map */
    float *d_in;    /* a batch of windows */
    float *d_pred;  /* a network's predictions */
    float *d_model; /* a model's, its flips combined (d_pred without flips) */
    float *d_out;   /* the ensemble's (d_model with one model) */
    void *d_acc;    /* K + 1 channels of ring_rows padded rows, of acc_dtype */
    segrt_dtype acc_dtype;
    size_t acc_esize;
    sw_model_out *dm;
    int64_t ring_rows, pass_rows;
} sw_accum;

/* Strips of axis 1. Under a budget too small for a window's rows of
 * accumulators over whole planes, the windows go strip by strip of their
 * axis-1 starts, each window once. A strip's ring covers its windows'
 * columns only; the columns it shares with the next strip (the seam) are
 * copied out as each row is finished and back into the next strip's ring
 * as that row enters it: into pinned host memory, or device memory where
 * the budget has room. Sums then add strip by strip, not in MONAI's window
 * order: equal to rounding. n == 1: the whole plane, no seams. */
typedef struct sw_strips {
    int32_t n;
    int64_t per;       /* axis-1 window starts a strip */
    int64_t rest;      /* accumulator elements a padded column: product of padded[2..] (1 in 2-D) */
    int64_t max_cols;  /* padded columns of the widest strip */
    int64_t seam_cols; /* of the widest seam */
    void *seam;        /* K + 1 channels x padded rows x seam_cols x rest, of acc_dtype */
    bool seam_on_device;
    bool seam_registered; /* host memory of ours pinned in place (else host_alloc's) */
    size_t seam_bytes;
    int64_t *list;     /* a pass's windows of one strip, in order (indices of one image) */
} sw_strips;

/* One strip: its windows, its accumulators' columns and geometry. */
typedef struct sw_strip {
    int32_t j;
    int64_t i_lo, i_hi;       /* axis-1 start indices of its windows */
    int64_t c_lo, c_hi;       /* padded columns of its accumulators */
    int64_t fin_hi;           /* after it, columns [c_lo, fin_hi) are final; [fin_hi, c_hi) the seam out */
    int64_t in_cols;          /* columns [c_lo, c_lo + in_cols) start with the earlier strips' sums */
    int64_t plane;            /* accumulator elements a row: (c_hi - c_lo) x rest */
    sg_window_geom acc_geom;  /* the job's geometry with axis 1 narrowed to [c_lo, c_hi) */
    sg_window_geom fin_geom;  /* ... and cropped to the image columns it finishes */
    int64_t fin_col0;         /* the first of those image columns (-1: none) */
    bool last;
} sw_strip;

/* A host image's rows on the device. */
typedef struct sw_img_rows {
    int64_t image;  /* the image whose rows are held, -1: none */
    int64_t lo, hi; /* rows [lo, hi) are uploaded or on their way */
    float *ring;    /* C x img_ring rows x plane; row r at r mod img_ring */
} sw_img_rows;

/* The image: the caller's device buffer, or host rows (read through a row
 * reader: a host tensor's view, or a region source) in a ring. */
typedef struct sw_image {
    const float *d_image;
    sg_sw_image *h_image;
    sw_img_rows rows;
    int64_t img_ring;
    int64_t release_row; /* a host image's rows below it: no later batch of the pass reads them */
    bool have_upload;    /* an upload the next gather must wait for */
    bool host_reads;     /* the reader's read_device said UNSUPPORTED: rows come through read */
} sw_image;

/* Two pinned buffers (one fills on the host while the other is on its
 * way) and the host threads that copy through them. */
typedef struct sw_pinned {
    void *buf[2];
    size_t bytes;
    sg_backend_event *ev[2];
    int32_t next;
    sg_copy_team *team;
} sw_pinned;

/* The result. */
typedef struct sw_result {
    sg_window_final final;
    segrt_dtype out_dtype;
    int64_t out_ch;
    size_t out_esize;
    segrt_memory_kind out_memory;
    void *d_result; /* the whole result on the device, or NULL */
    void *d_stage;  /* else a slab of it */
    int64_t stage_rows;
    void *h_result;
    size_t h_bytes, h_populated; /* its size, and its bytes populate_while_busy has made resident */
    /* A host result made whole on the device goes down as it is finished:
     * through batch i, image fin_image[i % SW_IN_FLIGHT]'s rows below
     * fin_row[...] are final; rows before (dl_image, dl_row) are down. */
    bool progressive;
    int64_t fin_image[SW_IN_FLIGHT], fin_row[SW_IN_FLIGHT];
    int64_t dl_image, dl_row;
    bool result_listed; /* d_result is one of the run's buffers (a host result's staging) */
    /* Rows handed to the options' row_sink (sink): d_result is then a ring
     * of sink_ring rows (row r at r mod sink_ring, channel c sink_ring rows
     * apart), its rows going down as they are final (progressive). */
    bool sink;
    int64_t sink_ring;
} sw_result;

/* Device buffers in allocation order (what the next run gets back), and
 * what this run took from the last one. */
typedef struct sw_memory {
    int32_t n_blocks, cap_blocks;
    void **block;
    size_t *bytes;
    sg_sw_keep *keep;
    int32_t keep_next; /* the kept buffer to offer next */
    bool reused;       /* sw_dev_alloc's last buffer was a kept one */
    bool w_ready;      /* d_w already holds this run's importance map */
    uint64_t pipeline_bytes;
} sw_memory;

/* Counts and host seconds (see sg_sw_stats). */
typedef struct sw_counters {
    int64_t batches; /* enqueued so far */
    int64_t runs, total_runs;
    double t_setup, t_upload, t_wait, t_download, t_total;
} sw_counters;

typedef struct sw_job {
    const sg_window_ops *ops;
    const sg_sw_options *o;
    const sg_sw_model *models;
    int32_t n_models, device;
    uint64_t budget; /* o's max_memory, "auto" resolved (sw_plan_memory); 0: none */
    bool enqueued;  /* network runs enqueued and not yet finished */
    int64_t *batch; /* window indices of a batch larger than run_image_pass's own array */
    uint8_t *keep;  /* per window of the grid: 1 runs (the options' keep_window); NULL: all run */
    sw_geometry geo;
    sw_streams st;
    sw_accum acc;
    sw_strips strips;
    sw_image img;
    sw_pinned pin;
    sw_result out;
    sw_memory mem;
    sw_counters stat;
} sw_job;

/* What a session keeps of its last device run for the next: streams and
 * events, the pinned buffers, the importance map's key, and the device
 * buffers in the order the run allocated them. A run takes the buffers
 * back in that order while each one's size is what it asks for; at the
 * first that is not, it frees the rest, so it never holds more than its
 * own buffers. Allocating a job's device and pinned memory is a large
 * share of a short job's time. */
struct sg_sw_keep {
    const sg_window_ops *ops;
    int32_t device;
    sw_streams st;
    sw_pinned pin;
    int32_t n; /* device buffers; a taken one is NULL */
    void **block;
    size_t *bytes;
    /* What the first buffer (the importance map) holds. */
    bool w_valid;
    int32_t w_dims, w_blend;
    int64_t w_roi[SG_SW_MAX_DIMS];
    double w_sigma;
};

/* sw_keep.c */
sg_status sw_dev_alloc(sw_job *r, size_t bytes, const char *what, void **out);
sg_status sw_dev_alloc_owned(sw_job *r, size_t bytes, const char *what, void **out);
void sw_keep_drop_blocks(sg_sw_keep *k);
sg_status sw_take_streams(sw_job *r);
sg_status sw_take_pinned(sw_job *r);
void sw_job_free(sw_job *r, sg_sw_keep **keep);

/* sw_budget.c */
void sw_result_kind(sw_job *r);
uint64_t sw_context_bytes(const sw_job *r);
sg_status sw_plan_memory(sw_job *r);
void sw_strip_get(const sw_job *r, int32_t j, sw_strip *out);

/* sw_upload.c */
sg_status sw_ensure_batch_rows(sw_job *r, const int64_t *win, int64_t got);
sg_status sw_upload_ahead(sw_job *r);
sg_window_rows sw_image_rows(const sw_job *r, int64_t n);

/* sw_download.c */
void sw_populate_while_busy(sw_job *r, sg_backend_event *ev);
sg_status sw_download_through(sw_job *r, int64_t n, int64_t row);

#endif
