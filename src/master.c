/* master.c - see master.h. */
#include "master.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "quarantine.h"
#include "scripts.h"
#include "sha1.h"

#define MASTER_PING_INTERVAL_US 1000000ULL
#define MASTER_HANDSHAKE_TIMEOUT_US 1000000ULL
#define MASTER_BACKOFF_MIN_US 100000ULL
#define MASTER_BACKOFF_MAX_US 1000000ULL
#define MASTER_LAG_LIMIT_US 1000000ULL   /* an overdue reply this much later drops the connection */

enum mstate { M_DOWN, M_CONNECTING, M_HANDSHAKE, M_UP };
enum rec_kind { REC_BATCH, REC_PING, REC_AUTH, REC_INFO, REC_CONFIG, REC_OBSERVE, REC_HANDSHAKE_PING,
                REC_UNDO };

#define MASTER_UNDO_MAX 4096    /* queued undo commands per master; the oldest go first */
#define MASTER_CHAN_BUCKETS 4096 /* notice channels wanted (a power of two) */

/* A notice channel some waiter wants, subscribed on every master. */
struct chan {
    struct chan *next;
    int refs;
    size_t len;
    char name[];
};

struct mbatch {
    struct mbatch *next;        /* deadline FIFO or ready list */
    mpool_done_fn done;
    void *arg;
    uint64_t deadline_us;
    int pending;                /* masters asked that have not answered */
    int refs;                   /* records + uncompleted + FIFO membership */
    bool completed;
    const mscript *script;
    int argc;                   /* EVALSHA sha nkeys args... */
    const char **argv;
    size_t *argvlen;
    master_reply replies[MASTER_MAX];
};

struct mrecord {
    struct mrecord *next;
    enum rec_kind kind;
    struct mbatch *batch;       /* REC_BATCH */
    int slot;
    uint64_t sent_us;
    uint64_t deadline_us;
    struct undo *undo;          /* REC_UNDO: kept until answered; queued again if the connection drops */
};

/* A command to run on a master when it is back (a redo_when_back script). */
struct undo {
    struct undo *next;
    uint64_t expires_us;
    int argc;
    const char **argv;          /* EVAL body nkeys args...; one allocation */
    size_t *lens;
};

struct master {
    int idx;
    mpool *pool;
    bool marker_report_due;     /* a marker_due timer is pending; loop thread */
    log_limit error_log;        /* master_error lines */
    conf_addr addr;
    char name[280];             /* host:port */
    enum mstate state;
    redisContext *ctx;
    struct mrecord *head, *tail;
    struct undo *undo_head, *undo_tail; /* run when it is up again */
    size_t nundo;
    uint64_t next_connect_us;
    uint64_t backoff_us;
    uint64_t connect_deadline_us;
    uint64_t next_ping_us;
    bool want_write;
    bool lagging;               /* M_UP with a reply overdue: no votes until it catches up */
    bool logged_down;           /* "down" logged since it was last up */
    quarantine_info info;       /* from INFO on the current connection; loop thread */
    bool persists;              /* appendonly yes with appendfsync always */
    atomic_bool up;
    atomic_int marker;          /* enum quarantine_marker, as last reported */
    atomic_ullong quarantine_until_us; /* monotonic; 0 when its guard lets it vote */
    atomic_int persistence;     /* enum master_persistence */
    atomic_int policy_idx;      /* index in policies[] */
    atomic_bool may_lose;       /* may lose locks (quarantine_may_lose) */
    atomic_ullong restarts;
    atomic_ullong errors;
    atomic_ullong replies;
    atomic_ullong reply_us_sum;

    /* The release-notice subscription: its own connection, read only. */
    redisContext *sub;
    bool sub_connecting;
    uint64_t sub_next_connect_us, sub_backoff_us, sub_deadline_us;
    atomic_bool subscribed;
};

struct timer {
    uint64_t when_us;
    uint64_t seq;               /* FIFO among equal times */
    void (*fn)(void *);
    void *arg;
};

struct job {
    struct job *next;
    void (*fn)(void *);
    void *arg;
};

struct mpool {
    int n;
    uint64_t timeout_us;
    uint64_t quarantine_us;     /* 0: off */
    uint64_t redo_us;           /* how long a redo waits for its master */
    bool refuse_unsafe;
    char *password;
    struct master masters[MASTER_MAX];
    mpool_marker_fn marker_fn;  /* loop thread */
    void *marker_arg;

    pthread_t thread;
    bool started;
    int wake_fd;

    int io_fd;                  /* another event source on this loop (the HTTP server), -1 none */
    mpool_io_fn io_run;
    mpool_io_due_fn io_due;
    void *io_arg;

    pthread_mutex_t jobs_lock;
    struct job *jobs_head, *jobs_tail;
    bool stopping;              /* under jobs_lock */
    bool signalled;             /* the wake fd was written since the last run; under jobs_lock */
    atomic_bool lazy_pending;   /* jobs queued without a wake-up */

    struct mbatch *fifo_head, *fifo_tail;   /* by deadline (all share one timeout) */
    struct mbatch *ready;       /* completed inside mpool_eval, callback owed */

    char *notice_channel;       /* the notice prefix; NULL: no subscriptions */
    size_t notice_prefix_len;
    mpool_notice_fn notice_fn;
    void *notice_arg;
    struct chan *chans[MASTER_CHAN_BUCKETS]; /* channels wanted, refcounted; loop thread */

    struct timer *timers;       /* min-heap */
    bool timers_final;          /* the loop is ending: timers run to clean up */
    size_t ntimers, timers_cap;
    uint64_t timer_seq;
};

uint64_t mpool_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

void mscript_init(mscript *s) { sha1_hex(s->body, strlen(s->body), s->sha); }

/* ---- script commands ---- */

/* Bytes pack_command needs for nargs arguments of lens. */
static size_t pack_size(int nargs, const size_t *lens)
{
    size_t bytes = (size_t)(nargs + 3) * (sizeof(char *) + sizeof(size_t)) + 24;
    for (int i = 0; i < nargs; i++)
        bytes += lens[i];
    return bytes;
}

/* Lays out "verb script nkeys args..." in mem (pack_size bytes): argv, then
 * the lengths, the key count as text and a copy of every argument, so the
 * command outlives the caller's strings. verb and script are not copied. */
static void pack_command(void *mem, const char *verb, const char *script, int nkeys, int nargs,
                         const char *const *args, const size_t *lens, const char ***argv_out,
                         size_t **lens_out)
{
    int argc = nargs + 3;
    const char **argv = mem;
    size_t *argvlen = (size_t *)(argv + argc);
    char *nkeys_str = (char *)(argvlen + argc);
    char *copy = nkeys_str + 24;
    snprintf(nkeys_str, 24, "%d", nkeys);
    argv[0] = verb;
    argvlen[0] = strlen(verb);
    argv[1] = script;
    argvlen[1] = strlen(script);
    argv[2] = nkeys_str;
    argvlen[2] = strlen(nkeys_str);
    for (int i = 0; i < nargs; i++) {
        memcpy(copy, args[i], lens[i]);
        argv[3 + i] = copy;
        argvlen[3 + i] = lens[i];
        copy += lens[i];
    }
    *argv_out = argv;
    *lens_out = argvlen;
}

