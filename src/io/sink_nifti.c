/* NIfTI files written row by row (nifti_internal.h's writer, sink.h's
 * NIfTI sink).
 *
 * The header is niftilib's struct (nifti_1_header, or nifti_2_header where
 * a dim passes NIfTI-1's 32767), filled from the description: dims W, H,
 * D and channels as dim[4]; pixdim the spacing (0 becomes 1); units mm
 * and s; no scaling (scl_slope 1, scl_inter 0); the data right after the
 * header and a 4-byte extension flag of zeros.
 *
 * Geometry: the affine is source.h's geometry converted to RAS (x and y
 * negated), NIfTI's columns i, j, k being the width, height and depth
 * axes; it is written as the sform exactly and as the qform (niftilib's
 * nifti_dmat44_to_quatern: the nearest rotation, qfac -1 for a
 * left-handed one, the spacing as pixdim), so that readers preferring
 * either agree. For a DICOM series this is the affine dcm2niix and
 * SimpleITK write (LPS to RAS). Codes: where the geometry came from a
 * NIfTI file its codes are copied (a code of 0 beside a set one takes the
 * set one's value, since both forms now carry the same affine), so a
 * label map declares the space its image declared (scanner, aligned,
 * Talairach, MNI); otherwise 1, NIFTI_XFORM_SCANNER_ANAT, which is what
 * DICOM's patient coordinates are (dcm2niix writes 1 too). Without a
 * known geometry both codes are 0 and only pixdim says anything, as in an
 * image that stated nothing. */
#include "io/nifti_internal.h"

#include "core/gzip_par.h"
#include "core/mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool sg_nifti_name(const char *path, bool *gz)
{
    size_t n = strlen(path);
    *gz = n >= 7 && strcasecmp(path + n - 7, ".nii.gz") == 0;
    return *gz || (n >= 4 && strcasecmp(path + n - 4, ".nii") == 0);
}

#ifndef SEGRT_HAVE_NIFTI

sg_status sg_nifti_writer_open(sg_output *o, const sg_sink_desc *desc, bool gz, sg_nifti_writer **out)
{
    (void)desc;
    (void)gz;
    *out = NULL;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: NIfTI, and segrt was built without NIfTI support", sg_output_path(o));
}

sg_status sg_nifti_writer_row(sg_nifti_writer *w, int64_t c, int64_t z, int64_t y, const void *row)
{
    (void)w, (void)c, (void)z, (void)y, (void)row;
    return sg_error(SEGRT_ERROR_INTERNAL, "NIfTI writer without NIfTI support");
}

sg_status sg_nifti_writer_finish(sg_nifti_writer *w)
{
    (void)w;
    return sg_error(SEGRT_ERROR_INTERNAL, "NIfTI writer without NIfTI support");
}

void sg_nifti_writer_free(sg_nifti_writer *w)
{
    (void)w;
}

#else

#include <math.h>
#include <nifti2_io.h>

struct sg_nifti_writer {
    sg_output *out;
    sg_sink_desc d;
    bool gz;
    sg_gzip_par *z; /* .nii.gz */
    uint64_t data_at;
    size_t row;      /* bytes of a row */
    int64_t next;    /* .nii.gz: rows written, in order */
    int64_t written; /* rows written */
};

static int nifti_type(sg_dtype t)
{
    switch (t) {
    case SEGRT_DTYPE_UINT8:
    case SEGRT_DTYPE_BOOL:
        return DT_UINT8;
    case SEGRT_DTYPE_INT8:
        return DT_INT8;
    case SEGRT_DTYPE_UINT16:
        return DT_UINT16;
    case SEGRT_DTYPE_INT16:
        return DT_INT16;
    case SEGRT_DTYPE_INT32:
        return DT_INT32;
    case SEGRT_DTYPE_INT64:
        return DT_INT64;
    case SEGRT_DTYPE_FLOAT32:
        return DT_FLOAT32;
    case SEGRT_DTYPE_FLOAT64:
        return DT_FLOAT64;
    default:
        return 0;
    }
}

/* Writes n bytes to the file, deflated for a .nii.gz. */
static sg_status put(sg_nifti_writer *w, const void *p, size_t n)
{
    if (w->gz)
        return sg_gzip_par_write(w->z, p, n);
    FILE *f = sg_output_stream(w->out);
    if (n && fwrite(p, 1, n, f) != n)
        return sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", sg_output_path(w->out), strerror(errno));
    return SEGRT_OK;
}

