/* engine/engine.h - the engine floor: Redlock itself. Acquire, extend,
 * release, inspect and the rest by majority vote of the masters, with
 * fences, waiting and the admission queue. The only header of engine/ that
 * another folder includes (docs/design.md, "The floors"); engine/ uses
 * masters/ and base/.
 *
 * What it offers, one part each:
 *   redlock.h  the engine: requests submitted from any thread, run on the
 *              pool's loop, answered once through the caller's callback
 *   quorum.h   the pure arithmetic: majorities, validity, drift, fences,
 *              retry timing
 *
 * Who owns what: an engine and its tasks belong to its pool's loop thread;
 * rl_submit, rl_cancel, rl_finish, rl_engine_sync and rl_engine_drain may
 * be called from any thread and post to it. redlock_int.h is private to
 * this folder.
 */
#ifndef RL_ENGINE_H
#define RL_ENGINE_H

#include "quorum.h"
#include "redlock.h"

#endif
