/* http.c - see http.h. */
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
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>

#include "api.h"
#include "deadline.h"
#include "election.h"
#include "election_watch.h"
#include "hold.h"
#include "listener.h"
#include "log.h"
#include "quarantine.h"
#include "quorum.h"
#include "rules.h"
#include "semaphore.h"
#include "semaphore_api.h"

#define HTTP_IDLE_TIMEOUT_S 60
#define HTTP_CONNECTION_MEMORY 16384
#define HTTP_WATCH_INTERVAL_MS 100   /* how often gone clients and slow requests are looked for */
#define HTTP_TRIM_AFTER_CLOSES 256   /* return freed connection memory to the system */
#define HTTP_HANDSHAKE_GRACE_MS 50   /* quiescing: a handshake under way completes within this */
#define HTTP_QUEUE_TAKE_MAX_MS 1000  /* quiescing: the most time spent emptying the queues */

/* One connection, from libmicrohttpd's start notice to its close notice.
 * Every field is guarded by the server's reg_lock. */
typedef struct conn_info {
    struct conn_info *prev, *next;
    int fd;
    struct sockaddr_storage peer; /* for --max-connections-per-ip */
    socklen_t peer_len;
    uint64_t phase_start_us;    /* connect, or the end of the last request */
    bool busy;                  /* a complete request is being served */
    bool shut;                  /* closed for --request-timeout-ms */
    struct req_ctx *suspended;  /* the request waiting for the engine, if any */
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
} delivery_check;

/* One event loop's share of the server: a libmicrohttpd daemon in external
 * epoll mode, listening on the common address with SO_REUSEPORT, run by
 * the loop of its master pool (mpool_set_io), with that loop's engine. A
 * request is parsed, decided and answered on the loop that accepted it. */
typedef struct http_shard {
    http_server *s;
    struct MHD_Daemon *daemon;
    rl_engine *engine;
    mpool *pool;
    atomic_bool kick;           /* a connection was resumed: run the daemon now (in external
                                   mode libmicrohttpd signals nothing itself) */
    MHD_socket listen_fd;       /* while quiescing: the listener libmicrohttpd gave up */
    int *taken, ntaken, taken_cap;   /* while quiescing: connections taken from its queue */
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
    atomic_bool quiescing;      /* SIGTERM seen: no new connections */

    pthread_mutex_t reg_lock;
    pthread_cond_t reg_cond;    /* signalled when a request completes */
    conn_info *conns;
    delivery_check *checks;     /* grants whose delivery is not yet known */
    int nrequests;              /* requests whose headers arrived and that have not completed:
                                   the shutdown waits for them */
    int nconns;                 /* connections in the registry, for --max-connections */
    int closed_since_trim;
    pthread_t watcher;
    bool watching;
    atomic_bool stop_watch;
};

typedef struct req_ctx {
    http_server *s;
    http_shard *sh;           /* the loop serving it */
    rl_engine *eng;           /* the engine its request went to (engine_for) */
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
    bool probed;              /* a held stream's client sent its FIN: a renewal was asked
                                 for at once, which a closed client answers with a reset */
    int confirm_fd;           /* a grant to a client that sent its FIN: a duplicate of the
                                 socket, to learn whether the answer arrived (-1: none) */
    hold *hold;               /* the held stream this request became, until on_completed */
    election_watch *watch;    /* GET /elections/{name}?watch=true, until on_completed */
    bool election;            /* an election route: answered by election_answer */
    char label[RL_NAME_MAX + 1]; /* the election's name (req.name is its lock's) */
    char candidate_q[ELECTION_CANDIDATE_MAX + 1]; /* GET ?candidate= ("" none) */
    sem_request *sem;         /* a semaphore route: its request and, once done, its result */
    sem_result *sem_res;
    sem_handle *semh;         /* its task, for the watcher to cancel (sem_cancel) */
    atomic_bool result_ready;
    rl_request req;
    rl_result res;
} req_ctx;

static void kick_job(void *arg) { (void)arg; }

/* Resumes ctx's connection and makes its loop run the daemon soon: at once
 * on its next turn when called on the loop, else by waking it. Any thread. */
static void ctx_wake(req_ctx *ctx)
{
    http_shard *sh = ctx->sh;
    MHD_resume_connection(ctx->conn);
    atomic_store(&sh->kick, true);
    if (!mpool_on_loop(sh->pool))
        mpool_post(sh->pool, kick_job, NULL);   /* wakes it; on the loop the kick is seen */
}

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

/* Master i as every loop sees it (each has its own connection): up only
 * where up on every loop, quarantined where any loop found it so, counters
 * summed. */
