/* scripts.h - the Lua scripts the engine and the master layer run on every
 * master.
 *
 * Keys of one lock, for key = <key_prefix><name>. A name holds no control
 * byte (rules.h) and a prefix only A-Z a-z 0-9 . _ : - (conf.h), and every
 * internal key holds RULES_SEP, which starts with one: no name reachable
 * through any API can address an internal key.
 *   key                  the lock: value = the grant's value, PX = ttl
 *   key RULES_SEP fence  (key<SEP>fence below) the fence counter, PX = ttl + fence keep; refreshed
 *                        by every grant and extension, so it outlives the lock
 *   key RULES_SEP owner  the grant's value, a newline, and the caller's
 *                        "owner", PX = the lock's: set by a grant that names an
 *                        owner, extended with the lock, deleted with it; read
 *                        only where its value part matches the lock's, so a
 *                        stale one is never reported. The lock's own value
 *                        never changes, so other Redlock clients interoperate.
 *   key RULES_SEP queue, key RULES_SEP qdl: the waiters' tickets (below)
 *   SCRIPT_MARKER_KEY    one per master, no expiry: the cluster marker below.
 *                        Its name is older than RULES_SEP and kept (a new
 *                        name would quarantine every master on an upgrade).
 *                        With --key-prefix '' the name "redlockd#marker"
 *                        reaches it, harmlessly: an acquire's SET NX finds
 *                        it taken (and no vote runs before it exists), and
 *                        releases and extensions compare a string with it
 *                        (WRONGTYPE: no answer, no change).
 *
 * A grant's value is its token; for a caller-chosen token (a Dapr lockOwner,
 * reused across grants) it is the token, SCRIPT_VALUE_SEP and a fresh random
 * suffix, so a release remembered for one grant never deletes another grant
 * of the same caller. That control byte never occurs in a caller's token
 * (rules.h), so no owner's value starts with another owner's and the byte.
 *
 * Fences are a hybrid logical clock per name: a grant takes counter + 1, or
 * the master's TIME in microseconds where the counter has expired or was
 * lost; or instead the seed redlockd proposes (its own clock), where that is
 * larger and within a bound of the master's TIME, so masters agree on a
 * fresh name without a second round trip (quorum.h). With fewer than one
 * grant per microsecond per name, a counter never runs more than the bound
 * ahead of the clock, so a counter that expired keep_ms after its lock
 * (keep_ms longer than any clock difference between masters plus twice the
 * bound) is replaced by a larger value: a clock reading, or a proposal no
 * more than the bound below one
 * (docs/safety.md has the argument). While key holds a value
 * on a master, that master's counter is the holder's fence there or below it:
 * the counter moves only when SET NX takes the key, or when the holder's own
 * grant raises it. Counters pass through as exact integers below 2^53; a
 * counter that does not parse is an error, and its SET NX is undone within
 * the same script.
 *
 * The marker (a hash) says whether a master may vote: state "pending" (a new
 * cluster being set up: no votes) or "ready" with "until", the master's TIME
 * in microseconds before which it sits out (0: votes now), and "run_id", the
 * server it was last seen as. Every vote script starts with the guard
 * (after its `#!lua` line, for one that takes memory: scripts.c): no
 * marker, a pending one, or an "until" still ahead answers {-100} or
 * {-101, ms_left}, which is no vote. See marker.h for who writes it.
 */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

#include "master.h"
#include "base/base.h"

#define SCRIPT_VALUE_SEP "\x1f"          /* a caller's token and a grant's suffix */
#define SCRIPT_VALUE_SEP_LUA "'\\31'"   /* the same, as a Lua string literal */
#define SCRIPT_FENCE_SUFFIX RULES_SEP "fence"
#define SCRIPT_OWNER_SUFFIX RULES_SEP "owner"
#define SCRIPT_QUEUE_SUFFIX RULES_SEP "queue"   /* a name's waiters' tickets, by arrival (a sorted set) */
#define SCRIPT_QDL_SUFFIX RULES_SEP "qdl"      /* ... and when each expires (master time, ms) */
#define SCRIPT_QUEUE_RETRY_MS "100"    /* a ticket behind another while the name is free: the
                                          retry delay, should the older waiter be gone */
#define SCRIPT_MARKER_KEY "redlockd#marker"
/* A release publishes the key on SCRIPT_NOTICE_PREFIX + key: only instances
 * with waiters for that name subscribe, so a release nobody waits for
 * reaches no instance. */
#define SCRIPT_NOTICE_PREFIX "redlockd:released:"
/* The guard's answers (first integer of the reply). */
#define SCRIPT_NOT_SET_UP (-100)
#define SCRIPT_QUARANTINED (-101)

