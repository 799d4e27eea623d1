/* Unit tests of the redlock client's pure part (src/cli/cli_parse.c): the
 * command line, durations, the service's answers and exit codes, and the
 * lines of a held stream. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli_parse.h"

/* ---- durations ---- */

static long long dur(const char *s)
{
    long long ms = -2;
    const char *why = NULL;
    cr_assert_eq(cli_parse_duration(s, &ms, &why), 0, "%s refused: %s", s, why);
    return ms;
}

static const char *dur_err(const char *s)
{
    long long ms = -2;
    const char *why = NULL;
    cr_assert_eq(cli_parse_duration(s, &ms, &why), -1, "%s accepted as %lld", s, ms);
    cr_assert_eq(ms, -2, "a refused duration changed the result");
    cr_assert_not_null(why);
    return why;
}

Test(cli_duration, units)
{
    cr_assert_eq(dur("500ms"), 500);
    cr_assert_eq(dur("30s"), 30000);
    cr_assert_eq(dur("2m"), 120000);
    cr_assert_eq(dur("1h"), 3600000);
    cr_assert_eq(dur("0s"), 0);
    cr_assert_eq(dur("0ms"), 0);
}

Test(cli_duration, fractions_and_sequences)
{
    cr_assert_eq(dur("1.5s"), 1500);
    cr_assert_eq(dur("0.25m"), 15000);
    cr_assert_eq(dur(".5s"), 500);
    cr_assert_eq(dur("1h30m"), 5400000);
    cr_assert_eq(dur("1m30s250ms"), 90250);
    cr_assert_eq(dur("2147483647ms"), 2147483647LL);
}

Test(cli_duration, refused)
{
    cr_assert(strstr(dur_err("5"), "bare number"), "a bare number must say why");
    cr_assert(strstr(dur_err("30"), "unit"));
    dur_err("");
    dur_err("s");
    dur_err("ms");
    dur_err("5x");
    dur_err("5sec");
    dur_err("-1s");
    dur_err("1 s");
    dur_err("1.s5");
    cr_assert(strstr(dur_err("1.0005s"), "millisecond"));
    cr_assert(strstr(dur_err("0.5ms"), "millisecond"));
    cr_assert(strstr(dur_err("597h"), "too long"));
    cr_assert(strstr(dur_err("2147483648ms"), "too long"));
    cr_assert(strstr(dur_err("99999999999999999999h"), "too long"));
}

Test(cli_duration, wait_forever)
{
    long long ms = 0;
    const char *why;
    cr_assert_eq(cli_parse_wait("forever", &ms, &why), 0);
    cr_assert_eq(ms, CLI_WAIT_FOREVER);
    cr_assert_eq(cli_parse_wait("10s", &ms, &why), 0);
    cr_assert_eq(ms, 10000);
    cr_assert_eq(cli_parse_wait("Forever", &ms, &why), -1);
}

Test(cli_duration, formatted_for_people)
{
    char b[32];
    cli_format_ms(450, b, sizeof b);
    cr_assert_str_eq(b, "450ms");
    cli_format_ms(2300, b, sizeof b);
    cr_assert_str_eq(b, "2.3s");
    cli_format_ms(30000, b, sizeof b);
    cr_assert_str_eq(b, "30s");
    cli_format_ms(245000, b, sizeof b);
    cr_assert_str_eq(b, "4m05s");
    cli_format_ms(7800000, b, sizeof b);
    cr_assert_str_eq(b, "2h10m");
    cli_format_ms(-5, b, sizeof b);
    cr_assert_str_eq(b, "0ms");
}

/* ---- the command line ---- */

/* Parses a space-separated command line (no quoting needed here). */
static int parse(const char *line, cli_args *a, char *err, size_t errlen)
{
    static char buf[1024];
    static char *argv[64];
    snprintf(buf, sizeof buf, "redlock %s", line);
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 63;
         t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    return cli_parse_args(argc, argv, a, err, errlen);
}

