/* Integration: requests that end cleanly. A grant reaches its caller or is
 * released at once when the client left, and half-closed clients get their
 * answers. (Shutdown: test_shutdown.c; waiters: test_waiters.c; limits on
 * connections and requests: test_limits.c.) Real masters, the real binary,
 * raw sockets where a client misbehaves. */
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

TestSuite(lifecycle, .init = h_client_setup, .fini = teardown, .timeout = 120);

/* A client whose connection breaks while its acquire waits is never
 * granted: it stops waiting within a second. One that only closed (a FIN,
 * which a half-close sends too) may be granted, but the answer meets a
 * reset and the grant is released at once: when the holder expires, the
 * name is free either way. */
/* No lock key of the name (arg) is left on any master. */
static bool no_keys_left(void *arg)
{
    return h_keys_left(C, arg) == 0;
}

Test(lifecycle, departed_waiter_is_not_granted)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_resp held = h_http(C, "POST", "/locks/dz", "{\"ttl_ms\":2000}", NULL);
    cr_assert_eq(held.status, 201);
    int fd = h_raw_acquire(C, "dz", "{\"wait_ms\":5000}");
    int fd2 = h_raw_acquire(C, "dz", "{\"wait_ms\":5000}");
    usleep(200000);
    h_raw_reset(fd);
    close(fd2);
    uint64_t closed = h_now_us();
    while (h_metric(C, "redlockd_cancelled_total") < 1 && h_now_us() - closed < 1500000)
        usleep(20000);
    double ms = (double)(h_now_us() - closed) / 1000.0;
    cr_assert_lt(ms, 1000, "the departed waiter kept waiting for %.0f ms", ms);
    usleep(2500000);   /* the holder has expired: nobody may hold dz now */
    h_resp g = h_http(C, "GET", "/locks/dz", NULL, NULL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g.json, "held")), "granted to a client that left: %s", g.body);
    cr_assert_eq(h_keys_left(C, "dz"), 0);
    h_resp_free(&g);
    h_resp_free(&held);
}

/* Sends a raw request (method path, optional extra header line and body),
 * half-closes (shutdown(SHUT_WR), as `nc -N`, Go's CloseWrite and some
 * proxies do) and returns the socket. */
static int raw_half_closed(const char *method, const char *path, const char *header, const char *body)
{
    int fd = h_raw_connect(C, NULL);
    char req[1024];
    snprintf(req, sizeof req,
             "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s%s"
             "Content-Length: %zu\r\n\r\n%s", method, path, header ? header : "", header ? "\r\n" : "",
             strlen(body), body);
    h_raw_send(fd, req);
    cr_assert_eq(shutdown(fd, SHUT_WR), 0);
    return fd;
}

/* The token of a raw 201 answer, into tok. */
static void raw_token(const char *answer, char *tok, size_t len)
{
    const char *t = strstr(answer, "\"token\":\"");
    cr_assert(t, "no token in: %s", answer);
    t += 9;
    size_t n = strcspn(t, "\"");
    cr_assert_lt(n, len);
    memcpy(tok, t, n);
    tok[n] = '\0';
}

/* A half-closed client has only said it sends no more: HTTP lets it read
 * the answer. Acquire (at once and after waiting), extend, release and a
 * held stream all answer it in full, and no grant counts as abandoned. */
