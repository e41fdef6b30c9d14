/* PNG and JPEG files as region sources, forward-streaming (the rule is in
 * source.h). The file is mapped and probed at open (sg_image_probe_memory,
 * with all its checks); the first region starts a decoder (libpng row by
 * row, libjpeg scanline by scanline) over the same bytes, and each region
 * decodes the rows it needs that are not held yet. The held rows are a
 * window: from the last region's first row to the last row decoded, kept
 * interleaved as the decoders give them. An interlaced PNG is decoded
 * whole once (sg_image_read_memory's image) and regions copy from it. */
#include "core/file.h"
#include "core/mem.h"
#include "io/image.h"
#include "io/source.h"

#include <stdlib.h>
#include <string.h>

/* As image.c's cap on the PNG and JPEG files it reads. */
#define IMAGE_SOURCE_MAX_FILE_BYTES (SG_IMAGE_MAX_BYTES + ((uint64_t)1 << 30))

typedef struct image_state {
    sg_mapped_file map;
    sg_image_info info; /* the probe's */
    size_t row;         /* bytes of an interleaved row */
    sg_png_rows *png;   /* the decoder, NULL until the first read and after a failure */
    sg_jpeg_rows *jpeg;
    uint8_t *win; /* rows win_y0 .. win_y0 + win_n - 1; the decoder gives row win_y0 + win_n next */
    int64_t win_y0, win_n, win_cap;
    sg_image whole; /* an interlaced PNG, once decoded */
    bool interlaced;
} image_state;

static void stop_decoder(image_state *st)
{
    sg_png_rows_close(st->png);
    sg_jpeg_rows_close(st->jpeg);
    st->png = NULL;
    st->jpeg = NULL;
    st->win_y0 = st->win_n = 0;
}

/* A decoder from the top of the file; for an interlaced PNG, the whole
 * image instead. */
static sg_status start_decoder(sg_source *s, image_state *st)
{
    stop_decoder(st);
    if (st->info.format == SG_IMAGE_JPEG)
        return sg_jpeg_rows_open(st->map.data, st->map.size, s->path, &st->info, &st->jpeg);
    SG_TRY(sg_png_rows_open(st->map.data, st->map.size, s->path, &st->info, &st->png, &st->interlaced));
    if (st->interlaced && !st->whole.pixels)
        return sg_image_read_memory_max(st->map.data, st->map.size, s->path, s->max_bytes, &st->whole);
    return SEGRT_OK;
}

static sg_status next_row(sg_source *s, image_state *st, uint8_t *row)
{
    sg_status e = st->png ? sg_png_rows_next(st->png, row) : sg_jpeg_rows_next(st->jpeg, row);
    if (e != SEGRT_OK)
        stop_decoder(st); /* a decoder that failed cannot go on; the next read starts again */
    (void)s;
    return e;
}

/* Makes rows y0 .. y1 - 1 the window's first rows, decoding forward (and
 * from the top when y0 is above the window). */
static sg_status fill_window(sg_source *s, image_state *st, int64_t y0, int64_t y1)
{
    if (st->interlaced && st->whole.pixels)
        return SEGRT_OK;
    if ((!st->png && !st->jpeg) || y0 < st->win_y0)
        SG_TRY(start_decoder(s, st));
    if (st->interlaced)
        return SEGRT_OK;
    /* Drop the rows above y0; rows between the window and y0 are decoded
     * and dropped one at a time. */
    int64_t drop = y0 - st->win_y0 < st->win_n ? y0 - st->win_y0 : st->win_n;
    if (drop > 0) {
        memmove(st->win, st->win + (size_t)drop * st->row, (size_t)(st->win_n - drop) * st->row);
        st->win_n -= drop;
        st->win_y0 += drop;
    }
    int64_t need = y1 - y0;
    if (need > st->win_cap) {
        uint8_t *w = realloc(st->win, (size_t)need * st->row);
        if (!w)
            return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", s->path);
        st->win = w;
        st->win_cap = need;
    }
    while (st->win_n == 0 && st->win_y0 < y0) {
        SG_TRY(next_row(s, st, st->win));
        st->win_y0++;
    }
    while (st->win_y0 + st->win_n < y1) {
        SG_TRY(next_row(s, st, st->win + (size_t)st->win_n * st->row));
        st->win_n++;
    }
    return SEGRT_OK;
}

static sg_status image_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    (void)level;
    image_state *st = s->state;
    int64_t y0 = box->start[1], y1 = y0 + box->size[1];
    SG_TRY(fill_window(s, st, y0, y1));
    size_t es = (size_t)st->info.bits / 8, C = (size_t)st->info.channels;
    uint8_t *o = dst;
    /* Interleaved samples (row, column, channel) to planar ones. */
    for (size_t c = 0; c < C; c++)
        for (int64_t y = y0; y < y1; y++) {
            const uint8_t *row = st->interlaced ? (const uint8_t *)st->whole.pixels + (size_t)y * st->row
                                                : st->win + (size_t)(y - st->win_y0) * st->row;
            row += ((size_t)box->start[2] * C + c) * es;
            if (es == 1)
                for (int64_t x = 0; x < box->size[2]; x++)
                    *o++ = row[(size_t)x * C];
            else
                for (int64_t x = 0; x < box->size[2]; x++, o += es)
                    memcpy(o, row + (size_t)x * C * es, es);
        }
    return SEGRT_OK;
}

static void image_close(sg_source *s)
{
    image_state *st = s->state;
    if (!st)
        return;
    stop_decoder(st);
    free(st->win);
    sg_image_free(&st->whole);
    sg_unmap_file(&st->map);
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
    s->max_all_bytes = SG_IMAGE_MAX_BYTES;
    if (s->max_bytes > SG_IMAGE_MAX_BYTES)
        s->max_bytes = SG_IMAGE_MAX_BYTES;
    SG_TRY(sg_map_file(s->path, IMAGE_SOURCE_MAX_FILE_BYTES, "an image file segrt reads (5 GiB)", &st->map));
    if (st->map.size == 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: the file is empty", s->path);
    sg_image_info *info = &st->info;
    SG_TRY(sg_image_probe_memory_max(st->map.data, st->map.size, s->path, s->max_bytes, info));
    if (info->format != SG_IMAGE_PNG && info->format != SG_IMAGE_JPEG)
        return sg_error(SEGRT_ERROR_IO, "%s: the file changed while it was opened", s->path);
    sg_source_info *in = &s->info;
    in->format = info->format == SG_IMAGE_PNG ? "png" : "jpeg";
    in->dtype = info->bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    in->n_dims = 2;
    in->channels = info->channels;
    in->n_levels = 1;
    in->dims[0][0] = 1, in->dims[0][1] = info->height, in->dims[0][2] = info->width;
    st->row = (size_t)info->width * (size_t)info->channels * (size_t)(info->bits / 8);
    /* Rows come one at a time, in order. */
    in->tile[0] = 1, in->tile[1] = 1, in->tile[2] = info->width;
    return SEGRT_OK;
}
