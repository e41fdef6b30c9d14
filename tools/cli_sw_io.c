/* Inputs and outputs of a sliding-window `segrt run` (cli_sw_io.h). */
#include "cli_sw_io.h"

#include "cli_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define META_MAX_VALUES 16

/* "0.1,0.2,0.3": 1 to META_MAX_VALUES finite numbers; -1 if malformed. */
static int parse_list(const char *s, double *out)
{
    int n = 0;
    while (*s && n < META_MAX_VALUES) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || (*end && *end != ','))
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

int cli_sw_model_defaults(const segrt_model *model, const char *path, cli_sw_opts *so)
{
    const char *roi = segrt_model_metadata_value(model, "segrt.roi");
    const char *overlap = segrt_model_metadata_value(model, "segrt.overlap");
    double v[META_MAX_VALUES];
    if (!so->on) {
        if (!roi)
            return cli_usage_error("%s: give the window with --roi: the model's metadata has no segrt.roi", path);
        int n = parse_list(roi, v);
        if (n < 1 || n > CLI_SW_MAX_DIMS)
            return cli_usage_error("%s: metadata segrt.roi is `%s`; it wants 1 to %d window sizes", path, roi,
                                   CLI_SW_MAX_DIMS);
        for (int i = 0; i < n; i++) {
            if (v[i] != floor(v[i]) || v[i] < 1 || v[i] > 1e9)
                return cli_usage_error("%s: metadata segrt.roi is `%s`: sizes must be positive integers", path, roi);
            so->roi[i] = (int64_t)v[i];
        }
        so->n_roi = n;
        so->on = true;
    }
    if (so->n_overlap == 0 && overlap) {
        int n = parse_list(overlap, v);
        if (n < 1 || n > CLI_SW_MAX_DIMS)
            return cli_usage_error("%s: metadata segrt.overlap is `%s`; it wants 1 to %d fractions", path, overlap,
                                   CLI_SW_MAX_DIMS);
        for (int i = 0; i < n; i++)
            so->overlap[i] = v[i];
        so->n_overlap = n;
    }
    /* A slide's resolution: the model's where --mpp is not given (the job
     * reads the same key; taken here so that the image's shape the command
     * line checks is the one the job runs). */
    const char *mpp = segrt_model_metadata_value(model, "segrt.mpp");
    if (so->sw.mpp <= 0 && mpp) {
        if (parse_list(mpp, v) != 1 || !(v[0] > 0))
            return cli_usage_error("%s: metadata segrt.mpp is `%s`; it wants one number > 0 (microns per pixel)",
                                   path, mpp);
        so->sw.mpp = v[0];
    }
    return CLI_OK;
}

bool cli_sw_is_image_output(const char *path)
{
    return (cli_files_format(path) & (CLI_PNG | CLI_TIFF)) != 0;
}
