/* Unit tests of the rules both redlockd and the redlock client apply to
 * lock names, tokens and owners (src/rules.c), and of how a name is written
 * into a URL path. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"

static bool name_ok(const char *s)
{
    return rules_name_valid(s, s ? strlen(s) : 0);
}

Test(rules, names_take_the_allowed_alphabet)
{
    cr_assert(name_ok("orders"));
    cr_assert(name_ok("A-z_0.9:x"));
    cr_assert(name_ok("-starts-with-dash"));
    cr_assert(name_ok("."));
    cr_assert(name_ok(".."));
    char longest[RULES_NAME_MAX];
    memset(longest, 'a', sizeof longest);
    cr_assert(rules_name_valid(longest, sizeof longest));
}

Test(rules, names_refuse_everything_else)
{
    char too_long[RULES_NAME_MAX + 1];
    memset(too_long, 'a', sizeof too_long);
    cr_assert_not(rules_name_valid(too_long, sizeof too_long));
    cr_assert_not(rules_name_valid("", 0));
    cr_assert_not(rules_name_valid(NULL, 0));
    const char *bad[] = {"a/b", "a b", "a%2Fb", "caf\xc3\xa9", "a\tb", "a\x7f", "a#b", "a?b",
                         "a+b", "a*b", "ä"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_not(name_ok(bad[i]), "accepted %s", bad[i]);
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

Test(rules, owners_are_printable_ascii_with_spaces)
{
    cr_assert(rules_owner_valid("worker-7 on host a", 18));
    cr_assert(rules_owner_valid("~!\"\\", 4));
    char o[RULES_OWNER_MAX + 1];
    memset(o, 'x', sizeof o);
    cr_assert(rules_owner_valid(o, RULES_OWNER_MAX));
    cr_assert_not(rules_owner_valid(o, RULES_OWNER_MAX + 1));
    cr_assert_not(rules_owner_valid("", 0));
    cr_assert_not(rules_owner_valid("tab\there", 8));
    cr_assert_not(rules_owner_valid("new\nline", 8));
    cr_assert_not(rules_owner_valid("\x7f", 1));
}

Test(rules, dot_names_are_percent_encoded_in_a_path)
{
    char out[RULES_NAME_MAX * 3 + 1];
    cr_assert_eq(rules_name_path(".", out, sizeof out), 0);
    cr_assert_str_eq(out, "%2E");
    cr_assert_eq(rules_name_path("..", out, sizeof out), 0);
    cr_assert_str_eq(out, "%2E%2E");
    cr_assert_eq(rules_name_path("...", out, sizeof out), 0);
    cr_assert_str_eq(out, "...", "not a dot segment: sent as it is");
    cr_assert_eq(rules_name_path("a.b:c", out, sizeof out), 0);
    cr_assert_str_eq(out, "a.b:c");
    cr_assert_eq(rules_name_path("a/b", out, sizeof out), -1);
    char small[3];
    cr_assert_eq(rules_name_path("..", small, sizeof small), -1);
}
