/* Core: dtypes and conversions, checked arithmetic, blobs, the string map,
 * the first-fit free list, arena packing, error messages, the copy team,
 * waiting for a child process. */
#include "core/arena_pack.h"
#include "core/child.h"
#include "core/copy_team.h"
#include "core/dtype.h"
#include "core/freelist.h"
#include "core/mem.h"
#include "core/strmap.h"
#include "core/tensor.h"
#include "testlib.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void test_half(void)
{
    /* Every finite half survives half -> float -> half. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* nan payloads */
        if (sg_float_to_half(sg_half_to_float((uint16_t)h)) != h)
            bad++;
    }
    CHECK(bad == 0);
    CHECK(sg_half_to_float(0x3c00) == 1.0f);
    CHECK(sg_half_to_float(0xc000) == -2.0f);
    CHECK(sg_half_to_float(0x7bff) == 65504.0f);
    CHECK(sg_float_to_half(65520.0f) == 0x7c00);      /* rounds to inf */
    CHECK(sg_float_to_half(65519.0f) == 0x7bff);      /* rounds down */
    CHECK(sg_float_to_half(1.0f + 1.0f / 2048) == 0x3c00); /* tie to even */
    CHECK(sg_float_to_half(5.9604644775390625e-8f) == 1);  /* smallest subnormal */
    CHECK(isnan(sg_half_to_float(sg_float_to_half(NAN))));
    CHECK(sg_bf16_to_float(sg_float_to_bf16(1.5f)) == 1.5f);
    CHECK(sg_float_to_bf16(1.0f + 1.0f / 256) == 0x3f80); /* tie to even */
    CHECK(isnan(sg_bf16_to_float(sg_float_to_bf16(NAN))));
}

static void test_dtype_tables(void)
{
    CHECK(segrt_dtype_size(SEGRT_DTYPE_FLOAT32) == 4);
    CHECK(segrt_dtype_size(SEGRT_DTYPE_BFLOAT16) == 2);
    CHECK(segrt_dtype_size((segrt_dtype)8) == 0); /* ONNX string: unsupported */
    CHECK(strcmp(segrt_dtype_name(SEGRT_DTYPE_INT64), "int64") == 0);
    CHECK(strcmp(segrt_dtype_name((segrt_dtype)99), "undefined") == 0);
    CHECK(strcmp(segrt_status_name(SEGRT_ERROR_SHAPE), "SEGRT_ERROR_SHAPE") == 0);
    CHECK(strcmp(segrt_status_name((segrt_status)1000), "unknown") == 0);
    int64_t buf[2];
    sg_dtype_store_f64(SEGRT_DTYPE_INT64, buf, 0, -3.9);
    CHECK(buf[0] == -3); /* truncation toward zero, as Cast does */
    sg_dtype_store_f64(SEGRT_DTYPE_INT64, buf, 1, 1e30);
    CHECK(buf[1] == INT64_MAX);
    uint8_t b = 7;
    sg_dtype_store_i64(SEGRT_DTYPE_BOOL, &b, 0, 42);
    CHECK(b == 1);
}

static void test_checked_math(void)
{
    int64_t out;
    CHECK(sg_mul_i64(1 << 20, 1 << 20, &out) && out == (int64_t)1 << 40);
    CHECK(!sg_mul_i64(INT64_MAX / 2, 3, &out));
    CHECK(!sg_mul_i64(-1, 3, &out));
    int64_t dims[3] = {1LL << 31, 1LL << 31, 1LL << 31};
    CHECK(!sg_dims_product(dims, 3, &out));
    CHECK(sg_dims_product(dims, 0, &out) && out == 1);
    char buf[64];
    int64_t d2[2] = {3, 4};
    CHECK(strcmp(sg_dims_format(d2, 2, buf, sizeof buf), "3x4") == 0);
    CHECK(strcmp(sg_dims_format(d2, 0, buf, sizeof buf), "scalar") == 0);
}

