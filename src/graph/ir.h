/* The graph IR: values (tensors), nodes (operators) and the graph that owns
 * them.
 *
 * Values and nodes live in arrays and refer to each other by index, so a
 * graph can be cloned with memcpy-like loops and passes can rewrite it
 * without pointer fix-ups. Nodes are kept in a topological order. A pass
 * that removes a node marks it dead; sg_graph_compact() drops dead nodes and
 * values nothing uses. Constant data is held in reference-counted blobs, so
 * clones and optimized copies share weights instead of copying them. */
#ifndef SG_GRAPH_IR_H
#define SG_GRAPH_IR_H

#include "core/dtype.h"
#include "core/mem.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/ops.h"

#include <stdbool.h>
#include <stdint.h>

#define SG_DIM_UNKNOWN (-1)
#define SG_RANK_UNKNOWN (-1)
#define SG_NO_SYM (-1)

/* The largest dim segrt accepts anywhere. Real tensors are far smaller;
 * larger values come from hostile files or arithmetic gone wrong, and would
 * overflow byte counts downstream. */
#define SG_MAX_DIM ((int64_t)1 << 40)

/* One dimension: a known size, or unknown with an optional symbolic name
 * (an index into sg_graph.syms) kept for messages and for binding. */
typedef struct sg_dim {
    int64_t size; /* >= 0 when known, else SG_DIM_UNKNOWN */
    int32_t sym;  /* SG_NO_SYM or index into the graph's symbols */
} sg_dim;

typedef struct sg_shape {
    int32_t rank; /* SG_RANK_UNKNOWN when not known */
    sg_dim d[SEGRT_MAX_RANK];
} sg_shape;

typedef struct sg_value {
    char *name;
    sg_dtype dtype;     /* SEGRT_DTYPE_UNDEFINED until known */
    sg_shape shape;     /* current, as inferred */
    sg_shape declared;  /* what the model declared for inputs and outputs */
    sg_blob *data;      /* constant contents (row-major), or NULL */
    int32_t producer;   /* index of the producing node, or -1 */
    bool is_input;      /* a graph input (data bound at run time) */
    bool is_output;     /* a graph output */
    bool is_initializer;/* weights from the model file (counted as parameters) */
} sg_value;

typedef enum sg_attr_kind {
    SG_ATTR_INT,
    SG_ATTR_FLOAT,
    SG_ATTR_STRING,
    SG_ATTR_INTS,
    SG_ATTR_FLOATS,
    SG_ATTR_STRINGS,
    SG_ATTR_TENSOR,
    SG_ATTR_GRAPH /* an If's branch: a graph of its own (sg_graph_branch) */
} sg_attr_kind;

struct sg_graph;

typedef struct sg_attr {
    char *name;
    sg_attr_kind kind;
    int64_t i;
    float f;
    char *s;          /* NUL-terminated copy (STRING) */
    int64_t *ints;    /* INTS, n elements */
    float *floats;    /* FLOATS, n elements */
    char **strings;   /* STRINGS, n elements */
    int32_t n;
    /* TENSOR */
    sg_dtype t_dtype;
    int32_t t_rank;
    int64_t t_dims[SEGRT_MAX_RANK];
    sg_blob *t_data;
    /* GRAPH: owned. A branch has no inputs; the values its nodes read that
     * nothing in it produces (no producer, no data) are the enclosing
     * graph's values of the same names. */
    struct sg_graph *graph;
} sg_attr;

typedef struct sg_node {
    char *name;
    sg_op op;
    int32_t *inputs; /* value indices; -1 for an omitted optional input */
    int32_t n_inputs;
    int32_t *outputs; /* value indices; -1 for an omitted optional output */
    int32_t n_outputs;
    sg_attr *attrs;
    int32_t n_attrs;
    bool dead;
} sg_node;

typedef struct sg_meta_entry {
    char *key;
    char *value;
} sg_meta_entry;

