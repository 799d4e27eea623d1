/* api_dapr.c - Dapr's lock API over HTTP (api.h, "Dapr's distributed lock API"):
 * stores, resource ids to lock names, the bodies of requests and answers. */
#include "api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"

const char *api_dapr_store_next(const char *p, char *name, char *prefix)
{
    if (!p || !*p)
        return NULL;
    const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    size_t nl = (size_t)((eq ? eq : end) - p), pl = eq ? (size_t)(end - eq - 1) : 0;
    snprintf(name, API_DAPR_STORE_MAX + 1, "%.*s", (int)(nl < API_DAPR_STORE_MAX ? nl : API_DAPR_STORE_MAX), p);
    snprintf(prefix, API_DAPR_STORE_MAX + 1, "%.*s", (int)(pl < API_DAPR_STORE_MAX ? pl : API_DAPR_STORE_MAX),
             eq ? eq + 1 : "");
    return comma ? comma + 1 : end;
}

/* Is store served (one of the names in stores)? Its keyPrefix into prefix. */
static bool store_served(const char *store, const char *stores, char *prefix)
{
    char name[API_DAPR_STORE_MAX + 1];
    for (const char *p = stores; (p = api_dapr_store_next(p, name, prefix));)
        if (!strcmp(name, store))
            return true;
    return false;
}

/* The lock name of resource in store (api_dapr_request), into out. */
static int dapr_lock_name(const char *store, const char *prefix, const char *app_id, const char *resource,
                          char *out, size_t outlen)
{
    const char *strategy = prefix[0] ? prefix : app_id && app_id[0] ? "appid" : "name";
    const char *head = !strcmp(strategy, "appid") ? (app_id && app_id[0] ? app_id : NULL)
                       : !strcmp(strategy, "name") ? store
                       : !strcmp(strategy, "none") ? NULL
                                                   : strategy;
    int n = head ? snprintf(out, outlen, "%s" API_DAPR_SEP "%s", head, resource)
                 : snprintf(out, outlen, "%s", resource);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int api_dapr_request(bool unlock, const char *store, const char *stores, const char *resource,
                     const char *owner, long long expiry_s, const api_limits *lim,
                     rl_request *req, const char **code, char *msg, size_t msglen)
{
    memset(req, 0, sizeof *req);
    req->op = unlock ? RL_RELEASE : RL_ACQUIRE;
    *code = API_DAPR_ERR_MALFORMED;
    char prefix[API_DAPR_STORE_MAX + 1];
    if (!store_served(store, stores, prefix)) {
        *code = API_DAPR_ERR_STORE;
        snprintf(msg, msglen, "lock store %.100s is not found", store);
        return -1;
    }
    if (!resource || !*resource) {
        snprintf(msg, msglen, "ResourceId is empty in lock store %.100s", store);
        return -1;
    }
    if (!owner || !*owner) {
        snprintf(msg, msglen, "LockOwner is empty in lock store %.100s", store);
        return -1;
    }
    if (strstr(resource, API_DAPR_SEP)) {   /* daprd's own rule: || joins its keys */
        snprintf(msg, msglen, "input key/keyPrefix '%.200s' can't contain '" API_DAPR_SEP "'", resource);
        return -1;
    }
    if (!rules_text_valid(resource, strlen(resource), API_DAPR_RESOURCE_MAX)) {
        snprintf(msg, msglen, "resourceId must be 1 to %d bytes of UTF-8 without control characters",
                 API_DAPR_RESOURCE_MAX);
        return -1;
    }
    if (!rules_text_valid(owner, strlen(owner), API_DAPR_OWNER_MAX)) {
        snprintf(msg, msglen, "lockOwner must be 1 to %d bytes of UTF-8 without control characters",
                 API_DAPR_OWNER_MAX);
        return -1;
    }
    if (!unlock) {
        long long max_s = lim->max_ttl_ms / 1000;
        if (expiry_s <= 0) {
            snprintf(msg, msglen, "ExpiryInSeconds is not positive in lock store %.100s", store);
            return -1;
        }
        if (expiry_s > max_s) {
            snprintf(msg, msglen, "expiryInSeconds must be at most %lld", max_s);
            return -1;
        }
        req->ttl_ms = expiry_s * 1000;
    }
    if (dapr_lock_name(store, prefix, lim->dapr_app_id, resource, req->name, sizeof req->name) < 0) {
        snprintf(msg, msglen, "the lock store's key prefix and resourceId are too long together");
        return -1;
    }
    snprintf(req->token, sizeof req->token, "%s", owner);
    req->token_given = true;
    return 0;
}

int api_parse_dapr(bool unlock, const char *store, const char *stores, const char *body,
                   size_t len, const api_limits *lim, rl_request *req, const char **code,
                   char *msg, size_t msglen)
{
    memset(req, 0, sizeof *req);
    *code = API_DAPR_ERR_MALFORMED;
    char prefix[API_DAPR_STORE_MAX + 1];
    if (!store_served(store, stores, prefix))   /* before the body, as Dapr does */
        return api_dapr_request(unlock, store, stores, NULL, NULL, 0, lim, req, code, msg, msglen);
    json_t *root = jsonio_read_object(body, len, false, msg, msglen);
    if (!root)
        return -1;
    /* expiryInSeconds: an integer, Dapr's int32; absent or 0 is "not
     * positive", and one past the limit is refused there. */
    long long expiry_s = 0;
    const char *resource, *owner;
    int rc = -1;
    if (jsonio_int(root, "expiryInSeconds", INT32_MIN, INT32_MAX, &expiry_s, msg, msglen) < 0 ||
        jsonio_string(root, "resourceId", &resource, msg, msglen) < 0 ||
        jsonio_string(root, "lockOwner", &owner, msg, msglen) < 0)
        goto out;
    rc = api_dapr_request(unlock, store, stores, resource, owner, expiry_s, lim, req, code, msg,
                          msglen);
out:
    json_decref(root);
    return rc;
}

char *api_dapr_error_json(const char *code, const char *message)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "errorCode", code);
    cJSON_AddStringToObject(o, "message", message);
    return jsonio_print_free(o);
}

