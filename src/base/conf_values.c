/* conf_values.c - the values of flags that are more than a number or a
 * string: addresses, the masters, token files, Dapr's stores, and the
 * origins and hosts a browser may call from (conf_int.h, conf.h). */
#include "conf.h"
#include "conf_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <strings.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int conf_parse_addr(const char *s, conf_addr *a)
{
    const char *colon;
    size_t hostlen;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -1;
        hostlen = (size_t)(close - s - 1);
        s++;
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hostlen = (size_t)(colon - s);
    }
    if (hostlen == 0 || hostlen >= sizeof a->host)
        return -1;
    memcpy(a->host, s, hostlen);
    a->host[hostlen] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
        return -1;
    a->port = (int)port;
    return 0;
}

int conf_parse_masters(const char *s, conf *c)
{
    char buf[4096];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        /* redis://host:port and rediss://host:port (TLS), as Redis URLs
         * write them, with at most a trailing '/': credentials belong in
         * --redis-username and --redis-password, not in a URL. */
        bool tls = false;
        if (!strncmp(tok, "rediss://", 9)) {
            tls = true;
            tok += 9;
        } else if (!strncmp(tok, "redis://", 8)) {
            tok += 8;
        } else if (strstr(tok, "://")) {
            return -1;
        }
        size_t len = strlen(tok);
        if (len && tok[len - 1] == '/')
            tok[--len] = '\0';
        if (n == CONF_MAX_MASTERS || strchr(tok, '@') || strchr(tok, '/') ||
            conf_parse_addr(tok, &c->masters[n]) < 0)
            return -1;
        c->masters[n].tls = tls;
        n++;
    }
    if (n == 0)
        return -1;
    c->nmasters = n;
    return 0;
}

char *conf_read_token_file(const char *flag, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--%s: cannot open %s: %s", flag, path, strerror(errno));
        return NULL;
    }
    char buf[CONF_MAX_AUTH_TOKEN + 2];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    char *start = buf;
    while (isspace((unsigned char)*start))
        start++;
    size_t len = strlen(start);
    if (len == 0 || len > CONF_MAX_AUTH_TOKEN) {
        snprintf(err, errlen, "--%s: %s must hold 1 to %d bytes of token", flag, path, CONF_MAX_AUTH_TOKEN);
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        if (!isgraph((unsigned char)start[i])) {
            snprintf(err, errlen, "--%s: %s: the token must be one word of printable ASCII", flag, path);
            return NULL;
        }
    }
    char *tok = strdup(start);
    if (!tok)
        snprintf(err, errlen, "--%s: out of memory", flag);
    return tok;
}

/* --dapr-stores: NAME[=KEYPREFIX],... (front/api.h): names of A-Z a-z 0-9 . _ -,
 * prefixes of those and : @ / (so never "||"), each 1 to CONF_DAPR_NAME_MAX
 * bytes. */
bool conf_stores_valid(const char *val)
{
    size_t len = strlen(val);
    if (len == 0 || len > CONF_MAX_DAPR_STORES)
        return false;
    for (const char *p = val; p;) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        size_t nl = (size_t)((eq ? eq : end) - p), pl = eq ? (size_t)(end - eq - 1) : 1;
        if (nl == 0 || nl > CONF_DAPR_NAME_MAX || pl == 0 || pl > CONF_DAPR_NAME_MAX)
            return false;
        for (const char *q = p; q < end; q++) {
            unsigned char ch = (unsigned char)*q;
            bool in_prefix = eq && q > eq;
            if (!(isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || (q == eq) ||
                  (in_prefix && (ch == ':' || ch == '@' || ch == '/'))))
                return false;
        }
        p = comma ? comma + 1 : NULL;
    }
    return true;
}

/* ---- origins and hosts (conf.h) ---- */

