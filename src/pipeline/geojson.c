/* Label regions as GeoJSON polygons (see geojson.h for the algorithm). */
#include "pipeline/geojson.h"

#include "core/file.h"
#include "pipeline/overlay.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Directions of travel along pixel edges, in the order of quarter turns
 * towards the region's side: the region lies on the +y side of an edge
 * going east, on the -x side of one going south, and so on. */
enum { DIR_E, DIR_S, DIR_W, DIR_N };
static const int dir_x[4] = {1, 0, -1, 0};
static const int dir_y[4] = {0, 1, 0, -1};

/* The region numbers (0 for label 0) of a height x width map. */
typedef struct regions {
    uint32_t *id;
    int64_t height, width;
} regions;

/* The region of the pixel at (row, col); 0 outside the map. */
static inline uint32_t region_at(const regions *m, int64_t row, int64_t col)
{
    if (row < 0 || col < 0 || row >= m->height || col >= m->width)
        return 0;
    return m->id[row * m->width + col];
}

/* The region of the pixel at corner (x, y) in the quadrant (qx, qy), each
 * -1 or +1. */
static inline uint32_t region_beside(const regions *m, int64_t x, int64_t y, int qx, int qy)
{
    return region_at(m, y + (qy < 0 ? -1 : 0), x + (qx < 0 ? -1 : 0));
}

/* Pass 1: numbers the 4-connected regions of labels > 0 in the order of
 * their first pixels; *n their count. The stack holds pixels numbered but
 * whose neighbours are still to be looked at. */
static sg_status number_regions(const uint8_t *labels, regions *m, uint32_t *n, const char *path)
{
    size_t w = (size_t)m->width, total = (size_t)m->height * w, cap = 0, top = 0;
    uint32_t *stack = NULL, count = 0;
    for (size_t p = 0; p < total; p++) {
        if (labels[p] == 0 || m->id[p] != 0)
            continue;
        uint8_t l = labels[p];
        m->id[p] = ++count;
        top = 0;
        size_t q = p;
        for (;;) {
            size_t x = q % w, nb[4];
            int k = 0;
            if (x > 0)
                nb[k++] = q - 1;
            if (x + 1 < w)
                nb[k++] = q + 1;
            if (q >= w)
                nb[k++] = q - w;
            if (q + w < total)
                nb[k++] = q + w;
            for (int i = 0; i < k; i++) {
                if (labels[nb[i]] != l || m->id[nb[i]] != 0)
                    continue;
                m->id[nb[i]] = count;
                if (top == cap) {
                    size_t c = cap ? 2 * cap : 4096;
                    uint32_t *s = realloc(stack, c * sizeof *s);
                    if (!s) {
                        free(stack);
                        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory numbering the label regions",
                                        path);
                    }
                    stack = s;
                    cap = c;
                }
                stack[top++] = (uint32_t)nb[i];
            }
            if (top == 0)
                break;
            q = stack[--top];
        }
    }
    free(stack);
    *n = count;
    return SEGRT_OK;
}

/* Where a ring's corners go as it is followed (pass 3). */
typedef struct ring_out {
    FILE *f;
    double scale[2], offset[2];
    bool first;
} ring_out;

static void put_corner(ring_out *o, int64_t x, int64_t y)
{
    double fx = (double)x * o->scale[1] + o->offset[1], fy = (double)y * o->scale[0] + o->offset[0];
    fprintf(o->f, o->first ? "[%.17g,%.17g]" : ",[%.17g,%.17g]", fx, fy);
    o->first = false;
}

/* Follows the ring of region r whose first edge is the top of pixel p,
 * until it comes back to that edge. With taken, marks the top edges it
 * passes; with out, writes its corners, the first one again at the end. */
static void follow_ring(const regions *m, uint32_t r, size_t p, uint8_t *taken, ring_out *out)
{
    int64_t x0 = (int64_t)(p % (size_t)m->width), y0 = (int64_t)(p / (size_t)m->width), x = x0, y = y0;
    int d = DIR_E;
    if (out)
        put_corner(out, x0, y0);
    for (;;) {
        if (d == DIR_E && taken) {
            size_t q = (size_t)y * (size_t)m->width + (size_t)x;
            taken[q >> 3] |= (uint8_t)(1u << (q & 7));
        }
        x += dir_x[d];
        y += dir_y[d];
        /* The pixels ahead of corner (x, y): on the region's side (left)
         * and on the other (right). */
        int side = (d + 1) & 3;
        int ax = dir_x[d], ay = dir_y[d], sx = dir_x[side], sy = dir_y[side];
        int next;
        if (region_beside(m, x, y, ax - sx, ay - sy) == r)
            next = (d + 3) & 3; /* a concave corner, or a pixel of r meeting the last one at the corner */
        else if (region_beside(m, x, y, ax + sx, ay + sy) == r)
            next = d;
        else
            next = side; /* a convex corner */
        if (x == x0 && y == y0 && next == DIR_E)
            break;
        if (next != d && out)
            put_corner(out, x, y);
        d = next;
    }
    if (out)
        put_corner(out, x0, y0);
}

