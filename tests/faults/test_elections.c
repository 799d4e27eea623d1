/* The fault suite for leader election (docs/elections.md): campaigners
 * through two redlockd instances on five real masters contend for one
 * election while watchers follow it and a fault thread pauses or restarts
 * masters. Each campaigner reads its campaign stream as a client must: it
 * leads from reading "elected" until it steps down, reads "lost", or the
 * validity last announced (counted from when it read the event) runs out.
 * The checker (checker.c, fl_check_election) then holds the run to:
 *   - at most one leader at a time, each term given once, terms strictly
 *     increasing in the order leaders were elected;
 *   - each watcher tells terms in increasing order, and tells every term
 *     that lasted at least ELECT_LONG_MS.
 * The negative control flushes three masters with --quarantine off: the
 * checker must find two leaders at once (lose_three). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checker.h"
#include "harness.h"

#define ELECT_CAMPAIGNERS 6
#define ELECT_WATCHERS 2
#define ELECT_MAX_TERMS 4096
#define ELECT_MAX_EVENTS 16384
#define ELECT_MAX_PERIODS 64
#define ELECT_LONG_MS 700   /* a watch reads every 250 ms: a term this long is told */

typedef struct elect_run {
    h_cluster *c, *peer;
    long long ttl_ms;
    int hold_min_ms, hold_max_ms;
    atomic_bool stop, fault_stop;
    pthread_mutex_t mu;
    fl_term terms[ELECT_MAX_TERMS];
    size_t nterms;
    fl_watch_event evs[ELECT_MAX_EVENTS];
    size_t nevs;
    long campaigns, lost, no_elected;
    void (*fault)(struct elect_run *r);   /* the fault thread's body */
    fl_period down[ELECT_MAX_PERIODS];    /* from a fault to all five voting again: a watch
                                             may not see what no majority shows */
    int ndown;
    bool negative;                        /* the scenario's */
} elect_run;

static h_cluster *inst(elect_run *r, int i) { return i % 2 ? r->peer : r->c; }

static long long ev_int(const cJSON *ev, const char *f)
{
    const cJSON *v = cJSON_GetObjectItem(ev, f);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
}

static const char *ev_str(const cJSON *ev, const char *f)
{
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(ev, f));
    return v ? v : "";
}

struct campaigner {
    elect_run *r;
    int id;
};

/* Campaigns until the run stops; each leadership is recorded as lived. */
static void *campaigner_main(void *arg)
{
    struct campaigner *cp = arg;
    elect_run *r = cp->r;
    unsigned seed = (unsigned)cp->id * 7919u + (unsigned)h_now_us();
    char body[160];
    snprintf(body, sizeof body, "{\"candidate\":\"c%d\",\"ttl_ms\":%lld}", cp->id, r->ttl_ms);
    while (!atomic_load(&r->stop)) {
        h_stream *s = h_stream_open(inst(r, cp->id), "/elections/fe", body, 3000);
        if (!s || s->status != 201) {
            if (s)
                h_stream_close(s);
            usleep(50000);
            continue;
        }
        __atomic_fetch_add(&r->campaigns, 1, __ATOMIC_RELAXED);
        cJSON *ev = NULL;
        uint64_t at = 0;
        long long term = 0;
        uint64_t from = 0, valid_until = 0, until = 0;
        /* campaigning, then elected (or the run ends) */
        while (!atomic_load(&r->stop)) {
            int rc = h_stream_event(s, 200, &ev, &at);
            if (rc < 0)
                break;
            if (rc == 0)
                continue;
            if (!strcmp(ev_str(ev, "event"), "elected")) {
                term = ev_int(ev, "term");
                from = at;
                valid_until = at + (uint64_t)ev_int(ev, "validity_ms") * 1000ULL;
            }
            cJSON_Delete(ev);
            if (term)
                break;
        }
        if (!term) {
            __atomic_fetch_add(&r->no_elected, 1, __ATOMIC_RELAXED);
            h_stream_close(s);
            continue;
        }
        /* Leads for a while, trusting each event's validity. */
        uint64_t step_down = from + (uint64_t)(r->hold_min_ms + (int)(rand_r(&seed) %
                                               (unsigned)(r->hold_max_ms - r->hold_min_ms + 1))) * 1000ULL;
        for (;;) {
            uint64_t now = h_now_us();
            uint64_t next = step_down < valid_until ? step_down : valid_until;
            if (now >= next) {
                until = next;
                break;
            }
            int rc = h_stream_event(s, (int)((next - now) / 1000) + 1, &ev, &at);
            if (rc < 0) {
                until = h_now_us() < next ? h_now_us() : next;   /* the stream ended: stop now */
                break;
            }
            if (rc == 0)
                continue;
            const char *kind = ev_str(ev, "event");
            if (!strcmp(kind, "renewed")) {
                valid_until = at + (uint64_t)ev_int(ev, "validity_ms") * 1000ULL;
            } else if (!strcmp(kind, "lost") || !strcmp(kind, "resigned")) {
                until = at < next ? at : next;
                if (!strcmp(kind, "lost"))
                    __atomic_fetch_add(&r->lost, 1, __ATOMIC_RELAXED);
                cJSON_Delete(ev);
                break;
            }
            cJSON_Delete(ev);
        }
        pthread_mutex_lock(&r->mu);
        if (r->nterms < ELECT_MAX_TERMS)
            r->terms[r->nterms++] = (fl_term){cp->id, term, from, until};
        pthread_mutex_unlock(&r->mu);
        h_stream_close(s);   /* steps down: the lock is released */
    }
    return NULL;
}

