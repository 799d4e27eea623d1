/* listing_page.c - the pure parts of a listing: see listing.h. */
#include "listing.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"
#include "base/base.h"
#include "masters/masters.h"

int list_scanned(int nmasters)
{
    return nmasters - quorum_of(nmasters) + 1;
}

/* A decimal of at most max_digits digits at *p, up to stop; moves *p past it. */
static bool digits(const char **p, char stop, size_t max_digits)
{
    size_t n = 0;
    while ((*p)[n] >= '0' && (*p)[n] <= '9')
        n++;
    if (n == 0 || n > max_digits || (*p)[n] != stop)
        return false;
    *p += n;
    return true;
}

/* Masters below pos's that were scanned to the end. */
static int scanned_below(const list_pos *pos)
{
    return pos->master - __builtin_popcount(pos->skipped);
}

int list_cursor_parse(const char *s, int nmasters, list_pos *pos)
{
    memset(pos, 0, sizeof *pos);
    strcpy(pos->cursor, "0");
    if (!s || !*s)
        return 0;
    const char *p = s, *c;
    if (!digits(&p, '.', 2))
        return -1;
    pos->master = atoi(s);
    if (pos->master >= nmasters)
        return -1;
    c = ++p;
    if (!digits(&p, '.', 5))
        return -1;
    long sk = atol(c);
    if (sk >= 1L << pos->master)
        return -1;   /* only masters below it */
    pos->skipped = (unsigned)sk;
    c = ++p;
    const char *dot = strchr(p, '.');
    if (!digits(&p, dot ? '.' : '\0', 20))
        return -1;
    errno = 0;
    unsigned long long cur = strtoull(c, NULL, 10);
    if (errno)
        return -1;
    snprintf(pos->cursor, sizeof pos->cursor, "%llu", cur);
    if (dot) {
        /* the batch's COUNT, and after in hex (a key's bytes past the prefix) */
        p = dot + 1;
        if (!digits(&p, '.', 4) || (pos->count = atoi(dot + 1)) < 1 || pos->count > LIST_LIMIT_MAX)
            return -1;
        const char *hex = p + 1;
        size_t hl = strlen(hex), n = hl / 2;
        if (hl == 0 || hl % 2 || n > RULES_NAME_MAX || strspn(hex, "0123456789abcdef") != hl)
            return -1;
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(hex + 2 * i, "%2x", &v);
            pos->after[i] = (char)v;
        }
        pos->after[n] = '\0';
        if (strlen(pos->after) != n)
            return -1;   /* (any other bytes: a key another client wrote may sort there) */
    }
    return pos->master < nmasters && scanned_below(pos) < list_scanned(nmasters) ? 0 : -1;
}

void list_cursor_format(const list_pos *pos, char *out, size_t cap)
{
    if (pos->master < 0) {
        snprintf(out, cap, "%s", "");
        return;
    }
    int n = pos->after[0] ? snprintf(out, cap, "%d.%u.%s.%d.", pos->master, pos->skipped, pos->cursor, pos->count)
                           : snprintf(out, cap, "%d.%u.%s", pos->master, pos->skipped, pos->cursor);
    for (const char *a = pos->after; *a && n >= 0 && (size_t)n + 3 <= cap; a++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", (unsigned char)*a);
}

bool list_next_master(list_pos *pos, int nmasters, bool skipped)
{
    if (skipped)
        pos->skipped |= 1u << pos->master;
    pos->master++;
    bool enough = scanned_below(pos) >= list_scanned(nmasters);
    if (enough || pos->master >= nmasters)
        pos->master = -1;
    strcpy(pos->cursor, "0");
    pos->after[0] = '\0';
    pos->count = 0;
    return pos->master >= 0 || enough;
}

int list_pattern(enum list_kind kind, const char *key_prefix, const char *prefix, char *out, size_t cap)
{
    const char *suffix = kind == LIST_ELECTIONS ? ELECTION_SUFFIX : kind == LIST_SEMAPHORES ? RULES_SEP "limit" : "";
    size_t n = 0;
    const char *parts[] = {key_prefix, prefix};
    for (int k = 0; k < 2; k++)
        for (const char *c = parts[k]; *c; c++) {
            if (n + 2 >= cap)
                return -1;
            if (strchr("*?[]\\", *c))
                out[n++] = '\\';
            out[n++] = *c;
        }
    int w = snprintf(out + n, cap - n, "*%s", suffix);
    return w < 0 || (size_t)w >= cap - n ? -1 : 0;
}

int list_scan_parse(char *blob, size_t len, list_pos *next, char **names, int max)
{
    char *end = blob + len, *p = blob;
    char *nl = memchr(p, '\n', len);
    if (!nl || nl == p || (size_t)(nl - p) >= sizeof next->cursor)
        return -1;
    *nl = '\0';
    const char *q = p;
    if (!digits(&q, '\0', 20))
        return -1;
    strcpy(next->cursor, p);
    p = nl + 1;
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
        return -1;
    /* (a key of another client's may be longer than a name: resuming after
     * its first bytes at worst reads a few names again) */
    size_t al = (size_t)(nl - p) < RULES_NAME_MAX ? (size_t)(nl - p) : RULES_NAME_MAX;
    memcpy(next->after, p, al);
    next->after[al] = '\0';
    if (strlen(next->after) != al)
        return -1;
    p = nl + 1;
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
        return -1;
    *nl = '\0';
    q = p;
    if (!digits(&q, '\0', 4) || (next->count = atoi(p)) > LIST_LIMIT_MAX || (next->after[0] && next->count < 1))
        return -1;
    p = nl + 1;
    int n = 0;
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        if (stop == p || n == max)
            return -1;
        *stop = '\0';
        /* Keys no API can name (another client's, under the same prefix)
         * are not listed. */
        if (rules_name_valid(p, (size_t)(stop - p)))
            names[n++] = p;
        p = stop + 1;
    }
    return n;
}

