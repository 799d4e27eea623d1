/* Unit tests of the browser rules (api_origin_verdict, issue 41): which
 * Host and Origin headers a request may carry, on a loopback listener and
 * on another, with and without --allow-host and --allow-origin; which
 * routes are exempt. */
#include <criterion/criterion.h>
#include <string.h>

#include "front/api.h"

static char msg[300];

static int verdict(const conf *c, unsigned loopback, enum api_route r, const char *host, const char *origin)
{
    msg[0] = '\0';
    return api_origin_verdict(c, loopback, r, host, origin, msg, sizeof msg);
}

static conf plain(void)
{
    conf c;
    memset(&c, 0, sizeof c);
    return c;
}

Test(origin, no_origin_and_the_own_origin_go)
{
    conf c = plain();
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1:8080", NULL), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1:8080", "http://127.0.0.1:8080"), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "LocalHost:8080", "http://localhost:8080"), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "localhost", "http://localhost:80"), -1, "the default port");
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "[::1]:8080", "http://[::1]:8080"), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, NULL, NULL), -1, "HTTP/1.0 without Host");
}

Test(origin, other_origins_are_refused_on_every_route_but_the_probes)
{
    conf c = plain();
    enum api_route refused[] = {ROUTE_LOCK, ROUTE_DAPR_LOCK, ROUTE_DAPR_UNLOCK, ROUTE_DAPR_METADATA,
                                ROUTE_ELECTION, ROUTE_ELECTION_VALUE, ROUTE_SEMAPHORE, ROUTE_HEARTBEAT,
                                ROUTE_LIST_LOCKS, ROUTE_LIST_ELECTIONS, ROUTE_LIST_SEMAPHORES, ROUTE_UI,
                                ROUTE_UI_STATE, ROUTE_NOT_FOUND};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        cr_assert_eq(verdict(&c, true, refused[i], "127.0.0.1:8080", "https://evil.example"),
                     API_E_FORBIDDEN_ORIGIN, "route %d", refused[i]);
    cr_assert(strstr(msg, "https://evil.example") && strstr(msg, "--allow-origin"), "%s", msg);
    enum api_route open[] = {ROUTE_HEALTHZ, ROUTE_READYZ, ROUTE_METRICS, ROUTE_DAPR_HEALTHZ};
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++)
        cr_assert_eq(verdict(&c, true, open[i], "127.0.0.1:8080", "https://evil.example"), -1, "route %d", open[i]);
    const char *others[] = {"null", "", "http://127.0.0.1:8081", "https://127.0.0.1:8080", "http://127.0.0.1",
                            "http://127.0.0.1:8080/", "http://localhost:8080"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1:8080", others[i]), API_E_FORBIDDEN_ORIGIN, "%s",
                     others[i]);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, NULL, "http://127.0.0.1:8080"), API_E_FORBIDDEN_ORIGIN,
                 "no Host: no own origin");
}

Test(origin, allow_origin_lists_more)
{
    conf c = plain();
    char *origins[] = {"https://locks.example", "http://app.example:8000"};
    c.allow_origins = origins;
    c.nallow_origins = 2;
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1:8080", "https://Locks.Example:443"), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1:8080", "http://app.example:8000"), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1:8080", "http://app.example"), API_E_FORBIDDEN_ORIGIN);
}

Test(origin, a_loopback_listener_serves_loopback_hosts_only)
{
    conf c = plain();
    const char *ok[] = {"localhost", "localhost:1", "127.0.0.1", "127.1.2.3:8080", "[::1]", "[::1]:8080"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_assert_eq(verdict(&c, true, ROUTE_LOCK, ok[i], NULL), -1, "%s", ok[i]);
    const char *bad[] = {"attacker.example", "attacker.example:8080", "10.0.0.1", "[::2]", "2130706433",
                         "localhost:x", "", "a b", "localhost.attacker.example"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(verdict(&c, true, ROUTE_LOCK, bad[i], NULL), API_E_FORBIDDEN_HOST, "%s", bad[i]);
    cr_assert(strstr(msg, "--allow-host"), "%s", msg);
    /* the Host is judged first, and even a matching Origin does not help */
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "attacker.example:8080", "http://attacker.example:8080"),
                 API_E_FORBIDDEN_HOST);
    cr_assert_eq(verdict(&c, true, ROUTE_READYZ, "attacker.example", NULL), API_E_FORBIDDEN_HOST);
    cr_assert_eq(verdict(&c, true, ROUTE_METRICS, "attacker.example", NULL), API_E_FORBIDDEN_HOST);
    cr_assert_eq(verdict(&c, true, ROUTE_HEALTHZ, "attacker.example", NULL), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_DAPR_HEALTHZ, "attacker.example", NULL), -1);
    char *hosts[] = {"attacker.example"};
    c.allow_hosts = hosts;
    c.nallow_hosts = 1;
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "Attacker.Example:8080", NULL), -1);
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "other.example", NULL), API_E_FORBIDDEN_HOST);
}

