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
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli_parse.h"

#ifndef REDLOCKD_VERSION
#define REDLOCKD_VERSION "dev"
#endif

#define CONNECT_TIMEOUT_MS 5000L
#define CALL_TIMEOUT_MS 30000L      /* a call that does not wait */
#define RELEASE_TIMEOUT_MS 5000L    /* run's DELETE after CMD exits */
#define MAX_BODY_BYTES (1 << 20)

extern char **environ;

static char g_url[2048];            /* the service, without a trailing '/' */
static char g_auth[600];            /* "Authorization: Bearer ..." or "" */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "redlock: %s\n", line);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_ms(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static double random_unit(void)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)(now_us() ^ ((uint64_t)getpid() << 16));
    return (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
}

/* ---- configuration from flags and the environment ---- */

static int set_url(const char *url)
{
    if (!url || !*url)
        url = getenv("REDLOCK_URL");
    if (!url || !*url)
        url = CLI_DEFAULT_URL;
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof g_url - 300) {
        say("bad --url / REDLOCK_URL");
        return -1;
    }
    memcpy(g_url, url, n);
    g_url[n] = '\0';
    return 0;
}

/* The token from --auth-token-file (its first word) or REDLOCK_AUTH_TOKEN. */
static int set_auth(const char *file)
{
    char tok[512] = "";
    if (file) {
        FILE *f = fopen(file, "r");
        if (!f) {
            say("--auth-token-file: cannot open %s: %s", file, strerror(errno));
            return -1;
        }
        size_t n = fread(tok, 1, sizeof tok - 1, f);
        fclose(f);
        tok[n] = '\0';
        char *s = tok;
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        size_t k = 0;
        while (s[k] > 0x20 && s[k] < 0x7f)
            k++;
        s[k] = '\0';
        memmove(tok, s, k + 1);
        if (!*tok) {
            say("--auth-token-file: %s holds no token", file);
            return -1;
        }
    } else {
        const char *env = getenv("REDLOCK_AUTH_TOKEN");
        if (!env || !*env)
            return 0;
        snprintf(tok, sizeof tok, "%s", env);
        for (char *p = tok; *p; p++)
            if (*p <= 0x20 || *p >= 0x7f) {
                say("REDLOCK_AUTH_TOKEN must be one word of printable ASCII");
                return -1;
            }
    }
    snprintf(g_auth, sizeof g_auth, "Authorization: Bearer %s", tok);
    return 0;
}

/* ---- HTTP ---- */

typedef struct answer {
    long status;                 /* 0: no answer; errbuf says why */
    char *body;                  /* NUL-terminated, never NULL after a call */
    size_t len;
    char errbuf[CURL_ERROR_SIZE];
} answer;

static void answer_reset(answer *a)
{
    free(a->body);
    memset(a, 0, sizeof *a);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    answer *a = arg;
    size_t add = size * n;
    if (a->len + add > MAX_BODY_BYTES)
        return 0;
    char *b = realloc(a->body, a->len + add + 1);
    if (!b)
        return 0;
    memcpy(b + a->len, p, add);
    a->body = b;
    a->len += add;
    a->body[a->len] = '\0';
    return add;
}

/* Close-on-exec sockets: CMD must not keep the held stream open. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

/* An easy handle for method on path ("/locks/NAME"), with body (NULL: none)
 * and the lock's token (NULL: none). Its headers go into *hdrs (the caller
 * frees them after the transfer); the body goes into a unless the caller
 * sets its own write function. NULL when out of memory. */
static CURL *new_request(const char *method, const char *path, const char *body,
                         const char *lock_token, long timeout_ms, struct curl_slist **hdrs,
                         answer *a)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    char url[sizeof g_url + 256], line[400];
    snprintf(url, sizeof url, "%s%s", g_url, path);
    struct curl_slist *l = curl_slist_append(NULL, "Expect:");
    if (l && body)
        l = curl_slist_append(l, "Content-Type: application/json");
    if (l && g_auth[0])
        l = curl_slist_append(l, g_auth);
    if (l && lock_token) {
        snprintf(line, sizeof line, "Lock-Token: %s", lock_token);
        l = curl_slist_append(l, line);
    }
    if (!l) {
        curl_easy_cleanup(h);
        return NULL;
    }
    *hdrs = l;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "redlock/" REDLOCKD_VERSION);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, a->errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    if (timeout_ms > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
    return h;
}

/* One call, to its end. Returns 0 with a->status set, or -1 when no answer
 * came (a->errbuf says why). */
static int call(const char *method, const char *path, const char *body, const char *lock_token,
                long timeout_ms, answer *a)
{
    answer_reset(a);
    struct curl_slist *hdrs = NULL;
    CURL *h = new_request(method, path, body, lock_token, timeout_ms, &hdrs, a);
    if (!h) {
        snprintf(a->errbuf, sizeof a->errbuf, "out of memory");
        return -1;
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a->status);
    else if (!a->errbuf[0])
        snprintf(a->errbuf, sizeof a->errbuf, "%s", curl_easy_strerror(rc));
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    if (!a->body)
        a->body = calloc(1, 1);
    return rc == CURLE_OK && a->body ? 0 : -1;
}

