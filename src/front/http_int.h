/* http_int.h - what the files of the HTTP layer share (http.h, in
 * front/front.h, is the layer's face to the rest): the server, its loops' shards, the registry
 * of connections, the request context, and the functions one file calls
 * in another. Which file holds what, from the top down (each calls only
 * files below it; the layers check finds a circle):
 *   http_loops.c    the loops: each one's libmicrohttpd daemons, one per
 *                   listener it serves; start, quiesce, drain and stop
 *   http.c          a request's life: reading it (http_on_request), its
 *                   route, its answer once the engine did, its completion
 *   http_park.c     backpressure: new requests left unread while the
 *                   admission queue is long
 *   http_routes.c   the route table: each route's methods, right, auth and
 *                   handler; 404, 405 with Allow and the auth check
 *   the route handlers, and the answers they choose:
 *   http_locks.c    the lock and Dapr routes
 *   http_recipes.c  elections, semaphores and heartbeats
 *   http_admin.c    an operator's force release, and listings
 *   http_ops.c      the operators' routes: /readyz and /metrics
 *   http_ui.c       the dashboard: its page and GET /ui/state
 *   http_engine.c   a request's way to the engine and back, and a grant
 *                   that becomes a held stream
 *   http_conns.c    the registry of connections, its watcher thread, the
 *                   delivery checks of grants to clients that sent their
 *                   FIN, and permits nobody received
 *   http_ctx.c      a request's context: answers, suspension, cleanup
 *                   handlers, query arguments, rights and the audit log,
 *                   and which loop serves a name
 *   http_peer.c     who calls: the listener it came by, the client's
 *                   address, its verified client certificate and its name
 *   http_tls.c      HTTPS: the certificate and key in force (swapped on
 *                   SIGHUP), given to each handshake; the client
 *                   certificate's check during the handshake
 */
#ifndef RL_HTTP_INT_H
#define RL_HTTP_INT_H

#include "http.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>
#include <microhttpd.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>

#include "api.h"
#include "base/base.h"
#include "masters/masters.h"
#include "engine/engine.h"
#include "recipes/recipes.h"
#include "semaphore_api.h"

#define HTTP_IDLE_TIMEOUT_S 60
#define HTTP_STREAM_BLOCK 16         /* a stream response's own block (http_stream_answer) */
#define HTTP_WATCH_INTERVAL_MS 100   /* how often gone clients and slow requests are looked for */
#define HTTP_PROBE_INTERVAL_MS 25    /* how often a half-closed held stream is probed */
#define HTTP_RECHECK_MS 2            /* a stream that was writing when its client spoke */
#define HTTP_TRIM_AFTER_CLOSES 256   /* return freed connection memory to the system */
#define HTTP_TRIM_QUIET_MS 1000      /* ... and once closes stop for this long after some */
#define HTTP_HANDSHAKE_GRACE_MS 50   /* quiescing: a handshake under way completes within this */
#define HTTP_QUEUE_TAKE_MAX_MS 1000  /* quiescing: the most time spent emptying the queues */

/* A client's address: an IP one in 28 bytes (a sockaddr_storage is 128, in
 * each of 10,000 leases' entries); a Unix socket's keeps its family only. */
typedef union http_addr {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
} http_addr;

/* One connection, from libmicrohttpd's start notice to its close notice.
 * Every field is guarded by the server's reg_lock. */
typedef struct conn_info {
    struct conn_info *prev, *next;
    int fd;
    http_addr peer;             /* for --max-connections-per-ip */
    socklen_t peer_len;
    uint64_t phase_start_us;    /* connect, or the end of the last request */
    bool busy;                  /* a complete request is being served */
    bool shut;                  /* closed for --request-timeout-ms */
    struct req_ctx *suspended;  /* the request waiting for the engine, if any */
    bool recheck;               /* its socket spoke (watch_ep) while its stream was writing:
                                   looked at again soon (reg_lock) */
    /* Only the connection's loop touches these two (http_peer.c): */
    signed char cert;           /* HTTPS with --tls-client-ca-file: 0 not looked at yet, 1 a
                                   verified client certificate, -1 none */
    char *cert_name;            /* that certificate's name, malloc'd (NULL: none, or too long) */
} conn_info;

