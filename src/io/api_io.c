/* The public file API for arrays and images (segrt.h, "Arrays and images
 * in files") over io/npy.h and io/image.h. */
#include "core/api_file.h"
#include "io/api_volume.h"
#include "io/image.h"
#include "io/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void segrt_tensor_free(segrt_tensor *t)
{
    if (!t || !t->data)
        return;
    if (t->memory == SEGRT_MEMORY_DEVICE)
        segrt_device_free(t->data);
    else
        free(t->data);
    t->data = NULL;
}

static segrt_file_format public_format(sg_image_format f)
{
    switch (f) {
    case SG_IMAGE_PNG:
        return SEGRT_FILE_PNG;
    case SG_IMAGE_JPEG:
        return SEGRT_FILE_JPEG;
    case SG_IMAGE_TIFF:
        return SEGRT_FILE_TIFF;
    default:
        return SEGRT_FILE_UNKNOWN;
    }
}

segrt_file_format segrt_file_format_of_name(const char *path)
{
    if (!path)
        return SEGRT_FILE_UNKNOWN;
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (dot && strcasecmp(dot, ".npy") == 0)
        return SEGRT_FILE_NPY;
    if (dot && (strcasecmp(dot, ".nii") == 0 ||
                (strcasecmp(dot, ".gz") == 0 && dot - path >= 4 && strncasecmp(dot - 4, ".nii", 4) == 0)))
        return SEGRT_FILE_NIFTI;
    if (dot && strcasecmp(dot, ".dcm") == 0)
        return SEGRT_FILE_DICOM;
    return public_format(sg_image_format_of_name(path));
}

segrt_file_format segrt_file_format_of_file(const char *path)
{
    if (!path)
        return SEGRT_FILE_UNKNOWN;
    segrt_file_format vf;
    if (sg_api_is_volume(path, &vf))
        return vf;
    /* The thread's error message is left as it was. */
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", sg_last_error());
    uint8_t head[8];
    ssize_t got = -1;
    int fd;
    if (sg_open_input(path, &fd) == SEGRT_OK) {
        got = read(fd, head, sizeof head);
        close(fd);
    }
    sg_error(SEGRT_OK, "%s", saved);
    if (got <= 0)
        return SEGRT_FILE_UNKNOWN;
    if (got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0)
        return SEGRT_FILE_NPY;
    return public_format(sg_image_format_of_bytes(head, (size_t)got));
}

static void from_view(const sg_tensor *v, segrt_tensor *out)
{
    memset(out, 0, sizeof *out);
    out->dtype = v->dtype;
    out->rank = v->rank;
    memcpy(out->dims, v->dims, sizeof out->dims);
    out->data = v->data;
    out->memory = SEGRT_MEMORY_HOST;
}

