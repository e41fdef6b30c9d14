/* Byte buffers (see bytes.h). */
#include "core/bytes.h"
#include "core/mem.h"

#include <string.h>

void sg_wbuf_put(sg_wbuf *w, const void *data, size_t n)
{
    if (w->failed)
        return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->n + n)
            cap *= 2;
        uint8_t *nb = sg_realloc(w->b, cap);
        if (!nb) {
            w->failed = true;
            return;
        }
        w->b = nb;
        w->cap = cap;
    }
    if (n)
        memcpy(w->b + w->n, data, n);
    w->n += n;
}

void sg_wbuf_u32(sg_wbuf *w, uint32_t v)
{
    sg_wbuf_put(w, &v, 4);
}

void sg_wbuf_u64(sg_wbuf *w, uint64_t v)
{
    sg_wbuf_put(w, &v, 8);
}

void sg_wbuf_blob32(sg_wbuf *w, const void *d, size_t n)
{
    sg_wbuf_u32(w, (uint32_t)n);
    sg_wbuf_put(w, d, n);
}

void sg_wbuf_blob64(sg_wbuf *w, const void *d, size_t n)
{
    sg_wbuf_u64(w, (uint64_t)n);
    sg_wbuf_put(w, d, n);
}

const void *sg_rbuf_take(sg_rbuf *r, uint64_t n)
{
    if (r->bad || n > r->n - r->at) {
        r->bad = true;
        return NULL;
    }
    const void *p = r->b + r->at;
    r->at += (size_t)n;
    return p;
}

uint32_t sg_rbuf_u32(sg_rbuf *r)
{
    uint32_t v = 0;
    const void *p = sg_rbuf_take(r, 4);
    if (p)
        memcpy(&v, p, 4);
    return v;
}

uint64_t sg_rbuf_u64(sg_rbuf *r)
{
    uint64_t v = 0;
    const void *p = sg_rbuf_take(r, 8);
    if (p)
        memcpy(&v, p, 8);
    return v;
}

char *sg_rbuf_str(sg_rbuf *r)
{
    uint32_t n = sg_rbuf_u32(r);
    const char *p = sg_rbuf_take(r, n);
    if (!p || memchr(p, '\0', n)) {
        r->bad = true;
        return NULL;
    }
    char *s = sg_strndup(p, n);
    if (!s)
        r->bad = true;
    return s;
}
