/* http_peer.c - who calls (http_int.h): the client's address as the log and
 * the audit write it ("unix" over a Unix socket), and over HTTPS with
 * --tls-client-ca-file its verified client certificate and the name it
 * gives (the subject's CN, or when it has none its first DNS SAN), which
 * auth.h matches with `cert` principals.
 *
 * A connection's certificate is looked at once, by the first request that
 * asks, on the connection's loop, and kept in its registry entry
 * (conn_info.cert, cert_name) until it closes: a full handshake already
 * refused a certificate that does not check out (http_tls.c); a resumed
 * session's, which an earlier handshake brought, is checked again here, so
 * that only a verified certificate ever names anybody. */
#include "http_int.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

void http_peer_note(conn_info *ci, const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) {
        ci->peer_len = addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        memcpy(&ci->peer, addr, ci->peer_len);
    } else {
        /* A Unix socket's client (its address may be 2 bytes long): no
         * address to count connections by, and "unix" to the log. */
        ci->peer.sa.sa_family = addr->sa_family;
        ci->peer_len = 0;
    }
}

void http_peer_forget(conn_info *ci)
{
    free(ci->cert_name);
    ci->cert_name = NULL;
}

void http_client_addr(req_ctx *ctx, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN + 1] = "", port[8] = "";
    if (ctx->ci && ctx->ci->peer.sa.sa_family == AF_UNIX) {
        snprintf(out, cap, "unix");
        return;
    }
    if (!ctx->ci || !ctx->ci->peer_len ||
        getnameinfo(&ctx->ci->peer.sa, ctx->ci->peer_len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, cap, "unknown");
        return;
    }
    snprintf(out, cap, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

/* The name a certificate (DER) gives: its subject's first CN, or when it
 * has no CN its first DNS SAN. malloc'd; NULL when it has neither, or one
 * that is too long or holds a NUL. */
static char *name_of(const gnutls_datum_t *der)
{
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) < 0)
        return NULL;
    char buf[256], *name = NULL;
    size_t len = sizeof buf;
    if (gnutls_x509_crt_import(crt, der, GNUTLS_X509_FMT_DER) >= 0) {
        int rc = gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &len);
        if (rc >= 0) {
            if (len > 0 && len < sizeof buf && !memchr(buf, '\0', len))
                name = strndup(buf, len);
        } else if (rc == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE) {   /* no CN at all (not: too long) */
            for (unsigned i = 0;; i++) {
                unsigned critical;
                len = sizeof buf;
                rc = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &len, &critical);
                if (rc == GNUTLS_E_SHORT_MEMORY_BUFFER)
                    continue;
                if (rc < 0)
                    break;
                if (rc == GNUTLS_SAN_DNSNAME) {
                    if (len > 0 && len < sizeof buf && !memchr(buf, '\0', len))
                        name = strndup(buf, len);
                    break;
                }
            }
        }
    }
    gnutls_x509_crt_deinit(crt);
    return name;
}

/* ctx's TLS session, when it came over HTTPS. */
static gnutls_session_t session_of(req_ctx *ctx)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(ctx->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    return i ? (gnutls_session_t)i->tls_session : NULL;
}

/* Looks at the connection's client certificate, once (conn_info.cert). */
static void look_at_cert(req_ctx *ctx, gnutls_session_t session)
{
    conn_info *ci = ctx->ci;
    if (ci->cert)
        return;
    ci->cert = -1;
    unsigned n = 0, status = 0;
    const gnutls_datum_t *peers = gnutls_certificate_get_peers(session, &n);
    if (!peers || n == 0)
        return;
    /* A full handshake checked it already (verify_client in http_tls.c: a
     * certificate that does not check out ends the handshake), and a check
     * costs about a millisecond here, which every new connection's first
     * request would wait for. A resumed session brings the certificate of
     * an earlier handshake: checked again, against the clock of now. */
    if (gnutls_session_is_resumed(session) &&
        (gnutls_certificate_verify_peers2(session, &status) < 0 || status != 0))
        return;
    ci->cert = 1;
    ci->cert_name = name_of(&peers[0]);
}

const char *http_client_cert_name(req_ctx *ctx, char *buf, size_t cap)
{
    gnutls_session_t session;
    if (!http_tls_client_ca() || !ctx->ci || !(session = session_of(ctx)))
        return NULL;
    look_at_cert(ctx, session);
    if (ctx->ci->cert != 1 || !ctx->ci->cert_name || strlen(ctx->ci->cert_name) >= cap)
        return NULL;
    strcpy(buf, ctx->ci->cert_name);
    return buf;
}

bool http_client_cert_missing(req_ctx *ctx)
{
    gnutls_session_t session;
    if (!http_tls_client_ca() || !(session = session_of(ctx)))
        return false;   /* not asked for, or not over HTTPS (a Unix socket: its file's mode) */
    if (!ctx->ci)
        return true;    /* (no registry entry: out of memory) */
    look_at_cert(ctx, session);
    return ctx->ci->cert != 1;
}

/* The listener ctx came by: its daemon's. */
unsigned http_listener_kind(req_ctx *ctx)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(ctx->conn, MHD_CONNECTION_INFO_DAEMON);
    for (int k = 0; i && k < ctx->sh->ndaemons; k++)
        if (ctx->sh->daemons[k].d == i->daemon)
            return ctx->sh->daemons[k].l->kind;
    return 0;
}
