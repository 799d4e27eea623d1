/* redlock.c - see redlock.h.
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
#include "redlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "deadline.h"
#include "log.h"
#include "master.h"
#include "metrics.h"
#include "quarantine.h"
#include "quorum.h"
#include "scripts.h"

#define RL_KEY_MAX (CONF_MAX_KEY_PREFIX + RL_INTERNAL_NAME_MAX + sizeof SCRIPT_FENCE_SUFFIX)
_Static_assert(sizeof SCRIPT_OWNER_SUFFIX <= sizeof SCRIPT_FENCE_SUFFIX, "owner key fits RL_KEY_MAX");
_Static_assert(MREPLY_STR_MAX >= TOKEN_MAX_LEN + 32 + RL_OWNER_MAX, "inspect's value and owner fit");
#define RL_CHANNEL_MAX (sizeof SCRIPT_NOTICE_PREFIX + RL_KEY_MAX)
#define RL_WTAB_SIZE 4096            /* buckets of the waiter index (a power of two) */
#define RL_WAKE_MARGIN_US 1000       /* past the holder's remaining time */
#define RL_SEEN_SIZE 4096            /* names granted lately (a power of two) */

/* A name this engine granted lately, by hash: its counters live on the
 * masters until until_us (ttl plus fence keep after the grant), so its next
 * acquire proposes no seed: counter + 1 needs no TIME on the masters. A
 * wrong guess (a collision, a master that missed the grant) costs a raise,
 * never safety: any seed, or none, keeps fences increasing. */
struct seen {
    uint64_t hash;
    uint64_t until_us;
};

/* The waiters of one name: those asleep in arrival order, and how many
 * are trying now. notice_seq counts release notices, so that a try that
 * overlapped one retries at once. */
struct wname {
    struct wname *next;          /* bucket chain */
    struct rl_task *head, *tail; /* asleep, oldest first */
    int trying;
    int members;                 /* asleep + trying */
    unsigned notice_seq;
    uint64_t holder_until_us;    /* when the holder's time runs out, as last learnt */
    bool subscribed;             /* its notice channel is wanted */
    size_t len;
    char key[];
};

struct rl_engine {
    mpool *pool;
    metrics *m;
    rl_config cfg;
    char key_prefix[CONF_MAX_KEY_PREFIX + 1];
    int n;
    uint64_t rng;                /* xorshift state, loop thread only */

    pthread_mutex_t lock;        /* guards inflight and cond */
    pthread_cond_t idle;
    int inflight;                /* submitted and not yet answered */
    atomic_bool draining;        /* waiting acquires answer at once */
    bool closed;                 /* under lock: no new requests */

    /* Acquires that wait for a held lock, indexed by key: a notice or a
     * timer finds the waiters of its name in O(1). Loop thread only. */
    struct wname *wtab[RL_WTAB_SIZE];
    atomic_int own_sleeping;
    atomic_int *nsleeping;       /* waiters asleep now, bounded by max_waiters: shared by every
                                    engine of the process (rl_config.waiters), else own_sleeping */
    struct rl_task *all;         /* every live task, freed by rl_engine_free at the end */
    /* Admission (loop thread only): acquires and inspections trying now,
     * and those waiting for their turn, oldest first. Their commands go
     * out in one batch per loop turn; bounded, a batch stays small enough
     * for every master to answer it within its deadline, so overload never
     * reads as master failure. */
    int active;
    struct rl_task *queue_head, *queue_tail;
    bool queue_timer;            /* a timer is armed for the oldest one's deadline */
    pthread_mutex_t sync_lock;   /* rl_engine_sync's barrier */
    pthread_cond_t sync_cond;
    unsigned sync_seen;
    log_limit quorum_log;        /* no_quorum lines: one a second */
    rl_notice_hook hooks[RL_NOTICE_HOOKS];   /* told of every notice (rl_engine_add_notice_hook) */
    void *hook_args[RL_NOTICE_HOOKS];
    int nhooks;
    char seed_bound[24];         /* quorum_seed_bound_us of the fence keep, as ARGV */
    /* Test hook, from REDLOCKD_TEST_SEED_SKEW_US (docs/contributing.md):
     * added to every proposed seed, so a test can put the proposal out of
     * the masters' bound; "off" proposes none (the masters' own rule). */
    long long seed_skew_us;
    bool seed_off;
    struct seen seen[RL_SEEN_SIZE]; /* loop thread only */
};

