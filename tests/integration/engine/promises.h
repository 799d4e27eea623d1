/* promises.h - what test_promises.c and test_promises_fair.c share: two
 * redlockd instances (C and P) on five masters, freed by the suite's
 * teardown, and the helpers for their streams (defined in test_promises.c). */
#ifndef RL_TEST_PROMISES_H
#define RL_TEST_PROMISES_H

#include "harness.h"

extern h_cluster *C, *P;

/* Five masters, redlockd on them (C) and a peer (P). */
void start_two(void);

/* The next event of s other than "renewed" (and "campaigning"), within
 * timeout_ms; NULL when none came or the stream ended. */
cJSON *next_news(h_stream *s, int timeout_ms);

/* A stream on c (POST path body) that answered 201. */
h_stream *open_stream(h_cluster *c, const char *path, const char *body);

/* open_stream, whose first news (within 3 s) is the event want: returned
 * in *first (free with cJSON_Delete). */
h_stream *begin(h_cluster *c, const char *path, const char *body, const char *want, cJSON **first);

/* A DELETE of path on c with token, answered 204. */
void delete_with(h_cluster *c, const char *path, const char *token);

#endif
