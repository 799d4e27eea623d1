/* redlock_steps.c - each operation's steps once the masters answered
 * (redlock_int.h). */
#include "redlock_int.h"

/* ---- acquire ---- */

static void acquire_after_release(void *arg, const master_reply *replies)
{
    (void)replies;   /* a master that missed it runs it when back (redo_when_back) */
    rl_acquire_refused(arg);
}

/* Step 5: release on every master that may hold our token. A refusal answers
 * (or retries) once the masters that said yes have done so, so that the name
 * is clean for whoever comes next; masters that have not answered (late, or
 * still owed when the refusal was decided) get the release behind the
 * acquire on their connection, and nobody waits for them. No quorum answers
 * at once, within the master timeout: the release goes out first, ahead of
 * anything sent later, and nobody waits for masters that are down. */
static void acquire_fail(rl_task *op, enum rl_outcome why, uint32_t mask)
{
    op->res.outcome = why;
    uint32_t unanswered = why == RL_NO_QUORUM ? mask : mask & ~op->yes_mask;
    if (unanswered)
        rl_release_unwatched(op, unanswered, op->value);
    if (why == RL_NO_QUORUM) {
        rl_op_answer(op);
    } else if (mask & op->yes_mask) {
        const char *args[] = {op->key, op->owner_key, op->value, "=", ""};
        rl_eval(op, &script_release, mask & op->yes_mask, 2, 5, args, acquire_after_release);
    } else {
        rl_acquire_refused(op);
    }
}

/* Step 3: a majority won without validity left is no lock. Release it on
 * every master and answer (or retry) as refused. */
static void acquire_lapsed(rl_task *op)
{
    metrics_count(op->e->m, METRICS_VALIDITY_EXHAUSTED);
    op->res.retry_after_ms = 0;
    acquire_fail(op, RL_LOCKED, rl_all_mask(op->e));
}

static void acquire_grant(rl_task *op)
{
    rl_engine *e = op->e;
    if (op->cancelled) {
        /* Nobody will receive this grant: release it on every master. */
        metrics_count(e->m, METRICS_ABANDONED_GRANTS);
        rl_release_unwatched(op, rl_all_mask(e), op->value);
        op->res.outcome = RL_CANCELLED;
        rl_op_answer(op);
        return;
    }
    long long elapsed_us = (long long)(loop_now_us() - op->start_us);
    long long validity = quorum_validity_ms(op->req.ttl_ms, elapsed_us, e->cfg.drift_factor);
    if (validity <= 0) {
        acquire_lapsed(op);
        return;
    }
    op->res.outcome = RL_OK;
    op->res.validity_ms = validity;
    op->res.ttl_ms = op->req.ttl_ms;
    op->res.attempt_us = op->start_us;
    uint64_t h = rl_key_hash64(op->key, strlen(op->key));
    e->seen[h & (RL_SEEN_SIZE - 1)] =
        (struct seen){h, op->start_us + (uint64_t)(op->req.ttl_ms + e->cfg.fence_keep_ms) * 1000ULL};
    if (op->wn)   /* the other waiters' next holder is this one */
        op->wn->holder_until_us = op->start_us + (uint64_t)op->req.ttl_ms * 1000ULL;
    rl_op_answer(op);
}

static void acquire_settled(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int ok = op->at_fence, answered = op->at_fence;
    for (int i = 0; i < e->n; i++) {
        if (!rl_is_vote(&replies[i], 1))
            continue;
        answered++;
        ok += replies[i].ints[0] == 1;
    }
    if (ok >= quorum_of(e->n)) {
        acquire_grant(op);
        return;
    }
    if (answered >= quorum_of(e->n)) {
        /* The masters answered but our key had already expired on some. */
        acquire_lapsed(op);
        return;
    }
    /* The fence could not be made safe on a majority: no grant. */
    op->res.masters_ok = answered;
    acquire_fail(op, RL_NO_QUORUM, rl_all_mask(e));
}

/* Sets the counter to exactly the fence on the masters in mask where the
 * grant holds (script_settle), waiting for the answers when done is set. */
static void acquire_settle(rl_task *op, uint32_t mask, mpool_done_fn done)
{
    char fence[24];
    snprintf(fence, sizeof fence, "%lld", op->res.fence);
    const char *args[] = {op->key, op->fence_key, SCRIPT_MARKER_KEY, op->value, fence, op->px_str,
                          rl_guard_arg(op->e)};
    size_t lens[7];
    for (int i = 0; i < 7; i++)
        lens[i] = strlen(args[i]);
    mpool_eval(op->e->pool, &script_settle, mask, 3, 7, args, lens, done, done ? op : NULL);
}

