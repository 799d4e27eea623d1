/* Integration: protocol errors, auth, operations endpoints, prefix, flags. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void setup(void) { C = h_cluster_start(5, NULL); }
static void teardown(void) { h_cluster_free(C); }

TestSuite(protocol, .init = setup, .fini = teardown, .timeout = 60);

Test(protocol, paths_methods_and_bodies)
{
    h_daemon_start(C, "--max-body-bytes", "1024", NULL);
    const char *notfound[] = {"/ui/x", "/nope", "/healthz/x", "/"};
    for (size_t i = 0; i < sizeof notfound / sizeof notfound[0]; i++) {
        h_resp r = h_http(C, "GET", notfound[i], NULL, NULL);
        cr_assert_eq(r.status, 404, "%s -> %ld", notfound[i], r.status);
        cr_assert_str_eq(h_str(&r, "error"), "not_found");
        cr_assert_not_null(h_str(&r, "message"));
        h_resp_free(&r);
    }
    /* /locks/ (and /elections/, /semaphores/) serve the force release's
     * query form only */
    const char *collections[] = {"/locks/", "/elections/", "/semaphores/"};
    for (size_t i = 0; i < 3; i++) {
        h_resp r = h_http(C, "GET", collections[i], NULL, NULL);
        cr_assert_eq(r.status, 405, "GET %s -> %ld", collections[i], r.status);
        cr_assert_str_eq(r.allow, "DELETE");
        h_resp_free(&r);
    }
    h_resp r = h_http(C, "PUT", "/locks/x", NULL, NULL);
    cr_assert_eq(r.status, 405);
    cr_assert_str_eq(h_str(&r, "error"), "method_not_allowed");
    cr_assert_str_eq(r.allow, "GET, POST, PATCH, DELETE");
    h_resp_free(&r);
    r = h_http(C, "POST", "/healthz", NULL, NULL);
    cr_assert_eq(r.status, 405);
    cr_assert_str_eq(r.allow, "GET, HEAD");
    h_resp_free(&r);

    char big[2048];
    memset(big, ' ', sizeof big - 1);
    big[0] = '{';
    big[sizeof big - 2] = '}';
    big[sizeof big - 1] = '\0';
    r = h_http(C, "POST", "/locks/big", big, NULL);
    cr_assert_eq(r.status, 413);
    cr_assert_str_eq(h_str(&r, "error"), "too_large");
    h_resp_free(&r);
    /* chunked upload without Content-Length is cut off as well */
    r = h_http(C, "POST", "/locks/big", big, "Transfer-Encoding: chunked", NULL);
    cr_assert_eq(r.status, 413);
    h_resp_free(&r);

    r = h_http(C, "POST", "/locks/j", "{\"ttl_ms\":", NULL);
    cr_assert_eq(r.status, 400);
    cr_assert_str_eq(h_str(&r, "error"), "bad_request");
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/j", "{\"wait_ms\":\"10\"}", NULL);
    cr_assert_eq(r.status, 400);
    cr_assert(strstr(h_str(&r, "message"), "wait_ms"));
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/j", "{\"ttl_ms\":3600001}", NULL);
    cr_assert_eq(r.status, 400);
    cr_assert(strstr(h_str(&r, "message"), "ttl_ms"));
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/j", "{\"ttl_ms\":1000,\"unknown\":{\"a\":1}}", NULL);
    cr_assert_eq(r.status, 201, "unknown fields are ignored: %s", r.body);
    h_resp_free(&r);

    /* nothing of the refused requests reached the masters */
    redisReply *k = h_redis(C, 0, "KEYS lock:big*");
    cr_assert_eq(k->elements, 0);
    freeReplyObject(k);
}

