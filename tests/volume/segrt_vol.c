/* The volume tests' driver: segrt's public volume API from the command
 * line, so that the tests in tests/volume can check it against nibabel, pydicom
 * and SimpleITK in any build (the sanitizer build too, where a ctypes
 * load of the library would need the sanitizer runtime preloaded).
 *
 *   segrt_vol info PATH [--series UID]           JSON: the volume's info and geometry
 *   segrt_vol read PATH OUT.npy [--series UID] [--box Z Y X D H W]
 *                                                 planar C x D x H x W in the volume's dtype
 *   segrt_vol load PATH OUT.npy                   segrt_image_load's tensor
 *   segrt_vol files OUT.npy UID|- FILE...         a series from a list of files (read whole)
 *   segrt_vol list PATH...                        JSON: segrt_dicom_series_list
 *   segrt_vol save IN.npy OUT.nii[.gz] [GEOMETRY_FROM]
 *                                                 segrt_volume_save with another volume's geometry
 *   segrt_vol regions PATH COUNT SEED             random boxes, forward and in any order, against
 *                                                 the whole read (exit 1 on a difference)
 *   segrt_vol seg SERIES LABELS.npy OUT.dcm [NAME...] [--series UID] [--allow-uneven]
 *                                                 segrt_dicom_seg_save (names of label 0, 1, ...)
 * info and read take --allow-uneven too (segrt_volume_open_with), and
 * print its notice on stderr.
 * Exit 0 on success, 2 with segrt's one-line message on stderr. */
#include "segrt.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(void)
{
    fprintf(stderr, "segrt_vol: %s\n", segrt_last_error());
    return 2;
}

static void print_info(const segrt_image_info *i)
{
    const segrt_geometry *g = &i->geometry;
    printf("{\"format\": %d, \"depth\": %d, \"height\": %d, \"width\": %d, \"channels\": %d, \"dtype\": \"%s\", "
           "\"pixel_bytes\": %" PRIu64 ", \"known\": %d, \"spacing\": [%.17g, %.17g, %.17g], "
           "\"origin\": [%.17g, %.17g, %.17g], \"direction\": [",
           (int)i->format, i->depth, i->height, i->width, i->channels, segrt_dtype_name(i->dtype), i->pixel_bytes,
           g->known, g->spacing[0], g->spacing[1], g->spacing[2], g->origin[0], g->origin[1], g->origin[2]);
    for (int r = 0; r < 3; r++)
        printf("%s[%.17g, %.17g, %.17g]", r ? ", " : "", g->direction[r][0], g->direction[r][1], g->direction[r][2]);
    printf("], \"qform_code\": %d, \"sform_code\": %d}\n", g->qform_code, g->sform_code);
}

static const char *opt(int argc, char **argv, const char *name)
{
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}