static void status_of(http_server *s, int i, master_status *out)
{
    mpool_status(s->shards[0].pool, i, out);
    for (int k = 1; k < s->nshards; k++) {
        master_status o;
        mpool_status(s->shards[k].pool, i, &o);
        out->up &= o.up;
        out->subscribed &= o.subscribed;
        if (o.quarantined) {
            out->quarantined = true;
            if (o.quarantine_left_ms > out->quarantine_left_ms)
                out->quarantine_left_ms = o.quarantine_left_ms;
        }
        if (o.marker < out->marker)
            out->marker = o.marker;
        if (!out->policy[0])
            memcpy(out->policy, o.policy, sizeof out->policy);
        if (out->persistence == 0)
            out->persistence = o.persistence;
        out->may_lose_locks |= o.may_lose_locks;
        if (o.restarts > out->restarts)
            out->restarts = o.restarts;
        out->errors += o.errors;
        out->replies += o.replies;
        out->refusals += o.refusals;
        if (!out->reason[0])
            memcpy(out->reason, o.reason, sizeof out->reason);
        if (o.refusing && !out->refusing) {
            out->refusing = true;
            memcpy(out->refusal, o.refusal, sizeof out->refusal);
        }
        out->reply_us_sum += o.reply_us_sum;
    }
}

static enum MHD_Result serve_readyz(req_ctx *ctx)
{
    mpool *p = ctx->s->pool;
    int n = mpool_size(p), up = 0, voting = 0, refusing = 0, quarantined = 0, marked = 0;
    char refusal[sizeof ((master_status *)0)->refusal] = "";
    char down[sizeof ((master_status *)0)->addr + sizeof ((master_status *)0)->reason + 4] = "";
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "masters") : NULL;
    for (int i = 0; arr && i < n; i++) {
        master_status st;
        status_of(ctx->s, i, &st);
        up += st.up;
        voting += st.up && !st.quarantined && !st.refusing;
        refusing += st.refusing;
        quarantined += st.quarantined;
        marked += st.marker == QMARK_PENDING || st.marker == QMARK_READY;
        if (st.refusing && !refusal[0])
            memcpy(refusal, st.refusal, sizeof refusal);
        if (!st.up && st.reason[0] && !down[0])
            snprintf(down, sizeof down, "%s: %s", st.addr, st.reason);
        cJSON *mo = cJSON_CreateObject();
        if (!mo)
            break;
        cJSON_AddStringToObject(mo, "addr", st.addr);
        cJSON_AddBoolToObject(mo, "up", st.up);
        if (!st.up && st.reason[0])
            cJSON_AddStringToObject(mo, "reason", st.reason);
        cJSON_AddBoolToObject(mo, "tls", st.tls);
        cJSON_AddBoolToObject(mo, "quarantined", st.quarantined);
        cJSON_AddBoolToObject(mo, "notices", st.subscribed);
        cJSON_AddBoolToObject(mo, "refusing", st.refusing);
        if (st.refusing)
            cJSON_AddStringToObject(mo, "refusal", st.refusal);
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
    bool ready = voting >= quorum_of(n);
    cJSON_AddStringToObject(o, "status", ready ? "ready" : "not_ready");
    if (!ready) {
        char why[600];
        if (quarantined && !marked)
            snprintf(why, sizeof why, "the masters are not set up as one cluster yet: set-up needs "
                     "every master to answer, and %d of %d do", up, n);
        else if (refusing)
            snprintf(why, sizeof why, "%d of %d masters answer lock commands with an error (%s)",
                     refusing, n, refusal);
        else if (quarantined)
            snprintf(why, sizeof why, "%d of %d masters sit out in restart quarantine", quarantined, n);
        else
            snprintf(why, sizeof why, "%d of %d masters answer%s%s", up, n, down[0] ? "; " : "", down);
        cJSON_AddStringToObject(o, "reason", why);
    }
    cJSON_AddNumberToObject(o, "masters_up", up);
    cJSON_AddNumberToObject(o, "masters_voting", voting);
    cJSON_AddNumberToObject(o, "masters_refusing", refusing);
    cJSON_AddNumberToObject(o, "masters_total", n);
    cJSON_AddNumberToObject(o, "quorum", quorum_of(n));
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
    {"redlockd_master_refusing", "gauge",
     "1 while the master answers lock commands with an error (OOM, READONLY, NOPERM ...)."},
    {"redlockd_master_refusals_total", "counter", "Lock commands the master answered with an error."},
};

