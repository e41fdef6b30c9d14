/* gzip_par.h's stream. The caller fills block slots in order and queues
 * each full one; workers take queued slots in order and deflate them; the
 * caller writes the finished slots out in order (when it needs a slot back
 * and whenever it queues one), so that only it touches the file and the
 * CRC, and a failure reaches it as the status of the next call. Workers
 * report failures through their slot, never sg_error: the message is
 * per-thread and would not reach the caller. */
#include "core/gzip_par.h"

#include "core/mem.h"

#include <errno.h>
#include <string.h>

#ifndef SEGRT_HAVE_ZLIB

int sg_gzip_par_workers(uint64_t bytes, size_t block)
{
    (void)bytes, (void)block;
    return 0;
}

sg_status sg_gzip_par_new(FILE *f, const char *name, int level, int workers, size_t block, sg_gzip_par **out)
{
    (void)f, (void)level, (void)workers, (void)block;
    *out = NULL;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: gzip, and segrt was built without zlib", name);
}

sg_status sg_gzip_par_write(sg_gzip_par *g, const void *p, size_t n)
{
    (void)g, (void)p, (void)n;
    return sg_error(SEGRT_ERROR_INTERNAL, "gzip stream without zlib");
}

sg_status sg_gzip_par_finish(sg_gzip_par *g)
{
    (void)g;
    return sg_error(SEGRT_ERROR_INTERNAL, "gzip stream without zlib");
}

void sg_gzip_par_free(sg_gzip_par *g)
{
    (void)g;
}

#else

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#define DICT 32768 /* deflate's window: how far back a match reaches */
#define MAX_WORKERS 16

enum { SLOT_FREE, SLOT_QUEUED, SLOT_DONE };

typedef struct slot {
    uint8_t *in;      /* dict bytes (the previous block's tail), then the block's */
    size_t dict, len; /* bytes of each */
    bool last;
    uint8_t *out;
    size_t out_cap, out_len;
    uLong crc;        /* of the block's bytes */
    int state;        /* under the mutex once queued */
    const char *fail; /* what failed, set by whoever deflated the slot */
    sg_status fail_status;
} slot;

struct sg_gzip_par {
    FILE *f;
    char *name;
    int level;
    size_t block;
    int n_workers; /* started */
    pthread_t th[MAX_WORKERS];
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    bool stop;
    slot *slots;
    int n_slots;
    /* Blocks by sequence number, slot seq % n_slots: [written, filled) are
     * queued or done, `filled` is the one being filled (cur), [taken,
     * filled) wait for a worker. */
    uint64_t filled, taken, written;
    slot *cur;
    uint8_t dict[DICT];
    size_t dict_len;
    uLong crc;
    uint64_t total;
    z_stream z; /* the caller's, with no workers */
    bool z_live;
    sg_status failed;
};

