/* A label map as a DICOM Segmentation (io/dicom_seg.h), encoded by GDCM
 * (dicom_gdcm.cc, sg_dcm_seg_encode) and written whole into an output
 * of core/file.h.
 *
 * What it holds: SOP class Segmentation Storage
 * (1.2.840.10008.5.1.4.1.1.66.4), SegmentationType BINARY (1-bit frames
 * packed one after another); one segment per label value > 0 that occurs,
 * numbered 1, 2, ... in increasing value (the standard wants segment
 * numbers from 1 without gaps, so a value that does not occur takes no
 * number), labelled by the caller's names or "Segment VALUE", described
 * "segrt class VALUE", algorithm AUTOMATIC "segrt", category and type
 * the generic SNOMED "Tissue" (85756007; the model says nothing finer);
 * a frame per (segment, source slice) where the segment has a voxel,
 * segment by segment, slices in order along the normal. Each frame
 * references its source slice (DerivationImageSequence and
 * SourceImageSequence, purpose 121322 DCM, SpatialLocationsPreserved YES)
 * and gives its
 * ImagePositionPatient (the slice's own) and DimensionIndexValues
 * (segment number, the slice's 1-based place in the series); the shared
 * groups give ImageOrientationPatient, PixelSpacing, the source's
 * SliceThickness (the step where it has none) and the step as
 * SpacingBetweenSlices. SegmentsOverlap is NO (one label map). Study, patient and frame of
 * reference are copied from the series (dicom_seg.h); SeriesInstanceUID,
 * SOPInstanceUID and the dimension organisation are new 2.25 UUID UIDs.
 *
 * A series resampled to even spacing (allow_uneven) has labels on its
 * grid, not on its slices. The SEG still describes the series as it is:
 * each source slice takes the labels of the grid slice nearest to it
 * (under half a step away; the same slice exactly where slice and grid
 * agree), so that its frames lie on the slices they reference and a
 * viewer overlays them on the series as acquired; a frame whose labels
 * come from a grid slice off its slice says SpatialLocationsPreserved
 * NO. (Refusing would leave such a series without a SEG at all; frames
 * at the grid's positions would reference no slice.)
 *
 * A label map with no value > 0 is refused: the standard wants at least
 * one segment and one frame (NumberOfFrames and SegmentSequence are type
 * 1), and highdicom's reader takes no SEG without them. */
#include "io/dicom_seg.h"

#include "core/dtype.h"
#include "core/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

bool sg_dicom_seg_name(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcasecmp(path + n - 4, ".dcm") == 0;
}

#ifndef SEGRT_HAVE_DICOM

sg_status sg_dicom_seg_write(sg_output *o, const sg_tensor *labels, const sg_source *src, const char *const *names,
                             size_t n_names)
{
    (void)labels, (void)src, (void)names, (void)n_names;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: DICOM SEG, and segrt was built without DICOM support",
                    sg_output_path(o));
}

#else

/* A new UID under 2.25 (PS3.5 B.2): a random (version 4) UUID as one
 * decimal number. */
static sg_status new_uid(char out[SG_DCM_TEXT], const char *path)
{
    uint8_t b[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)sizeof b)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot read /dev/urandom for a UID: %s", path, strerror(errno));
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    /* The 128-bit number in decimal: repeated division by 10, big-endian bytes. */
    char digits[48];
    int nd = 0;
    bool zero = false;
    while (!zero) {
        unsigned rem = 0;
        zero = true;
        for (int i = 0; i < 16; i++) {
            unsigned cur = rem * 256 + b[i];
            b[i] = (uint8_t)(cur / 10);
            rem = cur % 10;
            if (b[i])
                zero = false;
        }
        digits[nd++] = (char)('0' + rem);
    }
    int at = snprintf(out, SG_DCM_TEXT, "2.25.");
    for (int i = nd - 1; i >= 0; i--)
        out[at++] = digits[i];
    out[at] = '\0';
    return SEGRT_OK;
}

