/* What the pipeline asks of a device to run a window job there
 * (src/pipeline/sw_device.h): memory, streams and events, copies, and the
 * window kernels (gather, combine, accumulate, finalize). A backend that
 * can take window jobs fills one const sg_window_ops with designated
 * initializers; struct sg_backend's `window` member points to it (NULL: the
 * backend has none, and its jobs take the host path).
 *
 * Contract, for every member:
 * - Everything is plain C: buffers are void pointers of the backend's
 *   device memory (or its pinned host memory), streams and events are the
 *   opaque handles of backend.h.
 * - Members that return sg_status record a message naming the call on
 *   failure (sg_error); destroy and free members accept NULL and never fail.
 * - Asynchronous members (`_async`, record, wait, the kernels) only
 *   enqueue on the stream given: they neither allocate nor synchronize.
 * - Streams, events and enqueued work belong to the device current for the
 *   calling thread (device_set), as memory from device_alloc belongs to
 *   the device it names.
 * - Kernels are deterministic: every output element is written by one
 *   thread, with no atomics, so a job repeats bit for bit. */
#ifndef SG_BACKEND_WINDOW_H
#define SG_BACKEND_WINDOW_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_WINDOW_MAX_DIMS 3
/* The batched kernels (gather, accumulate) take 1 to this many windows a
 * call; more are INVALID_ARGUMENT. Callers size their arrays by it. */
#define SG_WINDOW_BATCH 64

/* How positions outside the image are filled; the values are
 * sliding_window.h's sg_sw_pad (the pipeline checks they agree). */
typedef enum sg_window_pad {
    SG_WINDOW_PAD_CONSTANT = 0,
    SG_WINDOW_PAD_REFLECT = 1,
    SG_WINDOW_PAD_REPLICATE = 2
} sg_window_pad;

/* MONAI's geometry (../shared/notes/sliding_window.md): windows live in the
 * padded image, whose axis d is padded[d] voxels with pad_begin[d] in front
 * of the size[d] of the image. Axis 0 is the slowest, the "rows". */
typedef struct sg_window_geom {
    int32_t n_dims; /* spatial dims, 1 to 3 */
    int64_t roi[SG_WINDOW_MAX_DIMS];
    int64_t size[SG_WINDOW_MAX_DIMS];
    int64_t padded[SG_WINDOW_MAX_DIMS];
    int64_t pad_begin[SG_WINDOW_MAX_DIMS];
} sg_window_geom;

/* Rows [row0, ...) of one image's channels: element (c, r, rest) at
 * data[c * channel_stride + ((r - row0) mod ring) * plane + rest], where
 * plane is the product of the other axes and ring 0 means no wrap. */
typedef struct sg_window_rows {
    void *data; /* float32, except a finalisation's labels and accumulators of `dtype` */
    int64_t channel_stride;
    int64_t row0;
    int64_t ring;
    /* Accumulators (accumulate's and finalize's acc): SEGRT_DTYPE_FLOAT32,
     * FLOAT16 or BFLOAT16 (0: float32); the sums of one launch are made in
     * float32 and rounded once when stored. Elsewhere: ignored. */
    segrt_dtype dtype;
    /* Elements from one row to the next (0: the plane the geometry gives).
     * finalize's dst only: a geometry narrowed to a strip of axis 1 writes
     * into the whole image's rows, data pointing at the strip's first
     * column. */
    int64_t row_pitch;
} sg_window_rows;

typedef enum sg_window_final {
    SG_WINDOW_FINAL_VALUES = 0, /* acc / count: the blended logits */
    SG_WINDOW_FINAL_SOFTMAX,    /* their softmax over classes: float32, or uint8 round(255 p) */
    SG_WINDOW_FINAL_SIGMOID,    /* their sigmoid: float32, or uint8 as softmax */
    SG_WINDOW_FINAL_ARGMAX,     /* the first largest class, uint8 or uint16 */
    SG_WINDOW_FINAL_THRESHOLD   /* per class, sigmoid > threshold, uint8 */
} sg_window_final;

typedef enum sg_window_copy {
    SG_WINDOW_HOST_TO_DEVICE = 0,
    SG_WINDOW_DEVICE_TO_HOST,
    SG_WINDOW_DEVICE_TO_DEVICE
} sg_window_copy;

