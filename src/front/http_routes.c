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
#include "auth.h"

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
    /* path                  methods      force  right        auth         handler                  pattern,                         name */
    {ROUTE_HEALTHZ,          GETS,        false, RIGHT_NONE,  AUTH_BEARER, serve_healthz,           "/healthz",                      NAME_NONE},
    {ROUTE_READYZ,           GETS,        false, RIGHT_NONE,  AUTH_BEARER, http_serve_readyz,       "/readyz",                       NAME_NONE},
    {ROUTE_METRICS,          GETS,        false, RIGHT_NONE,  AUTH_BEARER, http_serve_metrics,      "/metrics",                      NAME_NONE},
    {ROUTE_UI,               GETS,        false, RIGHT_NONE,  AUTH_BEARER, ui_page,                 "/ui",                           NAME_NONE},
    {ROUTE_UI_STATE,         GETS,        false, RIGHT_READ,  AUTH_BEARER, ui_state,                "/ui/state",                     NAME_NONE},
    {ROUTE_LIST_LOCKS,       GETS,        false, RIGHT_READ,  AUTH_BEARER, http_list_dispatch,      "/locks",                        NAME_NONE},
    {ROUTE_LIST_ELECTIONS,   GETS,        false, RIGHT_READ,  AUTH_BEARER, http_list_dispatch,      "/elections",                    NAME_NONE},
    {ROUTE_LIST_SEMAPHORES,  GETS,        false, RIGHT_READ,  AUTH_BEARER, http_list_dispatch,      "/semaphores",                   NAME_NONE},
    {ROUTE_LOCK,             HTTP_DELETE, true,  RIGHT_ADMIN, AUTH_BEARER, http_force_dispatch,     "/locks/{name}?force=true",      NAME_PATH},
    {ROUTE_LOCK,             HTTP_GET,    false, RIGHT_READ,  AUTH_BEARER, http_lock_dispatch,      "/locks/{name}",                 NAME_PATH},
    {ROUTE_LOCK,             HTTP_POST | HTTP_PATCH | HTTP_DELETE,
                                          false, RIGHT_LOCK,  AUTH_BEARER, http_lock_dispatch,      "/locks/{name}",                 NAME_PATH},
    {ROUTE_HEARTBEAT,        HTTP_PUT,    false, RIGHT_LOCK,  AUTH_BEARER, http_heartbeat_dispatch, "/{kind}/{name}/heartbeat",      NAME_PATH},
    {ROUTE_ELECTION,         HTTP_DELETE, true,  RIGHT_ADMIN, AUTH_BEARER, http_force_dispatch,     "/elections/{name}?force=true",  NAME_PATH},
    {ROUTE_ELECTION,         HTTP_GET,    false, RIGHT_READ,  AUTH_BEARER, http_election_dispatch,  "/elections/{name}",             NAME_PATH},
    {ROUTE_ELECTION,         HTTP_POST | HTTP_DELETE,
                                          false, RIGHT_LOCK,  AUTH_BEARER, http_election_dispatch,  "/elections/{name}",             NAME_PATH},
    {ROUTE_ELECTION_VALUE,   HTTP_PUT,    false, RIGHT_LOCK,  AUTH_BEARER, http_election_dispatch,  "/elections/{name}/value",       NAME_PATH},
    {ROUTE_SEMAPHORE,        HTTP_DELETE, true,  RIGHT_ADMIN, AUTH_BEARER, http_force_dispatch,     "/semaphores/{name}?force=true", NAME_PATH},
    {ROUTE_SEMAPHORE,        HTTP_GET,    false, RIGHT_READ,  AUTH_BEARER, http_sem_dispatch,       "/semaphores/{name}",            NAME_PATH},
    {ROUTE_SEMAPHORE,        HTTP_POST | HTTP_PATCH | HTTP_DELETE,
                                          false, RIGHT_LOCK,  AUTH_BEARER, http_sem_dispatch,       "/semaphores/{name}",            NAME_PATH},
    {ROUTE_DAPR_HEALTHZ,     GETS,        false, RIGHT_NONE,  AUTH_DAPR,   serve_dapr_healthz,      "/v1.0/healthz",                 NAME_NONE},
    {ROUTE_DAPR_METADATA,    HTTP_GET,    false, RIGHT_READ,  AUTH_DAPR,   serve_dapr_metadata,     "/v1.0/metadata",                NAME_NONE},
    {ROUTE_DAPR_LOCK,        HTTP_POST,   false, RIGHT_LOCK,  AUTH_DAPR,   http_dapr_dispatch,      "/v1.0-alpha1/lock/{store}",     NAME_BODY},
    {ROUTE_DAPR_UNLOCK,      HTTP_POST,   false, RIGHT_LOCK,  AUTH_DAPR,   http_dapr_dispatch,      "/v1.0-alpha1/unlock/{store}",   NAME_BODY},
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

