/* The public comparison API (segrt.h, "Comparing two arrays") over
 * core/compare.h. */
#include "core/compare.h"

#include <string.h>

/* A host tensor as the view compare.c reads. */
static sg_status view(const segrt_tensor *t, const char *which, sg_tensor *v)
{
    if (t->memory != SEGRT_MEMORY_HOST)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: %s is in device memory; compare host arrays", which);
    if (t->rank < 0 || t->rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "compare: %s has rank %d (0 to %d)", which, t->rank,
                        SEGRT_MAX_RANK);
    memset(v, 0, sizeof *v);
    v->dtype = t->dtype;
    v->rank = t->rank;
    memcpy(v->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    v->data = t->data;
    return SEGRT_OK;
}

segrt_status segrt_compare(const segrt_tensor *a, const segrt_tensor *b, segrt_compare_stats *out)
{
    if (!a || !b || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_compare: a, b and out must not be NULL");
    sg_tensor va, vb;
    SG_TRY(view(a, "A", &va));
    SG_TRY(view(b, "B", &vb));
    return sg_compare(&va, &vb, out);
}

segrt_status segrt_compare_classes(const segrt_tensor *a, const segrt_tensor *b, int32_t axis, segrt_class_stats *out)
{
    if (!a || !b || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_compare_classes: a, b and out must not be NULL");
    sg_tensor va, vb;
    SG_TRY(view(a, "A", &va));
    SG_TRY(view(b, "B", &vb));
    return sg_compare_classes(&va, &vb, axis, out);
}

void segrt_class_stats_free(segrt_class_stats *s)
{
    sg_class_stats_free(s);
}
