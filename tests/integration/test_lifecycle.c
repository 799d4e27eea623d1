/* Integration: requests that end cleanly. A grant reaches its caller or is
 * released at once (clients that leave, or a SIGTERM under load), and
 * half-closed clients get their answers; waiters sleep instead of polling the masters, honour their own
 * wait_ms, and are bounded; release notices reach only instances that wait;
 * connections and requests are bounded so unauthenticated clients cannot
 * exhaust the service; HTTP framing that could smuggle a request is refused.
 * Real masters, the real binary, raw sockets where a client misbehaves. */
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
static h_cluster *peers[60];
static int npeers;

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);   /* writes to connections the server closed */
    /* A thousand client sockets need more than the usual 1024 descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void teardown(void)
{
    for (int i = 0; i < npeers; i++)
        h_peer_free(peers[i]);
    npeers = 0;
    h_cluster_free(C);
}

TestSuite(lifecycle, .init = setup, .fini = teardown, .timeout = 120);

/* ---- raw clients ---- */

/* Sends a POST /locks/name with body. */
static int raw_acquire(const char *name, const char *body)
{
    int fd = h_raw_connect(C, NULL);
    char req[512];
    snprintf(req, sizeof req,
             "POST /locks/%s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", name, strlen(body), body);
    h_raw_send(fd, req);
    return fd;
}

/* Lock keys of name on every master: none may be left. */
static int keys_left(const char *name)
{
    int n = 0;
    for (int i = 0; i < C->n; i++) {
        redisReply *r = h_redis(C, i, "EXISTS lock:%s", name);
        n += r ? (int)r->integer : 0;
        freeReplyObject(r);
    }
    return n;
}

/* ---- ghost locks ---- */

/* Closes fd with a reset (SO_LINGER 0), as a client killed with unread
 * data does: the connection fails at once, not just half of it. */
static void reset_close(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* A client whose connection breaks while its acquire waits is never
 * granted: it stops waiting within a second. One that only closed (a FIN,
 * which a half-close sends too) may be granted, but the answer meets a
 * reset and the grant is released at once: when the holder expires, the
 * name is free either way. */
Test(lifecycle, departed_waiter_is_not_granted)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_resp held = h_http(C, "POST", "/locks/dz", "{\"ttl_ms\":2000}", NULL);
    cr_assert_eq(held.status, 201);
    int fd = raw_acquire("dz", "{\"wait_ms\":5000}");
    int fd2 = raw_acquire("dz", "{\"wait_ms\":5000}");
    usleep(200000);
    reset_close(fd);
    close(fd2);
    uint64_t closed = h_now_us();
    while (h_metric(C, "redlockd_cancelled_total") < 1 && h_now_us() - closed < 1500000)
        usleep(20000);
    double ms = (double)(h_now_us() - closed) / 1000.0;
    cr_assert_lt(ms, 1000, "the departed waiter kept waiting for %.0f ms", ms);
    usleep(2500000);   /* the holder has expired: nobody may hold dz now */
    h_resp g = h_http(C, "GET", "/locks/dz", NULL, NULL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g.json, "held")), "granted to a client that left: %s", g.body);
    cr_assert_eq(keys_left("dz"), 0);
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
             "%s %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n%s%s"
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
        int fd = raw_acquire(name, "{\"wait_ms\":5000,\"ttl_ms\":30000}");
        usleep(50000);
        close(fd);
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&held, "token"));
        h_resp r = h_http(C, "DELETE", path, NULL, hdr, NULL);   /* the waiter is granted now */
        cr_assert_eq(r.status, 204);
        h_resp_free(&r);
        h_resp_free(&held);
        uint64_t until = h_now_us() + 1000000;
        while (keys_left(name) && h_now_us() < until)
            usleep(10000);
        cr_assert_eq(keys_left(name), 0, "round %d: a lock nobody knows the token of is held", round);
    }
    cr_assert_geq(h_metric(C, "redlockd_cancelled_total") + h_metric(C, "redlockd_abandoned_grants_total"), 20);
}

