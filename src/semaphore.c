/* semaphore.c - see semaphore.h. */
#include "semaphore.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct sem_task {
    sem_request req;
    sem_result res;
    sem_engine_fn engine_of;
    void *eng_arg;
    mpool *pool;
    sem_done_fn done;
    void *arg;
    uint64_t deadline_us;           /* acquire: the end of wait_ms */
    int order[SEM_LIMIT_MAX];       /* acquire: the slots, in random order */
    int next;                       /* acquire: the next of order to try; else the next token */
    unsigned rng;
} sem_task;

static void finish(sem_task *t)
{
    t->done(t->arg, &t->res);
    free(t);
}

static unsigned rnd(sem_task *t)
{
    t->rng = t->rng * 1103515245u + 12345u;
    return t->rng >> 8;
}

static void ignore(void *arg, const rl_result *res)
{
    (void)arg;
    (void)res;
}

/* Submits op on the slot (or -1: the limit) of t's semaphore. */
static int step(sem_task *t, enum rl_op op, int slot, const char *token, rl_done_fn done)
{
    rl_request r = {.op = op, .ttl_ms = t->req.ttl_ms};
    if (slot < 0)
        sem_limit_name(t->req.name, r.name, sizeof r.name);
    else
        sem_slot_name(t->req.name, slot, r.name, sizeof r.name);
    if (token)
        snprintf(r.token, sizeof r.token, "%s", token);
    if (op == RL_ACQUIRE)
        snprintf(r.owner, sizeof r.owner, "%s", t->req.owner);
    if (op == RL_SEM_LIMIT)
        r.limit = t->req.op == SEM_ACQUIRE ? t->req.limit : -1;   /* extend: keep it alive */
    return rl_submit(t->engine_of(t->eng_arg, r.name), &r, done, t, NULL);
}

static void fail_with(sem_task *t, const rl_result *res)
{
    t->res.outcome = res->outcome;
    t->res.last = *res;
    finish(t);
}

/* ---- acquire ---- */

static void acquire_try(sem_task *t);
static void slot_voted(void *arg, const rl_result *res);

/* Gives back every permit won so far (all or nothing). */
static void give_back(sem_task *t)
{
    for (int i = 0; i < t->res.npermits; i++) {
        int slot;
        char token[TOKEN_MAX_LEN + 1];
        if (sem_token_split(t->res.permits[i].token, SEM_LIMIT_MAX, &slot, token, sizeof token))
            step(t, RL_RELEASE, slot, token, ignore);
    }
    t->res.npermits = 0;
}

/* The service is stopping: a waiting acquire answers now, as a waiting
 * lock acquire does (409). */
static bool stopping(sem_task *t)
{
    char name[RL_INTERNAL_NAME_MAX + 1];
    sem_limit_name(t->req.name, name, sizeof name);
    return mpool_is_stopping(t->pool) || rl_engine_draining(t->engine_of(t->eng_arg, name));
}

static void retry_timer(void *arg)
{
    sem_task *t = arg;
    if (stopping(t)) {
        t->res.outcome = RL_LOCKED;
        finish(t);
        return;
    }
    acquire_try(t);
}

static void arm_retry(void *arg)
{
    sem_task *t = arg;
    uint64_t delay = (uint64_t)(SEM_RETRY_MS / 2 + (int)(rnd(t) % SEM_RETRY_MS)) * 1000ULL;
    if (mpool_after(t->pool, delay, retry_timer, t) < 0) {
        t->res.outcome = RL_LOCKED;
        finish(t);
    }
}

/* Every slot was tried: not enough won. */
static void acquire_short(sem_task *t)
{
    give_back(t);
    if (mpool_now_us() < t->deadline_us && !stopping(t) && mpool_post(t->pool, arm_retry, t) == 0)
        return;
    t->res.outcome = RL_LOCKED;
    finish(t);
}

static void acquire_next(sem_task *t)
{
    if (t->res.npermits == t->req.permits) {
        t->res.outcome = RL_OK;
        finish(t);
        return;
    }
    if (t->next == t->req.limit || t->req.limit - t->next < t->req.permits - t->res.npermits) {
        acquire_short(t);
        return;
    }
    int slot = t->order[t->next++];
    if (step(t, RL_ACQUIRE, slot, NULL, slot_voted) < 0) {
        give_back(t);
        t->res.outcome = RL_SHUTTING_DOWN;
        finish(t);
    }
}

static void slot_voted(void *arg, const rl_result *res)
{
    sem_task *t = arg;
    if (res->outcome == RL_OK) {
        sem_permit *p = &t->res.permits[t->res.npermits++];
        p->slot = t->order[t->next - 1];
        snprintf(p->token, sizeof p->token, "%d:%s", p->slot, res->token);
        p->fence = res->fence;
        p->validity_ms = res->validity_ms;
        if (t->res.npermits == 1 || res->validity_ms < t->res.validity_ms)
            t->res.validity_ms = res->validity_ms;
        t->res.ttl_ms = res->ttl_ms;
        acquire_next(t);
    } else if (res->outcome == RL_LOCKED) {
        acquire_next(t);
    } else {
        give_back(t);
        fail_with(t, res);
    }
}

