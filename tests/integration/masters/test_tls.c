/* Integration tests of AUTH with a Redis ACL user and TLS to the masters:
 * real redis-server masters with the default user off (an ACL user only),
 * over TLS with certificates made here with the openssl CLI (a CA, a
 * server certificate for 127.0.0.1 and localhost, a client certificate for
 * tls-auth-clients yes), and the real redlockd. A wrong CA, a wrong server
 * name, a wrong password or user must each leave the masters down (fail
 * closed) with the cause in /readyz and the log; a paused TLS master must
 * not hold a request past the master deadline. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define ACL "--user locker on >pw ~* &* +@all --user default off"

/* Certificates for one test, in a folder of their own. */
typedef struct certs {
    char dir[64];
    char ca[128], ca_other[128], cert[128], key[128], client_cert[128], client_key[128];
    char redis_args[1024];   /* TLS and ACL arguments of the masters */
} certs;

static void sh(const char *cmd)
{
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "failed (%d): %s", rc, cmd);
}

static void make_certs(certs *k)
{
    snprintf(k->dir, sizeof k->dir, "/tmp/redlockd-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(k->dir));
    char cmd[4096];
    /* EC keys: quick to make. The CA is req -x509's default (CA:TRUE); the
     * server's names are 127.0.0.1 and localhost; another CA signs nothing
     * here, so trusting it alone must fail. */
    snprintf(cmd, sizeof cmd,
             "(cd %s && K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes' && "
             "openssl req -x509 $K -keyout ca.key -out ca.crt -days 2 -subj /CN=redlockd-test-ca && "
             "openssl req -x509 $K -keyout other.key -out other.crt -days 2 -subj /CN=some-other-ca && "
             "openssl req $K -keyout server.key -out server.csr -subj /CN=redis-test && "
             "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
             "-out server.crt -days 2 -extfile san.ext && "
             "openssl req $K -keyout client.key -out client.csr -subj /CN=redlockd && "
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
             "-out client.crt -days 2 && chmod 644 *.key) >%s/openssl.log 2>&1",
             k->dir, k->dir);
    sh(cmd);
    snprintf(k->ca, sizeof k->ca, "%s/ca.crt", k->dir);
    snprintf(k->ca_other, sizeof k->ca_other, "%s/other.crt", k->dir);
    snprintf(k->cert, sizeof k->cert, "%s/server.crt", k->dir);
    snprintf(k->key, sizeof k->key, "%s/server.key", k->dir);
    snprintf(k->client_cert, sizeof k->client_cert, "%s/client.crt", k->dir);
    snprintf(k->client_key, sizeof k->client_key, "%s/client.key", k->dir);
    snprintf(k->redis_args, sizeof k->redis_args,
             "--tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s --tls-auth-clients yes " ACL,
             k->cert, k->key, k->ca);
}

static void free_certs(certs *k)
{
    if (!k->dir[0])
        return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", k->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", k->dir);
    k->dir[0] = '\0';
}

/* The test's certificates, removed after it even when an assertion
 * failed (criterion runs .fini then). */
static certs K;
static void drop_certs(void) { free_certs(&K); }

/* A command on master i with redis-cli (TLS when k is given), as the ACL
 * user; its output's first line into out. */
static void cli(h_cluster *c, int i, const certs *k, const char *cmd, char *out, size_t outlen)
{
    char line[1024];
    if (k)
        snprintf(line, sizeof line,
                 "redis-cli --tls --cacert %s --cert %s --key %s -p %d --user locker --pass pw "
                 "--no-auth-warning %s 2>&1", k->ca, k->client_cert, k->client_key, c->m[i].port, cmd);
    else
        snprintf(line, sizeof line, "redis-cli -p %d --user locker --pass pw --no-auth-warning %s 2>&1",
                 c->m[i].port, cmd);
    FILE *f = popen(line, "r");
    cr_assert_not_null(f);
    out[0] = '\0';
    if (!fgets(out, (int)outlen, f))
        out[0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    pclose(f);
}

/* /readyz while ready: every master up, over TLS or not as expected, and
 * subscribed for release notices (the second connection works too). */
static void expect_ready(h_cluster *c, bool tls)
{
    h_resp r = {0};
    for (int tries = 0; tries < 100; tries++) {
        h_resp_free(&r);
        r = h_http(c, "GET", "/readyz", NULL, NULL);
        bool all = r.status == 200;
        cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(r.json, "masters"))
            all = all && cJSON_IsTrue(cJSON_GetObjectItem(m, "notices"));
        if (all)
            break;
        usleep(50000);
    }
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_eq(h_int(&r, "masters_up"), c->n, "%s", r.body);
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(r.json, "masters")) {
        cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(m, "tls")), tls, "%s", r.body);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(m, "notices")), "notices not up: %s", r.body);
        cr_assert_null(cJSON_GetObjectItem(m, "reason"), "%s", r.body);
    }
    h_resp_free(&r);
}