/* A host tensor as the view the writers read. */
static sg_status to_view(const segrt_tensor *t, const char *fn, sg_tensor *v)
{
    if (t->memory != SEGRT_MEMORY_HOST)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the tensor is in device memory; write a host copy", fn);
    if (t->rank < 0 || t->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a tensor of rank %d (0 to %d)", fn, t->rank, SEGRT_MAX_RANK);
    if (!t->data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the tensor has no data", fn);
    memset(v, 0, sizeof *v);
    v->dtype = t->dtype;
    v->rank = t->rank;
    memcpy(v->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    v->data = t->data;
    return SEGRT_OK;
}

segrt_status segrt_array_probe(const char *path, segrt_tensor *out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_array_probe: path and out must not be NULL");
    sg_tensor v;
    memset(&v, 0, sizeof v);
    SG_TRY(sg_npy_probe(path, &v));
    v.data = NULL;
    from_view(&v, out);
    return SEGRT_OK;
}

segrt_status segrt_array_load(const char *path, segrt_tensor *out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_array_load: path and out must not be NULL");
    sg_tensor v;
    memset(&v, 0, sizeof v);
    SG_TRY(sg_npy_read(path, &v));
    from_view(&v, out);
    return SEGRT_OK;
}

segrt_status segrt_array_write(segrt_output *o, const segrt_tensor *t)
{
    if (!o || !t)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_array_write: the output and tensor must not be NULL");
    sg_tensor v;
    memset(&v, 0, sizeof v);
    SG_TRY(to_view(t, "segrt_array_write", &v));
    return sg_npy_write_to(sg_output_of(o), &v);
}

segrt_status segrt_array_save(const char *path, const segrt_tensor *t)
{
    if (!path || !t)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_array_save: path and tensor must not be NULL");
    sg_tensor v;
    memset(&v, 0, sizeof v);
    SG_TRY(to_view(t, "segrt_array_save", &v));
    return sg_npy_write(path, &v);
}

static void public_info(const sg_image_info *i, segrt_image_info *out)
{
    memset(out, 0, sizeof *out);
    out->format = public_format(i->format);
    out->width = i->width;
    out->height = i->height;
    out->depth = i->depth;
    out->channels = i->channels;
    out->bits = i->bits;
    out->pixel_bytes = i->pixel_bytes;
    out->scratch_bytes = i->scratch_bytes;
    out->dtype = i->bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    /* Pictures state no position (TIFF's resolution is a source's spacing,
     * not read here): the identity defaults. */
    for (int a = 0; a < 3; a++) {
        out->geometry.spacing[a] = 1;
        out->geometry.direction[a][a] = 1;
    }
}

segrt_status segrt_image_probe(const char *path, segrt_image_info *out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_image_probe: path and out must not be NULL");
    segrt_file_format vf;
    if (sg_api_is_volume(path, &vf))
        return sg_api_volume_probe(path, out);
    sg_image_info info;
    SG_TRY(sg_image_probe(path, &info));
    public_info(&info, out);
    return SEGRT_OK;
}

segrt_status segrt_image_load(const char *path, segrt_tensor *out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_image_load: path and out must not be NULL");
    segrt_file_format vf;
    if (sg_api_is_volume(path, &vf))
        return sg_api_volume_load(path, out);
    sg_image img;
    SG_TRY(sg_image_read(path, &img));
    /* The pixels change hands: depth x height x width x channels already. */
    memset(out, 0, sizeof *out);
    out->dtype = img.bits == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    if (img.depth > 1)
        out->dims[out->rank++] = img.depth;
    out->dims[out->rank++] = img.height;
    out->dims[out->rank++] = img.width;
    out->dims[out->rank++] = img.channels;
    out->data = img.pixels;
    out->memory = SEGRT_MEMORY_HOST;
    return SEGRT_OK;
}

segrt_status segrt_image_save(const char *path, const segrt_tensor *pixels)
{
    if (!path || !pixels)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_image_save: path and pixels must not be NULL");
    sg_tensor v;
    memset(&v, 0, sizeof v);
    SG_TRY(to_view(pixels, "segrt_image_save", &v));
    if (v.dtype != SEGRT_DTYPE_UINT8 && v.dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: pixels are %s; an image takes uint8 or uint16", path,
                        segrt_dtype_name(v.dtype));
    int64_t depth = 1, h, w, c = 1;
    if (v.rank == 2) {
        h = v.dims[0], w = v.dims[1];
    } else if (v.rank == 3) {
        h = v.dims[0], w = v.dims[1], c = v.dims[2];
    } else if (v.rank == 4) {
        depth = v.dims[0], h = v.dims[1], w = v.dims[2], c = v.dims[3];
    } else {
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: pixels of rank %d; an image takes [height, width[, channels]] or [depth, height, width, "
                        "channels]",
                        path, v.rank);
    }
    if (c < 1 || c > 4 || h < 1 || w < 1 || depth < 1 || h > INT32_MAX || w > INT32_MAX || depth > INT32_MAX)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: pixels of %lld x %lld x %lld x %lld; an image has 1 to 4 channels and sides of 1 to "
                        "2^31 - 1",
                        path, (long long)depth, (long long)h, (long long)w, (long long)c);
    sg_image img = {(int32_t)w, (int32_t)h, (int32_t)depth, (int32_t)c, v.dtype == SEGRT_DTYPE_UINT16 ? 16 : 8, v.data};
    return sg_image_write(path, &img);
}
