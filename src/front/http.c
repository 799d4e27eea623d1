/* http.c - see http.h; the layer's files are listed in http_int.h. This
 * one: a request's life (routing, answers, suspension, completion). */
#include "http_int.h"

static void kick_job(void *arg) { (void)arg; }

/* Resumes ctx's connection and makes its loop run the daemon soon: at once
 * on its next turn when called on the loop, else by waking it. Any thread. */
void http_ctx_wake(req_ctx *ctx)
{
    http_shard *sh = ctx->sh;
    MHD_resume_connection(ctx->conn);
    atomic_store(&sh->kick, true);
    if (!loop_on(mpool_loop(sh->pool)))
        loop_post(mpool_loop(sh->pool), kick_job, NULL);   /* wakes it; on the loop the kick is seen */
}

/* ---- answers ---- */

enum MHD_Result http_send_body(req_ctx *ctx, int status, char *body, const char *allow,
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
    static const char no_quorum[] = "{\"error\":\"no_quorum\"";
    if (status == 503 && body && !strncmp(body, no_quorum, sizeof no_quorum - 1))
        metrics_count(ctx->s->m, METRICS_NO_QUORUM);   /* answered, not retried inside */
    return http_send_response(ctx, status, r);
}

enum MHD_Result http_send_response(req_ctx *ctx, int status, struct MHD_Response *r)
{
    /* Stopping: serve what arrives on open connections, then close them so
     * clients move on to another instance instead of meeting a 503. */
    if (atomic_load(&ctx->s->quiescing) || ctx->close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(ctx->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    ctx->answered = true;
    metrics_request(ctx->s->m, ctx->mroute, status, loop_now_us() - ctx->start_us);
    return rc;
}

enum MHD_Result http_send_error(req_ctx *ctx, enum api_err e, const char *message,
                           const char *allow)
{
    return http_send_body(ctx, api_errors[e].status, api_error_json(e, message), allow, 0, true);
}

/* ---- auth, and a request's suspension for the engine ---- */

const char *http_bearer(req_ctx *ctx)
{
    const char *got = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return got && strncasecmp(got, "Bearer ", 7) == 0 ? got + 7 : NULL;   /* the scheme is case-insensitive */
}

bool http_secret_is(const char *want, const char *got)
{
    if (!want || !got)
        return false;
    size_t wl = strlen(want), gl = strlen(got);
    /* Compare in time that depends on the secret's length only. */
    unsigned char diff = (unsigned char)(wl != gl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

/* Suspends ctx's connection before its request goes to the engine (whose
 * answer may come at once, and resumes it): the registry knows it waits. */
/* The engine's request ends with the connection: an answer that did not
 * reach the client releases its grant (a held stream's grant is the
 * hold's to release). */
static void engine_cleanup(req_ctx *ctx, bool completed_ok)
{
    http_server *s = ctx->s;
    metrics_inflight(s->m, -1);
    bool delivered = ctx->hold || (completed_ok && ctx->answered && !ctx->gone && !ctx->forced);
    if (ctx->sem && !delivered && atomic_load(&ctx->result_ready) && !ctx->forced &&
        ctx->sem->op == SEM_ACQUIRE && ctx->sem_res->outcome == RL_OK)
        http_sem_give_back(s, ctx->sh->pool, ctx->sem->name, ctx->sem_res);
    if (!(delivered && ctx->confirm_fd >= 0 && http_check_delivery(ctx)))
        rl_finish(ctx->eng, ctx->h, delivered);
}

void http_suspend_for_engine(req_ctx *ctx)
{
    http_server *s = ctx->s;
    http_on_cleanup(ctx, engine_cleanup);
    pthread_mutex_lock(&s->reg_lock);
    ctx->susp = true;
    if (ctx->ci)
        ctx->ci->suspended = ctx;
    pthread_mutex_unlock(&s->reg_lock);
    MHD_suspend_connection(ctx->conn);
    ctx->submitted = true;
    metrics_inflight(s->m, 1);
}

void http_ctx_unref(req_ctx *ctx)
{
    if (atomic_fetch_sub(&ctx->refs, 1) == 1) {
        if (ctx->confirm_fd >= 0)
            close(ctx->confirm_fd);
        if (ctx->semh)
            sem_finish(ctx->semh);
        free(ctx->sem);
        free(ctx->sem_res);
        free(ctx->list_body);
        free(ctx->body);
        free(ctx->w);
        free(ctx);
    }
}

/* Takes ctx out of its suspension with result res (once, whoever comes
 * first: the engine's answer, or a shutdown that could not wait for it) and
 * resumes the connection; sem_res, when not NULL, is a semaphore's whole
 * answer, kept beside its outcome. Returns false when it was no longer
 * suspended: res is then not the one answered. */
bool http_ctx_resume(req_ctx *ctx, const rl_result *res, const sem_result *sem_res)
{
    http_server *s = ctx->s;
    pthread_mutex_lock(&s->reg_lock);
    bool was = ctx->susp;
    if (was) {
        ctx->w->res = *res;
        if (sem_res)
            *ctx->sem_res = *sem_res;
        atomic_store(&ctx->result_ready, true);
        ctx->susp = false;
        if (ctx->ci)
            ctx->ci->suspended = NULL;
    }
    pthread_mutex_unlock(&s->reg_lock);
    if (was)
        http_ctx_wake(ctx);
    return was;
}

/* Takes ctx out of its suspension as the registry sees it (the watcher and
 * the shutdown look there). Returns whether it was suspended: whoever gets
 * true owns the matching MHD_resume_connection. */
bool http_ctx_unsuspend(req_ctx *ctx)
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

/* Has the connection failed (reset, or closed both ways)? Then an answer
 * cannot reach the client. A FIN alone is not that: a half-closed client
 * (shutdown(SHUT_WR), `nc -N`, Go's CloseWrite) still reads its answer. */
bool http_client_gone(int fd)
{
    struct pollfd pfd = {fd, 0, 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR));
}

/* Has the client sent its FIN (closed or half-closed)? */
bool http_client_done_sending(int fd)
{
    struct pollfd pfd = {fd, POLLRDHUP, 0};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    api_framing_header(cls, key, value);
    return MHD_YES;
}

/* RFC 9112's framing rules (api_framing_verdict): a message without a
 * trustworthy end is answered and closed before its body is read, since
 * behind a proxy that reads it otherwise whatever follows would be another
 * request (smuggling). Returns the error, or -1. */
static int framing_error(struct MHD_Connection *conn, const char *version, char *msg,
                         size_t msglen)
{
    api_framing f;
    memset(&f, 0, sizeof f);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &f);
    return api_framing_verdict(&f, version && !strcmp(version, MHD_HTTP_VERSION_1_1), msg, msglen);
}

/* The name in ctx's path, decoded once into ctx->w->name (the url is as the
 * client sent it: unescape leaves it alone, so that "%2F" is part of a
 * name and not a path separator). A name that does not decode, or is
 * longer than any name, becomes "", which every name rule refuses. */
static void decode_route_name(req_ctx *ctx, const char *url)
{
    const char *raw = ctx->route_name;
    if (!raw)
        return;
    size_t len = strlen(raw);
    if (ctx->route == ROUTE_HEARTBEAT)
        ctx->beat_kind = api_heartbeat_of(url, &raw, &len);
    else if (ctx->route == ROUTE_ELECTION_VALUE)
        len -= strlen("/value");
    if (rules_percent_decode(raw, len, ctx->w->name, sizeof ctx->w->name) < 0)
        ctx->w->name[0] = '\0';
    ctx->route_name = ctx->w->name;
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version,
                           const char *upload_data, size_t *upload_data_size,
                           void **con_cls)
{
    http_shard *sh = cls;
    http_server *s = sh->s;
    req_ctx *ctx = *con_cls;

    if (!ctx) {
        if (http_park(sh, conn, url, method))
            return MHD_YES;   /* held back, unread: the admission queue is long */
        ctx = calloc(1, sizeof *ctx);
        if (ctx && !(ctx->w = calloc(1, sizeof *ctx->w))) {
            free(ctx);
            ctx = NULL;
        }
        if (!ctx)
            return MHD_NO;
        ctx->s = s;
        ctx->sh = sh;
        ctx->conn = conn;
        atomic_init(&ctx->refs, 1);
        ctx->confirm_fd = -1;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        ctx->ci = ci ? ci->socket_context : NULL;
        ctx->start_us = loop_now_us();
        pthread_mutex_lock(&s->reg_lock);
        s->nrequests++;   /* until http_on_completed: a shutdown answers it first */
        pthread_mutex_unlock(&s->reg_lock);
        /* Routed once: the path, and the name in it, stay as they are
         * while the body arrives (url points into the connection). */
        ctx->route = api_route_of(url, &ctx->route_name);
        enum api_route by_query = api_force_route_of(url);
        if (by_query != ROUTE_NOT_FOUND) {
            /* the force release's query form, for "." and ".." (api.h) */
            const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "name");
            ctx->route = by_query;
            ctx->route_name = q ? q : "";
            ctx->force_query = true;
        }
        decode_route_name(ctx, url);
        ctx->mroute = ctx->route == ROUTE_HEALTHZ  ? METRICS_ROUTE_HEALTHZ
                      : ctx->route == ROUTE_READYZ ? METRICS_ROUTE_READYZ
                      : ctx->route == ROUTE_METRICS ? METRICS_ROUTE_METRICS
                      : ctx->route == ROUTE_LOCK ? METRICS_ROUTE_INSPECT
                      : ctx->route == ROUTE_DAPR_LOCK ? METRICS_ROUTE_DAPR_LOCK
                      : ctx->route == ROUTE_DAPR_UNLOCK ? METRICS_ROUTE_DAPR_UNLOCK
                                                 : METRICS_ROUTE_OTHER;
        *con_cls = ctx;
        char why[200];
        int bad = framing_error(conn, version, why, sizeof why);
        if (bad >= 0) {
            ctx->close = true;
            return http_send_error(ctx, (enum api_err)bad, why, NULL);
        }
        /* Refuse a declared oversize body before reading it. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg->max_body_bytes)
            return http_send_error(ctx, API_E_TOO_LARGE, "the request body is too large", NULL);
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
        return atomic_load(&ctx->result_ready) ? http_lock_answer(ctx) : MHD_YES;
    }
    if (ctx->ci) {
        pthread_mutex_lock(&s->reg_lock);
        ctx->ci->busy = true;   /* complete: the request deadline no longer applies */
        pthread_mutex_unlock(&s->reg_lock);
    }

    enum api_route route = ctx->route;
    /* A browser's page of another origin, or of a rebound name (api.h):
     * before anything else, so that nothing is read or changed for it. */
    char why[300];
    int foreign = api_origin_verdict(s->cfg, http_listener_kind(ctx), route,
                                     MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
                                     MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"), why, sizeof why);
    if (foreign >= 0)
        return http_send_error(ctx, (enum api_err)foreign, why, NULL);
    return http_route_serve(ctx, method);
}

void http_on_cleanup(req_ctx *ctx, http_cleanup_fn fn)
{
    for (int i = 0; i < ctx->ncleanups; i++)
        if (ctx->cleanups[i] == fn)
            return;
    if (ctx->ncleanups < HTTP_CLEANUPS_MAX)
        ctx->cleanups[ctx->ncleanups++] = fn;
    else
        abort();   /* more kinds of things attached than there are: a bug */
}

void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                  enum MHD_RequestTerminationCode toe)
{
    req_ctx *ctx = *con_cls;
    http_server *s = ((http_shard *)cls)->s;
    (void)conn;
    if (!ctx)
        return;
    /* Whatever attached to the request tears itself down, the last first. */
    while (ctx->ncleanups > 0)
        ctx->cleanups[--ctx->ncleanups](ctx, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    pthread_mutex_lock(&s->reg_lock);
    s->nrequests--;
    s->nprobed -= ctx->probed;
    if (ctx->ci) {
        ctx->ci->busy = false;
        ctx->ci->phase_start_us = loop_now_us();   /* the next request's deadline starts */
    }
    pthread_cond_broadcast(&s->reg_cond);
    pthread_mutex_unlock(&s->reg_lock);
    *con_cls = NULL;
    http_ctx_unref(ctx);
}

/* libmicrohttpd's unescape callback, for the path and each query argument:
 * leaves them as the client sent them. The path's name is decoded once
 * after routing (decode_route_name), so that "%2F" in a name is not a path
 * separator; a query argument, where it is read (http_query_arg). */
size_t http_unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

const char *http_query_arg(req_ctx *ctx, const char *key, char *buf, size_t cap)
{
    const char *raw = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, key);
    if (!raw)
        return NULL;
    if (rules_percent_decode(raw, strlen(raw), buf, cap) < 0)
        buf[0] = '\0';
    return buf;
}

int http_pick_token(req_ctx *ctx, bool token_in_body, char *msg, size_t msglen)
{
    const char *hdr = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "Lock-Token");
    char buf[HTTP_QUERY_ARG_MAX];
    const char *query = http_query_arg(ctx, "token", buf, sizeof buf);
    return api_pick_token(hdr, query, token_in_body, &ctx->w->req, msg, msglen);
}

/* libmicrohttpd's messages are mostly caused by clients (a connection
 * dropped mid-request): rate-limited, with a count of what was left out. */
void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
    static log_limit limit = LOG_LIMIT_INIT;
    (void)cls;
    unsigned long long suppressed;
    if (!log_allow(&limit, loop_now_us(), &suppressed))
        return;
    char msg[512], more[24];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    snprintf(more, sizeof more, "%llu", suppressed);
    log_event(LOG_LEVEL_WARN, "http_error", "error", msg, "suppressed_since_last", more, NULL);
}
