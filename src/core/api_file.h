/* The public segrt_output (segrt.h) is core/file.h's sg_output under its
 * public name: these convert a pointer between the two, for the layers
 * that write into outputs a caller opened through the public API. */
#ifndef SG_CORE_API_FILE_H
#define SG_CORE_API_FILE_H

#include "core/file.h"

static inline sg_output *sg_output_of(segrt_output *o)
{
    return (sg_output *)(void *)o;
}

static inline segrt_output *sg_output_public(sg_output *o)
{
    return (segrt_output *)(void *)o;
}

#endif