/* A grant answered to a client that had already sent its FIN: it may have
 * half-closed (and reads the answer) or closed (and its kernel answers the
 * grant with a reset). The grant stays with the engine until the watcher
 * knows which: every byte acknowledged, or a reset (then it is released as
 * undelivered), or its validity over (nothing left to release). */
typedef struct delivery_check {
    struct delivery_check *next;
    int fd;                     /* a duplicate of the connection's socket */
    rl_engine *eng;
    rl_handle *h;               /* the grant, until rl_finish */
    uint64_t until_us;          /* the grant's validity ends */
    bool arrived;               /* the verdict, once settled */
    sem_request *sem;           /* a semaphore's grant instead (h NULL): its permits are
                                   given back when undelivered */
    sem_result *sem_res;
    mpool *pool;                /* the loop that serves sem's give-back */
} delivery_check;

/* One --listen: what it is, for the requests that come by it. A TCP
 * listener is served by every loop (a socket each, SO_REUSEPORT); a Unix
 * socket, which cannot be shared so, by loop 0 alone. */
typedef struct http_listener {
    const conf_addr *addr;      /* cfg->listen[i] */
    unsigned kind;              /* API_LISTENER_* bits: loopback (or Unix), HTTPS */
    int unix_fd;                /* a Unix socket: bound at start, ours to close (-1: none) */
    listener_file file;         /* ... its file, removed at stop if still ours */
    bool removed;               /* ... the file is gone (quiescing removes it first) */
} http_listener;

/* A libmicrohttpd daemon in external epoll mode: one listener's, on one
 * loop. */
typedef struct http_daemon {
    struct MHD_Daemon *d;
    http_listener *l;
    MHD_socket listen_fd;       /* while quiescing: the listener libmicrohttpd gave up */
    int *taken, ntaken, taken_cap;   /* while quiescing: connections taken from its queue */
} http_daemon;

/* One event loop's share of the server: a daemon for each listener it
 * serves (every TCP listener, and on loop 0 the Unix sockets), run by the
 * loop of its master pool (loop_set_io: the daemon's epoll fd, or with
 * several an epoll set of theirs), with that loop's engine. A request is
 * parsed, decided and answered on the loop that accepted it. */
typedef struct http_shard {
    http_server *s;
    http_daemon daemons[CONF_MAX_LISTEN];
    int ndaemons;
    int epfd;                   /* several daemons: the epoll set of their epoll fds (-1: one) */
    rl_engine *engine;
    mpool *pool;
    atomic_bool kick;           /* a connection was resumed: run the daemons now (in external
                                   mode libmicrohttpd signals nothing itself) */
    struct MHD_Connection **parked; /* held back while the admission queue is long, oldest
                                       first (http_park.c; the loop's thread) */
    int nparked, cap_parked;
    struct MHD_Connection **let;    /* resumed from there: served at their next call */
    int nlet, cap_let;
    bool park_timer;            /* a look at the queue is due */
} http_shard;

/* The server's threads: the loops (requests, each with its engine's
 * callbacks), the watcher (gone clients, slow requests) and the hold set's
 * renewer (hold.h). The registry of connections is shared by all under
 * reg_lock; libmicrohttpd is never called with reg_lock held (its own locks
 * call back into ours). */
struct http_server {
    http_shard shards[HTTP_MAX_LOOPS];
    int nshards;
    const conf *cfg;
    mpool *pool;                /* the first loop's: /readyz and /metrics report its view */
    metrics *m;
    hold_set *holds;            /* held streams; wakes resume their connections */
    api_limits limits;
    http_listener listeners[CONF_MAX_LISTEN];  /* cfg->listen's, in order */
    int nlisteners;
    atomic_bool quiescing;      /* SIGTERM seen: no new connections */