static unsigned long long master_family_value(const master_status *st, size_t family)
{
    switch (family) {
    case 0: return st->up;
    case 1: return st->errors;
    case 2: return st->quarantined;
    case 3: return st->restarts;
    case 4: return st->subscribed;
    case 5: return st->may_lose_locks;
    case 6: return st->refusing;
    default: return st->refusals;
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
        status_of(ctx->s, i, &st[i]);
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
        if (ctx->confirm_fd >= 0)
            close(ctx->confirm_fd);
        if (ctx->semh)
            sem_finish(ctx->semh);
        free(ctx->sem);
        free(ctx->sem_res);
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
        ctx_wake(ctx);
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
        ctx_wake(ctx);
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
    long n = ctx->hold ? hold_read(ctx->hold, buf, max) : election_watch_read(ctx->watch, buf, max);
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

static enum MHD_Result stream_answer(req_ctx *ctx, unsigned status);

/* A place for ctx's held stream among --max-holds, kept until the stream
 * starts (or on_completed gives it back). */
static bool reserve_hold(req_ctx *ctx)
{
    ctx->hold_reserved = hold_reserve(ctx->s->holds);
    return ctx->hold_reserved;
}

static enum MHD_Result too_many_holds(req_ctx *ctx)
{
    char *body = api_error_json(API_E_TOO_MANY_HOLDS, "too many held streams are open already (--max-holds)");
    return send_body(ctx, api_errors[API_E_TOO_MANY_HOLDS].status, body, NULL, 1, true);
}

/* A held stream that could not start: the service is stopping, or out of
 * memory. */
static enum MHD_Result stream_refused(req_ctx *ctx)
{
    bool stopping = atomic_load(&ctx->s->quiescing);
    return send_error(ctx, stopping ? API_E_SHUTTING_DOWN : API_E_INTERNAL,
                      stopping ? "the service is shutting down" : "out of memory", NULL);
}

/* A granted acquire with "hold": a 201 whose body is the held stream. */
static enum MHD_Result hold_answer(req_ctx *ctx)
{
    http_server *s = ctx->s;
    ctx->hold = hold_start(s->holds, ctx->eng, &ctx->req, &ctx->res, ctx->start_us,
                           ctx->ci ? ctx->ci->fd : -1, hold_wake, ctx);
    if (!ctx->hold) {
        /* Stopping (or out of memory): the grant is not delivered, so
         * rl_finish releases it. */
        ctx->forced = true;
        return stream_refused(ctx);
    }
    ctx->hold_reserved = false;   /* the reservation is the hold now */
    return stream_answer(ctx, 201);
}

/* An NDJSON answer read from ctx's hold or watch (hold_reader). */
static enum MHD_Result stream_answer(req_ctx *ctx, unsigned status)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, hold_reader,
                                                               ctx, NULL);
    if (!r)
        return MHD_NO;   /* on_completed closes the hold, which releases */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(ctx->conn, status, r);
    MHD_destroy_response(r);
    ctx->answered = true;
    metrics_request(ctx->s->m, ctx->mroute, (int)status, mpool_now_us() - ctx->start_us);
    return rc;
}

/* Has the connection failed (reset, or closed both ways)? Then an answer
 * cannot reach the client. A FIN alone is not that: a half-closed client
 * (shutdown(SHUT_WR), `nc -N`, Go's CloseWrite) still reads its answer. */
static bool client_gone(int fd)
{
    struct pollfd pfd = {fd, 0, 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR));
}