typedef struct rl_task {
    rl_engine *e;
    rl_request req;
    rl_done_fn done;
    void *arg;
    rl_result res;
    bool answered;
    bool caller_ref;             /* the caller holds the handle (until rl_finish) */
    bool cancelled;              /* the caller is gone: answer without a grant */
    bool sleeping;               /* asleep in wn's list (timer or release notice) */
    unsigned gen;                /* bumped on every wake: older timers are stale */
    unsigned seen_seq;           /* wn->notice_seq when the current try began */
    int armed;                   /* timers pointing at this task */
    uint64_t arrival_us;         /* FIFO order among waiters of one name */
    struct wname *wn;            /* its name's waiters, while it waits */
    struct rl_task *wprev, *wnext; /* in wn's sleeping list */
    struct rl_task *aprev, *anext; /* in e->all */

    char key[RL_KEY_MAX];
    char fence_key[RL_KEY_MAX];
    char owner_key[RL_KEY_MAX];
    char value[MREPLY_STR_MAX + 1]; /* acquire: what SET stores, unique to this grant */
    char ttl_str[24];
    char px_str[24];             /* the counter's life: ttl_ms + fence_keep_ms */
    char channel[RL_CHANNEL_MAX]; /* release notices of this name; "" without notices */
    uint64_t start_us;           /* step 1 of the current attempt */
    uint64_t wait_deadline_us;
    bool active;                 /* counted in e->active */
    bool queued;                 /* in e's admission queue */
    uint64_t queued_until_us;    /* answered RL_OVERLOADED then */
    struct rl_task *qnext;
    uint32_t yes_mask;           /* acquire: masters that granted this attempt */
    int at_fence;
} rl_task;

/* ---- helpers ---- */

static double rng_next(rl_engine *e)
{
    uint64_t x = e->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e->rng = x;
    return (double)(x >> 11) / 9007199254740992.0;
}

static uint32_t all_mask(const rl_engine *e) { return e->n >= 32 ? ~0u : (1u << e->n) - 1u; }

/* Frees op once nothing points at it: answered, no timer armed, and the
 * caller has let go of its handle. */
static void op_maybe_free(rl_task *op)
{
    if (!op->answered || op->armed || op->caller_ref)
        return;
    rl_engine *e = op->e;
    if (op->aprev)
        op->aprev->anext = op->anext;
    else
        e->all = op->anext;
    if (op->anext)
        op->anext->aprev = op->aprev;
    free(op);
}

/* A reply that counts as a vote: an answer with at least min_ints integers
 * from a master outside restart quarantine. A quarantined master may have
 * lost keys it held before its restart, so its yes (and its view of who
 * holds a name) never makes a majority. */
static bool is_vote(const master_reply *r, int min_ints)
{
    return r->kind == MREPLY_VALUE && !r->quarantined && r->nints >= min_ints;
}

/* One no_quorum line per second at most while quorum is lost, with how many
 * were left out in between (log.h). */
static void log_no_quorum(rl_engine *e, int answered)
{
    unsigned long long suppressed;
    if (!log_allow(&e->quorum_log, mpool_now_us(), &suppressed))
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
        metrics_count(m, METRICS_NO_QUORUM);
        log_no_quorum(op->e, op->res.masters_ok);
        break;
    default: break;
    }
}

static void wait_leave(rl_task *op);
static void admit_next(rl_engine *e);

/* op stops or starts trying (e->active): an acquire that goes to sleep or
 * answers makes room for the next in the admission queue. */
static void set_active(rl_task *op, bool on)
{
    if (op->active == on)
        return;
    op->active = on;
    op->e->active += on ? 1 : -1;
    if (!on)
        admit_next(op->e);
}

/* Reports op->res to the caller, once. The op is freed once no timer
 * points at it and the caller let go of it (rl_finish). */
static void op_answer(rl_task *op)
{
    if (op->wn) {
        /* A waiter answers with the holder's time left now, not as it was
         * when it last tried. */
        uint64_t now = mpool_now_us(), until = op->wn->holder_until_us;
        if (op->res.outcome == RL_LOCKED && until)
            op->res.retry_after_ms = until > now ? (long long)((until - now) / 1000ULL) : 0;
        wait_leave(op);
    }
    rl_engine *e = op->e;
    set_active(op, false);
    if (!op->answered) {
        op->answered = true;
        op->res.masters_total = e->n;
        count_outcome(op);
        op->done(op->arg, &op->res);
        pthread_mutex_lock(&e->lock);
        if (--e->inflight == 0)
            pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->lock);
    }
    op_maybe_free(op);
}

/* Says in op->res why fewer than a majority voted, from a round's replies:
 * masters that answered with an error, those in quarantine, and whether
 * the masters are not yet set up as a cluster (their markers, as the pool
 * last saw them). */
