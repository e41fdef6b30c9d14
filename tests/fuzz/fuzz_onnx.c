/* libFuzzer target: the ONNX loader, shape inference and the optimizer.
 * Any input may be rejected; none may crash, leak or trip a sanitizer. */
#include "segrt.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segrt_model *m = NULL, *opt = NULL;
    if (segrt_model_load_from_memory(data, size, NULL, "fuzz.onnx", &m) != SEGRT_OK)
        return 0;
    segrt_model_meta meta;
    segrt_model_metadata(m, &meta);
    /* Bind every symbolic dim of every input to a small size and optimize:
     * that drives shape inference and constant folding with real numbers. */
    segrt_build_options *opts = NULL;
    if (segrt_build_options_create(&opts) == SEGRT_OK) {
        for (size_t i = 0; i < segrt_model_input_count(m); i++) {
            segrt_tensor_desc d;
            if (segrt_model_input(m, i, &d) != SEGRT_OK || d.rank < 0)
                continue;
            int64_t dims[SEGRT_MAX_RANK];
            for (int32_t k = 0; k < d.rank; k++)
                dims[k] = d.dims[k] >= 0 && d.dims[k] <= 64 ? d.dims[k] : 4;
            segrt_build_options_set_shape(opts, d.name, d.rank, dims);
        }
        if (segrt_model_optimize(m, opts, &opt) == SEGRT_OK) {
            double flops;
            segrt_model_flops(opt, &flops);
        }
        segrt_build_options_destroy(opts);
    }
    segrt_model_destroy(opt);
    segrt_model_destroy(m);
    return 0;
}