/* Has the client sent its FIN (closed or half-closed)? */
static bool client_done_sending(int fd)
{
    struct pollfd pfd = {fd, POLLRDHUP, 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result election_answer(req_ctx *ctx);
static enum MHD_Result sem_answer(req_ctx *ctx);

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
    if (ctx->election)
        return election_answer(ctx);
    if (ctx->sem)
        return sem_answer(ctx);
    if (ctx->req.hold && ctx->res.outcome == RL_OK)
        return hold_answer(ctx);
    /* A grant to a client that sent its FIN is answered, and the watcher
     * learns whether it arrived (delivery_check). */
    if (ctx->res.outcome == RL_OK && ctx->req.op == RL_ACQUIRE && ctx->ci &&
        client_done_sending(ctx->ci->fd))
        ctx->confirm_fd = fcntl(ctx->ci->fd, F_DUPFD_CLOEXEC, 0);
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

/* The engine a request goes to. Every acquire, extension and release of
 * one name goes to the loop that owns the name (by hash); an inspection
 * stays on its own loop. The owner's one connection to each master then
 * carries every write of the name in order: each master sees acquires in
 * the same order, so two of them never split the vote between them; and a
 * release a lagging master missed is remembered and replayed on the very
 * connection whose next vote it must precede. (With writes of one name on
 * two loops, a paused master came back holding a released lock while the
 * other loop's replay was still to come: one free-name acquire in four
 * failed in faults::sigstop_two_masters_cycles.) The waiters of one name
 * also sleep in one engine, served in arrival order. This is the one
 * hand-off between loops: with N loops, N-1 of N writes take it. */
int http_loop_of(const char *name, int nloops)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
    for (const char *c = name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    return (int)(h % (uint64_t)nloops);
}

static rl_engine *engine_of_name(void *arg, const char *name)
{
    http_server *s = arg;
    return s->shards[s->nshards == 1 ? 0 : http_loop_of(name, s->nshards)].engine;
}

static rl_engine *engine_for(const req_ctx *ctx)
{
    if (ctx->s->nshards == 1 || ctx->req.op == RL_INSPECT)
        return ctx->sh->engine;
    return engine_of_name(ctx->s, ctx->req.name);
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
    ctx->eng = engine_for(ctx);
    if (rl_submit(ctx->eng, &ctx->req, lock_done, ctx, &h) < 0) {
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
    if (!rules_name_valid(name, strlen(name)))
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
    ctx->req.queued = true;
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
    if (ctx->req.hold && !reserve_hold(ctx))
        return too_many_holds(ctx);
    return submit(ctx);
}

/* ---- elections (docs/elections.md; the pure parts in election.c) ---- */

/* The answer to an election's GET, DELETE or PUT, as the engine gave it. */
static enum MHD_Result election_answer(req_ctx *ctx)
{
    if (ctx->req.op == RL_INSPECT && ctx->res.outcome == RL_OK) {
        election_state st;
        election_state_of(&ctx->res, &st);
        char *body = election_state_json(ctx->label, &st, ctx->candidate_q[0] ? ctx->candidate_q : NULL);
        if (!body)
            return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
        return send_body(ctx, 200, body, NULL, 0, true);
    }
    rl_request shown = ctx->req;   /* errors name the election, not its lock */
    snprintf(shown.name, sizeof shown.name, "%s", ctx->label);
    int status;
    long long retry_after_s = 0;
    char *body = api_result_json(&shown, &ctx->res, &status, &retry_after_s);
    if (!body && status != 204)
        return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return send_body(ctx, status, body, NULL, retry_after_s, true);
}

/* POST: a campaign, answered at once with its stream ("campaigning"). */
static enum MHD_Result election_campaign(req_ctx *ctx)
{
    http_server *s = ctx->s;
    char candidate[ELECTION_CANDIDATE_MAX + 1], value[ELECTION_VALUE_MAX + 1], msg[200];
    if (election_parse_campaign(ctx->body ? ctx->body : "", ctx->body_len, s->limits.default_ttl_ms,
                                s->limits.max_ttl_ms, &ctx->req, candidate, value, msg, sizeof msg) < 0)
        return send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    election_lock_name(ctx->label, ctx->req.name, sizeof ctx->req.name);
    election_owner(candidate, value, ctx->req.owner, sizeof ctx->req.owner);
    if (!hold_reserve(s->holds))
        return too_many_holds(ctx);
    ctx->hold = hold_campaign(s->holds, engine_for(ctx), &ctx->req, ctx->label, candidate,
                              ctx->ci ? ctx->ci->fd : -1, hold_wake, ctx);
    if (!ctx->hold) {
        hold_unreserve(s->holds);
        return stream_refused(ctx);
    }
    return stream_answer(ctx, 201);
}

static enum MHD_Result election_dispatch(req_ctx *ctx, const char *method, const char *raw)
{
    http_server *s = ctx->s;
    size_t len = strlen(raw) - (ctx->route == ROUTE_ELECTION_VALUE ? strlen("/value") : 0);
    if (!rules_name_valid(raw, len))
        return send_error(ctx, API_E_BAD_NAME,
                          "the election name must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -", NULL);
    memcpy(ctx->label, raw, len);
    ctx->label[len] = '\0';
    ctx->election = true;
    memset(&ctx->req, 0, sizeof ctx->req);
    if (!strcmp(method, "POST"))
        return election_campaign(ctx);
    election_lock_name(ctx->label, ctx->req.name, sizeof ctx->req.name);
    char msg[200];
    if (!strcmp(method, "GET")) {
        const char *watch = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "watch");
        const char *cand = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "candidate");
        if (cand && !election_candidate_valid(cand))
            return send_error(ctx, API_E_BAD_REQUEST, "candidate is not a possible candidate", NULL);
        if (cand)
            snprintf(ctx->candidate_q, sizeof ctx->candidate_q, "%s", cand);
        if (watch && strcmp(watch, "true") && strcmp(watch, "false"))
            return send_error(ctx, API_E_BAD_REQUEST, "watch must be true or false", NULL);
        if (watch && !strcmp(watch, "true")) {
            ctx->watch = election_watch_start(ctx->sh->engine, ctx->sh->pool, ctx->req.name,
                                              ctx->label, hold_wake, ctx);
            if (!ctx->watch)
                return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
            return stream_answer(ctx, 200);
        }
        ctx->req.op = RL_INSPECT;
        return submit(ctx);
    }
    bool token_in_body = false;
    if (!strcmp(method, "PUT")) {
        ctx->req.op = RL_PROCLAIM;
        if (election_parse_value(ctx->body ? ctx->body : "", ctx->body_len, ctx->req.owner,
                                 ctx->req.token, msg, sizeof msg) < 0)
            return send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
        token_in_body = ctx->req.token[0] != '\0';
    } else {   /* DELETE: resign */
        enum api_err err;
        if (api_parse_body(RL_RELEASE, ctx->body ? ctx->body : "", ctx->body_len, &s->limits, &ctx->req,
                           &token_in_body, &err, msg, sizeof msg) < 0)
            return send_error(ctx, err, msg, NULL);
        election_lock_name(ctx->label, ctx->req.name, sizeof ctx->req.name);
    }
    const char *hdr = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "Lock-Token");
    const char *query = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "token");
    if (api_pick_token(hdr, query, token_in_body, &ctx->req, msg, sizeof msg) < 0)
        return send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    return submit(ctx);
}

