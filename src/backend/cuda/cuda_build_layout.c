/* Builders for the layout and indexing operators.
 *
 * Whatever can be a view is one: Reshape and its relatives, Transpose,
 * Slice, Split, Expand and Gather of one constant index become aliases of
 * their input's memory with other dims, strides and offset, and cost no
 * step at all. Every kernel takes strided views, so consumers read such
 * views directly; operators that need a dense layout (convolutions, matrix
 * products) ask cuda_value_as for one and get a conversion there. Views
 * are read-only: steps here only write tensors created here.
 *
 * The rest are steps: Concat (one COPY map per input into its slice of a
 * dense output), Tile and Pad (sgk_pad), DepthToSpace/SpaceToDepth (a COPY
 * between 6-D views), Gather, ScatterND and Einsum. */
#include "backend/cuda/cuda_internal.h"
#include "backend/grid_sample_math.h"
#include "graph/einsum.h"
#include "graph/infer.h"

#include <string.h>

/* Helpers --------------------------------------------------------------------- */

static sg_status value_dims(const sg_cuda_plan *p, const sg_node *n, int32_t v, int32_t *rank, int64_t *dims)
{
    const sg_value *val = &p->g->values[v];
    *rank = 0;
    if (!sg_shape_dims(&val->shape, dims))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "value `%s` has no static shape", val->name);
    *rank = val->shape.rank;
    return SEGRT_OK;
}

static sg_status input(sg_cuda_plan *p, const sg_node *n, int32_t i, int32_t *t)
{
    if (i >= n->n_inputs || n->inputs[i] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input %d is missing", i);
    return cuda_value_as(p, n->inputs[i], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, t);
}

static sg_status need_output(const sg_node *n, int32_t k)
{
    if (k >= n->n_outputs || n->outputs[k] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output %d is missing", k);
    return SEGRT_OK;
}

/* Checks that a view's dims are the graph's for value v. */
static sg_status check_dims(const sg_cuda_plan *p, const sg_node *n, int32_t v, int32_t rank,
                            const int64_t *dims)
{
    int32_t r;
    int64_t want[SEGRT_MAX_RANK];
    SG_TRY(value_dims(p, n, v, &r, want));
    if (r != rank || memcmp(want, dims, sizeof(int64_t) * (size_t)rank) != 0)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "computed dims differ from the inferred ones");
    return SEGRT_OK;
}

/* Makes graph value v a view of tensor `of`. */
static sg_status alias_value(sg_cuda_plan *p, int32_t v, int32_t of, int32_t rank, const int64_t *dims,
                             const int64_t *strides, int64_t offset)
{
    int32_t a;
    SG_TRY(cuda_tensor_alias(p, of, rank, dims, strides, offset, &a));
    cuda_value_set(p, v, a);
    return SEGRT_OK;
}

static int64_t numel_of(int32_t rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static sg_status run_copy(const cuda_step *s, cuda_run *r)
{
    sgk_view in = cuda_view(r, s->args[0]), out = cuda_view(r, s->args[1]);
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    return sgk_map(r->stream, &mp, &out, 1, &in);
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout ------------------------- */

/* Strides that view (odims, ostr) as ndims without moving data, or false
 * where no such view exists (numpy's _attempt_nocopy_reshape). Groups of
 * old dims whose product matches a group of new dims must be contiguous
 * among themselves; size-1 dims never matter. numel must be > 0. */
static bool reshape_strides(int32_t orank, const int64_t *odims, const int64_t *ostr, int32_t nrank,
                            const int64_t *ndims, int64_t *nstr)
{
    int64_t od[SEGRT_MAX_RANK], os[SEGRT_MAX_RANK];
    int32_t on = 0;
    for (int32_t d = 0; d < orank; d++)
        if (odims[d] != 1) {
            od[on] = odims[d];
            os[on++] = ostr[d];
        }
    int32_t oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < nrank && oi < on) {
        int64_t np = ndims[ni], op = od[oi];
        while (np != op) {
            if (np < op) {
                if (nj >= nrank)
                    return false;
                np *= ndims[nj++];
            } else {
                if (oj >= on)
                    return false;
                op *= od[oj++];
            }
        }
        for (int32_t ok = oi; ok < oj - 1; ok++)
            if (os[ok] != od[ok + 1] * os[ok + 1])
                return false;
        nstr[nj - 1] = os[oj - 1];
        for (int32_t nk = nj - 1; nk > ni; nk--)
            nstr[nk - 1] = nstr[nk] * ndims[nk];
        ni = nj++;
        oi = oj++;
    }
    int64_t last = ni >= 1 ? nstr[ni - 1] : 1;
    for (int32_t nk = ni; nk < nrank; nk++)
        nstr[nk] = last;
    return true;
}

static bool is_row_major(const cuda_tensor *t)
{
    int64_t want = 1;
    for (int32_t d = t->rank - 1; d >= 0; d--) {
        if (t->dims[d] != 1 && t->strides[d] != want)
            return false;
        want *= t->dims[d];
    }
    return true;
}

static sg_status run_fill_true(const cuda_step *s, cuda_run *r)
{
    sgk_view v = cuda_view(r, s->args[0]);
    int64_t n = numel_of(v.rank, v.dims);
    if (n > 0)
        CUDA_TRY(cudaMemsetAsync(v.data, 1, (size_t)n, r->stream)); /* bool true is byte 1 */
    return SEGRT_OK;
}

/* Dropout in inference: the identity. Training mode with a non-zero ratio
 * would drop at random, which the reference refuses too. */
static sg_status dropout_check(const sg_cuda_plan *p, const sg_node *n)
{
    int32_t tv = n->n_inputs > 2 ? n->inputs[2] : -1, rv = n->n_inputs > 1 ? n->inputs[1] : -1;
    if (tv < 0)
        return SEGRT_OK;
    const sg_value *t = &p->g->values[tv];
    int64_t numel;
    if (!t->data || !sg_shape_numel(&t->shape, &numel))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "a computed training_mode is not supported");
    if (numel < 1 || sg_dtype_load_i64(t->dtype, sg_blob_data(t->data), 0) == 0)
        return SEGRT_OK;
    if (rv < 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "training_mode=true with ratio 0.5 is not supported");
    const sg_value *r = &p->g->values[rv];
    if (!r->data || !sg_shape_numel(&r->shape, &numel) || numel < 1 ||
        sg_dtype_load_f64(r->dtype, sg_blob_data(r->data), 0) != 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "training_mode=true with a non-zero ratio is not supported");
    return SEGRT_OK;
}

sg_status cuda_build_reshape(sg_cuda_plan *p, const sg_node *n)
{
    if (n->op != SG_OP_RESHAPE && n->op != SG_OP_FLATTEN && n->op != SG_OP_SQUEEZE &&
        n->op != SG_OP_UNSQUEEZE && n->op != SG_OP_IDENTITY && n->op != SG_OP_DROPOUT)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "not a reshape");
    SG_TRY(need_output(n, 0));
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    int32_t yv = n->outputs[0];

    if (n->op == SG_OP_IDENTITY || n->op == SG_OP_DROPOUT) {
        if (n->op == SG_OP_DROPOUT)
            SG_TRY(dropout_check(p, n));
        /* Same dims: the output is the input's tensor, in its layout. */
        cuda_value_set(p, yv, x);
        int32_t mv = n->op == SG_OP_DROPOUT && n->n_outputs > 1 ? n->outputs[1] : -1;
        if (mv >= 0 && (p->uses[mv] > 0 || p->g->values[mv].is_output)) {
            /* The mask of an inference Dropout keeps everything. */
            int32_t m;
            SG_TRY(cuda_output_new(p, n, 1, SEGRT_DTYPE_BOOL, CUDA_LAYOUT_PLAIN, &m));
            cuda_step *st;
            SG_TRY(cuda_step_new(p, n, "segrt fill", run_fill_true, &m, 1, 1, NULL, NULL, &st));
        }
        return SEGRT_OK;
    }

    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
    SG_TRY(value_dims(p, n, yv, &rank, dims));
    const cuda_tensor xt = p->tensors[x];
    if (numel_of(xt.rank, xt.dims) != numel_of(rank, dims))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "element counts differ");
    /* A view of the input as it is where its strides allow (always for
     * Squeeze and Unsqueeze, and for channels-last tensors whose merged
     * dims are contiguous, e.g. [N, C, 1, 1] -> [N, C]); otherwise a view
     * of its row-major form. */
    if (numel_of(rank, dims) > 0 && reshape_strides(xt.rank, xt.dims, xt.strides, rank, dims, strides))
        return alias_value(p, yv, x, rank, dims, strides, 0);
    int32_t plain;
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_PLAIN, &plain));
    if (!is_row_major(&p->tensors[plain])) {
        /* cuda_value_as gave a plain view that is not dense: copy it. */
        const cuda_tensor pt = p->tensors[plain];
        int32_t args[2] = {plain, -1};
        SG_TRY(cuda_tensor_new(p, pt.dtype, pt.rank, pt.dims, CUDA_LAYOUT_PLAIN, &args[1]));
        cuda_step *st;
        SG_TRY(cuda_step_new(p, n, "segrt map", run_copy, args, 2, 1, NULL, NULL, &st));
        plain = args[1];
    }
    cuda_layout_strides(CUDA_LAYOUT_PLAIN, rank, dims, strides);
    return alias_value(p, yv, plain, rank, dims, strides, 0);
}

