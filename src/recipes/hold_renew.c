/* hold_renew.c - the renewer of held streams and the engine's answers to
 * it (hold_int.h). */
#include <malloc.h>

#include "hold_int.h"

static void campaign_try(hold *h, uint64_t now);

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
    hold_free_if_done(h);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the connection's socket ---- */

/* Bounds how long the kernel keeps a connection whose peer went silent:
 * what is sent must be acknowledged within ttl_ms (TCP_USER_TIMEOUT), and
 * an idle connection is probed after a ttl. The hold itself stops renewing
 * sooner (client_silent); this only frees the connection. Best effort. */
void hold_sock_arm(int fd, long long ttl_ms)
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
        snprintf(req.notice_name, sizeof req.notice_name, "%s", h->role->of.limit_name);
    if (op == RL_EXTEND && h->repair && !h->s->no_repair) {
        /* Masters answered without the token: the extension also takes the
         * free ones (its own token, where the key is absent, under the same
         * guard), so that any healthy majority keeps the lease. Only the
         * masters where the token held count for the extension. */
        req.repair_fence = h->fence;
        snprintf(req.owner, sizeof req.owner, "%s", h->record ? h->record : "");
    }
    return req;
}

/* A permit's renewal also keeps its semaphore's limit for a ttl, as a PATCH
 * of the permit does: the limit outlives every permit of it. */
static void keep_limit(const hold *h)
{
    rl_request req = {.op = RL_SEM_LIMIT, .limit = -1, .ttl_ms = h->ttl_ms};
    snprintf(req.name, sizeof req.name, "%s", h->role->of.limit_name);
    (void)rl_submit(h->role->of.limit_engine, &req, NULL, NULL, NULL);
}

/* The lock is lost: the stream says so now; what the token may still hold
 * is released when the client closes the stream or when the validity it was
 * told runs out, never sooner (until it has read "lost", the client may
 * rely on that validity). */
static void end_lost(hold *h, const char *reason)
{
    hold_end_stream(h, END_LOST, reason);
    h->release_at_us = h->valid_until_us;
}

/* Step 5 of Redlock for a hold that ends: release on every master, once,
 * after any extension in flight (which could otherwise renew it after the
 * release). s->mu held. */
void hold_release_lock(hold *h)
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
        hold_end_stream(h, END_LOST, "no_quorum");
    }
}

