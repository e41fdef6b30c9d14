/* Device queries for a build without the CUDA backend: no devices. */
#include "core/status.h"

#include <string.h>

#ifndef SEGRT_HAVE_CUDA

segrt_status segrt_cuda_device_count(int32_t *out)
{
    if (!out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cuda_device_count: out is NULL");
    *out = 0;
    return SEGRT_OK;
}

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

#else
/* ISO C forbids an empty translation unit. */
typedef int sg_devices_nocuda_unused;
#endif
