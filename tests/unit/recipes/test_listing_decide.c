/* Unit tests of the pure parts of a listing (src/recipes/listing_page.c),
 * continued from test_listing.c: which names a page lists, with what JSON
 * (list_decide). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "recipes/recipes.h"

#define NO_EXPIRY_MS 86400000LL   /* what a key without expiry counts as (the --max-ttl) */
#define DRIFT 0.01

/* ---- which names a page lists --------------------------------------------- */

/* A lock's record as script_list_check writes it, into buf. */
static const char *lock_rec(char *buf, size_t cap, long long pttl, long long counter, const char *value,
                            const char *owner)
{
    snprintf(buf, cap, "%lld %lld %zu %zu %s%s", pttl, counter, strlen(value), strlen(owner), value, owner);
    return buf;
}

/* list_decide for one name over n masters' records (NULL: no vote), read
 * elapsed_us ago. Returns the items array as printed; *added the outcome. */
static char *decide(enum list_kind kind, const char *name, const char *const *rec, int n, int scanned,
                    unsigned skipped, long long elapsed_us, int *added)
{
    static list_copy copy[CONF_MAX_MASTERS];
    const list_copy *c[CONF_MAX_MASTERS];
    for (int i = 0; i < n; i++) {
        c[i] = NULL;
        if (!rec[i])
            continue;
        const char *p = rec[i], *end = p + strlen(p);
        cr_assert_eq(list_copy_next(kind, &p, end, NO_EXPIRY_MS, &copy[i]), 0, "record %d refused", i);
        cr_assert_eq(p, end);
        c[i] = &copy[i];
    }
    cJSON *items = cJSON_CreateArray();
    cr_assert_not_null(items);
    *added = list_decide(kind, name, c, n, scanned, skipped, 0, elapsed_us, DRIFT, items);
    char *s = cJSON_PrintUnformatted(items);
    cJSON_Delete(items);
    cr_assert_not_null(s);
    return s;
}

static void expect_listed(enum list_kind kind, const char *name, const char *const *rec, int n, int scanned,
                          unsigned skipped, long long elapsed_us, const char *json)
{
    int added;
    char *s = decide(kind, name, rec, n, scanned, skipped, elapsed_us, &added);
    cr_expect_eq(added, 1);
    cr_expect_str_eq(s, json);
    free(s);
}

static void expect_not_listed(enum list_kind kind, const char *const *rec, int n, int scanned, unsigned skipped,
                              const char *why)
{
    int added;
    char *s = decide(kind, "job", rec, n, scanned, skipped, 0, &added);
    cr_expect_eq(added, 0, "%s", why);
    cr_expect_str_eq(s, "[]", "%s", why);
    free(s);
}

Test(decide, lock_held_by_a_majority)
{
    /* tok-a on 4 of 5: the validity is the 3rd largest pttl's (8000, not
     * the least, 3000): 8000 - 5 ms elapsed - (80 + 2) drift. The fence is
     * the least counter of its holders, the 0 that did not parse aside. */
    char b[5][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 42, "tok-a", "alice"),
        lock_rec(b[1], 128, 9000, 40, "tok-a", ""),
        lock_rec(b[2], 128, 8000, 0, "tok-a", "alice"),
        lock_rec(b[3], 128, 3000, 45, "tok-a", ""),
        "-2",
    };
    expect_listed(LIST_LOCKS, "job", rec, 5, 0, 0, 5000,
                  "[{\"name\":\"job\",\"validity_ms\":7913,\"fence\":40,\"owner\":\"alice\"}]");
}

Test(decide, lock_parsed_json)
{
    char b[3][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 20000, 7, "tok-a", "svc \"a\"\\"),
        lock_rec(b[1], 128, 20000, 7, "tok-a", ""),
        lock_rec(b[2], 128, 20000, 7, "tok-a", ""),
    };
    int added;
    char *s = decide(LIST_LOCKS, "a/b é", rec, 3, 0, 0, 1000, &added);
    cr_assert_eq(added, 1);
    cJSON *items = cJSON_Parse(s);
    cr_assert_not_null(items, "not JSON: %s", s);
    cr_assert(cJSON_IsArray(items));
    cr_assert_eq(cJSON_GetArraySize(items), 1);
    cJSON *o = cJSON_GetArrayItem(items, 0);
    cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    cJSON *validity = cJSON_GetObjectItemCaseSensitive(o, "validity_ms");
    cJSON *fence = cJSON_GetObjectItemCaseSensitive(o, "fence");
    cJSON *owner = cJSON_GetObjectItemCaseSensitive(o, "owner");
    cr_assert(cJSON_IsString(name));
    cr_expect_str_eq(name->valuestring, "a/b é");
    cr_assert(cJSON_IsNumber(validity));
    cr_expect_eq(validity->valuedouble, 20000 - 1 - 202);
    cr_assert(cJSON_IsNumber(fence));
    cr_expect_eq(fence->valuedouble, 7);
    cr_assert(cJSON_IsString(owner));
    cr_expect_str_eq(owner->valuestring, "svc \"a\"\\");
    cr_expect_eq(cJSON_GetArraySize(o), 4);
    cJSON_Delete(items);
    free(s);
}