/* Transpose --------------------------------------------------------------------------- */

sg_status cuda_build_transpose(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    int32_t r = xt.rank, count = 0;
    const int64_t *pa = sg_attr_ints(n, "perm", &count);
    if (pa && count != r)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "perm has %d values for rank %d", count, r);
    int64_t dims[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
    bool used[SEGRT_MAX_RANK] = {false};
    for (int32_t i = 0; i < r; i++) {
        int64_t q = pa ? pa[i] : r - 1 - i;
        if (q < 0 || q >= r || used[q])
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "perm is not a permutation");
        used[q] = true;
        dims[i] = xt.dims[q];
        strides[i] = xt.strides[q];
    }
    SG_TRY(check_dims(p, n, n->outputs[0], r, dims));
    return alias_value(p, n->outputs[0], x, r, dims, strides, 0);
}

/* Slice -------------------------------------------------------------------------------- */

/* Reads constant int input i (i < 0: none) or, where that input is
 * absent and attr is not NULL, the INTS attribute older opsets had in its
 * place. *count is -1 when neither is there; a computed input is
 * UNSUPPORTED (the plan has static shapes, not static values). */
static sg_status const_ints(const sg_cuda_plan *p, const sg_node *n, int32_t i, const char *attr, int64_t *vals,
                            int32_t cap, int32_t *count)
{
    *count = -1;
    if (i >= 0 && i < n->n_inputs && n->inputs[i] >= 0) {
        SG_TRY(sg_infer_const_ints(p->g, n, i, vals, cap, count));
        if (*count < 0)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "input %d must be a constant", i);
        return SEGRT_OK;
    }
    int32_t c = 0;
    const int64_t *a = attr ? sg_attr_ints(n, attr, &c) : NULL;
    if (a) {
        if (c > cap)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`%s` has %d values", attr, c);
        memcpy(vals, a, sizeof(int64_t) * (size_t)c);
        *count = c;
    }
    return SEGRT_OK;
}

sg_status cuda_build_slice(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    int64_t starts[SEGRT_MAX_RANK], ends[SEGRT_MAX_RANK], axes[SEGRT_MAX_RANK], steps[SEGRT_MAX_RANK];
    int32_t ns, ne, na, np;
    /* Opset 10 moved starts, ends and axes from attributes to inputs. */
    SG_TRY(const_ints(p, n, 1, "starts", starts, SEGRT_MAX_RANK, &ns));
    SG_TRY(const_ints(p, n, 2, "ends", ends, SEGRT_MAX_RANK, &ne));
    SG_TRY(const_ints(p, n, 3, "axes", axes, SEGRT_MAX_RANK, &na));
    SG_TRY(const_ints(p, n, 4, NULL, steps, SEGRT_MAX_RANK, &np));
    if (ns < 0 || ne < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "starts and ends are required");
    if (na < 0)
        for (na = 0; na < ns; na++)
            axes[na] = na;
    if (np < 0)
        for (np = 0; np < ns; np++)
            steps[np] = 1;
    if (ne != ns || na != ns || np != ns)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "starts, ends, axes and steps have different lengths");
    /* The reference's arithmetic, step by step. */
    int64_t start[SEGRT_MAX_RANK], step[SEGRT_MAX_RANK], len[SEGRT_MAX_RANK];
    bool seen[SEGRT_MAX_RANK] = {false};
    for (int32_t d = 0; d < xt.rank; d++) {
        start[d] = 0;
        step[d] = 1;
        len[d] = xt.dims[d];
    }
    for (int32_t i = 0; i < ns; i++) {
        int32_t a;
        SG_TRY(sg_infer_axis(n, axes[i], xt.rank, &a));
        if (seen[a])
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axis %d is repeated", a);
        seen[a] = true;
        int64_t dim = xt.dims[a], st = steps[i], b = starts[i], e = ends[i], count;
        if (st == 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "steps must not be 0");
        st = clamp64(st, -((int64_t)1 << 62), (int64_t)1 << 62);
        if (b < 0)
            b += dim;
        if (e < 0)
            e += dim;
        if (st > 0) {
            b = clamp64(b, 0, dim);
            e = clamp64(e, 0, dim);
            count = e > b ? (e - b + st - 1) / st : 0;
        } else {
            b = clamp64(b, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            count = b > e ? (b - e - st - 1) / -st : 0;
        }
        start[a] = count ? b : 0;
        step[a] = count > 1 ? st : 1; /* a step over one element never moves */
        len[a] = count;
    }
    int64_t strides[SEGRT_MAX_RANK], off = 0;
    for (int32_t d = 0; d < xt.rank; d++) {
        off += start[d] * xt.strides[d];
        strides[d] = step[d] * xt.strides[d];
    }
    SG_TRY(check_dims(p, n, n->outputs[0], xt.rank, len));
    return alias_value(p, n->outputs[0], x, xt.rank, len, strides, off);
}

