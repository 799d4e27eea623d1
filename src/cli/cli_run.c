/* cli_run.c - run and elect: the held stream's state machine and the
 * signals (cli_int.h; the design is in redlock.c's opening comment). */
#include "cli_int.h"

/* ---- run ---- */

int cli_sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(cli_sig_pipe[1], &b, 1);   /* a full pipe already has a wake-up in it */
    (void)w;
    errno = saved;
}

void cli_lose(run *r, const char *fmt, ...)
{
    if (r->lost)
        return;
    r->lost = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

static int on_event(const char *line, void *arg)
{
    run *r = arg;
    cli_event ev;
    if (cli_parse_event(line, &ev) < 0) {
        if (!r->acquired) {
            cli_say("the held stream began with something redlock does not understand: %.200s", line);
            r->exit_code = CLI_EXIT_PROTOCOL;
            r->phase = DONE;
            return 1;
        }
        cli_lose(r, "the held stream sent something redlock does not understand: %.200s", line);
        return 1;
    }
    uint64_t now = cli_now_us();
    switch (ev.kind) {
    case CLI_EV_ACQUIRED:
        if (r->acquired)
            break;
        memcpy(r->token, ev.token, sizeof r->token);
        r->fence = ev.fence;
        r->valid_until_us = now + (uint64_t)ev.validity_ms * 1000u;
        r->acquired = true;
        break;
    case CLI_EV_RENEWED:
        if (r->acquired)
            r->valid_until_us = now + (uint64_t)ev.validity_ms * 1000u;
        break;
    case CLI_EV_LOST:
        cli_lose(r, "lost: the service lost the lock (%s)", ev.reason[0] ? ev.reason : "no reason given");
        break;
    case CLI_EV_RELEASED:
        if (!r->releasing)
            cli_lose(r, "lost: the service released the lock%s%s%s", ev.reason[0] ? " (" : "",
                 ev.reason, ev.reason[0] ? ")" : "");
        break;
    case CLI_EV_OTHER:
        break;   /* events of later versions */
    }
    return 0;
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
    run *r = arg;
    size_t len = size * n;
    if (r->kind == 0) {
        long status = 0;
        const char *ct = NULL;
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(r->h, CURLINFO_CONTENT_TYPE, &ct);
        r->kind = status == 201 && ct && !strncmp(ct, "application/x-ndjson", 20) ? 1 : 2;
    }
    if (r->kind == 2)
        return cli_on_body(p, size, n, &r->ans);
    if (cli_lines_feed(&r->lines, p, len, on_event, r) < 0) {
        if (r->acquired)
            cli_lose(r, "the held stream sent a line longer than %d bytes", CLI_LINE_MAX);
        else {
            cli_say("the held stream sent a line longer than %d bytes", CLI_LINE_MAX);
            r->exit_code = CLI_EXIT_PROTOCOL;
            r->phase = DONE;
        }
        return 0;   /* ends the transfer */
    }
    return len;
}

static void drop_request(run *r)
{
    if (r->h) {
        curl_multi_remove_handle(r->multi, r->h);   /* closes the connection */
        curl_easy_cleanup(r->h);
        r->h = NULL;
    }
    curl_slist_free_all(r->hdrs);
    r->hdrs = NULL;
}

/* An election's campaign body: candidate, value, ttl_ms. */
static int campaign_body(const run *r, char *out, size_t outlen)
{
    return cli_campaign_body(r->owner, r->a->value, r->a->ttl_ms, out, outlen);
}

/* Adds "heartbeat_ms" to a JSON object's text in body. */
static int add_heartbeat(char *body, size_t cap, long long ms)
{
    size_t n = strlen(body);
    if (n < 2 || body[n - 1] != '}')
        return -1;
    int k = snprintf(body + n - 1, cap - (n - 1), ",\"heartbeat_ms\":%lld}", ms);
    return k < 0 || (size_t)k >= cap - (n - 1) ? -1 : 0;
}

static int start_try(run *r)
{
    char body[512];
    r->asked_ms = cli_next_wait(r->a->wait_ms, r->deadline_us, r->cap);
    if (r->a->cmd == CLI_ELECT ? campaign_body(r, body, sizeof body) < 0
                               : cli_acquire_body(r->a->ttl_ms, r->asked_ms, true, r->owner, body,
                                                  sizeof body) < 0)
        return -1;
    if (add_heartbeat(body, sizeof body, r->heartbeat_ms) < 0)
        return -1;
    cli_answer_reset(&r->ans);
    cli_lines_free(&r->lines);
    r->kind = 0;
    r->h = cli_new_request("POST", r->path, body, NULL, 0, &r->hdrs, &r->ans);
    if (!r->h)
        return -1;
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    /* Only the connect and the wait are bounded: the stream itself lasts as
     * long as CMD, and a stalled one is caught by the validity timer. */
    r->sent_us = cli_now_us();
    if (curl_multi_add_handle(r->multi, r->h) != CURLM_OK)
        return -1;
    return 0;
}

/* The answer to a try ended: a refusal (maybe try again), or the stream. */
static void on_done(run *r, CURLcode rc)
{
    long status = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
    r->ans.status = status;
    if (r->kind == 1) {
        drop_request(r);
        if (r->acquired) {
            if (!r->releasing)
                cli_lose(r, "lost: the held stream %s", rc == CURLE_OK ? "ended" : "broke");
        } else if (r->phase != DONE) {
            cli_say("the held stream ended before the lock was acquired");
            r->exit_code = CLI_EXIT_PROTOCOL;
            r->phase = DONE;
        }
        return;
    }
    if (rc != CURLE_OK) {
        r->ans.rc = rc;
        drop_request(r);
        r->exit_code = cli_unreachable(&r->ans);
        r->phase = DONE;
        return;
    }
    drop_request(r);
    if (!r->ans.body)
        r->ans.body = calloc(1, 1);
    if (status == 201) {
        /* An ordinary grant: this service ignores "hold". Give it back. */
        char tok[300];
        if (cli_json_str(r->ans.body, "token", tok, sizeof tok)) {
            answer rel = {0};
            cli_call("DELETE", r->path, NULL, tok, RELEASE_TIMEOUT_MS, &rel);
            cli_answer_reset(&rel);
        }
        cli_say("the service at %s does not keep held streams (a redlockd older than this redlock?)",
                cli_svc.shown);
        r->exit_code = CLI_EXIT_PROTOCOL;
        r->phase = DONE;
        return;
    }
    long long newcap;
    if (status == 400 && r->asked_ms > 0 && cli_wait_cap(r->ans.body, &newcap) && newcap < r->asked_ms) {
        r->cap = newcap;
        r->retry_at_us = cli_now_us();
        return;
    }
    int code = cli_answer_exit(status, r->ans.body);
    if (cli_transient(status) && cli_wait_left(r->a->wait_ms, r->deadline_us)) {
        r->retry_at_us = cli_ride_out(&r->ans, ++r->transients, r->a->wait_ms, r->deadline_us);
        return;
    }
    if (code == CLI_EXIT_NOT_ACQUIRED && cli_wait_left(r->a->wait_ms, r->deadline_us)) {
        long long d = 0;
        if ((long long)((cli_now_us() - r->sent_us) / 1000) + 50 < r->asked_ms || r->asked_ms == 0)
            d = cli_retry_delay_ms(cli_json_int(r->ans.body, "retry_after_ms"), cli_random_unit());
        r->retry_at_us = cli_now_us() + (uint64_t)d * 1000u;
        if (r->a->wait_ms != CLI_WAIT_FOREVER && r->retry_at_us > r->deadline_us)
            r->retry_at_us = r->deadline_us;
        return;
    }
    r->exit_code = cli_refused(&r->ans);
    r->phase = DONE;
}

/* CMD has exited while the lock was held: read what the stream already
 * said, then release (DELETE with the token) and close the stream. */
static void finish(run *r)
{
    int still;
    curl_multi_perform(r->multi, &still);   /* events already received */
    r->exit_code = cli_child_exit_code(r->status);
    if (!r->lost) {
        r->releasing = true;
        answer rel = {0};
        if (cli_call("DELETE", r->path, NULL, r->token, RELEASE_TIMEOUT_MS, &rel) < 0)
            cli_say("release: unreachable (%s); closing the held stream releases the lock", rel.errbuf);
        else if (rel.status == 409 && cli_answer_exit(rel.status, rel.body) == CLI_EXIT_NOT_HELD) {
            char line[600];
            cli_format_error(rel.status, rel.body, line, sizeof line);
            cli_lose(r, "lost: the lock was no longer held when the command exited: %s", line);
        } else if (rel.status != 204) {
            char line[600];
            cli_format_error(rel.status, rel.body, line, sizeof line);
            cli_say("release: %s; closing the held stream releases the lock", line);
        }
        cli_answer_reset(&rel);
    }
    if (r->lost) {
        cli_say("%s", r->why);
        r->exit_code = CLI_EXIT_LOST;
    }
    drop_request(r);
    r->phase = DONE;
}

void cli_on_signals(run *r)
{
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(cli_sig_pipe[0], sigs, sizeof sigs)) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            int sig = sigs[i];
            if (sig == SIGCHLD) {
                cli_reap(r);
            } else if (r->child > 0) {
                kill(-r->child, sig);   /* to CMD's whole group */
            } else if (r->phase == ACQUIRING) {
                drop_request(r);   /* the service cancels the wait or releases the grant */
                r->exit_code = 128 + sig;
                r->phase = DONE;
                return;
            }
        }
    }
}

