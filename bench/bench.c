/* bench.c - redlockd's benchmark: acquire+release cycles over HTTP/1.1
 * keep-alive against the real redlockd, and in the same run the floor: the
 * same Redis work with no HTTP, from C with hiredis (each client sends
 * SET NX PX to all five masters before reading, then the release script by
 * EVALSHA). Both drive N clients from one epoll thread, one connection per
 * client (five for a floor client), each client its own lock name; the
 * "new" rows take a new name for every acquire instead (one lock per order
 * id: the name has no fence counter on any master yet).
 *
 * Beside them, the peer users would pick: node-redlock (npm "redlock" 4.2)
 * over ioredis with auto-pipelining, five clients, one per master
 * (bench/node/redlock-bench.js, installed with npm ci into bench/node when
 * node and npm exist; skipped with a note when they do not, or --no-node).
 * redlockd runs twice, with --threads 1 and --threads 2, on the same masters.
 *
 *   bench [--seconds S] [--levels 1,8,64,256] [--json FILE]
 *         [--redlockd PATH] [--masters host:port,...] [--label TEXT]
 *         [--no-node] [--node-dir DIR]
 *
 * Starts five redis-server masters on free loopback ports (no persistence)
 * unless --masters is given, and the redlockd binary. For every row it reads
 * the masters' CPU (INFO cpu, summed over the five) and the CPU of the
 * process doing the work (the floor: the benchmark's own thread; node-redlock:
 * the node process; redlockd: the redlockd process) around the level, and
 * prints both per 1000 cycles. Prints a table per level and writes the same
 * as JSON. It is a measurement, not a test.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LEVELS 8
#define NMASTERS 5
#define RELEASE_LUA                                                                                 \
    "local v = redis.call('GET', KEYS[1])\n"                                                       \
    "if v == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end\n"                               \
    "if v then return -1 end\n"                                                                    \
    "return 0\n"

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* ---- latency samples ---- */

typedef struct samples {
    uint32_t *v;
    size_t n, cap;
} samples;

static void sample_add(samples *s, uint64_t us)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 65536;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v)
            die("realloc");
    }
    s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(samples *s, double p)
{
    if (!s->n)
        return 0;
    size_t k = (size_t)(p / 100.0 * (double)s->n);
    if (k >= s->n)
        k = s->n - 1;
    return s->v[k] / 1000.0;
}

typedef struct result {
    bool ran;                    /* false: not measured (node-redlock skipped or failed) */
    int clients;
    double seconds;
    long cycles, errors;
    double p50, p99, p999;
    double cycles_per_s;
    double masters_cpu_s_per_1000; /* the five masters' CPU seconds (summed) per 1000 cycles */
    double own_cpu_s_per_1000;     /* the working process's CPU seconds per 1000 cycles; <0: not measured */
    double raises_per_cycle;       /* redlockd: grants that needed a fence raise (a second round
                                      trip), per cycle, from /metrics; <0: not measured */
} result;

/* ---- the masters' CPU: INFO cpu, used_cpu_sys + used_cpu_user ---- */

#define MAX_HOST 256

static char master_host[NMASTERS][MAX_HOST];
static int master_port[NMASTERS];
static redisContext *info_ctx[NMASTERS];

/* Sum over the five masters of used_cpu_sys + used_cpu_user, in seconds;
 * -1 when a master does not answer. */
static double masters_cpu_s(void)
{
    double sum = 0;
    for (int m = 0; m < NMASTERS; m++) {
        if (!info_ctx[m]) {
            struct timeval tv = {2, 0};
            info_ctx[m] = redisConnectWithTimeout(master_host[m], master_port[m], tv);
            if (!info_ctx[m] || info_ctx[m]->err) {
                if (info_ctx[m])
                    redisFree(info_ctx[m]);
                info_ctx[m] = NULL;
                return -1;
            }
            redisSetTimeout(info_ctx[m], tv);
        }
        redisReply *r = redisCommand(info_ctx[m], "INFO cpu");
        if (!r || r->type != REDIS_REPLY_STRING) {
            if (r)
                freeReplyObject(r);
            redisFree(info_ctx[m]);
            info_ctx[m] = NULL;
            return -1;
        }
        const char *sys = strstr(r->str, "used_cpu_sys:"), *user = strstr(r->str, "used_cpu_user:");
        if (sys)
            sum += strtod(sys + 13, NULL);
        if (user)
            sum += strtod(user + 14, NULL);
        freeReplyObject(r);
    }
    return sum;
}

static double per_1000(double cpu_s, long cycles)
{
    return cycles > 0 && cpu_s >= 0 ? cpu_s / (double)cycles * 1000.0 : -1;
}

/* CPU seconds of the calling thread (user + system). */
static double thread_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) < 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void finish(result *r, samples *s, uint64_t elapsed_us)
{
    r->ran = true;
    qsort(s->v, s->n, sizeof *s->v, cmp_u32);
    r->seconds = (double)elapsed_us / 1e6;
    r->cycles_per_s = (double)r->cycles / r->seconds;
    r->p50 = pct_ms(s, 50);
    r->p99 = pct_ms(s, 99);
    r->p999 = pct_ms(s, 99.9);
}

