/* Tissue masks of whole-slide images (tissue.h says the method and why). */
#include "pipeline/tissue.h"

#include "io/sink.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The most bytes of the level one read holds (tissue.h). */
#define TISSUE_READ_BYTES ((int64_t)16 << 20)

/* Marks the component walks leave in the mask before it is 0/1 again. */
enum { KEPT = 2, OPEN = 3 };

/* q = round(255 (max - min) / max), in integers; 0 for black. */
static uint8_t saturation_bin(int r, int g, int b)
{
    int mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
    int mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    return mx ? (uint8_t)((255 * (mx - mn) + mx / 2) / mx) : 0;
}

/* The level and reduction (tissue.h) for a grid of at most max_px pixels. */
static void choose_level(const sg_source_info *in, double max_px, int32_t *level, int64_t *f)
{
    for (int32_t l = 0; l < in->n_levels; l++)
        if ((double)in->dims[l][1] * (double)in->dims[l][2] <= max_px) {
            *level = l;
            *f = 1;
            return;
        }
    *level = in->n_levels - 1;
    int64_t h = in->dims[*level][1], w = in->dims[*level][2];
    int64_t k = (int64_t)ceil(sqrt((double)h * (double)w / max_px));
    k = k < 2 ? 2 : k;
    while ((double)((h + k - 1) / k) * (double)((w + k - 1) / k) > max_px)
        k++;
    *f = k;
}

/* Reads the level by boxes; per mask pixel its saturation bin into q and
 * whether it is bright enough to judge into bright (tissue.h). */
static sg_status read_saturation(sg_source *s, int32_t level, int64_t f, int64_t max_read, sg_tissue_mask *m,
                                 uint8_t *q, uint8_t *bright)
{
    int64_t h = s->info.dims[level][1], w = s->info.dims[level][2], H = m->height, W = m->width;
    /* A box of kr x kc mask pixels: at least one, else within max_read. */
    int64_t per = 3 * f * f, kc = max_read / per;
    kc = kc < 1 ? 1 : (kc > W ? W : kc);
    int64_t kr = max_read / (per * kc);
    kr = kr < 1 ? 1 : (kr > H ? H : kr);
    uint8_t *buf = malloc((size_t)(per * kr * kc));
    uint64_t *sum = calloc((size_t)(3 * kc), sizeof *sum);
    if (!buf || !sum) {
        free(buf);
        free(sum);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to read level %d for its tissue mask", s->path,
                        level);
    }
    sg_status st = SEGRT_OK;
    for (int64_t i0 = 0; i0 < H && st == SEGRT_OK; i0 += kr)
        for (int64_t j0 = 0; j0 < W && st == SEGRT_OK; j0 += kc) {
            int64_t y = i0 * f, x = j0 * f;
            int64_t bh = (i0 + kr) * f < h ? kr * f : h - y, bw = (j0 + kc) * f < w ? kc * f : w - x;
            sg_box box = {{0, y, x}, {1, bh, bw}};
            if ((st = sg_source_read_region(s, level, &box, buf)) != SEGRT_OK)
                break;
            const uint8_t *pr = buf, *pg = buf + bh * bw, *pb = buf + 2 * bh * bw;
            int64_t ncols = (bw + f - 1) / f;
            for (int64_t bi = 0; bi * f < bh; bi++) {
                memset(sum, 0, sizeof *sum * (size_t)(3 * ncols));
                int64_t rows = (bi + 1) * f < bh ? f : bh - bi * f;
                for (int64_t r = bi * f; r < bi * f + rows; r++)
                    for (int64_t c = 0; c < bw; c++) {
                        int64_t k = r * bw + c, j = c / f;
                        sum[3 * j] += pr[k];
                        sum[3 * j + 1] += pg[k];
                        sum[3 * j + 2] += pb[k];
                    }
                for (int64_t j = 0; j < ncols; j++) {
                    uint64_t n = (uint64_t)rows * (uint64_t)((j + 1) * f < bw ? f : bw - j * f);
                    int rgb[3];
                    for (int c = 0; c < 3; c++)
                        rgb[c] = (int)((sum[3 * j + c] + n / 2) / n);
                    int64_t at = (i0 + bi) * W + j0 + j;
                    q[at] = saturation_bin(rgb[0], rgb[1], rgb[2]);
                    bright[at] = rgb[0] >= SG_TISSUE_DARK || rgb[1] >= SG_TISSUE_DARK || rgb[2] >= SG_TISSUE_DARK;
                }
            }
        }
    free(buf);
    free(sum);
    return st;
}

/* Otsu's threshold over hist's bins from its least occupied to its
 * largest (skimage's threshold_otsu on an integer image: the split after
 * bin t maximising w1 w2 (m1 - m2)^2, the first of equal maxima). -1 when
 * fewer than two bins are occupied: *only is then the one bin (0 for
 * none). */