static cli_args ok(const char *line)
{
    cli_args a;
    char err[512];
    cr_assert_eq(parse(line, &a, err, sizeof err), 0, "'%s' refused: %s", line, err);
    return a;
}

static void usage_error(const char *line, const char *says)
{
    cli_args a;
    char err[512];
    cr_assert_eq(parse(line, &a, err, sizeof err), -1, "'%s' accepted", line);
    cr_assert(strstr(err, says), "'%s': '%s' does not say '%s'", line, err, says);
}

Test(cli_args, run)
{
    cli_args a = ok("run --ttl 30s --wait forever --owner w7 --grace 2s nightly -- sh -c true");
    cr_assert_eq(a.cmd, CLI_RUN);
    cr_assert_eq(a.ttl_ms, 30000);
    cr_assert_eq(a.wait_ms, CLI_WAIT_FOREVER);
    cr_assert_str_eq(a.owner, "w7");
    cr_assert_eq(a.grace_ms, 2000);
    cr_assert_str_eq(a.name, "nightly");
    cr_assert_str_eq(a.cmd_argv[0], "sh");
    cr_assert_str_eq(a.cmd_argv[1], "-c");
    cr_assert_str_eq(a.cmd_argv[2], "true");
    cr_assert_null(a.cmd_argv[3]);
}

Test(cli_args, run_defaults_and_cmd_options)
{
    /* Without --, CMD starts after NAME; CMD's own options stay CMD's. */
    cli_args a = ok("run job ls --help -l");
    cr_assert_eq(a.ttl_ms, -1);
    cr_assert_eq(a.wait_ms, 0);
    cr_assert_eq(a.grace_ms, CLI_DEFAULT_GRACE_MS);
    cr_assert_null(a.owner);
    cr_assert_not(a.help);
    cr_assert_str_eq(a.cmd_argv[0], "ls");
    cr_assert_str_eq(a.cmd_argv[1], "--help");
    /* A CMD that starts with -- follows a -- of its own. */
    a = ok("run job -- --weird-cmd");
    cr_assert_str_eq(a.cmd_argv[0], "--weird-cmd");
    /* -- before NAME ends the options: a name may start with a dash. */
    a = ok("run -- -job -- true");
    cr_assert_str_eq(a.name, "-job");
    cr_assert_str_eq(a.cmd_argv[0], "true");
}

Test(cli_args, run_refusals)
{
    usage_error("run job", "needs a command");
    usage_error("run job --", "needs a command");
    usage_error("run", "needs NAME");
    usage_error("run job --ttl 5s -- true", "options go before NAME");
    usage_error("run --ttl 500ms job -- true", "at least 1s");
    usage_error("run --ttl 0s job -- true", "--ttl");
    usage_error("run --json job -- true", "unknown option --json");
    usage_error("run --ttl 30 job -- true", "unit");
    usage_error("run --wait job -- true", "--wait job");
    usage_error("run --owner", "needs a value");
    usage_error("run bad\tname -- true", "bad lock name");
}