struct watcher {
    elect_run *r;
    int id;
    uint64_t from_us;
};

static void *watcher_main(void *arg)
{
    struct watcher *w = arg;
    elect_run *r = w->r;
    h_stream *s = h_stream_get(inst(r, w->id), "/elections/fe?watch=true", 3000);
    cr_assert(s && s->status == 200, "watch %d", w->id);
    w->from_us = h_now_us();
    while (!atomic_load(&r->stop)) {
        cJSON *ev = NULL;
        uint64_t at;
        int rc = h_stream_event(s, 200, &ev, &at);
        if (rc < 0)
            break;
        if (rc == 0)
            continue;
        const char *kind = ev_str(ev, "event");
        fl_watch_event e = {w->id, !strcmp(kind, "elected"), ev_int(ev, "term"), at};
        if (!strcmp(kind, "vacant"))
            e.term = 0;
        pthread_mutex_lock(&r->mu);
        if (r->nevs < ELECT_MAX_EVENTS)
            r->evs[r->nevs++] = e;
        pthread_mutex_unlock(&r->mu);
        cJSON_Delete(ev);
    }
    h_stream_close(s);
    return NULL;
}

/* ---- faults ---- */

static bool running(elect_run *r) { return !atomic_load(&r->fault_stop); }

static void nap(elect_run *r, int ms)
{
    for (int i = 0; i < ms / 10 && running(r); i++)
        usleep(10000);
}

static int voting(elect_run *r)
{
    h_resp a = h_http(r->c, "GET", "/readyz", NULL, NULL);
    int v = a.json ? (int)h_int(&a, "masters_voting") : 0;
    h_resp_free(&a);
    return v;
}

static void wait_voting(elect_run *r, int want, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    while (voting(r) < want && h_now_us() < until)
        usleep(20000);
}

static void mark_down(elect_run *r, uint64_t begin, uint64_t end);

static void no_fault(elect_run *r) { nap(r, 1 << 30); }

static void pause_two(elect_run *r)
{
    while (running(r)) {
        int first = rand() % 5;
        h_master_pause(r->c, first);
        h_master_pause(r->c, (first + 2) % 5);
        nap(r, 400);
        h_master_resume(r->c, first);
        h_master_resume(r->c, (first + 2) % 5);
        wait_voting(r, 5, 5000);
        nap(r, 200);
    }
}

static void pause_three(elect_run *r)
{
    while (running(r)) {
        nap(r, 500);
        uint64_t begin = h_now_us();
        for (int i = 0; i < 3; i++)
            h_master_pause(r->c, i);
        usleep(1200000);
        for (int i = 0; i < 3; i++)
            h_master_resume(r->c, i);
        wait_voting(r, 5, 5000);
        mark_down(r, begin, h_now_us());
    }
}

