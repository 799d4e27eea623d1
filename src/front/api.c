/* api.c - see api.h. */
#include "api.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"

/* The one table from error kinds to HTTP status and JSON error code. */
const struct api_err_entry api_errors[API_E_COUNT] = {
    [API_E_BAD_NAME] = {400, "bad_name"},
    [API_E_BAD_REQUEST] = {400, "bad_request"},
    [API_E_UNAUTHORIZED] = {401, "unauthorized"},
    [API_E_NOT_FOUND] = {404, "not_found"},
    [API_E_METHOD] = {405, "method_not_allowed"},
    [API_E_TOO_LARGE] = {413, "too_large"},
    [API_E_LOCKED] = {409, "locked"},
    [API_E_NOT_HELD] = {409, "not_held"},
    [API_E_NO_QUORUM] = {503, "no_quorum"},
    [API_E_INTERNAL] = {500, "internal"},
    [API_E_SHUTTING_DOWN] = {503, "shutting_down"},
    [API_E_TOO_MANY_WAITERS] = {429, "too_many_waiters"},
    [API_E_TOO_MANY_HOLDS] = {429, "too_many_holds"},
    [API_E_BAD_FRAMING] = {400, "bad_request"},
    [API_E_OVERLOADED] = {503, "overloaded"},
    [API_E_LIMIT_MISMATCH] = {409, "limit_mismatch"},
    [API_E_NOT_IMPLEMENTED] = {501, "not_implemented"},
    [API_E_FORBIDDEN] = {403, "forbidden"},
    [API_E_FORBIDDEN_ORIGIN] = {403, "forbidden_origin"},
    [API_E_FORBIDDEN_HOST] = {403, "forbidden_host"},
};

const char *api_reason_class(const char *reason)
{
    if (!reason || !*reason)
        return "";
    if (!strncmp(reason, "AUTH refused", 12))
        return "auth_refused";
    if (strstr(reason, " refused: "))
        return "command_refused";   /* "PING refused: NOPERM ..." */
    if (strstr(reason, "timed out") || strstr(reason, "no reply"))
        return "timeout";
    if (!strncmp(reason, "TLS", 3))
        return "tls";
    if (!strcasecmp(reason, "Connection refused"))
        return "connection_refused";
    if (!strcmp(reason, "stopping"))
        return "stopping";
    return "connection_error";
}

#define LOCKS_PREFIX "/locks/"

static const struct {
    const char *prefix;
    char kind;
} beat_routes[] = {{LOCKS_PREFIX, 'l'}, {"/elections/", 'e'}, {"/semaphores/", 's'}};
static const char beat_suffix[] = "/heartbeat";

char api_heartbeat_of(const char *path, const char **name, size_t *len)
{
    size_t plen = strlen(path), slen = sizeof beat_suffix - 1;
    for (size_t i = 0; i < sizeof beat_routes / sizeof beat_routes[0]; i++) {
        size_t pre = strlen(beat_routes[i].prefix);
        if (plen > pre + slen && !strncmp(path, beat_routes[i].prefix, pre) &&
            !strcmp(path + plen - slen, beat_suffix)) {
            *name = path + pre;
            *len = plen - pre - slen;
            return beat_routes[i].kind;
        }
    }
    return 0;
}

