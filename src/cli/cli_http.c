/* cli_http.c - the service: its address (http, https or a Unix socket),
 * TLS files and token, one HTTP call and its answer, waiting between tries
 * (cli_int.h). */
#include "cli_int.h"

cli_service cli_svc;          /* the service: set once by cli_set_service */
char cli_auth_header[600];    /* "Authorization: Bearer ..." or "" */

void cli_say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "redlock: %s\n", line);
}

uint64_t cli_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void cli_sleep_ms(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

double cli_random_unit(void)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)(cli_now_us() ^ ((uint64_t)getpid() << 16));
    return (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
}

/* ---- configuration from flags and the environment ---- */

/* Can file be read? Says why not. */
static int readable(const char *file, const char *from)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        cli_say("%s %s: cannot open: %s", from, file, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

int cli_set_service(const cli_args *a)
{
    cli_service_in flags = {a->url, a->cacert, a->cert, a->key};
    cli_service_in env = {getenv("REDLOCK_URL"), getenv("REDLOCK_CACERT"), getenv("REDLOCK_CERT"),
                          getenv("REDLOCK_KEY")};
    char err[512];
    if (cli_service_resolve(&flags, &env, &cli_svc, err, sizeof err) < 0) {
        cli_say("%s", err);
        return -1;
    }
    if ((cli_svc.cacert && readable(cli_svc.cacert, cli_svc.cacert_from) < 0) ||
        (cli_svc.cert && readable(cli_svc.cert, cli_svc.cert_from) < 0) ||
        (cli_svc.key && readable(cli_svc.key, cli_svc.key_from) < 0))
        return -1;
    return 0;
}

/* The bearer token every call sends: from file (its first word; flag
 * names it) or env_value, the environment variable env_name's (NULL: none).
 * Returns 1 with cli_auth_header set, 0 when neither gives one, -1 on an
 * error (said). */
static int set_bearer(const char *file, const char *flag, const char *env_name, const char *env_value)
{
    char tok[512] = "";
    if (file) {
        FILE *f = fopen(file, "r");
        if (!f) {
            cli_say("%s: cannot open %s: %s", flag, file, strerror(errno));
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
            cli_say("%s: %s holds no token", flag, file);
            return -1;
        }
    } else {
        if (!env_value || !*env_value)
            return 0;
        snprintf(tok, sizeof tok, "%s", env_value);
        for (char *p = tok; *p; p++)
            if (*p <= 0x20 || *p >= 0x7f) {
                cli_say("%s must be one word of printable ASCII", env_name);
                return -1;
            }
    }
    snprintf(cli_auth_header, sizeof cli_auth_header, "Authorization: Bearer %s", tok);
    return 1;
}

int cli_set_auth(const char *file)
{
    const char *auth_env = getenv("REDLOCK_AUTH_TOKEN"), *token_env = getenv("REDLOCK_TOKEN");
    switch (cli_token_source(file, auth_env, token_env)) {
    case CLI_TOKEN_FILE: return set_bearer(file, "--auth-token-file", NULL, NULL) < 0 ? -1 : 0;
    case CLI_TOKEN_AUTH_ENV: return set_bearer(NULL, NULL, "REDLOCK_AUTH_TOKEN", auth_env) < 0 ? -1 : 0;
    case CLI_TOKEN_ENV: return set_bearer(NULL, NULL, "REDLOCK_TOKEN", token_env) < 0 ? -1 : 0;
    default: return 0;
    }
}

int cli_set_admin_auth(const char *file)
{
    int rc = set_bearer(file, "--admin-token-file", "REDLOCK_ADMIN_TOKEN", getenv("REDLOCK_ADMIN_TOKEN"));
    if (rc == 0)
        cli_say("release --force needs the admin token: REDLOCK_ADMIN_TOKEN or --admin-token-file F");
    return rc == 1 ? 0 : -1;
}

void cli_answer_reset(answer *a)
{
    free(a->body);
    memset(a, 0, sizeof *a);
}

size_t cli_on_body(char *p, size_t size, size_t n, void *arg)
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
CURL *cli_new_request(const char *method, const char *path, const char *body,
                      const char *lock_token, long timeout_ms, struct curl_slist **hdrs,
                      answer *a)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    char url[sizeof cli_svc.base + CLI_PATH_MAX + CLI_CURSOR_MAX + 16], line[400];
    snprintf(url, sizeof url, "%s%s", cli_svc.base, path);
    struct curl_slist *l = curl_slist_append(NULL, "Expect:");
    if (l && body)
        l = curl_slist_append(l, "Content-Type: application/json");
    if (l && cli_auth_header[0])
        l = curl_slist_append(l, cli_auth_header);
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
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cli_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, a->errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    if (timeout_ms > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (cli_svc.scheme == CLI_SCHEME_UNIX) {
        /* The URL is CLI_UNIX_BASE: Host: localhost, which redlockd takes. */
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, cli_svc.socket_path);
    } else {
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
    }
    /* https: the peer and its name are always verified (libcurl's
     * default), against --cacert's CAs when given. */
    if (cli_svc.cacert)
        curl_easy_setopt(h, CURLOPT_CAINFO, cli_svc.cacert);
    if (cli_svc.cert)
        curl_easy_setopt(h, CURLOPT_SSLCERT, cli_svc.cert);
    if (cli_svc.key)
        curl_easy_setopt(h, CURLOPT_SSLKEY, cli_svc.key);
    return h;
}

/* One call, to its end. Returns 0 with a->status set, or -1 when no answer
 * came (a->errbuf says why). */