/* Label value i of t (an integer tensor). */
static int64_t label_at(const sg_tensor *t, int64_t i)
{
    return sg_dtype_load_i64(t->dtype, t->data, i);
}

typedef struct seg_build {
    int32_t *frame_segment;
    int64_t *frame_slice;
    uint8_t *pixels;
    int32_t *values; /* segment s + 1's label value */
    char (*labels)[SG_DCM_LONG];
    char (*descriptions)[48];
    const char **label_p, **desc_p;
    int64_t *grid_of; /* source slice -> the grid slice its labels come from */
    uint8_t *moved;   /* source slice -> 1 where that grid slice is not on it */
    uint8_t *frame_moved;
    int32_t *seg_of;  /* label value -> its segment's index */
    uint8_t *present; /* grid slice x segment: whether the segment occurs there */
    int64_t *fidx;    /* segment x source slice: its frame, or -1 */
} seg_build;

static void build_free(seg_build *b)
{
    free(b->frame_segment);
    free(b->frame_slice);
    free(b->pixels);
    free(b->values);
    free(b->labels);
    free(b->descriptions);
    free(b->label_p);
    free(b->desc_p);
    free(b->grid_of);
    free(b->moved);
    free(b->frame_moved);
    free(b->seg_of);
    free(b->present);
    free(b->fidx);
}

