/* Sliding-window inference on the device (sw_device.h, sw_job.h).
 *
 * One pass (or, under a tight memory budget, one per slab of rows) walks
 * the windows that touch its rows in MONAI's order, sw_batch at a time:
 * gather (per model and flip) -> run -> combine flips and models ->
 * accumulate (a launch per run of windows between finished rows, each
 * voxel's windows in order) -> finish the rows no later window touches.
 * The pipeline's kernels run on its own stream and the networks on their
 * contexts' streams, ordered by events (a run waits for its gather, the
 * blending waits for the run), so the host enqueues ahead of the GPU and
 * never waits between batches; it stays at most SW_IN_FLIGHT batches
 * ahead. Host images go up on a copy stream that the gathers wait for, a
 * pinned buffer's worth of rows after each batch, ahead of the windows
 * that need them (sw_upload.c). A host result made whole on the device
 * goes down in pieces as its rows are finished, on a third stream, while
 * later windows run (sw_download.c). */
#include "pipeline/sw_job.h"

#include "engine/engine_internal.h"

#include <stdlib.h>
#include <string.h>

_Static_assert((int)SG_SW_PAD_CONSTANT == (int)SG_WINDOW_PAD_CONSTANT &&
                   (int)SG_SW_PAD_REFLECT == (int)SG_WINDOW_PAD_REFLECT &&
                   (int)SG_SW_PAD_REPLICATE == (int)SG_WINDOW_PAD_REPLICATE,
               "the window kernels' padding is the options'");
_Static_assert(SG_SW_MAX_DIMS == SG_WINDOW_MAX_DIMS, "window dims agree");

bool sg_sw_device_capable(const sg_sw_model *models, int32_t n_models)
{
    int32_t device = -1;
    const sg_window_ops *ops = NULL;
    for (int32_t m = 0; m < n_models; m++) {
        const sg_window_ops *mo = sg_context_window_ops(models[m].ctx);
        if (!mo || (m > 0 && mo != ops))
            return false;
        ops = mo;
        segrt_engine_info info;
        if (segrt_engine_get_info(models[m].engine, &info) != SEGRT_OK || info.fallback_steps > 0)
            return false;
        if (m > 0 && info.device_index != device)
            return false;
        device = info.device_index;
    }
    return n_models > 0;
}

/* The windows of one image touching padded rows [pa, pb): a run
 * [*w_lo, *w_hi) of MONAI's order, since axis 0 is the slowest. */
static void pass_windows(const sw_job *r, int64_t pa, int64_t pb, int64_t *w_lo, int64_t *w_hi)
{
    const sg_sw_grid *g = &r->geo.g;
    int64_t start[SG_SW_MAX_DIMS];
    *w_lo = *w_hi = 0;
    bool any = false;
    for (int64_t w = 0; w < g->n_windows; w++) {
        sg_sw_window_start(g, w, start);
        if (start[0] < pb && start[0] + g->roi[0] > pa) {
            if (!any)
                *w_lo = w;
            any = true;
            *w_hi = w + 1;
        }
    }
}

/* The networks' input: `batch` windows of the roi, on the device, in d_in. */
static segrt_tensor window_input(const sw_job *r, int64_t batch)
{
    segrt_tensor in;
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = r->geo.g.n_dims + 2;
    in.dims[0] = batch;
    in.dims[1] = r->geo.C;
    memcpy(in.dims + 2, r->geo.g.roi, sizeof(int64_t) * (size_t)r->geo.g.n_dims);
    in.data = r->acc.d_in;
    in.memory = SEGRT_MEMORY_DEVICE;
    in.device = r->device;
    return in;
}

/* Whether a short batch of `got` windows runs at its own size: where
 * every model's engine was built for a range of batches that holds it
 * (the engine compiles a plan for it on its first run and keeps it; the
 * caller asked for the range), and every model has one output (the
 * prediction). Otherwise it repeats its last window up to the batch the
 * plan was built for. */
static bool runs_at_own_size(const sw_job *r, int64_t got)
{
    if (got >= r->geo.B)
        return false;
    segrt_tensor in = window_input(r, got);
    for (int32_t m = 0; m < r->n_models; m++)
        if (r->acc.dm[m].n != 1 || !sg_context_in_profile(r->models[m].ctx, 1, &in))
            return false;
    return true;
}

