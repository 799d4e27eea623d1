/* cli_parse.c - see cli_parse.h. */
#include "cli_parse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- durations ---- */

int cli_parse_duration(const char *s, long long *ms, const char **why)
{
    static const struct { const char *unit; long long ms; } units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},   /* "ms" before "m" */
    };
    const char *p = s;
    long long total = 0;
    if (!s || !*s) {
        *why = "empty duration";
        return -1;
    }
    while (*p) {
        long long ip = 0, frac = 0, scale = 1;
        int digits = 0;
        while (*p >= '0' && *p <= '9') {
            if (ip > CLI_MAX_DURATION_MS) {
                *why = "too long (at most 596h)";
                return -1;
            }
            ip = ip * 10 + (*p++ - '0');
            digits++;
        }
        if (*p == '.') {
            p++;
            while (*p >= '0' && *p <= '9') {
                if (scale >= 1000000000LL) {
                    *why = "finer than a millisecond";
                    return -1;
                }
                frac = frac * 10 + (*p++ - '0');
                scale *= 10;
                digits++;
            }
        }
        if (digits == 0) {
            *why = "not a duration (examples: 500ms, 30s, 2m, 1h)";
            return -1;
        }
        long long unit = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t ul = strlen(units[i].unit);
            if (!strncmp(p, units[i].unit, ul)) {
                unit = units[i].ms;
                p += ul;
                break;
            }
        }
        if (!unit) {
            *why = *p ? "unknown unit (use ms, s, m or h)"
                      : "a unit is needed (500ms, 30s, 2m, 1h): a bare number could mean seconds or milliseconds";
            return -1;
        }
        if (ip > CLI_MAX_DURATION_MS / unit) {
            *why = "too long (at most 596h)";
            return -1;
        }
        if ((frac * unit) % scale != 0) {
            *why = "finer than a millisecond";
            return -1;
        }
        total += ip * unit + frac * unit / scale;
        if (total > CLI_MAX_DURATION_MS) {
            *why = "too long (at most 596h)";
            return -1;
        }
    }
    *ms = total;
    return 0;
}

int cli_parse_wait(const char *s, long long *ms, const char **why)
{
    if (s && !strcmp(s, "forever")) {
        *ms = CLI_WAIT_FOREVER;
        return 0;
    }
    return cli_parse_duration(s, ms, why);
}

