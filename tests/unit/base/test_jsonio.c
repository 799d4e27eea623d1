/* Unit tests of the one strict JSON reader (every request body, native and
 * Dapr) and the one integer writer (every answer and event): raw control
 * bytes, escaped NULs, duplicate keys, non-integer numbers, overflow and bad
 * UTF-8 are refused with a message naming the field; integers are printed
 * as integer literals. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "recipes/recipes.h"
#include "front/api.h"
#include "front/semaphore_api.h"

static const api_limits lim = {30000, 3600000, 60000, NULL};

/* Bodies are given with their length: some hold raw NULs. */
struct bad {
    const char *body;
    size_t len;
    const char *names;   /* a word the message must hold */
};
#define BAD(lit, names) {lit, sizeof lit - 1, names}

static const struct bad bad_bodies[] = {
    BAD("{\"owner\":\"web\0-evil\"}", "owner"),
    BAD("{\"owner\":\"web\x01-evil\"}", "owner"),
    BAD("{\"owner\":\"web\x1f\"}", "control"),
    BAD("{\"ttl_ms\":1000,\"owner\":\"a\nb\"}", "owner"),
    BAD("{\"owner\":\"a\\u0000b\"}", "NUL"),
    BAD("{\"ttl_ms\":1000,\"ttl_ms\":-1}", "ttl_ms"),
    BAD("{\"ttl_ms\":1000,\"wait_ms\":1,\"ttl_ms\":2000}", "ttl_ms"),
    BAD("{\"ttl_ms\":1.0}", "ttl_ms"),
    BAD("{\"ttl_ms\":1e3}", "ttl_ms"),
    BAD("{\"ttl_ms\":1E3}", "ttl_ms"),
    BAD("{\"ttl_ms\":1500.5}", "ttl_ms"),
    BAD("{\"ttl_ms\":99999999999999999999}", "ttl_ms"),
    BAD("{\"ttl_ms\":-99999999999999999999}", "ttl_ms"),
    BAD("{\"ttl_ms\":-1}", "ttl_ms"),
    BAD("{\"wait_ms\":2.5}", "wait_ms"),
    BAD("{\"owner\":\"caf\xc3\"}", "owner"),
    BAD("{\"owner\":\"\xff\"}", "UTF-8"),
    BAD("{\"ttl_ms\":1000} x", "JSON"),
    BAD("{\"ttl_ms\":1000}\0", "NUL"),
    /* jansson 2.14 dropped a NUL right after a number (tests/fuzz found it) */
    BAD("{\"ttl_ms\": 15000\0}", "ttl_ms"),
    BAD("{\"hold\": true\0, \"ttl_ms\": 5000}", "hold"),
};

Test(reader, refuses_what_would_be_read_otherwise_naming_the_field)
{
    for (size_t i = 0; i < sizeof bad_bodies / sizeof bad_bodies[0]; i++) {
        const struct bad *b = &bad_bodies[i];
        rl_request req;
        bool from_body;
        enum api_err err;
        char msg[200] = "";
        cr_assert_eq(api_parse_body(RL_ACQUIRE, b->body, b->len, &lim, &req, &from_body, &err,
                                    msg, sizeof msg), -1, "case %zu accepted", i);
        cr_assert_eq(err, API_E_BAD_REQUEST);
        cr_assert(strstr(msg, b->names), "case %zu: message \"%s\" does not name %s", i, msg,
                  b->names);
    }
}

Test(reader, a_token_with_a_raw_nul_is_refused_not_cut)
{
    static const char body[] = "{\"token\":\"abcdefgh\0ijk\"}";
    rl_request req = {0};
    bool from_body;
    enum api_err err;
    char msg[200] = "";
    cr_assert_eq(api_parse_body(RL_RELEASE, body, sizeof body - 1, &lim, &req, &from_body,
                                &err, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "token"), "%s", msg);
    cr_assert_not(from_body);
}