    pthread_mutex_t reg_lock;
    pthread_cond_t reg_cond;    /* signalled when a request completes */
    conn_info *conns;
    delivery_check *checks;     /* grants whose delivery is not yet known */
    int nrequests;              /* requests whose headers arrived and that have not completed:
                                   the shutdown waits for them */
    int nconns;                 /* connections in the registry, for --max-connections */
    int closed_since_trim;
    uint64_t last_close_us;     /* reg_lock */
    int nrecheck;               /* connections with recheck set: reg_lock */
    int nprobed;                /* held streams probed since their FIN (half-closed, or
                                   closed and not yet seen so): reg_lock */
    pthread_t watcher;
    bool watching;
    int watch_ep;               /* the watcher's epoll set: the sockets of held streams and
                                   watches, for their client's FIN or reset (-1: none,
                                   the watcher then only polls) */
    atomic_bool stop_watch;
};

/* A route: one row of the table (http_routes.c). */
enum http_method { HTTP_GET = 1, HTTP_HEAD = 2, HTTP_POST = 4, HTTP_PUT = 8, HTTP_PATCH = 16, HTTP_DELETE = 32 };
enum http_auth {
    AUTH_BEARER,              /* Authorization: Bearer */
    AUTH_DAPR,                /* ... or dapr-api-token, as Dapr SDKs send it; refusals in Dapr's format */
};
struct req_ctx;
typedef enum MHD_Result (*http_handler)(struct req_ctx *ctx, const char *method, const char *name);
typedef struct http_route {
    enum api_route path;      /* the path pattern, as api_route_of matches it (the name with it) */
    unsigned methods;         /* enum http_method bits */
    bool force;               /* only a force release's form (DELETE ?force, or the query form) */
    unsigned right;           /* enum principal_right: RIGHT_NONE is open */
    enum http_auth auth;
    http_handler handler;
    const char *pattern;      /* as people read it: "/locks/{name}" */
    enum http_name {
        NAME_NONE,            /* no name (a listing shows only the names its caller may read) */
        NAME_PATH,            /* in the path (api_route_of), or ?name= in the force's query form */
        NAME_BODY,            /* in the body: a Dapr lock's key name, checked by its handler */
    } name;
} http_route;

/* What a request's exchange with the engine needs, and a stream that it
 * became does not: 3 KiB, which http_stream_answer frees so that 10,000
 * leases do not keep it. */
typedef struct req_work {
    char name[RULES_NAME_MAX + 2]; /* the path's name ("" when it did not decode or is longer
                                      than any name) */
    char label[RL_NAME_MAX + 1];   /* the election's name (req.name is its lock's); a force's name */
    char candidate_q[ELECTION_CANDIDATE_MAX + 1]; /* GET ?candidate= ("" none) */
    rl_request req;
    rl_result res;
    list_request list_req;         /* a listing's page (http_admin.c): the page asked */
} req_work;

/* A teardown that something attached to a request registered on it
 * (http_on_cleanup): http_on_completed runs them in reverse order of
 * registration, knowing none of them. completed_ok: the answer was sent
 * whole (libmicrohttpd's MHD_REQUEST_TERMINATED_COMPLETED_OK). */
typedef void (*http_cleanup_fn)(struct req_ctx *ctx, bool completed_ok);
/* What answers a request once the engine did (http_suspend_for_engine). */
typedef enum MHD_Result (*http_answer_fn)(struct req_ctx *ctx);
#define HTTP_CLEANUPS_MAX 8

/* A request, and the stream it may become (10,000 leases keep one each:
 * its fields are packed, and what only a request needs is in req_work). */