/* Split ---------------------------------------------------------------------------------- */

sg_status cuda_build_split(sg_cuda_plan *p, const sg_node *n)
{
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    if (xt.rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot split a scalar");
    int32_t axis, n_out = n->n_outputs;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), xt.rank, &axis));
    int64_t dim = xt.dims[axis], at = 0;
    /* Each output's length along axis: its inferred dims where it is
     * used; an omitted output takes the reference's even share (sizes
     * given explicitly with an omitted output are taken from them). */
    int64_t sizes[CUDA_MAX_ARGS];
    if (n_out < 1 || n_out > CUDA_MAX_ARGS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d outputs; at most %d are supported", n_out,
                             CUDA_MAX_ARGS);
    bool all = true;
    for (int32_t j = 0; j < n_out; j++)
        all &= n->outputs[j] >= 0;
    if (all) {
        for (int32_t j = 0; j < n_out; j++) {
            const sg_value *v = &p->g->values[n->outputs[j]];
            if (v->shape.rank != xt.rank || v->shape.d[axis].size < 0)
                return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output %d has no static shape", j);
            sizes[j] = v->shape.d[axis].size;
        }
    } else {
        int32_t count = -1;
        if (n->n_inputs > 1 && n->inputs[1] >= 0)
            SG_TRY(const_ints(p, n, 1, NULL, sizes, CUDA_MAX_ARGS, &count));
        else
            SG_TRY(const_ints(p, n, -1, "split", sizes, CUDA_MAX_ARGS, &count));
        if (count > 0 && count != n_out)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split has %d sizes for %d outputs", count, n_out);
        if (count <= 0) {
            int64_t chunk = (dim + n_out - 1) / n_out;
            for (int32_t j = 0; j < n_out; j++) {
                int64_t left = dim - chunk * j;
                sizes[j] = left < 0 ? 0 : (left < chunk ? left : chunk);
            }
        }
    }
    for (int32_t j = 0; j < n_out; j++) {
        if (sizes[j] < 0 || at + sizes[j] > dim)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split sizes exceed axis %d of %lld", axis,
                                 (long long)dim);
        if (n->outputs[j] >= 0) {
            int64_t dims[SEGRT_MAX_RANK];
            memcpy(dims, xt.dims, sizeof dims);
            dims[axis] = sizes[j];
            SG_TRY(check_dims(p, n, n->outputs[j], xt.rank, dims));
            SG_TRY(alias_value(p, n->outputs[j], x, xt.rank, dims, xt.strides, at * xt.strides[axis]));
        }
        at += sizes[j];
    }
    if (at != dim)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split sizes sum to %lld, not %lld", (long long)at,
                             (long long)dim);
    return SEGRT_OK;
}

/* Expand --------------------------------------------------------------------------------- */

/* A view with stride 0 along the broadcast dims: no copy. Consumers that
 * need dense data get it from cuda_value_as. */
sg_status cuda_build_expand(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
    SG_TRY(value_dims(p, n, n->outputs[0], &rank, dims));
    if (rank < xt.rank)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output rank below the input's");
    for (int32_t d = 0; d < rank; d++) {
        int32_t xd = d - (rank - xt.rank);
        if (xd < 0 || (xt.dims[xd] == 1 && dims[d] != 1))
            strides[d] = 0;
        else if (xt.dims[xd] == dims[d])
            strides[d] = xt.strides[xd];
        else
            return sg_node_error(n, SEGRT_ERROR_INTERNAL, "dim %d does not broadcast", d);
    }
    return alias_value(p, n->outputs[0], x, rank, dims, strides, 0);
}

/* Concat --------------------------------------------------------------------------------- */

typedef struct concat_step {
    int32_t n_in, axis;
    int64_t at[CUDA_MAX_ARGS];   /* each input's start along axis */
    bool placed[CUDA_MAX_ARGS];  /* written in place by its producer: nothing to copy */
} concat_step;

static sg_status run_concat(const cuda_step *s, cuda_run *r)
{
    const concat_step *c = s->params;
    sgk_view out = cuda_view(r, s->args[c->n_in]);
    size_t es = segrt_dtype_size(out.dtype);
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    for (int32_t i = 0; i < c->n_in; i++) {
        sgk_view in = cuda_view(r, s->args[i]);
        if (c->placed[i] || numel_of(in.rank, in.dims) == 0)
            continue;
        /* The output's slice for this input: its dims, the output's strides. */
        sgk_view dst = out;
        dst.dims[c->axis] = in.dims[c->axis];
        dst.data = (char *)out.data + (ptrdiff_t)(c->at[i] * out.strides[c->axis]) * (ptrdiff_t)es;
        SG_TRY(sgk_map(r->stream, &mp, &dst, 1, &in));
    }
    return SEGRT_OK;
}