struct loader {
    int id;
    atomic_bool stop;
    long sent, answered, no_answer, refused;
    CURLcode last_error;        /* of the last request without an answer */
    long last_new_conn;         /* it opened a new connection (1) or reused one (0) */
    char tokens[4096][24];
    int ntokens;
};

static size_t sink_body(char *p, size_t size, size_t n, void *arg)
{
    struct { char buf[1024]; size_t len; } *b = arg;
    size_t add = size * n;
    if (b->len + add < sizeof b->buf) {
        memcpy(b->buf + b->len, p, add);
        b->len += add;
        b->buf[b->len] = '\0';
    }
    return add;
}

/* Acquires (many with a wait, on a few names) and releases until the
 * daemon stops; keeps the token of every grant it received. */
static void *load(void *arg)
{
    struct loader *l = arg;
    CURL *h = curl_easy_init();
    char url[128], body[64];
    while (!atomic_load(&l->stop)) {
        int name = rand() % 4;
        snprintf(url, sizeof url, "%s/locks/st-%d", C->base, name);
        snprintf(body, sizeof body, "{\"ttl_ms\":20000,\"wait_ms\":%d}", l->id % 2 ? 3000 : 0);
        struct { char buf[1024]; size_t len; } b = {"", 0};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 15000L);
        l->sent++;
        CURLcode rc = curl_easy_perform(h);
        if (rc == CURLE_COULDNT_CONNECT) {
            l->refused++;   /* the listener is closed: the service is stopping */
            break;
        }
        if (rc != CURLE_OK) {
            l->no_answer++;
            l->last_error = rc;
            curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &l->last_new_conn);
            continue;
        }
        l->answered++;
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (status != 201)
            continue;
        cJSON *j = cJSON_Parse(b.buf);
        cJSON *t = cJSON_GetObjectItem(j, "token");
        if (cJSON_IsString(t) && l->ntokens < 4096)
            snprintf(l->tokens[l->ntokens++], 24, "%s", t->valuestring);
        char hdr[300], rurl[128];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", cJSON_IsString(t) ? t->valuestring : "");
        cJSON_Delete(j);
        snprintf(rurl, sizeof rurl, "%s/locks/st-%d", C->base, name);
        struct curl_slist *hs = curl_slist_append(NULL, hdr);
        curl_easy_setopt(h, CURLOPT_URL, rurl);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
        b.len = 0;
        curl_easy_perform(h);   /* a release that fails leaves a known token: not a ghost */
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hs);
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* SIGTERM under 64-client load: every request the service accepted is
 * answered (waiting acquires with 409), and no lock is left on the masters
 * whose token no client received. */
