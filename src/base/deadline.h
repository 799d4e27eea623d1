/* deadline.h - an absolute CLOCK_REALTIME time ms from now, for
 * pthread_cond_timedwait (which takes that clock by default). Header-only:
 * shared by the HTTP layer and the engine, owned by neither. */
#ifndef RL_DEADLINE_H
#define RL_DEADLINE_H

#include <time.h>

static inline struct timespec deadline_after_ms(long long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

#endif