/* A JPEG decoder of the device's (jpeg_create). */
typedef struct sg_backend_jpeg sg_backend_jpeg;

/* Area weights along one axis, in device memory: output i covers input
 * [first[i], first[i] + count[i]) with weights w[i * span ...]. */
typedef struct sg_window_axis {
    const int64_t *first;
    const int32_t *count;
    const float *w;
    int64_t span;
} sg_window_axis;

/* An input normalisation: x -> (x * scale - mean[c]) / std[c], step by
 * step in float32 (as the host path and numpy do it); off: x as it is. */
typedef struct sg_window_norm {
    bool on;
    float scale, mean[3], std[3];
} sg_window_norm;

typedef struct sg_window_ops {
    const char *name;

    /* The calling thread's current device, and setting it. */
    sg_status (*device_get)(int32_t *device);
    sg_status (*device_set)(int32_t device);

    /* Device memory on `device` (bytes > 0), freed by device_free; the
     * same memory as segrt_device_alloc's, so a buffer handed to a caller
     * is released with segrt_device_free. */
    sg_status (*device_alloc)(int32_t device, size_t bytes, void **out);
    void (*device_free)(void *ptr);
    /* Pinned (page-locked) host memory, for copies that overlap compute. */
    sg_status (*host_alloc)(size_t bytes, void **out);
    void (*host_free)(void *ptr);
    /* Host memory of the caller's (bytes > 0) pinned in place for copies
     * that overlap compute, and unpinned (NULL: nothing) before the caller
     * frees it. On memory in 2 MiB pages this is several times quicker than
     * host_alloc for the gigabytes a job's shared sums can take. */
    sg_status (*host_register)(void *ptr, size_t bytes);
    void (*host_unregister)(void *ptr);

    /* Streams that do not wait for the device's default stream. */
    sg_status (*stream_create)(sg_backend_stream **out);
    void (*stream_destroy)(sg_backend_stream *stream);
    sg_status (*stream_synchronize)(sg_backend_stream *stream);
    /* Later work on stream waits for the event's last record. */
    sg_status (*stream_wait)(sg_backend_stream *stream, sg_backend_event *event);
    /* Events without timing. */
    sg_status (*event_create)(sg_backend_event **out);
    void (*event_destroy)(sg_backend_event *event);
    sg_status (*event_record)(sg_backend_event *event, sg_backend_stream *stream);
    sg_status (*event_synchronize)(sg_backend_event *event);
    /* Whether the event's work is done, without waiting: 1 done, 0 not
     * yet, -1 failed (nothing is recorded as an error: a polling caller
     * learns of the failure from its next synchronizing call). */
    int (*event_query)(sg_backend_event *event);

    /* Copies: blocking, asynchronous, and of `height` rows of `width`
     * bytes between pitched buffers. Host memory of async copies should be
     * pinned for them to overlap. */
    sg_status (*copy)(void *dst, const void *src, size_t bytes, sg_window_copy kind);
    sg_status (*copy_async)(void *dst, const void *src, size_t bytes, sg_window_copy kind, sg_backend_stream *stream);
    sg_status (*copy_2d_async)(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                               size_t height, sg_window_copy kind, sg_backend_stream *stream);
    /* Device memory set to a byte value, whole or as pitched rows. */
    sg_status (*memset_async)(void *dst, int value, size_t bytes, sg_backend_stream *stream);
    sg_status (*memset_2d_async)(void *dst, size_t pitch, int value, size_t width, size_t height,
                                 sg_backend_stream *stream);

    /* For each of `count` (1 to SG_WINDOW_BATCH) windows, window i starting
     * at starts[i * n_dims ..] (padded coordinates): dst + i * channels *
     * window = that window of the image held in src (unpadded rows),
     * flipped along the axes of flip_mask (bit d: spatial axis d). Positions
     * outside the image take pad_value (constant) or their reflected or
     * replicated source (pad_mode: sg_window_pad). */
    sg_status (*gather)(sg_backend_stream *stream, const sg_window_geom *g, const int64_t *starts, int64_t count,
                        int32_t pad_mode, float pad_value, uint32_t flip_mask, const sg_window_rows *src,
                        int64_t channels, float *dst);
    /* dst[r, j] = src[r, flip(j)] (add: dst[r, j] += ...) for `rows` windows
     * or channels of a window each; then, when divisor > 1, dst /= divisor:
     * the average of test-time flips and of an ensemble's models. */
    sg_status (*combine)(sg_backend_stream *stream, const sg_window_geom *g, uint32_t flip_mask, bool add,
                         float divisor, const float *src, float *dst, int64_t rows);
    /* For each of `count` (1 to SG_WINDOW_BATCH) windows in order, window i
     * starting at starts[i * n_dims ..] with predictions pred + i * classes
     * * window: acc[k, p] += pred[k, j] * weight[j] for k < classes and
     * acc[classes, p] += weight[j], p = start + j a position of the padded
     * image, for the windows' rows in [row_lo, row_hi) only. Each voxel
     * sums its windows in their order, as one call per window would. acc
     * holds classes + 1 channels of padded rows (acc->row0 is ignored: rows
     * are absolute, stored mod acc->ring); the rows must fit the ring. */
    sg_status (*accumulate)(sg_backend_stream *stream, const sg_window_geom *g, const int64_t *starts, int64_t count,
                            const float *pred, const float *weight, int64_t classes, int64_t row_lo, int64_t row_hi,
                            const sg_window_rows *acc);
    /* The padded rows [row_lo, row_hi) of acc (as accumulate leaves it),
     * cropped to the image, divided by the summed weights and finished as
     * `kind` into dst: float32, uint8 or uint16 (out_dtype), image rows from
     * dst->row0 with channel_stride per output channel (no ring). */
    sg_status (*finalize)(sg_backend_stream *stream, const sg_window_geom *g, sg_window_final kind, float threshold,
                          int64_t classes, int64_t row_lo, int64_t row_hi, const sg_window_rows *acc,
                          segrt_dtype out_dtype, const sg_window_rows *dst);

    /* Whole slides. Optional: NULL where the backend has none.
     *
     * A JPEG decoder on the calling thread's current device, used by one
     * thread at a time; UNSUPPORTED where the device or its library cannot
     * decode (the caller decodes on the host). */
    sg_status (*jpeg_create)(sg_backend_jpeg **out);
    void (*jpeg_destroy)(sg_backend_jpeg *d);
    /* count complete JPEG streams in host memory (unchanged until the
     * stream's work is done), each 3 components of one size, decoded on
     * stream into 8-bit planes: stream i's channel c at planes[3 * i + c],
     * rows pitch bytes apart. ycbcr: YCbCr converted to RGB; else the
     * components as coded (none may be subsampled). INVALID_MODEL for a
     * batch that does not decode. */
    sg_status (*jpeg_decode)(sg_backend_jpeg *d, sg_backend_stream *stream, int32_t count, const uint8_t *const *data,
                             const size_t *bytes, bool ycbcr, uint8_t *const *planes, size_t pitch);
    /* Which of the device's decoders took the last batch, in words for a
     * report ("nvJPEG's hardware decoder"; a fallback says why). */
    const char *(*jpeg_engine)(const sg_backend_jpeg *d);
    /* 8-bit planes to float32 rows, resampled by area:
     * dst[c * dst_cstride + (i - row0) * dst_pitch + x] = sum over k, l of
     * rows.w[i][k] * cols.w[x][l] * src[c * src_plane + ((rows.first[i] + k)
     * mod src_ring) * src_pitch + cols.first[x] + l], normalised by norm
     * (channels 1 to 3), for the rows i of [row0, row0 + n_rows) (at most
     * 65535), x below n_cols, c below channels. The weights' arrays are
     * device memory. */
    sg_status (*area_u8)(sg_backend_stream *stream, const uint8_t *src, int64_t src_pitch, int64_t src_plane,
                         int64_t src_ring, int32_t channels, const sg_window_axis *rows, int64_t row0, int64_t n_rows,
                         const sg_window_axis *cols, int64_t n_cols, const sg_window_norm *norm, float *dst,
                         int64_t dst_pitch, int64_t dst_cstride);
} sg_window_ops;

#endif
