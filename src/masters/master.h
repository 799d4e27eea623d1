/* master.h - the master layer: one connection per Redis master, all owned by
 * one event-loop thread. A process runs one pool per event loop (--threads);
 * pools share nothing but the masters themselves.
 *
 * The pool is the client of an event loop (loop.h, mpool_loop): its
 * thread polls the masters' sockets and any other event source of the loop
 * (loop_set_io: the loop's HTTP server). Work reaches it through loop_post
 * (any thread); everything else here is called on the loop thread only,
 * from posted jobs, batch callbacks or loop timers.
 *
 * A batch sends one Lua script (EVALSHA, falling back to EVAL on NOSCRIPT) to a
 * set of masters at once: commands are appended to each connection's buffer
 * and every buffer is flushed before any reply is read, so the masters work in
 * parallel, and commands of concurrent batches share one write per master
 * (pipelining). Group commit goes further: a master's script commands are
 * held, in order, until the turn's write, or until it has answered its
 * last write; then runs of MSCRIPT_GROUP_MIN or more of one group
 * (mscript.group) go as one call of the group script, which runs each in
 * order and answers each its own result (the master pays its per-call
 * cost once), and the rest go alone. The batch completes when every master
 * asked has answered or when its deadline passes, whichever is first. Deadlines are the master's
 * own: a command has the timeout from when a write took it (time this
 * process spent before, paused or out of CPU, is not the master's), a
 * master that keeps answering what came before it is not late (each answer
 * gives the next command the timeout again), a batch past its deadline
 * waits for such a master, and what a socket already holds is read before
 * anyone is judged late. A master that is late lags: it gets no new batches
 * (they count it as failed at once) but keeps its connection, and takes
 * votes again once it has answered everything overdue, so a master that was
 * only slow or paused loses nothing.
 * One that stays silent for a second more has its connection dropped, every
 * command pending on it answered as failed, and is reconnected in the
 * background with backoff. After a connect, a master is used for votes only
 * once it has answered INFO, CONFIG GET appendfsync, the marker script's
 * "observe" (restart quarantine, quarantine.h) and PING, and is pinged every
 * second while idle. Whether a master's answer is a vote is decided on the
 * master itself by the guard each vote script starts with (scripts.h); a
 * guard's refusal, or a master that may lose locks under --unsafe-masters
 * refuse, sets the reply's quarantined flag so the engine counts it as no
 * vote. A master seen without a usable marker is reported to the marker
 * callback (marker.h), which sets the cluster's markers right.
 *
 * Replies never leave this layer as redisReply: they are converted to
 * master_reply (integers and at most one string; a long_reply script's
 * string whole, in blob) before any callback sees them.
 *
 * The layer is src/masters/master_*.c, a file per concern; master_int.h, their private
 * header, says which file owns what.
 */
#ifndef RL_MASTER_H
#define RL_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define MASTER_MAX CONF_MAX_MASTERS
#define MREPLY_MAX_INTS 4
/* A master whose last lock command was answered with an error counts as
 * refusing for this long, unless a later one is answered with a value:
 * without traffic, readiness comes back on its own. */
#define MASTER_REFUSING_MS 10000
/* A grant's value (token, space, suffix) and, from inspect, the owner
 * (128 bytes, RL_OWNER_MAX) after it. */
#define MREPLY_STR_MAX (TOKEN_MAX_LEN + 32 + 128)

enum mreply_kind {
    MREPLY_NONE = 0,  /* the master was not asked */
    MREPLY_FAIL,      /* no answer in time, connection down or lost */
    MREPLY_ERROR,     /* the master answered with an error (str holds it) */
    MREPLY_VALUE,     /* an answer: ints[] and str */
};

typedef struct master_reply {
    enum mreply_kind kind;
    int nints;                       /* integers of the reply, in order */
    long long ints[MREPLY_MAX_INTS];
    bool sent;                       /* FAIL after the command was written: the
                                        master may still apply it; a FAIL not
                                        sent never reached it */
    bool quarantined;                /* the master's guard refused (restart
                                        quarantine, no marker) or it may lose
                                        locks under --unsafe-masters refuse: its
                                        answer is no vote */
    char *blob;                      /* a long_reply script's first string, whole and
                                        malloc'd (str holds its start too); the pool
                                        frees it once the batch's done has returned */
    size_t blob_len;
    bool has_str;                    /* the first string of the reply */
    size_t str_len;
    char str[MREPLY_STR_MAX + 1];
} master_reply;

