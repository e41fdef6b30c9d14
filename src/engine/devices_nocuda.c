/* Device queries and device memory for a build without the CUDA backend:
 * no devices, so no device memory. */
#include "core/status.h"

#include <stdbool.h>
#include <string.h>

#ifndef SEGRT_HAVE_CUDA

segrt_status segrt_cuda_device_count(int32_t *out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cuda_device_count: out is NULL");
    *out = 0;
    return SEGRT_OK;
}

void segrt_cuda_prepare(int32_t device) { (void)device; }

segrt_status segrt_cuda_device_info(int32_t index, segrt_device_info *out)
{
    (void)out;
    return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                    "CUDA device %d does not exist: segrt was built without CUDA", index);
}

segrt_status segrt_cuda_versions_get(segrt_cuda_versions *out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cuda_versions_get: out is NULL");
    memset(out, 0, sizeof *out);
    return SEGRT_OK;
}

static sg_status no_cuda(const char *fn)
{
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: segrt was built without CUDA, so there is no device memory", fn);
}

segrt_status segrt_device_alloc(int32_t device, size_t bytes, void **out)
{
    (void)device, (void)bytes;
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_alloc: out is NULL");
    return no_cuda("segrt_device_alloc");
}

segrt_status segrt_device_free(void *ptr)
{
    /* Nothing non-NULL can have come from segrt_device_alloc here. */
    if (ptr)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_device_free: %p is not device memory: segrt was built without CUDA", ptr);
    return SEGRT_OK;
}

segrt_status segrt_device_copy(void *dst, segrt_memory_kind dst_kind, const void *src, segrt_memory_kind src_kind,
                               size_t bytes, int32_t device)
{
    (void)device;
    bool kinds_ok = (dst_kind == SEGRT_MEMORY_HOST || dst_kind == SEGRT_MEMORY_DEVICE) &&
                    (src_kind == SEGRT_MEMORY_HOST || src_kind == SEGRT_MEMORY_DEVICE);
    if (!kinds_ok)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_copy: unknown memory kind (dst %d, src %d)",
                        (int)dst_kind, (int)src_kind);
    if (dst_kind != SEGRT_MEMORY_HOST || src_kind != SEGRT_MEMORY_HOST)
        return no_cuda("segrt_device_copy");
    if (bytes == 0)
        return SEGRT_OK;
    if (!dst || !src)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_device_copy: %s is NULL", dst ? "src" : "dst");
    /* Host to host works everywhere, so that code written for either kind
     * runs without CUDA too. */
    memcpy(dst, src, bytes);
    return SEGRT_OK;
}

segrt_status segrt_device_synchronize(int32_t device)
{
    (void)device;
    return no_cuda("segrt_device_synchronize");
}

#else
/* ISO C forbids an empty translation unit. */
typedef int sg_devices_nocuda_unused;
#endif
