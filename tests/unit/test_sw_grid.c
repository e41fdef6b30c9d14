/* Sliding-window geometry against MONAI's and nnU-Net's conventions
 * (../shared/notes/sliding_window.md): the documented examples, the jobs
 * of ../shared/notes/targets.md, coverage of every voxel on many sizes,
 * the importance map's values, and bad arguments; and the device-memory
 * budget --max-memory auto resolves to. */
#include "pipeline/sliding_window.h"
#include "pipeline/sw_grid.h"
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static sg_sw_grid grid1(int64_t size, int64_t roi, double overlap, sg_sw_grid_kind kind)
{
    sg_sw_grid g;
    sg_status s = sg_sw_grid_make(1, &size, &roi, &overlap, kind, &g);
    CHECK_MSG(s == SEGRT_OK, "%s", sg_last_error());
    return g;
}

static void expect_starts(int64_t size, int64_t roi, double overlap, sg_sw_grid_kind kind, const int64_t *want,
                          int64_t n)
{
    sg_sw_grid g = grid1(size, roi, overlap, kind);
    CHECK_MSG(g.n_starts[0] == n, "size %lld roi %lld overlap %g: %lld windows, want %lld", (long long)size,
              (long long)roi, overlap, (long long)g.n_starts[0], (long long)n);
    for (int64_t i = 0; i < n && i < g.n_starts[0]; i++)
        CHECK_MSG(g.starts[0][i] == want[i], "start %lld is %lld, want %lld", (long long)i,
                  (long long)g.starts[0][i], (long long)want[i]);
    sg_sw_grid_free(&g);
}

static void documented_examples(void)
{
    /* The notes: size 110, window 64, overlap 0.5. */
    expect_starts(110, 64, 0.5, SG_SW_GRID_MONAI, (const int64_t[]){0, 32, 46}, 3);
    expect_starts(110, 64, 0.5, SG_SW_GRID_NNUNET, (const int64_t[]){0, 23, 46}, 3);
    /* Overlap 0: the last window moves back to end flush. */
    expect_starts(100, 32, 0.0, SG_SW_GRID_MONAI, (const int64_t[]){0, 32, 64, 68}, 4);
    /* A window the size of the axis: one window whatever the overlap. */
    expect_starts(64, 64, 0.9, SG_SW_GRID_MONAI, (const int64_t[]){0}, 1);
    expect_starts(64, 64, 0.5, SG_SW_GRID_NNUNET, (const int64_t[]){0}, 1);
    /* int(roi * (1 - overlap)) of 0 becomes 1. */
    expect_starts(5, 2, 0.75, SG_SW_GRID_MONAI, (const int64_t[]){0, 1, 2, 3}, 4);
}

static void targets_jobs(void)
{
    /* 3D: 512x512x256, window 96^3, overlap 0.5: 500 windows. */
    int64_t size[3] = {512, 512, 256}, roi[3] = {96, 96, 96};
    double ov[3] = {0.5, 0.5, 0.5};
    sg_sw_grid g;
    CHECK(sg_sw_grid_make(3, size, roi, ov, SG_SW_GRID_MONAI, &g) == SEGRT_OK);
    CHECK(g.n_windows == 500);
    CHECK(g.n_starts[0] == 10 && g.n_starts[2] == 5);
    CHECK(g.starts[2][4] == 160);
    /* Last axis fastest. */
    int64_t st[3];
    sg_sw_window_start(&g, 1, st);
    CHECK(st[0] == 0 && st[1] == 0 && st[2] == 48);
    sg_sw_window_start(&g, 5, st);
    CHECK(st[0] == 0 && st[1] == 48 && st[2] == 0);
    sg_sw_window_start(&g, 499, st);
    CHECK(st[0] == 416 && st[1] == 416 && st[2] == 160);
    sg_sw_grid_free(&g);
    /* 2D: 2048^2, window 512^2, overlap 0.25: 25 windows. */
    int64_t s2[2] = {2048, 2048}, r2[2] = {512, 512};
    double o2[2] = {0.25, 0.25};
    CHECK(sg_sw_grid_make(2, s2, r2, o2, SG_SW_GRID_MONAI, &g) == SEGRT_OK);
    CHECK(g.n_windows == 25 && g.starts[0][4] == 1536);
    sg_sw_grid_free(&g);
}

