/* fuzz_json.c - libFuzzer target for the JSON request bodies: the native
 * lock routes (api_parse_body, every rl_op), Dapr's lock and unlock
 * (api_parse_dapr), an election's campaign and value
 * (election_parse_campaign, election_parse_value) and a semaphore's
 * acquire and tokens (api_sem_parse_acquire, api_sem_parse_tokens).
 *
 * An input is: one byte choosing the parser ('0'..'9' below, taken
 * modulo 10 after subtracting '0'), one byte choosing the limits (the
 * service's defaults for '0', edge configurations that conf.c accepts for
 * '1'..'7'; bit 7 set asks for a 13-byte message buffer, so truncation is
 * tried too), then what the parser takes: for Dapr the store name up to a
 * NUL; for semaphore tokens a flags byte ('0' + 1 extend, + 2 a Lock-Token
 * header, + 4 a token query, each up to a NUL); and last the body, with
 * its length and no terminator, as the HTTP layer hands it over.
 *
 *   0 api_parse_body RL_ACQUIRE   5 api_parse_dapr unlock
 *   1 api_parse_body RL_EXTEND    6 election_parse_campaign
 *   2 api_parse_body RL_RELEASE   7 election_parse_value
 *   3 api_parse_body RL_INSPECT   8 api_sem_parse_acquire
 *   4 api_parse_dapr lock         9 api_sem_parse_tokens
 *
 * Beyond "no crash, no leak, no undefined behaviour", each parse is checked
 * against its contract: a success leaves no message and a failure one
 * sentence, NUL-terminated within msglen; a body the strict reader must
 * refuse (jsonio.h: raw control bytes, bad UTF-8, \u0000) never parses; on
 * success every string of the request ends within its buffer and obeys
 * rules.h, every number is within the limits given, and fields the
 * contract says are not touched are not; the same input parses the same
 * way twice.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "recipes/recipes.h"
#include "front/api.h"
#include "front/semaphore_api.h"

#include "fuzz_util.h"

/* The stores a Dapr request may name, as --dapr-stores gives them. */
static const char stores[] = "lockstore,orders,a.b_c-d";

/* Limits conf.c accepts: 1 <= default_ttl_ms <= max_ttl_ms <= INT32_MAX,
 * 0 <= max_wait_ms <= INT32_MAX. */
static const api_limits limits[] = {
    {30000, 3600000, 60000, NULL},   /* the defaults */
    {1000, 1000, 0, NULL},
    {1, 1, 0, NULL},
    {1000, 1999, 1, NULL},
    {2147483647, 2147483647, 2147483647, NULL},
    {30000, 3600000, 0, NULL},
    {999, 1999, 60000, NULL},
    {30000, 30000, 2147483647, NULL},
};
#define NLIMITS (sizeof limits / sizeof limits[0])

#define NAME_SENTINEL "name-not-touched"
#define TOKEN_SENTINEL "token-not-touched"

/* Is store one of the comma-separated stores? (Written apart from api.c's,
 * as the oracle.) */
static bool served(const char *store) { return fuzz_store_listed(store, strlen(store), stores); }

/* Only JSON's own whitespace: a body of it means defaults on the lock
 * routes (api.h). */
static bool json_blank(const char *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n')
            return false;
    return true;
}

/* Is s (n bytes) UTF-8 (RFC 3629: no overlong forms, no surrogates, at
 * most U+10FFFF)? */
static bool utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xbf;   /* the second byte's range */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            return false;
        }
        if (n - i - 1 < k || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xbf)
                return false;
        i += k + 1;
    }
    return true;
}

/* Must the strict reader (jsonio.h) refuse this body whole? Raw bytes
 * below 0x20 other than JSON's whitespace (inside a string RFC 8259 forbids
 * them, outside one they are no token), bytes that are not UTF-8, and an
 * escaped NUL (a backslash outside a string is no JSON either, so each one
 * starts an escape). A body of only isspace() bytes is read as {} first. */