typedef struct req_ctx {
    http_server *s;
    http_shard *sh;           /* the loop serving it */
    rl_engine *eng;           /* the engine its request went to (http_engine_for) */
    struct MHD_Connection *conn;
    conn_info *ci;
    atomic_int refs;          /* libmicrohttpd's, and the engine's until lock_done */
    enum api_route route;
    rl_handle *h;             /* the engine's request, until rl_finish */
    bool susp;                /* suspended for the engine (reg_lock) */
    bool gone;                /* the client went away before the answer (reg_lock) */
    bool forced;              /* answered 503 by a shutdown before the engine answered */
    bool close;               /* answer with Connection: close */
    int confirm_fd;           /* a grant to a client that sent its FIN: a duplicate of the
                                 socket, to learn whether the answer arrived (-1: none) */
    uint64_t start_us;
    const http_route *row;    /* the table's row that serves it (NULL until matched) */
    const char *method;       /* as libmicrohttpd gave it, once matched */
    const principal *principal; /* the caller, once its row's auth check ran (NULL: none) */
    const char *route_name;   /* the name in the path, percent-decoded once (w->name) */
    char beat_kind;           /* ROUTE_HEARTBEAT: 'l', 'e' or 's' (api_heartbeat_of) */
    enum metrics_route mroute;
    char *body;
    size_t body_len;
    bool too_large;
    bool answered;            /* a response was queued */
    bool submitted;           /* handed to the engine, connection suspended */
    bool dapr;                /* answer in Dapr's wire format */
    bool hold_reserved;       /* a place in s->holds is reserved for this acquire */
    bool watched;             /* its socket is in the watcher's epoll set (http_watch_stream) */
    bool probed;              /* a held stream's client sent its FIN: it was probed
                                 (hold_probe), which a closed client answers with a reset */
    uint64_t probed_us;       /* the last probe (a half-closed client gets one again) */
    hold *hold;               /* the held stream this request became, until http_on_completed */
    election_watch *watch;    /* GET /elections/{name}?watch=true, until http_on_completed */
    bool election;            /* an election route: answered by election_answer */
    bool force;               /* an operator's force release (http_admin.c) */
    bool force_query;         /* DELETE /locks/?force=true&name=...: the query form of a
                                 force release (api_force_route_of); route_name from name */
    atomic_bool result_ready;
    int ncleanups;            /* in cleanups, below */
    rl_handle *list_turn;     /* a listing's place among --max-inflight, until list_done */
    char *list_body;
    sem_request *sem;         /* a semaphore route: its request and, once done, its result */
    sem_result *sem_res;
    sem_handle *semh;         /* its task, for the watcher to cancel (sem_cancel) */
    req_work *w;              /* NULL once its stream started (http_stream_answer) */
    http_answer_fn answer;    /* answers once the engine did (http_suspend_for_engine) */
    void (*on_result)(struct req_ctx *ctx, const rl_result *res);     /* the engine's result, */
    void (*on_permits)(struct req_ctx *ctx, const sem_result *res);   /* or a semaphore's, on its
                                 loop before the connection resumes (a force release's notices) */
    http_cleanup_fn cleanups[HTTP_CLEANUPS_MAX]; /* (loop thread) */
} req_ctx;

/* The files below call only down this list: http_ctx.c, http_peer.c and
 * http_tls.c at the bottom; then http_conns.c; http_engine.c; the route
 * handlers (http_locks.c, http_recipes.c, http_admin.c, http_ops.c,
 * http_ui.c); the table (http_routes.c); http.c and http_park.c; and
 * http_loops.c at the top (the layers check finds a circle). */

/* http_ctx.c */
/* Registers fn to run when ctx completes (once: a second registration of
 * the same fn is none). On ctx's loop, before it completes. */
void http_on_cleanup(req_ctx *ctx, http_cleanup_fn fn);
void http_ctx_wake(req_ctx *ctx);
enum MHD_Result http_send_body(req_ctx *ctx, int status, char *body, const char *allow,
                          long long retry_after_s, bool json);
enum MHD_Result http_send_error(req_ctx *ctx, enum api_err e, const char *message,
                           const char *allow);
/* Queues r (the caller's headers set) as ctx's answer, closing the
 * connection while the server stops, and counts it; destroys r. */