/* Acquire, check the key on every master, extend, release. */
static void lock_cycle(h_cluster *c, const certs *k)
{
    h_resp a = h_http(c, "POST", "/locks/tls-orders", "{\"ttl_ms\": 10000}", NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    const char *tok = h_str(&a, "token");
    cr_assert_not_null(tok);
    for (int i = 0; i < c->n; i++) {
        /* (the answer comes once a majority said yes: a master's own reply
         * may still be on its way) */
        char got[512];
        uint64_t until = h_now_us() + 1000000;
        do
            cli(c, i, k, "GET lock:tls-orders", got, sizeof got);
        while (strcmp(got, tok) && h_now_us() < until);
        cr_assert_str_eq(got, tok, "master %d holds \"%s\"", i, got);
    }
    char hdr[300];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", tok);
    h_resp e = h_http(c, "PATCH", "/locks/tls-orders", "{\"ttl_ms\": 20000}", hdr, NULL);
    cr_assert_eq(e.status, 200, "%s", e.body);
    cr_assert_gt(h_int(&e, "validity_ms"), 10000);
    cr_assert_eq(h_int(&e, "fence"), h_int(&a, "fence"));
    h_resp d = h_http(c, "DELETE", "/locks/tls-orders", NULL, hdr, NULL);
    cr_assert_eq(d.status, 204, "%s", d.body);
    char got[512];
    cli(c, 0, k, "EXISTS lock:tls-orders", got, sizeof got);
    cr_assert_str_eq(got, "0");
    h_resp_free(&a);
    h_resp_free(&e);
    h_resp_free(&d);
}

/* Whether why holds want, or one of its '|'-separated alternatives. */
static bool holds(const char *why, const char *want)
{
    char alt[256];
    snprintf(alt, sizeof alt, "%s", want);
    char *save = NULL;
    for (char *w = strtok_r(alt, "|", &save); w; w = strtok_r(NULL, "|", &save))
        if (why && strstr(why, w))
            return true;
    return false;
}

/* Not ready, and every master down with a reason holding want; the log
 * names each master with that cause; an acquire answers 503. */
static void expect_down_because(h_cluster *c, const char *want)
{
    h_resp r = {0};
    int with_reason = 0;
    for (int tries = 0; tries < 100 && with_reason < c->n; tries++) {
        h_resp_free(&r);
        usleep(50000);
        r = h_http(c, "GET", "/readyz", NULL, NULL);
        with_reason = 0;
        cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(r.json, "masters")) {
            const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(m, "reason"));
            with_reason += holds(why, want);
        }
    }
    cr_assert_eq(r.status, 503, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "status"), "not_ready");
    cr_assert_eq(h_int(&r, "masters_up"), 0, "%s", r.body);
    cr_assert_eq(with_reason, c->n, "want every master down with \"%s\": %s", want, r.body);
    cr_assert(holds(h_str(&r, "reason"), want), "%s", r.body);
    h_resp_free(&r);

    FILE *f = fopen(c->log, "r");
    cr_assert_not_null(f);
    char line[2048];
    int named = 0;
    for (int i = 0; i < c->n; i++) {
        char addr[64];
        snprintf(addr, sizeof addr, "addr=127.0.0.1:%d ", c->m[i].port);
        rewind(f);
        bool found = false;
        while (fgets(line, sizeof line, f))
            found = found || (strstr(line, "master_down") && strstr(line, addr) && holds(line, want));
        named += found;
    }
    fclose(f);
    cr_assert_eq(named, c->n, "the log does not name every master with \"%s\" (%s)", want, c->log);

    h_resp a = h_http(c, "POST", "/locks/tls-refused", NULL, NULL);
    cr_assert_eq(a.status, 503, "%s", a.body);
    h_resp_free(&a);
}

