/* semaphore.c - see semaphore.h. */
#include "semaphore.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/base.h"

#define SEM_TICKET_MARGIN_MS 500    /* a waiter's ticket outlives its wait by this much */

typedef struct sem_task {
    atomic_int refs;                /* the task's own until done, and the caller's handle */
    atomic_bool cancelled;
    sem_request req;
    char limit_name[RL_INTERNAL_NAME_MAX + 1];
    rl_engine *limit_eng;           /* the engine of the limit: the notices' channel */
    bool subscribed;                /* a waiting acquire: to the semaphore's notices */
    uint64_t round_gen;             /* notice_gen when this round began */
    long long held_left_ms;         /* this round: the least time left of a slot held (0: none seen) */
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
    /* a waiting acquire's place among the semaphore's waiters on the
     * masters (fair order: redlock.h's ticket), for all its rounds */
    char ticket[TOKEN_TEXT_LEN + 1];
    long long since_us;             /* its arrival, Unix us */
    bool ticket_sent;
} sem_task;

static void notice_want(sem_task *t, bool on);

static void task_unref(sem_task *t)
{
    if (atomic_fetch_sub(&t->refs, 1) == 1)
        free(t);
}

static void finish(sem_task *t)
{
    if (t->ticket_sent) {
        /* Done waiting: its ticket leaves the queue (quietly when granted:
         * its last slot took it out where it won). */
        rl_request dq = {.op = RL_DEQUEUE, .keep_ticket = t->res.outcome == RL_OK};
        snprintf(dq.name, sizeof dq.name, "%s", t->limit_name);
        snprintf(dq.ticket, sizeof dq.ticket, "%s", t->ticket);
        (void)rl_submit(t->limit_eng, &dq, NULL, NULL, NULL);
    }
    if (t->subscribed)
        notice_want(t, false);
    t->done(t->arg, &t->res);
    task_unref(t);
}

static unsigned rnd(sem_task *t)
{
    t->rng = t->rng * 1103515245u + 12345u;
    return t->rng >> 8;
}

/* Submits op on the slot (or -1: the limit) of t's semaphore. */
static int step(sem_task *t, enum rl_op op, int slot, const char *token, rl_done_fn done)
{
    rl_request r = {.op = op, .ttl_ms = t->req.ttl_ms};
    if (slot < 0) {
        sem_limit_name(t->req.name, r.name, sizeof r.name);
    } else {
        sem_slot_name(t->req.name, slot, r.name, sizeof r.name);
        snprintf(r.notice_name, sizeof r.notice_name, "%s", t->limit_name);   /* one channel */
    }
    if (token)
        snprintf(r.token, sizeof r.token, "%s", token);
    if (op == RL_ACQUIRE)
        snprintf(r.owner, sizeof r.owner, "%s", t->req.owner);
    if (op == RL_ACQUIRE)   /* every slot shares the semaphore's queue of waiters */
        snprintf(r.queue_name, sizeof r.queue_name, "%s", t->limit_name);
    if (op == RL_ACQUIRE && t->ticket[0]) {
        /* A waiter: its ticket in that queue; only the oldest waiter takes
         * a free slot. */
        uint64_t now = loop_now_us();
        snprintf(r.ticket, sizeof r.ticket, "%s", t->ticket);
        r.ticket_since_us = t->since_us;
        r.keep_ticket = true;
        r.ticket_ttl_ms = (long long)((t->deadline_us > now ? t->deadline_us - now : 0) / 1000) + SEM_TICKET_MARGIN_MS;
        t->ticket_sent = true;
    }
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
            step(t, RL_RELEASE, slot, token, NULL);
    }
    t->res.npermits = 0;
}

static atomic_bool stop_waiting;   /* sem_stop_waiting was called */

/* The service is stopping: a waiting acquire answers now, 503
 * shutting_down, as a waiting lock acquire does. */
static bool stopping(sem_task *t)
{
    return atomic_load(&stop_waiting) || loop_stopping(mpool_loop(t->pool)) || rl_engine_draining(t->limit_eng);
}

/* ---- waiting: a retry timer, or a notice that a slot was given back ---- */

/* A waiting acquire between two rounds. The retry timer and a notice race
 * to claim it: whichever comes first runs the next round. The timer always
 * comes, and frees it; t is not touched once a notice claimed it (its
 * round may have ended it). */
typedef struct sem_sleep {
    sem_task *t;
    mpool *pool;
    uint64_t delay_us;
    bool claimed, linked;
    struct sem_sleep *prev, *next;
} sem_sleep;

/* Every waiting acquire of the process, for the notices of every engine,
 * and how many semaphore notices came so far (a round that saw one go by
 * does not sleep long: it may have been the release it looked for). */
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static sem_sleep *sleepers;
static uint64_t notice_gen;

/* sleep_mu held. */
static void sleep_unlink(sem_sleep *z)
{
    DLIST_UNLINK(sleepers, z, prev, next);
    z->linked = false;
}

