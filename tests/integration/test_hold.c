/* Integration: held streams ("hold": true) and owners, against real masters
 * that the tests pause, flush and take over, read as a client reads them:
 * event by event over a raw socket, timed on the test's own clock. */
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

static h_cluster *C;

static void teardown(void)
{
    h_cluster_free(C);
    C = NULL;
}

TestSuite(hold, .fini = teardown, .timeout = 120);

static const char *ev_str(const cJSON *ev, const char *f)
{
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(ev, f));
    return v ? v : "";
}

static long long ev_int(const cJSON *ev, const char *f)
{
    const cJSON *v = cJSON_GetObjectItem(ev, f);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
}

/* Opens a held stream of name and reads its "acquired" event. */
static h_stream *hold_open(const char *name, const char *body, cJSON **acquired, uint64_t *at_us)
{
    char path[256];
    snprintf(path, sizeof path, "/locks/%s", name);
    h_stream *s = h_stream_open(C, path, body, 5000);
    cr_assert(s, "no answer to the held acquire");
    cr_assert_eq(s->status, 201, "held acquire: %ld %s", s->status, s->body ? s->body : "");
    cr_assert_str_eq(s->content_type, "application/x-ndjson");
    cr_assert(s->chunked, "a held stream is chunked");
    cr_assert_eq(h_stream_event(s, 3000, acquired, at_us), 1, "no acquired event");
    cr_assert_str_eq(ev_str(*acquired, "event"), "acquired");
    cr_assert_str_eq(ev_str(*acquired, "name"), name);
    cr_assert_gt(ev_int(*acquired, "validity_ms"), 0);
    cr_assert_gt(ev_int(*acquired, "fence"), 0);
    return s;
}

static long post_status(const char *name, const char *body)
{
    char path[256];
    snprintf(path, sizeof path, "/locks/%s", name);
    h_resp r = h_http(C, "POST", path, body, NULL);
    long st = r.status;
    h_resp_free(&r);
    return st;
}

/* The stream renews across at least five ttls; meanwhile the name stays
 * taken, and every event's validity is positive and never runs out before
 * the next event arrives. */
Test(hold, renews_across_five_ttls)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open("hr", "{\"hold\":true,\"ttl_ms\":1000}", &ev, &t);
    cr_assert_eq(ev_int(ev, "ttl_ms"), 1000);
    uint64_t end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
    uint64_t until = t + 5500000;
    int renewed = 0;
    cJSON_Delete(ev);
    while (h_now_us() < until) {
        int r = h_stream_event(s, 2000, &ev, &t);
        cr_assert_eq(r, 1, "the stream stopped after %d renewals", renewed);
        cr_assert_str_eq(ev_str(ev, "event"), "renewed", "%s", cJSON_PrintUnformatted(ev));
        cr_assert_lt(t, end_of_validity, "a renewal came after the validity last announced");
        cr_assert_gt(ev_int(ev, "validity_ms"), 0);
        end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
        cJSON_Delete(ev);
        if (++renewed % 4 == 0)
            cr_assert_eq(post_status("hr", NULL), 409, "another client took a held lock");
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
        h_stream *s = hold_open("hc", "{\"hold\":true,\"ttl_ms\":30000}", &ev, &t);
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
    h_stream *s = hold_open("hl", "{\"hold\":true,\"ttl_ms\":3000}", &ev, &t);
    uint64_t end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
    cJSON_Delete(ev);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    for (;;) {
        int r = h_stream_event(s, 5000, &ev, &t);
        cr_assert_eq(r, 1, "no lost event");
        if (!strcmp(ev_str(ev, "event"), "renewed")) {
            end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
            cJSON_Delete(ev);
            continue;
        }
        break;
    }
    cr_assert_str_eq(ev_str(ev, "event"), "lost");
    cr_assert_str_eq(ev_str(ev, "reason"), "no_quorum");
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

/* An iptables rule that drops every packet 127.0.0.1:port sends over
 * loopback: the client of that connection falls silent to the daemon while
 * it still reads what the daemon sends (a one-way partition). A guard
 * process removes the rule when drop_end runs or when the test process
 * dies, however it dies. */
typedef struct drop_rule {
    pid_t guard;
    int pipe_w;   /* the guard removes the rule when this closes */
} drop_rule;

static int drop_rule_cmd(const char *op, int port)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "iptables -w %s INPUT -i lo -p tcp --sport %d -j DROP 2>/dev/null", op,
             port);
    return system(cmd);
}

