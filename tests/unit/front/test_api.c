/* Unit tests of the HTTP contract's pure parts: names, routes, bodies,
 * tokens, the error table and answer bodies. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "front/api.h"

static const api_limits lim = {30000, 3600000, 60000, NULL};

Test(route, maps_paths)
{
    const char *name;
    cr_assert_eq(api_route_of("/locks/orders", &name), ROUTE_LOCK);
    cr_assert_str_eq(name, "orders");
    cr_assert_eq(api_route_of("/locks/a/b", &name), ROUTE_LOCK);
    cr_assert_str_eq(name, "a/b");   /* refused later as bad_name */
    cr_assert_eq(api_route_of("/locks", &name), ROUTE_LIST_LOCKS);
    cr_assert_eq(api_route_of("/elections", &name), ROUTE_LIST_ELECTIONS);
    cr_assert_eq(api_route_of("/semaphores", &name), ROUTE_LIST_SEMAPHORES);
    cr_assert_eq(api_route_of("/ui", &name), ROUTE_UI);
    cr_assert_eq(api_route_of("/ui/", &name), ROUTE_UI);
    cr_assert_eq(api_route_of("/ui/state", &name), ROUTE_UI_STATE);
    cr_assert_eq(api_route_of("/ui/other", &name), ROUTE_NOT_FOUND);
    cr_assert_eq(api_route_of("/locks/", &name), ROUTE_NOT_FOUND);
    cr_assert_eq(api_route_of("/lock/x", &name), ROUTE_NOT_FOUND);
    cr_assert_eq(api_route_of("/healthz", &name), ROUTE_HEALTHZ);
    cr_assert_eq(api_route_of("/readyz", &name), ROUTE_READYZ);
    cr_assert_eq(api_route_of("/metrics", &name), ROUTE_METRICS);
    cr_assert_eq(api_route_of("/healthz/", &name), ROUTE_NOT_FOUND);
}

Test(route, methods)
{
    cr_assert(api_method_allowed(ROUTE_LOCK, "PATCH"));
    cr_assert_not(api_method_allowed(ROUTE_LOCK, "PUT"));
    cr_assert_not(api_method_allowed(ROUTE_HEALTHZ, "POST"));
    cr_assert_str_eq(api_allowed_methods(ROUTE_LOCK), "GET, POST, PATCH, DELETE");
    cr_assert_eq(api_op_of("POST"), RL_ACQUIRE);
    cr_assert_eq(api_op_of("PATCH"), RL_EXTEND);
    cr_assert_eq(api_op_of("DELETE"), RL_RELEASE);
    cr_assert_eq(api_op_of("GET"), RL_INSPECT);
}

static int parse(enum rl_op op, const char *body, rl_request *req, char *msg)
{
    bool tb;
    enum api_err err;
    memset(req, 0, sizeof *req);
    return api_parse_body(op, body, strlen(body), &lim, req, &tb, &err, msg, 160);
}

Test(body, empty_means_defaults)
{
    rl_request req;
    char msg[160];
    cr_assert_eq(parse(RL_ACQUIRE, "", &req, msg), 0);
    cr_assert_eq(req.ttl_ms, 30000);
    cr_assert_eq(req.wait_ms, 0);
    cr_assert_eq(parse(RL_ACQUIRE, " \n\t", &req, msg), 0);
    cr_assert_eq(parse(RL_ACQUIRE, "{}", &req, msg), 0);
    cr_assert_eq(req.ttl_ms, 30000);
}

Test(body, reads_fields_and_ignores_unknown)
{
    rl_request req;
    char msg[160];
    cr_assert_eq(parse(RL_ACQUIRE, "{\"ttl_ms\":5000,\"wait_ms\":250,\"x\":[1]}", &req, msg), 0);
    cr_assert_eq(req.ttl_ms, 5000);
    cr_assert_eq(req.wait_ms, 250);
    cr_assert_eq(parse(RL_ACQUIRE, "{\"ttl_ms\":3600000,\"wait_ms\":60000}", &req, msg), 0);
    cr_assert_eq(parse(RL_ACQUIRE, "{\"ttl_ms\":1,\"wait_ms\":0}", &req, msg), 0);
    /* an escaped backslash before u0000 is text, not a NUL */
    cr_assert_eq(parse(RL_ACQUIRE, "{\"owner\":\"a\\\\u0000\"}", &req, msg), 0, "%s", msg);
    cr_assert_str_eq(req.owner, "a\\u0000");
}

