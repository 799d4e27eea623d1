/* Integration: restart quarantine with real masters killed and restarted
 * without persistence, as a crash of an unpersisted master looks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void teardown(void) { h_cluster_free(C); }

TestSuite(quarantine, .fini = teardown, .timeout = 90);

/* Polls /readyz until master i reports quarantined == want. */
static h_resp wait_quarantined(int i, bool want, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    for (;;) {
        h_resp rz = h_http(C, "GET", "/readyz", NULL, NULL);
        cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(rz.json, "masters"), i);
        cJSON *up = cJSON_GetObjectItem(m, "up"), *q = cJSON_GetObjectItem(m, "quarantined");
        if (cJSON_IsTrue(up) && q && cJSON_IsTrue(q) == want)
            return rz;
        if (h_now_us() > until)
            cr_assert_fail("master %d never showed quarantined=%d: %s", i, want, rz.body);
        h_resp_free(&rz);
        usleep(20000);
    }
}

static bool log_has(const char *what)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -q '%s' %s", what, C->log);
    return system(cmd) == 0;
}

/* The sum of every sample of a metric family in /metrics. */
static long long metric_sum(const char *family)
{
    h_resp m = h_http(C, "GET", "/metrics", NULL, NULL);
    long long sum = 0;
    size_t fl = strlen(family);
    for (const char *line = m.body; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, family, fl) != 0 || (line[fl] != '{' && line[fl] != ' '))
            continue;
        const char *sp = strchr(line, ' ');
        sum += strtoll(sp + 1, NULL, 10);
    }
    h_resp_free(&m);
    return sum;
}

/* The Redlock page's failure: a majority of the holder's masters restart
 * empty. Without quarantine a second client gets the name while the first
 * still holds it; with quarantine the restarted masters' yes does not count
 * until they have been up for the longest TTL plus drift. */
Test(quarantine, restarted_majority_sits_out_then_returns)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--max-ttl-ms", "3000", "--default-ttl-ms", "3000", NULL);
    h_resp rz = h_http(C, "GET", "/readyz", NULL, NULL);
    cr_assert_eq(rz.status, 200, "a freshly started cluster is usable at once: %s", rz.body);
    cr_assert_eq(h_int(&rz, "masters_voting"), 5, "%s", rz.body);
    h_resp_free(&rz);

    h_resp held = h_http(C, "POST", "/locks/q", NULL, NULL);
    cr_assert_eq(held.status, 201, "%s", held.body);
    uint64_t granted = h_now_us();
    for (int i = 0; i < 3; i++)
        h_master_restart(C, i);
    for (int i = 0; i < 3; i++) {
        rz = wait_quarantined(i, true, 3000);
        h_resp_free(&rz);
    }
    rz = h_http(C, "GET", "/readyz", NULL, NULL);
    cr_assert_eq(rz.status, 503, "3 of 5 quarantined cannot be ready: %s", rz.body);
    cr_assert_eq(h_int(&rz, "masters_up"), 5);
    cr_assert_eq(h_int(&rz, "masters_voting"), 2);
    cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(rz.json, "masters"), 0);
    cJSON *left = cJSON_GetObjectItem(m0, "quarantine_left_ms");
    cr_assert(cJSON_IsNumber(left) && left->valuedouble > 0 && left->valuedouble <= 4100,
              "%s", rz.body);
    h_resp_free(&rz);

    /* The first holder's lock is still valid, and only masters 3 and 4 know. */
    h_resp second = h_http(C, "POST", "/locks/q", NULL, NULL);
    cr_assert_lt(h_now_us() - granted, (uint64_t)h_int(&held, "validity_ms") * 1000,
                 "the check came too late to mean anything");
    cr_assert_eq(second.status, 503, "a second holder while the first is valid: %ld %s",
                 second.status, second.body);
    cr_assert_str_eq(h_str(&second, "error"), "no_quorum");
    h_resp_free(&second);
    cr_assert_eq(metric_sum("redlockd_master_quarantined"), 3);
    cr_assert_eq(metric_sum("redlockd_master_restarts_total"), 3);
    cr_assert(log_has(" master_restarted "));
    cr_assert(log_has(" master_quarantined "));

    /* Quarantine ends once each has been up 3000 ms + drift (uptime is whole
     * seconds, so up to a second more). */
    for (int i = 0; i < 3; i++) {
        rz = wait_quarantined(i, false, 6000);
        h_resp_free(&rz);
    }
    cr_assert(log_has(" master_quarantine_over "));
    h_resp third = h_http(C, "POST", "/locks/q", NULL, NULL);
    cr_assert_eq(third.status, 201, "%s", third.body);
    cr_assert_gt(h_int(&third, "fence"), h_int(&held, "fence"), "fences must survive empty restarts");
    h_resp_free(&third);
    h_resp_free(&held);
}

/* The same faults with --quarantine off: the restarted masters vote at once
 * and a second client gets a lock that is still held. This is the hazard
 * quarantine exists for; the test shows the flag really turns it off. */
Test(quarantine, off_lets_restarted_masters_vote_at_once)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, "--quarantine", "off", NULL);
    h_resp held = h_http(C, "POST", "/locks/q", NULL, NULL);
    cr_assert_eq(held.status, 201, "%s", held.body);
    for (int i = 0; i < 3; i++)
        h_master_restart(C, i);
    uint64_t until = h_now_us() + 5000000;
    long status = 0;
    while (status != 201 && h_now_us() < until) {
        h_resp a = h_http(C, "POST", "/locks/q", NULL, NULL);
        status = a.status;
        h_resp_free(&a);
        usleep(20000);
    }
    cr_assert_eq(status, 201, "without quarantine the empty majority grants the held name");
    h_resp rz = h_http(C, "GET", "/readyz", NULL, NULL);
    cr_assert_eq(h_int(&rz, "masters_voting"), 5, "%s", rz.body);
    h_resp_free(&rz);
    h_resp_free(&held);
}

/* redlockd starts after one master restarted while the others kept running:
 * it has never seen that master's old run_id, but its short uptime among
 * older masters gives it away. */
Test(quarantine, young_master_among_old_ones_at_first_sight, .timeout = 60)
{
    C = h_cluster_start(3, NULL);
    sleep(7);   /* the others' uptime must exceed the together tolerance (5 s) */
    h_master_restart(C, 1);
    h_daemon_start(C, "--max-ttl-ms", "2000", "--default-ttl-ms", "2000", NULL);
    h_resp rz = wait_quarantined(1, true, 3000);
    cr_assert_eq(rz.status, 200, "2 of 3 still vote: %s", rz.body);
    cr_assert_eq(h_int(&rz, "masters_voting"), 2);
    h_resp_free(&rz);
    rz = wait_quarantined(0, false, 100);
    h_resp_free(&rz);
    h_resp a = h_http(C, "POST", "/locks/young", NULL, NULL);
    cr_assert_eq(a.status, 201, "%s", a.body);
    h_resp_free(&a);
    rz = wait_quarantined(1, false, 5000);
    h_resp_free(&rz);
}
