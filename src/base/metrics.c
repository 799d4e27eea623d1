/* metrics.c - see metrics.h. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const int statuses[] = {200, 201, 204, 400, 401, 403, 404, 405, 409, 413, 429, 500, 503};
#define NSTATUS (sizeof statuses / sizeof statuses[0])
#define STATUS_OTHER NSTATUS

/* Upper bounds in seconds of the latency buckets (+Inf implied). */
static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define NBUCKETS (sizeof buckets / sizeof buckets[0])

static const char *route_names[METRICS_ROUTE_COUNT] = {
    "acquire", "extend", "release", "inspect", "dapr_lock", "dapr_unlock", "healthz", "readyz",
    "metrics", "list", "other"};

static const struct {
    const char *name;
    const char *help;
} counter_info[METRICS_COUNTER_COUNT] = {
    {"redlockd_grants_total", "Locks granted (acquire answered 201, Dapr lock success)."},
    {"redlockd_conflicts_total", "Acquires answered 409 locked."},
    {"redlockd_no_quorum_total", "Requests answered 503 no_quorum: fewer than a majority of masters could vote."},
    {"redlockd_extensions_total", "Extensions answered 200."},
    {"redlockd_releases_total", "Releases answered 204."},
    {"redlockd_not_held_total", "Extends and releases answered 409 not_held."},
    {"redlockd_validity_exhausted_total", "Majorities won too late to leave any validity, released instead of granted."},
    {"redlockd_fence_raises_total", "Grants that raised fence counters on masters before answering."},
    {"redlockd_acquire_retries_total", "Retries of waiting acquires."},
    {"redlockd_handoff_wakeups_total", "Waiting acquires woken at once by a release, here or on another instance."},
    {"redlockd_cancelled_total", "Requests whose client went away before the answer (no grant kept)."},
    {"redlockd_abandoned_grants_total", "Grants released at once because their answer could not be delivered."},
    {"redlockd_waiters_refused_total", "Acquires answered 429 because --max-waiters acquires were waiting."},
    {"redlockd_request_timeouts_total", "Connections closed because a request was not complete within --request-timeout-ms."},
    {"redlockd_overloaded_total", "Acquires and inspections answered 503 overloaded: they waited --queue-timeout-ms for one of --max-inflight places."},
    {"redlockd_quorum_misses_total", "Engine operations of any kind (requests, renewals of held streams, semaphore slots) that found fewer than a majority of masters able to vote; requests among them are also in redlockd_no_quorum_total."},
    {"redlockd_requests_held_back_total", "Requests left unread (their connection suspended) because as many requests as --max-inflight has places were already waiting for one; each is read once the queue is down to half."},
};

/* One second of metrics_rates: sec says which second its counts are of
 * (a request of a newer second takes the slot over and zeroes it; one
 * racing with that may be lost: the plots are approximate). */
struct rate_slot {
    atomic_llong sec;
    atomic_uint n[3];
};

struct metrics {
    struct rate_slot rates[METRICS_RATE_SECONDS];
    atomic_ullong requests[METRICS_ROUTE_COUNT][NSTATUS + 1];
    atomic_ullong hist[METRICS_ROUTE_COUNT][NBUCKETS + 1];
    atomic_ullong hist_sum_us[METRICS_ROUTE_COUNT];
    atomic_ullong counters[METRICS_COUNTER_COUNT];
    atomic_llong inflight;
};

metrics *metrics_new(void) { return calloc(1, sizeof(metrics)); }
void metrics_free(metrics *m) { free(m); }

void metrics_count(metrics *m, enum metrics_counter c) { atomic_fetch_add(&m->counters[c], 1); }

void metrics_inflight(metrics *m, int delta) { atomic_fetch_add(&m->inflight, delta); }

