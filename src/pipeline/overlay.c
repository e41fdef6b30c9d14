/* Label maps drawn over their images (see overlay.h). */
#include "pipeline/overlay.h"

#include <math.h>
#include <string.h>

/* Hues spread around the wheel first, then darker and paler variants, so
 * that neighbouring label numbers differ the most. */
static const uint8_t palette[SG_OVERLAY_COLORS][3] = {
    {255, 64, 64},  {64, 200, 64},  {64, 128, 255}, {255, 200, 0},   {200, 64, 255}, {0, 220, 220},
    {255, 128, 0},  {255, 64, 200}, {160, 255, 64}, {0, 128, 128},   {160, 96, 32},  {128, 128, 255},
    {128, 0, 0},    {0, 96, 0},     {0, 0, 160},    {255, 255, 160},
};

void sg_overlay_options_default(sg_overlay_options *o)
{
    o->alpha = 0.4f;
    o->boundaries = true;
}

const uint8_t *sg_overlay_color(int64_t label)
{
    int64_t i = (label - 1) % SG_OVERLAY_COLORS;
    return palette[i < 0 ? i + SG_OVERLAY_COLORS : i];
}

static int64_t label_at(const sg_tensor *t, size_t i)
{
    switch (t->dtype) {
    case SEGRT_DTYPE_UINT8:
        return ((const uint8_t *)t->data)[i];
    case SEGRT_DTYPE_UINT16:
        return ((const uint16_t *)t->data)[i];
    case SEGRT_DTYPE_INT32:
        return ((const int32_t *)t->data)[i];
    default:
        return ((const int64_t *)t->data)[i];
    }
}

/* base as 8-bit RGB into rgb (3 bytes a pixel). */
static void base_to_rgb(const sg_image *base, uint8_t *rgb)
{
    size_t n = (size_t)base->width * (size_t)base->height, c = (size_t)base->channels;
    size_t colour = c >= 3 ? 3 : 1; /* samples that carry colour; alpha follows them */
    if (base->bits == 8) {
        const uint8_t *p = base->pixels;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < 3; k++)
                rgb[3 * i + k] = p[i * c + (colour == 3 ? k : 0)];
        return;
    }
    const uint16_t *p = base->pixels;
    uint16_t lo = UINT16_MAX, hi = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < colour; k++) {
            uint16_t v = p[i * c + k];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    /* A flat image has nothing to stretch: it shows black. */
    float scale = hi > lo ? 255.0f / (float)(hi - lo) : 0.0f;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < 3; k++)
            rgb[3 * i + k] = (uint8_t)((float)(p[i * c + (colour == 3 ? k : 0)] - lo) * scale + 0.5f);
}

/* True when a neighbour of pixel (x, y) inside the image has another label
 * than l. */
static bool on_boundary(const sg_tensor *t, size_t w, size_t h, size_t x, size_t y, int64_t l)
{
    size_t i = y * w + x;
    return (x > 0 && label_at(t, i - 1) != l) || (x + 1 < w && label_at(t, i + 1) != l) ||
           (y > 0 && label_at(t, i - w) != l) || (y + 1 < h && label_at(t, i + w) != l);
}

static void tint(const sg_tensor *labels, const sg_overlay_options *o, sg_image *out)
{
    size_t w = (size_t)out->width, h = (size_t)out->height;
    /* Blending in 8.8 fixed point: exact for alpha 0 and 1. */
    int a = (int)lrintf(o->alpha * 256.0f);
    uint8_t *rgb = out->pixels;
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            int64_t l = label_at(labels, y * w + x);
            if (l <= 0)
                continue;
            const uint8_t *col = sg_overlay_color(l);
            uint8_t *px = rgb + 3 * (y * w + x);
            bool edge = o->boundaries && on_boundary(labels, w, h, x, y, l);
            for (int k = 0; k < 3; k++)
                px[k] = edge ? col[k] : (uint8_t)((px[k] * (256 - a) + col[k] * a + 128) >> 8);
        }
}

sg_status sg_overlay_render(const sg_image *base, const sg_tensor *labels, const sg_overlay_options *o,
                            sg_image *out)
{
    memset(out, 0, sizeof *out);
    sg_overlay_options defaults;
    sg_overlay_options_default(&defaults);
    if (!o)
        o = &defaults;
    if (!(o->alpha >= 0.0f && o->alpha <= 1.0f))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "overlay alpha %g is not between 0 and 1", (double)o->alpha);
    if (!base || !base->pixels || base->width <= 0 || base->height <= 0 || base->channels < 1 ||
        base->channels > 4 || (base->bits != 8 && base->bits != 16))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "overlay: an empty or malformed base image");
    if (base->depth > 1)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "overlay: the image is a volume (%d pages); overlays are drawn on 2-D images", base->depth);
    if (labels->dtype != SEGRT_DTYPE_UINT8 && labels->dtype != SEGRT_DTYPE_UINT16 &&
        labels->dtype != SEGRT_DTYPE_INT32 && labels->dtype != SEGRT_DTYPE_INT64)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "overlay: labels must be uint8, uint16, int32 or int64, not %s",
                        segrt_dtype_name(labels->dtype));
    int64_t h, w;
    SG_TRY(sg_image_label_dims(labels, &h, &w));
    if (h != base->height || w != base->width) {
        char dims[256];
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "overlay: the label map (%s) is %lldx%lld but the image is %dx%d (height x width)",
                        sg_dims_format(labels->dims, labels->rank, dims, sizeof dims), (long long)h, (long long)w,
                        base->height, base->width);
    }
    SG_TRY(sg_image_alloc(w, h, 3, 8, SG_IMAGE_MAX_BYTES, "overlay", out));
    base_to_rgb(base, out->pixels);
    tint(labels, o, out);
    return SEGRT_OK;
}
