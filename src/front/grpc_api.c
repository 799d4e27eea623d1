/* grpc_api.c - see grpc_api.h. */
#include "grpc_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dapr_lock.pb-c.h"

#define GRPC_SERVICE "/dapr.proto.runtime.v1.Dapr/"

enum grpc_method grpc_api_method_of(const char *path)
{
    static const struct { const char *name; enum grpc_method m; } methods[] = {
        {GRPC_SERVICE "TryLockAlpha1", GRPC_M_TRY_LOCK},
        {GRPC_SERVICE "UnlockAlpha1", GRPC_M_UNLOCK},
        {GRPC_SERVICE "GetMetadata", GRPC_M_METADATA},
    };
    for (size_t i = 0; path && i < sizeof methods / sizeof methods[0]; i++)
        if (!strcmp(path, methods[i].name))
            return methods[i].m;
    return GRPC_M_UNKNOWN;
}

int grpc_api_unframe(const uint8_t *body, size_t len, size_t max_len, const uint8_t **msg,
                     size_t *msglen, char *err, size_t errlen)
{
    if (len < GRPC_PREFIX_LEN) {
        snprintf(err, errlen, "a unary call needs exactly one request message, and %s",
                 len ? "the message's 5-byte prefix is cut short" : "none came");
        return GRPC_INVALID_ARGUMENT;
    }
    if (body[0] != 0) {
        snprintf(err, errlen, body[0] == 1 ? "compressed messages are not supported"
                                           : "the message's compressed flag is neither 0 nor 1");
        return body[0] == 1 ? GRPC_UNIMPLEMENTED : GRPC_INVALID_ARGUMENT;
    }
    size_t n = (size_t)body[1] << 24 | (size_t)body[2] << 16 | (size_t)body[3] << 8 | body[4];
    if (n > max_len) {
        snprintf(err, errlen, "the request message is %zu bytes, more than the %zu allowed", n,
                 max_len);
        return GRPC_RESOURCE_EXHAUSTED;
    }
    if (len - GRPC_PREFIX_LEN != n) {
        snprintf(err, errlen, len - GRPC_PREFIX_LEN < n
                 ? "the request message is cut short (%zu of %zu bytes)"
                 : "a unary call takes one request message, and more followed the first "
                   "(%zu bytes after %zu)",
                 len - GRPC_PREFIX_LEN < n ? len - GRPC_PREFIX_LEN : len - GRPC_PREFIX_LEN - n, n);
        return GRPC_INVALID_ARGUMENT;
    }
    *msg = body + GRPC_PREFIX_LEN;
    *msglen = n;
    return GRPC_OK;
}

/* A decoded message must pack back to its own length: protobuf-c ends a
 * string at its first NUL byte, so "a\0b" would become "a" without a word;
 * the same check refuses a field sent twice or in a padded encoding, which
 * no protobuf library sends. */
static bool decoded_whole(const ProtobufCMessage *m, size_t len)
{
    return protobuf_c_message_get_packed_size(m) == len;
}

static const char bad_message[] =
    "the request is not a valid %s message (protobuf), or holds a NUL byte in a string";

int grpc_api_parse(enum grpc_method m, const uint8_t *msg, size_t len, const char *stores,
                   const api_limits *lim, rl_request *req, char *err, size_t errlen)
{
    const char *code;
    int rc = -1;
    memset(req, 0, sizeof *req);
    if (m == GRPC_M_TRY_LOCK) {
        Dapr__Proto__Runtime__V1__TryLockRequest *r =
            dapr__proto__runtime__v1__try_lock_request__unpack(NULL, len, msg);
        if (!r || !decoded_whole(&r->base, len))
            snprintf(err, errlen, bad_message, "TryLockRequest");
        else
            rc = api_dapr_request(false, r->store_name, stores, r->resource_id, r->lock_owner,
                                  r->expiry_in_seconds, lim, req, &code, err, errlen);
        if (r)
            dapr__proto__runtime__v1__try_lock_request__free_unpacked(r, NULL);
    } else if (m == GRPC_M_UNLOCK) {
        Dapr__Proto__Runtime__V1__UnlockRequest *r =
            dapr__proto__runtime__v1__unlock_request__unpack(NULL, len, msg);
        if (!r || !decoded_whole(&r->base, len))
            snprintf(err, errlen, bad_message, "UnlockRequest");
        else
            rc = api_dapr_request(true, r->store_name, stores, r->resource_id, r->lock_owner, 0,
                                  lim, req, &code, err, errlen);
        if (r)
            dapr__proto__runtime__v1__unlock_request__free_unpacked(r, NULL);
    } else if (m == GRPC_M_METADATA) {
        /* Its fields, if a newer Dapr adds any, are of no interest. */
        Dapr__Proto__Runtime__V1__GetMetadataRequest *r =
            dapr__proto__runtime__v1__get_metadata_request__unpack(NULL, len, msg);
        if (!r)
            snprintf(err, errlen, bad_message, "GetMetadataRequest");
        else
            rc = 0;
        if (r)
            dapr__proto__runtime__v1__get_metadata_request__free_unpacked(r, NULL);
    } else {
        snprintf(err, errlen, "no such method");
        return GRPC_UNIMPLEMENTED;
    }
    return rc == 0 ? GRPC_OK : GRPC_INVALID_ARGUMENT;
}

