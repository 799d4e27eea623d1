/* conf.c - see conf.h. */
#include "conf.h"
#include "conf_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum opt_kind { OPT_ADDR, OPT_MASTERS, OPT_STR, OPT_INT, OPT_DOUBLE, OPT_LEVEL,
                OPT_FORMAT, OPT_TOKEN_FILE, OPT_SECRET, OPT_ONOFF, OPT_STORES, OPT_CHOICE,
                OPT_FLAG, OPT_TEXT, OPT_ALLOW, OPT_LISTEN, OPT_MODE };

struct opt {
    const char *name;     /* flag without the leading dashes */
    enum opt_kind kind;
    long long min, max;   /* OPT_INT range; OPT_DOUBLE uses dmin/dmax */
    double dmin, dmax;
    const char *help;
};

static const struct opt opts[] = {
    {"listen", OPT_LISTEN, 0, 0, 0, 0,
     "ADDR:PORT to serve HTTP on, or unix:/PATH for a Unix socket; repeat it or separate with "
     "commas to serve several (default " CONF_DEFAULT_LISTEN ")"},
    {"listen-mode", OPT_MODE, 0, 0, 0, 0,
     "file mode of a unix: listener's socket (--listen, --dapr-grpc-listen), octal (default 0660: "
     "the user and group of redlockd)"},
    {"tls-cert-file", OPT_TEXT, 0, 0, 0, 0,
     "PEM certificate (chain) to serve HTTPS with on the TCP listeners (with --tls-key-file), and "
     "gRPC over TLS on a TCP --dapr-grpc-listen; SIGHUP reloads both (default: none, plain HTTP)"},
    {"tls-key-file", OPT_TEXT, 0, 0, 0, 0, "PEM private key of --tls-cert-file"},
    {"tls-client-ca-file", OPT_TEXT, 0, 0, 0, 0,
     "PEM CA certificates that HTTPS and gRPC-over-TLS clients' certificates must chain to: a "
     "certificate that does not fails the handshake, and a call without one is answered 401 "
     "(gRPC: UNAUTHENTICATED) (default: none asked)"},
    {"masters", OPT_MASTERS, 0, 0, 0, 0,
     "comma-separated host:port of the independent Redis masters (default the five local "
     "masters of scripts/run.sh: 127.0.0.1:6381..6385)"},
    {"key-prefix", OPT_STR, 0, CONF_MAX_KEY_PREFIX, 0, 0,
     "prefix of every Redis key (default \"lock:\"; empty gives the bare lock name)"},
    {"default-ttl-ms", OPT_INT, 1, INT32_MAX, 0, 0, "ttl_ms when a request gives none (default 30000)"},
    {"max-ttl-ms", OPT_INT, 1, INT32_MAX, 0, 0, "largest ttl_ms accepted (default 3600000)"},
    {"max-wait-ms", OPT_INT, 0, INT32_MAX, 0, 0, "largest wait_ms accepted (default 60000)"},
    {"master-timeout-ms", OPT_INT, 1, 60000, 0, 0, "per-master reply deadline (default 50)"},
    {"drift-factor", OPT_DOUBLE, 0, 0, 0.0, 0.5, "clock drift allowance as a fraction of ttl (default 0.01)"},
    {"retry-delay-ms", OPT_INT, 1, 60000, 0, 0,
     "base of the random delay between tries of a waiting acquire (default 100)"},
    {"threads", OPT_INT, 1, CONF_MAX_THREADS, 0, 0,
     "event loops, each with its own HTTP listener (SO_REUSEPORT) and master connections "
     "(default 1; one per CPU where the masters run elsewhere)"},
    {"max-body-bytes", OPT_INT, 64, CONF_MAX_BODY_LIMIT, 0, 0,
     "largest request body, at most 1 MiB (default 16384)"},
    {"connection-buffer-bytes", OPT_INT, 1536, 65536, 0, 0,
     "each HTTP connection's buffer, kept while it is open: a request head up to about 512 "
     "bytes less is read, longer is answered 431 (default 3072)"},
    {"max-connections", OPT_INT, 16, 1000000, 0, 0,
     "HTTP connections at once; about 4 KiB of memory each while open; the gRPC listener "
     "has as many of its own (default 1024)"},
    {"max-connections-per-ip", OPT_INT, 1, 1000000, 0, 0,
     "HTTP connections at once from one client address; gRPC ones are counted apart, to the "
     "same limit (default 512)"},
    {"request-timeout-ms", OPT_INT, 100, 3600000, 0, 0,
     "time a connection has, from its start or its last answer, to send a complete request; "
     "longer is closed (default 10000)"},
    {"max-waiters", OPT_INT, 1, 10000000, 0, 0,
     "acquires waiting for a held lock at once; more answer 429 too_many_waiters (default 10000)"},
    {"max-holds", OPT_INT, 1, 1000000, 0, 0,
     "held streams (\"hold\": true, campaigns) and election watches open at once; more answer 429 "
     "too_many_holds (default 1024)"},
    {"max-inflight", OPT_INT, 1, 1000000, 0, 0,
     "acquires, inspections, watches' reads and listings' pages sent to the masters at once "
     "(shared by the event loops); more wait their turn (default 64)"},
    {"queue-timeout-ms", OPT_INT, 1, 60000, 0, 0,
     "how long a request waits for its turn before it answers 503 overloaded (default 1000)"},
    {"auth-token-file", OPT_TOKEN_FILE, 0, 0, 0, 0,
     "file holding the bearer token every /locks call must send (default: no auth)"},
    {"admin-token-file", OPT_TOKEN_FILE, 0, 0, 0, 0,
     "file holding the bearer token of an operator's force release (DELETE ?force=true); "
     "without it force is refused (default: none)"},
    {"principals-file", OPT_TEXT, 0, 0, 0, 0,
     "file of principals, one a line: name, rights (read,lock,admin), name prefixes (or *), and "
     "sha256:<hex of its token> or cert; a caller is known by its token or client certificate, "
     "and may do only what its rights allow on names its prefixes start; SIGHUP reloads it "
     "(default: none)"},
    {"audit-log", OPT_TEXT, 0, 0, 0, 0,
     "file to append one JSON line to per grant, release, failed extension, force release, "
     "loss, election term and refusal, or - for stderr; SIGHUP reopens it (default: none)"},
    {"allow-origin", OPT_ALLOW, 0, 0, 0, 0,
     "an origin, http://HOST[:PORT] or https://HOST[:PORT], whose pages may call this service "
     "besides its own (http:// and the Host it was reached at); repeat it or separate with "
     "commas. A request with another Origin header is answered 403 forbidden_origin; one "
     "without (curl, SDKs) is served (default: none)"},
    {"allow-host", OPT_ALLOW, 0, 0, 0, 0,
     "a Host to serve besides localhost and the loopback addresses (a name or address, any "
     "port); repeat it or separate with commas. On a loopback --listen another Host is "
     "answered 403 forbidden_host (DNS rebinding); on another address every Host is served "
     "until this is given (default: none)"},
    {"redis-password", OPT_SECRET, 0, 0, 0, 0, "password sent with AUTH to every master (default: none)"},
    {"redis-username", OPT_TEXT, 0, 0, 0, 0,
     "Redis ACL user sent with AUTH user password (needs --redis-password; default: none, "
     "the default user)"},
    {"redis-tls", OPT_ONOFF, 0, 0, 0, 0,
     "on or off: TLS to every master, the certificate verified (default off; rediss://host:port "
     "in --masters turns it on for that master)"},
    {"redis-tls-ca-file", OPT_TEXT, 0, 0, 0, 0,
     "PEM file of the CA certificates that sign the masters' certificates (default: the "
     "system's trust store)"},
    {"redis-tls-cert-file", OPT_TEXT, 0, 0, 0, 0,
     "PEM client certificate (chain) for masters with tls-auth-clients yes (with "
     "--redis-tls-key-file; default: none)"},
    {"redis-tls-key-file", OPT_TEXT, 0, 0, 0, 0, "PEM private key of --redis-tls-cert-file"},
    {"redis-tls-server-name", OPT_TEXT, 0, 0, 0, 0,
     "the name (or IP address) every master's certificate must carry, also sent as SNI "
     "(default: each master's own host from --masters)"},
    {"quarantine", OPT_ONOFF, 0, 0, 0, 0,
     "on or off: keep a master seen to restart out of every vote until it has been up for "
     "--max-ttl-ms plus --fence-keep-ms plus drift (default on; off only with appendfsync "
     "always, see README)"},
    {"notify", OPT_ONOFF, 0, 0, 0, 0,
     "on or off: publish a notice on the masters when a lock is released and subscribe to them, "
     "so waiting acquires on every instance try at once (default on)"},
    {"fence-keep-ms", OPT_INT, 1, 3600000, 0, 0,
     "how long a name's fence counter outlives its lock; must exceed the largest clock "
     "difference between two masters, and lengthens restart quarantine (default 60000)"},
    {"cluster-setup", OPT_CHOICE, 0, 0, 0, 0,
     "auto or manual: auto marks a brand-new set of masters (no marker on any, every one "
     "answering) as a cluster by itself; manual never does, see --setup-cluster (default auto)"},
    {"unsafe-masters", OPT_CHOICE, 0, 0, 0, 0,
     "warn or refuse: what to do with a master that may lose locks (maxmemory-policy other "
     "than noeviction, or appendonly off); refuse keeps it out of every vote (default warn)"},
    {"dapr-stores", OPT_STORES, 0, 0, 0, 0,
     "comma-separated lock stores served on Dapr's lock API, each NAME or NAME=KEYPREFIX with "
     "daprd's keyPrefix: appid, name, none or a prefix of your own; resource R of store S is "
     "the lock APPID||R, S||R, R or PREFIX||R (default \"lockstore\"; keyPrefix appid with "
     "--dapr-app-id, else name; docs/deployment.md)"},
    {"dapr-app-id", OPT_TEXT, 0, 0, 0, 0,
     "the Dapr app id, for keyPrefix appid: up to 64 bytes of one word, without \"||\" "
     "(default: none)"},
    {"dapr-grpc-listen", OPT_ADDR, 0, 0, 0, 0,
     "ADDR:PORT to serve Dapr's lock API over gRPC on (TryLockAlpha1, UnlockAlpha1, "
     "GetMetadata; h2c, or TLS with ALPN h2 when --tls-cert-file is set), e.g. 127.0.0.1:50001, "
     "or unix:/PATH for a Unix socket (its mode from --listen-mode) (default: off)"},
    {"log-level", OPT_LEVEL, 0, 0, 0, 0, "error, warn, info or debug (default info)"},
    {"log-format", OPT_FORMAT, 0, 0, 0, 0, "json or text (default json)"},
    {"setup-cluster", OPT_FLAG, 0, 0, 0, 0,
     "mark the masters as one new cluster (every master must answer and none may hold a "
     "marker yet), print the result and exit; for --cluster-setup manual"},
    {"help", OPT_FLAG, 0, 0, 0, 0, "print this help and exit"},
    {"version", OPT_FLAG, 0, 0, 0, 0, "print the version and exit"},
    {"health-check", OPT_FLAG, 0, 0, 0, 0,
     "GET /healthz on the first TCP --listen address (0.0.0.0 or :: on loopback; over HTTPS, "
     "without checking the certificate, when --tls-cert-file is set), else on the first Unix "
     "socket, within 2 s; print one line, exit 0 on 200, else 1; for container and exec probes"},
};
#define NOPTS (sizeof opts / sizeof opts[0])

