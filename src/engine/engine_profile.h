/* Per-step profiling of a context's runs, for `segrt bench --profile`.
 * Internal for now: the public API grows a profiling interface once the
 * CUDA engine shares it. */
#ifndef SG_ENGINE_PROFILE_H
#define SG_ENGINE_PROFILE_H

#include "core/status.h"

#include <stdbool.h>
#include <stdio.h>

/* Starts (on) or stops profiling the context's runs; starting clears what
 * was gathered. */
sg_status sg_context_profile(segrt_context *ctx, bool on);
/* Prints the steps of the plan that served the last run, slowest first. */
void sg_context_profile_print(const segrt_context *ctx, FILE *f);

#endif
