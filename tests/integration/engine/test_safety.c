/* Integration: fences and grant values that hold in real deployments.
 * Fence counters that expire, names that cannot reach internal keys through
 * either API, one stored value per grant (so a remembered release of one
 * grant never deletes another of the same caller token), and extensions that
 * report exactly their grant's fence. Real masters and real extra redlockd
 * instances throughout. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C, *Y;

static void teardown(void)
{
    if (C && C->daemon > 0)
        kill(C->daemon, SIGCONT);
    h_peer_free(Y);
    Y = NULL;
    h_cluster_free(C);
}

TestSuite(safety, .fini = teardown, .timeout = 120);

#define JSON "Content-Type: application/json"

static h_resp dapr_lock(h_cluster *x, const char *resource, const char *owner, int expiry_s)
{
    char body[600];
    snprintf(body, sizeof body, "{\"resourceId\":\"%s\",\"lockOwner\":\"%s\",\"expiryInSeconds\":%d}",
             resource, owner, expiry_s);
    return h_http(x, "POST", "/v1.0-alpha1/lock/lockstore", body, JSON, NULL);
}

static bool dapr_success(const h_resp *r)
{
    return r->status == 200 && cJSON_IsTrue(cJSON_GetObjectItem(r->json, "success"));
}

/* Polls until instance x counts want voting masters. */
static void wait_voting(h_cluster *x, int want, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    for (;;) {
        h_resp rz = h_http(x, "GET", "/readyz", NULL, NULL);
        long long v = h_int(&rz, "masters_voting");
        h_resp_free(&rz);
        if (v == want)
            return;
        cr_assert_lt(h_now_us(), until, "never %d voting masters", want);
        usleep(20000);
    }
}

/* Case 4: a fence counter lives for the lock's ttl plus --fence-keep-ms and
 * no longer. */
Test(safety, fence_counters_expire)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--fence-keep-ms", "1000", NULL);
    h_resp a = h_http(C, "POST", "/locks/ttl-check", "{\"ttl_ms\":2000}", NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    for (int i = 0; i < 5; i++) {
        redisReply *t = h_redis(C, i, "PTTL lock:ttl-check\x1f#fence");
        cr_assert(t->integer > 2000 && t->integer <= 3000, "master %d: counter pttl %lld", i, t->integer);
        freeReplyObject(t);
    }
    char hdr[300];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
    h_resp r = h_http(C, "DELETE", "/locks/ttl-check", NULL, hdr, NULL);
    cr_assert_eq(r.status, 204);
    usleep(2000000 + 1000000 + 200000);   /* the lock's ttl plus the keep */
    for (int i = 0; i < 5; i++) {
        redisReply *k = h_redis(C, i, "DBSIZE");
        cr_assert_eq(k->integer, 1, "master %d keeps %lld keys; only the marker may stay", i, k->integer);
        freeReplyObject(k);
    }
    /* The next grant's fence is still larger: the masters' clocks moved on. */
    h_resp b = h_http(C, "POST", "/locks/ttl-check", NULL, NULL);
    cr_assert_eq(b.status, 201);
    cr_assert_gt(h_int(&b, "fence"), h_int(&a, "fence"));
    h_resp_free(&a);
    h_resp_free(&r);
    h_resp_free(&b);
}

/* Case 5: a Dapr resourceId cannot name a fence counter (the lock
 * "y#fence" is a lock of its own; a control byte is refused), nor the
 * cluster marker; and a counter that does not parse (written by some other
 * tool) stops the acquire before its SET NX runs: no lock is left that
 * nobody knows the token of. */
