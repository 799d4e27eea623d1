/* http_engine.c - a request's way to the engine and back (http_int.h):
 * submitting it with the function that answers it, the engine's call
 * back, and a grant that becomes a held stream (its place among
 * --max-holds, its hold, its NDJSON answer). Route handlers call it; it
 * calls none of them. */
#include "http_int.h"

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

/* Suspends ctx's connection before its request goes to the engine (whose
 * answer may come at once, and resumes it): the registry knows it waits,
 * and answer(ctx) answers once the result is in. */
void http_suspend_for_engine(req_ctx *ctx, http_answer_fn answer)
{
    http_server *s = ctx->s;
    ctx->answer = answer;
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

/* Engine callback, on the loop thread. */
static void lock_done(void *arg, const rl_result *res)
{
    req_ctx *ctx = arg;
    if (ctx->w->req.op == RL_RELEASE && res->outcome == RL_OK && !ctx->dapr)
        hold_released(ctx->s->holds, ctx->w->req.name, ctx->w->req.token);
    if (ctx->on_result)
        ctx->on_result(ctx, res);
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
    free(ctx->body);   /* read (and anything after it is never read: answered) */
    ctx->body = NULL;
    ctx->body_len = 0;
    return rc;
}

/* Hands ctx->w->req to the engine; lock_done resumes the connection, and
 * answer(ctx) answers. */
enum MHD_Result http_submit(req_ctx *ctx, http_answer_fn answer)
{
    http_server *s = ctx->s;
    http_suspend_for_engine(ctx, answer);   /* the engine may answer (and resume) at once */
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