/* The next round, on t's pool: unless the service is stopping. */
static void next_round(void *arg)
{
    sem_task *t = arg;
    if (stopping(t) || atomic_load(&t->cancelled)) {
        t->res.outcome = atomic_load(&t->cancelled) ? RL_CANCELLED : RL_SHUTTING_DOWN;
        finish(t);
        return;
    }
    acquire_try(t);
}

static void retry_timer(void *arg)
{
    sem_sleep *z = arg;
    pthread_mutex_lock(&sleep_mu);
    bool mine = !z->claimed;
    if (z->linked)
        sleep_unlink(z);
    pthread_mutex_unlock(&sleep_mu);
    sem_task *t = mine ? z->t : NULL;
    free(z);
    if (t)
        next_round(t);
}

static void arm_retry(void *arg)
{
    sem_sleep *z = arg;
    if (loop_after(mpool_loop(z->pool), z->delay_us, retry_timer, z) < 0)
        retry_timer(z);   /* at once: the pool is stopping, and the round says so */
}

/* Where the last RULES_SEP in key (len bytes) starts, or NULL. */
static const char *last_sep(const char *key, size_t len)
{
    size_t n = sizeof RULES_SEP - 1;
    for (size_t i = len; i >= n; i--)
        if (!memcmp(key + i - n, RULES_SEP, n))
            return key + i - n;
    return NULL;
}

/* A notice on an engine's loop: key is the engine's key prefix and a lock
 * name. A slot's release (NAME RULES_SEP i), or the subscription to NAME's
 * channel being confirmed (NAME RULES_SEP limit: a release just before it is not missed),
 * starts the next round of every acquire waiting on NAME. */
static void on_notice(void *arg, const char *key, size_t len, const char *value, size_t vlen)
{
    if (vlen && value[0] == '\n')
        return;   /* a heartbeat: nothing freed */
    char prefix[RL_INTERNAL_NAME_MAX + 1];
    rl_engine_key(arg, "", prefix, sizeof prefix);
    size_t plen = strlen(prefix);
    if (len <= plen || memcmp(key, prefix, plen))
        return;
    key += plen;
    len -= plen;
    const char *sep = last_sep(key, len);
    if (!sep)
        return;
    const char *tail = sep + sizeof RULES_SEP - 1;
    size_t nlen = (size_t)(sep - key), slen = len - (size_t)(tail - key);
    bool slot = slen > 0;
    for (size_t i = 0; i < slen; i++)
        slot = slot && isdigit((unsigned char)tail[i]);
    if (!slot && !(slen == 5 && !memcmp(tail, "limit", 5)))
        return;
    pthread_mutex_lock(&sleep_mu);
    notice_gen++;
    for (sem_sleep *z = sleepers, *next; z; z = next) {
        next = z->next;
        if (z->claimed || strlen(z->t->req.name) != nlen || memcmp(z->t->req.name, key, nlen))
            continue;
        if (loop_post(mpool_loop(z->t->pool), next_round, z->t) < 0)
            continue;   /* the timer will */
        z->claimed = true;
        sleep_unlink(z);   /* the timer frees it */
    }
    pthread_mutex_unlock(&sleep_mu);
}

void sem_engine_attach(rl_engine *e)
{
    (void)rl_engine_add_notice_hook(e, on_notice, e);
}

struct want {
    rl_engine *e;
    char name[RL_INTERNAL_NAME_MAX + 1];
    bool on;
};

static void want_on_loop(void *arg)
{
    struct want *w = arg;
    rl_engine_notice_want(w->e, w->name, w->on);
    free(w);
}

/* Subscribes t to (on) or lets go of (off) its semaphore's notices, on the
 * loop of the limit's engine. */
static void notice_want(sem_task *t, bool on)
{
    struct want *w = calloc(1, sizeof *w);
    if (!w)
        return;   /* (the timer still retries) */
    w->e = t->limit_eng;
    w->on = on;
    snprintf(w->name, sizeof w->name, "%s", t->limit_name);
    if (rl_engine_post(w->e, want_on_loop, w) < 0) {
        free(w);
        return;
    }
    t->subscribed = on;
}

/* Sleeps until the retry timer or a notice, whichever comes first. Once z
 * is in the registry a notice may start the next round on another loop,
 * which may end t: so everything of t is read before. */
