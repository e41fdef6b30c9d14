/* The CUDA backend's volume operations (backend/backend_volume.h) against
 * the CPU backend's, the reference: for a list of cases drawn from a seed
 * (sizes with odd and one-voxel axes, 1 to 3 channels, every axis, every
 * interpolation, scales below and above 1, transposes, flips and crops
 * with negative strides, masked and unmasked, uint8 and uint16 labels, 2
 * and 300 classes), each operation runs through both tables on the same
 * data, and one line per case gives the largest difference. Every CUDA
 * case also runs twice, and the two results must be bit-identical.
 *
 * Tolerances: float results (resampling, spline prefilter, intensities)
 * within 1e-5 of the reference's largest magnitude; sums and sums of
 * squares of the statistics within 1e-5 of the sum of magnitudes;
 * copies, fills, masks, boxes, counts, minima and maxima exact. Labels
 * exact, except that a voxel whose two labels' scores, interpolated on
 * the host in double, differ but by 1e-5 or less (relative, or absolute
 * below 1) is a tie within float rounding: such voxels are counted and
 * shown, not failed. Where the host's two scores are equal, the first
 * class must win, as numpy's argmax has it (the CUDA label must be the
 * smaller). Quantized scores make exact ties common. (The CUDA kernels
 * add the CPU's terms in its order without fused multiply-adds, so no
 * difference is expected.)
 *
 * usage: test_gpu_volume_ops [--seed N] [--small] [--self]
 *   --small leaves out the large volumes (for runs under
 *   compute-sanitizer); --self compares the CPU table with itself (host
 *   memory), to check the harness where there is no GPU.
 * Exit 0: every case within its tolerance; 1: a case out of it or a
 * failed call; 77: skipped, no CUDA backend or device (ctest takes 77 as
 * skipped); 2: bad usage. */
#include "backend/backend.h"
#include "backend/backend_volume.h"
#include "backend/backend_window.h"
#include "segrt.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-5

typedef struct side {
    const char *name;
    const sg_volume_ops *ops;
    const sg_window_ops *win; /* NULL: host memory */
    sg_backend_stream *stream;
} side;

static side ref, dev;
static int failures, n_cases;

/* splitmix64 */
static uint64_t rng_state = 1;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double urand(void)
{
    return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0);
}

