/* Integration: listings (issue 32). GET /locks, /elections and /semaphores
 * list what a majority of masters holds, a page at a time: every held name
 * once across the pages, nothing a minority holds, nothing released, no
 * token anywhere; with masters stopped nothing hides until no majority
 * answers (503); bad queries are 400 and change nothing. The CLI's
 * `redlock list` is in test_cli.c, the dashboard in tests/ui. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static h_cluster *C;

static void teardown(void)
{
    h_cluster_free(C);
    C = NULL;
}

TestSuite(listing, .fini = teardown, .timeout = 240);

#define NAMES_MAX 4000

/* Every name a walk of GET path (with "?..." of its own or not) lists,
 * following next; counts repeats and checks that no page holds a token. */
typedef struct walk {
    char *names[NAMES_MAX];
    int n, pages, repeats;
    long status;                /* of the first answer that was not 200 (0: none) */
    char error[64];
} walk;

static void walk_free(walk *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->names[i]);
    memset(w, 0, sizeof *w);
}

static bool walk_has(const walk *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->names[i], name))
            return true;
    return false;
}

/* Follows next from cursor (in and out: where the walk stands, "" the
 * start; 128 bytes) and adds to w what the pages list, until next is null
 * (true), an answer is not 200 (w->status, false) or, when until_empty, a
 * page lists nothing (false). */
static bool walk_on(const char *path, const char *field, char *cursor, bool until_empty, walk *w)
{
    for (int guard = 0; guard < 10000; guard++) {
        char p[1024];
        snprintf(p, sizeof p, "%s%s%s%s", path, strchr(path, '?') ? "&" : "?", cursor[0] ? "cursor=" : "x=1",
                 cursor);
        h_resp r = h_http(C, "GET", p, NULL, NULL);
        if (r.status != 200) {
            w->status = r.status;
            snprintf(w->error, sizeof w->error, "%s", h_str(&r, "error") ? h_str(&r, "error") : "");
            h_resp_free(&r);
            return false;
        }
        w->pages++;
        if (getenv("LIST_DEBUG"))
            fprintf(stderr, "page %s -> %d %s\n", p, cJSON_GetArraySize(cJSON_GetObjectItem(r.json, field)),
                    cJSON_IsString(cJSON_GetObjectItem(r.json, "next")) ? cJSON_GetObjectItem(r.json, "next")->valuestring : "null");
        cr_assert_null(strstr(r.body, "\"token\""), "a listing shows a token: %s", r.body);
        cJSON *items = cJSON_GetObjectItem(r.json, field), *it;
        cr_assert(cJSON_IsArray(items), "%s", r.body);
        cJSON_ArrayForEach(it, items) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
            cr_assert_not_null(name, "%s", r.body);
            if (walk_has(w, name))
                w->repeats++;
            else if (w->n < NAMES_MAX)
                w->names[w->n++] = strdup(name);
        }
        cJSON *next = cJSON_GetObjectItem(r.json, "next");
        cr_assert(cJSON_IsNull(next) || cJSON_IsString(next), "%s", r.body);
        bool more = cJSON_IsString(next), empty = cJSON_GetArraySize(items) == 0;
        snprintf(cursor, 128, "%s", more ? next->valuestring : "");
        h_resp_free(&r);
        if (!more)
            return true;
        if (until_empty && empty)
            return false;
    }
    cr_assert_fail("a walk of %s never ended", path);
    return false;
}

static void walk_all(const char *path, const char *field, walk *w)
{
    memset(w, 0, sizeof *w);
    char cursor[128] = "";
    walk_on(path, field, cursor, false, w);
}

/* A lock the test lists. A 503 is asked again, as a client does, for up
 * to 10 s: on a machine busy beside the suite five healthy masters missed
 * the 50 ms reply deadline at once (a fresh clone's run, no_quorum on a
 * lock taken to be listed); the listings, not the acquires, are tested. */
