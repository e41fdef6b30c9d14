/* The backends of this build, by device kind and by name. */
#include "backend/backend.h"

#include <string.h>

static const sg_backend *const backends[] = {
    &sg_cpu_backend,
#ifdef SEGRT_HAVE_CUDA
    &sg_cuda_backend,
#endif
};

const sg_backend *sg_backend_for(segrt_device_kind kind)
{
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
        if (backends[i]->device == kind)
            return backends[i];
    return NULL;
}

const sg_backend *sg_backend_named(const char *name)
{
    for (size_t i = 0; name && i < sizeof backends / sizeof *backends; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

sg_eval_lookup sg_backend_host_eval(void)
{
    return sg_cpu_backend.eval;
}
