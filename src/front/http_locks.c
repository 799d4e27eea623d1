/* http_locks.c - the lock and Dapr routes, and held streams' answers
 * (http_int.h). */
#include "http_int.h"

/* Engine callback, on the loop thread. */
static void lock_done(void *arg, const rl_result *res)
{
    req_ctx *ctx = arg;
    if (ctx->w->req.op == RL_RELEASE && res->outcome == RL_OK && !ctx->dapr)
        hold_released(ctx->s->holds, ctx->w->req.name, ctx->w->req.token);
    if (ctx->w->req.op == RL_FORCE && res->outcome == RL_OK)
        http_forced_lock(ctx, res);
    http_ctx_resume(ctx, res, NULL);   /* when a shutdown answered first, rl_finish releases a grant */
    http_ctx_unref(ctx);
}

/* A hold has something to read: resume its connection if it is suspended
 * waiting for that (called with the hold set's mutex held; never after
 * hold_close). */
void http_hold_wake(void *arg)
{
    req_ctx *ctx = arg;
    if (http_ctx_unsuspend(ctx))
        http_ctx_wake(ctx);
}

/* libmicrohttpd asks for the next part of a held stream. With nothing to
 * send, the connection is suspended until http_hold_wake (or the watcher, when
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
        if (!http_ctx_unsuspend(ctx))
            MHD_suspend_connection(ctx->conn);
        return n > 0 ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
    }
    MHD_suspend_connection(ctx->conn);
    return 0;
}


static void reservation_cleanup(req_ctx *ctx, bool completed_ok)
{
    if (ctx->hold_reserved)   /* (a hold or a watch that started took it over) */
        hold_unreserve(ctx->s->holds);
}

/* A place for ctx's held stream among --max-holds, kept until the stream
 * starts (or the request ends: its cleanup gives it back). */
bool http_reserve_hold(req_ctx *ctx)
{
    ctx->hold_reserved = hold_reserve(ctx->s->holds);
    if (ctx->hold_reserved)
        http_on_cleanup(ctx, reservation_cleanup);
    return ctx->hold_reserved;
}

static void hold_cleanup(req_ctx *ctx, bool completed_ok)
{
    hold_close(ctx->hold);   /* the stream ended or broke: released unless it is over */
}

/* ctx became the held stream h (NULL: it could not). */
void http_hold_attach(req_ctx *ctx, hold *h)
{
    ctx->hold = h;
    if (!h)
        return;
    http_on_cleanup(ctx, hold_cleanup);
    if (audit_on()) {   /* its loss (or terms) are written with who opened it */
        char client[INET6_ADDRSTRLEN + 16], route[160];
        http_client_addr(ctx, client, sizeof client);
        snprintf(route, sizeof route, "%s %s", ctx->method ? ctx->method : "?", ctx->row ? ctx->row->pattern : "?");
        hold_audit_as(h, ctx->principal ? ctx->principal->name : "", client, route);
    }
}

enum MHD_Result http_too_many_holds(req_ctx *ctx)
{
    char *body = api_error_json(API_E_TOO_MANY_HOLDS, "too many held streams are open already (--max-holds)");
    return http_send_body(ctx, api_errors[API_E_TOO_MANY_HOLDS].status, body, NULL, 1, true);
}

/* A held stream that could not start: the service is stopping, or out of
 * memory. */
enum MHD_Result http_stream_refused(req_ctx *ctx)
{
    bool stopping = atomic_load(&ctx->s->quiescing);
    return http_send_error(ctx, stopping ? API_E_SHUTTING_DOWN : API_E_INTERNAL,
                      stopping ? "the service is shutting down" : "out of memory", NULL);
}

