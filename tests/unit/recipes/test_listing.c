/* Unit tests of the pure parts of a listing (src/recipes/listing_page.c): the page
 * cursor, the walk from master to master, the SCAN pattern and the two
 * scripts' answers (script_list_scan, script_list_check). Which names a
 * page lists, with what JSON: test_listing_decide.c. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "recipes/recipes.h"

#define NO_EXPIRY_MS 86400000LL   /* what a key without expiry counts as (the --max-ttl) */
#define DRIFT 0.01

/* ---- the cursor ---------------------------------------------------------- */

static void expect_start(const list_pos *pos)
{
    cr_expect_eq(pos->master, 0);
    cr_expect_str_eq(pos->cursor, "0");
    cr_expect_str_eq(pos->after, "");
    cr_expect_eq(pos->count, 0);
    cr_expect_eq(pos->skipped, 0u);
}

/* parse s for n masters, then format it again: what a client is handed back. */
static void round_trip(const char *s, int n)
{
    list_pos pos;
    char out[LIST_CURSOR_MAX];
    cr_assert_eq(list_cursor_parse(s, n, &pos), 0, "refused %s", s);
    list_cursor_format(&pos, out, sizeof out);
    cr_expect_str_eq(out, s);
}

Test(cursor, null_and_empty_are_the_start)
{
    list_pos pos;
    char out[LIST_CURSOR_MAX];
    memset(&pos, 0x5a, sizeof pos);
    cr_assert_eq(list_cursor_parse(NULL, 5, &pos), 0);
    expect_start(&pos);
    memset(&pos, 0x5a, sizeof pos);
    cr_assert_eq(list_cursor_parse("", 5, &pos), 0);
    expect_start(&pos);
    list_cursor_format(&pos, out, sizeof out);
    cr_expect_str_eq(out, "0.0.0", "the start, written out");
    cr_assert_eq(list_cursor_parse("0.0.0", 5, &pos), 0);
    expect_start(&pos);
}

Test(cursor, scan_cursor_only)
{
    list_pos pos;
    cr_assert_eq(list_cursor_parse("0.0.123", 5, &pos), 0);
    cr_expect_eq(pos.master, 0);
    cr_expect_eq(pos.skipped, 0u);
    cr_expect_str_eq(pos.cursor, "123");
    cr_expect_str_eq(pos.after, "");
    cr_expect_eq(pos.count, 0);
    round_trip("0.0.123", 5);
    round_trip("2.0.7", 5);
    round_trip("0.0.18446744073709551615", 5);   /* SCAN's largest cursor, 2^64 - 1 */
}

Test(cursor, inside_a_batch)
{
    list_pos pos;
    cr_assert_eq(list_cursor_parse("1.1.5.3.6a6f62", 5, &pos), 0);
    cr_expect_eq(pos.master, 1);
    cr_expect_eq(pos.skipped, 1u, "master 0 was passed without a scan");
    cr_expect_str_eq(pos.cursor, "5");
    cr_expect_eq(pos.count, 3);
    cr_expect_str_eq(pos.after, "job");
    round_trip("1.1.5.3.6a6f62", 5);
    round_trip("0.0.0.100.6a6f62", 5);      /* the largest COUNT a batch is read with */
    round_trip("0.0.0.1.c3a9", 5);          /* "é": UTF-8 is a name's */
    round_trip("4.3.9.2.612062", 5);        /* "a b": 2 scanned, 2 passed */
}

Test(cursor, after_of_a_whole_name_round_trips)
{
    /* The longest cursor: 15 masters, the last 14 passed, the largest SCAN
     * cursor, a 200-byte name. */
    char s[LIST_CURSOR_MAX], name[RULES_NAME_MAX + 1];
    memset(name, 'z', RULES_NAME_MAX);
    name[RULES_NAME_MAX] = '\0';
    int n = snprintf(s, sizeof s, "14.16383.18446744073709551615.100.");
    for (int i = 0; i < RULES_NAME_MAX; i++)
        n += snprintf(s + n, sizeof s - (size_t)n, "7a");
    cr_assert_lt((size_t)n, sizeof s);
    list_pos pos;
    cr_assert_eq(list_cursor_parse(s, 15, &pos), 0);
    cr_expect_str_eq(pos.after, name);
    cr_expect_eq(pos.skipped, 16383u);
    round_trip(s, 15);
    /* 201 bytes: no name is that long */
    strcpy(s + n, "7a");
    cr_expect_eq(list_cursor_parse(s, 15, &pos), -1);
}

