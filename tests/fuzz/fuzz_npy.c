/* libFuzzer target: the NPY reader. */
#include "io/npy.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_tensor t;
    if (sg_npy_parse(data, size, "fuzz.npy", &t) == SEGRT_OK)
        free(t.data);
    return 0;
}
