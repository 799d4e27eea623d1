/* listing.c - a page of a listing on a pool's loop (listing.h), in rounds:
 * a scan of one master, an EXISTS of its names on the masters scanned
 * before (from the second master on), then a read of the rest on every
 * master; until the page holds limit names, the walk is over, or
 * LIST_ROUNDS_MAX rounds or LIST_PAGE_MS passed. A round that needed the
 * answer of a master that runs but was late (list_decide's LIST_UNSURE)
 * lists nothing: the walk stands where the round began, and the round is
 * tried again (round_late). */
#include "listing_run.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"
#include "masters/masters.h"

typedef struct list_task {
    mpool *pool;
    const conf *cfg;
    int n;
    list_request req;
    int count;                  /* names on the page */
    int rounds;                 /* scans made */
    cJSON *root, *items;
    char *blob;                 /* the last scan's answer, its names in place */
    char *names[LIST_ROUND_NAMES];
    int nnames;
    int scanned;                /* the master those names came from */
    list_pos round_pos;         /* where the walk stood when this round's scan was sent */
    uint64_t read_us;           /* when their read was sent */
    bool read_any;              /* a read went to every master this page */
    bool stalled;               /* a master that runs was late: the page ends */
    uint64_t start_us;          /* when the page began (LIST_PAGE_MS) */
    list_copy *copies;          /* one per master */
    list_done_fn done;
    void *arg;
} list_task;

static void scan_step(list_task *t);

static const char *guard_of(const list_task *t) { return t->cfg->quarantine ? "1" : "0"; }

/* The scripts' kind argument (scripts.h: list_scan, list_check). */
static const char *kind_arg(const list_task *t)
{
    return t->req.kind == LIST_LOCKS ? "l" : t->req.kind == LIST_ELECTIONS ? "e" : "s";
}

/* The page's answer: outcome, or RL_NO_QUORUM explained from replies
 * (ok of them voted). */
static void finish_why(list_task *t, enum rl_outcome outcome, const master_reply *replies, int ok)
{
    rl_result res = {.outcome = outcome};
    if (outcome == RL_NO_QUORUM) {
        res.masters_ok = ok;
        rl_explain_no_quorum(t->pool, t->cfg->quarantine, replies, &res);
    }
    char *body = NULL;
    if (outcome == RL_OK) {
        char next[LIST_CURSOR_MAX];
        list_cursor_format(&t->req.pos, next, sizeof next);
        if (next[0])
            cJSON_AddStringToObject(t->root, "next", next);
        else
            cJSON_AddNullToObject(t->root, "next");
        body = cJSON_PrintUnformatted(t->root);
        if (!body)
            res.outcome = RL_INTERNAL;
    }
    t->done(t->arg, &res, body);
    cJSON_Delete(t->root);
    free(t->blob);
    free(t->copies);
    free(t);
}

static void finish(list_task *t, enum rl_outcome outcome)
{
    finish_why(t, outcome, NULL, 0);
}

static void read_step(list_task *t);
static void go_on(list_task *t);

static bool answered(const master_reply *r)
{
    return r->kind == MREPLY_VALUE && !r->quarantined && r->blob && r->nints >= 1 && r->ints[0] == 0;
}

/* Whether master i, which gave r no answer, runs but was late: it keeps its
 * connection while it catches up (master_status.late), or it is up and
 * answered this batch late. Down, in quarantine or refusing: false. */
static bool late(list_task *t, int i, const master_reply *r)
{
    master_status st;
    mpool_status(t->pool, i, &st);
    return r->kind == MREPLY_FAIL && (st.up || st.late) && !st.quarantined;
}

/* The masters of a batch that gave no answer because they were late. */
static unsigned late_mask(list_task *t, const master_reply *replies)
{
    unsigned m = 0;
    for (int i = 0; i < t->n; i++)
        if (!answered(&replies[i]) && late(t, i, &replies[i]))
            m |= 1u << i;
    return m;
}

static void retry_round(void *arg)
{
    list_task *t = arg;
    if (loop_stopping(mpool_loop(t->pool)))
        finish(t, RL_SHUTTING_DOWN);
    else
        scan_step(t);
}