/* ---- batches ---- */

/* Drops n references to b (n >= 1) and frees it when none is left. Every
 * release of a reference goes through here once per event, so no path can
 * touch b after the decrement that freed it. */
static void batch_drop(struct mbatch *b, int n)
{
    b->refs -= n;
    if (b->refs == 0) {
        free(b->argv);
        free(b);
    }
}

/* Calls b's callback if it has not run yet. Returns the references the
 * caller must drop for it: 1 (the "uncompleted" reference) the first time,
 * 0 after. Never frees b. */
static int batch_complete(struct mbatch *b)
{
    if (b->completed)
        return 0;
    b->completed = true;
    if (b->done)
        b->done(b->arg, b->replies);
    return 1;
}

/* A master answered (or failed) for batch b: drops the record's reference,
 * and the uncompleted one if this was the last answer owed. */
static void batch_answer(struct mbatch *b, int slot, const master_reply *r)
{
    int drop = 1;
    if (!b->completed) {
        b->replies[slot] = *r;
        if (--b->pending == 0)
            drop += batch_complete(b);
    }
    batch_drop(b, drop);
}

static void convert_reply(const redisReply *rr, master_reply *out)
{
    memset(out, 0, offsetof(master_reply, str));
    out->str[0] = '\0';
    if (rr->type == REDIS_REPLY_ERROR) {
        out->kind = MREPLY_ERROR;
    } else {
        out->kind = MREPLY_VALUE;
    }
    const redisReply *items = rr;
    size_t n = 1;
    const redisReply *const *elems = &items;
    if (rr->type == REDIS_REPLY_ARRAY) {
        elems = (const redisReply *const *)rr->element;
        n = rr->elements;
    }
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = elems[i];
        if (e->type == REDIS_REPLY_INTEGER && out->nints < MREPLY_MAX_INTS) {
            out->ints[out->nints++] = e->integer;
        } else if ((e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS ||
                    e->type == REDIS_REPLY_ERROR) && !out->has_str) {
            size_t len = e->len < MREPLY_STR_MAX ? e->len : MREPLY_STR_MAX;
            memcpy(out->str, e->str, len);
            out->str[len] = '\0';
            out->str_len = len;
            out->has_str = true;
        }
    }
}

/* ---- connections ---- */

static void master_push(struct master *m, struct mrecord *r)
{
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->want_write = true;
}

static struct mrecord *master_pop(struct master *m)
{
    struct mrecord *r = m->head;
    if (r) {
        m->head = r->next;
        if (!m->head)
            m->tail = NULL;
    }
    return r;
}

/* The wait before the next reconnect, doubling up to the maximum. */
static uint64_t backoff_next(uint64_t *backoff_us)
{
    uint64_t wait = *backoff_us;
    *backoff_us = wait * 2 > MASTER_BACKOFF_MAX_US ? MASTER_BACKOFF_MAX_US : wait * 2;
    return wait;
}

/* 0 when the non-blocking connect on fd succeeded, else its errno. */
static int connect_error(int fd)
{
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        return errno;
    return soerr;
}

/* New votes go to m: it is up and has no reply overdue. */
static bool master_votes(const struct master *m)
{
    return m->state == M_UP && !m->lagging;
}

/* Queues u to run when m is back (freed instead once expired). At most
 * MASTER_UNDO_MAX wait; the oldest go first, as they expire first. */
static void undo_keep(struct master *m, struct undo *u, uint64_t now)
{
    if (now >= u->expires_us) {
        free(u);
        return;
    }
    u->next = NULL;
    if (m->nundo == MASTER_UNDO_MAX) {
        struct undo *old = m->undo_head;
        m->undo_head = old->next;
        if (!m->undo_head)
            m->undo_tail = NULL;
        m->nundo--;
        free(old);
    }
    if (m->undo_tail)
        m->undo_tail->next = u;
    else
        m->undo_head = u;
    m->undo_tail = u;
    m->nundo++;
}

/* An undo of script s (EVAL: a returning master may have lost its script
 * cache), or NULL when out of memory. */
static struct undo *undo_new(const mscript *s, int nkeys, int nargs, const char *const *args,
                             const size_t *lens, uint64_t expires_us)
{
    struct undo *u = malloc(sizeof *u + pack_size(nargs, lens));
    if (!u)
        return NULL;
    u->next = NULL;
    u->expires_us = expires_us;
    u->argc = nargs + 3;
    pack_command(u + 1, "EVAL", s->body, nkeys, nargs, args, lens, &u->argv, &u->lens);
    return u;
}

/* m could not take batch b (not voting, or its connection dropped before
 * the answer): a redo_when_back script waits to run when m is back, ahead
 * of anything sent to m later. */
static void batch_redo(mpool *p, struct master *m, const struct mbatch *b, uint64_t now)
{
    if (!b->script->redo_when_back)
        return;
    /* argv: EVALSHA sha nkeys args... */
    const mscript *rs = b->script->redo_as ? b->script->redo_as : b->script;
    struct undo *u = undo_new(rs, atoi(b->argv[2]), b->argc - 3, b->argv + 3, b->argvlen + 3,
                              now + p->redo_us);
    if (!u) {
        log_event(LOG_LEVEL_WARN, "master_undo_dropped", "addr", m->name, "reason", "out of memory", NULL);
        return;
    }
    undo_keep(m, u, now);
}

/* Drops the connection: every pending command is answered as failed, and
 * undo commands wait for the next one. */
static void master_fail(mpool *p, struct master *m, const char *why_in, uint64_t now)
{
    char why[160];   /* why_in may point into the context freed below */
    snprintf(why, sizeof why, "%s", why_in);
    bool was_up = master_votes(m);
    if (m->ctx) {
        redisFree(m->ctx);
        m->ctx = NULL;
    }
    m->state = M_DOWN;
    m->lagging = false;
    atomic_store(&m->up, false);
    atomic_fetch_add(&m->errors, 1);
    m->next_connect_us = now + backoff_next(&m->backoff_us);
    m->want_write = false;
    if (was_up || !m->logged_down) {
        log_event(LOG_LEVEL_WARN, "master_down", "addr", m->name, "reason", why, NULL);
        m->logged_down = true;
    }
    master_reply failed = {.kind = MREPLY_FAIL, .sent = true};
    struct mrecord *r;
    while ((r = master_pop(m))) {
        if (r->kind == REC_BATCH) {
            batch_redo(p, m, r->batch, now);   /* may not have run */
            batch_answer(r->batch, r->slot, &failed);
        } else if (r->kind == REC_UNDO)
            undo_keep(m, r->undo, now);   /* it may not have run: send it again */
        free(r);
    }
}

