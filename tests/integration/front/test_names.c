/* Integration: the names people use (issue 31). Paths, e-mail addresses,
 * spaces, quotes and UTF-8 as lock names through every method, percent-
 * encoded once ("%2F" included); control bytes and broken UTF-8 refused,
 * raw or encoded, with nothing written; no name reaches an internal key;
 * with --key-prefix '' the key is the name's bytes. And Dapr's resource
 * ids and owners as daprd takes them, with its keyPrefix per store. */
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

TestSuite(names, .fini = teardown, .timeout = 120);

/* name percent-encoded as one path segment (every byte but unreserved). */
static void enc(const char *name, char *out, size_t cap)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && w + 4 < cap; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '_' || *p == '~')
            out[w++] = (char)*p;
        else
            w += (size_t)snprintf(out + w, cap - w, "%%%02X", *p);
    }
    out[w] = '\0';
}

static h_resp on(const char *method, const char *name, const char *token)
{
    char path[800], hdr[300];
    enc(name, path + 7, sizeof path - 7);
    memcpy(path, "/locks/", 7);
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", token ? token : "");
    return h_http(C, method, path, NULL, token ? hdr : NULL, NULL);
}

static long long keys_on(int i)
{
    redisReply *r = h_redis(C, i, "DBSIZE");
    long long n = r ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

static const char *names[] = {
    "reports/2026/11", "user@example.com", "a b", "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x94\x92",
    "orders#42", "say \"hi\" \\ there", "100%", "a?b&c=d", ".", "..", "a/../b",
};

Test(names, paths_mail_spaces_and_utf8_through_every_method)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *n = names[i];
        h_resp a = on("POST", n, NULL);
        cr_assert_eq(a.status, 201, "POST %s: %ld %s", n, a.status, a.body);
        cr_assert_str_eq(h_str(&a, "name"), n);
        char token[128];
        snprintf(token, sizeof token, "%s", h_str(&a, "token"));
        char key[300];
        snprintf(key, sizeof key, "lock:%s", n);
        redisReply *v = h_redis(C, 0, "GET %b", key, strlen(key));
        cr_assert(v && v->type == REDIS_REPLY_STRING && !strcmp(v->str, token), "the key of %s is lock: and its bytes", n);
        freeReplyObject(v);
        h_resp b = on("POST", n, NULL);
        cr_assert_eq(b.status, 409, "a second POST %s: %ld", n, b.status);
        h_resp g = on("GET", n, NULL);
        cr_assert_eq(g.status, 200);
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(g.json, "held")), "GET %s: %s", n, g.body);
        h_resp x = on("PATCH", n, token);
        cr_assert_eq(x.status, 200, "PATCH %s: %ld %s", n, x.status, x.body);
        h_resp d = on("DELETE", n, token);
        cr_assert_eq(d.status, 204, "DELETE %s: %ld %s", n, d.status, d.body);
        h_resp g2 = on("GET", n, NULL);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g2.json, "held")), "GET %s after DELETE: %s", n, g2.body);
        h_resp *all[] = {&a, &b, &g, &x, &d, &g2};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++)
            h_resp_free(all[k]);
    }
    /* Slashes may also be sent as they are: one name, not a path. */
    h_resp r = h_http(C, "POST", "/locks/reports/2026/12", NULL, NULL);
    cr_assert_eq(r.status, 201, "%ld %s", r.status, r.body);
    cr_assert_str_eq(h_str(&r, "name"), "reports/2026/12");
    h_resp_free(&r);
    /* Decoded once: %252F is the three bytes %2F. */
    r = h_http(C, "POST", "/locks/a%252Fb", NULL, NULL);
    cr_assert_eq(r.status, 201);
    cr_assert_str_eq(h_str(&r, "name"), "a%2Fb");
    h_resp_free(&r);
    /* Elections and semaphores take the same names. */
    r = h_http(C, "POST", "/semaphores/pool%2Fgpu%20%C3%A9", "{\"limit\":1}", NULL);
    cr_assert_eq(r.status, 201, "%ld %s", r.status, r.body);
    h_resp_free(&r);
    r = h_http(C, "GET", "/semaphores/pool%2Fgpu%20%C3%A9", NULL, NULL);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "holders")), 1, "%s", r.body);
    h_resp_free(&r);
}

