/* NPY round trips for every dtype and rank, and malformed headers. */
#include "io/npy.h"
#include "testlib.h"

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
    sg_tensor r;
    CHECK_MSG(sg_npy_read(path, &r) == SEGRT_OK, "%s", segrt_last_error());
    CHECK(r.dtype == dt && r.rank == rank);
    CHECK(memcmp(r.dims, t.dims, sizeof(int64_t) * (size_t)rank) == 0);
    CHECK(bytes == 0 || memcmp(r.data, t.data, bytes) == 0);
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
    return sg_test_finish("test_npy");
}
