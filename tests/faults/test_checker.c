/* Unit tests of the fault suite's checker (tests/faults/checker.c): it must
 * see each kind of violation in hand-made logs, and see none in clean ones. */
#include <criterion/criterion.h>
#include <string.h>

#include "checker.h"

#define MS 1000ULL

static fl_record grant(int client, uint64_t at_ms, long long validity_ms, long long fence,
                       uint64_t release_ms)
{
    return (fl_record){.client = client, .name = 0, .status = 201, .sent_us = at_ms * MS - 500,
                       .answered_us = at_ms * MS, .validity_ms = validity_ms, .ttl_ms = 1000,
                       .fence = fence, .read_us = at_ms * MS + 10, .write = FL_WRITE_ACCEPTED,
                       .write_us = at_ms * MS + 20, .release_sent_us = release_ms * MS,
                       .release_answered_us = release_ms * MS + 300, .release_status = 204};
}

static const fl_expect plain = {100, 1000, 500, NULL, 0, NULL, 0};

Test(checker, clean_handoffs_have_no_violation)
{
    fl_record r[] = {grant(1, 100, 900, 10, 150), grant(2, 151, 900, 11, 300),
                     grant(3, 301, 900, 12, 400)};
    fl_report p;
    fl_check(r, 3, 1, &plain, &p);
    cr_assert_eq(p.grants, 3);
    cr_assert_eq(p.overlaps, 0);
    cr_assert_eq(p.fence_violations, 0);
    cr_assert_eq(p.accepted_fence_violations, 0);
    cr_assert_eq(fl_accepted_for(r, 3, 0), 3);
}

Test(checker, overlapping_windows_are_found)
{
    /* Holder 1 may rely on its lock until 100 + 900 ms; holder 2 gets it at 500. */
    fl_record r[] = {grant(1, 100, 900, 10, 2000), grant(2, 500, 900, 11, 600)};
    fl_report p;
    fl_check(r, 2, 1, &plain, &p);
    cr_assert_eq(p.overlaps, 1);
    /* The same, but holder 1 released at 400: no overlap. */
    fl_record ok[] = {grant(1, 100, 900, 10, 400), grant(2, 500, 900, 11, 600)};
    fl_check(ok, 2, 1, &plain, &p);
    cr_assert_eq(p.overlaps, 0);
    /* ...or its validity ended at 100 + 300. */
    fl_record lapsed[] = {grant(1, 100, 300, 10, 2000), grant(2, 500, 900, 11, 600)};
    fl_check(lapsed, 2, 1, &plain, &p);
    cr_assert_eq(p.overlaps, 0);
}

Test(checker, fences_must_increase_in_grant_order)
{
    fl_record r[] = {grant(1, 100, 900, 10, 150), grant(2, 200, 900, 10, 300),
                     grant(3, 400, 900, 9, 450)};
    fl_report p;
    fl_check(r, 3, 1, &plain, &p);
    cr_assert_eq(p.fence_violations, 2);
    cr_assert_eq(p.accepted_fence_violations, 2);
}

Test(checker, late_write_after_a_newer_holder_read)
{
    fl_record stale = grant(1, 100, 300, 10, 2000);
    stale.late = true;
    stale.write_us = 900 * MS;            /* past 100 + 300 */
    fl_record newer = grant(2, 500, 900, 11, 600);   /* read at 500.01 */
    fl_record r[] = {stale, newer};
    fl_report p;
    fl_check(r, 2, 1, &plain, &p);
    cr_assert_eq(p.late_stale, 1);
    cr_assert_eq(p.late_stale_accepted, 1, "an accepted stale write is reported");
    r[0].write = FL_WRITE_REJECTED;
    r[1] = newer;
    fl_check(r, 2, 1, &plain, &p);
    cr_assert_eq(p.late_stale_accepted, 0);
}

Test(checker, majority_down_needs_fast_503)
{
    fl_record r[] = {
        {.status = 503, .sent_us = 1000 * MS, .answered_us = 1050 * MS},
        {.status = 503, .sent_us = 1100 * MS, .answered_us = 1300 * MS},   /* too slow */
        {.status = 409, .sent_us = 1400 * MS, .answered_us = 1401 * MS},   /* not a 503 */
        {.status = 409, .sent_us = 1990 * MS, .answered_us = 2010 * MS},   /* straddles the end */
    };
    fl_period down = {999 * MS, 2000 * MS};
    fl_expect ex = plain;
    ex.down = &down;
    ex.ndown = 1;
    fl_report p;
    fl_check(r, 4, 1, &ex, &p);
    cr_assert_eq(p.down_attempts, 3);
    cr_assert_eq(p.down_wrong, 2);
}

Test(checker, free_name_refusals_and_recovery)
{
    fl_record r[] = {
        grant(1, 100, 900, 10, 150),
        {.client = 2, .status = 409, .sent_us = 120 * MS, .answered_us = 121 * MS},  /* held: fine */
        {.client = 3, .status = 409, .sent_us = 200 * MS, .answered_us = 201 * MS},  /* free: refused */
        grant(4, 300, 900, 11, 350),
    };
    uint64_t recovered[] = {250 * MS, 5000 * MS};
    fl_expect ex = plain;
    ex.recovered_us = recovered;
    ex.nrecovered = 2;
    fl_report p;
    fl_check(r, 4, 1, &ex, &p);
    cr_assert_eq(p.free_attempts, 3);
    cr_assert_eq(p.free_granted, 2);
    cr_assert_eq(p.recoveries_judged, 2);
    cr_assert_eq(p.recoveries_missed, 1, "no grant within a TTL of 5000 ms");
}