static int master_append(struct master *m, enum rec_kind kind, struct mbatch *b, int slot,
                         int argc, const char **argv, const size_t *lens, uint64_t now,
                         uint64_t deadline)
{
    struct mrecord *r = malloc(sizeof *r);
    if (!r)
        return -1;
    if (redisAppendCommandArgv(m->ctx, argc, argv, lens) != REDIS_OK) {
        free(r);
        return -1;
    }
    r->kind = kind;
    r->batch = b;
    r->slot = slot;
    r->sent_us = now;
    r->deadline_us = deadline;
    r->undo = NULL;
    master_push(m, r);
    return 0;
}

static void master_connect(mpool *p, struct master *m, uint64_t now)
{
    m->ctx = redisConnectNonBlock(m->addr.host, m->addr.port);
    if (!m->ctx) {
        master_fail(p, m, "out of memory", now);
        return;
    }
    if (m->ctx->err) {
        master_fail(p, m, m->ctx->errstr, now);
        return;
    }
    m->state = M_CONNECTING;
    m->connect_deadline_us = now + MASTER_HANDSHAKE_TIMEOUT_US;
    m->want_write = true;
}

/* The TCP connect finished: authenticate and ping before any vote. */
static void master_handshake(mpool *p, struct master *m, uint64_t now)
{
    int err = connect_error(m->ctx->fd);
    if (err) {
        master_fail(p, m, strerror(err), now);
        return;
    }
    m->state = M_HANDSHAKE;
    uint64_t deadline = now + MASTER_HANDSHAKE_TIMEOUT_US;
    if (p->password) {
        const char *argv[] = {"AUTH", p->password};
        size_t lens[] = {4, strlen(p->password)};
        if (master_append(m, REC_AUTH, NULL, 0, 2, argv, lens, now, deadline) < 0)
            goto oom;
    }
    const char *info[] = {"INFO", "server", "persistence", "memory"};
    size_t ilen[] = {4, 6, 11, 6};
    if (master_append(m, REC_INFO, NULL, 0, 4, info, ilen, now, deadline) < 0)
        goto oom;
    /* Refused where CONFIG is renamed: then appendfsync is unknown. */
    const char *config[] = {"CONFIG", "GET", "appendfsync"};
    size_t clen[] = {6, 3, 11};
    if (master_append(m, REC_CONFIG, NULL, 0, 3, config, clen, now, deadline) < 0)
        goto oom;
    return;
oom:
    master_fail(p, m, "out of memory", now);
}

/* Writes undo command u on m's connection; the record owns u until the
 * answer. It gets the handshake's time limit, not the vote timeout: a
 * returning master with many undo commands must be able to run them all
 * rather than drop the connection and queue them again. A vote behind them
 * still completes on time (without this master's answer). -1 when out of
 * memory (u is still the caller's). */
static int undo_send(struct master *m, struct undo *u, uint64_t now)
{
    if (master_append(m, REC_UNDO, NULL, 0, u->argc, u->argv, u->lens, now,
                      now + MASTER_HANDSHAKE_TIMEOUT_US) < 0)
        return -1;
    m->tail->undo = u;
    return 0;
}

/* Writes the queued undo commands first on a new connection. */
static void undo_flush(struct master *m, uint64_t now)
{
    struct undo *u;
    while ((u = m->undo_head)) {
        m->undo_head = u->next;
        if (!m->undo_head)
            m->undo_tail = NULL;
        m->nundo--;
        if (now >= u->expires_us) {
            free(u);
        } else if (undo_send(m, u, now) < 0) {
            log_event(LOG_LEVEL_WARN, "master_undo_dropped", "addr", m->name, "reason", "out of memory", NULL);
            free(u);
        }
    }
}

/* m answers in time (after its handshake, or after catching up): the undo
 * commands go first, then it takes votes again. */
static void marker_report(mpool *p, struct master *m);

static void master_became_up(mpool *p, struct master *m, uint64_t now)
{
    undo_flush(m, now);
    m->state = M_UP;
    m->lagging = false;
    m->backoff_us = MASTER_BACKOFF_MIN_US;
    m->next_ping_us = now + MASTER_PING_INTERVAL_US;
    atomic_store(&m->up, true);
    m->logged_down = false;
    log_event(LOG_LEVEL_INFO, "master_up", "addr", m->name, NULL);
    if (p->quarantine_us && atomic_load(&m->marker) != QMARK_READY)
        marker_report(p, m);
}

/* A reply is overdue. The master takes no new votes until it has answered
 * all that is overdue, but the connection stays: a master that was only slow
 * or paused then runs what it was sent, in order, and is back as soon as it
 * catches up, with nothing lost in a reconnect. MASTER_LAG_LIMIT_US later
 * with no answer, the connection is dropped. */
static void master_lag(struct master *m)
{
    m->lagging = true;
    atomic_store(&m->up, false);
    atomic_fetch_add(&m->errors, 1);
    m->logged_down = true;
    log_event(LOG_LEVEL_WARN, "master_down", "addr", m->name, "reason", "reply timed out", NULL);
}

/* When the record at the head of m's queue is due: its deadline, or the
 * lag limit after it once m lags. */
static uint64_t head_due_us(const struct master *m)
{
    return m->head->deadline_us + (m->lagging ? MASTER_LAG_LIMIT_US : 0);
}

static const char *const policies[] = {"", "noeviction", "allkeys-lru", "allkeys-lfu",
                                       "allkeys-random", "volatile-lru", "volatile-lfu",
                                       "volatile-random", "volatile-ttl"};
#define NPOLICIES (sizeof policies / sizeof policies[0])

static void marker_due(void *arg);

/* Tells the marker callback, from a timer (never from inside a reply), that m
 * answered without a ready marker. At most one such timer per master. */
static void marker_report(mpool *p, struct master *m)
{
    if (!p->marker_fn || m->marker_report_due)
        return;
    if (mpool_after(p, 0, marker_due, m) == 0)
        m->marker_report_due = true;
}

static void marker_due(void *arg)
{
    struct master *m = arg;
    m->marker_report_due = false;
    if (!mpool_is_stopping(m->pool))
        m->pool->marker_fn(m->pool->marker_arg, m->idx);
}

void mpool_note_marker(mpool *p, int i, int state, long long ms_left)
{
    struct master *m = &p->masters[i];
    uint64_t until = ms_left > 0 ? mpool_now_us() + (uint64_t)ms_left * 1000ULL : 0;
    int was = atomic_exchange(&m->marker, state);
    uint64_t was_until = atomic_exchange(&m->quarantine_until_us, until);
    char left[24];
    snprintf(left, sizeof left, "%lld", ms_left);
    if (state == QMARK_READY && until && !was_until)
        log_event(LOG_LEVEL_WARN, "master_quarantined", "addr", m->name, "left_ms", left, NULL);
    else if (state != QMARK_READY && was == QMARK_READY)
        log_event(LOG_LEVEL_WARN, "master_quarantined", "addr", m->name, "reason",
                  "no ready cluster marker: it lost its data or the cluster is not set up", NULL);
    else if (state == QMARK_READY && !until && (was != QMARK_READY || was_until))
        log_event(LOG_LEVEL_INFO, "master_votes", "addr", m->name, NULL);
}

