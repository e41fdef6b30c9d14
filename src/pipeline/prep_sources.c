/* Where a volume job's preprocessing comes from (segrt.h, "Preprocessing a
 * medical volume"): settings as text (segrt_preprocess_set: the metadata
 * keys segrt.preprocess.* and `segrt run`'s options share one syntax, so
 * that a model's metadata and a command line say the same thing the same
 * way), the model's metadata, and an nnU-Net v2 model folder's plans.json
 * and dataset.json read with cJSON. Only settings are read here; vol_prep.c
 * runs them. docs/preprocess.md documents the keys and the nnU-Net
 * mapping. */
#include "core/file.h"
#include "core/status.h"
#include "segrt.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PREP_MAX_LIST 8
#define PREP_MAX_SPACING 1e5      /* mm: past any scanner's field of view */
#define PREP_MAX_MARGIN 1000000   /* voxels */
#define NN_MAX_JSON (64ull << 20) /* a plans.json is kilobytes; a v1 dataset.json lists cases */
#define NN_MAX_INHERIT 16
#define NN_ANISOTROPY 3.0 /* nnU-Net's ANISO_THRESHOLD */

/* --- settings as text ----------------------------------------------------- */

/* "1.5, 0.8,0.8": up to max finite numbers, comma separated (spaces
 * around them allowed); the count, or -1 where malformed or longer. */
static int parse_numbers(const char *s, double *out, int max)
{
    int n = 0;
    for (;;) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || n == max)
            return -1;
        out[n++] = v;
        while (isspace((unsigned char)*end))
            end++;
        if (!*end)
            return n;
        if (*end != ',')
            return -1;
        s = end + 1;
    }
}

/* As parse_numbers, each an integer in [lo, hi]. */
static int parse_ints(const char *s, int64_t *out, int max, double lo, double hi)
{
    double v[PREP_MAX_LIST];
    int n = parse_numbers(s, v, max < PREP_MAX_LIST ? max : PREP_MAX_LIST);
    for (int i = 0; i < n; i++) {
        if (v[i] != floor(v[i]) || v[i] < lo || v[i] > hi)
            return -1;
        out[i] = (int64_t)v[i];
    }
    return n;
}

static bool is_word(const char *s, const char *word)
{
    return strcasecmp(s, word) == 0;
}

static bool parse_bool(const char *s, int32_t *out)
{
    if (is_word(s, "1") || is_word(s, "true") || is_word(s, "yes"))
        *out = 1;
    else if (is_word(s, "0") || is_word(s, "false") || is_word(s, "no"))
        *out = 0;
    else
        return false;
    return true;
}

static bool parse_interp(const char *s, bool cubic, segrt_interp *out)
{
    if (is_word(s, "nearest"))
        *out = SEGRT_INTERP_NEAREST;
    else if (is_word(s, "linear"))
        *out = SEGRT_INTERP_LINEAR;
    else if (cubic && is_word(s, "cubic"))
        *out = SEGRT_INTERP_CUBIC;
    else
        return false;
    return true;
}

/* The axis (0: R/L, 1: A/P, 2: S/I) of an orientation code, or -1. */
static int code_axis(char c)
{
    switch (toupper((unsigned char)c)) {
    case 'R':
    case 'L':
        return 0;
    case 'A':
    case 'P':
        return 1;
    case 'S':
    case 'I':
        return 2;
    default:
        return -1;
    }
}

/* One channel's scheme: none | ct:LO,HI,MEAN,STD | zscore[:masked] |
 * range:AMIN,AMAX,BMIN,BMAX[,clip] | rescale01. */
