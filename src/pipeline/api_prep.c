/* The public preprocessing defaults (segrt.h, "Preprocessing a medical
 * volume"): a segrt_preprocess that does nothing. */
#include "segrt.h"

#include <string.h>

void segrt_preprocess_init(segrt_preprocess *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    for (int32_t a = 0; a < 3; a++)
        p->transpose[a] = a;
    p->crop = SEGRT_CROP_NONE;
    p->grid = SEGRT_RESAMPLE_NNUNET;
    p->image_interp = SEGRT_INTERP_LINEAR;
    p->result_interp = SEGRT_INTERP_LINEAR;
    /* nnU-Net's order_z for data and for probabilities */
    p->image_interp_z = SEGRT_INTERP_NEAREST;
    p->result_interp_z = SEGRT_INTERP_NEAREST;
}
