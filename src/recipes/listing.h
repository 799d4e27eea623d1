/* listing.h - GET /locks, /elections and /semaphores (docs/ops.md): what a
 * majority of masters holds, a page at a time, without any token.
 *
 * The walk: a name a majority holds is held by at least one of any
 * n - quorum + 1 masters, so that many are SCANned one after another
 * (never KEYS; script_list_scan), from the first, and each page's names are then read on every
 * master (script_list_check). A name is listed when a majority holds it
 * (quorum_holder; a semaphore: a majority stores its limit), and only
 * from the first master that holds it: a name the walk met on an earlier
 * master is not listed again. A master the walk reaches that is down (or
 * in quarantine, or refusing) is passed, and the next after the first
 * n - quorum + 1 is scanned in its place; when too few are left, the page
 * answers no quorum. One that runs but is late (it missed the deadline and
 * keeps its connection while it catches up) is never passed: a round that
 * needed its answer (its scan, or a read it could change) lists nothing,
 * and the page ends where that round began, to be asked again (a page that
 * holds nothing waits for it a while first). The cursor a page gives is where the walk
 * goes on: the master, its SCAN cursor and, where a page ended inside a
 * batch (script_list_scan), the last name it took. As with SCAN, a name
 * held for the whole walk is listed once; one taken or freed meanwhile may
 * be listed or not, and while masters fail a name may be given twice.
 * (A page ends inside a batch only when the batch alone holds more names
 * than the page takes; should other keys of that batch's buckets change
 * before the next page, a name after that page's last may then be missed.)
 *
 * This file's functions are pure (the cursor, the scripts' answers, the
 * JSON), unit-tested in tests/unit/recipes/test_listing.c; list_run (listing.c)
 * runs a page on a pool's loop.
 */
#ifndef RL_LISTING_H
#define RL_LISTING_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "engine/engine.h"

enum list_kind { LIST_LOCKS, LIST_ELECTIONS, LIST_SEMAPHORES };

#define LIST_SCAN_CURSOR_MAX 24 /* SCAN's cursor: an unsigned 64-bit integer */

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define LIST_ROUNDS_MAX 64      /* a page scans again while it has fewer than limit names,
                                   at most this many times ... */
#define LIST_PAGE_MS 200        /* ... and, after the first, for at most this long */
#define LIST_LATE_RETRY_MS 10   /* a page that holds nothing tries a round again this much
                                   after a master that runs was late for it */
#define LIST_ROUND_NAMES 100    /* names a round scans and reads: a master's share of a round
                                   stays well under a millisecond, so acquires on the same
                                   connections wait little behind it */
#define LIST_CURSOR_MAX (16 + LIST_SCAN_CURSOR_MAX + 2 * RULES_NAME_MAX)
                                /* "<master>.<skipped>.<scan cursor>[.<count>.<after, hex>]" */

/* Where a walk stands: master -1 when it is over; after, the last name a
 * page took from the batch at cursor ("" none). */
typedef struct list_pos {
    int master;
    char cursor[LIST_SCAN_CURSOR_MAX];
    char after[RULES_NAME_MAX + 1];
    int count;                  /* with after: the COUNT that batch was read with */
    unsigned skipped;           /* masters below master the walk passed without a scan (down,
                                   in quarantine, refusing): they met nothing */
} list_pos;

/* What a page asks for. */
typedef struct list_request {
    enum list_kind kind;
    char prefix[RULES_NAME_MAX + 1];   /* "" lists every name */
    int limit;                          /* 1..LIST_LIMIT_MAX */
    list_pos pos;                       /* the start, or a cursor's */
    /* Which names the caller may see (NULL: every one): a page shows only
     * those, and ends where it would have ended with all of them. */
    bool (*may_see)(const void *arg, const char *name);
    const void *may_arg;
} list_request;

/* The masters a walk scans to the end: n - quorum_of(n) + 1 (those it
 * passes do not count). */
int list_scanned(int nmasters);
/* A page's cursor from the query argument s (NULL or "": the start) for n
 * masters. -1 when it is not one this service gives. */
int list_cursor_parse(const char *s, int nmasters, list_pos *pos);
/* The cursor of pos into out (LIST_CURSOR_MAX bytes); "" when it is over. */
void list_cursor_format(const list_pos *pos, char *out, size_t cap);
/* The walk moves to the next master's start, or ends (master -1) once
 * list_scanned masters were scanned to the end; skipped: the one it leaves
 * was passed without a scan. False when it ends without them (too few
 * masters answered). */
bool list_next_master(list_pos *pos, int nmasters, bool skipped);

/* The SCAN pattern of kind: key_prefix, prefix with * ? [ ] \ escaped, "*"
 * and the kind's suffix. -1 when it does not fit cap. */
int list_pattern(enum list_kind kind, const char *key_prefix, const char *prefix, char *out, size_t cap);

/* script_list_scan's answer, in place (blob holds len bytes and a NUL after
 * them): sets next's cursor and after (its master unchanged) and names[0..return) to the names, each ended by a
 * NUL written over blob's newlines. -1 when it is not well formed or
 * holds more than max names. */
int list_scan_parse(char *blob, size_t len, list_pos *next, char **names, int max);

/* One master's record of one name in script_list_check's answer. */
typedef struct list_copy {
    int limit;                          /* a semaphore's stored limit (0: none) */
    int nslots;                         /* ... and the slots read (up to 64) */
    quorum_copy lock;                   /* a lock's or election's (value NULL: absent) */
    quorum_copy slots[64];              /* a semaphore's slots (value NULL: free) */
} list_copy;

/* Reads the record at *p (before end) into c and moves *p past it and its
 * newline. -1 when it is not well formed. no_expiry_ms stands for a key
 * without expiry. */
int list_copy_next(enum list_kind kind, const char **p, const char *end, long long no_expiry_ms,
                   list_copy *c);

/* One name of a page, from every master's copy (c[i] is master i's; NULL
 * where it gave no vote), read elapsed_us ago, met in the scan of master
 * scanned, the masters of skipped (bits) below it not scanned. late (bits):
 * masters without a copy that run but answered late, so their copies may
 * hold anything. Appends the name's entry to items when it is listed
 * (returns 1), else returns 0; LIST_UNSURE (nothing appended) when the late
 * masters' copies could change that, or the entry (a semaphore's holders),
 * or show that a master scanned before met the name; -1: out of memory.
 *   locks      {"name","validity_ms","fence","owner" (when set)}
 *   elections  {"name","leader","value","term","since","validity_ms"}
 *   semaphores {"name","limit","holders"}: the limit a majority stores, and
 *              its slots that a majority holds */
#define LIST_UNSURE 2
struct cJSON;
int list_decide(enum list_kind kind, const char *name, const list_copy *const *c, int n, int scanned,
                unsigned skipped, unsigned late, long long elapsed_us, double drift_factor, struct cJSON *items);

#endif
