/* master_int.h - the master layer's private header: the pool and master
 * structs its files share, and the functions they call across files. Only
 * src/masters/master_*.c include it; every other folder includes masters/masters.h.
 *
 * Who owns what. A pool (struct mpool) and its masters belong to the pool's
 * loop thread (the job queue is the loop's, loop.h): nothing below is
 * touched elsewhere, except
 *  - the atomics of struct master: written on the loop (marker and
 *    quarantine_until_us also by mpool_note_marker, which marker.h's shared
 *    check calls from another pool's loop), read by mpool_status and
 *    mpool_notice_links on any thread; each is read alone, so no lock;
 *  - error_log, a log_limit with its own mutex;
 *  - reason (why the master is not up), under reason_mu: written on the
 *    loop, read by mpool_status;
 *  - what mpool_new copies from the config (n, timeout_us, quarantine_us,
 *    redo_us, refuse_unsafe, password, username, tls (a reference to the
 *    shared TLS context), each master's addr and name), read only after;
 *    marker_fn and notice_* are set before mpool_start.
 *
 * The files, top down, with the state each one writes and the files it
 * calls (calls only go down this list: no two files call each other):
 *   master_loop.c      the pool as its loop's client (loop.h: the thread,
 *                      posted jobs, timers, the clock); mpool_new, start,
 *                      stop, free                      -> notice, conn, batch,
 *                                                         undo, pipeline
 *   master_notice.c    the subscription connection (sub*, subscribed), the
 *                      channels wanted (chans)         -> conn
 *   master_conn.c      a master's connection: ctx, state, backoff, lag, its
 *                      handshake (info, persists, policy) and its counters
 *                                                      -> batch, undo, marker,
 *                                                         pipeline
 *   master_batch.c     batches (struct mbatch), the deadline FIFO and the
 *                      ready list; group commit: the records held back in
 *                      a turn (grp_head) written as one group call, and
 *                      its answer given to each   -> undo, marker,
 *                                                         pipeline
 *   master_undo.c      remembered releases (struct undo, undo_head/tail)
 *                                                      -> pipeline
 *   master_marker.c    the marker as reported (marker, quarantine_until_us),
 *                      reports to marker_fn (on a loop timer)
 *   master_pipeline.c  command packing, each master's queue of records
 *                      awaiting replies (head, tail, want_write), error lines
 *   master_tls.c       a connection's bytes, plain or TLS (OpenSSL on the
 *                      same socket; struct mtls), and the shared TLS context
 *   master_script.c    scripts as text: SHA-1s, the group script's body
 *                      (pure, no state)
 */
#ifndef RL_MASTER_INT_H
#define RL_MASTER_INT_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "master.h"
#include "quarantine.h"

#define MASTER_PING_INTERVAL_US 1000000ULL     /* an idle voting master is pinged this often */
#define MASTER_HANDSHAKE_TIMEOUT_US 1000000ULL /* connect, each handshake step, each undo command */
#define MASTER_BACKOFF_MIN_US 100000ULL        /* first reconnect wait (data and subscription) */
#define MASTER_BACKOFF_MAX_US 1000000ULL       /* the wait doubles up to this */
#define MASTER_CHAN_BUCKETS 4096 /* notice channels wanted (a power of two) */

enum mstate { M_DOWN, M_CONNECTING, M_HANDSHAKE, M_UP };
/* What a command in a master's queue was sent for. */
enum rec_kind { REC_BATCH, REC_GROUP, REC_PING, REC_AUTH, REC_INFO, REC_CONFIG, REC_OBSERVE,
                REC_HANDSHAKE_PING, REC_UNDO };

struct chan;   /* a notice channel wanted (master_notice.c) */
struct mtls;   /* a TLS session on a connection's socket (master_tls.c) */
struct job;    /* a posted job (master_loop.c) */
struct undo;   /* a remembered release (master_undo.c) */

