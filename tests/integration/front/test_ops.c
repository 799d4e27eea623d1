/* Integration: what operators rely on. /metrics parses as Prometheus text and
 * moves with requests; SIGTERM under load exits 0 and answers no request
 * with a 5xx because of the shutdown, but for 503 shutting_down to an
 * acquire that was waiting. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void setup(void)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
}

static void teardown(void) { h_cluster_free(C); }

TestSuite(ops, .init = setup, .fini = teardown, .timeout = 60);

/* ---- a small Prometheus text-format (0.0.4) parser ---- */

#define MAX_SAMPLES 2048

struct sample {
    char name[128];
    char labels[256];     /* as written, without the braces */
    double value;
};

struct family {
    char name[128];
    char type[16];
};

struct exposition {
    struct sample s[MAX_SAMPLES];
    int n;
    struct family f[256];
    int nf;
};

static bool metric_name_ok(const char *p, size_t len)
{
    if (len == 0 || !(isalpha((unsigned char)p[0]) || p[0] == '_' || p[0] == ':'))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == ':'))
            return false;
    return true;
}

static const struct family *family_of(const struct exposition *e, const char *sample)
{
    for (int i = 0; i < e->nf; i++) {
        size_t l = strlen(e->f[i].name);
        if (strncmp(sample, e->f[i].name, l))
            continue;
        const char *rest = sample + l;
        if (!*rest || !strcmp(rest, "_total") || !strcmp(rest, "_bucket") || !strcmp(rest, "_sum") ||
            !strcmp(rest, "_count"))
            return &e->f[i];
    }
    return NULL;
}

/* Parses text into e; fails the test with the line number on any error. */
static void parse_prometheus(const char *text, struct exposition *e)
{
    memset(e, 0, sizeof *e);
    int lineno = 0;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        cr_assert_not_null(nl, "the exposition must end with a newline");
        size_t len = (size_t)(nl - line);
        char buf[1024];
        cr_assert_lt(len, sizeof buf);
        memcpy(buf, line, len);
        buf[len] = '\0';
        lineno++;
        line = nl + 1;
        if (len == 0)
            continue;
        if (buf[0] == '#') {
            char kw[8], name[128], rest[512] = "";
            int k = sscanf(buf, "# %7s %127s %511[^\n]", kw, name, rest);
            if (k >= 2 && !strcmp(kw, "TYPE")) {
                cr_assert(!strcmp(rest, "counter") || !strcmp(rest, "gauge") || !strcmp(rest, "histogram") ||
                              !strcmp(rest, "summary") || !strcmp(rest, "untyped"),
                          "line %d: bad type: %s", lineno, buf);
                cr_assert(metric_name_ok(name, strlen(name)), "line %d: bad name", lineno);
                for (int i = 0; i < e->nf; i++)
                    cr_assert_str_neq(e->f[i].name, name, "line %d: TYPE of %s given twice", lineno, name);
                snprintf(e->f[e->nf].name, sizeof e->f[0].name, "%s", name);
                snprintf(e->f[e->nf++].type, sizeof e->f[0].type, "%s", rest);
            } else {
                cr_assert(k >= 2 && !strcmp(kw, "HELP"), "line %d: comment is neither HELP nor TYPE: %s",
                          lineno, buf);
            }
            continue;
        }
        struct sample *s = &e->s[e->n++];
        cr_assert_lt(e->n, MAX_SAMPLES);
        size_t nl_ = strcspn(buf, "{ ");
        cr_assert(metric_name_ok(buf, nl_), "line %d: bad metric name: %s", lineno, buf);
        memcpy(s->name, buf, nl_);
        const char *p = buf + nl_;
        if (*p == '{') {
            const char *q = ++p;
            /* label="value" pairs, values escaped with backslash */
            while (*q && *q != '}') {
                const char *eq = strchr(q, '=');
                cr_assert(eq && eq > q && eq[1] == '"', "line %d: bad label: %s", lineno, buf);
                for (const char *c = q; c < eq; c++)
                    cr_assert(isalnum((unsigned char)*c) || *c == '_', "line %d: bad label name", lineno);
                const char *v = eq + 2;
                while (*v && *v != '"') {
                    if (*v == '\\')
                        v++;
                    v++;
                }
                cr_assert_eq(*v, '"', "line %d: unterminated label value", lineno);
                q = v + 1;
                if (*q == ',')
                    q++;
            }
            cr_assert_eq(*q, '}', "line %d: unterminated labels", lineno);
            memcpy(s->labels, p, (size_t)(q - p));
            p = q + 1;
        }
        cr_assert_eq(*p, ' ', "line %d: no value: %s", lineno, buf);
        char *end;
        s->value = strtod(p + 1, &end);
        cr_assert(end != p + 1 && (*end == '\0' || *end == ' '), "line %d: bad value: %s", lineno, buf);
        const struct family *f = family_of(e, s->name);
        cr_assert_not_null(f, "line %d: %s has no TYPE before it", lineno, s->name);
        if (!strcmp(f->type, "counter"))
            cr_assert(strstr(s->name, "_total") && s->value >= 0, "line %d: counter %s", lineno, s->name);
        for (int i = 0; i < e->n - 1; i++)
            cr_assert(strcmp(e->s[i].name, s->name) || strcmp(e->s[i].labels, s->labels),
                      "line %d: duplicate sample %s{%s}", lineno, s->name, s->labels);
    }
    /* Histograms: cumulative buckets ending in +Inf, which equals _count. */
    for (int i = 0; i < e->nf; i++) {
        if (strcmp(e->f[i].type, "histogram"))
            continue;
        char bucket[140], count[140];
        snprintf(bucket, sizeof bucket, "%s_bucket", e->f[i].name);
        snprintf(count, sizeof count, "%s_count", e->f[i].name);
        for (int j = 0; j < e->n; j++) {
            if (strcmp(e->s[j].name, count))
                continue;
            double prev = 0, inf = -1;
            for (int k = 0; k < e->n; k++) {
                if (strcmp(e->s[k].name, bucket) || strncmp(e->s[k].labels, e->s[j].labels, strlen(e->s[j].labels)))
                    continue;
                cr_assert_geq(e->s[k].value, prev, "%s{%s} buckets must not decrease", bucket, e->s[k].labels);
                prev = e->s[k].value;
                if (strstr(e->s[k].labels, "le=\"+Inf\""))
                    inf = e->s[k].value;
            }
            cr_assert_eq(inf, e->s[j].value, "%s{%s}: +Inf bucket must equal the count", count, e->s[j].labels);
        }
    }
}

