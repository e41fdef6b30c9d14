/* A medical volume's preprocessing as a plan (vol_prep.h) over a backend's
 * volume operations (backend_volume.h): the CUDA backend's on the models'
 * device, the CPU backend's on the host. A device whose backend lacks
 * them runs the host's and copies the image up and the scores down.
 *
 * Steps 1 and 2 (transpose, orientation) and the crop are one strided
 * copy: oriented array axis a reads input array axis from[a], reversed
 * where flip[a], starting at the crop's corner; the labels go back by the
 * same copy the other way into a zeroed volume. Resampling is separable,
 * one axis at a time (width, height, depth), with the cubic spline's
 * coefficients made along an axis just before it is resampled.
 *
 * Geometry: array axis a is index axis 2 - a (depth is k); a direction
 * column belongs to an index axis; spacings are in array order. */
#include "pipeline/vol_prep.h"

#include "backend/backend.h"
#include "backend/backend_volume.h"
#include "backend/backend_window.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A resampled axis longer than this, or a volume of more elements, is
 * refused at planning. */
#define PREP_MAX_AXIS (INT64_C(1) << 24)
#define PREP_MAX_ELEMENTS (INT64_C(1) << 40)

typedef struct prep_resample {
    bool on;         /* some axis changes */
    bool axis_on[3]; /* per array axis */
    int32_t z;       /* the axis resampled on its own (nnU-Net's separate z), or -1 */
    sg_vol_axis fwd[3], back[3];
    int64_t dims[3];  /* the networks' grid */
    segrt_geometry g; /* and where it lies */
} prep_resample;

struct sg_prep {
    segrt_preprocess p;
    char source[200];
    int64_t C, dims[3];
    segrt_geometry g; /* the input's; identity direction, unit spacing when unknown */
    bool known;
    int32_t device;
    const sg_volume_ops *vo;
    const sg_window_ops *wo; /* the device's memory and copies; NULL on the host */
    bool exec_device;        /* vo works on device memory */
    int32_t from[3];
    bool flip[3];
    int64_t odims[3];
    segrt_geometry go; /* after steps 1 and 2 */
    bool has_intensity, masked;
    bool forwarded;
    int64_t lo[3], cdims[3]; /* the crop, in oriented array axes */
    segrt_geometry gc;
    prep_resample rs;
};

static sg_status bad(const segrt_preprocess *p, const char *fmt, ...) SG_PRINTF(2, 3);

static sg_status bad(const segrt_preprocess *p, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *src = p && p->source ? p->source : NULL;
    return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s%spreprocessing: %s", src ? src : "", src ? ": " : "", msg);
}

static int64_t prod3(const int64_t d[3])
{
    return d[0] * d[1] * d[2];
}

/* ---- geometry ---------------------------------------------------------- */

/* The geometry of the input's array seen through from/flip (array axis a
 * of the view is input array axis from[a], reversed where flip[a]). */
static void view_geometry(const segrt_geometry *in, const int64_t in_dims[3], const int32_t from[3], const bool flip[3],
                          segrt_geometry *out)
{
    *out = *in;
    double idx[3]; /* the input voxel (array axes) at the view's (0, 0, 0) */
    for (int32_t a = 0; a < 3; a++)
        idx[from[a]] = flip[a] ? (double)(in_dims[from[a]] - 1) : 0.0;
    for (int32_t r = 0; r < 3; r++) {
        double o = in->origin[r];
        for (int32_t s = 0; s < 3; s++)
            o += idx[s] * in->spacing[s] * in->direction[r][2 - s];
        out->origin[r] = o;
    }
    for (int32_t a = 0; a < 3; a++) {
        int32_t s = from[a];
        out->spacing[a] = in->spacing[s];
        for (int32_t r = 0; r < 3; r++)
            out->direction[r][2 - a] = (flip[a] ? -1.0 : 1.0) * in->direction[r][2 - s];
    }
}

/* Moves g's origin to the point at array position pos (voxels, may be
 * fractional) and scales its spacing by scale per array axis. */
static void shift_geometry(segrt_geometry *g, const double pos[3], const double scale[3])
{
    for (int32_t r = 0; r < 3; r++)
        for (int32_t a = 0; a < 3; a++)
            g->origin[r] += pos[a] * g->spacing[a] * g->direction[r][2 - a];
    for (int32_t a = 0; a < 3; a++)
        g->spacing[a] *= scale[a];
}

static int code_axis(char c, int *sign)
{
    switch (c) {
    case 'R':
        *sign = 1;
        return 0;
    case 'L':
        *sign = -1;
        return 0;
    case 'A':
        *sign = 1;
        return 1;
    case 'P':
        *sign = -1;
        return 1;
    case 'S':
        *sign = 1;
        return 2;
    case 'I':
        *sign = -1;
        return 2;
    default:
        return -1;
    }
}

/* The rotation closest to R's unit columns (its polar factor, by Newton's
 * iteration R = (R + R^-T) / 2), through which nibabel's io_orientation
 * reads a sheared direction (a tilted gantry's). R stays as it is where
 * it is singular. */
static void closest_rotation(double R[3][3])
{
    for (int32_t c = 0; c < 3; c++) {
        double n = sqrt(R[0][c] * R[0][c] + R[1][c] * R[1][c] + R[2][c] * R[2][c]);
        for (int32_t r = 0; n > 0.0 && r < 3; r++)
            R[r][c] /= n;
    }
    for (int32_t it = 0; it < 64; it++) {
        double cof[3][3], det = 0.0, change = 0.0;
        for (int32_t r = 0; r < 3; r++)
            for (int32_t c = 0; c < 3; c++) {
                int32_t r1 = (r + 1) % 3, r2 = (r + 2) % 3, c1 = (c + 1) % 3, c2 = (c + 2) % 3;
                cof[r][c] = R[r1][c1] * R[r2][c2] - R[r1][c2] * R[r2][c1];
            }
        for (int32_t c = 0; c < 3; c++)
            det += R[0][c] * cof[0][c];
        if (!(fabs(det) > 1e-12))
            return;
        for (int32_t r = 0; r < 3; r++)
            for (int32_t c = 0; c < 3; c++) {
                double v = 0.5 * (R[r][c] + cof[r][c] / det); /* the cofactors over det: R^-T */
                change = fmax(change, fabs(v - R[r][c]));
                R[r][c] = v;
            }
        if (change < 1e-15)
            return;
    }
}

/* Step 2 over the transposed view (from, flip; geometry gt), as nibabel's
 * io_orientation, ornt_transform and apply_orientation do it (MONAI's
 * Orientation): each index axis, in the order i, j, k, takes the world
 * axis of RAS its direction is largest along, among those no earlier axis
 * took; the target code puts it at its place and says whether it flips. */
