/* hold.c - see hold.h; this file holds the set, a hold's start and close,
 * and its events, hold_renew.c the renewer, hold_notice.c the release
 * notices (hold_int.h). */
#include "hold_int.h"
#include "base/base.h"
/* ---- events (s->mu held) ---- */

void hold_notify(hold *h)
{
    if (h->want_wake && !h->closed) {
        h->want_wake = false;
        h->wake(h->arg);
    }
}

void hold_end_stream(hold *h, enum hold_end kind, const char *reason)
{
    if (h->end != END_NONE)
        return;
    if (kind == END_LOST)
        hold_audit(h, "loss", reason ? reason : "lost", h->fence);
    h->end = kind;
    h->end_reason = reason;
    h->pend_renewed = false;   /* nothing after the end counts */
    hold_notify(h);
}

void hold_free_if_done(hold *h)
{
    if (!h->closed || h->engine_refs > 0 || h->release_at_us)
        return;
    hold_set *s = h->s;
    DLIST_UNLINK(s->list, h, prev, next);
    s->open--;
    s->used--;
    s->freed_since_trim++;
    s->last_free_us = loop_now_us();
    hold_listen(h, false);
    free(h->record);
    free(h->audit);   /* (hold_audit.c) */
    free(h->out);
    free(h);
}

/* A release or force of h's grant ran (a notice, or a DELETE here): it is
 * h's own release only if nothing h sent can land after it: not with an
 * extension in flight, nor once a repair went out (it takes free masters
 * back, and its answer may be read before the notice). Else the close
 * releases again, harmlessly (exact value). s->mu held. */
static void settled_by_release(hold *h)
{
    if (!h->extending && !h->repaired)
        h->release_sent = true;
}

/* Its token released it (a DELETE, here or through another instance): the
 * stream ends with "released". s->mu held. */
void hold_end_released(hold *h)
{
    settled_by_release(h);
    h->release_when_read = false;
    hold_end_stream(h, END_RELEASED, NULL);
}

/* A force release of its name: "lost", reason "forced"; what it holds goes
 * at its close, not when its validity runs out. s->mu held. */
void hold_end_forced(hold *h)
{
    settled_by_release(h);
    h->release_when_read = false;
    h->release_at_us = 0;
    hold_end_stream(h, END_LOST, "forced");
}

/* The open hold of the grant of name (nlen bytes) to token (tlen bytes),
 * or NULL (a campaign has no token until elected). s->mu held. */
hold *hold_find_grant(hold_set *s, const char *name, size_t nlen, const char *token, size_t tlen)
{
    for (hold *h = s->list; h && tlen > 0; h = h->next)
        if (!h->closed && strlen(h->token) == tlen && !memcmp(h->token, token, tlen) &&
            strlen(h->name) == nlen && !memcmp(h->name, name, nlen))
            return h;
    return NULL;
}

/* A heartbeat for that grant: its stream goes on. False when no open
 * stream holds it. s->mu held. */
bool hold_beat(hold_set *s, const char *name, size_t nlen, const char *token, size_t tlen)
{
    hold *h = hold_find_grant(s, name, nlen, token, tlen);
    if (!h || h->end != END_NONE)
        return false;
    h->beat_us = loop_now_us();
    return true;
}

/* ---- the API ---- */

