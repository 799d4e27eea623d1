/* audit.c - see audit.h. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jsonio.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int fd = -1;   /* written under mu; read alone to skip work */
static char *path_open;   /* NULL: stderr (or closed) */

static int open_path(const char *path, char *err, size_t errlen)
{
    if (!strcmp(path, "-"))
        return dup(STDERR_FILENO);
    int f = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (f < 0 && err)
        snprintf(err, errlen, "--audit-log %s: %s", path, strerror(errno));
    return f;
}

int audit_open(const char *path, char *err, size_t errlen)
{
    int f = open_path(path, err, errlen);
    if (f < 0)
        return -1;
    pthread_mutex_lock(&mu);
    if (fd >= 0)
        close(fd);
    fd = f;
    free(path_open);
    path_open = strcmp(path, "-") ? strdup(path) : NULL;
    pthread_mutex_unlock(&mu);
    return 0;
}

int audit_reopen(void)
{
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (fd >= 0 && path_open) {
        int f = open_path(path_open, NULL, 0);
        if (f < 0) {
            rc = -1;
        } else {
            close(fd);
            fd = f;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

bool audit_on(void)
{
    pthread_mutex_lock(&mu);
    bool on = fd >= 0;
    pthread_mutex_unlock(&mu);
    return on;
}

/* Appends ,"key":"value" (escaped); NULL values are left out. */
static void put_str(char *out, size_t cap, size_t *o, const char *key, const char *value)
{
    if (!value || *o >= cap)
        return;
    char esc[1200];
    int n = snprintf(out + *o, cap - *o, ",\"%s\":\"%s\"", key, jsonio_escape(value, esc, sizeof esc));
    *o += n > 0 ? (size_t)n : 0;
}

size_t audit_format(const audit_event *ev, long long now_ms, char *out, size_t cap)
{
    time_t secs = (time_t)(now_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    int n = snprintf(out, cap, "{\"time\":\"%s.%03lldZ\"", when, now_ms % 1000);
    size_t o = n > 0 ? (size_t)n : 0;
    put_str(out, cap, &o, "event", ev->event);
    if (o < cap) {
        if (ev->principal)
            put_str(out, cap, &o, "principal", ev->principal);
        else
            o += (size_t)snprintf(out + o, cap - o, ",\"principal\":null");
    }
    put_str(out, cap, &o, "client", ev->client);
    put_str(out, cap, &o, "route", ev->route);
    put_str(out, cap, &o, "name", ev->name);
    put_str(out, cap, &o, "outcome", ev->outcome);
    if (ev->fence > 0 && o < cap)
        o += (size_t)snprintf(out + o, cap - o, ",\"fence\":%lld", ev->fence);
    if (o + 2 >= cap)
        return 0;
    out[o++] = '}';
    out[o++] = '\n';
    out[o] = '\0';
    return o;
}

void audit_write(const audit_event *ev)
{
    if (atomic_load(&fd) < 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[4096];
    size_t n = audit_format(ev, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, line, sizeof line);
    if (!n)
        return;
    pthread_mutex_lock(&mu);
    if (fd >= 0) {
        ssize_t w = write(fd, line, n);
        (void)w;
    }
    pthread_mutex_unlock(&mu);
}

void audit_close(void)
{
    pthread_mutex_lock(&mu);
    if (fd >= 0)
        close(fd);
    fd = -1;
    free(path_open);
    path_open = NULL;
    pthread_mutex_unlock(&mu);
}
