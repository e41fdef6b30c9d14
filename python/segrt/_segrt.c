/* segrt._segrt: the CPython extension under the segrt package, a binding
 * over include/segrt.h and nothing else (tests/arch/check_layers.py holds
 * it to that). The Python layer (__init__.py, _engine.py, _window.py)
 * gives the documented API; this file does what needs C:
 *
 *  - engines and an auto-growing set of contexts guarded by a mutex, so
 *    that concurrent callers of one engine never share a context;
 *  - runs over the caller's memory without copies: numpy arrays (and any
 *    C-contiguous buffer) through the buffer protocol, other tensors
 *    through DLPack's legacy "dltensor" capsule, host or CUDA;
 *  - device results as DeviceArray objects that own memory from
 *    segrt_device_alloc and export it through __dlpack__;
 *  - the GIL released around every segrt call that can take time.
 *
 * Built against the limited API of Python 3.11 (Py_LIMITED_API, set by the
 * build), so one _segrt.abi3.so loads on 3.11 and every later version.
 *
 * One file of about 2,000 lines on purpose: the module's types (Engine,
 * DeviceArray, HostBuffer), its error classes and the tensor import
 * they share are file-static state of one single-phase module, and the
 * sections below (errors, dtypes, DeviceArray, HostBuffer, tensors in,
 * engines, sliding windows, the library) read top to bottom.
 *
 * Streams. segrt_context_run queues its work on the context's own CUDA
 * stream (segrt_context_stream; non-blocking, so it does not follow the
 * legacy default stream) and waits for it before returning. So a CUDA
 * input is asked for with __dlpack__(stream=<the context's stream>): by
 * the DLPack protocol the producer makes that stream wait for its pending
 * work on the tensor, and the run reads it only after (for a torch tensor
 * the extension orders it itself, more cheaply: import_dlpack). Outputs are
 * complete when a run returns, so a consumer of a DeviceArray may use it
 * on any stream at once. The window job runs on streams of its own, so a
 * CUDA image is asked for with stream=None (the legacy default stream)
 * and the device is synchronized before the job reads it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "segrt.h"

#include <dlpack/dlpack.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if !defined(Py_LIMITED_API) || Py_LIMITED_API + 0 < 0x030B0000
#error "_segrt.c is built against the limited API of Python 3.11 (Py_LIMITED_API=0x030B0000)"
#endif

/* DLPack 0.8's boolean type code; the 0.6 header does not name it. */
#define SG_DL_BOOL 6

/* --- errors -------------------------------------------------------------- */

/* The Python classes of segrt's statuses (segrt._errors), by status;
 * registered by the package at import. */
static PyObject *error_class[SEGRT_STATUS_COUNT];

/* Raises the error of status s with the calling thread's message. */
static PyObject *raise_status(segrt_status s)
{
    const char *msg = segrt_last_error();
    PyObject *cls = (int)s > 0 && (int)s < SEGRT_STATUS_COUNT && error_class[s] ? error_class[s] : PyExc_RuntimeError;
    PyErr_SetString(cls, msg && *msg ? msg : segrt_status_name(s));
    return NULL;
}

static PyObject *mod_register_errors(PyObject *mod, PyObject *classes)
{
    (void)mod;
    if (!PyTuple_Check(classes) || PyTuple_Size(classes) != SEGRT_STATUS_COUNT) {
        PyErr_Format(PyExc_TypeError, "register_errors wants a tuple of %d classes", SEGRT_STATUS_COUNT);
        return NULL;
    }
    for (int i = 1; i < SEGRT_STATUS_COUNT; i++) {
        PyObject *c = PyTuple_GetItem(classes, i);
        if (!c)
            return NULL;
        Py_INCREF(c);
        Py_XDECREF(error_class[i]);
        error_class[i] = c;
    }
    Py_RETURN_NONE;
}

/* --- dtypes ---------------------------------------------------------------- */

/* A buffer's struct format ("f", "<f", "=q") as a segrt dtype; 0 if none. */
static segrt_dtype dtype_of_format(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        fmt = "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    else if ((*fmt == '>' || *fmt == '!') && itemsize != 1)
        return SEGRT_DTYPE_UNDEFINED; /* big-endian */
    else if (*fmt == '>' || *fmt == '!')
        fmt++;
    if (!fmt[0] || fmt[1])
        return SEGRT_DTYPE_UNDEFINED;
    segrt_dtype d = SEGRT_DTYPE_UNDEFINED;
    switch (fmt[0]) {
    case 'f':
        d = SEGRT_DTYPE_FLOAT32;
        break;
    case 'd':
        d = SEGRT_DTYPE_FLOAT64;
        break;
    case 'e':
        d = SEGRT_DTYPE_FLOAT16;
        break;
    case 'B':
        d = SEGRT_DTYPE_UINT8;
        break;
    case 'b':
        d = SEGRT_DTYPE_INT8;
        break;
    case 'H':
        d = SEGRT_DTYPE_UINT16;
        break;
    case 'h':
        d = SEGRT_DTYPE_INT16;
        break;
    case '?':
        d = SEGRT_DTYPE_BOOL;
        break;
    case 'i':
    case 'l':
    case 'q':
        d = itemsize == 8 ? SEGRT_DTYPE_INT64 : itemsize == 4 ? SEGRT_DTYPE_INT32 : SEGRT_DTYPE_UNDEFINED;
        break;
    default:
        break;
    }
    return d != SEGRT_DTYPE_UNDEFINED && (Py_ssize_t)segrt_dtype_size(d) == itemsize ? d : SEGRT_DTYPE_UNDEFINED;
}

/* The struct format of a dtype, for buffers this module exports. */
static const char *format_of_dtype(segrt_dtype d)
{
    switch (d) {
    case SEGRT_DTYPE_FLOAT32:
        return "f";
    case SEGRT_DTYPE_FLOAT64:
        return "d";
    case SEGRT_DTYPE_FLOAT16:
        return "e";
    case SEGRT_DTYPE_UINT8:
        return "B";
    case SEGRT_DTYPE_INT8:
        return "b";
    case SEGRT_DTYPE_UINT16:
    case SEGRT_DTYPE_BFLOAT16: /* numpy has no bfloat16: its bits */
        return "H";
    case SEGRT_DTYPE_INT16:
        return "h";
    case SEGRT_DTYPE_INT32:
        return "i";
    case SEGRT_DTYPE_INT64:
        return "q";
    case SEGRT_DTYPE_BOOL:
        return "?";
    default:
        return NULL;
    }
}

static segrt_dtype dtype_of_dl(DLDataType t)
{
    if (t.lanes != 1)
        return SEGRT_DTYPE_UNDEFINED;
    switch (t.code) {
    case kDLFloat:
        return t.bits == 32   ? SEGRT_DTYPE_FLOAT32
               : t.bits == 16 ? SEGRT_DTYPE_FLOAT16
               : t.bits == 64 ? SEGRT_DTYPE_FLOAT64
                              : SEGRT_DTYPE_UNDEFINED;
    case kDLBfloat:
        return t.bits == 16 ? SEGRT_DTYPE_BFLOAT16 : SEGRT_DTYPE_UNDEFINED;
    case kDLInt:
        return t.bits == 8    ? SEGRT_DTYPE_INT8
               : t.bits == 16 ? SEGRT_DTYPE_INT16
               : t.bits == 32 ? SEGRT_DTYPE_INT32
               : t.bits == 64 ? SEGRT_DTYPE_INT64
                              : SEGRT_DTYPE_UNDEFINED;
    case kDLUInt:
        return t.bits == 8 ? SEGRT_DTYPE_UINT8 : t.bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UNDEFINED;
    case SG_DL_BOOL:
        return t.bits == 8 ? SEGRT_DTYPE_BOOL : SEGRT_DTYPE_UNDEFINED;
    default:
        return SEGRT_DTYPE_UNDEFINED;
    }
}

static DLDataType dl_of_dtype(segrt_dtype d)
{
    DLDataType t = {kDLFloat, 32, 1};
    switch (d) {
    case SEGRT_DTYPE_FLOAT16:
        t.bits = 16;
        break;
    case SEGRT_DTYPE_FLOAT64:
        t.bits = 64;
        break;
    case SEGRT_DTYPE_BFLOAT16:
        t.code = kDLBfloat;
        t.bits = 16;
        break;
    case SEGRT_DTYPE_INT8:
    case SEGRT_DTYPE_INT16:
    case SEGRT_DTYPE_INT32:
    case SEGRT_DTYPE_INT64:
        t.code = kDLInt;
        t.bits = (uint8_t)(8 * segrt_dtype_size(d));
        break;
    case SEGRT_DTYPE_UINT8:
    case SEGRT_DTYPE_UINT16:
        t.code = kDLUInt;
        t.bits = (uint8_t)(8 * segrt_dtype_size(d));
        break;
    case SEGRT_DTYPE_BOOL:
        t.code = SG_DL_BOOL;
        t.bits = 8;
        break;
    default:
        break;
    }
    return t;
}

static size_t numel_of(int32_t rank, const int64_t *dims)
{
    size_t n = 1;
    for (int32_t d = 0; d < rank; d++)
        n *= (size_t)dims[d];
    return n;
}