static sg_status orient(const segrt_preprocess *p, const segrt_geometry *gt, int32_t from[3], bool flip[3])
{
    const char *code = p->orientation;
    int world[3], sign[3];
    for (int32_t t = 0; t < 3; t++) {
        world[t] = code[t] ? code_axis(code[t], &sign[t]) : -1;
        for (int32_t u = 0; u < t; u++)
            if (world[t] >= 0 && world[u] == world[t])
                world[t] = -1;
        if (world[t] < 0 || (t == 2 && code[3]))
            return bad(p, "orientation \"%.4s\" is not three distinct axis codes of R/L, A/P, S/I", code);
    }
    double R[3][3]; /* RAS direction: rows world axes, columns index axes i, j, k */
    for (int32_t r = 0; r < 3; r++)
        for (int32_t c = 0; c < 3; c++)
            R[r][c] = (r < 2 ? -1.0 : 1.0) * gt->direction[r][c];
    closest_rotation(R);
    int32_t nf[3];
    bool nflip[3];
    bool used[3] = {false, false, false};
    for (int32_t c = 0; c < 3; c++) {
        int32_t best = -1;
        double bv = 0.0;
        for (int32_t r = 0; r < 3; r++)
            if (!used[r] && fabs(R[r][c]) > bv) {
                bv = fabs(R[r][c]);
                best = r;
            }
        if (best < 0)
            return bad(p, "orientation \"%s\": the volume's direction has no component along index axis %c", code,
                       "ijk"[c]);
        used[best] = true;
        int32_t t = 0;
        while (world[t] != best)
            t++;
        bool f = (R[best][c] < 0) != (sign[t] < 0);
        /* new index axis t is index axis c: array axis 2 - t is 2 - c */
        nf[2 - t] = from[2 - c];
        nflip[2 - t] = flip[2 - c] != f;
    }
    for (int32_t a = 0; a < 3; a++) {
        from[a] = nf[a];
        flip[a] = nflip[a];
    }
    return SEGRT_OK;
}

/* nnU-Net's get_lowres_axis after get_do_separate_z: the one axis of the
 * largest spacing where it exceeds anisotropy times the smallest, tried on
 * `first`, then on `second`; -1 for none (two or three axes tie). */
static int32_t lowres_axis(double anisotropy, const double first[3], const double second[3])
{
    if (!(anisotropy > 0.0))
        return -1;
    const double *sp[2] = {first, second};
    for (int32_t t = 0; t < 2; t++) {
        double mx = fmax(fmax(sp[t][0], sp[t][1]), sp[t][2]), mn = fmin(fmin(sp[t][0], sp[t][1]), sp[t][2]);
        if (!(mx / mn > anisotropy))
            continue;
        int32_t axis = -1, n = 0;
        for (int32_t a = 0; a < 3; a++)
            if (mx / sp[t][a] == 1.0) {
                axis = a;
                n++;
            }
        return n == 1 ? axis : -1;
    }
    return -1;
}

static sg_vol_interp vol_interp(segrt_interp i)
{
    return i == SEGRT_INTERP_NEAREST ? SG_VOL_NEAREST : i == SEGRT_INTERP_CUBIC ? SG_VOL_CUBIC : SG_VOL_LINEAR;
}

/* Step 5 over a grid of dims lying at g. */
static sg_status plan_resample(const segrt_preprocess *p, const int64_t dims[3], const segrt_geometry *g,
                               prep_resample *rs)
{
    memset(rs, 0, sizeof *rs);
    rs->g = *g;
    rs->z = -1;
    bool any = p->spacing[0] != 0.0 || p->spacing[1] != 0.0 || p->spacing[2] != 0.0;
    for (int32_t a = 0; a < 3; a++) {
        rs->dims[a] = dims[a];
        sg_vol_axis id = {.n_out = dims[a], .scale = 1.0, .offset = 0.0, .interp = SG_VOL_NEAREST, .shift = 0.0};
        rs->fwd[a] = id;
        rs->back[a] = id;
    }
    if (!any)
        return SEGRT_OK;
    const double *s = p->spacing, *sp = g->spacing;
    int32_t zf = lowres_axis(p->anisotropy, sp, s), zb = lowres_axis(p->anisotropy, s, sp);
    rs->z = zf;
    double pos[3], scale[3];
    for (int32_t a = 0; a < 3; a++) {
        double n = (double)dims[a], m;
        sg_vol_axis *f = &rs->fwd[a], *b = &rs->back[a];
        if (p->grid == SEGRT_RESAMPLE_MONAI) {
            /* MONAI's compute_shape_offset: the corners' extent in the new
             * grid plus one, the first voxel's centre kept */
            m = rint((n - 1.0) * sp[a] / s[a] + 1.0);
            f->scale = s[a] / sp[a];
            f->offset = 0.0;
            b->scale = sp[a] / s[a];
            b->offset = 0.0;
        } else {
            /* nnU-Net's compute_new_shape, skimage's resize */
            m = rint(sp[a] / s[a] * n);
            f->scale = n / m;
            b->scale = m / n;
            f->shift = b->shift = 0.5; /* (o + 0.5) * scale - 0.5, as scipy computes it */
            f->offset = b->offset = -0.5;
        }
        if (!(m >= 1.0) || m > (double)PREP_MAX_AXIS)
            return bad(p, "resampling %lld voxels of %g mm to %g mm gives %.0f along array axis %d", (long long)dims[a],
                       sp[a], s[a], m, (int)a);
        rs->dims[a] = (int64_t)m;
        f->n_out = (int64_t)m;
        b->n_out = dims[a];
        f->interp = vol_interp(a == zf ? p->image_interp_z : p->image_interp);
        b->interp = vol_interp(a == zb ? p->result_interp_z : p->result_interp);
        pos[a] = f->scale * f->shift + f->offset; /* where output voxel 0 lies */
        rs->axis_on[a] = !(f->n_out == dims[a] && f->scale == 1.0 && pos[a] == 0.0);
        rs->on = rs->on || rs->axis_on[a];
        scale[a] = f->scale;
        if (!rs->axis_on[a]) {
            /* an unchanged axis reads its samples whatever the interpolation */
            f->interp = SG_VOL_NEAREST;
            b->interp = SG_VOL_NEAREST;
        }
    }
    shift_geometry(&rs->g, pos, scale);
    if (rs->dims[0] * rs->dims[1] > PREP_MAX_ELEMENTS / rs->dims[2] ||
        prod3(rs->dims) > PREP_MAX_ELEMENTS / (int64_t)SG_VOLUME_MAX_CHANNELS)
        return bad(p, "resampling gives a grid of %lldx%lldx%lld voxels, past segrt's limits", (long long)rs->dims[0],
                   (long long)rs->dims[1], (long long)rs->dims[2]);
    return SEGRT_OK;
}

