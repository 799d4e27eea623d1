/* workload_log.c - the fault workload's logs: the clients' records as JSON
 * lines and back, and a scenario's row of the table (workload_int.h). */
#include "workload.h"
#include "workload_int.h"

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void write_jsonl(const char *path, struct client *cls, int n)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    for (int c = 0; c < n; c++)
        for (size_t i = 0; i < cls[c].n; i++) {
            const fl_record *x = &cls[c].recs[i];
            fprintf(f,
                    "{\"client\":%d,\"name\":%d,\"status\":%d,\"sent_us\":%" PRIu64
                    ",\"answered_us\":%" PRIu64 ",\"validity_ms\":%lld,\"ttl_ms\":%lld,\"fence\":%lld"
                    ",\"read_us\":%" PRIu64 ",\"write\":%d,\"write_us\":%" PRIu64 ",\"late\":%s,\"release_sent_us\":%" PRIu64
                    ",\"release_answered_us\":%" PRIu64 ",\"release_status\":%d}\n",
                    x->client, x->name, x->status, x->sent_us, x->answered_us, x->validity_ms,
                    x->ttl_ms, x->fence, x->read_us, (int)x->write, x->write_us, x->late ? "true" : "false",
                    x->release_sent_us, x->release_answered_us, x->release_status);
        }
    fclose(f);
}

static long long jint(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "log line lacks %s", k);
    return (long long)v->valuedouble;
}

/* Reads the clients' JSON lines back: the checker judges the logs. */
fl_record *read_jsonl(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t cap = 1024;
    fl_record *v = malloc(cap * sizeof *v);
    *n = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        cr_assert_not_null(o, "bad log line: %s", line);
        if (*n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        fl_record *x = &v[(*n)++];
        /* Microsecond times since boot fit a double exactly. */
        x->client = (int)jint(o, "client");
        x->name = (int)jint(o, "name");
        x->status = (int)jint(o, "status");
        x->sent_us = (uint64_t)jint(o, "sent_us");
        x->answered_us = (uint64_t)jint(o, "answered_us");
        x->validity_ms = jint(o, "validity_ms");
        x->ttl_ms = jint(o, "ttl_ms");
        x->fence = jint(o, "fence");
        x->read_us = (uint64_t)jint(o, "read_us");
        x->write = (enum fl_write)jint(o, "write");
        x->write_us = (uint64_t)jint(o, "write_us");
        x->late = cJSON_IsTrue(cJSON_GetObjectItem(o, "late"));
        x->release_sent_us = (uint64_t)jint(o, "release_sent_us");
        x->release_answered_us = (uint64_t)jint(o, "release_answered_us");
        x->release_status = (int)jint(o, "release_status");
        cJSON_Delete(o);
    }
    fclose(f);
    return v;
}

void print_row(const char *label, const fl_report *p, long lost, double free_pct,
               bool availability)
{
    char row[512], pct[16];
    if (availability)
        snprintf(pct, sizeof pct, "%7.2f", free_pct);
    else
        snprintf(pct, sizeof pct, "%7s", "n/a");   /* a majority was down on purpose */
    snprintf(row, sizeof row,
             "| %-30s | %8ld | %7ld | %6ld | %6ld | %5ld | %8ld | %10ld | %4ld | %6ld/%-7ld | %s | %6.1f |\n",
             label, p->attempts, p->grants, p->locked, p->no_quorum, p->transport_errors, p->overlaps,
             p->fence_violations + p->accepted_fence_violations, lost, p->late_stale - p->late_stale_accepted, p->late_stale,
             pct, p->healthy_p99_ms);
    fputs(row, stderr);
    const char *path = getenv("FAULTS_TABLE");
    FILE *f = fopen(path ? path : "faults-table.md", "a");
    if (f) {
        /* The first row of a new table brings the column names. */
        if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0)
            fputs(FL_TABLE_HEADER, f);
        fputs(row, f);
        fclose(f);
    }
}
