/* Integration: what elections, semaphores and held streams promise (issue
 * 30), with two redlockd instances on five masters: a semaphore waiter
 * that leaves takes no permit; a lease held on only three masters (a split
 * vote) spreads to the free ones, so that any two masters may stop; and a
 * release through the other instance ends the holder's stream as
 * "released" or "resigned", not "lost"; a close is noticed at once. The
 * rest (a hung holder, order across instances, no starvation) is in
 * test_promises_fair.c; the helpers both use are in promises.h. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "promises.h"

h_cluster *C, *P;

static void teardown(void)
{
    h_free_pair(&C, &P);
}

TestSuite(promises, .fini = teardown, .timeout = 120);

void start_two(void)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    P = h_peer_start(C, NULL);
}

/* The next event of s other than "renewed" (and "campaigning"), within
 * timeout_ms; NULL when none came or the stream ended. */
cJSON *next_news(h_stream *s, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    for (;;) {
        long left = (long)((int64_t)(until - h_now_us()) / 1000);
        if (left <= 0)
            return NULL;
        cJSON *ev = NULL;
        uint64_t at;
        if (h_stream_event(s, (int)left, &ev, &at) != 1)
            return NULL;
        const char *what = h_ev_str(ev, "event");
        if (strcmp(what, "renewed") && strcmp(what, "campaigning"))
            return ev;
        cJSON_Delete(ev);
    }
}

/* A stream on c (POST path body) that answered 201. */
h_stream *open_stream(h_cluster *c, const char *path, const char *body)
{
    h_stream *s = h_stream_open(c, path, body, 3000);
    cr_assert(s && s->status == 201, "POST %s: %ld %s", path, s ? s->status : 0, s && s->body ? s->body : "");
    return s;
}

/* open_stream, whose first news (within 3 s) is the event want: returned
 * in *first (free with cJSON_Delete). */
h_stream *begin(h_cluster *c, const char *path, const char *body, const char *want, cJSON **first)
{
    h_stream *s = open_stream(c, path, body);
    cJSON *ev = next_news(s, 3000);
    cr_assert(ev && !strcmp(h_ev_str(ev, "event"), want), "POST %s: %s, not %s", path,
              ev ? h_ev_str(ev, "event") : "nothing", want);
    *first = ev;
    return s;
}

/* A DELETE of path on c with token, answered 204. */
void delete_with(h_cluster *c, const char *path, const char *token)
{
    char hdr[400];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", token);
    h_resp d = h_http(c, "DELETE", path, NULL, hdr, NULL);
    cr_assert_eq(d.status, 204, "DELETE %s: %ld %s", path, d.status, d.body);
    h_resp_free(&d);
}

/* ---- 1. a departed semaphore waiter ---- */

struct free_want {
    h_cluster *c;
    const char *name;
};

/* Can a one-permit acquire (no wait) take the semaphore now? Gives it back. */
static bool permit_free(void *arg)
{
    struct free_want *w = arg;
    char path[128];
    snprintf(path, sizeof path, "/semaphores/%s", w->name);
    h_resp r = h_http(w->c, "POST", path, "{\"limit\":1,\"ttl_ms\":5000}", NULL);
    bool ok = r.status == 201;
    if (ok) {
        char hdr[400];
        cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "permits"), 0);
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_ev_str(p, "token"));
        h_resp d = h_http(w->c, "DELETE", path, NULL, hdr, NULL);
        h_resp_free(&d);
    }
    h_resp_free(&r);
    return ok;
}

/* A waiter that closes its connection normally (a FIN, as a client's
 * timeout does) while it waits: the permit the release then frees is not
 * kept for the departed waiter's ttl. */
Test(promises, a_semaphore_waiter_that_closes_takes_no_permit)
{
    start_two();
    h_resp one = h_http(C, "POST", "/semaphores/fin", "{\"limit\":1,\"ttl_ms\":30000}", NULL);
    cr_assert_eq(one.status, 201, "%s", one.body);
    cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(one.json, "permits"), 0);
    int fd = h_raw_post(C, "/semaphores/fin", "{\"limit\":1,\"wait_ms\":20000,\"ttl_ms\":20000}");
    usleep(500000);   /* (it waits; were it not there yet, its FIN would come first: the same case) */
    close(fd);        /* a FIN: nothing unread, so no reset */
    usleep(300000);
    uint64_t released = h_now_us();
    delete_with(C, "/semaphores/fin", h_ev_str(p, "token"));
    struct free_want w = {P, "fin"};
    /* The departed waiter's ttl is 20 s: 10 s tells the two apart. */
    bool freed = h_eventually(permit_free, &w, 10000);
    cr_log_info("promises: the permit was free again %.0f ms after the release (the departed waiter's ttl 20,000)",
                (double)(h_now_us() - released) / 1000.0);
    cr_assert(freed, "the departed waiter kept the permit");
    h_resp_free(&one);
}