const char *mpool_run_id(const mpool *p, int i) { return p->masters[i].info.run_id; }

void mpool_set_marker_fn(mpool *p, mpool_marker_fn fn, void *arg)
{
    p->marker_fn = fn;
    p->marker_arg = arg;
}

/* INFO (server, persistence, memory) answered on a new connection. Returns
 * -1 when the connection was dropped. */
static int master_info(mpool *p, struct master *m, const redisReply *rr, uint64_t now)
{
    quarantine_info qi;
    if (rr->type != REDIS_REPLY_STRING || quarantine_parse_info(rr->str, rr->len, &qi) < 0) {
        if (!p->quarantine_us) {
            if (rr->type == REDIS_REPLY_STRING)
                m->info = qi;   /* quarantine is off: INFO is only informative */
            return 0;
        }
        char why[200];
        snprintf(why, sizeof why, "INFO unreadable (%.80s); restart quarantine needs run_id, "
                 "or run with --quarantine off", rr->type == REDIS_REPLY_ERROR ? rr->str : "no run_id");
        master_fail(p, m, why, now);
        return -1;
    }
    if (m->info.run_id[0] && strcmp(qi.run_id, m->info.run_id) != 0) {
        atomic_fetch_add(&m->restarts, 1);
        log_event(LOG_LEVEL_WARN, "master_restarted", "addr", m->name, NULL);
    }
    m->info = qi;
    int idx = 0;
    for (size_t k = 1; k < NPOLICIES; k++)
        if (!strcmp(qi.policy, policies[k]))
            idx = (int)k;
    atomic_store(&m->policy_idx, idx);
    return 0;
}

/* CONFIG GET appendfsync answered (or was refused): the handshake's last
 * question before the marker's "observe" and the closing PING. Returns -1
 * when the connection was dropped. */
static int master_config(mpool *p, struct master *m, const redisReply *rr, uint64_t now)
{
    const char *fsync = NULL;
    if (rr->type == REDIS_REPLY_ARRAY && rr->elements == 2 && rr->element[1]->type == REDIS_REPLY_STRING)
        fsync = rr->element[1]->str;
    m->persists = quarantine_persists(&m->info, fsync);
    enum master_persistence per = !m->info.aof_enabled ? MPERSIST_OFF
                                  : !fsync ? MPERSIST_UNKNOWN
                                  : !strcmp(fsync, "always") ? MPERSIST_ALWAYS
                                  : !strcmp(fsync, "everysec") ? MPERSIST_EVERYSEC
                                  : MPERSIST_NO;
    atomic_store(&m->persistence, per);
    bool lose = quarantine_may_lose(&m->info);
    atomic_store(&m->may_lose, lose);
    if (lose)
        log_event(LOG_LEVEL_WARN, "master_may_lose_locks", "addr", m->name, "maxmemory_policy",
                  m->info.policy[0] ? m->info.policy : "unknown", "appendonly",
                  m->info.aof_enabled ? "yes" : "no", "votes",
                  p->refuse_unsafe ? "refused (--unsafe-masters refuse)" : "counted", NULL);
    uint64_t deadline = now + MASTER_HANDSHAKE_TIMEOUT_US;
    if (p->quarantine_us) {
        char window[24];
        snprintf(window, sizeof window, "%llu", (unsigned long long)p->quarantine_us);
        const char *argv[] = {"EVAL", script_marker.body, "1", SCRIPT_MARKER_KEY, "observe",
                              m->info.run_id, window, m->persists ? "1" : "0"};
        size_t lens[8];
        for (int k = 0; k < 8; k++)
            lens[k] = strlen(argv[k]);
        if (master_append(m, REC_OBSERVE, NULL, 0, 8, argv, lens, now, deadline) < 0)
            goto oom;
    }
    const char *ping[] = {"PING"};
    size_t plen[] = {4};
    if (master_append(m, REC_HANDSHAKE_PING, NULL, 0, 1, ping, plen, now, deadline) < 0)
        goto oom;
    return 0;
oom:
    master_fail(p, m, "out of memory", now);
    return -1;
}

/* The marker script's "observe" answered {state, ms_left}. */
static void master_observed(mpool *p, struct master *m, const redisReply *rr)
{
    if (rr->type == REDIS_REPLY_ARRAY && rr->elements == 2 &&
        rr->element[0]->type == REDIS_REPLY_INTEGER && rr->element[1]->type == REDIS_REPLY_INTEGER &&
        rr->element[0]->integer >= QMARK_MISSING && rr->element[0]->integer <= QMARK_READY) {
        mpool_note_marker(p, m->idx, (int)rr->element[0]->integer, rr->element[1]->integer);
        return;
    }
    /* Its guard fails the same way, so it casts no vote. */
    log_event(LOG_LEVEL_ERROR, "master_marker_unreadable", "addr", m->name, "key", SCRIPT_MARKER_KEY,
              "error", rr->type == REDIS_REPLY_ERROR ? rr->str : "unexpected reply", NULL);
    mpool_note_marker(p, m->idx, QMARK_UNKNOWN, 0);
}

/* What a reply to a vote script says of m's marker: the guard refused, or
 * let it vote. Returns true when the answer is no vote. */
static bool master_guard(mpool *p, struct master *m, const mscript *s, const master_reply *mr)
{
    bool refused = p->refuse_unsafe && atomic_load(&m->may_lose);
    if (!s->guarded || !p->quarantine_us || mr->kind != MREPLY_VALUE || mr->nints < 1)
        return refused;
    if (mr->ints[0] == SCRIPT_NOT_SET_UP) {
        if (atomic_load(&m->marker) == QMARK_READY)
            mpool_note_marker(p, m->idx, QMARK_MISSING, 0);
        marker_report(p, m);
        return true;
    }
    if (mr->ints[0] == SCRIPT_QUARANTINED) {
        long long left = mr->nints >= 2 ? mr->ints[1] : 1;
        mpool_note_marker(p, m->idx, QMARK_READY, left > 0 ? left : 1);
        return true;
    }
    if (atomic_load(&m->marker) != QMARK_READY || atomic_load(&m->quarantine_until_us))
        mpool_note_marker(p, m->idx, QMARK_READY, 0);
    return refused;
}

/* A master's error answer, at most one line a second per master with a
 * count of those left out: a script error repeats on every request. */
static void log_master_error(struct master *m, const char *script, const char *error, uint64_t now)
{
    unsigned long long suppressed;
    if (!log_allow(&m->error_log, now, &suppressed))
        return;
    char more[24];
    snprintf(more, sizeof more, "%llu", suppressed);
    log_event(LOG_LEVEL_WARN, "master_error", "addr", m->name, "script", script, "error", error,
              "suppressed_since_last", more, NULL);
}

/* One reply arrived for the record at the head of m's queue. Returns -1 when
 * the connection was dropped. */
