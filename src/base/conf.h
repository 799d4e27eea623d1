/* conf.h - configuration: defaults, command-line flags, REDLOCKD_* variables.
 *
 * Every flag --foo-bar may also be given as the environment variable
 * REDLOCKD_FOO_BAR; the flag wins. conf_parse is pure apart from reading the
 * auth token file, and takes the environment as a function so the unit tests
 * can feed it. The conf owns its strings; conf_free releases them.
 */
#ifndef RL_CONF_H
#define RL_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CONF_DEFAULT_LISTEN "127.0.0.1:8080"
#define CONF_MAX_LISTEN 8              /* --listen entries */
#define CONF_UNIX_PATH_MAX 107         /* a Unix socket's path: sun_path less its NUL */
#define CONF_DEFAULT_LISTEN_MODE 0660  /* --listen-mode: a Unix socket's file mode */
#define CONF_DEFAULT_MASTERS \
    "127.0.0.1:6381,127.0.0.1:6382,127.0.0.1:6383,127.0.0.1:6384,127.0.0.1:6385"
#define CONF_DEFAULT_KEY_PREFIX "lock:"
#define CONF_DEFAULT_TTL_MS 30000
#define CONF_DEFAULT_MAX_TTL_MS 3600000
#define CONF_DEFAULT_MAX_WAIT_MS 60000
#define CONF_DEFAULT_MASTER_TIMEOUT_MS 50
#define CONF_DEFAULT_DRIFT_FACTOR 0.01
#define CONF_DEFAULT_RETRY_DELAY_MS 100
#define CONF_DEFAULT_MAX_BODY_BYTES 16384
#define CONF_DEFAULT_FENCE_KEEP_MS 60000
#define CONF_MAX_BODY_LIMIT (1024 * 1024)  /* a larger body's parse costs too much memory */
/* libmicrohttpd's buffer per connection (its memory pool): a request's head
 * and the answer's head and chunks. Allocated in full for every connection
 * and kept while it is open, a held stream's too: 8 KiB made a lease cost
 * 14 KiB of RSS, 3 KiB makes it 5.5 (10,000 leases in 64 MiB). A head up to
 * the buffer less about 512 bytes is read; a longer one is answered 431 by
 * the library. */
#define CONF_DEFAULT_CONNECTION_BUFFER_BYTES 3072
#define CONF_DEFAULT_MAX_WAITERS 10000
#define CONF_DEFAULT_MAX_HOLDS 1024
#define CONF_DEFAULT_MAX_INFLIGHT 64
#define CONF_DEFAULT_QUEUE_TIMEOUT_MS 1000
#define CONF_MAX_THREADS 64   /* --threads; also the most the default takes */
#define CONF_DEFAULT_MAX_CONNECTIONS 1024
#define CONF_DEFAULT_MAX_CONNECTIONS_PER_IP 512
#define CONF_DEFAULT_REQUEST_TIMEOUT_MS 10000
/* The bytes of a lock name (API.md), and so of a key prefix. */
#define CONF_NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
#define CONF_MAX_MASTERS 15
#define CONF_MAX_KEY_PREFIX 100
#define CONF_MAX_AUTH_TOKEN 4096
#define CONF_DEFAULT_DAPR_STORES "lockstore"
#define CONF_MAX_DAPR_STORES 255
#define CONF_DAPR_NAME_MAX 64   /* bytes of a Dapr store name, keyPrefix or app id */
#define CONF_DAPR_SEP "||"      /* daprd's, between a lock key's prefix and its resourceId */
#define CONF_MAX_ALLOWED 64     /* entries of --allow-origin, and of --allow-host */
#define CONF_HOST_MAX 255       /* bytes of a host name (DNS: 253), or of [an IPv6 address] */
#define CONF_ORIGIN_MAX (8 + CONF_HOST_MAX + 6)   /* "https://" host ":65535" */

enum conf_log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
enum conf_log_format { LOG_FORMAT_JSON, LOG_FORMAT_TEXT };

typedef struct conf_addr {
    char host[256];                /* a Unix socket's path when unix_socket */
    int port;                      /* 0 for a Unix socket */
    bool tls;                      /* masters: rediss://, or --redis-tls on; a listener: HTTPS,
                                      or gRPC over TLS (a TCP one, with --tls-cert-file) */
    bool unix_socket;              /* a listener: unix:PATH */
} conf_addr;

