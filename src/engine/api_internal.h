/* The structs behind the public handles. */
#ifndef SG_ENGINE_API_INTERNAL_H
#define SG_ENGINE_API_INTERNAL_H

#include "graph/ir.h"

struct segrt_model {
    sg_graph *g;
};

typedef struct sg_shape_binding {
    char *name;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
} sg_shape_binding;

struct segrt_build_options {
    sg_shape_binding *shapes;
    int32_t n_shapes, cap_shapes;
    int32_t threads;
    segrt_device_kind device;
    int32_t device_index;
};

/* Applies the shape bindings of opts (may be NULL) to g. */
sg_status sg_options_bind(const segrt_build_options *opts, sg_graph *g);

/* Fills a public descriptor from a value; strings point into g. */
void sg_value_desc(const sg_graph *g, const sg_value *v, bool use_declared, segrt_tensor_desc *out);

#endif
