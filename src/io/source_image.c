/* PNG, JPEG and TIFF files as region sources. Open reads the headers
 * (sg_image_probe, with all its checks); the first region decodes the
 * whole image once and later regions copy from it. PNG and JPEG cannot be
 * read by parts; TIFF strips and tiles can, and will be read so. */
#include "core/mem.h"
#include "io/image.h"
#include "io/source.h"

#include <stdlib.h>
#include <string.h>

typedef struct image_state {
    sg_image img; /* pixels NULL until the first read */
} image_state;

static sg_status image_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    (void)level;
    image_state *st = s->state;
    if (!st->img.pixels) {
        sg_image img;
        SG_TRY(sg_image_read(s->path, &img));
        /* The file changed since it was opened. */
        if (img.width != s->info.dims[0][2] || img.height != s->info.dims[0][1] || img.depth != s->info.dims[0][0] ||
            img.channels != s->info.channels) {
            sg_image_free(&img);
            return sg_error(SEGRT_ERROR_IO, "%s: the file changed while it was open", s->path);
        }
        st->img = img;
    }
    const sg_image *img = &st->img;
    size_t es = (size_t)img->bits / 8, C = (size_t)img->channels;
    uint8_t *o = dst;
    /* Interleaved samples (page, row, column, channel) to planar ones. */
    for (size_t c = 0; c < C; c++)
        for (int64_t z = 0; z < box->size[0]; z++)
            for (int64_t y = 0; y < box->size[1]; y++) {
                const uint8_t *row = (const uint8_t *)img->pixels +
                                     (size_t)(box->start[0] + z) * sg_image_page_bytes(img) +
                                     (size_t)(box->start[1] + y) * sg_image_row_bytes(img);
                for (int64_t x = 0; x < box->size[2]; x++, o += es)
                    memcpy(o, row + ((size_t)(box->start[2] + x) * C + c) * es, es);
            }
    return SEGRT_OK;
}

static void image_close(sg_source *s)
{
    image_state *st = s->state;
    if (st)
        sg_image_free(&st->img);
    free(st);
}

static const sg_source_ops image_ops = {
    .read_region = image_read_region,
    .close = image_close,
};

sg_status sg_source_open_image(sg_source *s)
{
    image_state *st = sg_calloc(1, sizeof *st);
    if (!st)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    s->ops = &image_ops;
    s->state = st;
    sg_image_info info;
    SG_TRY(sg_image_probe(s->path, &info));
    sg_source_info *in = &s->info;
    in->format = info.format == SG_IMAGE_PNG ? "png" : info.format == SG_IMAGE_JPEG ? "jpeg" : "tiff";
    in->dtype = info.bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    in->n_dims = info.depth > 1 ? 3 : 2;
    in->channels = info.channels;
    in->n_levels = 1;
    in->dims[0][0] = info.depth, in->dims[0][1] = info.height, in->dims[0][2] = info.width;
    /* Decoded whole: any box costs the same. */
    in->tile[0] = info.depth, in->tile[1] = info.height, in->tile[2] = info.width;
    return SEGRT_OK;
}
