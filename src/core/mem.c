#include "core/mem.h"

#include <stdatomic.h>
#include <string.h>

void *sg_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", size);
    return p;
}

void *sg_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *sg_realloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q)
        sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", size);
    return q;
}

char *sg_strdup(const char *s) { return sg_strndup(s, strlen(s)); }

char *sg_strndup(const char *s, size_t n)
{
    char *d = sg_malloc(n + 1);
    if (d) {
        if (n) /* protobuf-c gives NULL data for empty bytes */
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

sg_status sg_grow(void **array, int32_t *cap, int32_t need, size_t elem_size)
{
    if (need <= *cap)
        return SEGRT_OK;
    if (need > INT32_MAX / 2)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "too many elements (%d)", need);
    int32_t ncap = *cap ? *cap : 8;
    while (ncap < need)
        ncap *= 2;
    void *p = sg_realloc(*array, (size_t)ncap * elem_size);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    memset((char *)p + (size_t)*cap * elem_size, 0, (size_t)(ncap - *cap) * elem_size);
    *array = p;
    *cap = ncap;
    return SEGRT_OK;
}

bool sg_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return false;
    return !__builtin_mul_overflow(a, b, out);
}

bool sg_add_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

bool sg_dims_product(const int64_t *dims, int32_t rank, int64_t *out)
{
    int64_t p = 1;
    for (int32_t i = 0; i < rank; i++)
        if (!sg_mul_i64(p, dims[i], &p))
            return false;
    *out = p;
    return true;
}

struct sg_blob {
    atomic_int refs;
    size_t size;
    void *data;
};

sg_status sg_blob_new(size_t size, bool zero, sg_blob **out)
{
    sg_blob *b = sg_malloc(sizeof *b);
    if (!b)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    /* 64-byte alignment suits every vector width the CPU kernels use. */
    size_t padded = (size + 63) & ~(size_t)63;
    if (padded < size) {
        free(b);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "buffer of %zu bytes is too large", size);
    }
    b->data = aligned_alloc(64, padded ? padded : 64);
    if (!b->data) {
        free(b);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", size);
    }
    if (zero)
        memset(b->data, 0, padded ? padded : 64);
    atomic_init(&b->refs, 1);
    b->size = size;
    *out = b;
    return SEGRT_OK;
}

sg_blob *sg_blob_ref(sg_blob *b)
{
    if (b)
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void sg_blob_unref(sg_blob *b)
{
    if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        free(b->data);
        free(b);
    }
}

void *sg_blob_data(const sg_blob *b) { return b->data; }
size_t sg_blob_size(const sg_blob *b) { return b->size; }