/* Pass 2: the rings of every region, each as the pixel whose top edge
 * starts it: ring_at[first[r] .. first[r + 1]) for region r (1..n), the
 * exterior first. */
typedef struct rings {
    uint32_t *first; /* n + 2 offsets */
    uint32_t *ring_at;
} rings;

static sg_status find_rings(const regions *m, uint32_t n, rings *out, const char *path)
{
    size_t total = (size_t)m->height * (size_t)m->width, w = (size_t)m->width, count = 0, cap = 0;
    uint8_t *taken = calloc(total / 8 + 1, 1);
    uint32_t *starts = NULL, *first = calloc((size_t)n + 2, sizeof *first);
    if (!taken || !first)
        goto oom;
    for (size_t p = 0; p < total; p++) {
        uint32_t r = m->id[p];
        if (r == 0 || (taken[p >> 3] >> (p & 7)) & 1 || (p >= w && m->id[p - w] == r))
            continue;
        if (count == cap) {
            size_t c = cap ? 2 * cap : 1024;
            uint32_t *s = realloc(starts, c * sizeof *s);
            if (!s)
                goto oom;
            starts = s;
            cap = c;
        }
        starts[count++] = (uint32_t)p;
        first[r + 1]++;
        follow_ring(m, r, p, taken, NULL);
    }
    free(taken);
    taken = NULL;
    /* Counting sort by region, stable: each region's rings stay in raster
     * order of their starts, its exterior first. */
    for (uint32_t r = 1; r <= n; r++)
        first[r + 1] += first[r];
    uint32_t *ring_at = malloc((count ? count : 1) * sizeof *ring_at);
    if (!ring_at)
        goto oom;
    for (size_t i = 0; i < count; i++) {
        uint32_t r = m->id[starts[i]];
        ring_at[first[r]++] = starts[i];
    }
    for (uint32_t r = n; r >= 1; r--)
        first[r] = first[r - 1];
    first[0] = 0;
    free(starts);
    out->first = first;
    out->ring_at = ring_at;
    return SEGRT_OK;
oom:
    free(taken);
    free(starts);
    free(first);
    return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory tracing the label regions", path);
}

/* Whether s is well-formed UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF): JSON text must be. */
static bool is_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        int more;
        unsigned cp, min;
        if (c >= 0xc2 && c <= 0xdf) {
            more = 1;
            cp = c & 0x1f;
            min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            more = 2;
            cp = c & 0x0f;
            min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            more = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return false;
        }
        for (int i = 0; i < more; i++, p++) {
            if ((*p & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (*p & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
    }
    return true;
}

/* The properties object of each label 1..255 as JSON text (cJSON escapes
 * the names), into props[label]. */
static sg_status make_properties(const char *const *names, int32_t n_names, const uint8_t (*colors)[3],
                                 int32_t n_colors, char *props[256], const char *path)
{
    for (int l = 1; l < 256; l++) {
        const char *name = l < n_names ? names[l] : NULL;
        if (name && !is_utf8(name))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the class name of label %d is not UTF-8", path, l);
        char fallback[16];
        snprintf(fallback, sizeof fallback, "class %d", l);
        const uint8_t *rgb = l < n_colors ? colors[l] : sg_overlay_color(l);
        cJSON *o = cJSON_CreateObject(), *c = cJSON_CreateObject(), *col = cJSON_CreateArray();
        bool ok = o && c && col;
        for (int k = 0; ok && k < 3; k++)
            ok = cJSON_AddItemToArray(col, cJSON_CreateNumber(rgb[k]));
        ok = ok && cJSON_AddStringToObject(c, "name", name ? name : fallback) && cJSON_AddItemToObject(c, "color", col);
        if (ok)
            col = NULL;
        ok = ok && cJSON_AddStringToObject(o, "objectType", "annotation") &&
             cJSON_AddItemToObject(o, "classification", c);
        if (ok)
            c = NULL;
        props[l] = ok ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        cJSON_Delete(c);
        cJSON_Delete(col);
        if (!props[l])
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory writing the class properties", path);
    }
    return SEGRT_OK;
}

static sg_status check_args(const uint8_t *labels, int64_t height, int64_t width, const double scale[2],
                            const double offset[2], const char *const *names, int32_t n_names,
                            const uint8_t (*colors)[3], int32_t n_colors, const char *path)
{
    if (height < 0 || width < 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a label map of %lld x %lld pixels", path, (long long)height,
                        (long long)width);
    /* Pixels and regions are numbered in 32 bits, regions from 1. */
    if (height > 0 && width > 0 && (uint64_t)width > (UINT32_MAX - 1u) / (uint64_t)height)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: a label map of %lld x %lld pixels, 2^32 - 1 or more", path,
                        (long long)height, (long long)width);
    if (!labels && height > 0 && width > 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: no labels (NULL)", path);
    if (n_names < 0 || n_colors < 0 || (!names && n_names > 0) || (!colors && n_colors > 0))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: %d class names (%s) and %d colours (%s)", path, (int)n_names,
                        names ? "given" : "NULL", (int)n_colors, colors ? "given" : "NULL");
    for (int a = 0; a < 2; a++) {
        double s = scale ? scale[a] : 1.0, o = offset ? offset[a] : 0.0;
        int64_t n = a == 0 ? height : width;
        if (!(isfinite(s) && s > 0.0) || !isfinite(o))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: %s scale %g and offset %g (a finite scale > 0 and a finite offset needed)", path,
                            a == 0 ? "y" : "x", s, o);
        if (!isfinite((double)n * s + o))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: %s scale %g and offset %g put the map's far edge out of range", path,
                            a == 0 ? "y" : "x", s, o);
    }
    return SEGRT_OK;
}

