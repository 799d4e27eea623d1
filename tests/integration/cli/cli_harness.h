/* cli_harness.h - the tests of the `redlock` client (test_cli.c: one-call
 * commands, exit codes, the README; test_cli_run.c: run, CMD and signals)
 * run the real binary (REDLOCK_BIN) against the real redlockd.
 *
 * CMD is often the test binary itself: a constructor in cli_harness.c
 * turns it into a small child (CLI_TEST_CHILD) that logs its start and end
 * on CLOCK_MONOTONIC, which every process of the machine shares. */
#ifndef CLI_HARNESS_H
#define CLI_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

extern h_cluster *C;
extern char T[64];         /* this test's folder: outputs, logs, markers */
extern char SELF[512];     /* this test binary, run as CMD */

/* The suite's init and fini: a folder for the test, no inherited settings. */
void cli_setup(void);
void cli_teardown(void);

int overlaps(const char *path, int *n, int *fence_bad, int *open_ones);
const char *bin(void);
void path_of(char *out, size_t outlen, const char *file);
int finish(pid_t pid, int timeout_ms);
const char *slurp(int slot, const char *file);
const char *out_of(const char *tag);
const char *err_of(const char *tag);
/* Is tag's stderr one line that names redlock, as every error must be? */
bool cli_one_line(const char *tag);
bool wait_file(const char *file, int timeout_ms);
void start_service(int n, ...);
const char *trapping_child(char *buf, size_t len);
/* Runs redlock with args (NULL-ended) as tag: its output and errors go to
 * files of the test's folder (out_of, err_of). START returns at once with
 * its pid (then finish), RUN waits for its exit status. */
pid_t start_v(const char *tag, const char *const *args);
int run_v(const char *tag, const char *const *args);
#define START(tag, ...) start_v(tag, (const char *const[]){__VA_ARGS__, NULL})
#define RUN(tag, ...) run_v(tag, (const char *const[]){__VA_ARGS__, NULL})

/* ---- HTTPS and Unix sockets (issue 43) ----
 * The tests start the real redlockd with those listeners (--listen
 * unix:PATH; --tls-cert-file, --tls-key-file, --tls-client-ca-file with a
 * principals file whose credentials are certificates) and read its audit
 * log to see whom and where each call came from. */

/* Certificates made by the openssl CLI in T/tls: a CA, a server certificate
 * for 127.0.0.1 and localhost signed by it, a client certificate (CN
 * redlock-test-client) and one that the tests give no principal (CN
 * nobody-client) signed by it, and another CA with a client certificate of
 * its own (CN foreign-client). Full paths. */
typedef struct cli_certs {
    char ca[300], server_crt[300], server_key[300], client_crt[300], client_key[300];
    char nobody_crt[300], nobody_key[300];
    char other_ca[300], foreign_crt[300], foreign_key[300];
} cli_certs;
void cli_make_certs(cli_certs *k);

#endif
