/* NPY round trips for every dtype and rank, and malformed headers. */
#include "io/npy.h"
#include "testlib.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void round_trip(sg_dtype dt, int32_t rank, const int64_t *dims)
{
    char path[] = "/tmp/segrt_test_npy_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    sg_tensor t = {dt, rank, {0}, NULL};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    size_t bytes = sg_tensor_bytes(&t);
    t.data = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)t.data)[i] = dt == SEGRT_DTYPE_BOOL ? (uint8_t)(i % 2) : (uint8_t)(i * 7 + 1);
    CHECK(sg_npy_write(path, &t) == SEGRT_OK);
    sg_tensor r, p;
    CHECK_MSG(sg_npy_read(path, &r) == SEGRT_OK, "%s", segrt_last_error());
    CHECK(r.dtype == dt && r.rank == rank);
    CHECK(memcmp(r.dims, t.dims, sizeof(int64_t) * (size_t)rank) == 0);
    CHECK(bytes == 0 || memcmp(r.data, t.data, bytes) == 0);
    CHECK(sg_npy_probe(path, &p) == SEGRT_OK && p.data == NULL && p.dtype == r.dtype && p.rank == r.rank &&
          memcmp(p.dims, r.dims, sizeof r.dims) == 0);
    free(r.data);
    free(t.data);
    unlink(path);
}

static sg_status parse(const char *bytes, size_t n)
{
    sg_tensor t;
    sg_status s = sg_npy_parse(bytes, n, "x.npy", &t);
    if (s == SEGRT_OK)
        free(t.data);
    return s;
}

