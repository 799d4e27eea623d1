/* bench_handoff.c - hand-off between two redlockd instances, and
 * /healthz's p50 (bench_int.h). */
#include "bench_int.h"

/* ---- handoff: release answered -> next waiter granted ---- */

#include <pthread.h>

#define HANDOFF_WAITERS_PER_INSTANCE 2
#define HANDOFF_MAX_EVENTS 200000

typedef struct hevent {
    uint64_t sent_us, granted_us, released_us;
} hevent;

typedef struct hthread {
    int port;
    volatile bool *stop;
    hevent *ev;
    size_t n;
    long errors;
} hthread;

/* One blocking keep-alive request; returns the status (-1 on error) and
 * leaves the body's token in token when there is one. */
static int blocking_call(int fd, const char *req, char *token, size_t toklen)
{
    size_t len = strlen(req), off = 0;
    while (off < len) {
        ssize_t w = write(fd, req + off, len - off);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    char in[4096];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, in + got, sizeof in - 1 - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
        in[got] = '\0';
        char *hend = strstr(in, "\r\n\r\n");
        if (!hend)
            continue;
        size_t clen = 0;
        char *cl = strcasestr(in, "\r\nContent-Length:");
        if (cl && cl < hend)
            clen = strtoul(cl + 17, NULL, 10);
        if (got < (size_t)(hend + 4 - in) + clen)
            continue;
        char *t = strstr(hend, "\"token\":\"");
        if (t && token)
            snprintf(token, toklen, "%.*s", (int)strcspn(t + 9, "\""), t + 9);
        return atoi(in + 9);
    }
}

/* p50 of GET /healthz over one blocking keep-alive connection, n times in
 * a row: the HTTP hop alone, for the one-client target of issue 22. */
double healthz_p50_ms(int port, int n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect /healthz");
    samples s = {0};
    for (int i = 0; i < n; i++) {
        uint64_t t0 = now_us();
        if (blocking_call(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", NULL, 0) != 200)
            die("GET /healthz");
        sample_add(&s, now_us() - t0);
    }
    close(fd);
    qsort(s.v, s.n, sizeof *s.v, cmp_u32);
    double p50 = pct_ms(&s, 50);
    free(s.v);
    return p50;
}

static void *handoff_waiter(void *arg)
{
    hthread *h = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    const char *body = "{\"wait_ms\":10000,\"ttl_ms\":10000}";
    char acq[256];
    snprintf(acq, sizeof acq, "POST /locks/handoff HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    while (!*h->stop && h->n < HANDOFF_MAX_EVENTS) {
        char token[300] = "", rel[512];
        uint64_t sent = now_us();
        int st = blocking_call(fd, acq, token, sizeof token);
        uint64_t granted = now_us();
        if (st != 201) {
            h->errors++;
            continue;
        }
        snprintf(rel, sizeof rel, "DELETE /locks/handoff HTTP/1.1\r\nHost: 127.0.0.1\r\nLock-Token: %s\r\n"
                 "Content-Length: 0\r\n\r\n", token);
        st = blocking_call(fd, rel, NULL, 0);
        if (st != 204)
            h->errors++;
        h->ev[h->n++] = (hevent){sent, granted, now_us()};
        usleep(20000);   /* work elsewhere, so the others wait for the lock */
    }
    close(fd);
    return NULL;
}

static int cmp_hevent(const void *a, const void *b)
{
    const hevent *x = a, *y = b;
    return x->granted_us < y->granted_us ? -1 : x->granted_us > y->granted_us;
}

/* Waiters on two instances contend for one name; each takes the lock,
 * releases it at once and asks again. Measures release answered -> next
 * waiter's grant answered. */
handoff_result run_handoff(int port_a, int port_b, double seconds)
{
    enum { NT = 2 * HANDOFF_WAITERS_PER_INSTANCE };
    hthread th[NT];
    pthread_t t[NT];
    volatile bool stop = false;
    for (int i = 0; i < NT; i++) {
        th[i] = (hthread){.port = i % 2 ? port_b : port_a, .stop = &stop};
        th[i].ev = malloc(HANDOFF_MAX_EVENTS * sizeof(hevent));
        pthread_create(&t[i], NULL, handoff_waiter, &th[i]);
    }
    usleep((useconds_t)(seconds * 1e6));
    stop = true;
    size_t total = 0;
    handoff_result r = {0};
    for (int i = 0; i < NT; i++) {
        pthread_join(t[i], NULL);
        total += th[i].n;
        r.errors += th[i].errors;
    }
    hevent *all = malloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < NT; i++) {
        memcpy(all + k, th[i].ev, th[i].n * sizeof(hevent));
        k += th[i].n;
        free(th[i].ev);
    }
    qsort(all, total, sizeof *all, cmp_hevent);
    samples s = {0};
    /* A handoff: the next grant went to a request already waiting when the
     * previous holder's release was answered. */
    for (size_t i = 1; i < total; i++)
        if (all[i].granted_us > all[i - 1].released_us && all[i].sent_us < all[i - 1].released_us)
            sample_add(&s, all[i].granted_us - all[i - 1].released_us);
    qsort(s.v, s.n, sizeof *s.v, cmp_u32);
    r.handoffs = (long)s.n;
    r.p50 = pct_ms(&s, 50);
    r.p99 = pct_ms(&s, 99);
    r.max = s.n ? s.v[s.n - 1] / 1000.0 : 0;
    free(s.v);
    free(all);
    return r;
}
