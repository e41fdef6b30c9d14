/* Plan files and the on-disk plan cache: a generic container around a
 * backend's payload (backend/backend.h).
 *
 * Layout (little-endian):
 *   "SEGRTPLN"  u32 format  u32 header_bytes  header (text, "key=value\n")
 *   u64 payload_bytes  u64 payload_hash  payload:
 *     u64 n + the optimized graph as ONNX
 *     u64 n + the backend's payload (payload_save's bytes; none for a
 *             backend without one)
 * The header is the plan's key: format, segrt version, the backend's name
 * and its identity of the machine (for CUDA: GPU name and compute
 * capability, CUDA runtime and cuDNN versions), the model's content hash
 * and the build options. A plan loads only where the machine's part of the
 * key matches; the cache also requires the model and options to match. */
#include "core/bytes.h"
#include "core/file.h"
#include "engine/engine_internal.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PLAN_MAGIC "SEGRTPLN"
#define PLAN_FORMAT 3u

/* Hashing ---------------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* Four lanes over 32-byte blocks, then one: a lane's multiply does not
 * wait for the others', so the weights (most of a model's or a plan's
 * bytes) hash at several times one chain's rate. */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t n)
{
    const uint8_t *b = data;
    size_t i = 0;
    if (n >= 64) {
        uint64_t l[4] = {h, h ^ 0x243F6A8885A308D3ull, h ^ 0x13198A2E03707344ull, h ^ 0xA4093822299F31D0ull};
        for (; i + 32 <= n; i += 32)
            for (int k = 0; k < 4; k++) {
                uint64_t w;
                memcpy(&w, b + i + 8 * k, 8);
                l[k] = mix(l[k], w);
            }
        h = mix(mix(mix(mix(h, l[0]), l[1]), l[2]), l[3]);
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = mix(h, w);
    }
    uint64_t tail = 0;
    memcpy(&tail, b + i, n - i);
    return mix(mix(h, tail), (uint64_t)n);
}

static uint64_t hash_str(uint64_t h, const char *s) { return hash_bytes(h, s ? s : "", s ? strlen(s) : 0); }

uint64_t sg_graph_content_hash(const sg_graph *g)
{
    uint64_t h = 0x5E6A7C0DEull;
    for (int32_t v = 0; v < g->n_values; v++) {
        const sg_value *val = &g->values[v];
        h = hash_str(h, val->name);
        h = mix(h, (uint64_t)val->dtype);
        h = mix(h, (uint64_t)(int64_t)val->shape.rank);
        for (int32_t d = 0; d < val->shape.rank; d++)
            h = mix(h, (uint64_t)val->shape.d[d].size);
        if (val->data)
            h = hash_bytes(h, sg_blob_data(val->data), sg_blob_size(val->data));
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        h = mix(h, (uint64_t)n->op);
        h = hash_str(h, n->name);
        for (int32_t k = 0; k < n->n_inputs; k++)
            h = mix(h, (uint64_t)(int64_t)n->inputs[k]);
        for (int32_t k = 0; k < n->n_outputs; k++)
            h = mix(h, (uint64_t)(int64_t)n->outputs[k]);
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const sg_attr *at = &n->attrs[a];
            h = hash_str(h, at->name);
            h = mix(h, (uint64_t)at->kind);
            h = mix(h, (uint64_t)at->i);
            uint32_t fb;
            memcpy(&fb, &at->f, 4);
            h = mix(h, fb);
            h = hash_str(h, at->s);
            if (at->ints)
                h = hash_bytes(h, at->ints, sizeof(int64_t) * (size_t)at->n);
            if (at->floats)
                h = hash_bytes(h, at->floats, sizeof(float) * (size_t)at->n);
            for (int32_t k = 0; at->strings && k < at->n; k++)
                h = hash_str(h, at->strings[k]);
            if (at->t_data)
                h = hash_bytes(h, sg_blob_data(at->t_data), sg_blob_size(at->t_data));
            if (at->graph) /* an If's branch */
                h = mix(h, sg_graph_content_hash(at->graph));
        }
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        h = mix(h, (uint64_t)g->inputs[i]);
    for (int32_t i = 0; i < g->n_outputs; i++)
        h = mix(h, 0x8000000000000000ull | (uint64_t)g->outputs[i]);
    return h;
}

