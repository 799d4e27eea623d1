/* sha1.h - SHA-1 of a byte string, as hex.
 *
 * Redis names a cached Lua script by the SHA-1 of its body; EVALSHA needs that
 * name before any master has answered SCRIPT LOAD. Pure: no allocation.
 */
#ifndef RL_SHA1_H
#define RL_SHA1_H

#include <stddef.h>

#define SHA1_HEX_LEN 40

/* Writes the lowercase hex digest of data[0..len) and a NUL to hex (41 bytes). */
void sha1_hex(const void *data, size_t len, char hex[SHA1_HEX_LEN + 1]);

#endif