static drop_rule drop_start(int port)
{
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t g = fork();
    cr_assert_geq(g, 0);
    if (g == 0) {
        for (int fd = 3; fd < 1024; fd++)   /* keep no connection of the test open */
            if (fd != p[0])
                close(fd);
        char c;
        while (read(p[0], &c, 1) > 0)
            ;
        while (drop_rule_cmd("-D", port) == 0)
            ;
        _exit(0);
    }
    close(p[0]);
    drop_rule d = {g, p[1]};
    if (drop_rule_cmd("-I", port) != 0) {
        close(d.pipe_w);
        waitpid(d.guard, NULL, 0);
        cr_assert_fail("iptables could not add a rule (run as root, with iptables installed)");
    }
    return d;
}

static void drop_end(drop_rule *d)
{
    close(d->pipe_w);
    waitpid(d->guard, NULL, 0);
}

/* A client whose packets stop reaching redlockd (its pod killed behind a
 * partition) does not keep the lock much past one ttl: GET shows it free
 * within a ttl and a third (the rule goes in right after a renewal, the
 * worst moment) plus slack, and another client takes it. Only the client's
 * own packets are dropped, so it still reads the stream: the lock stays
 * its own until the validity it read runs out, and "lost" reaches it
 * before that. Prints how long the lock outlived its silent client. */
Test(hold, a_silent_client_loses_the_lock_within_a_ttl_and_a_third)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open("hq", "{\"hold\":true,\"ttl_ms\":3000}", &ev, &t);
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no renewal");
    cr_assert_str_eq(ev_str(ev, "event"), "renewed");
    uint64_t end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
    cJSON_Delete(ev);
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    cr_assert_eq(getsockname(s->fd, (struct sockaddr *)&me, &len), 0);
    drop_rule d = drop_start(ntohs(me.sin_port));
    uint64_t silent = h_now_us(), freed = 0, last_held_asked = silent, lost_at = 0;
    bool ended = false;
    while (!freed && h_now_us() - silent < 20000000) {
        int r = ended ? (usleep(50000), 0) : h_stream_event(s, 50, &ev, &t);
        if (r < 0)
            ended = true;
        if (r == 1) {
            if (!strcmp(ev_str(ev, "event"), "renewed"))
                end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
            else if (!strcmp(ev_str(ev, "event"), "lost") && !lost_at)
                lost_at = t;
            cJSON_Delete(ev);
        }
        uint64_t asked = h_now_us();
        h_resp g = h_http(C, "GET", "/locks/hq", NULL, NULL);
        if (g.status == 200 && cJSON_IsFalse(cJSON_GetObjectItem(g.json, "held")))
            freed = h_now_us();
        else
            last_held_asked = asked;
        h_resp_free(&g);
    }
    drop_end(&d);
    cr_assert(freed, "the lock was still held %.1f s after its client fell silent",
              (double)(h_now_us() - silent) / 1e6);
    double outlived_ms = (double)(freed - silent) / 1000.0;
    fprintf(stderr, "hold: the lock outlived its silent client by %.0f ms (ttl 3000 ms)\n", outlived_ms);
    cr_assert_leq(outlived_ms, 3000.0 + 1000.0 + 500.0, "the lock outlived its silent client by %.0f ms",
                  outlived_ms);
    /* The lock was seen held at last_held_asked or later, so it was freed
     * after that. */
    cr_assert_geq(last_held_asked, end_of_validity,
                  "freed %.0f ms before the validity its client read ran out",
                  (double)(end_of_validity - last_held_asked) / 1000.0);
    /* "lost" itself may never reach it: the kernel sends nothing new
     * while the renewal before it waits for an acknowledgement. */
    cr_assert(!lost_at || lost_at < end_of_validity, "lost came after the validity announced ran out");
    cr_assert_eq(post_status("hq", NULL), 201, "another client could not take the freed lock");
    h_stream_close(s);
}

/* A TCP proxy in front of the daemon for one connection: each chunk the
 * daemon sends reaches the client delay_ms late (as after a retransmission);
 * what the client sends passes at once. When a "lost" event passes, it
 * resumes masters 0 to 2 at once (so that the lock can be freed while the
 * event is still on its way). */
