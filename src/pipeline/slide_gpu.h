/* A slide level's rows made on the device (the slide job's read_device,
 * job_slide.c): the level's JPEG tiles (io/slide.h's sg_slide_tiles) read
 * from the file, decoded on the device a tile row at a time into a ring
 * of 8-bit planes (backend_window.h's jpeg_decode) by a thread of the
 * reader's own, ahead of the caller, and shrunk by area
 * into the float32 rows the window job reads (area_u8): what the host
 * path does with OpenSlide's pixels and area weights, without them ever
 * being on the host. */
#ifndef SG_PIPELINE_SLIDE_GPU_H
#define SG_PIPELINE_SLIDE_GPU_H

#include "backend/backend_window.h"
#include "io/slide.h"

typedef struct sg_slide_gpu sg_slide_gpu;

/* Area weights along one axis (host memory): grid pixel i covers level
 * pixels [first[i], first[i] + count[i]) with weights w[i * span ...]. */
typedef struct sg_slide_axis {
    int64_t n, span;
    const int64_t *first;
    const int32_t *count;
    const float *w;
} sg_slide_axis;

/* Rows of `tiles`' level over the grid of the axes, normalised by norm,
 * on the device of ops (the calling thread's current one); the axes are
 * copied. Its thread starts decoding at once. Where the device cannot
 * decode JPEG (no nvJPEG) the first sg_slide_gpu_rows fails with
 * UNSUPPORTED. */
sg_status sg_slide_gpu_open(const sg_window_ops *ops, const sg_slide_tiles *tiles, const sg_slide_axis *rows,
                            const sg_slide_axis *cols, const sg_window_norm *norm, sg_slide_gpu **out);

/* Grid rows [r0, r1) as float32 planes (channel c's rows at dst +
 * c * channel_stride, rows cols->n apart), enqueued on stream; the
 * calls of a job use one stream. */
sg_status sg_slide_gpu_rows(sg_slide_gpu *g, int64_t r0, int64_t r1, float *dst, int64_t channel_stride,
                            sg_backend_stream *stream);

/* Tiles decoded so far, and by which decoder (jpeg_engine's words). */
int64_t sg_slide_gpu_tiles_decoded(const sg_slide_gpu *g);
const char *sg_slide_gpu_engine(const sg_slide_gpu *g);

/* Waits for its work on the device and frees it; NULL is fine. */
void sg_slide_gpu_close(sg_slide_gpu *g);

#endif
