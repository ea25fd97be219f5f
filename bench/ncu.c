/* ncu.c — reads Nsight Compute's raw CSV (`ncu --csv --page raw --print-units base`): a
 * header row of metric names, a row of their units, then a row per profiled kernel; and
 * picks the "why is this slow" numbers out of a kernel's row by name (bench/profile.h).
 * Metric names differ between ncu versions and chips, so the summary matches families of
 * names and reports what it did not find as NaN rather than failing. */
#include "profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 4096

/* Splits one CSV line of quoted fields ("a","b,c",...) into fields[] (pointers into line,
 * which is modified); returns the count, -1 if malformed. */
static int split_csv(char *line, char **fields, int max) {
    int n = 0;
    char *p = line;
    while (*p) {
        if (*p != '"' || n == max) return -1;
        char *out = ++p;
        fields[n++] = out;
        for (;; p++) {
            if (!*p) return -1;
            if (*p == '"' && p[1] == '"') {
                *out++ = '"';
                p++;
                continue;
            }
            if (*p == '"') break;
            *out++ = *p;
        }
        *out = 0;
        p++;
        if (*p == ',')
            p++;
        else if (*p && *p != '\r')
            return -1;
        else
            break;
    }
    return n;
}

/* A CSV number as ncu prints it ("1,234.5" too); NaN when it is not one ("n/a", ""). */
static double csv_number(const char *s) {
    char digits[64];
    size_t n = 0;
    for (; *s && n + 1 < sizeof digits; s++)
        if (*s != ',') digits[n++] = *s;
    digits[n] = 0;
    char *end;
    double v = strtod(digits, &end);
    return n && !*end ? v : NAN;
}

/* Next line of text into a malloc'd copy (without the newline); NULL at the end. */
static char *next_line(const char **text) {
    if (!**text) return NULL;
    const char *nl = strchr(*text, '\n');
    size_t len = nl ? (size_t)(nl - *text) : strlen(*text);
    char *line = malloc(len + 1);
    if (line) {
        memcpy(line, *text, len);
        line[len] = 0;
    }
    *text += len + (nl ? 1 : 0);
    return line;
}

static int add_kernel(kt_ncu_report *r, char **names, char **units, char **values, int n) {
    if (r->n_kernels == KT_NCU_MAX_KERNELS) return 0; /* the first KT_NCU_MAX_KERNELS are enough */
    kt_ncu_kernel *k = &r->kernels[r->n_kernels];
    if (!(k->metrics = calloc((size_t)n, sizeof *k->metrics))) return kt_fail("out of memory");
    r->n_kernels++;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "Kernel Name")) snprintf(k->name, sizeof k->name, "%s", values[i]);
        kt_ncu_metric *m = &k->metrics[k->n_metrics++];
        snprintf(m->name, sizeof m->name, "%s", names[i]);
        snprintf(m->unit, sizeof m->unit, "%s", units ? units[i] : "");
        m->value = csv_number(values[i]);
    }
    return 0;
}

int kt_ncu_parse(const char *text, kt_ncu_report *r) {
    memset(r, 0, sizeof *r);
    char **head = malloc(sizeof(char *) * MAX_FIELDS), **units = malloc(sizeof(char *) * MAX_FIELDS),
         **row = malloc(sizeof(char *) * MAX_FIELDS);
    char *head_line = NULL, *units_line = NULL;
    int n_head = 0, have_units = 0, rc = head && units && row ? 0 : kt_fail("out of memory");
    for (char *line; !rc && (line = next_line(&text));) {
        if (line[0] != '"') { /* ncu's own messages, the program's output */
            free(line);
            continue;
        }
        int n = split_csv(line, head_line ? row : head, MAX_FIELDS);
        if (n < 0 || (head_line && n != n_head)) {
            rc = kt_fail("ncu CSV: a malformed line (%d fields under a header of %d)", n, n_head);
            free(line);
            break;
        }
        if (!head_line) {
            head_line = line;
            n_head = n;
            continue;
        }
        /* The units row comes right after the header, its "ID" field empty. */
        if (!have_units && !r->n_kernels && !row[0][0]) {
            memcpy(units, row, sizeof(char *) * (size_t)n);
            units_line = line;
            have_units = 1;
            continue;
        }
        rc = add_kernel(r, head, have_units ? units : NULL, row, n);
        free(line);
    }
    free(head_line);
    free(units_line);
    free(head);
    free(units);
    free(row);
    if (rc) kt_ncu_free(r);
    return rc;
}

void kt_ncu_free(kt_ncu_report *r) {
    for (int i = 0; i < r->n_kernels; i++) free(r->kernels[i].metrics);
    r->n_kernels = 0;
}

static const kt_ncu_metric *find(const kt_ncu_kernel *k, const char *name) {
    for (int i = 0; i < k->n_metrics; i++)
        if (!strcmp(k->metrics[i].name, name)) return &k->metrics[i];
    return NULL;
}

double kt_ncu_value(const kt_ncu_kernel *k, const char *name) {
    const kt_ncu_metric *m = find(k, name);
    return m ? m->value : NAN;
}

