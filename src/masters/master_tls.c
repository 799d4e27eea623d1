/* master_tls.c - a master connection's bytes: plain through hiredis's own
 * I/O, or TLS (OpenSSL) on the same socket. hiredis 0.14 (Debian 12) has no
 * TLS, so for a TLS connection hiredis still formats commands into its
 * output buffer (ctx->obuf) and parses replies with its reader, and this
 * file moves the bytes: SSL_write from the output buffer, SSL_read into
 * redisReaderFeed. Everything is non-blocking and driven by the pool's own
 * poll() loop: the TCP connect and the TLS handshake run while the master
 * is M_CONNECTING, under one connect deadline; WANT_READ and WANT_WRITE say
 * which event to wait for. docs/design.md says why not a socketpair.
 *
 * Also the client context (mtls_ctx, master.h), built once and shared by
 * every loop's pool: OpenSSL's SSL_CTX is safe to share once configured.
 *
 * Depends on nothing else of the master layer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/sds.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_int.h"

#define MTLS_READ_CHUNK 16384   /* bytes per SSL_read into the reply reader */

struct mtls_ctx {
    SSL_CTX *ssl;
    char *server_name;          /* --redis-tls-server-name; NULL: each master's host */
    atomic_int refs;
};

/* One TLS session on a connection's socket. */
struct mtls {
    SSL *ssl;
    bool handshaking;           /* SSL_connect has not finished */
    short want;                 /* while handshaking: POLLIN or POLLOUT */
    bool read_wants_write;      /* the last SSL_read waits for the socket to take bytes */
    char name[256];             /* the name the certificate must carry */
};

/* The newest OpenSSL error's reason, or what is known without one. */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown TLS error";
}

static int load_error(const char *flag, const char *path, char *err, size_t errlen)
{
    /* A file that cannot be opened says so plainly; else OpenSSL's reason. */
    FILE *f = fopen(path, "r");
    if (!f)
        snprintf(err, errlen, "%s: cannot open %s: %s", flag, path, strerror(errno));
    else
        snprintf(err, errlen, "%s: cannot load %s: %s", flag, path, ssl_reason());
    if (f)
        fclose(f);
    ERR_clear_error();
    return -1;
}

mtls_ctx *mtls_ctx_new(const conf *c, char *err, size_t errlen)
{
    mtls_ctx *t = calloc(1, sizeof *t);
    SSL_CTX *ssl = t ? SSL_CTX_new(TLS_client_method()) : NULL;
    if (!ssl) {
        snprintf(err, errlen, "--redis-tls: cannot set up TLS: %s", t ? ssl_reason() : "out of memory");
        free(t);
        return NULL;
    }
    t->ssl = ssl;
    atomic_store(&t->refs, 1);
    SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION);
    /* Verification is always on: a master whose certificate does not check
     * out is down (fail closed). The name is checked per connection. */
    SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER, NULL);
    /* SSL_write may take part of the buffer, and be retried after
     * WANT_WRITE with a buffer that has grown (and moved) since. */
    SSL_CTX_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    int rc = 0;
    if (c->redis_tls_ca_file) {
        if (SSL_CTX_load_verify_locations(ssl, c->redis_tls_ca_file, NULL) != 1)
            rc = load_error("--redis-tls-ca-file", c->redis_tls_ca_file, err, errlen);
    } else if (SSL_CTX_set_default_verify_paths(ssl) != 1) {
        snprintf(err, errlen, "--redis-tls: cannot load the system's trust store: %s (give "
                 "--redis-tls-ca-file)", ssl_reason());
        rc = -1;
    }
    if (rc == 0 && c->redis_tls_cert_file &&
        SSL_CTX_use_certificate_chain_file(ssl, c->redis_tls_cert_file) != 1)
        rc = load_error("--redis-tls-cert-file", c->redis_tls_cert_file, err, errlen);
    if (rc == 0 && c->redis_tls_key_file &&
        SSL_CTX_use_PrivateKey_file(ssl, c->redis_tls_key_file, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
            snprintf(err, errlen, "--redis-tls-key-file: %s is not the key of %s", c->redis_tls_key_file,
                     c->redis_tls_cert_file);
            rc = -1;
        } else {
            rc = load_error("--redis-tls-key-file", c->redis_tls_key_file, err, errlen);
        }
    }
    if (rc == 0 && c->redis_tls_key_file && SSL_CTX_check_private_key(ssl) != 1) {
        snprintf(err, errlen, "--redis-tls-key-file: %s is not the key of %s", c->redis_tls_key_file,
                 c->redis_tls_cert_file);
        rc = -1;
    }
    if (rc == 0 && c->redis_tls_server_name && !(t->server_name = strdup(c->redis_tls_server_name))) {
        snprintf(err, errlen, "--redis-tls-server-name: out of memory");
        rc = -1;
    }
    ERR_clear_error();
    if (rc < 0) {
        mtls_ctx_free(t);
        return NULL;
    }
    return t;
}

void mtls_ctx_ref(mtls_ctx *t)
{
    if (t)
        atomic_fetch_add(&t->refs, 1);
}

void mtls_ctx_free(mtls_ctx *t)
{
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1)
        return;
    SSL_CTX_free(t->ssl);
    free(t->server_name);
    free(t);
}