static PyObject *dims_tuple(int32_t rank, const int64_t *dims)
{
    PyObject *t = PyTuple_New(rank);
    for (int32_t d = 0; t && d < rank; d++) {
        PyObject *v = PyLong_FromLongLong(dims[d]);
        if (!v || PyTuple_SetItem(t, d, v) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    }
    return t;
}

/* A sequence of ints into dims (at most SEGRT_MAX_RANK); -1 with an
 * exception naming what. */
static int parse_dims(PyObject *seq, const char *what, int64_t *dims)
{
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0 || n > SEGRT_MAX_RANK) {
        if (n >= 0 || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: want a sequence of at most %d ints", what, SEGRT_MAX_RANK);
        }
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PySequence_GetItem(seq, i);
        if (!v)
            return -1;
        dims[i] = PyLong_AsLongLong(v);
        Py_DECREF(v);
        if (dims[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: want ints", what);
            return -1;
        }
    }
    return (int)n;
}

/* --- DeviceArray: device memory from segrt, exported through DLPack ------- */

typedef struct {
    PyObject_HEAD void *data; /* from segrt_device_alloc; given back with the object (block_put) */
    segrt_dtype dtype;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    int32_t device;
    int exported; /* handed to a consumer through __dlpack__, which may still queue work on it */
} DeviceArrayObject;

/* Freed result blocks, kept for the next result of the same size: a
 * cudaMalloc and a cudaFree (which waits for the whole device) per call
 * cost more than the run of a small model. A block a DLPack consumer had
 * may still be read by work that consumer queued on its own stream when
 * the array dies (torch frees a tensor as soon as Python drops it), so
 * handing such a block out again first waits for the device, as the
 * cudaFree it replaces did; a block no consumer saw is reused at once
 * (the run that wrote it returned after its stream). Small blocks only, a
 * bounded number, freed at exit or by segrt.empty_cache(). */
#define BLOCK_SLOTS 16
#define BLOCK_MAX_BYTES ((size_t)64 << 20)
typedef struct {
    void *p;
    size_t bytes;
    int32_t device;
    int fence; /* wait for the device before reuse */
} cached_block;
static cached_block g_blocks[BLOCK_SLOTS];
static int g_n_blocks;
static pthread_mutex_t g_blocks_lock = PTHREAD_MUTEX_INITIALIZER;

/* A block of exactly `bytes` on device, from the cache or segrt; called
 * without the GIL. */
static segrt_status block_get(int32_t device, size_t bytes, void **out)
{
    int fence = 0;
    *out = NULL;
    pthread_mutex_lock(&g_blocks_lock);
    for (int i = g_n_blocks - 1; i >= 0; i--)
        if (g_blocks[i].device == device && g_blocks[i].bytes == bytes) {
            *out = g_blocks[i].p;
            fence = g_blocks[i].fence;
            g_blocks[i] = g_blocks[--g_n_blocks];
            break;
        }
    pthread_mutex_unlock(&g_blocks_lock);
    if (!*out)
        return segrt_device_alloc(device, bytes, out);
    return fence ? segrt_device_synchronize(device) : SEGRT_OK;
}

/* Gives a block back: kept when small and a slot is free, else freed;
 * called without the GIL. */
static void block_put(void *p, size_t bytes, int32_t device, int fence)
{
    if (bytes <= BLOCK_MAX_BYTES) {
        pthread_mutex_lock(&g_blocks_lock);
        int kept = g_n_blocks < BLOCK_SLOTS;
        if (kept)
            g_blocks[g_n_blocks++] = (cached_block){p, bytes, device, fence};
        pthread_mutex_unlock(&g_blocks_lock);
        if (kept)
            return;
    }
    segrt_device_free(p);
}

/* Frees every kept block (segrt.empty_cache, and at exit). */
static void blocks_free(void)
{
    pthread_mutex_lock(&g_blocks_lock);
    cached_block all[BLOCK_SLOTS];
    int n = g_n_blocks;
    memcpy(all, g_blocks, sizeof(cached_block) * (size_t)n);
    g_n_blocks = 0;
    pthread_mutex_unlock(&g_blocks_lock);
    for (int i = 0; i < n; i++)
        segrt_device_free(all[i].p);
}

static PyTypeObject *DeviceArray_Type;

/* A new DeviceArray owning data (freed with segrt_device_free). */
static PyObject *device_array_wrap(void *data, segrt_dtype dtype, int32_t rank, const int64_t *dims, int32_t device)
{
    DeviceArrayObject *a = (DeviceArrayObject *)PyType_GenericAlloc(DeviceArray_Type, 0);
    if (!a) {
        segrt_device_free(data);
        return NULL;
    }
    a->data = data;
    a->dtype = dtype;
    a->rank = rank;
    memcpy(a->dims, dims, sizeof(int64_t) * (size_t)rank);
    a->device = device;
    a->exported = 0;
    return (PyObject *)a;
}

static PyObject *device_array_new(segrt_dtype dtype, int32_t rank, const int64_t *dims, int32_t device)
{
    size_t bytes = numel_of(rank, dims) * segrt_dtype_size(dtype);
    void *p = NULL;
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = block_get(device, bytes, &p);
    PyEval_RestoreThread(ts_);
    if (s != SEGRT_OK) {
        if (p)
            segrt_device_free(p);
        return raise_status(s);
    }
    return device_array_wrap(p, dtype, rank, dims, device);
}

static void device_array_dealloc(PyObject *self)
{
    DeviceArrayObject *a = (DeviceArrayObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (a->data) {
        void *p = a->data;
        size_t bytes = numel_of(a->rank, a->dims) * segrt_dtype_size(a->dtype);
        a->data = NULL;
        PyThreadState *ts_ = PyEval_SaveThread();
        block_put(p, bytes, a->device, a->exported);
        PyEval_RestoreThread(ts_);
    }
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* What an exported DLManagedTensor holds: the array (a reference, so the
 * memory lives while the consumer does) and the shape and strides. */
typedef struct {
    DLManagedTensor m;
    PyObject *owner;
    int64_t shape[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
} exported;

static void exported_deleter(DLManagedTensor *m)
{
    exported *x = (exported *)m->manager_ctx;
    if (!Py_IsInitialized()) /* at exit the array went with the interpreter */
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(x->owner);
    free(x);
    PyGILState_Release(g);
}

/* A capsule the consumer did not take deletes its tensor. */
static void capsule_destructor(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor"))
        return; /* consumed: "used_dltensor" */
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter)
        m->deleter(m);
}

static PyObject *dlpack_capsule(PyObject *owner, void *data, segrt_dtype dtype, int32_t rank, const int64_t *dims,
                                DLDeviceType kind, int32_t device)
{
    exported *x = calloc(1, sizeof *x);
    if (!x)
        return PyErr_NoMemory();
    int64_t stride = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        x->shape[d] = dims[d];
        x->strides[d] = stride;
        stride *= dims[d];
    }
    x->m.dl_tensor.data = data;
    x->m.dl_tensor.device.device_type = kind;
    x->m.dl_tensor.device.device_id = device;
    x->m.dl_tensor.ndim = rank;
    x->m.dl_tensor.dtype = dl_of_dtype(dtype);
    x->m.dl_tensor.shape = x->shape;
    x->m.dl_tensor.strides = x->strides;
    x->m.dl_tensor.byte_offset = 0;
    x->m.manager_ctx = x;
    x->m.deleter = exported_deleter;
    Py_INCREF(owner);
    x->owner = owner;
    PyObject *cap = PyCapsule_New(&x->m, "dltensor", capsule_destructor);
    if (!cap) {
        Py_DECREF(owner);
        free(x);
    }
    return cap;
}

static PyObject *device_array_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device, &copy))
        return NULL;
    (void)max_version; /* the legacy capsule is what every consumer takes */
    DeviceArrayObject *a = (DeviceArrayObject *)self;
    /* The data is complete (the run that wrote it returned after its
     * stream): any consumer stream may read it at once. */
    if (stream != Py_None && !PyLong_Check(stream)) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__: stream must be an int or None");
        return NULL;
    }
    if (dl_device != Py_None) {
        int type = 0, id = 0;
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id))
            return NULL;
        if (type != kDLCUDA || id != a->device) {
            PyErr_Format(PyExc_BufferError,
                         "segrt.DeviceArray lives on cuda:%d; it cannot be exported to device (%d, %d)", a->device,
                         type, id);
            return NULL;
        }
    }
    if (copy != Py_None && PyObject_IsTrue(copy)) {
        DeviceArrayObject *c = (DeviceArrayObject *)device_array_new(a->dtype, a->rank, a->dims, a->device);
        if (!c)
            return NULL;
        size_t bytes = numel_of(a->rank, a->dims) * segrt_dtype_size(a->dtype);
        segrt_status s;
        PyThreadState *ts_ = PyEval_SaveThread();
        s = segrt_device_copy(c->data, SEGRT_MEMORY_DEVICE, a->data, SEGRT_MEMORY_DEVICE, bytes, a->device);
        PyEval_RestoreThread(ts_);
        if (s != SEGRT_OK) {
            Py_DECREF(c);
            return raise_status(s);
        }
        PyObject *cap = dlpack_capsule((PyObject *)c, c->data, c->dtype, c->rank, c->dims, kDLCUDA, c->device);
        Py_DECREF(c);
        return cap;
    }
    a->exported = 1;
    return dlpack_capsule(self, a->data, a->dtype, a->rank, a->dims, kDLCUDA, a->device);
}

static PyObject *device_array_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(ii)", (int)kDLCUDA, (int)((DeviceArrayObject *)self)->device);
}

/* Copies the array into a writable C-contiguous buffer of its size. */
static PyObject *device_array_copy_to(PyObject *self, PyObject *dst)
{
    DeviceArrayObject *a = (DeviceArrayObject *)self;
    Py_buffer v;
    if (PyObject_GetBuffer(dst, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    size_t bytes = numel_of(a->rank, a->dims) * segrt_dtype_size(a->dtype);
    if ((size_t)v.len != bytes) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "copy_to: the destination holds %zd bytes; the array has %zu", v.len, bytes);
        return NULL;
    }
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_device_copy(v.buf, SEGRT_MEMORY_HOST, a->data, SEGRT_MEMORY_DEVICE, bytes, a->device);
    PyEval_RestoreThread(ts_);
    PyBuffer_Release(&v);
    if (s != SEGRT_OK)
        return raise_status(s);
    Py_RETURN_NONE;
}

static PyObject *device_array_get_shape(PyObject *self, void *c)
{
    (void)c;
    DeviceArrayObject *a = (DeviceArrayObject *)self;
    return dims_tuple(a->rank, a->dims);
}

static PyObject *device_array_get_dtype(PyObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(segrt_dtype_name(((DeviceArrayObject *)self)->dtype));
}

static PyObject *device_array_get_device(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(((DeviceArrayObject *)self)->device);
}

static PyObject *device_array_get_ptr(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromVoidPtr(((DeviceArrayObject *)self)->data);
}

static PyObject *device_array_get_nbytes(PyObject *self, void *c)
{
    (void)c;
    DeviceArrayObject *a = (DeviceArrayObject *)self;
    return PyLong_FromSize_t(numel_of(a->rank, a->dims) * segrt_dtype_size(a->dtype));
}

static PyObject *device_array_repr(PyObject *self)
{
    DeviceArrayObject *a = (DeviceArrayObject *)self;
    char dims[256] = "";
    size_t used = 0;
    for (int32_t d = 0; d < a->rank && used < sizeof dims; d++)
        used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%lld", d ? ", " : "", (long long)a->dims[d]);
    return PyUnicode_FromFormat("segrt.DeviceArray(shape=(%s%s), dtype=%s, device='cuda:%d')", dims,
                                a->rank == 1 ? "," : "", segrt_dtype_name(a->dtype), (int)a->device);
}