/* A granted acquire with "hold": a 201 whose body is the held stream. */
static enum MHD_Result hold_answer(req_ctx *ctx)
{
    http_server *s = ctx->s;
    http_hold_attach(ctx, hold_start(s->holds, ctx->eng, &ctx->w->req, &ctx->w->res, ctx->start_us,
                                     ctx->ci ? ctx->ci->fd : -1, http_hold_wake, ctx));
    if (!ctx->hold) {
        /* Stopping (or out of memory): the grant is not delivered, so
         * rl_finish releases it. */
        ctx->forced = true;
        return http_stream_refused(ctx);
    }
    ctx->hold_reserved = false;   /* the reservation is the hold now */
    /* The grant is the hold's now (http_on_completed would finish it as
     * delivered): the engine's task is let go at once rather than kept as
     * long as the stream (about 3 KiB a lease). */
    pthread_mutex_lock(&s->reg_lock);
    rl_handle *h = ctx->h;
    ctx->h = NULL;
    pthread_mutex_unlock(&s->reg_lock);
    rl_finish(ctx->eng, h, true);
    return http_stream_answer(ctx, 201);
}

/* A stream's connection closes with it: one more turn of the daemon right
 * away frees it, rather than whenever something next wakes the daemon. */
static void stream_cleanup(req_ctx *ctx, bool completed_ok)
{
    atomic_store(&ctx->sh->kick, true);
}

/* An NDJSON answer read from ctx's hold or watch (hold_reader). */
enum MHD_Result http_stream_answer(req_ctx *ctx, unsigned status)
{
    http_on_cleanup(ctx, stream_cleanup);
    /* Chunked (HTTP/1.1), libmicrohttpd has hold_reader write into the
     * connection's own buffer and never uses the response's block, which
     * it allocates (and zeroes) with the response: a small one saves 1 KiB
     * a lease. An HTTP/1.0 client reads the stream through it, an event in
     * a few calls (hold_read keeps the rest). */
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK,
                                                               hold_reader, ctx, NULL);
    if (!r)
        return MHD_NO;   /* http_on_completed closes the hold, which releases */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* The connection ends with the stream: its client's FIN or reset may
     * come while the stream waits (suspended), when libmicrohttpd does not
     * look, and a connection kept alive after it would wait for a request
     * that never comes. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(ctx->conn, status, r);
    MHD_destroy_response(r);
    ctx->answered = true;
    http_watch_stream(ctx);   /* its client's FIN or reset is seen at once */
    metrics_request(ctx->s->m, ctx->mroute, (int)status, loop_now_us() - ctx->start_us);
    /* The request is over: what the stream says comes from its hold or
     * watch (a shutdown that ends it sets ->gone, not a result). */
    free(ctx->w);
    ctx->w = NULL;
    ctx->route_name = NULL;
    return rc;
}

/* The audit log's line for an engine's answer that changed who holds what,
 * or an extension that failed. */
static void audit_result(req_ctx *ctx)
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