static void extend_done(void *arg, const rl_result *res)
{
    hold *h = arg;
    hold_set *s = h->s;
    pthread_mutex_lock(&s->mu);
    h->extending = false;
    s->extensions--;
    h->engine_refs--;
    uint64_t now = loop_now_us();
    if (h->end == END_NONE && !h->closed) {
        if (res->outcome == RL_OK) {
            /* next_try_us was set when the extension was sent; validity
             * counts from then too (the engine's own start is later). */
            uint64_t sent = h->next_try_us;
            h->valid_until_us = sent + (uint64_t)res->validity_ms * 1000ULL;
            h->next_try_us = sent + (uint64_t)h->ttl_ms * 1000ULL / 3;
            h->fail_reason = NULL;
            h->repair = res->masters_missing > 0;
            h->pend_renewed = true;
            hold_notify(h);
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
    /* A closed hold releases now, unless it ended lost: then the release
     * waits for release_at_us (the client may not have read "lost"). */
    if ((h->closed && !h->release_at_us) || h->release_after) {
        h->release_after = false;
        hold_release_lock(h);
    }
    /* The renewer is woken when it has something to do: a retry or an end
     * to look after, or room again for extensions it held back (half the
     * bound, so that 10,000 renewals a second are not 10,000 passes over
     * every hold). A success moves this hold's turn later: nothing to do. */
    bool room = s->held_back && s->extensions <= HOLD_EXTEND_INFLIGHT_MAX / 2;
    if (res->outcome != RL_OK || h->end != END_NONE || h->release_at_us || room) {
        if (room)
            s->held_back = false;
        pthread_cond_signal(&s->changed);
    }
    hold_free_if_done(h);
    pthread_mutex_unlock(&s->mu);
}

/* ---- campaigns ---- */

#define HOLD_CAMPAIGN_RETRY_MAX_MS 1000   /* a campaign that met no quorum tries again this soon */

/* The owner record an elected campaign's masters keep: its owner with the
 * leading byte 1 replaced by the term's start in Unix ms and a space, as
 * script_acquire stamps it (each master from its own clock; here from
 * ours, counted back to when the deciding attempt began). NULL when out of
 * memory: a repair then stores no record. */
static char *election_record(const hold *h, uint64_t from_us)
{
    const char *owner = h->role->acq_req.owner;
    if (owner[0] != '\x01')
        return owner[0] ? strdup(owner) : NULL;
    long long since_ms = (loop_unix_us() - (long long)(loop_now_us() - from_us)) / 1000;
    char *rec = malloc(24 + strlen(owner));
    if (rec)
        sprintf(rec, "%lld %s", since_ms, owner + 1);
    return rec;
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
    uint64_t now = loop_now_us();
    bool take = res->outcome == RL_OK && !h->closed && h->end == END_NONE && !s->ending;
    if (take) {
        /* Elected: from here on an ordinary hold of the grant. Validity
         * counts from the deciding attempt's start (after a wait, later
         * than the acquire was sent). */
        uint64_t from = res->attempt_us ? res->attempt_us : now;
        snprintf(h->token, HOLD_TOKEN_CAP, "%s", res->token);   /* (a campaign's room) */
        h->fence = res->fence;
        h->repair = res->masters_missing > 0;
        h->record = election_record(h, from);
        h->valid_until_us = from + (uint64_t)res->validity_ms * 1000ULL;
        h->next_try_us = from + (uint64_t)h->ttl_ms * 1000ULL / 3;
        h->campaigning = false;
        h->beat_us = now;   /* its heartbeats count from the election */
        hold_listen(h, true);
        h->pend_campaigning = false;
        h->pend_acquired = true;
        hold_audit(h, "term", "elected", h->fence);
        hold_notify(h);
        /* Watches on every instance look at once (they re-read anyway). */
        rl_request pub = {.op = RL_PUBLISH};
        snprintf(pub.name, sizeof pub.name, "%s", h->name);
        rl_submit(e, &pub, NULL, NULL, NULL);
    } else if (!h->closed && h->end == END_NONE && !s->ending) {
        if (res->outcome == RL_SHUTTING_DOWN) {
            hold_end_stream(h, END_RELEASED, "shutting_down");
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
    hold_free_if_done(h);
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
    if (rl_submit(h->e, &h->role->acq_req, campaign_done, h, &h->acq) < 0) {
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
uint64_t hold_announced_until(const hold *h)
{
    return h->valid_until_us > h->margin_us ? h->valid_until_us - h->margin_us : 0;
}

static uint64_t lost_at(const hold *h)
{
    uint64_t margin = HOLD_LOST_MARGIN_MS * 1000ULL, end = hold_announced_until(h);
    return end > margin ? end - margin : 0;
}

/* How early h's extension may go: a pass that runs for one hold also
 * extends every other due within this window, so the extensions of many
 * holds leave together (and meet on each master as one group call, master.h)
 * instead of one pass and one call per hold. Early is always safe: validity
 * counts from when the extension is sent. A twelfth of the ttl (the
 * extension still goes after a quarter of it), at most HOLD_RENEW_EARLY_MS. */
static uint64_t renew_early_us(const hold *h)
{
    uint64_t early = (uint64_t)h->ttl_ms * 1000ULL / 12;
    return early < HOLD_RENEW_EARLY_MS * 1000ULL ? early : HOLD_RENEW_EARLY_MS * 1000ULL;
}

/* One pass over the holds: declares loss where validity runs out, starts
 * due extensions (and those due within renew_early_us). Returns when the
 * next pass is due. s->mu held. */
static uint64_t renew_pass(hold_set *s, uint64_t now)
{
    uint64_t next = now + 1000000;   /* at least once a second */
    for (hold *h = s->list, *after; h; h = after) {
        after = h->next;
        if (h->release_at_us && !s->ending) {
            if (now >= h->release_at_us) {
                /* (a closed hold whose release went already, after an
                 * extension or a DELETE, waited only for this) */
                h->release_at_us = 0;
                hold_release_lock(h);
                hold_free_if_done(h);
                continue;
            } else if (h->release_at_us < next) {
                next = h->release_at_us;
            }
        }
        if (h->end != END_NONE || h->closed || s->ending)
            continue;
        if (h->heartbeat_us && !h->campaigning) {
            /* (a campaign has no token to show it with until elected) */
            uint64_t due = h->beat_us + h->heartbeat_us;
            if (now >= due) {
                /* The client stopped showing it is alive (hung, stopped):
                 * no more renewals. What it holds goes when the validity it
                 * was told runs out, as after any loss. */
                end_lost(h, "no_heartbeat");
                continue;
            }
            if (due < next)
                next = due;
        }
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
        /* Early only after a success: a retry after a failure keeps its
         * own pace (HOLD_RETRY_MIN_MS at least). */
        bool due_now = now + (h->fail_reason ? 0 : renew_early_us(h)) >= h->next_try_us;
        /* Asked before each extension, early or not (client_silent has its
         * own bound: a quarter of the ttl since the last event). */
        if (!h->extending && due_now && client_silent(h, now)) {
            /* What was sent last is still unacknowledged: the client is
             * dead or cut off. No more extensions: the lock goes when the
             * validity last announced (and the margin for its transit) has
             * run out, even if the connection is closed first, since a
             * client cut off one way may still be reading. */
            end_lost(h, "expired");
            continue;
        }
        /* At most HOLD_EXTEND_INFLIGHT_MAX at once: the rest go as those
         * answer (extend_done wakes the renewer). A bound on memory, never
         * on a lease: one held back until half its time to lost_at has
         * gone goes anyway (a busy loop answers extensions slowly, and
         * 10,000 leases renewing behind 10,000 acquires lost 1,842). */
        uint64_t lost = lost_at(h);
        bool urgent = now >= h->next_try_us + (lost > h->next_try_us ? (lost - h->next_try_us) / 2 : 0);
        bool held = !h->extending && due_now && !urgent && s->extensions >= HOLD_EXTEND_INFLIGHT_MAX;
        if (held) {
            s->held_back = true;   /* extend_done wakes the renewer once there is room */
        } else if (!h->extending && due_now) {
            rl_request req = request_of(h, RL_EXTEND);
            h->next_try_us = now;   /* the extension's validity counts from here */
            h->extending = true;
            h->repaired |= req.repair_fence > 0;
            s->extensions++;
            h->engine_refs++;
            if (rl_submit(h->e, &req, extend_done, h, NULL) < 0) {
                h->extending = false;
                s->extensions--;
                h->engine_refs--;
                h->next_try_us = now + HOLD_RETRY_MIN_MS * 1000ULL;
            } else if (h->permit) {
                keep_limit(h);
            }
        }
        uint64_t due = lost;
        if (held)   /* woken by extend_done, or at the latest when it turns urgent */
            due = h->next_try_us + (lost - h->next_try_us) / 2;
        else if (!h->extending && h->next_try_us < due)
            due = h->next_try_us;
        if (due < next)
            next = due;
    }
    return next;
}

void *hold_renewer_main(void *arg)
{
    hold_set *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        uint64_t now = loop_now_us();
        uint64_t next = renew_pass(s, now);
        bool again = s->trim_again_us && now >= s->trim_again_us;
        if (again || (s->freed_since_trim >= HOLD_TRIM_AFTER &&
                      now >= s->last_free_us + HOLD_TRIM_QUIET_MS * 1000ULL)) {
            /* Many streams closed, and none for a while: what their
             * connections, requests and holds took goes back to the system,
             * so RSS returns near its idle level instead of staying at its
             * peak (glibc keeps freed memory in its arenas otherwise). Off
             * the event loops; the renewer passes at least once a second. */
            s->freed_since_trim = 0;
            /* Once more a while later: what the streams' ends freed on
             * other threads (their notice subscriptions, the replies to
             * unsubscribing) may come after this one. */
            s->trim_again_us = again ? 0 : now + HOLD_TRIM_AGAIN_MS * 1000ULL;
            pthread_mutex_unlock(&s->mu);
            malloc_trim(0);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (next > now) {
            struct timespec until = deadline_after_ms((long long)((next - now + 999) / 1000));
            pthread_cond_timedwait(&s->changed, &s->mu, &until);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
