/* master_batch.c - pipelined batches (mpool_eval): one script to a set of
 * masters, their replies converted to master_reply and collected until every
 * master asked has answered, the batch's decide says the outcome is known
 * (mpool_eval_decided: what is still owed then counts as late), or the
 * deadline passes (a FIFO by deadline: all share the pool's timeout),
 * and the guard's verdict on each answer. A
 * script goes with its body (EVAL) the first time on each connection and by
 * EVALSHA after; NOSCRIPT (a cache flushed while connected) is answered by
 * sending the body again in the command's place, before every command sent
 * after it (redo_in_place), also after the batch was answered, for a
 * script that must still run (a release, a settle).
 *
 * A batch is freed when its last reference goes (batch_drop): one per record
 * still waiting on a master, one until its callback has run, one while it is
 * in the FIFO.
 *
 * Depends on master_pipeline.c, master_undo.c (a release a master could not
 * take), master_marker.c (the guard) and the loop (loop.h).
 */
#include <stdlib.h>
#include <string.h>

#include "master_int.h"

/* Drops n references to b (n >= 1) and frees it when none is left. Every
 * release of a reference goes through here once per event, so no path can
 * touch b after the decrement that freed it. */
static void batch_drop(struct mbatch *b, int n)
{
    b->refs -= n;
    if (b->refs == 0) {
        for (int i = 0; i < b->nreplies; i++)
            free(b->replies[i].blob);
        free(b->argv);
        free(b);
    }
}

/* Calls b's callback if it has not run yet. Returns the references the
 * caller must drop for it: 1 (the "uncompleted" reference) the first time,
 * 0 after. Never frees b. */
static int batch_complete(struct mbatch *b)
{
    if (b->completed)
        return 0;
    b->completed = true;
    if (b->done)
        b->done(b->arg, b->replies);
    return 1;
}

/* A master answered (or failed) for batch b: drops the record's reference,
 * and the uncompleted one if this was the last answer owed. When the
 * batch's decide says its outcome is known, it joins the decided list. */
void mpool_batch_answer(mpool *p, struct mbatch *b, int slot, const master_reply *r)
{
    int drop = 1;
    if (b->completed) {
        free(r->blob);   /* nobody reads an answer after done */
    } else {
        b->replies[slot] = *r;
        if (--b->pending == 0) {
            drop += batch_complete(b);
        } else if (!b->decided && b->decide && b->decide(b->arg, b->replies)) {
            b->decided = true;
            b->dnext = p->decided;
            p->decided = b;
            b->refs++;   /* the decided list's */
        }
    }
    batch_drop(b, drop);
}

void mpool_run_decided(mpool *p)
{
    while (p->decided) {
        struct mbatch *b = p->decided;
        p->decided = b->dnext;
        batch_drop(b, 1 + batch_complete(b));
    }
}

static void convert_reply(const redisReply *rr, master_reply *out, bool long_reply)
{
    memset(out, 0, offsetof(master_reply, str));
    out->str[0] = '\0';
    if (rr->type == REDIS_REPLY_ERROR) {
        out->kind = MREPLY_ERROR;
    } else {
        out->kind = MREPLY_VALUE;
    }
    const redisReply *items = rr;
    size_t n = 1;
    const redisReply *const *elems = &items;
    if (rr->type == REDIS_REPLY_ARRAY) {
        elems = (const redisReply *const *)rr->element;
        n = rr->elements;
    }
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = elems[i];
        if (e->type == REDIS_REPLY_INTEGER && out->nints < MREPLY_MAX_INTS) {
            out->ints[out->nints++] = e->integer;
        } else if ((e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS ||
                    e->type == REDIS_REPLY_ERROR) && !out->has_str) {
            size_t len = e->len < MREPLY_STR_MAX ? e->len : MREPLY_STR_MAX;
            memcpy(out->str, e->str, len);
            out->str[len] = '\0';
            out->str_len = len;
            out->has_str = true;
            if (long_reply && (out->blob = malloc(e->len + 1)) != NULL) {
                memcpy(out->blob, e->str, e->len);
                out->blob[e->len] = '\0';
                out->blob_len = e->len;
            }
        }
    }
}

