/* Unit tests of the Redlock arithmetic: majorities, validity, drift, the
 * fence rule, retry timing. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/engine.h"

Test(quorum, majorities)
{
    cr_assert_eq(quorum_of(1), 1);
    cr_assert_eq(quorum_of(3), 2);
    cr_assert_eq(quorum_of(4), 3);
    cr_assert_eq(quorum_of(5), 3);
    cr_assert_eq(quorum_of(7), 4);
}

Test(quorum, decisions)
{
    cr_assert_eq(quorum_decide(5, 3, 3), QUORUM_GRANTED);
    cr_assert_eq(quorum_decide(5, 5, 5), QUORUM_GRANTED);
    cr_assert_eq(quorum_decide(5, 2, 5), QUORUM_REFUSED, "split vote: a majority answered");
    cr_assert_eq(quorum_decide(5, 0, 3), QUORUM_REFUSED);
    cr_assert_eq(quorum_decide(5, 2, 2), QUORUM_NO_QUORUM, "3 masters silent");
    cr_assert_eq(quorum_decide(5, 0, 0), QUORUM_NO_QUORUM);
    cr_assert_eq(quorum_decide(4, 2, 4), QUORUM_REFUSED, "2 of 4 is no majority");
}

Test(validity, ttl_minus_elapsed_minus_drift)
{
    /* 30000 - 5 ms - (300 + 2) */
    cr_assert_eq(quorum_validity_ms(30000, 5000, 0.01), 29693);
    cr_assert_eq(quorum_validity_ms(30000, 0, 0.01), 29698);
    /* rounds down: 1000 - 0.5 - 12 = 987.5 */
    cr_assert_eq(quorum_validity_ms(1000, 500, 0.01), 987);
    cr_assert_eq(quorum_validity_ms(1000, 0, 0.0), 998);
    cr_assert_float_eq(quorum_drift_ms(30000, 0.01), 302.0, 1e-9);
}

Test(validity, exhausted_is_not_positive)
{
    cr_assert_leq(quorum_validity_ms(100, 98000, 0.01), 0);
    cr_assert_leq(quorum_validity_ms(2, 0, 0.01), 0, "ttl 2 leaves nothing after the 2 ms");
    cr_assert_eq(quorum_validity_ms(3, 0, 0.0), 1);
}

/* Five simulated masters' fence counters, driven the way the acquire script
 * and the raise step drive them. */
struct sim {
    long long c[5];
};

static long long sim_grant(struct sim *s, uint32_t majority, bool apply_rule)
{
    long long after[5] = {0};
    for (int i = 0; i < 5; i++)
        if (majority >> i & 1u)
            after[i] = ++s->c[i];   /* INCR on each master that said yes */
    uint32_t raise;
    int at;
    long long f = quorum_fence(5, after, majority, &raise, &at);
    if (apply_rule)
        for (int i = 0; i < 5; i++)
            if (raise >> i & 1u && s->c[i] < f)
                s->c[i] = f;        /* the raise script */
    return f;
}

Test(fence, plain_max_fails_the_counter_example)
{
    /* Counters 4,4,8,4,4: grant one on {A,B,C} answers 5,5,9 -> 9; grant two on
     * {A,B,D} answers 6,6,5... The example: a plain max of INCRs can go
     * backwards when majorities differ. */
    struct sim s = {{4, 4, 8, 4, 4}};
    long long f1 = sim_grant(&s, 0x07, false);   /* A B C: 5,5,9 */
    cr_assert_eq(f1, 9);
    struct sim t = {{5, 5, 9, 5, 5}};
    long long f2 = sim_grant(&t, 0x1a, false);   /* B D E: 6,6,6 */
    cr_assert_eq(f2, 6);
    cr_assert_lt(f2, f1, "without the rule the fence goes backwards: 9 then 6");
}

Test(fence, raising_a_majority_keeps_fences_increasing)
{
    struct sim s = {{4, 4, 8, 4, 4}};
    long long f1 = sim_grant(&s, 0x07, true);    /* A B C: 5,5,9 -> raise A,B to 9 */
    cr_assert_eq(f1, 9);
    cr_assert_eq(s.c[0], 9);
    cr_assert_eq(s.c[1], 9);
    long long f2 = sim_grant(&s, 0x1a, true);    /* B D E: 10,5,5 */
    cr_assert_gt(f2, f1);
}

