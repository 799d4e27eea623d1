/* semaphore.h - counting semaphores over the Redlock engine
 * (docs/semaphores.md): a semaphore NAME of L permits is L independent
 * slot locks NAME<SEP>0 .. NAME<SEP>(L-1), each an ordinary Redlock grant with its
 * own token and fence, and its limit L stored on the masters (NAME<SEP>limit,
 * RL_SEM_LIMIT) so that callers who disagree on L are refused. <SEP> is
 * RULES_SEP, which holds a control byte no name may hold, so no lock route
 * reaches a slot.
 *
 * A permit's token is "<slot>:<slot's token>", so an extension or a release
 * needs nothing but the tokens. An acquire of k permits tries the slots in
 * random order, one at a time, and keeps what it won only when it won k:
 * otherwise it releases them and, within wait_ms, tries again after a short
 * random delay, or at once when a notice says a slot was given back.
 *
 * Who owns what: a submitted request is a task that this module owns until
 * its done callback has run (exactly once, on some engine's thread). Its
 * steps run one at a time, each on the engine that owns the slot's name
 * (engine_of), and its retry timers on the pool given. No HTTP or Redis
 * headers here.
 */
#ifndef RL_SEMAPHORE_H
#define RL_SEMAPHORE_H

#include <stdbool.h>
#include <stddef.h>

#include "masters/masters.h"
#include "engine/engine.h"

#define SEM_LIMIT_MAX 64          /* permits of one semaphore */
#define SEM_TOKEN_MAX (TOKEN_MAX_LEN + 4)   /* "<slot>:<token>" */
#define SEM_RETRY_MS 100          /* a waiting acquire tries again after 0.5 to 1.5 times this */
#define SEM_SLEEP_MAX_MS 1000     /* ... or, hearing releases, when the first slot held expires,
                                     at most this much later (a missed notice heals, a
                                     shutdown answers) */

enum sem_op { SEM_ACQUIRE, SEM_EXTEND, SEM_RELEASE, SEM_INSPECT,
              SEM_FORCE /* an operator's force release of every permit (RL_FORCE on each slot of the
                           stored limit); permits: those that were held */ };

typedef struct sem_request {
    enum sem_op op;
    char name[RL_NAME_MAX + 1];
    int limit;                    /* acquire: L; inspect: 0 = the one stored */
    int permits;                  /* acquire: k, 1..limit */
    long long ttl_ms, wait_ms;
    bool hold;                    /* acquire of one permit: a held stream (the HTTP layer keeps it) */
    long long heartbeat_ms;       /* with hold: as rl_request's */
    char owner[RL_OWNER_MAX + 1]; /* acquire, optional */
    int ntokens;                  /* extend, release */
    char tokens[SEM_LIMIT_MAX][SEM_TOKEN_MAX + 1];
} sem_request;

typedef struct sem_permit {
    int slot;
    char token[SEM_TOKEN_MAX + 1];  /* "<slot>:<token>" (acquire) */
    long long fence;
    long long validity_ms;          /* acquire, extend, inspect */
    char owner[RL_OWNER_MAX + 1];   /* inspect */
} sem_permit;

typedef struct sem_result {
    enum rl_outcome outcome;        /* RL_OK; RL_LOCKED: no room within wait_ms, or
                                       limit_mismatch; RL_NOT_HELD; RL_NO_QUORUM ... */
    bool limit_mismatch;            /* another limit is stored: stored_limit */
    long long stored_limit;
    int limit;                      /* the semaphore's limit (inspect: as stored or asked) */
    int npermits;
    sem_permit permits[SEM_LIMIT_MAX];  /* acquire: won; extend: extended; inspect: held */
    long long validity_ms;          /* acquire, extend: the least of the permits' */
    long long ttl_ms;
    long long retry_after_ms;       /* RL_LOCKED: the least time left of a slot seen held
                                       in the last round (0: none said) */
    rl_result last;                 /* the engine's answer that decided a failure */
} sem_result;

typedef void (*sem_done_fn)(void *arg, const sem_result *res);
typedef rl_engine *(*sem_engine_fn)(void *arg, const char *name);
typedef struct sem_task sem_handle;

/* Starts req. engine_of(eng_arg, lock name) names the engine of each slot's
 * lock and of the limit; pool runs the retry timers. done(arg, res) follows
 * exactly once. With handle, *handle is the caller's until it lets go with
 * sem_finish (exactly once, before or after done). Returns 0, or -1 when
 * out of memory (done never called, no handle). */
int sem_submit(const sem_request *req, sem_engine_fn engine_of, void *eng_arg, mpool *pool,
               sem_done_fn done, void *arg, sem_handle **handle);

/* The caller left: an acquire answers RL_CANCELLED at its next step (at
 * once when it is waiting between rounds), giving back what it won. Other
 * requests run to their end. Any thread; before sem_finish. */
void sem_cancel(sem_handle *h);
void sem_finish(sem_handle *h);

/* The service is stopping: every waiting acquire answers RL_LOCKED now,
 * and none waits from here on. Any thread. */
void sem_stop_waiting(void);

/* Lets e's notices wake the acquires waiting on a semaphore (with
 * --notify): a slot's release publishes on its semaphore's one channel
 * (NAME<SEP>limit's), and a waiting acquire subscribes to it, so it tries again
 * at once instead of at its next retry. Once per engine, before traffic. */
void sem_engine_attach(rl_engine *e);

/* Splits a permit token "<slot>:<token>" (slot < limit_max). */
bool sem_token_split(const char *permit, int limit_max, int *slot, char *token, size_t tokenlen);

/* The lock name of slot i of name, and of its limit. */
void sem_slot_name(const char *name, int slot, char *out, size_t outlen);
void sem_limit_name(const char *name, char *out, size_t outlen);

#endif
