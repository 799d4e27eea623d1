/* http_tls.c - HTTPS on the TCP listeners: libmicrohttpd's own TLS
 * (GnuTLS), with the certificate given to each handshake by a callback
 * (MHD_OPTION_HTTPS_CERT_CALLBACK2), so that SIGHUP can put a new one in
 * force without a restart and without touching a connection (http.h,
 * http_int.h).
 *
 * Who owns what: the set in force (the certificate chain, DER, and the key,
 * PEM, as read from the files) is the process's, guarded by set_mu: each
 * handshake, on whichever loop, copies it into GnuTLS's own objects under
 * the lock, and GnuTLS frees that copy with its session
 * (GNUTLS_CERT_RETR_DEINIT_ALL), so a set is freed as soon as it is
 * replaced and no session ever points into one. A connection keeps the
 * certificate it was handshaken with; the next handshake gets the new one.
 *
 * With --tls-client-ca-file (read once, at start: a new CA needs a
 * restart), libmicrohttpd asks every client for a certificate
 * (GNUTLS_CERT_REQUEST, with the CA as its trust list) and each session
 * checks the one it gets as soon as it arrives (verify_client): one that
 * does not chain to the CA, has expired or is not yet valid fails the
 * handshake. A client that sends none is let through the handshake, so that
 * probes (/healthz, `redlockd --health-check`) need none, and every call
 * that needs a right is answered 401 (http_client_cert_missing).
 */
#include "http_int.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <time.h>

typedef struct tls_set {
    gnutls_datum_t *der;        /* the chain, leaf first (gnutls_free'd) */
    unsigned nder;
    gnutls_datum_t key;         /* the key file's bytes, PEM (gnutls_free'd) */
} tls_set;

static pthread_mutex_t set_mu = PTHREAD_MUTEX_INITIALIZER;
static tls_set *in_force;      /* set_mu; NULL: HTTPS off */
static char *client_ca;        /* --tls-client-ca-file's PEM (start only; NULL: none) */

static void set_free(tls_set *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->nder; i++)
        gnutls_free(t->der[i].data);
    gnutls_free(t->der);
    if (t->key.data) {
        explicit_bzero(t->key.data, t->key.size);
        gnutls_free(t->key.data);
    }
    free(t);
}

/* Reads the certificate chain and its key (cfg's files) into a new set;
 * checks that the key is the leaf's and says what the leaf is (into what).
 * NULL with err on failure. */
