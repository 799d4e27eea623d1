/* harness.c - see harness.h. */
#include "harness.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "harness: %s: %s\n", what, strerror(errno));
    abort();
}

uint64_t h_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

/* Ports for test servers come from below the kernel's ephemeral range, so
 * no outgoing connection (of redlockd, curl or a master) can be holding one,
 * and each is reserved by a lock on a file in H_PORT_DIR that this process
 * holds until it exits (criterion runs every test in a process of its own).
 * Test processes running side by side thus never pick the same port; a bind
 * test skips ports that something else listens on. */
#define H_PORT_DIR "/tmp/redlockd-test-ports"
#define H_PORT_MIN 20000
#define H_PORT_SPAN 12000

static bool port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);   /* as redis-server does */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int h_free_port(void)
{
    static unsigned next;
    if (!next)
        next = (unsigned)getpid() * 7919u + (unsigned)(h_now_us() % 100000);
    if (mkdir(H_PORT_DIR, 01777) == 0)
        chmod(H_PORT_DIR, 01777);   /* past the umask: every user's tests share it */
    else if (errno != EEXIST)
        die("mkdir " H_PORT_DIR);
    for (int tries = 0; tries < H_PORT_SPAN; tries++) {
        int port = H_PORT_MIN + (int)(next++ % H_PORT_SPAN);
        char path[64];
        snprintf(path, sizeof path, H_PORT_DIR "/%d", port);
        int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);   /* flock needs no write access */
        if (fd < 0)
            die(path);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && port_bindable(port))
            return port;   /* fd stays open: the reservation lasts as long as this process */
        close(fd);
    }
    errno = EADDRINUSE;
    die("free port");
    return -1;
}

static pid_t fork_child(char *const argv[], const char *log_path, bool is_daemon)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (is_daemon) {
            /* In a sanitizer build the daemon reports leaks at exit, into its
             * log, where h_check_log finds them. */
            setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=99", 1);
            setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1:exitcode=99", 1);
        }
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* A child dies with the test that started it (PR_SET_PDEATHSIG), but Linux
 * sends that signal when the thread that forked it ends: masters restarted
 * by a scenario's fault thread were killed the moment that thread returned,
 * and the run's last seconds had no majority. So every fork happens on one
 * spawner thread that lives as long as the test process. */
struct spawn_job {
    char *const *argv;
    const char *log_path;
    bool is_daemon;
    pid_t pid;
    bool done;
};

static pthread_mutex_t spawn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spawn_cv = PTHREAD_COND_INITIALIZER;
static struct spawn_job *spawn_next;
static pid_t spawner_of;   /* the process whose spawner thread runs (criterion forks a process per test) */

static void *spawner_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&spawn_mu);
    for (;;) {
        while (!spawn_next)
            pthread_cond_wait(&spawn_cv, &spawn_mu);
        struct spawn_job *j = spawn_next;
        spawn_next = NULL;
        j->pid = fork_child(j->argv, j->log_path, j->is_daemon);
        j->done = true;
        pthread_cond_broadcast(&spawn_cv);
    }
    return NULL;
}

static pid_t spawn(char *const argv[], const char *log_path, bool is_daemon)
{
    struct spawn_job j = {argv, log_path, is_daemon, 0, false};
    pthread_mutex_lock(&spawn_mu);
    if (spawner_of != getpid()) {
        pthread_t t;
        if (pthread_create(&t, NULL, spawner_main, NULL) != 0)
            die("pthread_create");
        pthread_detach(t);
        spawner_of = getpid();
    }
    while (spawn_next)
        pthread_cond_wait(&spawn_cv, &spawn_mu);
    spawn_next = &j;
    pthread_cond_broadcast(&spawn_cv);
    while (!j.done)
        pthread_cond_wait(&spawn_cv, &spawn_mu);
    pthread_mutex_unlock(&spawn_mu);
    return j.pid;
}

