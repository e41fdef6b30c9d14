/* What the public file API (api_io.c) asks of the volume side
 * (api_volume.c): whether a path is a volume, and its probe and load. */
#ifndef SG_IO_API_VOLUME_H
#define SG_IO_API_VOLUME_H

#include "core/status.h"
#include "io/source.h"

#include <stdbool.h>

/* True when path is a folder (a DICOM series) or a file whose first bytes
 * are DICOM's or NIfTI's (gzip taken as .nii.gz); *format says which.
 * Records no error. */
bool sg_api_is_volume(const char *path, segrt_file_format *format);

/* segrt_image_probe and segrt_image_load of a volume (any region source,
 * in fact), through sg_source_open. */
sg_status sg_api_volume_probe(const char *path, segrt_image_info *out);
sg_status sg_api_volume_load(const char *path, segrt_tensor *out);

/* The public geometry of a source's info. */
void sg_api_geometry(const sg_source_info *in, segrt_geometry *g);

#endif
