/* master_loop.c - the pool: mpool_new, start, stop and free, and the pool
 * as its event loop's client (loop.h): every master's two connections to
 * poll, what poll found, and each turn's bookkeeping (deadlines,
 * reconnects, idle pings, when the masters next need a turn).
 *
 * Depends on master_notice.c, master_conn.c, master_batch.c, master_undo.c
 * (freeing), master_pipeline.c (the idle PING), the loop (loop.h) and
 * master_tls.c (poll events, the shared TLS context); none of
 * them calls back into it.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "master_int.h"

static const loop_client pool_client;

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
    if ((cfg->password && !(p->password = strdup(cfg->password))) ||
        (cfg->username && !(p->username = strdup(cfg->username)))) {
        free(p->password);
        free(p);
        return NULL;
    }
    p->tls = cfg->tls;
    mtls_ctx_ref(p->tls);
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        m->idx = i;
        m->pool = p;
        pthread_mutex_init(&m->error_log.mu, NULL);
        pthread_mutex_init(&m->reason_mu, NULL);
        atomic_store(&m->marker, QMARK_UNKNOWN);
        m->addr = cfg->masters[i];
        snprintf(m->name, sizeof m->name, "%s:%d", m->addr.host, m->addr.port);
        m->backoff_us = MASTER_BACKOFF_MIN_US;
        m->sub_backoff_us = MASTER_BACKOFF_MIN_US;
    }
    p->loop = loop_new(&pool_client, p);
    if (!p->loop) {
        mpool_free(p);
        return NULL;
    }
    return p;
}

int mpool_size(const mpool *p) { return p->n; }

rl_loop *mpool_loop(mpool *p) { return p->loop; }

/* Reads whatever m's socket holds now (until pred(m, now) is false, if
 * given): a reply that arrived while this process could not look (it was
 * paused, or out of CPU time) is the master's answer in time. */
static void read_waiting(mpool *p, struct master *m, uint64_t now,
                         bool (*pred)(const struct master *m, uint64_t now))
{
    if (m->state != M_UP && m->state != M_HANDSHAKE)
        return;   /* not connected yet (a TLS handshake is master_handshake's) */
    for (int k = 0; k < 64 && m->ctx && m->head && (!pred || pred(m, now)); k++) {
        struct pollfd pfd = {m->ctx->fd, POLLIN, 0};
        if (poll(&pfd, 1, 0) <= 0)
            break;
        struct mrecord *before = m->head;
        master_read(p, m, now);
        if (m->ctx && m->head == before)
            break;   /* nothing of it came */
    }
}

static bool head_due(const struct master *m, uint64_t now) { return now >= master_head_due_us(m); }

/* A batch past its deadline fails on a master only once that master is
 * late: one that is still answering the commands before it (its queue's
 * head not due yet, master_read moves that on with each answer) is busy,
 * and the batch waits until its head is due. So a vote is missing exactly
 * when its master is judged late, never for a queue this process filled. */
static bool batch_waits(mpool *p, const struct mbatch *b, uint64_t now, uint64_t *until)
{
    *until = 0;
    for (int i = 0; i < p->n; i++) {
        const master_reply *r = &b->replies[i];
        struct master *m = &p->masters[i];
        if (r->kind != MREPLY_FAIL || !r->sent || !master_votes(m) || (!m->head && !m->grp_head))
            continue;   /* answered, never sent, or its master lags or failed */
        /* Nothing written is owed: its command is still held back (group
         * commit) and goes out this turn, with the timeout from then. */
        uint64_t due = m->head ? master_head_due_us(m) : now + p->timeout_us;
        if (now < due && (!*until || due < *until))
            *until = due;
    }
    return *until != 0;
}

/* Whether m owes something overdue, once what its socket holds is read. */
static bool still_overdue(mpool *p, struct master *m, uint64_t now)
{
    read_waiting(p, m, now, head_due);
    return m->ctx && m->head && now >= master_head_due_us(m);
}

static void check_deadlines(mpool *p, uint64_t now)
{
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->state == M_CONNECTING && now >= m->connect_deadline_us)
            master_fail(p, m, m->tls ? "TLS handshake timed out (a plain port, or a paused master?)"
                                     : "connect timed out", now);
        else if (!m->head || now < master_head_due_us(m))
            continue;
        else if (now != UINT64_MAX && !still_overdue(p, m, now))
            continue;
        else if (master_votes(m))
            master_lag(m);
        else
            master_fail(p, m, m->lagging ? "no reply for a second" : "reply timed out", now);
    }
    /* Before a batch is given up on, the replies that may be waiting for it
     * are read (only when one is due: this costs a poll per master). */
    if (now != UINT64_MAX && p->fifo_head && now >= p->fifo_head->deadline_us)
        for (int i = 0; i < p->n; i++)
            read_waiting(p, &p->masters[i], now, NULL);
    mpool_run_ready(p);   /* batches the replies read above decided */
    mpool_expire_batches(p, now, now == UINT64_MAX ? NULL : batch_waits);
}

static void housekeeping(mpool *p, uint64_t now)
{
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (p->notice_channel) {
            if (!m->sub && now >= m->sub_next_connect_us)
                master_sub_connect(p, m, now);
            else if (m->sub && m->sub_connecting && now >= m->sub_deadline_us)
                master_sub_fail(p, m, now);
        }
        if (m->state == M_DOWN && now >= m->next_connect_us) {
            master_connect(p, m, now);
        } else if (master_votes(m) && now >= m->next_ping_us) {
            const char *ping[] = {"PING"};
            size_t plen[] = {4};
            m->next_ping_us = now + MASTER_PING_INTERVAL_US;
            master_group_flush(p, m, now);   /* what this turn holds goes first */
            if (master_append(m, REC_PING, NULL, 0, 1, ping, plen, now, now + p->timeout_us) < 0)
                master_fail(p, m, "out of memory", now);
        }
    }
}