/* The RAS affine of the description: columns i, j, k (width, height,
 * depth) scaled by their spacing, then the origin. */
static void ras_affine(const sg_sink_desc *d, const double sp[3], double a[4][4])
{
    sg_geometry g = d->geometry;
    if (!g.known)
        sg_geometry_identity(&g);
    memset(a, 0, sizeof(double) * 16);
    a[3][3] = 1;
    for (int r = 0; r < 3; r++) {
        double flip = r < 2 && g.known ? -1.0 : 1.0; /* LPS to RAS; method 1 (unknown) is the index scaled */
        for (int c = 0; c < 3; c++)
            a[r][c] = flip * g.direction[r][c] * sp[2 - c];
        a[r][3] = flip * g.origin[r];
    }
}

sg_status sg_nifti_writer_open(sg_output *o, const sg_sink_desc *desc, bool gz, sg_nifti_writer **out)
{
    *out = NULL;
    const char *path = sg_output_path(o);
    int dt = nifti_type(desc->dtype);
    if (!dt)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: NIfTI holds no %s samples", path, segrt_dtype_name(desc->dtype));
    if (gz && desc->channels > 1)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: a .nii.gz is written in one pass and takes one channel, not %d; write a .nii", path,
                        (int)desc->channels);
    sg_nifti_writer *w = sg_calloc(1, sizeof *w);
    if (!w)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    w->out = o;
    w->d = *desc;
    w->gz = gz;
    w->row = (size_t)desc->dims[2] * segrt_dtype_size(desc->dtype);
    double sp[3];
    for (int a = 0; a < 3; a++)
        sp[a] = desc->spacing[a] > 0 && isfinite(desc->spacing[a]) ? desc->spacing[a] : 1.0;
    double a[4][4];
    ras_affine(desc, sp, a);
    nifti_dmat44 m;
    memcpy(m.m, a, sizeof m.m);
    double qb, qc, qd, qx, qy, qz, dx, dy, dz, qfac;
    nifti_dmat44_to_quatern(m, &qb, &qc, &qd, &qx, &qy, &qz, &dx, &dy, &dz, &qfac);
    int qcode = 0, scode = 0;
    if (desc->geometry.known) {
        int q = desc->geometry.qform_code, s = desc->geometry.sform_code;
        if (q > 0 || s > 0) {
            qcode = q > 0 ? q : s;
            scode = s > 0 ? s : q;
        } else {
            qcode = scode = NIFTI_XFORM_SCANNER_ANAT;
        }
    }
    int64_t dims[8] = {
        desc->channels > 1 ? 4 : desc->n_dims, desc->dims[2], desc->dims[1], desc->dims[0], desc->channels, 1, 1, 1};
    bool two = desc->dims[0] > 32767 || desc->dims[1] > 32767 || desc->dims[2] > 32767 || desc->channels > 32767;
    int nbyper, swapsize;
    nifti_datatype_sizes(dt, &nbyper, &swapsize);
    uint8_t head[544];
    memset(head, 0, sizeof head);
    if (!two) {
        nifti_1_header h;
        memset(&h, 0, sizeof h);
        h.sizeof_hdr = 348;
        for (int i = 0; i < 8; i++)
            h.dim[i] = (short)dims[i];
        h.datatype = (short)dt;
        h.bitpix = (short)(8 * nbyper);
        h.pixdim[0] = (float)qfac;
        h.pixdim[1] = (float)sp[2], h.pixdim[2] = (float)sp[1], h.pixdim[3] = (float)sp[0];
        h.pixdim[4] = 1;
        h.vox_offset = 352;
        h.scl_slope = 1;
        h.xyzt_units = NIFTI_UNITS_MM | NIFTI_UNITS_SEC;
        h.qform_code = (short)qcode;
        h.sform_code = (short)scode;
        h.quatern_b = (float)qb, h.quatern_c = (float)qc, h.quatern_d = (float)qd;
        h.qoffset_x = (float)qx, h.qoffset_y = (float)qy, h.qoffset_z = (float)qz;
        for (int c = 0; c < 4; c++) {
            h.srow_x[c] = (float)a[0][c];
            h.srow_y[c] = (float)a[1][c];
            h.srow_z[c] = (float)a[2][c];
        }
        snprintf(h.descrip, sizeof h.descrip, "segrt %s", segrt_version());
        memcpy(h.magic, "n+1", 4);
        memcpy(head, &h, sizeof h);
        w->data_at = 352;
    } else {
        nifti_2_header h;
        memset(&h, 0, sizeof h);
        h.sizeof_hdr = 540;
        memcpy(h.magic, "n+2\0\r\n\032\n", 8);
        for (int i = 0; i < 8; i++)
            h.dim[i] = dims[i];
        h.datatype = (short)dt;
        h.bitpix = (short)(8 * nbyper);
        h.pixdim[0] = qfac;
        h.pixdim[1] = sp[2], h.pixdim[2] = sp[1], h.pixdim[3] = sp[0];
        h.pixdim[4] = 1;
        h.vox_offset = 544;
        h.scl_slope = 1;
        h.xyzt_units = NIFTI_UNITS_MM | NIFTI_UNITS_SEC;
        h.qform_code = qcode;
        h.sform_code = scode;
        h.quatern_b = qb, h.quatern_c = qc, h.quatern_d = qd;
        h.qoffset_x = qx, h.qoffset_y = qy, h.qoffset_z = qz;
        for (int c = 0; c < 4; c++) {
            h.srow_x[c] = a[0][c];
            h.srow_y[c] = a[1][c];
            h.srow_z[c] = a[2][c];
        }
        snprintf(h.descrip, sizeof h.descrip, "segrt %s", segrt_version());
        memcpy(head, &h, sizeof h);
        w->data_at = 544;
    }
    if (gz) {
        /* Level 1, as nibabel (and so MONAI's SaveImage) writes .nii.gz: on
         * a smooth label map it deflated 5.6 times faster than zlib's
         * default 6, into a file twice as large but still a tenth of the
         * raw one (a 400 x 512 x 512 map took 1.7 s at 6 on the H200's
         * host). On one thread level 1 still took 0.46-0.78 s of segrt's
         * run on that map (docs/perf.md), so blocks of it are deflated by
         * a thread per core (gzip_par.h), into one gzip member as before:
         * 0.05 s. */
        uint64_t bytes = w->data_at + (uint64_t)desc->dims[0] * desc->dims[1] * w->row;
        FILE *f = sg_output_stream(o);
        sg_status st = f ? sg_gzip_par_new(f, path, 1, sg_gzip_par_workers(bytes, 0), 0, &w->z)
                         : sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
        if (st != SEGRT_OK) {
            free(w);
            return st;
        }
    }
    sg_status st = put(w, head, (size_t)w->data_at);
    if (st != SEGRT_OK) {
        sg_nifti_writer_free(w);
        return st;
    }
    *out = w;
    return SEGRT_OK;
}

