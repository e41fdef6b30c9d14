#include "io/npy.h"

#include "core/file.h"

#include "core/mem.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Headers numpy writes are under 200 bytes; anything past this is hostile. */
#define NPY_MAX_HEADER 65536
/* The bytes before an NPY header's text: magic, version, header length
 * (2 bytes in version 1, 4 after). */
#define NPY_PREAMBLE 12
/* Largest .npy array read. Its data must all be in the file (its size is
 * checked against the header before anything is allocated), so a small
 * file cannot claim a large array; this stops only real files too large
 * for a host: 64 GiB is a 2048^3 float64 volume. */
#define NPY_MAX_BYTES ((int64_t)64 << 30)

static const struct {
    const char *descr;
    sg_dtype dtype;
} npy_types[] = {
    {"f4", SEGRT_DTYPE_FLOAT32}, {"f2", SEGRT_DTYPE_FLOAT16}, {"f8", SEGRT_DTYPE_FLOAT64},
    {"i8", SEGRT_DTYPE_INT64},   {"i4", SEGRT_DTYPE_INT32},   {"i2", SEGRT_DTYPE_INT16},
    {"u2", SEGRT_DTYPE_UINT16},  {"i1", SEGRT_DTYPE_INT8},    {"u1", SEGRT_DTYPE_UINT8},
    {"b1", SEGRT_DTYPE_BOOL},
};

static const char *descr_of(sg_dtype t)
{
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dtype == t)
            return npy_types[i].descr;
    return NULL;
}

/* Finds 'key': in the header dict and returns a pointer just past the colon. */
static const char *find_key(const char *h, const char *end, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = h; p + kl + 2 < end; p++)
        if ((*p == '\'' || *p == '"') && strncmp(p + 1, key, kl) == 0 && p[kl + 1] == *p) {
            const char *q = p + kl + 2;
            while (q < end && (*q == ' ' || *q == ':'))
                q++;
            return q;
        }
    return NULL;
}

static sg_status bad_header(const char *name, const char *why)
{
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad NPY header: %s", name, why);
}

static sg_status parse_header(const char *h, size_t len, const char *name, sg_tensor *out)
{
    const char *end = h + len;
    const char *d = find_key(h, end, "descr");
    const char *f = find_key(h, end, "fortran_order");
    const char *s = find_key(h, end, "shape");
    if (!d || !f || !s)
        return bad_header(name, "missing descr, fortran_order or shape");
    if (d >= end || (*d != '\'' && *d != '"'))
        return bad_header(name, "descr is not a string");
    char quote = *d++;
    const char *dend = memchr(d, quote, (size_t)(end - d));
    if (!dend || dend - d < 2 || dend - d > 8)
        return bad_header(name, "descr is not a simple dtype");
    char descr[9];
    memcpy(descr, d, (size_t)(dend - d));
    descr[dend - d] = '\0';
    char order = descr[0];
    if (order == '>')
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: big-endian data (%s) is not supported", name, descr);
    const char *code = (order == '<' || order == '|' || order == '=') ? descr + 1 : descr;
    out->dtype = SEGRT_DTYPE_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (strcmp(code, npy_types[i].descr) == 0)
            out->dtype = npy_types[i].dtype;
    if (out->dtype == SEGRT_DTYPE_UNDEFINED)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: NPY dtype '%s' is not supported", name, descr);
    if (f + 4 <= end && strncmp(f, "True", 4) == 0)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: Fortran-ordered arrays are not supported; save with np.ascontiguousarray", name);
    if (!(f + 5 <= end && strncmp(f, "False", 5) == 0))
        return bad_header(name, "fortran_order is neither True nor False");
    if (s >= end || *s != '(')
        return bad_header(name, "shape is not a tuple");
    s++;
    out->rank = 0;
    for (;;) {
        while (s < end && *s == ' ')
            s++;
        if (s < end && *s == ')')
            break;
        if (s >= end || *s < '0' || *s > '9')
            return bad_header(name, "shape holds something other than non-negative integers");
        int64_t v = 0;
        while (s < end && *s >= '0' && *s <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return bad_header(name, "a dim is too large");
            v = v * 10 + (*s++ - '0');
        }
        if (out->rank == SEGRT_MAX_RANK)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: more than %d dims", name, SEGRT_MAX_RANK);
        out->dims[out->rank++] = v;
        while (s < end && *s == ' ')
            s++;
        if (s < end && *s == ',')
            s++;
        else if (!(s < end && *s == ')'))
            return bad_header(name, "shape tuple is malformed");
    }
    return SEGRT_OK;
}