static void explain_no_quorum(rl_task *op, const master_reply *replies)
{
    rl_engine *e = op->e;
    rl_result *res = &op->res;
    bool any_marker = false;
    res->masters_refusing = res->masters_quarantined = 0;
    res->refusal[0] = '\0';
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (r->kind == MREPLY_ERROR) {
            if (!res->masters_refusing++)
                snprintf(res->refusal, sizeof res->refusal, "%s", r->has_str ? r->str : "error");
        } else if (r->kind == MREPLY_VALUE && r->quarantined) {
            res->masters_quarantined++;
        }
        master_status st;
        mpool_status(e->pool, i, &st);
        any_marker |= st.marker == QMARK_PENDING || st.marker == QMARK_READY;
    }
    res->setup_pending = e->cfg.guard && res->masters_quarantined > 0 && !any_marker;
}

static void op_no_quorum(rl_task *op, int answered, const master_reply *replies)
{
    op->res.outcome = RL_NO_QUORUM;
    op->res.masters_ok = answered;
    explain_no_quorum(op, replies);
    op_answer(op);
}

static void eval_decided(rl_task *op, const mscript *s, uint32_t mask, int nkeys, int nargs,
                         const char *const *args, mpool_decide_fn decide, mpool_done_fn done)
{
    size_t lens[12];
    for (int i = 0; i < nargs; i++)
        lens[i] = strlen(args[i]);
    mpool_eval_decided(op->e->pool, s, mask, nkeys, nargs, args, lens, decide, done, op);
}

static void eval(rl_task *op, const mscript *s, uint32_t mask, int nkeys, int nargs,
                 const char *const *args, mpool_done_fn done)
{
    eval_decided(op, s, mask, nkeys, nargs, args, NULL, done);
}

/* Yes and no votes among replies: a vote is is_vote with at least min_ints
 * integers, yes when its first is 1. */
