/* harness_client.c - see harness.h: the clients tests talk through (HTTP,
 * held streams, raw sockets, Redis, /metrics). */
#include "harness.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

redisReply *h_redis(h_cluster *c, int i, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", c->m[i].port, tv);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

struct sink {
    char *buf;
    size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t add = size * n;
    s->buf = realloc(s->buf, s->len + add + 1);
    memcpy(s->buf + s->len, p, add);
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

static void grab_header(const char *line, size_t len, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    if (len > nl + 1 && !strncasecmp(line, name, nl) && line[nl] == ':') {
        const char *v = line + nl + 1;
        while (*v == ' ')
            v++;
        size_t vl = len - (size_t)(v - line);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
            vl--;
        if (vl >= outlen)
            vl = outlen - 1;
        memcpy(out, v, vl);
        out[vl] = '\0';
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    h_resp *r = arg;
    size_t len = size * n;
    grab_header(p, len, "Retry-After", r->retry_after, sizeof r->retry_after);
    grab_header(p, len, "Allow", r->allow, sizeof r->allow);
    grab_header(p, len, "Content-Type", r->content_type, sizeof r->content_type);
    return len;
}

h_resp h_http(h_cluster *c, const char *method, const char *path, const char *body, ...)
{
    h_resp r;
    memset(&r, 0, sizeof r);
    CURL *h = curl_easy_init();
    char url[2048];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    struct sink s = {NULL, 0};
    struct curl_slist *hdrs = NULL;
    va_list ap;
    va_start(ap, body);
    const char *line;
    while ((line = va_arg(ap, const char *)))
        hdrs = curl_slist_append(hdrs, line);
    va_end(ap);
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (c->cacert)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cacert);
    if (c->cert) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key);
    }
    uint64_t t0 = h_now_us();
    CURLcode rc = curl_easy_perform(h);
    r.seconds = (double)(h_now_us() - t0) / 1e6;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    else
        r.status = -1;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    r.body = s.buf ? s.buf : strdup("");
    r.json = cJSON_Parse(r.body);
    return r;
}

void h_resp_free(h_resp *r)
{
    free(r->body);
    cJSON_Delete(r->json);
    r->body = NULL;
    r->json = NULL;
}

const char *h_str(const h_resp *r, const char *field)
{
    const cJSON *v = r->json ? cJSON_GetObjectItemCaseSensitive(r->json, field) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

long long h_int(const h_resp *r, const char *field)
{
    const cJSON *v = r->json ? cJSON_GetObjectItemCaseSensitive(r->json, field) : NULL;
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -999999;
}

bool h_has(const h_resp *r, const char *field)
{
    return r->json && cJSON_GetObjectItemCaseSensitive(r->json, field) != NULL;
}

bool h_eventually(bool (*pred)(void *arg), void *arg, int ms)
{
    uint64_t until = h_now_us() + (uint64_t)ms * 1000ULL;
    for (;;) {
        if (pred(arg))
            return true;
        if (h_now_us() >= until)
            return false;
        usleep(10000);
    }
}

struct status_want {
    h_cluster *c;
    const char *path;
    long want;
};

static bool status_is(void *arg)
{
    struct status_want *w = arg;
    h_resp r = h_http(w->c, "GET", w->path, NULL, NULL);
    long got = r.status;
    h_resp_free(&r);
    return got == w->want;
}

bool h_wait_status(h_cluster *c, const char *path, long want, int timeout_ms)
{
    struct status_want w = {c, path, want};
    return h_eventually(status_is, &w, timeout_ms);
}

struct key_want {
    h_cluster *c;
    int i;
    const char *key;
};

static bool key_is_set(void *arg)
{
    const struct key_want *k = arg;
    redisReply *v = h_redis(k->c, k->i, "GET %s", k->key);
    bool set = v && v->type == REDIS_REPLY_STRING;
    freeReplyObject(v);
    return set;
}

bool h_wait_key(h_cluster *c, int i, const char *key, int ms)
{
    struct key_want k = {c, i, key};
    return h_eventually(key_is_set, &k, ms);
}

struct voting_want {
    h_cluster *c;
    int n;
};

static bool voting_is(void *arg)
{
    struct voting_want *w = arg;
    h_resp r = h_http(w->c, "GET", "/readyz", NULL, NULL);
    bool yes = h_int(&r, "masters_voting") == w->n;
    h_resp_free(&r);
    return yes;
}

bool h_wait_voting(h_cluster *c, int n, int ms)
{
    struct voting_want w = {c, n};
    return h_eventually(voting_is, &w, ms);
}

/* ---- held streams ---- */

/* Reads more bytes into s->buf, waiting until until_us. 1 read, 0 timeout,
 * -1 end or error. */
static int stream_fill(h_stream *s, uint64_t until_us)
{
    uint64_t now = h_now_us();
    if (now >= until_us)
        return 0;
    struct pollfd p = {s->fd, POLLIN, 0};
    int r = poll(&p, 1, (int)((until_us - now + 999) / 1000));
    if (r == 0)
        return 0;
    if (s->cap - s->len < 4096) {
        s->cap = s->cap * 2 + 8192;
        s->buf = realloc(s->buf, s->cap);
    }
    ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len - 1);
    if (n <= 0)
        return -1;
    s->len += (size_t)n;
    s->buf[s->len] = '\0';
    return 1;
}

