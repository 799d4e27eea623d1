/* grpc.h - Dapr's lock API over gRPC (--dapr-grpc-listen): the
 * TryLockAlpha1, UnlockAlpha1 and GetMetadata calls of
 * dapr.proto.runtime.v1.Dapr, which Dapr's Python, Go, Java and .NET SDKs
 * lock with (the JavaScript SDK too, in gRPC mode).
 *
 * HTTP/2 in cleartext with prior knowledge (h2c, as gRPC clients speak it
 * without TLS), or over TLS with ALPN h2 (OpenSSL, grpc_tls.c) on a TCP
 * listener when --tls-cert-file is set, by nghttp2; on TCP or a Unix socket
 * (unix:PATH: its file as the HTTP listeners make theirs, listener.h);
 * messages by protobuf-c (grpc_api.h). One thread
 * of its own runs an epoll loop over the listening socket, the connections
 * and an eventfd; a call is decoded there and handed to the same engine
 * the Dapr HTTP routes use for its name (http_loop_of), with the same
 * request (api_dapr_request: stores, name rules, limits) and the same auth
 * (--auth-token-file, sent as dapr-api-token metadata; a principals file's
 * tokens and, over TLS with --tls-client-ca-file, `cert` principals).
 *
 * Shared with other threads, and who guards it: the queue of answered calls
 * (mu): the engines' callbacks (on their loops' threads) put a call's
 * result there and wake the thread by the eventfd; only the gRPC thread
 * touches connections, streams and nghttp2 sessions. The server borrows the
 * engines; it owns its calls, connections and sockets.
 *
 * Bounds: --max-connections connections, --max-connections-per-ip from
 * one address (the gRPC listener's own count; more are closed at once, in
 * O(1); a Unix socket's clients have no address and only the first bound), 32 concurrent streams per connection (SETTINGS; more are
 * refused), 16 KiB of headers per call, 4 KiB per request message
 * (RESOURCE_EXHAUSTED beyond). Under --request-timeout-ms: a call that has
 * not arrived whole, or whose answer the client has not taken (its window
 * held at 0, or not reading), is reset; a connection without a complete
 * call with the token (or any, without --auth-token-file) within it of its
 * start is closed, whatever else it sends, and so is one whose socket
 * takes nothing that long, or whose only call was reset for its answer. A
 * served connection is closed after five minutes without a call's frame
 * (HEADERS, DATA; PING, SETTINGS and WINDOW_UPDATE do not count) and with
 * no call open (with GOAWAY: clients reconnect).
 */
#ifndef RL_GRPC_H
#define RL_GRPC_H

#include <stddef.h>

#include "base/base.h"
#include "http.h"

typedef struct grpc_server grpc_server;

#define GRPC_MAX_STREAMS 32
#define GRPC_MAX_HEADER_BYTES 16384
#define GRPC_MAX_MESSAGE_BYTES 4096
#define GRPC_IDLE_TIMEOUT_MS 300000

/* Binds cfg->dapr_grpc_listen and starts serving on a thread of its own
 * over the engines of loops (borrowed; they must outlive grpc_stop). NULL
 * with err on failure. */
grpc_server *grpc_start(const conf *cfg, const http_loop *loops, int nloops, char *err,
                        size_t errlen);

/* SIGHUP: the certificate and key read again and put in force for every
 * handshake from now on; open connections keep theirs. 0 (also when s is
 * NULL or serves no TLS), or -1 with err: the pair in force stays. Main
 * thread. */
int grpc_reload_tls(grpc_server *s, const conf *cfg, char *err, size_t errlen);

/* Stops accepting and tells every connection (GOAWAY) that no new calls
 * are taken; calls under way still answer. NULL does nothing. */
void grpc_quiesce(grpc_server *s);

/* Waits (up to timeout_ms) until every call handed to an engine has been
 * answered and sent, then closes every connection and ends the thread.
 * Returns how many calls were still waiting for an engine. Call after the
 * engines drained, before they are freed. NULL returns 0. */
int grpc_stop(grpc_server *s, long long timeout_ms);

/* Frees the server; after the pools have stopped (an engine may still call
 * back until then). NULL does nothing. */
void grpc_free(grpc_server *s);

#endif