static PyMethodDef device_array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))device_array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule of the array (no copy; copy=True makes one on the device). The data is complete when a "
     "DeviceArray is handed out, so any stream may read it at once."},
    {"__dlpack_device__", device_array_dlpack_device, METH_NOARGS, "(kDLCUDA, device index)"},
    {"copy_to", device_array_copy_to, METH_O,
     "copy_to(buffer)\n--\n\nCopies the array into a writable C-contiguous host buffer of its size."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef device_array_getset[] = {
    {"shape", device_array_get_shape, NULL, "dims, a tuple of ints", NULL},
    {"dtype", device_array_get_dtype, NULL, "the dtype's name (\"float32\", \"uint8\", ...)", NULL},
    {"device", device_array_get_device, NULL, "the CUDA device index", NULL},
    {"data_ptr", device_array_get_ptr, NULL, "the device address, as an int", NULL},
    {"nbytes", device_array_get_nbytes, NULL, "bytes of data", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot device_array_slots[] = {
    {Py_tp_dealloc, device_array_dealloc},
    {Py_tp_methods, device_array_methods},
    {Py_tp_getset, device_array_getset},
    {Py_tp_repr, device_array_repr},
    {Py_tp_doc, "A result in CUDA memory, owned by segrt (segrt_device_alloc) and freed with the last reference to "
                "it or to a tensor made from it (torch.from_dlpack(y) shares the memory)."},
    {0, NULL},
};

static PyType_Spec device_array_spec = {"segrt.DeviceArray", sizeof(DeviceArrayObject), 0,
                                        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, device_array_slots};

/* --- HostBuffer: a host result segrt allocated, as a buffer ------------------- */

typedef struct {
    PyObject_HEAD segrt_tensor t; /* a window result: segrt_window_result_free */
    Py_ssize_t shape[SEGRT_MAX_RANK], strides[SEGRT_MAX_RANK];
} HostBufferObject;

static PyTypeObject *HostBuffer_Type;

static void host_buffer_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    segrt_window_result_free(&((HostBufferObject *)self)->t);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static int host_buffer_get(PyObject *self, Py_buffer *v, int flags)
{
    (void)flags;
    HostBufferObject *h = (HostBufferObject *)self;
    Py_ssize_t item = (Py_ssize_t)segrt_dtype_size(h->t.dtype);
    v->buf = h->t.data;
    v->obj = Py_NewRef(self);
    v->len = (Py_ssize_t)numel_of(h->t.rank, h->t.dims) * item;
    v->readonly = 0;
    v->itemsize = item;
    v->format = (char *)format_of_dtype(h->t.dtype);
    v->ndim = h->t.rank;
    v->shape = h->shape;
    v->strides = h->strides;
    v->suboffsets = NULL;
    v->internal = NULL;
    return 0;
}

static void host_buffer_release(PyObject *self, Py_buffer *v)
{
    (void)self;
    (void)v;
}

static PyType_Slot host_buffer_slots[] = {
    {Py_tp_dealloc, host_buffer_dealloc},
    {Py_bf_getbuffer, host_buffer_get},
    {Py_bf_releasebuffer, host_buffer_release},
    {Py_tp_doc, "Host memory of a result segrt allocated, exported through the buffer protocol (numpy.asarray "
                "takes it without a copy)."},
    {0, NULL},
};

static PyType_Spec host_buffer_spec = {"segrt._segrt.HostBuffer", sizeof(HostBufferObject), 0,
                                       Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, host_buffer_slots};

static PyObject *host_buffer_wrap(const segrt_tensor *t)
{
    HostBufferObject *h = (HostBufferObject *)PyType_GenericAlloc(HostBuffer_Type, 0);
    if (!h) {
        segrt_tensor c = *t;
        segrt_window_result_free(&c);
        return NULL;
    }
    h->t = *t;
    Py_ssize_t stride = (Py_ssize_t)segrt_dtype_size(t->dtype);
    for (int32_t d = t->rank - 1; d >= 0; d--) {
        h->shape[d] = (Py_ssize_t)t->dims[d];
        h->strides[d] = stride;
        stride *= (Py_ssize_t)t->dims[d];
    }
    return (PyObject *)h;
}

/* --- tensors in: buffers and DLPack capsules --------------------------------- */

/* Where a run reads and writes: the engine's device, and for CUDA the
 * stream a DLPack producer must order its work before (0: none, use the
 * legacy default stream and synchronize). */
typedef struct {
    int cuda;
    int32_t device;
    uintptr_t stream;
} place;

/* What a segrt_tensor of the caller's borrows, to give back after the run. */
typedef struct {
    int buffer; /* view holds a buffer */
    Py_buffer view;
    DLManagedTensor *managed; /* a consumed capsule's tensor: its deleter */
    void *copy;               /* a host copy of a strided DLPack tensor */
    int wait;                 /* the run must wait for wait_stream (a torch tensor's current stream) */
    uintptr_t wait_stream;
} held;

/* torch's current CUDA stream of a device, as an int (set by the Python
 * layer: torch.cuda.current_stream(device).cuda_stream), or NULL. */
static PyObject *g_torch_stream;

/* Whether obj is a torch tensor (its type's module is torch). */
static int is_torch(PyObject *obj)
{
    PyObject *mod = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__module__");
    int yes = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "torch") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
    return yes;
}

static void held_release(held *h)
{
    if (h->buffer)
        PyBuffer_Release(&h->view);
    if (h->managed && h->managed->deleter)
        h->managed->deleter(h->managed);
    free(h->copy);
    memset(h, 0, sizeof *h);
}

static const char *type_name_of(PyObject *o, char *buf, size_t cap)
{
    PyObject *n = PyType_GetName(Py_TYPE(o));
    Py_ssize_t len = 0;
    const char *s = n ? PyUnicode_AsUTF8AndSize(n, &len) : NULL;
    snprintf(buf, cap, "%s", s ? s : "?");
    Py_XDECREF(n);
    PyErr_Clear();
    return buf;
}

/* Copies a strided host tensor into dense row-major order. */
static void gather_strided(char *dst, const char *src, int32_t rank, const int64_t *dims, const int64_t *strides,
                           size_t es)
{
    int64_t idx[SEGRT_MAX_RANK] = {0};
    size_t total = numel_of(rank, dims);
    for (size_t i = 0; i < total; i++) {
        int64_t off = 0;
        for (int32_t d = 0; d < rank; d++)
            off += idx[d] * strides[d];
        memcpy(dst + i * es, src + off * (int64_t)es, es);
        for (int32_t d = rank - 1; d >= 0; d--) {
            if (++idx[d] < dims[d])
                break;
            idx[d] = 0;
        }
    }
}

static int import_buffer(PyObject *obj, const char *what, const char *name, int writable, segrt_tensor *t, held *h)
{
    if (PyObject_GetBuffer(obj, &h->view, PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        if (writable && PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s `%s`: the buffer given is read-only", what, name);
        }
        return -1;
    }
    h->buffer = 1;
    char tn[64];
    if (!PyBuffer_IsContiguous(&h->view, 'C')) {
        PyErr_Format(PyExc_ValueError,
                     "%s `%s`: the %s is not C-contiguous (numpy.ascontiguousarray makes a copy that is)", what, name,
                     type_name_of(obj, tn, sizeof tn));
        return -1;
    }
    if (h->view.ndim > SEGRT_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "%s `%s`: %d dims; segrt takes at most %d", what, name, h->view.ndim,
                     SEGRT_MAX_RANK);
        return -1;
    }
    segrt_dtype d = dtype_of_format(h->view.format, h->view.itemsize);
    if (d == SEGRT_DTYPE_UNDEFINED) {
        PyErr_Format(PyExc_TypeError, "%s `%s`: segrt has no dtype for buffer format '%s' (%zd-byte items)", what, name,
                     h->view.format ? h->view.format : "B", h->view.itemsize);
        return -1;
    }
    memset(t, 0, sizeof *t);
    t->dtype = d;
    t->rank = h->view.ndim;
    for (int32_t i = 0; i < t->rank; i++)
        t->dims[i] = h->view.shape ? (int64_t)h->view.shape[i] : (int64_t)(h->view.len / h->view.itemsize);
    t->data = h->view.buf;
    t->memory = SEGRT_MEMORY_HOST;
    return 0;
}

static int import_dlpack(PyObject *obj, const char *what, const char *name, int writable, const place *at,
                         segrt_tensor *t, held *h)
{
    char tn[64];
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    int dev_type = 0, dev_id = 0;
    if (!dev || !PyArg_ParseTuple(dev, "ii", &dev_type, &dev_id)) {
        Py_XDECREF(dev);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s `%s`: the %s has __dlpack__ but no usable __dlpack_device__()", what, name,
                     type_name_of(obj, tn, sizeof tn));
        return -1;
    }
    Py_DECREF(dev);
    int device_mem = dev_type == kDLCUDA;
    if (dev_type != kDLCPU && dev_type != kDLCUDAHost && dev_type != kDLCUDA) {
        PyErr_Format(PyExc_ValueError, "%s `%s`: a tensor on DLPack device type %d; segrt takes host and CUDA tensors",
                     what, name, dev_type);
        return -1;
    }
    if (device_mem && !at->cuda) {
        PyErr_Format(PyExc_ValueError,
                     "%s `%s` is in CUDA memory (cuda:%d); this engine runs on the CPU: copy it to the host (.cpu()) "
                     "or use an engine built with device=\"cuda\"",
                     what, name, dev_id);
        return -1;
    }
    if (device_mem && dev_id != at->device) {
        PyErr_Format(PyExc_ValueError, "%s `%s` is on cuda:%d; this engine runs on cuda:%d", what, name, dev_id,
                     (int)at->device);
        return -1;
    }
    PyObject *cap;
    if (device_mem && at->stream && g_torch_stream && is_torch(obj)) {
        /* torch orders its pending work for a consumer stream in Python
         * (an event made, recorded and waited for: about 15 us a call, as
         * much as a small model's run). The same order for less: the
         * capsule without synchronization (stream -1) and the context's
         * stream made to wait for torch's current stream, which is the
         * stream torch itself would have recorded its event on. */
        PyObject *cur = PyObject_CallFunction(g_torch_stream, "i", dev_id);
        unsigned long long cs = cur ? PyLong_AsUnsignedLongLong(cur) : 0;
        Py_XDECREF(cur);
        if (PyErr_Occurred())
            return -1;
        h->wait = 1;
        h->wait_stream = (uintptr_t)cs;
        PyObject *kw = Py_BuildValue("{s:i}", "stream", -1);
        PyObject *m = kw ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
        PyObject *empty = m ? PyTuple_New(0) : NULL;
        cap = empty ? PyObject_Call(m, empty, kw) : NULL;
        Py_XDECREF(empty);
        Py_XDECREF(m);
        Py_XDECREF(kw);
    } else if (device_mem) {
        /* The producer orders its pending work on the tensor before the
         * stream we name: the context's, or the legacy default stream (1)
         * that the caller then synchronizes. */
        PyObject *kw = Py_BuildValue("{s:K}", "stream", (unsigned long long)(at->stream ? at->stream : 1));
        PyObject *m = kw ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
        PyObject *empty = m ? PyTuple_New(0) : NULL;
        cap = empty ? PyObject_Call(m, empty, kw) : NULL;
        Py_XDECREF(empty);
        Py_XDECREF(m);
        Py_XDECREF(kw);
    } else {
        cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    }
    if (!cap)
        return -1;
    DLManagedTensor *mt = PyCapsule_IsValid(cap, "dltensor") ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
    if (!mt) {
        Py_DECREF(cap);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s `%s`: __dlpack__ of the %s gave no \"dltensor\" capsule", what, name,
                     type_name_of(obj, tn, sizeof tn));
        return -1;
    }
    if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
        Py_DECREF(cap);
        return -1;
    }
    h->managed = mt;
    Py_DECREF(cap);
    const DLTensor *dl = &mt->dl_tensor;
    if (dl->ndim < 0 || dl->ndim > SEGRT_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "%s `%s`: %d dims; segrt takes at most %d", what, name, dl->ndim,
                     SEGRT_MAX_RANK);
        return -1;
    }
    segrt_dtype d = dtype_of_dl(dl->dtype);
    if (d == SEGRT_DTYPE_UNDEFINED) {
        PyErr_Format(PyExc_TypeError, "%s `%s`: segrt has no dtype for DLPack type (code %d, %d bits, %d lanes)", what,
                     name, (int)dl->dtype.code, (int)dl->dtype.bits, (int)dl->dtype.lanes);
        return -1;
    }
    memset(t, 0, sizeof *t);
    t->dtype = d;
    t->rank = dl->ndim;
    for (int32_t i = 0; i < t->rank; i++)
        t->dims[i] = dl->shape[i];
    t->data = (char *)dl->data + dl->byte_offset;
    t->memory = device_mem ? SEGRT_MEMORY_DEVICE : SEGRT_MEMORY_HOST;
    t->device = device_mem ? dev_id : 0;
    int compact = 1;
    if (dl->strides) {
        int64_t expect = 1;
        for (int32_t i = t->rank - 1; i >= 0; i--) {
            if (t->dims[i] != 1 && dl->strides[i] != expect)
                compact = 0;
            expect *= t->dims[i];
        }
    }
    if (compact)
        return 0;
    if (device_mem || writable) {
        PyErr_Format(PyExc_ValueError,
                     "%s `%s`: the %s is not contiguous (strides are not row-major); segrt reads and writes dense "
                     "row-major tensors: pass .contiguous()",
                     what, name, type_name_of(obj, tn, sizeof tn));
        return -1;
    }
    size_t es = segrt_dtype_size(d);
    h->copy = malloc(numel_of(t->rank, t->dims) * es + 1);
    if (!h->copy) {
        PyErr_NoMemory();
        return -1;
    }
    gather_strided(h->copy, t->data, t->rank, t->dims, dl->strides, es);
    t->data = h->copy;
    return 0;
}

/* obj as a segrt_tensor: a buffer (numpy; preferred for host memory) or
 * a DLPack tensor. 0, or -1 with an exception naming what and name. */
static int import_tensor(PyObject *obj, const char *what, const char *name, int writable, const place *at,
                         segrt_tensor *t, held *h)
{
    memset(h, 0, sizeof *h);
    if (PyObject_CheckBuffer(obj))
        return import_buffer(obj, what, name, writable, t, h);
    if (PyObject_HasAttrString(obj, "__dlpack__"))
        return import_dlpack(obj, what, name, writable, at, t, h);
    char tn[64];
    PyErr_Format(PyExc_TypeError,
                 "%s `%s`: segrt takes numpy arrays (or any buffer) and tensors with __dlpack__ (torch, cupy, jax), "
                 "not %s",
                 what, name, type_name_of(obj, tn, sizeof tn));
    return -1;
}

/* --- engines ----------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD segrt_engine *engine;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    segrt_context **idle; /* cap_idle >= n_contexts, so that a release never allocates */
    size_t n_idle, cap_idle;
    size_t n_contexts; /* made: idle, in use or being made */
    size_t limit;      /* 0: one per concurrent caller, made as they come */
    size_t pins;       /* calls using the engine now; close waits for none */
    int closing;
    int cuda;
    int32_t device;
    size_t n_in, n_out;
    const char *in_name[64], *out_name[64]; /* owned by the engine */
} EngineObject;

static PyTypeObject *Engine_Type;

#define ENGINE_MAX_IO 64

/* Takes a pin on the engine (it stays open until unpinned); -1 with
 * ValueError when it is closed. */
static int engine_pin(EngineObject *e)
{
    int ok;
    pthread_mutex_lock(&e->lock);
    ok = e->engine && !e->closing;
    if (ok)
        e->pins++;
    pthread_mutex_unlock(&e->lock);
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "the segrt engine is closed");
    return ok ? 0 : -1;
}

static void engine_unpin(EngineObject *e)
{
    pthread_mutex_lock(&e->lock);
    e->pins--;
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->lock);
}

/* A context for the pinned engine: an idle one, a new one while under the
 * limit, else the next one released (waiting without the GIL). */
