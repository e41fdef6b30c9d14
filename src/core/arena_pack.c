#include "core/arena_pack.h"

#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

/* Segment trees over steps 0 .. leaves - 1 (node 1 the root, leaf s at
 * leaves + s). Each node holds a list of placed blocks, a slice of one
 * array sized before placement starts, since every block's nodes are known
 * then. The "alive" tree keeps a block at the O(log) nodes that cover its
 * lifetime exactly: the blocks alive at step s are those on the path from
 * leaf s to the root. The "starts" tree keeps a block at every ancestor of
 * its first step: the blocks starting within steps a .. b are those at the
 * nodes covering a .. b. */
typedef struct tree {
    int32_t *at;   /* per node: start of its list in items; at[node + 1] its end */
    int32_t *fill; /* per node: entries placed so far */
    int32_t *items;
} tree;

typedef struct span {
    size_t off, end;
} span;

static int by_offset(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

static void tree_free(tree *t)
{
    free(t->at);
    free(t->fill);
    free(t->items);
}

/* The nodes of the canonical cover of steps lo .. hi (at most 2 per level). */
static int32_t cover(int32_t leaves, int32_t lo, int32_t hi, int32_t *nodes)
{
    int32_t k = 0;
    for (int32_t l = lo + leaves, r = hi + 1 + leaves; l < r; l >>= 1, r >>= 1) {
        if (l & 1)
            nodes[k++] = l++;
        if (r & 1)
            nodes[k++] = --r;
    }
    return k;
}

/* Leaf `step` and its ancestors up to the root. */
static int32_t ancestors(int32_t leaves, int32_t step, int32_t *nodes)
{
    int32_t k = 0;
    for (int32_t node = step + leaves; node >= 1; node >>= 1)
        nodes[k++] = node;
    return k;
}

/* Turns per-node counts (at[node + 1]) into list starts. */
static sg_status tree_layout(tree *t, int32_t nodes)
{
    int64_t total = 0;
    for (int32_t k = 1; k <= nodes; k++) {
        total += t->at[k];
        if (total >= INT32_MAX)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "arena packing: too many blocks");
        t->at[k] = (int32_t)total;
    }
    t->items = sg_malloc(sizeof(int32_t) * (size_t)(total + 1));
    return t->items ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}

static void add(tree *t, int32_t node, int32_t block) { t->items[t->at[node] + t->fill[node]++] = block; }

sg_status sg_arena_pack(int32_t n, const int32_t *order, const int32_t *first, const int32_t *last,
                        const size_t *size, int32_t n_steps, size_t *offset, size_t *peak)
{
    *peak = 0;
    if (n == 0)
        return SEGRT_OK;
    int32_t leaves = 1;
    while (leaves < n_steps) {
        if (leaves > INT32_MAX / 4)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "arena packing: too many steps");
        leaves <<= 1;
    }
    int32_t nodes = 2 * leaves;
    tree alive = {0}, starts = {0};
    span *spans = NULL;
    int32_t cap_spans = 0;
    alive.at = sg_calloc((size_t)nodes + 1, sizeof(int32_t));
    alive.fill = sg_calloc((size_t)nodes + 1, sizeof(int32_t));
    starts.at = sg_calloc((size_t)nodes + 1, sizeof(int32_t));
    starts.fill = sg_calloc((size_t)nodes + 1, sizeof(int32_t));
    sg_status s = alive.at && alive.fill && starts.at && starts.fill ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
    int32_t nodes_of[128]; /* up to 32 ancestors and 62 cover nodes */
    for (int32_t i = 0; s == SEGRT_OK && i < n; i++) {
        SG_ASSERT(first[i] >= 0 && first[i] <= last[i] && last[i] < n_steps);
        for (int32_t j = cover(leaves, first[i], last[i], nodes_of); j-- > 0;)
            alive.at[nodes_of[j] + 1]++;
        for (int32_t j = ancestors(leaves, first[i], nodes_of); j-- > 0;)
            starts.at[nodes_of[j] + 1]++;
    }
    if (s == SEGRT_OK)
        s = tree_layout(&alive, nodes);
    if (s == SEGRT_OK)
        s = tree_layout(&starts, nodes);
    for (int32_t k = 0; s == SEGRT_OK && k < n; k++) {
        int32_t b = order[k], ns = 0;
        /* The placed blocks alive at b's first step, then those that start
         * later within its lifetime: each block overlapping b in time, once. */
        int32_t na = ancestors(leaves, first[b], nodes_of);
        int32_t nc = first[b] < last[b] ? cover(leaves, first[b] + 1, last[b], nodes_of + na) : 0;
        for (int32_t j = 0; j < na + nc && s == SEGRT_OK; j++) {
            const tree *t = j < na ? &alive : &starts;
            int32_t node = nodes_of[j], from = t->at[node], to = t->at[node] + t->fill[node];
            s = sg_grow((void **)&spans, &cap_spans, ns + (to - from), sizeof *spans);
            for (int32_t e = from; s == SEGRT_OK && e < to; e++) {
                int32_t u = t->items[e];
                spans[ns++] = (span){offset[u], offset[u] + size[u]};
            }
        }
        if (s != SEGRT_OK)
            break;
        /* The lowest gap that fits, going up through them by offset. */
        if (ns > 1)
            qsort(spans, (size_t)ns, sizeof *spans, by_offset);
        size_t off = 0;
        for (int32_t j = 0; j < ns && spans[j].off < off + size[b]; j++)
            if (spans[j].end > off)
                off = spans[j].end;
        offset[b] = off;
        if (off + size[b] > *peak)
            *peak = off + size[b];
        for (int32_t j = cover(leaves, first[b], last[b], nodes_of); j-- > 0;)
            add(&alive, nodes_of[j], b);
        for (int32_t j = ancestors(leaves, first[b], nodes_of); j-- > 0;)
            add(&starts, nodes_of[j], b);
    }
    tree_free(&alive);
    tree_free(&starts);
    free(spans);
    return s;
}