/* One mpool_eval: a script sent to several masters at once. */
struct mbatch {
    struct mbatch *next;        /* deadline FIFO or ready list */
    mpool_done_fn done;         /* NULL: fire and forget */
    void *arg;
    uint64_t deadline_us;       /* monotonic: sent + the pool's timeout */
    int pending;                /* masters asked that have not answered */
    int refs;                   /* records + uncompleted + FIFO membership */
    bool completed;             /* done has run (or never will) */
    bool flushed;               /* its deadline counts from its first write */
    mpool_decide_fn decide;     /* NULL: done waits for every answer */
    bool decided;               /* decide said yes: in the pool's decided list */
    struct mbatch *dnext;       /* in the decided list */
    const mscript *script;
    int nkeys;                  /* keys among the script's arguments */
    int argc;                   /* EVALSHA sha nkeys args... */
    const char **argv;          /* one allocation with argvlen and the copied args */
    size_t *argvlen;            /* bytes of each argv[i] */
    int nreplies;               /* the pool's n: replies[] and their blobs, freed with b */
    master_reply replies[];     /* by master index (the pool's n of them: a batch in flight
                                   costs no more than its masters); FAIL until answered */
};

/* A command written on a master's connection, awaiting its reply. Replies
 * come in order, so the queue's head is the next one answered. */
struct mrecord {
    struct mrecord *next;       /* toward the newest */
    enum rec_kind kind;
    struct mbatch *batch;       /* REC_BATCH: holds one of its refs */
    int slot;                   /* REC_BATCH: the master's index in batch->replies */
    uint64_t sent_us;           /* monotonic: when appended, then when a write took its bytes
                                   (reply latency) */
    uint64_t timeout_us;        /* how long the master has to answer it, once sent */
    bool out;                   /* a write took its bytes (sent_us says when) */
    uint64_t due_us;            /* monotonic: sent_us + timeout_us; overdue after it */
    uint64_t deadline_us;       /* monotonic: when the master is late on it: due_us, or
                                   later while the master keeps answering what came
                                   before it (master_read) */
    struct undo *undo;          /* REC_UNDO: kept until answered; queued again if the connection drops */
    struct mrecord *members;    /* REC_GROUP: the REC_BATCH records its one call carries, in
                                   order (chained by next); each holds its batch's reference */
    int nmembers;
    bool body;                  /* REC_BATCH, REC_GROUP: written with its script's body (EVAL),
                                   so it runs even where the script cache was flushed */
};

struct master {
    int idx;                    /* in pool->masters */
    mpool *pool;
    bool marker_report_due;     /* a marker_due timer is pending; loop thread */
    log_limit error_log;        /* master_error lines */
    conf_addr addr;
    char name[280];             /* host:port */
    enum mstate state;
    redisContext *ctx;          /* NULL while M_DOWN */
    struct mtls *tls;           /* TLS on ctx's socket once its TCP connect is done; NULL:
                                   plain (or not yet); the handshake runs in M_CONNECTING */
    struct mrecord *head, *tail; /* written, awaiting replies, oldest first */
    struct mrecord *grp_head, *grp_tail; /* REC_BATCH records held back, oldest first: written
                                   at the turn's write, or once m has answered its last write,
                                   and before anything else is appended (master_group_flush);
                                   runs of MSCRIPT_GROUP_MIN or more of one group script as
                                   one group call, the rest alone */
    struct mrecord *unsent;     /* the first of them no write has taken yet (NULL: all out):
                                   a deadline counts from when the command could reach the
                                   master, not from when this process queued it */
    uint32_t cached;            /* scripts (bits of mpool.scripts) this connection was sent
                                   with their body: EVALSHA is safe for those */
    struct mrecord *drain_until; /* NOSCRIPT answered (SCRIPT FLUSH on this connection): nothing
                                   held is written until this record, the newest in flight
                                   then, has answered; NULL: none (master_batch_reply) */
    struct mrecord *redo_tail;  /* the last command sent again in its place at the head of
                                   the held list in this drain (NULL: none) */
    bool undo_after_drain;      /* back from a lag during a drain: its remembered releases go
                                   once the drain is over, behind what it held */
    struct undo *undo_head, *undo_tail; /* run when it is up again */
    size_t nundo;               /* entries from undo_head */
    uint64_t next_connect_us;   /* monotonic: M_DOWN reconnects then */
    uint64_t backoff_us;        /* the wait after the next failure */
    uint64_t connect_deadline_us; /* monotonic: M_CONNECTING fails then */
    uint64_t next_ping_us;      /* monotonic: the idle ping */
    bool want_write;            /* the output buffer holds unwritten commands */
    atomic_bool lagging;        /* M_UP with a reply overdue: no votes until it catches up;
                                   written on the loop, read by mpool_status (late) */
    bool logged_down;           /* "down" logged since it was last up */
    quarantine_info info;       /* from INFO on the current connection; loop thread */
    bool persists;              /* appendonly yes with appendfsync always */
    atomic_bool up;
    atomic_int marker;          /* enum quarantine_marker, as last reported */
    atomic_ullong quarantine_until_us; /* monotonic; 0 when its guard lets it vote */
    atomic_int persistence;     /* enum master_persistence */
    atomic_int policy_idx;      /* index in policies[] (master_conn.c) */
    atomic_bool may_lose;       /* may lose locks (quarantine_may_lose) */
    atomic_ullong restarts;     /* run_id changes seen */
    atomic_ullong errors;       /* connections lost or refused, timeouts */
    atomic_ullong replies;      /* replies received */
    atomic_ullong reply_us_sum; /* total latency of those replies */
    atomic_ullong late_replies; /* replies that came after their record was due */
    atomic_ullong refused_at_us; /* monotonic: its last lock command was answered with an
                                    error (OOM, READONLY, NOPERM ...); 0 after a value */
    atomic_ullong refusals;     /* lock commands answered with an error */
    atomic_ullong refusal_word; /* the first bytes (up to 8) of that error's first word */
    pthread_mutex_t reason_mu;  /* guards reason */
    char reason[200];           /* why it is not up (its last failure); "" once up */