static void count_votes(const rl_engine *e, const master_reply *replies, int min_ints, int *yes, int *no)
{
    *yes = *no = 0;
    for (int i = 0; i < e->n; i++) {
        if (!is_vote(&replies[i], min_ints))
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
static bool acquire_decided(void *arg, const master_reply *replies)
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
static const char *guard_arg(const rl_engine *e) { return e->cfg.guard ? "1" : "0"; }

/* Releases the grant stored as value on the masters in mask, fire and
 * forget: it goes out ahead of anything sent later, and a master that
 * misses it runs it when it is back (redo_when_back). value is one grant's
 * own, so a late replay can never delete another grant. */
static void release_unwatched(rl_task *op, uint32_t mask, const char *value)
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
 * (a Dapr lockOwner) the token, a space and that grant's suffix. Releases,
 * on the masters in mask, every such value found in the replies of the
 * masters in from, other than the bare token (whose own replay already
 * matches it). A master that cannot take one now runs it when it is back;
 * each matches one grant's exact value, one this caller's request matched,
 * so a later grant of the same caller is never touched. */
static void release_values_seen(rl_task *op, const master_reply *replies, uint32_t from,
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
        release_unwatched(op, mask, seen[k]);
}

/* ---- acquire ---- */

static void acquire_attempt(rl_task *op);

/* ---- the waiter index ---- */

static uint64_t key_hash64(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

static size_t key_hash(const char *key, size_t len)
{
    return (size_t)(key_hash64(key, len) & (RL_WTAB_SIZE - 1));
}

static struct wname *wname_find(rl_engine *e, const char *key, size_t len)
{
    for (struct wname *w = e->wtab[key_hash(key, len)]; w; w = w->next)
        if (w->len == len && !memcmp(w->key, key, len))
            return w;
    return NULL;
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
    while (after && after->arrival_us > op->arrival_us)
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
static void wait_leave(rl_task *op)
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
        set_active(op, true);   /* admitted once: a waiter's turn is not queued again */
    op->wn->trying++;
    op->seen_seq = op->wn->notice_seq;
    op->gen++;
    metrics_count(op->e->m, METRICS_ACQUIRE_RETRIES);
    acquire_attempt(op);
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
    if (op->answered || mpool_is_stopping(op->e->pool)) {
        /* Answered while asleep (a drain, a cancel), or the loop is ending:
         * nothing to do but let go. */
        if (!op->answered && op->wn)
            wait_leave(op);
        if (!op->answered && mpool_is_stopping(op->e->pool))
            op->answered = true;   /* the caller is gone with the HTTP server */
        op_maybe_free(op);
        return;
    }
    if (gen != op->gen || !op->sleeping)
        return;                  /* woken earlier by a release notice */
    if (mpool_now_us() >= op->wait_deadline_us) {
        op_answer(op);           /* its own wait_ms is over: 409, on time */
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
        uint64_t now = mpool_now_us();
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
    uint64_t now = mpool_now_us();
    uint64_t left_us = op->wait_deadline_us > now ? op->wait_deadline_us - now : 0;
    uint64_t delay_us;
    if (e->cfg.notify && op->res.retry_after_ms > 0 && mpool_notices_up(e->pool))
        delay_us = (uint64_t)op->res.retry_after_ms * 1000ULL + RL_WAKE_MARGIN_US;
    else
        delay_us = (uint64_t)quorum_retry_delay_ms(e->cfg.retry_delay_ms, rng_next(e),
                                                   op->res.retry_after_ms,
                                                   (long long)((left_us + 999) / 1000)) * 1000ULL;
    if (delay_us > left_us)
        delay_us = left_us;
    struct wake *w = malloc(sizeof *w);
    if (!w || mpool_after(e->pool, delay_us, acquire_timer, w) < 0) {
        free(w);
        op_answer(op);
        return;
    }
    w->op = op;
    w->gen = op->gen;
    op->armed++;
    sleepers_insert(op);
    set_active(op, false);
}

/* The attempt failed with a majority answering: wait within wait_ms, else
 * answer 409 locked. */
static void acquire_refused(rl_task *op)
{
    rl_engine *e = op->e;
    op->res.outcome = op->cancelled ? RL_CANCELLED : RL_LOCKED;
    uint64_t now = mpool_now_us();
    if (op->cancelled || now >= op->wait_deadline_us || atomic_load(&e->draining)) {
        op_answer(op);
        return;
    }
    if (!op->wn && !wait_join(op)) {
        op_answer(op);
        return;
    }
    if (op->res.retry_after_ms > 0)
        op->wn->holder_until_us = now + (uint64_t)op->res.retry_after_ms * 1000ULL;
    if (op->seen_seq != op->wn->notice_seq) {
        /* Released while we tried: the try may have come first. */
        op->seen_seq = op->wn->notice_seq;
        metrics_count(e->m, METRICS_ACQUIRE_RETRIES);
        acquire_attempt(op);
        return;
    }
    if (atomic_load(e->nsleeping) >= e->cfg.max_waiters) {
        op->res.outcome = RL_TOO_MANY_WAITERS;
        op_answer(op);
        return;
    }
    acquire_sleep(op);
}

/* A lock was released (here, or on another instance: a notice from a
 * master), or its notices just became subscribed. The oldest waiter asleep
 * tries at once, unless one of its waiters is trying already (it sees the
 * notice when its try ends). Loop thread. */
static void on_released(rl_engine *e, const char *key, size_t len)
{
    struct wname *w = wname_find(e, key, len);
    if (!w)
        return;
    w->notice_seq++;
    if (w->trying == 0 && w->head) {
        metrics_count(e->m, METRICS_HANDOFF_WAKES);
        acquire_wake_now(w->head);
    }
}

static void on_notice(void *arg, const char *msg, size_t len)
{
    rl_engine *e = arg;
    on_released(e, msg, len);
    for (int i = 0; i < e->nhooks; i++)
        e->hooks[i](e->hook_args[i], msg, len);
}

bool rl_engine_add_notice_hook(rl_engine *e, rl_notice_hook hook, void *arg)
{
    if (e->nhooks == RL_NOTICE_HOOKS)
        return false;
    e->hooks[e->nhooks] = hook;
    e->hook_args[e->nhooks++] = arg;
    return true;
}

bool rl_engine_notices_up(rl_engine *e)
{
    return e->cfg.notify && mpool_notices_up(e->pool);
}

int rl_engine_post(rl_engine *e, void (*fn)(void *), void *arg)
{
    return mpool_post(e->pool, fn, arg);
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

static void acquire_after_release(void *arg, const master_reply *replies)
{
    (void)replies;   /* a master that missed it runs it when back (redo_when_back) */
    acquire_refused(arg);
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
        release_unwatched(op, unanswered, op->value);
    if (why == RL_NO_QUORUM) {
        op_answer(op);
    } else if (mask & op->yes_mask) {
        const char *args[] = {op->key, op->owner_key, op->value, "=", ""};
        eval(op, &script_release, mask & op->yes_mask, 2, 5, args, acquire_after_release);
    } else {
        acquire_refused(op);
    }
}

/* Step 3: a majority won without validity left is no lock. Release it on
 * every master and answer (or retry) as refused. */
static void acquire_lapsed(rl_task *op)
{
    metrics_count(op->e->m, METRICS_VALIDITY_EXHAUSTED);
    op->res.retry_after_ms = 0;
    acquire_fail(op, RL_LOCKED, all_mask(op->e));
}

static void acquire_grant(rl_task *op)
{
    rl_engine *e = op->e;
    if (op->cancelled) {
        /* Nobody will receive this grant: release it on every master. */
        metrics_count(e->m, METRICS_ABANDONED_GRANTS);
        release_unwatched(op, all_mask(e), op->value);
        op->res.outcome = RL_CANCELLED;
        op_answer(op);
        return;
    }
    long long elapsed_us = (long long)(mpool_now_us() - op->start_us);
    long long validity = quorum_validity_ms(op->req.ttl_ms, elapsed_us, e->cfg.drift_factor);
    if (validity <= 0) {
        acquire_lapsed(op);
        return;
    }
    op->res.outcome = RL_OK;
    op->res.validity_ms = validity;
    op->res.ttl_ms = op->req.ttl_ms;
    op->res.attempt_us = op->start_us;
    uint64_t h = key_hash64(op->key, strlen(op->key));
    e->seen[h & (RL_SEEN_SIZE - 1)] =
        (struct seen){h, op->start_us + (uint64_t)(op->req.ttl_ms + e->cfg.fence_keep_ms) * 1000ULL};
    if (op->wn)   /* the other waiters' next holder is this one */
        op->wn->holder_until_us = op->start_us + (uint64_t)op->req.ttl_ms * 1000ULL;
    op_answer(op);
}

static void acquire_settled(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int ok = op->at_fence, answered = op->at_fence;
    for (int i = 0; i < e->n; i++) {
        if (!is_vote(&replies[i], 1))
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
    acquire_fail(op, RL_NO_QUORUM, all_mask(e));
}

/* Sets the counter to exactly the fence on the masters in mask where the
 * grant holds (script_settle), waiting for the answers when done is set. */
static void acquire_settle(rl_task *op, uint32_t mask, mpool_done_fn done)
{
    char fence[24];
    snprintf(fence, sizeof fence, "%lld", op->res.fence);
    const char *args[] = {op->key, op->fence_key, SCRIPT_MARKER_KEY, op->value, fence, op->px_str,
                          guard_arg(op->e)};
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
        if (!is_vote(r, 2))
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
    /* Masters that answered "held", and those the SET never reached (down or
     * lagging), cannot hold our token; all others might, a master that
     * missed its deadline too: it may still apply the SET (a paused master
     * does, on SIGCONT). Step 5 releases there when it is back. */
    uint32_t maybe_ours = all_mask(e) & ~no_mask & ~unsent_mask;

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
        explain_no_quorum(op, replies);
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
    uint64_t h = key_hash64(op->key, strlen(op->key));
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

static void acquire_attempt(rl_task *op)
{
    char seed[24];
    op->start_us = mpool_now_us();   /* step 1 */
    acquire_seed(op, seed, sizeof seed);
    const char *args[] = {op->key, op->fence_key, op->owner_key, SCRIPT_MARKER_KEY, op->value,
                          op->ttl_str, op->px_str, op->req.owner, seed, op->e->seed_bound,
                          guard_arg(op->e)};
    eval_decided(op, &script_acquire, all_mask(op->e), 4, 11, args, acquire_decided, acquire_voted);   /* step 2 */
}

/* ---- extend ---- */

static void extend_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    long long fences[MASTER_MAX];
    int yes = 0, answered = 0;
    bool other = false;
    uint32_t yes_mask = 0;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (!is_vote(r, 1))
            continue;
        answered++;
        if (r->ints[0] == 1) {
            fences[yes++] = r->nints >= 2 ? r->ints[1] : 0;
            yes_mask |= 1u << i;
        } else if (r->ints[0] == -1) {
            other = true;
        }
    }
    enum quorum_outcome q = quorum_decide(e->n, yes, answered);
    if (q == QUORUM_NO_QUORUM) {
        op_no_quorum(op, answered, replies);
        return;
    }
    long long validity = quorum_validity_ms(op->req.ttl_ms, (long long)(mpool_now_us() - op->start_us),
                                            e->cfg.drift_factor);
    if (q == QUORUM_GRANTED && validity > 0) {
        op->res.outcome = RL_OK;
        op->res.fence = quorum_fence_of_holders(fences, yes);
        op->res.validity_ms = validity;
        op->res.ttl_ms = op->req.ttl_ms;
        snprintf(op->res.token, sizeof op->res.token, "%s", op->req.token);
        op_answer(op);
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
        release_unwatched(op, all_mask(e), op->req.token);
        release_values_seen(op, replies, yes_mask, all_mask(e));
    }
    op_answer(op);
}

/* ---- proclaim ---- */

/* A leader's new value: stored where the token holds, on a majority. */
static void proclaim_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int yes = 0, answered = 0;
    bool other = false;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (!is_vote(r, 1))
            continue;
        answered++;
        yes += r->ints[0] == 1;
        other |= r->ints[0] == -1;
    }
    enum quorum_outcome q = quorum_decide(e->n, yes, answered);
    if (q == QUORUM_NO_QUORUM) {
        op_no_quorum(op, answered, replies);
        return;
    }
    if (q == QUORUM_GRANTED) {
        op->res.outcome = RL_OK;
        if (e->cfg.notify) {   /* watches on every instance look at once */
            const char *args[] = {op->key, op->channel};
            size_t lens[] = {strlen(op->key), strlen(op->channel)};
            mpool_eval(e->pool, &script_publish, all_mask(e), 1, 2, args, lens, NULL, NULL);
        }
    } else {
        op->res.outcome = RL_NOT_HELD;
        op->res.reason = other ? RL_REASON_HELD_BY_OTHER : RL_REASON_EXPIRED;
    }
    op_answer(op);
}

/* ---- a semaphore's limit ---- */

/* Set (or read) where a majority answered; any answering master that holds
 * another limit refuses the set (RL_LOCKED, with that limit): two callers
 * who disagree on the limit must not both take permits. */
static void sem_limit_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int answered = 0;
    long long other = 0, seen = 0;
    for (int i = 0; i < e->n; i++) {
        const master_reply *r = &replies[i];
        if (!is_vote(r, 2))
            continue;
        answered++;
        if (r->ints[0] == 0 && !other)
            other = r->ints[1];
        if (r->ints[1] > seen)
            seen = r->ints[1];
    }
    if (answered < quorum_of(e->n)) {
        op_no_quorum(op, answered, replies);
        return;
    }
    op->res.outcome = other ? RL_LOCKED : RL_OK;
    op->res.limit = other ? other : op->req.limit > 0 ? op->req.limit : seen;
    op_answer(op);
}

/* ---- release ---- */

static void release_voted(void *arg, const master_reply *replies)
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
    release_values_seen(op, replies, deleted_mask, missed);
    if (deleted > 0) {
        op->res.outcome = RL_OK;
        if (e->cfg.notify)   /* waiters here need no notice */
            on_released(e, op->key, strlen(op->key));
    } else if (answered >= quorum_of(e->n)) {
        op->res.outcome = RL_NOT_HELD;
        op->res.reason = other ? RL_REASON_HELD_BY_OTHER : RL_REASON_EXPIRED;
    } else {
        op_no_quorum(op, answered, replies);
        return;
    }
    op_answer(op);
}

/* ---- inspect ---- */

/* An inspect vote that names a holder: {pttl, counter, owner_len, value ..
 * owner}. Sets *vlen to the length of the value part. */
static bool inspect_value(const master_reply *r, size_t *vlen)
{
    if (!is_vote(r, 3) || !r->has_str || r->ints[2] < 0 || r->ints[2] > RL_OWNER_MAX ||
        (size_t)r->ints[2] > r->str_len)
        return false;
    *vlen = r->str_len - (size_t)r->ints[2];
    return true;
}

static void inspect_voted(void *arg, const master_reply *replies)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int q = quorum_of(e->n);
    int answered = 0;
    for (int i = 0; i < e->n; i++)
        answered += is_vote(&replies[i], 1);
    if (answered < q) {
        op_no_quorum(op, answered, replies);
        return;
    }
    op->res.outcome = RL_OK;
    op->res.held = false;
    /* Group the masters by the token they hold; a holder needs a majority. */
    for (int i = 0; i < e->n; i++) {
        const master_reply *a = &replies[i];
        size_t alen;
        if (!inspect_value(a, &alen))
            continue;
        long long pttls[MASTER_MAX], fences[MASTER_MAX];
        int agree = 0;
        const master_reply *owner = NULL;
        for (int j = 0; j < e->n; j++) {
            const master_reply *b = &replies[j];
            size_t blen;
            if (!inspect_value(b, &blen) || blen != alen || memcmp(a->str, b->str, alen))
                continue;
            fences[agree] = b->ints[1];
            pttls[agree++] = b->ints[0] < 0 ? e->cfg.max_ttl_ms : b->ints[0];
            if (!owner && b->ints[2] > 0)
                owner = b;
        }
        if (agree < q)
            continue;
        long long remaining = quorum_kth_largest(pttls, agree, q);
        long long validity = quorum_validity_ms(remaining, (long long)(mpool_now_us() - op->start_us),
                                                e->cfg.drift_factor);
        if (validity > 0) {
            op->res.held = true;
            op->res.validity_ms = validity;
            op->res.fence = quorum_fence_of_holders(fences, agree);
            if (owner)
                snprintf(op->res.owner, sizeof op->res.owner, "%.*s", (int)owner->ints[2],
                         owner->str + owner->str_len - (size_t)owner->ints[2]);
        }
        break;
    }
    op_answer(op);
}