static bool strict_refuses(const char *body, size_t len)
{
    bool blank = true;
    for (size_t i = 0; i < len && blank; i++)
        blank = isspace((unsigned char)body[i]);
    if (blank)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)body[i];
        if (c < 0x20 && c != ' ' && c != '\t' && c != '\r' && c != '\n')
            return true;
        if (c == '\\') {
            if (i + 5 < len && !memcmp(body + i + 1, "u0000", 5))
                return true;
            i++;
        }
    }
    return !utf8_valid((const uint8_t *)body, len);
}

static void check_strings(const rl_request *req)
{
    FUZZ_CHECK(fuzz_terminated(req->name, sizeof req->name), "name ends within its buffer");
    FUZZ_CHECK(fuzz_terminated(req->token, sizeof req->token), "token ends within its buffer");
    FUZZ_CHECK(fuzz_terminated(req->owner, sizeof req->owner), "owner ends within its buffer");
    FUZZ_CHECK(req->owner[0] == '\0' || rules_owner_valid(req->owner, strlen(req->owner)),
               "an owner obeys rules_owner_valid");
}

/* ---- native lock routes ---- */

static int parse_body(enum rl_op op, const char *body, size_t len, const api_limits *lim,
                      rl_request *req, bool *tb, enum api_err *err, char *msg, size_t msglen)
{
    memset(req, 0, sizeof *req);
    strcpy(req->name, NAME_SENTINEL);
    strcpy(req->token, TOKEN_SENTINEL);
    msg[0] = '\0';
    return api_parse_body(op, body, len, lim, req, tb, err, msg, msglen);
}

static void fuzz_body(enum rl_op op, const char *body, size_t len, const api_limits *lim,
                      size_t msglen)
{
    rl_request req, again;
    bool tb, tb2;
    enum api_err err, err2;
    char *msg = fuzz_msg_new(msglen), *msg2 = fuzz_msg_new(msglen);
    int rc = parse_body(op, body, len, lim, &req, &tb, &err, msg, msglen);
    int rc2 = parse_body(op, body, len, lim, &again, &tb2, &err2, msg2, msglen);

    FUZZ_CHECK(rc == 0 || rc == -1, "api_parse_body returns 0 or -1");
    fuzz_check_msg(rc == 0, msg, msglen);
    FUZZ_CHECK(rc == rc2 && tb == tb2 && !memcmp(&req, &again, sizeof req) &&
                   !strcmp(msg, msg2),
               "the same body parses the same way twice");
    if (rc < 0) {
        FUZZ_CHECK((unsigned)err < API_E_COUNT && api_errors[err].status == 400,
                   "a refused body is a 400");
        FUZZ_CHECK(op != RL_INSPECT, "an inspection takes no body: never refused");
        FUZZ_CHECK(len > 0 && !json_blank(body, len), "an empty or blank body means defaults");
        goto out;
    }
    FUZZ_CHECK(op == RL_INSPECT || !strict_refuses(body, len),
               "a control byte, bad UTF-8 or \\u0000 is refused");
    check_strings(&req);
    FUZZ_CHECK(req.op == op, "op as asked");
    FUZZ_CHECK(!strcmp(req.name, NAME_SENTINEL), "the name is not touched");
    FUZZ_CHECK(!tb || op == RL_EXTEND || op == RL_RELEASE, "a body token only on extend/release");
    if (!tb)
        FUZZ_CHECK(!strcmp(req.token, TOKEN_SENTINEL), "without a body token, token is not touched");
    else
        FUZZ_CHECK(strlen(req.token) <= TOKEN_MAX_LEN, "a body token is at most TOKEN_MAX_LEN");
    if (op == RL_ACQUIRE || op == RL_EXTEND)
        FUZZ_CHECK(req.ttl_ms >= 1 && req.ttl_ms <= lim->max_ttl_ms, "ttl_ms within 1..max_ttl_ms");
    else
        FUZZ_CHECK(req.ttl_ms == lim->default_ttl_ms, "ttl_ms is the default");
    if (op == RL_ACQUIRE) {
        FUZZ_CHECK(req.wait_ms >= 0 && req.wait_ms <= lim->max_wait_ms, "wait_ms within 0..max_wait_ms");
        FUZZ_CHECK(!req.hold || req.ttl_ms >= HOLD_MIN_TTL_MS, "a held stream's ttl_ms >= 1000");
    } else {
        FUZZ_CHECK(req.wait_ms == 0 && !req.hold && req.owner[0] == '\0',
                   "wait_ms, hold and owner only on acquire");
    }
    if (tb) {
        /* The token as the HTTP layer then picks it (no header, no query). */
        char pmsg[200] = "";
        int prc = api_pick_token(NULL, NULL, true, &req, pmsg, sizeof pmsg);
        FUZZ_CHECK((prc == 0) == rules_token_valid(req.token, strlen(req.token)),
                   "api_pick_token keeps exactly the valid tokens");
        fuzz_check_msg(prc == 0, pmsg, sizeof pmsg);
    }
out:
    free(msg);
    free(msg2);
}

