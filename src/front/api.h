/* api.h - the HTTP contract without the HTTP server: routes, name rules,
 * request-body parsing, the one table from outcomes to status codes, and the
 * JSON bodies of answers.
 *
 * Pure (cJSON only, no sockets) so the unit tests hold every bad-input case of
 * the contract (api/openapi.yaml, docs/api.md). Strings returned as char *
 * are malloc'd; the caller frees.
 */
#ifndef RL_API_H
#define RL_API_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "engine/engine.h"
#include "recipes/recipes.h"

enum api_route {
    ROUTE_NOT_FOUND, ROUTE_LOCK, ROUTE_HEALTHZ, ROUTE_READYZ, ROUTE_METRICS,
    ROUTE_DAPR_LOCK,      /* POST /v1.0-alpha1/lock/{store} */
    ROUTE_DAPR_UNLOCK,    /* POST /v1.0-alpha1/unlock/{store} */
    ROUTE_DAPR_HEALTHZ,   /* GET /v1.0/healthz, /v1.0/healthz/outbound */
    ROUTE_DAPR_METADATA,  /* GET /v1.0/metadata */
    ROUTE_ELECTION,       /* /elections/{name} (docs/elections.md) */
    ROUTE_ELECTION_VALUE, /* PUT /elections/{name}/value: *name ends before "/value" */
    ROUTE_SEMAPHORE,      /* /semaphores/{name} (docs/semaphores.md) */
    ROUTE_HEARTBEAT,      /* PUT /{locks,elections,semaphores}/{name}/heartbeat: *name is
                             the whole path (api_heartbeat_of splits it) */
    ROUTE_LIST_LOCKS,     /* GET /locks?prefix=&limit=&cursor= (listing.h) */
    ROUTE_LIST_ELECTIONS, /* GET /elections?... */
    ROUTE_LIST_SEMAPHORES,/* GET /semaphores?... */
    ROUTE_UI,             /* GET /ui: the dashboard (ui.h) */
    ROUTE_UI_STATE,       /* GET /ui/state: what the dashboard shows besides listings */
};

/* Error kinds of the contract; api_errors[] maps each to status and code. */
enum api_err {
    API_E_BAD_NAME,
    API_E_BAD_REQUEST,
    API_E_UNAUTHORIZED,
    API_E_NOT_FOUND,
    API_E_METHOD,
    API_E_TOO_LARGE,
    API_E_LOCKED,
    API_E_NOT_HELD,
    API_E_NO_QUORUM,
    API_E_INTERNAL,
    API_E_SHUTTING_DOWN,
    API_E_TOO_MANY_WAITERS,
    API_E_TOO_MANY_HOLDS,
    API_E_BAD_FRAMING,   /* Content-Length with Transfer-Encoding, or two lengths: closes */
    API_E_OVERLOADED,
    API_E_LIMIT_MISMATCH, /* a semaphore's limit differs from the one stored */
    API_E_NOT_IMPLEMENTED, /* a Transfer-Encoding other than chunked: closes */
    API_E_FORBIDDEN,     /* a force release without the admin token (or without --admin-token-file) */
    API_E_FORBIDDEN_ORIGIN, /* an Origin neither the service's own nor --allow-origin's (api_origin.c) */
    API_E_FORBIDDEN_HOST,   /* on a loopback listener, a Host neither loopback nor --allow-host's */
    API_E_COUNT
};

struct api_err_entry {
    int status;
    const char *code;
};
extern const struct api_err_entry api_errors[API_E_COUNT];

typedef struct api_limits {
    long long default_ttl_ms;
    long long max_ttl_ms;
    long long max_wait_ms;
    const char *dapr_app_id;   /* --dapr-app-id, or NULL: the keyPrefix "appid" (api_dapr_request) */
} api_limits;

/* What a name may be (rules.h), as the errors say it. */
#define API_NAME_RULE "1 to 200 bytes of UTF-8 without control characters (percent-encoded in the path, once)"

/* Splits a decoded URL path. For ROUTE_LOCK sets *name to what follows
 * "/locks/", for the Dapr lock routes to the store name, for the election
 * routes to what follows "/elections/" (not yet validated; never empty;
 * for ROUTE_ELECTION_VALUE it goes on with "/value"; for ROUTE_HEARTBEAT
 * *name is the path itself). */
enum api_route api_route_of(const char *path, const char **name);