static int master_dispatch(mpool *p, struct master *m, redisReply *rr, uint64_t now)
{
    struct mrecord *r = master_pop(m);
    if (!r) {
        master_fail(p, m, "reply without a command", now);
        return -1;
    }
    atomic_fetch_add(&m->replies, 1);
    atomic_fetch_add(&m->reply_us_sum, now - r->sent_us);
    int rc = 0;
    switch (r->kind) {
    case REC_BATCH: {
        struct mbatch *b = r->batch;
        if (rr->type == REDIS_REPLY_ERROR && !strncmp(rr->str, "NOSCRIPT", 8) && !b->completed) {
            /* The master lost its script cache (restart, SCRIPT FLUSH): send
             * the body with EVAL; the batch keeps its deadline. */
            const char *argv0 = b->argv[0], *argv1 = b->argv[1];
            size_t len0 = b->argvlen[0], len1 = b->argvlen[1];
            b->argv[0] = "EVAL";
            b->argvlen[0] = 4;
            b->argv[1] = b->script->body;
            b->argvlen[1] = strlen(b->script->body);
            int app = master_append(m, REC_BATCH, b, r->slot, b->argc, b->argv, b->argvlen, now,
                                    r->deadline_us);
            b->argv[0] = argv0;
            b->argv[1] = argv1;
            b->argvlen[0] = len0;
            b->argvlen[1] = len1;
            if (app == 0) {
                free(r);   /* the batch's reference moves to the new record */
                return 0;
            }
        }
        master_reply mr;
        convert_reply(rr, &mr);
        mr.quarantined = master_guard(p, m, b->script, &mr);
        if (mr.kind == MREPLY_ERROR)
            log_master_error(m, b->script->name, mr.str, now);
        batch_answer(b, r->slot, &mr);
        break;
    }
    case REC_PING:
        break;
    case REC_UNDO:
        free(r->undo);
        if (rr->type == REDIS_REPLY_ERROR)
            log_master_error(m, "undo", rr->str, now);
        break;
    case REC_INFO:
        rc = master_info(p, m, rr, now);
        break;
    case REC_CONFIG:
        rc = master_config(p, m, rr, now);
        break;
    case REC_OBSERVE:
        master_observed(p, m, rr);
        break;
    case REC_AUTH:
    case REC_HANDSHAKE_PING:
        if (rr->type == REDIS_REPLY_ERROR) {
            char why[160];
            snprintf(why, sizeof why, "%s refused: %.120s",
                     r->kind == REC_AUTH ? "AUTH" : "PING", rr->str);
            master_fail(p, m, why, now);
            rc = -1;
        } else if (r->kind == REC_HANDSHAKE_PING) {
            master_became_up(p, m, now);
        }
        break;
    }
    free(r);
    return rc;
}

static void master_read(mpool *p, struct master *m, uint64_t now)
{
    if (redisBufferRead(m->ctx) != REDIS_OK) {
        master_fail(p, m, m->ctx->errstr[0] ? m->ctx->errstr : "read error", now);
        return;
    }
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(m->ctx, &reply) != REDIS_OK) {
            master_fail(p, m, "protocol error", now);
            return;
        }
        if (!reply) {
            if (m->lagging && (!m->head || now < m->head->deadline_us))
                master_became_up(p, m, now);   /* caught up */
            return;
        }
        int rc = master_dispatch(p, m, reply, now);
        freeReplyObject(reply);
        if (rc < 0 || !m->ctx)
            return;
    }
}

static void master_flush(mpool *p, struct master *m, uint64_t now)
{
    if (!m->ctx || m->state == M_CONNECTING || !m->want_write)
        return;
    int done = 0;
    if (redisBufferWrite(m->ctx, &done) != REDIS_OK) {
        master_fail(p, m, m->ctx->errstr[0] ? m->ctx->errstr : "write error", now);
        return;
    }
    m->want_write = !done;
}

/* ---- release-notice subscriptions ---- */

static void sub_fail(mpool *p, struct master *m, uint64_t now)
{
    if (m->sub) {
        redisFree(m->sub);
        m->sub = NULL;
    }
    if (atomic_load(&m->subscribed))
        log_event(LOG_LEVEL_WARN, "master_notices_lost", "addr", m->name, NULL);
    atomic_store(&m->subscribed, false);
    m->sub_connecting = false;
    m->sub_next_connect_us = now + backoff_next(&m->sub_backoff_us);
    (void)p;
}

static void sub_connect(mpool *p, struct master *m, uint64_t now)
{
    m->sub = redisConnectNonBlock(m->addr.host, m->addr.port);
    if (!m->sub || m->sub->err) {
        sub_fail(p, m, now);
        return;
    }
    m->sub_connecting = true;
    m->sub_deadline_us = now + MASTER_HANDSHAKE_TIMEOUT_US;
}

/* Writes one command on m's subscription connection. -1 on failure. */
static int sub_command(struct master *m, int argc, const char **argv, const size_t *lens)
{
    int done = 0;
    if (redisAppendCommandArgv(m->sub, argc, argv, lens) != REDIS_OK)
        return -1;
    while (!done)
        if (redisBufferWrite(m->sub, &done) != REDIS_OK)
            return -1;
    return 0;
}

/* The connect finished: AUTH if needed, then SUBSCRIBE to the prefix
 * itself (no key is empty, so nothing is published there: its
 * confirmation says the connection works) and to every channel wanted. */
static void sub_start(mpool *p, struct master *m, uint64_t now)
{
    if (connect_error(m->sub->fd)) {
        sub_fail(p, m, now);
        return;
    }
    m->sub_connecting = false;
    if (p->password) {
        const char *argv[] = {"AUTH", p->password};
        size_t lens[] = {4, strlen(p->password)};
        redisAppendCommandArgv(m->sub, 2, argv, lens);
    }
    size_t nch = 1;
    for (size_t b = 0; b < MASTER_CHAN_BUCKETS; b++)
        for (struct chan *c = p->chans[b]; c; c = c->next)
            nch++;
    const char **argv = malloc((nch + 1) * sizeof *argv);
    size_t *lens = malloc((nch + 1) * sizeof *lens);
    if (!argv || !lens)
        goto fail;
    size_t a = 0;
    argv[a] = "SUBSCRIBE";
    lens[a++] = 9;
    argv[a] = p->notice_channel;
    lens[a++] = p->notice_prefix_len;
    for (size_t b = 0; b < MASTER_CHAN_BUCKETS; b++)
        for (struct chan *c = p->chans[b]; c; c = c->next) {
            argv[a] = c->name;
            lens[a++] = c->len;
        }
    if (sub_command(m, (int)a, argv, lens) < 0)
        goto fail;
    free(argv);
    free(lens);
    return;
fail:
    free(argv);
    free(lens);
    sub_fail(p, m, now);
}

static size_t chan_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    return (size_t)(h & (MASTER_CHAN_BUCKETS - 1));
}

