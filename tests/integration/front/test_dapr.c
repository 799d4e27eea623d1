/* Integration: Dapr's distributed lock API (v1.0-alpha1), spoken over HTTP
 * exactly as Dapr's SDKs do: JSON bodies, Content-Type application/json,
 * the dapr-api-token header. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;
static char token_file[300];

static void teardown(void) { h_cluster_free(C); }

TestSuite(dapr, .fini = teardown, .timeout = 60);

#define JSON "Content-Type: application/json"

static h_resp dapr_lock(const char *store, const char *resource, const char *owner, int expiry_s)
{
    char path[300], body[600];
    snprintf(path, sizeof path, "/v1.0-alpha1/lock/%s", store);
    snprintf(body, sizeof body, "{\"resourceId\":\"%s\",\"lockOwner\":\"%s\",\"expiryInSeconds\":%d}",
             resource, owner, expiry_s);
    return h_http(C, "POST", path, body, JSON, NULL);
}

static h_resp dapr_unlock(const char *store, const char *resource, const char *owner)
{
    char path[300], body[600];
    snprintf(path, sizeof path, "/v1.0-alpha1/unlock/%s", store);
    snprintf(body, sizeof body, "{\"resourceId\":\"%s\",\"lockOwner\":\"%s\"}", resource, owner);
    return h_http(C, "POST", path, body, JSON, NULL);
}

static bool success_of(h_resp *r)
{
    cJSON *s = cJSON_GetObjectItem(r->json, "success");
    cr_assert(cJSON_IsBool(s), "no boolean success: %s", r->body);
    return cJSON_IsTrue(s);
}

Test(dapr, lock_unlock_statuses)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_resp a = dapr_lock("lockstore", "order-42", "vader", 60);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_assert(strstr(a.content_type, "application/json"));
    cr_assert(success_of(&a));
    h_resp b = dapr_lock("lockstore", "order-42", "luke", 60);
    cr_assert_eq(b.status, 200);
    cr_assert_not(success_of(&b), "held by another owner");
    h_resp again = dapr_lock("lockstore", "order-42", "vader", 60);
    cr_assert_not(success_of(&again), "TryLock does not re-enter, as Dapr's Redis store");

    h_resp u2 = dapr_unlock("lockstore", "order-42", "luke");
    cr_assert_eq(u2.status, 200);
    cr_assert_eq(h_int(&u2, "status"), 2, "belongs to another owner: %s", u2.body);
    h_resp u0 = dapr_unlock("lockstore", "order-42", "vader");
    cr_assert_eq(h_int(&u0, "status"), 0, "%s", u0.body);
    h_resp u1 = dapr_unlock("lockstore", "order-42", "vader");
    cr_assert_eq(h_int(&u1, "status"), 1, "does not exist any more: %s", u1.body);
    h_resp c = dapr_lock("lockstore", "order-42", "luke", 60);
    cr_assert(success_of(&c), "free again after unlock");
    h_resp *all[] = {&a, &b, &again, &u2, &u0, &u1, &c};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        h_resp_free(all[i]);
}

Test(dapr, same_lock_through_both_apis)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_resp a = dapr_lock("lockstore", "job-1", "worker-a", 30);
    cr_assert(success_of(&a));
    h_resp g = h_http(C, "GET", "/locks/lockstore%7C%7Cjob-1", NULL, NULL);
    cr_assert_eq(g.status, 200);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(g.json, "held")), "%s", g.body);
    cr_assert_gt(h_int(&g, "validity_ms"), 29000);
    h_resp n = h_http(C, "POST", "/locks/lockstore%7C%7Cjob-1", NULL, NULL);
    cr_assert_eq(n.status, 409, "the native API sees the Dapr lock: %s", n.body);
    /* The lockOwner is the token: a native release with it works. */
    h_resp r = h_http(C, "DELETE", "/locks/lockstore%7C%7Cjob-1", NULL, "Lock-Token: worker-a", NULL);
    cr_assert_eq(r.status, 204);
    h_resp n2 = h_http(C, "POST", "/locks/lockstore%7C%7Cjob-1", NULL, NULL);
    cr_assert_eq(n2.status, 201);
    h_resp d = dapr_lock("lockstore", "job-1", "worker-b", 30);
    cr_assert_not(success_of(&d), "the Dapr API sees the native lock");
    h_resp u = dapr_unlock("lockstore", "job-1", "worker-b");
    cr_assert_eq(h_int(&u, "status"), 2);
    h_resp *all[] = {&a, &g, &n, &r, &n2, &d, &u};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        h_resp_free(all[i]);
}