int sg_gzip_par_workers(uint64_t bytes, size_t block)
{
    if (!block)
        block = SG_GZIP_PAR_BLOCK;
    uint64_t blocks = bytes / block + (bytes % block != 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (blocks < 4 || cores <= 1)
        return 0;
    long w = cores < MAX_WORKERS ? cores : MAX_WORKERS;
    return (int)((uint64_t)w < blocks ? (uint64_t)w : blocks);
}

/* A raw deflate stream at the level, without zlib's header or trailer
 * (windowBits -15): the blocks are pieces of one stream. */
static bool start_deflate(z_stream *z, int level)
{
    memset(z, 0, sizeof *z);
    return deflateInit2(z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK;
}

static void slot_fail(slot *s, sg_status status, const char *what)
{
    s->fail_status = status;
    s->fail = what;
}

/* Deflates one slot with z (started by start_deflate). A block other
 * than the last ends in a sync flush: byte-aligned and not final, so the
 * next block's bytes continue the same deflate stream. */
static void deflate_slot(z_stream *z, slot *s)
{
    s->crc = crc32(0L, s->in + s->dict, (uInt)s->len);
    if (deflateReset(z) != Z_OK || (s->dict && deflateSetDictionary(z, s->in, (uInt)s->dict) != Z_OK)) {
        slot_fail(s, SEGRT_ERROR_INTERNAL, "deflate failed");
        return;
    }
    size_t need = deflateBound(z, (uLong)s->len) + 64;
    if (s->out_cap < need) {
        free(s->out);
        s->out_cap = 0;
        if (!(s->out = malloc(need))) {
            slot_fail(s, SEGRT_ERROR_OUT_OF_MEMORY, "out of memory");
            return;
        }
        s->out_cap = need;
    }
    z->next_in = s->in + s->dict;
    z->avail_in = (uInt)s->len;
    s->out_len = 0;
    for (;;) {
        z->next_out = s->out + s->out_len;
        z->avail_out = (uInt)(s->out_cap - s->out_len);
        int r = deflate(z, s->last ? Z_FINISH : Z_SYNC_FLUSH);
        s->out_len = s->out_cap - z->avail_out;
        if (r == Z_STREAM_ERROR) {
            slot_fail(s, SEGRT_ERROR_INTERNAL, "deflate failed");
            return;
        }
        if (s->last ? r == Z_STREAM_END : z->avail_in == 0 && z->avail_out > 0)
            return;
        /* A sync flush may pass deflateBound, which is for Z_FINISH. */
        uint8_t *more = realloc(s->out, 2 * s->out_cap);
        if (!more) {
            slot_fail(s, SEGRT_ERROR_OUT_OF_MEMORY, "out of memory");
            return;
        }
        s->out = more;
        s->out_cap *= 2;
    }
}

static void *worker(void *arg)
{
    sg_gzip_par *g = arg;
    z_stream z;
    bool live = start_deflate(&z, g->level);
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->taken == g->filled)
            pthread_cond_wait(&g->work, &g->mu);
        if (g->stop)
            break;
        slot *s = &g->slots[g->taken++ % (uint64_t)g->n_slots];
        pthread_mutex_unlock(&g->mu);
        if (live)
            deflate_slot(&z, s);
        else
            slot_fail(s, SEGRT_ERROR_OUT_OF_MEMORY, "cannot start the gzip encoder");
        pthread_mutex_lock(&g->mu);
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&g->done);
    }
    pthread_mutex_unlock(&g->mu);
    if (live)
        deflateEnd(&z);
    return NULL;
}

/* Records the stream's first failure; every later call returns it. */
static sg_status fail(sg_gzip_par *g, sg_status st)
{
    if (!g->failed)
        g->failed = st;
    return st;
}

static sg_status put_file(sg_gzip_par *g, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, g->f) != n)
        return fail(g, sg_error(SEGRT_ERROR_IO, "%s: write failed: %s", g->name, strerror(errno)));
    return SEGRT_OK;
}

/* Writes out the oldest blocks that are done, in order; with `wait`, waits
 * for the oldest first, so that at least one slot comes free. */
static sg_status drain(sg_gzip_par *g, bool wait)
{
    while (g->written < g->filled) {
        slot *s = &g->slots[g->written % (uint64_t)g->n_slots];
        if (g->n_workers) {
            pthread_mutex_lock(&g->mu);
            while (wait && s->state != SLOT_DONE)
                pthread_cond_wait(&g->done, &g->mu);
            bool done = s->state == SLOT_DONE;
            pthread_mutex_unlock(&g->mu);
            if (!done)
                break;
        }
        if (s->fail)
            return fail(g, sg_error(s->fail_status, "%s: %s", g->name, s->fail));
        SG_TRY(put_file(g, s->out, s->out_len));
        g->crc = crc32_combine(g->crc, s->crc, (z_off_t)s->len);
        s->state = SLOT_FREE;
        g->written++;
        wait = false;
    }
    return SEGRT_OK;
}

/* Takes the slot for block `filled`, primed with the previous block's
 * tail. */
