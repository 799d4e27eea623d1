/* redlock_engine.c - the engine's life (new, drain, close, free) and its
 * entry points (redlock.h). rl_submit, rl_cancel, rl_finish,
 * rl_engine_sync and rl_engine_drain post their work to the pool's loop
 * thread: a task's start to redlock.c (rl_op_start), the rest to the jobs
 * here. */
#include "redlock_int.h"

rl_engine *rl_engine_new(const rl_config *cfg, mpool *pool, metrics *m)
{
    rl_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->pool = pool;
    e->m = m;
    e->cfg = *cfg;
    snprintf(e->key_prefix, sizeof e->key_prefix, "%s", cfg->key_prefix);
    e->cfg.key_prefix = e->key_prefix;
    e->n = mpool_size(pool);
    e->nsleeping = cfg->waiters ? cfg->waiters : &e->own_sleeping;
    if (getrandom(&e->rng, sizeof e->rng, 0) != sizeof e->rng || e->rng == 0)
        e->rng = 0x9E3779B97F4A7C15ULL ^ loop_now_us();
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->idle, NULL);
    scripts_init();
    snprintf(e->seed_bound, sizeof e->seed_bound, "%lld", quorum_seed_bound_us(cfg->fence_keep_ms));
    e->unfair = getenv("REDLOCKD_TEST_UNFAIR") != NULL;
    e->stale_fence = testhook_breaks(TESTHOOK_STALE_FENCE);
    e->no_wake = testhook_breaks(TESTHOOK_NO_WAKE);
    const char *skew = getenv("REDLOCKD_TEST_SEED_SKEW_US");
    if (skew && !strcmp(skew, "off"))
        e->seed_off = true;
    else if (skew)
        e->seed_skew_us = strtoll(skew, NULL, 10);
    pthread_mutex_init(&e->sync_lock, NULL);
    pthread_mutex_init(&e->quorum_log.mu, NULL);
    pthread_cond_init(&e->sync_cond, NULL);
    if (cfg->notify)
        mpool_set_notice(pool, SCRIPT_NOTICE_PREFIX, rl_on_notice, e);
    return e;
}

/* Room for the longest of a task's keys and channel (rl_op_start): the
 * prefixes and a suffix around the longest name it names. */
static size_t key_cap_of(const rl_engine *e, const rl_request *req)
{
    size_t n = strlen(req->name), q = strlen(req->queue_name), c = strlen(req->notice_name);
    if (q > n)
        n = q;
    if (c > n)
        n = c;
    _Static_assert(sizeof SCRIPT_FENCE_SUFFIX <= 16 && sizeof SCRIPT_OWNER_SUFFIX <= 16 &&
                       sizeof SCRIPT_QUEUE_SUFFIX <= 16 && sizeof SCRIPT_QDL_SUFFIX <= 16,
                   "a key's suffix fits the room key_cap_of leaves");
    size_t cap = sizeof SCRIPT_NOTICE_PREFIX + strlen(e->key_prefix) + n + 16;
    return cap < RL_CHANNEL_MAX ? cap : RL_CHANNEL_MAX;
}

int rl_submit(rl_engine *e, const rl_request *req, rl_done_fn done, void *arg, rl_handle **handle)
{
    size_t cap = key_cap_of(e, req);
    rl_task *op = calloc(1, sizeof *op + 6 * cap);
    if (!op)
        return -1;
    op->key_cap = cap;
    char *tail = (char *)(op + 1);
    char **keys[] = {&op->key, &op->fence_key, &op->owner_key, &op->queue_key, &op->qdl_key, &op->channel};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        *keys[i] = tail + i * cap;
    op->e = e;
    op->req = *req;
    op->done = done;
    op->arg = arg;
    op->caller_ref = handle != NULL;
    if (req->queued && (req->op == RL_ACQUIRE || req->op == RL_INSPECT || req->op == RL_TURN)) {
        op->admitting = true;   /* until admitted or answered (rl_set_active, rl_op_answer) */
        atomic_fetch_add(&e->admitting, 1);
    }
    pthread_mutex_lock(&e->lock);
    if (e->closed) {
        pthread_mutex_unlock(&e->lock);
        free(op);
        return -1;
    }
    e->inflight++;
    pthread_mutex_unlock(&e->lock);
    if (handle)
        *handle = op;
    if (loop_post(mpool_loop(e->pool), rl_op_start, op) < 0) {
        pthread_mutex_lock(&e->lock);
        if (--e->inflight == 0)
            pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->lock);
        free(op);
        if (handle)
            *handle = NULL;
        return -1;
    }
    return 0;
}

static void cancel_job(void *arg)
{
    rl_task *op = arg;
    if (op->answered)
        return;
    op->cancelled = true;
    if (op->queued) {
        rl_queue_remove(op);
        op->res.outcome = RL_CANCELLED;
        rl_op_answer(op);
        return;
    }
    if (op->sleeping) {
        op->gen++;
        op->res.outcome = RL_CANCELLED;
        rl_op_answer(op);
    }
    /* Trying now: the try's end answers RL_CANCELLED, releasing a grant. */
}

