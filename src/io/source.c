/* Region sources (source.h): opening by the file's first bytes, the checks
 * every read_region shares, and the whole-level convenience. */
#include "io/source.h"

#include "core/mem.h"
#include "io/image.h"

#include <stdlib.h>
#include <string.h>

sg_status sg_source_open(const char *path, sg_source **out)
{
    *out = NULL;
    sg_source *s = sg_calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", path);
    }
    sg_status st = sg_image_is_image_file(path) ? sg_source_open_image(s) : sg_source_open_npy(s);
    if (st != SEGRT_OK) {
        sg_source_close(s);
        return st;
    }
    *out = s;
    return SEGRT_OK;
}

sg_status sg_source_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst)
{
    const sg_source_info *in = &s->info;
    if (level < 0 || level >= in->n_levels)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: level %d, the file has %d", s->path, (int)level,
                        (int)in->n_levels);
    for (int a = 0; a < 3; a++) {
        int64_t b = box->start[a], n = box->size[a];
        if (b < 0 || n <= 0 || n > in->dims[level][a] || b > in->dims[level][a] - n)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: region %lld+%lld along axis %d is outside level "
                            "%d's %lld pixels",
                            s->path, (long long)b, (long long)n, a, (int)level, (long long)in->dims[level][a]);
    }
    return s->ops->read_region(s, level, box, dst);
}

sg_status sg_source_read_all(sg_source *s, int32_t level, sg_tensor *out)
{
    memset(out, 0, sizeof *out);
    const sg_source_info *in = &s->info;
    if (level < 0 || level >= in->n_levels)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: level %d, the file has %d", s->path, (int)level,
                        (int)in->n_levels);
    sg_box box = {{0, 0, 0}, {in->dims[level][0], in->dims[level][1], in->dims[level][2]}};
    out->dtype = in->dtype;
    out->dims[out->rank++] = 1;
    out->dims[out->rank++] = in->channels;
    if (in->n_dims == 3)
        out->dims[out->rank++] = box.size[0];
    out->dims[out->rank++] = box.size[1];
    out->dims[out->rank++] = box.size[2];
    /* The dims were checked against the format's cap at open. */
    if (!(out->data = sg_malloc(sg_tensor_bytes(out))))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", s->path, sg_tensor_bytes(out));
    sg_status st = s->ops->read_region(s, level, &box, out->data);
    if (st != SEGRT_OK) {
        free(out->data);
        out->data = NULL;
    }
    return st;
}

void sg_source_close(sg_source *s)
{
    if (!s)
        return;
    if (s->ops && s->ops->close)
        s->ops->close(s);
    else
        free(s->state);
    free(s->path);
    free(s);
}
