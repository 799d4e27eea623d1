/* workload_int.h - what workload.c (the clients and a scenario's run) and
 * workload_log.c (their logs) share. */
#ifndef RL_WORKLOAD_INT_H
#define RL_WORKLOAD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "workload.h"

/* One client thread of a run, and the records of its attempts. */
struct client {
    fl_run *run;
    int id;
    uint64_t rng;
    fl_record *recs;
    size_t n, cap;
};

/* Notes a token a client (or a probe) received, for the ghost check. */
void fl_keep_token(fl_run *r, const char *token);

/* Writes the n clients' records to path, one JSON object a line. */
void write_jsonl(const char *path, struct client *cls, int n);

/* Reads the clients' JSON lines back: the checker judges the logs. */
fl_record *read_jsonl(const char *path, size_t *n);

/* Prints a scenario's row of the table to stderr, and appends it to
 * FAULTS_TABLE (default faults-table.md). */
void print_row(const char *label, const fl_report *p, long lost, double free_pct,
               bool availability);

#endif