Test(lifecycle, half_closed_clients_get_their_answers)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    char buf[8192], tok[300], hdr[400];
    bool closed;
    for (int round = 0; round < 10; round++) {
        char name[32], path[64];
        snprintf(name, sizeof name, "hc-%d", round);
        snprintf(path, sizeof path, "/locks/%s", name);
        int fd = raw_half_closed("POST", path, NULL, "{\"ttl_ms\":30000}");
        h_raw_read_all(fd, buf, sizeof buf, 2000, &closed);
        close(fd);
        cr_assert(!strncmp(buf, "HTTP/1.1 201", 12), "round %d, acquire: '%s'", round, buf);
        raw_token(buf, tok, sizeof tok);
        cr_assert(h_held(C, name), "round %d", round);
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", tok);
        fd = raw_half_closed("PATCH", path, hdr, "{\"ttl_ms\":20000}");
        h_raw_read_all(fd, buf, sizeof buf, 2000, &closed);
        close(fd);
        cr_assert(!strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "\"ttl_ms\":20000"),
                  "round %d, extend: '%s'", round, buf);
        fd = raw_half_closed("DELETE", path, hdr, "");
        h_raw_read_all(fd, buf, sizeof buf, 2000, &closed);
        close(fd);
        cr_assert(!strncmp(buf, "HTTP/1.1 204", 12), "round %d, release: '%s'", round, buf);
        cr_assert_not(h_held(C, name), "round %d", round);
    }

    /* A waiter, granted when the holder releases. libmicrohttpd 0.9.75 may
     * read the FIN when it resumes a connection that waited, and then
     * closes it unanswered (docs/api.md): then its grant must be released
     * at once, never left held. */
    h_resp held = h_http(C, "POST", "/locks/hcw", "{\"ttl_ms\":30000}", NULL);
    cr_assert_eq(held.status, 201);
    int fd = raw_half_closed("POST", "/locks/hcw", NULL, "{\"wait_ms\":5000,\"ttl_ms\":30000}");
    usleep(300000);
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&held, "token"));
    h_resp d = h_http(C, "DELETE", "/locks/hcw", NULL, hdr, NULL);
    cr_assert_eq(d.status, 204);
    uint64_t t_del = h_now_us();
    h_raw_read_all(fd, buf, sizeof buf, 5000, &closed);
    close(fd);
    bool dropped = buf[0] == '\0' && closed;
    cr_assert(dropped || !strncmp(buf, "HTTP/1.1 201", 12), "waiter, %.0f ms after the release (%s): '%s'",
              (h_now_us() - t_del) / 1000.0, closed ? "closed" : "open", buf);
    if (dropped) {
        uint64_t t0 = h_now_us();
        while (h_held(C, "hcw") && h_now_us() - t0 < 1000000)
            usleep(10000);
        cr_assert_not(h_held(C, "hcw"), "a waiter closed unanswered left its grant held");
        fprintf(stderr, "half-closed waiter: closed unanswered by libmicrohttpd, its grant released\n");
    } else {
        raw_token(buf, tok, sizeof tok);
        cr_assert(h_held(C, "hcw"), "the waiter's grant was taken back");
    }
    h_resp_free(&d);
    h_resp_free(&held);

    /* a held stream: renewed while half-closed, released when closed */
    fd = raw_half_closed("POST", "/locks/hch", NULL, "{\"hold\":true,\"ttl_ms\":1500}");
    h_raw_read_all(fd, buf, sizeof buf, 1200, &closed);
    cr_assert_not(closed, "the held stream ended: '%s'", buf);
    cr_assert(strstr(buf, "HTTP/1.1 201") && strstr(buf, "\"event\":\"acquired\"") &&
              strstr(buf, "\"event\":\"renewed\""), "held stream: '%s'", buf);
    cr_assert(h_held(C, "hch"));
    close(fd);
    uint64_t t0 = h_now_us();
    while (h_held(C, "hch") && h_now_us() - t0 < 1500000)
        usleep(20000);
    cr_assert_not(h_held(C, "hch"), "held %.0f ms after its client closed", (h_now_us() - t0) / 1000.0);
    cr_assert_eq(h_metric(C, "redlockd_abandoned_grants_total"), dropped ? 1 : 0);
    cr_assert_eq(h_metric(C, "redlockd_cancelled_total"), 0);
}

/* A grant whose answer cannot be delivered (the client closed just before
 * the lock came free) is released on every master at once. */
Test(lifecycle, undeliverable_grant_is_released)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    for (int round = 0; round < 20; round++) {
        char name[32];
        snprintf(name, sizeof name, "ud-%d", round);
        char path[64];
        snprintf(path, sizeof path, "/locks/%s", name);
        h_resp held = h_http(C, "POST", path, "{\"ttl_ms\":30000}", NULL);
        cr_assert_eq(held.status, 201);
        int fd = h_raw_acquire(C, name, "{\"wait_ms\":5000,\"ttl_ms\":30000}");
        usleep(50000);
        close(fd);
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&held, "token"));
        h_resp r = h_http(C, "DELETE", path, NULL, hdr, NULL);   /* the waiter is granted now */
        cr_assert_eq(r.status, 204);
        h_resp_free(&r);
        h_resp_free(&held);
        cr_assert(h_eventually(no_keys_left, name, 1000), "round %d: a lock nobody knows the token of is held",
                  round);
    }
    cr_assert_geq(h_metric(C, "redlockd_cancelled_total") + h_metric(C, "redlockd_abandoned_grants_total"), 20);
}
