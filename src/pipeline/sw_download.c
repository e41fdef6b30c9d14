/* A host result made whole on the device goes down as its rows are
 * finished (sw_job.h), on the download stream through the pinned
 * buffers, while later windows run: the host would only wait for the GPU
 * otherwise. A row sink's rows go the same way, out of their ring and on
 * to the sink. */
#include "pipeline/sw_job.h"

#include <stdint.h>
#include <sys/mman.h>

/* While the GPU has not reached ev, the host makes the result's pages
 * resident ahead of the downloads, 2 MiB at a time, keeping what they
 * hold (MADV_POPULATE_WRITE): their first-touch faults (zeroing huge
 * pages) otherwise fall on the copies out of the pinned buffers, and the
 * copies of the last rows come after the GPU has finished. A kernel
 * without the advice refuses it, and the pages fault as before. */
void sw_populate_while_busy(sw_job *r, sg_backend_event *ev)
{
#ifdef MADV_POPULATE_WRITE
    const size_t step = (size_t)2 << 20;
    sw_result *res = &r->out;
    if (!res->h_result || (uintptr_t)res->h_result % step) /* host_huge_alloc aligns large results only */
        return;
    while (res->h_populated < res->h_bytes && r->ops->event_query(ev) == 0) {
        size_t len = res->h_bytes - res->h_populated < step ? res->h_bytes - res->h_populated : step;
        if (madvise((uint8_t *)res->h_result + res->h_populated, len, MADV_POPULATE_WRITE) != 0) {
            res->h_populated = res->h_bytes;
            break;
        }
        res->h_populated += len;
    }
#else
    (void)r;
    (void)ev;
#endif
}

/* Bytes [at, at + len) of the device result into the host result, on
 * the download stream through the pinned buffers (the two alternate, so
 * one piece's DMA overlaps the host's copy of the one before; the host's
 * copy also takes the result's first-touch page faults). The bytes must
 * be final: the stream waits for nothing. */
static sg_status download_bytes(sw_job *r, size_t at, size_t len)
{
    const sg_window_ops *ops = r->ops;
    sw_pinned *p = &r->pin;
    size_t piece = p->bytes, n = (len + piece - 1) / piece;
    int32_t k0 = p->next;
    for (size_t i = 0; i <= n; i++) {
        int32_t k = k0 ^ (int32_t)(i & 1);
        if (i < n) {
            size_t off = i * piece, l = len - off < piece ? len - off : piece;
            SG_TRY(ops->event_synchronize(p->ev[k])); /* an upload's last copy out of it has left */
            SG_TRY(ops->copy_async(p->buf[k], (const uint8_t *)r->out.d_result + at + off, l, SG_WINDOW_DEVICE_TO_HOST,
                                   r->st.down));
            SG_TRY(ops->event_record(p->ev[k], r->st.down));
        }
        if (i > 0) {
            size_t off = (i - 1) * piece, l = len - off < piece ? len - off : piece;
            SG_TRY(ops->event_synchronize(p->ev[k ^ 1]));
            sg_copy_team_memcpy(p->team, (uint8_t *)r->out.h_result + at + off, p->buf[k ^ 1], l);
        }
    }
    p->next = k0 ^ (int32_t)(n & 1);
    return SEGRT_OK;
}

/* Rows [a, b) of image n from the ring of a row sink's rows to the sink,
 * in pieces of the pinned buffers (rows of every channel, never across
 * the ring's end): a piece's DMA on the download stream overlaps the
 * sink's work on the one before. The rows must be final. */
static sg_status sink_rows(sw_job *r, int64_t n, int64_t a, int64_t b)
{
    const sg_window_ops *ops = r->ops;
    const sw_result *res = &r->out;
    sw_pinned *p = &r->pin;
    int64_t ring = res->sink_ring;
    size_t row = (size_t)r->geo.img_plane * res->out_esize;
    int64_t per = (int64_t)(p->bytes / (row * (size_t)res->out_ch)); /* >= 1: sw_take_pinned */
    int64_t prev = 0, prev_len = 0;
    int32_t k = p->next;
    for (int64_t x = a;;) {
        int64_t len = 0;
        if (x < b) {
            int64_t at = x % ring;
            len = b - x < per ? b - x : per;
            len = len < ring - at ? len : ring - at;
            SG_TRY(ops->event_synchronize(p->ev[k])); /* its last piece has left for the sink (or an upload) */
            for (int64_t c = 0; c < res->out_ch; c++)
                SG_TRY(ops->copy_async((uint8_t *)p->buf[k] + (size_t)(c * len) * row,
                                       (const uint8_t *)res->d_result + (size_t)(c * ring + at) * row,
                                       (size_t)len * row, SG_WINDOW_DEVICE_TO_HOST, r->st.down));
            SG_TRY(ops->event_record(p->ev[k], r->st.down));
        }
        if (prev_len > 0) {
            SG_TRY(ops->event_synchronize(p->ev[k ^ 1]));
            SG_TRY(r->o->row_sink(r->o->row_sink_user, n, prev, prev + prev_len, p->buf[k ^ 1],
                                  prev_len * r->geo.img_plane));
        }
        if (len == 0)
            break;
        prev = x;
        prev_len = len;
        x += len;
        k ^= 1;
    }
    p->next = k;
    return SEGRT_OK;
}

/* Rows [a, b) of image n (every channel of the result) down. */
static sg_status download_rows(sw_job *r, int64_t n, int64_t a, int64_t b)
{
    if (b <= a)
        return SEGRT_OK;
    if (r->out.sink)
        return sink_rows(r, n, a, b);
    const sw_geometry *q = &r->geo;
    const sw_result *res = &r->out;
    size_t len = (size_t)((b - a) * q->img_plane) * res->out_esize;
    for (int64_t c = 0; c < res->out_ch; c++)
        SG_TRY(download_bytes(r, (size_t)((n * res->out_ch + c) * q->image_numel + a * q->img_plane) * res->out_esize,
                              len));
    return SEGRT_OK;
}

/* Down everything before image n's row `row` that is not down yet: it is
 * final on the device (images finish in order, rows in order). */
sg_status sw_download_through(sw_job *r, int64_t n, int64_t row)
{
    double t0 = sg_now_seconds();
    sw_result *res = &r->out;
    for (; res->dl_image < n; res->dl_image++, res->dl_row = 0)
        SG_TRY(download_rows(r, res->dl_image, res->dl_row, r->geo.g.size[0]));
    if (res->dl_image == n && row > res->dl_row) {
        SG_TRY(download_rows(r, n, res->dl_row, row));
        res->dl_row = row;
    }
    r->stat.t_download += sg_now_seconds() - t0;
    return SEGRT_OK;
}
