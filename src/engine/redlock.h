/* redlock.h - the Redlock engine: acquire, extend, release and inspect a lock
 * by majority vote of N independent masters.
 *
 * The engine runs every lock operation as a small state machine on the master
 * layer's event-loop thread: a request is submitted from any thread, the
 * engine fans its commands out through master.h, decides on the votes with
 * quorum.h, waits out retry delays on the loop's timers, and reports the
 * outcome exactly once through the caller's callback (on the loop thread).
 * Nothing here blocks, so a request that waits for a held lock holds no thread.
 *
 * This header includes neither HTTP nor Redis headers: the HTTP layer depends
 * on it, it depends on the master layer, never the other way round.
 */
#ifndef RL_REDLOCK_H
#define RL_REDLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

#define RL_NAME_MAX RULES_NAME_MAX
#define RL_OWNER_MAX RULES_OWNER_MAX   /* bytes of an acquire's "owner" */
/* Room for an internal name: a name and a RULES_SEP suffix (an election's,
 * a semaphore's slot or limit), which no name can address; or a Dapr lock's
 * (api.h): a keyPrefix of up to 64 bytes, "||" and a resourceId. */
#define RL_INTERNAL_NAME_MAX (RL_NAME_MAX + 72)

enum rl_op {
    RL_ACQUIRE, RL_EXTEND, RL_RELEASE, RL_INSPECT,
    RL_PROCLAIM,    /* an election's leader changes its value (owner), keeping its
                       candidate and since: only where the token holds */
    RL_PUBLISH,     /* publishes the name's notice on every master (fire and forget: an
                       election's grant, so that watches on every instance look at once) */
    RL_SEM_LIMIT,   /* a semaphore's limit: name is NAME<SEP>limit; limit 0 reads it, else
                       sets it where absent (or keeps it alive for ttl_ms) */
    RL_DEQUEUE,     /* takes ticket out of the name's queue on every master and tells the
                       waiters behind it (fire and forget: a campaign that ends between
                       rounds, a semaphore's waiter that is done) */
    RL_FORCE,       /* an operator's force release: deletes the lock whatever value holds
                       it (an admin's DELETE ?force=true); held: something was deleted,
                       with the fence and owner it had */
    RL_TURN,        /* a place among rl_config.max_active for work the caller does on the
                       masters itself (a listing's page): answered RL_OK once admitted
                       (RL_OVERLOADED past queue_ms), and kept until rl_finish; queued */
};

enum rl_outcome {
    RL_OK,          /* granted / extended / released / inspected */
    RL_LOCKED,      /* acquire: a majority answered, the name is held (or a split vote) */
    RL_NOT_HELD,    /* extend/release: the token does not hold the lock */
    RL_NO_QUORUM,   /* fewer than a majority of masters answered in time */
    RL_INTERNAL,    /* out of memory, no randomness: never a safety question */
    RL_SHUTTING_DOWN, /* the service is stopping and takes no new work */
    RL_CANCELLED,   /* the caller went away (rl_cancel): no grant was kept */
    RL_TOO_MANY_WAITERS, /* acquire: the wait would exceed max_waiters */
    RL_TOO_MANY_HOLDS,   /* acquire with hold: max_holds streams are open (HTTP layer) */
    RL_OVERLOADED,  /* acquire/inspect: no place among max_active within queue_ms */
};

enum rl_reason { RL_REASON_NONE, RL_REASON_EXPIRED, RL_REASON_HELD_BY_OTHER };

