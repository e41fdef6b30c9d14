/* NIfTI headers as the reader (source_nifti.c) and writer (sink_nifti.c)
 * share them: the fields segrt uses, from either version and byte order,
 * and the affine nibabel's get_best_affine gives. */
#ifndef SG_IO_NIFTI_INTERNAL_H
#define SG_IO_NIFTI_INTERNAL_H

#include "core/file.h"
#include "core/status.h"
#include "io/sink.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_nifti_header {
    int version;    /* 1 or 2 */
    bool swapped;   /* the file's byte order is not the host's */
    int64_t dim[8]; /* dims past dim[0] are 1 */
    double pixdim[8];
    int datatype;
    double vox_offset;
    double scl_slope, scl_inter;
    int qform_code, sform_code;
    double quatern[3], qoffset[3];
    double srow[3][4];
} sg_nifti_header;

/* Parses the n bytes of a header (348 for NIfTI-1, 540 for NIfTI-2, in
 * either byte order) with every check that needs no file size: magic
 * (single-file n+1/n+2 only), dim[0] of 1 to 7 and dims of 1 to 2^40 up to
 * it, vox_offset a whole number past the header. Errors name name. */
sg_status sg_nifti_parse_header(const uint8_t *bytes, size_t n, const char *name, sg_nifti_header *h);

/* The RAS affine (3 rows of 4) of h as nibabel's get_best_affine chooses
 * it (sform if sform_code > 0, else qform if qform_code > 0); with both
 * codes 0, diag(pixdim) and *known false. INVALID_MODEL (no message)
 * when a value is not finite. */
sg_status sg_nifti_affine(const sg_nifti_header *h, double affine[3][4], bool *known);

/* A NIfTI file written row by row into an output (sink.h's NIfTI): the
 * header at open; then rows of W samples of desc's dtype, host order, for
 * channel c, slice z, row y: in order for a .nii.gz (gz), at their place
 * for a .nii. finish checks every row came and ends the stream; finish
 * and free free w. */
typedef struct sg_nifti_writer sg_nifti_writer;
sg_status sg_nifti_writer_open(sg_output *o, const sg_sink_desc *desc, bool gz, sg_nifti_writer **out);
sg_status sg_nifti_writer_row(sg_nifti_writer *w, int64_t c, int64_t z, int64_t y, const void *row);
sg_status sg_nifti_writer_finish(sg_nifti_writer *w);
void sg_nifti_writer_free(sg_nifti_writer *w);

/* Whether path names a NIfTI file (.nii or .nii.gz, any case); *gz says
 * which. */
bool sg_nifti_name(const char *path, bool *gz);

#endif
