#include "graph/infer.h"
#include "graph/passes.h"

/* Constants larger than this stay computed at run time: folding them would
 * bloat the model for little gain. */
#define SG_FOLD_MAX_BYTES ((int64_t)64 << 20)

sg_status sg_graph_optimize(sg_graph *g, sg_eval_lookup lookup)
{
    sg_fold_options fold = {lookup, SG_FOLD_MAX_BYTES, false};
    SG_TRY(sg_graph_infer(g));
    /* Each pass can expose work for the others (a removed Identity makes a
     * Shape foldable, a fold makes a Pad's pads constant); a handful of
     * rounds reaches the fixed point on every exporter's output seen. */
    for (int round = 0; round < 8; round++) {
        int32_t changed = 0;
        SG_TRY(sg_pass_fold_constants(g, &fold, &changed));
        SG_TRY(sg_pass_simplify(g, &changed));
        SG_TRY(sg_pass_fold_batchnorm(g, &changed));
        SG_TRY(sg_pass_dead_nodes(g, &changed));
        SG_TRY(sg_graph_compact(g));
        if (!changed)
            break;
    }
    return sg_graph_infer(g);
}
