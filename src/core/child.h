/* Waiting for a child process that may never finish on its own. */
#ifndef SG_CORE_CHILD_H
#define SG_CORE_CHILD_H

#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Waits for child pid to end and stores its wait status in *status.
 *
 * A child forked from a multithreaded process holds a copy of every lock
 * as it was at the fork; one another thread held then (an allocator's:
 * sanitizer runtimes have their own) stays held in the child, and a child
 * that takes it sleeps forever, using no CPU, so a CPU time limit never
 * ends it. A child asleep (state S) whose CPU time has not moved for
 * stuck_seconds of wall time (as /proc/PID/stat says) is taken for such
 * a one: it is killed, reaped, and *stuck set, for the caller to start
 * its work again. Where /proc cannot be read the wait is a plain one.
 * Returns 0, or -1 with errno when waiting fails. */
int sg_child_wait(pid_t pid, double stuck_seconds, int *status, bool *stuck);

#ifdef __cplusplus
}
#endif

#endif
