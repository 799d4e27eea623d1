/* bench_report.c - the table and the JSON (bench_int.h). */
#include "bench_int.h"

const char *const row_name[NROWS] = {"floor", "node-redlock", "redlockd t1", "redlockd t2",
                                     "node-redlock new", "redlockd t1 new"};
const char *const row_json[NROWS] = {"floor", "node_redlock", "redlockd_t1", "redlockd_t2",
                                     "node_redlock_new_names", "redlockd_t1_new_names"};

void print_header(void)
{
    printf("| clients | what             | cycles/s | acquire p50 ms | p99 ms | p99.9 ms | errors "
           "| masters CPU s/1000 cycles | own CPU s/1000 cycles |\n");
    printf("|--------:|------------------|---------:|---------------:|-------:|---------:|-------:"
           "|--------------------------:|----------------------:|\n");
}

static void fmt3(char *out, size_t len, double v)
{
    if (v >= 0)
        snprintf(out, len, "%.3f", v);
    else
        out[0] = '\0';
}

void print_row(const char *what, const result *r)
{
    char mc[32], oc[32];
    fmt3(mc, sizeof mc, r->masters_cpu_s_per_1000);
    fmt3(oc, sizeof oc, r->own_cpu_s_per_1000);
    printf("| %7d | %-16s | %8.0f | %14.3f | %6.3f | %8.3f | %6ld | %25s | %21s |\n", r->clients, what,
           r->cycles_per_s, r->p50, r->p99, r->p999, r->errors, mc, oc);
}

/* a/b of two measured rows, or -1. */
double ratio(const result *a, const result *b, bool p50)
{
    if (!a->ran || !b->ran)
        return -1;
    double x = p50 ? a->p50 : a->cycles_per_s, y = p50 ? b->p50 : b->cycles_per_s;
    return x > 0 && y > 0 ? x / y : -1;
}

/* a/b of the masters' CPU per 1000 cycles of two measured rows, or -1. */
double cpu_ratio(const result *a, const result *b)
{
    if (!a->ran || !b->ran || a->masters_cpu_s_per_1000 <= 0 || b->masters_cpu_s_per_1000 <= 0)
        return -1;
    return a->masters_cpu_s_per_1000 / b->masters_cpu_s_per_1000;
}

void fmt2(char *out, size_t len, double v)
{
    if (v >= 0)
        snprintf(out, len, "%.2f", v);
    else
        out[0] = '\0';
}

void json_string(FILE *j, const char *s)
{
    fputc('"', j);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(j, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(j, "\\u%04x", *s);
        else
            fputc(*s, j);
    }
    fputc('"', j);
}

void json_double(FILE *j, int decimals, double v)
{
    if (v >= 0)
        fprintf(j, "%.*f", decimals, v);
    else
        fputs("null", j);
}

void json_row(FILE *j, const result *r)
{
    if (!r->ran) {
        fputs("null", j);
        return;
    }
    fprintf(j,
            "{\"cycles\":%ld,\"seconds\":%.3f,\"cycles_per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
            "\"p999_ms\":%.3f,\"errors\":%ld,\"masters_cpu_s_per_1000_cycles\":",
            r->cycles, r->seconds, r->cycles_per_s, r->p50, r->p99, r->p999, r->errors);
    json_double(j, 4, r->masters_cpu_s_per_1000);
    fputs(",\"own_cpu_s_per_1000_cycles\":", j);
    json_double(j, 4, r->own_cpu_s_per_1000);
    fputc('}', j);
}

