/* harness.h - integration-test fixtures: real redis-server masters on free
 * loopback ports, the real redlockd binary, and an HTTP client (libcurl).
 *
 * Every process started here dies with the test (PR_SET_PDEATHSIG) and is
 * stopped by cluster_free; data lives in a fresh temporary folder.
 */
#ifndef RL_HARNESS_H
#define RL_HARNESS_H

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H_MAX_MASTERS 7

typedef struct h_proxy h_proxy;

typedef struct h_master {
    int port;
    pid_t pid;
    char dir[320];
    h_proxy *proxy;           /* NULL: redlockd reaches the master directly (h_master_proxy) */
} h_master;

typedef struct h_cluster {
    int n;
    h_master m[H_MAX_MASTERS];
    char dir[256];
    pid_t daemon;
    int http_port;
    char base[64];            /* http://127.0.0.1:PORT */
    char log[300];            /* the daemon's stderr */
    const char *extra_redis;  /* extra redis-server arguments, space separated */
    const char *port_flag;    /* the masters' port option: "--port", or "--tls-port" (their
                                 plain port then off); h_cluster_start_with */
    const char *scheme;       /* NULL: --masters as host:port; else scheme://host:port */
    int peer;                 /* 0: the cluster itself; else a peer view (h_peer_start) */
    /* HTTPS: set cacert before h_daemon_start when the test's flags make
     * redlockd serve HTTPS (--tls-cert-file ...): base is then https://,
     * and h_http checks the service's certificate against cacert and sends
     * the client certificate cert with its key (NULL: none). Paths, kept
     * by the test. */
    const char *cacert, *cert, *key;
} h_cluster;

typedef struct h_resp {
    long status;
    char *body;
    cJSON *json;              /* NULL if the body is not JSON */
    char retry_after[32];
    char allow[128];
    char content_type[128];
    double seconds;
} h_resp;

/* A suite's init for tests with many raw clients: SIGPIPE ignored (they
 * write to connections the server closed) and the descriptor limit raised
 * to its maximum (a thousand sockets need more than 1024). */
void h_client_setup(void);

/* Prints what failed, with errno, and aborts the test. */
void h_die(const char *what) __attribute__((noreturn));

int h_free_port(void);
/* Starts argv[0] (searched in PATH) with its output appended to log_path;
 * it is killed when this process ends. Its pid. */
pid_t h_spawn(char *const argv[], const char *log_path);
uint64_t h_now_us(void);

/* Starts n masters (no persistence unless extra_redis says so). */
h_cluster *h_cluster_start(int n, const char *extra_redis);
/* Starts n masters as h_cluster_start does, listening with port_flag
 * ("--port", or "--tls-port" for TLS masters, whose TLS settings come in
 * extra_redis), and gives redlockd --masters as scheme://127.0.0.1:port
 * (scheme NULL: host:port). A TLS master is taken as started once its port
 * accepts connections. */
h_cluster *h_cluster_start_with(int n, const char *extra_redis, const char *port_flag,
                                const char *scheme);
/* Starts redlockd against the cluster with extra flags (NULL-terminated) and
 * waits until it is ready. It listens on 127.0.0.1:c->http_port unless the
 * extra flags name --listen (which may be given more than once): then on
 * those alone, and c->http_port must be reachable on 127.0.0.1. */
void h_daemon_start(h_cluster *c, ...) __attribute__((sentinel));
/* The same, waiting only until it serves (/healthz): for a cluster that is
 * not to become ready. */
void h_daemon_start_unready(h_cluster *c, ...) __attribute__((sentinel));
/* Sends SIGTERM and returns the exit status (or -1). */
int h_daemon_stop(h_cluster *c);
/* SIGKILL, as a crash; a later h_daemon_start listens on the same port. */
void h_daemon_kill(h_cluster *c);
void h_cluster_free(h_cluster *c);
/* Another redlockd on the same masters, with its own port and log: a view of
 * c whose h_http and h_daemon_* act on that instance. Free it (SIGTERM,
 * sanitizer check) with h_peer_free before the cluster. Masters are stopped,
 * paused and restarted through c only. */
h_cluster *h_peer_start(h_cluster *c, ...) __attribute__((sentinel));
void h_peer_free(h_cluster *peer);
/* A suite's teardown: the peer (if any), then the cluster; both set NULL. */
void h_free_pair(h_cluster **c, h_cluster **peer);

