/* base/base.h - the ground floor: what every other floor stands on, and
 * nothing of Redis, Redlock or HTTP. The only header of base/ that another
 * folder includes (docs/design.md, "The floors"); base/ uses no other folder.
 *
 * What it offers, one part each:
 *   loop.h      the event loop: one thread polling descriptors, running
 *               posted jobs and timers, and the clock they count on
 *   log.h       one line per event on stderr, from any thread
 *   conf.h      flags and REDLOCKD_* variables: parsed once on the main
 *               thread, read-only after
 *   rules.h     what a name, a token and an owner may be (the redlock
 *               client links this part too)
 *   token.h     tokens: 128 random bits as URL-safe text
 *   jsonio.h    the strict JSON reader of every body, the integer writer
 *   metrics.h   counters and histograms, lock-free, from any thread
 *   listener.h  stopping a listener without resetting its queue; a Unix socket's file
 *   deadline.h  an absolute time for pthread_cond_timedwait
 *   dlist.h     intrusive doubly linked lists, guarded by their owner
 *   principals.h  who may do what to which names (--principals-file)
 *   audit.h     the audit log (--audit-log): one JSON line per grant,
 *               release, force, loss, term and refusal, from any thread
 *   testhook.h  REDLOCKD_TEST_BREAK: a promise broken on purpose, for the
 *               nemesis suite's negative controls
 *
 * Who owns what: a loop belongs to its thread and its one client (a master
 * pool); posting to it and reading its clock work from any thread. The conf
 * is written once on the main thread, at start, and only read after. The
 * log, the metrics, new tokens and deadlines may be used from any thread;
 * rules and jsonio are pure; a dlist is guarded by whoever owns it.
 * conf_int.h is private to this folder.
 */
#ifndef RL_BASE_H
#define RL_BASE_H

#include "audit.h"
#include "conf.h"
#include "deadline.h"
#include "dlist.h"
#include "jsonio.h"
#include "listener.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "principals.h"
#include "rules.h"
#include "testhook.h"
#include "token.h"

#endif
