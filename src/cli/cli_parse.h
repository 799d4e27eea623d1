/* cli_parse.h - the pure parts of the `redlock` command-line client: its
 * command line, durations, lock names and owners, the service's URL, TLS
 * files and bearer token (cli_service.c), the lines of a held stream, the
 * service's error answers and the exit code each maps to.
 *
 * Nothing here touches a socket, a process or the environment, so it is
 * unit-tested as it is (tests/unit/cli/test_cli.c); redlock.c does the I/O.
 * cli_args points into the argv it was parsed from and owns nothing;
 * cli_lines owns its buffer (cli_lines_free).
 */
#ifndef RL_CLI_PARSE_H
#define RL_CLI_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/base.h"   /* the service's name, token and owner rules */

/* Exit codes. The failures in which CMD never ran (or no call succeeded)
 * use the BSD sysexits numbers, so that they stay apart from the small
 * numbers commands commonly use. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_NOT_HELD = 1,      /* status: not held; extend/release: 409 not_held */
    CLI_EXIT_LOST = 3,          /* run: the lock was lost while CMD ran; CMD was stopped */
    CLI_EXIT_USAGE = 64,        /* EX_USAGE: bad command line, or 400 from the service */
    CLI_EXIT_UNAVAILABLE = 69,  /* EX_UNAVAILABLE: unreachable, 503, or another 5xx */
    CLI_EXIT_SOFTWARE = 70,     /* EX_SOFTWARE: out of memory, fork failed */
    CLI_EXIT_NOT_ACQUIRED = 75, /* EX_TEMPFAIL: 409 locked (or 429) when --wait ran out */
    CLI_EXIT_PROTOCOL = 76,     /* EX_PROTOCOL: an answer redlock does not understand */
    CLI_EXIT_NOPERM = 77,       /* EX_NOPERM: 401 unauthorized */
};

#define CLI_DEFAULT_URL "http://127.0.0.1:8080"
#define CLI_DEFAULT_GRACE_MS 10000LL
#define CLI_WAIT_FOREVER (-1LL)
#define CLI_HOLD_MIN_TTL_MS 1000LL     /* a held stream needs ttl_ms >= 1000 */
#define CLI_SERVER_MAX_WAIT_MS 60000LL /* redlockd's default --max-wait-ms: the first
                                          wait_ms asked for by a long --wait */
#define CLI_MAX_DURATION_MS 2147483647LL
#define CLI_LINE_MAX 65536             /* longest line accepted on a held stream */

enum cli_cmd { CLI_NONE, CLI_RUN, CLI_ACQUIRE, CLI_EXTEND, CLI_RELEASE, CLI_STATUS, CLI_READY,
               CLI_ELECT, CLI_LIST };

typedef struct cli_args {
    enum cli_cmd cmd;
    bool help;                    /* --help, -h or `help [CMD]`: print usage, exit 0 */
    bool version;
    bool json;                    /* acquire, extend, status, ready: print the whole answer */
    const char *url;              /* --url; NULL: REDLOCK_URL, else CLI_DEFAULT_URL */
    const char *cacert;           /* --cacert; NULL: REDLOCK_CACERT (cli_service_resolve) */
    const char *cert;             /* --cert; NULL: REDLOCK_CERT */
    const char *key;              /* --key; NULL: REDLOCK_KEY */
    const char *auth_token_file;  /* --auth-token-file; NULL: the environment (cli_token_source) */
    long long ttl_ms;             /* --ttl; -1: not given (the service's default) */
    long long wait_ms;            /* --wait; 0 = try once, CLI_WAIT_FOREVER */
    long long grace_ms;           /* --grace: SIGTERM to SIGKILL after a loss */
    const char *owner;            /* --owner; NULL: none given */
    const char *name;
    const char *token;            /* extend, release */
    char **cmd_argv;              /* run, elect: CMD and its ARGs, NULL-terminated, inside argv */
    const char *candidate;        /* elect --candidate; NULL: HOST-PID of this redlock */
    const char *value;            /* elect --value; NULL: "" */
    bool observe;                 /* elect --observe: print the leader's changes, run nothing */
    int limit;                    /* run --limit L: a permit of the semaphore NAME of L (0: a lock) */
    bool force;                   /* release --force: an operator's, with the admin token (no TOKEN) */
    const char *admin_token_file; /* --admin-token-file; NULL: REDLOCK_ADMIN_TOKEN */
    const char *prefix;           /* list --prefix; NULL: every name */
} cli_args;

/* ---- the service: its URL, TLS files and bearer token ---- */

#define CLI_URL_MAX 1700           /* the longest --url */
#define CLI_SOCKET_PATH_MAX 107    /* a Unix socket's path: sun_path holds 108 bytes with the NUL */
#define CLI_UNIX_BASE "http://localhost"   /* the URL calls over a Unix socket are made to: redlockd
                                              takes localhost as a Host of its own */

enum cli_scheme { CLI_SCHEME_HTTP, CLI_SCHEME_HTTPS, CLI_SCHEME_UNIX };

