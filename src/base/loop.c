/* loop.c - see loop.h. */
#include "loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

struct job {
    struct job *next;
    void (*fn)(void *);
    void *arg;
};

struct timer {
    uint64_t when_us;           /* monotonic */
    uint64_t seq;               /* FIFO among equal times */
    void (*fn)(void *);
    void *arg;
};

struct rl_loop {
    loop_client client;
    void *arg;
    pthread_t thread;
    bool started;
    int wake_fd;                /* eventfd; -1 before start */

    int io_fd;                  /* the other event source (the HTTP server), -1 none */
    loop_io_fn io_run;
    loop_io_due_fn io_due;
    void *io_arg;

    pthread_mutex_t jobs_lock;
    struct job *jobs_head, *jobs_tail;
    bool stopping;              /* under jobs_lock */
    bool signalled;             /* the wake fd was written since the last run; under jobs_lock */
    atomic_bool lazy_pending;   /* jobs queued without a wake-up */

    struct timer *timers;       /* min-heap by (when_us, seq) */
    atomic_bool timers_final;   /* the loop is ending: timers run to clean up */
    size_t ntimers, timers_cap; /* entries; allocated entries */
    uint64_t timer_seq;         /* the next timer's seq */

    /* Its own stalls (written by the thread, read anywhere): */
    atomic_ullong stalls;       /* times it could not look at its sockets for longer than
                                   LOOP_STALL_US past when it meant to */
    atomic_ullong stall_us;     /* their time past LOOP_STALL_US, summed */
};

long long loop_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

uint64_t loop_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

rl_loop *loop_new(const loop_client *client, void *arg)
{
    rl_loop *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->client = *client;
    l->arg = arg;
    l->wake_fd = -1;
    l->io_fd = -1;
    pthread_mutex_init(&l->jobs_lock, NULL);
    return l;
}

/* ---- jobs ---- */

/* Queues a job; wakes the loop unless lazy or already woken. */
static int post(rl_loop *l, void (*fn)(void *), void *arg, bool lazy)
{
    struct job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    j->next = NULL;
    j->fn = fn;
    j->arg = arg;
    pthread_mutex_lock(&l->jobs_lock);
    if (l->stopping) {
        pthread_mutex_unlock(&l->jobs_lock);
        free(j);
        return -1;
    }
    if (l->jobs_tail)
        l->jobs_tail->next = j;
    else
        l->jobs_head = j;
    l->jobs_tail = j;
    /* Posted from the loop itself: it runs the job before it sleeps again,
     * so no wake-up write is needed (the HTTP server posts every request
     * from this thread). */
    if (l->started && pthread_equal(pthread_self(), l->thread))
        lazy = true;
    bool wake = !lazy && !l->signalled;
    if (wake)
        l->signalled = true;
    if (lazy)
        atomic_store(&l->lazy_pending, true);
    pthread_mutex_unlock(&l->jobs_lock);
    if (wake) {
        uint64_t one = 1;
        ssize_t ignored = write(l->wake_fd, &one, sizeof one);
        (void)ignored;
    }
    return 0;
}

int loop_post(rl_loop *l, void (*fn)(void *), void *arg) { return post(l, fn, arg, false); }

int loop_post_lazy(rl_loop *l, void (*fn)(void *), void *arg) { return post(l, fn, arg, true); }

/* Runs the posted jobs; woken: the wake fd was readable, so it is drained
 * (a run for lazy jobs alone reads nothing: that read would only fail with
 * EAGAIN, once per request at one client). */
static void run_jobs(rl_loop *l, bool woken)
{
    if (woken) {
        uint64_t drained;
        ssize_t ignored = read(l->wake_fd, &drained, sizeof drained);
        (void)ignored;
    }
    pthread_mutex_lock(&l->jobs_lock);
    struct job *j = l->jobs_head;
    l->jobs_head = l->jobs_tail = NULL;
    l->signalled = false;
    atomic_store(&l->lazy_pending, false);
    pthread_mutex_unlock(&l->jobs_lock);
    while (j) {
        struct job *next = j->next;
        j->fn(j->arg);
        free(j);
        j = next;
    }
}

/* ---- timers: a binary min-heap by (when, seq), so timers due at the same
 * time run in the order they were set ---- */