static int64_t irand(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static void *xmalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "test_gpu_volume_ops: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* A failed call fails its case, naming it. */
static bool call_ok(sg_status s, const side *sd, const char *what)
{
    if (s == SEGRT_OK)
        return true;
    printf("    %s %s failed: %s\n", sd->name, what, segrt_last_error());
    return false;
}

/* Memory of a side: device memory through the backend's window
 * operations, or host memory. */
static void *s_alloc(const side *sd, size_t bytes)
{
    if (!sd->win)
        return xmalloc(bytes);
    void *p = NULL;
    if (sd->win->device_alloc(0, bytes ? bytes : 1, &p) != SEGRT_OK) {
        fprintf(stderr, "test_gpu_volume_ops: %s\n", segrt_last_error());
        exit(1);
    }
    return p;
}

static void s_free(const side *sd, void *p)
{
    if (sd->win)
        sd->win->device_free(p);
    else
        free(p);
}

static bool s_put(const side *sd, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return true;
    if (!sd->win) {
        memcpy(dst, src, bytes);
        return true;
    }
    /* On the side's stream, which the operations then run on: a blocking
     * copy from pageable memory may return before its data lands, and the
     * legacy stream it runs on does not order a non-blocking one. */
    return call_ok(sd->win->copy_async(dst, src, bytes, SG_WINDOW_HOST_TO_DEVICE, sd->stream), sd, "upload") &&
           call_ok(sd->win->stream_synchronize(sd->stream), sd, "stream_synchronize");
}

/* After the side's queued work. */
static bool s_get(const side *sd, void *dst, const void *src, size_t bytes)
{
    if (!sd->win) {
        memcpy(dst, src, bytes);
        return true;
    }
    if (!call_ok(sd->win->stream_synchronize(sd->stream), sd, "stream_synchronize"))
        return false;
    return !bytes || call_ok(sd->win->copy(dst, src, bytes, SG_WINDOW_DEVICE_TO_HOST), sd, "download");
}

static void *s_upload(const side *sd, const void *host, size_t bytes)
{
    void *p = s_alloc(sd, bytes);
    if (host && !s_put(sd, p, host, bytes)) {
        s_free(sd, p);
        return NULL;
    }
    return p;
}

static int64_t count4(const int64_t d[4])
{
    return d[0] * d[1] * d[2] * d[3];
}

static float *random_floats(int64_t n, double lo, double hi)
{
    float *x = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
    return x;
}

/* A case's verdict and its line. */
static void verdict(bool ok, const char *desc, const char *detail)
{
    n_cases++;
    if (!ok)
        failures++;
    printf("%-4s case %3d %s: %s\n", ok ? "ok" : "FAIL", n_cases, desc, detail);
}

/* Float results: ref, the device's, and the device's second run. */
static void judge_floats(const char *desc, const float *a, const float *b, const float *b2, int64_t n)
{
    double diff = 0.0, mag = 0.0;
    int64_t nan_mismatch = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) {
            nan_mismatch++;
            continue;
        }
        if (isnan(a[i]))
            continue;
        mag = fmax(mag, fabs((double)a[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    const double rel = diff / fmax(mag, FLT_MIN);
    const bool repeat = memcmp(b, b2, sizeof(float) * (size_t)n) == 0;
    char line[256];
    snprintf(line, sizeof line, "max |diff| %.3g (relative %.3g, tolerance %.0e)%s%s", diff, rel, REL_TOL,
             nan_mismatch ? ", NaN positions differ" : "", repeat ? "" : ", the second CUDA run differs");
    verdict(rel <= REL_TOL && !nan_mismatch && repeat, desc, line);
}

/* Exact results (bytes of elements of `elem` bytes). */
static void judge_exact(const char *desc, const void *a, const void *b, const void *b2, int64_t n, size_t elem)
{
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem)) {
            if (first < 0)
                first = i;
            differ++;
        }
    const bool repeat = memcmp(b, b2, elem * (size_t)n) == 0;
    char line[256];
    if (differ)
        snprintf(line, sizeof line, "%" PRId64 " of %" PRId64 " elements differ, first at %" PRId64 "%s", differ, n,
                 first, repeat ? "" : ", the second CUDA run differs");
    else
        snprintf(line, sizeof line, "%" PRId64 " elements identical%s", n,
                 repeat ? "" : ", the second CUDA run differs");
    verdict(!differ && repeat, desc, line);
}

static const char *interp_name(sg_vol_interp i)
{
    return i == SG_VOL_NEAREST ? "nearest" : i == SG_VOL_LINEAR ? "linear" : "cubic";
}

/* strided_copy -------------------------------------------------------------------- */

/* A box of a C x F[0] x F[1] x F[2] volume seen through a permutation of
 * its spatial axes and flips: iteration dims it[4], strides st[4] of the
 * volume and the offset of the view's first element. */
typedef struct view {
    int64_t it[4], st[4], offset;
} view;

static view make_view(const int64_t full[4], const int64_t origin[3], const int64_t size[3], const int perm[3],
                      const bool flip[3])
{
    const int64_t fs[4] = {full[1] * full[2] * full[3], full[2] * full[3], full[3], 1};
    view v;
    v.it[0] = full[0];
    v.st[0] = fs[0];
    v.offset = 0;
    for (int d = 0; d < 3; d++)
        v.offset += (origin[d] + (flip[d] ? size[d] - 1 : 0)) * fs[1 + d];
    for (int a = 0; a < 3; a++) {
        const int d = perm[a];
        v.it[1 + a] = size[d];
        v.st[1 + a] = flip[d] ? -fs[1 + d] : fs[1 + d];
    }
    return v;
}

/* One copy on a side: src (host) uploaded, dst (host, dst_elems) uploaded
 * too (a crop's inverse writes into part of it), the result downloaded. */
static bool copy_on(const side *sd, size_t es, const void *src, int64_t src_elems, int64_t src_off,
                    const int64_t ss[4], void *dst, int64_t dst_elems, int64_t dst_off, const int64_t ds[4],
                    const int64_t it[4])
{
    char *s = s_upload(sd, src, es * (size_t)src_elems), *d = s_upload(sd, dst, es * (size_t)dst_elems);
    bool ok = s && d &&
              call_ok(sd->ops->strided_copy(sd->stream, es, s, src_off, ss, d + es * (size_t)dst_off, ds, it), sd,
                      "strided_copy") &&
              s_get(sd, dst, d, es * (size_t)dst_elems);
    s_free(sd, s);
    s_free(sd, d);
    return ok;
}

static void case_copy(const int64_t full[4], size_t es, bool inverse)
{
    int64_t origin[3], size[3];
    int perm[3] = {0, 1, 2};
    bool flip[3];
    for (int d = 0; d < 3; d++) {
        size[d] = irand(1, full[1 + d]);
        origin[d] = irand(0, full[1 + d] - size[d]);
        flip[d] = urand() < 0.5;
    }
    for (int i = 2; i > 0; i--) {
        int j = (int)irand(0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    view v = make_view(full, origin, size, perm, flip);
    const int64_t n_full = count4(full), n_box = count4(v.it);
    const int64_t cs[4] = {v.it[1] * v.it[2] * v.it[3], v.it[2] * v.it[3], v.it[3], 1}; /* the box, contiguous */
    unsigned char *src = xmalloc(es * (size_t)(inverse ? n_box : n_full));
    for (int64_t i = 0; i < (inverse ? n_box : n_full) * (int64_t)es; i++)
        src[i] = (unsigned char)rnd();
    const int64_t n_dst = inverse ? n_full : n_box;
    unsigned char *a = xmalloc(es * (size_t)n_dst), *b = xmalloc(es * (size_t)n_dst), *b2 = xmalloc(es * (size_t)n_dst);
    bool ok;
    if (inverse) /* the box written back into a zeroed volume */
        ok = copy_on(&ref, es, src, n_box, 0, cs, a, n_dst, v.offset, v.st, v.it) &&
             copy_on(&dev, es, src, n_box, 0, cs, b, n_dst, v.offset, v.st, v.it) &&
             copy_on(&dev, es, src, n_box, 0, cs, b2, n_dst, v.offset, v.st, v.it);
    else
        ok = copy_on(&ref, es, src, n_full, v.offset, v.st, a, n_dst, 0, cs, v.it) &&
             copy_on(&dev, es, src, n_full, v.offset, v.st, b, n_dst, 0, cs, v.it) &&
             copy_on(&dev, es, src, n_full, v.offset, v.st, b2, n_dst, 0, cs, v.it);
    char desc[256];
    snprintf(desc, sizeof desc,
             "strided_copy %s %zu-byte %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " box %" PRId64 "x%" PRId64
             "x%" PRId64 " axes %d%d%d flips %d%d%d",
             inverse ? "into" : "from", es, full[0], full[1], full[2], full[3], size[0], size[1], size[2], perm[0],
             perm[1], perm[2], flip[0], flip[1], flip[2]);
    if (ok)
        judge_exact(desc, a, b, b2, n_dst, es);
    else
        verdict(false, desc, "a call failed");
    free(src);
    free(a);
    free(b);
    free(b2);
}

static bool fill_on(const side *sd, int value, size_t bytes, unsigned char *out)
{
    unsigned char *d = s_alloc(sd, bytes);
    bool ok = call_ok(sd->ops->fill(sd->stream, d, value, bytes), sd, "fill") && s_get(sd, out, d, bytes);
    s_free(sd, d);
    return ok;
}

static void case_fill(size_t bytes)
{
    const int value = (int)irand(0, 255);
    unsigned char *a = xmalloc(bytes), *b = xmalloc(bytes), *b2 = xmalloc(bytes);
    char desc[128];
    snprintf(desc, sizeof desc, "fill %zu bytes with %d", bytes, value);
    if (fill_on(&ref, value, bytes, a) && fill_on(&dev, value, bytes, b) && fill_on(&dev, value, bytes, b2))
        judge_exact(desc, a, b, b2, (int64_t)bytes, 1);
    else
        verdict(false, desc, "a call failed");
    free(a);
    free(b);
    free(b2);
}

/* Resampling and the spline prefilter ---------------------------------------------- */

static bool resample_on(const side *sd, const float *src, const int64_t dims[4], int32_t axis,
                        const sg_vol_axis *ax, float *out, int64_t n_out)
{
    float *s = s_upload(sd, src, sizeof(float) * (size_t)count4(dims)), *d = s_alloc(sd, sizeof(float) * n_out);
    bool ok = s && call_ok(sd->ops->resample_axis(sd->stream, s, dims, axis, ax, d), sd, "resample_axis") &&
              s_get(sd, out, d, sizeof(float) * (size_t)n_out);
    s_free(sd, s);
    s_free(sd, d);
    return ok;
}

static bool prefilter_on(const side *sd, const float *src, const int64_t dims[4], int32_t axis, float *out)
{
    const size_t bytes = sizeof(float) * (size_t)count4(dims);
    float *d = s_upload(sd, src, bytes);
    bool ok = d && call_ok(sd->ops->spline_prefilter(sd->stream, d, dims, axis), sd, "spline_prefilter") &&
              s_get(sd, out, d, bytes);
    s_free(sd, d);
    return ok;
}

static void case_prefilter(const int64_t dims[4], int32_t axis)
{
    const int64_t n = count4(dims);
    float *x = random_floats(n, -1000.0, 1000.0);
    float *a = xmalloc(sizeof(float) * n), *b = xmalloc(sizeof(float) * n), *b2 = xmalloc(sizeof(float) * n);
    char desc[160];
    snprintf(desc, sizeof desc, "spline_prefilter %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " axis %d", dims[0],
             dims[1], dims[2], dims[3], (int)axis);
    if (prefilter_on(&ref, x, dims, axis, a) && prefilter_on(&dev, x, dims, axis, b) &&
        prefilter_on(&dev, x, dims, axis, b2))
        judge_floats(desc, a, b, b2, n);
    else
        verdict(false, desc, "a call failed");
    free(x);
    free(a);
    free(b);
    free(b2);
}

/* An axis from n inputs to n_out outputs: align-corners (ends on ends),
 * half-pixel as scipy's and nnU-Net's grid computes it (scale (o + 0.5) -
 * 0.5, exact halves where n / n_out is 4/3), the same folded into the
 * offset, or a random map that runs past both ends. */
static sg_vol_axis make_axis(int64_t n, int64_t n_out, int style, sg_vol_interp interp)
{
    sg_vol_axis ax = {n_out, 1.0, 0.0, interp, 0.0};
    if (style == 0) {
        ax.scale = n_out > 1 ? (double)(n - 1) / (double)(n_out - 1) : 0.0;
    } else if (style == 1) {
        ax.scale = (double)n / (double)n_out;
        ax.shift = 0.5;
        ax.offset = -0.5;
    } else if (style == 2) {
        ax.scale = (double)n / (double)n_out;
        ax.offset = 0.5 * ax.scale - 0.5;
    } else {
        ax.scale = (double)(n + 3) / (double)n_out * (0.5 + urand());
        ax.offset = -2.0 + urand();
    }
    return ax;
}

static void case_resample(const int64_t dims[4], int32_t axis, sg_vol_interp interp, double factor, int style)
{
    const int64_t n = dims[axis];
    int64_t n_out = (int64_t)llround((double)n * factor);
    n_out = n_out < 1 ? 1 : n_out;
    const sg_vol_axis ax = make_axis(n, n_out, style, interp);
    int64_t od[4] = {dims[0], dims[1], dims[2], dims[3]};
    od[axis] = n_out;
    const int64_t m = count4(od);
    float *x = random_floats(count4(dims), -1000.0, 1000.0);
    /* CUBIC reads coefficients: the reference's, the same on both sides. */
    if (interp == SG_VOL_CUBIC && !prefilter_on(&ref, x, dims, axis, x)) {
        verdict(false, "resample_axis", "the reference's spline_prefilter failed");
        free(x);
        return;
    }
    float *a = xmalloc(sizeof(float) * m), *b = xmalloc(sizeof(float) * m), *b2 = xmalloc(sizeof(float) * m);
    char desc[256];
    snprintf(desc, sizeof desc,
             "resample_axis %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " axis %d %s %" PRId64 " -> %" PRId64
             " (x = %.4g (o + %g) + %.4g)",
             dims[0], dims[1], dims[2], dims[3], (int)axis, interp_name(interp), n, n_out, ax.scale, ax.shift,
             ax.offset);
    if (resample_on(&ref, x, dims, axis, &ax, a, m) && resample_on(&dev, x, dims, axis, &ax, b, m) &&
        resample_on(&dev, x, dims, axis, &ax, b2, m))
        judge_floats(desc, a, b, b2, m);
    else
        verdict(false, desc, "a call failed");
    free(x);
    free(a);
    free(b);
    free(b2);
}

/* Intensities, masks, statistics ------------------------------------------------ */

static uint8_t *random_mask(int64_t n, double p)
{
    uint8_t *m = xmalloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        m[i] = urand() < p ? (uint8_t)irand(1, 255) : 0;
    return m;
}

static bool intensity_on(const side *sd, const float *x, const int64_t dims[4], const sg_vol_affine *p,
                         const uint8_t *mask, float *out)
{
    const int64_t vox = dims[1] * dims[2] * dims[3];
    const size_t bytes = sizeof(float) * (size_t)count4(dims);
    float *d = s_upload(sd, x, bytes);
    uint8_t *m = mask ? s_upload(sd, mask, (size_t)vox) : NULL;
    bool ok = d && (!mask || m) &&
              call_ok(sd->ops->intensity(sd->stream, d, dims, p, m), sd, "intensity") && s_get(sd, out, d, bytes);
    s_free(sd, d);
    if (m)
        s_free(sd, m);
    return ok;
}

static void case_intensity(const int64_t dims[4], bool masked)
{
    const int64_t n = count4(dims), vox = dims[1] * dims[2] * dims[3];
    float *x = random_floats(n, -2000.0, 3000.0);
    sg_vol_affine p[SG_VOLUME_MAX_CHANNELS];
    for (int c = 0; c < SG_VOLUME_MAX_CHANNELS; c++) {
        const bool clip = urand() < 0.7;
        const float lo = (float)(-1500.0 + 1000.0 * urand()), hi = (float)(lo + 3000.0 * urand());
        p[c].lo = clip ? lo : -INFINITY;
        p[c].hi = clip ? hi : INFINITY;
        p[c].sub = (float)(-500.0 + 1000.0 * urand());
        p[c].mul = (float)(1.0 / (1.0 + 1000.0 * urand()));
    }
    uint8_t *mask = masked ? random_mask(vox, 0.6) : NULL;
    float *a = xmalloc(sizeof(float) * n), *b = xmalloc(sizeof(float) * n), *b2 = xmalloc(sizeof(float) * n);
    char desc[160];
    snprintf(desc, sizeof desc, "intensity %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s", dims[0], dims[1],
             dims[2], dims[3], masked ? "masked" : "unmasked");
    if (intensity_on(&ref, x, dims, p, mask, a) && intensity_on(&dev, x, dims, p, mask, b) &&
        intensity_on(&dev, x, dims, p, mask, b2))
        judge_floats(desc, a, b, b2, n);
    else
        verdict(false, desc, "a call failed");
    free(x);
    free(mask);
    free(a);
    free(b);
    free(b2);
}

static bool foreground_on(const side *sd, const float *x, const int64_t dims[4], bool nonzero, float threshold,
                          uint8_t *out)
{
    const int64_t vox = dims[1] * dims[2] * dims[3];
    float *d = s_upload(sd, x, sizeof(float) * (size_t)count4(dims));
    uint8_t *m = s_alloc(sd, (size_t)vox);
    bool ok = d && call_ok(sd->ops->foreground_mask(sd->stream, d, dims, nonzero, threshold, m), sd,
                           "foreground_mask") &&
              s_get(sd, out, m, (size_t)vox);
    s_free(sd, d);
    s_free(sd, m);
    return ok;
}

static void case_foreground(const int64_t dims[4], bool nonzero)
{
    const int64_t n = count4(dims), vox = dims[1] * dims[2] * dims[3];
    float *x = random_floats(n, -100.0, 100.0);
    for (int64_t i = 0; i < n; i++)
        if (urand() < 0.5)
            x[i] = urand() < 0.5 ? 0.0f : -0.0f;
    const float threshold = (float)(-50.0 + 100.0 * urand());
    uint8_t *a = xmalloc((size_t)vox), *b = xmalloc((size_t)vox), *b2 = xmalloc((size_t)vox);
    char desc[160];
    snprintf(desc, sizeof desc, "foreground_mask %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s", dims[0],
             dims[1], dims[2], dims[3], nonzero ? "nonzero" : "above a threshold");
    if (foreground_on(&ref, x, dims, nonzero, threshold, a) && foreground_on(&dev, x, dims, nonzero, threshold, b) &&
        foreground_on(&dev, x, dims, nonzero, threshold, b2))
        judge_exact(desc, a, b, b2, vox, 1);
    else
        verdict(false, desc, "a call failed");
    free(x);
    free(a);
    free(b);
    free(b2);
}

static bool box_on(const side *sd, const uint8_t *mask, const int64_t dims[3], int64_t box[6])
{
    uint8_t *m = s_upload(sd, mask, (size_t)(dims[0] * dims[1] * dims[2]));
    bool ok = m && call_ok(sd->ops->mask_box(sd->stream, m, dims, box, box + 3), sd, "mask_box");
    s_free(sd, m);
    return ok;
}

/* kind 0: empty, 1: one voxel, 2: a random blob of voxels, 3: all. */
static void case_box(const int64_t dims[3], int kind)
{
    const int64_t n = dims[0] * dims[1] * dims[2];
    uint8_t *mask = xmalloc((size_t)n);
    if (kind == 1) {
        mask[irand(0, n - 1)] = 1;
    } else if (kind == 2) {
        int64_t lo[3], hi[3];
        for (int d = 0; d < 3; d++) {
            lo[d] = irand(0, dims[d] - 1);
            hi[d] = irand(lo[d], dims[d] - 1);
        }
        for (int64_t k = lo[0]; k <= hi[0]; k++)
            for (int64_t j = lo[1]; j <= hi[1]; j++)
                for (int64_t i = lo[2]; i <= hi[2]; i++)
                    mask[(k * dims[1] + j) * dims[2] + i] = urand() < 0.05 ? (uint8_t)irand(1, 255) : 0;
        mask[(lo[0] * dims[1] + lo[1]) * dims[2] + lo[2]] = 1;
    } else if (kind == 3) {
        memset(mask, 1, (size_t)n);
    }
    static const char *kinds[] = {"empty", "one voxel", "a sparse blob", "full"};
    int64_t a[6], b[6], b2[6];
    char desc[160], line[256];
    snprintf(desc, sizeof desc, "mask_box %" PRId64 "x%" PRId64 "x%" PRId64 " %s", dims[0], dims[1], dims[2],
             kinds[kind]);
    if (box_on(&ref, mask, dims, a) && box_on(&dev, mask, dims, b) && box_on(&dev, mask, dims, b2)) {
        snprintf(line, sizeof line,
                 "reference [%" PRId64 ",%" PRId64 ")x[%" PRId64 ",%" PRId64 ")x[%" PRId64 ",%" PRId64 "), cuda [%" PRId64
                 ",%" PRId64 ")x[%" PRId64 ",%" PRId64 ")x[%" PRId64 ",%" PRId64 ")%s",
                 a[0], a[3], a[1], a[4], a[2], a[5], b[0], b[3], b[1], b[4], b[2], b[5],
                 memcmp(b, b2, sizeof b) ? ", the second CUDA run differs" : "");
        verdict(!memcmp(a, b, sizeof a) && !memcmp(b, b2, sizeof b), desc, line);
    } else {
        verdict(false, desc, "a call failed");
    }
    free(mask);
}

static bool stats_on(const side *sd, const float *x, const int64_t dims[4], const uint8_t *mask, sg_vol_stats *out)
{
    const int64_t vox = dims[1] * dims[2] * dims[3];
    float *d = s_upload(sd, x, sizeof(float) * (size_t)count4(dims));
    uint8_t *m = mask ? s_upload(sd, mask, (size_t)vox) : NULL;
    bool ok = d && (!mask || m) && call_ok(sd->ops->stats(sd->stream, d, dims, m, out), sd, "stats");
    s_free(sd, d);
    if (m)
        s_free(sd, m);
    return ok;
}

static void case_stats(const int64_t dims[4], bool masked)
{
    const int64_t n = count4(dims), vox = dims[1] * dims[2] * dims[3], C = dims[0];
    float *x = random_floats(n, -1024.0, 3071.0);
    uint8_t *mask = masked ? random_mask(vox, 0.3) : NULL;
    sg_vol_stats a[SG_VOLUME_MAX_CHANNELS], b[SG_VOLUME_MAX_CHANNELS], b2[SG_VOLUME_MAX_CHANNELS];
    memset(b, 0, sizeof b);
    memset(b2, 0, sizeof b2);
    char desc[160], line[512];
    snprintf(desc, sizeof desc, "stats %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s", dims[0], dims[1],
             dims[2], dims[3], masked ? "masked" : "unmasked");
    if (!(stats_on(&ref, x, dims, mask, a) && stats_on(&dev, x, dims, mask, b) && stats_on(&dev, x, dims, mask, b2))) {
        verdict(false, desc, "a call failed");
    } else {
        bool ok = memcmp(b, b2, sizeof(sg_vol_stats) * (size_t)C) == 0;
        double worst = 0.0;
        int at = 0;
        for (int64_t c = 0; c < C; c++) {
            double scale = 0.0; /* the sum of magnitudes: a sum's rounding is relative to it */
            for (int64_t v = 0; v < vox; v++)
                if (!mask || mask[v])
                    scale += fabs((double)x[c * vox + v]);
            const double e_sum = fabs(a[c].sum - b[c].sum) / fmax(scale, DBL_MIN);
            const double e_sq = fabs(a[c].sum_sq - b[c].sum_sq) / fmax(fabs(a[c].sum_sq), DBL_MIN);
            worst = fmax(worst, fmax(e_sum, e_sq));
            ok = ok && a[c].count == b[c].count && a[c].min == b[c].min && a[c].max == b[c].max && e_sum <= REL_TOL &&
                 e_sq <= REL_TOL;
            at += snprintf(line + at, sizeof line - (size_t)at, "%sc%d n %" PRId64 "/%" PRId64 " min %g/%g max %g/%g",
                           c ? "; " : "", (int)c, a[c].count, b[c].count, a[c].min, b[c].min, a[c].max, b[c].max);
            if (at >= (int)sizeof line)
                at = (int)sizeof line - 1;
        }
        snprintf(line + at, sizeof line - (size_t)at, "; sums within %.3g (tolerance %.0e)%s", worst, REL_TOL,
                 memcmp(b, b2, sizeof(sg_vol_stats) * (size_t)C) ? ", the second CUDA run differs" : "");
        verdict(ok, desc, line);
    }
    free(x);
    free(mask);
}

/* Labels -------------------------------------------------------------------------- */

/* Class k's score at output voxel (k0, j0, i0), interpolated on the host in
 * double, as the contract states it. */
static double score_at(const float *scores, const int64_t in[3], const sg_vol_axis ax[3], const int64_t o[3],
                       int64_t k)
{
    int64_t idx[3][2];
    double w[3][2];
    for (int d = 0; d < 3; d++) {
        double x = ax[d].scale * ((double)o[d] + ax[d].shift) + ax[d].offset;
        x = x < 0.0 ? 0.0 : x > (double)(in[d] - 1) ? (double)(in[d] - 1) : x;
        if (ax[d].interp == SG_VOL_NEAREST) {
            int64_t i = (int64_t)floor(x + 0.5);
            idx[d][0] = idx[d][1] = i < in[d] ? i : in[d] - 1;
            w[d][0] = 1.0;
            w[d][1] = 0.0;
        } else {
            const double f = floor(x);
            idx[d][0] = (int64_t)f;
            idx[d][1] = idx[d][0] + 1 < in[d] ? idx[d][0] + 1 : in[d] - 1;
            w[d][1] = x - f;
            w[d][0] = 1.0 - w[d][1];
        }
    }
    const float *s = scores + k * in[0] * in[1] * in[2];
    double v = 0.0;
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 2; q++)
            for (int r = 0; r < 2; r++)
                v += w[0][p] * w[1][q] * w[2][r] * s[(idx[0][p] * in[1] + idx[1][q]) * in[2] + idx[2][r]];
    return v;
}

static bool argmax_on(const side *sd, const float *scores, int64_t classes, const int64_t in[3],
                      const sg_vol_axis ax[3], segrt_dtype dt, void *out, int64_t n_out)
{
    const size_t es = dt == SEGRT_DTYPE_UINT8 ? 1 : 2;
    float *s = s_upload(sd, scores, sizeof(float) * (size_t)(classes * in[0] * in[1] * in[2]));
    void *l = s_alloc(sd, es * (size_t)n_out);
    bool ok = s && call_ok(sd->ops->resample_argmax(sd->stream, s, classes, in, ax, dt, l), sd, "resample_argmax") &&
              s_get(sd, out, l, es * (size_t)n_out);
    s_free(sd, s);
    s_free(sd, l);
    return ok;
}

static int64_t label_at(const void *l, segrt_dtype dt, int64_t i)
{
    return dt == SEGRT_DTYPE_UINT8 ? ((const uint8_t *)l)[i] : ((const uint16_t *)l)[i];
}

/* interp_mix: 0 all nearest, 1 all linear, 2 per axis at random;
 * quantized: scores of a few levels, so that exact ties are common. */
static void case_argmax(const int64_t in[3], int64_t classes, segrt_dtype dt, int interp_mix, bool quantized)
{
    sg_vol_axis ax[3];
    int64_t out[3];
    for (int d = 0; d < 3; d++) {
        const double f = urand() < 0.5 ? 0.4 + 0.5 * urand() : 1.2 + 1.3 * urand();
        out[d] = (int64_t)llround((double)in[d] * f);
        out[d] = out[d] < 1 ? 1 : out[d];
        const sg_vol_interp ip = interp_mix == 0   ? SG_VOL_NEAREST
                                 : interp_mix == 1 ? SG_VOL_LINEAR
                                                   : (urand() < 0.5 ? SG_VOL_NEAREST : SG_VOL_LINEAR);
        ax[d] = make_axis(in[d], out[d], (int)irand(0, 3), ip);
    }
    const int64_t n_in = classes * in[0] * in[1] * in[2], n_out = out[0] * out[1] * out[2];
    float *scores = xmalloc(sizeof(float) * (size_t)n_in);
    for (int64_t i = 0; i < n_in; i++)
        scores[i] = quantized ? (float)irand(0, 3) : (float)(-8.0 + 16.0 * urand());
    const size_t es = dt == SEGRT_DTYPE_UINT8 ? 1 : 2;
    void *a = xmalloc(es * (size_t)n_out), *b = xmalloc(es * (size_t)n_out), *b2 = xmalloc(es * (size_t)n_out);
    char desc[256], line[256];
    snprintf(desc, sizeof desc,
             "resample_argmax %" PRId64 " classes %" PRId64 "x%" PRId64 "x%" PRId64 " -> %" PRId64 "x%" PRId64
             "x%" PRId64 " %s/%s/%s %s %s scores",
             classes, in[0], in[1], in[2], out[0], out[1], out[2], interp_name(ax[0].interp),
             interp_name(ax[1].interp), interp_name(ax[2].interp), dt == SEGRT_DTYPE_UINT8 ? "uint8" : "uint16",
             quantized ? "quantized" : "continuous");
    if (argmax_on(&ref, scores, classes, in, ax, dt, a, n_out) && argmax_on(&dev, scores, classes, in, ax, dt, b, n_out) &&
        argmax_on(&dev, scores, classes, in, ax, dt, b2, n_out)) {
        int64_t ties = 0, wrong = 0, first = -1;
        for (int64_t v = 0; v < n_out; v++) {
            const int64_t la = label_at(a, dt, v), lb = label_at(b, dt, v);
            if (la == lb)
                continue;
            const int64_t o[3] = {v / (out[1] * out[2]), v / out[2] % out[1], v % out[2]};
            const double sa = score_at(scores, in, ax, o, la), sb = score_at(scores, in, ax, o, lb);
            /* An exact tie goes to the first class; a near one may go
             * either way. */
            const bool tie = la < classes && lb < classes &&
                             (sa == sb ? lb < la
                                       : fabs(sa - sb) <= REL_TOL * fmax(1.0, fmax(fabs(sa), fabs(sb))));
            if (tie) {
                ties++;
            } else {
                wrong++;
                if (first < 0)
                    first = v;
            }
        }
        const bool repeat = memcmp(b, b2, es * (size_t)n_out) == 0;
        snprintf(line, sizeof line,
                 "%" PRId64 " of %" PRId64 " labels differ (%" PRId64 " ties within rounding, %" PRId64
                 " not, first at %" PRId64 ")%s",
                 ties + wrong, n_out, ties, wrong, first, repeat ? "" : ", the second CUDA run differs");
        verdict(!wrong && repeat, desc, line);
    } else {
        verdict(false, desc, "a call failed");
    }
    free(scores);
    free(a);
    free(b);
    free(b2);
}

/* --------------------------------------------------------------------------------- */

static void run_cases(bool small)
{
    /* C x D x H x W: one voxel, one-voxel axes, odd sizes, a volume large
     * enough for the reductions' block partials to loop. */
    static const int64_t shapes[][4] = {
        {1, 1, 1, 1},    {1, 1, 7, 5},    {2, 3, 1, 9},   {3, 17, 13, 11}, {1, 32, 33, 31},
        {2, 5, 64, 1},   {1, 40, 48, 56}, {3, 24, 20, 2}, {2, 2, 19, 23},
    };
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    static const double factors[] = {0.5, 0.75, 0.77, 1.0, 1.7, 2.5};
    for (int s = 0; s < n_shapes; s++) {
        const int64_t *dims = shapes[s];
        for (int es = 1; es <= 4; es *= 2) {
            case_copy(dims, (size_t)es, false);
            case_copy(dims, (size_t)es, true);
        }
        for (int32_t axis = 1; axis <= 3; axis++) {
            case_prefilter(dims, axis);
            for (int ip = SG_VOL_NEAREST; ip <= SG_VOL_CUBIC; ip++)
                for (int r = 0; r < 2; r++)
                    case_resample(dims, axis, (sg_vol_interp)ip, factors[irand(0, 5)], (int)irand(0, 3));
        }
        case_intensity(dims, false);
        case_intensity(dims, true);
        case_foreground(dims, true);
        case_foreground(dims, false);
        case_stats(dims, false);
        case_stats(dims, true);
        for (int kind = 0; kind < 4; kind++)
            case_box(dims + 1, kind);
    }
    /* 32 slices to 24: scipy's grid lands on exact halves, where NEAREST
     * must round as the reference does. */
    const int64_t halves[4] = {1, 32, 48, 6};
    for (int ip = SG_VOL_NEAREST; ip <= SG_VOL_CUBIC; ip++)
        for (int style = 1; style <= 2; style++)
            case_resample(halves, 1 + ip % 2, (sg_vol_interp)ip, 0.75, style);
    case_fill(1);
    case_fill(12345);
    if (!small) {
        /* Reductions over more than their largest block count (1024
         * blocks of 4096 voxels), so that threads loop. */
        const int64_t big[4] = {2, 70, 260, 240};
        case_stats(big, false);
        case_stats(big, true);
        case_box(big + 1, 1);
        case_box(big + 1, 2);
        case_foreground(big, false);
        case_resample(big, 3, SG_VOL_LINEAR, 0.6, 1);
    }
    static const int64_t label_shapes[][3] = {{1, 1, 1}, {1, 9, 7}, {5, 6, 7}, {12, 11, 9}, {3, 17, 16}};
    for (int s = 0; s < (int)(sizeof label_shapes / sizeof label_shapes[0]); s++)
        for (int mix = 0; mix < 3; mix++) {
            case_argmax(label_shapes[s], 2, SEGRT_DTYPE_UINT8, mix, mix != 1);
            case_argmax(label_shapes[s], 2, SEGRT_DTYPE_UINT16, mix, mix == 1);
            case_argmax(label_shapes[s], 300, SEGRT_DTYPE_UINT16, mix, mix == 2);
            case_argmax(label_shapes[s], 200, SEGRT_DTYPE_UINT8, mix, mix == 0);
        }
}

int main(int argc, char **argv)
{
    bool self = false, small = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--self")) {
            self = true;
        } else if (!strcmp(argv[i], "--small")) {
            small = true;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            rng_state = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: test_gpu_volume_ops [--seed N] [--small] [--self]\n");
            return 2;
        }
    }
    const sg_backend *cpu = sg_backend_for(SEGRT_DEVICE_CPU);
    if (!cpu || !cpu->volume) {
        printf("test_gpu_volume_ops: FAIL: the CPU backend has no volume operations to compare with\n");
        return 1;
    }
    ref = (side){"cpu", cpu->volume, NULL, NULL};
    if (self) {
        dev = ref;
    } else {
        const sg_backend *cuda = sg_backend_for(SEGRT_DEVICE_CUDA);
        int32_t devices = 0;
        if (!cuda || segrt_cuda_device_count(&devices) != SEGRT_OK || devices < 1) {
            printf("test_gpu_volume_ops: skipped: %s\n", cuda ? "no CUDA device" : "segrt is built without CUDA");
            return 77;
        }
        if (!cuda->volume || !cuda->window) {
            printf("test_gpu_volume_ops: FAIL: the CUDA backend has no volume operations\n");
            return 1;
        }
        dev = (side){"cuda", cuda->volume, cuda->window, NULL};
        if (dev.win->device_set(0) != SEGRT_OK || dev.win->stream_create(&dev.stream) != SEGRT_OK) {
            printf("test_gpu_volume_ops: FAIL: %s\n", segrt_last_error());
            return 1;
        }
    }
    printf("test_gpu_volume_ops: %s against %s, seed %" PRIu64 "\n", dev.ops->name, ref.ops->name, rng_state);
    run_cases(small);
    if (dev.win)
        dev.win->stream_destroy(dev.stream);
    printf("test_gpu_volume_ops: %d of %d cases out of tolerance or failed\n", failures, n_cases);
    return failures ? 1 : 0;
}