/* A signed decimal at *p followed by one space; moves *p past both. */
static bool number(const char **p, const char *end, long long *v)
{
    const char *s = *p;
    bool neg = s < end && *s == '-';
    if (neg)
        s++;
    long long x = 0;
    const char *d = s;
    while (s < end && *s >= '0' && *s <= '9' && s - d < 18)
        x = x * 10 + (*s++ - '0');
    if (s == d || s >= end || *s != ' ')
        return false;
    *v = neg ? -x : x;
    *p = s + 1;
    return true;
}

/* A record's end: a newline, or the end of the answer. */
static bool record_end(const char **p, const char *end)
{
    if (*p == end)
        return true;
    if (**p != '\n')
        return false;
    (*p)++;
    return true;
}

int list_copy_next(enum list_kind kind, const char **p, const char *end, long long no_expiry_ms,
                   list_copy *c)
{
    memset(c, 0, offsetof(list_copy, slots));
    const char *s = *p;
    long long v[4];
    if (kind == LIST_SEMAPHORES) {
        /* "<limit>" then " <pttl> <len> <value>" per slot */
        const char *d = s;
        long long lim = 0;
        while (s < end && *s >= '0' && *s <= '9' && s - d < 3)
            lim = lim * 10 + (*s++ - '0');
        if (s == d || lim > 64)
            return -1;
        c->limit = (int)lim;
        for (int i = 0; i < c->limit; i++) {
            if (s >= end || *s++ != ' ' || !number(&s, end, &v[0]) || !number(&s, end, &v[1]) || v[1] < 0 ||
                v[1] > end - s)
                return -1;
            c->slots[i] = (quorum_copy){.value = v[1] ? s : NULL, .vlen = (size_t)v[1],
                                        .pttl = v[0] == -1 ? no_expiry_ms : v[0], .owner = ""};
            s += v[1];
        }
        c->nslots = c->limit;
    } else if (end - s >= 2 && !memcmp(s, "-2", 2) && (end - s == 2 || s[2] == '\n')) {
        s += 2;
    } else {
        for (int i = 0; i < 4; i++)
            if (!number(&s, end, &v[i]))
                return -1;
        if (v[2] <= 0 || v[3] < 0 || v[2] + v[3] > end - s)
            return -1;
        c->lock = (quorum_copy){.value = s, .vlen = (size_t)v[2], .pttl = v[0] == -1 ? no_expiry_ms : v[0],
                                .counter = v[1], .owner = s + v[2], .olen = (size_t)v[3]};
        s += v[2] + v[3];
    }
    if (!record_end(&s, end))
        return -1;
    *p = s;
    return 0;
}

#define UNSURE (-2)   /* what the late masters' copies could change (list_decide: LIST_UNSURE) */

/* Whether a master the walk scanned before holds the name (it met it
 * there): 1; 0 when none that answered does; UNSURE when none that
 * answered does but one of them is late (of late: it may). */
static int met_before(enum list_kind kind, const list_copy *const *c, int scanned, unsigned skipped, unsigned late)
{
    bool unsure = false;
    for (int i = 0; i < scanned; i++) {
        if (skipped >> i & 1u)
            continue;
        if (c[i] && (kind == LIST_SEMAPHORES ? c[i]->limit > 0 : c[i]->lock.value != NULL))
            return 1;
        unsure |= !c[i] && (late >> i & 1u);
    }
    return unsure ? UNSURE : 0;
}

