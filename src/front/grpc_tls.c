/* grpc_tls.c - gRPC over TLS on a TCP --dapr-grpc-listen (grpc_int.h):
 * OpenSSL, with ALPN h2, the same files as the HTTPS listeners
 * (--tls-cert-file, --tls-key-file, --tls-client-ca-file). libmicrohttpd
 * brings its own TLS (GnuTLS) for HTTP; nghttp2 brings none, so this file
 * moves a connection's bytes through SSL_read and SSL_write on its
 * non-blocking socket and grpc_conns.c feeds them to nghttp2 as it does the
 * plain ones.
 *
 * Who owns what: the context in force (s->tls_ctx: certificate, key, the
 * client CA, the callbacks) is the server's, guarded by s->tls_mu: the
 * gRPC thread takes a connection's SSL from it at accept (SSL_new holds a
 * reference to its context), and SIGHUP (grpc_reload_tls, main thread)
 * builds a whole new context and swaps it in; the old one is freed with
 * its last connection, which keeps the certificate it was handshaken with.
 * The client CA (s->ca_store, s->ca_names) is read once at start, as the
 * HTTPS listeners read theirs: a new CA needs a restart. A connection's SSL
 * is the gRPC thread's alone.
 *
 * Choices: a client that offers no ALPN, or ALPN without h2, fails the
 * handshake with the no_application_protocol alert (RFC 7301 3.2); TLS 1.2
 * or later, TLS 1.2 with the ECDHE AEAD suites HTTP/2 allows (RFC 9113
 * 9.2.2); no session resumption (no tickets, no cache): each connection's
 * certificate is checked by its own full handshake, and a gRPC connection
 * lives long enough that resumption saves nothing. With a client CA every
 * client is asked for a certificate (SSL_VERIFY_PEER): one that does not
 * chain to it, has expired or is not yet valid fails the handshake with
 * the alert that says why; one that sends none completes it, and each of
 * its calls is answered UNAUTHENTICATED (grpc.c), as HTTPS answers 401.
 */
#include "grpc_int.h"

#include <limits.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <time.h>

static log_limit refused_limit = LOG_LIMIT_INIT, failed_limit = LOG_LIMIT_INIT;

/* The last OpenSSL error as words, and the queue emptied. */
static const char *ssl_why(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *why = e ? ERR_reason_error_string(e) : NULL;
    ERR_clear_error();
    return why ? why : "unknown error";
}

/* The client's hello: a client that offers no ALPN at all is refused here,
 * as one whose list lacks h2 is in select_alpn. */
static int on_hello(SSL *ssl, int *alert, void *arg)
{
    const unsigned char *ext;
    size_t len;
    (void)arg;
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext, &len) == 1)
        return SSL_CLIENT_HELLO_SUCCESS;
    *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
    return SSL_CLIENT_HELLO_ERROR;
}