static void env_name(const char *flag, char *out, size_t outlen)
{
    size_t o = (size_t)snprintf(out, outlen, "REDLOCKD_");
    for (const char *p = flag; *p && o + 1 < outlen; p++)
        out[o++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[o] = '\0';
}

void conf_usage(FILE *out)
{
    fprintf(out,
            "usage: redlockd [flags]\n"
            "Serves distributed locks over HTTP, using the Redlock algorithm against N\n"
            "independent Redis masters. Every flag can also be set by the environment\n"
            "variable shown beside it; the flag wins.\n\n");
    for (size_t i = 0; i < NOPTS; i++) {
        char env[64];
        env_name(opts[i].name, env, sizeof env);
        if (opts[i].kind == OPT_FLAG)
            fprintf(out, "  --%-20s %s\n", opts[i].name, opts[i].help);
        else
            fprintf(out, "  --%-20s %s\n  %-22s   env %s\n", opts[i].name, opts[i].help, "", env);
    }
}

/* The string an OPT_TEXT option sets. */
static char **text_field(conf *c, const char *name)
{
    if (!strcmp(name, "redis-username")) return &c->redis_username;
    if (!strcmp(name, "dapr-app-id")) return &c->dapr_app_id;
    if (!strcmp(name, "redis-tls-ca-file")) return &c->redis_tls_ca_file;
    if (!strcmp(name, "redis-tls-cert-file")) return &c->redis_tls_cert_file;
    if (!strcmp(name, "redis-tls-key-file")) return &c->redis_tls_key_file;
    if (!strcmp(name, "principals-file")) return &c->principals_file;
    if (!strcmp(name, "audit-log")) return &c->audit_log;
    if (!strcmp(name, "tls-cert-file")) return &c->tls_cert_file;
    if (!strcmp(name, "tls-key-file")) return &c->tls_key_file;
    if (!strcmp(name, "tls-client-ca-file")) return &c->tls_client_ca_file;
    return &c->redis_tls_server_name;
}

/* Applies one option's value. from names the source for error messages. */
static int apply(conf *c, const struct opt *o, const char *val, const char *from,
                 char *err, size_t errlen)
{
    char *end;
    switch (o->kind) {
    case OPT_ADDR: {   /* --dapr-grpc-listen: one entry as --listen takes them */
        const char *why = NULL;
        if (conf_listen_entry(val, strlen(val), &c->dapr_grpc_listen, &why) < 0) {
            snprintf(err, errlen, "%s: %s: \"%.200s\"", from, why, val);
            return -1;
        }
        return 0;
    }
    case OPT_LISTEN:
        return conf_listen_add(c, from, val, err, errlen);
    case OPT_MODE:
        if (conf_listen_mode(val, &c->listen_mode) < 0)
            goto bad;
        return 0;
    case OPT_MASTERS:
        if (conf_parse_masters(val, c) < 0) {
            snprintf(err, errlen, "%s: expected 1 to %d host:port entries (or redis://host:port, "
                     "rediss://host:port for TLS) separated by commas, got \"%s\"",
                     from, CONF_MAX_MASTERS, val);
            return -1;
        }
        return 0;
    case OPT_STR:
        /* The name's own characters only: then no prefix and name can spell
         * an internal key (those hold RULES_SEP's control byte). */
        if (strlen(val) > (size_t)o->max || strspn(val, CONF_NAME_CHARS) != strlen(val)) {
            snprintf(err, errlen, "%s: at most %lld bytes of A-Z a-z 0-9 . _ : -, got \"%s\"", from,
                     o->max, val);
            return -1;
        }
        strcpy(c->key_prefix, val);
        return 0;
    case OPT_INT: {
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (errno || *end || end == val || v < o->min || v > o->max) {
            snprintf(err, errlen, "%s: expected a whole number from %lld to %lld, got \"%s\"", from,
                     o->min, o->max, val);
            return -1;
        }
        if (!strcmp(o->name, "default-ttl-ms")) c->default_ttl_ms = v;
        else if (!strcmp(o->name, "max-ttl-ms")) c->max_ttl_ms = v;
        else if (!strcmp(o->name, "max-wait-ms")) c->max_wait_ms = v;
        else if (!strcmp(o->name, "master-timeout-ms")) c->master_timeout_ms = v;
        else if (!strcmp(o->name, "retry-delay-ms")) c->retry_delay_ms = v;
        else if (!strcmp(o->name, "threads")) c->threads = (int)v;
        else if (!strcmp(o->name, "max-body-bytes")) c->max_body_bytes = v;
        else if (!strcmp(o->name, "connection-buffer-bytes")) c->connection_buffer_bytes = (int)v;
        else if (!strcmp(o->name, "fence-keep-ms")) c->fence_keep_ms = v;
        else if (!strcmp(o->name, "max-connections")) c->max_connections = (int)v;
        else if (!strcmp(o->name, "max-connections-per-ip")) c->max_connections_per_ip = (int)v;
        else if (!strcmp(o->name, "request-timeout-ms")) c->request_timeout_ms = v;
        else if (!strcmp(o->name, "max-waiters")) c->max_waiters = (int)v;
        else if (!strcmp(o->name, "max-holds")) c->max_holds = (int)v;
        else if (!strcmp(o->name, "max-inflight")) c->max_inflight = (int)v;
        else if (!strcmp(o->name, "queue-timeout-ms")) c->queue_timeout_ms = v;
        return 0;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (errno || *end || end == val || !isfinite(v) || v < o->dmin || v > o->dmax) {
            snprintf(err, errlen, "%s: expected a number from %g to %g, got \"%s\"", from, o->dmin,
                     o->dmax, val);
            return -1;
        }
        c->drift_factor = v;
        return 0;
    }
    case OPT_LEVEL:
        if (!strcmp(val, "error")) c->log_level = LOG_LEVEL_ERROR;
        else if (!strcmp(val, "warn")) c->log_level = LOG_LEVEL_WARN;
        else if (!strcmp(val, "info")) c->log_level = LOG_LEVEL_INFO;
        else if (!strcmp(val, "debug")) c->log_level = LOG_LEVEL_DEBUG;
        else goto bad;
        return 0;
    case OPT_FORMAT:
        if (!strcmp(val, "json")) c->log_format = LOG_FORMAT_JSON;
        else if (!strcmp(val, "text")) c->log_format = LOG_FORMAT_TEXT;
        else goto bad;
        return 0;
    case OPT_TOKEN_FILE: {
        char **field = !strcmp(o->name, "admin-token-file") ? &c->admin_token : &c->auth_token;
        if (*field)
            explicit_bzero(*field, strlen(*field));
        free(*field);
        *field = NULL;
        if (val[0] == '\0')
            return 0;   /* an empty setting turns it off */
        *field = conf_read_token_file(o->name, val, err, errlen);
        return *field ? 0 : -1;
    }
    case OPT_SECRET:
        free(c->redis_password);
        c->redis_password = val[0] ? strdup(val) : NULL;
        if (val[0] && !c->redis_password) {
            snprintf(err, errlen, "%s: out of memory", from);
            return -1;
        }
        return 0;
    case OPT_ONOFF: {
        bool v;
        if (!strcmp(val, "on") || !strcmp(val, "true") || !strcmp(val, "1")) v = true;
        else if (!strcmp(val, "off") || !strcmp(val, "false") || !strcmp(val, "0")) v = false;
        else goto bad;
        if (!strcmp(o->name, "quarantine")) c->quarantine = v;
        else if (!strcmp(o->name, "redis-tls")) c->redis_tls = v;
        else c->notify = v;
        return 0;
    }
    case OPT_CHOICE:
        if (!strcmp(o->name, "cluster-setup")) {
            if (!strcmp(val, "auto")) c->cluster_setup_manual = false;
            else if (!strcmp(val, "manual")) c->cluster_setup_manual = true;
            else goto bad;
        } else {
            if (!strcmp(val, "warn")) c->refuse_unsafe = false;
            else if (!strcmp(val, "refuse")) c->refuse_unsafe = true;
            else goto bad;
        }
        return 0;
    case OPT_STORES: {
        if (!conf_stores_valid(val)) {
            snprintf(err, errlen, "%s: expected comma-separated NAME or NAME=KEYPREFIX, each of 1 to %d "
                     "bytes of A-Z a-z 0-9 . _ - (a keyPrefix also : @ /), got \"%s\"",
                     from, CONF_DAPR_NAME_MAX, val);
            return -1;
        }
        strcpy(c->dapr_stores, val);
        return 0;
    }
    case OPT_TEXT: {
        char **field = text_field(c, o->name);
        free(*field);
        *field = NULL;
        if (val[0] == '\0')
            return 0;   /* an empty setting unsets it */
        /* A user or server name is one word; a path may be anything. */
        bool word = !strstr(o->name, "-file") && strcmp(o->name, "audit-log");
        for (const char *q = val; word && *q; q++)
            if (!isgraph((unsigned char)*q)) {
                snprintf(err, errlen, "%s: expected one word of printable ASCII, got \"%s\"", from, val);
                return -1;
            }
        if (!strcmp(o->name, "dapr-app-id") && (strlen(val) > CONF_DAPR_NAME_MAX || strstr(val, CONF_DAPR_SEP))) {
            snprintf(err, errlen, "%s: at most %d bytes, without \"" CONF_DAPR_SEP "\", got \"%s\"", from,
                     CONF_DAPR_NAME_MAX, val);
            return -1;
        }
        if (!(*field = strdup(val))) {
            snprintf(err, errlen, "%s: out of memory", from);
            return -1;
        }
        return 0;
    }
    case OPT_ALLOW: {
        bool origins = !strcmp(o->name, "allow-origin");
        char ***list = origins ? &c->allow_origins : &c->allow_hosts;
        int *n = origins ? &c->nallow_origins : &c->nallow_hosts;
        if (val[0] == '\0') {
            conf_free_allowed(list, n);   /* an empty setting: none */
            return 0;
        }
        return conf_parse_allowed(from, val, origins, list, n, err, errlen);
    }
    case OPT_FLAG:
        return 0;
    }
bad:
    snprintf(err, errlen, "%s: invalid value \"%s\"", from, val);
    return -1;
}

/* The settings of AUTH and TLS to the masters that only make sense
 * together; --redis-tls on applies to every master. */
static int check_redis_auth(conf *c, char *err, size_t errlen)
{
    if (c->redis_username && !c->redis_password) {
        snprintf(err, errlen, "--redis-username needs --redis-password (AUTH user password)");
        return -1;
    }
    if (!c->redis_tls_cert_file != !c->redis_tls_key_file) {
        snprintf(err, errlen, "%s needs %s too", c->redis_tls_cert_file ? "--redis-tls-cert-file"
                 : "--redis-tls-key-file", c->redis_tls_cert_file ? "--redis-tls-key-file"
                 : "--redis-tls-cert-file");
        return -1;
    }
    for (int i = 0; i < c->nmasters; i++)
        c->masters[i].tls |= c->redis_tls;
    return 0;
}

bool conf_tls_used(const conf *c)
{
    for (int i = 0; i < c->nmasters; i++)
        if (c->masters[i].tls)
            return true;
    return false;
}

static const struct opt *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
            return &opts[i];
    return NULL;
}

