#include "core/freelist.h"

#include "core/mem.h"

#include <string.h>

/* One free gap [off, off + size); max is the largest gap in its subtree. */
struct sg_freelist_node {
    size_t off, size, max;
    uint32_t prio;
    int32_t left, right;
};

void sg_freelist_init(sg_freelist *f)
{
    memset(f, 0, sizeof *f);
    f->seed = 2463534242u;
}

void sg_freelist_free(sg_freelist *f)
{
    free(f->nodes);
    memset(f, 0, sizeof *f);
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

static void pull(sg_freelist *f, int32_t t)
{
    sg_freelist_node *n = &f->nodes[t];
    n->max = max3(n->size, f->nodes[n->left].max, f->nodes[n->right].max);
}

/* Splits tree t into gaps below key (*l) and the rest (*r). */
static void split(sg_freelist *f, int32_t t, size_t key, int32_t *l, int32_t *r)
{
    if (!t) {
        *l = *r = 0;
        return;
    }
    sg_freelist_node *n = &f->nodes[t];
    if (n->off < key) {
        split(f, n->right, key, &n->right, r);
        *l = t;
    } else {
        split(f, n->left, key, l, &n->left);
        *r = t;
    }
    pull(f, t);
}

/* Joins trees a and b, every gap of a lying below every gap of b. */
static int32_t merge(sg_freelist *f, int32_t a, int32_t b)
{
    if (!a || !b)
        return a ? a : b;
    if (f->nodes[a].prio > f->nodes[b].prio) {
        f->nodes[a].right = merge(f, f->nodes[a].right, b);
        pull(f, a);
        return a;
    }
    f->nodes[b].left = merge(f, a, f->nodes[b].left);
    pull(f, b);
    return b;
}

static sg_status node_new(sg_freelist *f, size_t off, size_t size, int32_t *out)
{
    int32_t t = f->free_head;
    if (t) {
        f->free_head = f->nodes[t].left;
    } else {
        if (f->n_nodes == 0)
            f->n_nodes = 1; /* index 0 stands for the empty tree */
        SG_TRY(sg_grow((void **)&f->nodes, &f->cap_nodes, f->n_nodes + 1, sizeof *f->nodes));
        memset(&f->nodes[0], 0, sizeof f->nodes[0]);
        t = f->n_nodes++;
    }
    f->seed ^= f->seed << 13;
    f->seed ^= f->seed >> 17;
    f->seed ^= f->seed << 5;
    f->nodes[t] = (sg_freelist_node){off, size, size, f->seed, 0, 0};
    *out = t;
    return SEGRT_OK;
}

static void node_recycle(sg_freelist *f, int32_t t)
{
    f->nodes[t].left = f->free_head;
    f->free_head = t;
}

sg_status sg_freelist_alloc(sg_freelist *f, size_t size, size_t *offset)
{
    if (size == 0) {
        *offset = 0;
        return SEGRT_OK;
    }
    if (!f->root || f->nodes[f->root].max < size) {
        if (f->top > SIZE_MAX - size)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "arena offsets overflow");
        *offset = f->top;
        f->top += size;
        return SEGRT_OK;
    }
    /* The lowest gap that fits: left while the left subtree has one. */
    int32_t t = f->root;
    for (;;) {
        const sg_freelist_node *n = &f->nodes[t];
        if (f->nodes[n->left].max >= size)
            t = n->left;
        else if (n->size >= size)
            break;
        else
            t = n->right;
    }
    size_t off = f->nodes[t].off;
    int32_t l, m, r;
    split(f, f->root, off, &l, &m);
    split(f, m, off + 1, &m, &r);
    SG_ASSERT(m == t);
    sg_freelist_node *n = &f->nodes[t];
    if (n->size > size) {
        n->off += size;
        n->size -= size;
        n->max = n->size; /* alone: its children went to l and r */
        n->left = n->right = 0;
        f->root = merge(f, merge(f, l, t), r);
    } else {
        node_recycle(f, t);
        f->root = merge(f, l, r);
    }
    *offset = off;
    return SEGRT_OK;
}

sg_status sg_freelist_release(sg_freelist *f, size_t offset, size_t size)
{
    if (size == 0)
        return SEGRT_OK;
    size_t lo = offset, hi = offset + size;
    int32_t l, r, x;
    split(f, f->root, offset, &l, &r);
    /* Merge with the gap just below and the one just above, if adjacent. */
    if (l) {
        int32_t t = l;
        while (f->nodes[t].right)
            t = f->nodes[t].right;
        if (f->nodes[t].off + f->nodes[t].size == lo) {
            lo = f->nodes[t].off;
            split(f, l, lo, &l, &x);
            node_recycle(f, x);
        }
    }
    if (r) {
        int32_t t = r;
        while (f->nodes[t].left)
            t = f->nodes[t].left;
        if (f->nodes[t].off == hi) {
            hi += f->nodes[t].size;
            split(f, r, hi, &x, &r);
            node_recycle(f, x);
        }
    }
    if (hi == f->top) {
        f->top = lo; /* the gap reaches the top: it is the top now */
        f->root = merge(f, l, r);
        return SEGRT_OK;
    }
    int32_t t;
    sg_status s = node_new(f, lo, hi - lo, &t);
    if (s == SEGRT_OK)
        f->root = merge(f, merge(f, l, t), r);
    else
        f->root = merge(f, l, r);
    return s;
}
