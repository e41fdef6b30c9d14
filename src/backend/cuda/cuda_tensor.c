/* Tensors of a CUDA plan: dense activations in a layout, views of other
 * tensors, device constants; and the conversions between layouts and
 * dtypes that builders ask for with cuda_value_as. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

/* The arena hands out tensors at offsets aligned for any vector load and
 * for cuDNN's 16-byte tensor-core alignment rule, with room to spare. */
#define CUDA_ALIGN 256

void cuda_layout_strides(cuda_layout l, int32_t rank, const int64_t *dims, int64_t *strides)
{
    if (l != CUDA_LAYOUT_CHANNELS_LAST || rank < 3) {
        int64_t s = 1;
        for (int32_t i = rank - 1; i >= 0; i--) {
            strides[i] = s;
            s *= dims[i] > 0 ? dims[i] : 1;
        }
        return;
    }
    /* N, spatial..., C in memory: channels innermost. */
    int64_t s = 1;
    strides[1] = s;
    s *= dims[1] > 0 ? dims[1] : 1;
    for (int32_t i = rank - 1; i >= 2; i--) {
        strides[i] = s;
        s *= dims[i] > 0 ? dims[i] : 1;
    }
    strides[0] = s;
}

/* Whether strides are those of a dense layout l over dims; dims of size 1
 * may have any stride. */
static bool strides_are(cuda_layout l, int32_t rank, const int64_t *dims, const int64_t *strides)
{
    int64_t want[SEGRT_MAX_RANK];
    cuda_layout_strides(l, rank, dims, want);
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] > 1 && strides[i] != want[i])
            return false;
    return true;
}

cuda_layout cuda_tensor_layout(const cuda_tensor *t)
{
    if (strides_are(CUDA_LAYOUT_PLAIN, t->rank, t->dims, t->strides))
        return CUDA_LAYOUT_PLAIN;
    if (t->rank >= 3 && strides_are(CUDA_LAYOUT_CHANNELS_LAST, t->rank, t->dims, t->strides))
        return CUDA_LAYOUT_CHANNELS_LAST;
    return CUDA_LAYOUT_ANY;
}

cuda_layout cuda_dense_layout(const sg_cuda_plan *p, int32_t t)
{
    return cuda_tensor_layout(&p->tensors[t]) == CUDA_LAYOUT_CHANNELS_LAST ? CUDA_LAYOUT_CHANNELS_LAST
                                                                          : CUDA_LAYOUT_PLAIN;
}

static bool tensor_has_layout(const cuda_tensor *t, cuda_layout l)
{
    if (l == CUDA_LAYOUT_ANY)
        return true;
    if (l == CUDA_LAYOUT_CHANNELS_LAST && t->rank < 3)
        l = CUDA_LAYOUT_PLAIN;
    return strides_are(l, t->rank, t->dims, t->strides);
}

static sg_status tensor_push(sg_cuda_plan *p, const cuda_tensor *t, int32_t *out)
{
    SG_TRY(sg_grow((void **)&p->tensors, &p->cap_tensors, p->n_tensors + 1, sizeof *p->tensors));
    p->tensors[p->n_tensors] = *t;
    *out = p->n_tensors++;
    return SEGRT_OK;
}

static size_t dense_bytes(sg_dtype dt, int32_t rank, const int64_t *dims)
{
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++)
        numel *= dims[i];
    size_t b = (size_t)numel * segrt_dtype_size(dt);
    return (b + CUDA_ALIGN - 1) & ~(size_t)(CUDA_ALIGN - 1);
}

static void tensor_init(cuda_tensor *t, cuda_tensor_kind kind, sg_dtype dt, int32_t rank, const int64_t *dims,
                        cuda_layout l)
{
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->dtype = dt;
    t->rank = rank;
    if (rank)
        memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    if (l == CUDA_LAYOUT_ANY || (l == CUDA_LAYOUT_CHANNELS_LAST && rank < 3))
        l = CUDA_LAYOUT_PLAIN;
    t->layout = l;
    cuda_layout_strides(l, rank, dims, t->strides);
    t->bytes = dense_bytes(dt, rank, dims);
    t->io_index = -1;
    t->alias = -1;
    t->first = t->last = -1;
}

