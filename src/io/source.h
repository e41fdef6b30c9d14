/* Images as region sources: a reader opens a file, describes it, and
 * answers read_region(level, box) into a caller's buffer, so that a job
 * holds only the rows it works on where the format allows.
 *
 * Contract of every source:
 * - sg_source_open tells the format by the file's first bytes (image.h's
 *   signatures; anything else is tried as NPY) and reads headers only,
 *   with every check the format's whole read makes before it allocates.
 * - info describes level 0 and any reduced levels: spatial dims (2 or 3),
 *   channels, the samples' dtype as stored, and what the file says of the
 *   pixel's physical size (0 where it says nothing).
 * - A region is a box of depth x height x width pixels at one level,
 *   written to dst planar: channel, then depth, height, width, in the
 *   source's dtype (channels x box volume samples). A box outside the
 *   level is INVALID_ARGUMENT; a file that changed or broke since open is
 *   IO or INVALID_MODEL, naming the file.
 * - A source is used by one thread at a time; sources of one file are
 *   independent.
 * - geometry (sg_geometry below) says where the image lies in the patient,
 *   in the one convention of segrt; a format that says nothing of it
 *   (PNG, JPEG, TIFF, NPY) leaves known false and the identity defaults.
 *
 * What a region costs, by format:
 * - NPY (source_npy.c): the file is mapped; a region copies its rows.
 * - TIFF (source_tiff.c): the strips or tiles the box touches are decoded
 *   (the last one is kept for the next box); any order is cheap. Pages
 *   are a volume's depth when they agree, or a pyramid's levels when they
 *   are reduced images (source_tiff.c says exactly when).
 * - PNG and JPEG (source_image.c) are not random-access: rows are decoded
 *   in order, forward. The source holds the rows from the last region's
 *   first row to its last. The rule: a region whose first row is at or
 *   below the previous region's first row costs only the rows not decoded
 *   yet, and memory for the rows from its first row on (a window job that
 *   reads slabs top to bottom, overlapping or not, decodes each row once
 *   and holds one slab); a region that starts above the previous one
 *   restarts the decoder from the top of the file. An interlaced PNG
 *   cannot be read by rows and is decoded whole at the first read.
 * - NIfTI (source_nifti.c): a .nii file is mapped and a region copies its
 *   rows (any order is cheap). A .nii.gz decodes forward, by the PNG rule
 *   above applied to each volume of a 4-D file (each channel's rows are a
 *   stream of their own, started from the top of the file the first time
 *   that channel is read): a region going down costs only the rows not
 *   decoded yet; one starting above the previous one's first row restarts
 *   that channel's stream.
 * - DICOM series (source_dicom.c): each file (slice, or enhanced
 *   multi-frame file) is decoded whole by GDCM when a region first touches
 *   it; the last decoded files are kept, up to 64 MiB (at least one), so
 *   slabs that overlap along depth decode each slice about once. Only the
 *   slices a box touches are decoded.
 * - Whole-slide images (source_slide.c, through OpenSlide): OpenSlide
 *   decodes the tiles a box touches and keeps recent ones in its cache;
 *   any order is cheap. A large box is read in pieces of at most 16 MiB
 *   of OpenSlide's ARGB. */
#ifndef SG_IO_SOURCE_H
#define SG_IO_SOURCE_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_SOURCE_MAX_LEVELS 16

/* Where an image lies in the patient: segrt's one geometry model.
 *
 * World coordinates are LPS, in mm (x towards the patient's left, y
 * posterior, z superior), as DICOM and ITK have them; NIfTI's RAS is
 * converted (x and y negated) by its reader and writer.
 *
 * Index axes: i the width (column), j the height (row), k the depth
 * (slice); dims and spacing list them as depth, height, width (k, j, i),
 * the array's order. The world position of voxel (k, j, i) is
 *     origin + direction * (i * spacing[2], j * spacing[1], k * spacing[0])
 * so column c of direction (direction[0][c], direction[1][c],
 * direction[2][c]) is the unit world vector of index axis c in the order
 * i, j, k: ITK's and SimpleITK's order (GetDirection is this matrix, row
 * by row; their spacing is ours reversed). For a DICOM series column i is
 * ImageOrientationPatient's row direction, j its column direction and k
 * the way slices advance; origin is ImagePositionPatient of the first
 * slice.
 *
 * known is false where the file says nothing of position (PNG, JPEG, TIFF,
 * NPY, a NIfTI file whose qform_code and sform_code are both 0, DICOM
 * without ImagePositionPatient): origin 0 and direction the identity
 * then. qform_code and sform_code are a NIfTI file's own (0 for other
 * formats), for the NIfTI writer to copy. */
