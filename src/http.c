/* http.c - see http.h. */
#include "http.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <unistd.h>
#include <microhttpd.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "api.h"
#include "deadline.h"
#include "hold.h"
#include "log.h"

#define HTTP_IDLE_TIMEOUT_S 60
#define HTTP_CONNECTION_MEMORY 16384
#define HTTP_WATCH_INTERVAL_MS 100   /* how often gone clients and slow requests are looked for */
#define HTTP_TRIM_AFTER_CLOSES 256   /* return freed connection memory to the system */

/* One connection, from libmicrohttpd's start notice to its close notice.
 * Every field is guarded by the server's reg_lock. */
typedef struct conn_info {
    struct conn_info *prev, *next;
    int fd;
    uint64_t phase_start_us;    /* connect, or the end of the last request */
    bool busy;                  /* a complete request is being served */
    bool shut;                  /* closed for --request-timeout-ms */
    struct req_ctx *suspended;  /* the request waiting for the engine, if any */
} conn_info;

/* The server's threads: libmicrohttpd's pool (requests), the engine's loop
 * (lock_done), and the watcher (gone clients, slow requests). The registry
 * of connections is shared by all three under reg_lock; libmicrohttpd is
 * never called with reg_lock held (its own locks call back into ours). */
struct http_server {
    struct MHD_Daemon *daemon;
    const conf *cfg;
    rl_engine *engine;
    mpool *pool;
    metrics *m;
    hold_set *holds;            /* held streams; wakes resume their connections */
    api_limits limits;
    atomic_bool quiescing;      /* SIGTERM seen: no new connections */

    pthread_mutex_t reg_lock;
    pthread_cond_t reg_cond;    /* signalled when a request completes */
    conn_info *conns;
    int nrequests;              /* requests whose headers arrived and that have not completed:
                                   the shutdown waits for them */
    int closed_since_trim;
    pthread_t watcher;
    bool watching;
    atomic_bool stop_watch;
};

typedef struct req_ctx {
    http_server *s;
    struct MHD_Connection *conn;
    conn_info *ci;
    atomic_int refs;          /* libmicrohttpd's, and the engine's until lock_done */
    rl_handle *h;             /* the engine's request, until rl_finish */
    bool susp;                /* suspended for the engine (reg_lock) */
    bool gone;                /* the client went away before the answer (reg_lock) */
    bool forced;              /* answered 503 by a shutdown before the engine answered */
    bool close;               /* answer with Connection: close */
    uint64_t start_us;
    enum api_route route;
    enum metrics_route mroute;
    char *body;
    size_t body_len;
    bool too_large;
    bool answered;            /* a response was queued */
    bool submitted;           /* handed to the engine, connection suspended */
    bool dapr;                /* answer in Dapr's wire format */
    bool hold_reserved;       /* a place in s->holds is reserved for this acquire */
    hold *hold;               /* the held stream this request became, until on_completed */
    atomic_bool result_ready;
    rl_request req;
    rl_result res;
} req_ctx;

/* ---- answers ---- */

