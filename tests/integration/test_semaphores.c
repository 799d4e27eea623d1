/* Integration: counting semaphores over HTTP (docs/semaphores.md) across two
 * redlockd instances on the same masters. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C, *P;

static void teardown(void)
{
    if (P)
        h_peer_free(P);
    P = NULL;
    h_cluster_free(C);
    C = NULL;
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

/* No semaphore or lock name reaches a slot or the limit ('#'), and bad
 * requests are 400s naming the field. */
Test(semaphores, names_and_bad_requests)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    struct { const char *method, *path, *body, *hdr; long status; const char *error; } cases[] = {
        {"POST", "/semaphores/a%230", "{\"limit\":2}", NULL, 400, "bad_name"},
        {"GET", "/locks/pool%230", NULL, NULL, 400, "bad_name"},
        {"GET", "/locks/pool%23limit", NULL, NULL, 400, "bad_name"},
        {"POST", "/semaphores/pool", "{}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":0}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":65}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":2,\"permits\":3}", NULL, 400, "bad_request"},
        {"POST", "/semaphores/pool", "{\"limit\":2,\"hold\":true}", NULL, 400, "bad_request"},
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

#include <sys/wait.h>

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

/* SIGTERM: a waiting acquire answers 409 at once (as a waiting lock
 * acquire does) and redlockd exits 0. */
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
        long st = w.status;
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
    cr_log_info("semaphores: the waiter answered %ld, the stop took %.0f ms", st, took);
    cr_assert_eq(st, 409);
    cr_assert_lt(took, 5000.0);
}