int cli_setup_signals(void)
{
    if (pipe2(cli_sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], &sa, NULL) < 0)
            return -1;
    return 0;
}

void cli_default_owner(char *out, size_t outlen)
{
    char host[256] = "";
    if (gethostname(host, sizeof host) < 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
    char pid[24];
    snprintf(pid, sizeof pid, ":%ld", (long)getpid());
    size_t room = outlen - 1 - strlen(pid);
    if (strlen(host) > room)
        host[room] = '\0';
    snprintf(out, outlen, "%s%s", host[0] ? host : "redlock", pid);
}

/* HOST-PID in the candidate alphabet (A-Z a-z 0-9 . _ : -), at most
 * CLI_CANDIDATE_MAX bytes. */
static void default_candidate(char *out, size_t outlen)
{
    cli_default_owner(out, outlen);
    for (char *p = out; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            *p = '-';
    size_t len = strlen(out);
    if (len > CLI_CANDIDATE_MAX)
        memmove(out, out + len - CLI_CANDIDATE_MAX, CLI_CANDIDATE_MAX + 1);   /* keep the PID */
}

/* Milliseconds until t (0 if past), at most cap. */
long cli_until_ms(uint64_t t, uint64_t now, long cap)
{
    if (t <= now)
        return 0;
    uint64_t ms = (t - now + 999) / 1000;
    return ms < (uint64_t)cap ? (long)ms : cap;
}

/* Once the lock is lost, CMD's process group is stopped: SIGTERM at once,
 * SIGKILL a->grace_ms later. Kills even after CMD itself exited: what it
 * started must stop too. Returns timeout, or less when the SIGKILL is due
 * sooner. */
long cli_stop_lost_child(const cli_args *a, run *r, uint64_t now, long timeout)
{
    if (!r->term_sent) {
        char grace[32];
        cli_format_ms(a->grace_ms, grace, sizeof grace);
        cli_say("%s; stopping the command (SIGTERM, SIGKILL after %s)", r->why, grace);
        kill(-r->child, SIGTERM);
        r->term_sent = true;
        r->kill_at_us = now + (uint64_t)a->grace_ms * 1000u;
    }
    if (r->kill_sent)
        return timeout;
    if (now < r->kill_at_us)
        return cli_until_ms(r->kill_at_us, now, timeout);
    kill(-r->child, SIGKILL);
    r->kill_sent = true;
    return timeout;
}

/* The heartbeat's request goes. */
static void beat_drop(run *r)
{
    curl_multi_remove_handle(r->multi, r->beat);
    curl_easy_cleanup(r->beat);
    r->beat = NULL;
    curl_slist_free_all(r->beat_hdrs);
    r->beat_hdrs = NULL;
}

/* The heartbeat that answered (or failed): the next one follows a quarter
 * of heartbeat_ms after this one was sent. A failed one is only said: the
 * stream tells whether the lock was lost. */
static void beat_done(run *r, CURLcode rc)
{
    long status = 0;
    curl_easy_getinfo(r->beat, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK)
        cli_say("heartbeat: %s", r->beat_ans.errbuf[0] ? r->beat_ans.errbuf : curl_easy_strerror(rc));
    else if (status != 204 && status != 202)
        cli_say("heartbeat: answered %ld %s", status, r->beat_ans.body ? r->beat_ans.body : "");
    beat_drop(r);
}

/* Sends a heartbeat when one is due; returns the poll timeout left. */
static long heartbeat(run *r, uint64_t now, long timeout)
{
    if (r->beat || !r->acquired || r->lost)
        return timeout;
    if (now < r->next_beat_us)
        return cli_until_ms(r->next_beat_us, now, timeout);
    char path[CLI_PATH_MAX + 16];   /* (r->path and /heartbeat) */
    snprintf(path, sizeof path, "%s/heartbeat", r->path);
    cli_answer_reset(&r->beat_ans);
    long timeout_ms = r->heartbeat_ms > 1000 ? (long)r->heartbeat_ms : 1000;
    r->beat = cli_new_request("PUT", path, NULL, r->token, timeout_ms, &r->beat_hdrs, &r->beat_ans);
    if (r->beat && curl_multi_add_handle(r->multi, r->beat) != CURLM_OK) {
        curl_easy_cleanup(r->beat);
        r->beat = NULL;
    }
    r->next_beat_us = now + (uint64_t)r->heartbeat_ms * 250u;
    return cli_until_ms(r->next_beat_us, now, timeout);
}

int cli_cmd_run(const cli_args *a)
{
    run r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.phase = ACQUIRING;
    r.cap = CLI_SERVER_MAX_WAIT_MS;
    r.fence = -1;
    r.heartbeat_ms = a->ttl_ms > 0 ? a->ttl_ms : CLI_HEARTBEAT_MS;
    cli_lock_path(a->name, r.path, sizeof r.path);
    if (a->owner)
        snprintf(r.owner, sizeof r.owner, "%s", a->owner);
    else
        cli_default_owner(r.owner, sizeof r.owner);
    if (a->cmd == CLI_ELECT) {
        /* The owner slot carries the candidate: a campaign waits forever. */
        char seg[RULES_NAME_PATH_MAX];
        rules_name_path(a->name, seg, sizeof seg);   /* valid: cli_parse_args checked it */
        snprintf(r.path, sizeof r.path, "/elections/%s", seg);
        if (a->candidate)
            snprintf(r.owner, sizeof r.owner, "%s", a->candidate);
        else
            default_candidate(r.owner, sizeof r.owner);
    }
    if (a->wait_ms > 0)
        r.deadline_us = cli_now_us() + (uint64_t)a->wait_ms * 1000u;
    cli_note_inherited_fds();
    if (cli_setup_signals() < 0 || !(r.multi = curl_multi_init()) || start_try(&r) < 0) {
        cli_say("cannot start: %s", strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    while (r.phase != DONE) {
        uint64_t now = cli_now_us();
        long timeout = 1000;
        if (r.phase == ACQUIRING && !r.h && r.retry_at_us) {
            if (now >= r.retry_at_us) {
                r.retry_at_us = 0;
                if (start_try(&r) < 0) {
                    cli_say("out of memory");
                    r.exit_code = CLI_EXIT_SOFTWARE;
                    break;
                }
            } else {
                timeout = cli_until_ms(r.retry_at_us, now, timeout);
            }
        }
        if (r.h && !r.acquired && !(a->cmd == CLI_ELECT && r.kind == 1)) {
            /* (a campaign's stream, once it began, waits for as long as it takes) */
            /* The answer (and with a held stream, its first event) is due
             * by the end of the wait asked for, give or take a call's time. */
            uint64_t due = r.sent_us + (uint64_t)(r.asked_ms + CALL_TIMEOUT_MS) * 1000u;
            if (now >= due) {
                cli_say("unreachable: %s: no answer within %lld ms", cli_svc.shown,
                        r.asked_ms + CALL_TIMEOUT_MS);
                r.exit_code = CLI_EXIT_UNAVAILABLE;
                break;
            }
            timeout = cli_until_ms(due, now, timeout);
        }
        if (r.acquired && !r.child && !r.lost) {
            if (cli_spawn(&r) < 0) {
                r.exit_code = CLI_EXIT_SOFTWARE;
                break;
            }
            r.phase = HOLDING;
        }
        if (r.acquired && !r.lost && now >= r.valid_until_us)
            cli_lose(&r, "lost: no renewal came before the lock's validity ran out (the held stream stalled?)");
        if (r.acquired && !r.lost) {
            timeout = cli_until_ms(r.valid_until_us, now, timeout);
            timeout = heartbeat(&r, now, timeout);
        }
        if (r.lost && !r.child) {
            cli_say("%s", r.why);   /* before CMD started */
            r.exit_code = CLI_EXIT_LOST;
            break;
        }
        if (r.lost)
            timeout = cli_stop_lost_child(a, &r, now, timeout);
        if (r.reaped) {
            if (!r.lost) {
                finish(&r);
                break;
            }
            if (r.kill_sent || !cli_group_alive(&r)) {
                r.exit_code = CLI_EXIT_LOST;
                break;
            }
            if (timeout > 50)
                timeout = 50;   /* CMD's leader is gone; watch the rest of its group */
        }
        struct curl_waitfd extra = {.fd = cli_sig_pipe[0], .events = CURL_WAIT_POLLIN};
        if (curl_multi_poll(r.multi, &extra, 1, (int)timeout, NULL) != CURLM_OK) {
            cli_say("curl_multi_poll failed");
            r.exit_code = CLI_EXIT_SOFTWARE;
            break;
        }
        cli_on_signals(&r);
        if (r.phase == DONE)
            break;
        int still;
        curl_multi_perform(r.multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(r.multi, &left)))
            if (m->msg == CURLMSG_DONE && m->easy_handle == r.h)
                on_done(&r, m->data.result);
            else if (m->msg == CURLMSG_DONE && m->easy_handle == r.beat)
                beat_done(&r, m->data.result);
    }
    /* Whatever way out: the stream closes, and with it the lock. */
    if (r.beat)
        beat_drop(&r);
    cli_answer_reset(&r.beat_ans);
    drop_request(&r);
    if (r.child > 0 && !r.reaped && r.phase != DONE) {
        /* An internal failure while CMD runs: it must not run unlocked. */
        kill(-r.child, SIGKILL);
        waitpid(r.child, NULL, 0);
        cli_take_back_tty(&r);
    }
    curl_multi_cleanup(r.multi);
    cli_answer_reset(&r.ans);
    cli_lines_free(&r.lines);
    return r.exit_code;
}
