/* Unit tests of the group script (master.h, group commit) on a real
 * redis-server: a group call of any mix of commands answers, and leaves,
 * exactly what the same commands sent one by one in the same order do.
 *
 * The differential test runs a random sequence twice on one server: one by
 * one (EVAL of each script) in database 0, and cut into random groups (EVAL
 * of the group script) in database 1, with the same changes of the world
 * between groups in both (the marker set, cleared or pushed into the
 * future, a fence counter that does not parse, a key of the wrong type).
 * Answers must match command by command, and both databases must hold the
 * same keys, values and expiries at the end. Only PTTLs may differ, by the
 * few milliseconds between the two runs; fences are taken from seeds the
 * test proposes, so they match exactly.
 *
 * The scripts one by one (a held stream's repair, the waiters' queue) are
 * tested in test_scripts_one.c; what both files share is in scripts_tests.h.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "masters/masters.h"
#include "scripts_tests.h"

h_cluster *C;
redisContext *R;

static void setup(void)
{
    scripts_init();
    C = h_cluster_start(1, NULL);
    R = redisConnect("127.0.0.1", C->m[0].port);
    cr_assert(R && !R->err, "connect to the master");
}

static void teardown(void)
{
    if (R)
        redisFree(R);
    h_cluster_free(C);
}

TestSuite(scripts, .init = setup, .fini = teardown, .timeout = 120);

static redisReply *run(const char **argv, const size_t *lens, int argc)
{
    redisReply *r = redisCommandArgv(R, argc, argv, lens);
    cr_assert(r, "redis: %s", R->errstr);
    return r;
}

void select_db(int db)
{
    redisReply *r = redisCommand(R, "SELECT %d", db);
    cr_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* EVAL of c's own script. */
redisReply *run_alone(const struct cmd *c)
{
    const char *argv[20];
    size_t lens[20];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", c->nkeys);
    argv[0] = "EVAL";
    argv[1] = c->s->body;
    argv[2] = nk;
    for (int i = 0; i < c->nargs; i++)
        argv[3 + i] = c->args[i];
    for (int i = 0; i < 3 + c->nargs; i++)
        lens[i] = strlen(argv[i]);
    return run(argv, lens, 3 + c->nargs);
}

/* EVAL of the group script for cmds[0..n), laid out as master.h says. */
static redisReply *run_group(const struct cmd *cmds, int n)
{
    static const char *argv[4096];
    static size_t lens[4096];
    static char nums[1024][16];
    int k = 0, u = 0, nkeys = 0;
    for (int i = 0; i < n; i++)
        nkeys += cmds[i].nkeys;
#define NUM(v) (snprintf(nums[u], sizeof nums[u], "%d", (int)(v)), argv[k++] = nums[u++])
    argv[k++] = "EVAL";
    argv[k++] = script_group.body;
    NUM(nkeys);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < cmds[i].nkeys; j++)
            argv[k++] = cmds[i].args[j];
    NUM(n);
    for (int i = 0; i < n; i++) {
        NUM(cmds[i].s->group_fn);
        NUM(cmds[i].nkeys);
        NUM(cmds[i].nargs - cmds[i].nkeys);
    }
    for (int i = 0; i < n; i++)
        for (int j = cmds[i].nkeys; j < cmds[i].nargs; j++)
            argv[k++] = cmds[i].args[j];
#undef NUM
    for (int i = 0; i < k; i++)
        lens[i] = strlen(argv[i]);
    return run(argv, lens, k);
}

/* Whether two answers are the same, but for PTTLs and quarantine times left
 * (integers from 1000 to 10^7 ms) a few milliseconds apart; why not in why.
 * Fences (from 10^15) must be equal. */
