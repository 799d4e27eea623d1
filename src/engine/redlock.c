/* redlock.c - see redlock.h; the engine's files are listed in
 * redlock_int.h.
 *
 * Each operation is an rl_task driven by master batch callbacks and timers, all
 * on the master pool's loop thread. The steps quote the Redlock algorithm:
 *   1. take the start time;
 *   2. try to set the key on all N masters with a short per-master timeout;
 *   3. the lock is acquired when a majority said yes and the time left
 *      (validity) is positive;
 *   4. validity = ttl - elapsed - drift;
 *   5. on failure, release on every master, even those that seemed to fail.
 */
#include "redlock_int.h"

/* ---- helpers ---- */

double rl_rng_next(rl_engine *e)
{
    uint64_t x = e->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e->rng = x;
    return (double)(x >> 11) / 9007199254740992.0;
}

uint32_t rl_all_mask(const rl_engine *e) { return e->n >= 32 ? ~0u : (1u << e->n) - 1u; }

/* Frees op once nothing points at it: answered, no timer armed, and the
 * caller has let go of its handle. */
void rl_op_maybe_free(rl_task *op)
{
    if (!op->answered || op->armed || op->caller_ref)
        return;
    rl_engine *e = op->e;
    DLIST_UNLINK(e->all, op, aprev, anext);
    free(op);
}

/* A reply that counts as a vote: an answer with at least min_ints integers
 * from a master outside restart quarantine. A quarantined master may have
 * lost keys it held before its restart, so its yes (and its view of who
 * holds a name) never makes a majority. */
bool rl_is_vote(const master_reply *r, int min_ints)
{
    return r->kind == MREPLY_VALUE && !r->quarantined && r->nints >= min_ints;
}

/* One no_quorum line per second at most while quorum is lost, with how many
 * were left out in between (log.h). */
static void log_no_quorum(rl_engine *e, int answered)
{
    unsigned long long suppressed;
    if (!log_allow(&e->quorum_log, loop_now_us(), &suppressed))
        return;
    char ok[16], total[16], more[24];
    snprintf(ok, sizeof ok, "%d", answered);
    snprintf(total, sizeof total, "%d", e->n);
    snprintf(more, sizeof more, "%llu", suppressed);
    log_event(LOG_LEVEL_WARN, "no_quorum", "masters_ok", ok, "masters_total", total,
              "suppressed_since_last", more, NULL);
}

static void count_outcome(rl_task *op)
{
    metrics *m = op->e->m;
    switch (op->res.outcome) {
    case RL_OK:
        if (op->req.op == RL_ACQUIRE) metrics_count(m, METRICS_GRANTS);
        else if (op->req.op == RL_EXTEND) metrics_count(m, METRICS_EXTENSIONS);
        else if (op->req.op == RL_RELEASE) metrics_count(m, METRICS_RELEASES);
        break;
    case RL_LOCKED: metrics_count(m, METRICS_CONFLICTS); break;
    case RL_NOT_HELD: metrics_count(m, METRICS_NOT_HELD); break;
    case RL_CANCELLED: metrics_count(m, METRICS_CANCELLED); break;
    case RL_TOO_MANY_WAITERS: metrics_count(m, METRICS_WAITERS_REFUSED); break;
    case RL_OVERLOADED: metrics_count(m, METRICS_OVERLOADED); break;
    case RL_NO_QUORUM:
        metrics_count(m, METRICS_QUORUM_MISSES);
        log_no_quorum(op->e, op->res.masters_ok);
        break;
    default: break;
    }
}

/* op stops or starts trying (e->active): an acquire that goes to sleep or
 * answers makes room for the next in the admission queue. */
/* op leaves the count of those waiting for admission. */
static void admitted(rl_task *op)
{
    if (op->admitting) {
        op->admitting = false;
        atomic_fetch_sub(&op->e->admitting, 1);
    }
}

void rl_set_active(rl_task *op, bool on)
{
    if (on)
        admitted(op);
    if (op->active == on)
        return;
    op->active = on;
    op->e->active += on ? 1 : -1;
    if (!on)
        rl_admit_next(op->e);
}

/* A waiter that leaves takes its ticket out of the name's queue: on every
 * master, or (granted) on those where its grant did not take it out; when
 * not granted it tells the waiters behind it. */