sg_status cuda_tensor_new(sg_cuda_plan *p, sg_dtype dt, int32_t rank, const int64_t *dims, cuda_layout l,
                          int32_t *out)
{
    cuda_tensor t;
    tensor_init(&t, CUDA_T_ARENA, dt, rank, dims, l);
    return tensor_push(p, &t, out);
}

sg_status cuda_tensor_io(sg_cuda_plan *p, cuda_tensor_kind kind, int32_t io, sg_dtype dt, int32_t rank,
                         const int64_t *dims, int32_t *out)
{
    cuda_tensor t;
    tensor_init(&t, kind, dt, rank, dims, CUDA_LAYOUT_PLAIN);
    t.io_index = io;
    return tensor_push(p, &t, out);
}

sg_status cuda_tensor_const(sg_cuda_plan *p, void *dev, sg_dtype dt, int32_t rank, const int64_t *dims,
                            const int64_t *strides, int32_t *out)
{
    cuda_tensor t;
    tensor_init(&t, CUDA_T_CONST, dt, rank, dims, CUDA_LAYOUT_PLAIN);
    if (strides && rank)
        memcpy(t.strides, strides, sizeof(int64_t) * (size_t)rank);
    t.layout = cuda_tensor_layout(&t);
    t.bytes = 0;
    t.dev = dev;
    return tensor_push(p, &t, out);
}

sg_status cuda_tensor_alias(sg_cuda_plan *p, int32_t of, int32_t rank, const int64_t *dims,
                            const int64_t *strides, int64_t elem_offset, int32_t *out)
{
    const cuda_tensor *base = &p->tensors[of];
    cuda_tensor t = *base;
    if (base->kind == CUDA_T_ALIAS) { /* a view of a view reads the original */
        elem_offset += base->alias_offset;
        of = base->alias;
    }
    t.kind = CUDA_T_ALIAS;
    t.views = 0; /* the copy's, not the base's */
    t.touch_head = t.touch_tail = 0;
    t.rank = rank;
    if (rank) {
        memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
        memcpy(t.strides, strides, sizeof(int64_t) * (size_t)rank);
    }
    t.layout = cuda_tensor_layout(&t);
    t.bytes = 0;
    t.alias = of;
    t.alias_offset = elem_offset;
    t.first = t.last = -1;
    p->tensors[of].views++;
    return tensor_push(p, &t, out);
}

void cuda_value_set(sg_cuda_plan *p, int32_t v, int32_t t) { p->value_tensor[v] = t; }

int32_t cuda_value(const sg_cuda_plan *p, int32_t v) { return p->value_tensor[v]; }

sg_status cuda_output_new(sg_cuda_plan *p, const sg_node *n, int32_t k, sg_dtype dt, cuda_layout l,
                          int32_t *out)
{
    int32_t v = n->outputs[k];
    SG_ASSERT(v >= 0);
    const sg_shape *s = &p->g->values[v].shape;
    int64_t dims[SEGRT_MAX_RANK];
    if (!sg_shape_dims(s, dims))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output %d has no static shape", k);
    SG_TRY(cuda_tensor_new(p, dt, s->rank, dims, l, out));
    p->value_tensor[v] = *out;
    return SEGRT_OK;
}

/* Conversions ------------------------------------------------------------ */

/* Remembered conversions, so two readers asking for the same form of a
 * value share one copy. */
typedef struct cuda_conv_entry {
    int32_t value;
    sg_dtype dtype;
    cuda_layout layout;
    int32_t tensor;
    int32_t next; /* the previous conversion of the same value, or -1 */
} cuda_conv_entry;

static sg_status run_copy(const cuda_step *s, cuda_run *r)
{
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    mp.op = SGK_COPY;
    sgk_view out = cuda_view(r, s->args[1]);
    sgk_view in = cuda_view(r, s->args[0]);
    return sgk_map(r->stream, &mp, &out, 1, &in);
}