struct mtls *mtls_start(mtls_ctx *t, int fd, const char *host, char *why, size_t whylen)
{
    struct mtls *s = calloc(1, sizeof *s);
    if (!s || !t || !(s->ssl = SSL_new(t->ssl)) || SSL_set_fd(s->ssl, fd) != 1) {
        snprintf(why, whylen, "TLS: cannot start: %s", s && t ? ssl_reason() : "out of memory");
        mtls_free(s);
        ERR_clear_error();
        return NULL;
    }
    snprintf(s->name, sizeof s->name, "%s", t->server_name ? t->server_name : host);
    /* An IP address is checked against the certificate's IP SANs, a name
     * against its DNS names (and sent as SNI, which an address may not be). */
    unsigned char bin[16];
    bool ip = inet_pton(AF_INET, s->name, bin) == 1 || inet_pton(AF_INET6, s->name, bin) == 1;
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), s->name)
                : SSL_set_tlsext_host_name(s->ssl, s->name) == 1 && SSL_set1_host(s->ssl, s->name) == 1;
    if (!ok) {
        snprintf(why, whylen, "TLS: cannot check the name %s: %s", s->name, ssl_reason());
        mtls_free(s);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_hostflags(s->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set_connect_state(s->ssl);
    s->handshaking = true;
    s->want = POLLOUT;
    return s;
}

void mtls_free(struct mtls *s)
{
    if (!s)
        return;
    SSL_free(s->ssl);   /* the socket is hiredis's: redisFree closes it */
    free(s);
}

/* Why operation `what` failed with SSL_get_error's e (rc its return). */
static void describe(struct mtls *s, int e, int rc, const char *what, char *why, size_t whylen)
{
    long v = SSL_get_verify_result(s->ssl);
    if (e == SSL_ERROR_SSL && (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH))
        snprintf(why, whylen, "TLS handshake failed: hostname mismatch: the master's certificate "
                 "is not for %s", s->name);
    else if (e == SSL_ERROR_SSL && v != X509_V_OK)
        snprintf(why, whylen, "TLS handshake failed: certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
    else if (e == SSL_ERROR_SSL)
        snprintf(why, whylen, "TLS %s failed: %s", what, ssl_reason());
    else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && rc == 0) ||
             (e == SSL_ERROR_SYSCALL && errno == 0))
        snprintf(why, whylen, "TLS %s failed: the master closed the connection%s", what,
                 s->handshaking ? " (a plain port, or it refused this client?)" : "");
    else
        snprintf(why, whylen, "TLS %s failed: %s", what, strerror(errno));
    ERR_clear_error();
}

int mtls_handshake(struct mtls *s, char *why, size_t whylen)
{
    ERR_clear_error();
    errno = 0;
    int rc = SSL_connect(s->ssl);
    if (rc == 1) {
        s->handshaking = false;
        return 1;
    }
    int e = SSL_get_error(s->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        s->want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    describe(s, e, rc, "handshake", why, whylen);
    return -1;
}

short mlink_events(const struct mtls *s, bool connecting, bool want_write)
{
    if (s && s->handshaking)
        return s->want;
    if (connecting)
        return POLLOUT;   /* the TCP connect */
    return (short)(POLLIN | (want_write || (s && s->read_wants_write) ? POLLOUT : 0));
}

bool mlink_readable(const struct mtls *s, short revents)
{
    return (revents & (POLLIN | POLLERR | POLLHUP)) || (s && s->read_wants_write && (revents & POLLOUT));
}

int mlink_read(redisContext *c, struct mtls *s, char *why, size_t whylen)
{
    if (!s) {
        if (redisBufferRead(c) == REDIS_OK)
            return 0;
        snprintf(why, whylen, "%s", c->errstr[0] ? c->errstr : "read error");
        return -1;
    }
    /* Until OpenSSL wants more from the socket: bytes it holds decrypted
     * would not wake poll() again. */
    char buf[MTLS_READ_CHUNK];
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int n = SSL_read(s->ssl, buf, sizeof buf);
        if (n > 0) {
            if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
                snprintf(why, whylen, "protocol error");
                return -1;
            }
            continue;
        }
        int e = SSL_get_error(s->ssl, n);
        s->read_wants_write = e == SSL_ERROR_WANT_WRITE;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return 0;
        describe(s, e, n, "read", why, whylen);
        return -1;
    }
}

int mlink_write(redisContext *c, struct mtls *s, bool *done, char *why, size_t whylen)
{
    *done = false;
    if (!s) {
        int d = 0;
        if (redisBufferWrite(c, &d) != REDIS_OK) {
            snprintf(why, whylen, "%s", c->errstr[0] ? c->errstr : "write error");
            return -1;
        }
        *done = d != 0;
        return 0;
    }
    size_t len = sdslen(c->obuf);
    if (len == 0) {
        *done = true;
        return 0;
    }
    ERR_clear_error();
    errno = 0;
    /* A retry after WANT_WRITE passes the same bytes first (the buffer only
     * grows at its end until written), as OpenSSL requires. */
    int n = SSL_write(s->ssl, c->obuf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0) {
        if ((size_t)n == len) {
            sdsfree(c->obuf);
            c->obuf = sdsempty();
            *done = true;
            if (!c->obuf) {
                snprintf(why, whylen, "out of memory");
                return -1;
            }
        } else {
            sdsrange(c->obuf, n, -1);
        }
        return 0;
    }
    int e = SSL_get_error(s->ssl, n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
        return 0;
    describe(s, e, n, "write", why, whylen);
    return -1;
}
