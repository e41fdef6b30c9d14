/* The one backend interface (issue 37). A backend is a const struct of
 * function pointers filled with designated initializers; optional members
 * are NULL. The engine holds a backend and its plan and never branches on
 * which backend it has; the pipeline reaches a backend's window kernels
 * through `window` (backend_window.h).
 *
 * This header starts with the handles every backend member passes around;
 * the struct itself follows below. */
#ifndef SG_BACKEND_H
#define SG_BACKEND_H

#include "graph/ir.h"

/* A backend's stream and event, opaque to the engine and the pipeline. The
 * CUDA backend's are cudaStream_t and cudaEvent_t, cast. Callers order their
 * own work around a backend's runs with events, never by draining. */
typedef struct sg_backend_stream sg_backend_stream;
typedef struct sg_backend_event sg_backend_event;

#endif
