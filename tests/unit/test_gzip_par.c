/* The parallel gzip stream (core/gzip_par.h) against zlib's own inflate:
 * random and compressible data of sizes around the block's, written in
 * pieces of random sizes by 0 to 16 workers, must inflate (gzip mode,
 * which checks the CRC-32 and the length) back to the input as ONE member
 * that ends exactly at the end of the file; the bytes must not depend on
 * the workers or the pieces; the blocks must be primed with the previous
 * block's tail; a failing write is an IO error naming the file, and a
 * stream freed unfinished leaks nothing (ASan). */
#include "core/gzip_par.h"
#include "testlib.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef SEGRT_HAVE_ZLIB

int main(void)
{
    sg_gzip_par *g = (sg_gzip_par *)1;
    CHECK(sg_gzip_par_new(stdout, "x.gz", 1, 0, 0, &g) == SEGRT_ERROR_UNSUPPORTED && g == NULL);
    return sg_test_finish("test_gzip_par");
}

#else

#include <zlib.h>

#define BLOCK ((size_t)65536) /* the smallest block, so that many blocks stay small */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random bytes, or a smooth label map's kind of bytes: runs of a few
 * labels, with some noise at the edges. */
static uint8_t *make_data(size_t n, bool smooth)
{
    uint8_t *d = malloc(n ? n : 1);
    uint8_t label = 0;
    for (size_t i = 0; i < n; i++) {
        if (!smooth) {
            d[i] = (uint8_t)rnd();
            continue;
        }
        if (rnd() % 300 == 0)
            label = (uint8_t)(rnd() % 5);
        d[i] = rnd() % 50 == 0 ? (uint8_t)(rnd() % 5) : label;
    }
    return d;
}

/* The whole stream written to a temporary file, in pieces of random sizes
 * up to `piece` (0: in one call); *size its length. NULL on failure. */
static uint8_t *compress_with(const uint8_t *data, size_t n, int workers, size_t block, size_t piece, size_t *size)
{
    FILE *f = tmpfile();
    if (!f)
        return NULL;
    sg_gzip_par *g;
    sg_status st = sg_gzip_par_new(f, "t.gz", 1, workers, block, &g);
    CHECK_MSG(st == SEGRT_OK, "%s", sg_last_error());
    if (st != SEGRT_OK) {
        fclose(f);
        return NULL;
    }
    for (size_t at = 0; st == SEGRT_OK && at < n;) {
        size_t k = piece ? 1 + rnd() % piece : n;
        k = k > n - at ? n - at : k;
        st = sg_gzip_par_write(g, data + at, k);
        at += k;
    }
    if (st == SEGRT_OK)
        st = sg_gzip_par_finish(g);
    CHECK_MSG(st == SEGRT_OK, "%s", sg_last_error());
    sg_gzip_par_free(g);
    long len = ftell(f);
    uint8_t *out = malloc(len > 0 ? (size_t)len : 1);
    rewind(f);
    bool ok = st == SEGRT_OK && len > 0 && fread(out, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    if (!ok) {
        free(out);
        return NULL;
    }
    *size = (size_t)len;
    return out;
}

/* Inflates gz as gzip (windowBits 15 + 16: the header, the CRC-32 and the
 * length checked) and checks that it is one member ending at the end of
 * the file and that it holds data. */
static bool inflates_to(const uint8_t *gz, size_t size, const uint8_t *data, size_t n)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return false;
    uint8_t *back = malloc(n + 1);
    z.next_in = (Bytef *)gz;
    z.avail_in = (uInt)size;
    z.next_out = back;
    z.avail_out = (uInt)(n + 1);
    int r = inflate(&z, Z_FINISH);
    bool ok = r == Z_STREAM_END && z.avail_in == 0 && z.total_out == n && memcmp(back, data, n) == 0;
    if (!ok)
        fprintf(stderr, "  inflate %d (%s), %u bytes left, %lu of %zu out\n", r, z.msg ? z.msg : "", z.avail_in,
                z.total_out, n);
    inflateEnd(&z);
    free(back);
    return ok;
}

static void test_round_trips(void)
{
    const size_t sizes[] = {0, 1, 1000, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 7 * BLOCK + 123, 40 * BLOCK + 5};
    const int workers[] = {0, 1, 3, 16};
    for (int smooth = 0; smooth < 2; smooth++) {
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t n = sizes[s];
            uint8_t *data = make_data(n, smooth);
            size_t first_size = 0;
            uint8_t *first = NULL;
            for (size_t w = 0; w < sizeof workers / sizeof *workers; w++) {
                for (int chunked = 0; chunked < 2; chunked++) {
                    size_t size = 0;
                    uint8_t *gz = compress_with(data, n, workers[w], BLOCK, chunked ? 3 * BLOCK / 2 : 0, &size);
                    CHECK_MSG(gz != NULL, "n %zu, %d workers", n, workers[w]);
                    if (!gz)
                        continue;
                    CHECK_MSG(inflates_to(gz, size, data, n), "%s data, n %zu, %d workers, chunked %d",
                              smooth ? "smooth" : "random", n, workers[w], chunked);
                    CHECK(size >= 18 && gz[0] == 0x1f && gz[1] == 0x8b && gz[2] == 8 && gz[3] == 0);
                    /* The same bytes whoever deflated and however it was fed. */
                    if (!first) {
                        first = gz, first_size = size;
                        continue;
                    }
                    CHECK_MSG(size == first_size && memcmp(gz, first, size) == 0, "n %zu: %d workers, chunked %d",
                              n, workers[w], chunked);
                    free(gz);
                }
            }
            free(first);
            free(data);
        }
    }
}

