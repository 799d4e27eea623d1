/* http_locks.c - the lock and Dapr routes, and held streams' answers
 * (http_int.h). */
#include "http_int.h"


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

enum MHD_Result http_lock_answer(req_ctx *ctx)
{
    int status;
    long long retry_after_s = 0;
    http_audit_result(ctx);
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
    return http_submit(ctx, http_lock_answer);
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
    return http_submit(ctx, http_lock_answer);
}
