/* master_marker.c - each master's restart-quarantine marker as this layer
 * sees it (marker.h sets the markers right; quarantine.h has the rules):
 * what the handshake's "observe" and the vote scripts' guard report, the
 * state /readyz shows (marker, quarantine_until_us), and the report to the
 * marker callback when a master answers without a ready marker.
 *
 * Depends on the loop (loop.h: the report runs from a timer).
 */
#include <stdio.h>

#include "master_int.h"
#include "scripts.h"

static void marker_due(void *arg);

/* Tells the marker callback, from a timer (never from inside a reply), that m
 * answered without a ready marker. At most one such timer per master. */
void master_marker_report(mpool *p, struct master *m)
{
    if (!p->marker_fn || m->marker_report_due)
        return;
    if (loop_after(mpool_loop(p), 0, marker_due, m) == 0)
        m->marker_report_due = true;
}

static void marker_due(void *arg)
{
    struct master *m = arg;
    m->marker_report_due = false;
    if (!loop_stopping(mpool_loop(m->pool)))
        m->pool->marker_fn(m->pool->marker_arg, m->idx);
}

void mpool_note_marker(mpool *p, int i, int state, long long ms_left)
{
    struct master *m = &p->masters[i];
    uint64_t until = ms_left > 0 ? loop_now_us() + (uint64_t)ms_left * 1000ULL : 0;
    int was = atomic_exchange(&m->marker, state);
    uint64_t was_until = atomic_exchange(&m->quarantine_until_us, until);
    char left[24];
    snprintf(left, sizeof left, "%lld", ms_left);
    if (state == QMARK_READY && until && !was_until)
        log_event(LOG_LEVEL_WARN, "master_quarantined", "addr", m->name, "left_ms", left, NULL);
    else if (state != QMARK_READY && was == QMARK_READY)
        log_event(LOG_LEVEL_WARN, "master_quarantined", "addr", m->name, "reason",
                  "no ready cluster marker: it lost its data or the cluster is not set up", NULL);
    else if (state == QMARK_READY && !until && (was != QMARK_READY || was_until))
        log_event(LOG_LEVEL_INFO, "master_votes", "addr", m->name, NULL);
}

const char *mpool_run_id(const mpool *p, int i) { return p->masters[i].info.run_id; }

void mpool_set_marker_fn(mpool *p, mpool_marker_fn fn, void *arg)
{
    p->marker_fn = fn;
    p->marker_arg = arg;
}

/* What a reply to a vote script says of m's marker: the guard refused, or
 * let it vote. Returns true when the answer is no vote. */
bool master_guard(mpool *p, struct master *m, const mscript *s, const master_reply *mr)
{
    bool refused = p->refuse_unsafe && atomic_load(&m->may_lose);
    if (!s->guarded || !p->quarantine_us || mr->kind != MREPLY_VALUE || mr->nints < 1)
        return refused;
    if (mr->ints[0] == SCRIPT_NOT_SET_UP) {
        if (atomic_load(&m->marker) == QMARK_READY)
            mpool_note_marker(p, m->idx, QMARK_MISSING, 0);
        master_marker_report(p, m);
        return true;
    }
    if (mr->ints[0] == SCRIPT_QUARANTINED) {
        long long left = mr->nints >= 2 ? mr->ints[1] : 1;
        mpool_note_marker(p, m->idx, QMARK_READY, left > 0 ? left : 1);
        return true;
    }
    if (atomic_load(&m->marker) != QMARK_READY || atomic_load(&m->quarantine_until_us))
        mpool_note_marker(p, m->idx, QMARK_READY, 0);
    return refused;
}
