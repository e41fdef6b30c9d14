/* segrt's ScaledDotProductAttention (graph/infer_matmul.c) in float32 on
 * the CPU: blocks of query rows of one batch index on each thread, their
 * scores for every key in a buffer of the thread's (never the whole score
 * tensor in memory, as the MatMul, Softmax, MatMul chain it replaces had),
 * the softmax and the product with V over that buffer. The loops run along
 * contiguous keys or value dims, so that the compiler vectorizes them
 * without reassociating a sum. Other dtypes run on the reference kernel. */
#include "backend/cpu/cpu_internal.h"
#include "backend/sdpa_math.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define ROWS 16 /* query rows a task takes */

typedef struct sdpa_params {
    int32_t nbd;                   /* batch dims */
    int64_t batch[SEGRT_MAX_RANK]; /* their sizes */
    int64_t nb, S, L, D, Dv;
    bool kt; /* K given as K^T, [D, L] */
    float scale;
    int32_t n_masks;
    int64_t mst[2][SEGRT_MAX_RANK]; /* each mask's strides over batch dims, row, key (0: broadcast) */
    int64_t per_thread;             /* floats of the kernel scratch a thread takes: K^T, the block's scores */
    int32_t threads;                /* the team's size at most, as many parts as the scratch has */
} sdpa_params;

static sg_status sdpa_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const sdpa_params *pp = s->params;
    const float *q = e->ptr[s->args[0].tensor], *k = e->ptr[s->args[1].tensor], *v = e->ptr[s->args[2].tensor];
    const float *mk[2] = {NULL, NULL};
    for (int32_t m = 0; m < pp->n_masks; m++)
        mk[m] = e->ptr[s->args[3 + m].tensor];
    float *y = e->ptr[s->args[s->n_args - 1].tensor];
    const int64_t S = pp->S, L = pp->L, D = pp->D, Dv = pp->Dv, blocks = (S + ROWS - 1) / ROWS;
    const int64_t tasks = pp->nb * blocks;
#pragma omp parallel num_threads(pp->threads) if (tasks > 1 && pp->nb * S * L * (D + Dv) >= CPU_PARALLEL_MIN)
    {
        /* The thread's part of the scratch: K^T of the current batch index, the block's scores. */
        float *kt = (float *)e->kscratch + omp_get_thread_num() * pp->per_thread;
        int64_t kt_of = -1;
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; task++) {
            int64_t b = task / blocks, i0 = task % blocks * ROWS, rows = S - i0 < ROWS ? S - i0 : ROWS;
            const float *kb = k + b * L * D, *vb = v + b * L * Dv, *qb = q + (b * S + i0) * D;
            const float *ktb = kb; /* [D][L] */
            if (!pp->kt) {
                if (kt_of != b) {
                    for (int64_t t = 0; t < L; t++)
                        for (int64_t d = 0; d < D; d++)
                            kt[d * L + t] = kb[t * D + d];
                    kt_of = b;
                }
                ktb = kt;
            }
            float *sc = kt + D * L;
            int64_t moff[2];
            for (int32_t m = 0; m < pp->n_masks; m++)
                moff[m] = sg_sdpa_batch_offset(pp->batch, pp->nbd, b, pp->mst[m]);
            for (int64_t r = 0; r < rows; r++) {
                float *row = sc + r * L;
                for (int64_t t = 0; t < L; t++)
                    row[t] = 0;
                for (int64_t d = 0; d < D; d++) {
                    float qd = qb[r * D + d];
                    const float *kd = ktb + d * L;
                    for (int64_t t = 0; t < L; t++)
                        row[t] += qd * kd[t];
                }
                float mx = -INFINITY;
                for (int64_t t = 0; t < L; t++)
                    row[t] *= pp->scale;
                for (int32_t m = 0; m < pp->n_masks; m++) {
                    const int64_t *st = pp->mst[m];
                    const float *mrow = mk[m] + moff[m] + (i0 + r) * st[pp->nbd];
                    if (st[pp->nbd + 1])
                        for (int64_t t = 0; t < L; t++)
                            row[t] += mrow[t];
                    else
                        for (int64_t t = 0; t < L; t++)
                            row[t] += mrow[0];
                }
                for (int64_t t = 0; t < L; t++)
                    mx = row[t] > mx || row[t] != row[t] ? row[t] : mx;
                /* A weight below float's normal range is 0: it changes no
                 * sum, and subnormal products (a masked key's e^-100) take
                 * the CPU a hundred cycles each. */
                float sum = 0;
                for (int64_t t = 0; t < L; t++) {
                    float z = row[t] - mx;
                    row[t] = z < -87.0f ? 0.0f : expf(z);
                    sum += row[t];
                }
                float *yr = y + (b * S + i0 + r) * Dv;
                for (int64_t d = 0; d < Dv; d++)
                    yr[d] = 0;
                for (int64_t t = 0; t < L; t++) {
                    float pt = row[t];
                    const float *vt = vb + t * Dv;
                    for (int64_t d = 0; d < Dv; d++)
                        yr[d] += pt * vt[d];
                }
                float inv = 1 / sum;
                for (int64_t d = 0; d < Dv; d++)
                    yr[d] *= inv;
            }
        }
    }
    return SEGRT_OK;
}