Test(reader, integers_and_valid_bodies_pass)
{
    rl_request req;
    bool from_body;
    enum api_err err;
    char msg[200] = "";
    const char *body = "{\"ttl_ms\": 5000, \"wait_ms\": 0, \"hold\": false, \"owner\": \"caf\xc3\xa9\"}";
    /* an owner is UTF-8 text */
    cr_assert_eq(api_parse_body(RL_ACQUIRE, body, strlen(body), &lim, &req, &from_body, &err, msg,
                                sizeof msg), 0, "%s", msg);
    cr_assert_str_eq(req.owner, "caf\xc3\xa9");
    body = "{\"ttl_ms\": 5000, \"wait_ms\": -0, \"owner\": \"cron@web-1\"}";
    cr_assert_eq(api_parse_body(RL_ACQUIRE, body, strlen(body), &lim, &req, &from_body, &err, msg,
                                sizeof msg), 0, "%s", msg);
    cr_assert_eq(req.ttl_ms, 5000);
    cr_assert_eq(req.wait_ms, 0);
    cr_assert_str_eq(req.owner, "cron@web-1");
    body = " \n ";
    cr_assert_eq(api_parse_body(RL_ACQUIRE, body, strlen(body), &lim, &req, &from_body, &err, msg,
                                sizeof msg), 0);
    cr_assert_eq(req.ttl_ms, lim.default_ttl_ms);
}

/* Two Dapr owners that differ after a NUL were one owner: B's unlock
 * released A's lock. Both are refused now. */
Test(reader, dapr_owners_with_a_nul_are_refused)
{
    static const char a[] = "{\"resourceId\":\"r\",\"lockOwner\":\"worker\0A\",\"expiryInSeconds\":10}";
    static const char b[] = "{\"resourceId\":\"r\",\"lockOwner\":\"worker\0B\"}";
    rl_request req;
    const char *code;
    char msg[200] = "";
    cr_assert_eq(api_parse_dapr(false, "s", "s", a, sizeof a - 1, &lim, &req, &code, msg,
                                sizeof msg), -1);
    cr_assert_str_eq(code, API_DAPR_ERR_MALFORMED);
    cr_assert(strstr(msg, "lockOwner"), "%s", msg);
    cr_assert_eq(api_parse_dapr(true, "s", "s", b, sizeof b - 1, &lim, &req, &code, msg,
                                sizeof msg), -1);
    cr_assert(strstr(msg, "lockOwner"), "%s", msg);
}

Test(reader, dapr_expiry_is_an_integer)
{
    const char *bodies[] = {
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":1.5}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":1e1}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":\"10\"}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":10,\"expiryInSeconds\":20}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        rl_request req;
        const char *code;
        char msg[200] = "";
        cr_assert_eq(api_parse_dapr(false, "s", "s", bodies[i], strlen(bodies[i]), &lim, &req,
                                    &code, msg, sizeof msg), -1, "%s accepted", bodies[i]);
        cr_assert(strstr(msg, "expiryInSeconds"), "%s: %s", bodies[i], msg);
    }
}

Test(reader, election_and_semaphore_bodies_are_as_strict)
{
    static const char campaign[] = "{\"candidate\":\"pg-1\",\"value\":\"10.0.0.7\0:5432\"}";
    rl_request req;
    char cand[ELECTION_CANDIDATE_MAX + 1], value[ELECTION_VALUE_MAX + 1], msg[200] = "";
    cr_assert_eq(election_parse_campaign(campaign, sizeof campaign - 1, 30000, 3600000, &req,
                                         cand, value, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "value"), "%s", msg);
    const char *dup = "{\"candidate\":\"a\",\"candidate\":\"b\"}";
    cr_assert_eq(election_parse_campaign(dup, strlen(dup), 30000, 3600000, &req, cand, value,
                                         msg, sizeof msg), -1);
    cr_assert(strstr(msg, "candidate"), "%s", msg);

    sem_request sr;
    const char *sems[] = {"{\"limit\":2.0}", "{\"limit\":2,\"permits\":1e0}",
                          "{\"limit\":2,\"limit\":3}", "{\"limit\":99999999999999999999}"};
    const char *names[] = {"limit", "permits", "limit", "limit"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(api_sem_parse_acquire(sems[i], strlen(sems[i]), &lim, &sr, msg, sizeof msg), -1,
                     "%s accepted", sems[i]);
        cr_assert(strstr(msg, names[i]), "%s: %s", sems[i], msg);
    }
}

