/* Integration: an operator's force release (issue 32). DELETE ?force=true
 * on /locks, /elections and /semaphores with the admin token frees the name
 * whatever token holds it: waiters are served at once, held streams and
 * leaders (on either instance) end "lost", reason "forced", the next fence
 * is larger, and a log line names the name, fence, former owner and client.
 * Without the admin token (or with the ordinary one, or without
 * --admin-token-file) it changes nothing. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C, *P;

static void teardown(void)
{
    h_free_pair(&C, &P);
}

TestSuite(admin, .fini = teardown, .timeout = 120);

#define ADMIN "Authorization: Bearer adm1n-s3cret"
#define USER "Authorization: Bearer us3r-s3cret"

static void token_file(const char *name, const char *token, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", C->dir, name);
    FILE *f = fopen(path, "w");
    fprintf(f, "%s\n", token);
    fclose(f);
}

/* Five masters and redlockd with both tokens; with peer, a second instance
 * P too, and no ordinary token (the harness's streams send none). */
static void start(bool peer)
{
    C = h_cluster_start(5, NULL);
    char admin[400], user[400];
    token_file("admin", "adm1n-s3cret", admin, sizeof admin);
    token_file("user", "us3r-s3cret", user, sizeof user);
    if (peer) {
        h_daemon_start(C, "--admin-token-file", admin, NULL);
        P = h_peer_start(C, "--admin-token-file", admin, NULL);
    } else {
        h_daemon_start(C, "--admin-token-file", admin, "--auth-token-file", user, NULL);
    }
}

static bool held(h_cluster *c, const char *path)
{
    h_resp g = h_http(c, "GET", path, NULL, USER, NULL);
    bool h = cJSON_IsTrue(cJSON_GetObjectItem(g.json, "held"));
    h_resp_free(&g);
    return h;
}

struct waiter {
    h_cluster *c;
    const char *path, *body;
    long status;
    uint64_t done_us;
};

static void *wait_for(void *arg)
{
    struct waiter *w = arg;
    h_resp r = h_http(w->c, "POST", w->path, w->body, USER, NULL);
    w->status = r.status;
    w->done_us = h_now_us();
    h_resp_free(&r);
    return NULL;
}

static bool log_has(const char *a, const char *b, const char *c)
{
    FILE *f = fopen(C->log, "r");
    char line[2000];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, a) && strstr(line, b) && strstr(line, c);
    if (f)
        fclose(f);
    return found;
}

