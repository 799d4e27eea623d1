/* recipes/recipes.h - the recipes floor: what is built from the engine's
 * locks. Held streams, elections and their watches, counting semaphores,
 * and the listings of what a majority holds. The only header of recipes/
 * that another folder includes (docs/design.md, "The floors"); recipes/
 * uses engine/, masters/ and base/.
 *
 * What it offers, one part each:
 *   hold.h            held streams: a lock renewed for as long as its
 *                     client stays, told as events
 *   election.h        the pure parts of leader election
 *   election_watch.h  an election's leader as a stream of events
 *   semaphore.h       counting semaphores over slot locks
 *   listing.h         the pure parts of a listing: cursors, pages, answers
 *   listing_run.h     a page of a listing, run on a pool's loop
 *
 * Who owns what: a hold set owns its holds under one mutex, and its own
 * thread (the renewer) starts their extensions; the engine's loop answers
 * them. A watch owns its pending events under its own mutex. A semaphore's
 * acquire runs each step on the engine that owns that slot's name, and
 * its retries on the pool it was given. The connection stays the front's:
 * a hold or a watch tells it that something is ready through the wake
 * function it was handed (hold_wake_fn, or a watch's wake), never by
 * calling up. hold_int.h is private to this folder.
 */
#ifndef RL_RECIPES_H
#define RL_RECIPES_H

#include "election.h"
#include "election_watch.h"
#include "hold.h"
#include "listing.h"
#include "listing_run.h"
#include "semaphore.h"

#endif