static void padding(void)
{
    /* Smaller than the window: symmetric padding, the odd voxel at the end. */
    sg_sw_grid g = grid1(61, 64, 0.5, SG_SW_GRID_MONAI);
    CHECK(g.pad_begin[0] == 1 && g.pad_end[0] == 2 && g.padded[0] == 64 && g.n_starts[0] == 1);
    sg_sw_grid_free(&g);
    g = grid1(50, 64, 0.5, SG_SW_GRID_NNUNET);
    CHECK(g.pad_begin[0] == 7 && g.pad_end[0] == 7 && g.n_starts[0] == 1 && g.starts[0][0] == 0);
    sg_sw_grid_free(&g);
    /* A window of 0 or less is the whole axis. */
    g = grid1(77, 0, 0.5, SG_SW_GRID_MONAI);
    CHECK(g.roi[0] == 77 && g.n_starts[0] == 1 && g.pad_begin[0] == 0);
    sg_sw_grid_free(&g);
}

/* Every voxel of the padded axis in some window; starts in range, sorted
 * (strictly for MONAI), the first at 0 and the last flush with the end. */
static void coverage(void)
{
    const double overlaps[] = {0.0, 0.1, 0.25, 0.5, 0.625, 0.9};
    for (int kind = 0; kind < 2; kind++)
        for (int64_t size = 1; size <= 140; size += 3)
            for (int64_t roi = 1; roi <= 70; roi += 7)
                for (size_t o = 0; o < sizeof overlaps / sizeof overlaps[0]; o++) {
                    sg_sw_grid g = grid1(size, roi, overlaps[o], (sg_sw_grid_kind)kind);
                    int64_t p = g.padded[0], n = g.n_starts[0];
                    bool ok = n >= 1 && g.starts[0][0] == 0 && g.starts[0][n - 1] == p - roi;
                    int64_t covered = 0;
                    for (int64_t i = 0; i < n && ok; i++) {
                        int64_t s = g.starts[0][i];
                        /* nnU-Net rounds its steps: below one voxel a start repeats, as in nnU-Net. */
                        bool order = i == 0 || s > g.starts[0][i - 1] || (kind && s == g.starts[0][i - 1]);
                        ok = s >= 0 && s + roi <= p && order && s <= covered;
                        covered = s + roi > covered ? s + roi : covered;
                    }
                    CHECK_MSG(ok && covered == p, "%s grid, size %lld, window %lld, overlap %g",
                              kind ? "nnU-Net" : "MONAI", (long long)size, (long long)roi, overlaps[o]);
                    sg_sw_grid_free(&g);
                }
}

static void importance(void)
{
    int64_t roi[3] = {5, 4, 3};
    float m[60];
    CHECK(sg_sw_importance(3, roi, SG_SW_BLEND_CONSTANT, 0.125, m) == SEGRT_OK);
    bool ones = true;
    for (int i = 0; i < 60; i++)
        ones = ones && m[i] == 1.0f;
    CHECK(ones);
    /* 1-D: exp(-x^2 / (2 (n s)^2)), peak 1 at the centre, symmetric. */
    int64_t n = 9;
    float g[9];
    CHECK(sg_sw_importance(1, &n, SG_SW_BLEND_GAUSSIAN, 0.25, g) == SEGRT_OK);
    CHECK(g[4] == 1.0f);
    for (int i = 0; i < 9; i++) {
        double x = i - 4.0, want = exp(-x * x / (2.0 * 2.25 * 2.25));
        CHECK_MSG(fabs(g[i] - want) <= 2e-7, "g[%d] = %.9g, want %.9g", i, g[i], want);
        CHECK(g[i] == g[8 - i]);
    }
    /* 3-D is the outer product, axis 0 first. */
    CHECK(sg_sw_importance(3, roi, SG_SW_BLEND_GAUSSIAN, 0.5, m) == SEGRT_OK);
    float a0[5], a1[4], a2[3];
    CHECK(sg_sw_importance(1, &roi[0], SG_SW_BLEND_GAUSSIAN, 0.5, a0) == SEGRT_OK);
    CHECK(sg_sw_importance(1, &roi[1], SG_SW_BLEND_GAUSSIAN, 0.5, a1) == SEGRT_OK);
    CHECK(sg_sw_importance(1, &roi[2], SG_SW_BLEND_GAUSSIAN, 0.5, a2) == SEGRT_OK);
    bool product = true;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++)
                product = product && m[(i * 4 + j) * 3 + k] == a0[i] * a1[j] * a2[k];
    CHECK(product);
    /* Narrow Gaussians are clamped below at 1e-3. */
    int64_t w = 64;
    float *big = malloc(sizeof(float) * 64);
    CHECK(sg_sw_importance(1, &w, SG_SW_BLEND_GAUSSIAN, 0.05, big) == SEGRT_OK);
    CHECK(big[0] == (float)1e-3 && big[63] == (float)1e-3 && big[31] > 0.9f);
    free(big);
}