Test(decide, integers_exact)
{
    /* A fence above 2^53 and a key without expiry: printed digit for digit. */
    char b[3][128];
    const char *rec[] = {
        lock_rec(b[0], 128, -1, 172222222222222222LL, "t", ""),
        lock_rec(b[1], 128, -1, 172222222222222223LL, "t", ""),
        lock_rec(b[2], 128, -1, 172222222222222222LL, "t", ""),
    };
    /* 86400000 - 0 - (864000 + 2) */
    expect_listed(LIST_LOCKS, "big", rec, 3, 0, 0, 0,
                  "[{\"name\":\"big\",\"validity_ms\":85535998,\"fence\":172222222222222222}]");
}

Test(decide, owner_only_when_set)
{
    char b[3][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 3, "t", ""),
        lock_rec(b[1], 128, 10000, 3, "t", ""),
        lock_rec(b[2], 128, 10000, 3, "t", ""),
    };
    expect_listed(LIST_LOCKS, "job", rec, 3, 0, 0, 0, "[{\"name\":\"job\",\"validity_ms\":9898,\"fence\":3}]");
    /* The owner from whichever holder has one. */
    lock_rec(b[2], 128, 10000, 3, "t", "bob");
    expect_listed(LIST_LOCKS, "job", rec, 3, 0, 0, 0,
                  "[{\"name\":\"job\",\"validity_ms\":9898,\"fence\":3,\"owner\":\"bob\"}]");
}

Test(decide, no_majority_not_listed)
{
    char b[5][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 1, "tok-a", ""),
        lock_rec(b[1], 128, 10000, 1, "tok-a", ""),
        "-2",
        "-2",
        lock_rec(b[4], 128, 10000, 2, "tok-b", ""),
    };
    expect_not_listed(LIST_LOCKS, rec, 5, 0, 0, "2 of 5");
    rec[2] = lock_rec(b[2], 128, 10000, 2, "tok-b", "");
    expect_not_listed(LIST_LOCKS, rec, 5, 0, 0, "2-2 split");
    /* 2 of 4 is no majority either */
    const char *four[] = {rec[0], rec[1], rec[2], rec[4]};
    expect_not_listed(LIST_LOCKS, four, 4, 0, 0, "2-2 of 4");
    /* A majority whose time is up */
    char e[3][128];
    const char *late[] = {
        lock_rec(e[0], 128, 10000, 1, "t", ""),
        lock_rec(e[1], 128, 50, 1, "t", ""),
        lock_rec(e[2], 128, 50, 1, "t", ""),
    };
    int added;
    char *s = decide(LIST_LOCKS, "job", late, 3, 0, 0, 49000, &added);
    cr_expect_eq(added, 0, "50 ms left, 49 ms ago");
    cr_expect_str_eq(s, "[]");
    free(s);
}

Test(decide, missing_votes_count_against)
{
    char b[3][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 5, "t", ""),
        lock_rec(b[1], 128, 10000, 6, "t", ""),
        lock_rec(b[2], 128, 10000, 7, "t", ""),
        NULL,
        NULL,
    };
    expect_listed(LIST_LOCKS, "job", rec, 5, 0, 0, 0, "[{\"name\":\"job\",\"validity_ms\":9898,\"fence\":5}]");
    rec[2] = NULL;
    expect_not_listed(LIST_LOCKS, rec, 5, 0, 0, "2 holders and 3 silent of 5");
}

