/* Byte buffers for binary files: a growing writer and a bounded reader of
 * little-endian fields. The reader never reads past its end: a field cut
 * short sets `bad` and reads as zero/NULL, so a parser checks once. */
#ifndef SG_CORE_BYTES_H
#define SG_CORE_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_wbuf {
    uint8_t *b;
    size_t n, cap;
    bool failed; /* an allocation failed: the contents are incomplete */
} sg_wbuf;

void sg_wbuf_put(sg_wbuf *w, const void *data, size_t n);
void sg_wbuf_u32(sg_wbuf *w, uint32_t v);
void sg_wbuf_u64(sg_wbuf *w, uint64_t v);
/* A u32 (blob32) or u64 (blob64) length, then the bytes. */
void sg_wbuf_blob32(sg_wbuf *w, const void *d, size_t n);
void sg_wbuf_blob64(sg_wbuf *w, const void *d, size_t n);

typedef struct sg_rbuf {
    const uint8_t *b;
    size_t n, at;
    bool bad; /* something was cut short or malformed */
} sg_rbuf;

/* The next n bytes, or NULL (and bad) if fewer remain. */
const void *sg_rbuf_take(sg_rbuf *r, uint64_t n);
uint32_t sg_rbuf_u32(sg_rbuf *r);
uint64_t sg_rbuf_u64(sg_rbuf *r);
/* A u32-length-prefixed string without NULs, copied and NUL-terminated
 * (the caller frees), or NULL (and bad). */
char *sg_rbuf_str(sg_rbuf *r);

#endif
