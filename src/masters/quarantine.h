/* quarantine.h - the pure rules of restart quarantine, decided from state kept
 * on the masters themselves (see scripts.h for the marker).
 *
 * A master that lost its data may have lost the key of a lock that is still
 * valid; if its yes counted, a second client could win a majority while the
 * first still holds the lock. The Redlock page's remedy is to keep such a
 * master out of every vote for longer than the longest TTL. Whether a master
 * lost its data is read from its marker, never from what one redlockd process
 * happened to see, so a sidecar started a moment ago, a restarted one and an
 * old one all decide alike:
 *  - a master with no marker while another master has a ready one lost its
 *    data (a restart without persistence, FLUSHALL, eviction, a new server
 *    behind the same address): it gets a marker that keeps it out of votes
 *    until max TTL plus fence keep plus drift from then (the fence counters
 *    it kept expire by then too);
 *  - a master whose run_id differs from its marker's restarted with its data:
 *    it votes at once when it persists every write (appendonly yes with
 *    appendfsync always), else it sits out the same window;
 *  - no marker anywhere is a new cluster, set up only when every configured
 *    master answers (and never by itself with --cluster-setup manual): a
 *    "pending" marker on each, then "ready" on each. Pending masters never
 *    voted, so they hold no lock and may become ready at any time.
 *
 * Pure: no I/O, no clock reads.
 */
#ifndef RL_QUARANTINE_H
#define RL_QUARANTINE_H

#include <stdbool.h>
#include <stddef.h>

#define QUARANTINE_RUN_ID_LEN 40
#define QUARANTINE_POLICY_LEN 31

/* A master's marker, as the marker script reports it. */
enum quarantine_marker {
    QMARK_UNKNOWN = -1,   /* no answer */
    QMARK_MISSING = 0,
    QMARK_PENDING = 1,
    QMARK_READY = 2,
};

/* What a cluster check does to one master. */
enum quarantine_action {
    QACT_NONE,
    QACT_PENDING,   /* write a pending marker (set up, or join a set-up) */
    QACT_PROMOTE,   /* pending becomes ready, votes at once */
    QACT_RESTORE,   /* lost its data: ready, sitting out the window */
};

/* Plans one step of the cluster check from the markers of all n masters.
 * auto_setup allows starting a new cluster's set-up (no marker anywhere).
 * Fills act[0..n); returns how many masters get an action. Rules, in order:
 *  - any ready marker: missing ones are restored, pending ones promoted;
 *  - else, only when every master answered: missing ones get pending
 *    markers when some master is pending already or auto_setup is on; when
 *    every master is pending, all are promoted;
 *  - else nothing (a master that did not answer may hold a ready marker). */
int quarantine_plan(const enum quarantine_marker *st, int n, bool auto_setup,
                    enum quarantine_action *act);

/* What INFO (server, persistence, memory) and CONFIG GET appendfsync tell of
 * one master. */
typedef struct quarantine_info {
    char run_id[QUARANTINE_RUN_ID_LEN + 1];
    bool aof_enabled;
    char policy[QUARANTINE_POLICY_LEN + 1];   /* maxmemory_policy; "" unknown */
} quarantine_info;

/* Reads run_id, aof_enabled and maxmemory_policy from the text of INFO.
 * Returns 0, or -1 when run_id is missing or malformed (the others default
 * to off and unknown). */
int quarantine_parse_info(const char *info, size_t len, quarantine_info *out);

/* Does the master persist every acknowledged write before it answers?
 * appendfsync is the CONFIG GET answer, NULL where CONFIG is refused (then
 * this cannot be known, and the answer is no). */
bool quarantine_persists(const quarantine_info *qi, const char *appendfsync);

/* May the master lose a lock it acknowledged (evict its key, or lose it in a
 * restart)? True for any maxmemory-policy other than noeviction (unknown
 * counts as unsafe) or appendonly off. */
bool quarantine_may_lose(const quarantine_info *qi);

#endif