static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
    static const unsigned char h2[] = "\x02h2";
    unsigned char *sel = NULL;
    (void)ssl;
    (void)arg;
    if (SSL_select_next_proto(&sel, outlen, h2, sizeof h2 - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;   /* no_application_protocol */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* Each certificate of a client's chain: a refusal is logged (at most one
 * line a second); OpenSSL then ends the handshake with its alert. */
static int verify_client(int ok, X509_STORE_CTX *x)
{
    unsigned long long suppressed;
    if (!ok && log_allow(&refused_limit, loop_now_us(), &suppressed)) {
        char more[24];
        snprintf(more, sizeof more, "%llu", suppressed);
        log_event(LOG_LEVEL_WARN, "tls_client_refused", "listener", "grpc", "why",
                  X509_verify_cert_error_string(X509_STORE_CTX_get_error(x)), "suppressed_since_last", more, NULL);
    }
    return ok;
}

/* What a certificate is, for the log: its subject and end of validity. */
static void describe(X509 *crt, char *what, size_t whatlen)
{
    char subj[256] = "?", when[32] = "?";
    struct tm tm;
    BIO *b = BIO_new(BIO_s_mem());   /* RFC 2253, as the HTTPS listeners' line says it */
    if (b && X509_NAME_print_ex(b, X509_get_subject_name(crt), 0, XN_FLAG_RFC2253) >= 0) {
        int n = BIO_read(b, subj, sizeof subj - 1);
        subj[n > 0 ? n : 0] = '\0';
    }
    BIO_free(b);
    if (ASN1_TIME_to_tm(X509_get0_notAfter(crt), &tm) == 1)
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(what, whatlen, "%s, valid until %s", subj, when);
}

/* A context from cfg's files and s's client CA. NULL with err. */
static SSL_CTX *ctx_load(grpc_server *s, const conf *cfg, char *what, size_t whatlen, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "--tls-cert-file: %s", ssl_why());
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* A write that the socket took part of is retried from where it
     * stopped, with the buffer it came from (grpc_conns.c's wbuf). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    bool cert_bad = SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1 ||
                    SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1;
    if (cert_bad || SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        if (cert_bad)
            snprintf(err, errlen, "--tls-cert-file %s: %s", cfg->tls_cert_file, ssl_why());
        else
            snprintf(err, errlen, "--tls-key-file %s with --tls-cert-file %s: %s", cfg->tls_key_file,
                     cfg->tls_cert_file, ssl_why());
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (s->ca_store) {
        STACK_OF(X509_NAME) *names = SSL_dup_CA_list(s->ca_names);
        if (!names) {
            snprintf(err, errlen, "--tls-client-ca-file: out of memory");
            SSL_CTX_free(ctx);
            return NULL;
        }
        SSL_CTX_set1_cert_store(ctx, s->ca_store);   /* shared: one more reference */
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_client);   /* none: UNAUTHENTICATED calls */
    }
    SSL_CTX_set_client_hello_cb(ctx, on_hello, NULL);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    describe(SSL_CTX_get0_certificate(ctx), what, whatlen);
    return ctx;
}

int grpc_tls_start(grpc_server *s, char *err, size_t errlen)
{
    const conf *cfg = s->cfg;
    if (!cfg->dapr_grpc_listen.tls)
        return 0;
    if (cfg->tls_client_ca_file) {
        s->ca_store = X509_STORE_new();
        s->ca_names = SSL_load_client_CA_file(cfg->tls_client_ca_file);
        if (!s->ca_store || X509_STORE_load_file(s->ca_store, cfg->tls_client_ca_file) != 1 || !s->ca_names) {
            snprintf(err, errlen, "--tls-client-ca-file %s: %s", cfg->tls_client_ca_file,
                     s->ca_names ? ssl_why() : "no PEM certificate in it");
            return -1;
        }
    }
    char what[400];
    if (!(s->tls_ctx = ctx_load(s, cfg, what, sizeof what, err, errlen)))
        return -1;
    log_event(LOG_LEVEL_INFO, "tls_loaded", "listener", "grpc", "certificate", what, "client_ca",
              cfg->tls_client_ca_file ? cfg->tls_client_ca_file : "none", NULL);
    return 0;
}

int grpc_reload_tls(grpc_server *s, const conf *cfg, char *err, size_t errlen)
{
    if (!s || !cfg->dapr_grpc_listen.tls)
        return 0;
    char what[400];
    SSL_CTX *ctx = ctx_load(s, cfg, what, sizeof what, err, errlen);
    if (!ctx)
        return -1;
    pthread_mutex_lock(&s->tls_mu);
    SSL_CTX *old = s->tls_ctx;
    s->tls_ctx = ctx;
    pthread_mutex_unlock(&s->tls_mu);
    SSL_CTX_free(old);   /* freed with the last connection that holds it */
    log_event(LOG_LEVEL_INFO, "reloaded", "what", "grpc tls certificate", "certificate", what, NULL);
    return 0;
}

void grpc_tls_end(grpc_server *s)
{
    SSL_CTX_free(s->tls_ctx);
    s->tls_ctx = NULL;
    X509_STORE_free(s->ca_store);
    s->ca_store = NULL;
    sk_X509_NAME_pop_free(s->ca_names, X509_NAME_free);
    s->ca_names = NULL;
}

int grpc_tls_accept(gconn *c)
{
    grpc_server *s = c->s;
    pthread_mutex_lock(&s->tls_mu);
    SSL *ssl = SSL_new(s->tls_ctx);
    pthread_mutex_unlock(&s->tls_mu);
    if (!ssl || SSL_set_fd(ssl, c->fd) != 1) {
        SSL_free(ssl);
        ERR_clear_error();
        return -1;
    }
    SSL_set_accept_state(ssl);
    c->ssl = ssl;
    return 0;
}

/* The name a verified certificate gives, as HTTPS takes it (http_peer.c):
 * its subject's first CN, or when it has no CN its first DNS SAN; none
 * (out empty) when that is too long for cap or holds a NUL. */
static void cert_name(X509 *crt, char *out, size_t cap)
{
    out[0] = '\0';
    X509_NAME *subj = X509_get_subject_name(crt);
    int i = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
    if (i >= 0) {
        unsigned char *u = NULL;
        int n = ASN1_STRING_to_UTF8(&u, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i)));
        if (n > 0 && (size_t)n < cap && !memchr(u, '\0', (size_t)n)) {
            memcpy(out, u, (size_t)n);
            out[n] = '\0';
        }
        OPENSSL_free(u);
        return;
    }
    GENERAL_NAMES *sans = X509_get_ext_d2i(crt, NID_subject_alt_name, NULL, NULL);
    for (int k = 0; sans && k < sk_GENERAL_NAME_num(sans); k++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, k);
        if (g->type != GEN_DNS)
            continue;
        const unsigned char *p = ASN1_STRING_get0_data(g->d.dNSName);
        int n = ASN1_STRING_length(g->d.dNSName);
        if (n > 0 && (size_t)n < cap && !memchr(p, '\0', (size_t)n)) {
            memcpy(out, p, (size_t)n);
            out[n] = '\0';
        }
        break;
    }
    GENERAL_NAMES_free(sans);
}