Test(admin, force_release_frees_a_lock_whatever_token_holds_it)
{
    start(false);
    h_resp a = h_http(C, "POST", "/locks/cron%2Fnightly", "{\"ttl_ms\":60000,\"owner\":\"cron pod 7\"}", USER, NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    long long fence = h_int(&a, "fence");
    struct waiter w = {.c = C, .path = "/locks/cron%2Fnightly", .body = "{\"wait_ms\":20000}"};
    pthread_t t;
    pthread_create(&t, NULL, wait_for, &w);
    usleep(300000);   /* the waiter waits */
    /* Refused, and nothing changes: no token, the ordinary token, a wrong
     * one, a force that is not "true", the token in another header. */
    struct { const char *path, *hdr; long status; const char *error; } no[] = {
        {"/locks/cron%2Fnightly?force=true", NULL, 401, "unauthorized"},
        {"/locks/cron%2Fnightly?force=true", USER, 403, "forbidden"},
        {"/locks/cron%2Fnightly?force=true", "Authorization: Bearer adm1n-s3creT", 401, "unauthorized"},
        {"/locks/cron%2Fnightly?force=true", "dapr-api-token: adm1n-s3cret", 401, "unauthorized"},
        {"/locks/cron%2Fnightly?force=yes", ADMIN, 400, "bad_request"},
        {"/locks/a%00b?force=true", ADMIN, 400, "bad_name"},
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        h_resp r = no[i].hdr ? h_http(C, "DELETE", no[i].path, NULL, no[i].hdr, NULL)
                             : h_http(C, "DELETE", no[i].path, NULL, NULL);
        cr_assert_eq(r.status, no[i].status, "%zu: %ld %s", i, r.status, r.body);
        cr_assert_str_eq(h_str(&r, "error"), no[i].error, "%zu", i);
        h_resp_free(&r);
    }
    cr_assert(held(C, "/locks/cron%2Fnightly"), "a refused force changed something");
    cr_assert_eq(w.status, 0, "the waiter was served before the force");
    uint64_t t0 = h_now_us();
    h_resp f = h_http(C, "DELETE", "/locks/cron%2Fnightly?force=true", NULL, ADMIN, NULL);
    cr_assert_eq(f.status, 204, "%ld %s", f.status, f.body);
    h_resp_free(&f);
    pthread_join(t, NULL);
    cr_assert_eq(w.status, 201, "the waiter after the force: %ld", w.status);
    cr_log_info("admin: a waiter was served %.1f ms after the force release",
                (double)(w.done_us - t0) / 1000.0);
    h_resp g = h_http(C, "GET", "/locks/cron%2Fnightly", NULL, USER, NULL);
    cr_assert_gt(h_int(&g, "fence"), fence, "the next grant's fence is larger: %s", g.body);
    h_resp_free(&g);
    char want[64];
    snprintf(want, sizeof want, "fence=%lld", fence);
    cr_assert(log_has("force_release", "name=cron/nightly", want), "no force_release line with %s", want);
    cr_assert(log_has("force_release", "owner=\"cron pod 7\"", "client=127.0.0.1:"), "the line names owner and client");
    /* A name nobody holds: 204 all the same, logged as held=no. */
    f = h_http(C, "DELETE", "/locks/nobody?force=true", NULL, ADMIN, NULL);
    cr_assert_eq(f.status, 204);
    h_resp_free(&f);
    cr_assert(log_has("force_release", "name=nobody", "held=no"));
    h_resp_free(&a);
}

static cJSON *next_event(h_stream *s, int ms)
{
    uint64_t until = h_now_us() + (uint64_t)ms * 1000;
    while (h_now_us() < until) {
        cJSON *ev = NULL;
        uint64_t at;
        if (h_stream_event(s, (int)((until - h_now_us()) / 1000) + 1, &ev, &at) != 1)
            return NULL;
        const char *e = h_ev_str(ev, "event");
        if (strcmp(e, "renewed") && strcmp(e, "campaigning"))
            return ev;
        cJSON_Delete(ev);
    }
    return NULL;
}

static void expect(h_stream *s, const char *event, const char *reason, const char *what)
{
    cJSON *ev = next_event(s, 5000);
    cr_assert(ev, "%s: no event", what);
    cr_assert_str_eq(h_ev_str(ev, "event"), event, "%s: %s", what, cJSON_PrintUnformatted(ev));
    if (reason)
        cr_assert_str_eq(h_ev_str(ev, "reason"), reason, "%s", what);
    cJSON_Delete(ev);
}

/* With a second instance: streams held there end "lost" "forced" by a
 * force sent here (the notice), as do those held here. */
Test(admin, held_streams_leaders_and_permits_end_lost_forced)
{
    start(true);
    h_stream *here = h_stream_open(C, "/locks/db%2Fmigrate", "{\"hold\":true}", 3000);
    cr_assert(here && here->status == 201);
    expect(here, "acquired", NULL, "lock here");
    h_stream *leader = h_stream_open(P, "/elections/db", "{\"candidate\":\"a\"}", 3000);
    cr_assert(leader && leader->status == 201);
    expect(leader, "elected", NULL, "leader there");
    h_stream *rival = h_stream_open(C, "/elections/db", "{\"candidate\":\"b\"}", 3000);
    cr_assert(rival && rival->status == 201);
    h_stream *p1 = h_stream_open(P, "/semaphores/gpu", "{\"hold\":true,\"limit\":2}", 3000);
    h_stream *p2 = h_stream_open(C, "/semaphores/gpu", "{\"hold\":true,\"limit\":2}", 3000);
    cr_assert(p1 && p1->status == 201 && p2 && p2->status == 201);
    expect(p1, "acquired", NULL, "permit there");
    expect(p2, "acquired", NULL, "permit here");

    h_resp f = h_http(C, "DELETE", "/locks/db%2Fmigrate?force=true", NULL, ADMIN, NULL);
    cr_assert_eq(f.status, 204);
    h_resp_free(&f);
    expect(here, "lost", "forced", "the held lock");
    f = h_http(C, "DELETE", "/elections/db?force=true", NULL, ADMIN, NULL);
    cr_assert_eq(f.status, 204);
    h_resp_free(&f);
    expect(leader, "lost", "forced", "the leader on the other instance");
    expect(rival, "elected", NULL, "the rival, after the force");
    f = h_http(C, "DELETE", "/semaphores/gpu?force=true", NULL, ADMIN, NULL);
    cr_assert_eq(f.status, 204);
    h_resp_free(&f);
    expect(p1, "lost", "forced", "the permit there");
    expect(p2, "lost", "forced", "the permit here");
    h_resp g = h_http(C, "GET", "/semaphores/gpu", NULL, USER, NULL);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g.json, "holders")), 0, "%s", g.body);
    h_resp_free(&g);
    cr_assert(log_has("force_release", "kind=semaphore", "permits=2"));
    h_stream *all[] = {here, leader, rival, p1, p2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        h_stream_close(all[i]);
}

Test(admin, force_is_refused_without_an_admin_token_file)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_resp a = h_http(C, "POST", "/locks/kept", NULL, NULL);
    cr_assert_eq(a.status, 201);
    h_resp f = h_http(C, "DELETE", "/locks/kept?force=true", NULL, "Authorization: Bearer anything", NULL);
    cr_assert_eq(f.status, 403, "%ld %s", f.status, f.body);
    cr_assert(strstr(h_str(&f, "message"), "--admin-token-file"), "%s", f.body);
    cr_assert(h_held(C, "kept"));
    h_resp_free(&f);
    h_resp_free(&a);
}

/* An admin token that is the ordinary one would let every client force
 * releases: refused at start, one line, exit 2. */
