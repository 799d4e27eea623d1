/* The fault-injection suite: each test is one scenario of the safety issue,
 * run against five real redis-server masters and the real redlockd, with 16
 * clients (more in the long form) contending for a few names over HTTP.
 *
 * Short form (default suite "faults"): a few seconds per scenario.
 * Long form (suite "faults-long"): FAULTS_SECONDS and FAULTS_CLIENTS set by
 * meson; a row per scenario goes to faults-table.md in the build directory.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "workload.h"

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

static int seconds(void) { return env_int("FAULTS_SECONDS", 4); }
static int clients(void) { return env_int("FAULTS_CLIENTS", 16); }

static void header(void) { fputs(FL_TABLE_HEADER, stderr); }

TestSuite(faults, .init = header, .timeout = 600);

/* ---- fault bodies ---- */

static void no_fault(fl_run *r)
{
    while (fl_running(r))
        fl_sleep_ms(r, 50);
}

static void pause_cycles(fl_run *r, int k)
{
    uint64_t ready;
    while (fl_running(r)) {
        int first = rand() % 5;
        for (int j = 0; j < k; j++)
            h_master_pause(r->c, (first + 2 * j) % 5);
        fl_sleep_ms(r, 300);
        for (int j = 0; j < k; j++)
            h_master_resume(r->c, (first + 2 * j) % 5);
        /* The next pause starts only when all five vote again, so a majority
         * stays up throughout. */
        fl_wait_voting(r, 5, 5000, &ready);
        fl_sleep_ms(r, 200);
    }
}

static void pause_one(fl_run *r) { pause_cycles(r, 1); }
static void pause_two(fl_run *r) { pause_cycles(r, 2); }

static void pause_three(fl_run *r)
{
    uint64_t ready;
    while (fl_running(r)) {
        for (int i = 0; i < 3; i++)
            h_master_pause(r->c, i);
        uint64_t begin = h_now_us();
        usleep(1000000);
        uint64_t end = h_now_us();
        for (int i = 0; i < 3; i++)
            h_master_resume(r->c, i);
        fl_mark_down(r, begin, end);
        fl_mark_recovered(r, end);
        fl_wait_voting(r, 5, 5000, &ready);
        fl_sleep_ms(r, 500);
    }
}

/* SIGKILL three masters and start them again at once, with whatever
 * persistence the cluster has. */
static void kill_three(fl_run *r)
{
    uint64_t ready;
    do {
        fl_sleep_ms(r, 700);
        for (int i = 0; i < 3; i++)
            h_master_kill(r->c, i);
        uint64_t begin = h_now_us();
        for (int i = 0; i < 3; i++)
            h_master_restart(r->c, i);
        /* Voting masters only grow from here, so every moment up to the
         * last poll that saw fewer than three was down. */
        uint64_t last_down = fl_wait_voting(r, 3, 15000, &ready);
        if (last_down)
            fl_mark_down(r, begin, last_down);
        if (ready)
            fl_mark_recovered(r, ready);
        fl_wait_voting(r, 5, 15000, &ready);
    } while (fl_running(r));
}

static void pexpire_while_paused(fl_run *r)
{
    uint64_t ready;
    while (fl_running(r)) {
        h_master_pause(r->c, 4);
        usleep(50000);
        for (int k = 0; k < r->sc->names; k++) {
            redisReply *x = h_redis(r->c, 0, "PEXPIRE lock:fl-%d 1", k);
            if (x)
                freeReplyObject(x);
        }
        fl_sleep_ms(r, 300);
        h_master_resume(r->c, 4);
        fl_wait_voting(r, 5, 5000, &ready);
        fl_sleep_ms(r, 150);
    }
}

static void script_flush(fl_run *r)
{
    while (fl_running(r)) {
        for (int i = 0; i < 5; i++) {
            redisReply *x = h_redis(r->c, i, "SCRIPT FLUSH");
            if (x)
                freeReplyObject(x);
        }
        fl_sleep_ms(r, 100);
    }
}

/* redlockd churn during master restarts: the instances (the first and
 * the peers) are SIGKILLed and started afresh in turn, and between those,
 * three masters are SIGKILLed and restarted empty. A new instance knows
 * nothing of the masters' past; only the markers on the masters keep the
 * restarted ones out of the vote. */
static void churn(fl_run *r)
{
    uint64_t ready;
    int next = 0;
    do {
        fl_sleep_ms(r, 400);
        fl_instance_restart(r, next++ % (r->sc->peers + 1));
        for (int i = 0; i < 3; i++)
            h_master_kill(r->c, (next + i) % 5);
        uint64_t begin = h_now_us();
        for (int i = 0; i < 3; i++)
            h_master_restart(r->c, (next + i) % 5);
        fl_instance_restart(r, next++ % (r->sc->peers + 1));
        uint64_t last_down = fl_wait_voting(r, 3, 15000, &ready);
        if (last_down)
            fl_mark_down(r, begin, last_down);
        /* No recovery is marked: the next instance kill and master restart
         * follow within a TTL, so this scenario judges safety (and fast
         * 503s while a majority sits out), not how soon grants resume. */
        fl_wait_voting(r, 5, 15000, &ready);
    } while (fl_running(r));
}

