/* hold.h - held streams: a lock the service keeps alive for as long as the
 * client keeps its connection open (POST /locks/{name} with "hold": true).
 *
 * A hold renews its lock through the engine (an ordinary extension, same
 * majority and validity rules as PATCH) every third of its ttl, and tells
 * its client what happens as events, one JSON object per line: "acquired",
 * "renewed", then "lost" or "released", after which the stream ends. Every
 * event's validity_ms is counted when the event is handed to the connection,
 * and is HOLD_TRANSIT_MARGIN_MS less than the masters hold, so that an
 * event that reaches its client that much late promises nothing they do
 * not hold. "lost" is queued HOLD_LOST_MARGIN_MS before the validity last
 * announced runs out, unless an extension succeeds first. A hold that ends
 * by a loss releases what it still holds when the validity last announced,
 * and the transit margin, have run out, never sooner, even if the
 * connection closes first (it completes as soon as "lost" is written):
 * until the client has read "lost", the lock stays its own, even after a
 * failed extension (which therefore keeps what it holds: keep_on_fail).
 * A client that stops acknowledging what the stream sends (dead, or cut
 * off) is found before the next extension, which is then not made: the
 * stream ends with "lost" (expired) and the lock is released by the same
 * rule. A shutdown releases as soon as "released" has been handed to the
 * connection.
 *
 * A campaign (hold_campaign) is a hold whose grant is still to come: the
 * renewer starts its acquires, and the engine's answer makes it an
 * ordinary hold of the grant, or gives back a grant that came too late.
 *
 * Who owns what: the hold set owns every hold, its timers and its pending
 * events, all under one mutex (hold_set.mu). Its own thread (the renewer)
 * starts extensions and declares loss; the engine's loop (of the name's
 * owner) reports what extensions and releases answered; the loop serving the
 * connection reads events and closes. The
 * HTTP layer owns the connection: it is told through wake(arg), called with
 * the set's mutex held (so never after hold_close returned), that a hold has
 * something to read. No HTTP or Redis headers here.
 */
#ifndef RL_HOLD_H
#define RL_HOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* The shortest ttl a held stream may ask for: it is renewed every third of
 * it, and must outlast a few master round trips. */
#define HOLD_MIN_TTL_MS 1000
#define HOLD_HEARTBEAT_MIN_MS 100   /* the least "heartbeat_ms" of a held stream */

#define HOLD_LOST_MARGIN_MS 100   /* "lost" leaves this long before the validity announced ends */
#define HOLD_TRANSIT_MARGIN_MS 500 /* events announce this much less validity than obtained
                                      (at most a fifth of the ttl): the time an event may
                                      take to reach its client (a retransmission or two) */
#define HOLD_EVENT_MAX 1024       /* the longest event line (a name escaped: up to 400 bytes) */

typedef struct hold_set hold_set;
typedef struct hold hold;
typedef void (*hold_wake_fn)(void *arg);

/* A set of at most max_holds holds. Starts the renewer thread. NULL on
 * failure. */
hold_set *hold_set_new(int max_holds);

/* Reserves room for one more hold before its acquire is sent. False when
 * max_holds are open or reserved (the caller answers 429 too_many_holds).
 * Every reservation ends in hold_start or hold_unreserve. */
bool hold_reserve(hold_set *s);
void hold_unreserve(hold_set *s);

/* Turns a reservation into a hold of the grant res of req (an acquire that
 * answered RL_OK on engine e, which renews and releases it), sent at sent_us (loop_now_us clock: the validity counts
 * from it). Queues "acquired". fd is the connection's TCP socket (-1 when
 * unknown): the hold sets its timeouts (TCP_USER_TIMEOUT, keepalive) and,
 * until hold_close, reads how much of what was sent the client has not
 * acknowledged; it never reads, writes or closes it. wake(arg) is called
 * whenever hold_read has something new after it answered 0. NULL when out
 * of memory: the caller releases the grant and the reservation. */
hold *hold_start(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                 uint64_t sent_us, int fd, hold_wake_fn wake, void *arg);

/* A permit of a semaphore (POST /semaphores/{name} with "hold": true): a
 * hold of the slot's lock (req, granted as res, as for hold_start) whose
 * "acquired" event names the semaphore and gives the permit's slot and
 * token ("<slot>:<token>"). Each renewal also keeps the semaphore's limit
 * alive for a ttl (RL_SEM_LIMIT on limit_engine), and the slot's release
 * is published on the semaphore's channel (limit_name's). */
