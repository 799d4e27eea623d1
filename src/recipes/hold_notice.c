/* hold_notice.c - a hold's release notices (hold_int.h): each engine's
 * ear for them (hold_attach), a hold's wish for its name's channel
 * (hold_listen), and what a notice does to the hold of its grant: a
 * release ends its stream with "released", a force with "lost", a
 * heartbeat taken by another instance keeps it going. */
#include "hold_int.h"

struct want_job {
    rl_engine *e;
    bool on;
    char name[];
};

static void want_run(void *arg)
{
    struct want_job *j = arg;
    rl_engine_notice_want(j->e, j->name, j->on);
    free(j);
}

/* Wants (on) or lets go of h's release notices, on its engine's loop: a
 * lock's come on its own channel, a permit's on its semaphore's. Once
 * each way. s->mu held. */
void hold_listen(hold *h, bool on)
{
    if (h->listening == on)
        return;
    h->listening = on;
    const char *channel = h->permit ? h->role->of.limit_name : h->name;
    struct want_job *j = malloc(sizeof *j + strlen(channel) + 1);
    if (!j)
        return;   /* (then a DELETE elsewhere is found at the next extension) */
    j->e = h->e;
    j->on = on;
    strcpy(j->name, channel);
    if (rl_engine_post(h->e, want_run, j) < 0)
        free(j);
}

/* A notice on the engine's loop: the released key and the value deleted
 * (a release through another instance). The hold of exactly that grant
 * ends with "released" ("resigned"), as for a DELETE here; after a force
 * release (the value follows the byte 2: script_force), "lost" "forced". */
static void on_notice(void *arg, const char *key, size_t len, const char *value, size_t vlen)
{
    struct hold_ear *ear = arg;
    hold_set *s = ear->s;
    if (!vlen || len <= ear->plen || memcmp(key, ear->prefix, ear->plen))
        return;
    const char *name = key + ear->plen;
    size_t nlen = len - ear->plen;
    pthread_mutex_lock(&s->mu);
    if (value[0] == '\n') {   /* a heartbeat taken by another instance */
        hold_beat(s, name, nlen, value + 1, vlen - 1);
    } else if (value[0] == '\x02') {
        hold *h = hold_find_grant(s, name, nlen, value + 1, vlen - 1);
        if (h)
            hold_end_forced(h);
    } else {
        hold *h = hold_find_grant(s, name, nlen, value, vlen);
        if (h)
            hold_end_released(h);
    }
    pthread_mutex_unlock(&s->mu);
}

void hold_detach(hold_set *s, rl_engine *e)
{
    pthread_mutex_lock(&s->mu);
    for (struct hold_ear **p = &s->ears; *p; p = &(*p)->next) {
        struct hold_ear *ear = *p;
        if (ear->e != e)
            continue;
        *p = ear->next;
        pthread_mutex_unlock(&s->mu);
        rl_engine_remove_notice_hook(e, on_notice, ear);
        free(ear);
        return;
    }
    pthread_mutex_unlock(&s->mu);
}

void hold_attach(hold_set *s, rl_engine *e)
{
    char prefix[RL_INTERNAL_NAME_MAX + 64];
    rl_engine_key(e, "", prefix, sizeof prefix);
    struct hold_ear *ear = malloc(sizeof *ear + strlen(prefix) + 1);
    if (!ear)
        return;
    ear->s = s;
    ear->e = e;
    ear->plen = strlen(prefix);
    strcpy(ear->prefix, prefix);
    if (!rl_engine_add_notice_hook(e, on_notice, ear)) {
        free(ear);
        return;
    }
    pthread_mutex_lock(&s->mu);
    ear->next = s->ears;
    s->ears = ear;
    pthread_mutex_unlock(&s->mu);
}
