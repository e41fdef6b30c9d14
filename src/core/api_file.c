/* The public output-file API (segrt.h, "Output files") over core/file.h:
 * a segrt_output is an sg_output under its public name (api_file.h). */
#include "core/api_file.h"

#include <string.h>

segrt_status segrt_output_check(const char *path)
{
    if (!path)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_output_check: path is NULL");
    return sg_output_check(path);
}

segrt_status segrt_output_open(const char *path, segrt_output **out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_output_open: path and out must not be NULL");
    sg_output *o = NULL;
    SG_TRY(sg_output_open(path, &o));
    *out = sg_output_public(o);
    return SEGRT_OK;
}

const char *segrt_output_path(const segrt_output *o)
{
    return o ? sg_output_path(sg_output_of((segrt_output *)o)) : NULL;
}

segrt_status segrt_output_commit(segrt_output *o)
{
    if (!o)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_output_commit: the output is NULL");
    return sg_output_commit(sg_output_of(o));
}

void segrt_output_discard(segrt_output *o)
{
    sg_output_discard(sg_output_of(o));
}

segrt_status segrt_file_identity(const char *path, segrt_file_id *out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_file_identity: path and out must not be NULL");
    sg_file_id id;
    SG_TRY(sg_file_identity(path, &id));
    memset(out, 0, sizeof *out);
    out->exists = id.exists;
    out->device = id.dev;
    out->inode = id.ino;
    _Static_assert(sizeof out->name == sizeof id.name, "names of the same size");
    memcpy(out->name, id.name, sizeof out->name);
    return SEGRT_OK;
}

int segrt_file_id_equal(const segrt_file_id *a, const segrt_file_id *b)
{
    if (!a || !b)
        return 0;
    sg_file_id x = {a->exists != 0, a->device, a->inode, {0}}, y = {b->exists != 0, b->device, b->inode, {0}};
    memcpy(x.name, a->name, sizeof x.name);
    memcpy(y.name, b->name, sizeof y.name);
    x.name[sizeof x.name - 1] = y.name[sizeof y.name - 1] = '\0';
    return sg_file_id_equal(&x, &y);
}
