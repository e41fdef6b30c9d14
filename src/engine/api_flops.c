/* segrt_engine_flops (segrt.h): the FLOPs of an engine's graph at given
 * input dims, for engines that came from a plan file and have no model. */
#include "engine/api_internal.h"
#include "engine/engine_internal.h"

segrt_status segrt_engine_flops(const segrt_engine *engine, size_t n_inputs, const segrt_tensor *inputs, double *out)
{
    if (!engine || !out || (n_inputs && !inputs))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_flops: engine, inputs and out must not be NULL");
    if (n_inputs != segrt_engine_input_count(engine))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_flops: the engine takes %zu inputs, %zu given",
                        segrt_engine_input_count(engine), n_inputs);
    /* The engine's graph stands in for a model, borrowed:
     * segrt_model_optimize copies it and changes nothing. */
    struct segrt_model view = {engine->g};
    segrt_build_options *o = NULL;
    segrt_model *opt = NULL;
    segrt_status s = segrt_build_options_create(&o);
    for (size_t i = 0; s == SEGRT_OK && i < n_inputs; i++) {
        segrt_tensor_desc d;
        s = segrt_engine_input(engine, i, &d);
        if (s == SEGRT_OK)
            s = segrt_build_options_set_shape(o, d.name, inputs[i].rank, inputs[i].dims);
    }
    if (s == SEGRT_OK)
        s = segrt_model_optimize(&view, o, &opt);
    double flops = 0;
    if (s == SEGRT_OK)
        s = segrt_model_flops(opt, &flops);
    segrt_model_destroy(opt);
    segrt_build_options_destroy(o);
    if (s == SEGRT_OK)
        *out = flops;
    return s;
}
