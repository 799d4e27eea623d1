/* Integration: browsers (issue 41, finding A). A page of another origin
 * may POST to redlockd without a preflight (text/plain, a form), and a
 * page whose name an attacker rebinds to 127.0.0.1 is served as if it
 * were local. So a request whose Origin is neither the service's own
 * (http:// and the Host it was reached at) nor one of --allow-origin is
 * answered 403 forbidden_origin, and on a loopback listener a Host that is
 * neither a loopback address nor localhost (nor one of --allow-host) 403
 * forbidden_host; either changes nothing. Requests without Origin (curl,
 * SDKs) are served as before, whatever their Content-Type. /healthz is
 * open to any Host; /healthz, /readyz and /metrics to any Origin. A
 * non-loopback listener takes any Host until --allow-host is given. The
 * dashboard may not be framed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void teardown(void)
{
    h_cluster_free(C);
    C = NULL;
    unsetenv("REDLOCKD_ALLOW_ORIGIN");
    unsetenv("REDLOCKD_ALLOW_HOST");
}

TestSuite(browsers, .fini = teardown, .timeout = 120);

#define EVIL "Origin: https://evil.example"
#define TEXT "Content-Type: text/plain"

/* "Host: HOST:PORT" and "Origin: http://HOST:PORT", PORT the service's. */
static void host_hdr(char *out, size_t cap, const char *host)
{
    snprintf(out, cap, "Host: %s:%d", host, C->http_port);
}

static void origin_hdr(char *out, size_t cap, const char *host)
{
    snprintf(out, cap, "Origin: http://%s:%d", host, C->http_port);
}

/* The answer is 403 with the JSON error code, and nothing of name was
 * written on any master. */
static void refused(h_resp *r, const char *code, const char *name, const char *what)
{
    cr_assert_eq(r->status, 403, "%s: %ld %s", what, r->status, r->body);
    cr_assert_str_eq(h_str(r, "error") ? h_str(r, "error") : "", code, "%s: %s", what, r->body);
    cr_assert(h_str(r, "message") && strlen(h_str(r, "message")) > 10, "%s: %s", what, r->body);
    if (name)
        cr_assert_eq(h_keys_left(C, name), 0, "%s: keys of %s were written", what, name);
    h_resp_free(r);
}

static void served(h_resp *r, long status, const char *what)
{
    cr_assert_eq(r->status, status, "%s: %ld %s", what, r->status, r->body);
    h_resp_free(r);
}

/* The CSRF of the review: a page on https://evil.example POSTs a lock as
 * text/plain (no preflight), on every route that changes, lists or
 * inspects something. */
Test(browsers, another_origin_changes_and_reads_nothing)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    h_resp r = h_http(C, "POST", "/locks/payroll", "{\"ttl_ms\":60000}", EVIL, TEXT, NULL);
    refused(&r, "forbidden_origin", "payroll", "POST /locks/payroll from evil.example");
    r = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore",
               "{\"resourceId\":\"payroll\",\"lockOwner\":\"evil\",\"expiryInSeconds\":60}", EVIL, TEXT, NULL);
    refused(&r, "forbidden_origin", "lockstore||payroll", "Dapr's lock from evil.example");
    r = h_http(C, "POST", "/elections/payroll", "{\"candidate\":\"evil\"}", EVIL, TEXT, NULL);
    refused(&r, "forbidden_origin", "payroll\x1f#election", "a campaign from evil.example");
    r = h_http(C, "POST", "/semaphores/payroll", "{\"limit\":2}", EVIL, TEXT, NULL);
    refused(&r, "forbidden_origin", NULL, "a permit from evil.example");
    r = h_http(C, "GET", "/semaphores/payroll", NULL, NULL);
    cr_assert(r.status == 200 && strstr(r.body, "\"holders\":[]"), "no permit taken: %s", r.body);
    h_resp_free(&r);

    /* A lock held by a real client: another origin can neither free nor
     * see it, nor list what is held. */
    r = h_http(C, "POST", "/locks/held", "{\"ttl_ms\":60000}", NULL);
    cr_assert_eq(r.status, 201);
    char tok[300];
    snprintf(tok, sizeof tok, "Lock-Token: %s", h_str(&r, "token"));
    h_resp_free(&r);
    const char *paths[][2] = {{"DELETE", "/locks/held"}, {"PATCH", "/locks/held"}, {"GET", "/locks/held"},
                              {"GET", "/locks"}, {"GET", "/elections"}, {"GET", "/semaphores"},
                              {"GET", "/ui/state"}, {"GET", "/ui"}, {"PUT", "/locks/held/heartbeat"},
                              {"GET", "/v1.0/metadata"}, {"GET", "/nope"}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        r = h_http(C, paths[i][0], paths[i][1], NULL, EVIL, tok, NULL);
        char what[100];
        snprintf(what, sizeof what, "%s %s from evil.example", paths[i][0], paths[i][1]);
        refused(&r, "forbidden_origin", NULL, what);
    }
    cr_assert(h_held(C, "held"), "the lock was freed by another origin");
    r = h_http(C, "DELETE", "/locks/held", NULL, "Origin: null", tok, NULL);
    refused(&r, "forbidden_origin", NULL, "DELETE from Origin: null (a sandboxed page)");
    cr_assert(h_held(C, "held"));
    /* The probes answer any origin: they change nothing, and a page of
     * another origin cannot read them (no CORS header is ever sent). */
    const char *open[] = {"/healthz", "/readyz", "/metrics", "/v1.0/healthz"};
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++) {
        r = h_http(C, "GET", open[i], NULL, EVIL, NULL);
        cr_assert(r.status == 200 || r.status == 204, "%s from evil.example: %ld", open[i], r.status);
        h_resp_free(&r);
    }
    cr_assert_gt(h_metric(C, "redlockd_http_requests_total{route=\"inspect\",status=\"403\"}"), 0);
}

