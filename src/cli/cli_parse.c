/* cli_parse.c - see cli_parse.h: the commands and their options. The
 * durations and request bodies are in cli_values.c, the answers and the
 * held stream's lines in cli_answers.c. */
#include "cli_parse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
     "  --owner ID       who holds it, shown by `redlock status` (1 to 128 bytes of\n"
     "                   UTF-8 text; default HOST:PID of this redlock)\n"
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
     "  --candidate C    who campaigns (1 to 48 bytes of UTF-8 text;\n"
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
    {CLI_RELEASE, "release", "release NAME TOKEN | release --force [--admin-token-file F] NAME",
     "Releases the lock NAME held with TOKEN.\n"
     "With --force, an operator's force release: frees NAME whatever token holds it\n"
     "(the holder's held stream ends lost, reason forced); it needs the admin token\n"
     "of the service's --admin-token-file, from --admin-token-file F or\n"
     "REDLOCK_ADMIN_TOKEN.\n"
     "\n"
     "  --force          release whatever token holds it (no TOKEN)\n"
     "  --admin-token-file F  the admin token's file (default: REDLOCK_ADMIN_TOKEN)\n"
     "\n"
     "Exits 0, 1 when TOKEN did not hold the lock (not_held: it had expired or\n"
     "another owner holds it), 77 when the service refused the token (401, 403),\n"
     "69 when the service cannot be reached or has no quorum."},
    {CLI_STATUS, "status", "status [--json] NAME",
     "Shows whether NAME is held: its validity left, fence and owner.\n"
     "\n"
     "  --json           print the service's whole answer\n"
     "\n"
     "Exits 0 when NAME is held, 1 when it is not, 69 when the service cannot be\n"
     "reached or has no quorum."},
    {CLI_LIST, "list", "list [--prefix P] [--json]",
     "Lists the locks a majority of the service's masters holds: one a line, with\n"
     "its validity left, fence and owner (GET /locks, every page). No token is shown.\n"
     "\n"
     "  --prefix P       only names that start with P\n"
     "  --json           print one JSON object {\"locks\":[...]} of every page's entries\n"
     "\n"
     "Exits 0, 69 when the service cannot be reached or has no quorum."},
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
    "Options of every command (a flag wins over its environment variable):\n"
    "  --url URL               the service: http://HOST:PORT, https://HOST:PORT or\n"
    "                          unix:/PATH/redlockd.sock, a Unix socket (env REDLOCK_URL;\n"
    "                          default " CLI_DEFAULT_URL ")\n"
    "  --auth-token-file FILE  file holding the bearer token the service asks for\n"
    "                          (env REDLOCK_TOKEN holds the token itself; so does\n"
    "                          REDLOCK_AUTH_TOKEN, its older name, which wins when set)\n"
    "  --cacert FILE           https: the CA certificates (PEM) the service's certificate\n"
    "                          must chain to (env REDLOCK_CACERT; default the system's)\n"
    "  --cert FILE             https: a client certificate (PEM), for a service that asks\n"
    "                          for one (env REDLOCK_CERT)\n"
    "  --key FILE              its private key (PEM; env REDLOCK_KEY; default: in --cert)\n"
    "  -h, --help              this help;  --version  the version\n"
    "\n"
    "Durations: 500ms, 30s, 1.5s, 2m, 1h, 1h30m (a unit is required).\n";

static const char exit_help[] =
    "Exit codes: 0 done (run: CMD's own status; 128+N if signal N ended CMD);\n"
    "1 not held (status, extend, release); 3 run: the lock was lost and CMD stopped;\n"
    "64 usage error (a bad URL or TLS file too) or a request the service refused\n"
    "as malformed (400); 69 the service is unreachable (a TLS handshake that\n"
    "fails too), has no quorum or is shutting down (503, 5xx; with --wait, a 503\n"
    "is retried until the wait is spent);\n"
    "75 not acquired within --wait (409 locked, 429); 76 an answer redlock does not\n"
    "understand; 77 unauthorized (401) or forbidden (403).\n";