static void dequeue(rl_task *op, bool granted)
{
    rl_engine *e = op->e;
    uint32_t mask = rl_all_mask(e) & (granted && op->req.op == RL_ACQUIRE ? ~op->yes_mask : ~0u);
    op->ticket_sent = false;
    if (!mask)
        return;
    const char *args[] = {op->queue_key, op->qdl_key, op->key, op->ticket, granted ? "" : op->channel};
    size_t lens[5];
    for (int i = 0; i < 5; i++)
        lens[i] = strlen(args[i]);
    mpool_eval(e->pool, &script_dequeue, mask, 3, 5, args, lens, NULL, NULL);
}

/* Reports op->res to the caller, once. The op is freed once no timer
 * points at it and the caller let go of it (rl_finish). */
void rl_op_answer(rl_task *op)
{
    if (op->req.op == RL_ACQUIRE && op->ticket_sent && !op->answered &&
        !(op->res.outcome == RL_LOCKED && op->req.keep_ticket))
        dequeue(op, op->res.outcome == RL_OK);
    if (op->wn) {
        /* A waiter answers with the holder's time left now, not as it was
         * when it last tried. */
        uint64_t now = loop_now_us(), until = op->wn->holder_until_us;
        if (op->res.outcome == RL_LOCKED && until)
            op->res.retry_after_ms = until > now ? (long long)((until - now) / 1000ULL) : 0;
        rl_wait_leave(op);
    }
    rl_engine *e = op->e;
    admitted(op);
    if (op->req.op != RL_TURN || op->res.outcome != RL_OK || !op->caller_ref)
        rl_set_active(op, false);   /* (a turn granted keeps its place until rl_finish) */
    if (!op->answered) {
        op->answered = true;
        op->res.masters_total = e->n;
        if (op->res.outcome == RL_OK && op->res.fence > 0 && e->stale_fence)
            op->res.fence = 1;   /* test hook (REDLOCKD_TEST_BREAK) */
        count_outcome(op);
        if (op->done)
            op->done(op->arg, &op->res);
        pthread_mutex_lock(&e->lock);
        if (--e->inflight == 0)
            pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->lock);
    }
    rl_op_maybe_free(op);
}

void rl_explain_no_quorum(mpool *pool, bool guard, const master_reply *replies, rl_result *res)
{
    bool any_marker = false;
    res->masters_total = mpool_size(pool);
    res->masters_refusing = res->masters_quarantined = res->masters_down = 0;
    res->refusal[0] = res->down_reason[0] = '\0';
    for (int i = 0; i < res->masters_total; i++) {
        const master_reply *r = &replies[i];
        if (r->kind == MREPLY_ERROR) {
            if (!res->masters_refusing++)
                snprintf(res->refusal, sizeof res->refusal, "%s", r->has_str ? r->str : "error");
        } else if (r->kind == MREPLY_VALUE && r->quarantined) {
            res->masters_quarantined++;
        }
        master_status st;
        mpool_status(pool, i, &st);
        /* No answer from a master that is down: say why, as /readyz does
         * (a refused connection, AUTH, a certificate), not "in time". */
        if ((r->kind == MREPLY_FAIL || r->kind == MREPLY_NONE) && !st.up && st.reason[0] &&
            !res->masters_down++)
            snprintf(res->down_reason, sizeof res->down_reason, "%.60s: %.130s", st.addr, st.reason);
        any_marker |= st.marker == QMARK_PENDING || st.marker == QMARK_READY;
    }
    res->setup_pending = guard && res->masters_quarantined > 0 && !any_marker;
}

/* rl_explain_no_quorum into op->res. */
void rl_op_explain_no_quorum(rl_task *op, const master_reply *replies)
{
    rl_explain_no_quorum(op->e->pool, op->e->cfg.guard, replies, &op->res);
}

void rl_op_no_quorum(rl_task *op, int answered, const master_reply *replies)
{
    op->res.outcome = RL_NO_QUORUM;
    op->res.masters_ok = answered;
    rl_op_explain_no_quorum(op, replies);
    rl_op_answer(op);
}

void rl_eval_decided(rl_task *op, const mscript *s, uint32_t mask, int nkeys, int nargs,
                  const char *const *args, mpool_decide_fn decide, mpool_done_fn done)
{
    size_t lens[16];
    for (int i = 0; i < nargs; i++)
        lens[i] = strlen(args[i]);
    mpool_eval_decided(op->e->pool, s, mask, nkeys, nargs, args, lens, decide, done, op);
}