/* ---- processes ---- */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        die("bind");
    int port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static bool tcp_ready(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void wait_port(int port, const char *what)
{
    for (int i = 0; i < 500; i++) {
        if (tcp_ready(port))
            return;
        usleep(10000);
    }
    fprintf(stderr, "bench: %s on port %d did not start\n", what, port);
    exit(1);
}

/* utime + stime of pid in seconds; peak RSS in KiB through *hwm_kib. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof buf, f)) {
        if (f)
            fclose(f);
        return 0;
    }
    fclose(f);
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after the name: state(3) ... utime(14) stime(15) */
    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long proc_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field)))
            v = strtol(line + strlen(field) + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* ---- the HTTP clients ---- */

enum hstate { H_ACQ, H_REL };

typedef struct hclient {
    int fd;
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

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
        die("connect");
    return fd;
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
                                     "POST /locks/%s HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\n\r\n",
                                     name);
    else
        c->outlen = (size_t)snprintf(c->out, sizeof c->out,
                                     "DELETE /locks/%s HTTP/1.1\r\nHost: bench\r\nLock-Token: %s\r\n"
                                     "Content-Length: 0\r\n\r\n", name, c->token);
    c->outoff = 0;
    c->inlen = 0;
    c->sent_us = now_us();
    while (c->outoff < c->outlen) {
        ssize_t w = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
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
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *req = "GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
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

static result run_http(int port, int nclients, double seconds, pid_t daemon, bool fresh)
{
    int ep = epoll_create1(0);
    hclient *cl = calloc((size_t)nclients, sizeof *cl);
    for (int i = 0; i < nclients; i++) {
        cl[i].id = i;
        cl[i].fresh = fresh;
        cl[i].seq = fresh_seq_base;
        cl[i].fd = connect_to(port);
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
                ssize_t w = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
                if (w > 0)
                    c->outoff += (size_t)w;
            }
            if (!(evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            for (;;) {
                ssize_t rd = read(c->fd, c->in + c->inlen, sizeof c->in - 1 - c->inlen);
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

/* ---- the floor: the same Redis work with hiredis, no HTTP ---- */

typedef struct fclient {
    int id;
    redisContext *ctx[NMASTERS];
    int pending;
    bool acquiring;
    uint64_t sent_us;
    uint64_t seq;
    char token[40];
    int yes;
} fclient;

typedef struct fconn {
    fclient *c;
    int m;
} fconn;

static char release_sha[41];

static void f_send(fclient *c)
{
    char key[32];
    snprintf(key, sizeof key, "floor:%d", c->id);
    if (c->acquiring) {
        snprintf(c->token, sizeof c->token, "t%d-%llu", c->id, (unsigned long long)++c->seq);
        c->sent_us = now_us();
    }
    for (int m = 0; m < NMASTERS; m++) {
        if (c->acquiring)
            redisAppendCommand(c->ctx[m], "SET %s %s NX PX 30000", key, c->token);
        else
            redisAppendCommand(c->ctx[m], "EVALSHA %s 1 %s %s", release_sha, key, c->token);
    }
    for (int m = 0; m < NMASTERS; m++) {   /* all written before any is read */
        int done = 0;
        while (!done)
            if (redisBufferWrite(c->ctx[m], &done) != REDIS_OK)
                die("redis write");
    }
    c->pending = NMASTERS;
    c->yes = 0;
}

static result run_floor(int nclients, double seconds)
{
    int ep = epoll_create1(0);
    fclient *cl = calloc((size_t)nclients, sizeof *cl);
    fconn *conns = calloc((size_t)nclients * NMASTERS, sizeof *conns);
    for (int i = 0; i < nclients; i++) {
        cl[i].id = i;
        for (int m = 0; m < NMASTERS; m++) {
            struct timeval tv = {2, 0};
            redisContext *ctx = redisConnectWithTimeout(master_host[m], master_port[m], tv);
            if (!ctx || ctx->err)
                die("redis connect");
            int fl = fcntl(ctx->fd, F_GETFL);
            fcntl(ctx->fd, F_SETFL, fl | O_NONBLOCK);
            ctx->flags &= ~REDIS_BLOCK;
            cl[i].ctx[m] = ctx;
            fconn *fc = &conns[i * NMASTERS + m];
            fc->c = &cl[i];
            fc->m = m;
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = fc};
            epoll_ctl(ep, EPOLL_CTL_ADD, ctx->fd, &ev);
        }
    }
    samples s = {0};
    result r = {.clients = nclients, .raises_per_cycle = -1};
    double cpu0 = thread_cpu_s(), mcpu0 = masters_cpu_s();
    uint64_t t0 = now_us(), end = t0 + (uint64_t)(seconds * 1e6);
    for (int i = 0; i < nclients; i++) {
        cl[i].acquiring = true;
        f_send(&cl[i]);
    }
    int outstanding = nclients;
    bool stopping = false;
    struct epoll_event evs[1024];
    while (outstanding > 0) {
        if (!stopping && now_us() >= end)
            stopping = true;
        int n = epoll_wait(ep, evs, 1024, 100);
        for (int k = 0; k < n; k++) {
            fconn *fc = evs[k].data.ptr;
            fclient *c = fc->c;
            redisContext *ctx = c->ctx[fc->m];
            if (redisBufferRead(ctx) != REDIS_OK)
                die("redis read");
            void *reply;
            while (redisGetReplyFromReader(ctx, &reply) == REDIS_OK && reply) {
                redisReply *rr = reply;
                if (c->acquiring && rr->type == REDIS_REPLY_STATUS)
                    c->yes++;
                if (!c->acquiring && rr->type == REDIS_REPLY_ERROR)
                    r.errors++;
                freeReplyObject(reply);
                if (--c->pending > 0)
                    continue;
                if (c->acquiring) {
                    if (c->yes >= NMASTERS / 2 + 1)
                        sample_add(&s, now_us() - c->sent_us);
                    else
                        r.errors++;
                    c->acquiring = false;
                    f_send(c);
                } else {
                    r.cycles++;
                    c->acquiring = true;
                    if (stopping)
                        outstanding--;
                    else
                        f_send(c);
                }
            }
        }
    }
    uint64_t elapsed = now_us() - t0;
    double cpu1 = thread_cpu_s(), mcpu1 = masters_cpu_s();
    for (int i = 0; i < nclients; i++)
        for (int m = 0; m < NMASTERS; m++)
            redisFree(cl[i].ctx[m]);
    close(ep);
    free(cl);
    free(conns);
    finish(&r, &s, elapsed);
    r.own_cpu_s_per_1000 = per_1000(cpu1 - cpu0, r.cycles);
    r.masters_cpu_s_per_1000 = per_1000(mcpu0 < 0 || mcpu1 < 0 ? -1 : mcpu1 - mcpu0, r.cycles);
    free(s.v);
    return r;
}

/* ---- node-redlock: bench/node/redlock-bench.js as a child process ---- */

#ifndef BENCH_NODE_DIR
#define BENCH_NODE_DIR "bench/node"
#endif

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char full[4400];
        snprintf(full, sizeof full, "%s/%s", *d ? d : ".", prog);
        if (access(full, X_OK) == 0)
            return true;
    }
    return false;
}

/* Runs argv in cwd (NULL: here) with its standard output sent to our
 * standard error, so that only the tables reach standard output; returns
 * its exit status (-1 when it did not exit). */
static int run_cmd(char *const argv[], const char *cwd, bool quiet)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            dup2(fd, 1);
            dup2(fd, 2);
        } else {
            dup2(2, 1);
        }
        if (cwd && chdir(cwd) < 0)
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Makes node-redlock runnable: the pinned versions of bench/node/package.json
 * installed in bench/node/node_modules (npm ci, from package-lock.json).
 * Returns the script's path, or NULL with the reason in note. */
static const char *node_prepare(const char *dir, char *note, size_t notelen)
{
    static char script[1024];
    snprintf(script, sizeof script, "%s/redlock-bench.js", dir);
    if (!on_path("node") || !on_path("npm")) {
        snprintf(note, notelen, "skipped: node and npm are not both on PATH");
        return NULL;
    }
    if (access(script, R_OK) != 0) {
        snprintf(note, notelen, "skipped: %s not found (--node-dir)", script);
        return NULL;
    }
    char *check[] = {"node", script, "--check", NULL};
    if (run_cmd(check, NULL, true) == 0)
        return script;
    fprintf(stderr, "bench: node-redlock: installing %s from npm (npm ci) ...\n", dir);
    char *ci[] = {"npm", "ci", "--no-audit", "--no-fund", NULL};
    int st = run_cmd(ci, dir, false);
    if (st != 0 || run_cmd(check, NULL, true) != 0) {
        snprintf(note, notelen, "skipped: npm ci in %s failed (exit %d)", dir, st);
        return NULL;
    }
    return script;
}

/* The value of "key": in a line of flat JSON, or def. */
static double json_num(const char *line, const char *key, double def)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : def;
}

static void json_str(const char *line, const char *key, char *out, size_t outlen)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (p)
        snprintf(out, outlen, "%.*s", (int)strcspn(p + strlen(pat), "\""), p + strlen(pat));
}

