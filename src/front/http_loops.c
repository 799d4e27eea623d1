/* http_loops.c - the loops' daemons, one per listener a loop serves (every
 * TCP --listen on every loop, with SO_REUSEPORT; a Unix socket on loop 0
 * only); start, quiesce, drain, stop (http_int.h). */
#include "http_int.h"

/* ---- the loops ---- */

/* The loop's io hooks: run the daemons when their epoll fd (or the set of
 * theirs) is readable, and when their own timeout (idle connections, data
 * already pending, a TLS record already read) comes. */
static void shard_run(void *arg)
{
    http_shard *sh = arg;
    atomic_store(&sh->kick, false);
    for (int i = 0; i < sh->ndaemons; i++)
        MHD_run(sh->daemons[i].d);
}

static uint64_t shard_due(void *arg, uint64_t now)
{
    http_shard *sh = arg;
    if (atomic_load(&sh->kick))
        return now;
    uint64_t due = UINT64_MAX;
    for (int i = 0; i < sh->ndaemons; i++) {
        MHD_UNSIGNED_LONG_LONG ms;
        if (MHD_get_timeout(sh->daemons[i].d, &ms) != MHD_YES)
            continue;
        uint64_t at = ms > 3600000ULL ? now + 3600000000ULL : now + ms * 1000ULL;
        if (at < due)
            due = at;
    }
    return due;
}

/* The fd the loop polls for sh: its daemon's epoll fd, or with several an
 * epoll set of theirs (readable when any of them is). -1 on failure. */
static int shard_fd(http_shard *sh)
{
    if (sh->ndaemons == 1)
        return MHD_get_daemon_info(sh->daemons[0].d, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
    if (sh->epfd >= 0)
        return sh->epfd;
    sh->epfd = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; sh->epfd >= 0 && i < sh->ndaemons; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(sh->epfd, EPOLL_CTL_ADD,
                      MHD_get_daemon_info(sh->daemons[i].d, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd, &ev) < 0) {
            close(sh->epfd);
            sh->epfd = -1;
        }
    }
    return sh->epfd;
}

static void shard_attach(void *arg)
{
    http_shard *sh = arg;
    loop_set_io(mpool_loop(sh->pool), shard_fd(sh), shard_run, shard_due, sh);
}

static void shard_detach(void *arg)
{
    http_shard *sh = arg;
    loop_set_io(mpool_loop(sh->pool), -1, NULL, NULL, NULL);
}

/* On the loop: the hold set, about to go, hears its engine's notices no
 * more (the loops run on until the masters stop, and releases answer). */
static void shard_holds_detach(void *arg)
{
    http_shard *sh = arg;
    hold_detach(sh->s->holds, sh->engine);
}

/* Quiescing, on the loop: each of its daemons stops accepting and hands
 * over its listening socket, still open (the kernel keeps queueing
 * connections), which from now on takes no new one: a TCP listener drops
 * new SYNs, a Unix socket's file goes (a new client finds none). */
static void shard_stop_accepting(void *arg)
{
    http_shard *sh = arg;
    for (int i = 0; i < sh->ndaemons; i++) {
        http_daemon *hd = &sh->daemons[i];
        hd->listen_fd = MHD_quiesce_daemon(hd->d);
        if (hd->l->addr->unix_socket) {
            listener_unix_remove(hd->l->addr->host, &hd->l->file);
            hd->l->removed = true;
        } else if (hd->listen_fd != MHD_INVALID_SOCKET && !listener_drop_syns(hd->listen_fd)) {
            log_event(LOG_LEVEL_WARN, "listener_filter_failed", "error", strerror(errno), NULL);
        }
    }
}

/* Takes the connections the kernel completed but nobody accepted from hd's
 * queue (the listener's close would reset them). */
static void daemon_take_queue(http_daemon *hd)
{
    if (hd->listen_fd == MHD_INVALID_SOCKET)
        return;
    for (;;) {
        int c = accept4(hd->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            /* A connection that failed before it was taken, or a signal:
             * the rest of the queue is still there. */
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == EPERM)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_event(LOG_LEVEL_WARN, "accept_failed", "error", strerror(errno), NULL);
            return;
        }
        if (hd->ntaken == hd->taken_cap) {
            int grown = hd->taken_cap ? 2 * hd->taken_cap : 64;
            int *t = realloc(hd->taken, (size_t)grown * sizeof *t);
            if (!t) {
                log_event(LOG_LEVEL_WARN, "accept_failed", "error", "out of memory", NULL);
                close(c);
                return;
            }
            hd->taken = t;
            hd->taken_cap = grown;
        }
        hd->taken[hd->ntaken++] = c;
    }
}

