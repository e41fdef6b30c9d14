/* The weight store: an engine's constants on the device, each converted
 * once to the dtype and layout a step wants and shared by every plan of
 * the engine (the opt-shape plan, the max-shape plan, specializations).
 *
 * Entries are keyed by the constant's blob and a tag naming the
 * conversion. The store holds a reference on each blob, so an address
 * cannot be reused by another constant while the entry exists. Plans are
 * built from several threads (contexts specialize lazily), hence the lock. */
#include "backend/cuda/cuda_internal.h"
#include "core/strmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct weight_entry {
    sg_blob *blob;
    char *tag;
    char *key; /* blob address and tag, the index's key */
    void *dev;
    size_t bytes;
} weight_entry;

struct sg_cuda_weights {
    int32_t device;
    pthread_mutex_t lock;
    weight_entry *e;
    int32_t n, cap;
    sg_strmap index; /* key -> entry: a scan per look-up made building quadratic in the constants */
    size_t bytes;
};

sg_status sg_cuda_weights_new(int32_t device, sg_cuda_weights **out)
{
    sg_cuda_weights *w = sg_calloc(1, sizeof *w);
    if (!w)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    w->device = device;
    sg_strmap_init(&w->index);
    pthread_mutex_init(&w->lock, NULL);
    *out = w;
    return SEGRT_OK;
}

