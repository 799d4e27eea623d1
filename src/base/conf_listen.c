/* conf_listen.c - the listeners: HTTP's (--listen, given once or more, TCP
 * or unix:PATH) and Dapr's gRPC API's (--dapr-grpc-listen, one, TCP or
 * unix:PATH: the same entries), a Unix socket's file mode (--listen-mode)
 * and TLS on the TCP ones (--tls-cert-file, --tls-key-file,
 * --tls-client-ca-file): conf_int.h, conf.h. Pure: nothing is opened here
 * (the files are loaded where they are used, front/http_tls.c and
 * front/grpc_tls.c). */
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

int conf_listen_entry(const char *s, size_t len, conf_addr *a, const char **why)
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
        } else if (conf_listen_entry(p, len, &a, &why) == 0) {
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
                 "certificates are asked for over TLS only");
        return -1;
    }
    for (int i = 0; conf_grpc_on(c) && i < c->nlisten; i++)
        if (same_listener(&c->listen[i], &c->dapr_grpc_listen)) {
            char a[300];
            conf_addr_str(&c->dapr_grpc_listen, "", a, sizeof a);
            snprintf(err, errlen, "--dapr-grpc-listen %s: --listen serves HTTP there already", a);
            return -1;
        }
    int tcp = 0;
    for (int i = 0; i < c->nlisten; i++) {
        c->listen[i].tls = c->tls_cert_file && !c->listen[i].unix_socket;
        tcp += !c->listen[i].unix_socket;
    }
    /* gRPC over TLS (ALPN h2) on a TCP --dapr-grpc-listen, with the same
     * files; a Unix socket stays plain (h2c), as HTTP's does. */
    c->dapr_grpc_listen.tls = c->tls_cert_file && c->dapr_grpc_listen.port > 0;
    tcp += c->dapr_grpc_listen.port > 0;
    if (c->tls_cert_file && tcp == 0) {
        snprintf(err, errlen, "--tls-cert-file: TLS is served on TCP listeners, and --listen (and "
                 "--dapr-grpc-listen) name Unix sockets only");
        return -1;
    }
    return 0;
}

bool conf_grpc_on(const conf *c)
{
    return c->dapr_grpc_listen.port > 0 || c->dapr_grpc_listen.unix_socket;
}

size_t conf_addr_str(const conf_addr *a, const char *tls_word, char *out, size_t outlen)
{
    int n = a->unix_socket ? snprintf(out, outlen, "unix:%s", a->host)
                           : snprintf(out, outlen, strchr(a->host, ':') ? "[%s]:%d%s%s" : "%s:%d%s%s", a->host,
                                      a->port, a->tls ? " " : "", a->tls ? tls_word : "");
    return n < 0 ? 0 : (size_t)n;
}

void conf_listen_str(const conf *c, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < c->nlisten && o + 1 < outlen; i++) {
        if (i)
            o += (size_t)snprintf(out + o, outlen - o, ",");
        if (o + 1 < outlen)
            o += conf_addr_str(&c->listen[i], "(https)", out + o, outlen - o);
    }
}