static int ctx_acquire(EngineObject *e, segrt_context **out)
{
    segrt_context *ctx = NULL;
    segrt_status s = SEGRT_OK;
    int make = 0, nomem = 0;
    PyThreadState *ts_ = PyEval_SaveThread();
    pthread_mutex_lock(&e->lock);
    for (;;) {
        if (e->n_idle) {
            ctx = e->idle[--e->n_idle];
            break;
        }
        if (!e->limit || e->n_contexts < e->limit) {
            if (e->cap_idle < e->n_contexts + 1) {
                size_t cap = e->cap_idle ? 2 * e->cap_idle : 4;
                segrt_context **p = realloc(e->idle, cap * sizeof *p);
                if (!p) {
                    nomem = 1;
                    break;
                }
                e->idle = p;
                e->cap_idle = cap;
            }
            e->n_contexts++;
            make = 1;
            break;
        }
        pthread_cond_wait(&e->changed, &e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    if (make) {
        s = segrt_context_create(e->engine, &ctx);
        if (s != SEGRT_OK) {
            pthread_mutex_lock(&e->lock);
            e->n_contexts--;
            pthread_cond_broadcast(&e->changed);
            pthread_mutex_unlock(&e->lock);
        }
    }
    PyEval_RestoreThread(ts_);
    if (nomem) {
        PyErr_NoMemory();
        return -1;
    }
    if (s != SEGRT_OK) {
        raise_status(s);
        return -1;
    }
    *out = ctx;
    return 0;
}

static void ctx_release(EngineObject *e, segrt_context *ctx)
{
    segrt_context *extra = NULL;
    pthread_mutex_lock(&e->lock);
    if (e->limit && e->n_contexts > e->limit) { /* pool(n) shrank the set */
        extra = ctx;
        e->n_contexts--;
    } else {
        e->idle[e->n_idle++] = ctx;
    }
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->lock);
    if (extra) {
        PyThreadState *ts_ = PyEval_SaveThread();
        segrt_context_destroy(extra);
        PyEval_RestoreThread(ts_);
    }
}

static void engine_close_impl(EngineObject *e)
{
    segrt_engine *eng = NULL;
    segrt_context **idle = NULL;
    size_t n_idle = 0;
    PyThreadState *ts_ = PyEval_SaveThread();
    pthread_mutex_lock(&e->lock);
    e->closing = 1;
    while (e->pins)
        pthread_cond_wait(&e->changed, &e->lock);
    eng = e->engine;
    e->engine = NULL;
    idle = e->idle;
    n_idle = e->n_idle;
    e->idle = NULL;
    e->n_idle = e->cap_idle = e->n_contexts = 0;
    pthread_mutex_unlock(&e->lock);
    for (size_t i = 0; i < n_idle; i++)
        segrt_context_destroy(idle[i]);
    free(idle);
    segrt_engine_destroy(eng);
    PyEval_RestoreThread(ts_);
}

static void engine_dealloc(PyObject *self)
{
    EngineObject *e = (EngineObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    engine_close_impl(e);
    pthread_cond_destroy(&e->changed);
    pthread_mutex_destroy(&e->lock);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* A new Engine object owning engine. */
static PyObject *engine_wrap(segrt_engine *engine)
{
    EngineObject *e = (EngineObject *)PyType_GenericAlloc(Engine_Type, 0);
    if (!e) {
        segrt_engine_destroy(engine);
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->changed, NULL);
    e->engine = engine;
    segrt_engine_info info;
    if (segrt_engine_get_info(engine, &info) == SEGRT_OK) {
        e->cuda = info.device == SEGRT_DEVICE_CUDA;
        e->device = info.device_index;
    }
    e->n_in = segrt_engine_input_count(engine);
    e->n_out = segrt_engine_output_count(engine);
    if (e->n_in > ENGINE_MAX_IO || e->n_out > ENGINE_MAX_IO) {
        Py_DECREF(e);
        PyErr_Format(PyExc_ValueError, "the model has more than %d inputs or outputs", ENGINE_MAX_IO);
        return NULL;
    }
    for (size_t i = 0; i < e->n_in + e->n_out; i++) {
        segrt_tensor_desc d;
        segrt_status s = i < e->n_in ? segrt_engine_input(engine, i, &d) : segrt_engine_output(engine, i - e->n_in, &d);
        if (s != SEGRT_OK) {
            Py_DECREF(e);
            return raise_status(s);
        }
        if (i < e->n_in)
            e->in_name[i] = d.name;
        else
            e->out_name[i - e->n_in] = d.name;
    }
    return (PyObject *)e;
}

/* One tensor's description: (name, dtype name, dims with -1, dim names). */
static PyObject *desc_tuple(const segrt_tensor_desc *d)
{
    int32_t rank = d->rank < 0 ? 0 : d->rank;
    PyObject *names = PyTuple_New(rank);
    for (int32_t i = 0; names && i < rank; i++) {
        PyObject *v = d->dim_names[i] ? PyUnicode_FromString(d->dim_names[i]) : Py_NewRef(Py_None);
        if (!v || PyTuple_SetItem(names, i, v) < 0) {
            Py_CLEAR(names);
        }
    }
    PyObject *dims = names ? (d->rank < 0 ? Py_NewRef(Py_None) : dims_tuple(d->rank, d->dims)) : NULL;
    PyObject *r = dims ? Py_BuildValue("(ssOO)", d->name, segrt_dtype_name(d->dtype), dims, names) : NULL;
    Py_XDECREF(dims);
    Py_XDECREF(names);
    return r;
}

static PyObject *engine_io(PyObject *self, PyObject *unused)
{
    (void)unused;
    EngineObject *e = (EngineObject *)self;
    if (engine_pin(e) < 0)
        return NULL;
    PyObject *ins = PyList_New(0), *outs = PyList_New(0), *r = NULL;
    int ok = ins && outs;
    for (size_t i = 0; ok && i < e->n_in + e->n_out; i++) {
        segrt_tensor_desc d;
        segrt_status s =
            i < e->n_in ? segrt_engine_input(e->engine, i, &d) : segrt_engine_output(e->engine, i - e->n_in, &d);
        if (s != SEGRT_OK) {
            raise_status(s);
            ok = 0;
            break;
        }
        PyObject *t = desc_tuple(&d);
        ok = t && PyList_Append(i < e->n_in ? ins : outs, t) == 0;
        Py_XDECREF(t);
    }
    if (ok)
        r = PyTuple_Pack(2, ins, outs);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    engine_unpin(e);
    return r;
}

static PyObject *engine_info(PyObject *self, PyObject *unused)
{
    (void)unused;
    EngineObject *e = (EngineObject *)self;
    if (engine_pin(e) < 0)
        return NULL;
    segrt_engine_info i;
    segrt_status s = segrt_engine_get_info(e->engine, &i);
    engine_unpin(e);
    if (s != SEGRT_OK)
        return raise_status(s);
    return Py_BuildValue("{s:s,s:i,s:s,s:K,s:K,s:K,s:i,s:i,s:i}", "device",
                         i.device == SEGRT_DEVICE_CUDA ? "cuda" : "cpu", "device_index", (int)i.device_index,
                         "precision", segrt_precision_name(i.precision), "weight_bytes",
                         (unsigned long long)i.weight_bytes, "arena_bytes", (unsigned long long)i.arena_bytes,
                         "workspace_bytes", (unsigned long long)i.workspace_bytes, "steps", (int)i.steps,
                         "fallback_steps", (int)i.fallback_steps, "plans", (int)i.plans);
}

static PyObject *engine_build_report(PyObject *self, PyObject *unused)
{
    (void)unused;
    EngineObject *e = (EngineObject *)self;
    if (engine_pin(e) < 0)
        return NULL;
    segrt_build_report r;
    segrt_status s = segrt_engine_build_report(e->engine, &r);
    engine_unpin(e);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *slowest = PyList_New(0);
    for (int32_t i = 0; slowest && i < r.n_slowest; i++) {
        PyObject *t = Py_BuildValue("(ssd)", r.slowest[i].node, r.slowest[i].op, r.slowest[i].seconds);
        if (!t || PyList_Append(slowest, t) < 0)
            Py_CLEAR(slowest);
        Py_XDECREF(t);
    }
    if (!slowest)
        return NULL;
    return Py_BuildValue("{s:d,s:d,s:d,s:N,s:i,s:i,s:i,s:d}", "total_seconds", r.total_seconds, "graph_seconds",
                         r.graph_seconds, "backend_seconds", r.backend_seconds, "slowest", slowest, "cudnn_searches",
                         (int)r.cudnn_searches, "cudnn_reused", (int)r.cudnn_reused, "cudnn_finalized",
                         (int)r.cudnn_finalized, "cudnn_seconds", r.cudnn_seconds);
}

static PyObject *engine_save(PyObject *self, PyObject *arg)
{
    EngineObject *e = (EngineObject *)self;
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    if (engine_pin(e) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    const char *p = PyBytes_AsString(path);
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_engine_save(e->engine, p);
    PyEval_RestoreThread(ts_);
    engine_unpin(e);
    Py_DECREF(path);
    if (s != SEGRT_OK)
        return raise_status(s);
    Py_RETURN_NONE;
}

/* ((dtype, dims), ...) of the inputs -> ((dtype, dims), ...) of the
 * outputs, as segrt_engine_output_shapes gives them. */
static PyObject *engine_output_shapes(PyObject *self, PyObject *arg)
{
    EngineObject *e = (EngineObject *)self;
    segrt_tensor in[ENGINE_MAX_IO], out[ENGINE_MAX_IO];
    Py_ssize_t n = PyTuple_Check(arg) ? PyTuple_Size(arg) : -1;
    if (n < 0 || n > ENGINE_MAX_IO) {
        PyErr_SetString(PyExc_TypeError, "_output_shapes wants a tuple of (dtype, dims)");
        return NULL;
    }
    memset(in, 0, sizeof in);
    for (Py_ssize_t i = 0; i < n; i++) {
        int dtype = 0;
        PyObject *dims = NULL;
        if (!PyArg_ParseTuple(PyTuple_GetItem(arg, i), "iO", &dtype, &dims))
            return NULL;
        int rank = parse_dims(dims, "dims", in[i].dims);
        if (rank < 0)
            return NULL;
        in[i].dtype = (segrt_dtype)dtype;
        in[i].rank = rank;
    }
    if (engine_pin(e) < 0)
        return NULL;
    segrt_status s = segrt_engine_output_shapes(e->engine, (size_t)n, in, e->n_out, out);
    engine_unpin(e);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *r = PyTuple_New((Py_ssize_t)e->n_out);
    for (size_t j = 0; r && j < e->n_out; j++) {
        PyObject *d = dims_tuple(out[j].rank, out[j].dims);
        PyObject *t = d ? Py_BuildValue("(iO)", (int)out[j].dtype, d) : NULL;
        Py_XDECREF(d);
        if (!t || PyTuple_SetItem(r, (Py_ssize_t)j, t) < 0)
            Py_CLEAR(r);
    }
    return r;
}

/* The state of one run: inputs and outputs as segrt sees them, what they
 * borrow, and the Python objects handed back. */
typedef struct {
    size_t n_in, n_out;
    segrt_tensor in[ENGINE_MAX_IO], out[ENGINE_MAX_IO];
    held in_held[ENGINE_MAX_IO], out_held[ENGINE_MAX_IO];
    PyObject *out_obj[ENGINE_MAX_IO];
} run_state;

static void run_state_release(run_state *r, int keep_outputs)
{
    for (size_t i = 0; i < r->n_in; i++)
        held_release(&r->in_held[i]);
    for (size_t j = 0; j < r->n_out; j++) {
        held_release(&r->out_held[j]);
        if (!keep_outputs)
            Py_CLEAR(r->out_obj[j]);
    }
}

/* Imports the inputs, works out the outputs and imports or allocates them
 * (outs: None or a tuple with None where segrt allocates; alloc(shape,
 * dtype) makes a host array). The engine is pinned and ctx acquired. */
static int run_prepare(EngineObject *e, segrt_context *ctx, PyObject *inputs, PyObject *outs, PyObject *alloc,
                       run_state *r)
{
    memset(r, 0, sizeof *r);
    place at = {e->cuda, e->device, 0};
    if (e->cuda) {
        void *stream = NULL;
        segrt_status s = segrt_context_stream(ctx, &stream);
        if (s != SEGRT_OK) {
            raise_status(s);
            return -1;
        }
        at.stream = (uintptr_t)stream;
    }
    Py_ssize_t n = PyTuple_Check(inputs) ? PyTuple_Size(inputs) : -1;
    if (n != (Py_ssize_t)e->n_in) {
        PyErr_Format(PyExc_ValueError, "the model takes %zu inputs; %zd given", e->n_in, n);
        return -1;
    }
    r->n_in = (size_t)n;
    int any_device = 0;
    for (size_t i = 0; i < r->n_in; i++) {
        if (import_tensor(PyTuple_GetItem(inputs, (Py_ssize_t)i), "input", e->in_name[i], 0, &at, &r->in[i],
                          &r->in_held[i]) < 0)
            return -1;
        any_device |= r->in[i].memory == SEGRT_MEMORY_DEVICE;
    }
    segrt_status s = segrt_engine_output_shapes(e->engine, r->n_in, r->in, e->n_out, r->out);
    if (s != SEGRT_OK) {
        raise_status(s);
        return -1;
    }
    r->n_out = e->n_out;
    if (outs != Py_None && (!PyTuple_Check(outs) || PyTuple_Size(outs) != (Py_ssize_t)e->n_out)) {
        PyErr_Format(PyExc_ValueError, "out: the model gives %zu outputs", e->n_out);
        return -1;
    }
    for (size_t j = 0; j < r->n_out; j++) {
        segrt_tensor want = r->out[j];
        PyObject *given = outs == Py_None ? Py_None : PyTuple_GetItem(outs, (Py_ssize_t)j);
        if (given != Py_None) {
            if (import_tensor(given, "output", e->out_name[j], 1, &at, &r->out[j], &r->out_held[j]) < 0)
                return -1;
            if (r->out[j].dtype != want.dtype || r->out[j].rank != want.rank ||
                memcmp(r->out[j].dims, want.dims, sizeof(int64_t) * (size_t)want.rank) != 0) {
                PyObject *a = dims_tuple(want.rank, want.dims), *b = dims_tuple(r->out[j].rank, r->out[j].dims);
                if (a && b)
                    PyErr_Format(PyExc_ValueError, "out `%s`: the output is %s %R; the array given is %s %R",
                                 e->out_name[j], segrt_dtype_name(want.dtype), a, segrt_dtype_name(r->out[j].dtype), b);
                Py_XDECREF(a);
                Py_XDECREF(b);
                return -1;
            }
            r->out_obj[j] = Py_NewRef(given);
            continue;
        }
        if (any_device) {
            r->out_obj[j] = device_array_new(want.dtype, want.rank, want.dims, e->device);
            if (!r->out_obj[j])
                return -1;
            r->out[j].data = ((DeviceArrayObject *)r->out_obj[j])->data;
            r->out[j].memory = SEGRT_MEMORY_DEVICE;
            r->out[j].device = e->device;
            continue;
        }
        PyObject *shape = dims_tuple(want.rank, want.dims);
        r->out_obj[j] = shape ? PyObject_CallFunction(alloc, "Oi", shape, (int)want.dtype) : NULL;
        Py_XDECREF(shape);
        if (!r->out_obj[j] ||
            import_tensor(r->out_obj[j], "output", e->out_name[j], 1, &at, &r->out[j], &r->out_held[j]) < 0)
            return -1;
    }
    /* torch tensors among inputs and outputs: the run waits for their
     * streams' pending work (import_dlpack). */
    uintptr_t last = 0;
    int waited = 0;
    for (size_t k = 0; k < r->n_in + r->n_out; k++) {
        const held *h = k < r->n_in ? &r->in_held[k] : &r->out_held[k - r->n_in];
        if (!h->wait || (waited && h->wait_stream == last))
            continue;
        segrt_status ws = segrt_context_wait_stream(ctx, (void *)h->wait_stream);
        if (ws != SEGRT_OK) {
            raise_status(ws);
            return -1;
        }
        last = h->wait_stream;
        waited = 1;
    }
    return 0;
}

/* _run(inputs, outs, alloc) -> tuple of outputs. */
static PyObject *engine_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    EngineObject *e = (EngineObject *)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_run(inputs, outs, alloc)");
        return NULL;
    }
    if (engine_pin(e) < 0)
        return NULL;
    segrt_context *ctx = NULL;
    if (ctx_acquire(e, &ctx) < 0) {
        engine_unpin(e);
        return NULL;
    }
    run_state *r = malloc(sizeof *r);
    if (!r) {
        ctx_release(e, ctx);
        engine_unpin(e);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    if (run_prepare(e, ctx, args[0], args[1], args[2], r) == 0) {
        segrt_status s;
        PyThreadState *ts_ = PyEval_SaveThread();
        s = segrt_context_run(ctx, r->n_in, r->in, r->n_out, r->out);
        PyEval_RestoreThread(ts_);
        if (s != SEGRT_OK)
            raise_status(s);
        else {
            result = PyTuple_New((Py_ssize_t)r->n_out);
            for (size_t j = 0; result && j < r->n_out; j++) {
                PyTuple_SetItem(result, (Py_ssize_t)j, r->out_obj[j]);
                r->out_obj[j] = NULL;
            }
        }
    }
    run_state_release(r, 0);
    free(r);
    ctx_release(e, ctx);
    engine_unpin(e);
    return result;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* _c_loop(inputs, alloc, n) -> seconds for n bare segrt_context_run calls
 * on the same buffers and context (the benchmark's baseline). */
static PyObject *engine_c_loop(PyObject *self, PyObject *args)
{
    EngineObject *e = (EngineObject *)self;
    PyObject *inputs, *alloc;
    long long n = 0;
    if (!PyArg_ParseTuple(args, "OOL", &inputs, &alloc, &n))
        return NULL;
    if (engine_pin(e) < 0)
        return NULL;
    segrt_context *ctx = NULL;
    if (ctx_acquire(e, &ctx) < 0) {
        engine_unpin(e);
        return NULL;
    }
    run_state *r = malloc(sizeof *r);
    PyObject *result = NULL;
    if (!r)
        PyErr_NoMemory();
    else if (run_prepare(e, ctx, inputs, Py_None, alloc, r) == 0) {
        segrt_status s = SEGRT_OK;
        double t = 0;
        PyThreadState *ts_ = PyEval_SaveThread();
        double t0 = now_seconds();
        for (long long i = 0; i < n && s == SEGRT_OK; i++)
            s = segrt_context_run(ctx, r->n_in, r->in, r->n_out, r->out);
        t = now_seconds() - t0;
        PyEval_RestoreThread(ts_);
        if (s != SEGRT_OK)
            raise_status(s);
        else
            result = PyFloat_FromDouble(t);
    }
    if (r) {
        run_state_release(r, 0);
        free(r);
    }
    ctx_release(e, ctx);
    engine_unpin(e);
    return result;
}

/* _pool(n): at most n contexts (0: as many as concurrent callers), the
 * first n made now. */
static PyObject *engine_pool(PyObject *self, PyObject *arg)
{
    EngineObject *e = (EngineObject *)self;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "pool: n must be >= 1");
        return NULL;
    }
    if (engine_pin(e) < 0)
        return NULL;
    segrt_context *extra[64];
    size_t n_extra = 0;
    pthread_mutex_lock(&e->lock);
    e->limit = (size_t)n;
    while (e->limit && e->n_contexts > e->limit && e->n_idle && n_extra < 64) {
        extra[n_extra++] = e->idle[--e->n_idle];
        e->n_contexts--;
    }
    pthread_mutex_unlock(&e->lock);
    PyThreadState *ts_ = PyEval_SaveThread();
    for (size_t i = 0; i < n_extra; i++)
        segrt_context_destroy(extra[i]);
    PyEval_RestoreThread(ts_);

    /* Make the first n now: take them all, then give them back. */
    segrt_context **taken = n ? calloc((size_t)n, sizeof *taken) : NULL;
    Py_ssize_t got = 0;
    int failed = n && !taken;
    for (; !failed && got < n; got++) {
        pthread_mutex_lock(&e->lock);
        int have = e->n_contexts >= (size_t)n && !e->n_idle;
        pthread_mutex_unlock(&e->lock);
        if (have)
            break; /* the rest are in use by other callers */
        if (ctx_acquire(e, &taken[got]) < 0)
            failed = 1;
        if (failed)
            break;
    }
    for (Py_ssize_t i = 0; i < got; i++)
        ctx_release(e, taken[i]);
    free(taken);
    engine_unpin(e);
    if (failed) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return NULL;
    }
    Py_RETURN_NONE;
}

/* (contexts made, idle, limit), for tests. */
static PyObject *engine_contexts(PyObject *self, PyObject *unused)
{
    (void)unused;
    EngineObject *e = (EngineObject *)self;
    pthread_mutex_lock(&e->lock);
    size_t made = e->n_contexts, idle = e->n_idle, limit = e->limit;
    pthread_mutex_unlock(&e->lock);
    return Py_BuildValue("(nnn)", (Py_ssize_t)made, (Py_ssize_t)idle, (Py_ssize_t)limit);
}

static PyObject *engine_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    engine_close_impl((EngineObject *)self);
    Py_RETURN_NONE;
}

static PyObject *engine_get_closed(PyObject *self, void *c)
{
    (void)c;
    EngineObject *e = (EngineObject *)self;
    pthread_mutex_lock(&e->lock);
    int closed = !e->engine || e->closing;
    pthread_mutex_unlock(&e->lock);
    return PyBool_FromLong(closed);
}

static PyMethodDef engine_methods[] = {
    {"_io", engine_io, METH_NOARGS, "(inputs, outputs): (name, dtype, dims, dim names) each"},
    {"_info", engine_info, METH_NOARGS, "segrt_engine_info as a dict"},
    {"_build_report", engine_build_report, METH_NOARGS, "segrt_engine_build_report as a dict"},
    {"save", engine_save, METH_O, "save(path): writes the plan file"},
    {"_output_shapes", engine_output_shapes, METH_O, "((dtype, dims), ...) of the inputs -> of the outputs"},
    {"_run", (PyCFunction)(void (*)(void))engine_run, METH_FASTCALL, "_run(inputs, outs, alloc) -> outputs"},
    {"_c_loop", engine_c_loop, METH_VARARGS, "_c_loop(inputs, alloc, n) -> seconds of n bare runs"},
    {"_pool", engine_pool, METH_O, "_pool(n): at most n contexts (0: unbounded), n made now"},
    {"_contexts", engine_contexts, METH_NOARGS, "(made, idle, limit)"},
    {"close", engine_close, METH_NOARGS, "waits for runs in progress, then frees the contexts and the engine"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef engine_getset[] = {
    {"closed", engine_get_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot engine_slots[] = {
    {Py_tp_dealloc, engine_dealloc},
    {Py_tp_methods, engine_methods},
    {Py_tp_getset, engine_getset},
    {Py_tp_doc, "A segrt_engine with its contexts (segrt.Engine wraps it)."},
    {0, NULL},
};

static PyType_Spec engine_spec = {"segrt._segrt.Engine", sizeof(EngineObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, engine_slots};

/* build(path, device_kind, device_index, precision, shapes, cache_dir,
 * use_cache, threads) -> (Engine, cache hit). shapes: ((name, min, opt,
 * max), ...). */
static PyObject *mod_build(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *path = NULL, *shapes, *cache_obj;
    int kind, index, precision, use_cache, threads;
    if (!PyArg_ParseTuple(args, "O&iiiOOpi", PyUnicode_FSConverter, &path, &kind, &index, &precision, &shapes,
                          &cache_obj, &use_cache, &threads))
        return NULL;
    PyObject *cache = NULL;
    if (cache_obj != Py_None && !PyUnicode_FSConverter(cache_obj, &cache)) {
        Py_DECREF(path);
        return NULL;
    }
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_device(opts, (segrt_device_kind)kind, index);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_precision(opts, (segrt_precision)precision);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_threads(opts, threads);
    Py_ssize_t n = s == SEGRT_OK ? PySequence_Size(shapes) : 0;
    int pyerr = n < 0;
    for (Py_ssize_t i = 0; s == SEGRT_OK && !pyerr && i < n; i++) {
        PyObject *item = PySequence_GetItem(shapes, i);
        const char *name = NULL;
        PyObject *mn, *op, *mx;
        int64_t a[SEGRT_MAX_RANK], b[SEGRT_MAX_RANK], c[SEGRT_MAX_RANK];
        int ra = -1, rb = -1, rc = -1;
        if (!item || !PyArg_ParseTuple(item, "sOOO", &name, &mn, &op, &mx) || (ra = parse_dims(mn, "shapes", a)) < 0 ||
            (rb = parse_dims(op, "shapes", b)) < 0 || (rc = parse_dims(mx, "shapes", c)) < 0) {
            pyerr = 1;
        } else if (ra != rb || rb != rc) {
            PyErr_Format(PyExc_ValueError, "shapes[%s]: min, opt and max have different ranks", name);
            pyerr = 1;
        } else {
            s = segrt_build_options_set_shape_range(opts, name, ra, a, b, c);
        }
        Py_XDECREF(item);
    }
    segrt_engine *engine = NULL;
    int hit = 0;
    if (s == SEGRT_OK && !pyerr) {
        const char *p = PyBytes_AsString(path), *cd = cache ? PyBytes_AsString(cache) : NULL;
        PyThreadState *ts_ = PyEval_SaveThread();
        if (kind == SEGRT_DEVICE_CUDA) /* CUDA comes up while the model is parsed */
            segrt_cuda_prepare(index);
        segrt_model *model = NULL;
        s = segrt_model_load(p, &model);
        if (s == SEGRT_OK)
            s = use_cache ? segrt_engine_build_cached(model, opts, cd, &hit, &engine)
                          : segrt_engine_build(model, opts, &engine);
        segrt_model_destroy(model);
        PyEval_RestoreThread(ts_);
    }
    segrt_build_options_destroy(opts);
    Py_DECREF(path);
    Py_XDECREF(cache);
    if (pyerr)
        return NULL;
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *e = engine_wrap(engine);
    return e ? Py_BuildValue("(NO)", e, hit ? Py_True : Py_False) : NULL;
}

/* load(plan_path, device_index) -> Engine. */
static PyObject *mod_load(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *path = NULL;
    int device = 0;
    if (!PyArg_ParseTuple(args, "O&i", PyUnicode_FSConverter, &path, &device))
        return NULL;
    segrt_engine *engine = NULL;
    const char *p = PyBytes_AsString(path);
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_engine_load(p, device, &engine);
    PyEval_RestoreThread(ts_);
    Py_DECREF(path);
    if (s != SEGRT_OK)
        return raise_status(s);
    return engine_wrap(engine);
}

/* --- sliding windows --------------------------------------------------------------- */

/* The options of a window job from the config tuple (roi, overlap, batch,
 * blend, sigma_scale, pad, pad_value, grid, output, activation,
 * threshold, mirror_axes, max_memory, max_host_memory, accumulator: a dtype). */
static segrt_window_options *window_options(PyObject *cfg)
{
    PyObject *roi_seq, *ov_seq;
    int batch, blend, pad, grid, output, activation;
    double sigma, pad_value, threshold;
    unsigned int mirror;
    unsigned long long max_memory, max_host;
    int accumulator;
    if (!PyArg_ParseTuple(cfg, "OOiididiiidIKKi", &roi_seq, &ov_seq, &batch, &blend, &sigma, &pad, &pad_value, &grid,
                          &output, &activation, &threshold, &mirror, &max_memory, &max_host, &accumulator))
        return NULL;
    int64_t roi[SEGRT_MAX_RANK];
    int n = parse_dims(roi_seq, "roi", roi);
    if (n < 0)
        return NULL;
    double ov[SEGRT_MAX_RANK];
    if (PySequence_Size(ov_seq) != n) {
        PyErr_SetString(PyExc_ValueError, "overlap: one value per spatial dim");
        return NULL;
    }
    for (int d = 0; d < n; d++) {
        PyObject *v = PySequence_GetItem(ov_seq, d);
        ov[d] = v ? PyFloat_AsDouble(v) : -1;
        Py_XDECREF(v);
        if (PyErr_Occurred())
            return NULL;
    }
    segrt_window_options *o = NULL;
    segrt_status s = segrt_window_options_create(n, roi, &o);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_overlap(o, ov);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_batch(o, batch);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_blend(o, (segrt_window_blend)blend, sigma);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_padding(o, (segrt_window_pad)pad, (float)pad_value);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_grid(o, (segrt_window_grid)grid);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_output(o, (segrt_window_output)output, (segrt_window_activation)activation,
                                            (float)threshold);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_mirroring(o, mirror);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_max_memory(o, max_memory);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_max_host_memory(o, max_host);
    if (s == SEGRT_OK)
        s = segrt_window_options_set_accumulator(o, (segrt_dtype)accumulator);
    if (s != SEGRT_OK) {
        segrt_window_options_destroy(o);
        raise_status(s);
        return NULL;
    }
    return o;
}

/* window_input_dims(cfg, image_dims) -> dims for float32 images. */
static PyObject *mod_window_input_dims(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *cfg, *dims_seq;
    if (!PyArg_ParseTuple(args, "OO", &cfg, &dims_seq))
        return NULL;
    segrt_tensor img;
    memset(&img, 0, sizeof img);
    img.dtype = SEGRT_DTYPE_FLOAT32;
    int rank = parse_dims(dims_seq, "image shape", img.dims);
    if (rank < 0)
        return NULL;
    img.rank = rank;
    segrt_window_options *o = window_options(cfg);
    if (!o)
        return NULL;
    int64_t dims[SEGRT_MAX_RANK];
    segrt_status s = segrt_window_input_dims(o, &img, dims);
    segrt_window_options_destroy(o);
    if (s != SEGRT_OK)
        return raise_status(s);
    return dims_tuple(rank, dims);
}

/* Engines of a tuple of Engine objects, pinned; -1 with an exception. */
static int pin_engines(PyObject *engines, EngineObject **e, size_t *n)
{
    Py_ssize_t k = PyTuple_Check(engines) ? PyTuple_Size(engines) : -1;
    if (k < 1 || k > 64) {
        PyErr_SetString(PyExc_ValueError, "engines: 1 to 64 engines");
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *o = PyTuple_GetItem(engines, i);
        if (!PyObject_TypeCheck(o, Engine_Type)) {
            PyErr_SetString(PyExc_TypeError, "engines: segrt engines");
            for (Py_ssize_t j = 0; j < i; j++)
                engine_unpin(e[j]);
            return -1;
        }
        e[i] = (EngineObject *)o;
        if (engine_pin(e[i]) < 0) {
            for (Py_ssize_t j = 0; j < i; j++)
                engine_unpin(e[j]);
            return -1;
        }
    }
    *n = (size_t)k;
    return 0;
}

/* window_auto_batch(engines, cfg, image_dims) -> batch. */
static PyObject *mod_window_auto_batch(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *engines, *cfg, *dims_seq;
    if (!PyArg_ParseTuple(args, "OOO", &engines, &cfg, &dims_seq))
        return NULL;
    segrt_tensor img;
    memset(&img, 0, sizeof img);
    img.dtype = SEGRT_DTYPE_FLOAT32;
    int rank = parse_dims(dims_seq, "image shape", img.dims);
    if (rank < 0)
        return NULL;
    img.rank = rank;
    segrt_window_options *o = window_options(cfg);
    if (!o)
        return NULL;
    EngineObject *e[64];
    size_t n = 0;
    if (pin_engines(engines, e, &n) < 0) {
        segrt_window_options_destroy(o);
        return NULL;
    }
    segrt_engine *eng[64];
    for (size_t i = 0; i < n; i++)
        eng[i] = e[i]->engine;
    int32_t b = 1;
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_window_auto_batch(o, &img, eng, n, &b);
    PyEval_RestoreThread(ts_);
    for (size_t i = 0; i < n; i++)
        engine_unpin(e[i]);
    segrt_window_options_destroy(o);
    if (s != SEGRT_OK)
        return raise_status(s);
    return PyLong_FromLong(b);
}

/* The progress callback: called by the pipeline on the calling thread
 * between batches, with the GIL released; takes it for the Python call.
 * An exception is kept and raised when the run returns (the C API has no
 * way to stop a run). */
typedef struct {
    PyObject *fn;
    int failed;
    PyObject *type, *value, *tb;
} progress_state;

static void progress_call(void *user, int64_t done, int64_t total)
{
    progress_state *p = user;
    if (p->failed)
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(p->fn, "LL", (long long)done, (long long)total);
    if (r)
        Py_DECREF(r);
    else {
        p->failed = 1;
        PyErr_Fetch(&p->type, &p->value, &p->tb);
    }
    PyGILState_Release(g);
}

static PyObject *window_stats_dict(const segrt_window_stats *st, int32_t batch)
{
    return Py_BuildValue("{s:L,s:L,s:i,s:O,s:L,s:K,s:K,s:i}", "windows", (long long)st->windows, "runs",
                         (long long)st->runs, "passes", (int)st->passes, "on_device",
                         st->on_device ? Py_True : Py_False, "slab_rows", (long long)st->slab_rows, "pipeline_bytes",
                         (unsigned long long)st->pipeline_bytes, "context_bytes", (unsigned long long)st->context_bytes,
                         "batch", (int)batch);
}

/* window_run(engines, image, cfg, progress) -> (result, stats). */
static PyObject *mod_window_run(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *engines, *image, *cfg, *progress;
    if (!PyArg_ParseTuple(args, "OOOO", &engines, &image, &cfg, &progress))
        return NULL;
    segrt_window_options *o = window_options(cfg);
    if (!o)
        return NULL;
    int32_t batch = 1;
    {
        PyObject *b = PyTuple_GetItem(cfg, 2);
        batch = b ? (int32_t)PyLong_AsLong(b) : 1;
    }
    EngineObject *e[64];
    segrt_context *ctx[64];
    size_t n = 0, got = 0;
    PyObject *result = NULL;
    held h;
    memset(&h, 0, sizeof h);
    progress_state ps = {progress, 0, NULL, NULL, NULL};
    if (pin_engines(engines, e, &n) < 0) {
        segrt_window_options_destroy(o);
        return NULL;
    }
    int ok = 1;
    for (; got < n && ok; got++)
        if (ctx_acquire(e[got], &ctx[got]) < 0) {
            ok = 0;
            break;
        }
    segrt_tensor img;
    place at = {e[0]->cuda, e[0]->device, 0};
    if (ok && import_tensor(image, "image", "image", 0, &at, &img, &h) < 0)
        ok = 0;
    if (ok && progress != Py_None) {
        segrt_status s = segrt_window_options_set_progress(o, progress_call, &ps);
        if (s != SEGRT_OK) {
            raise_status(s);
            ok = 0;
        }
    }
    int device_image = ok && img.memory == SEGRT_MEMORY_DEVICE;
    if (ok && device_image && e[0]->cuda) {
        segrt_status s = segrt_window_options_set_result_memory(o, SEGRT_MEMORY_DEVICE);
        if (s != SEGRT_OK) {
            raise_status(s);
            ok = 0;
        }
    }
    if (ok) {
        segrt_tensor res;
        segrt_window_stats st;
        segrt_status s = SEGRT_OK;
        memset(&res, 0, sizeof res);
        memset(&st, 0, sizeof st);
        PyThreadState *ts_ = PyEval_SaveThread();

        /* The job's streams are its own: the producer's work, ordered on
         * the legacy default stream, must be done before it reads. */
        if (device_image)
            s = segrt_device_synchronize(img.device);
        if (s == SEGRT_OK)
            s = segrt_window_run_with_stats(ctx, n, o, &img, &res, &st);
        PyEval_RestoreThread(ts_);
        if (ps.failed) {
            segrt_window_result_free(&res);
            PyErr_Restore(ps.type, ps.value, ps.tb);
            ps.type = ps.value = ps.tb = NULL;
        } else if (s != SEGRT_OK)
            raise_status(s);
        else {
            PyObject *obj = res.memory == SEGRT_MEMORY_DEVICE
                                ? device_array_wrap(res.data, res.dtype, res.rank, res.dims, res.device)
                                : host_buffer_wrap(&res);
            PyObject *stats = obj ? window_stats_dict(&st, batch) : NULL;
            result = stats ? Py_BuildValue("(NN)", obj, stats) : NULL;
            if (!stats)
                Py_XDECREF(obj);
        }
    }
    held_release(&h);
    for (size_t i = 0; i < got; i++)
        ctx_release(e[i], ctx[i]);
    for (size_t i = 0; i < n; i++)
        engine_unpin(e[i]);
    segrt_window_options_destroy(o);
    return result;
}

/* --- comparing, devices, the library -------------------------------------------- */

/* compare(a, b, class_axis or None) -> dict: what `segrt compare --json`
 * prints, less the file names. */
static PyObject *mod_compare(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *a_obj, *b_obj, *axis_obj;
    if (!PyArg_ParseTuple(args, "OOO", &a_obj, &b_obj, &axis_obj))
        return NULL;
    int has_axis = axis_obj != Py_None;
    long axis = has_axis ? PyLong_AsLong(axis_obj) : 0;
    if (has_axis && axis == -1 && PyErr_Occurred())
        return NULL;
    place host = {0, 0, 0};
    segrt_tensor a, b;
    held ha, hb;
    if (import_tensor(a_obj, "array", "a", 0, &host, &a, &ha) < 0)
        return NULL;
    if (import_tensor(b_obj, "array", "b", 0, &host, &b, &hb) < 0) {
        held_release(&ha);
        return NULL;
    }
    segrt_compare_stats st;
    segrt_class_stats cs;
    memset(&cs, 0, sizeof cs);
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_compare(&a, &b, &st);
    if (s == SEGRT_OK && has_axis)
        s = segrt_compare_classes(&a, &b, (int32_t)axis, &cs);
    PyEval_RestoreThread(ts_);
    held_release(&ha);
    held_release(&hb);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *shape = dims_tuple(a.rank, a.dims);
    PyObject *d =
        shape ? Py_BuildValue("{s:O,s:L,s:d,s:d,s:d,s:d,s:d,s:d,s:L}", "shape", shape, "count", (long long)st.count,
                              "max_abs", st.max_abs, "mae", st.mae, "mse", st.mse, "rel_l2", st.rel_l2, "psnr_db",
                              st.psnr_db, "psnr_range", st.range, "nan_mismatches", (long long)st.nan_mismatches)
              : NULL;
    Py_XDECREF(shape);
    if (d && has_axis) {
        PyObject *dice = PyList_New((Py_ssize_t)cs.n_classes);
        for (int64_t c = 0; dice && c < cs.n_classes; c++) {
            PyObject *v = cs.dice[c] != cs.dice[c] ? Py_NewRef(Py_None) : PyFloat_FromDouble(cs.dice[c]);
            if (!v || PyList_SetItem(dice, (Py_ssize_t)c, v) < 0)
                Py_CLEAR(dice);
        }
        PyObject *more = dice ? Py_BuildValue("{s:i,s:L,s:L,s:L,s:d,s:O,s:d}", "class_axis", (int)cs.axis, "n_classes",
                                              (long long)cs.n_classes, "positions", (long long)cs.positions, "agree",
                                              (long long)cs.agree, "argmax_agreement", cs.argmax_agreement, "dice",
                                              dice, "mean_dice", cs.mean_dice)
                              : NULL;
        if (!more || PyDict_Update(d, more) < 0)
            Py_CLEAR(d);
        Py_XDECREF(more);
        Py_XDECREF(dice);
    }
    segrt_class_stats_free(&cs);
    return d;
}

/* --- volumes: segrt_volume_* and segrt_volume_save ---------------------------- */

static PyObject *geometry_dict(const segrt_geometry *g)
{
    PyObject *dir = Py_BuildValue("((ddd)(ddd)(ddd))", g->direction[0][0], g->direction[0][1], g->direction[0][2],
                                  g->direction[1][0], g->direction[1][1], g->direction[1][2], g->direction[2][0],
                                  g->direction[2][1], g->direction[2][2]);
    PyObject *d = dir ? Py_BuildValue("{s:O,s:(ddd),s:(ddd),s:O,s:i,s:i}", "known", g->known ? Py_True : Py_False,
                                      "spacing", g->spacing[0], g->spacing[1], g->spacing[2], "origin", g->origin[0],
                                      g->origin[1], g->origin[2], "direction", dir, "qform_code", (int)g->qform_code,
                                      "sform_code", (int)g->sform_code)
                      : NULL;
    Py_XDECREF(dir);
    return d;
}

static int geometry_of_tuple(PyObject *t, segrt_geometry *g)
{
    /* (known, spacing[3], origin[3], direction[3][3] row by row, qform_code, sform_code) */
    int known = 0;
    memset(g, 0, sizeof *g);
    if (!PyArg_ParseTuple(t, "p(ddd)(ddd)((ddd)(ddd)(ddd))ii", &known, &g->spacing[0], &g->spacing[1],
                          &g->spacing[2], &g->origin[0], &g->origin[1], &g->origin[2], &g->direction[0][0],
                          &g->direction[0][1], &g->direction[0][2], &g->direction[1][0], &g->direction[1][1],
                          &g->direction[1][2], &g->direction[2][0], &g->direction[2][1], &g->direction[2][2],
                          &g->qform_code, &g->sform_code))
        return -1;
    g->known = known;
    return 0;
}

/* volume_info(path, series_uid[, allow_uneven]) -> dict: dims (D, H, W),
 * channels, dtype (segrt's code), format, geometry, notice (None or what
 * the open did on its own). */
static PyObject *mod_volume_info(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *path, *series = NULL;
    int uneven = 0;
    if (!PyArg_ParseTuple(args, "sz|p", &path, &series, &uneven))
        return NULL;
    segrt_volume *v = NULL;
    segrt_image_info info;
    segrt_status s;
    char notice[600] = "";
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_volume_open_with(path, series, uneven, &v);
    if (s == SEGRT_OK)
        s = segrt_volume_info(v, &info);
    if (s == SEGRT_OK && segrt_volume_notice(v))
        snprintf(notice, sizeof notice, "%s", segrt_volume_notice(v));
    segrt_volume_close(v);
    PyEval_RestoreThread(ts_);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *g = geometry_dict(&info.geometry);
    PyObject *d = g ? Py_BuildValue("{s:(iii),s:i,s:i,s:i,s:O,s:z}", "dims", (int)info.depth, (int)info.height,
                                    (int)info.width, "channels", (int)info.channels, "dtype", (int)info.dtype, "format",
                                    (int)info.format, "geometry", g, "notice", notice[0] ? notice : NULL)
                    : NULL;
    Py_XDECREF(g);
    return d;
}

/* volume_read(path, series_uid, out[, allow_uneven]): the whole volume
 * into out, a writable C-contiguous buffer of channels x D x H x W samples
 * of the volume's dtype (volume_info's). */
static PyObject *mod_volume_read(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *path, *series = NULL;
    PyObject *out;
    int uneven = 0;
    if (!PyArg_ParseTuple(args, "szO|p", &path, &series, &out, &uneven))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    segrt_volume *v = NULL;
    segrt_image_info info;
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_volume_open_with(path, series, uneven, &v);
    if (s == SEGRT_OK)
        s = segrt_volume_info(v, &info);
    if (s == SEGRT_OK) {
        int64_t start[3] = {0, 0, 0}, size[3] = {info.depth, info.height, info.width};
        s = segrt_volume_read(v, start, size, view.buf, (size_t)view.len);
    }
    segrt_volume_close(v);
    PyEval_RestoreThread(ts_);
    PyBuffer_Release(&view);
    if (s != SEGRT_OK)
        return raise_status(s);
    Py_RETURN_NONE;
}

/* volume_save(path, array, geometry tuple or None) */
static PyObject *mod_volume_save(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *path;
    PyObject *arr, *geo;
    if (!PyArg_ParseTuple(args, "sOO", &path, &arr, &geo))
        return NULL;
    segrt_geometry g;
    if (geo != Py_None && geometry_of_tuple(geo, &g) < 0)
        return NULL;
    place host = {0, 0, 0};
    segrt_tensor t;
    held h;
    memset(&h, 0, sizeof h);
    if (import_tensor(arr, "array", "volume", 0, &host, &t, &h) < 0)
        return NULL;
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_volume_save(path, &t, geo == Py_None ? NULL : &g);
    PyEval_RestoreThread(ts_);
    held_release(&h);
    if (s != SEGRT_OK)
        return raise_status(s);
    Py_RETURN_NONE;
}

/* dicom_seg_save(path, labels, series_path, series_uid, allow_uneven, names) */
static PyObject *mod_dicom_seg_save(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *path, *src_path, *series = NULL;
    PyObject *arr, *names;
    int uneven = 0;
    if (!PyArg_ParseTuple(args, "sOszpO!", &path, &arr, &src_path, &series, &uneven, &PyList_Type, &names))
        return NULL;
    Py_ssize_t n = PyList_Size(names);
    if (n > 4096)
        return PyErr_Format(PyExc_ValueError, "names: %zd of them (at most 4096)", n);
    const char *name[4096];
    for (Py_ssize_t i = 0; i < n; i++) { /* borrowed: the list holds the strings */
        Py_ssize_t len;
        if (!(name[i] = PyUnicode_AsUTF8AndSize(PyList_GetItem(names, i), &len)))
            return NULL;
    }
    place host = {0, 0, 0};
    segrt_tensor t;
    held h;
    memset(&h, 0, sizeof h);
    if (import_tensor(arr, "labels", "labels", 0, &host, &t, &h) < 0)
        return NULL;
    segrt_volume *v = NULL;
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_volume_open_with(src_path, series, uneven, &v);
    if (s == SEGRT_OK)
        s = segrt_dicom_seg_save(path, &t, v, name, (size_t)n);
    segrt_volume_close(v);
    PyEval_RestoreThread(ts_);
    held_release(&h);
    if (s != SEGRT_OK)
        return raise_status(s);
    Py_RETURN_NONE;
}

/* dicom_series(path) -> list of dicts (uid, modality, description, slices, rows, columns) */
static PyObject *mod_dicom_series(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    segrt_dicom_series *list = NULL;
    size_t n = 0;
    segrt_status s;
    PyThreadState *ts_ = PyEval_SaveThread();
    s = segrt_dicom_series_list(&path, 1, &list, &n);
    PyEval_RestoreThread(ts_);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:L,s:i,s:i}", "uid", list[i].uid, "modality", list[i].modality,
                                    "description", list[i].description, "slices", (long long)list[i].slices, "rows",
                                    (int)list[i].rows, "columns", (int)list[i].columns);
        if (!d || PyList_SetItem(out, (Py_ssize_t)i, d) < 0)
            Py_CLEAR(out);
    }
    segrt_dicom_series_free(list);
    return out;
}

/* --- a volume's preprocessing (segrt.run_volume(..., preprocess=...)) ----------------- */

/* preprocess_from_nnunet(dir, config) -> (settings dict, window dict): the
 * fields of segrt_preprocess_from_nnunet's results, for _volume.py to write
 * as segrt_preprocess_set's text. */
static PyObject *mod_preprocess_from_nnunet(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *dir, *config;
    if (!PyArg_ParseTuple(args, "ss", &dir, &config))
        return NULL;
    segrt_preprocess p;
    segrt_window_job_options o;
    segrt_status s = segrt_preprocess_from_nnunet(dir, config, &p, &o);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *chan = PyList_New(0);
    for (int32_t c = 0; chan && c < p.n_intensity; c++) {
        const segrt_intensity *in = &p.intensity[c];
        PyObject *t = Py_BuildValue("(iddddiddddi)", (int)in->kind, in->lo, in->hi, in->mean, in->std, (int)in->masked,
                                    in->a_min, in->a_max, in->b_min, in->b_max, (int)in->clip);
        if (!t || PyList_Append(chan, t) < 0)
            Py_CLEAR(chan);
        Py_XDECREF(t);
    }
    if (!chan)
        return NULL;
    return Py_BuildValue(
        "({s:(iii),s:s,s:i,s:N,s:i,s:(ddd),s:i,s:i,s:i,s:i,s:i,s:d,s:i},{s:(LLL),s:(ddd),s:i,s:d,"
        "s:i,s:I,s:i,s:i})",
        "transpose", p.transpose[0], p.transpose[1], p.transpose[2], "orientation", p.orientation, "crop", (int)p.crop,
        "intensity", chan, "intensity_first", p.intensity_first, "spacing", p.spacing[0], p.spacing[1], p.spacing[2],
        "grid", (int)p.grid, "image_interp", (int)p.image_interp, "result_interp", (int)p.result_interp,
        "image_interp_z", (int)p.image_interp_z, "result_interp_z", (int)p.result_interp_z, "anisotropy", p.anisotropy,
        "result_probs", p.result_probs, "roi", (long long)o.roi[0], (long long)o.roi[1], (long long)o.roi[2], "overlap",
        o.overlap[0], o.overlap[1], o.overlap[2], "blend", (int)o.blend, "sigma_scale", o.sigma_scale, "grid",
        (int)o.grid, "mirror_axes", o.mirror_axes, "output", (int)o.output, "activation", (int)o.activation);
}

/* cfg (window_options' tuple), checked as window_options checks it, as a
 * file job's options initialised for its spatial dims: nd_want of them (0:
 * any of 1 to 3). The dims, or -1 with a Python error set. */
static int job_options_of(PyObject *cfg, int nd_want, segrt_window_job_options *o)
{
    segrt_window_options *wo = window_options(cfg); /* checks cfg as window_run does; the job takes its own struct */
    if (!wo)
        return -1;
    segrt_window_options_destroy(wo);
    PyObject *roi_seq, *ov_seq;
    int batch, blend, pad, grid, output, activation, accumulator;
    double sigma, pad_value, threshold;
    unsigned int mirror;
    unsigned long long max_memory, max_host;
    int64_t roi[SEGRT_MAX_RANK];
    if (!PyArg_ParseTuple(cfg, "OOiididiiidIKKi", &roi_seq, &ov_seq, &batch, &blend, &sigma, &pad, &pad_value, &grid,
                          &output, &activation, &threshold, &mirror, &max_memory, &max_host, &accumulator))
        return -1;
    int nd = parse_dims(roi_seq, "roi", roi);
    if (nd < 0)
        return -1;
    if (nd < 1 || nd > 3 || (nd_want && nd != nd_want) || PySequence_Size(ov_seq) != nd) {
        if (!PyErr_Occurred() && nd_want)
            PyErr_Format(PyExc_ValueError, "roi: this job has %d spatial dims, and one overlap each", nd_want);
        else if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "roi: 1 to 3 spatial dims, and one overlap each");
        return -1;
    }
    segrt_window_job_options_init(o, nd);
    for (int d = 0; d < nd; d++) {
        PyObject *v = PySequence_GetItem(ov_seq, d);
        o->overlap[d] = v ? PyFloat_AsDouble(v) : -1;
        Py_XDECREF(v);
        if (PyErr_Occurred())
            return -1;
        o->roi[d] = roi[d];
    }
    o->batch = batch;
    o->blend = (segrt_window_blend)blend;
    o->sigma_scale = sigma;
    o->pad = (segrt_window_pad)pad;
    o->pad_value = (float)pad_value;
    o->grid = (segrt_window_grid)grid;
    o->output = (segrt_window_output)output;
    o->activation = (segrt_window_activation)activation;
    o->threshold = (float)threshold;
    o->mirror_axes = mirror;
    o->max_memory = max_memory;
    o->max_host_memory = max_host;
    o->accumulator = (segrt_dtype)accumulator;
    return nd;
}

typedef struct volume_build {
    int kind, index, precision, threads;
} volume_build;

static segrt_status volume_builder(void *user, const segrt_model *model, const char *input, int32_t rank,
                                   const int64_t *dims, segrt_engine **out)
{
    const volume_build *b = user;
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_device(opts, b->kind ? SEGRT_DEVICE_CUDA : SEGRT_DEVICE_CPU, b->index);
    if (s == SEGRT_OK && b->kind)
        s = segrt_build_options_set_precision(opts, (segrt_precision)b->precision);
    if (s == SEGRT_OK && b->threads > 0)
        s = segrt_build_options_set_threads(opts, b->threads);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_shape(opts, input, rank, dims);
    if (s == SEGRT_OK)
        s = segrt_engine_build(model, opts, out);
    segrt_build_options_destroy(opts);
    return s;
}

/* A file job's models, loaded from their paths (1 to JOB_MAX_MODELS). */
#define JOB_MAX_MODELS 16
typedef struct job_models {
    Py_ssize_t n;
    segrt_model *models[JOB_MAX_MODELS];
    const char *names[JOB_MAX_MODELS];
    PyObject *held[JOB_MAX_MODELS];
} job_models;

static void job_models_free(job_models *jm)
{
    for (Py_ssize_t m = 0; m < JOB_MAX_MODELS; m++) {
        segrt_model_destroy(jm->models[m]);
        Py_XDECREF(jm->held[m]);
    }
    memset(jm, 0, sizeof *jm);
}

/* A Python error (checked with PyErr_Occurred), or the first failing
 * load's status; jm is the caller's to free either way. */
static segrt_status job_models_load(PyObject *paths_seq, job_models *jm)
{
    memset(jm, 0, sizeof *jm);
    Py_ssize_t n = PySequence_Size(paths_seq);
    if (n < 1 || n > JOB_MAX_MODELS) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "a file job takes 1 to %d models", JOB_MAX_MODELS);
        return SEGRT_OK;
    }
    segrt_status s = SEGRT_OK;
    for (Py_ssize_t m = 0; m < n && s == SEGRT_OK; m++) {
        jm->held[m] = PySequence_GetItem(paths_seq, m);
        jm->names[m] = jm->held[m] ? PyUnicode_AsUTF8AndSize(jm->held[m], NULL) : NULL;
        if (!jm->names[m])
            break;
        s = segrt_model_load(jm->names[m], &jm->models[m]);
        jm->n = m + 1;
    }
    return s;
}

