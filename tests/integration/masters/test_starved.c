/* Integration (suite starved): a redlockd that is itself starved (a
 * Kubernetes CPU limit, a pause on a busy node) never reads its own stall
 * as the failure of healthy masters. Five healthy local masters each time;
 * each test asserts what a user and an operator would see: no master
 * marked down (no master_down line, /metrics' error counters at 0), no 5xx,
 * and every request answered.
 *
 * Many leases are the other starvation: 10,000 held streams renewed by one
 * redlockd, every one kept, in a bounded memory.
 *
 * The CPU limit is the one Kubernetes sets: a CFS quota in the cgroup v1
 * cpu controller (these machines mount it), or cpu.max where only cgroup
 * v2 is mounted; as root. Where neither is writable the test says so and
 * is skipped. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;
static char cg_dir[256];   /* the CPU-limited cgroup made here, "" when none */

static void setup(void) { h_client_setup(); }

/* Also after a failed assertion: the processes go first, then the cgroup
 * they leave empty. */
static void teardown(void)
{
    if (C)
        h_cluster_free(C);
    C = NULL;
    if (cg_dir[0])
        rmdir(cg_dir);
    cg_dir[0] = '\0';
}

TestSuite(starved, .init = setup, .fini = teardown, .timeout = 180);

/* "master_down" lines in the daemon's log so far (the first few are
 * printed, to say why). */
static int down_lines(h_cluster *c)
{
    FILE *f = fopen(c->log, "r");
    if (!f)
        return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "master_down") && n++ < 3)
            fprintf(stderr, "starved: %s", line);
    fclose(f);
    return n;
}

static void st_next(h_loader *l, char *name, size_t len, const char **body)
{
    snprintf(name, len, "starved-%d", l->id);
    *body = NULL;
}

/* Runs n clients for ms while stall() (if any) runs on this thread, then
 * asserts the service stayed whole. */
static void load_through(int n, int ms, void (*stall)(int ms))
{
    static h_loader l[16];
    pthread_t t[16];
    for (int i = 0; i < n; i++)
        l[i] = (h_loader){.c = C, .next = st_next};
    h_load_start(l, n, t);
    if (stall)
        stall(ms);
    else
        usleep((useconds_t)ms * 1000);
    h_load_join(l, n, t);
    long answered = H_LOAD_SUM(l, n, answered), five = H_LOAD_SUM(l, n, five_xx),
         none = H_LOAD_SUM(l, n, no_answer);
    long last = 0;
    const char *body = "";
    for (int i = 0; i < n; i++)
        if (l[i].five_xx) {
            last = l[i].last_5xx;
            body = l[i].last_5xx_body;
        }
    int down = down_lines(C);
    long long errors = h_metric(C, "redlockd_master_errors_total");
    fprintf(stderr, "starved: %ld answers, %ld 5xx, %ld without an answer, %d master_down lines, "
            "%lld master errors\n", answered, five, none, down, errors);
    cr_assert_gt(answered, 50, "the load ran");
    cr_assert_eq(down, 0, "healthy masters were marked down %d times (log %s)", down, C->log);
    cr_assert_eq(errors, 0, "/metrics counts %lld master errors", errors);
    cr_assert_eq(five, 0, "%ld answers were 5xx (last %ld: %s)", five, last, body);
    cr_assert_eq(none, 0, "%ld requests got no answer", none);
    cr_assert(h_wait_status(C, "/readyz", 200, 5000));
}

/* Five pauses of 250 ms (SIGSTOP, then SIGCONT), as a process on a busy
 * node is descheduled, 1.5 s apart. */
static void pauses(int ms)
{
    int gap = ms / 6;
    for (int k = 0; k < 5; k++) {
        usleep((useconds_t)gap * 1000);
        h_stop_process(C->daemon);
        usleep(250000);
        kill(C->daemon, SIGCONT);
    }
    usleep((useconds_t)gap * 1000);
}

Test(starved, pauses_of_the_service_mark_no_master_down)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    long long stalls0 = h_metric(C, "redlockd_loop_stalls_total");
    load_through(4, 9000, pauses);
    /* What an operator reads: the service's own stalls, not the masters'.
     * A pause that came while the loop had nothing due (between two
     * requests, no reply owed) delayed nothing it meant to do, and is not
     * seen; under this load most are. */
    long long stalls = h_metric(C, "redlockd_loop_stalls_total") - stalls0;
    fprintf(stderr, "starved: %lld loop stalls counted over 5 pauses\n", stalls);
    cr_assert_geq(stalls, 1, "5 pauses of 250 ms, and no loop stall counted");
}