static const char *parse_scheme(const char *tok, segrt_intensity *out)
{
    memset(out, 0, sizeof *out);
    double v[5];
    if (is_word(tok, "none")) {
        out->kind = SEGRT_INTENSITY_NONE;
    } else if (is_word(tok, "zscore") || is_word(tok, "zscore:masked")) {
        out->kind = SEGRT_INTENSITY_ZSCORE;
        out->masked = tok[6] != '\0';
    } else if (is_word(tok, "rescale01")) {
        out->kind = SEGRT_INTENSITY_RESCALE01;
    } else if (strncasecmp(tok, "ct:", 3) == 0) {
        if (parse_numbers(tok + 3, v, 4) != 4)
            return "ct wants four numbers: ct:LO,HI,MEAN,STD (the 0.5 and 99.5 percentiles, mean and std)";
        if (!(v[0] <= v[1]) || !(v[3] > 0.0))
            return "ct:LO,HI,MEAN,STD wants LO <= HI and STD > 0";
        out->kind = SEGRT_INTENSITY_CT;
        out->lo = v[0], out->hi = v[1], out->mean = v[2], out->std = v[3];
    } else if (strncasecmp(tok, "range:", 6) == 0) {
        char buf[256];
        size_t n = strlen(tok + 6);
        if (n >= sizeof buf)
            return "range:AMIN,AMAX,BMIN,BMAX[,clip] is too long";
        memcpy(buf, tok + 6, n + 1);
        bool clip = false;
        char *comma = strrchr(buf, ',');
        if (comma) {
            char *w = comma + 1;
            while (isspace((unsigned char)*w))
                w++;
            if (is_word(w, "clip")) {
                clip = true;
                *comma = '\0';
            }
        }
        if (parse_numbers(buf, v, 4) != 4)
            return "range wants four numbers and an optional clip: range:AMIN,AMAX,BMIN,BMAX[,clip]";
        if (v[0] == v[1])
            return "range:AMIN,AMAX,BMIN,BMAX wants AMIN != AMAX";
        out->kind = SEGRT_INTENSITY_RANGE;
        out->a_min = v[0], out->a_max = v[1], out->b_min = v[2], out->b_max = v[3];
        out->clip = clip;
    } else {
        return "an intensity scheme is none, ct:LO,HI,MEAN,STD, zscore, zscore:masked, "
               "range:AMIN,AMAX,BMIN,BMAX[,clip] or rescale01 (one for all channels, or one per channel "
               "separated by ;)";
    }
    return NULL;
}

static const char *set_intensity(segrt_preprocess *p, const char *v)
{
    segrt_intensity in[SEGRT_PREPROCESS_MAX_CHANNELS];
    int32_t n = 0;
    const char *s = v;
    for (;;) {
        const char *semi = strchr(s, ';');
        size_t len = semi ? (size_t)(semi - s) : strlen(s);
        char tok[256];
        while (len && isspace((unsigned char)*s))
            s++, len--;
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        if (len >= sizeof tok)
            return "a channel's intensity scheme is too long";
        if (n == SEGRT_PREPROCESS_MAX_CHANNELS)
            return "more channels' intensity schemes than segrt takes (8)";
        memcpy(tok, s, len);
        tok[len] = '\0';
        const char *why = parse_scheme(tok, &in[n++]);
        if (why)
            return why;
        if (!semi)
            break;
        s = semi + 1;
    }
    /* "none" alone is no intensity scheme at all. */
    if (n == 1 && in[0].kind == SEGRT_INTENSITY_NONE)
        n = 0;
    p->n_intensity = n;
    memset(p->intensity, 0, sizeof p->intensity);
    memcpy(p->intensity, in, sizeof in[0] * (size_t)n);
    return NULL;
}

static const char *set_orientation(segrt_preprocess *p, const char *v)
{
    if (!*v || is_word(v, "none")) {
        memset(p->orientation, 0, sizeof p->orientation);
        return NULL;
    }
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        int a = v[i] ? code_axis(v[i]) : -1;
        if (a < 0 || (seen & (1 << a)))
            return "an orientation is three codes, one of R/L, A/P and S/I each, such as RAS or LPS (or none)";
        seen |= 1 << a;
    }
    if (v[3])
        return "an orientation is three codes, one of R/L, A/P and S/I each, such as RAS or LPS (or none)";
    for (int i = 0; i < 3; i++)
        p->orientation[i] = (char)toupper((unsigned char)v[i]);
    p->orientation[3] = '\0';
    return NULL;
}