/* segrt_window_job_run over image into a new output at out_path,
 * committed when the job succeeds, with the GIL released. */
static segrt_status job_run_into(const segrt_window_job_options *o, job_models *jm, const char *image,
                                 const char *out_path, segrt_window_job_report *r)
{
    memset(r, 0, sizeof *r);
    segrt_output *res = NULL;
    PyThreadState *ts_ = PyEval_SaveThread();
    segrt_status s = segrt_output_open(out_path, &res);
    if (s == SEGRT_OK) {
        s = segrt_window_job_run(o, jm->models, jm->names, (size_t)jm->n, image, res, NULL, r);
        if (s == SEGRT_OK)
            s = segrt_output_commit(res);
        else
            segrt_output_discard(res);
    }
    PyEval_RestoreThread(ts_);
    return s;
}

/* slide_job(model_paths, (kind, index, precision, threads), slide, out, cfg,
 * (mpp, tissue, auto_batch), (tissue_mask, thumbnail, geojson)) -> dict:
 * segrt_window_job_run over a whole slide into out (a pyramidal .tif,
 * committed), the other files written where given. cfg as
 * window_options'. */
static PyObject *mod_slide_job(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *paths_seq, *cfg;
    const char *slide, *out_path, *mask, *thumb, *geo;
    double mpp;
    int tissue, auto_batch;
    volume_build b;
    if (!PyArg_ParseTuple(args, "O(iiii)ssO(dip)(zzz)", &paths_seq, &b.kind, &b.index, &b.precision, &b.threads,
                          &slide, &out_path, &cfg, &mpp, &tissue, &auto_batch, &mask, &thumb, &geo))
        return NULL;
    segrt_window_job_options o;
    if (job_options_of(cfg, 2, &o) < 0)
        return NULL;
    o.auto_batch = auto_batch;
    o.mpp = mpp;
    o.tissue = tissue;
    o.slide_threads = b.threads;
    o.tissue_mask_path = mask;
    o.thumbnail_path = thumb;
    o.geojson_path = geo;
    o.build = volume_builder;
    o.build_user = &b;
    job_models jm;
    segrt_window_job_report r;
    segrt_status s = job_models_load(paths_seq, &jm);
    if (!PyErr_Occurred() && s == SEGRT_OK)
        s = job_run_into(&o, &jm, slide, out_path, &r);
    job_models_free(&jm);
    if (PyErr_Occurred())
        return NULL;
    if (s != SEGRT_OK)
        return raise_status(s);
    return Py_BuildValue("{s:(LL),s:L,s:L,s:d,s:d,s:d}", "shape", (long long)r.image.dims[2],
                         (long long)r.image.dims[3], "windows", (long long)r.windows, "runs", (long long)r.stats.runs,
                         "seconds", r.seconds, "read_seconds", r.parts.read, "write_seconds", r.parts.write);
}