void h_stop_process(pid_t pid);              /* SIGSTOP, back once it has stopped */
void h_master_pause(h_cluster *c, int i);    /* SIGSTOP */
void h_master_resume(h_cluster *c, int i);   /* SIGCONT */
void h_master_kill(h_cluster *c, int i);     /* SIGKILL and reap */
void h_master_restart(h_cluster *c, int i);  /* start again on the same port */

/* A slow master, deterministically (harness_proxy.c). h_master_proxy puts
 * a TCP proxy in front of master i: a redlockd started after the call
 * (peers too) reaches the master through it, and h_master_addr_port says
 * where. h_master_slow makes every answer of master i reach redlockd ms
 * after the master sent it, from now on (0: at once again): above
 * --master-timeout-ms it is late on every command, yet it answers each,
 * so redlockd keeps its connection (it lags, then catches up), as a loaded
 * master does now and then. Tests still reach the master directly
 * (h_redis, h_master_pause). h_cluster_free stops the proxies
 * (h_proxies_free). */
void h_master_proxy(h_cluster *c, int i);
void h_master_slow(h_cluster *c, int i, int ms);
int h_master_addr_port(const h_cluster *c, int i);
void h_proxies_free(h_cluster *c);

/* A command on master i; NULL on error. Free with freeReplyObject. */
redisReply *h_redis(h_cluster *c, int i, const char *fmt, ...);

/* HTTP to the daemon: method, path, body (NULL none), then header lines,
 * NULL-terminated. */
h_resp h_http(h_cluster *c, const char *method, const char *path, const char *body, ...)
    __attribute__((sentinel));
void h_resp_free(h_resp *r);

const char *h_str(const h_resp *r, const char *field);
long long h_int(const h_resp *r, const char *field);
bool h_has(const h_resp *r, const char *field);

/* A held stream (POST with "hold": true) read event by event over a raw
 * socket, so that a test can also close it abruptly. */
typedef struct h_stream {
    int fd;
    long status;              /* of the answer's status line */
    char content_type[128];
    bool chunked;
    char *buf;                /* bytes read and not yet consumed */
    size_t len, cap;
    size_t chunk_left;        /* bytes left in the current chunk */
    bool eof;                 /* the last chunk (or the connection's end) was read */
    char *body;               /* a non-stream answer's body (status != 201) */
    char line[8192];          /* chunk payload collected until a newline ends an event */
    size_t llen;
} h_stream;

/* Sends POST path with body and reads the status line and headers (up to
 * timeout_ms). NULL when the connection failed. */
h_stream *h_stream_open(h_cluster *c, const char *path, const char *body, int timeout_ms);
/* The same through whatever listens on 127.0.0.1:port (a proxy in front
 * of the daemon). */
h_stream *h_stream_open_at(int port, const char *path, const char *body, int timeout_ms);
/* The same with GET (no body): a watch stream (GET /elections/{name}?watch=true). */
h_stream *h_stream_get(h_cluster *c, const char *path, int timeout_ms);
/* The next event, waiting up to timeout_ms: 1 with *ev (free with
 * cJSON_Delete) and *recv_us (h_now_us when its line arrived), 0 on
 * timeout, -1 at the stream's end or on error. */
int h_stream_event(h_stream *s, int timeout_ms, cJSON **ev, uint64_t *recv_us);
/* Closes the socket (abruptly, as a client that leaves) and frees. */
void h_stream_close(h_stream *s);
/* A field of an event: its string ("" when absent), its number (-1). */
const char *h_ev_str(const cJSON *ev, const char *f);
long long h_ev_int(const cJSON *ev, const char *f);

/* Raw clients, for tests where a client misbehaves: a socket connected to
 * the daemon from source address src (NULL: any); the whole of s written;
 * what arrives until the peer closes (*closed) or timeout_ms passes,
 * NUL-terminated in buf. They abort the test on a socket error. */
int h_raw_connect(h_cluster *c, const char *src);
void h_raw_send(int fd, const char *s);
/* A raw POST of path with a JSON body (h_raw_acquire: /locks/name), sent
 * on a new connection; returns its socket, for the answer or a close. */
int h_raw_post(h_cluster *c, const char *path, const char *body);
int h_raw_acquire(h_cluster *c, const char *name, const char *body);
/* Closes fd with a reset (SO_LINGER 0), as a client killed with unread
 * data does: the connection fails at once, not just half of it. */