/* A leadership recorded from outside the campaigners (the intruder). */
static void record(elect_run *r, int client, long long term, uint64_t from, uint64_t until)
{
    pthread_mutex_lock(&r->mu);
    if (r->nterms < ELECT_MAX_TERMS)
        r->terms[r->nterms++] = (fl_term){client, term, from, until};
    pthread_mutex_unlock(&r->mu);
}

static void mark_down(elect_run *r, uint64_t begin, uint64_t end)
{
    pthread_mutex_lock(&r->mu);
    if (r->ndown < ELECT_MAX_PERIODS)
        r->down[r->ndown++] = (fl_period){begin, end};
    pthread_mutex_unlock(&r->mu);
}

/* Waits (up to 3 s) until a leader was just elected or renewed (a
 * validity of 1.5 s with 1.3 s left): its next renewal, which would learn
 * of a loss, is some 300 ms away. */
static void wait_leader(elect_run *r)
{
    for (int i = 0; i < 1000 && running(r); i++) {
        h_resp a = h_http(r->c, "GET", "/elections/fe", NULL, NULL);
        bool ok = a.json && h_int(&a, "validity_ms") > 1300;
        h_resp_free(&a);
        if (ok)
            return;
        usleep(3000);
    }
}

/* Whether the leaderships recorded so far hold two leaders at once. */
static bool overlap_seen(elect_run *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->nterms;
    fl_term *t = malloc((n + 1) * sizeof *t);
    memcpy(t, r->terms, n * sizeof *t);
    pthread_mutex_unlock(&r->mu);
    fl_election_report rep;
    fl_check_election(t, n, NULL, 0, 0, 0, 0, ELECT_LONG_MS, NULL, 0, &rep);
    free(t);
    return rep.overlaps > 0;
}

/* An intruder campaigns (through the peer) for up to a second, at once
 * after masters lost the election's key; a win is recorded as a
 * leadership of 200 ms. */
static void intrude(elect_run *r)
{
    char body[96];
    snprintf(body, sizeof body, "{\"candidate\":\"intruder\",\"ttl_ms\":%lld}", r->ttl_ms);
    h_stream *s = h_stream_open(r->peer, "/elections/fe", body, 3000);
    uint64_t give_up = h_now_us() + 1000000;
    while (s && s->status == 201 && h_now_us() < give_up) {
        cJSON *ev = NULL;
        uint64_t at;
        int rc = h_stream_event(s, 100, &ev, &at);
        if (rc < 0)
            break;
        if (rc == 0)
            continue;
        if (!strcmp(ev_str(ev, "event"), "elected")) {
            long long validity = ev_int(ev, "validity_ms"), term = ev_int(ev, "term");
            cJSON_Delete(ev);
            usleep(200000);   /* leads a moment */
            uint64_t until = h_now_us(), end = at + (uint64_t)validity * 1000ULL;
            record(r, 99, term, at, until < end ? until : end);
            break;
        }
        cJSON_Delete(ev);
    }
    if (s)
        h_stream_close(s);
}

/* Three masters lose their data under a leader: SIGKILLed and started
 * again empty (kill), or FLUSHALL (which an operator, or eviction, can do);
 * an intruder campaigns at once. Restart quarantine keeps those masters out
 * of the vote (a flushed master has lost its marker too), so the intruder
 * cannot win while the leader leads. Without quarantine (the negative
 * control) a flushed master votes at once, the intruder wins on three
 * masters, and the leader learns of it only at its next renewal, up to a
 * third of the ttl later: two leaders at once, which the checker must find.
 * The loss strikes just after the leader renewed, so that the intruder is
 * elected before its next renewal; a round whose leader stepped down first
 * proves nothing, and the negative control goes on until the terms show
 * two leaders (at most 10 rounds past the run). */
static void lose_three(elect_run *r, bool kill)
{
    int extra = 0;
    while (running(r) || (r->negative && !overlap_seen(r) && ++extra <= 10)) {
        nap(r, 300);
        wait_leader(r);
        uint64_t begin = h_now_us();
        for (int i = 0; i < 3; i++) {
            if (kill) {
                h_master_kill(r->c, i);
                h_master_restart(r->c, i);
            } else {
                redisReply *x = h_redis(r->c, i, "FLUSHALL");
                if (x)
                    freeReplyObject(x);
            }
        }
        intrude(r);
        /* With quarantine the masters sit out about 2.5 s: then leaders
         * come again, and are judged, before the next loss. */
        wait_voting(r, 5, 15000);
        mark_down(r, begin, h_now_us());
        nap(r, 1000);
    }
}

