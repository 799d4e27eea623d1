/* quorum.c - see quorum.h. */
#include "quorum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int quorum_of(int n) { return n / 2 + 1; }

enum quorum_outcome quorum_decide(int n, int yes, int answered)
{
    int q = quorum_of(n);
    if (yes >= q)
        return QUORUM_GRANTED;
    if (answered >= q)
        return QUORUM_REFUSED;
    return QUORUM_NO_QUORUM;
}

double quorum_drift_ms(long long ttl_ms, double drift_factor)
{
    return (double)ttl_ms * drift_factor + 2.0;
}

long long quorum_validity_ms(long long ttl_ms, long long elapsed_us, double drift_factor)
{
    double v = (double)ttl_ms - (double)elapsed_us / 1000.0 - quorum_drift_ms(ttl_ms, drift_factor);
    return (long long)floor(v);
}

long long quorum_fence(int n, const long long *counters, uint32_t yes_mask,
                       uint32_t *raise_mask, int *at_fence)
{
    long long f = 0;
    for (int i = 0; i < n; i++)
        if ((yes_mask >> i & 1u) && counters[i] > f)
            f = counters[i];
    uint32_t raise = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        if (!(yes_mask >> i & 1u))
            continue;
        if (counters[i] == f)
            at++;
        else
            raise |= 1u << i;
    }
    *raise_mask = raise;
    *at_fence = at;
    return f;
}

long long quorum_seed_bound_us(long long fence_keep_ms)
{
    long long b = fence_keep_ms * 1000 / 4;
    if (b > QUORUM_SEED_BOUND_MAX_US)
        b = QUORUM_SEED_BOUND_MAX_US;
    return b < 0 ? 0 : b;
}

long long quorum_seed_fence(bool have_counter, long long counter, long long proposal,
                            long long now_us, long long bound_us)
{
    long long own = have_counter ? counter + 1 : now_us;
    bool in_bound = proposal > 0 && proposal >= now_us - bound_us && proposal <= now_us + bound_us;
    if (!in_bound)
        return own;
    if (have_counter && counter >= proposal)
        return own;
    return proposal;
}

long long quorum_fence_of_holders(const long long *fences, int n)
{
    long long least = 0;
    for (int i = 0; i < n; i++)
        if (fences[i] > 0 && (least == 0 || fences[i] < least))
            least = fences[i];
    return least;
}

int quorum_holder(const quorum_copy *c, int n, long long elapsed_us, double drift_factor,
                  long long *validity_ms, long long *fence)
{
    int q = quorum_of(n);
    for (int i = 0; i < n; i++) {
        if (!c[i].value)
            continue;
        long long pttls[64], fences[64];
        int agree = 0, pick = i;
        for (int j = 0; j < n && agree < 64; j++) {
            if (!c[j].value || c[j].vlen != c[i].vlen || memcmp(c[j].value, c[i].value, c[i].vlen))
                continue;
            fences[agree] = c[j].counter;
            pttls[agree++] = c[j].pttl;
            if (c[pick].olen == 0 && c[j].olen > 0)
                pick = j;
        }
        if (agree < q)
            continue;   /* one value at most holds a majority */
        long long remaining = quorum_kth_largest(pttls, agree, q);
        long long validity = quorum_validity_ms(remaining, elapsed_us, drift_factor);
        if (validity <= 0)
            return -1;
        *validity_ms = validity;
        *fence = quorum_fence_of_holders(fences, agree);
        return pick;
    }
    return -1;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

long long quorum_retry_after_ms(int n, long long *held_pttl, int nheld, int nfree,
                                long long no_expiry_ms)
{
    int need = quorum_of(n) - nfree;
    if (need <= 0 || nheld == 0)
        return 0;
    for (int i = 0; i < nheld; i++)
        if (held_pttl[i] < 0)
            held_pttl[i] = no_expiry_ms;
    qsort(held_pttl, (size_t)nheld, sizeof *held_pttl, cmp_ll);
    /* A majority is free once `need` of the held keys have expired. Masters
     * that did not answer may never be free; then the last known one counts. */
    return held_pttl[need <= nheld ? need - 1 : nheld - 1];
}

long long quorum_kth_largest(long long *v, int n, int k)
{
    qsort(v, (size_t)n, sizeof *v, cmp_ll);
    return v[n - k];
}

long long quorum_retry_delay_ms(long long base_ms, double r, long long retry_after_ms,
                                long long wait_left_ms)
{
    long long d = (long long)((double)base_ms * (0.5 + r));
    if (retry_after_ms > 0 && retry_after_ms + 1 < d)
        d = retry_after_ms + 1;
    if (d > wait_left_ms)
        d = wait_left_ms;
    return d < 0 ? 0 : d;
}
