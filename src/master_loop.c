/* master_loop.c - the pool and its loop thread: mpool_new, start, stop and
 * free; the poll() loop over the wake fd, the io hook's fd and every
 * master's two connections; posted jobs; and each turn's bookkeeping
 * (deadlines, reconnects, idle pings, when to wake next).
 *
 * Depends on master_notice.c, master_conn.c, master_batch.c, master_undo.c
 * (freeing), master_pipeline.c (the idle PING), master_timer.c and
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

struct job {
    struct job *next;
    void (*fn)(void *);
    void *arg;
};

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
    pthread_mutex_init(&p->jobs_lock, NULL);
    return p;
}

int mpool_size(const mpool *p) { return p->n; }

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

/* Runs the posted jobs; woken: the wake fd was readable, so it is drained
 * (a run for lazy jobs alone reads nothing: that read would only fail with
 * EAGAIN, once per request at one client). */
static void run_jobs(mpool *p, bool woken)
{
    if (woken) {
        uint64_t drained;
        ssize_t ignored = read(p->wake_fd, &drained, sizeof drained);
        (void)ignored;
    }
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

static void check_deadlines(mpool *p, uint64_t now)
{
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->state == M_CONNECTING && now >= m->connect_deadline_us)
            master_fail(p, m, m->tls ? "TLS handshake timed out (a plain port, or a paused master?)"
                                     : "connect timed out", now);
        else if (!m->head || now < master_head_due_us(m))
            continue;
        else if (master_votes(m))
            master_lag(m);
        else
            master_fail(p, m, m->lagging ? "no reply for a second" : "reply timed out", now);
    }
    mpool_expire_batches(p, now);
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
            EARLIER(master_head_due_us(m));
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
        for (int i = 0; i < p->n; i++) {
            master_flush(p, &p->masters[i], now);
            master_sub_flush(p, &p->masters[i], now);
        }

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
            fds[nfds].events = mlink_events(m->tls, m->state == M_CONNECTING, m->want_write);
            who[nfds++] = i;
        }
        for (int i = 0; i < p->n; i++) {
            struct master *m = &p->masters[i];
            if (!m->sub)
                continue;
            fds[nfds].fd = m->sub->fd;
            fds[nfds].events = mlink_events(m->sub_tls, m->sub_connecting, m->sub_want_write);
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
            struct master *m = &p->masters[who[k]];
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
        if (p->io_run && (io_ready || p->io_due(p->io_arg, now) <= now))
            p->io_run(p->io_arg);
        bool woken = rc > 0 && fds[0].revents;
        if (woken || atomic_load(&p->lazy_pending))
            run_jobs(p, woken);
        mpool_run_ready(p);
        check_deadlines(p, now);
        mpool_run_timers(p, now);
        housekeeping(p, now);
        mpool_run_ready(p);
        if (is_stopping(p))
            break;
    }
    /* Stopping: whatever is pending answers as failed. */
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->sub) {
            mtls_free(m->sub_tls);
            m->sub_tls = NULL;
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
    mpool_run_ready(p);
    /* Timers still pending run once more, told by mpool_is_stopping that
     * this is the end, so that what they point at is freed. */
    mpool_finish_timers(p);
    return NULL;
}

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
    pthread_mutex_destroy(&p->jobs_lock);
    free(p);
}
