/* NIfTI-1 and NIfTI-2 files (.nii, .nii.gz) as region sources.
 *
 * The header is niftilib's (nifti1.h, nifti2.h: the structs, byte
 * swapping, datatype sizes, and the quaternion arithmetic of the qform),
 * read from the file's first bytes rather than by nifti_image_read, which
 * picks the format by the file's name, prints to stderr and reads the
 * whole image. Data is read here: a .nii is mapped and a region copies
 * its rows; a .nii.gz is inflated forward (source.h's rule, one stream per
 * volume of a 4-D file).
 *
 * Geometry follows nibabel's get_best_affine: the sform when sform_code
 * > 0, else the qform when qform_code > 0 (ITK agrees wherever the sform
 * is a rotation and scale); with both codes 0 the file states no position
 * and the affine is the spec's method 1, diag(pixdim), known false (nibabel
 * centres the image there, an Analyze habit; ITK and niftilib do not).
 * Spacing is the length of each column of the chosen affine, direction the
 * column over its length, converted from RAS to LPS (x and y negated).
 * NIfTI's index axes are source.h's: i (dim[1], fastest) the width, j the
 * height, k (dim[3]) the depth; dims 4 to 7 are channels, in file order.
 *
 * Values: scl_slope and scl_inter are applied when the slope is finite
 * and not 0 and the pair is not (1, 0), as nibabel does (a slope of 0,
 * NaN or an infinity means unscaled; a NaN intercept is 0). Scaled data
 * is float32 for 8- and 16-bit samples and float32 ones (float32 holds
 * every such value times a float32 slope to its precision), float64 for
 * 32- and 64-bit integers and float64 (float32 would round them).
 * Unscaled samples keep their type, except uint32, widened to int64
 * (segrt has no uint32); uint64, complex, 1-bit and 128-bit data are
 * refused. RGB24 and RGBA32 are 3 and 4 uint8 channels (never scaled, as
 * nibabel). */
#include "io/source.h"

#include "core/file.h"
#include "core/mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool sg_nifti_head(const uint8_t *h, size_t n)
{
    if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b)
        return true;
    if (n >= 348 && ((h[0] == 0x5c && h[1] == 0x01 && h[2] == 0 && h[3] == 0) ||
                     (h[0] == 0 && h[1] == 0 && h[2] == 0x01 && h[3] == 0x5c)))
        return h[344] == 'n' && (h[345] == '+' || h[345] == 'i') && h[346] == '1' && h[347] == 0;
    if (n >= 12 && ((h[0] == 0x1c && h[1] == 0x02 && h[2] == 0 && h[3] == 0) ||
                    (h[0] == 0 && h[1] == 0 && h[2] == 0x02 && h[3] == 0x1c)))
        return h[4] == 'n' && (h[5] == '+' || h[5] == 'i') && h[6] == '2' && h[7] == 0;
    return false;
}

#ifndef SEGRT_HAVE_NIFTI

sg_status sg_source_open_nifti(sg_source *s)
{
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a NIfTI file, and segrt was built without NIfTI support", s->path);
}

#else

#include "io/nifti_internal.h"

#include <nifti2_io.h>
#include <zlib.h>

/* The most a .nii or .nii.gz file may be: the NPY source's cap. */
#define NIFTI_MAX_FILE_BYTES ((uint64_t)64 << 30)
/* Decoded bytes per compressed byte deflate can reach (RFC 1951: 258
 * bytes from a 2-bit code of a fixed block... about 1032:1), plus the
 * gzip framing of a tiny file. */
#define NIFTI_GZ_RATIO 1032
#define NIFTI_GZ_SLACK 4096

/* One volume's rows of a .nii.gz, inflated forward: rows win_r0 ..
 * win_r0 + win_n - 1 of that volume are held; the stream gives row
 * win_r0 + win_n next. */
typedef struct gz_stream {
    z_stream z;
    bool live;
    uint8_t *win;
    int64_t win_r0, win_n, win_cap;
} gz_stream;

typedef struct nifti_state {
    sg_mapped_file map;
    bool gz, swap;
    uint64_t data_at; /* vox_offset: where the data starts in the (inflated) file */
    int nt;           /* datatype code */
    size_t es;        /* bytes of a stored sample (one component of RGB) */
    int comps;        /* samples per voxel: 3 RGB24, 4 RGBA32, else 1 */
    sg_dtype stored;  /* a component's type as stored (uint32 as such: UINT32_CODE below) */
    bool u32;         /* stored uint32 (widened) */
    bool scaled;
    double slope, inter;
    int64_t nx, ny, nz, nvol; /* width, height, depth, volumes (dims 4 to 7) */
    size_t row;               /* bytes of a stored row (nx voxels) */
    gz_stream *streams;       /* .nii.gz: nvol of them */
    uint8_t *scratch;         /* .nii: one row, swapped */
} nifti_state;