/* ---- semaphores (docs/semaphores.md; the pure parts in semaphore_api.c) ---- */

static void sem_ignore(void *arg, const sem_result *res)
{
    (void)arg;
    (void)res;
}

/* Permits nobody will receive: released on every master at once. */
static void sem_give_back(http_server *s, mpool *pool, const char *name, const sem_result *res)
{
    sem_request *r = calloc(1, sizeof *r);
    if (!r)
        return;   /* (they expire with their ttl) */
    r->op = SEM_RELEASE;
    snprintf(r->name, sizeof r->name, "%s", name);
    for (int i = 0; i < res->npermits; i++)
        memcpy(r->tokens[r->ntokens++], res->permits[i].token, sizeof r->tokens[0]);
    if (r->ntokens)
        sem_submit(r, engine_of_name, s, pool, sem_ignore, NULL, NULL);
    free(r);
}

/* The semaphore's answer, on an engine's thread: resumes the connection,
 * unless a shutdown answered it already (then what it won goes back). */
static void sem_done(void *arg, const sem_result *res)
{
    req_ctx *ctx = arg;
    http_server *s = ctx->s;
    for (int i = 0; ctx->sem->op == SEM_RELEASE && i < res->npermits; i++) {
        /* a permit kept by a held stream: the stream ends with "released" */
        int slot;
        char token[TOKEN_MAX_LEN + 1], slot_name[RL_INTERNAL_NAME_MAX + 1];
        if (sem_token_split(res->permits[i].token, SEM_LIMIT_MAX, &slot, token, sizeof token)) {
            sem_slot_name(ctx->sem->name, slot, slot_name, sizeof slot_name);
            hold_released(s->holds, slot_name, token);
        }
    }
    pthread_mutex_lock(&s->reg_lock);
    bool was = ctx->susp;
    if (was) {
        memcpy(ctx->sem_res, res, sizeof *res);
        ctx->res.outcome = res->outcome;
        atomic_store(&ctx->result_ready, true);
        ctx->susp = false;
        if (ctx->ci)
            ctx->ci->suspended = NULL;
    }
    pthread_mutex_unlock(&s->reg_lock);
    if (was)
        ctx_wake(ctx);
    else if (ctx->sem->op == SEM_ACQUIRE && res->outcome == RL_OK)
        sem_give_back(s, ctx->sh->pool, ctx->sem->name, res);
    ctx_unref(ctx);
}

/* A permit taken with "hold": a 201 whose body is the held stream of its
 * slot's lock. */
static enum MHD_Result sem_hold_answer(req_ctx *ctx)
{
    http_server *s = ctx->s;
    const sem_permit *p = &ctx->sem_res->permits[0];
    rl_request slot = {.op = RL_ACQUIRE, .ttl_ms = ctx->sem_res->ttl_ms};
    rl_result grant = {.outcome = RL_OK, .ttl_ms = ctx->sem_res->ttl_ms, .fence = p->fence,
                       .validity_ms = p->validity_ms};
    hold_permit_of of = {.limit = ctx->sem->limit, .slot = p->slot};
    int slot_no;
    sem_token_split(p->token, SEM_LIMIT_MAX, &slot_no, grant.token, sizeof grant.token);
    sem_slot_name(ctx->sem->name, p->slot, slot.name, sizeof slot.name);
    sem_limit_name(ctx->sem->name, of.limit_name, sizeof of.limit_name);
    snprintf(of.semaphore, sizeof of.semaphore, "%s", ctx->sem->name);
    of.limit_engine = engine_of_name(s, of.limit_name);
    /* The validity counts from the request's arrival: earlier than the
     * slot's own acquire, so never more than the masters hold. */
    ctx->hold = hold_permit(s->holds, engine_of_name(s, slot.name), &slot, &grant, ctx->start_us, &of,
                            ctx->ci ? ctx->ci->fd : -1, hold_wake, ctx);
    if (!ctx->hold) {
        sem_give_back(s, ctx->sh->pool, ctx->sem->name, ctx->sem_res);
        ctx->forced = true;   /* (on_completed gives nothing back twice) */
        return stream_refused(ctx);
    }
    ctx->hold_reserved = false;   /* the reservation is the hold now */
    return stream_answer(ctx, 201);
}

