/* Integration: overload. More acquires at once than the masters can answer
 * within their deadline must be queued or shed by the service (503
 * overloaded, with Retry-After), never read as master failure. Load tests:
 * this binary runs its tests one at a time (--jobs 1), as they need the
 * machine's cores. Real masters, the real binary, raw sockets. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* Two thousand client sockets need more than the usual 1024 descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void teardown(void) { h_cluster_free(C); }

TestSuite(overload, .init = setup, .fini = teardown, .timeout = 120);

/* 2,000 acquires at once, each of a name of its own: more than the masters
 * can answer within their 50 ms deadline in one go on this machine. The
 * service must shed or queue what it cannot serve (503 overloaded with
 * Retry-After, or a late grant), never let the overload read as master
 * failure: no 503 no_quorum, and every master is up at the end. */
Test(overload, shed_before_it_starves_the_vote, .timeout = 180)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-connections", "4096", "--max-connections-per-ip", "4096", NULL);
    enum { N = 2000, ROUNDS = 3 };
    static int fds[N];
    int granted = 0, overloaded = 0, no_quorum = 0, other = 0, with_retry_after = 0;
    char sample[512] = "";
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++)
            fds[i] = h_raw_connect(C, NULL);
        for (int i = 0; i < N; i++) {
            char req[256], body[] = "{\"ttl_ms\":10000}";
            snprintf(req, sizeof req,
                     "POST /locks/ov-%d-%d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", round, i, strlen(body), body);
            h_raw_send(fds[i], req);
        }
        for (int i = 0; i < N; i++) {
            char buf[2048];
            bool closed;
            h_raw_read_all(fds[i], buf, sizeof buf, 20000, &closed);
            close(fds[i]);
            if (!strncmp(buf, "HTTP/1.1 201", 12))
                granted++;
            else if (strstr(buf, "\"error\":\"overloaded\"")) {
                overloaded++;
                with_retry_after += strstr(buf, "Retry-After: ") != NULL;
            } else if (strstr(buf, "\"error\":\"no_quorum\"")) {
                no_quorum++;
                snprintf(sample, sizeof sample, "%.500s", buf);
            } else {
                other++;
                snprintf(sample, sizeof sample, "%.500s", buf);
            }
        }
    }
    h_resp rz = h_http(C, "GET", "/readyz", NULL, NULL);
    long long up = h_int(&rz, "masters_up");
    h_resp_free(&rz);
    /* Reported, not judged: a master late once because the machine was busy
     * otherwise costs no answer (before admission: 14 errors, 812 no_quorum). */
    long long errors = h_metric(C, "redlockd_master_errors_total");
    fprintf(stderr, "overload: %d acquires: %d granted, %d 503 overloaded, %d 503 no_quorum, %d other; "
            "master errors %lld\n", N * ROUNDS, granted, overloaded, no_quorum, other, errors);
    cr_assert_eq(no_quorum, 0, "%d of %d acquires read overload as master failure: %s", no_quorum,
                 N * ROUNDS, sample);
    cr_assert_eq(other, 0, "%d answers were neither: %s", other, sample);
    cr_assert_eq(with_retry_after, overloaded, "an overloaded answer without Retry-After");
    cr_assert_gt(granted, N, "the service stopped granting");
    cr_assert_eq(up, 5);
}

/* A request that finds no place among --max-inflight within
 * --queue-timeout-ms answers 503 overloaded with Retry-After, on time;
 * the one in flight is answered as usual. */
Test(overload, queued_too_long_answers_overloaded)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-inflight", "1", "--queue-timeout-ms", "200", "--master-timeout-ms", "1500",
                   NULL);
    for (int i = 0; i < 5; i++)
        h_master_pause(C, i);
    int first = h_raw_connect(C, NULL);
    h_raw_send(first, "POST /locks/q-0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n");
    usleep(50000);
    enum { N = 3 };
    int fds[N];
    uint64_t t0 = h_now_us();
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "q-%d", i + 1);
        char req[256];
        snprintf(req, sizeof req, "POST /locks/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                 "Content-Length: 0\r\n\r\n", name);
        fds[i] = h_raw_connect(C, NULL);
        h_raw_send(fds[i], req);
    }
    char buf[2048];
    bool closed;
    for (int i = 0; i < N; i++) {
        h_raw_read_all(fds[i], buf, sizeof buf, 3000, &closed);
        double ms = (double)(h_now_us() - t0) / 1000.0;
        close(fds[i]);
        cr_assert(!strncmp(buf, "HTTP/1.1 503", 12) && strstr(buf, "\"error\":\"overloaded\"") &&
                  strstr(buf, "Retry-After: 1\r\n") && strstr(buf, "\"retry_after_ms\":1000"),
                  "queued request %d: '%s'", i, buf);
        cr_assert(ms >= 150 && ms < 1000, "queued request %d answered after %.0f ms (queue timeout 200)", i, ms);
    }
    h_raw_read_all(first, buf, sizeof buf, 3000, &closed);
    close(first);
    cr_assert(strstr(buf, "\"error\":\"no_quorum\""), "the request in flight: '%s'", buf);
    for (int i = 0; i < 5; i++)
        h_master_resume(C, i);
    cr_assert_eq(h_metric(C, "redlockd_overloaded_total"), N);
    cr_assert(h_wait_status(C, "/readyz", 200, 5000));
    h_resp ok = h_http(C, "POST", "/locks/q-after", NULL, NULL);
    cr_assert_eq(ok.status, 201, "%s", ok.body);
    h_resp_free(&ok);
}