/* Options as key text ----------------------------------------------------------- */

static void put_text(sg_wbuf *w, const char *text)
{
    sg_wbuf_put(w, text, strlen(text));
}

static void options_text(sg_wbuf *w, const segrt_build_options *o)
{
    char line[1024];
    size_t ws = o->workspace ? o->workspace : SG_DEFAULT_WORKSPACE;
    snprintf(line, sizeof line,
             "precision=%s\nallow_cpu_fallback=%d\nworkspace=%zu\nfp32_ops=%s\nautotune=%d\nthreads=%d\n",
             segrt_precision_name(o->precision), o->allow_cpu_fallback ? 1 : 0, ws, o->fp32_ops ? o->fp32_ops : "",
             o->autotune < 0 ? SG_DEFAULT_AUTOTUNE : o->autotune, o->threads);
    put_text(w, line);
    /* The kernels the build was told not to use (the switches' names). */
    char off[512];
    sg_disabled_kernels_text(o->disabled_kernels, off, sizeof off);
    snprintf(line, sizeof line, "disabled_kernels=%s\n", off);
    put_text(w, line);
    /* Planned as for an older GPU (--target-arch); 0: the GPU's own. */
    snprintf(line, sizeof line, "target_arch=%d\n", (int)o->target_cc);
    put_text(w, line);
    for (int32_t i = 0; i < o->n_shapes; i++) {
        const sg_shape_binding *b = &o->shapes[i];
        snprintf(line, sizeof line, "shape=%s=", b->name);
        put_text(w, line);
        for (int32_t d = 0; d < b->rank; d++) {
            snprintf(line, sizeof line, "%s%lld:%lld:%lld", d ? "x" : "", (long long)b->min[d], (long long)b->dims[d],
                     (long long)b->max[d]);
            put_text(w, line);
        }
        sg_wbuf_put(w, "\n", 1);
    }
}

/* The machine's part of the key: format, segrt, the backend and its
 * identity of the device. */
static sg_status machine_text(sg_wbuf *w, const sg_backend *b, int32_t device)
{
    char line[1024];
    snprintf(line, sizeof line, "format=%u\nsegrt=%s\nbackend=%s\n", PLAN_FORMAT, segrt_version(), b->name);
    put_text(w, line);
    if (b->identity) {
        SG_TRY(b->identity(device, line, sizeof line));
        put_text(w, line);
    }
    return SEGRT_OK;
}

static sg_status key_text(const sg_backend *b, const segrt_build_options *o, uint64_t model_hash, sg_wbuf *w)
{
    SG_TRY(machine_text(w, b, o->device_index));
    char line[64];
    snprintf(line, sizeof line, "model=%016llx\n", (unsigned long long)model_hash);
    put_text(w, line);
    options_text(w, o);
    sg_wbuf_put(w, "", 1); /* NUL, so the text is a C string; not counted below */
    w->n--;
    return w->failed ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_OK;
}

/* Value of key in header text, copied into buf ("" if absent). */
static const char *header_get(const char *text, const char *key, char *buf, size_t cap)
{
    size_t kl = strlen(key);
    buf[0] = '\0';
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        if (len > kl && strncmp(l, key, kl) == 0 && l[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl >= cap)
                vl = cap - 1;
            memcpy(buf, l + kl + 1, vl);
            buf[vl] = '\0';
            break;
        }
        l += len + (e ? 1 : 0);
    }
    return buf;
}

/* Saving --------------------------------------------------------------------------- */