static void acquire_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    long long counters[MASTER_MAX] = {0};
    long long held_pttl[MASTER_MAX];
    int yes = 0, no = 0;
    uint32_t yes_mask = 0, no_mask = 0, unsent_mask = 0, late_mask = 0;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (r->kind == MREPLY_FAIL && !r->sent)
            unsent_mask |= 1u << i;
        if (r->kind == MREPLY_FAIL && r->sent)
            late_mask |= 1u << i;   /* its SET NX may still apply */
        if (!rl_is_vote(r, 2))
            continue;
        if (r->ints[0] == 1) {
            counters[i] = r->ints[1];
            yes_mask |= 1u << i;
            yes++;
        } else {
            held_pttl[no++] = r->ints[1];
            no_mask |= 1u << i;
        }
    }
    op->yes_mask = yes_mask;
    op->res.masters_missing = no;   /* held by another: a held stream's renewals take them once free */
    /* Masters that answered "held", and those the SET never reached (down or
     * lagging), cannot hold our token; all others might, a master that
     * missed its deadline too: it may still apply the SET (a paused master
     * does, on SIGCONT). Step 5 releases there when it is back. */
    uint32_t maybe_ours = rl_all_mask(e) & ~no_mask & ~unsent_mask;

    switch (quorum_decide(e->n, yes, yes + no)) {
    case QUORUM_GRANTED: {
        uint32_t raise_mask;
        op->res.fence = quorum_fence(e->n, counters, yes_mask, &raise_mask, &op->at_fence);
        if (!raise_mask) {
            /* A late SET NX gets its counter from a later clock: settle it
             * to the fence, so every holder reports the grant's fence. A
             * master still owed when acquire_decided answered counts as
             * late: its settle follows its acquire on its connection, so
             * nothing sent later (an extension) reads another counter. */
            if (late_mask)
                acquire_settle(op, late_mask, NULL);
            acquire_grant(op);
            return;
        }
        /* The counters differ: raise them to the fence on the yes masters
         * before answering, so every later majority exceeds it. */
        metrics_count(e->m, METRICS_FENCE_RAISES);
        acquire_settle(op, raise_mask | late_mask, acquire_settled);
        return;
    }
    case QUORUM_REFUSED:
        op->res.retry_after_ms =
            quorum_retry_after_ms(e->n, held_pttl, no, yes, e->cfg.max_ttl_ms);
        acquire_fail(op, RL_LOCKED, maybe_ours);
        return;
    case QUORUM_NO_QUORUM:
        op->res.masters_ok = yes + no;
        rl_op_explain_no_quorum(op, replies);
        acquire_fail(op, RL_NO_QUORUM, maybe_ours);
        return;
    }
}

/* The seed this attempt proposes: redlockd's wall clock in microseconds.
 * Every master that takes it (no counter or a lower one, and within the
 * bound of its own clock: quorum_seed_fence) ends with the same counter, so
 * a fresh name needs no raise. No margin is added: a proposal is taken
 * whether it is ahead of the master's clock or behind it, within the bound.
 * "0" (none) for a name granted here lately (struct seen). */
static void acquire_seed(const rl_task *op, char *buf, size_t len)
{
    const rl_engine *e = op->e;
    uint64_t h = rl_key_hash64(op->key, strlen(op->key));
    const struct seen *s = &e->seen[h & (RL_SEEN_SIZE - 1)];
    struct timespec ts;
    if (e->seed_off || (s->hash == h && op->start_us < s->until_us) ||
        clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        snprintf(buf, len, "0");
        return;
    }
    long long us = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000 + e->seed_skew_us;
    snprintf(buf, len, "%lld", us > 0 ? us : 0);
}

void rl_acquire_attempt(rl_task *op)
{
    char seed[24], ticket_ttl[24];
    op->start_us = loop_now_us();   /* step 1 */
    acquire_seed(op, seed, sizeof seed);
    /* A ticket lives to the end of the wait, and a little more: the
     * waiter's next attempt renews it (a dead waiter's expires). */
    uint64_t left_us = op->wait_deadline_us > op->start_us ? op->wait_deadline_us - op->start_us : 0;
    if (op->req.ticket_ttl_ms > 0)
        snprintf(ticket_ttl, sizeof ticket_ttl, "%lld", op->req.ticket_ttl_ms);
    else
        snprintf(ticket_ttl, sizeof ticket_ttl, "%llu", (unsigned long long)(left_us / 1000 + RL_TICKET_MARGIN_MS));
    const char *args[] = {op->key, op->fence_key, op->owner_key, op->queue_key, op->qdl_key, SCRIPT_MARKER_KEY,
                          op->value, op->ttl_str, op->px_str, op->req.owner, seed, op->e->seed_bound,
                          op->ticket, op->arrival_str, ticket_ttl, rl_guard_arg(op->e)};
    op->ticket_sent |= op->ticket[0] != '\0';
    rl_eval_decided(op, &script_acquire, rl_all_mask(op->e), 6, 16, args, rl_acquire_decided, acquire_voted);   /* step 2 */
}