enum api_route api_route_of(const char *path, const char **name)
{
    *name = NULL;
    size_t blen;
    if (api_heartbeat_of(path, name, &blen)) {
        *name = path;
        return ROUTE_HEARTBEAT;
    }
    if (!strcmp(path, "/healthz"))
        return ROUTE_HEALTHZ;
    if (!strcmp(path, "/readyz"))
        return ROUTE_READYZ;
    if (!strcmp(path, "/metrics"))
        return ROUTE_METRICS;
    if (!strcmp(path, "/locks"))
        return ROUTE_LIST_LOCKS;
    if (!strcmp(path, "/elections"))
        return ROUTE_LIST_ELECTIONS;
    if (!strcmp(path, "/semaphores"))
        return ROUTE_LIST_SEMAPHORES;
    if (!strcmp(path, "/ui") || !strcmp(path, "/ui/"))
        return ROUTE_UI;
    if (!strcmp(path, "/ui/state"))
        return ROUTE_UI_STATE;
    if (!strncmp(path, LOCKS_PREFIX, strlen(LOCKS_PREFIX)) && path[strlen(LOCKS_PREFIX)]) {
        *name = path + strlen(LOCKS_PREFIX);
        return ROUTE_LOCK;
    }
    static const char semaphores[] = "/semaphores/";
    if (!strncmp(path, semaphores, sizeof semaphores - 1) && path[sizeof semaphores - 1]) {
        *name = path + sizeof semaphores - 1;
        return ROUTE_SEMAPHORE;
    }
    static const char elections[] = "/elections/", value[] = "/value";
    if (!strncmp(path, elections, sizeof elections - 1) && path[sizeof elections - 1]) {
        *name = path + sizeof elections - 1;
        size_t len = strlen(*name);
        if (len > sizeof value - 1 && !strcmp(*name + len - (sizeof value - 1), value))
            return ROUTE_ELECTION_VALUE;
        return ROUTE_ELECTION;
    }
    if (!strcmp(path, "/v1.0/healthz") || !strcmp(path, "/v1.0/healthz/outbound"))
        return ROUTE_DAPR_HEALTHZ;
    if (!strcmp(path, "/v1.0/metadata"))
        return ROUTE_DAPR_METADATA;
    static const struct { const char *prefix; enum api_route route; } dapr[] = {
        {"/v1.0-alpha1/lock/", ROUTE_DAPR_LOCK}, {"/v1.0-alpha1/unlock/", ROUTE_DAPR_UNLOCK}};
    for (size_t i = 0; i < sizeof dapr / sizeof dapr[0]; i++) {
        size_t pl = strlen(dapr[i].prefix);
        if (!strncmp(path, dapr[i].prefix, pl) && path[pl]) {
            *name = path + pl;
            return dapr[i].route;
        }
    }
    return ROUTE_NOT_FOUND;
}

enum api_route api_force_route_of(const char *path)
{
    return !strcmp(path, LOCKS_PREFIX)       ? ROUTE_LOCK
           : !strcmp(path, "/elections/")    ? ROUTE_ELECTION
           : !strcmp(path, "/semaphores/")   ? ROUTE_SEMAPHORE
                                             : ROUTE_NOT_FOUND;
}

const char *api_allowed_methods(enum api_route r)
{
    switch (r) {
    case ROUTE_LOCK:
    case ROUTE_SEMAPHORE: return "GET, POST, PATCH, DELETE";
    case ROUTE_DAPR_LOCK:
    case ROUTE_DAPR_UNLOCK: return "POST";
    case ROUTE_DAPR_METADATA: return "GET";
    case ROUTE_ELECTION: return "GET, POST, DELETE";
    case ROUTE_ELECTION_VALUE:
    case ROUTE_HEARTBEAT: return "PUT";
    default: return "GET, HEAD";
    }
}