/* ---- Dapr ---- */

static int parse_dapr(bool unlock, const char *store, const char *body, size_t len,
                      const api_limits *lim, rl_request *req, const char **code, char *msg,
                      size_t msglen)
{
    memset(req, 0x5a, sizeof *req);   /* api_parse_dapr clears it all */
    *code = NULL;
    msg[0] = '\0';
    return api_parse_dapr(unlock, store, stores, body, len, lim, req, code, msg, msglen);
}

static void fuzz_dapr(bool unlock, const char *store, const char *body, size_t len,
                      const api_limits *lim, size_t msglen)
{
    rl_request req, again;
    const char *code, *code2;
    char *msg = fuzz_msg_new(msglen), *msg2 = fuzz_msg_new(msglen);
    int rc = parse_dapr(unlock, store, body, len, lim, &req, &code, msg, msglen);
    int rc2 = parse_dapr(unlock, store, body, len, lim, &again, &code2, msg2, msglen);

    FUZZ_CHECK(rc == 0 || rc == -1, "api_parse_dapr returns 0 or -1");
    fuzz_check_msg(rc == 0, msg, msglen);
    FUZZ_CHECK(rc == rc2 && code == code2 && !memcmp(&req, &again, sizeof req) &&
                   !strcmp(msg, msg2),
               "the same body parses the same way twice");
    if (!served(store))
        FUZZ_CHECK(rc < 0 && code && !strcmp(code, API_DAPR_ERR_STORE),
                   "a store not served is ERR_LOCK_STORE_NOT_FOUND, whatever the body");
    if (rc < 0) {
        FUZZ_CHECK(code && (!strcmp(code, API_DAPR_ERR_STORE) || !strcmp(code, API_DAPR_ERR_MALFORMED)),
                   "a refusal carries a Dapr errorCode");
        FUZZ_CHECK(served(store) == !strcmp(code, API_DAPR_ERR_MALFORMED),
                   "ERR_LOCK_STORE_NOT_FOUND exactly for stores not served");
        goto out;
    }
    FUZZ_CHECK(!strict_refuses(body, len), "a control byte, bad UTF-8 or \\u0000 is refused");
    check_strings(&req);
    FUZZ_CHECK(req.op == (unlock ? RL_RELEASE : RL_ACQUIRE), "lock acquires, unlock releases");
    size_t sl = strlen(store);
    FUZZ_CHECK(strlen(req.name) <= RL_INTERNAL_NAME_MAX, "store||resource fits an internal name");
    FUZZ_CHECK(!strncmp(req.name, store, sl) && !strncmp(req.name + sl, API_DAPR_SEP, 2),
               "the lock is named store||resource (keyPrefix name, no app id)");
    const char *resource = req.name + sl + 2;
    FUZZ_CHECK(!strstr(resource, API_DAPR_SEP) && rules_text_valid(resource, strlen(resource), API_DAPR_RESOURCE_MAX),
               "resourceId is text without ||");
    FUZZ_CHECK(req.token_given && rules_text_valid(req.token, strlen(req.token), API_DAPR_OWNER_MAX),
               "lockOwner is the token, valid text");
    FUZZ_CHECK(req.wait_ms == 0 && !req.hold && req.owner[0] == '\0', "Dapr never waits or holds");
    if (unlock)
        FUZZ_CHECK(req.ttl_ms == 0, "unlock has no ttl");
    else
        FUZZ_CHECK(req.ttl_ms >= 1000 && req.ttl_ms % 1000 == 0 && req.ttl_ms <= lim->max_ttl_ms,
                   "ttl is whole seconds within max_ttl_ms");
    /* The same request from its fields, as the gRPC API builds it. */
    rl_request direct;
    const char *dcode;
    char dmsg[256] = "";
    memset(&direct, 0x5a, sizeof direct);
    int drc = api_dapr_request(unlock, store, stores, resource, req.token, req.ttl_ms / 1000, lim,
                               &direct, &dcode, dmsg, sizeof dmsg);
    FUZZ_CHECK(drc == 0 && !memcmp(&direct, &req, sizeof req),
               "api_dapr_request of the parsed fields gives the same request");
out:
    free(msg);
    free(msg2);
}