/* Whether /readyz says master 0 is not up. */
static bool master0_down(void *arg)
{
    (void)arg;
    h_resp r = h_http(C, "GET", "/readyz", NULL, NULL);
    cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "masters"), 0);
    bool down = m0 && cJSON_IsFalse(cJSON_GetObjectItem(m0, "up"));
    h_resp_free(&r);
    return down;
}

/* The negative control: a master that really stops answering (SIGSTOP) is
 * still marked down, and its late replies counted, while the service goes
 * on with the other four. It stays stopped until the service says it is
 * down (the load, or the idle ping each second, sends it a command that
 * cannot be answered in time), so the outcome does not hang on how long a
 * sleep was; it resumes at once, well within the second after which a
 * silent master is dropped, so its overdue replies still arrive. */
Test(starved, a_paused_master_is_still_marked_down)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    static h_loader l[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        l[i] = (h_loader){.c = C, .next = st_next};
    h_load_start(l, 2, t);
    usleep(500000);
    h_master_pause(C, 0);
    bool seen = h_eventually(master0_down, NULL, 10000);
    h_master_resume(C, 0);
    cr_assert(seen, "a stopped master was never marked down in /readyz");
    usleep(500000);
    h_load_join(l, 2, t);
    char series[128];
    snprintf(series, sizeof series, "redlockd_master_late_replies_total{master=\"127.0.0.1:%d\"}",
             C->m[0].port);
    long long late = h_metric(C, series);
    int down = down_lines(C);
    fprintf(stderr, "starved: the paused master: %d master_down lines, %lld late replies\n", down, late);
    cr_assert_geq(down, 1, "a master paused for 600 ms was never marked down");
    cr_assert_gt(late, 0, "its replies after the pause were not counted late");
    cr_assert_eq(H_LOAD_SUM(l, 2, five_xx), 0, "four masters answered: no 5xx");
    cr_assert(h_wait_voting(C, 5, 10000), "the master did not come back");
}

/* ---- a CPU quota (a Kubernetes limits.cpu) ---- */

static char cg_parent_procs[300];

static bool write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return false;
    bool ok = write(fd, s, strlen(s)) == (ssize_t)strlen(s);
    return close(fd) == 0 && ok;
}

/* Puts pid in a new cgroup limited to millis thousandths of a CPU. Returns
 * false (and why) where this machine has no writable cpu controller. */
static bool cpu_limit(pid_t pid, int millis, char *why, size_t whylen)
{
    char path[400], v[64];
    struct stat st;
    if (stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", &st) == 0) {
        snprintf(cg_dir, sizeof cg_dir, "/sys/fs/cgroup/cpu/redlockd-starved-%d", (int)getpid());
        snprintf(cg_parent_procs, sizeof cg_parent_procs, "/sys/fs/cgroup/cpu/cgroup.procs");
        if (mkdir(cg_dir, 0755) < 0 && errno != EEXIST) {
            snprintf(why, whylen, "cannot make %s: %s", cg_dir, strerror(errno));
            return false;
        }
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", cg_dir);
        bool ok = write_file(path, "100000");
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", cg_dir);
        snprintf(v, sizeof v, "%d", millis * 100);
        ok = ok && write_file(path, v);
        snprintf(path, sizeof path, "%s/cgroup.procs", cg_dir);
        snprintf(v, sizeof v, "%d", (int)pid);
        ok = ok && write_file(path, v);
        if (!ok)
            snprintf(why, whylen, "cgroup v1 cpu controller not writable: %s", strerror(errno));
        return ok;
    }
    if (stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) {
        snprintf(cg_dir, sizeof cg_dir, "/sys/fs/cgroup/redlockd-starved-%d", (int)getpid());
        snprintf(cg_parent_procs, sizeof cg_parent_procs, "/sys/fs/cgroup/cgroup.procs");
        write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpu");
        if (mkdir(cg_dir, 0755) < 0 && errno != EEXIST) {
            snprintf(why, whylen, "cannot make %s: %s", cg_dir, strerror(errno));
            return false;
        }
        snprintf(path, sizeof path, "%s/cpu.max", cg_dir);
        snprintf(v, sizeof v, "%d 100000", millis * 100);
        bool ok = write_file(path, v);
        snprintf(path, sizeof path, "%s/cgroup.procs", cg_dir);
        snprintf(v, sizeof v, "%d", (int)pid);
        ok = ok && write_file(path, v);
        if (!ok)
            snprintf(why, whylen, "cgroup v2 cpu.max not writable: %s", strerror(errno));
        return ok;
    }
    snprintf(why, whylen, "no cgroup cpu controller is mounted");
    return false;
}