/* volume_job(model_paths, (kind, index, precision, threads), image, series, out, cfg, base, settings)
 * -> networks' image dims: segrt_window_job_run over a volume file into out
 * (committed), preprocessed from base ("model": the first model's
 * metadata, "none": nothing) with settings ((key, text), ...) over it. cfg
 * as window_options'. */
static PyObject *mod_volume_job(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *paths_seq, *cfg, *settings;
    const char *image, *series, *out_path, *base;
    volume_build b;
    if (!PyArg_ParseTuple(args, "O(iiii)szsOsO", &paths_seq, &b.kind, &b.index, &b.precision, &b.threads, &image,
                          &series, &out_path, &cfg, &base, &settings))
        return NULL;
    segrt_window_job_options o;
    if (job_options_of(cfg, 3, &o) < 0)
        return NULL;
    o.series_uid = series;
    o.build = volume_builder;
    o.build_user = &b;
    segrt_preprocess p;
    job_models jm;
    segrt_status s = job_models_load(paths_seq, &jm);
    segrt_model **models = jm.models;
    if (!PyErr_Occurred() && s == SEGRT_OK) {
        if (strcmp(base, "none") == 0)
            segrt_preprocess_init(&p);
        else
            s = segrt_preprocess_from_model(models[0], &p, NULL);
    }
    Py_ssize_t n_set = PyErr_Occurred() ? 0 : PySequence_Size(settings);
    for (Py_ssize_t k = 0; !PyErr_Occurred() && s == SEGRT_OK && k < n_set; k++) {
        const char *key, *value;
        PyObject *item = PySequence_GetItem(settings, k);
        if (item && PyArg_ParseTuple(item, "ss", &key, &value))
            s = segrt_preprocess_set(&p, key, value);
        Py_XDECREF(item);
    }
    o.preprocess = &p;
    segrt_window_job_report r;
    if (!PyErr_Occurred() && s == SEGRT_OK)
        s = job_run_into(&o, &jm, image, out_path, &r);
    job_models_free(&jm);
    if (PyErr_Occurred())
        return NULL;
    if (s != SEGRT_OK)
        return raise_status(s);
    return Py_BuildValue("(LLLLL)", (long long)r.image.dims[0], (long long)r.image.dims[1], (long long)r.image.dims[2],
                         (long long)r.image.dims[3], (long long)r.image.dims[4]);
}

