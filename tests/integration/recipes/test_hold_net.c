/* Integration: held streams on a hostile network: a client that falls
 * silent (an iptables rule drops what it sends) loses its lock within a
 * ttl and a third, and a client that reads late (a proxy delays what the
 * daemon sends) never overlaps the next holder. */
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

TestSuite(hold_net, .fini = teardown, .timeout = 120);

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
Test(hold_net, a_silent_client_loses_the_lock_within_a_ttl_and_a_third)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    cJSON *ev;
    uint64_t t;
    h_stream *s = hold_open(C, "hq", "{\"hold\":true,\"ttl_ms\":3000}", &ev, &t);
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no renewal");
    cr_assert_str_eq(h_ev_str(ev, "event"), "renewed");
    uint64_t end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
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
            if (!strcmp(h_ev_str(ev, "event"), "renewed"))
                end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
            else if (!strcmp(h_ev_str(ev, "event"), "lost") && !lost_at)
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
    cr_assert_eq(h_acquire_status(C, "hq", NULL), 201, "another client could not take the freed lock");
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
Test(hold_net, a_delayed_reader_never_overlaps_the_next_holder)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    delay_proxy *p = proxy_start(C->http_port, 300);
    h_stream *s = h_stream_open_at(p->port, "/locks/hv", "{\"hold\":true,\"ttl_ms\":3000}", 5000);
    cr_assert(s && s->status == 201, "held acquire through the proxy");
    cJSON *ev;
    uint64_t t;
    cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no acquired event");
    cr_assert_str_eq(h_ev_str(ev, "event"), "acquired");
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(s, 3000, &ev, &t), 1, "no renewal");
    cr_assert_str_eq(h_ev_str(ev, "event"), "renewed");
    uint64_t end_of_validity = t + (uint64_t)h_ev_int(ev, "validity_ms") * 1000;
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
    cr_assert_str_eq(h_ev_str(ev, "event"), "lost");
    cJSON_Delete(ev);
    h_stream_close(s);
    proxy_free(p);
}
