/* grpc.c - see grpc.h. */
#include "grpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "dlist.h"
#include "grpc_api.h"
#include "listener.h"
#include "log.h"
#include "master.h"
#include "redlock.h"

#define GRPC_READ_CHUNK 16384
#define GRPC_SWEEP_MS 1000      /* how often slow calls and idle connections are looked for */
#define GRPC_EVENTS 64

enum gkind { GK_LISTEN, GK_WAKE, GK_CONN };

typedef struct gcall gcall;
typedef struct gconn gconn;

/* One call (an HTTP/2 stream), from its first HEADERS frame to its close.
 * gRPC thread only. */
typedef struct gstream {
    struct gstream *prev, *next;   /* in its connection's list */
    gconn *c;
    int32_t id;
    enum grpc_method method;
    bool post;                     /* :method POST */
    bool grpc_ct;                  /* content-type application/grpc[+proto|;...] */
    bool auth_ok;                  /* the configured token came (or none is configured) */
    bool too_large;                /* the body outgrew GRPC_MAX_MESSAGE_BYTES: dropped */
    bool dispatched;               /* the request ended and was answered or handed on */
    size_t header_bytes;           /* as SETTINGS_MAX_HEADER_LIST_SIZE counts them */
    uint8_t *body;
    size_t body_len;
    gcall *call;                   /* waiting for the engine */
    uint8_t *resp;                 /* the framed answer being sent */
    size_t resp_len, resp_off;
    uint64_t start_us;
} gstream;

struct gconn {
    enum gkind kind;               /* first: epoll's data.ptr points here */
    gconn *prev, *next;
    grpc_server *s;
    int fd;
    nghttp2_session *sess;
    gstream *streams;
    uint8_t *wbuf;                 /* what nghttp2 gave and the socket did not take yet */
    size_t wlen, woff, wcap;
    bool want_out;                 /* EPOLLOUT is asked for */
    bool served;                   /* a whole call came: the idle timeout applies, not the
                                      request timeout */
    bool goaway;                   /* GOAWAY sent */
    bool dead;                     /* closed; freed at the end of the loop's turn, as events
                                      of this turn may still name it */
    uint64_t start_us, last_us;    /* connected; last bytes read */
};

/* A call handed to an engine. Its result comes on the engine's thread
 * (call_done), which queues it for the gRPC thread. */
struct gcall {
    gcall *next_done;              /* in s->done (mu) */
    gcall *prev, *next;            /* in s->calls (mu) */
    grpc_server *s;
    gstream *st;                   /* NULL once the stream closed (gRPC thread) */
    enum grpc_method method;
    rl_engine *eng;
    rl_handle *h;                  /* until rl_finish */
    rl_result res;                 /* set by call_done (mu) */
};

struct grpc_server {
    const conf *cfg;
    http_loop loops[HTTP_MAX_LOOPS];
    int nloops;
    api_limits limits;
    struct { enum gkind kind; } listen_tag, wake_tag;
    int listen_fd, wake_fd, ep;
    pthread_t thread;
    bool running;                  /* the thread was started and not yet joined */
    gconn *conns;
    gconn *dead;                   /* closed connections, until the turn ends */
    int nconns;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    atomic_bool quiesce_req, stop_req, force_stop, exited;
    bool quiesced;                 /* gRPC thread: the listener is closed, GOAWAY sent */

    pthread_mutex_t mu;            /* guards the rest */
    gcall *done;                   /* answered by an engine, not yet taken */
    gcall *calls;                  /* every call handed to an engine and not yet finished */
    int inflight;                  /* calls whose engine has not answered */
    bool stopped;                  /* the thread has ended: call_done finishes calls itself */
};

static log_limit conn_log_limit = LOG_LIMIT_INIT;

/* ---- the engine's side ---- */

static void wake(grpc_server *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->wake_fd, &one, sizeof one);
    (void)n;   /* EAGAIN: the counter is already nonzero, the thread wakes anyway */
}

static void call_unlink(grpc_server *s, gcall *call)
{
    DLIST_UNLINK(s->calls, call, prev, next);
}