/* The plan file whole or not at all, through an output (core/file.h). */
static sg_status write_atomic(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
    sg_output *o;
    SG_TRY(sg_output_open(path, &o));
    FILE *f = sg_output_stream(o);
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb)) {
        sg_status s = sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", path, strerror(errno));
        sg_output_discard(o);
        return s;
    }
    return sg_output_commit(o);
}

/* The graph, then the backend's payload. */
static sg_status payload_write(const segrt_engine *e, sg_wbuf *w)
{
    void *bytes = NULL;
    size_t n = 0;
    if (e->backend->payload_save) {
        sg_status s = e->backend->payload_save(e->plan, &bytes, &n);
        if (s != SEGRT_OK)
            return strncmp(sg_last_error(), e->g->path, strlen(e->g->path)) == 0
                       ? s
                       : sg_error_prefix(s, "%s: ", e->g->path);
    }
    uint8_t *onnx = NULL;
    size_t onnx_n = 0;
    sg_status s = sg_onnx_export(e->g, &onnx, &onnx_n);
    if (s == SEGRT_OK) {
        sg_wbuf_blob64(w, onnx, onnx_n);
        sg_wbuf_blob64(w, bytes, n);
    }
    free(onnx);
    free(bytes);
    if (s == SEGRT_OK && w->failed)
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    return s;
}

segrt_status segrt_engine_save(const segrt_engine *engine, const char *path)
{
    if (!engine || !path)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_save: engine and path must not be NULL");
    sg_wbuf head = {0}, pay = {0}, file = {0};
    sg_status s = key_text(engine->backend, engine->opts, engine->model_hash, &head);
    if (s == SEGRT_OK)
        s = payload_write(engine, &pay);
    if (s == SEGRT_OK) {
        sg_wbuf_put(&file, PLAN_MAGIC, 8);
        sg_wbuf_u32(&file, PLAN_FORMAT);
        sg_wbuf_blob32(&file, head.b, head.n);
        sg_wbuf_u64(&file, pay.n);
        sg_wbuf_u64(&file, hash_bytes(0, pay.b, pay.n));
        s = file.failed ? SEGRT_ERROR_OUT_OF_MEMORY : SEGRT_OK;
    }
    if (s == SEGRT_OK)
        s = write_atomic(path, file.b, file.n, pay.b, pay.n);
    free(head.b);
    free(pay.b);
    free(file.b);
    return s;
}

/* Loading --------------------------------------------------------------------------- */

/* Says which machine fields differ between the plan's key and this
 * machine's: the container's, then the backend's identity. */
static sg_status check_machine(const char *path, const sg_backend *b, const char *have, const char *want)
{
    static const sg_backend_key mine[] = {{"format", "plan format"}, {"segrt", "segrt version"}, {NULL, NULL}};
    char diff[1024] = "";
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        const sg_backend_key *keys = part ? b->identity_keys : mine;
        for (size_t i = 0; keys && keys[i].key; i++) {
            char x[256], y[256];
            header_get(have, keys[i].key, x, sizeof x);
            header_get(want, keys[i].key, y, sizeof y);
            if (strcmp(x, y) != 0 && n < sizeof diff)
                n += (size_t)snprintf(diff + n, sizeof diff - n, "%s%s: plan has %s, this machine %s", n ? "; " : "",
                                      keys[i].what, x[0] ? x : "(none)", y);
        }
    }
    if (n)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: the plan was built for another machine (%s); a plan runs only where it was built: "
                        "build one here from the ONNX model (`segrt build MODEL.onnx -o PLAN`, with the same "
                        "options), or run the .onnx itself, which the plan cache builds once per machine",
                        path, diff);
    return SEGRT_OK;
}

