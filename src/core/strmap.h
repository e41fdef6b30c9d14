/* A string -> int32 hash map (open addressing), for name look-ups while
 * importing graphs with thousands of tensors. Keys are borrowed, not
 * copied: they must outlive the map. */
#ifndef SG_CORE_STRMAP_H
#define SG_CORE_STRMAP_H

#include "core/status.h"

#include <stdint.h>

typedef struct sg_strmap {
    const char **keys;
    int32_t *vals;
    uint32_t cap; /* a power of two */
    uint32_t count;
} sg_strmap;

void sg_strmap_init(sg_strmap *m);
void sg_strmap_free(sg_strmap *m);
/* Sets key to val, replacing an earlier value. */
sg_status sg_strmap_put(sg_strmap *m, const char *key, int32_t val);
/* The value of key, or -1. */
int32_t sg_strmap_get(const sg_strmap *m, const char *key);

#endif
