/* healthcheck.c - see healthcheck.h. */
#include "healthcheck.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline. 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
    for (;;) {
        int64_t left = deadline_ms - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -1 : n;
    }
}

/* One line: healthy or not, and why. The exit status. */
static int report(FILE *out, const char *what, int status, const char *why)
{
    if (status == 200) {
        fprintf(out, "healthy: %s answered 200\n", what);
        return 0;
    }
    if (status > 0)
        fprintf(out, "unhealthy: %s answered %d\n", what, status);
    else
        fprintf(out, "unhealthy: %s: %s\n", what, why);
    return 1;
}

/* Connects to one address before the deadline; the socket or -1 with why set. */
static int connect_one(const struct addrinfo *ai, int64_t deadline_ms, const char **why)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            *why = strerror(errno);
            close(fd);
            return -1;
        }
        int r = wait_fd(fd, POLLOUT, deadline_ms);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr) {
            *why = r == 0 ? "timed out" : strerror(soerr ? soerr : errno);
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* The probe's connection: a socket, over TLS or not. */
typedef struct hc_conn {
    int fd;
    gnutls_session_t tls;       /* NULL: plain */
} hc_conn;

/* TLS I/O as the plain calls return it: >= 0, or -1 with errno (EAGAIN:
 * wait for *events). */
static ssize_t hc_io(hc_conn *c, bool out, void *buf, size_t n, short *events)
{
    *events = out ? POLLOUT : POLLIN;
    if (!c->tls)
        return out ? send(c->fd, buf, n, MSG_NOSIGNAL) : recv(c->fd, buf, n, 0);
    ssize_t r = out ? gnutls_record_send(c->tls, buf, n) : gnutls_record_recv(c->tls, buf, n);
    if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
        *events = gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN;
        errno = EAGAIN;
        return -1;
    }
    if (r == GNUTLS_E_PREMATURE_TERMINATION)
        return 0;
    if (r < 0) {
        errno = EPROTO;
        return -1;
    }
    return r;
}

/* The TLS handshake as a client, without checking the certificate: the
 * probe runs beside the daemon and asks only whether it answers, and the
 * certificate names the service, not the loopback address dialled. 0, or
 * -1 with why set. */
static int hc_tls(hc_conn *c, gnutls_certificate_credentials_t cred, int64_t deadline_ms, const char **why)
{
    static char msg[160];
    int rc = gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
    if (rc >= 0 && (rc = gnutls_set_default_priority(c->tls)) >= 0)
        rc = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, cred);
    if (rc >= 0) {
        gnutls_transport_set_int(c->tls, c->fd);
        do {
            rc = gnutls_handshake(c->tls);
            if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) {
                if (wait_fd(c->fd, gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN, deadline_ms) <= 0) {
                    *why = "timed out in the TLS handshake";
                    return -1;
                }
            } else if (rc < 0 && !gnutls_error_is_fatal(rc)) {
                rc = GNUTLS_E_AGAIN;   /* a warning alert: go on */
            }
        } while (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED);
    }
    if (rc < 0) {
        snprintf(msg, sizeof msg, "TLS handshake failed: %s", gnutls_strerror(rc));
        *why = msg;
        return -1;
    }
    return 0;
}