static tls_set *set_load(const conf *cfg, char *what, size_t whatlen, char *err, size_t errlen)
{
    gnutls_datum_t pem = {NULL, 0};
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    tls_set *t = calloc(1, sizeof *t);
    int rc = t ? gnutls_load_file(cfg->tls_cert_file, &pem) : GNUTLS_E_MEMORY_ERROR;
    if (rc < 0) {
        snprintf(err, errlen, "--tls-cert-file %s: cannot read it: %s", cfg->tls_cert_file, gnutls_strerror(rc));
        goto fail;
    }
    rc = gnutls_x509_crt_list_import2(&crts, &n, &pem, GNUTLS_X509_FMT_PEM, GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED);
    if (rc < 0 || n == 0) {
        snprintf(err, errlen, "--tls-cert-file %s: not a PEM certificate chain (leaf first): %s", cfg->tls_cert_file,
                 rc < 0 ? gnutls_strerror(rc) : "no certificate");
        goto fail;
    }
    rc = gnutls_load_file(cfg->tls_key_file, &t->key);
    if (rc < 0) {
        snprintf(err, errlen, "--tls-key-file %s: cannot read it: %s", cfg->tls_key_file, gnutls_strerror(rc));
        goto fail;
    }
    /* The pair as GnuTLS will use it: a key that is not the certificate's
     * is refused here (GNUTLS_E_CERTIFICATE_KEY_MISMATCH), not at the first
     * handshake. */
    gnutls_certificate_credentials_t probe;
    rc = gnutls_certificate_allocate_credentials(&probe);
    if (rc >= 0) {
        rc = gnutls_certificate_set_x509_key_mem2(probe, &pem, &t->key, GNUTLS_X509_FMT_PEM, NULL, 0);
        gnutls_certificate_free_credentials(probe);
    }
    if (rc < 0) {
        snprintf(err, errlen, "--tls-cert-file %s with --tls-key-file %s: %s", cfg->tls_cert_file, cfg->tls_key_file,
                 gnutls_strerror(rc));
        goto fail;
    }
    t->der = gnutls_malloc(n * sizeof *t->der);
    for (unsigned i = 0; t->der && i < n; i++, t->nder++)
        if ((rc = gnutls_x509_crt_export2(crts[i], GNUTLS_X509_FMT_DER, &t->der[i])) < 0)
            break;
    if (!t->der || t->nder < n) {
        snprintf(err, errlen, "--tls-cert-file %s: %s", cfg->tls_cert_file,
                 t->der ? gnutls_strerror(rc) : "out of memory");
        goto fail;
    }
    gnutls_datum_t dn = {NULL, 0};
    time_t until = gnutls_x509_crt_get_expiration_time(crts[0]);
    struct tm tm;
    char when[32] = "?";
    if (until != (time_t)-1 && gmtime_r(&until, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (gnutls_x509_crt_get_dn2(crts[0], &dn) >= 0) {
        snprintf(what, whatlen, "%s, valid until %s", (const char *)dn.data, when);
        gnutls_free(dn.data);
    } else {
        snprintf(what, whatlen, "valid until %s", when);
    }
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    gnutls_free(pem.data);
    return t;
fail:
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    gnutls_free(pem.data);
    set_free(t);
    return NULL;
}

/* Each session, as soon as the client's certificate has arrived: one that
 * does not check out against --tls-client-ca-file ends the handshake. */
static int verify_client(gnutls_session_t session)
{
    unsigned n = 0, status = 0;
    if (!gnutls_certificate_get_peers(session, &n) || n == 0)
        return 0;   /* none: 401 on every call that needs a right */
    int rc = gnutls_certificate_verify_peers2(session, &status);
    if (rc >= 0 && status == 0)
        return 0;
    /* The client is told why (libmicrohttpd closes a failed handshake
     * without a word): best effort, the socket may be full. */
    gnutls_alert_send(session, GNUTLS_AL_FATAL, rc < 0 ? GNUTLS_A_BAD_CERTIFICATE
                                              : status & GNUTLS_CERT_EXPIRED ? GNUTLS_A_CERTIFICATE_EXPIRED
                                              : status & GNUTLS_CERT_SIGNER_NOT_FOUND ? GNUTLS_A_UNKNOWN_CA
                                                                                 : GNUTLS_A_BAD_CERTIFICATE);
    static log_limit limit = LOG_LIMIT_INIT;
    unsigned long long suppressed;
    if (log_allow(&limit, loop_now_us(), &suppressed)) {
        gnutls_datum_t why = {NULL, 0};
        char more[24];
        snprintf(more, sizeof more, "%llu", suppressed);
        if (rc >= 0)
            gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &why, 0);
        log_event(LOG_LEVEL_WARN, "tls_client_refused", "why",
                  rc < 0 ? gnutls_strerror(rc) : why.data ? (const char *)why.data : "not verified",
                  "suppressed_since_last", more, NULL);
        gnutls_free(why.data);
    }
    return -1;
}

/* libmicrohttpd's certificate callback (GnuTLS's retrieve function 3), on
 * the loop running the handshake: a copy of the set in force, which GnuTLS
 * frees with the session. */
static int retrieve(gnutls_session_t session, const struct gnutls_cert_retr_st *info, gnutls_pcert_st **certs,
                    unsigned int *ncerts, gnutls_ocsp_data_st **ocsp, unsigned int *nocsp, gnutls_privkey_t *key,
                    unsigned int *flags)
{
    (void)info;
    *certs = NULL;
    *ncerts = 0;
    *ocsp = NULL;
    *nocsp = 0;
    *key = NULL;
    *flags = GNUTLS_CERT_RETR_DEINIT_ALL;
    gnutls_pcert_st *pc = NULL;
    gnutls_privkey_t k = NULL;
    unsigned done = 0;
    int rc = -1;
    pthread_mutex_lock(&set_mu);
    const tls_set *t = in_force;
    if (t && (pc = gnutls_malloc(t->nder * sizeof *pc)) && gnutls_privkey_init(&k) >= 0 &&
        gnutls_privkey_import_x509_raw(k, &t->key, GNUTLS_X509_FMT_PEM, NULL, 0) >= 0) {
        while (done < t->nder && gnutls_pcert_import_x509_raw(&pc[done], &t->der[done], GNUTLS_X509_FMT_DER, 0) >= 0)
            done++;
        rc = done == t->nder ? 0 : -1;
    }
    pthread_mutex_unlock(&set_mu);
    if (rc < 0) {
        for (unsigned i = 0; i < done; i++)
            gnutls_pcert_deinit(&pc[i]);
        gnutls_free(pc);
        if (k)
            gnutls_privkey_deinit(k);
        return -1;   /* the handshake fails */
    }
    *certs = pc;
    *ncerts = done;
    *key = k;
    if (client_ca)
        gnutls_session_set_verify_function(session, verify_client);
    return 0;
}

int http_tls_load(const conf *cfg, char *err, size_t errlen)
{
    if (!cfg->tls_cert_file)
        return 0;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK2) != MHD_YES) {
        snprintf(err, errlen, "--tls-cert-file: this libmicrohttpd was built without TLS (GnuTLS 3.6.3 or later)");
        return -1;
    }
    char what[400];
    tls_set *t = set_load(cfg, what, sizeof what, err, errlen);
    if (!t)
        return -1;
    if (cfg->tls_client_ca_file) {
        /* Checked as libmicrohttpd will use it: a trust list of PEM
         * certificates. */
        gnutls_datum_t ca = {NULL, 0};
        gnutls_certificate_credentials_t probe = NULL;
        int rc = gnutls_load_file(cfg->tls_client_ca_file, &ca);
        if (rc >= 0 && (rc = gnutls_certificate_allocate_credentials(&probe)) >= 0)
            rc = gnutls_certificate_set_x509_trust_mem(probe, &ca, GNUTLS_X509_FMT_PEM);
        if (probe)
            gnutls_certificate_free_credentials(probe);
        if (rc > 0 && !(client_ca = malloc(ca.size + 1)))
            rc = GNUTLS_E_MEMORY_ERROR;
        if (rc <= 0) {
            snprintf(err, errlen, "--tls-client-ca-file %s: %s", cfg->tls_client_ca_file,
                     rc < 0 ? gnutls_strerror(rc) : "no PEM certificate in it");
            gnutls_free(ca.data);
            set_free(t);
            return -1;
        }
        memcpy(client_ca, ca.data, ca.size);
        client_ca[ca.size] = '\0';
        gnutls_free(ca.data);
    }
    pthread_mutex_lock(&set_mu);
    in_force = t;
    pthread_mutex_unlock(&set_mu);
    log_event(LOG_LEVEL_INFO, "tls_loaded", "certificate", what, "client_ca",
              cfg->tls_client_ca_file ? cfg->tls_client_ca_file : "none", NULL);
    return 0;
}