void sg_cuda_weights_free(sg_cuda_weights *w)
{
    if (!w)
        return;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(w->device);
    for (int32_t i = 0; i < w->n; i++) {
        cudaFree(w->e[i].dev);
        sg_blob_unref(w->e[i].blob);
        free(w->e[i].tag);
        free(w->e[i].key);
    }
    cudaSetDevice(prev);
    free(w->e);
    sg_strmap_free(&w->index);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

size_t sg_cuda_weights_bytes(const sg_cuda_weights *w) { return w ? w->bytes : 0; }

/* "address\x1ftag": the address cannot hold the separator, so two keys
 * are equal exactly when blob and tag are. */
static char *entry_key(const void *blob, const char *tag, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%p\x1f%s", blob, tag);
    if (n >= 0 && (size_t)n < cap)
        return buf;
    char *k = sg_malloc(n >= 0 ? (size_t)n + 1 : 1);
    if (k)
        snprintf(k, (size_t)n + 1, "%p\x1f%s", blob, tag);
    return k;
}

static weight_entry *find(sg_cuda_weights *w, const void *blob, const char *tag)
{
    char buf[128];
    char *k = entry_key(blob, tag, buf, sizeof buf);
    int32_t i = k ? sg_strmap_get(&w->index, k) : -1;
    if (k != buf)
        free(k);
    return i >= 0 ? &w->e[i] : NULL;
}

bool sg_cuda_weights_lookup(sg_cuda_weights *w, const void *blob, const char *tag, void **dev)
{
    pthread_mutex_lock(&w->lock);
    weight_entry *e = find(w, blob, tag);
    if (e)
        *dev = e->dev;
    pthread_mutex_unlock(&w->lock);
    return e != NULL;
}

static sg_status insert(sg_cuda_weights *w, sg_blob *blob, const char *tag, const void *host, size_t bytes,
                        void **dev)
{
    weight_entry *have = find(w, blob, tag);
    if (have) {
        *dev = have->dev;
        return SEGRT_OK;
    }
    SG_TRY(sg_grow((void **)&w->e, &w->cap, w->n + 1, sizeof *w->e));
    char *t = sg_strdup(tag);
    char *k = entry_key(blob, tag, NULL, 0);
    if (!t || !k) {
        free(t);
        free(k);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    void *d = NULL;
    cudaError_t ce = cudaMalloc(&d, bytes ? bytes : 1);
    if (ce != cudaSuccess) {
        free(t);
        free(k);
        (void)cudaGetLastError();
        return sg_error(ce == cudaErrorMemoryAllocation ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_ERROR_DEVICE,
                        "cannot allocate %zu bytes of weights on CUDA device %d: %s", bytes, w->device,
                        cudaGetErrorString(ce));
    }
    /* Synchronous: the host buffer is freed by the caller right after. */
    sg_status s = SEGRT_OK;
    if (bytes && (ce = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
        s = cuda_error(ce, "cudaMemcpy(weights)", __FILE__, __LINE__);
    if (s == SEGRT_OK) /* the index borrows the key: the entry owns it */
        s = sg_strmap_put(&w->index, k, w->n);
    if (s != SEGRT_OK) {
        cudaFree(d);
        free(t);
        free(k);
        return s;
    }
    w->e[w->n++] = (weight_entry){sg_blob_ref(blob), t, k, d, bytes};
    w->bytes += bytes;
    *dev = d;
    return SEGRT_OK;
}

sg_status cuda_const_upload(sg_cuda_plan *p, const void *key_blob, const char *tag, const void *host,
                            size_t n_bytes, void **dev)
{
    sg_cuda_weights *w = p->weights;
    pthread_mutex_lock(&w->lock);
    sg_status s = insert(w, (sg_blob *)key_blob, tag, host, n_bytes, dev);
    pthread_mutex_unlock(&w->lock);
    return s;
}

int32_t sg_cuda_weights_count(const sg_cuda_weights *w) { return w ? w->n : 0; }

typedef struct blob_entry {
    const sg_blob *blob;
    int32_t entry;
} blob_entry;

static int by_blob(const void *a, const void *b)
{
    const blob_entry *x = a, *y = b;
    uintptr_t p = (uintptr_t)x->blob, q = (uintptr_t)y->blob;
    if (p != q)
        return p < q ? -1 : 1;
    return (x->entry > y->entry) - (x->entry < y->entry);
}

sg_status sg_cuda_weights_names(const sg_cuda_weights *w, const sg_graph *g, const char ***out)
{
    /* Entries sorted by blob; each value holding data names the entries of
     * its blob that no value before it named: the first value, as a scan
     * of the values per entry found, in (values + entries) log entries. */
    int32_t n = w ? w->n : 0;
    const char **names = sg_calloc((size_t)n + 1, sizeof *names);
    blob_entry *by = sg_malloc(sizeof *by * (size_t)(n + 1));
    if (!names || !by) {
        free(names);
        free(by);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    for (int32_t i = 0; i < n; i++)
        by[i] = (blob_entry){w->e[i].blob, i};
    qsort(by, (size_t)n, sizeof *by, by_blob);
    for (int32_t v = 0; v < g->n_values; v++) {
        const sg_blob *b = g->values[v].data;
        if (!b)
            continue;
        int32_t lo = 0, hi = n; /* the first entry of blob b */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if ((uintptr_t)by[mid].blob < (uintptr_t)b)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < n && by[lo].blob == b && !names[by[lo].entry]; lo++)
            names[by[lo].entry] = g->values[v].name;
    }
    free(by);
    *out = names;
    return SEGRT_OK;
}

sg_status sg_cuda_weights_entry(const sg_cuda_weights *w, const char *const *names, int32_t i, const char **value,
                                const char **tag, void **host, size_t *size)
{
    const weight_entry *e = &w->e[i];
    *value = names[i];
    *tag = e->tag;
    *host = NULL;
    *size = e->bytes;
    if (!*value) /* derived data (folded on the host): rebuilt at load */
        return SEGRT_OK;
    void *h = sg_malloc(e->bytes ? e->bytes : 1);
    if (!h)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(w->device);
    cudaError_t ce = cudaMemcpy(h, e->dev, e->bytes, cudaMemcpyDeviceToHost);
    cudaSetDevice(prev);
    if (ce != cudaSuccess) {
        free(h);
        return cuda_error(ce, "cudaMemcpy(weights to host)", __FILE__, __LINE__);
    }
    *host = h;
    return SEGRT_OK;
}

sg_status sg_cuda_weights_seed(sg_cuda_weights *w, sg_blob *blob, const char *tag, const void *host, size_t size)
{
    void *dev;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(w->device);
    pthread_mutex_lock(&w->lock);
    sg_status s = insert(w, blob, tag, host, size, &dev);
    pthread_mutex_unlock(&w->lock);
    cudaSetDevice(prev);
    return s;
}

sg_status cuda_const_f32_tensor(sg_cuda_plan *p, int32_t v, const char *tag, const float *host, int64_t numel,
                                int32_t *out)
{
    const sg_value *val = &p->g->values[v];
    float *own = NULL;
    if (!host) {
        own = cuda_const_f32(p, v);
        if (!own)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a float32 copy of `%s`", val->name);
        host = own;
    }
    void *dev = NULL;
    sg_status s = cuda_const_upload(p, val->data, tag, host, sizeof(float) * (size_t)numel, &dev);
    free(own);
    SG_TRY(s);
    int64_t stride = 1;
    return cuda_tensor_const(p, dev, SEGRT_DTYPE_FLOAT32, 1, &numel, &stride, out);
}