/* ---- planning ---------------------------------------------------------- */

static bool finite_all(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

static sg_status check_intensity(const segrt_preprocess *p, int32_t c, const segrt_intensity *in)
{
    double v[8] = {in->lo, in->hi, in->mean, in->std, in->a_min, in->a_max, in->b_min, in->b_max};
    switch (in->kind) {
    case SEGRT_INTENSITY_NONE:
    case SEGRT_INTENSITY_ZSCORE:
    case SEGRT_INTENSITY_RESCALE01:
        return SEGRT_OK;
    case SEGRT_INTENSITY_CT:
        if (!finite_all(v, 4) || in->lo > in->hi || in->std < 0.0)
            return bad(p, "intensity of channel %d: CT needs finite lo <= hi, mean and std >= 0 (got %g, %g, %g, %g)",
                       (int)c, in->lo, in->hi, in->mean, in->std);
        return SEGRT_OK;
    case SEGRT_INTENSITY_RANGE:
        if (!finite_all(v + 4, 4) || in->a_max == in->a_min || (in->clip && in->b_min > in->b_max))
            return bad(p,
                       "intensity of channel %d: RANGE needs finite a_min != a_max, b_min, b_max (b_min <= b_max "
                       "to clip; got %g, %g, %g, %g)",
                       (int)c, in->a_min, in->a_max, in->b_min, in->b_max);
        return SEGRT_OK;
    default:
        return bad(p, "intensity of channel %d: unknown scheme %d", (int)c, (int)in->kind);
    }
}

static sg_status check_plan(const segrt_preprocess *p, int64_t channels, const int64_t dims[3])
{
    if (channels < 1 || channels > SG_VOLUME_MAX_CHANNELS)
        return bad(p, "a volume of %lld channels (1 to %d)", (long long)channels, SG_VOLUME_MAX_CHANNELS);
    for (int32_t a = 0; a < 3; a++)
        if (dims[a] < 1 || dims[a] > PREP_MAX_AXIS)
            return bad(p, "a volume of %lldx%lldx%lld voxels", (long long)dims[0], (long long)dims[1],
                       (long long)dims[2]);
    if (prod3(dims) > PREP_MAX_ELEMENTS / channels)
        return bad(p, "a volume of %lldx%lldx%lld voxels is past segrt's limits", (long long)dims[0],
                   (long long)dims[1], (long long)dims[2]);
    bool seen[3] = {false, false, false};
    for (int32_t a = 0; a < 3; a++) {
        int32_t t = p->transpose[a];
        if (t < 0 || t > 2 || seen[t])
            return bad(p, "transpose (%d, %d, %d) is not a permutation of (0, 1, 2)", (int)p->transpose[0],
                       (int)p->transpose[1], (int)p->transpose[2]);
        seen[t] = true;
    }
    if (p->crop != SEGRT_CROP_NONE && p->crop != SEGRT_CROP_NONZERO && p->crop != SEGRT_CROP_THRESHOLD)
        return bad(p, "unknown crop %d", (int)p->crop);
    if (p->crop == SEGRT_CROP_THRESHOLD && !isfinite(p->crop_threshold))
        return bad(p, "crop threshold %g", p->crop_threshold);
    for (int32_t a = 0; a < 3; a++)
        if (p->crop_margin[a] < 0 || p->crop_margin[a] > PREP_MAX_AXIS)
            return bad(p, "crop margin %lld along array axis %d", (long long)p->crop_margin[a], (int)a);
    if (p->n_intensity != 0 && p->n_intensity != 1 && p->n_intensity != channels)
        return bad(p, "%d intensity schemes for a volume of %lld channels (0, 1 or one per channel)",
                   (int)p->n_intensity, (long long)channels);
    for (int32_t c = 0; c < p->n_intensity; c++)
        SG_TRY(check_intensity(p, c, &p->intensity[c]));
    int n_set = 0;
    for (int32_t a = 0; a < 3; a++) {
        if (p->spacing[a] != 0.0)
            n_set++;
        if (!isfinite(p->spacing[a]) || p->spacing[a] < 0.0)
            return bad(p, "spacing %g along array axis %d", p->spacing[a], (int)a);
    }
    if (n_set != 0 && n_set != 3)
        return bad(p, "spacing (%g, %g, %g): set on every axis or on none", p->spacing[0], p->spacing[1],
                   p->spacing[2]);
    if (p->grid != SEGRT_RESAMPLE_NNUNET && p->grid != SEGRT_RESAMPLE_MONAI)
        return bad(p, "unknown resampling grid %d", (int)p->grid);
    segrt_interp in[4] = {p->image_interp, p->image_interp_z, p->result_interp, p->result_interp_z};
    for (int32_t i = 0; i < 4; i++)
        if (in[i] != SEGRT_INTERP_NEAREST && in[i] != SEGRT_INTERP_LINEAR && (i >= 2 || in[i] != SEGRT_INTERP_CUBIC))
            return bad(p, "%s interpolation %d (%s)", i < 2 ? "image" : "result", (int)in[i],
                       i < 2 ? "NEAREST, LINEAR or CUBIC" : "NEAREST or LINEAR");
    if (!isfinite(p->anisotropy) || p->anisotropy < 0.0)
        return bad(p, "anisotropy %g", p->anisotropy);
    return SEGRT_OK;
}

static const segrt_intensity *intensity_of(const sg_prep *pp, int64_t c)
{
    if (pp->p.n_intensity == 0)
        return NULL;
    const segrt_intensity *in = &pp->p.intensity[pp->p.n_intensity == 1 ? 0 : c];
    return in->kind == SEGRT_INTENSITY_NONE ? NULL : in;
}

sg_status sg_prep_plan(const segrt_preprocess *p, int64_t channels, const int64_t dims[3], const segrt_geometry *g,
                       int32_t device, sg_prep **out)
{
    if (!out)
        return bad(p, "NULL plan");
    *out = NULL;
    if (!p || !dims)
        return bad(p, "NULL preprocessing or dims");
    SG_TRY(check_plan(p, channels, dims));
    bool known = g && g->known;
    if (known && (!finite_all(g->spacing, 3) || !(g->spacing[0] > 0.0) || !(g->spacing[1] > 0.0) ||
                  !(g->spacing[2] > 0.0) || !finite_all(g->origin, 3) || !finite_all(&g->direction[0][0], 9)))
        return bad(p, "the volume's geometry has spacing (%g, %g, %g), not positive and finite", g->spacing[0],
                   g->spacing[1], g->spacing[2]);
    if (!known && (p->orientation[0] || p->spacing[0] != 0.0))
        return bad(p, "%s needs the volume's geometry, which it lacks",
                   p->orientation[0] ? "reorientation" : "resampling");

    const sg_volume_ops *vo = NULL;
    const sg_window_ops *wo = NULL;
    const sg_backend *cpu = sg_backend_for(SEGRT_DEVICE_CPU);
    if (device >= 0) {
        const sg_backend *b = sg_backend_for(SEGRT_DEVICE_CUDA);
        if (!b || !b->window)
            return bad(p, "device %d: this build of segrt has no CUDA", (int)device);
        wo = b->window;
        vo = b->volume;
    }
    bool exec_device = vo != NULL;
    if (!vo)
        vo = cpu ? cpu->volume : NULL;
    if (!vo)
        return sg_error(SEGRT_ERROR_INTERNAL, "preprocessing: the CPU backend has no volume operations");

    sg_prep *pp = calloc(1, sizeof *pp);
    if (!pp)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory for a plan");
    pp->p = *p;
    if (p->source) {
        snprintf(pp->source, sizeof pp->source, "%s", p->source);
        pp->p.source = pp->source;
    }
    pp->C = channels;
    pp->known = known;
    if (known) {
        pp->g = *g;
    } else {
        memset(&pp->g, 0, sizeof pp->g);
        for (int32_t a = 0; a < 3; a++) {
            pp->g.spacing[a] = 1.0;
            pp->g.direction[a][a] = 1.0;
        }
    }
    for (int32_t a = 0; a < 3; a++) {
        pp->dims[a] = dims[a];
        pp->from[a] = p->transpose[a];
        pp->flip[a] = false;
    }
    pp->device = device;
    pp->vo = vo;
    pp->wo = wo;
    pp->exec_device = exec_device;

    sg_status s = SEGRT_OK;
    if (p->orientation[0]) {
        segrt_geometry gt;
        view_geometry(&pp->g, pp->dims, pp->from, pp->flip, &gt);
        s = orient(&pp->p, &gt, pp->from, pp->flip);
    }
    if (s == SEGRT_OK) {
        for (int32_t a = 0; a < 3; a++)
            pp->odims[a] = dims[pp->from[a]];
        view_geometry(&pp->g, pp->dims, pp->from, pp->flip, &pp->go);
        pp->go.known = known;
        for (int64_t c = 0; c < channels; c++) {
            const segrt_intensity *in = intensity_of(pp, c);
            pp->has_intensity = pp->has_intensity || in;
            pp->masked = pp->masked || (in && in->kind == SEGRT_INTENSITY_ZSCORE && in->masked);
        }
        /* the largest grid (no crop) bounds every later one */
        s = plan_resample(&pp->p, pp->odims, &pp->go, &pp->rs);
    }
    if (s != SEGRT_OK) {
        free(pp);
        return s;
    }
    pp->gc = pp->go;
    for (int32_t a = 0; a < 3; a++)
        pp->cdims[a] = pp->odims[a];
    *out = pp;
    return SEGRT_OK;
}

bool sg_prep_is_identity(const sg_prep *pp)
{
    for (int32_t a = 0; a < 3; a++)
        if (pp->from[a] != a || pp->flip[a])
            return false;
    return pp->p.crop == SEGRT_CROP_NONE && !pp->has_intensity && !pp->rs.on && pp->p.axes == SEGRT_AXES_DHW;
}

void sg_prep_model_grid(const sg_prep *pp, int64_t dims[3], segrt_geometry *g)
{
    bool whd = pp->p.axes == SEGRT_AXES_WHD;
    for (int32_t a = 0; a < 3; a++)
        dims[a] = pp->rs.dims[whd ? 2 - a : a];
    if (g) {
        *g = pp->rs.g;
        g->known = pp->known;
    }
}

void sg_prep_free(sg_prep *pp)
{
    free(pp);
}

/* ---- memory ------------------------------------------------------------ */

static sg_status mem_alloc(const sg_prep *pp, bool device, size_t bytes, void **out)
{
    *out = NULL;
    if (device)
        return pp->wo->device_alloc(pp->device, bytes ? bytes : 1, out);
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory for %zu bytes", bytes);
    return SEGRT_OK;
}

static void mem_free(const sg_prep *pp, bool device, void *ptr)
{
    if (!ptr)
        return;
    if (device)
        pp->wo->device_free(ptr);
    else
        free(ptr);
}

/* Strides (elements) of the input (c, array axes) as read by the oriented
 * crop: the offset of its first element and the stride of each of its
 * axes. */
static int64_t crop_strides(const sg_prep *pp, int64_t C, int64_t stride[4])
{
    int64_t in_st[3] = {pp->dims[1] * pp->dims[2], pp->dims[2], 1};
    int64_t off = 0;
    stride[0] = C > 1 ? prod3(pp->dims) : 0;
    for (int32_t a = 0; a < 3; a++) {
        int32_t s = pp->from[a];
        if (pp->flip[a]) {
            off += (pp->dims[s] - 1 - pp->lo[a]) * in_st[s];
            stride[a + 1] = -in_st[s];
        } else {
            off += pp->lo[a] * in_st[s];
            stride[a + 1] = in_st[s];
        }
    }
    return off;
}

static void dense_strides(const int64_t dims[3], int64_t stride[4])
{
    stride[3] = 1;
    stride[2] = dims[2];
    stride[1] = dims[1] * dims[2];
    stride[0] = prod3(dims);
}

/* Step 7 and its inverse: *out (new, the ops' memory) is src (C x the
 * grid dhw, depth, height, width) with its spatial axes reversed
 * (to_whd), or src (C x width, height, depth of dhw) back in depth,
 * height, width. */
static sg_status swap_axes(const sg_prep *pp, bool dev, const void *src, size_t es, int64_t C, const int64_t dhw[3],
                           bool to_whd, void **out)
{
    int64_t D = dhw[0], H = dhw[1], W = dhw[2], plane = prod3(dhw);
    SG_TRY(mem_alloc(pp, dev, es * (size_t)(C * plane), out));
    int64_t d4[4], src_st[4], dst_st[4];
    if (to_whd) { /* written in (c, i, j, k) order, read from (c, k, j, i) */
        int64_t d[4] = {C, W, H, D}, ss[4] = {plane, 1, W, H * W}, ds[4] = {plane, H * D, D, 1};
        memcpy(d4, d, sizeof d), memcpy(src_st, ss, sizeof ss), memcpy(dst_st, ds, sizeof ds);
    } else {
        int64_t d[4] = {C, D, H, W}, ss[4] = {plane, 1, D, H * D}, ds[4] = {plane, H * W, W, 1};
        memcpy(d4, d, sizeof d), memcpy(src_st, ss, sizeof ss), memcpy(dst_st, ds, sizeof ds);
    }
    sg_status s = pp->vo->strided_copy(NULL, es, src, 0, src_st, *out, dst_st, d4);
    if (s != SEGRT_OK) {
        mem_free(pp, dev, *out);
        *out = NULL;
    }
    return s;
}

/* ---- forward ----------------------------------------------------------- */

/* Steps 4 and 6 on data (C x dims, the ops' memory); mask (dims, may be
 * NULL) for ZSCORE's masked statistics. */
static sg_status apply_intensity(sg_prep *pp, float *data, const int64_t dims[3], const uint8_t *mask)
{
    int64_t plane = prod3(dims);
    for (int64_t c = 0; c < pp->C; c++) {
        const segrt_intensity *in = intensity_of(pp, c);
        if (!in)
            continue;
        float *x = data + c * plane;
        int64_t d4[4] = {1, dims[0], dims[1], dims[2]};
        const uint8_t *m = in->kind == SEGRT_INTENSITY_ZSCORE && in->masked ? mask : NULL;
        sg_vol_affine af = {-INFINITY, INFINITY, 0.0f, 1.0f};
        if (in->kind == SEGRT_INTENSITY_CT) {
            af.lo = (float)in->lo;
            af.hi = (float)in->hi;
            af.sub = (float)in->mean;
            af.mul = (float)(1.0 / fmax(in->std, 1e-8));
        } else if (in->kind == SEGRT_INTENSITY_RANGE) {
            double mul = (in->b_max - in->b_min) / (in->a_max - in->a_min);
            if (mul == 0.0) {
                af.lo = af.hi = (float)in->b_min; /* every value becomes b_min */
                af.sub = 0.0f;
                af.mul = 1.0f;
            } else {
                af.sub = (float)(in->a_min - in->b_min / mul);
                af.mul = (float)mul;
                if (in->clip) {
                    af.lo = (float)fmin(in->a_min, in->a_max);
                    af.hi = (float)fmax(in->a_min, in->a_max);
                }
            }
        } else {
            sg_vol_stats st;
            SG_TRY(pp->vo->stats(NULL, x, d4, m, &st));
            if (in->kind == SEGRT_INTENSITY_ZSCORE) {
                double mean = st.count ? st.sum / (double)st.count : 0.0;
                double var = st.count ? st.sum_sq / (double)st.count - mean * mean : 1.0;
                af.sub = (float)mean;
                af.mul = (float)(1.0 / fmax(sqrt(fmax(var, 0.0)), 1e-8));
            } else { /* RESCALE01 */
                double mn = st.count ? st.min : 0.0, mx = st.count ? st.max : 1.0;
                af.sub = (float)mn;
                af.mul = (float)(1.0 / fmax(mx - mn, 1e-8));
            }
        }
        SG_TRY(pp->vo->intensity(NULL, x, d4, &af, m));
    }
    return SEGRT_OK;
}

/* The crop box (oriented array axes) from the foreground mask of the
 * input (input array axes), grown by the margin and kept inside. */
static sg_status find_crop(sg_prep *pp, const uint8_t *mask_in)
{
    int64_t lo_in[3], hi_in[3];
    SG_TRY(pp->vo->mask_box(NULL, mask_in, pp->dims, lo_in, hi_in));
    bool empty = hi_in[0] <= lo_in[0] || hi_in[1] <= lo_in[1] || hi_in[2] <= lo_in[2];
    for (int32_t a = 0; a < 3; a++) {
        int32_t s = pp->from[a];
        int64_t n = pp->dims[s], lo, hi;
        if (empty) { /* no foreground: the whole volume */
            lo = 0;
            hi = n;
        } else {
            lo = pp->flip[a] ? n - hi_in[s] : lo_in[s];
            hi = pp->flip[a] ? n - lo_in[s] : hi_in[s];
            lo = lo - pp->p.crop_margin[a] > 0 ? lo - pp->p.crop_margin[a] : 0;
            hi = hi + pp->p.crop_margin[a] < n ? hi + pp->p.crop_margin[a] : n;
        }
        pp->lo[a] = lo;
        pp->cdims[a] = hi - lo;
    }
    return SEGRT_OK;
}

/* Resamples *cur (C x at, the ops' memory) along the array axes `which`
 * asks for, width first; *cur and at follow. */
static sg_status resample_axes(sg_prep *pp, void **cur, int64_t at[4], const bool which[3])
{
    bool dev = pp->exec_device;
    for (int32_t axis = 3; axis >= 1; axis--) {
        const sg_vol_axis *ax = &pp->rs.fwd[axis - 1];
        if (!which[axis - 1] || !pp->rs.axis_on[axis - 1])
            continue;
        if (ax->interp == SG_VOL_CUBIC)
            SG_TRY(pp->vo->spline_prefilter(NULL, *cur, at, axis));
        int64_t numel = at[0] * at[1] * at[2] * at[3] / at[axis] * ax->n_out;
        void *next = NULL;
        SG_TRY(mem_alloc(pp, dev, sizeof(float) * (size_t)numel, &next));
        sg_status s = pp->vo->resample_axis(NULL, *cur, at, axis, ax, next);
        if (s != SEGRT_OK) {
            mem_free(pp, dev, next);
            return s;
        }
        mem_free(pp, dev, *cur);
        *cur = next;
        at[axis] = ax->n_out;
    }
    return SEGRT_OK;
}

/* Per channel c and slice t along array axis z of buf (C x at): its
 * statistics into st[c * n + t] or, with clamp, its values clamped to that
 * entry's [min, max]. A slice across the volume is copied out and back. */
static sg_status slice_pass(sg_prep *pp, float *buf, const int64_t at[4], int32_t z, sg_vol_stats *st, bool clamp)
{
    bool dev = pp->exec_device;
    int64_t n = at[z + 1], fs[4] = {at[1] * at[2] * at[3], at[2] * at[3], at[3], 1};
    int64_t sd[4] = {1, at[1], at[2], at[3]}, ds[4];
    sd[z + 1] = 1;
    int64_t numel = sd[1] * sd[2] * sd[3];
    ds[3] = 1;
    ds[2] = sd[3];
    ds[1] = sd[2] * sd[3];
    ds[0] = numel;
    void *scratch = NULL;
    if (z != 0)
        SG_TRY(mem_alloc(pp, dev, sizeof(float) * (size_t)numel, &scratch));
    sg_status s = SEGRT_OK;
    for (int64_t c = 0; c < at[0] && s == SEGRT_OK; c++)
        for (int64_t t = 0; t < n && s == SEGRT_OK; t++) {
            int64_t off = c * fs[0] + t * fs[z + 1];
            float *x = z == 0 ? buf + off : scratch;
            if (z != 0)
                s = pp->vo->strided_copy(NULL, sizeof(float), buf, off, fs, x, ds, sd);
            sg_vol_stats *e = &st[c * n + t];
            if (s == SEGRT_OK && !clamp) {
                s = pp->vo->stats(NULL, x, sd, NULL, e);
            } else if (s == SEGRT_OK) {
                sg_vol_affine af = {(float)e->min, (float)e->max, 0.0f, 1.0f};
                s = pp->vo->intensity(NULL, x, sd, &af, NULL);
                if (s == SEGRT_OK && z != 0)
                    s = pp->vo->strided_copy(NULL, sizeof(float), x, 0, ds, buf + off, fs, sd);
            }
        }
    mem_free(pp, dev, scratch);
    return s;
}

/* Step 5 on *cur (C x at). The NNUNET grid resamples as skimage's resize
 * in nnU-Net's resample_data_or_seg: its output clipped to its input's
 * range (clip=True, which only a cubic spline can leave), per channel, or
 * per channel and slice of the in-plane pass before the separate axis. */
static sg_status resample_image(sg_prep *pp, void **cur, int64_t at[4])
{
    const prep_resample *rs = &pp->rs;
    bool all[3] = {true, true, true}, cubic = false;
    for (int32_t a = 0; a < 3; a++)
        cubic = cubic || (rs->axis_on[a] && rs->fwd[a].interp == SG_VOL_CUBIC);
    if (!rs->on)
        return SEGRT_OK;
    if (pp->p.grid != SEGRT_RESAMPLE_NNUNET || !cubic)
        return resample_axes(pp, cur, at, all);
    int32_t z = rs->z;
    int64_t n = z < 0 ? 1 : at[z + 1];
    sg_vol_stats *st = malloc(sizeof *st * (size_t)(at[0] * n));
    if (!st)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory for %lld ranges", (long long)(at[0] * n));
    sg_status s = SEGRT_OK;
    if (z < 0) {
        int64_t plane = at[1] * at[2] * at[3];
        for (int64_t c = 0; c < at[0] && s == SEGRT_OK; c++) {
            int64_t d4[4] = {1, at[1], at[2], at[3]};
            s = pp->vo->stats(NULL, (float *)*cur + c * plane, d4, NULL, &st[c]);
        }
        if (s == SEGRT_OK)
            s = resample_axes(pp, cur, at, all);
        plane = at[1] * at[2] * at[3];
        for (int64_t c = 0; c < at[0] && s == SEGRT_OK; c++) {
            int64_t d4[4] = {1, at[1], at[2], at[3]};
            sg_vol_affine af = {(float)st[c].min, (float)st[c].max, 0.0f, 1.0f};
            s = pp->vo->intensity(NULL, (float *)*cur + c * plane, d4, &af, NULL);
        }
    } else {
        bool plane_axes[3] = {true, true, true}, zonly[3] = {false, false, false};
        plane_axes[z] = false;
        zonly[z] = true;
        s = slice_pass(pp, *cur, at, z, st, false);
        if (s == SEGRT_OK)
            s = resample_axes(pp, cur, at, plane_axes);
        if (s == SEGRT_OK)
            s = slice_pass(pp, *cur, at, z, st, true);
        if (s == SEGRT_OK)
            s = resample_axes(pp, cur, at, zonly);
    }
    free(st);
    return s;
}

/* scipy's binary_fill_holes (6-connected) of a host mask: the zeros no
 * path of zeros joins to the border become ones. */
static sg_status fill_holes_host(uint8_t *m, const int64_t d[3])
{
    int64_t n = prod3(d), head = 0, tail = 0;
    int64_t *queue = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!queue)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory to fill the mask's holes (%lld voxels)",
                        (long long)n);
    const int64_t st[3] = {d[1] * d[2], d[2], 1};
    for (int64_t v = 0; v < n; v++) {
        int64_t k = v / st[0], j = v / st[1] % d[1], i = v % d[2];
        bool border = k == 0 || k == d[0] - 1 || j == 0 || j == d[1] - 1 || i == 0 || i == d[2] - 1;
        if (border && m[v] == 0) {
            m[v] = 2; /* outside */
            queue[tail++] = v;
        }
    }
    while (head < tail) {
        int64_t v = queue[head++], c[3] = {v / st[0], v / st[1] % d[1], v % d[2]};
        for (int32_t a = 0; a < 3; a++)
            for (int32_t step = -1; step <= 1; step += 2) {
                int64_t x = c[a] + step;
                if (x < 0 || x >= d[a])
                    continue;
                int64_t u = v + step * st[a];
                if (m[u] == 0) {
                    m[u] = 2;
                    queue[tail++] = u;
                }
            }
    }
    free(queue);
    for (int64_t v = 0; v < n; v++)
        m[v] = m[v] != 2;
    return SEGRT_OK;
}

