/* The device-memory API (segrt_device_alloc, _free, _copy, _synchronize)
 * in each of the three situations it meets: a build without CUDA, a CUDA
 * build on a machine without a GPU, and a machine with one. Each run
 * checks the one it is in and says which. */
#include "segrt.h"
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int has(const char *needle) { return strstr(segrt_last_error(), needle) != NULL; }

/* What holds everywhere: argument checks and host-to-host copies. */
static void test_common(void)
{
    CHECK(segrt_device_free(NULL) == SEGRT_OK);
    CHECK(segrt_device_alloc(0, 16, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    char a[8] = "abcdefg", b[8] = {0};
    CHECK(segrt_device_copy(b, SEGRT_MEMORY_HOST, a, SEGRT_MEMORY_HOST, sizeof a, 0) == SEGRT_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(segrt_device_copy(b, (segrt_memory_kind)5, a, SEGRT_MEMORY_HOST, 1, 0) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(has("memory kind"));
    CHECK(segrt_device_copy(NULL, SEGRT_MEMORY_HOST, a, SEGRT_MEMORY_HOST, 1, 0) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(has("dst is NULL"));
    CHECK(segrt_device_copy(NULL, SEGRT_MEMORY_HOST, NULL, SEGRT_MEMORY_HOST, 0, 0) == SEGRT_OK);
}

static void test_without_cuda(void)
{
    void *p = (void *)1;
    CHECK(segrt_device_alloc(0, 16, &p) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(has("segrt_device_alloc") && has("without CUDA"));
    CHECK(p == (void *)1); /* outputs are written only on success */
    char a[4] = {0};
    CHECK(segrt_device_free(a) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_device_copy(a, SEGRT_MEMORY_HOST, a + 2, SEGRT_MEMORY_DEVICE, 2, 0) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(has("segrt_device_copy") && has("without CUDA"));
    CHECK(segrt_device_synchronize(0) == SEGRT_ERROR_UNSUPPORTED);
}

static void test_no_device(int32_t n)
{
    void *p = (void *)1;
    CHECK(segrt_device_alloc(n, 16, &p) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(has("does not exist"));
    CHECK(p == (void *)1);
    char a[4] = {0};
    CHECK(segrt_device_free(a) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(has("not CUDA device memory"));
    CHECK(segrt_device_copy(a, SEGRT_MEMORY_DEVICE, a + 2, SEGRT_MEMORY_HOST, 2, n) ==
          SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_device_synchronize(n) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_device_synchronize(-1) == SEGRT_ERROR_INVALID_ARGUMENT);
}

/* Host -> device -> device -> host gives the bytes back. */
static void test_round_trip(void)
{
    enum { N = 1 << 20 };
    uint8_t *h = malloc(N), *back = malloc(N);
    CHECK(h && back);
    if (!h || !back) {
        free(h);
        free(back);
        return;
    }
    for (int i = 0; i < N; i++)
        h[i] = (uint8_t)(i * 7 + 3);
    memset(back, 0, N);
    void *d1 = NULL, *d2 = NULL;
    CHECK(segrt_device_alloc(0, N, &d1) == SEGRT_OK && d1);
    CHECK(segrt_device_alloc(0, N, &d2) == SEGRT_OK && d2);
    CHECK(segrt_device_copy(d1, SEGRT_MEMORY_DEVICE, h, SEGRT_MEMORY_HOST, N, 0) == SEGRT_OK);
    CHECK(segrt_device_copy(d2, SEGRT_MEMORY_DEVICE, d1, SEGRT_MEMORY_DEVICE, N, 0) == SEGRT_OK);
    CHECK(segrt_device_copy(back, SEGRT_MEMORY_HOST, d2, SEGRT_MEMORY_DEVICE, N, 0) == SEGRT_OK);
    CHECK(memcmp(h, back, N) == 0);
    CHECK(segrt_device_synchronize(0) == SEGRT_OK);
    CHECK(segrt_device_free(d1) == SEGRT_OK);
    CHECK(segrt_device_free(d2) == SEGRT_OK);
    free(h);
    free(back);
}

static void test_with_device(int32_t n)
{
    test_round_trip();
    void *p = NULL;
    CHECK(segrt_device_alloc(0, 0, &p) == SEGRT_OK && p != NULL);
    CHECK(segrt_device_free(p) == SEGRT_OK);
    CHECK(segrt_device_alloc(n, 16, &p) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(has("does not exist"));
    /* No GPU has an exbibyte. */
    p = (void *)1;
    CHECK(segrt_device_alloc(0, (size_t)1 << 60, &p) == SEGRT_ERROR_OUT_OF_MEMORY);
    CHECK(has("cudaMalloc") && has("free of"));
    CHECK(p == (void *)1);
    char host[4] = {0};
    CHECK(segrt_device_free(host) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(has("not CUDA device memory"));
    /* The failed calls left nothing behind for the next one. */
    CHECK(segrt_device_alloc(0, 64, &p) == SEGRT_OK);
    CHECK(segrt_device_free(p) == SEGRT_OK);
}

int main(void)
{
    segrt_cuda_versions v;
    int32_t n = 0;
    CHECK(segrt_cuda_versions_get(&v) == SEGRT_OK);
    CHECK(segrt_cuda_device_count(&n) == SEGRT_OK);
    test_common();
    if (!v.built_with_cuda) {
        printf("test_device_memory: built without CUDA\n");
        test_without_cuda();
    } else if (n == 0) {
        printf("test_device_memory: CUDA build, no device\n");
        test_no_device(n);
    } else {
        printf("test_device_memory: %d CUDA device(s)\n", (int)n);
        test_no_device(n); /* device n is one past the last */
        test_with_device(n);
    }
    return sg_test_finish("test_device_memory");
}
