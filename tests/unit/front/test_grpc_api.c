/* Unit tests of grpc_api.c: Dapr's lock API over gRPC without a socket.
 * Messages are built and read with the protobuf-c code generated from
 * api/dapr_lock.proto, as a client's library would send them. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dapr_lock.pb-c.h"
#include "front/grpc_api.h"

static const api_limits lim = {30000, 3600000, 60000, NULL};
static const char stores[] = "lockstore,orders";

/* A TryLockRequest packed as a client sends it (no prefix). */
static size_t pack_try(const char *store, const char *res, const char *owner, int expiry,
                       uint8_t *out)
{
    Dapr__Proto__Runtime__V1__TryLockRequest r = DAPR__PROTO__RUNTIME__V1__TRY_LOCK_REQUEST__INIT;
    r.store_name = (char *)store;
    r.resource_id = (char *)res;
    r.lock_owner = (char *)owner;
    r.expiry_in_seconds = expiry;
    return dapr__proto__runtime__v1__try_lock_request__pack(&r, out);
}

Test(grpc_api, methods_of_the_dapr_service_only)
{
    cr_assert_eq(grpc_api_method_of("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"), GRPC_M_TRY_LOCK);
    cr_assert_eq(grpc_api_method_of("/dapr.proto.runtime.v1.Dapr/UnlockAlpha1"), GRPC_M_UNLOCK);
    cr_assert_eq(grpc_api_method_of("/dapr.proto.runtime.v1.Dapr/GetMetadata"), GRPC_M_METADATA);
    cr_assert_eq(grpc_api_method_of("/dapr.proto.runtime.v1.Dapr/GetState"), GRPC_M_UNKNOWN);
    cr_assert_eq(grpc_api_method_of("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1/"), GRPC_M_UNKNOWN);
    cr_assert_eq(grpc_api_method_of("/other.Dapr/TryLockAlpha1"), GRPC_M_UNKNOWN);
    cr_assert_eq(grpc_api_method_of(""), GRPC_M_UNKNOWN);
}

Test(grpc_api, unframe_takes_exactly_one_uncompressed_message)
{
    const uint8_t *m;
    size_t n;
    char err[200];
    uint8_t one[] = {0, 0, 0, 0, 2, 0x08, 0x01};
    cr_assert_eq(grpc_api_unframe(one, sizeof one, 4096, &m, &n, err, sizeof err), GRPC_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(m, one + 5);
    uint8_t empty[] = {0, 0, 0, 0, 0};
    cr_assert_eq(grpc_api_unframe(empty, 5, 4096, &m, &n, err, sizeof err), GRPC_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(grpc_api_unframe(one, 0, 4096, &m, &n, err, sizeof err), GRPC_INVALID_ARGUMENT);
    cr_assert_eq(grpc_api_unframe(one, 3, 4096, &m, &n, err, sizeof err), GRPC_INVALID_ARGUMENT);
    cr_assert_eq(grpc_api_unframe(one, 6, 4096, &m, &n, err, sizeof err), GRPC_INVALID_ARGUMENT);
    cr_assert(strstr(err, "cut short"), "%s", err);
    uint8_t two[] = {0, 0, 0, 0, 1, 0x08, 0, 0, 0, 0, 0};
    cr_assert_eq(grpc_api_unframe(two, sizeof two, 4096, &m, &n, err, sizeof err), GRPC_INVALID_ARGUMENT);
    uint8_t zipped[] = {1, 0, 0, 0, 1, 0x08};
    cr_assert_eq(grpc_api_unframe(zipped, sizeof zipped, 4096, &m, &n, err, sizeof err),
                 GRPC_UNIMPLEMENTED);
    uint8_t flag[] = {2, 0, 0, 0, 1, 0x08};
    cr_assert_eq(grpc_api_unframe(flag, sizeof flag, 4096, &m, &n, err, sizeof err), GRPC_INVALID_ARGUMENT);
    uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff, 0x08};
    cr_assert_eq(grpc_api_unframe(huge, sizeof huge, 4096, &m, &n, err, sizeof err),
                 GRPC_RESOURCE_EXHAUSTED);
}

Test(grpc_api, try_lock_is_the_dapr_http_request)
{
    uint8_t buf[1024];
    char err[300];
    rl_request req;
    size_t n = pack_try("orders", "a.b-c_1:x", "o-1", 7, buf);
    cr_assert_eq(grpc_api_parse(GRPC_M_TRY_LOCK, buf, n, stores, &lim, &req, err, sizeof err), GRPC_OK, "%s", err);
    cr_assert_eq(req.op, RL_ACQUIRE);
    cr_assert_str_eq(req.name, "orders||a.b-c_1:x");
    cr_assert_str_eq(req.token, "o-1");
    cr_assert(req.token_given);
    cr_assert_eq(req.ttl_ms, 7000);
    cr_assert_eq(req.wait_ms, 0);

    Dapr__Proto__Runtime__V1__UnlockRequest u = DAPR__PROTO__RUNTIME__V1__UNLOCK_REQUEST__INIT;
    u.store_name = (char *)"lockstore";
    u.resource_id = (char *)"r";
    u.lock_owner = (char *)"o";
    n = dapr__proto__runtime__v1__unlock_request__pack(&u, buf);
    cr_assert_eq(grpc_api_parse(GRPC_M_UNLOCK, buf, n, stores, &lim, &req, err, sizeof err), GRPC_OK);
    cr_assert_eq(req.op, RL_RELEASE);
    cr_assert_str_eq(req.name, "lockstore||r");
    cr_assert_str_eq(req.token, "o");
}

Test(grpc_api, refuses_like_dapr)
{
    static const struct { const char *store, *res, *owner; int expiry; const char *words; } bad[] = {
        {"lockstore", "", "o", 5, "ResourceId is empty"},
        {"lockstore", "r", "", 5, "LockOwner is empty"},
        {"lockstore", "r", "o", 0, "ExpiryInSeconds is not positive"},
        {"lockstore", "r", "o", -1, "ExpiryInSeconds is not positive"},
        {"lockstore", "r", "o", 3601, "at most 3600"},
        {"nope", "r", "o", 5, "lock store nope is not found"},
        {"", "r", "o", 5, "is not found"},
        {"lockstore", "r\x1f#fence", "o", 5, "resourceId must be"},
        {"lockstore", "r\n", "o", 5, "resourceId must be"},
        {"lockstore", "a||b", "o", 5, "can't contain '||'"},
        {"lockstore", "r", "a\tb", 5, "lockOwner must be"},
        {"lockstore", "r", "\xff", 5, "lockOwner must be"},
    };
    uint8_t buf[1024];
    char err[300];
    rl_request req;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = pack_try(bad[i].store, bad[i].res, bad[i].owner, bad[i].expiry, buf);
        cr_assert_eq(grpc_api_parse(GRPC_M_TRY_LOCK, buf, n, stores, &lim, &req, err, sizeof err),
                     GRPC_INVALID_ARGUMENT, "%zu", i);
        cr_assert(strstr(err, bad[i].words), "%zu: %s", i, err);
    }
}