static enum MHD_Result send_body(req_ctx *ctx, int status, char *body, const char *allow,
                                 long long retry_after_s, bool json)
{
    struct MHD_Response *r;
    if (body)
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    else
        r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (body)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                json ? "application/json" : "text/plain; version=0.0.4");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (retry_after_s > 0) {
        char v[24];
        snprintf(v, sizeof v, "%lld", retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    /* Stopping: serve what arrives on open connections, then close them so
     * clients move on to another instance instead of meeting a 503. */
    if (atomic_load(&ctx->s->quiescing) || ctx->close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(ctx->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    ctx->answered = true;
    metrics_request(ctx->s->m, ctx->mroute, status, mpool_now_us() - ctx->start_us);
    return rc;
}

static enum MHD_Result send_error(req_ctx *ctx, enum api_err e, const char *message,
                                  const char *allow)
{
    return send_body(ctx, api_errors[e].status, api_error_json(e, message), allow, 0, true);
}

/* ---- operational routes ---- */

static enum MHD_Result serve_readyz(req_ctx *ctx)
{
    mpool *p = ctx->s->pool;
    int n = mpool_size(p), up = 0, voting = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "masters") : NULL;
    for (int i = 0; arr && i < n; i++) {
        master_status st;
        mpool_status(p, i, &st);
        up += st.up;
        voting += st.up && !st.quarantined;
        cJSON *mo = cJSON_CreateObject();
        if (!mo)
            break;
        cJSON_AddStringToObject(mo, "addr", st.addr);
        cJSON_AddBoolToObject(mo, "up", st.up);
        cJSON_AddBoolToObject(mo, "quarantined", st.quarantined);
        cJSON_AddBoolToObject(mo, "notices", st.subscribed);
        if (st.quarantined)
            cJSON_AddNumberToObject(mo, "quarantine_left_ms", (double)st.quarantine_left_ms);
        static const char *const markers[] = {"unknown", "missing", "pending", "ready"};
        static const char *const persist[] = {"unknown", "off", "always", "everysec", "no"};
        cJSON_AddStringToObject(mo, "marker", markers[st.marker + 1]);
        cJSON_AddStringToObject(mo, "persistence", persist[st.persistence]);
        cJSON_AddStringToObject(mo, "maxmemory_policy", st.policy[0] ? st.policy : "unknown");
        cJSON_AddBoolToObject(mo, "may_lose_locks", st.may_lose_locks);
        cJSON_AddItemToArray(arr, mo);
    }
    if (!arr) {
        cJSON_Delete(o);
        return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    }
    /* Ready when a majority can vote: quarantined masters answer but do not count. */
    bool ready = voting >= n / 2 + 1;
    cJSON_AddStringToObject(o, "status", ready ? "ready" : "not_ready");
    cJSON_AddNumberToObject(o, "masters_up", up);
    cJSON_AddNumberToObject(o, "masters_voting", voting);
    cJSON_AddNumberToObject(o, "masters_total", n);
    cJSON_AddNumberToObject(o, "quorum", n / 2 + 1);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_body(ctx, ready ? 200 : 503, body, NULL, 0, true);
}

/* The per-master families of /metrics: one sample per master each. */
static const struct {
    const char *name, *type, *help;
} master_families[] = {
    {"redlockd_master_up", "gauge", "1 while the master answers PING on its connection."},
    {"redlockd_master_errors_total", "counter", "Connections to the master lost, refused or timed out."},
    {"redlockd_master_quarantined", "gauge", "1 while the master is in restart quarantine (its votes do not count)."},
    {"redlockd_master_restarts_total", "counter", "Restarts of the master seen (its run_id changed)."},
    {"redlockd_master_notices_up", "gauge", "1 while subscribed to the master's release notices."},
    {"redlockd_master_may_lose_locks", "gauge",
     "1 while the master may lose locks: maxmemory-policy other than noeviction, or appendonly off."},
};

static unsigned long long master_family_value(const master_status *st, size_t family)
{
    switch (family) {
    case 0: return st->up;
    case 1: return st->errors;
    case 2: return st->quarantined;
    case 3: return st->restarts;
    case 4: return st->subscribed;
    default: return st->may_lose_locks;
    }
}

static enum MHD_Result serve_metrics(req_ctx *ctx)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = metrics_render(ctx->s->m, &buf, &len, &cap);
    mpool *p = ctx->s->pool;
    int n = mpool_size(p);
    master_status st[MASTER_MAX];
    for (int i = 0; i < n; i++)
        mpool_status(p, i, &st[i]);
    for (size_t f = 0; f < sizeof master_families / sizeof master_families[0]; f++) {
        rc |= metrics_appendf(&buf, &len, &cap, "# HELP %s %s\n# TYPE %s %s\n", master_families[f].name,
                              master_families[f].help, master_families[f].name, master_families[f].type);
        for (int i = 0; i < n; i++)
            rc |= metrics_appendf(&buf, &len, &cap, "%s{master=\"%s\"} %llu\n", master_families[f].name,
                                  st[i].addr, master_family_value(&st[i], f));
    }
    rc |= metrics_appendf(&buf, &len, &cap,
                          "# HELP redlockd_master_reply_seconds Time from sending a command to its reply.\n"
                          "# TYPE redlockd_master_reply_seconds summary\n");
    for (int i = 0; i < n; i++)
        rc |= metrics_appendf(&buf, &len, &cap,
                              "redlockd_master_reply_seconds_sum{master=\"%s\"} %.6f\n"
                              "redlockd_master_reply_seconds_count{master=\"%s\"} %llu\n",
                              st[i].addr, (double)st[i].reply_us_sum / 1e6, st[i].addr, st[i].replies);
    if (rc) {
        free(buf);
        return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    }
    return send_body(ctx, 200, buf, NULL, 0, false);
}

/* ---- lock routes ---- */

/* The configured token, from Authorization: Bearer, or on the Dapr routes
 * also from dapr-api-token (as Dapr SDKs send it). */
static bool authorized(req_ctx *ctx, bool dapr)
{
    const char *want = ctx->s->cfg->auth_token;
    if (!want)
        return true;
    const char *got = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_AUTHORIZATION);
    if (got && strncasecmp(got, "Bearer ", 7) == 0)   /* the scheme is case-insensitive */
        got += 7;
    else
        got = dapr ? MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "dapr-api-token") : NULL;
    if (!got)
        return false;
    size_t wl = strlen(want), gl = strlen(got);
    /* Compare in time that depends on the secret's length only. */
    unsigned char diff = (unsigned char)(wl != gl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

static void ctx_unref(req_ctx *ctx)
{
    if (atomic_fetch_sub(&ctx->refs, 1) == 1) {
        free(ctx->body);
        free(ctx);
    }
}

/* Takes ctx out of its suspension with result res (once, whoever comes
 * first: the engine's answer, or a shutdown that could not wait for it) and
 * resumes the connection. Returns false when it was no longer suspended:
 * res is then not the one answered. */
static bool ctx_resume(req_ctx *ctx, const rl_result *res)
{
    http_server *s = ctx->s;
    pthread_mutex_lock(&s->reg_lock);
    bool was = ctx->susp;
    if (was) {
        ctx->res = *res;
        atomic_store(&ctx->result_ready, true);
        ctx->susp = false;
        if (ctx->ci)
            ctx->ci->suspended = NULL;
    }
    pthread_mutex_unlock(&s->reg_lock);
    if (was)
        MHD_resume_connection(ctx->conn);
    return was;
}

/* Engine callback, on the loop thread. */
static void lock_done(void *arg, const rl_result *res)
{
    req_ctx *ctx = arg;
    if (ctx->req.op == RL_RELEASE && res->outcome == RL_OK && !ctx->dapr)
        hold_released(ctx->s->holds, ctx->req.name, ctx->req.token);
    ctx_resume(ctx, res);   /* when a shutdown answered first, rl_finish releases a grant */
    ctx_unref(ctx);
}

/* Takes ctx out of its suspension as the registry sees it (the watcher and
 * the shutdown look there). Returns whether it was suspended: whoever gets
 * true owns the matching MHD_resume_connection. */
static bool ctx_unsuspend(req_ctx *ctx)
{
    http_server *s = ctx->s;
    pthread_mutex_lock(&s->reg_lock);
    bool was = ctx->susp;
    ctx->susp = false;
    if (ctx->ci)
        ctx->ci->suspended = NULL;
    pthread_mutex_unlock(&s->reg_lock);
    return was;
}

/* A hold has something to read: resume its connection if it is suspended
 * waiting for that (called with the hold set's mutex held; never after
 * hold_close). */
static void hold_wake(void *arg)
{
    req_ctx *ctx = arg;
    if (ctx_unsuspend(ctx))
        MHD_resume_connection(ctx->conn);
}

/* libmicrohttpd asks for the next part of a held stream. With nothing to
 * send, the connection is suspended until hold_wake (or the watcher, when
 * the client leaves) resumes it: suspended before the hold is asked, so a
 * wake between the two is never lost. */
static ssize_t hold_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    req_ctx *ctx = cls;
    http_server *s = ctx->s;
    (void)pos;
    if (ctx->gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;   /* the client left: close */
    pthread_mutex_lock(&s->reg_lock);
    ctx->susp = true;
    if (ctx->ci)
        ctx->ci->suspended = ctx;
    pthread_mutex_unlock(&s->reg_lock);
    long n = hold_read(ctx->hold, buf, max);
    if (n != 0) {
        /* A wake came in between and resumed ahead of the suspension:
         * this suspension takes that resume back (libmicrohttpd pairs them). */
        if (!ctx_unsuspend(ctx))
            MHD_suspend_connection(ctx->conn);
        return n > 0 ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
    }
    MHD_suspend_connection(ctx->conn);
    return 0;
}

/* A granted acquire with "hold": a 201 whose body is the held stream. */
static enum MHD_Result hold_answer(req_ctx *ctx)
{
    http_server *s = ctx->s;
    ctx->hold = hold_start(s->holds, s->engine, &ctx->req, &ctx->res, ctx->start_us, hold_wake, ctx);
    if (!ctx->hold) {
        /* Stopping (or out of memory): the grant is not delivered, so
         * rl_finish releases it. */
        ctx->forced = true;
        return send_error(ctx, atomic_load(&s->quiescing) ? API_E_SHUTTING_DOWN : API_E_INTERNAL,
                          atomic_load(&s->quiescing) ? "the service is shutting down"
                                                     : "out of memory", NULL);
    }
    ctx->hold_reserved = false;   /* the reservation is the hold now */
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, hold_reader,
                                                               ctx, NULL);
    if (!r)
        return MHD_NO;   /* on_completed closes the hold, which releases */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(ctx->conn, 201, r);
    MHD_destroy_response(r);
    ctx->answered = true;
    metrics_request(s->m, ctx->mroute, 201, mpool_now_us() - ctx->start_us);
    return rc;
}

