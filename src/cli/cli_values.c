/* cli_values.c - see cli_parse.h: durations, request bodies, retry delays. */
#include "cli_parse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- durations ---- */

int cli_parse_duration(const char *s, long long *ms, const char **why)
{
    static const struct { const char *unit; long long ms; } units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},   /* "ms" before "m" */
    };
    const char *p = s;
    long long total = 0;
    if (!s || !*s) {
        *why = "empty duration";
        return -1;
    }
    while (*p) {
        long long ip = 0, frac = 0, scale = 1;
        int digits = 0;
        while (*p >= '0' && *p <= '9') {
            if (ip > CLI_MAX_DURATION_MS) {
                *why = "too long (at most 596h)";
                return -1;
            }
            ip = ip * 10 + (*p++ - '0');
            digits++;
        }
        if (*p == '.') {
            p++;
            while (*p >= '0' && *p <= '9') {
                if (scale >= 1000000000LL) {
                    *why = "finer than a millisecond";
                    return -1;
                }
                frac = frac * 10 + (*p++ - '0');
                scale *= 10;
                digits++;
            }
        }
        if (digits == 0) {
            *why = "not a duration (examples: 500ms, 30s, 2m, 1h)";
            return -1;
        }
        long long unit = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t ul = strlen(units[i].unit);
            if (!strncmp(p, units[i].unit, ul)) {
                unit = units[i].ms;
                p += ul;
                break;
            }
        }
        if (!unit) {
            *why = *p ? "unknown unit (use ms, s, m or h)"
                      : "a unit is needed (500ms, 30s, 2m, 1h): a bare number could mean seconds or milliseconds";
            return -1;
        }
        if (ip > CLI_MAX_DURATION_MS / unit) {
            *why = "too long (at most 596h)";
            return -1;
        }
        if ((frac * unit) % scale != 0) {
            *why = "finer than a millisecond";
            return -1;
        }
        total += ip * unit + frac * unit / scale;
        if (total > CLI_MAX_DURATION_MS) {
            *why = "too long (at most 596h)";
            return -1;
        }
    }
    *ms = total;
    return 0;
}

int cli_parse_wait(const char *s, long long *ms, const char **why)
{
    if (s && !strcmp(s, "forever")) {
        *ms = CLI_WAIT_FOREVER;
        return 0;
    }
    return cli_parse_duration(s, ms, why);
}

void cli_format_ms(long long ms, char *out, size_t outlen)
{
    if (ms < 0)
        ms = 0;
    if (ms < 1000)
        snprintf(out, outlen, "%lldms", ms);
    else if (ms < 60000 && ms % 1000 == 0)
        snprintf(out, outlen, "%llds", ms / 1000);
    else if (ms < 59950)
        snprintf(out, outlen, "%.1fs", (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, outlen, "%lldm%02llds", ms / 60000, (ms % 60000) / 1000);
    else
        snprintf(out, outlen, "%lldh%02lldm", ms / 3600000, (ms % 3600000) / 60000);
}

/* o printed into out (outlen bytes), and deleted. Returns 0, or -1 when
 * o is NULL (no memory) or out is too small. */
static int print_body(cJSON *o, bool ok, char *out, size_t outlen)
{
    char *s = ok && o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    int rc = s && strlen(s) < outlen ? 0 : -1;
    if (rc == 0)
        memcpy(out, s, strlen(s) + 1);
    free(s);
    return rc;
}

int cli_acquire_body(long long ttl_ms, long long wait_ms, bool hold, const char *owner,
                     char *out, size_t outlen)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    if (ok && ttl_ms >= 0)
        ok = cJSON_AddNumberToObject(o, "ttl_ms", (double)ttl_ms) != NULL;
    if (ok)
        ok = cJSON_AddNumberToObject(o, "wait_ms", (double)wait_ms) != NULL;
    if (ok && hold)
        ok = cJSON_AddTrueToObject(o, "hold") != NULL;
    if (ok && owner)
        ok = cJSON_AddStringToObject(o, "owner", owner) != NULL;
    return print_body(o, ok, out, outlen);
}

int cli_permit_body(int limit, long long wait_ms, long long ttl_ms, const char *owner, char *out, size_t outlen)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "limit", limit) && cJSON_AddNumberToObject(o, "wait_ms", (double)wait_ms);
    if (ok && ttl_ms >= 0)
        ok = cJSON_AddNumberToObject(o, "ttl_ms", (double)ttl_ms) != NULL;
    if (ok && owner && owner[0])
        ok = cJSON_AddStringToObject(o, "owner", owner) != NULL;
    return print_body(o, ok, out, outlen);
}

int cli_campaign_body(const char *candidate, const char *value, long long ttl_ms, char *out, size_t outlen)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "candidate", candidate) &&
              cJSON_AddStringToObject(o, "value", value ? value : "");
    if (ok && ttl_ms >= 0)
        ok = cJSON_AddNumberToObject(o, "ttl_ms", (double)ttl_ms) != NULL;
    return print_body(o, ok, out, outlen);
}


long long cli_retry_delay_ms(long long retry_after_ms, double u)
{
    long long base = retry_after_ms < 50 ? 50 : retry_after_ms > 1000 ? 1000 : retry_after_ms;
    if (u < 0 || u >= 1)
        u = 0.5;
    return (long long)((double)base * (0.5 + u));
}

bool cli_transient(long status) { return status == 503; }

long long cli_transient_delay_ms(int attempt, double u)
{
    long long d = 100;
    for (int i = 1; i < attempt && d < 2000; i++)
        d *= 2;
    if (d > 2000)
        d = 2000;
    if (u < 0 || u >= 1)
        u = 0.5;
    return (long long)((double)d * (0.5 + u / 2));
}