/* Options from the header's option lines. */
static sg_status options_from_header(const char *text, segrt_device_kind kind, int32_t device,
                                     segrt_build_options **out)
{
    segrt_build_options *o;
    SG_TRY(segrt_build_options_create(&o));
    char buf[4096];
    sg_status s = segrt_build_options_set_device(o, kind, device);
    header_get(text, "precision", buf, sizeof buf);
    segrt_precision prec = SEGRT_PRECISION_FP32;
    for (int p = 0; p < 4; p++)
        if (strcmp(buf, segrt_precision_name((segrt_precision)p)) == 0)
            prec = (segrt_precision)p;
    if (s == SEGRT_OK)
        s = segrt_build_options_set_precision(o, prec);
    o->allow_cpu_fallback = atoi(header_get(text, "allow_cpu_fallback", buf, sizeof buf)) != 0;
    o->workspace = (size_t)strtoull(header_get(text, "workspace", buf, sizeof buf), NULL, 10);
    int autotune = atoi(header_get(text, "autotune", buf, sizeof buf));
    o->autotune = autotune >= 0 && autotune <= SG_MAX_AUTOTUNE ? autotune : SG_DEFAULT_AUTOTUNE;
    int threads = atoi(header_get(text, "threads", buf, sizeof buf));
    o->threads = threads > 0 ? threads : 0;
    header_get(text, "fp32_ops", buf, sizeof buf);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_fp32_ops(o, buf);
    header_get(text, "disabled_kernels", buf, sizeof buf);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_disabled_kernels(o, buf);
    int target = atoi(header_get(text, "target_arch", buf, sizeof buf));
    o->target_cc = target >= 75 ? target : 0;
    /* shape=NAME=min:opt:maxx... lines */
    for (const char *l = text; s == SEGRT_OK && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        if (len > 6 && strncmp(l, "shape=", 6) == 0 && len < sizeof buf) {
            memcpy(buf, l + 6, len - 6);
            buf[len - 6] = '\0';
            char *eq = strrchr(buf, '=');
            int64_t mn[SEGRT_MAX_RANK], op[SEGRT_MAX_RANK], mx[SEGRT_MAX_RANK];
            int32_t rank = 0;
            if (!eq)
                s = sg_error(SEGRT_ERROR_INVALID_MODEL, "a shape line of the plan's header is malformed");
            else {
                *eq = '\0';
                for (char *d = eq + 1; s == SEGRT_OK && *d && rank < SEGRT_MAX_RANK; rank++) {
                    char *end;
                    mn[rank] = strtoll(d, &end, 10);
                    op[rank] = *end == ':' ? strtoll(end + 1, &end, 10) : -1;
                    mx[rank] = *end == ':' ? strtoll(end + 1, &end, 10) : -1;
                    if (*end == 'x')
                        end++;
                    else if (*end)
                        s = sg_error(SEGRT_ERROR_INVALID_MODEL, "a shape line of the plan's header is malformed");
                    d = end;
                }
                if (s == SEGRT_OK)
                    s = segrt_build_options_set_shape_range(o, buf, rank, mn, op, mx);
            }
        }
        l += len + (e ? 1 : 0);
    }
    if (s != SEGRT_OK) {
        segrt_build_options_destroy(o);
        return s;
    }
    *out = o;
    return SEGRT_OK;
}

/* The graph and the backend's payload (borrowed from the file's bytes). */
static sg_status payload_read(const char *path, sg_rbuf *r, sg_graph **g, const void **bytes, size_t *n)
{
    uint64_t onnx_n = sg_rbuf_u64(r);
    const void *onnx = sg_rbuf_take(r, onnx_n);
    if (!onnx)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the plan's graph is cut short", path);
    uint64_t bn = sg_rbuf_u64(r);
    *bytes = sg_rbuf_take(r, bn);
    *n = (size_t)bn;
    if (r->bad || r->at != r->n)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the plan's payload is malformed", path);
    return sg_onnx_import(onnx, (size_t)onnx_n, NULL, path, g);
}

