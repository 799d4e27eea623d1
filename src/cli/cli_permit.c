/* cli_permit.c - run --limit: one permit of a semaphore, renewed by PATCH
 * (cli_int.h). */
#include "cli_int.h"

/* ---- run --limit: a semaphore's permit ---- */

/* Takes one permit of the semaphore a->name of a->limit within --wait:
 * 0 with *r's token, fence and validity, else the exit code. */
static int permit_take(const cli_args *a, run *r)
{
    char body[600];
    uint64_t deadline = a->wait_ms > 0 ? cli_now_us() + (uint64_t)a->wait_ms * 1000u : 0;
    answer ans = {0};
    for (;;) {
        long long w = cli_next_wait(a->wait_ms, deadline, CLI_SERVER_MAX_WAIT_MS);
        if (cli_permit_body(a->limit, w, a->ttl_ms, r->owner, body, sizeof body) < 0)
            return CLI_EXIT_SOFTWARE;
        uint64_t t0 = cli_now_us();
        if (cli_call("POST", r->path, body, NULL, (long)w + CALL_TIMEOUT_MS, &ans) < 0) {
            int code = cli_unreachable(&ans);
            cli_answer_reset(&ans);
            return code;
        }
        if (ans.status == 201) {
            cJSON *o = cJSON_Parse(ans.body);
            const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "permits"), 0);
            const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(p, "token"));
            bool ok = tok && strlen(tok) < sizeof r->token;
            if (ok) {
                snprintf(r->token, sizeof r->token, "%s", tok);
                r->fence = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "fence"));
                r->valid_until_us = t0 + (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "validity_ms")) * 1000u;
            }
            cJSON_Delete(o);
            cli_answer_reset(&ans);
            if (!ok) {
                cli_say("the service granted a permit but sent no token");
                return CLI_EXIT_PROTOCOL;
            }
            return 0;
        }
        int code = cli_answer_exit(ans.status, ans.body);
        if (code == CLI_EXIT_NOT_ACQUIRED && cli_wait_left(a->wait_ms, deadline)) {
            if ((long long)((cli_now_us() - t0) / 1000) + 50 < w || w == 0)
                cli_back_off(&ans, a->wait_ms, deadline);
            continue;
        }
        code = cli_refused(&ans);
        cli_answer_reset(&ans);
        return code;
    }
}

/* Extends the permit; false when it is lost (r->why says how). No quorum
 * is tried again while the validity lasts. */
static bool permit_renew(const cli_args *a, run *r, bool first)
{
    char body[64] = "{}";
    if (a->ttl_ms >= 0)
        snprintf(body, sizeof body, "{\"ttl_ms\":%lld}", a->ttl_ms);
    answer ans = {0};
    uint64_t t0 = cli_now_us();
    long budget = first ? CALL_TIMEOUT_MS : (long)((r->valid_until_us > t0 ? r->valid_until_us - t0 : 0) / 1000);
    bool ok = false;
    if (budget > 0 && cli_call("PATCH", r->path, body, r->token, budget, &ans) == 0 && ans.status == 200) {
        long long v = cli_json_int(ans.body, "validity_ms");
        r->valid_until_us = t0 + (uint64_t)(v > 0 ? v : 0) * 1000u;
        ok = v > 0;
    } else if (ans.status == 409) {
        char line[600];
        cli_format_error(ans.status, ans.body, line, sizeof line);
        cli_lose(r, "lost: the permit is no longer held: %s", line);
    }
    cli_answer_reset(&ans);
    return ok;
}

/* run --limit: CMD with one permit of a semaphore, renewed by redlock. */
int cli_cmd_run_permit(const cli_args *a)
{
    run r;
    memset(&r, 0, sizeof r);
    r.a = a;
    char seg[RULES_NAME_PATH_MAX];
    rules_name_path(a->name, seg, sizeof seg);
    snprintf(r.path, sizeof r.path, "/semaphores/%s", seg);
    if (a->owner)
        snprintf(r.owner, sizeof r.owner, "%s", a->owner);
    else
        cli_default_owner(r.owner, sizeof r.owner);
    cli_note_inherited_fds();
    if (cli_setup_signals() < 0) {
        cli_say("cannot start: %s", strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    int code = permit_take(a, &r);
    if (code)
        return code;
    /* The answer's validity counts from when the acquire was sent, long ago
     * after a wait: a renewal first, whose validity counts from now. */
    if (!permit_renew(a, &r, true)) {
        cli_say("%s", r.lost ? r.why : "lost: the permit could not be renewed after the wait");
        return CLI_EXIT_LOST;
    }
    long long ttl = a->ttl_ms >= 0 ? a->ttl_ms : (long long)((r.valid_until_us - cli_now_us()) / 1000);
    uint64_t next_renew = cli_now_us() + (uint64_t)(ttl / 3) * 1000u;
    if (cli_spawn(&r) < 0)
        return CLI_EXIT_SOFTWARE;
    for (;;) {
        uint64_t now = cli_now_us();
        if (!r.lost && now >= r.valid_until_us)
            cli_lose(&r, "lost: the permit's validity ran out before a renewal succeeded");
        if (!r.lost && now >= next_renew) {
            if (permit_renew(a, &r, false))
                next_renew = cli_now_us() + (uint64_t)(ttl / 3) * 1000u;
            else
                next_renew = cli_now_us() + 200000u;   /* again soon, while validity lasts */
        }
        if (r.lost)
            cli_stop_lost_child(a, &r, now, 50);   /* lost: the poll below waits 50 ms */
        if (r.reaped && (!r.lost || r.kill_sent || !cli_group_alive(&r)))
            break;
        long timeout = r.lost ? 50 : cli_until_ms(next_renew < r.valid_until_us ? next_renew : r.valid_until_us,
                                                  cli_now_us(), 1000);
        struct pollfd pfd = {cli_sig_pipe[0], POLLIN, 0};
        poll(&pfd, 1, (int)timeout);
        cli_on_signals(&r);
    }
    if (r.lost)
        return CLI_EXIT_LOST;
    code = cli_child_exit_code(r.status);
    answer rel = {0};
    if (cli_call("DELETE", r.path, NULL, r.token, RELEASE_TIMEOUT_MS, &rel) < 0)
        cli_say("release: unreachable (%s); the permit expires with its ttl", rel.errbuf);
    else if (rel.status == 409) {
        cli_say("lost: the permit was no longer held when the command exited");
        code = CLI_EXIT_LOST;
    }
    cli_answer_reset(&rel);
    return code;
}