void cli_format_ms(long long ms, char *out, size_t outlen)
{
    if (ms < 0)
        ms = 0;
    if (ms < 1000)
        snprintf(out, outlen, "%lldms", ms);
    else if (ms < 60000 && ms % 1000 == 0)
        snprintf(out, outlen, "%llds", ms / 1000);
    else if (ms < 59950)
        snprintf(out, outlen, "%.1fs", (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, outlen, "%lldm%02llds", ms / 60000, (ms % 60000) / 1000);
    else
        snprintf(out, outlen, "%lldh%02lldm", ms / 3600000, (ms % 3600000) / 60000);
}

/* ---- the command line ---- */

static const struct {
    enum cli_cmd cmd;
    const char *name;
    const char *synopsis;
    const char *help;
} cmds[] = {
    {CLI_RUN, "run", "run [--ttl D] [--wait D|forever] [--owner ID] [--grace D] [--limit L] NAME [--] CMD [ARG...]",
     "Holds the lock NAME through a held stream while CMD runs, and releases it as\n"
     "soon as CMD exits. CMD runs in its own process group, with REDLOCK_NAME,\n"
     "REDLOCK_TOKEN and REDLOCK_FENCE in its environment; SIGINT, SIGTERM and\n"
     "SIGHUP sent to redlock are passed on to it. The service renews the lock on its\n"
     "own while the stream is open. When the lock is lost (the service says so, the\n"
     "stream breaks, or no renewal comes before the validity last announced runs\n"
     "out), CMD's process group gets SIGTERM, then SIGKILL after --grace, and redlock\n"
     "exits 3.\n"
     "\n"
     "  --ttl D          the lock's time to live, renewed every third of it\n"
     "                   (at least 1s; default: the service's, 30s unless configured)\n"
     "  --wait D|forever how long to wait for a held lock (default 0: try once);\n"
     "                   forever keeps asking\n"
     "  --owner ID       who holds it, shown by `redlock status` (1 to 128 printable\n"
     "                   ASCII bytes; default HOST:PID of this redlock)\n"
     "  --grace D        time between SIGTERM and SIGKILL after a loss (default 10s)\n"
     "  --limit L        NAME is a counting semaphore of L permits: run CMD with one\n"
     "                   of them (at most L such commands run at once; redlock renews\n"
     "                   the permit every third of the ttl)\n"
     "\n"
     "Exits with CMD's status (128+N when a signal N ended it), or 3 when the lock was\n"
     "lost, 75 when it was not acquired within --wait, 69 when the service cannot\n"
     "be reached or has no quorum."},
    {CLI_ELECT, "elect",
     "elect [--ttl D] [--candidate C] [--value V] [--grace D] NAME [--] CMD [ARG...] | elect --observe NAME",
     "Campaigns in the election NAME and, once elected leader, runs CMD as `run`\n"
     "does, with REDLOCK_TERM (the term: it strictly increases from leader to\n"
     "leader; send it with every write the leader makes) added to its environment.\n"
     "The campaign waits as long as it takes. When leadership is lost, CMD's\n"
     "process group gets SIGTERM, then SIGKILL after --grace, and redlock exits 3;\n"
     "when CMD exits, redlock resigns.\n"
     "With --observe, prints one line per change of the leader, and runs nothing.\n"
     "\n"
     "  --ttl D          the leader's lock's time to live, renewed every third of it\n"
     "  --candidate C    who campaigns (1 to 48 bytes of A-Z a-z 0-9 . _ : -;\n"
     "                   default HOST-PID of this redlock)\n"
     "  --value V        what the leader proclaims, e.g. its address (0 to 64 bytes)\n"
     "  --grace D        time between SIGTERM and SIGKILL after a loss (default 10s)\n"
     "  --observe        print the leader's changes instead of campaigning\n"
     "\n"
     "Exits with CMD's status, 3 when leadership was lost, 69 when the service\n"
     "cannot be reached."},
    {CLI_ACQUIRE, "acquire", "acquire [--ttl D] [--wait D|forever] [--owner ID] [--json] NAME",
     "Takes the lock NAME and prints its token (with --json the whole answer:\n"
     "name, token, validity_ms, ttl_ms, fence). The lock lasts --ttl unless it is\n"
     "extended; release it with `redlock release NAME TOKEN`.\n"
     "\n"
     "  --ttl D          time to live (default: the service's, 30s unless configured)\n"
     "  --wait D|forever how long to wait for a held lock (default 0: try once)\n"
     "  --owner ID       who holds it, shown by `redlock status`\n"
     "  --json           print the service's whole answer\n"
     "\n"
     "Exits 0, 75 when the lock was not acquired within --wait, 69 when the service\n"
     "cannot be reached or has no quorum."},
    {CLI_EXTEND, "extend", "extend [--ttl D] [--json] NAME TOKEN",
     "Extends the lock NAME held with TOKEN to a new time to live, counted from now.\n"
     "Prints nothing (with --json the whole answer).\n"
     "\n"
     "  --ttl D          the new time to live (default: the service's default ttl)\n"
     "  --json           print the service's whole answer\n"
     "\n"
     "Exits 0, 1 when TOKEN does not hold the lock any more (not_held: it expired or\n"
     "another owner holds it), 69 when the service cannot be reached or has no quorum."},
    {CLI_RELEASE, "release", "release NAME TOKEN",
     "Releases the lock NAME held with TOKEN.\n"
     "\n"
     "Exits 0, 1 when TOKEN did not hold the lock (not_held: it had expired or\n"
     "another owner holds it), 69 when the service cannot be reached or has no quorum."},
    {CLI_STATUS, "status", "status [--json] NAME",
     "Shows whether NAME is held: its validity left, fence and owner.\n"
     "\n"
     "  --json           print the service's whole answer\n"
     "\n"
     "Exits 0 when NAME is held, 1 when it is not, 69 when the service cannot be\n"
     "reached or has no quorum."},
    {CLI_READY, "ready", "ready [--json]",
     "Asks whether the service can grant locks (GET /readyz: a majority of its\n"
     "masters can vote).\n"
     "\n"
     "  --json           print the service's whole answer\n"
     "\n"
     "Exits 0 when it can, 69 when it cannot or cannot be reached."},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

const char *cli_cmd_name(enum cli_cmd cmd)
{
    for (size_t i = 0; i < NCMDS; i++)
        if (cmds[i].cmd == cmd)
            return cmds[i].name;
    return "";
}

static const char common_help[] =
    "Options of every command:\n"
    "  --url URL               the service (env REDLOCK_URL; default " CLI_DEFAULT_URL ")\n"
    "  --auth-token-file FILE  file holding the bearer token the service asks for\n"
    "                          (env REDLOCK_AUTH_TOKEN holds the token itself)\n"
    "  -h, --help              this help;  --version  the version\n"
    "\n"
    "Durations: 500ms, 30s, 1.5s, 2m, 1h, 1h30m (a unit is required).\n";

static const char exit_help[] =
    "Exit codes: 0 done (run: CMD's own status; 128+N if signal N ended CMD);\n"
    "1 not held (status, extend, release); 3 run: the lock was lost and CMD stopped;\n"
    "64 usage error or a request the service refused as malformed (400);\n"
    "69 the service is unreachable, has no quorum or is shutting down (503, 5xx);\n"
    "75 not acquired within --wait (409 locked, 429); 76 an answer redlock does not\n"
    "understand; 77 unauthorized (401).\n";

void cli_usage(FILE *out, enum cli_cmd cmd)
{
    for (size_t i = 0; i < NCMDS; i++) {
        if (cmds[i].cmd != cmd)
            continue;
        fprintf(out, "usage: redlock %s\n\n%s\n\n%s", cmds[i].synopsis, cmds[i].help, common_help);
        return;
    }
    fprintf(out,
            "usage: redlock [--url URL] [--auth-token-file FILE] COMMAND [options] [args]\n"
            "\n"
            "Takes distributed locks from a redlockd service over HTTP.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < NCMDS; i++)
        fprintf(out, "  %s\n", cmds[i].synopsis);
    fprintf(out,
            "  help [COMMAND]\n"
            "\n"
            "`redlock COMMAND --help` tells more about each.\n"
            "\n"
            "Examples:\n"
            "  redlock run --wait 1m nightly-report -- ./make-report.sh\n"
            "  TOKEN=$(redlock acquire --ttl 10s orders) && redlock release orders \"$TOKEN\"\n"
            "\n"
            "%s\n%s", common_help, exit_help);
}

enum { OPT_TTL = 1, OPT_WAIT = 2, OPT_OWNER = 4, OPT_GRACE = 8, OPT_JSON = 16, OPT_CANDIDATE = 32,
       OPT_VALUE = 64, OPT_OBSERVE = 128, OPT_LIMIT = 256 };

static unsigned allowed_opts(enum cli_cmd c)
{
    switch (c) {
    case CLI_RUN: return OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_GRACE | OPT_LIMIT;
    case CLI_ACQUIRE: return OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_JSON;
    case CLI_EXTEND: return OPT_TTL | OPT_JSON;
    case CLI_STATUS: return OPT_JSON;
    case CLI_READY: return OPT_JSON;
    case CLI_ELECT: return OPT_TTL | OPT_GRACE | OPT_CANDIDATE | OPT_VALUE | OPT_OBSERVE;
    default: return 0;
    }
}

static enum cli_cmd cmd_of(const char *s)
{
    for (size_t i = 0; i < NCMDS; i++)
        if (!strcmp(cmds[i].name, s))
            return cmds[i].cmd;
    return CLI_NONE;
}

static const struct { const char *name; unsigned bit; bool value; } known[] = {
    {"url", 0, true}, {"auth-token-file", 0, true}, {"ttl", OPT_TTL, true},
    {"wait", OPT_WAIT, true}, {"owner", OPT_OWNER, true}, {"grace", OPT_GRACE, true},
    {"json", OPT_JSON, false}, {"candidate", OPT_CANDIDATE, true}, {"value", OPT_VALUE, true},
    {"observe", OPT_OBSERVE, false}, {"limit", OPT_LIMIT, true},
};

/* Is arg one of redlock's options ("-h", "--help", "--version", "--NAME" or
 * "--NAME=VALUE" of a known NAME)? */
static bool is_option(const char *arg)
{
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help") || !strcmp(arg, "--version"))
        return true;
    if (strncmp(arg, "--", 2) != 0)
        return false;
    const char *name = arg + 2;
    size_t nl = strcspn(name, "=");
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strlen(known[k].name) == nl && !strncmp(known[k].name, name, nl))
            return true;
    return false;
}

/* Reads one option at argv[*i] ("--name VALUE" or "--name=VALUE"). Returns
 * 0, or -1 with err. */
static int parse_option(int argc, char **argv, int *i, cli_args *a, char *err, size_t errlen)
{
    const char *arg = argv[*i];
    char where[16];   /* "run: " or "" before a message */
    snprintf(where, sizeof where, "%s%s", cli_cmd_name(a->cmd), a->cmd == CLI_NONE ? "" : ": ");
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
        a->help = true;
        return 0;
    }
    if (!strcmp(arg, "--version")) {
        a->version = true;
        return 0;
    }
    if (strncmp(arg, "--", 2) != 0) {
        snprintf(err, errlen, "%sunknown option %s", where, arg);
        return -1;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t nl = eq ? (size_t)(eq - name) : strlen(name);
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        if (strlen(known[k].name) != nl || strncmp(known[k].name, name, nl) != 0)
            continue;
        if (known[k].bit && !(allowed_opts(a->cmd) & known[k].bit)) {
            if (a->cmd == CLI_NONE)
                snprintf(err, errlen, "--%s goes after the command", known[k].name);
            else
                snprintf(err, errlen, "%sunknown option --%s", where, known[k].name);
            return -1;
        }
        const char *v = NULL;
        if (known[k].value) {
            if (eq)
                v = eq + 1;
            else if (*i + 1 < argc)
                v = argv[++*i];
            else {
                snprintf(err, errlen, "%s--%s needs a value", where, known[k].name);
                return -1;
            }
        } else if (eq) {
            snprintf(err, errlen, "%s--%s takes no value", where, known[k].name);
            return -1;
        }
        const char *why = NULL;
        switch (known[k].bit) {
        case 0:
            if (known[k].name[0] == 'u')
                a->url = v;
            else
                a->auth_token_file = v;
            break;
        case OPT_TTL:
            if (cli_parse_duration(v, &a->ttl_ms, &why) < 0 || a->ttl_ms == 0) {
                snprintf(err, errlen, "%s--ttl %s: %s", where, v, why ? why : "must be more than 0");
                return -1;
            }
            break;
        case OPT_WAIT:
            if (cli_parse_wait(v, &a->wait_ms, &why) < 0) {
                snprintf(err, errlen, "%s--wait %s: %s", where, v, why);
                return -1;
            }
            break;
        case OPT_GRACE:
            if (cli_parse_duration(v, &a->grace_ms, &why) < 0) {
                snprintf(err, errlen, "%s--grace %s: %s", where, v, why);
                return -1;
            }
            break;
        case OPT_OWNER:
            if (!rules_owner_valid(v, strlen(v))) {
                snprintf(err, errlen, "%s--owner: 1 to %d bytes of printable ASCII", where,
                         RULES_OWNER_MAX);
                return -1;
            }
            a->owner = v;
            break;
        case OPT_JSON:
            a->json = true;
            break;
        case OPT_CANDIDATE:
            if (strlen(v) > CLI_CANDIDATE_MAX || !rules_name_valid(v, strlen(v))) {
                snprintf(err, errlen, "%s--candidate: 1 to %d bytes of A-Z a-z 0-9 . _ : -", where,
                         CLI_CANDIDATE_MAX);
                return -1;
            }
            a->candidate = v;
            break;
        case OPT_VALUE: {
            bool ok = strlen(v) <= CLI_VALUE_MAX;
            for (const char *c = v; ok && *c; c++)
                ok = *c >= 0x20 && *c <= 0x7e;
            if (!ok) {
                snprintf(err, errlen, "%s--value: 0 to %d bytes of printable ASCII", where, CLI_VALUE_MAX);
                return -1;
            }
            a->value = v;
            break;
        }
        case OPT_OBSERVE:
            a->observe = true;
            break;
        case OPT_LIMIT: {
            char *end = NULL;
            long l = strtol(v, &end, 10);
            if (!*v || *end || l < 1 || l > CLI_LIMIT_MAX) {
                snprintf(err, errlen, "%s--limit: a whole number of permits from 1 to %d", where, CLI_LIMIT_MAX);
                return -1;
            }
            a->limit = (int)l;
            break;
        }
        }
        return 0;
    }
    snprintf(err, errlen, "%sunknown option %.*s", where, (int)(nl + 2), arg);
    return -1;
}

int cli_parse_args(int argc, char **argv, cli_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->ttl_ms = -1;
    a->grace_ms = CLI_DEFAULT_GRACE_MS;
    err[0] = '\0';
    int i = 1;
    /* Options before the command: only those of every command. */
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++)
        if (parse_option(argc, argv, &i, a, err, errlen) < 0)
            return -1;
    if (i >= argc) {
        if (a->help || a->version)
            return 0;
        snprintf(err, errlen, "a command is needed (run, elect, acquire, extend, release, status, ready)");
        return -1;
    }
    if (!strcmp(argv[i], "help")) {
        a->help = true;
        if (i + 1 < argc)
            a->cmd = cmd_of(argv[i + 1]);
        return 0;
    }
    a->cmd = cmd_of(argv[i]);
    if (a->cmd == CLI_NONE) {
        if (a->help || a->version)
            return 0;
        snprintf(err, errlen, "unknown command %s (run, elect, acquire, extend, release, status, ready)",
                 argv[i]);
        return -1;
    }
    const char *where = argv[i];
    i++;
    /* The command's options and arguments. run stops at NAME: what follows
     * it belongs to CMD. Elsewhere options may come after the arguments. */
    const char *pos[3];
    int npos = 0;
    bool opts_done = false;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (!opts_done && !strcmp(arg, "--")) {
            opts_done = true;
            continue;
        }
        /* TOKEN is taken as it stands: a token may begin with '-' (redlockd's
         * never do, but a Dapr lockOwner or an older service's may). */
        bool token_slot = (a->cmd == CLI_EXTEND || a->cmd == CLI_RELEASE) && npos == 1 &&
                          !is_option(arg);
        if (!opts_done && !token_slot && arg[0] == '-' && arg[1]) {
            if (parse_option(argc, argv, &i, a, err, errlen) < 0)
                return -1;
            continue;
        }
        if (npos == 3) {
            snprintf(err, errlen, "%s: too many arguments (at %s)", where, arg);
            return -1;
        }
        pos[npos++] = arg;
        if (a->cmd == CLI_RUN || (a->cmd == CLI_ELECT && !a->observe)) {
            i++;
            if (i < argc && !strcmp(argv[i], "--")) {
                i++;
            } else if (i < argc && !strncmp(argv[i], "--", 2) && !a->help) {
                /* Surely an option meant for redlock, not a command. */
                snprintf(err, errlen, "%s: %s: options go before NAME (a CMD that starts with "
                         "-- follows a -- of its own)", where, argv[i]);
                return -1;
            }
            break;
        }
    }
    if (a->help || a->version)
        return 0;
    int want = a->cmd == CLI_READY ? 0 : (a->cmd == CLI_EXTEND || a->cmd == CLI_RELEASE) ? 2 : 1;
    if (npos != want) {
        static const char *const needs[] = {"no arguments", "NAME", "NAME and TOKEN"};
        snprintf(err, errlen, "%s: %s %s", where,
                 npos < want ? "needs" : "takes", needs[want]);
        return -1;
    }
    if (want >= 1) {
        a->name = pos[0];
        if (!rules_name_valid(a->name, strlen(a->name))) {
            snprintf(err, errlen, "%s: bad lock name '%.64s': 1 to %d bytes of A-Z a-z 0-9 . _ : -",
                     where, a->name, RULES_NAME_MAX);
            return -1;
        }
    }
    if (want == 2) {
        a->token = pos[1];
        if (!rules_token_valid(a->token, strlen(a->token))) {
            snprintf(err, errlen, "%s: bad token: one word of printable ASCII, up to 256 bytes", where);
            return -1;
        }
    }
    if (a->cmd == CLI_RUN || (a->cmd == CLI_ELECT && !a->observe)) {
        if (i >= argc) {
            snprintf(err, errlen, "%s: needs a command to run after NAME (redlock %s NAME -- CMD [ARG...])",
                     where, where);
            return -1;
        }
        a->cmd_argv = argv + i;
        if (a->ttl_ms >= 0 && a->ttl_ms < CLI_HOLD_MIN_TTL_MS) {
            snprintf(err, errlen, "%s: --ttl must be at least 1s (the service renews it every third)", where);
            return -1;
        }
    }
    return 0;
}

