/* election_watch.c - see election_watch.h. */
#include "election_watch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"

struct election_watch {
    pthread_mutex_t mu;             /* guards everything below */
    int refs;                       /* the connection's, and the read or timer in flight */
    bool closed;
    rl_engine *e;
    mpool *pool;
    rl_request req;                 /* the inspect */
    char label[RL_NAME_MAX + 1];
    bool said;                      /* "state" has been queued */
    election_state last;            /* as last told (a vacant one keeps the last term) */
    char *out;                      /* events not yet read */
    size_t len, off;
    bool want_wake;
    void (*wake)(void *);
    void *arg;
};

static void unref(election_watch *w)
{
    pthread_mutex_lock(&w->mu);
    int left = --w->refs;
    pthread_mutex_unlock(&w->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&w->mu);
    free(w->out);
    free(w);
}

static void poll_done(void *arg, const rl_result *res);

/* On the loop: the next read, unless the watch or the loop is ending. */
static void poll_now(void *arg)
{
    election_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    bool stop = w->closed || mpool_is_stopping(w->pool);
    pthread_mutex_unlock(&w->mu);
    if (stop || rl_submit(w->e, &w->req, poll_done, w, NULL) < 0)
        unref(w);
}

/* w->mu held. Queues line (taken). */
static void queue_line(election_watch *w, char *line)
{
    size_t n = strlen(line);
    if (w->off == w->len)
        w->off = w->len = 0;
    char *grown = realloc(w->out, w->len + n);
    if (!grown) {
        free(line);
        return;
    }
    w->out = grown;
    memcpy(w->out + w->len, line, n);
    w->len += n;
    free(line);
    if (w->want_wake && !w->closed) {
        w->want_wake = false;
        w->wake(w->arg);
    }
}

static void poll_done(void *arg, const rl_result *res)
{
    election_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    if (!w->closed && res->outcome == RL_OK) {
        election_state now;
        election_state_of(res, &now);
        if (!now.held)
            now.term = w->last.term;
        const char *ev = election_change(!w->said, &w->last, &now);
        if (ev) {
            char *line = election_event_line(ev, w->label, &now);
            if (line)
                queue_line(w, line);
            w->said = true;
            w->last = now;
        }
    }
    bool stop = w->closed || mpool_is_stopping(w->pool);
    pthread_mutex_unlock(&w->mu);
    if (stop || mpool_after(w->pool, ELECTION_WATCH_POLL_MS * 1000ULL, poll_now, w) < 0)
        unref(w);
}

election_watch *election_watch_start(rl_engine *e, mpool *pool, const char *lock_name,
                                     const char *label, void (*wake)(void *), void *arg)
{
    election_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    w->refs = 2;
    w->e = e;
    w->pool = pool;
    w->req.op = RL_INSPECT;
    snprintf(w->req.name, sizeof w->req.name, "%s", lock_name);
    snprintf(w->label, sizeof w->label, "%s", label);
    w->wake = wake;
    w->arg = arg;
    if (rl_submit(e, &w->req, poll_done, w, NULL) < 0)
        w->refs = 1;   /* nothing will be said; the connection still closes it */
    return w;
}

long election_watch_read(election_watch *w, char *buf, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    long n = 0;
    if (w->off < w->len) {
        size_t k = w->len - w->off;
        if (k > cap)
            k = cap;
        memcpy(buf, w->out + w->off, k);
        w->off += k;
        n = (long)k;
    } else {
        w->want_wake = true;
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

void election_watch_close(election_watch *w)
{
    pthread_mutex_lock(&w->mu);
    w->closed = true;
    w->want_wake = false;
    pthread_mutex_unlock(&w->mu);
    unref(w);
}
