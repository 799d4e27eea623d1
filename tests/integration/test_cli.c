/* Integration: the `redlock` command-line client, the real binary
 * (REDLOCK_BIN) against the real redlockd and real masters, as a user runs
 * it: exit codes, what CMD sees and when it is stopped, mutual exclusion of
 * many `redlock run`s, signals, and the README's examples as printed.
 *
 * CMD is often this test binary itself: a constructor turns it into a small
 * child (CLI_TEST_CHILD) that logs its start and end on CLOCK_MONOTONIC,
 * which every process of the machine shares. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;
static char T[64];         /* this test's folder: outputs, logs, markers */
static char SELF[512];     /* this test binary, run as CMD */

/* ---- CMD: this binary as a child ---- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void log_line(int fd, char kind)
{
    char line[160];
    const char *fence = getenv("REDLOCK_FENCE");
    int n = snprintf(line, sizeof line, "%c %llu %d %s\n", kind, (unsigned long long)mono_ns(),
                     (int)getpid(), fence ? fence : "0");
    if (write(fd, line, (size_t)n) != n)   /* O_APPEND: one line per write, whole */
        _exit(90);
}

/* CLI_TEST_CHILD=interval: appends "S <ns> <pid> <fence>" to CLI_TEST_LOG,
 * sleeps CLI_TEST_SLEEP_MS, appends "E ...", exits 0 (91 without a token). */
__attribute__((constructor)) static void cli_test_child(void)
{
    const char *mode = getenv("CLI_TEST_CHILD");
    if (!mode || strcmp(mode, "interval") != 0)
        return;
    int fd = open(getenv("CLI_TEST_LOG"), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        _exit(92);
    log_line(fd, 'S');
    long ms = atol(getenv("CLI_TEST_SLEEP_MS") ? getenv("CLI_TEST_SLEEP_MS") : "10");
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    log_line(fd, 'E');
    _exit(getenv("REDLOCK_TOKEN") || getenv("CLI_TEST_UNLOCKED") ? 0 : 91);
}

/* ---- the overlap checker ---- */

typedef struct interval {
    unsigned long long start, end;
    int pid;
    long long fence;
} interval;

static int by_start(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Reads a log of S/E lines. Returns the number of intervals that began
 * before an earlier one ended; *n gets the intervals, *fence_bad those whose
 * fence is not above the one before, *open those without an end. */
static int overlaps(const char *path, int *n, int *fence_bad, int *open_ones)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "no log %s", path);
    static interval iv[4096];
    int k = 0;
    char kind;
    unsigned long long t;
    int pid;
    long long fence;
    *open_ones = 0;
    while (fscanf(f, " %c %llu %d %lld", &kind, &t, &pid, &fence) == 4) {
        if (kind == 'S') {
            cr_assert_lt(k, 4096);
            iv[k++] = (interval){t, 0, pid, fence};
            continue;
        }
        int j = k - 1;
        while (j >= 0 && !(iv[j].pid == pid && iv[j].end == 0))
            j--;
        cr_assert_geq(j, 0, "an end without a start in %s", path);
        iv[j].end = t;
    }
    fclose(f);
    qsort(iv, (size_t)k, sizeof iv[0], by_start);
    int bad = 0;
    unsigned long long last_end = 0;
    *fence_bad = 0;
    for (int i = 0; i < k; i++) {
        if (iv[i].end == 0) {
            (*open_ones)++;
            continue;
        }
        if (i > 0 && iv[i].start < last_end)
            bad++;
        if (i > 0 && iv[i].fence <= iv[i - 1].fence)
            (*fence_bad)++;
        if (iv[i].end > last_end)
            last_end = iv[i].end;
    }
    *n = k;
    return bad;
}

/* ---- running redlock ---- */

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(T, sizeof T, "/tmp/redlock-cli-XXXXXX");
    cr_assert(mkdtemp(T), "mkdtemp: %s", strerror(errno));
    ssize_t n = readlink("/proc/self/exe", SELF, sizeof SELF - 1);
    cr_assert_gt(n, 0);
    SELF[n] = '\0';
    unsetenv("REDLOCK_URL");
    unsetenv("REDLOCK_AUTH_TOKEN");
}