/* Empties every listener's queue until no handshake already under way has
 * completed for HTTP_HANDSHAKE_GRACE_MS (new ones are dropped at their SYN,
 * or find no socket file), at most HTTP_QUEUE_TAKE_MAX_MS, then closes the
 * listeners. */
static void take_queues_and_close(http_server *s)
{
    struct pollfd p[HTTP_MAX_LOOPS * CONF_MAX_LISTEN];
    uint64_t until = loop_now_us() + HTTP_QUEUE_TAKE_MAX_MS * 1000ULL;
    for (;;) {
        int n = 0;
        for (int k = 0; k < s->nshards; k++)
            for (int i = 0; i < s->shards[k].ndaemons; i++) {
                http_daemon *hd = &s->shards[k].daemons[i];
                daemon_take_queue(hd);
                if (hd->listen_fd != MHD_INVALID_SOCKET)
                    p[n++] = (struct pollfd){.fd = hd->listen_fd, .events = POLLIN};
            }
        if (n == 0 || loop_now_us() >= until || poll(p, (nfds_t)n, HTTP_HANDSHAKE_GRACE_MS) <= 0)
            break;
    }
    /* Test hook: a shutdown preempted here, as on a busy node. */
    const char *delay = getenv("REDLOCKD_TEST_LISTENER_CLOSE_DELAY_US");
    if (delay)
        usleep((useconds_t)strtoul(delay, NULL, 10));
    for (int k = 0; k < s->nshards; k++)
        for (int i = 0; i < s->shards[k].ndaemons; i++) {
            http_daemon *hd = &s->shards[k].daemons[i];
            if (hd->listen_fd != MHD_INVALID_SOCKET) {
                close(hd->listen_fd);
                hd->listen_fd = MHD_INVALID_SOCKET;
            }
        }
    for (int i = 0; i < s->nlisteners; i++)   /* (the Unix sockets' own descriptor) */
        if (s->listeners[i].unix_fd >= 0) {
            close(s->listeners[i].unix_fd);
            s->listeners[i].unix_fd = -1;
        }
}

/* On the loop: the connections taken from its queues join their daemons,
 * each to get its answer (with Connection: close). */
static void shard_add_taken(void *arg)
{
    http_shard *sh = arg;
    for (int d = 0; d < sh->ndaemons; d++) {
        http_daemon *hd = &sh->daemons[d];
        for (int i = 0; i < hd->ntaken; i++) {
            struct sockaddr_storage a;
            socklen_t alen = sizeof a;
            if (getpeername(hd->taken[i], (struct sockaddr *)&a, &alen) != 0) {
                close(hd->taken[i]);
                continue;
            }
            (void)MHD_add_connection(hd->d, hd->taken[i], (struct sockaddr *)&a, alen);   /* closes it on failure */
        }
        free(hd->taken);
        hd->taken = NULL;
        hd->ntaken = hd->taken_cap = 0;
    }
    atomic_store(&sh->kick, true);
}

/* A daemon of listener l for loop sh: external epoll mode (its epoll fd
 * goes into the loop's poll), ITC so that other threads may resume its
 * connections. A TCP listener's binds its own socket (SO_REUSEPORT, ai); a
 * Unix socket's takes a duplicate of the one bound at start. */
static struct MHD_Daemon *daemon_start(http_shard *sh, const conf *cfg, const http_listener *l,
                                       const struct addrinfo *ai)
{
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    /* The limits are the whole server's (http_on_connection counts them
     * over every loop); each daemon could take them all. */
    struct MHD_OptionItem o[16];
    int n = 0;
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections, NULL};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, HTTP_IDLE_TIMEOUT_S, NULL};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, cfg->connection_buffer_bytes, NULL};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)http_unescape, NULL};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)http_on_completed, sh};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)http_on_connection, sh};
    int fd = -1;
    if (l->addr->unix_socket) {
        if ((fd = fcntl(l->unix_fd, F_DUPFD_CLOEXEC, 0)) < 0)
            return NULL;
        o[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, fd, NULL};
    } else {
        if (ai->ai_family == AF_INET6)
            flags |= MHD_USE_IPv6;
        o[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, ai->ai_addr};
        o[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL};
        o[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip, NULL};
        if (l->addr->tls) {
            flags |= MHD_USE_TLS;
            n += http_tls_daemon_options(o + n);
        }
    }
    o[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return MHD_start_daemon(flags, l->addr->unix_socket ? 0 : (uint16_t)l->addr->port, NULL, NULL, http_on_request,
                            sh, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, NULL,   /* first, to catch every message */
                            MHD_OPTION_ARRAY, o, MHD_OPTION_END);
}

