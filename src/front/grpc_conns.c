/* grpc_conns.c - the gRPC server's connections and thread (grpc_int.h). */
#include "grpc_int.h"

static log_limit conn_log_limit = LOG_LIMIT_INIT;

/* ---- connections (gRPC thread) ---- */

/* Closes c; its memory waits in s->dead until free_dead. */
static void conn_close(gconn *c)
{
    grpc_server *s = c->s;
    if (c->dead)
        return;
    c->dead = true;
    while (c->streams)
        grpc_stream_free(c, c->streams);
    nghttp2_session_del(c->sess);
    c->sess = NULL;
    grpc_tls_close(c);
    close(c->fd);   /* also leaves the epoll set */
    DLIST_UNLINK(s->conns, c, prev, next);
    s->nconns--;
    if (c->has_peer)
        grpc_peers_give(&s->peers, &c->peer);
    c->next = s->dead;
    s->dead = c;
}

static void free_dead(grpc_server *s)
{
    while (s->dead) {
        gconn *c = s->dead;
        s->dead = c->next;
        free(c->wbuf);
        free(c);
    }
}

static int want_out(gconn *c, bool on)
{
    if (c->want_out == on)
        return 0;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(c->s->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        return -1;
    c->want_out = on;
    return 0;
}

/* The socket's bytes, in clear or through TLS. */
static ssize_t conn_recv(gconn *c, uint8_t *buf, size_t len)
{
    return c->ssl ? grpc_tls_recv(c, buf, len) : recv(c->fd, buf, len, 0);
}

static ssize_t conn_send(gconn *c, const uint8_t *buf, size_t len)
{
    return c->ssl ? grpc_tls_send(c, buf, len) : send(c->fd, buf, len, MSG_NOSIGNAL);
}

/* Sends what nghttp2 has to send, as far as the socket takes it. -1: the
 * connection is broken. Over TLS nothing goes before the handshake is
 * done: the SETTINGS queued at accept wait for it. */
static int conn_flush(gconn *c)
{
    if (c->ssl && !c->tls_ready)
        return 0;
    for (;;) {
        while (c->woff < c->wlen) {
            ssize_t n = conn_send(c, c->wbuf + c->woff, c->wlen - c->woff);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return want_out(c, !c->tls_write_in || c->tls_read_out);
            if (n <= 0)
                return -1;
            c->woff += (size_t)n;
            c->wprog_us = loop_now_us();
        }
        c->wlen = c->woff = 0;
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->sess, &data);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        if ((size_t)n > c->wcap) {
            uint8_t *nb = realloc(c->wbuf, (size_t)n);
            if (!nb)
                return -1;
            c->wbuf = nb;
            c->wcap = (size_t)n;
        }
        memcpy(c->wbuf, data, (size_t)n);
        c->wlen = (size_t)n;
        c->wprog_us = loop_now_us();
    }
    return want_out(c, c->tls_read_out);
}