/* ---- 2. a lease on three masters spreads to the free two ---- */

/* The key's value on master i equals want. */
static bool key_is(h_cluster *c, int i, const char *key, const char *want)
{
    redisReply *r = h_redis(c, i, "GET %s", key);
    bool is = r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, want);
    if (r)
        freeReplyObject(r);
    return is;
}

struct spread_want {
    h_cluster *c;
    const char *key, *value;
};

static bool on_every_master(void *arg)
{
    struct spread_want *w = arg;
    for (int i = 0; i < w->c->n; i++)
        if (!key_is(w->c, i, w->key, w->value))
            return false;
    return true;
}

/* Another token on masters 3 and 4, as a split vote leaves them. */
static void rival_on_two(const char *key, bool on)
{
    for (int i = 3; i < 5; i++) {
        redisReply *r = on ? h_redis(C, i, "SET %s rival-token PX 20000", key) : h_redis(C, i, "DEL %s", key);
        cr_assert(r, "master %d", i);
        freeReplyObject(r);
    }
}

/* The stream s holds key with value on masters 0-2 only; the rival's keys
 * go (as the loser of a split vote releases them): within a few renewals
 * the lease is on all five; then masters 0 and 1 stop, and s keeps its
 * lease, renewing on the three that run. */
static void spreads_and_survives(h_stream *s, const char *key, const char *value, long ttl_ms)
{
    for (int i = 3; i < 5; i++)
        cr_assert(!key_is(C, i, key, value), "master %d holds the lease before the rival left", i);
    rival_on_two(key, false);
    struct spread_want w = {C, key, value};
    uint64_t from = h_now_us();
    bool spread = h_eventually(on_every_master, &w, (int)(6 * ttl_ms));
    cr_log_info("promises: %s was on all five masters %.0f ms after the rival left (ttl %ld)", key,
                (double)(h_now_us() - from) / 1000.0, ttl_ms);
    cr_assert(spread, "the lease stayed on three masters for six ttls");
    h_master_pause(C, 0);
    h_master_pause(C, 1);
    /* Three ttls on the masters 2, 3 and 4: renewals only. */
    uint64_t until = h_now_us() + 3 * (uint64_t)ttl_ms * 1000;
    int renewed = 0;
    while (h_now_us() < until) {
        cJSON *ev = NULL;
        uint64_t at;
        int rc = h_stream_event(s, 300, &ev, &at);
        cr_assert_neq(rc, -1, "the stream ended while three masters ran");
        if (rc == 1) {
            cr_assert_str_eq(h_ev_str(ev, "event"), "renewed", "with masters 0 and 1 stopped: %s",
                             h_ev_str(ev, "event"));
            renewed++;
            cJSON_Delete(ev);
        }
    }
    cr_assert_geq(renewed, 3, "renewed %d times in three ttls", renewed);
}

static void resume_two(void)
{
    h_master_resume(C, 0);
    h_master_resume(C, 1);
}

Test(promises, a_held_lock_on_three_masters_spreads_to_the_free_two)
{
    start_two();
    rival_on_two("lock:spread", true);
    cJSON *ev;
    h_stream *s = begin(C, "/locks/spread", "{\"hold\":true,\"ttl_ms\":1500,\"owner\":\"w1\"}", "acquired", &ev);
    char token[128];
    snprintf(token, sizeof token, "%s", h_ev_str(ev, "token"));
    long long fence = h_ev_int(ev, "fence");
    cJSON_Delete(ev);
    spreads_and_survives(s, "lock:spread", token, 1500);
    /* What the repaired masters keep: the owner, and a counter at the fence. */
    char rec[200];
    snprintf(rec, sizeof rec, "%s\nw1", token);
    cr_assert(key_is(C, 4, "lock:spread\x1f#owner", rec), "the owner record on a repaired master");
    redisReply *f = h_redis(C, 4, "GET lock:spread\x1f#fence");
    cr_assert(f && f->type == REDIS_REPLY_STRING && atoll(f->str) >= fence, "the counter on a repaired master");
    freeReplyObject(f);
    h_resp r = h_http(P, "GET", "/locks/spread", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "owner"), "w1", "%s", r.body);
    cr_assert_eq(h_int(&r, "fence"), fence, "%s", r.body);
    h_resp_free(&r);
    cr_assert_eq(h_acquire_status(P, "spread", NULL), 409, "another acquire while the lease holds");
    resume_two();
    h_stream_close(s);
}