/* Script s's bit in a master's `cached` (0 past 32 scripts: such a script
 * always goes with its body). */
static uint32_t script_bit(mpool *p, const mscript *s)
{
    for (int k = 0; k < p->nscripts; k++)
        if (p->scripts[k] == s)
            return 1u << k;
    if (p->nscripts == (int)(sizeof p->scripts / sizeof p->scripts[0]))
        return 0;
    p->scripts[p->nscripts] = s;
    return 1u << p->nscripts++;
}

/* Writes record r of a batch alone: EVALSHA where m's connection has
 * already been sent the script's body, else EVAL with the body (which also
 * loads it), so a master fresh from a start or restart never answers
 * NOSCRIPT. 0, or -1 when out of memory (r is still the caller's). */
static int append_alone(mpool *p, struct master *m, struct mrecord *r)
{
    struct mbatch *b = r->batch;
    uint32_t bit = script_bit(p, b->script);
    if (m->cached & bit)
        return master_append_record(m, r, b->argc, b->argv, b->argvlen);
    const char *argv0 = b->argv[0], *argv1 = b->argv[1];
    size_t len0 = b->argvlen[0], len1 = b->argvlen[1];
    b->argv[0] = "EVAL";
    b->argvlen[0] = 4;
    b->argv[1] = b->script->body;
    b->argvlen[1] = strlen(b->script->body);
    int app = master_append_record(m, r, b->argc, b->argv, b->argvlen);
    r->body = app == 0;
    b->argv[0] = argv0;
    b->argv[1] = argv1;
    b->argvlen[0] = len0;
    b->argvlen[1] = len1;
    if (app == 0)
        m->cached |= bit;
    return app;
}

/* Queues batch b's command for m as record slot, due at deadline: it waits
 * in m's held list (grp_head) until master_group_flush writes it, at the
 * turn's write or once m has answered its last write, or before anything
 * else is appended to m. 0, or -1 when out of memory (nothing queued). */
static int batch_append(mpool *p, struct master *m, struct mbatch *b, int slot, uint64_t now,
                        uint64_t deadline)
{
    struct mrecord *r = master_record_new(REC_BATCH, b, slot, now, deadline);
    if (!r)
        return -1;
    /* Every script command waits in order, grouped or not, so none
     * overtakes another. */
    r->next = NULL;
    if (m->grp_tail)
        m->grp_tail->next = r;
    else
        m->grp_head = r;
    m->grp_tail = r;
    return 0;   /* master_flush writes it, this turn or once m has answered */
}

/* Bytes of a number as group call text (master.h's layout). */
#define GROUP_NUM_LEN 24

/* Writes first..(n records) as one call of their group script. 0, or -1
 * when out of memory (the records are still the caller's). */
