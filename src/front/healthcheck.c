/* healthcheck.c - see healthcheck.h. */
#include "healthcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

/* Sends the request and reads the status line. The HTTP status, or -1 with why set. */
static int get_healthz(int fd, const char *hostport, int64_t deadline_ms, const char **why)
{
    char req[400];
    int n = snprintf(req, sizeof req,
                     "GET /healthz HTTP/1.1\r\nHost: %s\r\nUser-Agent: redlockd-health-check\r\n"
                     "Connection: close\r\n\r\n",
                     hostport);
    size_t off = 0;
    while (off < (size_t)n) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline_ms) <= 0) {
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
        ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLIN, deadline_ms) <= 0) {
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

int healthcheck_run(const conf *c, FILE *out)
{
    int64_t deadline_ms = now_ms() + HEALTHCHECK_TIMEOUT_MS;
    /* The daemon listening on every address is reachable on loopback. */
    const char *host = c->listen.host;
    if (!strcmp(host, "0.0.0.0"))
        host = "127.0.0.1";
    else if (!strcmp(host, "::"))
        host = "::1";
    char port[8], hostport[300];
    snprintf(port, sizeof port, "%d", c->listen.port);
    snprintf(hostport, sizeof hostport, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
             c->listen.port);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        fprintf(out, "unhealthy: GET http://%s/healthz: %s\n", hostport, gai_strerror(gai));
        return 1;
    }
    const char *why = "no address";
    int status = -1;
    /* Like http_start, the first address is the one served; the rest are
     * tried only if it cannot be reached. */
    for (const struct addrinfo *a = ai; a && status < 0; a = a->ai_next) {
        int fd = connect_one(a, deadline_ms, &why);
        if (fd < 0)
            continue;
        status = get_healthz(fd, hostport, deadline_ms, &why);
        close(fd);
    }
    freeaddrinfo(ai);
    if (status == 200) {
        fprintf(out, "healthy: GET http://%s/healthz answered 200\n", hostport);
        return 0;
    }
    if (status > 0)
        fprintf(out, "unhealthy: GET http://%s/healthz answered %d\n", hostport, status);
    else
        fprintf(out, "unhealthy: GET http://%s/healthz: %s\n", hostport, why);
    return 1;
}