/* Parses the magic, version and header at the start of a file of size
 * bytes, of which the first have (at least the preamble and the header, or
 * all of a shorter file) are in b: dtype and dims into out, and where the
 * data starts. Checks the file's size against the header's before anything
 * is allocated; out->data is left NULL. */
static sg_status parse_start(const uint8_t *b, size_t have, uint64_t size, const char *name, sg_tensor *out,
                             size_t *data_at)
{
    memset(out, 0, sizeof *out);
    if (have < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not an NPY file (no \\x93NUMPY magic)", name);
    uint8_t major = b[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (have < 12)
            return bad_header(name, "truncated");
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hstart = 12;
    } else {
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: NPY format version %u is not supported", name, major);
    }
    if (hlen > NPY_MAX_HEADER || hstart + hlen > have)
        return bad_header(name, "header length runs past the end of the file");
    SG_TRY(parse_header((const char *)b + hstart, hlen, name, out));
    int64_t numel, nbytes;
    if (!sg_dims_product(out->dims, out->rank, &numel) ||
        !sg_mul_i64(numel, (int64_t)segrt_dtype_size(out->dtype), &nbytes) || nbytes > NPY_MAX_BYTES)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the array's dims are too large", name);
    uint64_t data = size - hstart - hlen;
    if (data != (uint64_t)nbytes) {
        char dims[256];
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %s %s needs %lld bytes of data, the file has %llu", name,
                        segrt_dtype_name(out->dtype), sg_dims_format(out->dims, out->rank, dims, sizeof dims),
                        (long long)nbytes, (unsigned long long)data);
    }
    *data_at = hstart + hlen;
    return SEGRT_OK;
}

sg_status sg_npy_parse_start(const void *bytes, size_t have, uint64_t size, const char *name, sg_tensor *out,
                             size_t *data_at)
{
    return parse_start(bytes, have, size, name, out, data_at);
}

/* numpy's bools are bytes of 0 or 1; any other byte is read as 1. */
static void normalise_bools(sg_tensor *t)
{
    if (t->dtype != SEGRT_DTYPE_BOOL)
        return;
    uint8_t *p = t->data;
    for (size_t i = 0, n = sg_tensor_bytes(t); i < n; i++)
        p[i] = p[i] != 0;
}

sg_status sg_npy_parse(const void *bytes, size_t size, const char *name, sg_tensor *out)
{
    size_t at;
    SG_TRY(parse_start(bytes, size, size, name, out, &at));
    size_t nbytes = size - at;
    out->data = sg_malloc(nbytes);
    if (!out->data)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    memcpy(out->data, (const uint8_t *)bytes + at, nbytes);
    normalise_bools(out);
    return SEGRT_OK;
}

/* Opens path (sg_open_input: never waits on a FIFO) and parses its header
 * (parse_start): *f is left open at the data, which is size - *data_at
 * bytes long. */
static sg_status open_npy(const char *path, FILE **f, sg_tensor *out, uint64_t *size, size_t *data_at)
{
    memset(out, 0, sizeof *out);
    int fd;
    SG_TRY(sg_open_input(path, &fd));
    *f = fdopen(fd, "rb");
    if (!*f) {
        int err = errno;
        close(fd);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    struct stat st;
    uint8_t *head = NULL;
    sg_status s = SEGRT_OK;
    if (fstat(fd, &st) != 0)
        s = sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(errno));
    else if (!(head = sg_malloc(NPY_PREAMBLE + NPY_MAX_HEADER)))
        s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    if (s == SEGRT_OK) {
        size_t have = fread(head, 1, NPY_PREAMBLE + NPY_MAX_HEADER, *f);
        if (ferror(*f))
            s = sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(errno));
        else
            s = parse_start(head, have, (uint64_t)st.st_size, path, out, data_at);
    }
    free(head);
    if (s == SEGRT_OK && fseeko(*f, (off_t)*data_at, SEEK_SET) != 0)
        s = sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", path, strerror(errno));
    if (s != SEGRT_OK) {
        fclose(*f);
        *f = NULL;
        return s;
    }
    *size = (uint64_t)st.st_size;
    return SEGRT_OK;
}

