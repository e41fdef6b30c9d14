/* A host image's rows up to the device (sw_job.h): a ring of rows that
 * holds what the batch being gathered reads and what the next batches
 * will, uploaded through the pinned buffers on the copy stream ahead of
 * the windows, so that uploads overlap the networks. */
#include "pipeline/sw_job.h"

#include <stdint.h>

/* Rows [a, b) of image n read through the image's reader (a region
 * source: rows come from the file only now), every channel at once, into
 * a pinned buffer and up into the ring, on the copy stream. */
static sg_status upload_rows_read(sw_job *r, sw_img_rows *sl, int64_t n, int64_t a, int64_t b)
{
    const sg_window_ops *ops = r->ops;
    const sw_geometry *q = &r->geo;
    sw_pinned *p = &r->pin;
    int64_t ring = r->img.img_ring;
    int64_t chunk = (int64_t)(p->bytes / sizeof(float)) / (q->C * q->img_plane); /* >= 1: sw_take_pinned */
    for (int64_t row = a; row < b;) {
        int64_t at = row % ring;
        int64_t len = b - row;
        len = len < chunk ? len : chunk;
        len = len < ring - at ? len : ring - at; /* no wrap within one copy */
        int32_t k = p->next;
        p->next ^= 1;
        SG_TRY(ops->event_synchronize(p->ev[k])); /* its last copy has left */
        int64_t numel = len * q->img_plane;
        SG_TRY(sg_sw_image_read(r->img.h_image, n, row, row + len, p->buf[k], numel));
        for (int64_t c = 0; c < q->C; c++)
            SG_TRY(ops->copy_async(sl->ring + (c * ring + at) * q->img_plane, (const float *)p->buf[k] + c * numel,
                                   (size_t)numel * sizeof(float), SG_WINDOW_HOST_TO_DEVICE, r->st.up));
        SG_TRY(ops->event_record(p->ev[k], r->st.up));
        row += len;
    }
    return SEGRT_OK;
}

/* Rows [a, b) of image n made on the device by the reader (a slide's
 * tiles decoded there), straight into the ring on the copy stream: *done
 * the rows it made, short of b where the reader said UNSUPPORTED. */
static sg_status upload_rows_device(sw_job *r, sw_img_rows *sl, int64_t n, int64_t a, int64_t b, int64_t *done)
{
    const sw_geometry *q = &r->geo;
    int64_t ring = r->img.img_ring;
    *done = a;
    for (int64_t row = a; row < b;) {
        int64_t at = row % ring;
        int64_t len = b - row < ring - at ? b - row : ring - at; /* no wrap within one read */
        sg_status s = r->img.h_image->read_device(r->img.h_image, r->ops, n, row, row + len,
                                                  sl->ring + at * q->img_plane, ring * q->img_plane, r->st.up);
        if (s == SEGRT_ERROR_UNSUPPORTED) {
            sg_error_clear();
            r->img.host_reads = true;
            return SEGRT_OK;
        }
        SG_TRY(s);
        row += len;
        *done = row;
    }
    return SEGRT_OK;
}

/* Host rows [a, b) of image n, every channel, into the ring through the
 * pinned buffers, on the copy stream, the host's side by the copy team
 * (an OpenMP team was slower than one thread here: its idle threads spin
 * beside the two that had a piece of an 8 MiB chunk). An image in host
 * memory is copied from in place; any other goes through its reader. */
static sg_status upload_rows(sw_job *r, sw_img_rows *sl, int64_t n, int64_t a, int64_t b)
{
    if (r->img.h_image->read_device && !r->img.host_reads)
        SG_TRY(upload_rows_device(r, sl, n, a, b, &a));
    if (a >= b)
        return SEGRT_OK;
    if (!r->img.h_image->data)
        return upload_rows_read(r, sl, n, a, b);
    const sg_window_ops *ops = r->ops;
    const sw_geometry *q = &r->geo;
    sw_pinned *p = &r->pin;
    int64_t ring = r->img.img_ring;
    int64_t chunk = (int64_t)(p->bytes / sizeof(float)) / q->img_plane;
    for (int64_t c = 0; c < q->C; c++)
        for (int64_t row = a; row < b;) {
            int64_t at = row % ring;
            int64_t len = b - row;
            len = len < chunk ? len : chunk;
            len = len < ring - at ? len : ring - at; /* no wrap within one copy */
            int32_t k = p->next;
            p->next ^= 1;
            SG_TRY(ops->event_synchronize(p->ev[k])); /* its last copy has left */
            size_t bytes = (size_t)(len * q->img_plane) * sizeof(float);
            sg_copy_team_memcpy(p->team, p->buf[k],
                                r->img.h_image->data + (n * q->C + c) * q->image_numel + row * q->img_plane, bytes);
            SG_TRY(ops->copy_async(sl->ring + (c * ring + at) * q->img_plane, p->buf[k], bytes,
                                   SG_WINDOW_HOST_TO_DEVICE, r->st.up));
            SG_TRY(ops->event_record(p->ev[k], r->st.up));
            row += len;
        }
    return SEGRT_OK;
}

