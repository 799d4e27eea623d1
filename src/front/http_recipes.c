/* http_recipes.c - the election and semaphore routes (http_int.h). */
#include "http_int.h"

/* ---- elections (docs/elections.md; the pure parts in election.c) ---- */

static void watch_cleanup(req_ctx *ctx, bool completed_ok)
{
    election_watch_close(ctx->watch);
}

/* The answer to an election's GET, DELETE or PUT, as the engine gave it. */
enum MHD_Result http_election_answer(req_ctx *ctx)
{
    http_audit_result(ctx);
    if (ctx->w->req.op == RL_INSPECT && ctx->w->res.outcome == RL_OK) {
        election_state st;
        election_state_of(&ctx->w->res, &st);
        char *body = election_state_json(ctx->w->label, &st, ctx->w->candidate_q[0] ? ctx->w->candidate_q : NULL);
        if (!body)
            return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
        return http_send_body(ctx, 200, body, NULL, 0, true);
    }
    rl_request shown = ctx->w->req;   /* errors name the election, not its lock */
    snprintf(shown.name, sizeof shown.name, "%s", ctx->w->label);
    int status;
    long long retry_after_s = 0;
    char *body = api_result_json(&shown, &ctx->w->res, &status, &retry_after_s);
    if (!body && status != 204)
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return http_send_body(ctx, status, body, NULL, retry_after_s, true);
}

/* POST: a campaign, answered at once with its stream ("campaigning"). */
static enum MHD_Result election_campaign(req_ctx *ctx)
{
    http_server *s = ctx->s;
    char candidate[ELECTION_CANDIDATE_MAX + 1], value[ELECTION_VALUE_MAX + 1], msg[200];
    if (election_parse_campaign(ctx->body ? ctx->body : "", ctx->body_len, s->limits.default_ttl_ms,
                                s->limits.max_ttl_ms, &ctx->w->req, candidate, value, msg, sizeof msg) < 0)
        return http_send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    election_lock_name(ctx->w->label, ctx->w->req.name, sizeof ctx->w->req.name);
    election_owner(candidate, value, ctx->w->req.owner, sizeof ctx->w->req.owner);
    if (!hold_reserve(s->holds))
        return http_too_many_holds(ctx);
    http_hold_attach(ctx, hold_campaign(s->holds, http_engine_for(ctx), &ctx->w->req, ctx->w->label, candidate,
                                        ctx->ci ? ctx->ci->fd : -1, http_hold_wake, ctx));
    if (!ctx->hold) {
        hold_unreserve(s->holds);
        return http_stream_refused(ctx);
    }
    return http_stream_answer(ctx, 201);
}

enum MHD_Result http_election_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    size_t len = strlen(name);
    if (!rules_name_valid(name, len))
        return http_send_error(ctx, API_E_BAD_NAME,
                          "the election name must be " API_NAME_RULE, NULL);
    memcpy(ctx->w->label, name, len + 1);
    ctx->election = true;
    memset(&ctx->w->req, 0, sizeof ctx->w->req);
    if (!strcmp(method, "POST"))
        return election_campaign(ctx);
    election_lock_name(ctx->w->label, ctx->w->req.name, sizeof ctx->w->req.name);
    char msg[200];
    if (!strcmp(method, "GET")) {
        char watch_buf[HTTP_QUERY_ARG_MAX];
        const char *watch = http_query_arg(ctx, "watch", watch_buf, sizeof watch_buf);
        char cand_buf[HTTP_QUERY_ARG_MAX];
        const char *cand = http_query_arg(ctx, "candidate", cand_buf, sizeof cand_buf);
        if (cand && !election_candidate_valid(cand))
            return http_send_error(ctx, API_E_BAD_REQUEST, "candidate is not a possible candidate", NULL);
        if (cand)
            snprintf(ctx->w->candidate_q, sizeof ctx->w->candidate_q, "%s", cand);
        if (watch && strcmp(watch, "true") && strcmp(watch, "false"))
            return http_send_error(ctx, API_E_BAD_REQUEST, "watch must be true or false", NULL);
        if (watch && !strcmp(watch, "true")) {
            /* A watch is a stream: it takes a place among --max-holds, kept
             * until the connection ends (http_on_completed gives it back). */
            if (!http_reserve_hold(ctx))
                return http_too_many_holds(ctx);
            ctx->watch = election_watch_start(ctx->sh->engine, ctx->sh->pool, ctx->w->req.name,
                                              ctx->w->label, http_hold_wake, ctx);
            if (!ctx->watch)
                return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
            http_on_cleanup(ctx, watch_cleanup);
            return http_stream_answer(ctx, 200);
        }
        ctx->w->req.op = RL_INSPECT;
        ctx->w->req.queued = true;   /* a place among --max-inflight, as a lock's GET */
        return http_submit(ctx, http_election_answer);
    }
    bool token_in_body = false;
    if (!strcmp(method, "PUT")) {
        ctx->w->req.op = RL_PROCLAIM;
        if (election_parse_value(ctx->body ? ctx->body : "", ctx->body_len, ctx->w->req.owner,
                                 ctx->w->req.token, msg, sizeof msg) < 0)
            return http_send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
        token_in_body = ctx->w->req.token[0] != '\0';
    } else {   /* DELETE: resign */
        enum api_err err;
        if (api_parse_body(RL_RELEASE, ctx->body ? ctx->body : "", ctx->body_len, &s->limits, &ctx->w->req,
                           &token_in_body, &err, msg, sizeof msg) < 0)
            return http_send_error(ctx, err, msg, NULL);
        election_lock_name(ctx->w->label, ctx->w->req.name, sizeof ctx->w->req.name);
    }
    if (http_pick_token(ctx, token_in_body, msg, sizeof msg) < 0)
        return http_send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    return http_submit(ctx, http_election_answer);
}