static void teardown(void)
{
    h_cluster_free(C);
    C = NULL;
    if (getenv("H_KEEP")) {
        fprintf(stderr, "cli: kept %s\n", T);
        return;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", T);
    if (system(cmd) != 0)
        fprintf(stderr, "cli: could not remove %s\n", T);
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 150);

static const char *bin(void)
{
    const char *b = getenv("REDLOCK_BIN");
    return b ? b : "redlock";
}

static void path_of(char *out, size_t outlen, const char *file)
{
    snprintf(out, outlen, "%s/%s", T, file);
}

/* Starts redlock with args (NULL-terminated), its stdout and stderr in
 * T/tag.out and T/tag.err. */
static pid_t start_v(const char *tag, const char *const *args)
{
    char out[400], err[400];
    snprintf(out, sizeof out, "%s/%s.out", T, tag);
    snprintf(err, sizeof err, "%s/%s.err", T, tag);
    const char *argv[64];
    int a = 0;
    argv[a++] = bin();
    while (*args && a < 63)
        argv[a++] = *args++;
    argv[a] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit(120);
        dup2(o, 1);
        dup2(e, 2);
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        execv(argv[0], (char *const *)argv);
        _exit(121);
    }
    return pid;
}
#define START(tag, ...) start_v(tag, (const char *const[]){__VA_ARGS__, NULL})

/* Waits for pid; its exit code, or 128+N for a signal. Kills it and fails
 * the test after timeout_ms. */
static int finish(pid_t pid, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (h_now_us() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            cr_assert_fail("redlock still ran after %d ms", timeout_ms);
        }
        usleep(5000);
    }
}

static int run_v(const char *tag, const char *const *args)
{
    return finish(start_v(tag, args), 30000);
}
#define RUN(tag, ...) run_v(tag, (const char *const[]){__VA_ARGS__, NULL})

/* The contents of T/file ("" if absent); static, overwritten by the next call
 * of the same slot (0..3). */
static const char *slurp(int slot, const char *file)
{
    static char bufs[4][8192];
    char p[400];
    path_of(p, sizeof p, file);
    char *b = bufs[slot & 3];
    b[0] = '\0';
    FILE *f = fopen(p, "r");
    if (f) {
        size_t n = fread(b, 1, sizeof bufs[0] - 1, f);
        b[n] = '\0';
        fclose(f);
    }
    return b;
}

static const char *out_of(const char *tag)
{
    char f[128];
    snprintf(f, sizeof f, "%s.out", tag);
    return slurp(0, f);
}

static const char *err_of(const char *tag)
{
    char f[128];
    snprintf(f, sizeof f, "%s.err", tag);
    return slurp(1, f);
}

/* Waits up to timeout_ms for T/file to exist with content. */
static bool wait_file(const char *file, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    while (h_now_us() < until) {
        if (slurp(2, file)[0])
            return true;
        usleep(10000);
    }
    return false;
}

static void start_service(int n, ...)
{
    C = h_cluster_start(n, NULL);
    va_list ap;
    va_start(ap, n);
    const char *extra[8] = {0};
    for (int i = 0; i < 7; i++)
        if (!(extra[i] = va_arg(ap, const char *)))
            break;
    va_end(ap);
    h_daemon_start(C, extra[0], extra[1], extra[2], extra[3], extra[4], extra[5], extra[6], NULL);
    setenv("REDLOCK_URL", C->base, 1);
}

/* A sh -c script for CMD that traps the signals redlock passes on, writes
 * the one it got into T/got and exits 10 + its number (INT 12, HUP 11,
 * TERM 25); T/started gets its pid once it runs. */
static const char *trapping_child(char *buf, size_t len)
{
    snprintf(buf, len,
             "trap 'echo INT > %1$s/got; exit 12' INT; trap 'echo TERM > %1$s/got; exit 25' TERM; "
             "trap 'echo HUP > %1$s/got; exit 11' HUP; echo $$ > %1$s/started; "
             "while :; do sleep 0.05; done", T);
    return buf;
}

/* ---- the command line ---- */

Test(cli, usage_errors_exit_64)
{
    cr_assert_eq(RUN("u1", "acquire"), 64);
    cr_assert(strstr(err_of("u1"), "redlock: acquire: needs NAME"), "%s", err_of("u1"));
    cr_assert_eq(RUN("u2", "run", "--ttl", "30", "x", "--", "true"), 64);
    cr_assert(strstr(err_of("u2"), "a bare number"), "%s", err_of("u2"));
    cr_assert_eq(RUN("u3", "frobnicate"), 64);
    cr_assert_eq(RUN("u4", "run", "x"), 64);
    cr_assert_eq(RUN("u5", "status", "a/b"), 64);
    cr_assert_eq(RUN("u6", "run", "x", "--wait", "1s", "--", "true"), 64);
    cr_assert_eq(RUN("u7", NULL), 64);
    /* One line each, naming redlock. */
    const char *e = err_of("u3");
    cr_assert(!strncmp(e, "redlock: ", 9) && strchr(e, '\n') == e + strlen(e) - 1, "%s", e);
    cr_assert_eq(RUN("h1", "--help"), 0);
    cr_assert(strstr(out_of("h1"), "usage: redlock"));
    cr_assert_eq(RUN("h2", "run", "--help"), 0);
    cr_assert(strstr(out_of("h2"), "--grace"));
    cr_assert_eq(RUN("h3", "--version"), 0);
    cr_assert(strstr(out_of("h3"), "redlock "));
}

