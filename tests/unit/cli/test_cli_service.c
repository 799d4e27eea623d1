/* Unit tests of the redlock client's service (src/cli/cli_service.c): the
 * URL forms (http, https, a Unix socket), the TLS files, which flag or
 * variable wins, and which bearer token. */
#include <criterion/criterion.h>
#include <string.h>

#include "cli_parse.h"

#define IN(...) (&(const cli_service_in){__VA_ARGS__})

static cli_service svc;

static void resolves(const cli_service_in *flags, const cli_service_in *env)
{
    char err[300];
    cr_assert_eq(cli_service_resolve(flags, env, &svc, err, sizeof err), 0, "refused: %s", err);
}

static void svc_refused(const cli_service_in *flags, const cli_service_in *env, const char *says)
{
    char err[300];
    cr_assert_eq(cli_service_resolve(flags, env, &svc, err, sizeof err), -1, "accepted (wanted '%s')", says);
    cr_assert(strstr(err, says) && !strchr(err, '\n'), "'%s' does not say '%s' in one line", err, says);
}

Test(cli_service, url_forms_and_which_wins)
{
    resolves(NULL, NULL);
    cr_assert_eq(svc.scheme, CLI_SCHEME_HTTP);
    cr_assert_str_eq(svc.base, CLI_DEFAULT_URL);
    resolves(IN(.url = "https://locks.example:8443/"), IN(.url = "unix:/x.sock"));   /* the flag wins */
    cr_assert_eq(svc.scheme, CLI_SCHEME_HTTPS);
    cr_assert_str_eq(svc.base, "https://locks.example:8443");
    cr_assert_str_eq(svc.socket_path, "");
    resolves(NULL, IN(.url = "unix:/run/redlockd/redlockd.sock"));
    cr_assert_eq(svc.scheme, CLI_SCHEME_UNIX);
    cr_assert_str_eq(svc.socket_path, "/run/redlockd/redlockd.sock");
    cr_assert_str_eq(svc.base, "http://localhost", "over a socket the Host is localhost");
    cr_assert_str_eq(svc.shown, "unix:/run/redlockd/redlockd.sock", "messages show the URL as given");
    resolves(IN(.url = "HTTP://[::1]:8080/behind/a/proxy//"), NULL);
    cr_assert_str_eq(svc.base, "HTTP://[::1]:8080/behind/a/proxy");
    resolves(NULL, IN(.url = ""));   /* a variable set to nothing is not set */
    cr_assert_str_eq(svc.base, CLI_DEFAULT_URL);
    resolves(IN(.url = "unix:relative/redlockd.sock"), NULL);
    cr_assert_str_eq(svc.socket_path, "relative/redlockd.sock");
    char path[200];
    snprintf(path, sizeof path, "unix:/%0106d", 0);   /* 107 bytes: the most sun_path holds */
    resolves(IN(.url = path), NULL);
    snprintf(path, sizeof path, "unix:/%0107d", 0);
    svc_refused(IN(.url = path), NULL, "longer than 107 bytes");
}