/* ---- semaphores (docs/semaphores.md; the pure parts in semaphore_api.c) ---- */

/* The semaphore's answer, on an engine's thread: resumes the connection,
 * unless a shutdown answered it already (then what it won goes back). */
static void sem_done(void *arg, const sem_result *res)
{
    req_ctx *ctx = arg;
    http_server *s = ctx->s;
    if (ctx->on_permits)
        ctx->on_permits(ctx, res);
    for (int i = 0; ctx->sem->op == SEM_RELEASE && i < res->npermits; i++) {
        /* a permit kept by a held stream: the stream ends with "released" */
        int slot;
        char token[TOKEN_MAX_LEN + 1], slot_name[RL_INTERNAL_NAME_MAX + 1];
        if (sem_token_split(res->permits[i].token, SEM_LIMIT_MAX, &slot, token, sizeof token)) {
            sem_slot_name(ctx->sem->name, slot, slot_name, sizeof slot_name);
            hold_released(s->holds, slot_name, token);
        }
    }
    rl_result outcome = {.outcome = res->outcome};
    if (!http_ctx_resume(ctx, &outcome, res) && ctx->sem->op == SEM_ACQUIRE && res->outcome == RL_OK)
        http_sem_give_back(s, ctx->sh->pool, ctx->sem->name, res);
    http_ctx_unref(ctx);
}

/* A permit taken with "hold": a 201 whose body is the held stream of its
 * slot's lock. */
static enum MHD_Result sem_hold_answer(req_ctx *ctx)
{
    http_server *s = ctx->s;
    const sem_permit *p = &ctx->sem_res->permits[0];
    rl_request slot = {.op = RL_ACQUIRE, .ttl_ms = ctx->sem_res->ttl_ms};
    rl_result grant = {.outcome = RL_OK, .ttl_ms = ctx->sem_res->ttl_ms, .fence = p->fence,
                       .validity_ms = p->validity_ms};
    hold_permit_of of = {.limit = ctx->sem->limit, .slot = p->slot};
    int slot_no;
    sem_token_split(p->token, SEM_LIMIT_MAX, &slot_no, grant.token, sizeof grant.token);
    sem_slot_name(ctx->sem->name, p->slot, slot.name, sizeof slot.name);
    snprintf(slot.owner, sizeof slot.owner, "%s", ctx->sem->owner);   /* a repair's owner record */
    slot.heartbeat_ms = ctx->sem->heartbeat_ms;
    sem_limit_name(ctx->sem->name, of.limit_name, sizeof of.limit_name);
    snprintf(of.semaphore, sizeof of.semaphore, "%s", ctx->sem->name);
    of.limit_engine = http_engine_of_name(s, of.limit_name);
    /* The validity counts from the request's arrival: earlier than the
     * slot's own acquire, so never more than the masters hold. */
    http_hold_attach(ctx, hold_permit(s->holds, http_engine_of_name(s, slot.name), &slot, &grant, ctx->start_us, &of,
                                      ctx->ci ? ctx->ci->fd : -1, http_hold_wake, ctx));
    if (!ctx->hold) {
        http_sem_give_back(s, ctx->sh->pool, ctx->sem->name, ctx->sem_res);
        ctx->forced = true;   /* (http_on_completed gives nothing back twice) */
        return http_stream_refused(ctx);
    }
    ctx->hold_reserved = false;   /* the reservation is the hold now */
    return http_stream_answer(ctx, 201);
}