Test(cursor, over_is_empty)
{
    list_pos pos = {.master = -1, .cursor = "0"};
    char out[LIST_CURSOR_MAX];
    strcpy(out, "junk");
    list_cursor_format(&pos, out, sizeof out);
    cr_expect_str_eq(out, "");
}

Test(cursor, refusals)
{
    const char *bad[] = {
        /* not digits, or parts missing or empty */
        "x", "0", "0.0", "0.0.", ".0.0", "0..0", "a.0.0", "0.a.0", "0.0.1a", "0.0.-1", "0.0.+1", "-1.0.0",
        "0.0. 1", " 0.0.0", "0.0.0 ", "0.0.0.", "0.0.0.3", "0.0.0.3.", "0.0.0..6a", "0.0.0.x.6a",
        "0.0.0.3.6a.6b", "123.0.0", "0.123456.0",
        /* skipped: only masters below this one */
        "0.1.0", "1.2.0", "1.3.0", "2.4.0", "3.8.0",
        /* a master at or beyond nmasters (5) */
        "5.0.0", "6.31.0", "10.0.0",
        /* past the walk's bound: 3 masters of 5 scanned to the end already */
        "3.0.0", "4.1.0", "4.0.0",
        /* hex of after: odd length, uppercase, not hex, a NUL */
        "0.0.0.3.6", "0.0.0.3.6a6", "0.0.0.3.6A", "0.0.0.3.6g", "0.0.0.3.00", "0.0.0.3.6100", "0.0.0.3.0061",
        /* the batch's COUNT: 1 to LIST_LIMIT_MAX */
        "0.0.0.0.6a", "0.0.0.00.6a", "0.0.0.1001.6a", "0.0.0.99999.6a",
        /* SCAN's cursor: at most 20 digits, below 2^64 */
        "0.0.123456789012345678901", "0.0.18446744073709551616", "0.0.99999999999999999999",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        list_pos pos;
        cr_expect_eq(list_cursor_parse(bad[i], 5, &pos), -1, "accepted %s", bad[i]);
    }
}

/* after is the last key a page took past the prefix: a key another client
 * wrote under the same prefix may sort there, so any bytes but NUL are
 * taken (control bytes, bytes that are not UTF-8). */
Test(cursor, after_any_bytes_but_nul)
{
    round_trip("0.0.0.3.1f", 5);
    round_trip("0.0.0.3.617f62", 5);
    round_trip("0.0.0.3.c3", 5);
    round_trip("0.0.0.3.80", 5);
    round_trip("0.0.0.3.eda080", 5);
    round_trip("0.0.0.3.ff0a", 5);
    list_pos pos;
    cr_assert_eq(list_cursor_parse("0.0.0.3.ff0a", 5, &pos), 0);
    cr_expect_str_eq(pos.after, "\xff\n");
}

Test(cursor, the_walks_bound_follows_nmasters)
{
    list_pos pos;
    cr_expect_eq(list_cursor_parse("2.0.0", 5, &pos), 0, "2 of 3 scanned");
    cr_expect_eq(list_cursor_parse("4.3.0", 5, &pos), 0, "2 scanned, 2 passed");
    cr_expect_eq(list_cursor_parse("1.0.0", 3, &pos), 0);
    cr_expect_eq(list_cursor_parse("2.0.0", 3, &pos), -1, "2 of 3 masters scanned: the walk is over");
    cr_expect_eq(list_cursor_parse("2.1.0", 3, &pos), 0);
    cr_expect_eq(list_cursor_parse("0.0.0", 1, &pos), 0);
    cr_expect_eq(list_cursor_parse("1.0.0", 1, &pos), -1);
    cr_expect_eq(list_cursor_parse("1.1.0", 1, &pos), -1, "beyond the one master");
    cr_expect_eq(list_cursor_parse("4.0.0", 5, &pos), -1);
}

