/* fuzz_grpc.c - libFuzzer target for Dapr's lock API over gRPC without the
 * server: the 5-byte length prefix of a unary call's message
 * (grpc_api_unframe), the protobuf decoders of TryLockAlpha1, UnlockAlpha1
 * and GetMetadata (grpc_api_parse), the grpc-message text made of their
 * errors (grpc_api_percent_encode) and the framed answers
 * (grpc_api_answer, grpc_api_metadata), in the order grpc.c runs them.
 *
 * An input is: one byte choosing the method ('0' TryLock, '1' Unlock,
 * '2' GetMetadata, '3' a method not served; modulo 4 after subtracting
 * '0'), one byte choosing the engine's outcome the answer is made of
 * ('0'..'9': enum rl_outcome; the tens its reason), then the request body
 * exactly as the HTTP/2 DATA frames brought it: prefix and message.
 *
 * Checked beyond "no crash, no leak, no undefined behaviour": the prefix
 * is taken exactly when it is well formed; a decoded request obeys the
 * Dapr routes' rules (store:resource, a valid name and token, whole
 * seconds within the limit), holds every byte of its fields as an
 * independent reader of the wire format finds them (none cut at a NUL),
 * and comes out the same when its fields are packed again by a client's
 * encoder; an error always says why; its
 * grpc-message is printable ASCII that decodes back to it; every answer
 * framed is one message that decodes, and says what the HTTP route says.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"   /* CONF_MAX_DAPR_STORES */
#include "dapr_lock.pb-c.h"
#include "front/front.h"   /* GRPC_MAX_MESSAGE_BYTES: constants only */
#include "front/grpc_api.h"

#include "fuzz_util.h"

#define ERRLEN 400   /* as grpc.c's */

static const api_limits lim = {30000, 3600000, 60000, NULL};
static const char stores[] = "lockstore,orders,a.b_c-d";

static const char *const paths[] = {
    "/dapr.proto.runtime.v1.Dapr/TryLockAlpha1",
    "/dapr.proto.runtime.v1.Dapr/UnlockAlpha1",
    "/dapr.proto.runtime.v1.Dapr/GetMetadata",
    "/dapr.proto.runtime.v1.Dapr/GetState",
};
static const enum grpc_method methods[] = {GRPC_M_TRY_LOCK, GRPC_M_UNLOCK, GRPC_M_METADATA,
                                           GRPC_M_UNKNOWN};


static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* grpc-message: printable, '%' only as %XX, and it decodes to a prefix of
 * in (all of it when outlen had room for every byte three times over). */
static void check_percent(const char *in, size_t outlen)
{
    char *out = malloc(outlen ? outlen : 1);
    if (!out)
        abort();
    memset(out, 0x7f, outlen ? outlen : 1);
    grpc_api_percent_encode(in, out, outlen);
    if (!outlen) {
        free(out);
        return;
    }
    FUZZ_CHECK(fuzz_terminated(out, outlen), "grpc-message ends within its buffer");
    size_t i = 0, o = 0;
    while (out[o]) {
        unsigned char c = (unsigned char)out[o];
        FUZZ_CHECK(c >= 0x20 && c <= 0x7e, "grpc-message is printable ASCII");
        unsigned char d = c;
        if (c == '%') {
            int hi = hexval(out[o + 1]), lo = hi >= 0 ? hexval(out[o + 2]) : -1;
            FUZZ_CHECK(hi >= 0 && lo >= 0, "a '%' in grpc-message starts %XX");
            d = (unsigned char)(hi << 4 | lo);
            o += 3;
        } else {
            o++;
        }
        FUZZ_CHECK((unsigned char)in[i] == d, "grpc-message decodes back to the message");
        i++;
    }
    if (3 * strlen(in) < outlen)
        FUZZ_CHECK(in[i] == '\0', "grpc-message holds the whole message when it fits");
    free(out);
}

