/* main.c - redlockd: wires configuration, the master pool, the Redlock
 * engine and the HTTP server together, and shuts them down in order on
 * SIGINT or SIGTERM: stop accepting, let in-flight requests finish (waiting
 * acquires answer at once), close connections, then drop the masters. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "masters/masters.h"
#include "engine/engine.h"
#include "front/front.h"

#define SHUTDOWN_DRAIN_MS 10000
#define SHUTDOWN_SEND_MS 3000      /* answers to reach their connections */
#define SETUP_WAIT_MS 10000       /* --setup-cluster waits this long for every master */

static const char *env_lookup(const char *name) { return getenv(name); }

/* SIGHUP: the principals file read again (an error keeps the set in force,
 * and is logged), the audit log reopened (logrotate), and the certificate
 * and key read again for HTTPS and for gRPC over TLS (an error keeps those
 * in force, and is logged; open connections keep theirs either way). */
static void reload_all(const conf *cfg, grpc_server *grpc)
{
    char err[512];
    if (http_reload_tls(cfg, err, sizeof err) < 0)
        log_event(LOG_LEVEL_ERROR, "reload_failed", "what", "tls certificate", "error", err,
                  "kept", "the certificate and key in force", NULL);
    if (grpc_reload_tls(grpc, cfg, err, sizeof err) < 0)
        log_event(LOG_LEVEL_ERROR, "reload_failed", "what", "grpc tls certificate", "error", err,
                  "kept", "the certificate and key in force", NULL);
    if (auth_load(cfg, err, sizeof err) < 0)
        log_event(LOG_LEVEL_ERROR, "reload_failed", "what", "principals", "error", err,
                  "kept", "the principals in force", NULL);
    else if (cfg->principals_file)
        log_event(LOG_LEVEL_INFO, "reloaded", "what", "principals", "file", cfg->principals_file, NULL);
    if (cfg->audit_log && audit_reopen() < 0)
        log_event(LOG_LEVEL_ERROR, "reload_failed", "what", "audit log", "file", cfg->audit_log, NULL);
}

/* A probe answers 0 or 1 only, even when the configuration is bad (Docker
 * reserves status 2 of a HEALTHCHECK). */
static int health_check_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--health-check"))
            return 1;
    return 0;
}

/* Waiting requests each hold a socket: allow as many as the hard limit. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void log_config(const conf *c)
{
    char masters[1024], listen[CONF_MAX_LISTEN * 300], n[16], ttl[24], maxttl[24], maxwait[24], timeout[24],
        drift[24], retry[24], threads[16], body[24];
    conf_masters_str(c, masters, sizeof masters);
    conf_listen_str(c, listen, sizeof listen);
    snprintf(n, sizeof n, "%d", c->nmasters);
    snprintf(ttl, sizeof ttl, "%lld", c->default_ttl_ms);
    snprintf(maxttl, sizeof maxttl, "%lld", c->max_ttl_ms);
    snprintf(maxwait, sizeof maxwait, "%lld", c->max_wait_ms);
    snprintf(timeout, sizeof timeout, "%lld", c->master_timeout_ms);
    snprintf(drift, sizeof drift, "%g", c->drift_factor);
    snprintf(retry, sizeof retry, "%lld", c->retry_delay_ms);
    snprintf(threads, sizeof threads, "%d", c->threads);
    snprintf(body, sizeof body, "%lld", c->max_body_bytes);
    int ntls = 0;
    for (int i = 0; i < c->nmasters; i++)
        ntls += c->masters[i].tls;
    log_event(LOG_LEVEL_INFO, "start", "version", REDLOCKD_VERSION, "listen", listen,
              "masters", masters, "nmasters", n, "key_prefix", c->key_prefix,
              "default_ttl_ms", ttl, "max_ttl_ms", maxttl, "max_wait_ms", maxwait,
              "master_timeout_ms", timeout, "drift_factor", drift, "retry_delay_ms", retry,
              "threads", threads, "max_body_bytes", body,
              "auth", c->auth_token ? "on" : "off", "admin", c->admin_token ? "on" : "off",
              "redis_auth", !c->redis_password ? "off" : c->redis_username ? "acl user" : "on",
              "redis_tls", ntls == 0 ? "off" : ntls == c->nmasters ? "on" : "some masters",
              "quarantine", c->quarantine ? "on" : "off", "notify", c->notify ? "on" : "off",
              "cluster_setup", c->cluster_setup_manual ? "manual" : "auto", "unsafe_masters",
              c->refuse_unsafe ? "refuse" : "warn", NULL);
    if (!ntls && (c->redis_tls_ca_file || c->redis_tls_cert_file || c->redis_tls_server_name))
        log_event(LOG_LEVEL_WARN, "config_tls_unused", "why",
                  "--redis-tls-* settings are given but no master uses TLS (--redis-tls on, or "
                  "rediss:// in --masters)", NULL);
    if (c->nmasters < 3)
        log_event(LOG_LEVEL_WARN, "config_few_masters", "nmasters", n, "why",
                  "with fewer than 3 masters one failure stops all locking; use 5", NULL);
    else if (c->nmasters % 2 == 0)
        log_event(LOG_LEVEL_WARN, "config_even_masters", "nmasters", n, "why",
                  "an even count needs the same majority as one more master but tolerates no "
                  "more failures; use an odd count", NULL);
}

/* --setup-cluster: marks a brand-new set of masters as one cluster and
 * waits until every master holds a ready marker; prints each master's state.
 * Exit 0 when all are ready, 1 otherwise. */
