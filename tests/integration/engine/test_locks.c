/* Integration: the lock API against the real binary and five real masters. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void setup(void)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
}

static void teardown(void) { h_cluster_free(C); }

TestSuite(locks, .init = setup, .fini = teardown, .timeout = 60);

static h_resp acquire(const char *name, const char *body)
{
    char path[300];
    snprintf(path, sizeof path, "/locks/%s", name);
    return h_http(C, "POST", path, body, NULL);
}

static h_resp with_token(const char *method, const char *name, const char *token,
                         const char *body)
{
    char path[300], hdr[400];
    snprintf(path, sizeof path, "/locks/%s", name);
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", token);
    return h_http(C, method, path, body, hdr, NULL);
}

/* Acquires name with body and copies the token out (64 bytes). */
static void acquire_token(const char *name, const char *body, char *token)
{
    h_resp r = acquire(name, body);
    cr_assert_eq(r.status, 201, "%s: %s", name, r.body);
    snprintf(token, 64, "%s", h_str(&r, "token"));
    h_resp_free(&r);
}

/* The value of key on master i, or "" when absent. */
static void master_get(int i, const char *key, char *out, size_t outlen)
{
    redisReply *r = h_redis(C, i, "GET %s", key);
    cr_assert_not_null(r);
    snprintf(out, outlen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

Test(locks, acquire_inspect_release)
{
    h_resp r = acquire("orders", NULL);
    cr_assert_eq(r.status, 201, "%s", r.body);
    cr_assert_str_eq(r.content_type, "application/json");
    cr_assert_str_eq(h_str(&r, "name"), "orders");
    const char *tok = h_str(&r, "token");
    cr_assert_not_null(tok);
    cr_assert_geq(strlen(tok), 22, "128 bits need at least 22 base64 characters");
    cr_assert_eq(h_int(&r, "ttl_ms"), 30000);
    long long validity = h_int(&r, "validity_ms");
    cr_assert(validity > 29000 && validity <= 29698, "validity %lld", validity);
    cr_assert_gt(h_int(&r, "fence"), 0);
    char token[64];
    snprintf(token, sizeof token, "%s", tok);
    h_resp_free(&r);

    /* The value stored on every master is the token, under the prefix. */
    for (int i = 0; i < 5; i++) {
        char v[128];
        master_get(i, "lock:orders", v, sizeof v);
        cr_assert_str_eq(v, token, "master %d", i);
    }

    r = h_http(C, "GET", "/locks/orders", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "held")));
    cr_assert(h_int(&r, "validity_ms") > 0 && h_int(&r, "validity_ms") <= 30000);
    cr_assert_null(strstr(r.body, token), "GET must not show the token");
    h_resp_free(&r);

    r = with_token("DELETE", "orders", token, NULL);
    cr_assert_eq(r.status, 204);
    cr_assert_str_eq(r.body, "");
    h_resp_free(&r);
    for (int i = 0; i < 5; i++) {
        char v[128];
        master_get(i, "lock:orders", v, sizeof v);
        cr_assert_str_eq(v, "", "master %d still holds the key", i);
    }

    r = h_http(C, "GET", "/locks/orders", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "held")));
    cr_assert_eq(h_int(&r, "validity_ms"), 0);
    h_resp_free(&r);
}

Test(locks, conflict_carries_retry_after)
{
    h_resp a = acquire("busy", "{\"ttl_ms\":4500}");
    cr_assert_eq(a.status, 201);
    h_resp b = acquire("busy", NULL);
    cr_assert_eq(b.status, 409, "%s", b.body);
    cr_assert_str_eq(h_str(&b, "error"), "locked");
    cr_assert_not_null(h_str(&b, "message"));
    long long ra = h_int(&b, "retry_after_ms");
    cr_assert(ra > 3000 && ra <= 4500, "retry_after_ms %lld", ra);
    cr_assert_str_eq(b.retry_after, "5", "whole seconds rounded up");
    /* The loser left nothing behind: the holder's token is intact. */
    char v[128];
    master_get(0, "lock:busy", v, sizeof v);
    cr_assert_str_eq(v, h_str(&a, "token"));
    h_resp_free(&a);
    h_resp_free(&b);
}