Test(tls, acl_user_over_tls_locks_and_is_ready, .fini = drop_certs)
{
    make_certs(&K);
    certs k = K;
    h_cluster *c = h_cluster_start_with(3, k.redis_args, "--tls-port", "rediss");
    /* The password from the environment, as deployment.md advises. */
    setenv("REDLOCKD_REDIS_PASSWORD", "pw", 1);
    /* A waiter's own retry comes 1.5 to 4.5 s after it asked: only a
     * release notice can wake it sooner. */
    h_daemon_start(c, "--redis-username", "locker", "--redis-tls-ca-file", k.ca,
                   "--redis-tls-cert-file", k.client_cert, "--redis-tls-key-file", k.client_key,
                   "--retry-delay-ms", "3000", NULL);
    unsetenv("REDLOCKD_REDIS_PASSWORD");
    expect_ready(c, true);
    lock_cycle(c, &k);

    /* A waiting acquire is woken by the release notice, which came over
     * the TLS subscription, well before its retry timer. */
    h_resp a = h_http(c, "POST", "/locks/tls-wait", "{\"ttl_ms\": 60000}", NULL);
    cr_assert_eq(a.status, 201);
    char hdr[300];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
    pid_t kid = fork();
    if (kid == 0) {
        usleep(300000);
        h_resp d = h_http(c, "DELETE", "/locks/tls-wait", NULL, hdr, NULL);
        _exit(d.status == 204 ? 0 : 1);
    }
    h_resp w = h_http(c, "POST", "/locks/tls-wait", "{\"wait_ms\": 5000}", NULL);
    int st = 0;
    waitpid(kid, &st, 0);
    cr_assert_eq(WEXITSTATUS(st), 0, "release failed");
    cr_assert_eq(w.status, 201, "%s", w.body);
    cr_assert_lt(w.seconds, 1.0, "the waiter took %.3f s", w.seconds);
    fprintf(stderr, "tls: waiter granted %.3f s after it asked (release at 0.3 s)\n", w.seconds);
    h_resp_free(&a);
    h_resp_free(&w);
    h_cluster_free(c);
}

Test(tls, acl_user_without_tls_locks_and_is_ready)
{
    h_cluster *c = h_cluster_start_with(3, ACL, NULL, "redis");
    h_daemon_start(c, "--redis-username", "locker", "--redis-password", "pw", NULL);
    expect_ready(c, false);
    lock_cycle(c, NULL);
    h_cluster_free(c);
}

Test(tls, wrong_password_or_user_is_not_ready_with_the_reason)
{
    h_cluster *c = h_cluster_start_with(3, ACL, NULL, NULL);
    h_daemon_start_unready(c, "--redis-username", "locker", "--redis-password", "wrong", NULL);
    expect_down_because(c, "AUTH refused: WRONGPASS");
    cr_assert_eq(h_daemon_stop(c), 0);
    /* The right password for the default user, which is off. */
    h_daemon_start_unready(c, "--redis-password", "pw", NULL);
    expect_down_because(c, "AUTH refused: WRONGPASS");
    cr_assert_eq(h_daemon_stop(c), 0);
    h_daemon_start_unready(c, "--redis-username", "nobody", "--redis-password", "pw", NULL);
    expect_down_because(c, "AUTH refused: WRONGPASS");
    h_cluster_free(c);
}

Test(tls, wrong_ca_fails_closed, .fini = drop_certs)
{
    make_certs(&K);
    certs k = K;
    /* host:port with --redis-tls on: TLS to every master. */
    h_cluster *c = h_cluster_start_with(3, k.redis_args, "--tls-port", NULL);
    h_daemon_start_unready(c, "--redis-tls", "on", "--redis-username", "locker", "--redis-password", "pw",
                           "--redis-tls-ca-file", k.ca_other, "--redis-tls-cert-file", k.client_cert,
                           "--redis-tls-key-file", k.client_key, NULL);
    expect_down_because(c, "TLS handshake failed: certificate verify failed");
    cr_assert_eq(h_daemon_stop(c), 0);
    /* No client certificate where the masters ask for one: TLS 1.3 ends
     * the handshake before the master checks, which then sends an alert
     * and closes; a write that meets the close first sees only a reset. */
    h_daemon_start_unready(c, "--redis-tls", "on", "--redis-username", "locker", "--redis-password", "pw",
                           "--redis-tls-ca-file", k.ca, NULL);
    expect_down_because(c, "certificate required|Connection reset by peer");
    cr_assert_eq(h_daemon_stop(c), 0);
    /* Plain connections to TLS ports. */
    h_daemon_start_unready(c, "--redis-username", "locker", "--redis-password", "pw", NULL);
    h_resp r = h_http(c, "GET", "/readyz", NULL, NULL);
    usleep(500000);
    h_resp_free(&r);
    r = h_http(c, "GET", "/readyz", NULL, NULL);
    cr_assert_eq(r.status, 503, "%s", r.body);
    h_resp_free(&r);
    h_cluster_free(c);
}

