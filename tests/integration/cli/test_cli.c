/* Integration: the `redlock` command-line client as a user runs it, the
 * real binary against the real redlockd and real masters: the one-call
 * commands and their exit codes, tokens and names at the edges, auth, and
 * the README's examples as printed. (HTTPS and Unix sockets:
 * test_cli_listen.c; run, CMD and signals: test_cli_run.c; what they share:
 * cli_harness.h.) */
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

TestSuite(cli, .init = cli_setup, .fini = cli_teardown, .timeout = 150);

/* ---- the command line ---- */

Test(cli, usage_errors_exit_64)
{
    cr_assert_eq(RUN("u1", "acquire"), 64);
    cr_assert(strstr(err_of("u1"), "redlock: acquire: needs NAME"), "%s", err_of("u1"));
    cr_assert_eq(RUN("u2", "run", "--ttl", "30", "x", "--", "true"), 64);
    cr_assert(strstr(err_of("u2"), "a bare number"), "%s", err_of("u2"));
    cr_assert_eq(RUN("u3", "frobnicate"), 64);
    cr_assert_eq(RUN("u4", "run", "x"), 64);
    cr_assert_eq(RUN("u5", "status", "a\tb"), 64);
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

#define RULES_NAME_MAX_TEST 200   /* the service's longest name (rules.h) */

/* Names as people type them (issue 31): a path, an e-mail address, spaces
 * and UTF-8 go through acquire, status, extend and release as they are. */
Test(cli, names_with_slashes_at_signs_and_utf8)
{
    start_service(5, NULL);
    char longest[RULES_NAME_MAX_TEST + 1] = "";
    for (int i = 0; i < RULES_NAME_MAX_TEST / 2; i++)
        strcat(longest, "\xc3\xa9");   /* 200 bytes, 600 once percent-encoded */
    const char *names[] = {"reports/2026/11", "user@example.com", "nightly backup", "caf\xc3\xa9/\xe6\x9d\xb1",
                           "a%2Fb", longest};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        cr_assert_eq(RUN("a", "acquire", "--ttl", "10s", "--owner", "j\xc3\xb6rg 7", names[i]), 0, "%s: %s", names[i],
                     err_of("a"));
        char token[300];
        snprintf(token, sizeof token, "%s", out_of("a"));
        token[strcspn(token, "\n")] = '\0';
        cr_assert_eq(RUN("s", "status", names[i]), 0, "%s", err_of("s"));
        cr_assert(strstr(out_of("s"), "held"), "%s: %s", names[i], out_of("s"));
        cr_assert_eq(RUN("b", "acquire", names[i]), 75, "a second acquire of %s: %s", names[i], err_of("b"));
        cr_assert_eq(RUN("x", "extend", "--ttl", "20s", names[i], token), 0, "%s", err_of("x"));
        cr_assert_eq(RUN("d", "release", names[i], token), 0, "%s", err_of("d"));
        cr_assert_eq(RUN("s2", "status", names[i]), 1, "%s still held", names[i]);
    }
    /* the service saw one name each: a%2Fb is five bytes, not a/b */
    h_resp g = h_http(C, "GET", "/locks/a%252Fb", NULL, NULL);
    cr_assert_str_eq(h_str(&g, "name"), "a%2Fb");
    h_resp_free(&g);
}

/* An operator's force release through the client (issue 32): the admin
 * token from REDLOCK_ADMIN_TOKEN or --admin-token-file; the ordinary token
 * or none is refused (77 and 64), and the lock stays. */
Test(cli, release_force_with_the_admin_token)
{
    char admin[400];
    snprintf(admin, sizeof admin, "%s/admin-token", T);
    FILE *f = fopen(admin, "w");
    fputs("adm1n\n", f);
    fclose(f);
    start_service(5, "--admin-token-file", admin, NULL);
    cr_assert_eq(RUN("a", "acquire", "--ttl", "60s", "--owner", "crashed cron", "cron/nightly"), 0, "%s", err_of("a"));
    cr_assert_eq(RUN("n", "release", "--force", "cron/nightly"), 64, "no admin token: %s", err_of("n"));
    cr_assert(strstr(err_of("n"), "REDLOCK_ADMIN_TOKEN"), "%s", err_of("n"));
    setenv("REDLOCK_ADMIN_TOKEN", "not-it", 1);
    cr_assert_eq(RUN("w", "release", "--force", "cron/nightly"), 77, "a wrong admin token: %s", err_of("w"));
    cr_assert(h_held(C, "cron%2Fnightly"), "a refused force released it");
    unsetenv("REDLOCK_ADMIN_TOKEN");
    cr_assert_eq(RUN("f", "release", "--force", "--admin-token-file", admin, "cron/nightly"), 0, "%s", err_of("f"));
    cr_assert_not(h_held(C, "cron%2Fnightly"), "still held after release --force");
    cr_assert_eq(RUN("a2", "acquire", "cron/nightly"), 0, "%s", err_of("a2"));
    setenv("REDLOCK_ADMIN_TOKEN", "adm1n", 1);
    cr_assert_eq(RUN("f2", "release", "cron/nightly", "--force"), 0, "--force after NAME: %s", err_of("f2"));
    unsetenv("REDLOCK_ADMIN_TOKEN");
    cr_assert_not(h_held(C, "cron%2Fnightly"));
    cr_assert_eq(RUN("u", "release", "--force", "cron/nightly", "tok"), 64, "--force takes no TOKEN");
}

