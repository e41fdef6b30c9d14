/* DICOM SEG output (sink_dicom_seg.c) and what it needs of the DICOM
 * reader (source_dicom.c): the series' references.
 *
 * A Segmentation references the instances it was derived from, so the
 * DICOM source keeps, beside its pixels, each source slice's SOP class
 * and instance (and frame, in a multi-frame file) and position in its
 * sorted order, and the study, patient and frame of reference a SEG
 * copies. They stay internal: the public geometry says where voxels lie,
 * not which files they came from. */
#ifndef SG_IO_DICOM_SEG_H
#define SG_IO_DICOM_SEG_H

#include "core/file.h"
#include "core/tensor.h"
#include "io/dicom_gdcm.h"
#include "io/source.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sg_dicom_refs {
    sg_dcm_study study;
    /* The series' own slices, in order along the normal (n_slices of
     * them). Without resampling they are the source's slices one for
     * one; resampled (allow_uneven) the source's grid has its own depth,
     * from slices[0]'s position on at the step of spacing[0]. */
    const sg_dcm_slice_ref *slices;
    int64_t n_slices;
    bool resampled;
    double orientation[6]; /* ImageOrientationPatient of the series */
    double thickness;      /* SliceThickness of the first file (0: absent) */
} sg_dicom_refs;

/* Writes labels (an integer tensor, [depth, height, width] with any
 * leading dims of 1, the grid of src) into o as a DICOM Segmentation
 * referencing src's series (sink_dicom_seg.c says what it holds): one
 * segment per label value > 0 that occurs, named names[value] where
 * value < n_names and the name is not empty, else "Segment VALUE".
 * Writes, does not commit o. Errors name o's path: INVALID_ARGUMENT (src
 * not a DICOM series, labels of another grid or dtype, negative labels or
 * above 65535, no label > 0 at all), IO, OUT_OF_MEMORY. */
sg_status sg_dicom_seg_write(sg_output *o, const sg_tensor *labels, const sg_source *src, const char *const *names,
                             size_t n_names);

/* Whether path ends in .dcm (any case): where a DICOM SEG is written. */
bool sg_dicom_seg_name(const char *path);

#endif