static sg_status seg_write(sg_output *o, const sg_tensor *labels, const sg_source *src, const char *const *names,
                           size_t n_names, seg_build *b)
{
    const char *path = sg_output_path(o);
    const sg_dicom_refs *refs = sg_source_dicom_refs(src);
    if (!refs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a DICOM SEG references a DICOM series; the input is not one (write .nii.gz)", path);
    const sg_source_info *in = &src->info;
    if (!in->geometry.known)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: the series has no ImagePositionPatient and ImageOrientationPatient for a SEG's frames",
                        path);
    if (in->channels != 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a SEG of a colour series is not supported", path);
    if (!labels || !labels->data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no labels", path);
    sg_dtype t = labels->dtype;
    if (t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT64 || t == SEGRT_DTYPE_FLOAT16 ||
        t == SEGRT_DTYPE_BFLOAT16 || segrt_dtype_size(t) == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a SEG holds a label map of integers; the labels are %s",
                        path, segrt_dtype_name(t));
    int64_t D = in->dims[0][0], H = in->dims[0][1], W = in->dims[0][2];
    bool fits = labels->rank >= 3;
    for (int32_t i = 0; fits && i < labels->rank - 3; i++)
        fits = labels->dims[i] == 1;
    if (!fits || labels->dims[labels->rank - 3] != D || labels->dims[labels->rank - 2] != H ||
        labels->dims[labels->rank - 1] != W)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: the labels must be one map of the series' %lld x %lld x %lld voxels (depth, height, "
                        "width)",
                        path, (long long)D, (long long)H, (long long)W);
    /* The label values that occur. */
    int64_t plane = H * W, n = D * plane, top = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = label_at(labels, i);
        if (v < 0 || v > 65535)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: label %lld; a SEG's segments are numbered 1 to 65535",
                            path, (long long)v);
        if (v > top)
            top = v;
    }
    if (top == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: the label map has no voxel above 0; a DICOM SEG needs at least one segment (write "
                        ".nii.gz for an empty result)",
                        path);
    uint8_t *seen = sg_calloc((size_t)top + 1, 1);
    if (!seen)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++)
        seen[label_at(labels, i)] = 1;
    int32_t n_seg = 0;
    for (int64_t v = 1; v <= top; v++)
        n_seg += seen[v];
    /* Each source slice's grid slice. */
    int64_t ns = refs->n_slices;
    b->grid_of = sg_calloc((size_t)ns, sizeof *b->grid_of);
    b->moved = sg_calloc((size_t)ns, 1);
    b->values = sg_calloc((size_t)n_seg, sizeof *b->values);
    b->labels = sg_calloc((size_t)n_seg, sizeof *b->labels);
    b->descriptions = sg_calloc((size_t)n_seg, sizeof *b->descriptions);
    b->label_p = sg_calloc((size_t)n_seg, sizeof *b->label_p);
    b->desc_p = sg_calloc((size_t)n_seg, sizeof *b->desc_p);
    if (!b->grid_of || !b->moved || !b->values || !b->labels || !b->descriptions || !b->label_p || !b->desc_p) {
        free(seen);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    const double(*dir)[3] = in->geometry.direction;
    double step = in->spacing[0] > 0 ? in->spacing[0] : 1.0;
    for (int64_t k = 0; k < ns; k++) {
        if (!refs->resampled) {
            b->grid_of[k] = k;
            continue;
        }
        double off = 0;
        for (int a = 0; a < 3; a++)
            off += (refs->slices[k].position[a] - in->geometry.origin[a]) * dir[a][2];
        int64_t g = (int64_t)floor(off / step + 0.5);
        b->grid_of[k] = g < 0 ? 0 : g >= D ? D - 1 : g;
        b->moved[k] = fabs(off - (double)b->grid_of[k] * step) > 1e-3;
    }
    if (!refs->resampled && ns != D) {
        free(seen);
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: %lld slices referenced for %lld", path, (long long)ns,
                        (long long)D);
    }
    int32_t s = 0;
    for (int64_t v = 1; v <= top; v++) {
        if (!seen[v])
            continue;
        b->values[s] = (int32_t)v;
        if ((size_t)v < n_names && names && names[v] && names[v][0])
            snprintf(b->labels[s], sizeof b->labels[s], "%.64s", names[v]);
        else
            snprintf(b->labels[s], sizeof b->labels[s], "Segment %d", (int)v);
        snprintf(b->descriptions[s], sizeof b->descriptions[s], "segrt class %d", (int)v);
        b->label_p[s] = b->labels[s];
        b->desc_p[s] = b->descriptions[s];
        s++;
    }
    free(seen);
    /* Frames: per segment, per source slice whose grid slice holds it,
     * found and filled in one pass over the labels each (a frame's index
     * by segment and slice in fidx), so that many classes cost no more
     * passes. */
    b->seg_of = sg_calloc((size_t)top + 1, sizeof *b->seg_of);
    b->present = sg_calloc((size_t)D * (size_t)n_seg, 1);
    b->fidx = sg_malloc((size_t)ns * (size_t)n_seg * sizeof *b->fidx);
    if (!b->seg_of || !b->present || !b->fidx)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %d segments over %lld slices", path,
                        (int)n_seg, (long long)ns);
    for (int32_t g = 0; g < n_seg; g++)
        b->seg_of[b->values[g]] = g;
    for (int64_t z = 0; z < D; z++)
        for (int64_t i = 0; i < plane; i++) {
            int64_t v = label_at(labels, z * plane + i);
            if (v > 0)
                b->present[z * n_seg + b->seg_of[v]] = 1;
        }
    int64_t n_frames = 0;
    for (int32_t g = 0; g < n_seg; g++)
        for (int64_t k = 0; k < ns; k++)
            b->fidx[g * ns + k] = b->present[b->grid_of[k] * n_seg + g] ? n_frames++ : -1;
    uint64_t bits = (uint64_t)n_frames * (uint64_t)plane, bytes = (bits + 7) / 8;
    bytes += bytes & 1;
    if (bytes > 0xfffffffeu)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: %lld frames of %lld x %lld pixels pass the 4 GiB a DICOM element holds", path,
                        (long long)n_frames, (long long)H, (long long)W);
    b->frame_segment = sg_calloc((size_t)n_frames, sizeof *b->frame_segment);
    b->frame_slice = sg_calloc((size_t)n_frames, sizeof *b->frame_slice);
    b->frame_moved = sg_calloc((size_t)n_frames, 1);
    b->pixels = sg_calloc((size_t)bytes, 1);
    if (!b->frame_segment || !b->frame_slice || !b->frame_moved || !b->pixels)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for %lld frames", path, (long long)n_frames);
    for (int32_t g = 0; g < n_seg; g++)
        for (int64_t k = 0; k < ns; k++) {
            int64_t f = b->fidx[g * ns + k];
            if (f < 0)
                continue;
            b->frame_segment[f] = g + 1;
            b->frame_slice[f] = k;
            b->frame_moved[f] = b->moved[k];
        }
    for (int64_t k = 0; k < ns; k++) {
        int64_t base = b->grid_of[k] * plane;
        for (int64_t i = 0; i < plane; i++) {
            int64_t v = label_at(labels, base + i);
            if (v <= 0)
                continue;
            uint64_t at = (uint64_t)b->fidx[(int64_t)b->seg_of[v] * ns + k] * (uint64_t)plane + (uint64_t)i;
            b->pixels[at >> 3] |= (uint8_t)(1u << (at & 7));
        }
    }
    char series_uid[SG_DCM_TEXT], sop_uid[SG_DCM_TEXT], dim_uid[SG_DCM_TEXT];
    SG_TRY(new_uid(series_uid, path));
    SG_TRY(new_uid(sop_uid, path));
    SG_TRY(new_uid(dim_uid, path));
    char date[16], tm_s[16], software[32];
    time_t now = time(NULL);
    struct tm lt;
    localtime_r(&now, &lt);
    strftime(date, sizeof date, "%Y%m%d", &lt);
    strftime(tm_s, sizeof tm_s, "%H%M%S", &lt);
    snprintf(software, sizeof software, "segrt %d.%d.%d", SEGRT_VERSION_MAJOR, SEGRT_VERSION_MINOR,
             SEGRT_VERSION_PATCH);
    sg_dcm_seg d;
    memset(&d, 0, sizeof d);
    d.study = &refs->study;
    d.slices = refs->slices;
    d.n_slices = ns;
    d.rows = (int32_t)H;
    d.cols = (int32_t)W;
    memcpy(d.orientation, refs->orientation, sizeof d.orientation);
    d.pixel_spacing[0] = in->spacing[1];
    d.pixel_spacing[1] = in->spacing[2];
    d.slice_step = step;
    d.thickness = refs->thickness;
    d.n_segments = n_seg;
    d.labels = b->label_p;
    d.descriptions = b->desc_p;
    d.n_frames = n_frames;
    d.frame_segment = b->frame_segment;
    d.frame_slice = b->frame_slice;
    d.frame_moved = b->frame_moved;
    d.pixels = b->pixels;
    d.pixel_bytes = (size_t)bytes;
    d.series_uid = series_uid;
    d.sop_uid = sop_uid;
    d.dimension_uid = dim_uid;
    d.content_date = date;
    d.content_time = tm_s;
    d.software = software;
    uint8_t *file = NULL;
    size_t size = 0;
    char err[512];
    if (sg_dcm_seg_encode(&d, &file, &size, err, sizeof err) != SG_DCM_OK)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: %s", path, err);
    FILE *fp = sg_output_stream(o);
    sg_status st = SEGRT_OK;
    if (!fp || fwrite(file, 1, size, fp) != size)
        st = sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", path, strerror(errno));
    free(file);
    return st;
}

sg_status sg_dicom_seg_write(sg_output *o, const sg_tensor *labels, const sg_source *src, const char *const *names,
                             size_t n_names)
{
    seg_build b;
    memset(&b, 0, sizeof b);
    sg_status st = seg_write(o, labels, src, names, n_names, &b);
    build_free(&b);
    return st;
}

#endif