static bool same_reply(const redisReply *a, const redisReply *b, char *why, size_t len)
{
    if (a->type != b->type) {
        snprintf(why, len, "type %d vs %d (%s / %s)", a->type, b->type,
                 a->type == REDIS_REPLY_ERROR ? a->str : "", b->type == REDIS_REPLY_ERROR ? b->str : "");
        return false;
    }
    switch (a->type) {
    case REDIS_REPLY_INTEGER: {
        long long d = a->integer - b->integer;
        bool pttl = a->integer >= 1000 && a->integer < 10000000 && b->integer >= 1000 && b->integer < 10000000;
        if (d == 0 || (pttl && d > -200 && d < 200))
            return true;
        snprintf(why, len, "integer %lld vs %lld", a->integer, b->integer);
        return false;
    }
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        if (a->len == b->len && !memcmp(a->str, b->str, a->len))
            return true;
        snprintf(why, len, "'%s' vs '%s'", a->str, b->str);
        return false;
    case REDIS_REPLY_ERROR: {
        /* A script's own error is the same text; a redis.call refused
         * names the script and line it came from, so only its code must
         * match (WRONGTYPE ...). */
        if (!strncmp(a->str, "ERR redlockd:", 13) || !strncmp(b->str, "ERR redlockd:", 13)) {
            if (!strcmp(a->str, b->str))
                return true;
        } else {
            const char *codes[] = {"WRONGTYPE", "OOM", "NOPERM"};
            for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
                if (strstr(a->str, codes[i]) && strstr(b->str, codes[i]))
                    return true;
        }
        snprintf(why, len, "error '%s' vs '%s'", a->str, b->str);
        return false;
    }
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements) {
            snprintf(why, len, "%zu elements vs %zu", a->elements, b->elements);
            return false;
        }
        for (size_t i = 0; i < a->elements; i++)
            if (!same_reply(a->element[i], b->element[i], why, len))
                return false;
        return true;
    default:
        return true;
    }
}

void set_args(struct cmd *c, const mscript *s, int nkeys, int nargs, ...)
{
    va_list ap;
    va_start(ap, nargs);
    c->s = s;
    c->nkeys = nkeys;
    c->nargs = nargs;
    for (int i = 0; i < nargs; i++)
        snprintf(c->args[i], sizeof c->args[i], "%s", va_arg(ap, const char *));
    va_end(ap);
}

static long long next_seed = 1000000000000000LL;

/* A random command on a few names, values and owners: every script of the
 * group, guarded or not, matching or not. */
static void random_cmd(struct cmd *c)
{
    static const char *names[] = {"n:a", "n:b", "n:c"};
    static const char *values[] = {"tok1", "tok2", "tok1 s1", "tok1 s2", "tok3"};
    static const char *owners[] = {"", "", "web-1", "cand 1700000000000 10.0.0.7:5432"};
    const char *n = names[rand() % 3];
    char key[64], fence[64], owner[64], queue[64], qdl[64], ttl[16], px[16], seed[32], f[32];
    snprintf(key, sizeof key, "%s", n);
    snprintf(fence, sizeof fence, "%s\x1f#fence", n);
    snprintf(owner, sizeof owner, "%s\x1f#owner", n);
    snprintf(ttl, sizeof ttl, "%d", 20000 + rand() % 5 * 1000);
    snprintf(px, sizeof px, "%d", 40000 + rand() % 5 * 1000);
    const char *v = values[rand() % 5], *guard = rand() % 4 ? "1" : "0";
    switch (rand() % 9) {
    case 0:
    case 1:   /* acquire: its seed is taken where there is no counter or one below it (always
                 within the bound: a fence from the master's own clock would differ by the
                 time between the two runs) */
        snprintf(seed, sizeof seed, "%lld", next_seed += rand() % 2 * 1000);
        snprintf(queue, sizeof queue, "%s\x1f#queue", n);
        snprintf(qdl, sizeof qdl, "%s\x1f#qdl", n);
        set_args(c, &script_acquire, 6, 16, key, fence, owner, queue, qdl, SCRIPT_MARKER_KEY, v, ttl, px,
                 owners[rand() % 4], seed, "900000000000000000", "", "0", "0", guard);
        break;
    case 2:   /* settle to some fence */
        snprintf(f, sizeof f, "%lld", next_seed - rand() % 3000);
        set_args(c, &script_settle, 3, 7, key, fence, SCRIPT_MARKER_KEY, v, f, px, guard);
        break;
    case 3:
        set_args(c, &script_extend, 4, 8, key, fence, owner, SCRIPT_MARKER_KEY, v, ttl, px, guard);
        break;
    case 4:
        set_args(c, &script_inspect, 4, 5, key, fence, owner, SCRIPT_MARKER_KEY, guard);
        break;
    case 5:
        set_args(c, &script_release, 2, 5, key, owner, v, rand() % 2 ? "=" : "~",
                 rand() % 2 ? "redlockd:released:x" : "");
        break;
    case 6:
        set_args(c, &script_proclaim, 3, 6, key, owner, SCRIPT_MARKER_KEY, v, "10.0.0.9:5432", guard);
        break;
    case 7: {
        static const char *limits[] = {"0", "-1", "2", "3"};
        set_args(c, &script_sem_limit, 2, 5, "s:x\x1f#limit", SCRIPT_MARKER_KEY, limits[rand() % 4], px, guard);
        break;
    }
    default:
        set_args(c, &script_publish, 1, 2, key, "redlockd:released:y");
        break;
    }
}

