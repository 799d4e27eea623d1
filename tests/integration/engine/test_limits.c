/* Integration: connections and requests are bounded so that
 * unauthenticated clients cannot exhaust the service (slow clients, per-IP
 * and total connection limits, memory per connection, the log); HTTP
 * framing that could smuggle a request is refused. Real masters, the real
 * binary, raw sockets where a client misbehaves. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;


static void teardown(void)
{
    h_cluster_free(C);
}

TestSuite(limits, .init = h_client_setup, .fini = teardown, .timeout = 120);

/* ---- connections ---- */

/* Slow clients (a byte every 300 ms) are closed once their request is not
 * complete within --request-timeout-ms; normal traffic goes on meanwhile. */
Test(limits, slowloris_is_closed_and_others_served)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--request-timeout-ms", "1000", NULL);
    enum { N = 100 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = h_raw_connect(C, NULL);
        h_raw_send(fds[i], "POST /locks/slow HTTP/1.1\r\n");
    }
    uint64_t t0 = h_now_us();
    double worst = 0;
    for (int k = 0; k < 8; k++) {
        for (int i = 0; i < N; i++)
            if (fds[i] >= 0 && write(fds[i], "X", 1) != 1) {
                close(fds[i]);
                fds[i] = -1;
            }
        for (int j = 0; j < 5; j++) {
            h_resp a = h_http(C, "GET", "/locks/other", NULL, NULL);
            cr_assert_eq(a.status, 200);
            worst = a.seconds > worst ? a.seconds : worst;
            h_resp_free(&a);
        }
        usleep(300000);
    }
    int closed = 0;
    for (int i = 0; i < N; i++) {
        if (fds[i] < 0) {
            closed++;
            continue;
        }
        char buf[256];
        bool eof;
        h_raw_read_all(fds[i], buf, sizeof buf, 200, &eof);
        closed += eof;
        close(fds[i]);
    }
    fprintf(stderr, "slowloris: %d of %d closed within %.1f s; normal requests at worst %.1f ms\n",
            closed, N, (double)(h_now_us() - t0) / 1e6, worst * 1000);
    cr_assert_eq(closed, N, "only %d of %d slow connections were closed", closed, N);
    cr_assert_lt(worst, 0.5);
    cr_assert_geq(h_metric(C, "redlockd_request_timeouts_total"), N);
}

/* Per-IP limit: one address cannot take every slot; another still gets in.
 * 25 keep-alive connections from one address, each asking once: exactly 20
 * are served (and stay open), the other 5 are closed at once. */
