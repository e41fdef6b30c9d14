/* The public volume API (segrt.h, "Volumes"): region sources with their
 * geometry, DICOM series listing, and the NIfTI writer; and the volume
 * side of segrt_image_probe and segrt_image_load. */
#include "io/api_volume.h"

#include "core/file.h"
#include "core/mem.h"
#include "io/dicom_seg.h"
#include "io/nifti_internal.h"
#include "io/sink.h"
#include "io/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct segrt_volume {
    sg_source *src;
};

bool sg_api_is_volume(const char *path, segrt_file_format *format)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return false;
    if (S_ISDIR(sb.st_mode)) {
        *format = SEGRT_FILE_DICOM;
        return true;
    }
    if (!S_ISREG(sb.st_mode))
        return false;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint8_t head[352];
    ssize_t n = 0, got = 0;
    while (n < (ssize_t)sizeof head && (got = read(fd, head + n, sizeof head - (size_t)n)) > 0)
        n += got;
    close(fd);
    if (got < 0)
        return false;
    if (sg_dicom_head(head, (size_t)n)) {
        *format = SEGRT_FILE_DICOM;
        return true;
    }
    if (sg_nifti_head(head, (size_t)n)) {
        *format = SEGRT_FILE_NIFTI;
        return true;
    }
    return false;
}

static segrt_file_format format_of(const sg_source_info *in)
{
    if (strcmp(in->format, "nifti") == 0)
        return SEGRT_FILE_NIFTI;
    if (strcmp(in->format, "dicom") == 0)
        return SEGRT_FILE_DICOM;
    if (strcmp(in->format, "png") == 0)
        return SEGRT_FILE_PNG;
    if (strcmp(in->format, "jpeg") == 0)
        return SEGRT_FILE_JPEG;
    if (strcmp(in->format, "tiff") == 0)
        return SEGRT_FILE_TIFF;
    if (strcmp(in->format, "npy") == 0)
        return SEGRT_FILE_NPY;
    return SEGRT_FILE_UNKNOWN;
}

void sg_api_geometry(const sg_source_info *in, segrt_geometry *g)
{
    memset(g, 0, sizeof *g);
    g->known = in->geometry.known;
    for (int a = 0; a < 3; a++) {
        g->spacing[a] = in->spacing[a] > 0 ? in->spacing[a] : 1.0;
        g->origin[a] = in->geometry.origin[a];
        for (int c = 0; c < 3; c++)
            g->direction[a][c] = in->geometry.direction[a][c];
    }
    g->qform_code = in->geometry.qform_code;
    g->sform_code = in->geometry.sform_code;
}

static void info_of(const sg_source *s, segrt_image_info *out)
{
    const sg_source_info *in = &s->info;
    memset(out, 0, sizeof *out);
    out->format = format_of(in);
    out->depth = (int32_t)in->dims[0][0];
    out->height = (int32_t)in->dims[0][1];
    out->width = (int32_t)in->dims[0][2];
    out->channels = in->channels;
    out->dtype = in->dtype;
    out->bits = (int32_t)segrt_dtype_size(in->dtype) * 8;
    out->pixel_bytes = (uint64_t)in->channels * (uint64_t)in->dims[0][0] * (uint64_t)in->dims[0][1] *
                       (uint64_t)in->dims[0][2] * segrt_dtype_size(in->dtype);
    /* A load reads the planar volume, then interleaves channels into a
     * second buffer where there are several. */
    out->scratch_bytes = in->channels > 1 ? out->pixel_bytes : 0;
    sg_api_geometry(in, &out->geometry);
}

static sg_status check_dims(const sg_source *s)
{
    const sg_source_info *in = &s->info;
    for (int a = 0; a < 3; a++)
        if (in->dims[0][a] > INT32_MAX)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %lld voxels along an axis; segrt_image_info holds 2^31 - 1",
                            s->path, (long long)in->dims[0][a]);
    return SEGRT_OK;
}

segrt_status segrt_volume_open(const char *path, const char *series_uid, segrt_volume **out)
{
    return segrt_volume_open_with(path, series_uid, 0, out);
}

