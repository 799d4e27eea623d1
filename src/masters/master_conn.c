/* master_conn.c - a master's connection: non-blocking connect (and TLS
 * handshake, master_tls.c), the handshake (AUTH, INFO, CONFIG GET appendfsync, the marker's "observe", PING) before
 * it takes votes, reading and dispatching replies, writing the buffer, lag
 * and failure (every command pending answers as failed, reconnect with
 * backoff), and the status snapshot other threads read.
 *
 * Depends on master_batch.c (batch replies, failed answers), master_undo.c
 * (remembering and replaying releases), master_marker.c, master_pipeline.c
 * the loop (loop.h) and master_tls.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "master_int.h"
#include "scripts.h"

#define MASTER_LAG_LIMIT_US 1000000ULL   /* an overdue reply this much later drops the connection */

static const char *const policies[] = {"", "noeviction", "allkeys-lru", "allkeys-lfu",
                                       "allkeys-random", "volatile-lru", "volatile-lfu",
                                       "volatile-random", "volatile-ttl"};
#define NPOLICIES (sizeof policies / sizeof policies[0])

/* The wait before the next reconnect, doubling up to the maximum. */
uint64_t master_backoff_next(uint64_t *backoff_us)
{
    uint64_t wait = *backoff_us;
    *backoff_us = wait * 2 > MASTER_BACKOFF_MAX_US ? MASTER_BACKOFF_MAX_US : wait * 2;
    return wait;
}

/* 0 when the non-blocking connect on fd succeeded, else its errno. */
int master_connect_error(int fd)
{
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        return errno;
    return soerr;
}

/* Records why m is not up, for /readyz; true when it replaces another
 * reason (m was already down, for something else). */
static bool set_reason(struct master *m, const char *why)
{
    pthread_mutex_lock(&m->reason_mu);
    bool changed = m->reason[0] && strcmp(m->reason, why) != 0;
    snprintf(m->reason, sizeof m->reason, "%s", why);
    pthread_mutex_unlock(&m->reason_mu);
    return changed;
}

int master_auth_argv(const mpool *p, const char *argv[3], size_t lens[3])
{
    int n = 0;
    argv[n] = "AUTH";
    lens[n++] = 4;
    if (p->username) {
        argv[n] = p->username;
        lens[n++] = strlen(p->username);
    }
    argv[n] = p->password;
    lens[n++] = strlen(p->password);
    return n;
}

/* Drops the connection: every pending command is answered as failed, and
 * undo commands wait for the next one. */
void master_fail(mpool *p, struct master *m, const char *why_in, uint64_t now)
{
    char why[200];   /* why_in may point into the context freed below */
    snprintf(why, sizeof why, "%s", why_in);
    bool was_up = master_votes(m);
    mtls_free(m->tls);
    m->tls = NULL;
    if (m->ctx) {
        redisFree(m->ctx);
        m->ctx = NULL;
    }
    m->state = M_DOWN;
    m->lagging = false;
    atomic_store(&m->up, false);
    atomic_fetch_add(&m->errors, 1);
    m->next_connect_us = now + master_backoff_next(&m->backoff_us);
    m->want_write = false;
    /* Once per outage, and again when the cause changes (a refused
     * connection, then a certificate that does not check out). */
    if (set_reason(m, why) || was_up || !m->logged_down) {
        log_event(LOG_LEVEL_WARN, "master_down", "addr", m->name, "reason", why, NULL);
        m->logged_down = true;
    }
    /* What was written first, then what was held back (it came after):
     * releases to redo are remembered in that order. */
    struct mrecord *r;
    while ((r = master_pop(m))) {
        if (r->kind == REC_BATCH || r->kind == REC_GROUP)
            master_record_failed(p, m, r, true, now);
        else if (r->kind == REC_UNDO)
            master_undo_keep(m, r->undo, now);   /* it may not have run: send it again */
        free(r);
    }
    while ((r = m->grp_head)) {   /* held back: never written */
        m->grp_head = r->next;
        master_record_failed(p, m, r, false, now);
        free(r);
    }
    m->grp_tail = NULL;
    m->drain_until = m->redo_tail = NULL;
    m->undo_after_drain = false;
}