Test(lifecycle, sigterm_under_load_leaves_no_ghost_locks, .timeout = 90)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--master-timeout-ms", "500", NULL);
    enum { N = 64 };
    static struct loader l[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        memset(&l[i], 0, sizeof l[i]);
        l[i].id = i;
        pthread_create(&t[i], NULL, load, &l[i]);
    }
    /* 300 more acquires wait on held names: each must be answered 409 by
     * the shutdown, not dropped with its connection. */
    enum { W = 300 };
    static int wfd[W];
    for (int i = 0; i < 4; i++) {
        char path[32];
        snprintf(path, sizeof path, "/locks/held-%d", i);
        h_resp h = h_http(C, "POST", path, "{\"ttl_ms\":60000}", NULL);
        cr_assert_eq(h.status, 201);
        h_resp_free(&h);
    }
    for (int i = 0; i < W; i++) {
        char name[32];
        snprintf(name, sizeof name, "held-%d", i % 4);
        wfd[i] = raw_acquire(name, "{\"wait_ms\":20000}");
    }
    usleep(1500000);
    pid_t pid = C->daemon;
    kill(pid, SIGTERM);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    C->daemon = 0;
    for (int i = 0; i < N; i++)
        atomic_store(&l[i].stop, true);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    long sent = 0, answered = 0, no_answer = 0;
    for (int i = 0; i < N; i++) {
        sent += l[i].sent;
        answered += l[i].answered;
        no_answer += l[i].no_answer;
        if (l[i].no_answer)
            fprintf(stderr, "client %d: %ld without an answer, the last: %s (on a %s connection)\n", i,
                    l[i].no_answer, curl_easy_strerror(l[i].last_error),
                    l[i].last_new_conn ? "new" : "reused");
    }
    fprintf(stderr, "sigterm under load: %ld requests, %ld answered, %ld closed without an answer\n",
            sent, answered, no_answer);
    cr_assert_gt(answered, 100, "the load ran");
    cr_assert_eq(no_answer, 0, "%ld of %ld requests got a closed connection instead of an answer",
                 no_answer, sent);
    int waiting_409 = 0;
    for (int i = 0; i < W; i++) {
        char buf[1024];
        bool eof;
        h_raw_read_all(wfd[i], buf, sizeof buf, 2000, &eof);
        waiting_409 += !strncmp(buf, "HTTP/1.1 409", 12);
        close(wfd[i]);
    }
    fprintf(stderr, "sigterm: %d of %d waiting acquires answered 409\n", waiting_409, W);
    cr_assert_eq(waiting_409, W, "%d of %d waiting acquires got a closed connection instead of 409",
                 W - waiting_409, W);
    int ghosts = 0;
    for (int m = 0; m < C->n; m++)
        for (int k = 0; k < 4; k++) {
            redisReply *v = h_redis(C, m, "GET lock:st-%d", k);
            if (v && v->type == REDIS_REPLY_STRING) {
                bool known = false;
                for (int i = 0; i < N && !known; i++)
                    for (int j = 0; j < l[i].ntokens && !known; j++)
                        known = !strcmp(l[i].tokens[j], v->str);
                ghosts += !known;
            }
            freeReplyObject(v);
        }
    cr_assert_eq(ghosts, 0, "%d lock keys on the masters hold a token no client received", ghosts);
}

/* ---- waiting without polling ---- */

struct waiter {
    const char *name;
    int wait_ms;
    long status;
    uint64_t start_us, done_us;
    h_cluster *via;   /* the instance asked; NULL: C */
};

static void *wait_for(void *arg)
{
    struct waiter *w = arg;
    char path[64], body[64];
    snprintf(path, sizeof path, "/locks/%s", w->name);
    snprintf(body, sizeof body, "{\"wait_ms\":%d}", w->wait_ms);
    w->start_us = h_now_us();
    h_resp r = h_http(w->via ? w->via : C, "POST", path, body, NULL);
    w->done_us = h_now_us();
    w->status = r.status;
    h_resp_free(&r);
    return NULL;
}

/* Starts n waiters on name (wait_ms each) in threads. */
static void start_waiters(struct waiter *w, pthread_t *t, int n, const char *name, int wait_ms)
{
    for (int i = 0; i < n; i++) {
        w[i] = (struct waiter){name, wait_ms, 0, 0, 0, NULL};
        pthread_create(&t[i], NULL, wait_for, &w[i]);
    }
}

/* Script calls master 0 runs in the next ms milliseconds. */
static long long script_calls_during(int ms)
{
    long long before = h_script_calls(C, 0);
    usleep((useconds_t)ms * 1000);
    return h_script_calls(C, 0) - before;
}

/* With release notices up, 200 waiters on a name held for a minute sleep:
 * they cost the masters next to nothing until the holder releases. */
