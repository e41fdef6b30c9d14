/* Whole-file reads (see file.h). */
#include "core/file.h"

#include "core/mem.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sg_status sg_read_file(const char *path, uint64_t max_bytes, const char *limit, uint8_t **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return sg_error(SEGRT_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return sg_error(SEGRT_ERROR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: %lld bytes, more than %s", path, (long long)st.st_size,
                        limit);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = sg_malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", path);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return sg_error(SEGRT_ERROR_IO, "%s: read %zu of %zu bytes", path, got, n);
    }
    *out = buf;
    *size = n;
    return SEGRT_OK;
}

/* The per-process sequence number of temporary names. The PID alone
 * made two threads of one process (two C API calls writing the same
 * output, say) share a name, each truncating the other's half-written
 * file; the number keeps every call's name its own. An atomic counter is
 * the one piece of process-wide state here: it only ever hands out a
 * fresh value. */
static _Atomic unsigned long tmp_sequence;

sg_status sg_tmp_path(const char *path, char *tmp, size_t cap)
{
    unsigned long seq = atomic_fetch_add(&tmp_sequence, 1);
    int k = snprintf(tmp, cap, "%s.tmp.%ld.%lu", path, (long)getpid(), seq);
    if (k < 0 || (size_t)k >= cap)
        return sg_error(SEGRT_ERROR_IO, "%s: path too long", path);
    return SEGRT_OK;
}

sg_status sg_tmp_commit(const char *tmp, const char *path)
{
    if (rename(tmp, path) == 0)
        return SEGRT_OK;
    int err = errno;
    unlink(tmp);
    return sg_error(SEGRT_ERROR_IO, "%s: cannot rename the finished file into place: %s", path, strerror(err));
}

void sg_tmp_discard(const char *tmp)
{
    unlink(tmp);
}
