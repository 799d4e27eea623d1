/* checker.h - judges a fault-injection run from its client logs.
 *
 * Every client of the workload logs one record per acquire attempt: when it
 * was sent and answered (one CLOCK_MONOTONIC shared by all processes on the
 * machine), the answer, and for a grant the validity, the fence, what the
 * protected resource said to its write, and when the release was sent and
 * answered. The checker needs nothing else: it is pure and unit-tested with
 * hand-made records that do and do not violate each property.
 */
#ifndef FL_CHECKER_H
#define FL_CHECKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fl_write { FL_WRITE_NONE, FL_WRITE_ACCEPTED, FL_WRITE_REJECTED };

typedef struct fl_record {
    int client;
    int name;                   /* index of the lock name */
    int status;                 /* acquire HTTP status; -1 no answer */
    uint64_t sent_us, answered_us;
    long long validity_ms, ttl_ms, fence;   /* with status 201 */
    uint64_t read_us;           /* the fenced read at the start of the critical section */
    enum fl_write write;
    uint64_t write_us;
    bool late;                  /* the write was sent after the validity ended */
    uint64_t release_sent_us, release_answered_us;  /* 0 when not released */
    int release_status;
} fl_record;

/* A period in which fewer than a majority of masters can vote. */
typedef struct fl_period {
    uint64_t begin_us, end_us;
} fl_period;

typedef struct fl_expect {
    long long bound_ms;         /* master timeout plus margin: latency bound */
    long long ttl_ms;
    long long recovery_slack_ms;  /* added to ttl for "grants resume" */
    const fl_period *down;      /* majority down: every attempt fully inside answers 503 */
    int ndown;
    const uint64_t *recovered_us; /* grants must resume within ttl (+slack) of each */
    int nrecovered;
} fl_expect;

typedef struct fl_report {
    long attempts, grants, locked, no_quorum, other, transport_errors;
    long overlaps;              /* pairs of grants of one name with overlapping windows */
    long fence_violations;      /* a grant whose fence is not above every earlier one */
    long accepted_fence_violations; /* accepted writes whose fences do not increase */
    long accepted_writes, rejected_writes, late_writes, late_rejected;
    long late_stale;            /* late writes after a newer holder had read the resource */
    long late_stale_accepted;   /* ...that the resource accepted: must be none */
    long free_attempts, free_granted;   /* attempts on a free name, in healthy time */
    double healthy_p99_ms;      /* acquire latency, attempts outside down periods */
    long down_attempts, down_wrong; /* inside down periods; not a fast 503 */
    int down_wrong_status;      /* the first wrong one: its status and time */
    double down_wrong_ms;
    long recoveries_judged;     /* followed by a TTL (+slack) with no new fault */
    long recoveries_missed;     /* ...of those, with no grant in that time */
    uint64_t first_overlap_a_us, first_overlap_b_us;
} fl_report;

/* Fills rep from records (reordered in place). resource_count[name] is the
 * count each name's resource ended with, compared with its accepted writes
 * by the caller. */
void fl_check(fl_record *recs, size_t n, int nnames, const fl_expect *ex, fl_report *rep);

/* Accepted writes per name, for the resource comparison. */
long fl_accepted_for(const fl_record *recs, size_t n, int name);



/* ---- elections (docs/elections.md) ---- */

/* One leadership as its campaigner lived it: from reading "elected" to
 * the moment it stopped relying on it (it chose to step down, read "lost",
 * or the validity last announced ran out), on the shared monotonic clock. */
typedef struct fl_term {
    int client;
    long long term;
    uint64_t from_us, until_us;
} fl_term;

/* One line of a watch stream: term 0 for "vacant". */
typedef struct fl_watch_event {
    int watcher;
    bool elected;               /* "elected" (else "state", "proclaimed" or "vacant") */
    long long term;
    uint64_t at_us;
} fl_watch_event;

typedef struct fl_election_report {
    long terms;
    long overlaps;              /* pairs of leaderships that overlap in time */
    long duplicate_terms;       /* a term given to two leaderships */
    long term_order_violations; /* a leadership whose term is not above every earlier one */
    long watch_events;
    long watch_order_violations; /* per watcher: "elected" not above the last term it told,
                                    or any term below it */
    long watch_unknown_terms;   /* terms a watch told that no campaigner read (a grant
                                   released at once: reported, not a violation) */
    long long_terms;            /* leaderships of at least long_term_ms within the watch */
    long watch_missed;          /* (watcher, long term) pairs the watcher never told */
} fl_election_report;

/* Judges leaderships (reordered in place) and the watchers' events (each
 * watcher's in the order read). Watches ran from watch_from_us to
 * watch_until_us; every leadership of at least long_term_ms inside that
 * time, and outside the down periods (a majority could not answer: a watch
 * reads what a majority shows), must be told by every watcher. */
void fl_check_election(fl_term *terms, size_t n, const fl_watch_event *evs, size_t m, int nwatchers,
                       uint64_t watch_from_us, uint64_t watch_until_us, long long long_term_ms,
                       const fl_period *down, int ndown, fl_election_report *rep);
/* ---- semaphores (docs/semaphores.md) ---- */

/* One permit as its holder lived it: from the grant's answer to the moment
 * it stopped relying on it (it released it, or the validity counted from
 * when it sent the acquire ran out). */
typedef struct fl_permit {
    int client, slot;
    long long fence;
    uint64_t from_us, until_us;
} fl_permit;

typedef struct fl_semaphore_report {
    long permits;
    int most_at_once;           /* holders at the same moment, at most */
    long over_limit;            /* permits that began while limit others were held */
    long slot_overlaps;         /* two holders of one slot at once */
    long fence_violations;      /* per slot, fences not increasing in grant order */
} fl_semaphore_report;

/* Judges permits (reordered in place) against limit. */
void fl_check_semaphore(fl_permit *p, size_t n, int limit, fl_semaphore_report *rep);

/* ---- first come, first served ---- */

/* One handoff: who got the name next (-1: nobody), and who had waited
 * longest among those still waiting when it came free. */
typedef struct fl_handoff {
    int next, oldest;
} fl_handoff;

typedef struct fl_order_report {
    long handoffs;              /* handoffs to somebody */
    long in_order;              /* ... to the one that waited longest */
    long nobody;                /* handoffs to nobody */
} fl_order_report;

void fl_check_order(const fl_handoff *h, size_t n, fl_order_report *rep);

#endif
