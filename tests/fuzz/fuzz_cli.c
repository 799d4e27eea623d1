/* fuzz_cli.c - libFuzzer target for the `redlock` client's pure parsers
 * (src/cli/cli_parse.h): its command line (cli_parse_args), durations
 * (cli_parse_duration, cli_parse_wait, cli_format_ms), the service's
 * answers (cli_format_error, cli_answer_exit, cli_wait_cap,
 * cli_format_status, cli_format_ready), a held stream's bytes and lines
 * (cli_lines_feed, cli_parse_event, cli_format_election_event) and the
 * acquire body it sends (cli_acquire_body).
 *
 * An input is one byte choosing what to fuzz ('0'..'5', modulo 6 after
 * subtracting '0'), then:
 *
 *   0 a duration (up to a NUL)
 *   1 a command line: its arguments after argv[0], separated by NULs
 *   2 a status byte (an index into statuses[]), an out size byte, a body
 *   3 a held stream: a chunk size byte, then the bytes the service sent
 *   4 an acquire body: 4 bytes ttl, 4 bytes wait, a flags byte (1 hold,
 *     2 no owner, 4 a small buffer), the owner
 *   5 8 bytes of milliseconds and 8 of a retry delay's u, a size byte
 *
 * Beyond "no crash, no leak, no undefined behaviour", checked: a parsed
 * command line obeys every rule the usage states, points into the argv it
 * came from and parses the same twice; a duration is within bounds and
 * survives cli_format_ms and a parse back within its rounding; every text
 * ends within its buffer and the one-line ones hold no line break; lines
 * come out of the stream as an independent split of it says, however it
 * was cut and wherever the callback stopped the feed; an acquire body the
 * client makes is accepted by the service's own parser (api_parse_body)
 * with the same values.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "front/api.h"
#include "cli_parse.h"
#include "base/base.h"

#include "fuzz_util.h"

#define MAX_ARGS 40

/* ---- durations ---- */

/* How far cli_format_ms may round: "2.3s" under a minute, whole seconds
 * under an hour, whole minutes beyond. */
static long long rounding(long long ms)
{
    return ms < 1000 ? 0 : ms < 59950 ? 50 : ms < 3600000 ? 999 : 59999;
}

static void check_format_ms(long long ms)
{
    char out[32];
    cli_format_ms(ms, out, sizeof out);
    FUZZ_CHECK(fuzz_terminated(out, sizeof out) && out[0], "cli_format_ms writes something");
    if (ms < 0 || ms > CLI_MAX_DURATION_MS)
        return;
    long long back = -1;
    const char *why = NULL;
    FUZZ_CHECK(cli_parse_duration(out, &back, &why) == 0, "cli_format_ms's text parses back");
    long long d = back > ms ? back - ms : ms - back;
    FUZZ_CHECK(d <= rounding(ms), "cli_format_ms rounds by less than its last digit");
}

static void fuzz_duration(const char *s)
{
    long long ms = -7;
    const char *why = NULL;
    int rc = cli_parse_duration(s, &ms, &why);
    FUZZ_CHECK(rc == 0 || rc == -1, "cli_parse_duration returns 0 or -1");
    if (rc < 0) {
        FUZZ_CHECK(why && why[0], "a refused duration says why");
        FUZZ_CHECK(ms == -7, "a refused duration leaves *ms");
    } else {
        FUZZ_CHECK(ms >= 0 && ms <= CLI_MAX_DURATION_MS, "a duration is within 0..CLI_MAX_DURATION_MS");
        FUZZ_CHECK(strspn(s, "0123456789.") < strlen(s), "a bare number is refused");
        FUZZ_CHECK(strspn(s, "0123456789.mhs") == strlen(s), "a duration is digits, '.' and units");
        check_format_ms(ms);
    }
    long long wms = -7;
    const char *wwhy = NULL;
    int wrc = cli_parse_wait(s, &wms, &wwhy);
    if (!strcmp(s, "forever"))
        FUZZ_CHECK(wrc == 0 && wms == CLI_WAIT_FOREVER, "forever waits forever");
    else
        FUZZ_CHECK(wrc == rc && wms == ms, "--wait parses a duration as --ttl does");
}

/* ---- the command line ---- */