Test(locks, release_token_from_header_query_or_body)
{
    char token[64], path[200], body[200];
    h_resp r = acquire("r1", NULL);
    snprintf(token, sizeof token, "%s", h_str(&r, "token"));
    h_resp_free(&r);
    snprintf(path, sizeof path, "/locks/r1?token=%s", token);
    r = h_http(C, "DELETE", path, NULL, NULL);
    cr_assert_eq(r.status, 204, "query token: %s", r.body);
    h_resp_free(&r);

    r = acquire("r1", NULL);
    snprintf(token, sizeof token, "%s", h_str(&r, "token"));
    h_resp_free(&r);
    snprintf(body, sizeof body, "{\"token\":\"%s\"}", token);
    r = h_http(C, "DELETE", "/locks/r1", body, NULL);
    cr_assert_eq(r.status, 204, "body token: %s", r.body);
    h_resp_free(&r);

    /* header wins over query: a wrong header with the right query fails */
    r = acquire("r1", NULL);
    snprintf(token, sizeof token, "%s", h_str(&r, "token"));
    h_resp_free(&r);
    snprintf(path, sizeof path, "/locks/r1?token=%s", token);
    r = h_http(C, "DELETE", path, NULL, "Lock-Token: not-the-token", NULL);
    cr_assert_eq(r.status, 409);
    cr_assert_str_eq(h_str(&r, "reason"), "held_by_other");
    h_resp_free(&r);
    r = h_http(C, "DELETE", "/locks/r1", NULL, NULL);
    cr_assert_eq(r.status, 400, "no token at all");
    cr_assert_str_eq(h_str(&r, "error"), "bad_request");
    h_resp_free(&r);
}

Test(locks, wrong_and_expired_tokens_say_why)
{
    char token[64];
    acquire_token("w", "{\"ttl_ms\":300}", token);
    h_resp r = with_token("DELETE", "w", "someone-else", NULL);
    cr_assert_eq(r.status, 409);
    cr_assert_str_eq(h_str(&r, "error"), "not_held");
    cr_assert_str_eq(h_str(&r, "reason"), "held_by_other");
    h_resp_free(&r);
    r = with_token("PATCH", "w", "someone-else", NULL);
    cr_assert_eq(r.status, 409);
    cr_assert_str_eq(h_str(&r, "reason"), "held_by_other");
    h_resp_free(&r);

    usleep(450000);
    r = with_token("DELETE", "w", token, NULL);
    cr_assert_eq(r.status, 409);
    cr_assert_str_eq(h_str(&r, "reason"), "expired");
    h_resp_free(&r);
    r = with_token("PATCH", "w", token, NULL);
    cr_assert_eq(r.status, 409);
    cr_assert_str_eq(h_str(&r, "reason"), "expired");
    h_resp_free(&r);

    /* Someone else takes it: the old token now meets held_by_other. */
    r = acquire("w", NULL);
    cr_assert_eq(r.status, 201);
    h_resp_free(&r);
    r = with_token("DELETE", "w", token, NULL);
    cr_assert_str_eq(h_str(&r, "reason"), "held_by_other");
    h_resp_free(&r);
}

