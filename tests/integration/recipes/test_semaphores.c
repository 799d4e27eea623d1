/* Integration: counting semaphores over HTTP (docs/semaphores.md) across two
 * redlockd instances on the same masters. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C, *P;

static void teardown(void)
{
    h_free_pair(&C, &P);
}

TestSuite(semaphores, .fini = teardown, .timeout = 120);

static void start_two(void)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    P = h_peer_start(C, NULL);
}

/* Takes permits; returns the answer (free with h_resp_free). */
static h_resp take(h_cluster *c, const char *name, const char *body)
{
    char path[128];
    snprintf(path, sizeof path, "/semaphores/%s", name);
    return h_http(c, "POST", path, body, NULL);
}

static const char *permit_token(const h_resp *r, int i)
{
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(r->json, "permits"), i);
    return cJSON_GetStringValue(cJSON_GetObjectItem(p, "token"));
}

static int holders(h_cluster *c, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/semaphores/%s", name);
    h_resp r = h_http(c, "GET", path, NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "holders"));
    h_resp_free(&r);
    return n;
}

/* L = 3 across two instances: three permits, a fourth refused; slots are
 * distinct, each with its own fence; a release makes room at once; a
 * different limit is refused while the semaphore is in use. */
Test(semaphores, limit_holds_across_two_instances)
{
    start_two();
    h_resp got[3];
    int slots = 0;
    for (int i = 0; i < 3; i++) {
        got[i] = take(i % 2 ? P : C, "pool", "{\"limit\":3,\"ttl_ms\":10000}");
        cr_assert_eq(got[i].status, 201, "permit %d: %s", i, got[i].body);
        const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(got[i].json, "permits"), 0);
        int slot = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "slot"));
        cr_assert(!(slots & (1 << slot)), "slot %d given twice", slot);
        slots |= 1 << slot;
        cr_assert_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(p, "fence")), 0);
        cr_assert_gt(h_int(&got[i], "validity_ms"), 0);
    }
    h_resp r = take(P, "pool", "{\"limit\":3}");
    cr_assert_eq(r.status, 409, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "locked");
    h_resp_free(&r);
    r = take(C, "pool", "{\"limit\":4}");
    cr_assert_eq(r.status, 409, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "limit_mismatch");
    cr_assert_eq(h_int(&r, "limit"), 3);
    h_resp_free(&r);
    cr_assert_eq(holders(P, "pool"), 3);

    char hdr[400];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", permit_token(&got[1], 0));
    r = h_http(C, "DELETE", "/semaphores/pool", NULL, hdr, NULL);
    cr_assert_eq(r.status, 204, "%s", r.body);
    h_resp_free(&r);
    r = take(C, "pool", "{\"limit\":3}");
    cr_assert_eq(r.status, 201, "room after a release: %s", r.body);
    h_resp_free(&r);
    /* extend: the same fence, a new validity */
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", permit_token(&got[0], 0));
    r = h_http(P, "PATCH", "/semaphores/pool", "{\"ttl_ms\":20000}", hdr, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_gt(h_int(&r, "validity_ms"), 15000);
    h_resp_free(&r);
    r = h_http(P, "DELETE", "/semaphores/pool", NULL, hdr, NULL);
    cr_assert_eq(r.status, 204);
    h_resp_free(&r);
    r = h_http(P, "DELETE", "/semaphores/pool", NULL, hdr, NULL);
    cr_assert_eq(r.status, 409, "a second release: %s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "not_held");
    h_resp_free(&r);
    for (int i = 0; i < 3; i++)
        h_resp_free(&got[i]);
}

/* k permits all or nothing: with one of three taken, asking for three
 * fails and leaves the two free ones free; a waiter gets them when the
 * holder releases (through the other instance). */
Test(semaphores, permits_all_or_nothing_and_waiting)
{
    start_two();
    h_resp one = take(C, "batch", "{\"limit\":3,\"ttl_ms\":10000}");
    cr_assert_eq(one.status, 201);
    h_resp r = take(P, "batch", "{\"limit\":3,\"permits\":3}");
    cr_assert_eq(r.status, 409, "%s", r.body);
    h_resp_free(&r);
    cr_assert_eq(holders(C, "batch"), 1, "a refused acquire left nothing behind");
    r = take(P, "batch", "{\"limit\":3,\"permits\":2}");
    cr_assert_eq(r.status, 201, "%s", r.body);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "permits")), 2);
    h_resp_free(&r);
    /* a waiter for one permit, while all three are taken */
    char hdr[400];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", permit_token(&one, 0));
    uint64_t t0 = h_now_us();
    pid_t pid = fork();
    if (pid == 0) {
        usleep(500000);
        h_resp d = h_http(P, "DELETE", "/semaphores/batch", NULL, hdr, NULL);
        _exit(d.status == 204 ? 0 : 1);
    }
    r = take(C, "batch", "{\"limit\":3,\"wait_ms\":5000}");
    double waited = (double)(h_now_us() - t0) / 1000.0;
    cr_assert_eq(r.status, 201, "the waiter: %s", r.body);
    cr_log_info("semaphores: the waiter got the permit %.0f ms after it asked (released at 500 ms)", waited);
    cr_assert_lt(waited, 1500.0);
    h_resp_free(&r);
    h_resp_free(&one);
}

