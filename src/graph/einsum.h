/* Einsum equations resolved against the operands' ranks and dims: which
 * letter each operand dim is, the extent of each letter, and which
 * letters the output keeps. Shared by the backends, which then differ only
 * in how they walk the contraction. */
#ifndef SG_GRAPH_EINSUM_H
#define SG_GRAPH_EINSUM_H

#include "graph/ir.h"

#define SG_EINSUM_MAX_IN 16
/* 'a'-'z', 'A'-'Z', then one per broadcast ("...") dim. */
#define SG_EINSUM_MAX_LETTERS (52 + SEGRT_MAX_RANK)

typedef struct sg_einsum {
    int32_t n_in;
    int32_t rank[SG_EINSUM_MAX_IN];
    /* Dim d of operand i is letter letter[i][d] (a letter repeated in one
     * operand walks its diagonal). Letters are numbered output first, in
     * the output's order (0..n_out-1), then the summed ones. */
    int32_t letter[SG_EINSUM_MAX_IN][SEGRT_MAX_RANK];
    int32_t n_out, n_letters;
    int64_t size[SG_EINSUM_MAX_LETTERS]; /* extents; an operand dim of 1 broadcasts */
} sg_einsum;

/* Resolves node n's `equation` (explicit "ij,jk->ik" or implicit "ij,jk",
 * with "..." broadcasting) for n_in operands of the given ranks and dims.
 * Errors name the node: a malformed equation, terms that do not match the
 * operands, letters whose sizes disagree. */
sg_status sg_einsum_resolve(const sg_node *n, int32_t n_in, const int32_t *rank,
                            const int64_t (*dims)[SEGRT_MAX_RANK], sg_einsum *out);

#endif
