/* Integration: leader election over HTTP (docs/elections.md) across two
 * redlockd instances on the same masters, read as clients read it: the
 * campaign and watch streams event by event over raw sockets. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C, *P;

static void teardown(void)
{
    h_free_pair(&C, &P);
}

TestSuite(elections, .fini = teardown, .timeout = 120);

/* The next event of s within timeout_ms, which must be want; returned (free
 * with cJSON_Delete). */
static cJSON *expect(h_stream *s, int timeout_ms, const char *want)
{
    cJSON *ev = NULL;
    uint64_t at;
    int rc = h_stream_event(s, timeout_ms, &ev, &at);
    cr_assert_eq(rc, 1, "no %s event within %d ms (rc %d)", want, timeout_ms, rc);
    cr_assert_str_eq(h_ev_str(ev, "event"), want, "expected %s, got %s", want, h_ev_str(ev, "event"));
    return ev;
}

/* Reads events until one named want (renewed events in between are fine). */
static cJSON *expect_after_renewals(h_stream *s, int timeout_ms, const char *want)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    for (;;) {
        cJSON *ev = NULL;
        uint64_t at;
        long left = (long)((until - h_now_us()) / 1000);
        cr_assert_gt(left, 0, "no %s event within %d ms", want, timeout_ms);
        cr_assert_eq(h_stream_event(s, (int)left, &ev, &at), 1, "no %s event within %d ms", want,
                     timeout_ms);
        if (!strcmp(h_ev_str(ev, "event"), want))
            return ev;
        cr_assert_str_eq(h_ev_str(ev, "event"), "renewed", "expected %s, got %s", want, h_ev_str(ev, "event"));
        cJSON_Delete(ev);
    }
}

/* Opens a campaign of candidate for election name on c and reads
 * "campaigning". */
static h_stream *campaign(h_cluster *c, const char *name, const char *candidate, const char *value,
                          int ttl_ms)
{
    char path[256], body[256];
    snprintf(path, sizeof path, "/elections/%s", name);
    snprintf(body, sizeof body, "{\"candidate\":\"%s\",\"value\":\"%s\",\"ttl_ms\":%d}", candidate, value,
             ttl_ms);
    h_stream *s = h_stream_open(c, path, body, 5000);
    cr_assert(s, "no answer to the campaign");
    cr_assert_eq(s->status, 201, "campaign: %ld %s", s->status, s->body ? s->body : "");
    cr_assert_str_eq(s->content_type, "application/x-ndjson");
    cJSON *ev = expect(s, 2000, "campaigning");
    cr_assert_str_eq(h_ev_str(ev, "candidate"), candidate);
    cJSON_Delete(ev);
    return s;
}

static h_resp get_election(h_cluster *c, const char *name, const char *query)
{
    char path[256];
    snprintf(path, sizeof path, "/elections/%s%s", name, query ? query : "");
    return h_http(c, "GET", path, NULL, NULL);
}

static void start_two(void)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    P = h_peer_start(C, NULL);
}

/* One leader at a time across two instances; terms strictly increase; the
 * other campaign takes over at once when the leader's stream closes; GET
 * and a watch on the other instance agree. */