/* A waiter sleeps while every slot is held (a few script calls a second,
 * not a round every 50-150 ms), and a release through the other instance
 * wakes it at once: every slot's release is published on its semaphore's
 * one notice channel, to which the waiter subscribes. Three hand-offs. */
Test(semaphores, a_release_wakes_a_waiter_that_does_not_poll)
{
    start_two();
    for (int round = 0; round < 3; round++) {
        h_resp one = take(C, "handoff", "{\"limit\":1,\"ttl_ms\":20000,\"wait_ms\":3000}");
        cr_assert_eq(one.status, 201, "%s", one.body);
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        pid_t pid = fork();
        if (pid == 0) {
            h_resp w = take(P, "handoff", "{\"limit\":1,\"ttl_ms\":1000,\"wait_ms\":10000}");
            uint64_t answer[2] = {(uint64_t)w.status, h_now_us()};
            ssize_t k = write(fds[1], answer, sizeof answer);
            _exit(k == (ssize_t)sizeof answer ? 0 : 1);
        }
        usleep(300000);   /* the waiter tried every slot and sleeps */
        long long before = h_script_calls(C, 0);
        usleep(1500000);
        long long calls = h_script_calls(C, 0) - before;
        char hdr[400];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", permit_token(&one, 0));
        uint64_t released = h_now_us();
        h_resp d = h_http(C, "DELETE", "/semaphores/handoff", NULL, hdr, NULL);
        cr_assert_eq(d.status, 204, "%s", d.body);
        uint64_t answer[2];
        cr_assert_eq(read(fds[0], answer, sizeof answer), (ssize_t)sizeof answer);
        waitpid(pid, NULL, 0);
        close(fds[0]);
        close(fds[1]);
        double after_ms = (double)(answer[1] - released) / 1000.0;
        cr_log_info("semaphores: hand-off %d: %lld script calls on one master in 1.5 s of waiting, "
                    "the permit %.1f ms after the release",
                    round, calls, after_ms);
        cr_assert_eq(answer[0], 201, "the waiter got the permit");
        cr_assert_lt(calls, 8, "a sleeping waiter made %lld script calls in 1.5 s", calls);
        /* Woken by the notice, not by its retry timer (up to 1 s, the
         * holder having 18 s left): generous for a busy machine (ASan beside
         * another suite took 176 ms); that it does not poll is the count above. */
        cr_assert_lt(after_ms, 600.0, "the waiter got the permit %.0f ms after the release", after_ms);
        h_resp_free(&d);
        h_resp_free(&one);
    }
}

/* A client that leaves while its acquire waits (its connection reset) is
 * not waited for: its acquire stops, so it tries the slots no more (while
 * it waited it tried them at least once a second), and the permit freed
 * later goes to nobody on its behalf. */