    /* The release-notice subscription: its own connection, read only. */
    redisContext *sub;          /* NULL while down */
    struct mtls *sub_tls;       /* as tls, for sub */
    bool sub_connecting;        /* the TCP connect (and TLS handshake) is under way */
    bool sub_want_write;        /* sub's output buffer holds unwritten commands */
    uint64_t sub_next_connect_us; /* monotonic: reconnects then while sub is NULL */
    uint64_t sub_backoff_us;    /* the wait after the next failure */
    uint64_t sub_deadline_us;   /* monotonic: a connect still under way fails then */
    atomic_bool subscribed;     /* the prefix's SUBSCRIBE was confirmed */
};

struct mpool {
    int n;                      /* masters */
    uint64_t timeout_us;        /* per-command reply deadline */
    uint64_t quarantine_us;     /* 0: off */
    uint64_t redo_us;           /* how long a redo waits for its master */
    bool refuse_unsafe;
    char *password;             /* NULL: no AUTH; wiped on free */
    char *username;             /* NULL: AUTH password alone */
    mtls_ctx *tls;              /* a reference; NULL when no master uses TLS */
    struct master masters[MASTER_MAX];
    const mscript *scripts[32]; /* every script sent so far: its index is its bit in
                                   master.cached; loop thread */
    int nscripts;
    mpool_marker_fn marker_fn;  /* loop thread */
    void *marker_arg;

    rl_loop *loop;              /* the loop whose client the pool is (master_loop.c) */
    bool connected_once;        /* its first turn has started the connections */
    int poll_who[LOOP_MAX_CLIENT_FDS];   /* whose each polled fd is: master i, or
                                            MASTER_MAX + i its subscription */

    struct mbatch *fifo_head, *fifo_tail;   /* by deadline (all share one timeout) */
    struct mbatch *ready;       /* completed inside mpool_eval, callback owed */
    struct mbatch *decided;     /* decided before every answer: completed after the replies at hand */

    char *notice_channel;       /* the notice prefix; NULL: no subscriptions */
    size_t notice_prefix_len;   /* bytes */
    mpool_notice_fn notice_fn;
    void *notice_arg;
    struct chan *chans[MASTER_CHAN_BUCKETS]; /* channels wanted, refcounted; loop thread */

};

/* New votes go to m: it is up and has no reply overdue. */
static inline bool master_votes(const struct master *m)
{
    return m->state == M_UP && !m->lagging;
}


/* ---- master_pipeline.c ---- */

/* Bytes mpool_pack_command needs for nargs arguments of lens. */
size_t mpool_pack_size(int nargs, const size_t *lens);
/* Lays out "verb script nkeys args..." in mem (mpool_pack_size bytes),
 * copying the arguments; verb and script are not copied. */
