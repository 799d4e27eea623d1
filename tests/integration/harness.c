/* harness.c - see harness.h: processes (masters, redlockd, peers), ports,
 * the clock. Clients of them (HTTP, streams, raw sockets, Redis) are in
 * harness_client.c. */
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

void h_die(const char *what)
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
        h_die("socket");
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
        h_die("mkdir " H_PORT_DIR);
    for (int tries = 0; tries < H_PORT_SPAN; tries++) {
        int port = H_PORT_MIN + (int)(next++ % H_PORT_SPAN);
        char path[64];
        snprintf(path, sizeof path, H_PORT_DIR "/%d", port);
        int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);   /* flock needs no write access */
        if (fd < 0)
            h_die(path);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && port_bindable(port))
            return port;   /* fd stays open: the reservation lasts as long as this process */
        close(fd);
    }
    errno = EADDRINUSE;
    h_die("free port");
    return -1;
}

static pid_t fork_child(char *const argv[], const char *log_path, bool is_daemon)
{
    pid_t pid = fork();
    if (pid < 0)
        h_die("fork");
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
            h_die("pthread_create");
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

pid_t h_spawn(char *const argv[], const char *log_path)
{
    return spawn(argv, log_path, false);
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
        h_die("mkdtemp");
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
    snprintf(c->base, sizeof c->base, "%s://127.0.0.1:%d", c->cacert ? "https" : "http", c->http_port);
    if (c->peer)
        snprintf(c->log, sizeof c->log, "%s/redlockd-peer%d.log", c->dir, c->peer);
    else
        snprintf(c->log, sizeof c->log, "%s/redlockd.log", c->dir);
    char listen[64], masters[512] = "";
    snprintf(listen, sizeof listen, "127.0.0.1:%d", c->http_port);
    size_t o = 0;
    for (int i = 0; i < c->n; i++)
        o += (size_t)snprintf(masters + o, sizeof masters - o, "%s%s%s127.0.0.1:%d", i ? "," : "",
                              c->scheme ? c->scheme : "", c->scheme ? "://" : "", h_master_addr_port(c, i));
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
    bool own_listen = false;   /* the test names its listeners: they replace the harness's */
    while ((arg = va_arg(ap, const char *)) && a < 62) {
        own_listen |= !strcmp(arg, "--listen");
        argv[a++] = (char *)arg;
    }
    argv[a] = NULL;
    if (own_listen)   /* (--listen may be given more than once: they would add up) */
        memmove(&argv[1], &argv[3], (size_t)(a - 2) * sizeof argv[0]);
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

/* kill() returns before every thread of the process has taken the stop;
 * waits until they have (or it ended), and leaves its status unreaped. */
void h_stop_process(pid_t pid)
{
    if (kill(pid, SIGSTOP) < 0)
        return;
    siginfo_t si;
    while (waitid(P_PID, (id_t)pid, &si, WSTOPPED | WEXITED | WNOWAIT) < 0 && errno == EINTR)
        ;
}

void h_master_pause(h_cluster *c, int i) { h_stop_process(c->m[i].pid); }
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

void h_free_pair(h_cluster **c, h_cluster **peer)
{
    h_peer_free(*peer);
    *peer = NULL;
    h_cluster_free(*c);
    *c = NULL;
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
    h_proxies_free(c);
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