Test(fence, every_sequence_of_majorities_increases)
{
    /* Every majority of 5 masters, in a long pseudo-random sequence. */
    uint32_t majorities[32];
    int nm = 0;
    for (uint32_t m = 0; m < 32; m++)
        if (__builtin_popcount(m) >= 3)
            majorities[nm++] = m;
    struct sim s = {{3, 900, 7, 1, 50}};   /* seeded unevenly, like clocks */
    uint64_t x = 88172645463325252ULL;
    long long last = 0;
    for (int i = 0; i < 5000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        long long f = sim_grant(&s, majorities[x % (uint64_t)nm], true);
        cr_assert_gt(f, last, "grant %d: fence %lld after %lld", i, f, last);
        last = f;
    }
}

Test(fence, reports_raise_set)
{
    long long counters[5] = {7, 9, 0, 9, 3};
    uint32_t raise;
    int at;
    long long f = quorum_fence(5, counters, 0x1b /* 0,1,3,4 */, &raise, &at);
    cr_assert_eq(f, 9);
    cr_assert_eq(at, 2);
    cr_assert_eq(raise, 0x11, "masters 0 and 4 are below the fence");
    f = quorum_fence(5, (long long[]){5, 5, 5, 0, 0}, 0x07, &raise, &at);
    cr_assert_eq(f, 5);
    cr_assert_eq(raise, 0, "agreeing counters need no raise");
    cr_assert_eq(at, 3);
}

Test(fence, extension_reports_the_grants_fence)
{
    cr_assert_eq(quorum_fence_of_holders((long long[]){42, 42, 42}, 3), 42);
    cr_assert_eq(quorum_fence_of_holders((long long[]){42, 99, 42}, 3), 42,
                 "a stray late SET's counter is above the fence");
    cr_assert_eq(quorum_fence_of_holders((long long[]){42, 99, 99}, 3), 42,
                 "two masters a repair took, whose counters stayed higher, are not the fence");
    cr_assert_eq(quorum_fence_of_holders((long long[]){0, 42, 42}, 3), 42,
                 "a counter that does not parse (0) says nothing");
    cr_assert_eq(quorum_fence_of_holders((long long[]){0, 0}, 2), 0);
    cr_assert_eq(quorum_fence_of_holders(NULL, 0), 0);
}

Test(retry_after, time_until_a_majority_is_free)
{
    long long held[] = {900, 1000, 1100, 1200, 1300};
    cr_assert_eq(quorum_retry_after_ms(5, held, 5, 0, 3600000), 1100,
                 "three of five must expire: the third soonest");
    long long held2[] = {500, 100, 300};
    cr_assert_eq(quorum_retry_after_ms(5, held2, 3, 2, 3600000), 100,
                 "two free already: one more");
    long long held3[] = {500, 700};
    cr_assert_eq(quorum_retry_after_ms(5, held3, 2, 3, 3600000), 0, "split vote: free now");
    long long held4[] = {-1, -1, -1};
    cr_assert_eq(quorum_retry_after_ms(5, held4, 3, 0, 3600000), 3600000,
                 "keys without expiry count as the longest ttl");
    long long held5[] = {400, 800};
    cr_assert_eq(quorum_retry_after_ms(5, held5, 2, 0, 3600000), 800,
                 "silent masters: the last known");
}

Test(inspect, kth_largest_is_lowest_of_best_majority)
{
    long long v[] = {10, 50, 40, 30, 20};
    cr_assert_eq(quorum_kth_largest(v, 5, 3), 30);
    long long w[] = {7};
    cr_assert_eq(quorum_kth_largest(w, 1, 1), 7);
}

Test(retry_delay, random_bounded_and_shortened)
{
    cr_assert_eq(quorum_retry_delay_ms(100, 0.0, 0, 10000), 50);
    cr_assert_eq(quorum_retry_delay_ms(100, 0.999, 0, 10000), 149);
    cr_assert_eq(quorum_retry_delay_ms(100, 0.5, 20, 10000), 21,
                 "the holder expires sooner than the random delay");
    cr_assert_eq(quorum_retry_delay_ms(100, 0.5, 500, 10000), 100);
    cr_assert_eq(quorum_retry_delay_ms(100, 0.5, 0, 30), 30, "never past the wait");
    cr_assert_eq(quorum_retry_delay_ms(100, 0.5, 0, -5), 0);
}

