/* The CUDA backend's window operations (backend_window.h): the CUDA
 * runtime's memory, streams, events and copies, and k_window.h's kernels.
 * Handles are cudaStream_t and cudaEvent_t cast to the opaque types. Each
 * call is checked by CUDA_TRY, which names the call, file and line. */
#include "backend/backend_window.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_slide.h"
#include "backend/cuda/k_window.h"

#include <string.h>

_Static_assert(SG_WINDOW_BATCH == SGK_WIN_BATCH, "the window batch of the interface is the kernels'");
_Static_assert(SG_WINDOW_MAX_DIMS == SGK_WIN_MAX_DIMS, "window dims agree");
_Static_assert((int)SG_WINDOW_PAD_REPLICATE == (int)SGK_WIN_PAD_REPLICATE &&
                   (int)SG_WINDOW_PAD_REFLECT == (int)SGK_WIN_PAD_REFLECT,
               "pad values agree");
_Static_assert((int)SG_WINDOW_FINAL_VALUES == (int)SGK_WIN_FINAL_VALUES &&
                   (int)SG_WINDOW_FINAL_SOFTMAX == (int)SGK_WIN_FINAL_SOFTMAX &&
                   (int)SG_WINDOW_FINAL_SIGMOID == (int)SGK_WIN_FINAL_SIGMOID &&
                   (int)SG_WINDOW_FINAL_ARGMAX == (int)SGK_WIN_FINAL_ARGMAX &&
                   (int)SG_WINDOW_FINAL_THRESHOLD == (int)SGK_WIN_FINAL_THRESHOLD,
               "finalisations agree");

#define STREAM(s) ((cudaStream_t)(s))
#define EVENT(e) ((cudaEvent_t)(e))

static enum cudaMemcpyKind copy_kind(sg_window_copy kind)
{
    return kind == SG_WINDOW_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
           : kind == SG_WINDOW_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
}

static sgk_win_geom geom_of(const sg_window_geom *g)
{
    sgk_win_geom k;
    memset(&k, 0, sizeof k);
    k.n_dims = g->n_dims;
    for (int d = 0; d < SGK_WIN_MAX_DIMS; d++) {
        k.roi[d] = g->roi[d];
        k.size[d] = g->size[d];
        k.padded[d] = g->padded[d];
        k.pad_begin[d] = g->pad_begin[d];
    }
    return k;
}

static sgk_win_rows rows_of(const sg_window_rows *r)
{
    sgk_win_rows k = {r->data, r->channel_stride, r->row0, r->ring, r->dtype, r->row_pitch};
    return k;
}

static sg_status win_device_get(int32_t *device)
{
    int d = 0;
    CUDA_TRY(cudaGetDevice(&d));
    *device = d;
    return SEGRT_OK;
}

static sg_status win_device_set(int32_t device)
{
    CUDA_TRY(cudaSetDevice(device));
    return SEGRT_OK;
}

static sg_status win_device_alloc(int32_t device, size_t bytes, void **out)
{
    return segrt_device_alloc(device, bytes, out);
}

static void win_device_free(void *ptr)
{
    segrt_device_free(ptr);
}

static sg_status win_host_alloc(size_t bytes, void **out)
{
    CUDA_TRY(cudaMallocHost(out, bytes));
    return SEGRT_OK;
}

static void win_host_free(void *ptr)
{
    if (ptr)
        cudaFreeHost(ptr);
}

static sg_status win_host_register(void *ptr, size_t bytes)
{
    CUDA_TRY(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
    return SEGRT_OK;
}

static void win_host_unregister(void *ptr)
{
    if (ptr)
        cudaHostUnregister(ptr);
}

static sg_status win_stream_create(sg_backend_stream **out)
{
    cudaStream_t s = NULL;
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = (sg_backend_stream *)s;
    return SEGRT_OK;
}

static void win_stream_destroy(sg_backend_stream *stream)
{
    if (stream)
        cudaStreamDestroy(STREAM(stream));
}

static sg_status win_stream_synchronize(sg_backend_stream *stream)
{
    CUDA_TRY(cudaStreamSynchronize(STREAM(stream)));
    return SEGRT_OK;
}

static sg_status win_stream_wait(sg_backend_stream *stream, sg_backend_event *event)
{
    CUDA_TRY(cudaStreamWaitEvent(STREAM(stream), EVENT(event), 0));
    return SEGRT_OK;
}

static sg_status win_event_create(sg_backend_event **out)
{
    cudaEvent_t e = NULL;
    CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = (sg_backend_event *)e;
    return SEGRT_OK;
}

static void win_event_destroy(sg_backend_event *event)
{
    if (event)
        cudaEventDestroy(EVENT(event));
}

static sg_status win_event_record(sg_backend_event *event, sg_backend_stream *stream)
{
    CUDA_TRY(cudaEventRecord(EVENT(event), STREAM(stream)));
    return SEGRT_OK;
}

static sg_status win_event_synchronize(sg_backend_event *event)
{
    CUDA_TRY(cudaEventSynchronize(EVENT(event)));
    return SEGRT_OK;
}

static int win_event_query(sg_backend_event *event)
{
    cudaError_t q = cudaEventQuery(EVENT(event));
    if (q == cudaErrorNotReady) {
        if (cudaPeekAtLastError() == cudaErrorNotReady)
            (void)cudaGetLastError(); /* not an error: the GPU was busy */
        return 0;
    }
    return q == cudaSuccess ? 1 : -1;
}

static sg_status win_copy(void *dst, const void *src, size_t bytes, sg_window_copy kind)
{
    CUDA_TRY(cudaMemcpy(dst, src, bytes, copy_kind(kind)));
    return SEGRT_OK;
}

static sg_status win_copy_async(void *dst, const void *src, size_t bytes, sg_window_copy kind,
                                sg_backend_stream *stream)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, copy_kind(kind), STREAM(stream)));
    return SEGRT_OK;
}

