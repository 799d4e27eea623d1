/* masters/masters.h - the master floor: the connections to N independent
 * Redis masters, the scripts run on them, and the restart quarantine kept
 * on them. The only header of masters/ that another folder includes
 * (docs/design.md, "The floors"); masters/ uses base/ only.
 *
 * What it offers, one part each:
 *   master.h      the pool: one connection per master (and one for
 *                 notices), batches of one script to a set of masters,
 *                 each master's status
 *   scripts.h     the Lua scripts and the keys they touch
 *   quarantine.h  the pure rules of restart quarantine
 *   marker.h      the cluster check that keeps every master's marker right
 *
 * Who owns what: a pool and everything it holds belong to its loop's
 * thread; work reaches it through loop_post, and mpool_status and
 * mpool_notice_links may be read from any thread. What the pool tells the
 * floors above it goes through function pointers they hand down: a
 * batch's done callback (mpool_done_fn, given with each mpool_eval) and
 * the notice hook (mpool_set_notice, the engine's); the pool never
 * includes a higher floor. master_int.h and sha1.h are private to this
 * folder.
 */
#ifndef RL_MASTERS_H
#define RL_MASTERS_H

#include "marker.h"
#include "master.h"
#include "quarantine.h"
#include "scripts.h"

#endif
