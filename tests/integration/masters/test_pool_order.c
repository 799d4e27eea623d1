/* The master pool in-process, on a real redis-server: no command overtakes
 * another on a master's connection, not even when its script cache is
 * flushed under the connection (SCRIPT FLUSH) and the first of two
 * commands comes back NOSCRIPT while the second waits behind it. A repair
 * (script_renew) sent before the release of its token must run before it:
 * the other way round, it takes the released name back for a whole ttl.
 *
 * White-box: it drives masters/ through its public header, with the
 * pool's loop thread as its only caller (loop_post). */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"
#include "masters/masters.h"

static h_cluster *C;
static mpool *P;
static atomic_int answered;

static void teardown(void)
{
    if (P) {
        mpool_stop(P);
        mpool_free(P);
        P = NULL;
    }
    h_cluster_free(C);
    C = NULL;
}

TestSuite(pool_order, .fini = teardown, .timeout = 60);

static void count_answer(void *arg, const master_reply *replies)
{
    (void)arg;
    (void)replies;
    atomic_fetch_add(&answered, 1);
}

/* One script command, sent from the pool's loop thread. */
struct send {
    const mscript *s;
    int nkeys, nargs;
    const char *args[12];
};

static void send_on_loop(void *arg)
{
    struct send *c = arg;
    size_t lens[12];
    for (int i = 0; i < c->nargs; i++)
        lens[i] = strlen(c->args[i]);
    mpool_eval(P, c->s, 1u, c->nkeys, c->nargs, c->args, lens, count_answer, NULL);
}

static void send_now(struct send *c)
{
    cr_assert_eq(loop_post(mpool_loop(P), send_on_loop, c), 0);
}

static bool answered_at_least(void *arg)
{
    return atomic_load(&answered) >= *(int *)arg;
}

static void wait_answers(int n)
{
    cr_assert(h_eventually(answered_at_least, &n, 10000), "%d of %d answers", atomic_load(&answered), n);
}

static bool pool_up(void *arg)
{
    (void)arg;
    master_status st;
    mpool_status(P, 0, &st);
    return st.up;
}

static void start_pool(void)
{
    C = h_cluster_start(1, NULL);
    scripts_init();
    conf_addr addr = {.port = C->m[0].port};
    snprintf(addr.host, sizeof addr.host, "127.0.0.1");
    /* A long reply deadline: the stopped master is slow, not late. */
    mpool_config pc = {.nmasters = 1, .masters = &addr, .timeout_ms = 10000, .max_ttl_ms = 60000};
    P = mpool_new(&pc);
    cr_assert(P && mpool_start(P) == 0);
    cr_assert(h_eventually(pool_up, NULL, 10000), "the master never came up");
}

/* A repair of token t on key k, then the release of t: the repair runs
 * first, so the key ends free. */
static struct send repair = {&script_renew, 4, 10,
                             {"k", "k\x1f#fence", "k\x1f#owner", SCRIPT_MARKER_KEY, "t", "60000", "90000",
                              "1000000000000123", "", "0"}};
static struct send release = {&script_release, 2, 5, {"k", "k\x1f#owner", "t", "=", ""}};

Test(pool_order, a_command_answered_noscript_keeps_its_place)
{
    start_pool();
    /* Both scripts once: the connection names them by EVALSHA from now on. */
    send_now(&repair);
    wait_answers(1);
    send_now(&release);
    wait_answers(2);
    redisReply *r = h_redis(C, 0, "EXISTS k");
    cr_assert_eq(r->integer, 0, "repair, then release: free");
    freeReplyObject(r);

    /* The cache goes under the live connection; the master stops; the
     * repair is written and waits there; the release waits behind it
     * (group commit holds it while the master owes an answer). */
    freeReplyObject(h_redis(C, 0, "SCRIPT FLUSH"));
    h_master_pause(C, 0);
    send_now(&repair);
    usleep(100000);   /* a turn of the loop: the repair is written */
    send_now(&release);
    usleep(100000);
    h_master_resume(C, 0);
    wait_answers(4);
    r = h_redis(C, 0, "GET k");
    cr_assert_eq(r->type, REDIS_REPLY_NIL, "the release overtook the repair: the key holds %s",
                 r->type == REDIS_REPLY_STRING ? r->str : "?");
    freeReplyObject(r);
}

/* The same, but the release goes with its body (its first time on the
 * connection) and is written behind the stopped repair (an idle ping
 * writes what is held first): it runs even though the cache is gone, so
 * the repair cannot keep its place. It is not sent again at all (a vote
 * that failed): sent after the release, it would take the name back. */
Test(pool_order, a_command_that_cannot_keep_its_place_is_not_sent_again)
{
    start_pool();
    send_now(&repair);
    wait_answers(1);
    freeReplyObject(h_redis(C, 0, "DEL k k\x1f#fence"));
    freeReplyObject(h_redis(C, 0, "SCRIPT FLUSH"));
    h_master_pause(C, 0);
    send_now(&repair);
    usleep(100000);
    send_now(&release);
    usleep(1300000);   /* an idle ping (every second) writes the held release first */
    h_master_resume(C, 0);
    wait_answers(3);
    usleep(200000);    /* anything sent again would have run by now */
    redisReply *r = h_redis(C, 0, "GET k");
    cr_assert_eq(r->type, REDIS_REPLY_NIL, "the repair ran after the release: the key holds %s",
                 r->type == REDIS_REPLY_STRING ? r->str : "?");
    freeReplyObject(r);
    r = h_redis(C, 0, "INFO commandstats");
    cr_assert(strstr(r->str, "cmdstat_ping:calls="), "no idle ping reached the master while it was stopped");
    freeReplyObject(r);
}
