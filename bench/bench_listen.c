/* bench_listen.c - HTTPS and a Unix socket beside plain TCP (bench
 * --listeners R; bench_int.h): acquire+release cycles over kept-alive
 * connections, on two redlockd instances over the same masters, one at a
 * time: A plain (a TCP listener and a Unix socket), B HTTPS with client
 * certificates (--tls-client-ca-file; each client handshakes once, before
 * the clock, and keeps its connection). Rows, in R rounds that alternate
 * which goes first, so that the machine's load falls on both alike:
 *
 *   1 and 64 clients: plain TCP, HTTPS (goal: HTTPS p50 <= 1.2x plain)
 *   1 client:         Unix socket, plain TCP
 *
 * The ratios are taken within a round (same minute, same load), and their
 * median over the rounds is the result. Certificates are made with the
 * openssl CLI (an EC P-256 CA, server and client). */
#include "bench_int.h"

static void sh(const char *cmd)
{
    if (system(cmd) != 0) {
        fprintf(stderr, "bench: failed: %s\n", cmd);
        exit(1);
    }
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)   /* (a handful: insertion sort) */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n == 0 ? -1 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void loadavg(char *out, size_t cap)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (!f || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
        snprintf(out, cap, "?");
    else
        snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
    if (f)
        fclose(f);
}

static pid_t start_daemon(const char *bin, const char *masters, const char *log, char **listen_args, int port)
{
    char *av[24];
    int a = 0;
    av[a++] = (char *)bin;
    for (int i = 0; listen_args[i]; i++)
        av[a++] = listen_args[i];
    char *rest[] = {"--masters", (char *)masters, "--log-level", "warn", "--threads", "1", NULL};
    for (int i = 0; rest[i]; i++)
        av[a++] = rest[i];
    av[a] = NULL;
    pid_t p = h_spawn(av, log);
    wait_port(port, "redlockd");
    return p;
}

int run_listeners(const char *bin, const char *masters, const char *dir, double seconds, int rounds)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && (K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes' && "
             "openssl req -x509 $K -keyout ca.key -out ca.crt -days 2 -subj /CN=bench-ca && "
             "openssl req $K -keyout server.key -out server.csr -subj /CN=bench-server && "
             "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt "
             "-days 2 -extfile san.ext && "
             "openssl req $K -keyout client.key -out client.csr -subj /CN=bench-client && "
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2"
             ") >openssl.log 2>&1",
             dir);
    sh(cmd);
    char path[4][400];
    snprintf(path[0], sizeof path[0], "%s/ca.crt", dir);
    snprintf(path[1], sizeof path[1], "%s/server.crt", dir);
    snprintf(path[2], sizeof path[2], "%s/server.key", dir);
    snprintf(path[3], sizeof path[3], "%s/r.sock", dir);
    int tcp_port = h_free_port(), tls_port = h_free_port();
    char l_tcp[64], l_unix[420], l_tls[64], log_a[400], log_b[400];
    snprintf(l_tcp, sizeof l_tcp, "127.0.0.1:%d", tcp_port);
    snprintf(l_unix, sizeof l_unix, "unix:%s", path[3]);
    snprintf(l_tls, sizeof l_tls, "127.0.0.1:%d", tls_port);
    snprintf(log_a, sizeof log_a, "%s/redlockd-plain.log", dir);
    snprintf(log_b, sizeof log_b, "%s/redlockd-https.log", dir);
    char *args_a[] = {"--listen", l_tcp, "--listen", l_unix, NULL};
    char *args_b[] = {"--listen", l_tls, "--tls-cert-file", path[1], "--tls-key-file", path[2],
                      "--tls-client-ca-file", path[0], NULL};
    pid_t a = start_daemon(bin, masters, log_a, args_a, tcp_port);
    pid_t b = start_daemon(bin, masters, log_b, args_b, tls_port);
    usleep(300000);   /* masters connected */

    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    char client_crt[400], client_key[400];
    snprintf(client_crt, sizeof client_crt, "%s/client.crt", dir);
    snprintf(client_key, sizeof client_key, "%s/client.key", dir);
    if (!ctx || SSL_CTX_load_verify_locations(ctx, path[0], NULL) != 1 ||
        SSL_CTX_use_certificate_file(ctx, client_crt, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, client_key, SSL_FILETYPE_PEM) != 1)
        die("the benchmark's TLS client");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    bench_target tcp = {.port = tcp_port}, tls = {.port = tls_port, .tls = ctx}, unx = {.unix_path = path[3]};

    char load0[64], load1[64];
    loadavg(load0, sizeof load0);
    printf("HTTPS and a Unix socket beside plain TCP: %d rounds of %.1f s per row, alternating; "
           "load average before: %s (%ld CPUs)\n\n", rounds, seconds, load0, sysconf(_SC_NPROCESSORS_ONLN));
    print_header();
    static const int levels[2] = {1, 64};
    double r_https[2][64], r_unix[64], r_https_cps[2][64], r_unix_cps[64];
    long errors = 0;
    if (rounds > 64)
        rounds = 64;
    for (int r = 0; r < rounds; r++) {
        for (int l = 0; l < 2; l++) {
            result x[2];   /* plain, https; the first to run alternates */
            for (int k = 0; k < 2; k++) {
                int which = (k + r) % 2;
                x[which] = which ? run_http_to(&tls, levels[l], seconds, b, false)
                                 : run_http_to(&tcp, levels[l], seconds, a, false);
            }
            print_row("tcp", &x[0]);
            print_row("https", &x[1]);
            r_https[l][r] = x[0].p50 > 0 ? x[1].p50 / x[0].p50 : -1;
            r_https_cps[l][r] = x[1].cycles_per_s > 0 ? x[0].cycles_per_s / x[1].cycles_per_s : -1;
            errors += x[0].errors + x[1].errors;
        }
        result u[2];   /* tcp, unix */
        for (int k = 0; k < 2; k++) {
            int which = (k + r) % 2;
            u[which] = which ? run_http_to(&unx, 1, seconds, a, false) : run_http_to(&tcp, 1, seconds, a, false);
        }
        print_row("tcp", &u[0]);
        print_row("unix socket", &u[1]);
        r_unix[r] = u[0].p50 > 0 ? u[1].p50 / u[0].p50 : -1;
        r_unix_cps[r] = u[1].cycles_per_s > 0 ? u[0].cycles_per_s / u[1].cycles_per_s : -1;
        errors += u[0].errors + u[1].errors;
        fflush(stdout);
    }
    loadavg(load1, sizeof load1);
    printf("\nload average after: %s\n", load1);
    for (int l = 0; l < 2; l++) {
        printf("HTTPS/TCP at %2d clients, acquire p50, per round:", levels[l]);
        for (int r = 0; r < rounds; r++)
            printf(" %.2f", r_https[l][r]);
        double m = median(r_https[l], rounds);
        printf("; median %.2fx (goal <= 1.20x: %s); cycles/s TCP/HTTPS median %.2fx\n", m,
               m > 0 && m <= 1.2 ? "met" : "missed", median(r_https_cps[l], rounds));
    }
    printf("Unix/TCP at  1 client, acquire p50, per round:");
    for (int r = 0; r < rounds; r++)
        printf(" %.2f", r_unix[r]);
    printf("; median %.2fx; cycles/s TCP/Unix median %.2fx\n", median(r_unix, rounds), median(r_unix_cps, rounds));

    SSL_CTX_free(ctx);
    kill(a, SIGTERM);
    kill(b, SIGTERM);
    waitpid(a, NULL, 0);
    waitpid(b, NULL, 0);
    return errors ? 1 : 0;
}