Test(promises, a_split_vote_leader_spreads_to_the_free_two)
{
    start_two();
    rival_on_two("lock:ldr\x1f#election", true);
    cJSON *ev;
    h_stream *a = begin(C, "/elections/ldr", "{\"candidate\":\"a\",\"value\":\"v1\",\"ttl_ms\":1500}", "elected", &ev);
    char token[128];
    snprintf(token, sizeof token, "%s", h_ev_str(ev, "token"));
    long long term = h_ev_int(ev, "term");
    cJSON_Delete(ev);
    h_stream *b = open_stream(P, "/elections/ldr", "{\"candidate\":\"b\",\"value\":\"v2\",\"ttl_ms\":1500}");
    spreads_and_survives(a, "lock:ldr\x1f#election", token, 1500);
    ev = next_news(b, 200);
    cr_assert_null(ev, "b was elected while a leads: %s", ev ? h_ev_str(ev, "event") : "");
    h_resp r = h_http(P, "GET", "/elections/ldr", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "leader"), "a", "%s", r.body);
    cr_assert_str_eq(h_str(&r, "value"), "v1", "%s", r.body);
    cr_assert_eq(h_int(&r, "term"), term, "elected with term %lld: %s", term, r.body);
    h_resp_free(&r);
    resume_two();
    h_stream_close(a);
    h_stream_close(b);
}

Test(promises, a_held_permit_on_three_masters_spreads_to_the_free_two)
{
    start_two();
    rival_on_two("lock:pmt\x1f#0", true);
    cJSON *ev;
    h_stream *s = begin(C, "/semaphores/pmt", "{\"limit\":1,\"hold\":true,\"ttl_ms\":1500}", "acquired", &ev);
    const char *permit = h_ev_str(ev, "token");
    cr_assert_eq(strncmp(permit, "0:", 2), 0, "%s", permit);
    char token[128];
    snprintf(token, sizeof token, "%s", permit + 2);
    cJSON_Delete(ev);
    spreads_and_survives(s, "lock:pmt\x1f#0", token, 1500);
    h_resp r = h_http(P, "POST", "/semaphores/pmt", "{\"limit\":1}", NULL);
    cr_assert_eq(r.status, 409, "a second permit of one: %s", r.body);
    h_resp_free(&r);
    resume_two();
    h_stream_close(s);
}

/* ---- 3. released or resigned through the other instance ---- */

Test(promises, a_release_through_the_other_instance_ends_the_stream_released)
{
    start_two();
    cJSON *ev;
    h_stream *s = begin(C, "/locks/rel", "{\"hold\":true,\"ttl_ms\":6000}", "acquired", &ev);
    char token[300];
    snprintf(token, sizeof token, "%s", h_ev_str(ev, "token"));
    cJSON_Delete(ev);
    uint64_t at = h_now_us();
    delete_with(P, "/locks/rel", token);
    ev = next_news(s, 5000);
    cr_assert(ev, "no event after the DELETE through the other instance");
    cr_log_info("promises: a lock's stream told \"%s\" %.0f ms after a DELETE through the other instance",
                h_ev_str(ev, "event"), (double)(h_now_us() - at) / 1000.0);
    cr_assert_str_eq(h_ev_str(ev, "event"), "released", "%s", cJSON_PrintUnformatted(ev));
    cr_assert_null(cJSON_GetObjectItem(ev, "reason"));
    cJSON_Delete(ev);
    h_stream_close(s);
}

Test(promises, a_resign_through_the_other_instance_ends_the_campaign_resigned)
{
    start_two();
    cJSON *ev;
    h_stream *a = begin(C, "/elections/rs", "{\"candidate\":\"a\",\"ttl_ms\":6000}", "elected", &ev);
    char token[300];
    snprintf(token, sizeof token, "%s", h_ev_str(ev, "token"));
    long long term = h_ev_int(ev, "term");
    cJSON_Delete(ev);
    h_stream *b = open_stream(P, "/elections/rs", "{\"candidate\":\"b\",\"ttl_ms\":6000}");
    uint64_t at = h_now_us();
    delete_with(P, "/elections/rs", token);
    ev = next_news(a, 5000);
    cr_assert(ev, "no event after the resign through the other instance");
    cr_log_info("promises: the leader's stream told \"%s\" %.0f ms after a resign through the other instance",
                h_ev_str(ev, "event"), (double)(h_now_us() - at) / 1000.0);
    cr_assert_str_eq(h_ev_str(ev, "event"), "resigned", "%s", cJSON_PrintUnformatted(ev));
    cJSON_Delete(ev);
    ev = next_news(b, 5000);
    cr_assert(ev && !strcmp(h_ev_str(ev, "event"), "elected"), "the rival takes over");
    cr_assert_gt(h_ev_int(ev, "term"), term);
    cJSON_Delete(ev);
    h_stream_close(a);
    h_stream_close(b);
}