static void kill_three(elect_run *r) { lose_three(r, true); }
static void flush_three(elect_run *r) { lose_three(r, false); }

typedef struct elect_scenario {
    const char *label;
    void (*fault)(elect_run *r);
    const char *flags[4];
    int hold_min_ms, hold_max_ms;
    bool negative;              /* the checker must find two leaders at once */
} elect_scenario;

static void *fault_main(void *arg)
{
    elect_run *r = arg;
    r->fault(r);
    return NULL;
}

/* The run's timeline, in ms from t0, for a failed check: leaderships,
 * watch events and the periods no majority voted. */
static void dump(const elect_run *r, uint64_t t0)
{
    for (size_t i = 0; i < r->nterms; i++)
        fprintf(stderr, "  term %lld: client %d leads %.0f..%.0f ms\n", r->terms[i].term, r->terms[i].client,
                (double)((int64_t)(r->terms[i].from_us - t0)) / 1000.0,
                (double)((int64_t)(r->terms[i].until_us - t0)) / 1000.0);
    for (int d = 0; d < r->ndown; d++)
        fprintf(stderr, "  down %.0f..%.0f ms\n", (double)((int64_t)(r->down[d].begin_us - t0)) / 1000.0,
                (double)((int64_t)(r->down[d].end_us - t0)) / 1000.0);
    for (size_t k = 0; k < r->nevs; k++)
        fprintf(stderr, "  watch %d at %.0f ms: %s term %lld\n", r->evs[k].watcher,
                (double)((int64_t)(r->evs[k].at_us - t0)) / 1000.0, r->evs[k].elected ? "elected" : "other",
                r->evs[k].term);
}

