/* quorum.h - the pure arithmetic of Redlock: majorities, validity, drift,
 * fencing, retry timing.
 *
 * Nothing here does I/O or allocates; the engine (redlock.c) feeds it the
 * votes it collected from the masters and acts on the answers. Every rule a
 * safety argument rests on lives here so that the unit tests can pin it down.
 */
#ifndef RL_QUORUM_H
#define RL_QUORUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quorum_outcome {
    QUORUM_GRANTED,   /* a majority said yes */
    QUORUM_REFUSED,   /* a majority answered, but fewer than a majority said yes */
    QUORUM_NO_QUORUM, /* fewer than a majority answered in time */
};

/* N/2 + 1: the smallest majority of n masters. */
int quorum_of(int n);

/* Classifies one round of votes: yes answers, and all answers (yes or no). */
enum quorum_outcome quorum_decide(int n, int yes, int answered);

/* The clock-drift allowance of the Redlock paper: ttl * drift_factor + 2 ms. */
double quorum_drift_ms(long long ttl_ms, double drift_factor);

/* validity = ttl - elapsed - drift, rounded down to whole milliseconds.
 * elapsed_us runs from before the first write to after the last reply that
 * decided the outcome. May be zero or negative: then there is no lock. */
long long quorum_validity_ms(long long ttl_ms, long long elapsed_us, double drift_factor);

/* The fence rule. counters[i] is master i's fence counter after the grant's
 * increment, meaningful where bit i of yes_mask is set. Returns the fence F to
 * hand out (the highest counter among the yes votes) and sets *raise_mask to
 * the yes masters whose counter is below F, *at_fence to how many yes masters
 * already hold F. The grant may be answered only once a majority holds a
 * counter >= F (at_fence plus raises that succeeded): every later majority then
 * meets a master whose next increment exceeds F, so fences strictly increase
 * even when successive grants reach different majorities. */
long long quorum_fence(int n, const long long *counters, uint32_t yes_mask,
                       uint32_t *raise_mask, int *at_fence);

/* Proposed seeds (docs/safety.md, "Fences"). An acquire proposes a fence,
 * redlockd's wall clock in microseconds, and each master takes it where its
 * counter is absent or below it, provided the proposal lies within bound_us
 * of the master's own clock; otherwise the master keeps its own rule
 * (counter + 1, or its clock where there is no counter). So masters agree on
 * a fresh name in one round trip, and every fence still lies within bound_us
 * of some master's clock reading, which the expiry argument needs.
 *
 * The bound for a given --fence-keep-ms: a quarter of it, at most
 * QUORUM_SEED_BOUND_MAX_US, so fence_keep >= 4 * bound always holds. The
 * expiry argument needs fence_keep > clock difference + 2 * bound; with a
 * quarter, at least half of fence_keep is left for the clocks. */
#define QUORUM_SEED_BOUND_MAX_US 1000000LL
long long quorum_seed_bound_us(long long fence_keep_ms);

/* The master's rule, as script_acquire implements it (scripts.c): the fence
 * a master takes on a grant, from its counter (have_counter, counter), the
 * proposal and its own clock now_us. Returns counter + 1 or the proposal,
 * whichever is larger, when the proposal is within bound_us of now_us;
 * else counter + 1, or now_us without a counter. A proposal <= 0 is never
 * taken (the old rule). */
long long quorum_seed_fence(bool have_counter, long long counter, long long proposal,
                            long long now_us, long long bound_us);

/* The fence an extension or an inspection reports: the least counter of the
 * masters holding the token, 0 (a counter that does not parse) aside. The
 * grant's yes votes hold exactly its fence (settled before it is answered;
 * a settle still on its way to a master is applied before that master
 * answers anything this instance sends later), and every other holder is
 * above it, never below: a master that applied a late SET before its
 * settle, or one that a held stream's repair took with a higher counter
 * there (script_renew never lowers a counter, and keeps the holder's fence
 * where it finds none or a lower one). So the answer is the grant's fence
 * whenever one of its yes votes, or a master the repair raised, is among
 * the holders that answered. 0 if n == 0. */
long long quorum_fence_of_holders(const long long *fences, int n);

/* One master's copy of a key, as an inspection or a listing reads it:
 * value NULL where the master holds nothing or gave no vote. */
typedef struct quorum_copy {
    const char *value;
    size_t vlen;
    long long pttl;        /* ms left; a key without expiry counts as the longest ttl */
    long long counter;     /* its fence counter there (0: did not parse) */
    const char *owner;     /* the owner stored with that value ("" none) */
    size_t olen;
} quorum_copy;

/* The holder of a key, from n masters' copies read elapsed_us ago: the
 * first value that a majority (quorum_of(n)) holds with validity left
 * (the least time left among the best majority, less drift). Returns the
 * index of a copy of it (one with an owner when any has one) and sets
 * *validity_ms and *fence (quorum_fence_of_holders of its copies); -1
 * when no value is held so. */
int quorum_holder(const quorum_copy *c, int n, long long elapsed_us, double drift_factor,
                  long long *validity_ms, long long *fence);

/* How long until a majority could be free, from a refused acquire:
 * held_pttl[0..nheld) are the remaining ms of the other holder's key on the
 * masters that refused (a key without expiry counts as no_expiry_ms), nfree
 * the masters that answered free. Sorts held_pttl. 0 when a majority is free
 * already (a split vote). */
long long quorum_retry_after_ms(int n, long long *held_pttl, int nheld, int nfree,
                                long long no_expiry_ms);

/* The k-th largest of v[0..n) (k from 1); sorts v. Used to read "the lowest
 * remaining TTL among the best majority". Requires 1 <= k <= n. */
long long quorum_kth_largest(long long *v, int n, int k);

/* Delay before the next try of a waiting acquire: base * (0.5 + r) with
 * r in [0,1) to desynchronise contenders, shortened to just past the holder's
 * remaining time when that is known and sooner, and never past the end of the
 * wait. Result >= 0. */
long long quorum_retry_delay_ms(long long base_ms, double r, long long retry_after_ms,
                                long long wait_left_ms);

#endif
