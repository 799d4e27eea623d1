/* Unit tests of single scripts on a real redis-server, continued from
 * test_scripts.c (suite scripts): a held stream's repair (script_renew)
 * and the waiters' queue of a name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "masters/masters.h"
#include "scripts_tests.h"

/* GET key in the selected database: its value, or "" when absent. */
static void get_str(const char *key, char *out, size_t cap)
{
    redisReply *r = redisCommand(R, "GET %s", key);
    cr_assert(r);
    snprintf(out, cap, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

/* A held stream's repair (script_renew): where the key is held it answers
 * as an extension; where it is free it takes it for the token, stores the
 * owner record and keeps the counter at least the holder's fence (raised
 * from below or from nothing, never lowered); another token's key, a
 * counter that does not parse and the guard leave the master alone. */
Test(scripts, a_repair_takes_free_masters_only)
{
    flush_both();
    select_db(0);
    world_change(0, "r");
    char got[128];
    struct cmd c;
    /* free, no counter: taken at exactly the fence */
    set_args(&c, &script_renew, 4, 10, "r", "r\x1f#fence", "r\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000",
             "1000000000000123", "w1", "1");
    redisReply *r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, 2, "a free master is taken");
    cr_assert_eq(r->element[1]->integer, 1000000000000123LL);
    freeReplyObject(r);
    get_str("r", got, sizeof got);
    cr_assert_str_eq(got, "t1");
    get_str("r\x1f#fence", got, sizeof got);
    cr_assert_str_eq(got, "1000000000000123");
    get_str("r\x1f#owner", got, sizeof got);
    cr_assert_str_eq(got, "t1\nw1");
    /* held now: an ordinary extension */
    r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, 1, "held: extended");
    cr_assert_eq(r->element[1]->integer, 1000000000000123LL);
    freeReplyObject(r);
    /* another token's key: refused, unchanged */
    set_args(&c, &script_renew, 4, 10, "r", "r\x1f#fence", "r\x1f#owner", SCRIPT_MARKER_KEY, "t2", "40000", "60000",
             "1000000000000999", "", "1");
    r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, -1);
    freeReplyObject(r);
    get_str("r", got, sizeof got);
    cr_assert_str_eq(got, "t1");
    /* free with a higher counter (a loser's attempt): taken, counter kept */
    freeReplyObject(redisCommand(R, "SET h\x1f#fence 1000000000000500"));
    set_args(&c, &script_renew, 4, 10, "h", "h\x1f#fence", "h\x1f#owner", SCRIPT_MARKER_KEY, "t3", "40000", "60000",
             "1000000000000123", "", "1");
    r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, 2);
    cr_assert_eq(r->element[1]->integer, 1000000000000500LL, "a counter is never lowered");
    freeReplyObject(r);
    get_str("h\x1f#owner", got, sizeof got);
    cr_assert_str_eq(got, "", "no owner record without an owner");
    /* free with a lower counter: raised to the fence */
    freeReplyObject(redisCommand(R, "SET l\x1f#fence 1000000000000001"));
    set_args(&c, &script_renew, 4, 10, "l", "l\x1f#fence", "l\x1f#owner", SCRIPT_MARKER_KEY, "t4", "40000", "60000",
             "1000000000000123", "", "1");
    r = run_alone(&c);
    cr_assert_eq(r->element[1]->integer, 1000000000000123LL, "a lower counter is raised");
    freeReplyObject(r);
    /* a counter that does not parse: the master is left alone */
    freeReplyObject(redisCommand(R, "SET b\x1f#fence nope"));
    set_args(&c, &script_renew, 4, 10, "b", "b\x1f#fence", "b\x1f#owner", SCRIPT_MARKER_KEY, "t5", "40000", "60000",
             "1000000000000123", "", "1");
    r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, 0);
    freeReplyObject(r);
    get_str("b", got, sizeof got);
    cr_assert_str_eq(got, "", "not taken");
    /* in quarantine: the guard answers, nothing is taken */
    world_change(2, "q");
    set_args(&c, &script_renew, 4, 10, "q", "q\x1f#fence", "q\x1f#owner", SCRIPT_MARKER_KEY, "t6", "40000", "60000",
             "1000000000000123", "", "1");
    r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, SCRIPT_QUARANTINED);
    freeReplyObject(r);
    get_str("q", got, sizeof got);
    cr_assert_str_eq(got, "", "not taken in quarantine");
    /* the extension alone never takes a free master */
    set_args(&c, &script_extend, 4, 8, "e", "e\x1f#fence", "e\x1f#owner", SCRIPT_MARKER_KEY, "t7", "40000", "60000", "0");
    r = run_alone(&c);
    cr_assert_eq(r->element[0]->integer, 0);
    freeReplyObject(r);
    get_str("e", got, sizeof got);
    cr_assert_str_eq(got, "");
}

/* An acquire of "q" with ticket tk (arrival since) or none (""). */
static long long queue_try(const char *value, const char *tk, const char *since, const char *ticket_ttl)
{
    struct cmd c;
    set_args(&c, &script_acquire, 6, 16, "q", "q\x1f#fence", "q\x1f#owner", "q\x1f#queue", "q\x1f#qdl", SCRIPT_MARKER_KEY, value,
             "30000", "60000", "", "0", "900000000000000000", tk, since, ticket_ttl, "1");
    redisReply *r = run_alone(&c);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "");
    long long v = r->element[0]->integer;
    freeReplyObject(r);
    return v;
}