/* The ratios within the run, level by level. */
void print_ratios(const bench_run *run)
{
    printf("\n| clients | p50 t2/floor | p50 t1/floor | cycles/s t2/floor | cycles/s t1/floor "
           "| cycles/s t2/node-redlock | cycles/s t1/node-redlock | cycles/s t2/t1 |\n"
           "|--------:|---:|---:|---:|---:|---:|---:|---:|\n");
    int grew = 0;
    for (int i = 0; i < run->nlevels; i++) {
        const result *r = run->res[i];
        double v[7] = {ratio(&r[ROW_T2], &r[ROW_FLOOR], true),  ratio(&r[ROW_T1], &r[ROW_FLOOR], true),
                       ratio(&r[ROW_T2], &r[ROW_FLOOR], false), ratio(&r[ROW_T1], &r[ROW_FLOOR], false),
                       ratio(&r[ROW_T2], &r[ROW_NODE], false),  ratio(&r[ROW_T1], &r[ROW_NODE], false),
                       ratio(&r[ROW_T2], &r[ROW_T1], false)};
        char c[7][16];
        for (int k = 0; k < 7; k++)
            fmt2(c[k], sizeof c[k], v[k]);
        printf("| %7d | %s | %s | %s | %s | %s | %s | %s |\n", run->levels[i], c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        if (v[6] > 1)
            grew++;
    }
    printf("\nthroughput must grow with threads: t2/t1 above 1 at %d of %d levels\n", grew, run->nlevels);

    /* The masters' CPU per cycle, redlockd t1 over node-redlock, for both
     * name patterns, and new names over reused names for each. */
    printf("\n| clients | masters CPU/cycle t1/node-redlock, reused names | same, new names "
           "| t1 new/reused names | node-redlock new/reused names | t1 fence raises/cycle, reused names "
           "| same, new names |\n|--------:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < run->nlevels; i++) {
        const result *r = run->res[i];
        double v[4] = {cpu_ratio(&r[ROW_T1], &r[ROW_NODE]), cpu_ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW]),
                       cpu_ratio(&r[ROW_T1_NEW], &r[ROW_T1]), cpu_ratio(&r[ROW_NODE_NEW], &r[ROW_NODE])};
        char c[4][16];
        for (int k = 0; k < 4; k++)
            fmt2(c[k], sizeof c[k], v[k]);
        char ra[2][16];
        snprintf(ra[0], sizeof ra[0], "%.3f", r[ROW_T1].raises_per_cycle);
        snprintf(ra[1], sizeof ra[1], "%.3f", r[ROW_T1_NEW].raises_per_cycle);
        printf("| %7d | %s | %s | %s | %s | %s | %s |\n", run->levels[i], c[0], c[1], c[2], c[3], ra[0], ra[1]);
    }
}

/* The targets of issues 22 and 29, as ratios within this run; hz is
 * /healthz's p50. */
void print_targets(const bench_run *run, double hz)
{
    printf("\ntargets of issues 22 and 29 (this run):\n");
    for (int i = 0; i < run->nlevels; i++) {
        const result *r = run->res[i];
        if (run->levels[i] == 1) {
            double bound = 1.2 * (r[ROW_FLOOR].p50 + hz);
            printf("* 1 client: acquire p50 t1 %.3f ms, t1 new %.3f ms; bound 1.2 x (floor p50 %.3f + /healthz "
                   "p50 %.3f) = %.3f ms: %s\n", r[ROW_T1].p50, r[ROW_T1_NEW].p50, r[ROW_FLOOR].p50, hz, bound,
                   r[ROW_T1].p50 <= bound && r[ROW_T1_NEW].p50 <= bound ? "met" : "missed");
        }
        if (run->levels[i] == 64 && r[ROW_NODE].ran && r[ROW_NODE_NEW].ran) {
            double c = ratio(&r[ROW_T1], &r[ROW_NODE], false), cn = ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW], false);
            double m = cpu_ratio(&r[ROW_T1], &r[ROW_NODE]), mn = cpu_ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW]);
            printf("* 64 clients: cycles/s t1/node-redlock %.2f reused, %.2f new names (target >= 1.3): %s\n", c, cn,
                   c >= 1.3 && cn >= 1.3 ? "met" : "missed");
            printf("* 64 clients: masters CPU/cycle t1/node-redlock %.2f reused, %.2f new names (target <= 1.2): "
                   "%s\n", m, mn, m <= 1.2 && mn <= 1.2 ? "met" : "missed");
        }
        if (run->levels[i] == 64)
            printf("* 64 clients: fence raises per cycle %.3f reused, %.3f new names (target about 0)\n",
                   r[ROW_T1].raises_per_cycle, r[ROW_T1_NEW].raises_per_cycle);
        if (run->levels[i] == 64)
            printf("* 64 clients: redlockd t1 peak RSS over the run %.1f MiB (target < 20 MiB): %s\n",
                   (double)run->max_rss[0] / 1024.0, run->max_rss[0] < 20 * 1024 ? "met" : "missed");
    }
    long errors = 0;
    for (int i = 0; i < run->nlevels; i++)
        for (int k = 0; k < NROWS; k++)
            errors += run->res[i][k].errors;
    printf("* errors in every row: %ld (target 0): %s\n", errors, errors == 0 ? "met" : "missed");

}