static int append_group(mpool *p, struct master *m, struct mrecord *first, int n, uint64_t now)
{
    const mscript *g = first->batch->script->group;
    int nkeys = 0, nargs = 0;
    struct mrecord *x = first;
    for (int i = 0; i < n; i++, x = x->next) {
        const struct mbatch *b = x->batch;
        nkeys += b->nkeys;
        nargs += b->argc - 3 - b->nkeys;
    }
    int nnums = 2 + 3 * n, argc = 3 + nkeys + 1 + 3 * n + nargs;
    size_t bytes = (size_t)argc * (sizeof(char *) + sizeof(size_t)) + (size_t)nnums * GROUP_NUM_LEN;
    const char **argv = malloc(bytes);
    /* The master has the pool's timeout from when a write takes the call
     * (master_sent), however long its commands waited here: time spent
     * holding them (for the master's last answer, or in a long turn) is
     * never the master's. */
    struct mrecord *gr = argv ? master_record_new(REC_GROUP, NULL, 0, now, now + p->timeout_us) : NULL;
    if (!gr) {
        free(argv);
        return -1;
    }
    size_t *lens = (size_t *)(argv + argc);
    char *num = (char *)(lens + argc);
    int k = 0;
#define ARG(str, len) do { argv[k] = (str); lens[k] = (len); k++; } while (0)
#define NUM(v) do { int l_ = snprintf(num, GROUP_NUM_LEN, "%d", (int)(v)); ARG(num, (size_t)l_); \
                    num += GROUP_NUM_LEN; } while (0)
    uint32_t bit = script_bit(p, g);
    bool cached = (m->cached & bit) != 0;
    ARG(cached ? "EVALSHA" : "EVAL", cached ? 7u : 4u);
    ARG(cached ? g->sha : g->body, cached ? 40u : strlen(g->body));
    NUM(nkeys);
    x = first;
    for (int i = 0; i < n; i++, x = x->next)
        for (int j = 0; j < x->batch->nkeys; j++)
            ARG(x->batch->argv[3 + j], x->batch->argvlen[3 + j]);
    NUM(n);
    x = first;
    for (int i = 0; i < n; i++, x = x->next) {
        NUM(x->batch->script->group_fn);
        NUM(x->batch->nkeys);
        NUM(x->batch->argc - 3 - x->batch->nkeys);
    }
    x = first;
    for (int i = 0; i < n; i++, x = x->next)
        for (int j = 3 + x->batch->nkeys; j < x->batch->argc; j++)
            ARG(x->batch->argv[j], x->batch->argvlen[j]);
#undef NUM
#undef ARG
    int app = master_append_record(m, gr, argc, argv, lens);
    free(argv);
    if (app < 0) {
        free(gr);
        return -1;
    }
    if (!cached)
        m->cached |= bit;
    gr->body = !cached;
    gr->members = first;
    gr->nmembers = n;
    return 0;
}

void master_group_flush(mpool *p, struct master *m, uint64_t now)
{
    if (m->drain_until)
        return;   /* a NOSCRIPT's drain: what is held waits for the commands in flight */
    m->redo_tail = NULL;
    while (m->grp_head) {
        /* The longest run of one group script, up to MSCRIPT_GROUP_MAX (a
         * script of no group: itself alone). */
        struct mrecord *first = m->grp_head, *last = first;
        const mscript *g = first->batch->script->group;
        int n = 1;
        while (g && n < MSCRIPT_GROUP_MAX && last->next && last->next->batch->script->group == g) {
            last = last->next;
            n++;
        }
        m->grp_head = last->next;
        if (!m->grp_head)
            m->grp_tail = NULL;
        last->next = NULL;
        if (g && n >= MSCRIPT_GROUP_MIN && append_group(p, m, first, n, now) == 0)
            continue;
        /* Too few to gain from a group call (or no memory for one): each
         * goes alone; one that cannot (out of memory) never reaches m. */
        while (first) {
            struct mrecord *next = first->next;
            if (append_alone(p, m, first) < 0) {
                master_record_failed(p, m, first, false, now);
                free(first);
            }
            first = next;
        }
    }
}

void master_record_failed(mpool *p, struct master *m, struct mrecord *r, bool sent, uint64_t now)
{
    master_reply failed = {.kind = MREPLY_FAIL, .sent = sent};
    if (r->kind == REC_BATCH) {
        master_undo_redo(p, m, r->batch, now);   /* may not have run */
        mpool_batch_answer(p, r->batch, r->slot, &failed);
        return;
    }
    struct mrecord *x = r->members;
    r->members = NULL;
    while (x) {
        struct mrecord *next = x->next;
        master_record_failed(p, m, x, sent, now);
        free(x);
        x = next;
    }
}