/* ---- entry ---- */

static void op_run(rl_task *op);

/* Answers RL_OVERLOADED to every queued op whose turn did not come in time,
 * and arms the timer for the next deadline. */
static void queue_expire(void *arg)
{
    rl_engine *e = arg;
    e->queue_timer = false;
    if (mpool_is_stopping(e->pool))
        return;
    uint64_t now = mpool_now_us();
    while (e->queue_head && e->queue_head->queued_until_us <= now) {
        rl_task *op = e->queue_head;
        e->queue_head = op->qnext;
        if (!e->queue_head)
            e->queue_tail = NULL;
        op->queued = false;
        op->res.outcome = op->cancelled ? RL_CANCELLED : RL_OVERLOADED;
        op->res.retry_after_ms = 1000;
        op_answer(op);
    }
    if (e->queue_head && mpool_after(e->pool, e->queue_head->queued_until_us - now, queue_expire, e) == 0)
        e->queue_timer = true;
}

/* Starts queued ops while there is room. */
static void admit_next(rl_engine *e)
{
    while (e->queue_head && e->active < e->cfg.max_active) {
        rl_task *op = e->queue_head;
        e->queue_head = op->qnext;
        if (!e->queue_head)
            e->queue_tail = NULL;
        op->queued = false;
        if (op->cancelled) {
            op->res.outcome = RL_CANCELLED;
            op_answer(op);
            continue;
        }
        op_run(op);
    }
}