/* The batch's windows (global indices) into d_in, flipped by mask, in
 * launches of up to SG_WINDOW_BATCH windows: run_b of them, the got given
 * and, past those, the last one repeated. */
static sg_status gather_batch(sw_job *r, const int64_t *win, int64_t got, int64_t run_b, uint32_t mask)
{
    const sg_window_ops *ops = r->ops;
    const sw_geometry *q = &r->geo;
    int64_t nw = q->g.n_windows, nd = q->g.n_dims, starts[SG_WINDOW_BATCH * SG_SW_MAX_DIMS];
    if (r->img.have_upload) {
        SG_TRY(ops->stream_wait(r->st.s, r->st.ev_uploaded));
        r->img.have_upload = false;
    }
    sg_window_rows src = sw_image_rows(r, win[0] / nw); /* a batch never spans two images */
    for (int64_t first = 0; first < run_b; first += SG_WINDOW_BATCH) {
        int64_t n = run_b - first < SG_WINDOW_BATCH ? run_b - first : SG_WINDOW_BATCH;
        for (int64_t i = 0; i < n; i++) {
            int64_t b = first + i < got ? first + i : got - 1; /* a short batch repeats its last window */
            sg_sw_window_start(&q->g, win[b] % nw, starts + i * nd);
        }
        SG_TRY(ops->gather(r->st.s, &q->geom, starts, n, (int32_t)r->o->pad, r->o->pad_value, mask, &src, q->C,
                           r->acc.d_in + first * q->C * q->roi_numel));
    }
    SG_TRY(ops->event_record(r->st.ev_gathered, r->st.s));
    return SEGRT_OK;
}

/* Every model and flip over the batch: the averaged prediction in d_out. */
static sg_status predict_batch(sw_job *r, const int64_t *win, int64_t got)
{
    const sg_window_ops *ops = r->ops;
    const sw_geometry *q = &r->geo;
    sw_accum *a = &r->acc;
    int64_t run_b = runs_at_own_size(r, got) ? got : q->B;
    segrt_tensor in = window_input(r, run_b);
    int64_t rows = run_b * q->K;
    for (int32_t m = 0; m < r->n_models; m++) {
        sw_model_out *dm = &a->dm[m];
        dm->t[0].data = a->d_pred;
        dm->t[0].memory = SEGRT_MEMORY_DEVICE;
        dm->t[0].device = r->device;
        dm->t[0].dims[0] = run_b; /* the prediction: [windows, K, roi...] */
        for (int32_t f = 0; f < q->n_flips; f++) {
            SG_TRY(gather_batch(r, win, got, run_b, q->flips[f]));
            /* The run reads d_in after the gather and writes d_pred after
             * the last batch's blending (both before ev_gathered on s); the
             * next gather and the blending wait for the run. */
            r->enqueued = true;
            SG_TRY(sg_context_enqueue(r->models[m].ctx, 1, &in, dm->n, dm->t, r->st.ev_gathered, r->st.ev_net));
            SG_TRY(ops->stream_wait(r->st.s, r->st.ev_net));
            r->stat.runs += got;
            if (q->n_flips > 1)
                SG_TRY(ops->combine(r->st.s, &q->geom, q->flips[f], f > 0,
                                    f == q->n_flips - 1 ? (float)q->n_flips : 1.0f, a->d_pred, a->d_model, rows));
        }
        if (r->n_models > 1)
            SG_TRY(ops->combine(r->st.s, &q->geom, 0, m > 0, m == r->n_models - 1 ? (float)r->n_models : 1.0f,
                                a->d_model, a->d_out, rows));
    }
    return SEGRT_OK;
}

/* Rows [x, y) of the strip's seam columns between its ring and the seam
 * buffer (out: ring to seam, from the columns [fin_hi, c_hi); in: seam to
 * ring, into [c_lo, c_lo + in_cols)), a copy per channel and run of ring
 * slots. */