typedef struct rl_request {
    enum rl_op op;
    char name[RL_INTERNAL_NAME_MAX + 1];
    char token[TOKEN_MAX_LEN + 1];  /* extend/release; acquire when token_given */
    bool token_given;               /* the caller's own token (a Dapr lockOwner): an acquire
                                       stores it with a fresh suffix, a release deletes
                                       any grant of it */
    long long ttl_ms;               /* acquire/extend */
    long long wait_ms;              /* acquire */
    char owner[RL_OWNER_MAX + 1];   /* acquire: who holds it, for inspect ("" = none); stored
                                       beside the lock, never in its value. proclaim: the
                                       new value (what follows candidate and since) */
    bool hold;                      /* acquire: a held stream (the HTTP layer keeps it) */
    long long heartbeat_ms;         /* a held stream's client shows it is alive this often
                                       (0: never asked; hold.h) */
    long long limit;                /* sem_limit: the semaphore's limit (0: read it, -1: keep
                                       it for at least ttl_ms) */
    bool queued;                    /* acquire/inspect: waits for a place among
                                       rl_config.max_active (the lock routes' requests; the
                                       recipes and gRPC pace their own) */
    bool keep_on_fail;              /* extend: a failed extension leaves what the token still
                                       holds in place (a held stream releases it itself, once
                                       its client has been told) */
    char notice_name[RL_INTERNAL_NAME_MAX + 1]; /* its release notices go to this name's
                                       channel ("" = its own): a semaphore's slots share one */
    char ticket[TOKEN_TEXT_LEN + 1]; /* acquire: the waiter's place in the name's queue on the
                                       masters (fair order, scripts.h); "" and wait_ms > 0:
                                       the engine draws one. A campaign keeps one for all its
                                       rounds */
    long long ticket_since_us;      /* acquire with a ticket: when the waiter arrived (Unix us;
                                       0: now), its place in the queue */
    bool keep_ticket;               /* acquire: an answer RL_LOCKED leaves the ticket queued (a
                                       campaign's next round follows); any other end takes it
                                       out. dequeue: tell nobody (the waiter was granted) */
    char queue_name[RL_INTERNAL_NAME_MAX + 1]; /* acquire, dequeue: whose queue the ticket is in
                                       ("" its own name; a semaphore's slots share one) */
    long long ticket_ttl_ms;        /* acquire: how long the ticket lives (0: to the end of
                                       wait_ms, and RL_TICKET_MARGIN_MS more) */
    long long repair_fence;         /* extend (a held stream's, with a plain token): > 0 also
                                       takes the masters where the key is free, raising their
                                       counter to this fence and storing owner there as the
                                       owner record (script_renew) */
} rl_request;

typedef struct rl_result {
    enum rl_outcome outcome;
    enum rl_reason reason;            /* with RL_NOT_HELD */
    char token[TOKEN_MAX_LEN + 1];    /* acquire/extend */
    long long validity_ms;            /* time the caller may rely on the lock, counted from
                                         when it sent the request */
    long long ttl_ms;
    long long fence;
    uint64_t attempt_us;              /* acquire: when the deciding attempt began (loop_now_us
                                         clock), from which validity_ms counts; after a wait
                                         that is later than the request */
    long long retry_after_ms;         /* with RL_LOCKED, RL_TOO_MANY_WAITERS, RL_OVERLOADED */
    long long limit;                  /* sem_limit: the limit stored (RL_LOCKED: another limit
                                         is stored; read: 0 when none) */
    bool held;                        /* inspect */
    char owner[RL_OWNER_MAX + 1];     /* inspect: the holder's owner, "" when none was given */
    int masters_missing;              /* acquire/extend with RL_OK: masters that answered
                                         without the token (free, or another's): a held
                                         stream's next renewal repairs (repair_fence) */
    int masters_ok;                   /* masters that answered (with RL_NO_QUORUM) */
    int masters_total;
    /* With RL_NO_QUORUM, why fewer than a majority voted: */
    int masters_refusing;             /* answered with an error (OOM, READONLY, NOPERM ...) */
    int masters_quarantined;          /* answered, but sit out the vote (restart quarantine) */
    bool setup_pending;               /* no master is set up as part of a cluster yet:
                                         set-up waits for every master to answer */
    char refusal[100];                /* the first such error, as the master said it */
    int masters_down;                 /* not connected: no answer, and /readyz says why */
    char down_reason[200];            /* the first such master and why ("addr: reason"),
                                         as /readyz gives it */
} rl_result;

/* Called exactly once per submitted request, on the engine's thread. res is
 * valid only during the call. */
typedef void (*rl_done_fn)(void *arg, const rl_result *res);

typedef struct rl_engine rl_engine;
struct mpool;
struct metrics;

typedef struct rl_config {
    const char *key_prefix;
    double drift_factor;
    long long retry_delay_ms;
    long long max_ttl_ms;      /* for a key found without expiry */
    bool notify;               /* publish release notices and subscribe to them */
    bool guard;                /* vote scripts check the cluster marker (quarantine) */
    long long fence_keep_ms;   /* a fence counter outlives its lock by this much */
    int max_waiters;           /* acquires asleep at once; more answer RL_TOO_MANY_WAITERS */
    _Atomic int *waiters;      /* the count of those, shared by every engine of the process
                                  (NULL: the engine counts its own) */
    int max_active;            /* acquires and inspections trying at once (not asleep); more
                                  wait their turn, oldest first (0: no bound) */
    long long queue_ms;        /* how long one waits for its turn before RL_OVERLOADED */
} rl_config;

/* Creates an engine over a started master pool (not owned). cfg is copied. */
rl_engine *rl_engine_new(const rl_config *cfg, struct mpool *pool, struct metrics *m);

/* A submitted request, as its caller holds it until rl_finish. */
typedef struct rl_task rl_handle;

