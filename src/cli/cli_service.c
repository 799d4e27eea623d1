/* cli_service.c - see cli_parse.h: the service's URL (http, https or a
 * Unix socket), its TLS files, and which bearer token wins. Pure: the
 * values come in as strings; cli_http.c reads the environment and opens
 * the files. */
#include "cli_parse.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char url_forms[] = "http://HOST:PORT, https://HOST:PORT or unix:/PATH/redlockd.sock";

/* Parses url into s's scheme, shown, base and socket_path. Returns 0, or
 * -1 with why (static text), -2 when the scheme is what is wrong. */
static int parse_url(const char *url, cli_service *s, const char **why)
{
    size_t skip = !strncasecmp(url, "unix:", 5) ? 5 : !strncasecmp(url, "http://", 7) ? 7
                  : !strncasecmp(url, "https://", 8) ? 8 : 0;
    if (!skip) {
        *why = !*url ? "empty" : strstr(url, "://") ? "a scheme redlock does not speak" : "no scheme";
        return -2;
    }
    s->scheme = skip == 5 ? CLI_SCHEME_UNIX : skip == 7 ? CLI_SCHEME_HTTP : CLI_SCHEME_HTTPS;
    size_t n = strlen(url);
    while (n > skip && url[n - 1] == '/')
        n--;
    if (n > CLI_URL_MAX) {
        *why = "too long";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c <= 0x20 || c == 0x7f) {
            *why = "holds a space or a control character";
            return -1;
        }
        if (c == '?' || c == '#') {
            *why = "holds a query or a fragment (the request's path is appended to it)";
            return -1;
        }
    }
    memcpy(s->shown, url, n);
    s->shown[n] = '\0';
    if (s->scheme == CLI_SCHEME_UNIX) {
        const char *path = s->shown + skip;
        if (!*path) {
            *why = "names no socket file (unix:/PATH/redlockd.sock)";
            return -1;
        }
        if (strlen(path) > CLI_SOCKET_PATH_MAX) {
            *why = "the socket's path is longer than 107 bytes";
            return -1;
        }
        snprintf(s->socket_path, sizeof s->socket_path, "%s", path);
        snprintf(s->base, sizeof s->base, "%s", CLI_UNIX_BASE);
        return 0;
    }
    /* The authority: HOST, [V6] or either with :PORT. */
    const char *host = s->shown + skip;
    size_t alen = strcspn(host, "/");
    if (memchr(host, '@', alen)) {
        *why = "holds user:password@ (the token goes in --auth-token-file or REDLOCK_TOKEN)";
        return -1;
    }
    const char *port = NULL;
    if (host[0] == '[') {
        const char *close = memchr(host, ']', alen);
        if (!close || close == host + 1 || (close + 1 < host + alen && close[1] != ':')) {
            *why = "a bad [IPv6] host";
            return -1;
        }
        if (close + 1 < host + alen)
            port = close + 2;
    } else {
        const char *colon = memchr(host, ':', alen);
        if (alen == 0 || colon == host) {
            *why = "no host";
            return -1;
        }
        if (colon)
            port = colon + 1;
    }
    if (port) {
        size_t plen = (size_t)(host + alen - port);
        long v = 0;
        for (size_t i = 0; i < plen && v <= 65535; i++)
            v = (port[i] >= '0' && port[i] <= '9') ? v * 10 + (port[i] - '0') : 65536;
        if (plen == 0 || plen > 5 || v < 1 || v > 65535) {
            *why = "a bad port (1 to 65535)";
            return -1;
        }
    }
    s->socket_path[0] = '\0';
    snprintf(s->base, sizeof s->base, "%s", s->shown);
    return 0;
}

/* flag, else env; "" counts as not given for a variable, as an error for a
 * flag (said in err). Returns 0 with *v and *from (NULL: neither), -1. */