Test(admin, an_admin_token_equal_to_the_ordinary_one_is_refused_at_start)
{
    C = h_cluster_start(1, NULL);
    char admin[400], user[400], cmd[1200], out[4096];
    token_file("admin", "s4me-t0ken", admin, sizeof admin);
    token_file("user", "  s4me-t0ken  ", user, sizeof user);
    snprintf(cmd, sizeof cmd, "timeout 5 %s --listen 127.0.0.1:%d --masters 127.0.0.1:%d --admin-token-file %s "
             "--auth-token-file %s 2>&1",
             getenv("REDLOCKD_BIN"), h_free_port(), C->m[0].port, admin, user);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d: %s", st, out);
    char *nl = strchr(out, '\n');
    cr_assert(nl && nl[1] == '\0', "not one line: %s", out);
    cr_assert(strstr(out, "--admin-token-file") && strstr(out, "--auth-token-file"), "%s", out);
}

/* A listing's cursor that does not decode (a broken escape) is refused,
 * as one the service never gave: the walk does not silently start over. */
Test(admin, a_cursor_that_does_not_decode_is_bad_request)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_resp a = h_http(C, "POST", "/locks/listed", NULL, NULL);
    cr_assert_eq(a.status, 201);
    h_resp_free(&a);
    const char *routes[] = {"/locks", "/elections", "/semaphores"};
    const char *bad[] = {"%zz", "%", "0.0.%zz", "%4"};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            char path[80];
            snprintf(path, sizeof path, "%s?cursor=%s", routes[i], bad[j]);
            h_resp r = h_http(C, "GET", path, NULL, NULL);
            cr_assert_eq(r.status, 400, "%s: %ld %s", path, r.status, r.body);
            cr_assert_str_eq(h_str(&r, "error"), "bad_request", "%s: %s", path, r.body);
            cr_assert(strstr(h_str(&r, "message"), "cursor"), "%s: %s", path, r.body);
            h_resp_free(&r);
        }
    /* an encoded cursor that decodes to one the service gave is fine */
    h_resp r = h_http(C, "GET", "/locks?cursor=%30.0.0", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    h_resp_free(&r);
}

/* The names "." and ".." cannot be put in a browser's path (%2E is a dot
 * segment to a WHATWG URL parser): the force release's query form frees
 * them, on the three routes, as the dashboard sends it. */
Test(admin, the_query_form_frees_dot_names)
{
    start(false);
    const char *kinds[] = {"/locks/", "/elections/", "/semaphores/"};
    const char *bodies[] = {"{\"ttl_ms\":60000}", NULL, "{\"limit\":1,\"ttl_ms\":60000}"};
    const char *names[][2] = {{".", "%2E"}, {"..", "%2E%2E"}};
    for (size_t k = 0; k < 3; k++)
        for (size_t n = 0; n < 2; n++) {
            char path[80], status[80];
            snprintf(path, sizeof path, "%s%s", kinds[k], names[n][1]);
            if (bodies[k]) {
                h_resp a = h_http(C, "POST", path, bodies[k], USER, NULL);
                cr_assert_eq(a.status, 201, "%s: %ld %s", path, a.status, a.body);
                h_resp_free(&a);
            }
            snprintf(status, sizeof status, "%s?force=true&name=%s", kinds[k], names[n][0]);
            h_resp f = h_http(C, "DELETE", status, NULL, ADMIN, NULL);
            cr_assert_eq(f.status, 204, "%s: %ld %s", status, f.status, f.body);
            h_resp_free(&f);
            if (k == 0)
                cr_assert_not(held(C, path), "%s still held after %s", path, status);
            if (k == 2) {
                h_resp g = h_http(C, "GET", path, NULL, USER, NULL);
                cr_assert(strstr(g.body, "\"holders\":[]"), "%s after the force: %s", path, g.body);
                h_resp_free(&g);
            }
        }
    cr_assert(log_has("force_release", "name=..", "kind=semaphore"), "no log line of the query form");
    /* the path serves DELETE ?force=true&name= only */
    h_resp r = h_http(C, "DELETE", "/locks/?name=.", NULL, ADMIN, NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_str_eq(h_str(&r, "message"), "force must be true");
    h_resp_free(&r);
    r = h_http(C, "DELETE", "/locks/?force=true", NULL, ADMIN, NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_str_eq(h_str(&r, "error"), "bad_name");
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks/?force=true&name=.", NULL, ADMIN, NULL);
    cr_assert_eq(r.status, 405, "%ld %s", r.status, r.body);
    cr_assert_str_eq(r.allow, "DELETE");
    h_resp_free(&r);
    r = h_http(C, "DELETE", "/locks/?force=true&name=a%01b", NULL, ADMIN, NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_str_eq(h_str(&r, "error"), "bad_name");
    h_resp_free(&r);
    r = h_http(C, "DELETE", "/locks/?force=true&name=x", NULL, USER, NULL);
    cr_assert_eq(r.status, 403, "the ordinary token: %ld %s", r.status, r.body);
    h_resp_free(&r);
}