static PyObject *mod_devices(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    int32_t n = 0;
    segrt_status s = segrt_cuda_device_count(&n);
    if (s != SEGRT_OK)
        return raise_status(s);
    PyObject *list = PyList_New(0);
    for (int32_t i = 0; list && i < n; i++) {
        segrt_device_info di;
        s = segrt_cuda_device_info(i, &di);
        if (s != SEGRT_OK) {
            Py_DECREF(list);
            return raise_status(s);
        }
        PyObject *d = Py_BuildValue(
            "{s:i,s:s,s:(ii),s:i,s:K,s:K}", "index", (int)di.index, "name", di.name, "compute_capability",
            (int)di.compute_major, (int)di.compute_minor, "multiprocessors", (int)di.multiprocessors, "total_memory",
            (unsigned long long)di.total_memory_bytes, "free_memory", (unsigned long long)di.free_memory_bytes);
        if (!d || PyList_Append(list, d) < 0)
            Py_CLEAR(list);
        Py_XDECREF(d);
    }
    return list;
}

static PyObject *mod_cuda_versions(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    segrt_cuda_versions v;
    segrt_status s = segrt_cuda_versions_get(&v);
    if (s != SEGRT_OK)
        return raise_status(s);
    return Py_BuildValue("{s:O,s:i,s:i,s:i}", "built_with_cuda", v.built_with_cuda ? Py_True : Py_False, "driver",
                         (int)v.driver_version, "runtime", (int)v.runtime_version, "cudnn", (int)v.cudnn_version);
}

