/* The image of a window job as a row reader: a job asks for rows [r0, r1)
 * of the slowest spatial axis ("rows", as the device path's ring holds
 * them) of one image, every channel, as float32 into its own buffer, and
 * holds only those. Two readers:
 *
 * - over a tensor (float32 N x C x spatial in host memory): a view, no
 *   copy; `data` is set, so a path that can use the whole image in place
 *   (the host path's gathers, the device path's copy team) does so, and
 *   results are today's exactly;
 * - over a region source (src/io/source.h, read_region): rows are read
 *   from the file as the job reaches them, so an image larger than memory
 *   (a memory-mapped NPY) streams through the device path. Samples of any
 *   dtype the source stores are converted to float32.
 *
 * A reader is used by one thread at a time (a source's rule). */
#ifndef SG_PIPELINE_SW_IMAGE_H
#define SG_PIPELINE_SW_IMAGE_H

#include "backend/backend_window.h"
#include "core/tensor.h"
#include "io/source.h"

typedef struct sg_sw_image sg_sw_image;

struct sg_sw_image {
    int32_t rank;                 /* 2 + spatial dims */
    int64_t dims[SEGRT_MAX_RANK]; /* N x C x spatial */
    const float *data;            /* the whole image in host memory, or NULL (rows come from read) */
    /* Rows [r0, r1) of image n into dst: channel c's rows at
     * dst + c * channel_stride, each row the product of the other spatial
     * axes, contiguous. */
    sg_status (*read)(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride);
    /* Optional (NULL: rows come through read): rows [r0, r1) of image n
     * made on the device of ops (the calling thread's current one), as
     * read would make them, enqueued on stream into device memory at dst
     * (channel c's rows at dst + c * channel_stride). UNSUPPORTED where
     * this image cannot (its files or the device): the caller reads
     * through read from then on. */
    sg_status (*read_device)(sg_sw_image *im, const sg_window_ops *ops, int64_t n, int64_t r0, int64_t r1, float *dst,
                             int64_t channel_stride, sg_backend_stream *stream);
    void *state;
};

/* A view of t (float32, N x C x spatial, host memory); t must outlive it. */
void sg_sw_image_of_tensor(const sg_tensor *t, sg_sw_image *out);

/* A reader over level 0 of src (one image: 1 x C x spatial), which must
 * outlive it; release with sg_sw_image_free. OUT_OF_MEMORY. */
sg_status sg_sw_image_of_source(sg_source *src, sg_sw_image *out);
void sg_sw_image_free(sg_sw_image *im);

/* Rows [r0, r1) of image n (contract of `read`); INVALID_ARGUMENT for rows
 * or an image outside it. */
sg_status sg_sw_image_read(sg_sw_image *im, int64_t n, int64_t r0, int64_t r1, float *dst, int64_t channel_stride);

/* The elements of one row: the product of the spatial dims but the first. */
int64_t sg_sw_image_row_numel(const sg_sw_image *im);

#endif