/* Sends the request and reads the status line. The HTTP status, or -1 with why set. */
static int get_healthz(hc_conn *c, const char *hostport, int64_t deadline_ms, const char **why)
{
    char req[400];
    int n = snprintf(req, sizeof req,
                     "GET /healthz HTTP/1.1\r\nHost: %s\r\nUser-Agent: redlockd-health-check\r\n"
                     "Connection: close\r\n\r\n",
                     hostport);
    size_t off = 0;
    short events;
    while (off < (size_t)n) {
        ssize_t w = hc_io(c, true, req + off, (size_t)n - off, &events);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(c->fd, events, deadline_ms) <= 0) {
                *why = "timed out sending";
                return -1;
            }
            continue;
        }
        if (w < 0) {
            *why = strerror(errno);
            return -1;
        }
        off += (size_t)w;
    }
    /* "HTTP/1.1 200 OK\r\n": the status line is all we need. */
    char buf[256];
    size_t got = 0;
    while (got < sizeof buf - 1 && !memchr(buf, '\n', got)) {
        ssize_t r = hc_io(c, false, buf + got, sizeof buf - 1 - got, &events);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(c->fd, events, deadline_ms) <= 0) {
                *why = "timed out waiting for the answer";
                return -1;
            }
            continue;
        }
        if (r < 0) {
            *why = strerror(errno);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    int status;
    if (got < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || sscanf(buf + 8, " %3d", &status) != 1) {
        *why = got ? "not an HTTP answer" : "connection closed without an answer";
        return -1;
    }
    return status;
}

/* The probe over a Unix socket (--listen unix:PATH): the HTTP status, or
 * -1 with why set. */
static int probe_unix(const char *path, int64_t deadline_ms, const char **why)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        *why = "the path is too long";
        return -1;
    }
    strcpy(a.sun_path, path);
    hc_conn c = {socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), NULL};
    if (c.fd < 0 || connect(c.fd, (struct sockaddr *)&a, sizeof a) < 0) {
        *why = errno == EAGAIN ? "its queue is full" : strerror(errno);
        if (c.fd >= 0)
            close(c.fd);
        return -1;
    }
    int status = get_healthz(&c, "localhost", deadline_ms, why);
    close(c.fd);
    return status;
}

/* The listener the probe asks: the first TCP one (the address a container's
 * port maps to), else the first Unix socket. */
static const conf_addr *probed(const conf *c)
{
    for (int i = 0; i < c->nlisten; i++)
        if (!c->listen[i].unix_socket)
            return &c->listen[i];
    return &c->listen[0];
}

int healthcheck_run(const conf *c, FILE *out)
{
    int64_t deadline_ms = now_ms() + HEALTHCHECK_TIMEOUT_MS;
    const conf_addr *l = probed(c);
    const char *why = "no address";
    int status = -1;
    char what[400];
    if (l->unix_socket) {
        snprintf(what, sizeof what, "GET http://localhost/healthz on unix:%s", l->host);
        status = probe_unix(l->host, deadline_ms, &why);
        return report(out, what, status, why);
    }
    /* The daemon listening on every address is reachable on loopback. */
    const char *host = l->host;
    if (!strcmp(host, "0.0.0.0"))
        host = "127.0.0.1";
    else if (!strcmp(host, "::"))
        host = "::1";
    char port[8], hostport[300];
    snprintf(port, sizeof port, "%d", l->port);
    snprintf(hostport, sizeof hostport, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, l->port);
    snprintf(what, sizeof what, "GET %s://%s/healthz", l->tls ? "https" : "http", hostport);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0)
        return report(out, what, -1, gai_strerror(gai));
    gnutls_certificate_credentials_t cred = NULL;
    if (l->tls && gnutls_certificate_allocate_credentials(&cred) < 0) {
        freeaddrinfo(ai);
        return report(out, what, -1, "out of memory");
    }
    /* Like http_start, the first address is the one served; the rest are
     * tried only if it cannot be reached. */
    for (const struct addrinfo *a = ai; a && status < 0; a = a->ai_next) {
        hc_conn conn = {connect_one(a, deadline_ms, &why), NULL};
        if (conn.fd < 0)
            continue;
        if (!l->tls || hc_tls(&conn, cred, deadline_ms, &why) == 0)
            status = get_healthz(&conn, hostport, deadline_ms, &why);
        if (conn.tls)
            gnutls_deinit(conn.tls);
        close(conn.fd);
    }
    freeaddrinfo(ai);
    if (cred)
        gnutls_certificate_free_credentials(cred);
    return report(out, what, status, why);
}