int conf_host_norm(const char *s, size_t len, char *out, size_t cap, int *port)
{
    if (port)
        *port = -1;
    const char *end = s + len, *host_end;
    if (len && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close)
            return -1;
        host_end = close + 1;
        char v6[INET6_ADDRSTRLEN + 1];
        struct in6_addr a;
        size_t vl = (size_t)(close - s - 1);
        if (vl == 0 || vl >= sizeof v6)
            return -1;
        memcpy(v6, s + 1, vl);
        v6[vl] = '\0';
        if (inet_pton(AF_INET6, v6, &a) != 1)
            return -1;
    } else {
        host_end = s;
        while (host_end < end && (isalnum((unsigned char)*host_end) || *host_end == '.' || *host_end == '-' ||
                                  *host_end == '_'))
            host_end++;
    }
    size_t hl = (size_t)(host_end - s);
    if (hl == 0 || hl > CONF_HOST_MAX || hl >= cap)
        return -1;
    if (host_end < end) {
        /* ":PORT", digits only, 1 to 65535 */
        const char *p = host_end + 1;
        if (!port || *host_end != ':' || p == end || end - p > 5)
            return -1;
        long v = 0;
        for (; p < end; p++) {
            if (!isdigit((unsigned char)*p))
                return -1;
            v = v * 10 + (*p - '0');
        }
        if (v < 1 || v > 65535)
            return -1;
        *port = (int)v;
    }
    for (size_t i = 0; i < hl; i++)
        out[i] = (char)tolower((unsigned char)s[i]);
    out[hl] = '\0';
    return 0;
}

int conf_origin_norm(const char *s, size_t len, char *out, size_t cap)
{
    size_t skip;
    int dflt;
    if (len > 7 && !strncasecmp(s, "http://", 7)) {
        skip = 7;
        dflt = 80;
    } else if (len > 8 && !strncasecmp(s, "https://", 8)) {
        skip = 8;
        dflt = 443;
    } else {
        return -1;
    }
    char host[CONF_HOST_MAX + 1];
    int port;
    if (conf_host_norm(s + skip, len - skip, host, sizeof host, &port) < 0)
        return -1;
    int n = port > 0 && port != dflt ? snprintf(out, cap, "%s%s:%d", dflt == 80 ? "http://" : "https://", host, port)
                                     : snprintf(out, cap, "%s%s", dflt == 80 ? "http://" : "https://", host);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

bool conf_host_loopback(const char *host)
{
    if (!strcasecmp(host, "localhost"))
        return true;
    struct in_addr v4;
    if (inet_pton(AF_INET, host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    char v6[INET6_ADDRSTRLEN + 1];
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof v6)
        return false;
    memcpy(v6, host, hl);
    v6[hl] = '\0';
    struct in6_addr a;
    if (inet_pton(AF_INET6, v6, &a) != 1)
        return false;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

void conf_free_allowed(char ***list, int *n)
{
    for (int i = 0; i < *n; i++)
        free((*list)[i]);
    free(*list);
    *list = NULL;
    *n = 0;
}

int conf_parse_allowed(const char *from, const char *val, bool origins, char ***list, int *n, char *err,
                  size_t errlen)
{
    for (const char *p = val; *p;) {
        const char *comma = strchr(p, ','), *e = comma ? comma : p + strlen(p);
        while (p < e && *p == ' ')
            p++;
        size_t len = (size_t)(e - p);
        while (len && p[len - 1] == ' ')
            len--;
        char norm[CONF_ORIGIN_MAX + 1];
        int rc = origins ? conf_origin_norm(p, len, norm, sizeof norm)
                         : conf_host_norm(p, len, norm, sizeof norm, NULL);
        if (rc < 0) {
            snprintf(err, errlen, origins ? "%s: expected http://HOST[:PORT] or https://HOST[:PORT], "
                                            "comma-separated, got \"%.*s\""
                                          : "%s: expected a host name or address without a port (an IPv6 "
                                            "address in brackets), comma-separated, got \"%.*s\"",
                     from, (int)(len > 300 ? 300 : len), p);
            return -1;
        }
        if (*n == CONF_MAX_ALLOWED) {
            snprintf(err, errlen, "%s: at most %d entries", from, CONF_MAX_ALLOWED);
            return -1;
        }
        char **grown = realloc(*list, (size_t)(*n + 1) * sizeof *grown);
        if (!grown || !(grown[*n] = strdup(norm))) {
            if (grown)
                *list = grown;
            snprintf(err, errlen, "%s: out of memory", from);
            return -1;
        }
        *list = grown;
        (*n)++;
        p = comma ? comma + 1 : e;
        if (comma && !*p) {
            snprintf(err, errlen, "%s: an empty entry after the last comma", from);
            return -1;
        }
    }
    return 0;
}