/* A Lua script and the SHA-1 EVALSHA names it by. */
typedef struct mscript {
    const char *name;   /* for logs */
    const char *body;
    char sha[41];
    /* A release: a master that cannot take it now (down or lagging), or whose
     * connection drops before it answers, runs it as soon as it is back,
     * before any command sent after it (for up to max_ttl_ms). Decided when
     * the master fails, never later, so it can never overtake a newer write
     * of the same token that counted as a vote. A master that answers it
     * NOSCRIPT (its script cache was flushed while connected) runs it again
     * in its place, also after the batch was over; when a newer command has
     * overtaken it already, it gets it at once as redo_as, which matches
     * only the grant's own value (master_batch.c, redo_in_place). */
    bool redo_when_back;
    bool guarded;       /* starts with the marker guard (scripts.h) */
    /* What a redo runs instead, with the same keys and arguments (NULL: this
     * script): a later replay may need a narrower match than the original. */
    const struct mscript *redo_as;
    /* It writes what takes memory (a lock, a counter): a master that refuses
     * such a script (OOM, READONLY ...) refuses locks, until one succeeds
     * (master_status.refusing). A release needs none, and says nothing. */
    bool takes_memory;
    /* Group commit: the script that runs this one among others (NULL: it
     * always goes alone), and this script's function there (1-based). When
     * MSCRIPT_GROUP_MIN or more commands of one group are held for a master
     * in a row, they go as one call of the group script, which answers one
     * result per command, each what the command alone would have answered.
     * Set by mscript_group_init. */
    const struct mscript *group;
    int group_fn;
    /* Its answer's first string may be long (a listing's page): it arrives
     * whole in master_reply.blob. Never in a group. */
    bool long_reply;
} mscript;

/* Computes s->sha from s->body. */
void mscript_init(mscript *s);
/* Makes group the script that runs members[0..n) in one call: builds its
 * body (prelude, then each member a local function of its own KEYS and
 * ARGV, called in turn under pcall), computes its SHA-1 and sets each
 * member's group and group_fn (the members' own SHA-1s are mscript_init's). bodies[i] is member i's text in the
 * group (NULL: its own body): it may call what the prelude defines, as
 * long as it answers exactly what the member's own body would. The group's
 * body is allocated once and lives as long as the process. -1 when out of
 * memory. */
int mscript_group_init(mscript *group, mscript *const *members, int n, const char *prelude,
                       const char *const *bodies);

/* The group script's call layout, for KEYS k and ARGV a of n commands:
 * a[1] = n; then for command i, a[2+3(i-1)..] = its function, its key
 * count, its argument count; then every command's arguments in turn. KEYS
 * are every command's keys in turn. The answer is an array of n results. */
#define MSCRIPT_GROUP_MAX 64   /* commands in one group call */
/* Fewer commands than this go alone: a group call costs a master more than
 * its commands alone up to about this many (bench/group_cost.py: an
 * extension and a release 19.5 us alone, 22.6 in groups of 1, 20.5 of 4,
 * 15.9 of 10). */
#define MSCRIPT_GROUP_MIN 8

typedef struct mpool mpool;

/* TLS to the masters (master_tls.c, OpenSSL): the client context built once
 * from the --redis-tls-* settings and shared by every loop's pool, each of
 * which holds a reference. Thread-safe (OpenSSL's SSL_CTX is, once built). */
typedef struct mtls_ctx mtls_ctx;
/* Builds it: peer verification always on, the CA file (or the system's
 * trust store), the client certificate and key if given, the server name
 * override. NULL with err (one line naming the flag) when a file cannot be
 * loaded. The caller frees its reference with mtls_ctx_free. */
mtls_ctx *mtls_ctx_new(const conf *c, char *err, size_t errlen);
void mtls_ctx_free(mtls_ctx *t);

typedef struct mpool_config {
    int nmasters;
    const conf_addr *masters;
    long long timeout_ms;       /* per-command reply deadline */
    const char *password;       /* AUTH on every connection; NULL for none */
    uint64_t quarantine_us;     /* restart quarantine window (longest TTL plus
                                   fence keep plus drift); 0 turns quarantine off */
    long long max_ttl_ms;       /* how long a redo_when_back command waits */
    bool refuse_unsafe;         /* masters that may lose locks do not vote */
    const char *username;       /* AUTH username password; NULL: AUTH password */
    mtls_ctx *tls;              /* for masters whose conf_addr.tls is set (the pool takes
                                   a reference); NULL when none is */
} mpool_config;

/* What a master persists (CONFIG GET appendfsync with INFO's aof_enabled). */
enum master_persistence { MPERSIST_UNKNOWN, MPERSIST_OFF, MPERSIST_ALWAYS, MPERSIST_EVERYSEC,
                          MPERSIST_NO };