/* nnU-Net's create_nonzero_mask fills the holes of the nonzero mask whose
 * voxels its masked z-score counts (a hole of the crop is one of the
 * volume: everything outside the crop is background). On the host; a
 * device's mask comes down and goes back. */
static sg_status fill_mask_holes(sg_prep *pp, void *mask, const int64_t d[3])
{
    if (!pp->exec_device)
        return fill_holes_host(mask, d);
    size_t n = (size_t)prod3(d);
    uint8_t *h = malloc(n ? n : 1);
    if (!h)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory for a mask of %zu voxels", n);
    sg_status s = pp->wo->copy(h, mask, n, SG_WINDOW_DEVICE_TO_HOST);
    if (s == SEGRT_OK)
        s = fill_holes_host(h, d);
    if (s == SEGRT_OK)
        s = pp->wo->copy(mask, h, n, SG_WINDOW_HOST_TO_DEVICE);
    free(h);
    return s;
}

static sg_status forward_run(sg_prep *pp, const float *volume, float **result)
{
    const sg_volume_ops *vo = pp->vo;
    bool dev = pp->exec_device;
    int64_t plane_in = prod3(pp->dims);
    size_t vol_bytes = sizeof(float) * (size_t)(pp->C * plane_in);
    int64_t dims4[4] = {pp->C, pp->dims[0], pp->dims[1], pp->dims[2]};
    void *d_in = NULL, *mask_in = NULL, *mask = NULL, *cur = NULL;
    const float *vin = volume;
    sg_status s = SEGRT_OK;
    bool need_mask = pp->p.crop != SEGRT_CROP_NONE || (pp->masked && pp->p.intensity_first);
    if (dev) {
        s = mem_alloc(pp, true, vol_bytes, &d_in);
        if (s == SEGRT_OK)
            s = pp->wo->copy(d_in, volume, vol_bytes, SG_WINDOW_HOST_TO_DEVICE);
        vin = d_in;
    }
    if (s == SEGRT_OK && need_mask) {
        s = mem_alloc(pp, dev, (size_t)plane_in, &mask_in);
        if (s == SEGRT_OK)
            s = vo->foreground_mask(NULL, vin, dims4, pp->p.crop != SEGRT_CROP_THRESHOLD, (float)pp->p.crop_threshold,
                                    mask_in);
    }
    if (s == SEGRT_OK && pp->p.crop != SEGRT_CROP_NONE)
        s = find_crop(pp, mask_in);
    if (s == SEGRT_OK) {
        view_geometry(&pp->g, pp->dims, pp->from, pp->flip, &pp->gc);
        double pos[3] = {(double)pp->lo[0], (double)pp->lo[1], (double)pp->lo[2]}, one[3] = {1.0, 1.0, 1.0};
        shift_geometry(&pp->gc, pos, one);
        pp->gc.known = pp->known;
        s = plan_resample(&pp->p, pp->cdims, &pp->gc, &pp->rs);
    }
    int64_t cplane = prod3(pp->cdims);
    int64_t cd4[4] = {pp->C, pp->cdims[0], pp->cdims[1], pp->cdims[2]}, dst_st[4], src_st[4];
    dense_strides(pp->cdims, dst_st);
    if (s == SEGRT_OK)
        s = mem_alloc(pp, dev, sizeof(float) * (size_t)(pp->C * cplane), &cur);
    if (s == SEGRT_OK) {
        int64_t off = crop_strides(pp, pp->C, src_st);
        s = vo->strided_copy(NULL, sizeof(float), vin, off, src_st, cur, dst_st, cd4);
    }
    if (s == SEGRT_OK && mask_in && pp->masked && pp->p.intensity_first) {
        int64_t m4[4] = {1, pp->cdims[0], pp->cdims[1], pp->cdims[2]};
        s = mem_alloc(pp, dev, (size_t)cplane, &mask);
        if (s == SEGRT_OK) {
            int64_t off = crop_strides(pp, 1, src_st);
            s = vo->strided_copy(NULL, 1, mask_in, off, src_st, mask, dst_st, m4);
        }
        if (s == SEGRT_OK && pp->p.crop != SEGRT_CROP_THRESHOLD)
            s = fill_mask_holes(pp, mask, pp->cdims);
    }
    mem_free(pp, dev, d_in);
    mem_free(pp, dev, mask_in);
    if (s == SEGRT_OK && pp->p.intensity_first)
        s = apply_intensity(pp, cur, pp->cdims, mask);
    mem_free(pp, dev, mask);
    mask = NULL;
    int64_t at[4] = {pp->C, pp->cdims[0], pp->cdims[1], pp->cdims[2]};
    if (s == SEGRT_OK)
        s = resample_image(pp, &cur, at);
    if (s == SEGRT_OK && !pp->p.intensity_first && pp->has_intensity) {
        if (pp->masked) { /* the foreground of the image as resampled */
            int64_t plane = prod3(pp->rs.dims);
            s = mem_alloc(pp, dev, (size_t)plane, &mask);
            if (s == SEGRT_OK)
                s = vo->foreground_mask(NULL, cur, at, true, 0.0f, mask);
        }
        if (s == SEGRT_OK)
            s = apply_intensity(pp, cur, pp->rs.dims, mask);
        mem_free(pp, dev, mask);
    }
    if (s == SEGRT_OK && pp->p.axes == SEGRT_AXES_WHD) {
        void *t = NULL;
        s = swap_axes(pp, dev, cur, sizeof(float), pp->C, pp->rs.dims, true, &t);
        mem_free(pp, dev, cur);
        cur = t;
    }
    if (s != SEGRT_OK) {
        mem_free(pp, dev, cur);
        return s;
    }
    *result = cur;
    return SEGRT_OK;
}

