/* A dense row-major tensor view: what kernels read and write. It does not
 * own its data. */
#ifndef SG_CORE_TENSOR_H
#define SG_CORE_TENSOR_H

#include "core/dtype.h"
#include "core/status.h"

#include <stdint.h>

typedef struct sg_tensor {
    sg_dtype dtype;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    void *data;
} sg_tensor;

/* Element count (1 for rank 0). Dims are validated when shapes are
 * inferred, so this cannot overflow for tensors that reach a kernel. */
int64_t sg_tensor_numel(const sg_tensor *t);
size_t sg_tensor_bytes(const sg_tensor *t);

/* Formats dims as "1x3x256x256" ("scalar" for rank 0) into buf. */
const char *sg_dims_format(const int64_t *dims, int32_t rank, char *buf, size_t cap);

#endif