/* Has the client closed (or half-closed) its side? Then an answer cannot
 * reach it, or will not be read. */
static bool client_gone(int fd)
{
    struct pollfd pfd = {fd, POLLRDHUP, 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result lock_answer(req_ctx *ctx)
{
    int status;
    long long retry_after_s = 0;
    /* A grant nobody will read is not sent: on_completed releases it. */
    if (ctx->res.outcome == RL_CANCELLED ||
        (ctx->res.outcome == RL_OK && ctx->req.op == RL_ACQUIRE && ctx->ci && client_gone(ctx->ci->fd))) {
        ctx->gone = true;
        return MHD_NO;
    }
    if (ctx->req.hold && ctx->res.outcome == RL_OK)
        return hold_answer(ctx);
    if (ctx->dapr) {
        char *body = api_dapr_result_json(ctx->req.op == RL_RELEASE, &ctx->res, &status);
        if (!body)
            return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
        return send_body(ctx, status, body, NULL, 0, true);
    }
    char *body = api_result_json(&ctx->req, &ctx->res, &status, &retry_after_s);
    if (!body && status != 204)
        return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return send_body(ctx, status, body, NULL, retry_after_s, true);
}

/* Hands ctx->req to the engine; lock_done resumes the connection. */
static enum MHD_Result submit(req_ctx *ctx)
{
    http_server *s = ctx->s;
    /* Suspend before submitting: the engine may answer (and resume) at once. */
    pthread_mutex_lock(&s->reg_lock);
    ctx->susp = true;
    if (ctx->ci)
        ctx->ci->suspended = ctx;
    pthread_mutex_unlock(&s->reg_lock);
    MHD_suspend_connection(ctx->conn);
    ctx->submitted = true;
    metrics_inflight(s->m, 1);
    atomic_fetch_add(&ctx->refs, 1);   /* the engine's, until lock_done */
    rl_handle *h = NULL;
    if (rl_submit(s->engine, &ctx->req, lock_done, ctx, &h) < 0) {
        atomic_fetch_sub(&ctx->refs, 1);
        rl_result down = {.outcome = RL_SHUTTING_DOWN};
        ctx_resume(ctx, &down);
        return MHD_YES;
    }
    pthread_mutex_lock(&s->reg_lock);
    ctx->h = h;   /* from now on the watcher may cancel it */
    pthread_mutex_unlock(&s->reg_lock);
    return MHD_YES;
}

static enum MHD_Result lock_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    if (!api_name_valid(name, strlen(name)))
        return send_error(ctx, API_E_BAD_NAME,
                          "the lock name must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -", NULL);
    enum rl_op op = api_op_of(method);
    enum api_err err;
    char msg[160];
    bool token_in_body;
    memset(&ctx->req, 0, sizeof ctx->req);
    if (api_parse_body(op, ctx->body ? ctx->body : "", ctx->body_len, &s->limits, &ctx->req,
                       &token_in_body, &err, msg, sizeof msg) < 0)
        return send_error(ctx, err, msg, NULL);
    snprintf(ctx->req.name, sizeof ctx->req.name, "%s", name);
    if (op == RL_EXTEND || op == RL_RELEASE) {
        const char *hdr = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "Lock-Token");
        const char *query = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "token");
        if (api_pick_token(hdr, query, token_in_body, &ctx->req, msg, sizeof msg) < 0)
            return send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    }
    ctx->mroute = op == RL_ACQUIRE  ? METRICS_ROUTE_ACQUIRE
                  : op == RL_EXTEND ? METRICS_ROUTE_EXTEND
                  : op == RL_RELEASE ? METRICS_ROUTE_RELEASE
                                     : METRICS_ROUTE_INSPECT;
    if (ctx->req.hold) {
        if (!hold_reserve(s->holds)) {
            char *body = api_error_json(API_E_TOO_MANY_HOLDS,
                                        "too many held streams are open already (--max-holds)");
            return send_body(ctx, api_errors[API_E_TOO_MANY_HOLDS].status, body, NULL, 1, true);
        }
        ctx->hold_reserved = true;
    }
    return submit(ctx);
}