Test(cli, unreachable_service_exits_69)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", h_free_port());   /* reserved, closed */
    setenv("REDLOCK_URL", url, 1);
    cr_assert_eq(RUN("a", "acquire", "x"), 69);
    cr_assert(strstr(err_of("a"), "redlock: unreachable"), "%s", err_of("a"));
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    cr_assert_eq(RUN("r", "run", "x", "--", "touch", marker), 69);
    cr_assert_eq(RUN("s", "status", "x"), 69);
    cr_assert_eq(RUN("e", "extend", "x", "tok"), 69);
    cr_assert_eq(RUN("d", "release", "x", "tok"), 69);
    cr_assert_eq(RUN("y", "ready"), 69);
    /* --url wins over REDLOCK_URL. */
    cr_assert_eq(RUN("w", "--url", "http://127.0.0.1:1", "ready"), 69);
    cr_assert(strstr(err_of("w"), "127.0.0.1:1"), "%s", err_of("w"));
    cr_assert_eq(access(marker, F_OK), -1, "CMD ran without the lock");
}

/* ---- one call each ---- */

Test(cli, acquire_status_extend_release)
{
    start_service(5, NULL);
    cr_assert_eq(RUN("ready", "ready"), 0);
    cr_assert(strstr(out_of("ready"), "ready: 5 of 5 masters can vote"), "%s", out_of("ready"));
    cr_assert_eq(RUN("a", "acquire", "--ttl", "10s", "--owner", "batch 7", "orders"), 0, "%s", err_of("a"));
    char token[300];
    snprintf(token, sizeof token, "%s", out_of("a"));
    token[strcspn(token, "\n")] = '\0';
    cr_assert_geq(strlen(token), 20, "acquire printed '%s'", token);
    cr_assert_eq(RUN("s", "status", "orders"), 0);
    cr_assert(strstr(out_of("s"), "held: validity ") && strstr(out_of("s"), ", fence ") &&
              strstr(out_of("s"), "owner batch 7"), "%s", out_of("s"));
    cr_assert_eq(RUN("sj", "status", "--json", "orders"), 0);
    cr_assert(strstr(out_of("sj"), "\"held\":true"), "%s", out_of("sj"));
    /* held: a second acquire is refused at once */
    cr_assert_eq(RUN("a2", "acquire", "orders"), 75);
    cr_assert(strstr(err_of("a2"), "redlock: locked: ") && strstr(err_of("a2"), "retry after"),
              "%s", err_of("a2"));
    cr_assert_eq(RUN("x", "extend", "--ttl", "30s", "--json", "orders", token), 0, "%s", err_of("x"));
    cr_assert(strstr(out_of("x"), "\"ttl_ms\":30000"), "%s", out_of("x"));
    cr_assert_eq(RUN("d", "release", "orders", token), 0, "%s", err_of("d"));
    cr_assert_eq(RUN("s2", "status", "orders"), 1);
    cr_assert_str_eq(out_of("s2"), "not held\n");
    /* not_held on extend and release: 1, naming the reason */
    cr_assert_eq(RUN("x2", "extend", "orders", token), 1);
    cr_assert(strstr(err_of("x2"), "not_held") && strstr(err_of("x2"), "expired"), "%s", err_of("x2"));
    cr_assert_eq(RUN("d2", "release", "orders", token), 1);
    cr_assert(strstr(err_of("d2"), "redlock: not_held: "), "%s", err_of("d2"));
    cr_assert_eq(RUN("j", "acquire", "--json", "orders"), 0);
    cr_assert(strstr(out_of("j"), "\"fence\":") && strstr(out_of("j"), "\"validity_ms\":"), "%s", out_of("j"));
}

/* TOKEN is taken as it stands even when it begins with '-' (1 in 64
 * tokens did before redlockd stopped making such; a Dapr lockOwner still
 * may), and the names "." and ".." reach the service (libcurl removes them
 * from a path as dot segments unless they are percent-encoded). */