/* The audit log's lines for a semaphore's answer. */
static void audit_sem(req_ctx *ctx)
{
    const sem_result *r = ctx->sem_res;
    const char *name = ctx->sem->name;
    if (ctx->sem->op == SEM_ACQUIRE && r->outcome == RL_OK)
        for (int i = 0; i < r->npermits; i++)
            http_audit(ctx, "grant", "201", name, r->permits[i].fence);
    else if (ctx->sem->op == SEM_RELEASE && r->outcome == RL_OK)
        http_audit(ctx, "release", "204", name, 0);
    else if (ctx->sem->op == SEM_EXTEND && r->outcome != RL_OK)
        http_audit(ctx, "extend_failed", r->outcome == RL_NOT_HELD ? "409" : "503", name, 0);
    else if (ctx->sem->op == SEM_FORCE && r->outcome == RL_OK)
        http_audit(ctx, "force", "204", name, 0);
}

enum MHD_Result http_sem_answer(req_ctx *ctx)
{
    if (ctx->forced)
        return http_send_error(ctx, API_E_SHUTTING_DOWN, "the service is shutting down", NULL);
    audit_sem(ctx);
    bool granted = ctx->sem->op == SEM_ACQUIRE && ctx->sem_res->outcome == RL_OK;
    if (granted && ctx->sem->hold)
        return sem_hold_answer(ctx);
    /* As for a lock (http_lock_answer): permits nobody will read are not sent
     * (http_on_completed gives them back); to a client that sent its FIN they
     * are, and the watcher learns whether they arrived (delivery_check). */
    if (granted && ctx->ci && http_client_gone(ctx->ci->fd)) {
        ctx->gone = true;
        return MHD_NO;
    }
    if (granted && ctx->ci && http_client_done_sending(ctx->ci->fd))
        ctx->confirm_fd = fcntl(ctx->ci->fd, F_DUPFD_CLOEXEC, 0);
    if (ctx->sem->op == SEM_ACQUIRE && !ctx->sem->hold && ctx->sem_res->outcome == RL_LOCKED &&
        !ctx->sem_res->limit_mismatch &&
        testhook_breaks(TESTHOOK_OVER_LIMIT)) {
        /* Test hook: permits that are none, past the limit (REDLOCKD_TEST_BREAK). */
        sem_result *res = ctx->sem_res;
        res->outcome = RL_OK;
        res->npermits = ctx->sem->permits;
        res->ttl_ms = ctx->sem->ttl_ms;
        res->validity_ms = ctx->sem->ttl_ms - 1;
        for (int i = 0; i < res->npermits; i++) {
            sem_permit *p = &res->permits[i];
            char t[TOKEN_TEXT_LEN + 1];
            if (token_new(t) < 0)
                snprintf(t, sizeof t, "over-limit");
            p->slot = ctx->sem->limit + i;
            snprintf(p->token, sizeof p->token, "%d:%s", p->slot, t);
            p->fence = loop_unix_us();
            p->validity_ms = res->validity_ms;
        }
    }
    int status;
    long long retry_after_s = 0;
    char *body = api_sem_result_json(ctx->sem, ctx->sem_res, &status, &retry_after_s);
    if (!body && status != 204)
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    return http_send_body(ctx, status, body, NULL, retry_after_s, true);
}