/* Makes the plan's device current; device_leave gives the caller's back. */
static sg_status device_enter(const sg_prep *pp, int32_t *prev, bool *switched)
{
    *switched = false;
    if (!pp->wo)
        return SEGRT_OK;
    SG_TRY(pp->wo->device_get(prev));
    if (*prev != pp->device) {
        SG_TRY(pp->wo->device_set(pp->device));
        *switched = true;
    }
    return SEGRT_OK;
}

static void device_leave(const sg_prep *pp, int32_t prev, bool switched)
{
    if (switched)
        (void)pp->wo->device_set(prev);
}

sg_status sg_prep_forward(sg_prep *pp, const float *volume, segrt_tensor *image)
{
    if (!pp || !volume || !image)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "preprocessing forward: NULL plan, volume or image");
    if (pp->forwarded)
        return bad(&pp->p, "forward runs once per plan");
    memset(image, 0, sizeof *image);
    int32_t prev = 0;
    bool switched = false;
    SG_TRY(device_enter(pp, &prev, &switched));
    float *out = NULL;
    sg_status s = forward_run(pp, volume, &out);
    /* The volume operations run on the legacy default stream; the window
     * job reads the image on streams that do not wait for it. */
    if (s == SEGRT_OK && pp->exec_device)
        s = pp->wo->stream_synchronize(NULL);
    bool dev_out = pp->device >= 0;
    if (s == SEGRT_OK && dev_out != pp->exec_device) {
        /* a device without volume operations: the host's result goes up */
        size_t bytes = sizeof(float) * (size_t)(pp->C * prod3(pp->rs.dims));
        void *d = NULL;
        s = mem_alloc(pp, true, bytes, &d);
        if (s == SEGRT_OK)
            s = pp->wo->copy(d, out, bytes, SG_WINDOW_HOST_TO_DEVICE);
        mem_free(pp, false, out);
        out = d;
        if (s != SEGRT_OK) {
            mem_free(pp, true, d);
            out = NULL;
        }
    }
    device_leave(pp, prev, switched);
    if (s != SEGRT_OK)
        return s;
    pp->forwarded = true;
    image->dtype = SEGRT_DTYPE_FLOAT32;
    image->rank = 5;
    image->dims[0] = 1;
    image->dims[1] = pp->C;
    sg_prep_model_grid(pp, image->dims + 2, NULL);
    image->data = out;
    image->memory = dev_out ? SEGRT_MEMORY_DEVICE : SEGRT_MEMORY_HOST;
    image->device = dev_out ? pp->device : 0;
    return SEGRT_OK;
}

