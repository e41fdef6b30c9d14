/* Orders for reports (sort.h). */
#include "core/sort.h"

#include <stdlib.h>

typedef struct keyed {
    double key;
    int32_t index;
} keyed;

static int larger_first(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int32_t *sg_order_desc(const double *key, int32_t n)
{
    keyed *by = malloc(sizeof *by * (size_t)(n + 1));
    int32_t *order = malloc(sizeof *order * (size_t)(n + 1));
    if (!by || !order) {
        free(by);
        free(order);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        by[i] = (keyed){key[i], i};
    qsort(by, (size_t)n, sizeof *by, larger_first);
    for (int32_t i = 0; i < n; i++)
        order[i] = by[i].index;
    free(by);
    return order;
}