/* POST /v1.0-alpha1/lock|unlock/{store}, in Dapr's wire format. */
static enum MHD_Result dapr_dispatch(req_ctx *ctx, const char *store)
{
    http_server *s = ctx->s;
    bool unlock = ctx->route == ROUTE_DAPR_UNLOCK;
    const char *code;
    char msg[200];
    ctx->dapr = true;
    if (api_parse_dapr(unlock, store, s->cfg->dapr_stores, ctx->body ? ctx->body : "", ctx->body_len,
                       &s->limits, &ctx->req, &code, msg, sizeof msg) < 0)
        return send_body(ctx, 400, api_dapr_error_json(code, msg), NULL, 0, true);
    return submit(ctx);
}

struct header_scan {
    int lengths;            /* Content-Length headers */
    bool lengths_differ;
    bool chunked;           /* any Transfer-Encoding */
    const char *first_length;
};

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct header_scan *hs = cls;
    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (hs->lengths++ && strcmp(hs->first_length, value ? value : ""))
            hs->lengths_differ = true;
        else if (hs->lengths == 1)
            hs->first_length = value ? value : "";
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        hs->chunked = true;
    }
    return MHD_YES;
}

/* RFC 9112 section 6.3: a message with both Content-Length and
 * Transfer-Encoding, or with differing Content-Length values, has no
 * trustworthy end. Behind a proxy that reads it otherwise, whatever follows
 * would be another request (smuggling): answer 400 and close. */