void mpool_notice_want(mpool *p, const char *channel, bool on)
{
    if (!p->notice_channel)
        return;
    size_t len = strlen(channel), b = chan_hash(channel, len);
    struct chan **pp = &p->chans[b];
    while (*pp && ((*pp)->len != len || memcmp((*pp)->name, channel, len)))
        pp = &(*pp)->next;
    struct chan *c = *pp;
    if (on && c) {
        c->refs++;
        return;
    }
    if (!on && (!c || --c->refs > 0))
        return;
    if (on) {
        c = malloc(sizeof *c + len + 1);
        if (!c)
            return;   /* no notices for it: its waiters fall back to timers */
        c->refs = 1;
        c->len = len;
        memcpy(c->name, channel, len + 1);
        c->next = p->chans[b];
        p->chans[b] = c;
    } else {
        *pp = c->next;
    }
    const char *argv[] = {on ? "SUBSCRIBE" : "UNSUBSCRIBE", channel};
    size_t lens[] = {on ? 9u : 11u, len};
    uint64_t now = mpool_now_us();
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->sub && !m->sub_connecting && sub_command(m, 2, argv, lens) < 0)
            sub_fail(p, m, now);
    }
    if (!on)
        free(c);
}

bool mpool_notices_up(mpool *p)
{
    int up = 0;
    for (int i = 0; i < p->n; i++)
        up += atomic_load(&p->masters[i].subscribed);
    return p->notice_channel && up >= p->n / 2 + 1;
}

static void sub_read(mpool *p, struct master *m, uint64_t now)
{
    if (redisBufferRead(m->sub) != REDIS_OK) {
        sub_fail(p, m, now);
        return;
    }
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(m->sub, &reply) != REDIS_OK) {
            sub_fail(p, m, now);
            return;
        }
        if (!reply)
            return;
        redisReply *r = reply;
        if (r->type == REDIS_REPLY_ERROR) {
            log_event(LOG_LEVEL_WARN, "master_subscribe_refused", "addr", m->name, "error", r->str, NULL);
            freeReplyObject(reply);
            sub_fail(p, m, now);
            return;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING) {
            const char *kind = r->element[0]->str;
            const redisReply *ch = r->element[1];
            if (!strcmp(kind, "subscribe") && ch->type == REDIS_REPLY_STRING &&
                ch->len == p->notice_prefix_len) {
                atomic_store(&m->subscribed, true);
                m->sub_backoff_us = MASTER_BACKOFF_MIN_US;
            } else if (!strcmp(kind, "subscribe") && ch->type == REDIS_REPLY_STRING &&
                       ch->len > p->notice_prefix_len) {
                /* Subscribed only now: a release just before was missed, so
                 * its waiters try once as if noticed. */
                p->notice_fn(p->notice_arg, ch->str + p->notice_prefix_len,
                             ch->len - p->notice_prefix_len);
            } else if (!strcmp(kind, "message") && r->element[2]->type == REDIS_REPLY_STRING) {
                p->notice_fn(p->notice_arg, r->element[2]->str, r->element[2]->len);
            }
        }
        freeReplyObject(reply);
        if (!m->sub)
            return;
    }
}

void mpool_set_notice(mpool *p, const char *channel, mpool_notice_fn fn, void *arg)
{
    free(p->notice_channel);
    p->notice_channel = channel ? strdup(channel) : NULL;
    p->notice_prefix_len = channel ? strlen(channel) : 0;
    p->notice_fn = fn;
    p->notice_arg = arg;
}

/* ---- the pool ---- */

mpool *mpool_new(const mpool_config *cfg)
{
    if (cfg->nmasters < 1 || cfg->nmasters > MASTER_MAX)
        return NULL;
    mpool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = cfg->nmasters;
    p->timeout_us = (uint64_t)cfg->timeout_ms * 1000ULL;
    p->quarantine_us = cfg->quarantine_us;
    p->redo_us = (uint64_t)cfg->max_ttl_ms * 1000ULL;
    p->refuse_unsafe = cfg->refuse_unsafe;
    p->wake_fd = -1;
    if (cfg->password && !(p->password = strdup(cfg->password))) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        m->idx = i;
        m->pool = p;
        pthread_mutex_init(&m->error_log.mu, NULL);
        atomic_store(&m->marker, QMARK_UNKNOWN);
        m->addr = cfg->masters[i];
        snprintf(m->name, sizeof m->name, "%s:%d", m->addr.host, m->addr.port);
        m->backoff_us = MASTER_BACKOFF_MIN_US;
        m->sub_backoff_us = MASTER_BACKOFF_MIN_US;
    }
    pthread_mutex_init(&p->jobs_lock, NULL);
    return p;
}

int mpool_size(const mpool *p) { return p->n; }

void mpool_status(mpool *p, int i, master_status *out)
{
    struct master *m = &p->masters[i];
    snprintf(out->addr, sizeof out->addr, "%s", m->name);
    out->up = atomic_load(&m->up);
    uint64_t until = atomic_load(&m->quarantine_until_us), now = mpool_now_us();
    out->marker = atomic_load(&m->marker);
    out->may_lose_locks = atomic_load(&m->may_lose);
    out->persistence = (enum master_persistence)atomic_load(&m->persistence);
    snprintf(out->policy, sizeof out->policy, "%s", policies[atomic_load(&m->policy_idx)]);
    bool guard_refuses = p->quarantine_us && (out->marker != QMARK_READY || until > now);
    out->quarantined = out->up && (guard_refuses || (p->refuse_unsafe && out->may_lose_locks));
    out->quarantine_left_ms = out->quarantined && until > now ? (long long)((until - now + 999) / 1000) : 0;
    out->restarts = atomic_load(&m->restarts);
    out->subscribed = atomic_load(&m->subscribed);
    out->errors = atomic_load(&m->errors);
    out->replies = atomic_load(&m->replies);
    out->reply_us_sum = atomic_load(&m->reply_us_sum);
}

/* Queues a job; wakes the loop unless lazy or already woken. */
static int post(mpool *p, void (*fn)(void *), void *arg, bool lazy)
{
    struct job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    j->next = NULL;
    j->fn = fn;
    j->arg = arg;
    pthread_mutex_lock(&p->jobs_lock);
    if (p->stopping) {
        pthread_mutex_unlock(&p->jobs_lock);
        free(j);
        return -1;
    }
    if (p->jobs_tail)
        p->jobs_tail->next = j;
    else
        p->jobs_head = j;
    p->jobs_tail = j;
    /* Posted from the loop itself: it runs the job before it sleeps again,
     * so no wake-up write is needed (the HTTP server posts every request
     * from this thread). */
    if (p->started && pthread_equal(pthread_self(), p->thread))
        lazy = true;
    bool wake = !lazy && !p->signalled;
    if (wake)
        p->signalled = true;
    if (lazy)
        atomic_store(&p->lazy_pending, true);
    pthread_mutex_unlock(&p->jobs_lock);
    if (wake) {
        uint64_t one = 1;
        ssize_t ignored = write(p->wake_fd, &one, sizeof one);
        (void)ignored;
    }
    return 0;
}

int mpool_post(mpool *p, void (*fn)(void *), void *arg) { return post(p, fn, arg, false); }

int mpool_post_lazy(mpool *p, void (*fn)(void *), void *arg) { return post(p, fn, arg, true); }

