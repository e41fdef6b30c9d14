#include "core/copy_team.h"

#include "core/clock.h"
#include "core/mem.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEAM_MAX 8
/* Below this a copy is the caller's alone: waking workers costs more. */
#define TEAM_MIN_BYTES ((size_t)1 << 20)
/* How long an idle worker watches for the next job before it sleeps. An
 * upload is a burst of copies a fraction of a millisecond apart; waking
 * sleeping threads through a condition variable costs about as long as a
 * 1 MiB copy takes, so they stay awake through a burst and sleep once it
 * is over. The caller spins for
 * the workers' parts (they end together). */
#define TEAM_SPIN_S 200e-6

typedef struct team_worker {
    struct sg_copy_team *t;
    int index; /* this worker's part: 1..n_workers (the caller takes 0) */
} team_worker;

struct sg_copy_team {
    pthread_mutex_t mu; /* with `work`: the sleepers' wake-up only */
    pthread_cond_t work;
    pthread_t th[TEAM_MAX];
    team_worker w[TEAM_MAX];
    int n_workers; /* threads besides the caller */
    /* The current job: written by the caller before it bumps generation
     * (release), read by a worker after it sees the bump (acquire). Every
     * worker takes every generation (the caller waits for all before
     * posting the next). */
    char *dst;
    const char *src;
    size_t bytes;
    atomic_uint_fast64_t generation;
    atomic_int pending;  /* workers whose part of the job is not done */
    atomic_int sleepers; /* workers asleep (or about to be) on `work` */
    atomic_bool stop;
};

/* A spinning thread's hint to the core (its hyperthread sibling runs). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* One turn of a wait loop: a pause at first, then the core is offered to
 * any other runnable thread (on a busy machine the thread being waited
 * for may be one of them). */
static inline void spin_step(int i)
{
    if (i < 256)
        cpu_relax();
    else
        sched_yield();
}

/* Part i of `parts` of a copy, split at 64-byte boundaries. */
static void copy_part(char *dst, const char *src, size_t bytes, int i, int parts)
{
    size_t per = ((bytes + (size_t)parts - 1) / (size_t)parts + 63) & ~(size_t)63;
    size_t at = per * (size_t)i;
    if (at >= bytes)
        return;
    memcpy(dst + at, src + at, bytes - at < per ? bytes - at : per);
}

/* Whether a job after `seen` (or the stop) has been posted. */
static bool posted(sg_copy_team *t, uint_fast64_t seen)
{
    return atomic_load(&t->generation) != seen || atomic_load(&t->stop);
}

/* Waits for a job after `seen`: watching for TEAM_SPIN_S, then asleep.
 * The sleeper count and the generation are both sequentially consistent:
 * either the caller sees this worker's count and wakes it under the
 * mutex, or this worker's check under the mutex sees the new job. */
static void await_job(sg_copy_team *t, uint_fast64_t seen)
{
    double t0 = sg_now_seconds();
    for (int i = 1; !posted(t, seen); i++) {
        spin_step(i);
        if (i % 64 == 0 && sg_now_seconds() - t0 > TEAM_SPIN_S) {
            pthread_mutex_lock(&t->mu);
            atomic_fetch_add(&t->sleepers, 1);
            while (!posted(t, seen))
                pthread_cond_wait(&t->work, &t->mu);
            atomic_fetch_sub(&t->sleepers, 1);
            pthread_mutex_unlock(&t->mu);
            return;
        }
    }
}

static void *worker(void *p)
{
    team_worker *w = p;
    sg_copy_team *t = w->t;
    uint_fast64_t seen = 0;
    for (;;) {
        await_job(t, seen);
        if (atomic_load(&t->stop))
            break;
        seen = atomic_load(&t->generation);
        copy_part(t->dst, t->src, t->bytes, w->index, t->n_workers + 1);
        atomic_fetch_sub(&t->pending, 1);
    }
    return NULL;
}

/* Posts a job or the stop: wakes the sleepers (under the mutex, so that
 * none is between its check and its wait). */
static void wake_sleepers(sg_copy_team *t)
{
    if (atomic_load(&t->sleepers) > 0) {
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->work);
        pthread_mutex_unlock(&t->mu);
    }
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
    if (pthread_cond_init(&t->work, NULL) != 0) {
        pthread_mutex_destroy(&t->mu);
        free(t);
        return sg_error(SEGRT_ERROR_INTERNAL, "copy team: no condition variable");
    }
    atomic_init(&t->generation, 0);
    atomic_init(&t->pending, 0);
    atomic_init(&t->sleepers, 0);
    atomic_init(&t->stop, false);
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
    atomic_store(&t->stop, true);
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->work);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_workers; i++)
        pthread_join(t->th[i], NULL);
    pthread_cond_destroy(&t->work);
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
    t->dst = dst;
    t->src = src;
    t->bytes = bytes;
    atomic_store(&t->pending, t->n_workers);
    atomic_fetch_add(&t->generation, 1);
    wake_sleepers(t);
    copy_part(dst, src, bytes, 0, t->n_workers + 1);
    for (int i = 1; atomic_load(&t->pending) > 0; i++)
        spin_step(i);
}