static void test_bad_headers(void)
{
    CHECK(parse("abc", 3) == SEGRT_ERROR_INVALID_MODEL);
    const char v9[] = "\x93NUMPY\x09\x00\x00\x00";
    CHECK(parse(v9, sizeof v9 - 1) == SEGRT_ERROR_UNSUPPORTED);
    const char big[] = "\x93NUMPY\x01\x00\xff\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    CHECK(parse(big, sizeof big - 1) == SEGRT_ERROR_INVALID_MODEL); /* header runs past the end */
    const char be[] = "\x93NUMPY\x01\x00\x3c\x00{'descr': '>f4', 'fortran_order': False, 'shape': (), }         ";
    CHECK(parse(be, sizeof be - 1) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(strstr(segrt_last_error(), "x.npy") != NULL);
    const char neg[] = "\x93NUMPY\x01\x00\x3c\x00{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }       ";
    CHECK(parse(neg, sizeof neg - 1) == SEGRT_ERROR_INVALID_MODEL);
    const char huge[] = "\x93NUMPY\x01\x00\x50\x00{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999, 99999999), }   ";
    CHECK(parse(huge, sizeof huge - 1) == SEGRT_ERROR_INVALID_MODEL);
    const char obj[] = "\x93NUMPY\x01\x00\x3c\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }         ";
    CHECK(parse(obj, sizeof obj - 1) == SEGRT_ERROR_UNSUPPORTED); /* object arrays */
    const char c8[] = "\x93NUMPY\x01\x00\x3c\x00{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }        ";
    CHECK(parse(c8, sizeof c8 - 1) == SEGRT_ERROR_UNSUPPORTED);
    sg_tensor t;
    CHECK(sg_npy_read("/nonexistent/dir/x.npy", &t) == SEGRT_ERROR_IO);
}

static void spit(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

/* The first 128 bytes of a version 1 file (buf holds 129): magic, header
 * length and the header for descr and shape, padded. */
static void npy_header(char *buf, const char *descr, const char *shape)
{
    memcpy(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
    int k = snprintf(buf + 10, 119, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    memset(buf + 10 + k, ' ', (size_t)(117 - k));
    buf[127] = '\n';
    buf[128] = '\0';
}

/* In sg_test_small_memory's child: reads and probes the file at arg;
 * returns the read's status when the probe agrees (status and message),
 * with the message in text. */
static int read_npy(void *arg, char *text, size_t cap)
{
    sg_tensor t, p;
    sg_status s = sg_npy_read(arg, &t);
    snprintf(text, cap, "%s", s == SEGRT_OK ? "" : segrt_last_error());
    if (s == SEGRT_OK) {
        free(t.data);
        return sg_npy_probe(arg, &p) == SEGRT_OK ? 0 : 101;
    }
    if (sg_npy_probe(arg, &p) != s || strcmp(text, segrt_last_error()) != 0)
        return 101;
    return (int)s;
}

/* A header that claims more than its file holds is refused before the
 * data's buffer is allocated; a read holds the data once, not the file
 * and a copy. */
static void test_claims(void)
{
    char path[] = "/tmp/segrt_test_npy_claim_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    char text[512];
    /* 40 GB of float32 (under the 64 GiB cap) from a 128-byte file. */
    char claim[129];
    npy_header(claim, "<f4", "(100000, 100000)");
    spit(path, claim, 128);
    int rc = sg_test_small_memory((size_t)64 << 20, read_npy, path, text, sizeof text);
    CHECK_MSG(rc == SEGRT_ERROR_INVALID_MODEL && strstr(text, path) &&
                  strstr(text, "float32 100000x100000 needs 40000000000 bytes of data, the file has 0"),
              "%d: %s", rc, text);
    CHECK(parse(claim, 128) == SEGRT_ERROR_INVALID_MODEL);
    /* Past the cap, whatever the file. */
    npy_header(claim, "<f8", "(100000, 100000)");
    spit(path, claim, 128);
    rc = sg_test_small_memory((size_t)64 << 20, read_npy, path, text, sizeof text);
    CHECK_MSG(rc == SEGRT_ERROR_INVALID_MODEL && strstr(text, "too large"), "%d: %s", rc, text);
    /* A header longer than the file. */
    spit(path, claim, 40);
    rc = sg_test_small_memory((size_t)64 << 20, read_npy, path, text, sizeof text);
    CHECK_MSG(rc == SEGRT_ERROR_INVALID_MODEL && strstr(text, "runs past the end"), "%d: %s", rc, text);

    /* 64 MiB of data read within a budget of 96 MiB: it could not hold
     * the file and a copy. */
    sg_tensor t = {SEGRT_DTYPE_UINT8, 1, {(int64_t)64 << 20}, NULL};
    t.data = malloc((size_t)t.dims[0]);
    for (int64_t i = 0; i < t.dims[0]; i++)
        ((uint8_t *)t.data)[i] = (uint8_t)(i * 31 + (i >> 20));
    CHECK(sg_npy_write(path, &t) == SEGRT_OK);
    free(t.data);
    rc = sg_test_small_memory((size_t)96 << 20, read_npy, path, text, sizeof text);
    CHECK_MSG(rc == 0, "%d: %s", rc, text);
    unlink(path);
}

/* Two threads write the same output path over and over, as two C API
 * calls of one process may: every write succeeds, the file always reads
 * back whole as one writer's tensor (never a mix or a truncation), and no
 * temporary file is left behind. With PATH.tmp.PID names the threads
 * shared one temporary file. */
#define RACE_WRITES 200
#define RACE_VALUES 4096

typedef struct race_arg {
    const char *path;
    float fill;
    int failures;
} race_arg;

static void *race_writer(void *p)
{
    race_arg *a = p;
    static const int64_t dims[1] = {RACE_VALUES};
    sg_tensor t = {SEGRT_DTYPE_FLOAT32, 1, {0}, NULL};
    t.dims[0] = dims[0];
    float *v = malloc(sizeof(float) * RACE_VALUES);
    for (int i = 0; i < RACE_VALUES; i++)
        v[i] = a->fill;
    t.data = v;
    for (int i = 0; i < RACE_WRITES; i++)
        if (sg_npy_write(a->path, &t) != SEGRT_OK)
            a->failures++;
    free(v);
    return NULL;
}

static void test_concurrent_writes(void)
{
    char dir[] = "/tmp/segrt_test_npy_race_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/out.npy", dir);
    race_arg a[2] = {{path, 1.0f, 0}, {path, 2.0f, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, race_writer, &a[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(a[0].failures == 0 && a[1].failures == 0);
    sg_tensor r;
    CHECK_MSG(sg_npy_read(path, &r) == SEGRT_OK, "%s", segrt_last_error());
    CHECK(r.dtype == SEGRT_DTYPE_FLOAT32 && r.rank == 1 && r.dims[0] == RACE_VALUES);
    const float *got = r.data;
    bool uniform = true;
    for (int i = 1; i < RACE_VALUES; i++)
        uniform = uniform && got[i] == got[0];
    CHECK(uniform && (got[0] == 1.0f || got[0] == 2.0f));
    free(r.data);
    int left = 0;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "out.npy"))
            left++;
    if (d)
        closedir(d);
    CHECK_MSG(left == 0, "%d temporary files left", left);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const int64_t d4[4] = {2, 3, 4, 5}, d1[1] = {7}, d0[1] = {0};
    const sg_dtype all[] = {SEGRT_DTYPE_FLOAT32, SEGRT_DTYPE_FLOAT16, SEGRT_DTYPE_FLOAT64,
                            SEGRT_DTYPE_INT64,   SEGRT_DTYPE_INT32,   SEGRT_DTYPE_INT16,
                            SEGRT_DTYPE_UINT16,  SEGRT_DTYPE_INT8,    SEGRT_DTYPE_UINT8,
                            SEGRT_DTYPE_BOOL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        round_trip(all[i], 4, d4);
        round_trip(all[i], 1, d1);
        round_trip(all[i], 0, d1);
        round_trip(all[i], 1, d0);
    }
    test_bad_headers();
    test_claims();
    test_concurrent_writes();
    return sg_test_finish("test_npy");
}
