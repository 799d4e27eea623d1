/* master_notice.c - release notices (Redis pub/sub): a second connection
 * per master, read only, subscribed to the notice prefix and to every
 * channel some waiter wants (refcounted in chans), re-established with
 * backoff when lost; each message goes to the notice callback. Over TLS
 * too for a TLS master, the handshake under the connect deadline.
 *
 * Depends on master_conn.c (backoff, connect check, AUTH), the loop (loop.h)
 * and master_tls.c.
 */
#include <stdlib.h>
#include <string.h>

#include "master_int.h"

/* A notice channel some waiter wants, subscribed on every master. */
struct chan {
    struct chan *next;
    int refs;
    size_t len;
    char name[];
};

void master_sub_fail(mpool *p, struct master *m, uint64_t now)
{
    mtls_free(m->sub_tls);
    m->sub_tls = NULL;
    m->sub_want_write = false;
    if (m->sub) {
        redisFree(m->sub);
        m->sub = NULL;
    }
    if (atomic_load(&m->subscribed))
        log_event(LOG_LEVEL_WARN, "master_notices_lost", "addr", m->name, NULL);
    atomic_store(&m->subscribed, false);
    m->sub_connecting = false;
    m->sub_next_connect_us = now + master_backoff_next(&m->sub_backoff_us);
    (void)p;
}

void master_sub_connect(mpool *p, struct master *m, uint64_t now)
{
    m->sub_tls = NULL;
    m->sub = redisConnectNonBlock(m->addr.host, m->addr.port);
    if (!m->sub || m->sub->err) {
        master_sub_fail(p, m, now);
        return;
    }
    m->sub_connecting = true;
    m->sub_deadline_us = now + MASTER_HANDSHAKE_TIMEOUT_US;
}

/* Writes what m's subscription output buffer holds, as far as the socket
 * takes it (the rest when it is writable again). -1 on failure. */
static int sub_write(struct master *m)
{
    bool done = false;
    char why[200];
    if (mlink_write(m->sub, m->sub_tls, &done, why, sizeof why) < 0)
        return -1;
    m->sub_want_write = !done;
    return 0;
}

void master_sub_flush(mpool *p, struct master *m, uint64_t now)
{
    if (m->sub && !m->sub_connecting && m->sub_want_write && sub_write(m) < 0)
        master_sub_fail(p, m, now);
}

/* Sends one command on m's subscription connection. -1 on failure. */
static int sub_command(struct master *m, int argc, const char **argv, const size_t *lens)
{
    if (redisAppendCommandArgv(m->sub, argc, argv, lens) != REDIS_OK)
        return -1;
    return sub_write(m);
}

/* The connect finished (and, for TLS, the handshake): AUTH if needed,
 * then SUBSCRIBE to the prefix itself (no key is empty, so nothing is
 * published there: its confirmation says the connection works) and to
 * every channel wanted. */
void master_sub_start(mpool *p, struct master *m, uint64_t now)
{
    char why[200];
    if (!m->sub_tls) {
        if (master_connect_error(m->sub->fd) ||
            (m->addr.tls && !(m->sub_tls = mtls_start(p->tls, m->sub->fd, m->addr.host, why, sizeof why)))) {
            master_sub_fail(p, m, now);
            return;
        }
    }
    if (m->sub_tls) {
        /* A failure is the data connection's to report: it fails the same way. */
        int hs = mtls_handshake(m->sub_tls, why, sizeof why);
        if (hs < 0)
            master_sub_fail(p, m, now);
        if (hs <= 0)
            return;   /* still connecting: the connect deadline holds */
    }
    m->sub_connecting = false;
    if (p->password) {
        const char *argv[3];
        size_t lens[3];
        int argc = master_auth_argv(p, argv, lens);
        redisAppendCommandArgv(m->sub, argc, argv, lens);
    }
    size_t nch = 1;
    for (size_t b = 0; b < MASTER_CHAN_BUCKETS; b++)
        for (struct chan *c = p->chans[b]; c; c = c->next)
            nch++;
    const char **argv = malloc((nch + 1) * sizeof *argv);
    size_t *lens = malloc((nch + 1) * sizeof *lens);
    if (!argv || !lens)
        goto fail;
    size_t a = 0;
    argv[a] = "SUBSCRIBE";
    lens[a++] = 9;
    argv[a] = p->notice_channel;
    lens[a++] = p->notice_prefix_len;
    for (size_t b = 0; b < MASTER_CHAN_BUCKETS; b++)
        for (struct chan *c = p->chans[b]; c; c = c->next) {
            argv[a] = c->name;
            lens[a++] = c->len;
        }
    if (sub_command(m, (int)a, argv, lens) < 0)
        goto fail;
    free(argv);
    free(lens);
    return;
fail:
    free(argv);
    free(lens);
    master_sub_fail(p, m, now);
}