Test(names, control_bytes_and_broken_utf8_are_refused_and_change_nothing)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    char longname[700] = "/locks/";
    for (int i = 0; i < 201; i++)
        strcat(longname, "a");
    const char *bad[] = {"a%00b", "a%0Ab", "a%0D", "%1F%23fence", "a%7F", "%09", "%C3", "caf%C3%28",
                         "%C0%AF", "%ED%A0%80", "%F4%90%80%80", "%FF", "a%2", "a%zz", "%"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *methods[] = {"POST", "GET", "PATCH", "DELETE"};
        for (size_t m = 0; m < 4; m++) {
            char path[100];
            snprintf(path, sizeof path, "/locks/%s", bad[i]);
            h_resp r = h_http(C, methods[m], path, NULL, "Lock-Token: t", NULL);
            cr_assert_eq(r.status, 400, "%s %s -> %ld %s", methods[m], path, r.status, r.body);
            cr_assert_str_eq(h_str(&r, "error"), "bad_name");
            h_resp_free(&r);
        }
        char path[100];
        snprintf(path, sizeof path, "/elections/%s", bad[i]);
        h_resp r = h_http(C, "POST", path, "{\"candidate\":\"a\"}", NULL);
        cr_assert_eq(r.status, 400, "%s", path);
        h_resp_free(&r);
        snprintf(path, sizeof path, "/semaphores/%s", bad[i]);
        r = h_http(C, "POST", path, "{\"limit\":2}", NULL);
        cr_assert_eq(r.status, 400, "%s", path);
        h_resp_free(&r);
    }
    h_resp r = h_http(C, "POST", longname, NULL, NULL);
    cr_assert_eq(r.status, 400, "201 bytes");
    h_resp_free(&r);
    /* A raw control byte in the request line. */
    int fd = h_raw_connect(C, NULL);
    h_raw_send(fd, "POST /locks/a\x01" "b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n");
    char buf[2000];
    bool closed;
    size_t n = h_raw_read_all(fd, buf, sizeof buf - 1, 3000, &closed);
    buf[n] = '\0';
    cr_assert(strstr(buf, " 400 "), "a raw control byte: %s", buf);
    close(fd);
    /* Owners, candidates and values: the same rule. */
    const char *bodies[][2] = {{"/locks/o", "{\"owner\":\"a\\u0000b\"}"},
                               {"/locks/o", "{\"owner\":\"a\\u001fb\"}"},
                               {"/elections/e", "{\"candidate\":\"a\\tb\"}"},
                               {"/elections/e", "{\"candidate\":\"a\",\"value\":\"x\\ny\"}"}};
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        r = h_http(C, "POST", bodies[i][0], bodies[i][1], NULL);
        cr_assert_eq(r.status, 400, "%s %s: %ld", bodies[i][0], bodies[i][1], r.status);
        h_resp_free(&r);
    }
    for (int i = 0; i < 5; i++)
        cr_assert_eq(keys_on(i), 1, "master %d holds more than its cluster marker", i);
    /* ...and they take spaces, quotes and UTF-8. */
    r = h_http(C, "POST", "/locks/o", "{\"owner\":\"worker 7 \\\"j\\u00f6rg\\\"\"}", NULL);
    cr_assert_eq(r.status, 201, "%s", r.body);
    h_resp_free(&r);
    r = h_http(C, "GET", "/locks/o", NULL, NULL);
    cr_assert_str_eq(h_str(&r, "owner"), "worker 7 \"j\xc3\xb6rg\"");
    h_resp_free(&r);
}

/* No name reaches an internal key: the lock "db#election" is not election
 * db, "pool#0" is not semaphore pool's slot 0, "x#fence" is not lock x's
 * fence counter. */
