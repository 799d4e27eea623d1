/* quarantine.c - see quarantine.h. */
#include "quarantine.h"

#include <string.h>

int quarantine_plan(const enum quarantine_marker *st, int n, bool auto_setup,
                    enum quarantine_action *act)
{
    int ready = 0, pending = 0, missing = 0, unknown = 0;
    for (int i = 0; i < n; i++) {
        act[i] = QACT_NONE;
        ready += st[i] == QMARK_READY;
        pending += st[i] == QMARK_PENDING;
        missing += st[i] == QMARK_MISSING;
        unknown += st[i] == QMARK_UNKNOWN;
    }
    int acts = 0;
    for (int i = 0; i < n; i++) {
        if (ready > 0) {
            if (st[i] == QMARK_MISSING)
                act[i] = QACT_RESTORE;
            else if (st[i] == QMARK_PENDING)
                act[i] = QACT_PROMOTE;
        } else if (unknown == 0) {
            if (missing > 0 && st[i] == QMARK_MISSING && (pending > 0 || auto_setup))
                act[i] = QACT_PENDING;
            else if (missing == 0)
                act[i] = QACT_PROMOTE;
        }
        acts += act[i] != QACT_NONE;
    }
    return acts;
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

int quarantine_parse_info(const char *info, size_t len, quarantine_info *out)
{
    memset(out, 0, sizeof *out);
    size_t rl, al, pl;
    const char *r = info_field(info, len, "run_id", &rl);
    const char *a = info_field(info, len, "aof_enabled", &al);
    const char *p = info_field(info, len, "maxmemory_policy", &pl);
    out->aof_enabled = a && al == 1 && a[0] == '1';
    if (p && pl <= QUARANTINE_POLICY_LEN) {
        memcpy(out->policy, p, pl);
        out->policy[pl] = '\0';
    }
    if (!r || rl == 0 || rl > QUARANTINE_RUN_ID_LEN)
        return -1;
    for (size_t k = 0; k < rl; k++)
        if (!((r[k] >= '0' && r[k] <= '9') || (r[k] >= 'a' && r[k] <= 'f')))
            return -1;
    memcpy(out->run_id, r, rl);
    out->run_id[rl] = '\0';
    return 0;
}

bool quarantine_persists(const quarantine_info *qi, const char *appendfsync)
{
    return qi->aof_enabled && appendfsync && !strcmp(appendfsync, "always");
}

bool quarantine_may_lose(const quarantine_info *qi)
{
    return !qi->aof_enabled || strcmp(qi->policy, "noeviction") != 0;
}
