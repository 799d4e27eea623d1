/* bench_leases.c - the leases row (bench --leases N): N held streams
 * ("hold": true, ttl 3 s by default, so each is renewed every second) open on one
 * redlockd of their own for S seconds, and what they cost: script calls per
 * second on each master (INFO commandstats, EVALSHA and EVAL), redlockd's
 * CPU, and its RSS with the leases open and after they closed. Streams that
 * said "lost" are counted. */
#include "bench_int.h"

/* Script calls master m has run so far (EVALSHA + EVAL), or -1. */
static long long script_calls(int m)
{
    redisReply *r = redisCommand(info_ctx[m], "INFO commandstats");
    long long n = 0;
    if (!r || r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return -1;
    }
    for (const char *p = r->str; (p = strstr(p, "cmdstat_eval")); p++) {
        const char *c = strstr(p, "calls=");
        if (c)
            n += atoll(c + 6);
    }
    freeReplyObject(r);
    return n;
}

lease_result run_leases(const char *bin, const char *masters, const char *dir, int n, int window, int ttl_ms,
                        double seconds)
{
    lease_result lr = {.leases = n, .window = window, .ttl_ms = ttl_ms};
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < (rlim_t)n + 64) {
        fprintf(stderr, "bench: --leases %d needs %d open files, the limit is %llu\n", n, n + 64,
                (unsigned long long)rl.rlim_cur);
        return lr;
    }
    int port = h_free_port();
    char listen[64], log[400], holds[24], conns[24];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/redlockd-leases.log", dir);
    snprintf(holds, sizeof holds, "%d", n + 16);
    snprintf(conns, sizeof conns, "%d", n + 64);
    char *av[] = {(char *)bin, "--listen", listen, "--masters", (char *)masters, "--log-level", "warn",
                  "--max-holds", holds, "--max-connections", conns, "--max-connections-per-ip", conns, NULL};
    pid_t d = h_spawn(av, log);   /* its open files: raised above, inherited */
    wait_port(port, "redlockd");
    usleep(300000);
    lr.idle_rss_kib = proc_kib(d, "VmRSS:");

    uint64_t t0 = now_us();
    h_leases *ls = h_leases_open_window(port, n, ttl_ms, "lease", window);
    /* every stream's acquired event, within 60 s */
    while (ls->got < n && now_us() - t0 < 60000000ULL)
        h_leases_read(ls, 100);
    lr.acquired = ls->got;
    lr.open_s = (double)(now_us() - t0) / 1e6;

    long long c0[NMASTERS], c1[NMASTERS];
    for (int m = 0; m < NMASTERS; m++)
        c0[m] = script_calls(m);
    double cpu0 = proc_cpu_s(d), mcpu0 = masters_cpu_s();
    uint64_t s0 = now_us();
    while (now_us() - s0 < (uint64_t)(seconds * 1e6))
        h_leases_read(ls, 100);
    double el = (double)(now_us() - s0) / 1e6;
    double cpu1 = proc_cpu_s(d), mcpu1 = masters_cpu_s();
    lr.masters_cpu_pct = mcpu0 >= 0 && mcpu1 >= 0 ? 100.0 * (mcpu1 - mcpu0) / el : -1;
    lr.calls_per_s_min = -1;
    for (int m = 0; m < NMASTERS; m++) {
        c1[m] = script_calls(m);
        double r = c0[m] >= 0 && c1[m] >= 0 ? (double)(c1[m] - c0[m]) / el : -1;
        if (lr.calls_per_s_min < 0 || r < lr.calls_per_s_min)
            lr.calls_per_s_min = r;
        if (r > lr.calls_per_s_max)
            lr.calls_per_s_max = r;
    }
    lr.cpu_pct = cpu0 >= 0 && cpu1 >= 0 ? 100.0 * (cpu1 - cpu0) / el : -1;
    lr.rss_kib = proc_kib(d, "VmRSS:");
    lr.lost = ls->nlost;
    lr.open_peak_rss_kib = proc_kib(d, "VmHWM:");
    h_leases_close(ls);
    /* The releases go out and the connections go; memory is given back
     * once many streams closed (hold_renew.c): RSS is read every second
     * until it settles (three readings in a row within 1% of the first of
     * them: it rises first, while the closes are handled), for up to 20 s. */
    uint64_t c0_us = now_us();
    long base = proc_kib(d, "VmRSS:");
    int steady = 0;
    while (steady < 3 && now_us() - c0_us < 20000000ULL) {
        sleep(1);
        long cur = proc_kib(d, "VmRSS:");
        lr.closed_rss_kib = cur;
        if (cur >= base - base / 100 && cur <= base + base / 100) {
            steady++;
        } else {
            steady = 0;
            base = cur;
        }
    }
    lr.closed_s = (double)(now_us() - c0_us) / 1e6;
    lr.peak_rss_kib = proc_kib(d, "VmHWM:");
    kill(d, SIGTERM);
    waitpid(d, NULL, 0);
    lr.ran = true;
    return lr;
}

void print_leases(const lease_result *lr)
{
    if (!lr->ran)
        return;
    printf("\nleases: %d held streams (ttl %d ms, renewed every %d ms, opened %d at a time), %d acquired in "
           "%.1f s, %d lost\n", lr->leases, lr->ttl_ms, lr->ttl_ms / 3, lr->window, lr->acquired, lr->open_s,
           lr->lost);
    printf("  script calls/s per master: %.0f to %.0f; redlockd CPU %.0f%% of a core, the five masters' %.0f%%\n",
           lr->calls_per_s_min, lr->calls_per_s_max, lr->cpu_pct, lr->masters_cpu_pct);
    printf("  redlockd RSS: %.1f MiB idle, %.1f MiB with the leases (%.1f KiB each), peak %.1f MiB while "
           "they were open and %.1f MiB as they closed, %.1f MiB %.0f s after\n", (double)lr->idle_rss_kib / 1024.0,
           (double)lr->rss_kib / 1024.0,
           lr->leases ? (double)(lr->rss_kib - lr->idle_rss_kib) / lr->leases : 0.0,
           (double)lr->open_peak_rss_kib / 1024.0, (double)lr->peak_rss_kib / 1024.0,
           (double)lr->closed_rss_kib / 1024.0, lr->closed_s);
}