/* Queues req (copied) and returns at once; done(arg, result) follows on the
 * engine's thread. Returns 0, or -1 once the engine has drained or on OOM
 * (done is then never called). Requests submitted while it drains are
 * served, but an acquire does not wait for a held lock then. Safe from any
 * thread. With handle set, *handle names the request until the caller
 * passes it to rl_finish (exactly once, after done was called or when the
 * caller gives up); with handle NULL nothing needs finishing. done NULL:
 * nobody is told (fire and forget). */
int rl_submit(rl_engine *e, const rl_request *req, rl_done_fn done, void *arg, rl_handle **handle);

/* Any thread, before rl_finish: the caller has gone. A waiting acquire stops
 * waiting and answers RL_CANCELLED at once; one trying now answers so when
 * its try ends, releasing what it won. Done is still called exactly once. */
void rl_cancel(rl_engine *e, rl_handle *h);

/* Any thread, once per handle: the caller lets go. delivered false means the
 * answer never reached the caller: a grant it carried is released on every
 * master at once. */
void rl_finish(rl_engine *e, rl_handle *h, bool delivered);

/* Waits (up to timeout_ms) until every job posted to the engine before the
 * call has run and its commands went out to the masters. For shutdown:
 * releases of undelivered grants leave before the pool stops. */
void rl_engine_sync(rl_engine *e, long long timeout_ms);

/* Makes every waiting acquire answer now (RL_SHUTTING_DOWN where it was
 * refused and its wait is cut short), and later ones answer without waiting; returns once no request is in flight, or after
 * timeout_ms. Returns the number still in flight (0 on a clean drain). New
 * requests are still taken, until rl_engine_close. */
int rl_engine_drain(rl_engine *e, long long timeout_ms);

/* Notices (with --notify): hook(arg, key, len, value, vlen) is called on the
 * engine's loop for every notice that arrives (a release, with the value it
 * deleted; an RL_PUBLISH or a new subscription, with value ""), after
 * the engine's own waiters saw it. At most RL_NOTICE_HOOKS, added before
 * traffic; false when there is no room. */
#define RL_NOTICE_HOOKS 4
typedef void (*rl_notice_hook)(void *arg, const char *key, size_t len, const char *value, size_t vlen);
bool rl_engine_add_notice_hook(rl_engine *e, rl_notice_hook hook, void *arg);
/* Loop thread: hook(arg) hears no more notices (its arg may go). */
void rl_engine_remove_notice_hook(rl_engine *e, rl_notice_hook hook, void *arg);

/* True when release notices are on and a majority of the masters'
 * subscriptions work, so that a release is heard. Any thread. */
bool rl_engine_notices_up(rl_engine *e);

/* Runs fn(arg) on the engine's loop thread (for rl_engine_notice_want).
 * 0, or -1 when the loop is stopping (fn never runs). Any thread. */
int rl_engine_post(rl_engine *e, void (*fn)(void *), void *arg);

/* Loop thread: subscribes to (on) or lets go of (off) the notices of the
 * lock name; refcounted. The key a notice carries is the prefixed key
 * (rl_engine_key). No-op without --notify. */
void rl_engine_notice_want(rl_engine *e, const char *name, bool on);
/* Loop thread of pool: says in res why fewer than a majority voted, from a
 * round's replies (one per master of pool): masters_total, masters that
 * answered with an error (and the first error), those in quarantine,
 * those down (and the first one's reason, as /readyz gives it), and
 * whether the masters are not yet set up as a cluster (guard: quarantine
 * on; their markers as the pool last saw them). masters_ok is the
 * caller's. */
struct master_reply;
void rl_explain_no_quorum(struct mpool *pool, bool guard, const struct master_reply *replies, rl_result *res);

/* Loop thread: fn(arg, name, n) for each name with acquires waiting here
 * (asleep or trying again within their wait_ms): n of them. The name is
 * the engine's (an election's or a semaphore slot's holds RULES_SEP). */
typedef void (*rl_waiters_fn)(void *arg, const char *name, int n);
void rl_engine_waiters(rl_engine *e, rl_waiters_fn fn, void *arg);

/* Requests submitted that wait for a place among max_active (posted, or
 * in the admission queue): how long the admission queue is. Any thread. */
int rl_engine_admitting(const rl_engine *e);
/* The key of name (key_prefix + name) into out. */
void rl_engine_key(const rl_engine *e, const char *name, char *out, size_t outlen);

/* True once rl_engine_drain was called: waits end now (for callers that
 * wait by retrying, such as semaphores). Any thread. */
bool rl_engine_draining(rl_engine *e);

/* From now on rl_submit refuses (the caller answers 503 shutting_down);
 * what is in flight still answers. */
void rl_engine_close(rl_engine *e);

/* Frees the engine; call after rl_engine_close and before stopping the pool. */
void rl_engine_free(rl_engine *e);

#endif