static bool framing_ambiguous(struct MHD_Connection *conn)
{
    struct header_scan hs = {0, false, false, ""};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &hs);
    return (hs.chunked && hs.lengths) || hs.lengths_differ;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    http_server *s = cls;
    req_ctx *ctx = *con_cls;
    (void)version;

    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        ctx->s = s;
        ctx->conn = conn;
        atomic_init(&ctx->refs, 1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        ctx->ci = ci ? ci->socket_context : NULL;
        ctx->start_us = mpool_now_us();
        pthread_mutex_lock(&s->reg_lock);
        s->nrequests++;   /* until on_completed: a shutdown answers it first */
        pthread_mutex_unlock(&s->reg_lock);
        const char *name;
        ctx->route = api_route_of(url, &name);
        ctx->mroute = ctx->route == ROUTE_HEALTHZ  ? METRICS_ROUTE_HEALTHZ
                      : ctx->route == ROUTE_READYZ ? METRICS_ROUTE_READYZ
                      : ctx->route == ROUTE_METRICS ? METRICS_ROUTE_METRICS
                      : ctx->route == ROUTE_LOCK ? METRICS_ROUTE_INSPECT
                      : ctx->route == ROUTE_DAPR_LOCK ? METRICS_ROUTE_DAPR_LOCK
                      : ctx->route == ROUTE_DAPR_UNLOCK ? METRICS_ROUTE_DAPR_UNLOCK
                                                 : METRICS_ROUTE_OTHER;
        *con_cls = ctx;
        if (framing_ambiguous(conn)) {
            ctx->close = true;
            return send_error(ctx, API_E_BAD_FRAMING,
                              "Content-Length with Transfer-Encoding, or two different "
                              "Content-Length values: the message has no clear end", NULL);
        }
        /* Refuse a declared oversize body before reading it. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg->max_body_bytes)
            return send_error(ctx, API_E_TOO_LARGE, "the request body is too large", NULL);
        return MHD_YES;
    }

    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (ctx->answered || ctx->too_large)
            return MHD_YES;
        if (ctx->body_len + n > (size_t)s->cfg->max_body_bytes) {
            ctx->too_large = true;
            free(ctx->body);
            ctx->body = NULL;
            return MHD_YES;
        }
        char *nb = realloc(ctx->body, ctx->body_len + n + 1);
        if (!nb)
            return MHD_NO;
        memcpy(nb + ctx->body_len, upload_data, n);
        ctx->body = nb;
        ctx->body_len += n;
        ctx->body[ctx->body_len] = '\0';
        return MHD_YES;
    }

    if (ctx->answered)
        return MHD_YES;
    if (ctx->submitted) {
        if (ctx->gone)
            return MHD_NO;   /* nobody to answer: close */
        return atomic_load(&ctx->result_ready) ? lock_answer(ctx) : MHD_YES;
    }
    if (ctx->ci) {
        pthread_mutex_lock(&s->reg_lock);
        ctx->ci->busy = true;   /* complete: the request deadline no longer applies */
        pthread_mutex_unlock(&s->reg_lock);
    }

    const char *name;
    enum api_route route = api_route_of(url, &name);
    if (route == ROUTE_NOT_FOUND)
        return send_error(ctx, API_E_NOT_FOUND, "no such path", NULL);
    if (!api_method_allowed(route, method))
        return send_error(ctx, API_E_METHOD, "the method is not allowed on this path",
                          api_allowed_methods(route));
    if (ctx->too_large)
        return send_error(ctx, API_E_TOO_LARGE, "the request body is too large", NULL);
    switch (route) {
    case ROUTE_HEALTHZ:
        return send_body(ctx, 200, strdup("{\"status\":\"ok\"}"), NULL, 0, true);
    case ROUTE_READYZ:
        return serve_readyz(ctx);
    case ROUTE_METRICS:
        return serve_metrics(ctx);
    case ROUTE_LOCK:
        if (!authorized(ctx, false))
            return send_error(ctx, API_E_UNAUTHORIZED,
                              "a valid Authorization: Bearer token is required", NULL);
        return lock_dispatch(ctx, method, name);
    case ROUTE_DAPR_HEALTHZ:
        return send_body(ctx, 204, NULL, NULL, 0, true);
    case ROUTE_DAPR_METADATA:
    case ROUTE_DAPR_LOCK:
    case ROUTE_DAPR_UNLOCK:
        if (!authorized(ctx, true))
            return send_body(ctx, 401, api_dapr_error_json("ERR_UNAUTHORIZED",
                             "a valid dapr-api-token header is required"), NULL, 0, true);
        if (route == ROUTE_DAPR_METADATA)
            return send_body(ctx, 200, api_dapr_metadata_json(s->cfg->dapr_stores, REDLOCKD_VERSION),
                             NULL, 0, true);
        return dapr_dispatch(ctx, name);
    case ROUTE_NOT_FOUND:
        break;
    }
    return send_error(ctx, API_E_NOT_FOUND, "no such path", NULL);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req_ctx *ctx = *con_cls;
    http_server *s = cls;
    (void)conn;
    if (!ctx)
        return;
    if (ctx->submitted) {
        metrics_inflight(s->m, -1);
        /* An answer that did not reach the client: a grant is released. A
         * held stream's grant is the hold's to release. */
        bool delivered = ctx->hold || (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && ctx->answered &&
                                       !ctx->gone && !ctx->forced);
        rl_finish(s->engine, ctx->h, delivered);
    }
    if (ctx->hold)
        hold_close(ctx->hold);   /* the stream ended or broke: released unless it is over */
    if (ctx->hold_reserved)
        hold_unreserve(s->holds);
    pthread_mutex_lock(&s->reg_lock);
    s->nrequests--;
    if (ctx->ci) {
        ctx->ci->busy = false;
        ctx->ci->phase_start_us = mpool_now_us();   /* the next request's deadline starts */
    }
    pthread_cond_broadcast(&s->reg_cond);
    pthread_mutex_unlock(&s->reg_lock);
    *con_cls = NULL;
    ctx_unref(ctx);
}

