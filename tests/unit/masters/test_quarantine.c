/* Unit tests: restart quarantine's pure rules (quarantine.h): the cluster
 * check's plan, and what INFO and CONFIG tell of a master. */
#include <criterion/criterion.h>
#include <string.h>

#include "masters/masters.h"

#define M QMARK_MISSING
#define P QMARK_PENDING
#define R QMARK_READY
#define U QMARK_UNKNOWN

static int plan(const enum quarantine_marker *st, int n, bool auto_setup, enum quarantine_action *act)
{
    return quarantine_plan(st, n, auto_setup, act);
}

Test(quarantine_plan, new_cluster_needs_every_master)
{
    enum quarantine_action act[5];
    enum quarantine_marker all_missing[5] = {M, M, M, M, M};
    cr_assert_eq(plan(all_missing, 5, true, act), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(act[i], QACT_PENDING, "master %d", i);
    /* One master unknown: it may hold a ready marker, so nothing is set up. */
    enum quarantine_marker one_unknown[5] = {M, M, M, M, U};
    cr_assert_eq(plan(one_unknown, 5, true, act), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(act[i], QACT_NONE);
}

Test(quarantine_plan, manual_setup_never_starts_one)
{
    enum quarantine_action act[5];
    enum quarantine_marker all_missing[5] = {M, M, M, M, M};
    cr_assert_eq(plan(all_missing, 5, false, act), 0);
    /* ...but joins a set-up under way (pending markers exist). */
    enum quarantine_marker joining[5] = {P, P, M, M, M};
    cr_assert_eq(plan(joining, 5, false, act), 3);
    cr_assert_eq(act[0], QACT_NONE);
    cr_assert_eq(act[2], QACT_PENDING);
}

Test(quarantine_plan, all_pending_are_promoted)
{
    enum quarantine_action act[5];
    enum quarantine_marker st[5] = {P, P, P, P, P};
    cr_assert_eq(plan(st, 5, true, act), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(act[i], QACT_PROMOTE);
    /* Pending with one unknown and none ready: the unknown one may be
     * missing, so the set-up is not finished yet. */
    enum quarantine_marker partial[5] = {P, P, P, P, U};
    cr_assert_eq(plan(partial, 5, true, act), 0);
}

Test(quarantine_plan, lost_data_beside_a_ready_marker_is_restored)
{
    enum quarantine_action act[5];
    /* Four restarted empty, one kept its marker: the four sit out. */
    enum quarantine_marker st[5] = {M, M, M, M, R};
    cr_assert_eq(plan(st, 5, true, act), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(act[i], QACT_RESTORE);
    cr_assert_eq(act[4], QACT_NONE);
    /* With unknowns too: a ready marker is enough to know data was lost. */
    enum quarantine_marker unk[5] = {M, U, M, R, U};
    cr_assert_eq(plan(unk, 5, false, act), 2);
    cr_assert_eq(act[0], QACT_RESTORE);
    cr_assert_eq(act[2], QACT_RESTORE);
    cr_assert_eq(act[1], QACT_NONE);
    /* Pending beside ready: never voted, so promoted at once. */
    enum quarantine_marker mixed[5] = {P, R, R, M, R};
    cr_assert_eq(plan(mixed, 5, true, act), 2);
    cr_assert_eq(act[0], QACT_PROMOTE);
    cr_assert_eq(act[3], QACT_RESTORE);
}

Test(quarantine_plan, settled_cluster_needs_nothing)
{
    enum quarantine_action act[5];
    enum quarantine_marker st[5] = {R, R, R, R, R};
    cr_assert_eq(plan(st, 5, true, act), 0);
    enum quarantine_marker down[5] = {R, U, U, R, R};
    cr_assert_eq(plan(down, 5, true, act), 0);
}

static const char info_text[] =
    "# Server\r\nredis_version:7.0.15\r\nrun_id:9f1c0d6e2a4b8c7d5e3f1a2b3c4d5e6f7a8b9c0d\r\n"
    "uptime_in_seconds:42\r\n\r\n# Persistence\r\nloading:0\r\naof_enabled:1\r\n\r\n"
    "# Memory\r\nused_memory:1000\r\nmaxmemory_policy:noeviction\r\n";

Test(quarantine_info, parses_run_id_persistence_and_policy)
{
    quarantine_info qi;
    cr_assert_eq(quarantine_parse_info(info_text, strlen(info_text), &qi), 0);
    cr_assert_str_eq(qi.run_id, "9f1c0d6e2a4b8c7d5e3f1a2b3c4d5e6f7a8b9c0d");
    cr_assert(qi.aof_enabled);
    cr_assert_str_eq(qi.policy, "noeviction");
    cr_assert(quarantine_persists(&qi, "always"));
    cr_assert_not(quarantine_persists(&qi, "everysec"));
    cr_assert_not(quarantine_persists(&qi, NULL), "CONFIG refused: persistence cannot be known");
    cr_assert_not(quarantine_may_lose(&qi));
}

Test(quarantine_info, flags_masters_that_may_lose_locks)
{
    const char *evicting = "run_id:abc\nmaxmemory_policy:volatile-lru\naof_enabled:1\n";
    quarantine_info qi;
    cr_assert_eq(quarantine_parse_info(evicting, strlen(evicting), &qi), 0);
    cr_assert(quarantine_may_lose(&qi), "volatile-* evicts exactly the lock keys");
    const char *no_aof = "run_id:abc\nmaxmemory_policy:noeviction\naof_enabled:0\n";
    cr_assert_eq(quarantine_parse_info(no_aof, strlen(no_aof), &qi), 0);
    cr_assert(quarantine_may_lose(&qi));
    cr_assert_not(quarantine_persists(&qi, "always"), "appendfsync without appendonly persists nothing");
    const char *unknown = "run_id:abc\n";
    cr_assert_eq(quarantine_parse_info(unknown, strlen(unknown), &qi), 0);
    cr_assert(quarantine_may_lose(&qi), "an unknown policy counts as unsafe");
}

Test(quarantine_info, refuses_missing_or_malformed_run_id)
{
    quarantine_info qi;
    const char *none = "uptime_in_seconds:5\naof_enabled:1\n";
    cr_assert_eq(quarantine_parse_info(none, strlen(none), &qi), -1);
    const char *bad = "run_id:not hex!\n";
    cr_assert_eq(quarantine_parse_info(bad, strlen(bad), &qi), -1);
    char longer[80] = "run_id:";
    memset(longer + 7, 'a', 41);
    cr_assert_eq(quarantine_parse_info(longer, strlen(longer), &qi), -1);
}