/* The first of names that k has a number for (NaN if none): the same quantity under the
 * names of different ncu versions. */
static double first_of(const kt_ncu_kernel *k, const char *const *names) {
    for (; *names; names++) {
        double v = kt_ncu_value(k, *names);
        if (!isnan(v)) return v;
    }
    return NAN;
}

/* 1 if unit is a time ("ns", "usecond", "s", ...), with its length in seconds in *s. */
static int time_unit(const char *u, double *s) {
    int prefixed = strchr("num", u[0]) && u[0];
    const char *rest = u + prefixed;
    if (strcmp(rest, "s") && strcmp(rest, "second")) return 0;
    *s = !prefixed ? 1 : u[0] == 'n' ? 1e-9 : u[0] == 'u' ? 1e-6 : 1e-3;
    return 1;
}

/* A metric's value in base units: a time in microseconds, else scaled by its SI prefix
 * ("Kbyte" x1e3; ncu's prefixes are decimal). */
static double scaled(const kt_ncu_metric *m) {
    if (!m) return NAN;
    double s;
    if (time_unit(m->unit, &s)) return m->value * s * 1e6;
    const char *u = m->unit;
    s = u[0] == 'K' ? 1e3 : u[0] == 'M' ? 1e6 : u[0] == 'G' ? 1e9 : u[0] == 'T' ? 1e12 : 1;
    return m->value * s;
}

/* The stall reasons (cycles per issued instruction), the largest four kept. */
static void top_stalls(const kt_ncu_kernel *k, kt_ncu_summary *s) {
    for (int i = 0; i < k->n_metrics; i++) {
        const kt_ncu_metric *m = &k->metrics[i];
        const char *at = strstr(m->name, "issue_stalled_");
        if (strncmp(m->name, "smsp__average_warp", 18) || !at || isnan(m->value) || !strstr(m->name, ".ratio"))
            continue;
        char reason[48];
        snprintf(reason, sizeof reason, "%s", at + strlen("issue_stalled_"));
        char *cut = strstr(reason, "_per_");
        if (!cut) cut = strchr(reason, '.');
        if (cut) *cut = 0;
        if (!strcmp(reason, "selected")) continue; /* issuing, not stalled */
        int at_rank = s->n_stalls < 4 ? s->n_stalls++ : 4;
        while (at_rank > 0 && s->stall_cycles[at_rank - 1] < m->value) {
            if (at_rank < 4) {
                s->stall_cycles[at_rank] = s->stall_cycles[at_rank - 1];
                memcpy(s->stall[at_rank], s->stall[at_rank - 1], sizeof s->stall[0]);
            }
            at_rank--;
        }
        if (at_rank < 4) {
            s->stall_cycles[at_rank] = m->value;
            snprintf(s->stall[at_rank], sizeof s->stall[0], "%s", reason);
        }
    }
}

void kt_ncu_summarize(const kt_ncu_kernel *k, kt_ncu_summary *s) {
    static const char *const dram[] = {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                       "dram__throughput.avg.pct_of_peak_sustained_elapsed", NULL};
    static const char *const l2[] = {"lts__throughput.avg.pct_of_peak_sustained_elapsed", NULL};
    static const char *const sm[] = {"sm__throughput.avg.pct_of_peak_sustained_elapsed", NULL};
    static const char *const occ[] = {"sm__warps_active.avg.pct_of_peak_sustained_active", NULL};
    static const char *const theo[] = {"sm__maximum_warps_per_active_cycle_pct", NULL};
    memset(s, 0, sizeof *s);
    s->duration_us = scaled(find(k, "gpu__time_duration.sum"));
    s->dram_pct = first_of(k, dram);
    s->l2_pct = first_of(k, l2);
    s->sm_pct = first_of(k, sm);
    s->dram_bytes = scaled(find(k, "dram__bytes_read.sum")) + scaled(find(k, "dram__bytes_write.sum"));
    s->occupancy_pct = first_of(k, occ);
    s->theoretical_pct = first_of(k, theo);
    s->registers = kt_ncu_value(k, "launch__registers_per_thread");
    s->grid = kt_ncu_value(k, "launch__grid_size");
    s->block = kt_ncu_value(k, "launch__block_size");
    /* The tensor pipe, all its kinds, averaged over the SMs; else the busiest of its kinds. */
    s->tensor_pct = kt_ncu_value(k, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active");
    if (!isnan(s->tensor_pct))
        snprintf(s->tensor_metric, sizeof s->tensor_metric,
                 "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active");
    for (int i = 0, have_all = !isnan(s->tensor_pct); i < k->n_metrics && !have_all; i++) {
        const kt_ncu_metric *m = &k->metrics[i];
        if (strstr(m->name, "pipe_tensor") && strstr(m->name, ".avg.pct_of_peak") && !isnan(m->value) &&
            (isnan(s->tensor_pct) || m->value > s->tensor_pct)) {
            s->tensor_pct = m->value;
            snprintf(s->tensor_metric, sizeof s->tensor_metric, "%s", m->name);
        }
    }
    top_stalls(k, s);
}