hold_set *hold_set_new(int max_holds)
{
    hold_set *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->max = max_holds;
    s->no_repair = getenv("REDLOCKD_TEST_NO_REPAIR") != NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    pthread_cond_init(&s->settled, NULL);
    if (pthread_create(&s->renewer, NULL, hold_renewer_main, s) != 0) {
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
    hold_sock_arm(fd, ttl_ms);
    h->wake = wake;
    h->arg = arg;
    pthread_mutex_lock(&s->mu);
    if (s->ending) {
        pthread_mutex_unlock(&s->mu);
        free(h->record);
        free(h);
        return NULL;
    }
    if (try_now)
        h->next_try_us = loop_now_us();
    if (!h->campaigning)
        hold_listen(h, true);
    DLIST_PUSH(s->list, h, prev, next);
    s->open++;
    pthread_cond_signal(&s->changed);
    pthread_mutex_unlock(&s->mu);
    return h;
}

/* A hold of name, with its role part after it when with_role, then its
 * name and room for a token of token_cap bytes: a lease keeps no more than
 * its own strings (10,000 of them are in the sidecar's memory limit). */
static hold *hold_new(bool with_role, const char *name, size_t token_cap)
{
    size_t role = with_role ? sizeof(struct hold_role) : 0, nlen = strlen(name) + 1;
    hold *h = calloc(1, sizeof *h + role + nlen + token_cap);
    if (!h)
        return NULL;
    if (with_role)
        h->role = (struct hold_role *)(h + 1);
    h->name = (char *)(h + 1) + role;
    memcpy(h->name, name, nlen);
    h->token = h->name + nlen;
    return h;
}

/* A hold of the grant res of req, not linked yet. */
static hold *grant_hold(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                        uint64_t sent_us, bool with_role)
{
    size_t tlen = strlen(res->token) + 1;
    hold *h = hold_new(with_role, req->name, tlen);
    if (!h)
        return NULL;
    h->s = s;
    h->e = e;
    memcpy(h->token, res->token, tlen);
    h->ttl_ms = res->ttl_ms;
    h->fence = res->fence;
    h->heartbeat_us = (uint64_t)req->heartbeat_ms * 1000ULL;
    h->beat_us = sent_us;
    h->repair = res->masters_missing > 0;
    if (req->owner[0] && !(h->record = strdup(req->owner))) {
        free(h);
        return NULL;
    }
    h->valid_until_us = sent_us + (uint64_t)res->validity_ms * 1000ULL;
    h->next_try_us = sent_us + (uint64_t)res->ttl_ms * 1000ULL / 3;
    h->pend_acquired = true;
    return h;
}

hold *hold_start(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                 uint64_t sent_us, int fd, hold_wake_fn wake, void *arg)
{
    hold *h = grant_hold(s, e, req, res, sent_us, false);
    return h ? hold_link(s, h, res->ttl_ms, fd, wake, arg, false) : NULL;
}

hold *hold_permit(hold_set *s, rl_engine *e, const rl_request *req, const rl_result *res,
                  uint64_t sent_us, const hold_permit_of *of, int fd, hold_wake_fn wake, void *arg)
{
    hold *h = grant_hold(s, e, req, res, sent_us, true);
    if (!h)
        return NULL;
    h->permit = true;
    h->role->of = *of;
    return hold_link(s, h, res->ttl_ms, fd, wake, arg, false);
}

hold *hold_campaign(hold_set *s, rl_engine *e, const rl_request *req, const char *label,
                    const char *candidate, int fd, hold_wake_fn wake, void *arg)
{
    hold *h = hold_new(true, req->name, HOLD_TOKEN_CAP);
    if (!h)
        return NULL;
    h->s = s;
    h->e = e;
    h->election = true;
    h->campaigning = true;
    h->role->acq_req = *req;
    h->role->acq_req.op = RL_ACQUIRE;
    /* One place in the election's queue for all its rounds: campaigns are
     * elected in the order they began, whichever instance they came to. */
    h->role->acq_req.ticket_since_us = loop_unix_us();
    h->role->acq_req.keep_ticket = true;
    if (token_new(h->role->acq_req.ticket) < 0)
        h->role->acq_req.ticket[0] = '\0';   /* (it campaigns without a place) */
    snprintf(h->role->label, sizeof h->role->label, "%s", label);
    snprintf(h->role->candidate, sizeof h->role->candidate, "%s", candidate);
    h->ttl_ms = req->ttl_ms;
    h->heartbeat_us = (uint64_t)req->heartbeat_ms * 1000ULL;
    h->beat_us = loop_now_us();
    h->pend_campaigning = true;
    return hold_link(s, h, req->ttl_ms, fd, wake, arg, true);
}

/* Formats the next event into out (HOLD_EVENT_MAX bytes) and returns its
 * length; 0 when none is pending. The validity is counted now, as the event
 * leaves, to the end announced. s->mu held. */
static size_t format_next(hold *h, char *out)
{
    uint64_t now = loop_now_us(), until = hold_announced_until(h);
    long long left = until > now ? (long long)((until - now) / 1000) : 0;
    int n;
    /* Names and candidates may hold quotes and backslashes (rules.h):
     * escaped for the events that carry them (not for every renewal). */
    char name[2 * RL_INTERNAL_NAME_MAX + 1], cand[2 * RL_OWNER_MAX + 1];
    if ((h->pend_campaigning && h->end == END_NONE) || h->pend_acquired) {
        jsonio_escape(h->election ? h->role->label : h->permit ? h->role->of.semaphore : h->name, name, sizeof name);
        jsonio_escape(h->election ? h->role->candidate : "", cand, sizeof cand);
    }
    if (h->pend_campaigning && h->end == END_NONE) {
        h->pend_campaigning = false;
        n = snprintf(out, HOLD_EVENT_MAX,
                     "{\"event\":\"campaigning\",\"name\":\"%s\",\"candidate\":\"%s\"}\n", name, cand);
    } else if (h->pend_acquired && h->election) {
        h->pend_acquired = false;
        h->pend_renewed = false;
        n = snprintf(out, HOLD_EVENT_MAX,
                     "{\"event\":\"elected\",\"name\":\"%s\",\"candidate\":\"%s\",\"term\":%lld,"
                     "\"token\":\"%s\",\"validity_ms\":%lld,\"ttl_ms\":%lld}\n",
                     name, cand, h->fence, h->token, left, h->ttl_ms);
    } else if (h->pend_acquired && h->permit) {
        h->pend_acquired = false;
        h->pend_renewed = false;
        n = snprintf(out, HOLD_EVENT_MAX,
                     "{\"event\":\"acquired\",\"name\":\"%s\",\"limit\":%d,\"slot\":%d,"
                     "\"token\":\"%d:%s\",\"fence\":%lld,\"validity_ms\":%lld,\"ttl_ms\":%lld}\n",
                     name, h->role->of.limit, h->role->of.slot, h->role->of.slot,
                     h->token, h->fence, left, h->ttl_ms);
    } else if (h->pend_acquired) {
        h->pend_acquired = false;
        h->pend_renewed = false;   /* the acquired event carries the newest validity */
        n = snprintf(out, HOLD_EVENT_MAX,
                     "{\"event\":\"acquired\",\"name\":\"%s\",\"token\":\"%s\",\"fence\":%lld,"
                     "\"validity_ms\":%lld,\"ttl_ms\":%lld}\n",
                     name, h->token, h->fence, left, h->ttl_ms);
    } else if (h->pend_renewed && h->end == END_NONE && left > 0) {
        h->pend_renewed = false;
        n = snprintf(out, HOLD_EVENT_MAX, "{\"event\":\"renewed\",\"validity_ms\":%lld}\n", left);
    } else if (h->pend_probe && h->end == END_NONE) {
        h->pend_probe = false;
        n = snprintf(out, HOLD_EVENT_MAX, " ");
    } else if (h->end != END_NONE && !h->end_formatted) {
        h->end_formatted = true;
        if (h->end == END_LOST && testhook_breaks(TESTHOOK_SILENT_LOSS))
            return 0;   /* test hook (REDLOCKD_TEST_BREAK): the stream ends unsaid */
        const char *what = h->end == END_LOST ? "lost" : h->election ? "resigned" : "released";
        if (h->end_reason)
            n = snprintf(out, HOLD_EVENT_MAX, "{\"event\":\"%s\",\"reason\":\"%s\"}\n", what,
                         h->end_reason);
        else
            n = snprintf(out, HOLD_EVENT_MAX, "{\"event\":\"%s\"}\n", what);
    } else {
        return 0;
    }
    h->out_at_us = now;
    return n > 0 && n < HOLD_EVENT_MAX ? (size_t)n : 0;
}

long hold_read(hold *h, char *buf, size_t cap)
{
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    char line[HOLD_EVENT_MAX];
    const char *from = line;
    size_t len;
    if (h->out) {   /* the rest of the last event first */
        from = h->out + h->out_off;
        len = h->out_len - h->out_off;
    } else {
        len = format_next(h, line);
    }
    long n;
    if (len > 0) {
        size_t k = len < cap ? len : cap;
        memcpy(buf, from, k);
        n = (long)k;
        if (h->out) {
            h->out_off += k;
            if (h->out_off == h->out_len) {
                free(h->out);
                h->out = NULL;
            }
        } else if (k < len) {
            /* Kept until the next read; out of memory, the stream ends
             * rather than hand out half an event. */
            if ((h->out = malloc(len - k))) {
                memcpy(h->out, line + k, len - k);
                h->out_len = len - k;
                h->out_off = 0;
            } else {
                n = -1;
            }
        }
        if (h->end_formatted && !h->out && n > 0 && h->release_when_read) {
            h->release_when_read = false;
            hold_release_lock(h);
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
    if (h->acquiring) {
        rl_cancel(h->e, h->acq);   /* campaign_done then gives back what it won */
    } else if (h->campaigning && h->role->acq_req.ticket[0]) {
        /* Between two rounds: its ticket leaves the queue now, not when it
         * expires. */
        rl_request dq = {.op = RL_DEQUEUE};
        snprintf(dq.name, sizeof dq.name, "%s", h->name);
        snprintf(dq.ticket, sizeof dq.ticket, "%s", h->role->acq_req.ticket);
        (void)rl_submit(h->e, &dq, NULL, NULL, NULL);
    }
    /* The client has gone, or the stream has ended. After "lost" the
     * connection completes as soon as the event is written, long before the
     * client reads it (and a client that stopped acknowledging may still be
     * reading): the release waits for release_at_us. Otherwise no one
     * relies on the lock any more. */
    if (!h->release_at_us)
        hold_release_lock(h);
    /* Its client let go of a grant the stream still held: a release, as a
     * DELETE's is (a loss, a release elsewhere and a force have their own
     * lines). */
    if (h->end == END_NONE && !h->campaigning)
        hold_audit(h, "release", "closed", h->fence);
    hold_free_if_done(h);
    pthread_mutex_unlock(&s->mu);
}

bool hold_heartbeat(hold_set *s, const char *name, const char *token, size_t tlen)
{
    pthread_mutex_lock(&s->mu);
    bool found = hold_beat(s, name, strlen(name), token, tlen);
    pthread_mutex_unlock(&s->mu);
    return found;
}

void hold_probe(hold *h)
{
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    if (h->end == END_NONE && !h->closed)
        h->pend_probe = true;
    pthread_mutex_unlock(&s->mu);
}

void hold_released(hold_set *s, const char *name, const char *token)
{
    pthread_mutex_lock(&s->mu);
    hold *h = hold_find_grant(s, name, strlen(name), token, strlen(token));
    if (h)
        hold_end_released(h);
    pthread_mutex_unlock(&s->mu);
}

void hold_forced(hold_set *s, const char *name)
{
    pthread_mutex_lock(&s->mu);
    for (hold *h = s->list; h; h = h->next)
        if (!h->closed && !h->campaigning && h->end == END_NONE && !strcmp(h->name, name))
            hold_end_forced(h);
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
            hold_end_stream(h, END_RELEASED, "shutting_down");
            h->release_when_read = true;
            if (h->acquiring)
                rl_cancel(h->e, h->acq);
        }
    struct timespec until = deadline_after_ms(timeout_ms / 2);
    while (unread_ends(s) > 0)
        if (pthread_cond_timedwait(&s->settled, &s->mu, &until) != 0)
            break;
    /* A client that does not read gets no more time: its lock goes. */
    for (hold *h = s->list, *after; h; h = after) {
        after = h->next;
        if ((!h->closed && h->release_when_read) || h->release_at_us) {
            h->release_when_read = false;
            h->release_at_us = 0;
            hold_release_lock(h);
            hold_free_if_done(h);
        }
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
    while (s->ears) {
        struct hold_ear *ear = s->ears;
        s->ears = ear->next;
        free(ear);
    }
    pthread_cond_destroy(&s->changed);
    pthread_cond_destroy(&s->settled);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