Test(protocol, names_are_checked_after_decoding)
{
    h_daemon_start(C, NULL);
    char longname[260] = "/locks/";
    memset(longname + 7, 'a', 201);
    longname[208] = '\0';
    const char *bad[] = {"/locks/a%00b", "/locks/%C3", "/locks/a%0Ab", "/locks/a%1F", "/locks/a%2",
                         longname};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h_resp r = h_http(C, "POST", bad[i], NULL, NULL);
        cr_assert_eq(r.status, 400, "%s -> %ld %s", bad[i], r.status, r.body);
        cr_assert_str_eq(h_str(&r, "error"), "bad_name");
        h_resp_free(&r);
    }
    redisReply *k = h_redis(C, 0, "KEYS *");
    cr_assert_eq(k->elements, 1, "a bad name wrote something");
    cr_assert_str_eq(k->element[0]->str, "redlockd#marker", "only the cluster marker is there");
    freeReplyObject(k);
    h_resp r = h_http(C, "POST", "/locks/%41b", NULL, NULL);
    cr_assert_eq(r.status, 201);
    cr_assert_str_eq(h_str(&r, "name"), "Ab", "%41 is A");
    h_resp_free(&r);
    longname[207] = '\0';   /* exactly 200 */
    r = h_http(C, "POST", longname, NULL, NULL);
    cr_assert_eq(r.status, 201);
    h_resp_free(&r);
}

Test(protocol, key_prefix_default_and_empty)
{
    h_daemon_start(C, NULL);
    h_resp r = h_http(C, "POST", "/locks/res.1", NULL, NULL);
    cr_assert_eq(r.status, 201);
    cr_assert(h_wait_key(C, 2, "lock:res.1", 1000));
    redisReply *v = h_redis(C, 2, "GET lock:res.1");
    cr_assert_eq(v->type, REDIS_REPLY_STRING);
    cr_assert_str_eq(v->str, h_str(&r, "token"));
    freeReplyObject(v);
    h_resp_free(&r);
    cr_assert_eq(h_daemon_stop(C), 0);

    h_daemon_start(C, "--key-prefix", "", NULL);
    r = h_http(C, "POST", "/locks/res.2", NULL, NULL);
    cr_assert_eq(r.status, 201);
    for (int i = 0; i < 5; i++) {
        v = h_redis(C, i, "GET res.2");
        cr_assert_eq(v->type, REDIS_REPLY_STRING, "the bare name is the key");
        cr_assert_str_eq(v->str, h_str(&r, "token"));
        freeReplyObject(v);
    }
    h_resp_free(&r);
    /* A lock set by another Redlock client on the bare name excludes us. */
    for (int i = 0; i < 5; i++)
        freeReplyObject(h_redis(C, i, "SET other-client theirs PX 10000"));
    r = h_http(C, "POST", "/locks/other-client", NULL, NULL);
    cr_assert_eq(r.status, 409);
    h_resp_free(&r);
}

Test(protocol, auth_on)
{
    char path[300];
    snprintf(path, sizeof path, "%s/token", C->dir);
    FILE *f = fopen(path, "w");
    fputs("s3cret\n", f);
    fclose(f);
    h_daemon_start(C, "--auth-token-file", path, NULL);
    h_resp r = h_http(C, "POST", "/locks/a", NULL, NULL);
    cr_assert_eq(r.status, 401);
    cr_assert_str_eq(h_str(&r, "error"), "unauthorized");
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/a", NULL, "Authorization: Bearer wrong", NULL);
    cr_assert_eq(r.status, 401);
    h_resp_free(&r);
    r = h_http(C, "GET", "/locks/a", NULL, "Authorization: Basic s3cret", NULL);
    cr_assert_eq(r.status, 401);
    h_resp_free(&r);
    /* Dapr's header is for the Dapr routes; /locks takes the token as Bearer only. */
    r = h_http(C, "GET", "/locks/a", NULL, "dapr-api-token: s3cret", NULL);
    cr_assert_eq(r.status, 401);
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/a", NULL, "Authorization: Bearer s3cret", NULL);
    cr_assert_eq(r.status, 201);
    h_resp_free(&r);
    const char *open_paths[] = {"/healthz", "/readyz", "/metrics"};
    for (int i = 0; i < 3; i++) {
        r = h_http(C, "GET", open_paths[i], NULL, NULL);
        cr_assert_eq(r.status, 200, "%s", open_paths[i]);
        h_resp_free(&r);
    }
    /* the secret never reaches the log */
    cr_assert_eq(h_daemon_stop(C), 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "grep -q s3cret %s", C->log);
    cr_assert_neq(system(cmd), 0, "the auth token appears in the log");
}

