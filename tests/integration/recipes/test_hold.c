/* Integration: held streams ("hold": true) and owners, against real masters
 * that the tests pause, flush and take over, read as a client reads them:
 * event by event over a raw socket, timed on the test's own clock. (Clients
 * cut off or read late: test_hold_net.c.) */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hold_tests.h"

static h_cluster *C;

static void teardown(void)
{
    h_cluster_free(C);
    C = NULL;
}

TestSuite(hold, .fini = teardown, .timeout = 120);

/* The stream renews across at least five ttls; meanwhile the name stays
 * taken, and every event's validity is positive and never runs out before
 * the next event arrives. */
Test(hold, renews_across_five_ttls)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open(C, "hr", "{\"hold\":true,\"ttl_ms\":1000}", &ev, &t);
    cr_assert_eq(h_ev_int(ev, "ttl_ms"), 1000);
    uint64_t end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
    uint64_t until = t + 5500000;
    int renewed = 0;
    cJSON_Delete(ev);
    while (h_now_us() < until) {
        int r = h_stream_event(s, 2000, &ev, &t);
        cr_assert_eq(r, 1, "the stream stopped after %d renewals", renewed);
        cr_assert_str_eq(h_ev_str(ev, "event"), "renewed", "%s", cJSON_PrintUnformatted(ev));
        cr_assert_lt(t, end_of_validity, "a renewal came after the validity last announced");
        cr_assert_gt(h_ev_int(ev, "validity_ms"), 0);
        end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
        cJSON_Delete(ev);
        if (++renewed % 4 == 0)
            cr_assert_eq(h_acquire_status(C, "hr", NULL), 409, "another client took a held lock");
    }
    cr_assert_geq(renewed, 12, "renewed every third of the ttl: %d in 5.5 ttls", renewed);
    h_stream_close(s);
}

/* Closing the stream releases at once: the next acquire succeeds within a
 * second, 100 times in a row. Prints p50 and max. */
Test(hold, closing_the_stream_releases_within_a_second)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    enum { TRIES = 100 };
    double ms[TRIES];
    for (int i = 0; i < TRIES; i++) {
        cJSON *ev;
        uint64_t t;
        h_stream *s = hold_open(C, "hc", "{\"hold\":true,\"ttl_ms\":30000}", &ev, &t);
        cJSON_Delete(ev);
        uint64_t closed = h_now_us();
        h_stream_close(s);
        h_resp r;
        for (;;) {
            r = h_http(C, "POST", "/locks/hc", "{\"ttl_ms\":30000,\"wait_ms\":1500}", NULL);
            if (r.status != 409 || h_now_us() - closed > 2000000)
                break;
            h_resp_free(&r);
        }
        ms[i] = (double)(h_now_us() - closed) / 1000.0;
        cr_assert_eq(r.status, 201, "try %d: %s", i, r.body);
        cr_assert_lt(ms[i], 1000.0, "try %d: released %.0f ms after the close", i, ms[i]);
        char del[128];
        snprintf(del, sizeof del, "Lock-Token: %s", h_str(&r, "token"));
        h_resp d = h_http(C, "DELETE", "/locks/hc", NULL, del, NULL);
        cr_assert_eq(d.status, 204);
        h_resp_free(&d);
        h_resp_free(&r);
    }
    for (int i = 1; i < TRIES; i++)   /* insertion sort: p50 and max */
        for (int j = i; j > 0 && ms[j - 1] > ms[j]; j--) {
            double x = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = x;
        }
    fprintf(stderr, "hold: release after the client closed, %d tries: p50 %.1f ms, max %.1f ms\n",
            TRIES, ms[TRIES / 2], ms[TRIES - 1]);
}

/* Three of five masters paused: extensions fail, and "lost" arrives before
 * the validity last announced has run out, measured on the test's clock
 * from when each event arrived. */
Test(hold, lost_comes_before_the_announced_validity_ends)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open(C, "hl", "{\"hold\":true,\"ttl_ms\":3000}", &ev, &t);
    uint64_t end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
    cJSON_Delete(ev);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    for (;;) {
        int r = h_stream_event(s, 5000, &ev, &t);
        cr_assert_eq(r, 1, "no lost event");
        if (!strcmp(h_ev_str(ev, "event"), "renewed")) {
            end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
            cJSON_Delete(ev);
            continue;
        }
        break;
    }
    cr_assert_str_eq(h_ev_str(ev, "event"), "lost");
    cr_assert_str_eq(h_ev_str(ev, "reason"), "no_quorum");
    cr_assert_lt(t, end_of_validity, "lost came %.1f ms after the validity announced ended",
                 (double)(t - end_of_validity) / 1000.0);
    fprintf(stderr, "hold: lost arrived %.1f ms before the announced validity ended\n",
            (double)(end_of_validity - t) / 1000.0);
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 2000, &ev, &t), -1, "the stream ends after lost");
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    h_stream_close(s);
}


