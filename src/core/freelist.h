/* First-fit placement in an unbounded arena, in O(log n) per operation.
 *
 * The free gaps below the highest block in use are kept, merged with their
 * neighbours, in a treap ordered by offset whose nodes also know the largest
 * gap under them; the first gap that fits is one walk down. Memory plans
 * that place tens of thousands of tensors used to rescan every live block
 * per placement. */
#ifndef SG_CORE_FREELIST_H
#define SG_CORE_FREELIST_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sg_freelist_node sg_freelist_node;

typedef struct sg_freelist {
    sg_freelist_node *nodes; /* pool; index 0 is unused (the empty tree) */
    int32_t n_nodes, cap_nodes;
    int32_t free_head; /* recycled pool entries, chained through .left */
    int32_t root;
    uint32_t seed;     /* priorities: a fixed xorshift sequence */
    size_t top;        /* everything at or above is free */
} sg_freelist;

void sg_freelist_init(sg_freelist *f);
void sg_freelist_free(sg_freelist *f);

/* The lowest offset where `size` bytes are free (0 for size 0, which
 * occupies nothing); marks them used. */
sg_status sg_freelist_alloc(sg_freelist *f, size_t size, size_t *offset);

/* Marks [offset, offset + size) free again; it must have come from
 * sg_freelist_alloc (whole, or as one of the pieces of an allocation). */
sg_status sg_freelist_release(sg_freelist *f, size_t offset, size_t size);

#endif