sg_status cuda_build_concat(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    SG_TRY(value_dims(p, n, n->outputs[0], &rank, dims));
    if (rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot concatenate scalars");
    int32_t n_in = n->n_inputs, axis;
    if (n_in < 1 || n_in >= CUDA_MAX_ARGS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d inputs; at most %d are supported", n_in,
                             CUDA_MAX_ARGS - 1);
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), rank, &axis));
    /* A normalisation left to the readers of an input (cuda_build_norm.c):
     * the first input, written in place, stays the norm's input and the
     * result is left normalised over its slice to the one convolution
     * that reads it (concat_takes_norm there); any other is applied. */
    cuda_deferred_norm kept;
    memset(&kept, 0, sizeof kept);
    kept.value = -1;
    for (int32_t i = 0; i < n_in; i++) {
        const cuda_deferred_norm *dn = n->inputs[i] >= 0 ? cuda_deferred_norm_find(p, n->inputs[i]) : NULL;
        if (!dn)
            continue;
        bool once = true;
        for (int32_t j = 0; j < n_in; j++)
            once = once && (j == i || n->inputs[j] != n->inputs[i]);
        if (i == 0 && axis == 1 && once && cuda_deferred_norm_whole(p, dn))
            kept = *dn;
        else
            SG_TRY(cuda_deferred_norm_apply(p, n->inputs[i]));
    }
    concat_step *c = sg_calloc(1, sizeof *c);
    if (!c)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int32_t args[CUDA_MAX_ARGS];
    int64_t at = 0;
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < n_in && s == SEGRT_OK; i++) {
        if (i == 0 && kept.value >= 0)
            args[i] = kept.raw;
        else
            s = input(p, n, i, &args[i]);
        if (s != SEGRT_OK)
            break;
        const cuda_tensor *t = &p->tensors[args[i]];
        bool ok = t->rank == rank;
        for (int32_t d = 0; ok && d < rank; d++)
            ok = d == axis || t->dims[d] == dims[d];
        if (!ok)
            s = sg_node_error(n, SEGRT_ERROR_INTERNAL, "input %d does not fit the output", i);
        c->at[i] = at;
        at += ok ? t->dims[axis] : 0;
    }
    if (s == SEGRT_OK && at != dims[axis])
        s = sg_node_error(n, SEGRT_ERROR_INTERNAL, "inputs do not add up to the output along axis %d", axis);
    if (s == SEGRT_OK)
        s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, args[0]), &args[n_in]);
    if (s != SEGRT_OK) {
        free(c);
        return s;
    }
    c->n_in = n_in;
    c->axis = axis;
    /* Where a producer writes through a run-time view, its result becomes
     * its slice of the output: the concatenation costs no copy (a UNet's
     * skip connection and upsampled path, say). A tensor that appears
     * twice is placed once. */
    bool all_placed = true, in_place = !cuda_off(p, SG_KERNEL_CONCAT_SLICES);
    for (int32_t i = 0; i < n_in; i++) {
        bool repeated = false;
        for (int32_t j = 0; j < i && !repeated; j++)
            repeated = args[j] == args[i];
        c->placed[i] = !repeated && in_place && cuda_place_in_slice(p, args[i], args[n_in], axis, c->at[i]);
        if (i == 0 && kept.value >= 0 && !c->placed[i]) {
            /* Not in place: the copy would take the norm's input. */
            sg_status as = cuda_deferred_norm_apply(p, n->inputs[0]);
            if (as != SEGRT_OK) {
                free(c);
                return as;
            }
            args[0] = cuda_value(p, n->inputs[0]);
            c->placed[0] = in_place && cuda_place_in_slice(p, args[0], args[n_in], axis, c->at[0]);
            kept.value = -1;
        }
        all_placed = all_placed && c->placed[i];
    }
    if (kept.value >= 0) {
        cuda_deferred_norm part = kept;
        part.value = n->outputs[0];
        part.raw = args[n_in];
        part.c_at = c->at[0];
        sg_status ps = cuda_deferred_norm_put(p, &part);
        if (ps != SEGRT_OK) {
            free(c);
            return ps;
        }
    }
    if (all_placed) {
        free(c);
        return SEGRT_OK;
    }
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "segrt concat", run_concat, args, n_in + 1, 1, c, NULL, &st));
    st->any_view = (((uint64_t)1 << n_in) - 1); /* its inputs: copied through their views */
    return SEGRT_OK;
}

/* Tile and Pad ------------------------------------------------------------------------------- */

typedef struct pad_step {
    sgk_pad_mode mode;
    double value;
    int32_t rank;
    int64_t lo[SEGRT_MAX_RANK];  /* input elements cropped at the start (negative pads) */
    int64_t len[SEGRT_MAX_RANK]; /* input elements kept */
    int64_t pb[SEGRT_MAX_RANK];  /* non-negative begin padding */
} pad_step;

static sg_status run_pad(const cuda_step *s, cuda_run *r)
{
    const pad_step *ps = s->params;
    sgk_view in = cuda_view(r, s->args[0]), out = cuda_view(r, s->args[1]);
    /* Negative pads crop first, as the spec's reference does. */
    int64_t off = 0;
    for (int32_t d = 0; d < ps->rank; d++) {
        off += ps->lo[d] * in.strides[d];
        in.dims[d] = ps->len[d];
    }
    in.data = (char *)in.data + (ptrdiff_t)off * (ptrdiff_t)segrt_dtype_size(in.dtype);
    return sgk_pad(r->stream, &out, &in, ps->pb, ps->mode, ps->value);
}

/* Adds a pad step from x into a new dense output of n. */
static sg_status pad_step_add(sg_cuda_plan *p, const sg_node *n, int32_t x, pad_step *ps)
{
    int32_t args[2] = {x, -1};
    sg_status s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, x), &args[1]);
    if (s != SEGRT_OK) {
        free(ps);
        return s;
    }
    cuda_step *st;
    return cuda_step_new(p, n, "segrt pad", run_pad, args, 2, 1, ps, NULL, &st);
}

sg_status cuda_build_tile(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    SG_TRY(value_dims(p, n, n->outputs[0], &rank, dims));
    if (rank != xt.rank)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output rank differs from the input's");
    /* The output's dims say everything: wrap-mode padding from 0 repeats
     * the input along every dim however many times the dims ask. */
    pad_step *ps = sg_calloc(1, sizeof *ps);
    if (!ps)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    ps->mode = SGK_PAD_WRAP;
    ps->rank = rank;
    for (int32_t d = 0; d < rank; d++) {
        ps->len[d] = xt.dims[d];
        if (xt.dims[d] == 0 ? dims[d] != 0 : dims[d] % xt.dims[d] != 0) {
            free(ps);
            return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output dim %d is not a multiple of the input's", d);
        }
    }
    return pad_step_add(p, n, x, ps);
}

sg_status cuda_build_pad(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    const char *ms = sg_attr_string(n, "mode", "constant");
    sgk_pad_mode mode;
    if (strcmp(ms, "constant") == 0)
        mode = SGK_PAD_CONSTANT;
    else if (strcmp(ms, "reflect") == 0)
        mode = SGK_PAD_REFLECT;
    else if (strcmp(ms, "edge") == 0)
        mode = SGK_PAD_EDGE;
    else if (strcmp(ms, "wrap") == 0)
        mode = SGK_PAD_WRAP;
    else
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "mode \"%s\" is not supported", ms);
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    int32_t r = xt.rank;
    /* pads (input 1 from opset 11, an attribute before), the constant
     * (input 2, or the `value` attribute) and axes (input 3, opset 18). */
    int64_t pads[2 * SEGRT_MAX_RANK], axes[SEGRT_MAX_RANK];
    int32_t np, na;
    SG_TRY(const_ints(p, n, 1, "pads", pads, 2 * SEGRT_MAX_RANK, &np));
    if (np < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads are missing");
    SG_TRY(const_ints(p, n, 3, NULL, axes, SEGRT_MAX_RANK, &na));
    if (na < 0)
        for (na = 0; na < r; na++)
            axes[na] = na;
    if (np != 2 * na)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads has %d values for %d axes", np, na);
    double value = sg_attr_float(n, "value", 0.0f);
    int32_t cv = n->n_inputs > 2 ? n->inputs[2] : -1;
    if (cv >= 0) {
        const sg_value *v = &p->g->values[cv];
        int64_t numel;
        if (!v->data || !sg_shape_numel(&v->shape, &numel))
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "a computed constant_value is not supported");
        value = numel >= 1 ? sg_dtype_load_f64(v->dtype, sg_blob_data(v->data), 0) : 0.0;
    }
    pad_step *ps = sg_calloc(1, sizeof *ps);
    if (!ps)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    ps->mode = mode;
    ps->value = value;
    ps->rank = r;
    int64_t pe[SEGRT_MAX_RANK] = {0}, want[SEGRT_MAX_RANK];
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < na && s == SEGRT_OK; i++) {
        int32_t a;
        s = sg_infer_axis(n, axes[i], r, &a);
        if (s != SEGRT_OK)
            break;
        int64_t b = pads[i], e = pads[na + i];
        if (b < -xt.dims[a] || e < -xt.dims[a] || b > SG_MAX_DIM || e > SG_MAX_DIM)
            s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads for axis %d are out of range", a);
        ps->pb[a] = b;
        pe[a] = e;
    }
    for (int32_t d = 0; d < r && s == SEGRT_OK; d++) {
        want[d] = xt.dims[d] + ps->pb[d] + pe[d];
        ps->lo[d] = ps->pb[d] < 0 ? -ps->pb[d] : 0;
        ps->len[d] = xt.dims[d] - ps->lo[d] - (pe[d] < 0 ? -pe[d] : 0);
        ps->pb[d] = ps->pb[d] < 0 ? 0 : ps->pb[d];
        if (want[d] < 0 || ps->len[d] < 0)
            s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads for axis %d crop below zero", d);
        else if (mode != SGK_PAD_CONSTANT && ps->len[d] == 0 && want[d] > 0)
            s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot %s-pad an empty axis", ms);
    }
    if (s == SEGRT_OK)
        s = check_dims(p, n, n->outputs[0], r, want);
    if (s != SEGRT_OK) {
        free(ps);
        return s;
    }
    return pad_step_add(p, n, x, ps);
}