/* What cfg->listen[i] is, and a Unix socket bound. 0, or -1 with err. */
static int listener_open(http_server *s, int i, char *err, size_t errlen)
{
    const conf *cfg = s->cfg;
    http_listener *l = &s->listeners[i];
    const conf_addr *a = &cfg->listen[i];
    *l = (http_listener){.addr = a, .unix_fd = -1};
    l->kind = (a->unix_socket || conf_host_loopback(a->host) ? API_LISTENER_LOOPBACK : 0) |
              (a->tls ? API_LISTENER_HTTPS : 0);
    if (a->tls && !http_tls_on()) {
        snprintf(err, errlen, "--listen %s:%d: HTTPS without a certificate (http_tls_load)", a->host, a->port);
        return -1;
    }
    if (a->unix_socket && (l->unix_fd = listener_unix_bind(a->host, cfg->listen_mode, &l->file, err, errlen)) < 0)
        return -1;
    return 0;
}

/* Starts listener i's daemons: one on every loop for TCP, one on loop 0 for
 * a Unix socket. 0, or -1 with err. */
static int listener_serve(http_server *s, int i, char *err, size_t errlen)
{
    http_listener *l = &s->listeners[i];
    struct addrinfo *ai = NULL;
    if (!l->addr->unix_socket) {
        char port[8];
        snprintf(port, sizeof port, "%d", l->addr->port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
        int gai = getaddrinfo(l->addr->host, port, &hints, &ai);
        if (gai != 0) {
            snprintf(err, errlen, "--listen %s:%d: %s", l->addr->host, l->addr->port, gai_strerror(gai));
            return -1;
        }
    }
    int rc = 0;
    for (int k = 0; k < (l->addr->unix_socket ? 1 : s->nshards) && rc == 0; k++) {
        http_shard *sh = &s->shards[k];
        http_daemon *hd = &sh->daemons[sh->ndaemons];
        *hd = (http_daemon){.l = l, .listen_fd = MHD_INVALID_SOCKET};
        if ((hd->d = daemon_start(sh, s->cfg, l, ai)))
            sh->ndaemons++;
        else
            rc = -1;
    }
    if (rc < 0) {
        if (l->addr->unix_socket)
            snprintf(err, errlen, "--listen unix:%s: cannot serve it", l->addr->host);
        else
            snprintf(err, errlen, "--listen %s:%d: cannot listen there (in use or not a local address?)",
                     l->addr->host, l->addr->port);
    }
    if (ai)
        freeaddrinfo(ai);
    return rc;
}

/* The listeners let go: daemons stopped, Unix sockets closed and their
 * files removed. */
static void listeners_close(http_server *s)
{
    for (int k = 0; k < s->nshards; k++) {
        http_shard *sh = &s->shards[k];
        for (int i = 0; i < sh->ndaemons; i++)
            MHD_stop_daemon(sh->daemons[i].d);
        sh->ndaemons = 0;
        if (sh->epfd >= 0)
            close(sh->epfd);
        sh->epfd = -1;
    }
    for (int i = 0; i < s->nlisteners; i++) {
        http_listener *l = &s->listeners[i];
        if (l->unix_fd >= 0)
            close(l->unix_fd);
        l->unix_fd = -1;
        if (l->addr->unix_socket && !l->removed)
            listener_unix_remove(l->addr->host, &l->file);
        l->removed = true;
    }
}

http_server *http_start(const conf *cfg, const http_loop *loops, int nloops, metrics *m, char *err,
                        size_t errlen)
{
    if (nloops < 1 || nloops > HTTP_MAX_LOOPS) {
        snprintf(err, errlen, "--threads must be from 1 to %d", HTTP_MAX_LOOPS);
        return NULL;
    }
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->pool = loops[0].pool;
    s->m = m;
    s->nshards = nloops;
    s->limits = (api_limits){cfg->default_ttl_ms, cfg->max_ttl_ms, cfg->max_wait_ms, cfg->dapr_app_id};
    s->holds = hold_set_new(cfg->max_holds);
    if (!s->holds) {
        snprintf(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->reg_lock, NULL);
    pthread_cond_init(&s->reg_cond, NULL);
    s->watch_ep = epoll_create1(EPOLL_CLOEXEC);
    for (int k = 0; k < nloops; k++)
        s->shards[k] = (http_shard){.s = s, .engine = loops[k].engine, .pool = loops[k].pool, .epfd = -1};

    /* External mode: MHD_run never blocks, so libmicrohttpd 0.9.75's epoll
     * loop cannot stall in its second epoll_wait after a full batch of 128
     * events (its internal-thread epoll mode did: tests/integration,
     * many_connections_all_answered). */
    int rc = 0;
    for (int i = 0; i < cfg->nlisten && rc == 0; i++) {
        s->nlisteners++;
        rc = listener_open(s, i, err, errlen);
        if (rc == 0)
            rc = listener_serve(s, i, err, errlen);
    }
    for (int k = 0; k < nloops && rc == 0; k++)
        if (s->shards[k].ndaemons > 0 && shard_fd(&s->shards[k]) < 0) {
            snprintf(err, errlen, "cannot watch the listeners: %s", strerror(errno));
            rc = -1;
        }
    if (rc < 0) {
        listeners_close(s);
        hold_set_free(s->holds);
        if (s->watch_ep >= 0)
            close(s->watch_ep);
        free(s);
        return NULL;
    }
    for (int k = 0; k < nloops; k++) {
        election_watch_attach(s->shards[k].engine);
        hold_attach(s->holds, s->shards[k].engine);
        sem_engine_attach(s->shards[k].engine);
        if (s->shards[k].ndaemons > 0)
            loop_call(mpool_loop(s->shards[k].pool), shard_attach, &s->shards[k]);
    }
    s->watching = pthread_create(&s->watcher, NULL, http_watch_main, s) == 0;
    return s;
}

/* A listener's close resets what is queued on it at that moment, and with
 * several loops, while one is still open, the clients its neighbours turned
 * away reconnect to it in a storm. So every loop stops accepting and taking
 * new SYNs first; then the queues are emptied of the handshakes that were
 * under way and the listeners closed; then each loop serves what was taken
 * from its queue. */
void http_quiesce(http_server *s)
{
    atomic_store(&s->quiescing, true);
    sem_stop_waiting();   /* waiting semaphore acquires answer 409 now, as lock acquires do */
    for (int k = 0; k < s->nshards; k++) {
        loop_call(mpool_loop(s->shards[k].pool), shard_stop_accepting, &s->shards[k]);
        loop_call(mpool_loop(s->shards[k].pool), http_park_release, &s->shards[k]);
    }
    take_queues_and_close(s);
    for (int k = 0; k < s->nshards; k++)
        loop_call(mpool_loop(s->shards[k].pool), shard_add_taken, &s->shards[k]);
}

int http_end_holds(http_server *s, long long timeout_ms)
{
    return hold_set_end_all(s->holds, timeout_ms);
}

int http_drain(http_server *s, long long timeout_ms)
{
    struct timespec until = deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&s->reg_lock);
    while (s->nrequests > 0)
        if (pthread_cond_timedwait(&s->reg_cond, &s->reg_lock, &until) != 0)
            break;
    /* Still waiting for the engine past the limit: answer 503
     * shutting_down, so no connection is closed without an answer and
     * none is left suspended (libmicrohttpd 0.9.75 aborts on stopping with
     * one). */
    int forced = 0;
    for (;;) {
        req_ctx *ctx = NULL;
        for (conn_info *ci = s->conns; ci && !ctx; ci = ci->next)
            ctx = ci->suspended;
        if (!ctx)
            break;
        ctx->susp = false;
        ctx->ci->suspended = NULL;
        ctx->forced = true;
        ctx->gone = ctx->hold || ctx->watch;   /* a stream whose end never came: closed */
        if (ctx->w) {   /* (a stream has none: gone ends it) */
            memset(&ctx->w->res, 0, sizeof ctx->w->res);
            ctx->w->res.outcome = RL_SHUTTING_DOWN;
        }
        atomic_store(&ctx->result_ready, true);
        forced++;
        pthread_mutex_unlock(&s->reg_lock);
        http_ctx_wake(ctx);
        pthread_mutex_lock(&s->reg_lock);
    }
    if (forced) {
        until = deadline_after_ms(1000);
        while (s->nrequests > 0)
            if (pthread_cond_timedwait(&s->reg_cond, &s->reg_lock, &until) != 0)
                break;
    }
    int left = s->nrequests;
    pthread_mutex_unlock(&s->reg_lock);
    return forced + left;
}

void http_stop(http_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stop_watch, true);
    if (s->watching)
        pthread_join(s->watcher, NULL);
    http_settle_deliveries(s, true);
    /* The loops stop running the daemons first: from here on only this
     * thread touches them. */
    for (int k = 0; k < s->nshards; k++)
        if (s->shards[k].ndaemons > 0)
            loop_call(mpool_loop(s->shards[k].pool), shard_detach, &s->shards[k]);
    listeners_close(s);
    for (int k = 0; k < s->nshards; k++) {
        loop_call(mpool_loop(s->shards[k].pool), shard_holds_detach, &s->shards[k]);
        /* A look at the admission queue still due points at the shard:
         * it comes within HTTP_PARK_CHECK_MS and arms no other. */
        while (http_park_pending(&s->shards[k]))
            usleep(1000);
        http_park_free(&s->shards[k]);
    }
    hold_set_free(s->holds);
    if (s->watch_ep >= 0)
        close(s->watch_ep);
    pthread_cond_destroy(&s->reg_cond);
    pthread_mutex_destroy(&s->reg_lock);
    free(s);
}
