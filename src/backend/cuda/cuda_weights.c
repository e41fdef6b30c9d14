/* The weight store: an engine's constants on the device, each converted
 * once to the dtype and layout a step wants and shared by every plan of
 * the engine (the opt-shape plan, the max-shape plan, specializations).
 *
 * Entries are keyed by the constant's blob and a tag naming the
 * conversion. The store holds a reference on each blob, so an address
 * cannot be reused by another constant while the entry exists. Plans are
 * built from several threads (contexts specialize lazily), hence the lock. */
#include "backend/cuda/cuda_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct weight_entry {
    sg_blob *blob;
    char *tag;
    void *dev;
    size_t bytes;
} weight_entry;

struct sg_cuda_weights {
    int32_t device;
    pthread_mutex_t lock;
    weight_entry *e;
    int32_t n, cap;
    size_t bytes;
};

sg_status sg_cuda_weights_new(int32_t device, sg_cuda_weights **out)
{
    sg_cuda_weights *w = sg_calloc(1, sizeof *w);
    if (!w)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    w->device = device;
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
    }
    cudaSetDevice(prev);
    free(w->e);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

size_t sg_cuda_weights_bytes(const sg_cuda_weights *w) { return w ? w->bytes : 0; }

static weight_entry *find(sg_cuda_weights *w, const void *blob, const char *tag)
{
    for (int32_t i = 0; i < w->n; i++)
        if (w->e[i].blob == blob && strcmp(w->e[i].tag, tag) == 0)
            return &w->e[i];
    return NULL;
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
    if (!t)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    void *d = NULL;
    cudaError_t ce = cudaMalloc(&d, bytes ? bytes : 1);
    if (ce != cudaSuccess) {
        free(t);
        (void)cudaGetLastError();
        return sg_error(ce == cudaErrorMemoryAllocation ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_ERROR_DEVICE,
                        "cannot allocate %zu bytes of weights on CUDA device %d: %s", bytes, w->device,
                        cudaGetErrorString(ce));
    }
    /* Synchronous: the host buffer is freed by the caller right after. */
    if (bytes && (ce = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        cudaFree(d);
        free(t);
        return cuda_error(ce, "cudaMemcpy(weights)", __FILE__, __LINE__);
    }
    w->e[w->n++] = (weight_entry){sg_blob_ref(blob), t, d, bytes};
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

sg_status sg_cuda_weights_entry(const sg_cuda_weights *w, const sg_graph *g, int32_t i, const char **value,
                                const char **tag, void **host, size_t *size)
{
    const weight_entry *e = &w->e[i];
    *value = NULL;
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].data == e->blob) {
            *value = g->values[v].name;
            break;
        }
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

sg_status sg_cuda_weights_seed(sg_cuda_weights *w, const sg_graph *g, const char *value, const char *tag,
                               const void *host, size_t size)
{
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].data && strcmp(g->values[v].name, value) == 0) {
            void *dev;
            int prev = 0;
            cudaGetDevice(&prev);
            cudaSetDevice(w->device);
            pthread_mutex_lock(&w->lock);
            sg_status s = insert(w, g->values[v].data, tag, host, size, &dev);
            pthread_mutex_unlock(&w->lock);
            cudaSetDevice(prev);
            return s;
        }
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "the plan's weights name `%s`, which its graph does not hold",
                    value);
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