/* `redlock list` prints every lock a majority holds, one a line with its
 * validity, fence and owner (UTF-8 as it is), across the service's pages;
 * --prefix narrows it, --json gives every entry in one object. */
Test(cli, list_prints_every_lock)
{
    start_service(5, NULL);
    cr_assert_eq(RUN("e", "list"), 0, "%s", err_of("e"));
    cr_assert_str_eq(out_of("e"), "", "nothing held: %s", out_of("e"));
    for (int i = 0; i < 1205; i++) {   /* more than one page of 1,000 */
        char path[64];
        snprintf(path, sizeof path, "/locks/batch-%04d", i);
        h_resp r = h_http(C, "POST", path, "{\"ttl_ms\":60000}", NULL);
        cr_assert_eq(r.status, 201, "%s", r.body);
        h_resp_free(&r);
    }
    cr_assert_eq(RUN("a", "acquire", "--ttl", "60s", "--owner", "jörg", "reports/2026/11"), 0, "%s", err_of("a"));
    cr_assert_eq(RUN("l", "list"), 0, "%s", err_of("l"));
    /* (out_of keeps 8 KiB: the whole output from its file) */
    char file[400], line[700];
    path_of(file, sizeof file, "l.out");
    FILE *f = fopen(file, "r");
    cr_assert_not_null(f);
    int lines = 0;
    bool mine = false, last = false;
    while (fgets(line, sizeof line, f)) {
        lines++;
        mine |= !strncmp(line, "reports/2026/11  validity ", 26) && strstr(line, ", owner jörg\n");
        last |= !strncmp(line, "batch-1204  validity ", 21);
    }
    fclose(f);
    cr_assert_eq(lines, 1206, "redlock list printed %d lines", lines);
    cr_assert(mine, "reports/2026/11 with its owner as it is");
    cr_assert(last, "batch-1204 (past the first page of 1,000)");
    cr_assert_eq(RUN("p", "list", "--prefix", "reports/"), 0, "%s", err_of("p"));
    cr_assert(!strncmp(out_of("p"), "reports/2026/11  validity ", 26) && strstr(out_of("p"), ", fence ") &&
              !strchr(strchr(out_of("p"), '\n') + 1, '\n'), "--prefix: %s", out_of("p"));
    cr_assert_eq(RUN("j", "list", "--json", "--prefix", "batch-000"), 0, "%s", err_of("j"));
    cJSON *j = cJSON_Parse(out_of("j"));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "locks")), 10, "--json: %s", out_of("j"));
    cJSON_Delete(j);
    cr_assert_eq(RUN("u", "list", "extra"), 64, "list takes no NAME");
    cr_assert_eq(RUN("b", "list", "--prefix", "\x01"), 64, "a control byte in --prefix");
    h_master_pause(C, 0);
    h_master_pause(C, 1);
    h_master_pause(C, 2);
    cr_assert_eq(RUN("q", "list"), 69, "no quorum: %s", err_of("q"));
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
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
    cr_assert_eq(RUN("x", "extend", "--ttl", "20s", "lockstore||dash", "-dash-owner"), 0, "%s", err_of("x"));
    cr_assert_eq(RUN("d", "release", "lockstore||dash", "-dash-owner"), 0, "%s", err_of("d"));
    cr_assert_not(h_held(C, "lockstore%7C%7Cdash"), "release by a token that begins with '-' left it held");
    cr_assert_eq(RUN("d2", "release", "lockstore||dash", "-dash-owner", "--url", C->base), 1, "%s",
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
    cr_assert_eq(RUN("a", "acquire", "q"), 69);
    cr_assert(strstr(err_of("a"), "redlock: no_quorum: ") && strstr(err_of("a"), "of 5 masters answered"),
              "%s", err_of("a"));
    cr_assert_null(strstr(err_of("a"), "retrying"), "without --wait: %s", err_of("a"));
    /* with --wait, the 503 is ridden out until the wait is spent */
    uint64_t t0 = h_now_us();
    cr_assert_eq(RUN("w", "acquire", "--wait", "2s", "q"), 69);
    double s = (double)(h_now_us() - t0) / 1e6;
    cr_assert(s >= 1.9, "acquire --wait 2s gave up after %.2f s", s);
    cr_assert(strstr(err_of("w"), "; retrying (attempt 1, "), "%s", err_of("w"));
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    cr_assert_eq(RUN("r", "run", "q", "--", "touch", marker), 69);
    cr_assert_eq(access(marker, F_OK), -1, "CMD ran without the lock");
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
}

