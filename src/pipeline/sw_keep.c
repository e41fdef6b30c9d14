/* The device job's buffers, streams and events (sw_job.h): made for a run
 * or taken back from what the session kept of its last run, and at the
 * end freed or kept for the next. */
#include "pipeline/sw_job.h"

#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Frees the kept device buffers not taken yet. */
void sw_keep_drop_blocks(sg_sw_keep *k)
{
    for (int32_t i = 0; k && i < k->n; i++) {
        k->ops->device_free(k->block[i]);
        k->block[i] = NULL;
    }
    if (k)
        k->n = 0;
}

static void pinned_destroy(const sg_window_ops *ops, sw_pinned *p)
{
    for (int i = 0; i < 2; i++) {
        ops->host_free(p->buf[i]);
        ops->event_destroy(p->ev[i]);
        p->buf[i] = NULL;
        p->ev[i] = NULL;
    }
}

static void streams_destroy(const sg_window_ops *ops, sw_streams *t)
{
    sg_backend_event *ev[3 + SW_IN_FLIGHT] = {t->ev_gathered, t->ev_uploaded, t->ev_net};
    for (int i = 0; i < SW_IN_FLIGHT; i++)
        ev[3 + i] = t->ev_batch[i];
    for (int i = 0; i < 3 + SW_IN_FLIGHT; i++)
        ops->event_destroy(ev[i]);
    ops->stream_destroy(t->s);
    ops->stream_destroy(t->up);
    ops->stream_destroy(t->down);
    memset(t, 0, sizeof *t);
}

void sg_sw_keep_free(sg_sw_keep *k)
{
    if (!k)
        return;
    const sg_window_ops *ops = k->ops;
    int32_t prev = 0;
    bool switched = ops->device_get(&prev) == SEGRT_OK && prev != k->device && ops->device_set(k->device) == SEGRT_OK;
    sw_keep_drop_blocks(k);
    free(k->block);
    free(k->bytes);
    pinned_destroy(ops, &k->pin);
    sg_copy_team_free(k->pin.team);
    streams_destroy(ops, &k->st);
    if (switched)
        (void)ops->device_set(prev);
    free(k);
}

/* A device buffer of the pipeline: the next kept one when it has the size
 * asked for, else a new one (and the kept others go). Listed in
 * r->mem.block for sw_job_free, which keeps them for the next run. */
sg_status sw_dev_alloc(sw_job *r, size_t bytes, const char *what, void **out)
{
    size_t want = bytes ? bytes : 256;
    sg_sw_keep *k = r->mem.keep;
    *out = NULL;
    if (k && r->mem.keep_next < k->n) {
        if (k->bytes[r->mem.keep_next] == want) {
            *out = k->block[r->mem.keep_next];
            k->block[r->mem.keep_next++] = NULL;
        } else {
            sw_keep_drop_blocks(k);
        }
    }
    r->mem.reused = *out != NULL;
    if (r->mem.n_blocks == r->mem.cap_blocks) {
        int32_t cap = r->mem.cap_blocks ? 2 * r->mem.cap_blocks : 16;
        void **b = realloc(r->mem.block, sizeof *b * (size_t)cap);
        if (b)
            r->mem.block = b;
        size_t *n = b ? realloc(r->mem.bytes, sizeof *n * (size_t)cap) : NULL;
        if (n)
            r->mem.bytes = n;
        if (!b || !n) {
            r->ops->device_free(*out);
            *out = NULL;
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "sliding windows: %s: no host memory", what);
        }
        r->mem.cap_blocks = cap;
    }
    if (!*out) {
        sg_status s = r->ops->device_alloc(r->device, want, out);
        if (s != SEGRT_OK)
            return sg_error_prefix(s, "sliding windows: %s: ", what);
    }
    r->mem.block[r->mem.n_blocks] = *out;
    r->mem.bytes[r->mem.n_blocks++] = want;
    r->mem.pipeline_bytes += bytes;
    return SEGRT_OK;
}

/* A buffer handed to the caller (a device result): never kept. */
sg_status sw_dev_alloc_owned(sw_job *r, size_t bytes, const char *what, void **out)
{
    sg_status s = r->ops->device_alloc(r->device, bytes ? bytes : 256, out);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "sliding windows: %s: ", what);
    r->mem.pipeline_bytes += bytes;
    return SEGRT_OK;
}

/* The streams and events: the kept ones, or new ones. Streams and events
 * are all or none in a keep (keep_from_run moves them together). */
sg_status sw_take_streams(sw_job *r)
{
    const sg_window_ops *ops = r->ops;
    sg_sw_keep *k = r->mem.keep;
    if (k && k->st.s) {
        r->st = k->st;
        memset(&k->st, 0, sizeof k->st);
        return SEGRT_OK;
    }
    SG_TRY(ops->stream_create(&r->st.s));
    SG_TRY(ops->stream_create(&r->st.up));
    SG_TRY(ops->stream_create(&r->st.down));
    SG_TRY(ops->event_create(&r->st.ev_gathered));
    SG_TRY(ops->event_create(&r->st.ev_uploaded));
    SG_TRY(ops->event_create(&r->st.ev_net));
    for (int i = 0; i < SW_IN_FLIGHT; i++)
        SG_TRY(ops->event_create(&r->st.ev_batch[i]));
    return SEGRT_OK;
}

