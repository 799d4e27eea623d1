/* http_park.c - backpressure (http_int.h): while the admission queue of a
 * loop's engine is long (as many requests waiting for a place among
 * --max-inflight as there are places), a new request that would join it
 * is left unread: its connection is suspended at its first call, before
 * anything is allocated for it, and resumed in arrival order once the
 * queue is down to half. A request that never waits for a place (an
 * extension, a release, a heartbeat, /healthz, /readyz, /metrics) is never
 * held back. Such a connection costs what an idle one does (its buffer and
 * libmicrohttpd's record, about 3.75 KiB at the default
 * --connection-buffer-bytes), where an admitted request costs its context,
 * its engine task and its share of a batch besides: 10,000 leases opened
 * 256 at a time peaked at 81.7 MiB before, against a sidecar's 64 MiB.
 * Everything here runs on the shard's loop. */
#include "http_int.h"

#define HTTP_PARK_CHECK_MS 5   /* how often a shard with connections held back looks at its queue */

/* Would this request wait for a place among --max-inflight? */
static bool would_queue(const char *url, const char *method)
{
    if (strcmp(method, "POST") && strcmp(method, "GET"))
        return false;   /* extensions, releases, heartbeats never wait */
    const char *name;
    enum api_route r = api_route_of(url, &name);
    return r == ROUTE_LOCK || r == ROUTE_ELECTION || r == ROUTE_SEMAPHORE || r == ROUTE_DAPR_LOCK ||
           r == ROUTE_LIST_LOCKS || r == ROUTE_LIST_ELECTIONS || r == ROUTE_LIST_SEMAPHORES;
}

static int places(const http_shard *sh)
{
    int n = sh->s->nshards > 0 ? sh->s->nshards : 1;
    int p = (sh->s->cfg->max_inflight + n - 1) / n;   /* each engine's share, as main.c gives it */
    return p > 0 ? p : 1;
}

static void check_parked(void *arg);

static void arm(http_shard *sh)
{
    if (!sh->park_timer && sh->nparked > 0 &&
        loop_after(mpool_loop(sh->pool), HTTP_PARK_CHECK_MS * 1000ULL, check_parked, sh) == 0)
        sh->park_timer = true;
}

/* Resumes the oldest n held-back connections (each let through once:
 * http_park answers false to it next). */
static void resume(http_shard *sh, int n)
{
    int k = 0;
    for (; k < n && k < sh->nparked; k++) {
        if (sh->nlet == sh->cap_let) {
            int cap = sh->cap_let ? 2 * sh->cap_let : 64;
            void *more = realloc(sh->let, (size_t)cap * sizeof sh->let[0]);
            if (!more)
                break;   /* (the rest wait for the next look) */
            sh->let = more;
            sh->cap_let = cap;
        }
        sh->let[sh->nlet++] = sh->parked[k];
        MHD_resume_connection(sh->parked[k]);
    }
    if (!k)
        return;   /* (none: parked may be NULL, which memmove may not get even for 0 bytes) */
    memmove(sh->parked, sh->parked + k, (size_t)(sh->nparked - k) * sizeof sh->parked[0]);
    sh->nparked -= k;
    atomic_store(&sh->kick, true);
}

static void check_parked(void *arg)
{
    http_shard *sh = arg;
    sh->park_timer = false;
    int queued = rl_engine_admitting(sh->engine), room = places(sh);
    if (atomic_load(&sh->s->quiescing) || loop_stopping(mpool_loop(sh->pool)))
        resume(sh, sh->nparked);   /* they are answered (or refused) as the stop has it */
    else if (queued < room / 2 + 1)
        resume(sh, room - queued);
    arm(sh);
}

bool http_park(http_shard *sh, struct MHD_Connection *conn, const char *url, const char *method)
{
    for (int k = 0; k < sh->nlet; k++)
        if (sh->let[k] == conn) {   /* resumed from here: served now, whatever the queue */
            sh->let[k] = sh->let[--sh->nlet];
            return false;
        }
    if (atomic_load(&sh->s->quiescing) || !would_queue(url, method) ||
        rl_engine_admitting(sh->engine) < places(sh))
        return false;
    if (sh->nparked == sh->cap_parked) {
        int cap = sh->cap_parked ? 2 * sh->cap_parked : 64;
        void *more = realloc(sh->parked, (size_t)cap * sizeof sh->parked[0]);
        if (!more)
            return false;   /* (no memory to hold it back: served) */
        sh->parked = more;
        sh->cap_parked = cap;
    }
    sh->parked[sh->nparked++] = conn;
    metrics_count(sh->s->m, METRICS_REQUESTS_HELD_BACK);
    MHD_suspend_connection(conn);
    arm(sh);
    return true;
}

void http_park_release(void *arg)
{
    http_shard *sh = arg;
    resume(sh, sh->nparked);
}

struct pending_ask {
    http_shard *sh;
    bool due;
};

static void ask_pending(void *arg)
{
    struct pending_ask *a = arg;
    a->due = a->sh->park_timer;
}

bool http_park_pending(http_shard *sh)
{
    struct pending_ask a = {sh, false};
    loop_call(mpool_loop(sh->pool), ask_pending, &a);
    return a.due;
}

void http_park_free(http_shard *sh)
{
    free(sh->parked);
    free(sh->let);
    sh->parked = NULL;
    sh->let = NULL;
    sh->nparked = sh->cap_parked = sh->nlet = sh->cap_let = 0;
}