static long long zcard(const char *key)
{
    redisReply *r = redisCommand(R, "ZCARD %s", key);
    long long n = r ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* Fair order: a waiter takes a free name without queueing; behind a holder
 * its ticket queues, ordered by arrival whatever the order of the tries;
 * only the oldest live ticket may take the name once free (a try without a
 * ticket takes nothing while tickets wait); an expired ticket is dropped;
 * the dequeue script takes a ticket out. */
Test(scripts, a_name_is_taken_in_the_order_waiters_arrived)
{
    flush_both();
    select_db(0);
    world_change(0, "q");
    cr_assert_eq(queue_try("v0", "t0", "100", "10000"), 1, "a free name, nobody waiting: taken at once");
    cr_assert_eq(zcard("q\x1f#queue"), 0, "and nothing queued");
    /* held by v0: two waiters, the later one tries first */
    cr_assert_eq(queue_try("vB", "tB", "300", "10000"), 0);
    cr_assert_eq(queue_try("vA", "tA", "200", "10000"), 0);
    cr_assert_eq(zcard("q\x1f#queue"), 2);
    freeReplyObject(redisCommand(R, "DEL q"));   /* the holder releases */
    cr_assert_eq(queue_try("vB", "tB", "300", "10000"), 0, "not the oldest: refused on a free name");
    cr_assert_eq(queue_try("vX", "", "0", "0"), 0, "no ticket: refused while tickets wait");
    cr_assert_eq(queue_try("vA", "tA", "200", "10000"), 1, "the oldest takes it");
    cr_assert_eq(zcard("q\x1f#queue"), 1, "its ticket left with the grant");
    freeReplyObject(redisCommand(R, "DEL q"));
    /* an older ticket that expired is dropped */
    freeReplyObject(redisCommand(R, "SET q held"));
    cr_assert_eq(queue_try("vC", "tC", "150", "1"), 0, "older than B: queued (for 1 ms)");
    usleep(20000);
    freeReplyObject(redisCommand(R, "DEL q"));
    cr_assert_eq(queue_try("vB", "tB", "300", "10000"), 1, "C's ticket expired: B is the oldest live one");
    freeReplyObject(redisCommand(R, "DEL q"));
    /* the dequeue script */
    freeReplyObject(redisCommand(R, "SET q held"));
    cr_assert_eq(queue_try("vD", "tD", "400", "10000"), 0);
    cr_assert_eq(zcard("q\x1f#queue"), 1);
    struct cmd d;
    set_args(&d, &script_dequeue, 3, 5, "q\x1f#queue", "q\x1f#qdl", "q", "tD", "");
    freeReplyObject(run_alone(&d));
    cr_assert_eq(zcard("q\x1f#queue"), 0, "dequeued");
    cr_assert_eq(zcard("q\x1f#qdl"), 0);
    freeReplyObject(redisCommand(R, "DEL q"));
    cr_assert_eq(queue_try("vE", "", "0", "0"), 1, "nobody waiting: a try without a ticket takes it");
}

/* Every script that writes what takes memory is refused whole by a master
 * over maxmemory, and writes nothing there, whatever its first write would
 * be: an acquire whose name's queue holds an expired ticket begins with a
 * ZREM, which Redis lets past maxmemory (and then, without the check
 * before the script, the SET NX after it too). */
Test(scripts, scripts_that_take_memory_are_refused_whole_over_maxmemory)
{
    flush_both();
    select_db(0);
    world_change(0, "m");
    freeReplyObject(redisCommand(R, "ZADD m\x1f#queue 1 an-expired-ticket"));
    freeReplyObject(redisCommand(R, "ZADD m\x1f#qdl 1 an-expired-ticket"));
    freeReplyObject(redisCommand(R, "SET s:m\x1f#limit 2 PX 60000"));
    struct cmd c[5];
    set_args(&c[0], &script_acquire, 6, 16, "m", "m\x1f#fence", "m\x1f#owner", "m\x1f#queue", "m\x1f#qdl",
             SCRIPT_MARKER_KEY, "v1", "40000", "60000", "", "0", "1000000", "tk", "100", "10000", "1");
    set_args(&c[1], &script_settle, 3, 7, "m", "m\x1f#fence", SCRIPT_MARKER_KEY, "v1", "7", "60000", "1");
    set_args(&c[2], &script_renew, 4, 10, "m", "m\x1f#fence", "m\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000",
             "60000", "1000000000000123", "w1", "1");
    set_args(&c[3], &script_proclaim, 3, 6, "m", "m\x1f#owner", SCRIPT_MARKER_KEY, "v1", "10.0.0.9:5432", "1");
    set_args(&c[4], &script_sem_limit, 2, 5, "s:m2\x1f#limit", SCRIPT_MARKER_KEY, "3", "60000", "1");
    redisReply *before = redisCommand(R, "DBSIZE");
    freeReplyObject(redisCommand(R, "CONFIG SET maxmemory 1"));
    for (int i = 0; i < 5; i++) {
        redisReply *r = run_alone(&c[i]);
        cr_assert(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "OOM", 3), "%s over maxmemory: not refused OOM",
                  c[i].s->name);
        freeReplyObject(r);
    }
    freeReplyObject(redisCommand(R, "CONFIG SET maxmemory 0"));
    redisReply *after = redisCommand(R, "DBSIZE");
    cr_assert_eq(after->integer, before->integer, "a script over maxmemory changed the keys");
    freeReplyObject(before);
    freeReplyObject(after);
    cr_assert_eq(zcard("m\x1f#queue"), 1, "the expired ticket is still there: nothing ran");
    /* Under the limit again, the acquire runs: it drops the expired ticket
     * and takes the name. */
    redisReply *r = run_alone(&c[0]);
    cr_assert_eq(r->element[0]->integer, 1, "taken once the master is under maxmemory");
    freeReplyObject(r);
}
