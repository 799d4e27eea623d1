/* bench_node.c - node-redlock, the peer (bench_int.h). */
#include "bench_int.h"

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
const char *node_prepare(const char *dir, char *note, size_t notelen)
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

char node_versions[160];

/* One level of node-redlock: spawns the script, waits for its "ready" (it
 * has connected and warmed up), reads the masters' CPU, says go, reads its
 * JSON line, reads the masters' CPU again. */
result run_node(const char *script, const char *masters, int nclients, double seconds, const char *log,
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