/* A force release's query form, DELETE /locks/?force=true&name=NAME (and
 * /elections/, /semaphores/), for the names a browser cannot put in a path:
 * "." and ".." (a WHATWG URL parser takes %2E and %2E%2E for dot segments
 * too, and removes them). Of such a path (the name then comes from the
 * query, percent-encoded once; the path serves DELETE only, always as a
 * force release): ROUTE_LOCK, ROUTE_ELECTION or ROUTE_SEMAPHORE; of any
 * other, ROUTE_NOT_FOUND. */
enum api_route api_force_route_of(const char *path);

/* Of a ROUTE_HEARTBEAT path: which kind of stream ('l' lock, 'e' election,
 * 's' semaphore), and where its name begins and how long it is. */
char api_heartbeat_of(const char *path, const char **name, size_t *len);

/* The lock operation of a method on /locks/{name}. */
enum rl_op api_op_of(const char *method);

/* Parses the body of op into req (name not touched; token from the body only
 * when *token_from_body). Empty or all-whitespace body means defaults.
 * On error returns -1 with *err set and msg one sentence naming the field. */
int api_parse_body(enum rl_op op, const char *body, size_t len, const api_limits *lim,
                   rl_request *req, bool *token_from_body, enum api_err *err,
                   char *msg, size_t msglen);

/* The framing rules of RFC 9112 that libmicrohttpd 0.9.75 leaves to the
 * application: it reads a body whose Transfer-Encoding is not chunked
 * until the client closes, serves HTTP/1.1 without Host, appends an
 * obs-folded line to the header's *name* ("Content-Length: 2" + " 40"
 * becomes "Content-Length40: 2", so the body is read as the next
 * request), and takes both Content-Length and Transfer-Encoding. Each
 * header is fed in turn (name and value as the library parsed them), then
 * the request is judged once, before its body is read. */
typedef struct api_framing {
    int lengths;                 /* Content-Length headers */
    bool lengths_differ;
    const char *first_length;
    int encodings;               /* Transfer-Encoding headers */
    bool not_chunked;            /* one of them is other than exactly "chunked" */
    int hosts;
    char bad_name[48];           /* the first header name that is no RFC 9110 token, or a
                                    framing header's name with more after it; "" if none */
} api_framing;

void api_framing_header(api_framing *f, const char *name, const char *value);

/* Returns -1 when the framing is sound, else the error (API_E_BAD_FRAMING,
 * API_E_NOT_IMPLEMENTED) with msg; either answer closes the connection.
 * http11: the request line says HTTP/1.1. */
int api_framing_verdict(const api_framing *f, bool http11, char *msg, size_t msglen);

/* Chooses the token: header, else query, else body (may be NULL or absent).
 * Copies it to req->token. Returns 0, or -1 with msg when none is given or the
 * chosen one is not a possible token. */
int api_pick_token(const char *header, const char *query, bool have_body, rl_request *req,
                   char *msg, size_t msglen);

/* ---- browsers: Host and Origin (api_origin.c; issue 41) ----
 * A page of another origin can POST without a preflight (a form, or fetch
 * with text/plain), and a page whose name an attacker rebinds to 127.0.0.1
 * is same-origin with what it loads from there. So, judged before anything
 * else of a request (after its framing):
 *   Host    on a loopback listener (API_LISTENER_LOOPBACK: conf_host_loopback
 *           of its --listen host, or a Unix socket, which a proxy on the
 *           host may front as it may a loopback port), the Host header's
 *           host must be localhost, a loopback address or one of
 *           --allow-host (any port); on another listener any Host goes
 *           until --allow-host is given, and then only those and the
 *           loopback ones. A request without Host (HTTP/1.0) goes. Every
 *           route but /healthz and Dapr's healthz.
 *   Origin  absent (curl, SDKs: no browser's request) goes; present, it must
 *           be the service's own, "http://" (on an HTTPS listener,
 *           API_LISTENER_HTTPS: "https://") and the Host header, or one of
 *           --allow-origin. Every route but /healthz, /readyz, /metrics and
 *           Dapr's healthz (they change nothing, and without a CORS header,
 *           which redlockd never sends, a page cannot read them). */

/* What the listener a request came by is, for api_origin_verdict. */
#define API_LISTENER_LOOPBACK 1u   /* a loopback address or a Unix socket */
#define API_LISTENER_HTTPS 2u      /* served over TLS: the service's own origin is https:// */

/* Returns -1 when the request may go on, else API_E_FORBIDDEN_HOST or
 * API_E_FORBIDDEN_ORIGIN with msg (naming the header's value, printable
 * ASCII only). listener: API_LISTENER_* bits. host, origin: the headers'
 * values, NULL when absent. */
