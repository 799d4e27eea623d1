/* semaphore_names.c - a semaphore's names on the masters and its permits
 * (semaphore.h). Pure: the semaphore engine and the HTTP front both use them. */
#include "semaphore.h"

#include <stdio.h>
#include <string.h>

#include "base/base.h"

void sem_slot_name(const char *name, int slot, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s" RULES_SEP "%d", name, slot);
}

void sem_limit_name(const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s" RULES_SEP "limit", name);
}

bool sem_token_split(const char *permit, int limit_max, int *slot, char *token, size_t tokenlen)
{
    const char *colon = strchr(permit, ':');
    if (!colon || colon == permit || colon - permit > 2 || !colon[1] || strlen(colon + 1) >= tokenlen)
        return false;
    int s = 0;
    for (const char *p = permit; p < colon; p++) {
        if (*p < '0' || *p > '9')
            return false;
        s = s * 10 + (*p - '0');
    }
    if (s >= limit_max)
        return false;
    *slot = s;
    snprintf(token, tokenlen, "%s", colon + 1);
    return true;
}