static bool redis_ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = false;
    if (ctx && !ctx->err) {
        redisSetTimeout(ctx, tv);
        redisReply *r = redisCommand(ctx, "PING");
        /* Up is up: a password-protected master answers NOAUTH. */
        ok = r && (r->type == REDIS_REPLY_STATUS ||
                   (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOAUTH", 6)));
        if (r)
            freeReplyObject(r);
    }
    if (ctx)
        redisFree(ctx);
    return ok;
}

/* A TLS port cannot be pinged without TLS: it is up once it accepts. */
static bool port_accepts(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void master_spawn(h_cluster *c, int i)
{
    h_master *m = &c->m[i];
    char port[16], log[300];
    snprintf(port, sizeof port, "%d", m->port);
    snprintf(log, sizeof log, "%s/redis.log", m->dir);
    bool tls = c->port_flag && !strcmp(c->port_flag, "--tls-port");
    char *argv[64];
    int a = 0;
    argv[a++] = "redis-server";
    if (tls) {
        argv[a++] = "--port";
        argv[a++] = "0";
    }
    argv[a++] = (char *)(c->port_flag ? c->port_flag : "--port");
    argv[a++] = port;
    argv[a++] = "--bind";
    argv[a++] = "127.0.0.1";
    argv[a++] = "--dir";
    argv[a++] = m->dir;
    argv[a++] = "--save";
    argv[a++] = "";
    argv[a++] = "--appendonly";
    argv[a++] = "no";
    char extra[1024];
    if (c->extra_redis) {
        snprintf(extra, sizeof extra, "%s", c->extra_redis);
        char *save = NULL;
        for (char *t = strtok_r(extra, " ", &save); t && a < 62; t = strtok_r(NULL, " ", &save))
            argv[a++] = t;
    }
    argv[a] = NULL;
    m->pid = spawn(argv, log, false);
    for (int tries = 0; tries < 200; tries++) {
        /* The answer must come from the process just started, not from a
         * server that already had the port. */
        if ((tls ? port_accepts(m->port) : redis_ping(m->port)) && waitpid(m->pid, NULL, WNOHANG) == 0)
            return;
        usleep(10000);
    }
    fprintf(stderr, "harness: redis-server on %d did not start\n", m->port);
    abort();
}

h_cluster *h_cluster_start(int n, const char *extra_redis)
{
    return h_cluster_start_with(n, extra_redis, NULL, NULL);
}

h_cluster *h_cluster_start_with(int n, const char *extra_redis, const char *port_flag,
                                const char *scheme)
{
    h_cluster *c = calloc(1, sizeof *c);
    c->n = n;
    c->extra_redis = extra_redis;
    c->port_flag = port_flag;
    c->scheme = scheme;
    snprintf(c->dir, sizeof c->dir, "/tmp/redlockd-it-XXXXXX");
    if (!mkdtemp(c->dir))
        die("mkdtemp");
    for (int i = 0; i < n; i++) {
        c->m[i].port = h_free_port();
        snprintf(c->m[i].dir, sizeof c->m[i].dir, "%s/m%d", c->dir, i);
        mkdir(c->m[i].dir, 0755);
        master_spawn(c, i);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return c;
}

static void daemon_startv(h_cluster *c, bool wait_ready, va_list ap)
{
    const char *bin = getenv("REDLOCKD_BIN");
    if (!bin)
        bin = "redlockd";
    if (!c->http_port)
        c->http_port = h_free_port();   /* a restart keeps the port clients use */
    snprintf(c->base, sizeof c->base, "http://127.0.0.1:%d", c->http_port);
    if (c->peer)
        snprintf(c->log, sizeof c->log, "%s/redlockd-peer%d.log", c->dir, c->peer);
    else
        snprintf(c->log, sizeof c->log, "%s/redlockd.log", c->dir);
    char listen[64], masters[512] = "";
    snprintf(listen, sizeof listen, "127.0.0.1:%d", c->http_port);
    size_t o = 0;
    for (int i = 0; i < c->n; i++)
        o += (size_t)snprintf(masters + o, sizeof masters - o, "%s%s%s127.0.0.1:%d", i ? "," : "",
                              c->scheme ? c->scheme : "", c->scheme ? "://" : "", c->m[i].port);
    char *argv[64];
    int a = 0;
    argv[a++] = (char *)bin;
    argv[a++] = "--listen";
    argv[a++] = listen;
    argv[a++] = "--masters";
    argv[a++] = masters;
    argv[a++] = "--log-format";
    argv[a++] = "text";
    const char *arg;
    while ((arg = va_arg(ap, const char *)) && a < 62)
        argv[a++] = (char *)arg;
    argv[a] = NULL;
    c->daemon = spawn(argv, c->log, true);
    if (!h_wait_status(c, "/healthz", 200, 5000) || waitpid(c->daemon, NULL, WNOHANG) != 0) {
        fprintf(stderr, "harness: redlockd did not start (log %s)\n", c->log);
        abort();
    }
    if (!wait_ready)
        return;
    /* Ready once a majority can vote. With all masters up, wait for all of
     * them, and for the cluster's set-up to reach every marker: a master
     * restarted while its marker is still missing or pending was never
     * asked to vote, so a test would see it join instead of sit out. */
    h_wait_status(c, "/readyz", 200, 5000);
    for (int tries = 0; tries < 300; tries++) {
        h_resp r = h_http(c, "GET", "/readyz", NULL, NULL);
        bool all = r.json && h_int(&r, "masters_up") == c->n;
        cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(r.json, "masters")) {
            const char *mk = cJSON_GetStringValue(cJSON_GetObjectItem(m, "marker"));
            if (mk && (!strcmp(mk, "missing") || !strcmp(mk, "pending")))
                all = false;
        }
        h_resp_free(&r);
        if (all)
            break;
        usleep(10000);
    }
}

void h_daemon_start(h_cluster *c, ...)
{
    va_list ap;
    va_start(ap, c);
    daemon_startv(c, true, ap);
    va_end(ap);
}

void h_daemon_start_unready(h_cluster *c, ...)
{
    va_list ap;
    va_start(ap, c);
    daemon_startv(c, false, ap);
    va_end(ap);
}

h_cluster *h_peer_start(h_cluster *c, ...)
{
    static int next_peer;
    h_cluster *p = malloc(sizeof *p);
    *p = *c;
    p->daemon = 0;
    p->http_port = 0;
    p->peer = ++next_peer;
    va_list ap;
    va_start(ap, c);
    daemon_startv(p, true, ap);
    va_end(ap);
    return p;
}

/* Fails the test (abort) when the daemon's log holds a sanitizer report. */
static void h_check_log(h_cluster *c)
{
    FILE *f = fopen(c->log, "r");
    if (!f)
        return;
    char line[1024];
    bool bad = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "ERROR: AddressSanitizer") || strstr(line, "ERROR: LeakSanitizer") ||
            strstr(line, "runtime error:"))
            bad = true;
    if (bad) {
        rewind(f);
        fprintf(stderr, "harness: sanitizer report in %s:\n", c->log);
        while (fgets(line, sizeof line, f))
            fputs(line, stderr);
    }
    fclose(f);
    if (bad)
        abort();
}