Test(elections, one_leader_at_a_time_across_two_instances)
{
    start_two();
    h_stream *a = campaign(C, "db", "a", "10.0.0.1:5432", 3000);
    cJSON *ea = expect(a, 3000, "elected");
    long long t1 = h_ev_int(ea, "term");
    cr_assert_gt(t1, 0);
    cr_assert_str_eq(h_ev_str(ea, "candidate"), "a");
    cr_assert_gt(h_ev_int(ea, "validity_ms"), 0);
    cr_assert_gt(strlen(h_ev_str(ea, "token")), 0);

    h_stream *w = h_stream_get(P, "/elections/db?watch=true", 3000);
    cr_assert(w);
    cr_assert_eq(w->status, 200);
    cJSON *ws = expect(w, 2000, "state");
    cr_assert_str_eq(h_ev_str(ws, "leader"), "a");
    cr_assert_eq(h_ev_int(ws, "term"), t1);
    cr_assert_str_eq(h_ev_str(ws, "value"), "10.0.0.1:5432");

    h_stream *b = campaign(P, "db", "b", "10.0.0.2:5432", 3000);
    cJSON *ev = NULL;
    uint64_t at;
    cr_assert_eq(h_stream_event(b, 1500, &ev, &at), 0, "b was elected while a leads");

    h_resp r = get_election(P, "db", "?candidate=b");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "leader"), "a");
    cr_assert_eq(h_int(&r, "term"), t1);
    cr_assert_gt(h_int(&r, "since"), 1700000000000LL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "is_leader")));
    h_resp_free(&r);
    r = get_election(C, "db", "?candidate=a");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "is_leader")), "%s", r.body);
    h_resp_free(&r);

    /* The leader leaves: b is elected well before a's ttl could run out. */
    uint64_t closed = h_now_us();
    h_stream_close(a);
    cJSON *eb = expect(b, 2500, "elected");
    double took_ms = (double)(h_now_us() - closed) / 1000.0;
    long long t2 = h_ev_int(eb, "term");
    cr_assert_gt(t2, t1, "terms strictly increase");
    cr_log_info("elections: b elected %.1f ms after a's stream closed (ttl 3000)", took_ms);
    cr_assert_lt(took_ms, 2500.0);

    /* (a watch may read the vacancy between the two leaders first) */
    cJSON *we = NULL;
    uint64_t wat;
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(h_stream_event(w, 2000, &we, &wat), 1, "no elected event on the watch");
        if (strcmp(h_ev_str(we, "event"), "vacant"))
            break;
        cJSON_Delete(we);
        we = NULL;
    }
    cr_assert_str_eq(h_ev_str(we, "event"), "elected");
    cr_log_info("elections: the watch on the other instance told it %.1f ms after the close",
                (double)(h_now_us() - closed) / 1000.0);
    cr_assert_str_eq(h_ev_str(we, "leader"), "b");
    cr_assert_eq(h_ev_int(we, "term"), t2);
    r = get_election(C, "db", NULL);
    cr_assert_str_eq(h_str(&r, "leader"), "b");
    cr_assert_eq(h_int(&r, "term"), t2);
    h_resp_free(&r);

    cJSON_Delete(ea);
    cJSON_Delete(eb);
    cJSON_Delete(ws);
    cJSON_Delete(we);
    h_stream_close(b);
    h_stream_close(w);
}

/* Proclaim with the token (through the other instance), a wrong token is
 * refused, resigning with DELETE ends the stream and the watch sees the
 * value change and the vacancy, in order. */
Test(elections, proclaim_and_resign)
{
    start_two();
    h_stream *a = campaign(C, "cfg", "a", "v1", 3000);
    cJSON *ea = expect(a, 3000, "elected");
    char token[300];
    snprintf(token, sizeof token, "%s", h_ev_str(ea, "token"));
    long long term = h_ev_int(ea, "term");
    h_stream *w = h_stream_get(C, "/elections/cfg?watch=true", 3000);
    cJSON_Delete(expect(w, 2000, "state"));

    char hdr[400];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", token);
    h_resp r = h_http(P, "PUT", "/elections/cfg/value", "{\"value\":\"v2\"}", hdr, NULL);
    cr_assert_eq(r.status, 204, "%ld %s", r.status, r.body);
    h_resp_free(&r);
    r = h_http(P, "PUT", "/elections/cfg/value", "{\"value\":\"v3\",\"token\":\"not-the-token\"}", NULL);
    cr_assert_eq(r.status, 409, "%ld %s", r.status, r.body);
    cr_assert_str_eq(h_str(&r, "error"), "not_held");
    h_resp_free(&r);
    r = get_election(P, "cfg", NULL);
    cr_assert_str_eq(h_str(&r, "value"), "v2");
    cr_assert_str_eq(h_str(&r, "leader"), "a");
    cr_assert_eq(h_int(&r, "term"), term);
    h_resp_free(&r);
    cJSON *wp = expect(w, 2000, "proclaimed");
    cr_assert_str_eq(h_ev_str(wp, "value"), "v2");
    cr_assert_eq(h_ev_int(wp, "term"), term);

    r = h_http(C, "DELETE", "/elections/cfg", NULL, hdr, NULL);
    cr_assert_eq(r.status, 204, "%ld %s", r.status, r.body);
    h_resp_free(&r);
    cJSON_Delete(expect_after_renewals(a, 2000, "resigned"));
    cJSON *ev = NULL;
    uint64_t at;
    cr_assert_eq(h_stream_event(a, 2000, &ev, &at), -1, "the stream ends after resigned");
    r = get_election(P, "cfg", "?candidate=a");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r.json, "leader")), "%s", r.body);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "is_leader")));
    h_resp_free(&r);
    cJSON_Delete(expect(w, 2000, "vacant"));

    r = h_http(P, "DELETE", "/elections/cfg", NULL, hdr, NULL);
    cr_assert_eq(r.status, 409, "a second resign: %ld %s", r.status, r.body);
    h_resp_free(&r);
    cJSON_Delete(ea);
    cJSON_Delete(wp);
    h_stream_close(a);
    h_stream_close(w);
}