enum conf_result conf_parse(conf *c, int argc, char **argv, conf_getenv_fn env,
                            char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->listen_mode = CONF_DEFAULT_LISTEN_MODE;   /* (the listeners: conf_listen_check) */
    conf_parse_masters(CONF_DEFAULT_MASTERS, c);
    strcpy(c->key_prefix, CONF_DEFAULT_KEY_PREFIX);
    c->default_ttl_ms = CONF_DEFAULT_TTL_MS;
    c->max_ttl_ms = CONF_DEFAULT_MAX_TTL_MS;
    c->max_wait_ms = CONF_DEFAULT_MAX_WAIT_MS;
    c->master_timeout_ms = CONF_DEFAULT_MASTER_TIMEOUT_MS;
    c->drift_factor = CONF_DEFAULT_DRIFT_FACTOR;
    c->retry_delay_ms = CONF_DEFAULT_RETRY_DELAY_MS;
    c->fence_keep_ms = CONF_DEFAULT_FENCE_KEEP_MS;
    c->max_waiters = CONF_DEFAULT_MAX_WAITERS;
    c->max_holds = CONF_DEFAULT_MAX_HOLDS;
    c->max_inflight = CONF_DEFAULT_MAX_INFLIGHT;
    c->queue_timeout_ms = CONF_DEFAULT_QUEUE_TIMEOUT_MS;
    c->max_connections = CONF_DEFAULT_MAX_CONNECTIONS;
    c->max_connections_per_ip = CONF_DEFAULT_MAX_CONNECTIONS_PER_IP;
    c->request_timeout_ms = CONF_DEFAULT_REQUEST_TIMEOUT_MS;
    /* One event loop: a second one only helps where it has a core of its
     * own; beside masters on the same cores it makes their votes late
     * (docs/design.md, "Event loops"). Hosts whose masters run elsewhere
     * should set one per CPU. */
    c->threads = 1;
    c->max_body_bytes = CONF_DEFAULT_MAX_BODY_BYTES;
    c->connection_buffer_bytes = CONF_DEFAULT_CONNECTION_BUFFER_BYTES;
    c->quarantine = true;
    c->notify = true;
    strcpy(c->dapr_stores, CONF_DEFAULT_DAPR_STORES);
    c->log_level = LOG_LEVEL_INFO;
    c->log_format = LOG_FORMAT_JSON;

    for (size_t i = 0; env && i < NOPTS; i++) {
        if (opts[i].kind == OPT_FLAG)
            continue;
        char name[64];
        env_name(opts[i].name, name, sizeof name);
        const char *val = env(name);
        if (val && apply(c, &opts[i], val, name, err, errlen) < 0)
            return CONF_ERROR;
    }

    enum conf_result result = CONF_OK;
    bool origin_flag = false, host_flag = false, listen_flag = false;   /* a flag given: the variable's
                                                                          entries go */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", arg);
            return CONF_ERROR;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t namelen = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = find_opt(name, namelen);
        if (!o) {
            snprintf(err, errlen, "unknown flag \"%.*s\" (see --help)", (int)(namelen + 2), arg);
            return CONF_ERROR;
        }
        char from[64];
        snprintf(from, sizeof from, "--%s", o->name);
        if (o->kind == OPT_FLAG) {
            if (eq) {
                snprintf(err, errlen, "%s takes no value", from);
                return CONF_ERROR;
            }
            if (!strcmp(o->name, "setup-cluster")) {
                c->setup_cluster = true;
                continue;
            }
            if (result == CONF_OK)
                result = !strcmp(o->name, "help")           ? CONF_HELP
                         : !strcmp(o->name, "health-check") ? CONF_HEALTH_CHECK
                                                            : CONF_VERSION;
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "%s needs a value", from);
                return CONF_ERROR;
            }
            val = argv[++i];
        }
        if (o->kind == OPT_ALLOW) {
            bool origins = !strcmp(o->name, "allow-origin");
            bool *seen = origins ? &origin_flag : &host_flag;
            if (!*seen)
                conf_free_allowed(origins ? &c->allow_origins : &c->allow_hosts,
                             origins ? &c->nallow_origins : &c->nallow_hosts);
            *seen = true;
        }
        if (o->kind == OPT_LISTEN && !listen_flag) {
            c->nlisten = 0;
            listen_flag = true;
        }
        if (apply(c, o, val, from, err, errlen) < 0)
            return CONF_ERROR;
    }
    /* (the probe asks the listeners too: which one, and over TLS or not) */
    if ((result == CONF_OK || result == CONF_HEALTH_CHECK) && conf_listen_check(c, err, errlen) < 0)
        return CONF_ERROR;
    if (result != CONF_OK)
        return result;

    if (check_redis_auth(c, err, errlen) < 0)
        return CONF_ERROR;
    /* Every client with the ordinary token could force releases. */
    if (c->admin_token && c->auth_token && !strcmp(c->admin_token, c->auth_token)) {
        snprintf(err, errlen, "--admin-token-file holds the same token as --auth-token-file: an "
                 "operator's force release needs a token of its own");
        return CONF_ERROR;
    }
    if (c->default_ttl_ms > c->max_ttl_ms) {
        snprintf(err, errlen, "--default-ttl-ms (%lld) is above --max-ttl-ms (%lld)",
                 c->default_ttl_ms, c->max_ttl_ms);
        return CONF_ERROR;
    }
    return CONF_OK;
}

