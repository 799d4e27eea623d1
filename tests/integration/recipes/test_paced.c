/* Integration: what reads many masters is paced like an acquire (issue 41).
 * A listing's page, an election's GET and a watch's reads wait for a place
 * among --max-inflight (503 overloaded when none comes within
 * --queue-timeout-ms), and a watch is a stream: it takes a place among
 * --max-holds, given back when it ends. */
#include <criterion/criterion.h>
#include <pthread.h>
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