/* libmicrohttpd's connection start and close: the registry the watcher and
 * the shutdown walk. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_info *ci = calloc(1, sizeof *ci);
        const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !fdi) {
            free(ci);
            *socket_context = NULL;
            return;
        }
        ci->fd = fdi->connect_fd;
        ci->phase_start_us = mpool_now_us();
        pthread_mutex_lock(&s->reg_lock);
        ci->next = s->conns;
        if (s->conns)
            s->conns->prev = ci;
        s->conns = ci;
        pthread_mutex_unlock(&s->reg_lock);
        *socket_context = ci;
        return;
    }
    conn_info *ci = *socket_context;
    if (!ci)
        return;
    pthread_mutex_lock(&s->reg_lock);
    if (ci->prev)
        ci->prev->next = ci->next;
    else
        s->conns = ci->next;
    if (ci->next)
        ci->next->prev = ci->prev;
    s->closed_since_trim++;
    pthread_mutex_unlock(&s->reg_lock);
    free(ci);
    *socket_context = NULL;
}

/* The watcher: every HTTP_WATCH_INTERVAL_MS it
 *  - cancels the engine request of every suspended connection whose client
 *    closed or half-closed its side (libmicrohttpd does not look at
 *    suspended connections), so a waiter stops waiting and no grant goes
 *    to a client that left;
 *  - closes connections that have not sent a complete request within
 *    --request-timeout-ms of their start or their last answer (slowloris);
 *  - gives memory freed by many closed connections back to the system. */
