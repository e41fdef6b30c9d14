/* The CUDA backend's volume operations (backend_volume.h): k_volume.h's
 * kernels over device memory, the stream a cudaStream_t cast to the
 * opaque type. Arguments are checked here, so that a bad one is a status
 * naming the call rather than a kernel reading out of bounds. The two
 * members that answer in host memory (mask_box, stats) take their
 * scratch from the stream-ordered allocator, which neither synchronizes
 * the device nor holds memory between calls, and wait for their stream.
 * Each CUDA call is checked by CUDA_TRY or CUDA_KEEP, which name the
 * call, file and line. */
#include "backend/backend_volume.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_volume.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

_Static_assert(SG_VOLUME_MAX_CHANNELS == SGK_VOL_MAX_CHANNELS, "channel limits agree");
_Static_assert((int)SG_VOL_NEAREST == SGK_VOL_NEAREST && (int)SG_VOL_LINEAR == SGK_VOL_LINEAR &&
                   (int)SG_VOL_CUBIC == SGK_VOL_CUBIC,
               "interpolations agree");
_Static_assert(sizeof(sg_vol_affine) == sizeof(sgk_vol_affine) && offsetof(sg_vol_affine, lo) == 0 &&
                   offsetof(sg_vol_affine, hi) == offsetof(sgk_vol_affine, hi) &&
                   offsetof(sg_vol_affine, sub) == offsetof(sgk_vol_affine, sub) &&
                   offsetof(sg_vol_affine, mul) == offsetof(sgk_vol_affine, mul),
               "affines have one layout");
/* stats copies the kernels' results straight into the caller's array. */
_Static_assert(sizeof(sg_vol_stats) == sizeof(sgk_vol_stat) &&
                   offsetof(sg_vol_stats, count) == offsetof(sgk_vol_stat, count) &&
                   offsetof(sg_vol_stats, sum) == offsetof(sgk_vol_stat, sum) &&
                   offsetof(sg_vol_stats, sum_sq) == offsetof(sgk_vol_stat, sum_sq) &&
                   offsetof(sg_vol_stats, min) == offsetof(sgk_vol_stat, min) &&
                   offsetof(sg_vol_stats, max) == offsetof(sgk_vol_stat, max),
               "statistics have one layout");

#define STREAM(s) ((cudaStream_t)(s))

/* CUDA_TRY's check where a failure must still free what was allocated:
 * records the first failure in st and goes on. */
#define CUDA_KEEP(st, call)                                                                                            \
    do {                                                                                                               \
        cudaError_t cuda_k_ = (call);                                                                                  \
        if (cuda_k_ != cudaSuccess && (st) == SEGRT_OK)                                                                \
            (st) = cuda_error(cuda_k_, #call, __FILE__, __LINE__);                                                     \
    } while (0)

/* The scratch of a synchronous member: the result first, the kernels'
 * partials from a 256-byte boundary on. */
#define RESULT_BYTES 256

static sg_status check_dims(const char *call, const int64_t *dims, int n)
{
    if (!dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume %s: NULL dims", call);
    for (int d = 0; d < n; d++)
        if (dims[d] < 0)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume %s: dimension %d is %lld", call, d,
                            (long long)dims[d]);
    return SEGRT_OK;
}

/* A NULL buffer where there are elements would fault in the kernel, and a
 * fault spoils the context for every later call: refused here. */
static sg_status check_buffers(const char *call, int64_t elements, const void *a, const void *b)
{
    if (elements > 0 && (!a || !b))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume %s: NULL buffer for %lld elements", call,
                        (long long)elements);
    return SEGRT_OK;
}

static int64_t count4(const int64_t dims[4])
{
    return dims[0] * dims[1] * dims[2] * dims[3];
}

static sg_status check_axis(const char *call, int d, const sg_vol_axis *ax, bool cubic)
{
    if (!ax)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume %s: no axis parameters", call);
    if (ax->n_out < 0 || !isfinite(ax->scale) || !isfinite(ax->offset) || !isfinite(ax->shift))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume %s: axis %d maps %lld outputs at %g (o + %g) + %g",
                        call, d, (long long)ax->n_out, ax->scale, ax->shift, ax->offset);
    if (ax->interp != SG_VOL_NEAREST && ax->interp != SG_VOL_LINEAR && !(cubic && ax->interp == SG_VOL_CUBIC))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume %s: axis %d's interpolation %d (nearest, linear%s)",
                        call, d, (int)ax->interp, cubic ? " or cubic" : "");
    return SEGRT_OK;
}