unsigned http_route_right(enum api_route path, const char *method)
{
    const http_route *r = http_route_find(path, http_method_bit(method), false, NULL, 0);
    return r ? r->right : RIGHT_ADMIN;   /* (no row: none may) */
}

bool http_route_known(enum api_route path)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (routes[i].path == path)
            return true;
    return false;
}

/* ---- the auth check: the row's right, in one place ---- */

/* The caller's principal (auth.h): by its client certificate, else by its
 * bearer token (on Dapr's routes also dapr-api-token). NULL: none. cert
 * gets the verified client certificate's name ("": none). */
static const principal *caller(req_ctx *ctx, const http_route *r, char *cert, size_t cap)
{
    const char *token = http_bearer(ctx);
    if (!token && r->auth == AUTH_DAPR)
        token = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "dapr-api-token");
    cert[0] = '\0';
    return auth_who(http_client_cert_name(ctx, cert, cap), token);
}

/* The 401 of a caller no principal names. With a verified client
 * certificate it says so, and its name: a client that sent one, HTTPS
 * with --tls-client-ca-file, is told that the certificate is the problem,
 * not that a token is missing. */
static enum MHD_Result refuse_nobody(req_ctx *ctx, const http_route *r, const char *cert)
{
    const char *token = r->auth == AUTH_DAPR ? "dapr-api-token header" : "Authorization: Bearer token";
    char m[PRINCIPAL_NAME_MAX + 160];
    if (cert[0])
        snprintf(m, sizeof m, "no principal is named %s, this client certificate's name, and no valid %s came with it",
                 cert, token);
    else
        snprintf(m, sizeof m, "a valid %s is required", token);
    return http_refuse(ctx, r, API_E_UNAUTHORIZED, m);
}

/* A force release: ?force=true, some principal with the admin right, and
 * the caller one with it on this name. */
static bool admin_refused(req_ctx *ctx, const http_route *r, enum MHD_Result *rc)
{
    ctx->mroute = METRICS_ROUTE_RELEASE;   /* (refused ones too) */
    char buf[16];
    const char *force = http_query_arg(ctx, "force", buf, sizeof buf);
    if (!force || strcmp(force, "true")) {   /* (absent: the query form without it) */
        *rc = http_send_error(ctx, API_E_BAD_REQUEST, "force must be true", NULL);
        return true;
    }
    if (!auth_admin_exists()) {
        *rc = http_refuse(ctx, r, API_E_FORBIDDEN,
                     "force release is off: the service has no --admin-token-file and no principal with the admin right");
        return true;
    }
    if (!ctx->principal) {
        *rc = http_refuse(ctx, r, API_E_UNAUTHORIZED, "force release needs the admin token as Authorization: Bearer");
        return true;
    }
    if (!(ctx->principal->rights & RIGHT_ADMIN)) {
        *rc = http_refuse(ctx, r, API_E_FORBIDDEN, !strcmp(ctx->principal->name, "token")
                                              ? "force release needs the admin token, not the ordinary one"
                                              : "force release needs a principal with the admin right");
        return true;
    }
    return !http_may(ctx, RIGHT_ADMIN, ctx->route_name, rc);
}

/* Whether ctx may not go on to r's handler: then *rc is the result of the
 * refusal answered. The name is checked here when the path holds it; a
 * Dapr lock's name is its key name, checked once its body is read
 * (http_dapr_dispatch), and a listing shows only the names its caller may
 * read. */
static bool refused(req_ctx *ctx, const http_route *r, enum MHD_Result *rc)
{
    if (r->right == RIGHT_NONE)
        return false;
    if (http_client_cert_missing(ctx)) {   /* HTTPS with --tls-client-ca-file (http_peer.c) */
        *rc = http_refuse(ctx, r, API_E_UNAUTHORIZED, "a client certificate signed by the CA of --tls-client-ca-file "
                                                 "is required");
        return true;
    }
    char cert[PRINCIPAL_NAME_MAX + 1];
    ctx->principal = caller(ctx, r, cert, sizeof cert);
    if (r->right == RIGHT_ADMIN)
        return admin_refused(ctx, r, rc);
    if (!auth_closed())
        return false;
    if (!ctx->principal) {
        *rc = refuse_nobody(ctx, r, cert);
        return true;
    }
    return !http_may(ctx, r->right, r->name == NAME_PATH ? ctx->route_name : NULL, rc);
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
    ctx->method = method;
    enum MHD_Result rc = MHD_YES;
    if (refused(ctx, r, &rc))
        return rc;
    return r->handler(ctx, method, ctx->route_name);
}