static void *watch_main(void *arg)
{
    http_server *s = arg;
    uint64_t timeout_us = (uint64_t)s->cfg->request_timeout_ms * 1000ULL;
    static log_limit slow_log = LOG_LIMIT_INIT;
    while (!atomic_load(&s->stop_watch)) {
        usleep(HTTP_WATCH_INTERVAL_MS * 1000);
        uint64_t now = mpool_now_us();
        unsigned long long slow = 0;
        bool trim = false;
        req_ctx *left_holds[64];
        int nleft = 0;
        pthread_mutex_lock(&s->reg_lock);
        for (conn_info *ci = s->conns; ci; ci = ci->next) {
            req_ctx *ctx = ci->suspended;
            if (ctx && ctx->hold && !ctx->gone && nleft < 64 && client_gone(ci->fd)) {
                /* A held stream's client left: resume it so that it
                 * closes (hold_reader), and on_completed releases. */
                ctx->gone = true;
                ctx->susp = false;
                ci->suspended = NULL;
                left_holds[nleft++] = ctx;
            } else if (ctx && !ctx->hold && ctx->h && !ctx->gone && client_gone(ci->fd)) {
                ctx->gone = true;
                rl_cancel(s->engine, ctx->h);
            } else if (!ci->busy && !ci->shut && ci->phase_start_us + timeout_us < now) {
                /* (phase_start_us may be later than now: set after now was read) */
                ci->shut = true;   /* libmicrohttpd sees the end and closes it */
                shutdown(ci->fd, SHUT_RDWR);
                slow++;
            }
        }
        if (s->closed_since_trim >= HTTP_TRIM_AFTER_CLOSES) {
            s->closed_since_trim = 0;
            trim = true;
        }
        pthread_mutex_unlock(&s->reg_lock);
        for (int k = 0; k < nleft; k++)
            MHD_resume_connection(left_holds[k]->conn);
        for (unsigned long long k = 0; k < slow; k++)
            metrics_count(s->m, METRICS_REQUEST_TIMEOUTS);
        unsigned long long suppressed;
        if (slow && log_allow(&slow_log, now, &suppressed)) {
            char n[24], more[24];
            snprintf(n, sizeof n, "%llu", slow);
            snprintf(more, sizeof more, "%llu", suppressed);
            log_event(LOG_LEVEL_WARN, "http_request_timeout", "connections", n, "suppressed_since_last",
                      more, NULL);
        }
        if (trim)
            malloc_trim(0);
    }
    return NULL;
}