typedef struct delay_proxy {
    int listen_fd, port, target_port, delay_ms;
    pthread_t thread;
    atomic_bool stop;
    _Atomic uint64_t lost_seen_us;   /* when "lost" came from the daemon */
} delay_proxy;

typedef struct delayed_chunk {
    uint64_t due_us;
    size_t len;
    char data[4096];
} delayed_chunk;

static void *proxy_main(void *arg)
{
    delay_proxy *p = arg;
    int cfd = -1;
    while (cfd < 0 && !atomic_load(&p->stop)) {
        struct pollfd a = {p->listen_fd, POLLIN, 0};
        if (poll(&a, 1, 50) > 0)
            cfd = accept(p->listen_fd, NULL, NULL);
    }
    if (cfd < 0)
        return NULL;
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->target_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(sfd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(cfd);
        close(sfd);
        return NULL;
    }
    enum { QMAX = 64 };
    static delayed_chunk q[QMAX];
    size_t head = 0, tail = 0;
    bool server_done = false;
    while (!atomic_load(&p->stop)) {
        uint64_t now = h_now_us();
        while (head != tail && q[head % QMAX].due_us <= now) {
            delayed_chunk *c = &q[head % QMAX];
            if (write(cfd, c->data, c->len) != (ssize_t)c->len)
                goto out;
            head++;
        }
        if (server_done && head == tail)
            break;
        struct pollfd f[2] = {{cfd, POLLIN, 0}, {sfd, server_done || tail - head == QMAX ? 0 : POLLIN, 0}};
        if (poll(f, 2, head != tail ? 1 : 20) <= 0)
            continue;
        if (f[0].revents) {
            char b[4096];
            ssize_t n = read(cfd, b, sizeof b);
            if (n <= 0 || write(sfd, b, (size_t)n) != n)
                break;
        }
        if (f[1].revents) {
            delayed_chunk *c = &q[tail % QMAX];
            ssize_t n = read(sfd, c->data, sizeof c->data);
            if (n <= 0) {
                server_done = true;
                continue;
            }
            c->len = (size_t)n;
            c->due_us = h_now_us() + (uint64_t)p->delay_ms * 1000;
            if (memmem(c->data, c->len, "\"lost\"", 6) && !atomic_load(&p->lost_seen_us)) {
                for (int i = 0; i < 3; i++)
                    h_master_resume(C, i);
                atomic_store(&p->lost_seen_us, h_now_us());
            }
            tail++;
        }
    }
out:
    close(cfd);
    close(sfd);
    return NULL;
}

static delay_proxy *proxy_start(int target_port, int delay_ms)
{
    delay_proxy *p = calloc(1, sizeof *p);
    p->target_port = target_port;
    p->delay_ms = delay_ms;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    cr_assert_eq(bind(p->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(p->listen_fd, 4), 0);
    cr_assert_eq(getsockname(p->listen_fd, (struct sockaddr *)&a, &len), 0);
    p->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&p->thread, NULL, proxy_main, p), 0);
    return p;
}

static void proxy_free(delay_proxy *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    free(p);
}

/* A reader whose events arrive 300 ms late (a retransmission) relies on
 * each event's validity from when it read it. Extensions fail (three of
 * five masters paused after a renewal), the masters come back while "lost"
 * is on its way, and a waiting client takes the name: it must be granted
 * no sooner than the end of the validity the stream's client last read. */