/* ---- back -------------------------------------------------------------- */

static sg_status back_run(sg_prep *pp, const float *scores, int64_t K, segrt_dtype dt, void **out)
{
    const sg_volume_ops *vo = pp->vo;
    bool dev = pp->exec_device;
    size_t es = dt == SEGRT_DTYPE_UINT8 ? 1 : 2;
    int64_t cplane = prod3(pp->cdims), plane = prod3(pp->dims);
    void *lc = NULL, *lf = NULL, *dhw = NULL;
    sg_status s = SEGRT_OK;
    if (pp->p.axes == SEGRT_AXES_WHD) { /* step 7 undone: the scores in depth, height, width */
        s = swap_axes(pp, dev, scores, sizeof(float), K, pp->rs.dims, false, &dhw);
        scores = dhw;
    }
    if (s == SEGRT_OK)
        s = mem_alloc(pp, dev, es * (size_t)cplane, &lc);
    if (s == SEGRT_OK)
        s = vo->resample_argmax(NULL, scores, K, pp->rs.dims, pp->rs.back, dt, lc);
    mem_free(pp, dev, dhw);
    if (s == SEGRT_OK)
        s = mem_alloc(pp, dev, es * (size_t)plane, &lf);
    if (s == SEGRT_OK && cplane != plane)
        s = vo->fill(NULL, lf, 0, es * (size_t)plane);
    if (s == SEGRT_OK) {
        int64_t src_st[4], dst_st[4], d4[4] = {1, pp->cdims[0], pp->cdims[1], pp->cdims[2]};
        dense_strides(pp->cdims, src_st);
        int64_t off = crop_strides(pp, 1, dst_st);
        s = vo->strided_copy(NULL, es, lc, 0, src_st, (char *)lf + off * (int64_t)es, dst_st, d4);
    }
    mem_free(pp, dev, lc);
    if (s == SEGRT_OK && dev) {
        void *h = malloc(es * (size_t)plane);
        if (!h)
            s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory for labels of %lld voxels",
                         (long long)plane);
        else
            s = pp->wo->copy(h, lf, es * (size_t)plane, SG_WINDOW_DEVICE_TO_HOST);
        mem_free(pp, true, lf);
        lf = h;
        if (s != SEGRT_OK) {
            free(h);
            lf = NULL;
        }
    }
    if (s != SEGRT_OK) {
        mem_free(pp, dev, lf);
        return s;
    }
    *out = lf;
    return SEGRT_OK;
}