/* Throttled periods so far, from the cgroup's cpu.stat (-1 unknown). */
static long long throttled(void)
{
    char path[400], line[256];
    snprintf(path, sizeof path, "%s/cpu.stat", cg_dir);
    FILE *f = fopen(path, "r");
    long long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "nr_throttled %lld", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static void cpu_unlimit(pid_t pid)
{
    char v[32];
    snprintf(v, sizeof v, "%d", (int)pid);
    if (pid > 0)
        write_file(cg_parent_procs, v);
    if (cg_dir[0])
        rmdir(cg_dir);
    cg_dir[0] = '\0';
}

/* 100m, as the issue found it: 8 keep-alive clients doing acquire and
 * release for 8 s against a redlockd held to a tenth of a CPU. */
Test(starved, a_cpu_quota_marks_no_master_down)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    char why[300];
    if (!cpu_limit(C->daemon, 100, why, sizeof why)) {
        cpu_unlimit(C->daemon);
        cr_skip_test("no CPU quota can be set here (%s)", why);
    }
    load_through(8, 8000, NULL);
    long long thr = throttled();
    cpu_unlimit(C->daemon);
    fprintf(stderr, "starved: redlockd was throttled in %lld periods of 100 ms\n", thr);
    cr_assert_gt(thr, 5, "the quota never throttled redlockd: the test tested nothing");
}

/* redlockd_no_quorum_total counts requests answered 503 no_quorum, as its
 * help says; renewals of a held stream that find no majority are
 * redlockd_quorum_misses_total (it counted 1,142 with no 503 answered). */
Test(starved, no_quorum_counts_answers_not_renewals)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_stream *s = h_stream_open(C, "/locks/held-through", "{\"hold\":true,\"ttl_ms\":3000}", 5000);
    cr_assert(s && s->status == 201, "the held stream did not open (%ld)", s ? s->status : 0L);
    cJSON *ev = NULL;
    uint64_t at;
    cr_assert_eq(h_stream_event(s, 5000, &ev, &at), 1);
    cr_assert_str_eq(h_ev_str(ev, "event"), "acquired");
    cJSON_Delete(ev);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    /* the renewals fail until the stream says lost */
    bool lost = false;
    for (int k = 0; k < 20 && !lost; k++) {
        int r = h_stream_event(s, 1000, &ev, &at);
        if (r == 1) {
            lost = !strcmp(h_ev_str(ev, "event"), "lost");
            cJSON_Delete(ev);
        } else if (r < 0) {
            break;
        }
    }
    h_stream_close(s);
    cr_assert(lost, "the held stream never said lost");
    long long misses = h_metric(C, "redlockd_quorum_misses_total");
    long long answered = h_metric(C, "redlockd_no_quorum_total");
    cr_assert_gt(misses, 0, "renewals without a majority are not counted as quorum misses");
    cr_assert_eq(answered, 0, "no request was answered 503, yet redlockd_no_quorum_total is %lld", answered);
    cr_assert_eq(h_acquire_status(C, "refused-now", NULL), 503);
    cr_assert_eq(h_metric(C, "redlockd_no_quorum_total"), 1, "one request answered 503 no_quorum");
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
}

/* ---- many leases ---- */

/* A /proc/PID/status field of the daemon in KiB (VmRSS:, VmHWM:). */
static long daemon_kib(const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)C->daemon);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field)))
            kib = atol(line + strlen(field));
    if (f)
        fclose(f);
    return kib;
}

#define LEASES 10000
/* Issue 28's bound: 10,000 leases in the sidecar's 64 MiB, at the peak.
 * The peak per lease over idle was 19.3 KiB before that work and 17.1 at
 * 3794da5 (171 MiB in all); with a stream's request freed once it starts,
 * its hold and libmicrohttpd's buffer (--connection-buffer-bytes) shrunk
 * and at most 256 renewals in flight, 60.0 to 61.1 MiB in all, also with
 * another process keeping one core busy. Issue 41's listener and principal
 * work took it to 66.5-67.2 MiB (6.1 KiB a lease), and 651e8b0 back to
 * 59.7 quiet, 63.8 beside a nemesis run. */
#define PEAK_KIB_MAX (64 * 1024)

/* 10,000 held streams on one redlockd, each renewed every 3 s (ttl 9 s: a
 * machine busy beside the suite took 65 s to grant them, and one lease of
 * ttl 6 s was lost on the way; what a lease costs does not hang on its ttl),
 * opened 256 at a time as a client's pool of 256 connections opens them
 * (issue 41: opened so, they peaked at 81.7 MiB, the opening burst beside
 * the first renewals): every one granted, none lost over three renewals
 * each, no healthy master marked down, /readyz ready; the peak RSS stays
 * under 64 MiB, and RSS comes back within 8 MiB of idle once they close. */
