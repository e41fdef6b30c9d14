/* Context pools: a fixed set of contexts handed to concurrent callers.
 * Contexts are made up front (never on a caller's path); a caller waits on
 * a condition variable while all are taken. */
#include "engine/engine_internal.h"

#include <pthread.h>

struct segrt_context_pool {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    segrt_context **all;
    segrt_context **idle; /* a stack of free contexts */
    size_t size, n_idle;
};

segrt_status segrt_context_pool_create(const segrt_engine *engine, size_t size, segrt_context_pool **out)
{
    if (!engine || !out || size == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_context_pool_create: engine and out must not be NULL and size must be positive");
    segrt_context_pool *p = sg_calloc(1, sizeof *p);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->freed, NULL);
    p->all = sg_calloc(size, sizeof *p->all);
    p->idle = sg_calloc(size, sizeof *p->idle);
    sg_status s = p->all && p->idle ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < size && s == SEGRT_OK; i++) {
        s = segrt_context_create(engine, &p->all[i]);
        if (s == SEGRT_OK) {
            p->idle[p->n_idle++] = p->all[i];
            p->size++;
        }
    }
    if (s != SEGRT_OK) {
        segrt_context_pool_destroy(p);
        return s;
    }
    *out = p;
    return SEGRT_OK;
}

void segrt_context_pool_destroy(segrt_context_pool *pool)
{
    if (!pool)
        return;
    for (size_t i = 0; i < pool->size; i++)
        segrt_context_destroy(pool->all[i]);
    free(pool->all);
    free(pool->idle);
    pthread_cond_destroy(&pool->freed);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

segrt_status segrt_context_pool_acquire(segrt_context_pool *pool, segrt_context **out)
{
    if (!pool || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_pool_acquire: NULL argument");
    pthread_mutex_lock(&pool->lock);
    while (pool->n_idle == 0)
        pthread_cond_wait(&pool->freed, &pool->lock);
    *out = pool->idle[--pool->n_idle];
    pthread_mutex_unlock(&pool->lock);
    return SEGRT_OK;
}

segrt_status segrt_context_pool_release(segrt_context_pool *pool, segrt_context *ctx)
{
    if (!pool || !ctx)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_pool_release: NULL argument");
    pthread_mutex_lock(&pool->lock);
    bool mine = false;
    for (size_t i = 0; i < pool->size && !mine; i++)
        mine = pool->all[i] == ctx;
    for (size_t i = 0; i < pool->n_idle && mine; i++)
        mine = pool->idle[i] != ctx; /* released twice */
    if (mine) {
        pool->idle[pool->n_idle++] = ctx;
        pthread_cond_signal(&pool->freed);
    }
    pthread_mutex_unlock(&pool->lock);
    return mine ? SEGRT_OK
                : sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                           "segrt_context_pool_release: the context is not an acquired context of this pool");
}

segrt_status segrt_context_pool_run(segrt_context_pool *pool, size_t n_inputs, const segrt_tensor *inputs,
                                    size_t n_outputs, segrt_tensor *outputs)
{
    segrt_context *ctx;
    SG_TRY(segrt_context_pool_acquire(pool, &ctx));
    sg_status s = segrt_context_run(ctx, n_inputs, inputs, n_outputs, outputs);
    segrt_context_pool_release(pool, ctx);
    return s;
}