/* A master number of 64 or more is refused like any other beyond nmasters
 * (it is a two-digit field, so a client may send up to 99). */
Test(cursor, master_of_64_or_more)
{
    const char *bad[] = {"62.0.0", "63.0.0", "64.0.0", "65.0.0", "99.0.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        list_pos pos;
        cr_expect_eq(list_cursor_parse(bad[i], 5, &pos), -1, "accepted %s", bad[i]);
    }
}

/* ---- the walk ------------------------------------------------------------ */

Test(walk, masters_scanned_to_the_end)
{
    cr_expect_eq(list_scanned(1), 1);
    cr_expect_eq(list_scanned(3), 2);
    cr_expect_eq(list_scanned(4), 2);
    cr_expect_eq(list_scanned(5), 3);
    cr_expect_eq(list_scanned(7), 4);
}

Test(walk, ends_once_enough_were_scanned)
{
    list_pos pos;
    cr_assert_eq(list_cursor_parse(NULL, 5, &pos), 0);
    strcpy(pos.cursor, "77");
    strcpy(pos.after, "job");
    pos.count = 3;
    cr_expect(list_next_master(&pos, 5, false));
    cr_expect_eq(pos.master, 1);
    cr_expect_str_eq(pos.cursor, "0", "a master's scan starts at 0");
    cr_expect_str_eq(pos.after, "");
    cr_expect_eq(pos.count, 0);
    cr_expect_eq(pos.skipped, 0u);
    cr_expect(list_next_master(&pos, 5, false));
    cr_expect_eq(pos.master, 2);
    cr_expect(list_next_master(&pos, 5, false), "3 of 5 scanned: the walk is over, and complete");
    cr_expect_eq(pos.master, -1);
    char out[LIST_CURSOR_MAX];
    list_cursor_format(&pos, out, sizeof out);
    cr_expect_str_eq(out, "");
}

Test(walk, skipping_sets_the_bit_and_scans_one_more)
{
    list_pos pos;
    cr_assert_eq(list_cursor_parse(NULL, 5, &pos), 0);
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect_eq(pos.master, 1);
    cr_expect_eq(pos.skipped, 1u);
    cr_expect(list_next_master(&pos, 5, false));
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect_eq(pos.master, 3);
    cr_expect_eq(pos.skipped, 5u, "masters 0 and 2 passed");
    char out[LIST_CURSOR_MAX];
    list_cursor_format(&pos, out, sizeof out);
    cr_expect_str_eq(out, "3.5.0");
    cr_expect(list_next_master(&pos, 5, false));
    cr_expect_eq(pos.master, 4, "two scanned so far: one more");
    cr_expect(list_next_master(&pos, 5, false), "masters 1, 3 and 4 scanned");
    cr_expect_eq(pos.master, -1);
}

Test(walk, two_skipped_of_five_still_completes)
{
    list_pos pos;
    cr_assert_eq(list_cursor_parse(NULL, 5, &pos), 0);
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect(list_next_master(&pos, 5, false));
    cr_expect(list_next_master(&pos, 5, false));
    cr_expect_eq(pos.master, 4);
    cr_expect(list_next_master(&pos, 5, false), "masters 2, 3 and 4: enough, though the last");
    cr_expect_eq(pos.master, -1);
}

Test(walk, runs_out_of_masters)
{
    /* 5 masters: 0, 1 and 2 passed, 3 and 4 scanned: 2 of the 3 needed. */
    list_pos pos;
    cr_assert_eq(list_cursor_parse(NULL, 5, &pos), 0);
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect(list_next_master(&pos, 5, true));
    cr_expect_eq(pos.master, 3);
    cr_expect_eq(pos.skipped, 7u);
    cr_expect(list_next_master(&pos, 5, false), "master 4 is left");
    cr_expect_eq(pos.master, 4);
    cr_expect_not(list_next_master(&pos, 5, false), "too few masters answered");
    cr_expect_eq(pos.master, -1);

    /* Passing the last one of three, with one scanned. */
    cr_assert_eq(list_cursor_parse("2.1.0", 3, &pos), 0);
    cr_expect_not(list_next_master(&pos, 3, true));
    cr_expect_eq(pos.master, -1);

    /* One master, down. */
    cr_assert_eq(list_cursor_parse(NULL, 1, &pos), 0);
    cr_expect_not(list_next_master(&pos, 1, true));
    cr_assert_eq(list_cursor_parse(NULL, 1, &pos), 0);
    cr_expect(list_next_master(&pos, 1, false));
    cr_expect_eq(pos.master, -1);
}

