/* sw_device.h in a build without CUDA: no model can run there. */
#include "pipeline/sw_device.h"

#ifndef SEGRT_HAVE_CUDA
#include <string.h>

bool sg_sw_device_capable(const sg_sw_model *models, int32_t n_models)
{
    (void)models;
    (void)n_models;
    return false;
}

void sg_sw_cache_free(sg_sw_cache *c)
{
    (void)c; /* nothing makes one without CUDA */
}

sg_status sg_sw_device_run(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                           const segrt_tensor *image, segrt_memory_kind out_memory, segrt_tensor *out,
                           sg_sw_stats *stats)
{
    (void)models;
    (void)n_models;
    (void)o;
    (void)image;
    (void)out_memory;
    (void)stats;
    memset(out, 0, sizeof *out);
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without CUDA");
}
#else
/* ISO C wants something in every translation unit. */
typedef int sg_sw_device_none_unused;
#endif
