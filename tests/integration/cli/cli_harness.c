/* cli_harness.c - what the tests of the `redlock` client share (see
 * cli_harness.h): this binary as CMD, the checker of intervals, and running
 * redlock against a started service. */
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

#include "cli_harness.h"

h_cluster *C;
char T[64];         /* this test's folder: outputs, logs, markers */
char SELF[512];     /* this test binary, run as CMD */

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

/* The "S" lines in the log at path. */
static int starts_in(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        n += line[0] == 'S';
    if (f)
        fclose(f);
    return n;
}

/* CLI_TEST_CHILD=interval: appends "S <ns> <pid> <fence>" to CLI_TEST_LOG,
 * sleeps CLI_TEST_SLEEP_MS, appends "E ...", exits 0 (91 without a token).
 * Unlocked (CLI_TEST_UNLOCKED, the overlap check's negative control), it
 * first waits (up to 10 s) for a second "S" in the log: the first CMD is
 * still running when another starts, so the unlocked runs overlap by
 * construction, not when scheduling happens to let them. */
__attribute__((constructor)) static void cli_test_child(void)
{
    const char *mode = getenv("CLI_TEST_CHILD");
    if (!mode || strcmp(mode, "interval") != 0)
        return;
    int fd = open(getenv("CLI_TEST_LOG"), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        _exit(92);
    log_line(fd, 'S');
    for (int i = 0; getenv("CLI_TEST_UNLOCKED") && i < 1000 && starts_in(getenv("CLI_TEST_LOG")) < 2; i++)
        usleep(10000);
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
int overlaps(const char *path, int *n, int *fence_bad, int *open_ones)
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

void cli_setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(T, sizeof T, "/tmp/redlock-cli-XXXXXX");
    cr_assert(mkdtemp(T), "mkdtemp: %s", strerror(errno));
    ssize_t n = readlink("/proc/self/exe", SELF, sizeof SELF - 1);
    cr_assert_gt(n, 0);
    SELF[n] = '\0';
    const char *const inherited[] = {"REDLOCK_URL", "REDLOCK_AUTH_TOKEN", "REDLOCK_TOKEN", "REDLOCK_ADMIN_TOKEN",
                                     "REDLOCK_CACERT", "REDLOCK_CERT", "REDLOCK_KEY"};
    for (size_t i = 0; i < sizeof inherited / sizeof *inherited; i++)
        unsetenv(inherited[i]);
}

void cli_teardown(void)
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


const char *bin(void)
{
    const char *b = getenv("REDLOCK_BIN");
    return b ? b : "redlock";
}

void path_of(char *out, size_t outlen, const char *file)
{
    snprintf(out, outlen, "%s/%s", T, file);
}

/* Starts redlock with args (NULL-terminated), its stdout and stderr in
 * T/tag.out and T/tag.err. */
pid_t start_v(const char *tag, const char *const *args)
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

/* Waits for pid; its exit code, or 128+N for a signal. Kills it and fails
 * the test after timeout_ms. */
int finish(pid_t pid, int timeout_ms)
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

int run_v(const char *tag, const char *const *args)
{
    return finish(start_v(tag, args), 30000);
}

/* The contents of T/file ("" if absent); static, overwritten by the next call
 * of the same slot (0..3). */
const char *slurp(int slot, const char *file)
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

const char *out_of(const char *tag)
{
    char f[128];
    snprintf(f, sizeof f, "%s.out", tag);
    return slurp(0, f);
}

const char *err_of(const char *tag)
{
    char f[128];
    snprintf(f, sizeof f, "%s.err", tag);
    return slurp(1, f);
}

bool cli_one_line(const char *tag)
{
    const char *e = err_of(tag), *nl = strchr(e, '\n');
    return !strncmp(e, "redlock: ", 9) && nl && nl[1] == '\0';
}

/* Waits up to timeout_ms for T/file to exist with content. */
bool wait_file(const char *file, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    while (h_now_us() < until) {
        if (slurp(2, file)[0])
            return true;
        usleep(10000);
    }
    return false;
}

void start_service(int n, ...)
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
const char *trapping_child(char *buf, size_t len)
{
    snprintf(buf, len,
             "trap 'echo INT > %1$s/got; exit 12' INT; trap 'echo TERM > %1$s/got; exit 25' TERM; "
             "trap 'echo HUP > %1$s/got; exit 11' HUP; echo $$ > %1$s/started; "
             "while :; do sleep 0.05; done", T);
    return buf;
}

/* ---- HTTPS and Unix sockets (cli_harness.h) ---- */

void cli_make_certs(cli_certs *k)
{
    char dir[200], cmd[4096];   /* T is short: the files' paths fit in 300 */
    path_of(dir, sizeof dir, "tls");
    cr_assert_eq(mkdir(dir, 0700), 0, "%s: %s", dir, strerror(errno));
    /* EC keys: quick to make; each certificate signed for 2 days. */
    snprintf(cmd, sizeof cmd,
             "(cd %s && K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes' && "
             "S='-CAcreateserial -days 2' && "
             "openssl req -x509 $K -keyout ca.key -out ca.crt -days 2 -subj /CN=redlock-test-ca && "
             "openssl req -x509 $K -keyout other.key -out other.crt -days 2 -subj /CN=some-other-ca && "
             "openssl req $K -keyout server.key -out server.csr -subj /CN=redlockd && "
             "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key $S -out server.crt -extfile san.ext && "
             "openssl req $K -keyout client.key -out client.csr -subj /CN=redlock-test-client && "
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key $S -out client.crt && "
             "openssl req $K -keyout nobody.key -out nobody.csr -subj /CN=nobody-client && "
             "openssl x509 -req -in nobody.csr -CA ca.crt -CAkey ca.key $S -out nobody.crt && "
             "openssl req $K -keyout foreign.key -out foreign.csr -subj /CN=foreign-client && "
             "openssl x509 -req -in foreign.csr -CA other.crt -CAkey other.key $S -out foreign.crt"
             ") > %s/openssl.log 2>&1",
             dir, dir);
    cr_assert_eq(system(cmd), 0, "openssl failed: %s", slurp(3, "tls/openssl.log"));
    const struct { char *out; const char *file; } files[] = {
        {k->ca, "ca.crt"}, {k->server_crt, "server.crt"}, {k->server_key, "server.key"},
        {k->client_crt, "client.crt"}, {k->client_key, "client.key"}, {k->nobody_crt, "nobody.crt"},
        {k->nobody_key, "nobody.key"}, {k->other_ca, "other.crt"},
        {k->foreign_crt, "foreign.crt"}, {k->foreign_key, "foreign.key"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        snprintf(files[i].out, 300, "%s/%s", dir, files[i].file);
}