static void kill_redlockd(fl_run *r)
{
    do {
        fl_sleep_ms(r, 1000);
        h_daemon_kill(r->c);
        fl_daemon_start(r);   /* same port, same flags; waits until ready */
        fl_mark_recovered(r, h_now_us());
    } while (fl_running(r));
}

/* ---- scenarios ---- */

#define LONG_HOLD 1200   /* ms of a 2000 ms lock: holders still hold when masters restart */

static const fl_scenario baseline = {"no faults", 16, 2, 2000, 5, 0, {NULL}, NULL, no_fault, true, false, 0, 0};
static const fl_scenario pause1 = {"SIGSTOP one master, cycles", 16, 2, 2000, 5, 0, {NULL}, NULL,
                                   pause_one, true, false, 0, 0};
static const fl_scenario pause2 = {"SIGSTOP two masters, cycles", 16, 2, 2000, 5, 0, {NULL}, NULL,
                                   pause_two, true, false, 0, 0};
static const fl_scenario pause3 = {"SIGSTOP three masters", 16, 2, 2000, 5, 0, {NULL}, NULL,
                                   pause_three, false, false, 0, 0};
static const fl_scenario restart_q = {"SIGKILL+restart empty, quar", 16, 2, 2000, LONG_HOLD, 0,
                                      {NULL}, NULL, kill_three, false, false, 0, 0};
static const fl_scenario restart_noq = {"NEGATIVE: same, quarantine off", 16, 2, 2000, LONG_HOLD, 0,
                                        {"--quarantine", "off", NULL}, NULL, kill_three, false, true, 0, 0};
static const fl_scenario restart_aof = {"SIGKILL+restart AOF always", 16, 2, 2000, LONG_HOLD, 0,
                                        {NULL},
                                        "--appendonly yes --appendfsync always", kill_three, false, false, 0, 0};
static const fl_scenario late_client = {"client stalls past validity", 16, 1, 1000, 5, 300, {NULL}, NULL,
                                        no_fault, false, false, 0, 0};
static const fl_scenario pexpire = {"PEXPIRE early + one paused", 16, 2, 2000, 5, 0, {NULL}, NULL,
                                    pexpire_while_paused, true, false, 0, 0};
static const fl_scenario flush = {"SCRIPT FLUSH during load", 16, 2, 2000, 5, 0, {NULL}, NULL,
                                  script_flush, true, false, 0, 0};
static const fl_scenario churn_q = {"redlockd churn, masters empty", 18, 2, 2000, LONG_HOLD, 0, {NULL},
                                    NULL, churn, false, false, 2, 0};
static const fl_scenario churn_noq = {"NEGATIVE: churn, quar off", 18, 2, 2000, LONG_HOLD, 0,
                                      {"--quarantine", "off", NULL}, NULL, churn, false, true, 2, 0};
static const fl_scenario daemon_kill = {"redlockd SIGKILL+restart", 16, 2, 2000, 5, 0, {NULL}, NULL,
                                        kill_redlockd, false, false, 0, 0};
/* Held streams and ordinary acquires on the same names: half the clients
 * hold for up to 2.5 ttls, trusting the stream's events, while two masters
 * are paused in cycles (renewals then need the other three). */
static const fl_scenario streams = {"held streams+acquires, STOP 2", 16, 2, 1000, 5, 0, {NULL},
                                    NULL, pause_two, false, false, 0, 2500};

Test(faults, no_faults) { fl_run_scenario(&baseline, seconds(), clients()); }
Test(faults, sigstop_one_master_cycles) { fl_run_scenario(&pause1, seconds(), clients()); }
Test(faults, sigstop_two_masters_cycles) { fl_run_scenario(&pause2, seconds(), clients()); }
Test(faults, sigstop_three_masters_fast_503) { fl_run_scenario(&pause3, seconds(), clients()); }
Test(faults, sigkill_restart_empty_safe_by_quarantine) { fl_run_scenario(&restart_q, seconds(), clients()); }
Test(faults, negative_control_quarantine_off_is_caught) { fl_run_scenario(&restart_noq, seconds(), clients()); }
Test(faults, sigkill_restart_with_appendonly) { fl_run_scenario(&restart_aof, seconds(), clients()); }
Test(faults, client_paused_past_validity_rejected_by_fence) { fl_run_scenario(&late_client, seconds(), clients()); }
Test(faults, pexpire_early_while_one_paused) { fl_run_scenario(&pexpire, seconds(), clients()); }
Test(faults, script_flush_during_load) { fl_run_scenario(&flush, seconds(), clients()); }
Test(faults, redlockd_churn_during_empty_master_restarts) { fl_run_scenario(&churn_q, seconds(), clients() + 2); }
Test(faults, negative_control_churn_without_markers_is_caught) { fl_run_scenario(&churn_noq, seconds(), clients() + 2); }
Test(faults, redlockd_sigkill_and_restart) { fl_run_scenario(&daemon_kill, seconds(), clients()); }
Test(faults, held_streams_and_acquires_contend) { fl_run_scenario(&streams, seconds(), clients()); }
