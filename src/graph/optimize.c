#include "graph/infer.h"
#include "graph/passes.h"

/* Constants larger than this stay computed at run time: folding them would
 * bloat the model for little gain. */
#define SG_FOLD_MAX_BYTES ((int64_t)64 << 20)
/* All folds of one optimization together create at most this much plus
 * twice the model's own constants (a Cast of every weight to float32 still
 * folds): a chain of folds from a tiny file, each below the limit above,
 * would otherwise hold gigabytes before dead nodes are dropped. */
#define SG_FOLD_BUDGET_BYTES ((int64_t)256 << 20)

sg_status sg_graph_optimize(sg_graph *g, sg_eval_lookup lookup)
{
    int64_t budget = SG_FOLD_BUDGET_BYTES;
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].data && g->values[v].is_initializer)
            budget += 2 * (int64_t)sg_blob_size(g->values[v].data);
    sg_fold_options fold = {lookup, SG_FOLD_MAX_BYTES, false, false, &budget};
    SG_TRY(sg_graph_infer(g));
    /* Each pass can expose work for the others (a removed Identity makes a
     * Shape foldable, a fold makes a Pad's pads constant); a handful of
     * rounds reaches the fixed point on every exporter's output seen. */
    for (int round = 0; round < 16; round++) {
        int32_t changed = 0;
        SG_TRY(sg_pass_fold_constants(g, &fold, &changed));
        SG_TRY(sg_pass_fold_if(g, &changed));
        SG_TRY(sg_pass_simplify(g, &changed));
        SG_TRY(sg_pass_fold_batchnorm(g, &changed));
        SG_TRY(sg_pass_einsum_matmul(g, &changed));
        SG_TRY(sg_pass_fuse_gelu(g, &changed));
        SG_TRY(sg_pass_dead_nodes(g, &changed));
        SG_TRY(sg_graph_compact(g));
        if (!changed)
            break;
    }
    return sg_graph_infer(g);
}
