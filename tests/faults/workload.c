/* workload.c - see workload.h. */
#include "workload.h"
#include "workload_int.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FL_MASTER_TIMEOUT_MS 50
#define FL_MARGIN_MS 50          /* HTTP, scheduling on 2 cores, sanitizers */
#define FL_RECOVERY_SLACK_MS 500 /* client retry pauses and a late-applied SET */

struct body {
    char buf[2048];
    size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t add = size * n;
    size_t room = sizeof b->buf - 1 - b->len;
    size_t take = add < room ? add : room;
    memcpy(b->buf + b->len, p, take);
    b->len += take;
    b->buf[b->len] = '\0';
    return add;
}

static uint32_t rnd(struct client *cl, uint32_t below)
{
    uint64_t x = cl->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    cl->rng = x;
    return below ? (uint32_t)(x % below) : 0;
}

bool fl_running(fl_run *r) { return !atomic_load(&r->fault_stop); }

void fl_sleep_ms(fl_run *r, int ms)
{
    uint64_t until = h_now_us() + (uint64_t)ms * 1000ULL;
    while (fl_running(r) && h_now_us() < until)
        usleep(5000);
}

static void sleep_exact_ms(int ms)
{
    if (ms > 0)
        usleep((useconds_t)ms * 1000);
}

void fl_mark_down(fl_run *r, uint64_t begin_us, uint64_t end_us)
{
    if (r->ndown < FL_MAX_PERIODS && end_us > begin_us)
        r->down[r->ndown++] = (fl_period){begin_us, end_us};
}

void fl_mark_recovered(fl_run *r, uint64_t at_us)
{
    if (r->nrecovered < FL_MAX_PERIODS)
        r->recovered[r->nrecovered++] = at_us;
}

uint64_t fl_wait_voting(fl_run *r, int want, int timeout_ms, uint64_t *ready_us)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000ULL, last_short = 0;
    *ready_us = 0;
    while (h_now_us() < until) {
        uint64_t t = h_now_us();
        h_resp rz = h_http(r->c, "GET", "/readyz", NULL, NULL);
        long long v = h_int(&rz, "masters_voting");
        h_resp_free(&rz);
        if (v >= want) {
            *ready_us = h_now_us();
            return last_short;
        }
        last_short = t;
        usleep(10000);
    }
    return last_short;
}

bool fl_wait_long_holder(fl_run *r, int left_ms, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000ULL;
    while (h_now_us() < until) {
        uint64_t end = atomic_load(&r->long_hold_until_us), now = h_now_us();
        if (end > now + (uint64_t)left_ms * 1000ULL)
            return true;
        usleep(1000);
    }
    return false;
}

bool fl_wait_masters_down(fl_run *r, uint32_t mask, int timeout_ms)
{
    uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000ULL;
    while (h_now_us() < until) {
        h_resp rz = h_http(r->c, "GET", "/readyz", NULL, NULL);
        const cJSON *ms = rz.json ? cJSON_GetObjectItem(rz.json, "masters") : NULL;
        bool down = cJSON_IsArray(ms);
        for (int i = 0; down && i < 32; i++)
            if (mask >> i & 1u)
                down = cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(ms, i), "up"));
        h_resp_free(&rz);
        if (down)
            return true;
        usleep(5000);
    }
    return false;
}

/* Starts instance x (the cluster or a peer view) with the run's flags.
 * h_daemon_start is variadic; the array goes through fixed slots, and the
 * first NULL ends it. */
static void instance_start(fl_run *r, h_cluster *x)
{
    const char **v = r->dargv;
    h_daemon_start(x, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11],
                   v[12], v[13], v[14], NULL);
}

void fl_daemon_start(fl_run *r) { instance_start(r, r->c); }

void fl_instance_restart(fl_run *r, int k)
{
    h_cluster *x = k == 0 ? r->c : r->peers[k - 1];
    h_daemon_kill(x);
    instance_start(r, x);
}

/* ---- the resource ---- */

static long resource_read(fl_resource *res, long long fence)
{
    pthread_mutex_lock(&res->mu);
    if (fence > res->seen_fence)
        res->seen_fence = fence;
    long v = res->count;
    pthread_mutex_unlock(&res->mu);
    return v;
}

static enum fl_write resource_write(fl_resource *res, long long fence, long value)
{
    pthread_mutex_lock(&res->mu);
    enum fl_write w = FL_WRITE_REJECTED;
    if (fence > res->last_write_fence && fence >= res->seen_fence) {
        res->count = value;
        res->last_write_fence = res->seen_fence = fence;
        w = FL_WRITE_ACCEPTED;
    }
    pthread_mutex_unlock(&res->mu);
    return w;
}