static int pick(const char *flag, const char *flag_name, const char *env, const char *env_name, const char **v,
                const char **from, char *err, size_t errlen)
{
    *v = NULL;
    *from = NULL;
    if (flag) {
        if (!*flag) {
            snprintf(err, errlen, "%s needs a value", flag_name);
            return -1;
        }
        *v = flag;
        *from = flag_name;
    } else if (env && *env) {
        *v = env;
        *from = env_name;
    }
    return 0;
}

int cli_service_resolve(const cli_service_in *flags, const cli_service_in *env, cli_service *s, char *err,
                        size_t errlen)
{
    static const cli_service_in none = {0};
    if (!flags)
        flags = &none;
    if (!env)
        env = &none;
    memset(s, 0, sizeof *s);
    err[0] = '\0';
    const char *url, *url_from, *why = NULL;
    if (pick(flags->url, "--url", env->url, "REDLOCK_URL", &url, &url_from, err, errlen) < 0)
        return -1;
    int rc = parse_url(url ? url : CLI_DEFAULT_URL, s, &why);
    if (rc < 0) {
        snprintf(err, errlen, "%s %.200s: %s%s%s", url_from, url, why, rc == -2 ? "; the forms are " : "",
                 rc == -2 ? url_forms : "");
        return -1;
    }
    /* The TLS files: a flag given for a URL that is not https is a mistake;
     * a variable may be meant for another service, and is passed over. */
    const char *const names[3][2] = {{"--cacert", "REDLOCK_CACERT"}, {"--cert", "REDLOCK_CERT"},
                                     {"--key", "REDLOCK_KEY"}};
    const char *fv[3] = {flags->cacert, flags->cert, flags->key};
    const char *ev[3] = {env->cacert, env->cert, env->key};
    const char *v[3], *from[3];
    for (int i = 0; i < 3; i++) {
        if (fv[i] && s->scheme != CLI_SCHEME_HTTPS) {
            snprintf(err, errlen, "%s is for an https:// service, and the service is %.200s", names[i][0],
                     s->shown);
            return -1;
        }
        if (pick(fv[i], names[i][0], s->scheme == CLI_SCHEME_HTTPS ? ev[i] : NULL, names[i][1], &v[i], &from[i],
                 err, errlen) < 0)
            return -1;
    }
    /* The key goes with its certificate: REDLOCK_KEY only beside REDLOCK_CERT. */
    if (from[2] && from[2] == names[2][1] && from[1] != names[1][1]) {
        v[2] = from[2] = NULL;
        if (!from[1]) {
            snprintf(err, errlen, "REDLOCK_KEY needs REDLOCK_CERT (or --cert), the certificate it belongs to");
            return -1;
        }
    }
    if (from[2] && !from[1]) {
        snprintf(err, errlen, "--key needs --cert, the certificate it belongs to");
        return -1;
    }
    s->cacert = v[0];
    s->cert = v[1];
    s->key = v[2];
    s->cacert_from = from[0];
    s->cert_from = from[1];
    s->key_from = from[2];
    return 0;
}

enum cli_token_from cli_token_source(const char *file, const char *auth_env, const char *token_env)
{
    if (file)
        return CLI_TOKEN_FILE;
    if (auth_env)
        return *auth_env ? CLI_TOKEN_AUTH_ENV : CLI_TOKEN_NONE;
    return token_env && *token_env ? CLI_TOKEN_ENV : CLI_TOKEN_NONE;
}

const char *cli_child_auth_token(const char *auth_env, const char *token_env)
{
    switch (cli_token_source(NULL, auth_env, token_env)) {
    case CLI_TOKEN_AUTH_ENV: return auth_env;
    case CLI_TOKEN_ENV: return token_env;
    default: return "";
    }
}

bool cli_tls_refused_client(const char *error)
{
    static const char *const alerts[] = {
        "alert certificate required", "alert unknown ca", "alert bad certificate", "alert certificate expired",
        "alert certificate revoked", "alert certificate unknown", "alert unsupported certificate",
        "alert access denied",
    };
    for (size_t i = 0; error && i < sizeof alerts / sizeof alerts[0]; i++)
        if (strstr(error, alerts[i]))
            return true;
    return false;
}
