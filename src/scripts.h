/* scripts.h - the Lua scripts the engine runs on every master.
 *
 * Keys of one lock, for key = <key_prefix><name> ('#' never occurs in a
 * name, so these never collide with another lock's key):
 *   key                  the lock: value = the holder's token, PX = ttl
 *   key#fence            the fence counter; no expiry, survives the lock
 *
 * While key holds a token on a master, that master's counter is the holder's
 * fence there: the counter moves only when SET NX takes the key (or when the
 * holder's own grant raises it), and SET NX cannot take a held key. So the
 * holder's fence needs no key of its own.
 */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

#include "master.h"

#define SCRIPT_FENCE_SUFFIX "#fence"

/* KEYS key, key#fence; ARGV token, ttl_ms.
 * {1, counter} when SET NX took the key (the counter is incremented, or seeded
 * from the master's clock in microseconds when absent); {0, pttl} when the key
 * is held (pttl -1: no expiry). */
extern mscript script_acquire;
/* KEYS key, key#fence; ARGV token, fence.
 * Raises the counter to at least fence; 1 when key still holds token with
 * time left, else 0. */
extern mscript script_raise;
/* KEYS key, key#fence; ARGV token, ttl_ms.
 * {1, counter} after resetting the key's expiry to ttl_ms; {-1} when another
 * token holds key; {0} when key is absent. */
extern mscript script_extend;
/* KEYS key; ARGV token. 1 deleted, -1 another token holds the key, 0 absent.
 * Both releases are redo_when_back: a master that misses one runs it when it
 * is back, so a token it may hold never outlives the release by a TTL. */
extern mscript script_release;
/* The same, and on delete publishes key on SCRIPT_NOTICE_CHANNEL so that
 * waiters on every redlockd using this master try at once. */
extern mscript script_release_notify;
#define SCRIPT_NOTICE_CHANNEL "redlockd:released"
/* KEYS key. {pttl, value} when present, {-2} when absent. */
extern mscript script_inspect;

/* Computes every script's SHA-1; call once before use. */
void scripts_init(void);

#endif
