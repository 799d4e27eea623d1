/* hold.c - see hold.h. */
#include "hold.h"

#include <linux/sockios.h>   /* SIOCOUTQ */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "deadline.h"
#include "dlist.h"
#include "master.h"   /* mpool_now_us: the clock the engine counts validity on */

#define HOLD_RETRY_MIN_MS 100   /* a failed extension is tried again this soon, at the earliest */

enum hold_end { END_NONE, END_LOST, END_RELEASED };

struct hold {
    hold_set *s;
    rl_engine *e;                   /* the engine of the loop that granted it */
    struct hold *prev, *next;       /* in s->list */
    char name[RL_INTERNAL_NAME_MAX + 1];
    char token[TOKEN_MAX_LEN + 1];
    long long ttl_ms;
    long long fence;
    uint64_t valid_until_us;        /* end of the validity last obtained; the client is
                                       told margin_us less (announced_until) */
    uint64_t margin_us;             /* HOLD_TRANSIT_MARGIN_MS, at most a fifth of the ttl */
    int fd;                         /* the connection's socket (-1: unknown); read only
                                       while !closed */
    uint64_t out_at_us;             /* when the last event was handed to the connection */
    uint64_t next_try_us;           /* the next extension */
    const char *fail_reason;        /* of the last failed extension: the "lost" reason if
                                       validity runs out before one succeeds */
    int engine_refs;                /* engine requests in flight that point here */
    bool extending;                 /* an extension is in flight */
    bool release_after;             /* release once that extension answers */
    bool release_sent;
    bool release_when_read;         /* release once the last event has left (hold_read) */
    uint64_t release_at_us;         /* after a loss: release when the validity last
                                       announced, and margin_us, have run out (0: no such
                                       release due), even after hold_close */
    bool closed;                    /* the connection let go (hold_close) */

    /* An election's campaign (hold_campaign): no grant until elected. */
    bool election;                  /* events are named for an election */
    bool campaigning;               /* not elected yet: nothing to renew or release */
    bool acquiring;                 /* the campaign's acquire is in flight */
    rl_handle *acq;                 /* that acquire, until its rl_finish */
    rl_request acq_req;             /* what the campaign acquires */
    char label[RL_NAME_MAX + 1];    /* the election's or semaphore's name, as its events give it */
    char candidate[RL_OWNER_MAX + 1];

    /* A semaphore's permit (hold_permit): name is the slot's lock. */
    bool permit;
    hold_permit_of of;

    /* what the stream has still to say, in this order */
    bool pend_acquired;
    bool pend_campaigning;
    bool pend_renewed;
    enum hold_end end;
    const char *end_reason;         /* NULL: the event carries no reason */
    bool end_formatted;
    char out[HOLD_EVENT_MAX];       /* the event being handed out */
    size_t out_len, out_off;
    bool want_wake;                 /* hold_read answered 0 since the last wake */
    hold_wake_fn wake;
    void *arg;
};

struct hold_set {
    int max;
    pthread_mutex_t mu;
    pthread_cond_t changed;         /* the renewer's wake-up: a hold came or its timer moved */
    pthread_cond_t settled;         /* a release answered (hold_set_end_all waits) */
    hold *list;
    int used;                       /* holds open plus reservations */
    int open;
    int releases_pending;
    bool ending;                    /* stopping: no renewals, new holds refused */
    bool stop;
    pthread_t renewer;
    bool renewer_started;
};

static void campaign_try(hold *h, uint64_t now);

/* ---- events (s->mu held) ---- */

static void notify(hold *h)
{
    if (h->want_wake && !h->closed) {
        h->want_wake = false;
        h->wake(h->arg);
    }
}

static void end_stream(hold *h, enum hold_end kind, const char *reason)
{
    if (h->end != END_NONE)
        return;
    h->end = kind;
    h->end_reason = reason;
    h->pend_renewed = false;   /* nothing after the end counts */
    notify(h);
}