static void swap_bytes(uint8_t *p, size_t n, size_t es)
{
    for (size_t i = 0; i < n; i++, p += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* Writes n voxels' component comp of a stored row (from raw, already in
 * host order) to o as the source's dtype. */
static void emit(const nifti_state *st, sg_dtype out_t, const uint8_t *raw, int64_t n, int comp, void *o)
{
    if (st->comps > 1) {
        uint8_t *d = o;
        for (int64_t x = 0; x < n; x++)
            d[x] = raw[(size_t)x * (size_t)st->comps + (size_t)comp];
        return;
    }
    if (!st->scaled && !st->u32) {
        memcpy(o, raw, (size_t)n * st->es);
        return;
    }
    for (int64_t x = 0; x < n; x++) {
        double v;
        if (st->u32) {
            uint32_t u;
            memcpy(&u, raw + (size_t)x * 4, 4);
            v = (double)u;
            if (!st->scaled) {
                int64_t w = u;
                memcpy((uint8_t *)o + (size_t)x * 8, &w, 8);
                continue;
            }
        } else {
            v = sg_dtype_load_f64(st->stored, raw, x);
        }
        sg_dtype_store_f64(out_t, o, x, v * st->slope + st->inter);
    }
}

/* --- .nii.gz: forward streams ------------------------------------------- */

static void stream_stop(gz_stream *g)
{
    if (g->live)
        inflateEnd(&g->z);
    g->live = false;
    g->win_r0 = g->win_n = 0;
}

/* Gives the stream the next part of the file when it has used what it
 * had: zlib takes at most 4 GiB of input at once. Returns the bytes of the
 * file not given to it yet. */
static size_t feed(const nifti_state *st, gz_stream *g)
{
    size_t at = (size_t)((const uint8_t *)g->z.next_in - st->map.data), left = st->map.size - at;
    if (g->z.avail_in == 0 && left > 0) {
        g->z.avail_in = (uInt)(left > UINT32_MAX ? UINT32_MAX : left);
        left -= g->z.avail_in;
    } else {
        left -= g->z.avail_in;
    }
    return left;
}

/* Inflates n bytes into dst (NULL: dropped), across gzip members. */
static sg_status inflate_into(sg_source *s, gz_stream *g, uint8_t *dst, uint64_t n)
{
    nifti_state *st = s->state;
    uint8_t sink[16384];
    while (n > 0) {
        size_t want = n > UINT32_MAX ? UINT32_MAX : (size_t)n;
        if (!dst && want > sizeof sink)
            want = sizeof sink;
        g->z.next_out = dst ? dst : sink;
        g->z.avail_out = (uInt)want;
        while (g->z.avail_out > 0) {
            size_t unfed = feed(st, g);
            int r = inflate(&g->z, Z_NO_FLUSH);
            if (r == Z_STREAM_END) {
                if (g->z.avail_out == 0)
                    break;
                /* Another gzip member may follow (concatenated files). */
                if (g->z.avail_in == 0 && unfed == 0) {
                    stream_stop(g);
                    return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the compressed data ends before the image does",
                                    s->path);
                }
                if (inflateReset(&g->z) != Z_OK)
                    break;
                continue;
            }
            if (r != Z_OK) {
                const char *why = g->z.msg ? g->z.msg : r == Z_BUF_ERROR ? "truncated" : "corrupt";
                stream_stop(g);
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad compressed data: %s", s->path, why);
            }
        }
        size_t got = want - g->z.avail_out;
        if (dst)
            dst += got;
        n -= got;
    }
    return SEGRT_OK;
}

/* Starts volume v's stream at its first row. */
static sg_status stream_start(sg_source *s, gz_stream *g, int64_t v)
{
    nifti_state *st = s->state;
    stream_stop(g);
    memset(&g->z, 0, sizeof g->z);
    if (inflateInit2(&g->z, 15 + 32) != Z_OK)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: cannot start the gzip decoder", s->path);
    g->live = true;
    g->z.next_in = (Bytef *)st->map.data;
    g->z.avail_in = 0;
    g->win_r0 = g->win_n = 0;
    uint64_t skip = st->data_at + (uint64_t)v * (uint64_t)st->nz * (uint64_t)st->ny * st->row;
    return inflate_into(s, g, NULL, skip);
}

