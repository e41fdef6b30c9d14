/* NPY files as region sources: the file is mapped, and a region copies
 * only its rows, so an array larger than memory can be read by parts. The
 * array is 1 x C x H x W or 1 x C x D x H x W (the window job's image), or
 * H x W (one channel). */
#include "core/file.h"
#include "io/npy.h"
#include "io/source.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* As sg_npy_read's cap. */
#define NPY_SOURCE_MAX_BYTES ((uint64_t)64 << 30)

typedef struct npy_state {
    sg_mapped_file map;
    size_t data_at;
} npy_state;

static sg_status npy_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    (void)level;
    const npy_state *st = s->state;
    const sg_source_info *in = &s->info;
    size_t es = segrt_dtype_size(in->dtype);
    size_t row = (size_t)box->size[2] * es;
    uint8_t *o = dst;
    for (int64_t c = 0; c < in->channels; c++)
        for (int64_t z = 0; z < box->size[0]; z++)
            for (int64_t y = 0; y < box->size[1]; y++) {
                int64_t at =
                    ((c * in->dims[0][0] + box->start[0] + z) * in->dims[0][1] + box->start[1] + y) * in->dims[0][2] +
                    box->start[2];
                memcpy(o, st->map.data + st->data_at + (size_t)at * es, row);
                if (in->dtype == SEGRT_DTYPE_BOOL) /* numpy's bools: any byte but 0 is 1 */
                    for (size_t i = 0; i < row; i++)
                        o[i] = o[i] != 0;
                o += row;
            }
    return SEGRT_OK;
}

static void npy_close(sg_source *s)
{
    npy_state *st = s->state;
    if (st)
        sg_unmap_file(&st->map);
    free(st);
}

static const sg_source_ops npy_ops = {
    .read_region = npy_read_region,
    .close = npy_close,
};

sg_status sg_source_open_npy(sg_source *s)
{
    npy_state *st = calloc(1, sizeof *st);
    if (!st)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", s->path);
    s->ops = &npy_ops;
    s->state = st;
    s->max_all_bytes = NPY_SOURCE_MAX_BYTES;
    SG_TRY(sg_map_file(s->path, NPY_SOURCE_MAX_BYTES + 65536 + 12, "the NPY limit", &st->map));
    sg_tensor t;
    SG_TRY(sg_npy_parse_start(st->map.data, st->map.size, st->map.size, s->path, &t, &st->data_at));
    sg_source_info *in = &s->info;
    in->format = "npy";
    in->dtype = t.dtype;
    in->n_levels = 1;
    char dims[256];
    if (t.rank == 2) {
        in->n_dims = 2;
        in->channels = 1;
        in->dims[0][0] = 1, in->dims[0][1] = t.dims[0], in->dims[0][2] = t.dims[1];
    } else if ((t.rank == 4 || t.rank == 5) && t.dims[0] == 1 && t.dims[1] <= INT32_MAX) {
        in->n_dims = t.rank - 2;
        in->channels = (int32_t)t.dims[1];
        in->dims[0][0] = t.rank == 5 ? t.dims[2] : 1;
        in->dims[0][1] = t.dims[t.rank - 2], in->dims[0][2] = t.dims[t.rank - 1];
    } else {
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: an array of %s is not an image (1 x C x H x W, 1 x C "
                        "x D x H x W or H x W)",
                        s->path, sg_dims_format(t.dims, t.rank, dims, sizeof dims));
    }
    for (int a = 0; a < 3; a++)
        if (in->dims[0][a] <= 0 || in->channels <= 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: an image of %s has no pixels", s->path,
                            sg_dims_format(t.dims, t.rank, dims, sizeof dims));
    /* Rows are stored together; nothing else is. */
    in->tile[0] = 1, in->tile[1] = 1, in->tile[2] = in->dims[0][2];
    return SEGRT_OK;
}