typedef struct hold_permit_of {
    char semaphore[RL_NAME_MAX + 1];
    int limit, slot;
    rl_engine *limit_engine;
    char limit_name[RL_INTERNAL_NAME_MAX + 1];
} hold_permit_of;
hold *hold_permit(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                  uint64_t sent_us, const hold_permit_of *of, int fd, hold_wake_fn wake, void *arg);

/* A campaign for an election (POST /elections/{name}): a hold without a
 * grant yet. Queues "campaigning" (name label, candidate), then acquires req
 * (the election's internal lock, with its owner) on e, again and again, each
 * time waiting up to req->wait_ms in the engine, until it is granted or the
 * stream ends; a grant that comes after the close is released at once.
 * Once granted it is an ordinary hold, whose events are named for the
 * election: "elected" (term = the grant's fence, token, validity_ms,
 * ttl_ms), "renewed", then "lost" or "resigned" (a DELETE with the token,
 * or "shutting_down"). Call after hold_reserve; NULL when out of memory or
 * stopping. */
hold *hold_campaign(hold_set *s, rl_engine *e, const rl_request *req, const char *label,
                    const char *candidate, int fd, hold_wake_fn wake, void *arg);

/* Copies up to cap bytes of the pending events into buf. Returns the bytes
 * copied (> 0), 0 when nothing is pending (wake follows when something
 * is), or -1 when the stream is over: its last event was read. */
long hold_read(hold *h, char *buf, size_t cap);

/* The connection let go (the client left, the stream ended or failed).
 * Releases the lock at once on every master unless it is already gone, and
 * frees h once the engine has answered; but a hold that ended with "lost"
 * (its client may not have read it yet) keeps the lock until the validity
 * last announced, plus HOLD_TRANSIT_MARGIN_MS, has run out. Call exactly once; wake is never
 * called, and fd never read, after it returns. */
/* Its lines of the audit log (a loss; for a campaign, each term won) name
 * who (a principal; "" anonymous), client and route. Any thread, once it started. */
void hold_audit_as(hold *h, const char *who, const char *client, const char *route);
void hold_close(hold *h);

/* The client of the stream holding name with token (an internal name: an
 * election's lock, a permit's slot) showed it is alive: a stream asked with
 * "heartbeat_ms" goes on for that long again. False when no such stream is
 * open here. Any thread. */
bool hold_heartbeat(hold_set *s, const char *name, const char *token, size_t tlen);

/* Writes one space to h's stream (JSON's whitespace, before the next
 * event's line), now rather than at the next renewal: a client that closed
 * its connection answers it with a reset, so the stream ends at once; a
 * half-closed one reads it. The caller resumes the connection. Any thread;
 * not after hold_close. */
void hold_probe(hold *h);

/* A DELETE released name with token: the hold of that grant, if any, ends
 * with "released". Any thread. */
void hold_released(hold_set *s, const char *name, const char *token);

/* An operator force-released name here: every hold of a grant of name ends
 * with "lost", reason "forced" (the same as a force's notice does on every
 * instance; this covers --notify off). Any thread. */
void hold_forced(hold_set *s, const char *name);

/* Hears engine e's release notices (call for every engine before traffic,
 * with --notify): a hold whose grant is released through another instance
 * (a DELETE with its token there; the notice names the value deleted) ends
 * with "released" ("resigned" for a leader) at once, as for a DELETE here,
 * instead of "lost" at its next extension. Every hold wants its name's
 * notices while it holds. */
void hold_attach(hold_set *s, rl_engine *e);
/* On e's loop thread, before hold_set_free: s hears e's notices no more. */
void hold_detach(hold_set *s, rl_engine *e);

/* Stopping: every open hold ends its stream with "released" (reason
 * shutting_down) and releases its lock once that event has left (at once
 * after half of timeout_ms for a client that does not read). Waits up to
 * timeout_ms in all; returns the number of releases still unanswered. */
int hold_set_end_all(hold_set *s, long long timeout_ms);

/* Holds open now. */
int hold_set_count(hold_set *s);

/* Stops the renewer and frees the set; every hold must be closed. */
void hold_set_free(hold_set *s);

#endif