sg_status cuda_copy_step(sg_cuda_plan *p, const sg_node *n, int32_t from, int32_t to)
{
    int32_t args[2] = {from, to};
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "segrt copy", run_copy, args, 2, 1, NULL, NULL, &st));
    cuda_step_any_view(st);
    return SEGRT_OK;
}

/* Host-side conversion of a constant to dtype dt in layout l, with dims
 * (its own, or larger: the extra elements are zero). */
static sg_status const_convert(const sg_value *v, sg_dtype dt, cuda_layout l, const int64_t *dims, void **out,
                               size_t *bytes)
{
    int64_t src_dims[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
    int32_t rank = v->shape.rank;
    if (!sg_shape_dims(&v->shape, src_dims))
        return sg_error(SEGRT_ERROR_INTERNAL, "constant `%s` has no static shape", v->name);
    cuda_layout_strides(l, rank, dims, strides);
    int64_t numel = 1, total = 1;
    for (int32_t i = 0; i < rank; i++) {
        numel *= src_dims[i];
        total *= dims[i];
    }
    size_t esize = segrt_dtype_size(dt);
    /* Zero bytes are zero in every dtype the padding is used with. */
    uint8_t *buf = sg_calloc(total ? (size_t)total : 1, esize);
    if (!buf)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    const void *src = sg_blob_data(v->data);
    bool as_float = sg_dtype_is_float(dt) || sg_dtype_is_float(v->dtype);
    int64_t idx[SEGRT_MAX_RANK] = {0};
    for (int64_t i = 0; i < numel; i++) {
        int64_t off = 0;
        for (int32_t d = 0; d < rank; d++)
            off += idx[d] * strides[d];
        if (as_float)
            sg_dtype_store_f64(dt, buf, off, sg_dtype_load_f64(v->dtype, src, i));
        else
            sg_dtype_store_i64(dt, buf, off, sg_dtype_load_i64(v->dtype, src, i));
        for (int32_t d = rank - 1; d >= 0; d--) {
            if (++idx[d] < src_dims[d])
                break;
            idx[d] = 0;
        }
    }
    *out = buf;
    *bytes = (size_t)total * esize;
    return SEGRT_OK;
}

/* Constant value v as a CONST tensor of dims (its own, or larger: zero
 * padded) in dtype dt and layout l, converted and uploaded once per
 * (value, tag) in the weight store, which plans share. */
static sg_status const_upload_as(sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, const int64_t *dims,
                                 const char *tag, int32_t *out)
{
    const sg_value *val = &p->g->values[v];
    void *dev = NULL;
    if (!sg_cuda_weights_lookup(p->weights, val->data, tag, &dev)) {
        void *host = NULL;
        size_t bytes = 0;
        SG_TRY(const_convert(val, dt, l, dims, &host, &bytes));
        sg_status s = cuda_const_upload(p, val->data, tag, host, bytes, &dev);
        free(host);
        SG_TRY(s);
    }
    int64_t strides[SEGRT_MAX_RANK];
    cuda_layout_strides(l, val->shape.rank, dims, strides);
    return cuda_tensor_const(p, dev, dt, val->shape.rank, dims, strides, out);
}

static sg_status const_tensor(sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, int32_t *out)
{
    const sg_value *val = &p->g->values[v];
    if (l == CUDA_LAYOUT_ANY || (l == CUDA_LAYOUT_CHANNELS_LAST && val->shape.rank < 3))
        l = CUDA_LAYOUT_PLAIN;
    char tag[48];
    snprintf(tag, sizeof tag, "%s/%s", segrt_dtype_name(dt), l == CUDA_LAYOUT_PLAIN ? "plain" : "cl");
    int64_t dims[SEGRT_MAX_RANK];
    sg_shape_dims(&val->shape, dims);
    return const_upload_as(p, v, dt, l, dims, tag, out);
}

sg_status cuda_const_padded(sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, int32_t axis, int64_t size,
                            int32_t *out)
{
    const sg_value *val = &p->g->values[v];
    int64_t dims[SEGRT_MAX_RANK];
    if (!val->data || !sg_shape_dims(&val->shape, dims) || axis < 0 || axis >= val->shape.rank ||
        size < dims[axis])
        return sg_error(SEGRT_ERROR_INTERNAL, "`%s` cannot be padded to %lld along axis %d", val->name,
                        (long long)size, axis);
    dims[axis] = size;
    char tag[64];
    snprintf(tag, sizeof tag, "%s/%s/pad%d-%lld", segrt_dtype_name(dt), l == CUDA_LAYOUT_PLAIN ? "plain" : "cl",
             axis, (long long)size);
    return const_upload_as(p, v, dt, l, dims, tag, out);
}

sg_status cuda_value_as(sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, int32_t *out)
{
    const sg_value *val = &p->g->values[v];
    int32_t t = p->value_tensor[v];
    if (t < 0 && !val->data)
        return sg_error(SEGRT_ERROR_INTERNAL, "value `%s` is read before it is computed", val->name);
    sg_dtype have = t >= 0 ? p->tensors[t].dtype : val->dtype;
    if (dt == SEGRT_DTYPE_UNDEFINED)
        dt = have;
    if (t >= 0 && have == dt && tensor_has_layout(&p->tensors[t], l)) {
        *out = t;
        return SEGRT_OK;
    }
    /* The oldest conversion that fits, as a scan of all of them found;
     * the value's own chain (newest first) is all that can match. */
    const cuda_conv_entry *c = (const cuda_conv_entry *)p->conv;
    int32_t found = -1;
    for (int32_t i = p->conv_of[v]; i >= 0; i = c[i].next)
        if (c[i].dtype == dt && (l == CUDA_LAYOUT_ANY || tensor_has_layout(&p->tensors[c[i].tensor], l)))
            found = i;
    if (found >= 0) {
        *out = c[found].tensor;
        return SEGRT_OK;
    }
    int32_t nt;
    if (t < 0) {
        /* A constant: converted on the host once, uploaded to the store. */
        SG_TRY(const_tensor(p, v, dt, l, &nt));
    } else {
        cuda_layout want = l;
        if (want == CUDA_LAYOUT_ANY) { /* a dtype change keeps a dense layout, else plain */
            want = cuda_tensor_layout(&p->tensors[t]);
            if (want == CUDA_LAYOUT_ANY)
                want = CUDA_LAYOUT_PLAIN;
        }
        const cuda_tensor *src = &p->tensors[t];
        SG_TRY(cuda_tensor_new(p, dt, src->rank, src->dims, want, &nt));
        SG_TRY(cuda_copy_step(p, NULL, t, nt));
        p->steps[p->n_steps - 1].name = val->name;
    }
    SG_TRY(sg_grow(&p->conv, &p->cap_conv, p->n_conv + 1, sizeof(cuda_conv_entry)));
    ((cuda_conv_entry *)p->conv)[p->n_conv] = (cuda_conv_entry){v, dt, l, nt, p->conv_of[v]};
    p->conv_of[v] = p->n_conv++;
    *out = nt;
    return SEGRT_OK;
}

float *cuda_const_f32(const sg_cuda_plan *p, int32_t v)
{
    const sg_value *val = &p->g->values[v];
    if (!val->data)
        return NULL;
    int64_t numel = 1;
    if (!sg_shape_numel(&val->shape, &numel))
        return NULL;
    float *f = sg_malloc(numel ? (size_t)numel * sizeof *f : 1);
    if (!f)
        return NULL;
    const void *src = sg_blob_data(val->data);
    for (int64_t i = 0; i < numel; i++)
        f[i] = (float)sg_dtype_load_f64(val->dtype, src, i);
    return f;
}

/* Run-time views ------------------------------------------------------------ */

sgk_view cuda_geometry_view(const sg_cuda_plan *p, int32_t t)
{
    const cuda_tensor *ct = &p->tensors[t];
    sgk_view v;
    v.data = NULL;
    v.dtype = ct->dtype;
    v.rank = ct->rank;
    for (int32_t i = 0; i < SGK_MAX_RANK; i++) {
        v.dims[i] = i < ct->rank ? ct->dims[i] : 1;
        v.strides[i] = i < ct->rank ? ct->strides[i] : 0;
    }
    return v;
}

sgk_view cuda_view(const cuda_run *r, int32_t t)
{
    sgk_view v = cuda_geometry_view(r->plan, t);
    v.data = r->ptr[t];
    return v;
}

sgk_view cuda_view_bcast(const cuda_run *r, int32_t t, int32_t rank, const int64_t *dims)
{
    const cuda_tensor *ct = &r->plan->tensors[t];
    sgk_view v;
    memset(&v, 0, sizeof v);
    v.data = r->ptr[t];
    v.dtype = ct->dtype;
    v.rank = rank;
    for (int32_t i = 0; i < rank; i++) {
        int32_t j = i - (rank - ct->rank);
        v.dims[i] = dims[i];
        v.strides[i] = (j < 0 || (ct->dims[j] == 1 && dims[i] != 1)) ? 0 : ct->strides[j];
    }
    return v;
}

/* Slices of a larger buffer ---------------------------------------------- */

void cuda_step_any_view(cuda_step *st)
{
    st->any_view = st->n_args >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << st->n_args) - 1);
}