segrt_status segrt_volume_open_with(const char *path, const char *series_uid, int32_t allow_uneven, segrt_volume **out)
{
    if (!path || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_volume_open: path and out must not be NULL");
    segrt_volume *v = sg_calloc(1, sizeof *v);
    if (!v)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
    sg_source_options o = {0, series_uid, allow_uneven != 0};
    sg_status st = sg_source_open_with(path, &o, &v->src);
    if (st == SEGRT_OK)
        st = check_dims(v->src);
    if (st != SEGRT_OK) {
        segrt_volume_close(v);
        return st;
    }
    *out = v;
    return SEGRT_OK;
}

segrt_status segrt_volume_open_files(const char *const *paths, size_t n, const char *series_uid, segrt_volume **out)
{
    if (!paths || !out || n == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_volume_open_files: paths (n >= 1) and out must be given");
    segrt_volume *v = sg_calloc(1, sizeof *v);
    if (!v)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory opening a DICOM series");
    sg_source_options o = {0, series_uid, false};
    sg_status st = sg_source_open_files(paths, n, &o, &v->src);
    if (st == SEGRT_OK)
        st = check_dims(v->src);
    if (st != SEGRT_OK) {
        segrt_volume_close(v);
        return st;
    }
    *out = v;
    return SEGRT_OK;
}

segrt_status segrt_volume_info(const segrt_volume *v, segrt_image_info *out)
{
    if (!v || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_volume_info: the volume and out must not be NULL");
    info_of(v->src, out);
    return SEGRT_OK;
}

segrt_status segrt_volume_read(segrt_volume *v, const int64_t start[3], const int64_t size[3], void *dst, size_t bytes)
{
    if (!v || !start || !size || !dst)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_volume_read: NULL argument");
    sg_box box;
    for (int a = 0; a < 3; a++) {
        box.start[a] = start[a];
        box.size[a] = size[a];
        if (size[a] <= 0 || size[a] > v->src->info.dims[0][a])
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a box of %lld along axis %d, the volume has %lld",
                            v->src->path, (long long)size[a], a, (long long)v->src->info.dims[0][a]);
    }
    uint64_t need = (uint64_t)v->src->info.channels * (uint64_t)size[0] * (uint64_t)size[1] * (uint64_t)size[2] *
                    segrt_dtype_size(v->src->info.dtype);
    if (need > bytes)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the box takes %llu bytes, dst has %zu", v->src->path,
                        (unsigned long long)need, bytes);
    return sg_source_read_region(v->src, 0, &box, dst);
}

void segrt_volume_close(segrt_volume *v)
{
    if (!v)
        return;
    sg_source_close(v->src);
    free(v);
}

segrt_status segrt_dicom_series_list(const char *const *paths, size_t n, segrt_dicom_series **out, size_t *count)
{
    if (!paths || n == 0 || !out || !count)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_dicom_series_list: paths (n >= 1), out and count must "
                                                      "be given");
    sg_dicom_series_info *list;
    size_t k;
    SG_TRY(sg_dicom_list(paths, n, &list, &k));
    segrt_dicom_series *o = sg_calloc(k ? k : 1, sizeof *o);
    if (!o) {
        free(list);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory listing series");
    }
    for (size_t j = 0; j < k; j++) {
        memcpy(o[j].uid, list[j].uid, sizeof o[j].uid);
        memcpy(o[j].modality, list[j].modality, sizeof o[j].modality);
        memcpy(o[j].description, list[j].description, sizeof o[j].description);
        o[j].slices = list[j].slices;
        o[j].rows = list[j].rows;
        o[j].columns = list[j].cols;
    }
    free(list);
    *out = o;
    *count = k;
    return SEGRT_OK;
}

void segrt_dicom_series_free(segrt_dicom_series *list)
{
    free(list);
}

sg_status sg_api_volume_probe(const char *path, segrt_image_info *out)
{
    sg_source *s;
    SG_TRY(sg_source_open(path, &s));
    sg_status st = check_dims(s);
    if (st == SEGRT_OK)
        info_of(s, out);
    sg_source_close(s);
    return st;
}

sg_status sg_api_volume_load(const char *path, segrt_tensor *out)
{
    sg_source *s;
    SG_TRY(sg_source_open(path, &s));
    sg_tensor t;
    sg_status st = check_dims(s);
    if (st == SEGRT_OK)
        st = sg_source_read_all(s, 0, &t);
    if (st != SEGRT_OK) {
        sg_source_close(s);
        return st;
    }
    const sg_source_info *in = &s->info;
    int64_t C = in->channels, D = in->dims[0][0], H = in->dims[0][1], W = in->dims[0][2];
    size_t es = segrt_dtype_size(in->dtype), voxels = (size_t)(D * H * W);
    void *data = t.data;
    if (C > 1) {
        /* Planar (C, D, H, W) to [D, H, W, C]. */
        uint8_t *il = sg_malloc(voxels * (size_t)C * es);
        if (!il) {
            free(t.data);
            sg_source_close(s);
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        }
        for (int64_t c = 0; c < C; c++)
            for (size_t i = 0; i < voxels; i++)
                memcpy(il + (i * (size_t)C + (size_t)c) * es, (uint8_t *)t.data + ((size_t)c * voxels + i) * es, es);
        free(t.data);
        data = il;
    }
    memset(out, 0, sizeof *out);
    out->dtype = in->dtype;
    if (in->n_dims == 3)
        out->dims[out->rank++] = D;
    out->dims[out->rank++] = H;
    out->dims[out->rank++] = W;
    out->dims[out->rank++] = C;
    out->data = data;
    out->memory = SEGRT_MEMORY_HOST;
    sg_source_close(s);
    return SEGRT_OK;
}