/* Percent-decodes in place. A decoded NUL becomes 0x7f so that it cannot cut
 * a name short: it is then refused as a bad byte like any control byte. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '%' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2])) {
            char hex[3] = {r[1], r[2], 0};
            char v = (char)strtol(hex, NULL, 16);
            *w++ = v ? v : 0x7f;
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* libmicrohttpd's messages are mostly caused by clients (a connection
 * dropped mid-request): rate-limited, with a count of what was left out. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static log_limit limit = LOG_LIMIT_INIT;
    (void)cls;
    unsigned long long suppressed;
    if (!log_allow(&limit, mpool_now_us(), &suppressed))
        return;
    char msg[512], more[24];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    snprintf(more, sizeof more, "%llu", suppressed);
    log_event(LOG_LEVEL_WARN, "http_error", "error", msg, "suppressed_since_last", more, NULL);
}

http_server *http_start(const conf *cfg, rl_engine *e, mpool *pool, metrics *m, char *err,
                        size_t errlen)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->engine = e;
    s->pool = pool;
    s->m = m;
    s->limits = (api_limits){cfg->default_ttl_ms, cfg->max_ttl_ms, cfg->max_wait_ms};
    s->holds = hold_set_new(cfg->max_holds);
    if (!s->holds) {
        snprintf(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->reg_lock, NULL);
    pthread_cond_init(&s->reg_cond, NULL);

    char port[8];
    snprintf(port, sizeof port, "%d", cfg->listen.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(cfg->listen.host, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "--listen %s:%d: %s", cfg->listen.host, cfg->listen.port,
                 gai_strerror(gai));
        free(s);
        return NULL;
    }
    /* poll(), not epoll: libmicrohttpd 0.9.75's epoll loop blocks in a second
     * epoll_wait when the first returned exactly its 128-event batch, before
     * serving those connections, so that 128 or 256 keep-alive clients in
     * lockstep hang for good (tests/integration: many_connections_all_answered).
     * Its poll loop has no such batch; a worker polls only its own
     * connections. */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->listen.port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* first, to catch every message */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        snprintf(err, errlen, "--listen %s:%d: cannot listen there (in use or not a local address?)",
                 cfg->listen.host, cfg->listen.port);
        hold_set_free(s->holds);
        free(s);
        return NULL;
    }
    s->watching = pthread_create(&s->watcher, NULL, watch_main, s) == 0;
    return s;
}

void http_quiesce(http_server *s)
{
    atomic_store(&s->quiescing, true);
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
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
        ctx->gone = ctx->hold != NULL;   /* a stream whose end never came: closed */
        memset(&ctx->res, 0, sizeof ctx->res);
        ctx->res.outcome = RL_SHUTTING_DOWN;
        atomic_store(&ctx->result_ready, true);
        forced++;
        pthread_mutex_unlock(&s->reg_lock);
        MHD_resume_connection(ctx->conn);
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
    MHD_stop_daemon(s->daemon);
    hold_set_free(s->holds);
    pthread_cond_destroy(&s->reg_cond);
    pthread_mutex_destroy(&s->reg_lock);
    free(s);
}