Test(protocol, auth_off_by_default)
{
    h_daemon_start(C, NULL);
    h_resp r = h_http(C, "POST", "/locks/a", NULL, NULL);
    cr_assert_eq(r.status, 201);
    h_resp_free(&r);
}

Test(protocol, health_ready_and_metrics_move)
{
    h_daemon_start(C, NULL);
    h_resp r = h_http(C, "GET", "/healthz", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(h_str(&r, "status"), "ok");
    h_resp_free(&r);
    r = h_http(C, "HEAD", "/healthz", NULL, NULL);
    cr_assert_eq(r.status, 200);
    h_resp_free(&r);
    r = h_http(C, "GET", "/readyz", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cJSON *masters = cJSON_GetObjectItem(r.json, "masters");
    cr_assert_eq(cJSON_GetArraySize(masters), 5);
    cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetArrayItem(masters, 0), "addr"));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(masters, 0), "up")));
    h_resp_free(&r);

    h_resp m0 = h_http(C, "GET", "/metrics", NULL, NULL);
    cr_assert_eq(m0.status, 200);
    cr_assert(strstr(m0.content_type, "text/plain"));
    cr_assert(strstr(m0.body, "\nredlockd_grants_total "), "the grants family is exposed");
    cr_assert_eq(h_metric(C, "redlockd_grants_total"), 0);
    h_resp a = h_http(C, "POST", "/locks/m", NULL, NULL);
    h_resp b = h_http(C, "POST", "/locks/m", NULL, NULL);
    h_resp m1 = h_http(C, "GET", "/metrics", NULL, NULL);
    cr_assert_eq(h_metric(C, "redlockd_grants_total"), 1);
    cr_assert_eq(h_metric(C, "redlockd_conflicts_total"), 1);
    cr_assert_eq(h_metric(C, "redlockd_http_requests_total{route=\"acquire\",status=\"201\"}"), 1);
    cr_assert_eq(h_metric(C, "redlockd_http_requests_total{route=\"acquire\",status=\"409\"}"), 1);
    cr_assert_eq(h_metric(C, "redlockd_request_duration_seconds_count{operation=\"acquire\"}"), 2);
    cr_assert(strstr(m1.body, "redlockd_master_up{master=\"127.0.0.1:"));
    cr_assert_null(strstr(m1.body, h_str(&a, "token")), "metrics must not carry tokens");
    cr_assert_null(strstr(m1.body, "\"m\""), "metrics must not carry lock names");
    h_resp_free(&m0);
    h_resp_free(&m1);
    h_resp_free(&a);
    h_resp_free(&b);
}

struct waiter {
    h_cluster *c;
    long status;
    uint64_t done_us;
};

static void *wait_for_held(void *arg)
{
    struct waiter *w = arg;
    h_resp r = h_http(w->c, "POST", "/locks/hot", "{\"wait_ms\":3000}", NULL);
    w->status = r.status;
    w->done_us = h_now_us();
    h_resp_free(&r);
    return NULL;
}

Test(protocol, fifty_waiters_do_not_hold_workers, .timeout = 60)
{
    /* A long master timeout: on a machine loaded by other suites a 503 must
     * not pass for the answer this test is about. */
    h_daemon_start(C, "--threads", "2", "--master-timeout-ms", "1000", NULL);
    h_resp a = h_http(C, "POST", "/locks/hot", "{\"ttl_ms\":20000}", NULL);
    cr_assert_eq(a.status, 201);
    h_resp_free(&a);
    static pthread_t t[50];   /* static: outlives an assertion that ends the test early */
    static struct waiter w[50];
    for (int i = 0; i < 50; i++) {
        w[i].c = C;
        pthread_create(&t[i], NULL, wait_for_held, &w[i]);
    }
    usleep(300000);   /* all 50 are waiting now */
    /* Other names are served at once although 50 requests wait on 2 workers. */
    uint64_t others_done = 0;
    for (int i = 0; i < 20; i++) {
        char path[64];
        snprintf(path, sizeof path, "/locks/other-%d", i);
        h_resp r = h_http(C, "POST", path, NULL, NULL);
        cr_assert_eq(r.status, 201);
        h_resp_free(&r);
    }
    others_done = h_now_us();
    for (int i = 0; i < 50; i++)   /* all, before any assertion ends the test */
        pthread_join(t[i], NULL);
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(w[i].status, 409, "waiter %d got %ld; the holder keeps the lock for 20 s", i,
                     w[i].status);
        cr_assert_gt(w[i].done_us, others_done,
                     "waiter %d answered before the 20 other acquires finished", i);
    }
}