/* The service's own origin is served: the dashboard's force release and a
 * page served by redlockd itself send it. So are requests without Origin,
 * whatever their content type (curl -d sends a form's). */
Test(browsers, own_origin_and_no_origin_are_served)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    char origin[100], host[100];
    origin_hdr(origin, sizeof origin, "127.0.0.1");
    h_resp r = h_http(C, "POST", "/locks/own", "{\"ttl_ms\":60000}", origin, TEXT, NULL);
    served(&r, 201, "POST from the service's own origin");
    r = h_http(C, "GET", "/locks", NULL, origin, NULL);
    served(&r, 200, "a listing from the service's own origin");
    /* reached as localhost: its own origin is http://localhost:PORT */
    snprintf(origin, sizeof origin, "Origin: http://LocalHost:%d", C->http_port);
    host_hdr(host, sizeof host, "localhost");
    r = h_http(C, "POST", "/locks/own-localhost", NULL, origin, host, NULL);
    served(&r, 201, "POST from http://localhost:PORT reached as localhost");
    /* another port of the same host is another origin */
    snprintf(origin, sizeof origin, "Origin: http://127.0.0.1:%d", C->http_port + 1);
    r = h_http(C, "POST", "/locks/other-port", NULL, origin, TEXT, NULL);
    refused(&r, "forbidden_origin", "other-port", "POST from another port of 127.0.0.1");
    r = h_http(C, "POST", "/locks/curl", "{\"ttl_ms\": 10000, \"wait_ms\": 5000}",
               "Content-Type: application/x-www-form-urlencoded", NULL);
    served(&r, 201, "curl -d without Origin");
    r = h_http(C, "POST", "/locks/plain", "{\"ttl_ms\": 10000}", TEXT, NULL);
    served(&r, 201, "text/plain without Origin");
}

/* --allow-origin (repeatable, or a comma list; REDLOCKD_ALLOW_ORIGIN):
 * pages of those origins are served too, e.g. the dashboard behind a
 * proxy that ends TLS. */
Test(browsers, allow_origin_admits_listed_origins)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--allow-origin", "https://Locks.Example:443,http://app.example:8000", "--allow-origin",
                   "https://ops.example", NULL);
    const char *ok[] = {"Origin: https://locks.example", "Origin: http://app.example:8000",
                        "Origin: https://ops.example:443"};
    for (size_t i = 0; i < 3; i++) {
        char path[40];
        snprintf(path, sizeof path, "/locks/listed-%zu", i);
        h_resp r = h_http(C, "POST", path, NULL, ok[i], TEXT, NULL);
        served(&r, 201, ok[i]);
        /* served as any request: a force without the admin file is refused so */
        snprintf(path, sizeof path, "/locks/listed-%zu?force=true", i);
        r = h_http(C, "DELETE", path, NULL, ok[i], NULL);
        cr_assert_eq(r.status, 403, "force without an admin file: %ld", r.status);
        cr_assert_str_eq(h_str(&r, "error"), "forbidden");
        h_resp_free(&r);
    }
    h_resp r = h_http(C, "POST", "/locks/unlisted", NULL, "Origin: http://app.example:8001", TEXT, NULL);
    refused(&r, "forbidden_origin", "unlisted", "an origin on another port than listed");
    r = h_http(C, "POST", "/locks/unlisted", NULL, "Origin: https://evil.example", TEXT, NULL);
    refused(&r, "forbidden_origin", "unlisted", "an unlisted origin");
    h_daemon_stop(C);
    setenv("REDLOCKD_ALLOW_ORIGIN", "https://env.example", 1);
    h_daemon_start(C, NULL);
    r = h_http(C, "POST", "/locks/from-env", NULL, "Origin: https://env.example", TEXT, NULL);
    served(&r, 201, "an origin of REDLOCKD_ALLOW_ORIGIN");
}

/* DNS rebinding: a page at attacker.example, its name resolved to
 * 127.0.0.1, sends Host: attacker.example. On a loopback listener only a
 * loopback address or localhost (any port) is served, and --allow-host. */
