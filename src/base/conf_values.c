/* conf_values.c - the values of flags that are more than a number or a
 * string: addresses, the masters, token files and Dapr's stores (conf_int.h). */
#include "conf.h"
#include "conf_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int parse_addr(const char *s, conf_addr *a)
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

int parse_masters(const char *s, conf *c)
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
            parse_addr(tok, &c->masters[n]) < 0)
            return -1;
        c->masters[n].tls = tls;
        n++;
    }
    if (n == 0)
        return -1;
    c->nmasters = n;
    return 0;
}

char *read_token_file(const char *flag, const char *path, char *err, size_t errlen)
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
bool stores_valid(const char *val)
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