Test(cli, dash_tokens_and_dot_names)
{
    start_service(5, NULL);
    h_resp d = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore",
                      "{\"resourceId\":\"dash\",\"lockOwner\":\"-dash-owner\",\"expiryInSeconds\":10}",
                      NULL);
    cr_assert_eq(d.status, 200, "%s", d.body);
    cr_assert(strstr(d.body, "true"), "%s", d.body);
    h_resp_free(&d);
    cr_assert_eq(RUN("x", "extend", "--ttl", "20s", "lockstore:dash", "-dash-owner"), 0, "%s", err_of("x"));
    cr_assert_eq(RUN("d", "release", "lockstore:dash", "-dash-owner"), 0, "%s", err_of("d"));
    cr_assert_not(h_held(C, "lockstore:dash"), "release by a token that begins with '-' left it held");
    cr_assert_eq(RUN("d2", "release", "lockstore:dash", "-dash-owner", "--url", C->base), 1, "%s",
                 err_of("d2"));

    const char *dots[] = {".", ".."};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(RUN("a", "acquire", "--ttl", "10s", dots[i]), 0, "%s: %s", dots[i], err_of("a"));
        char token[300];
        snprintf(token, sizeof token, "%s", out_of("a"));
        token[strcspn(token, "\n")] = '\0';
        cr_assert_eq(RUN("s", "status", dots[i]), 0, "%s: %s", dots[i], err_of("s"));
        char path[32];
        snprintf(path, sizeof path, "/locks/%s", i ? "%2E%2E" : "%2E");
        h_resp g = h_http(C, "GET", path, NULL, NULL);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(g.json, "held")), "%s: %s", dots[i], g.body);
        h_resp_free(&g);
        cr_assert_eq(RUN("r", "release", dots[i], token), 0, "%s: %s", dots[i], err_of("r"));
        cr_assert_eq(RUN("s2", "status", dots[i]), 1, "%s: %s", dots[i], err_of("s2"));
    }
}

Test(cli, wait_runs_out_exits_75)
{
    start_service(5, NULL);
    h_resp h = h_http(C, "POST", "/locks/busy", "{\"ttl_ms\":20000}", NULL);
    cr_assert_eq(h.status, 201);
    uint64_t t0 = h_now_us();
    cr_assert_eq(RUN("a", "acquire", "--wait", "1s", "busy"), 75);
    double s = (double)(h_now_us() - t0) / 1e6;
    cr_assert(s >= 0.95 && s < 3.0, "acquire --wait 1s gave up after %.2f s", s);
    t0 = h_now_us();
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    cr_assert_eq(RUN("r", "run", "--wait", "700ms", "busy", "--", "touch", marker), 75);
    s = (double)(h_now_us() - t0) / 1e6;
    cr_assert(s >= 0.65 && s < 3.0, "run --wait 700ms gave up after %.2f s", s);
    cr_assert(strstr(err_of("r"), "redlock: locked: "), "%s", err_of("r"));
    cr_assert_eq(access(marker, F_OK), -1, "CMD ran without the lock");
    h_resp_free(&h);
}

/* A --wait longer than the service lets one request wait (--max-wait-ms
 * 300 here) is split into several requests; forever keeps asking. */
Test(cli, long_waits_outlast_the_service_limit)
{
    start_service(5, "--max-wait-ms", "300", NULL);
    h_resp h = h_http(C, "POST", "/locks/slow", "{\"ttl_ms\":1500}", NULL);
    cr_assert_eq(h.status, 201);
    uint64_t t0 = h_now_us();
    cr_assert_eq(RUN("a", "acquire", "--wait", "10s", "slow"), 0, "%s", err_of("a"));
    double s = (double)(h_now_us() - t0) / 1e6;
    cr_assert(s > 1.0 && s < 4.0, "granted after %.2f s (the holder had 1.5 s)", s);
    h_resp_free(&h);
    h = h_http(C, "POST", "/locks/slow2", "{\"ttl_ms\":1500}", NULL);
    cr_assert_eq(h.status, 201);
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    cr_assert_eq(RUN("r", "run", "--wait", "forever", "slow2", "--", "touch", marker), 0, "%s", err_of("r"));
    cr_assert_eq(access(marker, F_OK), 0, "CMD did not run");
    h_resp_free(&h);
}

Test(cli, no_quorum_exits_69)
{
    start_service(5, NULL);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    cr_assert(h_wait_status(C, "/readyz", 503, 5000));
    cr_assert_eq(RUN("y", "ready"), 69);
    cr_assert(strstr(err_of("y"), "not ready: 2 of 5 masters can vote"), "%s", err_of("y"));
    cr_assert_eq(RUN("a", "acquire", "--wait", "5s", "q"), 69);
    cr_assert(strstr(err_of("a"), "redlock: no_quorum: ") && strstr(err_of("a"), "of 5 masters answered"),
              "%s", err_of("a"));
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    cr_assert_eq(RUN("r", "run", "q", "--", "touch", marker), 69);
    cr_assert_eq(access(marker, F_OK), -1, "CMD ran without the lock");
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
}

