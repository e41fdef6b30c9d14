/* What `segrt run` reads and writes around a sliding-window run: NPY
 * arrays, or image files (PNG, JPEG, TIFF) with the model's own input
 * normalisation and window from its metadata, label maps as images and
 * the overlay picture.
 *
 * Model metadata (ONNX metadata_props) segrt reads:
 *   segrt.roi           "256,256": the window when --roi is not given
 *   segrt.overlap       "0.25": the overlap when --overlap is not given
 *   segrt.input.scale   x * scale first (e.g. 1/255)
 *   segrt.input.mean    per channel (or one for all), subtracted
 *   segrt.input.std     per channel (or one for all), divided by
 * The normalisation applies to image files only: an NPY input is taken as
 * the model's input already. */
#ifndef SEGRT_CLI_SW_IO_H
#define SEGRT_CLI_SW_IO_H

#include "cli_sw.h"

#include "io/image.h"

/* The window and overlap from the model's metadata where the command
 * line gave none. Returns an exit code (usage errors name the model). */
int cli_sw_model_defaults(const segrt_model *model, const char *path, cli_sw_opts *so);

/* What cli_sw_read_input will give, from the file's header alone:
 * image's dtype, rank and dims (data NULL), and the host bytes the read
 * holds besides the tensor (an image file's pixels and the decoder's
 * scratch). Returns an exit code. */
int cli_sw_probe_input(const char *path, sg_tensor *image, uint64_t *extra_bytes);

/* The input as float32 N x C x spatial. An image file also fills *pixels
 * (for the overlay) and is normalised as the model's metadata says unless
 * raw. Returns an exit code. */
int cli_sw_read_input(const char *path, const segrt_model *model, const char *model_path, bool raw,
                      sg_tensor *image, sg_image *pixels);

/* Whether path names an image file segrt writes (.png, .tif, .tiff). */
bool cli_sw_is_image_output(const char *path);

/* The result into the open output o (committed by the caller): NPY, or a
 * label map as a PNG/TIFF image, as its destination's extension says. */
int cli_sw_write_result(sg_output *o, const sg_tensor *result);

/* The overlay picture of labels over the input image, as PNG or TIFF. */
int cli_sw_write_overlay(sg_output *o, const sg_image *pixels, const sg_tensor *labels);

#endif