/* Engine callback, on the engine's loop thread. */
static void call_done(void *arg, const rl_result *res)
{
    gcall *call = arg;
    grpc_server *s = call->s;
    pthread_mutex_lock(&s->mu);
    call->res = *res;
    s->inflight--;
    if (s->stopped) {   /* nobody to answer: a grant is released at once */
        call_unlink(s, call);
        pthread_mutex_unlock(&s->mu);
        rl_finish(call->eng, call->h, false);
        free(call);
        return;
    }
    call->next_done = s->done;
    s->done = call;
    pthread_mutex_unlock(&s->mu);
    wake(s);
}

/* ---- answers (gRPC thread) ---- */

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* A trailers-only answer: the status, no message. */
static void answer_status(gstream *st, int code, const char *message)
{
    char enc[600], cs[12];
    grpc_api_percent_encode(message ? message : "", enc, sizeof enc);
    snprintf(cs, sizeof cs, "%d", code);
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-status", cs), NV("grpc-message", enc)};
    nghttp2_submit_response(st->c->sess, st->id, nva, message ? 4 : 3, NULL);
}

/* Not gRPC at all: a bare HTTP status (415 for another content type, as the
 * gRPC wire spec asks; 405 for another method). */
static void answer_http(gstream *st, const char *status)
{
    nghttp2_nv nva[] = {NV(":status", status), NV("content-type", "application/grpc"),
                        NV("grpc-status", "12"), NV("grpc-message", "only%20gRPC%20calls%20are%20served%20here")};
    nghttp2_submit_response(st->c->sess, st->id, nva, 4, NULL);
}