Test(body, refuses_bad_input_naming_the_field)
{
    struct {
        enum rl_op op;
        const char *body;
        const char *field;
    } cases[] = {
        {RL_ACQUIRE, "{", "JSON"},
        {RL_ACQUIRE, "{\"ttl_ms\":}", "JSON"},
        {RL_ACQUIRE, "[1]", "object"},
        {RL_ACQUIRE, "\"x\"", "object"},
        {RL_ACQUIRE, "null", "object"},
        {RL_ACQUIRE, "{\"ttl_ms\":\"5000\"}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":1.5}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":0}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":-1}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":3600001}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":1e300}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":true}", "ttl_ms"},
        {RL_ACQUIRE, "{\"ttl_ms\":null}", "ttl_ms"},
        {RL_ACQUIRE, "{\"wait_ms\":-5}", "wait_ms"},
        {RL_ACQUIRE, "{\"wait_ms\":60001}", "wait_ms"},
        {RL_ACQUIRE, "{\"wait_ms\":\"10\"}", "wait_ms"},
        {RL_EXTEND, "{\"ttl_ms\":99999999}", "ttl_ms"},
        {RL_EXTEND, "{\"token\":5}", "token"},
        {RL_RELEASE, "{\"token\":[\"a\"]}", "token"},
        {RL_ACQUIRE, "{\"ttl_ms\":1000} trailing", "JSON"},
        {RL_ACQUIRE, "{\"hold\":1}", "hold"},
        {RL_ACQUIRE, "{\"hold\":\"true\"}", "hold"},
        {RL_ACQUIRE, "{\"hold\":true,\"ttl_ms\":999}", "ttl_ms"},
        {RL_ACQUIRE, "{\"owner\":\"\"}", "owner"},
        {RL_ACQUIRE, "{\"owner\":5}", "owner"},
        {RL_ACQUIRE, "{\"owner\":\"a\\nb\"}", "owner"},
        {RL_ACQUIRE, "{\"owner\":\"a\\u0000b\"}", "NUL"},
        {RL_RELEASE, "{\"token\":\"abc\\u0000def\"}", "NUL"},
        {RL_ACQUIRE, "{\"owner\":\"a\\u001fb\"}", "owner"},
        {RL_ACQUIRE, "{\"owner\":\"a\\u007fb\"}", "owner"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rl_request req;
        char msg[160] = "";
        cr_assert_eq(parse(cases[i].op, cases[i].body, &req, msg), -1, "accepted %s",
                     cases[i].body);
        cr_assert(strstr(msg, cases[i].field), "message \"%s\" for %s does not name %s", msg,
                  cases[i].body, cases[i].field);
    }
}

Test(body, hold_and_owner)
{
    rl_request req;
    char msg[160];
    cr_assert_eq(parse(RL_ACQUIRE, "{\"hold\":true,\"ttl_ms\":1000,\"owner\":\"pod-1 ~x\"}", &req, msg), 0);
    cr_assert(req.hold);
    cr_assert_str_eq(req.owner, "pod-1 ~x");
    cr_assert_eq(parse(RL_ACQUIRE, "{\"hold\":false,\"ttl_ms\":1}", &req, msg), 0, "%s", msg);
    cr_assert(!req.hold);
    cr_assert_str_eq(req.owner, "");
    cr_assert_eq(parse(RL_ACQUIRE, "{\"hold\":true}", &req, msg), 0, "the default ttl is long enough");
    char body[300], owner[RL_OWNER_MAX + 2];
    memset(owner, 'o', RL_OWNER_MAX);
    owner[RL_OWNER_MAX] = '\0';
    snprintf(body, sizeof body, "{\"owner\":\"%s\"}", owner);
    cr_assert_eq(parse(RL_ACQUIRE, body, &req, msg), 0, "128 bytes: %s", msg);
    cr_assert_eq(strlen(req.owner), RL_OWNER_MAX);
    snprintf(body, sizeof body, "{\"owner\":\"%so\"}", owner);
    cr_assert_eq(parse(RL_ACQUIRE, body, &req, msg), -1, "129 bytes");
}