bool cuda_place_in_slice(sg_cuda_plan *p, int32_t t, int32_t into, int32_t axis, int64_t at)
{
    cuda_tensor *x = &p->tensors[t];
    const cuda_tensor *buf = &p->tensors[into];
    if (t == into || x->kind != CUDA_T_ARENA || (buf->kind != CUDA_T_ARENA && buf->kind != CUDA_T_OUTPUT) ||
        x->dtype != buf->dtype ||
        x->rank != buf->rank || axis < 0 || axis >= x->rank || x->layout == CUDA_LAYOUT_ANY)
        return false;
    for (int32_t d = 0; d < x->rank; d++)
        if (d != axis && x->dims[d] != buf->dims[d])
            return false;
    if (at < 0 || at + x->dims[axis] > buf->dims[axis])
        return false;
    /* A view of t made earlier baked t's dense strides into itself. */
    if (x->views > 0)
        return false;
    cuda_tensor as = *x;
    as.kind = CUDA_T_ALIAS;
    as.alias = into;
    as.alias_offset = at * buf->strides[axis];
    memcpy(as.strides, buf->strides, sizeof as.strides);
    as.layout = cuda_tensor_layout(&as);
    as.bytes = 0;
    /* Every step built so far that touches t must take whatever view t
     * has when it runs, or be able to describe the slice to its library
     * (restride; only for the arena, whose addresses never change). Steps
     * built later ask for t through cuda_value_as, which converts it where
     * they need dense strides. */
    /* (The steps that name t, in plan order: t's chain of serials.) */
    bool restrided = false;
    for (int32_t k = x->touch_head; k; k = p->touch_next[k - 1]) {
        int32_t s = cuda_step_of_serial(p, p->touch_serial[k - 1]);
        if (s < 0)
            continue;
        cuda_step *st = &p->steps[s];
        for (int32_t a = 0; a < st->n_args; a++) {
            if (st->args[a] != t || (a < 64 && (st->any_view >> a & 1u)))
                continue;
            if (!st->restride || buf->kind != CUDA_T_ARENA || !st->restride(p, st, t, &as, false))
                return false;
            restrided = true;
            break; /* restride covers every arg of st that is t */
        }
    }
    if (restrided)
        for (int32_t k = p->tensors[t].touch_head; k; k = p->touch_next[k - 1]) {
            int32_t s = cuda_step_of_serial(p, p->touch_serial[k - 1]);
            if (s < 0)
                continue;
            cuda_step *st = &p->steps[s];
            for (int32_t a = 0; a < st->n_args; a++)
                if (st->args[a] == t && !(a < 64 && (st->any_view >> a & 1u))) {
                    st->restride(p, st, t, &as, true);
                    break;
                }
        }
    p->tensors[t] = as; /* views (none) and the chain of steps are t's own */
    p->tensors[into].views++;
    return true;
}