Test(cli_args, other_commands)
{
    cli_args a = ok("acquire --ttl=10s --wait 5s --owner=me --json orders");
    cr_assert_eq(a.cmd, CLI_ACQUIRE);
    cr_assert_eq(a.ttl_ms, 10000);
    cr_assert_eq(a.wait_ms, 5000);
    cr_assert_str_eq(a.owner, "me");
    cr_assert(a.json);
    cr_assert_str_eq(a.name, "orders");
    a = ok("status orders --json");   /* options after the arguments */
    cr_assert_eq(a.cmd, CLI_STATUS);
    cr_assert(a.json);
    a = ok("extend --ttl 30s orders tok-1_");
    cr_assert_eq(a.cmd, CLI_EXTEND);
    cr_assert_str_eq(a.token, "tok-1_");
    a = ok("release --force --admin-token-file /etc/adm orders");
    cr_assert(a.force);
    cr_assert_str_eq(a.admin_token_file, "/etc/adm");
    cr_assert_str_eq(a.name, "orders");
    cr_assert_null(a.token);
    a = ok("release orders --force");
    cr_assert(a.force);
    usage_error("release --force", "needs NAME");
    usage_error("release --force orders tok", "takes NAME");
    usage_error("extend --force orders tok", "--force");
    a = ok("release orders tok");
    cr_assert_eq(a.cmd, CLI_RELEASE);
    a = ok("--url http://h:1 --auth-token-file /f ready");
    cr_assert_eq(a.cmd, CLI_READY);
    cr_assert_str_eq(a.url, "http://h:1");
    cr_assert_str_eq(a.auth_token_file, "/f");
    a = ok("ready --url=http://x");
    cr_assert_str_eq(a.url, "http://x");
    /* HTTPS's files, before or after the command; checked with the
     * environment (test_cli_service.c) */
    a = ok("--url https://h:1 --cacert /ca --cert=/c status --key /k x");
    cr_assert(!strcmp(a.cacert, "/ca") && !strcmp(a.cert, "/c") && !strcmp(a.key, "/k"));
    usage_error("ready --cacert", "--cacert needs a value");
}

/* A token that begins with '-' is TOKEN, not an option: 1 in 64 tokens of
 * older services did, and a Dapr lockOwner may. Options still work around it. */
Test(cli_args, a_token_may_begin_with_a_dash)
{
    cli_args a = ok("release orders -R7x2fQ9kLmNpQrStUvWxYz");
    cr_assert_eq(a.cmd, CLI_RELEASE);
    cr_assert_str_eq(a.token, "-R7x2fQ9kLmNpQrStUvWxYz");
    a = ok("extend orders --unknown-looking-token --ttl 5s");
    cr_assert_str_eq(a.token, "--unknown-looking-token");
    cr_assert_eq(a.ttl_ms, 5000);
    a = ok("extend --ttl 5s orders -x --json");
    cr_assert_str_eq(a.token, "-x");
    cr_assert(a.json);
    a = ok("release orders -- -t");
    cr_assert_str_eq(a.token, "-t");
    a = ok("release orders -h");   /* still help */
    cr_assert(a.help);
    usage_error("release orders --json", "unknown option --json");
    usage_error("release orders -a -b", "unknown option -b");
}

Test(cli_args, other_refusals)
{
    usage_error("", "a command is needed");
    usage_error("lock x", "unknown command lock");
    usage_error("--ttl 5s acquire x", "goes after the command");
    usage_error("acquire", "needs NAME");
    usage_error("acquire a b", "takes NAME");
    usage_error("extend x", "needs NAME and TOKEN");
    usage_error("release x \"quoted\"", "bad token");
    usage_error("release --ttl 5s x t", "unknown option --ttl");
    usage_error("status --wait 1s x", "unknown option --wait");
    usage_error("ready x", "takes no arguments");
    usage_error("ready --json=yes", "takes no value");
    usage_error("status --bogus x", "unknown option --bogus");
    usage_error("status -x x", "unknown option -x");
    usage_error("acquire --owner x", "needs NAME");
}

Test(cli_args, help_and_version)
{
    cli_args a = ok("--help");
    cr_assert(a.help);
    cr_assert_eq(a.cmd, CLI_NONE);
    a = ok("run --help");
    cr_assert(a.help);
    cr_assert_eq(a.cmd, CLI_RUN);
    a = ok("help extend");
    cr_assert(a.help);
    cr_assert_eq(a.cmd, CLI_EXTEND);
    a = ok("status -h");
    cr_assert(a.help);
    a = ok("--version");
    cr_assert(a.version);
}

/* Every option of a command is in its help, and every command in the
 * program's. */