static ssize_t read_answer(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    gstream *st = src->ptr;
    (void)ud;
    size_t n = st->resp_len - st->resp_off;
    if (n > length)
        n = length;
    memcpy(buf, st->resp + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off == st->resp_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        nghttp2_nv t[] = {NV("grpc-status", "0")};
        if (nghttp2_submit_trailer(sess, id, t, 1) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

/* Headers, the message (owned from here on), then grpc-status 0. */
static bool answer_message(gstream *st, uint8_t *msg, size_t len)
{
    free(st->resp);
    st->resp = msg;
    st->resp_len = len;
    st->resp_off = 0;
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_answer};
    return nghttp2_submit_response(st->c->sess, st->id, nva, 2, &prd) == 0;
}

/* ---- calls (gRPC thread) ---- */

static bool token_equal(const char *want, const uint8_t *got, size_t gl)
{
    size_t wl = strlen(want);
    /* In time that depends on the secret's length only. */
    unsigned char diff = (unsigned char)(wl != gl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

static void submit_call(gstream *st, const rl_request *req)
{
    grpc_server *s = st->c->s;
    gcall *call = calloc(1, sizeof *call);
    if (!call) {
        answer_status(st, GRPC_INTERNAL, "out of memory");
        return;
    }
    call->s = s;
    call->st = st;
    call->method = st->method;
    call->eng = s->loops[s->nloops == 1 ? 0 : http_loop_of(req->name, s->nloops)].engine;
    pthread_mutex_lock(&s->mu);
    DLIST_PUSH(s->calls, call, prev, next);
    s->inflight++;
    pthread_mutex_unlock(&s->mu);
    st->call = call;
    if (rl_submit(call->eng, req, call_done, call, &call->h) < 0) {
        pthread_mutex_lock(&s->mu);
        call_unlink(s, call);
        s->inflight--;
        pthread_mutex_unlock(&s->mu);
        free(call);
        st->call = NULL;
        answer_status(st, GRPC_UNAVAILABLE, "the lock service is stopping");
    }
}

/* The request has ended: answer it now, or hand it to the engine. */
static void dispatch(gstream *st)
{
    grpc_server *s = st->c->s;
    st->dispatched = true;
    st->c->served = true;
    if (!st->post) {
        answer_http(st, "405");
        return;
    }
    if (!st->grpc_ct) {
        answer_http(st, "415");
        return;
    }
    if (st->method == GRPC_M_UNKNOWN) {
        answer_status(st, GRPC_UNIMPLEMENTED, "redlockd serves only TryLockAlpha1, UnlockAlpha1 "
                      "and GetMetadata of dapr.proto.runtime.v1.Dapr");
        return;
    }
    if (!st->auth_ok) {
        answer_status(st, GRPC_UNAUTHENTICATED, "a valid dapr-api-token is required");
        return;
    }
    char err[400];
    const uint8_t *msg;
    size_t len;
    if (st->too_large) {
        snprintf(err, sizeof err, "the request message is larger than the %d bytes allowed",
                 GRPC_MAX_MESSAGE_BYTES);
        answer_status(st, GRPC_RESOURCE_EXHAUSTED, err);
        return;
    }
    int code = grpc_api_unframe(st->body, st->body_len, GRPC_MAX_MESSAGE_BYTES, &msg, &len, err,
                                sizeof err);
    rl_request req;
    if (code == GRPC_OK)
        code = grpc_api_parse(st->method, msg, len, s->cfg->dapr_stores, &s->limits, &req, err,
                              sizeof err);
    if (code != GRPC_OK) {
        answer_status(st, code, err);
        return;
    }
    if (st->method == GRPC_M_METADATA) {
        uint8_t *out;
        size_t outlen;
        if (grpc_api_metadata(s->cfg->dapr_stores, REDLOCKD_VERSION, &out, &outlen) < 0)
            answer_status(st, GRPC_INTERNAL, "out of memory");
        else if (!answer_message(st, out, outlen))
            answer_status(st, GRPC_INTERNAL, "cannot answer");
        return;
    }
    submit_call(st, &req);
}

/* An engine's answer reached the gRPC thread. */
static void call_answered(gcall *call)
{
    gstream *st = call->st;
    bool delivered = false;
    if (st) {
        st->call = NULL;
        uint8_t *out;
        size_t outlen;
        char err[400];
        int code = grpc_api_answer(call->method, &call->res, &out, &outlen, err, sizeof err);
        if (code == GRPC_OK)
            delivered = answer_message(st, out, outlen);
        else
            answer_status(st, code, err);
    }
    grpc_server *s = call->s;
    pthread_mutex_lock(&s->mu);
    call_unlink(s, call);
    pthread_mutex_unlock(&s->mu);
    rl_finish(call->eng, call->h, delivered);   /* an undelivered grant is released */
    free(call);
}

/* ---- nghttp2 callbacks ---- */

static gstream *stream_of(nghttp2_session *sess, int32_t id)
{
    return nghttp2_session_get_stream_user_data(sess, id);
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *ud)
{
    gconn *c = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    gstream *st = calloc(1, sizeof *st);
    if (!st)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* resets the stream */
    st->c = c;
    st->id = frame->hd.stream_id;
    st->auth_ok = c->s->cfg->auth_token == NULL;
    st->start_us = mpool_now_us();
    DLIST_PUSH(c->streams, st, prev, next);
    nghttp2_session_set_stream_user_data(sess, st->id, st);
    return 0;
}

static bool header_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && !memcmp(name, want, len);
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    gconn *c = ud;
    (void)flags;
    gstream *st = stream_of(sess, frame->hd.stream_id);
    if (!st || st->dispatched)
        return 0;
    st->header_bytes += namelen + valuelen + 32;
    if (st->header_bytes > GRPC_MAX_HEADER_BYTES)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* resets the stream */
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;   /* request trailers: counted, not read */
    const char *want = c->s->cfg->auth_token;
    if (header_is(name, namelen, ":method")) {
        st->post = valuelen == 4 && !memcmp(value, "POST", 4);
    } else if (header_is(name, namelen, ":path")) {
        char path[128];
        st->method = GRPC_M_UNKNOWN;
        if (valuelen < sizeof path) {
            memcpy(path, value, valuelen);
            path[valuelen] = '\0';
            st->method = grpc_api_method_of(path);
        }
    } else if (header_is(name, namelen, "content-type")) {
        static const char ct[] = "application/grpc";
        size_t l = sizeof ct - 1;
        st->grpc_ct = valuelen >= l && !memcmp(value, ct, l) &&
                      (valuelen == l || value[l] == '+' || value[l] == ';');
    } else if (want && header_is(name, namelen, "dapr-api-token")) {
        st->auth_ok = st->auth_ok || token_equal(want, value, valuelen);
    } else if (want && header_is(name, namelen, "authorization") && valuelen > 7 &&
               !strncasecmp((const char *)value, "Bearer ", 7)) {
        st->auth_ok = st->auth_ok || token_equal(want, value + 7, valuelen - 7);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    gstream *st = stream_of(sess, id);
    if (!st || st->dispatched || st->too_large)
        return 0;   /* read and dropped: flow control goes on */
    if (st->body_len + len > GRPC_PREFIX_LEN + GRPC_MAX_MESSAGE_BYTES) {
        st->too_large = true;
        free(st->body);
        st->body = NULL;
        st->body_len = 0;
        return 0;
    }
    uint8_t *nb = realloc(st->body, st->body_len + len);
    if (!nb)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(nb + st->body_len, data, len);
    st->body = nb;
    st->body_len += len;
    return 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *ud)
{
    (void)ud;
    if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        gstream *st = stream_of(sess, frame->hd.stream_id);
        if (st && !st->dispatched)
            dispatch(st);
    }
    return 0;
}

static void stream_free(gconn *c, gstream *st)
{
    if (st->call)
        st->call->st = NULL;   /* its answer, when it comes, has nowhere to go */
    DLIST_UNLINK(c->streams, st, prev, next);
    free(st->body);
    free(st->resp);
    free(st);
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *ud)
{
    gconn *c = ud;
    (void)error_code;
    gstream *st = stream_of(sess, id);
    if (st) {
        nghttp2_session_set_stream_user_data(sess, id, NULL);
        stream_free(c, st);
    }
    return 0;
}

/* ---- connections (gRPC thread) ---- */

/* Closes c; its memory waits in s->dead until free_dead. */
static void conn_close(gconn *c)
{
    grpc_server *s = c->s;
    if (c->dead)
        return;
    c->dead = true;
    while (c->streams)
        stream_free(c, c->streams);
    nghttp2_session_del(c->sess);
    c->sess = NULL;
    close(c->fd);   /* also leaves the epoll set */
    DLIST_UNLINK(s->conns, c, prev, next);
    s->nconns--;
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

/* Sends what nghttp2 has to send, as far as the socket takes it. -1: the
 * connection is broken. */
static int conn_flush(gconn *c)
{
    for (;;) {
        while (c->woff < c->wlen) {
            ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return want_out(c, true);
            if (n <= 0)
                return -1;
            c->woff += (size_t)n;
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
    }
    return want_out(c, false);
}

static int conn_read(gconn *c)
{
    uint8_t buf[GRPC_READ_CHUNK];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return -1;   /* closed or broken */
        c->last_us = mpool_now_us();
        ssize_t used = nghttp2_session_mem_recv(c->sess, buf, (size_t)n);
        if (used < 0) {
            unsigned long long sup;
            if (log_allow(&conn_log_limit, c->last_us, &sup))
                log_event(LOG_LEVEL_DEBUG, "grpc_bad_input", "error", nghttp2_strerror((int)used),
                          NULL);
            /* nghttp2 queued a GOAWAY for most errors: send it if we can. */
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

static void accept_all(grpc_server *s)
{
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;   /* EAGAIN, or out of descriptors: the next turn tries again */
        gconn *c = s->nconns < s->cfg->max_connections ? calloc(1, sizeof *c) : NULL;
        if (!c || nghttp2_session_server_new2(&c->sess, s->cbs, c, s->opt) != 0) {
            free(c);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->kind = GK_CONN;
        c->s = s;
        c->fd = fd;
        c->start_us = c->last_us = mpool_now_us();
        nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS},
            {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADER_BYTES},
        };
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
            epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            nghttp2_session_del(c->sess);
            free(c);
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
        call_answered(call);
        if (c && !c->dead && conn_flush(c) < 0)
            conn_close(c);
    }
}

/* Once a second: a stream that has not ended within --request-timeout-ms
 * is reset; a connection that sent no whole call that long after its
 * start, or nothing for GRPC_IDLE_TIMEOUT_MS with no call open, is closed. */
static void sweep(grpc_server *s, uint64_t now)
{
    uint64_t req_us = (uint64_t)s->cfg->request_timeout_ms * 1000ULL;
    for (gconn *c = s->conns, *next; c; c = next) {
        next = c->next;
        for (gstream *st = c->streams; st; st = st->next)
            if (!st->dispatched && now - st->start_us > req_us) {
                st->dispatched = true;   /* reset once */
                nghttp2_submit_rst_stream(c->sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
            }
        if (!c->streams && now - (c->served ? c->last_us : c->start_us) >
                               (c->served ? GRPC_IDLE_TIMEOUT_MS * 1000ULL : req_us)) {
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
        if (!listener_drop_syns(s->listen_fd))
            log_event(LOG_LEVEL_WARN, "listener_filter_failed", "error", strerror(errno), NULL);
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
 * has left (or its connection is gone). */
static bool all_sent(grpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    bool idle = s->inflight == 0 && !s->done;
    pthread_mutex_unlock(&s->mu);
    for (gconn *c = s->conns; idle && c; c = c->next)
        idle = c->woff == c->wlen && !nghttp2_session_want_write(c->sess);
    return idle;
}

static void *grpc_thread(void *arg)
{
    grpc_server *s = arg;
    uint64_t next_sweep = mpool_now_us() + GRPC_SWEEP_MS * 1000ULL;
    struct epoll_event evs[GRPC_EVENTS];
    for (;;) {
        if (atomic_load(&s->quiesce_req) && !s->quiesced)
            quiesce_now(s);
        if (atomic_load(&s->stop_req) && (atomic_load(&s->force_stop) || all_sent(s)))
            break;
        int n = epoll_wait(s->ep, evs, GRPC_EVENTS, atomic_load(&s->stop_req) ? 20 : GRPC_SWEEP_MS);
        for (int i = 0; i < n; i++) {
            enum gkind kind = *(enum gkind *)evs[i].data.ptr;
            if (kind == GK_LISTEN) {
                accept_all(s);
            } else if (kind == GK_WAKE) {
                take_answers(s);
            } else {
                gconn *c = evs[i].data.ptr;
                if (c->dead)
                    continue;   /* closed earlier in this turn */
                int rc = 0;
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    rc = conn_read(c);
                if (rc == 0 && !c->dead)
                    rc = conn_flush(c);
                if (rc < 0 || c->dead || conn_finished(c))
                    conn_close(c);
            }
        }
        uint64_t now = mpool_now_us();
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

static int bind_listener(const conf_addr *a, char *err, size_t errlen)
{
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
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->ep >= 0)
        close(s->ep);
    if (s->cbs)
        nghttp2_session_callbacks_del(s->cbs);
    if (s->opt)
        nghttp2_option_del(s->opt);
    pthread_mutex_destroy(&s->mu);
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
    s->limits = (api_limits){cfg->default_ttl_ms, cfg->max_ttl_ms, cfg->max_wait_ms};
    s->listen_tag.kind = GK_LISTEN;
    s->wake_tag.kind = GK_WAKE;
    s->wake_fd = s->ep = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->listen_fd = bind_listener(&cfg->dapr_grpc_listen, err, errlen);
    if (s->listen_fd < 0) {
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
    nghttp2_session_callbacks_set_on_begin_headers_callback(s->cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(s->cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(s->cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(s->cbs, on_stream_close);
    if (pthread_create(&s->thread, NULL, grpc_thread, s) != 0) {
        snprintf(err, errlen, "--dapr-grpc-listen: cannot start a thread");
        server_free(s);
        return NULL;
    }
    s->running = true;
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%d", cfg->dapr_grpc_listen.host, cfg->dapr_grpc_listen.port);
    log_event(LOG_LEVEL_INFO, "grpc_listening", "addr", addr, NULL);
    return s;
}

void grpc_quiesce(grpc_server *s)
{
    if (!s)
        return;
    atomic_store(&s->quiesce_req, true);
    wake(s);
}

int grpc_stop(grpc_server *s, long long timeout_ms)
{
    if (!s || !s->running)
        return 0;
    atomic_store(&s->quiesce_req, true);
    atomic_store(&s->stop_req, true);
    wake(s);
    /* The thread ends once every answer is sent; past the deadline it is
     * told to end regardless. */
    uint64_t until = mpool_now_us() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000ULL;
    while (!atomic_load(&s->exited) && mpool_now_us() < until)
        usleep(5000);
    atomic_store(&s->force_stop, true);
    wake(s);
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
        call_unlink(s, call);
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
