/* redlock.c - the `redlock` command-line client of redlockd.
 *
 * acquire, extend, release, status and ready are one HTTP call each (a few
 * when --wait is longer than the service lets one call wait), made with
 * libcurl's easy interface; their default signal dispositions stay, so a
 * Ctrl-C closes the connection and the service forgets the request.
 *
 * run holds a lock through a held stream (POST {"hold": true}: a chunked
 * answer, one JSON event per line, while the service renews the lock) and
 * runs CMD meanwhile. One thread owns everything: a loop around
 * curl_multi_poll() that also watches a self-pipe, which the handlers of
 * SIGCHLD, SIGINT, SIGTERM and SIGHUP write their signal number into. The
 * loop reads the stream's events, reaps CMD, forwards signals to CMD's
 * process group and keeps three timers: the next acquire try, the end of the
 * validity last announced, and SIGKILL after --grace. Nothing polls faster
 * than those timers ask.
 *
 * Sockets are opened close-on-exec, so that CMD never holds the stream open
 * after redlock has gone (closing it is what releases the lock).
 */
#include "cli_int.h"

int main(int argc, char **argv)
{
    cli_args a;
    char err[512];
    if (cli_parse_args(argc, argv, &a, err, sizeof err) < 0) {
        fprintf(stderr, "redlock: %s (redlock --help for usage)\n", err);
        return CLI_EXIT_USAGE;
    }
    if (a.help) {
        cli_usage(stdout, a.cmd);
        return CLI_EXIT_OK;
    }
    if (a.version) {
        printf("redlock %s (libcurl %s)\n", REDLOCKD_VERSION, curl_version_info(CURLVERSION_NOW)->version);
        return CLI_EXIT_OK;
    }
    if (cli_set_service(&a) < 0 || cli_set_auth(a.auth_token_file) < 0 ||
        (a.force && cli_set_admin_auth(a.admin_token_file) < 0))
        return CLI_EXIT_USAGE;
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        cli_say("curl_global_init failed");
        return CLI_EXIT_SOFTWARE;
    }
    int code;
    switch (a.cmd) {
    case CLI_RUN: code = a.limit ? cli_cmd_run_permit(&a) : cli_cmd_run(&a); break;
    case CLI_ELECT: code = a.observe ? cli_cmd_observe(&a) : cli_cmd_run(&a); break;
    case CLI_ACQUIRE: code = cli_cmd_acquire(&a); break;
    case CLI_EXTEND: code = cli_cmd_extend(&a); break;
    case CLI_RELEASE: code = cli_cmd_release(&a); break;
    case CLI_STATUS: code = cli_cmd_status(&a); break;
    case CLI_READY: code = cli_cmd_ready(&a); break;
    case CLI_LIST: code = cli_cmd_list(&a); break;
    default: code = CLI_EXIT_USAGE; break;
    }
    curl_global_cleanup();
    return code;
}
