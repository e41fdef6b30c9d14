/* GridSample's arithmetic, one copy for the reference kernel
 * (ref/ref_grid_sample.c) and the CUDA one (cuda/k_index.cu), so that the
 * device reflects, weighs and names modes exactly as the reference does:
 * the modes and paddings by their ONNX names (opset 16's and opset 20's),
 * reflection of a location by the near border, Keys' cubic weights. */
#ifndef SG_BACKEND_GRID_SAMPLE_MATH_H
#define SG_BACKEND_GRID_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SG_GS_FN __host__ __device__ static inline
#else
#define SG_GS_FN static inline
#endif

enum { SG_GS_NEAREST, SG_GS_LINEAR, SG_GS_CUBIC };
enum { SG_GS_ZEROS, SG_GS_BORDER, SG_GS_REFLECTION };

/* The mode's and padding's numbers, -1 for a name GridSample has not. */
static inline int sg_gs_mode(const char *mode)
{
    return strcmp(mode, "nearest") == 0                                   ? SG_GS_NEAREST
           : strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0 ? SG_GS_LINEAR
           : strcmp(mode, "cubic") == 0 || strcmp(mode, "bicubic") == 0   ? SG_GS_CUBIC
                                                                          : -1;
}

static inline int sg_gs_padding(const char *pad)
{
    return strcmp(pad, "zeros") == 0        ? SG_GS_ZEROS
           : strcmp(pad, "border") == 0     ? SG_GS_BORDER
           : strcmp(pad, "reflection") == 0 ? SG_GS_REFLECTION
                                            : -1;
}

/* Reflects v by the near border until it lies within [lo, hi]. */
SG_GS_FN double sg_gs_reflect(double v, double lo, double hi)
{
    double range = hi - lo;
    if (range <= 0)
        return lo;
    if (v < lo) {
        double dx = lo - v;
        int64_t n = (int64_t)(dx / range);
        double r = dx - (double)n * range;
        return n % 2 == 0 ? lo + r : hi - r;
    }
    if (v > hi) {
        double dx = v - hi;
        int64_t n = (int64_t)(dx / range);
        double r = dx - (double)n * range;
        return n % 2 == 0 ? hi - r : lo + r;
    }
    return v;
}

/* The four taps' weights at fraction t (Keys, alpha -0.75). */
SG_GS_FN void sg_gs_cubic(double t, double c[4])
{
    const double a = -0.75;
    double x = fabs(t);
    c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
    c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

#undef SG_GS_FN

#endif