static const char *set_spacing(segrt_preprocess *p, const char *v)
{
    double s[3];
    if (is_word(v, "none")) {
        memset(p->spacing, 0, sizeof p->spacing);
        return NULL;
    }
    int n = parse_numbers(v, s, 3);
    if (n == 1)
        s[1] = s[2] = s[0];
    if (n != 1 && n != 3)
        return "a spacing is D,H,W in mm (or one value for all three, or none)";
    if (s[0] == 0.0 && s[1] == 0.0 && s[2] == 0.0) {
        memset(p->spacing, 0, sizeof p->spacing);
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        if (!(s[i] > 0.0 && s[i] <= PREP_MAX_SPACING))
            return "each spacing must be > 0 mm (and at most 1e5)";
    memcpy(p->spacing, s, sizeof s);
    return NULL;
}

static const char *set_transpose(segrt_preprocess *p, const char *v)
{
    int64_t t[3];
    if (parse_ints(v, t, 3, 0, 2) != 3 || t[0] == t[1] || t[0] == t[2] || t[1] == t[2])
        return "a transpose is a permutation of the array axes 0,1,2 (depth, height, width)";
    for (int i = 0; i < 3; i++)
        p->transpose[i] = (int32_t)t[i];
    return NULL;
}

static const char *set_crop(segrt_preprocess *p, const char *v)
{
    double t;
    if (is_word(v, "none")) {
        p->crop = SEGRT_CROP_NONE;
    } else if (is_word(v, "nonzero")) {
        p->crop = SEGRT_CROP_NONZERO;
    } else if (parse_numbers(v, &t, 1) == 1) {
        p->crop = SEGRT_CROP_THRESHOLD;
        p->crop_threshold = t;
    } else {
        return "a crop is none, nonzero (nnU-Net's) or a threshold (MONAI's CropForeground: voxels above it)";
    }
    return NULL;
}

static const char *set_crop_margin(segrt_preprocess *p, const char *v)
{
    int64_t m[3];
    int n = parse_ints(v, m, 3, 0, PREP_MAX_MARGIN);
    if (n == 1)
        m[1] = m[2] = m[0];
    if (n != 1 && n != 3)
        return "a crop margin is voxels, D,H,W or one value for all three, each >= 0";
    memcpy(p->crop_margin, m, sizeof m);
    return NULL;
}

static const char *set_bool(int32_t *field, const char *v)
{
    return parse_bool(v, field) ? NULL : "it wants 1 or 0 (true or false)";
}

static const char *set_interp(segrt_interp *field, const char *v, bool cubic)
{
    if (!parse_interp(v, cubic, field))
        return cubic ? "an image interpolation is nearest, linear or cubic"
                     : "a result interpolation is linear (scores resampled, then argmax) or nearest (labels)";
    return NULL;
}

static const char *set_grid(segrt_preprocess *p, const char *v)
{
    if (is_word(v, "nnunet"))
        p->grid = SEGRT_RESAMPLE_NNUNET;
    else if (is_word(v, "monai"))
        p->grid = SEGRT_RESAMPLE_MONAI;
    else
        return "a resampling grid is nnunet or monai";
    return NULL;
}

static const char *set_anisotropy(segrt_preprocess *p, const char *v)
{
    double a;
    if (parse_numbers(v, &a, 1) != 1 || !(a == 0.0 || (a >= 1.0 && a <= 1e6)))
        return "an anisotropy threshold is 0 (never resample an axis on its own) or a ratio >= 1 (nnU-Net's 3)";
    p->anisotropy = a;
    return NULL;
}

static const char *set_axes(segrt_preprocess *p, const char *v)
{
    if (is_word(v, "dhw"))
        p->axes = SEGRT_AXES_DHW;
    else if (is_word(v, "whd"))
        p->axes = SEGRT_AXES_WHD;
    else
        return "the networks' axes are dhw (depth, height, width: SimpleITK's and nnU-Net's arrays) or whd "
               "(width, height, depth: nibabel's and MONAI's)";
    return NULL;
}

/* The keys, in the order docs/preprocess.md lists them. */
static const char *const prep_keys[] = {
    "transpose", "orientation",  "crop",           "crop_margin",   "intensity",       "intensity_first", "spacing",
    "grid",      "image_interp", "image_interp_z", "result_interp", "result_interp_z", "result_probs",    "anisotropy",
    "axes"};
#define N_PREP_KEYS (sizeof prep_keys / sizeof prep_keys[0])

/* Sets key of p from v: NULL, or why v is refused (p then partly set:
 * callers work on a copy). */
static const char *apply(segrt_preprocess *p, const char *key, const char *v)
{
    if (strcmp(key, "orientation") == 0)
        return set_orientation(p, v);
    if (strcmp(key, "spacing") == 0)
        return set_spacing(p, v);
    if (strcmp(key, "transpose") == 0)
        return set_transpose(p, v);
    if (strcmp(key, "crop") == 0)
        return set_crop(p, v);
    if (strcmp(key, "crop_margin") == 0)
        return set_crop_margin(p, v);
    if (strcmp(key, "intensity") == 0)
        return set_intensity(p, v);
    if (strcmp(key, "intensity_first") == 0)
        return set_bool(&p->intensity_first, v);
    if (strcmp(key, "image_interp") == 0)
        return set_interp(&p->image_interp, v, true);
    if (strcmp(key, "image_interp_z") == 0)
        return set_interp(&p->image_interp_z, v, true);
    if (strcmp(key, "result_interp") == 0)
        return set_interp(&p->result_interp, v, false);
    if (strcmp(key, "result_interp_z") == 0)
        return set_interp(&p->result_interp_z, v, false);
    if (strcmp(key, "result_probs") == 0)
        return set_bool(&p->result_probs, v);
    if (strcmp(key, "grid") == 0)
        return set_grid(p, v);
    if (strcmp(key, "anisotropy") == 0)
        return set_anisotropy(p, v);
    if (strcmp(key, "axes") == 0)
        return set_axes(p, v);
    return "no such setting (orientation, spacing, transpose, crop, crop_margin, intensity, intensity_first, "
           "image_interp, image_interp_z, result_interp, result_interp_z, result_probs, grid, anisotropy, axes)";
}

segrt_status segrt_preprocess_set(segrt_preprocess *p, const char *key, const char *value)
{
    if (!p || !key || !value)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_preprocess_set: p, key and value must not be NULL");
    segrt_preprocess q = *p;
    const char *why = apply(&q, key, value);
    if (why)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "preprocessing %s `%s`: %s", key, value, why);
    *p = q;
    return SEGRT_OK;
}