void master_group_reply(mpool *p, struct master *m, struct mrecord *r, const redisReply *rr,
                        uint64_t now)
{
    bool each = rr->type == REDIS_REPLY_ARRAY && rr->elements == (size_t)r->nmembers;
    static char shape[] = "ERR redlockd: a group call answered with a reply of another shape";
    redisReply wrong = {.type = REDIS_REPLY_ERROR, .str = shape, .len = sizeof shape - 1};
    if (!each && rr->type != REDIS_REPLY_ERROR)
        rr = &wrong;   /* never seen: no member takes a reply that is not its own */
    struct mrecord *x = r->members;
    r->members = NULL;
    for (size_t i = 0; x; i++) {
        struct mrecord *next = x->next;
        /* A call that failed as a whole (NOSCRIPT, NOPERM, BUSY ...) is
         * each member's answer: a NOSCRIPT sends each again (with bodies). */
        master_batch_reply(p, m, x, each ? rr->element[i] : rr, now);
        free(x);
        x = next;
    }
}

/* m answered r NOSCRIPT: its script cache was flushed under the live
 * connection (SCRIPT FLUSH), so r did not run. It goes again, with its
 * body, in its place: ahead of everything held back for m, and nothing
 * held is written until every command in flight now has answered
 * (drain_until). Those among them that name a script by EVALSHA answer
 * NOSCRIPT too and come back here, each behind the one before: so no
 * command runs out of the order it was sent in (a repair after the
 * release it followed, a caller's unlock after its next grant). A
 * command written after r with its script's body (the first of that
 * script on the connection) has run already, though: then r cannot keep
 * its place, and -1 says so. A batch answered without m (m was slow) is
 * sent again only when its script must still run there (redo_when_back:
 * a release, a settle); nobody reads the answer. 0, or -1. */
static int redo_in_place(mpool *p, struct master *m, const struct mrecord *r, uint64_t now)
{
    struct mbatch *b = r->batch;
    for (const struct mrecord *x = m->head; x; x = x->next)
        if (x->body)
            return -1;
    if (b->completed && !b->script->redo_when_back)
        return -1;
    struct mrecord *n = master_record_new(REC_BATCH, b, r->slot, now,
                                          b->completed ? now + p->timeout_us : r->deadline_us);
    if (!n)
        return -1;
    if (m->redo_tail) {
        n->next = m->redo_tail->next;
        m->redo_tail->next = n;
    } else {
        n->next = m->grp_head;
        m->grp_head = n;
    }
    if (!n->next)
        m->grp_tail = n;
    m->redo_tail = n;
    if (!m->drain_until)
        m->drain_until = m->tail;   /* NULL: nothing in flight, nothing to wait for */
    return 0;
}

/* m answered r with rr. Replies come in order, so this is the answer to the
 * command r recorded. */
void master_batch_reply(mpool *p, struct master *m, const struct mrecord *r, const redisReply *rr,
                        uint64_t now)
{
    struct mbatch *b = r->batch;
    if (rr->type == REDIS_REPLY_ERROR && !strncmp(rr->str, "NOSCRIPT", 8)) {
        m->cached = 0;   /* bodies again, from now on */
        if (redo_in_place(p, m, r, now) == 0)
            return;   /* the batch's reference moves to the new record */
        /* It cannot run in its place: it counts as an error, and a
         * release that must still run goes now as its exact-value replay
         * (redo_as), which can delete no later grant. */
        master_undo_resend(p, m, b, now);
        mpool_batch_answer(p, b, r->slot, &(master_reply){.kind = MREPLY_ERROR});
        return;
    }
    master_reply mr;
    convert_reply(rr, &mr, b->script->long_reply);
    mr.quarantined = master_guard(p, m, b->script, &mr);
    if (mr.kind == MREPLY_ERROR)
        master_log_error(m, b->script->name, mr.str, now);
    if (mr.kind == MREPLY_ERROR && b->script->takes_memory) {
        uint64_t word = 0;
        memcpy(&word, mr.str, strcspn(mr.str, " ") < 8 ? strcspn(mr.str, " ") : 8);
        atomic_store(&m->refusal_word, word);
        atomic_store(&m->refused_at_us, now ? now : 1);
        atomic_fetch_add(&m->refusals, 1);
    } else if (b->script->takes_memory) {
        atomic_store(&m->refused_at_us, 0);
    }
    mpool_batch_answer(p, b, r->slot, &mr);
}

