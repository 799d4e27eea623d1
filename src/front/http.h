/* http.h - the HTTP layer: libmicrohttpd, routing, auth, body limits, and
 * JSON answers, served by the event loops of the master layer.
 *
 * Each loop (--threads of them) runs its own libmicrohttpd daemon in
 * external epoll mode on the loop's thread for every TCP listener (all
 * loops listening on each address with SO_REUSEPORT), beside that loop's
 * own master connections and engine; a Unix socket (--listen unix:PATH)
 * has one daemon, on loop 0.
 * A request is parsed and answered on the loop that accepted it; its
 * engine is that loop's for an inspection, and the name's owner loop's
 * (by hash) for an acquire, extension or release, so that every write of a
 * name reaches each master over one connection, in one order (http_engine_for).
 * Once its body is read the connection is suspended and the request handed
 * to that engine, whose callback resumes it with the answer. A granted
 * acquire with "hold" becomes a held stream (hold.h): its 201 body is read
 * from the hold, and the connection is suspended whenever the hold has
 * nothing to say, until the hold wakes it (from the renewer's thread:
 * libmicrohttpd allows a resume from any thread).
 *
 * The recipes ride on the same machinery: a campaign (POST /elections) is
 * a hold without a grant yet (hold_campaign), answered at once; a watch
 * (GET /elections?watch=true) streams from an election_watch the same way;
 * an election's GET, DELETE and PUT are engine requests on its lock
 * NAME<SEP>election; a semaphore request is a sem_submit task of several
 * engine requests (semaphore.h), answered through sem_done.
 *
 * Shared between loops, and who guards it: the registry of connections and
 * the count of open requests (reg_lock, also taken by the watcher thread,
 * which notices clients that left and slow requests), the hold set (its own
 * mutex), metrics (atomic). The server borrows the engines, pools and
 * metrics; it owns its request contexts, its daemons and the hold set.
 */
#ifndef RL_HTTP_H
#define RL_HTTP_H

#include <stddef.h>

#include "base/base.h"
#include "masters/masters.h"
#include "engine/engine.h"

typedef struct http_server http_server;

#define HTTP_MAX_LOOPS 64

/* One event loop: a master pool (its thread runs the loop) and the engine
 * over it. */
typedef struct http_loop {
    rl_engine *engine;
    mpool *pool;
} http_loop;

/* The loop (0..nloops) that owns name: every acquire, extension and
 * release of it goes to that loop's engine, whichever API it came by. */
int http_loop_of(const char *name, int nloops);

/* HTTPS (http_tls.c), the process's: the certificate and key of cfg
 * (--tls-cert-file, --tls-key-file) and the client CA
 * (--tls-client-ca-file), read before http_start; a file that cannot be
 * read, or a key that is not the certificate's, is a bad value. Does
 * nothing when HTTPS is off. 0, or -1 with err (one line). */
int http_tls_load(const conf *cfg, char *err, size_t errlen);
/* SIGHUP, from the main thread: reads the certificate and key again and
 * puts them in force for every handshake from now on; open connections
 * keep theirs and are not touched. On failure (-1, err) the ones in force
 * stay. 0 when HTTPS is off. The client CA is read at start only. */
int http_reload_tls(const conf *cfg, char *err, size_t errlen);
/* Lets the certificate go, after http_stop. */
void http_tls_free(void);

/* Serves every cfg->listen: a TCP listener once per loop (SO_REUSEPORT),
 * over HTTPS when cfg says so (http_tls_load first); a Unix socket
 * (unix:PATH) on loop 0 only, its file made with --listen-mode after a
 * stale one is removed (another process's, or a file that is not a
 * socket, is refused), and removed again at stop. The pools must be
 * started. NULL with err on failure. */
http_server *http_start(const conf *cfg, const http_loop *loops, int nloops, metrics *m, char *err,
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