/* Takes op out of the admission queue (a cancel). */
static void queue_remove(rl_task *op)
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

static void op_start(void *arg)
{
    rl_task *op = arg;
    rl_engine *e = op->e;
    int n = snprintf(op->key, sizeof op->key, "%s%s", e->key_prefix, op->req.name);
    snprintf(op->fence_key, sizeof op->fence_key, "%.*s%s", n, op->key, SCRIPT_FENCE_SUFFIX);
    snprintf(op->owner_key, sizeof op->owner_key, "%.*s%s", n, op->key, SCRIPT_OWNER_SUFFIX);
    snprintf(op->ttl_str, sizeof op->ttl_str, "%lld", op->req.ttl_ms);
    snprintf(op->px_str, sizeof op->px_str, "%lld", op->req.ttl_ms + e->cfg.fence_keep_ms);
    if (e->cfg.notify && op->req.notice_name[0])   /* a semaphore's slots share one channel */
        snprintf(op->channel, sizeof op->channel, "%s%s%s", SCRIPT_NOTICE_PREFIX, e->key_prefix,
                 op->req.notice_name);
    else if (e->cfg.notify)
        snprintf(op->channel, sizeof op->channel, "%s%s", SCRIPT_NOTICE_PREFIX, op->key);
    op->anext = e->all;
    if (e->all)
        e->all->aprev = op;
    e->all = op;
    op->arrival_us = mpool_now_us();
    op->wait_deadline_us = op->arrival_us + (uint64_t)op->req.wait_ms * 1000ULL;
    /* New work waits its turn; extensions and releases never do: they keep
     * and end the locks already granted. */
    bool gated = op->req.queued && (op->req.op == RL_ACQUIRE || op->req.op == RL_INSPECT);
    if (gated && e->cfg.max_active > 0 && (e->active >= e->cfg.max_active || e->queue_head)) {
        op->queued = true;
        op->queued_until_us = op->arrival_us + (uint64_t)e->cfg.queue_ms * 1000ULL;
        if (e->queue_tail)
            e->queue_tail->qnext = op;
        else
            e->queue_head = op;
        e->queue_tail = op;
        if (!e->queue_timer && mpool_after(e->pool, (uint64_t)e->cfg.queue_ms * 1000ULL, queue_expire, e) == 0)
            e->queue_timer = true;
        return;
    }
    op_run(op);
}