sg_status cpu_build_sdpa(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    const sg_graph *g = p->g;
    int64_t qd[SEGRT_MAX_RANK], kd[SEGRT_MAX_RANK], vd[SEGRT_MAX_RANK];
    int32_t r = g->values[n->inputs[0]].shape.rank;
    /* Masks as inputs 3 and 4 in order (the kernel takes the present ones from 3 on). */
    bool m3 = n->n_inputs > 3 && n->inputs[3] >= 0, m4 = n->n_inputs > 4 && n->inputs[4] >= 0;
    if (n->n_inputs < 3 || n->outputs[0] < 0 || g->values[n->inputs[0]].dtype != SEGRT_DTYPE_FLOAT32 || r < 2 ||
        (m4 && !m3) || !sg_shape_dims(&g->values[n->inputs[0]].shape, qd) ||
        !sg_shape_dims(&g->values[n->inputs[1]].shape, kd) || !sg_shape_dims(&g->values[n->inputs[2]].shape, vd))
        return SEGRT_ERROR_UNSUPPORTED;
    sdpa_params pp = {.nbd = r - 2, .nb = 1, .kt = sg_attr_int(n, "k_transposed", 0) != 0};
    for (int32_t d = 0; d < r - 2; d++) {
        pp.batch[d] = qd[d];
        pp.nb *= qd[d];
    }
    pp.S = qd[r - 2];
    pp.D = qd[r - 1];
    pp.L = kd[r - 2 + pp.kt];
    pp.Dv = vd[r - 1];
    pp.scale = sg_attr_find(n, "scale") ? sg_attr_float(n, "scale", 1.0f) : 1.0f / sqrtf((float)(pp.D ? pp.D : 1));
    int64_t full[SEGRT_MAX_RANK];
    memcpy(full, qd, sizeof(int64_t) * (size_t)r);
    full[r - 1] = pp.L;
    for (int32_t m = 3; m < 3 + m3 + m4; m++) {
        const sg_value *mv = &g->values[n->inputs[m]];
        int64_t md[SEGRT_MAX_RANK];
        if (mv->shape.rank < 0 || !sg_shape_dims(&mv->shape, md) ||
            !sg_sdpa_mask_strides(md, mv->shape.rank, full, r, pp.mst[pp.n_masks++]))
            return SEGRT_ERROR_UNSUPPORTED;
    }
    /* Each thread's scratch, as many as a run's team may have. */
    pp.threads = p->threads > 0 ? p->threads : omp_get_num_procs();
    pp.per_thread = (pp.D * pp.L + ROWS * pp.L + 15) / 16 * 16;
    size_t scratch = sizeof(float) * (size_t)(pp.per_thread * pp.threads);
    if (scratch > p->kscratch_bytes)
        p->kscratch_bytes = scratch;
    return cpu_own_step(p, n, sdpa_kernel, &pp, sizeof pp);
}
