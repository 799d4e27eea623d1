/* http_ops.c - /readyz and /metrics (http_int.h). */
#include "http_int.h"

/* ---- operational routes ---- */

/* Master i as every loop sees it (each has its own connection): up only
 * where up on every loop, quarantined where any loop found it so, counters
 * summed. */
void http_master_status(http_server *s, int i, master_status *out)
{
    mpool_status(s->shards[0].pool, i, out);
    for (int k = 1; k < s->nshards; k++) {
        master_status o;
        mpool_status(s->shards[k].pool, i, &o);
        out->up &= o.up;
        out->subscribed &= o.subscribed;
        if (o.quarantined) {
            out->quarantined = true;
            if (o.quarantine_left_ms > out->quarantine_left_ms)
                out->quarantine_left_ms = o.quarantine_left_ms;
        }
        if (o.marker < out->marker)
            out->marker = o.marker;
        if (!out->policy[0])
            memcpy(out->policy, o.policy, sizeof out->policy);
        if (out->persistence == 0)
            out->persistence = o.persistence;
        out->may_lose_locks |= o.may_lose_locks;
        if (o.restarts > out->restarts)
            out->restarts = o.restarts;
        out->errors += o.errors;
        out->replies += o.replies;
        out->refusals += o.refusals;
        if (!out->reason[0])
            memcpy(out->reason, o.reason, sizeof out->reason);
        if (o.refusing && !out->refusing) {
            out->refusing = true;
            memcpy(out->refusal, o.refusal, sizeof out->refusal);
        }
        out->reply_us_sum += o.reply_us_sum;
        out->late_replies += o.late_replies;
    }
}

enum MHD_Result http_serve_readyz(req_ctx *ctx, const char *method, const char *name)
{
    mpool *p = ctx->s->pool;
    /* /readyz is open; a master's reason is the server's text, which can
     * name an ACL user or a rule: without the token (when there is one) a
     * caller gets its class only. */
    const char *want = ctx->s->cfg->auth_token;
    bool full = !want || http_secret_is(want, http_bearer(ctx));
    int n = mpool_size(p), up = 0, voting = 0, refusing = 0, quarantined = 0, marked = 0;
    char refusal[sizeof ((master_status *)0)->refusal] = "";
    char down[sizeof ((master_status *)0)->addr + sizeof ((master_status *)0)->reason + 4] = "";
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "masters") : NULL;
    for (int i = 0; arr && i < n; i++) {
        master_status st;
        http_master_status(ctx->s, i, &st);
        up += st.up;
        voting += st.up && !st.quarantined && !st.refusing;
        refusing += st.refusing;
        quarantined += st.quarantined;
        marked += st.marker == QMARK_PENDING || st.marker == QMARK_READY;
        if (st.refusing && !refusal[0])
            memcpy(refusal, st.refusal, sizeof refusal);
        const char *reason = full ? st.reason : api_reason_class(st.reason);
        if (!st.up && st.reason[0] && !down[0])
            snprintf(down, sizeof down, "%s: %s", st.addr, reason);
        cJSON *mo = cJSON_CreateObject();
        if (!mo)
            break;
        cJSON_AddStringToObject(mo, "addr", st.addr);
        cJSON_AddBoolToObject(mo, "up", st.up);
        if (!st.up && st.reason[0])
            cJSON_AddStringToObject(mo, "reason", reason);
        cJSON_AddBoolToObject(mo, "tls", st.tls);
        cJSON_AddBoolToObject(mo, "quarantined", st.quarantined);
        cJSON_AddBoolToObject(mo, "notices", st.subscribed);
        cJSON_AddBoolToObject(mo, "refusing", st.refusing);
        if (st.refusing)
            cJSON_AddStringToObject(mo, "refusal", st.refusal);
        if (st.quarantined)
            jsonio_add_int(mo, "quarantine_left_ms", st.quarantine_left_ms);
        static const char *const markers[] = {"unknown", "missing", "pending", "ready"};
        static const char *const persist[] = {"unknown", "off", "always", "everysec", "no"};
        cJSON_AddStringToObject(mo, "marker", markers[st.marker + 1]);
        cJSON_AddStringToObject(mo, "persistence", persist[st.persistence]);
        cJSON_AddStringToObject(mo, "maxmemory_policy", st.policy[0] ? st.policy : "unknown");
        cJSON_AddBoolToObject(mo, "may_lose_locks", st.may_lose_locks);
        cJSON_AddItemToArray(arr, mo);
    }
    if (!arr) {
        cJSON_Delete(o);
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    }
    /* Ready when a majority can vote: quarantined masters answer but do not count. */
    bool ready = voting >= quorum_of(n);
    cJSON_AddStringToObject(o, "status", ready ? "ready" : "not_ready");
    if (!ready) {
        char why[600];
        if (quarantined && !marked)
            snprintf(why, sizeof why, "the masters are not set up as one cluster yet: set-up needs "
                     "every master to answer, and %d of %d do", up, n);
        else if (refusing)
            snprintf(why, sizeof why, "%d of %d masters answer lock commands with an error (%s)",
                     refusing, n, refusal);
        else if (quarantined)
            snprintf(why, sizeof why, "%d of %d masters sit out in restart quarantine", quarantined, n);
        else
            snprintf(why, sizeof why, "%d of %d masters answer%s%s", up, n, down[0] ? "; " : "", down);
        cJSON_AddStringToObject(o, "reason", why);
    }
    jsonio_add_int(o, "masters_up", up);
    jsonio_add_int(o, "masters_voting", voting);
    jsonio_add_int(o, "masters_refusing", refusing);
    jsonio_add_int(o, "masters_total", n);
    jsonio_add_int(o, "quorum", quorum_of(n));
    char *body = jsonio_print_free(o);
    return http_send_body(ctx, ready ? 200 : 503, body, NULL, 0, true);
}

