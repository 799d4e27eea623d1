/* hold_tests.h - what the held-stream tests (test_hold.c, test_hold_net.c)
 * share, compiled into each. */
#ifndef HOLD_TESTS_H
#define HOLD_TESTS_H

#include <criterion/criterion.h>
#include <stdio.h>

#include "harness.h"

/* Opens a held stream of name and reads its "acquired" event. */
static inline h_stream *hold_open(h_cluster *c, const char *name, const char *body, cJSON **acquired, uint64_t *at_us)
{
    char path[256];
    snprintf(path, sizeof path, "/locks/%s", name);
    h_stream *s = h_stream_open(c, path, body, 5000);
    cr_assert(s, "no answer to the held acquire");
    cr_assert_eq(s->status, 201, "held acquire: %ld %s", s->status, s->body ? s->body : "");
    cr_assert_str_eq(s->content_type, "application/x-ndjson");
    cr_assert(s->chunked, "a held stream is chunked");
    cr_assert_eq(h_stream_event(s, 3000, acquired, at_us), 1, "no acquired event");
    cr_assert_str_eq(h_ev_str(*acquired, "event"), "acquired");
    cr_assert_str_eq(h_ev_str(*acquired, "name"), name);
    cr_assert_gt(h_ev_int(*acquired, "validity_ms"), 0);
    cr_assert_gt(h_ev_int(*acquired, "fence"), 0);
    return s;
}

#endif