static long long quarantine_until;   /* world_change 2's marker "until", us */

/* The same change of the world in the current database. */
void world_change(int what, const char *name)
{
    redisReply *r = NULL;
    switch (what) {
    case 0:
        r = redisCommand(R, "HSET %s state ready until 0", SCRIPT_MARKER_KEY);
        break;
    case 1:
        r = redisCommand(R, "DEL %s", SCRIPT_MARKER_KEY);
        break;
    case 2:
        /* in quarantine until an hour after the first time this is asked,
         * by the master's clock: one value for both databases (computed per
         * database, a second boundary between the two made them 1 s apart),
         * so {-101, ms_left} is a few ms apart in the two runs, as a PTTL is */
        if (!quarantine_until) {
            redisReply *t = redisCommand(R, "TIME");
            cr_assert(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
            quarantine_until = (atoll(t->element[0]->str) + 3600) * 1000000LL + atoll(t->element[1]->str);
            freeReplyObject(t);
        }
        r = redisCommand(R, "HSET %s state ready until %lld", SCRIPT_MARKER_KEY, quarantine_until);
        break;
    case 3:
        r = redisCommand(R, "SET %s\x1f#fence not-a-number PX 60000", name);
        break;
    case 4:
        r = redisCommand(R, "DEL %s %s\x1f#fence", name, name);
        r = (freeReplyObject(r), redisCommand(R, "HSET %s x 1", name));
        break;
    default:
        r = redisCommand(R, "DEL %s", name);
        break;
    }
    cr_assert(r && r->type != REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

/* Every key of the current database with its type, value and PTTL. */
static redisReply *dump_db(void)
{
    static const char dump[] =
        "local out = {}\n"
        "local keys = redis.call('KEYS', '*')\n"
        "table.sort(keys)\n"
        "for _, k in ipairs(keys) do\n"
        "  local t = redis.call('TYPE', k)['ok']\n"
        "  local v = t == 'string' and redis.call('GET', k) or table.concat(redis.call('HGETALL', k), ',')\n"
        "  table.insert(out, k) table.insert(out, t) table.insert(out, v)\n"
        "  table.insert(out, redis.call('PTTL', k))\n"
        "end\n"
        "return out\n";
    redisReply *r = redisCommand(R, "EVAL %s 0", dump);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    return r;
}

/* The answers of cmds[0..n) in the current database as the master layer
 * sends them: each run of group members as one group call (of any size
 * here, so that small groups are tested too), every other script alone.
 * out[i] is command i's answer; the calls made are kept in calls[] (the
 * caller frees them). Returns how many group calls there were. */
static int run_as_layer(const struct cmd *cmds, int n, const redisReply **out, redisReply **calls, int *ncalls)
{
    int groups = 0;
    *ncalls = 0;
    for (int i = 0; i < n;) {
        if (cmds[i].s->group != &script_group) {
            redisReply *r = run_alone(&cmds[i]);
            calls[(*ncalls)++] = r;
            out[i++] = r;
            continue;
        }
        int k = i;
        while (k < n && cmds[k].s->group == &script_group)
            k++;
        redisReply *g = run_group(&cmds[i], k - i);
        cr_assert_eq(g->type, REDIS_REPLY_ARRAY, "group call: %s", g->type == REDIS_REPLY_ERROR ? g->str : "?");
        cr_assert_eq(g->elements, (size_t)(k - i));
        calls[(*ncalls)++] = g;
        for (int j = i; j < k; j++)
            out[j] = g->element[j - i];
        groups++;
        i = k;
    }
    return groups;
}

/* Runs cmds[0..n) one by one in db 0 and as the master layer sends them
 * (group members grouped) in db 1, after the same world change in both;
 * asserts the answers match (mismatch NULL), or reports the first
 * difference into mismatch when given (the negative control: a group of
 * the commands in another order). Returns the group calls made. */
static int compare_chunk(const struct cmd *alone, const struct cmd *grouped, int n, int change,
                         const char *name, char *mismatch, size_t len)
{
    select_db(0);
    if (change >= 0)
        world_change(change, name);
    redisReply *ra[MSCRIPT_GROUP_MAX];
    for (int i = 0; i < n; i++)
        ra[i] = run_alone(&alone[i]);
    select_db(1);
    if (change >= 0)
        world_change(change, name);
    const redisReply *rg[MSCRIPT_GROUP_MAX];
    redisReply *calls[MSCRIPT_GROUP_MAX];
    int ncalls;
    int groups = run_as_layer(grouped, n, rg, calls, &ncalls);
    bool same = true;
    char why[400];
    for (int i = 0; i < n && same; i++) {
        if (!same_reply(ra[i], rg[i], why, sizeof why)) {
            same = false;
            if (!mismatch)
                cr_assert_fail("command %d of %d (%s %s): alone vs grouped: %s", i, n, alone[i].s->name,
                        alone[i].args[0], why);
            snprintf(mismatch, len, "command %d (%s): %.300s", i, alone[i].s->name, why);
        }
    }
    for (int i = 0; i < n; i++)
        freeReplyObject(ra[i]);
    for (int i = 0; i < ncalls; i++)
        freeReplyObject(calls[i]);
    return same ? groups : -1;
}

void flush_both(void)
{
    redisReply *r = redisCommand(R, "FLUSHALL");
    freeReplyObject(r);
}

Test(scripts, a_group_answers_what_the_commands_answer_one_by_one)
{
    unsigned seed = (unsigned)h_now_us();
    fprintf(stderr, "scripts: random seed %u\n", seed);
    srand(seed);
    flush_both();
    static struct cmd cmds[MSCRIPT_GROUP_MAX];
    int total = 0, groups = 0, errors_seen = 0;
    while (total < 3000) {
        int n = 1 + rand() % 12;
        if (rand() % 20 == 0)
            n = MSCRIPT_GROUP_MAX;
        for (int i = 0; i < n; i++)
            random_cmd(&cmds[i]);
        int change = rand() % 3 == 0 ? rand() % 6 : -1;
        char name[8];
        snprintf(name, sizeof name, "n:%c", "abc"[rand() % 3]);
        groups += compare_chunk(cmds, cmds, n, change, name, NULL, 0);
        errors_seen += change == 3 || change == 4;
        total += n;
    }
    /* Both databases hold the same, with expiries a few ms apart. */
    select_db(0);
    redisReply *a = dump_db();
    select_db(1);
    redisReply *b = dump_db();
    char why[400];
    cr_assert(same_reply(a, b, why, sizeof why), "the databases differ: %s", why);
    cr_assert_gt(a->elements, 0);
    cr_assert_gt(groups, 100, "the sequence made group calls");
    fprintf(stderr, "scripts: %d commands with %d group calls, %d worlds with a bad counter or a wrong type, "
                    "%zu keys alike\n", total, groups, errors_seen, a->elements / 4);
    freeReplyObject(a);
    freeReplyObject(b);
}

/* The lock d, taken alone (acquire is no group member) with fence seed. */
static void take(const char *name, const char *value, const char *guard)
{
    struct cmd a;
    char fence[64], owner[64];
    snprintf(fence, sizeof fence, "%s\x1f#fence", name);
    snprintf(owner, sizeof owner, "%s\x1f#owner", name);
    char queue[64], qdl[64];
    snprintf(queue, sizeof queue, "%s\x1f#queue", name);
    snprintf(qdl, sizeof qdl, "%s\x1f#qdl", name);
    set_args(&a, &script_acquire, 6, 16, name, fence, owner, queue, qdl, SCRIPT_MARKER_KEY, value, "30000", "60000",
             "", "1000000000000123", "900000000000000000", "", "0", "0", guard);
    redisReply *r = run_alone(&a);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->element[0]->integer, 1, "%s taken", name);
    freeReplyObject(r);
}

/* Duplicates of one name in one group, in order: the inspection sees the
 * grant, the holder's extension extends it, another token's is refused,
 * the release deletes it and the last inspection finds nothing. */
Test(scripts, duplicates_of_one_name_in_one_group)
{
    flush_both();
    select_db(1);
    world_change(0, "d");
    take("d", "t1", "1");
    struct cmd c[5];
    set_args(&c[0], &script_inspect, 4, 5, "d", "d\x1f#fence", "d\x1f#owner", SCRIPT_MARKER_KEY, "1");
    set_args(&c[1], &script_extend, 4, 8, "d", "d\x1f#fence", "d\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000", "1");
    set_args(&c[2], &script_extend, 4, 8, "d", "d\x1f#fence", "d\x1f#owner", SCRIPT_MARKER_KEY, "t2", "40000", "60000", "1");
    set_args(&c[3], &script_release, 2, 5, "d", "d\x1f#owner", "t1", "=", "");
    set_args(&c[4], &script_inspect, 4, 5, "d", "d\x1f#fence", "d\x1f#owner", SCRIPT_MARKER_KEY, "1");
    redisReply *r = run_group(c, 5);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 5);
    cr_assert_gt(r->element[0]->element[0]->integer, 29000, "pttl of the grant");
    cr_assert_eq(r->element[0]->element[1]->integer, 1000000000000123LL);
    cr_assert_eq(r->element[1]->element[0]->integer, 1);
    cr_assert_eq(r->element[1]->element[1]->integer, 1000000000000123LL);
    cr_assert_str_eq(r->element[1]->element[2]->str, "t1");
    cr_assert_eq(r->element[2]->element[0]->integer, -1, "another token's extension is refused");
    cr_assert_str_eq(r->element[3]->element[1]->str, "t1");
    cr_assert_eq(r->element[4]->element[0]->integer, -2, "gone after the release");
    freeReplyObject(r);
}

/* A group split by the guard: with the master in quarantine, the guarded
 * commands answer {-101, ms_left} and the unguarded ones (--quarantine
 * off, a release) run, each as it would alone; a command that raises an
 * error (WRONGTYPE) fails alone. */
Test(scripts, a_group_split_by_the_guard)
{
    flush_both();
    select_db(1);
    world_change(0, "g");
    take("g", "t1", "1");
    world_change(2, "g");   /* quarantine: until an hour from now */
    struct cmd c[4];
    set_args(&c[0], &script_extend, 4, 8, "g", "g\x1f#fence", "g\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000", "1");
    set_args(&c[1], &script_extend, 4, 8, "g", "g\x1f#fence", "g\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000", "0");
    set_args(&c[2], &script_inspect, 4, 5, "g", "g\x1f#fence", "g\x1f#owner", SCRIPT_MARKER_KEY, "1");
    set_args(&c[3], &script_release, 2, 5, "g", "g\x1f#owner", "t1", "=", "");
    redisReply *r = run_group(c, 4);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->element[0]->element[0]->integer, SCRIPT_QUARANTINED);
    cr_assert_gt(r->element[0]->element[1]->integer, 0);
    cr_assert_eq(r->element[1]->element[0]->integer, 1, "unguarded: it runs");
    cr_assert_eq(r->element[2]->element[0]->integer, SCRIPT_QUARANTINED);
    cr_assert_eq(r->element[3]->element[0]->integer, 1, "and the release deletes it");
    freeReplyObject(r);
    /* A key of the wrong type fails its own command only. */
    world_change(0, "g");
    take("g", "t1", "1");
    world_change(4, "h");   /* h is a hash */
    set_args(&c[0], &script_extend, 4, 8, "h", "h\x1f#fence", "h\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000", "1");
    set_args(&c[1], &script_extend, 4, 8, "g", "g\x1f#fence", "g\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000", "1");
    r = run_group(c, 2);
    cr_assert_eq(r->element[0]->type, REDIS_REPLY_ERROR);
    cr_assert(strstr(r->element[0]->str, "WRONGTYPE"), "%s", r->element[0]->str);
    cr_assert_eq(r->element[1]->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->element[1]->element[0]->integer, 1);
    freeReplyObject(r);
}