sg_status sg_nifti_writer_row(sg_nifti_writer *w, int64_t c, int64_t z, int64_t y, const void *row)
{
    const sg_sink_desc *d = &w->d;
    int64_t r = (c * d->dims[0] + z) * d->dims[1] + y;
    const void *src = row;
    uint8_t *bools = NULL;
    if (d->dtype == SEGRT_DTYPE_BOOL) {
        if (!(bools = malloc(w->row)))
            return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", sg_output_path(w->out));
        for (size_t i = 0; i < w->row; i++)
            bools[i] = ((const uint8_t *)row)[i] != 0;
        src = bools;
    }
    sg_status st;
    if (w->gz) {
        SG_ASSERT(r == w->next);
        st = put(w, src, w->row);
        w->next++;
    } else {
        FILE *f = sg_output_stream(w->out);
        uint64_t at = w->data_at + (uint64_t)r * w->row;
        st = d->channels > 1 && fseeko(f, (off_t)at, SEEK_SET) != 0
                 ? sg_error(SEGRT_ERROR_IO, "%s: seek failed: %s", sg_output_path(w->out), strerror(errno))
                 : put(w, src, w->row);
    }
    free(bools);
    if (st == SEGRT_OK)
        w->written++;
    return st;
}

sg_status sg_nifti_writer_finish(sg_nifti_writer *w)
{
    const sg_sink_desc *d = &w->d;
    sg_status st = SEGRT_OK;
    if (w->written != d->channels * d->dims[0] * d->dims[1])
        st = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: %lld rows of %lld written", sg_output_path(w->out),
                      (long long)w->written, (long long)(d->channels * d->dims[0] * d->dims[1]));
    if (st == SEGRT_OK && w->gz)
        st = sg_gzip_par_finish(w->z);
    sg_nifti_writer_free(w);
    return st;
}

void sg_nifti_writer_free(sg_nifti_writer *w)
{
    if (!w)
        return;
    sg_gzip_par_free(w->z);
    free(w);
}

#endif
