/* Unit tests of the pure parts of leader election (src/recipes/election.c): the
 * campaign's body, the owner that carries since, candidate and value, the
 * state's JSON, and which change a watch reports. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "recipes/recipes.h"

static int campaign(const char *body, rl_request *req, char *cand, char *value, char *msg)
{
    return election_parse_campaign(body, strlen(body), 30000, 3600000, req, cand, value, msg, 200);
}

Test(election, campaign_body)
{
    rl_request req;
    char cand[ELECTION_CANDIDATE_MAX + 1], value[ELECTION_VALUE_MAX + 1], msg[200];
    cr_assert_eq(campaign("{\"candidate\":\"pg-1\",\"value\":\"10.0.0.7:5432\",\"ttl_ms\":5000}", &req,
                          cand, value, msg), 0, "%s", msg);
    cr_assert_str_eq(cand, "pg-1");
    cr_assert_str_eq(value, "10.0.0.7:5432");
    cr_assert_eq(req.ttl_ms, 5000);
    cr_assert(req.hold);
    cr_assert_eq(req.op, RL_ACQUIRE);
    cr_assert_eq(campaign("{\"candidate\":\"a\"}", &req, cand, value, msg), 0);
    cr_assert_str_eq(value, "");
    cr_assert_eq(req.ttl_ms, 30000);
    const char *bad[] = {
        "", "[]", "{}", "{\"candidate\":\"\"}", "{\"candidate\":\"a\\u001fb\"}", "{\"candidate\":\"a\\tb\"}",
        "{\"candidate\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",   /* 49 bytes */
        "{\"candidate\":7}", "{\"candidate\":\"a\",\"value\":1}",
        "{\"candidate\":\"a\",\"value\":\"x\\ny\"}", "{\"candidate\":\"a\",\"ttl_ms\":999}",
        "{\"candidate\":\"a\",\"ttl_ms\":1.5}", "{\"candidate\":\"a\",\"ttl_ms\":\"5000\"}",
        "{\"candidate\":\"a\",\"ttl_ms\":3600001}", "{\"candidate\":\"a\\u0000b\"}", "{\"candidate\":\"a\"} x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(campaign(bad[i], &req, cand, value, msg), -1, "accepted %s", bad[i]);
}

Test(election, value_body)
{
    char value[ELECTION_VALUE_MAX + 1], token[TOKEN_MAX_LEN + 1], msg[200];
    const char *b = "{\"value\":\"v2\",\"token\":\"abc\"}";
    cr_assert_eq(election_parse_value(b, strlen(b), value, token, msg, sizeof msg), 0, "%s", msg);
    cr_assert_str_eq(value, "v2");
    cr_assert_str_eq(token, "abc");
    b = "{\"value\":\"\"}";
    cr_assert_eq(election_parse_value(b, strlen(b), value, token, msg, sizeof msg), 0);
    cr_assert_str_eq(token, "");
    b = "{\"token\":\"abc\"}";
    cr_assert_eq(election_parse_value(b, strlen(b), value, token, msg, sizeof msg), -1, "value is required");
    b = "{\"value\":\"v\",\"token\":\"a b\"}";
    cr_assert_eq(election_parse_value(b, strlen(b), value, token, msg, sizeof msg), -1);
}

/* The owner is sent with a byte 1 that each master replaces with its time
 * and a space; what GET reads back splits into since, candidate, value. */
