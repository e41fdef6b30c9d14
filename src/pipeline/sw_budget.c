/* The device job's memory (sw_job.h): what the result is, then the sizes
 * of the accumulator ring, the passes, the image ring and the result's
 * staging under the device-memory budget, and the buffers themselves. */
#include "pipeline/sw_job.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* What the result is: its kernel, dtype and channel count. */
void sw_result_kind(sw_job *r)
{
    const sg_sw_options *o = r->o;
    sg_sw_activation act = sg_sw_effective_activation(o);
    r->out.out_ch = r->geo.K;
    r->out.out_dtype = SEGRT_DTYPE_FLOAT32;
    if (o->output == SG_SW_OUTPUT_LABELS) {
        if (act == SG_SW_ACTIVATION_SIGMOID) {
            r->out.final = SG_WINDOW_FINAL_THRESHOLD;
            r->out.out_dtype = SEGRT_DTYPE_UINT8;
        } else {
            r->out.final = SG_WINDOW_FINAL_ARGMAX; /* softmax is monotonic: argmax needs none */
            r->out.out_ch = 1;
            r->out.out_dtype = r->geo.K > 256 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
        }
    } else if (o->output == SG_SW_OUTPUT_LOGITS || act == SG_SW_ACTIVATION_NONE) {
        r->out.final = SG_WINDOW_FINAL_VALUES;
    } else {
        r->out.final = act == SG_SW_ACTIVATION_SIGMOID ? SG_WINDOW_FINAL_SIGMOID : SG_WINDOW_FINAL_SOFTMAX;
        if (o->probs_u8)
            r->out.out_dtype = SEGRT_DTYPE_UINT8;
    }
    r->out.out_esize = r->out.out_dtype == SEGRT_DTYPE_FLOAT32 ? 4 : r->out.out_dtype == SEGRT_DTYPE_UINT16 ? 2 : 1;
}

/* The device memory the contexts hold (weights, activations, workspace). */
uint64_t sw_context_bytes(const sw_job *r)
{
    uint64_t b = 0;
    for (int32_t m = 0; m < r->n_models; m++) {
        segrt_engine_info info;
        if (segrt_engine_get_info(r->models[m].engine, &info) == SEGRT_OK)
            b += info.weight_bytes + info.arena_bytes + info.workspace_bytes;
    }
    return b;
}

/* The most image rows one batch reads (sg_sw_batch_span over the kept
 * windows of strips of `per` axis-1 starts); the whole image where there
 * is no memory to measure it. */
static int64_t batch_span(const sw_job *r, int64_t per)
{
    int64_t span = sg_sw_batch_span(&r->geo.g, r->geo.B, r->keep, per);
    return span >= 0 ? span : r->geo.g.size[0];
}

/* The image's ring of rows for batches over strips of `per` axis-1
 * starts (0: one strip): a batch's rows and room to upload the next's
 * ahead, at most the whole image. */
static int64_t image_ring_rows(const sw_job *r, int64_t per)
{
    int64_t rows = batch_span(r, per) + r->geo.g.roi[0];
    return rows < r->geo.g.size[0] ? rows : r->geo.g.size[0];
}

/* A host result (or the strips' shared sums) of `bytes`, to be freed
 * with free(). A large one sits on 2 MiB boundaries and asks for huge
 * pages: the copy out of the pinned buffers takes its first-touch faults,
 * and on the GPU machine 4 KiB pages made that fault-bound; pinning the
 * shared sums in place is also quicker on them. */
static void *host_huge_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < 2 * huge)
        return malloc(bytes ? bytes : 1);
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

/* Strip j of r->strips.per axis-1 window starts (sw_strip); with one
 * strip, the whole plane and the job's geometry. */
