/* The one clock segrt times its own work with. */
#ifndef SG_CORE_CLOCK_H
#define SG_CORE_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): differences only,
 * never a date; unaffected by the wall clock being set. */
double sg_now_seconds(void);

#ifdef __cplusplus
}
#endif

#endif