void h_raw_reset(int fd);
size_t h_raw_read_all(int fd, char *buf, size_t cap, int timeout_ms, bool *closed);

/* Does GET /locks/name say the lock is held? */
bool h_held(h_cluster *c, const char *name);

/* The sum of every sample of a metric family in /metrics, or with labels
 * (name{a="b"}) the one series' value; 0 when absent. The one reader of
 * /metrics for tests that want values (test_ops also checks its format). */
long long h_metric(h_cluster *c, const char *family);

/* The status of POST /locks/name with body (NULL: none). */
long h_acquire_status(h_cluster *c, const char *name, const char *body);

/* Lock keys of name on every master (a test asserts none is left). */
int h_keys_left(h_cluster *c, const char *name);

/* Load: n clients (threads), each with its own keep-alive connection,
 * that acquire what next() names (with its body, or none) and release
 * every grant by its token, until stop is set or the service refuses the
 * connection (it has gone). Every answer and every failure is counted. */
typedef struct h_loader h_loader;
struct h_loader {
    h_cluster *c;
    int id;                           /* 0..n-1, set by h_load_start */
    void (*next)(h_loader *l, char *name, size_t namelen, const char **body);
    char (*tokens)[24];               /* if set: the tokens of the grants received */
    int max_tokens, ntokens;
    atomic_bool stop;
    atomic_long sent, answered, five_xx, no_answer, refused;   /* acquires and releases */
    long last_5xx;
    char last_5xx_body[200];          /* of the last answer >= 500 */
    char last_body[200];              /* of the last answer */
    int last_error;                   /* CURLcode of the last request without an answer */
    long last_new_conn;               /* whether it had opened a new connection (1) */
};
/* Leases: n held streams ("hold": true) on one redlockd, each on a
 * connection of its own, driven by one poll loop in the calling thread. */
typedef struct h_leases {
    int n;
    int opened;                       /* streams asked for so far (pf[0..opened)) */
    int window;                       /* at most this many asked and not yet acquired */
    int port, ttl_ms;
    char prefix[64];
    struct pollfd *pf;                /* one per stream; fd < 0 once it closed */
    bool *acquired, *lost;            /* each stream's "acquired" and "lost" events seen */
    int got;                          /* streams that said "acquired" */
    int nlost;                        /* streams that said "lost" */
    int closed;                       /* streams the service closed */
} h_leases;
/* Opens n held streams of ttl_ms on 127.0.0.1:port, named prefix-0 ..
 * prefix-(n-1) (the caller raises RLIMIT_NOFILE first). */
h_leases *h_leases_open(int port, int n, int ttl_ms, const char *prefix);
/* The same as a client pool of window connections opens them: window at
 * once, then one more as each says "acquired" (h_leases_read asks them). */
h_leases *h_leases_open_window(int port, int n, int ttl_ms, const char *prefix, int window);
/* Reads the streams' events for up to ms (returns at the first quiet poll),
 * and asks for more streams while the window has room. */
void h_leases_read(h_leases *l, int ms);
/* Closes every stream and frees l. */
void h_leases_close(h_leases *l);

/* Starts l[0..n-1] (c, next and tokens set by the caller) on threads t. */
void h_load_start(h_loader *l, int n, pthread_t *t);
/* Stops them (unless they stopped themselves) and waits for them. */
void h_load_join(h_loader *l, int n, pthread_t *t);
long h_load_sum(const h_loader *l, int n, size_t counter_offset);
#define H_LOAD_SUM(l, n, field) h_load_sum(l, n, offsetof(h_loader, field))

/* Scripts (EVAL and EVALSHA) master i has run so far. */
long long h_script_calls(h_cluster *c, int i);

/* Waits up to timeout_ms for GET path to answer want; returns true if it did. */
bool h_wait_status(h_cluster *c, const char *path, long want, int timeout_ms);

/* Polls pred(arg) about every 10 ms until it holds or ms milliseconds
 * pass, instead of a sleep long enough for the slowest machine; returns
 * whether it held (the last poll is at or after the deadline). */
bool h_eventually(bool (*pred)(void *arg), void *arg, int ms);
/* Waits up to ms for master i to hold key (a grant answers once a
 * majority said yes: the other masters' replies may still be on their way). */
bool h_wait_key(h_cluster *c, int i, const char *key, int ms);
/* Waits up to ms for /readyz to report n masters voting. */
bool h_wait_voting(h_cluster *c, int n, int ms);

#endif