/* ---- extend ---- */

void rl_extend_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    long long fences[MASTER_MAX];
    int yes = 0, answered = 0, missing = 0;
    bool other = false;
    uint32_t yes_mask = 0;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (!rl_is_vote(r, 1))
            continue;
        answered++;
        /* 2: a free master taken by a repair (script_renew). It does not
         * vote: only where the token already held does the lock go on. */
        if (r->ints[0] == 1) {
            fences[yes++] = r->nints >= 2 ? r->ints[1] : 0;
            yes_mask |= 1u << i;
        } else if (r->ints[0] == -1) {
            other = true;
            missing++;
        } else if (r->ints[0] == 0) {
            missing++;
        }
    }
    enum quorum_outcome q = quorum_decide(e->n, yes, answered);
    if (q == QUORUM_NO_QUORUM) {
        rl_op_no_quorum(op, answered, replies);
        return;
    }
    long long validity = quorum_validity_ms(op->req.ttl_ms, (long long)(loop_now_us() - op->start_us),
                                            e->cfg.drift_factor);
    if (q == QUORUM_GRANTED && validity > 0) {
        op->res.outcome = RL_OK;
        op->res.fence = quorum_fence_of_holders(fences, yes);
        op->res.masters_missing = missing;
        op->res.validity_ms = validity;
        op->res.ttl_ms = op->req.ttl_ms;
        snprintf(op->res.token, sizeof op->res.token, "%s", op->req.token);
        rl_op_answer(op);
        return;
    }
    /* Not held on a majority (or too slow to leave validity): the lock is
     * lost. Free what we still hold so the next owner need not wait. */
    op->res.outcome = RL_NOT_HELD;
    op->res.reason = other ? RL_REASON_HELD_BY_OTHER : RL_REASON_EXPIRED;
    if (!op->req.keep_on_fail && (yes_mask || answered < e->n)) {
        /* Every master, not only the yes votes: a quarantined or late master
         * may hold the token too. The script deletes only our own token:
         * a plain token is the stored value; a caller's own token is stored
         * with a suffix, which the yes votes told us. */
        rl_release_unwatched(op, rl_all_mask(e), op->req.token);
        rl_release_values_seen(op, replies, yes_mask, rl_all_mask(e));
    }
    rl_op_answer(op);
}

/* ---- proclaim ---- */

/* A leader's new value: stored where the token holds, on a majority. */
void rl_proclaim_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int yes = 0, answered = 0;
    bool other = false;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (!rl_is_vote(r, 1))
            continue;
        answered++;
        yes += r->ints[0] == 1;
        other |= r->ints[0] == -1;
    }
    enum quorum_outcome q = quorum_decide(e->n, yes, answered);
    if (q == QUORUM_NO_QUORUM) {
        rl_op_no_quorum(op, answered, replies);
        return;
    }
    if (q == QUORUM_GRANTED) {
        op->res.outcome = RL_OK;
        if (e->cfg.notify) {   /* watches on every instance look at once */
            const char *args[] = {op->key, op->channel};
            size_t lens[] = {strlen(op->key), strlen(op->channel)};
            mpool_eval(e->pool, &script_publish, rl_all_mask(e), 1, 2, args, lens, NULL, NULL);
        }
    } else {
        op->res.outcome = RL_NOT_HELD;
        op->res.reason = other ? RL_REASON_HELD_BY_OTHER : RL_REASON_EXPIRED;
    }
    rl_op_answer(op);
}

/* ---- a semaphore's limit ---- */

/* Set (or read) where a majority answered; any answering master that holds
 * another limit refuses the set (RL_LOCKED, with that limit): two callers
 * who disagree on the limit must not both take permits. */