static sgk_vol_axis axis_of(const sg_vol_axis *ax)
{
    sgk_vol_axis k = {ax->n_out, ax->scale, ax->offset, (int32_t)ax->interp, ax->shift};
    return k;
}

static sg_status vol_strided_copy(sg_backend_stream *stream, size_t elem_size, const void *src, int64_t src_offset,
                                  const int64_t src_stride[4], void *dst, const int64_t dst_stride[4],
                                  const int64_t dims[4])
{
    sg_status s = check_dims("strided_copy", dims, 4);
    if (s == SEGRT_OK && (!src_stride || !dst_stride))
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume strided_copy: NULL strides");
    if (s == SEGRT_OK)
        s = check_buffers("strided_copy", count4(dims), src, dst);
    if (s != SEGRT_OK)
        return s;
    if (elem_size != 1 && elem_size != 2 && elem_size != 4)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume strided_copy: elements of %zu bytes (1, 2 or 4)",
                        elem_size);
    return sgk_vol_strided_copy(STREAM(stream), elem_size, src, src_offset, src_stride, dst, dst_stride, dims);
}

static sg_status vol_fill(sg_backend_stream *stream, void *dst, int value, size_t bytes)
{
    if (bytes && !dst)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume fill: NULL buffer for %zu bytes", bytes);
    if (bytes)
        CUDA_TRY(cudaMemsetAsync(dst, value, bytes, STREAM(stream)));
    return SEGRT_OK;
}

static sg_status vol_resample_axis(sg_backend_stream *stream, const float *src, const int64_t dims[4], int32_t axis,
                                   const sg_vol_axis *ax, float *dst)
{
    sg_status s = check_dims("resample_axis", dims, 4);
    if (s == SEGRT_OK && (axis < 1 || axis > 3))
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume resample_axis: axis %d (1 to 3)", (int)axis);
    if (s == SEGRT_OK)
        s = check_axis("resample_axis", axis, ax, true);
    if (s == SEGRT_OK)
        s = check_buffers("resample_axis", count4(dims) / (dims[axis] ? dims[axis] : 1) * ax->n_out, src, dst);
    if (s != SEGRT_OK)
        return s;
    sgk_vol_axis k = axis_of(ax);
    return sgk_vol_resample_axis(STREAM(stream), src, dims, axis, &k, dst);
}

static sg_status vol_spline_prefilter(sg_backend_stream *stream, float *data, const int64_t dims[4], int32_t axis)
{
    sg_status s = check_dims("spline_prefilter", dims, 4);
    if (s == SEGRT_OK && (axis < 1 || axis > 3))
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume spline_prefilter: axis %d (1 to 3)", (int)axis);
    if (s == SEGRT_OK)
        s = check_buffers("spline_prefilter", count4(dims), data, data);
    if (s != SEGRT_OK)
        return s;
    return sgk_vol_spline_prefilter(STREAM(stream), data, dims, axis);
}

static sg_status vol_intensity(sg_backend_stream *stream, float *data, const int64_t dims[4],
                               const sg_vol_affine *params, const uint8_t *mask)
{
    sg_status s = check_dims("intensity", dims, 4);
    if (s == SEGRT_OK)
        s = check_buffers("intensity", count4(dims), data, params);
    if (s != SEGRT_OK)
        return s;
    if (dims[0] > SG_VOLUME_MAX_CHANNELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume intensity: %lld channels (%d at most)",
                        (long long)dims[0], SG_VOLUME_MAX_CHANNELS);
    sgk_vol_affine k[SGK_VOL_MAX_CHANNELS];
    memset(k, 0, sizeof k);
    if (dims[0] > 0)
        memcpy(k, params, (size_t)dims[0] * sizeof *params);
    return sgk_vol_intensity(STREAM(stream), data, dims, k, mask);
}

static sg_status vol_foreground_mask(sg_backend_stream *stream, const float *data, const int64_t dims[4], bool nonzero,
                                     float threshold, uint8_t *mask)
{
    sg_status s = check_dims("foreground_mask", dims, 4);
    if (s == SEGRT_OK)
        s = check_buffers("foreground_mask", dims[1] * dims[2] * dims[3], mask, mask);
    if (s == SEGRT_OK)
        s = check_buffers("foreground_mask", count4(dims), data, data);
    if (s != SEGRT_OK)
        return s;
    return sgk_vol_foreground_mask(STREAM(stream), data, dims, nonzero, threshold, mask);
}