/* Another holder took the name (the masters were flushed and the key set by
 * another client): the next renewal ends the stream with held_by_other. */
Test(hold, taken_over_ends_with_held_by_other)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open(C, "ho", "{\"hold\":true,\"ttl_ms\":1500}", &ev, &t);
    cJSON_Delete(ev);
    for (int i = 0; i < 3; i++) {
        redisReply *r = h_redis(C, i, "SET lock:ho someone-else PX 60000");
        freeReplyObject(r);
    }
    do {
        cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no lost event");
        if (strcmp(h_ev_str(ev, "event"), "renewed"))
            break;
        cJSON_Delete(ev);
    } while (1);
    cr_assert_str_eq(h_ev_str(ev, "event"), "lost");
    cr_assert_str_eq(h_ev_str(ev, "reason"), "held_by_other");
    cJSON_Delete(ev);
    redisReply *r = h_redis(C, 0, "GET lock:ho");
    cr_assert(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "someone-else"),
              "the other holder's lock is untouched");
    freeReplyObject(r);
    h_stream_close(s);
}

/* DELETE with the stream's token releases and ends the stream with
 * "released"; a ordinary acquire then succeeds. */
Test(hold, delete_with_the_token_ends_the_stream)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open(C, "hd", "{\"hold\":true,\"ttl_ms\":5000}", &ev, &t);
    char hdr[128];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_ev_str(ev, "token"));
    cJSON_Delete(ev);
    h_resp d = h_http(C, "DELETE", "/locks/hd", NULL, hdr, NULL);
    cr_assert_eq(d.status, 204, "%s", d.body);
    h_resp_free(&d);
    cr_assert_eq(h_stream_event(s, 2000, &ev, &t), 1);
    cr_assert_str_eq(h_ev_str(ev, "event"), "released");
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 2000, &ev, &t), -1, "the stream ends after released");
    cr_assert_eq(h_acquire_status(C, "hd", NULL), 201);
    h_stream_close(s);
}

/* A stopping redlockd ends every stream with "released" and releases. */
Test(hold, shutdown_releases_and_ends_every_stream)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_stream *s[3];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "hs%d", i);
        cJSON *ev;
        uint64_t t;
        s[i] = hold_open(C, name, "{\"hold\":true,\"ttl_ms\":30000}", &ev, &t);
        cJSON_Delete(ev);
    }
    cr_assert_eq(h_daemon_stop(C), 0);
    for (int i = 0; i < 3; i++) {
        cJSON *ev;
        uint64_t t;
        cr_assert_eq(h_stream_event(s[i], 3000, &ev, &t), 1, "stream %d got no last event", i);
        cr_assert_str_eq(h_ev_str(ev, "event"), "released");
        cr_assert_str_eq(h_ev_str(ev, "reason"), "shutting_down");
        cJSON_Delete(ev);
        h_stream_close(s[i]);
        for (int m = 0; m < 3; m++) {
            redisReply *r = h_redis(C, m, "EXISTS lock:hs%d", i);
            cr_assert(r && r->integer == 0, "hs%d is still held on master %d", i, m);
            freeReplyObject(r);
        }
    }
}

/* Bounds and failures answer ordinary JSON: 429 beyond --max-holds, 409
 * when the name is held, 400 for a ttl too short to renew. */
Test(hold, bounds_and_failed_acquires_answer_json)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--max-holds", "2", NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *a = hold_open(C, "hb1", "{\"hold\":true,\"ttl_ms\":5000}", &ev, &t);
    cJSON_Delete(ev);
    h_stream *b = hold_open(C, "hb2", "{\"hold\":true,\"ttl_ms\":5000}", &ev, &t);
    cJSON_Delete(ev);
    h_resp r = h_http(C, "POST", "/locks/hb3", "{\"hold\":true,\"ttl_ms\":5000}", NULL);
    cr_assert_eq(r.status, 429, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "too_many_holds");
    cr_assert_str_eq(r.retry_after, "1");
    h_resp_free(&r);
    cr_assert_eq(h_acquire_status(C, "hb3", NULL), 201, "an ordinary acquire is not a hold");
    h_stream_close(a);
    usleep(300000);   /* its place is free once the close is seen */
    r = h_http(C, "POST", "/locks/hb2", "{\"hold\":true,\"ttl_ms\":5000}", NULL);
    cr_assert_eq(r.status, 409, "a held name: %s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "locked");
    cr_assert(strstr(r.content_type, "application/json"));
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/hb4", "{\"hold\":true,\"ttl_ms\":999}", NULL);
    cr_assert_eq(r.status, 400, "%s", r.body);
    cr_assert(strstr(h_str(&r, "message"), "ttl_ms"));
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/hb4", "{\"hold\":\"yes\"}", NULL);
    cr_assert_eq(r.status, 400, "%s", r.body);
    h_resp_free(&r);
    r = h_http(C, "GET", "/locks/hb4", NULL, NULL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "held")), "a refused request took nothing");
    h_resp_free(&r);
    h_stream_close(b);
}