void sw_strip_get(const sw_job *r, int32_t j, sw_strip *st)
{
    const sw_geometry *q = &r->geo;
    const sg_sw_grid *g = &q->g;
    memset(st, 0, sizeof *st);
    st->j = j;
    st->acc_geom = st->fin_geom = q->geom;
    if (g->n_dims < 2 || r->strips.n <= 1) {
        st->i_hi = g->n_dims < 2 ? 1 : g->n_starts[1];
        st->c_hi = st->fin_hi = g->n_dims < 2 ? 1 : g->padded[1];
        st->plane = q->pad_plane;
        st->last = true;
        return;
    }
    int64_t per = r->strips.per, n1 = g->n_starts[1], roi1 = g->roi[1];
    st->i_lo = j * per;
    st->i_hi = st->i_lo + per < n1 ? st->i_lo + per : n1;
    st->last = st->i_hi == n1;
    st->c_lo = g->starts[1][st->i_lo];
    for (int64_t i = 0; i < st->i_hi; i++) {
        int64_t end = g->starts[1][i] + roi1;
        if (i < st->i_lo && end - st->c_lo > st->in_cols)
            st->in_cols = end - st->c_lo; /* the earlier strips' reach into this one */
        if (i >= st->i_lo && end > st->c_hi)
            st->c_hi = end;
    }
    st->fin_hi = st->last ? st->c_hi : g->starts[1][st->i_hi];
    st->plane = (st->c_hi - st->c_lo) * r->strips.rest;
    st->acc_geom.padded[1] = st->fin_geom.padded[1] = st->c_hi - st->c_lo;
    /* The image columns it finishes: padded [c_lo, fin_hi) within the image. */
    int64_t pb = g->pad_begin[1], a = st->c_lo > pb ? st->c_lo : pb;
    int64_t b = st->fin_hi < pb + g->size[1] ? st->fin_hi : pb + g->size[1];
    st->fin_col0 = b > a ? a - pb : -1;
    st->fin_geom.pad_begin[1] = st->acc_geom.pad_begin[1] = a - st->c_lo;
    st->fin_geom.size[1] = st->acc_geom.size[1] = b > a ? b - a : 0;
}

/* Strips of `per` axis-1 starts: how many, and the widest strip's and
 * seam's padded columns. */
static void strips_measure(sw_job *r, int64_t per, int32_t *n, int64_t *max_cols, int64_t *seam_cols)
{
    r->strips.per = per;
    r->strips.n = (int32_t)((r->geo.g.n_starts[1] + per - 1) / per);
    *n = r->strips.n;
    *max_cols = *seam_cols = 0;
    for (int32_t j = 0; j < *n; j++) {
        sw_strip st;
        sw_strip_get(r, j, &st);
        *max_cols = st.c_hi - st.c_lo > *max_cols ? st.c_hi - st.c_lo : *max_cols;
        *seam_cols = st.c_hi - st.fin_hi > *seam_cols ? st.c_hi - st.fin_hi : *seam_cols;
    }
}

/* Strips for the budget: the fewest whose ring (ring_rows rows of K + 1
 * channels over the widest strip) and seam both fit beside `fixed`, the
 * seam on the device; else the fewest whose ring fits, the seam in pinned
 * host memory (pinning costs about as much as the PCIe copies save: more
 * strips with the seam on the device are cheaper than fewer without).
 * False: not even strips of one window column fit. */
static bool choose_strips(sw_job *r, uint64_t fixed)
{
    const sw_geometry *q = &r->geo;
    sw_strips *sp = &r->strips;
    uint64_t budget = r->budget, es = r->acc.acc_esize;
    /* A host image read through a ring of rows goes up again for every
     * strip (7 x 400 MiB took 0.9 s of host time on the GPU machine):
     * where the budget has room, the whole image stays on the device. */
    uint64_t img_whole = 0;
    if (!r->img.d_image && r->img.img_ring < q->g.size[0])
        img_whole = (uint64_t)(q->C * (q->g.size[0] - r->img.img_ring) * q->img_plane) * sizeof(float);
    for (int on_device = 1; on_device >= 0; on_device--)
        for (int whole = img_whole > 0; whole >= 0; whole--)
            for (int64_t per = q->g.n_starts[1] - 1; per >= 1; per--) {
                int32_t n;
                int64_t max_cols, seam_cols;
                strips_measure(r, per, &n, &max_cols, &seam_cols);
                uint64_t ring = (uint64_t)r->acc.ring_rows * (uint64_t)(q->K + 1) * (uint64_t)(max_cols * sp->rest) * es;
                uint64_t seam = (uint64_t)(q->K + 1) * (uint64_t)q->g.padded[0] * (uint64_t)(seam_cols * sp->rest) * es;
                if (fixed + ring + (on_device ? seam : 0) + (whole ? img_whole : 0) > budget)
                    continue;
                /* A strip's batches span more rows: the image's ring grows
                 * (measured only for a strip width that fits otherwise). */
                int64_t img_rows = r->img.img_ring;
                if (!whole && img_whole > 0) {
                    img_rows = image_ring_rows(r, per);
                    uint64_t more = img_rows > r->img.img_ring
                                        ? (uint64_t)(q->C * (img_rows - r->img.img_ring) * q->img_plane) * sizeof(float)
                                        : 0;
                    if (fixed + ring + (on_device ? seam : 0) + more > budget)
                        continue;
                }
                sp->max_cols = max_cols;
                sp->seam_cols = seam_cols;
                sp->seam_bytes = (size_t)seam;
                sp->seam_on_device = on_device;
                r->img.img_ring = whole ? q->g.size[0] : img_rows;
                return true;
            }
    sp->n = 1;
    sp->per = q->g.n_starts[1];
    return false;
}