Test(answers, inspect_shows_owner_and_fence_while_held)
{
    rl_request req = {.op = RL_INSPECT};
    strcpy(req.name, "n");
    rl_result res = {.outcome = RL_OK, .held = true, .validity_ms = 10, .fence = 9007199254740991LL};
    strcpy(res.owner, "pod \"7\"");
    int status;
    long long ra;
    char *s = api_result_json(&req, &res, &status, &ra);
    cr_assert(strstr(s, "\"fence\":9007199254740991"), "%s", s);
    cr_assert(strstr(s, "\"owner\":\"pod \\\"7\\\"\""), "escaped: %s", s);
    free(s);
    res.held = false;
    s = api_result_json(&req, &res, &status, &ra);
    cr_assert_null(strstr(s, "owner"), "%s", s);
    cr_assert_null(strstr(s, "fence"), "%s", s);
    free(s);
}

Test(answers, too_many_holds_is_429_with_retry_after)
{
    rl_request req = {.op = RL_ACQUIRE};
    rl_result res = {.outcome = RL_TOO_MANY_HOLDS, .retry_after_ms = 1000};
    int status;
    long long ra;
    char *s = api_result_json(&req, &res, &status, &ra);
    cr_assert_eq(status, 429);
    cr_assert_eq(ra, 1);
    cr_assert(strstr(s, "\"too_many_holds\""), "%s", s);
    free(s);
}

Test(body, extend_ttl_defaults)
{
    rl_request req;
    char msg[160];
    cr_assert_eq(parse(RL_EXTEND, "{\"token\":\"abc\"}", &req, msg), 0);
    cr_assert_eq(req.ttl_ms, 30000);
    cr_assert_str_eq(req.token, "abc");
}

Test(token, header_wins_over_query_over_body)
{
    rl_request req = {0};
    char msg[160];
    strcpy(req.token, "body");
    cr_assert_eq(api_pick_token("hdr", "query", true, &req, msg, sizeof msg), 0);
    cr_assert_str_eq(req.token, "hdr");
    strcpy(req.token, "body");
    cr_assert_eq(api_pick_token(NULL, "query", true, &req, msg, sizeof msg), 0);
    cr_assert_str_eq(req.token, "query");
    strcpy(req.token, "body");
    cr_assert_eq(api_pick_token(NULL, NULL, true, &req, msg, sizeof msg), 0);
    cr_assert_str_eq(req.token, "body");
}

Test(token, missing_or_malformed_is_refused)
{
    rl_request req = {0};
    char msg[160];
    cr_assert_eq(api_pick_token(NULL, NULL, false, &req, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "token"));
    cr_assert_eq(api_pick_token("has space", NULL, false, &req, msg, sizeof msg), -1);
    cr_assert_eq(api_pick_token("", NULL, false, &req, msg, sizeof msg), -1);
    cr_assert_eq(api_pick_token(NULL, "quo\"te", false, &req, msg, sizeof msg), -1);
}

Test(errors, table_maps_outcomes_to_statuses)
{
    struct {
        enum rl_outcome o;
        int status;
        const char *code;
    } rows[] = {
        {RL_LOCKED, 409, "locked"},
        {RL_NOT_HELD, 409, "not_held"},
        {RL_NO_QUORUM, 503, "no_quorum"},
        {RL_INTERNAL, 500, "internal"},
        {RL_SHUTTING_DOWN, 503, "shutting_down"},
    };
    cr_assert_eq(api_err_of_outcome(RL_OK), -1);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int e = api_err_of_outcome(rows[i].o);
        cr_assert_eq(api_errors[e].status, rows[i].status);
        cr_assert_str_eq(api_errors[e].code, rows[i].code);
    }
    cr_assert_eq(api_errors[API_E_BAD_NAME].status, 400);
    cr_assert_str_eq(api_errors[API_E_BAD_NAME].code, "bad_name");
    cr_assert_eq(api_errors[API_E_TOO_LARGE].status, 413);
    cr_assert_eq(api_errors[API_E_METHOD].status, 405);
    cr_assert_eq(api_errors[API_E_UNAUTHORIZED].status, 401);
    cr_assert_eq(api_errors[API_E_NOT_FOUND].status, 404);
    for (int i = 0; i < API_E_COUNT; i++)
        cr_assert_not_null(api_errors[i].code, "error %d has no row", i);
}

static cJSON *answer(rl_request *req, rl_result *res, int *status, long long *ra)
{
    char *s = api_result_json(req, res, status, ra);
    if (!s)
        return NULL;
    cJSON *j = cJSON_Parse(s);
    cr_assert_not_null(j, "not JSON: %s", s);
    free(s);
    return j;
}

