/* election_watch.c - see election_watch.h.
 *
 * A watch's reads run on its loop: one read at a time (reading), then a
 * timer for the next. A notice of the election (a release, a grant or a
 * proclaim, on any instance) starts a read at once when none is under way;
 * the timer armed before it is then stale (its gen is old) and only lets
 * go of its reference. References: the connection's, one per read in
 * flight, one per armed timer.
 *
 * A watch keeps the newest state it read and the state it last handed to
 * its client, never a queue of events: a client that reads slowly (or not
 * at all) is handed one event that takes it from the one to the other, as
 * a held stream's renewals are (hold.c, format_next). Its memory is the
 * watch and at most one event's line. */
#include "election_watch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "election.h"

struct election_watch {
    pthread_mutex_t mu;             /* guards everything below */
    int refs;
    bool closed;
    bool reading;                   /* a read is in flight */
    unsigned gen;                   /* of the timer armed last */
    rl_engine *e;
    mpool *pool;
    rl_request req;                 /* the inspect */
    char key[RL_INTERNAL_NAME_MAX + 64]; /* the lock's key, as notices carry it */
    char label[RL_NAME_MAX + 1];
    bool have;                      /* a state has been read (last) */
    long long confirming;           /* a new term read once: taken only when read again */
    int confirms;                   /* reads in a row that showed another new term */
    election_state last;            /* the newest state read (a vacant one keeps the last term) */
    bool said;                      /* the client has been handed "state" */
    election_state told;            /* the state as last handed to the client */
    char *out;                      /* the rest of an event the client's buffer did not take
                                       (NULL: none) */
    size_t len, off;
    bool want_wake;
    void (*wake)(void *);
    void *arg;
    struct election_watch *next;    /* in the registry */
};

/* Every open watch, for notices (loop threads look, under reg_mu). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static election_watch *registry;

struct tick {
    election_watch *w;
    unsigned gen;
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

/* Starts a read. w->mu held; false when it could not (nothing changed). */
static bool read_now(election_watch *w)
{
    if (w->closed || w->reading || loop_stopping(mpool_loop(w->pool)))
        return false;
    w->reading = true;
    w->refs++;
    if (rl_submit(w->e, &w->req, poll_done, w, NULL) < 0) {
        w->reading = false;
        w->refs--;
        return false;
    }
    return true;
}

static void tick_fired(void *arg)
{
    struct tick *t = arg;
    election_watch *w = t->w;
    pthread_mutex_lock(&w->mu);
    if (t->gen == w->gen)
        read_now(w);
    pthread_mutex_unlock(&w->mu);
    free(t);
    unref(w);   /* the timer's */
}

/* w->mu held: the client may read what changed. */
static void notify(election_watch *w)
{
    if (w->want_wake && !w->closed) {
        w->want_wake = false;
        w->wake(w->arg);
    }
}

static void poll_done(void *arg, const rl_result *res)
{
    election_watch *w = arg;
    bool confirm = false;
    pthread_mutex_lock(&w->mu);
    w->reading = false;
    if (!w->closed && res->outcome == RL_OK) {
        election_state now;
        election_state_of(res, &now);
        if (!now.held)
            now.term = w->last.term;
        const char *ev = election_change(!w->have, &w->last, &now);
        /* A new term is taken only once a second read shows it too: while a
         * grant raises the fence counters of its masters (or a late master
         * settles), a read can see a majority agree on a counter that is not
         * the grant's fence; that takes less than a read's round trip. */
        if (ev && !strcmp(ev, "elected") && w->confirming != now.term && w->confirms < 5) {
            w->confirming = now.term;
            w->confirms++;
            ev = NULL;
            confirm = true;
        } else {
            w->confirming = 0;
            w->confirms = 0;
        }
        if (ev) {
            /* The newest state replaces what the client has not read yet:
             * a slow reader skips to it (election_watch_read). */
            w->have = true;
            w->last = now;
            notify(w);
        }
    }
    if (confirm && read_now(w)) {
        w->gen++;   /* the read after it arms the next timer */
    } else if (!w->closed && !loop_stopping(mpool_loop(w->pool))) {
        struct tick *t = malloc(sizeof *t);
        if (t) {
            t->w = w;
            t->gen = ++w->gen;
            w->refs++;
            if (loop_after(mpool_loop(w->pool), ELECTION_WATCH_POLL_MS * 1000ULL, tick_fired, t) < 0) {
                w->refs--;
                free(t);
            }
        }
    }
    pthread_mutex_unlock(&w->mu);
    unref(w);   /* the read's */
}

/* A notice reached engine e: its watches of that key read at once. */
static void on_notice(void *arg, const char *key, size_t len, const char *value, size_t vlen)
{
    if (vlen && value[0] == '\n')
        return;   /* a heartbeat: nothing changed */
    rl_engine *e = arg;
    pthread_mutex_lock(&reg_mu);
    for (election_watch *w = registry; w; w = w->next) {
        if (w->e != e || strlen(w->key) != len || memcmp(w->key, key, len))
            continue;
        pthread_mutex_lock(&w->mu);
        read_now(w);
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_unlock(&reg_mu);
}

void election_watch_attach(rl_engine *e)
{
    (void)rl_engine_add_notice_hook(e, on_notice, e);
}

election_watch *election_watch_start(rl_engine *e, mpool *pool, const char *lock_name,
                                     const char *label, void (*wake)(void *), void *arg)
{
    election_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    w->refs = 1;
    w->e = e;
    w->pool = pool;
    w->req.op = RL_INSPECT;
    w->req.queued = true;   /* each read waits for a place among --max-inflight */
    snprintf(w->req.name, sizeof w->req.name, "%s", lock_name);
    rl_engine_key(e, lock_name, w->key, sizeof w->key);
    snprintf(w->label, sizeof w->label, "%s", label);
    w->wake = wake;
    w->arg = arg;
    rl_engine_notice_want(e, lock_name, true);
    pthread_mutex_lock(&reg_mu);
    w->next = registry;
    registry = w;
    pthread_mutex_unlock(&reg_mu);
    pthread_mutex_lock(&w->mu);
    read_now(w);
    pthread_mutex_unlock(&w->mu);
    return w;
}

/* The event that takes the client from what it was told to the newest
 * state, as one line (NULL: nothing changed, or out of memory). w->mu held. */
static char *next_line(election_watch *w)
{
    if (!w->have)
        return NULL;
    const char *ev = election_change(!w->said, &w->told, &w->last);
    w->said = true;
    w->told = w->last;
    return ev ? election_event_line(ev, w->label, &w->last) : NULL;
}

long election_watch_read(election_watch *w, char *buf, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    long n = 0;
    char *line = NULL;
    if (!w->out && (line = next_line(w))) {
        w->out = line;   /* the newest event: kept only while the client reads it */
        w->len = strlen(line);
        w->off = 0;
    }
    if (w->out) {
        size_t k = w->len - w->off;
        if (k > cap)
            k = cap;
        memcpy(buf, w->out + w->off, k);
        w->off += k;
        n = (long)k;
        if (w->off == w->len) {
            free(w->out);
            w->out = NULL;
        }
    } else {
        w->want_wake = true;
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}

void election_watch_close(election_watch *w)
{
    pthread_mutex_lock(&reg_mu);
    for (election_watch **p = &registry; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    rl_engine_notice_want(w->e, w->req.name, false);
    pthread_mutex_lock(&w->mu);
    w->closed = true;
    w->want_wake = false;
    pthread_mutex_unlock(&w->mu);
    unref(w);
}