/* DepthToSpace, SpaceToDepth ---------------------------------------------------------------------- */

typedef struct depth_space_step {
    bool to_space, crd;
    int64_t b;
} depth_space_step;

/* A COPY between 6-D views of input and output, built from their strides
 * at run time, so any layout of either works. */
static sg_status run_depth_space(const cuda_step *s, cuda_run *r)
{
    const depth_space_step *ds = s->params;
    sgk_view x = cuda_view(r, s->args[0]), y = cuda_view(r, s->args[1]);
    sgk_view in = x, out = y;
    in.rank = out.rank = 6;
    int64_t b = ds->b, N = x.dims[0];
    const int64_t *xs = x.strides, *ys = y.strides;
    if (ds->to_space) {
        /* Output [N, c, H*b, W*b] seen as [N, c, H, b(i), W, b(j)]; the
         * input channel is (i*b + j)*c + ch for DCR, ch*b*b + i*b + j for CRD. */
        int64_t c = y.dims[1], H = x.dims[2], W = x.dims[3];
        int64_t d6[6] = {N, c, H, b, W, b};
        int64_t o6[6] = {ys[0], ys[1], b * ys[2], ys[2], b * ys[3], ys[3]};
        int64_t i6[6] = {xs[0], ds->crd ? b * b * xs[1] : xs[1], xs[2], ds->crd ? b * xs[1] : b * c * xs[1],
                         xs[3], ds->crd ? xs[1] : c * xs[1]};
        memcpy(out.dims, d6, sizeof d6);
        memcpy(in.dims, d6, sizeof d6);
        memcpy(out.strides, o6, sizeof o6);
        memcpy(in.strides, i6, sizeof i6);
    } else {
        /* Output [N, C*b*b, h, w] seen as [N, b(i), b(j), C, h, w]: channel
         * (i*b + j)*C + ch reads input [n, ch, y*b + i, x*b + j]. */
        int64_t C = x.dims[1], h = y.dims[2], w = y.dims[3];
        int64_t d6[6] = {N, b, b, C, h, w};
        int64_t o6[6] = {ys[0], b * C * ys[1], C * ys[1], ys[1], ys[2], ys[3]};
        int64_t i6[6] = {xs[0], xs[2], xs[3], xs[1], b * xs[2], b * xs[3]};
        memcpy(out.dims, d6, sizeof d6);
        memcpy(in.dims, d6, sizeof d6);
        memcpy(out.strides, o6, sizeof o6);
        memcpy(in.strides, i6, sizeof i6);
    }
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    return sgk_map(r->stream, &mp, &out, 1, &in);
}

sg_status cuda_build_depth_space(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    bool to_space = n->op == SG_OP_DEPTH_TO_SPACE;
    if (!to_space && n->op != SG_OP_SPACE_TO_DEPTH)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "not DepthToSpace or SpaceToDepth");
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    if (xt.rank != 4)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank 4");
    int64_t b = sg_attr_int(n, "blocksize", 0);
    if (b < 1 || b > ((int64_t)1 << 20))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "blocksize must be >= 1");
    const char *mode = sg_attr_string(n, "mode", "DCR");
    bool crd = to_space && strcmp(mode, "CRD") == 0;
    if (to_space && !crd && strcmp(mode, "DCR") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "mode \"%s\" is not valid", mode);
    int64_t N = xt.dims[0], C = xt.dims[1], H = xt.dims[2], W = xt.dims[3], want[4];
    if (to_space) {
        if (C % (b * b) != 0)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "channels %lld do not divide by blocksize^2", (long long)C);
        want[0] = N, want[1] = C / (b * b), want[2] = H * b, want[3] = W * b;
    } else {
        if (H % b != 0 || W % b != 0)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "spatial dims do not divide by blocksize");
        want[0] = N, want[1] = C * b * b, want[2] = H / b, want[3] = W / b;
    }
    SG_TRY(check_dims(p, n, n->outputs[0], 4, want));
    depth_space_step *ds = sg_calloc(1, sizeof *ds);
    if (!ds)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    ds->to_space = to_space;
    ds->crd = crd;
    ds->b = b;
    int32_t args[2] = {x, -1};
    sg_status s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, x), &args[1]);
    if (s != SEGRT_OK) {
        free(ds);
        return s;
    }
    cuda_step *st;
    return cuda_step_new(p, n, "segrt map", run_depth_space, args, 2, 1, ds, NULL, &st);
}

/* Gather --------------------------------------------------------------------------------------- */

typedef struct gather_step {
    int32_t axis;
} gather_step;

static sg_status run_gather(const cuda_step *s, cuda_run *r)
{
    const gather_step *gs = s->params;
    sgk_view data = cuda_view(r, s->args[0]), idx = cuda_view(r, s->args[1]), out = cuda_view(r, s->args[2]);
    return sgk_gather(r->stream, &out, &data, &idx, gs->axis, r->err);
}

