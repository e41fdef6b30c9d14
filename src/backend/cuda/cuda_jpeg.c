/* JPEG decoding on the GPU for the window operations (backend_window.h's
 * jpeg_*): nvJPEG's batched decoder, on the chip's JPEG engines where it
 * has them (A100, H100, H200: nvJPEG's hardware back end), else on its
 * CUDA back end.
 *
 * nvJPEG is loaded when first asked for (dlopen), not linked: it is part
 * of the CUDA toolkit's runtime but not of every installation (nor of the
 * toolkit segrt is built with on machines without a GPU), and a missing
 * one only means slides are decoded on the CPU through OpenSlide. So the
 * few declarations used are here, as nvJPEG's documentation states them. */
#include "backend/backend_window.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* nvJPEG's API (nvjpeg.h), the part used. */
typedef int nvj_status;    /* nvjpegStatus_t: 0 is success */
typedef void *nvj_handle;  /* nvjpegHandle_t */
typedef void *nvj_state;   /* nvjpegJpegState_t */
typedef struct nvj_image { /* nvjpegImage_t */
    unsigned char *channel[4];
    size_t pitch[4];
} nvj_image;
enum {
    NVJ_BACKEND_DEFAULT = 0,
    NVJ_BACKEND_HARDWARE = 3,
    NVJ_OUTPUT_UNCHANGED = 0, /* the components as coded */
    NVJ_OUTPUT_RGB = 3        /* YCbCr converted, planar */
};

static struct {
    pthread_once_t once;
    bool ok;
    char why[256];
    nvj_status (*create_ex)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags, nvj_handle *out);
    nvj_status (*destroy)(nvj_handle h);
    nvj_status (*state_create)(nvj_handle h, nvj_state *out);
    nvj_status (*state_destroy)(nvj_state s);
    nvj_status (*batched_init)(nvj_handle h, nvj_state s, int batch, int cpu_threads, int format);
    nvj_status (*batched)(nvj_handle h, nvj_state s, const unsigned char *const *data, const size_t *lengths,
                          nvj_image *out, cudaStream_t stream);
} nvj = {.once = PTHREAD_ONCE_INIT};

static void nvj_load(void)
{
    static const char *names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(nvj.why, sizeof nvj.why, "nvJPEG (libnvjpeg.so) is not installed");
        return;
    }
    /* dlsym's object pointers as function pointers: POSIX guarantees the
     * conversion, C11 does not spell it, hence the memcpy. */
    struct {
        const char *name;
        void *slot;
    } syms[] = {{"nvjpegCreateEx", &nvj.create_ex},
                {"nvjpegDestroy", &nvj.destroy},
                {"nvjpegJpegStateCreate", &nvj.state_create},
                {"nvjpegJpegStateDestroy", &nvj.state_destroy},
                {"nvjpegDecodeBatchedInitialize", &nvj.batched_init},
                {"nvjpegDecodeBatched", &nvj.batched}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(lib, syms[i].name);
        if (!f) {
            snprintf(nvj.why, sizeof nvj.why, "nvJPEG lacks %s", syms[i].name);
            return; /* the library stays loaded: harmless, and dlclose here would race a second loader */
        }
        memcpy(syms[i].slot, &f, sizeof f);
    }
    nvj.ok = true;
}

/* One nvJPEG back end: a handle, its state, the batch it was set up for. */
typedef struct nvj_engine {
    nvj_handle h;
    nvj_state s;
    int batch, format;
    bool failed; /* creation or a decode failed: not tried again */
} nvj_engine;

struct sg_backend_jpeg {
    nvj_engine hw, any; /* the hardware back end, and the default one where it fails */
    nvj_image *images;
    int32_t cap;
    char engine[160]; /* which took the last batch (jpeg_engine) */
};

static void engine_free(nvj_engine *e)
{
    if (e->s)
        nvj.state_destroy(e->s);
    if (e->h)
        nvj.destroy(e->h);
    memset(e, 0, sizeof *e);
}