void rl_eval(rl_task *op, const mscript *s, uint32_t mask, int nkeys, int nargs,
          const char *const *args, mpool_done_fn done)
{
    rl_eval_decided(op, s, mask, nkeys, nargs, args, NULL, done);
}

/* Yes and no votes among replies: a vote is rl_is_vote with at least min_ints
 * integers, yes when its first is 1. */
static void count_votes(const rl_engine *e, const master_reply *replies, int min_ints, int *yes, int *no)
{
    *yes = *no = 0;
    for (int i = 0; i < e->n; i++) {
        if (!rl_is_vote(&replies[i], min_ints))
            continue;
        if (replies[i].ints[0] == 1)
            ++*yes;
        else
            ++*no;
    }
}

/* An acquire is decided once a majority said yes, or once so many said no
 * that the rest cannot make a majority: the masters still owed then count
 * as late (their command still runs there; acquire_voted settles or
 * releases what they may hold, knowing the grant's value). */
bool rl_acquire_decided(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    int yes, no, q = quorum_of(op->e->n);
    count_votes(op->e, replies, 2, &yes, &no);
    return yes >= q || no > op->e->n - q;
}

/* An extension is decided early only by a majority's yes: a refusal waits
 * for every answer, since cleaning up after it needs the values the masters
 * hold (a caller's own token is stored with a suffix only they tell). */
static bool extend_decided(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    int yes, no;
    count_votes(op->e, replies, 1, &yes, &no);
    return yes >= quorum_of(op->e->n);
}

/* A release is answered as done once a majority deleted: the rest cannot
 * change that (a master that misses it runs it when back). */
static bool release_decided(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    int deleted = 0;
    for (int i = 0; i < op->e->n; i++)
        deleted += replies[i].kind == MREPLY_VALUE && replies[i].nints >= 1 && replies[i].ints[0] == 1;
    return deleted >= quorum_of(op->e->n);
}

/* The guard argument of every vote script (scripts.h). */
const char *rl_guard_arg(const rl_engine *e) { return e->cfg.guard ? "1" : "0"; }

/* Releases the grant stored as value on the masters in mask, fire and
 * forget: it goes out ahead of anything sent later, and a master that
 * misses it runs it when it is back (redo_when_back). value is one grant's
 * own, so a late replay can never delete another grant. */
void rl_release_unwatched(rl_task *op, uint32_t mask, const char *value)
{
    rl_engine *e = op->e;
    const char *args[] = {op->key, op->owner_key, value, "=", ""};
    size_t lens[5];
    for (int i = 0; i < 5; i++)
        lens[i] = strlen(args[i]);
    mpool_eval(e->pool, &script_release, mask, 2, 5, args, lens, NULL, NULL);
}

/* A release or extension by a caller's token answers, from each master where
 * it matched, the stored value: the token itself, or for a caller's own token
 * (a Dapr lockOwner) the token, SCRIPT_VALUE_SEP and that grant's suffix. Releases,
 * on the masters in mask, every such value found in the replies of the
 * masters in from, other than the bare token (whose own replay already
 * matches it). A master that cannot take one now runs it when it is back;
 * each matches one grant's exact value, one this caller's request matched,
 * so a later grant of the same caller is never touched. */
void rl_release_values_seen(rl_task *op, const master_reply *replies, uint32_t from,
                         uint32_t mask)
{
    const char *seen[MASTER_MAX];
    int nseen = 0;
    for (int i = 0; mask && i < op->e->n; i++) {
        const master_reply *r = &replies[i];
        /* A value as long as the reply buffer may have been cut short. */
        if (!(from & (1u << i)) || !r->has_str || r->str_len == 0 || r->str_len >= MREPLY_STR_MAX ||
            memchr(r->str, '\0', r->str_len) || !strcmp(r->str, op->req.token))
            continue;
        bool dup = false;
        for (int k = 0; k < nseen && !dup; k++)
            dup = !strcmp(seen[k], r->str);
        if (!dup)
            seen[nseen++] = r->str;
    }
    for (int k = 0; k < nseen; k++)
        rl_release_unwatched(op, mask, seen[k]);
}

/* ---- entry ---- */