/* ---- clients ---- */

static long http(CURL *h, const char *method, const char *url, const char *body,
                 const char *token, struct body *out)
{
    struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
    char tok[300];
    if (token) {
        snprintf(tok, sizeof tok, "Lock-Token: %s", token);
        hdrs = curl_slist_append(hdrs, tok);
    }
    if (body)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    out->len = 0;
    out->buf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, body ? (long)strlen(body) : 0L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    long status = -1;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    return status;
}

static void client_log(struct client *cl, const fl_record *rec)
{
    if (cl->n == cl->cap) {
        cl->cap = cl->cap ? cl->cap * 2 : 256;
        cl->recs = realloc(cl->recs, cl->cap * sizeof *cl->recs);
        if (!cl->recs)
            abort();
    }
    cl->recs[cl->n++] = *rec;
}

void fl_keep_token(fl_run *r, const char *token)
{
    pthread_mutex_lock(&r->tok_mu);
    if (r->ntokens == r->captokens) {
        size_t cap = r->captokens ? r->captokens * 2 : 4096;
        void *t = realloc(r->tokens, cap * sizeof *r->tokens);
        if (!t)
            abort();
        r->tokens = t;
        r->captokens = cap;
    }
    /* redlockd's tokens are 22 characters (TOKEN_TEXT_LEN); a longer one
     * is kept cut to the slot, as snprintf kept it, which -O3 warned of. */
    char *slot = r->tokens[r->ntokens++];
    size_t n = strnlen(token, sizeof r->tokens[0] - 1);
    memcpy(slot, token, n);
    slot[n] = '\0';
    pthread_mutex_unlock(&r->tok_mu);
}

/* Lock keys left on the masters once every client stopped whose value no
 * client received: ghost locks (a grant that never reached its caller). */
static long ghost_locks(fl_run *r)
{
    long ghosts = 0;
    for (int m = 0; m < r->c->n; m++)
        for (int k = 0; k < r->sc->names; k++) {
            redisReply *v = h_redis(r->c, m, "GET lock:fl-%d", k);
            if (v && v->type == REDIS_REPLY_STRING) {
                bool known = false;
                for (size_t i = 0; i < r->ntokens && !known; i++)
                    known = !strcmp(r->tokens[i], v->str);
                ghosts += !known;
            }
            if (v)
                freeReplyObject(v);
        }
    return ghosts;
}

/* One held-stream attempt: the record's window runs from the "acquired"
 * event to the end of the validity last announced (each event's
 * validity_ms counted from when it arrived), cut short by the client's
 * release or a "lost" event. */
static void stream_attempt(struct client *cl, fl_record *rec, h_cluster *x)
{
    fl_run *r = cl->run;
    const fl_scenario *sc = r->sc;
    char path[64], body[64];
    snprintf(path, sizeof path, "/locks/fl-%d", rec->name);
    snprintf(body, sizeof body, "{\"hold\":true,\"ttl_ms\":%lld}", sc->ttl_ms);
    rec->sent_us = h_now_us();
    h_stream *st = h_stream_open(x, path, body, 5000);
    rec->answered_us = h_now_us();
    rec->status = st ? (int)st->status : -1;
    cJSON *ev = NULL;
    uint64_t at;
    if (rec->status == 201 && h_stream_event(st, 3000, &ev, &at) != 1) {
        rec->status = -1;   /* a stream that never said "acquired" is no grant */
    }
    if (rec->status != 201) {
        h_stream_close(st);
        return;
    }
    rec->answered_us = at;
    atomic_fetch_add(&r->grants, 1);
    rec->fence = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "fence"));
    rec->ttl_ms = sc->ttl_ms;
    uint64_t valid_until = at + (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "validity_ms")) * 1000ULL;
    char token[300];
    snprintf(token, sizeof token, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(ev, "token")));
    cJSON_Delete(ev);
    fl_keep_token(r, token);

    fl_resource *res = &r->res[rec->name];
    long v = resource_read(res, rec->fence);
    rec->read_us = h_now_us();
    uint64_t until = rec->read_us + (uint64_t)rnd(cl, (uint32_t)sc->stream_hold_max_ms + 1) * 1000ULL;
    bool lost = false;
    while (!lost && h_now_us() < until) {
        int left_ms = (int)((until - h_now_us()) / 1000) + 1;
        int got = h_stream_event(st, left_ms, &ev, &at);
        if (got < 0) {
            lost = true;   /* the stream broke: rely on nothing more */
            break;
        }
        if (got == 0)
            continue;
        const char *what = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "event"));
        if (what && !strcmp(what, "renewed"))
            valid_until = at + (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "validity_ms")) * 1000ULL;
        else
            lost = true;
        cJSON_Delete(ev);
    }
    rec->write_us = h_now_us();
    if (lost) {
        rec->release_sent_us = rec->write_us;   /* it stopped relying on the lock here */
        rec->write = FL_WRITE_NONE;
    } else {
        rec->late = rec->write_us > valid_until;
        rec->write = resource_write(res, rec->fence, v + 1);
        rec->release_sent_us = h_now_us();
    }
    rec->validity_ms = valid_until > rec->answered_us ? (long long)((valid_until - rec->answered_us) / 1000) : 0;
    if (!lost && rnd(cl, 2)) {
        /* DELETE with the token: the stream ends with "released". */
        CURL *h = curl_easy_init();
        struct body out;
        char url[160];
        snprintf(url, sizeof url, "%s%s", x->base, path);
        rec->release_status = (int)http(h, "DELETE", url, NULL, token, &out);
        curl_easy_cleanup(h);
        rec->release_answered_us = h_now_us();
    }
    h_stream_close(st);   /* otherwise the close releases */
}

