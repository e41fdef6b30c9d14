#include "core/mem.h"

#include <stdatomic.h>
#include <stdio.h>
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

sg_status sg_blob_adopt(void *data, size_t size, sg_blob **out)
{
    if (((uintptr_t)data & 63) != 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "sg_blob_adopt: %p is not 64-byte aligned", data);
    sg_blob *b = sg_malloc(sizeof *b);
    if (!b)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    atomic_init(&b->refs, 1);
    b->size = size;
    b->data = data;
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

/* The first unsigned number in the file at path (after key when given,
 * e.g. "MemAvailable:"), times scale; false if there is none ("max"). */
static bool read_number(const char *path, const char *key, uint64_t scale, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        const char *p = line;
        if (key) {
            if (strncmp(line, key, strlen(key)) != 0)
                continue;
            p += strlen(key);
        }
        unsigned long long v;
        found = sscanf(p, " %llu", &v) == 1;
        if (found)
            *out = (uint64_t)v * scale;
        if (!key)
            break;
    }
    fclose(f);
    return found;
}

/* What the cgroup's limit leaves: limit less usage, when there is a limit. */
static bool cgroup_room(uint64_t *room, const char **source)
{
    char rel[512] = "", path[600];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "0::", 3) == 0) { /* cgroup v2 */
                snprintf(rel, sizeof rel, "%s", line + 3);
                rel[strcspn(rel, "\n")] = '\0';
            }
        fclose(f);
    }
    uint64_t limit, usage;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(rel, "/") == 0 ? "" : rel);
    if (read_number(path, NULL, 1, &limit)) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", strcmp(rel, "/") == 0 ? "" : rel);
        if (!read_number(path, NULL, 1, &usage))
            usage = 0;
        *room = limit > usage ? limit - usage : 0;
        *source = "the cgroup's memory.max";
        return true;
    }
    /* v1: "no limit" reads as a number near 2^63. */
    if (read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, 1, &limit) && limit < ((uint64_t)1 << 60)) {
        if (!read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL, 1, &usage))
            usage = 0;
        *room = limit > usage ? limit - usage : 0;
        *source = "the cgroup's memory.limit_in_bytes";
        return true;
    }
    return false;
}

bool sg_host_memory_available(uint64_t *bytes, const char **source)
{
    uint64_t avail, room;
    const char *why = "MemAvailable", *cg = NULL;
    bool have = read_number("/proc/meminfo", "MemAvailable:", 1024, &avail);
    if (cgroup_room(&room, &cg) && (!have || room < avail)) {
        avail = room;
        why = cg;
        have = true;
    }
    if (have) {
        *bytes = avail;
        if (source)
            *source = why;
    }
    return have;
}