/* ---- the pool as its loop's client (loop.h): each turn, in order ---- */

/* Writes what is buffered (a first turn also connects). */
static void on_before_poll(void *arg, uint64_t now)
{
    mpool *p = arg;
    if (!p->connected_once) {
        p->connected_once = true;
        housekeeping(p, now);
    }
    for (int i = 0; i < p->n; i++) {
        master_flush(p, &p->masters[i], now);
        master_sub_flush(p, &p->masters[i], now);
    }
}

/* Every master's two connections; poll_who[k] says whose fds[k] is:
 * i for master i, MASTER_MAX + i for its subscription. */
static int on_fds(void *arg, struct pollfd *fds, int cap)
{
    mpool *p = arg;
    int n = 0;
    for (int i = 0; i < p->n && n < cap; i++) {
        struct master *m = &p->masters[i];
        if (!m->ctx)
            continue;
        fds[n] = (struct pollfd){.fd = m->ctx->fd,
                                 .events = mlink_events(m->tls, m->state == M_CONNECTING, m->want_write)};
        p->poll_who[n++] = i;
    }
    for (int i = 0; i < p->n && n < cap; i++) {
        struct master *m = &p->masters[i];
        if (!m->sub)
            continue;
        fds[n] = (struct pollfd){.fd = m->sub->fd,
                                 .events = mlink_events(m->sub_tls, m->sub_connecting, m->sub_want_write)};
        p->poll_who[n++] = MASTER_MAX + i;
    }
    return n;
}

static uint64_t on_due(void *arg, uint64_t now)
{
    mpool *p = arg;
    uint64_t t = now + MASTER_PING_INTERVAL_US;
#define EARLIER(x) do { if ((x) < t) t = (x); } while (0)
    if (p->fifo_head)
        EARLIER(p->fifo_head->deadline_us);
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
            EARLIER(master_head_due_us(m));
    }
#undef EARLIER
    return t;
}

static void on_ready(void *arg, const struct pollfd *fds, int n, int rc, uint64_t now)
{
    mpool *p = arg;
    for (int k = 0; rc > 0 && k < n; k++) {
        if (!fds[k].revents)
            continue;
        int who = p->poll_who[k];
        if (who >= MASTER_MAX) {
            struct master *sm = &p->masters[who - MASTER_MAX];
            if (!sm->sub || sm->sub->fd != fds[k].fd)
                continue;
            if (sm->sub_connecting) {
                master_sub_start(p, sm, now);
                continue;
            }
            if (mlink_readable(sm->sub_tls, fds[k].revents))
                master_sub_read(p, sm, now);
            if (sm->sub && (fds[k].revents & POLLOUT))
                master_sub_flush(p, sm, now);
            continue;
        }
        struct master *m = &p->masters[who];
        if (!m->ctx || m->ctx->fd != fds[k].fd)
            continue;
        if (m->state == M_CONNECTING) {
            master_handshake(p, m, now);
            continue;
        }
        if (mlink_readable(m->tls, fds[k].revents))
            master_read(p, m, now);
        if (m->ctx && (fds[k].revents & POLLOUT))
            master_flush(p, m, now);
    }
    mpool_run_decided(p);   /* after every reply this poll brought */
}

static void on_after_jobs(void *arg, uint64_t now)
{
    mpool *p = arg;
    mpool_run_ready(p);
    check_deadlines(p, now);
}

static void on_after_timers(void *arg, uint64_t now)
{
    mpool *p = arg;
    housekeeping(p, now);
    mpool_run_ready(p);
}

/* Stopping: whatever is pending answers as failed. */
static void on_stop(void *arg, uint64_t now)
{
    mpool *p = arg;
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->sub) {
            mtls_free(m->sub_tls);
            m->sub_tls = NULL;
            redisFree(m->sub);
            m->sub = NULL;
        }
        if (m->ctx || m->head || m->grp_head) {
            m->state = M_DOWN;        /* not "was up": no master_down line */
            m->logged_down = true;
            master_fail(p, m, "stopping", now);
        }
    }
    check_deadlines(p, UINT64_MAX);
    mpool_run_ready(p);
}

static const loop_client pool_client = {
    .before_poll = on_before_poll,
    .fds = on_fds,
    .due = on_due,
    .ready = on_ready,
    .after_jobs = on_after_jobs,
    .after_timers = on_after_timers,
    .stop = on_stop,
};

int mpool_start(mpool *p) { return loop_start(p->loop); }

void mpool_stop(mpool *p) { loop_stop(p->loop); }

void mpool_free(mpool *p)
{
    if (!p)
        return;
    loop_free(p->loop);   /* stops it first */
    mpool_notice_free(p);
    for (int i = 0; i < p->n; i++)
        master_undo_free(&p->masters[i]);
    if (p->password) {
        explicit_bzero(p->password, strlen(p->password));
        free(p->password);
    }
    free(p->username);
    mtls_ctx_free(p->tls);
    for (int i = 0; i < p->n; i++) {
        pthread_mutex_destroy(&p->masters[i].error_log.mu);
        pthread_mutex_destroy(&p->masters[i].reason_mu);
    }
    free(p);
}