Test(answers, grant_carries_exact_53_bit_fence)
{
    rl_request req = {.op = RL_ACQUIRE};
    strcpy(req.name, "orders");
    rl_result res = {.outcome = RL_OK, .validity_ms = 29690, .ttl_ms = 30000,
                     .fence = 9007199254740991LL};
    strcpy(res.token, "tok");
    int status;
    long long ra;
    char *s = api_result_json(&req, &res, &status, &ra);
    cr_assert_eq(status, 201);
    cr_assert(strstr(s, "\"fence\":9007199254740991"), "%s", s);
    cr_assert(strstr(s, "\"validity_ms\":29690"), "%s", s);
    cr_assert(strstr(s, "\"name\":\"orders\""), "%s", s);
    free(s);
    req.op = RL_EXTEND;
    s = api_result_json(&req, &res, &status, &ra);
    cr_assert_eq(status, 200);
    free(s);
}

Test(answers, locked_has_retry_after_rounded_up)
{
    rl_request req = {.op = RL_ACQUIRE};
    rl_result res = {.outcome = RL_LOCKED, .retry_after_ms = 1001};
    int status;
    long long ra;
    cJSON *j = answer(&req, &res, &status, &ra);
    cr_assert_eq(status, 409);
    cr_assert_eq(ra, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, "locked");
    cr_assert_eq(cJSON_GetObjectItem(j, "retry_after_ms")->valuedouble, 1001);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "message")));
    cJSON_Delete(j);
    res.retry_after_ms = 0;
    j = answer(&req, &res, &status, &ra);
    cr_assert_eq(ra, 1, "Retry-After is at least 1");
    cJSON_Delete(j);
}

Test(answers, not_held_reasons_and_no_quorum_counts)
{
    rl_request req = {.op = RL_RELEASE};
    rl_result res = {.outcome = RL_NOT_HELD, .reason = RL_REASON_HELD_BY_OTHER};
    int status;
    long long ra;
    cJSON *j = answer(&req, &res, &status, &ra);
    cr_assert_eq(status, 409);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "reason")->valuestring, "held_by_other");
    cJSON_Delete(j);
    res.reason = RL_REASON_EXPIRED;
    j = answer(&req, &res, &status, &ra);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "reason")->valuestring, "expired");
    cJSON_Delete(j);
    res = (rl_result){.outcome = RL_NO_QUORUM, .masters_ok = 2, .masters_total = 5};
    j = answer(&req, &res, &status, &ra);
    cr_assert_eq(status, 503);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, "no_quorum");
    cr_assert_eq(cJSON_GetObjectItem(j, "masters_ok")->valueint, 2);
    cr_assert_eq(cJSON_GetObjectItem(j, "masters_total")->valueint, 5);
    cJSON_Delete(j);
}

Test(answers, release_is_204_without_body_and_inspect_hides_token)
{
    rl_request req = {.op = RL_RELEASE};
    rl_result res = {.outcome = RL_OK};
    strcpy(res.token, "secret-token");
    int status;
    long long ra;
    cr_assert_null(api_result_json(&req, &res, &status, &ra));
    cr_assert_eq(status, 204);
    req.op = RL_INSPECT;
    strcpy(req.name, "n");
    res.held = true;
    res.validity_ms = 10;
    char *s = api_result_json(&req, &res, &status, &ra);
    cr_assert_eq(status, 200);
    cr_assert_null(strstr(s, "secret-token"));
    cr_assert(strstr(s, "\"held\":true"));
    free(s);
}

/* ---- Dapr ---- */

static const api_limits dapr_lim = {30000, 3600000, 60000, NULL};

static int dapr(bool unlock, const char *store, const char *body, rl_request *req, const char **code)
{
    char msg[300];
    return api_parse_dapr(unlock, store, "lockstore,orders", body, strlen(body), &dapr_lim, req, code,
                          msg, sizeof msg);
}

/* The lock name of resource in store, with stores and app id as given. */
static const char *dapr_name(const char *stores, const char *app_id, const char *store, const char *resource)
{
    static rl_request req;
    const char *code;
    char msg[300];
    api_limits with_id = dapr_lim;
    with_id.dapr_app_id = app_id;
    int rc = api_dapr_request(false, store, stores, resource, "o", 5, &with_id, &req, &code, msg, sizeof msg);
    cr_assert_eq(rc, 0, "%s: %s", resource, msg);
    return req.name;
}