void conf_free(conf *c)
{
    if (c->auth_token) {
        explicit_bzero(c->auth_token, strlen(c->auth_token));
        free(c->auth_token);
    }
    if (c->admin_token) {
        explicit_bzero(c->admin_token, strlen(c->admin_token));
        free(c->admin_token);
    }
    c->admin_token = NULL;
    if (c->redis_password) {
        explicit_bzero(c->redis_password, strlen(c->redis_password));
        free(c->redis_password);
    }
    c->auth_token = c->redis_password = NULL;
    free(c->redis_username);
    free(c->dapr_app_id);
    c->dapr_app_id = NULL;
    free(c->redis_tls_ca_file);
    free(c->redis_tls_cert_file);
    free(c->redis_tls_key_file);
    free(c->redis_tls_server_name);
    free(c->principals_file);
    free(c->audit_log);
    free(c->tls_cert_file);
    free(c->tls_key_file);
    free(c->tls_client_ca_file);
    c->tls_cert_file = c->tls_key_file = c->tls_client_ca_file = NULL;
    c->redis_username = c->redis_tls_ca_file = c->redis_tls_cert_file = c->redis_tls_key_file =
        c->redis_tls_server_name = c->principals_file = c->audit_log = NULL;
    conf_free_allowed(&c->allow_origins, &c->nallow_origins);
    conf_free_allowed(&c->allow_hosts, &c->nallow_hosts);
}

void conf_masters_str(const conf *c, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < c->nmasters && o < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, "%s%s%s:%d", i ? "," : "",
                              c->masters[i].tls ? "rediss://" : "", c->masters[i].host,
                              c->masters[i].port);
}