/* Does p point into one of the arguments (its text or its NUL)? */
static bool in_argv(const char *p, char **argv, int argc)
{
    for (int k = 0; k < argc; k++)
        if (p >= argv[k] && p <= argv[k] + strlen(argv[k]))
            return true;
    return false;
}

static void check_args(const cli_args *a, char **argv, int argc)
{
    const char *ptrs[] = {a->url, a->auth_token_file, a->owner, a->name, a->token, a->candidate,
                          a->value, a->prefix, a->admin_token_file};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++)
        FUZZ_CHECK(!ptrs[k] || in_argv(ptrs[k], argv, argc), "cli_args points into argv");
    if (a->help || a->version)
        return;   /* nothing else need be valid */
    enum cli_cmd c = a->cmd;
    FUZZ_CHECK(c != CLI_NONE, "a command");
    bool run_like = c == CLI_RUN || (c == CLI_ELECT && !a->observe);
    FUZZ_CHECK((c == CLI_READY || c == CLI_LIST) == (a->name == NULL),
               "every command but ready and list has a NAME");
    if (a->name)
        FUZZ_CHECK(rules_name_valid(a->name, strlen(a->name)), "NAME obeys the name rules");
    FUZZ_CHECK((c == CLI_EXTEND || c == CLI_RELEASE) == (a->token != NULL),
               "extend and release, and only they, have a TOKEN");
    if (a->token)
        FUZZ_CHECK(rules_token_valid(a->token, strlen(a->token)), "TOKEN obeys the token rules");
    FUZZ_CHECK(run_like == (a->cmd_argv != NULL), "run and elect, and only they, have a CMD");
    if (a->cmd_argv) {
        FUZZ_CHECK(a->cmd_argv > argv && a->cmd_argv < argv + argc && a->cmd_argv[0],
                   "CMD is one of argv's arguments (the rest follow it to argv's NULL)");
    }
    FUZZ_CHECK(a->ttl_ms == -1 || (a->ttl_ms >= 1 && a->ttl_ms <= CLI_MAX_DURATION_MS), "--ttl in bounds");
    if (run_like)
        FUZZ_CHECK(a->ttl_ms == -1 || a->ttl_ms >= CLI_HOLD_MIN_TTL_MS, "a held stream's --ttl >= 1s");
    FUZZ_CHECK(a->wait_ms == CLI_WAIT_FOREVER || (a->wait_ms >= 0 && a->wait_ms <= CLI_MAX_DURATION_MS),
               "--wait in bounds");
    FUZZ_CHECK(a->grace_ms >= 0 && a->grace_ms <= CLI_MAX_DURATION_MS, "--grace in bounds");
    if (a->owner)
        FUZZ_CHECK(rules_owner_valid(a->owner, strlen(a->owner)), "--owner obeys the owner rules");
    if (a->candidate)
        FUZZ_CHECK(strlen(a->candidate) <= CLI_CANDIDATE_MAX &&
                       rules_name_valid(a->candidate, strlen(a->candidate)),
                   "--candidate is 1 to 48 bytes of text");
    if (a->value)
        FUZZ_CHECK(!a->value[0] || rules_text_valid(a->value, strlen(a->value), CLI_VALUE_MAX),
                   "--value is 0 to 64 bytes of text");
    FUZZ_CHECK(a->limit >= 0 && a->limit <= CLI_LIMIT_MAX, "--limit in bounds");
    /* Each option only where the usage allows it. */
    FUZZ_CHECK(a->ttl_ms == -1 || c == CLI_RUN || c == CLI_ACQUIRE || c == CLI_EXTEND || c == CLI_ELECT,
               "--ttl only on run, acquire, extend, elect");
    FUZZ_CHECK(a->wait_ms == 0 || c == CLI_RUN || c == CLI_ACQUIRE, "--wait only on run, acquire");
    FUZZ_CHECK(!a->owner || c == CLI_RUN || c == CLI_ACQUIRE, "--owner only on run, acquire");
    FUZZ_CHECK(a->grace_ms == CLI_DEFAULT_GRACE_MS || c == CLI_RUN || c == CLI_ELECT,
               "--grace only on run, elect");
    FUZZ_CHECK(!a->json || c == CLI_ACQUIRE || c == CLI_EXTEND || c == CLI_STATUS || c == CLI_READY ||
                   c == CLI_LIST,
               "--json only on acquire, extend, status, ready, list");
    FUZZ_CHECK((!a->candidate && !a->value && !a->observe) || c == CLI_ELECT,
               "--candidate, --value, --observe only on elect");
    FUZZ_CHECK(a->limit == 0 || c == CLI_RUN, "--limit only on run");
    FUZZ_CHECK(!a->prefix || c == CLI_LIST, "--prefix only on list");
    if (a->prefix && *a->prefix)
        FUZZ_CHECK(rules_name_valid(a->prefix, strlen(a->prefix)), "--prefix obeys the name rules");
}

