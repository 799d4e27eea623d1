/* workload_probe.c - fl_probe_long_hold and fl_probe_grant (workload.h):
 * the fault thread asks for a name itself at the moment a scenario rests
 * on, so that its negative control finds the violation by construction
 * rather than when some client happened to ask in time. Its asks are
 * judged with the clients' records. */
#include "workload.h"
#include "workload_int.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FL_PROBE_CLIENT 1000   /* the probe's client id in the records */

/* Whether redlockd has all five masters up (voting or sitting out). */
static bool all_up(h_cluster *c)
{
    h_resp rz = h_http(c, "GET", "/readyz", NULL, NULL);
    bool yes = h_int(&rz, "masters_up") == 5;
    h_resp_free(&rz);
    return yes;
}

/* Asks for fl-<name> once through c as the probe client; records it (a
 * grant is released at once). The status. */
static int probe_once(fl_run *r, h_cluster *c, int name)
{
    if (r->nprobes == FL_MAX_PROBES)
        return -1;
    char path[64], body[64];
    snprintf(path, sizeof path, "/locks/fl-%d", name);
    snprintf(body, sizeof body, "{\"ttl_ms\":%lld}", r->sc->ttl_ms);
    fl_record rec = {.client = FL_PROBE_CLIENT, .name = name, .sent_us = h_now_us()};
    h_resp a = h_http(c, "POST", path, body, NULL);
    rec.answered_us = h_now_us();
    rec.status = (int)a.status;
    if (a.status == 201) {
        atomic_fetch_add(&r->grants, 1);
        rec.validity_ms = h_int(&a, "validity_ms");
        rec.fence = h_int(&a, "fence");
        rec.ttl_ms = r->sc->ttl_ms;
        fl_keep_token(r, h_str(&a, "token"));
        rec.release_sent_us = h_now_us();
        char hdr[300];
        snprintf(hdr, sizeof hdr, "Lock-Token: %s", h_str(&a, "token"));
        h_resp d = h_http(c, "DELETE", path, NULL, hdr, NULL);
        rec.release_status = (int)d.status;
        rec.release_answered_us = h_now_us();
        h_resp_free(&d);
    }
    h_resp_free(&a);
    /* A grant is judged as any client's; a refusal only in a negative
     * control (a positive scenario times its clients' answers, not the
     * fault thread's, which opens a connection for each ask). */
    if (rec.status == 201 || r->sc->expect_violation)
        r->probes[r->nprobes++] = rec;
    return rec.status;
}

bool fl_probe_grant(fl_run *r, int name, int timeout_ms)
{
    long before = atomic_load(&r->grants);
    for (uint64_t until = h_now_us() + (uint64_t)timeout_ms * 1000ULL; h_now_us() < until; usleep(20000))
        if (atomic_load(&r->grants) > before || probe_once(r, r->c, name) == 201)
            return true;
    return false;
}

void fl_probe_long_hold(fl_run *r)
{
    if (!r->sc->expect_violation)
        return;   /* (a positive scenario keeps its clients' timing to itself) */
    for (uint64_t until = h_now_us() + 15000000; !all_up(r->c) && h_now_us() < until;)
        usleep(10000);
    uint64_t hold_end = atomic_load(&r->long_hold_until_us);
    int name = atomic_load(&r->long_hold_name);
    if (r->nprobes == FL_MAX_PROBES || hold_end < h_now_us() + FL_PROBE_LEFT_MS * 1000ULL)
        return;   /* the hold ended (or nearly): this round proves nothing */
    int status = probe_once(r, r->c, name);
    uint64_t answered = h_now_us();
    /* Answered while client 0 still held: a grant is a second holder; a
     * 409 says that another value holds a majority, which only a client
     * granted since the restart can have (a 503 proves nothing). */
    r->probes_in_hold += (status == 201 || status == 409) && atomic_load(&r->long_hold_until_us) == hold_end &&
                         answered < hold_end;
}

bool fl_probe_owed(fl_run *r, int *extra_rounds)
{
    return r->sc->long_holder && r->sc->expect_violation && r->probes_in_hold == 0 && ++*extra_rounds <= 10;
}