static sg_status win_copy_2d_async(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                                   size_t height, sg_window_copy kind, sg_backend_stream *stream)
{
    CUDA_TRY(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, copy_kind(kind), STREAM(stream)));
    return SEGRT_OK;
}

static sg_status win_memset_async(void *dst, int value, size_t bytes, sg_backend_stream *stream)
{
    CUDA_TRY(cudaMemsetAsync(dst, value, bytes, STREAM(stream)));
    return SEGRT_OK;
}

static sg_status win_memset_2d_async(void *dst, size_t pitch, int value, size_t width, size_t height,
                                     sg_backend_stream *stream)
{
    CUDA_TRY(cudaMemset2DAsync(dst, pitch, value, width, height, STREAM(stream)));
    return SEGRT_OK;
}

static sg_status win_gather(sg_backend_stream *stream, const sg_window_geom *g, const int64_t *starts, int64_t count,
                            int32_t pad_mode, float pad_value, uint32_t flip_mask, const sg_window_rows *src,
                            int64_t channels, float *dst)
{
    sgk_win_geom k = geom_of(g);
    sgk_win_rows s = rows_of(src);
    return sgk_win_gather(STREAM(stream), &k, starts, count, pad_mode, pad_value, flip_mask, &s, channels, dst);
}

static sg_status win_combine(sg_backend_stream *stream, const sg_window_geom *g, uint32_t flip_mask, bool add,
                             float divisor, const float *src, float *dst, int64_t rows)
{
    sgk_win_geom k = geom_of(g);
    return sgk_win_combine(STREAM(stream), &k, flip_mask, add, divisor, src, dst, rows);
}

static sg_status win_accumulate(sg_backend_stream *stream, const sg_window_geom *g, const int64_t *starts,
                                int64_t count, const float *pred, const float *weight, int64_t classes, int64_t row_lo,
                                int64_t row_hi, const sg_window_rows *acc)
{
    sgk_win_geom k = geom_of(g);
    sgk_win_rows a = rows_of(acc);
    return sgk_win_accumulate(STREAM(stream), &k, starts, count, pred, weight, classes, row_lo, row_hi, &a);
}

static sg_status win_finalize(sg_backend_stream *stream, const sg_window_geom *g, sg_window_final kind, float threshold,
                              int64_t classes, int64_t row_lo, int64_t row_hi, const sg_window_rows *acc,
                              segrt_dtype out_dtype, const sg_window_rows *dst)
{
    sgk_win_geom k = geom_of(g);
    sgk_win_rows a = rows_of(acc), d = rows_of(dst);
    return sgk_win_finalize(STREAM(stream), &k, (sgk_win_final)kind, threshold, classes, row_lo, row_hi, &a, out_dtype,
                            &d);
}

static sg_status win_area_u8(sg_backend_stream *stream, const uint8_t *src, int64_t src_pitch, int64_t src_plane,
                             int64_t src_ring, int32_t channels, const sg_window_axis *rows, int64_t row0,
                             int64_t n_rows, const sg_window_axis *cols, int64_t n_cols, const sg_window_norm *norm,
                             float *dst, int64_t dst_pitch, int64_t dst_cstride)
{
    sgk_area_axis r = {rows->first, rows->count, rows->w, rows->span};
    sgk_area_axis c = {cols->first, cols->count, cols->w, cols->span};
    sgk_norm3 nm = {norm && norm->on, 1.0f, {0, 0, 0}, {1, 1, 1}};
    if (nm.on) {
        nm.scale = norm->scale;
        memcpy(nm.mean, norm->mean, sizeof nm.mean);
        memcpy(nm.std, norm->std, sizeof nm.std);
    }
    return sgk_area_u8(STREAM(stream), src, src_pitch, src_plane, src_ring, channels, &r, row0, n_rows, &c, n_cols, &nm,
                       dst, dst_pitch, dst_cstride);
}

const sg_window_ops sg_cuda_window_ops = {
    .name = "cuda",
    .device_get = win_device_get,
    .device_set = win_device_set,
    .device_alloc = win_device_alloc,
    .device_free = win_device_free,
    .host_alloc = win_host_alloc,
    .host_free = win_host_free,
    .host_register = win_host_register,
    .host_unregister = win_host_unregister,
    .stream_create = win_stream_create,
    .stream_destroy = win_stream_destroy,
    .stream_synchronize = win_stream_synchronize,
    .stream_wait = win_stream_wait,
    .event_create = win_event_create,
    .event_destroy = win_event_destroy,
    .event_record = win_event_record,
    .event_synchronize = win_event_synchronize,
    .event_query = win_event_query,
    .copy = win_copy,
    .copy_async = win_copy_async,
    .copy_2d_async = win_copy_2d_async,
    .memset_async = win_memset_async,
    .memset_2d_async = win_memset_2d_async,
    .gather = win_gather,
    .combine = win_combine,
    .accumulate = win_accumulate,
    .finalize = win_finalize,
    .jpeg_create = sg_cuda_jpeg_create,
    .jpeg_destroy = sg_cuda_jpeg_destroy,
    .jpeg_decode = sg_cuda_jpeg_decode,
    .jpeg_engine = sg_cuda_jpeg_engine,
    .area_u8 = win_area_u8,
};