Test(semaphores, a_waiter_that_leaves_stops_waiting)
{
    start_two();
    h_resp one = take(C, "left", "{\"limit\":1,\"ttl_ms\":20000}");
    cr_assert_eq(one.status, 201, "%s", one.body);
    int fd = h_raw_post(C, "/semaphores/left", "{\"limit\":1,\"wait_ms\":20000}");
    usleep(300000);
    long long before = h_script_calls(C, 0);
    usleep(2500000);
    long long waiting = h_script_calls(C, 0) - before;
    h_raw_reset(fd);  /* the client is gone */
    usleep(300000);   /* the watcher looks every 100 ms */
    before = h_script_calls(C, 0);
    usleep(2500000);
    long long left = h_script_calls(C, 0) - before;
    cr_log_info("semaphores: script calls on one master in 2.5 s: %lld while a client waited, %lld after it left",
                waiting, left);
    cr_assert_geq(waiting, 2, "a waiting acquire tries the slots at least once a second");
    cr_assert_leq(left, 1, "the departed waiter still tried the slots: %lld script calls in 2.5 s", left);
    char hdr[400];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", permit_token(&one, 0));
    h_resp d = h_http(C, "DELETE", "/semaphores/left", NULL, hdr, NULL);
    cr_assert_eq(d.status, 204, "%s", d.body);
    usleep(200000);
    cr_assert_eq(holders(C, "left"), 0, "the freed permit went to nobody");
    h_resp_free(&d);
    h_resp_free(&one);
}

/* "hold": true keeps one permit for as long as the stream is open: the
 * stream's "acquired" names the semaphore, the slot and the permit token;
 * renewals keep the permit (and the semaphore's limit) past its ttl, seen
 * through the other instance; a DELETE with the permit token ends the
 * stream with "released"; closing a stream gives its permit back at once;
 * and a stream keeps one permit only. */
Test(semaphores, a_held_stream_keeps_a_permit)
{
    start_two();
    h_stream *st = h_stream_open(C, "/semaphores/kept", "{\"limit\":1,\"ttl_ms\":1000,\"hold\":true}", 3000);
    cr_assert(st && st->status == 201, "the held stream: %ld %s", st ? st->status : 0,
              st && st->body ? st->body : "");
    cr_assert_str_eq(st->content_type, "application/x-ndjson");
    cJSON *ev = NULL;
    uint64_t at;
    cr_assert_eq(h_stream_event(st, 3000, &ev, &at), 1, "no acquired event");
    cr_assert_str_eq(h_ev_str(ev, "event"), "acquired");
    cr_assert_str_eq(h_ev_str(ev, "name"), "kept");
    cr_assert_eq(h_ev_int(ev, "limit"), 1);
    cr_assert_eq(h_ev_int(ev, "slot"), 0);
    cr_assert_gt(h_ev_int(ev, "fence"), 0);
    cr_assert_gt(h_ev_int(ev, "validity_ms"), 0);
    char token[128];
    snprintf(token, sizeof token, "%s", h_ev_str(ev, "token"));
    cr_assert_eq(strncmp(token, "0:", 2), 0, "the permit token %s names its slot", token);
    cJSON_Delete(ev);
    /* three ttls later the permit is still held, and so is the limit */
    int renewed = 0;
    uint64_t until = h_now_us() + 3000000;
    while (h_now_us() < until) {
        int r = h_stream_event(st, 500, &ev, &at);
        cr_assert_neq(r, -1, "the stream ended");
        if (r == 1) {
            cr_assert_str_eq(h_ev_str(ev, "event"), "renewed");
            renewed++;
            cJSON_Delete(ev);
        }
    }
    cr_assert_geq(renewed, 6, "renewed %d times in 3 s with a ttl of 1 s", renewed);
    h_resp r = take(P, "kept", "{\"limit\":1}");
    cr_assert_eq(r.status, 409, "%s", r.body);
    h_resp_free(&r);
    r = h_http(P, "GET", "/semaphores/kept", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_eq(h_int(&r, "limit"), 1, "the stored limit outlived its first ttl: %s", r.body);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "holders")), 1, "%s", r.body);
    h_resp_free(&r);
    r = take(P, "kept", "{\"limit\":2}");
    cr_assert_eq(r.status, 409, "another limit is refused while the stream holds: %s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "limit_mismatch");
    h_resp_free(&r);
    /* a DELETE with the permit token (to the stream's instance) ends the
     * stream; through another instance, the next renewal finds it gone */
    char hdr[200];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", token);
    r = h_http(C, "DELETE", "/semaphores/kept", NULL, hdr, NULL);
    cr_assert_eq(r.status, 204, "%s", r.body);
    h_resp_free(&r);
    int got;
    while ((got = h_stream_event(st, 2000, &ev, &at)) == 1 && !strcmp(h_ev_str(ev, "event"), "renewed"))
        cJSON_Delete(ev);
    cr_assert_eq(got, 1, "no event after the DELETE");
    cr_assert_str_eq(h_ev_str(ev, "event"), "released");
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(st, 2000, &ev, &at), -1, "the stream ends after released");
    h_stream_close(st);
    /* closing a stream gives its permit back at once */
    st = h_stream_open(C, "/semaphores/kept", "{\"limit\":1,\"ttl_ms\":30000,\"hold\":true}", 3000);
    cr_assert(st && st->status == 201);
    cr_assert_eq(h_stream_event(st, 3000, &ev, &at), 1);
    cJSON_Delete(ev);
    h_stream_close(st);
    r = take(P, "kept", "{\"limit\":1,\"wait_ms\":2000}");
    cr_assert_eq(r.status, 201, "the closed stream's permit: %s", r.body);
    h_resp_free(&r);
    r = take(C, "kept2", "{\"limit\":2,\"permits\":2,\"hold\":true}");
    cr_assert_eq(r.status, 400, "%s", r.body);
    h_resp_free(&r);
    r = take(C, "kept2", "{\"limit\":2,\"ttl_ms\":500,\"hold\":true}");
    cr_assert_eq(r.status, 400, "%s", r.body);
    h_resp_free(&r);
}