static int unreachable(const answer *a)
{
    say("unreachable: %s: %s", g_url, a->errbuf[0] ? a->errbuf : "no answer");
    return CLI_EXIT_UNAVAILABLE;
}

/* Reports an answer the command does not want; returns its exit code. */
static int refused(const answer *a)
{
    char line[600];
    cli_format_error(a->status, a->body, line, sizeof line);
    say("%s", line);
    return cli_answer_exit(a->status, a->body);
}

/* "/locks/NAME" for a name cli_parse_args accepted (so it fits and is valid). */
static void lock_path(const char *name, char *out, size_t outlen)
{
    char seg[RULES_NAME_MAX + 8];   /* "..", the longest to grow, becomes "%2E%2E" */
    if (rules_name_path(name, seg, sizeof seg) < 0)
        seg[0] = '\0';
    snprintf(out, outlen, "/locks/%s", seg);
}

/* A string field of a JSON answer, copied into out; NULL when absent. */
static const char *json_str(const char *body, const char *field, char *out, size_t outlen)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL;
    const char *got = NULL;
    if (cJSON_IsString(v) && strlen(v->valuestring) < outlen) {
        memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
        got = out;
    }
    cJSON_Delete(o);
    return got;
}

/* An integer field of a JSON answer; -1 when absent. */
static long long json_int(const char *body, const char *field)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL;
    long long got = cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
    cJSON_Delete(o);
    return got;
}

/* ---- acquire, extend, release, status, ready ---- */

/* The wait_ms of the next try: what is left of --wait, at most what the
 * service allows one call (learnt from a 400 naming its largest). */
static long long next_wait(long long wait_ms, uint64_t deadline_us, long long cap)
{
    if (wait_ms == CLI_WAIT_FOREVER)
        return cap;
    uint64_t now = now_us();
    long long left = deadline_us > now ? (long long)((deadline_us - now) / 1000) : 0;
    return left < cap ? left : cap;
}

static bool wait_left(long long wait_ms, uint64_t deadline_us)
{
    return wait_ms == CLI_WAIT_FOREVER || now_us() + 1000 < deadline_us;
}

/* After a refusal that came sooner than the wait asked for: sleeps a short
 * random time within what is left of the wait. */
static void back_off(const answer *a, long long wait_ms, uint64_t deadline_us)
{
    long long d = cli_retry_delay_ms(json_int(a->body, "retry_after_ms"), random_unit());
    if (wait_ms != CLI_WAIT_FOREVER) {
        uint64_t now = now_us();
        long long left = deadline_us > now ? (long long)((deadline_us - now) / 1000) : 0;
        if (d > left)
            d = left;
    }
    sleep_ms(d);
}