int api_origin_verdict(const conf *cfg, unsigned listener, enum api_route route, const char *host,
                       const char *origin, char *msg, size_t msglen);

/* The class of a master's reason for being down (master_status.reason, the
 * server's or the library's text, which can name an ACL user or a rule):
 * "auth_refused", "command_refused" (PING and the like), "connection_refused",
 * "timeout", "tls", "stopping", else "connection_error"; "" for "". What an
 * unauthenticated /readyz shows when --auth-token-file is set. */
const char *api_reason_class(const char *reason);

/* The status and error of an engine outcome (RL_OK has no error: returns -1). */
int api_err_of_outcome(enum rl_outcome o);

/* JSON of an error: {"error","message"} */
char *api_error_json(enum api_err e, const char *message);

/* The message of a 503 no_quorum: what kept a majority from voting
 * (set-up waiting for a master, masters answering with errors, restart
 * quarantine, or no answer in time). */
void api_no_quorum_message(const rl_result *res, char *out, size_t outlen);

/* Builds the answer to a finished lock operation: sets *status and returns
 * the body (NULL for 204). For RL_LOCKED and RL_TOO_MANY_WAITERS also sets
 * *retry_after_s. */
char *api_result_json(const rl_request *req, const rl_result *res, int *status,
                      long long *retry_after_s);

/* ---- Dapr's distributed lock API (v1.0-alpha1) ----
 * Dapr store S and resource R are the native lock named "S:R": the store is
 * the key namespace, and the same lock is visible through both APIs. The
 * lockOwner is the token, so unlock checks it like a native release. */

#define API_DAPR_ERR_MALFORMED "ERR_MALFORMED_REQUEST"
#define API_DAPR_ERR_STORE "ERR_LOCK_STORE_NOT_FOUND"
#define API_DAPR_ERR_TRY_LOCK "ERR_TRY_LOCK"
#define API_DAPR_ERR_UNLOCK "ERR_UNLOCK"

/* Dapr's lock stores (--dapr-stores): comma-separated entries NAME or
 * NAME=KEYPREFIX. The entry at p: its name and keyPrefix ("" when not
 * given) into name and prefix (API_DAPR_STORE_MAX + 1 bytes each); returns
 * where the next entry starts, or NULL when there is none. */
#define API_DAPR_STORE_MAX CONF_DAPR_NAME_MAX   /* bytes of a store name, a keyPrefix, an app id */
#define API_DAPR_RESOURCE_MAX 200   /* bytes of a resourceId */
#define API_DAPR_OWNER_MAX 256      /* bytes of a lockOwner */
#define API_DAPR_SEP CONF_DAPR_SEP
const char *api_dapr_store_next(const char *p, char *name, char *prefix);

/* Parses a Dapr lock (unlock false) or unlock body for store into req
 * (name, token, ttl; wait 0). stores is --dapr-stores. Returns 0, or -1
 * with *code a Dapr errorCode and msg. */
int api_parse_dapr(bool unlock, const char *store, const char *stores, const char *body,
                   size_t len, const api_limits *lim, rl_request *req, const char **code,
                   char *msg, size_t msglen);

/* The same from its fields, for any wire format (Dapr's gRPC API too):
 * store, resource and owner as given (resource or owner NULL or empty is
 * malformed), expiry_s the lock's expiryInSeconds (ignored for unlock).
 * The lock's name is daprd's key for the store's keyPrefix: "appid" (the
 * default with lim->dapr_app_id) APPID||RESOURCE, or RESOURCE without an
 * app id, as daprd; "name" (the default without one) STORE||RESOURCE;
 * "none" RESOURCE; any other prefix P P||RESOURCE. A resourceId holding
 * "||" is refused, as daprd refuses it; resourceId and lockOwner are text
 * (rules.h) of up to API_DAPR_RESOURCE_MAX and API_DAPR_OWNER_MAX bytes. */
int api_dapr_request(bool unlock, const char *store, const char *stores, const char *resource,
                     const char *owner, long long expiry_s, const api_limits *lim,
                     rl_request *req, const char **code, char *msg, size_t msglen);

/* {"errorCode","message"} */
char *api_dapr_error_json(const char *code, const char *message);

/* The Dapr answer of a finished lock or unlock: 200 {"success"} / {"status"},
 * or 500 with an error body when no majority answered. */
char *api_dapr_result_json(bool unlock, const rl_result *res, int *status);

/* GET /v1.0/metadata: names each store as a lock component. */
char *api_dapr_metadata_json(const char *stores, const char *version);

#endif
