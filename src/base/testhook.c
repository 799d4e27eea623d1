/* testhook.c - see testhook.h. */
#include "testhook.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"", "double_grant", "over_limit", "stale_fence", "release_noop",
                                    "no_wake", "silent_loss",
                                    "no_rights"};

int testhook_parse(const char *text)
{
    if (!text)
        return TESTHOOK_NONE;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(text, names[i]))
            return (int)i;
    return -1;
}

static int broken = TESTHOOK_NONE;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
    int r = testhook_parse(getenv("REDLOCKD_TEST_BREAK"));
    broken = r < 0 ? TESTHOOK_NONE : r;
}

bool testhook_breaks(enum testhook_rule rule)
{
    pthread_once(&once, read_env);
    return rule != TESTHOOK_NONE && broken == (int)rule;
}

const char *testhook_name(void)
{
    pthread_once(&once, read_env);
    return names[broken];
}
