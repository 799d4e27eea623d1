/* metrics.h - the service's counters and latency histograms, lock-free
 * (atomics), rendered as Prometheus text by the HTTP layer.
 *
 * Never holds lock names or tokens: only routes, status codes and counts.
 */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metrics_route {
    METRICS_ROUTE_ACQUIRE,
    METRICS_ROUTE_EXTEND,
    METRICS_ROUTE_RELEASE,
    METRICS_ROUTE_INSPECT,
    METRICS_ROUTE_DAPR_LOCK,
    METRICS_ROUTE_DAPR_UNLOCK,
    METRICS_ROUTE_HEALTHZ,
    METRICS_ROUTE_READYZ,
    METRICS_ROUTE_METRICS,
    METRICS_ROUTE_LIST,     /* GET /locks, /elections, /semaphores */
    METRICS_ROUTE_OTHER,
    METRICS_ROUTE_COUNT
};

enum metrics_counter {
    METRICS_GRANTS,            /* acquires answered 201 */
    METRICS_CONFLICTS,         /* acquires answered 409 locked */
    METRICS_NO_QUORUM,         /* requests answered 503 no_quorum (counted by the HTTP layer) */
    METRICS_EXTENSIONS,        /* extends answered 200 */
    METRICS_RELEASES,          /* releases answered 204 */
    METRICS_NOT_HELD,          /* extends/releases answered 409 not_held */
    METRICS_VALIDITY_EXHAUSTED,/* majorities won too slowly to leave validity: released */
    METRICS_FENCE_RAISES,      /* grants that had to raise fence counters first */
    METRICS_ACQUIRE_RETRIES,   /* retries inside wait_ms */
    METRICS_HANDOFF_WAKES,     /* waiters woken by a release (here or a notice) */
    METRICS_CANCELLED,         /* requests whose caller went away before the answer */
    METRICS_ABANDONED_GRANTS,  /* grants released because they could not be delivered */
    METRICS_WAITERS_REFUSED,   /* acquires refused for --max-waiters */
    METRICS_REQUEST_TIMEOUTS,  /* connections closed for --request-timeout-ms */
    METRICS_OVERLOADED,        /* requests answered 503 overloaded */
    METRICS_QUORUM_MISSES,     /* engine operations of any kind (renewals too) that found
                                  fewer than a majority able to vote */
    METRICS_REQUESTS_HELD_BACK,/* requests left unread while the admission queue was long */
    METRICS_COUNTER_COUNT
};

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);

void metrics_count(metrics *m, enum metrics_counter c);
/* A finished HTTP request: route, status, time from first byte to answer. */
void metrics_request(metrics *m, enum metrics_route r, int status, uint64_t latency_us);
void metrics_inflight(metrics *m, int delta);

/* The last METRICS_RATE_SECONDS seconds of answers, per second of the
 * wall clock, for the dashboard's plots (GET /ui/state): acquires
 * answered 201, answers 409 and answers 503, on any route. */
#define METRICS_RATE_SECONDS 300
typedef struct metrics_rate {
    long long t;               /* Unix seconds */
    unsigned grants, conflicts, unavailable;
} metrics_rate;
/* out[0..METRICS_RATE_SECONDS), oldest first, ending with the second of
 * now_s (seconds without answers are zeros). */
void metrics_rates(metrics *m, long long now_s, metrics_rate *out);

/* Appends the Prometheus text of all counters to a malloc'd buffer
 * *buf of *len bytes (growing it). Returns 0 or -1 on OOM. */
int metrics_render(metrics *m, char **buf, size_t *len, size_t *cap);

/* printf-append helper shared with the HTTP layer's per-master lines. */
int metrics_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