static void bad_arguments(void)
{
    sg_sw_grid g;
    int64_t size = 100, roi = 32;
    const double bad[] = {1.0, -0.1, NAN, 1.5};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(sg_sw_grid_make(1, &size, &roi, &bad[i], SG_SW_GRID_MONAI, &g) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(sg_last_error(), "overlap") != NULL);
    }
    double ov = 0.5;
    int64_t zero = 0;
    CHECK(sg_sw_grid_make(1, &zero, &roi, &ov, SG_SW_GRID_MONAI, &g) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sw_grid_make(0, &size, &roi, &ov, SG_SW_GRID_MONAI, &g) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sw_grid_make(4, &size, &roi, &ov, SG_SW_GRID_MONAI, &g) == SEGRT_ERROR_INVALID_ARGUMENT);
    float m[32];
    CHECK(sg_sw_importance(1, &roi, SG_SW_BLEND_GAUSSIAN, 0.0, m) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(sg_sw_importance(1, &zero, SG_SW_BLEND_CONSTANT, 0.125, m) == SEGRT_ERROR_INVALID_ARGUMENT);
    sg_sw_grid_free(NULL);
}

/* --max-memory auto's budget (sliding_window.h): free plus what the job
 * holds, less the larger of 5 % of the device and 256 MiB. */
static void auto_budget(void)
{
    const uint64_t MiB = (uint64_t)1 << 20, GiB = (uint64_t)1 << 30;
    /* An 8 GiB card with a display: 7 GiB free, 410 MiB left to others. */
    CHECK(sg_sw_auto_budget(7 * GiB, 8 * GiB, 0) == 7 * GiB - 8 * GiB / 20);
    /* What the job's contexts hold counts as the job's. */
    CHECK(sg_sw_auto_budget(7 * GiB, 8 * GiB, GiB) == 8 * GiB - 8 * GiB / 20);
    /* A small card: at least 256 MiB left. */
    CHECK(sg_sw_auto_budget(3 * GiB, 4 * GiB, 0) == 3 * GiB - 256 * MiB);
    /* Less free than the room: nothing (the run refuses). */
    CHECK(sg_sw_auto_budget(100 * MiB, 4 * GiB, 0) == 0);
    CHECK(sg_sw_auto_budget(0, 0, 0) == 0);
    /* No overflow. */
    CHECK(sg_sw_auto_budget(UINT64_MAX, UINT64_MAX, UINT64_MAX) == UINT64_MAX - UINT64_MAX / 20);
    /* The public constant is the internal one. */
    CHECK(SEGRT_MAX_MEMORY_AUTO == UINT64_MAX && SG_SW_MEMORY_AUTO == SIZE_MAX);
}

/* The rows B windows in a row read, as the image's ring of rows must hold
 * them: 1000 x 416 with 128^2 windows at overlap 0.25 has row starts 0,
 * 96, ..., 864, 872 and four column starts. */
static void batch_span(void)
{
    sg_sw_grid g;
    int64_t size[2] = {1000, 416}, roi[2] = {128, 128};
    double ov[2] = {0.25, 0.25};
    CHECK(sg_sw_grid_make(2, size, roi, ov, SG_SW_GRID_MONAI, &g) == SEGRT_OK);
    CHECK(g.n_starts[0] == 11 && g.n_starts[1] == 4 && g.starts[0][10] == 872);
    /* Eight windows of the whole grid from the second of a row: three rows
     * of starts (the short first batch can start anywhere). */
    CHECK(sg_sw_batch_span(&g, 8, NULL, 0) == 2 * 96 + 128);
    CHECK(sg_sw_batch_span(&g, 1, NULL, 0) == 128);
    /* Strips of two columns: eight windows reach over five rows of starts. */
    CHECK(sg_sw_batch_span(&g, 8, NULL, 2) == 4 * 96 + 128);
    /* Only the first column kept (tissue down one edge): eight rows. */
    uint8_t *keep = calloc((size_t)g.n_windows, 1);
    CHECK(keep != NULL);
    for (int64_t w = 0; keep && w < g.n_windows; w += 4)
        keep[w] = 1;
    if (keep)
        CHECK(sg_sw_batch_span(&g, 8, keep, 0) == 7 * 96 + 128);
    /* Nothing kept: no rows. */
    if (keep) {
        memset(keep, 0, (size_t)g.n_windows);
        CHECK(sg_sw_batch_span(&g, 8, keep, 0) == 0);
    }
    free(keep);
    sg_sw_grid_free(&g);
}

int main(void)
{
    batch_span();
    documented_examples();
    auto_budget();
    targets_jobs();
    padding();
    coverage();
    importance();
    bad_arguments();
    return sg_test_finish("test_sw_grid");
}