Test(cli, auth_token_from_file_or_environment)
{
    C = h_cluster_start(3, NULL);
    char tokfile[400];
    path_of(tokfile, sizeof tokfile, "auth");
    FILE *f = fopen(tokfile, "w");
    fputs("s3cret-token\n", f);
    fclose(f);
    h_daemon_start(C, "--auth-token-file", tokfile, NULL);
    setenv("REDLOCK_URL", C->base, 1);
    cr_assert_eq(RUN("n", "acquire", "x"), 77);
    cr_assert(strstr(err_of("n"), "redlock: unauthorized"), "%s", err_of("n"));
    cr_assert_eq(RUN("y", "ready"), 0, "/readyz stays open");
    cr_assert_eq(RUN("f", "--auth-token-file", tokfile, "acquire", "x"), 0, "%s", err_of("f"));
    setenv("REDLOCK_AUTH_TOKEN", "s3cret-token", 1);
    cr_assert_eq(RUN("e", "status", "x"), 0, "%s", err_of("e"));
    cr_assert_eq(RUN("r", "run", "y", "--", "true"), 0, "%s", err_of("r"));
    setenv("REDLOCK_AUTH_TOKEN", "wrong", 1);
    cr_assert_eq(RUN("w", "status", "x"), 77);
}

/* ---- run ---- */

Test(cli, run_passes_the_lock_to_cmd_and_its_status_back)
{
    start_service(5, NULL);
    char script[600];
    snprintf(script, sizeof script,
             "echo \"$REDLOCK_NAME $REDLOCK_TOKEN $REDLOCK_FENCE\" > %s/env; "
             "curl -s \"$REDLOCK_URL/locks/$REDLOCK_NAME\" > %s/seen; exit 7", T, T);
    cr_assert_eq(RUN("r", "run", "--owner", "job-1", "nightly", "--", "sh", "-c", script), 7, "%s",
                 err_of("r"));
    char name[64], token[300];
    long long fence = 0;
    cr_assert_eq(sscanf(slurp(0, "env"), "%63s %299s %lld", name, token, &fence), 3, "%s", slurp(0, "env"));
    cr_assert_str_eq(name, "nightly");
    cr_assert_geq(strlen(token), 20);
    cr_assert_gt(fence, 0);
    const char *seen = slurp(1, "seen");
    cr_assert(strstr(seen, "\"held\":true") && strstr(seen, "\"owner\":\"job-1\""), "%s", seen);
    char want[64];
    snprintf(want, sizeof want, "\"fence\":%lld", fence);
    cr_assert(strstr(seen, want), "GET shows another fence: %s", seen);
    /* released as CMD exited: free at once */
    cr_assert_not(h_held(C, "nightly"), "still held after redlock run returned");
    /* a CMD killed by a signal: 128 + N */
    cr_assert_eq(RUN("k", "run", "nightly", "--", "sh", "-c", "kill -USR1 $$"), 128 + SIGUSR1);
    cr_assert_eq(RUN("n", "run", "nightly", "--", "/nonexistent/cmd"), 127);
    cr_assert(strstr(err_of("n"), "/nonexistent/cmd"), "%s", err_of("n"));
    cr_assert_not(h_held(C, "nightly"));
}

/* CMD holds none of redlock's sockets: neither the held stream (closing it
 * must release the lock when redlock goes) nor libcurl's own. */
Test(cli, cmd_inherits_no_sockets)
{
    start_service(3, NULL);
    cr_assert_eq(RUN("r", "run", "fds", "--", "sh", "-c", "for f in /proc/$$/fd/*; do readlink $f; done"), 0,
                 "%s", err_of("r"));
    const char *fds = out_of("r");
    cr_assert(strstr(fds, "/dev/null"), "no descriptors listed: %s", fds);
    cr_assert_null(strstr(fds, "socket:"), "CMD inherited a socket:\n%s", fds);
}

/* Four `redlock run`s of one name at once, 100 runs in all: no two CMDs
 * overlap on CLOCK_MONOTONIC, and fences increase in the order they ran.
 * Negative controls: the checker finds the overlap of a synthetic log, and
 * of the same CMDs run without the lock. */