static bool engine_make(nvj_engine *e, int backend)
{
    if (e->h)
        return true;
    if (e->failed)
        return false;
    if (nvj.create_ex(backend, NULL, NULL, 0, &e->h) != 0 || nvj.state_create(e->h, &e->s) != 0) {
        engine_free(e);
        e->failed = true;
        return false;
    }
    return true;
}

/* A batch through engine e; its status (0 success). */
static nvj_status engine_decode(nvj_engine *e, cudaStream_t stream, int32_t count, const uint8_t *const *data,
                                const size_t *bytes, int format, nvj_image *images)
{
    nvj_status st = 0;
    if (e->batch != count || e->format != format) {
        st = nvj.batched_init(e->h, e->s, count, 1, format);
        e->batch = st == 0 ? count : 0;
        e->format = format;
    }
    if (st == 0)
        st = nvj.batched(e->h, e->s, (const unsigned char *const *)data, bytes, images, stream);
    if (st != 0)
        e->batch = 0; /* nvJPEG: after a failed batch, initialise again */
    return st;
}

sg_status sg_cuda_jpeg_create(sg_backend_jpeg **out)
{
    *out = NULL;
    pthread_once(&nvj.once, nvj_load);
    if (!nvj.ok)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s", nvj.why);
    sg_backend_jpeg *d = calloc(1, sizeof *d);
    if (!d)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory for a JPEG decoder");
    if (!engine_make(&d->hw, NVJ_BACKEND_HARDWARE) && !engine_make(&d->any, NVJ_BACKEND_DEFAULT)) {
        free(d);
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "nvJPEG does not start on this device");
    }
    snprintf(d->engine, sizeof d->engine, "%s", d->hw.h ? "nvJPEG's hardware decoder" :
             "nvJPEG on CUDA cores (its hardware decoder does not start on this device)");
    *out = d;
    return SEGRT_OK;
}

void sg_cuda_jpeg_destroy(sg_backend_jpeg *d)
{
    if (!d)
        return;
    engine_free(&d->hw);
    engine_free(&d->any);
    free(d->images);
    free(d);
}

sg_status sg_cuda_jpeg_decode(sg_backend_jpeg *d, sg_backend_stream *stream, int32_t count, const uint8_t *const *data,
                              const size_t *bytes, bool ycbcr, uint8_t *const *planes, size_t pitch)
{
    if (count < 1)
        return SEGRT_OK;
    if (count > d->cap) {
        nvj_image *im = realloc(d->images, sizeof *im * (size_t)count);
        if (!im)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory for %d JPEG images", (int)count);
        d->images = im;
        d->cap = count;
    }
    for (int32_t i = 0; i < count; i++) {
        memset(&d->images[i], 0, sizeof d->images[i]);
        for (int c = 0; c < 3; c++) {
            d->images[i].channel[c] = planes[3 * i + c];
            d->images[i].pitch[c] = pitch;
        }
    }
    int format = ycbcr ? NVJ_OUTPUT_RGB : NVJ_OUTPUT_UNCHANGED;
    cudaStream_t s = (cudaStream_t)stream;
    /* The hardware takes baseline streams only; a batch it refuses goes to
     * the default back end, and so does every later one. */
    if (d->hw.h && !d->hw.failed) {
        nvj_status hs = engine_decode(&d->hw, s, count, data, bytes, format, d->images);
        if (hs == 0)
            return SEGRT_OK;
        d->hw.failed = true;
        snprintf(d->engine, sizeof d->engine,
                 "nvJPEG on CUDA cores (its hardware decoder refused a batch of %d tiles: status %d)", (int)count, hs);
    }
    if (!engine_make(&d->any, NVJ_BACKEND_DEFAULT))
        return sg_error(SEGRT_ERROR_DEVICE, "nvJPEG: the default back end does not start");
    nvj_status st = engine_decode(&d->any, s, count, data, bytes, format, d->images);
    if (st != 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "nvJPEG: a batch of %d JPEG tiles does not decode (status %d)",
                        (int)count, st);
    return SEGRT_OK;
}

const char *sg_cuda_jpeg_engine(const sg_backend_jpeg *d) { return d ? d->engine : ""; }
