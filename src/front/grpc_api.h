/* grpc_api.h - Dapr's lock API over gRPC without the server: which method a
 * request path names, the length-prefixed message of a unary call, decoding
 * a request into the engine's rl_request (with the Dapr HTTP routes' rules:
 * api_dapr_request), and encoding answers, with the one table from engine
 * outcomes to gRPC status codes.
 *
 * Pure (protobuf-c over the code generated from api/dapr_lock.proto, no
 * sockets), so the unit tests hold every bad-input case. Buffers returned
 * through uint8_t ** are malloc'd; the caller frees.
 */
#ifndef RL_GRPC_API_H
#define RL_GRPC_API_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "engine/engine.h"

enum grpc_method {
    GRPC_M_UNKNOWN,
    GRPC_M_TRY_LOCK,   /* /dapr.proto.runtime.v1.Dapr/TryLockAlpha1 */
    GRPC_M_UNLOCK,     /* /dapr.proto.runtime.v1.Dapr/UnlockAlpha1 */
    GRPC_M_METADATA,   /* /dapr.proto.runtime.v1.Dapr/GetMetadata */
};

/* The gRPC status codes redlockd answers (grpc/doc/statuscodes.md). */
enum grpc_code {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_UNAUTHENTICATED = 16,
};

#define GRPC_PREFIX_LEN 5   /* compressed flag (1 byte), message length (4, big-endian) */

enum grpc_method grpc_api_method_of(const char *path);

/* A unary call's request body (body, len) must be exactly one message,
 * uncompressed, of at most max_len bytes. Sets *msg and *msglen to it and
 * returns GRPC_OK, or a status with err one sentence. */
int grpc_api_unframe(const uint8_t *body, size_t len, size_t max_len, const uint8_t **msg,
                     size_t *msglen, char *err, size_t errlen);

/* Decodes the message of method m (TryLock or Unlock) for the stores served
 * (comma-separated) into req. GetMetadata's request is only checked to be
 * a message. Returns GRPC_OK, or GRPC_INVALID_ARGUMENT with err (bad
 * protobuf, or what the Dapr HTTP routes refuse with ERR_MALFORMED_REQUEST
 * or ERR_LOCK_STORE_NOT_FOUND: Dapr's own gRPC codes for them). */
int grpc_api_parse(enum grpc_method m, const uint8_t *msg, size_t len, const char *stores,
                   const api_limits *lim, rl_request *req, char *err, size_t errlen);

/* The answer to a finished TryLock or Unlock, as the Dapr HTTP routes give
 * it (api_dapr_result_json): GRPC_OK with *out the framed response message,
 * or GRPC_INTERNAL (no majority, as Dapr's ErrTryLockFailed/ErrUnlockFailed)
 * or GRPC_UNAVAILABLE (stopping: try another instance) with err. *out is
 * NULL unless GRPC_OK; GRPC_INTERNAL also when out of memory. */
int grpc_api_answer(enum grpc_method m, const rl_result *res, uint8_t **out, size_t *outlen,
                    char *err, size_t errlen);

/* GetMetadata's framed answer: id "redlockd", the runtime version, and each
 * store as a lock.redlockd component (as GET /v1.0/metadata). -1 on OOM. */
int grpc_api_metadata(const char *stores, const char *version, uint8_t **out, size_t *outlen);

/* A grpc-message value: percent-encodes '%' and bytes outside 0x20..0x7e,
 * as the gRPC wire spec asks; truncates to fit outlen. */
void grpc_api_percent_encode(const char *in, char *out, size_t outlen);

#endif
