/* checker.c - see checker.h. */
#include "checker.h"

#include <stdlib.h>
#include <string.h>

/* The window in which the holder may rely on its lock: from the answer for
 * validity_ms, cut short when it sent the release. */
static uint64_t window_end(const fl_record *r)
{
    uint64_t end = r->answered_us + (uint64_t)r->validity_ms * 1000ULL;
    if (r->release_sent_us && r->release_sent_us < end)
        end = r->release_sent_us;
    return end;
}

/* When another acquire could first find the name free again: the release's
 * answer, or, when it was not released cleanly, the key's expiry at most. */
static uint64_t occupancy_end(const fl_record *r)
{
    if (r->release_answered_us && r->release_status == 204)
        return r->release_answered_us;
    return r->answered_us + (uint64_t)r->ttl_ms * 1000ULL;
}

static int by_name_then_answer(const void *a, const void *b)
{
    const fl_record *x = a, *y = b;
    if (x->name != y->name)
        return x->name < y->name ? -1 : 1;
    if (x->answered_us != y->answered_us)
        return x->answered_us < y->answered_us ? -1 : 1;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool in_down(const fl_expect *ex, uint64_t t)
{
    for (int i = 0; i < ex->ndown; i++)
        if (t >= ex->down[i].begin_us && t <= ex->down[i].end_us)
            return true;
    return false;
}

struct occ {
    uint64_t start, end;
    size_t rec;
};

static int occ_by_start(const void *a, const void *b)
{
    const struct occ *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Counts attempts of one name made while no other attempt occupied it, and
 * how many of those were granted. occ is sorted by start; best[k] holds the
 * largest and second largest end among occ[0..k] with their records. */
static void free_attempts(const fl_record *recs, size_t lo, size_t hi, const fl_expect *ex,
                          fl_report *rep)
{
    size_t ng = 0;
    for (size_t i = lo; i < hi; i++)
        ng += recs[i].status == 201;
    if (ng == 0)
        return;
    struct occ *occ = malloc(ng * sizeof *occ);
    struct { uint64_t e1, e2; size_t r1; } *best = malloc(ng * sizeof *best);
    if (!occ || !best)
        abort();
    size_t k = 0;
    for (size_t i = lo; i < hi; i++)
        if (recs[i].status == 201)
            occ[k++] = (struct occ){recs[i].sent_us, occupancy_end(&recs[i]), i};
    qsort(occ, ng, sizeof *occ, occ_by_start);
    for (size_t j = 0; j < ng; j++) {
        uint64_t e1 = j ? best[j - 1].e1 : 0, e2 = j ? best[j - 1].e2 : 0;
        size_t r1 = j ? best[j - 1].r1 : (size_t)-1;
        if (occ[j].end >= e1) {
            e2 = e1;
            e1 = occ[j].end;
            r1 = occ[j].rec;
        } else if (occ[j].end > e2) {
            e2 = occ[j].end;
        }
        best[j].e1 = e1;
        best[j].e2 = e2;
        best[j].r1 = r1;
    }
    for (size_t i = lo; i < hi; i++) {
        const fl_record *r = &recs[i];
        if (r->status != 201 && r->status != 409)
            continue;
        if (in_down(ex, r->sent_us) || in_down(ex, r->answered_us))
            continue;
        /* occupancies starting at or before our answer: a prefix */
        size_t a = 0, b = ng;
        while (a < b) {
            size_t m = (a + b) / 2;
            if (occ[m].start <= r->answered_us)
                a = m + 1;
            else
                b = m;
        }
        if (a == 0) {
            rep->free_attempts++;
            rep->free_granted += r->status == 201;
            continue;
        }
        uint64_t other_end = best[a - 1].r1 == i ? best[a - 1].e2 : best[a - 1].e1;
        if (other_end < r->sent_us) {
            rep->free_attempts++;
            rep->free_granted += r->status == 201;
        }
    }
    free(occ);
    free(best);
}

void fl_check(fl_record *recs, size_t n, int nnames, const fl_expect *ex, fl_report *rep)
{
    memset(rep, 0, sizeof *rep);
    (void)nnames;
    qsort(recs, n, sizeof *recs, by_name_then_answer);
    uint64_t *lat = malloc((n ? n : 1) * sizeof *lat);
    size_t nlat = 0;
    if (!lat)
        abort();

    for (size_t i = 0; i < n; i++) {
        const fl_record *r = &recs[i];
        rep->attempts++;
        switch (r->status) {
        case 201: rep->grants++; break;
        case 409: rep->locked++; break;
        case 503: rep->no_quorum++; break;
        case -1: rep->transport_errors++; break;
        default: rep->other++; break;
        }
        if (r->write == FL_WRITE_ACCEPTED) rep->accepted_writes++;
        if (r->write == FL_WRITE_REJECTED) rep->rejected_writes++;
        if (r->late) {
            rep->late_writes++;
            rep->late_rejected += r->write == FL_WRITE_REJECTED;
        }
        if (r->status <= 0)
            continue;
        uint64_t took_us = r->answered_us - r->sent_us;
        bool inside = false;
        for (int d = 0; d < ex->ndown; d++)
            if (r->sent_us >= ex->down[d].begin_us && r->answered_us <= ex->down[d].end_us)
                inside = true;
        if (inside) {
            rep->down_attempts++;
            if (r->status != 503 || took_us > (uint64_t)ex->bound_ms * 1000ULL) {
                if (!rep->down_wrong++) {
                    rep->down_wrong_status = r->status;
                    rep->down_wrong_ms = (double)took_us / 1000.0;
                }
            }
        } else if (!in_down(ex, r->sent_us) && !in_down(ex, r->answered_us)) {
            lat[nlat++] = took_us;
        }
    }
    if (nlat) {
        qsort(lat, nlat, sizeof *lat, cmp_u64);
        size_t k = (nlat * 99 + 99) / 100;
        rep->healthy_p99_ms = (double)lat[(k ? k : 1) - 1] / 1000.0;
    }
    free(lat);

    /* Per name: overlaps among grant windows, fences in grant order, fences
     * of accepted writes in write order, free-name attempts. */
    for (size_t lo = 0; lo < n;) {
        size_t hi = lo;
        while (hi < n && recs[hi].name == recs[lo].name)
            hi++;
        uint64_t max_end = 0, max_end_at = 0;
        long long max_fence = 0;
        for (size_t i = lo; i < hi; i++) {
            const fl_record *r = &recs[i];
            if (r->status != 201)
                continue;
            if (r->answered_us < max_end) {
                if (!rep->overlaps) {
                    rep->first_overlap_a_us = max_end_at;
                    rep->first_overlap_b_us = r->answered_us;
                }
                rep->overlaps++;
            }
            uint64_t end = window_end(r);
            if (end > max_end) {
                max_end = end;
                max_end_at = r->answered_us;
            }
            if (r->fence <= max_fence)
                rep->fence_violations++;
            if (r->fence > max_fence)
                max_fence = r->fence;
        }
        /* accepted writes, in the order the resource took them */
        size_t nw = 0;
        for (size_t i = lo; i < hi; i++)
            nw += recs[i].write == FL_WRITE_ACCEPTED;
        if (nw) {
            struct occ *w = malloc(nw * sizeof *w);
            if (!w)
                abort();
            size_t k = 0;
            for (size_t i = lo; i < hi; i++)
                if (recs[i].write == FL_WRITE_ACCEPTED)
                    w[k++] = (struct occ){recs[i].write_us, (uint64_t)recs[i].fence, i};
            qsort(w, nw, sizeof *w, occ_by_start);
            for (size_t j = 1; j < nw; j++)
                rep->accepted_fence_violations += w[j].end <= w[j - 1].end;
            free(w);
        }
        /* Late writes: after its validity, a holder wrote; if a holder with
         * a higher fence had read the resource by then, the fence must have
         * turned that write away. */
        for (size_t i = lo; i < hi; i++) {
            const fl_record *w = &recs[i];
            if (!w->late || w->write == FL_WRITE_NONE)
                continue;
            bool newer = false;
            for (size_t j = lo; j < hi && !newer; j++)
                newer = recs[j].status == 201 && recs[j].fence > w->fence && recs[j].read_us &&
                        recs[j].read_us < w->write_us;
            if (newer) {
                rep->late_stale++;
                rep->late_stale_accepted += w->write == FL_WRITE_ACCEPTED;
            }
        }
        free_attempts(recs, lo, hi, ex, rep);
        lo = hi;
    }

    /* After each recovery, a grant within one TTL (plus slack). A recovery
     * that the next fault cut short of that is not judged. */
    for (int k = 0; k < ex->nrecovered; k++) {
        uint64_t from = ex->recovered_us[k];
        uint64_t until = from + (uint64_t)(ex->ttl_ms + ex->recovery_slack_ms) * 1000ULL;
        bool cut = false;
        for (int d = 0; d < ex->ndown && !cut; d++)
            cut = ex->down[d].begin_us >= from && ex->down[d].begin_us <= until;
        if (cut)
            continue;
        rep->recoveries_judged++;
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++)
            ok = recs[i].status == 201 && recs[i].answered_us >= from && recs[i].answered_us <= until;
        rep->recoveries_missed += !ok;
    }
}

long fl_accepted_for(const fl_record *recs, size_t n, int name)
{
    long k = 0;
    for (size_t i = 0; i < n; i++)
        k += recs[i].name == name && recs[i].write == FL_WRITE_ACCEPTED;
    return k;
}

/* ---- elections ---- */

static int by_from(const void *a, const void *b)
{
    const fl_term *x = a, *y = b;
    return x->from_us < y->from_us ? -1 : x->from_us > y->from_us;
}

void fl_check_election(fl_term *terms, size_t n, const fl_watch_event *evs, size_t m, int nwatchers,
                       uint64_t watch_from_us, uint64_t watch_until_us, long long long_term_ms,
                       const fl_period *down, int ndown, fl_election_report *rep)
{
    memset(rep, 0, sizeof *rep);
    qsort(terms, n, sizeof *terms, by_from);
    rep->terms = (long)n;
    long long highest = 0;
    for (size_t i = 0; i < n; i++) {
        /* At most one leader at a time: no later leadership begins before
         * an earlier one ended. */
        for (size_t j = i + 1; j < n && terms[j].from_us < terms[i].until_us; j++)
            rep->overlaps++;
        for (size_t j = 0; j < i; j++)
            rep->duplicate_terms += terms[j].term == terms[i].term;
        if (i > 0 && terms[i].term <= highest)
            rep->term_order_violations++;
        if (terms[i].term > highest)
            highest = terms[i].term;
    }
    rep->watch_events = (long)m;
    for (int w = 0; w < nwatchers; w++) {
        long long last = 0;
        for (size_t k = 0; k < m; k++) {
            const fl_watch_event *e = &evs[k];
            if (e->watcher != w || e->term == 0)
                continue;
            if (e->term < last || (e->elected && e->term == last))
                rep->watch_order_violations++;
            if (e->term > last)
                last = e->term;
            bool known = false;
            for (size_t i = 0; i < n && !known; i++)
                known = terms[i].term == e->term;
            rep->watch_unknown_terms += !known;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (terms[i].until_us < terms[i].from_us + (uint64_t)long_term_ms * 1000ULL ||
            terms[i].from_us < watch_from_us || terms[i].until_us > watch_until_us)
            continue;
        bool in_down = false;
        for (int d = 0; d < ndown && !in_down; d++)
            in_down = terms[i].from_us < down[d].end_us && terms[i].until_us > down[d].begin_us;
        if (in_down)
            continue;
        rep->long_terms++;
        for (int w = 0; w < nwatchers; w++) {
            bool told = false;
            for (size_t k = 0; k < m && !told; k++)
                told = evs[k].watcher == w && evs[k].term == terms[i].term;
            rep->watch_missed += !told;
        }
    }
}

/* ---- semaphores ---- */

static int permit_by_from(const void *a, const void *b)
{
    const fl_permit *x = a, *y = b;
    return x->from_us < y->from_us ? -1 : x->from_us > y->from_us;
}

void fl_check_semaphore(fl_permit *p, size_t n, int limit, fl_semaphore_report *rep)
{
    memset(rep, 0, sizeof *rep);
    qsort(p, n, sizeof *p, permit_by_from);
    rep->permits = (long)n;
    for (size_t i = 0; i < n; i++) {
        /* holders at the moment permit i began: itself and every earlier
         * one that had not ended (a permit's interval is [from, until)) */
        int at_once = 1;
        for (size_t j = 0; j < i; j++) {
            if (p[j].until_us <= p[i].from_us)
                continue;
            at_once++;
            if (p[j].slot == p[i].slot)
                rep->slot_overlaps++;
        }
        if (at_once > rep->most_at_once)
            rep->most_at_once = at_once;
        rep->over_limit += at_once > limit;
        for (size_t j = 0; j < i; j++)
            if (p[j].slot == p[i].slot && p[j].fence >= p[i].fence) {
                rep->fence_violations++;
                break;
            }
    }
}

void fl_check_order(const fl_handoff *h, size_t n, fl_order_report *rep)
{
    memset(rep, 0, sizeof *rep);
    for (size_t i = 0; i < n; i++) {
        if (h[i].next < 0) {
            rep->nobody++;
            continue;
        }
        rep->handoffs++;
        rep->in_order += h[i].next == h[i].oldest;
    }
}