/* Two masters paused: the leader keeps renewing, the rival keeps waiting.
 * Three paused: the leader is told "lost" before its validity ends; once
 * they are back the rival is elected with a higher term. */
Test(elections, paused_masters)
{
    start_two();
    h_stream *a = campaign(C, "pm", "a", "", 1500);
    cJSON *ea = expect(a, 3000, "elected");
    long long t1 = h_ev_int(ea, "term");
    h_stream *b = campaign(P, "pm", "b", "", 1500);
    h_master_pause(C, 0);
    h_master_pause(C, 1);
    for (int i = 0; i < 4; i++)
        cJSON_Delete(expect(a, 1500, "renewed"));
    cJSON *ev = NULL;
    uint64_t at;
    cr_assert_eq(h_stream_event(b, 200, &ev, &at), 0, "b elected while a renews");
    h_master_pause(C, 2);
    cJSON *lost = expect_after_renewals(a, 3000, "lost");
    cr_log_info("elections: lost with three of five paused: %s", h_ev_str(lost, "reason"));
    cr_assert_eq(h_stream_event(b, 500, &ev, &at), 0, "b elected without a majority");
    h_master_resume(C, 0);
    h_master_resume(C, 1);
    h_master_resume(C, 2);
    cJSON *eb = expect(b, 6000, "elected");
    cr_assert_gt(h_ev_int(eb, "term"), t1);
    cJSON_Delete(ea);
    cJSON_Delete(eb);
    cJSON_Delete(lost);
    h_stream_close(a);
    h_stream_close(b);
}

/* A master restarted without its data: the leader keeps renewing on the
 * others, and the next term is still higher than every earlier one. */
Test(elections, restarted_master)
{
    start_two();
    h_stream *a = campaign(C, "rm", "a", "", 1500);
    cJSON *ea = expect(a, 3000, "elected");
    long long t1 = h_ev_int(ea, "term");
    h_master_kill(C, 4);
    h_master_restart(C, 4);
    for (int i = 0; i < 3; i++)
        cJSON_Delete(expect(a, 1500, "renewed"));
    h_stream_close(a);
    h_stream *b = campaign(P, "rm", "b", "", 1500);
    cJSON *eb = expect(b, 4000, "elected");
    cr_assert_gt(h_ev_int(eb, "term"), t1);
    cJSON_Delete(ea);
    cJSON_Delete(eb);
    h_stream_close(b);
}

/* Names and bodies: no election or lock name reaches the election's lock
 * (names hold no control byte, test_names.c), and malformed requests are
 * 400s naming the field. */
Test(elections, names_and_bad_requests)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    struct { const char *method, *path, *body; long status; const char *error; } cases[] = {
        {"GET", "/elections/a%1F%23election", NULL, 400, "bad_name"},
        {"GET", "/locks/db%1F%23election", NULL, 400, "bad_name"},
        {"POST", "/elections/db", "{}", 400, "bad_request"},
        {"POST", "/elections/db", "{\"candidate\":\"has\\ttab\"}", 400, "bad_request"},
        {"POST", "/elections/db", "{\"candidate\":\"a\",\"ttl_ms\":10}", 400, "bad_request"},
        {"POST", "/elections/db", "{\"candidate\":\"a\",\"value\":7}", 400, "bad_request"},
        {"PUT", "/elections/db/value", "{\"value\":\"x\"}", 400, "bad_request"},
        {"DELETE", "/elections/db", NULL, 400, "bad_request"},
        {"GET", "/elections/db?watch=maybe", NULL, 400, "bad_request"},
        {"PATCH", "/elections/db", "{}", 405, "method_not_allowed"},
        {"GET", "/elections/db/value", NULL, 405, "method_not_allowed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        h_resp r = h_http(C, cases[i].method, cases[i].path, cases[i].body, NULL);
        cr_expect_eq(r.status, cases[i].status, "%s %s: %ld %s", cases[i].method, cases[i].path, r.status,
                     r.body);
        cr_expect_str_eq(h_str(&r, "error"), cases[i].error, "%s %s", cases[i].method, cases[i].path);
        h_resp_free(&r);
    }
    h_resp r = get_election(C, "db", NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r.json, "leader")), "%s", r.body);
    h_resp_free(&r);
    /* A lock of the same name is another thing. */
    r = h_http(C, "POST", "/locks/db", "{}", NULL);
    cr_assert_eq(r.status, 201);
    h_resp_free(&r);
    r = get_election(C, "db", NULL);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r.json, "leader")), "%s", r.body);
    h_resp_free(&r);
}