/* ---- answers ---- */

int cli_exit_for(long status, const char *error)
{
    if (status <= 0)
        return CLI_EXIT_UNAVAILABLE;
    if (status == 400 || status == 413)
        return CLI_EXIT_USAGE;
    if (status == 401)
        return CLI_EXIT_NOPERM;
    if (status == 409 && error && !strcmp(error, "not_held"))
        return CLI_EXIT_NOT_HELD;
    if (status == 409 && error && !strcmp(error, "locked"))
        return CLI_EXIT_NOT_ACQUIRED;
    if (status == 429)
        return CLI_EXIT_NOT_ACQUIRED;
    if (status >= 500)
        return CLI_EXIT_UNAVAILABLE;
    return CLI_EXIT_PROTOCOL;
}

static long long int_item(const cJSON *o, const char *field, long long dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : dflt;
}

static const char *str_item(const cJSON *o, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

void cli_format_error(long status, const char *body, char *out, size_t outlen)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const char *code = o ? str_item(o, "error") : NULL;
    if (!code) {
        /* Not one of the service's answers: say what came, on one line. */
        char snippet[81] = "";
        size_t n = 0;
        for (const char *p = body ? body : ""; *p && n + 1 < sizeof snippet; p++)
            snippet[n++] = (*p >= 0x20 && *p <= 0x7e) ? *p : ' ';
        snippet[n] = '\0';
        snprintf(out, outlen, "HTTP %ld%s%s", status, n ? ": " : "", snippet);
        cJSON_Delete(o);
        return;
    }
    const char *msg = str_item(o, "message");
    size_t used = (size_t)snprintf(out, outlen, "%s%s%s", code, msg ? ": " : "", msg ? msg : "");
    char extra[96] = "";
    long long retry = int_item(o, "retry_after_ms", -1);
    const char *reason = str_item(o, "reason");
    long long ok = int_item(o, "masters_ok", -1), total = int_item(o, "masters_total", -1);
    if (retry >= 0) {
        char d[32];
        cli_format_ms(retry, d, sizeof d);
        snprintf(extra, sizeof extra, " (retry after %s)", d);
    } else if (reason) {
        snprintf(extra, sizeof extra, " (reason: %.40s)", reason);
    } else if (ok >= 0 && total > 0) {
        snprintf(extra, sizeof extra, " (%lld of %lld masters answered)", ok, total);
    }
    if (used < outlen)
        snprintf(out + used, outlen - used, "%s", extra);
    cJSON_Delete(o);
}

