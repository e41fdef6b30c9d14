/* A slide level's rows made on the device (slide_gpu.h).
 *
 * A decoder thread of the reader's own reads the level's tile rows in
 * order (pread, one tile row a batch, so that nvJPEG keeps one batch
 * size) and decodes them on a stream of its own into a ring of KT tile
 * rows (three 8-bit planes of KT * tile_h rows of across * tile_w bytes:
 * level row y at y mod (KT * tile_h)), up to AHEAD tile rows past what
 * the caller's step needs. The caller's thread only resamples: a call
 * walks its grid rows in steps whose level rows span at most K tile rows,
 * waits for those tile rows to be decoded (the host for the thread to
 * have enqueued them, its stream for their decode events), resamples on
 * its stream, and records a read event on each slot it read. The thread
 * decodes into a slot only once the caller has moved past the slot's
 * tile row (its stream waiting for that read event). So nvJPEG's host
 * work (about 30 us a tile with the hardware decoder), the file reads and
 * the decoder's start-up leave the job's thread, which feeds the
 * networks.
 *
 * A call that jumps (back before the ring's rows, or past what is
 * decoded) restarts the thread at the new row. */
#include "pipeline/slide_gpu.h"

#include "core/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most grid rows one resampling launch takes (the kernel's grid). */
#define GPU_MAX_STEP_ROWS 65535
/* Tile rows decoded ahead of the caller's step. */
#define GPU_AHEAD 4

