/* testhook.h - REDLOCKD_TEST_BREAK=RULE: one promise broken on purpose,
 * so that a checker's negative control shows it catches the breach
 * (tests/nemesis, docs/contributing.md). Read once, from the environment
 * only; redlockd refuses an unknown rule at start and logs a known one as
 * a warning. Never set it in production. Thread-safe. */
#ifndef RL_TESTHOOK_H
#define RL_TESTHOOK_H

#include <stdbool.h>

enum testhook_rule {
    TESTHOOK_NONE,
    TESTHOOK_DOUBLE_GRANT,  /* "double_grant": a lock's acquire refused as held answers 201
                               with a fresh token and fence (nothing written) */
    TESTHOOK_OVER_LIMIT,    /* "over_limit": a semaphore's acquire refused for want of room
                               answers a permit anyway (slot = limit, nothing written) */
    TESTHOOK_STALE_FENCE,   /* "stale_fence": every grant answers fence (term) 1 */
    TESTHOOK_RELEASE_NOOP,  /* "release_noop": DELETE of a lock with a token answers 204 and
                               releases nothing */
    TESTHOOK_NO_WAKE,       /* "no_wake": a waiting acquire sleeps to the end of its wait_ms,
                               unwoken by releases, and answers 409 then */
    TESTHOOK_SILENT_LOSS,   /* "silent_loss": a held stream whose lock is lost ends without
                               its "lost" event */
    TESTHOOK_NO_RIGHTS,     /* "no_rights": a known principal may do anything to any name */
};

/* The rule text names, or -1 when it names none ("" and NULL: TESTHOOK_NONE). */
int testhook_parse(const char *text);
/* Is rule the one REDLOCKD_TEST_BREAK names? */
bool testhook_breaks(enum testhook_rule rule);
/* The name of the rule broken ("" when none). */
const char *testhook_name(void);

#endif