/* One round: the slots in a fresh random order. */
static void acquire_try(sem_task *t)
{
    for (int i = 0; i < t->req.limit; i++)
        t->order[i] = i;
    for (int i = t->req.limit - 1; i > 0; i--) {
        int j = (int)(rnd(t) % (unsigned)(i + 1)), x = t->order[i];
        t->order[i] = t->order[j];
        t->order[j] = x;
    }
    t->next = 0;
    t->res.npermits = 0;
    acquire_next(t);
}

static void limit_set(void *arg, const rl_result *res)
{
    sem_task *t = arg;
    if (res->outcome == RL_LOCKED) {
        t->res.limit_mismatch = true;
        t->res.stored_limit = res->limit;
        fail_with(t, res);
        return;
    }
    if (res->outcome != RL_OK) {
        fail_with(t, res);
        return;
    }
    acquire_try(t);
}

/* ---- extend, release: each permit in turn ---- */

static void each_voted(void *arg, const rl_result *res);

static void each_next(sem_task *t)
{
    if (t->next == t->req.ntokens) {
        if (t->res.npermits > 0 && t->req.op == SEM_EXTEND)
            step(t, RL_SEM_LIMIT, -1, NULL, ignore);   /* the limit lives as long as the longest permit */
        finish(t);
        return;
    }
    int slot;
    char token[TOKEN_MAX_LEN + 1];
    sem_token_split(t->req.tokens[t->next], SEM_LIMIT_MAX, &slot, token, sizeof token);
    t->next++;
    if (step(t, t->req.op == SEM_EXTEND ? RL_EXTEND : RL_RELEASE, slot, token, each_voted) < 0) {
        t->res.outcome = RL_SHUTTING_DOWN;
        finish(t);
    }
}

static void each_voted(void *arg, const rl_result *res)
{
    sem_task *t = arg;
    int slot = 0;
    char token[TOKEN_MAX_LEN + 1];
    sem_token_split(t->req.tokens[t->next - 1], SEM_LIMIT_MAX, &slot, token, sizeof token);
    if (res->outcome == RL_OK) {
        sem_permit *p = &t->res.permits[t->res.npermits++];
        p->slot = slot;
        memcpy(p->token, t->req.tokens[t->next - 1], sizeof p->token);
        p->fence = res->fence;
        p->validity_ms = res->validity_ms;
        if (t->res.npermits == 1 || res->validity_ms < t->res.validity_ms)
            t->res.validity_ms = res->validity_ms;
        t->res.ttl_ms = res->ttl_ms;
    } else if (t->res.outcome == RL_OK || res->outcome == RL_NO_QUORUM) {
        /* the first failure decides the answer (no quorum over not held);
         * the other permits are still extended or released */
        t->res.outcome = res->outcome;
        t->res.last = *res;
    }
    each_next(t);
}

/* ---- inspect ---- */

static void inspect_voted(void *arg, const rl_result *res)
{
    sem_task *t = arg;
    if (res->outcome != RL_OK) {
        fail_with(t, res);
        return;
    }
    if (res->held) {
        sem_permit *p = &t->res.permits[t->res.npermits++];
        p->slot = t->next - 1;
        p->fence = res->fence;
        p->validity_ms = res->validity_ms;
        snprintf(p->owner, sizeof p->owner, "%s", res->owner);
    }
    if (t->next == t->res.limit) {
        t->res.outcome = RL_OK;
        finish(t);
        return;
    }
    if (step(t, RL_INSPECT, t->next++, NULL, inspect_voted) < 0) {
        t->res.outcome = RL_SHUTTING_DOWN;
        finish(t);
    }
}

static void limit_read(void *arg, const rl_result *res)
{
    sem_task *t = arg;
    if (res->outcome != RL_OK) {
        fail_with(t, res);
        return;
    }
    t->res.limit = t->req.limit ? t->req.limit : (int)(res->limit < SEM_LIMIT_MAX ? res->limit : SEM_LIMIT_MAX);
    t->res.stored_limit = res->limit;
    if (t->res.limit == 0) {
        t->res.outcome = RL_OK;
        finish(t);
        return;
    }
    t->next = 0;
    if (step(t, RL_INSPECT, t->next++, NULL, inspect_voted) < 0) {
        t->res.outcome = RL_SHUTTING_DOWN;
        finish(t);
    }
}

int sem_submit(const sem_request *req, sem_engine_fn engine_of, void *eng_arg, mpool *pool,
               sem_done_fn done, void *arg)
{
    sem_task *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->req = *req;
    t->engine_of = engine_of;
    t->eng_arg = eng_arg;
    t->pool = pool;
    t->done = done;
    t->arg = arg;
    t->res.outcome = RL_OK;
    t->res.limit = req->limit;
    if (getrandom(&t->rng, sizeof t->rng, 0) != sizeof t->rng)
        t->rng = (unsigned)mpool_now_us();
    t->deadline_us = mpool_now_us() + (uint64_t)req->wait_ms * 1000ULL;
    int rc;
    switch (req->op) {
    case SEM_ACQUIRE:
        rc = step(t, RL_SEM_LIMIT, -1, NULL, limit_set);
        break;
    case SEM_INSPECT: {
        rl_request lr = {.op = RL_SEM_LIMIT, .limit = 0, .ttl_ms = 1};
        sem_limit_name(req->name, lr.name, sizeof lr.name);
        rc = rl_submit(engine_of(eng_arg, lr.name), &lr, limit_read, t, NULL);
        break;
    }
    default:
        t->next = 0;
        each_next(t);
        return 0;
    }
    if (rc < 0) {
        free(t);
        return -1;
    }
    return 0;
}
