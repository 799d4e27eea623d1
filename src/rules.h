/* rules.h - what a lock name, a token and an owner may be: the one home of
 * these rules, linked by both redlockd and the `redlock` client so that the
 * client refuses exactly what the service would.
 *
 * Pure (no I/O, no allocation); unit-tested in tests/unit/test_rules.c.
 */
#ifndef RL_RULES_H
#define RL_RULES_H

#include <stdbool.h>
#include <stddef.h>

#define RULES_NAME_MAX 200    /* bytes of a lock name */
#define RULES_OWNER_MAX 128   /* bytes of an owner */
#define RULES_TOKEN_MAX 256   /* bytes of a token given by a caller */

/* A lock name: 1 to RULES_NAME_MAX bytes of A-Z a-z 0-9 . _ : - */
bool rules_name_valid(const char *s, size_t len);

/* A token a caller gives back: 1 to RULES_TOKEN_MAX bytes of printable
 * ASCII without space, '"' or '\\' (one word that fits a header, a query
 * and a JSON string unchanged). The tokens redlockd makes are a subset
 * (token.h); Dapr's lockOwner follows this rule too. */
bool rules_token_valid(const char *s, size_t len);

/* An owner: 1 to RULES_OWNER_MAX bytes of printable ASCII (0x20-0x7e). */
bool rules_owner_valid(const char *s, size_t len);

/* Writes the URL path segment for a valid name into out (outlen bytes).
 * Names are URL-safe as they are, except "." and "..": clients remove such
 * dot segments from a path before sending it (RFC 3986 section 5.2.4), so
 * their dots are sent percent-encoded (%2E), which the service decodes.
 * Returns 0, or -1 when the name is not valid or out is too small. */
int rules_name_path(const char *name, char *out, size_t outlen);

#endif
