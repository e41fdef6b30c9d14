#include "core/tensor.h"

#include <stdio.h>

int64_t sg_tensor_numel(const sg_tensor *t)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

size_t sg_tensor_bytes(const sg_tensor *t)
{
    return (size_t)sg_tensor_numel(t) * segrt_dtype_size(t->dtype);
}

const char *sg_dims_format(const int64_t *dims, int32_t rank, char *buf, size_t cap)
{
    if (rank == 0) {
        snprintf(buf, cap, "scalar");
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < rank && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, i ? "x%lld" : "%lld", (long long)dims[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}