typedef struct master_status {
    char addr[280];
    bool up;                    /* answered PING on its current connection */
    bool late;                  /* connected and past its handshake, but a reply is overdue
                                   (up is false meanwhile): it takes no votes until it has
                                   answered what it owes, and is dropped (down) after 1 s
                                   more without an answer */
    bool quarantined;           /* up, but its votes do not count */
    long long quarantine_left_ms; /* until its votes count; 0 when not quarantined
                                     or when it waits for a marker */
    int marker;                 /* enum quarantine_marker as last seen */
    enum master_persistence persistence;
    char policy[32];            /* maxmemory-policy; "" before the handshake */
    bool may_lose_locks;        /* policy other than noeviction, or appendonly off */
    unsigned long long restarts; /* run_id changes seen */
    bool subscribed;            /* its release-notice subscription is active */
    unsigned long long errors;  /* connections lost or refused, timeouts */
    unsigned long long replies; /* replies received */
    unsigned long long reply_us_sum; /* total latency of those replies */
    unsigned long long late_replies; /* replies that came after their command was due */
    bool refusing;              /* up, but its last lock command (within
                                   MASTER_REFUSING_MS) was answered with an error */
    char refusal[9];            /* that error's first word ("OOM", "READONLY"), "" if none */
    unsigned long long refusals; /* lock commands answered with an error */
    bool tls;                   /* reached over TLS */
    char reason[200];           /* while not up: why its last connection failed or was
                                   dropped ("" unknown); e.g. a TLS certificate check */
} master_status;

/* Creates the pool (copies cfg); connects only once started. NULL on OOM. */
mpool *mpool_new(const mpool_config *cfg);
/* Starts the loop thread. Returns 0 or -1. */
int mpool_start(mpool *p);
/* Stops the loop thread: pending batches answer as failed, timers are dropped. */
void mpool_stop(mpool *p);
void mpool_free(mpool *p);

/* The event loop whose client the pool is (loop.h): post jobs and set
 * timers there; its thread is the pool's. */
rl_loop *mpool_loop(mpool *p);

/* Any thread: a snapshot of master i. */
void mpool_status(mpool *p, int i, master_status *out);
int mpool_size(const mpool *p);


/* ---- loop thread only ---- */

/* replies[0..mpool_size) valid during the call only. */
typedef void (*mpool_done_fn)(void *arg, const master_reply *replies);

/* Runs script s with keys args[0..nkeys) and arguments args[nkeys..nargs) on
 * every master whose bit is set in mask. A master that is down or lagging is
 * not sent the command (its reply is FAIL with sent false), unless s is
 * redo_when_back, which then waits for it. done (may be NULL: fire and forget)
 * is called exactly once; only when memory runs out is it called before
 * mpool_eval returns, so callers make mpool_eval their last use of arg. */
void mpool_eval(mpool *p, const mscript *s, uint32_t mask, int nkeys, int nargs,
                const char *const *args, const size_t *lens, mpool_done_fn done, void *arg);

/* Whether a batch's outcome is already decided, from the replies so far
 * (those still owed read FAIL, sent). */
typedef bool (*mpool_decide_fn)(void *arg, const master_reply *replies);
/* mpool_eval that does not wait for the slowest masters: after each answer
 * while others are owed, decide(arg, replies) is asked, and when it says
 * true done runs at once, with the owed masters as FAIL and sent, as if
 * they had missed their deadline (their commands still run there). */
void mpool_eval_decided(mpool *p, const mscript *s, uint32_t mask, int nkeys, int nargs,
                        const char *const *args, const size_t *lens, mpool_decide_fn decide,
                        mpool_done_fn done, void *arg);


/* Release notices (Redis pub/sub). Call before mpool_start. The pool keeps a
 * second connection per master, subscribed to channel (a prefix) and to the
 * channels wanted, and calls fn(arg, message, len) on the loop thread for
 * every message from any master. A lost subscription is re-established with backoff; meanwhile
 * nothing arrives, so users must not rely on notices alone. */
typedef void (*mpool_notice_fn)(void *arg, const char *msg, size_t len);
void mpool_set_notice(mpool *p, const char *channel, mpool_notice_fn fn, void *arg);
/* Loop thread. Per-name notices: channel starts with the prefix given to
 * mpool_set_notice. Wanted channels are refcounted and subscribed on every
 * master (again after a reconnect). When a subscription is confirmed, fn is
 * called once with the channel's suffix, as if a notice came: whatever was
 * released before it is not missed. */
void mpool_notice_want(mpool *p, const char *channel, bool on);
/* How many masters' subscription connections work now (0 without
 * mpool_set_notice). The engine wants a majority of them (quorum_of). */
int mpool_notice_links(mpool *p);

/* Restart quarantine's markers (marker.h). Call before mpool_start. fn(arg,
 * i) runs on the loop thread, from a timer, when master i answered without a
 * ready marker. */
typedef void (*mpool_marker_fn)(void *arg, int master);
void mpool_set_marker_fn(mpool *p, mpool_marker_fn fn, void *arg);
/* Loop thread: records master i's marker state and its time left in
 * quarantine, as a marker script reported it. */
void mpool_note_marker(mpool *p, int i, int state, long long ms_left);
/* Loop thread: master i's run_id from its current connection ("" unknown). */
const char *mpool_run_id(const mpool *p, int i);


#endif