/* Two masters paused: permits are still granted and refused as before;
 * three paused: 503 no_quorum. */
Test(semaphores, paused_masters)
{
    start_two();
    h_master_pause(C, 0);
    h_master_pause(C, 3);
    h_resp a = take(C, "pm", "{\"limit\":2,\"ttl_ms\":5000}");
    h_resp b = take(P, "pm", "{\"limit\":2,\"ttl_ms\":5000}");
    h_resp c = take(C, "pm", "{\"limit\":2}");
    cr_assert_eq(a.status, 201, "%s", a.body);
    cr_assert_eq(b.status, 201, "%s", b.body);
    cr_assert_eq(c.status, 409, "%s", c.body);
    h_master_pause(C, 1);
    h_resp d = take(P, "pm2", "{\"limit\":2}");
    cr_assert_eq(d.status, 503, "%s", d.body);
    cr_assert_str_eq(h_str(&d, "error"), "no_quorum");
    for (int i = 0; i < 5; i++)
        h_master_resume(C, i);
    h_resp_free(&a);
    h_resp_free(&b);
    h_resp_free(&c);
    h_resp_free(&d);
}

/* No semaphore or lock name reaches a slot or the limit (RULES_SEP holds a
 * control byte), and bad requests are 400s naming the field. */
Test(semaphores, names_and_bad_requests)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    struct { const char *method, *path, *body, *hdr; long status; const char *error; } cases[] = {
        {"POST", "/semaphores/a%1F%230", "{\"limit\":2}", NULL, 400, "bad_name"},
        {"GET", "/locks/pool%1F%230", NULL, NULL, 400, "bad_name"},
        {"GET", "/locks/pool%1F%23limit", NULL, NULL, 400, "bad_name"},
        {"POST", "/semaphores/pool", "{}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":0}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":65}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":2,\"permits\":3}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":2,\"permits\":2,\"hold\":true}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":2,\"hold\":\"yes\"}", NULL, 400, "bad_request"},
        {"DELETE", "/semaphores/pool", NULL, NULL, 400, "bad_request"},
        {"DELETE", "/semaphores/pool", NULL, "Lock-Token: no-slot", 400, "bad_request"},
        {"PATCH", "/semaphores/pool", "{\"tokens\":[\"99:x\"]}", NULL, 400, "bad_request"},
        {"GET", "/semaphores/pool?limit=0", NULL, NULL, 400, "bad_request"},
        {"PUT", "/semaphores/pool", "{}", NULL, 405, "method_not_allowed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        h_resp r = cases[i].hdr ? h_http(C, cases[i].method, cases[i].path, cases[i].body, cases[i].hdr, NULL)
                                : h_http(C, cases[i].method, cases[i].path, cases[i].body, NULL);
        cr_expect_eq(r.status, cases[i].status, "%s %s: %ld %s", cases[i].method, cases[i].path, r.status, r.body);
        cr_expect_str_eq(h_str(&r, "error"), cases[i].error, "%s %s", cases[i].method, cases[i].path);
        h_resp_free(&r);
    }
    /* a lock named like the semaphore is another thing */
    h_resp r = h_http(C, "POST", "/locks/pool", "{}", NULL);
    cr_assert_eq(r.status, 201);
    h_resp_free(&r);
    r = take(C, "pool", "{\"limit\":1}");
    cr_assert_eq(r.status, 201, "%s", r.body);
    h_resp_free(&r);
}

