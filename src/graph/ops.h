/* The operator enum and its tables, generated from ops.def. */
#ifndef SG_GRAPH_OPS_H
#define SG_GRAPH_OPS_H

#include <stdbool.h>
#include <stdint.h>

#define SG_VARIADIC INT32_MAX

typedef enum sg_op {
#define SG_OP(id, name, in_min, in_max, out_min, out_max) SG_OP_##id,
#include "graph/ops.def"
#undef SG_OP
    SG_OP_COUNT
} sg_op;

typedef struct sg_op_info {
    const char *name; /* ONNX op_type */
    int32_t min_inputs, max_inputs;
    int32_t min_outputs, max_outputs;
} sg_op_info;

const sg_op_info *sg_op_get(sg_op op);
const char *sg_op_name(sg_op op);

/* The operator of the default ONNX domain with this op_type, or SG_OP_COUNT. */
sg_op sg_op_lookup(const char *op_type);

/* The domain of segrt's own operators: what its passes make of several
 * ONNX nodes, written to plan files (and accepted from models) under this
 * domain, never under the default one. */
#define SG_SEGRT_DOMAIN "ai.segrt"

/* Whether op is one of segrt's own (domain SG_SEGRT_DOMAIN). */
bool sg_op_is_segrt(sg_op op);

#endif
