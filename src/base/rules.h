/* rules.h - what a lock name, a token and an owner may be, how a name is
 * written into a URL path and read back from one, and the byte that keeps
 * internal keys apart from names: the one home of these rules, linked by
 * both redlockd and the `redlock` client so that the client refuses
 * exactly what the service would.
 *
 * Pure (no I/O, no allocation); unit-tested in tests/unit/base/test_rules.c.
 */
#ifndef RL_RULES_H
#define RL_RULES_H

#include <stdbool.h>
#include <stddef.h>

#define RULES_NAME_MAX 200    /* bytes of a lock, election or semaphore name */
#define RULES_OWNER_MAX 128   /* bytes of an owner */
#define RULES_TOKEN_MAX 256   /* bytes of a token given by a caller (a Dapr lockOwner too) */

/* Joins a name to the internal names and keys made from it (a semaphore's
 * slots and limit, an election's lock, a lock's fence counter, owner record
 * and waiters' queue): a control byte, which no name, owner or prefix may
 * hold, followed by '#' for whoever reads the keys. So no name that any API
 * accepts reaches an internal key, and a lock's key is its prefix and its
 * name's bytes, nothing else (other Redlock clients interoperate). */
#define RULES_SEP "\x1f#"

/* Text: 1 to max bytes of well-formed UTF-8 without control characters
 * (below 0x20, and 0x7f). The rule of names (max RULES_NAME_MAX), owners,
 * candidates, values and Dapr resource ids, each with its own length. */
bool rules_text_valid(const char *s, size_t len, size_t max);

/* A lock name: rules_text_valid up to RULES_NAME_MAX bytes. */
bool rules_name_valid(const char *s, size_t len);

/* A token a caller gives back: 1 to RULES_TOKEN_MAX bytes of printable
 * ASCII without space, '"' or '\\' (one word that fits a header, a query
 * and a JSON string unchanged). The tokens redlockd makes are a subset
 * (token.h). */
bool rules_token_valid(const char *s, size_t len);

/* An owner: rules_text_valid up to RULES_OWNER_MAX bytes. */
bool rules_owner_valid(const char *s, size_t len);

/* Writes the URL path segment for a valid name into out (outlen bytes):
 * every byte but A-Z a-z 0-9 - . _ ~ : @ percent-encoded ('/' too, so a
 * name is one segment), and the names "." and ".." as %2E and %2E%2E
 * (clients remove such dot segments from a path before sending it, RFC
 * 3986 section 5.2.4). Returns 0, or -1 when the name is not valid or out
 * is too small. */
int rules_name_path(const char *name, char *out, size_t outlen);
#define RULES_NAME_PATH_MAX (3 * RULES_NAME_MAX + 1)   /* room for any name's segment */

/* Percent-decodes len bytes of in, once, into out (cap bytes, NUL added).
 * A decoded NUL becomes 0x7f, so that it cannot cut a name short: the
 * rules above then refuse it as a control byte. Returns the decoded
 * length, or -1 when an escape is not '%' and two hex digits or out is too
 * small. */
long rules_percent_decode(const char *in, size_t len, char *out, size_t cap);

#endif