void mpool_eval(mpool *p, const mscript *s, uint32_t mask, int nkeys, int nargs,
                const char *const *args, const size_t *lens, mpool_done_fn done, void *arg)
{
    uint64_t now = mpool_now_us();
    int argc = nargs + 3;
    /* One allocation holds the whole command: NOSCRIPT may need it again
     * after this call. */
    struct mbatch *b = calloc(1, sizeof *b);
    void *mem = b ? malloc(pack_size(nargs, lens)) : NULL;
    if (!mem) {
        /* No memory: every master counts as failed. */
        free(b);
        master_reply replies[MASTER_MAX] = {0};
        for (int i = 0; i < p->n; i++)
            replies[i].kind = (mask >> i & 1u) ? MREPLY_FAIL : MREPLY_NONE;
        if (done)
            done(arg, replies);
        return;
    }
    const char **argv;
    size_t *argvlen;
    pack_command(mem, "EVALSHA", s->sha, nkeys, nargs, args, lens, &argv, &argvlen);
    b->done = done;
    b->arg = arg;
    b->script = s;
    b->argc = argc;
    b->argv = argv;
    b->argvlen = argvlen;
    b->deadline_us = now + p->timeout_us;
    b->refs = 2;   /* uncompleted + FIFO */

    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (!(mask >> i & 1u)) {
            b->replies[i].kind = MREPLY_NONE;
            continue;
        }
        if (!master_votes(m) ||
            master_append(m, REC_BATCH, b, i, argc, argv, argvlen, now, b->deadline_us) < 0) {
            b->replies[i].kind = MREPLY_FAIL;
            batch_redo(p, m, b, now);
            continue;
        }
        b->replies[i].kind = MREPLY_FAIL;   /* until it answers */
        b->replies[i].sent = true;
        b->pending++;
        b->refs++;
    }
    if (b->pending == 0) {
        b->next = p->ready;
        p->ready = b;
        b->refs--;   /* never joins the FIFO */
        return;
    }
    b->next = NULL;
    if (p->fifo_tail)
        p->fifo_tail->next = b;
    else
        p->fifo_head = b;
    p->fifo_tail = b;
}

/* ---- timers: a binary min-heap by (when, seq) ---- */

static bool timer_before(const struct timer *a, const struct timer *b)
{
    return a->when_us < b->when_us || (a->when_us == b->when_us && a->seq < b->seq);
}

int mpool_after(mpool *p, uint64_t delay_us, void (*fn)(void *), void *arg)
{
    if (p->timers_final)
        return -1;
    if (p->ntimers == p->timers_cap) {
        size_t cap = p->timers_cap ? p->timers_cap * 2 : 64;
        struct timer *t = realloc(p->timers, cap * sizeof *t);
        if (!t)
            return -1;
        p->timers = t;
        p->timers_cap = cap;
    }
    size_t i = p->ntimers++;
    struct timer t = {mpool_now_us() + delay_us, p->timer_seq++, fn, arg};
    while (i > 0 && timer_before(&t, &p->timers[(i - 1) / 2])) {
        p->timers[i] = p->timers[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->timers[i] = t;
    return 0;
}

static struct timer timer_pop(mpool *p)
{
    struct timer top = p->timers[0];
    struct timer last = p->timers[--p->ntimers];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= p->ntimers)
            break;
        if (c + 1 < p->ntimers && timer_before(&p->timers[c + 1], &p->timers[c]))
            c++;
        if (!timer_before(&p->timers[c], &last))
            break;
        p->timers[i] = p->timers[c];
        i = c;
    }
    if (p->ntimers)
        p->timers[i] = last;
    return top;
}

/* ---- the loop ---- */

static void run_jobs(mpool *p)
{
    uint64_t drained;
    ssize_t ignored = read(p->wake_fd, &drained, sizeof drained);
    (void)ignored;
    pthread_mutex_lock(&p->jobs_lock);
    struct job *j = p->jobs_head;
    p->jobs_head = p->jobs_tail = NULL;
    p->signalled = false;
    atomic_store(&p->lazy_pending, false);
    pthread_mutex_unlock(&p->jobs_lock);
    while (j) {
        struct job *next = j->next;
        j->fn(j->arg);
        free(j);
        j = next;
    }
}

static void run_ready(mpool *p)
{
    while (p->ready) {
        struct mbatch *b = p->ready;
        p->ready = b->next;
        batch_drop(b, batch_complete(b));
    }
}

static void check_deadlines(mpool *p, uint64_t now)
{
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->state == M_CONNECTING && now >= m->connect_deadline_us)
            master_fail(p, m, "connect timed out", now);
        else if (!m->head || now < head_due_us(m))
            continue;
        else if (master_votes(m))
            master_lag(m);
        else
            master_fail(p, m, m->lagging ? "no reply for a second" : "reply timed out", now);
    }
    /* Masters that failed answered their batches above; what is left at the
     * head of the FIFO past its deadline completes with the answers it has. */
    while (p->fifo_head && now >= p->fifo_head->deadline_us) {
        struct mbatch *b = p->fifo_head;
        p->fifo_head = b->next;
        if (!p->fifo_head)
            p->fifo_tail = NULL;
        /* unanswered slots stay MREPLY_FAIL; the FIFO's reference goes too */
        batch_drop(b, 1 + batch_complete(b));
    }
}

static void run_timers(mpool *p, uint64_t now)
{
    while (p->ntimers && p->timers[0].when_us <= now) {
        struct timer t = timer_pop(p);
        t.fn(t.arg);
    }
}

static void housekeeping(mpool *p, uint64_t now)
{
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (p->notice_channel) {
            if (!m->sub && now >= m->sub_next_connect_us)
                sub_connect(p, m, now);
            else if (m->sub && m->sub_connecting && now >= m->sub_deadline_us)
                sub_fail(p, m, now);
        }
        if (m->state == M_DOWN && now >= m->next_connect_us) {
            master_connect(p, m, now);
        } else if (master_votes(m) && now >= m->next_ping_us) {
            const char *ping[] = {"PING"};
            size_t plen[] = {4};
            m->next_ping_us = now + MASTER_PING_INTERVAL_US;
            if (master_append(m, REC_PING, NULL, 0, 1, ping, plen, now, now + p->timeout_us) < 0)
                master_fail(p, m, "out of memory", now);
        }
    }
}

static uint64_t next_wakeup(mpool *p, uint64_t now)
{
    uint64_t t = now + MASTER_PING_INTERVAL_US;
#define EARLIER(x) do { if ((x) < t) t = (x); } while (0)
    if (atomic_load(&p->lazy_pending))
        return now;   /* jobs the loop posted to itself run before it sleeps */
    if (p->io_run)
        EARLIER(p->io_due(p->io_arg, now));
    if (p->fifo_head)
        EARLIER(p->fifo_head->deadline_us);
    if (p->ntimers)
        EARLIER(p->timers[0].when_us);
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->state == M_DOWN)
            EARLIER(m->next_connect_us);
        else if (m->state == M_CONNECTING)
            EARLIER(m->connect_deadline_us);
        else if (master_votes(m))
            EARLIER(m->next_ping_us);
        if (p->notice_channel)
            EARLIER(!m->sub ? m->sub_next_connect_us
                            : m->sub_connecting ? m->sub_deadline_us : now + MASTER_PING_INTERVAL_US);
        if (m->head)
            EARLIER(head_due_us(m));
    }