/* ---- proposed seeds (quorum_seed_*, docs/safety.md "Fences") ---- */

Test(seed, bound_is_a_quarter_of_the_keep_at_most_one_second)
{
    cr_assert_eq(quorum_seed_bound_us(60000), 1000000, "default keep: capped at 1 s");
    cr_assert_eq(quorum_seed_bound_us(1000), 250000);
    cr_assert_eq(quorum_seed_bound_us(1), 250);
    for (long long k = 1; k < 10000000; k = k * 3 + 1)
        cr_assert_geq(k * 1000, 4 * quorum_seed_bound_us(k), "keep %lld ms >= 4 bounds", k);
}

Test(seed, master_takes_the_proposal_only_within_its_bound)
{
    const long long now = 1800000000000000LL, b = 250000;
    /* No counter: the proposal within the bound, both sides, edges included. */
    cr_assert_eq(quorum_seed_fence(false, 0, now + 5, now, b), now + 5);
    cr_assert_eq(quorum_seed_fence(false, 0, now - b, now, b), now - b);
    cr_assert_eq(quorum_seed_fence(false, 0, now + b, now, b), now + b);
    /* Outside it: the master's own clock. */
    cr_assert_eq(quorum_seed_fence(false, 0, now + b + 1, now, b), now);
    cr_assert_eq(quorum_seed_fence(false, 0, now - b - 1, now, b), now);
    cr_assert_eq(quorum_seed_fence(false, 0, 0, now, b), now, "0 proposes nothing");
    /* A counter below the proposal: the proposal; at or above it: counter + 1. */
    cr_assert_eq(quorum_seed_fence(true, now - 100, now, now, b), now);
    cr_assert_eq(quorum_seed_fence(true, now - 1, now, now, b), now);
    cr_assert_eq(quorum_seed_fence(true, now, now, now, b), now + 1);
    cr_assert_eq(quorum_seed_fence(true, now + 7, now, now, b), now + 8);
    /* A counter below a proposal out of bound: counter + 1, never the proposal. */
    cr_assert_eq(quorum_seed_fence(true, 5, now + b + 1, now, b), 6);
    cr_assert_eq(quorum_seed_fence(true, 5, now - b - 1, now, b), 6);
}

/* Five masters with clocks off real time by offset[i] (µs), counters that
 * expire keep_us after their last write, and grants on pseudo-random
 * majorities at pseudo-random times, each proposing a seed off real time by
 * up to +-keep_us (most out of the bound). Each master applies the rule with
 * master_bound_us; the engine then settles the yes votes to the highest
 * (quorum_fence). Returns the number of grants whose fence did not exceed the
 * one before. */
static int seed_sim(const long long offset[5], long long keep_us, long long master_bound_us, int grants)
{
    long long c[5] = {0}, expires[5] = {0};
    uint32_t majorities[32];
    int nm = 0, regressions = 0;
    for (uint32_t m = 0; m < 32; m++)
        if (__builtin_popcount(m) >= 3)
            majorities[nm++] = m;
    uint64_t x = 88172645463325252ULL;
#define NEXT() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    long long t = 1800000000000000LL, last = 0;
    for (int g = 0; g < grants; g++) {
        /* Mostly right around the counters' expiry, where the argument is tight. */
        if (NEXT() % 2)
            t += 1 + (long long)(NEXT() % 1000);
        else
            t += keep_us - keep_us / 2 + (long long)(NEXT() % (uint64_t)keep_us);
        uint32_t maj = majorities[NEXT() % (uint64_t)nm];
        long long proposal = t - keep_us + (long long)(NEXT() % (uint64_t)(2 * keep_us + 1));
        long long after[5] = {0};
        for (int i = 0; i < 5; i++) {
            if (!(maj >> i & 1u))
                continue;
            bool have = c[i] > 0 && t < expires[i];
            after[i] = quorum_seed_fence(have, c[i], proposal, t + offset[i], master_bound_us);
            c[i] = after[i];
            expires[i] = t + keep_us;
        }
        uint32_t raise;
        int at;
        long long f = quorum_fence(5, after, maj, &raise, &at);
        for (int i = 0; i < 5; i++)
            if (raise >> i & 1u)
                c[i] = f;   /* the settle sets exactly the fence */
        if (f <= last)
            regressions++;
        last = f > last ? f : last;
    }
#undef NEXT
    return regressions;
}