Test(locks, extend_keeps_fence_and_resets_ttl)
{
    h_resp a = acquire("ext", "{\"ttl_ms\":1000}");
    cr_assert_eq(a.status, 201);
    char token[64];
    snprintf(token, sizeof token, "%s", h_str(&a, "token"));
    long long fence = h_int(&a, "fence");
    h_resp_free(&a);

    h_resp e = with_token("PATCH", "ext", token, "{\"ttl_ms\":20000}");
    cr_assert_eq(e.status, 200, "%s", e.body);
    cr_assert_eq(h_int(&e, "fence"), fence, "an extension keeps its fence");
    cr_assert_eq(h_int(&e, "ttl_ms"), 20000);
    cr_assert(h_int(&e, "validity_ms") > 19000 && h_int(&e, "validity_ms") <= 19798);
    cr_assert_str_eq(h_str(&e, "token"), token);
    h_resp_free(&e);
    for (int i = 0; i < 5; i++) {
        redisReply *r = h_redis(C, i, "PTTL lock:ext");
        cr_assert(r->integer > 15000, "master %d pttl %lld", i, r->integer);
        freeReplyObject(r);
    }
    /* Still held past the first ttl. */
    usleep(1200000);
    h_resp b = acquire("ext", NULL);
    cr_assert_eq(b.status, 409);
    h_resp_free(&b);

    /* token in the body, default ttl */
    char body[128];
    snprintf(body, sizeof body, "{\"token\":\"%s\"}", token);
    e = h_http(C, "PATCH", "/locks/ext", body, NULL);
    cr_assert_eq(e.status, 200, "%s", e.body);
    cr_assert_eq(h_int(&e, "ttl_ms"), 30000);
    h_resp_free(&e);
}

Test(locks, expiry_then_reacquire_with_larger_fence)
{
    h_resp a = acquire("exp", "{\"ttl_ms\":200}");
    cr_assert_eq(a.status, 201);
    cr_assert(h_int(&a, "validity_ms") > 0 && h_int(&a, "validity_ms") <= 196);
    long long f1 = h_int(&a, "fence");
    h_resp_free(&a);
    usleep(300000);
    h_resp b = acquire("exp", NULL);
    cr_assert_eq(b.status, 201, "%s", b.body);
    cr_assert_gt(h_int(&b, "fence"), f1);
    h_resp_free(&b);
}

Test(locks, fence_strictly_increases_across_grants)
{
    long long last = 0;
    for (int i = 0; i < 30; i++) {
        h_resp a = acquire("fenced", NULL);
        cr_assert_eq(a.status, 201, "grant %d: %ld %s", i, a.status, a.body);
        long long f = h_int(&a, "fence");
        cr_assert_gt(f, last, "grant %d: %lld after %lld", i, f, last);
        cr_assert_lt(f, 9007199254740992LL, "fits in 53 bits");
        last = f;
        h_resp r = with_token("DELETE", "fenced", h_str(&a, "token"), NULL);
        cr_assert_eq(r.status, 204);
        h_resp_free(&a);
        h_resp_free(&r);
        if (i == 10) {
            /* Two masters lose their counters (as after they expired, or a
             * restart without data; a FLUSHALL would also take the cluster
             * marker, and quarantine them): the next fences must still be
             * larger. */
            freeReplyObject(h_redis(C, 0, "DEL lock:fenced\x1f#fence"));
            freeReplyObject(h_redis(C, 1, "DEL lock:fenced\x1f#fence"));
        }
        if (i == 20) {
            /* Counters drift apart: one master far ahead of the others. */
            freeReplyObject(h_redis(C, 3, "INCRBY lock:fenced\x1f#fence 1000"));
        }
    }
}

Test(locks, wait_succeeds_when_the_holder_expires)
{
    h_resp a = acquire("waitme", "{\"ttl_ms\":600}");
    cr_assert_eq(a.status, 201);
    h_resp_free(&a);
    uint64_t t0 = h_now_us();
    h_resp b = acquire("waitme", "{\"wait_ms\":3000}");
    double took = (double)(h_now_us() - t0) / 1e6;
    cr_assert_eq(b.status, 201, "%s", b.body);
    cr_assert(took > 0.4 && took < 2.5, "took %.3f s", took);
    h_resp_free(&b);
}

Test(locks, wait_times_out_with_409)
{
    h_resp a = acquire("held", "{\"ttl_ms\":10000}");
    cr_assert_eq(a.status, 201);
    h_resp_free(&a);
    uint64_t t0 = h_now_us();
    h_resp b = acquire("held", "{\"wait_ms\":400}");
    double took = (double)(h_now_us() - t0) / 1e6;
    cr_assert_eq(b.status, 409);
    cr_assert_str_eq(h_str(&b, "error"), "locked");
    cr_assert(took >= 0.39 && took < 1.5, "took %.3f s", took);
    h_resp_free(&b);
}

