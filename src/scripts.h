/* scripts.h - the Lua scripts the engine runs on every master.
 *
 * Keys of one lock, for key = <key_prefix><name> ('#' never occurs in a
 * name, so these never collide with another lock's key):
 *   key                  the lock: value = the holder's token, PX = ttl
 *   key#fence            the fence counter; no expiry, survives the lock
 *   key#holder_fence     the fence of the current holder; same expiry as key
 */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

#include "master.h"

#define SCRIPT_FENCE_SUFFIX "#fence"
#define SCRIPT_HOLDER_SUFFIX "#holder_fence"

/* KEYS key, key#fence, key#holder_fence; ARGV token, ttl_ms.
 * {1, counter} when SET NX took the key (the counter is incremented, or seeded
 * from the master's clock in microseconds when absent); {0, pttl} when the key
 * is held (pttl -1: no expiry). */
extern mscript script_acquire;
/* KEYS key, key#fence, key#holder_fence; ARGV token, fence.
 * Raises the counter to at least fence; 1 when key holds token (its holder
 * fence is then set to fence), else 0. */
extern mscript script_raise;
/* KEYS key, key#holder_fence; ARGV token, ttl_ms.
 * {1, holder_fence} after resetting both expiries to ttl_ms; {-1} when another
 * token holds key; {0} when key is absent. */
extern mscript script_extend;
/* KEYS key, key#holder_fence; ARGV token. 1 deleted, -1 another token holds
 * the key, 0 absent. */
extern mscript script_release;
/* KEYS key. {pttl, value} when present, {-2} when absent. */
extern mscript script_inspect;

/* Computes every script's SHA-1; call once before use. */
void scripts_init(void);

#endif