static void op_run(rl_task *op)
{
    rl_engine *e = op->e;
    op->start_us = mpool_now_us();
    if (op->req.queued && (op->req.op == RL_ACQUIRE || op->req.op == RL_INSPECT))
        set_active(op, true);

    switch (op->req.op) {
    case RL_ACQUIRE:
        /* Each grant stores a value of its own: a fresh token, or the
         * caller's token with a fresh suffix (scripts.h). */
        char fresh[TOKEN_TEXT_LEN + 1];
        if (token_new(fresh) < 0) {
            op->res.outcome = RL_INTERNAL;
            op_answer(op);
            return;
        }
        snprintf(op->res.token, sizeof op->res.token, "%s", op->req.token_given ? op->req.token : fresh);
        snprintf(op->value, sizeof op->value, "%s%s%s", op->res.token, op->req.token_given ? " " : "",
                 op->req.token_given ? fresh : "");
        acquire_attempt(op);
        return;
    case RL_EXTEND: {
        const char *args[] = {op->key, op->fence_key, op->owner_key, SCRIPT_MARKER_KEY, op->req.token,
                              op->ttl_str, op->px_str, guard_arg(e)};
        eval_decided(op, &script_extend, all_mask(e), 4, 8, args, extend_decided, extend_voted);
        return;
    }
    case RL_RELEASE: {
        /* The release script publishes a notice on the name's channel where
         * it deleted: only instances with waiters for it are subscribed. */
        /* A caller's token releases whichever grant of it holds (a Dapr
         * lockOwner is stored with a suffix); a later replay on a master
         * that missed it matches only the exact value (scripts.h). */
        const char *args[] = {op->key, op->owner_key, op->req.token, "~", op->channel};
        eval_decided(op, &script_release, all_mask(e), 2, 5, args, release_decided, release_voted);
        return;
    }
    case RL_SEM_LIMIT: {
        char limit[24];
        snprintf(limit, sizeof limit, "%lld", op->req.limit);
        const char *args[] = {op->key, SCRIPT_MARKER_KEY, limit, op->ttl_str, guard_arg(e)};
        eval(op, &script_sem_limit, all_mask(e), 2, 5, args, sem_limit_voted);
        return;
    }
    case RL_PUBLISH: {
        /* Answered at once: the notice goes out ahead of anything sent
         * later, and a master that misses it misses it (watches re-read). */
        if (e->cfg.notify) {
            const char *args[] = {op->key, op->channel};
            size_t lens[] = {strlen(op->key), strlen(op->channel)};
            mpool_eval(e->pool, &script_publish, all_mask(e), 1, 2, args, lens, NULL, NULL);
        }
        op->res.outcome = RL_OK;
        op_answer(op);
        return;
    }
    case RL_PROCLAIM: {
        const char *args[] = {op->key, op->owner_key, SCRIPT_MARKER_KEY, op->req.token, op->req.owner,
                              guard_arg(e)};
        eval(op, &script_proclaim, all_mask(e), 3, 6, args, proclaim_voted);
        return;
    }
    case RL_INSPECT: {
        const char *args[] = {op->key, op->fence_key, op->owner_key, SCRIPT_MARKER_KEY, guard_arg(e)};
        eval(op, &script_inspect, all_mask(e), 4, 5, args, inspect_voted);
        return;
    }
    }
}

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
        e->rng = 0x9E3779B97F4A7C15ULL ^ mpool_now_us();
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->idle, NULL);
    scripts_init();
    snprintf(e->seed_bound, sizeof e->seed_bound, "%lld", quorum_seed_bound_us(cfg->fence_keep_ms));
    const char *skew = getenv("REDLOCKD_TEST_SEED_SKEW_US");
    if (skew && !strcmp(skew, "off"))
        e->seed_off = true;
    else if (skew)
        e->seed_skew_us = strtoll(skew, NULL, 10);
    pthread_mutex_init(&e->sync_lock, NULL);
    pthread_mutex_init(&e->quorum_log.mu, NULL);
    pthread_cond_init(&e->sync_cond, NULL);
    if (cfg->notify)
        mpool_set_notice(pool, SCRIPT_NOTICE_PREFIX, on_notice, e);
    return e;
}

