/* Region sources (source.h): opening by the file's first bytes, the checks
 * every read_region shares, and the whole-level convenience. */
#include "io/source.h"

#include "core/file.h"
#include "core/mem.h"
#include "io/image.h"
#include "io/slide.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void sg_geometry_identity(sg_geometry *g)
{
    memset(g, 0, sizeof *g);
    for (int a = 0; a < 3; a++)
        g->direction[a][a] = 1;
}

/* The opener the file's first bytes call for (a folder: a DICOM series). */
static sg_status open_by_head(sg_source *s)
{
    struct stat sb;
    if (stat(s->path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return sg_source_open_dicom(s, NULL, 0);
    int fd;
    SG_TRY(sg_open_input(s->path, &fd));
    uint8_t head[352];
    ssize_t n = 0, got = 0;
    while (n < (ssize_t)sizeof head && (got = read(fd, head + n, sizeof head - (size_t)n)) > 0)
        n += got;
    int err = errno;
    close(fd);
    if (n < 0 || got < 0)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read: %s", s->path, strerror(err));
    sg_image_format picture = sg_image_format_of_bytes(head, (size_t)n);
    if (sg_dicom_head(head, (size_t)n)) {
        /* DICOM's preamble may hold a picture's header (a TIFF's, in
         * pydicom's own test files): DICOM first; where that fails and the
         * picture reads, the picture, as the whole-image readers take it. */
        sg_status st = sg_source_open_dicom(s, NULL, 0);
        if (st == SEGRT_OK || picture == SG_IMAGE_UNKNOWN)
            return st;
        char dicom_err[1024];
        snprintf(dicom_err, sizeof dicom_err, "%s", sg_last_error());
        if (s->ops && s->ops->close) /* what the DICOM opener left, as sg_source_close frees it */
            s->ops->close(s);
        else
            free(s->state);
        s->ops = NULL;
        s->state = NULL;
        s->notice = NULL;
        memset(&s->info, 0, sizeof s->info);
        st = picture == SG_IMAGE_TIFF ? sg_source_open_tiff(s) : sg_source_open_image(s);
        return st == SEGRT_OK ? st : sg_error(SEGRT_ERROR_INVALID_MODEL, "%s", dicom_err);
    }
    if (sg_nifti_head(head, (size_t)n))
        return sg_source_open_nifti(s);
    /* Slides OpenSlide knows by vendor (an Aperio SVS is a TIFF, a MIRAX
     * .mrxs or Hamamatsu .vms is not a picture at all) go to it; a generic
     * tiled TIFF stays with the TIFF source, which reads its levels. */
    if (sg_slide_detect(s->path))
        return sg_source_open_slide_in(s);
    switch (picture) {
    case SG_IMAGE_TIFF:
        return sg_source_open_tiff(s);
    case SG_IMAGE_PNG:
    case SG_IMAGE_JPEG:
        return sg_source_open_image(s);
    case SG_IMAGE_UNKNOWN:
        break;
    }
    return sg_source_open_npy(s);
}

sg_status sg_source_open(const char *path, sg_source **out)
{
    return sg_source_open_max(path, UINT64_MAX, out);
}

sg_status sg_source_open_max(const char *path, uint64_t max_bytes, sg_source **out)
{
    sg_source_options o = {max_bytes, NULL, false};
    return sg_source_open_with(path, &o, out);
}

/* A source for path with o's settings: a DICOM series of paths where
 * given, else the slide opener where slide, else by the file's head. */
static sg_status open_source(const char *path, const sg_source_options *o, const char *const *paths, size_t n,
                             bool slide, sg_source **out)
{
    *out = NULL;
    sg_source *s = sg_calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory opening the file", path);
    }
    uint64_t max_bytes = o && o->max_bytes ? o->max_bytes : UINT64_MAX;
    s->max_bytes = max_bytes;
    s->series_uid = o ? o->series_uid : NULL;
    s->allow_uneven = o && o->allow_uneven;
    sg_geometry_identity(&s->info.geometry);
    sg_status st = paths ? sg_source_open_dicom(s, paths, n) : slide ? sg_source_open_slide_in(s) : open_by_head(s);
    s->series_uid = NULL; /* the caller's string: the opener has used it */
    if (st == SEGRT_OK && s->max_all_bytes > max_bytes)
        s->max_all_bytes = max_bytes;
    if (st != SEGRT_OK) {
        sg_source_close(s);
        return st;
    }
    /* Formats without their own downsample: the exact ratio of widths. */
    for (int32_t l = 0; l < s->info.n_levels; l++)
        if (s->info.downsample[l] == 0)
            s->info.downsample[l] = l == 0 ? 1 : (double)s->info.dims[0][2] / (double)s->info.dims[l][2];
    *out = s;
    return SEGRT_OK;
}

sg_status sg_source_open_with(const char *path, const sg_source_options *o, sg_source **out)
{
    return open_source(path, o, NULL, 0, false, out);
}

sg_status sg_source_open_slide(const char *path, const sg_source_options *o, sg_source **out)
{
    return open_source(path, o, NULL, 0, true, out);
}

sg_status sg_source_open_files(const char *const *paths, size_t n, const sg_source_options *o, sg_source **out)
{
    *out = NULL;
    if (!paths || n == 0 || !paths[0])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a DICOM series needs at least one file");
    return open_source(paths[0], o, paths, n, false, out);
}

const char *sg_source_notice(const sg_source *s)
{
    return s ? s->notice : NULL;
}

bool sg_dicom_head(const uint8_t *head, size_t n)
{
    return n >= 132 && memcmp(head + 128, "DICM", 4) == 0;
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
    /* Each dim is below 2^48 and the bytes of a level were checked at
     * open against the format's own cap, so this does not wrap. */
    size_t bytes = sg_tensor_bytes(out);
    if ((uint64_t)bytes > s->max_all_bytes) {
        char dims[256];
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: level %d (%s of %s) is %zu bytes, more than the %llu a whole read takes; read it by "
                        "regions",
                        s->path, (int)level, sg_dims_format(out->dims, out->rank, dims, sizeof dims),
                        segrt_dtype_name(out->dtype), bytes, (unsigned long long)s->max_all_bytes);
    }
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