Test(decide, met_before)
{
    char b[5][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 5, "t", ""),
        "-2",
        lock_rec(b[2], 128, 10000, 5, "t", ""),
        lock_rec(b[3], 128, 10000, 5, "t", ""),
        lock_rec(b[4], 128, 10000, 5, "t", ""),
    };
    const char *json = "[{\"name\":\"job\",\"validity_ms\":9898,\"fence\":5}]";
    /* Scanning master 2: master 0 was scanned and holds it, so it was
     * listed from there. */
    expect_not_listed(LIST_LOCKS, rec, 5, 2, 0, "met on master 0");
    /* Master 0 was passed without a scan: it met nothing. */
    expect_listed(LIST_LOCKS, "job", rec, 5, 2, 1u, 0, json);
    /* Scanning master 0 itself, or master 0 holding nothing */
    expect_listed(LIST_LOCKS, "job", rec, 5, 0, 0, 0, json);
    rec[0] = "-2";
    rec[1] = lock_rec(b[1], 128, 10000, 5, "t", "");
    expect_not_listed(LIST_LOCKS, rec, 5, 2, 1u, "master 1 was scanned, master 0 passed");
    expect_listed(LIST_LOCKS, "job", rec, 5, 2, 3u, 0, json);
    /* A master that gave no vote this time met nothing to go by. */
    rec[1] = NULL;
    expect_listed(LIST_LOCKS, "job", rec, 5, 2, 0, 0, json);
    /* Any value the scan would have met there counts, the majority's or not. */
    rec[1] = lock_rec(b[1], 128, 10000, 5, "other", "");
    expect_not_listed(LIST_LOCKS, rec, 5, 2, 0, "master 1 holds a value of the name");
    /* Masters above the one scanned do not count. */
    rec[1] = "-2";
    expect_listed(LIST_LOCKS, "job", rec, 5, 1, 0, 0, json);
}

Test(decide, election)
{
    /* Owner "<since_ms> <candidate>\x1f<value>"; the term is the fence. */
    const char *owner = "1722000000123 pg-1\x1f"
                        "10.0.0.7:5432";
    char b[5][160];
    const char *rec[] = {
        lock_rec(b[0], 160, 10000, 9, "tok-e", owner),
        lock_rec(b[1], 160, 9000, 9, "tok-e", owner),
        lock_rec(b[2], 160, 8000, 11, "tok-e", owner),
        "-2",
        NULL,
    };
    expect_listed(LIST_ELECTIONS, "primary", rec, 5, 0, 0, 5000,
                  "[{\"name\":\"primary\",\"leader\":\"pg-1\",\"value\":\"10.0.0.7:5432\",\"term\":9,"
                  "\"since\":1722000000123,\"validity_ms\":7913}]");
    /* An empty value, a candidate with a space */
    lock_rec(b[0], 160, 10000, 9, "tok-e", "1722000000123 pg 1\x1f");
    lock_rec(b[1], 160, 10000, 9, "tok-e", "1722000000123 pg 1\x1f");
    lock_rec(b[2], 160, 10000, 9, "tok-e", "1722000000123 pg 1\x1f");
    expect_listed(LIST_ELECTIONS, "primary", rec, 5, 0, 0, 0,
                  "[{\"name\":\"primary\",\"leader\":\"pg 1\",\"value\":\"\",\"term\":9,"
                  "\"since\":1722000000123,\"validity_ms\":9898}]");
    expect_not_listed(LIST_ELECTIONS, rec, 5, 1, 0, "met on master 0");
}

Test(decide, election_held_not_by_a_campaign)
{
    char b[3][160];
    const char *rec[] = {
        lock_rec(b[0], 160, 10000, 4, "tok-e", "alice"),
        lock_rec(b[1], 160, 10000, 4, "tok-e", "alice"),
        lock_rec(b[2], 160, 10000, 4, "tok-e", "alice"),
    };
    expect_listed(LIST_ELECTIONS, "primary", rec, 3, 0, 0, 0,
                  "[{\"name\":\"primary\",\"leader\":\"\",\"value\":\"\",\"term\":4,\"since\":0,"
                  "\"validity_ms\":9898}]");
    rec[2] = "-2";
    rec[1] = "-2";
    expect_not_listed(LIST_ELECTIONS, rec, 3, 0, 0, "1 of 3");
}

