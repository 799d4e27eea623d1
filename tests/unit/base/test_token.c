/* Unit tests of token encoding, generation, and SHA-1. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/base.h"
#include "masters/sha1.h"

Test(token, base64url_vectors)
{
    char out[64];
    /* RFC 4648 test vectors, URL-safe alphabet, no padding. */
    cr_assert_eq(token_encode((const unsigned char *)"", 0, out), 0);
    token_encode((const unsigned char *)"f", 1, out);
    cr_assert_str_eq(out, "Zg");
    token_encode((const unsigned char *)"fo", 2, out);
    cr_assert_str_eq(out, "Zm8");
    token_encode((const unsigned char *)"foobar", 6, out);
    cr_assert_str_eq(out, "Zm9vYmFy");
    const unsigned char hi[] = {0xfb, 0xff, 0xbf};
    token_encode(hi, 3, out);
    cr_assert_str_eq(out, "-_-_", "uses - and _ instead of + and /");
}

Test(token, new_tokens_are_128_bits_url_safe_and_distinct)
{
    char a[TOKEN_TEXT_LEN + 1], b[TOKEN_TEXT_LEN + 1];
    cr_assert_eq(token_new(a), 0);
    cr_assert_eq(token_new(b), 0);
    cr_assert_eq(strlen(a), 22);
    cr_assert(TOKEN_RANDOM_BYTES * 8 >= 128);
    cr_assert_str_neq(a, b);
    for (size_t i = 0; i < strlen(a); i++)
        cr_assert(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.", a[i]));
    cr_assert(rules_token_valid(a, strlen(a)));
}

/* A token that began with '-' read as an option on a command line
 * (`redlock release NAME "$TOKEN"`): one in 64 did. */
Test(token, no_token_begins_with_a_dash)
{
    const unsigned char dash[TOKEN_RANDOM_BYTES] = {0xf8};   /* first digit 62: '-' */
    char out[TOKEN_TEXT_LEN + 1];
    cr_assert_eq(token_text(dash, out), TOKEN_TEXT_LEN);
    cr_assert_eq(out[0], '.', "%s", out);
    cr_assert_str_eq(out + 1, "AAAAAAAAAAAAAAAAAAAAA");
    const unsigned char under[TOKEN_RANDOM_BYTES] = {0xfc};   /* 63: '_' stays */
    token_text(under, out);
    cr_assert_eq(out[0], '_');
    for (int i = 0; i < 4096; i++) {   /* (63/64)^4096: no '-' by chance is e^-64 */
        cr_assert_eq(token_new(out), 0);
        cr_assert_neq(out[0], '-', "token %d: %s", i, out);
    }
}

Test(sha1, known_digests)
{
    char hex[41];
    sha1_hex("abc", 3, hex);
    cr_assert_str_eq(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
    sha1_hex("", 0, hex);
    cr_assert_str_eq(hex, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha1_hex(two, strlen(two), hex);
    cr_assert_str_eq(hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    /* Redis names the script "return 1" by this SHA-1 (SCRIPT LOAD). */
    sha1_hex("return 1", 8, hex);
    cr_assert_str_eq(hex, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
}