segrt_status segrt_preprocess_from_model(const segrt_model *model, segrt_preprocess *p, int32_t *declared)
{
    if (!model || !p)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_preprocess_from_model: model and p must not be NULL");
    segrt_model_meta meta;
    const char *path = segrt_model_metadata(model, &meta) == SEGRT_OK && meta.path ? meta.path : "the model";
    segrt_preprocess q;
    segrt_preprocess_init(&q);
    int32_t any = 0;
    for (size_t k = 0; k < N_PREP_KEYS; k++) {
        char name[64];
        snprintf(name, sizeof name, "segrt.preprocess.%s", prep_keys[k]);
        const char *v = segrt_model_metadata_value(model, name);
        if (!v)
            continue;
        any = 1;
        const char *why = apply(&q, prep_keys[k], v);
        if (why)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: metadata %s is `%s`: %s", path, name, v, why);
    }
    if (any)
        q.source = "the model's metadata (segrt.preprocess.*)";
    *p = q;
    if (declared)
        *declared = any;
    return SEGRT_OK;
}

/* --- nnU-Net v2 model folders ---------------------------------------------- */

typedef struct nn_ctx {
    char plans_path[4096], dataset_path[4096];
    cJSON *plans, *dataset;
    const cJSON *configs;
    const cJSON *chain[NN_MAX_INHERIT]; /* configurations[config], then what each inherits from */
    const char *names[NN_MAX_INHERIT];
    int n_chain;
} nn_ctx;

/* A message naming the file and the key: "PATH: KEY: what". */
static sg_status nn_fail(sg_status s, const char *path, const char *key, const char *fmt, ...) SG_PRINTF(4, 5);
static sg_status nn_fail(sg_status s, const char *path, const char *key, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sg_error(s, "%s: %s: %s", path, key, what);
}

/* The whole file parsed; its root must be an object. */
static sg_status load_json(const char *path, cJSON **out)
{
    uint8_t *buf;
    size_t size;
    SG_TRY(sg_read_file(path, NN_MAX_JSON, "64 MiB (segrt's limit for a JSON file)", &buf, &size));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf, size, &end, 0);
    if (!root) {
        size_t at =
            end && end >= (const char *)buf && end <= (const char *)buf + size ? (size_t)(end - (char *)buf) : size;
        size_t line = 1, col = 1;
        for (size_t i = 0; i < at; i++) {
            if (buf[i] == '\n')
                line++, col = 1;
            else
                col++;
        }
        free(buf);
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: not valid JSON (at line %zu, column %zu)", path, line, col);
    }
    free(buf);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: its JSON is not an object", path);
    }
    *out = root;
    return SEGRT_OK;
}

/* key in the configuration or what it inherits from (the nearest wins),
 * with the name of the configuration that holds it; NULL where absent. */
static const cJSON *nn_get(const nn_ctx *c, const char *key, const char **where)
{
    for (int i = 0; i < c->n_chain; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->chain[i], key);
        if (v) {
            *where = c->names[i];
            return v;
        }
    }
    return NULL;
}

/* "configurations.3d_fullres.spacing" into buf. */
static const char *nn_key(char *buf, size_t n, const char *config, const char *key)
{
    snprintf(buf, n, "configurations.%s%s%s", config, *key ? "." : "", key);
    return buf;
}