/* Makes rows r0 .. r1 - 1 of volume v the window's first rows. */
static sg_status stream_rows(sg_source *s, int64_t v, int64_t r0, int64_t r1)
{
    nifti_state *st = s->state;
    gz_stream *g = &st->streams[v];
    if (!g->live || r0 < g->win_r0)
        SG_TRY(stream_start(s, g, v));
    int64_t drop = r0 - g->win_r0 < g->win_n ? r0 - g->win_r0 : g->win_n;
    if (drop > 0) {
        memmove(g->win, g->win + (size_t)drop * st->row, (size_t)(g->win_n - drop) * st->row);
        g->win_n -= drop;
        g->win_r0 += drop;
    }
    int64_t need = r1 - r0;
    if (need > g->win_cap) {
        uint8_t *w = realloc(g->win, (size_t)need * st->row);
        if (!w)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %lld rows", s->path, (long long)need);
        g->win = w;
        g->win_cap = need;
    }
    if (g->win_n == 0 && g->win_r0 < r0) {
        SG_TRY(inflate_into(s, g, NULL, (uint64_t)(r0 - g->win_r0) * st->row));
        g->win_r0 = r0;
    }
    if (g->win_r0 + g->win_n < r1) {
        int64_t more = r1 - g->win_r0 - g->win_n;
        uint8_t *at = g->win + (size_t)g->win_n * st->row;
        SG_TRY(inflate_into(s, g, at, (uint64_t)more * st->row));
        if (st->swap)
            swap_bytes(at, (size_t)more * st->row / st->es, st->es);
        g->win_n += more;
    }
    return SEGRT_OK;
}

static sg_status nifti_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    (void)level;
    nifti_state *st = s->state;
    sg_dtype out_t = s->info.dtype;
    size_t oes = segrt_dtype_size(out_t);
    int64_t W = box->size[2], plane = box->size[0] * box->size[1] * W;
    uint8_t *o = dst;
    for (int64_t v = 0; v < st->nvol; v++) {
        if (st->gz) {
            int64_t r0 = box->start[0] * st->ny + box->start[1];
            int64_t r1 = (box->start[0] + box->size[0] - 1) * st->ny + box->start[1] + box->size[1];
            SG_TRY(stream_rows(s, v, r0, r1));
        }
        for (int comp = 0; comp < st->comps; comp++) {
            uint8_t *oc = o + (size_t)((v * st->comps + comp) * plane) * oes;
            for (int64_t z = 0; z < box->size[0]; z++)
                for (int64_t y = 0; y < box->size[1]; y++) {
                    int64_t zz = box->start[0] + z, yy = box->start[1] + y;
                    const uint8_t *raw;
                    if (st->gz) {
                        gz_stream *g = &st->streams[v];
                        raw = g->win + (size_t)(zz * st->ny + yy - g->win_r0) * st->row;
                    } else {
                        uint64_t at = st->data_at + ((uint64_t)((v * st->nz + zz) * st->ny + yy)) * st->row;
                        raw = st->map.data + at;
                        if (st->swap) {
                            memcpy(st->scratch, raw, st->row);
                            swap_bytes(st->scratch, st->row / st->es, st->es);
                            raw = st->scratch;
                        }
                    }
                    raw += (size_t)box->start[2] * st->es * (size_t)st->comps;
                    emit(st, out_t, raw, W, comp, oc + (size_t)((z * box->size[1] + y) * W) * oes);
                }
        }
    }
    return SEGRT_OK;
}

static void nifti_close(sg_source *s)
{
    nifti_state *st = s->state;
    if (!st)
        return;
    if (st->streams)
        for (int64_t v = 0; v < st->nvol; v++) {
            stream_stop(&st->streams[v]);
            free(st->streams[v].win);
        }
    free(st->streams);
    free(st->scratch);
    sg_unmap_file(&st->map);
    free(st);
}

static const sg_source_ops nifti_ops = {
    .read_region = nifti_read_region,
    .close = nifti_close,
};