/* The options' budget, "auto" resolved against the device's memory now:
 * what the contexts and the buffers kept from the last run hold is the
 * job's too (not free, yet to be used). */
static sg_status resolve_budget(sw_job *r)
{
    r->budget = r->o->max_memory;
    if (r->budget != SG_SW_MEMORY_AUTO)
        return SEGRT_OK;
    segrt_device_info di;
    SG_TRY(segrt_cuda_device_info(r->device, &di));
    uint64_t held = sw_context_bytes(r);
    const sg_sw_keep *k = r->mem.keep;
    for (int32_t i = 0; k && i < k->n; i++)
        if (k->block[i])
            held += k->bytes[i];
    r->budget = sg_sw_auto_budget(di.free_memory_bytes, di.total_memory_bytes, held);
    if (!r->budget)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY,
                        "sliding windows: CUDA device %d has %.1f MiB free of %.1f MiB, less than the room "
                        "--max-memory auto leaves for others",
                        (int)r->device, di.free_memory_bytes / 1048576.0, di.total_memory_bytes / 1048576.0);
    return SEGRT_OK;
}

/* Sizes the accumulators (ring and passes), the image ring and the result
 * staging against the memory budget, then allocates everything. */
sg_status sw_plan_memory(sw_job *r)
{
    const sg_sw_options *o = r->o;
    SG_TRY(resolve_budget(r));
    sw_geometry *q = &r->geo;
    sw_accum *a = &r->acc;
    sw_result *res = &r->out;
    int64_t rows0 = q->g.padded[0], roi0 = q->g.roi[0];
    size_t f = sizeof(float);
    size_t win_in = (size_t)(q->B * q->C * q->roi_numel) * f, win_out = (size_t)(q->B * q->K * q->roi_numel) * f;
    uint64_t fixed = sw_context_bytes(r) + (uint64_t)q->roi_numel * f + win_in + win_out;
    if (q->n_flips > 1)
        fixed += win_out;
    if (r->n_models > 1)
        fixed += win_out;
    for (int32_t m = 0; m < r->n_models; m++)
        for (size_t j = 1; j < a->dm[m].n; j++) {
            sg_tensor t = {a->dm[m].t[j].dtype, a->dm[m].t[j].rank, {0}, NULL};
            memcpy(t.dims, a->dm[m].t[j].dims, sizeof t.dims);
            fixed += sg_tensor_bytes(&t);
        }
    /* The image rows one batch reads, and room to upload the next ahead. */
    if (!r->img.d_image) {
        r->img.img_ring = image_ring_rows(r, 0);
        fixed += (uint64_t)(q->C * r->img.img_ring * q->img_plane) * f;
    }
    size_t result_bytes = (size_t)(q->n_img * res->out_ch * q->image_numel) * res->out_esize;
    uint64_t stage_row = (uint64_t)(res->out_ch * q->img_plane) * res->out_esize;
    /* Rows for a row sink: a ring of two windows' rows, so that a band of
     * rows finishing while the band before is still going down seldom
     * waits (finish_rows waits for the copies where it would overwrite
     * rows not down yet). */
    res->sink = o->row_sink != NULL;
    if (res->sink) {
        res->sink_ring = 2 * roi0 < q->g.size[0] ? 2 * roi0 : q->g.size[0];
        fixed += (uint64_t)res->sink_ring * stage_row;
    }
    bool whole_result = !res->sink && (res->out_memory == SEGRT_MEMORY_DEVICE || result_bytes <= SW_STAGE_WHOLE_BYTES);
    res->progressive = res->sink || (whole_result && res->out_memory == SEGRT_MEMORY_HOST);
    if (whole_result)
        fixed += result_bytes;
    a->acc_dtype = o->acc_dtype ? o->acc_dtype : SEGRT_DTYPE_FLOAT32;
    a->acc_esize = a->acc_dtype == SEGRT_DTYPE_FLOAT32 ? 4 : 2;
    uint64_t row_bytes = (uint64_t)(q->K + 1) * (uint64_t)q->pad_plane * a->acc_esize;
    /* Rows staged a slab at a time for a host result too large to make whole. */
    uint64_t staged_row = whole_result || res->sink ? 0 : stage_row;
    a->ring_rows = o->whole ? rows0 : (roi0 < rows0 ? roi0 : rows0);
    a->pass_rows = rows0;
    sw_strips *sp = &r->strips;
    sp->n = 1;
    sp->rest = 1;
    for (int32_t d = 2; d < q->g.n_dims; d++)
        sp->rest *= q->g.padded[d];
    sp->per = q->g.n_dims > 1 ? q->g.n_starts[1] : 1;
    sp->max_cols = q->g.n_dims > 1 ? q->g.padded[1] : 1;
    if (r->budget) {
        uint64_t need = fixed + (uint64_t)a->ring_rows * (row_bytes + staged_row);
        /* Over the budget: strips of axis 1 where the result is made
         * whole on the device (a strip finishes a part of every row),
         * else thinner slabs of rows, their windows run once per slab. */
        bool strips = need > r->budget && !o->whole && whole_result && q->g.n_dims > 1 &&
                      q->g.n_starts[1] > 1 && choose_strips(r, fixed);
        /* A budget the job cannot run in is a bad option, not a failure
         * of the run: INVALID_ARGUMENT, with the least that would do. */
        if (need > r->budget && !strips) {
            if (o->whole)
                return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                                "sliding windows: whole-image accumulators need %.1f MiB; the device-memory budget "
                                "is %.1f MiB",
                                need / 1048576.0, r->budget / 1048576.0);
            uint64_t per_row = row_bytes + staged_row;
            uint64_t room = fixed < r->budget ? r->budget - fixed : 0;
            int64_t rows = (int64_t)(room / per_row);
            if (rows < 1)
                return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                                "sliding windows: a device-memory budget of %.1f MiB is less than one window "
                                "needs: %.1f MiB (the networks, the window buffers%s %.1f MiB, one row of "
                                "accumulators %.1f MiB)",
                                r->budget / 1048576.0, (fixed + per_row) / 1048576.0,
                                whole_result ? " and the result" : res->sink ? " and the result's rows" : "",
                                fixed / 1048576.0, per_row / 1048576.0);
            a->ring_rows = a->pass_rows = rows;
        }
    }
    res->stage_rows = whole_result || res->sink ? 0 : (a->pass_rows < a->ring_rows ? a->pass_rows : a->ring_rows);
    if (res->stage_rows > q->g.size[0])
        res->stage_rows = q->g.size[0];

    SG_TRY(sw_dev_alloc(r, (size_t)q->roi_numel * f, "the importance map", (void **)&a->d_w));
    const sg_sw_keep *k = r->mem.keep;
    r->mem.w_ready = r->mem.reused && k->w_valid && k->w_dims == q->g.n_dims && k->w_blend == (int32_t)o->blend &&
                     k->w_sigma == o->sigma_scale &&
                     memcmp(k->w_roi, q->g.roi, sizeof(int64_t) * (size_t)q->g.n_dims) == 0;
    SG_TRY(sw_dev_alloc(r, win_in, "the window batch", (void **)&a->d_in));
    SG_TRY(sw_dev_alloc(r, win_out, "the predictions", (void **)&a->d_pred));
    a->d_model = a->d_pred;
    if (q->n_flips > 1)
        SG_TRY(sw_dev_alloc(r, win_out, "the mirrored predictions", (void **)&a->d_model));
    a->d_out = a->d_model;
    if (r->n_models > 1)
        SG_TRY(sw_dev_alloc(r, win_out, "the ensemble's predictions", (void **)&a->d_out));
    for (int32_t m = 0; m < r->n_models; m++)
        for (size_t j = 1; j < a->dm[m].n; j++) {
            sg_tensor t = {a->dm[m].t[j].dtype, a->dm[m].t[j].rank, {0}, NULL};
            memcpy(t.dims, a->dm[m].t[j].dims, sizeof t.dims);
            SG_TRY(sw_dev_alloc(r, sg_tensor_bytes(&t), "a model's other outputs", &a->dm[m].extra[j]));
            a->dm[m].t[j].data = a->dm[m].extra[j];
            a->dm[m].t[j].memory = SEGRT_MEMORY_DEVICE;
            a->dm[m].t[j].device = r->device;
        }
    size_t acc_bytes = (size_t)(a->ring_rows * (q->K + 1) * sp->max_cols * sp->rest) * a->acc_esize;
    if ((sp->n > 1 || r->keep) && !(sp->list = malloc(sizeof(int64_t) * (size_t)q->g.n_windows)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (sp->n > 1 && sp->seam_on_device)
        SG_TRY(sw_dev_alloc(r, sp->seam_bytes, "the sums strips share", &sp->seam));
    else if (sp->n > 1) {
        /* Pinned in place on huge pages: cudaMallocHost took 0.95 s for
         * 2.5 GiB on the GPU machine, most of a strip job's overhead. */
        sg_status hs = SEGRT_ERROR_OUT_OF_MEMORY;
        if ((sp->seam = host_huge_alloc(sp->seam_bytes)) &&
            (hs = r->ops->host_register(sp->seam, sp->seam_bytes)) == SEGRT_OK)
            sp->seam_registered = true;
        if (hs != SEGRT_OK) {
            free(sp->seam);
            sp->seam = NULL;
            hs = r->ops->host_alloc(sp->seam_bytes, &sp->seam);
        }
        if (hs != SEGRT_OK)
            return sg_error_prefix(hs, "sliding windows: %.1f MiB of pinned host memory for the sums strips share: ",
                                   sp->seam_bytes / 1048576.0);
    }
    SG_TRY(sw_dev_alloc(r, acc_bytes, "the accumulators", (void **)&a->d_acc));
    SG_TRY(r->ops->memset_async(a->d_acc, 0, acc_bytes, r->st.s));
    if (whole_result && res->out_memory == SEGRT_MEMORY_DEVICE) {
        SG_TRY(sw_dev_alloc_owned(r, result_bytes, "the result", &res->d_result));
    } else if (whole_result) {
        SG_TRY(sw_dev_alloc(r, result_bytes, "the result", &res->d_result));
        res->result_listed = true;
    } else if (res->sink) {
        SG_TRY(sw_dev_alloc(r, (size_t)(res->sink_ring * (int64_t)stage_row), "the result's rows", &res->d_result));
        res->result_listed = true;
    } else
        SG_TRY(sw_dev_alloc(r, (size_t)(res->stage_rows * (int64_t)stage_row), "the result's staging", &res->d_stage));
    res->h_bytes = res->sink ? 0 : result_bytes;
    if (res->out_memory == SEGRT_MEMORY_HOST && !res->sink && !(res->h_result = host_huge_alloc(result_bytes)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "sliding windows: no host memory for the %.1f MiB result",
                        result_bytes / 1048576.0);
    if (!r->img.d_image) {
        r->img.rows.image = -1;
        SG_TRY(sw_dev_alloc(r, (size_t)(q->C * r->img.img_ring * q->img_plane) * f, "the image's rows",
                            (void **)&r->img.rows.ring));
    }
    /* A kept buffer this run has not taken is not held through it. */
    sw_keep_drop_blocks(r->mem.keep);
    if (!r->img.d_image || res->out_memory == SEGRT_MEMORY_HOST || res->sink)
        SG_TRY(sw_take_pinned(r));
    return SEGRT_OK;
}