Test(api, dapr_lock_body_maps_store_and_owner)
{
    rl_request req;
    const char *code;
    cr_assert_eq(dapr(false, "orders", "{\"resourceId\":\"a.b-c_1:x\",\"lockOwner\":\"o-1\",\"expiryInSeconds\":7}",
                      &req, &code), 0);
    cr_assert_eq(req.op, RL_ACQUIRE);
    cr_assert_str_eq(req.name, "orders||a.b-c_1:x", "keyPrefix name, without an app id");
    cr_assert_str_eq(req.token, "o-1");
    cr_assert(req.token_given);
    cr_assert_eq(req.ttl_ms, 7000);
    cr_assert_eq(req.wait_ms, 0);
    cr_assert_eq(dapr(true, "lockstore", "{\"resourceId\":\"r\",\"lockOwner\":\"o\"}", &req, &code), 0);
    cr_assert_eq(req.op, RL_RELEASE);
    cr_assert_str_eq(req.name, "lockstore||r");
}

/* daprd's keyPrefix choices, per store; resource ids and owners as daprd
 * takes them. */
Test(api, dapr_key_prefixes_are_daprds)
{
    const char *stores = "a,b=appid,c=name,d=none,e=tenant-7";
    cr_assert_str_eq(dapr_name(stores, NULL, "a", "orders/42"), "a||orders/42");
    cr_assert_str_eq(dapr_name(stores, "shop", "a", "orders/42"), "shop||orders/42");
    cr_assert_str_eq(dapr_name(stores, "shop", "b", "x"), "shop||x");
    cr_assert_str_eq(dapr_name(stores, NULL, "b", "x"), "x", "appid without an app id: the bare id, as daprd");
    cr_assert_str_eq(dapr_name(stores, "shop", "c", "x"), "c||x");
    cr_assert_str_eq(dapr_name(stores, "shop", "d", "x"), "x");
    cr_assert_str_eq(dapr_name(stores, "shop", "e", "x"), "tenant-7||x");
    const char *ids[] = {"orders/42", "user@example.com", "a b", "caf\xc3\xa9", "a#fence", "{\"q\"}"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        cr_assert(strstr(dapr_name(stores, NULL, "a", ids[i]), ids[i]));
    char longest[API_DAPR_RESOURCE_MAX + 1];
    memset(longest, 'r', API_DAPR_RESOURCE_MAX);
    longest[API_DAPR_RESOURCE_MAX] = '\0';
    char store[API_DAPR_STORE_MAX + 1];
    memset(store, 's', API_DAPR_STORE_MAX);
    store[API_DAPR_STORE_MAX] = '\0';
    cr_assert_eq(strlen(dapr_name(store, NULL, store, longest)), API_DAPR_STORE_MAX + 2 + API_DAPR_RESOURCE_MAX,
                 "the longest store and resourceId fit");
    rl_request req;
    const char *code;
    char msg[300];
    cr_assert_eq(api_dapr_request(false, "a", stores, "x", "worker 7 \"q\" \\ \xc3\xa9", 5, &dapr_lim, &req, &code, msg,
                                  sizeof msg), 0, "%s", msg);
    cr_assert_str_eq(req.token, "worker 7 \"q\" \\ \xc3\xa9");
}

Test(api, dapr_rejects_like_dapr)
{
    rl_request req;
    const char *code;
    const char *bad[] = {
        "{\"resourceId\":\"\",\"lockOwner\":\"o\",\"expiryInSeconds\":1}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"\",\"expiryInSeconds\":1}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":0}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":1.5}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":3601}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"two\\nlines\",\"expiryInSeconds\":1}",
        "{\"resourceId\":\"r\\u0001\",\"lockOwner\":\"o\",\"expiryInSeconds\":1}",
        "{\"resourceId\":\"r\\u001f#fence\",\"lockOwner\":\"o\",\"expiryInSeconds\":1}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\\u0000p\",\"expiryInSeconds\":1}",
        /* daprd's own refusal: || joins its keys */
        "{\"resourceId\":\"a||b\",\"lockOwner\":\"o\",\"expiryInSeconds\":1}",
        "[1]",
        "{} trailing",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(dapr(false, "lockstore", bad[i], &req, &code), -1, "%s", bad[i]);
        cr_assert_str_eq(code, API_DAPR_ERR_MALFORMED);
    }
    cr_assert_eq(dapr(false, "nope", "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":1}", &req,
                      &code), -1);
    cr_assert_str_eq(code, API_DAPR_ERR_STORE);
    cr_assert_eq(dapr(false, "lock", "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":1}", &req,
                      &code), -1, "a prefix of a served store is not served");
}