void rl_sem_limit_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int answered = 0;
    long long other = 0, seen = 0;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (!rl_is_vote(r, 2))
            continue;
        answered++;
        if (r->ints[0] == 0 && !other)
            other = r->ints[1];
        if (r->ints[1] > seen)
            seen = r->ints[1];
    }
    if (answered < quorum_of(e->n)) {
        rl_op_no_quorum(op, answered, replies);
        return;
    }
    op->res.outcome = other ? RL_LOCKED : RL_OK;
    op->res.limit = other ? other : op->req.limit > 0 ? op->req.limit : seen;
    rl_op_answer(op);
}

/* ---- release ---- */

void rl_release_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int deleted = 0, answered = 0;
    bool other = false;
    uint32_t deleted_mask = 0, missed = 0;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (r->kind != MREPLY_VALUE || r->nints < 1) {
            missed |= 1u << i;
            continue;
        }
        answered++;
        deleted += r->ints[0] == 1;
        deleted_mask |= (uint32_t)(r->ints[0] == 1) << i;
        other |= r->ints[0] == -1;
    }
    /* A master that missed the release runs it when back, but as a replay
     * that matches the exact stored value, and a caller's own token is
     * stored with a suffix: send it the values the others deleted. */
    rl_release_values_seen(op, replies, deleted_mask, missed);
    if (deleted > 0) {
        op->res.outcome = RL_OK;
        if (e->cfg.notify)   /* waiters here need no notice */
            rl_on_released(e, op->key, strlen(op->key));
    } else if (answered >= quorum_of(e->n)) {
        op->res.outcome = RL_NOT_HELD;
        op->res.reason = other ? RL_REASON_HELD_BY_OTHER : RL_REASON_EXPIRED;
    } else {
        rl_op_no_quorum(op, answered, replies);
        return;
    }
    rl_op_answer(op);
}

/* ---- inspect ---- */

/* A reply {x, counter, owner_len, value .. owner} (script_inspect's and
 * script_force's): sets *vlen to the length of the value part. */
static bool value_and_owner(const master_reply *r, size_t *vlen)
{
    if (r->kind != MREPLY_VALUE || r->nints < 3 || !r->has_str || r->ints[2] < 0 || r->ints[2] > RL_OWNER_MAX ||
        (size_t)r->ints[2] > r->str_len)
        return false;
    *vlen = r->str_len - (size_t)r->ints[2];
    return true;
}

void rl_inspect_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int answered = 0;
    for (int i = 0; i < e->n; i++)
        answered += rl_is_vote(&replies[i], 1);
    if (answered < quorum_of(e->n)) {
        rl_op_no_quorum(op, answered, replies);
        return;
    }
    op->res.outcome = RL_OK;
    op->res.held = false;
    /* Each master's copy {pttl, counter, owner_len, value .. owner}; a
     * holder needs a majority. */
    quorum_copy copies[MASTER_MAX] = {0};
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        size_t vlen;
        if (!rl_is_vote(r, 3) || !value_and_owner(r, &vlen))
            continue;
        copies[i] = (quorum_copy){.value = r->str, .vlen = vlen,
                                  .pttl = r->ints[0] < 0 ? e->cfg.max_ttl_ms : r->ints[0],
                                  .counter = r->ints[1], .owner = r->str + vlen,
                                  .olen = (size_t)r->ints[2]};
    }
    int h = quorum_holder(copies, e->n, (long long)(loop_now_us() - op->start_us), e->cfg.drift_factor,
                          &op->res.validity_ms, &op->res.fence);
    if (h >= 0) {
        op->res.held = true;
        snprintf(op->res.owner, sizeof op->res.owner, "%.*s", (int)copies[h].olen, copies[h].owner);
    }
    rl_op_answer(op);
}

/* ---- force ---- */

/* An operator's force release: done once a majority answered (no master
 * that answered holds the lock any more); held when any deleted it, with
 * the largest counter and the owner it had (for the log). */
void rl_force_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int answered = 0;
    for (int i = 0; i < e->n; i++)
        answered += replies[i].kind == MREPLY_VALUE && replies[i].nints >= 1;   /* (not guarded) */
    if (answered < quorum_of(e->n)) {
        rl_op_no_quorum(op, answered, replies);
        return;
    }
    op->res.outcome = RL_OK;
    op->res.held = false;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        size_t vlen;
        if (!value_and_owner(r, &vlen) || r->ints[0] != 1)
            continue;
        op->res.held = true;
        if (r->ints[1] > op->res.fence)
            op->res.fence = r->ints[1];
        if (!op->res.owner[0] && r->ints[2] > 0)
            snprintf(op->res.owner, sizeof op->res.owner, "%.*s", (int)r->ints[2], r->str + vlen);
    }
    rl_op_answer(op);
}