static int conn_read(gconn *c)
{
    uint8_t buf[GRPC_READ_CHUNK];
    for (;;) {
        /* To EAGAIN, always: over TLS, bytes that SSL_read holds decrypted
         * (or a whole record it took from the socket) would not wake
         * epoll again, and the call they carry would stall. */
        ssize_t n = conn_recv(c, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return -1;   /* closed or broken */
        /* Bytes are not activity: a call's frames are (grpc_on_frame_recv). */
        ssize_t used = nghttp2_session_mem_recv(c->sess, buf, (size_t)n);
        if (used < 0) {
            unsigned long long sup;
            if (log_allow(&conn_log_limit, loop_now_us(), &sup))
                log_event(LOG_LEVEL_DEBUG, "grpc_bad_input", "error", nghttp2_strerror((int)used),
                          NULL);
            /* Errors in frames were already answered (nghttp2 queued a GOAWAY
             * and went on); what comes back here is fatal and queued
             * nothing: a bad client preface (garbage, HTTP/1.1) is
             * PROTOCOL_ERROR (RFC 9113 3.4), a flood ENHANCE_YOUR_CALM,
             * out of memory INTERNAL_ERROR. The GOAWAY goes before the
             * close; the flush takes what the socket takes now, and never
             * waits. */
            uint32_t code = used == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? NGHTTP2_PROTOCOL_ERROR
                            : used == NGHTTP2_ERR_FLOODED        ? NGHTTP2_ENHANCE_YOUR_CALM
                                                                 : NGHTTP2_INTERNAL_ERROR;
            c->goaway = true;
            nghttp2_session_terminate_session(c->sess, code);
            conn_flush(c);
            return -1;
        }
    }
    return 0;
}

/* Done with a connection when neither side has anything more to say. */
static bool conn_finished(gconn *c)
{
    return !nghttp2_session_want_read(c->sess) && !nghttp2_session_want_write(c->sess) &&
           c->woff == c->wlen;
}

static void conn_goaway(gconn *c)
{
    if (c->goaway)
        return;
    c->goaway = true;
    nghttp2_submit_goaway(c->sess, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->sess),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

/* Serves what c's socket has for it: the TLS handshake until it is done,
 * then reads if readable (or if SSL_read waited to write), then writes. */
static void conn_ready(gconn *c, bool readable)
{
    if (c->dead)
        return;   /* closed earlier in this turn */
    if (c->ssl && !c->tls_ready) {
        int hs = grpc_tls_handshake(c);
        if (hs == 0 && want_out(c, c->tls_hs_out) == 0)
            return;
        if (hs <= 0) {
            conn_close(c);
            return;
        }
        /* The client's first bytes may have come with its last handshake
         * record, and be in SSL's buffer already: read now, epoll would
         * not say. */
        readable = true;
    }
    int rc = readable || c->tls_read_out ? conn_read(c) : 0;
    if (rc == 0 && !c->dead)
        rc = conn_flush(c);
    if (rc < 0 || c->dead || conn_finished(c))
        conn_close(c);
}

/* Takes what the listener has. One over --max-connections, or over
 * --max-connections-per-ip from its address (the gRPC listener's own
 * count), is closed at once, in O(1): the loop calls this after the other
 * events of its turn, so that connections whose peers closed in the
 * meantime are counted out first (grpc_thread). */
static void accept_all(grpc_server *s)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;   /* EAGAIN, or out of descriptors: the next turn tries again */
        /* A Unix socket's client has no address: --max-connections-per-ip
         * does not apply to it (the file's mode says who may connect),
         * --max-connections does. */
        grpc_peer_addr peer;
        bool has_peer = grpc_peer_addr_of((struct sockaddr *)&sa, salen, &peer);
        if (s->nconns >= s->cfg->max_connections ||
            (has_peer && !grpc_peers_take(&s->peers, &peer, s->cfg->max_connections_per_ip))) {
            close(fd);
            continue;
        }
        gconn *c = calloc(1, sizeof *c);
        if (!c || nghttp2_session_server_new2(&c->sess, s->cbs, c, s->opt) != 0) {
            free(c);
            if (has_peer)
                grpc_peers_give(&s->peers, &peer);
            close(fd);
            continue;
        }
        int one = 1;
        c->unix_client = sa.ss_family == AF_UNIX;
        if (!c->unix_client)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->kind = GK_CONN;
        c->s = s;
        c->fd = fd;
        c->peer = peer;
        c->has_peer = has_peer;
        c->start_us = c->last_us = c->wprog_us = loop_now_us();
        nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS},
            {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADER_BYTES},
        };
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
            (s->cfg->dapr_grpc_listen.tls && grpc_tls_accept(c) < 0) || epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            grpc_tls_close(c);
            nghttp2_session_del(c->sess);
            free(c);
            if (has_peer)
                grpc_peers_give(&s->peers, &peer);
            close(fd);
            continue;
        }
        DLIST_PUSH(s->conns, c, prev, next);
        s->nconns++;
        if (s->quiesced)
            conn_goaway(c);
        if (conn_flush(c) < 0)
            conn_close(c);
    }
}