/* A master that runs was late for what this round needed (its scan, or a
 * read whose answer it could change): nothing of the round is listed, and
 * the walk stands where the round began. A page that holds nothing yet
 * tries the round again every LIST_LATE_RETRY_MS while its LIST_PAGE_MS
 * lasts (a late master catches up, or is dropped and passed as down,
 * within about a second), so that a client does not spin on empty pages;
 * otherwise the page ends here, and the next one asks again. */
static void round_late(list_task *t)
{
    t->req.pos = t->round_pos;
    free(t->blob);
    t->blob = NULL;
    t->nnames = 0;
    if (t->count == 0 && loop_now_us() - t->start_us < LIST_PAGE_MS * 1000ULL &&
        loop_after(mpool_loop(t->pool), LIST_LATE_RETRY_MS * 1000ULL, retry_round, t) == 0)
        return;
    t->stalled = true;
    go_on(t);   /* (a page that read nothing still asks whether a majority runs) */
}

/* Another scan, or the page is done. A page whose scans found no names
 * (or could reach no master) still reads, with no names, so that it
 * answers only when a majority does. */
static void go_on(list_task *t)
{
    free(t->blob);
    t->blob = NULL;
    t->nnames = 0;
    if (t->req.pos.master >= 0 && t->count < t->req.limit && !t->stalled && ++t->rounds < LIST_ROUNDS_MAX &&
        loop_now_us() - t->start_us < LIST_PAGE_MS * 1000ULL)
        scan_step(t);
    else if (!t->read_any)
        read_step(t);
    else
        finish(t, RL_OK);
}

static void read_done(void *arg, const master_reply *replies)
{
    list_task *t = arg;
    const char *p[MASTER_MAX], *end[MASTER_MAX];
    bool voted[MASTER_MAX];
    int votes = 0;
    for (int i = 0; i < t->n; i++) {
        voted[i] = answered(&replies[i]);
        votes += voted[i];
        p[i] = voted[i] ? replies[i].blob : NULL;
        end[i] = voted[i] ? replies[i].blob + replies[i].blob_len : NULL;
    }
    unsigned late = late_mask(t, replies);
    if (votes + __builtin_popcount(late) < quorum_of(t->n)) {
        finish_why(t, RL_NO_QUORUM, replies, votes);
        return;
    }
    if (votes < quorum_of(t->n)) {
        /* A majority runs, some of it late: no name can be decided. */
        if (t->nnames)
            round_late(t);
        else
            go_on(t);
        return;
    }
    /* The round's entries are kept aside until every name is decided: a
     * round a late master could change lists none of them. */
    cJSON *round = cJSON_CreateArray();
    if (!round) {
        finish(t, RL_INTERNAL);
        return;
    }
    long long elapsed_us = (long long)(loop_now_us() - t->read_us);
    int added = 0;
    for (int k = 0; k < t->nnames; k++) {
        const list_copy *c[MASTER_MAX];
        for (int i = 0; i < t->n; i++) {
            if (voted[i] && list_copy_next(t->req.kind, &p[i], end[i], t->cfg->max_ttl_ms, &t->copies[i]) < 0)
                voted[i] = false;   /* not well formed: no vote from here on */
            c[i] = voted[i] ? &t->copies[i] : NULL;
        }
        int one = list_decide(t->req.kind, t->names[k], c, t->n, t->scanned, t->req.pos.skipped, late, elapsed_us,
                              t->cfg->drift_factor, round);
        if (one < 0 || one == LIST_UNSURE) {
            cJSON_Delete(round);
            if (one < 0)
                finish(t, RL_INTERNAL);
            else
                round_late(t);
            return;
        }
        added += one;
    }
    cJSON *item;
    while ((item = cJSON_DetachItemFromArray(round, 0))) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(item, "name"));
        if (t->req.may_see && (!name || !t->req.may_see(t->req.may_arg, name)))
            cJSON_Delete(item);   /* not the caller's to see */
        else
            cJSON_AddItemToArray(t->items, item);
    }
    cJSON_Delete(round);
    t->count += added;
    go_on(t);
}