/* The first n bytes of a gzip stream into out; *got is how many there are. */
static sg_status gz_head(sg_source *s, uint8_t *out, size_t n, size_t *got)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    nifti_state *st = s->state;
    if (inflateInit2(&z, 15 + 32) != Z_OK)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: cannot start the gzip decoder", s->path);
    z.next_in = (Bytef *)st->map.data;
    z.avail_in = (uInt)(st->map.size > UINT32_MAX ? UINT32_MAX : st->map.size);
    z.next_out = out;
    z.avail_out = (uInt)n;
    int r = Z_OK;
    while (z.avail_out > 0 && r == Z_OK)
        r = inflate(&z, Z_NO_FLUSH);
    *got = n - z.avail_out;
    const char *msg = z.msg;
    inflateEnd(&z);
    if (r != Z_OK && r != Z_STREAM_END)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: a gzip file that does not inflate (%s)", s->path,
                        msg ? msg : "truncated");
    return SEGRT_OK;
}

sg_status sg_nifti_parse_header(const uint8_t *b, size_t n, const char *name, sg_nifti_header *h)
{
    memset(h, 0, sizeof *h);
    if (n < 348)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %zu bytes, less than a NIfTI header", name, n);
    int32_t size;
    memcpy(&size, b, 4);
    bool swap = size != 348 && size != 540;
    if (swap)
        size = (int32_t)__builtin_bswap32((uint32_t)size);
    if (size == 348) {
        nifti_1_header n1;
        memcpy(&n1, b, sizeof n1);
        if (swap)
            nifti_swap_as_nifti1(&n1);
        if (memcmp(n1.magic, "ni1", 4) == 0)
            return sg_error(SEGRT_ERROR_UNSUPPORTED,
                            "%s: a NIfTI-1 header of a .hdr/.img pair; segrt reads single .nii files", name);
        if (memcmp(n1.magic, "n+1", 4) != 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not a NIfTI file (no n+1 magic)", name);
        h->version = 1;
        for (int i = 0; i < 8; i++) {
            h->dim[i] = n1.dim[i];
            h->pixdim[i] = n1.pixdim[i];
        }
        h->datatype = n1.datatype;
        h->vox_offset = n1.vox_offset;
        h->scl_slope = n1.scl_slope, h->scl_inter = n1.scl_inter;
        h->qform_code = n1.qform_code, h->sform_code = n1.sform_code;
        h->quatern[0] = n1.quatern_b, h->quatern[1] = n1.quatern_c, h->quatern[2] = n1.quatern_d;
        h->qoffset[0] = n1.qoffset_x, h->qoffset[1] = n1.qoffset_y, h->qoffset[2] = n1.qoffset_z;
        for (int c = 0; c < 4; c++) {
            h->srow[0][c] = n1.srow_x[c];
            h->srow[1][c] = n1.srow_y[c];
            h->srow[2][c] = n1.srow_z[c];
        }
    } else if (size == 540) {
        if (n < 540)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %zu bytes, less than a NIfTI-2 header", name, n);
        nifti_2_header n2;
        memcpy(&n2, b, sizeof n2);
        if (swap)
            nifti_swap_as_nifti2(&n2);
        if (memcmp(n2.magic, "ni2", 4) == 0)
            return sg_error(SEGRT_ERROR_UNSUPPORTED,
                            "%s: a NIfTI-2 header of a .hdr/.img pair; segrt reads single .nii files", name);
        if (memcmp(n2.magic, "n+2", 4) != 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not a NIfTI file (no n+2 magic)", name);
        h->version = 2;
        for (int i = 0; i < 8; i++) {
            h->dim[i] = n2.dim[i];
            h->pixdim[i] = n2.pixdim[i];
        }
        h->datatype = n2.datatype;
        h->vox_offset = (double)n2.vox_offset;
        h->scl_slope = n2.scl_slope, h->scl_inter = n2.scl_inter;
        h->qform_code = n2.qform_code, h->sform_code = n2.sform_code;
        h->quatern[0] = n2.quatern_b, h->quatern[1] = n2.quatern_c, h->quatern[2] = n2.quatern_d;
        h->qoffset[0] = n2.qoffset_x, h->qoffset[1] = n2.qoffset_y, h->qoffset[2] = n2.qoffset_z;
        for (int c = 0; c < 4; c++) {
            h->srow[0][c] = n2.srow_x[c];
            h->srow[1][c] = n2.srow_y[c];
            h->srow[2][c] = n2.srow_z[c];
        }
    } else {
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not a NIfTI file (header size %d)", name, (int)size);
    }
    h->swapped = swap;
    if (h->dim[0] < 1 || h->dim[0] > 7)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: dim[0] is %lld; NIfTI images have 1 to 7 dims", name,
                        (long long)h->dim[0]);
    for (int i = 1; i <= 7; i++) {
        if (i > h->dim[0])
            h->dim[i] = 1;
        else if (h->dim[i] < 1 || h->dim[i] > ((int64_t)1 << 40))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: dim[%d] is %lld", name, i, (long long)h->dim[i]);
    }
    size_t header = h->version == 1 ? 348 : 540;
    if (!(h->vox_offset >= (double)header && h->vox_offset < 9.0e15 && h->vox_offset == floor(h->vox_offset)))
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: vox_offset %g is not a byte offset past the header", name,
                        h->vox_offset);
    return SEGRT_OK;
}