sg_status sg_npy_read(const char *path, sg_tensor *out)
{
    FILE *f;
    uint64_t size;
    size_t at;
    SG_TRY(open_npy(path, &f, out, &size, &at));
    /* Straight into the tensor: the file is never held in memory too. */
    size_t nbytes = (size_t)(size - at);
    sg_status s = SEGRT_OK;
    out->data = sg_malloc(nbytes);
    if (!out->data)
        s = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    else if (fread(out->data, 1, nbytes, f) != nbytes)
        s = sg_error(SEGRT_ERROR_IO, "%s: read fewer than the %zu bytes of data (the file changed?)", path, nbytes);
    fclose(f);
    if (s != SEGRT_OK) {
        free(out->data);
        out->data = NULL;
        return s;
    }
    normalise_bools(out);
    return SEGRT_OK;
}

sg_status sg_npy_probe(const char *path, sg_tensor *out)
{
    FILE *f;
    uint64_t size;
    size_t at;
    SG_TRY(open_npy(path, &f, out, &size, &at));
    fclose(f);
    return SEGRT_OK;
}

sg_status sg_npy_write_header_to(sg_output *o, const sg_tensor *t)
{
    const char *path = sg_output_path(o);
    const char *descr = descr_of(t->dtype);
    if (!descr)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: cannot write %s as NPY", path, segrt_dtype_name(t->dtype));
    char shape[512] = "";
    size_t used = 0;
    for (int32_t i = 0; i < t->rank; i++) {
        int k = snprintf(shape + used, sizeof shape - used, "%lld,%s", (long long)t->dims[i],
                         i + 1 < t->rank ? " " : "");
        if (k < 0 || (size_t)k >= sizeof shape - used)
            return sg_error(SEGRT_ERROR_INTERNAL, "%s: shape too long", path);
        used += (size_t)k;
    }
    if (t->rank > 1)
        shape[used - 1] = '\0'; /* numpy writes (2, 3) but (5,) */
    char header[640];
    int hl = snprintf(header, sizeof header, "{'descr': '%c%s', 'fortran_order': False, 'shape': (%s), }",
                      descr[0] == 'b' || descr[1] == '1' ? '|' : '<', descr, shape);
    if (hl < 0 || (size_t)hl >= sizeof header - 64)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: header too long", path);
    /* Pad with spaces so that data starts on a 64-byte boundary. */
    size_t total = 10 + (size_t)hl + 1;
    size_t pad = (64 - total % 64) % 64;
    memset(header + hl, ' ', pad);
    header[hl + pad] = '\n';
    size_t hlen = (size_t)hl + pad + 1;
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hlen & 0xff), (uint8_t)(hlen >> 8)};

    FILE *f = sg_output_stream(o);
    if (!(f && fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, hlen, f) == hlen))
        return sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", path, strerror(errno));
    return SEGRT_OK;
}

sg_status sg_npy_write_to(sg_output *o, const sg_tensor *t)
{
    SG_TRY(sg_npy_write_header_to(o, t));
    FILE *f = sg_output_stream(o);
    size_t bytes = sg_tensor_bytes(t);
    if (bytes > 0 && fwrite(t->data, 1, bytes, f) != bytes)
        return sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", sg_output_path(o), strerror(errno));
    return SEGRT_OK;
}

sg_status sg_npy_write(const char *path, const sg_tensor *t)
{
    sg_output *o;
    SG_TRY(sg_output_open(path, &o));
    sg_status s = sg_npy_write_to(o, t);
    if (s != SEGRT_OK) {
        sg_output_discard(o);
        return s;
    }
    return sg_output_commit(o);
}
