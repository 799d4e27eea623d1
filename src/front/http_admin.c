/* http_admin.c - what operators use beyond /readyz and /metrics: listings
 * of what a majority holds (GET /locks, /elections, /semaphores; listing.h),
 * and an operator's force release: DELETE /locks/{name},
 * /elections/{name} or /semaphores/{name} with ?force=true and the admin
 * token (--admin-token-file) as Authorization: Bearer. It frees the name
 * whatever token holds it, tells every waiter and every held stream of it
 * ("lost", reason "forced"), and is logged (http_int.h). */
#include "http_int.h"
#include "auth.h"

static void log_force(req_ctx *ctx, const char *what, long long fence, const char *owner, int permits)
{
    char client[INET6_ADDRSTRLEN + 16], f[24], n[16];
    http_client_addr(ctx, client, sizeof client);
    snprintf(f, sizeof f, "%lld", fence);
    snprintf(n, sizeof n, "%d", permits);
    log_event(LOG_LEVEL_WARN, "force_release", "kind", what, "name", ctx->w->label, "held", permits ? "yes" : "no",
              "fence", f, "owner", owner, "permits", n, "client", client, NULL);
}

/* A force release of a lock or an election was done: its streams are
 * told, and the force logged. */
static void forced_lock(req_ctx *ctx, const rl_result *res)
{
    if (res->outcome != RL_OK)
        return;
    hold_forced(ctx->s->holds, ctx->w->req.name);   /* (a notice tells the other instances) */
    log_force(ctx, ctx->route == ROUTE_ELECTION ? "election" : "lock", res->held ? res->fence : 0,
              res->held ? res->owner : "", res->held);
}

/* The same for a semaphore's permits. */
static void forced_permits(req_ctx *ctx, const sem_result *res)
{
    if (res->outcome != RL_OK)
        return;
    long long fence = 0;
    const char *owner = "";
    for (int i = 0; i < res->npermits; i++) {
        char slot_name[RL_INTERNAL_NAME_MAX + 1];
        sem_slot_name(ctx->sem->name, res->permits[i].slot, slot_name, sizeof slot_name);
        hold_forced(ctx->s->holds, slot_name);
        if (res->permits[i].fence > fence)
            fence = res->permits[i].fence;
        if (!owner[0])
            owner = res->permits[i].owner;
    }
    log_force(ctx, "semaphore", fence, owner, res->npermits);
}

/* The route table's row for a force release has checked ?force=true and
 * the admin token (http_routes.c). */
enum MHD_Result http_force_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    ctx->mroute = METRICS_ROUTE_RELEASE;
    if (!rules_name_valid(name, strlen(name)))
        return http_send_error(ctx, API_E_BAD_NAME, "the name must be " API_NAME_RULE, NULL);
    ctx->force = true;
    snprintf(ctx->w->label, sizeof ctx->w->label, "%s", name);
    if (ctx->route == ROUTE_SEMAPHORE) {
        ctx->sem = calloc(1, sizeof *ctx->sem);
        ctx->sem_res = calloc(1, sizeof *ctx->sem_res);
        if (!ctx->sem || !ctx->sem_res)
            return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
        ctx->sem->op = SEM_FORCE;
        snprintf(ctx->sem->name, sizeof ctx->sem->name, "%s", name);
        ctx->on_permits = forced_permits;
        return http_sem_start(ctx);
    }
    memset(&ctx->w->req, 0, sizeof ctx->w->req);
    ctx->w->req.op = RL_FORCE;
    if (ctx->route == ROUTE_ELECTION)
        election_lock_name(name, ctx->w->req.name, sizeof ctx->w->req.name);
    else
        snprintf(ctx->w->req.name, sizeof ctx->w->req.name, "%s", name);
    ctx->on_result = forced_lock;
    return http_submit(ctx, http_lock_answer);
}

/* ---- listings: GET /locks, /elections, /semaphores (listing.h) ---- */

static void list_done(void *arg, const rl_result *res, char *body)
{
    req_ctx *ctx = arg;
    rl_finish(ctx->sh->engine, ctx->list_turn, false);   /* its place among --max-inflight */
    ctx->list_turn = NULL;
    ctx->list_body = body;   /* (freed with ctx, answered or not) */
    http_ctx_resume(ctx, res, NULL);
    http_ctx_unref(ctx);
}

