// Device enumeration and library versions, for `segrt info --devices` and
// for choosing a device at build time.
#include "segrt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {

// The library's error recorder lives in core/status.c (C); declared here
// rather than including the C header into C++.
segrt_status sg_error(segrt_status status, const char *fmt, ...);

// --- bringing CUDA up ahead of the first plan ------------------------------
//
// A run's start on an H200 was about 0.35 s of CUDA before its first
// kernel: the driver's initialisation, the device's primary context, and
// cuDNN and cuBLASLt loading their kernels, one after the other and after
// the model was parsed. segrt_cuda_prepare does them on a thread of its own
// while the caller parses; every CUDA entry of the library waits for that
// thread first (prepared()), so nothing runs beside it, and a process that
// exits first waits for it at exit.

static pthread_mutex_t prep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t prep_thread;
static int prep_state; // 0 never started, 1 running, 2 joined
static int prep_device;

static void *prepare_main(void *arg)
{
    (void)arg;
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && prep_device < n && cudaSetDevice(prep_device) == cudaSuccess &&
        cudaFree(0) == cudaSuccess) {
        cudnnHandle_t h = NULL;
        if (cudnnCreate(&h) == CUDNN_STATUS_SUCCESS)
            cudnnDestroy(h);
        cublasLtHandle_t lt = NULL;
        if (cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS)
            cublasLtDestroy(lt);
    }
    (void)cudaGetLastError(); // a failure is the later call's to report
    return NULL;
}

static void prepared(void)
{
    pthread_mutex_lock(&prep_lock);
    if (prep_state == 1) {
        pthread_join(prep_thread, NULL);
        prep_state = 2;
    }
    pthread_mutex_unlock(&prep_lock);
}

static void prepared_at_exit(void) { prepared(); }

void segrt_cuda_prepare(int32_t device)
{
    pthread_mutex_lock(&prep_lock);
    if (prep_state == 0 && device >= 0) {
        prep_device = device;
        if (pthread_create(&prep_thread, NULL, prepare_main, NULL) == 0) {
            prep_state = 1;
            atexit(prepared_at_exit);
        } else {
            prep_state = 2; // no thread: the first plan brings CUDA up itself
        }
    }
    pthread_mutex_unlock(&prep_lock);
}

segrt_status segrt_cuda_device_count(int32_t *out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cuda_device_count: out is NULL");
    prepared();
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

// --- device memory -----------------------------------------------------------

static const double MIB = 1048576.0;

static segrt_status status_of(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_ERROR_DEVICE;
}

// One line naming the API function, the CUDA call and CUDA's own words. A
// failed call leaves a non-sticky error behind; it is cleared so that the
// caller's next CUDA call does not see it.
static segrt_status cuda_fail(const char *fn, const char *call, int32_t device, cudaError_t e)
{
    (void)cudaGetLastError();
    return sg_error(status_of(e), "%s: %s on CUDA device %d failed: %s (%s)", fn, call, device,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

// Makes `device` current for the length of one API call; *prev receives the
// caller's device, which leave_device puts back, so that these functions do
// not move the caller's later CUDA calls to another device.
static segrt_status enter_device(const char *fn, int32_t device, int *prev)
{
    int32_t n = 0;
    segrt_cuda_device_count(&n);
    if (device < 0 || device >= n)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: CUDA device %d does not exist (this machine has %d)",
                        fn, device, n);
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess)
        e = cudaSetDevice(device);
    return e == cudaSuccess ? SEGRT_OK : cuda_fail(fn, "cudaSetDevice", device, e);
}

static void leave_device(int prev)
{
    cudaSetDevice(prev);
    (void)cudaGetLastError();
}

segrt_status segrt_device_alloc(int32_t device, size_t bytes, void **out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_alloc: out is NULL");
    int prev = 0;
    segrt_status s = enter_device("segrt_device_alloc", device, &prev);
    if (s != SEGRT_OK)
        return s;
    void *p = NULL;
    // cudaMalloc of 0 bytes gives NULL, which callers would take for failure.
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        (void)cudaGetLastError();
        s = sg_error(status_of(e),
                     "segrt_device_alloc: cudaMalloc of %.1f MiB on CUDA device %d failed: %s (%s); "
                     "%.1f MiB free of %.1f MiB",
                     bytes / MIB, device, cudaGetErrorString(e), cudaGetErrorName(e), free_b / MIB, total_b / MIB);
    } else {
        *out = p;
    }
    leave_device(prev);
    return s;
}

segrt_status segrt_device_free(void *ptr)
{
    if (!ptr)
        return SEGRT_OK;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess || a.type != cudaMemoryTypeDevice) {
        (void)cudaGetLastError();
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_free: %p is not CUDA device memory", ptr);
    }
    int prev = 0;
    segrt_status s = enter_device("segrt_device_free", a.device, &prev);
    if (s != SEGRT_OK)
        return s;
    e = cudaFree(ptr);
    if (e != cudaSuccess)
        s = cuda_fail("segrt_device_free", "cudaFree", a.device, e);
    leave_device(prev);
    return s;
}

segrt_status segrt_device_copy(void *dst, segrt_memory_kind dst_kind, const void *src, segrt_memory_kind src_kind,
                               size_t bytes, int32_t device)
{
    bool kinds_ok = (dst_kind == SEGRT_MEMORY_HOST || dst_kind == SEGRT_MEMORY_DEVICE) &&
                    (src_kind == SEGRT_MEMORY_HOST || src_kind == SEGRT_MEMORY_DEVICE);
    if (!kinds_ok)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_copy: unknown memory kind (dst %d, src %d)",
                        (int)dst_kind, (int)src_kind);
    if (bytes == 0)
        return SEGRT_OK;
    if (!dst || !src)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_copy: %s is NULL", dst ? "src" : "dst");
    if (dst_kind == SEGRT_MEMORY_HOST && src_kind == SEGRT_MEMORY_HOST) {
        memcpy(dst, src, bytes);
        return SEGRT_OK;
    }
    cudaMemcpyKind kind = dst_kind == SEGRT_MEMORY_HOST   ? cudaMemcpyDeviceToHost
                          : src_kind == SEGRT_MEMORY_HOST ? cudaMemcpyHostToDevice
                                                          : cudaMemcpyDeviceToDevice;
    int prev = 0;
    segrt_status s = enter_device("segrt_device_copy", device, &prev);
    if (s != SEGRT_OK)
        return s;
    // The calling thread's own default stream: a copy neither waits for
    // nor holds up segrt's contexts (their streams are non-blocking) or
    // other threads. Synchronizing it makes the copy complete on return,
    // pageable host memory included.
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, cudaStreamPerThread);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cudaStreamPerThread);
    if (e != cudaSuccess) {
        char call[96];
        snprintf(call, sizeof call, "cudaMemcpy %s of %zu bytes",
                 kind == cudaMemcpyDeviceToHost   ? "device to host"
                 : kind == cudaMemcpyHostToDevice ? "host to device"
                                                  : "device to device",
                 bytes);
        s = cuda_fail("segrt_device_copy", call, device, e);
    }
    leave_device(prev);
    return s;
}

segrt_status segrt_device_synchronize(int32_t device)
{
    int prev = 0;
    segrt_status s = enter_device("segrt_device_synchronize", device, &prev);
    if (s != SEGRT_OK)
        return s;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        s = cuda_fail("segrt_device_synchronize", "cudaDeviceSynchronize", device, e);
    leave_device(prev);
    return s;
}

}  // extern "C"
