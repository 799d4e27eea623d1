/* front/front.h - the top floor: the service's faces. HTTP (the native
 * routes, Dapr's lock API over HTTP, /healthz, /readyz, /metrics and the
 * dashboard), Dapr's lock API over gRPC, and the --health-check probe. The
 * only header of front/ that another file of src/ includes (main.c);
 * front/ uses every lower floor.
 *
 * What it offers, one part each:
 *   http.h         the HTTP layer, served by the loops of the master pools
 *   grpc.h         the gRPC layer, on a thread of its own
 *   healthcheck.h  `redlockd --health-check`
 *   auth.h         who calls and what they may do: principals, tokens,
 *                  client certificates (--principals-file)
 *
 * Who owns what: a request belongs to the loop that accepted it until it is
 * handed to an engine, whose callback resumes it there; a gRPC call belongs
 * to the gRPC thread. The route table (http_routes.c) is constant, read by
 * every loop. A request's cleanup handlers are registered and run on its
 * loop only (http_on_cleanup, http_on_completed); each tears down what
 * registered it (a hold: its mutex-guarded set; an engine call: rl_finish,
 * which posts to the engine's loop), never another's. api.h (the HTTP contract, pure), semaphore_api.h,
 * grpc_api.h, http_int.h and grpc_int.h are private to this folder.
 */
#ifndef RL_FRONT_H
#define RL_FRONT_H

#include "auth.h"
#include "grpc.h"
#include "healthcheck.h"
#include "http.h"

#endif
