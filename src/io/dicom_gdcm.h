/* The C face of the GDCM shim (dicom_gdcm.cc): one DICOM file's header as
 * the series reader needs it, and its pixels decoded. Plain C types; no
 * C++ exception crosses this boundary (each entry point catches them all
 * and returns an error code with a one-line message). */
#ifndef SG_IO_DICOM_GDCM_H
#define SG_IO_DICOM_GDCM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SG_DCM_TEXT 72

/* What the reader takes from a file's header (values absent from the file
 * are 0 or "", with the has_ flags 0). Per-frame arrays are malloc'd
 * (free with sg_dcm_header_free) and hold frames entries of 3 (position),
 * 6 (orientation) or 2 (slope, intercept) values, or are NULL. */
typedef struct sg_dcm_header {
    int32_t has_pixels; /* PixelData (7FE0,0010) is present */
    char series_uid[SG_DCM_TEXT], modality[SG_DCM_TEXT], description[SG_DCM_TEXT], sop_class[SG_DCM_TEXT],
        sop_instance[SG_DCM_TEXT], transfer_syntax[SG_DCM_TEXT], photometric[SG_DCM_TEXT];
    int32_t rows, cols, samples, bits_allocated, bits_stored, pixel_representation, planar;
    int32_t frames; /* NumberOfFrames, 1 when absent */
    int32_t has_position, has_orientation, has_spacing, has_rescale;
    double position[3];    /* ImagePositionPatient */
    double orientation[6]; /* ImageOrientationPatient: row then column direction cosines */
    double spacing[2];     /* PixelSpacing: between rows, between columns */
    double slope, intercept;
    double spacing_between, thickness; /* SpacingBetweenSlices, SliceThickness (0: absent) */
    /* Enhanced multi-frame (functional groups, per frame or shared), or
     * RT Dose (GridFrameOffsetVector: offsets along the normal). */
    double *frame_position, *frame_orientation, *frame_rescale;
    double *frame_offsets;
} sg_dcm_header;

enum { SG_DCM_OK = 0, SG_DCM_NOT_DICOM = 1, SG_DCM_ERROR = 2 };

/* Reads path's header up to the pixel data. NOT_DICOM when GDCM does not
 * take the file as DICOM at all; ERROR with err (cap bytes, one line) for
 * a DICOM file that is malformed. */
int sg_dcm_read_header(const char *path, sg_dcm_header *h, char *err, size_t cap);
void sg_dcm_header_free(sg_dcm_header *h);

/* Decodes every frame of path into dst (bytes long: frames x rows x cols x
 * samples x bits_allocated / 8 of h, which must be the file's header),
 * samples as stored (no rescale, no colour conversion but what the codec
 * does), host byte order. *planar receives 1 when each frame's samples
 * come plane by plane, 0 when interleaved. *photometric receives the
 * photometric interpretation of the decoded pixels (a JPEG codec turns
 * YBR_FULL into RGB). ERROR with err on any failure. */
int sg_dcm_decode(const char *path, const sg_dcm_header *h, void *dst, size_t bytes, int32_t *planar,
                  char photometric[SG_DCM_TEXT], char *err, size_t cap);

/* What a DICOM SEG copies from its source series (the first file's, the
 * rest being one study and one frame of reference). Values are the
 * file's bytes, trailing padding removed, in its SpecificCharacterSet
 * (copied too); "" where absent. */
#define SG_DCM_LONG 200
typedef struct sg_dcm_study {
    char study_uid[SG_DCM_TEXT], series_uid[SG_DCM_TEXT], frame_of_reference[SG_DCM_TEXT];
    char charset[SG_DCM_LONG], patient_name[SG_DCM_LONG], patient_id[SG_DCM_TEXT], birth_date[SG_DCM_TEXT],
        sex[SG_DCM_TEXT], study_date[SG_DCM_TEXT], study_time[SG_DCM_TEXT], study_id[SG_DCM_TEXT],
        accession[SG_DCM_TEXT], referring[SG_DCM_LONG];
} sg_dcm_study;

int sg_dcm_read_study(const char *path, sg_dcm_study *out, char *err, size_t cap);

/* One source slice a SEG references. */
typedef struct sg_dcm_slice_ref {
    char sop_class[SG_DCM_TEXT], sop_instance[SG_DCM_TEXT];
    int32_t frame;      /* 1-based frame of a multi-frame file; 0 in a file of one frame */
    double position[3]; /* ImagePositionPatient */
} sg_dcm_slice_ref;

/* A Segmentation (BINARY) to encode: every string is the caller's; frame
 * f is segment frame_segment[f] (1-based) over source slice
 * frame_slice[f], its bits in pixels (frames of rows x cols bits packed
 * one after another, least significant bit first, bytes padded to an
 * even count). */
typedef struct sg_dcm_seg {
    const sg_dcm_study *study;
    const sg_dcm_slice_ref *slices;
    int64_t n_slices;
    int32_t rows, cols;
    double orientation[6], pixel_spacing[2], slice_step;
    double thickness; /* the source's SliceThickness (0: the step) */
    int32_t n_segments;
    const char *const *labels;       /* segment s + 1's label */
    const char *const *descriptions; /* segment s + 1's description */
    int64_t n_frames;
    const int32_t *frame_segment;
    const int64_t *frame_slice;
    const uint8_t *frame_moved; /* 1: the frame's labels come from another plane than its slice's (NULL: none) */
    const uint8_t *pixels;
    size_t pixel_bytes;
    const char *series_uid, *sop_uid, *dimension_uid; /* new UIDs */
    const char *content_date, *content_time, *software;
} sg_dcm_seg;

/* Encodes s as a DICOM file (explicit VR little endian, with its file
 * meta group) into *out (malloc'd, *size bytes). ERROR with err. */
int sg_dcm_seg_encode(const sg_dcm_seg *s, uint8_t **out, size_t *size, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