static enum MHD_Result sem_answer(req_ctx *ctx)
{
    if (ctx->forced)
        return send_error(ctx, API_E_SHUTTING_DOWN, "the service is shutting down", NULL);
    if (ctx->sem->op == SEM_ACQUIRE && ctx->sem->hold && ctx->sem_res->outcome == RL_OK)
        return sem_hold_answer(ctx);
    int status;
    long long retry_after_s = 0;
    char *body = sem_result_json(ctx->sem, ctx->sem_res, &status, &retry_after_s);
    if (!body && status != 204)
        return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return send_body(ctx, status, body, NULL, retry_after_s, true);
}

static enum MHD_Result sem_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    if (!rules_name_valid(name, strlen(name)))
        return send_error(ctx, API_E_BAD_NAME,
                          "the semaphore name must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -", NULL);
    ctx->sem = calloc(1, sizeof *ctx->sem);
    ctx->sem_res = calloc(1, sizeof *ctx->sem_res);
    if (!ctx->sem || !ctx->sem_res)
        return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    sem_request *r = ctx->sem;
    snprintf(r->name, sizeof r->name, "%s", name);
    char msg[200];
    const char *body = ctx->body ? ctx->body : "";
    int rc = 0;
    if (!strcmp(method, "POST")) {
        rc = sem_parse_acquire(body, ctx->body_len, &s->limits, r, msg, sizeof msg);
    } else if (!strcmp(method, "GET")) {
        r->op = SEM_INSPECT;
        const char *limit = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "limit");
        char *end = NULL;
        long l = limit ? strtol(limit, &end, 10) : 0;
        if (limit && (!*limit || *end || l < 1 || l > SEM_LIMIT_MAX)) {
            snprintf(msg, sizeof msg, "limit must be a whole number from 1 to %d", SEM_LIMIT_MAX);
            rc = -1;
        }
        r->limit = (int)l;
    } else {
        const char *hdr = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "Lock-Token");
        const char *query = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "token");
        rc = sem_parse_tokens(!strcmp(method, "PATCH"), hdr, query, body, ctx->body_len, &s->limits, r, msg,
                              sizeof msg);
    }
    if (rc < 0)
        return send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    if (r->hold && !reserve_hold(ctx))
        return too_many_holds(ctx);
    /* Suspend before submitting: the answer may come at once. */
    pthread_mutex_lock(&s->reg_lock);
    ctx->susp = true;
    if (ctx->ci)
        ctx->ci->suspended = ctx;
    pthread_mutex_unlock(&s->reg_lock);
    MHD_suspend_connection(ctx->conn);
    ctx->submitted = true;
    metrics_inflight(s->m, 1);
    atomic_fetch_add(&ctx->refs, 1);   /* sem_done's */
    if (sem_submit(r, engine_of_name, s, ctx->sh->pool, sem_done, ctx, &ctx->semh) < 0) {
        atomic_fetch_sub(&ctx->refs, 1);
        rl_result down = {.outcome = RL_SHUTTING_DOWN};
        ctx_resume(ctx, &down);
        ctx->forced = true;
    }
    return MHD_YES;
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
    ctx->req.queued = true;
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
    http_shard *sh = cls;
    http_server *s = sh->s;
    req_ctx *ctx = *con_cls;
    (void)version;

    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return MHD_NO;
        ctx->s = s;
        ctx->sh = sh;
        ctx->conn = conn;
        atomic_init(&ctx->refs, 1);
        ctx->confirm_fd = -1;
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
    case ROUTE_SEMAPHORE:
        if (!authorized(ctx, false))
            return send_error(ctx, API_E_UNAUTHORIZED,
                              "a valid Authorization: Bearer token is required", NULL);
        return sem_dispatch(ctx, method, name);
    case ROUTE_ELECTION:
    case ROUTE_ELECTION_VALUE:
        if (!authorized(ctx, false))
            return send_error(ctx, API_E_UNAUTHORIZED,
                              "a valid Authorization: Bearer token is required", NULL);
        return election_dispatch(ctx, method, name);
    case ROUTE_NOT_FOUND:
        break;
    }
    return send_error(ctx, API_E_NOT_FOUND, "no such path", NULL);
}

/* Hands ctx's grant to the watcher until its delivery is known. False
 * (nothing handed over) when out of memory: it then counts as delivered. */