Test(grpc_api, bad_protobuf_is_invalid_argument)
{
    char err[300];
    rl_request req;
    static const struct { const char *bytes; size_t len; } bad[] = {
        {"\xff\xff\xff\xff", 4},          /* no valid tag */
        {"\x12\x10" "abc", 5},            /* a string cut short */
        {"\x0d\x01\x02\x03\x04", 5},      /* store_name as fixed32 */
        {"\x20", 1},                      /* a varint without its value */
        {"\x12\x03" "a\0b", 5},           /* a NUL inside a string: not "a" */
        {"\x20\x85\x80\x00", 4},          /* expiry 5 in a padded varint */
        {"\x12\x01" "a\x12\x01" "b", 6},  /* resource_id twice */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(grpc_api_parse(GRPC_M_TRY_LOCK, (const uint8_t *)bad[i].bytes, bad[i].len, stores,
                                    &lim, &req, err, sizeof err), GRPC_INVALID_ARGUMENT, "%zu", i);
        cr_assert(strstr(err, "TryLockRequest"), "%zu: %s", i, err);
    }
    cr_assert_eq(grpc_api_parse(GRPC_M_UNLOCK, (const uint8_t *)"\xff", 1, stores, &lim, &req, err,
                                sizeof err), GRPC_INVALID_ARGUMENT);
    cr_assert_eq(grpc_api_parse(GRPC_M_METADATA, (const uint8_t *)"\xff", 1, stores, &lim, &req, err,
                                sizeof err), GRPC_INVALID_ARGUMENT);
    cr_assert_eq(grpc_api_parse(GRPC_M_METADATA, (const uint8_t *)"", 0, stores, &lim, &req, err,
                                sizeof err), GRPC_OK);
    /* A field this proto does not name (a newer Dapr's) is kept and allowed. */
    uint8_t buf[256];
    size_t n = pack_try("lockstore", "r", "o", 5, buf);
    memcpy(buf + n, "\x2a\x01z", 3);
    cr_assert_eq(grpc_api_parse(GRPC_M_TRY_LOCK, buf, n + 3, stores, &lim, &req, err, sizeof err), GRPC_OK,
                 "%s", err);
}