static int setup_cluster(conf *cfg, mpool *pool, uint64_t window_us, metrics *m)
{
    marker_check *mc = pool ? marker_check_new(pool, window_us, true) : NULL;
    if (!mc || mpool_start(pool) < 0) {
        fprintf(stderr, "redlockd: cannot start: out of memory or threads\n");
        return 1;
    }
    int n = mpool_size(pool), ready = 0;
    master_status st[MASTER_MAX];
    for (int tries = 0; tries < SETUP_WAIT_MS / 50 && ready < n; tries++) {
        usleep(50000);
        ready = 0;
        for (int i = 0; i < n; i++) {
            mpool_status(pool, i, &st[i]);
            ready += st[i].up && st[i].marker == QMARK_READY;
        }
    }
    static const char *const marker_names[] = {"no answer", "no marker", "pending", "ready"};
    for (int i = 0; i < n; i++)
        printf("%s: %s%s\n", st[i].addr, st[i].up ? marker_names[st[i].marker + 1] : "down",
               st[i].quarantine_left_ms > 0 ? " (sits out: lost its data)" : "");
    printf("%s\n", ready == n ? "cluster ready" : "cluster not ready: every master must answer");
    mpool_stop(pool);
    marker_check_free(mc);
    mpool_free(pool);
    metrics_free(m);
    conf_free(cfg);
    return ready == n ? 0 : 1;
}

