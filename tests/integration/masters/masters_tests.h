/* masters_tests.h - what test_masters.c and test_masters_group.c share:
 * the suite's five masters and redlockd (C, started by its init), and a
 * release (defined in test_masters.c). */
#ifndef RL_TEST_MASTERS_H
#define RL_TEST_MASTERS_H

#include "harness.h"

extern h_cluster *C;

/* DELETE /locks/name with grant's token, answered 204. */
void release(const char *name, const h_resp *grant);

#endif