static bool check_delivery(req_ctx *ctx)
{
    delivery_check *c = malloc(sizeof *c);
    if (!c)
        return false;
    c->fd = ctx->confirm_fd;
    c->eng = ctx->eng;
    c->h = ctx->h;
    c->until_us = ctx->start_us + (uint64_t)(ctx->res.validity_ms > 0 ? ctx->res.validity_ms : 0) * 1000ULL;
    ctx->confirm_fd = -1;
    http_server *s = ctx->s;
    pthread_mutex_lock(&s->reg_lock);
    c->next = s->checks;
    s->checks = c;
    pthread_mutex_unlock(&s->reg_lock);
    return true;
}

/* Has c's answer arrived (1), met a reset (0), or is it not known yet (-1)?
 * At the end (finally) an unknown one counts as arrived. */
static int delivery_state(const delivery_check *c, uint64_t now, bool finally)
{
    struct pollfd pfd = {c->fd, 0, 0};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR))) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || !(pfd.revents & POLLHUP))
            return 0;
    }
    int unacked = 0;
    if (ioctl(c->fd, SIOCOUTQ, &unacked) == 0 && unacked == 0)
        return 1;
    return finally || now >= c->until_us ? 1 : -1;
}

/* Settles the delivery checks whose outcome is known (all of them when
 * finally): a grant that met a reset is released (rl_finish undelivered). */
static void settle_deliveries(http_server *s, bool finally)
{
    uint64_t now = mpool_now_us();
    delivery_check *done = NULL;
    pthread_mutex_lock(&s->reg_lock);
    for (delivery_check **p = &s->checks; *p;) {
        delivery_check *c = *p;
        int st = delivery_state(c, now, finally);
        if (st < 0) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        c->arrived = st == 1;
        c->next = done;
        done = c;
    }
    pthread_mutex_unlock(&s->reg_lock);
    while (done) {
        delivery_check *c = done;
        done = c->next;
        close(c->fd);
        rl_finish(c->eng, c->h, c->arrived);
        free(c);
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req_ctx *ctx = *con_cls;
    http_server *s = ((http_shard *)cls)->s;
    (void)conn;
    if (!ctx)
        return;
    if (ctx->submitted) {
        metrics_inflight(s->m, -1);
        /* An answer that did not reach the client: a grant is released. A
         * held stream's grant is the hold's to release. */
        bool delivered = ctx->hold || (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && ctx->answered &&
                                       !ctx->gone && !ctx->forced);
        if (ctx->sem && !delivered && atomic_load(&ctx->result_ready) && !ctx->forced &&
            ctx->sem->op == SEM_ACQUIRE && ctx->sem_res->outcome == RL_OK)
            sem_give_back(s, ctx->sh->pool, ctx->sem->name, ctx->sem_res);
        if (!(delivered && ctx->confirm_fd >= 0 && check_delivery(ctx)))
            rl_finish(ctx->eng, ctx->h, delivered);
    }
    if (ctx->hold)
        hold_close(ctx->hold);   /* the stream ended or broke: released unless it is over */
    if (ctx->watch)
        election_watch_close(ctx->watch);
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

/* Do a and b name the same host (address only, not port)? */
static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return false;
}

/* libmicrohttpd's connection start and close: the registry the watcher and
 * the shutdown walk. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = ((http_shard *)cls)->s;
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
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ai && ai->client_addr) {
            ci->peer_len = ai->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                   : sizeof(struct sockaddr_in);
            memcpy(&ci->peer, ai->client_addr, ci->peer_len);
        }
        pthread_mutex_lock(&s->reg_lock);
        /* The limits hold for the whole server: each loop's daemon would
         * count only the connections the kernel happened to give it. One
         * over a limit is closed at once, as libmicrohttpd would. */
        bool over = s->nconns >= s->cfg->max_connections;
        if (!over && ci->peer_len) {
            int same = 0;
            for (conn_info *o = s->conns; o; o = o->next)
                same += !o->shut && same_host(&o->peer, &ci->peer);
            over = same >= s->cfg->max_connections_per_ip;
        }
        if (over) {
            ci->shut = true;
            shutdown(ci->fd, SHUT_RDWR);
        }
        ci->next = s->conns;
        if (s->conns)
            s->conns->prev = ci;
        s->conns = ci;
        s->nconns++;
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
    s->nconns--;
    s->closed_since_trim++;
    pthread_mutex_unlock(&s->reg_lock);
    free(ci);
    *socket_context = NULL;
}

