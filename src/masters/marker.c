/* marker.c - see marker.h. */
#include "marker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "master.h"
#include "quarantine.h"
#include "scripts.h"

#define MARKER_RETRY_US 1000000ULL      /* while anything is left to settle */
#define MARKER_ROUNDS_MAX 4             /* read-plan-write rounds in one check */
#define MARKER_LOG_EVERY_US 10000000ULL /* "not set up" at most this often */

struct marker_check {
    struct mpool *p;
    struct mpool *const *mirror;  /* the process's other pools: what a read finds, they learn */
    int nmirror;
    char window[24];          /* window_us as text */
    bool auto_setup;
    bool busy;                /* a check is under way */
    bool again;               /* asked for while busy: check once more */
    bool retry_armed;         /* a retry timer is pending */
    int rounds;
    int writes_left;          /* writes of this round not yet answered */
    uint64_t next_log_us;
};

static void check_start(marker_check *mc);

static void check_read(marker_check *mc);

static void check_done(marker_check *mc, bool settled);

static void retry_due(void *arg)
{
    marker_check *mc = arg;
    mc->retry_armed = false;
    if (!loop_stopping(mpool_loop(mc->p)))
        check_start(mc);
}

static void on_written(void *arg, const master_reply *replies)
{
    (void)replies;   /* the next read tells what took */
    marker_check *mc = arg;
    if (--mc->writes_left == 0)
        check_read(mc);
}

static const char *action_name(enum quarantine_action a)
{
    switch (a) {
    case QACT_PENDING: return "pending";
    case QACT_PROMOTE: return "promote";
    case QACT_RESTORE: return "restore";
    default: return "read";
    }
}

static void on_read(void *arg, const master_reply *replies)
{
    marker_check *mc = arg;
    int n = mpool_size(mc->p);
    enum quarantine_marker st[MASTER_MAX];
    enum quarantine_action act[MASTER_MAX];
    bool settled = true;
    for (int i = 0; i < n; i++) {
        const master_reply *r = &replies[i];
        if (r->kind == MREPLY_VALUE && r->nints == 2 && r->ints[0] >= QMARK_MISSING &&
            r->ints[0] <= QMARK_READY) {
            st[i] = (enum quarantine_marker)r->ints[0];
            mpool_note_marker(mc->p, i, st[i], r->ints[1]);
            for (int k = 0; k < mc->nmirror; k++)
                if (mc->mirror[k] != mc->p)
                    mpool_note_marker(mc->mirror[k], i, st[i], r->ints[1]);
        } else {
            st[i] = QMARK_UNKNOWN;
        }
        settled &= st[i] == QMARK_READY;
    }
    int acts = quarantine_plan(st, n, mc->auto_setup, act);
    if (acts == 0 || mc->rounds >= MARKER_ROUNDS_MAX || loop_stopping(mpool_loop(mc->p))) {
        bool none_marked = true;
        for (int i = 0; i < n; i++)
            none_marked &= st[i] == QMARK_MISSING;
        uint64_t now = loop_now_us();
        if (none_marked && !mc->auto_setup && now >= mc->next_log_us) {
            log_event(LOG_LEVEL_WARN, "cluster_not_set_up", "why",
                      "no master holds a cluster marker and --cluster-setup is manual: "
                      "run redlockd --setup-cluster once", NULL);
            mc->next_log_us = now + MARKER_LOG_EVERY_US;
        }
        check_done(mc, settled);
        return;
    }
    mc->rounds++;
    mc->writes_left = acts;
    for (int i = 0; i < n; i++) {
        if (act[i] == QACT_NONE)
            continue;
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (act[i] == QACT_RESTORE)
            log_event(LOG_LEVEL_WARN, "master_lost_data", "master", idx, "why",
                      "no cluster marker while other masters hold one: it sits out every vote "
                      "for the longest TTL plus the fence keep plus drift", NULL);
        else if (act[i] == QACT_PENDING)
            log_event(LOG_LEVEL_INFO, "cluster_setup", "master", idx, NULL);
        const char *args[] = {SCRIPT_MARKER_KEY, action_name(act[i]), mpool_run_id(mc->p, i),
                              mc->window, "0"};
        size_t lens[5];
        for (int k = 0; k < 5; k++)
            lens[k] = strlen(args[k]);
        mpool_eval(mc->p, &script_marker, 1u << i, 1, 5, args, lens, on_written, mc);
    }
}

static void check_read(marker_check *mc)
{
    const char *args[] = {SCRIPT_MARKER_KEY, "read", "", mc->window, "0"};
    size_t lens[5];
    for (int k = 0; k < 5; k++)
        lens[k] = strlen(args[k]);
    int n = mpool_size(mc->p);
    uint32_t all = n >= 32 ? ~0u : (1u << n) - 1u;
    mpool_eval(mc->p, &script_marker, all, 1, 5, args, lens, on_read, mc);
}

static void check_start(marker_check *mc)
{
    if (mc->busy) {
        mc->again = true;
        return;
    }
    mc->busy = true;
    mc->again = false;
    mc->rounds = 0;
    check_read(mc);
}

static void check_done(marker_check *mc, bool settled)
{
    mc->busy = false;
    if (mc->again && !loop_stopping(mpool_loop(mc->p))) {
        check_start(mc);
        return;
    }
    if (!settled && !mc->retry_armed && loop_after(mpool_loop(mc->p), MARKER_RETRY_US, retry_due, mc) == 0)
        mc->retry_armed = true;
}

static void on_report(void *arg, int master)
{
    (void)master;   /* every check reads all masters */
    check_start(arg);
}

marker_check *marker_check_new(struct mpool *p, uint64_t window_us, bool auto_setup)
{
    return marker_check_new_shared(p, NULL, 0, window_us, auto_setup);
}

marker_check *marker_check_new_shared(struct mpool *p, struct mpool *const *all, int nall,
                                      uint64_t window_us, bool auto_setup)
{
    marker_check *mc = calloc(1, sizeof *mc);
    if (!mc)
        return NULL;
    mc->p = p;
    mc->mirror = all;
    mc->nmirror = nall;
    snprintf(mc->window, sizeof mc->window, "%llu", (unsigned long long)window_us);
    mc->auto_setup = auto_setup;
    scripts_init();
    mpool_set_marker_fn(p, on_report, mc);
    return mc;
}

void marker_check_free(marker_check *mc) { free(mc); }