static void run(const elect_scenario *sc, int seconds)
{
    elect_run *r = calloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->ttl_ms = 1500;
    r->hold_min_ms = sc->hold_min_ms;
    r->hold_max_ms = sc->hold_max_ms;
    r->c = h_cluster_start(5, NULL);
    /* As in the lock suite: the longest ttl is the campaigns', so restart
     * quarantine lasts about 1.5 s + 1 s, not an hour. */
    h_daemon_start(r->c, "--max-ttl-ms", "1500", "--default-ttl-ms", "1500", "--fence-keep-ms", "1000", sc->flags[0], sc->flags[1], NULL);
    r->peer = h_peer_start(r->c, "--max-ttl-ms", "1500", "--default-ttl-ms", "1500", "--fence-keep-ms", "1000", sc->flags[0], sc->flags[1],
                           NULL);
    struct watcher w[ELECT_WATCHERS];
    pthread_t wt[ELECT_WATCHERS], ct[ELECT_CAMPAIGNERS], ft;
    for (int i = 0; i < ELECT_WATCHERS; i++) {
        w[i] = (struct watcher){r, i, 0};
        pthread_create(&wt[i], NULL, watcher_main, &w[i]);
    }
    usleep(300000);
    struct campaigner cp[ELECT_CAMPAIGNERS];
    for (int i = 0; i < ELECT_CAMPAIGNERS; i++) {
        cp[i] = (struct campaigner){r, i};
        pthread_create(&ct[i], NULL, campaigner_main, &cp[i]);
    }
    r->fault = sc->fault;
    r->negative = sc->negative;
    pthread_create(&ft, NULL, fault_main, r);
    sleep((unsigned)seconds);
    atomic_store(&r->fault_stop, true);
    pthread_join(ft, NULL);
    for (int i = 0; i < 5; i++)
        h_master_resume(r->c, i);
    wait_voting(r, 5, 15000);
    sleep(2);   /* elections resume after the faults */
    uint64_t watch_until = h_now_us();
    atomic_store(&r->stop, true);
    for (int i = 0; i < ELECT_CAMPAIGNERS; i++)
        pthread_join(ct[i], NULL);
    for (int i = 0; i < ELECT_WATCHERS; i++)
        pthread_join(wt[i], NULL);
    uint64_t watch_from = w[0].from_us > w[1].from_us ? w[0].from_us : w[1].from_us;
    fl_election_report rep;
    fl_check_election(r->terms, r->nterms, r->evs, r->nevs, ELECT_WATCHERS, watch_from, watch_until,
                      ELECT_LONG_MS, r->down, r->ndown, &rep);
    fprintf(stderr, "| %-34s | %8ld | %5ld | %4ld | %8ld | %9ld | %10ld | %8ld | %7ld | %10ld | %6ld/%-6ld |\n",
            sc->label, r->campaigns, rep.terms, r->lost, rep.overlaps, rep.duplicate_terms,
            rep.term_order_violations, rep.watch_events, rep.watch_order_violations, rep.watch_unknown_terms,
            rep.long_terms * ELECT_WATCHERS - rep.watch_missed, rep.long_terms * ELECT_WATCHERS);
    h_peer_free(r->peer);
    h_cluster_free(r->c);
    bool bad = rep.terms < 3 || (sc->negative ? rep.overlaps == 0
                                              : rep.overlaps || rep.duplicate_terms || rep.term_order_violations ||
                                                    rep.watch_order_violations || rep.watch_missed);
    if (bad)
        dump(r, w[0].from_us < w[1].from_us ? w[0].from_us : w[1].from_us);
    cr_assert_geq(rep.terms, 3, "%s: too few leaders to judge", sc->label);
    if (sc->negative) {
        cr_assert_gt(rep.overlaps, 0, "%s: the checker found no two leaders at once", sc->label);
    } else {
        cr_assert_eq(rep.overlaps, 0, "%s: two leaders at once", sc->label);
        cr_assert_eq(rep.duplicate_terms, 0, "%s: a term given twice", sc->label);
        cr_assert_eq(rep.term_order_violations, 0, "%s: terms did not increase", sc->label);
        cr_assert_eq(rep.watch_order_violations, 0, "%s: a watch told terms out of order", sc->label);
        cr_assert_eq(rep.watch_missed, 0, "%s: a watch missed a term of %d ms or more", sc->label,
                     ELECT_LONG_MS);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static int seconds(void)
{
    const char *v = getenv("FAULTS_SECONDS");
    return v && atoi(v) > 0 ? atoi(v) : 6;
}

static void header(void)
{
    static bool said;
    if (said)
        return;
    said = true;
    fputs("| election scenario                  | campaigns | terms | lost | overlaps | dup terms | "
          "term order | watch ev | w order | w unknown | long told |\n"
          "|------------------------------------|----------:|------:|-----:|---------:|----------:|"
          "-----------:|---------:|--------:|-----------:|----------:|\n", stderr);
}

TestSuite(election_faults, .init = header, .timeout = 600);

static const elect_scenario e_none = {"no faults", no_fault, {NULL}, 100, 900, false};
static const elect_scenario e_pause2 = {"SIGSTOP two masters, cycles", pause_two, {NULL}, 100, 900, false};
static const elect_scenario e_pause3 = {"SIGSTOP three masters", pause_three, {NULL}, 100, 900, false};
static const elect_scenario e_restart = {"SIGKILL+restart empty, quar", kill_three, {NULL}, 600, 1400, false};
static const elect_scenario e_flush = {"FLUSHALL three masters, quar", flush_three, {NULL}, 600, 1400, false};
static const elect_scenario e_flush_noq = {"NEGATIVE: same, quarantine off", flush_three,
                                           {"--quarantine", "off", NULL}, 600, 1400, true};

Test(election_faults, no_faults) { run(&e_none, seconds()); }
Test(election_faults, sigstop_two_masters_cycles) { run(&e_pause2, seconds()); }
Test(election_faults, sigstop_three_masters) { run(&e_pause3, seconds()); }
Test(election_faults, sigkill_restart_empty_safe_by_quarantine) { run(&e_restart, seconds()); }
Test(election_faults, flushall_three_masters_safe_by_quarantine) { run(&e_flush, seconds()); }
Test(election_faults, negative_control_quarantine_off_is_caught) { run(&e_flush_noq, seconds()); }