Test(checker, recovery_cut_short_by_the_next_fault_is_not_judged)
{
    fl_record r[] = {grant(1, 300, 900, 10, 350)};
    fl_period down[] = {{5500 * MS, 6000 * MS}};   /* begins within a TTL of 5000 */
    uint64_t recovered[] = {250 * MS, 5000 * MS, 7000 * MS};
    fl_expect ex = plain;
    ex.down = down;
    ex.ndown = 1;
    ex.recovered_us = recovered;
    ex.nrecovered = 3;
    fl_report p;
    fl_check(r, 1, 1, &ex, &p);
    cr_assert_eq(p.recoveries_judged, 2, "the one at 5000 ms is cut short");
    cr_assert_eq(p.recoveries_missed, 1, "no grant after 7000 ms");
}

/* ---- elections ---- */

static fl_term leadership(int client, long long term, uint64_t from_ms, uint64_t until_ms)
{
    return (fl_term){client, term, from_ms * 1000, until_ms * 1000};
}

static fl_watch_event told(int watcher, bool elected, long long term, uint64_t at_ms)
{
    return (fl_watch_event){watcher, elected, term, at_ms * 1000};
}

Test(checker, elections_clean_handoffs)
{
    fl_term t[] = {leadership(0, 10, 0, 900), leadership(1, 11, 950, 2000), leadership(2, 12, 2100, 2500)};
    fl_watch_event e[] = {told(0, false, 10, 10), told(0, true, 11, 1000), told(0, false, 0, 2050),
                          told(0, true, 12, 2200), told(1, true, 11, 990), told(1, true, 12, 2300)};
    fl_election_report rep;
    fl_check_election(t, 3, e, 6, 2, 0, 3000000, 800, NULL, 0, &rep);
    cr_assert_eq(rep.overlaps + rep.duplicate_terms + rep.term_order_violations, 0);
    cr_assert_eq(rep.watch_order_violations + rep.watch_unknown_terms, 0);
    cr_assert_eq(rep.long_terms, 2, "terms 10 and 11 last at least 800 ms: %ld", rep.long_terms);
    cr_assert_eq(rep.watch_missed, 1, "watcher 1 never told term 10");
    fl_period down = {100000, 200000};   /* term 10 overlaps a majority's absence: not judged */
    fl_check_election(t, 3, e, 6, 2, 0, 3000000, 800, &down, 1, &rep);
    cr_assert_eq(rep.long_terms, 1);
    cr_assert_eq(rep.watch_missed, 0);
}

/* Negative controls: each property's checker fails on records that break it. */
Test(checker, elections_two_leaders_at_once_are_found)
{
    fl_term t[] = {leadership(0, 10, 0, 1000), leadership(1, 11, 999, 2000)};
    fl_election_report rep;
    fl_check_election(t, 2, NULL, 0, 0, 0, 0, 800, NULL, 0, &rep);
    cr_assert_eq(rep.overlaps, 1);
}

Test(checker, elections_terms_must_increase_and_be_unique)
{
    fl_term t[] = {leadership(0, 10, 0, 100), leadership(1, 10, 200, 300), leadership(2, 9, 400, 500)};
    fl_election_report rep;
    fl_check_election(t, 3, NULL, 0, 0, 0, 0, 800, NULL, 0, &rep);
    cr_assert_eq(rep.duplicate_terms, 1);
    cr_assert_eq(rep.term_order_violations, 2);
    cr_assert_eq(rep.overlaps, 0);
}

Test(checker, elections_watch_out_of_order_is_found)
{
    fl_term t[] = {leadership(0, 10, 0, 100), leadership(1, 11, 200, 300)};
    fl_watch_event e[] = {told(0, true, 11, 250), told(0, true, 10, 260), told(0, true, 11, 270),
                          told(1, true, 12, 280)};
    fl_election_report rep;
    fl_check_election(t, 2, e, 4, 2, 0, 1000000, 800, NULL, 0, &rep);
    cr_assert_eq(rep.watch_order_violations, 2, "10 after 11, and 11 elected twice");
    cr_assert_eq(rep.watch_unknown_terms, 1, "term 12 was never read by a campaigner");
}

/* ---- semaphores ---- */

static fl_permit permit(int client, int slot, long long fence, uint64_t from_ms, uint64_t until_ms)
{
    return (fl_permit){client, slot, fence, from_ms * 1000, until_ms * 1000};
}

Test(checker, semaphore_within_its_limit)
{
    fl_permit p[] = {permit(0, 0, 1, 0, 100), permit(1, 1, 5, 50, 150), permit(2, 0, 2, 100, 200),
                     permit(3, 1, 6, 150, 250)};
    fl_semaphore_report rep;
    fl_check_semaphore(p, 4, 2, &rep);
    cr_assert_eq(rep.most_at_once, 2);
    cr_assert_eq(rep.over_limit + rep.slot_overlaps + rep.fence_violations, 0);
}

/* Negative controls: each property's checker fails on records that break it. */
Test(checker, semaphore_over_its_limit_is_found)
{
    /* with five masters and L = 2, a per-master counter admits three */
    fl_permit p[] = {permit(0, 0, 1, 0, 100), permit(1, 1, 5, 10, 100), permit(2, 0, 2, 20, 100)};
    fl_semaphore_report rep;
    fl_check_semaphore(p, 3, 2, &rep);
    cr_assert_eq(rep.most_at_once, 3);
    cr_assert_eq(rep.over_limit, 1);
    cr_assert_eq(rep.slot_overlaps, 1);
    fl_permit q[] = {permit(0, 0, 7, 0, 10), permit(1, 0, 7, 20, 30)};
    fl_check_semaphore(q, 2, 2, &rep);
    cr_assert_eq(rep.fence_violations, 1);
}
