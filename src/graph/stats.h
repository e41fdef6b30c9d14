/* Figures about a graph: parameters and arithmetic. */
#ifndef SG_GRAPH_STATS_H
#define SG_GRAPH_STATS_H

#include "graph/ir.h"

/* Elements and bytes of the weights (initializers, and constants derived
 * from them) that live nodes read; shared buffers count once. */
sg_status sg_graph_params(const sg_graph *g, int64_t *count, int64_t *bytes);

/* FLOPs of one run: 2 per multiply-add of Conv, ConvTranspose, MatMul and
 * Gemm, one per output element elsewhere. SHAPE error naming the first node
 * whose shapes are not all known. */
sg_status sg_graph_flops(const sg_graph *g, double *out);

#endif