int main(int argc, char **argv)
{
    conf cfg;
    char err[512] = "";
    enum conf_result cr = conf_parse(&cfg, argc, argv, env_lookup, err, sizeof err);
    if (cr == CONF_HELP) {
        conf_usage(stdout);
        conf_free(&cfg);
        return 0;
    }
    if (cr == CONF_VERSION) {
        printf("redlockd %s\n", REDLOCKD_VERSION);
        conf_free(&cfg);
        return 0;
    }
    if (cr == CONF_HEALTH_CHECK) {   /* a probe: starts nothing */
        int status = healthcheck_run(&cfg, stdout);
        conf_free(&cfg);
        return status;
    }
    if (cr == CONF_ERROR) {
        fprintf(stderr, "redlockd: %s\n", err);
        conf_free(&cfg);
        return health_check_asked(argc, argv) ? 1 : 2;
    }
    if (testhook_parse(getenv("REDLOCKD_TEST_BREAK")) < 0) {
        fprintf(stderr, "redlockd: REDLOCKD_TEST_BREAK: no such rule: %s\n", getenv("REDLOCKD_TEST_BREAK"));
        conf_free(&cfg);
        return 2;
    }
    /* TLS to the masters: a file that cannot be loaded is a bad value. */
    mtls_ctx *tls = NULL;
    if (conf_tls_used(&cfg) && !(tls = mtls_ctx_new(&cfg, err, sizeof err))) {
        fprintf(stderr, "redlockd: %s\n", err);
        conf_free(&cfg);
        return 2;
    }
    log_init(cfg.log_level, cfg.log_format);
    raise_fd_limit();

    /* Signals are taken by sigwait in this thread only. A shell that starts
     * us in the background may have set SIGINT to ignored, and an ignored
     * signal is discarded before sigwait sees it: restore the default. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    log_config(&cfg);
    /* Who may call (auth.h), and the audit log: a file that cannot be read
     * or opened is a bad value. */
    if (auth_load(&cfg, err, sizeof err) < 0 || (cfg.audit_log && audit_open(cfg.audit_log, err, sizeof err) < 0) ||
        http_tls_load(&cfg, err, sizeof err) < 0) {   /* (HTTPS: the same) */
        fprintf(stderr, "redlockd: %s\n", err);
        http_tls_free();
        auth_free();
        mtls_ctx_free(tls);
        conf_free(&cfg);
        return 2;
    }
    if (testhook_name()[0])
        log_event(LOG_LEVEL_WARN, "test_hook", "breaks", testhook_name(), "why",
                  "REDLOCKD_TEST_BREAK is set: a promise is broken on purpose (tests only)", NULL);
    metrics *m = metrics_new();
    /* A master that lost data sits out the longest TTL plus the fence keep
     * plus drift: by then every lock it may have lost has expired, and so
     * has every fence counter it kept (a counter lives ttl + fence keep from
     * its last write, on the same master's clock), so none it kept can be
     * stale, below a fence handed out by masters it lost writes of
     * (docs/safety.md). */
    uint64_t quarantine_us =
        cfg.quarantine ? (uint64_t)((double)cfg.max_ttl_ms + (double)cfg.fence_keep_ms +
                                    quorum_drift_ms(cfg.max_ttl_ms, cfg.drift_factor)) * 1000ULL
                       : 0;
    mpool_config pc = {cfg.nmasters, cfg.masters, cfg.master_timeout_ms, cfg.redis_password,
                       quarantine_us, cfg.max_ttl_ms, cfg.refuse_unsafe, cfg.redis_username, tls};
    if (cfg.setup_cluster) {
        mpool *setup = m ? mpool_new(&pc) : NULL;
        mtls_ctx_free(tls);   /* the pool holds its own reference */
        http_tls_free();
        auth_free();
        audit_close();
        return setup_cluster(&cfg, setup, quarantine_us, m);
    }
    static _Atomic int waiters;   /* --max-waiters counts every loop's */
    rl_config rc = {cfg.key_prefix, cfg.drift_factor, cfg.retry_delay_ms, cfg.max_ttl_ms, cfg.notify,
                    cfg.quarantine, cfg.fence_keep_ms, cfg.max_waiters, &waiters, cfg.max_inflight,
                    cfg.queue_timeout_ms};
    /* One event loop per --threads: its own master connections, engine and
     * marker check, like an instance of its own on the same masters (every
     * rule already holds across instances); the HTTP server gives each loop
     * a listening socket of its own. */
    int nloops = cfg.threads < HTTP_MAX_LOOPS ? cfg.threads : HTTP_MAX_LOOPS;
    rc.max_active = (cfg.max_inflight + nloops - 1) / nloops;   /* --max-inflight, shared out */
    http_loop loops[HTTP_MAX_LOOPS] = {{0}};
    marker_check *mcs[HTTP_MAX_LOOPS] = {0};
    static mpool *pools[HTTP_MAX_LOOPS];   /* every loop's, for the marker checks to share */
    bool ok = m != NULL;
    for (int k = 0; ok && k < nloops; k++) {
        loops[k].pool = mpool_new(&pc);
        loops[k].engine = loops[k].pool ? rl_engine_new(&rc, loops[k].pool, m) : NULL;
        pools[k] = loops[k].pool;
        ok = loops[k].engine != NULL;
    }
    mtls_ctx_free(tls);   /* each pool holds its own reference */
    /* Every pool exists before any starts: the checks note markers on all. */
    for (int k = 0; ok && k < nloops; k++) {
        /* Quarantine off (--quarantine off) skips the guard and every marker. */
        mcs[k] = cfg.quarantine ? marker_check_new_shared(loops[k].pool, pools, nloops, quarantine_us,
                                                          !cfg.cluster_setup_manual)
                                : NULL;
        ok = !cfg.quarantine || mcs[k];
    }
    for (int k = 0; ok && k < nloops; k++)
        ok = mpool_start(loops[k].pool) == 0;
    http_server *http = NULL;
    grpc_server *grpc = NULL;   /* Dapr's gRPC API, with --dapr-grpc-listen */
    if (!ok)
        snprintf(err, sizeof err, "cannot start: out of memory or threads");
    else if (!conf_grpc_on(&cfg) || (grpc = grpc_start(&cfg, loops, nloops, err, sizeof err)))
        http = http_start(&cfg, loops, nloops, m, err, sizeof err);
    if (!http) {
        fprintf(stderr, "redlockd: %s\n", err);
        grpc_stop(grpc, 0);
        grpc_free(grpc);
        for (int k = 0; k < nloops; k++) {
            if (loops[k].pool)
                mpool_stop(loops[k].pool);
            if (loops[k].engine)
                rl_engine_free(loops[k].engine);
            marker_check_free(mcs[k]);
            mpool_free(loops[k].pool);
        }
        metrics_free(m);
        http_tls_free();
        auth_free();
        audit_close();
        conf_free(&cfg);
        return 1;
    }
    char listen[CONF_MAX_LISTEN * 300];
    conf_listen_str(&cfg, listen, sizeof listen);
    log_event(LOG_LEVEL_INFO, "listening", "addr", listen, NULL);

    int sig = 0;
    while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP)
        reload_all(&cfg, grpc);
    log_event(LOG_LEVEL_INFO, "stopping", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT", NULL);

    /* Stop accepting; waiting acquires answer 409 at once; every answer
     * reaches its connection before any connection closes; grants whose
     * answer could not be delivered are released before the masters go. */
    http_quiesce(http);
    grpc_quiesce(grpc);
    http_end_holds(http, SHUTDOWN_SEND_MS);
    /* Every engine drains before any refuses: a request read on one loop
     * may be decided on another (its name's owner), and a client may still
     * send one more request on a kept-alive connection until its answer
     * says Connection: close; an engine that closed while another still
     * drained would answer such a request 503 shutting_down. */
    uint64_t drain_end = loop_now_us() + SHUTDOWN_DRAIN_MS * 1000ULL;
    int left = 0;
    for (int k = 0; k < nloops; k++) {
        uint64_t now = loop_now_us();
        left += rl_engine_drain(loops[k].engine, now < drain_end ? (long long)(drain_end - now) / 1000 : 0);
    }
    for (int k = 0; k < nloops; k++)
        rl_engine_close(loops[k].engine);
    int unsent = http_drain(http, SHUTDOWN_SEND_MS);
    unsent += grpc_stop(grpc, SHUTDOWN_SEND_MS);
    if (left || unsent) {
        char n[16], u[16];
        snprintf(n, sizeof n, "%d", left);
        snprintf(u, sizeof u, "%d", unsent);
        log_event(LOG_LEVEL_WARN, "drain_incomplete", "inflight", n, "unanswered", u, NULL);
    }
    http_stop(http);
    for (int k = 0; k < nloops; k++)
        rl_engine_sync(loops[k].engine, SHUTDOWN_SEND_MS);
    for (int k = 0; k < nloops; k++) {
        mpool_stop(loops[k].pool);
        rl_engine_free(loops[k].engine);
        marker_check_free(mcs[k]);
        mpool_free(loops[k].pool);
    }
    grpc_free(grpc);
    metrics_free(m);
    http_tls_free();
    auth_free();
    audit_close();
    conf_free(&cfg);
    log_event(LOG_LEVEL_INFO, "stopped", NULL);
    return 0;
}