/* A master_status field as a sample's value. */
#define MASTER_VALUE(field) \
    static unsigned long long value_##field(const master_status *st) { return (unsigned long long)st->field; }
MASTER_VALUE(up)
MASTER_VALUE(errors)
MASTER_VALUE(quarantined)
MASTER_VALUE(restarts)
MASTER_VALUE(subscribed)
MASTER_VALUE(may_lose_locks)
MASTER_VALUE(refusing)
MASTER_VALUE(refusals)
MASTER_VALUE(late_replies)

/* The per-master families of /metrics: one sample per master each. */
static const struct {
    const char *name, *type, *help;
    unsigned long long (*value)(const master_status *st);
} master_families[] = {
    {"redlockd_master_up", "gauge", "1 while the master answers PING on its connection.", value_up},
    {"redlockd_master_errors_total", "counter", "Connections to the master lost, refused or timed out.",
     value_errors},
    {"redlockd_master_quarantined", "gauge", "1 while the master is in restart quarantine (its votes do not count).",
     value_quarantined},
    {"redlockd_master_restarts_total", "counter", "Restarts of the master seen (its run_id changed).",
     value_restarts},
    {"redlockd_master_notices_up", "gauge", "1 while subscribed to the master's release notices.", value_subscribed},
    {"redlockd_master_may_lose_locks", "gauge",
     "1 while the master may lose locks: maxmemory-policy other than noeviction, or appendonly off.",
     value_may_lose_locks},
    {"redlockd_master_refusing", "gauge",
     "1 while the master answers lock commands with an error (OOM, READONLY, NOPERM ...).", value_refusing},
    {"redlockd_master_refusals_total", "counter", "Lock commands the master answered with an error.",
     value_refusals},
    {"redlockd_master_late_replies_total", "counter",
     "Replies that came after their command was due (--master-timeout-ms from when it was "
     "written): the master itself was slow. Compare redlockd_loop_stalls_total.",
     value_late_replies},
};

enum MHD_Result http_serve_metrics(req_ctx *ctx, const char *method, const char *name)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = metrics_render(ctx->s->m, &buf, &len, &cap);
    mpool *p = ctx->s->pool;
    int n = mpool_size(p);
    master_status st[MASTER_MAX];
    for (int i = 0; i < n; i++)
        http_master_status(ctx->s, i, &st[i]);
    for (size_t f = 0; f < sizeof master_families / sizeof master_families[0]; f++) {
        rc |= metrics_appendf(&buf, &len, &cap, "# HELP %s %s\n# TYPE %s %s\n", master_families[f].name,
                              master_families[f].help, master_families[f].name, master_families[f].type);
        for (int i = 0; i < n; i++)
            rc |= metrics_appendf(&buf, &len, &cap, "%s{master=\"%s\"} %llu\n", master_families[f].name,
                                  st[i].addr, master_families[f].value(&st[i]));
    }
    rc |= metrics_appendf(&buf, &len, &cap,
                          "# HELP redlockd_master_reply_seconds Time from sending a command to its reply.\n"
                          "# TYPE redlockd_master_reply_seconds summary\n");
    for (int i = 0; i < n; i++)
        rc |= metrics_appendf(&buf, &len, &cap,
                              "redlockd_master_reply_seconds_sum{master=\"%s\"} %.6f\n"
                              "redlockd_master_reply_seconds_count{master=\"%s\"} %llu\n",
                              st[i].addr, (double)st[i].reply_us_sum / 1e6, st[i].addr, st[i].replies);
    /* The loops' own stalls: a starved or paused process, as opposed to a
     * slow master (redlockd_master_late_replies_total). */
    unsigned long long stalls = 0, stall_us = 0;
    for (int k = 0; k < ctx->s->nshards; k++) {
        unsigned long long c, us;
        loop_stalls(mpool_loop(ctx->s->shards[k].pool), &c, &us);
        stalls += c;
        stall_us += us;
    }
    rc |= metrics_appendf(&buf, &len, &cap,
                          "# HELP redlockd_loop_stalls_total Times an event loop could not look at its "
                          "sockets for more than 20 ms past when it meant to (a pause, a CPU quota "
                          "spent, a long turn); replies that came meanwhile still count as on time.\n"
                          "# TYPE redlockd_loop_stalls_total counter\n"
                          "redlockd_loop_stalls_total %llu\n"
                          "# HELP redlockd_loop_stall_seconds_total Time of those stalls past the "
                          "first 20 ms of each.\n"
                          "# TYPE redlockd_loop_stall_seconds_total counter\n"
                          "redlockd_loop_stall_seconds_total %.6f\n",
                          stalls, (double)stall_us / 1e6);
    if (rc) {
        free(buf);
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    }
    return http_send_body(ctx, 200, buf, NULL, 0, false);
}