/* Owners: GET reports the owner and the fence while the lock is held, the
 * value under the lock's key stays the token, the owner goes with the
 * lock, and a lock another Redlock client took reads as held, no owner. */
Test(hold, owner_is_reported_and_expires_with_the_lock)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_resp a = h_http(C, "POST", "/locks/ow", "{\"ttl_ms\":1500,\"owner\":\"pod-7 (zone a)\"}", NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    h_resp g = h_http(C, "GET", "/locks/ow", NULL, NULL);
    cr_assert_str_eq(h_str(&g, "owner"), "pod-7 (zone a)", "%s", g.body);
    cr_assert_eq(h_int(&g, "fence"), h_int(&a, "fence"), "%s", g.body);
    cr_assert(!strstr(g.body, h_str(&a, "token")), "GET never shows the token");
    h_resp_free(&g);
    for (int m = 0; m < 3; m++) {
        cr_assert(h_wait_key(C, m, "lock:ow", 1000), "master %d missed the grant", m);
        redisReply *r = h_redis(C, m, "GET lock:ow");
        cr_assert(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, h_str(&a, "token")),
                  "the lock's value is the token alone");
        freeReplyObject(r);
    }
    /* An extension keeps the owner with the lock. */
    char hdr[128];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
    h_resp x = h_http(C, "PATCH", "/locks/ow", "{\"ttl_ms\":3000}", hdr, NULL);
    cr_assert_eq(x.status, 200);
    h_resp_free(&x);
    usleep(2000000);
    g = h_http(C, "GET", "/locks/ow", NULL, NULL);
    cr_assert_str_eq(h_str(&g, "owner"), "pod-7 (zone a)", "extended with the lock: %s", g.body);
    h_resp_free(&g);
    usleep(1300000);
    g = h_http(C, "GET", "/locks/ow", NULL, NULL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g.json, "held")) && !h_has(&g, "owner"), "%s", g.body);
    h_resp_free(&g);
    for (int m = 0; m < 3; m++) {
        redisReply *r = h_redis(C, m, "EXISTS lock:ow\x1f#owner");
        cr_assert(r && r->integer == 0, "the owner expired with the lock");
        freeReplyObject(r);
    }
    /* A new grant without an owner shows none. */
    h_resp b = h_http(C, "POST", "/locks/ow", NULL, NULL);
    g = h_http(C, "GET", "/locks/ow", NULL, NULL);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(g.json, "held")) && !h_has(&g, "owner"), "%s", g.body);
    cr_assert_eq(h_int(&g, "fence"), h_int(&b, "fence"));
    h_resp_free(&g);
    h_resp_free(&b);
    /* Another Redlock client's lock (plain SET NX on every master). */
    for (int m = 0; m < 3; m++) {
        redisReply *r = h_redis(C, m, "SET lock:foreign abc123 NX PX 10000");
        freeReplyObject(r);
    }
    g = h_http(C, "GET", "/locks/foreign", NULL, NULL);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(g.json, "held")) && !h_has(&g, "owner"), "%s", g.body);
    h_resp_free(&g);
    /* Bad owners change nothing. */
    const char *bad[] = {"{\"owner\":\"\"}", "{\"owner\":\"tab\\there\"}", "{\"owner\":7}",
                         "{\"owner\":\"a\\u001fb\"}", "{\"owner\":\"a\\u007f\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h_resp r = h_http(C, "POST", "/locks/ow2", bad[i], NULL);
        cr_assert_eq(r.status, 400, "%s: %s", bad[i], r.body);
        h_resp_free(&r);
    }
    char longer[300];
    snprintf(longer, sizeof longer, "{\"owner\":\"%0129d\"}", 0);
    h_resp r = h_http(C, "POST", "/locks/ow2", longer, NULL);
    cr_assert_eq(r.status, 400, "129 bytes: %s", r.body);
    h_resp_free(&r);
    g = h_http(C, "GET", "/locks/ow2", NULL, NULL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g.json, "held")));
    h_resp_free(&g);
    h_resp_free(&a);
}
