/* memcpy by a few threads: large host copies between pinned staging and
 * user memory. One core copies far slower into fresh pages than into
 * memory it has touched (the first-touch faults are taken by the copying
 * thread), so a large result is fault-bound on one thread; several share
 * the faults.
 * An idle worker watches for the next copy for 0.2 ms (an upload's copies
 * come in bursts), then sleeps on a condition variable, so a team costs
 * next to nothing while a job waits for its GPU. */
#ifndef SG_CORE_COPY_TEAM_H
#define SG_CORE_COPY_TEAM_H

#include "core/status.h"

#include <stddef.h>

typedef struct sg_copy_team sg_copy_team;

/* A team of `threads` copying threads in all (the caller's counts as
 * one; 0 picks from the machine's cores, at most 8). *out is NULL on
 * failure, with OUT_OF_MEMORY or INTERNAL (no thread could start). */
sg_status sg_copy_team_new(int threads, sg_copy_team **out);
/* Stops the workers and frees the team; NULL does nothing. */
void sg_copy_team_free(sg_copy_team *t);
/* The number of threads a copy uses (1 for a NULL team). */
int sg_copy_team_threads(const sg_copy_team *t);

/* memcpy(dst, src, bytes), split among the team when large enough to
 * pay; returns when every byte is copied. A NULL team copies alone. One
 * caller at a time per team. */
void sg_copy_team_memcpy(sg_copy_team *t, void *dst, const void *src, size_t bytes);

#endif