struct sg_slide_gpu {
    const sg_window_ops *ops;
    const sg_slide_tiles *tiles;
    sg_slide_tiles_info ti;
    int32_t device;
    int64_t H, W;
    /* Host copies of the rows' extents (for the tile rows a step needs). */
    int64_t *row_first;
    int32_t *row_count;
    /* Device: the axes' weights, and the ring. */
    void *d_axes;
    sg_window_axis rows, cols;
    sg_window_norm norm;
    uint8_t *ring;
    int64_t K, KT, ring_rows, pitch, plane;
    /* Per slot: decoded (on the thread's stream), read (on the caller's). */
    sg_backend_event **ev_dec, **ev_read;
    sg_backend_event *ev_done;
    /* The thread's: its stream, decoder, pinned buffers for a tile row's
     * streams (two: one fills while the other's batch may still decode)
     * and the batch's arrays. */
    sg_backend_stream *stream;
    sg_backend_jpeg *dec;
    uint8_t *host[2];
    sg_backend_event *ev_host[2];
    int32_t next;
    const uint8_t **data;
    size_t *bytes;
    uint8_t **planes;
    /* Shared under mu. The thread decodes tile row dec_hi next, while
     * dec_hi < lo + KT (and below the level's tile rows); restart asks it
     * to continue from restart_at instead (it answers by setting started
     * to the request's number). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_on, stop, restart;
    uint64_t restarts, started;
    int64_t restart_at, dec_hi, lo;
    int64_t decoded;
    sg_status failed;
    char why[512];
    bool used;
};

/* The thread's error, for the caller to raise. */
static void thread_fail(sg_slide_gpu *g, sg_status s)
{
    pthread_mutex_lock(&g->mu);
    if (g->failed == SEGRT_OK) {
        g->failed = s;
        snprintf(g->why, sizeof g->why, "%s", sg_last_error());
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Tile row ty into its slot of the ring, on the thread's stream. */
static sg_status decode_tile_row(sg_slide_gpu *g, int64_t ty)
{
    const sg_window_ops *ops = g->ops;
    int32_t k = g->next;
    g->next ^= 1;
    SG_TRY(ops->event_synchronize(g->ev_host[k])); /* its last batch has decoded */
    int64_t across = g->ti.across, th = g->ti.tile_h, tw = g->ti.tile_w, slot = ty % g->KT;
    uint8_t *base = g->ring + slot * th * g->pitch;
    for (int64_t tx = 0; tx < across; tx++) {
        uint8_t *dst = g->host[k] + (size_t)tx * g->ti.max_bytes;
        SG_TRY(sg_slide_tiles_read(g->tiles, ty, tx, dst, &g->bytes[tx]));
        g->data[tx] = dst;
        for (int c = 0; c < 3; c++)
            g->planes[3 * tx + c] = base + c * g->plane + tx * tw;
    }
    /* The slot's last reads (of tile row ty - KT) are done before it is
     * overwritten. */
    SG_TRY(ops->stream_wait(g->stream, g->ev_read[slot]));
    SG_TRY(ops->jpeg_decode(g->dec, g->stream, (int32_t)across, g->data, g->bytes, g->ti.ycbcr, g->planes,
                            (size_t)g->pitch));
    SG_TRY(ops->event_record(g->ev_host[k], g->stream));
    return ops->event_record(g->ev_dec[slot], g->stream);
}

static void *decoder_main(void *arg)
{
    sg_slide_gpu *g = arg;
    sg_backend_jpeg *dec = NULL;
    sg_status s = g->ops->device_set(g->device);
    if (s == SEGRT_OK)
        s = g->ops->jpeg_create(&dec);
    if (s != SEGRT_OK) {
        thread_fail(g, s);
        return NULL;
    }
    pthread_mutex_lock(&g->mu);
    g->dec = dec;
    for (;;) {
        if (g->restart) {
            g->restart = false;
            g->dec_hi = g->restart_at;
            g->started = g->restarts;
            pthread_cond_broadcast(&g->cv);
        }
        if (g->stop || g->failed != SEGRT_OK)
            break;
        int64_t ty = g->dec_hi;
        if (ty >= g->ti.down || ty >= g->lo + g->KT) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        pthread_mutex_unlock(&g->mu);
        s = decode_tile_row(g, ty);
        pthread_mutex_lock(&g->mu);
        if (s != SEGRT_OK) {
            if (g->failed == SEGRT_OK) {
                g->failed = s;
                snprintf(g->why, sizeof g->why, "%s", sg_last_error());
            }
            pthread_cond_broadcast(&g->cv);
            break;
        }
        g->decoded += g->ti.across;
        if (!g->restart) /* a restart asked meanwhile discards this row */
            g->dec_hi = ty + 1;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

void sg_slide_gpu_close(sg_slide_gpu *g)
{
    if (!g)
        return;
    const sg_window_ops *ops = g->ops;
    if (g->thread_on) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    /* Nothing may be freed under the device's feet (a job that failed
     * midway leaves work enqueued). */
    if (g->stream)
        ops->stream_synchronize(g->stream);
    if (g->used && g->ev_done)
        ops->event_synchronize(g->ev_done);
    sg_error_clear();
    for (int k = 0; k < 2; k++) {
        ops->event_destroy(g->ev_host[k]);
        ops->host_free(g->host[k]);
    }
    for (int64_t s = 0; g->ev_dec && s < g->KT; s++) {
        ops->event_destroy(g->ev_dec[s]);
        ops->event_destroy(g->ev_read[s]);
    }
    ops->event_destroy(g->ev_done);
    if (g->dec) /* the thread's, which has ended */
        ops->jpeg_destroy(g->dec);
    if (g->stream)
        ops->stream_destroy(g->stream);
    ops->device_free(g->ring);
    ops->device_free(g->d_axes);
    free(g->ev_dec);
    free(g->ev_read);
    free(g->row_first);
    free(g->row_count);
    free(g->data);
    free(g->bytes);
    free(g->planes);
    free(g);
}

/* An axis's arrays in one device buffer at base + *at (8-byte aligned
 * pieces), its view in *v. */
static sg_status put_axis(const sg_window_ops *ops, uint8_t *base, size_t *at, const sg_slide_axis *a,
                          sg_window_axis *v)
{
    size_t n = (size_t)a->n;
    size_t b_first = sizeof(int64_t) * n, b_count = sizeof(int32_t) * n, b_w = sizeof(float) * n * (size_t)a->span;
    SG_TRY(ops->copy(base + *at, a->first, b_first, SG_WINDOW_HOST_TO_DEVICE));
    v->first = (const int64_t *)(base + *at);
    *at += (b_first + 7) & ~(size_t)7;
    SG_TRY(ops->copy(base + *at, a->count, b_count, SG_WINDOW_HOST_TO_DEVICE));
    v->count = (const int32_t *)(base + *at);
    *at += (b_count + 7) & ~(size_t)7;
    SG_TRY(ops->copy(base + *at, a->w, b_w, SG_WINDOW_HOST_TO_DEVICE));
    v->w = (const float *)(base + *at);
    *at += (b_w + 7) & ~(size_t)7;
    v->span = a->span;
    return SEGRT_OK;
}

static size_t axis_bytes(const sg_slide_axis *a)
{
    size_t n = (size_t)a->n;
    return ((sizeof(int64_t) * n + 7) & ~(size_t)7) + ((sizeof(int32_t) * n + 7) & ~(size_t)7) +
           ((sizeof(float) * n * (size_t)a->span + 7) & ~(size_t)7);
}

static sg_status gpu_setup(sg_slide_gpu *g, const sg_slide_axis *rows, const sg_slide_axis *cols)
{
    const sg_window_ops *ops = g->ops;
    SG_TRY(ops->device_get(&g->device));
    g->H = rows->n;
    g->W = cols->n;
    if (!(g->row_first = malloc(sizeof(int64_t) * (size_t)g->H)) ||
        !(g->row_count = malloc(sizeof(int32_t) * (size_t)g->H)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a slide's %lld rows", (long long)g->H);
    memcpy(g->row_first, rows->first, sizeof(int64_t) * (size_t)g->H);
    memcpy(g->row_count, rows->count, sizeof(int32_t) * (size_t)g->H);
    size_t at = 0, need = axis_bytes(rows) + axis_bytes(cols);
    SG_TRY(ops->device_alloc(g->device, need, &g->d_axes));
    SG_TRY(put_axis(ops, g->d_axes, &at, rows, &g->rows));
    SG_TRY(put_axis(ops, g->d_axes, &at, cols, &g->cols));
    /* A grid row's level rows (span at most) may straddle a tile row's
     * edge; two more tile rows let a step take many grid rows, and the
     * thread decodes GPU_AHEAD more. */
    g->K = (rows->span + g->ti.tile_h - 1) / g->ti.tile_h + 2;
    g->KT = g->K + GPU_AHEAD;
    g->ring_rows = g->KT * g->ti.tile_h;
    g->pitch = g->ti.across * g->ti.tile_w;
    g->plane = g->ring_rows * g->pitch;
    SG_TRY(ops->device_alloc(g->device, (size_t)(3 * g->plane), (void **)&g->ring));
    size_t per_row = (size_t)g->ti.across * g->ti.max_bytes;
    for (int k = 0; k < 2; k++) {
        SG_TRY(ops->host_alloc(per_row, (void **)&g->host[k]));
        SG_TRY(ops->event_create(&g->ev_host[k]));
    }
    if (!(g->ev_dec = calloc((size_t)g->KT, sizeof *g->ev_dec)) ||
        !(g->ev_read = calloc((size_t)g->KT, sizeof *g->ev_read)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a slide's %lld ring slots", (long long)g->KT);
    for (int64_t s = 0; s < g->KT; s++) {
        SG_TRY(ops->event_create(&g->ev_dec[s]));
        SG_TRY(ops->event_create(&g->ev_read[s]));
    }
    SG_TRY(ops->event_create(&g->ev_done));
    SG_TRY(ops->stream_create(&g->stream));
    size_t n = (size_t)g->ti.across;
    if (!(g->data = malloc(sizeof *g->data * n)) || !(g->bytes = malloc(sizeof *g->bytes * n)) ||
        !(g->planes = malloc(sizeof *g->planes * 3 * n)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a tile row's %zu tiles", n);
    if (pthread_mutex_init(&g->mu, NULL) != 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "a slide's decoder: no mutex");
    if (pthread_cond_init(&g->cv, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        return sg_error(SEGRT_ERROR_INTERNAL, "a slide's decoder: no condition variable");
    }
    if (pthread_create(&g->thread, NULL, decoder_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        return sg_error(SEGRT_ERROR_INTERNAL, "a slide's decoder thread does not start");
    }
    g->thread_on = true;
    return SEGRT_OK;
}

sg_status sg_slide_gpu_open(const sg_window_ops *ops, const sg_slide_tiles *tiles, const sg_slide_axis *rows,
                            const sg_slide_axis *cols, const sg_window_norm *norm, sg_slide_gpu **out)
{
    *out = NULL;
    if (!ops->jpeg_create || !ops->jpeg_decode || !ops->area_u8)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "the %s backend decodes no JPEG", ops->name);
    sg_slide_gpu *g = sg_calloc(1, sizeof *g);
    if (!g)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a slide's device reader");
    g->ops = ops;
    g->tiles = tiles;
    g->ti = *sg_slide_tiles_get_info(tiles);
    g->norm = *norm;
    sg_status s = gpu_setup(g, rows, cols);
    if (s != SEGRT_OK) {
        sg_slide_gpu_close(g);
        return s;
    }
    *out = g;
    return SEGRT_OK;
}

int64_t sg_slide_gpu_tiles_decoded(const sg_slide_gpu *g)
{
    if (!g)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&g->mu);
    int64_t n = g->decoded;
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
    return n;
}

const char *sg_slide_gpu_engine(const sg_slide_gpu *g)
{
    if (!g || !g->ops->jpeg_engine)
        return "";
    pthread_mutex_lock((pthread_mutex_t *)&g->mu);
    const char *e = g->dec ? g->ops->jpeg_engine(g->dec) : "";
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
    return e;
}

/* Waits until tile rows [lo, hi) are enqueued for decoding, with lo the
 * lowest the caller still reads; restarts the thread at lo where the ring
 * does not hold it and it is not next. Under g->mu. */
static sg_status await_rows(sg_slide_gpu *g, int64_t lo, int64_t hi)
{
    if (lo < g->lo || lo > g->dec_hi) {
        g->restart = true;
        g->restart_at = lo;
        uint64_t ask = ++g->restarts;
        g->lo = lo;
        pthread_cond_broadcast(&g->cv);
        while (g->started != ask && g->failed == SEGRT_OK)
            pthread_cond_wait(&g->cv, &g->mu);
    } else if (lo > g->lo) {
        g->lo = lo; /* slots below it may take new rows */
        pthread_cond_broadcast(&g->cv);
    }
    while (g->dec_hi < hi && g->failed == SEGRT_OK)
        pthread_cond_wait(&g->cv, &g->mu);
    return g->failed == SEGRT_OK ? SEGRT_OK : sg_error(g->failed, "%s", g->why);
}

sg_status sg_slide_gpu_rows(sg_slide_gpu *g, int64_t r0, int64_t r1, float *dst, int64_t channel_stride,
                            sg_backend_stream *stream)
{
    if (r0 < 0 || r1 > g->H || r1 < r0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "slide rows [%lld, %lld) of %lld", (long long)r0, (long long)r1,
                        (long long)g->H);
    const sg_window_ops *ops = g->ops;
    g->used = true;
    int64_t th = g->ti.tile_h;
    for (int64_t i = r0; i < r1;) {
        int64_t ty_lo = g->row_first[i] / th, e = i, ty_end = ty_lo;
        while (e < r1 && e - i < GPU_MAX_STEP_ROWS) {
            int64_t end = (g->row_first[e] + g->row_count[e] + th - 1) / th;
            if (end - ty_lo > g->K)
                break;
            ty_end = end > ty_end ? end : ty_end;
            e++;
        }
        if (e == i) /* the ring is sized for any one row: a broken axis */
            return sg_error(SEGRT_ERROR_INTERNAL, "slide row %lld spans more than %lld tile rows", (long long)i,
                            (long long)g->K);
        ty_end = ty_end < g->ti.down ? ty_end : g->ti.down;
        pthread_mutex_lock(&g->mu);
        sg_status s = await_rows(g, ty_lo, ty_end);
        pthread_mutex_unlock(&g->mu);
        SG_TRY(s);
        for (int64_t t = ty_lo; t < ty_end; t++)
            SG_TRY(ops->stream_wait(stream, g->ev_dec[t % g->KT]));
        SG_TRY(ops->area_u8(stream, g->ring, g->pitch, g->plane, g->ring_rows, 3, &g->rows, i, e - i, &g->cols, g->W,
                            &g->norm, dst + (i - r0) * g->W, g->W, channel_stride));
        /* Recorded before the thread may reuse these slots: it does so
         * only once a later call's lo has passed their rows. */
        for (int64_t t = ty_lo; t < ty_end; t++)
            SG_TRY(ops->event_record(g->ev_read[t % g->KT], stream));
        i = e;
    }
    return ops->event_record(g->ev_done, stream);
}
