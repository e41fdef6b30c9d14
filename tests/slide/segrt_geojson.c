/* The GeoJSON writer's driver for test_geojson.py: reads a uint8 label map
 * (H x W, or with leading dims of 1) from an NPY file and writes its
 * regions through sg_labels_write_geojson (pipeline/geojson.h).
 *
 *   segrt_geojson LABELS.npy OUT SCALE_Y SCALE_X OFFSET_Y OFFSET_X [OPTION...]
 *
 * SCALE_Y "-" passes a NULL scale, OFFSET_Y "-" a NULL offset (the X
 * values are then ignored). Options:
 *   --name L TEXT     names[L] = TEXT; n_names is 1 + the largest L given,
 *                     the names not given NULL
 *   --color L R G B   colors[L]; n_colors is 1 + the largest L given, the
 *                     colours not given black
 *   --dims H W        the height and width passed instead of the file's
 *                     (for the refusals of bad dims: the data stays the
 *                     file's)
 *   --null-labels     labels NULL
 * Prints "maxrss_kib N seconds S" (peak resident memory, the call's wall
 * time) on success: the peak is /proc's VmHWM, which counts this program
 * alone, where getrusage's ru_maxrss keeps the peak of the process that
 * forked it (a test's Python, larger than the driver); "STATUS: message" on stderr and exit 1 on failure. */
#include "io/npy.h"
#include "pipeline/geojson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) != 1)
            kib = -1;
    if (f)
        fclose(f);
    if (kib < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kib = ru.ru_maxrss;
    }
    return kib;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s LABELS.npy OUT SCALE_Y SCALE_X OFFSET_Y OFFSET_X [--name L TEXT] "
            "[--color L R G B] [--dims H W] [--null-labels]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 7)
        return usage(argv[0]);
    const char *names[256] = {NULL};
    uint8_t colors[256][3];
    memset(colors, 0, sizeof colors);
    int32_t n_names = 0, n_colors = 0;
    int64_t h = -1, w = -1;
    bool dims_given = false, null_labels = false;
    for (int i = 7; i < argc; i++) {
        if (strcmp(argv[i], "--name") == 0 && i + 2 < argc) {
            int l = atoi(argv[i + 1]);
            if (l < 0 || l > 255)
                return usage(argv[0]);
            names[l] = argv[i + 2];
            n_names = l + 1 > n_names ? l + 1 : n_names;
            i += 2;
        } else if (strcmp(argv[i], "--color") == 0 && i + 4 < argc) {
            int l = atoi(argv[i + 1]);
            if (l < 0 || l > 255)
                return usage(argv[0]);
            for (int k = 0; k < 3; k++)
                colors[l][k] = (uint8_t)atoi(argv[i + 2 + k]);
            n_colors = l + 1 > n_colors ? l + 1 : n_colors;
            i += 4;
        } else if (strcmp(argv[i], "--dims") == 0 && i + 2 < argc) {
            h = atoll(argv[i + 1]);
            w = atoll(argv[i + 2]);
            dims_given = true;
            i += 2;
        } else if (strcmp(argv[i], "--null-labels") == 0) {
            null_labels = true;
        } else {
            return usage(argv[0]);
        }
    }
    sg_tensor t;
    sg_status st = sg_npy_read(argv[1], &t);
    if (st != SEGRT_OK) {
        fprintf(stderr, "%s: %s\n", segrt_status_name(st), sg_last_error());
        return 1;
    }
    bool map = t.rank >= 2 && t.dtype == SEGRT_DTYPE_UINT8;
    for (int32_t a = 0; map && a + 2 < t.rank; a++)
        map = t.dims[a] == 1;
    if (!map) {
        free(t.data);
        fprintf(stderr, "%s: not a uint8 H x W label map\n", argv[1]);
        return 2;
    }
    if (!dims_given) {
        h = t.dims[t.rank - 2];
        w = t.dims[t.rank - 1];
    }
    double scale[2] = {atof(argv[3]), atof(argv[4])}, offset[2] = {atof(argv[5]), atof(argv[6])};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = sg_labels_write_geojson(null_labels ? NULL : t.data, h, w, strcmp(argv[3], "-") == 0 ? NULL : scale,
                                 strcmp(argv[5], "-") == 0 ? NULL : offset, n_names ? names : NULL, n_names,
                                 n_colors ? (const uint8_t(*)[3])colors : NULL, n_colors, argv[2]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(t.data);
    if (st != SEGRT_OK) {
        fprintf(stderr, "%s: %s\n", segrt_status_name(st), sg_last_error());
        return 1;
    }
    printf("maxrss_kib %ld seconds %.3f\n", peak_rss_kib(),
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
