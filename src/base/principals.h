/* principals.h - who may do what to which names (--principals-file): one
 * principal per line,
 *
 *     # principal   rights            prefixes                  credential
 *     billing       lock,read         billing/,reports/         sha256:<hex of the token>
 *     ops           read,lock,admin   *                         cert
 *
 * rights are read (inspect, listings, watches, /ui/state), lock (acquire,
 * extend, release and heartbeats of locks, elections and semaphores; Dapr
 * lock and unlock) and admin (force release); prefixes are byte prefixes of
 * a name, `*` every name; the credential is a bearer token's SHA-256 (only
 * the digest is kept) or `cert`: a client certificate whose subject CN (or
 * first DNS SAN) is the principal's name. Names are 1 to 64 bytes of
 * A-Z a-z 0-9 . _ - @.
 *
 * Pure but for SHA-256 (OpenSSL's libcrypto): parsed once, read-only
 * after, so any thread may read a set; a reload builds a new one.
 */
#ifndef RL_PRINCIPALS_H
#define RL_PRINCIPALS_H

#include <stdbool.h>
#include <stddef.h>

#define PRINCIPAL_NAME_MAX 64
#define PRINCIPALS_MAX 4096

enum principal_right {
    RIGHT_NONE = 0,   /* an open route: /healthz, /readyz, /metrics, the dashboard's page */
    RIGHT_READ = 1,
    RIGHT_LOCK = 2,
    RIGHT_ADMIN = 4,
};

typedef struct principal {
    char name[PRINCIPAL_NAME_MAX + 1];
    unsigned rights;                /* enum principal_right bits */
    bool all_names;                 /* prefix `*` */
    int nprefixes;
    char **prefixes;                /* byte prefixes of names (one allocation with the set) */
    bool cert;                      /* known by its client certificate's name */
    unsigned char sha256[32];       /* else its token's digest */
} principal;

typedef struct principals {
    int n;
    principal *p;
} principals;

/* Parses text (a file's contents). NULL with err ("line N: why") on an
 * error; an empty set (no line) is an error too. */
principals *principals_parse(const char *text, char *err, size_t errlen);
/* The implicit set of --auth-token-file and --admin-token-file (either may
 * be NULL): "token" with read and lock on every name, "admin" with admin on
 * every name. NULL when both are NULL (every caller is anonymous), or out of
 * memory. */
principals *principals_implicit(const char *auth_token, const char *admin_token);
void principals_free(principals *ps);

/* The principal whose token this is, or NULL. Every token principal is
 * compared, in time that depends on their number only (the digests are
 * compared, never the token). */
const principal *principals_by_token(const principals *ps, const char *token);
/* The `cert` principal named name (a certificate's CN or DNS SAN), or NULL. */
const principal *principals_by_cert(const principals *ps, const char *name);

/* May p exercise right on name? (RIGHT_NONE: always.) A name no prefix of
 * p's starts is refused whatever the right. */
bool principal_may(const principal *p, unsigned right, const char *name);
/* May p read some name at all (a listing shows only names it may read)? */
bool principal_may_list(const principal *p);

#endif