static void acquire(const char *path, const char *body, char *token, size_t cap)
{
    h_resp r = h_http(C, "POST", path, body, NULL);
    uint64_t t0 = h_now_us();
    while (r.status == 503 && h_now_us() - t0 < 10000000ULL) {
        h_resp_free(&r);
        usleep(100000);
        r = h_http(C, "POST", path, body, NULL);
    }
    cr_assert_eq(r.status, 201, "POST %s: %ld %s", path, r.status, r.body);
    if (token)
        snprintf(token, cap, "%s", h_str(&r, "token"));
    h_resp_free(&r);
}

/* Takes the locks PREFIX-0000.. (digits wide) for 120 s, into tokens; with
 * owners, two in three with the owner "worker 7". */
static void take_numbered(const char *prefix, int digits, int n, char (*tokens)[64], bool owners)
{
    for (int i = 0; i < n; i++) {
        char path[64];
        snprintf(path, sizeof path, "/locks/%s-%0*d", prefix, digits, i);
        acquire(path, owners && i % 3 ? "{\"ttl_ms\":120000,\"owner\":\"worker 7\"}" : "{\"ttl_ms\":120000}",
                tokens[i], sizeof tokens[i]);
    }
}

/* 2,400 locks (and four names with slashes, spaces and UTF-8), 200 of them
 * released again: every page size lists each held one exactly once and
 * none of the released, and a prefix lists exactly its names. */
Test(listing, every_held_lock_once_across_pages)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    static char tokens[2400][64];
    take_numbered("job", 4, 2400, tokens, true);
    const char *odd[] = {"reports%2F2026%2F11", "nightly%20backup", "caf%C3%A9", "orders%2342"};
    for (int i = 0; i < 4; i++) {
        char path[64];
        snprintf(path, sizeof path, "/locks/%s", odd[i]);
        acquire(path, "{\"ttl_ms\":120000}", NULL, 0);
    }
    for (int i = 0; i < 2400; i += 12) {
        char path[64], hdr[128];
        snprintf(path, sizeof path, "/locks/job-%04d", i);
        snprintf(hdr, sizeof hdr, "Lock-Token: %.63s", tokens[i]);
        h_resp r = h_http(C, "DELETE", path, NULL, hdr, NULL);
        cr_assert_eq(r.status, 204, "%s", r.body);
        h_resp_free(&r);
    }
    static const char *const pages[] = {"/locks", "/locks?limit=7", "/locks?limit=1000", "/locks?limit=1"};
    for (int k = 0; k < 4; k++) {
        walk w;
        walk_all(pages[k], "locks", &w);
        cr_assert_eq(w.status, 0, "%s: %ld %s", pages[k], w.status, w.error);
        cr_assert_eq(w.repeats, 0, "%s listed %d names twice", pages[k], w.repeats);
        cr_assert_eq(w.n, 2400 - 200 + 4, "%s listed %d names in %d pages", pages[k], w.n, w.pages);
        for (int i = 0; i < 2400; i++) {
            char name[32];
            snprintf(name, sizeof name, "job-%04d", i);
            cr_assert_eq(walk_has(&w, name), i % 12 != 0, "%s: %s %s", pages[k], name,
                         i % 12 ? "missing" : "listed after its release");
        }
        cr_assert(walk_has(&w, "reports/2026/11") && walk_has(&w, "nightly backup") && walk_has(&w, "café") &&
                  walk_has(&w, "orders#42"), "%s", pages[k]);
        walk_free(&w);
    }
    walk w;
    walk_all("/locks?prefix=job-01", "locks", &w);
    cr_assert_eq(w.n, 100 - 8, "prefix job-01: %d names", w.n);   /* 0100..0199 less 0108, 0120 .. 0192 */
    walk_free(&w);
    walk_all("/locks?prefix=reports%2F", "locks", &w);
    cr_assert(w.n == 1 && !strcmp(w.names[0], "reports/2026/11"), "prefix reports/: %d", w.n);
    walk_free(&w);
    walk_all("/locks?prefix=%2A", "locks", &w);   /* a glob character is a character */
    cr_assert_eq(w.n, 0, "prefix *: %d names", w.n);
    walk_free(&w);
    /* One entry in full: validity, fence and owner as GET /locks/{name} says. */
    cJSON *e = NULL;
    for (char cursor[600] = ""; !e;) {
        char path[700];
        snprintf(path, sizeof path, "/locks?prefix=job-0001&limit=5%s%s", cursor[0] ? "&cursor=" : "", cursor);
        h_resp one = h_http(C, "GET", path, NULL, NULL);
        cr_assert_eq(one.status, 200, "%s", one.body);
        e = cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItem(one.json, "locks"), 0), true);
        cJSON *next = cJSON_GetObjectItem(one.json, "next");
        cr_assert(e || cJSON_IsString(next), "job-0001 is not listed: %s", one.body);
        if (!e)
            snprintf(cursor, sizeof cursor, "%s", next->valuestring);
        h_resp_free(&one);
    }
    h_resp in = h_http(C, "GET", "/locks/job-0001", NULL, NULL);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")), "job-0001");
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(e, "owner")), "worker 7", "%s", in.body);
    cr_assert_eq((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "fence")), h_int(&in, "fence"), "%s",
                 in.body);
    long long v = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "validity_ms"));
    cr_assert(v > 0 && v <= 120000, "validity %lld", v);
    cJSON_Delete(e);
    h_resp_free(&in);
    walk_all("/locks?prefix=job-0000", "locks", &w);
    cr_assert_eq(w.n, 0, "job-0000 was released, and listed");
    walk_free(&w);
}

