/* bench_http.c - the HTTP driver: acquire+release cycles against redlockd
 * (bench_int.h). */
#include "bench_int.h"

/* ---- the HTTP clients ---- */

enum hstate { H_ACQ, H_REL };

typedef struct hclient {
    int fd;
    SSL *ssl;                    /* HTTPS: the connection's TLS (NULL: plain) */
    int id;
    enum hstate st;
    uint64_t sent_us;
    char out[512];
    size_t outlen, outoff;
    char in[4096];
    size_t inlen;
    char token[300];
    bool fresh;                  /* a new name for every acquire */
    long seq;                    /* acquires sent: the fresh name's suffix */
} hclient;

/* A client's connection to t: TCP to 127.0.0.1 or a Unix socket, and over
 * HTTPS its handshake done here, before the level's clock starts (one
 * handshake per client: the connection is kept alive for the level). */
static int connect_to(const bench_target *t, SSL **ssl)
{
    int fd;
    *ssl = NULL;
    if (t->unix_path) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", t->unix_path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
            die("connect (unix)");
    } else {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
            die("connect");
    }
    if (t->tls) {
        *ssl = SSL_new(t->tls);
        if (!*ssl || SSL_set_fd(*ssl, fd) != 1 || SSL_connect(*ssl) != 1) {
            ERR_print_errors_fp(stderr);
            die("TLS handshake");
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* write(2) and read(2), or their TLS forms, as those return: -1 with
 * EAGAIN when the socket must be waited for. */
static ssize_t c_write(hclient *c, const void *buf, size_t n)
{
    if (!c->ssl)
        return write(c->fd, buf, n);
    int w = SSL_write(c->ssl, buf, (int)n);
    if (w > 0)
        return w;
    int e = SSL_get_error(c->ssl, w);
    errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPROTO;
    return -1;
}

static ssize_t c_read(hclient *c, void *buf, size_t n)
{
    if (!c->ssl)
        return read(c->fd, buf, n);
    int r = SSL_read(c->ssl, buf, (int)n);
    if (r > 0)
        return r;
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EPROTO;
    return -1;
}

static void h_request(hclient *c)
{
    char name[64];
    if (c->fresh) {
        if (c->st == H_ACQ)
            c->seq++;
        snprintf(name, sizeof name, "bench-%d-%ld-%ld", c->id, (long)getpid(), c->seq);
    } else {
        snprintf(name, sizeof name, "bench-%d", c->id);
    }
    if (c->st == H_ACQ)
        c->outlen = (size_t)snprintf(c->out, sizeof c->out,
                                     "POST /locks/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
                                     name);
    else
        c->outlen = (size_t)snprintf(c->out, sizeof c->out,
                                     "DELETE /locks/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nLock-Token: %s\r\n"
                                     "Content-Length: 0\r\n\r\n", name, c->token);
    c->outoff = 0;
    c->inlen = 0;
    c->sent_us = now_us();
    while (c->outoff < c->outlen) {
        ssize_t w = c_write(c, c->out + c->outoff, c->outlen - c->outoff);
        if (w < 0 && errno == EAGAIN)
            break;   /* EPOLLOUT finishes it */
        if (w < 0)
            return;
        c->outoff += (size_t)w;
    }
}

/* A complete response in c->in? Returns its status (0: not yet). */
static int h_parse(hclient *c, size_t *consumed)
{
    c->in[c->inlen] = '\0';
    char *hend = strstr(c->in, "\r\n\r\n");
    if (!hend)
        return 0;
    int status = atoi(c->in + 9);
    size_t clen = 0;
    char *cl = strcasestr(c->in, "\r\nContent-Length:");
    if (cl && cl < hend)
        clen = strtoul(cl + 17, NULL, 10);
    size_t total = (size_t)(hend + 4 - c->in) + clen;
    if (c->inlen < total)
        return 0;
    if (status == 201) {
        char *t = strstr(hend, "\"token\":\"");
        if (t)
            sscanf(t + 9, "%299[^\"]", c->token);
    }
    *consumed = total;
    return status;
}

/* The value of an unlabelled counter in redlockd's /metrics on port, or -1. */
static double metric_value(int port, const char *family)
{
    if (port < 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap);
    if (!buf)
        die("malloc");
    ssize_t r;
    while (got < cap - 1 && (r = read(fd, buf + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    double v = -1;
    size_t flen = strlen(family);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, family, flen) && line[flen] == ' ') {
            v = atof(line + flen + 1);
            break;
        }
    free(buf);
    return v;
}

/* fresh: a new name for every acquire. A level's fresh names never repeat
 * another level's: seq goes on across levels. */
static long fresh_seq_base;

result run_http(int port, int nclients, double seconds, pid_t daemon, bool fresh)
{
    bench_target t = {.port = port};
    return run_http_to(&t, nclients, seconds, daemon, fresh);
}

result run_http_to(const bench_target *to, int nclients, double seconds, pid_t daemon, bool fresh)
{
    int port = to->unix_path || to->tls ? -1 : to->port;   /* /metrics is read over plain TCP only */
    int ep = epoll_create1(0);
    hclient *cl = calloc((size_t)nclients, sizeof *cl);
    for (int i = 0; i < nclients; i++) {
        cl[i].id = i;
        cl[i].fresh = fresh;
        cl[i].seq = fresh_seq_base;
        cl[i].fd = connect_to(to, &cl[i].ssl);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = &cl[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, cl[i].fd, &ev);
    }
    usleep(50000);
    samples s = {0};
    result r = {.clients = nclients};
    double cpu0 = proc_cpu_s(daemon), mcpu0 = masters_cpu_s();
    double raises0 = metric_value(port, "redlockd_fence_raises_total");
    uint64_t t0 = now_us(), end = t0 + (uint64_t)(seconds * 1e6);
    for (int i = 0; i < nclients; i++)
        h_request(&cl[i]);
    struct epoll_event evs[512];
    int outstanding = nclients;
    bool stopping = false;
    while (outstanding > 0) {
        uint64_t t = now_us();
        if (!stopping && t >= end)
            stopping = true;   /* finish the cycles in progress */
        if (t >= end + 10000000ULL) {
            /* An answer that never came: count it, do not hang. */
            fprintf(stderr, "bench: %d clients got no answer within 10 s\n", outstanding);
            r.errors += outstanding;
            break;
        }
        int n = epoll_wait(ep, evs, 512, 100);
        for (int k = 0; k < n; k++) {
            hclient *c = evs[k].data.ptr;
            if ((evs[k].events & EPOLLOUT) && c->outoff < c->outlen) {
                ssize_t w = c_write(c, c->out + c->outoff, c->outlen - c->outoff);
                if (w > 0)
                    c->outoff += (size_t)w;
            }
            if (!(evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            for (;;) {
                ssize_t rd = c_read(c, c->in + c->inlen, sizeof c->in - 1 - c->inlen);
                if (rd == 0 || (rd < 0 && errno != EAGAIN)) {
                    fprintf(stderr, "bench: client %d: connection closed by redlockd\n", c->id);
                    break;
                }
                if (rd < 0)
                    break;
                c->inlen += (size_t)rd;
            }
            size_t used;
            int status;
            while ((status = h_parse(c, &used)) != 0) {
                memmove(c->in, c->in + used, c->inlen - used);
                c->inlen -= used;
                uint64_t t1 = now_us();
                if (c->st == H_ACQ) {
                    if (status == 201) {
                        sample_add(&s, t1 - c->sent_us);
                        c->st = H_REL;
                    } else {
                        r.errors++;
                    }
                } else {
                    if (status == 204)
                        r.cycles++;
                    else
                        r.errors++;
                    c->st = H_ACQ;
                }
                if (stopping && c->st == H_ACQ) {
                    outstanding--;
                    break;
                }
                h_request(c);
            }
        }
    }
    uint64_t elapsed = now_us() - t0;
    double cpu1 = proc_cpu_s(daemon), mcpu1 = masters_cpu_s();
    double raises1 = metric_value(port, "redlockd_fence_raises_total");
    for (int i = 0; i < nclients; i++) {
        if (cl[i].ssl)
            SSL_free(cl[i].ssl);
        close(cl[i].fd);
        if (cl[i].seq > fresh_seq_base)
            fresh_seq_base = cl[i].seq;
    }
    close(ep);
    free(cl);
    finish(&r, &s, elapsed);
    r.own_cpu_s_per_1000 = per_1000(cpu1 - cpu0, r.cycles);
    r.masters_cpu_s_per_1000 = per_1000(mcpu0 < 0 || mcpu1 < 0 ? -1 : mcpu1 - mcpu0, r.cycles);
    r.raises_per_cycle = raises0 < 0 || raises1 < 0 || r.cycles == 0 ? -1 : (raises1 - raises0) / (double)r.cycles;
    free(s.v);
    return r;
}