void mpool_pack_command(void *mem, const char *verb, const char *script, int nkeys, int nargs,
                        const char *const *args, const size_t *lens, const char ***argv_out,
                        size_t **lens_out);
/* Appends a command to m's output buffer and its record to m's queue; the
 * master has until deadline (deadline - now once a write takes it,
 * master_sent). 0, or -1 when out of memory (nothing queued). */
int master_append(struct master *m, enum rec_kind kind, struct mbatch *b, int slot,
                  int argc, const char **argv, const size_t *lens, uint64_t now,
                  uint64_t deadline);
/* A record of kind for batch b's slot, due at deadline, on no queue yet;
 * NULL when out of memory. */
struct mrecord *master_record_new(enum rec_kind kind, struct mbatch *b, int slot, uint64_t now,
                                  uint64_t deadline);
/* master_append for a record made by master_record_new, which the queue
 * takes (the caller still owns it on -1). */
int master_append_record(struct master *m, struct mrecord *r, int argc, const char **argv,
                         const size_t *lens);
/* A write took m's buffered commands at now: each unsent record is due its
 * timeout from now, and a batch's deadline counts from its first write
 * (timeout_us, the pool's). Time this process spent before the write (a
 * long turn, a pause, a CPU quota) is never the master's. */
void master_sent(struct master *m, uint64_t timeout_us, uint64_t now);
/* Takes the record at the head of m's queue (the next reply's); the caller
 * frees it. NULL when empty. */
struct mrecord *master_pop(struct master *m);
/* Logs m's error answer to script, rate limited per master. */
void master_log_error(struct master *m, const char *script, const char *error, uint64_t now);

/* ---- master_undo.c ---- */

/* Queues u to run when m is back; takes u (freed at once if expired). */
void master_undo_keep(struct master *m, struct undo *u, uint64_t now);
/* m could not take batch b: remembers it if its script is redo_when_back. */
void master_undo_redo(mpool *p, struct master *m, const struct mbatch *b, uint64_t now);
/* m answered NOSCRIPT to b, which cannot go again in its place: sends a
 * redo_when_back script again at once, with its body, as its replay. */
void master_undo_resend(mpool *p, struct master *m, const struct mbatch *b, uint64_t now);
/* Writes m's remembered releases on its new connection, before anything else. */
void master_undo_flush(struct master *m, uint64_t now);
/* Frees m's remembered releases (the pool is being freed). */
void master_undo_free(struct master *m);

/* ---- master_marker.c ---- */

/* Tells marker_fn, from a timer, that m answered without a ready marker. */
void master_marker_report(mpool *p, struct master *m);
/* What a reply to vote script s says of m's marker. True: no vote. */
bool master_guard(mpool *p, struct master *m, const mscript *s, const master_reply *mr);

/* ---- master_batch.c ---- */

/* Master slot of batch b answered (or failed) with r. */
void mpool_batch_answer(mpool *p, struct mbatch *b, int slot, const master_reply *r);
/* m answered record r (REC_BATCH) with rr. The caller frees r, never rr's
 * batch: a NOSCRIPT answer moves r's reference on b to a new record. */
void master_batch_reply(mpool *p, struct master *m, const struct mrecord *r, const redisReply *rr,
                        uint64_t now);
/* m answered group record r (REC_GROUP) with rr: each member gets its own
 * result (all of them the one error, when the call failed as a whole). The
 * caller frees r; its members are freed here. */
void master_group_reply(mpool *p, struct master *m, struct mrecord *r, const redisReply *rr,
                        uint64_t now);
/* Writes the records m holds back (grp_head): alone, one; else group calls
 * of up to MSCRIPT_GROUP_MAX. Called before anything else is appended to
 * m and before each write. */
void master_group_flush(mpool *p, struct master *m, uint64_t now);
/* m's connection is gone, or r could not be written (sent false): every
 * batch record in r (a REC_BATCH, or each member of a REC_GROUP) answers as
 * failed and may be redone when m is back. Frees r's members, not r. */
void master_record_failed(mpool *p, struct master *m, struct mrecord *r, bool sent, uint64_t now);
/* Completes the batches whose decide said yes, with the answers read so far:
 * called once the replies at hand (one poll's) are read, so a master that
 * answered in the same turn is not counted as late. */