static void stream_consume(h_stream *s, size_t n)
{
    memmove(s->buf, s->buf + n, s->len - n);
    s->len -= n;
    s->buf[s->len] = '\0';
}

h_stream *h_stream_open(h_cluster *c, const char *path, const char *body, int timeout_ms)
{
    return h_stream_open_at(c->http_port, path, body, timeout_ms);
}

static h_stream *stream_open(int port, const char *method, const char *path, const char *body,
                             int timeout_ms);

h_stream *h_stream_open_at(int port, const char *path, const char *body, int timeout_ms)
{
    return stream_open(port, "POST", path, body, timeout_ms);
}

h_stream *h_stream_get(h_cluster *c, const char *path, int timeout_ms)
{
    return stream_open(c->http_port, "GET", path, "", timeout_ms);
}

static h_stream *stream_open(int port, const char *method, const char *path, const char *body,
                             int timeout_ms)
{
    /* Close-on-exec: a master restarted meanwhile (a fork and exec) must not
     * keep the stream open after the test closes it. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", method, path, strlen(body), body);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    h_stream *s = calloc(1, sizeof *s);
    s->fd = fd;
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    char *end;
    while (!(s->buf && (end = strstr(s->buf, "\r\n\r\n")))) {
        if (stream_fill(s, until) <= 0) {
            h_stream_close(s);
            return NULL;
        }
    }
    *end = '\0';
    sscanf(s->buf, "HTTP/1.%*d %ld", &s->status);
    long long length = -1;
    for (char *line = strstr(s->buf, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        char *v = line + 2;
        if (!strncasecmp(v, "Content-Type:", 13))
            sscanf(v + 13, " %127[^\r]", s->content_type);
        else if (!strncasecmp(v, "Transfer-Encoding:", 18) && strstr(v, "chunked"))
            s->chunked = true;
        else if (!strncasecmp(v, "Content-Length:", 15))
            length = atoll(v + 15);
    }
    stream_consume(s, (size_t)(end + 4 - s->buf));
    if (!s->chunked) {
        /* An ordinary answer: read its body whole. */
        while (length >= 0 && (long long)s->len < length && stream_fill(s, until) > 0)
            ;
        s->body = strndup(s->buf ? s->buf : "", s->len);
        s->eof = true;
    }
    return s;
}

int h_stream_event(h_stream *s, int timeout_ms, cJSON **ev, uint64_t *recv_us)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    /* Chunks are decoded in place: their payload bytes are collected in
     * s->line until a newline ends an event. */
    char *line = s->line;
    size_t llen = s->llen;
    for (;;) {
        char *nl = memchr(line, '\n', llen);
        if (nl) {
            *nl = '\0';
            *ev = cJSON_Parse(line);
            size_t used = (size_t)(nl - line) + 1;
            memmove(line, line + used, llen - used);
            llen -= used;
            s->llen = llen;
            *recv_us = h_now_us();
            return *ev ? 1 : -1;
        }
        if (s->eof)
            return -1;
        if (s->chunk_left == 0) {
            char *crlf = s->buf ? strstr(s->buf, "\r\n") : NULL;
            if (crlf == s->buf && s->len >= 2) {   /* the CRLF after a chunk */
                stream_consume(s, 2);
                continue;
            }
            if (!crlf) {
                int r = stream_fill(s, until);
                if (r <= 0)
                    return r;
                continue;
            }
            size_t size = strtoul(s->buf, NULL, 16);
            stream_consume(s, (size_t)(crlf + 2 - s->buf));
            if (size == 0) {
                s->eof = true;
                continue;
            }
            s->chunk_left = size;
        }
        if (s->len == 0) {
            int r = stream_fill(s, until);
            if (r <= 0)
                return r;
            continue;
        }
        size_t k = s->len < s->chunk_left ? s->len : s->chunk_left;
        if (k > sizeof s->line - llen)
            return -1;
        memcpy(line + llen, s->buf, k);
        llen += k;
        s->llen = llen;
        s->chunk_left -= k;
        stream_consume(s, k);
    }
}