Test(walk, every_cursor_it_gives_is_accepted)
{
    /* Each position the walk reaches, written out and read back. */
    for (unsigned pattern = 0; pattern < 32; pattern++) {
        list_pos pos;
        cr_assert_eq(list_cursor_parse(NULL, 5, &pos), 0);
        for (int step = 0; pos.master >= 0; step++) {
            char out[LIST_CURSOR_MAX];
            list_pos back;
            list_cursor_format(&pos, out, sizeof out);
            cr_expect_eq(list_cursor_parse(out, 5, &back), 0, "refused its own %s", out);
            cr_expect_eq(back.master, pos.master);
            cr_expect_eq(back.skipped, pos.skipped);
            list_next_master(&pos, 5, pattern >> step & 1u);
        }
    }
}

/* ---- the SCAN pattern ---------------------------------------------------- */

Test(pattern, plain)
{
    char out[256];
    cr_assert_eq(list_pattern(LIST_LOCKS, "rl:", "", out, sizeof out), 0);
    cr_expect_str_eq(out, "rl:*");
    cr_assert_eq(list_pattern(LIST_LOCKS, "", "", out, sizeof out), 0);
    cr_expect_str_eq(out, "*");
    cr_assert_eq(list_pattern(LIST_LOCKS, "rl:", "job-", out, sizeof out), 0);
    cr_expect_str_eq(out, "rl:job-*");
}

Test(pattern, kinds_suffixes)
{
    char out[256];
    cr_assert_eq(list_pattern(LIST_ELECTIONS, "rl:", "pg", out, sizeof out), 0);
    cr_expect_str_eq(out, "rl:pg*\x1f#election");
    cr_assert_eq(list_pattern(LIST_SEMAPHORES, "rl:", "", out, sizeof out), 0);
    cr_expect_str_eq(out, "rl:*\x1f#limit");
}

Test(pattern, glob_characters_escaped)
{
    char out[256];
    cr_assert_eq(list_pattern(LIST_LOCKS, "rl:", "a*b?c[d]e\\f", out, sizeof out), 0);
    cr_expect_str_eq(out, "rl:a\\*b\\?c\\[d\\]e\\\\f*");
    cr_assert_eq(list_pattern(LIST_SEMAPHORES, "{t}[1]*?\\", "x^-!", out, sizeof out), 0);
    cr_expect_str_eq(out, "{t}\\[1\\]\\*\\?\\\\x^-!*\x1f#limit", "in the key prefix too");
}

Test(pattern, does_not_fit)
{
    char out[64];
    memset(out, 'X', sizeof out);
    cr_expect_eq(list_pattern(LIST_LOCKS, "", "ab", out, 4), 0);
    cr_expect_str_eq(out, "ab*");
    cr_expect_eq(list_pattern(LIST_LOCKS, "", "ab", out, 3), -1);
    cr_expect_eq(list_pattern(LIST_LOCKS, "a", "b", out, 3), -1);
    cr_expect_eq(list_pattern(LIST_LOCKS, "", "a*", out, 5), 0);
    cr_expect_str_eq(out, "a\\**");
    memset(out, 'X', sizeof out);
    cr_expect_eq(list_pattern(LIST_LOCKS, "", "a*", out, 4), -1);
    cr_expect_eq(out[4], 'X', "nothing written past cap");
    /* "pg*" and the 10 bytes of "\x1f#election", and the NUL */
    cr_expect_eq(list_pattern(LIST_ELECTIONS, "", "pg", out, 14), 0);
    cr_expect_str_eq(out, "pg*\x1f#election");
    cr_expect_eq(list_pattern(LIST_ELECTIONS, "", "pg", out, 13), -1);
    cr_expect_eq(list_pattern(LIST_LOCKS, "", "", out, 1), -1);
    cr_expect_eq(list_pattern(LIST_LOCKS, "", "", out, 2), 0);
    cr_expect_str_eq(out, "*");
}