static double value_of(const struct exposition *e, const char *name, const char *labels)
{
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->s[i].name, name) && !strcmp(e->s[i].labels, labels))
            return e->s[i].value;
    return NAN;
}

static double sum_of(const struct exposition *e, const char *name)
{
    double sum = 0;
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->s[i].name, name))
            sum += e->s[i].value;
    return sum;
}

static void scrape(struct exposition *e)
{
    h_resp m = h_http(C, "GET", "/metrics", NULL, NULL);
    cr_assert_eq(m.status, 200);
    cr_assert(strstr(m.content_type, "text/plain"), "%s", m.content_type);
    parse_prometheus(m.body, e);
    h_resp_free(&m);
}

/* Masters that answer lock commands with an error (here OOM: maxmemory
 * reached under noeviction) are named as such: the 503 says what they
 * answered, /readyz does not count them as voting and gives the reason,
 * /metrics counts them. Once they take writes again, so does redlockd. */
Test(ops, masters_answering_errors_are_named)
{
    h_resp ok = h_http(C, "POST", "/locks/oom-0", NULL, NULL);
    cr_assert_eq(ok.status, 201, "%s", ok.body);
    h_resp_free(&ok);
    for (int i = 0; i < 3; i++)
        freeReplyObject(h_redis(C, i, "CONFIG SET maxmemory 1"));
    h_resp r = h_http(C, "POST", "/locks/oom-1", NULL, NULL);
    cr_assert_eq(r.status, 503, "%s", r.body);
    cr_assert_str_eq(h_str(&r, "error"), "no_quorum");
    cr_assert_eq(h_int(&r, "masters_refusing"), 3, "%s", r.body);
    cr_assert_eq(h_int(&r, "masters_ok"), 2, "%s", r.body);
    cr_assert(strstr(h_str(&r, "message"), "3 answered with an error (OOM command not allowed"),
              "%s", r.body);
    h_resp_free(&r);
    h_resp rz = h_http(C, "GET", "/readyz", NULL, NULL);
    cr_assert_eq(rz.status, 503, "ready while 3 of 5 masters refuse: %s", rz.body);
    cr_assert_eq(h_int(&rz, "masters_voting"), 2, "%s", rz.body);
    cr_assert_eq(h_int(&rz, "masters_refusing"), 3, "%s", rz.body);
    cr_assert(strstr(h_str(&rz, "reason"), "3 of 5 masters answer lock commands with an error (OOM)"),
              "%s", rz.body);
    cr_assert(strstr(rz.body, "\"refusing\":true,\"refusal\":\"OOM\""), "%s", rz.body);
    h_resp_free(&rz);
    cr_assert_eq(h_metric(C, "redlockd_master_refusing"), 3);
    cr_assert_geq(h_metric(C, "redlockd_master_refusals_total"), 3);
    for (int i = 0; i < 3; i++)
        freeReplyObject(h_redis(C, i, "CONFIG SET maxmemory 0"));
    r = h_http(C, "POST", "/locks/oom-2", NULL, NULL);
    cr_assert_eq(r.status, 201, "%s", r.body);
    h_resp_free(&r);
    cr_assert(h_wait_status(C, "/readyz", 200, 2000), "not ready again once the masters took writes");
    /* A master's flag clears with its first write taken, which may come
     * after the answer (a grant is answered once a majority said yes). */
    long long refusing = -1;
    for (int i = 0; i < 200 && refusing != 0; i++) {
        refusing = h_metric(C, "redlockd_master_refusing");
        if (refusing != 0)
            usleep(10000);
    }
    cr_assert_eq(refusing, 0, "%lld masters still counted as refusing 2 s after they took writes", refusing);
}

