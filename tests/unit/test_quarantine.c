/* Unit tests: restart quarantine rules and INFO parsing (quarantine.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "quarantine.h"

#define S 1000000ULL            /* one second in microseconds */
#define WINDOW (3600 * S)       /* the longest TTL plus drift */
#define T0 (100000 * S)         /* "now" when the cluster had long been running */

static quarantine_view old_master(void) { return (quarantine_view){true, false, 1 * S, 1 * S}; }

Test(quarantine, masters_started_together_vote_at_once)
{
    quarantine_view v[5];
    for (int i = 0; i < 5; i++)
        v[i] = (quarantine_view){true, false, T0 - 2 * S + (uint64_t)i * S / 2, 0};
    for (int i = 0; i < 5; i++)
        v[i].first_born_us = v[i].born_us;
    for (int i = 0; i < 5; i++)
        cr_assert_eq(quarantine_until(v, 5, i, T0, WINDOW), 0, "master %d", i);
}

Test(quarantine, restart_seen_quarantines_until_uptime_passes_window)
{
    quarantine_view v[5];
    for (int i = 0; i < 5; i++)
        v[i] = old_master();
    v[2].restarted = true;
    v[2].born_us = T0 - 10 * S;
    cr_assert_eq(quarantine_until(v, 5, 2, T0, WINDOW), T0 - 10 * S + WINDOW);
    cr_assert_eq(quarantine_until(v, 5, 2, T0 - 10 * S + WINDOW - 1, WINDOW),
                 T0 - 10 * S + WINDOW);
    cr_assert_eq(quarantine_until(v, 5, 2, T0 - 10 * S + WINDOW, WINDOW), 0,
                 "uptime reached the window: votes count again");
    for (int i = 0; i < 5; i++)
        if (i != 2)
            cr_assert_eq(quarantine_until(v, 5, i, T0, WINDOW), 0);
}

Test(quarantine, restart_seen_is_quarantined_even_when_all_are_young)
{
    quarantine_view v[3] = {{true, true, T0 - S, T0 - 2 * S},
                            {true, false, T0 - 2 * S, T0 - 2 * S},
                            {true, false, T0 - 2 * S, T0 - 2 * S}};
    cr_assert_neq(quarantine_until(v, 3, 0, T0, WINDOW), 0);
    cr_assert_eq(quarantine_until(v, 3, 1, T0, WINDOW), 0);
}

Test(quarantine, first_sight_of_a_young_master_among_older_ones)
{
    /* This process just started: master 4 came up 60 s ago, the others
     * have run for a day. Enough of them ran before it to have granted a
     * lock with its previous life. */
    quarantine_view v[5];
    for (int i = 0; i < 5; i++)
        v[i] = old_master();
    v[4].born_us = v[4].first_born_us = T0 - 60 * S;
    cr_assert_eq(quarantine_until(v, 5, 4, T0, WINDOW), T0 - 60 * S + WINDOW);
    /* Two older masters suffice with five (quorum 3 = two plus it). */
    v[0].known = v[1].known = false;
    cr_assert_neq(quarantine_until(v, 5, 4, T0, WINDOW), 0);
    v[2].known = false;
    cr_assert_eq(quarantine_until(v, 5, 4, T0, WINDOW), 0,
                 "one older master cannot have made a majority with it");
}

Test(quarantine, together_tolerance_is_five_seconds)
{
    quarantine_view v[3];
    for (int i = 0; i < 3; i++)
        v[i] = (quarantine_view){true, false, T0 - 100 * S, T0 - 100 * S};
    v[2].born_us = v[2].first_born_us = T0 - 100 * S + QUARANTINE_TOGETHER_US;
    cr_assert_eq(quarantine_until(v, 3, 2, T0, WINDOW), 0, "within the tolerance");
    v[2].born_us = v[2].first_born_us = T0 - 100 * S + QUARANTINE_TOGETHER_US + 1;
    cr_assert_neq(quarantine_until(v, 3, 2, T0, WINDOW), 0, "just past it");
}

Test(quarantine, an_older_master_that_restarted_still_counts_as_older)
{
    /* first_born, not born: master 0 ran before master 2 even though it has
     * since restarted itself. */
    quarantine_view v[3];
    for (int i = 0; i < 3; i++)
        v[i] = old_master();
    v[2].born_us = v[2].first_born_us = T0 - 60 * S;
    v[0].restarted = true;
    v[0].born_us = T0 - S;
    cr_assert_neq(quarantine_until(v, 3, 2, T0, WINDOW), 0);
}

Test(quarantine, single_master_and_off)
{
    quarantine_view one = {true, false, T0 - S, T0 - S};
    cr_assert_eq(quarantine_until(&one, 1, 0, T0, WINDOW), 0);
    quarantine_view v[3] = {old_master(), old_master(), {true, true, T0 - S, 1 * S}};
    cr_assert_eq(quarantine_until(v, 3, 2, T0, 0), 0, "window 0 turns quarantine off");
    quarantine_view unknown[3] = {old_master(), old_master(), {false, true, T0 - S, T0 - S}};
    cr_assert_eq(quarantine_until(unknown, 3, 2, T0, WINDOW), 0);
}

Test(quarantine, parse_info_server)
{
    const char *info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
                       "run_id:0f7a1c3e5b2d4f6a8c9e0b1d3f5a7c9e1b3d5f7a\r\nuptime_in_seconds:42\r\n"
                       "uptime_in_days:0\r\n";
    char run_id[QUARANTINE_RUN_ID_LEN + 1];
    long long up = -1;
    cr_assert_eq(quarantine_parse_info(info, strlen(info), run_id, &up), 0);
    cr_assert_str_eq(run_id, "0f7a1c3e5b2d4f6a8c9e0b1d3f5a7c9e1b3d5f7a");
    cr_assert_eq(up, 42);
}

Test(quarantine, parse_info_rejects_missing_or_bad_fields)
{
    char run_id[QUARANTINE_RUN_ID_LEN + 1];
    long long up;
    const char *cases[] = {
        "# Server\r\nuptime_in_seconds:5\r\n",
        "run_id:abc\r\n",
        "run_id:abc\r\nuptime_in_seconds:5x\r\n",
        "run_id:abc\r\nuptime_in_seconds:\r\n",
        "xrun_id:abc\r\nuptime_in_seconds:5\r\n",
        "run_id:0123456789012345678901234567890123456789X\r\nuptime_in_seconds:5\r\n",
        "",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(quarantine_parse_info(cases[i], strlen(cases[i]), run_id, &up), -1, "case %zu", i);
    /* A field in the last line without a line end is still read. */
    const char *last = "run_id:abc\nuptime_in_seconds:7";
    cr_assert_eq(quarantine_parse_info(last, strlen(last), run_id, &up), 0);
    cr_assert_eq(up, 7);
}
