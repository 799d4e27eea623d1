/* http_conns.c - the registry of connections, its watcher, and delivery
 * checks (http_int.h). */
#include "http_int.h"

/* Hands ctx's grant to the watcher until its delivery is known. False
 * (nothing handed over) when out of memory: it then counts as delivered. */
bool http_check_delivery(req_ctx *ctx)
{
    delivery_check *c = malloc(sizeof *c);
    if (!c)
        return false;
    c->fd = ctx->confirm_fd;
    c->eng = ctx->eng;
    c->h = ctx->h;
    long long validity_ms = ctx->sem ? ctx->sem_res->validity_ms : ctx->w->res.validity_ms;
    c->until_us = ctx->start_us + (uint64_t)(validity_ms > 0 ? validity_ms : 0) * 1000ULL;
    c->sem = ctx->sem;   /* the check owns them now */
    c->sem_res = ctx->sem_res;
    c->pool = ctx->sh->pool;
    ctx->sem = NULL;
    ctx->sem_res = NULL;
    ctx->confirm_fd = -1;
    http_server *s = ctx->s;
    pthread_mutex_lock(&s->reg_lock);
    c->next = s->checks;
    s->checks = c;
    pthread_mutex_unlock(&s->reg_lock);
    if (s->watch_ep >= 0) {   /* a reset is seen at once (http_watch_main) */
        struct epoll_event ev = {.events = EPOLLET, .data.fd = c->fd};
        epoll_ctl(s->watch_ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    return true;
}

/* Has c's answer arrived (1), met a reset (0), or is it not known yet (-1)?
 * At the end (finally) an unknown one counts as arrived. */
static int delivery_state(const delivery_check *c, uint64_t now, bool finally)
{
    struct pollfd pfd = {c->fd, 0, 0};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR))) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || !(pfd.revents & POLLHUP))
            return 0;
    }
    int unacked = 0;
    if (ioctl(c->fd, SIOCOUTQ, &unacked) == 0 && unacked == 0)
        return 1;
    return finally || now >= c->until_us ? 1 : -1;
}

/* Settles the delivery checks whose outcome is known (all of them when
 * finally): a grant that met a reset is released (rl_finish undelivered). */
void http_settle_deliveries(http_server *s, bool finally)
{
    uint64_t now = loop_now_us();
    delivery_check *done = NULL;
    pthread_mutex_lock(&s->reg_lock);
    for (delivery_check **p = &s->checks; *p;) {
        delivery_check *c = *p;
        int st = delivery_state(c, now, finally);
        if (st < 0) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        c->arrived = st == 1;
        c->next = done;
        done = c;
    }
    pthread_mutex_unlock(&s->reg_lock);
    while (done) {
        delivery_check *c = done;
        done = c->next;
        if (s->watch_ep >= 0)
            epoll_ctl(s->watch_ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        if (c->sem && !c->arrived) {
            metrics_count(s->m, METRICS_ABANDONED_GRANTS);
            http_sem_give_back(s, c->pool, c->sem->name, c->sem_res);
        }
        rl_finish(c->eng, c->h, c->arrived);
        free(c->sem);
        free(c->sem_res);
        free(c);
    }
}

/* Do a and b name the same host (address only, not port)? */
static bool same_host(const http_addr *a, const http_addr *b)
{
    if (a->sa.sa_family != b->sa.sa_family)
        return false;
    if (a->sa.sa_family == AF_INET)
        return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
    if (a->sa.sa_family == AF_INET6)
        return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, sizeof(struct in6_addr));
    return false;
}

/* libmicrohttpd's connection start and close: the registry the watcher and
 * the shutdown walk. */