sg_status cuda_build_gather(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs data and indices");
    const sg_value *iv = &p->g->values[n->inputs[1]];
    if (iv->dtype != SEGRT_DTYPE_INT32 && iv->dtype != SEGRT_DTYPE_INT64)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must be int32 or int64");
    int32_t x;
    SG_TRY(input(p, n, 0, &x));
    const cuda_tensor xt = p->tensors[x];
    if (xt.rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "data must have rank >= 1");
    int32_t axis;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), xt.rank, &axis));
    int64_t inumel;
    if (iv->data && sg_shape_numel(&iv->shape, &inumel) && inumel == 1 && iv->shape.rank >= 0 &&
        xt.rank - 1 + iv->shape.rank <= SEGRT_MAX_RANK) {
        /* One constant index (x[:, k] and the like): a view at its offset. */
        int64_t dim = xt.dims[axis], v = sg_dtype_load_i64(iv->dtype, sg_blob_data(iv->data), 0);
        if (v < -dim || v >= dim)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index %lld is out of range for axis %d of size %lld",
                                 (long long)v, axis, (long long)dim);
        v = v < 0 ? v + dim : v;
        int64_t dims[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
        int32_t k = 0;
        for (int32_t d = 0; d < axis; d++, k++)
            dims[k] = xt.dims[d], strides[k] = xt.strides[d];
        for (int32_t d = 0; d < iv->shape.rank; d++, k++)
            dims[k] = 1, strides[k] = 0;
        for (int32_t d = axis + 1; d < xt.rank; d++, k++)
            dims[k] = xt.dims[d], strides[k] = xt.strides[d];
        SG_TRY(check_dims(p, n, n->outputs[0], k, dims));
        return alias_value(p, n->outputs[0], x, k, dims, strides, v * xt.strides[axis]);
    }
    int32_t args[3] = {x, -1, -1};
    SG_TRY(input(p, n, 1, &args[1]));
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[2]));
    gather_step *gs = sg_calloc(1, sizeof *gs);
    if (!gs)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    gs->axis = axis;
    cuda_step *st;
    return cuda_step_new(p, n, "segrt gather", run_gather, args, 3, 1, gs, NULL, &st);
}

/* ScatterND ---------------------------------------------------------------------------------------- */

typedef struct scatter_step {
    sgk_scatter_reduce reduction;
} scatter_step;

static sg_status run_scatter_nd(const cuda_step *s, cuda_run *r)
{
    const scatter_step *ss = s->params;
    sgk_view data = cuda_view(r, s->args[0]), idx = cuda_view(r, s->args[1]), upd = cuda_view(r, s->args[2]),
             out = cuda_view(r, s->args[3]);
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    SG_TRY(sgk_map(r->stream, &mp, &out, 1, &data));
    return sgk_scatter_nd(r->stream, &out, &idx, &upd, ss->reduction, r->err);
}

/* ScatterND's and ScatterElements' reduction attribute. */
static sg_status scatter_reduction(const sg_node *n, sgk_scatter_reduce *out)
{
    const char *red = sg_attr_string(n, "reduction", "none");
    if (strcmp(red, "none") == 0)
        *out = SGK_SCATTER_NONE;
    else if (strcmp(red, "add") == 0)
        *out = SGK_SCATTER_ADD;
    else if (strcmp(red, "mul") == 0)
        *out = SGK_SCATTER_MUL;
    else if (strcmp(red, "max") == 0)
        *out = SGK_SCATTER_MAX;
    else if (strcmp(red, "min") == 0)
        *out = SGK_SCATTER_MIN;
    else
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "reduction \"%s\" is not supported", red);
    return SEGRT_OK;
}

sg_status cuda_build_scatter_nd(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    sgk_scatter_reduce reduction;
    SG_TRY(scatter_reduction(n, &reduction));
    int32_t args[4];
    for (int32_t i = 0; i < 3; i++)
        SG_TRY(input(p, n, i, &args[i]));
    const cuda_tensor it = p->tensors[args[1]];
    if ((it.dtype != SEGRT_DTYPE_INT32 && it.dtype != SEGRT_DTYPE_INT64) || it.rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must be int32 or int64 of rank >= 1");
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, args[0]), &args[3]));
    scatter_step *ss = sg_calloc(1, sizeof *ss);
    if (!ss)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    ss->reduction = reduction;
    cuda_step *st;
    return cuda_step_new(p, n, "segrt scatter_nd", run_scatter_nd, args, 4, 1, ss, NULL, &st);
}

/* GatherElements, ScatterElements, CumSum, Trilu, OneHot ----------------------------------------- */

/* What their run functions take: an axis, the scatters' reduction,
 * CumSum's flags, Trilu's diagonal and side. */
typedef struct select_step {
    int32_t axis;
    sgk_scatter_reduce reduction;
    bool exclusive, reverse, upper, largest;
    int64_t k;
} select_step;

/* A step writing its last n_outputs args, with a copy of proto. */
static sg_status select_step_outputs(sg_cuda_plan *p, const sg_node *n, const char *impl, cuda_run_fn fn,
                                     const int32_t *args, int32_t n_args, int32_t n_outputs, const select_step *proto)
{
    select_step *ss = sg_malloc(sizeof *ss);
    if (!ss)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *ss = *proto;
    cuda_step *st;
    return cuda_step_new(p, n, impl, fn, args, n_args, n_outputs, ss, NULL, &st);
}

static sg_status select_step_new(sg_cuda_plan *p, const sg_node *n, const char *impl, cuda_run_fn fn,
                                 const int32_t *args, int32_t n_args, const select_step *proto)
{
    return select_step_outputs(p, n, impl, fn, args, n_args, 1, proto);
}

/* One integer of a constant input (CumSum's axis, Trilu's k), or
 * UNSUPPORTED where it is computed at run time. */
static sg_status const_int(const sg_cuda_plan *p, const sg_node *n, int32_t i, const char *what, int64_t *out)
{
    const sg_value *v = &p->g->values[n->inputs[i]];
    int64_t numel;
    if (!sg_shape_numel(&v->shape, &numel) || numel != 1 || !sg_dtype_is_integer(v->dtype))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s must be one integer", what);
    if (!v->data)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s computed at run time", what);
    *out = sg_dtype_load_i64(v->dtype, sg_blob_data(v->data), 0);
    return SEGRT_OK;
}

static sg_status need_index_dtype(const sg_cuda_plan *p, const sg_node *n, int32_t t)
{
    sg_dtype d = p->tensors[t].dtype;
    if (d != SEGRT_DTYPE_INT32 && d != SEGRT_DTYPE_INT64)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must be int32 or int64");
    return SEGRT_OK;
}

static sg_status run_gather_elements(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view data = cuda_view(r, s->args[0]), idx = cuda_view(r, s->args[1]), out = cuda_view(r, s->args[2]);
    return sgk_gather_elements(r->stream, &out, &data, &idx, ss->axis, r->err);
}

sg_status cuda_build_gather_elements(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t args[3];
    SG_TRY(input(p, n, 0, &args[0]));
    SG_TRY(input(p, n, 1, &args[1]));
    SG_TRY(need_index_dtype(p, n, args[1]));
    int32_t rank = p->tensors[args[0]].rank;
    if (rank < 1 || p->tensors[args[1]].rank != rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices and data must have the same rank (>= 1)");
    select_step ss = {0};
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), rank, &ss.axis));
    for (int32_t d = 0; d < rank; d++)
        if (d != ss.axis && p->tensors[args[1]].dims[d] > p->tensors[args[0]].dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices are larger than the data along axis %d", d);
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[2]));
    return select_step_new(p, n, "segrt gather elements", run_gather_elements, args, 3, &ss);
}