void rl_cancel(rl_engine *e, rl_handle *h)
{
    if (h)
        loop_post(mpool_loop(e->pool), cancel_job, h);
}

struct finish {
    rl_task *op;
    bool delivered;
};

static void finish_job(void *arg)
{
    struct finish *f = arg;
    rl_task *op = f->op;
    if (!f->delivered && op->answered && op->req.op == RL_ACQUIRE && op->res.outcome == RL_OK) {
        /* The grant never reached its caller: release it on every master,
         * so that no lock stays held that nobody knows the token of. */
        metrics_count(op->e->m, METRICS_ABANDONED_GRANTS);
        rl_release_unwatched(op, rl_all_mask(op->e), op->value);
    }
    if (!op->answered)
        op->cancelled = true;
    op->caller_ref = false;
    if (op->req.op == RL_TURN)
        rl_set_active(op, false);   /* the caller's work is done: its place goes to the next */
    free(f);
    rl_op_maybe_free(op);
}

void rl_finish(rl_engine *e, rl_handle *h, bool delivered)
{
    if (!h)
        return;
    struct finish *f = malloc(sizeof *f);
    if (f) {
        f->op = h;
        f->delivered = delivered;
    }
    /* A delivered answer leaves only memory to free: no need to wake the
     * loop for it. An undelivered grant must be released now. */
    if (!f || (delivered ? loop_post_lazy : loop_post)(mpool_loop(e->pool), finish_job, f) < 0)
        free(f);   /* the loop is gone (or no memory): rl_engine_free frees the task */
}

static void sync_job(void *arg)
{
    rl_engine *e = arg;
    pthread_mutex_lock(&e->sync_lock);
    e->sync_seen++;
    pthread_cond_broadcast(&e->sync_cond);
    pthread_mutex_unlock(&e->sync_lock);
}

void rl_engine_sync(rl_engine *e, long long timeout_ms)
{
    struct timespec until = deadline_after_ms(timeout_ms);
    /* Two barriers: the first runs after every job posted before it; the
     * second after the loop's next write to the masters. */
    for (int round = 0; round < 2; round++) {
        pthread_mutex_lock(&e->sync_lock);
        unsigned want = e->sync_seen + 1;
        pthread_mutex_unlock(&e->sync_lock);
        if (loop_post(mpool_loop(e->pool), sync_job, e) < 0)
            return;
        pthread_mutex_lock(&e->sync_lock);
        while (e->sync_seen < want)
            if (pthread_cond_timedwait(&e->sync_cond, &e->sync_lock, &until) != 0)
                break;
        bool late = e->sync_seen < want;
        pthread_mutex_unlock(&e->sync_lock);
        if (late)
            return;
    }
}

/* On the loop thread: every sleeping acquire answers now, 503 shutting_down
 * for those still refused (their wait is cut short); those trying now
 * answer when their try ends. */
static void drain_waiting(void *arg)
{
    rl_engine *e = arg;
    for (size_t b = 0; b < RL_WTAB_SIZE; b++) {
        struct wname *w = e->wtab[b];
        while (w) {
            struct wname *next = w->next;   /* w may be freed below */
            while (w->head) {
                rl_task *op = w->head;
                op->gen++;
                if (op->res.outcome == RL_LOCKED)
                    op->res.outcome = RL_SHUTTING_DOWN;
                if (op->wn->members == 1) {   /* the last: w goes now */
                    rl_op_answer(op);            /* stays allocated until its timer fires */
                    break;
                }
                rl_op_answer(op);
            }
            w = next;
        }
    }
}

int rl_engine_drain(rl_engine *e, long long timeout_ms)
{
    atomic_store(&e->draining, true);
    loop_post(mpool_loop(e->pool), drain_waiting, e);
    struct timespec until = deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&e->lock);
    while (e->inflight > 0)
        if (pthread_cond_timedwait(&e->idle, &e->lock, &until) != 0)
            break;
    int left = e->inflight;
    pthread_mutex_unlock(&e->lock);
    return left;
}

bool rl_engine_draining(rl_engine *e)
{
    return atomic_load(&e->draining);
}

void rl_engine_close(rl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->closed = true;   /* from here rl_submit refuses */
    pthread_mutex_unlock(&e->lock);
}

void rl_engine_free(rl_engine *e)
{
    if (!e)
        return;
    /* The loop has stopped: whatever is left is freed here. */
    while (e->all) {
        rl_task *op = e->all;
        e->all = op->anext;
        free(op);
    }
    for (size_t b = 0; b < RL_WTAB_SIZE; b++)
        while (e->wtab[b]) {
            struct wname *w = e->wtab[b];
            e->wtab[b] = w->next;
            free(w);
        }
    pthread_mutex_destroy(&e->quorum_log.mu);
    pthread_cond_destroy(&e->sync_cond);
    pthread_mutex_destroy(&e->sync_lock);
    pthread_cond_destroy(&e->idle);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int rl_engine_admitting(const rl_engine *e) { return atomic_load(&e->admitting); }
