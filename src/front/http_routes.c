/* http_routes.c - the route table (http_int.h): one row per method and
 * path pattern, with the right it needs, how its caller proves who it is,
 * and its handler. A request is matched here once its body is read
 * (http_route_serve): 404 when no row has its path, 405 with Allow (the
 * methods of the path's rows) when none has its method, then the auth
 * check of the row, then the row's handler. http.c names no route and no
 * recipe: adding a route is one row here and its handler.
 *
 * The name is taken from the path by api_route_of (api.c: "/locks/{name}"
 * and the like, percent-decoded once, before the body is read), or from
 * the query (name=, the force release's query form for "." and ".."). */
#include "http_int.h"

/* ---- handlers of the small routes ---- */

static enum MHD_Result serve_healthz(req_ctx *ctx, const char *method, const char *name)
{
    return http_send_body(ctx, 200, strdup("{\"status\":\"ok\"}"), NULL, 0, true);
}

static enum MHD_Result serve_dapr_healthz(req_ctx *ctx, const char *method, const char *name)
{
    return http_send_body(ctx, 204, NULL, NULL, 0, true);
}

static enum MHD_Result serve_dapr_metadata(req_ctx *ctx, const char *method, const char *name)
{
    return http_send_body(ctx, 200, api_dapr_metadata_json(ctx->s->cfg->dapr_stores, REDLOCKD_VERSION), NULL, 0,
                     true);
}

/* ---- the table ---- */

#define GETS (HTTP_GET | HTTP_HEAD)

/* Rows of one path are matched in order: a force release's row (force)
 * before the path's DELETE. */
static const http_route routes[] = {
    /* path                  methods      force  right        auth        handler                 pattern */
    {ROUTE_HEALTHZ,          GETS,        false, RIGHT_NONE,  AUTH_BEARER, serve_healthz,       "/healthz"},
    {ROUTE_READYZ,           GETS,        false, RIGHT_NONE,  AUTH_BEARER, http_serve_readyz,        "/readyz"},
    {ROUTE_METRICS,          GETS,        false, RIGHT_NONE,  AUTH_BEARER, http_serve_metrics,       "/metrics"},
    {ROUTE_UI,               GETS,        false, RIGHT_NONE,  AUTH_BEARER, ui_page,             "/ui"},
    {ROUTE_UI_STATE,         GETS,        false, RIGHT_READ,  AUTH_BEARER, ui_state,            "/ui/state"},
    {ROUTE_LIST_LOCKS,       GETS,        false, RIGHT_READ,  AUTH_BEARER, http_list_dispatch,       "/locks"},
    {ROUTE_LIST_ELECTIONS,   GETS,        false, RIGHT_READ,  AUTH_BEARER, http_list_dispatch,       "/elections"},
    {ROUTE_LIST_SEMAPHORES,  GETS,        false, RIGHT_READ,  AUTH_BEARER, http_list_dispatch,       "/semaphores"},
    {ROUTE_LOCK,             HTTP_DELETE, true,  RIGHT_ADMIN, AUTH_BEARER, http_force_dispatch,      "/locks/{name}?force=true"},
    {ROUTE_LOCK,             HTTP_GET,    false, RIGHT_READ,  AUTH_BEARER, http_lock_dispatch,       "/locks/{name}"},
    {ROUTE_LOCK,             HTTP_POST | HTTP_PATCH | HTTP_DELETE,
                                          false, RIGHT_LOCK,  AUTH_BEARER, http_lock_dispatch,       "/locks/{name}"},
    {ROUTE_HEARTBEAT,        HTTP_PUT,    false, RIGHT_LOCK,  AUTH_BEARER, http_heartbeat_dispatch,  "/{kind}/{name}/heartbeat"},
    {ROUTE_ELECTION,         HTTP_DELETE, true,  RIGHT_ADMIN, AUTH_BEARER, http_force_dispatch,      "/elections/{name}?force=true"},
    {ROUTE_ELECTION,         HTTP_GET,    false, RIGHT_READ,  AUTH_BEARER, http_election_dispatch,   "/elections/{name}"},
    {ROUTE_ELECTION,         HTTP_POST | HTTP_DELETE,
                                          false, RIGHT_LOCK,  AUTH_BEARER, http_election_dispatch,   "/elections/{name}"},
    {ROUTE_ELECTION_VALUE,   HTTP_PUT,    false, RIGHT_LOCK,  AUTH_BEARER, http_election_dispatch,   "/elections/{name}/value"},
    {ROUTE_SEMAPHORE,        HTTP_DELETE, true,  RIGHT_ADMIN, AUTH_BEARER, http_force_dispatch,      "/semaphores/{name}?force=true"},
    {ROUTE_SEMAPHORE,        HTTP_GET,    false, RIGHT_READ,  AUTH_BEARER, http_sem_dispatch,        "/semaphores/{name}"},
    {ROUTE_SEMAPHORE,        HTTP_POST | HTTP_PATCH | HTTP_DELETE,
                                          false, RIGHT_LOCK,  AUTH_BEARER, http_sem_dispatch,        "/semaphores/{name}"},
    {ROUTE_DAPR_HEALTHZ,     GETS,        false, RIGHT_NONE,  AUTH_DAPR,   serve_dapr_healthz,  "/v1.0/healthz"},
    {ROUTE_DAPR_METADATA,    HTTP_GET,    false, RIGHT_READ,  AUTH_DAPR,   serve_dapr_metadata, "/v1.0/metadata"},
    {ROUTE_DAPR_LOCK,        HTTP_POST,   false, RIGHT_LOCK,  AUTH_DAPR,   http_dapr_dispatch,       "/v1.0-alpha1/lock/{store}"},
    {ROUTE_DAPR_UNLOCK,      HTTP_POST,   false, RIGHT_LOCK,  AUTH_DAPR,   http_dapr_dispatch,       "/v1.0-alpha1/unlock/{store}"},
};