/* quorum_holder over the copies that answered, where the masters of late
 * (their copies absent) may hold anything: the holder's index; -1 when no
 * holder can be, whatever they hold; UNSURE when their copies could
 * make one (a value that answered copies and late ones together would give
 * a majority). */
static int holder_despite(const quorum_copy *c, int n, unsigned late, long long elapsed_us, double drift_factor,
                          long long *validity, long long *fence)
{
    int h = quorum_holder(c, n, elapsed_us, drift_factor, validity, fence);
    int nlate = __builtin_popcount(late);
    if (h >= 0 || nlate == 0)
        return h;
    int best = 0;
    for (int i = 0; i < n; i++) {
        int agree = 0;
        for (int j = 0; c[i].value && j < n; j++)
            agree += c[j].value && c[j].vlen == c[i].vlen && !memcmp(c[j].value, c[i].value, c[i].vlen);
        best = agree > best ? agree : best;
    }
    return best + nlate >= quorum_of(n) ? UNSURE : -1;
}

/* The limit a majority stores (0: none), or UNSURE when the late
 * masters' limits could make one. */
static int semaphore_limit(const list_copy *const *c, int n, unsigned late)
{
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (!c[i] || !c[i]->limit)
            continue;
        int agree = 0;
        for (int j = 0; j < n; j++)
            agree += c[j] && c[j]->limit == c[i]->limit;
        if (agree >= quorum_of(n))
            return c[i]->limit;
        best = agree > best ? agree : best;
    }
    return best + __builtin_popcount(late) >= quorum_of(n) ? UNSURE : 0;
}

static int list_semaphore(const char *name, const list_copy *const *c, int n, unsigned late, bool unsure_before,
                          long long elapsed_us, double drift_factor, cJSON *items)
{
    int limit = semaphore_limit(c, n, late);
    if (limit == 0)
        return 0;
    if (limit == UNSURE || unsure_before)
        return UNSURE;
    int holders = 0;
    for (int s = 0; s < limit; s++) {
        quorum_copy slot[MASTER_MAX] = {0};
        for (int i = 0; i < n; i++)
            if (c[i] && s < c[i]->nslots)
                slot[i] = c[i]->slots[s];
        long long validity, fence;
        int h = holder_despite(slot, n, late, elapsed_us, drift_factor, &validity, &fence);
        if (h == UNSURE)
            return UNSURE;   /* a count that a late master could change */
        holders += h >= 0;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(items, o))
        return cJSON_Delete(o), -1;
    cJSON_AddStringToObject(o, "name", name);
    jsonio_add_int(o, "limit", limit);
    jsonio_add_int(o, "holders", holders);
    return 1;
}

int list_decide(enum list_kind kind, const char *name, const list_copy *const *c, int n, int scanned,
                unsigned skipped, unsigned late, long long elapsed_us, double drift_factor, cJSON *items)
{
    int before = met_before(kind, c, scanned, skipped, late);
    if (before == 1)
        return 0;
    if (kind == LIST_SEMAPHORES) {
        int r = list_semaphore(name, c, n, late, before == UNSURE, elapsed_us, drift_factor, items);
        return r == UNSURE ? LIST_UNSURE : r;
    }
    quorum_copy copies[MASTER_MAX] = {0};
    for (int i = 0; i < n; i++)
        if (c[i])
            copies[i] = c[i]->lock;
    long long validity, fence;
    int h = holder_despite(copies, n, late, elapsed_us, drift_factor, &validity, &fence);
    if (h == -1)
        return 0;
    if (h == UNSURE || before == UNSURE)
        return LIST_UNSURE;
    char owner[RL_OWNER_MAX + 1];
    snprintf(owner, sizeof owner, "%.*s", (int)copies[h].olen, copies[h].owner);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(items, o))
        return cJSON_Delete(o), -1;
    if (kind == LIST_ELECTIONS) {
        rl_result res = {.held = true, .validity_ms = validity, .fence = fence};
        snprintf(res.owner, sizeof res.owner, "%s", owner);
        election_state st;
        election_state_of(&res, &st);
        election_state_add(o, name, &st);
        return 1;
    }
    cJSON_AddStringToObject(o, "name", name);
    jsonio_add_int(o, "validity_ms", validity);
    jsonio_add_int(o, "fence", fence);
    if (owner[0])
        cJSON_AddStringToObject(o, "owner", owner);
    return 1;
}
