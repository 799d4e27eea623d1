/* bench.c - redlockd's benchmark: acquire+release cycles over HTTP/1.1
 * keep-alive against the real redlockd, and in the same run the floor: the
 * same Redis work with no HTTP, from C with hiredis (each client sends
 * SET NX PX to all five masters before reading, then the release script by
 * EVALSHA). Both drive N clients from one epoll thread, one connection per
 * client (five for a floor client), each client its own lock name; the
 * "new" rows take a new name for every acquire instead (one lock per order
 * id: the name has no fence counter on any master yet).
 *
 * Beside them, the peer users would pick: node-redlock (npm "redlock" 4.2)
 * over ioredis with auto-pipelining, five clients, one per master
 * (bench/node/redlock-bench.js, installed with npm ci into bench/node when
 * node and npm exist; skipped with a note when they do not, or --no-node).
 * redlockd runs twice, with --threads 1 and --threads 2, on the same masters.
 *
 *   bench [--seconds S] [--levels 1,8,64,256] [--json FILE]
 *         [--redlockd PATH] [--masters host:port,...] [--label TEXT]
 *         [--no-node] [--node-dir DIR] [--leases N] [--lease-window W] [--lease-ttl-ms T]
 *         [--listeners R]
 *
 * --listeners R runs only the listener rows (bench_listen.c), R rounds:
 * HTTPS with client certificates at 1 and 64 clients against plain HTTP,
 * and a Unix socket at 1 client against TCP, in the same run.
 *
 * --leases N adds the leases row (bench_leases.c): N held streams renewed
 * every second on a redlockd of their own, for --seconds (at least 5),
 * opened W at a time as a client pool of W connections opens them
 * (--lease-window, 256 by default; 0: all at once), each of ttl T
 * (--lease-ttl-ms, 3000 by default: renewed every second).
 *
 * Starts five redis-server masters on free loopback ports (no persistence)
 * unless --masters is given, and the redlockd binary. For every row it reads
 * the masters' CPU (INFO cpu, summed over the five) and the CPU of the
 * process doing the work (the floor: the benchmark's own thread; node-redlock:
 * the node process; redlockd: the redlockd process) around the level, and
 * prints both per 1000 cycles. Prints a table per level and writes the same
 * as JSON. It is a measurement, not a test.
 */
#include "bench_int.h"

/* ---- main ---- */

static const int row_threads[2] = {1, 2};   /* redlockd t1, t2 */

/* The five masters: those of --masters (masters_arg), or redis-server
 * processes started in dir (redis[], their pids). masters gets the list
 * redlockd is given; the floor's release script is loaded on each.
 * 0, or the exit code: 2 for a wrong --masters, 1 for a master that does
 * not answer. */
static int start_masters(const char *masters_arg, const char *dir, pid_t redis[NMASTERS], char *masters,
                         size_t mlen)
{
    if (masters_arg) {
        snprintf(masters, mlen, "%s", masters_arg);
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", masters_arg);
        int k = 0;
        for (char *t = strtok(tmp, ","); t && k < NMASTERS; t = strtok(NULL, ",")) {
            char *colon = strrchr(t, ':');
            if (!colon)
                break;
            snprintf(master_host[k], MAX_HOST, "%.*s", (int)(colon - t), t);
            master_port[k++] = atoi(colon + 1);
        }
        if (k != NMASTERS) {
            fprintf(stderr, "bench: --masters needs five masters, host:port each\n");
            return 2;
        }
    } else {
        size_t o = 0;
        for (int m = 0; m < NMASTERS; m++) {
            master_port[m] = h_free_port();
            snprintf(master_host[m], MAX_HOST, "127.0.0.1");
            char port[16], log[340], mdir[300];
            snprintf(port, sizeof port, "%d", master_port[m]);
            snprintf(mdir, sizeof mdir, "%s/m%d", dir, m);
            mkdir(mdir, 0755);
            snprintf(log, sizeof log, "%s/redis.log", mdir);
            char *av[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", mdir,
                          "--save", "", "--appendonly", "no", NULL};
            redis[m] = h_spawn(av, log);
            o += (size_t)snprintf(masters + o, mlen - o, "%s127.0.0.1:%d", m ? "," : "", master_port[m]);
        }
        for (int m = 0; m < NMASTERS; m++)
            wait_port(master_port[m], "redis-server");
    }
    for (int m = 0; m < NMASTERS; m++) {
        redisContext *c = redisConnect(master_host[m], master_port[m]);
        redisReply *r = c && !c->err ? redisCommand(c, "SCRIPT LOAD %s", RELEASE_LUA) : NULL;
        if (!r || r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "bench: cannot reach master %s:%d\n", master_host[m], master_port[m]);
            return 1;
        }
        snprintf(release_sha, sizeof release_sha, "%s", r->str);
        freeReplyObject(r);
        redisFree(c);
    }
    return 0;
}

