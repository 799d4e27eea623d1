/* grpc_int.h - what the files of the gRPC server share (grpc.h, in
 * front/front.h, is its face to the rest): the server, its connections, streams and calls.
 *   grpc.c        the calls: nghttp2's callbacks, each stream's message,
 *                 the engine's request and its answer
 *   grpc_conns.c  the connections and the server's thread: accept, read,
 *                 write, sweep, quiesce, start and stop
 *   grpc_peers.c  connections per client address (--max-connections-per-ip),
 *                 pure (grpc_peers.h)
 *   grpc_tls.c    TLS on a TCP listener (OpenSSL, ALPN h2): the context in
 *                 force and its reload, a connection's handshake, its
 *                 client certificate, SSL_read and SSL_write
 */
#ifndef RL_GRPC_INT_H
#define RL_GRPC_INT_H

#include "grpc.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "base/base.h"
#include "grpc_api.h"
#include "grpc_peers.h"
#include "masters/masters.h"
#include "engine/engine.h"

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
    bool auth_ok;                  /* a principal's certificate or token came (or the service is
                                      open: auth.h), and no certificate is missing */
    const principal *who;          /* that principal (NULL: none) */
    bool too_large;                /* the body outgrew GRPC_MAX_MESSAGE_BYTES: dropped */
    bool dispatched;               /* the request ended and was answered or handed on */
    bool reset;                    /* RST_STREAM submitted by the sweep */
    bool cert_missing;             /* its connection's c->cert_missing */
    size_t header_bytes;           /* as SETTINGS_MAX_HEADER_LIST_SIZE counts them */
    uint8_t *body;
    size_t body_len;
    gcall *call;                   /* waiting for the engine */
    uint8_t *resp;                 /* the framed answer being sent */
    size_t resp_len, resp_off;
    uint64_t start_us;
    uint64_t answer_us;            /* the answer was handed to nghttp2 (0: not yet) */
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
    uint64_t wprog_us;             /* the socket last took bytes, or wbuf was last filled */
    bool want_out;                 /* EPOLLOUT is asked for */
    bool served;                   /* a whole call with the token came: the idle timeout
                                      applies, not the request timeout */
    bool goaway;                   /* GOAWAY sent */
    bool dead;                     /* closed; freed at the end of the loop's turn, as events
                                      of this turn may still name it */
    grpc_peer_addr peer;           /* counted in s->peers while has_peer */
    bool has_peer;                 /* (a Unix socket's client has no address: not counted) */
    bool unix_client;              /* came over a Unix socket: "unix" to the audit log */
    SSL *ssl;                      /* TLS (grpc_tls.c); NULL: h2c in clear */
    bool tls_ready;                /* the handshake is done, with ALPN h2 */
    bool tls_hs_out;               /* the handshake waits until the socket is writable */
    bool tls_read_out;             /* SSL_read waits until the socket is writable */
    bool tls_write_in;             /* SSL_write waits for the peer's bytes (EPOLLIN) */
    bool tls_broken;               /* a fatal TLS error: no close_notify */
    bool cert_missing;             /* --tls-client-ca-file and no verified certificate: every
                                      call is UNAUTHENTICATED */
    char cert_name[PRINCIPAL_NAME_MAX + 1]; /* the verified certificate's CN (or first DNS SAN),
                                      a `cert` principal's name; "" none */
    uint64_t start_us, last_us;    /* connected; last HEADERS or DATA frame read (a call's
                                      frames: PING, SETTINGS, WINDOW_UPDATE do not count) */
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
    char name[RL_INTERNAL_NAME_MAX + 1]; /* the lock's, for the audit log */
};

struct grpc_server {
    const conf *cfg;
    http_loop loops[HTTP_MAX_LOOPS];
    int nloops;
    api_limits limits;
    struct { enum gkind kind; } listen_tag, wake_tag;
    int listen_fd, wake_fd, ep;
    listener_file file;            /* a Unix socket's file (listener.h) */
    bool file_removed;             /* it was, at quiesce */
    pthread_t thread;
    bool running;                  /* the thread was started and not yet joined */
    gconn *conns;
    gconn *dead;                   /* closed connections, until the turn ends */
    int nconns;
    grpc_peers peers;              /* connections per client address */
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    atomic_bool quiesce_req, stop_req, force_stop, exited;
    bool quiesced;                 /* gRPC thread: the listener is closed, GOAWAY sent */
    uint64_t idle_us;              /* GRPC_IDLE_TIMEOUT_MS, or REDLOCKD_TEST_GRPC_IDLE_MS */

    pthread_mutex_t tls_mu;        /* guards tls_ctx (SIGHUP swaps it on the main thread) */
    SSL_CTX *tls_ctx;              /* the context in force; NULL: no TLS (grpc_tls.c) */
    X509_STORE *ca_store;          /* --tls-client-ca-file, read at start (NULL: none) */
    STACK_OF(X509_NAME) *ca_names; /* its subjects, the list a client is shown */

    pthread_mutex_t mu;            /* guards the rest */
    gcall *done;                   /* answered by an engine, not yet taken */
    gcall *calls;                  /* every call handed to an engine and not yet finished */
    int inflight;                  /* calls whose engine has not answered */
    bool stopped;                  /* the thread has ended: call_done finishes calls itself */
};

/* http_routes.c: the right the route table's row for path and method asks:
 * the gRPC front serves the same operations as Dapr's HTTP routes. */
unsigned http_route_right(enum api_route path, const char *method);

/* grpc.c */
void grpc_wake(grpc_server *s);
void grpc_call_unlink(grpc_server *s, gcall *call);
void grpc_call_answered(gcall *call);
int grpc_on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *ud);
int grpc_on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
              size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud);
int grpc_on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                  size_t len, void *ud);
int grpc_on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *ud);
void grpc_stream_free(gconn *c, gstream *st);
int grpc_on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *ud);

/* grpc_tls.c: each 0 or -1 unless said. */
/* The client CA and the context in force, when the listener is TCP and
 * --tls-cert-file is set (else nothing); err on failure. */
int grpc_tls_start(grpc_server *s, char *err, size_t errlen);
void grpc_tls_end(grpc_server *s);
/* c->ssl, from the context in force, on c->fd. */
int grpc_tls_accept(gconn *c);
/* The handshake's next step: 1 done (ALPN h2; c->cert_missing and
 * c->cert_name set), 0 it waits for the socket (c->tls_hs_out: to write),
 * -1 failed (close the connection). */
int grpc_tls_handshake(gconn *c);
/* As recv and send on the socket: bytes, or 0 (recv: closed), or -1 with
 * errno (EAGAIN: wait; c->tls_read_out or c->tls_write_in say for what). */
ssize_t grpc_tls_recv(gconn *c, uint8_t *buf, size_t len);
ssize_t grpc_tls_send(gconn *c, const uint8_t *buf, size_t len);
/* close_notify (once, when it may be sent) and c->ssl freed. */
void grpc_tls_close(gconn *c);

#endif
