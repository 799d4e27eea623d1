/* fuzz_listing.c - libFuzzer target for what a listing parses (listing.h):
 * the cursor a client sends back (list_cursor_parse) and the masters'
 * answers (list_scan_parse, list_copy_next), then list_decide on what was
 * read.
 *
 * An input is: one byte choosing the parser ('0' cursor, '1' a scan's
 * answer, '2' a lock's or election's records, '3' a semaphore's records,
 * taken modulo 4 after subtracting '0'), one byte for the number of
 * masters (1 to 7), then the bytes parsed, with their length and no
 * terminator as they arrive.
 *
 * Beyond "no crash, no leak, no undefined behaviour": a cursor that parses
 * formats back to itself and parses again to the same place, its master
 * below the number of masters; a scan's names obey the name rule
 * (rules.h) and lie within the answer, at most the number asked for; a record's value and owner lie within the answer,
 * a semaphore's slots no more than its limit; list_decide adds at most one
 * entry, and only a JSON object with a name; it is unsure (LIST_UNSURE,
 * nothing added) only when a master was late.
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "masters/masters.h"
#include "recipes/recipes.h"

#include "fuzz_util.h"

static void cursor(const char *s, size_t len, int n)
{
    char buf[LIST_CURSOR_MAX + 64];
    if (len >= sizeof buf)
        return;
    memcpy(buf, s, len);
    buf[len] = '\0';
    list_pos a, b;
    if (list_cursor_parse(buf, n, &a) < 0)
        return;
    FUZZ_CHECK(a.master < n, "a parsed cursor's master is one of the masters");
    FUZZ_CHECK(strlen(a.after) <= RULES_NAME_MAX, "after fits a name");
    char out[LIST_CURSOR_MAX + 1];
    list_cursor_format(&a, out, sizeof out);
    if (len == 0) {
        FUZZ_CHECK(a.master == 0 && !a.after[0], "the empty cursor is the start");
        return;
    }
    FUZZ_CHECK(list_cursor_parse(out, n, &b) == 0, "a formatted cursor parses");
    FUZZ_CHECK(a.master == b.master && a.skipped == b.skipped && !strcmp(a.cursor, b.cursor) &&
                   !strcmp(a.after, b.after) && a.count == b.count,
               "a cursor formats back to the same place");
}

static void scan(const uint8_t *d, size_t len)
{
    char *blob = malloc(len + 1);
    if (!blob)
        return;
    memcpy(blob, d, len);
    blob[len] = '\0';
    char *names[LIST_ROUND_NAMES];
    list_pos next = {0};
    int max = len % LIST_ROUND_NAMES + 1;
    int n = list_scan_parse(blob, len, &next, names, max);
    FUZZ_CHECK(n <= max, "no more names than asked for");
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(names[i] >= blob && names[i] < blob + len, "a name lies within the answer");
        FUZZ_CHECK(rules_name_valid(names[i], strlen(names[i])), "only names any API could make are listed");
    }
    if (n >= 0)
        FUZZ_CHECK(strlen(next.after) <= RULES_NAME_MAX, "after fits a name");
    free(blob);
}

static void records(enum list_kind kind, const uint8_t *d, size_t len, int n)
{
    const char *p = (const char *)d, *end = p + len;
    list_copy *c = calloc((size_t)n, sizeof *c);
    cJSON *items = cJSON_CreateArray();
    if (!c || !items) {
        free(c);
        cJSON_Delete(items);
        return;
    }
    for (int name = 0; name < 8 && p < end; name++) {
        const list_copy *cp[MASTER_MAX] = {0};
        for (int i = 0; i < n; i++) {
            const char *before = p;
            if (p >= end || list_copy_next(kind, &p, end, 3600000, &c[i]) < 0) {
                p = end;
                break;
            }
            FUZZ_CHECK(p > before && p <= end, "a record moves on, within the answer");
            const quorum_copy *q = &c[i].lock;
            if (q->value)
                FUZZ_CHECK(q->value >= before && q->value + q->vlen + q->olen <= end,
                           "a value and its owner lie within the answer");
            if (kind == LIST_SEMAPHORES)
                FUZZ_CHECK(c[i].nslots <= 64 && c[i].nslots == c[i].limit,
                           "a semaphore reads one copy per slot of its limit");
            for (int s = 0; kind == LIST_SEMAPHORES && s < c[i].nslots; s++)
                if (c[i].slots[s].value)
                    FUZZ_CHECK(c[i].slots[s].value >= before && c[i].slots[s].value + c[i].slots[s].vlen <= end,
                               "a slot's value lies within the answer");
            cp[i] = &c[i];
        }
        int before = cJSON_GetArraySize(items);
        unsigned late = 0;   /* odd names: the masters without a record were late */
        for (int i = 0; name % 2 && i < n; i++)
            late |= cp[i] ? 0 : 1u << i;
        int added = list_decide(kind, "name", cp, n, name % n, (unsigned)name & ((1u << (name % n)) - 1), late,
                                1000, 0.01, items);
        FUZZ_CHECK(added == LIST_UNSURE ? late != 0 && cJSON_GetArraySize(items) == before
                                        : added >= 0 && added <= 1 && cJSON_GetArraySize(items) == before + added,
                   "a decision adds at most one entry, and none when a late master could change it");
        if (added == 1) {
            cJSON *e = cJSON_GetArrayItem(items, before);
            FUZZ_CHECK(cJSON_IsObject(e) && cJSON_IsString(cJSON_GetObjectItem(e, "name")), "an entry has a name");
        }
    }
    cJSON_Delete(items);
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int which = (uint8_t)(data[0] - '0') % 4, n = (uint8_t)(data[1] - '0') % 7 + 1;
    data += 2;
    size -= 2;
    switch (which) {
    case 0: cursor((const char *)data, size, n); break;
    case 1: scan(data, size); break;
    case 2: records(size && data[0] % 2 ? LIST_ELECTIONS : LIST_LOCKS, data, size, n); break;
    default: records(LIST_SEMAPHORES, data, size, n); break;
    }
    return 0;
}
