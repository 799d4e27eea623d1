/* master_timer.c - the pool's clock and timers (mpool_after): a binary
 * min-heap by (when, seq), so timers due at the same time run in the order
 * they were set. Loop thread only, like the heap itself.
 *
 * Depends on nothing else of the master layer.
 */
#include <stdlib.h>
#include <time.h>

#include "master_int.h"

uint64_t mpool_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

static bool timer_before(const struct timer *a, const struct timer *b)
{
    return a->when_us < b->when_us || (a->when_us == b->when_us && a->seq < b->seq);
}

int mpool_after(mpool *p, uint64_t delay_us, void (*fn)(void *), void *arg)
{
    if (p->timers_final)
        return -1;
    if (p->ntimers == p->timers_cap) {
        size_t cap = p->timers_cap ? p->timers_cap * 2 : 64;
        struct timer *t = realloc(p->timers, cap * sizeof *t);
        if (!t)
            return -1;
        p->timers = t;
        p->timers_cap = cap;
    }
    size_t i = p->ntimers++;
    struct timer t = {mpool_now_us() + delay_us, p->timer_seq++, fn, arg};
    while (i > 0 && timer_before(&t, &p->timers[(i - 1) / 2])) {
        p->timers[i] = p->timers[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->timers[i] = t;
    return 0;
}

static struct timer timer_pop(mpool *p)
{
    struct timer top = p->timers[0];
    struct timer last = p->timers[--p->ntimers];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= p->ntimers)
            break;
        if (c + 1 < p->ntimers && timer_before(&p->timers[c + 1], &p->timers[c]))
            c++;
        if (!timer_before(&p->timers[c], &last))
            break;
        p->timers[i] = p->timers[c];
        i = c;
    }
    if (p->ntimers)
        p->timers[i] = last;
    return top;
}

void mpool_run_timers(mpool *p, uint64_t now)
{
    while (p->ntimers && p->timers[0].when_us <= now) {
        struct timer t = timer_pop(p);
        t.fn(t.arg);
    }
}

void mpool_finish_timers(mpool *p)
{
    p->timers_final = true;
    while (p->ntimers) {
        struct timer t = timer_pop(p);
        t.fn(t.arg);
    }
}

bool mpool_is_stopping(const mpool *p) { return p->timers_final; }
