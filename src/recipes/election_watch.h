/* election_watch.h - GET /elections/{name}?watch=true: an election's leader,
 * told as a stream of events ("state" first, then "elected", "proclaimed",
 * "vacant": election_change) as the masters show it.
 *
 * A watch reads the election from a majority (an ordinary inspect through
 * the engine of the loop serving it) at once when a notice of it arrives
 * (a grant, a proclaim or a release, published on the masters by whichever
 * redlockd made it), and every ELECTION_WATCH_POLL_MS in any case, so that
 * a missed notice heals; terms are reported in increasing order only. A
 * client that reads slowly skips to the newest state: one event takes it
 * from what it was last told to what was read last (never a backlog).
 *
 * Who owns what: the watch owns its pending events under its own mutex; the
 * loop's engine answers its reads and its timer runs on that loop; the HTTP
 * layer owns the connection, and is told through wake(arg) (called with the
 * watch's mutex held, never after election_watch_close) that there is
 * something to read. No HTTP or Redis headers here.
 */
#ifndef RL_ELECTION_WATCH_H
#define RL_ELECTION_WATCH_H

#include <stddef.h>

#include "masters/masters.h"
#include "engine/engine.h"

typedef struct election_watch election_watch;

/* Lets the watches on e's loop hear e's notices (a release, a grant, a
 * proclaim of the election, on any instance): they read at once instead of
 * at the next ELECTION_WATCH_POLL_MS. Once per engine, before traffic. */
void election_watch_attach(rl_engine *e);

/* Starts watching the election whose lock is lock_name (its events name it
 * label), reading through e on pool's loop. Call on that loop. NULL when
 * out of memory. */
election_watch *election_watch_start(rl_engine *e, mpool *pool, const char *lock_name,
                                     const char *label, void (*wake)(void *), void *arg);

/* Copies up to cap bytes of pending events into buf: the bytes copied, or 0
 * when nothing is pending (wake follows when something is). */
long election_watch_read(election_watch *w, char *buf, size_t cap);

/* The connection let go: no more wakes; the watch is freed once its
 * read or timer in flight has come back. Call exactly once. */
void election_watch_close(election_watch *w);

#endif
