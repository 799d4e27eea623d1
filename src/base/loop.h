/* loop.h - an event loop: one thread that polls file descriptors, runs jobs
 * posted from any thread, and runs timers, with the clock they all count
 * on. Generic, as Redis keeps ae.c: it knows nothing of masters or HTTP.
 *
 * A loop has one client, which owns it (the master layer: its connections,
 * master_loop.c) and is asked each turn for its descriptors and when it next
 * needs a turn, then told what poll found; and at most one more event source
 * (loop_set_io: the HTTP server of that loop). Each turn runs, in order:
 * the client's before_poll; poll over the wake fd, the io fd and the
 * client's descriptors, until the earliest of what anyone is due; the
 * client's ready; the io source when readable or due; the posted jobs; the
 * client's after_jobs; the timers due; the client's after_timers. On stop,
 * the client's stop runs, then every timer left, once, with loop_stopping
 * true.
 *
 * Everything here but loop_post, loop_post_lazy, loop_on, loop_stopping and
 * loop_now_us is for the loop's own thread (or before loop_start).
 */
#ifndef RL_LOOP_H
#define RL_LOOP_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct rl_loop rl_loop;

/* The loop's client; arg is given back to each. Any may be NULL. */
typedef struct loop_client {
    void (*before_poll)(void *arg, uint64_t now);
    /* Fills up to cap descriptors to poll; returns how many. */
    int (*fds)(void *arg, struct pollfd *fds, int cap);
    /* The latest time it wants its next turn. */
    uint64_t (*due)(void *arg, uint64_t now);
    /* What poll found of its n descriptors (rc: poll's result). */
    void (*ready)(void *arg, const struct pollfd *fds, int n, int rc, uint64_t now);
    void (*after_jobs)(void *arg, uint64_t now);
    void (*after_timers)(void *arg, uint64_t now);
    /* The loop is ending, before the last timers run. */
    void (*stop)(void *arg, uint64_t now);
} loop_client;

#define LOOP_MAX_CLIENT_FDS 64

/* NULL on OOM. client is copied. */
rl_loop *loop_new(const loop_client *client, void *arg);
/* Starts the thread. 0, or -1. */
int loop_start(rl_loop *l);
/* Ends the thread (the client's stop, then the timers left); jobs not yet
 * run are dropped. */
void loop_stop(rl_loop *l);
void loop_free(rl_loop *l);

/* Another event source (the HTTP server of this loop): run(arg) on the
 * loop thread when fd is readable, and when due(arg, now) (the latest time
 * it wants to run, UINT64_MAX for no limit) has come. Before loop_start or
 * on the loop thread; run NULL detaches it. */
typedef void (*loop_io_fn)(void *arg);
typedef uint64_t (*loop_io_due_fn)(void *arg, uint64_t now);
void loop_set_io(rl_loop *l, int fd, loop_io_fn run, loop_io_due_fn due, void *arg);

/* True on the loop's thread. */
bool loop_on(const rl_loop *l);

/* Any thread: runs fn(arg) on the loop thread soon, in posting order.
 * Returns 0, or -1 on OOM or after stop (fn is then never run). */
int loop_post(rl_loop *l, void (*fn)(void *), void *arg);
/* The same without waking the loop: fn runs on its next turn (a reply, a
 * timer, another job, or whatever the client is due for). For bookkeeping
 * that nothing waits for. */
int loop_post_lazy(rl_loop *l, void (*fn)(void *), void *arg);
/* Any thread but the loop's own: runs fn(arg) on the loop thread and waits
 * for it (here, at once, when the loop has stopped). For what only the loop
 * may touch, such as a libmicrohttpd daemon in external mode. */
void loop_call(rl_loop *l, void (*fn)(void *), void *arg);

/* Runs fn(arg) on the loop thread after delay_us. Returns 0 or -1 on OOM or
 * once the loop is ending. Timers still pending when the loop ends run then,
 * early, with loop_stopping true: they must only clean up. */
int loop_after(rl_loop *l, uint64_t delay_us, void (*fn)(void *), void *arg);
bool loop_stopping(const rl_loop *l);

/* A turn longer, or a sleep later, than this is a stall of the loop. */
#define LOOP_STALL_US 20000ULL
/* The loop's stalls so far, and their time past LOOP_STALL_US (any thread). */
void loop_stalls(const rl_loop *l, unsigned long long *count, unsigned long long *us);

/* CLOCK_MONOTONIC in microseconds: the clock of every deadline and timer. */
uint64_t loop_now_us(void);

/* CLOCK_REALTIME in microseconds since the Unix epoch: for what other
 * processes compare (a waiter's place in a queue on the masters). */
long long loop_unix_us(void);

#endif