/* What one place says about the service: the command line's flags or the
 * environment's variables. NULL: not given (a variable set to "" is not
 * given either). Points into argv or environ. */
typedef struct cli_service_in {
    const char *url, *cacert, *cert, *key;
} cli_service_in;

/* The service as the calls reach it. The file names point into the inputs. */
typedef struct cli_service {
    enum cli_scheme scheme;
    char shown[CLI_URL_MAX + 1];       /* the URL as given, without trailing '/': for messages */
    char base[CLI_URL_MAX + 1];        /* what a request's path is appended to */
    char socket_path[CLI_SOCKET_PATH_MAX + 1];   /* CLI_SCHEME_UNIX: the socket file; else "" */
    const char *cacert, *cert, *key;   /* https: PEM files for CURLOPT_CAINFO, _SSLCERT,
                                          _SSLKEY; NULL: the system's CAs, no client certificate,
                                          the key in the certificate's file */
    const char *cacert_from, *cert_from, *key_from;   /* "--cacert" or "REDLOCK_CACERT", ...: for messages */
} cli_service;

/* Resolves the service from flags and env (either may be NULL: nothing
 * given). A flag wins over its variable. The URL is one of
 *   http://HOST[:PORT][/PATH], https://HOST[:PORT][/PATH]   (HOST may be [v6])
 *   unix:PATH   the socket file (at most CLI_SOCKET_PATH_MAX bytes), called as CLI_UNIX_BASE
 * and CLI_DEFAULT_URL when neither gives one; no query, fragment or
 * user:password@ (a token goes in a header). The TLS files are for https
 * only: a flag given with another scheme is an error, a variable is passed
 * over (it may be meant for another service). The key goes with its
 * certificate: --key or, for REDLOCK_CERT, REDLOCK_KEY; a key without a
 * certificate is an error. Nothing is opened here (cli_set_service checks
 * that the files can be read). Returns 0, or -1 with one line in err
 * naming the flag or variable at fault. */
int cli_service_resolve(const cli_service_in *flags, const cli_service_in *env, cli_service *s, char *err,
                        size_t errlen);

/* Where the bearer token comes from, given --auth-token-file (NULL: not
 * given) and the values of REDLOCK_AUTH_TOKEN and REDLOCK_TOKEN (NULL:
 * unset). The flag wins; then REDLOCK_AUTH_TOKEN, the older name, whenever
 * it is set, "" meaning no token (so that a redlock that `run`'s CMD runs
 * takes it over REDLOCK_TOKEN, which there is the lock's token:
 * cli_child_auth_token); then REDLOCK_TOKEN unless it is "". */
enum cli_token_from { CLI_TOKEN_NONE, CLI_TOKEN_FILE, CLI_TOKEN_AUTH_ENV, CLI_TOKEN_ENV };
enum cli_token_from cli_token_source(const char *file, const char *auth_env, const char *token_env);

/* The REDLOCK_AUTH_TOKEN that run and elect give CMD, whose REDLOCK_TOKEN
 * is the lock's token: the bearer token redlock's own environment gave
 * (as cli_token_source reads it), else "" (no token). A token from
 * --auth-token-file is not put into CMD's environment. */
const char *cli_child_auth_token(const char *auth_env, const char *token_env);

/* Is a TLS error (libcurl's text, with OpenSSL's reason) the service's
 * alert against the client's certificate, or its lack of one ("tlsv13
 * alert certificate required", "tlsv1 alert unknown ca", "sslv3 alert bad
 * certificate", ...)? A server sends those about the client only, so the
 * message can say so. */
bool cli_tls_refused_client(const char *error);

/* Parses a duration: a decimal number and a unit, ms, s, m or h, repeated
 * ("500ms", "30s", "1.5s", "2m", "1h30m"). A bare number is refused: it
 * would be unclear whether it means seconds or milliseconds. The result must
 * be a whole number of milliseconds, at most CLI_MAX_DURATION_MS.
 * Returns 0 with *ms set, or -1 with a reason in why (static text). */
int cli_parse_duration(const char *s, long long *ms, const char **why);

/* As cli_parse_duration, and "forever" gives CLI_WAIT_FOREVER. */
int cli_parse_wait(const char *s, long long *ms, const char **why);

/* One entry of GET /locks (a JSON object) as `redlock list` prints it:
 * "NAME  validity 12.3s, fence F, owner O" (no owner when none is set).
 * -1 when it is not one. */
struct cJSON;
int cli_format_listed(const struct cJSON *entry, char *out, size_t outlen);

/* Parses argv (argv[0] is the program). Returns 0, or -1 with one line in
 * err for a usage error (exit CLI_EXIT_USAGE). With a->help or a->version
 * set, nothing else need be valid. */
int cli_parse_args(int argc, char **argv, cli_args *a, char *err, size_t errlen);

/* Prints the usage of cmd (CLI_NONE: the whole program). */
void cli_usage(FILE *out, enum cli_cmd cmd);
const char *cli_cmd_name(enum cli_cmd cmd);

/* "450ms", "2.3s", "4m05s", "2h10m": a duration for people. */
void cli_format_ms(long long ms, char *out, size_t outlen);

