/* redlock_wait.c - acquires that wait, and the queue for a place among
 * max_active (redlock_int.h). */
#include "redlock_int.h"

/* ---- the waiter index ---- */

uint64_t rl_key_hash64(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

static size_t key_hash(const char *key, size_t len)
{
    return (size_t)(rl_key_hash64(key, len) & (RL_WTAB_SIZE - 1));
}

static struct wname *wname_find(rl_engine *e, const char *key, size_t len)
{
    for (struct wname *w = e->wtab[key_hash(key, len)]; w; w = w->next)
        if (w->len == len && !memcmp(w->key, key, len))
            return w;
    return NULL;
}

void rl_engine_waiters(rl_engine *e, rl_waiters_fn fn, void *arg)
{
    size_t plen = strlen(e->key_prefix);
    for (int b = 0; b < RL_WTAB_SIZE; b++)
        for (struct wname *w = e->wtab[b]; w; w = w->next)
            if (w->members > 0 && w->len > plen)
                fn(arg, w->key + plen, w->members);
}

/* op starts waiting for its name (trying now). NULL when out of memory. */
static struct wname *wait_join(rl_task *op)
{
    rl_engine *e = op->e;
    size_t len = strlen(op->key);
    struct wname *w = wname_find(e, op->key, len);
    if (!w) {
        w = calloc(1, sizeof *w + len + 1);
        if (!w)
            return NULL;
        memcpy(w->key, op->key, len + 1);
        w->len = len;
        size_t h = key_hash(op->key, len);
        w->next = e->wtab[h];
        e->wtab[h] = w;
    }
    w->members++;
    w->trying++;
    op->wn = w;
    op->seen_seq = w->notice_seq;
    return w;
}

static void sleepers_unlink(rl_task *op)
{
    struct wname *w = op->wn;
    if (op->wprev)
        op->wprev->wnext = op->wnext;
    else
        w->head = op->wnext;
    if (op->wnext)
        op->wnext->wprev = op->wprev;
    else
        w->tail = op->wprev;
    op->wprev = op->wnext = NULL;
    op->sleeping = false;
    atomic_fetch_sub(op->e->nsleeping, 1);
}

/* Puts op (trying) to sleep in arrival order: usually at the tail, or near
 * the head for an old waiter woken and refused again. */
static void sleepers_insert(rl_task *op)
{
    struct wname *w = op->wn;
    rl_task *after = w->tail;
    while (after && after->place_us > op->place_us)
        after = after->wprev;
    op->wprev = after;
    op->wnext = after ? after->wnext : w->head;
    if (op->wnext)
        op->wnext->wprev = op;
    else
        w->tail = op;
    if (after)
        after->wnext = op;
    else
        w->head = op;
    w->trying--;
    op->sleeping = true;
    atomic_fetch_add(op->e->nsleeping, 1);
    if (!w->subscribed && op->e->cfg.notify) {
        /* Notices of this name now matter: subscribe (the subscription's
         * confirmation wakes the oldest sleeper once, so a release in
         * between is not missed). */
        w->subscribed = true;
        mpool_notice_want(op->e->pool, op->channel, true);
    }
}

/* op stops waiting (answered): frees its name's entry when it was the last. */
void rl_wait_leave(rl_task *op)
{
    struct wname *w = op->wn;
    rl_engine *e = op->e;
    if (op->sleeping)
        sleepers_unlink(op);
    else
        w->trying--;
    op->wn = NULL;
    if (--w->members > 0)
        return;
    if (w->subscribed)
        mpool_notice_want(e->pool, op->channel, false);
    struct wname **pp = &e->wtab[key_hash(w->key, w->len)];
    while (*pp != w)
        pp = &(*pp)->next;
    *pp = w->next;
    free(w);
}

/* Ends op's sleep and tries again at once. */
static void acquire_wake_now(rl_task *op)
{
    sleepers_unlink(op);
    if (op->req.queued)
        rl_set_active(op, true);   /* admitted once: a waiter's turn is not queued again */
    op->wn->trying++;
    op->seen_seq = op->wn->notice_seq;
    op->gen++;
    metrics_count(op->e->m, METRICS_ACQUIRE_RETRIES);
    rl_acquire_attempt(op);
}

struct wake {
    rl_task *op;
    unsigned gen;
};

static void acquire_sleep(rl_task *op);

static void acquire_timer(void *arg)
{
    struct wake *w = arg;
    rl_task *op = w->op;
    unsigned gen = w->gen;
    free(w);
    op->armed--;
    if (op->answered || loop_stopping(mpool_loop(op->e->pool))) {
        /* Answered while asleep (a drain, a cancel), or the loop is ending:
         * nothing to do but let go. */
        if (!op->answered && op->wn)
            rl_wait_leave(op);
        if (!op->answered && loop_stopping(mpool_loop(op->e->pool)))
            op->answered = true;   /* the caller is gone with the HTTP server */
        rl_op_maybe_free(op);
        return;
    }
    if (gen != op->gen || !op->sleeping)
        return;                  /* woken earlier by a release notice */
    if (loop_now_us() >= op->wait_deadline_us) {
        rl_op_answer(op);           /* its own wait_ms is over: 409, on time */
        return;
    }
    /* The holder's time ran out (or the fallback delay passed). Waiters of
     * one name go in arrival order: an older one asleep takes this turn and
     * this one sleeps on; with one of them trying, it sees the result. */
    struct wname *wn = op->wn;
    if (wn->trying > 0 || wn->head != op) {
        if (wn->trying == 0)
            acquire_wake_now(wn->head);
        /* Sleep on until the holder's time as its waiters last learnt it
         * (a refusal, or a grant to one of them), so a crowd of waiters
         * costs one try per holder, not one per waiter. */
        uint64_t now = loop_now_us();
        op->res.retry_after_ms =
            wn->holder_until_us > now ? (long long)((wn->holder_until_us - now) / 1000ULL) : 0;
        sleepers_unlink(op);
        wn->trying++;
        acquire_sleep(op);
        return;
    }
    acquire_wake_now(op);
}

/* op (trying, a member of its name's waiters) sleeps before the next try:
 * with release notices up, until the notice or the holder's remaining time
 * runs out; without, a random retry delay. Never past its own deadline. */
static void acquire_sleep(rl_task *op)
{
    rl_engine *e = op->e;
    uint64_t now = loop_now_us();
    uint64_t left_us = op->wait_deadline_us > now ? op->wait_deadline_us - now : 0;
    uint64_t delay_us;
    if (op->res.retry_after_ms > 0 && rl_engine_notices_up(e))
        delay_us = (uint64_t)op->res.retry_after_ms * 1000ULL + RL_WAKE_MARGIN_US;
    else
        delay_us = (uint64_t)quorum_retry_delay_ms(e->cfg.retry_delay_ms, rl_rng_next(e),
                                                   op->res.retry_after_ms,
                                                   (long long)((left_us + 999) / 1000)) * 1000ULL;
    if (delay_us > left_us || e->no_wake)
        delay_us = left_us;
    struct wake *w = malloc(sizeof *w);
    if (!w || loop_after(mpool_loop(e->pool), delay_us, acquire_timer, w) < 0) {
        free(w);
        rl_op_answer(op);
        return;
    }
    w->op = op;
    w->gen = op->gen;
    op->armed++;
    sleepers_insert(op);
    rl_set_active(op, false);
}

/* The attempt failed with a majority answering: wait within wait_ms, else
 * answer 409 locked. */
void rl_acquire_refused(rl_task *op)
{
    rl_engine *e = op->e;
    op->res.outcome = op->cancelled ? RL_CANCELLED : RL_LOCKED;
    uint64_t now = loop_now_us();
    if (op->cancelled || now >= op->wait_deadline_us) {
        rl_op_answer(op);
        return;
    }
    if (atomic_load(&e->draining)) {
        /* A wait the stop cuts short: 503, so the client retries elsewhere,
         * rather than a 409 that says the lock stayed held all its wait. */
        op->res.outcome = RL_SHUTTING_DOWN;
        rl_op_answer(op);
        return;
    }
    if (!op->wn && !wait_join(op)) {
        rl_op_answer(op);
        return;
    }
    if (op->res.retry_after_ms > 0)
        op->wn->holder_until_us = now + (uint64_t)op->res.retry_after_ms * 1000ULL;
    if (op->seen_seq != op->wn->notice_seq && !e->no_wake) {
        /* Released while we tried: the try may have come first. */
        op->seen_seq = op->wn->notice_seq;
        metrics_count(e->m, METRICS_ACQUIRE_RETRIES);
        rl_acquire_attempt(op);
        return;
    }
    if (atomic_load(e->nsleeping) >= e->cfg.max_waiters) {
        op->res.outcome = RL_TOO_MANY_WAITERS;
        rl_op_answer(op);
        return;
    }
    acquire_sleep(op);
}

/* A lock was released (here, or on another instance: a notice from a
 * master), or its notices just became subscribed. The oldest waiter asleep
 * tries at once, unless one of its waiters is trying already (it sees the
 * notice when its try ends). Loop thread. */
void rl_on_released(rl_engine *e, const char *key, size_t len)
{
    struct wname *w = wname_find(e, key, len);
    if (!w || e->no_wake)
        return;
    w->notice_seq++;
    if (w->trying == 0 && w->head) {
        metrics_count(e->m, METRICS_HANDOFF_WAKES);
        acquire_wake_now(w->head);
    }
}

void rl_on_notice(void *arg, const char *msg, size_t len)
{
    rl_engine *e = arg;
    /* A release's notice is "key\nvalue" (no name holds a control byte), a
     * heartbeat's "key\n\ntoken"; a grant's or a subscription's is the key
     * alone. */
    const char *nl = memchr(msg, '\n', len);
    size_t klen = nl ? (size_t)(nl - msg) : len;
    const char *value = nl ? nl + 1 : "";
    size_t vlen = nl ? len - klen - 1 : 0;
    if (!(vlen && value[0] == '\n'))   /* a heartbeat ("key\n\ntoken") frees nothing */
        rl_on_released(e, msg, klen);
    for (int i = 0; i < e->nhooks; i++)
        e->hooks[i](e->hook_args[i], msg, klen, value, vlen);
}

bool rl_engine_add_notice_hook(rl_engine *e, rl_notice_hook hook, void *arg)
{
    if (e->nhooks == RL_NOTICE_HOOKS)
        return false;
    e->hooks[e->nhooks] = hook;
    e->hook_args[e->nhooks++] = arg;
    return true;
}

void rl_engine_remove_notice_hook(rl_engine *e, rl_notice_hook hook, void *arg)
{
    for (int i = 0; i < e->nhooks; i++) {
        if (e->hooks[i] != hook || e->hook_args[i] != arg)
            continue;
        for (int k = i + 1; k < e->nhooks; k++) {
            e->hooks[k - 1] = e->hooks[k];
            e->hook_args[k - 1] = e->hook_args[k];
        }
        e->nhooks--;
        return;
    }
}

bool rl_engine_notices_up(rl_engine *e)
{
    return e->cfg.notify && mpool_notice_links(e->pool) >= quorum_of(e->n);
}

int rl_engine_post(rl_engine *e, void (*fn)(void *), void *arg)
{
    return loop_post(mpool_loop(e->pool), fn, arg);
}

void rl_engine_key(const rl_engine *e, const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s%s", e->key_prefix, name);
}

void rl_engine_notice_want(rl_engine *e, const char *name, bool on)
{
    if (!e->cfg.notify)
        return;
    char channel[RL_CHANNEL_MAX];
    snprintf(channel, sizeof channel, "%s%s%s", SCRIPT_NOTICE_PREFIX, e->key_prefix, name);
    mpool_notice_want(e->pool, channel, on);
}

/* Answers RL_OVERLOADED to every queued op whose turn did not come in time,
 * and arms the timer for the next deadline. */
void rl_queue_expire(void *arg)
{
    rl_engine *e = arg;
    e->queue_timer = false;
    if (loop_stopping(mpool_loop(e->pool)))
        return;
    uint64_t now = loop_now_us();
    while (e->queue_head && e->queue_head->queued_until_us <= now) {
        rl_task *op = e->queue_head;
        e->queue_head = op->qnext;
        if (!e->queue_head)
            e->queue_tail = NULL;
        op->queued = false;
        op->res.outcome = op->cancelled ? RL_CANCELLED : RL_OVERLOADED;
        op->res.retry_after_ms = 1000;
        rl_op_answer(op);
    }
    if (e->queue_head && loop_after(mpool_loop(e->pool), e->queue_head->queued_until_us - now, rl_queue_expire, e) == 0)
        e->queue_timer = true;
}

/* Starts queued ops while there is room. */
void rl_admit_next(rl_engine *e)
{
    while (e->queue_head && e->active < e->cfg.max_active) {
        rl_task *op = e->queue_head;
        e->queue_head = op->qnext;
        if (!e->queue_head)
            e->queue_tail = NULL;
        op->queued = false;
        if (op->cancelled) {
            op->res.outcome = RL_CANCELLED;
            rl_op_answer(op);
            continue;
        }
        rl_op_run(op);
    }
}

/* Takes op out of the admission queue (a cancel). */
void rl_queue_remove(rl_task *op)
{
    rl_engine *e = op->e;
    rl_task *prev = NULL;
    for (rl_task *t = e->queue_head; t; prev = t, t = t->qnext) {
        if (t != op)
            continue;
        if (prev)
            prev->qnext = t->qnext;
        else
            e->queue_head = t->qnext;
        if (e->queue_tail == t)
            e->queue_tail = prev;
        break;
    }
    op->queued = false;
}