void print_handoffs(const bench_run *run)
{
    const char *ho_label[2] = {"notices on (default)", "notices off: timed retries"};
    printf("\nHandoff: release answered -> next waiter granted, 2 instances, 2 waiters on each, one name\n\n");
    printf("| mode | handoffs | p50 ms | p99 ms | max ms | errors |\n|---|---:|---:|---:|---:|---:|\n");
    for (int v = 0; v < 2; v++)
        printf("| %s | %ld | %.3f | %.3f | %.3f | %ld |\n", ho_label[v], run->ho[v].handoffs, run->ho[v].p50, run->ho[v].p99,
               run->ho[v].max, run->ho[v].errors);

}

void write_json(const char *json_path, const bench_run *run)
{
    FILE *j = fopen(json_path, "w");
    if (j) {
        fputs("{\"label\":", j);
        json_string(j, run->label);
        fprintf(j, ",\"seconds_per_level\":%.1f,\"redlockd_t1_peak_rss_kib\":%ld,\"redlockd_t2_peak_rss_kib\":%ld,",
                run->seconds, run->max_rss[0], run->max_rss[1]);
        fputs("\"node_redlock\":", j);
        json_string(j, run->node);
        fputs(",\"levels\":[", j);
        for (int i = 0; i < run->nlevels; i++) {
            const result *r = run->res[i];
            fprintf(j, "%s{\"clients\":%d", i ? "," : "", run->levels[i]);
            for (int k = 0; k < NROWS; k++) {
                fprintf(j, ",\"%s\":", row_json[k]);
                json_row(j, &r[k]);
            }
            fputs(",\"ratios\":{\"p50_t2_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_FLOOR], true));
            fputs(",\"p50_t1_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T1], &r[ROW_FLOOR], true));
            fputs(",\"cycles_t2_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_FLOOR], false));
            fputs(",\"cycles_t1_floor\":", j);
            json_double(j, 3, ratio(&r[ROW_T1], &r[ROW_FLOOR], false));
            fputs(",\"cycles_t2_node_redlock\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_NODE], false));
            fputs(",\"cycles_t1_node_redlock\":", j);
            json_double(j, 3, ratio(&r[ROW_T1], &r[ROW_NODE], false));
            fputs(",\"cycles_t2_t1\":", j);
            json_double(j, 3, ratio(&r[ROW_T2], &r[ROW_T1], false));
            fputs(",\"masters_cpu_t1_node_redlock\":", j);
            json_double(j, 3, cpu_ratio(&r[ROW_T1], &r[ROW_NODE]));
            fputs(",\"masters_cpu_t1_node_redlock_new_names\":", j);
            json_double(j, 3, cpu_ratio(&r[ROW_T1_NEW], &r[ROW_NODE_NEW]));
            fputs(",\"fence_raises_per_cycle_t1\":", j);
            json_double(j, 4, r[ROW_T1].raises_per_cycle);
            fputs(",\"fence_raises_per_cycle_t1_new_names\":", j);
            json_double(j, 4, r[ROW_T1_NEW].raises_per_cycle);
            fputs(",\"masters_cpu_t1_new_over_reused_names\":", j);
            json_double(j, 3, cpu_ratio(&r[ROW_T1_NEW], &r[ROW_T1]));
            fputs("}}", j);
        }
        fprintf(j, "],\"handoff\":{\"notices\":{\"handoffs\":%ld,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"errors\":%ld},"
                   "\"timed_retries\":{\"handoffs\":%ld,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"errors\":%ld}}}\n",
                run->ho[0].handoffs, run->ho[0].p50, run->ho[0].p99, run->ho[0].errors, run->ho[1].handoffs, run->ho[1].p50, run->ho[1].p99,
                run->ho[1].errors);
        fclose(j);
        printf("JSON: %s\n", json_path);
    }

}