Test(hold, a_delayed_reader_never_overlaps_the_next_holder)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    delay_proxy *p = proxy_start(C->http_port, 300);
    h_stream *s = h_stream_open_at(p->port, "/locks/hv", "{\"hold\":true,\"ttl_ms\":3000}", 5000);
    cr_assert(s && s->status == 201, "held acquire through the proxy");
    cJSON *ev;
    uint64_t t;
    cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no acquired event");
    cr_assert_str_eq(ev_str(ev, "event"), "acquired");
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no renewal");
    cr_assert_str_eq(ev_str(ev, "event"), "renewed");
    uint64_t end_of_validity = t + (uint64_t)ev_int(ev, "validity_ms") * 1000;
    cJSON_Delete(ev);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    uint64_t until = h_now_us() + 5000000;
    while (!atomic_load(&p->lost_seen_us) && h_now_us() < until)
        usleep(1000);
    if (!atomic_load(&p->lost_seen_us))
        for (int i = 0; i < 3; i++)
            h_master_resume(C, i);
    cr_assert(atomic_load(&p->lost_seen_us), "no lost event left the daemon");
    /* The waiter asks again after a 503 (the daemon reconnects to the
     * masters that were paused), as a client would. */
    h_resp w;
    uint64_t answered;
    for (;;) {
        w = h_http(C, "POST", "/locks/hv", "{\"ttl_ms\":3000,\"wait_ms\":5000}", NULL);
        answered = h_now_us();
        if (w.status != 503 || answered > until)
            break;
        h_resp_free(&w);
        usleep(5000);
    }
    cr_assert_eq(w.status, 201, "the waiter: %ld %s", w.status, w.body);
    h_resp_free(&w);
    /* The grant came before its answer; 20 ms covers the answer's way. */
    double margin_ms = ((double)answered - 20000.0 - (double)end_of_validity) / 1000.0;
    fprintf(stderr, "hold: the next holder came %.0f ms after the delayed reader's validity ended\n",
            margin_ms);
    cr_assert_geq(margin_ms, 0.0,
                  "the next holder was granted %.0f ms before the validity the stream's client read "
                  "(300 ms late) ran out", -margin_ms);
    int r = h_stream_event(s, 3000, &ev, &t);
    cr_assert_eq(r, 1, "no lost event reached the client");
    cr_assert_str_eq(ev_str(ev, "event"), "lost");
    cJSON_Delete(ev);
    h_stream_close(s);
    proxy_free(p);
}

/* Another holder took the name (the masters were flushed and the key set by
 * another client): the next renewal ends the stream with held_by_other. */
Test(hold, taken_over_ends_with_held_by_other)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open("ho", "{\"hold\":true,\"ttl_ms\":1500}", &ev, &t);
    cJSON_Delete(ev);
    for (int i = 0; i < 3; i++) {
        redisReply *r = h_redis(C, i, "SET lock:ho someone-else PX 60000");
        freeReplyObject(r);
    }
    do {
        cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no lost event");
        if (strcmp(ev_str(ev, "event"), "renewed"))
            break;
        cJSON_Delete(ev);
    } while (1);
    cr_assert_str_eq(ev_str(ev, "event"), "lost");
    cr_assert_str_eq(ev_str(ev, "reason"), "held_by_other");
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
    h_stream *s = hold_open("hd", "{\"hold\":true,\"ttl_ms\":5000}", &ev, &t);
    char hdr[128];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", ev_str(ev, "token"));
    cJSON_Delete(ev);
    h_resp d = h_http(C, "DELETE", "/locks/hd", NULL, hdr, NULL);
    cr_assert_eq(d.status, 204, "%s", d.body);
    h_resp_free(&d);
    cr_assert_eq(h_stream_event(s, 2000, &ev, &t), 1);
    cr_assert_str_eq(ev_str(ev, "event"), "released");
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 2000, &ev, &t), -1, "the stream ends after released");
    cr_assert_eq(post_status("hd", NULL), 201);
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
        s[i] = hold_open(name, "{\"hold\":true,\"ttl_ms\":30000}", &ev, &t);
        cJSON_Delete(ev);
    }
    cr_assert_eq(h_daemon_stop(C), 0);
    for (int i = 0; i < 3; i++) {
        cJSON *ev;
        uint64_t t;
        cr_assert_eq(h_stream_event(s[i], 3000, &ev, &t), 1, "stream %d got no last event", i);
        cr_assert_str_eq(ev_str(ev, "event"), "released");
        cr_assert_str_eq(ev_str(ev, "reason"), "shutting_down");
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
    h_stream *a = hold_open("hb1", "{\"hold\":true,\"ttl_ms\":5000}", &ev, &t);
    cJSON_Delete(ev);
    h_stream *b = hold_open("hb2", "{\"hold\":true,\"ttl_ms\":5000}", &ev, &t);
    cJSON_Delete(ev);
    h_resp r = h_http(C, "POST", "/locks/hb3", "{\"hold\":true,\"ttl_ms\":5000}", NULL);
    cr_assert_eq(r.status, 429, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "too_many_holds");
    cr_assert_str_eq(r.retry_after, "1");
    h_resp_free(&r);
    cr_assert_eq(post_status("hb3", NULL), 201, "an ordinary acquire is not a hold");
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
        redisReply *r = h_redis(C, m, "EXISTS lock:ow#owner");
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
                         "{\"owner\":\"caf\\u00e9\"}"};
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
