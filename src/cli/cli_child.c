/* cli_child.c - CMD: its environment, descriptors, process group and exit
 * (cli_int.h). */
#include "cli_int.h"

/* Descriptors redlock was started with, which CMD inherits as any child
 * would; every other one (libcurl's, such as its multi handle's wake-up
 * socket pair) is made close-on-exec before CMD starts. */
#define FDS_TRACKED 4096
static unsigned char fds_at_start[FDS_TRACKED / 8];

void cli_note_inherited_fds(void)
{
    for (int fd = 0; fd < FDS_TRACKED; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            fds_at_start[fd / 8] |= (unsigned char)(1u << (fd % 8));
}

static void close_own_fds_on_exec(void)
{
    for (int fd = 3; fd < FDS_TRACKED; fd++) {
        if (fds_at_start[fd / 8] & (1u << (fd % 8)))
            continue;
        int flags = fcntl(fd, F_GETFD);
        if (flags != -1 && !(flags & FD_CLOEXEC))
            fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
}

static bool own_var(const char *v)
{
    return !strncmp(v, "REDLOCK_NAME=", 13) || !strncmp(v, "REDLOCK_TOKEN=", 14) ||
           !strncmp(v, "REDLOCK_FENCE=", 14) || !strncmp(v, "REDLOCK_TERM=", 13) ||
           !strncmp(v, "REDLOCK_AUTH_TOKEN=", 19);
}

/* CMD's environment: ours, with REDLOCK_NAME, REDLOCK_TOKEN, REDLOCK_FENCE
 * (and for elect REDLOCK_TERM, the same number). REDLOCK_TOKEN is the
 * lock's token there, so REDLOCK_AUTH_TOKEN, which wins over it, carries
 * the bearer token our environment gave, or "" for none
 * (cli_child_auth_token): a redlock that CMD runs never sends the lock's
 * token as its bearer token. */
static char **child_env(const run *r)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 6, sizeof *env);
    if (!env)
        return NULL;
    const char *auth = cli_child_auth_token(getenv("REDLOCK_AUTH_TOKEN"), getenv("REDLOCK_TOKEN"));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!own_var(environ[i]))
            env[k++] = environ[i];
    char fence[32];
    snprintf(fence, sizeof fence, "%lld", r->fence);
    if (asprintf(&env[k++], "REDLOCK_AUTH_TOKEN=%s", auth) < 0 ||
        asprintf(&env[k++], "REDLOCK_NAME=%s", r->a->name) < 0 ||
        asprintf(&env[k++], "REDLOCK_TOKEN=%s", r->token) < 0 ||
        asprintf(&env[k++], "REDLOCK_FENCE=%s", fence) < 0 ||
        (r->a->cmd == CLI_ELECT && asprintf(&env[k++], "REDLOCK_TERM=%s", fence) < 0))
        return NULL;   /* a failed asprintf leaves its pointer undefined: exit follows */
    env[k] = NULL;
    return env;
}

/* Starts CMD in a process group of its own. Only async-signal-safe calls
 * between fork and exec (libcurl's resolver may have run a thread). */
int cli_spawn(run *r)
{
    char **env = child_env(r);
    if (!env) {
        cli_say("out of memory");
        return -1;
    }
    close_own_fds_on_exec();
    pid_t parent = getpid();
    /* A terminal in the foreground goes to CMD, so that it can read it and
     * a Ctrl-C there reaches CMD's whole group directly. */
    r->tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
    /* Signals wait until the child has its own dispositions: our handlers
     * would write into our self-pipe. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        cli_say("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        if (r->tty) {
            signal(SIGTTOU, SIG_IGN);
            tcsetpgrp(STDIN_FILENO, getpid());
            signal(SIGTTOU, SIG_DFL);
        }
        /* If redlock dies, the service releases the lock as the stream
         * closes: CMD must not go on. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(128 + SIGKILL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        execvpe(r->a->cmd_argv[0], r->a->cmd_argv, env);
        int e = errno;
        const char *msg = strerror(e);
        const char *parts[] = {"redlock: ", r->a->cmd_argv[0], ": ", msg, "\n"};
        for (size_t i = 0; i < 5; i++) {
            ssize_t w = write(STDERR_FILENO, parts[i], strlen(parts[i]));
            (void)w;
        }
        _exit(e == ENOENT ? 127 : 126);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    setpgid(pid, pid);   /* both sides, so neither races the other */
    if (r->tty)
        tcsetpgrp(STDIN_FILENO, pid);
    r->child = pid;
    for (size_t i = 0; env[i]; i++)
        if (own_var(env[i]))
            free(env[i]);
    free(env);
    return 0;
}

void cli_take_back_tty(run *r)
{
    if (!r->tty)
        return;
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    sigprocmask(SIG_BLOCK, &ttou, &old);
    tcsetpgrp(STDIN_FILENO, getpgrp());
    sigprocmask(SIG_SETMASK, &old, NULL);
    r->tty = false;
}

void cli_reap(run *r)
{
    if (r->child <= 0 || r->reaped)
        return;
    int st;
    pid_t p;
    while ((p = waitpid(r->child, &st, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (p == r->child) {
        r->reaped = true;
        r->status = st;
        cli_take_back_tty(r);
    }
}

bool cli_group_alive(const run *r)
{
    return r->child > 0 && kill(-r->child, 0) == 0;
}

int cli_child_exit_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return CLI_EXIT_SOFTWARE;
}