Test(lifecycle, waiters_do_not_poll_the_masters)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--master-timeout-ms", "1000", NULL);
    h_resp held = h_http(C, "POST", "/locks/poll", "{\"ttl_ms\":60000}", NULL);
    cr_assert_eq(held.status, 201);
    enum { N = 200 };
    static struct waiter w[N];
    static pthread_t t[N];
    start_waiters(w, t, N, "poll", 4000);
    usleep(800000);   /* every waiter has tried once and sleeps */
    long long calls = script_calls_during(2000);
    fprintf(stderr, "%d waiters: %lld script calls on one master in 2 s\n", N, calls);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    cr_assert_lt(calls, 40, "%d sleeping waiters made %lld script calls in 2 s", N, calls);
    for (int i = 0; i < N; i++)
        cr_assert_eq(w[i].status, 409, "waiter %d: %ld", i, w[i].status);
    h_resp_free(&held);
}

/* After a holder expires without releasing, one waiter takes the lock and
 * the others sleep on until the new holder's time: they do not poll. */
Test(lifecycle, waiters_after_an_expiry_do_not_poll)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--master-timeout-ms", "1000", NULL);
    h_resp held = h_http(C, "POST", "/locks/exp", "{\"ttl_ms\":600}", NULL);
    cr_assert_eq(held.status, 201);
    enum { N = 50 };
    static struct waiter w[N];
    static pthread_t t[N];
    start_waiters(w, t, N, "exp", 4000);
    usleep(1500000);   /* the holder expired; the oldest waiter holds it now (30 s) */
    long long calls = script_calls_during(1500);
    fprintf(stderr, "%d waiters after an expiry: %lld script calls on one master in 1.5 s\n", N, calls);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    int granted = 0;
    for (int i = 0; i < N; i++)
        granted += w[i].status == 201;
    cr_assert_eq(granted, 1, "one waiter takes the expired lock");
    cr_assert_lt(calls, 20, "%d waiters made %lld script calls in 1.5 s after the expiry", N, calls);
    h_resp_free(&held);
}

/* A short waiter behind a long one answers at its own deadline. */
Test(lifecycle, short_waiter_answers_at_its_own_deadline)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_resp held = h_http(C, "POST", "/locks/dl", "{\"ttl_ms\":10000}", NULL);
    cr_assert_eq(held.status, 201);
    struct waiter long_w = {"dl", 5000, 0, 0, 0, NULL}, short_w = {"dl", 300, 0, 0, 0, NULL};
    pthread_t a, b;
    pthread_create(&a, NULL, wait_for, &long_w);
    usleep(100000);
    pthread_create(&b, NULL, wait_for, &short_w);
    pthread_join(b, NULL);
    double ms = (double)(short_w.done_us - short_w.start_us) / 1000.0;
    cr_assert_eq(short_w.status, 409);
    cr_assert(ms >= 290 && ms < 700, "wait_ms 300 answered after %.0f ms", ms);
    char hdr[300];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&held, "token"));
    h_resp r = h_http(C, "DELETE", "/locks/dl", NULL, hdr, NULL);
    pthread_join(a, NULL);
    cr_assert_eq(long_w.status, 201, "the long waiter gets the lock on release");
    h_resp_free(&r);
    h_resp_free(&held);
}

/* A 409 after waiting tells the holder's time left when it answers, not
 * when the wait began (it said 7,959 ms of a 10 s lock after 3 s). */
Test(lifecycle, retry_after_after_a_wait_is_current)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_resp held = h_http(C, "POST", "/locks/ra", "{\"ttl_ms\":10000}", NULL);
    cr_assert_eq(held.status, 201);
    uint64_t t0 = h_now_us();
    h_resp w = h_http(C, "POST", "/locks/ra", "{\"wait_ms\":3000}", NULL);
    cr_assert_eq(w.status, 409, "%s", w.body);
    long long left = 10000 - (long long)((h_now_us() - t0) / 1000);
    long long said = h_int(&w, "retry_after_ms");
    cr_assert(said <= left + 100 && said >= left - 400, "retry_after_ms %lld, the holder had %lld ms left",
              said, left);
    cr_assert_str_eq(w.retry_after, "7");
    h_resp_free(&w);
    h_resp_free(&held);
}