/* One keep-alive client of many_connections_all_answered: a GET in flight,
 * or none. */
struct kaclient {
    int fd;
    char in[2048];
    size_t inlen;
    uint64_t sent_us;          /* 0: nothing in flight */
    long answers;
};

static void ka_send(struct kaclient *k, int i)
{
    char req[128];
    int len = snprintf(req, sizeof req, "GET /locks/many-%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", i);
    cr_assert_eq(write(k->fd, req, (size_t)len), len, "client %d: write: %s", i, strerror(errno));
    k->inlen = 0;
    k->sent_us = h_now_us();
}

/* A whole answer is in k->in: checks it and returns true. */
static bool ka_answered(struct kaclient *k, int i)
{
    k->in[k->inlen] = '\0';
    char *end = strstr(k->in, "\r\n\r\n");
    char *cl = strcasestr(k->in, "\r\nContent-Length:");
    if (!end || !cl || cl > end || k->inlen < (size_t)(end + 4 - k->in) + strtoul(cl + 17, NULL, 10))
        return false;
    cr_assert(!strncmp(k->in, "HTTP/1.1 200", 12), "client %d: %.40s", i, k->in);
    k->answers++;
    k->sent_us = 0;
    return true;
}

/* 128 keep-alive connections on one HTTP thread, each sending its next
 * request as soon as it has the answer, so that they are ready in lockstep.
 * libmicrohttpd 0.9.75's epoll loop takes at most 128 events per epoll_wait
 * and, when it got exactly 128, calls epoll_wait again, blocking, before it
 * serves any of them: with every client waiting for an answer nothing wakes
 * it, and all hang (the benchmark hung so at 256 clients). Every request
 * must be answered, and soon. */
Test(protocol, many_connections_all_answered, .timeout = 60)
{
    h_daemon_start(C, "--threads", "1", "--master-timeout-ms", "1000", NULL);
    enum { N = 128 };
    static struct kaclient k[N];
    struct pollfd pfd[N];
    for (int i = 0; i < N; i++) {
        k[i] = (struct kaclient){.fd = socket(AF_INET, SOCK_STREAM, 0)};
        cr_assert_geq(k[i].fd, 0);
        int one = 1;
        setsockopt(k[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)C->http_port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(k[i].fd, (struct sockaddr *)&a, sizeof a), 0, "connect %d: %s", i,
                     strerror(errno));
        pfd[i] = (struct pollfd){.fd = k[i].fd, .events = POLLIN};
    }
    /* All send at once, again and again, for 3 s; then every request still in
     * flight gets 3 s to be answered. */
    uint64_t t0 = h_now_us(), stop = t0 + 3000000, give_up = stop + 3000000;
    for (int i = 0; i < N; i++)
        ka_send(&k[i], i);
    uint64_t worst_us = 0;
    int in_flight = N;
    while (in_flight > 0 && h_now_us() < give_up) {
        int rc = poll(pfd, N, 100);
        cr_assert_geq(rc, 0);
        for (int i = 0; rc > 0 && i < N; i++) {
            if (!pfd[i].revents)
                continue;
            ssize_t r = read(k[i].fd, k[i].in + k[i].inlen, sizeof k[i].in - 1 - k[i].inlen);
            cr_assert_gt(r, 0, "client %d: connection closed by redlockd", i);
            k[i].inlen += (size_t)r;
            uint64_t sent = k[i].sent_us;
            if (!ka_answered(&k[i], i))
                continue;
            uint64_t now = h_now_us();
            if (now - sent > worst_us)
                worst_us = now - sent;
            if (now < stop)
                ka_send(&k[i], i);
            else
                in_flight--;
        }
    }
    long total = 0, unanswered = 0;
    for (int i = 0; i < N; i++) {
        total += k[i].answers;
        unanswered += k[i].sent_us != 0;
        close(k[i].fd);
    }
    cr_assert_eq(unanswered, 0, "%ld of %d connections got no answer within 3 s (%ld answers before)",
                 unanswered, N, total);
    cr_assert_gt(total, 3 * N, "only %ld answers in 3 s", total);
    cr_assert_lt(worst_us, 2000000, "an answer took %.3f s", (double)worst_us / 1e6);
}