int cli_answer_exit(long status, const char *body)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    int code = cli_exit_for(status, o ? str_item(o, "error") : NULL);
    cJSON_Delete(o);
    return code;
}

int cli_acquire_body(long long ttl_ms, long long wait_ms, bool hold, const char *owner,
                     char *out, size_t outlen)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    if (ok && ttl_ms >= 0)
        ok = cJSON_AddNumberToObject(o, "ttl_ms", (double)ttl_ms) != NULL;
    if (ok)
        ok = cJSON_AddNumberToObject(o, "wait_ms", (double)wait_ms) != NULL;
    if (ok && hold)
        ok = cJSON_AddTrueToObject(o, "hold") != NULL;
    if (ok && owner)
        ok = cJSON_AddStringToObject(o, "owner", owner) != NULL;
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    int rc = s && strlen(s) < outlen ? 0 : -1;
    if (rc == 0)
        memcpy(out, s, strlen(s) + 1);
    free(s);
    return rc;
}

bool cli_wait_cap(const char *body, long long *cap)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const char *msg = o ? str_item(o, "message") : NULL;
    long long lo, hi;
    bool ok = msg && sscanf(msg, "wait_ms must be from %lld to %lld", &lo, &hi) == 2 && hi >= 0;
    if (ok)
        *cap = hi;
    cJSON_Delete(o);
    return ok;
}