/* The exit code for an HTTP answer (status, the error code of its body or
 * NULL), when the command treats it as a failure. */
int cli_exit_for(long status, const char *error);

/* One line (no "redlock: " prefix, no newline) for an error answer of the
 * service: "<code>: <message>" and what else the body tells, e.g.
 * "locked: the lock is held by another owner (retry after 2.3s)". Also for
 * a body that is not JSON ("HTTP 502"). */
void cli_format_error(long status, const char *body, char *out, size_t outlen);

/* cli_exit_for with the error code read from an answer's body. */
int cli_answer_exit(long status, const char *body);

/* The JSON body of an acquire: ttl_ms (when >= 0), wait_ms, "hold": true
 * when hold, owner (when not NULL). Returns 0, or -1 when out is too small. */
int cli_acquire_body(long long ttl_ms, long long wait_ms, bool hold, const char *owner,
                     char *out, size_t outlen);

/* The same for a semaphore's permit: limit, wait_ms, ttl_ms (when >= 0),
 * owner (when not NULL or ""). */
int cli_permit_body(int limit, long long wait_ms, long long ttl_ms, const char *owner, char *out, size_t outlen);

/* The same for a campaign: candidate, value, ttl_ms (when >= 0). */
int cli_campaign_body(const char *candidate, const char *value, long long ttl_ms, char *out, size_t outlen);

/* Reads the service's largest wait_ms from a 400 answer that refused the
 * one asked for ("wait_ms must be from 0 to 60000"). Returns true with *cap. */
bool cli_wait_cap(const char *body, long long *cap);

/* How long to sleep before asking again after a refusal that came sooner
 * than the wait asked for (a service whose largest wait is 0, or a 429):
 * the holder's time left, kept within 50 ms..1 s so that a release is seen
 * soon, times 0.5 + u (u in [0, 1), random) so that contenders spread out. */
long long cli_retry_delay_ms(long long retry_after_ms, double u);

/* Is an answer a transient failure that a wait rides out (503: no quorum,
 * overloaded, a stopping instance behind a load balancer)? */
bool cli_transient(long status);

/* How long to sleep before the attempt-th retry (1, 2, ...) of a transient
 * failure within --wait: 100 ms doubling to at most 2 s, times 0.5 + u/2
 * (u in [0, 1), random), so that many clients do not retry in step. */
long long cli_transient_delay_ms(int attempt, double u);

/* One line for GET /locks/{name}'s answer: "held: validity 2.3s, fence 7,
 * owner w-1" or "not held". Returns 1 held, 0 not held, -1 malformed. */
int cli_format_status(const char *body, char *out, size_t outlen);

/* One line for GET /readyz's answer: "ready: 5 of 5 masters can vote
 * (quorum 3)". Returns 0, or -1 when the body is not readyz's. */
int cli_format_ready(const char *body, char *out, size_t outlen);

/* ---- held streams (application/x-ndjson) ---- */

enum cli_event_kind { CLI_EV_OTHER, CLI_EV_ACQUIRED, CLI_EV_RENEWED, CLI_EV_LOST, CLI_EV_RELEASED };

typedef struct cli_event {
    enum cli_event_kind kind;
    char token[300];      /* acquired */
    long long fence;      /* acquired; -1 when absent */
    long long validity_ms;/* acquired, renewed; -1 when absent */
    long long ttl_ms;     /* acquired; -1 when absent */
    char reason[64];      /* lost, released ("" when absent) */
} cli_event;

/* Parses one line of a held stream. Returns 0, or -1 when the line is not
 * a JSON object with a string "event" (unknown events are CLI_EV_OTHER),
 * or an acquired/renewed event lacks what it must carry. */
int cli_parse_event(const char *line, cli_event *ev);

/* One line for an event of an election's watch stream ("elected: pg-2, term
 * 17, value 10.0.0.9:5432", "vacant (after term 17)"). Returns 0, or -1
 * when the line is not such an event. */
int cli_format_election_event(const char *line, char *out, size_t outlen);

#define CLI_CANDIDATE_MAX 48   /* an election's candidate: the lock-name alphabet */
#define CLI_VALUE_MAX 64       /* an election's value: text (rules.h) */
#define CLI_PATH_MAX 700       /* a request path: a route, a name (RULES_NAME_PATH_MAX) and a query */
#define CLI_LIMIT_MAX 64       /* permits of a semaphore (redlockd's SEM_LIMIT_MAX) */

/* Splits a byte stream into lines. */
typedef struct cli_lines {
    char *buf;
    size_t len, cap;
} cli_lines;

/* Appends n bytes and calls fn for each complete line (without its "\n" or
 * "\r\n"; empty lines skipped). Stops early when fn returns non-zero and
 * returns that; returns -1 when a line outgrows CLI_LINE_MAX or memory runs
 * out, else 0. */
int cli_lines_feed(cli_lines *l, const char *data, size_t n,
                   int (*fn)(const char *line, void *arg), void *arg);
void cli_lines_free(cli_lines *l);

#endif