static sg_status seam_copy(sw_job *r, const sw_strip *st, int64_t x, int64_t y, bool out)
{
    const sg_window_ops *ops = r->ops;
    const sw_accum *ac = &r->acc;
    const sw_strips *sp = &r->strips;
    int64_t cols = out ? st->c_hi - st->fin_hi : st->in_cols, col = out ? st->fin_hi - st->c_lo : 0;
    if (cols <= 0 || y <= x)
        return SEGRT_OK;
    size_t es = ac->acc_esize, seam_row = (size_t)(sp->seam_cols * sp->rest) * es;
    size_t ring_pitch = (size_t)st->plane * es, width = (size_t)(cols * sp->rest) * es;
    sg_window_copy kind = sp->seam_on_device ? SG_WINDOW_DEVICE_TO_DEVICE
                          : out              ? SG_WINDOW_DEVICE_TO_HOST
                                             : SG_WINDOW_HOST_TO_DEVICE;
    int64_t rows0 = r->geo.g.padded[0];
    for (int64_t row = x; row < y;) {
        int64_t at = row % ac->ring_rows, len = y - row < ac->ring_rows - at ? y - row : ac->ring_rows - at;
        for (int64_t c = 0; c <= r->geo.K; c++) {
            uint8_t *ring = (uint8_t *)ac->d_acc + (size_t)((c * ac->ring_rows + at) * st->plane + col * sp->rest) * es;
            uint8_t *seam = (uint8_t *)sp->seam + ((size_t)(c * rows0 + row)) * seam_row;
            if (out)
                SG_TRY(ops->copy_2d_async(seam, seam_row, ring, ring_pitch, width, (size_t)len, kind, r->st.s));
            else
                SG_TRY(ops->copy_2d_async(ring, ring_pitch, seam, seam_row, width, (size_t)len, kind, r->st.s));
        }
        row += len;
    }
    return SEGRT_OK;
}

/* Finishes padded rows [a, b) of image n in strip st: the seam's columns
 * out to the next strip, the kernel, the copy down when the result is
 * staged by slabs; then the ring's slots are zeroed for the rows that come
 * next, which start with the earlier strips' sums in their seam columns. */
