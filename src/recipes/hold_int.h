/* hold_int.h - what the files of held streams share (hold.h, in
 * recipes/recipes.h, is their face to the rest): a hold, the set, and its events.
 *   hold.c        the set, a hold's start and close, and its events
 *   hold_renew.c  the renewer thread: extensions, losses, releases,
 *                 campaigns, and the engine's answers to them
 *   hold_notice.c release notices: what another instance's release, force
 *                 or heartbeat does to a hold here
 *   hold_audit.c  its lines of the audit log
 */
#ifndef RL_HOLD_INT_H
#define RL_HOLD_INT_H

#include "hold.h"

#include <linux/sockios.h>   /* SIOCOUTQ */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/base.h"   /* loop_now_us (loop.h): the clock the engine counts validity on */

#define HOLD_RETRY_MIN_MS 100   /* a failed extension is tried again this soon, at the earliest */
#define HOLD_RENEW_EARLY_MS 50  /* an extension goes up to this much early to leave with others */
#define HOLD_TOKEN_CAP (TOKEN_MAX_LEN + 1) /* a campaign's token: not known until elected */
#define HOLD_EXTEND_INFLIGHT_MAX 256 /* extensions in flight at once: an engine task each (3 KiB);
                                       10,000 leases' renewals fired together took 38 MiB */
#define HOLD_TRIM_AFTER 256     /* holds freed before the renewer gives free memory back (malloc_trim) */
#define HOLD_TRIM_QUIET_MS 500  /* ... once no hold was freed for this long (their connections too) */
#define HOLD_TRIM_AGAIN_MS 3000 /* ... and again this much later */

enum hold_end { END_NONE, END_LOST, END_RELEASED };

/* What only an election's campaign or a semaphore's permit needs. */
struct hold_role {
    rl_request acq_req;             /* what the campaign acquires */
    char label[RL_NAME_MAX + 1];    /* the election's name, as its events give it */
    char candidate[RL_OWNER_MAX + 1];
    hold_permit_of of;              /* a permit's semaphore */
};

struct hold {
    hold_set *s;
    rl_engine *e;                   /* the engine of the loop that granted it */
    struct hold *prev, *next;       /* in s->list */
    char *name;                     /* (in the same allocation, after the role: hold_new) */
    char *token;                    /* (there too, as long as the grant's; a campaign's has
                                       room for any token, HOLD_TOKEN_CAP) */
    long long ttl_ms;
    long long fence;
    uint64_t valid_until_us;        /* end of the validity last obtained; the client is
                                       told margin_us less (hold_announced_until) */
    uint64_t margin_us;             /* HOLD_TRANSIT_MARGIN_MS, at most a fifth of the ttl */
    int fd;                         /* the connection's socket (-1: unknown); read only
                                       while !closed */
    int engine_refs;                /* engine requests in flight that point here */
    uint64_t out_at_us;             /* when the last event was handed to the connection */
    uint64_t next_try_us;           /* the next extension */
    const char *fail_reason;        /* of the last failed extension: the "lost" reason if
                                       validity runs out before one succeeds */
    char *record;                   /* the owner record the masters keep beside the lock, for
                                       those a repair takes (NULL: none) */
    char *audit;                    /* who opened it, for the audit log: "principal\0client\0
                                       route\0" (hold_audit_as; NULL: no audit log) */
    bool repair;                    /* the last grant or extension met masters without the
                                       token: the next extension also takes the free ones
                                       (script_renew), so that any majority keeps the lease */
    bool listening;                 /* its name's release notices are wanted (hold_listen) */
    bool extending;                 /* an extension is in flight */
    bool release_after;             /* release once that extension answers */
    bool release_sent;
    bool repaired;                  /* a repair went out: what it wrote may land after a
                                       release of the grant (settled_by_release) */
    bool release_when_read;         /* release once the last event has left (hold_read) */
    bool closed;                    /* the connection let go (hold_close) */
    uint64_t release_at_us;         /* after a loss: release when the validity last
                                       announced, and margin_us, have run out (0: no such
                                       release due), even after hold_close */

