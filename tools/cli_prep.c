/* The preprocessing options of `segrt run` over a volume (cli_prep.h).
 * Each option is one of segrt_preprocess_set's settings, in the same text
 * as the model's metadata keys, checked as it is read so that a typo is a
 * usage error before any model loads. */
#include "cli_prep.h"

#include <stdio.h>
#include <string.h>

/* A setting checked on its own now and recorded for cli_prep_resolve. */
static int record(cli_prep_opts *o, const char *opt, const char *key, const char *value)
{
    segrt_preprocess scratch;
    segrt_preprocess_init(&scratch);
    if (segrt_preprocess_set(&scratch, key, value) != SEGRT_OK)
        return cli_usage_error("%s: %s", opt, segrt_last_error());
    if (o->n_set == CLI_PREP_MAX_SETS)
        return cli_usage_error("%s: more than %d preprocessing options", opt, CLI_PREP_MAX_SETS);
    o->key[o->n_set] = key;
    o->value[o->n_set++] = value;
    return CLI_OK;
}

int cli_prep_option(cli_prep_opts *o, int argc, char **argv, int *i)
{
    static const struct {
        const char *opt, *key;
    } valued[] = {{"--orientation", "orientation"},     {"--spacing", "spacing"},
                  {"--crop-margin", "crop_margin"},     {"--interp", "image_interp"},
                  {"--result-interp", "result_interp"}, {"--resample-grid", "grid"},
                  {"--axes", "axes"}};
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) {
        if (strcmp(a, valued[k].opt) != 0)
            continue;
        if (!v)
            return cli_usage_error("%s wants a value (segrt run --help)", a), -1;
        if (record(o, a, valued[k].key, v) != CLI_OK)
            return -1;
        o->any = true;
        ++*i;
        return 1;
    }
    if (strcmp(a, "--intensity") == 0) {
        if (!v)
            return cli_usage_error("--intensity wants a scheme such as ct:-1000,1000,50,200 or zscore"), -1;
        segrt_preprocess scratch;
        segrt_preprocess_init(&scratch);
        if (strchr(v, ';') || segrt_preprocess_set(&scratch, "intensity", v) != SEGRT_OK)
            return cli_usage_error("--intensity: %s",
                                   strchr(v, ';') ? "one channel's scheme per --intensity" : segrt_last_error()),
                   -1;
        size_t used = strlen(o->intensity), n = strlen(v);
        if (o->n_intensity == SEGRT_PREPROCESS_MAX_CHANNELS || used + n + 2 > sizeof o->intensity)
            return cli_usage_error("--intensity: more channels' schemes than segrt takes (%d)",
                                   SEGRT_PREPROCESS_MAX_CHANNELS),
                   -1;
        snprintf(o->intensity + used, sizeof o->intensity - used, "%s%s", used ? ";" : "", v);
        o->n_intensity++;
        ++*i;
    } else if (strcmp(a, "--intensity-first") == 0) {
        if (record(o, a, "intensity_first", "1") != CLI_OK)
            return -1;
    } else if (strcmp(a, "--result-probs") == 0) {
        if (record(o, a, "result_probs", "1") != CLI_OK)
            return -1;
    } else if (strcmp(a, "--crop-foreground") == 0 || strncmp(a, "--crop-foreground=", 18) == 0) {
        const char *value = a[17] == '=' ? a + 18 : "nonzero";
        if (strcmp(value, "none") == 0)
            return cli_usage_error("--crop-foreground wants nonzero or a threshold, not none"), -1;
        if (record(o, "--crop-foreground", "crop", value) != CLI_OK)
            return -1;
    } else if (strcmp(a, "--nnunet-plans") == 0) {
        if (*i + 2 >= argc)
            return cli_usage_error("--nnunet-plans wants an nnU-Net model folder and a configuration, e.g. "
                                   "--nnunet-plans Dataset003_Liver/nnUNetTrainer__nnUNetPlans__3d_fullres "
                                   "3d_fullres"),
                   -1;
        o->nnunet_dir = argv[*i + 1];
        o->nnunet_config = argv[*i + 2];
        *i += 2;
    } else if (strcmp(a, "--no-preprocess") == 0) {
        o->no_preprocess = true;
    } else {
        return 0;
    }
    o->any = true;
    return 1;
}

bool cli_prep_is_volume(const char *path)
{
    segrt_file_format f = segrt_file_format_of_file(path);
    return f == SEGRT_FILE_NIFTI || f == SEGRT_FILE_DICOM;
}

int cli_prep_resolve(cli_prep_opts *o, const segrt_model *model, const char *in, segrt_window_job_options *window,
                     bool *nnunet, bool *declared)
{
    segrt_status s;
    *nnunet = false;
    *declared = false;
    segrt_preprocess_init(&o->p);
    if (in && !cli_prep_is_volume(in)) {
        if (o->any)
            return cli_usage_error("%s: preprocessing options apply to volumes (NIfTI, DICOM)", in);
        return CLI_OK;
    }
    if (o->no_preprocess) {
        if (o->n_set || o->n_intensity || o->nnunet_dir)
            return cli_usage_error("--no-preprocess goes alone: it runs on the volume as read");
        return CLI_OK;
    }
    int32_t from_model = 0;
    if (o->nnunet_dir) {
        if ((s = segrt_preprocess_from_nnunet(o->nnunet_dir, o->nnunet_config, &o->p, window)) != SEGRT_OK)
            return cli_fail(s);
        *nnunet = true;
    } else if ((s = segrt_preprocess_from_model(model, &o->p, &from_model)) != SEGRT_OK) {
        return cli_fail(s);
    }
    for (int32_t k = 0; k < o->n_set; k++)
        if ((s = segrt_preprocess_set(&o->p, o->key[k], o->value[k])) != SEGRT_OK)
            return cli_fail(s);
    if (o->n_intensity && (s = segrt_preprocess_set(&o->p, "intensity", o->intensity)) != SEGRT_OK)
        return cli_fail(s);
    *declared = *nnunet || from_model || o->n_set || o->n_intensity;
    if (o->n_set || o->n_intensity)
        o->p.source = *nnunet || from_model ? "the command line and the model's preprocessing" : "the command line";
    return CLI_OK;
}
