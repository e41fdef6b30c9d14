/* A slide level's rows made on the device (slide_gpu.h).
 *
 * The ring holds K tile rows of the level, decoded whole (edge tiles
 * too), as three 8-bit planes of K * tile_h rows of across * tile_w
 * bytes: level row y at y mod (K * tile_h). A call walks its grid rows in
 * steps whose level rows span at most K tile rows, decodes the tile rows
 * the step lacks (one batch a tile row, so that the decoder keeps one
 * batch size) and resamples the step's rows; everything is on the one
 * stream, so a slot is decoded into only after the kernels that read its
 * previous tile row. The compressed tiles are read into one of two pinned
 * buffers while the other's batch may still be decoding. */
#include "pipeline/slide_gpu.h"

#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

/* The most grid rows one resampling launch takes (the kernel's grid). */
#define GPU_MAX_STEP_ROWS 65535

struct sg_slide_gpu {
    const sg_window_ops *ops;
    const sg_slide_tiles *tiles;
    sg_slide_tiles_info ti;
    sg_backend_jpeg *dec;
    int64_t H, W;
    /* Host copies of the rows' extents (for the tile rows a step needs). */
    int64_t *row_first;
    int32_t *row_count;
    /* Device: the axes' weights, and the ring. */
    void *d_axes;
    sg_window_axis rows, cols;
    sg_window_norm norm;
    uint8_t *ring;
    int64_t K, ring_rows, pitch, plane;
    int64_t t_lo, t_hi; /* tile rows [t_lo, t_hi) are in the ring (or on their way) */
    /* Pinned buffers for a tile row's streams, and the batch's arrays. */
    uint8_t *host[2];
    sg_backend_event *ev[2], *ev_done;
    int32_t next;
    const uint8_t **data;
    size_t *bytes;
    uint8_t **planes;
    int64_t decoded;
    bool used;
};

void sg_slide_gpu_close(sg_slide_gpu *g)
{
    if (!g)
        return;
    const sg_window_ops *ops = g->ops;
    if (g->used) {
        /* Nothing may be freed under the device's feet (a job that failed
         * midway leaves work enqueued). */
        for (int k = 0; k < 2; k++)
            if (g->ev[k])
                ops->event_synchronize(g->ev[k]);
        if (g->ev_done)
            ops->event_synchronize(g->ev_done);
        sg_error_clear();
    }
    for (int k = 0; k < 2; k++) {
        ops->event_destroy(g->ev[k]);
        ops->host_free(g->host[k]);
    }
    ops->event_destroy(g->ev_done);
    ops->jpeg_destroy(g->dec);
    ops->device_free(g->ring);
    ops->device_free(g->d_axes);
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
    int32_t device;
    SG_TRY(ops->device_get(&device));
    SG_TRY(ops->jpeg_create(&g->dec));
    g->H = rows->n;
    g->W = cols->n;
    if (!(g->row_first = malloc(sizeof(int64_t) * (size_t)g->H)) ||
        !(g->row_count = malloc(sizeof(int32_t) * (size_t)g->H)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a slide's %lld rows", (long long)g->H);
    memcpy(g->row_first, rows->first, sizeof(int64_t) * (size_t)g->H);
    memcpy(g->row_count, rows->count, sizeof(int32_t) * (size_t)g->H);
    size_t at = 0, need = axis_bytes(rows) + axis_bytes(cols);
    SG_TRY(ops->device_alloc(device, need, &g->d_axes));
    SG_TRY(put_axis(ops, g->d_axes, &at, rows, &g->rows));
    SG_TRY(put_axis(ops, g->d_axes, &at, cols, &g->cols));
    /* A grid row's level rows (span at most) may straddle a tile row's
     * edge; two more tile rows let a step take many grid rows. */
    g->K = (rows->span + g->ti.tile_h - 1) / g->ti.tile_h + 2;
    g->ring_rows = g->K * g->ti.tile_h;
    g->pitch = g->ti.across * g->ti.tile_w;
    g->plane = g->ring_rows * g->pitch;
    SG_TRY(ops->device_alloc(device, (size_t)(3 * g->plane), (void **)&g->ring));
    size_t per_row = (size_t)g->ti.across * g->ti.max_bytes;
    for (int k = 0; k < 2; k++) {
        SG_TRY(ops->host_alloc(per_row, (void **)&g->host[k]));
        SG_TRY(ops->event_create(&g->ev[k]));
    }
    SG_TRY(ops->event_create(&g->ev_done));
    size_t n = (size_t)g->ti.across;
    if (!(g->data = malloc(sizeof *g->data * n)) || !(g->bytes = malloc(sizeof *g->bytes * n)) ||
        !(g->planes = malloc(sizeof *g->planes * 3 * n)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a tile row's %zu tiles", n);
    g->t_lo = g->t_hi = 0;
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
    return g ? g->decoded : 0;
}

const char *sg_slide_gpu_engine(const sg_slide_gpu *g)
{
    return g && g->ops->jpeg_engine ? g->ops->jpeg_engine(g->dec) : "";
}

/* Tile row ty into its slot of the ring, on stream. */
static sg_status decode_tile_row(sg_slide_gpu *g, int64_t ty, sg_backend_stream *stream)
{
    const sg_window_ops *ops = g->ops;
    int32_t k = g->next;
    g->next ^= 1;
    SG_TRY(ops->event_synchronize(g->ev[k])); /* its last batch has decoded */
    int64_t across = g->ti.across, th = g->ti.tile_h, tw = g->ti.tile_w;
    uint8_t *slot = g->ring + (ty % g->K) * th * g->pitch;
    for (int64_t tx = 0; tx < across; tx++) {
        uint8_t *dst = g->host[k] + (size_t)tx * g->ti.max_bytes;
        SG_TRY(sg_slide_tiles_read(g->tiles, ty, tx, dst, &g->bytes[tx]));
        g->data[tx] = dst;
        for (int c = 0; c < 3; c++)
            g->planes[3 * tx + c] = slot + c * g->plane + tx * tw;
    }
    SG_TRY(
        ops->jpeg_decode(g->dec, stream, (int32_t)across, g->data, g->bytes, g->ti.ycbcr, g->planes, (size_t)g->pitch));
    SG_TRY(ops->event_record(g->ev[k], stream));
    g->decoded += across;
    return SEGRT_OK;
}

sg_status sg_slide_gpu_rows(sg_slide_gpu *g, int64_t r0, int64_t r1, float *dst, int64_t channel_stride,
                            sg_backend_stream *stream)
{
    if (r0 < 0 || r1 > g->H || r1 < r0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "slide rows [%lld, %lld) of %lld", (long long)r0, (long long)r1,
                        (long long)g->H);
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
        if (ty_lo < g->t_lo || ty_lo > g->t_hi)
            g->t_lo = g->t_hi = ty_lo; /* a jump: the ring starts afresh */
        g->t_lo = ty_lo;
        for (; g->t_hi < ty_end; g->t_hi++)
            SG_TRY(decode_tile_row(g, g->t_hi, stream));
        SG_TRY(g->ops->area_u8(stream, g->ring, g->pitch, g->plane, g->ring_rows, 3, &g->rows, i, e - i, &g->cols, g->W,
                               &g->norm, dst + (i - r0) * g->W, g->W, channel_stride));
        i = e;
    }
    return g->ops->event_record(g->ev_done, stream);
}
