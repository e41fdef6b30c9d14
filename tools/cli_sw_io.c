/* Inputs and outputs of a sliding-window `segrt run` (cli_sw_io.h). */
#include "cli_sw_io.h"

#include "cli_files.h"

#include "io/npy.h"
#include "pipeline/overlay.h"

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
        if (n < 1 || n > SG_SW_MAX_DIMS)
            return cli_usage_error("%s: metadata segrt.roi is `%s`; it wants 1 to %d window sizes", path, roi,
                                   SG_SW_MAX_DIMS);
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
        if (n < 1 || n > SG_SW_MAX_DIMS)
            return cli_usage_error("%s: metadata segrt.overlap is `%s`; it wants 1 to %d fractions", path, overlap,
                                   SG_SW_MAX_DIMS);
        for (int i = 0; i < n; i++)
            so->overlap[i] = v[i];
        so->n_overlap = n;
    }
    return CLI_OK;
}

/* A per-channel list from metadata key: C values, or one for all. */
static int channel_values(const segrt_model *model, const char *model_path, const char *key, int64_t C,
                          double fallback, double *out)
{
    const char *s = segrt_model_metadata_value(model, key);
    for (int64_t c = 0; c < C; c++)
        out[c] = fallback;
    if (!s)
        return CLI_OK;
    double v[META_MAX_VALUES];
    int n = parse_list(s, v);
    if (n < 1 || (n != 1 && n != C))
        return cli_usage_error("%s: metadata %s is `%s`; the image has %lld channels (give one value or one each)",
                               model_path, key, s, (long long)C);
    for (int64_t c = 0; c < C; c++)
        out[c] = v[n == 1 ? 0 : c];
    return CLI_OK;
}

/* x = (x * scale - mean[c]) / std[c], as the model was trained. */
static int normalise(const segrt_model *model, const char *model_path, sg_tensor *t)
{
    int64_t C = t->dims[1], plane = 1;
    if (C > META_MAX_VALUES)
        return CLI_OK;
    for (int32_t d = 2; d < t->rank; d++)
        plane *= t->dims[d];
    double scale = 1.0, mean[META_MAX_VALUES], std[META_MAX_VALUES];
    const char *s = segrt_model_metadata_value(model, "segrt.input.scale");
    if (s) {
        double v[META_MAX_VALUES];
        if (parse_list(s, v) != 1 || v[0] == 0.0)
            return cli_usage_error("%s: metadata segrt.input.scale is `%s`; it wants one non-zero number",
                                   model_path, s);
        scale = v[0];
    }
    int rc;
    if ((rc = channel_values(model, model_path, "segrt.input.mean", C, 0.0, mean)) != CLI_OK ||
        (rc = channel_values(model, model_path, "segrt.input.std", C, 1.0, std)) != CLI_OK)
        return rc;
    for (int64_t c = 0; c < C; c++)
        if (!(std[c] > 0.0))
            return cli_usage_error("%s: metadata segrt.input.std has %g; each must be > 0", model_path, std[c]);
    float *x = t->data;
    for (int64_t n = 0; n < t->dims[0]; n++)
        for (int64_t c = 0; c < C; c++) {
            float *p = x + (n * C + c) * plane;
            float sc = (float)scale, m = (float)mean[c], sd = (float)std[c];
            for (int64_t i = 0; i < plane; i++) /* in float32, step by step, as numpy and torch do it */
                p[i] = (p[i] * sc - m) / sd;
        }
    return CLI_OK;
}

int cli_sw_probe_input(const char *path, sg_tensor *image, uint64_t *extra_bytes)
{
    segrt_status s;
    memset(image, 0, sizeof *image);
    *extra_bytes = 0;
    if (!sg_image_is_image_file(path))
        return (s = sg_npy_probe(path, image)) == SEGRT_OK ? CLI_OK : cli_fail(s);
    sg_image_info info;
    if ((s = sg_image_probe(path, &info)) != SEGRT_OK)
        return cli_fail(s);
    /* As sg_image_to_tensor gives it: alpha dropped, pages a spatial axis. */
    int32_t c = info.channels == 2 || info.channels == 4 ? info.channels - 1 : info.channels;
    image->dtype = SEGRT_DTYPE_FLOAT32;
    image->dims[image->rank++] = 1;
    image->dims[image->rank++] = c;
    if (info.depth > 1)
        image->dims[image->rank++] = info.depth;
    image->dims[image->rank++] = info.height;
    image->dims[image->rank++] = info.width;
    /* The pixels stay beside the tensor (the overlay draws over them), and
     * the decoder holds its scratch while it reads. */
    *extra_bytes = info.pixel_bytes + info.scratch_bytes;
    return CLI_OK;
}

int cli_sw_read_input(const char *path, const segrt_model *model, const char *model_path, bool raw,
                      sg_tensor *image, sg_image *pixels)
{
    segrt_status s;
    memset(pixels, 0, sizeof *pixels);
    if (!sg_image_is_image_file(path)) {
        if ((s = sg_npy_read(path, image)) != SEGRT_OK)
            return cli_fail(s);
        return CLI_OK;
    }
    if ((s = sg_image_read(path, pixels)) != SEGRT_OK || (s = sg_image_to_tensor(pixels, false, image)) != SEGRT_OK)
        return cli_fail(s);
    return raw ? CLI_OK : normalise(model, model_path, image);
}

bool cli_sw_is_image_output(const char *path)
{
    return (cli_files_format(path) & (CLI_PNG | CLI_TIFF)) != 0;
}

/* A write into a checked, open output fails only at run time (a full
 * disk, say): exit code 1. */
static int write_failed(void)
{
    fprintf(stderr, "segrt: %s\n", segrt_last_error());
    return CLI_RUNTIME;
}

int cli_sw_write_result(sg_output *o, const sg_tensor *result)
{
    const char *path = sg_output_path(o);
    if (!cli_sw_is_image_output(path))
        return sg_npy_write_to(o, result) == SEGRT_OK ? CLI_OK : write_failed();
    sg_image img;
    segrt_status s = sg_image_from_labels(result, &img);
    if (s != SEGRT_OK) {
        sg_error_prefix(s, "%s: ", path);
        return cli_fail(s);
    }
    s = sg_image_write_to(o, &img);
    sg_image_free(&img);
    return s == SEGRT_OK ? CLI_OK : write_failed();
}

int cli_sw_write_overlay(sg_output *o, const sg_image *pixels, const sg_tensor *labels)
{
    sg_image img;
    segrt_status s = sg_overlay_render(pixels, labels, NULL, &img);
    if (s != SEGRT_OK) {
        sg_error_prefix(s, "%s: ", sg_output_path(o));
        return cli_fail(s);
    }
    s = sg_image_write_to(o, &img);
    sg_image_free(&img);
    return s == SEGRT_OK ? CLI_OK : write_failed();
}
