/* http_loops.c - the loops' daemons; start, quiesce, drain, stop
 * (http_int.h). */
#include "http_int.h"

/* ---- the loops ---- */

/* A call run on a loop's thread, waited for: libmicrohttpd in external mode
 * is only ever touched by the loop that runs it (and by resume, which it
 * allows from any thread). */
struct loop_call {
    void (*fn)(void *);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void loop_call_job(void *arg)
{
    struct loop_call *c = arg;
    c->fn(c->arg);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void http_run_on_loop(mpool *p, void (*fn)(void *), void *arg)
{
    struct loop_call c = {fn, arg, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    if (loop_post(mpool_loop(p), loop_call_job, &c) < 0) {
        fn(arg);   /* the loop has stopped: nobody else runs the daemon */
        return;
    }
    pthread_mutex_lock(&c.mu);
    while (!c.done)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
}

/* The loop's io hooks: run the daemon when its epoll fd is readable, and
 * when its own timeout (idle connections, data already pending) comes. */
static void shard_run(void *arg)
{
    http_shard *sh = arg;
    atomic_store(&sh->kick, false);
    MHD_run(sh->daemon);
}

static uint64_t shard_due(void *arg, uint64_t now)
{
    http_shard *sh = arg;
    if (atomic_load(&sh->kick))
        return now;
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(sh->daemon, &ms) != MHD_YES)
        return UINT64_MAX;
    return ms > 3600000ULL ? now + 3600000000ULL : now + ms * 1000ULL;
}

static void shard_attach(void *arg)
{
    http_shard *sh = arg;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sh->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    loop_set_io(mpool_loop(sh->pool), di->epoll_fd, shard_run, shard_due, sh);
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

/* Quiescing, on the loop: libmicrohttpd stops accepting and hands over its
 * listening socket, still open (the kernel keeps queueing connections),
 * which from now on takes no new SYN. */
static void shard_stop_accepting(void *arg)
{
    http_shard *sh = arg;
    sh->listen_fd = MHD_quiesce_daemon(sh->daemon);
    if (sh->listen_fd != MHD_INVALID_SOCKET && !listener_drop_syns(sh->listen_fd))
        log_event(LOG_LEVEL_WARN, "listener_filter_failed", "error", strerror(errno), NULL);
}

/* Takes the connections the kernel completed but nobody accepted from sh's
 * queue (the listener's close would reset them). */
static void shard_take_queue(http_shard *sh)
{
    if (sh->listen_fd == MHD_INVALID_SOCKET)
        return;
    for (;;) {
        int c = accept4(sh->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            /* A connection that failed before it was taken, or a signal:
             * the rest of the queue is still there. */
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == EPERM)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_event(LOG_LEVEL_WARN, "accept_failed", "error", strerror(errno), NULL);
            return;
        }
        if (sh->ntaken == sh->taken_cap) {
            int grown = sh->taken_cap ? 2 * sh->taken_cap : 64;
            int *t = realloc(sh->taken, (size_t)grown * sizeof *t);
            if (!t) {
                log_event(LOG_LEVEL_WARN, "accept_failed", "error", "out of memory", NULL);
                close(c);
                return;
            }
            sh->taken = t;
            sh->taken_cap = grown;
        }
        sh->taken[sh->ntaken++] = c;
    }
}

/* Empties every listener's queue until no handshake already under way has
 * completed for HTTP_HANDSHAKE_GRACE_MS (new ones are dropped at their SYN),
 * at most HTTP_QUEUE_TAKE_MAX_MS, then closes the listeners. */
static void take_queues_and_close(http_server *s)
{
    struct pollfd p[HTTP_MAX_LOOPS];
    uint64_t until = loop_now_us() + HTTP_QUEUE_TAKE_MAX_MS * 1000ULL;
    for (;;) {
        int n = 0;
        for (int k = 0; k < s->nshards; k++) {
            shard_take_queue(&s->shards[k]);
            if (s->shards[k].listen_fd != MHD_INVALID_SOCKET)
                p[n++] = (struct pollfd){.fd = s->shards[k].listen_fd, .events = POLLIN};
        }
        if (n == 0 || loop_now_us() >= until || poll(p, (nfds_t)n, HTTP_HANDSHAKE_GRACE_MS) <= 0)
            break;
    }
    /* Test hook: a shutdown preempted here, as on a busy node. */
    const char *delay = getenv("REDLOCKD_TEST_LISTENER_CLOSE_DELAY_US");
    if (delay)
        usleep((useconds_t)strtoul(delay, NULL, 10));
    for (int k = 0; k < s->nshards; k++)
        if (s->shards[k].listen_fd != MHD_INVALID_SOCKET) {
            close(s->shards[k].listen_fd);
            s->shards[k].listen_fd = MHD_INVALID_SOCKET;
        }
}

/* On the loop: the connections taken from its queue join its daemon, each
 * to get its answer (with Connection: close). */
static void shard_add_taken(void *arg)
{
    http_shard *sh = arg;
    for (int i = 0; i < sh->ntaken; i++) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof a;
        if (getpeername(sh->taken[i], (struct sockaddr *)&a, &alen) != 0) {
            close(sh->taken[i]);
            continue;
        }
        (void)MHD_add_connection(sh->daemon, sh->taken[i], (struct sockaddr *)&a, alen);   /* closes it on failure */
    }
    free(sh->taken);
    sh->taken = NULL;
    sh->ntaken = sh->taken_cap = 0;
    atomic_store(&sh->kick, true);
}

/* A daemon for loop k: external epoll mode (its epoll fd goes into the
 * loop's poll), ITC so that other threads may resume its connections. */
static struct MHD_Daemon *shard_daemon(http_shard *sh, const conf *cfg, const struct addrinfo *ai)
{
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* The limits are the whole server's (on_connection counts them over
     * every loop); each daemon could take them all. */
    unsigned limit = (unsigned)cfg->max_connections;
    unsigned per_ip = (unsigned)cfg->max_connections_per_ip;
    return MHD_start_daemon(
        flags, (uint16_t)cfg->listen.port, NULL, NULL, http_on_request, sh,
        MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, NULL,   /* first, to catch every message */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->connection_buffer_bytes,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_UNESCAPE_CALLBACK, http_unescape, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, sh,
        MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, sh,
        MHD_OPTION_END);
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
    s->loopback = conf_host_loopback(cfg->listen.host);
    s->holds = hold_set_new(cfg->max_holds);
    if (!s->holds) {
        snprintf(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->reg_lock, NULL);
    pthread_cond_init(&s->reg_cond, NULL);
    s->watch_ep = epoll_create1(EPOLL_CLOEXEC);

    char port[8];
    snprintf(port, sizeof port, "%d", cfg->listen.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(cfg->listen.host, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "--listen %s:%d: %s", cfg->listen.host, cfg->listen.port,
                 gai_strerror(gai));
        hold_set_free(s->holds);
        if (s->watch_ep >= 0)
            close(s->watch_ep);
        free(s);
        return NULL;
    }
    /* External mode: MHD_run never blocks, so libmicrohttpd 0.9.75's epoll
     * loop cannot stall in its second epoll_wait after a full batch of 128
     * events (its internal-thread epoll mode did: tests/integration,
     * many_connections_all_answered). */
    int started = 0;
    for (int k = 0; k < nloops; k++) {
        http_shard *sh = &s->shards[k];
        *sh = (http_shard){.s = s, .engine = loops[k].engine, .pool = loops[k].pool,
                           .listen_fd = MHD_INVALID_SOCKET};
        sh->daemon = shard_daemon(sh, cfg, ai);
        if (!sh->daemon)
            break;
        started++;
    }
    freeaddrinfo(ai);
    if (started < nloops) {
        snprintf(err, errlen, "--listen %s:%d: cannot listen there (in use or not a local address?)",
                 cfg->listen.host, cfg->listen.port);
        for (int k = 0; k < started; k++)
            MHD_stop_daemon(s->shards[k].daemon);
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
        http_run_on_loop(s->shards[k].pool, shard_attach, &s->shards[k]);
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
        http_run_on_loop(s->shards[k].pool, shard_stop_accepting, &s->shards[k]);
        http_run_on_loop(s->shards[k].pool, http_park_release, &s->shards[k]);
    }
    take_queues_and_close(s);
    for (int k = 0; k < s->nshards; k++)
        http_run_on_loop(s->shards[k].pool, shard_add_taken, &s->shards[k]);
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
        http_run_on_loop(s->shards[k].pool, shard_detach, &s->shards[k]);
    for (int k = 0; k < s->nshards; k++)
        MHD_stop_daemon(s->shards[k].daemon);
    for (int k = 0; k < s->nshards; k++) {
        http_run_on_loop(s->shards[k].pool, shard_holds_detach, &s->shards[k]);
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