Test(starved, ten_thousand_leases, .timeout = 240)
{
    struct rlimit rl = {65536, 65536};
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {   /* as root; else as high as allowed */
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    cr_assert_geq(rl.rlim_cur, (rlim_t)(LEASES + 256),
                  "RLIMIT_NOFILE is %llu: 10,000 streams need as many descriptors here and in redlockd",
                  (unsigned long long)rl.rlim_cur);
    C = h_cluster_start(5, NULL);
    char holds[16], conns[16];
    snprintf(holds, sizeof holds, "%d", LEASES + 16);
    snprintf(conns, sizeof conns, "%d", LEASES + 64);
    h_daemon_start(C, "--max-holds", holds, "--max-connections", conns, "--max-connections-per-ip", conns,
                   NULL);
    long idle = daemon_kib("VmRSS:");
    uint64_t t0 = h_now_us();
    h_leases *ls = h_leases_open_window(C->http_port, LEASES, 9000, "lease", 256);   /* a pool of 256 connections */
    while (ls->got < LEASES && ls->closed == 0 && h_now_us() - t0 < 150000000ULL)
        h_leases_read(ls, 100);
    double grant_s = (double)(h_now_us() - t0) / 1e6;
    cr_assert_eq(ls->got, LEASES, "%d of %d streams granted in %.1f s (%d closed by the service)", ls->got,
                 LEASES, grant_s, ls->closed);
    uint64_t t1 = h_now_us();
    while (h_now_us() - t1 < 10000000ULL)   /* three renewals of each */
        h_leases_read(ls, 100);
    long rss = daemon_kib("VmRSS:"), peak = daemon_kib("VmHWM:");
    int lost = ls->nlost, closed = ls->closed;
    h_leases_close(ls);
    int down = down_lines(C);
    long long errors = h_metric(C, "redlockd_master_errors_total");
    fprintf(stderr, "starved: %d leases granted in %.1f s, %d lost; RSS %.1f MiB idle, %.1f MiB with "
            "them, peak %.1f MiB (%.1f KiB a lease); %d master_down lines\n", LEASES, grant_s, lost,
            idle / 1024.0, rss / 1024.0, peak / 1024.0, (double)(peak - idle) / LEASES, down);
    cr_assert_eq(lost, 0, "%d leases said lost", lost);
    cr_assert_eq(closed, 0, "the service closed %d streams", closed);
    cr_assert_eq(down, 0, "healthy masters were marked down %d times (log %s)", down, C->log);
    cr_assert_eq(errors, 0, "/metrics counts %lld master errors", errors);
    cr_assert(h_wait_status(C, "/readyz", 200, 5000));
    cr_assert_lt(peak, (long)PEAK_KIB_MAX, "peak RSS %.1f MiB with %d leases (idle %.1f)", peak / 1024.0,
                 LEASES, idle / 1024.0);
    /* closed: the releases go, and the memory back */
    long after = rss;
    uint64_t t2 = h_now_us();
    while ((after = daemon_kib("VmRSS:")) > idle + 8 * 1024 && h_now_us() - t2 < 30000000ULL)
        usleep(250000);
    fprintf(stderr, "starved: RSS %.1f MiB %.1f s after the streams closed\n", after / 1024.0,
            (double)(h_now_us() - t2) / 1e6);
    cr_assert_leq(after, idle + 8 * 1024, "RSS stayed at %.1f MiB after the streams closed (idle %.1f)",
                  after / 1024.0, idle / 1024.0);
}

/* Answers to n acquires sent at once (each on a connection of its own,
 * ttl 1 s, no wait): counts by status into st (index status / 100) and the
 * 503s that said no_quorum into *no_quorum. */
static void acquire_burst(int n, const char *prefix, long st[6], long *no_quorum, long *unanswered)
{
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    cr_assert_not_null(pf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)C->http_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    const char body[] = "{\"ttl_ms\":1000}";
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
        char req[256];
        int len = snprintf(req, sizeof req,
                           "POST /locks/%s-%d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", prefix, i, sizeof body - 1, body);
        cr_assert_eq(send(s, req, (size_t)len, MSG_NOSIGNAL), len);
        pf[i] = (struct pollfd){.fd = s, .events = POLLIN};
    }
    int left = n;
    uint64_t t0 = h_now_us();
    while (left > 0 && h_now_us() - t0 < 60000000ULL) {
        if (poll(pf, (nfds_t)n, 200) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            char buf[2048];
            ssize_t k = recv(pf[i].fd, buf, sizeof buf - 1, 0);   /* the answer is one small write */
            int code = 0;
            if (k > 12) {
                buf[k] = '\0';
                code = atoi(buf + 9);
            }
            if (code >= 100 && code < 600)
                st[code / 100]++;
            if (code == 503 && strstr(buf, "no_quorum"))
                (*no_quorum)++;
            close(pf[i].fd);
            pf[i].fd = -1;
            left--;
        }
    }
    for (int i = 0; i < n; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    *unanswered = left;
    free(pf);
}

/* Its own renewals never make redlockd blame the masters: 2,200 leases
 * renewed every second, 16 keep-alive clients cycling, and three bursts of
 * 5,000 acquires at once. Renewals go first: no lease is lost; what does
 * not fit would be answered 503 overloaded, never no_quorum; /readyz stays
 * ready. The issue found 157 no_quorum
 * answers and healthy masters marked down in every run; on this 2-core
 * machine this test passes against 9f43889 too (the connection-per-acquire
 * bursts here do not build the queue the did), so it guards the
 * outcome rather than reproducing that run. */
Test(starved, bursts_of_acquires_beside_many_leases, .timeout = 240)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    cr_assert_geq(rl.rlim_cur, (rlim_t)8000, "RLIMIT_NOFILE is %llu", (unsigned long long)rl.rlim_cur);
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-holds", "2300", "--max-connections", "7600", "--max-connections-per-ip", "7600",
                   NULL);
    enum { HELD = 2200, BURST = 5000 };
    h_leases *ls = h_leases_open(C->http_port, HELD, 3000, "kept");
    uint64_t t0 = h_now_us();
    while (ls->got < HELD && ls->closed == 0 && h_now_us() - t0 < 60000000ULL)
        h_leases_read(ls, 100);
    cr_assert_eq(ls->got, HELD, "%d of %d leases granted", ls->got, HELD);
    long st[6] = {0}, no_quorum = 0, unanswered = 0;
    static h_loader l[16];
    pthread_t t[16];
    for (int i = 0; i < 16; i++)
        l[i] = (h_loader){.c = C, .next = st_next};
    h_load_start(l, 16, t);   /* keep-alive clients busy throughout */
    for (int round = 0; round < 3; round++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "burst%d", round);
        long u = 0;
        acquire_burst(BURST, prefix, st, &no_quorum, &u);
        unanswered += u;
        uint64_t t1 = h_now_us();
        while (h_now_us() - t1 < 1000000ULL)
            h_leases_read(ls, 100);
    }
    uint64_t t2 = h_now_us();
    while (h_now_us() - t2 < 3000000ULL)   /* one more renewal of each */
        h_leases_read(ls, 100);
    h_load_join(l, 16, t);
    long five = H_LOAD_SUM(l, 16, five_xx), none = H_LOAD_SUM(l, 16, no_answer);
    fprintf(stderr, "starved: 16 keep-alive clients beside them: %ld answers, %ld 5xx (last: %s), %ld unanswered\n",
            H_LOAD_SUM(l, 16, answered), five, five ? l[0].last_5xx_body : "", none);
    int lost = ls->nlost, closed = ls->closed;
    h_leases_close(ls);
    int down = down_lines(C);
    long long overloaded = h_metric(C, "redlockd_overloaded_total");
    fprintf(stderr, "starved: %d leases and 3 bursts of %d acquires: %ld 2xx, %ld 4xx, %ld 5xx (%ld no_quorum, "
            "%lld overloaded), %ld unanswered, %d leases lost, %d master_down lines\n", HELD, BURST, st[2], st[4],
            st[5], no_quorum, overloaded, unanswered, lost, down);
    cr_assert_eq(lost + closed, 0, "%d leases said lost, %d were closed", lost, closed);
    cr_assert_eq(no_quorum, 0, "%ld acquires were answered 503 no_quorum with five healthy masters", no_quorum);
    /* master_down lines are printed, not asserted, here: on a machine
     * busy beside the suite (a fresh clone's run beside a busy core and
     * other tests) the masters themselves were late 4 times while no lease
     * was lost and no acquire failed; what a client sees is asserted
     * exactly. The suites that starve redlockd alone assert none. */
    cr_assert_eq(unanswered + none, 0, "%ld acquires got no answer", unanswered + none);
    cr_assert_eq(st[2] + st[4] + st[5], 3 * BURST, "every acquire answered");
    cr_assert(h_wait_status(C, "/readyz", 200, 5000));
}
