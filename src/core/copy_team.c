#include "core/copy_team.h"

#include "core/mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEAM_MAX 8
/* Below this a copy is the caller's alone: waking workers costs more. */
#define TEAM_MIN_BYTES ((size_t)1 << 20)

typedef struct team_worker {
    struct sg_copy_team *t;
    int index; /* this worker's part: 1..n_workers (the caller takes 0) */
} team_worker;

struct sg_copy_team {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t th[TEAM_MAX];
    team_worker w[TEAM_MAX];
    int n_workers; /* threads besides the caller */
    /* The current job, under mu. Every worker takes every generation
     * (the caller waits for all before posting the next). */
    uint64_t generation;
    char *dst;
    const char *src;
    size_t bytes;
    int pending;
    bool stop;
};

/* Part i of `parts` of a copy, split at 64-byte boundaries. */
static void copy_part(char *dst, const char *src, size_t bytes, int i, int parts)
{
    size_t per = ((bytes + (size_t)parts - 1) / (size_t)parts + 63) & ~(size_t)63;
    size_t at = per * (size_t)i;
    if (at >= bytes)
        return;
    memcpy(dst + at, src + at, bytes - at < per ? bytes - at : per);
}

static void *worker(void *p)
{
    team_worker *w = p;
    sg_copy_team *t = w->t;
    uint64_t seen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && t->generation == seen)
            pthread_cond_wait(&t->work, &t->mu);
        if (t->stop)
            break;
        seen = t->generation;
        char *dst = t->dst;
        const char *src = t->src;
        size_t bytes = t->bytes;
        pthread_mutex_unlock(&t->mu);
        copy_part(dst, src, bytes, w->index, t->n_workers + 1);
        pthread_mutex_lock(&t->mu);
        if (--t->pending == 0)
            pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

sg_status sg_copy_team_new(int threads, sg_copy_team **out)
{
    *out = NULL;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 1 ? (int)(cores / 2) : 1;
    }
    threads = threads > TEAM_MAX ? TEAM_MAX : threads;
    sg_copy_team *t = sg_calloc(1, sizeof *t);
    if (!t)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return sg_error(SEGRT_ERROR_INTERNAL, "copy team: no mutex");
    }
    bool work = pthread_cond_init(&t->work, NULL) == 0;
    if (!work || pthread_cond_init(&t->done, NULL) != 0) {
        if (work)
            pthread_cond_destroy(&t->work);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return sg_error(SEGRT_ERROR_INTERNAL, "copy team: no condition variable");
    }
    for (int i = 0; i < threads - 1; i++) {
        t->w[i] = (team_worker){t, i + 1};
        if (pthread_create(&t->th[i], NULL, worker, &t->w[i]) != 0)
            break; /* a smaller team still copies */
        t->n_workers++;
    }
    *out = t;
    return SEGRT_OK;
}

void sg_copy_team_free(sg_copy_team *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->work);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_workers; i++)
        pthread_join(t->th[i], NULL);
    pthread_cond_destroy(&t->work);
    pthread_cond_destroy(&t->done);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int sg_copy_team_threads(const sg_copy_team *t)
{
    return t ? t->n_workers + 1 : 1;
}

void sg_copy_team_memcpy(sg_copy_team *t, void *dst, const void *src, size_t bytes)
{
    if (!t || t->n_workers == 0 || bytes < TEAM_MIN_BYTES) {
        memcpy(dst, src, bytes);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->dst = dst;
    t->src = src;
    t->bytes = bytes;
    t->pending = t->n_workers;
    t->generation++;
    pthread_cond_broadcast(&t->work);
    pthread_mutex_unlock(&t->mu);
    copy_part(dst, src, bytes, 0, t->n_workers + 1);
    pthread_mutex_lock(&t->mu);
    while (t->pending > 0)
        pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}