void h_stream_close(h_stream *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s->buf);
    free(s->body);
    free(s);
}

void h_client_setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

const char *h_ev_str(const cJSON *ev, const char *f)
{
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(ev, f));
    return v ? v : "";
}

long long h_ev_int(const cJSON *ev, const char *f)
{
    const cJSON *v = cJSON_GetObjectItem(ev, f);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
}

long h_acquire_status(h_cluster *c, const char *name, const char *body)
{
    char path[256];
    snprintf(path, sizeof path, "/locks/%s", name);
    h_resp r = h_http(c, "POST", path, body, NULL);
    long st = r.status;
    h_resp_free(&r);
    return st;
}

int h_raw_connect(h_cluster *c, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        h_die("socket");
    if (src) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &sa.sin_addr);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
            h_die(src);
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->http_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0)
        h_die("connect");
    return fd;
}

void h_raw_send(int fd, const char *s)
{
    size_t len = strlen(s);
    if (write(fd, s, len) != (ssize_t)len)
        h_die("write");
}

size_t h_raw_read_all(int fd, char *buf, size_t cap, int timeout_ms, bool *closed)
{
    size_t n = 0;
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    *closed = false;
    while (h_now_us() < until && n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((until - h_now_us()) / 1000);
        if (poll(&p, 1, left > 0 ? left : 0) <= 0)
            break;
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0) {
            *closed = true;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

int h_raw_post(h_cluster *c, const char *path, const char *body)
{
    int fd = h_raw_connect(c, NULL);
    char req[1024];
    snprintf(req, sizeof req,
             "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", path, strlen(body), body);
    h_raw_send(fd, req);
    return fd;
}

int h_raw_acquire(h_cluster *c, const char *name, const char *body)
{
    char path[300];
    snprintf(path, sizeof path, "/locks/%s", name);
    return h_raw_post(c, path, body);
}

void h_raw_reset(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

int h_keys_left(h_cluster *c, const char *name)
{
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        redisReply *r = h_redis(c, i, "EXISTS lock:%s", name);
        n += r ? (int)r->integer : 0;
        freeReplyObject(r);
    }
    return n;
}

static long long cmdstat_calls(h_cluster *c, int i, const char *cmd)
{
    redisReply *x = h_redis(c, i, "INFO commandstats");
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *at = x && x->str ? strstr(x->str, key) : NULL;
    long long v = at ? atoll(at + strlen(key)) : 0;
    freeReplyObject(x);
    return v;
}

long long h_script_calls(h_cluster *c, int i)
{
    return cmdstat_calls(c, i, "evalsha") + cmdstat_calls(c, i, "eval");
}

long long h_metric(h_cluster *c, const char *family)
{
    h_resp m = h_http(c, "GET", "/metrics", NULL, NULL);
    long long sum = 0;
    size_t fl = strlen(family);
    bool series = strchr(family, '{') != NULL;   /* one series, labels and all */
    for (const char *line = m.body; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, family, fl) && (line[fl] == ' ' || (!series && line[fl] == '{')))
            sum += strtoll(strchr(line, ' ') + 1, NULL, 10);
    h_resp_free(&m);
    return sum;
}

bool h_held(h_cluster *c, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "/locks/%s", name);
    h_resp r = h_http(c, "GET", path, NULL, NULL);
    bool held = cJSON_IsTrue(cJSON_GetObjectItem(r.json, "held"));
    h_resp_free(&r);
    return held;
}