int cli_call(const char *method, const char *path, const char *body, const char *lock_token,
             long timeout_ms, answer *a)
{
    cli_answer_reset(a);
    struct curl_slist *hdrs = NULL;
    CURL *h = cli_new_request(method, path, body, lock_token, timeout_ms, &hdrs, a);
    if (!h) {
        snprintf(a->errbuf, sizeof a->errbuf, "out of memory");
        return -1;
    }
    CURLcode rc = curl_easy_perform(h);
    a->rc = rc;
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

int cli_unreachable(const answer *a)
{
    const char *why = a->errbuf[0] ? a->errbuf : a->rc ? curl_easy_strerror(a->rc) : "no answer";
    /* Our own files, not the service: a usage error. */
    if (a->rc == CURLE_SSL_CACERT_BADFILE) {
        cli_say("%s%s%s: %s", cli_svc.cacert ? cli_svc.cacert_from : "the system's CA certificates",
                cli_svc.cacert ? " " : "", cli_svc.cacert ? cli_svc.cacert : "", why);
        return CLI_EXIT_USAGE;
    }
    if (a->rc == CURLE_SSL_CERTPROBLEM) {
        cli_say("%s %s%s%s%s%s: %s", cli_svc.cert_from ? cli_svc.cert_from : "--cert",
                cli_svc.cert ? cli_svc.cert : "", cli_svc.key ? ", " : "", cli_svc.key ? cli_svc.key_from : "",
                cli_svc.key ? " " : "", cli_svc.key ? cli_svc.key : "", why);
        return CLI_EXIT_USAGE;
    }
    char sock[200];
    if (cli_svc.scheme == CLI_SCHEME_UNIX && a->rc == CURLE_COULDNT_CONNECT) {
        /* libcurl names localhost port 80 here: say what is wrong with the socket */
        struct stat st;
        snprintf(sock, sizeof sock, "cannot connect to the socket: %s",
                 stat(cli_svc.socket_path, &st) < 0 ? strerror(errno)
                 : !S_ISSOCK(st.st_mode)            ? "not a socket"
                 : access(cli_svc.socket_path, W_OK) < 0 ? strerror(errno)
                                                    : "nothing accepts connections on it");
        why = sock;
    }
    /* A TLS failure is unreachable too, whoever refused whom: an alert
     * against our certificate can also arrive as a reset connection. */
    const char *refused_us = cli_svc.cert ? "the service refused this client's certificate: "
                                          : "the service wants a client certificate (--cert, --key): ";
    cli_say("unreachable: %s: %s%s%s", cli_svc.shown, cli_tls_refused_client(why) ? refused_us : "", why,
            a->rc == CURLE_PEER_FAILED_VERIFICATION
                ? " (--cacert or REDLOCK_CACERT names the CA the service's certificate must chain to)"
                : "");
    return CLI_EXIT_UNAVAILABLE;
}

/* Reports an answer the command does not want; returns its exit code. */
int cli_refused(const answer *a)
{
    char line[600];
    cli_format_error(a->status, a->body, line, sizeof line);
    cli_say("%s", line);
    return cli_answer_exit(a->status, a->body);
}

/* "/locks/NAME" for a name cli_parse_args accepted (so it fits and is valid). */
void cli_lock_path(const char *name, char *out, size_t outlen)
{
    char seg[RULES_NAME_PATH_MAX];
    if (rules_name_path(name, seg, sizeof seg) < 0)
        seg[0] = '\0';
    snprintf(out, outlen, "/locks/%s", seg);
}

/* A string field of a JSON answer, copied into out; NULL when absent. */
const char *cli_json_str(const char *body, const char *field, char *out, size_t outlen)
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
long long cli_json_int(const char *body, const char *field)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL;
    long long got = cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
    cJSON_Delete(o);
    return got;
}

/* ---- waiting between tries (acquire, run --limit) ---- */

/* The wait_ms of the next try: what is left of --wait, at most what the
 * service allows one call (learnt from a 400 naming its largest). */
long long cli_next_wait(long long wait_ms, uint64_t deadline_us, long long cap)
{
    if (wait_ms == CLI_WAIT_FOREVER)
        return cap;
    uint64_t now = cli_now_us();
    long long left = deadline_us > now ? (long long)((deadline_us - now) / 1000) : 0;
    return left < cap ? left : cap;
}

bool cli_wait_left(long long wait_ms, uint64_t deadline_us)
{
    return wait_ms == CLI_WAIT_FOREVER || cli_now_us() + 1000 < deadline_us;
}

/* After a refusal that came sooner than the wait asked for: sleeps a short
 * random time within what is left of the wait. */
void cli_back_off(const answer *a, long long wait_ms, uint64_t deadline_us)
{
    long long d = cli_retry_delay_ms(cli_json_int(a->body, "retry_after_ms"), cli_random_unit());
    if (wait_ms != CLI_WAIT_FOREVER) {
        uint64_t now = cli_now_us();
        long long left = deadline_us > now ? (long long)((deadline_us - now) / 1000) : 0;
        if (d > left)
            d = left;
    }
    cli_sleep_ms(d);
}

uint64_t cli_ride_out(const answer *a, int attempt, long long wait_ms, uint64_t deadline_us)
{
    char line[600];
    cli_format_error(a->status, a->body, line, sizeof line);
    long long d = cli_transient_delay_ms(attempt, cli_random_unit());
    uint64_t now = cli_now_us(), at = now + (uint64_t)d * 1000u;
    if (wait_ms != CLI_WAIT_FOREVER && at > deadline_us)
        at = deadline_us;
    if (wait_ms == CLI_WAIT_FOREVER)
        cli_say("%s; retrying (attempt %d, waiting forever)", line, attempt);
    else
        cli_say("%s; retrying (attempt %d, %.1fs of the wait left)", line, attempt,
                deadline_us > now ? (double)(deadline_us - now) / 1e6 : 0.0);
    return at;
}
