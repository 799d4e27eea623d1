/* master_pipeline.c - commands on a master's connection: packing a script
 * command, the queue of records awaiting replies in the order they were
 * written (pipelining: the masters answer in order), and the rate-limited
 * line for a master's error answer.
 *
 * Depends on nothing else of the master layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_int.h"

/* Bytes mpool_pack_command needs for nargs arguments of lens. */
size_t mpool_pack_size(int nargs, const size_t *lens)
{
    size_t bytes = (size_t)(nargs + 3) * (sizeof(char *) + sizeof(size_t)) + 24;
    for (int i = 0; i < nargs; i++)
        bytes += lens[i];
    return bytes;
}

/* Lays out "verb script nkeys args..." in mem (mpool_pack_size bytes): argv, then
 * the lengths, the key count as text and a copy of every argument, so the
 * command outlives the caller's strings. verb and script are not copied. */
void mpool_pack_command(void *mem, const char *verb, const char *script, int nkeys, int nargs,
                        const char *const *args, const size_t *lens, const char ***argv_out,
                        size_t **lens_out)
{
    int argc = nargs + 3;
    const char **argv = mem;
    size_t *argvlen = (size_t *)(argv + argc);
    char *nkeys_str = (char *)(argvlen + argc);
    char *copy = nkeys_str + 24;
    snprintf(nkeys_str, 24, "%d", nkeys);
    argv[0] = verb;
    argvlen[0] = strlen(verb);
    argv[1] = script;
    argvlen[1] = strlen(script);
    argv[2] = nkeys_str;
    argvlen[2] = strlen(nkeys_str);
    for (int i = 0; i < nargs; i++) {
        memcpy(copy, args[i], lens[i]);
        argv[3 + i] = copy;
        argvlen[3 + i] = lens[i];
        copy += lens[i];
    }
    *argv_out = argv;
    *lens_out = argvlen;
}

static void master_push(struct master *m, struct mrecord *r)
{
    r->next = NULL;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    m->want_write = true;
}

struct mrecord *master_pop(struct master *m)
{
    struct mrecord *r = m->head;
    if (r) {
        m->head = r->next;
        if (!m->head)
            m->tail = NULL;
        if (m->unsent == r)
            m->unsent = r->next;
    }
    return r;
}

/* Record r went out at now; a batch's deadline counts from its first write. */
static void record_sent(struct mrecord *r, uint64_t timeout_us, uint64_t now)
{
    r->out = true;
    r->sent_us = now;
    r->due_us = r->deadline_us = now + r->timeout_us;
    struct mbatch *b = r->kind == REC_BATCH ? r->batch : NULL;
    if (b && !b->flushed) {
        b->flushed = true;
        b->deadline_us = now + timeout_us;
    }
}

void master_sent(struct master *m, uint64_t timeout_us, uint64_t now)
{
    for (struct mrecord *r = m->unsent; r; r = r->next) {
        record_sent(r, timeout_us, now);
        if (r->kind == REC_GROUP)   /* its members are each a batch's record */
            for (struct mrecord *x = r->members; x; x = x->next)
                record_sent(x, timeout_us, now);
    }
    m->unsent = NULL;
}

struct mrecord *master_record_new(enum rec_kind kind, struct mbatch *b, int slot, uint64_t now,
                                  uint64_t deadline)
{
    struct mrecord *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    *r = (struct mrecord){.kind = kind, .batch = b, .slot = slot, .sent_us = now,
                          .timeout_us = deadline > now ? deadline - now : 0,
                          .due_us = deadline, .deadline_us = deadline};
    return r;
}

int master_append_record(struct master *m, struct mrecord *r, int argc, const char **argv,
                         const size_t *lens)
{
    if (redisAppendCommandArgv(m->ctx, argc, argv, lens) != REDIS_OK)
        return -1;
    master_push(m, r);
    if (!m->unsent)
        m->unsent = r;
    return 0;
}

int master_append(struct master *m, enum rec_kind kind, struct mbatch *b, int slot,
                  int argc, const char **argv, const size_t *lens, uint64_t now,
                  uint64_t deadline)
{
    struct mrecord *r = master_record_new(kind, b, slot, now, deadline);
    if (!r)
        return -1;
    if (master_append_record(m, r, argc, argv, lens) < 0) {
        free(r);
        return -1;
    }
    return 0;
}

/* A master's error answer, at most one line a second per master with a
 * count of those left out: a script error repeats on every request. */
void master_log_error(struct master *m, const char *script, const char *error, uint64_t now)
{
    unsigned long long suppressed;
    if (!log_allow(&m->error_log, now, &suppressed))
        return;
    char more[24];
    snprintf(more, sizeof more, "%llu", suppressed);
    log_event(LOG_LEVEL_WARN, "master_error", "addr", m->name, "script", script, "error", error,
              "suppressed_since_last", more, NULL);
}