int grpc_tls_handshake(gconn *c)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(c->ssl);
    c->tls_hs_out = false;
    if (rc != 1) {
        int e = SSL_get_error(c->ssl, rc);
        if (e == SSL_ERROR_WANT_READ)
            return 0;
        if (e == SSL_ERROR_WANT_WRITE) {
            c->tls_hs_out = true;
            return 0;
        }
        c->tls_broken = true;   /* (the alert, if any, has gone: no close_notify after it) */
        unsigned long long suppressed;
        const char *why = e == SSL_ERROR_SSL ? ssl_why() : "the connection closed";
        if (log_allow(&failed_limit, loop_now_us(), &suppressed))
            log_event(LOG_LEVEL_DEBUG, "grpc_tls_handshake_failed", "why", why, NULL);
        ERR_clear_error();
        return -1;
    }
    const unsigned char *proto = NULL;
    unsigned int len = 0;
    SSL_get0_alpn_selected(c->ssl, &proto, &len);
    if (len != 2 || memcmp(proto, "h2", 2) != 0)
        return -1;   /* (on_hello and select_alpn refused it already) */
    c->tls_ready = true;
    if (c->s->ca_store) {
        X509 *peer = SSL_get0_peer_certificate(c->ssl);
        bool ok = peer && SSL_get_verify_result(c->ssl) == X509_V_OK;
        c->cert_missing = !ok;
        if (ok)
            cert_name(peer, c->cert_name, sizeof c->cert_name);
    }
    return 1;
}

ssize_t grpc_tls_recv(gconn *c, uint8_t *buf, size_t len)
{
    ERR_clear_error();
    int n = SSL_read(c->ssl, buf, (int)(len > INT_MAX ? INT_MAX : len));
    c->tls_read_out = false;
    if (n > 0)
        return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        /* WANT_WRITE: SSL must write before it reads on (a key update's
         * answer, say): the connection asks for EPOLLOUT, and reads again
         * when writable (grpc_conns.c). */
        c->tls_read_out = e == SSL_ERROR_WANT_WRITE;
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;   /* close_notify */
    bool intr = e == SSL_ERROR_SYSCALL && errno == EINTR;   /* (read again) */
    c->tls_broken = !intr;
    ERR_clear_error();
    errno = intr ? EINTR : EPIPE;
    return -1;
}

ssize_t grpc_tls_send(gconn *c, const uint8_t *buf, size_t len)
{
    ERR_clear_error();
    int n = SSL_write(c->ssl, buf, (int)(len > INT_MAX ? INT_MAX : len));
    c->tls_write_in = false;
    if (n > 0)
        return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        /* WANT_READ: the write waits for the peer's bytes, which EPOLLIN
         * (always asked for) brings; EPOLLOUT would only spin. */
        c->tls_write_in = e == SSL_ERROR_WANT_READ;
        errno = EAGAIN;
        return -1;
    }
    c->tls_broken = true;
    ERR_clear_error();
    errno = EPIPE;
    return -1;
}

void grpc_tls_close(gconn *c)
{
    if (!c->ssl)
        return;
    /* One try at close_notify; never after a fatal error (OpenSSL's rule). */
    if (c->tls_ready && !c->tls_broken)
        SSL_shutdown(c->ssl);
    SSL_free(c->ssl);
    c->ssl = NULL;
    ERR_clear_error();
}