static sg_status vol_mask_box(sg_backend_stream *stream, const uint8_t *mask, const int64_t dims[3], int64_t lo[3],
                              int64_t hi[3])
{
    sg_status s = check_dims("mask_box", dims, 3);
    if (s == SEGRT_OK && (!lo || !hi))
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume mask_box: NULL box");
    if (s == SEGRT_OK)
        s = check_buffers("mask_box", dims[0] * dims[1] * dims[2], mask, mask);
    if (s != SEGRT_OK)
        return s;
    cudaStream_t st = STREAM(stream);
    char *buf = NULL;
    CUDA_TRY(cudaMallocAsync((void **)&buf, RESULT_BYTES + sgk_vol_mask_box_scratch(dims), st));
    int64_t box[6];
    s = sgk_vol_mask_box(st, mask, dims, buf + RESULT_BYTES, (int64_t *)buf);
    if (s == SEGRT_OK)
        CUDA_KEEP(s, cudaMemcpyAsync(box, buf, sizeof box, cudaMemcpyDeviceToHost, st));
    CUDA_KEEP(s, cudaFreeAsync(buf, st));
    CUDA_KEEP(s, cudaStreamSynchronize(st));
    if (s != SEGRT_OK)
        return s;
    const bool none = box[0] == INT64_MAX;
    for (int d = 0; d < 3; d++) {
        lo[d] = none ? 0 : box[d];
        hi[d] = none ? 0 : box[3 + d];
    }
    return SEGRT_OK;
}

static sg_status vol_stats(sg_backend_stream *stream, const float *data, const int64_t dims[4], const uint8_t *mask,
                           sg_vol_stats *out)
{
    sg_status s = check_dims("stats", dims, 4);
    if (s == SEGRT_OK && dims[0] > 0 && !out)
        s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume stats: NULL output");
    if (s == SEGRT_OK)
        s = check_buffers("stats", count4(dims), data, data);
    if (s != SEGRT_OK || dims[0] == 0)
        return s;
    cudaStream_t st = STREAM(stream);
    const size_t result = (size_t)dims[0] * sizeof(sgk_vol_stat);
    const size_t at = (result + RESULT_BYTES - 1) / RESULT_BYTES * RESULT_BYTES;
    char *buf = NULL;
    CUDA_TRY(cudaMallocAsync((void **)&buf, at + sgk_vol_stats_scratch(dims), st));
    s = sgk_vol_stats(st, data, dims, mask, buf + at, (sgk_vol_stat *)buf);
    if (s == SEGRT_OK)
        CUDA_KEEP(s, cudaMemcpyAsync(out, buf, result, cudaMemcpyDeviceToHost, st));
    CUDA_KEEP(s, cudaFreeAsync(buf, st));
    CUDA_KEEP(s, cudaStreamSynchronize(st));
    return s;
}

static sg_status vol_resample_argmax(sg_backend_stream *stream, const float *scores, int64_t classes,
                                     const int64_t in_dims[3], const sg_vol_axis ax[3], segrt_dtype out_dtype,
                                     void *labels)
{
    sg_status s = check_dims("resample_argmax", in_dims, 3);
    for (int d = 0; d < 3 && s == SEGRT_OK; d++)
        s = check_axis("resample_argmax", d, ax ? &ax[d] : NULL, false);
    if (s == SEGRT_OK)
        s = check_buffers("resample_argmax", ax[0].n_out * ax[1].n_out * ax[2].n_out, scores, labels);
    if (s != SEGRT_OK)
        return s;
    const int64_t most = out_dtype == SEGRT_DTYPE_UINT8 ? 256 : out_dtype == SEGRT_DTYPE_UINT16 ? 65536 : 0;
    if (!most)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume resample_argmax: labels of dtype %d (uint8 or "
                        "uint16)", (int)out_dtype);
    if (classes < 1 || classes > most)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuda volume resample_argmax: %lld classes as %s labels",
                        (long long)classes, out_dtype == SEGRT_DTYPE_UINT8 ? "uint8" : "uint16");
    sgk_vol_axis k[3];
    for (int d = 0; d < 3; d++)
        k[d] = axis_of(&ax[d]);
    return sgk_vol_resample_argmax(STREAM(stream), scores, classes, in_dims, k, out_dtype, labels);
}

const sg_volume_ops sg_cuda_volume_ops = {
    .name = "cuda",
    .strided_copy = vol_strided_copy,
    .fill = vol_fill,
    .resample_axis = vol_resample_axis,
    .spline_prefilter = vol_spline_prefilter,
    .intensity = vol_intensity,
    .foreground_mask = vol_foreground_mask,
    .mask_box = vol_mask_box,
    .stats = vol_stats,
    .resample_argmax = vol_resample_argmax,
};