void http_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                   enum MHD_ConnectionNotificationCode code)
{
    http_server *s = ((http_shard *)cls)->s;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_info *ci = calloc(1, sizeof *ci);
        const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !fdi) {
            free(ci);
            *socket_context = NULL;
            return;
        }
        ci->fd = fdi->connect_fd;
        ci->phase_start_us = loop_now_us();
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ai && ai->client_addr)
            http_peer_note(ci, ai->client_addr);
        pthread_mutex_lock(&s->reg_lock);
        /* The limits hold for the whole server: each loop's daemon would
         * count only the connections the kernel happened to give it. One
         * over a limit is closed at once, as libmicrohttpd would. */
        bool over = s->nconns >= s->cfg->max_connections;
        if (!over && ci->peer_len) {
            int same = 0;
            for (conn_info *o = s->conns; o; o = o->next)
                same += !o->shut && same_host(&o->peer, &ci->peer);
            over = same >= s->cfg->max_connections_per_ip;
        }
        if (over) {
            ci->shut = true;
            shutdown(ci->fd, SHUT_RDWR);
        }
        DLIST_PUSH(s->conns, ci, prev, next);
        s->nconns++;
        pthread_mutex_unlock(&s->reg_lock);
        *socket_context = ci;
        return;
    }
    conn_info *ci = *socket_context;
    if (!ci)
        return;
    pthread_mutex_lock(&s->reg_lock);
    DLIST_UNLINK(s->conns, ci, prev, next);
    s->nconns--;
    s->nrecheck -= ci->recheck;
    s->closed_since_trim++;
    s->last_close_us = loop_now_us();
    pthread_mutex_unlock(&s->reg_lock);
    http_peer_forget(ci);
    free(ci);
    *socket_context = NULL;
}

/* What one look at the connections found to do once reg_lock is let go. */
struct watch_acts {
    req_ctx *left[64];          /* held streams and watches whose client left: resume to close */
    int nleft;
    req_ctx *probe[64];         /* held streams whose client sent its FIN: probe them */
    int nprobe;
    unsigned long long slow;
    int *nprobed;               /* the server's count (reg_lock) */
};

/* Looks at one connection (reg_lock held): see watch_main. */
static void look_at(conn_info *ci, uint64_t now, uint64_t timeout_us, struct watch_acts *a)
{
    req_ctx *ctx = ci->suspended;
    if (ctx && (ctx->hold || ctx->watch) && !ctx->gone && a->nleft < 64 &&
        (http_client_gone(ci->fd) || (ctx->watch && http_client_done_sending(ci->fd)))) {
        /* (a watch's client has nothing to say: its FIN ends it) */
        /* A held stream's client left: resume it so that it closes
         * (hold_reader), and http_on_completed releases. */
        ctx->gone = true;
        ctx->susp = false;
        ci->suspended = NULL;
        a->left[a->nleft++] = ctx;
    } else if (ctx && ctx->hold && !ctx->gone && a->nprobe < 64 && http_client_done_sending(ci->fd) &&
               (!ctx->probed || ctx->probed_us + HTTP_PROBE_INTERVAL_MS * 1000ULL <= now)) {
        /* Closed, or only half-closed? A closed client answers the probe
         * with a reset (seen at once: watch_ep). A half-closed one reads
         * it, and is probed again, since its full close sends nothing. */
        if (!ctx->probed)
            (*a->nprobed)++;
        ctx->probed = true;
        ctx->probed_us = now;
        ctx->susp = false;   /* ours to resume: the stream stays open till then */
        ci->suspended = NULL;
        a->probe[a->nprobe++] = ctx;
    } else if (ctx && !ctx->hold && ctx->h && !ctx->gone && http_client_gone(ci->fd)) {
        ctx->gone = true;
        rl_cancel(ctx->eng, ctx->h);
    } else if (ctx && ctx->semh && !ctx->gone && http_client_gone(ci->fd)) {
        ctx->gone = true;   /* a waiting semaphore acquire stops waiting */
        sem_cancel(ctx->semh);
    } else if (!ci->busy && !ci->shut && ci->phase_start_us + timeout_us < now) {
        /* (phase_start_us may be later than now: set after now was read) */
        ci->shut = true;   /* libmicrohttpd sees the end and closes it */
        shutdown(ci->fd, SHUT_RDWR);
        a->slow++;
    }
}