Test(limits, per_ip_connection_limit)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--max-connections-per-ip", "20", NULL);
    usleep(300000);   /* the harness's own connections have closed */
    int fds[25], served = 0, refused = 0;
    char buf[512];
    bool eof;
    for (int i = 0; i < 25; i++) {
        fds[i] = h_raw_connect(C, "127.0.0.1");
        h_raw_send(fds[i], "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        h_raw_read_all(fds[i], buf, sizeof buf, 300, &eof);
        if (!strncmp(buf, "HTTP/1.1 200", 12) && !eof)
            served++;
        else if (buf[0] == '\0' && eof)
            refused++;
    }
    cr_assert_eq(served, 20, "%d connections from one address served (limit 20)", served);
    cr_assert_eq(refused, 5, "%d connections over the limit closed", refused);
    int other = h_raw_connect(C, "127.0.0.2");
    h_raw_send(other, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    h_raw_read_all(other, buf, sizeof buf, 1000, &eof);
    cr_assert(!strncmp(buf, "HTTP/1.1 200", 12), "another address is served: %s", buf);
    close(other);
    for (int i = 0; i < 25; i++)
        close(fds[i]);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* At the connection limit the service still answers on a connection it
 * has, refuses more, and its memory stays bounded (printed, not judged). */
Test(limits, connection_limit_holds, .timeout = 120)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--max-connections", "1000", "--max-connections-per-ip", "1000", NULL);
    long base = rss_kb(C->daemon);
    int first = h_raw_connect(C, NULL);
    static int fds[1000];
    for (int i = 0; i < 999; i++) {
        fds[i] = h_raw_connect(C, NULL);
        h_raw_send(fds[i], "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");   /* headers never finished */
    }
    usleep(500000);
    long full = rss_kb(C->daemon);
    int extra = h_raw_connect(C, NULL);
    h_raw_send(extra, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    char buf[512];
    bool eof;
    size_t n = h_raw_read_all(extra, buf, sizeof buf, 1000, &eof);
    cr_assert(n == 0, "a connection past the limit was served: %s", buf);
    close(extra);
    h_raw_send(first, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    n = h_raw_read_all(first, buf, sizeof buf, 1000, &eof);
    cr_assert(!strncmp(buf, "HTTP/1.1 200", 12), "a connection within the limit is served: %s", buf);
    for (int i = 0; i < 999; i++)
        close(fds[i]);
    close(first);
    usleep(600000);
    long after = rss_kb(C->daemon);
    fprintf(stderr, "RSS: %ld KiB idle, %ld KiB with 1000 connections (%.1f KiB each), %ld KiB after they closed\n",
            base, full, (double)(full - base) / 1000.0, after);
}

/* ---- framing ---- */

static void expect_400_and_close(const char *req, const char *smuggled)
{
    int fd = h_raw_connect(C, NULL);
    h_raw_send(fd, req);
    char buf[4096];
    bool eof;
    h_raw_read_all(fd, buf, sizeof buf, 1500, &eof);
    close(fd);
    cr_assert(!strncmp(buf, "HTTP/1.1 400", 12), "not a 400: %.80s", buf);
    cr_assert(eof, "the connection stayed open after an ambiguous message");
    const char *second = strstr(buf + 12, "HTTP/1.1 ");
    cr_assert_null(second, "a second answer followed: %s", buf);
    cr_assert_eq(h_keys_left(C, smuggled), 0, "the request behind it ran");
}

Test(limits, ambiguous_framing_is_refused_and_closed)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    expect_400_and_close("POST /locks/sm1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                         "POST /locks/smuggled1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
                         "smuggled1");
    cr_assert_eq(h_keys_left(C, "sm1"), 0);
    expect_400_and_close("POST /locks/sm2 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
                         "Content-Length: 62\r\n\r\n"
                         "POST /locks/smuggled2 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
                         "smuggled2");
    cr_assert_eq(h_keys_left(C, "sm2"), 0);
    /* A malformed length is refused and the connection closed, by
     * libmicrohttpd itself before redlockd sees the request (0.9.75 writes
     * its 400 header block twice). */
    int fd = h_raw_connect(C, NULL);
    h_raw_send(fd, "POST /locks/sm3 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n"
                 "POST /locks/smuggled3 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n");
    char buf[4096];
    bool eof;
    h_raw_read_all(fd, buf, sizeof buf, 1500, &eof);
    close(fd);
    cr_assert(!strncmp(buf, "HTTP/1.1 400", 12), "%.80s", buf);
    cr_assert(eof, "the connection stayed open after a malformed length");
    cr_assert_eq(h_keys_left(C, "smuggled3") + h_keys_left(C, "sm3"), 0);
    /* The same length twice is one length: served. */
    fd = h_raw_connect(C, NULL);
    h_raw_send(fd, "POST /locks/sm4 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n");
    h_raw_read_all(fd, buf, sizeof buf, 1000, &eof);
    close(fd);
    cr_assert(!strncmp(buf, "HTTP/1.1 201", 12), "%.80s", buf);
}

Test(limits, bearer_scheme_is_case_insensitive)
{
    C = h_cluster_start(3, NULL);
    char path[300];
    snprintf(path, sizeof path, "%s/token", C->dir);
    FILE *f = fopen(path, "w");
    fputs("s3cret-token\n", f);
    fclose(f);
    h_daemon_start(C, "--auth-token-file", path, NULL);
    h_resp a = h_http(C, "POST", "/locks/auth", NULL, "Authorization: bearer s3cret-token", NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    h_resp b = h_http(C, "GET", "/locks/auth", NULL, "Authorization: BEARER s3cret-token", NULL);
    cr_assert_eq(b.status, 200, "%s", b.body);
    h_resp c = h_http(C, "GET", "/locks/auth", NULL, "Authorization: Basic s3cret-token", NULL);
    cr_assert_eq(c.status, 401);
    h_resp_free(&a);
    h_resp_free(&b);
    h_resp_free(&c);
}

/* Clients that drop their connections mid-request cannot flood the log. */
Test(limits, dropped_connections_do_not_flood_the_log)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    for (int i = 0; i < 300; i++) {
        int fd = h_raw_connect(C, NULL);
        h_raw_send(fd, "POST /locks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"ttl");
        struct linger lg = {1, 0};   /* RST on close */
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
    }
    usleep(500000);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "grep -c ' http_error ' %s", C->log);
    FILE *p = popen(cmd, "r");
    int lines = 0;
    cr_assert_eq(fscanf(p, "%d", &lines), 1);
    pclose(p);
    cr_assert_leq(lines, 3, "%d log lines for 300 dropped connections", lines);
    h_resp ok = h_http(C, "GET", "/healthz", NULL, NULL);
    cr_assert_eq(ok.status, 200);
    h_resp_free(&ok);
}
