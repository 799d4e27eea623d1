/* master_undo.c - remembered releases: a redo_when_back script that a master
 * could not take (down, lagging, or its connection dropped before the
 * answer) waits in that master's queue (undo_head..undo_tail) and is written
 * first on its next connection, before any command sent after it, for up to
 * the pool's redo_us. One that a master answered NOSCRIPT and that cannot
 * go again in its place (master_batch.c: a command sent after it ran
 * first) goes out at once, with its body (master_undo_resend): safe because
 * it replays as redo_as, which matches one grant's own value only.
 *
 * Depends on master_pipeline.c (packing, appending to the connection).
 */
#include <stdlib.h>

#include "master_int.h"

#define MASTER_UNDO_MAX 4096    /* queued undo commands per master; the oldest go first */

/* A command to run on a master when it is back (a redo_when_back script). */
struct undo {
    struct undo *next;
    uint64_t expires_us;
    int argc;
    const char **argv;          /* EVAL body nkeys args...; one allocation */
    size_t *lens;
};

/* Queues u to run when m is back (freed instead once expired). At most
 * MASTER_UNDO_MAX wait; the oldest go first, as they expire first. */
void master_undo_keep(struct master *m, struct undo *u, uint64_t now)
{
    if (now >= u->expires_us) {
        free(u);
        return;
    }
    u->next = NULL;
    if (m->nundo == MASTER_UNDO_MAX) {
        struct undo *old = m->undo_head;
        m->undo_head = old->next;
        if (!m->undo_head)
            m->undo_tail = NULL;
        m->nundo--;
        free(old);
    }
    if (m->undo_tail)
        m->undo_tail->next = u;
    else
        m->undo_head = u;
    m->undo_tail = u;
    m->nundo++;
}

/* An undo of script s (EVAL: a returning master may have lost its script
 * cache), or NULL when out of memory. */
static struct undo *undo_new(const mscript *s, int nkeys, int nargs, const char *const *args,
                             const size_t *lens, uint64_t expires_us)
{
    struct undo *u = malloc(sizeof *u + mpool_pack_size(nargs, lens));
    if (!u)
        return NULL;
    u->next = NULL;
    u->expires_us = expires_us;
    u->argc = nargs + 3;
    mpool_pack_command(u + 1, "EVAL", s->body, nkeys, nargs, args, lens, &u->argv, &u->lens);
    return u;
}

/* The undo of batch b for m: its script (or the script it replays as) with
 * b's arguments. NULL when b's script is not redo_when_back, or out of
 * memory (logged). */
static struct undo *undo_of(mpool *p, struct master *m, const struct mbatch *b, uint64_t now)
{
    if (!b->script->redo_when_back)
        return NULL;
    /* argv: EVALSHA sha nkeys args... */
    const mscript *rs = b->script->redo_as ? b->script->redo_as : b->script;
    struct undo *u = undo_new(rs, atoi(b->argv[2]), b->argc - 3, b->argv + 3, b->argvlen + 3,
                              now + p->redo_us);
    if (!u)
        log_event(LOG_LEVEL_WARN, "master_undo_dropped", "addr", m->name, "reason", "out of memory", NULL);
    return u;
}

/* m could not take batch b (not voting, or its connection dropped before
 * the answer): a redo_when_back script waits to run when m is back, ahead
 * of anything sent to m later. */
void master_undo_redo(mpool *p, struct master *m, const struct mbatch *b, uint64_t now)
{
    struct undo *u = undo_of(p, m, b, now);
    if (u)
        master_undo_keep(m, u, now);
}

/* Writes undo command u on m's connection; the record owns u until the
 * answer. It gets the handshake's time limit, not the vote timeout: a
 * returning master with many undo commands must be able to run them all
 * rather than drop the connection and queue them again. A vote behind them
 * still completes on time (without this master's answer). -1 when out of
 * memory (u is still the caller's). */
static int undo_send(struct master *m, struct undo *u, uint64_t now)
{
    if (master_append(m, REC_UNDO, NULL, 0, u->argc, u->argv, u->lens, now,
                      now + MASTER_HANDSHAKE_TIMEOUT_US) < 0)
        return -1;
    m->tail->undo = u;
    return 0;
}

/* m answered NOSCRIPT to batch b (its script cache was flushed while
 * connected), and b cannot go again in its place: a command written after
 * it with its body has run already (master_batch.c). A redo_when_back
 * script still has to run there, so it goes out again now, with its body,
 * as its replay (redo_as). Left alone, a release would leave the lock on
 * m for its whole TTL. */
void master_undo_resend(mpool *p, struct master *m, const struct mbatch *b, uint64_t now)
{
    struct undo *u = undo_of(p, m, b, now);
    if (u && undo_send(m, u, now) < 0) {
        /* Out of memory now: it waits for m's next return (a lag or a new
         * connection), or expires there. */
        log_event(LOG_LEVEL_WARN, "master_undo_delayed", "addr", m->name, "reason", "out of memory", NULL);
        master_undo_keep(m, u, now);
    }
}

/* Writes the queued undo commands first on a new connection. */
void master_undo_flush(struct master *m, uint64_t now)
{
    struct undo *u;
    while ((u = m->undo_head)) {
        m->undo_head = u->next;
        if (!m->undo_head)
            m->undo_tail = NULL;
        m->nundo--;
        if (now >= u->expires_us) {
            free(u);
        } else if (undo_send(m, u, now) < 0) {
            log_event(LOG_LEVEL_WARN, "master_undo_dropped", "addr", m->name, "reason", "out of memory", NULL);
            free(u);
        }
    }
}

void master_undo_free(struct master *m)
{
    struct undo *u = m->undo_head;
    while (u) {
        struct undo *next = u->next;
        free(u);
        u = next;
    }
}
