/* Integration: what reads many masters is paced like an acquire (issue 41).
 * A listing's page, an election's GET and a watch's reads wait for a place
 * among --max-inflight (503 overloaded when none comes within
 * --queue-timeout-ms), and a watch is a stream: it takes a place among
 * --max-holds, given back when it ends. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void teardown(void)
{
    h_cluster_free(C);
    C = NULL;
}

TestSuite(paced, .fini = teardown, .timeout = 120);

static void *acquire_slowly(void *arg)
{
    h_resp r = h_http(C, "POST", "/locks/slow", "{\"ttl_ms\":5000}", NULL);
    *(long *)arg = r.status;
    h_resp_free(&r);
    return NULL;
}

/* The one place among --max-inflight 1 is taken by an acquire that waits
 * for three stopped masters (a long master timeout): a listing's page and
 * an election's GET wait for it, and answer 503 overloaded when no place
 * comes within the queue timeout, never what the masters would have said. */
Test(paced, listings_and_election_reads_wait_for_a_place_among_max_inflight)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-inflight", "1", "--queue-timeout-ms", "300", "--master-timeout-ms", "3000", NULL);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    long slow = 0;
    pthread_t t;
    pthread_create(&t, NULL, acquire_slowly, &slow);
    usleep(300000);   /* it holds the place until the masters' deadline */
    const char *paths[] = {"/locks", "/elections", "/semaphores?prefix=x", "/elections/db"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        h_resp r = h_http(C, "GET", paths[i], NULL, NULL);
        cr_assert_eq(r.status, 503, "%s: %ld %s", paths[i], r.status, r.body);
        cr_assert_str_eq(h_str(&r, "error"), "overloaded", "%s: %s", paths[i], r.body);
        h_resp_free(&r);
    }
    pthread_join(t, NULL);
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    cr_assert(h_wait_voting(C, 5, 10000));
    cr_assert(h_wait_status(C, "/locks", 200, 10000), "a listing once the place is free");
    cr_assert(h_wait_status(C, "/elections/db", 200, 10000), "an election's GET once the place is free");
}

/* --max-holds 2: two watches take both places; a third watch and a held
 * lock are refused 429 too_many_holds; once a watch ends, its place is
 * free again. */
Test(paced, watches_count_against_max_holds)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-holds", "2", NULL);
    h_stream *w1 = h_stream_get(C, "/elections/db?watch=true", 5000);
    h_stream *w2 = h_stream_get(C, "/elections/db?watch=true", 5000);
    cr_assert(w1 && w2 && w1->status == 200 && w2->status == 200);
    h_resp r = h_http(C, "GET", "/elections/db?watch=true", NULL, NULL);
    cr_assert_eq(r.status, 429, "a third watch: %ld %s", r.status, r.body);
    cr_assert_str_eq(h_str(&r, "error"), "too_many_holds");
    h_resp_free(&r);
    cr_assert_eq(h_acquire_status(C, "held", "{\"hold\":true}"), 429, "a held lock beside two watches");
    h_stream_close(w1);
    h_stream *w3 = NULL;
    for (int i = 0; i < 100 && !w3; i++) {
        h_stream *s = h_stream_get(C, "/elections/db?watch=true", 5000);
        if (s && s->status == 200)
            w3 = s;
        else if (s)
            h_stream_close(s);
        if (!w3)
            usleep(50000);
    }
    cr_assert(w3, "the closed watch's place never came back");
    h_stream_close(w2);
    h_stream_close(w3);
}

struct burst {
    int n;
    long status[16];
};

static void *acquire_one(void *arg)
{
    long *st = arg;
    char path[64];
    static atomic_int k;
    snprintf(path, sizeof path, "/locks/burst-%d", atomic_fetch_add(&k, 1));
    h_resp r = h_http(C, "POST", path, "{\"ttl_ms\":5000}", NULL);
    *st = r.status;
    h_resp_free(&r);
    return NULL;
}

static bool some_held_back(void *arg)
{
    (void)arg;
    return h_metric(C, "redlockd_requests_held_back_total") > 0;
}

/* Backpressure: with the one place among --max-inflight 1 taken and one
 * more acquire waiting for it, further acquires are left unread (their
 * connections held back) rather than queued; /healthz is still served, and
 * once the masters answer every acquire is. */
Test(paced, new_requests_wait_unread_while_the_admission_queue_is_long)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-inflight", "1", "--queue-timeout-ms", "20000", "--master-timeout-ms", "1000", NULL);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    enum { N = 8 };
    pthread_t t[N];
    long st[N] = {0};
    for (int i = 0; i < N; i++) {
        pthread_create(&t[i], NULL, acquire_one, &st[i]);
        usleep(20000);
    }
    cr_assert(h_eventually(some_held_back, NULL, 10000), "no request was held back");
    h_resp r = h_http(C, "GET", "/healthz", NULL, NULL);
    cr_assert_eq(r.status, 200, "/healthz while requests wait unread");
    h_resp_free(&r);
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++)
        cr_assert(st[i] == 201 || st[i] == 503, "acquire %d answered %ld", i, st[i]);
    long held = h_metric(C, "redlockd_requests_held_back_total");
    fprintf(stderr, "paced: %ld of %d acquires held back, then served\n", held, N);
    cr_assert_geq(held, N - 3, "only %ld of %d were held back", held, N);
}
