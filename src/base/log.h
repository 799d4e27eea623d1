/* log.h - one line per notable event on stderr, as JSON (default) or text.
 *
 * log_event(level, event, key, value, key, value, ..., NULL): values are
 * strings (format numbers first). Lines are written with one write(2), so
 * threads never interleave. Never pass a token or a secret.
 */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "conf.h"

/* A rate limit for one kind of line: lines caused by clients (a dropped
 * connection) or repeated per-master errors must not flood the log. At most
 * one line per LOG_LIMIT_INTERVAL_US; the next line says how many were
 * suppressed in between. Thread-safe. */
#define LOG_LIMIT_INTERVAL_US 1000000ULL
typedef struct log_limit {
    pthread_mutex_t mu;
    uint64_t next_us;
    unsigned long long suppressed;
} log_limit;
#define LOG_LIMIT_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0}

/* True when a line may be written now (then *suppressed is how many were
 * not since the last one); false counts one more suppressed. now_us is
 * CLOCK_MONOTONIC. */
bool log_allow(log_limit *l, uint64_t now_us, unsigned long long *suppressed);

void log_init(enum conf_log_level level, enum conf_log_format format);
void log_event(enum conf_log_level level, const char *event, ...)
    __attribute__((sentinel));

#endif