static int read_box(segrt_volume *v, const segrt_image_info *info, const int64_t start[3], const int64_t size[3],
                    const char *out)
{
    size_t es = segrt_dtype_size(info->dtype);
    size_t bytes = (size_t)info->channels * (size_t)size[0] * (size_t)size[1] * (size_t)size[2] * es;
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return 2;
    int rc = 0;
    if (segrt_volume_read(v, start, size, buf, bytes) != SEGRT_OK) {
        rc = fail();
    } else {
        segrt_tensor t = {info->dtype, 4, {info->channels, size[0], size[1], size[2]}, buf, SEGRT_MEMORY_HOST, 0};
        if (segrt_array_save(out, &t) != SEGRT_OK)
            rc = fail();
    }
    free(buf);
    return rc;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random boxes read in three orders (going down, going up, shuffled)
 * against the whole volume read first. */
static int regions(const char *path, int count, uint64_t seed)
{
    segrt_volume *v;
    if (segrt_volume_open(path, NULL, &v) != SEGRT_OK)
        return fail();
    segrt_image_info info;
    segrt_volume_info(v, &info);
    int64_t dims[3] = {info.depth, info.height, info.width}, zero[3] = {0, 0, 0};
    size_t es = segrt_dtype_size(info.dtype), C = (size_t)info.channels;
    size_t all_bytes = C * (size_t)dims[0] * (size_t)dims[1] * (size_t)dims[2] * es;
    uint8_t *all = malloc(all_bytes), *box = malloc(all_bytes);
    int rc = 0;
    if (!all || !box || segrt_volume_read(v, zero, dims, all, all_bytes) != SEGRT_OK) {
        rc = all && box ? fail() : 2;
        goto done;
    }
    segrt_volume_close(v);
    v = NULL;
    for (int order = 0; order < 3 && rc == 0; order++) {
        if (segrt_volume_open(path, NULL, &v) != SEGRT_OK) {
            rc = fail();
            break;
        }
        int64_t(*boxes)[6] = malloc(sizeof *boxes * (size_t)count);
        if (!boxes) {
            rc = 2;
            break;
        }
        for (int k = 0; k < count; k++)
            for (int a = 0; a < 3; a++) {
                int64_t s = (int64_t)(rng(&seed) % (uint64_t)dims[a]);
                int64_t n = 1 + (int64_t)(rng(&seed) % (uint64_t)(dims[a] - s));
                boxes[k][a] = s;
                boxes[k][3 + a] = n;
            }
        /* order 0: by first slice and row going down; 1: going up; 2: as drawn. */
        for (int i = 0; order < 2 && i < count; i++)
            for (int j = i + 1; j < count; j++) {
                bool swap = order == 0 ? (boxes[j][0] * dims[1] + boxes[j][1] < boxes[i][0] * dims[1] + boxes[i][1])
                                       : (boxes[j][0] * dims[1] + boxes[j][1] > boxes[i][0] * dims[1] + boxes[i][1]);
                if (swap) {
                    int64_t t[6];
                    memcpy(t, boxes[i], sizeof t);
                    memcpy(boxes[i], boxes[j], sizeof t);
                    memcpy(boxes[j], t, sizeof t);
                }
            }
        for (int k = 0; k < count && rc == 0; k++) {
            const int64_t *s = boxes[k], *n = boxes[k] + 3;
            if (segrt_volume_read(v, s, n, box, all_bytes) != SEGRT_OK) {
                rc = fail();
                break;
            }
            const uint8_t *o = box;
            for (size_t c = 0; c < C && rc == 0; c++)
                for (int64_t z = 0; z < n[0] && rc == 0; z++)
                    for (int64_t y = 0; y < n[1] && rc == 0; y++, o += (size_t)n[2] * es) {
                        const uint8_t *want =
                            all + (((c * (size_t)dims[0] + (size_t)(s[0] + z)) * (size_t)dims[1] + (size_t)(s[1] + y)) *
                                       (size_t)dims[2] +
                                   (size_t)s[2]) *
                                      es;
                        if (memcmp(o, want, (size_t)n[2] * es) != 0) {
                            fprintf(stderr,
                                    "segrt_vol: order %d box %d (%lld %lld %lld + %lld %lld %lld) differs at channel "
                                    "%zu, slice %lld, row %lld\n",
                                    order, k, (long long)s[0], (long long)s[1], (long long)s[2], (long long)n[0],
                                    (long long)n[1], (long long)n[2], c, (long long)(s[0] + z), (long long)(s[1] + y));
                            rc = 1;
                        }
                    }
        }
        free(boxes);
        segrt_volume_close(v);
        v = NULL;
    }
    if (rc == 0)
        printf("%d boxes in 3 orders match the whole read\n", count);
done:
    segrt_volume_close(v);
    free(all);
    free(box);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: segrt_vol info|read|load|files|list|save|regions ...\n");
        return 2;
    }
    const char *cmd = argv[1], *series = opt(argc, argv, "--series");
    int32_t uneven = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--allow-uneven") == 0)
            uneven = 1;
    if (strcmp(cmd, "info") == 0 || strcmp(cmd, "read") == 0) {
        segrt_volume *v;
        if (segrt_volume_open_with(argv[2], series, uneven, &v) != SEGRT_OK)
            return fail();
        if (segrt_volume_notice(v))
            fprintf(stderr, "segrt_vol: %s\n", segrt_volume_notice(v));
        segrt_image_info info;
        segrt_volume_info(v, &info);
        int rc = 0;
        if (strcmp(cmd, "info") == 0) {
            print_info(&info);
        } else {
            int64_t start[3] = {0, 0, 0}, size[3] = {info.depth, info.height, info.width};
            for (int i = 0; i + 6 < argc; i++)
                if (strcmp(argv[i], "--box") == 0)
                    for (int a = 0; a < 3; a++) {
                        start[a] = strtoll(argv[i + 1 + a], NULL, 10);
                        size[a] = strtoll(argv[i + 4 + a], NULL, 10);
                    }
            rc = argc < 4 ? 2 : read_box(v, &info, start, size, argv[3]);
        }
        segrt_volume_close(v);
        return rc;
    }
    if (strcmp(cmd, "load") == 0 && argc >= 4) {
        segrt_tensor t;
        segrt_image_info info;
        if (segrt_image_probe(argv[2], &info) != SEGRT_OK || segrt_image_load(argv[2], &t) != SEGRT_OK)
            return fail();
        int rc = segrt_array_save(argv[3], &t) == SEGRT_OK ? 0 : fail();
        segrt_tensor_free(&t);
        return rc;
    }
    if (strcmp(cmd, "files") == 0 && argc >= 5) {
        segrt_volume *v;
        const char *uid = strcmp(argv[3], "-") == 0 ? NULL : argv[3];
        if (segrt_volume_open_files((const char *const *)argv + 4, (size_t)(argc - 4), uid, &v) != SEGRT_OK)
            return fail();
        segrt_image_info info;
        segrt_volume_info(v, &info);
        int64_t start[3] = {0, 0, 0}, size[3] = {info.depth, info.height, info.width};
        int rc = read_box(v, &info, start, size, argv[2]);
        segrt_volume_close(v);
        return rc;
    }
    if (strcmp(cmd, "list") == 0) {
        segrt_dicom_series *list;
        size_t n;
        if (segrt_dicom_series_list((const char *const *)argv + 2, (size_t)(argc - 2), &list, &n) != SEGRT_OK)
            return fail();
        printf("[");
        for (size_t i = 0; i < n; i++)
            printf("%s{\"uid\": \"%s\", \"modality\": \"%s\", \"description\": \"%s\", \"slices\": %lld, \"rows\": "
                   "%d, \"columns\": %d}",
                   i ? ", " : "", list[i].uid, list[i].modality, list[i].description, (long long)list[i].slices,
                   list[i].rows, list[i].columns);
        printf("]\n");
        segrt_dicom_series_free(list);
        return 0;
    }
    if (strcmp(cmd, "save") == 0 && argc >= 4) {
        segrt_tensor t;
        if (segrt_array_load(argv[2], &t) != SEGRT_OK)
            return fail();
        segrt_geometry g, *gp = NULL;
        if (argc >= 5) {
            segrt_image_info info;
            if (segrt_image_probe(argv[4], &info) != SEGRT_OK) {
                segrt_tensor_free(&t);
                return fail();
            }
            g = info.geometry;
            gp = &g;
        }
        int rc = segrt_volume_save(argv[3], &t, gp) == SEGRT_OK ? 0 : fail();
        segrt_tensor_free(&t);
        return rc;
    }
    if (strcmp(cmd, "seg") == 0 && argc >= 5) {
        const char *names[64];
        size_t n = 0;
        for (int i = 5; i < argc && n < 64; i++) {
            if (strcmp(argv[i], "--series") == 0) {
                i++;
                continue;
            }
            if (strcmp(argv[i], "--allow-uneven") != 0)
                names[n++] = argv[i];
        }
        segrt_volume *v;
        if (segrt_volume_open_with(argv[2], series, uneven, &v) != SEGRT_OK)
            return fail();
        segrt_tensor t;
        if (segrt_array_load(argv[3], &t) != SEGRT_OK) {
            segrt_volume_close(v);
            return fail();
        }
        int rc = segrt_dicom_seg_save(argv[4], &t, v, names, n) == SEGRT_OK ? 0 : fail();
        segrt_tensor_free(&t);
        segrt_volume_close(v);
        return rc;
    }
    if (strcmp(cmd, "regions") == 0 && argc >= 5)
        return regions(argv[2], atoi(argv[3]), (uint64_t)strtoull(argv[4], NULL, 10) | 1);
    fprintf(stderr, "segrt_vol: unknown command or missing arguments\n");
    return 2;
}