static void fuzz_args(fuzz_in *in, size_t errlen)
{
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = strdup("redlock");
    if (!argv[0])
        abort();
    while (in->left && argc < MAX_ARGS + 1)
        argv[argc++] = fuzz_cstr(in);
    argv[argc] = NULL;

    cli_args a, again;
    char *err = fuzz_msg_new(errlen), *err2 = fuzz_msg_new(errlen);
    int rc = cli_parse_args(argc, argv, &a, err, errlen);
    int rc2 = cli_parse_args(argc, argv, &again, err2, errlen);
    FUZZ_CHECK(rc == 0 || rc == -1, "cli_parse_args returns 0 or -1");
    fuzz_check_msg(rc == 0, err, errlen);
    bool newline_given = false;   /* an argument's own newline may be quoted back */
    for (int k = 0; k < argc; k++)
        newline_given = newline_given || strchr(argv[k], '\n');
    FUZZ_CHECK(newline_given || !strchr(err, '\n'), "a usage error is one line");
    FUZZ_CHECK(rc == rc2 && !memcmp(&a, &again, sizeof a) && !strcmp(err, err2),
               "the same command line parses the same way twice");
    if (rc == 0)
        check_args(&a, argv, argc);
    for (int k = 0; k < argc; k++)
        free(argv[k]);
    free(err);
    free(err2);
}

/* ---- answers ---- */

static const long statuses[] = {0, -1, 200, 201, 204, 400, 401, 404, 405, 409, 413, 429,
                                500, 502, 503, 302, 418, 100, 599, 600};
#define NSTATUSES (sizeof statuses / sizeof statuses[0])

static bool exit_code_known(int c)
{
    return c == CLI_EXIT_OK || c == CLI_EXIT_NOT_HELD || c == CLI_EXIT_LOST || c == CLI_EXIT_USAGE ||
           c == CLI_EXIT_UNAVAILABLE || c == CLI_EXIT_SOFTWARE || c == CLI_EXIT_NOT_ACQUIRED ||
           c == CLI_EXIT_PROTOCOL || c == CLI_EXIT_NOPERM;
}

/* A text written into out (outlen bytes) ends within it; one-line texts
 * hold no line break. */
static void check_text(const char *out, size_t outlen, bool one_line, const char *what)
{
    FUZZ_CHECK(fuzz_terminated(out, outlen), what);
    if (one_line)
        FUZZ_CHECK(!strpbrk(out, "\r\n"), what);
}

static void fuzz_answers(fuzz_in *in)
{
    long status = statuses[fuzz_byte(in) % NSTATUSES];
    size_t outlen = 1 + fuzz_byte(in);
    char *body = fuzz_cstr(in);
    char *out = fuzz_msg_new(outlen);

    cli_format_error(status, body, out, outlen);
    check_text(out, outlen, true, "cli_format_error: one line within its buffer");

    int code = cli_answer_exit(status, body);
    FUZZ_CHECK(exit_code_known(code) && code != CLI_EXIT_OK, "an error answer maps to a failure code");
    if (status <= 0 || status >= 500)
        FUZZ_CHECK(code == CLI_EXIT_UNAVAILABLE, "no answer or a 5xx is unavailable");
    if (status == 400 || status == 413)
        FUZZ_CHECK(code == CLI_EXIT_USAGE, "400 and 413 are usage");
    if (status == 401)
        FUZZ_CHECK(code == CLI_EXIT_NOPERM, "401 is noperm");
    if (status == 429)
        FUZZ_CHECK(code == CLI_EXIT_NOT_ACQUIRED, "429 is not acquired");
    if (status != 409 && status > 0 && status < 500)
        FUZZ_CHECK(code == cli_exit_for(status, NULL), "only a 409's body matters");

    long long cap = -7;
    if (cli_wait_cap(body, &cap))
        FUZZ_CHECK(cap >= 0, "a wait cap is not negative");
    else
        FUZZ_CHECK(cap == -7, "no cap leaves *cap");

    memset(out, 0x7f, outlen);
    int rc = cli_format_status(body, out, outlen);
    FUZZ_CHECK(rc >= -1 && rc <= 1, "cli_format_status returns -1, 0 or 1");
    if (rc >= 0)
        check_text(out, outlen, true, "cli_format_status: one line within its buffer");

    memset(out, 0x7f, outlen);
    rc = cli_format_ready(body, out, outlen);
    FUZZ_CHECK(rc == 0 || rc == -1, "cli_format_ready returns 0 or -1");
    if (rc == 0)
        check_text(out, outlen, true, "cli_format_ready: one line within its buffer");
    free(out);
    free(body);
}

