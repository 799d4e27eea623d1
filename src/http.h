/* http.h - the HTTP layer: libmicrohttpd with its thread pool, routing,
 * auth, body limits, and JSON answers.
 *
 * A lock request never blocks a worker thread: once its body is read, the
 * connection is suspended and the request handed to the engine; the engine's
 * callback stores the result and resumes the connection, and the worker that
 * picks it up sends the answer. A granted acquire with "hold" becomes a
 * held stream (hold.h): its 201 body is read from the hold, and the
 * connection is suspended whenever the hold has nothing to say, until the
 * hold wakes it. The server borrows the engine, pool and metrics; it owns
 * its request contexts and the hold set.
 */
#ifndef RL_HTTP_H
#define RL_HTTP_H

#include <stddef.h>

#include "conf.h"
#include "master.h"
#include "metrics.h"
#include "redlock.h"

typedef struct http_server http_server;

/* Binds cfg->listen and starts serving. NULL with err on failure. */
http_server *http_start(const conf *cfg, rl_engine *e, mpool *pool, metrics *m, char *err,
                        size_t errlen);

/* Stops accepting new connections; open ones are still served. */
void http_quiesce(http_server *s);

/* Waits (up to timeout_ms) until every request under way has been answered
 * and its answer sent; past that, requests still waiting for the engine are
 * answered 503 shutting_down. Drain the engine first, so waiting acquires
 * answer 409. Returns how many were not answered in time (0 on a clean
 * drain). */
int http_drain(http_server *s, long long timeout_ms);

/* Stopping, after http_quiesce and before the engine drains: every held
 * stream releases its lock and ends with "released" (or "lost"). Waits up
 * to timeout_ms for the releases; returns how many did not answer. */
int http_end_holds(http_server *s, long long timeout_ms);

/* Closes every connection and frees the server. Call http_drain first. */
void http_stop(http_server *s);

#endif