/* ---- the CLI ---- */

#include <signal.h>
#include <sys/wait.h>

/* Starts `redlock ARGS...` against c with stdout to out (NULL: inherited). */
static pid_t redlock_start(h_cluster *c, const char *out, const char *const *args)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char url[96];
        snprintf(url, sizeof url, "%s", c->base);
        setenv("REDLOCK_URL", url, 1);
        if (out) {
            FILE *f = freopen(out, "w", stdout);
            (void)f;
        }
        const char *argv[32];
        int n = 0;
        argv[n++] = getenv("REDLOCK_BIN");
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (h_now_us() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Four `redlock elect` runs through two instances: each is elected in
 * turn, the commands never overlap, each sees REDLOCK_TERM, the terms
 * strictly increase in the order the leaders ran, and `elect --observe`
 * prints each new leader. */
Test(elections, cli_elect_and_observe)
{
    start_two();
    char dir[] = "/tmp/redlockd-elect-XXXXXX";
    cr_assert(mkdtemp(dir));
    char log[64], obs[64], cmd[400];
    snprintf(log, sizeof log, "%s/runs", dir);
    snprintf(obs, sizeof obs, "%s/observed", dir);
    snprintf(cmd, sizeof cmd,
             "echo \"start $(date +%%s%%N) $REDLOCK_TERM\" >> %s; sleep 0.6; echo \"end $(date +%%s%%N)\" >> %s",
             log, log);
    const char *observe[] = {"elect", "--observe", "batch", NULL};
    pid_t o = redlock_start(C, obs, observe);
    usleep(300000);
    pid_t p[4];
    for (int i = 0; i < 4; i++) {
        char cand[16];
        snprintf(cand, sizeof cand, "w%d", i);
        const char *args[] = {"elect", "--ttl", "2s", "--candidate", cand, "batch", "--", "sh", "-c", cmd, NULL};
        p[i] = redlock_start(i % 2 ? P : C, NULL, args);
    }
    for (int i = 0; i < 4; i++)
        cr_assert_eq(wait_exit(p[i], 20000), 0, "redlock elect %d", i);
    usleep(600000);
    kill(o, SIGTERM);
    wait_exit(o, 3000);

    FILE *f = fopen(log, "r");
    cr_assert(f);
    char kind[8];
    long long t, term, last_end = 0, last_term = 0;
    int starts = 0;
    while (fscanf(f, "%7s %lld", kind, &t) == 2) {
        if (!strcmp(kind, "start")) {
            cr_assert_eq(fscanf(f, "%lld", &term), 1, "REDLOCK_TERM is set");
            cr_assert_gt(t, last_end, "a leader started before the previous one ended");
            cr_assert_gt(term, last_term, "terms strictly increase");
            last_term = term;
            starts++;
        } else {
            last_end = t;
        }
    }
    fclose(f);
    cr_assert_eq(starts, 4);
    f = fopen(obs, "r");
    cr_assert(f);
    char line[400];
    int elected = 0;
    long long prev = 0;
    while (fgets(line, sizeof line, f)) {
        long long tm;
        if (sscanf(line, "elected: w%*d, term %lld", &tm) == 1) {
            cr_assert_gt(tm, prev, "observed terms increase: %s", line);
            prev = tm;
            elected++;
        }
    }
    fclose(f);
    cr_log_info("elections: the observer printed %d of 4 elections", elected);
    cr_assert_geq(elected, 3, "the observer saw most of the leaders (it reads every 250 ms)");
    cr_assert_eq(prev, last_term, "the observer saw the last term");
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
}