void metrics_request(metrics *m, enum metrics_route r, int status, uint64_t latency_us)
{
    size_t s = STATUS_OTHER;
    for (size_t i = 0; i < NSTATUS; i++)
        if (statuses[i] == status)
            s = i;
    atomic_fetch_add(&m->requests[r][s], 1);
    double secs = (double)latency_us / 1e6;
    size_t b = 0;
    while (b < NBUCKETS && secs > buckets[b])
        b++;
    atomic_fetch_add(&m->hist[r][b], 1);
    atomic_fetch_add(&m->hist_sum_us[r], latency_us);
    int k = status == 409 ? 1 : status == 503 ? 2 : r == METRICS_ROUTE_ACQUIRE && status == 201 ? 0 : -1;
    if (k < 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    long long sec = (long long)ts.tv_sec;
    struct rate_slot *slot = &m->rates[sec % METRICS_RATE_SECONDS];
    long long was = atomic_load(&slot->sec);
    if (was != sec && atomic_compare_exchange_strong(&slot->sec, &was, sec))
        for (int i = 0; i < 3; i++)
            atomic_store(&slot->n[i], 0);
    atomic_fetch_add(&slot->n[k], 1);
}

void metrics_rates(metrics *m, long long now_s, metrics_rate *out)
{
    for (int i = 0; i < METRICS_RATE_SECONDS; i++) {
        long long t = now_s - (METRICS_RATE_SECONDS - 1) + i;
        struct rate_slot *slot = &m->rates[t % METRICS_RATE_SECONDS];
        out[i] = (metrics_rate){.t = t};
        if (atomic_load(&slot->sec) == t) {
            out[i].grants = atomic_load(&slot->n[0]);
            out[i].conflicts = atomic_load(&slot->n[1]);
            out[i].unavailable = atomic_load(&slot->n[2]);
        }
    }
}

int metrics_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return -1;
        if (*buf && *len + (size_t)n < *cap) {
            *len += (size_t)n;
            return 0;
        }
        size_t ncap = (*cap ? *cap * 2 : 8192) + (size_t)n;
        char *nb = realloc(*buf, ncap);
        if (!nb)
            return -1;
        *buf = nb;
        *cap = ncap;
    }
}

int metrics_render(metrics *m, char **buf, size_t *len, size_t *cap)
{
    int rc = 0;
    rc |= metrics_appendf(buf, len, cap,
                          "# HELP redlockd_http_requests_total HTTP requests answered, by route and status.\n"
                          "# TYPE redlockd_http_requests_total counter\n");
    for (int r = 0; r < METRICS_ROUTE_COUNT; r++)
        for (size_t s = 0; s <= NSTATUS; s++) {
            unsigned long long v = atomic_load(&m->requests[r][s]);
            if (!v)
                continue;
            char code[8];
            if (s == STATUS_OTHER)
                snprintf(code, sizeof code, "other");
            else
                snprintf(code, sizeof code, "%d", statuses[s]);
            rc |= metrics_appendf(buf, len, cap,
                                  "redlockd_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                                  route_names[r], code, v);
        }
    rc |= metrics_appendf(buf, len, cap,
                          "# HELP redlockd_request_duration_seconds Time to answer lock requests, by operation.\n"
                          "# TYPE redlockd_request_duration_seconds histogram\n");
    for (int r = METRICS_ROUTE_ACQUIRE; r <= METRICS_ROUTE_DAPR_UNLOCK; r++) {
        unsigned long long cum = 0;
        for (size_t b = 0; b <= NBUCKETS; b++) {
            cum += atomic_load(&m->hist[r][b]);
            if (b < NBUCKETS)
                rc |= metrics_appendf(buf, len, cap,
                                      "redlockd_request_duration_seconds_bucket{operation=\"%s\",le=\"%g\"} %llu\n",
                                      route_names[r], buckets[b], cum);
            else
                rc |= metrics_appendf(buf, len, cap,
                                      "redlockd_request_duration_seconds_bucket{operation=\"%s\",le=\"+Inf\"} %llu\n",
                                      route_names[r], cum);
        }
        rc |= metrics_appendf(buf, len, cap,
                              "redlockd_request_duration_seconds_sum{operation=\"%s\"} %.6f\n"
                              "redlockd_request_duration_seconds_count{operation=\"%s\"} %llu\n",
                              route_names[r], (double)atomic_load(&m->hist_sum_us[r]) / 1e6,
                              route_names[r], cum);
    }
    for (int c = 0; c < METRICS_COUNTER_COUNT; c++)
        rc |= metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n",
                              counter_info[c].name, counter_info[c].help, counter_info[c].name,
                              counter_info[c].name, atomic_load(&m->counters[c]));
    rc |= metrics_appendf(buf, len, cap,
                          "# HELP redlockd_inflight_requests Lock requests being worked on, waiting ones included.\n"
                          "# TYPE redlockd_inflight_requests gauge\nredlockd_inflight_requests %lld\n",
                          atomic_load(&m->inflight));
    return rc ? -1 : 0;
}