typedef struct sg_graph {
    sg_value *values;
    int32_t n_values, cap_values;
    sg_node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *inputs; /* value indices of graph inputs, in model order */
    int32_t n_inputs, cap_inputs;
    int32_t *outputs; /* value indices of graph outputs, in model order */
    int32_t n_outputs, cap_outputs;
    char **syms;       /* symbolic dim names */
    int64_t *sym_size; /* bound size of each symbol, or SG_DIM_UNKNOWN */
    int32_t n_syms, cap_syms;
    sg_meta_entry *meta;
    int32_t n_meta, cap_meta;
    char *path; /* file name used in messages */
    char *producer_name;
    char *producer_version;
    int64_t ir_version;
    int64_t opset; /* of the default domain */
} sg_graph;

sg_status sg_graph_new(sg_graph **out);
void sg_graph_free(sg_graph *g);

/* Deep copy; constant blobs are shared by reference. */
sg_status sg_graph_clone(const sg_graph *g, sg_graph **out);

/* Adds a value named name (copied) and returns its index in *out. */
sg_status sg_graph_add_value(sg_graph *g, const char *name, int32_t *out);

/* Adds a node with room for n_inputs and n_outputs indices, all -1. The
 * pointer it returns stays valid until the next sg_graph_add_node. */
sg_status sg_graph_add_node(sg_graph *g, sg_op op, const char *name, int32_t n_inputs,
                            int32_t n_outputs, sg_node **out);

sg_status sg_graph_add_input(sg_graph *g, int32_t value);
sg_status sg_graph_add_output(sg_graph *g, int32_t value);
sg_status sg_graph_add_meta(sg_graph *g, const char *key, const char *value);

/* Index of the symbol with this name, adding it if new. Linear in the
 * number of symbols: callers adding many keep their own index. */
sg_status sg_graph_intern_sym(sg_graph *g, const char *name, int32_t *out);
/* Adds a symbol the caller knows is new; its index in *out. */
sg_status sg_graph_add_sym(sg_graph *g, const char *name, int32_t *out);

/* Recomputes every value's producer and checks that nodes are in
 * topological order, reordering them if not. Fails on a cycle or on a value
 * produced twice. */
sg_status sg_graph_toposort(sg_graph *g);

/* Drops dead nodes and values that no live node, input or output uses,
 * renumbering what remains. */
sg_status sg_graph_compact(sg_graph *g);

/* Number of live nodes that read value v, plus one if it is a graph output. */
int32_t *sg_graph_use_counts(const sg_graph *g);

/* A deep copy of a into d (d's memory is overwritten; on failure what
 * was copied is still d's to free with its node). */
sg_status sg_attr_copy(const sg_attr *a, sg_attr *d);

/* Attribute look-ups by name; NULL or the default when absent. */
const sg_attr *sg_attr_find(const sg_node *n, const char *name);
int64_t sg_attr_int(const sg_node *n, const char *name, int64_t def);
float sg_attr_float(const sg_node *n, const char *name, float def);
const char *sg_attr_string(const sg_node *n, const char *name, const char *def);
/* INTS attribute: pointer to its elements and count, or NULL (count 0). */
const int64_t *sg_attr_ints(const sg_node *n, const char *name, int32_t *count);
const float *sg_attr_floats(const sg_node *n, const char *name, int32_t *count);

/* Records "node `name` (Op): <message>" and returns status. */
sg_status sg_node_error(const sg_node *n, sg_status status, const char *fmt, ...) SG_PRINTF(3, 4);

/* Shapes. */
sg_shape sg_shape_unknown(void);
sg_shape sg_shape_of_dims(const int64_t *dims, int32_t rank);
bool sg_shape_is_static(const sg_shape *s);
/* Copies known dims into dims[]; false if rank or any dim is unknown. */
bool sg_shape_dims(const sg_shape *s, int64_t *dims);
/* Product of dims; false when unknown or overflowing. */
bool sg_shape_numel(const sg_shape *s, int64_t *out);
/* "1x3xs53x?" with symbols by name; "?" for unknown rank. */
const char *sg_shape_format(const sg_graph *g, const sg_shape *s, char *buf, size_t cap);

/* Whether every input and node output has a known shape (a plan can be
 * compiled ahead of the data). */
bool sg_graph_is_static(const sg_graph *g);

/* A kernel's view of a value that holds data and a static shape. */
sg_tensor sg_value_tensor(const sg_value *v);

#endif