static void check_err(int code, const char *err)
{
    FUZZ_CHECK(code == GRPC_OK || err[0] != '\0', "a failure says why");
    if (code == GRPC_OK)
        return;
    FUZZ_CHECK(fuzz_terminated(err, ERRLEN), "err ends within errlen");
    check_percent(err, 600);   /* grpc.c's answer_status */
    check_percent(err, strlen(err) % 17);
}

/* Packs req's fields again as a client would, and parses that. */
static void check_repacked(enum grpc_method m, const rl_request *req)
{
    char store[RL_INTERNAL_NAME_MAX + 1];
    const char *sep = strstr(req->name, API_DAPR_SEP);
    FUZZ_CHECK(sep != NULL, "the lock is named store||resource");
    size_t sl = (size_t)(sep - req->name);
    memcpy(store, req->name, sl);
    store[sl] = '\0';
    uint8_t buf[GRPC_PREFIX_LEN + 2048];
    size_t n;
    if (m == GRPC_M_TRY_LOCK) {
        Dapr__Proto__Runtime__V1__TryLockRequest r = DAPR__PROTO__RUNTIME__V1__TRY_LOCK_REQUEST__INIT;
        r.store_name = store;
        r.resource_id = (char *)sep + 2;
        r.lock_owner = (char *)req->token;
        r.expiry_in_seconds = (int32_t)(req->ttl_ms / 1000);
        n = dapr__proto__runtime__v1__try_lock_request__get_packed_size(&r);
        FUZZ_CHECK(n <= sizeof buf - GRPC_PREFIX_LEN, "a valid request fits 2 KiB");
        dapr__proto__runtime__v1__try_lock_request__pack(&r, buf + GRPC_PREFIX_LEN);
    } else {
        Dapr__Proto__Runtime__V1__UnlockRequest r = DAPR__PROTO__RUNTIME__V1__UNLOCK_REQUEST__INIT;
        r.store_name = store;
        r.resource_id = (char *)sep + 2;
        r.lock_owner = (char *)req->token;
        n = dapr__proto__runtime__v1__unlock_request__get_packed_size(&r);
        FUZZ_CHECK(n <= sizeof buf - GRPC_PREFIX_LEN, "a valid request fits 2 KiB");
        dapr__proto__runtime__v1__unlock_request__pack(&r, buf + GRPC_PREFIX_LEN);
    }
    buf[0] = 0;
    buf[1] = (uint8_t)(n >> 24);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 8);
    buf[4] = (uint8_t)n;
    const uint8_t *msg;
    size_t msglen;
    char err[ERRLEN] = "";
    FUZZ_CHECK(grpc_api_unframe(buf, GRPC_PREFIX_LEN + n, GRPC_MAX_MESSAGE_BYTES, &msg, &msglen, err,
                                sizeof err) == GRPC_OK,
               "a client's frame of a valid request is taken");
    rl_request again;
    memset(&again, 0x5a, sizeof again);
    int code = grpc_api_parse(m, msg, msglen, stores, &lim, &again, err, sizeof err);
    FUZZ_CHECK(code == GRPC_OK && !memcmp(&again, req, sizeof again),
               "the request's fields packed again parse to the same request");
}

/* ---- an independent reader of the wire format, as the oracle ---- */

typedef struct wire_msg {
    const uint8_t *str[4];   /* fields 1..3 (store, resource, owner): the last one sent */
    size_t len[4];
    uint64_t expiry;         /* field 4 as a varint, the last one sent (0: absent) */
} wire_msg;