static int otsu(const uint64_t *hist, int *only)
{
    int lo = 0, hi = 255;
    while (lo < 256 && !hist[lo])
        lo++;
    while (hi >= 0 && !hist[hi])
        hi--;
    if (lo >= hi) {
        *only = lo < 256 ? lo : 0;
        return -1;
    }
    double total = 0, total_sum = 0;
    for (int b = lo; b <= hi; b++) {
        total += (double)hist[b];
        total_sum += (double)hist[b] * b;
    }
    double w1 = 0, s1 = 0, best = -1;
    int t = lo;
    for (int b = lo; b < hi; b++) {
        w1 += (double)hist[b];
        s1 += (double)hist[b] * b;
        double w2 = total - w1, m1 = s1 / w1, m2 = (total_sum - s1) / w2;
        double v = w1 * w2 * (m1 - m2) * (m1 - m2);
        if (v > best) {
            best = v;
            t = b;
        }
    }
    return t;
}

/* Every component of pixels equal to `from` (8-connected when diag, else
 * 4), breadth-first through queue (H*W entries): one with fewer than
 * min_px pixels becomes `small`, the others `big`. */
static void components(uint8_t *m, int64_t H, int64_t W, uint8_t from, bool diag, double min_px, uint8_t small,
                       uint8_t big, int32_t *queue)
{
    for (int64_t p0 = 0; p0 < H * W; p0++) {
        if (m[p0] != from)
            continue;
        int64_t head = 0, tail = 0;
        queue[tail++] = (int32_t)p0;
        m[p0] = OPEN;
        while (head < tail) {
            int64_t p = queue[head++], i = p / W, j = p % W;
            for (int64_t di = -1; di <= 1; di++)
                for (int64_t dj = -1; dj <= 1; dj++) {
                    int64_t y = i + di, x = j + dj;
                    if ((!di && !dj) || (!diag && di && dj) || y < 0 || y >= H || x < 0 || x >= W)
                        continue;
                    if (m[y * W + x] == from) {
                        m[y * W + x] = OPEN;
                        queue[tail++] = (int32_t)(y * W + x);
                    }
                }
        }
        uint8_t to = (double)tail < min_px ? small : big;
        for (int64_t k = 0; k < tail; k++)
            m[queue[k]] = to;
    }
}

/* A size option's value in mask pixels: 0 the default, < 0 none. */
static double size_px(double v, double px_um2)
{
    if (v < 0)
        return 0;
    if (v == 0)
        return px_um2 > 0 ? SG_TISSUE_DEFAULT_UM2 / px_um2 : SG_TISSUE_DEFAULT_PX;
    return px_um2 > 0 ? v / px_um2 : v;
}

void sg_tissue_mask_free(sg_tissue_mask *m)
{
    if (!m)
        return;
    free(m->mask);
    free(m->sat);
    memset(m, 0, sizeof *m);
}

sg_status sg_tissue_detect(sg_source *s, const sg_tissue_options *opt, sg_tissue_mask *out)
{
    memset(out, 0, sizeof *out);
    sg_tissue_options o = {0, 0, 0};
    if (opt)
        o = *opt;
    const sg_source_info *in = &s->info;
    if (in->n_dims != 2 || in->channels != 3 || in->dtype != SEGRT_DTYPE_UINT8)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: a tissue mask is computed from a 2-D RGB uint8 image; this one is %d-D, %d channels "
                        "of %s",
                        s->path, (int)in->n_dims, (int)in->channels, segrt_dtype_name(in->dtype));
    double max_px = o.max_mask_pixels > 0 ? o.max_mask_pixels : SG_TISSUE_DEFAULT_PIXELS;
    if (!(o.max_mask_pixels >= 0) || max_px > (double)INT32_MAX || max_px < 1 || isnan(o.min_object_um2) ||
        isnan(o.min_hole_um2))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: tissue mask options out of range (max_mask_pixels %g: 1 to 2^31 - 1 or 0; sizes %g "
                        "and %g)",
                        s->path, o.max_mask_pixels, o.min_object_um2, o.min_hole_um2);
    int32_t level;
    int64_t f;
    choose_level(in, max_px, &level, &f);
    int64_t h = in->dims[level][1], w = in->dims[level][2], H = (h + f - 1) / f, W = (w + f - 1) / f;
    out->height = H;
    out->width = W;
    out->level = level;
    out->reduce = (int32_t)f;
    out->scale[0] = out->scale[1] = in->downsample[level] * (double)f;
    double mpp_y = in->spacing[1] * 1000, mpp_x = in->spacing[2] * 1000;
    double px_um2 = mpp_y > 0 && mpp_x > 0 ? out->scale[0] * mpp_y * out->scale[1] * mpp_x : 0;
    out->min_object_px = size_px(o.min_object_um2, px_um2);
    out->min_hole_px = size_px(o.min_hole_um2, px_um2);
    int64_t max_read = (int64_t)(max_px * 3) < TISSUE_READ_BYTES ? (int64_t)(max_px * 3) : TISSUE_READ_BYTES;

    size_t n = (size_t)(H * W);
    uint8_t *q = malloc(n);
    int32_t *queue = NULL;
    out->mask = malloc(n);
    out->sat = calloc((size_t)((H + 1) * (W + 1)), sizeof *out->sat);
    sg_status st = SEGRT_OK;
    if (!q || !out->mask || !out->sat)
        st = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for a %lld x %lld tissue mask", s->path, (long long)H,
                      (long long)W);
    if (st == SEGRT_OK)
        st = read_saturation(s, level, f, max_read, out, q, out->mask);
    if (st == SEGRT_OK) {
        uint64_t hist[256] = {0};
        for (size_t i = 0; i < n; i++)
            hist[q[i]] += out->mask[i];
        int only = 0, t = otsu(hist, &only);
        out->threshold = (t < 0 ? only : t) / 255.0;
        int cut = t > SG_TISSUE_MIN_BIN ? t : SG_TISSUE_MIN_BIN;
        for (size_t i = 0; i < n; i++)
            out->mask[i] = t >= 0 && out->mask[i] && q[i] > cut;
        if (!(queue = malloc(sizeof *queue * n)))
            st = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to label a %lld x %lld tissue mask", s->path,
                          (long long)H, (long long)W);
    }
    if (st == SEGRT_OK) {
        components(out->mask, H, W, 1, true, out->min_object_px, 0, KEPT, queue);
        for (size_t i = 0; i < n; i++)
            out->mask[i] = out->mask[i] == KEPT;
        components(out->mask, H, W, 0, false, out->min_hole_px, 1, KEPT, queue);
        for (size_t i = 0; i < n; i++)
            out->mask[i] = out->mask[i] == 1;
        for (int64_t i = 0; i < H; i++) {
            uint32_t row = 0;
            for (int64_t j = 0; j < W; j++) {
                row += out->mask[i * W + j];
                out->sat[(i + 1) * (W + 1) + j + 1] = out->sat[i * (W + 1) + j + 1] + row;
            }
        }
    }
    free(q);
    free(queue);
    if (st != SEGRT_OK)
        sg_tissue_mask_free(out);
    return st;
}

