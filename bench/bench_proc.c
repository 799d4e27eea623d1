/* bench_proc.c - the clock, samples, CPU and memory of processes, starting
 * them and waiting for their ports (bench_int.h). */
#include "bench_int.h"

uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

void die(const char *what)
{
    perror(what);
    exit(1);
}

void sample_add(samples *s, uint64_t us)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 65536;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v)
            die("realloc");
    }
    s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

double pct_ms(samples *s, double p)
{
    if (!s->n)
        return 0;
    size_t k = (size_t)(p / 100.0 * (double)s->n);
    if (k >= s->n)
        k = s->n - 1;
    return s->v[k] / 1000.0;
}

/* ---- the masters' CPU: INFO cpu, used_cpu_sys + used_cpu_user ---- */

char master_host[NMASTERS][MAX_HOST];
int master_port[NMASTERS];
redisContext *info_ctx[NMASTERS];

/* Sum over the five masters of used_cpu_sys + used_cpu_user, in seconds;
 * -1 when a master does not answer. */
double masters_cpu_s(void)
{
    double sum = 0;
    for (int m = 0; m < NMASTERS; m++) {
        if (!info_ctx[m]) {
            struct timeval tv = {2, 0};
            info_ctx[m] = redisConnectWithTimeout(master_host[m], master_port[m], tv);
            if (!info_ctx[m] || info_ctx[m]->err) {
                if (info_ctx[m])
                    redisFree(info_ctx[m]);
                info_ctx[m] = NULL;
                return -1;
            }
            redisSetTimeout(info_ctx[m], tv);
        }
        redisReply *r = redisCommand(info_ctx[m], "INFO cpu");
        if (!r || r->type != REDIS_REPLY_STRING) {
            if (r)
                freeReplyObject(r);
            redisFree(info_ctx[m]);
            info_ctx[m] = NULL;
            return -1;
        }
        const char *sys = strstr(r->str, "used_cpu_sys:"), *user = strstr(r->str, "used_cpu_user:");
        if (sys)
            sum += strtod(sys + 13, NULL);
        if (user)
            sum += strtod(user + 14, NULL);
        freeReplyObject(r);
    }
    return sum;
}

double per_1000(double cpu_s, long cycles)
{
    return cycles > 0 && cpu_s >= 0 ? cpu_s / (double)cycles * 1000.0 : -1;
}

/* CPU seconds of the calling thread (user + system). */
double thread_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) < 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void finish(result *r, samples *s, uint64_t elapsed_us)
{
    r->ran = true;
    qsort(s->v, s->n, sizeof *s->v, cmp_u32);
    r->seconds = (double)elapsed_us / 1e6;
    r->cycles_per_s = (double)r->cycles / r->seconds;
    r->p50 = pct_ms(s, 50);
    r->p99 = pct_ms(s, 99);
    r->p999 = pct_ms(s, 99.9);
}

/* ---- processes ---- */

static bool tcp_ready(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

void wait_port(int port, const char *what)
{
    for (int i = 0; i < 500; i++) {
        if (tcp_ready(port))
            return;
        usleep(10000);
    }
    fprintf(stderr, "bench: %s on port %d did not start\n", what, port);
    exit(1);
}

/* utime + stime of pid in seconds; peak RSS in KiB through *hwm_kib. */
double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof buf, f)) {
        if (f)
            fclose(f);
        return 0;
    }
    fclose(f);
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after the name: state(3) ... utime(14) stime(15) */
    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

long proc_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field)))
            v = strtol(line + strlen(field) + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}