sg_status sg_prep_back(sg_prep *pp, const segrt_tensor *scores, segrt_tensor *labels)
{
    if (!pp || !scores || !labels)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "preprocessing back: NULL plan, scores or labels");
    memset(labels, 0, sizeof *labels);
    if (!pp->forwarded)
        return bad(&pp->p, "back before forward");
    bool dev_in = pp->device >= 0;
    int64_t m[3];
    sg_prep_model_grid(pp, m, NULL);
    if (scores->dtype != SEGRT_DTYPE_FLOAT32 || scores->rank != 5 || scores->dims[0] != 1 || scores->dims[1] < 1 ||
        scores->dims[2] != m[0] || scores->dims[3] != m[1] || scores->dims[4] != m[2] || !scores->data)
        return bad(&pp->p, "class scores must be float32 1 x K x %lld x %lld x %lld", (long long)m[0], (long long)m[1],
                   (long long)m[2]);
    if ((scores->memory == SEGRT_MEMORY_DEVICE) != dev_in || (dev_in && scores->device != pp->device))
        return bad(&pp->p, "class scores in %s memory, the plan's are %s", scores->memory ? "device" : "host",
                   dev_in ? "device" : "host");
    int64_t K = scores->dims[1];
    if (K > 65536)
        return bad(&pp->p, "%lld classes (at most 65536)", (long long)K);
    segrt_dtype dt = K <= 256 ? SEGRT_DTYPE_UINT8 : SEGRT_DTYPE_UINT16;
    int32_t prev = 0;
    bool switched = false;
    SG_TRY(device_enter(pp, &prev, &switched));
    const float *sc = scores->data;
    float *host = NULL;
    sg_status s = SEGRT_OK;
    if (dev_in && !pp->exec_device) { /* the host's operations: the scores come down */
        size_t bytes = sizeof(float) * (size_t)(K * prod3(m));
        host = malloc(bytes);
        if (!host)
            s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "preprocessing: no memory for %zu bytes of scores", bytes);
        else
            s = pp->wo->copy(host, sc, bytes, SG_WINDOW_DEVICE_TO_HOST);
        sc = host;
    }
    void *out = NULL;
    if (s == SEGRT_OK)
        s = back_run(pp, sc, K, dt, &out);
    free(host);
    device_leave(pp, prev, switched);
    if (s != SEGRT_OK)
        return s;
    labels->dtype = dt;
    labels->rank = 5;
    labels->dims[0] = 1;
    labels->dims[1] = 1;
    for (int32_t a = 0; a < 3; a++)
        labels->dims[2 + a] = pp->dims[a];
    labels->data = out;
    labels->memory = SEGRT_MEMORY_HOST;
    return SEGRT_OK;
}

