#include "graph/ops.h"

#include <string.h>

static const sg_op_info op_table[] = {
#define SG_OP(id, name, in_min, in_max, out_min, out_max) \
    [SG_OP_##id] = {name, in_min, in_max, out_min, out_max},
#include "graph/ops.def"
#undef SG_OP
};

_Static_assert(sizeof op_table / sizeof op_table[0] == SG_OP_COUNT,
               "op_table must have one entry per operator");

const sg_op_info *sg_op_get(sg_op op) { return &op_table[op]; }

const char *sg_op_name(sg_op op) { return (unsigned)op < SG_OP_COUNT ? op_table[op].name : "?"; }

sg_op sg_op_lookup(const char *op_type)
{
    /* About 90 entries, looked up once per node at import: a linear scan is
     * simpler than a hash and not measurable next to protobuf parsing. */
    for (int i = 0; i < SG_OP_COUNT; i++)
        if (strcmp(op_table[i].name, op_type) == 0)
            return (sg_op)i;
    return SG_OP_COUNT;
}

bool sg_op_is_segrt(sg_op op) { return op == SG_OP_SDPA; }