static void *client_main(void *arg)
{
    struct client *cl = arg;
    fl_run *r = cl->run;
    const fl_scenario *sc = r->sc;
    CURL *h = curl_easy_init();
    char body[64];
    snprintf(body, sizeof body, "{\"ttl_ms\":%lld}", sc->ttl_ms);
    if (sc->long_holder && cl->id == 0)   /* woken by the release notice: it wins most free names */
        snprintf(body, sizeof body, "{\"ttl_ms\":%lld,\"wait_ms\":%lld}", sc->ttl_ms, sc->ttl_ms);
    struct body out;
    while (!atomic_load(&r->stop)) {
        fl_record rec = {.client = cl->id, .name = (int)rnd(cl, (uint32_t)sc->names)};
        char url[160], token[300] = "";
        int inst = cl->id % (sc->peers + 1);
        if (sc->stream_hold_max_ms && cl->id % 2) {
            stream_attempt(cl, &rec, inst ? r->peers[inst - 1] : r->c);
            if (rec.status != 201)
                usleep(rec.status < 0 ? 20000 : rnd(cl, 10000));
            client_log(cl, &rec);
            continue;
        }
        snprintf(url, sizeof url, "%s/locks/fl-%d", inst ? r->peers[inst - 1]->base : r->c->base,
                 rec.name);
        rec.sent_us = h_now_us();
        rec.status = (int)http(h, "POST", url, body, NULL, &out);
        rec.answered_us = h_now_us();
        if (rec.status == 201) {
            atomic_fetch_add(&r->grants, 1);
            cJSON *j = cJSON_Parse(out.buf);
            cJSON *t = cJSON_GetObjectItem(j, "token");
            rec.validity_ms = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "validity_ms"));
            rec.fence = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "fence"));
            rec.ttl_ms = sc->ttl_ms;
            if (cJSON_IsString(t))
                snprintf(token, sizeof token, "%s", t->valuestring);
            cJSON_Delete(j);
            fl_keep_token(r, token);

            /* The critical section: read, work, write, all fenced. */
            fl_resource *res = &r->res[rec.name];
            long v = resource_read(res, rec.fence);
            rec.read_us = h_now_us();
            int hold = (int)rnd(cl, (uint32_t)sc->hold_max_ms + 1);
            if (sc->late_client_pause_ms && cl->id == 0)
                hold = (int)rec.validity_ms + sc->late_client_pause_ms;   /* a stalled holder */
            bool long_holder = sc->long_holder && cl->id == 0;
            if (long_holder) {
                long long used_ms = (long long)(rec.read_us - rec.answered_us) / 1000;
                long long left = rec.validity_ms - FL_LONG_HOLD_SPARE_MS - used_ms;
                hold = left > 0 ? (int)left : 0;
                atomic_store(&r->long_hold_name, rec.name);
                atomic_store(&r->long_hold_until_us, rec.read_us + (uint64_t)hold * 1000ULL);
            }
            sleep_exact_ms(hold);
            if (long_holder)
                atomic_store(&r->long_hold_until_us, 0);
            rec.write_us = h_now_us();
            rec.late = rec.write_us > rec.answered_us + (uint64_t)rec.validity_ms * 1000ULL;
            rec.write = resource_write(res, rec.fence, v + 1);
            rec.release_sent_us = h_now_us();
            rec.release_status = (int)http(h, "DELETE", url, NULL, token, &out);
            if (rec.release_status < 0) {   /* redlockd restarting: try once more */
                usleep(50000);
                rec.release_status = (int)http(h, "DELETE", url, NULL, token, &out);
            }
            rec.release_answered_us = h_now_us();
        } else if (rec.status < 0) {
            usleep(20000);
        } else {
            usleep(rnd(cl, 10000));
        }
        client_log(cl, &rec);
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* Ends the fault phase after r->seconds. Faults run on the main thread:
 * processes get PR_SET_PDEATHSIG from the thread that starts them, so a
 * master or redlockd restarted by a short-lived thread would die with it. */
