/* `segrt run MODEL CT.nii.gz ...`: the preprocessing options of a volume
 * job (docs/preprocess.md), read into settings and resolved against the
 * model's metadata or an nnU-Net model folder. */
#ifndef SEGRT_CLI_PREP_H
#define SEGRT_CLI_PREP_H

#include "cli.h"

#define CLI_PREP_MAX_SETS 32

typedef struct cli_prep_opts {
    /* Settings as segrt_preprocess_set takes them, in the order given. */
    int32_t n_set;
    const char *key[CLI_PREP_MAX_SETS];
    const char *value[CLI_PREP_MAX_SETS];
    /* --intensity, one per channel, joined with ';'. */
    int32_t n_intensity;
    char intensity[1024];
    const char *nnunet_dir, *nnunet_config; /* --nnunet-plans DIR CONFIG */
    bool no_preprocess;                     /* --no-preprocess */
    bool any;                               /* some preprocessing option was given */
    segrt_preprocess p;                     /* resolved (cli_prep_resolve) */
} cli_prep_opts;

#define CLI_PREP_USAGE                                                                                \
    "volume preprocessing (NIfTI, DICOM; docs/preprocess.md): as the model's segrt.preprocess.*\n"   \
    "  metadata declares, each option below overriding it; labels come back in the input's grid.\n"  \
    "  --orientation CODES        reorient to CODES first (RAS, LPS, ...; MONAI's Orientationd)\n"  \
    "  --spacing D,H,W            resample to this spacing in mm (one value: all axes; none: off)\n"  \
    "  --intensity SCHEME         ct:LO,HI,MEAN,STD | zscore[:masked] | range:AMIN,AMAX,BMIN,BMAX[,clip]\n" \
    "                             | rescale01 | none; repeat it for one scheme per channel\n"          \
    "  --intensity-first          intensities before resampling (nnU-Net) rather than after (MONAI)\n" \
    "  --crop-foreground[=nonzero|T]  crop to voxels non-zero (default) or above T in any channel\n"  \
    "  --crop-margin M[,M,M]      voxels kept around the foreground\n"                               \
    "  --interp linear|cubic      the image's resampling (cubic: nnU-Net's third order)\n"           \
    "  --result-interp linear|nearest  class scores resampled then argmax, or labels by nearest\n"   \
    "  --result-probs             resample probabilities (MONAI's Invertd), not logits\n"           \
    "  --resample-grid nnunet|monai  where resampled voxels lie (default nnunet)\n"                  \
    "  --axes dhw|whd             the network's axes: depth, height, width (default; nnU-Net's) or\n" \
    "                             width, height, depth (MONAI's and nibabel's; --roi in that order)\n" \
    "  --nnunet-plans DIR CONFIG  an nnU-Net v2 model folder's plans.json and dataset.json: its\n"  \
    "                             preprocessing and window (patch size, overlap 0.5, Gaussian blend,\n" \
    "                             nnU-Net's grid, mirroring; --tta none, --roi ... override them)\n" \
    "  --no-preprocess            run on the volume as read, whatever the model declares\n"

/* Consumes the preprocessing option at argv[*i] (and its values): 1 if it
 * was one, 0 if not, -1 after reporting a usage error. */
int cli_prep_option(cli_prep_opts *o, int argc, char **argv, int *i);

/* Whether path is a volume by its bytes: a NIfTI file, a DICOM file or a
 * folder holding DICOM files. */
bool cli_prep_is_volume(const char *path);

/* The preprocessing of a job over `in` (NULL: a folder of volumes), into
 * o->p: none asked of an input that is not a volume (a usage error
 * otherwise); for a volume, the
 * nnU-Net folder's (filling *window with its window options) or the
 * model's metadata, then the options given. *declared is whether any
 * source declares something. Returns an exit code. */
int cli_prep_resolve(cli_prep_opts *o, const segrt_model *model, const char *in, segrt_window_job_options *window,
                     bool *nnunet, bool *declared);

#endif