Test(origin, other_listeners_serve_any_host_until_allow_host)
{
    conf c = plain();
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "redlockd.svc:8080", NULL), -1);
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "anything at all", NULL), -1);
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "redlockd.svc:8080", "http://redlockd.svc:8080"), -1);
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "redlockd.svc:8080", "http://evil.example"),
                 API_E_FORBIDDEN_ORIGIN);
    char *hosts[] = {"redlockd.svc"};
    c.allow_hosts = hosts;
    c.nallow_hosts = 1;
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "redlockd.svc:8080", NULL), -1);
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "127.0.0.1:8080", NULL), -1);
    cr_assert_eq(verdict(&c, false, ROUTE_LOCK, "evil.example", NULL), API_E_FORBIDDEN_HOST);
}

/* What goes into a message is the client's: printable ASCII only. */
Test(origin, messages_show_printable_ascii_only)
{
    conf c = plain();
    cr_assert_eq(verdict(&c, true, ROUTE_LOCK, "127.0.0.1", "https://\xc3\xa9vil\"\\\x01"), API_E_FORBIDDEN_ORIGIN);
    for (const char *p = msg; *p; p++)
        cr_assert(*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\', "byte %02x in %s", (unsigned char)*p, msg);
    cr_assert_str_eq(api_errors[API_E_FORBIDDEN_ORIGIN].code, "forbidden_origin");
    cr_assert_str_eq(api_errors[API_E_FORBIDDEN_HOST].code, "forbidden_host");
    cr_assert_eq(api_errors[API_E_FORBIDDEN_HOST].status, 403);
}

/* The force release's query form: the collection paths with their slash. */
Test(origin, force_by_query_routes_the_collections_only)
{
    cr_assert_eq(api_force_route_of("/locks/"), ROUTE_LOCK);
    cr_assert_eq(api_force_route_of("/elections/"), ROUTE_ELECTION);
    cr_assert_eq(api_force_route_of("/semaphores/"), ROUTE_SEMAPHORE);
    const char *other[] = {"/locks", "/locks/x", "/locks//", "/", "/ui/", "/elections", "/semaphores/x"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        cr_assert_eq(api_force_route_of(other[i]), ROUTE_NOT_FOUND, "%s", other[i]);
}

/* Over HTTPS the service's own origin is https:// and its Host; http:// of
 * the same Host is another origin (a page served in clear). */
Test(origin, an_https_listeners_own_origin_is_https)
{
    conf c = plain();
    unsigned https = API_LISTENER_LOOPBACK | API_LISTENER_HTTPS;
    cr_assert_eq(verdict(&c, https, ROUTE_LOCK, "127.0.0.1:8443", "https://127.0.0.1:8443"), -1);
    cr_assert_eq(verdict(&c, https, ROUTE_LOCK, "localhost", "https://localhost:443"), -1);
    cr_assert_eq(verdict(&c, https, ROUTE_LOCK, "127.0.0.1:8443", "http://127.0.0.1:8443"), API_E_FORBIDDEN_ORIGIN);
    cr_assert_eq(verdict(&c, API_LISTENER_LOOPBACK, ROUTE_LOCK, "127.0.0.1:8443", "https://127.0.0.1:8443"),
                 API_E_FORBIDDEN_ORIGIN, "an https:// origin on a plain listener is another origin");
    /* A Unix socket counts as loopback: a foreign Host is refused there. */
    cr_assert_eq(verdict(&c, API_LISTENER_LOOPBACK, ROUTE_LOCK, "attacker.example", NULL), API_E_FORBIDDEN_HOST);
}