typedef struct conf {
    conf_addr listen[CONF_MAX_LISTEN]; /* --listen, in the order given (at least one) */
    int nlisten;
    int listen_mode;               /* --listen-mode: the file mode of a Unix listener's socket */
    char *tls_cert_file;           /* --tls-cert-file: PEM certificate (chain) of the HTTPS
                                      listeners; NULL: plain HTTP */
    char *tls_key_file;            /* --tls-key-file: its PEM private key */
    char *tls_client_ca_file;      /* --tls-client-ca-file: PEM CA a client certificate must
                                      chain to; NULL: none asked */
    int nmasters;
    conf_addr masters[CONF_MAX_MASTERS];
    char key_prefix[CONF_MAX_KEY_PREFIX + 1];
    long long default_ttl_ms;
    long long max_ttl_ms;
    long long max_wait_ms;
    long long master_timeout_ms;   /* per-master reply deadline */
    double drift_factor;
    long long retry_delay_ms;      /* base of the random retry delay */
    int threads;                   /* event loops (HTTP + masters each) */
    long long max_body_bytes;
    int connection_buffer_bytes;   /* libmicrohttpd's pool per connection */
    char *auth_token;              /* NULL: no auth; read from auth_token_file */
    char *admin_token;             /* --admin-token-file; NULL: force release refused */
    char *principals_file;         /* --principals-file (principals.h); NULL: none */
    char *audit_log;               /* --audit-log: a path, or "-" for stderr; NULL: none */
    char *redis_password;          /* NULL: no AUTH to masters */
    char *redis_username;          /* NULL: AUTH with the password alone (the default user) */
    bool redis_tls;                /* --redis-tls on: TLS to every master */
    char *redis_tls_ca_file;       /* NULL: the system's trust store */
    char *redis_tls_cert_file;     /* client certificate (with its key), NULL: none */
    char *redis_tls_key_file;
    char *redis_tls_server_name;   /* NULL: check each master's own host */
    bool quarantine;               /* restart quarantine (quarantine.h) */
    bool notify;                   /* release notices by Redis pub/sub */
    long long fence_keep_ms;       /* a fence counter outlives its lock by this much */
    int max_waiters;               /* acquires asleep at once */
    int max_holds;                 /* held streams open at once */
    int max_inflight;              /* acquires and inspections trying at once, all loops */
    long long queue_timeout_ms;    /* a request's wait for a place among those */
    int max_connections;           /* HTTP connections at once; gRPC's, counted apart */
    int max_connections_per_ip;    /* the same from one client address */
    long long request_timeout_ms;  /* from connect (or the last answer) to a complete request */
    bool cluster_setup_manual;     /* never mark a brand-new cluster by itself */
    bool refuse_unsafe;            /* masters that may lose locks do not vote */
    bool setup_cluster;            /* --setup-cluster: mark the cluster and exit */
    char dapr_stores[CONF_MAX_DAPR_STORES + 1]; /* Dapr lock stores: NAME[=KEYPREFIX], comma-separated */
    char *dapr_app_id;             /* the app's id, for keyPrefix "appid"; NULL: none */
    conf_addr dapr_grpc_listen;    /* Dapr's gRPC API (grpc.h), TCP or a Unix socket; off
                                      unless conf_grpc_on */
    char **allow_origins;          /* --allow-origin, each in conf_origin_norm's form */
    int nallow_origins;
    char **allow_hosts;            /* --allow-host, each in conf_host_norm's form */
    int nallow_hosts;
    enum conf_log_level log_level;
    enum conf_log_format log_format;
} conf;

enum conf_result {
    CONF_OK = 0,
    CONF_HELP = 1,     /* --help given: print conf_usage, exit 0 */
    CONF_VERSION = 2,  /* --version given */
    CONF_HEALTH_CHECK = 3, /* --health-check given: healthcheck_run, exit with its status */
    CONF_ERROR = -1,   /* err holds one line; exit 2 */
};

typedef const char *(*conf_getenv_fn)(const char *name);

/* Fills c from defaults, then env, then argv. On CONF_ERROR err holds a
 * one-line reason naming the flag. c must be conf_free'd on any result. */
enum conf_result conf_parse(conf *c, int argc, char **argv, conf_getenv_fn env,
                            char *err, size_t errlen);

void conf_free(conf *c);

/* Writes the --help text: every flag, its variable and default. */
void conf_usage(FILE *out);

/* True when some master is reached over TLS. */
bool conf_tls_used(const conf *c);

/* Masters as "host:port,host:port" for logs. */
void conf_masters_str(const conf *c, char *out, size_t outlen);

/* The listeners as "127.0.0.1:8443 (https),unix:/run/redlockd.sock" for
 * logs (conf_listen.c). */
void conf_listen_str(const conf *c, char *out, size_t outlen);
/* One listener as "127.0.0.1:50001 (tls_word)", "[::1]:50001" or
 * "unix:/run/r.sock" (tls_word only when a->tls). Returns what snprintf
 * would have written. */
size_t conf_addr_str(const conf_addr *a, const char *tls_word, char *out, size_t outlen);
/* Is Dapr's gRPC API served (--dapr-grpc-listen, TCP or a Unix socket)? */
bool conf_grpc_on(const conf *c);

/* Who may call the HTTP front from a browser (--allow-origin, --allow-host,
 * and the Host and Origin headers they are compared with: front/api.h's
 * api_origin_verdict). Pure. */

/* The host of s (len bytes): a DNS name (A-Z a-z 0-9 . - _), an IPv4
 * address or an IPv6 address in brackets, then ":PORT" when port is not
 * NULL (*port the number, or -1 when none is given). Into out (cap bytes)
 * lowercased, without the port, so that equal hosts compare equal as
 * strings. Returns 0, or -1 when s is not one (a port where port is NULL,
 * a port that is not 1 to 65535, a user part, a path, an empty host). */
int conf_host_norm(const char *s, size_t len, char *out, size_t cap, int *port);

/* An origin as a browser writes it in Origin: "http://" or "https://", a
 * host as conf_host_norm reads it, an optional ":PORT", nothing after. Into
 * out (cap bytes) lowercased and without its scheme's default port (80,
 * 443). Returns 0, or -1 when s (len bytes) is not one ("null" among them). */
int conf_origin_norm(const char *s, size_t len, char *out, size_t cap);

/* Is host (conf_host_norm's form, or --listen's, whose IPv6 address has no
 * brackets) "localhost" or a loopback address: 127.0.0.0/8, ::1, or ::1's
 * IPv4-mapped 127.0.0.0/8? Other spellings (127.1, 2130706433) are not. */
bool conf_host_loopback(const char *host);

#endif