Test(promises, a_permit_released_through_the_other_instance_ends_the_stream_released)
{
    start_two();
    cJSON *ev;
    h_stream *s = begin(C, "/semaphores/prel", "{\"limit\":2,\"hold\":true,\"ttl_ms\":6000}", "acquired", &ev);
    char token[300];
    snprintf(token, sizeof token, "%s", h_ev_str(ev, "token"));
    cJSON_Delete(ev);
    delete_with(P, "/semaphores/prel", token);
    ev = next_news(s, 5000);
    cr_assert(ev, "no event after the DELETE through the other instance");
    cr_assert_str_eq(h_ev_str(ev, "event"), "released", "%s", cJSON_PrintUnformatted(ev));
    cJSON_Delete(ev);
    h_stream_close(s);
}

/* ---- 5. closes noticed at once ---- */

/* Reads what has arrived on fd (events, probes) so that a close sends a FIN,
 * not a reset, and closes it. */
static void close_ordinarily(int fd)
{
    char buf[4096];
    while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
    close(fd);
}

/* The leader's client closes its connection normally (a FIN); the rival's
 * grant follows at once, not after a probe, a renewal and a look every
 * 100 ms. Ten handoffs, alternating the instances. */
Test(promises, an_ordinary_close_hands_leadership_over)
{
    start_two();
    h_cluster *inst[2] = {C, P};
    h_stream *s[2];
    cJSON *ev;
    s[0] = begin(C, "/elections/oc", "{\"candidate\":\"c0\",\"ttl_ms\":6000}", "elected", &ev);
    cJSON_Delete(ev);
    double took[10];
    int leader = 0;
    for (int round = 0; round < 10; round++) {
        int other = 1 - leader;
        char body[64];
        snprintf(body, sizeof body, "{\"candidate\":\"c%d\",\"ttl_ms\":6000}", round + 1);
        s[other] = open_stream(inst[other], "/elections/oc", body);
        ev = next_news(s[other], 300);
        cr_assert_null(ev, "elected while another leads");
        uint64_t at = h_now_us();
        close_ordinarily(s[leader]->fd);
        s[leader]->fd = -1;
        h_stream_close(s[leader]);
        ev = next_news(s[other], 2000);   /* a renewal would come after 2000 ms */
        took[round] = (double)(h_now_us() - at) / 1000.0;
        cr_assert(ev && !strcmp(h_ev_str(ev, "event"), "elected"), "round %d: no handoff within a third of the ttl",
                  round);
        cJSON_Delete(ev);
        leader = other;
    }
    h_stream_close(s[leader]);
    double sorted[10];
    memcpy(sorted, took, sizeof sorted);
    for (int i = 0; i < 10; i++)
        for (int j = i + 1; j < 10; j++)
            if (sorted[j] < sorted[i]) {
                double t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    cr_log_info("promises: handoff after an ordinary close, 10 rounds across two instances: p50 %.1f ms, max %.1f ms",
                sorted[4], sorted[9]);
}

/* A leader that half-closes (shutdown(SHUT_WR): it still reads) keeps its
 * leadership; when it then closes fully, the rival is elected without
 * waiting for the leader's next renewal (a third of the ttl: 3 s here). */
Test(promises, a_half_closed_leader_that_closes_is_noticed_before_its_next_renewal)
{
    start_two();
    cJSON *ev;
    h_stream *a = begin(C, "/elections/hc", "{\"candidate\":\"a\",\"ttl_ms\":9000}", "elected", &ev);
    cJSON_Delete(ev);
    h_stream *b = open_stream(P, "/elections/hc", "{\"candidate\":\"b\",\"ttl_ms\":9000}");
    shutdown(a->fd, SHUT_WR);
    ev = next_news(b, 1000);
    cr_assert_null(ev, "a half-closed leader still leads");
    uint64_t at = h_now_us();
    close_ordinarily(a->fd);
    a->fd = -1;
    h_stream_close(a);
    ev = next_news(b, 1500);
    double took = (double)(h_now_us() - at) / 1000.0;
    cr_log_info("promises: a half-closed leader's full close was noticed, and the rival elected, after %.1f ms", took);
    cr_assert(ev && !strcmp(h_ev_str(ev, "event"), "elected"),
              "the rival was not elected within 1.5 s of the leader's close (its next renewal: 3 s)");
    cJSON_Delete(ev);
    h_stream_close(b);
}