long long cli_retry_delay_ms(long long retry_after_ms, double u)
{
    long long base = retry_after_ms < 50 ? 50 : retry_after_ms > 1000 ? 1000 : retry_after_ms;
    if (u < 0 || u >= 1)
        u = 0.5;
    return (long long)((double)base * (0.5 + u));
}

int cli_format_status(const char *body, char *out, size_t outlen)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const cJSON *held = o ? cJSON_GetObjectItemCaseSensitive(o, "held") : NULL;
    if (!cJSON_IsBool(held)) {
        cJSON_Delete(o);
        return -1;
    }
    if (!cJSON_IsTrue(held)) {
        snprintf(out, outlen, "not held");
        cJSON_Delete(o);
        return 0;
    }
    char d[32];
    cli_format_ms(int_item(o, "validity_ms", 0), d, sizeof d);
    size_t used = (size_t)snprintf(out, outlen, "held: validity %s", d);
    long long fence = int_item(o, "fence", -1);
    if (fence >= 0 && used < outlen)
        used += (size_t)snprintf(out + used, outlen - used, ", fence %lld", fence);
    const char *owner = str_item(o, "owner");
    if (owner && used < outlen)
        snprintf(out + used, outlen - used, ", owner %s", owner);
    cJSON_Delete(o);
    return 1;
}