/* What look_at found, done without reg_lock. */
static void act(http_server *s, struct watch_acts *a, uint64_t now)
{
    static log_limit slow_log = LOG_LIMIT_INIT;
    for (int k = 0; k < a->nleft; k++)
        http_ctx_wake(a->left[k]);
    for (int k = 0; k < a->nprobe; k++) {
        hold_probe(a->probe[k]->hold);
        http_ctx_wake(a->probe[k]);
    }
    for (unsigned long long k = 0; k < a->slow; k++)
        metrics_count(s->m, METRICS_REQUEST_TIMEOUTS);
    unsigned long long suppressed;
    if (a->slow && log_allow(&slow_log, now, &suppressed)) {
        char n[24], more[24];
        snprintf(n, sizeof n, "%llu", a->slow);
        snprintf(more, sizeof more, "%llu", suppressed);
        log_event(LOG_LEVEL_WARN, "http_request_timeout", "connections", n, "suppressed_since_last",
                  more, NULL);
    }
}

/* Its socket leaves the watcher's set before libmicrohttpd closes it. */
static void unwatch_stream(req_ctx *ctx, bool completed_ok)
{
    if (ctx->watched && ctx->ci)
        epoll_ctl(ctx->s->watch_ep, EPOLL_CTL_DEL, ctx->ci->fd, NULL);
    ctx->watched = false;
}

void http_watch_stream(req_ctx *ctx)
{
    if (ctx->s->watch_ep < 0 || !ctx->ci)
        return;
    /* Edge-triggered: one report when the FIN comes, one at a reset (the
     * kernel reports EPOLLHUP and EPOLLERR unasked). */
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLET, .data.fd = ctx->ci->fd};
    if (epoll_ctl(ctx->s->watch_ep, EPOLL_CTL_ADD, ctx->ci->fd, &ev) == 0) {
        ctx->watched = true;
        http_on_cleanup(ctx, unwatch_stream);
    }
}

/* The watcher. At once when the client of a held stream or a watch sends
 * its FIN or a reset (watch_ep), and every HTTP_WATCH_INTERVAL_MS for every
 * connection, it
 *  - cancels the engine request (or semaphore task) of every suspended
 *    connection whose connection failed (libmicrohttpd does not look at suspended
 *    connections), so a waiter stops waiting and no grant goes to a client
 *    that left; a FIN alone may be a half-close, so such a waiter waits on,
 *    and a grant it gets is checked for delivery (delivery_check);
 *  - closes a held stream or watch whose client left;
 *  - probes a held stream whose client sent its FIN (hold_probe), and again
 *    every HTTP_PROBE_INTERVAL_MS while it is half-closed: a client that
 *    closed answers with a reset, and the stream ends;
 *  - settles the delivery checks;
 *  - closes connections that have not sent a complete request within
 *    --request-timeout-ms of their start or their last answer (slowloris);
 *  - gives memory freed by many closed connections back to the system. */
