/* log.c - see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum conf_log_level log_level = LOG_LEVEL_INFO;
static enum conf_log_format log_format = LOG_FORMAT_JSON;

static const char *level_names[] = {"error", "warn", "info", "debug"};

bool log_allow(log_limit *l, uint64_t now_us, unsigned long long *suppressed)
{
    pthread_mutex_lock(&l->mu);
    bool ok = now_us >= l->next_us;
    if (ok) {
        *suppressed = l->suppressed;
        l->suppressed = 0;
        l->next_us = now_us + LOG_LIMIT_INTERVAL_US;
    } else {
        l->suppressed++;
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void log_init(enum conf_log_level level, enum conf_log_format format)
{
    log_level = level;
    log_format = format;
}

/* Appends s to buf at *o, JSON-escaped when json, else quoted if it has spaces. */
static void put(char *buf, size_t len, size_t *o, const char *s, int json)
{
    int quote = json || strpbrk(s, " \"=") != NULL || !*s;
    if (quote && *o < len)
        buf[(*o)++] = '"';
    for (; *s && *o + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[(*o)++] = '\\';
            buf[(*o)++] = (char)c;
        } else if (c < 0x20) {
            *o += (size_t)snprintf(buf + *o, len - *o, "\\u%04x", c);
        } else {
            buf[(*o)++] = (char)c;
        }
    }
    if (quote && *o < len)
        buf[(*o)++] = '"';
}

void log_event(enum conf_log_level level, const char *event, ...)
{
    if (level > log_level)
        return;
    char buf[2048];
    size_t len = sizeof buf - 2;
    size_t o = 0;

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof when - w, ".%03ldZ", ts.tv_nsec / 1000000);

    int json = log_format == LOG_FORMAT_JSON;
    if (json)
        o += (size_t)snprintf(buf, len, "{\"time\":\"%s\",\"level\":\"%s\",\"event\":", when,
                              level_names[level]);
    else
        o += (size_t)snprintf(buf, len, "%s %-5s ", when, level_names[level]);
    put(buf, len, &o, event, json);

    va_list ap;
    va_start(ap, event);
    for (;;) {
        const char *key = va_arg(ap, const char *);
        if (!key)
            break;
        const char *val = va_arg(ap, const char *);
        if (o + 8 >= len)
            break;
        buf[o++] = json ? ',' : ' ';
        if (json) {
            put(buf, len, &o, key, 1);
            buf[o++] = ':';
        } else {
            o += (size_t)snprintf(buf + o, len - o, "%s=", key);
        }
        put(buf, len, &o, val ? val : "", json);
    }
    va_end(ap);
    if (o > len)
        o = len;
    if (json)
        buf[o++] = '}';
    buf[o++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, buf, o);
    (void)ignored;
}