int http_reload_tls(const conf *cfg, char *err, size_t errlen)
{
    if (!cfg->tls_cert_file || !http_tls_on())
        return 0;
    char what[400];
    tls_set *t = set_load(cfg, what, sizeof what, err, errlen);
    if (!t)
        return -1;
    pthread_mutex_lock(&set_mu);
    tls_set *old = in_force;
    in_force = t;
    pthread_mutex_unlock(&set_mu);
    set_free(old);   /* no session points into it: each took its own copy */
    log_event(LOG_LEVEL_INFO, "reloaded", "what", "tls certificate", "certificate", what, NULL);
    return 0;
}

void http_tls_free(void)
{
    pthread_mutex_lock(&set_mu);
    tls_set *t = in_force;
    in_force = NULL;
    pthread_mutex_unlock(&set_mu);
    set_free(t);
    free(client_ca);
    client_ca = NULL;
}

bool http_tls_on(void)
{
    pthread_mutex_lock(&set_mu);
    bool on = in_force != NULL;
    pthread_mutex_unlock(&set_mu);
    return on;
}

bool http_tls_client_ca(void)
{
    return client_ca != NULL;   /* (set before any loop serves, never changed until the end) */
}

int http_tls_daemon_options(struct MHD_OptionItem *opts)
{
    int n = 0;
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK2, 0, (void *)retrieve};
    if (client_ca)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, client_ca};
    return n;
}