/* Sends script_list_check of kind with the keys of the last scan's names
 * (each the key prefix, the name and suffix) to the masters of mask. */
static void check(list_task *t, const char *kind, const char *suffix, uint32_t mask, mpool_done_fn done)
{
    size_t plen = strlen(t->cfg->key_prefix), slen = strlen(suffix), bytes = 0;
    for (int k = 0; k < t->nnames; k++)
        bytes += plen + strlen(t->names[k]) + slen;
    int nargs = t->nnames + 3;
    const char **args = malloc((size_t)nargs * (sizeof *args + sizeof(size_t)) + bytes + 1);
    if (!args) {
        finish(t, RL_INTERNAL);
        return;
    }
    size_t *lens = (size_t *)(args + nargs);
    char *keys = (char *)(lens + nargs);
    args[0] = SCRIPT_MARKER_KEY;
    args[1] = kind;
    for (int k = 0; k < t->nnames; k++) {
        size_t nl = strlen(t->names[k]);
        args[2 + k] = keys;
        lens[2 + k] = plen + nl + slen;
        memcpy(keys, t->cfg->key_prefix, plen);
        memcpy(keys + plen, t->names[k], nl);
        memcpy(keys + plen + nl, suffix, slen);
        keys += lens[2 + k];
    }
    args[nargs - 1] = guard_of(t);
    for (int i = 0; i < nargs; i++)
        if (i < 2 || i == nargs - 1)
            lens[i] = strlen(args[i]);
    mpool_eval(t->pool, &script_list_check, mask, 1, nargs, args, lens, done, t);
    free(args);   /* (mpool_eval copies the command) */
}

/* Reads the names of the last scan on every master (none: only whether a
 * majority answers). */
static void read_step(list_task *t)
{
    t->read_any = true;
    t->read_us = loop_now_us();
    check(t, kind_arg(t), t->req.kind == LIST_ELECTIONS ? ELECTION_SUFFIX : "", (1u << t->n) - 1, read_done);
}

/* The masters the walk scanned before the one it scans now: a name one of
 * them holds was met there. */
static uint32_t scanned_before(const list_task *t)
{
    return ((1u << t->scanned) - 1) & ~t->req.pos.skipped;
}

/* Drops the names a master scanned before holds (that master answered
 * whether it holds them: one "0" or "1" each), then reads the rest. */
static void present_done(void *arg, const master_reply *replies)
{
    list_task *t = arg;
    bool met[LIST_ROUND_NAMES] = {0};
    for (int i = 0; i < t->n; i++) {
        const master_reply *r = &replies[i];
        if (!(scanned_before(t) >> i & 1u) || !answered(r) || r->blob_len != (size_t)t->nnames)
            continue;   /* (one that did not answer leaves its names to the read) */
        for (int k = 0; k < t->nnames; k++)
            met[k] |= r->blob[k] == '1';
    }
    int kept = 0;
    for (int k = 0; k < t->nnames; k++)
        if (!met[k])
            t->names[kept++] = t->names[k];
    t->nnames = kept;
    if (kept)
        read_step(t);
    else
        go_on(t);
}

/* The names of a scan after the first master's: most were met before (on
 * a master that holds what most of the others do), so those masters are
 * asked first whether they hold them, which is cheap, and only the rest
 * are read on every master. */
static void present_step(list_task *t)
{
    check(t, "x", t->req.kind == LIST_ELECTIONS ? ELECTION_SUFFIX : t->req.kind == LIST_SEMAPHORES ? RULES_SEP "limit" : "",
          scanned_before(t), present_done);
}

/* Masters up and out of quarantine now, as the pool sees them: what a walk
 * that ran out of masters to scan says voted. */
static int voting_now(list_task *t)
{
    int ok = 0;
    for (int i = 0; i < t->n; i++) {
        master_status st;
        mpool_status(t->pool, i, &st);
        ok += st.up && !st.quarantined && !st.refusing;
    }
    return ok;
}