/* The sg dtype of a NIfTI datatype (a component's), its size and count. */
static sg_status stored_type(sg_source *s, int dt, sg_dtype *t, size_t *es, int *comps, bool *u32)
{
    *comps = 1;
    *u32 = false;
    switch (dt) {
    case DT_UINT8:
        *t = SEGRT_DTYPE_UINT8;
        break;
    case DT_INT8:
        *t = SEGRT_DTYPE_INT8;
        break;
    case DT_INT16:
        *t = SEGRT_DTYPE_INT16;
        break;
    case DT_UINT16:
        *t = SEGRT_DTYPE_UINT16;
        break;
    case DT_INT32:
        *t = SEGRT_DTYPE_INT32;
        break;
    case DT_UINT32:
        *t = SEGRT_DTYPE_INT64;
        *u32 = true;
        break;
    case DT_INT64:
        *t = SEGRT_DTYPE_INT64;
        break;
    case DT_FLOAT32:
        *t = SEGRT_DTYPE_FLOAT32;
        break;
    case DT_FLOAT64:
        *t = SEGRT_DTYPE_FLOAT64;
        break;
    case DT_RGB24:
        *t = SEGRT_DTYPE_UINT8;
        *comps = 3;
        break;
    case DT_RGBA32:
        *t = SEGRT_DTYPE_UINT8;
        *comps = 4;
        break;
    default: {
        const char *name = nifti_datatype_to_string(dt);
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: NIfTI datatype %d (%s); segrt reads uint8, int8, int16, uint16, int32, uint32, int64, "
                        "float32, float64, RGB24 and RGBA32",
                        s->path, dt, name ? name : "unknown");
    }
    }
    *es = *u32 ? 4 : segrt_dtype_size(*t);
    return SEGRT_OK;
}

sg_status sg_nifti_affine(const sg_nifti_header *h, double a[3][4], bool *known)
{
    *known = true;
    if (h->sform_code > 0) {
        memcpy(a, h->srow, sizeof h->srow);
    } else if (h->qform_code > 0) {
        double dx = h->pixdim[1], dy = h->pixdim[2], dz = h->pixdim[3];
        double qfac = h->pixdim[0] < 0 ? -1.0 : 1.0;
        nifti_dmat44 m = nifti_quatern_to_dmat44(h->quatern[0], h->quatern[1], h->quatern[2], h->qoffset[0],
                                                 h->qoffset[1], h->qoffset[2], dx, dy, dz, qfac);
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 4; c++)
                a[r][c] = m.m[r][c];
    } else {
        /* Method 1 of nifti1.h: pixdim scales the index; no position. */
        *known = false;
        memset(a, 0, sizeof(double) * 12);
        for (int r = 0; r < 3; r++)
            a[r][r] = h->pixdim[r + 1] > 0 && isfinite(h->pixdim[r + 1]) ? h->pixdim[r + 1] : 1.0;
    }
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            if (!isfinite(a[r][c]))
                return SEGRT_ERROR_INVALID_MODEL;
    return SEGRT_OK;
}

