/* Integration: `redlock run` as a user runs it, the real binary against
 * the real redlockd and real masters: what CMD sees and when it is stopped,
 * mutual exclusion of many runs, signals, a killed redlock. (What the
 * client tests share: cli_harness.h.) */
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

TestSuite(cli_run, .init = cli_setup, .fini = cli_teardown, .timeout = 150);

/* ---- run ---- */

Test(cli_run, run_passes_the_lock_to_cmd_and_its_status_back)
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

/* Quotes, backslashes and UTF-8 in an owner, a candidate and a value, and a
 * name with a slash, reach the service as they are (issue 31): the client
 * builds every body as JSON, not by pasting text. */
Test(cli_run, quotes_and_utf8_in_owners_candidates_and_values)
{
    start_service(5, NULL);
    char script[600];
    snprintf(script, sizeof script, "curl -s \"$REDLOCK_URL/semaphores/pool%%2Fgpu\" > %s/sem", T);
    cr_assert_eq(RUN("p", "run", "--limit", "1", "--owner", "a \"q\" \\ \xc3\xa9", "pool/gpu", "--", "sh", "-c", script),
                 0, "%s", err_of("p"));
    cr_assert(strstr(slurp(0, "sem"), "\"owner\":\"a \\\"q\\\" \\\\ \xc3\xa9\""), "%s", slurp(0, "sem"));
    snprintf(script, sizeof script, "curl -s \"$REDLOCK_URL/elections/db%%2Fprimary\" > %s/el", T);
    cr_assert_eq(RUN("e", "elect", "--candidate", "node \"7\"", "--value", "a\\b \xc3\xa9", "db/primary", "--", "sh",
                     "-c", script),
                 0, "%s", err_of("e"));
    const char *el = slurp(1, "el");
    cr_assert(strstr(el, "\"leader\":\"node \\\"7\\\"\"") && strstr(el, "\"value\":\"a\\\\b \xc3\xa9\""), "%s", el);
}

/* CMD holds none of redlock's sockets: neither the held stream (closing it
 * must release the lock when redlock goes) nor libcurl's own. */
Test(cli_run, cmd_inherits_no_sockets)
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
 * of the same CMDs run without the lock (the first of which waits until a
 * second has started: cli_test_child). */
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

Test(cli_run, concurrent_runs_never_overlap, .timeout = 240)
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
    cr_assert_gt(bad, 0, "unlocked CMDs that wait for one another never overlapped: the check sees nothing");

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
Test(cli_run, lost_lock_stops_cmd)
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
Test(cli_run, deleted_key_stops_cmd)
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

/* A CMD that ignores SIGTERM gets SIGKILL after --grace: its lock (or with
 * --limit, its permit's slot) is deleted on every master, the renewal finds
 * nothing, and redlock exits 3. */
static void grace_then_sigkill_of(bool limit)
{
    start_service(5, NULL);
    char script[300];
    snprintf(script, sizeof script, "trap '' TERM; echo $$ > %s/started; while :; do sleep 0.05; done", T);
    pid_t p = limit ? START("r", "run", "--limit", "1", "--ttl", "1500ms", "--grace", "1s", "lost4", "--", "sh",
                            "-c", script)
                    : START("r", "run", "--ttl", "1500ms", "--grace", "1s", "lost3", "--", "sh", "-c", script);
    cr_assert(wait_file("started", 5000));
    for (int i = 0; i < 5; i++)
        freeReplyObject(h_redis(C, i, limit ? "DEL lock:lost4\x1f#0" : "DEL lock:lost3"));
    uint64_t t0 = h_now_us();
    cr_assert_eq(finish(p, 8000), 3, "%s", err_of("r"));
    double s = (double)(h_now_us() - t0) / 1e6;
    cr_assert(s > 0.9 && s < 3.5, "exited %.2f s after the loss (a renewal within 0.5 s, then 1 s of grace)", s);
    cr_assert(strstr(err_of("r"), "stopping the command (SIGTERM, SIGKILL after 1s)"), "%s", err_of("r"));
    int child = atoi(slurp(0, "started"));
    cr_assert(child > 0 && kill(child, 0) != 0, "CMD %d survived its SIGKILL", child);
}

Test(cli_run, grace_then_sigkill)
{
    grace_then_sigkill_of(false);
}

Test(cli_run, limit_grace_then_sigkill)
{
    grace_then_sigkill_of(true);
}

/* The service shuts down: the stream ends with released/shutting_down,
 * which redlock did not ask for, so CMD is stopped. */
Test(cli_run, service_shutdown_stops_cmd)
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
Test(cli_run, stalled_stream_stops_cmd)
{
    start_service(5, NULL);
    char script[600];
    pid_t p = START("r", "run", "--ttl", "2s", "stall", "--", "sh", "-c", trapping_child(script, sizeof script));
    cr_assert(wait_file("started", 5000));
    h_stop_process(C->daemon);
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
Test(cli_run, signals_reach_cmd)
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
Test(cli_run, signal_while_waiting)
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
Test(cli_run, killed_redlock_releases_and_kills_cmd)
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

/* A stopped redlock (SIGSTOP: its socket stays open and its kernel still
 * acknowledges) sends no heartbeat: the service ends its held stream with
 * lost (no_heartbeat) and the lock is free once the validity it last told
 * has run out, within a heartbeat and a ttl (2 s each here). Without a
 * heartbeat the service would renew it for as long as the socket lives.
 * Resumed, redlock reads the loss and stops CMD. */
Test(cli_run, a_stopped_redlock_loses_its_lock)
{
    start_service(5, NULL);
    char script[300];
    snprintf(script, sizeof script, "echo $$ > %s/started; while :; do sleep 0.05; done", T);
    pid_t p = START("r", "run", "--ttl", "2s", "hung", "--", "sh", "-c", script);
    cr_assert(wait_file("started", 5000), "CMD did not start: %s", err_of("r"));
    cr_assert(h_held(C, "hung"));
    h_stop_process(p);
    uint64_t t0 = h_now_us();
    bool freed = false;
    while (!freed && h_now_us() - t0 < 15000000) {
        usleep(50000);
        freed = !h_held(C, "hung");
    }
    double s = (double)(h_now_us() - t0) / 1e6;
    kill(p, SIGCONT);
    cr_assert(freed, "the lock of a stopped redlock was still held after 15 s");
    cr_log_info("cli_run: the lock of a stopped redlock was free %.2f s after the stop (ttl and heartbeat 2 s)", s);
    int code = finish(p, 10000);
    cr_assert_eq(code, 3, "redlock exited %d: %s", code, err_of("r"));
    cr_assert(strstr(err_of("r"), "no_heartbeat"), "%s", err_of("r"));
}