/* A lock as another Redlock client leaves it on some masters only: the
 * value and the fence counter, written by hand. */
static void plant(int master, const char *name, const char *value)
{
    redisReply *r = h_redis(C, master, "SET lock:%s %s PX 60000", name, value);
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "SET on master %d", master);
    freeReplyObject(r);
    r = h_redis(C, master, "SET lock:%s\x1f#fence 7 PX 60000", name);
    cr_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

static bool held_now(void *name) { return h_held(C, name); }

/* Whether GET /locks/{name} says held within 10 s. A lock that exactly
 * three masters hold reads as not held while one of them answers late (a
 * busy machine), so a test that expects it held polls; a lock that fewer
 * than three hold never reads as held, so "not held" needs no wait. */
static bool held_soon(const char *name)
{
    return h_eventually(held_now, (void *)name, 10000);
}

/* Listed only what a majority holds with one value: not two masters of
 * five, not a 2-2 split; but three masters that the walk meets only on
 * its third (the first two hold nothing) are. GET /locks/{name} agrees. */
Test(listing, only_what_a_majority_holds)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    acquire("/locks/granted", NULL, NULL, 0);
    plant(0, "minority", "v1");
    plant(1, "minority", "v1");
    plant(0, "split", "a1");
    plant(1, "split", "a1");
    plant(2, "split", "b2");
    plant(3, "split", "b2");
    plant(2, "late", "v3");
    plant(3, "late", "v3");
    plant(4, "late", "v3");
    walk w;
    walk_all("/locks?limit=2", "locks", &w);
    cr_assert_eq(w.status, 0, "%ld", w.status);
    cr_assert(walk_has(&w, "granted"), "a granted lock is missing");
    cr_assert(walk_has(&w, "late"), "a lock of masters 2, 3 and 4 is missing");
    cr_assert_not(walk_has(&w, "minority"), "a lock of two masters of five is listed");
    cr_assert_not(walk_has(&w, "split"), "a 2-2 split is listed");
    cr_assert_eq(w.n, 2, "%d names", w.n);
    cr_assert_eq(w.repeats, 0);
    walk_free(&w);
    cr_assert(held_soon("late"));
    cr_assert_not(h_held(C, "minority"));
    cr_assert_not(h_held(C, "split"));
}

/* Whether master i holds lock name. */
static bool on_master(int i, const char *name)
{
    redisReply *r = h_redis(C, i, "EXISTS lock:%s", name);
    bool yes = r && r->integer == 1;
    freeReplyObject(r);
    return yes;
}