Test(api, dapr_answers)
{
    int status;
    rl_result ok = {.outcome = RL_OK}, locked = {.outcome = RL_LOCKED},
              gone = {.outcome = RL_NOT_HELD, .reason = RL_REASON_EXPIRED},
              other = {.outcome = RL_NOT_HELD, .reason = RL_REASON_HELD_BY_OTHER},
              nq = {.outcome = RL_NO_QUORUM};
    char *b = api_dapr_result_json(false, &ok, &status);
    cr_assert_eq(status, 200);
    cr_assert_str_eq(b, "{\"success\":true}");
    free(b);
    b = api_dapr_result_json(false, &locked, &status);
    cr_assert_str_eq(b, "{\"success\":false}");
    free(b);
    b = api_dapr_result_json(true, &ok, &status);
    cr_assert_str_eq(b, "{\"status\":0}");
    free(b);
    b = api_dapr_result_json(true, &gone, &status);
    cr_assert_str_eq(b, "{\"status\":1}");
    free(b);
    b = api_dapr_result_json(true, &other, &status);
    cr_assert_str_eq(b, "{\"status\":2}");
    free(b);
    b = api_dapr_result_json(false, &nq, &status);
    cr_assert_eq(status, 500);
    cr_assert(strstr(b, "\"errorCode\":\"ERR_TRY_LOCK\""), "%s", b);
    free(b);
    const char *route_name;
    cr_assert_eq(api_route_of("/v1.0-alpha1/lock/lockstore", &route_name), ROUTE_DAPR_LOCK);
    cr_assert_str_eq(route_name, "lockstore");
    cr_assert_eq(api_route_of("/v1.0-alpha1/unlock/s", &route_name), ROUTE_DAPR_UNLOCK);
    cr_assert_eq(api_route_of("/v1.0-alpha1/lock/", &route_name), ROUTE_NOT_FOUND);
    cr_assert_eq(api_route_of("/v1.0/healthz", &route_name), ROUTE_DAPR_HEALTHZ);
    cr_assert_eq(api_route_of("/v1.0/metadata", &route_name), ROUTE_DAPR_METADATA);
}

/* A 503 no_quorum says what kept the majority from voting. */
Test(no_quorum, message_names_the_cause)
{
    char m[300];
    rl_result r = {.outcome = RL_NO_QUORUM, .masters_ok = 1, .masters_total = 5};
    api_no_quorum_message(&r, m, sizeof m);
    cr_assert_str_eq(m, "fewer than a majority of the Redis masters answered in time");
    r.masters_ok = 2;
    r.masters_refusing = 3;
    snprintf(r.refusal, sizeof r.refusal, "OOM command not allowed when used memory > 'maxmemory'.");
    api_no_quorum_message(&r, m, sizeof m);
    cr_assert_str_eq(m, "fewer than a majority of the Redis masters could vote (2 of 5 did): 3 answered "
                        "with an error (OOM command not allowed when used memory > 'maxmemory'.)");
    r.masters_ok = 0;
    r.masters_refusing = 1;
    r.masters_quarantined = 2;
    api_no_quorum_message(&r, m, sizeof m);
    cr_assert_str_eq(m, "fewer than a majority of the Redis masters could vote (0 of 5 did): 1 answered "
                        "with an error (OOM command not allowed when used memory > 'maxmemory'.), 2 sit "
                        "out in restart quarantine, 2 did not answer in time");
    rl_result setup = {.outcome = RL_NO_QUORUM, .masters_total = 5, .masters_quarantined = 4,
                       .setup_pending = true};
    api_no_quorum_message(&setup, m, sizeof m);
    cr_assert_str_eq(m, "the masters are not set up as one cluster yet: set-up needs every master to "
                        "answer, and 4 of 5 did (see /readyz)");
    char small[20];
    api_no_quorum_message(&r, small, sizeof small);   /* cut, never overrun */
    cr_assert_eq(strlen(small), sizeof small - 1);
}

