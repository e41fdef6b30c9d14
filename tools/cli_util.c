#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(segrt_status status)
{
    fprintf(stderr, "segrt: %s\n", segrt_last_error());
    switch (status) {
    case SEGRT_ERROR_INVALID_ARGUMENT:
    case SEGRT_ERROR_IO:
    case SEGRT_ERROR_INVALID_MODEL:
    case SEGRT_ERROR_UNSUPPORTED:
    case SEGRT_ERROR_SHAPE:
        return CLI_BAD_INPUT;
    default:
        return CLI_RUNTIME;
    }
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("segrt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_BAD_INPUT;
}

bool cli_parse_int(const char *s, int64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool cli_parse_shape(char *arg, const char **name, int32_t *rank, int64_t *dims)
{
    char *eq = strrchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return false;
    *eq = '\0';
    *name = arg;
    *rank = 0;
    char *p = eq + 1;
    while (*p) {
        char *x = strchr(p, 'x');
        if (x)
            *x = '\0';
        if (*rank == SEGRT_MAX_RANK || !cli_parse_int(p, &dims[*rank]))
            return false;
        (*rank)++;
        if (!x)
            break;
        p = x + 1;
        if (!*p)
            return false;
    }
    return *rank > 0;
}

const char *cli_format_dims(const segrt_tensor_desc *d, char *buf, size_t cap)
{
    if (d->rank < 0) {
        snprintf(buf, cap, "?");
        return buf;
    }
    if (d->rank == 0) {
        snprintf(buf, cap, "scalar");
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < d->rank && used < cap; i++) {
        const char *sep = i ? " x " : "";
        int n;
        if (d->dims[i] >= 0)
            n = snprintf(buf + used, cap - used, "%s%lld", sep, (long long)d->dims[i]);
        else
            n = snprintf(buf + used, cap - used, "%s%s", sep, d->dim_names[i] ? d->dim_names[i] : "?");
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}
