/* main.c - redlockd: wires configuration, the master pool, the Redlock
 * engine and the HTTP server together, and shuts them down in order on
 * SIGINT or SIGTERM: stop accepting, let in-flight requests finish (waiting
 * acquires answer at once), close connections, then drop the masters. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "conf.h"
#include "healthcheck.h"
#include "http.h"
#include "log.h"
#include "master.h"
#include "metrics.h"
#include "quorum.h"
#include "redlock.h"

#define SHUTDOWN_DRAIN_MS 10000

static const char *env_lookup(const char *name) { return getenv(name); }

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
    char masters[1024], listen[300], n[16], ttl[24], maxttl[24], maxwait[24], timeout[24],
        drift[24], retry[24], threads[16], body[24];
    conf_masters_str(c, masters, sizeof masters);
    snprintf(listen, sizeof listen, "%s:%d", c->listen.host, c->listen.port);
    snprintf(n, sizeof n, "%d", c->nmasters);
    snprintf(ttl, sizeof ttl, "%lld", c->default_ttl_ms);
    snprintf(maxttl, sizeof maxttl, "%lld", c->max_ttl_ms);
    snprintf(maxwait, sizeof maxwait, "%lld", c->max_wait_ms);
    snprintf(timeout, sizeof timeout, "%lld", c->master_timeout_ms);
    snprintf(drift, sizeof drift, "%g", c->drift_factor);
    snprintf(retry, sizeof retry, "%lld", c->retry_delay_ms);
    snprintf(threads, sizeof threads, "%d", c->threads);
    snprintf(body, sizeof body, "%lld", c->max_body_bytes);
    log_event(LOG_LEVEL_INFO, "start", "version", REDLOCKD_VERSION, "listen", listen,
              "masters", masters, "nmasters", n, "key_prefix", c->key_prefix,
              "default_ttl_ms", ttl, "max_ttl_ms", maxttl, "max_wait_ms", maxwait,
              "master_timeout_ms", timeout, "drift_factor", drift, "retry_delay_ms", retry,
              "threads", threads, "max_body_bytes", body,
              "auth", c->auth_token ? "on" : "off",
              "redis_auth", c->redis_password ? "on" : "off",
              "quarantine", c->quarantine ? "on" : "off", "notify", c->notify ? "on" : "off", NULL);
    if (c->nmasters < 3)
        log_event(LOG_LEVEL_WARN, "config_few_masters", "nmasters", n, "why",
                  "with fewer than 3 masters one failure stops all locking; use 5", NULL);
    else if (c->nmasters % 2 == 0)
        log_event(LOG_LEVEL_WARN, "config_even_masters", "nmasters", n, "why",
                  "an even count needs the same majority as one more master but tolerates no "
                  "more failures; use an odd count", NULL);
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
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    log_config(&cfg);
    metrics *m = metrics_new();
    /* A restarted master sits out the longest TTL plus its drift: every lock
     * it may have lost has expired by then. */
    uint64_t quarantine_us =
        cfg.quarantine ? (uint64_t)((double)cfg.max_ttl_ms + quorum_drift_ms(cfg.max_ttl_ms, cfg.drift_factor)) * 1000ULL
                       : 0;
    mpool_config pc = {cfg.nmasters, cfg.masters, cfg.master_timeout_ms, cfg.redis_password,
                       quarantine_us, cfg.max_ttl_ms};
    mpool *pool = m ? mpool_new(&pc) : NULL;
    rl_config rc = {cfg.key_prefix, cfg.drift_factor, cfg.retry_delay_ms, cfg.max_ttl_ms, cfg.notify};
    rl_engine *engine = pool ? rl_engine_new(&rc, pool, m) : NULL;
    if (!engine || mpool_start(pool) < 0) {
        fprintf(stderr, "redlockd: cannot start: out of memory or threads\n");
        return 1;
    }
    http_server *http = http_start(&cfg, engine, pool, m, err, sizeof err);
    if (!http) {
        fprintf(stderr, "redlockd: %s\n", err);
        mpool_stop(pool);
        rl_engine_free(engine);
        mpool_free(pool);
        metrics_free(m);
        conf_free(&cfg);
        return 1;
    }
    char listen[300];
    snprintf(listen, sizeof listen, "%s:%d", cfg.listen.host, cfg.listen.port);
    log_event(LOG_LEVEL_INFO, "listening", "addr", listen, NULL);

    int sig = 0;
    sigwait(&sigs, &sig);
    log_event(LOG_LEVEL_INFO, "stopping", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT", NULL);

    http_quiesce(http);
    int left = rl_engine_drain(engine, SHUTDOWN_DRAIN_MS);
    if (left) {
        char n[16];
        snprintf(n, sizeof n, "%d", left);
        log_event(LOG_LEVEL_WARN, "drain_incomplete", "inflight", n, NULL);
    }
    http_stop(http);
    mpool_stop(pool);
    rl_engine_free(engine);
    mpool_free(pool);
    metrics_free(m);
    conf_free(&cfg);
    log_event(LOG_LEVEL_INFO, "stopped", NULL);
    return 0;
}
