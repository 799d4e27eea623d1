/* cli_answers.c - see cli_parse.h: the service's answers as messages and
 * exit codes, and the lines of a held stream. */
#include "cli_parse.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- answers ---- */

int cli_exit_for(long status, const char *error)
{
    if (status <= 0)
        return CLI_EXIT_UNAVAILABLE;
    if (status == 400 || status == 413)
        return CLI_EXIT_USAGE;
    if (status == 401 || status == 403)
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

/* An integer field, clamped to long long: the service sends none larger,
 * but a number as JSON allows (1e300, or 1e999 which cJSON reads as inf)
 * must not overflow the cast (found by tests/fuzz). */
static long long int_item(const cJSON *o, const char *field, long long dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    if (!cJSON_IsNumber(v) || isnan(v->valuedouble))
        return dflt;
    double d = v->valuedouble;
    return d >= 0x1p63 ? LLONG_MAX : d < -0x1p63 ? LLONG_MIN : (long long)d;
}

/* What the client prints is one line of printable text, whatever the
 * endpoint sent (a newline or a terminal escape in a message, an owner or
 * a leader): well-formed UTF-8 without control characters (C1's, which
 * some terminals obey, included) stays as it is, anything else becomes
 * spaces byte by byte. */
static void one_line(char *s)
{
    size_t len = strlen(s);
    bool c1 = false;
    for (size_t i = 0; i + 1 < len; i++)
        c1 |= (unsigned char)s[i] == 0xc2 && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f;
    if (!c1 && rules_text_valid(s, len, len))
        return;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            *s = ' ';
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
    one_line(out);
    cJSON_Delete(o);
}

int cli_answer_exit(long status, const char *body)
{
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    int code = cli_exit_for(status, o ? str_item(o, "error") : NULL);
    cJSON_Delete(o);
    return code;
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
    one_line(out);
    cJSON_Delete(o);
    return 1;
}

int cli_format_listed(const cJSON *o, char *out, size_t outlen)
{
    const cJSON *name = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "name") : NULL;
    long long validity = int_item(o, "validity_ms", -1), fence = int_item(o, "fence", -1);
    if (!cJSON_IsString(name) || validity < 0 || fence < 0)
        return -1;
    char d[32];
    cli_format_ms(validity, d, sizeof d);
    size_t used = (size_t)snprintf(out, outlen, "%s  validity %s, fence %lld", name->valuestring, d, fence);
    const char *owner = str_item(o, "owner");
    if (owner && used < outlen)
        snprintf(out + used, outlen - used, ", owner %s", owner);
    one_line(out);
    return 0;
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
    if (reason) {
        snprintf(ev->reason, sizeof ev->reason, "%s", reason);
        one_line(ev->reason);
    }
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
    one_line(out);
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
