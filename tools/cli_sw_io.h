/* What `segrt run` takes from a model for a sliding-window run: the
 * window from its metadata (the library's file job reads the image and
 * normalises it; segrt.h, segrt_window_job_run).
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

/* The window and overlap from the model's metadata where the command
 * line gave none. Returns an exit code (usage errors name the model). */
int cli_sw_model_defaults(const segrt_model *model, const char *path, cli_sw_opts *so);

/* Whether path names an image file segrt writes (.png, .tif, .tiff). */
bool cli_sw_is_image_output(const char *path);

#endif