static int cmd_acquire(const cli_args *a)
{
    char path[256], body[512];
    lock_path(a->name, path, sizeof path);
    uint64_t deadline = a->wait_ms > 0 ? now_us() + (uint64_t)a->wait_ms * 1000u : 0;
    long long cap = CLI_SERVER_MAX_WAIT_MS;
    answer ans = {0};
    int code;
    for (;;) {
        long long w = next_wait(a->wait_ms, deadline, cap);
        if (cli_acquire_body(a->ttl_ms, w, false, a->owner, body, sizeof body) < 0) {
            say("out of memory");
            code = CLI_EXIT_SOFTWARE;
            break;
        }
        uint64_t t0 = now_us();
        if (call("POST", path, body, NULL, (long)w + CALL_TIMEOUT_MS, &ans) < 0) {
            code = unreachable(&ans);
            break;
        }
        if (ans.status == 201) {
            char tok[300];
            if (a->json)
                printf("%s\n", ans.body);
            else if (json_str(ans.body, "token", tok, sizeof tok))
                printf("%s\n", tok);
            else {
                say("the service granted the lock but sent no token: %.200s", ans.body);
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
        if (exit_code == CLI_EXIT_NOT_ACQUIRED && wait_left(a->wait_ms, deadline)) {
            if ((long long)((now_us() - t0) / 1000) + 50 < w || w == 0)
                back_off(&ans, a->wait_ms, deadline);
            continue;
        }
        code = refused(&ans);
        break;
    }
    answer_reset(&ans);
    return code;
}

static int cmd_extend(const cli_args *a)
{
    char path[256], body[64] = "{}";
    lock_path(a->name, path, sizeof path);
    if (a->ttl_ms >= 0)
        snprintf(body, sizeof body, "{\"ttl_ms\":%lld}", a->ttl_ms);
    answer ans = {0};
    int code;
    if (call("PATCH", path, body, a->token, CALL_TIMEOUT_MS, &ans) < 0)
        code = unreachable(&ans);
    else if (ans.status == 200) {
        if (a->json)
            printf("%s\n", ans.body);
        code = CLI_EXIT_OK;
    } else
        code = refused(&ans);
    answer_reset(&ans);
    return code;
}

static int cmd_release(const cli_args *a)
{
    char path[256];
    lock_path(a->name, path, sizeof path);
    answer ans = {0};
    int code;
    if (call("DELETE", path, NULL, a->token, CALL_TIMEOUT_MS, &ans) < 0)
        code = unreachable(&ans);
    else if (ans.status == 204)
        code = CLI_EXIT_OK;
    else
        code = refused(&ans);
    answer_reset(&ans);
    return code;
}

static int cmd_status(const cli_args *a)
{
    char path[256], line[600];
    lock_path(a->name, path, sizeof path);
    answer ans = {0};
    int code;
    if (call("GET", path, NULL, NULL, CALL_TIMEOUT_MS, &ans) < 0)
        code = unreachable(&ans);
    else if (ans.status != 200)
        code = refused(&ans);
    else {
        int held = cli_format_status(ans.body, line, sizeof line);
        if (held < 0) {
            say("an answer redlock does not understand: %.200s", ans.body);
            code = CLI_EXIT_PROTOCOL;
        } else {
            printf("%s\n", a->json ? ans.body : line);
            code = held ? CLI_EXIT_OK : CLI_EXIT_NOT_HELD;
        }
    }
    answer_reset(&ans);
    return code;
}

static int cmd_ready(const cli_args *a)
{
    answer ans = {0};
    char line[600];
    int code;
    if (call("GET", "/readyz", NULL, NULL, CALL_TIMEOUT_MS, &ans) < 0)
        code = unreachable(&ans);
    else if (ans.status != 200 && ans.status != 503)
        code = refused(&ans);
    else if (cli_format_ready(ans.body, line, sizeof line) < 0) {
        say("an answer redlock does not understand (HTTP %ld): %.200s", ans.status, ans.body);
        code = CLI_EXIT_PROTOCOL;
    } else {
        if (a->json)
            printf("%s\n", ans.body);
        if (ans.status == 200) {
            if (!a->json)
                printf("%s\n", line);
            code = CLI_EXIT_OK;
        } else {
            say("%s", line);
            code = CLI_EXIT_UNAVAILABLE;
        }
    }
    answer_reset(&ans);
    return code;
}

/* ---- run ---- */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(sig_pipe[1], &b, 1);   /* a full pipe already has a wake-up in it */
    (void)w;
    errno = saved;
}

enum run_phase { ACQUIRING, HOLDING, DONE };

typedef struct run {
    const cli_args *a;
    enum run_phase phase;
    int exit_code;
    /* the acquire, then the held stream */
    CURLM *multi;
    CURL *h;                      /* NULL between tries */
    struct curl_slist *hdrs;
    answer ans;                   /* a refusal's body (the stream's lines go to lines) */
    cli_lines lines;
    int kind;                     /* 0 unknown yet, 1 held stream, 2 an ordinary answer */
    char path[256];
    char owner[RULES_OWNER_MAX + 1];
    long long cap;                /* largest wait_ms the service takes */
    long long asked_ms;           /* wait_ms of the try under way */
    uint64_t sent_us, deadline_us, retry_at_us;
    /* the lock */
    bool acquired;
    char token[300];
    long long fence;
    uint64_t valid_until_us;      /* from when the last acquired/renewed event was read */
    bool lost, releasing;
    char why[300];                /* what happened to the lock */
    /* CMD */
    pid_t child;                  /* also its process group; 0 before it starts */
    bool reaped, tty;
    int status;                   /* waitpid's, once reaped */
    bool term_sent, kill_sent;
    uint64_t kill_at_us;
} run;

static void lose(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lose(run *r, const char *fmt, ...)
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
            say("the held stream began with something redlock does not understand: %.200s", line);
            r->exit_code = CLI_EXIT_PROTOCOL;
            r->phase = DONE;
            return 1;
        }
        lose(r, "the held stream sent something redlock does not understand: %.200s", line);
        return 1;
    }
    uint64_t now = now_us();
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
        lose(r, "lost: the service lost the lock (%s)", ev.reason[0] ? ev.reason : "no reason given");
        break;
    case CLI_EV_RELEASED:
        if (!r->releasing)
            lose(r, "lost: the service released the lock%s%s%s", ev.reason[0] ? " (" : "",
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
        return on_body(p, size, n, &r->ans);
    if (cli_lines_feed(&r->lines, p, len, on_event, r) < 0) {
        if (r->acquired)
            lose(r, "the held stream sent a line longer than %d bytes", CLI_LINE_MAX);
        else {
            say("the held stream sent a line longer than %d bytes", CLI_LINE_MAX);
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

/* An election's campaign body: candidate, value, ttl_ms. The candidate
 * and value passed the client's own checks: no quoting is needed but for
 * the value's quotes and backslashes. */
static int campaign_body(const run *r, char *out, size_t outlen)
{
    char value[2 * CLI_VALUE_MAX + 1];
    size_t k = 0;
    for (const char *c = r->a->value ? r->a->value : ""; *c; c++) {
        if (*c == '"' || *c == '\\')
            value[k++] = '\\';
        value[k++] = *c;
    }
    value[k] = '\0';
    int n = r->a->ttl_ms >= 0
                ? snprintf(out, outlen, "{\"candidate\":\"%s\",\"value\":\"%s\",\"ttl_ms\":%lld}", r->owner,
                           value, r->a->ttl_ms)
                : snprintf(out, outlen, "{\"candidate\":\"%s\",\"value\":\"%s\"}", r->owner, value);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

static int start_try(run *r)
{
    char body[512];
    r->asked_ms = next_wait(r->a->wait_ms, r->deadline_us, r->cap);
    if (r->a->cmd == CLI_ELECT ? campaign_body(r, body, sizeof body) < 0
                               : cli_acquire_body(r->a->ttl_ms, r->asked_ms, true, r->owner, body,
                                                  sizeof body) < 0)
        return -1;
    answer_reset(&r->ans);
    cli_lines_free(&r->lines);
    r->kind = 0;
    r->h = new_request("POST", r->path, body, NULL, 0, &r->hdrs, &r->ans);
    if (!r->h)
        return -1;
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    /* Only the connect and the wait are bounded: the stream itself lasts as
     * long as CMD, and a stalled one is caught by the validity timer. */
    r->sent_us = now_us();
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
                lose(r, "lost: the held stream %s", rc == CURLE_OK ? "ended" : "broke");
        } else if (r->phase != DONE) {
            say("the held stream ended before the lock was acquired");
            r->exit_code = CLI_EXIT_PROTOCOL;
            r->phase = DONE;
        }
        return;
    }
    if (rc != CURLE_OK) {
        if (!r->ans.errbuf[0])
            snprintf(r->ans.errbuf, sizeof r->ans.errbuf, "%s", curl_easy_strerror(rc));
        drop_request(r);
        r->exit_code = unreachable(&r->ans);
        r->phase = DONE;
        return;
    }
    drop_request(r);
    if (!r->ans.body)
        r->ans.body = calloc(1, 1);
    if (status == 201) {
        /* An ordinary grant: this service ignores "hold". Give it back. */
        char tok[300];
        if (json_str(r->ans.body, "token", tok, sizeof tok)) {
            answer rel = {0};
            call("DELETE", r->path, NULL, tok, RELEASE_TIMEOUT_MS, &rel);
            answer_reset(&rel);
        }
        say("the service at %s does not keep held streams (a redlockd older than this redlock?)",
            g_url);
        r->exit_code = CLI_EXIT_PROTOCOL;
        r->phase = DONE;
        return;
    }
    long long newcap;
    if (status == 400 && r->asked_ms > 0 && cli_wait_cap(r->ans.body, &newcap) && newcap < r->asked_ms) {
        r->cap = newcap;
        r->retry_at_us = now_us();
        return;
    }
    int code = cli_answer_exit(status, r->ans.body);
    if (code == CLI_EXIT_NOT_ACQUIRED && wait_left(r->a->wait_ms, r->deadline_us)) {
        long long d = 0;
        if ((long long)((now_us() - r->sent_us) / 1000) + 50 < r->asked_ms || r->asked_ms == 0)
            d = cli_retry_delay_ms(json_int(r->ans.body, "retry_after_ms"), random_unit());
        r->retry_at_us = now_us() + (uint64_t)d * 1000u;
        if (r->a->wait_ms != CLI_WAIT_FOREVER && r->retry_at_us > r->deadline_us)
            r->retry_at_us = r->deadline_us;
        return;
    }
    r->exit_code = refused(&r->ans);
    r->phase = DONE;
}

/* Descriptors redlock was started with, which CMD inherits as any child
 * would; every other one (libcurl's, such as its multi handle's wake-up
 * socket pair) is made close-on-exec before CMD starts. */
#define FDS_TRACKED 4096
static unsigned char fds_at_start[FDS_TRACKED / 8];

static void note_inherited_fds(void)
{
    for (int fd = 0; fd < FDS_TRACKED; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            fds_at_start[fd / 8] |= (unsigned char)(1u << (fd % 8));
}

static void close_own_fds_on_exec(void)
{
    for (int fd = 3; fd < FDS_TRACKED; fd++) {
        if (fds_at_start[fd / 8] & (1u << (fd % 8)))
            continue;
        int flags = fcntl(fd, F_GETFD);
        if (flags != -1 && !(flags & FD_CLOEXEC))
            fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
}

static bool own_var(const char *v)
{
    return !strncmp(v, "REDLOCK_NAME=", 13) || !strncmp(v, "REDLOCK_TOKEN=", 14) ||
           !strncmp(v, "REDLOCK_FENCE=", 14) || !strncmp(v, "REDLOCK_TERM=", 13);
}

/* CMD's environment: ours, with REDLOCK_NAME, REDLOCK_TOKEN, REDLOCK_FENCE
 * (and for elect REDLOCK_TERM, the same number). */
static char **child_env(const run *r)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 5, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!own_var(environ[i]))
            env[k++] = environ[i];
    char fence[32];
    snprintf(fence, sizeof fence, "%lld", r->fence);
    if (asprintf(&env[k++], "REDLOCK_NAME=%s", r->a->name) < 0 ||
        asprintf(&env[k++], "REDLOCK_TOKEN=%s", r->token) < 0 ||
        asprintf(&env[k++], "REDLOCK_FENCE=%s", fence) < 0 ||
        (r->a->cmd == CLI_ELECT && asprintf(&env[k++], "REDLOCK_TERM=%s", fence) < 0))
        return NULL;   /* a failed asprintf leaves its pointer undefined: exit follows */
    env[k] = NULL;
    return env;
}

/* Starts CMD in a process group of its own. Only async-signal-safe calls
 * between fork and exec (libcurl's resolver may have run a thread). */
static int spawn(run *r)
{
    char **env = child_env(r);
    if (!env) {
        say("out of memory");
        return -1;
    }
    close_own_fds_on_exec();
    pid_t parent = getpid();
    /* A terminal in the foreground goes to CMD, so that it can read it and
     * a Ctrl-C there reaches CMD's whole group directly. */
    r->tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
    /* Signals wait until the child has its own dispositions: our handlers
     * would write into our self-pipe. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        say("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        if (r->tty) {
            signal(SIGTTOU, SIG_IGN);
            tcsetpgrp(STDIN_FILENO, getpid());
            signal(SIGTTOU, SIG_DFL);
        }
        /* If redlock dies, the service releases the lock as the stream
         * closes: CMD must not go on. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(128 + SIGKILL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        execvpe(r->a->cmd_argv[0], r->a->cmd_argv, env);
        int e = errno;
        const char *msg = strerror(e);
        const char *parts[] = {"redlock: ", r->a->cmd_argv[0], ": ", msg, "\n"};
        for (size_t i = 0; i < 5; i++) {
            ssize_t w = write(STDERR_FILENO, parts[i], strlen(parts[i]));
            (void)w;
        }
        _exit(e == ENOENT ? 127 : 126);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    setpgid(pid, pid);   /* both sides, so neither races the other */
    if (r->tty)
        tcsetpgrp(STDIN_FILENO, pid);
    r->child = pid;
    for (size_t i = 0; env[i]; i++)
        if (own_var(env[i]))
            free(env[i]);
    free(env);
    return 0;
}

static void take_back_tty(run *r)
{
    if (!r->tty)
        return;
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    sigprocmask(SIG_BLOCK, &ttou, &old);
    tcsetpgrp(STDIN_FILENO, getpgrp());
    sigprocmask(SIG_SETMASK, &old, NULL);
    r->tty = false;
}

static void reap(run *r)
{
    if (r->child <= 0 || r->reaped)
        return;
    int st;
    pid_t p;
    while ((p = waitpid(r->child, &st, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (p == r->child) {
        r->reaped = true;
        r->status = st;
        take_back_tty(r);
    }
}

static bool group_alive(const run *r)
{
    return r->child > 0 && kill(-r->child, 0) == 0;
}

static int child_exit_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return CLI_EXIT_SOFTWARE;
}

/* CMD has exited while the lock was held: read what the stream already
 * said, then release (DELETE with the token) and close the stream. */
static void finish(run *r)
{
    int still;
    curl_multi_perform(r->multi, &still);   /* events already received */
    r->exit_code = child_exit_code(r->status);
    if (!r->lost) {
        r->releasing = true;
        answer rel = {0};
        if (call("DELETE", r->path, NULL, r->token, RELEASE_TIMEOUT_MS, &rel) < 0)
            say("release: unreachable (%s); closing the held stream releases the lock", rel.errbuf);
        else if (rel.status == 409 && cli_answer_exit(rel.status, rel.body) == CLI_EXIT_NOT_HELD) {
            char line[600];
            cli_format_error(rel.status, rel.body, line, sizeof line);
            lose(r, "lost: the lock was no longer held when the command exited: %s", line);
        } else if (rel.status != 204) {
            char line[600];
            cli_format_error(rel.status, rel.body, line, sizeof line);
            say("release: %s; closing the held stream releases the lock", line);
        }
        answer_reset(&rel);
    }
    if (r->lost) {
        say("%s", r->why);
        r->exit_code = CLI_EXIT_LOST;
    }
    drop_request(r);
    r->phase = DONE;
}

static void on_signals(run *r)
{
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(sig_pipe[0], sigs, sizeof sigs)) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            int sig = sigs[i];
            if (sig == SIGCHLD) {
                reap(r);
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

static int setup_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
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

static void default_owner(char *out, size_t outlen)
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
    default_owner(out, outlen);
    for (char *p = out; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            *p = '-';
    size_t len = strlen(out);
    if (len > CLI_CANDIDATE_MAX)
        memmove(out, out + len - CLI_CANDIDATE_MAX, CLI_CANDIDATE_MAX + 1);   /* keep the PID */
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
        return on_body(p, size, n, &w->ans);
    return cli_lines_feed(&w->lines, p, size * n, on_watch_line, NULL) < 0 ? 0 : size * n;
}

/* Prints the election's changes until the stream ends (the service
 * stopped or cannot be reached: 69) or a signal ends redlock. */
static int cmd_observe(const cli_args *a)
{
    char path[300], seg[220];
    if (rules_name_path(a->name, seg, sizeof seg) < 0)
        return CLI_EXIT_USAGE;
    snprintf(path, sizeof path, "/elections/%s?watch=true", seg);
    watch w;
    memset(&w, 0, sizeof w);
    struct curl_slist *hdrs = NULL;
    w.h = new_request("GET", path, NULL, NULL, 0, &hdrs, &w.ans);
    if (!w.h) {
        say("out of memory");
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
        code = refused(&w.ans);
    } else if (rc != CURLE_OK && !w.kind) {
        if (!w.ans.errbuf[0])
            snprintf(w.ans.errbuf, sizeof w.ans.errbuf, "%s", curl_easy_strerror(rc));
        code = unreachable(&w.ans);
    } else {
        say("the watch ended: %s", rc == CURLE_OK ? "the service closed it" : curl_easy_strerror(rc));
    }
    cli_lines_free(&w.lines);
    answer_reset(&w.ans);
    return code;
}

static long until_ms(uint64_t t, uint64_t now, long cap);

/* ---- run --limit: a semaphore's permit ---- */

/* Takes one permit of the semaphore a->name of a->limit within --wait:
 * 0 with *r's token, fence and validity, else the exit code. */
static int permit_take(const cli_args *a, run *r)
{
    char body[600], owner[RULES_OWNER_MAX + 40] = "";
    uint64_t deadline = a->wait_ms > 0 ? now_us() + (uint64_t)a->wait_ms * 1000u : 0;
    answer ans = {0};
    if (r->owner[0])
        snprintf(owner, sizeof owner, ",\"owner\":\"%s\"", r->owner);   /* printable, no quotes */
    for (;;) {
        long long w = next_wait(a->wait_ms, deadline, CLI_SERVER_MAX_WAIT_MS);
        int n = a->ttl_ms >= 0 ? snprintf(body, sizeof body, "{\"limit\":%d,\"wait_ms\":%lld,\"ttl_ms\":%lld%s}",
                                          a->limit, w, a->ttl_ms, owner)
                               : snprintf(body, sizeof body, "{\"limit\":%d,\"wait_ms\":%lld%s}", a->limit, w,
                                          owner);
        if (n < 0 || (size_t)n >= sizeof body)
            return CLI_EXIT_SOFTWARE;
        uint64_t t0 = now_us();
        if (call("POST", r->path, body, NULL, (long)w + CALL_TIMEOUT_MS, &ans) < 0) {
            int code = unreachable(&ans);
            answer_reset(&ans);
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
            answer_reset(&ans);
            if (!ok) {
                say("the service granted a permit but sent no token");
                return CLI_EXIT_PROTOCOL;
            }
            return 0;
        }
        int code = cli_answer_exit(ans.status, ans.body);
        if (code == CLI_EXIT_NOT_ACQUIRED && wait_left(a->wait_ms, deadline)) {
            if ((long long)((now_us() - t0) / 1000) + 50 < w || w == 0)
                back_off(&ans, a->wait_ms, deadline);
            continue;
        }
        code = refused(&ans);
        answer_reset(&ans);
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
    uint64_t t0 = now_us();
    long budget = first ? CALL_TIMEOUT_MS : (long)((r->valid_until_us > t0 ? r->valid_until_us - t0 : 0) / 1000);
    bool ok = false;
    if (budget > 0 && call("PATCH", r->path, body, r->token, budget, &ans) == 0 && ans.status == 200) {
        long long v = json_int(ans.body, "validity_ms");
        r->valid_until_us = t0 + (uint64_t)(v > 0 ? v : 0) * 1000u;
        ok = v > 0;
    } else if (ans.status == 409) {
        char line[600];
        cli_format_error(ans.status, ans.body, line, sizeof line);
        lose(r, "lost: the permit is no longer held: %s", line);
    }
    answer_reset(&ans);
    return ok;
}

/* run --limit: CMD with one permit of a semaphore, renewed by redlock. */
static int cmd_run_permit(const cli_args *a)
{
    run r;
    memset(&r, 0, sizeof r);
    r.a = a;
    char seg[220];
    rules_name_path(a->name, seg, sizeof seg);
    snprintf(r.path, sizeof r.path, "/semaphores/%s", seg);
    if (a->owner)
        snprintf(r.owner, sizeof r.owner, "%s", a->owner);
    else
        default_owner(r.owner, sizeof r.owner);
    for (char *p = r.owner; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = '_';
    note_inherited_fds();
    if (setup_signals() < 0) {
        say("cannot start: %s", strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    int code = permit_take(a, &r);
    if (code)
        return code;
    /* The answer's validity counts from when the acquire was sent, long ago
     * after a wait: a renewal first, whose validity counts from now. */
    if (!permit_renew(a, &r, true)) {
        say("%s", r.lost ? r.why : "lost: the permit could not be renewed after the wait");
        return CLI_EXIT_LOST;
    }
    long long ttl = a->ttl_ms >= 0 ? a->ttl_ms : (long long)((r.valid_until_us - now_us()) / 1000);
    uint64_t next_renew = now_us() + (uint64_t)(ttl / 3) * 1000u;
    if (spawn(&r) < 0)
        return CLI_EXIT_SOFTWARE;
    for (;;) {
        uint64_t now = now_us();
        if (!r.lost && now >= r.valid_until_us)
            lose(&r, "lost: the permit's validity ran out before a renewal succeeded");
        if (!r.lost && now >= next_renew) {
            if (permit_renew(a, &r, false))
                next_renew = now_us() + (uint64_t)(ttl / 3) * 1000u;
            else
                next_renew = now_us() + 200000u;   /* again soon, while validity lasts */
        }
        if (r.lost && !r.term_sent) {
            char grace[32];
            cli_format_ms(a->grace_ms, grace, sizeof grace);
            say("%s; stopping the command (SIGTERM, SIGKILL after %s)", r.why, grace);
            kill(-r.child, SIGTERM);
            r.term_sent = true;
            r.kill_at_us = now + (uint64_t)a->grace_ms * 1000u;
        }
        if (r.term_sent && !r.kill_sent && now >= r.kill_at_us) {
            kill(-r.child, SIGKILL);
            r.kill_sent = true;
        }
        if (r.reaped && (!r.lost || r.kill_sent || !group_alive(&r)))
            break;
        long timeout = r.lost ? 50 : until_ms(next_renew < r.valid_until_us ? next_renew : r.valid_until_us,
                                              now_us(), 1000);
        struct pollfd pfd = {sig_pipe[0], POLLIN, 0};
        poll(&pfd, 1, (int)timeout);
        on_signals(&r);
    }
    if (r.lost)
        return CLI_EXIT_LOST;
    code = child_exit_code(r.status);
    answer rel = {0};
    if (call("DELETE", r.path, NULL, r.token, RELEASE_TIMEOUT_MS, &rel) < 0)
        say("release: unreachable (%s); the permit expires with its ttl", rel.errbuf);
    else if (rel.status == 409) {
        say("lost: the permit was no longer held when the command exited");
        code = CLI_EXIT_LOST;
    }
    answer_reset(&rel);
    return code;
}

/* Milliseconds until t (0 if past), at most cap. */
static long until_ms(uint64_t t, uint64_t now, long cap)
{
    if (t <= now)
        return 0;
    uint64_t ms = (t - now + 999) / 1000;
    return ms < (uint64_t)cap ? (long)ms : cap;
}

static int cmd_run(const cli_args *a)
{
    run r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.phase = ACQUIRING;
    r.cap = CLI_SERVER_MAX_WAIT_MS;
    r.fence = -1;
    lock_path(a->name, r.path, sizeof r.path);
    if (a->owner)
        snprintf(r.owner, sizeof r.owner, "%s", a->owner);
    else
        default_owner(r.owner, sizeof r.owner);
    if (a->cmd == CLI_ELECT) {
        /* The owner slot carries the candidate: a campaign waits forever. */
        char seg[220];
        rules_name_path(a->name, seg, sizeof seg);   /* valid: cli_parse_args checked it */
        snprintf(r.path, sizeof r.path, "/elections/%s", seg);
        if (a->candidate)
            snprintf(r.owner, sizeof r.owner, "%s", a->candidate);
        else
            default_candidate(r.owner, sizeof r.owner);
    }
    if (a->wait_ms > 0)
        r.deadline_us = now_us() + (uint64_t)a->wait_ms * 1000u;
    note_inherited_fds();
    if (setup_signals() < 0 || !(r.multi = curl_multi_init()) || start_try(&r) < 0) {
        say("cannot start: %s", strerror(errno));
        return CLI_EXIT_SOFTWARE;
    }
    while (r.phase != DONE) {
        uint64_t now = now_us();
        long timeout = 1000;
        if (r.phase == ACQUIRING && !r.h && r.retry_at_us) {
            if (now >= r.retry_at_us) {
                r.retry_at_us = 0;
                if (start_try(&r) < 0) {
                    say("out of memory");
                    r.exit_code = CLI_EXIT_SOFTWARE;
                    break;
                }
            } else {
                timeout = until_ms(r.retry_at_us, now, timeout);
            }
        }
        if (r.h && !r.acquired && !(a->cmd == CLI_ELECT && r.kind == 1)) {
            /* (a campaign's stream, once it began, waits for as long as it takes) */
            /* The answer (and with a held stream, its first event) is due
             * by the end of the wait asked for, give or take a call's time. */
            uint64_t due = r.sent_us + (uint64_t)(r.asked_ms + CALL_TIMEOUT_MS) * 1000u;
            if (now >= due) {
                say("unreachable: %s: no answer within %lld ms", g_url, r.asked_ms + CALL_TIMEOUT_MS);
                r.exit_code = CLI_EXIT_UNAVAILABLE;
                break;
            }
            timeout = until_ms(due, now, timeout);
        }
        if (r.acquired && !r.child && !r.lost) {
            if (spawn(&r) < 0) {
                r.exit_code = CLI_EXIT_SOFTWARE;
                break;
            }
            r.phase = HOLDING;
        }
        if (r.acquired && !r.lost && now >= r.valid_until_us)
            lose(&r, "lost: no renewal came before the lock's validity ran out (the held stream stalled?)");
        if (r.acquired && !r.lost)
            timeout = until_ms(r.valid_until_us, now, timeout);
        if (r.lost && !r.child) {
            say("%s", r.why);   /* before CMD started */
            r.exit_code = CLI_EXIT_LOST;
            break;
        }
        if (r.lost && !r.term_sent) {
            /* Kill even after CMD itself exited: what it started must stop too. */
            char grace[32];
            cli_format_ms(a->grace_ms, grace, sizeof grace);
            say("%s; stopping the command (SIGTERM, SIGKILL after %s)", r.why, grace);
            kill(-r.child, SIGTERM);
            r.term_sent = true;
            r.kill_at_us = now + (uint64_t)a->grace_ms * 1000u;
        }
        if (r.term_sent && !r.kill_sent) {
            if (now >= r.kill_at_us) {
                kill(-r.child, SIGKILL);
                r.kill_sent = true;
            } else {
                timeout = until_ms(r.kill_at_us, now, timeout);
            }
        }
        if (r.reaped) {
            if (!r.lost) {
                finish(&r);
                break;
            }
            if (r.kill_sent || !group_alive(&r)) {
                r.exit_code = CLI_EXIT_LOST;
                break;
            }
            if (timeout > 50)
                timeout = 50;   /* CMD's leader is gone; watch the rest of its group */
        }
        struct curl_waitfd extra = {.fd = sig_pipe[0], .events = CURL_WAIT_POLLIN};
        if (curl_multi_poll(r.multi, &extra, 1, (int)timeout, NULL) != CURLM_OK) {
            say("curl_multi_poll failed");
            r.exit_code = CLI_EXIT_SOFTWARE;
            break;
        }
        on_signals(&r);
        if (r.phase == DONE)
            break;
        int still;
        curl_multi_perform(r.multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(r.multi, &left)))
            if (m->msg == CURLMSG_DONE && m->easy_handle == r.h)
                on_done(&r, m->data.result);
    }
    /* Whatever way out: the stream closes, and with it the lock. */
    drop_request(&r);
    if (r.child > 0 && !r.reaped && r.phase != DONE) {
        /* An internal failure while CMD runs: it must not run unlocked. */
        kill(-r.child, SIGKILL);
        waitpid(r.child, NULL, 0);
        take_back_tty(&r);
    }
    curl_multi_cleanup(r.multi);
    answer_reset(&r.ans);
    cli_lines_free(&r.lines);
    return r.exit_code;
}

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
    if (set_url(a.url) < 0 || set_auth(a.auth_token_file) < 0)
        return CLI_EXIT_USAGE;
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        say("curl_global_init failed");
        return CLI_EXIT_SOFTWARE;
    }
    int code;
    switch (a.cmd) {
    case CLI_RUN: code = a.limit ? cmd_run_permit(&a) : cmd_run(&a); break;
    case CLI_ELECT: code = a.observe ? cmd_observe(&a) : cmd_run(&a); break;
    case CLI_ACQUIRE: code = cmd_acquire(&a); break;
    case CLI_EXTEND: code = cmd_extend(&a); break;
    case CLI_RELEASE: code = cmd_release(&a); break;
    case CLI_STATUS: code = cmd_status(&a); break;
    case CLI_READY: code = cmd_ready(&a); break;
    default: code = CLI_EXIT_USAGE; break;
    }
    curl_global_cleanup();
    return code;
}