/* Vote scripts: the marker is the last key, and the last argument is "1" to
 * run the guard, "0" (--quarantine off) to skip it. */

/* KEYS key, key<SEP>fence, key<SEP>owner, key<SEP>queue, key<SEP>qdl, marker; ARGV value,
 * ttl_ms, counter_px_ms (ttl plus the fence keep), owner ("" for none),
 * seed, bound_us, ticket, arrival_us, ticket_ttl_ms, guard.
 * Fair order: a waiting acquire gives a ticket (a random id; "" for none)
 * and its arrival (redlockd's clock, Unix us; the same for every attempt of
 * one waiter). The ticket joins key<SEP>queue, ordered by arrival (ties by id,
 * so every master orders alike), and lives ticket_ttl_ms from this attempt
 * (key<SEP>qdl; expired tickets are dropped as they are met). While the queue
 * holds a ticket, only its oldest may take the key: any other acquire
 * answers {0, pttl} as if held (SCRIPT_QUEUE_RETRY_MS when the key is
 * free). A grant removes its own ticket.
 * {1, fence} when SET NX took the key (and the owner key is set when an owner
 * is given; an owner starting with byte 1, which no caller's owner may hold,
 * is an election's: that byte becomes the master's time in Unix ms and a
 * space): the fence is quorum_seed_fence(counter, seed, TIME, bound_us),
 * seed being redlockd's proposal (0: none, the master's own rule); {0, pttl}
 * when the key is held (pttl -1: no expiry). A counter that is not an integer
 * below 2^53 is an error, and the SET NX is undone in the same step. */
extern mscript script_acquire;
/* KEYS key<SEP>queue, key<SEP>qdl, key; ARGV ticket, channel. A waiter that leaves
 * (answered without a grant, or granted where others still queue it)
 * removes its ticket, and publishes key on channel (unless empty) so that
 * the waiters behind it try at once. redo_when_back: a master that missed
 * it (down, its connection lost while it was paused) runs it once back,
 * rather than keep a gone waiter's ticket at the head of its queue until
 * the ticket expires. */
extern mscript script_dequeue;
/* KEYS key, key<SEP>fence, marker; ARGV value, fence, counter_px_ms, guard.
 * When key holds value with time left: sets the counter to exactly fence and
 * answers 1; else 0 and changes nothing. Run after a grant on every master
 * that may hold the grant with another counter: yes votes below the fence,
 * and masters whose SET NX may still apply late (its counter then came from
 * a later clock). Lowering a counter to the fence is safe: the higher value
 * was never handed out. redo_when_back, so every holder ends with exactly the
 * grant's fence and an extension reports it, whichever majority answers. */
extern mscript script_settle;
/* KEYS key, key<SEP>fence, key<SEP>owner, marker; ARGV value, ttl_ms, counter_px_ms,
 * guard. value matches as with release mode "~"; the owner key of the stored
 * value is extended too. {1, counter, stored value} after resetting the
 * key's expiry to ttl_ms (the counter's to counter_px_ms); {-1} when
 * another value holds key; {0} when absent. The stored value lets a failed
 * extension by a caller's token release that exact grant everywhere. */
extern mscript script_extend;
/* KEYS as script_extend; ARGV value, ttl_ms, counter_px_ms, fence, owner
 * record ("" none), guard. A held stream's extension that repairs its lease
 * (hold.h): answers as script_extend where the key is held; where it is
 * absent, takes it for value (SET, the key being free), raises the counter
 * to at least fence (and keeps it counter_px_ms), stores the owner record
 * when given, and answers {2, counter, value}. A counter that does not
 * parse leaves that master alone ({0}). Never in a group: its writes take
 * memory where its first write may not be the one Redis checks. */
extern mscript script_renew;
/* KEYS key, key<SEP>fence, key<SEP>owner, marker; ARGV guard. {pttl, counter,
 * owner_len, value .. owner} when present (counter 0 when it does not parse;
 * the owner only where the owner key belongs to the stored value), {-2}
 * when absent. */
extern mscript script_inspect;

/* KEYS key, key<SEP>owner, marker; ARGV token, value, guard. Where key holds
 * exactly token: replaces what follows the first two words (an election's
 * candidate and since) in the owner key of the token, keeping the lock's
 * expiry, and answers {1}; {-1} another value holds key; {0} absent. */
extern mscript script_proclaim;

/* KEYS key; ARGV channel[, suffix]. Publishes key (and suffix) on channel
 * (an election's grant or proclaim, so that watches on every instance look
 * at once; with suffix "\n\ntoken", a held stream's heartbeat). */
extern mscript script_publish;

/* KEYS NAME<SEP>limit, marker; ARGV limit, px_ms, guard. limit "0" reads:
 * {1, stored or 0}; "-1" keeps a stored one for at least px_ms. Else where no other limit is stored: stores it (or
 * keeps it for at least px_ms) and answers {1, limit}; where another is
 * stored: {0, that limit}, changing nothing. */