/* cJSON printed 1795614944240680 as 1.79561494424068e+15 (15 digits read
 * back exactly), which int64 decoders refuse. */
Test(writer, integers_are_integer_literals)
{
    const long long v[] = {1795614944240680LL, 1000000000000000LL, 9007199254740993LL,
                           -1, 0, 9223372036854775807LL};
    const char *want[] = {"1795614944240680", "1000000000000000", "9007199254740993", "-1", "0",
                          "9223372036854775807"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        cJSON *o = cJSON_CreateObject();
        jsonio_add_int(o, "n", v[i]);
        char *s = cJSON_PrintUnformatted(o);
        char expect[64];
        snprintf(expect, sizeof expect, "{\"n\":%s}", want[i]);
        cr_assert_str_eq(s, expect);
        free(s);
        cJSON_Delete(o);
    }

    election_state st = {.held = true, .term = 1795614944240680LL, .since_ms = 1795614944240000LL,
                         .validity_ms = 9000};
    snprintf(st.leader, sizeof st.leader, "pg-1");
    char *e = election_state_json("db", &st, NULL);
    cr_assert(strstr(e, "\"term\":1795614944240680"), "%s", e);
    cr_assert(strstr(e, "\"since\":1795614944240000"), "%s", e);
    free(e);

    sem_request sr = {.op = SEM_ACQUIRE, .limit = 2, .permits = 1};
    sem_result res = {.outcome = RL_OK, .limit = 2, .npermits = 1, .validity_ms = 9000,
                      .ttl_ms = 10000};
    res.permits[0].slot = 1;
    res.permits[0].fence = 1795614944240680LL;
    snprintf(res.permits[0].token, sizeof res.permits[0].token, "1:abc");
    int status;
    long long retry;
    char *s = api_sem_result_json(&sr, &res, &status, &retry);
    cr_assert(strstr(s, "\"fence\":1795614944240680"), "%s", s);
    free(s);
}

/* A semaphore's 409 says when the first held permit it met runs out. */
Test(writer, a_semaphore_409_carries_the_holders_time_left)
{
    sem_request sr = {.op = SEM_ACQUIRE, .limit = 1, .permits = 1};
    sem_result res = {.outcome = RL_LOCKED, .retry_after_ms = 14250};
    res.last.outcome = RL_OK;
    int status;
    long long retry_s;
    char *s = api_sem_result_json(&sr, &res, &status, &retry_s);
    cr_assert_eq(status, 409);
    cr_assert(strstr(s, "\"retry_after_ms\":14250"), "%s", s);
    cr_assert_eq(retry_s, 15);
    free(s);
}

/* With --max-ttl-ms below a held stream's least ttl (1 s), a campaign was
 * raised to 1 s, past the maximum (found by tests/fuzz): refused now. */
Test(reader, a_campaign_never_passes_max_ttl)
{
    const char *body = "{\"candidate\":\"pg-1\"}";
    rl_request req;
    char cand[ELECTION_CANDIDATE_MAX + 1], value[ELECTION_VALUE_MAX + 1], msg[200] = "";
    cr_assert_eq(election_parse_campaign(body, strlen(body), 300, 500, &req, cand, value, msg,
                                         sizeof msg), -1);
    cr_assert(strstr(msg, "ttl_ms"), "%s", msg);
    cr_assert_eq(election_parse_campaign(body, strlen(body), 300, 5000, &req, cand, value, msg,
                                         sizeof msg), 0, "%s", msg);
    cr_assert_eq(req.ttl_ms, 1000);
}