int rl_submit(rl_engine *e, const rl_request *req, rl_done_fn done, void *arg, rl_handle **handle)
{
    rl_task *op = calloc(1, sizeof *op);
    if (!op)
        return -1;
    op->e = e;
    op->req = *req;
    op->done = done;
    op->arg = arg;
    op->caller_ref = handle != NULL;
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
    if (mpool_post(e->pool, op_start, op) < 0) {
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
        queue_remove(op);
        op->res.outcome = RL_CANCELLED;
        op_answer(op);
        return;
    }
    if (op->sleeping) {
        op->gen++;
        op->res.outcome = RL_CANCELLED;
        op_answer(op);
    }
    /* Trying now: the try's end answers RL_CANCELLED, releasing a grant. */
}

void rl_cancel(rl_engine *e, rl_handle *h)
{
    if (h)
        mpool_post(e->pool, cancel_job, h);
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
        release_unwatched(op, all_mask(op->e), op->value);
    }
    if (!op->answered)
        op->cancelled = true;
    op->caller_ref = false;
    free(f);
    op_maybe_free(op);
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
    if (!f || (delivered ? mpool_post_lazy : mpool_post)(e->pool, finish_job, f) < 0)
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
        if (mpool_post(e->pool, sync_job, e) < 0)
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

/* On the loop thread: every sleeping acquire answers with its last outcome;
 * those trying now answer when their try ends. */
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
                if (op->wn->members == 1) {   /* the last: w goes now */
                    op_answer(op);            /* stays allocated until its timer fires */
                    break;
                }
                op_answer(op);
            }
            w = next;
        }
    }
}

int rl_engine_drain(rl_engine *e, long long timeout_ms)
{
    atomic_store(&e->draining, true);
    mpool_post(e->pool, drain_waiting, e);
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