/* A stopped master hides nothing while a majority answers, the first ones
 * the walk scans included: every lock that three running masters hold is
 * listed, exactly as GET /locks/{name} says held (a busy machine may have
 * granted some without a master that now runs; a GET of a lock that three
 * running masters hold waits out a late one: held_soon). With three of
 * five stopped: 503 no_quorum. */
Test(listing, stopped_masters_hide_nothing_until_no_majority)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    static char tokens[300][64];
    take_numbered("svc", 3, 300, tokens, false);
    /* A busy machine grants some without a master that was late: taken
     * again until all five hold them (a few tries), so that most locks
     * stay provable with masters stopped. */
    for (int i = 0; i < 300; i++) {
        char name[32], path[64], hdr[128];
        snprintf(name, sizeof name, "svc-%03d", i);
        snprintf(path, sizeof path, "/locks/%s", name);
        for (int tries = 0; tries < 5; tries++) {
            int on = 0;
            for (int m = 0; m < 5; m++)
                on += on_master(m, name);
            if (on == 5)
                break;
            snprintf(hdr, sizeof hdr, "Lock-Token: %.63s", tokens[i]);
            h_resp r = h_http(C, "DELETE", path, NULL, hdr, NULL);
            h_resp_free(&r);
            acquire(path, "{\"ttl_ms\":120000}", tokens[i], sizeof tokens[i]);
        }
    }
    for (int stopped = 1; stopped <= 3; stopped++) {
        h_master_pause(C, stopped - 1);
        walk w;
        walk_all("/locks?limit=50", "locks", &w);
        if (stopped == 3) {
            cr_assert_eq(w.status, 503, "three of five stopped: %ld", w.status);
            cr_assert_str_eq(w.error, "no_quorum");
            walk_free(&w);
            break;
        }
        cr_assert_eq(w.status, 0, "%d stopped: %ld %s", stopped, w.status, w.error);
        cr_assert_eq(w.repeats, 0);
        int provable = 0;
        for (int i = 0; i < 300; i++) {
            char name[32];
            snprintf(name, sizeof name, "svc-%03d", i);
            int running = 0;
            for (int m = stopped; m < 5; m++)
                running += on_master(m, name);
            provable += running >= 3;
            cr_assert(running < 3 || walk_has(&w, name), "%d stopped: %s (on %d running masters) is missing",
                      stopped, name, running);
            if (walk_has(&w, name))
                cr_assert(held_soon(name), "%d stopped: %s listed, GET says not held", stopped, name);
            else
                cr_assert_not(h_held(C, name), "%d stopped: %s not listed, GET says held", stopped, name);
        }
        cr_assert_geq(provable, 200, "%d stopped: only %d locks on three running masters", stopped, provable);
        walk_free(&w);
    }
    for (int i = 0; i < 3; i++)
        h_master_resume(C, i);
    cr_assert(h_wait_voting(C, 5, 20000));
    walk w;
    walk_all("/locks", "locks", &w);
    cr_assert_eq(w.n, 300, "after SIGCONT: %d", w.n);
    walk_free(&w);
}

/* A master that runs but answers late (a proxy holds each of its answers
 * 200 ms, four times --master-timeout-ms: late on every command, by
 * construction, yet never so late that redlockd drops it) ends the page
 * where it stands: 200 with a next, never 503 no_quorum while three masters
 * run, and nothing listed that needed its answer; once it answers in time
 * the walk goes on from that next and lists every held lock once.
 * killed: two masters down (-1: none); planted: a lock held by exactly
 * masters 0, 1 and 2, which only a read that waits for master 1 lists. */
