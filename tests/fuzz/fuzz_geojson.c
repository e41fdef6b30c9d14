/* libFuzzer target: label regions as GeoJSON (pipeline/geojson.c). The
 * input is a label map and its options:
 *   byte 0     width - 1 (the map is up to 64 pixels wide)
 *   byte 1     K: labels are the map's bytes modulo K + 2, or the bytes
 *              themselves when K is 255 (few labels make large regions,
 *              holes and corners; all 256 reach every class's properties)
 *   byte 2     the length L (0..31) of a class name for label 1 that
 *              follows the header, bit 7 set: no name
 *   byte 3     the scale and offset: bit 0 unit scale and zero offset,
 *              else 0.25 and 3 in y, 7.5 and -1e6 in x
 *   L bytes    the name (any bytes: UTF-8 or not)
 *   the rest   the map, row by row (its last partial row dropped).
 * A call must succeed or fail with a message; a map with no name must
 * succeed, and its file must parse (cJSON) into one feature per
 * 4-connected region whose rings are closed, the exterior's signed area
 * positive and the holes' negative, their sum the region's pixel count
 * times the scales' product (the features of label l named "class l",
 * summed by label). Nothing may crash, leak or read out of bounds. */
#include "pipeline/geojson.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why)
{
    fprintf(stderr, "fuzz_geojson: %s\n", why);
    abort();
}

static char out_dir[64], out_file[96];

static void remove_output(void)
{
    unlink(out_file);
    rmdir(out_dir);
}

/* The output, in a folder made once and removed at exit: in /dev/shm
 * where there is one, since each commit fsyncs (a no-op on tmpfs, tens of
 * milliseconds on a disk). */
static const char *out_path(void)
{
    if (!out_file[0]) {
        snprintf(out_dir, sizeof out_dir, "%s/segrt-fuzz-geojson-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(out_dir))
            fail("cannot make a folder");
        snprintf(out_file, sizeof out_file, "%s/out.geojson", out_dir);
        atexit(remove_output);
    }
    return out_file;
}

/* 4-connected regions of labels > 0, counted; pixels of each label into
 * per_label. */
static int64_t count_regions(const uint8_t *m, int64_t h, int64_t w, int64_t per_label[256])
{
    int64_t n = 0, total = h * w;
    uint8_t *seen = calloc((size_t)total + 1, 1);
    int64_t *stack = malloc(((size_t)total + 1) * sizeof *stack);
    if (!seen || !stack)
        fail("out of memory");
    for (int64_t p = 0; p < total; p++) {
        per_label[m[p]]++;
        if (m[p] == 0 || seen[p])
            continue;
        n++;
        int64_t top = 0;
        stack[top++] = p;
        seen[p] = 1;
        while (top) {
            int64_t q = stack[--top], x = q % w;
            int64_t nb[4] = {x > 0 ? q - 1 : -1, x + 1 < w ? q + 1 : -1, q - w, q + w < total ? q + w : -1};
            for (int i = 0; i < 4; i++)
                if (nb[i] >= 0 && !seen[nb[i]] && m[nb[i]] == m[p]) {
                    seen[nb[i]] = 1;
                    stack[top++] = nb[i];
                }
        }
    }
    free(seen);
    free(stack);
    return n;
}

/* Twice the signed area of a ring (shoelace); fails on a malformed ring. */
static double ring_area2(const cJSON *ring)
{
    int n = cJSON_GetArraySize(ring);
    if (!cJSON_IsArray(ring) || n < 5)
        fail("a ring of fewer than 5 points");
    double x0 = 0, y0 = 0, px = 0, py = 0, a = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *pt = cJSON_GetArrayItem(ring, i);
        const cJSON *x = cJSON_GetArrayItem(pt, 0), *y = cJSON_GetArrayItem(pt, 1);
        if (cJSON_GetArraySize(pt) != 2 || !cJSON_IsNumber(x) || !cJSON_IsNumber(y))
            fail("a point that is not [x, y]");
        if (i == 0) {
            x0 = x->valuedouble;
            y0 = y->valuedouble;
        } else {
            a += px * y->valuedouble - x->valuedouble * py;
        }
        px = x->valuedouble;
        py = y->valuedouble;
    }
    if (px != x0 || py != y0)
        fail("a ring not closed");
    return a;
}

static void check_output(const char *path, const uint8_t *m, int64_t h, int64_t w, double cell)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail("no output file");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n)
        fail("cannot read the output");
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *feats = cJSON_GetObjectItemCaseSensitive(root, "features");
    if (!cJSON_IsArray(feats))
        fail("no features array");
    int64_t per_label[256] = {0};
    double area[256] = {0};
    if (count_regions(m, h, w, per_label) != cJSON_GetArraySize(feats))
        fail("features and 4-connected regions differ in number");
    const cJSON *feat;
    cJSON_ArrayForEach(feat, feats)
    {
        const cJSON *rings =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(feat, "geometry"), "coordinates");
        const cJSON *cls =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(feat, "properties"), "classification");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cls, "name");
        int label;
        if (!cJSON_IsString(name) || sscanf(name->valuestring, "class %d", &label) != 1 || label < 1 || label > 255)
            fail("a feature without its class name");
        if (!cJSON_IsArray(rings) || cJSON_GetArraySize(rings) < 1)
            fail("a polygon without rings");
        const cJSON *ring;
        int i = 0;
        cJSON_ArrayForEach(ring, rings)
        {
            double a = ring_area2(ring) / 2;
            if ((i++ == 0) != (a > 0))
                fail("an exterior not counter-clockwise or a hole not clockwise");
            area[label] += a;
        }
    }
    for (int l = 1; l < 256; l++)
        if (fabs(area[l] - (double)per_label[l] * cell) > 1e-6 * (double)(per_label[l] + 1) * cell)
            fail("a label's polygons' area is not its pixels'");
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    int64_t w = (int64_t)data[0] % 64 + 1;
    unsigned k = data[1];
    bool named = !(data[2] & 0x80), unit = data[3] & 1;
    size_t name_len = named ? data[2] & 31u : 0;
    if (size < 4 + name_len)
        return 0;
    char name[32];
    memcpy(name, data + 4, name_len);
    name[name_len] = '\0';
    const uint8_t *raw = data + 4 + name_len;
    int64_t h = (int64_t)(size - 4 - name_len) / w;
    uint8_t *m = malloc((size_t)(h * w) + 1);
    if (!m)
        return 0;
    for (int64_t i = 0; i < h * w; i++)
        m[i] = k == 255 ? raw[i] : (uint8_t)(raw[i] % (k % 6 + 2));
    const double unit_scale[2] = {1, 1}, zero[2] = {0, 0}, scale[2] = {0.25, 7.5}, offset[2] = {3, -1e6};
    const char *names[2] = {NULL, name};
    const char *path = out_path();
    sg_status st = sg_labels_write_geojson(m, h, w, unit ? unit_scale : scale, unit ? zero : offset,
                                           named ? names : NULL, named ? 2 : 0, NULL, 0, path);
    if (st != SEGRT_OK && sg_last_error()[0] == '\0')
        fail("a failure without a message");
    if (!named && st != SEGRT_OK)
        fail(sg_last_error());
    if (!named)
        check_output(path, m, h, w, unit ? 1.0 : 0.25 * 7.5);
    free(m);
    return 0;
}