Test(lifecycle, waiters_are_bounded)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--max-waiters", "3", NULL);
    h_resp held = h_http(C, "POST", "/locks/mw", "{\"ttl_ms\":10000}", NULL);
    cr_assert_eq(held.status, 201);
    struct waiter w[3];
    pthread_t t[3];
    start_waiters(w, t, 3, "mw", 1500);
    usleep(300000);
    h_resp over = h_http(C, "POST", "/locks/mw", "{\"wait_ms\":1500}", NULL);
    cr_assert_eq(over.status, 429, "%s", over.body);
    cr_assert_str_eq(h_str(&over, "error"), "too_many_waiters");
    cr_assert(over.retry_after[0], "429 carries Retry-After");
    h_resp now = h_http(C, "POST", "/locks/mw", NULL, NULL);
    cr_assert_eq(now.status, 409, "an acquire that does not wait is not refused for the bound");
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].status, 409);
    }
    h_resp_free(&over);
    h_resp_free(&now);
    h_resp_free(&held);
}

/* Release notices go only to instances that wait for the name: with 50
 * idle instances on the same masters, a release costs the masters no more
 * than with none. */
Test(lifecycle, notices_reach_only_instances_that_wait, .timeout = 240)
{
    C = h_cluster_start(5, NULL);
    /* 51 instances on a loaded machine: a 503 must not pass for the answer. */
    h_daemon_start(C, "--master-timeout-ms", "1000", NULL);
    for (int i = 0; i < 50; i++)
        peers[npeers++] = h_peer_start(C, "--log-level", "error", NULL);
    redisReply *subs = h_redis(C, 0, "PUBSUB NUMSUB redlockd:released");
    cr_assert_eq(subs->element[1]->integer, 0, "nobody subscribes to a broadcast channel");
    freeReplyObject(subs);
    redisReply *before = h_redis(C, 0, "INFO stats");
    long long out0 = atoll(strstr(before->str, "total_net_output_bytes:") + 23);
    freeReplyObject(before);
    enum { CYCLES = 200 };
    for (int i = 0; i < CYCLES; i++) {
        h_resp a = h_http(C, "POST", "/locks/nt", NULL, NULL);
        cr_assert_eq(a.status, 201, "cycle %d: %ld %s", i, a.status, a.body);
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
        h_resp r = h_http(C, "DELETE", "/locks/nt", NULL, hdr, NULL);
        cr_assert_eq(r.status, 204);
        h_resp_free(&a);
        h_resp_free(&r);
    }
    redisReply *after = h_redis(C, 0, "INFO stats");
    long long out1 = atoll(strstr(after->str, "total_net_output_bytes:") + 23);
    freeReplyObject(after);
    double per = (double)(out1 - out0) / CYCLES;
    fprintf(stderr, "51 instances: %.0f bytes sent by one master per acquire+release\n", per);
    cr_assert_lt(per, 600, "a release with nobody waiting went to the idle instances (%.0f bytes)", per);
    /* A waiter on one instance still hears a release made on another. */
    h_resp held = h_http(C, "POST", "/locks/nt", "{\"ttl_ms\":30000}", NULL);
    struct waiter w = {"nt", 5000, 0, 0, 0, peers[7]};
    pthread_t t;
    pthread_create(&t, NULL, wait_for, &w);
    usleep(400000);
    char hdr[300];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&held, "token"));
    uint64_t released = h_now_us();
    h_resp r = h_http(C, "DELETE", "/locks/nt", NULL, hdr, NULL);
    pthread_join(t, NULL);
    cr_assert_eq(w.status, 201);
    double ms = (double)(w.done_us - released) / 1000.0;
    cr_assert_lt(ms, 300, "the handoff to another instance took %.0f ms", ms);
    h_resp_free(&r);
    h_resp_free(&held);
}

/* ---- connections ---- */

/* Slow clients (a byte every 300 ms) are closed once their request is not
 * complete within --request-timeout-ms; normal traffic goes on meanwhile. */