/* /readyz is open, and a master's error as the server said it can name
 * what an attacker should not read (an ACL user, a rule). With
 * --auth-token-file a call without the token gets the class of each
 * master's problem only (here command_refused: PING is not allowed to the
 * ACL user); the token shows the server's text. */
Test(ops, readyz_without_the_token_gives_the_class_of_a_fault)
{
    h_cluster_free(C);
    C = h_cluster_start(3, "--user locker on >pw ~* &* +@all -ping --user default off");
    char tf[400];
    snprintf(tf, sizeof tf, "%s/token", C->dir);
    FILE *f = fopen(tf, "w");
    fprintf(f, "t0ken\n");
    fclose(f);
    h_daemon_start_unready(C, "--redis-username", "locker", "--redis-password", "pw", "--auth-token-file", tf,
                           NULL);
    h_resp full = {0};
    for (int tries = 0; tries < 100; tries++) {
        h_resp_free(&full);
        full = h_http(C, "GET", "/readyz", NULL, "Authorization: Bearer t0ken", NULL);
        int n = 0;
        cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(full.json, "masters")) {
            const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(m, "reason"));
            n += why && strstr(why, "PING refused: NOPERM") != NULL;
        }
        if (n == C->n)
            break;
        usleep(50000);
    }
    cr_assert_eq(full.status, 503, "%s", full.body);
    cr_assert(strstr(h_str(&full, "reason"), "PING refused: NOPERM"), "with the token, the server's text: %s",
              full.body);
    h_resp_free(&full);
    const char *who[] = {NULL, "Authorization: Bearer wrong"};
    for (int w = 0; w < 2; w++) {
        h_resp r = h_http(C, "GET", "/readyz", NULL, who[w], NULL);
        cr_assert_eq(r.status, 503, "%s", r.body);
        cr_assert_null(strstr(r.body, "NOPERM"), "the server's text without the token: %s", r.body);
        cr_assert_null(strstr(r.body, "permissions"), "the server's text without the token: %s", r.body);
        int classed = 0;
        cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(r.json, "masters")) {
            const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(m, "reason"));
            classed += why && !strcmp(why, "command_refused");
        }
        cr_assert_eq(classed, C->n, "every master's reason is its class: %s", r.body);
        cr_assert(strstr(h_str(&r, "reason"), "command_refused"), "%s", r.body);
        h_resp_free(&r);
    }
}