int cli_format_ready(const char *body, char *out, size_t outlen)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const char *status = o ? str_item(o, "status") : NULL;
    long long voting = o ? int_item(o, "masters_voting", -1) : -1;
    long long total = o ? int_item(o, "masters_total", -1) : -1;
    long long quorum = o ? int_item(o, "quorum", -1) : -1;
    int rc = -1;
    if (status && voting >= 0 && total >= 0) {
        snprintf(out, outlen, "%s: %lld of %lld masters can vote (quorum %lld)",
                 !strcmp(status, "ready") ? "ready" : "not ready", voting, total, quorum);
        rc = 0;
    }
    cJSON_Delete(o);
    return rc;
}

/* ---- held streams ---- */

int cli_parse_event(const char *line, cli_event *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->fence = ev->validity_ms = ev->ttl_ms = -1;
    cJSON *o = cJSON_Parse(line);
    const char *kind = o && cJSON_IsObject(o) ? str_item(o, "event") : NULL;
    if (!kind) {
        cJSON_Delete(o);
        return -1;
    }
    /* An election's campaign says "elected" (with its term, the fence) and
     * "resigned" where a held stream says "acquired" and "released". */
    ev->kind = !strcmp(kind, "acquired") || !strcmp(kind, "elected") ? CLI_EV_ACQUIRED
             : !strcmp(kind, "renewed")  ? CLI_EV_RENEWED
             : !strcmp(kind, "lost")     ? CLI_EV_LOST
             : !strcmp(kind, "released") || !strcmp(kind, "resigned") ? CLI_EV_RELEASED
                                         : CLI_EV_OTHER;
    const char *token = str_item(o, "token");
    if (token)
        snprintf(ev->token, sizeof ev->token, "%s", token);
    const char *reason = str_item(o, "reason");
    if (reason)
        snprintf(ev->reason, sizeof ev->reason, "%s", reason);
    ev->fence = int_item(o, "fence", int_item(o, "term", -1));
    ev->validity_ms = int_item(o, "validity_ms", -1);
    ev->ttl_ms = int_item(o, "ttl_ms", -1);
    cJSON_Delete(o);
    if (ev->kind == CLI_EV_ACQUIRED && (!token || !rules_token_valid(ev->token, strlen(ev->token)) || ev->validity_ms < 0))
        return -1;
    if (ev->kind == CLI_EV_RENEWED && ev->validity_ms < 0)
        return -1;
    return 0;
}