void rl_op_start(void *arg)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int n = snprintf(op->key, op->key_cap, "%s%s", e->key_prefix, op->req.name);
    snprintf(op->fence_key, op->key_cap, "%.*s%s", n, op->key, SCRIPT_FENCE_SUFFIX);
    snprintf(op->owner_key, op->key_cap, "%.*s%s", n, op->key, SCRIPT_OWNER_SUFFIX);
    if (op->req.op == RL_ACQUIRE || op->req.op == RL_DEQUEUE) {   /* the waiters' queue (fair order) */
        if (op->req.queue_name[0]) {
            snprintf(op->queue_key, op->key_cap, "%s%s%s", e->key_prefix, op->req.queue_name,
                     SCRIPT_QUEUE_SUFFIX);
            snprintf(op->qdl_key, op->key_cap, "%s%s%s", e->key_prefix, op->req.queue_name,
                     SCRIPT_QDL_SUFFIX);
        } else {
            snprintf(op->queue_key, op->key_cap, "%.*s%s", n, op->key, SCRIPT_QUEUE_SUFFIX);
            snprintf(op->qdl_key, op->key_cap, "%.*s%s", n, op->key, SCRIPT_QDL_SUFFIX);
        }
    }
    snprintf(op->ttl_str, sizeof op->ttl_str, "%lld", op->req.ttl_ms);
    snprintf(op->px_str, sizeof op->px_str, "%lld", op->req.ttl_ms + e->cfg.fence_keep_ms);
    if (e->cfg.notify && op->req.notice_name[0])   /* a semaphore's slots share one channel */
        snprintf(op->channel, op->key_cap, "%s%s%s", SCRIPT_NOTICE_PREFIX, e->key_prefix,
                 op->req.notice_name);
    else if (e->cfg.notify)
        snprintf(op->channel, op->key_cap, "%s%s", SCRIPT_NOTICE_PREFIX, op->key);
    DLIST_PUSH(e->all, op, aprev, anext);
    op->arrival_us = loop_now_us();
    if (op->req.op == RL_ACQUIRE)
        op->place_us = loop_unix_us();
    op->wait_deadline_us = op->arrival_us + (uint64_t)op->req.wait_ms * 1000ULL;
    /* New work waits its turn; extensions and releases never do: they keep
     * and end the locks already granted. */
    bool gated = op->req.queued && (op->req.op == RL_ACQUIRE || op->req.op == RL_INSPECT ||
                                    op->req.op == RL_TURN);
    if (gated && e->cfg.max_active > 0 && (e->active >= e->cfg.max_active || e->queue_head)) {
        op->queued = true;
        op->queued_until_us = op->arrival_us + (uint64_t)e->cfg.queue_ms * 1000ULL;
        if (e->queue_tail)
            e->queue_tail->qnext = op;
        else
            e->queue_head = op;
        e->queue_tail = op;
        if (!e->queue_timer && loop_after(mpool_loop(e->pool), (uint64_t)e->cfg.queue_ms * 1000ULL, rl_queue_expire, e) == 0)
            e->queue_timer = true;
        return;
    }
    rl_op_run(op);
}

