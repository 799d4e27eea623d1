/* grpc.c - see grpc.h; this file holds the calls, grpc_conns.c the
 * connections (grpc_int.h). */
#include "grpc_int.h"

/* ---- the engine's side ---- */

void grpc_wake(grpc_server *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->wake_fd, &one, sizeof one);
    (void)n;   /* EAGAIN: the counter is already nonzero, the thread wakes anyway */
}

void grpc_call_unlink(grpc_server *s, gcall *call)
{
    DLIST_UNLINK(s->calls, call, prev, next);
}

/* Engine callback, on the engine's loop thread. */
static void call_done(void *arg, const rl_result *res)
{
    gcall *call = arg;
    grpc_server *s = call->s;
    pthread_mutex_lock(&s->mu);
    call->res = *res;
    s->inflight--;
    if (s->stopped) {   /* nobody to answer: a grant is released at once */
        grpc_call_unlink(s, call);
        pthread_mutex_unlock(&s->mu);
        rl_finish(call->eng, call->h, false);
        free(call);
        return;
    }
    call->next_done = s->done;
    s->done = call;
    pthread_mutex_unlock(&s->mu);
    grpc_wake(s);
}

/* ---- answers (gRPC thread) ---- */

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* A trailers-only answer: the status, no message. */
static void answer_status(gstream *st, int code, const char *message)
{
    char enc[600], cs[12];
    grpc_api_percent_encode(message ? message : "", enc, sizeof enc);
    snprintf(cs, sizeof cs, "%d", code);
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-status", cs), NV("grpc-message", enc)};
    nghttp2_submit_response(st->c->sess, st->id, nva, message ? 4 : 3, NULL);
    st->answer_us = loop_now_us();
}

/* Not gRPC at all: a bare HTTP status (415 for another content type, as the
 * gRPC wire spec asks; 405 for another method). */
static void answer_http(gstream *st, const char *status)
{
    nghttp2_nv nva[] = {NV(":status", status), NV("content-type", "application/grpc"),
                        NV("grpc-status", "12"), NV("grpc-message", "only%20gRPC%20calls%20are%20served%20here")};
    nghttp2_submit_response(st->c->sess, st->id, nva, 4, NULL);
    st->answer_us = loop_now_us();
}

static ssize_t read_answer(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    gstream *st = src->ptr;
    (void)ud;
    size_t n = st->resp_len - st->resp_off;
    if (n > length)
        n = length;
    memcpy(buf, st->resp + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off == st->resp_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        nghttp2_nv t[] = {NV("grpc-status", "0")};
        if (nghttp2_submit_trailer(sess, id, t, 1) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

/* Headers, the message (owned from here on), then grpc-status 0. */
static bool answer_message(gstream *st, uint8_t *msg, size_t len)
{
    free(st->resp);
    st->resp = msg;
    st->resp_len = len;
    st->resp_off = 0;
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_answer};
    if (nghttp2_submit_response(st->c->sess, st->id, nva, 2, &prd) != 0)
        return false;
    st->answer_us = loop_now_us();
    return true;
}

/* ---- calls (gRPC thread) ---- */

/* The principal whose token got is (auth.h), or NULL. */
static const principal *token_principal(const uint8_t *got, size_t gl)
{
    char token[RULES_TOKEN_MAX * 2 + 1];
    if (gl >= sizeof token)
        return NULL;
    memcpy(token, got, gl);
    token[gl] = '\0';
    const principal *p = auth_who(NULL, token);
    explicit_bzero(token, gl);
    return p;
}

/* The route table's row that serves the same operation over HTTP. */
static enum api_route route_of(enum grpc_method m)
{
    return m == GRPC_M_TRY_LOCK ? ROUTE_DAPR_LOCK : m == GRPC_M_UNLOCK ? ROUTE_DAPR_UNLOCK : ROUTE_DAPR_METADATA;
}

/* A line of the audit log for st's call. */
static void audit(const gstream *st, const char *event, const char *outcome, const char *name, long long fence)
{
    if (!audit_on())
        return;
    char client[INET6_ADDRSTRLEN + 2] = "unknown";
    if (st->c->unix_client) {
        snprintf(client, sizeof client, "unix");
    } else if (st->c->has_peer) {
        const uint8_t *b = st->c->peer.b;
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, v4, 12))
            inet_ntop(AF_INET, b + 12, client, sizeof client);
        else
            inet_ntop(AF_INET6, b, client, sizeof client);
    }
    const char *route = st->method == GRPC_M_TRY_LOCK ? "grpc TryLockAlpha1"
                        : st->method == GRPC_M_UNLOCK ? "grpc UnlockAlpha1" : "grpc GetMetadata";
    audit_event ev = {.event = event, .principal = st->who ? st->who->name : NULL, .client = client,
                      .route = route, .name = name, .outcome = outcome, .fence = fence};
    audit_write(&ev);
}