/* The masters started (SIGKILL: no persistence) and the run's directory. */
static void stop_masters(const pid_t redis[NMASTERS], const char *dir)
{
    for (int m = 0; m < NMASTERS; m++) {
        if (info_ctx[m])
            redisFree(info_ctx[m]);
        info_ctx[m] = NULL;
        if (redis[m] > 0) {
            kill(redis[m], SIGKILL);
            waitpid(redis[m], NULL, 0);
        }
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    double seconds = 5;
    int levels[MAX_LEVELS] = {1, 8, 64, 256}, nlevels = 4;
    const char *json_path = "bench-result.json", *bin = "build/src/redlockd", *masters_arg = NULL;
    const char *label = "", *node_dir = BENCH_NODE_DIR;
    bool use_node = true;
    int leases = 0, lease_window = 256, lease_ttl_ms = 3000, listener_rounds = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--levels") && i + 1 < argc) {
            nlevels = 0;
            for (char *t = strtok(argv[++i], ","); t && nlevels < MAX_LEVELS; t = strtok(NULL, ","))
                levels[nlevels++] = atoi(t);
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (!strcmp(argv[i], "--redlockd") && i + 1 < argc) {
            bin = argv[++i];
        } else if (!strcmp(argv[i], "--masters") && i + 1 < argc) {
            masters_arg = argv[++i];
        } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
            label = argv[++i];
        } else if (!strcmp(argv[i], "--no-node")) {
            use_node = false;
        } else if (!strcmp(argv[i], "--node-dir") && i + 1 < argc) {
            node_dir = argv[++i];
        } else if (!strcmp(argv[i], "--leases") && i + 1 < argc) {
            leases = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--lease-window") && i + 1 < argc) {
            lease_window = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--lease-ttl-ms") && i + 1 < argc) {
            lease_ttl_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--listeners") && i + 1 < argc) {
            listener_rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench [--seconds S] [--levels 1,8,64,256] [--json FILE] "
                            "[--redlockd PATH] [--masters h:p,...] [--label TEXT] [--no-node] [--node-dir DIR] "
                            "[--leases N] [--lease-window W] [--lease-ttl-ms T] [--listeners R]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/redlockd-bench-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");

    char node_note[1200] = "skipped: --no-node";
    const char *node_script = use_node ? node_prepare(node_dir, node_note, sizeof node_note) : NULL;

    pid_t redis[NMASTERS] = {0};
    char masters[512] = "";
    int rc = start_masters(masters_arg, dir, redis, masters, sizeof masters);
    if (rc)
        return rc;
    if (masters_cpu_s() < 0)
        fprintf(stderr, "bench: INFO cpu fails on a master: the masters' CPU is left blank\n");
    if (listener_rounds > 0) {
        rc = run_listeners(bin, masters, dir, seconds, listener_rounds);
        stop_masters(redis, dir);
        return rc;
    }

    /* redlockd twice on the same masters: --threads 1 and --threads 2. */
    pid_t daemon[2];
    int http_port[2];
    for (int k = 0; k < 2; k++) {
        http_port[k] = h_free_port();
        char listen[64], log[300], threads[8];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", http_port[k]);
        snprintf(log, sizeof log, "%s/redlockd-t%d.log", dir, row_threads[k]);
        snprintf(threads, sizeof threads, "%d", row_threads[k]);
        char *av[] = {(char *)bin, "--listen", listen, "--masters", masters, "--log-level", "warn",
                      "--threads", threads, NULL};
        daemon[k] = h_spawn(av, log);
        wait_port(http_port[k], "redlockd");
    }
    usleep(300000);   /* masters connected */

    result res[MAX_LEVELS][NROWS];
    memset(res, 0, sizeof res);
    long max_rss[2] = {0, 0};
    printf("redlockd benchmark %s: %.1f s per level, acquire+release cycles, five masters\n\n", label, seconds);
    if (!node_script)
        printf("node-redlock: %s\n\n", node_note);
    print_header();
    for (int i = 0; i < nlevels; i++) {
        res[i][ROW_FLOOR] = run_floor(levels[i], seconds);
        print_row(row_name[ROW_FLOOR], &res[i][ROW_FLOOR]);
        fflush(stdout);
        if (node_script) {
            char log[300];
            snprintf(log, sizeof log, "%s/node-redlock.log", dir);
            res[i][ROW_NODE] = run_node(node_script, masters, levels[i], seconds, log, false);
            if (res[i][ROW_NODE].ran)
                print_row(row_name[ROW_NODE], &res[i][ROW_NODE]);
            fflush(stdout);
        }
        for (int k = 0; k < 2; k++) {
            res[i][ROW_T1 + k] = run_http(http_port[k], levels[i], seconds, daemon[k], false);
            print_row(row_name[ROW_T1 + k], &res[i][ROW_T1 + k]);
            long hwm = proc_kib(daemon[k], "VmHWM:");
            if (hwm > max_rss[k])
                max_rss[k] = hwm;
            fflush(stdout);
        }
        /* New names: the same, with a name never used before per acquire. */
        if (node_script) {
            char log[300];
            snprintf(log, sizeof log, "%s/node-redlock.log", dir);
            res[i][ROW_NODE_NEW] = run_node(node_script, masters, levels[i], seconds, log, true);
            if (res[i][ROW_NODE_NEW].ran)
                print_row(row_name[ROW_NODE_NEW], &res[i][ROW_NODE_NEW]);
            fflush(stdout);
        }
        res[i][ROW_T1_NEW] = run_http(http_port[0], levels[i], seconds, daemon[0], true);
        print_row(row_name[ROW_T1_NEW], &res[i][ROW_T1_NEW]);
        fflush(stdout);
    }
    if (node_script && node_versions[0])
        printf("\nnode-redlock: %s\n", node_versions);
    else
        printf("\nnode-redlock: %s\n", node_script ? "no result (see the errors above)" : node_note);

    bench_run run = {.label = label, .seconds = seconds, .nlevels = nlevels, .levels = levels, .res = res,
                     .max_rss = {max_rss[0], max_rss[1]},
                     .node = node_script && node_versions[0] ? node_versions
                             : node_script                   ? "no result"
                                                             : node_note};
    print_ratios(&run);
    printf("redlockd peak RSS: t1 %.1f MiB, t2 %.1f MiB\n", (double)max_rss[0] / 1024.0,
           (double)max_rss[1] / 1024.0);

    print_targets(&run, healthz_p50_ms(http_port[0], 2000));

    /* Handoff: a second instance on the same masters, then the same with
     * release notices off (sleep-and-retry, --retry-delay-ms 100). */
    for (int v = 0; v < 2; v++) {
        pid_t inst[2];
        int ports_ho[2];
        for (int k = 0; k < 2; k++) {
            ports_ho[k] = h_free_port();
            char l[64], lg[360];
            snprintf(l, sizeof l, "127.0.0.1:%d", ports_ho[k]);
            snprintf(lg, sizeof lg, "%s/handoff-%d-%d.log", dir, v, k);
            char *hv[] = {(char *)bin, "--listen", l, "--masters", masters, "--log-level", "warn",
                          "--notify", v == 0 ? "on" : "off", NULL};
            inst[k] = h_spawn(hv, lg);
            wait_port(ports_ho[k], "redlockd");
        }
        usleep(300000);
        run.ho[v] = run_handoff(ports_ho[0], ports_ho[1], seconds);
        for (int k = 0; k < 2; k++) {
            kill(inst[k], SIGTERM);
            waitpid(inst[k], NULL, 0);
        }
    }
    print_handoffs(&run);

    if (leases > 0) {
        lease_result lr = run_leases(bin, masters, dir, leases, lease_window > 0 ? lease_window : leases,
                                     lease_ttl_ms, seconds < 5 ? 5 : seconds);
        print_leases(&lr);
    }

    write_json(json_path, &run);

    for (int k = 0; k < 2; k++) {
        kill(daemon[k], SIGTERM);
        waitpid(daemon[k], NULL, 0);
    }
    stop_masters(redis, dir);
    long errs = 0;
    for (int i = 0; i < nlevels; i++)
        errs += res[i][ROW_T1].errors + res[i][ROW_T2].errors + res[i][ROW_T1_NEW].errors;
    return errs ? 1 : 0;
}