void master_connect(mpool *p, struct master *m, uint64_t now)
{
    m->cached = 0;   /* a new connection may reach a master with an empty script cache */
    m->tls = NULL;
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

/* The TCP connect finished (or, for TLS, the socket is ready for the next
 * step of the TLS handshake, which runs under the same connect deadline):
 * authenticate and ping before any vote. */
void master_handshake(mpool *p, struct master *m, uint64_t now)
{
    char why[200];
    if (!m->tls) {
        int err = master_connect_error(m->ctx->fd);
        if (err) {
            master_fail(p, m, strerror(err), now);
            return;
        }
        if (m->addr.tls && !(m->tls = mtls_start(p->tls, m->ctx->fd, m->addr.host, why, sizeof why))) {
            master_fail(p, m, why, now);
            return;
        }
    }
    if (m->tls) {
        int hs = mtls_handshake(m->tls, why, sizeof why);
        if (hs < 0)
            master_fail(p, m, why, now);
        if (hs <= 0)
            return;   /* still M_CONNECTING: the connect deadline holds */
    }
    m->state = M_HANDSHAKE;
    uint64_t deadline = now + MASTER_HANDSHAKE_TIMEOUT_US;
    if (p->password) {
        const char *argv[3];
        size_t lens[3];
        int argc = master_auth_argv(p, argv, lens);
        if (master_append(m, REC_AUTH, NULL, 0, argc, argv, lens, now, deadline) < 0)
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

/* m answers in time (after its handshake, or after catching up): the undo
 * commands go first, then it takes votes again. */
static void master_became_up(mpool *p, struct master *m, uint64_t now)
{
    /* What m was given while it voted and still holds back (group commit)
     * came before anything remembered while it lagged: it goes first. */
    master_group_flush(p, m, now);
    if (m->drain_until)
        m->undo_after_drain = true;   /* they go behind what the drain holds (master_flush) */
    else
        master_undo_flush(m, now);
    m->state = M_UP;
    m->lagging = false;
    m->backoff_us = MASTER_BACKOFF_MIN_US;
    m->next_ping_us = now + MASTER_PING_INTERVAL_US;
    atomic_store(&m->up, true);
    m->logged_down = false;
    set_reason(m, "");
    log_event(LOG_LEVEL_INFO, "master_up", "addr", m->name, NULL);
    if (p->quarantine_us && atomic_load(&m->marker) != QMARK_READY)
        master_marker_report(p, m);
}

/* A reply is overdue. The master takes no new votes until it has answered
 * all that is overdue, but the connection stays: a master that was only slow
 * or paused then runs what it was sent, in order, and is back as soon as it
 * catches up, with nothing lost in a reconnect. MASTER_LAG_LIMIT_US later
 * with no answer, the connection is dropped. */
void master_lag(struct master *m)
{
    m->lagging = true;
    atomic_store(&m->up, false);
    atomic_fetch_add(&m->errors, 1);
    m->logged_down = true;
    set_reason(m, "reply timed out");
    log_event(LOG_LEVEL_WARN, "master_down", "addr", m->name, "reason", "reply timed out", NULL);
}

/* When the record at the head of m's queue is due: its deadline, or the
 * lag limit after it once m lags. */
uint64_t master_head_due_us(const struct master *m)
{
    return m->head->deadline_us + (m->lagging ? MASTER_LAG_LIMIT_US : 0);
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

/* One reply arrived for the record at the head of m's queue. Returns -1 when
 * the connection was dropped. */
static int master_dispatch(mpool *p, struct master *m, redisReply *rr, uint64_t now)
{
    struct mrecord *r = master_pop(m);
    if (!r) {
        master_fail(p, m, "reply without a command", now);
        return -1;
    }
    if (r == m->drain_until)
        m->drain_until = NULL;   /* what a NOSCRIPT sent again may go (master_flush) */
    atomic_fetch_add(&m->replies, 1);
    atomic_fetch_add(&m->reply_us_sum, now > r->sent_us ? now - r->sent_us : 0);
    if (now > r->due_us)
        atomic_fetch_add(&m->late_replies, 1);
    /* The master answers: the next command it owes counts its time from
     * now, for whether it is late. A master working through a long queue
     * this process sent at once (a burst of renewals) is busy, not gone;
     * one that stops answering is late a timeout after its last answer. */
    struct mrecord *next = m->head;
    if (next && next->out && next->deadline_us < now + next->timeout_us)
        next->deadline_us = now + next->timeout_us;
    int rc = 0;
    switch (r->kind) {
    case REC_BATCH:
        master_batch_reply(p, m, r, rr, now);
        break;
    case REC_GROUP:
        master_group_reply(p, m, r, rr, now);
        break;
    case REC_PING:
        break;
    case REC_UNDO:
        free(r->undo);
        if (rr->type == REDIS_REPLY_ERROR)
            master_log_error(m, "undo", rr->str, now);
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

void master_read(mpool *p, struct master *m, uint64_t now)
{
    char why[200];
    if (mlink_read(m->ctx, m->tls, why, sizeof why) < 0) {
        master_fail(p, m, why, now);
        return;
    }
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(m->ctx, &reply) != REDIS_OK) {
            master_fail(p, m, "protocol error", now);
            return;
        }
        if (!reply) {
            /* caught up: nothing it owes was due before now */
            if (m->lagging && (!m->head || now < m->head->due_us))
                master_became_up(p, m, now);
            return;
        }
        int rc = master_dispatch(p, m, reply, now);
        freeReplyObject(reply);
        if (rc < 0 || !m->ctx)
            return;
    }
}

void master_flush(mpool *p, struct master *m, uint64_t now)
{
    if (!m->ctx || m->state == M_CONNECTING)
        return;
    /* Group commit: what this turn held back goes out now, unless a write
     * to m is still unanswered; then it waits for those answers and goes
     * as one call with whatever else arrives meanwhile. The group grows
     * with the master's round trip under load, and a lone command (one
     * client: nothing in flight) is never held. */
    if (m->grp_head && !(m->head && m->head->out))
        master_group_flush(p, m, now);
    if (m->undo_after_drain && !m->drain_until) {
        m->undo_after_drain = false;
        master_undo_flush(m, now);
    }
    if (!m->want_write)
        return;
    bool done = false;
    char why[200];
    if (mlink_write(m->ctx, m->tls, &done, why, sizeof why) < 0) {
        master_fail(p, m, why, now);
        return;
    }
    /* The clock now, not the turn's: the turn may have run long (a pause,
     * a CPU quota) since its poll. */
    (void)now;
    master_sent(m, p->timeout_us, loop_now_us());
    m->want_write = !done;
}

void mpool_status(mpool *p, int i, master_status *out)
{
    struct master *m = &p->masters[i];
    snprintf(out->addr, sizeof out->addr, "%s", m->name);
    out->up = atomic_load(&m->up);
    out->late = atomic_load(&m->lagging);
    uint64_t until = atomic_load(&m->quarantine_until_us), now = loop_now_us();
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
    out->late_replies = atomic_load(&m->late_replies);
    uint64_t refused = atomic_load(&m->refused_at_us);
    out->refusing = out->up && refused && now < refused + MASTER_REFUSING_MS * 1000ULL;
    uint64_t word = atomic_load(&m->refusal_word);
    memset(out->refusal, 0, sizeof out->refusal);
    if (out->refusing)
        memcpy(out->refusal, &word, sizeof word);
    out->refusals = atomic_load(&m->refusals);
    out->tls = m->addr.tls;
    pthread_mutex_lock(&m->reason_mu);
    snprintf(out->reason, sizeof out->reason, "%s", out->up ? "" : m->reason);
    pthread_mutex_unlock(&m->reason_mu);
}