Test(tls, wrong_server_name_fails_closed, .fini = drop_certs)
{
    make_certs(&K);
    certs k = K;
    h_cluster *c = h_cluster_start_with(3, k.redis_args, "--tls-port", "rediss");
    h_daemon_start_unready(c, "--redis-username", "locker", "--redis-password", "pw",
                           "--redis-tls-ca-file", k.ca, "--redis-tls-cert-file", k.client_cert,
                           "--redis-tls-key-file", k.client_key, "--redis-tls-server-name",
                           "redis.example.com", NULL);
    expect_down_because(c, "TLS handshake failed: hostname mismatch");
    cr_assert_eq(h_daemon_stop(c), 0);
    /* A name the certificate does carry, other than the address dialled. */
    h_daemon_start(c, "--redis-username", "locker", "--redis-password", "pw",
                   "--redis-tls-ca-file", k.ca, "--redis-tls-cert-file", k.client_cert,
                   "--redis-tls-key-file", k.client_key, "--redis-tls-server-name", "localhost", NULL);
    expect_ready(c, true);
    h_cluster_free(c);
}

/* Acquires in a row while TLS masters are paused one by one: each answers
 * within a small multiple of the 50 ms master deadline (grants with the
 * masters left while a majority is; 503 when not), and the masters vote
 * again once resumed. */
Test(tls, paused_tls_master_never_holds_a_request, .timeout = 120, .fini = drop_certs)
{
    make_certs(&K);
    certs k = K;
    h_cluster *c = h_cluster_start_with(3, k.redis_args, "--tls-port", "rediss");
    h_daemon_start(c, "--redis-username", "locker", "--redis-password", "pw", "--redis-tls-ca-file", k.ca,
                   "--redis-tls-cert-file", k.client_cert, "--redis-tls-key-file", k.client_key,
                   "--master-timeout-ms", "50", NULL);
    expect_ready(c, true);
    double worst[3] = {0, 0, 0};
    int granted[3] = {0, 0, 0}, refused[3] = {0, 0, 0}, tries[3] = {0, 0, 0};
    for (int i = 0; i < 60; i++) {
        int phase = i < 20 ? 0 : i < 40 ? 1 : 2;
        if (i == 20)
            h_master_pause(c, 0);
        if (i == 40)
            h_master_pause(c, 1);
        char path[64];
        snprintf(path, sizeof path, "/locks/paused-%d", i);
        h_resp r = h_http(c, "POST", path, "{\"ttl_ms\": 5000}", NULL);
        tries[phase]++;
        granted[phase] += r.status == 201;
        refused[phase] += r.status == 503;
        if (r.seconds > worst[phase])
            worst[phase] = r.seconds;
        h_resp_free(&r);
        usleep(20000);
    }
    fprintf(stderr, "tls: all up %d/%d granted, worst %.3f s; one paused %d/%d granted, worst %.3f s; "
            "two paused %d/%d 503, worst %.3f s\n", granted[0], tries[0], worst[0], granted[1], tries[1],
            worst[1], refused[2], tries[2], worst[2]);
    cr_assert_eq(granted[0], 20);
    cr_assert_eq(granted[1], 20);
    cr_assert_eq(refused[2], 20);
    for (int p = 0; p < 3; p++)
        cr_assert_lt(worst[p], 0.5, "phase %d: an answer took %.3f s", p, worst[p]);
    h_master_resume(c, 0);
    h_master_resume(c, 1);
    cr_assert(h_wait_status(c, "/readyz", 200, 10000), "not ready again after resume");
    h_resp r = h_http(c, "POST", "/locks/after-pause", NULL, NULL);
    cr_assert_eq(r.status, 201, "%s", r.body);
    h_resp_free(&r);
    h_cluster_free(c);
}

/* A file that cannot be loaded is a bad value: exit 2, one line. */
Test(tls, bad_tls_files_exit_2_with_one_line, .fini = drop_certs)
{
    make_certs(&K);
    certs k = K;
    const char *bin = getenv("REDLOCKD_BIN");
    /* flag, value, the key file (or ""), what the line must hold */
    const char *cases[][4] = {
        {"--redis-tls-ca-file", "/nonexistent/ca.crt", "", "--redis-tls-ca-file: cannot open"},
        {"--redis-tls-ca-file", k.key, "", "--redis-tls-ca-file: cannot load"},
        {"--redis-tls-cert-file", k.cert, k.client_key, "is not the key of"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024], out[256];
        snprintf(out, sizeof out, "%s/stderr", k.dir);
        snprintf(cmd, sizeof cmd, "'%s' --masters rediss://127.0.0.1:1 --listen 127.0.0.1:1 %s '%s' %s%s 2>%s",
                 bin ? bin : "redlockd", cases[i][0], cases[i][1],
                 cases[i][2][0] ? "--redis-tls-key-file " : "", cases[i][2], out);
        int st = system(cmd);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %d", cmd, st);
        FILE *f = fopen(out, "r");
        char line[512] = "", more[512];
        cr_assert_not_null(fgets(line, sizeof line, f));
        cr_assert_null(fgets(more, sizeof more, f), "more than one line: %s%s", line, more);
        fclose(f);
        cr_assert_not_null(strstr(line, cases[i][3]), "%s", line);
    }
}
