/* The fault suite for counting semaphores (docs/semaphores.md): clients
 * through two redlockd instances take permits of one semaphore of
 * SEM_L, each holding a permit for a while within the validity it was
 * told (counted from when it sent the acquire), then releasing it, while a
 * fault thread pauses or flushes masters. fl_check_semaphore then holds the
 * run to: never more than SEM_L holders at once, never two holders of one
 * slot, fences increasing per slot. The negative control flushes three
 * masters with --quarantine off: the checker must find more than SEM_L
 * holders at once, and by construction (flush_three: the fault thread
 * flushes while a client holds a permit and asks for SEM_L more itself). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checker.h"
#include "harness.h"

#define SEM_L 2
#define SEM_CLIENTS 8
#define SEM_MAX_PERMITS 8192

typedef struct sem_run {
    h_cluster *c, *peer;
    atomic_bool stop, fault_stop;
    pthread_mutex_t mu;
    fl_permit permits[SEM_MAX_PERMITS];
    size_t n;
    long attempts, refused, no_quorum;
    void (*fault)(struct sem_run *r);
    _Atomic uint64_t held_until[SEM_CLIENTS]; /* each client's hold ends then (0: none) */
    int probes_in_hold;         /* flush_three's asks answered while a client held */
    bool negative;              /* the scenario's */
} sem_run;

struct client {
    sem_run *r;
    int id;
};

static void *client_main(void *arg)
{
    struct client *cl = arg;
    sem_run *r = cl->r;
    h_cluster *via = cl->id % 2 ? r->peer : r->c;
    unsigned seed = (unsigned)cl->id * 104729u + (unsigned)h_now_us();
    while (!atomic_load(&r->stop)) {
        uint64_t sent = h_now_us();
        h_resp a = h_http(via, "POST", "/semaphores/fs", "{\"limit\":2,\"ttl_ms\":1500,\"wait_ms\":1000}", NULL);
        uint64_t got = h_now_us();
        __atomic_fetch_add(&r->attempts, 1, __ATOMIC_RELAXED);
        if (a.status != 201) {
            __atomic_fetch_add(a.status == 503 ? &r->no_quorum : &r->refused, 1, __ATOMIC_RELAXED);
            h_resp_free(&a);
            usleep(20000);
            continue;
        }
        const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(a.json, "permits"), 0);
        int slot = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "slot"));
        long long fence = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "fence"));
        char hdr[400];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", cJSON_GetStringValue(cJSON_GetObjectItem(p, "token")));
        uint64_t valid_until = sent + (uint64_t)h_int(&a, "validity_ms") * 1000ULL;
        h_resp_free(&a);
        uint64_t step_down = got + (uint64_t)(100 + rand_r(&seed) % 500) * 1000ULL;
        uint64_t until = step_down < valid_until ? step_down : valid_until;
        uint64_t now = h_now_us();
        atomic_store(&r->held_until[cl->id], until);
        if (until > now)
            usleep((useconds_t)(until - now));
        atomic_store(&r->held_until[cl->id], 0);
        pthread_mutex_lock(&r->mu);
        if (r->n < SEM_MAX_PERMITS)
            r->permits[r->n++] = (fl_permit){cl->id, slot, fence, got, until};
        pthread_mutex_unlock(&r->mu);
        h_resp d = h_http(via, "DELETE", "/semaphores/fs", NULL, hdr, NULL);
        h_resp_free(&d);
    }
    return NULL;
}

static bool running(sem_run *r) { return !atomic_load(&r->fault_stop); }

static void nap(sem_run *r, int ms)
{
    for (int i = 0; i < ms / 10 && running(r); i++)
        usleep(10000);
}

static void wait_voting(sem_run *r, int want, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000;
    for (;;) {
        h_resp a = h_http(r->c, "GET", "/readyz", NULL, NULL);
        int v = a.json ? (int)h_int(&a, "masters_voting") : 0;
        h_resp_free(&a);
        if (v >= want || h_now_us() > until)
            return;
        usleep(20000);
    }
}

static void no_fault(sem_run *r) { nap(r, 1 << 30); }

static void pause_two(sem_run *r)
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

/* The latest end of a client's hold now (0: none holds). */
static uint64_t held_until(sem_run *r)
{
    uint64_t most = 0;
    for (int i = 0; i < SEM_CLIENTS; i++) {
        uint64_t u = atomic_load(&r->held_until[i]);
        most = u > most ? u : most;
    }
    return most;
}

/* The fault thread asks for SEM_L permits itself (recorded as client 99
 * until it releases them, at once). Counts an ask granted before hold_end:
 * with the permit held until then, more than SEM_L holders at once. */
static void probe(sem_run *r, uint64_t hold_end)
{
    h_resp a = h_http(r->c, "POST", "/semaphores/fs", "{\"limit\":2,\"permits\":2,\"ttl_ms\":1500}", NULL);
    uint64_t got = h_now_us();
    if (a.status == 201) {
        cJSON *ps = cJSON_GetObjectItem(a.json, "permits");
        char hdr[400] = "Lock-Token: ";
        for (int i = 0; i < cJSON_GetArraySize(ps); i++)
            snprintf(hdr + strlen(hdr), sizeof hdr - strlen(hdr), "%s%s", i ? "," : "",
                     cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(ps, i), "token")));
        uint64_t until = h_now_us();
        h_resp d = h_http(r->c, "DELETE", "/semaphores/fs", NULL, hdr, NULL);
        h_resp_free(&d);
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < cJSON_GetArraySize(ps) && r->n < SEM_MAX_PERMITS; i++) {
            const cJSON *p = cJSON_GetArrayItem(ps, i);
            r->permits[r->n++] = (fl_permit){99, (int)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "slot")),
                                             (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "fence")), got,
                                             until};
        }
        pthread_mutex_unlock(&r->mu);
        r->probes_in_hold += got < hold_end;
    }
    h_resp_free(&a);
}