/* Takes the engines' answers and sends them. */
static void take_answers(grpc_server *s)
{
    uint64_t v;
    ssize_t n = read(s->wake_fd, &v, sizeof v);
    (void)n;
    pthread_mutex_lock(&s->mu);
    gcall *list = s->done;
    s->done = NULL;
    pthread_mutex_unlock(&s->mu);
    while (list) {
        gcall *call = list;
        list = call->next_done;
        gconn *c = call->st ? call->st->c : NULL;
        grpc_call_answered(call);
        if (c && !c->dead && conn_flush(c) < 0)
            conn_close(c);
    }
}

/* Once a second, with req_us --request-timeout-ms: a call that has not
 * arrived whole within req_us of its start is reset, and so is one whose
 * answer could not be written within req_us (the client holds its
 * flow-control window at 0, or reads nothing). A connection is closed
 * when: it never brought a call with the token within req_us of its start;
 * it is served and had no call open and no call's frame for the idle
 * timeout (s->idle_us); its socket took nothing for req_us; or a call was
 * just reset for an answer it could not take and nothing else is open. */
static void sweep(grpc_server *s, uint64_t now)
{
    uint64_t req_us = (uint64_t)s->cfg->request_timeout_ms * 1000ULL;
    for (gconn *c = s->conns, *next; c; c = next) {
        next = c->next;
        bool stuck = false, other = false;
        for (gstream *st = c->streams; st; st = st->next) {
            if (st->reset)
                continue;   /* reset once: on its way out */
            bool slow = !st->dispatched && now - st->start_us > req_us;   /* not whole yet */
            bool unsent = st->answer_us && now - st->answer_us > req_us;   /* answer not taken */
            if (!slow && !unsent) {
                other = true;
                continue;
            }
            stuck = stuck || unsent;
            st->dispatched = st->reset = true;
            nghttp2_submit_rst_stream(c->sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
        }
        /* One never served is closed at its deadline whatever it has
         * open: the calls it keeps opening without the token would
         * otherwise hold its slot. */
        if ((!c->served && now - c->start_us > req_us) ||
            (c->served && !c->streams && now - c->last_us > s->idle_us) ||
            (c->woff < c->wlen && now - c->wprog_us > req_us) || (stuck && !other)) {
            conn_goaway(c);
            conn_flush(c);
            conn_close(c);
            continue;
        }
        if (conn_flush(c) < 0 || conn_finished(c))
            conn_close(c);
    }
}

/* The listener stops taking new SYNs, and what its queue holds is taken
 * (each gets GOAWAY, which a client reads as "retry elsewhere") before it
 * closes: a close would reset them (listener.h). */
static void quiesce_now(grpc_server *s)
{
    s->quiesced = true;
    if (s->listen_fd >= 0) {
        const conf_addr *a = &s->cfg->dapr_grpc_listen;
        if (a->unix_socket) {   /* a new client finds no file (or the next instance's) */
            listener_unix_remove(a->host, &s->file);
            s->file_removed = true;
        } else if (!listener_drop_syns(s->listen_fd)) {
            log_event(LOG_LEVEL_WARN, "listener_filter_failed", "error", strerror(errno), NULL);
        }
        accept_all(s);
        epoll_ctl(s->ep, EPOLL_CTL_DEL, s->listen_fd, NULL);
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    for (gconn *c = s->conns, *next; c; c = next) {
        next = c->next;
        conn_goaway(c);
        if (conn_flush(c) < 0 || conn_finished(c))
            conn_close(c);
    }
}

/* Stopping: every call the engines took has answered, and every answer
 * has left (or its connection is gone). A connection still in its TLS
 * handshake has no call, and nothing to wait for. */
static bool all_sent(grpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    bool idle = s->inflight == 0 && !s->done;
    pthread_mutex_unlock(&s->mu);
    for (gconn *c = s->conns; idle && c; c = c->next)
        idle = (c->ssl && !c->tls_ready) || (c->woff == c->wlen && !nghttp2_session_want_write(c->sess));
    return idle;
}

static void *grpc_thread(void *arg)
{
    grpc_server *s = arg;
    uint64_t next_sweep = loop_now_us() + GRPC_SWEEP_MS * 1000ULL;
    struct epoll_event evs[GRPC_EVENTS];
    for (;;) {
        if (atomic_load(&s->quiesce_req) && !s->quiesced)
            quiesce_now(s);
        if (atomic_load(&s->stop_req) && (atomic_load(&s->force_stop) || all_sent(s)))
            break;
        int n = epoll_wait(s->ep, evs, GRPC_EVENTS, atomic_load(&s->stop_req) ? 20 : GRPC_SWEEP_MS);
        bool listener = false;
        for (int i = 0; i < n; i++) {
            enum gkind kind = *(enum gkind *)evs[i].data.ptr;
            if (kind == GK_LISTEN) {
                listener = true;   /* last: closes of this turn count first */
            } else if (kind == GK_WAKE) {
                take_answers(s);
            } else {
                conn_ready(evs[i].data.ptr, evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR));
            }
        }
        if (listener)
            accept_all(s);
        uint64_t now = loop_now_us();
        if (now >= next_sweep) {
            sweep(s, now);
            next_sweep = now + GRPC_SWEEP_MS * 1000ULL;
        }
        free_dead(s);
    }
    atomic_store(&s->exited, true);
    return NULL;
}

/* ---- start and stop ---- */

static int bind_listener(grpc_server *s, const conf_addr *a, char *err, size_t errlen)
{
    if (a->unix_socket) {   /* the file, its mode, a stale one: as --listen unix: (listener.h) */
        char why[400];
        int fd = listener_unix_bind(a->host, s->cfg->listen_mode, &s->file, why, sizeof why);
        if (fd < 0)
            snprintf(err, errlen, "--dapr-grpc-listen %s", why);
        return fd;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char port[8];
    snprintf(port, sizeof port, "%d", a->port);
    int gai = getaddrinfo(a->host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "--dapr-grpc-listen %s:%d: %s", a->host, a->port, gai_strerror(gai));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "--dapr-grpc-listen %s:%d: %s", a->host, a->port, strerror(saved));
    return fd;
}

static void server_free(grpc_server *s)
{
    while (s->conns)
        conn_close(s->conns);
    free_dead(s);
    while (s->calls) {   /* their engines never answered, and are gone */
        gcall *call = s->calls;
        s->calls = call->next;
        free(call);
    }
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        if (s->cfg->dapr_grpc_listen.unix_socket && !s->file_removed)
            listener_unix_remove(s->cfg->dapr_grpc_listen.host, &s->file);
    }
    grpc_tls_end(s);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->ep >= 0)
        close(s->ep);
    if (s->cbs)
        nghttp2_session_callbacks_del(s->cbs);
    if (s->opt)
        nghttp2_option_del(s->opt);
    grpc_peers_free(&s->peers);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->tls_mu);
    free(s);
}

