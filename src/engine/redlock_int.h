/* redlock_int.h - what the files of the engine share (redlock.h, in
 * engine/engine.h, is its face to the rest): the engine, its tasks and waiters, and the functions
 * one file calls in another. Which file holds what:
 *   redlock.c        a task's life: started, votes counted and decided,
 *                    answers
 *   redlock_engine.c the engine's life and its entry points: new, submit,
 *                    cancel, finish, sync, drain, close, free
 *   redlock_steps.c  each operation's steps once the masters answered:
 *                    acquire (grant, refusal, settle), extend, release,
 *                    inspect, proclaim, a semaphore's limit
 *   redlock_wait.c   waiting: acquires asleep per name until a release
 *                    notice or a timer, and the queue for a place among
 *                    max_active
 */
#ifndef RL_REDLOCK_INT_H
#define RL_REDLOCK_INT_H

#include "redlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/base.h"
#include "masters/masters.h"
#include "quorum.h"

#define RL_KEY_MAX (CONF_MAX_KEY_PREFIX + RL_INTERNAL_NAME_MAX + sizeof SCRIPT_FENCE_SUFFIX)
_Static_assert(sizeof SCRIPT_OWNER_SUFFIX <= sizeof SCRIPT_FENCE_SUFFIX, "owner key fits RL_KEY_MAX");
_Static_assert(sizeof SCRIPT_QUEUE_SUFFIX <= sizeof SCRIPT_FENCE_SUFFIX &&
               sizeof SCRIPT_QDL_SUFFIX <= sizeof SCRIPT_FENCE_SUFFIX, "queue keys fit RL_KEY_MAX");
_Static_assert(MREPLY_STR_MAX >= TOKEN_MAX_LEN + 32 + RL_OWNER_MAX, "inspect's value and owner fit");
#define RL_CHANNEL_MAX (sizeof SCRIPT_NOTICE_PREFIX + RL_KEY_MAX)
#define RL_TICKET_MARGIN_MS 500    /* a waiter's ticket outlives its wait by this much */
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
    atomic_int admitting;        /* gated requests submitted and not yet admitted (any thread
                                    reads it: rl_engine_admitting) */
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
    /* Test hook, REDLOCKD_TEST_UNFAIR: waiters draw no tickets (no fair
     * order across instances; the fault suite's negative control). */
    bool unfair;
    /* Test hooks, REDLOCKD_TEST_BREAK (base/testhook.h): stale_fence, every
     * grant answers fence 1; no_wake, a waiter sleeps out its wait. */
    bool stale_fence;
    bool no_wake;
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
    uint64_t arrival_us;         /* when it came (deadlines, the admission queue) */
    long long place_us;          /* its place among the waiters of its name: its ticket's
                                    arrival (Unix us; a campaign's, from when it began), so
                                    that a name's waiters here go in the order the masters'
                                    queue has them */
    struct wname *wn;            /* its name's waiters, while it waits */
    struct rl_task *wprev, *wnext; /* in wn's sleeping list */
    struct rl_task *aprev, *anext; /* in e->all */

    /* The keys and the channel, key_cap bytes each, in the task's own
     * allocation after it (rl_submit): as long as its names need, not
     * RL_KEY_MAX each (a task was 5 KiB, and 10,000 acquires arriving at
     * once are as many tasks). */
    size_t key_cap;
    char *key;
    char *fence_key;
    char *owner_key;
    char *queue_key;             /* acquire: the name's waiters' tickets (fair order) */
    char *qdl_key;
    char ticket[TOKEN_TEXT_LEN + 1]; /* acquire: this waiter's ticket ("" none) */
    char arrival_str[24];        /* ... and its place: Unix us of its arrival */
    bool ticket_sent;            /* an attempt carried the ticket: it may be queued */
    char value[MREPLY_STR_MAX + 1]; /* acquire: what SET stores, unique to this grant */
    char ttl_str[24];
    char px_str[24];             /* the counter's life: ttl_ms + fence_keep_ms */
    char *channel;               /* release notices of this name; "" without notices */
    uint64_t start_us;           /* step 1 of the current attempt */
    uint64_t wait_deadline_us;
    bool active;                 /* counted in e->active */
    bool admitting;              /* counted in e->admitting */
    bool queued;                 /* in e's admission queue */
    uint64_t queued_until_us;    /* answered RL_OVERLOADED then */
    struct rl_task *qnext;
    uint32_t yes_mask;           /* acquire: masters that granted this attempt */
    int at_fence;
} rl_task;

/* redlock.c */
double rl_rng_next(rl_engine *e);
uint32_t rl_all_mask(const rl_engine *e);
void rl_op_maybe_free(rl_task *op);
bool rl_is_vote(const master_reply *r, int min_ints);
void rl_set_active(rl_task *op, bool on);
void rl_op_answer(rl_task *op);
void rl_op_explain_no_quorum(rl_task *op, const master_reply *replies);
void rl_op_no_quorum(rl_task *op, int answered, const master_reply *replies);
void rl_eval_decided(rl_task *op, const mscript *s, uint32_t mask, int nkeys, int nargs,
                  const char *const *args, mpool_decide_fn decide, mpool_done_fn done);
void rl_eval(rl_task *op, const mscript *s, uint32_t mask, int nkeys, int nargs,
          const char *const *args, mpool_done_fn done);
bool rl_acquire_decided(void *arg, const master_reply *replies);
const char *rl_guard_arg(const rl_engine *e);
void rl_release_unwatched(rl_task *op, uint32_t mask, const char *value);
void rl_release_values_seen(rl_task *op, const master_reply *replies, uint32_t from,
                         uint32_t mask);
void rl_op_start(void *arg);
void rl_op_run(rl_task *op);

/* redlock_steps.c */
void rl_acquire_attempt(rl_task *op);
void rl_extend_voted(void *arg, const master_reply *replies);
void rl_proclaim_voted(void *arg, const master_reply *replies);
void rl_sem_limit_voted(void *arg, const master_reply *replies);
void rl_release_voted(void *arg, const master_reply *replies);
void rl_inspect_voted(void *arg, const master_reply *replies);
void rl_force_voted(void *arg, const master_reply *replies);

/* redlock_wait.c */
uint64_t rl_key_hash64(const char *key, size_t len);
void rl_wait_leave(rl_task *op);
void rl_acquire_refused(rl_task *op);
void rl_on_released(rl_engine *e, const char *key, size_t len);
void rl_on_notice(void *arg, const char *msg, size_t len);
void rl_queue_expire(void *arg);
void rl_admit_next(rl_engine *e);
void rl_queue_remove(rl_task *op);

#endif
