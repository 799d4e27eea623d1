/* election.h - the pure parts of leader election over HTTP (docs/elections.md):
 * what a campaign asks for, how candidate, since and value are kept in the
 * lock's owner, and the JSON of an election's state.
 *
 * An election NAME is the ordinary lock NAME RULES_SEP "election"
 * (RL_INTERNAL_NAME_MAX): no name holds RULES_SEP, so no lock route reaches
 * it. Its owner (stored beside the lock, expiring with it) is "<since_ms>
 * <candidate>\x1f<value>" (a control byte, which neither holds): when the
 * term began (Unix ms, stamped by each master's clock as
 * it grants: the acquire script replaces the byte 1 a campaign's owner
 * starts with), the leader, and what it proclaims. A term is the grant's
 * fence.
 *
 * Pure (cJSON only, no sockets): unit-tested in tests/unit/recipes/test_election.c.
 * Strings returned as char * are malloc'd; the caller frees.
 */
#ifndef RL_ELECTION_H
#define RL_ELECTION_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"

#define ELECTION_SUFFIX RULES_SEP "election"
#define ELECTION_CANDIDATE_MAX 48   /* bytes of a candidate: text (rules.h) */
#define ELECTION_VALUE_MAX 64       /* bytes of a value: text (rules.h), or empty */
#define ELECTION_WAIT_ROUND_MS 10000 /* a campaign waits in the engine in rounds this long */
#define ELECTION_WATCH_POLL_MS 250   /* a watch reads the election this often */

_Static_assert(ELECTION_CANDIDATE_MAX + 1 + 13 + 1 + ELECTION_VALUE_MAX <= RL_OWNER_MAX,
               "candidate, since and value fit an owner");

/* The lock name of election name (valid per rules_name_valid) into out. */
void election_lock_name(const char *name, char *out, size_t outlen);

/* A candidate: 1 to ELECTION_CANDIDATE_MAX bytes of A-Z a-z 0-9 . _ : - */
bool election_candidate_valid(const char *s);
/* A value: 0 to ELECTION_VALUE_MAX bytes of printable ASCII (0x20-0x7e). */
bool election_value_valid(const char *s);

/* Parses a campaign's body {"candidate" (required), "value", "ttl_ms"} into
 * req (an acquire with hold; the owner is made by election_owner), candidate
 * and value (ELECTION_*_MAX + 1 bytes each). Returns 0, or -1 with msg. */
int election_parse_campaign(const char *body, size_t len, long long default_ttl_ms,
                            long long max_ttl_ms, rl_request *req, char *candidate, char *value,
                            char *msg, size_t msglen);

/* Parses PUT .../value's body {"value" (required), "token"}: value into
 * value, the token (when given) into token (TOKEN_MAX_LEN + 1 bytes, "" when
 * absent). Returns 0, or -1 with msg. */
int election_parse_value(const char *body, size_t len, char *value, char *token, char *msg,
                         size_t msglen);

/* A campaign's owner, "\x01<candidate> <value>", into out (RL_OWNER_MAX + 1
 * bytes): the masters stamp the time in place of the \x01. */
void election_owner(const char *candidate, const char *value, char *out, size_t outlen);

/* Splits an owner made by election_owner. False when it is not one. */
bool election_owner_split(const char *owner, char *candidate, long long *since_ms, char *value);

/* A leader as read from a majority: held false when there is none. */
typedef struct election_state {
    bool held;
    char leader[ELECTION_CANDIDATE_MAX + 1];
    char value[ELECTION_VALUE_MAX + 1];
    long long term;
    long long since_ms;
    long long validity_ms;
} election_state;

/* The state of an inspect's result. */
void election_state_of(const rl_result *res, election_state *st);

/* GET /elections/{name}: {"name","leader","value","term","since","validity_ms"}
 * (leader, value, term and since null when there is none), with
 * "is_leader" when candidate is not NULL. */
char *election_state_json(const char *name, const election_state *st, const char *candidate);

/* Adds election_state_json's fields (but is_leader) to o. */
struct cJSON;
void election_state_add(struct cJSON *o, const char *name, const election_state *st);

/* A watch's event: {"event", then the fields of election_state_json}, one
 * line with its newline. */
char *election_event_line(const char *event, const char *name, const election_state *st);

/* What a watch says when the state read changes from last to now (first:
 * nothing said yet): "state" first, "elected" for a higher term,
 * "proclaimed" for a new value in the same term, "vacant" when no leader
 * is seen. A vacant last keeps the term last seen (the watch sets it), so
 * terms never go back: a lower term is an older view and is not reported,
 * and the same term read again after "vacant" is a "state". Returns the
 * event name, or NULL for nothing to say. */
const char *election_change(bool first, const election_state *last, const election_state *now);

#endif