char *api_dapr_result_json(bool unlock, const rl_result *res, int *status)
{
    *status = 200;
    if (res->outcome == RL_NO_QUORUM || res->outcome == RL_SHUTTING_DOWN || res->outcome == RL_OVERLOADED ||
        (!unlock && res->outcome == RL_INTERNAL)) {
        *status = 500;
        char why[400], m[420];
        if (res->outcome == RL_NO_QUORUM)
            api_no_quorum_message(res, why, sizeof why);
        snprintf(m, sizeof m, "%s failed: %s", unlock ? "unlock" : "lock",
                 res->outcome == RL_NO_QUORUM ? why
                 : res->outcome == RL_SHUTTING_DOWN ? "the lock service is stopping"
                 : res->outcome == RL_OVERLOADED    ? "the lock service is overloaded, retry later"
                                                    : "internal error");
        return api_dapr_error_json(unlock ? API_DAPR_ERR_UNLOCK : API_DAPR_ERR_TRY_LOCK, m);
    }
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (!unlock) {
        cJSON_AddBoolToObject(o, "success", res->outcome == RL_OK);
    } else {
        /* 0 success, 1 lock does not exist, 2 held by another owner, 3 internal error */
        int st = res->outcome == RL_OK ? 0
                 : res->outcome == RL_NOT_HELD ? (res->reason == RL_REASON_HELD_BY_OTHER ? 2 : 1)
                                               : 3;
        jsonio_add_int(o, "status", st);
    }
    return jsonio_print_free(o);
}

char *api_dapr_metadata_json(const char *stores, const char *version)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", "redlockd");
    char rv[64];
    snprintf(rv, sizeof rv, "redlockd-%s", version);
    cJSON_AddStringToObject(o, "runtimeVersion", rv);
    cJSON_AddArrayToObject(o, "enabledFeatures");
    cJSON_AddArrayToObject(o, "actors");
    cJSON *comps = cJSON_AddArrayToObject(o, "components");
    char name[API_DAPR_STORE_MAX + 1], prefix[API_DAPR_STORE_MAX + 1];
    for (const char *p = stores; comps && (p = api_dapr_store_next(p, name, prefix));) {
        cJSON *c = cJSON_CreateObject();
        if (c) {
            cJSON_AddStringToObject(c, "name", name);
            cJSON_AddStringToObject(c, "type", "lock.redlockd");
            cJSON_AddStringToObject(c, "version", "v1");
            cJSON_AddArrayToObject(c, "capabilities");
            cJSON_AddItemToArray(comps, c);
        }
    }
    cJSON_AddObjectToObject(o, "extended");
    return jsonio_print_free(o);
}
