/* election.c - see election.h. */
#include "election.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold.h"
#include "base/base.h"

void election_lock_name(const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s%s", name, ELECTION_SUFFIX);
}

bool election_candidate_valid(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    return len <= ELECTION_CANDIDATE_MAX && rules_name_valid(s, len);
}

bool election_value_valid(const char *s)
{
    size_t len = strlen(s);
    return len == 0 || rules_text_valid(s, len, ELECTION_VALUE_MAX);
}

static int value_field(const json_t *root, bool required, char *value, char *msg, size_t msglen)
{
    const char *v;
    value[0] = '\0';
    if (jsonio_string(root, "value", &v, msg, msglen) < 0)
        v = NULL;
    else if (!v && !required)
        return 0;
    if (!v || !election_value_valid(v)) {
        snprintf(msg, msglen, "value must be a string of 0 to %d printable ASCII bytes",
                 ELECTION_VALUE_MAX);
        return -1;
    }
    memcpy(value, v, strlen(v) + 1);
    return 0;
}

int election_parse_campaign(const char *body, size_t len, long long default_ttl_ms,
                            long long max_ttl_ms, rl_request *req, char *candidate, char *value,
                            char *msg, size_t msglen)
{
    memset(req, 0, sizeof *req);
    req->op = RL_ACQUIRE;
    req->hold = true;
    req->ttl_ms = default_ttl_ms;
    req->wait_ms = ELECTION_WAIT_ROUND_MS;
    json_t *root = jsonio_read_object(body, len, false, msg, msglen);
    if (!root)
        return -1;
    int rc = -1;
    const char *c;
    if (jsonio_string(root, "candidate", &c, msg, msglen) < 0)
        c = NULL;
    if (!c || !election_candidate_valid(c)) {
        snprintf(msg, msglen, "candidate must be a string of 1 to %d bytes of A-Z a-z 0-9 . _ : -",
                 ELECTION_CANDIDATE_MAX);
        goto out;
    }
    memcpy(candidate, c, strlen(c) + 1);
    if (value_field(root, false, value, msg, msglen) < 0 ||
        jsonio_int(root, "ttl_ms", HOLD_MIN_TTL_MS, max_ttl_ms, &req->ttl_ms, msg, msglen) < 0 ||
        jsonio_int(root, "heartbeat_ms", HOLD_HEARTBEAT_MIN_MS, max_ttl_ms, &req->heartbeat_ms, msg, msglen) < 0)
        goto out;
    if (req->ttl_ms < HOLD_MIN_TTL_MS)
        req->ttl_ms = HOLD_MIN_TTL_MS;
    if (req->ttl_ms > max_ttl_ms) {
        /* --max-ttl-ms below a held stream's least ttl: refused, as the
         * held locks and permits are (found by tests/fuzz) */
        snprintf(msg, msglen, "ttl_ms must be from %d to %lld (--max-ttl-ms)", HOLD_MIN_TTL_MS,
                 max_ttl_ms);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int election_parse_value(const char *body, size_t len, char *value, char *token, char *msg,
                         size_t msglen)
{
    token[0] = '\0';
    json_t *root = jsonio_read_object(body, len, false, msg, msglen);
    if (!root)
        return -1;
    int rc = -1;
    const char *t;
    if (value_field(root, true, value, msg, msglen) < 0 ||
        jsonio_string(root, "token", &t, msg, msglen) < 0)
        goto out;
    if (t) {
        if (!rules_token_valid(t, strlen(t)) || strlen(t) > TOKEN_MAX_LEN) {
            snprintf(msg, msglen, "token must be a token redlockd gave");
            goto out;
        }
        memcpy(token, t, strlen(t) + 1);
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

void election_owner(const char *candidate, const char *value, char *out, size_t outlen)
{
    snprintf(out, outlen, "\x01%s\x1f%s", candidate, value);
}

bool election_owner_split(const char *owner, char *candidate, long long *since_ms, char *value)
{
    const char *sp1 = strchr(owner, ' ');
    if (!sp1 || sp1 == owner || sp1 - owner > 19)
        return false;
    long long since = 0;
    for (const char *p = owner; p < sp1; p++) {
        if (*p < '0' || *p > '9')
            return false;
        since = since * 10 + (*p - '0');
    }
    const char *sp2 = strchr(sp1 + 1, '\x1f');   /* (a candidate may hold spaces) */
    if (!sp2 || sp2 == sp1 + 1 || (size_t)(sp2 - sp1 - 1) > ELECTION_CANDIDATE_MAX ||
        strlen(sp2 + 1) > ELECTION_VALUE_MAX)
        return false;
    memcpy(candidate, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    candidate[sp2 - sp1 - 1] = '\0';
    *since_ms = since;
    strcpy(value, sp2 + 1);
    return true;
}

void election_state_of(const rl_result *res, election_state *st)
{
    memset(st, 0, sizeof *st);
    if (!res->held)
        return;
    st->held = true;
    st->term = res->fence;
    st->validity_ms = res->validity_ms;
    if (!election_owner_split(res->owner, st->leader, &st->since_ms, st->value))
        snprintf(st->leader, sizeof st->leader, "%s", "");   /* held, but not by a campaign */
}

void election_state_add(cJSON *o, const char *name, const election_state *st)
{
    cJSON_AddStringToObject(o, "name", name);
    if (st->held) {
        cJSON_AddStringToObject(o, "leader", st->leader);
        cJSON_AddStringToObject(o, "value", st->value);
        jsonio_add_int(o, "term", st->term);
        jsonio_add_int(o, "since", st->since_ms);
        jsonio_add_int(o, "validity_ms", st->validity_ms);
    } else {
        cJSON_AddNullToObject(o, "leader");
        cJSON_AddNullToObject(o, "value");
        cJSON_AddNullToObject(o, "term");
        cJSON_AddNullToObject(o, "since");
        jsonio_add_int(o, "validity_ms", 0);
    }
}

char *election_state_json(const char *name, const election_state *st, const char *candidate)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    election_state_add(o, name, st);
    if (candidate)
        cJSON_AddBoolToObject(o, "is_leader", st->held && !strcmp(st->leader, candidate));
    return jsonio_print_free(o);
}

char *election_event_line(const char *event, const char *name, const election_state *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "event", event);
    election_state_add(o, name, st);
    char *s = jsonio_print_free(o);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    return line;
}

const char *election_change(bool first, const election_state *last, const election_state *now)
{
    if (first)
        return "state";
    if (!now->held)
        return last->held ? "vacant" : NULL;
    if (now->term > last->term)
        return "elected";
    if (now->term < last->term)
        return NULL;   /* an older view */
    if (!last->held)
        return "state";   /* the same term, read as vacant in between */
    if (strcmp(now->value, last->value) || strcmp(now->leader, last->leader))
        return "proclaimed";
    return NULL;
}