static sg_status run_gather_nd(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view data = cuda_view(r, s->args[0]), idx = cuda_view(r, s->args[1]), out = cuda_view(r, s->args[2]);
    return sgk_gather_nd(r->stream, &out, &data, &idx, ss->axis, r->err);
}

/* (select_step's axis holds batch_dims.) */
sg_status cuda_build_gather_nd(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t args[3];
    SG_TRY(input(p, n, 0, &args[0]));
    SG_TRY(input(p, n, 1, &args[1]));
    SG_TRY(need_index_dtype(p, n, args[1]));
    const cuda_tensor *x = &p->tensors[args[0]], *it = &p->tensors[args[1]];
    int64_t b = sg_attr_int(n, "batch_dims", 0), k = it->rank >= 1 ? it->dims[it->rank - 1] : 0;
    if (it->rank < 1 || b < 0 || b >= it->rank || b >= x->rank || k < 1 || b + k > x->rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index tuples of %lld with batch_dims %lld over rank %d",
                             (long long)k, (long long)b, x->rank);
    for (int64_t d = 0; d < b; d++)
        if (it->dims[d] != x->dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "batch dim %lld differs between data and indices", (long long)d);
    select_step ss = {0};
    ss.axis = (int32_t)b;
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[2]));
    return select_step_new(p, n, "segrt gather nd", run_gather_nd, args, 3, &ss);
}

static sg_status run_scatter_elements(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view data = cuda_view(r, s->args[0]), idx = cuda_view(r, s->args[1]), upd = cuda_view(r, s->args[2]),
             out = cuda_view(r, s->args[3]);
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    SG_TRY(sgk_map(r->stream, &mp, &out, 1, &data));
    return sgk_scatter_elements(r->stream, &out, &idx, &upd, ss->axis, ss->reduction, r->err);
}

sg_status cuda_build_scatter_elements(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    select_step ss = {0};
    SG_TRY(scatter_reduction(n, &ss.reduction));
    int32_t args[4];
    for (int32_t i = 0; i < 3; i++)
        SG_TRY(input(p, n, i, &args[i]));
    SG_TRY(need_index_dtype(p, n, args[1]));
    const cuda_tensor *x = &p->tensors[args[0]], *it = &p->tensors[args[1]], *u = &p->tensors[args[2]];
    bool ok = x->rank >= 1 && it->rank == x->rank && u->rank == x->rank;
    for (int32_t d = 0; ok && d < x->rank; d++)
        ok = u->dims[d] == it->dims[d];
    if (!ok)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices and updates must have one shape, of the data's rank");
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), x->rank, &ss.axis));
    for (int32_t d = 0; d < x->rank; d++)
        if (d != ss.axis && it->dims[d] > x->dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices are larger than the data along axis %d", d);
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, args[0]), &args[3]));
    return select_step_new(p, n, "segrt scatter elements", run_scatter_elements, args, 4, &ss);
}

static sg_status run_cumsum(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view x = cuda_view(r, s->args[0]), y = cuda_view(r, s->args[1]);
    return sgk_cumsum(r->stream, &y, &x, ss->axis, ss->exclusive, ss->reverse);
}

sg_status cuda_build_cumsum(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    if (n->n_inputs < 2 || n->inputs[1] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs an axis");
    int32_t args[2];
    SG_TRY(input(p, n, 0, &args[0]));
    const cuda_tensor *x = &p->tensors[args[0]];
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    if (!sg_dtype_is_float(x->dtype) && !sg_dtype_is_integer(x->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(x->dtype));
    int64_t axis;
    SG_TRY(const_int(p, n, 1, "axis", &axis));
    select_step ss = {0};
    SG_TRY(sg_infer_axis(n, axis, x->rank, &ss.axis));
    ss.exclusive = sg_attr_int(n, "exclusive", 0) != 0;
    ss.reverse = sg_attr_int(n, "reverse", 0) != 0;
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, args[0]), &args[1]));
    return select_step_new(p, n, "segrt cumsum", run_cumsum, args, 2, &ss);
}

static sg_status run_trilu(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view x = cuda_view(r, s->args[0]), y = cuda_view(r, s->args[1]);
    return sgk_trilu(r->stream, &y, &x, ss->k, ss->upper);
}

sg_status cuda_build_trilu(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t args[2];
    SG_TRY(input(p, n, 0, &args[0]));
    if (p->tensors[args[0]].rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    select_step ss = {0};
    if (n->n_inputs > 1 && n->inputs[1] >= 0)
        SG_TRY(const_int(p, n, 1, "k", &ss.k));
    ss.upper = sg_attr_int(n, "upper", 1) != 0;
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, args[0]), &args[1]));
    return select_step_new(p, n, "segrt trilu", run_trilu, args, 2, &ss);
}

static sg_status run_top_k(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view x = cuda_view(r, s->args[0]), v = cuda_view(r, s->args[1]), i = cuda_view(r, s->args[2]);
    return sgk_top_k(r->stream, &v, &i, &x, ss->axis, ss->k, ss->largest);
}

/* (sorted=0 allows any order, the sorted one among them.) */
sg_status cuda_build_top_k(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    SG_TRY(need_output(n, 1));
    int32_t args[3];
    SG_TRY(input(p, n, 0, &args[0]));
    const cuda_tensor *x = &p->tensors[args[0]];
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    if (!sg_dtype_is_float(x->dtype) && !sg_dtype_is_integer(x->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(x->dtype));
    select_step ss = {0};
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), x->rank, &ss.axis));
    SG_TRY(const_int(p, n, 1, "K", &ss.k));
    int64_t len = x->dims[ss.axis];
    if (ss.k < 0 || ss.k > len)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "K is %lld for an axis of %lld", (long long)ss.k,
                             (long long)len);
    if (len > SGK_TOPK_MAX_LEN)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "TopK over %lld elements (the device's kernel takes %d)",
                             (long long)len, SGK_TOPK_MAX_LEN);
    ss.largest = sg_attr_int(n, "largest", 1) != 0;
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[1]));
    SG_TRY(cuda_output_new(p, n, 1, SEGRT_DTYPE_INT64, CUDA_LAYOUT_PLAIN, &args[2]));
    return select_step_outputs(p, n, "segrt top k", run_top_k, args, 3, 2, &ss);
}

typedef struct gs_step {
    int32_t mode, pad; /* backend/grid_sample_math.h's */
    bool align;
} gs_step;

static sg_status run_grid_sample(const cuda_step *s, cuda_run *r)
{
    const gs_step *gs = s->params;
    sgk_view x = cuda_view(r, s->args[0]), grid = cuda_view(r, s->args[1]), y = cuda_view(r, s->args[2]);
    return sgk_grid_sample(r->stream, &y, &x, &grid, gs->mode, gs->pad, gs->align);
}