static sg_status finish_rows(sw_job *r, const sw_strip *st, int64_t n, int64_t a, int64_t b)
{
    const sg_window_ops *ops = r->ops;
    const sw_geometry *q = &r->geo;
    const sw_accum *ac = &r->acc;
    const sw_result *res = &r->out;
    int64_t pb = q->g.pad_begin[0];
    sg_window_rows acc = {ac->d_acc, ac->ring_rows * st->plane, 0, ac->ring_rows, ac->acc_dtype, 0};
    if (!st->last)
        SG_TRY(seam_copy(r, st, a, b, true));
    if (res->sink) {
        /* Image rows [lo, hi) into their ring's slots, a launch per run
         * of slots; slots whose rows are not down yet are waited for
         * (every row finished before is final once the stream is). */
        int64_t lo = a - pb < 0 ? 0 : a - pb, hi = b - pb > q->g.size[0] ? q->g.size[0] : b - pb, ring = res->sink_ring;
        for (int64_t x = lo; x < hi;) {
            int64_t at = x % ring, len = hi - x < ring - at ? hi - x : ring - at;
            if (res->dl_image < n || x + len - res->dl_row > ring) {
                double t0 = sg_now_seconds();
                SG_TRY(ops->stream_synchronize(r->st.s));
                r->stat.t_wait += sg_now_seconds() - t0;
                SG_TRY(sw_download_through(r, n, x));
            }
            sg_window_rows dst = {(uint8_t *)res->d_result + (size_t)(at * q->img_plane) * res->out_esize,
                                  ring * q->img_plane, x, 0, SEGRT_DTYPE_UNDEFINED, 0};
            SG_TRY(ops->finalize(r->st.s, &q->geom, res->final, r->o->threshold, q->K, x + pb, x + len + pb, &acc,
                                 res->out_dtype, &dst));
            x += len;
        }
    } else if (res->d_result) {
        /* A strip finishes its columns of the whole result's rows (one
         * strip: all of them, fin_geom the job's geometry). */
        int64_t col = q->g.n_dims > 2 ? q->img_plane / q->g.size[1] : 1;
        sg_window_rows dst = {(uint8_t *)res->d_result +
                                  (size_t)(n * res->out_ch * q->image_numel + st->fin_col0 * col) * res->out_esize,
                              q->image_numel, 0, 0, SEGRT_DTYPE_UNDEFINED, q->img_plane};
        if (st->fin_col0 >= 0)
            SG_TRY(ops->finalize(r->st.s, &st->fin_geom, res->final, r->o->threshold, q->K, a, b, &acc,
                                 res->out_dtype, &dst));
    } else {
        /* Image rows [lo, hi) in chunks of the staging's rows. */
        int64_t lo = a - pb < 0 ? 0 : a - pb, hi = b - pb > q->g.size[0] ? q->g.size[0] : b - pb;
        for (int64_t x = lo; x < hi; x += res->stage_rows) {
            int64_t y = x + res->stage_rows < hi ? x + res->stage_rows : hi;
            sg_window_rows dst = {res->d_stage, res->stage_rows * q->img_plane, x, 0, SEGRT_DTYPE_UNDEFINED, 0};
            SG_TRY(ops->finalize(r->st.s, &q->geom, res->final, r->o->threshold, q->K, x + pb, y + pb, &acc,
                                 res->out_dtype, &dst));
            size_t width = (size_t)((y - x) * q->img_plane) * res->out_esize;
            uint8_t *h = (uint8_t *)res->h_result +
                         (size_t)(n * res->out_ch * q->image_numel + x * q->img_plane) * res->out_esize;
            SG_TRY(ops->copy_2d_async(h, (size_t)q->image_numel * res->out_esize, res->d_stage,
                                      (size_t)(res->stage_rows * q->img_plane) * res->out_esize, width,
                                      (size_t)res->out_ch, SG_WINDOW_DEVICE_TO_HOST, r->st.s));
        }
    }
    /* The ring's slots of rows [a, b) are free again: zero them for the
     * rows `ring` later (at most two runs, where the ring wraps). */
    size_t es = ac->acc_esize;
    for (int64_t x = a; x < b;) {
        int64_t at = x % ac->ring_rows, len = b - x < ac->ring_rows - at ? b - x : ac->ring_rows - at;
        SG_TRY(ops->memset_2d_async((uint8_t *)ac->d_acc + (size_t)(at * st->plane) * es,
                                    (size_t)(ac->ring_rows * st->plane) * es, 0, (size_t)(len * st->plane) * es,
                                    (size_t)(q->K + 1), r->st.s));
        x += len;
    }
    int64_t rows0 = q->g.padded[0], x = a + ac->ring_rows, y = b + ac->ring_rows;
    return seam_copy(r, st, x, y < rows0 ? y : rows0, false);
}

/* Padded rows [a, b) of image n finished, in pieces of at most the
 * ring's rows: the ring holds rows [a, a + ring) only, and rows past them
 * no window touched (windows were skipped between: a jump of the finished
 * rows longer than the ring), so they finish from zeroed slots as
 * background. */
static sg_status finish_through(sw_job *r, const sw_strip *st, int64_t n, int64_t a, int64_t b)
{
    for (int64_t x = a; x < b; x += r->acc.ring_rows)
        SG_TRY(finish_rows(r, st, n, x, x + r->acc.ring_rows < b ? x + r->acc.ring_rows : b));
    return SEGRT_OK;
}

/* The windows of a run [w_lo, w_hi) of image n's that belong to strip st
 * and are kept, in order, into the strip list (or the run itself with one
 * strip and every window kept). */
static int64_t strip_windows(sw_job *r, const sw_strip *st, int64_t w_lo, int64_t w_hi, const int64_t **list)
{
    const sg_sw_grid *g = &r->geo.g;
    if (r->strips.n <= 1 && !r->keep) {
        *list = NULL;
        return w_hi - w_lo;
    }
    int64_t inner = 1, n = 0;
    for (int32_t d = 2; d < g->n_dims; d++)
        inner *= g->n_starts[d];
    for (int64_t w = w_lo; w < w_hi; w++) {
        int64_t i1 = g->n_dims > 1 ? (w / inner) % g->n_starts[1] : 0;
        if ((r->strips.n <= 1 || (i1 >= st->i_lo && i1 < st->i_hi)) && (!r->keep || r->keep[w]))
            r->strips.list[n++] = w;
    }
    *list = r->strips.list;
    return n;
}

