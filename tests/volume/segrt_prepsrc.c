/* The preprocessing sources' test driver: segrt_preprocess_from_model,
 * segrt_preprocess_set and segrt_preprocess_from_nnunet from the command
 * line, printed as JSON, so that tests/volume/test_prep_sources.py checks
 * them in any build (the sanitizer build too).
 *
 *   segrt_prepsrc model MODEL.onnx            {"declared": 0|1, "preprocess": {...}}
 *   segrt_prepsrc set KEY VALUE [KEY VALUE...] {"preprocess": {...}} after each set in turn
 *   segrt_prepsrc nnunet DIR CONFIG           {"preprocess": {...}, "window": {...}}
 * Exit 0 on success, 2 with "STATUS_NAME: message" on stderr. */
#include "segrt.h"

#include <stdio.h>
#include <string.h>

static int fail(segrt_status s)
{
    fprintf(stderr, "%s: %s\n", segrt_status_name(s), segrt_last_error());
    return 2;
}

static void print_preprocess(const segrt_preprocess *p)
{
    static const char *const kinds[] = {"none", "ct", "zscore", "range", "rescale01"};
    static const char *const interps[] = {"nearest", "linear", "cubic"};
    static const char *const crops[] = {"none", "nonzero", "threshold"};
    printf("{\"transpose\": [%d, %d, %d], \"orientation\": \"%s\", \"crop\": \"%s\", \"crop_threshold\": %.17g, "
           "\"crop_margin\": [%lld, %lld, %lld], \"intensity\": [",
           p->transpose[0], p->transpose[1], p->transpose[2], p->orientation, crops[p->crop], p->crop_threshold,
           (long long)p->crop_margin[0], (long long)p->crop_margin[1], (long long)p->crop_margin[2]);
    for (int32_t c = 0; c < p->n_intensity; c++) {
        const segrt_intensity *in = &p->intensity[c];
        printf("%s{\"kind\": \"%s\", \"lo\": %.17g, \"hi\": %.17g, \"mean\": %.17g, \"std\": %.17g, "
               "\"a_min\": %.17g, \"a_max\": %.17g, \"b_min\": %.17g, \"b_max\": %.17g, \"clip\": %d, \"masked\": %d}",
               c ? ", " : "", kinds[in->kind], in->lo, in->hi, in->mean, in->std, in->a_min, in->a_max, in->b_min,
               in->b_max, in->clip, in->masked);
    }
    printf("], \"intensity_first\": %d, \"spacing\": [%.17g, %.17g, %.17g], \"grid\": \"%s\", "
           "\"image_interp\": \"%s\", \"result_interp\": \"%s\", \"result_probs\": %d, \"anisotropy\": %.17g, "
           "\"image_interp_z\": \"%s\", \"result_interp_z\": \"%s\", \"source\": \"%s\"}",
           p->intensity_first, p->spacing[0], p->spacing[1], p->spacing[2],
           p->grid == SEGRT_RESAMPLE_NNUNET ? "nnunet" : "monai", interps[p->image_interp], interps[p->result_interp],
           p->result_probs, p->anisotropy, interps[p->image_interp_z], interps[p->result_interp_z],
           p->source ? p->source : "");
}

static void print_window(const segrt_window_job_options *o)
{
    printf("{\"spatial_dims\": %d, \"roi\": [%lld, %lld, %lld], \"overlap\": [%.17g, %.17g, %.17g], \"blend\": %d, "
           "\"sigma_scale\": %.17g, \"grid\": %d, \"mirror_axes\": %u, \"output\": %d, \"activation\": %d}",
           o->spatial_dims, (long long)o->roi[0], (long long)o->roi[1], (long long)o->roi[2], o->overlap[0],
           o->overlap[1], o->overlap[2], (int)o->blend, o->sigma_scale, (int)o->grid, o->mirror_axes, (int)o->output,
           (int)o->activation);
}

int main(int argc, char **argv)
{
    segrt_preprocess p;
    segrt_status s;
    if (argc == 3 && strcmp(argv[1], "model") == 0) {
        segrt_model *m = NULL;
        if ((s = segrt_model_load(argv[2], &m)) != SEGRT_OK)
            return fail(s);
        int32_t declared = -1;
        s = segrt_preprocess_from_model(m, &p, &declared);
        segrt_model_destroy(m);
        if (s != SEGRT_OK)
            return fail(s);
        printf("{\"declared\": %d, \"preprocess\": ", declared);
        print_preprocess(&p);
        printf("}\n");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "set") == 0 && argc % 2 == 0) {
        segrt_preprocess_init(&p);
        for (int i = 2; i + 1 < argc; i += 2)
            if ((s = segrt_preprocess_set(&p, argv[i], argv[i + 1])) != SEGRT_OK)
                return fail(s);
        printf("{\"preprocess\": ");
        print_preprocess(&p);
        printf("}\n");
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "nnunet") == 0) {
        segrt_window_job_options o;
        if ((s = segrt_preprocess_from_nnunet(argv[2], argv[3], &p, &o)) != SEGRT_OK)
            return fail(s);
        printf("{\"preprocess\": ");
        print_preprocess(&p);
        printf(", \"window\": ");
        print_window(&o);
        printf("}\n");
        return 0;
    }
    fprintf(stderr, "usage: segrt_prepsrc model MODEL.onnx | set KEY VALUE... | nnunet DIR CONFIG\n");
    return 1;
}