Test(cli_args, help_is_complete)
{
    static const struct { enum cli_cmd cmd; const char *opts[6]; } want[] = {
        {CLI_RUN, {"--ttl", "--wait", "--owner", "--grace", "--limit", "REDLOCK_FENCE"}},
        {CLI_ACQUIRE, {"--ttl", "--wait", "--owner", "--json", NULL}},
        {CLI_EXTEND, {"--ttl", "--json", NULL}},
        {CLI_RELEASE, {"TOKEN", NULL}},
        {CLI_STATUS, {"--json", NULL}},
        {CLI_READY, {"--json", NULL}},
        {CLI_ELECT, {"--ttl", "--candidate", "--value", "--grace", "--observe", "REDLOCK_TERM"}},
        {CLI_NONE, {"run", "elect", "acquire", "extend", "release", "status"}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        cli_usage(f, want[i].cmd);
        fclose(f);
        for (size_t k = 0; k < 6 && want[i].opts[k]; k++)
            cr_assert(strstr(text, want[i].opts[k]), "help of %s lacks %s", cli_cmd_name(want[i].cmd),
                      want[i].opts[k]);
        cr_assert(strstr(text, "--url") && strstr(text, "--auth-token-file") && strstr(text, "unix:/") &&
                  strstr(text, "https://") && strstr(text, "--cacert") && strstr(text, "--cert") &&
                  strstr(text, "--key") && strstr(text, "REDLOCK_TOKEN") && strstr(text, "REDLOCK_CERT"));
        if (want[i].cmd == CLI_NONE)
            cr_assert(strstr(text, "REDLOCK_URL") && strstr(text, "REDLOCK_AUTH_TOKEN") &&
                      strstr(text, "75") && strstr(text, "69") && strstr(text, "64"));
        free(text);
    }
}

Test(cli_args, elect)
{
    cli_args a = ok("elect --ttl 5s --candidate pg-1 --value 10.0.0.7:5432 --grace 1s db -- ./serve --port 1");
    cr_assert_eq(a.cmd, CLI_ELECT);
    cr_assert_eq(a.ttl_ms, 5000);
    cr_assert_str_eq(a.candidate, "pg-1");
    cr_assert_str_eq(a.value, "10.0.0.7:5432");
    cr_assert_str_eq(a.name, "db");
    cr_assert_str_eq(a.cmd_argv[0], "./serve");
    cr_assert_str_eq(a.cmd_argv[1], "--port");
    cr_assert_not(a.observe);
    a = ok("elect --observe db");
    cr_assert(a.observe);
    cr_assert_str_eq(a.name, "db");
    cr_assert_null(a.cmd_argv);
    usage_error("elect db", "needs a command");
    usage_error("elect --candidate a\tb db -- true", "--candidate");
    usage_error("elect --wait 1s db -- true", "unknown option --wait");
    usage_error("elect --observe", "needs NAME");
    usage_error("elect --ttl 500ms db -- true", "at least 1s");
}

Test(cli_args, run_limit)
{
    cli_args a = ok("run --limit 3 --wait 1m jobs -- ./work");
    cr_assert_eq(a.limit, 3);
    cr_assert_str_eq(a.cmd_argv[0], "./work");
    cr_assert_eq(ok("run jobs -- ./work").limit, 0);
    usage_error("run --limit 0 jobs -- ./work", "--limit");
    usage_error("run --limit 65 jobs -- ./work", "--limit");
    usage_error("acquire --limit 2 jobs", "unknown option --limit");
}

/* ---- answers ---- */

Test(cli_answers, exit_codes)
{
    cr_assert_eq(cli_exit_for(-1, NULL), CLI_EXIT_UNAVAILABLE);
    cr_assert_eq(cli_exit_for(503, "no_quorum"), CLI_EXIT_UNAVAILABLE);
    cr_assert_eq(cli_exit_for(503, "shutting_down"), CLI_EXIT_UNAVAILABLE);
    cr_assert_eq(cli_exit_for(500, "internal"), CLI_EXIT_UNAVAILABLE);
    cr_assert_eq(cli_exit_for(409, "locked"), CLI_EXIT_NOT_ACQUIRED);
    cr_assert_eq(cli_exit_for(429, "too_many_waiters"), CLI_EXIT_NOT_ACQUIRED);
    cr_assert_eq(cli_exit_for(429, "too_many_holds"), CLI_EXIT_NOT_ACQUIRED);
    cr_assert_eq(cli_exit_for(409, "not_held"), CLI_EXIT_NOT_HELD);
    cr_assert_eq(cli_exit_for(400, "bad_request"), CLI_EXIT_USAGE);
    cr_assert_eq(cli_exit_for(401, "unauthorized"), CLI_EXIT_NOPERM);
    cr_assert_eq(cli_exit_for(404, "not_found"), CLI_EXIT_PROTOCOL);
    cr_assert_eq(cli_exit_for(409, NULL), CLI_EXIT_PROTOCOL);
    cr_assert_eq(cli_exit_for(200, NULL), CLI_EXIT_PROTOCOL);
    cr_assert_eq(cli_answer_exit(409, "{\"error\":\"not_held\",\"reason\":\"expired\"}"), CLI_EXIT_NOT_HELD);
    cr_assert_eq(cli_answer_exit(409, "<html>"), CLI_EXIT_PROTOCOL);
}

Test(cli_answers, one_line_errors)
{
    char line[256];
    cli_format_error(409, "{\"error\":\"locked\",\"message\":\"the lock is held by another owner\","
                          "\"retry_after_ms\":2300}", line, sizeof line);
    cr_assert_str_eq(line, "locked: the lock is held by another owner (retry after 2.3s)");
    cli_format_error(409, "{\"error\":\"not_held\",\"message\":\"m\",\"reason\":\"held_by_other\"}",
                     line, sizeof line);
    cr_assert_str_eq(line, "not_held: m (reason: held_by_other)");
    cli_format_error(503, "{\"error\":\"no_quorum\",\"message\":\"m\",\"masters_ok\":2,\"masters_total\":5}",
                     line, sizeof line);
    cr_assert_str_eq(line, "no_quorum: m (2 of 5 masters answered)");
    cli_format_error(502, "<html>\nBad\tgateway</html>", line, sizeof line);
    cr_assert_str_eq(line, "HTTP 502: <html> Bad gateway</html>");
    cli_format_error(500, "", line, sizeof line);
    cr_assert_str_eq(line, "HTTP 500");
    cli_format_error(409, "{\"error\":\"locked\",\"message\":\"x\",\"retry_after_ms\":1}", line, 10);
    cr_assert_eq(strlen(line), 9, "a short buffer is cut, not overrun");
}

Test(cli_answers, acquire_body)
{
    char b[512];
    cr_assert_eq(cli_acquire_body(-1, 0, false, NULL, b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"wait_ms\":0}");
    cr_assert_eq(cli_acquire_body(30000, 60000, true, "a \"quoted\" \\ owner", b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"ttl_ms\":30000,\"wait_ms\":60000,\"hold\":true,\"owner\":\"a \\\"quoted\\\" \\\\ owner\"}");
    cr_assert_eq(cli_acquire_body(2147483647LL, 0, false, NULL, b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"ttl_ms\":2147483647,\"wait_ms\":0}");
    cr_assert_eq(cli_acquire_body(1, 0, true, "x", b, 8), -1);
    /* permits and campaigns quote their text too */
    cr_assert_eq(cli_permit_body(2, 0, 5000, "a \"q\" \\ \xc3\xa9", b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"limit\":2,\"wait_ms\":0,\"ttl_ms\":5000,\"owner\":\"a \\\"q\\\" \\\\ \xc3\xa9\"}");
    cr_assert_eq(cli_permit_body(2, 10, -1, "", b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"limit\":2,\"wait_ms\":10}");
    cr_assert_eq(cli_campaign_body("node \"7\"", "a\\b", 2147483647LL, b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"candidate\":\"node \\\"7\\\"\",\"value\":\"a\\\\b\",\"ttl_ms\":2147483647}");
    cr_assert_eq(cli_campaign_body("c", NULL, -1, b, sizeof b), 0);
    cr_assert_str_eq(b, "{\"candidate\":\"c\",\"value\":\"\"}");
}

Test(cli_answers, wait_cap_and_delay)
{
    long long cap = -5;
    cr_assert(cli_wait_cap("{\"error\":\"bad_request\",\"message\":\"wait_ms must be from 0 to 5000\"}", &cap));
    cr_assert_eq(cap, 5000);
    cr_assert_not(cli_wait_cap("{\"error\":\"bad_request\",\"message\":\"ttl_ms must be from 1 to 5\"}", &cap));
    cr_assert_not(cli_wait_cap("nonsense", &cap));
    cr_assert_eq(cap, 5000);
    cr_assert_eq(cli_retry_delay_ms(0, 0.0), 25);
    cr_assert_eq(cli_retry_delay_ms(400, 0.5), 400);
    cr_assert_eq(cli_retry_delay_ms(30000, 0.999), 1499);
    cr_assert_eq(cli_retry_delay_ms(-1, 0.5), 50);
}

Test(cli_answers, status_and_ready_lines)
{
    char line[256];
    cr_assert_eq(cli_format_status("{\"name\":\"x\",\"held\":true,\"validity_ms\":2300,\"fence\":42,"
                                   "\"owner\":\"w-1\"}", line, sizeof line), 1);
    cr_assert_str_eq(line, "held: validity 2.3s, fence 42, owner w-1");
    cr_assert_eq(cli_format_status("{\"name\":\"x\",\"held\":true,\"validity_ms\":900}", line, sizeof line), 1);
    cr_assert_str_eq(line, "held: validity 900ms");
    cr_assert_eq(cli_format_status("{\"name\":\"x\",\"held\":false,\"validity_ms\":0}", line, sizeof line), 0);
    cr_assert_str_eq(line, "not held");
    cr_assert_eq(cli_format_status("{\"held\":1}", line, sizeof line), -1);
    cr_assert_eq(cli_format_ready("{\"status\":\"ready\",\"masters_up\":5,\"masters_voting\":5,"
                                  "\"masters_total\":5,\"quorum\":3}", line, sizeof line), 0);
    cr_assert_str_eq(line, "ready: 5 of 5 masters can vote (quorum 3)");
    cr_assert_eq(cli_format_ready("{\"status\":\"not_ready\",\"masters_up\":2,\"masters_voting\":2,"
                                  "\"masters_total\":5,\"quorum\":3}", line, sizeof line), 0);
    cr_assert_str_eq(line, "not ready: 2 of 5 masters can vote (quorum 3)");
    cr_assert_eq(cli_format_ready("{\"status\":\"ok\"}", line, sizeof line), -1);
}

/* ---- held streams ---- */

Test(cli_stream, events)
{
    cli_event ev;
    cr_assert_eq(cli_parse_event("{\"event\":\"acquired\",\"name\":\"x\",\"token\":\"T-1_a\",\"fence\":"
                                 "9007199254740991,\"validity_ms\":29000,\"ttl_ms\":30000}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_ACQUIRED);
    cr_assert_str_eq(ev.token, "T-1_a");
    cr_assert_eq(ev.fence, 9007199254740991LL, "a 53-bit fence is read exactly");
    cr_assert_eq(ev.validity_ms, 29000);
    cr_assert_eq(ev.ttl_ms, 30000);
    cr_assert_eq(cli_parse_event("{\"event\":\"renewed\",\"validity_ms\":28000}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_RENEWED);
    cr_assert_eq(ev.validity_ms, 28000);
    cr_assert_eq(cli_parse_event("{\"event\":\"lost\",\"reason\":\"held_by_other\"}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_LOST);
    cr_assert_str_eq(ev.reason, "held_by_other");
    cr_assert_eq(cli_parse_event("{\"event\":\"released\"}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_RELEASED);
    cr_assert_str_eq(ev.reason, "");
    cr_assert_eq(cli_parse_event("{\"event\":\"released\",\"reason\":\"shutting_down\"}", &ev), 0);
    cr_assert_str_eq(ev.reason, "shutting_down");
    /* A campaign's stream: elected (with its term as the fence), resigned. */
    cr_assert_eq(cli_parse_event("{\"event\":\"elected\",\"name\":\"x\",\"candidate\":\"a\",\"term\":42,"
                                 "\"token\":\"T\",\"validity_ms\":900,\"ttl_ms\":1000}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_ACQUIRED);
    cr_assert_eq(ev.fence, 42);
    cr_assert_eq(cli_parse_event("{\"event\":\"resigned\"}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_RELEASED);
    cr_assert_eq(cli_parse_event("{\"event\":\"campaigning\",\"name\":\"x\",\"candidate\":\"a\"}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_OTHER);
    char line[200];
    cr_assert_eq(cli_format_election_event("{\"event\":\"elected\",\"leader\":\"b\",\"term\":7,\"value\":\"v\"}",
                                           line, sizeof line), 0);
    cr_assert_str_eq(line, "elected: b, term 7, value v");
    cr_assert_eq(cli_format_election_event("{\"event\":\"vacant\",\"leader\":null}", line, sizeof line), 0);
    cr_assert_str_eq(line, "vacant: no leader");
    cr_assert_eq(cli_format_election_event("nope", line, sizeof line), -1);
    cr_assert_eq(cli_parse_event("{\"event\":\"hello\",\"x\":1}", &ev), 0);
    cr_assert_eq(ev.kind, CLI_EV_OTHER, "events of later versions are passed over");
}

Test(cli_stream, malformed_events)
{
    cli_event ev;
    cr_assert_eq(cli_parse_event("not json", &ev), -1);
    cr_assert_eq(cli_parse_event("[1]", &ev), -1);
    cr_assert_eq(cli_parse_event("{\"event\":1}", &ev), -1);
    cr_assert_eq(cli_parse_event("{\"name\":\"x\"}", &ev), -1);
    cr_assert_eq(cli_parse_event("{\"event\":\"acquired\",\"validity_ms\":5}", &ev), -1, "no token");
    cr_assert_eq(cli_parse_event("{\"event\":\"acquired\",\"token\":\"a b\",\"validity_ms\":5}", &ev), -1);
    cr_assert_eq(cli_parse_event("{\"event\":\"acquired\",\"token\":\"t\"}", &ev), -1, "no validity");
    cr_assert_eq(cli_parse_event("{\"event\":\"renewed\"}", &ev), -1);
}

struct seen {
    char lines[8][64];
    int n;
    int stop_at;
};

static int collect(const char *line, void *arg)
{
    struct seen *s = arg;
    snprintf(s->lines[s->n], sizeof s->lines[0], "%s", line);
    s->n++;
    return s->n == s->stop_at ? 7 : 0;
}

static int feed(cli_lines *l, const char *s, int (*fn)(const char *, void *), void *arg)
{
    return cli_lines_feed(l, s, strlen(s), fn, arg);
}

Test(cli_stream, lines_across_chunks)
{
    cli_lines l = {0};
    struct seen s = {.n = 0};
    cr_assert_eq(feed(&l, "{\"a\":1}\n{\"b\"", collect, &s), 0);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(feed(&l, ":2}\r\n\n\n{\"c\":3}\n{\"d", collect, &s), 0);
    cr_assert_eq(s.n, 3);
    cr_assert_str_eq(s.lines[0], "{\"a\":1}");
    cr_assert_str_eq(s.lines[1], "{\"b\":2}", "the CR of CRLF is dropped");
    cr_assert_str_eq(s.lines[2], "{\"c\":3}");
    cr_assert_eq(feed(&l, "\":4}\n", collect, &s), 0);
    cr_assert_str_eq(s.lines[3], "{\"d\":4}");
    cli_lines_free(&l);
}

Test(cli_stream, lines_stop_and_overflow)
{
    cli_lines l = {0};
    struct seen s = {.n = 0, .stop_at = 2};
    cr_assert_eq(feed(&l, "a\nb\nc\n", collect, &s), 7, "the callback's stop comes back");
    cr_assert_eq(s.n, 2);
    cli_lines_free(&l);
    char *big = malloc(CLI_LINE_MAX + 2);
    memset(big, 'x', CLI_LINE_MAX + 1);
    struct seen t = {.n = 0};
    cr_assert_eq(cli_lines_feed(&l, big, CLI_LINE_MAX + 1, collect, &t), -1, "an endless line is refused");
    cr_assert_eq(t.n, 0);
    cli_lines_free(&l);
    free(big);
}

/* A transient 503 within --wait: 100 ms doubling to 2 s, jittered down to
 * half, never zero, never past 2 s. */
Test(values, transient_retries_back_off)
{
    cr_assert(cli_transient(503));
    cr_assert_not(cli_transient(409));
    cr_assert_not(cli_transient(500));
    cr_assert_eq(cli_transient_delay_ms(1, 0.999999), 99);
    cr_assert_eq(cli_transient_delay_ms(1, 0.0), 50);
    cr_assert_eq(cli_transient_delay_ms(2, 0.0), 100);
    cr_assert_eq(cli_transient_delay_ms(5, 0.0), 800);
    cr_assert_eq(cli_transient_delay_ms(6, 0.0), 1000);
    cr_assert_eq(cli_transient_delay_ms(40, 0.0), 1000);
    cr_assert_leq(cli_transient_delay_ms(40, 0.999999), 2000);
    cr_assert_eq(cli_transient_delay_ms(3, -1), 300, "an out-of-range draw counts as 0.5");
}

/* Found by tests/fuzz: a number past long long (1e300, or 1e999 read as
 * inf) overflowed the cast, and text from the endpoint could span lines. */
Test(answers, hostile_numbers_and_text)
{
    cli_event ev;
    cr_assert_eq(cli_parse_event("{\"event\":\"renewed\",\"validity_ms\":1e300}", &ev), 0);
    cr_assert_eq(ev.validity_ms, LLONG_MAX);
    cr_assert_eq(cli_parse_event("{\"event\":\"renewed\",\"validity_ms\":1e999}", &ev), 0);
    cr_assert_eq(ev.validity_ms, LLONG_MAX);
    cr_assert_eq(cli_parse_event("{\"event\":\"lost\",\"reason\":\"a\\nb\\u001b[2J\"}", &ev), 0);
    cr_assert_null(strpbrk(ev.reason, "\n\x1b"), "%s", ev.reason);
    char out[300];
    cli_format_error(409, "{\"error\":\"locked\",\"message\":\"x\\ny\\rz\"}", out, sizeof out);
    cr_assert_null(strpbrk(out, "\n\r"), "%s", out);
    cr_assert(cli_format_status("{\"held\":true,\"validity_ms\":5,\"owner\":\"a\\nb\"}", out,
                                sizeof out) == 1);
    cr_assert_null(strchr(out, '\n'), "%s", out);
    cr_assert_eq(cli_format_election_event("{\"event\":\"elected\",\"leader\":\"a\\nb\",\"term\":1}",
                                           out, sizeof out), 0);
    cr_assert_null(strchr(out, '\n'), "%s", out);
}