static sg_status acquire(sg_gzip_par *g)
{
    if (g->filled - g->written >= (uint64_t)g->n_slots)
        SG_TRY(drain(g, true));
    slot *s = &g->slots[g->filled % (uint64_t)g->n_slots];
    if (!s->in && !(s->in = malloc(DICT + g->block)))
        return fail(g, sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory", g->name));
    memcpy(s->in, g->dict, g->dict_len);
    s->dict = g->dict_len;
    s->len = 0;
    s->last = false;
    s->fail = NULL;
    g->cur = s;
    return SEGRT_OK;
}

/* Queues the current block (deflates it here with no workers), keeps its
 * tail for the next and writes out what is done. */
static sg_status submit(sg_gzip_par *g, bool last)
{
    slot *s = g->cur;
    s->last = last;
    /* Every block but the last is full and a block is at least 64 KiB, so
     * its tail is the last 32 KiB of all the data so far. */
    if (!last) {
        memcpy(g->dict, s->in + s->dict + s->len - DICT, DICT);
        g->dict_len = DICT;
    }
    g->total += s->len;
    g->cur = NULL;
    if (g->n_workers) {
        pthread_mutex_lock(&g->mu);
        s->state = SLOT_QUEUED;
        g->filled++;
        pthread_cond_signal(&g->work);
        pthread_mutex_unlock(&g->mu);
    } else {
        deflate_slot(&g->z, s);
        s->state = SLOT_DONE;
        g->filled++;
    }
    return drain(g, false);
}

sg_status sg_gzip_par_new(FILE *f, const char *name, int level, int workers, size_t block, sg_gzip_par **out)
{
    *out = NULL;
    if (!block)
        block = SG_GZIP_PAR_BLOCK;
    SG_ASSERT(block >= 2 * DICT && block <= ((size_t)1 << 30));
    workers = workers < 0 ? 0 : workers > MAX_WORKERS ? MAX_WORKERS : workers;
    sg_gzip_par *g = sg_calloc(1, sizeof *g);
    if (!g)
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    g->f = f;
    g->level = level;
    g->block = block;
    g->crc = crc32(0L, Z_NULL, 0);
    g->n_slots = workers ? 2 * workers : 1;
    if (!(g->name = sg_strdup(name)) || !(g->slots = sg_calloc((size_t)g->n_slots, sizeof *g->slots))) {
        free(g->name);
        free(g);
        return sg_error_prefix(SEGRT_ERROR_OUT_OF_MEMORY, "%s: ", name);
    }
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g->slots);
        free(g->name);
        free(g);
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: cannot start the gzip encoder (no mutex)", name);
    }
    if (pthread_cond_init(&g->work, NULL) != 0 || pthread_cond_init(&g->done, NULL) != 0) {
        /* Destroying a condition variable that failed to initialize is
         * undefined: leak it on this path instead (never taken on Linux,
         * where pthread_cond_init does not fail). */
        pthread_mutex_destroy(&g->mu);
        free(g->slots);
        free(g->name);
        free(g);
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: cannot start the gzip encoder (no condition variable)", name);
    }
    sg_status st = SEGRT_OK;
    if (!workers) {
        if (!(g->z_live = start_deflate(&g->z, level)))
            st = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: cannot start the gzip encoder", name);
    }
    for (int i = 0; st == SEGRT_OK && i < workers; i++) {
        int e = pthread_create(&g->th[i], NULL, worker, g);
        if (e != 0)
            st = sg_error(SEGRT_ERROR_INTERNAL, "%s: cannot start a gzip thread: %s", name, strerror(e));
        else
            g->n_workers++;
    }
    /* The gzip header, as zlib writes it at level 1: no name, no time,
     * XFL 4 (fastest), OS 3 (Unix). */
    static const uint8_t head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3};
    if (st == SEGRT_OK)
        st = put_file(g, head, sizeof head);
    if (st != SEGRT_OK) {
        sg_gzip_par_free(g);
        return st;
    }
    *out = g;
    return SEGRT_OK;
}

sg_status sg_gzip_par_write(sg_gzip_par *g, const void *p, size_t n)
{
    if (g->failed)
        return sg_error(g->failed, "%s: the gzip stream failed before", g->name);
    const uint8_t *b = p;
    while (n) {
        if (g->cur && g->cur->len == g->block)
            SG_TRY(submit(g, false));
        if (!g->cur)
            SG_TRY(acquire(g));
        slot *s = g->cur;
        size_t k = g->block - s->len < n ? g->block - s->len : n;
        memcpy(s->in + s->dict + s->len, b, k);
        s->len += k;
        b += k;
        n -= k;
    }
    return SEGRT_OK;
}

sg_status sg_gzip_par_finish(sg_gzip_par *g)
{
    if (g->failed)
        return sg_error(g->failed, "%s: the gzip stream failed before", g->name);
    if (!g->cur)
        SG_TRY(acquire(g)); /* no data: the stream is one empty final block */
    SG_TRY(submit(g, true));
    while (g->written < g->filled)
        SG_TRY(drain(g, true));
    uint8_t tail[8];
    for (int i = 0; i < 4; i++) {
        tail[i] = (uint8_t)(g->crc >> (8 * i));
        tail[4 + i] = (uint8_t)(g->total >> (8 * i)); /* ISIZE: the length mod 2^32 */
    }
    return put_file(g, tail, sizeof tail);
}

void sg_gzip_par_free(sg_gzip_par *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->work);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_workers; i++)
        pthread_join(g->th[i], NULL);
    for (int i = 0; i < g->n_slots; i++) {
        free(g->slots[i].in);
        free(g->slots[i].out);
    }
    if (g->z_live)
        deflateEnd(&g->z);
    pthread_cond_destroy(&g->done);
    pthread_cond_destroy(&g->work);
    pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g->name);
    free(g);
}

#endif
