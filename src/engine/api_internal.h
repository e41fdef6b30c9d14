/* The structs behind the public handles. */
#ifndef SG_ENGINE_API_INTERNAL_H
#define SG_ENGINE_API_INTERNAL_H

#include "graph/ir.h"

struct segrt_model {
    sg_graph *g;
};

/* An input's shape: fixed (min = opt = max) or a profile range. */
typedef struct sg_shape_binding {
    char *name;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK]; /* opt */
    int64_t min[SEGRT_MAX_RANK], max[SEGRT_MAX_RANK];
    bool ranged;                  /* some dim has min < max */
} sg_shape_binding;

struct segrt_build_options {
    sg_shape_binding *shapes;
    int32_t n_shapes, cap_shapes;
    int32_t threads;
    segrt_device_kind device;
    int32_t device_index;
    segrt_precision precision;
    char *fp32_ops;
    bool allow_cpu_fallback;
    size_t workspace;
    int32_t autotune; /* < 0: SG_DEFAULT_AUTOTUNE */
    uint32_t disabled_kernels; /* SG_KERNEL_BIT of each switch of backend/kernel_switches.h turned off */
};

/* Applies the shape bindings of opts (may be NULL) to g, ranged ones at
 * their opt dims. */
sg_status sg_options_bind(const segrt_build_options *opts, sg_graph *g);
/* Applies only the fixed bindings: ranged inputs stay symbolic. */
sg_status sg_options_bind_fixed(const segrt_build_options *opts, sg_graph *g);
/* Inputs and outputs a run takes at most (without a heap allocation). */
#define SG_MAX_IO_ENGINE 64
/* The default workspace limit when none is set. */
#define SG_DEFAULT_WORKSPACE ((size_t)1 << 30)
/* cuDNN configurations timed per convolution when none is set. */
#define SG_DEFAULT_AUTOTUNE 8
#define SG_MAX_AUTOTUNE 16

/* The disabled-kernels mask as the names it holds, comma-separated in the
 * switches' order ("" for none), into buf of cap bytes (truncated to fit,
 * always terminated). */
void sg_disabled_kernels_text(uint32_t mask, char *buf, size_t cap);

/* Fills a public descriptor from a value; strings point into g. */
void sg_value_desc(const sg_graph *g, const sg_value *v, bool use_declared, segrt_tensor_desc *out);

#endif