/* Image n over padded rows [pa, pb) in strip st: its windows in batches,
 * each accumulated in order, rows finished as soon as no later window of
 * the strip touches them. Batches never span two images. */
static sg_status run_image_pass(sw_job *r, const sw_strip *st, int64_t n, int64_t pa, int64_t pb)
{
    const sg_window_ops *ops = r->ops;
    const sw_geometry *q = &r->geo;
    /* The starts of a run of windows, and of the window after it. */
    int64_t w_lo, w_hi, starts[(SG_WINDOW_BATCH + 1) * SG_SW_MAX_DIMS], done = pa, nw = q->g.n_windows;
    int64_t win[1024];
    const int64_t *list;
    pass_windows(r, pa, pb, &w_lo, &w_hi);
    int64_t count = strip_windows(r, st, w_lo, w_hi, &list);
    sg_window_rows acc = {r->acc.d_acc, r->acc.ring_rows * st->plane, 0, r->acc.ring_rows, r->acc.acc_dtype, 0};
    /* A strip after the first starts with the earlier strips' sums in the
     * ring's first rows (the finishing of rows loads them for later ones). */
    if (pa == 0)
        SG_TRY(seam_copy(r, st, 0, r->acc.ring_rows < pb ? r->acc.ring_rows : pb, false));
    /* Where the short batch runs at its own size, it goes first: from a
     * host image, the network then starts on the rows its few windows read
     * while the rest are uploaded (a full first batch of the 2-D job's
     * 5 × 5 windows reads 81 % of the image's rows, 9 windows 44 %). The
     * windows keep their order, and so does the blending. */
    int64_t lead = count % q->B, got;
    if (lead == 0 || !runs_at_own_size(r, lead))
        lead = q->B;
    for (int64_t first = 0; first < count; first += got) {
        got = first == 0 ? lead : q->B;
        got = count - first < got ? count - first : got;
        /* At most SW_IN_FLIGHT batches ahead of the GPU. */
        sg_backend_event *slot = r->st.ev_batch[r->stat.batches % SW_IN_FLIGHT];
        int32_t si = (int32_t)(r->stat.batches % SW_IN_FLIGHT);
        if (r->stat.batches >= SW_IN_FLIGHT) {
            sw_populate_while_busy(r, slot);
            double t0 = sg_now_seconds();
            SG_TRY(ops->event_synchronize(slot));
            r->stat.t_wait += sg_now_seconds() - t0;
            if (r->out.progressive)
                SG_TRY(sw_download_through(r, r->out.fin_image[si], r->out.fin_row[si]));
        }
        int64_t *batch = q->B <= 1024 ? win : r->batch;
        for (int64_t b = 0; b < got; b++)
            batch[b] = n * nw + (list ? list[first + b] : w_lo + first + b);
        if (!r->img.d_image) {
            double t0 = sg_now_seconds();
            SG_TRY(sw_ensure_batch_rows(r, batch, got));
            r->stat.t_upload += sg_now_seconds() - t0;
        }
        SG_TRY(predict_batch(r, batch, got));
        if (!r->img.d_image) {
            double t0 = sg_now_seconds();
            SG_TRY(sw_upload_ahead(r));
            r->stat.t_upload += sg_now_seconds() - t0;
        }
        /* Windows accumulate in runs between the rows they finish: one
         * launch a run (of up to SG_WINDOW_BATCH), every window of a run
         * starting at the same row. Starts are the strip's columns. */
        int64_t run0 = 0, nd = q->g.n_dims;
        for (int64_t b = 0; b <= got; b++) {
            int64_t ready = pb;
            if (b < got) {
                int64_t *sb = starts + (b - run0) * nd;
                sg_sw_window_start(&q->g, batch[b] % nw, sb);
                if (nd > 1)
                    sb[1] -= st->c_lo;
                ready = sb[0] > pa ? sb[0] : pa; /* rows before it: no later window touches them */
                ready = ready < pb ? ready : pb;
            }
            if (b > run0 && (b == got || ready > done || b - run0 == SG_WINDOW_BATCH)) {
                SG_TRY(ops->accumulate(r->st.s, &st->acc_geom, starts, b - run0,
                                       r->acc.d_out + run0 * q->K * q->roi_numel, r->acc.d_w, q->K, pa, pb, &acc));
                if (b < got)
                    memcpy(starts, starts + (b - run0) * nd, sizeof(int64_t) * (size_t)nd);
                run0 = b;
            }
            if (b < got && ready > done) {
                SG_TRY(finish_through(r, st, n, done, ready));
                done = ready;
            }
        }
        /* Padded rows before `done` are final once the slot's event is:
         * with strips, in the last strip only. */
        int64_t fin = st->last ? done - q->g.pad_begin[0] : 0;
        r->out.fin_image[si] = n;
        r->out.fin_row[si] = fin < 0 ? 0 : fin > q->g.size[0] ? q->g.size[0] : fin;
        SG_TRY(ops->event_record(slot, r->st.s));
        r->stat.batches++;
        if (r->o->progress)
            r->o->progress(r->o->progress_user, r->stat.runs / (r->n_models * q->n_flips),
                           r->stat.total_runs / (r->n_models * q->n_flips));
    }
    return finish_through(r, st, n, done, pb);
}

