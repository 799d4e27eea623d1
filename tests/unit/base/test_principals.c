/* Unit tests of the principals file (base/principals.c) and the audit
 * log's lines (base/audit.c). */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "base/audit.h"
#include "base/principals.h"

/* sha256:<hex> of token. */
static void digest_of(const char *token, char out[72])
{
    unsigned char d[32];
    unsigned int len = 32;
    EVP_Digest(token, strlen(token), d, &len, EVP_sha256(), NULL);
    strcpy(out, "sha256:");
    for (int i = 0; i < 32; i++)
        sprintf(out + 7 + 2 * i, "%02x", d[i]);
}

static principals *parse_ok(const char *text)
{
    char err[300] = "";
    principals *ps = principals_parse(text, err, sizeof err);
    cr_assert(ps, "%s", err);
    return ps;
}

static void parse_bad(const char *text, const char *want)
{
    char err[300] = "";
    principals *ps = principals_parse(text, err, sizeof err);
    cr_assert_null(ps, "accepted: %s", text);
    cr_assert(strstr(err, want), "error %s, wanted %s", err, want);
}

Test(principals, rights_prefixes_and_credentials)
{
    char billing[72], dash[72], file[600];
    digest_of("billing-secret", billing);
    digest_of("dash-secret", dash);
    snprintf(file, sizeof file,
             "# principal rights prefixes credential\n"
             "billing   lock,read   billing/,reports/   %s\n"
             "\n"
             "dashboard read * %s   # comment\n"
             "ops read,lock,admin * cert\n", billing, dash);
    principals *ps = parse_ok(file);
    cr_assert_eq(ps->n, 3);
    const principal *b = principals_by_token(ps, "billing-secret");
    cr_assert(b && !strcmp(b->name, "billing"));
    cr_assert(principal_may(b, RIGHT_LOCK, "billing/run"));
    cr_assert(principal_may(b, RIGHT_READ, "reports/x"));
    cr_assert_not(principal_may(b, RIGHT_LOCK, "payroll"), "another team's name");
    cr_assert_not(principal_may(b, RIGHT_LOCK, "billin"), "a prefix of the prefix");
    cr_assert_not(principal_may(b, RIGHT_ADMIN, "billing/run"), "no admin right");
    cr_assert(principal_may(b, RIGHT_NONE, "payroll"), "an open route");
    const principal *d = principals_by_token(ps, "dash-secret");
    cr_assert(d && principal_may(d, RIGHT_READ, "anything") && !principal_may(d, RIGHT_LOCK, "anything"));
    cr_assert_null(principals_by_token(ps, "billing-secret "), "another token");
    cr_assert_null(principals_by_token(ps, "ops"), "a cert principal has no token");
    const principal *o = principals_by_cert(ps, "ops");
    cr_assert(o && principal_may(o, RIGHT_ADMIN, "x"));
    cr_assert_null(principals_by_cert(ps, "billing"), "a token principal is no certificate's");
    principals_free(ps);
}

Test(principals, errors_name_their_line)
{
    parse_bad("", "no principal");
    parse_bad("a read * cert\nb read\n", "line 2: a principal is four fields");
    parse_bad("a write * cert\n", "line 1: a: rights");
    parse_bad("a read , cert\n", "no prefix");
    parse_bad("a read x* cert\n", "a prefix");
    parse_bad("a read * sha256:12\n", "credential");
    parse_bad("a read * token\n", "credential");
    parse_bad("a/b read * cert\n", "principal name");
    parse_bad("a read * cert\na lock * cert\n", "line 2: principal a is named twice");
}

Test(principals, implicit_tokens)
{
    cr_assert_null(principals_implicit(NULL, NULL));
    principals *ps = principals_implicit("user-tok", "admin-tok");
    const principal *u = principals_by_token(ps, "user-tok"), *a = principals_by_token(ps, "admin-tok");
    cr_assert(u && principal_may(u, RIGHT_LOCK, "x") && principal_may(u, RIGHT_READ, "x"));
    cr_assert_not(principal_may(u, RIGHT_ADMIN, "x"));
    cr_assert(a && principal_may(a, RIGHT_ADMIN, "x") && !principal_may(a, RIGHT_LOCK, "x"));
    principals_free(ps);
}

Test(audit, a_line_is_json_and_escapes)
{
    char line[600];
    audit_event ev = {.event = "grant", .principal = "billing", .client = "127.0.0.1",
                      .route = "POST /locks/{name}", .name = "a\"b\\c\x01", .outcome = "201", .fence = 42};
    size_t n = audit_format(&ev, 1795000000123LL, line, sizeof line);
    cr_assert_gt(n, 0);
    cr_assert_str_eq(line, "{\"time\":\"2026-11-18T11:06:40.123Z\",\"event\":\"grant\",\"principal\":\"billing\","
                           "\"client\":\"127.0.0.1\",\"route\":\"POST /locks/{name}\","
                           "\"name\":\"a\\\"b\\\\c\\u0001\",\"outcome\":\"201\",\"fence\":42}\n");
    audit_event anon = {.event = "refused", .client = "unix", .route = "GET /locks", .outcome = "401"};
    audit_format(&anon, 0, line, sizeof line);
    cr_assert(strstr(line, "\"principal\":null") && !strstr(line, "\"name\"") && !strstr(line, "fence"), "%s", line);
    cr_assert_eq(audit_format(&ev, 0, line, 40), 0, "a line that does not fit is not cut");
}