static bool timer_before(const struct timer *a, const struct timer *b)
{
    return a->when_us < b->when_us || (a->when_us == b->when_us && a->seq < b->seq);
}

int loop_after(rl_loop *l, uint64_t delay_us, void (*fn)(void *), void *arg)
{
    if (atomic_load(&l->timers_final))
        return -1;
    if (l->ntimers == l->timers_cap) {
        size_t cap = l->timers_cap ? l->timers_cap * 2 : 64;
        struct timer *t = realloc(l->timers, cap * sizeof *t);
        if (!t)
            return -1;
        l->timers = t;
        l->timers_cap = cap;
    }
    size_t i = l->ntimers++;
    struct timer t = {loop_now_us() + delay_us, l->timer_seq++, fn, arg};
    while (i > 0 && timer_before(&t, &l->timers[(i - 1) / 2])) {
        l->timers[i] = l->timers[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    l->timers[i] = t;
    return 0;
}

static struct timer timer_pop(rl_loop *l)
{
    struct timer top = l->timers[0];
    struct timer last = l->timers[--l->ntimers];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->ntimers)
            break;
        if (c + 1 < l->ntimers && timer_before(&l->timers[c + 1], &l->timers[c]))
            c++;
        if (!timer_before(&l->timers[c], &last))
            break;
        l->timers[i] = l->timers[c];
        i = c;
    }
    if (l->ntimers)
        l->timers[i] = last;
    return top;
}

/* Runs the timers due by now. */
static void run_timers(rl_loop *l, uint64_t now)
{
    while (l->ntimers && l->timers[0].when_us <= now) {
        struct timer t = timer_pop(l);
        t.fn(t.arg);
    }
}

/* The loop is ending: runs every timer left, once, with loop_stopping
 * true, and refuses new ones. */
static void finish_timers(rl_loop *l)
{
    atomic_store(&l->timers_final, true);
    while (l->ntimers) {
        struct timer t = timer_pop(l);
        t.fn(t.arg);
    }
}

bool loop_stopping(const rl_loop *l) { return atomic_load(&l->timers_final); }

/* ---- the thread ---- */

static uint64_t next_wakeup(rl_loop *l, uint64_t now)
{
    if (atomic_load(&l->lazy_pending))
        return now;   /* jobs the loop posted to itself run before it sleeps */
    uint64_t t = UINT64_MAX;
    if (l->client.due)
        t = l->client.due(l->arg, now);
    if (l->io_run) {
        uint64_t io = l->io_due(l->io_arg, now);
        if (io < t)
            t = io;
    }
    if (l->ntimers && l->timers[0].when_us < t)
        t = l->timers[0].when_us;
    return t;
}

static bool is_stopping(rl_loop *l)
{
    pthread_mutex_lock(&l->jobs_lock);
    bool s = l->stopping;
    pthread_mutex_unlock(&l->jobs_lock);
    return s;
}

/* A stall: the loop looked at its sockets later than it meant to, by
 * more than LOOP_STALL_US (a SIGSTOP, a CPU quota spent, a host that did
 * not schedule it, or a turn of its own that ran long). Counted, so that an
 * operator can tell a starved process from a slow master; whatever the
 * masters answered meanwhile waits in the sockets and counts as on time. */
static void note_stall(rl_loop *l, uint64_t late_us)
{
    if (late_us <= LOOP_STALL_US)
        return;
    atomic_fetch_add(&l->stalls, 1);
    atomic_fetch_add(&l->stall_us, late_us - LOOP_STALL_US);
}

void loop_stalls(const rl_loop *l, unsigned long long *count, unsigned long long *us)
{
    *count = atomic_load(&l->stalls);
    *us = atomic_load(&l->stall_us);
}

