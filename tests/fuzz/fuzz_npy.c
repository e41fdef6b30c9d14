/* libFuzzer target: the NPY reader, from memory (sg_npy_parse) and through
 * a file (sg_npy_read, sg_npy_probe), which must agree: the same status,
 * and for a good file the same dtype, dims and data. A disagreement aborts
 * (a crash to libFuzzer, with the input kept). */
#include "io/npy.h"
#include "fuzz_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void disagree(const char *what, sg_status a, sg_status b)
{
    fprintf(stderr, "fuzz_npy: %s disagree (%d, %d): %s\n", what, (int)a, (int)b, sg_last_error());
    abort();
}

static bool same_shape(const sg_tensor *a, const sg_tensor *b)
{
    return a->dtype == b->dtype && a->rank == b->rank &&
           memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_tensor t, r, p;
    sg_status parse = sg_npy_parse(data, size, "fuzz.npy", &t);
    const char *path = fuzz_as_file(data, size);
    sg_status read = sg_npy_read(path, &r);
    if (read != parse)
        disagree("parse and read", parse, read);
    sg_status probe = sg_npy_probe(path, &p);
    if (probe != read)
        disagree("read and probe", read, probe);
    if (parse == SEGRT_OK) {
        if (!same_shape(&t, &r) || !same_shape(&t, &p) || p.data != NULL ||
            memcmp(t.data, r.data, sg_tensor_bytes(&t)) != 0)
            disagree("the arrays of parse, read and probe", parse, read);
        free(t.data);
        free(r.data);
    }
    return 0;
}
