/* The public profiling API (segrt.h, "Profiling a context") over
 * engine_profile.h. */
#include "engine/engine_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

segrt_status segrt_context_profile(segrt_context *ctx, int on)
{
    if (!ctx)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_profile: ctx is NULL");
    return sg_context_profile(ctx, on != 0);
}

segrt_status segrt_context_profile_print(const segrt_context *ctx, FILE *f)
{
    if (!ctx || !f)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_profile_print: ctx and f must not be NULL");
    sg_context_profile_print(ctx, f);
    return SEGRT_OK;
}

segrt_status segrt_context_profile_text(const segrt_context *ctx, char *buf, size_t cap, size_t *needed)
{
    if (!ctx || (!buf && cap > 0))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_context_profile_text: ctx is NULL, or buf is NULL with cap %zu", cap);
    /* The report is printed once into memory, then copied as snprintf
     * would. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "segrt_context_profile_text: no memory for the report");
    sg_context_profile_print(ctx, f);
    if (fclose(f) != 0 || !text) {
        free(text);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "segrt_context_profile_text: no memory for the report");
    }
    if (cap > 0) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(buf, text, n);
        buf[n] = '\0';
    }
    if (needed)
        *needed = len;
    free(text);
    return SEGRT_OK;
}