void rl_op_run(rl_task *op)
{
    rl_engine *e = op->e;
    op->start_us = loop_now_us();
    if (op->req.queued && (op->req.op == RL_ACQUIRE || op->req.op == RL_INSPECT || op->req.op == RL_TURN))
        rl_set_active(op, true);

    switch (op->req.op) {
    case RL_ACQUIRE: {
        /* Each grant stores a value of its own: a fresh token, or the
         * caller's token with a fresh suffix (scripts.h). */
        char fresh[TOKEN_TEXT_LEN + 1];
        if (token_new(fresh) < 0) {
            op->res.outcome = RL_INTERNAL;
            rl_op_answer(op);
            return;
        }
        if (!op->e->unfair && (op->req.ticket[0] || op->req.wait_ms > 0)) {
            /* A waiter: its ticket holds its place among the name's waiters
             * on every master, whichever instance they came through (from
             * when it came: place_us, or the caller's ticket_since_us). */
            if (op->req.ticket_since_us > 0)
                op->place_us = op->req.ticket_since_us;
            snprintf(op->arrival_str, sizeof op->arrival_str, "%lld", op->place_us);
            if (op->req.ticket[0])
                snprintf(op->ticket, sizeof op->ticket, "%s", op->req.ticket);
            else if (token_new(op->ticket) < 0)
                op->ticket[0] = '\0';   /* (no randomness: it waits without a place) */
        }
        snprintf(op->res.token, sizeof op->res.token, "%s", op->req.token_given ? op->req.token : fresh);
        snprintf(op->value, sizeof op->value, "%s%s%s", op->res.token, op->req.token_given ? SCRIPT_VALUE_SEP : "",
                 op->req.token_given ? fresh : "");
        rl_acquire_attempt(op);
        return;
    }
    case RL_EXTEND: {
        /* A held stream's extension (keep_on_fail) waits for every master
         * (or its deadline) rather than for a majority's yes: which masters
         * answered without the token decides its next repair, and those
         * answers come last. */
        mpool_decide_fn decide = op->req.keep_on_fail ? NULL : extend_decided;
        if (op->req.repair_fence > 0) {
            char fence[24];
            snprintf(fence, sizeof fence, "%lld", op->req.repair_fence);
            const char *args[] = {op->key, op->fence_key, op->owner_key, SCRIPT_MARKER_KEY, op->req.token,
                                  op->ttl_str, op->px_str, fence, op->req.owner, rl_guard_arg(e)};
            rl_eval_decided(op, &script_renew, rl_all_mask(e), 4, 10, args, decide, rl_extend_voted);
            return;
        }
        const char *args[] = {op->key, op->fence_key, op->owner_key, SCRIPT_MARKER_KEY, op->req.token,
                              op->ttl_str, op->px_str, rl_guard_arg(e)};
        rl_eval_decided(op, &script_extend, rl_all_mask(e), 4, 8, args, decide, rl_extend_voted);
        return;
    }
    case RL_RELEASE: {
        /* The release script publishes a notice on the name's channel where
         * it deleted: only instances with waiters for it are subscribed. */
        /* A caller's token releases whichever grant of it holds (a Dapr
         * lockOwner is stored with a suffix); a later replay on a master
         * that missed it matches only the exact value (scripts.h). */
        const char *args[] = {op->key, op->owner_key, op->req.token, "~", op->channel};
        rl_eval_decided(op, &script_release, rl_all_mask(e), 2, 5, args, release_decided, rl_release_voted);
        return;
    }
    case RL_SEM_LIMIT: {
        char limit[24];
        snprintf(limit, sizeof limit, "%lld", op->req.limit);
        const char *args[] = {op->key, SCRIPT_MARKER_KEY, limit, op->ttl_str, rl_guard_arg(e)};
        rl_eval(op, &script_sem_limit, rl_all_mask(e), 2, 5, args, rl_sem_limit_voted);
        return;
    }
    case RL_DEQUEUE: {
        snprintf(op->ticket, sizeof op->ticket, "%s", op->req.ticket);
        if (op->ticket[0])
            dequeue(op, op->req.keep_ticket);   /* (granted: nobody to tell) */
        op->res.outcome = RL_OK;
        rl_op_answer(op);
        return;
    }
    case RL_PUBLISH: {
        /* Answered at once: the notice goes out ahead of anything sent
         * later, and a master that misses it misses it (watches re-read). */
        if (e->cfg.notify) {
            /* With a token: a held stream's heartbeat, "key\n\ntoken" */
            char beat[TOKEN_MAX_LEN + 3];
            snprintf(beat, sizeof beat, "%s%s", op->req.token[0] ? "\n\n" : "", op->req.token);
            const char *args[] = {op->key, op->channel, beat};
            size_t lens[] = {strlen(op->key), strlen(op->channel), strlen(beat)};
            mpool_eval(e->pool, &script_publish, rl_all_mask(e), 1, 3, args, lens, NULL, NULL);
        }
        op->res.outcome = RL_OK;
        rl_op_answer(op);
        return;
    }
    case RL_PROCLAIM: {
        const char *args[] = {op->key, op->owner_key, SCRIPT_MARKER_KEY, op->req.token, op->req.owner,
                              rl_guard_arg(e)};
        rl_eval(op, &script_proclaim, rl_all_mask(e), 3, 6, args, rl_proclaim_voted);
        return;
    }
    case RL_INSPECT: {
        const char *args[] = {op->key, op->fence_key, op->owner_key, SCRIPT_MARKER_KEY, rl_guard_arg(e)};
        rl_eval(op, &script_inspect, rl_all_mask(e), 4, 5, args, rl_inspect_voted);
        return;
    }
    case RL_FORCE: {
        const char *args[] = {op->key, op->owner_key, op->fence_key, op->channel};
        rl_eval(op, &script_force, rl_all_mask(e), 3, 4, args, rl_force_voted);
        return;
    }
    case RL_TURN:
        op->res.outcome = RL_OK;   /* admitted: the caller's work may go */
        rl_op_answer(op);
        return;
    }
}
