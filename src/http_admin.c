/* http_admin.c - an operator's force release: DELETE /locks/{name},
 * /elections/{name} or /semaphores/{name} with ?force=true and the admin
 * token (--admin-token-file) as Authorization: Bearer. It frees the name
 * whatever token holds it, tells every waiter and every held stream of it
 * ("lost", reason "forced"), and is logged (http_int.h). */
#include "http_int.h"

bool force_asked(req_ctx *ctx, const char *method)
{
    return !strcmp(method, "DELETE") &&
           MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "force") != NULL;
}

/* The client's address, for the log. */
static void client_of(req_ctx *ctx, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN + 1] = "", port[8] = "";
    if (!ctx->ci || !ctx->ci->peer_len ||
        getnameinfo((const struct sockaddr *)&ctx->ci->peer, ctx->ci->peer_len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, cap, "unknown");
        return;
    }
    snprintf(out, cap, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

static void log_force(req_ctx *ctx, const char *what, long long fence, const char *owner, int permits)
{
    char client[INET6_ADDRSTRLEN + 16], f[24], n[16];
    client_of(ctx, client, sizeof client);
    snprintf(f, sizeof f, "%lld", fence);
    snprintf(n, sizeof n, "%d", permits);
    log_event(LOG_LEVEL_WARN, "force_release", "kind", what, "name", ctx->label, "held", permits ? "yes" : "no",
              "fence", f, "owner", owner, "permits", n, "client", client, NULL);
}

void forced_lock(req_ctx *ctx, const rl_result *res)
{
    hold_forced(ctx->s->holds, ctx->req.name);   /* (a notice tells the other instances) */
    log_force(ctx, ctx->route == ROUTE_ELECTION ? "election" : "lock", res->held ? res->fence : 0,
              res->held ? res->owner : "", res->held);
}

void forced_permits(req_ctx *ctx, const sem_result *res)
{
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

enum MHD_Result force_dispatch(req_ctx *ctx, const char *name)
{
    http_server *s = ctx->s;
    ctx->mroute = METRICS_ROUTE_RELEASE;   /* (refused ones too) */
    char buf[16];
    const char *force = http_query_arg(ctx, "force", buf, sizeof buf);
    if (strcmp(force, "true"))
        return send_error(ctx, API_E_BAD_REQUEST, "force must be true", NULL);
    if (!s->cfg->admin_token)
        return send_error(ctx, API_E_FORBIDDEN, "force release is off: the service has no --admin-token-file",
                          NULL);
    const char *got = http_bearer(ctx);
    if (!http_secret_is(s->cfg->admin_token, got)) {
        /* The ordinary token is known but not enough: 403; anything else 401. */
        bool ordinary = http_secret_is(s->cfg->auth_token, got);
        return send_error(ctx, ordinary ? API_E_FORBIDDEN : API_E_UNAUTHORIZED,
                          ordinary ? "force release needs the admin token, not the ordinary one"
                                   : "force release needs the admin token as Authorization: Bearer",
                          NULL);
    }
    if (!rules_name_valid(name, strlen(name)))
        return send_error(ctx, API_E_BAD_NAME, "the name must be " API_NAME_RULE, NULL);
    ctx->force = true;
    snprintf(ctx->label, sizeof ctx->label, "%s", name);
    if (ctx->route == ROUTE_SEMAPHORE) {
        ctx->sem = calloc(1, sizeof *ctx->sem);
        ctx->sem_res = calloc(1, sizeof *ctx->sem_res);
        if (!ctx->sem || !ctx->sem_res)
            return send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
        ctx->sem->op = SEM_FORCE;
        snprintf(ctx->sem->name, sizeof ctx->sem->name, "%s", name);
        return sem_start(ctx);
    }
    memset(&ctx->req, 0, sizeof ctx->req);
    ctx->req.op = RL_FORCE;
    if (ctx->route == ROUTE_ELECTION)
        election_lock_name(name, ctx->req.name, sizeof ctx->req.name);
    else
        snprintf(ctx->req.name, sizeof ctx->req.name, "%s", name);
    return submit(ctx);
}