static bool retrying(void *tag) { return strstr(err_of(tag), "; retrying (attempt ") != NULL; }

/* A transient 503 (here no quorum while 3 of 5 masters are paused) is no
 * reason to give up a wait: acquire --wait and run --wait forever retry,
 * say so on stderr, and get the lock once the masters are back. */
Test(cli, waits_ride_out_a_transient_no_quorum)
{
    start_service(5, NULL);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    cr_assert(h_wait_status(C, "/readyz", 503, 5000));
    char marker[400];
    path_of(marker, sizeof marker, "ran");
    pid_t a = START("a", "acquire", "--wait", "60s", "transient");
    pid_t r = START("r", "run", "--wait", "forever", "transient2", "--", "touch", marker);
    /* both have met the 503 at least once before the masters come back */
    cr_assert(h_eventually(retrying, "a", 20000), "acquire: no retry line: %s", err_of("a"));
    cr_assert(h_eventually(retrying, "r", 20000), "run: no retry line: %s", err_of("r"));
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    cr_assert_eq(finish(a, 60000), 0, "%s", err_of("a"));
    cr_assert_eq(finish(r, 60000), 0, "%s", err_of("r"));
    cr_assert(strstr(err_of("a"), "redlock: no_quorum: "), "%s", err_of("a"));
    cr_assert_eq(access(marker, F_OK), 0, "CMD did not run");
    cr_assert(h_held(C, "transient"), "the lock acquire printed is not held");
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


/* ---- REDLOCK_TOKEN (issue 43; HTTPS and Unix sockets: test_cli_listen.c) ---- */

/* REDLOCK_TOKEN is the bearer token; REDLOCK_AUTH_TOKEN, its older name,
 * wins when set. Inside `run`, REDLOCK_TOKEN is the lock's token: a
 * redlock that CMD runs still authenticates with the bearer token. */
Test(cli, redlock_token_is_the_bearer_token)
{
    char tokfile[400], script[1200];
    path_of(tokfile, sizeof tokfile, "auth");
    FILE *f = fopen(tokfile, "w");
    fputs("s3cret-token\n", f);
    fclose(f);
    start_service(3, "--auth-token-file", tokfile, NULL);
    setenv("REDLOCK_TOKEN", "s3cret-token", 1);
    cr_assert_eq(RUN("a", "acquire", "--ttl", "10s", "x"), 0, "%s", err_of("a"));
    snprintf(script, sizeof script, "'%s' status x && '%s' acquire inner", bin(), bin());
    cr_assert_eq(RUN("n", "run", "y", "--", "sh", "-c", script), 0, "nested: %s", err_of("n"));
    const char *out = out_of("n"), *second = strchr(out, '\n');
    cr_assert(!strncmp(out, "held: validity ", 15) && second && strlen(second + 1) > 20, "nested: %s", out);
    setenv("REDLOCK_AUTH_TOKEN", "wrong", 1);
    cr_assert_eq(RUN("w", "status", "x"), 77, "REDLOCK_AUTH_TOKEN must win: %s", err_of("w"));
    setenv("REDLOCK_AUTH_TOKEN", "", 1);
    cr_assert_eq(RUN("e", "status", "x"), 77, "set to nothing: no token: %s", err_of("e"));
    unsetenv("REDLOCK_AUTH_TOKEN");
    unsetenv("REDLOCK_TOKEN");
    /* a token from --auth-token-file stays out of CMD's environment */
    snprintf(script, sizeof script, "'%s' status x", bin());
    cr_assert_eq(RUN("f", "--auth-token-file", tokfile, "run", "z", "--", "sh", "-c", script), 77, "%s",
                 err_of("f"));
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
        {"redlock list --prefix ord", "orders  validity ", 0},
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
