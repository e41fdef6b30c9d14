/* The structs behind the public handles. */
#ifndef SG_ENGINE_API_INTERNAL_H
#define SG_ENGINE_API_INTERNAL_H

#include "backend/backend.h"
#include "graph/ir.h"

struct segrt_model {
    sg_graph *g;
};

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
    int32_t target_cc;         /* compute capability planned for, as 10 * major + minor; 0: the GPU's own */
};

/* Applies the shape bindings of opts (may be NULL) to g, ranged ones at
 * their opt dims. */
sg_status sg_options_bind(const segrt_build_options *opts, sg_graph *g);
/* Applies only the fixed bindings: ranged inputs stay symbolic. */
sg_status sg_options_bind_fixed(const segrt_build_options *opts, sg_graph *g);
/* A copy of opts (NULL: the defaults), for an engine to keep. */
sg_status sg_options_copy(const segrt_build_options *opts, segrt_build_options **out);
/* The view of opts (NULL: the defaults) a backend takes, borrowing opts'
 * strings and shapes. */
void sg_options_backend(const segrt_build_options *opts, sg_backend_options *out);
/* Inputs and outputs a run takes at most (without a heap allocation). */
#define SG_MAX_IO_ENGINE SG_MAX_IO_BACKEND
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