Test(decide, semaphore)
{
    /* limit 3 on 3 of 5; slot 0 held by t1 on a majority (one without
     * expiry), slot 1 by t2 on 2, slot 2 by three different tokens. */
    const char *rec[] = {
        "3 30000 2 t1 30000 2 t2 20000 2 t3",
        "3 30000 2 t1 30000 2 t2 20000 2 t4",
        "3 -1 2 t1 -2 0  20000 2 t5",
        "2 -2 0  -2 0 ",
        "0",
    };
    expect_listed(LIST_SEMAPHORES, "pool", rec, 5, 0, 0, 0, "[{\"name\":\"pool\",\"limit\":3,\"holders\":1}]");
    /* t2 on a third master */
    rec[3] = "2 -2 0  30000 2 t2";
    expect_listed(LIST_SEMAPHORES, "pool", rec, 5, 0, 0, 0, "[{\"name\":\"pool\",\"limit\":3,\"holders\":2}]");
    /* no majority stores one limit */
    rec[2] = "2 -1 2 t1 -2 0 ";
    expect_not_listed(LIST_SEMAPHORES, rec, 5, 0, 0, "limits 3, 3, 2, 2, none");
}

Test(decide, semaphore_votes_and_expiry)
{
    const char *rec[] = {
        "2 30000 2 t1 -2 0 ",
        "2 30000 2 t1 -2 0 ",
        "2 1 2 t1 -2 0 ",
        NULL,
        NULL,
    };
    expect_listed(LIST_SEMAPHORES, "pool", rec, 5, 0, 0, 0,
                  "[{\"name\":\"pool\",\"limit\":2,\"holders\":0}]");   /* t1: 1 ms left on the 3rd */
    rec[2] = "2 30000 2 t1 -2 0 ";
    expect_listed(LIST_SEMAPHORES, "pool", rec, 5, 0, 0, 0, "[{\"name\":\"pool\",\"limit\":2,\"holders\":1}]");
    rec[2] = NULL;
    expect_not_listed(LIST_SEMAPHORES, rec, 5, 0, 0, "a limit on 2, 3 silent");
    rec[2] = "0";
    expect_not_listed(LIST_SEMAPHORES, rec, 5, 0, 0, "a limit on 2 of 5");
}

Test(decide, semaphore_met_before)
{
    const char *rec[] = {"2 -2 0  -2 0 ", "0", "2 -2 0  -2 0 ", "2 -2 0  -2 0 ", "0"};
    expect_not_listed(LIST_SEMAPHORES, rec, 5, 1, 0, "master 0 stores its limit");
    expect_listed(LIST_SEMAPHORES, "job", rec, 5, 1, 1u, 0, "[{\"name\":\"job\",\"limit\":2,\"holders\":0}]");
    expect_listed(LIST_SEMAPHORES, "job", rec, 5, 2, 1u, 0, "[{\"name\":\"job\",\"limit\":2,\"holders\":0}]");
    /* A master with no semaphore there met nothing. */
    rec[0] = "0";
    rec[4] = "2 -2 0  -2 0 ";
    expect_listed(LIST_SEMAPHORES, "job", rec, 5, 2, 0, 0, "[{\"name\":\"job\",\"limit\":2,\"holders\":0}]");
}

Test(decide, appends_to_items)
{
    char b[3][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 3, "t", ""),
        lock_rec(b[1], 128, 10000, 3, "t", ""),
        lock_rec(b[2], 128, 10000, 3, "t", ""),
    };
    list_copy copy[3];
    const list_copy *c[3];
    for (int i = 0; i < 3; i++) {
        const char *p = rec[i];
        cr_assert_eq(list_copy_next(LIST_LOCKS, &p, p + strlen(p), NO_EXPIRY_MS, &copy[i]), 0);
        c[i] = &copy[i];
    }
    cJSON *items = cJSON_CreateArray();
    cr_assert_not_null(items);
    cr_expect_eq(list_decide(LIST_LOCKS, "a", c, 3, 0, 0, 0, 0, DRIFT, items), 1);
    cr_expect_eq(list_decide(LIST_LOCKS, "b", c, 3, 0, 0, 0, 0, DRIFT, items), 1);
    cr_expect_eq(list_decide(LIST_LOCKS, "c", c, 3, 1, 0, 0, 0, DRIFT, items), 0);
    char *s = cJSON_PrintUnformatted(items);
    cr_expect_str_eq(s, "[{\"name\":\"a\",\"validity_ms\":9898,\"fence\":3},"
                        "{\"name\":\"b\",\"validity_ms\":9898,\"fence\":3}]");
    free(s);
    cJSON_Delete(items);
}

/* ---- masters that run but answered late --------------------------------- */