typedef struct sg_geometry {
    bool known;
    double origin[3];
    double direction[3][3];
    int32_t qform_code, sform_code;
} sg_geometry;

/* The identity defaults (known false). */
void sg_geometry_identity(sg_geometry *g);

typedef struct sg_source_info {
    const char *format;                    /* "npy", "png", "jpeg", "tiff", "nifti", "dicom", "slide" */
    const char *vendor;                    /* a slide's vendor as OpenSlide names it ("aperio", "hamamatsu",
                                              ...); NULL for other formats */
    sg_dtype dtype;                        /* samples as stored */
    int32_t n_dims;                        /* spatial dims: 2 or 3 */
    int32_t channels;                      /* alpha included, where the file has it */
    int32_t n_levels;                      /* 1 unless the file is a pyramid */
    int64_t dims[SG_SOURCE_MAX_LEVELS][3]; /* per level: depth (1 in 2-D), height, width */
    double downsample[SG_SOURCE_MAX_LEVELS]; /* per level: how many level-0 pixels one of its pixels spans: 1
                                                at level 0; a slide's as OpenSlide gives it (the mean of the
                                                height and width ratios), every other format's the exact
                                                ratio of level 0's width to the level's (set at open by
                                                source.c where the format leaves it 0) */
    double spacing[3];                     /* a pixel's size along depth, height, width in mm; 0 where
                                              unknown */
    int64_t tile[3];                       /* the box the file stores together: reads aligned to it cost
                                              least */
    sg_geometry geometry;                  /* where level 0 lies in the patient */
} sg_source_info;

/* A box at one level: start and size along depth, height, width. */
typedef struct sg_box {
    int64_t start[3], size[3];
} sg_box;

typedef struct sg_source sg_source;

/* Each format fills one of these (designated initializers); close may be
 * NULL where the state is freed by free(). */
typedef struct sg_source_ops {
    sg_status (*read_region)(sg_source *s, int32_t level, const sg_box *box, void *dst);
    void (*close)(sg_source *s);
} sg_source_ops;

/* What an opener may be told beyond the path. */
typedef struct sg_source_options {
    uint64_t max_bytes;     /* as sg_source_open_max's; 0: no cap but the formats' */
    const char *series_uid; /* DICOM: the series to read where the files hold several (NULL: the only one) */
    bool allow_uneven;      /* DICOM: missing slices or uneven spacing resampled to even spacing, not refused
                               (source_dicom.c) */
} sg_source_options;

struct sg_source {
    const sg_source_ops *ops;
    sg_source_info info;
    char *path;             /* for messages */
    void *state;            /* the format's */
    uint64_t max_all_bytes; /* the most read_all allocates: the format's whole-read cap */
    uint64_t max_bytes;     /* the caller's cap (sg_source_open_max), for the openers */
    const char *series_uid; /* the caller's choice (sg_source_options), for the DICOM opener */
    bool allow_uneven;      /* the caller's choice (sg_source_options), for the DICOM opener */
    const char *notice;     /* the format's line for sg_source_notice (NULL: none) */
};

/* Opens path as a source (contract above). Errors name the file, as the
 * format's whole read would: IO, INVALID_MODEL, UNSUPPORTED. */
sg_status sg_source_open(const char *path, sg_source **out);

/* As sg_source_open, with a cap of the caller's on what the source may
 * allocate at once: an image's pixels where the format is decoded whole
 * (PNG, JPEG: as sg_image_read_memory_max), a strip or tile (TIFF), and
 * read_all's tensor; the formats' own caps apply beside it
 * (SG_IMAGE_MAX_BYTES for images). The fuzzer's form; sg_source_open has
 * no cap but the formats'. */