#undef EARLIER
    return t;
}

static bool is_stopping(mpool *p)
{
    pthread_mutex_lock(&p->jobs_lock);
    bool s = p->stopping;
    pthread_mutex_unlock(&p->jobs_lock);
    return s;
}

static void *loop_main(void *arg)
{
    mpool *p = arg;
    struct pollfd fds[2 * MASTER_MAX + 2];
    int who[2 * MASTER_MAX + 2];   /* -1 wake fd, -2 io fd, i master i, MASTER_MAX + i its
                                      subscription */
    uint64_t now = mpool_now_us();
    housekeeping(p, now);
    for (;;) {
        for (int i = 0; i < p->n; i++)
            master_flush(p, &p->masters[i], now);

        int nfds = 0;
        fds[nfds].fd = p->wake_fd;
        fds[nfds].events = POLLIN;
        who[nfds++] = -1;
        if (p->io_run) {
            fds[nfds].fd = p->io_fd;
            fds[nfds].events = POLLIN;
            who[nfds++] = -2;
        }
        for (int i = 0; i < p->n; i++) {
            struct master *m = &p->masters[i];
            if (!m->ctx)
                continue;
            fds[nfds].fd = m->ctx->fd;
            fds[nfds].events = m->state == M_CONNECTING ? POLLOUT
                                                        : (short)(POLLIN | (m->want_write ? POLLOUT : 0));
            who[nfds++] = i;
        }
        for (int i = 0; i < p->n; i++) {
            struct master *m = &p->masters[i];
            if (!m->sub)
                continue;
            fds[nfds].fd = m->sub->fd;
            fds[nfds].events = m->sub_connecting ? POLLOUT : POLLIN;
            who[nfds++] = MASTER_MAX + i;
        }
        uint64_t wake = next_wakeup(p, now);
        now = mpool_now_us();
        uint64_t wait_us = wake > now ? wake - now : 0;
        struct timespec ts = {(time_t)(wait_us / 1000000ULL), (long)(wait_us % 1000000ULL) * 1000L};
        int rc = ppoll(fds, (nfds_t)nfds, &ts, NULL);
        if (rc < 0 && errno != EINTR) {
            log_event(LOG_LEVEL_ERROR, "loop_poll_failed", "error", strerror(errno), NULL);
            usleep(1000);
        }
        now = mpool_now_us();

        bool io_ready = false;
        for (int k = 0; rc > 0 && k < nfds; k++) {
            if (who[k] == -2 && fds[k].revents)
                io_ready = true;
            if (!fds[k].revents)
                continue;
            if (who[k] < 0)
                continue;
            if (who[k] >= MASTER_MAX) {
                struct master *sm = &p->masters[who[k] - MASTER_MAX];
                if (!sm->sub || sm->sub->fd != fds[k].fd)
                    continue;
                if (sm->sub_connecting)
                    sub_start(p, sm, now);
                else
                    sub_read(p, sm, now);
                continue;
            }
            struct master *m = &p->masters[who[k]];
            if (!m->ctx || m->ctx->fd != fds[k].fd)
                continue;
            if (m->state == M_CONNECTING) {
                master_handshake(p, m, now);
                continue;
            }
            if (fds[k].revents & (POLLIN | POLLERR | POLLHUP))
                master_read(p, m, now);
            if (m->ctx && (fds[k].revents & POLLOUT))
                master_flush(p, m, now);
        }
        if (p->io_run && (io_ready || p->io_due(p->io_arg, now) <= now))
            p->io_run(p->io_arg);
        if ((rc > 0 && fds[0].revents) || atomic_load(&p->lazy_pending))
            run_jobs(p);
        run_ready(p);
        check_deadlines(p, now);
        run_timers(p, now);
        housekeeping(p, now);
        run_ready(p);
        if (is_stopping(p))
            break;
    }
    /* Stopping: whatever is pending answers as failed. */
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->sub) {
            redisFree(m->sub);
            m->sub = NULL;
        }
        if (m->ctx || m->head) {
            m->state = M_DOWN;        /* not "was up": no master_down line */
            m->logged_down = true;
            master_fail(p, m, "stopping", now);
        }
    }
    check_deadlines(p, UINT64_MAX);
    run_ready(p);
    /* Timers still pending run once more, told by mpool_is_stopping that
     * this is the end, so that what they point at is freed. */
    p->timers_final = true;
    while (p->ntimers) {
        struct timer t = timer_pop(p);
        t.fn(t.arg);
    }
    return NULL;
}

bool mpool_is_stopping(const mpool *p) { return p->timers_final; }

bool mpool_on_loop(const mpool *p) { return p->started && pthread_equal(pthread_self(), p->thread); }

void mpool_set_io(mpool *p, int fd, mpool_io_fn run, mpool_io_due_fn due, void *arg)
{
    p->io_fd = fd;
    p->io_due = due;
    p->io_arg = arg;
    p->io_run = run;
}

int mpool_start(mpool *p)
{
    p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->wake_fd < 0)
        return -1;
    if (pthread_create(&p->thread, NULL, loop_main, p) != 0) {
        close(p->wake_fd);
        p->wake_fd = -1;
        return -1;
    }
    p->started = true;
    return 0;
}

void mpool_stop(mpool *p)
{
    if (!p->started)
        return;
    pthread_mutex_lock(&p->jobs_lock);
    p->stopping = true;
    pthread_mutex_unlock(&p->jobs_lock);
    uint64_t one = 1;
    ssize_t ignored = write(p->wake_fd, &one, sizeof one);
    (void)ignored;
    pthread_join(p->thread, NULL);
    p->started = false;
    /* Jobs posted before the stop flag was seen are dropped unrun. */
    struct job *j = p->jobs_head;
    while (j) {
        struct job *next = j->next;
        free(j);
        j = next;
    }
    p->jobs_head = p->jobs_tail = NULL;
    p->ntimers = 0;
}

void mpool_free(mpool *p)
{
    if (!p)
        return;
    mpool_stop(p);
    if (p->wake_fd >= 0)
        close(p->wake_fd);
    free(p->timers);
    free(p->notice_channel);
    for (size_t b = 0; b < MASTER_CHAN_BUCKETS; b++)
        while (p->chans[b]) {
            struct chan *c = p->chans[b];
            p->chans[b] = c->next;
            free(c);
        }
    for (int i = 0; i < p->n; i++) {
        struct undo *u = p->masters[i].undo_head;
        while (u) {
            struct undo *next = u->next;
            free(u);
            u = next;
        }
    }
    if (p->password) {
        explicit_bzero(p->password, strlen(p->password));
        free(p->password);
    }
    for (int i = 0; i < p->n; i++)
        pthread_mutex_destroy(&p->masters[i].error_log.mu);
    pthread_mutex_destroy(&p->jobs_lock);
    free(p);
}