/* ---- the CLI: redlock run --limit ---- */


/* Six `redlock run --limit 2` through two instances, each running 0.5 s
 * with a 1 s ttl (so renewed): never more than two at once, all six run. */
Test(semaphores, cli_run_limit)
{
    start_two();
    char dir[] = "/tmp/redlockd-sem-XXXXXX";
    cr_assert(mkdtemp(dir));
    char log[64], cmd[300];
    snprintf(log, sizeof log, "%s/runs", dir);
    snprintf(cmd, sizeof cmd, "echo \"start $(date +%%s%%N)\" >> %s; sleep 0.5; echo \"end $(date +%%s%%N)\" >> %s",
             log, log);
    pid_t p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = fork();
        cr_assert_geq(p[i], 0);
        if (p[i] == 0) {
            setenv("REDLOCK_URL", (i % 2 ? P : C)->base, 1);
            const char *bin = getenv("REDLOCK_BIN");
            execl(bin, bin, "run", "--limit", "2", "--wait", "20s", "--ttl", "1s", "jobs", "--", "sh", "-c", cmd,
                  (char *)NULL);
            _exit(127);
        }
    }
    for (int i = 0; i < 6; i++) {
        int st;
        waitpid(p[i], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "redlock run --limit %d: %d", i, st);
    }
    FILE *f = fopen(log, "r");
    cr_assert(f);
    char kind[8];
    long long t;
    struct { long long t; int d; } ev[12];
    int n = 0;
    while (n < 12 && fscanf(f, "%7s %lld", kind, &t) == 2)
        ev[n++] = (typeof(ev[0])){t, strcmp(kind, "start") ? -1 : 1};
    fclose(f);
    cr_assert_eq(n, 12);
    /* in time order, the running count never exceeds the limit */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (ev[j].t < ev[i].t) {
                typeof(ev[0]) x = ev[i];
                ev[i] = ev[j];
                ev[j] = x;
            }
    int running = 0, most = 0;
    for (int i = 0; i < n; i++) {
        running += ev[i].d;
        if (running > most)
            most = running;
    }
    cr_log_info("semaphores: at most %d of 6 commands ran at once (limit 2)", most);
    cr_assert_leq(most, 2);
    char rm[200];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
}

/* SIGTERM: a waiting acquire answers 503 shutting_down at once (as a
 * waiting lock acquire does: nobody else holding the permits is not why it
 * stops waiting) and redlockd exits 0. */
Test(semaphores, a_waiter_answers_at_shutdown)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_resp one = take(C, "sd", "{\"limit\":1,\"ttl_ms\":20000}");
    cr_assert_eq(one.status, 201);
    h_resp_free(&one);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        h_resp w = take(C, "sd", "{\"limit\":1,\"wait_ms\":30000}");
        const char *e = h_str(&w, "error");
        /* status * 10, plus 1 when the error is shutting_down */
        long st = w.status * 10 + (e && !strcmp(e, "shutting_down"));
        ssize_t k = write(fds[1], &st, sizeof st);
        (void)k;
        _exit(0);
    }
    usleep(500000);
    uint64_t t0 = h_now_us();
    cr_assert_eq(h_daemon_stop(C), 0, "redlockd exits 0");
    long st = 0;
    cr_assert_eq(read(fds[0], &st, sizeof st), (ssize_t)sizeof st);
    double took = (double)(h_now_us() - t0) / 1000.0;
    waitpid(pid, NULL, 0);
    cr_log_info("semaphores: the waiter answered %ld, the stop took %.0f ms", st / 10, took);
    cr_assert_eq(st, 5031, "the waiter answered %ld%s, not 503 shutting_down", st / 10,
                 st % 10 ? " shutting_down" : "");
    cr_assert_lt(took, 5000.0);
}
