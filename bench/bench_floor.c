/* bench_floor.c - the floor: the same Redis work from hiredis, no HTTP
 * (bench_int.h). */
#include "bench_int.h"

/* ---- the floor: the same Redis work with hiredis, no HTTP ---- */

typedef struct fclient {
    int id;
    redisContext *ctx[NMASTERS];
    int pending;
    bool acquiring;
    uint64_t sent_us;
    uint64_t seq;
    char token[40];
    int yes;
} fclient;

typedef struct fconn {
    fclient *c;
    int m;
} fconn;

char release_sha[41];

static void f_send(fclient *c)
{
    char key[32];
    snprintf(key, sizeof key, "floor:%d", c->id);
    if (c->acquiring) {
        snprintf(c->token, sizeof c->token, "t%d-%llu", c->id, (unsigned long long)++c->seq);
        c->sent_us = now_us();
    }
    for (int m = 0; m < NMASTERS; m++) {
        if (c->acquiring)
            redisAppendCommand(c->ctx[m], "SET %s %s NX PX 30000", key, c->token);
        else
            redisAppendCommand(c->ctx[m], "EVALSHA %s 1 %s %s", release_sha, key, c->token);
    }
    for (int m = 0; m < NMASTERS; m++) {   /* all written before any is read */
        int done = 0;
        while (!done)
            if (redisBufferWrite(c->ctx[m], &done) != REDIS_OK)
                die("redis write");
    }
    c->pending = NMASTERS;
    c->yes = 0;
}

result run_floor(int nclients, double seconds)
{
    int ep = epoll_create1(0);
    fclient *cl = calloc((size_t)nclients, sizeof *cl);
    fconn *conns = calloc((size_t)nclients * NMASTERS, sizeof *conns);
    for (int i = 0; i < nclients; i++) {
        cl[i].id = i;
        for (int m = 0; m < NMASTERS; m++) {
            struct timeval tv = {2, 0};
            redisContext *ctx = redisConnectWithTimeout(master_host[m], master_port[m], tv);
            if (!ctx || ctx->err)
                die("redis connect");
            int fl = fcntl(ctx->fd, F_GETFL);
            fcntl(ctx->fd, F_SETFL, fl | O_NONBLOCK);
            ctx->flags &= ~REDIS_BLOCK;
            cl[i].ctx[m] = ctx;
            fconn *fc = &conns[i * NMASTERS + m];
            fc->c = &cl[i];
            fc->m = m;
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = fc};
            epoll_ctl(ep, EPOLL_CTL_ADD, ctx->fd, &ev);
        }
    }
    samples s = {0};
    result r = {.clients = nclients, .raises_per_cycle = -1};
    double cpu0 = thread_cpu_s(), mcpu0 = masters_cpu_s();
    uint64_t t0 = now_us(), end = t0 + (uint64_t)(seconds * 1e6);
    for (int i = 0; i < nclients; i++) {
        cl[i].acquiring = true;
        f_send(&cl[i]);
    }
    int outstanding = nclients;
    bool stopping = false;
    struct epoll_event evs[1024];
    while (outstanding > 0) {
        if (!stopping && now_us() >= end)
            stopping = true;
        int n = epoll_wait(ep, evs, 1024, 100);
        for (int k = 0; k < n; k++) {
            fconn *fc = evs[k].data.ptr;
            fclient *c = fc->c;
            redisContext *ctx = c->ctx[fc->m];
            if (redisBufferRead(ctx) != REDIS_OK)
                die("redis read");
            void *reply;
            while (redisGetReplyFromReader(ctx, &reply) == REDIS_OK && reply) {
                redisReply *rr = reply;
                if (c->acquiring && rr->type == REDIS_REPLY_STATUS)
                    c->yes++;
                if (!c->acquiring && rr->type == REDIS_REPLY_ERROR)
                    r.errors++;
                freeReplyObject(reply);
                if (--c->pending > 0)
                    continue;
                if (c->acquiring) {
                    if (c->yes >= NMASTERS / 2 + 1)
                        sample_add(&s, now_us() - c->sent_us);
                    else
                        r.errors++;
                    c->acquiring = false;
                    f_send(c);
                } else {
                    r.cycles++;
                    c->acquiring = true;
                    if (stopping)
                        outstanding--;
                    else
                        f_send(c);
                }
            }
        }
    }
    uint64_t elapsed = now_us() - t0;
    double cpu1 = thread_cpu_s(), mcpu1 = masters_cpu_s();
    for (int i = 0; i < nclients; i++)
        for (int m = 0; m < NMASTERS; m++)
            redisFree(cl[i].ctx[m]);
    close(ep);
    free(cl);
    free(conns);
    finish(&r, &s, elapsed);
    r.own_cpu_s_per_1000 = per_1000(cpu1 - cpu0, r.cycles);
    r.masters_cpu_s_per_1000 = per_1000(mcpu0 < 0 || mcpu1 < 0 ? -1 : mcpu1 - mcpu0, r.cycles);
    free(s.v);
    return r;
}