static void *timer_main(void *arg)
{
    fl_run *r = arg;
    uint64_t until = r->t0_us + (uint64_t)r->seconds * 1000000ULL;
    while (h_now_us() < until)
        usleep(10000);
    atomic_store(&r->fault_stop, true);
    return NULL;
}

void fl_run_scenario(const fl_scenario *sc, int seconds, int clients_override)
{
    fl_run *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    r->sc = sc;
    r->seconds = seconds;
    int nclients = clients_override > 0 ? clients_override : sc->clients;
    for (int i = 0; i < FL_MAX_NAMES; i++)
        pthread_mutex_init(&r->res[i].mu, NULL);
    pthread_mutex_init(&r->tok_mu, NULL);
    r->c = h_cluster_start(5, sc->extra_redis);
    static char ttl[24];   /* dargv points here for restarts */
    snprintf(ttl, sizeof ttl, "%lld", sc->ttl_ms);
    const char **argv = r->dargv;
    /* A short fence keep keeps the restarted masters' quarantine short; a
     * scenario's own flags come after, and win. */
    const char *fixed[] = {"--default-ttl-ms", ttl, "--max-ttl-ms", ttl, "--master-timeout-ms", "50",
                           "--fence-keep-ms", "1000"};
    int a = 0;
    for (; a < 8; a++)
        argv[a] = fixed[a];
    for (int i = 0; sc->daemon_flags[i] && a < 15; i++)
        argv[a++] = sc->daemon_flags[i];
    argv[a] = NULL;
    fl_daemon_start(r);
    for (int k = 0; k < sc->peers && k < FL_MAX_PEERS; k++) {
        const char **v = r->dargv;
        r->peers[k] = h_peer_start(r->c, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9],
                                   v[10], v[11], v[12], v[13], v[14], NULL);
    }
    snprintf(r->jsonl, sizeof r->jsonl, "%s/clients.jsonl", r->c->dir);

    struct client *cls = calloc((size_t)nclients, sizeof *cls);
    pthread_t *th = calloc((size_t)nclients, sizeof *th);
    r->t0_us = h_now_us();
    for (int i = 0; i < nclients; i++) {
        cls[i] = (struct client){.run = r, .id = i, .rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1) ^ r->t0_us};
        pthread_create(&th[i], NULL, client_main, &cls[i]);
    }
    pthread_t timer;
    pthread_create(&timer, NULL, timer_main, r);
    sc->fault(r);
    pthread_join(timer, NULL);
    /* Keep the load on for a TTL after the last fault so recovery shows. */
    usleep((useconds_t)(sc->ttl_ms + FL_RECOVERY_SLACK_MS + 500) * 1000);
    atomic_store(&r->stop, true);
    for (int i = 0; i < nclients; i++)
        pthread_join(th[i], NULL);

    long ghosts = ghost_locks(r);
    write_jsonl(r->jsonl, cls, nclients);
    {
        char marks[420];
        snprintf(marks, sizeof marks, "%s/marks.txt", r->c->dir);
        FILE *mf = fopen(marks, "w");
        for (int i = 0; mf && i < r->ndown; i++)
            fprintf(mf, "down %" PRIu64 " %" PRIu64 "\n", r->down[i].begin_us, r->down[i].end_us);
        for (int i = 0; mf && i < r->nrecovered; i++)
            fprintf(mf, "recovered %" PRIu64 "\n", r->recovered[i]);
        if (mf)
            fclose(mf);
    }
    size_t n = 0;
    fl_record *recs = read_jsonl(r->jsonl, &n);
    if (r->nprobes) {   /* the fault thread's asks are judged as a client's */
        recs = realloc(recs, (n + (size_t)r->nprobes) * sizeof *recs);
        cr_assert_not_null(recs);
        memcpy(recs + n, r->probes, (size_t)r->nprobes * sizeof *recs);
        n += (size_t)r->nprobes;
    }
    long lost = 0;
    for (int k = 0; k < sc->names; k++) {
        long acc = fl_accepted_for(recs, n, k);
        lost += labs(r->res[k].count - acc);   /* increments lost to a concurrent holder */
    }
    fl_expect ex = {FL_MASTER_TIMEOUT_MS + FL_MARGIN_MS, sc->ttl_ms, FL_RECOVERY_SLACK_MS,
                    r->down, r->ndown, r->recovered, r->nrecovered};
    fl_report p;
    fl_check(recs, n, sc->names, &ex, &p);
    double free_pct = p.free_attempts ? 100.0 * (double)p.free_granted / (double)p.free_attempts : 100.0;
    print_row(sc->label, &p, lost, free_pct, sc->check_availability);

    bool keep = sc->expect_violation ? false : (p.overlaps || p.fence_violations || lost);
    if (keep)
        setenv("H_KEEP", "1", 1);   /* the logs of a failed run stay for reading */
    cr_assert_gt(p.grants, 3, "%s: only %ld grants in %ld attempts", sc->label, p.grants, p.attempts);
    if (sc->expect_violation == FL_EXPECT_FENCE) {
        /* Negative control: the fence check must catch the unsafe setting. */
        cr_assert_gt(p.fence_violations, 0, "%s: the checker found no fence going backwards "
                     "where one was expected", sc->label);
    } else if (sc->expect_violation) {
        /* Negative control: the same checks must catch the unsafe setting. */
        if (sc->long_holder)
            cr_assert_gt(r->probes_in_hold, 0, "%s: no restart was seen through while client 0 held its name: "
                         "the control proves nothing", sc->label);
        cr_assert(p.overlaps > 0 || lost > 0,
                  "%s: the checker found no violation where one was expected", sc->label);
    } else {
        cr_assert_eq(p.overlaps, 0, "%s: %ld overlapping holders (first at %" PRIu64 " and %" PRIu64
                     "; logs in %s)", sc->label, p.overlaps, p.first_overlap_a_us,
                     p.first_overlap_b_us, r->jsonl);
        cr_assert_eq(p.fence_violations, 0, "%s: fences not increasing", sc->label);
        cr_assert_eq(p.accepted_fence_violations, 0, "%s: accepted fences not increasing", sc->label);
        cr_assert_eq(lost, 0, "%s: the resource's count differs from its accepted writes by %ld",
                     sc->label, lost);
        cr_assert_eq(p.other, 0, "%s: %ld answers other than 201/409/503", sc->label, p.other);
        cr_assert_eq(ghosts, 0, "%s: %ld lock keys left on the masters hold a token no client "
                     "received", sc->label, ghosts);
        cr_assert_eq(p.down_wrong, 0, "%s: %ld of %ld attempts with a majority down were not a 503 "
                     "within %d ms (the first: %d in %.1f ms)", sc->label, p.down_wrong, p.down_attempts,
                     FL_MASTER_TIMEOUT_MS + FL_MARGIN_MS, p.down_wrong_status, p.down_wrong_ms);
        cr_assert_eq(p.recoveries_missed, 0, "%s: no grant within one TTL after %ld of %ld recoveries",
                     sc->label, p.recoveries_missed, p.recoveries_judged);
        if (r->nrecovered)
            cr_assert_gt(p.recoveries_judged, 0, "%s: no recovery was followed by a TTL without faults",
                         sc->label);
        if (sc->late_client_pause_ms) {
            cr_assert_gt(p.late_stale, 0, "%s: the stalled client never wrote after a newer holder",
                         sc->label);
            cr_assert_eq(p.late_stale_accepted, 0, "%s: %ld of %ld writes past validity, after a "
                         "newer holder used the resource, were accepted", sc->label,
                         p.late_stale_accepted, p.late_stale);
        }
        if (sc->check_availability) {
            cr_assert_geq(free_pct, 99.0, "%s: %ld of %ld attempts on a free name granted", sc->label,
                          p.free_granted, p.free_attempts);
            cr_assert_gt(p.free_attempts, 10, "%s: too few attempts on a free name to judge", sc->label);
            cr_assert_leq(p.healthy_p99_ms, (double)(FL_MASTER_TIMEOUT_MS + FL_MARGIN_MS),
                          "%s: p99 acquire %.1f ms", sc->label, p.healthy_p99_ms);
        }
    }
    free(recs);
    for (int i = 0; i < nclients; i++)
        free(cls[i].recs);
    free(cls);
    free(th);
    free(r->tokens);
    for (int k = 0; k < sc->peers && k < FL_MAX_PEERS; k++)
        h_peer_free(r->peers[k]);
    h_cluster_free(r->c);
    free(r);
}
