#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* NAME=DIMS where each dim is N or MIN:OPT:MAX. */
bool cli_parse_shape_range(char *arg, const char **name, int32_t *rank, int64_t *mn, int64_t *op, int64_t *mx)
{
    char *eq = strrchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return false;
    *eq = '\0';
    *name = arg;
    *rank = 0;
    for (char *p = eq + 1; *p;) {
        if (*rank == SEGRT_MAX_RANK)
            return false;
        char *x = strchr(p, 'x');
        if (x)
            *x = '\0';
        char *c1 = strchr(p, ':');
        int32_t r = *rank;
        if (!c1) {
            if (!cli_parse_int(p, &mn[r]))
                return false;
            op[r] = mx[r] = mn[r];
        } else {
            char *c2 = strchr(c1 + 1, ':');
            if (!c2)
                return false;
            *c1 = *c2 = '\0';
            if (!cli_parse_int(p, &mn[r]) || !cli_parse_int(c1 + 1, &op[r]) || !cli_parse_int(c2 + 1, &mx[r]))
                return false;
        }
        (*rank)++;
        if (!x)
            break;
        p = x + 1;
        if (!*p)
            return false;
    }
    return *rank > 0;
}

bool cli_parse_shape(char *arg, const char **name, int32_t *rank, int64_t *dims)
{
    int64_t mn[SEGRT_MAX_RANK], mx[SEGRT_MAX_RANK];
    if (!cli_parse_shape_range(arg, name, rank, mn, dims, mx))
        return false;
    for (int32_t i = 0; i < *rank; i++)
        if (mn[i] != dims[i] || mx[i] != dims[i])
            return false; /* a range where fixed dims are wanted */
    return true;
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

/* "4G", "512M", "1024K", or bytes: digits only (strtoull would take "-5"
 * as 2^64 - 5), and no overflow. */
bool cli_parse_size(const char *s, size_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30;
    else if (*end == 'T' || *end == 't')
        mul = 1ull << 40;
    else if (*end)
        return false;
    if (mul > 1 && end[1] && !((end[1] == 'B' || end[1] == 'b') && !end[2]) &&
        !(end[1] == 'i' && end[2] == 'B' && !end[3]))
        return false;
    if (v > SIZE_MAX / mul)
        return false;
    *out = (size_t)(v * mul);
    return true;
}

const char *cli_dims(const int64_t *dims, int32_t rank, char *buf, size_t cap)
{
    if (rank == 0) {
        snprintf(buf, cap, "scalar");
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < rank && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, i ? "x%lld" : "%lld", (long long)dims[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}

static bool is_image_format(segrt_file_format f)
{
    return f == SEGRT_FILE_PNG || f == SEGRT_FILE_JPEG || f == SEGRT_FILE_TIFF;
}

bool cli_is_image_file(const char *path)
{
    return is_image_format(segrt_file_format_of_file(path));
}

bool cli_is_image_name(const char *path)
{
    return is_image_format(segrt_file_format_of_name(path));
}

bool cli_is_folder(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