Test(safety, no_api_reaches_an_internal_key)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_resp d = dapr_lock(C, "y\x1f#fence", "9999999999999999", 30);
    cr_assert_eq(d.status, 400, "%s", d.body);
    h_resp d2 = dapr_lock(C, "y#fence", "9999999999999999", 30);
    cr_assert(dapr_success(&d2), "a lock of its own: %s", d2.body);
    h_resp_free(&d2);
    h_resp m = dapr_lock(C, "redlockd#marker", "x", 30);
    cr_assert(dapr_success(&m), "%s", m.body);
    h_resp n = h_http(C, "POST", "/locks/redlockd%23marker", NULL, NULL);
    cr_assert_eq(n.status, 201, "%s", n.body);
    for (int i = 0; i < 5; i++) {
        redisReply *t = h_redis(C, i, "TYPE redlockd#marker");
        cr_assert_str_eq(t->str, "hash", "master %d: the marker was touched", i);
        freeReplyObject(t);
    }
    redisReply *k = h_redis(C, 0, "EXISTS lock:lockstore||y\x1f#fence lockstore||y\x1f#fence");
    cr_assert_eq(k->integer, 0, "the Dapr call wrote a counter");
    freeReplyObject(k);

    long long last = 0;
    for (int i = 0; i < 2; i++) {
        h_resp a = h_http(C, "POST", "/locks/lockstore%7C%7Cy", NULL, NULL);
        cr_assert_eq(a.status, 201, "%s", a.body);
        cr_assert_not(strstr(a.body, "e+"), "a fence in exponent form: %s", a.body);
        cr_assert_gt(h_int(&a, "fence"), last);
        cr_assert_lt(h_int(&a, "fence"), 9007199254740992LL);
        last = h_int(&a, "fence");
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
        h_resp r = h_http(C, "DELETE", "/locks/lockstore%7C%7Cy", NULL, hdr, NULL);
        cr_assert_eq(r.status, 204);
        h_resp_free(&r);
        h_resp_free(&a);
    }

    for (int i = 0; i < 5; i++)
        freeReplyObject(h_redis(C, i, "SET lock:z\x1f#fence not-a-number"));
    h_resp z = h_http(C, "POST", "/locks/z", NULL, NULL);
    cr_assert_neq(z.status, 201, "granted on a counter that does not parse: %s", z.body);
    for (int i = 0; i < 5; i++) {
        redisReply *v = h_redis(C, i, "EXISTS lock:z");
        cr_assert_eq(v->integer, 0, "master %d: SET NX ran before the counter was checked", i);
        freeReplyObject(v);
    }
    h_resp_free(&z);
    h_resp_free(&d);
    h_resp_free(&m);
    h_resp_free(&n);
}

/* Case 6: a caller-chosen token (a Dapr lockOwner) is reused across grants.
 * Instance X fails an acquire while three masters are paused and remembers
 * to release what it wrote there; X is then stalled while the owner wins the
 * lock through instance Y. When X comes back and replays its releases, Y's
 * grant must survive: a third client still finds the name held. */
Test(safety, remembered_release_never_deletes_another_grant)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);          /* X */
    Y = h_peer_start(C, NULL);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    h_resp x = dapr_lock(C, "r6", "owner-6", 1);
    cr_assert_not(dapr_success(&x), "X cannot have a majority: %s", x.body);
    h_resp_free(&x);
    h_stop_process(C->daemon);         /* X stalls with its releases queued */
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    usleep(1300000);                   /* X's late SETs (1 s) expire */
    wait_voting(Y, 5, 5000);
    h_resp y = dapr_lock(Y, "r6", "owner-6", 30);
    cr_assert(dapr_success(&y), "Y: %s", y.body);
    h_resp_free(&y);
    kill(C->daemon, SIGCONT);
    wait_voting(C, 5, 5000);           /* X caught up and replayed */
    usleep(300000);
    for (int i = 0; i < 5; i++) {
        redisReply *v = h_redis(C, i, "GET lockstore||r6");
        cr_assert(v && v->type == REDIS_REPLY_NIL, "unprefixed key");
        freeReplyObject(v);
        v = h_redis(C, i, "GET lock:lockstore||r6");
        cr_assert(v && v->type == REDIS_REPLY_STRING, "master %d lost Y's grant to X's replay", i);
        cr_assert(!strncmp(v->str, "owner-6\x1f", 8), "the stored value is the owner and a suffix: %s", v->str);
        freeReplyObject(v);
    }
    h_resp third = h_http(Y, "POST", "/locks/lockstore%7C%7Cr6", NULL, NULL);
    cr_assert_eq(third.status, 409, "a third client won a held lock: %s", third.body);
    h_resp_free(&third);
    /* The owner still releases its lock, through either API. */
    h_resp r = h_http(C, "DELETE", "/locks/lockstore%7C%7Cr6", NULL, "Lock-Token: owner-6", NULL);
    cr_assert_eq(r.status, 204, "%s", r.body);
    h_resp_free(&r);
}

/* Case 8: a SET NX that a paused master applies late takes its counter
 * from a later clock (here, from a higher counter another tool left). The
 * grant settles it to the grant's fence, so an extension answered by a
 * majority made mostly of those masters reports exactly the grant's fence. */