int h_daemon_stop(h_cluster *c)
{
    if (c->daemon <= 0)
        return -1;
    kill(c->daemon, SIGTERM);
    int st = 0;
    for (int i = 0; i < 1500; i++) {
        pid_t r = waitpid(c->daemon, &st, WNOHANG);
        if (r == c->daemon) {
            c->daemon = 0;
            h_check_log(c);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(c->daemon, SIGKILL);
    waitpid(c->daemon, &st, 0);
    c->daemon = 0;
    return -1;
}

void h_daemon_kill(h_cluster *c)
{
    if (c->daemon <= 0)
        return;
    kill(c->daemon, SIGKILL);
    waitpid(c->daemon, NULL, 0);
    c->daemon = 0;
}

void h_master_pause(h_cluster *c, int i) { kill(c->m[i].pid, SIGSTOP); }
void h_master_resume(h_cluster *c, int i) { kill(c->m[i].pid, SIGCONT); }

void h_master_kill(h_cluster *c, int i)
{
    if (c->m[i].pid <= 0)
        return;
    kill(c->m[i].pid, SIGKILL);
    waitpid(c->m[i].pid, NULL, 0);
    c->m[i].pid = 0;
}

void h_master_restart(h_cluster *c, int i)
{
    h_master_kill(c, i);
    master_spawn(c, i);
}

void h_peer_free(h_cluster *p)
{
    if (!p)
        return;
    if (p->daemon > 0) {
        int st = h_daemon_stop(p);
        if (st != 0) {
            fprintf(stderr, "harness: peer redlockd exited with %d on SIGTERM (log %s)\n", st, p->log);
            abort();
        }
    }
    free(p);
}

void h_cluster_free(h_cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        if (c->m[i].pid > 0)
            kill(c->m[i].pid, SIGCONT);
    /* A clean stop lets a sanitizer build report leaks; the log is checked. */
    if (c->daemon > 0) {
        int st = h_daemon_stop(c);
        if (st != 0) {
            fprintf(stderr, "harness: redlockd exited with %d on SIGTERM (log %s)\n", st, c->log);
            abort();
        }
    }
    for (int i = 0; i < c->n; i++)
        h_master_kill(c, i);
    if (getenv("H_KEEP")) {
        fprintf(stderr, "harness: kept %s\n", c->dir);
        free(c);
        return;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "harness: could not remove %s\n", c->dir);
    free(c);
}

redisReply *h_redis(h_cluster *c, int i, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", c->m[i].port, tv);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

struct sink {
    char *buf;
    size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t add = size * n;
    s->buf = realloc(s->buf, s->len + add + 1);
    memcpy(s->buf + s->len, p, add);
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

static void grab_header(const char *line, size_t len, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    if (len > nl + 1 && !strncasecmp(line, name, nl) && line[nl] == ':') {
        const char *v = line + nl + 1;
        while (*v == ' ')
            v++;
        size_t vl = len - (size_t)(v - line);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
            vl--;
        if (vl >= outlen)
            vl = outlen - 1;
        memcpy(out, v, vl);
        out[vl] = '\0';
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    h_resp *r = arg;
    size_t len = size * n;
    grab_header(p, len, "Retry-After", r->retry_after, sizeof r->retry_after);
    grab_header(p, len, "Allow", r->allow, sizeof r->allow);
    grab_header(p, len, "Content-Type", r->content_type, sizeof r->content_type);
    return len;
}

h_resp h_http(h_cluster *c, const char *method, const char *path, const char *body, ...)
{
    h_resp r;
    memset(&r, 0, sizeof r);
    CURL *h = curl_easy_init();
    char url[2048];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    struct sink s = {NULL, 0};
    struct curl_slist *hdrs = NULL;
    va_list ap;
    va_start(ap, body);
    const char *line;
    while ((line = va_arg(ap, const char *)))
        hdrs = curl_slist_append(hdrs, line);
    va_end(ap);
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    uint64_t t0 = h_now_us();
    CURLcode rc = curl_easy_perform(h);
    r.seconds = (double)(h_now_us() - t0) / 1e6;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    else
        r.status = -1;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    r.body = s.buf ? s.buf : strdup("");
    r.json = cJSON_Parse(r.body);
    return r;
}

void h_resp_free(h_resp *r)
{
    free(r->body);
    cJSON_Delete(r->json);
    r->body = NULL;
    r->json = NULL;
}

const char *h_str(const h_resp *r, const char *field)
{
    const cJSON *v = r->json ? cJSON_GetObjectItemCaseSensitive(r->json, field) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

long long h_int(const h_resp *r, const char *field)
{
    const cJSON *v = r->json ? cJSON_GetObjectItemCaseSensitive(r->json, field) : NULL;
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -999999;
}

bool h_has(const h_resp *r, const char *field)
{
    return r->json && cJSON_GetObjectItemCaseSensitive(r->json, field) != NULL;
}

bool h_wait_status(h_cluster *c, const char *path, long want, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000ULL;
    do {
        h_resp r = h_http(c, "GET", path, NULL, NULL);
        long got = r.status;
        h_resp_free(&r);
        if (got == want)
            return true;
        usleep(20000);
    } while (h_now_us() < until);
    return false;
}

/* ---- held streams ---- */

/* Reads more bytes into s->buf, waiting until until_us. 1 read, 0 timeout,
 * -1 end or error. */
static int stream_fill(h_stream *s, uint64_t until_us)
{
    uint64_t now = h_now_us();
    if (now >= until_us)
        return 0;
    struct pollfd p = {s->fd, POLLIN, 0};
    int r = poll(&p, 1, (int)((until_us - now + 999) / 1000));
    if (r == 0)
        return 0;
    if (s->cap - s->len < 4096) {
        s->cap = s->cap * 2 + 8192;
        s->buf = realloc(s->buf, s->cap);
    }
    ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len - 1);
    if (n <= 0)
        return -1;
    s->len += (size_t)n;
    s->buf[s->len] = '\0';
    return 1;
}

static void stream_consume(h_stream *s, size_t n)
{
    memmove(s->buf, s->buf + n, s->len - n);
    s->len -= n;
    s->buf[s->len] = '\0';
}

h_stream *h_stream_open(h_cluster *c, const char *path, const char *body, int timeout_ms)
{
    return h_stream_open_at(c->http_port, path, body, timeout_ms);
}

static h_stream *stream_open(int port, const char *method, const char *path, const char *body,
                             int timeout_ms);

h_stream *h_stream_open_at(int port, const char *path, const char *body, int timeout_ms)
{
    return stream_open(port, "POST", path, body, timeout_ms);
}

h_stream *h_stream_get(h_cluster *c, const char *path, int timeout_ms)
{
    return stream_open(c->http_port, "GET", path, "", timeout_ms);
}

static h_stream *stream_open(int port, const char *method, const char *path, const char *body,
                             int timeout_ms)
{
    /* Close-on-exec: a master restarted meanwhile (a fork and exec) must not
     * keep the stream open after the test closes it. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", method, path, strlen(body), body);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    h_stream *s = calloc(1, sizeof *s);
    s->fd = fd;
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    char *end;
    while (!(s->buf && (end = strstr(s->buf, "\r\n\r\n")))) {
        if (stream_fill(s, until) <= 0) {
            h_stream_close(s);
            return NULL;
        }
    }
    *end = '\0';
    sscanf(s->buf, "HTTP/1.%*d %ld", &s->status);
    long long length = -1;
    for (char *line = strstr(s->buf, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        char *v = line + 2;
        if (!strncasecmp(v, "Content-Type:", 13))
            sscanf(v + 13, " %127[^\r]", s->content_type);
        else if (!strncasecmp(v, "Transfer-Encoding:", 18) && strstr(v, "chunked"))
            s->chunked = true;
        else if (!strncasecmp(v, "Content-Length:", 15))
            length = atoll(v + 15);
    }
    stream_consume(s, (size_t)(end + 4 - s->buf));
    if (!s->chunked) {
        /* An ordinary answer: read its body whole. */
        while (length >= 0 && (long long)s->len < length && stream_fill(s, until) > 0)
            ;
        s->body = strndup(s->buf ? s->buf : "", s->len);
        s->eof = true;
    }
    return s;
}

int h_stream_event(h_stream *s, int timeout_ms, cJSON **ev, uint64_t *recv_us)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    /* Chunks are decoded in place: their payload bytes are collected in
     * s->line until a newline ends an event. */
    char *line = s->line;
    size_t llen = s->llen;
    for (;;) {
        char *nl = memchr(line, '\n', llen);
        if (nl) {
            *nl = '\0';
            *ev = cJSON_Parse(line);
            size_t used = (size_t)(nl - line) + 1;
            memmove(line, line + used, llen - used);
            llen -= used;
            s->llen = llen;
            *recv_us = h_now_us();
            return *ev ? 1 : -1;
        }
        if (s->eof)
            return -1;
        if (s->chunk_left == 0) {
            char *crlf = s->buf ? strstr(s->buf, "\r\n") : NULL;
            if (crlf == s->buf && s->len >= 2) {   /* the CRLF after a chunk */
                stream_consume(s, 2);
                continue;
            }
            if (!crlf) {
                int r = stream_fill(s, until);
                if (r <= 0)
                    return r;
                continue;
            }
            size_t size = strtoul(s->buf, NULL, 16);
            stream_consume(s, (size_t)(crlf + 2 - s->buf));
            if (size == 0) {
                s->eof = true;
                continue;
            }
            s->chunk_left = size;
        }
        if (s->len == 0) {
            int r = stream_fill(s, until);
            if (r <= 0)
                return r;
            continue;
        }
        size_t k = s->len < s->chunk_left ? s->len : s->chunk_left;
        if (k > sizeof s->line - llen)
            return -1;
        memcpy(line + llen, s->buf, k);
        llen += k;
        s->llen = llen;
        s->chunk_left -= k;
        stream_consume(s, k);
    }
}

void h_stream_close(h_stream *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s->buf);
    free(s->body);
    free(s);
}

int h_raw_connect(h_cluster *c, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    if (src) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &sa.sin_addr);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
            die(src);
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->http_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0)
        die("connect");
    return fd;
}