Test(lifecycle, slowloris_is_closed_and_others_served)
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
Test(lifecycle, per_ip_connection_limit)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--max-connections-per-ip", "20", NULL);
    usleep(300000);   /* the harness's own connections have closed */
    int fds[25], served = 0, refused = 0;
    char buf[512];
    bool eof;
    for (int i = 0; i < 25; i++) {
        fds[i] = h_raw_connect(C, "127.0.0.1");
        h_raw_send(fds[i], "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
        h_raw_read_all(fds[i], buf, sizeof buf, 300, &eof);
        if (!strncmp(buf, "HTTP/1.1 200", 12) && !eof)
            served++;
        else if (buf[0] == '\0' && eof)
            refused++;
    }
    cr_assert_eq(served, 20, "%d connections from one address served (limit 20)", served);
    cr_assert_eq(refused, 5, "%d connections over the limit closed", refused);
    int other = h_raw_connect(C, "127.0.0.2");
    h_raw_send(other, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
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
Test(lifecycle, connection_limit_holds, .timeout = 120)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--max-connections", "1000", "--max-connections-per-ip", "1000", NULL);
    long base = rss_kb(C->daemon);
    int first = h_raw_connect(C, NULL);
    static int fds[1000];
    for (int i = 0; i < 999; i++) {
        fds[i] = h_raw_connect(C, NULL);
        h_raw_send(fds[i], "GET /healthz HTTP/1.1\r\nHost: t\r\n");   /* headers never finished */
    }
    usleep(500000);
    long full = rss_kb(C->daemon);
    int extra = h_raw_connect(C, NULL);
    h_raw_send(extra, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    char buf[512];
    bool eof;
    size_t n = h_raw_read_all(extra, buf, sizeof buf, 1000, &eof);
    cr_assert(n == 0, "a connection past the limit was served: %s", buf);
    close(extra);
    h_raw_send(first, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
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
    cr_assert_eq(keys_left(smuggled), 0, "the request behind it ran");
}

Test(lifecycle, ambiguous_framing_is_refused_and_closed)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    expect_400_and_close("POST /locks/sm1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                         "POST /locks/smuggled1 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
                         "smuggled1");
    cr_assert_eq(keys_left("sm1"), 0);
    expect_400_and_close("POST /locks/sm2 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
                         "Content-Length: 62\r\n\r\n"
                         "POST /locks/smuggled2 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
                         "smuggled2");
    cr_assert_eq(keys_left("sm2"), 0);
    /* A malformed length is refused and the connection closed, by
     * libmicrohttpd itself before redlockd sees the request (0.9.75 writes
     * its 400 header block twice; see docs/operations.md). */
    int fd = h_raw_connect(C, NULL);
    h_raw_send(fd, "POST /locks/sm3 HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n"
                 "POST /locks/smuggled3 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    char buf[4096];
    bool eof;
    h_raw_read_all(fd, buf, sizeof buf, 1500, &eof);
    close(fd);
    cr_assert(!strncmp(buf, "HTTP/1.1 400", 12), "%.80s", buf);
    cr_assert(eof, "the connection stayed open after a malformed length");
    cr_assert_eq(keys_left("smuggled3") + keys_left("sm3"), 0);
    /* The same length twice is one length: served. */
    fd = h_raw_connect(C, NULL);
    h_raw_send(fd, "POST /locks/sm4 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n");
    h_raw_read_all(fd, buf, sizeof buf, 1000, &eof);
    close(fd);
    cr_assert(!strncmp(buf, "HTTP/1.1 201", 12), "%.80s", buf);
}

Test(lifecycle, bearer_scheme_is_case_insensitive)
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
Test(lifecycle, dropped_connections_do_not_flood_the_log)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    for (int i = 0; i < 300; i++) {
        int fd = h_raw_connect(C, NULL);
        h_raw_send(fd, "POST /locks/x HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"ttl");
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