Test(locks, release_wakes_a_waiter_before_its_wait_ends)
{
    char token[64];
    acquire_token("handoff", "{\"ttl_ms\":30000}", token);
    pid_t pid = fork();
    if (pid == 0) {
        usleep(300000);
        h_resp rel = with_token("DELETE", "handoff", token, NULL);
        _exit(rel.status == 204 ? 0 : 1);
    }
    uint64_t t0 = h_now_us();
    h_resp b = acquire("handoff", "{\"wait_ms\":5000}");
    double took = (double)(h_now_us() - t0) / 1e6;
    int st;
    waitpid(pid, &st, 0);
    cr_assert_eq(WEXITSTATUS(st), 0);
    cr_assert_eq(b.status, 201);
    cr_assert(took < 2.0, "waited %.3f s for a lock released after 0.3 s", took);
    h_resp_free(&b);
}

struct racer {
    h_cluster *c;
    long status;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    h_resp x = h_http(r->c, "POST", "/locks/contended", NULL, NULL);
    r->status = x.status;
    h_resp_free(&x);
    return NULL;
}

Test(locks, twenty_concurrent_acquires_one_winner)
{
    for (int round = 0; round < 3; round++) {
        pthread_t t[20];
        struct racer r[20];
        for (int i = 0; i < 20; i++) {
            r[i].c = C;
            pthread_create(&t[i], NULL, race, &r[i]);
        }
        int created = 0, locked = 0;
        for (int i = 0; i < 20; i++) {
            pthread_join(t[i], NULL);
            created += r[i].status == 201;
            locked += r[i].status == 409;
        }
        cr_assert_eq(created, 1, "round %d: %d winners", round, created);
        cr_assert_eq(locked, 19);
        for (int i = 0; i < 5; i++)
            freeReplyObject(h_redis(C, i, "DEL lock:contended"));
    }
}

Test(locks, tiny_ttl_is_never_granted_without_validity)
{
    h_resp a = acquire("tiny", "{\"ttl_ms\":2}");
    cr_assert_eq(a.status, 409, "ttl 2 ms leaves no validity after drift: %s", a.body);
    h_resp_free(&a);
    for (int i = 0; i < 5; i++) {
        char v[128];
        master_get(i, "lock:tiny", v, sizeof v);
        cr_assert_str_eq(v, "", "master %d kept the key of a refused grant", i);
    }
}

Test(locks, extend_without_token_and_bad_input_change_nothing)
{
    char token[64];
    acquire_token("keep", NULL, token);
    const char *bad[] = {"{\"ttl_ms\":0}", "{\"ttl_ms\":\"100\"}", "{\"ttl_ms\":1.5}", "{", "[]",
                         "{\"token\":7}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h_resp e = with_token("PATCH", "keep", token, bad[i]);
        cr_assert_eq(e.status, 400, "%s -> %ld", bad[i], e.status);
        h_resp_free(&e);
    }
    /* release reads only the token from its body; a malformed body is refused */
    const char *bad_release[] = {"{", "[]", "{\"token\":7}", "\"x\""};
    for (size_t i = 0; i < sizeof bad_release / sizeof bad_release[0]; i++) {
        h_resp d = with_token("DELETE", "keep", token, bad_release[i]);
        cr_assert_eq(d.status, 400, "DELETE %s -> %ld", bad_release[i], d.status);
        h_resp_free(&d);
    }
    h_resp e = h_http(C, "PATCH", "/locks/keep", NULL, NULL);
    cr_assert_eq(e.status, 400);
    h_resp_free(&e);
    for (int i = 0; i < 5; i++) {
        char v[128];
        master_get(i, "lock:keep", v, sizeof v);
        cr_assert_str_eq(v, token, "bad input changed master %d", i);
    }
}
