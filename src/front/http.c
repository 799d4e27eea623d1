/* http.c - see http.h; the layer's files are listed in http_int.h. This
 * one: a request's life, the top of the layer: it reads the request,
 * routes it through the table (http_routes.c), answers it once the engine
 * did with the function its handler chose, and completes it by running
 * its cleanup handlers. It names no route's handler and no recipe. */
#include "http_int.h"

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

/* The engine answered ctx: a grant nobody will read is not sent (its
 * cleanup releases it); else the answer its handler chose
 * (http_suspend_for_engine). */
static enum MHD_Result answer(req_ctx *ctx)
{
    if (ctx->w->res.outcome == RL_CANCELLED ||
        (ctx->w->res.outcome == RL_OK && ctx->w->req.op == RL_ACQUIRE && ctx->ci && http_client_gone(ctx->ci->fd))) {
        ctx->gone = true;
        return MHD_NO;
    }
    return ctx->answer(ctx);
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
        return atomic_load(&ctx->result_ready) ? answer(ctx) : MHD_YES;
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
