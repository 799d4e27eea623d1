/* audit.h - the audit log (--audit-log FILE, or - for stderr): one JSON
 * line per event that changes who holds what or refuses a caller:
 *
 *   {"time":"2026-11-28T07:50:01.123Z","event":"grant","principal":"billing",
 *    "client":"10.0.0.7","route":"POST /locks/{name}","name":"billing/run",
 *    "outcome":"201","fence":1795...}
 *
 * events: grant, release, extend_failed, force, loss, term (an election's
 * new term), refused (authentication or rights). A token is never written:
 * fields are the principal's name, the client's address ("unix" for the
 * Unix socket), the route's pattern, the name and the outcome.
 *
 * One global log: audit_open once at start, audit_reopen on SIGHUP (for
 * logrotate); audit_write from any thread (a mutex; each line is one
 * write(2)). Without audit_open, audit_write does nothing.
 */
#ifndef RL_AUDIT_H
#define RL_AUDIT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct audit_event {
    const char *event;        /* grant, release, extend_failed, force, loss, term, refused */
    const char *principal;    /* NULL: anonymous */
    const char *client;       /* an address, or "unix" */
    const char *route;        /* "METHOD pattern" (grpc: "grpc TryLockAlpha1") */
    const char *name;         /* NULL: none */
    const char *outcome;      /* the status or the stream's event (lost: its reason) */
    long long fence;          /* a grant's fence or term (0: none) */
} audit_event;

/* Opens path for appending ("-": stderr). 0, or -1 with err. */
int audit_open(const char *path, char *err, size_t errlen);
/* Reopens the same path (SIGHUP): a rotated file is let go. 0, or -1 (the
 * old file is kept). */
int audit_reopen(void);
bool audit_on(void);
/* The line for ev into out (cap bytes): its length, 0 when it does not
 * fit. Pure, for the unit tests. now_ms is Unix time in ms. */
size_t audit_format(const audit_event *ev, long long now_ms, char *out, size_t cap);
void audit_write(const audit_event *ev);
void audit_close(void);

#endif
