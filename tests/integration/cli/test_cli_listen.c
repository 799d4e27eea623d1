/* Integration: the `redlock` client over the two other ways to reach
 * redlockd (issue 43), against the real daemon serving them: a Unix socket
 * (--listen unix:PATH; redlock's unix:/PATH URLs) and HTTPS that asks for a
 * client certificate (--tls-cert-file, --tls-key-file, --tls-client-ca-file,
 * principals known by their certificates). The daemon's audit log says
 * who each call came from and where. Part of it_cli: the suite and what
 * the tests share are in test_cli.c and cli_harness.h. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_harness.h"

/* Does T/audit.log hold a line of event on name, by principal (NULL: none),
 * from a client whose address starts with client? redlockd writes a line
 * before it answers, so a call that redlock has finished has its line. */
static bool audited(const char *event, const char *principal, const char *client, const char *name)
{
    char path[400], line[2048];
    path_of(path, sizeof path, "audit.log");
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(o, "event"));
        const char *by = cJSON_GetStringValue(cJSON_GetObjectItem(o, "principal"));
        const char *from = cJSON_GetStringValue(cJSON_GetObjectItem(o, "client"));
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(o, "name"));
        found = ev && !strcmp(ev, event) && nm && !strcmp(nm, name) && from &&
                !strncmp(from, client, strlen(client)) && (principal ? by && !strcmp(by, principal) : !by);
        cJSON_Delete(o);
    }
    if (f)
        fclose(f);
    return found;
}

/* Does the daemon's log hold needle? */
static bool daemon_logged(void *needle)
{
    FILE *f = fopen(C->log, "r");
    char line[2048];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* unix:/PATH: every kind of call, a held stream renewed past its ttl
 * included, goes through redlockd's own socket (the audit log names such a
 * client "unix"). Host: localhost is what makes it served: a Unix socket is
 * a loopback listener for the Host rule, and another name is refused. */
Test(cli, over_a_unix_socket)
{
    C = h_cluster_start(5, NULL);
    C->http_port = h_free_port();
    char tcp[64], url[400], audit[400];
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", C->http_port);
    snprintf(url, sizeof url, "unix:%s/redlockd.sock", T);
    path_of(audit, sizeof audit, "audit.log");
    h_daemon_start(C, "--listen", tcp, "--listen", url, "--audit-log", audit, NULL);
    setenv("REDLOCK_URL", url, 1);
    cr_assert_eq(RUN("y", "ready"), 0, "%s", err_of("y"));
    cr_assert_eq(RUN("a", "acquire", "--ttl", "10s", "orders"), 0, "%s", err_of("a"));
    char token[300];
    snprintf(token, sizeof token, "%s", out_of("a"));
    token[strcspn(token, "\n")] = '\0';
    cr_assert_eq(RUN("s", "status", "orders"), 0, "%s", err_of("s"));
    cr_assert_eq(RUN("l", "list"), 0, "%s", err_of("l"));
    cr_assert(!strncmp(out_of("l"), "orders  validity ", 17), "%s", out_of("l"));
    /* --ttl 2s: heartbeat_ms 2000, so CMD's 2.5 s outlive the ttl and the
     * heartbeats' limit; exit 0 needs the renewals and the heartbeats
     * (PUT /locks/job/heartbeat) to have gone through the socket */
    cr_assert_eq(RUN("r", "run", "--ttl", "2s", "job", "--", "sh", "-c", "sleep 2.5; echo $REDLOCK_NAME"), 0, "%s",
                 err_of("r"));
    cr_assert_str_eq(out_of("r"), "job\n");
    cr_assert_eq(RUN("d", "release", "orders", token), 0, "%s", err_of("d"));
    cr_assert_not(h_held(C, "orders"), "still held after a release over the socket");
    cr_assert_not(h_held(C, "job"), "run's lock still held after it exited");
    cr_assert(audited("grant", NULL, "unix", "orders") && audited("release", NULL, "unix", "orders") &&
              audited("grant", NULL, "unix", "job") && audited("release", NULL, "unix", "job"),
              "the audit log does not show the calls coming through the socket:\n%s", slurp(3, "audit.log"));
    /* --url wins over REDLOCK_URL, and a socket nobody serves is unreachable */
    setenv("REDLOCK_URL", "http://127.0.0.1:1", 1);
    cr_assert_eq(RUN("w", "--url", url, "status", "orders"), 1, "%s", err_of("w"));
    cr_assert_eq(h_daemon_stop(C), 0, "redlockd did not stop cleanly (log %s)", C->log);
    cr_assert_eq(RUN("u", "--url", url, "ready"), 69);
    cr_assert(strstr(err_of("u"), "cannot connect to the socket"), "%s", err_of("u"));
    cr_assert_eq(RUN("e", "--url", "unix:", "ready"), 64);
    char longest[200];
    snprintf(longest, sizeof longest, "unix:/%0108d", 0);
    cr_assert_eq(RUN("e2", "--url", longest, "ready"), 64);
    cr_assert(strstr(err_of("e2"), "longer than 107 bytes") && cli_one_line("e2"), "%s", err_of("e2"));
}