/* ---- held streams ---- */

typedef struct lines_seen {
    char **lines;
    size_t n, cap;
} lines_seen;

static void seen_add(lines_seen *s, const char *line, size_t len)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->lines = realloc(s->lines, s->cap * sizeof *s->lines);
        if (!s->lines)
            abort();
    }
    char *c = malloc(len + 1);
    if (!c)
        abort();
    memcpy(c, line, len);
    c[len] = '\0';
    s->lines[s->n++] = c;
}

static void seen_free(lines_seen *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->lines[i]);
    free(s->lines);
}

/* The callback as redlock run uses it: each line is an event. A line that
 * starts with '!' stops the feed (fn's non-zero return), as a lost lock
 * does. A line holding a NUL byte reads as the text before it (possibly
 * ""): the stream is bytes, the callback takes a C string. */
static int on_line(const char *line, void *arg)
{
    lines_seen *s = arg;
    FUZZ_CHECK(!strchr(line, '\n'), "a line holds no newline");
    seen_add(s, line, strlen(line));   /* the rest is the oracle's (fuzz_stream) */

    cli_event ev;
    if (cli_parse_event(line, &ev) == 0) {
        FUZZ_CHECK(fuzz_terminated(ev.token, sizeof ev.token) && fuzz_terminated(ev.reason, sizeof ev.reason),
                   "an event's strings end within their buffers");
        if (ev.kind == CLI_EV_ACQUIRED)
            FUZZ_CHECK(rules_token_valid(ev.token, strlen(ev.token)) && ev.validity_ms >= 0,
                       "an acquired event carries a valid token and its validity");
        if (ev.kind == CLI_EV_RENEWED)
            FUZZ_CHECK(ev.validity_ms >= 0, "a renewed event carries its validity");
    }
    char out[200];
    memset(out, 0x7f, sizeof out);
    if (cli_format_election_event(line, out, sizeof out) == 0)
        check_text(out, sizeof out, true, "cli_format_election_event: one line within its buffer");
    return line[0] == '!' ? 7 : 0;
}

static void fuzz_stream(fuzz_in *in)
{
    size_t chunk = 1 + fuzz_byte(in) % 64;
    const uint8_t *data = in->p;
    size_t len = in->left;

    cli_lines l = {0};
    lines_seen seen = {0};
    for (size_t off = 0; off < len;) {
        size_t n = len - off < chunk ? len - off : chunk;
        int rc = cli_lines_feed(&l, (const char *)data + off, n, on_line, &seen);
        /* A stopped feed keeps the rest: feeding nothing goes on from there. */
        while (rc == 7)
            rc = cli_lines_feed(&l, "", 0, on_line, &seen);
        FUZZ_CHECK(rc == 0, "a short stream feeds without error");
        off += n;
        chunk = 1 + (chunk * 7 + 3) % 64;
    }

    /* The oracle: split the whole stream at '\n', drop a '\r' before it,
     * skip empty lines; a line is read as a C string (to a NUL). */
    size_t k = 0, start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n')
            continue;
        size_t end = i;
        if (end > start && data[end - 1] == '\r')
            end--;
        if (end > start) {
            const uint8_t *nul = memchr(data + start, 0, end - start);
            size_t cl = nul ? (size_t)(nul - (data + start)) : end - start;
            FUZZ_CHECK(k < seen.n, "every line of the stream comes out");
            FUZZ_CHECK(strlen(seen.lines[k]) == cl && !memcmp(seen.lines[k], data + start, cl),
                       "lines come out as the stream holds them, in order");
            k++;
        }
        start = i + 1;
    }
    FUZZ_CHECK(k == seen.n, "no line comes out that the stream does not hold");
    FUZZ_CHECK(l.len == len - start, "what follows the last newline waits in the buffer");
    cli_lines_free(&l);
    seen_free(&seen);
}