/* list_decide with late (bits: masters whose record is NULL, late); an
 * unsure decision must add nothing. */
static int decide_late(enum list_kind kind, const char *const *rec, int n, int scanned, unsigned late)
{
    static list_copy copy[CONF_MAX_MASTERS];
    const list_copy *c[CONF_MAX_MASTERS];
    for (int i = 0; i < n; i++) {
        c[i] = NULL;
        if (!rec[i])
            continue;
        const char *p = rec[i];
        cr_assert_eq(list_copy_next(kind, &p, p + strlen(p), NO_EXPIRY_MS, &copy[i]), 0, "record %d refused", i);
        c[i] = &copy[i];
    }
    cJSON *items = cJSON_CreateArray();
    cr_assert_not_null(items);
    int r = list_decide(kind, "job", c, n, scanned, 0, late, 0, DRIFT, items);
    cr_expect_eq(cJSON_GetArraySize(items), r == 1, "an entry exactly when listed");
    cJSON_Delete(items);
    return r;
}

Test(decide, late_master_could_make_the_majority)
{
    char b[5][128];
    const char *rec[] = {
        lock_rec(b[0], 128, 10000, 5, "t", ""),
        NULL,   /* late */
        lock_rec(b[2], 128, 10000, 5, "t", ""),
        "-2",
        "-2",
    };
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 2u), LIST_UNSURE, "held on 0 and 2, master 1 late");
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 0), 0, "held on 0 and 2, master 1 down");
    rec[2] = "-2";
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 2u), 0, "held on 0 only: one late master makes no majority");
    rec[3] = NULL;
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 2u | 8u), LIST_UNSURE, "held on 0, 1 and 3 late: two more "
                                                                            "copies would make 3 of 5");
    rec[2] = lock_rec(b[2], 128, 10000, 5, "t", "");
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 2u | 8u), LIST_UNSURE, "held on 0 and 2, 1 and 3 late");
    /* A majority that answered decides, late masters or not. */
    rec[1] = lock_rec(b[1], 128, 10000, 5, "t", "");
    rec[3] = "-2";
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 16u), 1, "held on 0, 1, 2; master 4 late");
    rec[4] = NULL;
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 16u), 1, "the same, master 4 late without a record");
}

Test(decide, late_master_scanned_before)
{
    char b[5][128];
    const char *rec[] = {
        NULL,   /* scanned before this master, and late now */
        "-2",
        lock_rec(b[2], 128, 10000, 5, "t", ""),
        lock_rec(b[3], 128, 10000, 5, "t", ""),
        lock_rec(b[4], 128, 10000, 5, "t", ""),
    };
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 2, 1u), LIST_UNSURE, "master 0 may have met it");
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 2, 0), 1, "master 0 down: listed (maybe again)");
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 0, 1u), 1, "master 0 not scanned before: a majority holds it");
    rec[1] = lock_rec(b[1], 128, 10000, 5, "t", "");
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 2, 1u), 0, "master 1 met it: not listed again, whatever 0 says");
    rec[1] = "-2";
    rec[3] = "-2";
    rec[4] = "-2";
    cr_expect_eq(decide_late(LIST_LOCKS, rec, 5, 2, 1u), 0, "held on 2 only: listed nowhere, whatever 0 says");
}

Test(decide, late_master_and_a_semaphore)
{
    const char *rec[] = {"2 30000 2 t1 -2 0 ", "2 30000 2 t1 -2 0 ", NULL, "0", "0"};
    cr_expect_eq(decide_late(LIST_SEMAPHORES, rec, 5, 0, 4u), LIST_UNSURE, "its limit on 2, master 2 late");
    cr_expect_eq(decide_late(LIST_SEMAPHORES, rec, 5, 0, 0), 0, "its limit on 2, master 2 down");
    rec[3] = "2 30000 2 t1 -2 0 ";
    cr_expect_eq(decide_late(LIST_SEMAPHORES, rec, 5, 0, 4u), 1, "its limit and t1 on 3");
    rec[3] = "2 -2 0  -2 0 ";
    cr_expect_eq(decide_late(LIST_SEMAPHORES, rec, 5, 0, 4u), LIST_UNSURE, "t1 on 2: holders 0 or 1");
    cr_expect_eq(decide_late(LIST_SEMAPHORES, rec, 5, 0, 0), 1, "t1 on 2, master 2 down: holders 0");
}