static bool sleep_until_retry(sem_task *t)
{
    sem_sleep *z = calloc(1, sizeof *z);
    if (!z)
        return false;
    z->t = t;
    z->pool = t->pool;
    if (!t->subscribed)
        notice_want(t, true);   /* its confirmation wakes: nothing released before is missed */
    bool may_hear = t->subscribed && t->held_left_ms > 0 && rl_engine_notices_up(t->limit_eng);
    long long long_ms = t->held_left_ms + 1 < SEM_SLEEP_MAX_MS ? t->held_left_ms + 1 : SEM_SLEEP_MAX_MS;
    long long short_ms = SEM_RETRY_MS / 2 + (long long)(rnd(t) % SEM_RETRY_MS);
    uint64_t now = loop_now_us(), left = t->deadline_us > now ? t->deadline_us - now : 0;
    pthread_mutex_lock(&sleep_mu);
    uint64_t us = (uint64_t)(may_hear && notice_gen == t->round_gen ? long_ms : short_ms) * 1000ULL;
    /* (a cancel before z is linked found nothing to wake: the timer is due now) */
    z->delay_us = atomic_load(&t->cancelled) ? 0 : us < left ? us : left;
    DLIST_PUSH(sleepers, z, prev, next);
    z->linked = true;
    pthread_mutex_unlock(&sleep_mu);
    if (loop_post(mpool_loop(z->pool), arm_retry, z) < 0)
        retry_timer(z);   /* claims it unless a notice did */
    return true;
}

/* Every slot was tried: not enough won. */
static void acquire_short(sem_task *t)
{
    give_back(t);
    bool waiting = loop_now_us() < t->deadline_us;
    if (waiting && !stopping(t) && sleep_until_retry(t))
        return;
    /* A wait cut short by a stopping service is no answer about the
     * permits: 503, as for a lock's waiter, so the client tries elsewhere. */
    t->res.outcome = waiting && stopping(t) ? RL_SHUTTING_DOWN : RL_LOCKED;
    t->res.retry_after_ms = t->held_left_ms;
    finish(t);
}

static void acquire_next(sem_task *t)
{
    if (atomic_load(&t->cancelled)) {
        give_back(t);
        t->res.outcome = RL_CANCELLED;
        finish(t);
        return;
    }
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
        if (res->retry_after_ms > 0 && (t->held_left_ms == 0 || res->retry_after_ms < t->held_left_ms))
            t->held_left_ms = res->retry_after_ms;
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
    t->held_left_ms = 0;
    pthread_mutex_lock(&sleep_mu);
    t->round_gen = notice_gen;
    pthread_mutex_unlock(&sleep_mu);
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
            step(t, RL_SEM_LIMIT, -1, NULL, NULL);   /* the limit lives as long as the longest permit */
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

/* ---- inspect (and force: the same walk over the slots) ---- */

static enum rl_op slot_op(const sem_task *t)
{
    return t->req.op == SEM_FORCE ? RL_FORCE : RL_INSPECT;
}

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
    if (step(t, slot_op(t), t->next++, NULL, inspect_voted) < 0) {
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
    if (step(t, slot_op(t), t->next++, NULL, inspect_voted) < 0) {
        t->res.outcome = RL_SHUTTING_DOWN;
        finish(t);
    }
}

void sem_cancel(sem_handle *t)
{
    atomic_store(&t->cancelled, true);
    /* asleep between rounds: the next one, now, answers */
    pthread_mutex_lock(&sleep_mu);
    for (sem_sleep *z = sleepers; z; z = z->next)
        if (z->t == t && !z->claimed && loop_post(mpool_loop(t->pool), next_round, t) == 0) {
            z->claimed = true;
            sleep_unlink(z);
            break;
        }
    pthread_mutex_unlock(&sleep_mu);
}

void sem_stop_waiting(void)
{
    atomic_store(&stop_waiting, true);
    pthread_mutex_lock(&sleep_mu);
    for (sem_sleep *z = sleepers, *next; z; z = next) {
        next = z->next;
        if (!z->claimed && loop_post(mpool_loop(z->t->pool), next_round, z->t) == 0) {
            z->claimed = true;
            sleep_unlink(z);
        }
    }
    pthread_mutex_unlock(&sleep_mu);
}

void sem_finish(sem_handle *t)
{
    task_unref(t);
}

int sem_submit(const sem_request *req, sem_engine_fn engine_of, void *eng_arg, mpool *pool,
               sem_done_fn done, void *arg, sem_handle **handle)
{
    sem_task *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    atomic_init(&t->refs, handle ? 2 : 1);
    if (handle)
        *handle = t;
    t->req = *req;
    t->engine_of = engine_of;
    t->eng_arg = eng_arg;
    t->pool = pool;
    t->done = done;
    t->arg = arg;
    t->res.outcome = RL_OK;
    t->res.limit = req->limit;
    sem_limit_name(req->name, t->limit_name, sizeof t->limit_name);
    t->limit_eng = engine_of(eng_arg, t->limit_name);
    if (getrandom(&t->rng, sizeof t->rng, 0) != sizeof t->rng)
        t->rng = (unsigned)loop_now_us();
    t->deadline_us = loop_now_us() + (uint64_t)req->wait_ms * 1000ULL;
    if (req->op == SEM_ACQUIRE && req->wait_ms > 0 && token_new(t->ticket) == 0)
        t->since_us = loop_unix_us();
    int rc;
    switch (req->op) {
    case SEM_ACQUIRE:
        rc = step(t, RL_SEM_LIMIT, -1, NULL, limit_set);
        break;
    case SEM_INSPECT:
    case SEM_FORCE: {
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
        if (handle)
            *handle = NULL;
        return -1;
    }
    return 0;
}