/* Checks the device index for a backend with devices. */
static sg_status check_device(const char *path, const sg_backend *b, int32_t device)
{
    if (!b->device_memory)
        return SEGRT_OK;
    int32_t n_dev = 0;
    segrt_cuda_device_count(&n_dev);
    if (device < 0 || device >= n_dev)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s%sCUDA device %d does not exist (this machine has %d)",
                        path ? path : "", path ? ": " : "", device, n_dev);
    return SEGRT_OK;
}

segrt_status segrt_engine_load(const char *path, int32_t device, segrt_engine **out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_load: path and out must not be NULL");
    double t0 = sg_now_seconds();
    /* Mapped: the payload is hashed and parsed in place, and what the
     * engine keeps it copies. */
    sg_mapped_file map;
    SG_TRY(sg_map_file(path, (uint64_t)1 << 40, "a plan file segrt reads (1 TiB)", &map));
    sg_map_will_read(&map);
    const uint8_t *file = map.data;
    size_t size = map.size;
    sg_rbuf r = {file, size, 0, false};
    const char *magic = sg_rbuf_take(&r, 8);
    sg_status s = SEGRT_OK;
    if (!magic || memcmp(magic, PLAN_MAGIC, 8) != 0)
        s = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not a segrt plan file", path);
    uint32_t format = sg_rbuf_u32(&r);
    if (s == SEGRT_OK && r.bad)
        s = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the plan's header is cut short", path);
    if (s == SEGRT_OK && format != PLAN_FORMAT)
        s = sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: plan format %u, this segrt reads format %u; rebuild the plan", path,
                     format, PLAN_FORMAT);
    char *header = s == SEGRT_OK ? sg_rbuf_str(&r) : NULL;
    uint64_t pay_n = sg_rbuf_u64(&r), pay_h = sg_rbuf_u64(&r);
    if (s == SEGRT_OK && (r.bad || !header))
        s = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the plan's header is cut short or malformed", path);
    const sg_backend *b = NULL;
    if (s == SEGRT_OK) {
        char name[64];
        header_get(header, "backend", name, sizeof name);
        b = sg_backend_named(name);
        if (!b)
            s = sg_error(SEGRT_ERROR_UNSUPPORTED,
                         "%s: the plan is for the `%s` backend, which this segrt was built "
                         "without",
                         path, name);
    }
    if (s == SEGRT_OK)
        s = check_device(path, b, device);
    sg_wbuf mine = {0};
    if (s == SEGRT_OK)
        s = machine_text(&mine, b, device);
    if (s == SEGRT_OK) {
        sg_wbuf_put(&mine, "", 1);
        s = mine.failed ? SEGRT_ERROR_OUT_OF_MEMORY : check_machine(path, b, header, (const char *)mine.b);
    }
    free(mine.b);
    if (s == SEGRT_OK && pay_n != size - r.at)
        s = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the plan is truncated or padded: %zu payload bytes, expected %llu",
                     path, size - r.at, (unsigned long long)pay_n);
    if (s == SEGRT_OK && hash_bytes(0, file + r.at, (size_t)pay_n) != pay_h)
        s = sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the plan is corrupt (its checksum does not match)", path);
    sg_graph *g = NULL;
    const void *bytes = NULL;
    size_t n_bytes = 0;
    segrt_build_options *opts = NULL;
    sg_rbuf pr = {file + r.at, (size_t)pay_n, 0, false};
    if (s == SEGRT_OK)
        s = payload_read(path, &pr, &g, &bytes, &n_bytes);
    if (s == SEGRT_OK)
        s = options_from_header(header, b->device, device, &opts);
    char model[64];
    uint64_t model_hash = s == SEGRT_OK ? strtoull(header_get(header, "model", model, sizeof model), NULL, 16) : 0;
    if (s == SEGRT_OK) {
        s = sg_engine_from_plan(b, g, opts, bytes, n_bytes, model_hash, out);
        g = NULL; /* taken */
        if (s != SEGRT_OK && strncmp(sg_last_error(), path, strlen(path)) != 0)
            s = sg_error_prefix(s, "%s: ", path);
    }
    sg_graph_free(g);
    segrt_build_options_destroy(opts);
    free(header);
    sg_unmap_file(&map);
    if (s == SEGRT_OK)
        (*out)->total_seconds = sg_now_seconds() - t0;
    return s;
}

