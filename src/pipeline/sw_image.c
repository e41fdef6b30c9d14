/* A window job's image as a row reader (sw_image.h): over a tensor, or
 * over a region source. */
#include "pipeline/sw_image.h"

#include "core/dtype.h"

#include <stdlib.h>
#include <string.h>

int64_t sg_sw_image_row_numel(const sg_sw_image *im)
{
    int64_t n = 1;
    for (int32_t d = 3; d < im->rank; d++)
        n *= im->dims[d];
    return n;
}

static sg_status tensor_read(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride)
{
    int64_t plane = sg_sw_image_row_numel(im), C = im->dims[1], image_numel = im->dims[2] * plane;
    for (int64_t c = 0; c < C; c++)
        memcpy(dst + c * channel_stride, im->data + (n * C + c) * image_numel + r0 * plane,
               sizeof(float) * (size_t)((r1 - r0) * plane));
    return SEGRT_OK;
}

void sg_sw_image_of_tensor(const sg_tensor *t, sg_sw_image *out)
{
    memset(out, 0, sizeof *out);
    out->rank = t->rank;
    memcpy(out->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    out->data = t->data;
    out->read = tensor_read;
}

/* A source's reader: the source, and scratch for a box of rows in the
 * source's dtype when that is not float32 (grown as needed). */
typedef struct source_rows {
    sg_source *src;
    void *scratch;
    size_t scratch_bytes;
} source_rows;

static sg_status source_read(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride)
{
    (void)n; /* a source holds one image */
    source_rows *sr = im->state;
    const sg_source_info *in = &sr->src->info;
    int64_t plane = sg_sw_image_row_numel(im), C = im->dims[1], rows = r1 - r0, box_numel = rows * plane;
    /* Rows are depth in 3-D, height in 2-D (depth 1). */
    sg_box box = {{0, 0, 0}, {in->dims[0][0], in->dims[0][1], in->dims[0][2]}};
    int a = in->n_dims == 3 ? 0 : 1;
    box.start[a] = r0;
    box.size[a] = rows;
    bool direct = in->dtype == SEGRT_DTYPE_FLOAT32 && channel_stride == box_numel;
    size_t bytes = (size_t)(C * box_numel) * segrt_dtype_size(in->dtype);
    void *buf = dst;
    if (!direct) {
        if (bytes > sr->scratch_bytes) {
            void *p = realloc(sr->scratch, bytes);
            if (!p)
                return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for %lld rows of the image", sr->src->path,
                                (long long)rows);
            sr->scratch = p;
            sr->scratch_bytes = bytes;
        }
        buf = sr->scratch;
    }
    SG_TRY(sg_source_read_region(sr->src, 0, &box, buf));
    if (direct)
        return SEGRT_OK;
    for (int64_t c = 0; c < C; c++) {
        float *o = dst + c * channel_stride;
        if (in->dtype == SEGRT_DTYPE_FLOAT32)
            memcpy(o, (const float *)buf + c * box_numel, sizeof(float) * (size_t)box_numel);
        else
            for (int64_t i = 0; i < box_numel; i++)
                o[i] = (float)sg_dtype_load_f64(in->dtype, buf, c * box_numel + i);
    }
    return SEGRT_OK;
}

sg_status sg_sw_image_of_source(sg_source *src, sg_sw_image *out)
{
    memset(out, 0, sizeof *out);
    const sg_source_info *in = &src->info;
    if (!sg_dtype_is_supported(in->dtype) || segrt_dtype_size(in->dtype) == 0)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: samples of %s cannot be read as float32", src->path,
                        segrt_dtype_name(in->dtype));
    source_rows *sr = calloc(1, sizeof *sr);
    if (!sr)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sr->src = src;
    out->rank = in->n_dims + 2;
    out->dims[0] = 1;
    out->dims[1] = in->channels;
    for (int32_t d = 0; d < in->n_dims; d++)
        out->dims[2 + d] = in->dims[0][3 - in->n_dims + d];
    out->read = source_read;
    out->state = sr;
    return SEGRT_OK;
}

void sg_sw_image_free(sg_sw_image *im)
{
    if (!im)
        return;
    if (im->read == source_read) {
        source_rows *sr = im->state;
        if (sr)
            free(sr->scratch);
        free(sr);
    }
    im->state = NULL;
}

sg_status sg_sw_image_read(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride)
{
    if (im->rank < 3 || n < 0 || n >= im->dims[0] || r0 < 0 || r1 < r0 || r1 > im->dims[2])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "rows [%lld, %lld) of image %lld: the image has %lld x %lld rows",
                        (long long)r0, (long long)r1, (long long)n, (long long)(im->rank >= 3 ? im->dims[0] : 0),
                        (long long)(im->rank >= 3 ? im->dims[2] : 0));
    if (r1 == r0)
        return SEGRT_OK;
    return im->read(im, n, r0, r1, dst, channel_stride);
}