sg_status sg_source_open_max(const char *path, uint64_t max_bytes, sg_source **out);

/* As sg_source_open_max, with options. A folder is a DICOM series (its
 * files found recursively); a file is told by its first bytes: DICOM
 * ("DICM" at byte 128), NIfTI-1 or -2 (its header size and magic, or
 * gzip's signature: a .nii.gz), PNG, JPEG, TIFF, else NPY; before the
 * picture formats, a file OpenSlide names a vendor other than
 * "generic-tiff" for is a slide (source_slide.c). */
sg_status sg_source_open_with(const char *path, const sg_source_options *o, sg_source **out);

/* A DICOM series from a list of files (n >= 1), each of which must be a
 * DICOM image; the series rules are source_dicom.c's. The source's path
 * (for messages) is the first file's. */
sg_status sg_source_open_files(const char *const *paths, size_t n, const sg_source_options *o, sg_source **out);

/* As sg_source_open_with, through OpenSlide for any file it reads (a
 * generic tiled TIFF too, which sg_source_open gives the TIFF source):
 * format "slide", RGB uint8 (source_slide.c). UNSUPPORTED for a file
 * OpenSlide does not take and in a build without OpenSlide. */
sg_status sg_source_open_slide(const char *path, const sg_source_options *o, sg_source **out);

/* Reads box of level into dst (contract above). */
sg_status sg_source_read_region(sg_source *s, int32_t level, const sg_box *box, void *dst);

/* The whole of level as a tensor 1 x C x H x W (1 x C x D x H x W in
 * 3-D) in the source's dtype, out->data malloc'd and owned by the caller.
 * A level over the format's whole-read cap (SG_IMAGE_MAX_BYTES for
 * images, 64 GiB for NPY) is INVALID_MODEL, before anything is allocated:
 * read such an image by regions. */
sg_status sg_source_read_all(sg_source *s, int32_t level, sg_tensor *out);

/* Closes s; NULL is fine. */
void sg_source_close(sg_source *s);

/* The formats' openers (source_npy.c, source_image.c, source_tiff.c):
 * fill s->ops, info, state and max_all_bytes. open_image takes PNG and
 * JPEG. */
sg_status sg_source_open_npy(sg_source *s);
sg_status sg_source_open_image(sg_source *s);
sg_status sg_source_open_tiff(sg_source *s);
/* NIfTI (source_nifti.c); UNSUPPORTED in a build without it. */
sg_status sg_source_open_nifti(sg_source *s);
/* DICOM (source_dicom.c): s->path a folder or a file, or the n paths
 * given (paths NULL: s->path alone, a folder walked recursively);
 * UNSUPPORTED in a build without it. */
sg_status sg_source_open_dicom(sg_source *s, const char *const *paths, size_t n);

/* The DICOM series among files (a folder when n is 1 and paths[0] is
 * one), as source_dicom.c groups them: *out (count entries, malloc'd) in
 * order of first appearance. Files that are not DICOM images are skipped. */
typedef struct sg_dicom_series_info {
    char uid[72], modality[72], description[72];
    int64_t slices;
    int32_t rows, cols;
} sg_dicom_series_info;
sg_status sg_dicom_list(const char *const *paths, size_t n, sg_dicom_series_info **out, size_t *count);

/* What a DICOM source keeps of its series for a DICOM SEG that references
 * it (io/dicom_seg.h); NULL for a source of another format. */
struct sg_dicom_refs;
const struct sg_dicom_refs *sg_source_dicom_refs(const sg_source *s);

/* A line saying what the source did on its own, for the job to pass on
 * (a DICOM series resampled to even spacing); NULL when nothing. */
const char *sg_source_notice(const sg_source *s);

/* Whether head (n bytes of a file's start, 348 are enough) is a NIfTI-1 or
 * -2 header in either byte order, or a gzip stream (a .nii.gz, checked
 * when opened). */
bool sg_nifti_head(const uint8_t *head, size_t n);
/* Whether head (n bytes, 132 are enough) is a DICOM file's preamble. */
bool sg_dicom_head(const uint8_t *head, size_t n);

#endif
