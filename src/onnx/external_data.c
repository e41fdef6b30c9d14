#include "onnx/external_data.h"

#include "core/file.h"
#include "core/mem.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A location is rejected before touching the file system when it is
 * absolute or has a ".." component; the realpath check below then catches
 * symbolic links that lead out of the folder. */
static bool location_is_plain(const char *loc)
{
    if (!loc[0] || loc[0] == '/' || loc[0] == '\\')
        return false;
    const char *p = loc;
    while (*p) {
        const char *end = p;
        while (*end && *end != '/' && *end != '\\')
            end++;
        if (end - p == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p = *end ? end + 1 : end;
    }
    return true;
}

sg_status sg_external_data_read(const char *base_dir, const char *location, int64_t offset,
                                size_t size, const char *tensor, void *dst)
{
    if (!base_dir)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s` keeps its data in `%s`, but the model was loaded from memory "
                        "without a folder for external data",
                        tensor, location);
    if (!location_is_plain(location))
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s`: external data path `%s` must be relative and stay inside "
                        "the model's folder",
                        tensor, location);
    if (offset < 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s`: negative external data offset",
                        tensor);
    char joined[PATH_MAX], real_dir[PATH_MAX], real_file[PATH_MAX];
    if (snprintf(joined, sizeof joined, "%s/%s", base_dir, location) >= (int)sizeof joined)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s`: external data path too long", tensor);
    if (!realpath(base_dir, real_dir))
        return sg_error(SEGRT_ERROR_IO, "cannot resolve the model folder `%s`: %s", base_dir,
                        strerror(errno));
    if (!realpath(joined, real_file))
        return sg_error(SEGRT_ERROR_IO, "tensor `%s`: cannot open external data `%s`: %s", tensor,
                        location, strerror(errno));
    size_t dl = strlen(real_dir);
    bool inside = strncmp(real_file, real_dir, dl) == 0 &&
                  (real_file[dl] == '/' || (dl == 1 && real_dir[0] == '/'));
    if (!inside)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s`: external data `%s` resolves outside the model's folder",
                        tensor, location);
    int fd;
    if (sg_open_input(real_file, &fd) != SEGRT_OK) { /* a FIFO is refused, not waited on */
        char why[512]; /* sg_open_input's reason, after its "PATH: " */
        snprintf(why, sizeof why, "%s", sg_last_error() + strlen(real_file) + 2);
        return sg_error(SEGRT_ERROR_IO, "tensor `%s`: external data `%s`: %s", tensor, location, why);
    }
    FILE *f = fdopen(fd, "rb");
    struct stat st;
    if (!f || fstat(fd, &st) != 0) {
        if (f)
            fclose(f);
        else
            close(fd);
        return sg_error(SEGRT_ERROR_IO, "tensor `%s`: cannot read external data `%s`", tensor, location);
    }
    int64_t need;
    if (!sg_add_i64(offset, (int64_t)size, &need) || need > (int64_t)st.st_size) {
        fclose(f);
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s`: external data `%s` is shorter than declared (needs %zu bytes "
                        "at offset %lld, the file has %lld)",
                        tensor, location, size, (long long)offset, (long long)st.st_size);
    }
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, size, f) != size) {
        fclose(f);
        return sg_error(SEGRT_ERROR_IO, "tensor `%s`: reading external data `%s` failed", tensor,
                        location);
    }
    fclose(f);
    return SEGRT_OK;
}