/* The configuration and the chain of inherits_from, checked. */
static sg_status nn_chain(nn_ctx *c, const char *config)
{
    c->configs = cJSON_GetObjectItemCaseSensitive(c->plans, "configurations");
    if (!cJSON_IsObject(c->configs))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, "configurations", "absent or not an object");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(c->configs, config);
    if (!cfg) {
        char list[512] = "";
        size_t used = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, c->configs)
        {
            if (!it->string || used + strlen(it->string) + 3 >= sizeof list)
                continue;
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", it->string);
        }
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no configuration `%s`; it has %s", c->plans_path, config,
                        used ? list : "none");
    }
    const char *name = config;
    while (cfg) {
        char k[256];
        if (!cJSON_IsObject(cfg))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, name, ""), "not an object");
        for (int i = 0; i < c->n_chain; i++)
            if (c->chain[i] == cfg)
                return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, name, "inherits_from"),
                               "the chain of inherits_from loops back to `%s`", name);
        if (c->n_chain == NN_MAX_INHERIT)
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, name, "inherits_from"),
                           "more than %d configurations inherit from each other", NN_MAX_INHERIT);
        c->chain[c->n_chain] = cfg;
        c->names[c->n_chain++] = name;
        const cJSON *parent = cJSON_GetObjectItemCaseSensitive(cfg, "inherits_from");
        if (!parent || cJSON_IsNull(parent))
            break;
        if (!cJSON_IsString(parent))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, name, "inherits_from"),
                           "not a configuration's name");
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(c->configs, parent->valuestring);
        if (!next)
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, name, "inherits_from"),
                           "`%s` is not among the configurations", parent->valuestring);
        name = parent->valuestring;
        cfg = next;
    }
    return SEGRT_OK;
}

/* A JSON array of n numbers (each finite), into out; false otherwise. */
static bool json_numbers(const cJSON *a, int n, double *out)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return false;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return false;
        out[i++] = it->valuedouble;
    }
    return true;
}

static int json_len(const cJSON *a)
{
    return cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
}

/* The spatial dims of the configuration (from patch_size and spacing),
 * which must be 3. */
static sg_status nn_grid(const nn_ctx *c, const char *config, segrt_preprocess *p, segrt_window_job_options *o)
{
    const char *pwhere = config, *swhere = config, *where = config;
    char k[256];
    const cJSON *patch = nn_get(c, "patch_size", &pwhere);
    const cJSON *spacing = nn_get(c, "spacing", &swhere);
    int np = json_len(patch), ns = json_len(spacing);
    if (np == 2 || ns == 2)
        return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path,
                       np == 2 ? nn_key(k, sizeof k, pwhere, "patch_size") : nn_key(k, sizeof k, swhere, "spacing"),
                       "a 2-D configuration: segrt runs nnU-Net's 3-D configurations (3d_fullres, 3d_lowres) over "
                       "a volume");
    double v[3];
    if (!json_numbers(patch, 3, v))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, pwhere, "patch_size"),
                       patch ? "wants three window sizes" : "absent");
    for (int i = 0; i < 3; i++) {
        if (v[i] != floor(v[i]) || v[i] < 1 || v[i] > 65536)
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, pwhere, "patch_size"),
                           "%g is not a window size (an integer, 1 to 65536)", v[i]);
        o->roi[i] = (int64_t)v[i];
    }
    if (!json_numbers(spacing, 3, v))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, swhere, "spacing"),
                       spacing ? "wants three spacings in mm" : "absent");
    for (int i = 0; i < 3; i++) {
        if (!(v[i] > 0.0 && v[i] <= PREP_MAX_SPACING))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, swhere, "spacing"),
                           "%g mm: each spacing must be > 0", v[i]);
        p->spacing[i] = v[i];
    }
    if (nn_get(c, "previous_stage", &where))
        return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path, nn_key(k, sizeof k, where, "previous_stage"),
                       "a cascade's second stage takes the first stage's segmentation as input channels; segrt "
                       "runs single-stage configurations");
    return SEGRT_OK;
}

/* transpose_forward (plans' top level, or the configuration's), and the
 * image reader's orientation. */
static sg_status nn_axes(const nn_ctx *c, segrt_preprocess *p)
{
    const char *where = NULL;
    const cJSON *t = nn_get(c, "transpose_forward", &where);
    char k[256];
    const char *key = "transpose_forward";
    if (t)
        key = nn_key(k, sizeof k, where, "transpose_forward");
    else
        t = cJSON_GetObjectItemCaseSensitive(c->plans, "transpose_forward");
    if (t) {
        double v[3];
        bool ok = json_numbers(t, 3, v);
        int seen = 0;
        for (int i = 0; ok && i < 3; i++) {
            ok = v[i] == floor(v[i]) && v[i] >= 0 && v[i] <= 2 && !(seen & (1 << (int)v[i]));
            if (ok) {
                seen |= 1 << (int)v[i];
                p->transpose[i] = (int32_t)v[i];
            }
        }
        if (!ok)
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, key, "wants a permutation of 0, 1, 2");
    }
    const cJSON *io = cJSON_GetObjectItemCaseSensitive(c->plans, "image_reader_writer");
    if (io && !cJSON_IsNull(io)) {
        if (!cJSON_IsString(io))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, "image_reader_writer", "not a class name");
        const char *s = io->valuestring;
        /* SimpleITKIO and NibabelIO give the stored array as (k, j, i), as
         * segrt reads it; NibabelIOWithReorient first reorients to RAS. */
        if (strcmp(s, "NibabelIOWithReorient") == 0)
            memcpy(p->orientation, "RAS", 4);
        else if (strcmp(s, "SimpleITKIO") != 0 && strcmp(s, "NibabelIO") != 0)
            return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path, "image_reader_writer",
                           "`%s`: segrt reads volumes as SimpleITKIO, NibabelIO and NibabelIOWithReorient do", s);
    }
    return SEGRT_OK;
}