static void submit_call(gstream *st, const rl_request *req)
{
    grpc_server *s = st->c->s;
    gcall *call = calloc(1, sizeof *call);
    if (!call) {
        answer_status(st, GRPC_INTERNAL, "out of memory");
        return;
    }
    call->s = s;
    call->st = st;
    call->method = st->method;
    snprintf(call->name, sizeof call->name, "%s", req->name);
    call->eng = s->loops[s->nloops == 1 ? 0 : http_loop_of(req->name, s->nloops)].engine;
    pthread_mutex_lock(&s->mu);
    DLIST_PUSH(s->calls, call, prev, next);
    s->inflight++;
    pthread_mutex_unlock(&s->mu);
    st->call = call;
    if (rl_submit(call->eng, req, call_done, call, &call->h) < 0) {
        pthread_mutex_lock(&s->mu);
        grpc_call_unlink(s, call);
        s->inflight--;
        pthread_mutex_unlock(&s->mu);
        free(call);
        st->call = NULL;
        answer_status(st, GRPC_UNAVAILABLE, "the lock service is stopping");
    }
}

/* The request has ended: answer it now, or hand it to the engine. */
static void dispatch(gstream *st)
{
    grpc_server *s = st->c->s;
    st->dispatched = true;
    /* Only a call with the token (or any, when none is configured) earns
     * the idle timeout; one without stays under the request timeout, so
     * token-less clients cannot keep slots (issue 41). */
    if (st->auth_ok)
        st->c->served = true;
    if (!st->post) {
        answer_http(st, "405");
        return;
    }
    if (!st->grpc_ct) {
        answer_http(st, "415");
        return;
    }
    if (st->method == GRPC_M_UNKNOWN) {
        answer_status(st, GRPC_UNIMPLEMENTED, "redlockd serves only TryLockAlpha1, UnlockAlpha1 "
                      "and GetMetadata of dapr.proto.runtime.v1.Dapr");
        return;
    }
    if (!st->auth_ok) {
        audit(st, "refused", "UNAUTHENTICATED", NULL, 0);
        answer_status(st, GRPC_UNAUTHENTICATED, st->cert_missing ? "a client certificate signed by the CA of "
                                                                   "--tls-client-ca-file is required"
                                                                 : "a valid dapr-api-token is required");
        return;
    }
    unsigned right = http_route_right(route_of(st->method), st->method == GRPC_M_METADATA ? "GET" : "POST");
    if (!auth_may(st->who, right, NULL)) {
        audit(st, "refused", "PERMISSION_DENIED", NULL, 0);
        answer_status(st, GRPC_PERMISSION_DENIED, "this principal may not make this call");
        return;
    }
    char err[400];
    const uint8_t *msg;
    size_t len;
    if (st->too_large) {
        snprintf(err, sizeof err, "the request message is larger than the %d bytes allowed",
                 GRPC_MAX_MESSAGE_BYTES);
        answer_status(st, GRPC_RESOURCE_EXHAUSTED, err);
        return;
    }
    int code = grpc_api_unframe(st->body, st->body_len, GRPC_MAX_MESSAGE_BYTES, &msg, &len, err,
                                sizeof err);
    rl_request req;
    if (code == GRPC_OK)
        code = grpc_api_parse(st->method, msg, len, s->cfg->dapr_stores, &s->limits, &req, err,
                              sizeof err);
    if (code != GRPC_OK) {
        answer_status(st, code, err);
        return;
    }
    if (st->method != GRPC_M_METADATA && !auth_may(st->who, right, req.name)) {
        /* the lock's key name (STORE||resource): as on Dapr's HTTP routes */
        audit(st, "refused", "PERMISSION_DENIED", req.name, 0);
        snprintf(err, sizeof err, "%s may not lock the name %.200s", st->who ? st->who->name : "this caller",
                 req.name);
        answer_status(st, GRPC_PERMISSION_DENIED, err);
        return;
    }
    if (st->method == GRPC_M_TRY_LOCK) {
        /* A place among --max-inflight, as an HTTP acquire waits for: with
         * none in --queue-timeout-ms it answers UNAVAILABLE (grpc_api_answer). */
        req.queued = true;
    }
    if (st->method == GRPC_M_METADATA) {
        uint8_t *out;
        size_t outlen;
        if (grpc_api_metadata(s->cfg->dapr_stores, REDLOCKD_VERSION, &out, &outlen) < 0)
            answer_status(st, GRPC_INTERNAL, "out of memory");
        else if (!answer_message(st, out, outlen))
            answer_status(st, GRPC_INTERNAL, "cannot answer");
        return;
    }
    submit_call(st, &req);
}

