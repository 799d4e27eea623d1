/* quarantine.c - see quarantine.h. */
#include "quarantine.h"

#include <string.h>

#include "quorum.h"

uint64_t quarantine_until(const quarantine_view *v, int n, int i, uint64_t now_us,
                          uint64_t window_us)
{
    const quarantine_view *m = &v[i];
    if (!m->known || window_us == 0)
        return 0;
    uint64_t until = m->born_us + window_us;
    if (now_us >= until)
        return 0;
    if (m->restarted)
        return until;
    int older = 0;
    for (int k = 0; k < n; k++)
        if (k != i && v[k].known && v[k].first_born_us + QUARANTINE_TOGETHER_US < m->born_us)
            older++;
    int need = quorum_of(n) - 1;
    if (need < 1)
        need = 1;
    return older >= need ? until : 0;
}

/* Finds "field:" at the start of a line of info; returns its value's start
 * and sets *vlen to the length up to the line end. */
static const char *info_field(const char *info, size_t len, const char *field, size_t *vlen)
{
    size_t flen = strlen(field);
    const char *end = info + len;
    for (const char *line = info; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *eol = nl ? nl : end;
        if ((size_t)(eol - line) > flen && !memcmp(line, field, flen) && line[flen] == ':') {
            const char *val = line + flen + 1;
            const char *vend = eol;
            if (vend > val && vend[-1] == '\r')
                vend--;
            *vlen = (size_t)(vend - val);
            return val;
        }
        line = nl ? nl + 1 : end;
    }
    return NULL;
}

int quarantine_parse_info(const char *info, size_t len, char *run_id, long long *uptime_s)
{
    size_t rl, ul;
    const char *r = info_field(info, len, "run_id", &rl);
    const char *u = info_field(info, len, "uptime_in_seconds", &ul);
    if (!r || !u || rl == 0 || rl > QUARANTINE_RUN_ID_LEN || ul == 0 || ul > 18)
        return -1;
    long long up = 0;
    for (size_t k = 0; k < ul; k++) {
        if (u[k] < '0' || u[k] > '9')
            return -1;
        up = up * 10 + (u[k] - '0');
    }
    memcpy(run_id, r, rl);
    run_id[rl] = '\0';
    *uptime_s = up;
    return 0;
}