/* The page's turn among --max-inflight came (or did not, within
 * --queue-timeout-ms: 503 overloaded), on the engine's loop, the page's. */
static void list_turn(void *arg, const rl_result *res)
{
    req_ctx *ctx = arg;
    if (res->outcome != RL_OK) {
        list_done(ctx, res, NULL);
        return;
    }
    if (list_run(ctx->sh->pool, ctx->s->cfg, &ctx->w->list_req, list_done, ctx) < 0)
        list_done(ctx, &(rl_result){.outcome = RL_SHUTTING_DOWN}, NULL);
}

/* A listing's page, or /ui/state: 200 with the body, else the error as
 * every route answers it (no_quorum with its counts and why). */
enum MHD_Result http_list_answer(req_ctx *ctx)
{
    if (ctx->w->res.outcome == RL_OK) {
        char *body = ctx->list_body;
        ctx->list_body = NULL;
        return http_send_body(ctx, 200, body, NULL, 0, true);
    }
    int status;
    long long retry_after_s = 0;
    rl_request req = {.op = RL_INSPECT};
    char *body = api_result_json(&req, &ctx->w->res, &status, &retry_after_s);
    if (!body)
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return http_send_body(ctx, status, body, NULL, retry_after_s, true);
}

/* A listing shows the names its caller may read. */
static bool may_read(const void *arg, const char *name)
{
    return principal_may(arg, RIGHT_READ, name);
}

enum MHD_Result http_list_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    ctx->mroute = METRICS_ROUTE_LIST;
    list_request req = {.kind = ctx->route == ROUTE_LIST_LOCKS       ? LIST_LOCKS
                                : ctx->route == ROUTE_LIST_ELECTIONS ? LIST_ELECTIONS
                                                                     : LIST_SEMAPHORES,
                        .limit = LIST_LIMIT_DEFAULT};
    char buf[HTTP_QUERY_ARG_MAX];
    const char *prefix = http_query_arg(ctx, "prefix", buf, sizeof buf);
    const char *raw = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "prefix");
    if (prefix && (raw && *raw) && !rules_name_valid(prefix, strlen(prefix)))
        return http_send_error(ctx, API_E_BAD_NAME, "prefix must be the start of a name: " API_NAME_RULE, NULL);
    snprintf(req.prefix, sizeof req.prefix, "%s", prefix ? prefix : "");
    const char *limit = http_query_arg(ctx, "limit", buf, sizeof buf);
    if (limit) {
        char *end;
        long v = strtol(limit, &end, 10);
        if (!*limit || *end || !isdigit((unsigned char)*limit) || v < 1 || v > LIST_LIMIT_MAX)
            return http_send_error(ctx, API_E_BAD_REQUEST, "limit must be an integer from 1 to 1000", NULL);
        req.limit = (int)v;
    }
    /* A cursor that does not decode (a broken escape) is no cursor this
     * service gave: refused, not read as "" (which starts the walk over). */
    const char *cursor = http_query_arg(ctx, "cursor", buf, sizeof buf);
    raw = MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "cursor");
    if ((raw && *raw && !*cursor) || list_cursor_parse(cursor, mpool_size(ctx->sh->pool), &req.pos) < 0)
        return http_send_error(ctx, API_E_BAD_REQUEST, "cursor must be a next this service gave", NULL);
    if (auth_closed()) {
        req.may_see = may_read;
        req.may_arg = ctx->principal;
    }
    ctx->w->list_req = req;
    /* A page's reads wait for a place among --max-inflight, as inspections
     * do: a crowd of listings is paced, never read as masters failing. */
    rl_request turn = {.op = RL_TURN, .queued = true};
    http_suspend_for_engine(ctx, http_list_answer);   /* list_done may come before rl_submit returns */
    atomic_fetch_add(&ctx->refs, 1);   /* list_done's */
    if (rl_submit(ctx->sh->engine, &turn, list_turn, ctx, &ctx->list_turn) < 0) {
        atomic_fetch_sub(&ctx->refs, 1);
        http_ctx_resume(ctx, &(rl_result){.outcome = RL_SHUTTING_DOWN}, NULL);
    }
    return MHD_YES;
}