/* ---- the acquire body, read by the service ---- */

static uint32_t u32(fuzz_in *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | fuzz_byte(in);
    return v;
}

static void fuzz_acquire_body(fuzz_in *in)
{
    uint32_t t = u32(in), w = u32(in);
    uint8_t flags = fuzz_byte(in);
    long long ttl = t & 0x80000000u ? -1 : (long long)(t % CLI_MAX_DURATION_MS) + 1;
    long long wait = (long long)(w % (CLI_MAX_DURATION_MS + 1));
    bool hold = flags & 1;
    char *owner = fuzz_cstr(in);
    const char *own = flags & 2 ? NULL : owner;
    size_t outlen = flags & 4 ? 1 + (size_t)(t % 96) : 1024;
    char *out = fuzz_msg_new(outlen);

    int rc = cli_acquire_body(ttl, wait, hold, own, out, outlen);
    FUZZ_CHECK(rc == 0 || rc == -1, "cli_acquire_body returns 0 or -1");
    if (rc == 0) {
        FUZZ_CHECK(fuzz_terminated(out, outlen), "the body ends within its buffer");
        bool sendable = (!own || rules_owner_valid(own, strlen(own))) &&
                        (!hold || ttl < 0 || ttl >= CLI_HOLD_MIN_TTL_MS);
        static const api_limits wide = {30000, CLI_MAX_DURATION_MS, CLI_MAX_DURATION_MS, NULL};
        rl_request req;
        bool tb;
        enum api_err e;
        char msg[256] = "";
        memset(&req, 0, sizeof req);
        int prc = api_parse_body(RL_ACQUIRE, out, strlen(out), &wide, &req, &tb, &e, msg, sizeof msg);
        if (sendable) {
            FUZZ_CHECK(prc == 0, "the service accepts the body the client sends");
            FUZZ_CHECK(req.ttl_ms == (ttl < 0 ? wide.default_ttl_ms : ttl) && req.wait_ms == wait &&
                           req.hold == hold && !strcmp(req.owner, own ? own : ""),
                       "the service reads the values the client meant");
        }
    } else {
        /* at most 6 bytes of JSON per owner byte (\u00XX), 100 of the rest */
        FUZZ_CHECK(outlen < 1024 || 6 * (own ? strlen(own) : 0) + 100 > 1024,
                   "a body fails only when it does not fit");
    }
    free(out);
    free(owner);
}

/* ---- numbers ---- */

static void fuzz_numbers(fuzz_in *in)
{
    uint64_t a = 0, b = 0;
    for (int i = 0; i < 8; i++)
        a = a << 8 | fuzz_byte(in);
    for (int i = 0; i < 8; i++)
        b = b << 8 | fuzz_byte(in);
    size_t outlen = 1 + fuzz_byte(in) % 40;
    long long ms = (long long)a;
    /* Mostly realistic durations, now and then any 64-bit value. */
    if (!(b & 1))
        ms = (long long)(a % (CLI_MAX_DURATION_MS + 1));
    char *out = fuzz_msg_new(outlen);
    cli_format_ms(ms, out, outlen);
    FUZZ_CHECK(fuzz_terminated(out, outlen), "cli_format_ms ends within its buffer");
    check_format_ms(ms);
    double u = (double)(b >> 11) / 9007199254740992.0 * (b & 2 ? 1.0 : 2.0) - (b & 4 ? 0.5 : 0.0);
    long long d = cli_retry_delay_ms(ms, u);
    FUZZ_CHECK(d >= 25 && d <= 1500, "a retry delay is 0.5..1.5 times 50 ms..1 s");
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    unsigned mode = (uint8_t)(fuzz_byte(&in) - '0') % 6;
    switch (mode) {
    case 0: {
        char *s = fuzz_cstr(&in);
        fuzz_duration(s);
        free(s);
        break;
    }
    case 1: fuzz_args(&in, size % 3 ? 256 : 24); break;
    case 2: fuzz_answers(&in); break;
    case 3: fuzz_stream(&in); break;
    case 4: fuzz_acquire_body(&in); break;
    default: fuzz_numbers(&in); break;
    }
    return 0;
}
