/* Unit tests of the pure parts of counting semaphores (src/front/semaphore_api.c):
 * bodies, permit tokens and the JSON of answers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "front/semaphore_api.h"

static const api_limits lim = {30000, 3600000, 60000, NULL};

static int acquire(const char *body, sem_request *r, char *msg)
{
    memset(r, 0, sizeof *r);
    return api_sem_parse_acquire(body, strlen(body), &lim, r, msg, 200);
}

Test(semaphore, acquire_body)
{
    sem_request r;
    char msg[200];
    cr_assert_eq(acquire("{\"limit\":4,\"permits\":2,\"ttl_ms\":5000,\"wait_ms\":100,\"owner\":\"w 1\"}", &r, msg), 0,
                 "%s", msg);
    cr_assert_eq(r.limit, 4);
    cr_assert_eq(r.permits, 2);
    cr_assert_eq(r.ttl_ms, 5000);
    cr_assert_eq(r.wait_ms, 100);
    cr_assert_str_eq(r.owner, "w 1");
    cr_assert_eq(acquire("{\"limit\":1}", &r, msg), 0);
    cr_assert_eq(r.permits, 1);
    cr_assert_eq(r.ttl_ms, 30000);
    const char *bad[] = {"", "{}", "[]", "{\"limit\":0}", "{\"limit\":65}", "{\"limit\":2,\"permits\":3}",
                         "{\"limit\":2,\"permits\":0}", "{\"limit\":1.5}", "{\"limit\":\"2\"}",
                         "{\"limit\":2,\"permits\":2,\"hold\":true}", "{\"limit\":2,\"wait_ms\":60001}",
                         "{\"limit\":2,\"hold\":true,\"ttl_ms\":999}", "{\"limit\":2,\"hold\":1}",
                         "{\"limit\":2,\"owner\":\"\"}", "{\"limit\":2} x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(acquire(bad[i], &r, msg), -1, "accepted %s", bad[i]);
    cr_assert_eq(acquire("{\"limit\":2,\"hold\":false}", &r, msg), 0);
    cr_assert_not(r.hold);
    cr_assert_eq(acquire("{\"limit\":2,\"hold\":true,\"ttl_ms\":1000}", &r, msg), 0, "%s", msg);
    cr_assert(r.hold);
    cr_assert_eq(r.permits, 1);
}

Test(semaphore, permit_tokens)
{
    int slot;
    char tok[300];
    cr_assert(sem_token_split("12:abc", SEM_LIMIT_MAX, &slot, tok, sizeof tok));
    cr_assert_eq(slot, 12);
    cr_assert_str_eq(tok, "abc");
    const char *bad[] = {"abc", ":abc", "1:", "123:abc", "64:abc", "x1:abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_not(sem_token_split(bad[i], SEM_LIMIT_MAX, &slot, tok, sizeof tok), "%s", bad[i]);
    char name[64];
    sem_slot_name("pool", 3, name, sizeof name);
    cr_assert_str_eq(name, "pool" RULES_SEP "3");
    sem_limit_name("pool", name, sizeof name);
    cr_assert_str_eq(name, "pool" RULES_SEP "limit");

    sem_request r;
    char msg[200];
    memset(&r, 0, sizeof r);
    cr_assert_eq(api_sem_parse_tokens(false, "0:a, 1:b", NULL, "", 0, &lim, &r, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(r.ntokens, 2);
    cr_assert_str_eq(r.tokens[1], "1:b");
    const char *body = "{\"tokens\":[\"2:c\"],\"ttl_ms\":9000}";
    cr_assert_eq(api_sem_parse_tokens(true, NULL, NULL, body, strlen(body), &lim, &r, msg, sizeof msg), 0);
    cr_assert_eq(r.ntokens, 1);
    cr_assert_eq(r.ttl_ms, 9000);
    cr_assert_eq(r.op, SEM_EXTEND);
    cr_assert_eq(api_sem_parse_tokens(false, NULL, NULL, "", 0, &lim, &r, msg, sizeof msg), -1, "tokens are required");
    cr_assert_eq(api_sem_parse_tokens(false, "nope", NULL, "", 0, &lim, &r, msg, sizeof msg), -1);
    body = "{\"tokens\":[7]}";
    cr_assert_eq(api_sem_parse_tokens(false, NULL, NULL, body, strlen(body), &lim, &r, msg, sizeof msg), -1);
}

Test(semaphore, answers)
{
    sem_request r = {.op = SEM_ACQUIRE, .limit = 2, .permits = 1};
    snprintf(r.name, sizeof r.name, "pool");
    sem_result res = {.outcome = RL_OK, .npermits = 1, .validity_ms = 900, .ttl_ms = 1000};
    res.permits[0] = (sem_permit){.slot = 1, .fence = 7, .validity_ms = 900};
    snprintf(res.permits[0].token, sizeof res.permits[0].token, "1:T");
    int status;
    long long ra;
    char *j = api_sem_result_json(&r, &res, &status, &ra);
    cr_assert_eq(status, 201);
    cr_assert_str_eq(j, "{\"name\":\"pool\",\"limit\":2,\"permits\":[{\"slot\":1,\"token\":\"1:T\",\"fence\":7,"
                        "\"validity_ms\":900}],\"validity_ms\":900,\"ttl_ms\":1000}");
    free(j);
    sem_result mm = {.outcome = RL_LOCKED, .limit_mismatch = true, .stored_limit = 3};
    j = api_sem_result_json(&r, &mm, &status, &ra);
    cr_assert_eq(status, 409);
    cr_assert(strstr(j, "\"error\":\"limit_mismatch\"") && strstr(j, "\"limit\":3"), "%s", j);
    free(j);
    sem_result full = {.outcome = RL_LOCKED};
    j = api_sem_result_json(&r, &full, &status, &ra);
    cr_assert_eq(status, 409);
    cr_assert_eq(ra, 1);
    cr_assert(strstr(j, "\"error\":\"locked\""), "%s", j);
    free(j);
    r.op = SEM_RELEASE;
    cr_assert_null(api_sem_result_json(&r, &res, &status, &ra));
    cr_assert_eq(status, 204);
}