    /* An election's campaign (hold_campaign): no grant until elected. */
    bool election;                  /* events are named for an election */
    bool campaigning;               /* not elected yet: nothing to renew or release */
    bool acquiring;                 /* the campaign's acquire is in flight */
    bool permit;                    /* a semaphore's permit (hold_permit): name is the slot's lock */
    rl_handle *acq;                 /* the campaign's acquire, until its rl_finish */
    struct hold_role *role;         /* an election's or a permit's part (in the same allocation,
                                       after the hold); NULL for a lock's hold, which is most of
                                       them: 10,000 leases do not carry it */

    /* what the stream has still to say, in this order */
    bool pend_acquired;
    bool pend_campaigning;
    bool pend_renewed;
    uint64_t heartbeat_us;          /* the client shows it is alive this often (0: not asked) */
    uint64_t beat_us;               /* when it last did (or the stream began) */
    bool pend_probe;                /* one space (hold_probe): JSON's whitespace before the
                                       next event, which a closed client answers with a reset */
    enum hold_end end;
    const char *end_reason;         /* NULL: the event carries no reason */
    bool end_formatted;
    bool want_wake;                 /* hold_read answered 0 since the last wake */
    char *out;                      /* the rest of an event that did not fit where
                                       hold_read put it (NULL: none; most never need it) */
    size_t out_len, out_off;
    hold_wake_fn wake;
    void *arg;
};

struct hold_set {
    int max;
    pthread_mutex_t mu;
    pthread_cond_t changed;         /* the renewer's wake-up: a hold came or its timer moved */
    pthread_cond_t settled;         /* a release answered (hold_set_end_all waits) */
    hold *list;
    int used;                       /* holds open plus reservations */
    int open;
    int releases_pending;
    int extensions;                 /* extensions in flight (at most HOLD_EXTEND_INFLIGHT_MAX) */
    bool held_back;                 /* a pass left due extensions for want of room */
    int freed_since_trim;           /* holds freed since the renewer last gave memory back */
    uint64_t last_free_us;          /* when the last hold was freed */
    uint64_t trim_again_us;         /* the second trim after many frees (0: none due) */
    bool ending;                    /* stopping: no renewals, new holds refused */
    bool stop;
    pthread_t renewer;
    bool renewer_started;
    struct hold_ear *ears;          /* one per engine (hold_attach), freed with the set */
    bool no_repair;                 /* test hook REDLOCKD_TEST_NO_REPAIR: renewals never take
                                       free masters (the fault suite's negative control) */
};

/* The hold set's notice hook on one engine, with the engine's key prefix
 * (a notice's key is matched against a hold's name without formatting). */
struct hold_ear {
    struct hold_ear *next;
    hold_set *s;
    rl_engine *e;
    size_t plen;
    char prefix[];
};

/* hold.c */
void hold_notify(hold *h);
void hold_end_stream(hold *h, enum hold_end kind, const char *reason);
void hold_free_if_done(hold *h);
void hold_end_released(hold *h);
void hold_end_forced(hold *h);
hold *hold_find_grant(hold_set *s, const char *name, size_t nlen, const char *token, size_t tlen);
bool hold_beat(hold_set *s, const char *name, size_t nlen, const char *token, size_t tlen);

/* hold_notice.c */
void hold_listen(hold *h, bool on);

/* hold_audit.c: a line of the audit log for h (nothing without
 * hold_audit_as). s->mu held. */
void hold_audit(const hold *h, const char *event, const char *outcome, long long fence);

/* hold_renew.c */
void hold_sock_arm(int fd, long long ttl_ms);
void hold_release_lock(hold *h);
uint64_t hold_announced_until(const hold *h);
void *hold_renewer_main(void *arg);

#endif