void mpool_eval(mpool *p, const mscript *s, uint32_t mask, int nkeys, int nargs,
                const char *const *args, const size_t *lens, mpool_done_fn done, void *arg)
{
    mpool_eval_decided(p, s, mask, nkeys, nargs, args, lens, NULL, done, arg);
}

void mpool_eval_decided(mpool *p, const mscript *s, uint32_t mask, int nkeys, int nargs,
                        const char *const *args, const size_t *lens, mpool_decide_fn decide,
                        mpool_done_fn done, void *arg)
{
    uint64_t now = loop_now_us();
    int argc = nargs + 3;
    /* One allocation holds the whole command: NOSCRIPT may need it again
     * after this call. */
    struct mbatch *b = calloc(1, sizeof *b + (size_t)p->n * sizeof b->replies[0]);
    void *mem = b ? malloc(mpool_pack_size(nargs, lens)) : NULL;
    if (!mem) {
        /* No memory: every master counts as failed. */
        free(b);
        master_reply replies[MASTER_MAX] = {0};
        for (int i = 0; i < p->n; i++)
            replies[i].kind = (mask >> i & 1u) ? MREPLY_FAIL : MREPLY_NONE;
        if (done)
            done(arg, replies);
        return;
    }
    const char **argv;
    size_t *argvlen;
    mpool_pack_command(mem, "EVALSHA", s->sha, nkeys, nargs, args, lens, &argv, &argvlen);
    b->done = done;
    b->decide = done ? decide : NULL;
    b->arg = arg;
    b->script = s;
    b->nkeys = nkeys;
    b->argc = argc;
    b->argv = argv;
    b->argvlen = argvlen;
    b->nreplies = p->n;
    b->deadline_us = now + p->timeout_us;
    b->refs = 2;   /* uncompleted + FIFO */

    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (!(mask >> i & 1u)) {
            b->replies[i].kind = MREPLY_NONE;
            continue;
        }
        if (!master_votes(m) || batch_append(p, m, b, i, now, b->deadline_us) < 0) {
            b->replies[i].kind = MREPLY_FAIL;
            master_undo_redo(p, m, b, now);
            continue;
        }
        b->replies[i].kind = MREPLY_FAIL;   /* until it answers */
        b->replies[i].sent = true;
        b->pending++;
        b->refs++;
    }
    if (b->pending == 0) {
        b->next = p->ready;
        p->ready = b;
        b->refs--;   /* never joins the FIFO */
        return;
    }
    b->next = NULL;
    if (p->fifo_tail)
        p->fifo_tail->next = b;
    else
        p->fifo_head = b;
    p->fifo_tail = b;
}

void mpool_run_ready(mpool *p)
{
    mpool_run_decided(p);
    while (p->ready) {
        struct mbatch *b = p->ready;
        p->ready = b->next;
        batch_drop(b, batch_complete(b));
    }
}

/* Puts b in the FIFO by its deadline (usually at the tail). */
static void fifo_insert(mpool *p, struct mbatch *b)
{
    struct mbatch **at = &p->fifo_head;
    while (*at && (*at)->deadline_us <= b->deadline_us)
        at = &(*at)->next;
    b->next = *at;
    *at = b;
    if (!b->next)
        p->fifo_tail = b;
}

void mpool_expire_batches(mpool *p, uint64_t now, mbatch_wait_fn wait)
{
    /* Masters that failed answered their batches above; what is left at the
     * head of the FIFO past its deadline completes with the answers it has,
     * unless it waits for a master that is not late yet. */
    while (p->fifo_head && now >= p->fifo_head->deadline_us) {
        struct mbatch *b = p->fifo_head;
        p->fifo_head = b->next;
        if (!p->fifo_head)
            p->fifo_tail = NULL;
        uint64_t until;
        if (!b->completed && wait && wait(p, b, now, &until) && until > now) {
            b->deadline_us = until;
            fifo_insert(p, b);
            continue;
        }
        /* unanswered slots stay MREPLY_FAIL; the FIFO's reference goes too */
        batch_drop(b, 1 + batch_complete(b));
    }
}