/* One foreground intensity property of channel ch. */
static sg_status nn_property(const nn_ctx *c, const cJSON *props, int ch, const char *name, double *out)
{
    char k[256];
    snprintf(k, sizeof k, "foreground_intensity_properties_per_channel.%d.%s", ch, name);
    char idx[16];
    snprintf(idx, sizeof idx, "%d", ch);
    const cJSON *chan = cJSON_IsObject(props) ? cJSON_GetObjectItemCaseSensitive(props, idx) : NULL;
    const cJSON *v = cJSON_IsObject(chan) ? cJSON_GetObjectItemCaseSensitive(chan, name) : NULL;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, k,
                       v ? "not a number" : "absent (CTNormalization needs it)");
    *out = v->valuedouble;
    return SEGRT_OK;
}

/* normalization_schemes with use_mask_for_norm and the foreground
 * intensity properties, per channel. */
static sg_status nn_intensity(const nn_ctx *c, const char *config, int32_t *channels, segrt_preprocess *p)
{
    const char *where = config, *mwhere = config;
    char k[256];
    const cJSON *schemes = nn_get(c, "normalization_schemes", &where);
    const cJSON *masks = nn_get(c, "use_mask_for_norm", &mwhere);
    int n = json_len(schemes);
    if (n < 1)
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, where, "normalization_schemes"),
                       schemes ? "wants a list of one scheme per channel" : "absent");
    if (n > SEGRT_PREPROCESS_MAX_CHANNELS)
        return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path, nn_key(k, sizeof k, where, "normalization_schemes"),
                       "%d channels; segrt preprocesses at most %d", n, SEGRT_PREPROCESS_MAX_CHANNELS);
    if (masks && !cJSON_IsNull(masks) && json_len(masks) != n)
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, mwhere, "use_mask_for_norm"),
                       "wants %d true/false values, one per channel", n);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(c->plans, "foreground_intensity_properties_per_channel");
    bool any = false;
    for (int ch = 0; ch < n; ch++) {
        const cJSON *s = cJSON_GetArrayItem(schemes, ch);
        const cJSON *m = masks && cJSON_IsArray(masks) ? cJSON_GetArrayItem(masks, ch) : NULL;
        if (!cJSON_IsString(s))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path,
                           nn_key(k, sizeof k, where, "normalization_schemes"), "item %d is not a scheme's name", ch);
        if (m && !cJSON_IsBool(m))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, nn_key(k, sizeof k, mwhere, "use_mask_for_norm"),
                           "item %d is not true or false", ch);
        segrt_intensity *in = &p->intensity[ch];
        memset(in, 0, sizeof *in);
        const char *name = s->valuestring;
        if (strcmp(name, "CTNormalization") == 0) {
            in->kind = SEGRT_INTENSITY_CT;
            SG_TRY(nn_property(c, props, ch, "percentile_00_5", &in->lo));
            SG_TRY(nn_property(c, props, ch, "percentile_99_5", &in->hi));
            SG_TRY(nn_property(c, props, ch, "mean", &in->mean));
            SG_TRY(nn_property(c, props, ch, "std", &in->std));
            if (!(in->lo <= in->hi) || in->std < 0.0)
                return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, "foreground_intensity_properties_per_channel",
                               "channel %d: percentile_00_5 %g above percentile_99_5 %g, or std %g < 0", ch, in->lo,
                               in->hi, in->std);
            in->std = in->std > 1e-8 ? in->std : 1e-8; /* as CTNormalization divides */
        } else if (strcmp(name, "ZScoreNormalization") == 0) {
            in->kind = SEGRT_INTENSITY_ZSCORE;
            in->masked = m && cJSON_IsTrue(m);
        } else if (strcmp(name, "RescaleTo01Normalization") == 0) {
            in->kind = SEGRT_INTENSITY_RESCALE01;
        } else if (strcmp(name, "RGBTo0_1Normalization") == 0) {
            in->kind = SEGRT_INTENSITY_RANGE; /* x / 255, unclipped */
            in->a_min = 0.0, in->a_max = 255.0, in->b_min = 0.0, in->b_max = 1.0;
        } else if (strcmp(name, "NoNormalization") == 0) {
            in->kind = SEGRT_INTENSITY_NONE;
        } else {
            return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path, nn_key(k, sizeof k, where, "normalization_schemes"),
                           "`%s`: segrt has CTNormalization, ZScoreNormalization, RescaleTo01Normalization, "
                           "RGBTo0_1Normalization and NoNormalization",
                           name);
        }
        any |= in->kind != SEGRT_INTENSITY_NONE;
    }
    p->n_intensity = any ? n : 0;
    *channels = n;
    return SEGRT_OK;
}