static bool wire_varint(const uint8_t *p, size_t n, size_t *off, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70 && *off < n; shift += 7) {
        uint8_t b = p[(*off)++];
        if (shift < 64)
            *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Reads the fields of a TryLockRequest or UnlockRequest. False when the
 * bytes are not plain protobuf (then there is nothing to compare). */
static bool wire_read(const uint8_t *p, size_t n, wire_msg *w)
{
    memset(w, 0, sizeof *w);
    for (size_t off = 0; off < n;) {
        uint64_t key, v;
        if (!wire_varint(p, n, &off, &key))
            return false;
        uint64_t field = key >> 3;
        switch (key & 7) {
        case 0:
            if (!wire_varint(p, n, &off, &v))
                return false;
            if (field == 4)
                w->expiry = v;
            break;
        case 1:
        case 5: {
            size_t skip = (key & 7) == 1 ? 8 : 4;
            if (n - off < skip)
                return false;
            off += skip;
            break;
        }
        case 2:
            if (!wire_varint(p, n, &off, &v) || v > n - off)
                return false;
            if (field >= 1 && field <= 3) {
                w->str[field] = p + off;
                w->len[field] = (size_t)v;
            }
            off += (size_t)v;
            break;
        default:
            return false;   /* groups: not in this proto */
        }
    }
    return true;
}

static bool wire_is(const wire_msg *w, int field, const char *s, size_t len)
{
    return w->len[field] == len && (!len || !memcmp(w->str[field], s, len));
}

/* A request decoded is exactly what the wire holds: every byte of store,
 * resource and owner (none cut short at a NUL), the expiry in whole
 * seconds. */
static void check_wire(enum grpc_method m, const uint8_t *msg, size_t len, const rl_request *req)
{
    wire_msg w;
    if (!wire_read(msg, len, &w))
        return;
    const char *sep = strstr(req->name, API_DAPR_SEP);
    FUZZ_CHECK(wire_is(&w, 1, req->name, (size_t)(sep - req->name)), "the store is all of field 1");
    FUZZ_CHECK(wire_is(&w, 2, sep + 2, strlen(sep + 2)), "the resource is all of field 2");
    FUZZ_CHECK(wire_is(&w, 3, req->token, strlen(req->token)), "the owner is all of field 3");
    if (m == GRPC_M_TRY_LOCK)
        FUZZ_CHECK((long long)(int32_t)(uint32_t)w.expiry * 1000 == req->ttl_ms,
                   "the ttl is field 4's seconds");
}

static void check_request(enum grpc_method m, const rl_request *req)
{
    FUZZ_CHECK(fuzz_terminated(req->name, sizeof req->name), "name ends within its buffer");
    FUZZ_CHECK(fuzz_terminated(req->token, sizeof req->token), "token ends within its buffer");
    FUZZ_CHECK(strlen(req->name) <= RL_INTERNAL_NAME_MAX, "the name fits an internal name");
    const char *sep = strstr(req->name, API_DAPR_SEP);
    FUZZ_CHECK(sep && fuzz_store_listed(req->name, (size_t)(sep - req->name), stores),
               "the lock is named store||resource, of a store served (keyPrefix name, no app id)");
    FUZZ_CHECK(!strstr(sep + 2, API_DAPR_SEP) && rules_text_valid(sep + 2, strlen(sep + 2), API_DAPR_RESOURCE_MAX),
               "resourceId is text without ||");
    FUZZ_CHECK(req->token_given && rules_text_valid(req->token, strlen(req->token), API_DAPR_OWNER_MAX),
               "lockOwner is the token, valid text");
    FUZZ_CHECK(req->wait_ms == 0 && !req->hold && !req->queued, "a gRPC call never waits or holds");
    if (m == GRPC_M_TRY_LOCK)
        FUZZ_CHECK(req->op == RL_ACQUIRE && req->ttl_ms >= 1000 && req->ttl_ms % 1000 == 0 &&
                       req->ttl_ms <= lim.max_ttl_ms,
                   "TryLock acquires for whole seconds within max_ttl_ms");
    else
        FUZZ_CHECK(req->op == RL_RELEASE && req->ttl_ms == 0, "Unlock releases");
    check_repacked(m, req);
}

/* A framed answer is exactly one message. Returns it (n bytes). */
static const uint8_t *unframe_answer(const uint8_t *out, size_t outlen, size_t *n)
{
    const uint8_t *msg;
    char err[ERRLEN] = "";
    FUZZ_CHECK(out && grpc_api_unframe(out, outlen, GRPC_MAX_MESSAGE_BYTES, &msg, n, err,
                                       sizeof err) == GRPC_OK,
               "an answer is one framed message");
    return msg;
}

/* The answer to an outcome, against what the Dapr HTTP route answers. */
static void check_answer(enum grpc_method m, uint8_t ob)
{
    rl_result res;
    memset(&res, 0, sizeof res);
    res.outcome = (enum rl_outcome)(ob % 10);
    res.reason = (enum rl_reason)(ob / 10 % 3);
    res.masters_ok = ob % 3;
    res.masters_total = 5;
    res.masters_refusing = ob % 2;
    res.masters_quarantined = ob % 5 == 4;
    res.setup_pending = ob & 0x80;
    snprintf(res.refusal, sizeof res.refusal, "%s", "OOM command not allowed\x01%");
    bool unlock = m == GRPC_M_UNLOCK;
    uint8_t *out = (uint8_t *)"not set";
    size_t outlen = 1;
    char *err = fuzz_msg_new(ERRLEN);
    int code = grpc_api_answer(m, &res, &out, &outlen, err, ERRLEN);
    FUZZ_CHECK(code == GRPC_OK || code == GRPC_INTERNAL || code == GRPC_UNAVAILABLE,
               "an answer is OK, INTERNAL or UNAVAILABLE");
    check_err(code, err);
    int status;
    char *json = api_dapr_result_json(unlock, &res, &status);
    if (code != GRPC_OK) {
        FUZZ_CHECK(out == NULL && outlen == 0, "no message with an error status");
    } else {
        size_t n;
        const uint8_t *msg = unframe_answer(out, outlen, &n);
        char want[32];
        if (!unlock) {
            Dapr__Proto__Runtime__V1__TryLockResponse *r =
                dapr__proto__runtime__v1__try_lock_response__unpack(NULL, n, msg);
            FUZZ_CHECK(r != NULL, "a TryLockResponse decodes");
            FUZZ_CHECK(r->success == (res.outcome == RL_OK), "success exactly when granted");
            snprintf(want, sizeof want, "\"success\":%s", r->success ? "true" : "false");
            dapr__proto__runtime__v1__try_lock_response__free_unpacked(r, NULL);
        } else {
            Dapr__Proto__Runtime__V1__UnlockResponse *r =
                dapr__proto__runtime__v1__unlock_response__unpack(NULL, n, msg);
            FUZZ_CHECK(r != NULL, "an UnlockResponse decodes");
            snprintf(want, sizeof want, "\"status\":%d", (int)r->status);
            dapr__proto__runtime__v1__unlock_response__free_unpacked(r, NULL);
        }
        /* RL_OVERLOADED is a 500 on the HTTP route only: gRPC calls are
         * never queued (rl_request.queued), so they never see it. */
        if (res.outcome != RL_OVERLOADED)
            FUZZ_CHECK(json && status == 200 && strstr(json, want),
                       "the gRPC answer says what the Dapr HTTP route says");
        free(out);
    }
    if (code != GRPC_OK && res.outcome != RL_OVERLOADED)
        FUZZ_CHECK(status == 500, "an error status where the Dapr HTTP route answers 500");
    free(json);
    free(err);
}

/* GetMetadata's answer for a --dapr-stores made of the input (its rules:
 * conf.c), decoded again. */
static void check_metadata(const uint8_t *p, size_t len)
{
    char list[CONF_MAX_DAPR_STORES + 1];
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,";
    size_t n = 0;
    for (size_t i = 0; i < len && n < CONF_MAX_DAPR_STORES; i++) {
        char c = alphabet[p[i] % (sizeof alphabet - 1)];
        if (c == ',' && (n == 0 || list[n - 1] == ','))
            continue;
        list[n++] = c;
    }
    while (n && list[n - 1] == ',')
        n--;
    if (!n)
        list[n++] = 'x';
    list[n] = '\0';
    size_t want = 1;
    for (size_t i = 0; i < n; i++)
        want += list[i] == ',';

    uint8_t *out = NULL;
    size_t outlen = 0;
    FUZZ_CHECK(grpc_api_metadata(list, REDLOCKD_VERSION, &out, &outlen) == 0, "metadata answers");
    size_t mlen;
    const uint8_t *msg = unframe_answer(out, outlen, &mlen);
    Dapr__Proto__Runtime__V1__GetMetadataResponse *r =
        dapr__proto__runtime__v1__get_metadata_response__unpack(NULL, mlen, msg);
    FUZZ_CHECK(r != NULL, "a GetMetadataResponse decodes");
    FUZZ_CHECK(!strcmp(r->id, "redlockd"), "its id is redlockd");
    FUZZ_CHECK(r->n_registered_components == want, "one component per store");
    const char *s = list;
    for (size_t i = 0; i < r->n_registered_components; i++) {
        size_t l = strcspn(s, ",");
        size_t cut = l < API_DAPR_STORE_MAX ? l : API_DAPR_STORE_MAX;   /* (conf.c refuses longer) */
        FUZZ_CHECK(strlen(r->registered_components[i]->name) == cut && !strncmp(r->registered_components[i]->name, s, cut),
                   "each component is named for its store");
        s += l + (s[l] == ',');
    }
    dapr__proto__runtime__v1__get_metadata_response__free_unpacked(r, NULL);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    unsigned which = (uint8_t)(fuzz_byte(&in) - '0') % 4;
    uint8_t ob = (uint8_t)(fuzz_byte(&in) - '0');
    size_t len;
    uint8_t *body = (uint8_t *)fuzz_rest(&in, &len);

    enum grpc_method m = grpc_api_method_of(paths[which]);
    FUZZ_CHECK(m == methods[which], "each path names its method");

    /* grpc.c: the body, then exactly one message of it */
    const uint8_t *msg = NULL;
    size_t msglen = 0;
    char *err = fuzz_msg_new(ERRLEN);
    int code = grpc_api_unframe(body, len, GRPC_MAX_MESSAGE_BYTES, &msg, &msglen, err, ERRLEN);
    FUZZ_CHECK(code == GRPC_OK || code == GRPC_INVALID_ARGUMENT || code == GRPC_UNIMPLEMENTED ||
                   code == GRPC_RESOURCE_EXHAUSTED,
               "unframe answers OK, INVALID_ARGUMENT, UNIMPLEMENTED or RESOURCE_EXHAUSTED");
    bool well_formed = len >= GRPC_PREFIX_LEN && body[0] == 0 &&
                       ((size_t)body[1] << 24 | (size_t)body[2] << 16 | (size_t)body[3] << 8 | body[4]) ==
                           len - GRPC_PREFIX_LEN &&
                       len - GRPC_PREFIX_LEN <= GRPC_MAX_MESSAGE_BYTES;
    FUZZ_CHECK((code == GRPC_OK) == well_formed, "the prefix is taken exactly when well formed");
    if (code == GRPC_OK)
        FUZZ_CHECK(msg == body + GRPC_PREFIX_LEN && msglen == len - GRPC_PREFIX_LEN,
                   "the message is what follows the prefix");
    check_err(code, err);

    if (code == GRPC_OK) {
        rl_request req;
        memset(&req, 0x5a, sizeof req);
        err[0] = '\0';
        code = grpc_api_parse(m, msg, msglen, stores, &lim, &req, err, ERRLEN);
        FUZZ_CHECK(code == GRPC_OK || code == GRPC_INVALID_ARGUMENT || code == GRPC_UNIMPLEMENTED,
                   "parse answers OK, INVALID_ARGUMENT or UNIMPLEMENTED");
        FUZZ_CHECK((code == GRPC_UNIMPLEMENTED) == (m == GRPC_M_UNKNOWN),
                   "UNIMPLEMENTED exactly for a method not served");
        check_err(code, err);
        if (code == GRPC_OK && (m == GRPC_M_TRY_LOCK || m == GRPC_M_UNLOCK)) {
            check_request(m, &req);
            check_wire(m, msg, msglen, &req);
        }
    }
    if (m == GRPC_M_TRY_LOCK || m == GRPC_M_UNLOCK)
        check_answer(m, ob);
    if (m == GRPC_M_METADATA)
        check_metadata(body, len);
    free(err);
    free(body);
    return 0;
}