Test(dapr, stores_are_namespaces_and_metadata_names_them)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, "--dapr-stores", "orders,billing", NULL);
    h_resp a = dapr_lock("orders", "r1", "o1", 30);
    h_resp b = dapr_lock("billing", "r1", "o2", 30);
    cr_assert(success_of(&a));
    cr_assert(success_of(&b), "same resourceId in another store does not collide");
    h_resp x = dapr_lock("lockstore", "r1", "o3", 30);
    cr_assert_eq(x.status, 400);
    cr_assert_str_eq(h_str(&x, "errorCode"), "ERR_LOCK_STORE_NOT_FOUND");
    h_resp m = h_http(C, "GET", "/v1.0/metadata", NULL, NULL);
    cr_assert_eq(m.status, 200);
    cJSON *comps = cJSON_GetObjectItem(m.json, "components");
    cr_assert_eq(cJSON_GetArraySize(comps), 2, "%s", m.body);
    cJSON *c0 = cJSON_GetArrayItem(comps, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(c0, "name")->valuestring, "orders");
    cr_assert(strncmp(cJSON_GetObjectItem(c0, "type")->valuestring, "lock.", 5) == 0);
    h_resp hz = h_http(C, "GET", "/v1.0/healthz", NULL, NULL);
    cr_assert_eq(hz.status, 204);
    cr_assert_str_eq(hz.body, "");
    h_resp *all[] = {&a, &b, &x, &m, &hz};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        h_resp_free(all[i]);
}

Test(dapr, validation_as_dapr_does_it_changes_nothing)
{
    C = h_cluster_start(3, NULL);
    h_daemon_start(C, NULL);
    const char *bad_lock[] = {
        "{\"resourceId\":\"\",\"lockOwner\":\"o\",\"expiryInSeconds\":10}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"\",\"expiryInSeconds\":10}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":0}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":-5}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\"}",
        "{\"resourceId\":\"r\",\"lockOwner\":\"o\",\"expiryInSeconds\":\"10\"}",
        "{\"lockOwner\":\"o\",\"expiryInSeconds\":10}",
        "not json",
        "",
    };
    for (size_t i = 0; i < sizeof bad_lock / sizeof *bad_lock; i++) {
        h_resp r = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore", bad_lock[i], JSON, NULL);
        cr_assert_eq(r.status, 400, "%s: %ld %s", bad_lock[i], r.status, r.body);
        cr_assert_str_eq(h_str(&r, "errorCode"), "ERR_MALFORMED_REQUEST", "%s", r.body);
        cr_assert(h_str(&r, "message") && *h_str(&r, "message"));
        h_resp_free(&r);
    }
    h_resp u = h_http(C, "POST", "/v1.0-alpha1/unlock/lockstore", "{\"resourceId\":\"r\",\"lockOwner\":\"\"}",
                      JSON, NULL);
    cr_assert_eq(u.status, 400);
    h_resp_free(&u);
    /* Nothing was taken: the resource is free. */
    h_resp g = h_http(C, "GET", "/locks/lockstore%7C%7Cr", NULL, NULL);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g.json, "held")), "%s", g.body);
    h_resp_free(&g);
    h_resp wrong = h_http(C, "GET", "/v1.0-alpha1/lock/lockstore", NULL, NULL);
    cr_assert_eq(wrong.status, 405);
    cr_assert_str_eq(wrong.allow, "POST");
    h_resp_free(&wrong);
}

Test(dapr, no_quorum_is_500_with_error_body)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    for (int i = 0; i < 3; i++)
        h_master_pause(C, i);
    h_resp a = dapr_lock("lockstore", "q", "o", 10);
    cr_assert_eq(a.status, 500, "%s", a.body);
    cr_assert_str_eq(h_str(&a, "errorCode"), "ERR_TRY_LOCK");
    h_resp u = dapr_unlock("lockstore", "q", "o");
    cr_assert_eq(u.status, 500, "%s", u.body);
    cr_assert_str_eq(h_str(&u, "errorCode"), "ERR_UNLOCK");
    h_resp_free(&a);
    h_resp_free(&u);
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
}

Test(dapr, api_token_header)
{
    C = h_cluster_start(3, NULL);
    snprintf(token_file, sizeof token_file, "%s/token", C->dir);
    FILE *f = fopen(token_file, "w");
    fputs("s3cret-token\n", f);
    fclose(f);
    h_daemon_start(C, "--auth-token-file", token_file, NULL);
    const char *body = "{\"resourceId\":\"t\",\"lockOwner\":\"o\",\"expiryInSeconds\":10}";
    h_resp no = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore", body, JSON, NULL);
    cr_assert_eq(no.status, 401, "%s", no.body);
    cr_assert(h_str(&no, "errorCode"));
    h_resp bad = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore", body, JSON, "dapr-api-token: nope", NULL);
    cr_assert_eq(bad.status, 401);
    h_resp ok = h_http(C, "POST", "/v1.0-alpha1/lock/lockstore", body, JSON,
                       "dapr-api-token: s3cret-token", NULL);
    cr_assert_eq(ok.status, 200, "%s", ok.body);
    cr_assert(success_of(&ok));
    h_resp md = h_http(C, "GET", "/v1.0/metadata", NULL, NULL);
    cr_assert_eq(md.status, 401);
    h_resp hz = h_http(C, "GET", "/v1.0/healthz", NULL, NULL);
    cr_assert_eq(hz.status, 204, "healthz stays open");
    h_resp *all[] = {&no, &bad, &ok, &md, &hz};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        h_resp_free(all[i]);
}
