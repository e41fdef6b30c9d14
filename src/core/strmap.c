#include "core/strmap.h"

#include "core/mem.h"

#include <string.h>

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

void sg_strmap_init(sg_strmap *m) { memset(m, 0, sizeof *m); }

void sg_strmap_free(sg_strmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static void insert(const char **keys, int32_t *vals, uint32_t cap, const char *key, int32_t val,
                   uint32_t *count)
{
    uint32_t i = hash_str(key) & (cap - 1);
    while (keys[i] && strcmp(keys[i], key) != 0)
        i = (i + 1) & (cap - 1);
    if (!keys[i])
        (*count)++;
    keys[i] = key;
    vals[i] = val;
}

sg_status sg_strmap_put(sg_strmap *m, const char *key, int32_t val)
{
    if ((m->count + 1) * 2 > m->cap) {
        uint32_t ncap = m->cap ? m->cap * 2 : 64;
        if (ncap > (1u << 30))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "too many names");
        const char **keys = sg_calloc(ncap, sizeof *keys);
        int32_t *vals = sg_calloc(ncap, sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return SEGRT_ERROR_OUT_OF_MEMORY;
        }
        uint32_t count = 0;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->keys[i])
                insert(keys, vals, ncap, m->keys[i], m->vals[i], &count);
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = ncap;
        m->count = count;
    }
    insert(m->keys, m->vals, m->cap, key, val, &m->count);
    return SEGRT_OK;
}

int32_t sg_strmap_get(const sg_strmap *m, const char *key)
{
    if (!m->cap)
        return -1;
    uint32_t i = hash_str(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0)
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}