sg_status sg_source_open_nifti(sg_source *s)
{
    nifti_state *st = sg_calloc(1, sizeof *st);
    if (!st)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    s->ops = &nifti_ops;
    s->state = st;
    SG_TRY(sg_map_file(s->path, NIFTI_MAX_FILE_BYTES, "a NIfTI file segrt reads (64 GiB)", &st->map));
    uint8_t head[544];
    size_t got = 0;
    st->gz = st->map.size >= 2 && st->map.data[0] == 0x1f && st->map.data[1] == 0x8b;
    if (st->gz) {
        SG_TRY(gz_head(s, head, sizeof head, &got));
        if (!sg_nifti_head(head, got))
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a gzip file whose content is not a NIfTI image", s->path);
    } else {
        got = st->map.size < sizeof head ? st->map.size : sizeof head;
        memcpy(head, st->map.data, got);
    }
    sg_nifti_header h;
    SG_TRY(sg_nifti_parse_header(head, got, s->path, &h));
    st->swap = h.swapped;
    st->nt = h.datatype;
    sg_dtype stored = SEGRT_DTYPE_UNDEFINED;
    SG_TRY(stored_type(s, h.datatype, &stored, &st->es, &st->comps, &st->u32));
    st->stored = stored;
    st->nx = h.dim[1], st->ny = h.dim[2], st->nz = h.dim[3];
    st->nvol = h.dim[4] * h.dim[5] * h.dim[6] * h.dim[7];
    st->data_at = (uint64_t)h.vox_offset;
    /* Every product below stays under 2^63: each dim is at most 2^40, and
     * the bytes are checked against the file before anything is used. */
    double voxels = (double)st->nx * (double)st->ny * (double)st->nz * (double)st->nvol;
    double bytes = voxels * (double)st->es * st->comps;
    double channels = (double)st->nvol * st->comps;
    double limit = st->gz ? (double)st->map.size * NIFTI_GZ_RATIO + NIFTI_GZ_SLACK : (double)st->map.size;
    if (channels > 65536 || bytes + (double)st->data_at > limit)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: the header claims %lldx%lldx%lldx%lld samples of %zu bytes at %llu, more than the "
                        "%s file holds (%zu bytes)",
                        s->path, (long long)st->nx, (long long)st->ny, (long long)st->nz,
                        (long long)(st->nvol * st->comps), st->es, (unsigned long long)st->data_at,
                        st->gz ? "compressed" : "", st->map.size);
    st->row = (size_t)st->nx * st->es * (size_t)st->comps;
    /* Scaling as nibabel reads it. */
    double slope = h.scl_slope, inter = isnan(h.scl_inter) ? 0.0 : h.scl_inter;
    if (st->comps == 1 && isfinite(slope) && slope != 0 && !(slope == 1 && inter == 0)) {
        if (!isfinite(inter))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: scl_inter is %g", s->path, inter);
        st->scaled = true;
        st->slope = slope;
        st->inter = inter;
    }
    sg_source_info *in = &s->info;
    in->format = "nifti";
    in->dtype = stored;
    if (st->scaled)
        in->dtype = (st->es >= 4 && stored != SEGRT_DTYPE_FLOAT32) ? SEGRT_DTYPE_FLOAT64 : SEGRT_DTYPE_FLOAT32;
    in->n_dims = h.dim[0] <= 2 ? 2 : 3;
    in->channels = (int32_t)channels;
    in->n_levels = 1;
    in->dims[0][0] = st->nz, in->dims[0][1] = st->ny, in->dims[0][2] = st->nx;
    in->tile[0] = 1, in->tile[1] = 1, in->tile[2] = st->nx;
    double a[3][4];
    bool known;
    if (sg_nifti_affine(&h, a, &known) != SEGRT_OK)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the %s is not finite", s->path,
                        h.sform_code > 0 ? "sform" : "qform");
    sg_geometry *g = &in->geometry;
    g->known = known;
    g->qform_code = (int32_t)h.qform_code;
    g->sform_code = (int32_t)h.sform_code;
    /* NIfTI's column c is index axis c (i, j, k), array axis 2 - c; RAS to
     * LPS. */
    for (int c = 0; c < 3; c++) {
        double len = sqrt(a[0][c] * a[0][c] + a[1][c] * a[1][c] + a[2][c] * a[2][c]);
        if (!(len > 0) || !isfinite(len))
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the %s maps axis %c to nothing (a zero column)", s->path,
                            h.sform_code > 0 ? "sform" : "qform", "ijk"[c]);
        in->spacing[2 - c] = len;
        for (int r = 0; r < 3; r++)
            g->direction[r][c] = (r < 2 ? -a[r][c] : a[r][c]) / len;
    }
    for (int r = 0; r < 3; r++)
        g->origin[r] = r < 2 ? -a[r][3] : a[r][3];
    if (!known)
        sg_geometry_identity(g), g->qform_code = 0, g->sform_code = 0;
    s->max_all_bytes = NIFTI_MAX_FILE_BYTES * 2; /* float32 from 16-bit samples doubles them */
    if (st->gz) {
        if (!(st->streams = sg_calloc((size_t)st->nvol, sizeof *st->streams)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    } else if (st->swap && !(st->scratch = sg_malloc(st->row))) {
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    }
    return SEGRT_OK;
}

#endif