static void contend(const char *name, const char *log, int workers, int each, bool locked)
{
    setenv("CLI_TEST_CHILD", "interval", 1);
    setenv("CLI_TEST_LOG", log, 1);
    setenv("CLI_TEST_SLEEP_MS", "10", 1);
    if (!locked)
        setenv("CLI_TEST_UNLOCKED", "1", 1);
    pid_t w[8];
    for (int i = 0; i < workers; i++) {
        w[i] = fork();
        cr_assert_geq(w[i], 0);
        if (w[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int fails = 0;
            for (int k = 0; k < each; k++) {
                pid_t p = fork();
                if (p == 0) {
                    if (locked)
                        execl(bin(), bin(), "run", "--ttl", "5s", "--wait", "forever", name, "--",
                              SELF, (char *)NULL);
                    else
                        execl(SELF, SELF, (char *)NULL);
                    _exit(121);
                }
                int st;
                waitpid(p, &st, 0);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "worker %d run %d: status %d\n", i, k, st);
                    fails++;
                }
            }
            _exit(fails > 100 ? 100 : fails);
        }
    }
    for (int i = 0; i < workers; i++) {
        int st;
        waitpid(w[i], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: %d runs failed", i,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    unsetenv("CLI_TEST_CHILD");
    unsetenv("CLI_TEST_UNLOCKED");
}

Test(cli, concurrent_runs_never_overlap, .timeout = 240)
{
    char log[400];
    int n, fence_bad, open_ones;
    /* the checker itself: one overlap in a synthetic log, none in another */
    path_of(log, sizeof log, "synthetic-overlap");
    FILE *f = fopen(log, "w");
    fputs("S 100 1 5\nS 150 2 6\nE 200 1 5\nE 300 2 6\nS 400 3 7\nE 500 3 7\n", f);
    fclose(f);
    cr_assert_eq(overlaps(log, &n, &fence_bad, &open_ones), 1);
    path_of(log, sizeof log, "synthetic-apart");
    f = fopen(log, "w");
    fputs("S 100 1 5\nE 200 1 5\nS 200 2 6\nE 300 2 6\nS 400 3 4\nE 500 3 4\n", f);
    fclose(f);
    cr_assert_eq(overlaps(log, &n, &fence_bad, &open_ones), 0);
    cr_assert_eq(fence_bad, 1, "the checker misses a fence that went down");

    start_service(5, NULL);
    /* without the lock the same CMDs overlap */
    path_of(log, sizeof log, "unlocked.log");
    contend("free", log, 4, 5, false);
    int bad = overlaps(log, &n, &fence_bad, &open_ones);
    cr_assert_eq(n, 20);
    cr_assert_gt(bad, 0, "4 unlocked CMDs of 10 ms each never overlapped: the check sees nothing");

    path_of(log, sizeof log, "locked.log");
    uint64_t t0 = h_now_us();
    contend("shared", log, 4, 25, true);
    double s = (double)(h_now_us() - t0) / 1e6;
    bad = overlaps(log, &n, &fence_bad, &open_ones);
    cr_assert_eq(n, 100, "%d CMDs ran", n);
    cr_assert_eq(open_ones, 0);
    cr_assert_eq(bad, 0, "%d of 100 runs overlapped another", bad);
    cr_assert_eq(fence_bad, 0, "%d fences did not increase in the order the CMDs ran", fence_bad);
    fprintf(stderr, "cli: 100 redlock runs by 4 contenders in %.1f s, no overlap\n", s);
    cr_assert_not(h_held(C, "shared"));
}

/* The lock is lost (3 of 5 masters paused: the service's renewals fail):
 * CMD gets SIGTERM, redlock exits 3 before the validity it last heard of
 * has run out by much. */
Test(cli, lost_lock_stops_cmd)
{
    start_service(5, NULL);
    char script[600];
    pid_t p = START("r", "run", "--ttl", "3s", "lost1", "--", "sh", "-c", trapping_child(script, sizeof script));
    cr_assert(wait_file("started", 5000), "CMD did not start: %s", err_of("r"));
    uint64_t t0 = h_now_us();
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    int code = finish(p, 10000);
    double s = (double)(h_now_us() - t0) / 1e6;
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    cr_assert_eq(code, 3, "redlock exited %d: %s", code, err_of("r"));
    cr_assert_str_eq(slurp(0, "got"), "TERM\n", "CMD got '%s'", slurp(0, "got"));
    cr_assert(strstr(err_of("r"), "redlock: lost: ") && strstr(err_of("r"), "no_quorum"), "%s", err_of("r"));
    cr_assert_lt(s, 3.5, "CMD was stopped %.2f s after the masters stopped (ttl 3 s)", s);
}

/* The key deleted on every master (as a clock jump or another tool would):
 * the next renewal finds it gone. */
Test(cli, deleted_key_stops_cmd)
{
    start_service(5, NULL);
    char script[600];
    pid_t p = START("r", "run", "--ttl", "1500ms", "lost2", "--", "sh", "-c", trapping_child(script, sizeof script));
    cr_assert(wait_file("started", 5000), "CMD did not start: %s", err_of("r"));
    for (int i = 0; i < 5; i++)
        freeReplyObject(h_redis(C, i, "DEL lock:lost2"));
    int code = finish(p, 5000);
    cr_assert_eq(code, 3, "redlock exited %d: %s", code, err_of("r"));
    cr_assert_str_eq(slurp(0, "got"), "TERM\n");
    cr_assert(strstr(err_of("r"), "lost"), "%s", err_of("r"));
}

/* A CMD that ignores SIGTERM gets SIGKILL after --grace. */
Test(cli, grace_then_sigkill)
{
    start_service(5, NULL);
    char script[300];
    snprintf(script, sizeof script, "trap '' TERM; echo $$ > %s/started; while :; do sleep 0.05; done", T);
    pid_t p = START("r", "run", "--ttl", "1500ms", "--grace", "1s", "lost3", "--", "sh", "-c", script);
    cr_assert(wait_file("started", 5000));
    for (int i = 0; i < 5; i++)
        freeReplyObject(h_redis(C, i, "DEL lock:lost3"));
    uint64_t t0 = h_now_us();
    cr_assert_eq(finish(p, 8000), 3, "%s", err_of("r"));
    double s = (double)(h_now_us() - t0) / 1e6;
    cr_assert(s > 0.9 && s < 3.5, "exited %.2f s after the loss (a renewal within 0.5 s, then 1 s of grace)", s);
    int child = atoi(slurp(0, "started"));
    cr_assert(child > 0 && kill(child, 0) != 0, "CMD %d survived its SIGKILL", child);
}

/* The service shuts down: the stream ends with released/shutting_down,
 * which redlock did not ask for, so CMD is stopped. */
Test(cli, service_shutdown_stops_cmd)
{
    start_service(5, NULL);
    char script[600];
    pid_t p = START("r", "run", "shut", "--", "sh", "-c", trapping_child(script, sizeof script));
    cr_assert(wait_file("started", 5000));
    cr_assert_eq(h_daemon_stop(C), 0);
    cr_assert_eq(finish(p, 5000), 3, "%s", err_of("r"));
    cr_assert_str_eq(slurp(0, "got"), "TERM\n");
    cr_assert(strstr(err_of("r"), "shutting_down"), "%s", err_of("r"));
}

/* The stream stalls (the service is paused): no renewal comes before the
 * validity runs out, and redlock stops CMD by its own clock. */
Test(cli, stalled_stream_stops_cmd)
{
    start_service(5, NULL);
    char script[600];
    pid_t p = START("r", "run", "--ttl", "2s", "stall", "--", "sh", "-c", trapping_child(script, sizeof script));
    cr_assert(wait_file("started", 5000));
    kill(C->daemon, SIGSTOP);
    uint64_t t0 = h_now_us();
    int code = finish(p, 6000);
    double s = (double)(h_now_us() - t0) / 1e6;
    kill(C->daemon, SIGCONT);
    cr_assert_eq(code, 3, "%s", err_of("r"));
    cr_assert_str_eq(slurp(0, "got"), "TERM\n");
    cr_assert(strstr(err_of("r"), "no renewal"), "%s", err_of("r"));
    cr_assert_lt(s, 2.5, "CMD stopped %.2f s after the service stalled (ttl 2 s)", s);
}

/* SIGINT, SIGTERM and SIGHUP sent to redlock reach CMD; redlock exits with
 * CMD's status and the lock is free at once. */
Test(cli, signals_reach_cmd)
{
    start_service(5, NULL);
    static const struct { int sig; const char *name; int code; } sigs[] = {
        {SIGINT, "INT", 12}, {SIGTERM, "TERM", 25}, {SIGHUP, "HUP", 11},
    };
    for (size_t i = 0; i < 3; i++) {
        char script[600], started[400], got[400];
        path_of(started, sizeof started, "started");
        path_of(got, sizeof got, "got");
        unlink(started);
        unlink(got);
        pid_t p = START("r", "run", "sig", "--", "sh", "-c", trapping_child(script, sizeof script));
        cr_assert(wait_file("started", 5000));
        kill(p, sigs[i].sig);
        cr_assert_eq(finish(p, 5000), sigs[i].code, "after SIG%s: %s", sigs[i].name, err_of("r"));
        char want[16];
        snprintf(want, sizeof want, "%s\n", sigs[i].name);
        cr_assert_str_eq(slurp(0, "got"), want);
        cr_assert_not(h_held(C, "sig"), "held after CMD ended on SIG%s", sigs[i].name);
    }
}

/* A signal while redlock still waits for the lock: it stops waiting, CMD
 * never runs, and the exit code says which signal. */
Test(cli, signal_while_waiting)
{
    start_service(5, NULL);
    h_resp h = h_http(C, "POST", "/locks/w", "{\"ttl_ms\":20000}", NULL);
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    pid_t p = START("r", "run", "--wait", "30s", "w", "--", "touch", marker);
    usleep(300000);
    kill(p, SIGINT);
    cr_assert_eq(finish(p, 3000), 128 + SIGINT);
    cr_assert_eq(access(marker, F_OK), -1);
    h_resp_free(&h);
}

/* redlock killed outright: the service releases the lock as the stream
 * closes, and the kernel kills CMD (PR_SET_PDEATHSIG). */
Test(cli, killed_redlock_releases_and_kills_cmd)
{
    start_service(5, NULL);
    char script[300];
    snprintf(script, sizeof script, "echo $$ > %s/started; while :; do sleep 0.05; done", T);
    pid_t p = START("r", "run", "--ttl", "30s", "k", "--", "sh", "-c", script);
    cr_assert(wait_file("started", 5000));
    cr_assert(h_held(C, "k"));
    int child = atoi(slurp(0, "started"));
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    uint64_t t0 = h_now_us();
    bool gone = false, freed = false;
    while (h_now_us() - t0 < 2000000 && !(gone && freed)) {
        char stat[64];
        snprintf(stat, sizeof stat, "/proc/%d/stat", child);
        FILE *f = fopen(stat, "r");
        char state = 'X';
        if (f) {
            if (fscanf(f, "%*d %*s %c", &state) != 1)
                state = 'X';
            fclose(f);
        }
        gone = state == 'X' || state == 'Z';
        freed = !h_held(C, "k");
        usleep(20000);
    }
    cr_assert(gone, "CMD %d outlived redlock", child);
    cr_assert(freed, "the lock outlived redlock by 2 s");
}

/* ---- the README's examples, exactly as printed ---- */

/* The indented block after the README line starting with `after`, its
 * lines that start with `prefix`. */
static int readme_lines(const char *after, const char *prefix, char lines[][512], int max)
{
    const char *root = getenv("REDLOCK_SOURCE_ROOT");
    cr_assert(root, "REDLOCK_SOURCE_ROOT is not set");
    char path[512];
    snprintf(path, sizeof path, "%s/README.md", root);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s: %s", path, strerror(errno));
    char line[500];
    bool in = false, block = false;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!in) {
            in = !strncmp(line, after, strlen(after));
            continue;
        }
        if (!strncmp(line, "    ", 4)) {
            block = true;
            if (!strncmp(line + 4, prefix, strlen(prefix)) && n < max) {
                snprintf(lines[n], 512, "%s", line + 4);
                lines[n][strcspn(lines[n], "\n")] = '\0';
                n++;
            }
        } else if (block && line[0] != '\n') {
            break;
        }
    }
    fclose(f);
    return n;
}

