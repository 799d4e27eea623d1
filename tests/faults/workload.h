/* workload.h - the fault suite's load: clients contending for a few lock
 * names through the real redlockd over HTTP, each critical section using a
 * fenced shared resource, while a fault thread injects one kind of fault.
 */
#ifndef FL_WORKLOAD_H
#define FL_WORKLOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>

#include "checker.h"
#include "harness.h"

#define FL_MAX_NAMES 8
#define FL_MAX_PERIODS 64
#define FL_MAX_PEERS 4
#define FL_MAX_PROBES 256

/* The protected resource of one name, as a fenced store would do it: every
 * operation carries the holder's fence; a write is accepted only with a fence
 * above the last write's and not below any fence it has seen. */
typedef struct fl_resource {
    pthread_mutex_t mu;
    long long seen_fence;       /* highest fence of any read or write */
    long long last_write_fence;
    long count;                 /* the data: a counter each holder increments */
} fl_resource;

typedef struct fl_run fl_run;

#define FL_EXPECT_OVERLAP 1
#define FL_EXPECT_FENCE 2

typedef struct fl_scenario {
    const char *label;
    int clients;
    int names;
    long long ttl_ms;
    int hold_max_ms;            /* critical section: random 0..hold_max_ms */
    int late_client_pause_ms;   /* > 0: client 0 stalls this long past validity before writing */
    const char *daemon_flags[8]; /* extra redlockd flags, NULL-terminated */
    const char *extra_redis;
    void (*fault)(fl_run *r);   /* the fault thread's body; returns when done */
    bool check_availability;    /* 99% of free-name attempts granted, p99 bound */
    int expect_violation;       /* negative control: the checker must find one, either
                                   FL_EXPECT_OVERLAP (overlaps or lost writes) or
                                   FL_EXPECT_FENCE (fences that do not increase) */
    int peers;                  /* extra redlockd instances on the same masters; client i
                                   goes through instance i % (peers + 1) */
    int stream_hold_max_ms;     /* > 0: odd clients take the lock as a held stream and keep
                                   it 0..this long (renewed by redlockd), trusting each
                                   event's validity; it ends by DELETE or a close */
    bool long_holder;           /* client 0 keeps each grant until FL_LONG_HOLD_SPARE_MS
                                   before its validity ends; the fault thread waits for such
                                   a hold (fl_wait_long_holder) to strike while a name is
                                   surely held, so a negative control cannot miss by chance */
} fl_scenario;

#define FL_LONG_HOLD_SPARE_MS 200

struct fl_run {
    const fl_scenario *sc;
    h_cluster *c;
    int seconds;                /* load before the fault thread's deadline */
    atomic_bool stop;           /* clients stop */
    atomic_bool fault_stop;     /* the fault thread should finish */
    uint64_t t0_us;
    fl_resource res[FL_MAX_NAMES];
    fl_period down[FL_MAX_PERIODS];
    int ndown;
    uint64_t recovered[FL_MAX_PERIODS];
    int nrecovered;
    pthread_mutex_t rec_mu;
    fl_record *recs;
    size_t nrecs, caprecs;
    char jsonl[400];
    const char *dargv[16];      /* redlockd's flags, for a restart */
    h_cluster *peers[FL_MAX_PEERS]; /* views of the extra instances (harness.h) */
    pthread_mutex_t tok_mu;     /* every token a client received, for the ghost check */
    char (*tokens)[24];
    _Atomic uint64_t long_hold_until_us; /* client 0's hold ends then (0: not holding) */
    atomic_int long_hold_name;  /* ... of this name */
    fl_record probes[FL_MAX_PROBES]; /* the probes' asks (workload_probe.c), judged as a client's */
    int nprobes;
    int probes_in_hold;         /* ... of them answered while client 0 still held the name */
    atomic_long grants;         /* acquires answered 201 so far, the probes' included */
    size_t ntokens, captokens;
};

/* Fault helpers, for fault threads. */
bool fl_running(fl_run *r);                  /* false once asked to stop */
void fl_sleep_ms(fl_run *r, int ms);         /* returns early when stopping */
void fl_mark_down(fl_run *r, uint64_t begin_us, uint64_t end_us);
void fl_mark_recovered(fl_run *r, uint64_t at_us);
/* Polls /readyz until masters_voting >= want (or the timeout); returns the
 * start of the last poll that saw fewer (0 if none did), and sets *ready_us
 * to the end of the first that saw enough (0 on timeout). */
uint64_t fl_wait_voting(fl_run *r, int want, int timeout_ms, uint64_t *ready_us);
/* Waits until client 0 of a long_holder scenario holds a name with at
 * least left_ms of its hold to go. Returns false on timeout. */
bool fl_wait_long_holder(fl_run *r, int left_ms, int timeout_ms);
/* The moment a long_holder negative control rests on, made sure of, once
 * masters were restarted: waits (up to 15 s) until redlockd has every
 * master up again (connected and past its handshake), then, while client 0
 * still holds its name for FL_PROBE_LEFT_MS more, asks for that name
 * itself, as a client of its own (recorded, released at once). With
 * quarantine off the empty restarted masters grant it (or granted it to
 * another client already): two holders at once, every time. Counts in
 * probes_in_hold an ask answered while client 0 still held; a round whose
 * hold ended first proves nothing, and the control repeats until one did.
 * A positive scenario asks nothing (its clients' latencies are judged). */
#define FL_PROBE_LEFT_MS 300
void fl_probe_long_hold(fl_run *r);
/* Waits until a grant is on record that was answered after the call
 * began: a client's, or its own (it asks for fl-<name> through the first
 * instance every 20 ms meanwhile, as a client of its own, and releases
 * what it gets at once). False after timeout_ms. */
bool fl_probe_grant(fl_run *r, int name, int timeout_ms);
/* Whether a negative control of a long_holder scenario still owes its
 * proof (no probe came in time yet, at most 10 rounds past the run). */
bool fl_probe_owed(fl_run *r, int *extra_rounds);
/* Polls /readyz until every master in mask reads "up": false (or the
 * timeout): a master just paused still counts as up and voting until a
 * command to it misses its deadline. Returns false on timeout. */
bool fl_wait_masters_down(fl_run *r, uint32_t mask, int timeout_ms);
/* Starts redlockd again (after h_daemon_kill) with the same flags and port. */
void fl_daemon_start(fl_run *r);
/* SIGKILLs instance k (0: the first, 1..peers: the extra ones) and starts a
 * new process in its place: same flags and port, nothing of the old one's
 * memory. Waits until it serves. */
void fl_instance_restart(fl_run *r, int k);

/* The column names of the scenario table (Markdown), rows from
 * fl_run_scenario: answers counted by status (noans: no HTTP answer),
 * overlapping holders, fence violations, resource writes lost, late writes
 * rejected of those that came after a newer holder, grants on a free name in
 * healthy time, and p99 acquire latency in healthy time. */
#define FL_TABLE_HEADER                                                                             \
    "| scenario                       | attempts |  grants |    409 |    503 | noans | overlaps | "     \
    "fence viol | lost | late stale rej | free ok% | p99 ms |\n"                                     \
    "|--------------------------------|---------:|--------:|-------:|-------:|------:|---------:|"      \
    "-----------:|-----:|:--------------:|---------:|-------:|\n"

/* Runs the scenario for `seconds` of load (plus time to recover), checks it,
 * prints its row of the table and asserts its properties. */
void fl_run_scenario(const fl_scenario *sc, int seconds, int clients_override);

#endif