enum MHD_Result http_send_response(req_ctx *ctx, int status, struct MHD_Response *r);
void http_ctx_unref(req_ctx *ctx);
bool http_ctx_resume(req_ctx *ctx, const rl_result *res, const sem_result *sem_res);
bool http_ctx_unsuspend(req_ctx *ctx);
bool http_client_gone(int fd);
bool http_client_done_sending(int fd);
/* The query argument key of ctx's request, percent-decoded once into buf
 * (cap bytes; a decoded NUL becomes 0x7f, as in a name): NULL when absent,
 * "" when it does not decode or fit. */
const char *http_query_arg(req_ctx *ctx, const char *key, char *buf, size_t cap);
#define HTTP_QUERY_ARG_MAX 600   /* room for any query argument redlockd reads */
/* ctx->req.token from the Lock-Token header, the token query argument or
 * the body (token_in_body): api_pick_token's rules. */
int http_pick_token(req_ctx *ctx, bool token_in_body, char *msg, size_t msglen);
/* The bearer token of ctx's Authorization header, or NULL; is got the
 * secret want (NULL never is; in time that depends on want's length
 * only)? */
const char *http_bearer(req_ctx *ctx);
bool http_secret_is(const char *want, const char *got);
/* May ctx's caller exercise right on name? When not, the refusal (403) is
 * answered and audited with the name refused (name; NULL: the path's, or
 * none for a listing), and *rc is its result. */
bool http_may(req_ctx *ctx, unsigned right, const char *name, enum MHD_Result *rc);
/* A refusal by r's auth check (401 or 403): answered in r's format, and
 * written to the audit log with the path's name. */
enum MHD_Result http_refuse(req_ctx *ctx, const http_route *r, enum api_err e, const char *message);
/* One line of the audit log (audit.h) for ctx: its principal, client and
 * route; and the line for the engine's answer in ctx->w, when it changed
 * who holds what (or an extension failed). */
void http_audit(req_ctx *ctx, const char *event, const char *outcome, const char *name, long long fence);
void http_audit_result(req_ctx *ctx);
/* The engine a request goes to: a name's writes, to the loop that owns it
 * (http_engine_of_name's arg is the server); an inspection stays on its
 * own loop. */
rl_engine *http_engine_of_name(void *arg, const char *name);
rl_engine *http_engine_for(const req_ctx *ctx);

/* http_peer.c */
/* The client's address ("unix" for a Unix socket), for the log and the
 * audit; the verified client certificate's name (its subject CN, or its
 * first DNS SAN) into buf, or NULL when there is none (also when it does
 * not fit in cap bytes: a cut name must name nobody). */
void http_client_addr(req_ctx *ctx, char *out, size_t cap);
const char *http_client_cert_name(req_ctx *ctx, char *buf, size_t cap);
/* Is ctx an HTTPS request without a verified client certificate where
 * --tls-client-ca-file asks for one? (Then every route that needs a right
 * answers 401.) */
bool http_client_cert_missing(req_ctx *ctx);
/* What a connection's registry entry holds of its peer: its address (for
 * --max-connections-per-ip; none for a Unix socket's client), and at its
 * close, the certificate's name let go. */
void http_peer_note(conn_info *ci, const struct sockaddr *addr);
void http_peer_forget(conn_info *ci);
/* The listener ctx came by: API_LISTENER_* bits. */
unsigned http_listener_kind(req_ctx *ctx);

/* http_tls.c (the certificate in force is the process's: see http.h) */
/* Is HTTPS on, and is a client certificate asked for? */
bool http_tls_on(void);
bool http_tls_client_ca(void);
/* Fills opts (room for HTTP_TLS_OPTIONS) with the options of an HTTPS
 * daemon: the certificate callback, the client CA. Returns how many. */
#define HTTP_TLS_OPTIONS 2
int http_tls_daemon_options(struct MHD_OptionItem *opts);

