/* token.h - lock tokens: 128 random bits from the kernel, as URL-safe text.
 *
 * A token is the only proof of ownership of a lock; it is stored as the value
 * of the lock key on every master. token_encode is pure (unit-tested);
 * token_new reads getrandom(2). What a caller may give back as a token is
 * rules_token_valid's (rules.h).
 */
#ifndef RL_TOKEN_H
#define RL_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#include "rules.h"

#define TOKEN_RANDOM_BYTES 16
#define TOKEN_TEXT_LEN 22   /* base64url of 16 bytes, no padding */
#define TOKEN_MAX_LEN RULES_TOKEN_MAX   /* longest token accepted from a caller */

/* base64url (RFC 4648 section 5) without padding. out must hold
 * (len * 4 + 2) / 3 + 1 bytes; returns the text length. */
size_t token_encode(const unsigned char *raw, size_t len, char *out);

/* A token's text from its random bytes: base64url, except that a first
 * character '-' is written '.' instead, so that no token reads as an option
 * on a command line (`redlock release NAME "$TOKEN"`). Still one of 64
 * characters there, so no randomness is lost. Returns TOKEN_TEXT_LEN. */
size_t token_text(const unsigned char raw[TOKEN_RANDOM_BYTES], char out[TOKEN_TEXT_LEN + 1]);

/* Fills out (TOKEN_TEXT_LEN + 1 bytes) with a fresh token (token_text).
 * Returns 0, or -1 when the kernel gave no randomness. */
int token_new(char out[TOKEN_TEXT_LEN + 1]);


#endif