static void *loop_main(void *arg)
{
    rl_loop *l = arg;
    const loop_client *c = &l->client;
    struct pollfd fds[LOOP_MAX_CLIENT_FDS + 2];
    uint64_t now = loop_now_us();
    for (;;) {
        if (c->before_poll)
            c->before_poll(l->arg, now);
        int nfds = 0;
        fds[nfds++] = (struct pollfd){.fd = l->wake_fd, .events = POLLIN};
        int io_at = -1;
        if (l->io_run) {
            io_at = nfds;
            fds[nfds++] = (struct pollfd){.fd = l->io_fd, .events = POLLIN};
        }
        int first = nfds;
        if (c->fds)
            nfds += c->fds(l->arg, fds + first, LOOP_MAX_CLIENT_FDS);
        uint64_t wake = next_wakeup(l, now);
        uint64_t turn_start = now;
        now = loop_now_us();
        note_stall(l, now - turn_start);   /* the turn itself, from its poll's return */
        uint64_t wait_us = wake > now ? wake - now : 0;
        if (wait_us > 3600000000ULL)
            wait_us = 3600000000ULL;
        struct timespec ts = {(time_t)(wait_us / 1000000ULL), (long)(wait_us % 1000000ULL) * 1000L};
        int rc = ppoll(fds, (nfds_t)nfds, &ts, NULL);
        if (rc < 0 && errno != EINTR) {
            log_event(LOG_LEVEL_ERROR, "loop_poll_failed", "error", strerror(errno), NULL);
            usleep(1000);
        }
        uint64_t meant = now + wait_us;   /* a wake already due counts from the poll, not twice */
        now = loop_now_us();
        if (now > meant)
            note_stall(l, now - meant);   /* back later than it meant to be */
        if (c->ready)
            c->ready(l->arg, fds + first, nfds - first, rc, now);
        bool io_ready = rc > 0 && io_at >= 0 && fds[io_at].revents;
        if (l->io_run && (io_ready || l->io_due(l->io_arg, now) <= now))
            l->io_run(l->io_arg);
        bool woken = rc > 0 && fds[0].revents;
        if (woken || atomic_load(&l->lazy_pending))
            run_jobs(l, woken);
        if (c->after_jobs)
            c->after_jobs(l->arg, now);
        run_timers(l, now);
        if (c->after_timers)
            c->after_timers(l->arg, now);
        if (is_stopping(l))
            break;
    }
    if (c->stop)
        c->stop(l->arg, now);
    /* Timers still pending run once more, told by loop_stopping that this
     * is the end, so that what they point at is freed. */
    finish_timers(l);
    return NULL;
}

bool loop_on(const rl_loop *l) { return l->started && pthread_equal(pthread_self(), l->thread); }

void loop_set_io(rl_loop *l, int fd, loop_io_fn run, loop_io_due_fn due, void *arg)
{
    l->io_fd = fd;
    l->io_due = due;
    l->io_arg = arg;
    l->io_run = run;
}

int loop_start(rl_loop *l)
{
    l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->wake_fd < 0)
        return -1;
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        close(l->wake_fd);
        l->wake_fd = -1;
        return -1;
    }
    l->started = true;
    return 0;
}

void loop_stop(rl_loop *l)
{
    if (!l->started)
        return;
    pthread_mutex_lock(&l->jobs_lock);
    l->stopping = true;
    pthread_mutex_unlock(&l->jobs_lock);
    uint64_t one = 1;
    ssize_t ignored = write(l->wake_fd, &one, sizeof one);
    (void)ignored;
    pthread_join(l->thread, NULL);
    l->started = false;
    /* Jobs posted before the stop flag was seen are dropped unrun. */
    struct job *j = l->jobs_head;
    while (j) {
        struct job *next = j->next;
        free(j);
        j = next;
    }
    l->jobs_head = l->jobs_tail = NULL;
    l->ntimers = 0;
}

void loop_free(rl_loop *l)
{
    if (!l)
        return;
    loop_stop(l);
    if (l->wake_fd >= 0)
        close(l->wake_fd);
    free(l->timers);
    pthread_mutex_destroy(&l->jobs_lock);
    free(l);
}

/* loop_call's: fn(arg) run on the loop's thread, waited for. */
struct waited_call {
    void (*fn)(void *);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void waited_call_job(void *arg)
{
    struct waited_call *c = arg;
    c->fn(c->arg);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void loop_call(rl_loop *l, void (*fn)(void *), void *arg)
{
    struct waited_call c = {fn, arg, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    if (loop_post(l, waited_call_job, &c) < 0) {
        fn(arg);   /* the loop has stopped: nothing else runs on it */
        return;
    }
    pthread_mutex_lock(&c.mu);
    while (!c.done)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
}