Test(safety, extension_reports_its_grants_fence)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    /* Every master knows the acquire script, so a late EVALSHA runs. */
    h_resp warm = h_http(C, "POST", "/locks/warm", "{\"ttl_ms\":100}", NULL);
    cr_assert_eq(warm.status, 201);
    h_resp_free(&warm);
    for (int i = 0; i < 2; i++) {
        freeReplyObject(h_redis(C, i, "SET lock:f8\x1f#fence 5000000000000000"));
        h_master_pause(C, i);
    }
    h_resp a = h_http(C, "POST", "/locks/f8", "{\"ttl_ms\":20000}", NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    long long fence = h_int(&a, "fence");
    cr_assert_lt(fence, 5000000000000000LL, "granted by the three others");
    for (int i = 0; i < 2; i++)
        h_master_resume(C, i);
    wait_voting(C, 5, 5000);
    usleep(200000);
    for (int i = 0; i < 2; i++) {
        redisReply *v = h_redis(C, i, "GET lock:f8");
        cr_assert(v->type == REDIS_REPLY_STRING, "master %d did not apply the late SET", i);
        freeReplyObject(v);
    }
    h_master_pause(C, 3);
    h_master_pause(C, 4);
    char hdr[300];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
    h_resp e = h_http(C, "PATCH", "/locks/f8", "{\"ttl_ms\":20000}", hdr, NULL);
    h_master_resume(C, 3);
    h_master_resume(C, 4);
    cr_assert_eq(e.status, 200, "%s", e.body);
    cr_assert_eq(h_int(&e, "fence"), fence, "extension fence %lld, grant fence %lld", h_int(&e, "fence"),
                 fence);
    h_resp_free(&e);
    h_resp_free(&a);
}

struct names_job {
    h_cluster *c;
    int from, to;
    int failures;
};

/* Takes and releases (or, for every tenth, lets expire) names from..to. */
static void *names_worker(void *arg)
{
    struct names_job *j = arg;
    for (int i = j->from; i < j->to; i++) {
        char path[64];
        snprintf(path, sizeof path, "/locks/u-%d", i);
        h_resp a = h_http(j->c, "POST", path, "{\"ttl_ms\":1000}", NULL);
        if (a.status != 201) {
            j->failures++;
        } else if (i % 10) {
            char hdr[300];
            snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
            h_resp r = h_http(j->c, "DELETE", path, NULL, hdr, NULL);
            j->failures += r.status != 204;
            h_resp_free(&r);
        }
        h_resp_free(&a);
    }
    return NULL;
}

static long long used_memory(int i)
{
    redisReply *x = h_redis(C, i, "INFO memory");
    const char *at = strstr(x->str, "used_memory:");
    long long v = atoll(at + strlen("used_memory:"));
    freeReplyObject(x);
    return v;
}

/* Case 4 at scale: 20,000 unique names, released or left to expire, leave
 * no key on any master once their locks and the fence bound have passed. */
Test(safety, unique_names_leave_no_keys, .timeout = 240)
{
    C = h_cluster_start(5, NULL);
    /* A generous master timeout: four busy clients on a loaded machine (or
     * under the sanitizers) must not turn into 503s here. */
    h_daemon_start(C, "--fence-keep-ms", "1000", "--master-timeout-ms", "1000", NULL);
    long long before = used_memory(0);
    enum { NAMES = 20000, WORKERS = 4 };
    struct names_job jobs[WORKERS];
    pthread_t t[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        jobs[w] = (struct names_job){C, w * NAMES / WORKERS, (w + 1) * NAMES / WORKERS, 0};
        pthread_create(&t[w], NULL, names_worker, &jobs[w]);
    }
    int failures = 0;
    for (int w = 0; w < WORKERS; w++) {
        pthread_join(t[w], NULL);
        failures += jobs[w].failures;
    }
    cr_assert_eq(failures, 0, "%d calls failed", failures);
    redisReply *k = h_redis(C, 0, "DBSIZE");
    long long peak_keys = k->integer;
    freeReplyObject(k);
    long long peak = used_memory(0);
    usleep(2500000);   /* ttl 1000 ms + keep 1000 ms, and Redis's expiry cycle */
    for (int i = 0; i < 5; i++) {
        uint64_t until = h_now_us() + 3000000;
        long long keys;
        do {
            k = h_redis(C, i, "DBSIZE");
            keys = k->integer;
            freeReplyObject(k);
            if (keys > 1)
                usleep(100000);
        } while (keys > 1 && h_now_us() < until);
        cr_assert_eq(keys, 1, "master %d keeps %lld keys after every lock and bound passed", i, keys);
    }
    long long after = used_memory(0);
    fprintf(stderr, "unique names: %d, keys on master 0 at the end of the run %lld, used_memory "
            "before %lld, at the end of the run %lld, after the bound %lld bytes\n",
            NAMES, peak_keys, before, peak, after);
    cr_assert_lt(after - before, 200000, "memory left behind: %lld bytes", after - before);
}

/* The masters' wall clock, from master i's TIME, in microseconds. */
static long long master_time_us(h_cluster *x, int i)
{
    redisReply *t = h_redis(x, i, "TIME");
    cr_assert(t && t->elements == 2);
    long long us = atoll(t->element[0]->str) * 1000000LL + atoll(t->element[1]->str);
    freeReplyObject(t);
    return us;
}

/* n grants of fresh names, each released; returns the fence raises they
 * took and checks every fence lies within [lo_off, hi_off] µs of the first
 * master's clock around the grant. */