void *http_watch_main(void *arg)
{
    http_server *s = arg;
    uint64_t timeout_us = (uint64_t)s->cfg->request_timeout_ms * 1000ULL;
    uint64_t next_pass = loop_now_us() + HTTP_WATCH_INTERVAL_MS * 1000ULL;
    uint64_t next_probe = next_pass;
    while (!atomic_load(&s->stop_watch)) {
        uint64_t now = loop_now_us();
        pthread_mutex_lock(&s->reg_lock);
        uint64_t until = s->nprobed > 0 && next_probe < next_pass ? next_probe : next_pass;
        if (s->nrecheck > 0 && now + HTTP_RECHECK_MS * 1000ULL < until)
            until = now + HTTP_RECHECK_MS * 1000ULL;
        pthread_mutex_unlock(&s->reg_lock);
        int wait_ms = until > now ? (int)((until - now + 999) / 1000) : 0;
        struct epoll_event evs[64];
        int nev = 0;
        if (s->watch_ep >= 0) {
            nev = epoll_wait(s->watch_ep, evs, 64, wait_ms);
        } else if (wait_ms > 0) {
            usleep((useconds_t)wait_ms * 1000);
        }
        now = loop_now_us();
        struct watch_acts a = {.nprobed = &s->nprobed};
        bool checks = false, pass = now >= next_pass, probes = now >= next_probe;
        pthread_mutex_lock(&s->reg_lock);
        /* Only the connections that spoke: a look at every one of 10,000
         * held streams per event would cost a poll each. */
        for (int i = 0; i < nev; i++) {
            conn_info *ci = s->conns;
            while (ci && ci->fd != evs[i].data.fd)
                ci = ci->next;
            if (ci && !ci->suspended && !ci->recheck) {
                /* Its stream is writing an event: the report (edge
                 * triggered, so not repeated) is looked at once it waits. */
                ci->recheck = true;
                s->nrecheck++;
            } else if (ci) {
                look_at(ci, now, timeout_us, &a);
            } else {
                checks = true;   /* a delivery check's socket */
            }
        }
        if (s->nrecheck > 0 && (nev == 0 || pass)) {
            for (conn_info *ci = s->conns; ci; ci = ci->next)
                if (ci->recheck && (ci->suspended || pass)) {
                    ci->recheck = false;
                    s->nrecheck--;
                    look_at(ci, now, timeout_us, &a);
                }
        }
        if (pass) {
            for (conn_info *ci = s->conns; ci; ci = ci->next)
                look_at(ci, now, timeout_us, &a);
        } else if (probes && s->nprobed > 0) {
            /* Half-closed held streams between passes: their full close
             * sends nothing, so only a probe finds it. */
            for (conn_info *ci = s->conns; ci; ci = ci->next)
                if (ci->suspended && ci->suspended->probed)
                    look_at(ci, now, timeout_us, &a);
        }
        if (probes)
            next_probe = now + HTTP_PROBE_INTERVAL_MS * 1000ULL;
        bool trim = false;
        /* Many closes, or the last of a burst: what the connections (and
         * the streams, requests and subscriptions that ended with them)
         * took goes back to the system. */
        if (pass && (s->closed_since_trim >= HTTP_TRIM_AFTER_CLOSES ||
                     (s->closed_since_trim >= HTTP_TRIM_AFTER_CLOSES / 8 &&
                      now >= s->last_close_us + HTTP_TRIM_QUIET_MS * 1000ULL))) {
            s->closed_since_trim = 0;
            trim = true;
        }
        pthread_mutex_unlock(&s->reg_lock);
        act(s, &a, now);
        if (checks || pass)
            http_settle_deliveries(s, false);
        if (pass)
            next_pass = now + HTTP_WATCH_INTERVAL_MS * 1000ULL;
        if (trim)
            malloc_trim(0);
    }
    return NULL;
}

/* ---- permits nobody received ---- */

static void sem_ignore(void *arg, const sem_result *res)
{
    (void)arg;
    (void)res;
}

/* Permits nobody will receive: released on every master at once. */
void http_sem_give_back(http_server *s, mpool *pool, const char *name, const sem_result *res)
{
    sem_request *r = calloc(1, sizeof *r);
    if (!r)
        return;   /* (they expire with their ttl) */
    r->op = SEM_RELEASE;
    snprintf(r->name, sizeof r->name, "%s", name);
    for (int i = 0; i < res->npermits; i++)
        memcpy(r->tokens[r->ntokens++], res->permits[i].token, sizeof r->tokens[0]);
    if (r->ntokens)
        sem_submit(r, http_engine_of_name, s, pool, sem_ignore, NULL, NULL);
    free(r);
}