Test(seed, fences_increase_when_clocks_differ_by_less_than_keep_minus_two_bounds)
{
    const long long keep_us = 1000000, b = quorum_seed_bound_us(1000);   /* 250 ms */
    /* Clocks 490 ms apart: keep (1 s) > 490 ms + 2 * 250 ms. */
    const long long offset[5] = {245000, 245000, -245000, -245000, -245000};
    cr_assert_eq(seed_sim(offset, keep_us, b, 400000), 0);
}

Test(seed, negative_control_a_master_that_takes_any_proposal_goes_backwards)
{
    /* The same run with no bound on the masters: a counter seeded by a
     * proposal far ahead expires, and a proposal far behind takes over. */
    const long long keep_us = 1000000;
    const long long offset[5] = {245000, 245000, -245000, -245000, -245000};
    cr_assert_gt(seed_sim(offset, keep_us, 1000000000000LL, 400000), 0,
                 "the bound is what keeps fences increasing");
}

Test(seed, negative_control_clocks_further_apart_than_the_argument_allows)
{
    /* Clocks 900 ms apart with the 250 ms bound: 900 + 2 * 250 > 1000. */
    const long long keep_us = 1000000, b = quorum_seed_bound_us(1000);
    const long long offset[5] = {450000, 450000, -450000, -450000, -450000};
    cr_assert_gt(seed_sim(offset, keep_us, b, 400000), 0,
                 "keep must exceed the clock difference plus two bounds");
}

/* quorum_holder: which value a majority holds, as an inspection or a
 * listing reads the masters' copies. */
static quorum_copy held(const char *value, long long pttl, long long counter, const char *owner)
{
    return (quorum_copy){.value = value, .vlen = value ? strlen(value) : 0, .pttl = pttl,
                         .counter = counter, .owner = owner, .olen = strlen(owner)};
}

Test(holder, majority_of_one_value)
{
    /* t on 4 of 5: the validity is that of the best majority's least time
     * left, the 3rd largest (8000, not 3000): 8000 - 5 ms - (80 + 2). */
    quorum_copy c[5] = {
        held("t", 10000, 42, ""), held("t", 9000, 40, ""), held(NULL, 0, 0, ""),
        held("t", 8000, 0, ""), held("t", 3000, 45, ""),
    };
    long long validity = -7, fence = -7;
    cr_assert_eq(quorum_holder(c, 5, 5000, 0.01, &validity, &fence), 0);
    cr_expect_eq(validity, 7913);
    cr_expect_eq(fence, 40, "the least counter of the holders, 0 aside");
}

Test(holder, fence_zero_when_no_counter_parses)
{
    quorum_copy c[3] = {held("t", 10000, 0, ""), held("t", 10000, 0, ""), held("t", 10000, 0, "")};
    long long validity, fence = -7;
    cr_assert_eq(quorum_holder(c, 3, 0, 0.01, &validity, &fence), 0);
    cr_expect_eq(fence, 0);
    cr_expect_eq(validity, 9898);
}

Test(holder, the_copy_with_an_owner)
{
    quorum_copy c[5] = {
        held("x", 10000, 1, "zed"), held("t", 10000, 5, ""), held("t", 10000, 5, ""),
        held("t", 10000, 5, "alice"), held("t", 10000, 5, "bob"),
    };
    long long validity, fence;
    cr_expect_eq(quorum_holder(c, 5, 0, 0.01, &validity, &fence), 3,
                 "the first holder with an owner, not another value's");
    c[3].owner = "";
    c[3].olen = 0;
    c[4].owner = "";
    c[4].olen = 0;
    cr_expect_eq(quorum_holder(c, 5, 0, 0.01, &validity, &fence), 1, "no owner: the first holder");
    cr_expect_eq(fence, 5);
}