/* http_conns.c */
bool http_check_delivery(req_ctx *ctx);
void http_watch_stream(req_ctx *ctx);
void http_settle_deliveries(http_server *s, bool finally);
void http_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                   enum MHD_ConnectionNotificationCode code);
void *http_watch_main(void *arg);
/* Permits nobody will receive: released on every master at once. */
void http_sem_give_back(http_server *s, mpool *pool, const char *name, const sem_result *res);

/* http_engine.c */
/* Suspends ctx for the engine; answer(ctx) answers once its result is in
 * (http.c calls it; http_submit submits ctx->w->req so). */
void http_suspend_for_engine(req_ctx *ctx, http_answer_fn answer);
enum MHD_Result http_submit(req_ctx *ctx, http_answer_fn answer);
void http_hold_wake(void *arg);
bool http_reserve_hold(req_ctx *ctx);
void http_hold_attach(req_ctx *ctx, hold *h);
enum MHD_Result http_too_many_holds(req_ctx *ctx);
enum MHD_Result http_stream_refused(req_ctx *ctx);
enum MHD_Result http_stream_answer(req_ctx *ctx, unsigned status);

/* The route handlers (http_handler), and their answers. */
/* http_locks.c */
enum MHD_Result http_lock_answer(req_ctx *ctx);
enum MHD_Result http_lock_dispatch(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_dapr_dispatch(req_ctx *ctx, const char *method, const char *store);

/* http_recipes.c */
enum MHD_Result http_election_answer(req_ctx *ctx);
enum MHD_Result http_election_dispatch(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_heartbeat_dispatch(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_sem_answer(req_ctx *ctx);
enum MHD_Result http_sem_dispatch(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_sem_start(req_ctx *ctx);   /* submits ctx->sem (parsed) */

/* http_admin.c */
enum MHD_Result http_force_dispatch(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_list_dispatch(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_list_answer(req_ctx *ctx);

/* http_ops.c */
/* Master i as every loop sees it: up only where up on every loop,
 * quarantined where any loop found it so, counters summed. */
void http_master_status(http_server *s, int i, master_status *out);
enum MHD_Result http_serve_readyz(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result http_serve_metrics(req_ctx *ctx, const char *method, const char *name);

/* http_ui.c */
enum MHD_Result ui_page(req_ctx *ctx, const char *method, const char *name);
enum MHD_Result ui_state(req_ctx *ctx, const char *method, const char *name);

/* http_routes.c */
/* The bit of method (0: none of the table's). */
unsigned http_method_bit(const char *method);
/* The row serving path with method (a force release's form when force),
 * or NULL; then allow (cap bytes) lists the methods path's rows take, for
 * 405 and its Allow header. */
const http_route *http_route_find(enum api_route path, unsigned method, bool force, char *allow, size_t cap);
/* Does any row serve path? */
bool http_route_known(enum api_route path);
/* The right the row for path and method asks (the gRPC front's calls). */
unsigned http_route_right(enum api_route path, const char *method);
/* Serves ctx, whose body is read: 404, 405, 413, the row's auth check,
 * then its handler. */
enum MHD_Result http_route_serve(req_ctx *ctx, const char *method);

/* http.c: libmicrohttpd's callbacks for a request */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version,
                           const char *upload_data, size_t *upload_data_size,
                           void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                  enum MHD_RequestTerminationCode toe);
size_t http_unescape(void *cls, struct MHD_Connection *c, char *s);
void http_mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* http_park.c: backpressure. True when conn's request (at its first
 * call) is held back: its connection is suspended until the admission
 * queue shortens. On the shard's loop. */
bool http_park(http_shard *sh, struct MHD_Connection *conn, const char *url, const char *method);
/* Resumes every connection held back (arg: the shard; on its loop): the
 * server stops, and no connection may stay suspended. */
void http_park_release(void *arg);
/* Is a look at the queue still due on sh's loop? (Any thread.) */
bool http_park_pending(http_shard *sh);
void http_park_free(http_shard *sh);

#endif