static long long fresh_names(h_cluster *x, const char *tag, int n, long long lo_off, long long hi_off)
{
    long long raises0 = h_metric(x, "redlockd_fence_raises_total");
    for (int i = 0; i < n; i++) {
        char path[80];
        snprintf(path, sizeof path, "/locks/%s-%d", tag, i);
        long long before = master_time_us(x, 0);
        h_resp a = h_http(x, "POST", path, NULL, NULL);
        long long after = master_time_us(x, 0);
        cr_assert_eq(a.status, 201, "%s", a.body);
        long long f = h_int(&a, "fence");
        cr_assert(f >= before + lo_off && f <= after + hi_off,
                  "%s: fence %lld not within [%lld, %lld] of the clock %lld..%lld", path, f, lo_off,
                  hi_off, before, after);
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
        h_resp r = h_http(x, "DELETE", path, NULL, hdr, NULL);
        cr_assert_eq(r.status, 204);
        h_resp_free(&a);
        h_resp_free(&r);
    }
    return h_metric(x, "redlockd_fence_raises_total") - raises0;
}

/* Issue 22: every master takes redlockd's proposed seed for a name it has no
 * counter for, so a fresh name is granted in one round trip: no raise. The
 * fence is redlockd's clock (here the masters' clock: one host). */
Test(safety, fresh_names_agree_without_a_raise)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cr_assert_eq(fresh_names(C, "order", 40, -50000, 50000), 0, "fresh names needed fence raises");
}

/* The same with the proposal skewed 500 ms ahead, within the 1 s bound of
 * the default keep: still taken, so the fence is 500 ms ahead. */
Test(safety, proposal_within_the_bound_is_taken)
{
    setenv("REDLOCKD_TEST_SEED_SKEW_US", "500000", 1);
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cr_assert_eq(fresh_names(C, "ahead", 20, 450000, 550000), 0);
}

/* Skewed 5 s ahead (or behind), beyond the bound: every master refuses it
 * and takes its own clock, as before issue 22; the clocks differ by a few
 * microseconds, so the grant needs its raise, and the fence is the masters'
 * clock, not the proposal. Checks the bound the fence argument rests on. */
Test(safety, proposal_beyond_the_bound_falls_back_to_the_masters_clock)
{
    setenv("REDLOCKD_TEST_SEED_SKEW_US", "5000000", 1);
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    long long raises = fresh_names(C, "far-ahead", 20, -50000, 50000);
    cr_assert_geq(raises, 15, "masters seeded alike without the proposal: %lld raises", raises);
    h_daemon_stop(C);
    setenv("REDLOCKD_TEST_SEED_SKEW_US", "-5000000", 1);
    h_daemon_start(C, NULL);
    raises = fresh_names(C, "far-behind", 20, -50000, 50000);
    cr_assert_geq(raises, 15, "masters seeded alike without the proposal: %lld raises", raises);
}

/* A counter at or above the proposal goes on by one, on every master. */
Test(safety, counter_above_the_proposal_goes_on_by_one)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    long long ahead = master_time_us(C, 0) + 10000000LL;   /* 10 s ahead */
    for (int i = 0; i < 5; i++) {
        redisReply *s = h_redis(C, i, "SET lock:ahead\x1f#fence %lld PX 60000", ahead);
        freeReplyObject(s);
    }
    long long raises0 = h_metric(C, "redlockd_fence_raises_total");
    h_resp a = h_http(C, "POST", "/locks/ahead", NULL, NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    cr_assert_eq(h_int(&a, "fence"), ahead + 1);
    cr_assert_eq(h_metric(C, "redlockd_fence_raises_total"), raises0);
    h_resp_free(&a);
}

/* A name granted here lately proposes no seed: its counters exist, so the
 * masters go on by one without reading their clocks (no TIME), and agree. */
Test(safety, reused_name_goes_on_by_one)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    long long raises0 = h_metric(C, "redlockd_fence_raises_total"), last = 0;
    for (int i = 0; i < 5; i++) {
        h_resp a = h_http(C, "POST", "/locks/reused", NULL, NULL);
        cr_assert_eq(a.status, 201, "%s", a.body);
        long long f = h_int(&a, "fence");
        if (i > 0)
            cr_assert_eq(f, last + 1, "grant %d: fence %lld after %lld", i, f, last);
        last = f;
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
        h_resp r = h_http(C, "DELETE", "/locks/reused", NULL, hdr, NULL);
        cr_assert_eq(r.status, 204);
        h_resp_free(&a);
        h_resp_free(&r);
        usleep(2000);   /* the clock moves on: a proposal would be far above last + 1 */
    }
    cr_assert_eq(h_metric(C, "redlockd_fence_raises_total"), raises0);
}
