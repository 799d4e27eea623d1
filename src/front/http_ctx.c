/* http_ctx.c - a request's context, below every route (http_int.h): its
 * answers, its suspension and resumption, its cleanup handlers, what it
 * asks (query arguments, tokens), who may do what (the rights, the audit
 * log) and which loop serves a name. The route handlers and http.c call
 * down into it; it calls none of them. */
#include "http_int.h"
#include "auth.h"

/* ---- the context: waking, resuming, cleanup ---- */

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

/* ---- rights and the audit log ---- */

static const char *right_word(unsigned right)
{
    return right == RIGHT_ADMIN ? "force" : right == RIGHT_LOCK ? "lock" : "read";
}

void http_audit(req_ctx *ctx, const char *event, const char *outcome, const char *name, long long fence)
{
    if (!audit_on())
        return;
    char client[INET6_ADDRSTRLEN + 16], route[160];
    http_client_addr(ctx, client, sizeof client);
    snprintf(route, sizeof route, "%s %s", ctx->method ? ctx->method : "?", ctx->row ? ctx->row->pattern : "?");
    audit_event ev = {.event = event, .principal = ctx->principal ? ctx->principal->name : NULL,
                      .client = client, .route = route, .name = name, .outcome = outcome, .fence = fence};
    audit_write(&ev);
}

/* A refusal: answered, and written to the audit log with the name refused
 * (NULL: none, a listing's). */
static enum MHD_Result refuse_name(req_ctx *ctx, const http_route *r, enum api_err e, const char *message,
                                   const char *name)
{
    http_audit(ctx, "refused", api_errors[e].status == 401 ? "401" : "403", name, 0);
    if (r->auth == AUTH_DAPR) {
        const char *code = e == API_E_UNAUTHORIZED ? "ERR_UNAUTHORIZED" : "ERR_PERMISSION_DENIED";
        return http_send_body(ctx, api_errors[e].status, api_dapr_error_json(code, message), NULL, 0, true);
    }
    return http_send_error(ctx, e, message, NULL);
}

/* A refusal of the path's name (a listing's: none). */
enum MHD_Result http_refuse(req_ctx *ctx, const http_route *r, enum api_err e, const char *message)
{
    return refuse_name(ctx, r, e, message, ctx->route_name);
}

bool http_may(req_ctx *ctx, unsigned right, const char *name, enum MHD_Result *rc)
{
    if (auth_may(ctx->principal, right, name))
        return true;
    char m[400];
    snprintf(m, sizeof m, "%s may not %s the name %.200s", ctx->principal ? ctx->principal->name : "this caller",
             right_word(right), name ? name : "");
    /* The name refused: a Dapr lock's is its key name once its body is
     * read (as gRPC's refusal says), else the path's (Dapr's: its store). */
    *rc = refuse_name(ctx, ctx->row, API_E_FORBIDDEN, m, name ? name : ctx->route_name);
    return false;
}

/* ---- which loop serves a name, and the audit of an engine's answer ---- */

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

rl_engine *http_engine_of_name(void *arg, const char *name)
{
    http_server *s = arg;
    return s->shards[s->nshards == 1 ? 0 : http_loop_of(name, s->nshards)].engine;
}

rl_engine *http_engine_for(const req_ctx *ctx)
{
    if (ctx->s->nshards == 1 || ctx->w->req.op == RL_INSPECT)
        return ctx->sh->engine;
    return http_engine_of_name(ctx->s, ctx->w->req.name);
}

/* The audit log's line for an engine's answer that changed who holds what,
 * or an extension that failed. */
void http_audit_result(req_ctx *ctx)
{
    const rl_request *q = &ctx->w->req;
    const rl_result *r = &ctx->w->res;
    const char *name = ctx->election || ctx->force ? ctx->w->label : q->name;
    if (q->op == RL_ACQUIRE && r->outcome == RL_OK)
        http_audit(ctx, "grant", ctx->dapr ? "200" : "201", name, r->fence);
    else if (q->op == RL_RELEASE && r->outcome == RL_OK)
        http_audit(ctx, "release", ctx->dapr ? "200" : "204", name, 0);
    else if (q->op == RL_EXTEND && r->outcome != RL_OK)
        http_audit(ctx, "extend_failed", r->outcome == RL_NOT_HELD ? "409" : "503", name, 0);
    else if (q->op == RL_FORCE && r->outcome == RL_OK)
        http_audit(ctx, "force", "204", name, r->held ? r->fence : 0);
}