enum MHD_Result http_lock_answer(req_ctx *ctx)
{
    int status;
    long long retry_after_s = 0;
    /* A grant nobody will read is not sent: http_on_completed releases it. */
    if (ctx->w->res.outcome == RL_CANCELLED ||
        (ctx->w->res.outcome == RL_OK && ctx->w->req.op == RL_ACQUIRE && ctx->ci && http_client_gone(ctx->ci->fd))) {
        ctx->gone = true;
        return MHD_NO;
    }
    if (ctx->list)
        return http_list_answer(ctx);
    if (!ctx->sem)
        audit_result(ctx);
    if (ctx->election)
        return http_election_answer(ctx);
    if (ctx->sem)
        return http_sem_answer(ctx);
    if (ctx->w->req.hold && ctx->w->res.outcome == RL_OK)
        return hold_answer(ctx);
    /* A grant to a client that sent its FIN is answered, and the watcher
     * learns whether it arrived (delivery_check). */
    if (ctx->w->res.outcome == RL_OK && ctx->w->req.op == RL_ACQUIRE && ctx->ci &&
        http_client_done_sending(ctx->ci->fd))
        ctx->confirm_fd = fcntl(ctx->ci->fd, F_DUPFD_CLOEXEC, 0);
    if (ctx->w->req.op == RL_ACQUIRE && ctx->w->res.outcome == RL_LOCKED && !ctx->dapr && !ctx->w->req.hold &&
        testhook_breaks(TESTHOOK_DOUBLE_GRANT)) {
        /* Test hook: a grant that is none (REDLOCKD_TEST_BREAK). */
        rl_result *res = &ctx->w->res;
        res->outcome = RL_OK;
        if (token_new(res->token) < 0)
            snprintf(res->token, sizeof res->token, "double-grant");
        res->ttl_ms = ctx->w->req.ttl_ms;
        res->validity_ms = ctx->w->req.ttl_ms - 1;
        res->fence = loop_unix_us();
    }
    if (ctx->dapr) {
        char *body = api_dapr_result_json(ctx->w->req.op == RL_RELEASE, &ctx->w->res, &status);
        if (!body)
            return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
        return http_send_body(ctx, status, body, NULL, 0, true);
    }
    char *body = api_result_json(&ctx->w->req, &ctx->w->res, &status, &retry_after_s);
    if (!body && status != 204)
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return http_send_body(ctx, status, body, NULL, retry_after_s, true);
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

/* Hands ctx->w->req to the engine; lock_done resumes the connection. */
enum MHD_Result http_submit(req_ctx *ctx)
{
    http_server *s = ctx->s;
    http_suspend_for_engine(ctx);   /* the engine may answer (and resume) at once */
    atomic_fetch_add(&ctx->refs, 1);   /* the engine's, until lock_done */
    rl_handle *h = NULL;
    ctx->eng = http_engine_for(ctx);
    if (rl_submit(ctx->eng, &ctx->w->req, lock_done, ctx, &h) < 0) {
        atomic_fetch_sub(&ctx->refs, 1);
        rl_result down = {.outcome = RL_SHUTTING_DOWN};
        http_ctx_resume(ctx, &down, NULL);
        return MHD_YES;
    }
    pthread_mutex_lock(&s->reg_lock);
    ctx->h = h;   /* from now on the watcher may cancel it */
    pthread_mutex_unlock(&s->reg_lock);
    return MHD_YES;
}

enum MHD_Result http_lock_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    if (!rules_name_valid(name, strlen(name)))
        return http_send_error(ctx, API_E_BAD_NAME,
                          "the lock name must be " API_NAME_RULE, NULL);
    enum rl_op op = api_op_of(method);
    enum api_err err;
    char msg[160];
    bool token_in_body;
    memset(&ctx->w->req, 0, sizeof ctx->w->req);
    if (api_parse_body(op, ctx->body ? ctx->body : "", ctx->body_len, &s->limits, &ctx->w->req,
                       &token_in_body, &err, msg, sizeof msg) < 0)
        return http_send_error(ctx, err, msg, NULL);
    snprintf(ctx->w->req.name, sizeof ctx->w->req.name, "%s", name);
    ctx->w->req.queued = true;
    if (op == RL_EXTEND || op == RL_RELEASE) {
        if (http_pick_token(ctx, token_in_body, msg, sizeof msg) < 0)
            return http_send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    }
    if (op == RL_RELEASE && testhook_breaks(TESTHOOK_RELEASE_NOOP))
        return http_send_body(ctx, 204, NULL, NULL, 0, true);   /* test hook: released nothing */
    ctx->mroute = op == RL_ACQUIRE  ? METRICS_ROUTE_ACQUIRE
                  : op == RL_EXTEND ? METRICS_ROUTE_EXTEND
                  : op == RL_RELEASE ? METRICS_ROUTE_RELEASE
                                     : METRICS_ROUTE_INSPECT;
    if (ctx->w->req.hold && !http_reserve_hold(ctx))
        return http_too_many_holds(ctx);
    return http_submit(ctx);
}

/* POST /v1.0-alpha1/lock|unlock/{store}, in Dapr's wire format. */
enum MHD_Result http_dapr_dispatch(req_ctx *ctx, const char *method, const char *store)
{
    http_server *s = ctx->s;
    bool unlock = ctx->route == ROUTE_DAPR_UNLOCK;
    const char *code;
    char msg[400];
    ctx->dapr = true;
    if (api_parse_dapr(unlock, store, s->cfg->dapr_stores, ctx->body ? ctx->body : "", ctx->body_len,
                       &s->limits, &ctx->w->req, &code, msg, sizeof msg) < 0)
        return http_send_body(ctx, 400, api_dapr_error_json(code, msg), NULL, 0, true);
    enum MHD_Result rc;
    if (!http_may(ctx, RIGHT_LOCK, ctx->w->req.name, &rc))   /* its key name: APPID||resource */
        return rc;
    ctx->w->req.queued = true;
    return http_submit(ctx);
}