void mpool_run_decided(mpool *p);
/* Calls the callbacks owed for batches that completed inside mpool_eval, and
 * mpool_run_decided. */
void mpool_run_ready(mpool *p);
/* Whether batch b, past its deadline at now, waits longer: *until is when to
 * look again (a master it waits for is still answering what came first).
 * The loop's rule (master_loop.c), handed down. */
typedef bool (*mbatch_wait_fn)(mpool *p, const struct mbatch *b, uint64_t now, uint64_t *until);
/* Completes the batches whose deadline passed by now with the answers they
 * have, but for those that wait(p, b, now, &until) says wait longer: their
 * deadline becomes until (wait NULL: none waits). */
void mpool_expire_batches(mpool *p, uint64_t now, mbatch_wait_fn wait);

/* ---- master_conn.c ---- */

/* The wait before the next reconnect, doubling up to the maximum. */
uint64_t master_backoff_next(uint64_t *backoff_us);
/* 0 when the non-blocking connect on fd succeeded, else its errno. */
int master_connect_error(int fd);
void master_connect(mpool *p, struct master *m, uint64_t now);
/* The TCP connect finished (M_CONNECTING and writable). */
void master_handshake(mpool *p, struct master *m, uint64_t now);
/* Drops m's connection; everything pending on it answers as failed. */
void master_fail(mpool *p, struct master *m, const char *why_in, uint64_t now);
/* A reply is overdue: m takes no votes until it catches up. */
void master_lag(struct master *m);
/* When the record at the head of m's queue (not empty) is due. */
uint64_t master_head_due_us(const struct master *m);
/* m's socket is readable: reads and dispatches every reply there is. */
void master_read(mpool *p, struct master *m, uint64_t now);
/* Writes what m's output buffer holds, as far as the socket takes it. */
void master_flush(mpool *p, struct master *m, uint64_t now);

/* AUTH password, or AUTH username password: fills argv and lens, returns
 * the count (2 or 3). */
int master_auth_argv(const mpool *p, const char *argv[3], size_t lens[3]);

/* ---- master_tls.c ---- */

void mtls_ctx_ref(mtls_ctx *t);
/* Starts TLS as a client on fd (connected), checking the certificate
 * against the server name override or host. NULL with why on failure. */
struct mtls *mtls_start(mtls_ctx *t, int fd, const char *host, char *why, size_t whylen);
/* Runs the handshake on: 1 done, 0 under way (mlink_events says what to
 * wait for), -1 failed with why (certificate verify failed, hostname
 * mismatch, ...). */
int mtls_handshake(struct mtls *s, char *why, size_t whylen);
void mtls_free(struct mtls *s);
/* The poll events a connection waits for: its TCP connect (connecting, s
 * NULL), its TLS handshake, or replies, and room to write while
 * want_write. */
short mlink_events(const struct mtls *s, bool connecting, bool want_write);
/* Whether revents call for a read (OpenSSL may wait to write to read). */
bool mlink_readable(const struct mtls *s, short revents);
/* Reads what there is into c's reply reader. 0, or -1 with why. */
int mlink_read(redisContext *c, struct mtls *s, char *why, size_t whylen);
/* Writes c's output buffer as far as the socket takes it; *done when all
 * of it went. 0, or -1 with why. */
int mlink_write(redisContext *c, struct mtls *s, bool *done, char *why, size_t whylen);

/* ---- master_notice.c ---- */

void master_sub_connect(mpool *p, struct master *m, uint64_t now);
/* Drops m's subscription connection; it reconnects after a backoff. */
void master_sub_fail(mpool *p, struct master *m, uint64_t now);
/* The subscription's TCP connect finished: subscribes. */
void master_sub_start(mpool *p, struct master *m, uint64_t now);
/* The subscription's socket is readable: confirmations and notices. */
void master_sub_read(mpool *p, struct master *m, uint64_t now);
/* Writes what the subscription's output buffer holds. */
void master_sub_flush(mpool *p, struct master *m, uint64_t now);
/* Frees the channels wanted (the pool is being freed). */
void mpool_notice_free(mpool *p);

#endif
