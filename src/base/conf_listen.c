/* conf_listen.c - the HTTP listeners (--listen, given once or more, TCP or
 * unix:PATH), a Unix socket's file mode (--listen-mode) and HTTPS on the
 * TCP ones (--tls-cert-file, --tls-key-file, --tls-client-ca-file):
 * conf_int.h, conf.h. Pure: nothing is opened here (the files are loaded
 * where they are used, front/http_tls.c). */
#include "conf.h"
#include "conf_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool same_listener(const conf_addr *a, const conf_addr *b)
{
    return a->unix_socket == b->unix_socket && a->port == b->port && !strcmp(a->host, b->host);
}

/* One entry of --listen (len bytes at s) into a. 0, or -1 with why. */
static int parse_entry(const char *s, size_t len, conf_addr *a, const char **why)
{
    char buf[300];
    memset(a, 0, sizeof *a);
    if (len >= sizeof buf) {
        *why = "too long";
        return -1;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!strncmp(buf, "unix:", 5)) {
        const char *path = buf + 5;
        size_t plen = strlen(path);
        /* Absolute: a relative path would follow the working directory of
         * whoever starts it, and of the health check. */
        if (path[0] != '/' || plen > CONF_UNIX_PATH_MAX || path[plen - 1] == '/') {
            *why = "a Unix socket is unix:/ABSOLUTE/PATH of at most 107 bytes";
            return -1;
        }
        for (const char *p = path; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) {
                *why = "a control byte in the path";
                return -1;
            }
        strcpy(a->host, path);
        a->unix_socket = true;
        return 0;
    }
    if (conf_parse_addr(buf, a) < 0) {
        *why = "expected HOST:PORT, [IPV6]:PORT or unix:/PATH";
        return -1;
    }
    return 0;
}

int conf_listen_add(conf *c, const char *from, const char *val, char *err, size_t errlen)
{
    const char *p = val;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && *p == ' ') {
            p++;
            len--;
        }
        conf_addr a;
        const char *why = NULL;
        if (len == 0) {
            why = "an empty entry";
        } else if (parse_entry(p, len, &a, &why) == 0) {
            for (int i = 0; i < c->nlisten && !why; i++)
                if (same_listener(&c->listen[i], &a))
                    why = "given twice";
            if (!why && c->nlisten == CONF_MAX_LISTEN)
                why = "more than 8 listeners";
        }
        if (why) {
            snprintf(err, errlen, "%s: %s: \"%.*s\"", from, why, (int)(len > 200 ? 200 : len), p);
            return -1;
        }
        c->listen[c->nlisten++] = a;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

int conf_listen_mode(const char *val, int *mode)
{
    size_t n = strlen(val);
    if (n == 0 || n > 4 || strspn(val, "01234567") != n)
        return -1;
    long m = strtol(val, NULL, 8);
    if (m < 0 || m > 0777)
        return -1;
    *mode = (int)m;
    return 0;
}

int conf_listen_check(conf *c, char *err, size_t errlen)
{
    if (c->nlisten == 0) {
        conf_parse_addr(CONF_DEFAULT_LISTEN, &c->listen[0]);
        c->nlisten = 1;
    }
    if (!c->tls_cert_file != !c->tls_key_file) {
        snprintf(err, errlen, "%s needs %s too", c->tls_cert_file ? "--tls-cert-file" : "--tls-key-file",
                 c->tls_cert_file ? "--tls-key-file" : "--tls-cert-file");
        return -1;
    }
    if (c->tls_client_ca_file && !c->tls_cert_file) {
        snprintf(err, errlen, "--tls-client-ca-file needs --tls-cert-file and --tls-key-file: client "
                 "certificates are asked for over HTTPS only");
        return -1;
    }
    int tcp = 0;
    for (int i = 0; i < c->nlisten; i++) {
        c->listen[i].tls = c->tls_cert_file && !c->listen[i].unix_socket;
        tcp += !c->listen[i].unix_socket;
    }
    if (c->tls_cert_file && tcp == 0) {
        snprintf(err, errlen, "--tls-cert-file: HTTPS is served on TCP listeners, and --listen names "
                 "Unix sockets only");
        return -1;
    }
    return 0;
}

void conf_listen_str(const conf *c, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < c->nlisten && o < outlen; i++) {
        const conf_addr *a = &c->listen[i];
        if (a->unix_socket)
            o += (size_t)snprintf(out + o, outlen - o, "%sunix:%s", i ? "," : "", a->host);
        else
            o += (size_t)snprintf(out + o, outlen - o, strchr(a->host, ':') ? "%s[%s]:%d%s" : "%s%s:%d%s",
                                  i ? "," : "", a->host, a->port, a->tls ? " (https)" : "");
    }
}
