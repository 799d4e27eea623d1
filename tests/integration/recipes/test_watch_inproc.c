/* An election's watch in-process, on a real redis-server (white-box: it
 * links the daemon's code, core_dep): a client that does not read is never
 * owed a backlog. However many times the leader proclaims while it reads
 * nothing, its next read is one event, with the newest state, as a held
 * stream's renewals are (issue 41: 20 watchers that never read grew the
 * process by 3 MB/s). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/engine.h"
#include "harness.h"
#include "masters/masters.h"
#include "recipes/recipes.h"

static h_cluster *C;
static mpool *P;
static rl_engine *E;
static atomic_int answered;
static atomic_int outcome;

static metrics *M;

static void teardown(void)
{
    if (E)
        rl_engine_close(E);
    if (P)
        mpool_stop(P);
    if (E)
        rl_engine_free(E);
    if (P)
        mpool_free(P);
    if (M)
        metrics_free(M);
    E = NULL;
    P = NULL;
    M = NULL;
    h_cluster_free(C);
    C = NULL;
}

TestSuite(watch_inproc, .fini = teardown, .timeout = 60);

static void done(void *arg, const rl_result *res)
{
    rl_result *out = arg;
    if (out)
        *out = *res;
    atomic_store(&outcome, res->outcome);
    atomic_fetch_add(&answered, 1);
}

static bool answered_at_least(void *arg)
{
    return atomic_load(&answered) >= *(int *)arg;
}

/* Submits req and waits for its answer, which must be RL_OK. */
static void run(const rl_request *req, rl_result *res)
{
    int want = atomic_load(&answered) + 1;
    cr_assert_eq(rl_submit(E, req, done, res, NULL), 0);
    cr_assert(h_eventually(answered_at_least, &want, 10000), "no answer");
    cr_assert_eq(atomic_load(&outcome), RL_OK, "outcome %d", atomic_load(&outcome));
}

static bool pool_up(void *arg)
{
    (void)arg;
    master_status st;
    mpool_status(P, 0, &st);
    return st.up;
}

static void wake(void *arg) { (void)arg; }

Test(watch_inproc, a_reader_that_reads_nothing_is_owed_only_the_newest_state)
{
    C = h_cluster_start(1, NULL);
    scripts_init();
    conf_addr addr = {.port = C->m[0].port};
    snprintf(addr.host, sizeof addr.host, "127.0.0.1");
    mpool_config pc = {.nmasters = 1, .masters = &addr, .timeout_ms = 2000, .max_ttl_ms = 60000};
    P = mpool_new(&pc);
    cr_assert(P);
    rl_config ec = {.key_prefix = "lock:", .drift_factor = 0.01, .retry_delay_ms = 100, .max_ttl_ms = 60000,
                    .fence_keep_ms = 60000, .max_waiters = 100, .max_active = 64, .queue_ms = 1000};
    M = metrics_new();
    E = rl_engine_new(&ec, P, M);
    cr_assert(E && mpool_start(P) == 0);
    cr_assert(h_eventually(pool_up, NULL, 10000), "the master never came up");

    /* A leader, then a watch that reads its first event ("state"). */
    rl_request grant = {.op = RL_ACQUIRE, .ttl_ms = 30000};
    election_lock_name("db", grant.name, sizeof grant.name);
    election_owner("pg-1", "v0", grant.owner, sizeof grant.owner);
    rl_result res;
    run(&grant, &res);
    char token[TOKEN_MAX_LEN + 1];
    snprintf(token, sizeof token, "%s", res.token);
    election_watch *w = election_watch_start(E, P, grant.name, "db", wake, NULL);
    cr_assert(w);
    char buf[65536];
    long n = 0;
    for (int i = 0; i < 500 && n == 0; i++) {
        usleep(10000);
        n = election_watch_read(w, buf, sizeof buf);
    }
    cr_assert_gt(n, 0, "no first event");
    buf[n] = '\0';
    cr_assert(strstr(buf, "\"event\":\"state\""), "%s", buf);

    /* Thirty proclaims, none of them read; the watch reads the election
     * every 250 ms (ELECTION_WATCH_POLL_MS), so it saw many of them. */
    for (int k = 1; k <= 30; k++) {
        rl_request p = {.op = RL_PROCLAIM};
        snprintf(p.name, sizeof p.name, "%s", grant.name);
        snprintf(p.token, sizeof p.token, "%s", token);
        snprintf(p.owner, sizeof p.owner, "v%d", k);   /* the new value */
        run(&p, NULL);
        usleep(30000);
    }
    usleep(1000000);   /* four reads of the final state at least */

    n = election_watch_read(w, buf, sizeof buf - 1);
    cr_assert_gt(n, 0, "nothing to read after thirty proclaims");
    buf[n] = '\0';
    int lines = 0;
    for (char *c = buf; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, 1, "a backlog of %d events: %.300s", lines, buf);
    cr_assert(strstr(buf, "\"event\":\"proclaimed\"") && strstr(buf, "\"value\":\"v30\""), "%s", buf);
    cr_assert_eq(election_watch_read(w, buf, sizeof buf), 0, "more after the newest state");
    election_watch_close(w);
}
