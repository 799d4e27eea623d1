/* scripts_tests.h - what test_scripts.c and test_scripts_one.c share: one
 * redis-server (C, connected as R, databases 0 and 1) set up by the
 * suite, and the helpers that run scripts on it (defined in test_scripts.c). */
#ifndef RL_TEST_SCRIPTS_H
#define RL_TEST_SCRIPTS_H

#include "harness.h"
#include "masters/masters.h"

extern h_cluster *C;
extern redisContext *R;

/* One command: a script with its keys and arguments. */
struct cmd {
    const mscript *s;
    int nkeys, nargs;
    char args[16][96];
};

/* SELECT db on R. */
void select_db(int db);

/* EVAL of c's own script. */
redisReply *run_alone(const struct cmd *c);

/* c runs s on nargs strings, the first nkeys of them keys. */
void set_args(struct cmd *c, const mscript *s, int nkeys, int nargs, ...);

/* The same change of the world in the current database. */
void world_change(int what, const char *name);

/* FLUSHALL: both databases empty. */
void flush_both(void);

#endif