static sg_status prepare(sw_job *r, const segrt_tensor *image)
{
    const sg_sw_options *o = r->o;
    sw_geometry *q = &r->geo;
    int32_t nd = o->n_dims;
    SG_TRY(sg_sw_grid_make(nd, image->dims + 2, o->roi, o->overlap, o->grid, &q->g));
    if (o->tta_axes >> nd)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "mirroring asks for a spatial axis beyond the image's %d", nd);
    sg_sw_flips(o->tta_axes, nd, q->flips, &q->n_flips);
    q->B = o->sw_batch;
    if (q->B > 1024 && !(r->batch = malloc(sizeof(int64_t) * (size_t)q->B)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    q->C = image->dims[1];
    q->n_img = image->dims[0];
    q->roi_numel = q->img_plane = q->pad_plane = 1;
    q->image_numel = image->dims[2];
    memset(&q->geom, 0, sizeof q->geom);
    q->geom.n_dims = nd;
    for (int32_t d = 0; d < nd; d++) {
        q->roi_numel *= q->g.roi[d];
        if (d > 0) {
            q->img_plane *= q->g.size[d];
            q->pad_plane *= q->g.padded[d];
            q->image_numel *= q->g.size[d];
        }
        q->geom.roi[d] = q->g.roi[d];
        q->geom.size[d] = q->g.size[d];
        q->geom.padded[d] = q->g.padded[d];
        q->geom.pad_begin[d] = q->g.pad_begin[d];
    }
    segrt_tensor in;
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = nd + 2;
    in.dims[0] = q->B;
    in.dims[1] = q->C;
    memcpy(in.dims + 2, q->g.roi, sizeof(int64_t) * (size_t)nd);
    if (!(r->acc.dm = calloc((size_t)r->n_models, sizeof *r->acc.dm)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t m = 0; m < r->n_models; m++)
        SG_TRY(sg_sw_model_outputs(r->models, m, o, q->g.roi, &in, &r->acc.dm[m].n, r->acc.dm[m].t, &q->K));
    SG_TRY(sg_sw_check_buffers(o, &q->g, q->n_img, q->C, q->K));
    if (o->keep_window) { /* the kept windows as a mark per window, for the passes' runs of windows */
        int64_t *kept = NULL, n_kept = 0;
        SG_TRY(sg_sw_kept_windows(o, &q->g, &kept, &n_kept));
        r->keep = calloc((size_t)(q->g.n_windows ? q->g.n_windows : 1), 1);
        for (int64_t i = 0; r->keep && i < n_kept; i++)
            r->keep[kept[i]] = 1;
        free(kept);
        if (!r->keep)
            return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    sw_result_kind(r);
    SG_TRY(r->ops->device_set(r->device));
    SG_TRY(sw_take_streams(r));
    SG_TRY(sw_plan_memory(r));
    if (r->mem.w_ready)
        return SEGRT_OK;
    float *w = malloc(sizeof(float) * (size_t)q->roi_numel);
    if (!w)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status s = sg_sw_importance(nd, q->g.roi, o->blend, o->sigma_scale, w);
    if (s == SEGRT_OK)
        s = r->ops->copy(r->acc.d_w, w, sizeof(float) * (size_t)q->roi_numel, SG_WINDOW_HOST_TO_DEVICE);
    free(w);
    return s;
}

/* The host path's checks, then where the image lives (a host image read
 * through a reader has no data of its own). */
static sg_status check_image(const sg_sw_options *o, const segrt_tensor *image, const sg_sw_image *reader,
                             int32_t device)
{
    if (image->rank < 0 || image->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has rank %d", image->rank);
    SG_TRY(sg_sw_check_image(o, image->rank, image->dtype, image->dims));
    if (image->memory == SEGRT_MEMORY_DEVICE && image->device != device)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image is on CUDA device %d; the models run on %d",
                        image->device, device);
    if (!image->data && !reader)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has no data");
    return SEGRT_OK;
}

static sg_status run_all(sw_job *r)
{
    double t_start = sg_now_seconds();
    const sw_geometry *q = &r->geo;
    int64_t rows0 = q->g.padded[0], pass = r->acc.pass_rows;
    r->stat.total_runs = 0;
    for (int64_t pa = 0; pa < rows0; pa += pass) {
        int64_t pb = pa + pass < rows0 ? pa + pass : rows0, w_lo, w_hi, kept = 0;
        pass_windows(r, pa, pb, &w_lo, &w_hi);
        for (int64_t w = w_lo; w < w_hi; w++)
            kept += !r->keep || r->keep[w];
        r->stat.total_runs += q->n_img * kept * r->n_models * q->n_flips;
    }
    /* Image by image, pass by pass, strip by strip: an image's rows are
     * finished before the next image starts, so one ring of accumulators
     * serves all. */
    for (int64_t n = 0; n < q->n_img; n++)
        for (int64_t pa = 0; pa < rows0; pa += pass) {
            int64_t pb = pa + pass < rows0 ? pa + pass : rows0;
            for (int32_t j = 0; j < r->strips.n; j++) {
                sw_strip st;
                sw_strip_get(r, j, &st);
                SG_TRY(run_image_pass(r, &st, n, pa, pb));
            }
        }
    double t0 = sg_now_seconds();
    SG_TRY(r->ops->stream_synchronize(r->st.s));
    r->stat.t_wait += sg_now_seconds() - t0;
    if (r->out.progressive)
        SG_TRY(sw_download_through(r, q->n_img, 0));
    /* Every run is done (the blending waited for each); what remains is
     * an error a network's kernel reported. */
    for (int32_t m = 0; m < r->n_models; m++)
        SG_TRY(sg_context_finish(r->models[m].ctx));
    r->enqueued = false;
    r->stat.t_total = sg_now_seconds() - t_start;
    return SEGRT_OK;
}

static void fill_stats(const sw_job *r, sg_sw_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    stats->windows = r->geo.n_img * r->geo.g.n_windows;
    stats->runs = r->stat.runs;
    stats->passes = (int32_t)((r->geo.g.padded[0] + r->acc.pass_rows - 1) / r->acc.pass_rows);
    stats->slab_rows = r->acc.ring_rows;
    stats->strips = r->strips.n;
    stats->seam_host_bytes = r->strips.n > 1 && !r->strips.seam_on_device ? r->strips.seam_bytes : 0;
    stats->sw_batch = (int32_t)r->geo.B;
    stats->pipeline_bytes = r->mem.pipeline_bytes;
    stats->context_bytes = sw_context_bytes(r);
    stats->seconds_setup = r->stat.t_setup;
    stats->seconds_run = r->stat.t_total;
    stats->seconds_uploading = r->stat.t_upload;
    stats->seconds_waiting = r->stat.t_wait;
    stats->seconds_downloading = r->stat.t_download;
}

/* The job over image (its dims, and where it lives): a device image in
 * place, a host image through reader. */
static sg_status device_run(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                            const segrt_tensor *image, sg_sw_image *reader, segrt_memory_kind out_memory,
                            segrt_tensor *out, sg_sw_stats *stats, sg_sw_keep **keep)
{
    memset(out, 0, sizeof *out);
    if (!sg_sw_device_capable(models, n_models))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "sliding windows on the device need CUDA engines on one device without CPU fallback");
    sw_job r;
    memset(&r, 0, sizeof r);
    r.ops = sg_context_window_ops(models[0].ctx);
    r.o = o;
    r.models = models;
    r.n_models = n_models;
    r.out.out_memory = out_memory;
    segrt_engine_info info;
    SG_TRY(segrt_engine_get_info(models[0].engine, &info));
    r.device = info.device_index;
    SG_TRY(check_image(o, image, reader, r.device));
    /* What the session kept of its last run (a session is one thread's
     * at a time, so nothing else takes it meanwhile). */
    if (keep) {
        r.mem.keep = *keep;
        *keep = NULL;
    }
    if (r.mem.keep && (r.mem.keep->device != r.device || r.mem.keep->ops != r.ops)) {
        sg_sw_keep_free(r.mem.keep);
        r.mem.keep = NULL;
    }
    if (image->memory == SEGRT_MEMORY_DEVICE)
        r.img.d_image = image->data;
    else
        r.img.h_image = reader;
    double t0 = sg_now_seconds();
    sg_status s = prepare(&r, image);
    r.stat.t_setup = sg_now_seconds() - t0;
    if (s == SEGRT_OK)
        s = run_all(&r);
    if (s == SEGRT_OK) {
        out->dtype = r.out.out_dtype;
        out->rank = image->rank;
        out->dims[0] = r.geo.n_img;
        out->dims[1] = r.out.out_ch;
        memcpy(out->dims + 2, image->dims + 2, sizeof(int64_t) * (size_t)o->n_dims);
        out->memory = out_memory;
        out->device = out_memory == SEGRT_MEMORY_DEVICE ? r.device : 0;
        if (r.out.sink) {
            out->data = NULL; /* the rows went to the sink */
        } else if (out_memory == SEGRT_MEMORY_DEVICE) {
            out->data = r.out.d_result;
            r.out.d_result = NULL;
        } else {
            out->data = r.out.h_result;
            r.out.h_result = NULL;
        }
        if (stats)
            fill_stats(&r, stats);
    }
    free(r.out.h_result);
    sw_job_free(&r, s == SEGRT_OK ? keep : NULL);
    if (!r.out.result_listed)
        r.ops->device_free(r.out.d_result); /* a device result the run failed to hand over */
    return s;
}

sg_status sg_sw_device_run_keep(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                const segrt_tensor *image, segrt_memory_kind out_memory, segrt_tensor *out,
                                sg_sw_stats *stats, sg_sw_keep **keep)
{
    memset(out, 0, sizeof *out);
    if (image->memory == SEGRT_MEMORY_DEVICE)
        return device_run(models, n_models, o, image, NULL, out_memory, out, stats, keep);
    if (image->rank < 0 || image->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image has rank %d", image->rank);
    /* A host image is read in place: its reader is a view. */
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = image->dtype;
    t.rank = image->rank;
    memcpy(t.dims, image->dims, sizeof(int64_t) * (size_t)image->rank);
    t.data = image->data;
    sg_sw_image view;
    sg_sw_image_of_tensor(&t, &view);
    return device_run(models, n_models, o, image, image->data ? &view : NULL, out_memory, out, stats, keep);
}

sg_status sg_sw_device_run_image(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                 sg_sw_image *image, segrt_memory_kind out_memory, segrt_tensor *out,
                                 sg_sw_stats *stats, sg_sw_keep **keep)
{
    segrt_tensor desc;
    memset(&desc, 0, sizeof desc);
    desc.dtype = SEGRT_DTYPE_FLOAT32; /* what the reader gives */
    desc.rank = image->rank;
    memcpy(desc.dims, image->dims, sizeof desc.dims);
    desc.data = (void *)image->data;
    desc.memory = SEGRT_MEMORY_HOST;
    return device_run(models, n_models, o, &desc, image, out_memory, out, stats, keep);
}

sg_status sg_sw_device_run(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                           const segrt_tensor *image, segrt_memory_kind out_memory, segrt_tensor *out,
                           sg_sw_stats *stats)
{
    return sg_sw_device_run_keep(models, n_models, o, image, out_memory, out, stats, NULL);
}