unsigned http_method_bit(const char *method)
{
    static const struct { const char *name; unsigned bit; } ms[] = {
        {"GET", HTTP_GET}, {"HEAD", HTTP_HEAD}, {"POST", HTTP_POST}, {"PUT", HTTP_PUT},
        {"PATCH", HTTP_PATCH}, {"DELETE", HTTP_DELETE}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (!strcmp(method, ms[i].name))
            return ms[i].bit;
    return 0;
}

const http_route *http_route_find(enum api_route path, unsigned method, bool force, char *allow, size_t cap)
{
    static const char *const names[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"};
    unsigned seen = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const http_route *r = &routes[i];
        /* A force release's form matches its force row only, and no other
         * form matches a force row. */
        if (r->path != path || r->force != force)
            continue;
        if (r->methods & method)
            return r;
        seen |= r->methods;
    }
    if (allow && cap) {
        allow[0] = '\0';
        size_t o = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (seen & (1u << k))
                o += (size_t)snprintf(allow + o, o < cap ? cap - o : 0, "%s%s", o ? ", " : "", names[k]);
    }
    return NULL;
}

bool http_route_known(enum api_route path)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (routes[i].path == path)
            return true;
    return false;
}

/* ---- the auth check: the row's right, in one place ---- */

/* The configured token, from Authorization: Bearer, or on Dapr's routes
 * also from dapr-api-token (as Dapr SDKs send it). */
static bool authorized(req_ctx *ctx, bool dapr)
{
    const char *want = ctx->s->cfg->auth_token;
    if (!want)
        return true;
    const char *got = http_bearer(ctx);
    if (!got && dapr)
        got = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "dapr-api-token");
    return http_secret_is(want, got);
}

/* A force release: ?force=true, an admin token configured, and sent. */
static enum MHD_Result admin_refusal(req_ctx *ctx)
{
    http_server *s = ctx->s;
    ctx->mroute = METRICS_ROUTE_RELEASE;   /* (refused ones too) */
    char buf[16];
    const char *force = http_query_arg(ctx, "force", buf, sizeof buf);
    if (!force || strcmp(force, "true"))   /* (absent: the query form without it) */
        return http_send_error(ctx, API_E_BAD_REQUEST, "force must be true", NULL);
    if (!s->cfg->admin_token)
        return http_send_error(ctx, API_E_FORBIDDEN, "force release is off: the service has no --admin-token-file",
                          NULL);
    const char *got = http_bearer(ctx);
    if (http_secret_is(s->cfg->admin_token, got))
        return MHD_YES;
    /* The ordinary token is known but not enough: 403; anything else 401. */
    bool ordinary = http_secret_is(s->cfg->auth_token, got);
    return http_send_error(ctx, ordinary ? API_E_FORBIDDEN : API_E_UNAUTHORIZED,
                      ordinary ? "force release needs the admin token, not the ordinary one"
                               : "force release needs the admin token as Authorization: Bearer",
                      NULL);
}

/* Whether ctx may not go on to r's handler: then *rc is the result of the
 * refusal answered. */
static bool refused(req_ctx *ctx, const http_route *r, enum MHD_Result *rc)
{
    if (r->right == RIGHT_NONE)
        return false;
    if (r->right == RIGHT_ADMIN) {
        *rc = admin_refusal(ctx);
        return ctx->answered || *rc != MHD_YES;
    }
    if (authorized(ctx, r->auth == AUTH_DAPR))
        return false;
    if (r->auth == AUTH_DAPR)
        *rc = http_send_body(ctx, 401, api_dapr_error_json("ERR_UNAUTHORIZED", "a valid dapr-api-token header is required"),
                        NULL, 0, true);
    else
        *rc = http_send_error(ctx, API_E_UNAUTHORIZED, "a valid Authorization: Bearer token is required", NULL);
    return true;
}

enum MHD_Result http_route_serve(req_ctx *ctx, const char *method)
{
    char allow[64];
    if (!http_route_known(ctx->route))
        return http_send_error(ctx, API_E_NOT_FOUND, "no such path", NULL);
    bool force = ctx->force_query ||
                 (!strcmp(method, "DELETE") && MHD_lookup_connection_value(ctx->conn, MHD_GET_ARGUMENT_KIND, "force"));
    const http_route *r = http_route_find(ctx->route, http_method_bit(method), force, allow, sizeof allow);
    if (!r)
        return http_send_error(ctx, API_E_METHOD, "the method is not allowed on this path", allow);
    if (ctx->too_large)
        return http_send_error(ctx, API_E_TOO_LARGE, "the request body is too large", NULL);
    ctx->row = r;
    enum MHD_Result rc = MHD_YES;
    if (refused(ctx, r, &rc))
        return rc;
    return r->handler(ctx, method, ctx->route_name);
}
