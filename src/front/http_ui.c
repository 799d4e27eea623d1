/* http_ui.c - the dashboard (docs/ops.md): GET /ui serves one page, its
 * script and style inside it (src/front/ui/dashboard.html, built into the
 * binary: no other asset, works offline); the page polls GET /ui/state and
 * the listings every second, with the token pasted into it. /ui/state is
 * what the listings do not say: the masters as /readyz sees them (with
 * their reply counters, from which the page draws latency), the last
 * minutes of grants, 409s and 503s per second, and the acquires and
 * campaigns waiting on this instance per name (a semaphore's waiting
 * acquires retry on their own and are not among them). */
#include "http_int.h"
#include "auth.h"

#include "ui_assets.h"

enum MHD_Result ui_page(req_ctx *ctx, const char *method, const char *name)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(ui_dashboard_html_len, (void *)ui_dashboard_html,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* Nothing from elsewhere: the page's own script and style, and calls
     * to this service only. And in no frame of another page, whose
     * overlay could steer a click onto a force release (X-Frame-Options
     * for browsers that predate frame-ancestors). */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src data:; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    return http_send_response(ctx, 200, r);
}

/* Gathers every loop's waiters (each engine's index is its loop's own),
 * then answers. */
typedef struct ui_gather {
    req_ctx *ctx;
    pthread_mutex_t lock;
    int left;                   /* loops still to count */
    cJSON *waiters;             /* [{"kind" (lock, election),"name","waiters"}] */
    const principal *who;       /* the caller: only names it may read are shown (NULL: all) */
} ui_gather;

typedef struct ui_job {
    ui_gather *g;
    rl_engine *e;
} ui_job;

static void add_waiters(void *arg, const char *name, int n)
{
    ui_gather *g = arg;
    const char *sep = strstr(name, RULES_SEP), *kind = "lock";
    size_t len = strlen(name);
    if (sep) {
        const char *tail = sep + strlen(RULES_SEP);
        if (strcmp(tail, "election"))
            return;   /* (a semaphore's slots are tried without waiting in the engine) */
        kind = "election";
        len = (size_t)(sep - name);
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(g->waiters, o)) {
        cJSON_Delete(o);
        return;
    }
    char buf[RL_INTERNAL_NAME_MAX + 1];
    snprintf(buf, sizeof buf, "%.*s", (int)len, name);
    if (g->who && !principal_may(g->who, RIGHT_READ, buf)) {
        cJSON_DetachItemViaPointer(g->waiters, o);
        cJSON_Delete(o);
        return;   /* not the caller's to see */
    }
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddStringToObject(o, "name", buf);
    jsonio_add_int(o, "waiters", n);
}

static char *state_json(http_server *s, cJSON *waiters)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON *masters = cJSON_AddArrayToObject(o, "masters");
    for (int i = 0; masters && i < mpool_size(s->pool); i++) {
        master_status st;
        http_master_status(s, i, &st);
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddItemToArray(masters, m)) {
            cJSON_Delete(m);
            break;
        }
        cJSON_AddStringToObject(m, "addr", st.addr);
        cJSON_AddBoolToObject(m, "up", st.up);
        cJSON_AddBoolToObject(m, "quarantined", st.quarantined);
        jsonio_add_int(m, "quarantine_left_ms", st.quarantine_left_ms);
        cJSON_AddBoolToObject(m, "refusing", st.refusing);
        cJSON_AddStringToObject(m, "refusal", st.refusal);
        cJSON_AddStringToObject(m, "reason", st.reason);
        jsonio_add_int(m, "replies", (long long)st.replies);
        jsonio_add_int(m, "reply_us_sum", (long long)st.reply_us_sum);
    }
    metrics_rate rates[METRICS_RATE_SECONDS];
    metrics_rates(s->m, (long long)time(NULL), rates);
    cJSON *arr = cJSON_AddArrayToObject(o, "rates");
    for (int i = 0; arr && i < METRICS_RATE_SECONDS; i++) {
        cJSON *r = cJSON_CreateObject();
        if (!r || !cJSON_AddItemToArray(arr, r)) {
            cJSON_Delete(r);
            break;
        }
        jsonio_add_int(r, "t", rates[i].t);
        jsonio_add_int(r, "grants", rates[i].grants);
        jsonio_add_int(r, "conflicts", rates[i].conflicts);
        jsonio_add_int(r, "unavailable", rates[i].unavailable);
    }
    cJSON_AddItemToObject(o, "waiters", waiters);
    return jsonio_print_free(o);
}

static void gather_done(ui_gather *g)
{
    req_ctx *ctx = g->ctx;
    ctx->list_body = state_json(ctx->s, g->waiters);
    http_ctx_resume(ctx, &(rl_result){.outcome = ctx->list_body ? RL_OK : RL_INTERNAL}, NULL);
    http_ctx_unref(ctx);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static void gather_on_loop(void *arg)
{
    ui_job *job = arg;
    ui_gather *g = job->g;
    pthread_mutex_lock(&g->lock);
    rl_engine_waiters(job->e, add_waiters, g);
    bool last = --g->left == 0;
    pthread_mutex_unlock(&g->lock);
    free(job);
    if (last)
        gather_done(g);
}

enum MHD_Result ui_state(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    ui_gather *g = calloc(1, sizeof *g);
    cJSON *waiters = cJSON_CreateArray();
    if (!g || !waiters) {
        free(g);
        cJSON_Delete(waiters);
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    }
    pthread_mutex_init(&g->lock, NULL);
    g->ctx = ctx;
    g->waiters = waiters;
    g->who = auth_closed() ? ctx->principal : NULL;
    g->left = s->nshards;
    http_suspend_for_engine(ctx, http_list_answer);
    atomic_fetch_add(&ctx->refs, 1);   /* gather_done's */
    for (int k = 0; k < s->nshards; k++) {
        ui_job *job = malloc(sizeof *job);
        if (job)
            *job = (ui_job){g, s->shards[k].engine};
        if (!job || rl_engine_post(s->shards[k].engine, gather_on_loop, job) < 0) {
            free(job);   /* a loop stopping (or no memory): counted as done, with none */
            pthread_mutex_lock(&g->lock);
            bool last = --g->left == 0;
            pthread_mutex_unlock(&g->lock);
            if (last)
                gather_done(g);
        }
    }
    return MHD_YES;
}