/* Two pinned buffers: one fills on the host while the other is on its
 * way, for uploads of image rows and the download of a host result.
 * Small (8 MiB, or one row of the image): pinning is slow to allocate. The
 * kept ones when they have the size, and the kept copy team. */
sg_status sw_take_pinned(sw_job *r)
{
    r->pin.bytes = SW_PINNED_BYTES;
    if ((size_t)r->geo.img_plane * sizeof(float) > r->pin.bytes)
        r->pin.bytes = (size_t)r->geo.img_plane * sizeof(float);
    /* A reader fills a row of every channel at once. */
    size_t row_all = (size_t)(r->geo.C * r->geo.img_plane) * sizeof(float);
    if (r->img.h_image && !r->img.h_image->data && row_all > r->pin.bytes)
        r->pin.bytes = row_all;
    /* A row sink takes a row of every channel at once. */
    size_t row_out = (size_t)(r->out.out_ch * r->geo.img_plane) * r->out.out_esize;
    if (r->out.sink && row_out > r->pin.bytes)
        r->pin.bytes = row_out;
    sg_sw_keep *k = r->mem.keep;
    if (k && k->pin.team) {
        r->pin.team = k->pin.team;
        k->pin.team = NULL;
    } else {
        SG_TRY(sg_copy_team_new(0, &r->pin.team));
    }
    if (k && k->pin.buf[0] && k->pin.buf[1] && k->pin.bytes == r->pin.bytes) {
        for (int i = 0; i < 2; i++) {
            r->pin.buf[i] = k->pin.buf[i];
            r->pin.ev[i] = k->pin.ev[i];
            k->pin.buf[i] = NULL;
            k->pin.ev[i] = NULL;
        }
        return SEGRT_OK;
    }
    for (int i = 0; i < 2; i++) {
        SG_TRY(r->ops->host_alloc(r->pin.bytes, &r->pin.buf[i]));
        SG_TRY(r->ops->event_create(&r->pin.ev[i]));
    }
    return SEGRT_OK;
}

/* Waits for the contexts' enqueued runs (they read and write the
 * pipeline's buffers) without replacing the error that ended the run. */
static void finish_contexts_quietly(sw_job *r)
{
    if (!r->enqueued)
        return;
    char keep[512];
    snprintf(keep, sizeof keep, "%s", sg_last_error());
    for (int32_t m = 0; m < r->n_models; m++)
        (void)sg_context_finish(r->models[m].ctx);
    (void)sg_error(SEGRT_ERROR_DEVICE, "%s", keep);
    r->enqueued = false;
}

/* The run's streams, events, pinned and device buffers into a new keep
 * for the next run, or NULL when there is no memory for one. What the
 * run's own keep still holds is freed with it (sw_job_free). */
static sg_sw_keep *keep_from_run(sw_job *r)
{
    sg_sw_keep *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->ops = r->ops;
    /* The importance map is the first buffer (sw_plan_memory). */
    k->w_valid = r->mem.n_blocks > 0 && r->mem.block[0] == (void *)r->acc.d_w;
    k->device = r->device;
    k->block = r->mem.block;
    k->bytes = r->mem.bytes;
    k->n = r->mem.n_blocks;
    r->mem.block = NULL;
    r->mem.bytes = NULL;
    r->mem.n_blocks = r->mem.cap_blocks = 0;
    k->st = r->st;
    memset(&r->st, 0, sizeof r->st);
    k->pin = r->pin;
    memset(&r->pin, 0, sizeof r->pin);
    k->w_dims = r->geo.g.n_dims;
    k->w_blend = (int32_t)r->o->blend;
    k->w_sigma = r->o->sigma_scale;
    memset(k->w_roi, 0, sizeof k->w_roi);
    memcpy(k->w_roi, r->geo.g.roi, sizeof(int64_t) * (size_t)r->geo.g.n_dims);
    return k;
}

/* Waits for the device, then frees what the run holds. With keep (a run
 * that succeeded, in a session), streams, events and buffers go into
 * *keep instead. */
void sw_job_free(sw_job *r, sg_sw_keep **keep)
{
    const sg_window_ops *ops = r->ops;
    finish_contexts_quietly(r);
    /* A failed wait here follows the failure that ended the run: its
     * message stays the one the caller sees. */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sg_last_error());
    bool failed = false;
    sg_backend_stream *streams[3] = {r->st.s, r->st.up, r->st.down};
    for (int i = 0; i < 3; i++)
        if (streams[i] && ops->stream_synchronize(streams[i]) != SEGRT_OK)
            failed = true;
    if (failed)
        (void)sg_error(SEGRT_ERROR_DEVICE, "%s", msg);
    if (keep && !*keep)
        *keep = keep_from_run(r);
    for (int32_t i = 0; i < r->mem.n_blocks; i++)
        ops->device_free(r->mem.block[i]);
    free(r->mem.block);
    free(r->mem.bytes);
    sg_sw_keep_free(r->mem.keep);
    free(r->acc.dm);
    pinned_destroy(ops, &r->pin);
    sg_copy_team_free(r->pin.team);
    free(r->batch);
    free(r->strips.list);
    free(r->keep);
    /* After the streams' synchronisation: no copy is left in flight. */
    if (r->strips.seam_registered) {
        ops->host_unregister(r->strips.seam);
        free(r->strips.seam);
    } else if (!r->strips.seam_on_device)
        ops->host_free(r->strips.seam);
    streams_destroy(ops, &r->st);
    sg_sw_grid_free(&r->geo.g);
}
