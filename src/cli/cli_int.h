/* cli_int.h - what the files of the `redlock` client share (cli_parse.h
 * is its pure part: arguments, values, answers). Which file holds what:
 *   redlock.c      main: parse, then one command
 *   cli_http.c     the service: its address (http, https, a Unix socket),
 *                  TLS files and token, one HTTP call and its answer,
 *                  waiting between tries
 *   cli_cmds.c     acquire, extend, release, status, ready, elect --observe
 *   cli_run.c      run and elect: the held stream's state machine, signals
 *   cli_child.c    CMD: its environment, descriptors, process group, exit
 *   cli_permit.c   run --limit: a permit renewed by PATCH
 */
#ifndef RL_CLI_INT_H
#define RL_CLI_INT_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli_parse.h"

#ifndef REDLOCKD_VERSION
#define REDLOCKD_VERSION "dev"
#endif

#define CONNECT_TIMEOUT_MS 5000L
#define CALL_TIMEOUT_MS 30000L      /* a call that does not wait */
#define CLI_LIST_PAGE 1000          /* list: names asked for a page (the service's most) */
#define CLI_CURSOR_MAX 512          /* list: the longest next cursor taken */
#define CLI_HEARTBEAT_MS 10000LL    /* run and elect without --ttl: the heartbeat_ms they ask for */
#define RELEASE_TIMEOUT_MS 5000L    /* run's DELETE after CMD exits */
#define MAX_BODY_BYTES (1 << 20)

extern char **environ;


/* ---- HTTP ---- */

typedef struct answer {
    long status;                 /* 0: no answer; errbuf and rc say why */
    CURLcode rc;                 /* the transfer's outcome, once it ended */
    char *body;                  /* NUL-terminated, never NULL after a call */
    size_t len;
    char errbuf[CURL_ERROR_SIZE];
} answer;


enum run_phase { ACQUIRING, HOLDING, DONE };

typedef struct run {
    const cli_args *a;
    enum run_phase phase;
    int exit_code;
    /* the acquire, then the held stream */
    CURLM *multi;
    CURL *h;                      /* NULL between tries */
    struct curl_slist *hdrs;
    answer ans;                   /* a refusal's body (the stream's lines go to lines) */
    cli_lines lines;
    int kind;                     /* 0 unknown yet, 1 held stream, 2 an ordinary answer */
    char path[CLI_PATH_MAX];
    char owner[RULES_OWNER_MAX + 1];
    long long cap;                /* largest wait_ms the service takes */
    long long asked_ms;           /* wait_ms of the try under way */
    uint64_t sent_us, deadline_us, retry_at_us;
    int transients;               /* transient 503s ridden out so far */
    /* the lock */
    bool acquired;
    char token[300];
    long long fence;
    uint64_t valid_until_us;      /* from when the last acquired/renewed event was read */
    /* heartbeats: the stream asks for one every heartbeat_ms (so that a
     * stopped redlock loses its lock), sent every quarter of it */
    long long heartbeat_ms;
    CURL *beat;                   /* the heartbeat in flight, if any */
    struct curl_slist *beat_hdrs;
    answer beat_ans;
    uint64_t next_beat_us;
    bool lost, releasing;
    char why[300];                /* what happened to the lock */
    /* CMD */
    pid_t child;                  /* also its process group; 0 before it starts */
    bool reaped, tty;
    int status;                   /* waitpid's, once reaped */
    bool term_sent, kill_sent;
    uint64_t kill_at_us;
} run;

extern cli_service cli_svc;          /* the service, its TLS files (cli_set_service) */
extern char cli_auth_header[600];    /* "Authorization: Bearer ..." or "" */
extern int cli_sig_pipe[2];          /* the signal handlers' self-pipe */

/* cli_http.c */
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t cli_now_us(void);
double cli_random_unit(void);
void cli_sleep_ms(long long ms);
/* The service from --url, --cacert, --cert, --key and their variables
 * (cli_service_resolve), its files checked readable; -1 (said) when not. */
int cli_set_service(const cli_args *a);
/* The bearer token from --auth-token-file, REDLOCK_AUTH_TOKEN or
 * REDLOCK_TOKEN (cli_token_source); -1 (said) when it is unusable. */
int cli_set_auth(const char *file);
/* The admin token instead (release --force): --admin-token-file or
 * REDLOCK_ADMIN_TOKEN; -1 (said) when there is none. */
int cli_set_admin_auth(const char *file);
void cli_answer_reset(answer *a);
size_t cli_on_body(char *p, size_t size, size_t n, void *arg);
CURL *cli_new_request(const char *method, const char *path, const char *body,
                      const char *lock_token, long timeout_ms, struct curl_slist **hdrs,
                      answer *a);
int cli_call(const char *method, const char *path, const char *body, const char *lock_token,
             long timeout_ms, answer *a);
int cli_unreachable(const answer *a);
int cli_refused(const answer *a);
void cli_lock_path(const char *name, char *out, size_t outlen);
const char *cli_json_str(const char *body, const char *field, char *out, size_t outlen);
long long cli_json_int(const char *body, const char *field);
long long cli_next_wait(long long wait_ms, uint64_t deadline_us, long long cap);
bool cli_wait_left(long long wait_ms, uint64_t deadline_us);
void cli_back_off(const answer *a, long long wait_ms, uint64_t deadline_us);
/* A transient 503 within --wait: says so on stderr (what failed, the
 * attempt, the wait left) and returns when to try again (cli_now_us clock),
 * within the wait. */
uint64_t cli_ride_out(const answer *a, int attempt, long long wait_ms, uint64_t deadline_us);

/* cli_cmds.c */
int cli_cmd_acquire(const cli_args *a);
int cli_cmd_extend(const cli_args *a);
int cli_cmd_release(const cli_args *a);
int cli_cmd_status(const cli_args *a);
int cli_cmd_ready(const cli_args *a);
int cli_cmd_list(const cli_args *a);
int cli_cmd_observe(const cli_args *a);

/* cli_run.c */
void cli_lose(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_on_signals(run *r);
int cli_setup_signals(void);
void cli_default_owner(char *out, size_t outlen);
long cli_until_ms(uint64_t t, uint64_t now, long cap);
long cli_stop_lost_child(const cli_args *a, run *r, uint64_t now, long timeout);
int cli_cmd_run(const cli_args *a);

/* cli_child.c */
void cli_note_inherited_fds(void);
int cli_spawn(run *r);
void cli_take_back_tty(run *r);
void cli_reap(run *r);
bool cli_group_alive(const run *r);
int cli_child_exit_code(int st);

/* cli_permit.c */
int cli_cmd_run_permit(const cli_args *a);

#endif
