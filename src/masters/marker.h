/* marker.h - the cluster check: sets every master's restart-quarantine marker
 * right (see quarantine.h for the rules, scripts.h for the marker itself).
 *
 * The master layer reports each master that answers without a ready marker;
 * the check then reads the marker of every master, plans with
 * quarantine_plan, writes what the plan says (pending, promote, restore), and
 * reads again until nothing is left to do; while a master is missing, unknown
 * or not set up it checks again every second. All decisions rest on what the
 * masters hold, so every redlockd on the same masters reaches the same
 * result, and the scripts make concurrent checks agree.
 *
 * Everything runs on the master pool's loop thread; the check is owned by
 * main, created before the pool starts and freed after it stopped.
 */
#ifndef RL_MARKER_H
#define RL_MARKER_H

#include <stdbool.h>
#include <stdint.h>

struct mpool;
typedef struct marker_check marker_check;

/* window_us: how long a master that lost its data sits out (the longest TTL
 * plus the fence keep plus drift). auto_setup: a brand-new cluster (no marker anywhere, every
 * master answering) is set up by the check itself. NULL on OOM. */
marker_check *marker_check_new(struct mpool *p, uint64_t window_us, bool auto_setup);
/* The same for one of several pools of one process (one per event loop):
 * what a check reads on the masters is noted on every pool of all[0..nall)
 * too (mpool_note_marker only stores atomics), so that every loop's view of
 * the quarantine, and /readyz, agree at once. all must outlive the check. */
marker_check *marker_check_new_shared(struct mpool *p, struct mpool *const *all, int nall,
                                      uint64_t window_us, bool auto_setup);
void marker_check_free(marker_check *mc);

#endif
