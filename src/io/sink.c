/* Region sinks (sink.h): NPY by seeking to each channel's rows, PNG row by
 * row (sg_png_writer) and TIFF strip by strip (sg_tiff_writer), the same
 * writers the whole-image writers use, so both give the same bytes. */
#include "io/sink.h"

#include "core/file.h"
#include "core/mem.h"
#include "io/image.h"
#include "io/nifti_internal.h"
#include "io/npy.h"
#include "io/sink_slide.h"
#include "io/tiff_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct sg_sink {
    sg_output *out;
    bool borrowed; /* out is the caller's (sg_sink_open_output): finished here, committed there */
    sg_sink_desc d;
    int kind;         /* 0 npy, 1 png, 2 tiff (strips or, with slide, a pyramid), 3 nifti */
    size_t es;        /* bytes of a sample */
    uint64_t data_at; /* NPY: where the data starts */
    sg_png_writer *png;
    sg_tiff_writer *tiff;
    sg_nifti_writer *nifti;
    sg_slide_writer *slide;
    uint8_t *row; /* PNG and TIFF: one interleaved row */
    int64_t z, y; /* the next row */
};

static bool is_npy(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    return dot && strcasecmp(dot, ".npy") == 0;
}

static sg_status check_desc(const char *path, const sg_sink_desc *d, int kind)
{
    if ((d->n_dims != 2 && d->n_dims != 3) || d->channels < 1 || d->dims[1] < 1 || d->dims[2] < 1 || d->dims[0] < 1 ||
        (d->n_dims == 2 && d->dims[0] != 1) || d->dims[0] > INT32_MAX || d->dims[1] > INT32_MAX ||
        d->dims[2] > INT32_MAX || segrt_dtype_size(d->dtype) == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: cannot write an image of %d dims, %d channel(s), %lldx%lldx%lld of %s", path,
                        (int)d->n_dims, (int)d->channels, (long long)d->dims[0], (long long)d->dims[1],
                        (long long)d->dims[2], segrt_dtype_name(d->dtype));
    if (kind == 0 || kind == 3)
        return SEGRT_OK;
    if (d->dtype != SEGRT_DTYPE_UINT8 && d->dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %s holds uint8 or uint16 samples, not %s", path,
                        kind == 1 ? "PNG" : "TIFF", segrt_dtype_name(d->dtype));
    if (d->pyramid && d->classes ? d->channels > SG_SINK_MAX_CLASSES : d->channels > 4)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %d channels; PNG and TIFF images have 1 to 4%s", path,
                        (int)d->channels, d->pyramid && d->classes ? " colours or up to 256 classes" : "");
    if (kind == 1 && d->n_dims == 3)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: a PNG holds one 2-D picture, not %lld pages; use .tif", path,
                        (long long)d->dims[0]);
    return SEGRT_OK;
}

static sg_status sink_open(const char *path, sg_output *given, const sg_sink_desc *desc, sg_sink **out)
{
    *out = NULL;
    int kind = 0;
    bool gz = false;
    if (sg_nifti_name(path, &gz)) {
        kind = 3;
    } else if (!is_npy(path)) {
        SG_TRY(sg_image_check_writable_name(path)); /* .jpg and unknown extensions refused */
        kind = sg_image_format_of_name(path) == SG_IMAGE_PNG ? 1 : 2;
    }
    SG_TRY(check_desc(path, desc, kind));
    if (desc->pyramid && kind != 2)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a pyramid is written as a TIFF (.tif, .tiff) only", path);
    sg_sink *s = sg_calloc(1, sizeof *s);
    if (!s)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    s->d = *desc;
    s->kind = kind;
    s->es = segrt_dtype_size(desc->dtype);
    s->borrowed = given != NULL;
    s->out = given;
    sg_status st = given ? SEGRT_OK : sg_output_open(path, &s->out);
    sg_image shape = {(int32_t)desc->dims[2], (int32_t)desc->dims[1], (int32_t)desc->dims[0],
                      desc->channels,         (int32_t)s->es * 8,     NULL};
    if (st == SEGRT_OK && kind == 0) {
        sg_tensor t = {desc->dtype, 0, {0}, NULL};
        t.dims[t.rank++] = 1;
        t.dims[t.rank++] = desc->channels;
        if (desc->n_dims == 3)
            t.dims[t.rank++] = desc->dims[0];
        t.dims[t.rank++] = desc->dims[1];
        t.dims[t.rank++] = desc->dims[2];
        st = sg_npy_write_header_to(s->out, &t);
        if (st == SEGRT_OK) {
            FILE *f = sg_output_stream(s->out);
            off_t at = ftello(f);
            st = at < 0 ? sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno)) : SEGRT_OK;
            s->data_at = (uint64_t)at;
        }
    } else if (st == SEGRT_OK && kind == 3) {
        st = sg_nifti_writer_open(s->out, desc, gz, &s->nifti);
    } else if (st == SEGRT_OK) {
        if (!(s->row = sg_malloc(sg_image_row_bytes(&shape))))
            st = sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
        else if (kind == 1)
            st = sg_png_writer_open(s->out, &shape, &s->png);
        else if (desc->pyramid)
            st = sg_slide_writer_open(s->out, desc, &s->slide);
        else
            st = sg_tiff_writer_open(s->out, &shape, &s->tiff);
    }
    if (st != SEGRT_OK) {
        sg_sink_discard(s);
        return st;
    }
    *out = s;
    return SEGRT_OK;
}