/* RFC 9112's framing rules that libmicrohttpd 0.9.75 leaves to us. */
static int framing(const char *const *hdrs, bool http11, char *msg)
{
    api_framing f;
    memset(&f, 0, sizeof f);
    for (; *hdrs; hdrs += 2)
        api_framing_header(&f, hdrs[0], hdrs[1]);
    return api_framing_verdict(&f, http11, msg, 200);
}

Test(framing, refuses_what_the_library_lets_through)
{
    char msg[200];
    const char *ok[] = {"Host", "x", "Content-Length", "2", NULL};
    cr_assert_eq(framing(ok, true, msg), -1);
    const char *chunked[] = {"Host", "x", "Transfer-Encoding", "Chunked ", NULL};
    cr_assert_eq(framing(chunked, true, msg), -1);
    const char *no_host[] = {"Content-Length", "2", NULL};
    cr_assert_eq(framing(no_host, true, msg), API_E_BAD_FRAMING);
    cr_assert(strstr(msg, "Host"), "%s", msg);
    cr_assert_eq(framing(no_host, false, msg), -1, "HTTP/1.0 needs no Host");
    const char *two_hosts[] = {"Host", "a", "Host", "b", NULL};
    cr_assert_eq(framing(two_hosts, true, msg), API_E_BAD_FRAMING);
    /* "Content-Length: 2" folded onto " 40": the library makes the name
     * "Content-Length40", so the body would be read as the next request */
    const char *folded[] = {"Host", "x", "Content-Length40", "2", NULL};
    cr_assert_eq(framing(folded, true, msg), API_E_BAD_FRAMING);
    cr_assert(strstr(msg, "Content-Length40"), "%s", msg);
    const char *spaced[] = {"Host", "x", "X-Trace id", "1", NULL};
    cr_assert_eq(framing(spaced, true, msg), API_E_BAD_FRAMING);
    const char *gzip[] = {"Host", "x", "Transfer-Encoding", "gzip", NULL};
    cr_assert_eq(framing(gzip, true, msg), API_E_NOT_IMPLEMENTED);
    const char *gzip_chunked[] = {"Host", "x", "Transfer-Encoding", "gzip, chunked", NULL};
    cr_assert_eq(framing(gzip_chunked, true, msg), API_E_NOT_IMPLEMENTED);
    const char *both[] = {"Host", "x", "Transfer-Encoding", "chunked", "Content-Length", "2", NULL};
    cr_assert_eq(framing(both, true, msg), API_E_BAD_FRAMING);
    const char *lengths[] = {"Host", "x", "Content-Length", "2", "Content-Length", "3", NULL};
    cr_assert_eq(framing(lengths, true, msg), API_E_BAD_FRAMING);
    cr_assert_eq(api_errors[API_E_NOT_IMPLEMENTED].status, 501);
}

/* A 503 names the cause /readyz gives for a master that is down. */
Test(answers, no_quorum_names_why_masters_are_down)
{
    rl_result res = {.outcome = RL_NO_QUORUM, .masters_ok = 1, .masters_total = 5,
                     .masters_down = 4};
    snprintf(res.down_reason, sizeof res.down_reason,
             "127.0.0.1:6381: AUTH refused: WRONGPASS invalid username-password pair");
    char msg[300];
    api_no_quorum_message(&res, msg, sizeof msg);
    cr_assert(strstr(msg, "4 are down (127.0.0.1:6381: AUTH refused: WRONGPASS"), "%s", msg);
    cr_assert_null(strstr(msg, "in time"), "%s", msg);
    res.masters_down = 0;
    api_no_quorum_message(&res, msg, sizeof msg);
    cr_assert(strstr(msg, "answered in time"), "%s", msg);
}

/* What an unauthenticated /readyz shows of a master's reason: its class. */
Test(api, reason_classes_hide_the_servers_text)
{
    const char *cases[][2] = {
        {"AUTH refused: WRONGPASS invalid username-password pair", "auth_refused"},
        {"PING refused: NOPERM User locker has no permissions to run the 'ping' command", "command_refused"},
        {"Connection refused", "connection_refused"}, {"reply timed out", "timeout"},
        {"no reply for a second", "timeout"}, {"TLS handshake timed out (a plain port, or a paused master?)", "timeout"},
        {"TLS handshake failed: certificate verify failed: unable to get local issuer certificate", "tls"},
        {"stopping", "stopping"}, {"Connection reset by peer", "connection_error"},
        {"protocol error", "connection_error"}, {"", ""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_str_eq(api_reason_class(cases[i][0]), cases[i][1], "%s", cases[i][0]);
}