void h_raw_send(int fd, const char *s)
{
    size_t len = strlen(s);
    if (write(fd, s, len) != (ssize_t)len)
        die("write");
}

size_t h_raw_read_all(int fd, char *buf, size_t cap, int timeout_ms, bool *closed)
{
    size_t n = 0;
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    *closed = false;
    while (h_now_us() < until && n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((until - h_now_us()) / 1000);
        if (poll(&p, 1, left > 0 ? left : 0) <= 0)
            break;
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0) {
            *closed = true;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

int h_raw_post(h_cluster *c, const char *path, const char *body)
{
    int fd = h_raw_connect(c, NULL);
    char req[1024];
    snprintf(req, sizeof req,
             "POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", path, strlen(body), body);
    h_raw_send(fd, req);
    return fd;
}

int h_raw_acquire(h_cluster *c, const char *name, const char *body)
{
    char path[300];
    snprintf(path, sizeof path, "/locks/%s", name);
    return h_raw_post(c, path, body);
}

void h_raw_reset(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

int h_keys_left(h_cluster *c, const char *name)
{
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        redisReply *r = h_redis(c, i, "EXISTS lock:%s", name);
        n += r ? (int)r->integer : 0;
        freeReplyObject(r);
    }
    return n;
}

static long long cmdstat_calls(h_cluster *c, int i, const char *cmd)
{
    redisReply *x = h_redis(c, i, "INFO commandstats");
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *at = x && x->str ? strstr(x->str, key) : NULL;
    long long v = at ? atoll(at + strlen(key)) : 0;
    freeReplyObject(x);
    return v;
}

long long h_script_calls(h_cluster *c, int i)
{
    return cmdstat_calls(c, i, "evalsha") + cmdstat_calls(c, i, "eval");
}

long long h_metric(h_cluster *c, const char *family)
{
    h_resp m = h_http(c, "GET", "/metrics", NULL, NULL);
    long long sum = 0;
    size_t fl = strlen(family);
    for (const char *line = m.body; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, family, fl) && (line[fl] == ' ' || line[fl] == '{'))
            sum += strtoll(strchr(line, ' ') + 1, NULL, 10);
    h_resp_free(&m);
    return sum;
}

bool h_held(h_cluster *c, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "/locks/%s", name);
    h_resp r = h_http(c, "GET", path, NULL, NULL);
    bool held = cJSON_IsTrue(cJSON_GetObjectItem(r.json, "held"));
    h_resp_free(&r);
    return held;
}