/* https: the service's certificate checked against --cacert (or
 * REDLOCK_CACERT; the flag wins), a client certificate from --cert and
 * --key (or REDLOCK_CERT and REDLOCK_KEY) where the service asks for one.
 * A handshake that fails (the service's certificate does not verify, or
 * ours is of another CA) is unreachable (69, the reason on stderr); a
 * certificate of the CA that names no principal, or none at all, gets the
 * service's 401 (77, its reason). Each changes nothing. Files that cannot
 * serve are a usage error (64). */
Test(cli, https_with_a_client_certificate)
{
    C = h_cluster_start(5, NULL);
    cli_certs k;
    cli_make_certs(&k);
    char principals[400], audit[400];
    path_of(principals, sizeof principals, "principals");
    path_of(audit, sizeof audit, "audit.log");
    FILE *f = fopen(principals, "w");
    cr_assert(f);
    fputs("# principal rights prefixes credential\nredlock-test-client read,lock * cert\n", f);
    fclose(f);
    C->cacert = k.ca;   /* the harness's own calls: HTTPS, as this principal */
    C->cert = k.client_crt;
    C->key = k.client_key;
    h_daemon_start(C, "--tls-cert-file", k.server_crt, "--tls-key-file", k.server_key, "--tls-client-ca-file", k.ca,
                   "--principals-file", principals, "--audit-log", audit, NULL);
    const char *url = C->base;
    cr_assert(!strncmp(url, "https://127.0.0.1:", 18), "%s", url);
    cr_assert_eq(RUN("a", "--url", url, "--cacert", k.ca, "--cert", k.client_crt, "--key", k.client_key, "acquire",
                     "--ttl", "10s", "tls"), 0, "%s", err_of("a"));
    cr_assert(h_held(C, "tls"));
    setenv("REDLOCK_URL", url, 1);
    setenv("REDLOCK_CACERT", k.ca, 1);
    setenv("REDLOCK_CERT", k.client_crt, 1);
    setenv("REDLOCK_KEY", k.client_key, 1);
    cr_assert_eq(RUN("s", "status", "tls"), 0, "%s", err_of("s"));
    /* a held stream past its ttl and heartbeat limit (as over the socket) */
    cr_assert_eq(RUN("r", "run", "--ttl", "2s", "tls-run", "--", "sleep", "2.5"), 0, "%s", err_of("r"));
    cr_assert(audited("grant", "redlock-test-client", "127.0.0.1:", "tls") &&
              audited("grant", "redlock-test-client", "127.0.0.1:", "tls-run") &&
              audited("release", "redlock-test-client", "127.0.0.1:", "tls-run"),
              "the audit log does not name the certificate's principal:\n%s", slurp(3, "audit.log"));
    /* Unreachable, each: exit 69 with the reason. */
    cr_assert_eq(RUN("ca", "--cacert", k.other_ca, "acquire", "refused"), 69, "the flag wins: %s", err_of("ca"));
    cr_assert(strstr(err_of("ca"), "SSL certificate problem"), "%s", err_of("ca"));
    cr_assert_eq(RUN("fc", "--cert", k.foreign_crt, "--key", k.foreign_key, "acquire", "refused"), 69, "%s",
                 err_of("fc"));
    cr_assert(h_eventually(daemon_logged, "tls_client_refused", 10000), "no tls_client_refused in %s", C->log);
    /* Refused by the service, each: exit 77 with its reason, and audited. */
    cr_assert_eq(RUN("nb", "--cert", k.nobody_crt, "--key", k.nobody_key, "acquire", "refused"), 77,
                 "a certificate that names no principal: %s", err_of("nb"));
    cr_assert(strstr(err_of("nb"), "unauthorized: no principal is named nobody-client, this client certificate's "
                                   "name, and no valid Authorization: Bearer token came with it"), "%s", err_of("nb"));
    unsetenv("REDLOCK_CERT");
    unsetenv("REDLOCK_KEY");
    cr_assert_eq(RUN("nc", "acquire", "refused"), 77, "no client certificate: %s", err_of("nc"));
    cr_assert(strstr(err_of("nc"), "unauthorized: a client certificate signed by the CA of --tls-client-ca-file is "
                                   "required"), "%s", err_of("nc"));
    for (const char *t = "nb\0nc\0"; *t; t += strlen(t) + 1)
        cr_assert(cli_one_line(t) && strstr(err_of(t), "redlock: unauthorized: "), "%s: %s", t, err_of(t));
    cr_assert(audited("refused", NULL, "127.0.0.1:", "refused"), "the 401s are not in the audit log:\n%s",
              slurp(3, "audit.log"));
    unsetenv("REDLOCK_CACERT");   /* the system's CAs know nothing of this one */
    cr_assert_eq(RUN("sys", "--cert", k.client_crt, "--key", k.client_key, "acquire", "refused"), 69);
    cr_assert(strstr(err_of("sys"), "SSL certificate problem") && strstr(err_of("sys"), "--cacert"), "%s",
              err_of("sys"));
    for (const char *t = "ca\0fc\0sys\0"; *t; t += strlen(t) + 1)
        cr_assert(cli_one_line(t) && strstr(err_of(t), "redlock: unreachable: https://127.0.0.1:"), "%s: %s", t,
                  err_of(t));
    cr_assert_not(h_held(C, "refused"), "a refused connection acquired");
    /* Bad values: one line, exit 64. */
    cr_assert_eq(RUN("b1", "--cacert", "/nonexistent/ca.crt", "ready"), 64);
    cr_assert(strstr(err_of("b1"), "--cacert /nonexistent/ca.crt: cannot open"), "%s", err_of("b1"));
    cr_assert_eq(RUN("b2", "--cacert", k.ca, "--key", k.client_key, "ready"), 64);
    cr_assert(strstr(err_of("b2"), "--key needs --cert"), "%s", err_of("b2"));
    cr_assert_eq(RUN("b3", "--cacert", k.ca, "--cert", k.ca, "--key", k.client_key, "ready"), 64, "%s",
                 err_of("b3"));
    cr_assert_eq(RUN("b4", "--url", "http://127.0.0.1:1", "--cacert", k.ca, "ready"), 64);
    cr_assert(strstr(err_of("b4"), "--cacert is for an https:// service"), "%s", err_of("b4"));
    for (const char *t = "b1\0b2\0b3\0b4\0"; *t; t += 3)
        cr_assert(cli_one_line(t), "%s: %s", t, err_of(t));
}