/* ---- script_list_scan's answer -------------------------------------------- */

/* The answer as the listing keeps it: len bytes and a NUL. */
static int scan_parse(const char *answer, list_pos *next, char **names, int max, char **blob)
{
    size_t len = strlen(answer);
    *blob = malloc(len + 1);
    cr_assert_not_null(*blob);
    memcpy(*blob, answer, len + 1);
    memset(next, 0, sizeof *next);
    next->master = 2;
    next->skipped = 1;
    return list_scan_parse(*blob, len, next, names, max);
}

Test(scan_answer, names_and_cursor)
{
    list_pos next;
    char *names[8], *blob;
    cr_assert_eq(scan_parse("17\n\n0\njob\nmail", &next, names, 8, &blob), 2);
    cr_expect_str_eq(next.cursor, "17");
    cr_expect_str_eq(next.after, "");
    cr_expect_eq(next.count, 0);
    cr_expect_str_eq(names[0], "job");
    cr_expect_str_eq(names[1], "mail");
    cr_expect_eq(next.master, 2, "its master unchanged");
    cr_expect_eq(next.skipped, 1u);
    free(blob);

    cr_assert_eq(scan_parse("0\n\n0\nx y\n", &next, names, 8, &blob), 1, "a last newline");
    cr_expect_str_eq(names[0], "x y");
    cr_expect_str_eq(next.cursor, "0");
    free(blob);

    cr_assert_eq(scan_parse("18446744073709551615\n\n0\na", &next, names, 1, &blob), 1, "exactly max");
    cr_expect_str_eq(next.cursor, "18446744073709551615");
    free(blob);
}

Test(scan_answer, zero_names)
{
    list_pos next;
    char *names[8], *blob;
    cr_assert_eq(scan_parse("0\n\n0\n", &next, names, 8, &blob), 0);
    cr_expect_str_eq(next.cursor, "0");
    free(blob);
    cr_assert_eq(scan_parse("4096\n\n0\n", &next, names, 0, &blob), 0);
    cr_expect_str_eq(next.cursor, "4096");
    free(blob);
}

Test(scan_answer, after_set)
{
    list_pos next;
    char *names[8], *blob;
    cr_assert_eq(scan_parse("5\nmail\n3\njob\nmail", &next, names, 8, &blob), 2);
    cr_expect_str_eq(next.cursor, "5");
    cr_expect_str_eq(next.after, "mail");
    cr_expect_eq(next.count, 3);
    cr_expect_str_eq(names[0], "job");
    cr_expect_str_eq(names[1], "mail");
    free(blob);
    cr_assert_eq(scan_parse("5\nmail\n1000\nmail", &next, names, 8, &blob), 1);
    cr_expect_eq(next.count, 1000);
    free(blob);
}

Test(scan_answer, keys_no_api_can_name_are_dropped)
{
    /* Another client's keys under the same prefix: a control byte, not
     * UTF-8, longer than a name. */
    char answer[3 * RULES_NAME_MAX];
    int n = snprintf(answer, sizeof answer, "0\n\n0\na\nb\x01" "c\nd\xff\n");
    memset(answer + n, 'x', RULES_NAME_MAX + 1);
    strcpy(answer + n + RULES_NAME_MAX + 1, "\ne f\n\xc3\xa9");
    list_pos next;
    char *names[8], *blob;
    cr_assert_eq(scan_parse(answer, &next, names, 8, &blob), 3);
    cr_expect_str_eq(names[0], "a");
    cr_expect_str_eq(names[1], "e f");
    cr_expect_str_eq(names[2], "\xc3\xa9");
    free(blob);
}

