/* listing_run.h - a page of a listing, run on a pool's loop (listing.c;
 * what it lists: listing.h). */
#ifndef RL_LISTING_RUN_H
#define RL_LISTING_RUN_H

#include "base/base.h"
#include "listing.h"
#include "masters/masters.h"
#include "engine/engine.h"

/* On the pool's loop thread, once: res->outcome RL_OK with the page's
 * JSON body (malloc'd, the callee's); RL_NO_QUORUM when fewer than a
 * majority answered a read, or too few masters were left to scan (res
 * says why, as the engine's answers do); RL_INTERNAL when memory ran out
 * (body NULL but for RL_OK). */
typedef void (*list_done_fn)(void *arg, const rl_result *res, char *body);

/* Any thread: runs the page req on pool's loop (cfg lives as long as the
 * pool). 0, or -1 when it could not be posted (done never runs). */
int list_run(mpool *pool, const conf *cfg, const list_request *req, list_done_fn done, void *arg);

#endif