/* Image rows the window starting at padded row s0 reads: [*a, *b). */
static void window_rows(const sw_job *r, int64_t s0, int64_t *a, int64_t *b)
{
    const sg_sw_grid *g = &r->geo.g;
    if (r->o->pad != SG_SW_PAD_CONSTANT && g->padded[0] > g->size[0]) {
        *a = 0; /* reflected or replicated rows can come from anywhere */
        *b = g->size[0];
        return;
    }
    *a = s0 - g->pad_begin[0];
    *b = *a + g->roi[0];
    *a = *a < 0 ? 0 : *a;
    *b = *b > g->size[0] ? g->size[0] : *b;
}

/* Puts image n's rows [sl->hi, to) on their way into the ring. The rows
 * they replace are below the batch being gathered (no later window reads
 * them), and the copy stream waits for the gathers enqueued so far before
 * overwriting them. The next gather waits for the copy. */
static sg_status upload_to(sw_job *r, int64_t n, int64_t to)
{
    sw_img_rows *sl = &r->img.rows;
    SG_TRY(r->ops->stream_wait(r->st.up, r->st.ev_gathered));
    SG_TRY(upload_rows(r, sl, n, sl->hi, to));
    sl->hi = to;
    if (sl->hi - r->img.img_ring > sl->lo)
        sl->lo = sl->hi - r->img.img_ring;
    SG_TRY(r->ops->event_record(r->st.ev_uploaded, r->st.up));
    r->img.have_upload = true;
    return SEGRT_OK;
}

/* Makes image n's rows [a, b) resident in the ring: what a batch about to
 * be gathered needs and sw_upload_ahead has not sent yet. Another image,
 * or a later pass going back before the ring's rows (or jumping past
 * them), starts the ring afresh at a. */
static sg_status ensure_rows(sw_job *r, int64_t n, int64_t a, int64_t b)
{
    sw_img_rows *sl = &r->img.rows;
    if (sl->image != n || a < sl->lo || a > sl->hi) {
        sl->image = n;
        sl->lo = sl->hi = a;
    }
    r->img.release_row = a;
    return b <= sl->hi ? SEGRT_OK : upload_to(r, n, b);
}

/* After a batch's gathers: one pinned buffer's worth of the rows the next
 * windows will read (per channel), as far as the ring has slots whose rows
 * no later batch reads, so that uploads overlap the networks instead of
 * stalling the batch that first needs them. */
sg_status sw_upload_ahead(sw_job *r)
{
    sw_img_rows *sl = &r->img.rows;
    int64_t size0 = r->geo.g.size[0];
    if (r->img.d_image || sl->image < 0 || sl->hi >= size0)
        return SEGRT_OK;
    /* Rows made on the device need no pinned buffer: as many as the ring
     * frees, in one go (a slide's tiles decode in larger batches). */
    int64_t chunk = r->img.h_image->read_device && !r->img.host_reads
                        ? r->img.img_ring
                        : (int64_t)(r->pin.bytes / sizeof(float)) / r->geo.img_plane;
    int64_t to = sl->hi + (chunk > 0 ? chunk : 1);
    if (to > r->img.release_row + r->img.img_ring)
        to = r->img.release_row + r->img.img_ring;
    if (to > size0)
        to = size0;
    return to > sl->hi ? upload_to(r, sl->image, to) : SEGRT_OK;
}

/* The rows every window of a batch (of one image) reads, made resident
 * before any of them is gathered. */
sg_status sw_ensure_batch_rows(sw_job *r, const int64_t *win, int64_t got)
{
    int64_t nw = r->geo.g.n_windows, lo = INT64_MAX, hi = 0, start[SG_SW_MAX_DIMS];
    for (int64_t b = 0; b < got; b++) {
        int64_t a, e;
        sg_sw_window_start(&r->geo.g, win[b] % nw, start);
        window_rows(r, start[0], &a, &e);
        lo = a < lo ? a : lo;
        hi = e > hi ? e : hi;
    }
    return ensure_rows(r, win[0] / nw, lo, hi);
}

/* The image rows of image n as the gather kernel addresses them. */
sg_window_rows sw_image_rows(const sw_job *r, int64_t n)
{
    sg_window_rows v = {0};
    if (r->img.d_image) {
        v.data = (void *)(r->img.d_image + n * r->geo.C * r->geo.image_numel);
        v.channel_stride = r->geo.image_numel;
        v.row0 = 0;
        v.ring = 0;
    } else {
        v.data = r->img.rows.ring;
        v.channel_stride = r->img.img_ring * r->geo.img_plane;
        v.row0 = 0;
        v.ring = r->img.img_ring;
    }
    return v;
}
