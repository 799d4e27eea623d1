/* bench_int.h - what the files of the benchmark share (bench.c's opening
 * comment says what it measures and how to run it):
 *   bench.c          main: options, masters, redlockd, the levels, the rows
 *   bench_proc.c     the clock, samples, CPU and memory of processes,
 *                    starting them and waiting for their ports
 *   bench_http.c     the HTTP driver (redlockd)
 *   bench_floor.c    the floor: the same Redis work from hiredis, no HTTP
 *   bench_node.c     node-redlock, the peer
 *   bench_handoff.c  hand-off between two instances, and /healthz's p50
 *   bench_leases.c   N held streams on a redlockd of their own: what they cost
 *   bench_report.c   the table and the JSON
 *   bench_listen.c   HTTPS and a Unix socket beside plain TCP (--listeners)
 * Ports come from the test harness's reservation (h_free_port).
 */
#ifndef BENCH_INT_H
#define BENCH_INT_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"   /* h_free_port */

#define MAX_LEVELS 8
#define NMASTERS 5
#define RELEASE_LUA                                                                                 \
    "local v = redis.call('GET', KEYS[1])\n"                                                       \
    "if v == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end\n"                               \
    "if v then return -1 end\n"                                                                    \
    "return 0\n"


/* ---- latency samples ---- */

typedef struct samples {
    uint32_t *v;
    size_t n, cap;
} samples;


typedef struct result {
    bool ran;                    /* false: not measured (node-redlock skipped or failed) */
    int clients;
    double seconds;
    long cycles, errors;
    double p50, p99, p999;
    double cycles_per_s;
    double masters_cpu_s_per_1000; /* the five masters' CPU seconds (summed) per 1000 cycles */
    double own_cpu_s_per_1000;     /* the working process's CPU seconds per 1000 cycles; <0: not measured */
    double raises_per_cycle;       /* redlockd: grants that needed a fence raise (a second round
                                      trip), per cycle, from /metrics; <0: not measured */
} result;


/* The leases row (bench --leases N, bench_leases.c). */
typedef struct lease_result {
    bool ran;
    int leases, window, acquired, lost;   /* window: opened that many at a time */
    int ttl_ms;                     /* each lease's, renewed every third of it */
    double open_s;                  /* from the first connect to the last acquired event */
    double calls_per_s_min, calls_per_s_max;   /* script calls per second, over the masters */
    double cpu_pct;                 /* redlockd's CPU, percent of one core */
    double masters_cpu_pct;         /* the masters' CPU together (INFO cpu), percent of one core */
    long idle_rss_kib, rss_kib, closed_rss_kib;
    long peak_rss_kib;              /* VmHWM: the most redlockd held at any time */
    long open_peak_rss_kib;         /* ... until the leases closed */
    double closed_s;                /* from the close to RSS settled (closed_rss_kib) */
} lease_result;

typedef struct handoff_result {
    long handoffs, errors;
    double p50, p99, max;
} handoff_result;

#define MAX_HOST 256
extern char master_host[NMASTERS][MAX_HOST];
extern int master_port[NMASTERS];
extern redisContext *info_ctx[NMASTERS];   /* for INFO cpu */
extern char release_sha[41];               /* the floor's release script */
extern char node_versions[160];            /* node-redlock and ioredis, as installed */

/* The rows of a level; the "new" rows take a new name for every acquire
 * (one lock per order id). */
enum { ROW_FLOOR, ROW_NODE, ROW_T1, ROW_T2, ROW_NODE_NEW, ROW_T1_NEW, NROWS };
extern const char *const row_name[NROWS];   /* in the table */
extern const char *const row_json[NROWS];   /* in the JSON */

/* What a run measured, for the report. */
typedef struct bench_run {
    const char *label;
    double seconds;
    int nlevels;
    const int *levels;
    result (*res)[NROWS];
    long max_rss[2];                /* redlockd t1, t2 peak RSS, KiB */
    const char *node;               /* node-redlock's versions, or why it has no rows */
    handoff_result ho[2];           /* notices on, off */
} bench_run;

/* bench_proc.c */
uint64_t now_us(void);
void die(const char *what);
void sample_add(samples *s, uint64_t us);
int cmp_u32(const void *a, const void *b);
double pct_ms(samples *s, double p);
double masters_cpu_s(void);
double per_1000(double cpu_s, long cycles);
double thread_cpu_s(void);
void finish(result *r, samples *s, uint64_t elapsed_us);
void wait_port(int port, const char *what);
double proc_cpu_s(pid_t pid);
long proc_kib(pid_t pid, const char *field);

/* bench_http.c */
/* Where the HTTP clients go: TCP to 127.0.0.1:port, or unix_path; over
 * HTTPS when tls is set (each client handshakes once, before the clock). */
typedef struct bench_target {
    int port;
    const char *unix_path;
    SSL_CTX *tls;
} bench_target;
result run_http(int port, int nclients, double seconds, pid_t daemon, bool fresh);
result run_http_to(const bench_target *t, int nclients, double seconds, pid_t daemon, bool fresh);

/* bench_listen.c: HTTPS and a Unix socket beside plain TCP (--listeners). */
int run_listeners(const char *bin, const char *masters, const char *dir, double seconds, int rounds);

/* bench_floor.c */
result run_floor(int nclients, double seconds);

/* bench_node.c */
const char *node_prepare(const char *dir, char *note, size_t notelen);
result run_node(const char *script, const char *masters, int nclients, double seconds, const char *log,
                bool fresh);

/* bench_handoff.c */
double healthz_p50_ms(int port, int n);
handoff_result run_handoff(int port_a, int port_b, double seconds);

/* bench_leases.c */
lease_result run_leases(const char *bin, const char *masters, const char *dir, int n, int window, int ttl_ms,
                        double seconds);
void print_leases(const lease_result *lr);

/* bench_report.c */
void print_header(void);
void print_row(const char *what, const result *r);
double ratio(const result *a, const result *b, bool p50);
double cpu_ratio(const result *a, const result *b);
void fmt2(char *out, size_t len, double v);
void json_string(FILE *j, const char *s);
void json_double(FILE *j, int decimals, double v);
void json_row(FILE *j, const result *r);
void print_ratios(const bench_run *run);
void print_targets(const bench_run *run, double hz);
void print_handoffs(const bench_run *run);
void write_json(const char *path, const bench_run *run);

#endif