/* Reads one line from fd into line (without the newline) within deadline_us;
 * buf/blen keep what came after it. Returns false on end, error or time out. */
static bool read_line(int fd, char *buf, size_t *blen, size_t cap, char *line, size_t linecap, uint64_t deadline_us)
{
    for (;;) {
        char *nl = memchr(buf, '\n', *blen);
        if (nl) {
            size_t n = (size_t)(nl - buf);
            snprintf(line, linecap, "%.*s", (int)n, buf);
            memmove(buf, nl + 1, *blen - n - 1);
            *blen -= n + 1;
            return true;
        }
        uint64_t t = now_us();
        if (t >= deadline_us || *blen + 1 >= cap)
            return false;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)((deadline_us - t) / 1000 + 1));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return false;
        ssize_t r = read(fd, buf + *blen, cap - 1 - *blen);
        if (r <= 0)
            return false;
        *blen += (size_t)r;
    }
}

static char node_versions[160];

/* One level of node-redlock: spawns the script, waits for its "ready" (it
 * has connected and warmed up), reads the masters' CPU, says go, reads its
 * JSON line, reads the masters' CPU again. */
static result run_node(const char *script, const char *masters, int nclients, double seconds, const char *log,
                       bool fresh)
{
    result r = {.clients = nclients, .own_cpu_s_per_1000 = -1, .masters_cpu_s_per_1000 = -1,
                .raises_per_cycle = -1};
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0)
        die("pipe");
    char n[16], sec[32];
    snprintf(n, sizeof n, "%d", nclients);
    snprintf(sec, sizeof sec, "%g", seconds);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        close(in[1]);
        close(out[0]);
        char *av[] = {"node", (char *)script, "--masters", (char *)masters, "--clients", n, "--seconds", sec,
                      "--ttl-ms", "30000", fresh ? "--fresh" : NULL, NULL};
        execvp(av[0], av);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    char buf[8192], line[4096];
    size_t blen = 0;
    bool ok = false;
    double mcpu0 = -1, mcpu1 = -1;
    uint64_t deadline = now_us() + 60000000ULL;
    while (read_line(out[0], buf, &blen, sizeof buf, line, sizeof line, deadline))
        if (!strcmp(line, "ready")) {
            ok = true;
            break;
        }
    if (ok) {
        mcpu0 = masters_cpu_s();
        ok = write(in[1], "go\n", 3) == 3;
    }
    if (ok) {
        ok = false;
        deadline = now_us() + (uint64_t)(seconds * 1e6) + 30000000ULL;
        while (read_line(out[0], buf, &blen, sizeof buf, line, sizeof line, deadline))
            if (line[0] == '{') {
                ok = true;
                break;
            }
        mcpu1 = masters_cpu_s();
    }
    close(in[1]);
    close(out[0]);
    if (!ok)
        kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    if (!ok) {
        fprintf(stderr, "bench: node-redlock at %d clients gave no result (see %s)\n", nclients, log);
        return r;
    }
    r.ran = true;
    r.seconds = json_num(line, "seconds", 0);
    r.cycles = (long)json_num(line, "cycles", 0);
    r.errors = (long)json_num(line, "errors", 0);
    r.cycles_per_s = json_num(line, "cycles_per_s", 0);
    r.p50 = json_num(line, "p50_ms", 0);
    r.p99 = json_num(line, "p99_ms", 0);
    r.p999 = json_num(line, "p999_ms", 0);
    r.own_cpu_s_per_1000 = per_1000(json_num(line, "cpu_s", -1), r.cycles);
    r.masters_cpu_s_per_1000 = per_1000(mcpu0 < 0 || mcpu1 < 0 ? -1 : mcpu1 - mcpu0, r.cycles);
    if (!node_versions[0]) {
        char rl[32] = "", io[32] = "", nd[32] = "";
        json_str(line, "redlock", rl, sizeof rl);
        json_str(line, "ioredis", io, sizeof io);
        json_str(line, "node", nd, sizeof nd);
        snprintf(node_versions, sizeof node_versions, "redlock %s, ioredis %s (enableAutoPipelining), node %s", rl,
                 io, nd);
    }
    return r;
}

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
static double healthz_p50_ms(int port, int n)
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
        if (blocking_call(fd, "GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n", NULL, 0) != 200)
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
    snprintf(acq, sizeof acq, "POST /locks/handoff HTTP/1.1\r\nHost: b\r\nContent-Length: %zu\r\n\r\n%s",
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
        snprintf(rel, sizeof rel, "DELETE /locks/handoff HTTP/1.1\r\nHost: b\r\nLock-Token: %s\r\n"
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

typedef struct handoff_result {
    long handoffs, errors;
    double p50, p99, max;
} handoff_result;

/* Waiters on two instances contend for one name; each takes the lock,
 * releases it at once and asks again. Measures release answered -> next
 * waiter's grant answered. */
static handoff_result run_handoff(int port_a, int port_b, double seconds)
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

/* ---- main ---- */

/* The "new" rows: a new name for every acquire (one lock per order id). */
enum { ROW_FLOOR, ROW_NODE, ROW_T1, ROW_T2, ROW_NODE_NEW, ROW_T1_NEW, NROWS };
static const char *const row_name[NROWS] = {"floor", "node-redlock", "redlockd t1", "redlockd t2",
                                            "node-redlock new", "redlockd t1 new"};
static const char *const row_json[NROWS] = {"floor", "node_redlock", "redlockd_t1", "redlockd_t2",
                                            "node_redlock_new_names", "redlockd_t1_new_names"};
static const int row_threads[2] = {1, 2};   /* redlockd t1, t2 */

static void print_header(void)
{
    printf("| clients | what             | cycles/s | acquire p50 ms | p99 ms | p99.9 ms | errors "
           "| masters CPU s/1000 cycles | own CPU s/1000 cycles |\n");
    printf("|--------:|------------------|---------:|---------------:|-------:|---------:|-------:"
           "|--------------------------:|----------------------:|\n");
}

static void fmt3(char *out, size_t len, double v)
{
    if (v >= 0)
        snprintf(out, len, "%.3f", v);
    else
        out[0] = '\0';
}

static void print_row(const char *what, const result *r)
{
    char mc[32], oc[32];
    fmt3(mc, sizeof mc, r->masters_cpu_s_per_1000);
    fmt3(oc, sizeof oc, r->own_cpu_s_per_1000);
    printf("| %7d | %-16s | %8.0f | %14.3f | %6.3f | %8.3f | %6ld | %25s | %21s |\n", r->clients, what,
           r->cycles_per_s, r->p50, r->p99, r->p999, r->errors, mc, oc);
}

/* a/b of two measured rows, or -1. */
static double ratio(const result *a, const result *b, bool p50)
{
    if (!a->ran || !b->ran)
        return -1;
    double x = p50 ? a->p50 : a->cycles_per_s, y = p50 ? b->p50 : b->cycles_per_s;
    return x > 0 && y > 0 ? x / y : -1;
}

/* a/b of the masters' CPU per 1000 cycles of two measured rows, or -1. */
static double cpu_ratio(const result *a, const result *b)
{
    if (!a->ran || !b->ran || a->masters_cpu_s_per_1000 <= 0 || b->masters_cpu_s_per_1000 <= 0)
        return -1;
    return a->masters_cpu_s_per_1000 / b->masters_cpu_s_per_1000;
}

static void fmt2(char *out, size_t len, double v)
{
    if (v >= 0)
        snprintf(out, len, "%.2f", v);
    else
        out[0] = '\0';
}

static void json_string(FILE *j, const char *s)
{
    fputc('"', j);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(j, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(j, "\\u%04x", *s);
        else
            fputc(*s, j);
    }
    fputc('"', j);
}

static void json_double(FILE *j, int decimals, double v)
{
    if (v >= 0)
        fprintf(j, "%.*f", decimals, v);
    else
        fputs("null", j);
}

static void json_row(FILE *j, const result *r)
{
    if (!r->ran) {
        fputs("null", j);
        return;
    }
    fprintf(j,
            "{\"cycles\":%ld,\"seconds\":%.3f,\"cycles_per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
            "\"p999_ms\":%.3f,\"errors\":%ld,\"masters_cpu_s_per_1000_cycles\":",
            r->cycles, r->seconds, r->cycles_per_s, r->p50, r->p99, r->p999, r->errors);
    json_double(j, 4, r->masters_cpu_s_per_1000);
    fputs(",\"own_cpu_s_per_1000_cycles\":", j);
    json_double(j, 4, r->own_cpu_s_per_1000);
    fputc('}', j);
}

int main(int argc, char **argv)
{
    double seconds = 5;
    int levels[MAX_LEVELS] = {1, 8, 64, 256}, nlevels = 4;
    const char *json_path = "bench-result.json", *bin = "build/src/redlockd", *masters_arg = NULL;
    const char *label = "", *node_dir = BENCH_NODE_DIR;
    bool use_node = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--levels") && i + 1 < argc) {
            nlevels = 0;
            for (char *t = strtok(argv[++i], ","); t && nlevels < MAX_LEVELS; t = strtok(NULL, ","))
                levels[nlevels++] = atoi(t);
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (!strcmp(argv[i], "--redlockd") && i + 1 < argc) {
            bin = argv[++i];
        } else if (!strcmp(argv[i], "--masters") && i + 1 < argc) {
            masters_arg = argv[++i];
        } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
            label = argv[++i];
        } else if (!strcmp(argv[i], "--no-node")) {
            use_node = false;
        } else if (!strcmp(argv[i], "--node-dir") && i + 1 < argc) {
            node_dir = argv[++i];
        } else {
            fprintf(stderr, "usage: bench [--seconds S] [--levels 1,8,64,256] [--json FILE] "
                            "[--redlockd PATH] [--masters h:p,...] [--label TEXT] [--no-node] [--node-dir DIR]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/redlockd-bench-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");

    char node_note[1200] = "skipped: --no-node";
    const char *node_script = use_node ? node_prepare(node_dir, node_note, sizeof node_note) : NULL;

    pid_t redis[NMASTERS] = {0};
    char masters[512] = "";
    if (masters_arg) {
        snprintf(masters, sizeof masters, "%s", masters_arg);
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", masters_arg);
        int k = 0;
        for (char *t = strtok(tmp, ","); t && k < NMASTERS; t = strtok(NULL, ",")) {
            char *colon = strrchr(t, ':');
            if (!colon)
                break;
            snprintf(master_host[k], MAX_HOST, "%.*s", (int)(colon - t), t);
            master_port[k++] = atoi(colon + 1);
        }
        if (k != NMASTERS) {
            fprintf(stderr, "bench: --masters needs five masters, host:port each\n");
            return 2;
        }
    } else {
        size_t o = 0;
        for (int m = 0; m < NMASTERS; m++) {
            master_port[m] = free_port();
            snprintf(master_host[m], MAX_HOST, "127.0.0.1");
            char port[16], log[340], mdir[300];
            snprintf(port, sizeof port, "%d", master_port[m]);
            snprintf(mdir, sizeof mdir, "%s/m%d", dir, m);
            mkdir(mdir, 0755);
            snprintf(log, sizeof log, "%s/redis.log", mdir);
            char *av[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", mdir,
                          "--save", "", "--appendonly", "no", NULL};
            redis[m] = spawn(av, log);
            o += (size_t)snprintf(masters + o, sizeof masters - o, "%s127.0.0.1:%d", m ? "," : "", master_port[m]);
        }
        for (int m = 0; m < NMASTERS; m++)
            wait_port(master_port[m], "redis-server");
    }
    for (int m = 0; m < NMASTERS; m++) {
        redisContext *c = redisConnect(master_host[m], master_port[m]);
        redisReply *r = c && !c->err ? redisCommand(c, "SCRIPT LOAD %s", RELEASE_LUA) : NULL;
        if (!r || r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "bench: cannot reach master %s:%d\n", master_host[m], master_port[m]);
            return 1;
        }
        snprintf(release_sha, sizeof release_sha, "%s", r->str);
        freeReplyObject(r);
        redisFree(c);
    }
    if (masters_cpu_s() < 0)
        fprintf(stderr, "bench: INFO cpu fails on a master: the masters' CPU is left blank\n");

    /* redlockd twice on the same masters: --threads 1 and --threads 2. */
    pid_t daemon[2];
    int http_port[2];
    for (int k = 0; k < 2; k++) {
        http_port[k] = free_port();
        char listen[64], log[300], threads[8];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", http_port[k]);
        snprintf(log, sizeof log, "%s/redlockd-t%d.log", dir, row_threads[k]);
        snprintf(threads, sizeof threads, "%d", row_threads[k]);
        char *av[] = {(char *)bin, "--listen", listen, "--masters", masters, "--log-level", "warn",
                      "--threads", threads, NULL};
        daemon[k] = spawn(av, log);
        wait_port(http_port[k], "redlockd");
    }
    usleep(300000);   /* masters connected */

    result res[MAX_LEVELS][NROWS];
    memset(res, 0, sizeof res);
    long max_rss[2] = {0, 0};
    printf("redlockd benchmark %s: %.1f s per level, acquire+release cycles, five masters\n\n", label, seconds);
    if (!node_script)
        printf("node-redlock: %s\n\n", node_note);
    print_header();
    for (int i = 0; i < nlevels; i++) {
        res[i][ROW_FLOOR] = run_floor(levels[i], seconds);
        print_row(row_name[ROW_FLOOR], &res[i][ROW_FLOOR]);
        fflush(stdout);
        if (node_script) {
            char log[300];
            snprintf(log, sizeof log, "%s/node-redlock.log", dir);
            res[i][ROW_NODE] = run_node(node_script, masters, levels[i], seconds, log, false);
            if (res[i][ROW_NODE].ran)
                print_row(row_name[ROW_NODE], &res[i][ROW_NODE]);
            fflush(stdout);
        }
        for (int k = 0; k < 2; k++) {
            res[i][ROW_T1 + k] = run_http(http_port[k], levels[i], seconds, daemon[k], false);
            print_row(row_name[ROW_T1 + k], &res[i][ROW_T1 + k]);
            long hwm = proc_kib(daemon[k], "VmHWM:");
            if (hwm > max_rss[k])
                max_rss[k] = hwm;
            fflush(stdout);
        }
        /* New names: the same, with a name never used before per acquire. */
        if (node_script) {
            char log[300];
            snprintf(log, sizeof log, "%s/node-redlock.log", dir);
            res[i][ROW_NODE_NEW] = run_node(node_script, masters, levels[i], seconds, log, true);
            if (res[i][ROW_NODE_NEW].ran)
                print_row(row_name[ROW_NODE_NEW], &res[i][ROW_NODE_NEW]);
            fflush(stdout);
        }
        res[i][ROW_T1_NEW] = run_http(http_port[0], levels[i], seconds, daemon[0], true);
        print_row(row_name[ROW_T1_NEW], &res[i][ROW_T1_NEW]);
        fflush(stdout);
    }
    if (node_script && node_versions[0])
        printf("\nnode-redlock: %s\n", node_versions);
    else
        printf("\nnode-redlock: %s\n", node_script ? "no result (see the errors above)" : node_note);

    printf("\n| clients | p50 t2/floor | p50 t1/floor | cycles/s t2/floor | cycles/s t1/floor "
           "| cycles/s t2/node-redlock | cycles/s t1/node-redlock | cycles/s t2/t1 |\n"
           "|--------:|---:|---:|---:|---:|---:|---:|---:|\n");
    int grew = 0;
    for (int i = 0; i < nlevels; i++) {
        const result *r = res[i];
        double v[7] = {ratio(&r[ROW_T2], &r[ROW_FLOOR], true),  ratio(&r[ROW_T1], &r[ROW_FLOOR], true),
                       ratio(&r[ROW_T2], &r[ROW_FLOOR], false), ratio(&r[ROW_T1], &r[ROW_FLOOR], false),
                       ratio(&r[ROW_T2], &r[ROW_NODE], false),  ratio(&r[ROW_T1], &r[ROW_NODE], false),
                       ratio(&r[ROW_T2], &r[ROW_T1], false)};
        char c[7][16];
        for (int k = 0; k < 7; k++)
            fmt2(c[k], sizeof c[k], v[k]);
        printf("| %7d | %s | %s | %s | %s | %s | %s | %s |\n", levels[i], c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        if (v[6] > 1)
            grew++;
    }
    printf("\nthroughput must grow with threads: t2/t1 above 1 at %d of %d levels\n", grew, nlevels);

    /* The masters' CPU per cycle, redlockd t1 over node-redlock, for both
     * name patterns, and new names over reused names for each. */
    printf("\n| clients | masters CPU/cycle t1/node-redlock, reused names | same, new names "
           "| t1 new/reused names | node-redlock new/reused names | t1 fence raises/cycle, reused names "
           "| same, new names |\n|--------:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < nlevels; i++) {
        const result *r = res[i];
        double v[4] = {cpu_ratio(&r[ROW_T1], &r[ROW_NODE]), cpu_ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW]),
                       cpu_ratio(&r[ROW_T1_NEW], &r[ROW_T1]), cpu_ratio(&r[ROW_NODE_NEW], &r[ROW_NODE])};
        char c[4][16];
        for (int k = 0; k < 4; k++)
            fmt2(c[k], sizeof c[k], v[k]);
        char ra[2][16];
        snprintf(ra[0], sizeof ra[0], "%.3f", r[ROW_T1].raises_per_cycle);
        snprintf(ra[1], sizeof ra[1], "%.3f", r[ROW_T1_NEW].raises_per_cycle);
        printf("| %7d | %s | %s | %s | %s | %s | %s |\n", levels[i], c[0], c[1], c[2], c[3], ra[0], ra[1]);
    }
    printf("redlockd peak RSS: t1 %.1f MiB, t2 %.1f MiB\n", (double)max_rss[0] / 1024.0,
           (double)max_rss[1] / 1024.0);

    /* The targets of issue 22, as ratios within this run. */
    double hz = healthz_p50_ms(http_port[0], 2000);
    printf("\ntargets of issue 22 (this run):\n");
    for (int i = 0; i < nlevels; i++) {
        const result *r = res[i];
        if (levels[i] == 1) {
            double bound = 1.2 * (r[ROW_FLOOR].p50 + hz);
            printf("* 1 client: acquire p50 t1 %.3f ms, t1 new %.3f ms; bound 1.2 x (floor p50 %.3f + /healthz "
                   "p50 %.3f) = %.3f ms: %s\n", r[ROW_T1].p50, r[ROW_T1_NEW].p50, r[ROW_FLOOR].p50, hz, bound,
                   r[ROW_T1].p50 <= bound && r[ROW_T1_NEW].p50 <= bound ? "met" : "missed");
        }
        if (levels[i] == 64 && r[ROW_NODE].ran && r[ROW_NODE_NEW].ran) {
            double c = ratio(&r[ROW_T1], &r[ROW_NODE], false), cn = ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW], false);
            double m = cpu_ratio(&r[ROW_T1], &r[ROW_NODE]), mn = cpu_ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW]);
            printf("* 64 clients: cycles/s t1/node-redlock %.2f reused, %.2f new names (target >= 1.3): %s\n", c, cn,
                   c >= 1.3 && cn >= 1.3 ? "met" : "missed");
            printf("* 64 clients: masters CPU/cycle t1/node-redlock %.2f reused, %.2f new names (target <= 1.2): "
                   "%s\n", m, mn, m <= 1.2 && mn <= 1.2 ? "met" : "missed");
        }
        if (levels[i] == 64)
            printf("* 64 clients: fence raises per cycle %.3f reused, %.3f new names (target about 0)\n",
                   r[ROW_T1].raises_per_cycle, r[ROW_T1_NEW].raises_per_cycle);
    }

    /* Handoff: a second instance on the same masters, then the same with
     * release notices off (sleep-and-retry, --retry-delay-ms 100). */
    handoff_result ho[2];
    const char *ho_label[2] = {"notices on (default)", "notices off: timed retries"};
    for (int v = 0; v < 2; v++) {
        pid_t inst[2];
        int ports_ho[2];
        for (int k = 0; k < 2; k++) {
            ports_ho[k] = free_port();
            char l[64], lg[360];
            snprintf(l, sizeof l, "127.0.0.1:%d", ports_ho[k]);
            snprintf(lg, sizeof lg, "%s/handoff-%d-%d.log", dir, v, k);
            char *hv[] = {(char *)bin, "--listen", l, "--masters", masters, "--log-level", "warn",
                          "--notify", v == 0 ? "on" : "off", NULL};
            inst[k] = spawn(hv, lg);
            wait_port(ports_ho[k], "redlockd");
        }
        usleep(300000);
        ho[v] = run_handoff(ports_ho[0], ports_ho[1], seconds);
        for (int k = 0; k < 2; k++) {
            kill(inst[k], SIGTERM);
            waitpid(inst[k], NULL, 0);
        }
    }
    printf("\nHandoff: release answered -> next waiter granted, 2 instances, 2 waiters on each, one name\n\n");
    printf("| mode | handoffs | p50 ms | p99 ms | max ms | errors |\n|---|---:|---:|---:|---:|---:|\n");
    for (int v = 0; v < 2; v++)
        printf("| %s | %ld | %.3f | %.3f | %.3f | %ld |\n", ho_label[v], ho[v].handoffs, ho[v].p50, ho[v].p99,
               ho[v].max, ho[v].errors);

    FILE *j = fopen(json_path, "w");
    if (j) {
        fputs("{\"label\":", j);
        json_string(j, label);
        fprintf(j, ",\"seconds_per_level\":%.1f,\"redlockd_t1_peak_rss_kib\":%ld,\"redlockd_t2_peak_rss_kib\":%ld,",
                seconds, max_rss[0], max_rss[1]);
        fputs("\"node_redlock\":", j);
        json_string(j, node_script && node_versions[0] ? node_versions : node_script ? "no result" : node_note);
        fputs(",\"levels\":[", j);
        for (int i = 0; i < nlevels; i++) {
            const result *r = res[i];
            fprintf(j, "%s{\"clients\":%d", i ? "," : "", levels[i]);
            for (int k = 0; k < NROWS; k++) {
                fprintf(j, ",\"%s\":", row_json[k]);
                json_row(j, &r[k]);
            }
            fputs(",\"ratios\":{\"p50_t2_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_FLOOR], true));
            fputs(",\"p50_t1_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T1], &r[ROW_FLOOR], true));
            fputs(",\"cycles_t2_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_FLOOR], false));
            fputs(",\"cycles_t1_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T1], &r[ROW_FLOOR], false));
            fputs(",\"cycles_t2_node_redlock\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_NODE], false));
            fputs(",\"cycles_t1_node_redlock\":", j);
            json_double(j, 3, ratio(&r[ROW_T1], &r[ROW_NODE], false));
            fputs(",\"cycles_t2_t1\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_T1], false));
            fputs(",\"masters_cpu_t1_node_redlock\":", j);
            json_double(j, 3, cpu_ratio(&r[ROW_T1], &r[ROW_NODE]));
            fputs(",\"masters_cpu_t1_node_redlock_new_names\":", j);
            json_double(j, 3, cpu_ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW]));
            fputs(",\"fence_raises_per_cycle_t1\":", j);
            json_double(j, 4, r[ROW_T1].raises_per_cycle);
            fputs(",\"fence_raises_per_cycle_t1_new_names\":", j);
            json_double(j, 4, r[ROW_T1_NEW].raises_per_cycle);
            fputs(",\"masters_cpu_t1_new_over_reused_names\":", j);
            json_double(j, 3, cpu_ratio(&r[ROW_T1_NEW], &r[ROW_T1]));
            fputs("}}", j);
        }
        fprintf(j, "],\"handoff\":{\"notices\":{\"handoffs\":%ld,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"errors\":%ld},"
                   "\"timed_retries\":{\"handoffs\":%ld,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"errors\":%ld}}}\n",
                ho[0].handoffs, ho[0].p50, ho[0].p99, ho[0].errors, ho[1].handoffs, ho[1].p50, ho[1].p99,
                ho[1].errors);
        fclose(j);
        printf("JSON: %s\n", json_path);
    }

    for (int k = 0; k < 2; k++) {
        kill(daemon[k], SIGTERM);
        waitpid(daemon[k], NULL, 0);
    }
    for (int m = 0; m < NMASTERS; m++) {
        if (info_ctx[m])
            redisFree(info_ctx[m]);
        if (redis[m] > 0) {
            kill(redis[m], SIGKILL);
            waitpid(redis[m], NULL, 0);
        }
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: could not remove %s\n", dir);
    long errs = 0;
    for (int i = 0; i < nlevels; i++)
        errs += res[i][ROW_T1].errors + res[i][ROW_T2].errors + res[i][ROW_T1_NEW].errors;
    return errs ? 1 : 0;
}