static void test_blob_and_map(void)
{
    sg_blob *b;
    CHECK(sg_blob_new(100, true, &b) == SEGRT_OK);
    CHECK(((uint8_t *)sg_blob_data(b))[99] == 0);
    CHECK(((uintptr_t)sg_blob_data(b) % 64) == 0);
    sg_blob *c = sg_blob_ref(b);
    sg_blob_unref(b);
    CHECK(sg_blob_size(c) == 100);
    sg_blob_unref(c);
    sg_blob_unref(NULL);

    sg_strmap m;
    sg_strmap_init(&m);
    char keys[500][16];
    for (int i = 0; i < 500; i++) {
        snprintf(keys[i], sizeof keys[i], "t%d", i);
        CHECK(sg_strmap_put(&m, keys[i], i) == SEGRT_OK);
    }
    int ok = 1;
    for (int i = 0; i < 500; i++)
        ok &= sg_strmap_get(&m, keys[i]) == i;
    CHECK(ok);
    CHECK(sg_strmap_get(&m, "nope") == -1);
    CHECK(sg_strmap_put(&m, keys[7], 70) == SEGRT_OK && sg_strmap_get(&m, "t7") == 70);
    sg_strmap_free(&m);
}

static void test_errors(void)
{
    sg_error_clear();
    CHECK(strcmp(segrt_last_error(), "") == 0);
    CHECK(sg_error(SEGRT_ERROR_SHAPE, "node `%s`: bad\nthing", "n") == SEGRT_ERROR_SHAPE);
    CHECK(strcmp(segrt_last_error(), "node `n`: bad thing") == 0); /* one line */
    CHECK(sg_error_prefix(SEGRT_ERROR_SHAPE, "%s: ", "m.onnx") == SEGRT_ERROR_SHAPE);
    CHECK(strcmp(segrt_last_error(), "m.onnx: node `n`: bad thing") == 0);
}

/* Every byte lands where memcpy puts it, for sizes around the team's
 * threshold and its part boundaries, at odd offsets, with nothing
 * written outside the destination; jobs follow each other on one team,
 * and teams of one thread and NULL copy alone. */
static void test_copy_team(void)
{
    const size_t max = ((size_t)5 << 20) + 4099;
    unsigned char *src = malloc(max + 16), *dst = malloc(max + 32);
    CHECK(src && dst);
    if (!src || !dst) {
        free(src);
        free(dst);
        return;
    }
    for (size_t i = 0; i < max + 16; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 13);
    const size_t sizes[] = {0, 1, 63, 4096, ((size_t)1 << 20) - 1, (size_t)1 << 20, ((size_t)1 << 20) + 65,
                            ((size_t)3 << 20) + 7, max};
    const int threads[] = {0, 1, 3, 8, 64};
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        sg_copy_team *t = NULL;
        CHECK(sg_copy_team_new(threads[ti], &t) == SEGRT_OK && t);
        CHECK(sg_copy_team_threads(t) >= 1 && sg_copy_team_threads(t) <= 8);
        if (threads[ti] > 0 && threads[ti] <= 8)
            CHECK(sg_copy_team_threads(t) <= threads[ti]);
        int bad = 0;
        for (int rep = 0; rep < 3; rep++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                size_t n = sizes[si], off = (size_t)(rep * 5 + (int)si) % 16;
                memset(dst, 0xa5, max + 32);
                sg_copy_team_memcpy(t, dst + 8, src + off, n);
                bad += memcmp(dst + 8, src + off, n) != 0;
                for (size_t i = 0; i < 8; i++)
                    bad += dst[i] != 0xa5 || dst[8 + n + i] != 0xa5;
            }
        CHECK_MSG(bad == 0, "team of %d threads: %d bad copies", sg_copy_team_threads(t), bad);
        sg_copy_team_free(t);
    }
    memset(dst, 0, max);
    sg_copy_team_memcpy(NULL, dst, src, max);
    CHECK(memcmp(dst, src, max) == 0);
    CHECK(sg_copy_team_threads(NULL) == 1);
    sg_copy_team_free(NULL);
    free(src);
    free(dst);
}

/* The team's two hand-offs: copies in a burst (the workers still watching
 * for the next one) and after a pause longer than their watch (asleep,
 * woken through the condition variable); and a team freed while its
 * workers watch and one freed while they sleep. */