Test(cli, readme_examples_run_as_printed)
{
    char lines[16][512];
    int n = readme_lines("With the `redlock` client", "", lines, 16);
    cr_assert_geq(n, 6, "README: no `redlock` block after 'With the `redlock` client'");
    start_service(5, NULL);
    /* redlock on the PATH, the service in REDLOCK_URL: the lines need no --url */
    char dir[512], path[4096];
    snprintf(dir, sizeof dir, "%s", bin());
    *strrchr(dir, '/') = '\0';
    snprintf(path, sizeof path, "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    /* each line's output after a marker, in one shell so TOKEN carries over */
    char script[8192] = "cd \"$1\"\n";
    size_t o = strlen(script);
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(script + o, sizeof script - o, "echo '@@%d'\n%s\necho \"@@rc $?\"\n", i, lines[i]);
    char sh[400];
    path_of(sh, sizeof sh, "readme.sh");
    FILE *f = fopen(sh, "w");
    fputs(script, f);
    fclose(f);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sh '%s' '%s' > '%s/readme.out' 2>&1", sh, T, T);
    cr_assert_eq(system(cmd), 0);
    const char *out = slurp(3, "readme.out");
    /* What each example must show; the README says the same in its comments. */
    static const struct { const char *starts; const char *shows; int rc; } expect[] = {
        {"redlock run", "holding nightly-report with fence ", 0},
        {"TOKEN=$(redlock acquire", "", 0},
        {"redlock status orders", "held: validity ", 0},
        {"redlock acquire --wait 1s orders", "redlock: locked: ", 75},
        {"redlock extend", "", 0},
        {"redlock release", "", 0},
        {"redlock status --json orders", "\"held\":false", 1},
        {"redlock ready", "ready: 5 of 5 masters can vote", 0},
        {"redlock elect", "leading with term ", 0},
    };
    for (int i = 0; i < n; i++) {
        char mark[16], next[16];
        snprintf(mark, sizeof mark, "@@%d\n", i);
        snprintf(next, sizeof next, "@@rc ");
        const char *at = strstr(out, mark);
        cr_assert(at, "README line %d never ran: %s\n%s", i, lines[i], out);
        at += strlen(mark);
        const char *end = strstr(at, next);
        cr_assert(end, "README line %d: %s", i, lines[i]);
        int rc = atoi(end + strlen(next));
        size_t k = 0;
        while (k < sizeof expect / sizeof expect[0] && strncmp(lines[i], expect[k].starts, strlen(expect[k].starts)))
            k++;
        cr_assert_lt(k, sizeof expect / sizeof expect[0], "README line without an expectation here: %s", lines[i]);
        cr_assert_eq(rc, expect[k].rc, "README: '%s' exited %d:\n%.*s", lines[i], rc, (int)(end - at), at);
        char shown[2048];
        snprintf(shown, sizeof shown, "%.*s", (int)(end - at), at);
        cr_assert(strstr(shown, expect[k].shows), "README: '%s' showed '%s', not '%s'", lines[i], shown,
                  expect[k].shows);
    }
    cr_assert_not(h_held(C, "orders"), "orders still held after the README's release");
}