Test(browsers, loopback_listener_refuses_foreign_hosts)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    char host[100], origin[100];
    host_hdr(host, sizeof host, "attacker.example");
    origin_hdr(origin, sizeof origin, "attacker.example");
    h_resp r = h_http(C, "POST", "/locks/rebound", NULL, host, origin, TEXT, NULL);
    refused(&r, "forbidden_host", "rebound", "POST through a rebound name");
    const char *paths[] = {"/locks", "/locks/rebound", "/ui", "/ui/state", "/readyz", "/metrics", "/elections"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        r = h_http(C, "GET", paths[i], NULL, host, NULL);
        refused(&r, "forbidden_host", NULL, paths[i]);
    }
    r = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore",
               "{\"resourceId\":\"rebound\",\"lockOwner\":\"o\",\"expiryInSeconds\":60}", host, NULL);
    refused(&r, "forbidden_host", "lockstore||rebound", "Dapr's lock through a rebound name");
    r = h_http(C, "GET", "/healthz", NULL, host, NULL);
    served(&r, 200, "/healthz answers any Host");
    const char *local[] = {"Host: localhost", "Host: LOCALHOST:1", "Host: 127.0.0.1", "Host: 127.8.9.10:80",
                           "Host: [::1]:8080", "Host: [::1]"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++) {
        r = h_http(C, "POST", "/locks/local", NULL, local[i], NULL);
        cr_assert_eq(r.status, 201, "%s: %ld %s", local[i], r.status, r.body);
        char t[300];
        snprintf(t, sizeof t, "Lock-Token: %s", h_str(&r, "token"));
        h_resp_free(&r);
        r = h_http(C, "DELETE", "/locks/local", NULL, local[i], t, NULL);
        served(&r, 204, local[i]);
    }
    const char *foreign[] = {"Host: 127.0.0.1.attacker.example", "Host: localhost.attacker.example",
                             "Host: 10.0.0.1:8080", "Host: [::2]:8080", "Host: 2130706433", "Host: localhost:x"};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        r = h_http(C, "POST", "/locks/foreign", NULL, foreign[i], NULL);
        refused(&r, "forbidden_host", "foreign", foreign[i]);
    }
    h_daemon_stop(C);
    h_daemon_start(C, "--allow-host", "attacker.example", NULL);
    r = h_http(C, "POST", "/locks/rebound", NULL, host, NULL);
    served(&r, 201, "a Host listed in --allow-host");
    r = h_http(C, "POST", "/locks/rebound-2", NULL, "Host: other.example", NULL);
    refused(&r, "forbidden_host", "rebound-2", "a Host not listed");
    h_daemon_stop(C);
    setenv("REDLOCKD_ALLOW_HOST", "lock.example", 1);
    h_daemon_start(C, NULL);
    r = h_http(C, "POST", "/locks/rebound-3", NULL, "Host: lock.example:9", NULL);
    served(&r, 201, "a Host of REDLOCKD_ALLOW_HOST");
}

/* A listener on every address (a container's 0.0.0.0) is reached by names
 * it cannot know: any Host, until --allow-host names them. */
Test(browsers, other_listeners_take_any_host_until_told)
{
    C = h_cluster_start(3, NULL);
    C->http_port = h_free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "0.0.0.0:%d", C->http_port);
    h_daemon_start(C, "--listen", listen, NULL);
    h_resp r = h_http(C, "POST", "/locks/any-host", NULL, "Host: redlockd.svc.example:8080", NULL);
    served(&r, 201, "any Host on 0.0.0.0");
    r = h_http(C, "POST", "/locks/any-host-2", NULL, "Host: redlockd.svc.example:8080", EVIL, TEXT, NULL);
    refused(&r, "forbidden_origin", "any-host-2", "another origin on 0.0.0.0");
    h_daemon_stop(C);
    h_daemon_start(C, "--listen", listen, "--allow-host", "redlockd.svc.example", NULL);
    r = h_http(C, "POST", "/locks/told", NULL, "Host: redlockd.svc.example:8080", NULL);
    served(&r, 201, "a listed Host on 0.0.0.0");
    r = h_http(C, "POST", "/locks/told-2", NULL, "Host: localhost:8080", NULL);
    served(&r, 201, "localhost on 0.0.0.0 with --allow-host");
    r = h_http(C, "POST", "/locks/told-3", NULL, "Host: attacker.example", NULL);
    refused(&r, "forbidden_host", "told-3", "an unlisted Host on 0.0.0.0 with --allow-host");
}

/* The dashboard may not be put in a frame of another page (clickjacking
 * of its force release). */
Test(browsers, the_dashboard_may_not_be_framed)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    int fd = h_raw_connect(C, NULL);
    h_raw_send(fd, "GET /ui HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    static char buf[65536];
    bool closed;
    h_raw_read_all(fd, buf, sizeof buf, 3000, &closed);
    close(fd);
    char *end = strstr(buf, "\r\n\r\n");
    cr_assert(end, "no head: %.200s", buf);
    *end = '\0';
    cr_assert(strstr(buf, "200 OK"), "%s", buf);
    cr_assert(strstr(buf, "frame-ancestors 'none'"), "no frame-ancestors in the CSP: %s", buf);
    cr_assert(strstr(buf, "X-Frame-Options: DENY"), "no X-Frame-Options: DENY: %s", buf);
}