/* The mask indices [lo, hi] whose footprints [i s, (i+1) s) overlap [a, a +
 * len), clipped to [0, n); false when none. The guess from a division is
 * corrected by the products themselves, so the answer is exactly the
 * footprint test's. */
static bool overlapping(double a, double len, double s, int64_t n, int64_t *lo, int64_t *hi)
{
    double b = a + len;
    if (!(len > 0) || !(b > 0) || !((double)n * s > a))
        return false;
    int64_t i = a <= 0 ? 0 : (int64_t)floor(a / s);
    i = i >= n ? n - 1 : i;
    while (i > 0 && (double)i * s > a) /* the pixel before also reaches past a */
        i--;
    while (i < n - 1 && (double)(i + 1) * s <= a)
        i++;
    int64_t k = (int64_t)ceil(b / s) - 1;
    k = k < 0 ? 0 : (k >= n ? n - 1 : k);
    while (k < n - 1 && (double)(k + 1) * s < b)
        k++;
    while (k > 0 && !((double)k * s < b))
        k--;
    *lo = i;
    *hi = k;
    return i <= k;
}

bool sg_tissue_box(const sg_tissue_mask *m, double y0, double x0, double h, double w)
{
    int64_t i0, i1, j0, j1;
    if (!m->sat || !overlapping(y0, h, m->scale[0], m->height, &i0, &i1) ||
        !overlapping(x0, w, m->scale[1], m->width, &j0, &j1))
        return false;
    int64_t W1 = m->width + 1;
    uint32_t s =
        m->sat[(i1 + 1) * W1 + j1 + 1] - m->sat[i0 * W1 + j1 + 1] - m->sat[(i1 + 1) * W1 + j0] + m->sat[i0 * W1 + j0];
    return s > 0;
}

sg_status sg_tissue_write_png(const sg_tissue_mask *m, const char *path)
{
    sg_sink_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = SEGRT_DTYPE_UINT8;
    d.n_dims = 2;
    d.channels = 1;
    d.dims[0] = 1;
    d.dims[1] = m->height;
    d.dims[2] = m->width;
    sg_sink *sink;
    SG_TRY(sg_sink_open(path, &d, &sink));
    uint8_t *row = malloc((size_t)(m->width ? m->width : 1));
    if (!row) {
        sg_sink_discard(sink);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for a row of the tissue mask", path);
    }
    sg_status st = SEGRT_OK;
    for (int64_t i = 0; i < m->height && st == SEGRT_OK; i++) {
        for (int64_t j = 0; j < m->width; j++)
            row[j] = m->mask[i * m->width + j] ? 255 : 0;
        sg_box b = {{0, i, 0}, {1, 1, m->width}};
        st = sg_sink_write(sink, &b, row);
    }
    free(row);
    if (st != SEGRT_OK) {
        sg_sink_discard(sink);
        return st;
    }
    return sg_sink_commit(sink);
}