Test(protocol, sigterm_exits_zero)
{
    h_daemon_start(C, NULL);
    h_resp a = h_http(C, "POST", "/locks/x", NULL, NULL);
    cr_assert_eq(a.status, 201);
    h_resp_free(&a);
    cr_assert_eq(h_daemon_stop(C), 0);
}

static int run_cmd(const char *args, char *out, size_t outlen)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", getenv("REDLOCKD_BIN"), args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WEXITSTATUS(st);
}

Test(protocol, bad_flags_exit_2_with_one_line)
{
    char out[32768];   /* --help is over 8 KiB */
    const char *bad[] = {"--nope", "--listen nowhere", "--masters ''", "--default-ttl-ms -1",
                         "--drift-factor x", "--log-level shout"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(run_cmd(bad[i], out, sizeof out), 2, "%s", bad[i]);
        char *nl = strchr(out, '\n');
        cr_assert(nl && nl[1] == '\0', "more than one line for %s: %s", bad[i], out);
    }
    cr_assert_eq(run_cmd("--help", out, sizeof out), 0);
    cr_assert(strstr(out, "--master-timeout-ms") && strstr(out, "REDLOCKD_KEY_PREFIX"));
    cr_assert_eq(run_cmd("--version", out, sizeof out), 0);
    cr_assert(strstr(out, "redlockd "));
}

/* A request's head is read into the connection's buffer
 * (--connection-buffer-bytes, 3,072 by default, which a held stream keeps
 * while it is open): one that fits is served, one that does not is
 * answered 431 by the HTTP library and reaches nothing. */
Test(protocol, request_heads_fit_the_connection_buffer)
{
    h_daemon_start(C, NULL);
    static char hdr[8192];
    /* about 2.2 KiB of head: served, a held stream too */
    int n = snprintf(hdr, sizeof hdr, "X-Filler: ");
    memset(hdr + n, 'a', 2000);
    hdr[n + 2000] = '\0';
    h_resp r = h_http(C, "POST", "/locks/head-fits", "{\"ttl_ms\":5000}", hdr, NULL);
    cr_assert_eq(r.status, 201, "a 2 KiB header: %ld %s", r.status, r.body);
    h_resp_free(&r);
    /* about 3.2 KiB: over the default buffer */
    memset(hdr + n, 'b', 3000);
    hdr[n + 3000] = '\0';
    r = h_http(C, "POST", "/locks/head-too-long", "{\"ttl_ms\":5000}", hdr, NULL);
    cr_assert_eq(r.status, 431, "a 3 KiB header: %ld", r.status);
    h_resp_free(&r);
    redisReply *k = h_redis(C, 0, "KEYS lock:head-too-long*");
    cr_assert_eq(k->elements, 0, "a refused head wrote nothing");
    freeReplyObject(k);
    h_daemon_stop(C);
    /* a larger buffer reads it */
    h_daemon_start(C, "--connection-buffer-bytes", "8192", NULL);
    r = h_http(C, "POST", "/locks/head-too-long", "{\"ttl_ms\":5000}", hdr, NULL);
    cr_assert_eq(r.status, 201, "a 3 KiB header with an 8 KiB buffer: %ld %s", r.status, r.body);
    h_resp_free(&r);
}
