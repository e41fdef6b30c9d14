/* A medical volume's preprocessing (segrt_preprocess, segrt.h) as a plan
 * over one volume: forward from the volume as read (float32, channels x
 * depth x height x width, host memory) to the networks' image in their
 * grid, and back from the networks' class scores to labels in the
 * volume's own grid. Steps run on the device of the models through the
 * backend's volume operations (backend/backend_volume.h) when there is
 * one, else on the host with the same numbers within float rounding.
 *
 * The job (job_window.c) plans once the volume's header is known, runs
 * forward once its samples are read, runs the windows over the image, and
 * back over their result. */
#ifndef SG_PIPELINE_VOL_PREP_H
#define SG_PIPELINE_VOL_PREP_H

#include "core/status.h"
#include "core/tensor.h"
#include "segrt.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sg_prep sg_prep;

/* Plans p over a volume of `channels` x dims (depth, height, width) lying
 * at g. Reads no samples: the crop box, which depends on them, is found
 * by sg_prep_forward. device < 0: the host; else the CUDA device of the
 * models. INVALID_ARGUMENT naming what p asks that cannot be done (an
 * orientation string that is not three distinct axis codes, a transpose
 * that is not a permutation, per-channel intensities for another channel
 * count, a spacing <= 0 on some axes only, a grid past segrt's limits),
 * OUT_OF_MEMORY. p->source (when set) prefixes messages. */
sg_status sg_prep_plan(const segrt_preprocess *p, int64_t channels, const int64_t dims[3], const segrt_geometry *g,
                       int32_t device, sg_prep **out);

/* Whether the plan changes nothing (no step does anything): the job then
 * runs the windows over the volume as read. */
bool sg_prep_is_identity(const sg_prep *pp);

/* Forward: volume (float32 channels x dims, host memory) to the networks'
 * image, float32 1 x C x D' x H' x W' in the plan's memory (device memory
 * from segrt_device_alloc, freed with segrt_device_free; host memory
 * freed with free()). Finds the crop box. One call per plan. */
sg_status sg_prep_forward(sg_prep *pp, const float *volume, segrt_tensor *image);

/* The networks' grid after sg_prep_forward: its dims as the networks'
 * image has them (in the networks' axes, width first where the
 * preprocessing's axes are WHD) and where it lies (LPS, as
 * segrt_geometry, for the grid in depth, height, width), for reports and
 * messages. */
void sg_prep_model_grid(const sg_prep *pp, int64_t dims[3], segrt_geometry *g);

/* Back: scores (float32 1 x K x the networks' grid (sg_prep_model_grid's
 * dims), in the plan's memory: the
 * networks' logits, or probabilities where the preprocessing says
 * result_probs) to labels in the volume's grid: *labels gets a host
 * tensor 1 x 1 x depth x height x width (uint8 when K <= 256, else
 * uint16), malloc'd (free labels->data). The crop's outside is class 0. */
sg_status sg_prep_back(sg_prep *pp, const segrt_tensor *scores, segrt_tensor *labels);

/* The device or host bytes forward and back hold at their peak beside
 * the image and the scores (for the job's memory checks), with K classes. */
uint64_t sg_prep_scratch_bytes(const sg_prep *pp, int64_t classes);

void sg_prep_free(sg_prep *pp);

#endif