Test(cli_service, bad_urls_say_what_is_wrong)
{
    static const char *const bad[][2] = {
        {"localhost:8080", "no scheme; the forms are http://HOST:PORT, https://HOST:PORT or unix:/"},
        {"ftp://h", "a scheme redlock does not speak"}, {"unix:", "names no socket file"},
        {"unix:/", "names no socket file"}, {"http://", "no host"}, {"http://:80", "no host"},
        {"http://h:", "a bad port"}, {"http://h:0", "a bad port"}, {"http://h:65536", "a bad port"},
        {"http://h:8o", "a bad port"}, {"http://u:p@h", "user:password@"}, {"http://h/x?y=1", "query"},
        {"http://h/#x", "fragment"}, {"http://h /x", "space"}, {"http://h\x01", "control"},
        {"https://[::1", "[IPv6]"}, {"http://[::1]x", "[IPv6]"}, {"http://[]", "[IPv6]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        svc_refused(IN(.url = bad[i][0]), NULL, bad[i][1]);
    svc_refused(NULL, IN(.url = "ftp://h"), "REDLOCK_URL ftp://h: ");   /* names where it came from */
    svc_refused(IN(.url = ""), NULL, "--url needs a value");
    resolves(IN(.url = "http://h:65535"), NULL);
}

Test(cli_service, tls_files)
{
    resolves(IN(.url = "https://h", .cacert = "ca.pem", .cert = "c.pem", .key = "k.pem"),
             IN(.cacert = "env-ca.pem", .cert = "env-c.pem", .key = "env-k.pem"));
    cr_assert_str_eq(svc.cacert, "ca.pem");
    cr_assert_str_eq(svc.cert, "c.pem");
    cr_assert_str_eq(svc.key, "k.pem");
    cr_assert_str_eq(svc.cacert_from, "--cacert");
    resolves(NULL, IN(.url = "https://h", .cacert = "env-ca.pem", .cert = "env-c.pem", .key = "env-k.pem"));
    cr_assert_str_eq(svc.cacert, "env-ca.pem");
    cr_assert_str_eq(svc.key, "env-k.pem");
    cr_assert_str_eq(svc.cert_from, "REDLOCK_CERT");
    resolves(IN(.url = "https://h"), NULL);
    cr_assert(!svc.cacert && !svc.cert && !svc.key, "none given: the system's CAs, no client certificate");
    /* The key goes with its certificate: --cert without --key passes
     * REDLOCK_KEY over (the key may be in --cert's file). */
    resolves(IN(.url = "https://h", .cert = "c.pem"), IN(.key = "env-k.pem"));
    cr_assert_null(svc.key);
    resolves(IN(.url = "https://h", .key = "k.pem"), IN(.cert = "env-c.pem"));
    cr_assert_str_eq(svc.key, "k.pem");
    /* Not https: the variables are passed over, the flags refused. */
    resolves(IN(.url = "unix:/s"), IN(.cacert = "ca.pem", .cert = "c.pem", .key = "k.pem"));
    cr_assert(!svc.cacert && !svc.cert && !svc.key);
    svc_refused(IN(.cacert = "ca.pem"), NULL, "--cacert is for an https:// service, and the service is http://");
    svc_refused(IN(.url = "unix:/s", .cert = "c.pem"), NULL, "--cert is for an https:// service");
    svc_refused(IN(.url = "https://h", .key = "k.pem"), NULL, "--key needs --cert");
    svc_refused(IN(.url = "https://h"), IN(.key = "k.pem"), "REDLOCK_KEY needs REDLOCK_CERT");
    svc_refused(IN(.url = "https://h", .cacert = ""), NULL, "--cacert needs a value");
}

Test(cli_service, which_token_wins)
{
    cr_assert_eq(cli_token_source("/f", "a", "t"), CLI_TOKEN_FILE);
    cr_assert_eq(cli_token_source(NULL, "a", "t"), CLI_TOKEN_AUTH_ENV, "the older name wins when set");
    cr_assert_eq(cli_token_source(NULL, "", "t"), CLI_TOKEN_NONE, "set to nothing: no token");
    cr_assert_eq(cli_token_source(NULL, NULL, "t"), CLI_TOKEN_ENV);
    cr_assert_eq(cli_token_source(NULL, NULL, ""), CLI_TOKEN_NONE);
    cr_assert_eq(cli_token_source(NULL, NULL, NULL), CLI_TOKEN_NONE);
    /* What run gives CMD as REDLOCK_AUTH_TOKEN (its REDLOCK_TOKEN is the
     * lock's): what the environment gave, never a file's token. */
    cr_assert_str_eq(cli_child_auth_token(NULL, "t"), "t");
    cr_assert_str_eq(cli_child_auth_token("a", "t"), "a");
    cr_assert_str_eq(cli_child_auth_token("", "t"), "");
    cr_assert_str_eq(cli_child_auth_token(NULL, NULL), "");
}

Test(cli_service, tls_alerts_against_the_client)
{
    cr_assert(cli_tls_refused_client("OpenSSL SSL_read: error:0A00045C:SSL routines::tlsv13 alert certificate "
                                     "required, errno 0"));
    cr_assert(cli_tls_refused_client("error:0A000418:SSL routines::tlsv1 alert unknown ca"));
    cr_assert(cli_tls_refused_client("sslv3 alert bad certificate"));
    cr_assert_not(cli_tls_refused_client("SSL certificate problem: unable to get local issuer certificate"));
    cr_assert_not(cli_tls_refused_client("Failed to connect to 127.0.0.1 port 1"));
    cr_assert_not(cli_tls_refused_client(NULL));
}