/* FLUSHALL on three masters while a client holds a permit (for 300 ms
 * more at least), then an ask for SEM_L permits: with restart quarantine
 * the flushed masters sit out (no marker) and it is refused; without it
 * they vote at once and grant the held slots again. A round whose ask was
 * not granted within that hold (a client took a slot first) proves
 * nothing by itself: the negative control goes on until one was (at most
 * 10 rounds past the run). */
static void flush_three(sem_run *r)
{
    int extra = 0;
    while (running(r) || (r->negative && !r->probes_in_hold && ++extra <= 10)) {
        nap(r, 600);
        uint64_t end = 0;
        for (uint64_t give_up = h_now_us() + 5000000; h_now_us() < give_up; usleep(2000))
            if ((end = held_until(r)) > h_now_us() + 300000)
                break;
        for (int i = 0; i < 3; i++) {
            redisReply *x = h_redis(r->c, i, "FLUSHALL");
            if (x)
                freeReplyObject(x);
        }
        probe(r, end);
        wait_voting(r, 5, 15000);
        nap(r, 500);
    }
}

static void *fault_main(void *arg)
{
    sem_run *r = arg;
    r->fault(r);
    return NULL;
}

typedef struct sem_scenario {
    const char *label;
    void (*fault)(sem_run *r);
    const char *flags[3];
    bool negative;
} sem_scenario;


static void run(const sem_scenario *sc, int seconds)
{
    sem_run *r = calloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->c = h_cluster_start(5, NULL);
    h_daemon_start(r->c, "--max-ttl-ms", "1500", "--default-ttl-ms", "1500", "--fence-keep-ms", "1000",
                   sc->flags[0], sc->flags[1], NULL);
    r->peer = h_peer_start(r->c, "--max-ttl-ms", "1500", "--default-ttl-ms", "1500", "--fence-keep-ms", "1000",
                           sc->flags[0], sc->flags[1], NULL);
    struct client cl[SEM_CLIENTS];
    pthread_t ct[SEM_CLIENTS], ft;
    for (int i = 0; i < SEM_CLIENTS; i++) {
        cl[i] = (struct client){r, i};
        pthread_create(&ct[i], NULL, client_main, &cl[i]);
    }
    r->fault = sc->fault;
    r->negative = sc->negative;
    pthread_create(&ft, NULL, fault_main, r);
    sleep((unsigned)seconds);
    atomic_store(&r->fault_stop, true);
    pthread_join(ft, NULL);
    for (int i = 0; i < 5; i++)
        h_master_resume(r->c, i);
    atomic_store(&r->stop, true);
    for (int i = 0; i < SEM_CLIENTS; i++)
        pthread_join(ct[i], NULL);
    fl_semaphore_report rep;
    fl_check_semaphore(r->permits, r->n, SEM_L, &rep);
    fprintf(stderr, "| %-34s | %8ld | %7ld | %7ld | %6ld | %11d | %10ld | %13ld | %10ld |\n", sc->label,
            r->attempts, rep.permits, r->refused, r->no_quorum, rep.most_at_once, rep.over_limit,
            rep.slot_overlaps, rep.fence_violations);
    h_peer_free(r->peer);
    h_cluster_free(r->c);
    cr_assert_geq(rep.permits, 5, "%s: too few permits to judge", sc->label);
    if (sc->negative) {
        cr_assert_gt(r->probes_in_hold, 0, "%s: no flush was followed by an ask within a hold", sc->label);
        cr_assert_gt(rep.over_limit, 0, "%s: the checker found no more than %d holders", sc->label, SEM_L);
    } else {
        cr_assert_eq(rep.over_limit, 0, "%s: more than %d holders at once (%d)", sc->label, SEM_L,
                     rep.most_at_once);
        cr_assert_eq(rep.slot_overlaps, 0, "%s: two holders of one slot", sc->label);
        cr_assert_eq(rep.fence_violations, 0, "%s: a slot's fences did not increase", sc->label);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static int seconds(void)
{
    const char *v = getenv("FAULTS_SECONDS");
    return v && atoi(v) > 0 ? atoi(v) : 5;
}

static void header(void)
{
    fputs("| semaphore scenario (L = 2)         | attempts | permits | refused |    503 | most at once | over limit | slot overlaps | fence viol |\n"
          "|------------------------------------|---------:|--------:|--------:|-------:|-------------:|-----------:|--------------:|-----------:|\n",
          stderr);
}

TestSuite(semaphore_faults, .init = header, .timeout = 600);

static const sem_scenario s_none = {"no faults", no_fault, {NULL}, false};
static const sem_scenario s_pause2 = {"SIGSTOP two masters, cycles", pause_two, {NULL}, false};
static const sem_scenario s_flush = {"FLUSHALL three masters, quar", flush_three, {NULL}, false};
static const sem_scenario s_flush_noq = {"NEGATIVE: same, quarantine off", flush_three, {"--quarantine", "off", NULL},
                                         true};

Test(semaphore_faults, no_faults) { run(&s_none, seconds()); }
Test(semaphore_faults, sigstop_two_masters_cycles) { run(&s_pause2, seconds()); }
Test(semaphore_faults, flushall_three_masters_safe_by_quarantine) { run(&s_flush, seconds()); }
Test(semaphore_faults, negative_control_quarantine_off_is_caught) { run(&s_flush_noq, seconds()); }