static void late_master_ends_the_page(int slow, int killed_a, int killed_b, bool planted)
{
    C = h_cluster_start(5, NULL);
    h_master_proxy(C, slow);
    h_daemon_start(C, NULL);
    static char tokens[40][64];
    take_numbered("late", 2, 40, tokens, false);
    for (int i = 0; i < 40; i++)
        for (int m = 0; m < 5; m++) {
            char key[32];
            snprintf(key, sizeof key, "lock:late-%02d", i);
            cr_assert(h_wait_key(C, m, key, 10000), "%s never reached master %d", key, m);
        }
    if (planted)
        for (int m = 0; m <= 2; m++)
            plant(m, "edge", "v012");
    int running = 5;
    if (killed_a >= 0) {
        h_master_kill(C, killed_a);
        h_master_kill(C, killed_b);
        running = 3;
    }
    cr_assert(h_wait_voting(C, running, 20000), "%d masters never voted", running);
    h_master_slow(C, slow, 200);
    /* While it is late: pages answer, until one lists nothing (what is left
     * needs its answer), and none ends the walk. */
    walk w = {0};
    char cursor[128] = "";
    bool over = walk_on("/locks?limit=10", "locks", cursor, true, &w);
    cr_assert(!over && !w.status, "master %d late, %d running: %s %ld %s", slow, running,
              over ? "the walk ended" : "a page answered", w.status, w.error);
    cr_assert_not(walk_has(&w, "edge"), "a lock held by three masters, one of them late, was proven");
    int before = w.n;
    for (int k = 0; k < 2; k++) {   /* and stay where they stand */
        char again[128];
        snprintf(again, sizeof again, "%s", cursor);
        over = walk_on("/locks?limit=10", "locks", cursor, true, &w);
        cr_assert(!over && !w.status, "%d %ld %s", over, w.status, w.error);
        cr_assert_str_eq(cursor, again);
    }
    cr_assert_eq(w.n, before);
    h_master_slow(C, slow, 0);
    cr_assert(h_wait_voting(C, running, 20000), "master %d never caught up", slow);
    cr_assert(walk_on("/locks?limit=10", "locks", cursor, false, &w), "after master %d caught up: %ld %s", slow,
              w.status, w.error);
    cr_assert_eq(w.repeats, 0, "%d names listed twice", w.repeats);
    cr_assert_eq(w.n, 40 + planted, "%d names listed (%d while master %d was late)", w.n, before, slow);
    cr_assert(!planted || walk_has(&w, "edge"), "the lock of masters 0, 1 and 2 is missing");
    walk_free(&w);
}

/* The walk must scan the late master (0 and 1 are down). */
Test(listing, a_late_master_it_scans_ends_the_page) { late_master_ends_the_page(2, 0, 1, false); }
/* Every read needs the late master (3 and 4 are down). */
Test(listing, a_late_master_it_reads_ends_the_page) { late_master_ends_the_page(2, 3, 4, false); }
/* A majority answers every read in time, and the pages list what needs
 * no more; but a lock that the late master holds with two others is only
 * proven with it, and a walk must scan it. */
Test(listing, a_late_master_hides_no_lock) { late_master_ends_the_page(1, -1, -1, true); }

/* Elections list their leader, value and term; semaphores their limit
 * and holders; neither shows up among the locks, and prefixes apply. */