/* The cache ---------------------------------------------------------------------------- */

static sg_status cache_dir_path(const char *dir, char *buf, size_t cap)
{
    if (dir) {
        snprintf(buf, cap, "%s", dir);
        return SEGRT_OK;
    }
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/segrt", xdg);
    else if (home && *home)
        snprintf(buf, cap, "%s/.cache/segrt", home);
    else
        return sg_error(SEGRT_ERROR_IO, "no cache folder: neither XDG_CACHE_HOME nor HOME is set");
    return SEGRT_OK;
}

/* mkdir -p for the cache folder. */
static bool make_dirs(char *path)
{
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    return mkdir(path, 0755) == 0 || errno == EEXIST;
}

/* Whether the plan at path has exactly this key (read from its header). */
static bool plan_key_matches(const char *path, const char *key)
{
    int fd;
    FILE *f = sg_open_input(path, &fd) == SEGRT_OK ? fdopen(fd, "rb") : NULL;
    if (!f) {
        sg_error_clear();
        return false;
    }
    uint8_t head[16];
    bool ok = fread(head, 1, 16, f) == 16 && memcmp(head, PLAN_MAGIC, 8) == 0;
    uint32_t n = 0;
    if (ok)
        memcpy(&n, head + 12, 4);
    ok = ok && n == strlen(key);
    char *h = ok ? sg_malloc(n + 1) : NULL;
    ok = h && fread(h, 1, n, f) == n && memcmp(h, key, n) == 0;
    free(h);
    fclose(f);
    return ok;
}

segrt_status segrt_engine_build_cached(const segrt_model *model, const segrt_build_options *opts, const char *cache_dir,
                                       int *hit, segrt_engine **out)
{
    if (hit)
        *hit = 0;
    if (!model || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_build_cached: model and out must not be NULL");
    const sg_backend *b = sg_backend_for(opts ? opts->device : SEGRT_DEVICE_CPU);
    if (!b) /* the build says why */
        return segrt_engine_build(model, opts, out);
    segrt_build_options *o = NULL;
    SG_TRY(sg_options_copy(opts, &o));
    sg_status s = check_device(NULL, b, o->device_index);
    if (s != SEGRT_OK) {
        segrt_build_options_destroy(o);
        return s;
    }
    sg_wbuf key = {0};
    s = key_text(b, o, sg_graph_content_hash(model->g), &key);
    int32_t device = o->device_index;
    segrt_build_options_destroy(o);
    char dir[4096], path[4200];
    if (s == SEGRT_OK)
        s = cache_dir_path(cache_dir, dir, sizeof dir);
    if (s != SEGRT_OK) { /* no cache to use: just build */
        free(key.b);
        sg_error_clear();
        return segrt_engine_build(model, opts, out);
    }
    snprintf(path, sizeof path, "%s/%016llx.plan", dir, (unsigned long long)hash_bytes(7, key.b, key.n));
    if (plan_key_matches(path, (const char *)key.b) && segrt_engine_load(path, device, out) == SEGRT_OK) {
        free(key.b);
        if (hit)
            *hit = 1;
        return SEGRT_OK;
    }
    free(key.b);
    sg_error_clear();
    SG_TRY(segrt_engine_build(model, opts, out));
    /* A cache that cannot be written only costs the next run a build. */
    if (make_dirs(dir))
        segrt_engine_save(*out, path);
    sg_error_clear();
    return SEGRT_OK;
}