uint64_t sg_prep_scratch_bytes(const sg_prep *pp, int64_t classes)
{
    /* bounds from the uncropped grid, which every crop is inside */
    uint64_t in = (uint64_t)prod3(pp->dims), o = (uint64_t)prod3(pp->odims), mdl = (uint64_t)prod3(pp->rs.dims);
    uint64_t C = (uint64_t)pp->C, big = o > mdl ? o : mdl;
    uint64_t fwd = in + o + 2 * 4 * C * big; /* masks, two buffers of the resampling */
    if (pp->masked && pp->p.intensity_first)
        fwd += 8 * o; /* filling the mask's holes */
    if (pp->exec_device)
        fwd += 4 * C * in; /* the volume uploaded */
    else if (pp->device >= 0)
        fwd += 4 * C * mdl; /* the image before it goes up */
    if (pp->p.axes == SEGRT_AXES_WHD)
        fwd += 4 * C * mdl; /* step 7's copy */
    uint64_t es = classes <= 256 ? 1 : 2;
    uint64_t back = es * (o + in);
    if (pp->p.axes == SEGRT_AXES_WHD)
        back += 4 * (uint64_t)(classes > 0 ? classes : 1) * mdl; /* the scores in depth, height, width */
    if (pp->device >= 0 && !pp->exec_device)
        back += 4 * (uint64_t)(classes > 0 ? classes : 1) * mdl; /* the scores come down */
    return fwd > back ? fwd : back;
}
