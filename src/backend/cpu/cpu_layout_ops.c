/* Data movement and row-wise operators on the CPU with threads:
 *  - Transpose as a oneDNN reorder from a strided view of its input (a
 *    transpose is exactly that), threaded by oneDNN;
 *  - Softmax, LogSoftmax and LayerNormalization, whose rows along axis 0 are
 *    independent when their axis is past it, on their reference kernels over
 *    chunks of axis 0 in parallel: exact libm arithmetic (oneDNN's softmax
 *    loses NaN), on every core. */
#include "backend/cpu/cpu_internal.h"
#include "backend/ref/ref.h"

#include <omp.h>
#include <string.h>

sg_status cpu_build_transpose(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->outputs[0] < 0 || n->inputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    if (x < 0 || !p->tensors[x].has_md || !cpu_tensor_is_plain(&p->tensors[x]) || p->tensors[x].rank < 2)
        return SEGRT_ERROR_UNSUPPORTED;
    const cpu_tensor xt = p->tensors[x];
    int32_t rank = xt.rank, np;
    int32_t perm[SEGRT_MAX_RANK];
    const int64_t *pa = sg_attr_ints(n, "perm", &np);
    for (int32_t d = 0; d < rank; d++)
        perm[d] = pa ? (int32_t)pa[d] : rank - 1 - d;
    if (pa && np != rank)
        return SEGRT_ERROR_UNSUPPORTED;
    /* The input read in the output's dim order: dims and strides permuted. */
    dnnl_dims_t xs, vdims, vstrides;
    int64_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        xs[d] = s;
        s *= xt.dims[d];
    }
    int64_t ydims[SEGRT_MAX_RANK];
    for (int32_t d = 0; d < rank; d++) {
        if (perm[d] < 0 || perm[d] >= rank)
            return SEGRT_ERROR_UNSUPPORTED;
        vdims[d] = xt.dims[perm[d]];
        vstrides[d] = xs[perm[d]];
        ydims[d] = vdims[d];
    }
    dnnl_memory_desc_t view;
    if (dnnl_memory_desc_init_by_strides(&view, rank, vdims, xt.md.data_type, vstrides) != dnnl_success)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t xv;
    SG_TRY(cpu_tensor_new_alias(p, x, &view, &xv));
    int32_t y;
    SG_TRY(cpu_tensor_new_plain(p, CPU_T_ARENA, xt.dtype, rank, ydims, &y));
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, &view, p->engine, &p->tensors[y].md, p->engine, NULL) !=
        dnnl_success) {
        p->n_tensors -= 2;
        return SEGRT_ERROR_UNSUPPORTED;
    }
    cpu_step *st;
    sg_status s2 = cpu_step_new(p, n->name, &st);
    if (s2 != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s2;
    }
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    st->args[0] = (cpu_arg){DNNL_ARG_FROM, xv};
    st->args[1] = (cpu_arg){DNNL_ARG_TO, y};
    st->n_args = 2;
    p->value_tensor[n->outputs[0]] = y;
    return SEGRT_OK;
}

typedef struct rows_params {
    int64_t rows;      /* extent of axis 0 */
    int64_t row_elems; /* elements of one index of axis 0, per tensor arg */
} rows_params;

static sg_status rows_chunk(const cpu_step *s, sg_cpu_exec *e, int64_t from, int64_t to)
{
    sg_ref_kernel_fn fn = sg_ref_kernel(s->node->op);
    sg_tensor views[CPU_MAX_ARGS];
    const sg_tensor *in[CPU_MAX_ARGS];
    sg_tensor *out[CPU_MAX_ARGS];
    const rows_params *rp = s->params;
    int32_t n_in = s->n_args - s->n_outputs;
    for (int32_t a = 0; a < s->n_args; a++) {
        if (s->args[a].tensor < 0) {
            if (a < n_in)
                in[a] = NULL;
            else
                out[a - n_in] = NULL;
            continue;
        }
        const cpu_tensor *t = &e->plan->tensors[s->args[a].tensor];
        sg_tensor *v = &views[a];
        memset(v, 0, sizeof *v);
        v->dtype = t->dtype;
        v->rank = t->rank;
        memcpy(v->dims, t->dims, sizeof v->dims);
        v->data = e->ptr[s->args[a].tensor];
        /* Tensors with the full axis 0 (data in, outputs) are cut to the
         * chunk; parameters (scale, bias) stay whole. */
        if (t->rank >= 1 && t->dims[0] == rp->rows && (a == 0 || a >= n_in)) {
            int64_t per = 1;
            for (int32_t d = 1; d < t->rank; d++)
                per *= t->dims[d];
            v->dims[0] = to - from;
            v->data = (char *)v->data + from * per * (int64_t)segrt_dtype_size(t->dtype);
        }
        if (a < n_in)
            in[a] = v;
        else
            out[a - n_in] = v;
    }
    return fn(s->node, in, n_in, out, s->n_outputs);
}

static sg_status rows_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const rows_params *rp = s->params;
    int threads = omp_get_max_threads();
    int64_t chunks = rp->rows < threads ? rp->rows : threads;
    if (rp->rows * rp->row_elems < CPU_PARALLEL_MIN)
        chunks = 1;
    int failed = 0;
#pragma omp parallel for schedule(static) if (chunks > 1) reduction(| : failed)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t from = rp->rows * c / chunks, to = rp->rows * (c + 1) / chunks;
        failed |= rows_chunk(s, e, from, to) != SEGRT_OK;
    }
    /* A worker's message is in its own thread's buffer: redo it here. */
    return failed ? rows_chunk(s, e, 0, rp->rows) : SEGRT_OK;
}

sg_status cpu_build_rows(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    const sg_value *xv = n->n_inputs > 0 && n->inputs[0] >= 0 ? &p->g->values[n->inputs[0]] : NULL;
    if (!xv || xv->shape.rank < 2 || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t rank = xv->shape.rank;
    int64_t axis = sg_attr_int(n, "axis", -1);
    if (axis < 0)
        axis += rank;
    /* The reduction must not cross axis 0, and every output must keep it. */
    if (axis < 1 || axis >= rank)
        return SEGRT_ERROR_UNSUPPORTED;
    int64_t rows = xv->shape.d[0].size;
    for (int32_t k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0 && p->g->values[n->outputs[k]].shape.d[0].size != rows)
            return SEGRT_ERROR_UNSUPPORTED;
    if (n->n_inputs + n->n_outputs > CPU_MAX_ARGS)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t args[CPU_MAX_ARGS];
    for (int32_t k = 0; k < n->n_inputs; k++) {
        args[k] = -1;
        if (n->inputs[k] >= 0)
            SG_TRY(cpu_value_plain(p, n->inputs[k], &args[k]));
    }
    rows_params *rp = sg_malloc(sizeof *rp);
    if (!rp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    rp->rows = rows;
    rp->row_elems = 1;
    for (int32_t d = 1; d < rank; d++)
        rp->row_elems *= xv->shape.d[d].size;
    sg_status s = cpu_plain_outputs(p, n, args + n->n_inputs);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        free(rp);
        return s;
    }
    st->kernel = rows_kernel;
    st->params = rp;
    st->node = n;
    st->n_outputs = n->n_outputs;
    st->n_args = n->n_inputs + n->n_outputs;
    for (int32_t k = 0; k < st->n_args; k++)
        st->args[k] = (cpu_arg){k, args[k]};
    return SEGRT_OK;
}