grpc_server *grpc_start(const conf *cfg, const http_loop *loops, int nloops, char *err,
                        size_t errlen)
{
    grpc_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "--dapr-grpc-listen: out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->nloops = nloops < HTTP_MAX_LOOPS ? nloops : HTTP_MAX_LOOPS;
    memcpy(s->loops, loops, sizeof loops[0] * (size_t)s->nloops);
    s->limits = (api_limits){cfg->default_ttl_ms, cfg->max_ttl_ms, cfg->max_wait_ms, cfg->dapr_app_id};
    s->listen_tag.kind = GK_LISTEN;
    s->wake_tag.kind = GK_WAKE;
    s->wake_fd = s->ep = -1;
    /* The per-address table's hash key: a client cannot aim at it. */
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = loop_now_us() ^ (uint64_t)(uintptr_t)s;
    grpc_peers_init(&s->peers, seed);
    /* A test hook, not a setting (docs/contributing.md): the idle timeout
     * in milliseconds, so that a test need not wait five minutes. */
    const char *idle = getenv("REDLOCKD_TEST_GRPC_IDLE_MS");
    long long idle_ms = idle ? atoll(idle) : 0;
    s->idle_us = (uint64_t)(idle_ms > 0 ? idle_ms : GRPC_IDLE_TIMEOUT_MS) * 1000ULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->tls_mu, NULL);
    s->listen_fd = -1;
    if (grpc_tls_start(s, err, errlen) < 0 ||
        (s->listen_fd = bind_listener(s, &cfg->dapr_grpc_listen, err, errlen)) < 0) {
        server_free(s);
        return NULL;
    }
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &s->listen_tag};
    struct epoll_event we = {.events = EPOLLIN, .data.ptr = &s->wake_tag};
    if (s->wake_fd < 0 || s->ep < 0 || epoll_ctl(s->ep, EPOLL_CTL_ADD, s->listen_fd, &le) < 0 ||
        epoll_ctl(s->ep, EPOLL_CTL_ADD, s->wake_fd, &we) < 0 ||
        nghttp2_session_callbacks_new(&s->cbs) != 0 || nghttp2_option_new(&s->opt) != 0) {
        snprintf(err, errlen, "--dapr-grpc-listen: %s", strerror(errno));
        server_free(s);
        return NULL;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(s->cbs, grpc_on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(s->cbs, grpc_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->cbs, grpc_on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(s->cbs, grpc_on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(s->cbs, grpc_on_stream_close);
    if (pthread_create(&s->thread, NULL, grpc_thread, s) != 0) {
        snprintf(err, errlen, "--dapr-grpc-listen: cannot start a thread");
        server_free(s);
        return NULL;
    }
    s->running = true;
    char addr[300];
    conf_addr_str(&cfg->dapr_grpc_listen, "(tls)", addr, sizeof addr);
    log_event(LOG_LEVEL_INFO, "grpc_listening", "addr", addr, NULL);
    return s;
}

void grpc_quiesce(grpc_server *s)
{
    if (!s)
        return;
    atomic_store(&s->quiesce_req, true);
    grpc_wake(s);
}

int grpc_stop(grpc_server *s, long long timeout_ms)
{
    if (!s || !s->running)
        return 0;
    atomic_store(&s->quiesce_req, true);
    atomic_store(&s->stop_req, true);
    grpc_wake(s);
    /* The thread ends once every answer is sent; past the deadline it is
     * told to end regardless. */
    uint64_t until = loop_now_us() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000ULL;
    while (!atomic_load(&s->exited) && loop_now_us() < until)
        usleep(5000);
    atomic_store(&s->force_stop, true);
    grpc_wake(s);
    pthread_join(s->thread, NULL);
    s->running = false;
    /* The thread is gone: its connections are ours. Closed before the
     * engines' callbacks start finishing calls themselves (stopped), as
     * closing a stream touches its call. */
    while (s->conns)
        conn_close(s->conns);
    free_dead(s);
    pthread_mutex_lock(&s->mu);
    s->stopped = true;
    gcall *list = s->done;
    s->done = NULL;
    int left = s->inflight;
    pthread_mutex_unlock(&s->mu);
    while (list) {   /* answered after the thread ended: nobody to tell */
        gcall *call = list;
        list = call->next_done;
        pthread_mutex_lock(&s->mu);
        grpc_call_unlink(s, call);
        pthread_mutex_unlock(&s->mu);
        rl_finish(call->eng, call->h, false);
        free(call);
    }
    return left;
}

void grpc_free(grpc_server *s)
{
    if (!s)
        return;
    server_free(s);
}