/* The watcher: every HTTP_WATCH_INTERVAL_MS it
 *  - cancels the engine request (or semaphore task) of every suspended
 *    connection whose connection failed (libmicrohttpd does not look at suspended
 *    connections), so a waiter stops waiting and no grant goes to a client
 *    that left; a FIN alone may be a half-close, so such a waiter waits on,
 *    and a grant it gets is checked for delivery (delivery_check);
 *  - renews a held stream at once when its client sent its FIN: a client
 *    that closed answers the event with a reset, and the stream ends;
 *  - settles the delivery checks;
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
        req_ctx *probe[64];
        int nprobe = 0;
        pthread_mutex_lock(&s->reg_lock);
        for (conn_info *ci = s->conns; ci; ci = ci->next) {
            req_ctx *ctx = ci->suspended;
            if (ctx && (ctx->hold || ctx->watch) && !ctx->gone && nleft < 64 &&
                (client_gone(ci->fd) || (ctx->watch && client_done_sending(ci->fd)))) {
                /* (a watch's client has nothing to say: its FIN ends it) */
                /* A held stream's client left: resume it so that it
                 * closes (hold_reader), and on_completed releases. */
                ctx->gone = true;
                ctx->susp = false;
                ci->suspended = NULL;
                left_holds[nleft++] = ctx;
            } else if (ctx && ctx->hold && !ctx->gone && !ctx->probed && nprobe < 64 &&
                       client_done_sending(ci->fd)) {
                /* Closed, or only half-closed? A closed client answers
                 * the renewal's event with a reset, seen on a later pass. */
                ctx->probed = true;
                ctx->susp = false;   /* ours to resume: the stream stays open till then */
                ci->suspended = NULL;
                probe[nprobe++] = ctx;
            } else if (ctx && !ctx->hold && ctx->h && !ctx->gone && client_gone(ci->fd)) {
                ctx->gone = true;
                rl_cancel(ctx->eng, ctx->h);
            } else if (ctx && ctx->semh && !ctx->gone && client_gone(ci->fd)) {
                ctx->gone = true;   /* a waiting semaphore acquire stops waiting */
                sem_cancel(ctx->semh);
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
            ctx_wake(left_holds[k]);
        for (int k = 0; k < nprobe; k++) {
            hold_renew_now(probe[k]->hold);
            ctx_wake(probe[k]);
        }
        settle_deliveries(s, false);
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

static void run_on_loop(mpool *p, void (*fn)(void *), void *arg)
{
    struct loop_call c = {fn, arg, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    if (mpool_post(p, loop_call_job, &c) < 0) {
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
    mpool_set_io(sh->pool, di->epoll_fd, shard_run, shard_due, sh);
}

static void shard_detach(void *arg)
{
    http_shard *sh = arg;
    mpool_set_io(sh->pool, -1, NULL, NULL, NULL);
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
    uint64_t until = mpool_now_us() + HTTP_QUEUE_TAKE_MAX_MS * 1000ULL;
    for (;;) {
        int n = 0;
        for (int k = 0; k < s->nshards; k++) {
            shard_take_queue(&s->shards[k]);
            if (s->shards[k].listen_fd != MHD_INVALID_SOCKET)
                p[n++] = (struct pollfd){.fd = s->shards[k].listen_fd, .events = POLLIN};
        }
        if (n == 0 || mpool_now_us() >= until || poll(p, (nfds_t)n, HTTP_HANDSHAKE_GRACE_MS) <= 0)
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
        flags, (uint16_t)cfg->listen.port, NULL, NULL, on_request, sh,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* first, to catch every message */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, sh,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, sh,
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
        hold_set_free(s->holds);
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
        free(s);
        return NULL;
    }
    for (int k = 0; k < nloops; k++) {
        election_watch_attach(s->shards[k].engine);
        sem_engine_attach(s->shards[k].engine);
        run_on_loop(s->shards[k].pool, shard_attach, &s->shards[k]);
    }
    s->watching = pthread_create(&s->watcher, NULL, watch_main, s) == 0;
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
    for (int k = 0; k < s->nshards; k++)
        run_on_loop(s->shards[k].pool, shard_stop_accepting, &s->shards[k]);
    take_queues_and_close(s);
    for (int k = 0; k < s->nshards; k++)
        run_on_loop(s->shards[k].pool, shard_add_taken, &s->shards[k]);
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
        memset(&ctx->res, 0, sizeof ctx->res);
        ctx->res.outcome = RL_SHUTTING_DOWN;
        atomic_store(&ctx->result_ready, true);
        forced++;
        pthread_mutex_unlock(&s->reg_lock);
        ctx_wake(ctx);
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
    settle_deliveries(s, true);
    /* The loops stop running the daemons first: from here on only this
     * thread touches them. */
    for (int k = 0; k < s->nshards; k++)
        run_on_loop(s->shards[k].pool, shard_detach, &s->shards[k]);
    for (int k = 0; k < s->nshards; k++)
        MHD_stop_daemon(s->shards[k].daemon);
    hold_set_free(s->holds);
    pthread_cond_destroy(&s->reg_cond);
    pthread_mutex_destroy(&s->reg_lock);
    free(s);
}