/* ---- elections ---- */

static void fuzz_campaign(const char *body, size_t len, const api_limits *lim, size_t msglen)
{
    rl_request req;
    char *cand = malloc(ELECTION_CANDIDATE_MAX + 1), *value = malloc(ELECTION_VALUE_MAX + 1);
    char *msg = fuzz_msg_new(msglen);
    if (!cand || !value)
        abort();
    memset(cand, 0x7f, ELECTION_CANDIDATE_MAX + 1);
    memset(value, 0x7f, ELECTION_VALUE_MAX + 1);
    memset(&req, 0x5a, sizeof req);
    int rc = election_parse_campaign(body, len, lim->default_ttl_ms, lim->max_ttl_ms, &req, cand,
                                     value, msg, msglen);
    FUZZ_CHECK(rc == 0 || rc == -1, "election_parse_campaign returns 0 or -1");
    fuzz_check_msg(rc == 0, msg, msglen);
    if (rc == 0) {
        FUZZ_CHECK(!strict_refuses(body, len), "a control byte, bad UTF-8 or \\u0000 is refused");
        check_strings(&req);
        FUZZ_CHECK(fuzz_terminated(cand, ELECTION_CANDIDATE_MAX + 1) && election_candidate_valid(cand),
                   "the candidate is a valid one");
        FUZZ_CHECK(fuzz_terminated(value, ELECTION_VALUE_MAX + 1) && election_value_valid(value),
                   "the value is a valid one");
        FUZZ_CHECK(req.op == RL_ACQUIRE && req.hold && req.wait_ms == ELECTION_WAIT_ROUND_MS,
                   "a campaign is a held acquire waiting in rounds");
        FUZZ_CHECK(req.ttl_ms >= HOLD_MIN_TTL_MS, "a campaign's ttl_ms is at least 1000");
        FUZZ_CHECK(req.ttl_ms <= lim->max_ttl_ms, "a campaign's ttl_ms is at most max_ttl_ms");
    }
    free(cand);
    free(value);
    free(msg);
}