enum MHD_Result http_sem_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    if (!rules_name_valid(name, strlen(name)))
        return http_send_error(ctx, API_E_BAD_NAME,
                          "the semaphore name must be " API_NAME_RULE, NULL);
    ctx->sem = calloc(1, sizeof *ctx->sem);
    ctx->sem_res = calloc(1, sizeof *ctx->sem_res);
    if (!ctx->sem || !ctx->sem_res)
        return http_send_error(ctx, API_E_INTERNAL, "out of memory", NULL);
    sem_request *r = ctx->sem;
    snprintf(r->name, sizeof r->name, "%s", name);
    char msg[200];
    const char *body = ctx->body ? ctx->body : "";
    int rc = 0;
    if (!strcmp(method, "POST")) {
        rc = api_sem_parse_acquire(body, ctx->body_len, &s->limits, r, msg, sizeof msg);
    } else if (!strcmp(method, "GET")) {
        r->op = SEM_INSPECT;
        char limit_buf[HTTP_QUERY_ARG_MAX];
        const char *limit = http_query_arg(ctx, "limit", limit_buf, sizeof limit_buf);
        char *end = NULL;
        long l = limit ? strtol(limit, &end, 10) : 0;
        if (limit && (!*limit || *end || l < 1 || l > SEM_LIMIT_MAX)) {
            snprintf(msg, sizeof msg, "limit must be a whole number from 1 to %d", SEM_LIMIT_MAX);
            rc = -1;
        }
        r->limit = (int)l;
    } else {
        const char *hdr = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "Lock-Token");
        char query_buf[HTTP_QUERY_ARG_MAX];
        const char *query = http_query_arg(ctx, "token", query_buf, sizeof query_buf);
        rc = api_sem_parse_tokens(!strcmp(method, "PATCH"), hdr, query, body, ctx->body_len, &s->limits, r, msg,
                              sizeof msg);
    }
    if (rc < 0)
        return http_send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    if (r->hold && !http_reserve_hold(ctx))
        return http_too_many_holds(ctx);
    return http_sem_start(ctx);
}

enum MHD_Result http_sem_start(req_ctx *ctx)
{
    http_server *s = ctx->s;
    http_suspend_for_engine(ctx, http_sem_answer);   /* the answer may come at once */
    atomic_fetch_add(&ctx->refs, 1);   /* sem_done's */
    if (sem_submit(ctx->sem, http_engine_of_name, s, ctx->sh->pool, sem_done, ctx, &ctx->semh) < 0) {
        atomic_fetch_sub(&ctx->refs, 1);
        rl_result down = {.outcome = RL_SHUTTING_DOWN};
        http_ctx_resume(ctx, &down, NULL);
        ctx->forced = true;
    }
    return MHD_YES;
}

/* ---- heartbeats (hold.h) ---- */

/* PUT /{locks,elections,semaphores}/{name}/heartbeat with the stream's
 * token: 204 when the stream is here; else 202, passed on as a notice on
 * the name's channel to the instance that keeps it. */
enum MHD_Result http_heartbeat_dispatch(req_ctx *ctx, const char *method, const char *name)
{
    http_server *s = ctx->s;
    size_t len = strlen(name);
    char kind = ctx->beat_kind;
    if (!rules_name_valid(name, len))
        return http_send_error(ctx, API_E_BAD_NAME, "the name must be " API_NAME_RULE, NULL);
    char label[RL_NAME_MAX + 1], msg[200], token[TOKEN_MAX_LEN + 1];
    memcpy(label, name, len + 1);
    bool token_in_body;
    enum api_err err;
    rl_request pub = {.op = RL_PUBLISH};
    if (api_parse_body(RL_RELEASE, ctx->body ? ctx->body : "", ctx->body_len, &s->limits, &ctx->w->req, &token_in_body,
                       &err, msg, sizeof msg) < 0)
        return http_send_error(ctx, err, msg, NULL);
    if (http_pick_token(ctx, token_in_body, msg, sizeof msg) < 0)
        return http_send_error(ctx, API_E_BAD_REQUEST, msg, NULL);
    snprintf(token, sizeof token, "%s", ctx->w->req.token);
    if (kind == 'l') {
        snprintf(pub.name, sizeof pub.name, "%s", label);
    } else if (kind == 'e') {
        election_lock_name(label, pub.name, sizeof pub.name);
    } else {
        int slot;
        if (!sem_token_split(ctx->w->req.token, SEM_LIMIT_MAX, &slot, token, sizeof token))
            return http_send_error(ctx, API_E_BAD_REQUEST, "the token must be a permit's (\"<slot>:<token>\")", NULL);
        sem_slot_name(label, slot, pub.name, sizeof pub.name);
        sem_limit_name(label, pub.notice_name, sizeof pub.notice_name);   /* a permit's channel */
    }
    if (hold_heartbeat(s->holds, pub.name, token, strlen(token)))
        return http_send_body(ctx, 204, NULL, NULL, 0, true);
    if (atomic_load(&s->quiescing))
        return http_send_error(ctx, API_E_SHUTTING_DOWN, "the service is shutting down", NULL);
    snprintf(pub.token, sizeof pub.token, "%s", token);
    if (rl_submit(http_engine_of_name(s, pub.name), &pub, NULL, NULL, NULL) < 0)
        return http_send_error(ctx, API_E_SHUTTING_DOWN, "the service is shutting down", NULL);
    return http_send_body(ctx, 202, NULL, NULL, 0, true);
}
