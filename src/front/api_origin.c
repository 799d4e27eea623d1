/* api_origin.c - who may call from a browser: the Host and Origin rules of
 * api.h (api_origin_verdict). Pure: the headers and the configuration in,
 * a verdict out. */
#include "api.h"

#include <stdio.h>
#include <string.h>

/* v as it may go into a message: printable ASCII, '?' for anything else,
 * at most 100 bytes (the header is the client's, and the message JSON). */
static void shown(const char *v, char *out, size_t cap)
{
    size_t w = 0;
    for (const char *p = v; *p && w + 1 < cap && w < 100; p++)
        out[w++] = *p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\' ? *p : '?';
    out[w] = '\0';
}

static bool listed(char *const *list, int n, const char *v)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], v))
            return true;
    return false;
}

static bool host_ok(const conf *cfg, bool loopback_listener, const char *host)
{
    if (!host)
        return true;   /* HTTP/1.0 (an HTTP/1.1 request without one is bad framing) */
    if (!loopback_listener && cfg->nallow_hosts == 0)
        return true;   /* reached by names it cannot know (0.0.0.0 in a container) */
    char h[CONF_HOST_MAX + 1];
    int port;
    if (conf_host_norm(host, strlen(host), h, sizeof h, &port) < 0)
        return false;
    return conf_host_loopback(h) || listed(cfg->allow_hosts, cfg->nallow_hosts, h);
}

static bool origin_ok(const conf *cfg, bool https, const char *host, const char *origin)
{
    if (!origin)
        return true;   /* no browser's request */
    char o[CONF_ORIGIN_MAX + 1], own[CONF_ORIGIN_MAX + 1], url[CONF_ORIGIN_MAX + 8];
    if (conf_origin_norm(origin, strlen(origin), o, sizeof o) < 0)
        return false;  /* "null" (a sandboxed page, a file), or no origin at all */
    if (listed(cfg->allow_origins, cfg->nallow_origins, o))
        return true;
    if (!host)
        return false;
    int n = snprintf(url, sizeof url, "%s://%s", https ? "https" : "http", host);
    return n > 0 && (size_t)n < sizeof url && conf_origin_norm(url, (size_t)n, own, sizeof own) == 0 &&
           !strcmp(o, own);
}

int api_origin_verdict(const conf *cfg, unsigned listener, enum api_route route, const char *host,
                       const char *origin, char *msg, size_t msglen)
{
    bool loopback_listener = listener & API_LISTENER_LOOPBACK;
    bool probe = route == ROUTE_HEALTHZ || route == ROUTE_DAPR_HEALTHZ;
    char v[104];
    if (!probe && !host_ok(cfg, loopback_listener, host)) {
        shown(host, v, sizeof v);
        snprintf(msg, msglen, "the Host header (%s) names neither this service on a loopback address "
                 "(localhost, 127.0.0.1, [::1]) nor a host of --allow-host: a page of another name "
                 "(DNS rebinding?) may not call it", v);
        return API_E_FORBIDDEN_HOST;
    }
    if (probe || route == ROUTE_READYZ || route == ROUTE_METRICS || origin_ok(cfg, listener & API_LISTENER_HTTPS, host, origin))
        return -1;
    shown(origin, v, sizeof v);
    snprintf(msg, msglen, "a page of the origin %s may not call this service: it is not the "
             "service's own nor one of --allow-origin", v);
    return API_E_FORBIDDEN_ORIGIN;
}
