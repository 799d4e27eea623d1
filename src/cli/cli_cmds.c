/* cli_cmds.c - the commands of one call each, and elect --observe
 * (cli_int.h). */
#include "cli_int.h"

/* ---- acquire, extend, release, status, ready ---- */

int cli_cmd_acquire(const cli_args *a)
{
    char path[CLI_PATH_MAX], body[512];
    cli_lock_path(a->name, path, sizeof path);
    uint64_t deadline = a->wait_ms > 0 ? cli_now_us() + (uint64_t)a->wait_ms * 1000u : 0;
    long long cap = CLI_SERVER_MAX_WAIT_MS;
    answer ans = {0};
    int code, transients = 0;
    for (;;) {
        long long w = cli_next_wait(a->wait_ms, deadline, cap);
        if (cli_acquire_body(a->ttl_ms, w, false, a->owner, body, sizeof body) < 0) {
            cli_say("out of memory");
            code = CLI_EXIT_SOFTWARE;
            break;
        }
        uint64_t t0 = cli_now_us();
        if (cli_call("POST", path, body, NULL, (long)w + CALL_TIMEOUT_MS, &ans) < 0) {
            code = cli_unreachable(&ans);
            break;
        }
        if (ans.status == 201) {
            char tok[300];
            if (a->json)
                printf("%s\n", ans.body);
            else if (cli_json_str(ans.body, "token", tok, sizeof tok))
                printf("%s\n", tok);
            else {
                cli_say("the service granted the lock but sent no token: %.200s", ans.body);
                code = CLI_EXIT_PROTOCOL;
                break;
            }
            code = fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_SOFTWARE;
            break;
        }
        long long newcap;
        if (ans.status == 400 && w > 0 && cli_wait_cap(ans.body, &newcap) && newcap < w) {
            cap = newcap;
            continue;
        }
        int exit_code = cli_answer_exit(ans.status, ans.body);
        if (cli_transient(ans.status) && cli_wait_left(a->wait_ms, deadline)) {
            uint64_t at = cli_ride_out(&ans, ++transients, a->wait_ms, deadline), now = cli_now_us();
            cli_sleep_ms(at > now ? (long long)((at - now) / 1000) : 0);
            continue;
        }
        if (exit_code == CLI_EXIT_NOT_ACQUIRED && cli_wait_left(a->wait_ms, deadline)) {
            if ((long long)((cli_now_us() - t0) / 1000) + 50 < w || w == 0)
                cli_back_off(&ans, a->wait_ms, deadline);
            continue;
        }
        code = cli_refused(&ans);
        break;
    }
    cli_answer_reset(&ans);
    return code;
}

int cli_cmd_extend(const cli_args *a)
{
    char path[CLI_PATH_MAX], body[64] = "{}";
    cli_lock_path(a->name, path, sizeof path);
    if (a->ttl_ms >= 0)
        snprintf(body, sizeof body, "{\"ttl_ms\":%lld}", a->ttl_ms);
    answer ans = {0};
    int code;
    if (cli_call("PATCH", path, body, a->token, CALL_TIMEOUT_MS, &ans) < 0)
        code = cli_unreachable(&ans);
    else if (ans.status == 200) {
        if (a->json)
            printf("%s\n", ans.body);
        code = CLI_EXIT_OK;
    } else
        code = cli_refused(&ans);
    cli_answer_reset(&ans);
    return code;
}

int cli_cmd_release(const cli_args *a)
{
    char path[CLI_PATH_MAX];
    cli_lock_path(a->name, path, sizeof path);
    if (a->force)   /* an operator's: whatever token holds it (the admin token is sent) */
        strncat(path, "?force=true", sizeof path - strlen(path) - 1);
    answer ans = {0};
    int code;
    if (cli_call("DELETE", path, NULL, a->force ? NULL : a->token, CALL_TIMEOUT_MS, &ans) < 0)
        code = cli_unreachable(&ans);
    else if (ans.status == 204)
        code = CLI_EXIT_OK;
    else
        code = cli_refused(&ans);
    cli_answer_reset(&ans);
    return code;
}

int cli_cmd_status(const cli_args *a)
{
    char path[CLI_PATH_MAX], line[600];
    cli_lock_path(a->name, path, sizeof path);
    answer ans = {0};
    int code;
    if (cli_call("GET", path, NULL, NULL, CALL_TIMEOUT_MS, &ans) < 0)
        code = cli_unreachable(&ans);
    else if (ans.status != 200)
        code = cli_refused(&ans);
    else {
        int held = cli_format_status(ans.body, line, sizeof line);
        if (held < 0) {
            cli_say("an answer redlock does not understand: %.200s", ans.body);
            code = CLI_EXIT_PROTOCOL;
        } else {
            printf("%s\n", a->json ? ans.body : line);
            code = held ? CLI_EXIT_OK : CLI_EXIT_NOT_HELD;
        }
    }
    cli_answer_reset(&ans);
    return code;
}

int cli_cmd_ready(const cli_args *a)
{
    answer ans = {0};
    char line[600];
    int code;
    if (cli_call("GET", "/readyz", NULL, NULL, CALL_TIMEOUT_MS, &ans) < 0)
        code = cli_unreachable(&ans);
    else if (ans.status != 200 && ans.status != 503)
        code = cli_refused(&ans);
    else if (cli_format_ready(ans.body, line, sizeof line) < 0) {
        cli_say("an answer redlock does not understand (HTTP %ld): %.200s", ans.status, ans.body);
        code = CLI_EXIT_PROTOCOL;
    } else {
        if (a->json)
            printf("%s\n", ans.body);
        if (ans.status == 200) {
            if (!a->json)
                printf("%s\n", line);
            code = CLI_EXIT_OK;
        } else {
            cli_say("%s", line);
            code = CLI_EXIT_UNAVAILABLE;
        }
    }
    cli_answer_reset(&ans);
    return code;
}