static void fuzz_value(const char *body, size_t len, size_t msglen)
{
    char *value = malloc(ELECTION_VALUE_MAX + 1), *token = malloc(TOKEN_MAX_LEN + 1);
    char *msg = fuzz_msg_new(msglen);
    if (!value || !token)
        abort();
    memset(value, 0x7f, ELECTION_VALUE_MAX + 1);
    memset(token, 0x7f, TOKEN_MAX_LEN + 1);
    int rc = election_parse_value(body, len, value, token, msg, msglen);
    FUZZ_CHECK(rc == 0 || rc == -1, "election_parse_value returns 0 or -1");
    fuzz_check_msg(rc == 0, msg, msglen);
    if (rc == 0) {
        FUZZ_CHECK(!strict_refuses(body, len), "a control byte, bad UTF-8 or \\u0000 is refused");
        FUZZ_CHECK(fuzz_terminated(value, ELECTION_VALUE_MAX + 1) && election_value_valid(value),
                   "the value is a valid one");
        FUZZ_CHECK(fuzz_terminated(token, TOKEN_MAX_LEN + 1), "the token ends within its buffer");
        FUZZ_CHECK(token[0] == '\0' || rules_token_valid(token, strlen(token)),
                   "the token is absent or a valid one");
    }
    free(value);
    free(token);
    free(msg);
}

/* ---- semaphores ---- */

static void check_sem_strings(const sem_request *req)
{
    FUZZ_CHECK(fuzz_terminated(req->name, sizeof req->name), "name ends within its buffer");
    FUZZ_CHECK(fuzz_terminated(req->owner, sizeof req->owner), "owner ends within its buffer");
    FUZZ_CHECK(req->owner[0] == '\0' || rules_owner_valid(req->owner, strlen(req->owner)),
               "an owner obeys rules_owner_valid");
}

static void fuzz_sem_acquire(const char *body, size_t len, const api_limits *lim, size_t msglen)
{
    sem_request *req = calloc(1, sizeof *req), *again = calloc(1, sizeof *again);
    char *msg = fuzz_msg_new(msglen), *msg2 = fuzz_msg_new(msglen);
    if (!req || !again)
        abort();
    strcpy(req->name, NAME_SENTINEL);
    strcpy(again->name, NAME_SENTINEL);
    int rc = api_sem_parse_acquire(body, len, lim, req, msg, msglen);
    int rc2 = api_sem_parse_acquire(body, len, lim, again, msg2, msglen);
    FUZZ_CHECK(rc == 0 || rc == -1, "api_sem_parse_acquire returns 0 or -1");
    fuzz_check_msg(rc == 0, msg, msglen);
    FUZZ_CHECK(rc == rc2 && !memcmp(req, again, sizeof *req) && !strcmp(msg, msg2),
               "the same body parses the same way twice");
    if (rc == 0) {
        FUZZ_CHECK(!strict_refuses(body, len), "a control byte, bad UTF-8 or \\u0000 is refused");
        check_sem_strings(req);
        FUZZ_CHECK(!strcmp(req->name, NAME_SENTINEL), "the name is not touched");
        FUZZ_CHECK(req->op == SEM_ACQUIRE, "op is acquire");
        FUZZ_CHECK(req->limit >= 1 && req->limit <= SEM_LIMIT_MAX, "limit within 1..SEM_LIMIT_MAX");
        FUZZ_CHECK(req->permits >= 1 && req->permits <= req->limit, "permits within 1..limit");
        FUZZ_CHECK(req->ttl_ms >= 1 && req->ttl_ms <= lim->max_ttl_ms, "ttl_ms within 1..max_ttl_ms");
        FUZZ_CHECK(req->wait_ms >= 0 && req->wait_ms <= lim->max_wait_ms, "wait_ms within 0..max_wait_ms");
        FUZZ_CHECK(!req->hold || (req->permits == 1 && req->ttl_ms >= HOLD_MIN_TTL_MS),
                   "a held stream keeps one permit, ttl_ms >= 1000");
    }
    free(req);
    free(again);
    free(msg);
    free(msg2);
}

static int commas(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == ',';
    return n;
}