/* nnU-Net's interpolation order as segrt's; probabilities take 0 and 1. */
static bool nn_order(double order, bool scores, segrt_interp *out)
{
    if (order == 0)
        *out = SEGRT_INTERP_NEAREST;
    else if (order == 1)
        *out = SEGRT_INTERP_LINEAR;
    else if (order == 3 && !scores)
        *out = SEGRT_INTERP_CUBIC;
    else
        return false;
    return true;
}

/* resampling_fn_KIND (must be nnU-Net's resample_data_or_seg_to_shape)
 * and its kwargs: order, order_z, force_separate_z. *separate gets
 * force_separate_z as -1 (null: nnU-Net's threshold), 0 or 1. */
static sg_status nn_resampling(const nn_ctx *c, const char *config, const char *kind, bool scores, segrt_interp *interp,
                               segrt_interp *interp_z, int *separate)
{
    const char *where = config;
    char fn[64], kw[96], k[256];
    snprintf(fn, sizeof fn, "resampling_fn_%s", kind);
    snprintf(kw, sizeof kw, "resampling_fn_%s_kwargs", kind);
    const cJSON *f = nn_get(c, fn, &where);
    if (f && !(cJSON_IsString(f) && strcmp(f->valuestring, "resample_data_or_seg_to_shape") == 0))
        return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path, nn_key(k, sizeof k, where, fn),
                       "`%s`: segrt resamples as nnU-Net's resample_data_or_seg_to_shape",
                       cJSON_IsString(f) ? f->valuestring : "(not a name)");
    /* nnU-Net's defaults: images order 3, probabilities order 1, z order 0. */
    *interp = scores ? SEGRT_INTERP_LINEAR : SEGRT_INTERP_CUBIC;
    *interp_z = SEGRT_INTERP_NEAREST;
    *separate = -1;
    const cJSON *a = nn_get(c, kw, &where);
    if (!a || cJSON_IsNull(a))
        return SEGRT_OK;
    nn_key(k, sizeof k, where, kw);
    if (!cJSON_IsObject(a))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, k, "not an object");
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(a, "order");
    const cJSON *order_z = cJSON_GetObjectItemCaseSensitive(a, "order_z");
    const cJSON *force = cJSON_GetObjectItemCaseSensitive(a, "force_separate_z");
    const cJSON *bad = order && !(cJSON_IsNumber(order) && nn_order(order->valuedouble, scores, interp)) ? order
                       : order_z && !(cJSON_IsNumber(order_z) && nn_order(order_z->valuedouble, scores, interp_z))
                           ? order_z
                           : NULL;
    if (bad && !cJSON_IsNumber(bad))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, k, "%s is not a number", bad->string);
    if (bad)
        return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->plans_path, k, "%s %g: segrt resamples %s with orders 0, 1%s",
                       bad->string, bad->valuedouble, scores ? "class scores" : "images", scores ? "" : " and 3");
    if (force && !cJSON_IsNull(force)) {
        if (!cJSON_IsBool(force))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->plans_path, k, "force_separate_z is not null, true or false");
        *separate = cJSON_IsTrue(force);
    }
    return SEGRT_OK;
}

/* dataset.json: the channel count, and labels segrt maps back by argmax
 * (region-based training is refused). */