sg_status cuda_build_grid_sample(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t args[3];
    SG_TRY(input(p, n, 0, &args[0]));
    SG_TRY(input(p, n, 1, &args[1]));
    const cuda_tensor *x = &p->tensors[args[0]], *grid = &p->tensors[args[1]];
    int32_t nd = x->rank - 2;
    if (!sg_dtype_is_float(x->dtype) || !sg_dtype_is_float(grid->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(x->dtype));
    if (nd < 1 || nd > SGK_GS_MAX_DIMS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d spatial dims (the device's kernel takes 1 to %d)", nd,
                             SGK_GS_MAX_DIMS);
    if (grid->rank != x->rank || grid->dims[grid->rank - 1] != nd || grid->dims[0] != x->dims[0])
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "the grid must be N x outputs x %d for an input of rank %d", nd,
                             x->rank);
    const char *mode = sg_attr_string(n, "mode", "linear"), *pad = sg_attr_string(n, "padding_mode", "zeros");
    int m = sg_gs_mode(mode), q = sg_gs_padding(pad);
    if (m < 0 || q < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "mode `%s` or padding_mode `%s` is not one GridSample has",
                             mode, pad);
    gs_step *gs = sg_calloc(1, sizeof *gs);
    if (!gs)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    gs->mode = m;
    gs->pad = q;
    gs->align = sg_attr_int(n, "align_corners", 0) != 0;
    sg_status s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[2]);
    cuda_step *st;
    if (s == SEGRT_OK)
        return cuda_step_new(p, n, "segrt grid sample", run_grid_sample, args, 3, 1, gs, NULL, &st);
    free(gs);
    return s;
}

static sg_status run_one_hot(const cuda_step *s, cuda_run *r)
{
    const select_step *ss = s->params;
    sgk_view idx = cuda_view(r, s->args[0]), values = cuda_view(r, s->args[1]), out = cuda_view(r, s->args[2]);
    return sgk_one_hot(r->stream, &out, &idx, &values, ss->axis);
}

/* The depth is the output's extent along axis (shape inference read it
 * from the constant input). */
sg_status cuda_build_one_hot(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t args[3];
    SG_TRY(input(p, n, 0, &args[0]));
    SG_TRY(input(p, n, 2, &args[1]));
    const cuda_tensor *it = &p->tensors[args[0]], *vt = &p->tensors[args[1]];
    if (!sg_dtype_is_float(it->dtype) && !sg_dtype_is_integer(it->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s indices", segrt_dtype_name(it->dtype));
    if (vt->rank != 1 || vt->dims[0] != 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "values must be two numbers [off, on]");
    if (it->rank + 1 > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output rank %d is too large", it->rank + 1);
    select_step ss = {0};
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), it->rank + 1, &ss.axis));
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[2]));
    return select_step_new(p, n, "segrt one hot", run_one_hot, args, 3, &ss);
}

/* Einsum ------------------------------------------------------------------------------------------- */

/* The contraction as sgk_einsum takes it: letters numbered free first
 * (output order), then summed; each input's dims name their letter. */
typedef struct einsum_step {
    int32_t n_in, n_letters;
    int64_t letter_dims[SGK_EINSUM_MAX_LETTERS];
    int32_t rank[SGK_EINSUM_MAX_IN];
    int32_t letter[SGK_EINSUM_MAX_IN][SEGRT_MAX_RANK];
} einsum_step;

static sg_status run_einsum(const cuda_step *s, cuda_run *r)
{
    const einsum_step *es = s->params;
    sgk_einsum_params ep;
    memset(&ep, 0, sizeof ep);
    ep.n_in = es->n_in;
    ep.n_letters = es->n_letters;
    memcpy(ep.letter_dims, es->letter_dims, sizeof ep.letter_dims);
    for (int32_t i = 0; i < es->n_in; i++) {
        sgk_view v = cuda_view(r, s->args[i]);
        /* A size-1 dim broadcasts; a letter repeated in one input walks
         * its diagonal (the strides add up). */
        for (int32_t d = 0; d < es->rank[i]; d++)
            if (v.dims[d] != 1)
                ep.in_strides[i][es->letter[i][d]] += v.strides[d];
        ep.in_data[i] = v.data;
        ep.in_dtype[i] = v.dtype;
    }
    sgk_view out = cuda_view(r, s->args[es->n_in]);
    for (int32_t d = 0; d < out.rank; d++)
        ep.out_strides[d] = out.strides[d];
    return sgk_einsum(r->stream, &ep, &out);
}

/* Resolves the equation against the inputs' ranks and dims into es. */
static sg_status einsum_parse(const sg_cuda_plan *p, const sg_node *n, const int32_t *ts, einsum_step *es)
{
    int32_t rank[SGK_EINSUM_MAX_IN];
    int64_t dims[SGK_EINSUM_MAX_IN][SEGRT_MAX_RANK];
    for (int32_t i = 0; i < es->n_in; i++) {
        rank[i] = p->tensors[ts[i]].rank;
        memcpy(dims[i], p->tensors[ts[i]].dims, sizeof dims[i]);
    }
    sg_einsum e;
    SG_TRY(sg_einsum_resolve(n, es->n_in, rank, (const int64_t(*)[SEGRT_MAX_RANK])dims, &e));
    if (e.n_letters > SGK_EINSUM_MAX_LETTERS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d distinct letters; at most %d are supported",
                             e.n_letters, SGK_EINSUM_MAX_LETTERS);
    es->n_letters = e.n_letters;
    memcpy(es->letter_dims, e.size, sizeof(int64_t) * (size_t)e.n_letters);
    memcpy(es->rank, e.rank, sizeof es->rank);
    memcpy(es->letter, e.letter, sizeof es->letter);
    return check_dims(p, n, n->outputs[0], e.n_out, es->letter_dims);
}

sg_status cuda_build_einsum(sg_cuda_plan *p, const sg_node *n)
{
    SG_TRY(need_output(n, 0));
    int32_t n_in = n->n_inputs;
    if (n_in < 1 || n_in > SGK_EINSUM_MAX_IN)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d operands; at most %d are supported", n_in,
                             SGK_EINSUM_MAX_IN);
    int32_t args[SGK_EINSUM_MAX_IN + 1];
    for (int32_t i = 0; i < n_in; i++)
        SG_TRY(input(p, n, i, &args[i]));
    einsum_step *es = sg_calloc(1, sizeof *es);
    if (!es)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    es->n_in = n_in;
    sg_status s = einsum_parse(p, n, args, es);
    if (s == SEGRT_OK)
        s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[n_in]);
    if (s != SEGRT_OK) {
        free(es);
        return s;
    }
    cuda_step *st;
    return cuda_step_new(p, n, "segrt einsum", run_einsum, args, n_in + 1, 1, es, NULL, &st);
}
