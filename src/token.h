/* token.h - lock tokens: 128 random bits from the kernel, as URL-safe text.
 *
 * A token is the only proof of ownership of a lock; it is stored as the value
 * of the lock key on every master. token_encode is pure (unit-tested);
 * token_new reads getrandom(2). token_valid says whether a caller-supplied
 * string may be a token at all (printable ASCII without spaces or quotes).
 */
#ifndef RL_TOKEN_H
#define RL_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#define TOKEN_RANDOM_BYTES 16
#define TOKEN_TEXT_LEN 22   /* base64url of 16 bytes, no padding */
#define TOKEN_MAX_LEN 256   /* longest token accepted from a caller */

/* base64url (RFC 4648 section 5) without padding. out must hold
 * (len * 4 + 2) / 3 + 1 bytes; returns the text length. */
size_t token_encode(const unsigned char *raw, size_t len, char *out);

/* Fills out (TOKEN_TEXT_LEN + 1 bytes) with a fresh token.
 * Returns 0, or -1 when the kernel gave no randomness. */
int token_new(char out[TOKEN_TEXT_LEN + 1]);

/* True when s[0..len) is 1..TOKEN_MAX_LEN bytes of printable ASCII (0x21-0x7e)
 * other than '"' and '\\'. */
bool token_valid(const char *s, size_t len);

#endif