static void free_if_done(hold *h)
{
    if (!h->closed || h->engine_refs > 0 || h->release_at_us)
        return;
    hold_set *s = h->s;
    DLIST_UNLINK(s->list, h, prev, next);
    s->open--;
    s->used--;
    free(h);
}

/* ---- engine answers (engine thread) ---- */

static void release_done(void *arg, const rl_result *res)
{
    hold *h = arg;
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    /* Every release follows the stream's end (a close, a loss, a DELETE,
     * a shutdown): nothing is left to tell. */
    (void)res;
    h->engine_refs--;
    s->releases_pending--;
    pthread_cond_broadcast(&s->settled);
    free_if_done(h);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the connection's socket ---- */

/* Bounds how long the kernel keeps a connection whose peer went silent:
 * what is sent must be acknowledged within ttl_ms (TCP_USER_TIMEOUT), and
 * an idle connection is probed after a ttl. The hold itself stops renewing
 * sooner (client_silent); this only frees the connection. Best effort. */
static void sock_arm(int fd, long long ttl_ms)
{
    if (fd < 0)
        return;
    unsigned int user_timeout_ms = (unsigned int)ttl_ms;
    int on = 1, idle_s = ttl_ms >= 2000 ? (int)(ttl_ms / 1000) : 1, intvl_s = 1, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof intvl_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* Has the client stopped acknowledging? True when the last event left at
 * least a quarter of the ttl ago and the socket still holds bytes the
 * client has not acknowledged (SIOCOUTQ: written and not yet acked). Asked
 * before each extension, a third of the ttl after the last one, so a
 * client that fell silent is found at the first extension after the first
 * event it did not acknowledge. s->mu held, h not closed. */
static bool client_silent(const hold *h, uint64_t now)
{
    if (h->fd < 0 || !h->out_at_us || now < h->out_at_us + (uint64_t)h->ttl_ms * 1000ULL / 4)
        return false;
    int unacked = 0;
    return ioctl(h->fd, SIOCOUTQ, &unacked) == 0 && unacked > 0;
}

/* A request of op for h's lock and token. */
static rl_request request_of(const hold *h, enum rl_op op)
{
    rl_request req = {.op = op, .ttl_ms = h->ttl_ms, .keep_on_fail = op == RL_EXTEND};
    snprintf(req.name, sizeof req.name, "%s", h->name);
    snprintf(req.token, sizeof req.token, "%s", h->token);
    if (h->permit)   /* a slot's release notice goes to its semaphore's channel */
        snprintf(req.notice_name, sizeof req.notice_name, "%s", h->of.limit_name);
    return req;
}

static void ignore_answer(void *arg, const rl_result *res)
{
    (void)arg;
    (void)res;
}

/* A permit's renewal also keeps its semaphore's limit for a ttl, as a PATCH
 * of the permit does: the limit outlives every permit of it. */
static void keep_limit(const hold *h)
{
    rl_request req = {.op = RL_SEM_LIMIT, .limit = -1, .ttl_ms = h->ttl_ms};
    snprintf(req.name, sizeof req.name, "%s", h->of.limit_name);
    (void)rl_submit(h->of.limit_engine, &req, ignore_answer, NULL, NULL);
}

/* The lock is lost: the stream says so now; what the token may still hold
 * is released when the client closes the stream or when the validity it was
 * told runs out, never sooner (until it has read "lost", the client may
 * rely on that validity). */
static void end_lost(hold *h, const char *reason)
{
    end_stream(h, END_LOST, reason);
    h->release_at_us = h->valid_until_us;
}

/* Step 5 of Redlock for a hold that ends: release on every master, once,
 * after any extension in flight (which could otherwise renew it after the
 * release). s->mu held. */
static void release_lock(hold *h)
{
    if (h->release_sent || h->campaigning)
        return;
    if (h->extending) {
        h->release_after = true;
        return;
    }
    rl_request req = request_of(h, RL_RELEASE);
    h->release_sent = true;
    h->engine_refs++;
    h->s->releases_pending++;
    if (rl_submit(h->e, &req, release_done, h, NULL) < 0) {
        /* The engine has stopped: the lock expires with its ttl. */
        h->engine_refs--;
        h->s->releases_pending--;
        end_stream(h, END_LOST, "no_quorum");
    }
}

static void extend_done(void *arg, const rl_result *res)
{
    hold *h = arg;
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    h->extending = false;
    h->engine_refs--;
    uint64_t now = mpool_now_us();
    if (h->end == END_NONE && !h->closed) {
        if (res->outcome == RL_OK) {
            /* next_try_us was set when the extension was sent; validity
             * counts from then too (the engine's own start is later). */
            uint64_t sent = h->next_try_us;
            h->valid_until_us = sent + (uint64_t)res->validity_ms * 1000ULL;
            h->next_try_us = sent + (uint64_t)h->ttl_ms * 1000ULL / 3;
            h->fail_reason = NULL;
            h->pend_renewed = true;
            notify(h);
        } else if (res->outcome == RL_NOT_HELD) {
            /* Gone for good; the failed extension kept what the token
             * still holds (keep_on_fail), released by end_lost's rule. */
            end_lost(h, res->reason == RL_REASON_HELD_BY_OTHER ? "held_by_other" : "expired");
        } else {
            /* No majority answered: try again while validity lasts. */
            h->fail_reason = "no_quorum";
            uint64_t retry = (uint64_t)h->ttl_ms * 1000ULL / 10;
            if (retry < HOLD_RETRY_MIN_MS * 1000ULL)
                retry = HOLD_RETRY_MIN_MS * 1000ULL;
            h->next_try_us = now + retry;
        }
    }
    if (h->closed || h->release_after) {
        h->release_after = false;
        release_lock(h);
    }
    pthread_cond_signal(&s->changed);
    free_if_done(h);
    pthread_mutex_unlock(&s->mu);
}

/* ---- campaigns ---- */

#define HOLD_CAMPAIGN_RETRY_MAX_MS 1000   /* a campaign that met no quorum tries again this soon */

static void publish_done(void *arg, const rl_result *res)
{
    (void)arg;
    (void)res;
}

static void campaign_done(void *arg, const rl_result *res)
{
    hold *h = arg;
    hold_set *s = h->s;
    rl_engine *e = h->e;
    pthread_mutex_lock(&s->mu);
    rl_handle *acq = h->acq;
    h->acq = NULL;
    h->acquiring = false;
    h->engine_refs--;
    uint64_t now = mpool_now_us();
    bool take = res->outcome == RL_OK && !h->closed && h->end == END_NONE && !s->ending;
    if (take) {
        /* Elected: from here on an ordinary hold of the grant. Validity
         * counts from the deciding attempt's start (after a wait, later
         * than the acquire was sent). */
        uint64_t from = res->attempt_us ? res->attempt_us : now;
        snprintf(h->token, sizeof h->token, "%s", res->token);
        h->fence = res->fence;
        h->valid_until_us = from + (uint64_t)res->validity_ms * 1000ULL;
        h->next_try_us = from + (uint64_t)h->ttl_ms * 1000ULL / 3;
        h->campaigning = false;
        h->pend_campaigning = false;
        h->pend_acquired = true;
        notify(h);
        /* Watches on every instance look at once (they re-read anyway). */
        rl_request pub = {.op = RL_PUBLISH};
        snprintf(pub.name, sizeof pub.name, "%s", h->name);
        rl_submit(e, &pub, publish_done, NULL, NULL);
    } else if (!h->closed && h->end == END_NONE && !s->ending) {
        if (res->outcome == RL_SHUTTING_DOWN) {
            end_stream(h, END_RELEASED, "shutting_down");
        } else if (res->outcome == RL_LOCKED) {
            h->next_try_us = now;   /* the engine waited already: wait again */
        } else {
            /* No quorum, too many waiters, no memory: not this campaign's
             * fault; it goes on, a little later. */
            uint64_t retry = (uint64_t)h->ttl_ms * 1000ULL / 10;
            if (retry < HOLD_RETRY_MIN_MS * 1000ULL)
                retry = HOLD_RETRY_MIN_MS * 1000ULL;
            if (retry > HOLD_CAMPAIGN_RETRY_MAX_MS * 1000ULL)
                retry = HOLD_CAMPAIGN_RETRY_MAX_MS * 1000ULL;
            h->next_try_us = now + retry;
        }
    }
    pthread_cond_signal(&s->changed);
    free_if_done(h);
    pthread_mutex_unlock(&s->mu);
    /* A grant nobody takes (the client left, or the service stops) is
     * released on every master at once. */
    rl_finish(e, acq, take);
}

/* Starts the campaign's next acquire: it waits up to its wait_ms inside the
 * engine (woken by release notices), and is tried again when that runs out.
 * s->mu held. */
static void campaign_try(hold *h, uint64_t now)
{
    h->acquiring = true;
    h->engine_refs++;
    if (rl_submit(h->e, &h->acq_req, campaign_done, h, &h->acq) < 0) {
        h->acquiring = false;
        h->engine_refs--;
        h->acq = NULL;
        h->next_try_us = now + HOLD_CAMPAIGN_RETRY_MAX_MS * 1000ULL;
    }
}

/* ---- the renewer ---- */

/* The end of the validity the client is told: margin_us before the
 * validity obtained, so that an event that reaches the client up to
 * margin_us late still promises nothing the masters do not hold. */
static uint64_t announced_until(const hold *h)
{
    return h->valid_until_us > h->margin_us ? h->valid_until_us - h->margin_us : 0;
}

static uint64_t lost_at(const hold *h)
{
    uint64_t margin = HOLD_LOST_MARGIN_MS * 1000ULL, end = announced_until(h);
    return end > margin ? end - margin : 0;
}

/* One pass over the holds: declares loss where validity runs out, starts
 * due extensions. Returns when the next pass is due. s->mu held. */
static uint64_t renew_pass(hold_set *s, uint64_t now)
{
    uint64_t next = now + 1000000;   /* at least once a second */
    for (hold *h = s->list; h; h = h->next) {
        if (h->release_at_us && !s->ending) {
            if (now >= h->release_at_us) {
                h->release_at_us = 0;
                release_lock(h);
            } else if (h->release_at_us < next) {
                next = h->release_at_us;
            }
        }
        if (h->end != END_NONE || h->closed || s->ending)
            continue;
        if (h->campaigning) {
            if (!h->acquiring && now >= h->next_try_us)
                campaign_try(h, now);
            if (!h->acquiring && h->next_try_us < next)
                next = h->next_try_us;
            continue;
        }
        if (now >= lost_at(h)) {
            end_lost(h, h->fail_reason ? h->fail_reason : "expired");
            continue;
        }
        if (!h->extending && now >= h->next_try_us && client_silent(h, now)) {
            /* What was sent last is still unacknowledged: the client is
             * dead or cut off. No more extensions: the lock goes when the
             * validity last announced (and the margin for its transit) has
             * run out, even if the connection is closed first, since a
             * client cut off one way may still be reading. */
            end_lost(h, "expired");
            continue;
        }
        if (!h->extending && now >= h->next_try_us) {
            rl_request req = request_of(h, RL_EXTEND);
            h->next_try_us = now;   /* the extension's validity counts from here */
            h->extending = true;
            h->engine_refs++;
            if (rl_submit(h->e, &req, extend_done, h, NULL) < 0) {
                h->extending = false;
                h->engine_refs--;
                h->next_try_us = now + HOLD_RETRY_MIN_MS * 1000ULL;
            } else if (h->permit) {
                keep_limit(h);
            }
        }
        uint64_t due = lost_at(h);
        if (!h->extending && h->next_try_us < due)
            due = h->next_try_us;
        if (due < next)
            next = due;
    }
    return next;
}

static void *renewer_main(void *arg)
{
    hold_set *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        uint64_t now = mpool_now_us();
        uint64_t next = renew_pass(s, now);
        if (next > now) {
            struct timespec until = deadline_after_ms((long long)((next - now + 999) / 1000));
            pthread_cond_timedwait(&s->changed, &s->mu, &until);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the API ---- */

hold_set *hold_set_new(int max_holds)
{
    hold_set *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->max = max_holds;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    pthread_cond_init(&s->settled, NULL);
    if (pthread_create(&s->renewer, NULL, renewer_main, s) != 0) {
        hold_set_free(s);
        return NULL;
    }
    s->renewer_started = true;
    return s;
}

bool hold_reserve(hold_set *s)
{
    pthread_mutex_lock(&s->mu);
    bool ok = s->used < s->max;
    s->used += ok;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void hold_unreserve(hold_set *s)
{
    pthread_mutex_lock(&s->mu);
    s->used--;
    pthread_mutex_unlock(&s->mu);
}

/* The part of hold_start and hold_campaign that ties h to its connection
 * (socket fd, wake(arg)) and puts it in s: the transit margin of ttl_ms,
 * the socket's liveness options, and, with try_now, a first try at once.
 * NULL (h freed) when s is ending. */
static hold *hold_link(hold_set *s, hold *h, long long ttl_ms, int fd, hold_wake_fn wake, void *arg,
                       bool try_now)
{
    h->margin_us = (uint64_t)(ttl_ms / 5 < HOLD_TRANSIT_MARGIN_MS ? ttl_ms / 5
                                                                 : HOLD_TRANSIT_MARGIN_MS) * 1000ULL;
    h->fd = fd;
    sock_arm(fd, ttl_ms);
    h->wake = wake;
    h->arg = arg;
    pthread_mutex_lock(&s->mu);
    if (s->ending) {
        pthread_mutex_unlock(&s->mu);
        free(h);
        return NULL;
    }
    if (try_now)
        h->next_try_us = mpool_now_us();
    DLIST_PUSH(s->list, h, prev, next);
    s->open++;
    pthread_cond_signal(&s->changed);
    pthread_mutex_unlock(&s->mu);
    return h;
}

/* A hold of the grant res of req, not linked yet. */
static hold *grant_hold(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                        uint64_t sent_us)
{
    hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->s = s;
    h->e = e;
    snprintf(h->name, sizeof h->name, "%s", req->name);
    snprintf(h->token, sizeof h->token, "%s", res->token);
    h->ttl_ms = res->ttl_ms;
    h->fence = res->fence;
    h->valid_until_us = sent_us + (uint64_t)res->validity_ms * 1000ULL;
    h->next_try_us = sent_us + (uint64_t)res->ttl_ms * 1000ULL / 3;
    h->pend_acquired = true;
    return h;
}

hold *hold_start(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                 uint64_t sent_us, int fd, hold_wake_fn wake, void *arg)
{
    hold *h = grant_hold(s, e, req, res, sent_us);
    return h ? hold_link(s, h, res->ttl_ms, fd, wake, arg, false) : NULL;
}

hold *hold_permit(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                  uint64_t sent_us, const hold_permit_of *of, int fd, hold_wake_fn wake, void *arg)
{
    hold *h = grant_hold(s, e, req, res, sent_us);
    if (!h)
        return NULL;
    h->permit = true;
    h->of = *of;
    return hold_link(s, h, res->ttl_ms, fd, wake, arg, false);
}

hold *hold_campaign(hold_set *s, rl_engine *e, const rl_request *req, const char *label,
                    const char *candidate, int fd, hold_wake_fn wake, void *arg)
{
    hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->s = s;
    h->e = e;
    h->election = true;
    h->campaigning = true;
    h->acq_req = *req;
    h->acq_req.op = RL_ACQUIRE;
    snprintf(h->name, sizeof h->name, "%s", req->name);
    snprintf(h->label, sizeof h->label, "%s", label);
    snprintf(h->candidate, sizeof h->candidate, "%s", candidate);
    h->ttl_ms = req->ttl_ms;
    h->pend_campaigning = true;
    return hold_link(s, h, req->ttl_ms, fd, wake, arg, true);
}

/* Formats the next event into h->out; false when none is pending. The
 * validity is counted now, as the event leaves, to the end announced. s->mu
 * held. */
static bool format_next(hold *h)
{
    uint64_t now = mpool_now_us(), until = announced_until(h);
    long long left = until > now ? (long long)((until - now) / 1000) : 0;
    int n;
    if (h->pend_campaigning && h->end == END_NONE) {
        h->pend_campaigning = false;
        n = snprintf(h->out, sizeof h->out,
                     "{\"event\":\"campaigning\",\"name\":\"%s\",\"candidate\":\"%s\"}\n",
                     h->label, h->candidate);
    } else if (h->pend_acquired && h->election) {
        h->pend_acquired = false;
        h->pend_renewed = false;
        n = snprintf(h->out, sizeof h->out,
                     "{\"event\":\"elected\",\"name\":\"%s\",\"candidate\":\"%s\",\"term\":%lld,"
                     "\"token\":\"%s\",\"validity_ms\":%lld,\"ttl_ms\":%lld}\n",
                     h->label, h->candidate, h->fence, h->token, left, h->ttl_ms);
    } else if (h->pend_acquired && h->permit) {
        h->pend_acquired = false;
        h->pend_renewed = false;
        n = snprintf(h->out, sizeof h->out,
                     "{\"event\":\"acquired\",\"name\":\"%s\",\"limit\":%d,\"slot\":%d,"
                     "\"token\":\"%d:%s\",\"fence\":%lld,\"validity_ms\":%lld,\"ttl_ms\":%lld}\n",
                     h->of.semaphore, h->of.limit, h->of.slot, h->of.slot, h->token, h->fence, left, h->ttl_ms);
    } else if (h->pend_acquired) {
        h->pend_acquired = false;
        h->pend_renewed = false;   /* the acquired event carries the newest validity */
        n = snprintf(h->out, sizeof h->out,
                     "{\"event\":\"acquired\",\"name\":\"%s\",\"token\":\"%s\",\"fence\":%lld,"
                     "\"validity_ms\":%lld,\"ttl_ms\":%lld}\n",
                     h->name, h->token, h->fence, left, h->ttl_ms);
    } else if (h->pend_renewed && h->end == END_NONE && left > 0) {
        h->pend_renewed = false;
        n = snprintf(h->out, sizeof h->out, "{\"event\":\"renewed\",\"validity_ms\":%lld}\n", left);
    } else if (h->end != END_NONE && !h->end_formatted) {
        h->end_formatted = true;
        const char *what = h->end == END_LOST ? "lost" : h->election ? "resigned" : "released";
        if (h->end_reason)
            n = snprintf(h->out, sizeof h->out, "{\"event\":\"%s\",\"reason\":\"%s\"}\n", what,
                         h->end_reason);
        else
            n = snprintf(h->out, sizeof h->out, "{\"event\":\"%s\"}\n", what);
    } else {
        return false;
    }
    h->out_len = n > 0 && (size_t)n < sizeof h->out ? (size_t)n : 0;
    h->out_off = 0;
    h->out_at_us = now;
    return h->out_len > 0;
}

long hold_read(hold *h, char *buf, size_t cap)
{
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    long n;
    if (h->out_off < h->out_len || format_next(h)) {
        size_t k = h->out_len - h->out_off;
        if (k > cap)
            k = cap;
        memcpy(buf, h->out + h->out_off, k);
        h->out_off += k;
        n = (long)k;
        if (h->end_formatted && h->out_off == h->out_len && h->release_when_read) {
            h->release_when_read = false;
            release_lock(h);
            pthread_cond_broadcast(&s->settled);
        }
    } else if (h->end_formatted) {
        n = -1;
    } else {
        h->want_wake = true;
        n = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void hold_close(hold *h)
{
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    h->closed = true;
    h->want_wake = false;
    h->release_when_read = false;
    pthread_cond_broadcast(&s->settled);
    if (h->acquiring)
        rl_cancel(h->e, h->acq);   /* campaign_done then gives back what it won */
    /* The client has gone, or the stream has ended. After "lost" the
     * connection completes as soon as the event is written, long before the
     * client reads it (and a client that stopped acknowledging may still be
     * reading): the release waits for release_at_us. Otherwise no one
     * relies on the lock any more. */
    if (!h->release_at_us)
        release_lock(h);
    free_if_done(h);
    pthread_mutex_unlock(&s->mu);
}

void hold_renew_now(hold *h)
{
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    if (h->campaigning && h->end == END_NONE && !h->closed) {
        /* Nothing to renew: an event all the same, which a closed client
         * answers with a reset. */
        h->pend_campaigning = true;
        notify(h);
    } else if (!h->extending && h->end == END_NONE && !h->closed) {
        h->next_try_us = mpool_now_us();
        pthread_cond_signal(&s->changed);
    }
    pthread_mutex_unlock(&s->mu);
}

void hold_released(hold_set *s, const char *name, const char *token)
{
    pthread_mutex_lock(&s->mu);
    for (hold *h = s->list; h; h = h->next) {
        if (!h->closed && !strcmp(h->token, token) && !strcmp(h->name, name)) {
            h->release_sent = true;   /* the DELETE did it */
            h->release_when_read = false;
            end_stream(h, END_RELEASED, NULL);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* Holds whose last event has not left yet (their release waits for it). */
static int unread_ends(const hold_set *s)
{
    int n = 0;
    for (const hold *h = s->list; h; h = h->next)
        n += !h->closed && h->release_when_read;
    return n;
}

int hold_set_end_all(hold_set *s, long long timeout_ms)
{
    pthread_mutex_lock(&s->mu);
    s->ending = true;
    /* Each stream is told first; its lock is released as the event leaves
     * (a stream that ended already releases as before). */
    for (hold *h = s->list; h; h = h->next)
        if (!h->closed && h->end == END_NONE) {
            end_stream(h, END_RELEASED, "shutting_down");
            h->release_when_read = true;
            if (h->acquiring)
                rl_cancel(h->e, h->acq);
        }
    struct timespec until = deadline_after_ms(timeout_ms / 2);
    while (unread_ends(s) > 0)
        if (pthread_cond_timedwait(&s->settled, &s->mu, &until) != 0)
            break;
    /* A client that does not read gets no more time: its lock goes. */
    for (hold *h = s->list; h; h = h->next)
        if ((!h->closed && h->release_when_read) || h->release_at_us) {
            h->release_when_read = false;
            h->release_at_us = 0;
            release_lock(h);
        }
    until = deadline_after_ms(timeout_ms / 2);
    while (s->releases_pending > 0)
        if (pthread_cond_timedwait(&s->settled, &s->mu, &until) != 0)
            break;
    int left = s->releases_pending;
    pthread_mutex_unlock(&s->mu);
    return left;
}

int hold_set_count(hold_set *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->open;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void hold_set_free(hold_set *s)
{
    if (!s)
        return;
    if (s->renewer_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->changed);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->renewer, NULL);
    }
    pthread_cond_destroy(&s->changed);
    pthread_cond_destroy(&s->settled);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
