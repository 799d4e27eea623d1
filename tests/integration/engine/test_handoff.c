/* Integration: waiting done right. A release wakes waiters at once through
 * Redis pub/sub notices, on this instance and on others using the same
 * masters; waiters of one name go in arrival order; a lost subscription
 * comes back, and expiry still wakes waiters by their timers. The timers
 * are set slow (--retry-delay-ms 5000) so only a notice can explain a fast
 * handoff. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;
static h_cluster *B;   /* a second redlockd on the same masters */

static void teardown(void)
{
    if (B) {
        cr_assert_eq(h_daemon_stop(B), 0);
        free(B);
        B = NULL;
    }
    h_cluster_free(C);
}

TestSuite(handoff, .fini = teardown, .timeout = 60);

static bool all_subscribed(h_cluster *c)
{
    h_resp rz = h_http(c, "GET", "/readyz", NULL, NULL);
    cJSON *ms = cJSON_GetObjectItem(rz.json, "masters");
    bool all = cJSON_GetArraySize(ms) == c->n;
    for (int i = 0; i < cJSON_GetArraySize(ms); i++)
        all &= cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(ms, i), "notices"));
    h_resp_free(&rz);
    return all;
}

/* A second redlockd on C's masters; its waiters retry after a random
 * delay of retry_ms times 0.5 to 1.5 (NULL: 5000). */
static h_cluster *second_instance(const char *retry_ms, const char *flag1, const char *val1)
{
    h_cluster *b = malloc(sizeof *b);
    *b = *C;
    b->daemon = 0;
    b->http_port = 0;
    h_daemon_start(b, "--retry-delay-ms", retry_ms ? retry_ms : "5000", flag1, val1, NULL);
    /* Ready to vote is not yet subscribed to notices. */
    for (int tries = 0; tries < 250 && !all_subscribed(b) && !(flag1 && !strcmp(flag1, "--notify")); tries++)
        usleep(20000);
    return b;
}

static void release(h_cluster *c, const char *name, const h_resp *grant)
{
    char path[200], hdr[200];
    snprintf(path, sizeof path, "/locks/%s", name);
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(grant, "token"));
    h_resp r = h_http(c, "DELETE", path, NULL, hdr, NULL);
    cr_assert_eq(r.status, 204, "%s", r.body);
    h_resp_free(&r);
}

struct waiter {
    h_cluster *c;
    const char *name;
    int id;
    long status;
    uint64_t granted_us;
    int order;
};

static atomic_int next_order;

static void *wait_then_release(void *arg)
{
    struct waiter *w = arg;
    char path[100];
    snprintf(path, sizeof path, "/locks/%s", w->name);
    h_resp r = h_http(w->c, "POST", path, "{\"wait_ms\":10000,\"ttl_ms\":10000}", NULL);
    w->status = r.status;
    w->granted_us = h_now_us();
    if (r.status == 201) {
        w->order = atomic_fetch_add(&next_order, 1);
        usleep(20000);
        release(w->c, w->name, &r);
    }
    h_resp_free(&r);
    return NULL;
}

Test(handoff, waiters_served_in_arrival_order_at_once)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--retry-delay-ms", "5000", NULL);
    h_resp held = h_http(C, "POST", "/locks/fifo", "{\"ttl_ms\":20000}", NULL);
    cr_assert_eq(held.status, 201);
    enum { N = 4 };
    struct waiter w[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        w[i] = (struct waiter){.c = C, .name = "fifo", .id = i};
        pthread_create(&t[i], NULL, wait_then_release, &w[i]);
        usleep(50000);   /* arrival order 0, 1, 2, 3 */
    }
    usleep(100000);
    uint64_t released = h_now_us();
    release(C, "fifo", &held);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(w[i].status, 201, "waiter %d", i);
        cr_assert_eq(w[i].order, i, "waiter %d was served %d-th", i, w[i].order);
    }
    double total_ms = (double)(w[N - 1].granted_us - released) / 1000.0;
    cr_assert_lt(total_ms, 1000, "four handoffs took %.0f ms; timers alone need seconds", total_ms);
    h_resp_free(&held);
}

/* Whether B's /ui/state lists a waiter of lock x: its acquire was refused
 * once and it waits (it joins the name's waiters only then). */