Test(listing, elections_and_semaphores)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    h_stream *lead = h_stream_open(C, "/elections/db%2Fprimary", "{\"candidate\":\"node-1\",\"value\":\"10.0.0.7\"}",
                                   5000);
    cJSON *ev = NULL;
    uint64_t at;
    cr_assert_eq(h_stream_event(lead, 5000, &ev, &at), 1);
    cr_assert_str_eq(h_ev_str(ev, "event"), "campaigning");
    cJSON_Delete(ev);
    cr_assert_eq(h_stream_event(lead, 5000, &ev, &at), 1);
    cr_assert_str_eq(h_ev_str(ev, "event"), "elected");
    long long term = h_ev_int(ev, "term");
    cJSON_Delete(ev);
    h_resp s = h_http(C, "POST", "/semaphores/pool", "{\"limit\":3,\"permits\":2,\"ttl_ms\":60000}", NULL);
    cr_assert_eq(s.status, 201, "%s", s.body);
    h_resp_free(&s);
    acquire("/locks/plain", NULL, NULL, 0);

    h_resp e = h_http(C, "GET", "/elections", NULL, NULL);
    cr_assert_eq(e.status, 200, "%s", e.body);
    cJSON *one = cJSON_GetArrayItem(cJSON_GetObjectItem(e.json, "elections"), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(e.json, "elections")), 1, "%s", e.body);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(one, "name")), "db/primary");
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(one, "leader")), "node-1");
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(one, "value")), "10.0.0.7");
    cr_assert_eq((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(one, "term")), term, "%s", e.body);
    h_resp_free(&e);

    h_resp m = h_http(C, "GET", "/semaphores?prefix=po", NULL, NULL);
    cr_assert_str_eq(m.body, "{\"semaphores\":[{\"name\":\"pool\",\"limit\":3,\"holders\":2}],\"next\":null}", "%s",
                     m.body);
    h_resp_free(&m);
    h_resp l = h_http(C, "GET", "/locks", NULL, NULL);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(l.json, "locks")), 1, "internal keys listed: %s", l.body);
    h_resp_free(&l);
    h_resp none = h_http(C, "GET", "/elections?prefix=web", NULL, NULL);
    cr_assert_str_eq(none.body, "{\"elections\":[],\"next\":null}", "%s", none.body);
    h_resp_free(&none);
    h_stream_close(lead);
}

static long long dbsize(int i)
{
    redisReply *r = h_redis(C, i, "DBSIZE");
    long long n = r ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* Bad queries: 400 with the field named, and no master changes. */
Test(listing, bad_queries_are_400_and_change_nothing)
{
    C = h_cluster_start(5, NULL);
    h_daemon_start(C, NULL);
    acquire("/locks/kept", NULL, NULL, 0);
    long long before[5];
    for (int i = 0; i < 5; i++)
        before[i] = dbsize(i);
    static const struct { const char *path, *error; } bad[] = {
        {"/locks?limit=0", "bad_request"},          {"/locks?limit=1001", "bad_request"},
        {"/locks?limit=1e2", "bad_request"},        {"/locks?limit=-1", "bad_request"},
        {"/locks?limit=", "bad_request"},           {"/locks?limit=%2B5", "bad_request"},
        {"/locks?cursor=x", "bad_request"},         {"/locks?cursor=9.0.0", "bad_request"},
        {"/locks?cursor=0.0.abc", "bad_request"},   {"/locks?cursor=0.1.0", "bad_request"},
        {"/locks?cursor=0.0.0.", "bad_request"},    {"/elections?cursor=-1.0.0", "bad_request"},
        {"/locks?cursor=0.0.0.1.00", "bad_request"},{"/locks?cursor=0.0.0.1.zz", "bad_request"},
        {"/locks?cursor=0.0.0.1.6A", "bad_request"},{"/semaphores?cursor=3.0.0", "bad_request"},
        {"/locks?cursor=0.0.0.0.61", "bad_request"},{"/locks?cursor=0.0.0.1.616", "bad_request"},
        {"/locks?prefix=%00", "bad_name"},          {"/locks?prefix=%zz", "bad_name"},
        {"/semaphores?prefix=%C3", "bad_name"},     {"/locks?prefix=%0A", "bad_name"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        h_resp r = h_http(C, "GET", bad[k].path, NULL, NULL);
        cr_assert_eq(r.status, 400, "%s: %ld %s", bad[k].path, r.status, r.body);
        cr_assert_str_eq(h_str(&r, "error"), bad[k].error, "%s: %s", bad[k].path, r.body);
        h_resp_free(&r);
    }
    char longp[700] = "/locks?prefix=";
    for (int i = 0; i < 201; i++)
        strcat(longp, "a");
    h_resp r = h_http(C, "GET", longp, NULL, NULL);
    cr_assert_eq(r.status, 400, "a 201-byte prefix: %ld", r.status);
    h_resp_free(&r);
    r = h_http(C, "POST", "/locks", "{}", NULL);
    cr_assert_eq(r.status, 405, "POST /locks: %ld", r.status);
    h_resp_free(&r);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(dbsize(i), before[i], "master %d changed", i);
    cr_assert(h_held(C, "kept"));
}