/* Scripts that take memory never join a group (Redis checks maxmemory at
 * a script's first write only), and the marker script neither. */
Test(scripts, scripts_that_take_memory_go_alone)
{
    const mscript *alone[] = {&script_acquire, &script_settle, &script_proclaim, &script_sem_limit,
                              &script_marker};
    for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++)
        cr_assert_null(alone[i]->group, "%s is in a group", alone[i]->name);
    const mscript *grouped[] = {&script_extend, &script_inspect, &script_release, &script_publish};
    for (size_t i = 0; i < sizeof grouped / sizeof grouped[0]; i++)   /* PEXPIRE, GET, DEL, PUBLISH */
        cr_assert_eq(grouped[i]->group, &script_group, "%s", grouped[i]->name);
}

/* Negative control: the comparison catches a group that does not run the
 * commands in their order (an extension and a release of one lock
 * swapped). */
Test(scripts, negative_control_a_reordered_group_is_caught)
{
    flush_both();
    for (int db = 0; db < 2; db++) {
        select_db(db);
        world_change(0, "x");
        take("x", "t1", "1");
    }
    struct cmd c[2], swapped[2];
    set_args(&c[0], &script_extend, 4, 8, "x", "x\x1f#fence", "x\x1f#owner", SCRIPT_MARKER_KEY, "t1", "40000", "60000", "1");
    set_args(&c[1], &script_release, 2, 5, "x", "x\x1f#owner", "t1", "=", "");
    swapped[0] = c[1];
    swapped[1] = c[0];
    char mismatch[400] = "";
    cr_assert_lt(compare_chunk(c, swapped, 2, -1, "x", mismatch, sizeof mismatch), 0,
                 "a reordered group must not compare equal");
    fprintf(stderr, "scripts: negative control caught: %s\n", mismatch);
}