extern mscript script_sem_limit;

/* KEYS key, key<SEP>owner; ARGV value, mode, channel.
 * mode "=": deletes key (and its owner key) where it holds exactly value;
 * mode "~": where it holds value or value followed by a space (any grant of a caller's token: what
 * DELETE and Dapr's unlock send). On delete, publishes "key\nvalue" (the
 * value deleted: a held stream on another instance learns its token was
 * released) on channel unless it is empty (the counter expires by itself, ttl + keep after the grant:
 * shortening it here cost every release two more commands). {1, deleted
 * value} deleted, -1 another value holds the key, 0 absent. redo_when_back: a
 * master that misses it runs it when it is back, so a grant it may hold never
 * outlives the release by a TTL; but the replay is script_release_replay,
 * which matches the exact value only: replayed later, "~" could delete a
 * newer grant of the same caller token (a Dapr lockOwner is reused). So for
 * a "~" release the engine also sends, to every master that missed it, a
 * release of each exact value the others deleted (redlock.c). */
extern mscript script_release;
extern mscript script_release_replay;

/* KEYS key, key<SEP>owner, key<SEP>fence; ARGV channel. An operator's force
 * release: deletes key and its owner key whatever value holds it, and
 * publishes "key\n\2value" on channel unless it is empty (the byte 2: a held
 * stream of that value ends "lost", reason "forced"). The counter stays, so
 * the next grant's fence is larger. {1, counter, owner_len, value .. owner}
 * deleted (as script_inspect's), {0} absent. Not replayed: a master that
 * misses it keeps the key until its ttl, one vote short of a majority. */
extern mscript script_force;

/* KEYS marker; ARGV action, run_id, window_us, persists.
 * action "read": nothing changes. "pending": creates a pending marker where
 * there is none. "promote": a pending marker becomes ready with until 0.
 * "restore": where there is no marker, a ready one with until = now + window
 * (the master lost its data). "observe": when run_id differs from the
 * marker's, records it, and unless persists is "1" (appendonly with
 * appendfsync always), pushes until to at least now + window.
 * Answers {state, ms_left}: state 0 no marker, 1 pending, 2 ready. */
extern mscript script_marker;

/* Listings (listing.h). Neither writes; both are guarded (a master in
 * quarantine gives no page and no vote).
 * script_list_scan: KEYS marker; ARGV cursor, after, count, pattern, limit,
 * kind, prefix_len, guard. SCANs (MATCH pattern, COUNT the names still
 * wanted, at most SCRIPT_LIST_SCAN_COUNT) from cursor, for at most limit
 * names and at most 4 + limit/25 calls of SCAN; with after (not ""), the
 * first call's COUNT is count, and of its batch only names after after
 * (bytewise) count: the rest of a batch a page ended inside. A name is a key less its first
 * prefix_len bytes (and, for kind 'e', its RULES_SEP election, for 's' its
 * RULES_SEP limit), holding no RULES_SEP; for kind 'l' only a key with a
 * fence counter (one redlockd granted). A batch that would overflow the
 * page is left whole for the next, unless it is the page's first: then the
 * page takes its first names in sorted order and ends after the last.
 * Answers {0, "<cursor>\n<after>\n<name>\n<name>..."}: where the next page
 * starts (cursor "0", after "": the scan is over).
 * script_list_check: KEYS marker; ARGV kind, key..., guard. For kind 'x',
 * whether each key exists: one "0" or "1" per key, no separator. For kind 'l'
 * or 'e', per key (the lock's): "-2" when absent, else "<pttl> <counter>
 * <value_len> <owner_len> <value><owner>" (as script_inspect's); for 's',
 * per key (the semaphore's, without a suffix): "<limit>" and for each slot
 * below it (at most SCRIPT_LIST_SLOTS_MAX) " <pttl> <value_len> <value>"
 * (pttl -2, length 0: free). Answers {0, the records joined by "\n"}. */
#define SCRIPT_LIST_SCAN_COUNT "100"
#define SCRIPT_LIST_SLOTS_MAX "64"   /* SEM_LIMIT_MAX */
extern mscript script_list_scan;
extern mscript script_list_check;

/* The group script (master.h: group commit): extend, inspect, release and
 * publish, any mix of them in one call, each answering what it would
 * alone. Scripts that take memory (acquire, settle, proclaim, sem_limit)
 * and the marker script always go alone: Redis refuses a script's write
 * over maxmemory only at its first write, which in a group call may be
 * another command's. */
extern mscript script_group;

/* Computes every script's SHA-1 and builds the group script; call once
 * before use. */
void scripts_init(void);

#endif
