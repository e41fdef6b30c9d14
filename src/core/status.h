/* Status codes and the per-thread last-error message.
 *
 * Every failing internal function records its message with sg_error() and
 * returns the status; callers higher up add context with sg_error_prefix()
 * ("model.onnx: " in front of "node `conv_3` (Conv): ..."), so the message
 * the user sees names the file, the node and the tensor. */
#ifndef SG_CORE_STATUS_H
#define SG_CORE_STATUS_H

#include "segrt.h"

#include <stdio.h>
#include <stdlib.h>

typedef segrt_status sg_status;

#if defined(__GNUC__)
#define SG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SG_PRINTF(f, a)
#endif

/* Records a message for the calling thread and returns status. */
sg_status sg_error(sg_status status, const char *fmt, ...) SG_PRINTF(2, 3);

/* Puts formatted text in front of the current message and returns status. */
sg_status sg_error_prefix(sg_status status, const char *fmt, ...) SG_PRINTF(2, 3);

/* Clears the calling thread's message. */
void sg_error_clear(void);

const char *sg_last_error(void);

/* Propagates a failing status. */
#define SG_TRY(expr)                  \
    do {                              \
        sg_status sg_try_s_ = (expr); \
        if (sg_try_s_ != SEGRT_OK)    \
            return sg_try_s_;         \
    } while (0)

/* An always-on check of an internal invariant. A failure is a bug in segrt,
 * never a property of the input, so it aborts with the place it broke. */
#define SG_ASSERT(cond)                                                               \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "segrt: internal error: %s:%d: %s\n", __FILE__, __LINE__, \
                    #cond);                                                           \
            abort();                                                                  \
        }                                                                             \
    } while (0)

#endif