Test(names, no_name_reaches_an_internal_key)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--key-prefix", "", NULL);
    h_stream *e = h_stream_open(C, "/elections/db", "{\"candidate\":\"a\",\"ttl_ms\":5000}", 3000);
    cr_assert(e && e->status == 201);
    bool elected = false;
    for (int i = 0; i < 5 && !elected; i++) {
        cJSON *ev = NULL;
        uint64_t at;
        if (h_stream_event(e, 3000, &ev, &at) != 1)
            break;
        elected = !strcmp(h_ev_str(ev, "event"), "elected");
        cJSON_Delete(ev);
    }
    cr_assert(elected);
    h_resp s = h_http(C, "POST", "/semaphores/pool", "{\"limit\":1,\"ttl_ms\":5000}", NULL);
    cr_assert_eq(s.status, 201);
    h_resp x = h_http(C, "POST", "/locks/x", "{\"ttl_ms\":5000}", NULL);
    cr_assert_eq(x.status, 201);
    long long fence = h_int(&x, "fence");
    const char *lookalikes[] = {"db#election", "pool#0", "pool#limit", "pool#limit#queue", "x#fence", "x#owner",
                                "x#queue", "x#qdl"};
    for (size_t i = 0; i < sizeof lookalikes / sizeof *lookalikes; i++) {
        h_resp r = on("POST", lookalikes[i], NULL);
        cr_assert_eq(r.status, 201, "%s: %ld %s", lookalikes[i], r.status, r.body);
        h_resp_free(&r);
    }
    h_resp g = h_http(C, "GET", "/elections/db", NULL, NULL);
    cr_assert_str_eq(h_str(&g, "leader"), "a", "%s", g.body);
    h_resp_free(&g);
    g = h_http(C, "GET", "/semaphores/pool", NULL, NULL);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(g.json, "holders")), 1, "%s", g.body);
    h_resp_free(&g);
    h_resp t = h_http(C, "POST", "/semaphores/pool", "{\"limit\":1}", NULL);
    cr_assert_eq(t.status, 409, "the semaphore is still full: %ld %s", t.status, t.body);
    h_resp_free(&t);
    char hdr[200];
    snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&x, "token"));
    h_resp d = h_http(C, "DELETE", "/locks/x", NULL, hdr, NULL);
    cr_assert_eq(d.status, 204);
    h_resp_free(&d);
    h_resp x2 = h_http(C, "POST", "/locks/x", NULL, NULL);
    cr_assert_eq(x2.status, 201, "%s", x2.body);
    cr_assert_gt(h_int(&x2, "fence"), fence, "lock x's fence counter is its own");
    /* With the empty prefix, the lock key is exactly the name's bytes: a
     * lock another Redlock client set on "reports/2026/11" excludes us. */
    for (int i = 0; i < 5; i++)
        freeReplyObject(h_redis(C, i, "SET %s %s PX 10000", "reports/2026/11", "theirs"));
    h_resp o = h_http(C, "POST", "/locks/reports%2F2026%2F11", NULL, NULL);
    cr_assert_eq(o.status, 409, "%ld %s", o.status, o.body);
    h_resp *all[] = {&s, &x, &x2, &o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        h_resp_free(all[i]);
    h_stream_close(e);
}

/* ---- Dapr ---- */

static h_resp dapr_call(h_cluster *c, bool unlock, const char *store, const char *resource, const char *owner)
{
    char path[200];
    snprintf(path, sizeof path, "/v1.0-alpha1/%s/%s", unlock ? "unlock" : "lock", store);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "resourceId", resource);
    cJSON_AddStringToObject(b, "lockOwner", owner);
    if (!unlock)
        cJSON_AddNumberToObject(b, "expiryInSeconds", 30);
    char *body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    h_resp r = h_http(c, "POST", path, body, "Content-Type: application/json", NULL);
    free(body);
    return r;
}

static bool locked(h_cluster *c, const char *store, const char *resource, const char *owner)
{
    h_resp r = dapr_call(c, false, store, resource, owner);
    cr_assert_eq(r.status, 200, "lock %s: %ld %s", resource, r.status, r.body);
    bool ok = cJSON_IsTrue(cJSON_GetObjectItem(r.json, "success"));
    h_resp_free(&r);
    return ok;
}

static long unlock_status(h_cluster *c, const char *store, const char *resource, const char *owner)
{
    h_resp r = dapr_call(c, true, store, resource, owner);
    cr_assert_eq(r.status, 200, "unlock %s: %ld %s", resource, r.status, r.body);
    long st = (long)h_int(&r, "status");
    h_resp_free(&r);
    return st;
}

