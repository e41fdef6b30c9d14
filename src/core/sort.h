/* Orders for reports: indices sorted by a key. */
#ifndef SG_CORE_SORT_H
#define SG_CORE_SORT_H

#include <stdint.h>

/* The indices 0..n-1 by key, largest first, equal keys in index order
 * (a profile's slowest steps first, ties in plan order). malloc'd (free
 * it); NULL when out of memory. */
int32_t *sg_order_desc(const double *key, int32_t n);

#endif
