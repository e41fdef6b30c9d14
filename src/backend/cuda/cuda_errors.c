/* The error recorders behind CUDA_TRY, CUDNN_TRY and CUBLAS_TRY: the
 * failing call's text, the library's own message, and where it was made.
 * Running out of memory gets its own status so callers can tell it from a
 * broken device or library. */
#include "backend/cuda/cuda_internal.h"

sg_status cuda_error(cudaError_t e, const char *call, const char *file, int line)
{
    sg_status st = e == cudaErrorMemoryAllocation ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_ERROR_DEVICE;
    return sg_error(st, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorString(e), cudaGetErrorName(e), file,
                    line);
}

sg_status cudnn_error(cudnnStatus_t s, const char *call, const char *file, int line)
{
    sg_status st = (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                    s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
                       ? SEGRT_ERROR_OUT_OF_MEMORY
                       : SEGRT_ERROR_DEVICE;
    /* cuDNN keeps a per-thread description of its last failure that says
     * far more than the status name (which attribute, which check). */
    char detail[512];
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof detail);
    detail[sizeof detail - 1] = '\0';
    if (detail[0])
        return sg_error(st, "%s failed: %s (%d): %s at %s:%d", call, cudnnGetErrorString(s), (int)s, detail, file,
                        line);
    return sg_error(st, "%s failed: %s (%d) at %s:%d", call, cudnnGetErrorString(s), (int)s, file, line);
}

sg_status cublas_error(cublasStatus_t s, const char *call, const char *file, int line)
{
    sg_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_ERROR_DEVICE;
    return sg_error(st, "%s failed: %s (%d) at %s:%d", call, cublasLtGetStatusString(s), (int)s, file, line);
}
