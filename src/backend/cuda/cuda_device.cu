// Device enumeration and library versions, for `segrt info --devices` and
// for choosing a device at build time.
#include "segrt.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdio.h>
#include <string.h>

extern "C" {

// The library's error recorder lives in core/status.c (C); declared here
// rather than including the C header into C++.
segrt_status sg_error(segrt_status status, const char *fmt, ...);

segrt_status segrt_cuda_device_count(int32_t *out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cuda_device_count: out is NULL");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    // No driver or no GPU is a normal machine, not an error.
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    *out = n;
    return SEGRT_OK;
}

segrt_status segrt_cuda_device_info(int32_t index, segrt_device_info *out)
{
    int32_t n = 0;
    segrt_cuda_device_count(&n);
    if (!out || index < 0 || index >= n)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "CUDA device %d does not exist (this machine has %d)",
                        index, n);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess)
        return sg_error(SEGRT_ERROR_DEVICE, "cudaGetDeviceProperties(%d): %s", index, cudaGetErrorString(e));
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->index = index;
    out->compute_major = p.major;
    out->compute_minor = p.minor;
    out->multiprocessors = p.multiProcessorCount;
    out->total_memory_bytes = p.totalGlobalMem;
    int prev = 0;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(index) == cudaSuccess &&
        cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        out->free_memory_bytes = free_b;
    cudaSetDevice(prev);
    (void)cudaGetLastError();
    return SEGRT_OK;
}

segrt_status segrt_cuda_versions_get(segrt_cuda_versions *out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cuda_versions_get: out is NULL");
    memset(out, 0, sizeof *out);
    out->built_with_cuda = 1;
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess)
        out->driver_version = v;
    if (cudaRuntimeGetVersion(&v) == cudaSuccess)
        out->runtime_version = v;
    out->cudnn_version = (int32_t)cudnnGetVersion();
    (void)cudaGetLastError();
    return SEGRT_OK;
}

}  // extern "C"