Test(holder, no_majority)
{
    long long validity = -7, fence = -7;
    quorum_copy two[5] = {
        held("t", 10000, 1, ""), held("t", 10000, 1, ""), held(NULL, 0, 0, ""),
        held(NULL, 0, 0, ""), held("u", 10000, 2, ""),
    };
    cr_expect_eq(quorum_holder(two, 5, 0, 0.01, &validity, &fence), -1, "2 of 5");
    quorum_copy split[4] = {
        held("t", 10000, 1, ""), held("u", 10000, 2, ""), held("t", 10000, 1, ""), held("u", 10000, 2, ""),
    };
    cr_expect_eq(quorum_holder(split, 4, 0, 0.01, &validity, &fence), -1, "2-2 of 4");
    quorum_copy three_ways[3] = {held("t", 10000, 1, ""), held("u", 10000, 1, ""), held("v", 10000, 1, "")};
    cr_expect_eq(quorum_holder(three_ways, 3, 0, 0.01, &validity, &fence), -1);
    quorum_copy none[3] = {held(NULL, 0, 0, ""), held(NULL, 0, 0, ""), held(NULL, 0, 0, "")};
    cr_expect_eq(quorum_holder(none, 3, 0, 0.01, &validity, &fence), -1);
    cr_expect_eq(validity, -7, "untouched when there is no holder");
    cr_expect_eq(fence, -7);
}

Test(holder, majority_after_a_minority)
{
    quorum_copy c[5] = {
        held("u", 10000, 9, "eve"), held("u", 10000, 9, "eve"), held("t", 10000, 3, ""),
        held("t", 9000, 4, ""), held("t", 8000, 5, ""),
    };
    long long validity, fence;
    cr_expect_eq(quorum_holder(c, 5, 0, 0.01, &validity, &fence), 2);
    cr_expect_eq(fence, 3);
    cr_expect_eq(validity, 8000 - 82);
}

Test(holder, values_compare_by_length)
{
    quorum_copy c[3] = {held("abc", 10000, 1, ""), held("ab", 10000, 1, ""), held("ab", 10000, 1, "")};
    long long validity, fence;
    cr_expect_eq(quorum_holder(c, 3, 0, 0.01, &validity, &fence), 1, "ab and ab, abc apart");
    /* "ab" read from longer buffers */
    quorum_copy d[3] = {held("ab", 10000, 1, ""), held("abc", 10000, 1, ""), held("abd", 10000, 1, "")};
    cr_expect_eq(quorum_holder(d, 3, 0, 0.01, &validity, &fence), -1);
    d[1].vlen = 2;
    d[2].vlen = 2;
    cr_expect_eq(quorum_holder(d, 3, 0, 0.01, &validity, &fence), 0, "the same 2 bytes");
}

Test(holder, missing_votes_count_against)
{
    quorum_copy c[5] = {
        held("t", 10000, 1, ""), held("t", 10000, 1, ""), held(NULL, 0, 0, ""),
        held(NULL, 0, 0, ""), held(NULL, 0, 0, ""),
    };
    long long validity, fence;
    cr_expect_eq(quorum_holder(c, 5, 0, 0.01, &validity, &fence), -1, "a majority of 5, not of those that answered");
    c[4] = held("t", 10000, 1, "");
    cr_expect_eq(quorum_holder(c, 5, 0, 0.01, &validity, &fence), 0);
    quorum_copy one[1] = {held("t", 500, 3, "")};
    cr_expect_eq(quorum_holder(one, 1, 0, 0.0, &validity, &fence), 0);
    cr_expect_eq(validity, 498);
    cr_expect_eq(fence, 3);
}

Test(holder, no_time_left)
{
    /* The best majority of 3 (the 2nd largest): 50 ms left, read 49 ms
     * ago: 50 - 49 - 2.5 */
    quorum_copy c[3] = {held("t", 10000, 1, ""), held("t", 50, 1, ""), held("t", 50, 1, "")};
    long long validity = -7, fence = -7;
    cr_expect_eq(quorum_holder(c, 3, 49000, 0.01, &validity, &fence), -1);
    cr_expect_eq(validity, -7);
    cr_expect_eq(quorum_holder(c, 3, 40000, 0.01, &validity, &fence), 0);
    cr_expect_eq(validity, 7, "50 - 40 - 2.5, rounded down");
    /* Exactly nothing left is no holder: 2 ms, less the 2 ms of drift. */
    quorum_copy one[1] = {held("t", 2, 1, "")};
    cr_expect_eq(quorum_holder(one, 1, 0, 0.0, &validity, &fence), -1);
    one[0].pttl = 3;
    cr_expect_eq(quorum_holder(one, 1, 0, 0.0, &validity, &fence), 0);
    cr_expect_eq(validity, 1);
}