void cli_usage(FILE *out, enum cli_cmd cmd)
{
    for (size_t i = 0; i < NCMDS; i++) {
        if (cmds[i].cmd != cmd)
            continue;
        fprintf(out, "usage: redlock %s\n\n%s\n\n%s", cmds[i].synopsis, cmds[i].help, common_help);
        return;
    }
    fprintf(out,
            "usage: redlock [--url URL] [--auth-token-file FILE] [--cacert FILE]\n"
            "               [--cert FILE [--key FILE]] COMMAND [options] [args]\n"
            "\n"
            "Takes distributed locks from a redlockd service over HTTP, HTTPS or a Unix socket.\n"
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
       OPT_VALUE = 64, OPT_OBSERVE = 128, OPT_LIMIT = 256, OPT_FORCE = 512, OPT_ADMIN = 1024,
       OPT_PREFIX = 2048 };

static unsigned allowed_opts(enum cli_cmd c)
{
    switch (c) {
    case CLI_RUN: return OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_GRACE | OPT_LIMIT;
    case CLI_ACQUIRE: return OPT_TTL | OPT_WAIT | OPT_OWNER | OPT_JSON;
    case CLI_EXTEND: return OPT_TTL | OPT_JSON;
    case CLI_STATUS: return OPT_JSON;
    case CLI_READY: return OPT_JSON;
    case CLI_LIST: return OPT_JSON | OPT_PREFIX;
    case CLI_ELECT: return OPT_TTL | OPT_GRACE | OPT_CANDIDATE | OPT_VALUE | OPT_OBSERVE;
    case CLI_RELEASE: return OPT_FORCE | OPT_ADMIN;
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
    {"url", 0, true}, {"auth-token-file", 0, true}, {"cacert", 0, true}, {"cert", 0, true},
    {"key", 0, true}, {"ttl", OPT_TTL, true},
    {"wait", OPT_WAIT, true}, {"owner", OPT_OWNER, true}, {"grace", OPT_GRACE, true},
    {"json", OPT_JSON, false}, {"candidate", OPT_CANDIDATE, true}, {"value", OPT_VALUE, true},
    {"observe", OPT_OBSERVE, false}, {"limit", OPT_LIMIT, true}, {"force", OPT_FORCE, false},
    {"admin-token-file", OPT_ADMIN, true}, {"prefix", OPT_PREFIX, true},
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
        case 0:   /* every command's: checked once the environment is read (cli_service_resolve) */
            *(!strcmp(known[k].name, "url")      ? &a->url
              : !strcmp(known[k].name, "cacert") ? &a->cacert
              : !strcmp(known[k].name, "cert")   ? &a->cert
              : !strcmp(known[k].name, "key")    ? &a->key
                                                 : &a->auth_token_file) = v;
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
                snprintf(err, errlen, "%s--owner: 1 to %d bytes of UTF-8 without control characters", where,
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
                snprintf(err, errlen, "%s--candidate: 1 to %d bytes of UTF-8 without control characters", where,
                         CLI_CANDIDATE_MAX);
                return -1;
            }
            a->candidate = v;
            break;
        case OPT_VALUE: {
            if (*v && !rules_text_valid(v, strlen(v), CLI_VALUE_MAX)) {
                snprintf(err, errlen, "%s--value: 0 to %d bytes of UTF-8 without control characters", where,
                         CLI_VALUE_MAX);
                return -1;
            }
            a->value = v;
            break;
        }
        case OPT_OBSERVE:
            a->observe = true;
            break;
        case OPT_FORCE:
            a->force = true;
            break;
        case OPT_ADMIN:
            a->admin_token_file = v;
            break;
        case OPT_PREFIX:
            if (*v && !rules_name_valid(v, strlen(v))) {
                snprintf(err, errlen, "%s--prefix: up to %d bytes of UTF-8 without control characters", where,
                         RULES_NAME_MAX);
                return -1;
            }
            a->prefix = v;
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
        snprintf(err, errlen, "a command is needed (run, elect, acquire, extend, release, status, list, ready)");
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
        snprintf(err, errlen, "unknown command %s (run, elect, acquire, extend, release, status, list, ready)",
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
    int want = a->cmd == CLI_READY || a->cmd == CLI_LIST                 ? 0
               : a->cmd == CLI_EXTEND || (a->cmd == CLI_RELEASE && !a->force) ? 2
                                                                              : 1;
    if (npos != want) {
        static const char *const needs[] = {"no arguments", "NAME", "NAME and TOKEN"};
        snprintf(err, errlen, "%s: %s %s", where,
                 npos < want ? "needs" : "takes", needs[want]);
        return -1;
    }
    if (want >= 1) {
        a->name = pos[0];
        if (!rules_name_valid(a->name, strlen(a->name))) {
            snprintf(err, errlen, "%s: bad lock name: 1 to %d bytes of UTF-8 without control characters",
                     where, RULES_NAME_MAX);
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
