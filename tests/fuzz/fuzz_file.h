/* For fuzz targets whose readers take a path: the input as a file. */
#ifndef SEGRT_FUZZ_FILE_H
#define SEGRT_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* A memfd, made once and rewritten per input, behind /proc/self/fd/N. */
static const char *fuzz_as_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("segrt-fuzz", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    return path;
}

#endif