sg_status sg_sink_open(const char *path, const sg_sink_desc *desc, sg_sink **out)
{
    return sink_open(path, NULL, desc, out);
}

sg_status sg_sink_open_output(sg_output *o, const sg_sink_desc *desc, sg_sink **out)
{
    return sink_open(sg_output_path(o), o, desc, out);
}

/* One row of page z (the next), from channel planes plane bytes apart. */
static sg_status put_row(sg_sink *s, const uint8_t *src, size_t plane)
{
    const sg_sink_desc *d = &s->d;
    size_t W = (size_t)d->dims[2], C = (size_t)d->channels, es = s->es, row = W * es;
    if (s->kind == 0) {
        FILE *f = sg_output_stream(s->out);
        for (size_t c = 0; c < C; c++) {
            /* Sequential for one channel: seek only when the place moves. */
            uint64_t at =
                s->data_at +
                (((uint64_t)c * (uint64_t)d->dims[0] + (uint64_t)s->z) * (uint64_t)d->dims[1] + (uint64_t)s->y) * row;
            if ((C > 1 && fseeko(f, (off_t)at, SEEK_SET) != 0) || fwrite(src + c * plane, 1, row, f) != row)
                return sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", sg_output_path(s->out), strerror(errno));
        }
        return SEGRT_OK;
    }
    if (s->kind == 3) {
        for (size_t c = 0; c < C; c++)
            SG_TRY(sg_nifti_writer_row(s->nifti, (int64_t)c, s->z, s->y, src + c * plane));
        return SEGRT_OK;
    }
    /* Planar to interleaved. */
    for (size_t c = 0; c < C; c++) {
        const uint8_t *in = src + c * plane;
        if (es == 1)
            for (size_t x = 0; x < W; x++)
                s->row[x * C + c] = in[x];
        else
            for (size_t x = 0; x < W; x++)
                memcpy(s->row + (x * C + c) * es, in + x * es, es);
    }
    if (s->slide)
        return sg_slide_writer_row(s->slide, s->row);
    return s->kind == 1 ? sg_png_writer_row(s->png, s->row) : sg_tiff_writer_rows(s->tiff, s->row, 1);
}

sg_status sg_sink_write(sg_sink *s, const sg_box *box, const void *src)
{
    const sg_sink_desc *d = &s->d;
    const char *path = sg_output_path(s->out);
    bool full_width = box->start[2] == 0 && box->size[2] == d->dims[2];
    bool rows = box->size[0] == 1 && box->start[0] == s->z && box->start[1] == s->y && box->size[1] >= 1 &&
                box->size[1] <= d->dims[1] - s->y;
    bool pages = s->y == 0 && box->start[0] == s->z && box->start[1] == 0 && box->size[1] == d->dims[1] &&
                 box->size[0] >= 1 && box->size[0] <= d->dims[0] - s->z;
    if (!full_width || !(rows || pages) || s->z >= d->dims[0])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: region %lld+%lld, %lld+%lld, %lld+%lld (page, row, column) is not the next: full-width "
                        "rows from page %lld, row %lld",
                        path, (long long)box->start[0], (long long)box->size[0], (long long)box->start[1],
                        (long long)box->size[1], (long long)box->start[2], (long long)box->size[2], (long long)s->z,
                        (long long)s->y);
    size_t row = (size_t)d->dims[2] * s->es;
    size_t plane = (size_t)box->size[0] * (size_t)box->size[1] * row;
    const uint8_t *in = src;
    for (int64_t z = 0; z < box->size[0]; z++)
        for (int64_t y = 0; y < box->size[1]; y++) {
            SG_TRY(put_row(s, in + ((size_t)z * (size_t)box->size[1] + (size_t)y) * row, plane));
            if (++s->y == d->dims[1]) {
                s->y = 0;
                s->z++;
            }
        }
    return SEGRT_OK;
}

sg_status sg_sink_commit(sg_sink *s)
{
    const char *path = sg_output_path(s->out);
    sg_status st = SEGRT_OK;
    if (s->z < s->d.dims[0])
        st = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: ended at page %lld, row %lld of %lld pages of %lld rows", path,
                      (long long)s->z, (long long)s->y, (long long)s->d.dims[0], (long long)s->d.dims[1]);
    if (st == SEGRT_OK && s->png) {
        st = sg_png_writer_finish(s->png);
        s->png = NULL;
    }
    if (st == SEGRT_OK && s->tiff) {
        st = sg_tiff_writer_finish(s->tiff);
        s->tiff = NULL;
    }
    if (st == SEGRT_OK && s->slide) {
        st = sg_slide_writer_finish(s->slide);
        s->slide = NULL;
    }
    if (st == SEGRT_OK && s->nifti) {
        st = sg_nifti_writer_finish(s->nifti);
        s->nifti = NULL;
    }
    if (st != SEGRT_OK) {
        sg_sink_discard(s);
        return st;
    }
    st = s->borrowed ? SEGRT_OK : sg_output_commit(s->out);
    s->out = NULL;
    sg_sink_discard(s);
    return st;
}

void sg_sink_discard(sg_sink *s)
{
    if (!s)
        return;
    sg_png_writer_free(s->png);
    sg_tiff_writer_free(s->tiff);
    sg_nifti_writer_free(s->nifti);
    sg_slide_writer_free(s->slide);
    if (!s->borrowed)
        sg_output_discard(s->out);
    free(s->row);
    free(s);
}
