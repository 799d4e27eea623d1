/* Unit tests of the rules both redlockd and the redlock client apply to
 * lock names, tokens and owners (src/base/rules.c), and of how a name is written
 * into a URL path. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"

static bool name_ok(const char *s)
{
    return rules_name_valid(s, s ? strlen(s) : 0);
}

Test(rules, names_are_utf8_text_of_up_to_200_bytes)
{
    const char *good[] = {"orders", "A-z_0.9:x", ".", "..", "reports/2026/11", "user@example.com",
                          "a b", "orders#42", "caf\xc3\xa9", "\xe6\x9d\xb1\xe4\xba\xac", "\xf0\x9f\x94\x92",
                          "a%2Fb", "a\"b\\c", "a||b", "\xef\xbf\xbf"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        cr_assert(name_ok(good[i]), "refused %s", good[i]);
    char longest[RULES_NAME_MAX];
    memset(longest, 'a', sizeof longest);
    cr_assert(rules_name_valid(longest, sizeof longest));
    /* 200 bytes that end in a whole two-byte character */
    longest[RULES_NAME_MAX - 2] = '\xc3';
    longest[RULES_NAME_MAX - 1] = '\xa9';
    cr_assert(rules_name_valid(longest, sizeof longest));
}

Test(rules, names_refuse_control_bytes_and_broken_utf8)
{
    char too_long[RULES_NAME_MAX + 1];
    memset(too_long, 'a', sizeof too_long);
    cr_assert_not(rules_name_valid(too_long, sizeof too_long));
    cr_assert_not(rules_name_valid("", 0));
    cr_assert_not(rules_name_valid(NULL, 0));
    const char *bad[] = {"a\tb", "a\nb", "a\rb", "a\x7f", "\x1f", "a" RULES_SEP "fence",
                         "caf\xc3",                /* cut short */
                         "\xc0\xaf",              /* overlong '/' */
                         "\xe0\x80\xaf",          /* overlong, three bytes */
                         "\xed\xa0\x80",          /* a surrogate */
                         "\xf4\x90\x80\x80",      /* past U+10FFFF */
                         "\xff", "\x80", "a\xc3(b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_not(name_ok(bad[i]), "accepted bad name %zu", i);
    cr_assert_not(rules_name_valid("a\0b", 3));
}

Test(rules, tokens_are_one_printable_word)
{
    cr_assert(rules_token_valid("gzPXJizHNqhJxfBVHnZZZg", 22));
    cr_assert(rules_token_valid("-starts-with-dash", 17));
    cr_assert_not(rules_token_valid("", 0));
    cr_assert_not(rules_token_valid("a b", 3));
    cr_assert_not(rules_token_valid("a\"b", 3));
    cr_assert_not(rules_token_valid("a\\b", 3));
    cr_assert_not(rules_token_valid("a\nb", 3));
    cr_assert_not(rules_token_valid("\xc3\xa9", 2));
    char big[RULES_TOKEN_MAX + 1];
    memset(big, 'a', sizeof big);
    cr_assert_not(rules_token_valid(big, sizeof big));
    cr_assert(rules_token_valid(big, RULES_TOKEN_MAX));
}

Test(rules, owners_are_text_with_spaces_quotes_and_utf8)
{
    cr_assert(rules_owner_valid("worker-7 on host a", 18));
    cr_assert(rules_owner_valid("~!\"\\", 4));
    cr_assert(rules_owner_valid("j\xc3\xb6rg", 5));
    char o[RULES_OWNER_MAX + 1];
    memset(o, 'x', sizeof o);
    cr_assert(rules_owner_valid(o, RULES_OWNER_MAX));
    cr_assert_not(rules_owner_valid(o, RULES_OWNER_MAX + 1));
    cr_assert_not(rules_owner_valid("", 0));
    cr_assert_not(rules_owner_valid("tab\there", 8));
    cr_assert_not(rules_owner_valid("new\nline", 8));
    cr_assert_not(rules_owner_valid("\x7f", 1));
    cr_assert_not(rules_owner_valid("\xc3", 1));
}

Test(rules, names_are_percent_encoded_in_a_path)
{
    char out[RULES_NAME_MAX * 3 + 1];
    cr_assert_eq(rules_name_path(".", out, sizeof out), 0);
    cr_assert_str_eq(out, "%2E");
    cr_assert_eq(rules_name_path("..", out, sizeof out), 0);
    cr_assert_str_eq(out, "%2E%2E");
    cr_assert_eq(rules_name_path("...", out, sizeof out), 0);
    cr_assert_str_eq(out, "...", "not a dot segment: sent as it is");
    cr_assert_eq(rules_name_path("a.b:c@d~e", out, sizeof out), 0);
    cr_assert_str_eq(out, "a.b:c@d~e");
    cr_assert_eq(rules_name_path("reports/2026/11", out, sizeof out), 0);
    cr_assert_str_eq(out, "reports%2F2026%2F11");
    cr_assert_eq(rules_name_path("a b%c?d#e+f", out, sizeof out), 0);
    cr_assert_str_eq(out, "a%20b%25c%3Fd%23e%2Bf");
    cr_assert_eq(rules_name_path("caf\xc3\xa9", out, sizeof out), 0);
    cr_assert_str_eq(out, "caf%C3%A9");
    cr_assert_eq(rules_name_path("a\tb", out, sizeof out), -1);
    char small[3];
    cr_assert_eq(rules_name_path("..", small, sizeof small), -1);
    cr_assert_eq(rules_name_path("a/", small, sizeof small), -1);
    /* every valid name of the longest kind fits three bytes per byte */
    char longest[RULES_NAME_MAX + 1];
    memset(longest, '/', RULES_NAME_MAX);
    longest[RULES_NAME_MAX] = '\0';
    cr_assert_eq(rules_name_path(longest, out, sizeof out), 0);
}

Test(rules, percent_decoding_runs_once_and_refuses_broken_escapes)
{
    char out[64];
    cr_assert_eq(rules_percent_decode("reports%2F2026", 14, out, sizeof out), 12);
    cr_assert_str_eq(out, "reports/2026");
    cr_assert_eq(rules_percent_decode("a%252F", 6, out, sizeof out), 4);
    cr_assert_str_eq(out, "a%2F", "decoded once");
    cr_assert_eq(rules_percent_decode("caf%c3%A9", 9, out, sizeof out), 5);
    cr_assert_str_eq(out, "caf\xc3\xa9");
    cr_assert_eq(rules_percent_decode("a%00b", 5, out, sizeof out), 3);
    cr_assert_str_eq(out, "a\x7f" "b", "a NUL cannot cut a name short");
    cr_assert_not(rules_name_valid(out, 3));
    cr_assert_eq(rules_percent_decode("a%2", 3, out, sizeof out), -1);
    cr_assert_eq(rules_percent_decode("a%zz", 4, out, sizeof out), -1);
    cr_assert_eq(rules_percent_decode("%", 1, out, sizeof out), -1);
    cr_assert_eq(rules_percent_decode("abcd", 4, out, 4), -1, "no room for the NUL");
    cr_assert_eq(rules_percent_decode("", 0, out, sizeof out), 0);
    /* a round trip of every byte a name may hold */
    char name[] = "a/b c%d\xc3\xa9.~";
    char path[64], back[64];
    cr_assert_eq(rules_name_path(name, path, sizeof path), 0);
    cr_assert_eq(rules_percent_decode(path, strlen(path), back, sizeof back), (long)strlen(name));
    cr_assert_str_eq(back, name);
}