static bool b_has_waiter(void *arg)
{
    (void)arg;
    h_resp r = h_http(B, "GET", "/ui/state", NULL, NULL);
    bool yes = false;
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(r.json, "waiters"))
        yes |= !strcmp(h_ev_str(it, "name"), "x") && h_ev_int(it, "waiters") >= 1;
    h_resp_free(&r);
    return yes;
}

/* C holds x; a waiter on B (wait_ms 10 s) is refused once and sleeps; then
 * C releases x. The waiter as it ended, and *released when the release
 * was sent. */
static struct waiter cross_instance_handoff(uint64_t *released)
{
    h_resp held = h_http(C, "POST", "/locks/x", "{\"ttl_ms\":20000}", NULL);
    cr_assert_eq(held.status, 201);
    struct waiter w = {.c = B, .name = "x"};
    pthread_t t;
    atomic_store(&next_order, 0);
    pthread_create(&t, NULL, wait_then_release, &w);
    /* Released only once the waiter sleeps: a waiter that came after the
     * release would be granted at once, notices or not. */
    cr_assert(h_eventually(b_has_waiter, NULL, 10000), "B's acquire never waited");
    *released = h_now_us();
    release(C, "x", &held);
    pthread_join(t, NULL);
    h_resp_free(&held);
    return w;
}

static double cross_instance_handoff_ms(void)
{
    uint64_t released;
    struct waiter w = cross_instance_handoff(&released);
    cr_assert_eq(w.status, 201);
    return (double)(w.granted_us - released) / 1000.0;
}

Test(handoff, release_on_one_instance_wakes_a_waiter_on_another)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    B = second_instance(NULL, NULL, NULL);
    double ms = cross_instance_handoff_ms();
    cr_assert_lt(ms, 200, "the waiter on the other instance took %.0f ms", ms);
    cr_assert_geq(h_metric(B, "redlockd_handoff_wakeups_total"), 1, "B's waiter was not woken by the release");
}

/* Control: with notices off nothing but its timer wakes the waiter, so the
 * test above does measure the notice. By construction, not by timing: B's
 * retry delay (60 s base: at least the holder's 20 s ttl) is beyond the
 * waiter's 10 s wait, so it sleeps to the end of its wait and is refused,
 * however soon after its refusal the release came. */
Test(handoff, without_notices_the_waiter_sleeps)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--notify", "off", NULL);
    B = second_instance("60000", "--notify", "off");
    uint64_t released;
    struct waiter w = cross_instance_handoff(&released);
    cr_assert_eq(w.status, 409, "without notices the release on C reached B's waiter (%ld, %.0f ms after it)",
                 w.status, (double)(w.granted_us - released) / 1000.0);
    cr_assert_eq(h_metric(B, "redlockd_handoff_wakeups_total"), 0, "a waiter was woken without notices");
}

Test(handoff, subscriptions_come_back_after_masters_restart)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--quarantine", "off", NULL);
    B = second_instance(NULL, "--quarantine", "off");
    for (int tries = 0; tries < 100 && !all_subscribed(B); tries++)
        usleep(20000);
    cr_assert(all_subscribed(B));
    for (int i = 0; i < 3; i++)
        h_master_restart(C, i);
    uint64_t until = h_now_us() + 5000000;
    bool back = false;
    while (!back && h_now_us() < until) {
        usleep(50000);
        back = all_subscribed(B) && all_subscribed(C);
    }
    cr_assert(back, "subscriptions did not come back");
    cr_assert(h_wait_status(C, "/readyz", 200, 3000));
    double ms = cross_instance_handoff_ms();
    cr_assert_lt(ms, 200, "after the restart the handoff took %.0f ms", ms);
}

Test(handoff, expiry_wakes_waiters_by_timer)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--retry-delay-ms", "5000", NULL);
    h_resp held = h_http(C, "POST", "/locks/exp", "{\"ttl_ms\":400}", NULL);
    cr_assert_eq(held.status, 201);
    uint64_t t0 = h_now_us();
    h_resp w = h_http(C, "POST", "/locks/exp", "{\"wait_ms\":5000}", NULL);
    double ms = (double)(h_now_us() - t0) / 1000.0;
    cr_assert_eq(w.status, 201, "%s", w.body);
    cr_assert_lt(ms, 1500, "the retry shrinks to the holder's remaining time: %.0f ms", ms);
    h_resp_free(&held);
    h_resp_free(&w);
}
