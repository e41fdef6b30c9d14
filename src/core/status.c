#include "core/status.h"

#include <stdarg.h>
#include <string.h>

/* Long enough for a node name, a tensor name, two shapes and a file path. */
#define SG_ERROR_CAP 2048

static _Thread_local char last_error[SG_ERROR_CAP];

sg_status sg_error(sg_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* Messages are one line: a newline from a file name or a model string
     * must not break the CLI's one-line contract. */
    for (char *p = last_error; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return status;
}

sg_status sg_error_prefix(sg_status status, const char *fmt, ...)
{
    char prefix[SG_ERROR_CAP];
    char old[SG_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    return sg_error(status, "%s%s", prefix, old);
}

void sg_error_clear(void) { last_error[0] = '\0'; }

const char *sg_last_error(void) { return last_error; }

const char *segrt_last_error(void) { return last_error; }

const char *segrt_status_name(segrt_status status)
{
    static const char *const names[] = {
        [SEGRT_OK] = "SEGRT_OK",
        [SEGRT_ERROR_INVALID_ARGUMENT] = "SEGRT_ERROR_INVALID_ARGUMENT",
        [SEGRT_ERROR_IO] = "SEGRT_ERROR_IO",
        [SEGRT_ERROR_INVALID_MODEL] = "SEGRT_ERROR_INVALID_MODEL",
        [SEGRT_ERROR_UNSUPPORTED] = "SEGRT_ERROR_UNSUPPORTED",
        [SEGRT_ERROR_SHAPE] = "SEGRT_ERROR_SHAPE",
        [SEGRT_ERROR_OUT_OF_MEMORY] = "SEGRT_ERROR_OUT_OF_MEMORY",
        [SEGRT_ERROR_DEVICE] = "SEGRT_ERROR_DEVICE",
        [SEGRT_ERROR_INTERNAL] = "SEGRT_ERROR_INTERNAL",
        [SEGRT_ERROR_CASES_FAILED] = "SEGRT_ERROR_CASES_FAILED",
    };
    _Static_assert(sizeof names / sizeof names[0] == SEGRT_STATUS_COUNT,
                   "every segrt_status needs a name");
    if ((unsigned)status >= SEGRT_STATUS_COUNT)
        return "unknown";
    return names[status];
}

#define SG_STR_(x) #x
#define SG_STR(x) SG_STR_(x)

const char *segrt_version(void)
{
    return SG_STR(SEGRT_VERSION_MAJOR) "." SG_STR(SEGRT_VERSION_MINOR) "." SG_STR(
        SEGRT_VERSION_PATCH);
}