Test(election, owner_round_trip)
{
    char owner[RL_OWNER_MAX + 1];
    election_owner("pg-1", "10.0.0.7:5432 primary", owner, sizeof owner);
    cr_assert_eq(owner[0], 1);
    cr_assert_str_eq(owner + 1, "pg-1\x1f" "10.0.0.7:5432 primary");
    char stored[200], cand[ELECTION_CANDIDATE_MAX + 1], value[ELECTION_VALUE_MAX + 1];
    long long since;
    snprintf(stored, sizeof stored, "1795480724057 %s", owner + 1);
    cr_assert(election_owner_split(stored, cand, &since, value));
    cr_assert_str_eq(cand, "pg-1");
    cr_assert_eq(since, 1795480724057LL);
    cr_assert_str_eq(value, "10.0.0.7:5432 primary");
    cr_assert(election_owner_split("1 a\x1f", cand, &since, value));
    cr_assert_str_eq(value, "");
    /* a candidate and a value of UTF-8 text with spaces */
    election_owner("node 7 \xc3\xa9", "a b", owner, sizeof owner);
    snprintf(stored, sizeof stored, "17 %s", owner + 1);
    cr_assert(election_owner_split(stored, cand, &since, value));
    cr_assert_str_eq(cand, "node 7 \xc3\xa9");
    cr_assert_str_eq(value, "a b");
    /* Owners of plain locks are not campaigns. */
    const char *not_ours[] = {"web-7", "x a\x1f" "b", "1 a", " a\x1f" "b", "12 ", "1 \x1f" "b"};
    for (size_t i = 0; i < sizeof not_ours / sizeof not_ours[0]; i++)
        cr_expect_not(election_owner_split(not_ours[i], cand, &since, value), "%s", not_ours[i]);
    /* The longest candidate, since and value fit an owner. */
    char c48[49], v64[65];
    memset(c48, 'c', 48);
    c48[48] = 0;
    memset(v64, 'v', 64);
    v64[64] = 0;
    election_owner(c48, v64, owner, sizeof owner);
    cr_assert_eq(strlen(owner), 1 + 48 + 1 + 64);
}

static election_state st(bool held, const char *leader, long long term, const char *value)
{
    election_state s = {.held = held, .term = term, .since_ms = 1, .validity_ms = 100};
    snprintf(s.leader, sizeof s.leader, "%s", leader);
    snprintf(s.value, sizeof s.value, "%s", value);
    return s;
}

Test(election, watch_changes_in_term_order)
{
    election_state none = st(false, "", 0, ""), a5 = st(true, "a", 5, "x"), a5y = st(true, "a", 5, "y"),
                   b6 = st(true, "b", 6, "x"), vac6 = st(false, "", 6, ""), a4 = st(true, "a", 4, "x");
    cr_assert_str_eq(election_change(true, &none, &none), "state");
    cr_assert_str_eq(election_change(false, &none, &a5), "elected");
    cr_assert_null(election_change(false, &a5, &a5), "no change, nothing said");
    cr_assert_str_eq(election_change(false, &a5, &a5y), "proclaimed");
    cr_assert_str_eq(election_change(false, &a5, &b6), "elected");
    cr_assert_null(election_change(false, &b6, &a4), "an older term is never reported");
    cr_assert_null(election_change(false, &b6, &a5), "an older term is never reported");
    cr_assert_str_eq(election_change(false, &b6, &vac6), "vacant");
    cr_assert_null(election_change(false, &vac6, &vac6));
    cr_assert_null(election_change(false, &vac6, &a5), "after vacant, an older term is not new");
    cr_assert_str_eq(election_change(false, &vac6, &b6), "state", "the same term again is restated");
}

Test(election, state_json)
{
    election_state a = st(true, "a", 7, "v");
    char *j = election_state_json("db", &a, "a");
    cr_assert_str_eq(j, "{\"name\":\"db\",\"leader\":\"a\",\"value\":\"v\",\"term\":7,\"since\":1,"
                        "\"validity_ms\":100,\"is_leader\":true}");
    free(j);
    election_state none = st(false, "", 0, "");
    j = election_state_json("db", &none, NULL);
    cr_assert_str_eq(j, "{\"name\":\"db\",\"leader\":null,\"value\":null,\"term\":null,\"since\":null,"
                        "\"validity_ms\":0}");
    free(j);
    j = election_event_line("vacant", "db", &none);
    cr_assert(strncmp(j, "{\"event\":\"vacant\",\"name\":\"db\"", 29) == 0, "%s", j);
    cr_assert_eq(j[strlen(j) - 1], '\n');
    free(j);
    char name[64];
    election_lock_name("db", name, sizeof name);
    cr_assert_str_eq(name, "db" RULES_SEP "election");
}
