/* auth.h - who calls, and whether they may (issue 43). The principals in
 * force: --principals-file's (base/principals.h), with the implicit ones
 * of --auth-token-file ("token": read and lock on every name) and
 * --admin-token-file ("admin": force release). A caller is its client
 * certificate's principal (a `cert` one, on an HTTPS listener with
 * --tls-client-ca-file), else its bearer token's. Without a principals
 * file and --auth-token-file the service is open: every caller may read and
 * lock; a force release needs a principal with the admin right all the
 * same (--admin-token-file's, or one in the file).
 *
 * Who owns what: the set in force is read by any thread (one atomic
 * pointer); auth_load builds a new one and swaps it in (at start, and on
 * SIGHUP from the main thread); a set replaced is kept until auth_free, so
 * a reader never holds a freed one (reloads are rare and small).
 */
#ifndef RL_AUTH_H
#define RL_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

/* Builds the set from c (the file read now) and puts it in force. 0, or
 * -1 with err (one line): the set in force is kept. */
int auth_load(const conf *c, char *err, size_t errlen);
/* Do reading and locking need a principal? (false: an open service) */
bool auth_closed(void);
/* Does any principal have the admin right? */
bool auth_admin_exists(void);
/* The principal of this certificate name or token (either may be NULL),
 * or NULL. */
const principal *auth_who(const char *cert_name, const char *token);
/* May p (NULL: the anonymous caller of an open service) exercise right on
 * name (NULL: no name yet)? */
bool auth_may(const principal *p, unsigned right, const char *name);
void auth_free(void);

#endif