static sg_status nn_dataset(const nn_ctx *c, int32_t channels)
{
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(c->dataset, "channel_names");
    const char *key = "channel_names";
    if (!names) {
        names = cJSON_GetObjectItemCaseSensitive(c->dataset, "modality"); /* nnU-Net v1's name */
        key = "modality";
    }
    if (names) {
        if (!cJSON_IsObject(names))
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->dataset_path, key, "not an object");
        if (cJSON_GetArraySize(names) != channels)
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->dataset_path, key,
                           "%d channels; %s's normalization_schemes has %d", cJSON_GetArraySize(names), c->plans_path,
                           channels);
    }
    if (cJSON_GetObjectItemCaseSensitive(c->dataset, "regions_class_order"))
        return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->dataset_path, "regions_class_order",
                       "a region-based model (a sigmoid per region, painted in regions_class_order): segrt maps a "
                       "volume's class scores back by argmax and does not combine regions");
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(c->dataset, "labels");
    if (!labels)
        return SEGRT_OK;
    if (!cJSON_IsObject(labels))
        return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->dataset_path, "labels", "not an object");
    const cJSON *it;
    cJSON_ArrayForEach(it, labels)
    {
        if (cJSON_IsArray(it))
            return nn_fail(SEGRT_ERROR_UNSUPPORTED, c->dataset_path, "labels",
                           "`%s` is a region (a list of labels): segrt maps a volume's class scores back by argmax "
                           "and does not combine regions",
                           it->string ? it->string : "?");
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble > 65535)
            return nn_fail(SEGRT_ERROR_INVALID_MODEL, c->dataset_path, "labels",
                           "`%s` is not a label value (an integer, 0 to 65535)", it->string ? it->string : "?");
    }
    return SEGRT_OK;
}

static sg_status nn_read(nn_ctx *c, const char *config, segrt_preprocess *p, segrt_window_job_options *o)
{
    SG_TRY(load_json(c->plans_path, &c->plans));
    SG_TRY(load_json(c->dataset_path, &c->dataset));
    SG_TRY(nn_chain(c, config));
    SG_TRY(nn_grid(c, config, p, o));
    SG_TRY(nn_axes(c, p));
    int32_t channels = 0;
    SG_TRY(nn_intensity(c, config, &channels, p));
    SG_TRY(nn_dataset(c, channels));
    int sep_data, sep_probs;
    SG_TRY(nn_resampling(c, config, "data", false, &p->image_interp, &p->image_interp_z, &sep_data));
    SG_TRY(nn_resampling(c, config, "probabilities", true, &p->result_interp, &p->result_interp_z, &sep_probs));
    /* One rule for both directions: the images' (nnU-Net's plans give the
     * same to both). force_separate_z true: any axis coarser than the
     * finest; false: never; null: nnU-Net's threshold of 3. */
    p->anisotropy = sep_data < 0 ? NN_ANISOTROPY : sep_data ? 1.0 : 0.0;
    p->crop = SEGRT_CROP_NONZERO;
    p->intensity_first = 1;
    p->grid = SEGRT_RESAMPLE_NNUNET;
    p->result_probs = 0; /* nnU-Net resamples the logits, then softmax and argmax */
    p->source = "the nnU-Net plans";
    return SEGRT_OK;
}

segrt_status segrt_preprocess_from_nnunet(const char *dir, const char *config, segrt_preprocess *p,
                                          segrt_window_job_options *o)
{
    if (!dir || !config || !p)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_preprocess_from_nnunet: dir, config and p must not be NULL");
    nn_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to read the plans", dir);
    size_t n = strlen(dir);
    const char *sep = n && dir[n - 1] == '/' ? "" : "/";
    if ((size_t)snprintf(c->plans_path, sizeof c->plans_path, "%s%splans.json", dir, sep) >= sizeof c->plans_path ||
        (size_t)snprintf(c->dataset_path, sizeof c->dataset_path, "%s%sdataset.json", dir, sep) >=
            sizeof c->dataset_path) {
        free(c);
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "an nnU-Net folder's path of %zu bytes is too long", n);
    }
    segrt_preprocess q;
    segrt_preprocess_init(&q);
    segrt_window_job_options w;
    segrt_window_job_options_init(&w, 3);
    sg_status s = nn_read(c, config, &q, &w);
    cJSON_Delete(c->plans);
    cJSON_Delete(c->dataset);
    free(c);
    if (s != SEGRT_OK)
        return s;
    w.overlap[0] = w.overlap[1] = w.overlap[2] = 0.5; /* tile_step_size 0.5 */
    w.blend = SEGRT_WINDOW_BLEND_GAUSSIAN_NNUNET;
    w.sigma_scale = 0.125;
    w.grid = SEGRT_WINDOW_GRID_NNUNET;
    w.mirror_axes = 7;
    w.output = SEGRT_WINDOW_OUTPUT_LABELS;
    w.activation = SEGRT_WINDOW_ACTIVATION_SOFTMAX;
    *p = q;
    if (o)
        *o = w;
    return SEGRT_OK;
}