static size_t chan_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    return (size_t)(h & (MASTER_CHAN_BUCKETS - 1));
}

void mpool_notice_want(mpool *p, const char *channel, bool on)
{
    if (!p->notice_channel)
        return;
    size_t len = strlen(channel), b = chan_hash(channel, len);
    struct chan **pp = &p->chans[b];
    while (*pp && ((*pp)->len != len || memcmp((*pp)->name, channel, len)))
        pp = &(*pp)->next;
    struct chan *c = *pp;
    if (on && c) {
        c->refs++;
        return;
    }
    if (!on && (!c || --c->refs > 0))
        return;
    if (on) {
        c = malloc(sizeof *c + len + 1);
        if (!c)
            return;   /* no notices for it: its waiters fall back to timers */
        c->refs = 1;
        c->len = len;
        memcpy(c->name, channel, len + 1);
        c->next = p->chans[b];
        p->chans[b] = c;
    } else {
        *pp = c->next;
    }
    const char *argv[] = {on ? "SUBSCRIBE" : "UNSUBSCRIBE", channel};
    size_t lens[] = {on ? 9u : 11u, len};
    uint64_t now = loop_now_us();
    for (int i = 0; i < p->n; i++) {
        struct master *m = &p->masters[i];
        if (m->sub && !m->sub_connecting && sub_command(m, 2, argv, lens) < 0)
            master_sub_fail(p, m, now);
    }
    if (!on)
        free(c);
}

int mpool_notice_links(mpool *p)
{
    int up = 0;
    for (int i = 0; p->notice_channel && i < p->n; i++)
        up += atomic_load(&p->masters[i].subscribed);
    return up;
}

void master_sub_read(mpool *p, struct master *m, uint64_t now)
{
    char why[200];
    if (mlink_read(m->sub, m->sub_tls, why, sizeof why) < 0) {
        master_sub_fail(p, m, now);
        return;
    }
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(m->sub, &reply) != REDIS_OK) {
            master_sub_fail(p, m, now);
            return;
        }
        if (!reply)
            return;
        redisReply *r = reply;
        if (r->type == REDIS_REPLY_ERROR) {
            log_event(LOG_LEVEL_WARN, "master_subscribe_refused", "addr", m->name, "error", r->str, NULL);
            freeReplyObject(reply);
            master_sub_fail(p, m, now);
            return;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING) {
            const char *kind = r->element[0]->str;
            const redisReply *ch = r->element[1];
            if (!strcmp(kind, "subscribe") && ch->type == REDIS_REPLY_STRING &&
                ch->len == p->notice_prefix_len) {
                atomic_store(&m->subscribed, true);
                m->sub_backoff_us = MASTER_BACKOFF_MIN_US;
            } else if (!strcmp(kind, "subscribe") && ch->type == REDIS_REPLY_STRING &&
                       ch->len > p->notice_prefix_len) {
                /* Subscribed only now: a release just before was missed, so
                 * its waiters try once as if noticed. */
                p->notice_fn(p->notice_arg, ch->str + p->notice_prefix_len,
                             ch->len - p->notice_prefix_len);
            } else if (!strcmp(kind, "message") && r->element[2]->type == REDIS_REPLY_STRING) {
                p->notice_fn(p->notice_arg, r->element[2]->str, r->element[2]->len);
            }
        }
        freeReplyObject(reply);
        if (!m->sub)
            return;
    }
}

void mpool_set_notice(mpool *p, const char *channel, mpool_notice_fn fn, void *arg)
{
    free(p->notice_channel);
    p->notice_channel = channel ? strdup(channel) : NULL;
    p->notice_prefix_len = channel ? strlen(channel) : 0;
    p->notice_fn = fn;
    p->notice_arg = arg;
}

void mpool_notice_free(mpool *p)
{
    free(p->notice_channel);
    for (size_t b = 0; b < MASTER_CHAN_BUCKETS; b++)
        while (p->chans[b]) {
            struct chan *c = p->chans[b];
            p->chans[b] = c->next;
            free(c);
        }
}