Test(scan_answer, long_after_is_cut_to_a_name)
{
    /* The last key a page took, 201 bytes: resuming after its first 200
     * at worst reads a few names again. */
    char answer[RULES_NAME_MAX + 16], after[RULES_NAME_MAX + 1];
    memset(answer, 'a', sizeof answer);
    memcpy(answer, "0\n", 2);
    strcpy(answer + 2 + RULES_NAME_MAX + 1, "\n3\na");
    memset(after, 'a', RULES_NAME_MAX);
    after[RULES_NAME_MAX] = '\0';
    list_pos next;
    char *names[8], *blob;
    cr_assert_eq(scan_parse(answer, &next, names, 8, &blob), 1);
    cr_expect_str_eq(next.after, after);
    cr_expect_eq(next.count, 3);
    free(blob);
    /* an after holding a NUL is no key's */
    static const char nul[] = "0\na\0b\n3\na";
    blob = malloc(sizeof nul);
    cr_assert_not_null(blob);
    memcpy(blob, nul, sizeof nul);
    cr_expect_eq(list_scan_parse(blob, sizeof nul - 1, &next, names, 8), -1);
    free(blob);
}

Test(scan_answer, malformed)
{
    const char *bad[] = {
        "", "0", "0\n", "0\n\n", "0\n\n0", "\n\n0\n", "x\n\n0\n", "1x\n\n0\n", "-1\n\n0\n", " 1\n\n0\n",
        "123456789012345678901\n\n0\n", "0\n\nx\n", "0\n\n\n", "0\n\n1001\n", "0\n\n-1\n", "0\n\n12345\n",
        "0\njob\n0\njob",                       /* after without a COUNT */
        "0\n\n0\na\n\nb", "0\n\n0\n\n", "0\n\n0\n\na", "0\n\n0\na\n\n",   /* an empty name line */
        "0\n\n0\na\nb\nc",                      /* 3 names, max 2 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        list_pos next;
        char *names[2], *blob;
        cr_expect_eq(scan_parse(bad[i], &next, names, 2, &blob), -1, "accepted \"%s\"", bad[i]);
        free(blob);
    }
}

/* ---- script_list_check's answer ------------------------------------------ */

static void expect_value(const quorum_copy *q, const char *value, const char *owner, long long pttl,
                         long long counter)
{
    cr_assert_not_null(q->value);
    cr_expect_eq(q->vlen, strlen(value));
    cr_expect_eq(memcmp(q->value, value, q->vlen), 0);
    cr_expect_eq(q->olen, strlen(owner));
    cr_expect_eq(memcmp(q->owner, owner, q->olen), 0);
    cr_expect_eq(q->pttl, pttl);
    cr_expect_eq(q->counter, counter);
}

Test(check_answer, lock_records)
{
    const char *a = "-2\n30000 7 3 5 abcalice\n-1 172222222222222222 5 0 ab\ncd\n-2";
    const char *p = a, *end = a + strlen(a);
    list_copy c;
    cr_assert_eq(list_copy_next(LIST_LOCKS, &p, end, NO_EXPIRY_MS, &c), 0);
    cr_expect_null(c.lock.value, "-2: nothing held");
    cr_expect_eq(p, a + 3);
    cr_assert_eq(list_copy_next(LIST_LOCKS, &p, end, NO_EXPIRY_MS, &c), 0);
    expect_value(&c.lock, "abc", "alice", 30000, 7);
    cr_assert_eq(list_copy_next(LIST_LOCKS, &p, end, NO_EXPIRY_MS, &c), 0);
    expect_value(&c.lock, "ab\ncd", "", NO_EXPIRY_MS, 172222222222222222LL);   /* lengths, not lines */
    cr_assert_eq(list_copy_next(LIST_LOCKS, &p, end, NO_EXPIRY_MS, &c), 0);
    cr_expect_null(c.lock.value);
    cr_expect_eq(p, end);
}

Test(check_answer, lock_record_last_without_newline)
{
    const char *a = "1500 0 1 3 xbob";
    const char *p = a, *end = a + strlen(a);
    list_copy c;
    cr_assert_eq(list_copy_next(LIST_LOCKS, &p, end, NO_EXPIRY_MS, &c), 0);
    expect_value(&c.lock, "x", "bob", 1500, 0);
    cr_expect_eq(p, end);
    /* The same kind of record serves elections. */
    p = a;
    cr_assert_eq(list_copy_next(LIST_ELECTIONS, &p, end, NO_EXPIRY_MS, &c), 0);
    expect_value(&c.lock, "x", "bob", 1500, 0);
}

Test(check_answer, lock_records_malformed)
{
    const char *bad[] = {
        "", "\n", "-2x", "-2 ", "-3", "x 7 3 0 abc", "30000 7 3 0", "30000 7 3 0 ab", "30000 7 9 0 abc",
        "30000 7 3 2 abc", "30000 7 3 0 abcd", "30000 7 3 0 abc ", "30000 7 0 0 ", "30000 7 -1 0 a",
        "30000 7 3 -1 abc", "30000  7 3 0 abc", "30000 7 3 0  abc", "- 7 3 0 abc", "30000 x 3 0 abc",
        "1234567890123456789 7 3 0 abc",   /* over 18 digits */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = bad[i], *end = p + strlen(p);
        list_copy c;
        cr_expect_eq(list_copy_next(LIST_LOCKS, &p, end, NO_EXPIRY_MS, &c), -1, "accepted \"%s\"", bad[i]);
    }
}

Test(check_answer, semaphore_records)
{
    /* script_list_check: "<limit>" then " <pttl> <len> <value>" per slot;
     * a free slot "-2 0 " and its empty value. */
    const char *a = "3 -2 0  55 2 ab -1 2 cd\n0\n2 -2 0  -2 0 ";
    const char *p = a, *end = a + strlen(a);
    list_copy c;
    cr_assert_eq(list_copy_next(LIST_SEMAPHORES, &p, end, NO_EXPIRY_MS, &c), 0);
    cr_expect_eq(c.limit, 3);
    cr_expect_eq(c.nslots, 3);
    cr_expect_null(c.slots[0].value, "free");
    cr_assert_not_null(c.slots[1].value);
    cr_expect_eq(c.slots[1].vlen, 2);
    cr_expect_eq(memcmp(c.slots[1].value, "ab", 2), 0);
    cr_expect_eq(c.slots[1].pttl, 55);
    cr_expect_eq(c.slots[1].olen, 0);
    cr_assert_not_null(c.slots[2].value);
    cr_expect_eq(memcmp(c.slots[2].value, "cd", 2), 0);
    cr_expect_eq(c.slots[2].pttl, NO_EXPIRY_MS);
    cr_assert_eq(list_copy_next(LIST_SEMAPHORES, &p, end, NO_EXPIRY_MS, &c), 0);
    cr_expect_eq(c.limit, 0, "no semaphore there");
    cr_expect_eq(c.nslots, 0);
    cr_assert_eq(list_copy_next(LIST_SEMAPHORES, &p, end, NO_EXPIRY_MS, &c), 0);
    cr_expect_eq(c.limit, 2);
    cr_expect_null(c.slots[0].value);
    cr_expect_null(c.slots[1].value);
    cr_expect_eq(p, end);
}

Test(check_answer, semaphore_of_64_slots)
{
    char a[64 * 12 + 8];
    int n = snprintf(a, sizeof a, "64");
    for (int i = 0; i < 64; i++)
        n += snprintf(a + n, sizeof a - (size_t)n, " 100 2 %02d", i);
    cr_assert_lt((size_t)n, sizeof a);
    const char *p = a;
    list_copy c;
    cr_assert_eq(list_copy_next(LIST_SEMAPHORES, &p, a + n, NO_EXPIRY_MS, &c), 0);
    cr_expect_eq(c.nslots, 64);
    cr_expect_eq(memcmp(c.slots[63].value, "63", 2), 0);
}

Test(check_answer, semaphore_records_malformed)
{
    const char *bad[] = {
        "", "x", "-1", "65", "100", "1000", "1", "1 ", "1 55 2 a", "1 55 9 ab", "1 55 -1 ab", "1 55 2 abX",
        "1 55 2 ab ", "2 55 2 ab", "3 -2 0  55 2 ab", "1 x 2 ab", "1  55 2 ab", "0 ", "0x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = bad[i], *end = p + strlen(p);
        list_copy c;
        cr_expect_eq(list_copy_next(LIST_SEMAPHORES, &p, end, NO_EXPIRY_MS, &c), -1, "accepted \"%s\"",
                     bad[i]);
    }
}
