/* Allocation that reports failure as a status, overflow-checked sizes, and
 * reference-counted byte buffers for tensor data shared between graphs. */
#ifndef SG_CORE_MEM_H
#define SG_CORE_MEM_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* malloc/calloc/realloc that record an OUT_OF_MEMORY message on failure. */
void *sg_malloc(size_t size);
void *sg_calloc(size_t n, size_t size);
void *sg_realloc(void *p, size_t size);
char *sg_strdup(const char *s);
char *sg_strndup(const char *s, size_t n);

/* Grows *array (of *cap elements of elem_size bytes) to hold at least need
 * elements. Returns OUT_OF_MEMORY on failure, leaving *array intact. */
sg_status sg_grow(void **array, int32_t *cap, int32_t need, size_t elem_size);

/* a * b, false on overflow of int64 or for negative operands. */
bool sg_mul_i64(int64_t a, int64_t b, int64_t *out);
bool sg_add_i64(int64_t a, int64_t b, int64_t *out);

/* Product of dims, false where it overflows int64 or a dim is negative. */
bool sg_dims_product(const int64_t *dims, int32_t rank, int64_t *out);

/* Host memory this process may still allocate, in bytes: the kernel's
 * MemAvailable, lowered to what the process's cgroup (v2 memory.max, or
 * v1 memory.limit_in_bytes) leaves above its current usage. *source names
 * the figure that decided ("MemAvailable", "the cgroup's memory.max").
 * false when none of them can be read. */
bool sg_host_memory_available(uint64_t *bytes, const char **source);

/* An immutable byte buffer with a reference count, for constant tensor data
 * that folded graphs and engines share instead of copying. */
typedef struct sg_blob sg_blob;

/* A new blob of size bytes, uninitialised (zeroed when zero is true). */
sg_status sg_blob_new(size_t size, bool zero, sg_blob **out);
/* A blob over data that the caller allocated with malloc or aligned_alloc
 * (its address a multiple of 64, as sg_blob_new's are): the blob frees it.
 * On failure data is still the caller's. */
sg_status sg_blob_adopt(void *data, size_t size, sg_blob **out);
sg_blob *sg_blob_ref(sg_blob *b);
void sg_blob_unref(sg_blob *b);
void *sg_blob_data(const sg_blob *b);
size_t sg_blob_size(const sg_blob *b);

#endif
