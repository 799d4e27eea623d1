/* quarantine.h - restart quarantine: which masters may vote after a restart.
 *
 * A master restarted without its data may have lost the key of a lock that is
 * still valid; if its yes counted, a second client could win a majority while
 * the first still holds the lock. The Redlock page's remedy is to keep a
 * restarted master out of every lock for longer than the longest TTL. The
 * master layer learns each master's run_id and uptime from INFO server on every
 * new connection and asks this module whether that master's votes count.
 *
 * Pure: no I/O, no clock reads. Times are microseconds on the caller's
 * monotonic clock; a master's "birth" is the estimate now - uptime.
 */
#ifndef RL_QUARANTINE_H
#define RL_QUARANTINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Masters started within this much of each other count as started together:
 * none of them can have lost a lock the others hold, so none is quarantined
 * for its youth alone. Covers uptime's one-second granularity and scripts or
 * compose files that start masters one after another. */
#define QUARANTINE_TOGETHER_US 5000000ULL

#define QUARANTINE_RUN_ID_LEN 40

/* What this process knows of one master. */
typedef struct quarantine_view {
    bool known;              /* INFO server seen on some connection */
    bool restarted;          /* its run_id changed while this process watched it */
    uint64_t born_us;        /* start of the current incarnation (now - uptime) */
    uint64_t first_born_us;  /* start of the first incarnation this process saw */
} quarantine_view;

/* When master i's votes may count again: 0 when they count now, else the
 * time its quarantine ends. Master i is quarantined while its uptime is below
 * window_us (the longest TTL plus drift) and either
 *  - it was seen to restart (run_id changed), or
 *  - it is younger, by more than QUARANTINE_TOGETHER_US, than at least
 *    max(1, quorum - 1) other known masters: enough of them ran before it to
 *    have granted, together with a previous life of i, a lock that may still
 *    be valid. Masters started together are usable at once.
 * Masters not yet known do not count as older: a master down since this
 * process started is judged when it first answers (the result is
 * recomputed as masters become known; it only ever grows stricter). */
uint64_t quarantine_until(const quarantine_view *v, int n, int i, uint64_t now_us,
                          uint64_t window_us);

/* Reads run_id and uptime_in_seconds from the text of INFO server.
 * run_id gets QUARANTINE_RUN_ID_LEN + 1 bytes. Returns 0, or -1 if either
 * field is missing or malformed. */
int quarantine_parse_info(const char *info, size_t len, char *run_id, long long *uptime_s);

#endif