/* An engine's answer reached the gRPC thread. */
void grpc_call_answered(gcall *call)
{
    gstream *st = call->st;
    bool delivered = false;
    if (st) {
        st->call = NULL;
        uint8_t *out;
        size_t outlen;
        char err[400];
        int code = grpc_api_answer(call->method, &call->res, &out, &outlen, err, sizeof err);
        if (code == GRPC_OK)
            delivered = answer_message(st, out, outlen);
        else
            answer_status(st, code, err);
        if (call->res.outcome == RL_OK)
            audit(st, call->method == GRPC_M_TRY_LOCK ? "grant" : "release", "OK", call->name, call->res.fence);
    }
    grpc_server *s = call->s;
    pthread_mutex_lock(&s->mu);
    grpc_call_unlink(s, call);
    pthread_mutex_unlock(&s->mu);
    rl_finish(call->eng, call->h, delivered);   /* an undelivered grant is released */
    free(call);
}

/* ---- nghttp2 callbacks ---- */

static gstream *stream_of(nghttp2_session *sess, int32_t id)
{
    return nghttp2_session_get_stream_user_data(sess, id);
}

int grpc_on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *ud)
{
    gconn *c = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    gstream *st = calloc(1, sizeof *st);
    if (!st)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* resets the stream */
    st->c = c;
    st->id = frame->hd.stream_id;
    /* As over HTTPS (http_routes.c): with --tls-client-ca-file a verified
     * certificate is required, and a token does not stand in for it; the
     * certificate's principal first, else a token's (grpc_on_header). The
     * principals are looked up per call: SIGHUP may have reloaded them. */
    st->cert_missing = c->cert_missing;
    st->who = c->cert_name[0] ? auth_who(c->cert_name, NULL) : NULL;
    st->auth_ok = !st->cert_missing && (!auth_closed() || st->who);
    st->start_us = loop_now_us();
    DLIST_PUSH(c->streams, st, prev, next);
    nghttp2_session_set_stream_user_data(sess, st->id, st);
    return 0;
}

static bool header_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && !memcmp(name, want, len);
}

int grpc_on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
              size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)ud;
    (void)flags;
    gstream *st = stream_of(sess, frame->hd.stream_id);
    if (!st || st->dispatched)
        return 0;
    st->header_bytes += namelen + valuelen + 32;
    if (st->header_bytes > GRPC_MAX_HEADER_BYTES)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* resets the stream */
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;   /* request trailers: counted, not read */
    if (header_is(name, namelen, ":method")) {
        st->post = valuelen == 4 && !memcmp(value, "POST", 4);
    } else if (header_is(name, namelen, ":path")) {
        char path[128];
        st->method = GRPC_M_UNKNOWN;
        if (valuelen < sizeof path) {
            memcpy(path, value, valuelen);
            path[valuelen] = '\0';
            st->method = grpc_api_method_of(path);
        }
    } else if (header_is(name, namelen, "content-type")) {
        static const char ct[] = "application/grpc";
        size_t l = sizeof ct - 1;
        st->grpc_ct = valuelen >= l && !memcmp(value, ct, l) &&
                      (valuelen == l || value[l] == '+' || value[l] == ';');
    } else if (!st->who && !st->cert_missing && header_is(name, namelen, "dapr-api-token")) {
        st->who = token_principal(value, valuelen);
        st->auth_ok = st->auth_ok || st->who;
    } else if (!st->who && !st->cert_missing && header_is(name, namelen, "authorization") && valuelen > 7 &&
               !strncasecmp((const char *)value, "Bearer ", 7)) {
        st->who = token_principal(value + 7, valuelen - 7);
        st->auth_ok = st->auth_ok || st->who;
    }
    return 0;
}

int grpc_on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                  size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    gstream *st = stream_of(sess, id);
    if (!st || st->dispatched || st->too_large)
        return 0;   /* read and dropped: flow control goes on */
    if (st->body_len + len > GRPC_PREFIX_LEN + GRPC_MAX_MESSAGE_BYTES) {
        st->too_large = true;
        free(st->body);
        st->body = NULL;
        st->body_len = 0;
        return 0;
    }
    uint8_t *nb = realloc(st->body, st->body_len + len);
    if (!nb)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(nb + st->body_len, data, len);
    st->body = nb;
    st->body_len += len;
    return 0;
}

int grpc_on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *ud)
{
    gconn *c = ud;
    if (frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    /* A call's frames are the only activity: PING, SETTINGS and
     * WINDOW_UPDATE cost a client nothing to send, and would keep an
     * otherwise idle connection's slot forever (issue 41). */
    c->last_us = loop_now_us();
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        gstream *st = stream_of(sess, frame->hd.stream_id);
        if (st && !st->dispatched)
            dispatch(st);
    }
    return 0;
}

void grpc_stream_free(gconn *c, gstream *st)
{
    if (st->call)
        st->call->st = NULL;   /* its answer, when it comes, has nowhere to go */
    DLIST_UNLINK(c->streams, st, prev, next);
    free(st->body);
    free(st->resp);
    free(st);
}

int grpc_on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *ud)
{
    gconn *c = ud;
    (void)error_code;
    gstream *st = stream_of(sess, id);
    if (st) {
        nghttp2_session_set_stream_user_data(sess, id, NULL);
        grpc_stream_free(c, st);
    }
    return 0;
}