static Dapr__Proto__Runtime__V1__UnlockResponse *unlock_answer(enum rl_outcome o, enum rl_reason r,
                                                               int *code)
{
    rl_result res = {.outcome = o, .reason = r};
    uint8_t *out;
    size_t len;
    char err[400];
    *code = grpc_api_answer(GRPC_M_UNLOCK, &res, &out, &len, err, sizeof err);
    if (*code != GRPC_OK)
        return NULL;
    cr_assert_eq(out[0], 0);
    cr_assert_eq((size_t)out[4] + 5, len);
    Dapr__Proto__Runtime__V1__UnlockResponse *u =
        dapr__proto__runtime__v1__unlock_response__unpack(NULL, len - 5, out + 5);
    free(out);
    return u;
}

Test(grpc_api, answers_map_outcomes_as_the_http_routes)
{
    int code;
    static const struct { enum rl_outcome o; enum rl_reason r; int status; } un[] = {
        {RL_OK, RL_REASON_NONE, 0},
        {RL_NOT_HELD, RL_REASON_EXPIRED, 1},
        {RL_NOT_HELD, RL_REASON_HELD_BY_OTHER, 2},
        {RL_INTERNAL, RL_REASON_NONE, 3},
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        Dapr__Proto__Runtime__V1__UnlockResponse *u = unlock_answer(un[i].o, un[i].r, &code);
        cr_assert_eq(code, GRPC_OK);
        cr_assert_eq((int)u->status, un[i].status, "%zu", i);
        dapr__proto__runtime__v1__unlock_response__free_unpacked(u, NULL);
    }
    cr_assert_null(unlock_answer(RL_NO_QUORUM, RL_REASON_NONE, &code));
    cr_assert_eq(code, GRPC_INTERNAL);
    cr_assert_null(unlock_answer(RL_SHUTTING_DOWN, RL_REASON_NONE, &code));
    cr_assert_eq(code, GRPC_UNAVAILABLE);

    uint8_t *out;
    size_t len;
    char err[400];
    rl_result ok = {.outcome = RL_OK}, locked = {.outcome = RL_LOCKED};
    cr_assert_eq(grpc_api_answer(GRPC_M_TRY_LOCK, &ok, &out, &len, err, sizeof err), GRPC_OK);
    Dapr__Proto__Runtime__V1__TryLockResponse *t =
        dapr__proto__runtime__v1__try_lock_response__unpack(NULL, len - 5, out + 5);
    cr_assert(t->success);
    dapr__proto__runtime__v1__try_lock_response__free_unpacked(t, NULL);
    free(out);
    cr_assert_eq(grpc_api_answer(GRPC_M_TRY_LOCK, &locked, &out, &len, err, sizeof err), GRPC_OK);
    cr_assert_eq(len, 5, "success false is the empty message");
    free(out);
    rl_result nq = {.outcome = RL_NO_QUORUM, .masters_ok = 2, .masters_total = 5};
    cr_assert_eq(grpc_api_answer(GRPC_M_TRY_LOCK, &nq, &out, &len, err, sizeof err), GRPC_INTERNAL);
    cr_assert_null(out);
    cr_assert(strstr(err, "failed to try acquiring lock: fewer than a majority"), "%s", err);
    rl_result in = {.outcome = RL_INTERNAL};
    cr_assert_eq(grpc_api_answer(GRPC_M_TRY_LOCK, &in, &out, &len, err, sizeof err), GRPC_INTERNAL);
}

Test(grpc_api, metadata_names_every_store)
{
    uint8_t *out;
    size_t len;
    cr_assert_eq(grpc_api_metadata("lockstore,orders", "0.1.0", &out, &len), 0);
    Dapr__Proto__Runtime__V1__GetMetadataResponse *m =
        dapr__proto__runtime__v1__get_metadata_response__unpack(NULL, len - 5, out + 5);
    cr_assert_not_null(m);
    cr_assert_str_eq(m->id, "redlockd");
    cr_assert_str_eq(m->runtime_version, "redlockd-0.1.0");
    cr_assert_eq(m->n_registered_components, 2);
    cr_assert_str_eq(m->registered_components[1]->name, "orders");
    cr_assert_str_eq(m->registered_components[1]->type, "lock.redlockd");
    dapr__proto__runtime__v1__get_metadata_response__free_unpacked(m, NULL);
    free(out);
}

Test(grpc_api, messages_are_percent_encoded)
{
    char out[64];
    grpc_api_percent_encode("50% of caf\xc3\xa9\n", out, sizeof out);
    cr_assert_str_eq(out, "50%25 of caf%C3%A9%0A");
    grpc_api_percent_encode("abc%", out, 5);
    cr_assert_str_eq(out, "abc", "never a cut escape");
}