Test(names, dapr_resource_ids_and_owners_as_daprd_takes_them)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    char id180[181];
    memset(id180, 'r', 180);
    id180[180] = '\0';
    const char *ids[] = {"orders/42", "user@example.com", "a b", "caf\xc3\xa9-\xe6\x9d\xb1\xe4\xba\xac", id180};
    const char *owners[][2] = {{"worker 7", "worker 8"},
                               {"ops@example.com", "dev@example.com"},
                               {"a \"quoted\" one", "a \\ backslash"},
                               {"j\xc3\xb6rg", "j\xc3\xb6rn"},
                               {"o", "o p"}};   /* "o" and "o p": one is not the other's prefix */
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        cr_assert(locked(C, "lockstore", ids[i], owners[i][0]), "%s", ids[i]);
        cr_assert_not(locked(C, "lockstore", ids[i], owners[i][1]), "a second owner of %s", ids[i]);
        cr_assert_eq(unlock_status(C, "lockstore", ids[i], owners[i][1]), 2, "belongs to others");
        cr_assert_eq(unlock_status(C, "lockstore", ids[i], owners[i][0]), 0, "%s", ids[i]);
        cr_assert_eq(unlock_status(C, "lockstore", ids[i], owners[i][0]), 1, "does not exist");
        cr_assert(locked(C, "lockstore", ids[i], owners[i][1]), "the second owner after the unlock");
        cr_assert_eq(unlock_status(C, "lockstore", ids[i], owners[i][1]), 0);
    }
    /* What daprd refuses, and control bytes: nothing is written. */
    long long before[5];
    for (int i = 0; i < 5; i++)
        before[i] = keys_on(i);
    const char *bad[] = {"a||b", "", "a\nb", "a\x1f#fence"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        h_resp r = dapr_call(C, false, "lockstore", bad[i], "o");
        cr_assert_eq(r.status, 400, "resourceId %zu: %ld", i, r.status);
        cr_assert_str_eq(h_str(&r, "errorCode"), "ERR_MALFORMED_REQUEST");
        h_resp_free(&r);
    }
    for (int i = 0; i < 5; i++)
        cr_assert_eq(keys_on(i), before[i], "master %d: a refused resourceId wrote a key", i);
}

/* keyPrefix per store, as daprd: two stores with the same resourceId, and
 * two apps with the same store, do not collide; keyPrefix none is the
 * bare resourceId, and "appid" without an app id too (daprd's rule). */
Test(names, dapr_key_prefixes_keep_stores_and_apps_apart)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--dapr-stores", "lockstore,orders,bare=none,mine=tenant-7", "--dapr-app-id", "checkout", NULL);
    P = h_peer_start(C, "--dapr-stores", "lockstore,orders=name", "--dapr-app-id", "billing", NULL);
    cr_assert(locked(C, "lockstore", "orders/42", "a"));
    cr_assert_not(locked(C, "orders", "orders/42", "b"),
                  "same app, same resourceId, both keyPrefix appid: one key, as daprd's stores on one Redis");
    cr_assert(locked(P, "lockstore", "orders/42", "c"), "another app does not collide");
    cr_assert(locked(P, "orders", "orders/42", "d"), "keyPrefix name: the store's name");
    cr_assert(locked(C, "bare", "orders/42", "e"));
    cr_assert(locked(C, "mine", "orders/42", "f"));
    const char *keys[] = {"lock:checkout||orders/42", "lock:billing||orders/42", "lock:orders||orders/42",
                          "lock:orders/42", "lock:tenant-7||orders/42"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_assert(h_wait_key(C, 0, keys[i], 2000), "no key %s", keys[i]);
    /* a store's "b" lost to "a" above: the same key */
    cr_assert_eq(unlock_status(C, "orders", "orders/42", "b"), 2);
    h_resp m = h_http(C, "GET", "/v1.0/metadata", NULL, NULL);
    cJSON *comps = cJSON_GetObjectItem(m.json, "components");
    cr_assert_eq(cJSON_GetArraySize(comps), 4, "%s", m.body);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(comps, 2), "name")->valuestring, "bare");
    h_resp_free(&m);
}

/* Held streams print names and candidates inside JSON lines of their own
 * making: quotes and backslashes are escaped there too. */
Test(names, held_streams_escape_names_and_candidates)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    const char *paths[] = {"/locks/say%20%22hi%22%20%5C%20%C3%A9", "/semaphores/say%20%22hi%22%20%5C%20%C3%A9",
                           "/elections/say%20%22hi%22%20%5C%20%C3%A9"};
    const char *bodies[] = {"{\"hold\":true}", "{\"hold\":true,\"limit\":2}",
                            "{\"candidate\":\"node \\\"7\\\" \\\\ x\"}"};
    for (int i = 0; i < 3; i++) {
        h_stream *s = h_stream_open(C, paths[i], bodies[i], 3000);
        cr_assert(s && s->status == 201, "%s", paths[i]);
        for (int k = 0; k < (i == 2 ? 2 : 1); k++) {
            cJSON *ev = NULL;
            uint64_t at;
            cr_assert_eq(h_stream_event(s, 3000, &ev, &at), 1, "%s: no event %d that parses as JSON", paths[i], k);
            cr_assert_str_eq(h_ev_str(ev, "name"), "say \"hi\" \\ \xc3\xa9");
            if (i == 2)
                cr_assert_str_eq(h_ev_str(ev, "candidate"), "node \"7\" \\ x");
            cJSON_Delete(ev);
        }
        h_stream_close(s);
    }
}