/* Pass 3: the FeatureCollection into f. */
static void write_features(FILE *f, const regions *m, uint32_t n, const rings *rg, const uint8_t *labels,
                           char *props[256], const double scale[2], const double offset[2])
{
    ring_out out = {f, {scale[0], scale[1]}, {offset[0], offset[1]}, true};
    fputs("{\"type\":\"FeatureCollection\",\"features\":[", f);
    for (uint32_t r = 1; r <= n; r++) {
        uint32_t p0 = rg->ring_at[rg->first[r]];
        fputs(r > 1 ? ",\n" : "\n", f);
        fputs("{\"type\":\"Feature\",\"geometry\":{\"type\":\"Polygon\",\"coordinates\":[", f);
        for (uint32_t i = rg->first[r]; i < rg->first[r + 1]; i++) {
            fputs(i > rg->first[r] ? ",[" : "[", f);
            out.first = true;
            follow_ring(m, r, rg->ring_at[i], NULL, &out);
            fputc(']', f);
        }
        fprintf(f, "]},\"properties\":%s}", props[labels[p0]]);
    }
    fputs("\n]}\n", f);
}

sg_status sg_labels_write_geojson(const uint8_t *labels, int64_t height, int64_t width, const double scale[2],
                                  const double offset[2], const char *const *names, int32_t n_names,
                                  const uint8_t (*colors)[3], int32_t n_colors, const char *path)
{
    if (!path)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "GeoJSON output: no path (NULL)");
    SG_TRY(check_args(labels, height, width, scale, offset, names, n_names, colors, n_colors, path));
    const double one[2] = {1.0, 1.0}, zero[2] = {0.0, 0.0};
    scale = scale ? scale : one;
    offset = offset ? offset : zero;

    char *props[256] = {NULL};
    regions m = {NULL, height, width};
    rings rg = {NULL, NULL};
    uint32_t n = 0;
    sg_output *o = NULL;
    sg_status st = make_properties(names, n_names, colors, n_colors, props, path);
    if (st == SEGRT_OK)
        st = sg_output_open(path, &o);
    if (st == SEGRT_OK) {
        m.id = calloc((size_t)height * (size_t)width + 1, sizeof *m.id);
        if (!m.id)
            st = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory for a %lld x %lld map of regions", path,
                          (long long)height, (long long)width);
    }
    if (st == SEGRT_OK && height > 0 && width > 0)
        st = number_regions(labels, &m, &n, path);
    if (st == SEGRT_OK)
        st = find_rings(&m, n, &rg, path);
    if (st == SEGRT_OK) {
        FILE *f = sg_output_stream(o);
        if (!f) {
            st = sg_error(SEGRT_ERROR_IO, "%s: cannot write: %s", path, strerror(errno));
        } else {
            write_features(f, &m, n, &rg, labels, props, scale, offset);
            if (ferror(f))
                st = sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", path, strerror(errno));
        }
    }
    free(m.id);
    free(rg.first);
    free(rg.ring_at);
    for (int l = 0; l < 256; l++)
        cJSON_free(props[l]);
    if (st == SEGRT_OK) {
        st = sg_output_commit(o);
    } else {
        sg_output_discard(o);
    }
    return st;
}