static void test_copy_team_handoffs(void)
{
    const size_t n = ((size_t)2 << 20) + 333;
    unsigned char *src = malloc(n), *dst = malloc(n);
    CHECK(src && dst);
    if (!src || !dst) {
        free(src);
        free(dst);
        return;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 40503u >> 7);
    const struct timespec pause = {0, 2000000}; /* 2 ms: ten times the watch */
    for (int asleep = 0; asleep < 2; asleep++) {
        sg_copy_team *t = NULL;
        CHECK(sg_copy_team_new(4, &t) == SEGRT_OK && t);
        int bad = 0;
        for (int rep = 0; rep < 40; rep++) {
            if (asleep && rep % 8 == 0)
                nanosleep(&pause, NULL);
            size_t len = n - (size_t)rep * 4099;
            dst[len - 1] = (unsigned char)~src[len - 1];
            sg_copy_team_memcpy(t, dst, src, len);
            bad += memcmp(dst, src, len) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %d bad copies", asleep ? "after pauses" : "in a burst", bad);
        if (asleep)
            nanosleep(&pause, NULL);
        sg_copy_team_free(t);
    }
    free(src);
    free(dst);
}

/* The free list against the scan it replaced in the CPU memory plan: live
 * blocks sorted by offset, the first gap from 0 that fits. Random sizes
 * (zero included) and random release orders, so that gaps merge on either
 * side, reach the top and are split again. */
static void test_freelist(void)
{
    enum { N = 4000 };
    static size_t off[N], size[N], live_off[N], live_end[N];
    static int live_id[N];
    static bool alive[N];
    uint32_t r = 12345;
    int ok = 1;
    for (int round = 0; round < 3; round++) {
        sg_freelist f;
        sg_freelist_init(&f);
        int n_live = 0;
        memset(alive, 0, sizeof alive);
        for (int i = 0; i < N && ok; i++) {
            r = r * 1103515245u + 12345u;
            /* Release a few random live blocks first. */
            for (int k = (int)((r >> 8) % 3); k > 0 && n_live > 0; k--) {
                r = r * 1103515245u + 12345u;
                int at = (int)((r >> 8) % (uint32_t)n_live), id = live_id[at];
                ok &= sg_freelist_release(&f, off[id], size[id]) == SEGRT_OK;
                alive[id] = false;
                memmove(&live_off[at], &live_off[at + 1], sizeof *live_off * (size_t)(n_live - at - 1));
                memmove(&live_end[at], &live_end[at + 1], sizeof *live_end * (size_t)(n_live - at - 1));
                memmove(&live_id[at], &live_id[at + 1], sizeof *live_id * (size_t)(n_live - at - 1));
                n_live--;
            }
            r = r * 1103515245u + 12345u;
            size[i] = (r >> 8) % 7 == 0 ? 0 : 64 * (1 + (r >> 12) % (round == 2 ? 3 : 40));
            size_t want = 0;
            int at = 0;
            for (; at < n_live; at++) {
                if (live_off[at] >= want + size[i])
                    break;
                if (live_end[at] > want)
                    want = live_end[at];
            }
            ok &= sg_freelist_alloc(&f, size[i], &off[i]) == SEGRT_OK;
            if (off[i] != want) {
                CHECK_MSG(off[i] == want, "round %d block %d: offset %zu, first fit %zu", round, i, off[i], want);
                ok = 0;
            }
            if (size[i] == 0)
                continue; /* occupies nothing */
            memmove(&live_off[at + 1], &live_off[at], sizeof *live_off * (size_t)(n_live - at));
            memmove(&live_end[at + 1], &live_end[at], sizeof *live_end * (size_t)(n_live - at));
            memmove(&live_id[at + 1], &live_id[at], sizeof *live_id * (size_t)(n_live - at));
            live_off[at] = off[i];
            live_end[at] = off[i] + size[i];
            live_id[at] = i;
            alive[i] = true;
            n_live++;
        }
        /* Everything released: the arena is empty again. */
        for (int i = 0; i < N; i++)
            if (alive[i])
                ok &= sg_freelist_release(&f, off[i], size[i]) == SEGRT_OK;
        size_t o = 1;
        ok &= sg_freelist_alloc(&f, 64, &o) == SEGRT_OK && o == 0;
        sg_freelist_free(&f);
    }
    CHECK(ok);
}

/* Arena packing against the scan it replaced in the CUDA memory plan: for
 * each block in order, bump the offset past every placed block alive at
 * the same time that it overlaps, until none does. */
static void test_arena_pack(void)
{
    enum { N = 1500 };
    static int32_t first[N], last[N], order[N];
    static size_t size[N], off[N], want[N];
    uint32_t r = 777;
    int ok = 1;
    for (int round = 0; round < 6 && ok; round++) {
        int32_t n = round == 0 ? 1 : N / (1 + round % 3), steps = round == 5 ? 3 : 1 + n / 2;
        for (int32_t i = 0; i < n; i++) {
            r = r * 1103515245u + 12345u;
            first[i] = (int32_t)((r >> 8) % (uint32_t)steps);
            r = r * 1103515245u + 12345u;
            /* mostly short lives, some across the whole plan */
            int32_t len = (r >> 8) % 10 == 0 ? (int32_t)((r >> 12) % (uint32_t)steps) : (int32_t)((r >> 12) % 4);
            last[i] = first[i] + len < steps ? first[i] + len : steps - 1;
            r = r * 1103515245u + 12345u;
            size[i] = (r >> 8) % 9 == 0 ? 0 : 256 * (1 + (r >> 12) % (round % 2 ? 4 : 50));
            order[i] = i;
        }
        for (int32_t i = n - 1; i > 0; i--) { /* a random order */
            r = r * 1103515245u + 12345u;
            int32_t j = (int32_t)((r >> 8) % (uint32_t)(i + 1)), x = order[i];
            order[i] = order[j];
            order[j] = x;
        }
        size_t top = 0, peak = 1;
        for (int32_t i = 0; i < n; i++) {
            int32_t t = order[i];
            size_t o = 0;
            for (bool moved = true; moved;) {
                moved = false;
                for (int32_t j = 0; j < i; j++) {
                    int32_t u = order[j];
                    if (first[u] <= last[t] && first[t] <= last[u] && want[u] < o + size[t] &&
                        o < want[u] + size[u]) {
                        o = want[u] + size[u];
                        moved = true;
                    }
                }
            }
            want[t] = o;
            if (o + size[t] > top)
                top = o + size[t];
        }
        CHECK(sg_arena_pack(n, order, first, last, size, steps, off, &peak) == SEGRT_OK);
        int32_t bad = 0;
        while (bad < n && off[bad] == want[bad])
            bad++;
        CHECK_MSG(bad == n, "round %d block %d: offset %zu, the scan's %zu", round, bad, off[bad % n],
                  want[bad % n]);
        CHECK_MSG(peak == top, "round %d: peak %zu, the scan's %zu", round, peak, top);
        ok = bad == n && peak == top;
    }
    size_t peak = 1;
    CHECK(sg_arena_pack(0, NULL, NULL, NULL, NULL, 0, NULL, &peak) == SEGRT_OK && peak == 0);
}

/* A child's CPU seconds so far. */
static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* sg_child_wait: an exit is reported as it was; a child asleep for good
 * (as one blocked on an inherited lock is) is killed as stuck; one that
 * computes the whole time is not, however long past stuck_seconds it runs. */
static void test_child_wait(void)
{
    int status = 0;
    bool stuck = true;
    pid_t pid = fork();
    if (pid == 0)
        _exit(3);
    CHECK(pid > 0 && sg_child_wait(pid, 0.4, &status, &stuck) == 0);
    CHECK(!stuck && WIFEXITED(status) && WEXITSTATUS(status) == 3);

    pid = fork();
    if (pid == 0) {
        double t0 = cpu_seconds();
        volatile unsigned long sum = 0;
        while (cpu_seconds() - t0 < 1.5)
            for (unsigned long i = 0; i < 100000; i++)
                sum += i;
        _exit(0);
    }
    CHECK(pid > 0 && sg_child_wait(pid, 0.4, &status, &stuck) == 0);
    CHECK(!stuck && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    if (access("/proc/self/stat", R_OK) != 0)
        return; /* no /proc: the wait is a plain one, and this child would never end */
    pid = fork();
    if (pid == 0)
        for (;;)
            pause();
    CHECK(pid > 0 && sg_child_wait(pid, 0.4, &status, &stuck) == 0);
    CHECK(stuck && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

int main(void)
{
    test_half();
    test_dtype_tables();
    test_checked_math();
    test_blob_and_map();
    test_freelist();
    test_arena_pack();
    test_errors();
    test_copy_team();
    test_copy_team_handoffs();
    test_child_wait();
    return sg_test_finish("test_core");
}