/* The default block size (1 MiB) on data of several blocks, and a
 * compressed size near zlib's single stream's: the blocks cost little. */
static void test_default_block(void)
{
    size_t n = 5 * SG_GZIP_PAR_BLOCK / 2 + 17;
    uint8_t *data = make_data(n, true);
    size_t size = 0;
    uint8_t *gz = compress_with(data, n, 4, 0, 100000, &size);
    CHECK(gz && inflates_to(gz, size, data, n));
    uLong one = compressBound((uLong)n);
    uint8_t *ref = malloc(one);
    CHECK(compress2(ref, &one, data, (uLong)n, 1) == Z_OK);
    CHECK_MSG(size < one + one / 100 + 64, "%zu bytes against zlib's %lu", size, one);
    free(ref);
    free(gz);
    free(data);
}

/* Data repeating every 30000 bytes, under the 32 KiB window: a block
 * primed with its predecessor's tail finds every byte as a match, one
 * that was not would hold 30000 literals. */
static void test_blocks_are_primed(void)
{
    size_t n = 32 * BLOCK, period = 30000;
    uint8_t *data = make_data(n, false);
    for (size_t i = period; i < n; i++)
        data[i] = data[i - period];
    size_t size = 0;
    uint8_t *gz = compress_with(data, n, 3, BLOCK, 0, &size);
    CHECK(gz && inflates_to(gz, size, data, n));
    CHECK_MSG(size < period + n / 32, "%zu bytes for %zu of a %zu-byte period", size, n, period);
    free(gz);
    free(data);
}

/* /dev/full unbuffered: the first block's write fails with ENOSPC. */
static void test_write_failure(void)
{
    for (int workers = 0; workers < 3; workers += 2) {
        FILE *f = fopen("/dev/full", "wb");
        if (!f) {
            fprintf(stderr, "  no /dev/full: write failures not tested\n");
            return;
        }
        setvbuf(f, NULL, _IONBF, 0);
        sg_gzip_par *g = NULL;
        sg_status st = sg_gzip_par_new(f, "full.nii.gz", 1, workers, BLOCK, &g);
        CHECK(st == SEGRT_ERROR_IO && g == NULL && strstr(sg_last_error(), "full.nii.gz: write failed"));
        fclose(f);

        f = fopen("/dev/full", "wb"); /* buffered: the header passes, a block's bytes do not */
        CHECK(sg_gzip_par_new(f, "full.nii.gz", 1, workers, BLOCK, &g) == SEGRT_OK);
        size_t n = 20 * BLOCK;
        uint8_t *data = make_data(n, false);
        st = SEGRT_OK;
        for (size_t at = 0; st == SEGRT_OK && at < n; at += BLOCK / 2)
            st = sg_gzip_par_write(g, data + at, BLOCK / 2);
        if (st == SEGRT_OK)
            st = sg_gzip_par_finish(g);
        CHECK_MSG(st == SEGRT_ERROR_IO && strstr(sg_last_error(), "full.nii.gz: write failed"), "%d workers: %s",
                  workers, sg_last_error());
        CHECK(sg_gzip_par_write(g, data, 10) == SEGRT_ERROR_IO && strstr(sg_last_error(), "full.nii.gz"));
        CHECK(sg_gzip_par_finish(g) == SEGRT_ERROR_IO);
        sg_gzip_par_free(g);
        fclose(f);
        free(data);
    }
}

/* Freed with blocks queued and being deflated (an error path above it):
 * the workers stop and join, nothing leaks, nothing hangs. */
static void test_free_unfinished(void)
{
    size_t n = 24 * BLOCK;
    uint8_t *data = make_data(n, false);
    for (int round = 0; round < 20; round++) {
        FILE *f = tmpfile();
        sg_gzip_par *g;
        CHECK(sg_gzip_par_new(f, "u.gz", 1, 1 + round % 4, BLOCK, &g) == SEGRT_OK);
        CHECK(sg_gzip_par_write(g, data, (size_t)(rnd() % n)) == SEGRT_OK);
        sg_gzip_par_free(g);
        fclose(f);
    }
    sg_gzip_par_free(NULL);
    free(data);
}

static void test_workers(void)
{
    CHECK(sg_gzip_par_workers(0, 0) == 0);
    CHECK(sg_gzip_par_workers(3 * SG_GZIP_PAR_BLOCK, 0) == 0); /* a small file: the caller deflates */
    int w = sg_gzip_par_workers(105u << 20, 0);
    CHECK(w >= 0 && w <= 16);
    CHECK(sg_gzip_par_workers(5 * BLOCK, BLOCK) <= 5);
}

int main(void)
{
    test_round_trips();
    test_default_block();
    test_blocks_are_primed();
    test_write_failure();
    test_free_unfinished();
    test_workers();
    return sg_test_finish("test_gzip_par");
}

#endif