Test(ops, metrics_parse_as_prometheus_text_and_move)
{
    static struct exposition a, b;
    scrape(&a);
    const char *families[] = {"redlockd_http_requests_total", "redlockd_request_duration_seconds",
                              "redlockd_grants_total", "redlockd_conflicts_total", "redlockd_no_quorum_total",
                              "redlockd_master_up", "redlockd_master_quarantined",
                              "redlockd_master_errors_total", "redlockd_master_reply_seconds",
                              "redlockd_quorum_misses_total", "redlockd_loop_stalls_total",
                              "redlockd_loop_stall_seconds_total", "redlockd_master_late_replies_total"};
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        bool found = false;
        for (int k = 0; k < a.nf; k++)
            found |= !strcmp(a.f[k].name, families[i]);
        cr_assert(found, "no metric family %s", families[i]);
    }
    cr_assert_eq(sum_of(&a, "redlockd_master_up"), 5);

    h_resp g = h_http(C, "POST", "/locks/metered", NULL, NULL);
    h_resp c = h_http(C, "POST", "/locks/metered", NULL, NULL);
    char hdr[200];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&g, "token"));
    h_resp x = h_http(C, "PATCH", "/locks/metered", NULL, hdr, NULL);
    h_resp r = h_http(C, "DELETE", "/locks/metered", NULL, hdr, NULL);
    cr_assert_eq(g.status, 201);
    cr_assert_eq(c.status, 409);
    cr_assert_eq(x.status, 200);
    cr_assert_eq(r.status, 204);
    scrape(&b);
    struct {
        const char *name, *labels;
        double delta;
    } moves[] = {
        {"redlockd_grants_total", "", 1},
        {"redlockd_conflicts_total", "", 1},
        {"redlockd_extensions_total", "", 1},
        {"redlockd_releases_total", "", 1},
        {"redlockd_http_requests_total", "route=\"acquire\",status=\"201\"", 1},
        {"redlockd_http_requests_total", "route=\"acquire\",status=\"409\"", 1},
        {"redlockd_http_requests_total", "route=\"extend\",status=\"200\"", 1},
        {"redlockd_http_requests_total", "route=\"release\",status=\"204\"", 1},
        {"redlockd_request_duration_seconds_count", "operation=\"acquire\"", 2},
        {"redlockd_request_duration_seconds_count", "operation=\"extend\"", 1},
        {"redlockd_request_duration_seconds_count", "operation=\"release\"", 1},
    };
    for (size_t i = 0; i < sizeof moves / sizeof *moves; i++) {
        double before = value_of(&a, moves[i].name, moves[i].labels);
        double after = value_of(&b, moves[i].name, moves[i].labels);
        cr_assert(!isnan(after), "no sample %s{%s}", moves[i].name, moves[i].labels);
        if (isnan(before))
            before = 0;
        cr_assert_eq(after - before, moves[i].delta, "%s{%s} moved by %g", moves[i].name, moves[i].labels,
                     after - before);
    }
    /* An answer leaves at a majority's replies: the last master's reply to
     * the release may be counted a moment later (on a busy machine, after
     * the scrape). Polled, with a generous limit. */
    double replies = sum_of(&b, "redlockd_master_reply_seconds_count") - sum_of(&a, "redlockd_master_reply_seconds_count");
    for (int i = 0; i < 100 && replies < 5 * 4; i++) {
        usleep(50000);
        scrape(&b);
        replies = sum_of(&b, "redlockd_master_reply_seconds_count") - sum_of(&a, "redlockd_master_reply_seconds_count");
    }
    cr_assert_geq(replies, 5 * 4, "every master answered the four lock calls");
    h_resp_free(&g);
    h_resp_free(&c);
    h_resp_free(&x);
    h_resp_free(&r);
}

/* ---- SIGTERM under load ---- */

/* Clients 0 and 1 wait on a held name; the others take names of their own. */
static void ops_next(h_loader *l, char *name, size_t len, const char **body)
{
    bool waiter = l->id < 2;
    snprintf(name, len, "%s-%d", waiter ? "held" : "busy", waiter ? 0 : l->id);
    *body = waiter ? "{\"wait_ms\":5000}" : NULL;
}

Test(ops, sigterm_under_load_exits_zero_without_5xx)
{
    h_resp held = h_http(C, "POST", "/locks/held-0", "{\"ttl_ms\":60000}", NULL);
    cr_assert_eq(held.status, 201);
    h_resp_free(&held);
    enum { N = 10 };
    static h_loader l[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        l[i] = (h_loader){.c = C, .next = ops_next};
    h_load_start(l, N, t);
    usleep(700000);
    long before = H_LOAD_SUM(l, N, answered);
    cr_assert_gt(before, 100, "the load is running");
    pid_t pid = C->daemon;
    kill(pid, SIGTERM);
    int st = 0;
    uint64_t t0 = h_now_us();
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    double took = (double)(h_now_us() - t0) / 1e6;
    C->daemon = 0;
    h_load_join(l, N, t);   /* (each stops by itself once refused) */
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    cr_assert_lt(took, 10.5, "shutdown took %.1f s", took);
    /* No answer >= 500 because of the shutdown, except the one a waiter
     * (clients 0 and 1) gets when the service stops while it waits: 503
     * shutting_down. */
    for (int i = 0; i < N; i++) {
        long fx = atomic_load(&l[i].five_xx);
        if (i < 2)
            cr_assert(fx == 0 || (fx == 1 && l[i].last_5xx == 503),
                      "waiter %d got %ld answers >= 500 (last %ld), not at most one 503 shutting_down", i, fx,
                      l[i].last_5xx);
        else
            cr_assert_eq(fx, 0, "client %d got %ld answers >= 500 (last %ld: %s)", i, fx, l[i].last_5xx,
                         l[i].last_body);
    }
    cr_assert_gt(H_LOAD_SUM(l, N, answered), before);
    /* Waiters on the held name were answered at once, not left hanging. */
    cr_assert_lt(took, 4.0, "waiting acquires held up the shutdown (%.1f s)", took);
}