static void scan_done(void *arg, const master_reply *replies)
{
    list_task *t = arg;
    const master_reply *r = &replies[t->req.pos.master];
    if (!answered(r)) {
        /* One that is down, in quarantine or refusing: the walk passes it
         * (a majority of those that vote still meets one of the rest). One
         * that is up but late: the page ends here, and the next asks it
         * again. */
        if (late(t, t->req.pos.master, r)) {
            round_late(t);
            return;
        }
        if (!list_next_master(&t->req.pos, t->n, true)) {
            finish_why(t, RL_NO_QUORUM, replies, voting_now(t));   /* too few left to scan */
            return;
        }
        go_on(t);
        return;
    }
    t->blob = malloc(r->blob_len + 1);
    if (!t->blob) {
        finish(t, RL_INTERNAL);
        return;
    }
    memcpy(t->blob, r->blob, r->blob_len + 1);
    list_pos next = t->req.pos;
    int want = t->req.limit - t->count;
    t->nnames = list_scan_parse(t->blob, r->blob_len, &next, t->names,
                                want < LIST_ROUND_NAMES ? want : LIST_ROUND_NAMES);
    if (t->nnames < 0) {
        t->nnames = 0;
        /* An answer not well formed: as a refusal. */
        if (!list_next_master(&t->req.pos, t->n, true)) {
            finish_why(t, RL_NO_QUORUM, replies, voting_now(t));
            return;
        }
        go_on(t);
        return;
    }
    t->scanned = t->req.pos.master;
    t->req.pos = next;
    if (!strcmp(next.cursor, "0") && !next.after[0] && !list_next_master(&t->req.pos, t->n, false)) {
        /* The last master scanned to its end, fewer than list_scanned of
         * them in all (the rest passed as down): nothing says the walk met
         * every name a majority holds. */
        finish_why(t, RL_NO_QUORUM, replies, voting_now(t));
        return;
    }
    if (t->nnames == 0)
        go_on(t);
    else if (scanned_before(t))
        present_step(t);
    else
        read_step(t);
}

static void scan_step(list_task *t)
{
    t->round_pos = t->req.pos;
    char pattern[(RULES_NAME_MAX + CONF_MAX_KEY_PREFIX) * 2 + 32], limit[24], plen[24], count[24];
    if (list_pattern(t->req.kind, t->cfg->key_prefix, t->req.prefix, pattern, sizeof pattern) < 0) {
        finish(t, RL_INTERNAL);
        return;
    }
    int want = t->req.limit - t->count;
    snprintf(limit, sizeof limit, "%d", want < LIST_ROUND_NAMES ? want : LIST_ROUND_NAMES);
    snprintf(count, sizeof count, "%d", t->req.pos.count);
    snprintf(plen, sizeof plen, "%zu", strlen(t->cfg->key_prefix));
    const char *args[] = {SCRIPT_MARKER_KEY, t->req.pos.cursor, t->req.pos.after, count, pattern, limit,
                          kind_arg(t), plen, guard_of(t)};
    size_t lens[9];
    for (int i = 0; i < 9; i++)
        lens[i] = strlen(args[i]);
    mpool_eval(t->pool, &script_list_scan, 1u << t->req.pos.master, 1, 9, args, lens, scan_done, t);
}

static void start(void *arg)
{
    list_task *t = arg;
    if (t->req.pos.master < 0)
        read_step(t);
    else
        scan_step(t);
}

int list_run(mpool *pool, const conf *cfg, const list_request *req, list_done_fn done, void *arg)
{
    list_task *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->pool = pool;
    t->cfg = cfg;
    t->n = mpool_size(pool);
    t->req = *req;
    t->done = done;
    t->arg = arg;
    t->start_us = loop_now_us();
    static const char *const keys[] = {"locks", "elections", "semaphores"};
    t->root = cJSON_CreateObject();
    t->items = cJSON_AddArrayToObject(t->root, keys[req->kind]);
    t->copies = calloc((size_t)t->n, sizeof *t->copies);
    if (!t->items || !t->copies || loop_post(mpool_loop(pool), start, t) < 0) {
        cJSON_Delete(t->root);
        free(t->copies);
        free(t);
        return -1;
    }
    return 0;
}
