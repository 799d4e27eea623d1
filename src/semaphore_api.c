/* semaphore_api.c - see semaphore_api.h. */
#include "semaphore_api.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

void sem_slot_name(const char *name, int slot, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s#%d", name, slot);
}

void sem_limit_name(const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s#limit", name);
}

bool sem_token_split(const char *permit, int limit_max, int *slot, char *token, size_t tokenlen)
{
    const char *colon = strchr(permit, ':');
    if (!colon || colon == permit || colon - permit > 2 || !colon[1] || strlen(colon + 1) >= tokenlen)
        return false;
    int s = 0;
    for (const char *p = permit; p < colon; p++) {
        if (*p < '0' || *p > '9')
            return false;
        s = s * 10 + (*p - '0');
    }
    if (s >= limit_max)
        return false;
    *slot = s;
    snprintf(token, tokenlen, "%s", colon + 1);
    return true;
}

static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i]))
            return false;
    return true;
}

/* The body as an object (NULL with msg); an empty body is {} when allowed. */
static cJSON *object_of(const char *body, size_t len, bool empty_ok, char *msg, size_t msglen)
{
    if (blank(body, len)) {
        if (empty_ok)
            return cJSON_CreateObject();
        snprintf(msg, msglen, "a JSON body is required");
        return NULL;
    }
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (o && !blank(end, len - (size_t)(end - body))) {
        cJSON_Delete(o);
        o = NULL;
    }
    if (!o || !cJSON_IsObject(o) || memmem(body, len, "\\u0000", 6)) {
        snprintf(msg, msglen, "the body must be a JSON object (without NUL characters)");
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int int_of(const cJSON *o, const char *f, long long min, long long max, long long *out, char *msg,
                  size_t msglen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble ||
        v->valuedouble < (double)min || v->valuedouble > (double)max) {
        snprintf(msg, msglen, "%s must be a whole number from %lld to %lld", f, min, max);
        return -1;
    }
    *out = (long long)v->valuedouble;
    return 0;
}

int sem_parse_acquire(const char *body, size_t len, const api_limits *lim, sem_request *req,
                      char *msg, size_t msglen)
{
    req->op = SEM_ACQUIRE;
    req->ttl_ms = lim->default_ttl_ms;
    req->wait_ms = 0;
    cJSON *o = object_of(body, len, false, msg, msglen);
    if (!o)
        return -1;
    int rc = -1;
    long long limit = 0, permits = 1;
    if (!cJSON_GetObjectItemCaseSensitive(o, "limit")) {
        snprintf(msg, msglen, "limit is required (the number of permits, 1 to %d)", SEM_LIMIT_MAX);
        goto out;
    }
    if (int_of(o, "limit", 1, SEM_LIMIT_MAX, &limit, msg, msglen) < 0 ||
        int_of(o, "permits", 1, limit, &permits, msg, msglen) < 0 ||
        int_of(o, "ttl_ms", 1, lim->max_ttl_ms, &req->ttl_ms, msg, msglen) < 0 ||
        int_of(o, "wait_ms", 0, lim->max_wait_ms, &req->wait_ms, msg, msglen) < 0)
        goto out;
    const cJSON *hold = cJSON_GetObjectItemCaseSensitive(o, "hold");
    if (hold && !cJSON_IsBool(hold)) {
        snprintf(msg, msglen, "hold must be true or false");
        goto out;
    }
    req->hold = cJSON_IsTrue(hold);
    if (req->hold && permits != 1) {
        snprintf(msg, msglen, "a held stream keeps one permit: permits must be 1 with hold");
        goto out;
    }
    if (req->hold && req->ttl_ms < API_HOLD_MIN_TTL_MS) {
        snprintf(msg, msglen, "ttl_ms must be at least %d with hold (it is renewed every third)",
                 API_HOLD_MIN_TTL_MS);
        goto out;
    }
    const cJSON *owner = cJSON_GetObjectItemCaseSensitive(o, "owner");
    if (owner && !(cJSON_IsString(owner) && rules_owner_valid(owner->valuestring, strlen(owner->valuestring)))) {
        snprintf(msg, msglen, "owner must be a string of 1 to %d printable ASCII bytes", RL_OWNER_MAX);
        goto out;
    }
    if (owner)
        snprintf(req->owner, sizeof req->owner, "%s", owner->valuestring);
    req->limit = (int)limit;
    req->permits = (int)permits;
    rc = 0;
out:
    cJSON_Delete(o);
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

int sem_parse_tokens(bool extend, const char *header, const char *query, const char *body, size_t len,
                     const api_limits *lim, sem_request *req, char *msg, size_t msglen)
{
    req->op = extend ? SEM_EXTEND : SEM_RELEASE;
    req->ttl_ms = lim->default_ttl_ms;
    req->ntokens = 0;
    cJSON *o = object_of(body, len, true, msg, msglen);
    if (!o)
        return -1;
    int rc = -1;
    if (extend && int_of(o, "ttl_ms", 1, lim->max_ttl_ms, &req->ttl_ms, msg, msglen) < 0)
        goto out;
    if (header || query) {
        if (add_list(req, header ? header : query, msg, msglen) < 0)
            goto out;
    } else {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        const cJSON *one = cJSON_GetObjectItemCaseSensitive(o, "token");
        if (list && cJSON_IsArray(list) && cJSON_GetArraySize(list) > 0) {
            const cJSON *t;
            cJSON_ArrayForEach(t, list) {
                if (!cJSON_IsString(t) || add_token(req, t->valuestring, strlen(t->valuestring), msg, msglen) < 0) {
                    snprintf(msg, msglen, "tokens must be an array of permit tokens (\"<slot>:<token>\")");
                    goto out;
                }
            }
        } else if (cJSON_IsString(one)) {
            if (add_token(req, one->valuestring, strlen(one->valuestring), msg, msglen) < 0)
                goto out;
        } else {
            snprintf(msg, msglen, "tokens are required (header Lock-Token, query ?token= or body \"tokens\")");
            goto out;
        }
    }
    rc = 0;
out:
    cJSON_Delete(o);
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
        cJSON_AddNumberToObject(x, "slot", p->slot);
        if (tokens)
            cJSON_AddStringToObject(x, "token", p->token);
        cJSON_AddNumberToObject(x, "fence", (double)p->fence);
        cJSON_AddNumberToObject(x, "validity_ms", (double)p->validity_ms);
        if (!tokens && p->owner[0])
            cJSON_AddStringToObject(x, "owner", p->owner);
        cJSON_AddItemToArray(arr, x);
    }
}

char *sem_result_json(const sem_request *req, const sem_result *res, int *status,
                      long long *retry_after_s)
{
    *retry_after_s = 0;
    cJSON *o = NULL;
    if (res->outcome == RL_OK) {
        if (req->op == SEM_RELEASE) {
            *status = 204;
            return NULL;
        }
        o = cJSON_CreateObject();
        if (!o)
            return NULL;
        cJSON_AddStringToObject(o, "name", req->name);
        if (req->op == SEM_INSPECT) {
            *status = 200;
            cJSON_AddNumberToObject(o, "limit", res->limit);
            add_permits(o, res, false);
        } else {
            *status = req->op == SEM_ACQUIRE ? 201 : 200;
            if (req->op == SEM_ACQUIRE)
                cJSON_AddNumberToObject(o, "limit", req->limit);
            add_permits(o, res, true);
            cJSON_AddNumberToObject(o, "validity_ms", (double)res->validity_ms);
            cJSON_AddNumberToObject(o, "ttl_ms", (double)res->ttl_ms);
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
        cJSON_AddNumberToObject(o, "limit", (double)res->stored_limit);
    } else if (res->outcome == RL_LOCKED && req->op == SEM_ACQUIRE && res->last.outcome != RL_LOCKED) {
        /* every slot tried was held (the engine's own refusals are in last) */
        *status = api_errors[API_E_LOCKED].status;
        *retry_after_s = 1;
        o = cJSON_CreateObject();
        if (!o)
            return NULL;
        char m[200];
        snprintf(m, sizeof m, "fewer than %d of the %d permits are free", req->permits, req->limit);
        cJSON_AddStringToObject(o, "error", api_errors[API_E_LOCKED].code);
        cJSON_AddStringToObject(o, "message", m);
        cJSON_AddNumberToObject(o, "retry_after_ms", SEM_RETRY_MS);
    } else {
        rl_request shown = {.op = req->op == SEM_ACQUIRE ? RL_ACQUIRE : req->op == SEM_EXTEND ? RL_EXTEND
                                  : req->op == SEM_RELEASE ? RL_RELEASE : RL_INSPECT};
        snprintf(shown.name, sizeof shown.name, "%s", req->name);
        rl_result r = res->last;
        r.outcome = res->outcome;
        return api_result_json(&shown, &r, status, retry_after_s);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