segrt_status segrt_volume_save(const char *path, const segrt_tensor *t, const segrt_geometry *geometry)
{
    if (!path || !t)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_volume_save: path and tensor must not be NULL");
    bool gz;
    if (!sg_nifti_name(path, &gz))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: segrt_volume_save writes NIfTI (.nii or .nii.gz)", path);
    if (t->memory != SEGRT_MEMORY_HOST || !t->data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the tensor must be in host memory, with data", path);
    if (t->rank < 2 || t->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a tensor of rank %d; a volume is [depth, ]height, width",
                        path, (int)t->rank);
    int spatial = 2;
    for (int i = 0; i < t->rank - 3; i++)
        if (t->dims[i] != 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: dim %d is %lld; a volume's dims before depth, height, width must be 1", path, i,
                            (long long)t->dims[i]);
    if (t->rank >= 3)
        spatial = 3;
    sg_sink_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = t->dtype;
    d.channels = 1;
    d.n_dims = spatial;
    d.dims[0] = spatial == 3 ? t->dims[t->rank - 3] : 1;
    d.dims[1] = t->dims[t->rank - 2];
    d.dims[2] = t->dims[t->rank - 1];
    for (int a = 0; a < 3; a++)
        if (d.dims[a] < 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: an empty volume", path);
    if (d.dtype == SEGRT_DTYPE_FLOAT16 || d.dtype == SEGRT_DTYPE_BFLOAT16 || segrt_dtype_size(d.dtype) == 0)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: NIfTI holds no %s samples", path, segrt_dtype_name(d.dtype));
    sg_geometry_identity(&d.geometry);
    if (geometry) {
        for (int a = 0; a < 3; a++) {
            d.spacing[a] = geometry->spacing[a];
            d.geometry.origin[a] = geometry->origin[a];
            for (int c = 0; c < 3; c++)
                d.geometry.direction[a][c] = geometry->direction[a][c];
        }
        d.geometry.known = geometry->known != 0;
        d.geometry.qform_code = geometry->qform_code;
        d.geometry.sform_code = geometry->sform_code;
    }
    sg_sink *sink;
    SG_TRY(sg_sink_open(path, &d, &sink));
    sg_box all = {{0, 0, 0}, {d.dims[0], d.dims[1], d.dims[2]}};
    sg_status st = sg_sink_write(sink, &all, t->data);
    if (st != SEGRT_OK) {
        sg_sink_discard(sink);
        return st;
    }
    return sg_sink_commit(sink);
}

const char *segrt_volume_notice(const segrt_volume *v)
{
    return v ? sg_source_notice(v->src) : NULL;
}

segrt_status segrt_dicom_seg_save(const char *path, const segrt_tensor *labels, const segrt_volume *source,
                                  const char *const *names, size_t n_names)
{
    if (!path || !labels || !source)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_dicom_seg_save: path, labels and source must not be NULL");
    if (!sg_dicom_seg_name(path))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: segrt_dicom_seg_save writes a .dcm file", path);
    if (labels->memory != SEGRT_MEMORY_HOST || !labels->data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the labels must be in host memory, with data", path);
    if (labels->rank < 3 || labels->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: labels of rank %d; a SEG takes [depth, height, width]",
                        path, (int)labels->rank);
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = labels->dtype;
    t.rank = labels->rank;
    memcpy(t.dims, labels->dims, sizeof(int64_t) * (size_t)labels->rank);
    t.data = labels->data;
    sg_output *o;
    SG_TRY(sg_output_open(path, &o));
    sg_status st = sg_dicom_seg_write(o, &t, source->src, names, n_names);
    if (st != SEGRT_OK) {
        sg_output_discard(o);
        return st;
    }
    return sg_output_commit(o);
}