bool api_method_allowed(enum api_route r, const char *method)
{
    if (r == ROUTE_LOCK || r == ROUTE_SEMAPHORE)
        return !strcmp(method, "GET") || !strcmp(method, "POST") || !strcmp(method, "PATCH") ||
               !strcmp(method, "DELETE");
    if (r == ROUTE_DAPR_LOCK || r == ROUTE_DAPR_UNLOCK)
        return !strcmp(method, "POST");
    if (r == ROUTE_DAPR_METADATA)
        return !strcmp(method, "GET");
    if (r == ROUTE_ELECTION)
        return !strcmp(method, "GET") || !strcmp(method, "POST") || !strcmp(method, "DELETE");
    if (r == ROUTE_ELECTION_VALUE || r == ROUTE_HEARTBEAT)
        return !strcmp(method, "PUT");
    return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

enum rl_op api_op_of(const char *method)
{
    if (!strcmp(method, "POST"))
        return RL_ACQUIRE;
    if (!strcmp(method, "PATCH"))
        return RL_EXTEND;
    if (!strcmp(method, "DELETE"))
        return RL_RELEASE;
    return RL_INSPECT;
}

int api_parse_body(enum rl_op op, const char *body, size_t len, const api_limits *lim,
                   rl_request *req, bool *token_from_body, enum api_err *err,
                   char *msg, size_t msglen)
{
    req->op = op;
    req->ttl_ms = lim->default_ttl_ms;
    req->wait_ms = 0;
    req->heartbeat_ms = 0;
    *token_from_body = false;
    *err = API_E_BAD_REQUEST;
    if (op == RL_INSPECT)
        return 0;
    json_t *root = jsonio_read_object(body, len, true, msg, msglen);
    if (!root)
        return -1;
    int rc = -1;
    if (op == RL_ACQUIRE || op == RL_EXTEND) {
        if (jsonio_int(root, "ttl_ms", 1, lim->max_ttl_ms, &req->ttl_ms, msg, msglen) < 0)
            goto out;
    }
    if (op == RL_ACQUIRE) {
        const char *owner;
        if (jsonio_int(root, "wait_ms", 0, lim->max_wait_ms, &req->wait_ms, msg, msglen) < 0 ||
            jsonio_bool(root, "hold", &req->hold, msg, msglen) < 0 ||
            jsonio_int(root, "heartbeat_ms", HOLD_HEARTBEAT_MIN_MS, lim->max_ttl_ms, &req->heartbeat_ms, msg,
                       msglen) < 0 ||
            jsonio_string(root, "owner", &owner, msg, msglen) < 0)
            goto out;
        if (req->heartbeat_ms && !req->hold) {
            snprintf(msg, msglen, "heartbeat_ms is for held streams: it needs \"hold\": true");
            goto out;
        }
        if (req->hold && req->ttl_ms < HOLD_MIN_TTL_MS) {
            snprintf(msg, msglen, "ttl_ms must be at least %d with hold (it is renewed every third)",
                     HOLD_MIN_TTL_MS);
            goto out;
        }
        if (owner && !rules_owner_valid(owner, strlen(owner))) {
            snprintf(msg, msglen, "owner must be a string of 1 to %d printable ASCII bytes",
                     RL_OWNER_MAX);
            goto out;
        }
        if (owner)
            memcpy(req->owner, owner, strlen(owner) + 1);
    }
    if (op == RL_EXTEND || op == RL_RELEASE) {
        const char *tok;
        if (jsonio_string(root, "token", &tok, msg, msglen) < 0)
            goto out;
        if (tok) {
            size_t tlen = strlen(tok);
            if (tlen > TOKEN_MAX_LEN) {
                snprintf(msg, msglen, "token is longer than %d bytes", TOKEN_MAX_LEN);
                goto out;
            }
            memcpy(req->token, tok, tlen + 1);
            *token_from_body = true;
        }
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* RFC 9110 section 5.6.2: tchar */
static bool is_token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
            return false;
    return true;
}

/* A framing header's name with something after it: an obs-fold that the
 * library appended to the name. */
static bool extends(const char *name, const char *header)
{
    size_t n = strlen(header);
    return strlen(name) > n && !strncasecmp(name, header, n);
}

void api_framing_header(api_framing *f, const char *name, const char *value)
{
    value = value ? value : "";
    if (!strcasecmp(name, "Content-Length")) {
        if (f->lengths++ && strcmp(f->first_length, value))
            f->lengths_differ = true;
        else if (f->lengths == 1)
            f->first_length = value;
    } else if (!strcasecmp(name, "Transfer-Encoding")) {
        f->encodings++;
        size_t n = strlen(value);
        while (n && (value[n - 1] == ' ' || value[n - 1] == '\t'))
            n--;
        if (n != 7 || strncasecmp(value, "chunked", 7))
            f->not_chunked = true;
    } else if (!strcasecmp(name, "Host")) {
        f->hosts++;
    } else if (!f->bad_name[0] && (!is_token(name) || extends(name, "Content-Length") ||
                                   extends(name, "Transfer-Encoding") || extends(name, "Host"))) {
        snprintf(f->bad_name, sizeof f->bad_name, "%s", name);
        for (char *p = f->bad_name; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                *p = '?';
    }
}

int api_framing_verdict(const api_framing *f, bool http11, char *msg, size_t msglen)
{
    if (f->bad_name[0]) {
        snprintf(msg, msglen, "the header name \"%s\" is not a token, or a header was folded "
                 "onto a continuation line (obs-fold, RFC 9112 section 5.2)", f->bad_name);
        return API_E_BAD_FRAMING;
    }
    if ((f->encodings && f->lengths) || f->lengths_differ) {
        snprintf(msg, msglen, "Content-Length with Transfer-Encoding, or two different "
                 "Content-Length values: the message has no clear end");
        return API_E_BAD_FRAMING;
    }
    if (f->not_chunked || f->encodings > 1) {
        snprintf(msg, msglen, "Transfer-Encoding other than chunked is not implemented");
        return API_E_NOT_IMPLEMENTED;
    }
    if (http11 && f->hosts != 1) {
        snprintf(msg, msglen, "an HTTP/1.1 request needs exactly one Host header (RFC 9112 "
                 "section 3.2)");
        return API_E_BAD_FRAMING;
    }
    return -1;
}

int api_pick_token(const char *header, const char *query, bool have_body, rl_request *req,
                   char *msg, size_t msglen)
{
    const char *tok = header ? header : query ? query : have_body ? req->token : NULL;
    const char *from = header ? "the Lock-Token header" : query ? "the token query parameter"
                                                                : "token";
    if (!tok) {
        snprintf(msg, msglen, "token is required (header Lock-Token, query ?token= or body)");
        return -1;
    }
    size_t len = strlen(tok);
    if (!rules_token_valid(tok, len)) {
        snprintf(msg, msglen, "%s is not a valid token", from);
        return -1;
    }
    memmove(req->token, tok, len + 1);
    return 0;
}

int api_err_of_outcome(enum rl_outcome o)
{
    switch (o) {
    case RL_OK: return -1;
    case RL_LOCKED: return API_E_LOCKED;
    case RL_NOT_HELD: return API_E_NOT_HELD;
    case RL_NO_QUORUM: return API_E_NO_QUORUM;
    case RL_SHUTTING_DOWN: return API_E_SHUTTING_DOWN;
    case RL_TOO_MANY_WAITERS: return API_E_TOO_MANY_WAITERS;
    case RL_TOO_MANY_HOLDS: return API_E_TOO_MANY_HOLDS;
    case RL_OVERLOADED: return API_E_OVERLOADED;
    case RL_CANCELLED:   /* never sent: the client is gone */
    case RL_INTERNAL: break;
    }
    return API_E_INTERNAL;
}

static cJSON *error_object(enum api_err e, const char *message)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "error", api_errors[e].code);
    cJSON_AddStringToObject(o, "message", message);
    return o;
}

char *api_error_json(enum api_err e, const char *message)
{
    return jsonio_print_free(error_object(e, message));
}

void api_no_quorum_message(const rl_result *res, char *out, size_t outlen)
{
    int silent = res->masters_total - res->masters_ok - res->masters_refusing - res->masters_quarantined;
    if (res->setup_pending) {
        snprintf(out, outlen, "the masters are not set up as one cluster yet: set-up needs every "
                 "master to answer, and %d of %d did (see /readyz)",
                 res->masters_total - (silent > 0 ? silent : 0), res->masters_total);
        return;
    }
    if (!res->masters_refusing && !res->masters_quarantined && !res->masters_down) {
        snprintf(out, outlen, "fewer than a majority of the Redis masters answered in time");
        return;
    }
    int n = snprintf(out, outlen, "fewer than a majority of the Redis masters could vote (%d of %d did)",
                     res->masters_ok, res->masters_total);
    if (res->masters_down && n >= 0 && (size_t)n < outlen)
        n += snprintf(out + n, outlen - (size_t)n, ": %d %s down (%s)", res->masters_down,
                      res->masters_down == 1 ? "is" : "are", res->down_reason);
    silent -= res->masters_down;
    if (res->masters_refusing && n >= 0 && (size_t)n < outlen)
        n += snprintf(out + n, outlen - (size_t)n, "%s %d answered with an error (%.100s)",
                      res->masters_down ? "," : ":", res->masters_refusing, res->refusal);
    if (res->masters_quarantined && n >= 0 && (size_t)n < outlen)
        n += snprintf(out + n, outlen - (size_t)n, "%s %d sit out in restart quarantine",
                      res->masters_refusing || res->masters_down ? "," : ":",
                      res->masters_quarantined);
    if (silent > 0 && n >= 0 && (size_t)n < outlen)
        snprintf(out + n, outlen - (size_t)n, ", %d did not answer in time", silent);
}

static const char *outcome_message(const rl_request *req, const rl_result *res, char *buf,
                                   size_t buflen)
{
    switch (res->outcome) {
    case RL_LOCKED:
        return "the lock is held by another owner";
    case RL_NOT_HELD:
        return res->reason == RL_REASON_HELD_BY_OTHER
                   ? "the token does not hold the lock: another owner holds it now"
                   : "the token does not hold the lock: it expired or was released";
    case RL_NO_QUORUM:
        api_no_quorum_message(res, buf, buflen);
        return buf;
    case RL_SHUTTING_DOWN:
        return "the service is shutting down";
    case RL_TOO_MANY_WAITERS:
        return "the lock is held and too many acquires are waiting already (--max-waiters)";
    case RL_TOO_MANY_HOLDS:
        return "too many held streams are open already (--max-holds)";
    case RL_OVERLOADED:
        return "the service is overloaded: the request found no place among those in flight "
               "(--max-inflight) within --queue-timeout-ms; retry later";
    default:
        return req->op == RL_ACQUIRE ? "the lock could not be acquired because of an internal error"
                                     : "an internal error occurred";
    }
}

char *api_result_json(const rl_request *req, const rl_result *res, int *status,
                      long long *retry_after_s)
{
    *retry_after_s = 0;
    int e = api_err_of_outcome(res->outcome);
    if (e >= 0) {
        *status = api_errors[e].status;
        char buf[400];
        cJSON *o = error_object((enum api_err)e, outcome_message(req, res, buf, sizeof buf));
        if (!o)
            return NULL;
        if (res->outcome == RL_LOCKED || res->outcome == RL_TOO_MANY_WAITERS ||
            res->outcome == RL_OVERLOADED ||
            res->outcome == RL_TOO_MANY_HOLDS) {
            jsonio_add_int(o, "retry_after_ms", res->retry_after_ms);
            long long s = (res->retry_after_ms + 999) / 1000;
            *retry_after_s = s < 1 ? 1 : s;
        } else if (res->outcome == RL_NOT_HELD) {
            cJSON_AddStringToObject(o, "reason", res->reason == RL_REASON_HELD_BY_OTHER
                                                     ? "held_by_other" : "expired");
        } else if (res->outcome == RL_NO_QUORUM) {
            jsonio_add_int(o, "masters_ok", res->masters_ok);
            jsonio_add_int(o, "masters_total", res->masters_total);
            jsonio_add_int(o, "masters_refusing", res->masters_refusing);
            jsonio_add_int(o, "masters_quarantined", res->masters_quarantined);
        }
        return jsonio_print_free(o);
    }

    switch (req->op) {
    case RL_RELEASE:
    case RL_PROCLAIM:
    case RL_SEM_LIMIT:
    case RL_PUBLISH:
    case RL_DEQUEUE:
    case RL_FORCE:
    case RL_TURN:
        *status = 204;
        return NULL;
    case RL_INSPECT: {
        *status = 200;
        cJSON *o = cJSON_CreateObject();
        if (!o)
            return NULL;
        cJSON_AddStringToObject(o, "name", req->name);
        cJSON_AddBoolToObject(o, "held", res->held);
        jsonio_add_int(o, "validity_ms", res->held ? res->validity_ms : 0);
        if (res->held && res->fence > 0)
            jsonio_add_int(o, "fence", res->fence);
        if (res->held && res->owner[0])
            cJSON_AddStringToObject(o, "owner", res->owner);
        return jsonio_print_free(o);
    }
    case RL_ACQUIRE:
    case RL_EXTEND:
        break;
    }
    *status = req->op == RL_ACQUIRE ? 201 : 200;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "name", req->name);
    cJSON_AddStringToObject(o, "token", res->token);
    jsonio_add_int(o, "validity_ms", res->validity_ms);
    jsonio_add_int(o, "ttl_ms", res->ttl_ms);
    jsonio_add_int(o, "fence", res->fence);
    return jsonio_print_free(o);
}
