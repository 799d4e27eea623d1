/* hold_audit.c - a held stream's lines of the audit log (base/audit.h):
 * who opened it, kept with it only while an audit log is written, and its
 * release when its client closes it, its loss and, for a campaign, each
 * term it won (hold_int.h). */
#include "hold_int.h"

void hold_audit_as(hold *h, const char *who, const char *client, const char *route)
{
    size_t a = strlen(who) + 1, b = strlen(client) + 1, c = strlen(route) + 1;
    char *s = malloc(a + b + c);
    if (!s)
        return;   /* (its lines are not written: out of memory) */
    memcpy(s, who, a);
    memcpy(s + a, client, b);
    memcpy(s + a + b, route, c);
    pthread_mutex_lock(&h->s->mu);
    free(h->audit);
    h->audit = s;
    pthread_mutex_unlock(&h->s->mu);
}

void hold_audit(const hold *h, const char *event, const char *outcome, long long fence)
{
    if (!h->audit)
        return;
    const char *who = h->audit, *client = who + strlen(who) + 1, *route = client + strlen(client) + 1;
    audit_event ev = {.event = event, .principal = who[0] ? who : NULL, .client = client,
                      .route = route, .outcome = outcome, .fence = fence,
                      .name = h->election ? h->role->label : h->permit ? h->role->of.semaphore : h->name};
    audit_write(&ev);
}
