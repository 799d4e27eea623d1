/* log.h - one line per notable event on stderr, as JSON (default) or text.
 *
 * log_event(level, event, key, value, key, value, ..., NULL): values are
 * strings (format numbers first). Lines are written with one write(2), so
 * threads never interleave. Never pass a token or a secret.
 */
#ifndef RL_LOG_H
#define RL_LOG_H

#include "conf.h"

void log_init(enum conf_log_level level, enum conf_log_format format);
void log_event(enum conf_log_level level, const char *event, ...)
    __attribute__((sentinel));

#endif