static PyObject *mod_version(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyUnicode_FromString(segrt_version());
}

static PyObject *mod_status_name(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(segrt_status_name((segrt_status)v));
}

static PyObject *mod_empty_cache(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyThreadState *ts_ = PyEval_SaveThread();
    blocks_free();
    PyEval_RestoreThread(ts_);
    Py_RETURN_NONE;
}

static PyObject *mod_register_torch_stream(PyObject *self, PyObject *fn)
{
    (void)self;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "register_torch_stream: want a callable");
        return NULL;
    }
    PyObject *old = g_torch_stream;
    g_torch_stream = Py_NewRef(fn);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

/* --- a folder of cases ------------------------------------------------------------- */

/* The engines of a folder job: the device, precision and threads asked,
 * the model's input bound to the window batch (no plan cache). */
typedef struct cases_build {
    int kind, index, precision, threads;
} cases_build;

static segrt_status cases_build_engine(void *user, const segrt_model *model, const char *input, int32_t rank,
                                       const int64_t *dims, segrt_engine **out)
{
    const cases_build *b = user;
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_device(opts, (segrt_device_kind)b->kind, b->index);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_precision(opts, (segrt_precision)b->precision);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_threads(opts, b->threads);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_shape(opts, input, rank, dims);
    if (s == SEGRT_OK)
        s = segrt_engine_build(model, opts, out);
    segrt_build_options_destroy(opts);
    return s;
}

#define CASES_MAX_MODELS 16

/* cases_run(model_paths, in_dir, out_dir, cfg, kind, index, precision,
 * threads, auto_batch, skip_existing, prefetch, extension, series) -> dict
 * (cfg as window_run's). Case failures are in the dict; other errors
 * raise. */
static PyObject *mod_cases_run(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *paths, *in = NULL, *out = NULL, *cfg;
    int kind, index, precision, threads, auto_batch, skip, prefetch;
    const char *ext, *series;
    if (!PyArg_ParseTuple(args, "OO&O&Oiiiippizz", &paths, PyUnicode_FSConverter, &in, PyUnicode_FSConverter, &out,
                          &cfg, &kind, &index, &precision, &threads, &auto_batch, &skip, &prefetch, &ext, &series))
        return NULL;
    segrt_window_job_options jo;
    segrt_cases_options co;
    segrt_cases_report r;
    memset(&r, 0, sizeof r);
    cases_build b = {kind, index, precision, threads};
    PyObject *path_bytes[CASES_MAX_MODELS] = {NULL};
    const char *model_paths[CASES_MAX_MODELS];
    segrt_model *models[CASES_MAX_MODELS] = {NULL};
    Py_ssize_t n = PySequence_Size(paths);
    PyObject *result = NULL;
    segrt_status s = SEGRT_OK;
    if (n < 1 || n > CASES_MAX_MODELS) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "models: 1 to %d paths", CASES_MAX_MODELS);
        goto done;
    }
    if (job_options_of(cfg, 0, &jo) < 0) /* the window options, as window_run's cfg gives them */
        goto done;
    jo.auto_batch = auto_batch;
    jo.series_uid = series;
    jo.build = cases_build_engine;
    jo.build_user = &b;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(paths, i);
        int ok = item && PyUnicode_FSConverter(item, &path_bytes[i]);
        Py_XDECREF(item);
        if (!ok)
            goto done;
        model_paths[i] = PyBytes_AsString(path_bytes[i]);
    }
    segrt_cases_options_init(&co);
    co.in_dir = PyBytes_AsString(in);
    co.out_dir = PyBytes_AsString(out);
    co.extension = ext;
    co.skip_existing = skip;
    co.no_prefetch = !prefetch;
    PyThreadState *ts_ = PyEval_SaveThread();
    for (Py_ssize_t i = 0; i < n && s == SEGRT_OK; i++)
        s = segrt_model_load(model_paths[i], &models[i]);
    if (s == SEGRT_OK)
        s = segrt_cases_run(&jo, models, model_paths, (size_t)n, &co, &r);
    PyEval_RestoreThread(ts_);
    if (s != SEGRT_OK && s != SEGRT_ERROR_CASES_FAILED) {
        raise_status(s);
        goto done;
    }
    PyObject *failed = PyList_New(0);
    for (size_t i = 0; failed && i < r.failed; i++) {
        PyObject *name = PyUnicode_DecodeFSDefault(r.failed_names[i]);
        if (!name || PyList_Append(failed, name) < 0)
            Py_CLEAR(failed);
        Py_XDECREF(name);
    }
    if (failed)
        result =
            Py_BuildValue("{s:n,s:n,s:n,s:n,s:N,s:d,s:s}", "cases", (Py_ssize_t)r.cases, "done", (Py_ssize_t)r.done,
                          "skipped", (Py_ssize_t)r.skipped, "failed", (Py_ssize_t)r.failed, "failed_names", failed,
                          "seconds", r.seconds, "message", s == SEGRT_OK ? "" : segrt_last_error());
done:
    for (Py_ssize_t i = 0; i < CASES_MAX_MODELS; i++) {
        segrt_model_destroy(models[i]);
        Py_XDECREF(path_bytes[i]);
    }
    segrt_cases_report_free(&r);
    Py_XDECREF(in);
    Py_XDECREF(out);
    return result;
}

static PyMethodDef module_methods[] = {
    {"register_torch_stream", mod_register_torch_stream, METH_O,
     "register_torch_stream(fn): fn(device) -> torch's current CUDA stream there, as an int"},
    {"volume_info", mod_volume_info, METH_VARARGS, "volume_info(path, series_uid) -> dict"},
    {"volume_read", mod_volume_read, METH_VARARGS, "volume_read(path, series_uid, out)"},
    {"volume_save", mod_volume_save, METH_VARARGS, "volume_save(path, array, geometry or None)"},
    {"dicom_seg_save", mod_dicom_seg_save, METH_VARARGS,
     "dicom_seg_save(path, labels, series_path, series_uid, allow_uneven, names)"},
    {"dicom_series", mod_dicom_series, METH_VARARGS, "dicom_series(path) -> list of dicts"},
    {"preprocess_from_nnunet", mod_preprocess_from_nnunet, METH_VARARGS,
     "preprocess_from_nnunet(dir, config) -> (settings, window)"},
    {"volume_job", mod_volume_job, METH_VARARGS,
     "volume_job(paths, build, image, series, out, cfg, base, settings) -> image dims"},
    {"slide_job", mod_slide_job, METH_VARARGS,
     "slide_job(paths, build, slide, out, cfg, (mpp, tissue, auto_batch), (mask, thumbnail, geojson)) -> dict"},
    {"empty_cache", mod_empty_cache, METH_NOARGS, "frees the device blocks kept for the next results"},
    {"register_errors", mod_register_errors, METH_O, "register_errors(classes): the exception class per status"},
    {"build", mod_build, METH_VARARGS, "build(path, kind, index, precision, shapes, cache_dir, use_cache, threads)"},
    {"load", mod_load, METH_VARARGS, "load(plan_path, device_index) -> Engine"},
    {"window_input_dims", mod_window_input_dims, METH_VARARGS, "window_input_dims(cfg, image_dims) -> dims"},
    {"window_auto_batch", mod_window_auto_batch, METH_VARARGS, "window_auto_batch(engines, cfg, image_dims) -> int"},
    {"window_run", mod_window_run, METH_VARARGS, "window_run(engines, image, cfg, progress) -> (result, stats)"},
    {"cases_run", mod_cases_run, METH_VARARGS,
     "cases_run(model_paths, in_dir, out_dir, cfg, kind, index, precision, threads, auto_batch, skip_existing, "
     "prefetch, extension, series) -> dict"},
    {"compare", mod_compare, METH_VARARGS, "compare(a, b, class_axis) -> dict"},
    {"devices", mod_devices, METH_NOARGS, "CUDA devices: a list of dicts"},
    {"cuda_versions", mod_cuda_versions, METH_NOARGS, "CUDA driver, runtime and cuDNN versions"},
    {"version", mod_version, METH_NOARGS, "the loaded libsegrt's version"},
    {"status_name", mod_status_name, METH_O, "segrt_status_name"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_segrt",
    "The C extension of the segrt package (use `import segrt`).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__segrt(void);

PyMODINIT_FUNC PyInit__segrt(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Engine_Type = (PyTypeObject *)PyType_FromSpec(&engine_spec);
    DeviceArray_Type = (PyTypeObject *)PyType_FromSpec(&device_array_spec);
    HostBuffer_Type = (PyTypeObject *)PyType_FromSpec(&host_buffer_spec);
    if (!Engine_Type || !DeviceArray_Type || !HostBuffer_Type ||
        PyModule_AddObjectRef(m, "Engine", (PyObject *)Engine_Type) < 0 ||
        PyModule_AddObjectRef(m, "DeviceArray", (PyObject *)DeviceArray_Type) < 0 ||
        PyModule_AddObjectRef(m, "HostBuffer", (PyObject *)HostBuffer_Type) < 0 ||
        PyModule_AddIntConstant(m, "MAX_RANK", SEGRT_MAX_RANK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