/* ---- elect --observe ---- */

static int on_watch_line(const char *line, void *arg)
{
    (void)arg;
    char out[400];
    if (cli_format_election_event(line, out, sizeof out) == 0) {
        printf("%s\n", out);
        fflush(stdout);
    }
    return 0;
}

typedef struct watch {
    CURL *h;
    int kind;           /* 0 unknown yet, 1 the stream, 2 an error answer (into ans) */
    cli_lines lines;
    answer ans;
} watch;

static size_t on_watch(char *p, size_t size, size_t n, void *arg)
{
    watch *w = arg;
    if (w->kind == 0) {
        long status = 0;
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &status);
        w->kind = status == 200 ? 1 : 2;
    }
    if (w->kind == 2)
        return cli_on_body(p, size, n, &w->ans);
    return cli_lines_feed(&w->lines, p, size * n, on_watch_line, NULL) < 0 ? 0 : size * n;
}

/* Prints the election's changes until the stream ends (the service
 * stopped or cannot be reached: 69) or a signal ends redlock. */
int cli_cmd_observe(const cli_args *a)
{
    char path[CLI_PATH_MAX], seg[RULES_NAME_PATH_MAX];
    if (rules_name_path(a->name, seg, sizeof seg) < 0)
        return CLI_EXIT_USAGE;
    snprintf(path, sizeof path, "/elections/%s?watch=true", seg);
    watch w;
    memset(&w, 0, sizeof w);
    struct curl_slist *hdrs = NULL;
    w.h = cli_new_request("GET", path, NULL, NULL, 0, &hdrs, &w.ans);
    if (!w.h) {
        cli_say("out of memory");
        return CLI_EXIT_SOFTWARE;
    }
    curl_easy_setopt(w.h, CURLOPT_WRITEFUNCTION, on_watch);
    curl_easy_setopt(w.h, CURLOPT_WRITEDATA, &w);
    CURLcode rc = curl_easy_perform(w.h);
    long status = 0;
    curl_easy_getinfo(w.h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(w.h);
    curl_slist_free_all(hdrs);
    int code = CLI_EXIT_UNAVAILABLE;
    if (w.kind == 2) {
        w.ans.status = status;
        code = cli_refused(&w.ans);
    } else if (rc != CURLE_OK && !w.kind) {
        w.ans.rc = rc;
        code = cli_unreachable(&w.ans);
    } else {
        cli_say("the watch ended: %s", rc == CURLE_OK ? "the service closed it" : curl_easy_strerror(rc));
    }
    cli_lines_free(&w.lines);
    cli_answer_reset(&w.ans);
    return code;
}

/* ---- list ---- */

int cli_cmd_list(const cli_args *a)
{
    char prefix[RULES_NAME_PATH_MAX] = "", next[CLI_CURSOR_MAX + 1] = "", line[700];
    if (a->prefix && rules_name_path(a->prefix, prefix, sizeof prefix) < 0)
        prefix[0] = '\0';
    cJSON *all = a->json ? cJSON_CreateObject() : NULL;
    cJSON *locks = all ? cJSON_AddArrayToObject(all, "locks") : NULL;
    if (a->json && !locks) {
        cJSON_Delete(all);
        cli_say("out of memory");
        return CLI_EXIT_SOFTWARE;
    }
    int code = CLI_EXIT_OK;
    for (;;) {
        char path[CLI_PATH_MAX + CLI_CURSOR_MAX];
        snprintf(path, sizeof path, "/locks?limit=%d%s%s%s%s", CLI_LIST_PAGE, prefix[0] ? "&prefix=" : "", prefix,
                 next[0] ? "&cursor=" : "", next);
        answer ans = {0};
        if (cli_call("GET", path, NULL, NULL, CALL_TIMEOUT_MS, &ans) < 0) {
            code = cli_unreachable(&ans);
            cli_answer_reset(&ans);
            break;
        }
        if (ans.status != 200) {
            code = cli_refused(&ans);
            cli_answer_reset(&ans);
            break;
        }
        cJSON *page = cJSON_Parse(ans.body);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(page, "locks");
        const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(page, "next");
        bool understood = cJSON_IsArray(items) && (cJSON_IsNull(cursor) ||
                                                   (cJSON_IsString(cursor) && *cursor->valuestring &&
                                                    strlen(cursor->valuestring) <= CLI_CURSOR_MAX &&
                                                    strspn(cursor->valuestring, "0123456789abcdef.") ==
                                                        strlen(cursor->valuestring)));
        const cJSON *it;
        const cJSON *walk = understood ? items : NULL;
        cJSON_ArrayForEach(it, walk) {
            if (cli_format_listed(it, line, sizeof line) < 0) {
                understood = false;
                break;
            }
            if (locks)
                cJSON_AddItemToArray(locks, cJSON_Duplicate(it, true));
            else
                printf("%s\n", line);
        }
        if (!understood) {
            cli_say("an answer redlock does not understand: %.200s", ans.body);
            code = CLI_EXIT_PROTOCOL;
        } else if (cJSON_IsString(cursor)) {
            snprintf(next, sizeof next, "%s", cursor->valuestring);
        }
        bool more = understood && cJSON_IsString(cursor);
        cJSON_Delete(page);
        cli_answer_reset(&ans);
        if (!more)
            break;
    }
    if (all && code == CLI_EXIT_OK) {
        char *s = cJSON_PrintUnformatted(all);
        if (s)
            printf("%s\n", s);
        free(s);
    }
    cJSON_Delete(all);
    return code;
}