static void fuzz_sem_tokens(bool extend, const char *header, const char *query, const char *body,
                            size_t len, const api_limits *lim, size_t msglen)
{
    sem_request *req = calloc(1, sizeof *req), *again = calloc(1, sizeof *again);
    char *msg = fuzz_msg_new(msglen), *msg2 = fuzz_msg_new(msglen);
    if (!req || !again)
        abort();
    int rc = api_sem_parse_tokens(extend, header, query, body, len, lim, req, msg, msglen);
    int rc2 = api_sem_parse_tokens(extend, header, query, body, len, lim, again, msg2, msglen);
    FUZZ_CHECK(rc == 0 || rc == -1, "api_sem_parse_tokens returns 0 or -1");
    fuzz_check_msg(rc == 0, msg, msglen);
    FUZZ_CHECK(rc == rc2 && !memcmp(req, again, sizeof *req) && !strcmp(msg, msg2),
               "the same input parses the same way twice");
    if (rc == 0) {
        FUZZ_CHECK(!strict_refuses(body, len), "a control byte, bad UTF-8 or \\u0000 is refused");
        check_sem_strings(req);
        FUZZ_CHECK(req->op == (extend ? SEM_EXTEND : SEM_RELEASE), "op as asked");
        FUZZ_CHECK(req->ntokens >= 1 && req->ntokens <= SEM_LIMIT_MAX, "1..SEM_LIMIT_MAX tokens");
        if (header || query)
            FUZZ_CHECK(req->ntokens == commas(header ? header : query) + 1,
                       "a header's (else a query's) list gives one token per item");
        for (int i = 0; i < req->ntokens; i++) {
            const char *t = req->tokens[i];
            FUZZ_CHECK(fuzz_terminated(t, sizeof req->tokens[i]), "a token ends within its buffer");
            FUZZ_CHECK(rules_token_valid(t, strlen(t)), "a permit token obeys the token rules");
            int slot;
            char tok[TOKEN_MAX_LEN + 1];
            FUZZ_CHECK(sem_token_split(t, SEM_LIMIT_MAX, &slot, tok, sizeof tok) && slot >= 0 &&
                           slot < SEM_LIMIT_MAX,
                       "a permit token splits into a slot and a token");
        }
        if (extend)
            FUZZ_CHECK(req->ttl_ms >= 1 && req->ttl_ms <= lim->max_ttl_ms, "ttl_ms within 1..max_ttl_ms");
        else
            FUZZ_CHECK(req->ttl_ms == lim->default_ttl_ms, "a release's ttl_ms is the default");
    }
    free(req);
    free(again);
    free(msg);
    free(msg2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    unsigned mode = (uint8_t)(fuzz_byte(&in) - '0') % 10;
    uint8_t lb = fuzz_byte(&in);
    const api_limits *lim = &limits[(uint8_t)(lb - '0') % NLIMITS];
    size_t msglen = lb & 0x80 ? 13 : 256;
    char *store = NULL, *header = NULL, *query = NULL;
    bool extend = false;
    if (mode == 4 || mode == 5)
        store = fuzz_cstr(&in);
    if (mode == 9) {
        unsigned flags = (uint8_t)(fuzz_byte(&in) - '0');
        extend = flags & 1;
        if (flags & 2)
            header = fuzz_cstr(&in);
        if (flags & 4)
            query = fuzz_cstr(&in);
    }
    size_t len;
    char *body = fuzz_rest(&in, &len);
    switch (mode) {
    case 0: fuzz_body(RL_ACQUIRE, body, len, lim, msglen); break;
    case 1: fuzz_body(RL_EXTEND, body, len, lim, msglen); break;
    case 2: fuzz_body(RL_RELEASE, body, len, lim, msglen); break;
    case 3: fuzz_body(RL_INSPECT, body, len, lim, msglen); break;
    case 4: fuzz_dapr(false, store, body, len, lim, msglen); break;
    case 5: fuzz_dapr(true, store, body, len, lim, msglen); break;
    case 6: fuzz_campaign(body, len, lim, msglen); break;
    case 7: fuzz_value(body, len, msglen); break;
    case 8: fuzz_sem_acquire(body, len, lim, msglen); break;
    default: fuzz_sem_tokens(extend, header, query, body, len, lim, msglen); break;
    }
    free(body);
    free(store);
    free(header);
    free(query);
    return 0;
}
