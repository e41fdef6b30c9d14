/* The picture a person looks at: a label map drawn over its image, each
 * label tinted in its own colour and outlined. */
#ifndef SG_PIPELINE_OVERLAY_H
#define SG_PIPELINE_OVERLAY_H

#include "core/tensor.h"
#include "io/image.h"

typedef struct sg_overlay_options {
    float alpha;     /* opacity of the tint over a labelled pixel, 0 to 1 */
    bool boundaries; /* draw each region's edge pixels opaque in its colour */
} sg_overlay_options;

/* alpha 0.4, boundaries on. */
void sg_overlay_options_default(sg_overlay_options *o);

/* The RGB colour of label (> 0): a fixed palette of distinguishable
 * colours, repeating every SG_OVERLAY_COLORS labels. */
#define SG_OVERLAY_COLORS 16
const uint8_t *sg_overlay_color(int64_t label);

/* Renders labels over base into *out, an 8-bit RGB image of base's size
 * (out->pixels owned by the caller: sg_image_free). The base is made 8-bit
 * RGB first: grey replicated to three channels, alpha dropped, and a
 * 16-bit base stretched from its own min..max (over its colour channels
 * together) to 0..255. Each pixel with label > 0 is blended with the
 * label's colour at o->alpha; with o->boundaries, a labelled pixel whose
 * up, down, left or right neighbour has another label is painted the
 * label's colour outright. Label 0 and negative labels are background.
 * o NULL means the defaults.
 *
 * labels: uint8, uint16, int32 or int64; H x W with any leading dims of 1
 * (N=1 x 1 x H x W as segrt's sliding window gives). INVALID_ARGUMENT for
 * another dtype or layout, a size other than base's (naming both), an
 * alpha outside 0..1, or an empty or malformed base. */
sg_status sg_overlay_render(const sg_image *base, const sg_tensor *labels, const sg_overlay_options *o,
                            sg_image *out);

#endif