/* Packs m behind the 5-byte prefix of a gRPC message. */
static int frame(const ProtobufCMessage *m, uint8_t **out, size_t *outlen)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(GRPC_PREFIX_LEN + n);
    if (!b)
        return -1;
    b[0] = 0;
    b[1] = (uint8_t)(n >> 24);
    b[2] = (uint8_t)(n >> 16);
    b[3] = (uint8_t)(n >> 8);
    b[4] = (uint8_t)n;
    protobuf_c_message_pack(m, b + GRPC_PREFIX_LEN);
    *out = b;
    *outlen = GRPC_PREFIX_LEN + n;
    return 0;
}

int grpc_api_answer(enum grpc_method m, const rl_result *res, uint8_t **out, size_t *outlen,
                    char *err, size_t errlen)
{
    bool unlock = m == GRPC_M_UNLOCK;
    *out = NULL;
    *outlen = 0;
    /* The same split as api_dapr_result_json: what is a 500 there is an
     * error status here, the rest is an answer. */
    if (res->outcome == RL_NO_QUORUM || res->outcome == RL_SHUTTING_DOWN || res->outcome == RL_OVERLOADED ||
        (!unlock && res->outcome == RL_INTERNAL)) {
        char why[400];
        if (res->outcome == RL_NO_QUORUM)
            api_no_quorum_message(res, why, sizeof why);
        snprintf(err, errlen, "%s: %s", unlock ? "failed to release lock" : "failed to try acquiring lock",
                 res->outcome == RL_NO_QUORUM        ? why
                 : res->outcome == RL_SHUTTING_DOWN ? "the lock service is stopping"
                 : res->outcome == RL_OVERLOADED    ? "the lock service is overloaded (--max-inflight), retry later"
                                                    : "internal error");
        /* (overloaded is never success:false, which reads as held by another) */
        return res->outcome == RL_SHUTTING_DOWN || res->outcome == RL_OVERLOADED ? GRPC_UNAVAILABLE : GRPC_INTERNAL;
    }
    int rc;
    if (!unlock) {
        Dapr__Proto__Runtime__V1__TryLockResponse r = DAPR__PROTO__RUNTIME__V1__TRY_LOCK_RESPONSE__INIT;
        r.success = res->outcome == RL_OK;
        rc = frame(&r.base, out, outlen);
    } else {
        Dapr__Proto__Runtime__V1__UnlockResponse r = DAPR__PROTO__RUNTIME__V1__UNLOCK_RESPONSE__INIT;
        r.status = res->outcome == RL_OK ? DAPR__PROTO__RUNTIME__V1__UNLOCK_RESPONSE__STATUS__SUCCESS
                   : res->outcome != RL_NOT_HELD
                       ? DAPR__PROTO__RUNTIME__V1__UNLOCK_RESPONSE__STATUS__INTERNAL_ERROR
                   : res->reason == RL_REASON_HELD_BY_OTHER
                       ? DAPR__PROTO__RUNTIME__V1__UNLOCK_RESPONSE__STATUS__LOCK_BELONGS_TO_OTHERS
                       : DAPR__PROTO__RUNTIME__V1__UNLOCK_RESPONSE__STATUS__LOCK_DOES_NOT_EXIST;
        rc = frame(&r.base, out, outlen);
    }
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        return GRPC_INTERNAL;
    }
    return GRPC_OK;
}

#define GRPC_MAX_STORES 128   /* --dapr-stores holds at most 255 bytes */

int grpc_api_metadata(const char *stores, const char *version, uint8_t **out, size_t *outlen)
{
    Dapr__Proto__Runtime__V1__GetMetadataResponse r = DAPR__PROTO__RUNTIME__V1__GET_METADATA_RESPONSE__INIT;
    Dapr__Proto__Runtime__V1__RegisteredComponents comps[GRPC_MAX_STORES];
    Dapr__Proto__Runtime__V1__RegisteredComponents *ptrs[GRPC_MAX_STORES];
    char names[GRPC_MAX_STORES][API_DAPR_STORE_MAX + 1], prefix[API_DAPR_STORE_MAX + 1];
    char rv[64];
    size_t n = 0;
    for (const char *p = stores; n < GRPC_MAX_STORES && (p = api_dapr_store_next(p, names[n], prefix));) {
        Dapr__Proto__Runtime__V1__RegisteredComponents c = DAPR__PROTO__RUNTIME__V1__REGISTERED_COMPONENTS__INIT;
        comps[n] = c;
        comps[n].name = names[n];
        comps[n].type = (char *)"lock.redlockd";
        comps[n].version = (char *)"v1";
        ptrs[n] = &comps[n];
        n++;
    }
    snprintf(rv, sizeof rv, "redlockd-%s", version);
    r.id = (char *)"redlockd";
    r.runtime_version = rv;
    r.n_registered_components = n;
    r.registered_components = ptrs;
    return frame(&r.base, out, outlen);
}

void grpc_api_percent_encode(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (!outlen)
        return;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
        if (o + (plain ? 1 : 3) >= outlen)
            break;
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
}