int cli_format_election_event(const char *line, char *out, size_t outlen)
{
    cJSON *o = cJSON_Parse(line);
    const char *kind = o && cJSON_IsObject(o) ? str_item(o, "event") : NULL;
    if (!kind) {
        cJSON_Delete(o);
        return -1;
    }
    const char *leader = str_item(o, "leader"), *value = str_item(o, "value");
    long long term = int_item(o, "term", -1);
    if (leader)
        snprintf(out, outlen, "%s: %s, term %lld%s%s", kind, leader, term, value && value[0] ? ", value " : "",
                 value && value[0] ? value : "");
    else
        snprintf(out, outlen, "%s: no leader", kind);
    cJSON_Delete(o);
    return 0;
}

int cli_lines_feed(cli_lines *l, const char *data, size_t n,
                   int (*fn)(const char *line, void *arg), void *arg)
{
    if (l->len + n + 1 > l->cap) {
        size_t cap = l->cap ? l->cap : 1024;
        while (cap < l->len + n + 1)
            cap *= 2;
        char *b = realloc(l->buf, cap);
        if (!b)
            return -1;
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, data, n);
    l->len += n;
    l->buf[l->len] = '\0';
    size_t start = 0;
    int rc = 0;
    for (;;) {
        char *nl = memchr(l->buf + start, '\n', l->len - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - l->buf);
        size_t next = end + 1;
        if (end > start && l->buf[end - 1] == '\r')
            end--;
        l->buf[end] = '\0';
        if (end > start)
            rc = fn(l->buf + start, arg);
        start = next;
        if (rc)
            break;
    }
    memmove(l->buf, l->buf + start, l->len - start);
    l->len -= start;
    l->buf[l->len] = '\0';
    if (!rc && l->len > CLI_LINE_MAX)
        return -1;
    return rc;
}

void cli_lines_free(cli_lines *l)
{
    free(l->buf);
    l->buf = NULL;
    l->len = l->cap = 0;
}
