/* semaphore_api.c - see semaphore_api.h. */
#include "semaphore_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int api_sem_parse_acquire(const char *body, size_t len, const api_limits *lim, sem_request *req,
                      char *msg, size_t msglen)
{
    req->op = SEM_ACQUIRE;
    req->ttl_ms = lim->default_ttl_ms;
    req->wait_ms = 0;
    req->heartbeat_ms = 0;
    json_t *o = jsonio_read_object(body, len, false, msg, msglen);
    if (!o)
        return -1;
    int rc = -1;
    long long limit = 0, permits = 1;
    const char *owner;
    if (!json_object_get(o, "limit")) {
        snprintf(msg, msglen, "limit is required (the number of permits, 1 to %d)", SEM_LIMIT_MAX);
        goto out;
    }
    req->hold = false;
    if (jsonio_int(o, "limit", 1, SEM_LIMIT_MAX, &limit, msg, msglen) < 0 ||
        jsonio_int(o, "permits", 1, limit, &permits, msg, msglen) < 0 ||
        jsonio_int(o, "ttl_ms", 1, lim->max_ttl_ms, &req->ttl_ms, msg, msglen) < 0 ||
        jsonio_int(o, "wait_ms", 0, lim->max_wait_ms, &req->wait_ms, msg, msglen) < 0 ||
        jsonio_bool(o, "hold", &req->hold, msg, msglen) < 0 ||
        jsonio_int(o, "heartbeat_ms", HOLD_HEARTBEAT_MIN_MS, lim->max_ttl_ms, &req->heartbeat_ms, msg, msglen) < 0 ||
        jsonio_string(o, "owner", &owner, msg, msglen) < 0)
        goto out;
    if (req->heartbeat_ms && !req->hold) {
        snprintf(msg, msglen, "heartbeat_ms is for held streams: it needs \"hold\": true");
        goto out;
    }
    if (req->hold && permits != 1) {
        snprintf(msg, msglen, "a held stream keeps one permit: permits must be 1 with hold");
        goto out;
    }
    if (req->hold && req->ttl_ms < HOLD_MIN_TTL_MS) {
        snprintf(msg, msglen, "ttl_ms must be at least %d with hold (it is renewed every third)",
                 HOLD_MIN_TTL_MS);
        goto out;
    }
    if (owner && !rules_owner_valid(owner, strlen(owner))) {
        snprintf(msg, msglen, "owner must be a string of 1 to %d printable ASCII bytes", RL_OWNER_MAX);
        goto out;
    }
    if (owner)
        snprintf(req->owner, sizeof req->owner, "%s", owner);
    req->limit = (int)limit;
    req->permits = (int)permits;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* Adds one permit token; -1 with msg when it is not one. */
static int add_token(sem_request *req, const char *tok, size_t len, char *msg, size_t msglen)
{
    char buf[SEM_TOKEN_MAX + 1], token[TOKEN_MAX_LEN + 1];
    int slot;
    if (len == 0 || len > SEM_TOKEN_MAX || req->ntokens == SEM_LIMIT_MAX) {
        snprintf(msg, msglen, "tokens must be 1 to %d permit tokens (\"<slot>:<token>\")", SEM_LIMIT_MAX);
        return -1;
    }
    memcpy(buf, tok, len);
    buf[len] = '\0';
    if (!rules_token_valid(buf, len) || !sem_token_split(buf, SEM_LIMIT_MAX, &slot, token, sizeof token)) {
        snprintf(msg, msglen, "a token is not a permit token (\"<slot>:<token>\", as acquire gave it)");
        return -1;
    }
    memcpy(req->tokens[req->ntokens++], buf, len + 1);
    return 0;
}

static int add_list(sem_request *req, const char *list, char *msg, size_t msglen)
{
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && *p == ' ') {
            p++;
            n--;
        }
        if (add_token(req, p, n, msg, msglen) < 0)
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

int api_sem_parse_tokens(bool extend, const char *header, const char *query, const char *body, size_t len,
                     const api_limits *lim, sem_request *req, char *msg, size_t msglen)
{
    req->op = extend ? SEM_EXTEND : SEM_RELEASE;
    req->ttl_ms = lim->default_ttl_ms;
    req->ntokens = 0;
    json_t *o = jsonio_read_object(body, len, true, msg, msglen);
    if (!o)
        return -1;
    int rc = -1;
    const char *one = NULL;
    if (extend && jsonio_int(o, "ttl_ms", 1, lim->max_ttl_ms, &req->ttl_ms, msg, msglen) < 0)
        goto out;
    if (header || query) {
        if (add_list(req, header ? header : query, msg, msglen) < 0)
            goto out;
    } else {
        const json_t *list = json_object_get(o, "tokens");
        if (jsonio_string(o, "token", &one, msg, msglen) < 0)
            goto out;
        if (json_is_array(list) && json_array_size(list) > 0) {
            size_t i;
            const json_t *t;
            json_array_foreach(list, i, t) {
                if (!json_is_string(t) ||
                    add_token(req, json_string_value(t), json_string_length(t), msg, msglen) < 0) {
                    snprintf(msg, msglen, "tokens must be an array of permit tokens (\"<slot>:<token>\")");
                    goto out;
                }
            }
        } else if (one) {
            if (add_token(req, one, strlen(one), msg, msglen) < 0)
                goto out;
        } else {
            snprintf(msg, msglen, "tokens are required (header Lock-Token, query ?token= or body \"tokens\")");
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

static void add_permits(cJSON *o, const sem_result *res, bool tokens)
{
    cJSON *arr = cJSON_AddArrayToObject(o, tokens ? "permits" : "holders");
    for (int i = 0; arr && i < res->npermits; i++) {
        const sem_permit *p = &res->permits[i];
        cJSON *x = cJSON_CreateObject();
        if (!x)
            return;
        jsonio_add_int(x, "slot", p->slot);
        if (tokens)
            cJSON_AddStringToObject(x, "token", p->token);
        jsonio_add_int(x, "fence", p->fence);
        jsonio_add_int(x, "validity_ms", p->validity_ms);
        if (!tokens && p->owner[0])
            cJSON_AddStringToObject(x, "owner", p->owner);
        cJSON_AddItemToArray(arr, x);
    }
}

char *api_sem_result_json(const sem_request *req, const sem_result *res, int *status,
                      long long *retry_after_s)
{
    *retry_after_s = 0;
    cJSON *o = NULL;
    if (res->outcome == RL_OK) {
        if (req->op == SEM_RELEASE || req->op == SEM_FORCE) {
            *status = 204;
            return NULL;
        }
        o = cJSON_CreateObject();
        if (!o)
            return NULL;
        cJSON_AddStringToObject(o, "name", req->name);
        if (req->op == SEM_INSPECT) {
            *status = 200;
            jsonio_add_int(o, "limit", res->limit);
            add_permits(o, res, false);
        } else {
            *status = req->op == SEM_ACQUIRE ? 201 : 200;
            if (req->op == SEM_ACQUIRE)
                jsonio_add_int(o, "limit", req->limit);
            add_permits(o, res, true);
            jsonio_add_int(o, "validity_ms", res->validity_ms);
            jsonio_add_int(o, "ttl_ms", res->ttl_ms);
        }
    } else if (res->limit_mismatch) {
        *status = api_errors[API_E_LIMIT_MISMATCH].status;
        o = cJSON_CreateObject();
        if (!o)
            return NULL;
        char m[200];
        snprintf(m, sizeof m, "the semaphore has %lld permits, not %d: every caller must give the same limit",
                 res->stored_limit, req->limit);
        cJSON_AddStringToObject(o, "error", api_errors[API_E_LIMIT_MISMATCH].code);
        cJSON_AddStringToObject(o, "message", m);
        jsonio_add_int(o, "limit", res->stored_limit);
    } else if (res->outcome == RL_LOCKED && req->op == SEM_ACQUIRE && res->last.outcome != RL_LOCKED) {
        /* every slot tried was held (the engine's own refusals are in last) */
        *status = api_errors[API_E_LOCKED].status;
        long long after_ms = res->retry_after_ms > 0 ? res->retry_after_ms : SEM_RETRY_MS;
        *retry_after_s = (after_ms + 999) / 1000;
        o = cJSON_CreateObject();
        if (!o)
            return NULL;
        char m[200];
        snprintf(m, sizeof m, "fewer than %d of the %d permits are free", req->permits, req->limit);
        cJSON_AddStringToObject(o, "error", api_errors[API_E_LOCKED].code);
        cJSON_AddStringToObject(o, "message", m);
        jsonio_add_int(o, "retry_after_ms", after_ms);
    } else {
        rl_request shown = {.op = req->op == SEM_ACQUIRE ? RL_ACQUIRE : req->op == SEM_EXTEND ? RL_EXTEND
                                  : req->op == SEM_RELEASE ? RL_RELEASE : req->op == SEM_FORCE ? RL_FORCE
                                                                                                : RL_INSPECT};
        snprintf(shown.name, sizeof shown.name, "%s", req->name);
        rl_result r = res->last;
        r.outcome = res->outcome;
        return api_result_json(&shown, &r, status, retry_after_s);
    }
    return jsonio_print_free(o);
}
