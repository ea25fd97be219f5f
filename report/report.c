/* report.c — `kt report` (report.h): reads a winners database through SQLite (read-only) and
 * `kt bench --json` files through SQLite's JSON functions, and writes one HTML page of SVG
 * plots. Problems, configs and shapes are the DB's text: a config is a NAME=VALUE list, a
 * shape whatever its family wrote (sizes or categories such as LAYOUT=V4), so families this
 * code has never heard of get the same plots. Floors and roofs come from the family's
 * bytes() and flops() (when this build has the family) and the copy bandwidth and mma rate
 * a bench file measured on that device; where either is missing the page says so. */
#include "report.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SHOWN 40 /* ok variants drawn per problem (the fastest); the rest counted */
#define MAX_BASELINES 8
#define ROW_H 15.0 /* a variant's row in a problem's chart */

typedef struct device {
    long long id;
    char name[128];
    int cc, sms, driver, nvrtc;
    double copy_bps, mma_fps; /* from a bench file of this device; NAN if none */
} device;

typedef struct meas {
    long long device_id, run_id;
    char family[64], source[17], config[256], shape[128], status[16], error[512];
    long m;
    double us, min_us, max_us;
} meas;

typedef struct winner {
    long long device_id;
    char family[64], source[17], shape[128], config[256];
    long bucket, m; /* m: of the measurement that decided it */
    double us;
} winner;

typedef struct bench_row {
    char device[128], family[64], shape[128];
    long m;
    int n_base;
    char base[MAX_BASELINES][64];
    double base_us[MAX_BASELINES];
} bench_row;

/* One problem: (device, family, source hash, shape, m) and its measurements [first, first+n). */
typedef struct problem {
    int first, n;
} problem;

typedef struct report {
    sqlite3 *db;
    size_t cap_dev, cap_ms, cap_ws, cap_bench; /* the arrays' room (kt_grow) */
    device *dev;
    int n_dev;
    meas *ms;
    int n_ms;
    winner *ws;
    int n_ws;
    bench_row *bench;
    int n_bench;
    problem *probs;
    int n_probs;
    int file;                  /* the bench file being read */
    char bench_device[8][128]; /* each bench file's device and rates */
    double bench_copy[8], bench_mma[8];
    FILE *out;
    int n_plots;
} report;

/* snprintf for text that may be cut short (hover tips, captions). */
static void tip(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void tip(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ reading */

static void text_col(sqlite3_stmt *st, int i, char *out, size_t n) {
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, n, "%s", t ? (const char *)t : "");
}

static double real_col(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Runs sql, calling row(r, st) for each result row; -1 with the error set on failure. */
static int query(report *r, const char *sql, int (*row)(report *, sqlite3_stmt *)) {
    sqlite3_stmt *st;
    KT_CHECK(SQL, sqlite3_prepare_v2(r->db, sql, -1, &st, NULL));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (row(r, st)) {
            sqlite3_finalize(st);
            return -1;
        }
    sqlite3_finalize(st);
    KT_CHECK(SQL, rc);
    return 0;
}

static int device_row(report *r, sqlite3_stmt *st) {
    device *d = kt_grow(r->dev, &r->cap_dev, (size_t)r->n_dev, sizeof *d);
    if (!d) return -1;
    r->dev = d;
    d += r->n_dev++;
    d->id = sqlite3_column_int64(st, 0);
    text_col(st, 1, d->name, sizeof d->name);
    d->cc = sqlite3_column_int(st, 2);
    d->sms = sqlite3_column_int(st, 3);
    d->driver = sqlite3_column_int(st, 4);
    d->nvrtc = sqlite3_column_int(st, 5);
    d->copy_bps = d->mma_fps = NAN;
    return 0;
}

static int meas_row(report *r, sqlite3_stmt *st) {
    meas *m = kt_grow(r->ms, &r->cap_ms, (size_t)r->n_ms, sizeof *m);
    if (!m) return -1;
    r->ms = m;
    m += r->n_ms++;
    m->device_id = sqlite3_column_int64(st, 0);
    text_col(st, 1, m->family, sizeof m->family);
    text_col(st, 2, m->source, sizeof m->source);
    text_col(st, 3, m->shape, sizeof m->shape);
    m->m = (long)sqlite3_column_int64(st, 4);
    text_col(st, 5, m->config, sizeof m->config);
    text_col(st, 6, m->status, sizeof m->status);
    text_col(st, 7, m->error, sizeof m->error);
    m->us = real_col(st, 8);
    m->min_us = real_col(st, 9);
    m->max_us = real_col(st, 10);
    m->run_id = sqlite3_column_int64(st, 11);
    return 0;
}

static int winner_row(report *r, sqlite3_stmt *st) {
    winner *w = kt_grow(r->ws, &r->cap_ws, (size_t)r->n_ws, sizeof *w);
    if (!w) return -1;
    r->ws = w;
    w += r->n_ws++;
    w->device_id = sqlite3_column_int64(st, 0);
    text_col(st, 1, w->family, sizeof w->family);
    text_col(st, 2, w->source, sizeof w->source);
    text_col(st, 3, w->shape, sizeof w->shape);
    w->bucket = (long)sqlite3_column_int64(st, 4);
    text_col(st, 5, w->config, sizeof w->config);
    w->us = real_col(st, 6);
    w->m = (long)sqlite3_column_int64(st, 7);
    return 0;
}

/* A bench file's row: its problem, device rates and every "*_us" field but kt's own
 * timing, the floors and the roof, which are its baselines (kt_* ones: kt's own pipelines
 * and kernel parts, drawn but never the best baseline). */
static int bench_row_of(report *r, sqlite3_stmt *st) {
    bench_row *b = kt_grow(r->bench, &r->cap_bench, (size_t)r->n_bench, sizeof *b);
    if (!b) return -1;
    r->bench = b;
    b += r->n_bench;
    memset(b, 0, sizeof *b);
    text_col(st, 0, b->device, sizeof b->device);
    text_col(st, 1, b->family, sizeof b->family);
    text_col(st, 2, b->shape, sizeof b->shape);
    b->m = (long)sqlite3_column_int64(st, 3);
    double copy = real_col(st, 4), mma = real_col(st, 5);
    if (r->file < 8 && !r->bench_device[r->file][0]) {
        snprintf(r->bench_device[r->file], sizeof r->bench_device[0], "%s", b->device);
        r->bench_copy[r->file] = copy;
        r->bench_mma[r->file] = mma;
    }
    for (int i = 0; i < r->n_dev; i++)
        if (!strcmp(r->dev[i].name, b->device)) {
            if (isfinite(copy)) r->dev[i].copy_bps = copy;
            if (isfinite(mma)) r->dev[i].mma_fps = mma;
        }
    sqlite3_stmt *fields;
    KT_CHECK(SQL,
             sqlite3_prepare_v2(r->db,
                                "SELECT key, value FROM json_each(?1) WHERE key LIKE '%\\_us' ESCAPE '\\' AND "
                                "key NOT IN ('kt_us', 'kt_min_us', 'kt_max_us', 'floor_us', 'mma_floor_us', 'roof_us') "
                                "AND type IN ('real', 'integer')",
                                -1, &fields, NULL));
    sqlite3_bind_value(fields, 1, sqlite3_column_value(st, 6));
    while (sqlite3_step(fields) == SQLITE_ROW && b->n_base < MAX_BASELINES) {
        text_col(fields, 0, b->base[b->n_base], sizeof b->base[0]);
        b->base[b->n_base][strlen(b->base[b->n_base]) - 3] = 0; /* the name without "_us" */
        b->base_us[b->n_base++] = sqlite3_column_double(fields, 1);
    }
    sqlite3_finalize(fields);
    r->n_bench++;
    return 0;
}

/* Reads one `kt bench --json` file (an array of objects, one per case). */
static int read_bench(report *r, const char *path) {
    size_t len;
    char *text = kt_read_file(path, &len);
    if (!text) return kt_fail("cannot read bench file '%s'", path);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(r->db, "SELECT json_valid(?1) AND json_type(?1) = 'array'", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) ? SQLITE_OK : SQLITE_MISMATCH;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(
            r->db,
            "SELECT json_extract(value, '$.device'), json_extract(value, '$.family'), "
            "json_extract(value, '$.shape'), COALESCE(json_extract(value, '$.M'), "
            "json_extract(value, '$.B'), json_extract(value, '$.m')), json_extract(value, '$.copy_bytes_per_s'), "
            "json_extract(value, '$.mma_flops_per_s'), value FROM json_each(?1)",
            -1, &st, NULL);
    int failed = rc != SQLITE_OK;
    if (!failed) {
        sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
        while (!failed && (rc = sqlite3_step(st)) == SQLITE_ROW) failed = bench_row_of(r, st);
        failed = failed || rc != SQLITE_DONE;
    }
    sqlite3_finalize(st);
    free(text);
    return failed ? kt_fail("bench file '%s' is not the JSON array kt bench --json writes", path) : 0;
}

/* Compares texts with their digit runs as numbers ("N=512" before "N=4096"). */
static int natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            char *ea, *eb;
            double x = strtod(a, &ea), y = strtod(b, &eb);
            if (x != y) return x < y ? -1 : 1;
            a = ea;
            b = eb;
            continue;
        }
        if (*a != *b) return (unsigned char)*a - (unsigned char)*b;
        a++, b++;
    }
    return (unsigned char)*a - (unsigned char)*b;
}

/* Problem order, then ok before failed, then fastest first. */
static int meas_cmp(const void *pa, const void *pb) {
    const meas *a = pa, *b = pb;
    int c;
    if (a->device_id != b->device_id) return a->device_id < b->device_id ? -1 : 1;
    if ((c = strcmp(a->family, b->family)) || (c = strcmp(a->source, b->source)) ||
        (c = natural_cmp(a->shape, b->shape)))
        return c;
    if (a->m != b->m) return a->m < b->m ? -1 : 1;
    int ok_a = !strcmp(a->status, "ok"), ok_b = !strcmp(b->status, "ok");
    if (ok_a != ok_b) return ok_b - ok_a;
    return a->us < b->us ? -1 : a->us > b->us;
}

static int winner_cmp(const void *pa, const void *pb) {
    const winner *a = pa, *b = pb;
    int c;
    if (a->device_id != b->device_id) return a->device_id < b->device_id ? -1 : 1;
    if ((c = strcmp(a->family, b->family)) || (c = strcmp(a->source, b->source)) ||
        (c = natural_cmp(a->shape, b->shape)))
        return c;
    return (a->bucket > b->bucket) - (a->bucket < b->bucket);
}

static int same_problem(const meas *a, const meas *b) {
    return a->device_id == b->device_id && !strcmp(a->family, b->family) && !strcmp(a->source, b->source) &&
           !strcmp(a->shape, b->shape) && a->m == b->m;
}

static int load(report *r, const char *const *bench, int n_bench) {
    if (query(r, "SELECT id, name, cc, sm_count, driver_version, nvrtc_version FROM devices ORDER BY id", device_row) ||
        query(r,
              "SELECT device_id, family, source_hash, shape, m, config, status, error, median_us, min_us, max_us, "
              "run_id FROM measurements",
              meas_row) ||
        query(r,
              "SELECT w.device_id, w.family, w.source_hash, w.shape, w.m_bucket, w.config, w.median_us, "
              "COALESCE(m.m, w.m_bucket) FROM winners w LEFT JOIN measurements m ON m.id = w.measurement_id",
              winner_row))
        return -1;
    for (r->file = 0; r->file < n_bench; r->file++)
        if (read_bench(r, bench[r->file])) return -1;
    if (r->n_ms) qsort(r->ms, (size_t)r->n_ms, sizeof *r->ms, meas_cmp);
    if (r->n_ws) qsort(r->ws, (size_t)r->n_ws, sizeof *r->ws, winner_cmp);
    if (!(r->probs = calloc((size_t)r->n_ms + 1, sizeof *r->probs))) return kt_fail("out of memory");
    for (int i = 0; i < r->n_ms; i++) {
        if (!i || !same_problem(&r->ms[i - 1], &r->ms[i])) r->probs[r->n_probs++].first = i;
        r->probs[r->n_probs - 1].n++;
    }
    return 0;
}

/* --------------------------------------------------------- floors and roofs */

static const device *device_of(const report *r, long long id) {
    for (int i = 0; i < r->n_dev; i++)
        if (r->dev[i].id == id) return &r->dev[i];
    return NULL;
}

/* A problem's floor (bytes / copy bandwidth) and roof (max of the floor and flops / mma
 * rate), NAN where unknown, with why in *why. */
typedef struct bound {
    double bytes, flops, floor_us, roof_us;
    char why[200];
} bound;

static void bound_of(const report *r, long long device_id, const char *family, const char *shape, long m, bound *b) {
    memset(b, 0, sizeof *b);
    b->bytes = b->flops = b->floor_us = b->roof_us = NAN;
    const kt_family *f = NULL;
    for (int i = 0; i < kt_family_count(); i++)
        if (!strcmp(kt_family_at(i)->name, family)) f = kt_family_at(i);
    kt_problem p;
    if (!f) {
        tip(b->why, sizeof b->why, "no floor or roof: this build of kt has no family %s (its bytes() and flops())",
            family);
        return;
    }
    if (kt_parse_shape(f, shape, &p)) {
        tip(b->why, sizeof b->why, "no floor or roof: this build's %s does not read the shape %s", family, shape);
        return;
    }
    p.m = m;
    b->bytes = f->bytes(&p);
    b->flops = f->flops ? f->flops(&p) : NAN;
    const device *d = device_of(r, device_id);
    if (!d || !isfinite(d->copy_bps)) {
        tip(b->why, sizeof b->why,
            "no floor: no copy bandwidth recorded for %s (give kt report a kt bench --json "
            "file of that device with --bench)",
            d ? d->name : "this device");
        return;
    }
    b->floor_us = b->bytes / d->copy_bps * 1e6;
    double mma_us = b->flops / d->mma_fps * 1e6;
    b->roof_us = isfinite(mma_us) && mma_us > b->floor_us ? mma_us : b->floor_us;
}

/* The bench row of a problem, or NULL. */
static const bench_row *bench_of(const report *r, const device *d, const char *family, const char *shape, long m) {
    for (int i = 0; i < r->n_bench; i++) {
        const bench_row *b = &r->bench[i];
        if (b->m == m && !strcmp(b->family, family) && !strcmp(b->shape, shape) && (!d || !strcmp(b->device, d->name)))
            return b;
    }
    return NULL;
}

/* The winner serving problem (shape, m): the smallest bucket at or above m. */
static const winner *winner_of(const report *r, const meas *key) {
    const winner *best = NULL;
    for (int i = 0; i < r->n_ws; i++) {
        const winner *w = &r->ws[i];
        if (w->device_id == key->device_id && !strcmp(w->family, key->family) && !strcmp(w->source, key->source) &&
            !strcmp(w->shape, key->shape) && w->bucket >= key->m && (!best || w->bucket < best->bucket))
            best = w;
    }
    return best;
}

/* ------------------------------------------------------------------ plots */

static void cell(FILE *out, const char *s) {
    fprintf(out, "<td>");
    kt_html_escape(out, s);
    fprintf(out, "</td>");
}

/* "NAME=VALUE,..." as pairs (at most 32). */
typedef struct params {
    int n;
    char name[32][48], value[32][48];
} params;

static void split_config(const char *cfg, params *p) {
    p->n = 0;
    while (*cfg && p->n < 32) {
        size_t len = strcspn(cfg, ","), eq = strcspn(cfg, "=");
        if (eq > len) eq = len;
        snprintf(p->name[p->n], sizeof p->name[0], "%.*s", (int)eq, cfg);
        snprintf(p->value[p->n], sizeof p->value[0], "%.*s", eq < len ? (int)(len - eq - 1) : 0, cfg + eq + 1);
        p->n++;
        cfg += len + (cfg[len] == ',');
    }
}

/* Appends "NAME=VALUE" to out (comma-separated). */
static void append_pair(char *out, size_t n, const char *name, const char *value) {
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%s%s=%s", len ? "," : "", name, value);
}

/* Labels for configs[n]: each config's params that differ among them; *common gets those
 * that do not. */
static void config_labels(const meas *const *rows, int n, char (*labels)[256], char *common, size_t common_n) {
    params first, p;
    common[0] = 0;
    if (n) split_config(rows[0]->config, &first);
    int same[32];
    for (int k = 0; n && k < first.n; k++) {
        same[k] = 1;
        for (int i = 1; i < n && same[k]; i++) {
            split_config(rows[i]->config, &p);
            same[k] = k < p.n && !strcmp(p.name[k], first.name[k]) && !strcmp(p.value[k], first.value[k]);
        }
        if (same[k]) append_pair(common, common_n, first.name[k], first.value[k]);
    }
    for (int i = 0; i < n; i++) {
        split_config(rows[i]->config, &p);
        labels[i][0] = 0;
        for (int k = 0; k < p.n; k++)
            if (k >= first.n || !same[k] || strcmp(p.name[k], first.name[k]))
                append_pair(labels[i], 256, p.name[k], p.value[k]);
        if (!labels[i][0]) snprintf(labels[i], 256, "%s", n == 1 ? "(the only config)" : "(same)");
    }
}

/* A vertical marker line at time us across the frame (floor, roof). */
static void vline(kt_plot *p, double us, const char *color, const char *label) {
    if (!isfinite(us) || us > p->x.hi) return;
    double x = kt_plot_px(p, us);
    fprintf(p->out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"4 3\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" font-size=\"10\">%s %.3g us</text>\n",
            x, p->top, x, p->bottom, color, x + 3, p->top - 3, color, label, us);
}

/* Problem pb: each measured variant's time (fastest MAX_SHOWN of the ok ones, then every
 * failure with its reason), the winner highlighted, floor and roof as lines. */
static int plot_problem(report *r, const problem *pb) {
    const meas *key = &r->ms[pb->first];
    const meas **rows = malloc(sizeof *rows * (size_t)pb->n);
    char(*labels)[256] = malloc(256 * (size_t)pb->n), common[1024], title[512], t[1024];
    const char **names = malloc(sizeof *names * (size_t)pb->n);
    if (!rows || !labels || !names) {
        free(rows), free(labels), free(names);
        return kt_fail("out of memory");
    }
    int n_ok = 0, n = 0;
    for (int i = 0; i < pb->n; i++) n_ok += !strcmp(r->ms[pb->first + i].status, "ok");
    for (int i = 0; i < pb->n; i++) {
        const meas *m = &r->ms[pb->first + i];
        int ok = !strcmp(m->status, "ok");
        if (!ok || i < MAX_SHOWN) rows[n++] = m; /* ok rows come first, fastest first */
    }
    config_labels(rows, n, labels, common, sizeof common);
    size_t widest = 0;
    for (int i = 0; i < n; i++) {
        names[i] = labels[i];
        if (strlen(labels[i]) > widest) widest = strlen(labels[i]);
    }
    const winner *w = winner_of(r, key);
    const device *d = device_of(r, key->device_id);
    bound b;
    bound_of(r, key->device_id, key->family, key->shape, key->m, &b);
    kt_plot p = {0};
    p.y.names = names;
    p.y.n_names = n;
    p.x.label = "median time per run (us); whiskers: fastest and slowest replay";
    for (int i = 0; i < n; i++) kt_axis_include(&p.x, rows[i]->max_us);
    kt_axis_include(&p.x, 0);
    kt_axis_pad(&p.x);
    tip(title, sizeof title, "%s %s M=%ld: %d variants measured, %d failed", key->family, key->shape, key->m, pb->n,
        pb->n - n_ok);
    double left = 16 + 6.1 * (double)(widest < 12 ? 12 : widest > 90 ? 90 : widest);
    fprintf(r->out, "<figure>\n");
    kt_plot_begin(&p, r->out, "variants", title, 1040, 46 + 50 + ROW_H * n, left, 50);
    kt_plot_axes(&p);
    for (int i = 0; i < n; i++) {
        const meas *m = rows[i];
        double y = kt_plot_py(&p, i);
        if (strcmp(m->status, "ok")) {
            tip(t, sizeof t, "%s: %s", m->status, m->error);
            fprintf(r->out,
                    "<g class=\"failed\"><path d=\"M%.1f %.1fl7 7m0 -7l-7 7\" stroke=\"#c00\" stroke-width=\"2\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c00\" font-size=\"10\">",
                    p.left + 4, y - 3.5, p.left + 16, y + 3.5);
            kt_html_escape(r->out, t);
            fprintf(r->out, "</text><title>");
            kt_html_escape(r->out, m->config);
            fprintf(r->out, "</title></g>\n");
            continue;
        }
        int wins = w && !strcmp(w->config, m->config);
        double x0 = kt_plot_px(&p, 0), x1 = kt_plot_px(&p, m->us);
        fprintf(r->out, "<g><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>", x0,
                y - ROW_H / 2 + 2, x1 - x0, ROW_H - 4, wins ? "#ff7f0e" : "#7aa6d6");
        fprintf(r->out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>",
                kt_plot_px(&p, m->min_us), y, kt_plot_px(&p, m->max_us), y);
        fprintf(r->out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\">%.3g%s</text><title>",
                kt_plot_px(&p, m->max_us) + 4, y + 3, m->us, wins ? " (winner)" : "");
        tip(t, sizeof t, "%s: median %.4g us (min %.4g, max %.4g)", m->config, m->us, m->min_us, m->max_us);
        kt_html_escape(r->out, t);
        fprintf(r->out, "</title></g>\n");
    }
    vline(&p, b.floor_us, "#2ca02c", "floor");
    if (b.roof_us > b.floor_us) vline(&p, b.roof_us, "#9467bd", "roof");
    kt_plot_end(&p);
    r->n_plots++;
    fprintf(r->out, "<figcaption>");
    tip(t, sizeof t, "On %s, source %s. ", d ? d->name : "?", key->source);
    kt_html_escape(r->out, t);
    if (w) {
        tip(t, sizeof t, "Winner (orange; M bucket %ld, re-timed): %.4g us. ", w->bucket, w->us);
        kt_html_escape(r->out, t);
    } else {
        fprintf(r->out, "No winner for this problem. ");
    }
    if (n_ok > MAX_SHOWN) fprintf(r->out, "The fastest %d of %d ok variants are drawn. ", MAX_SHOWN, n_ok);
    if (common[0]) {
        fprintf(r->out, "Common to every row: <code>");
        kt_html_escape(r->out, common);
        fprintf(r->out, "</code>. ");
    }
    kt_html_escape(r->out, b.why);
    fprintf(r->out, "</figcaption>\n</figure>\n");
    free(rows);
    free(labels);
    free(names);
    return 0;
}

/* The distinct shapes of winners ws[n] in order; *idx[i] is ws[i]'s. Returns how many. */
static int shapes_of(const winner *ws, int n, const char **shapes, int *idx) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < k && strcmp(shapes[j], ws[i].shape)) j++;
        if (j == k) shapes[k++] = ws[i].shape;
        idx[i] = j;
    }
    return k;
}

/* The baselines the bench files have for winners ws[n], by name, in first-seen order. */
static int baselines_of(const report *r, const device *d, const winner *ws, int n, const char **names) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        const bench_row *b = bench_of(r, d, ws[i].family, ws[i].shape, ws[i].m);
        for (int j = 0; b && j < b->n_base; j++) {
            int s = 0;
            while (s < k && strcmp(names[s], b->base[j])) s++;
            if (s == k && k < MAX_BASELINES) names[k++] = b->base[j];
        }
    }
    return k;
}

static double baseline_us(const bench_row *b, const char *name) {
    for (int j = 0; b && j < b->n_base; j++)
        if (!strcmp(b->base[j], name)) return b->base_us[j];
    return NAN;
}

static void caption(FILE *out, const char *text) {
    fprintf(out, "<figcaption>");
    kt_html_escape(out, text);
    fprintf(out, "</figcaption>\n</figure>\n");
}

/* Winners ws[n] of one family: kt's time beside the floor, the roof and each baseline. */
static void plot_winners(report *r, const winner *ws, int n) {
    const device *d = device_of(r, ws[0].device_id);
    const char *names[256], *base[MAX_BASELINES];
    char labels[256][160], title[256];
    int nb = baselines_of(r, d, ws, n, base), unbound = 0;
    kt_plot p = {0};
    p.y.log = 1;
    p.y.label = "time (us)";
    for (int i = 0; i < n && i < 256; i++) {
        tip(labels[i], sizeof labels[i], "%s M=%ld", ws[i].shape, ws[i].m);
        names[i] = labels[i];
        bound b;
        bound_of(r, ws[i].device_id, ws[i].family, ws[i].shape, ws[i].m, &b);
        unbound += !isfinite(b.floor_us);
        kt_axis_include(&p.y, ws[i].us);
        kt_axis_include(&p.y, b.floor_us);
        kt_axis_include(&p.y, b.roof_us);
        for (int j = 0; j < nb; j++)
            kt_axis_include(&p.y, baseline_us(bench_of(r, d, ws[i].family, ws[i].shape, ws[i].m), base[j]));
    }
    p.x.names = names;
    p.x.n_names = n < 256 ? n : 256;
    kt_axis_pad(&p.x);
    kt_axis_pad(&p.y);
    tip(title, sizeof title, "%s: tuned winners against floor, roof and baselines", ws[0].family);
    fprintf(r->out, "<figure>\n");
    size_t widest = 0;
    for (int i = 0; i < p.x.n_names; i++) widest = strlen(labels[i]) > widest ? strlen(labels[i]) : widest;
    double bottom = 24 + 6.0 * 0.57 * (double)widest; /* labels turned 35 degrees */
    kt_plot_begin(&p, r->out, "winners", title, 1040, 300 + bottom, 70, bottom);
    const char *leg[3 + MAX_BASELINES], *col[3 + MAX_BASELINES];
    int shp[3 + MAX_BASELINES], nl = 0;
    leg[nl] = "kt winner", col[nl] = kt_plot_color(0), shp[nl++] = KT_DOT;
    leg[nl] = "floor", col[nl] = "#2ca02c", shp[nl++] = KT_BAR;
    leg[nl] = "roof", col[nl] = "#9467bd", shp[nl++] = KT_BAR;
    for (int j = 0; j < nb; j++) leg[nl] = base[j], col[nl] = kt_plot_color(3 + j), shp[nl++] = KT_DIAMOND;
    kt_plot_legend(&p, leg, col, shp, nl);
    kt_plot_axes(&p);
    for (int i = 0; i < p.x.n_names; i++) {
        char t[512];
        bound b;
        bound_of(r, ws[i].device_id, ws[i].family, ws[i].shape, ws[i].m, &b);
        const bench_row *br = bench_of(r, d, ws[i].family, ws[i].shape, ws[i].m);
        tip(t, sizeof t, "%s floor %.4g us", labels[i], b.floor_us);
        kt_plot_marker(&p, i, b.floor_us, KT_BAR, "#2ca02c", t);
        tip(t, sizeof t, "%s roof %.4g us", labels[i], b.roof_us);
        if (b.roof_us > b.floor_us) kt_plot_marker(&p, i, b.roof_us, KT_BAR, "#9467bd", t);
        for (int j = 0; j < nb; j++) {
            tip(t, sizeof t, "%s %s %.4g us", labels[i], base[j], baseline_us(br, base[j]));
            kt_plot_marker(&p, i, baseline_us(br, base[j]), KT_DIAMOND, kt_plot_color(3 + j), t);
        }
        tip(t, sizeof t, "%s kt %.4g us (%s)", labels[i], ws[i].us, ws[i].config);
        kt_plot_marker(&p, i, ws[i].us, KT_DOT, kt_plot_color(0), t);
    }
    kt_plot_end(&p);
    r->n_plots++;
    char text[512];
    tip(text, sizeof text, "Baselines from %d bench file row(s)%s. %s", r->n_bench, nb ? "" : " (none for this family)",
        unbound ? "Floor and roof missing where no copy bandwidth is recorded for the device or the family is not "
                  "in this build."
                : "Floor: bytes() / copy bandwidth; roof: the larger of the floor and flops() / "
                  "mma rate, both measured by kt bench on this device.");
    caption(r->out, text);
}

/* A number cell ("-" when unknown). */
static void num_cell(FILE *out, const char *fmt, double v) {
    char s[64];
    if (isfinite(v))
        tip(s, sizeof s, fmt, v);
    else
        snprintf(s, sizeof s, "-");
    cell(out, s);
}

/* Winners ws[n] as a table: achieved bandwidth and rate, against floor, roof, baselines. */
static void winners_table(report *r, const winner *ws, int n) {
    const device *d = device_of(r, ws[0].device_id);
    fprintf(
        r->out,
        "<table><tr><th>shape</th><th>M bucket</th><th>config</th><th>kt us</th><th>floor us</th>"
        "<th>roof us</th><th>kt / roof</th><th>TB/s of bytes()</th><th>TFLOP/s of flops()</th><th>best baseline</th>"
        "<th>baseline / kt</th></tr>\n");
    for (int i = 0; i < n; i++) {
        bound b;
        bound_of(r, ws[i].device_id, ws[i].family, ws[i].shape, ws[i].m, &b);
        const bench_row *br = bench_of(r, d, ws[i].family, ws[i].shape, ws[i].m);
        int best = -1;
        for (int j = 0; br && j < br->n_base; j++) /* kt_* columns are kt's own pipelines, not baselines */
            if (strncmp(br->base[j], "kt_", 3) && (best < 0 || br->base_us[j] < br->base_us[best])) best = j;
        char s[128];
        fprintf(r->out, "<tr>");
        cell(r->out, ws[i].shape);
        tip(s, sizeof s, "%ld", ws[i].bucket);
        cell(r->out, s);
        fprintf(r->out, "<td class=\"mono\">");
        kt_html_escape(r->out, ws[i].config);
        fprintf(r->out, "</td>");
        num_cell(r->out, "%.3f", ws[i].us);
        num_cell(r->out, "%.3g", b.floor_us);
        num_cell(r->out, "%.3g", b.roof_us);
        num_cell(r->out, "%.2fx", ws[i].us / b.roof_us);
        num_cell(r->out, "%.3f", b.bytes / ws[i].us / 1e6);
        num_cell(r->out, "%.3g", b.flops / ws[i].us / 1e6);
        if (best >= 0) tip(s, sizeof s, "%s %.3f us", br->base[best], br->base_us[best]);
        cell(r->out, best >= 0 ? s : "-");
        num_cell(r->out, "%.2fx", best >= 0 ? br->base_us[best] / ws[i].us : NAN);
        fprintf(r->out, "</tr>\n");
    }
    fprintf(r->out, "</table>\n");
}

/* Winners ws[n] as a roofline: flop/s achieved against flops per byte, under the
 * bandwidth slope and the mma rate; bench baselines at the same intensity. 0 if drawn, 1 if
 * the family gives no flops here (why in *why). */
static int plot_roofline(report *r, const winner *ws, int n, char *why, size_t why_n) {
    const device *d = device_of(r, ws[0].device_id);
    const char *shapes[256], *base[MAX_BASELINES];
    int idx[256], n_sh = shapes_of(ws, n < 256 ? n : 256, shapes, idx), nb = baselines_of(r, d, ws, n, base);
    double ai[256], rate[256];
    kt_plot p = {0};
    p.x.log = p.y.log = 1;
    p.x.label = "arithmetic intensity: flops() / bytes() (flop per byte)";
    p.y.label = "achieved TFLOP/s (flops() / time)";
    int drawn = 0;
    for (int i = 0; i < n && i < 256; i++) {
        bound b;
        bound_of(r, ws[i].device_id, ws[i].family, ws[i].shape, ws[i].m, &b);
        ai[i] = b.flops / b.bytes;
        rate[i] = b.flops / ws[i].us / 1e6;
        if (!(b.flops > 0)) {
            tip(why, why_n, "No roofline for %s: %s", ws[i].family,
                b.why[0] && isnan(b.bytes) ? b.why : "the family declares no flops()");
            continue;
        }
        drawn++;
        kt_axis_include(&p.x, ai[i]);
        kt_axis_include(&p.y, rate[i]);
        for (int j = 0; j < nb; j++)
            kt_axis_include(&p.y,
                            b.flops / baseline_us(bench_of(r, d, ws[i].family, ws[i].shape, ws[i].m), base[j]) / 1e6);
    }
    if (!drawn) return 1;
    int roof = d && isfinite(d->copy_bps);
    kt_axis_pad(&p.x);
    if (roof) kt_axis_include(&p.y, d->copy_bps * p.x.lo / 1e12);
    if (roof) kt_axis_include(&p.y, fmin(d->copy_bps * p.x.hi, isfinite(d->mma_fps) ? d->mma_fps : INFINITY) / 1e12);
    if (roof && isfinite(d->mma_fps) && d->mma_fps / d->copy_bps < p.x.hi)
        kt_axis_include(&p.y, d->mma_fps / 1e12 * 1.1);
    kt_axis_pad(&p.y);
    char title[256], t[512];
    tip(title, sizeof title, "%s: roofline of the winners on %s", ws[0].family, d ? d->name : "?");
    fprintf(r->out, "<figure>\n");
    kt_plot_begin(&p, r->out, "roofline", title, 1040, 420, 70, 50);
    const char *leg[256 + MAX_BASELINES], *col[256 + MAX_BASELINES];
    int shp[256 + MAX_BASELINES], nl = 0;
    for (int s = 0; s < n_sh && nl < 16; s++) leg[nl] = shapes[s], col[nl] = kt_plot_color(s), shp[nl++] = KT_DOT;
    for (int j = 0; j < nb; j++) leg[nl] = base[j], col[nl] = kt_plot_color(3 + j), shp[nl++] = KT_DIAMOND;
    kt_plot_legend(&p, leg, col, shp, nl);
    kt_plot_axes(&p);
    if (roof) { /* the slope bytes/s x intensity, flat at the mma rate past the ridge */
        double peak = isfinite(d->mma_fps) ? d->mma_fps : INFINITY, ridge = peak / d->copy_bps;
        double x[3] = {p.x.lo, ridge < p.x.hi ? ridge : p.x.hi, p.x.hi};
        double y[3] = {d->copy_bps * x[0] / 1e12, d->copy_bps * x[1] / 1e12, fmin(d->copy_bps * x[2], peak) / 1e12};
        tip(t, sizeof t, "roof: %.3g TB/s copy bandwidth, %.3g TFLOP/s mma", d->copy_bps / 1e12, peak / 1e12);
        kt_plot_line(&p, x, y, 3, "#444", 1, t);
    }
    for (int i = 0; i < n && i < 256; i++) {
        if (!isfinite(ai[i]) || ai[i] <= 0) continue;
        const bench_row *br = bench_of(r, d, ws[i].family, ws[i].shape, ws[i].m);
        double flops = rate[i] * ws[i].us * 1e6;
        for (int j = 0; j < nb; j++) {
            double us = baseline_us(br, base[j]);
            tip(t, sizeof t, "%s M=%ld %s: %.4g us, %.3g TFLOP/s", ws[i].shape, ws[i].m, base[j], us, flops / us / 1e6);
            kt_plot_marker(&p, ai[i], flops / us / 1e6, KT_DIAMOND, kt_plot_color(3 + j), t);
        }
        tip(t, sizeof t, "%s M=%ld kt: %.4g us, %.3g TFLOP/s, %.3g TB/s of bytes()", ws[i].shape, ws[i].m, ws[i].us,
            rate[i], flops / ai[i] / ws[i].us / 1e6);
        kt_plot_marker(&p, ai[i], rate[i], KT_DOT, kt_plot_color(idx[i]), t);
    }
    kt_plot_end(&p);
    r->n_plots++;
    if (roof)
        tip(t, sizeof t,
            "Roof: %.3g TB/s (copy) and %.3g TFLOP/s (e4m3 mma), measured by kt bench on this device. "
            "A point's distance under the roof is its distance from the floor.",
            d->copy_bps / 1e12, d->mma_fps / 1e12);
    else
        tip(t, sizeof t,
            "No roof drawn: no copy bandwidth recorded for this device (pass a kt bench --json file of "
            "it with --bench).");
    caption(r->out, t);
    return 0;
}

/* Winners ws[n] of one family: time over the batch buckets, a line per shape, its floor dashed. */
static void plot_buckets(report *r, const winner *ws, int n) {
    const char *shapes[256];
    int idx[256], n_sh = shapes_of(ws, n < 256 ? n : 256, shapes, idx);
    kt_plot p = {0};
    p.x.log = 1;
    p.x.label = "batch bucket (upper bound of M)";
    p.y.label = "winner's time (us)";
    for (int i = 0; i < n && i < 256; i++) {
        bound b;
        bound_of(r, ws[i].device_id, ws[i].family, ws[i].shape, ws[i].m, &b);
        kt_axis_include(&p.x, (double)ws[i].bucket);
        kt_axis_include(&p.y, ws[i].us);
        kt_axis_include(&p.y, b.floor_us);
    }
    kt_axis_include(&p.y, 0);
    kt_axis_pad(&p.x);
    kt_axis_pad(&p.y);
    char title[256];
    tip(title, sizeof title, "%s: the winner's time over the batch buckets", ws[0].family);
    fprintf(r->out, "<figure>\n");
    kt_plot_begin(&p, r->out, "buckets", title, 1040, 360, 70, 50);
    const char *col[16];
    int shp[16];
    for (int s = 0; s < n_sh && s < 16; s++) col[s] = kt_plot_color(s), shp[s] = KT_DOT;
    kt_plot_legend(&p, shapes, col, shp, n_sh < 16 ? n_sh : 16);
    kt_plot_axes(&p);
    for (int s = 0; s < n_sh; s++) {
        double x[256], y[256], fl[256];
        int k = 0;
        for (int i = 0; i < n && i < 256; i++) {
            if (idx[i] != s) continue;
            bound b;
            bound_of(r, ws[i].device_id, ws[i].family, ws[i].shape, ws[i].m, &b);
            x[k] = (double)ws[i].bucket, y[k] = ws[i].us, fl[k++] = b.floor_us;
        }
        char t[256];
        tip(t, sizeof t, "%s floor", shapes[s]);
        kt_plot_line(&p, x, fl, k, kt_plot_color(s), 1, t);
        kt_plot_line(&p, x, y, k, kt_plot_color(s), 0, shapes[s]);
        for (int i = 0; i < k; i++) {
            tip(t, sizeof t, "%s M<=%.0f: %.4g us (floor %.3g us)", shapes[s], x[i], y[i], fl[i]);
            kt_plot_marker(&p, x[i], y[i], KT_DOT, kt_plot_color(s), t);
        }
    }
    kt_plot_end(&p);
    r->n_plots++;
    caption(r->out,
            "Solid: the tuned winner of each M bucket; dashed: its floor (bytes() / copy bandwidth), where known.");
}

/* ------------------------------------------------------------------ the page */

static const char style[] =
    "body{font-family:sans-serif;max-width:1080px;margin:24px auto;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:36px}"
    "figure{margin:18px 0}figcaption{font-size:12px;color:#444;max-width:1040px}"
    "table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;"
    "text-align:left;vertical-align:top}th{background:#f0f0f0}code,.mono{font-family:monospace;font-size:11px}"
    "td.mono{word-break:break-all;max-width:420px}"
    "nav a{margin-right:14px}";

static int run_row(report *r, sqlite3_stmt *st) {
    char s[4096];
    fprintf(r->out, "<tr>");
    for (int i = 0; i < 2; i++) text_col(st, i, s, sizeof s), cell(r->out, s);
    tip(s, sizeof s, "%s (sm_%d, %d SMs)", (const char *)sqlite3_column_text(st, 4), sqlite3_column_int(st, 5),
        sqlite3_column_int(st, 6));
    cell(r->out, s);
    tip(s, sizeof s, "%d.%d", sqlite3_column_int(st, 7) / 1000, sqlite3_column_int(st, 7) % 1000 / 10);
    cell(r->out, s);
    tip(s, sizeof s, "%d.%d", sqlite3_column_int(st, 8) / 1000, sqlite3_column_int(st, 8) % 1000 / 10);
    cell(r->out, s);
    text_col(st, 2, s, sizeof s), cell(r->out, s);
    text_col(st, 9, s, sizeof s), cell(r->out, s);
    text_col(st, 10, s, sizeof s), cell(r->out, s);
    fprintf(r->out, "<td class=\"mono\">");
    text_col(st, 3, s, sizeof s);
    kt_html_escape(r->out, s);
    fprintf(r->out, "</td></tr>\n");
    return 0;
}

/* Every run: when, on which device, driver and NVRTC, kt's commit, the source hashes it
 * measured, how much, and its command; then the bench files read. */
static int provenance(report *r, const char *const *bench, int n_bench) {
    fprintf(r->out,
            "<h2 id=\"provenance\">Provenance</h2>\n<table><tr><th>run</th><th>started (UTC)</th><th>device</th>"
            "<th>driver</th><th>NVRTC</th><th>kt commit</th><th>family: source hash</th><th>rows</th><th>command</th>"
            "</tr>\n");
    if (query(r,
              "SELECT r.id, r.started_at, r.kt_commit, r.cmdline, d.name, d.cc, d.sm_count, d.driver_version, "
              "d.nvrtc_version, (SELECT group_concat(x, ' ') FROM (SELECT DISTINCT family || ': ' || source_hash AS x "
              "FROM measurements WHERE run_id = r.id)), (SELECT count(*) FROM measurements WHERE run_id = r.id) "
              "FROM runs r JOIN devices d ON d.id = r.device_id ORDER BY r.id",
              run_row))
        return -1;
    fprintf(r->out, "</table>\n");
    if (!n_bench) {
        fprintf(r->out, "<p>No bench file given: floors, roofs and baselines need <code>kt bench --json</code> output "
                        "(<code>kt report --bench FILE</code>).</p>\n");
        return 0;
    }
    fprintf(r->out,
            "<table><tr><th>bench file</th><th>device</th><th>copy bandwidth</th><th>e4m3 mma rate</th></tr>\n");
    for (int i = 0; i < n_bench && i < 8; i++) {
        fprintf(r->out, "<tr>");
        cell(r->out, bench[i]);
        cell(r->out, r->bench_device[i][0] ? r->bench_device[i] : "(no rows)");
        num_cell(r->out, "%.3f TB/s", r->bench_copy[i] / 1e12);
        num_cell(r->out, "%.0f TFLOP/s", r->bench_mma[i] / 1e12);
        fprintf(r->out, "</tr>\n");
    }
    fprintf(r->out, "</table>\n");
    return 0;
}

static int same_group(const meas *m, const winner *w) {
    return m->device_id == w->device_id && !strcmp(m->family, w->family) && !strcmp(m->source, w->source);
}

/* One family's section (problems [p0, p1) of one device and source hash). */
static int family_section(report *r, int p0, int p1) {
    const meas *key = &r->ms[r->probs[p0].first];
    const device *d = device_of(r, key->device_id);
    int w0 = 0, w1;
    while (w0 < r->n_ws && !same_group(key, &r->ws[w0])) w0++;
    for (w1 = w0; w1 < r->n_ws && same_group(key, &r->ws[w1]);) w1++;
    long rows = 0, failed = 0;
    for (int i = p0; i < p1; i++)
        for (int j = 0; j < r->probs[i].n; j++) rows++, failed += !!strcmp(r->ms[r->probs[i].first + j].status, "ok");
    fprintf(r->out, "<h2 id=\"");
    kt_html_escape(r->out, key->family);
    fprintf(r->out, "\">");
    kt_html_escape(r->out, key->family);
    fprintf(r->out, "</h2>\n<p>");
    char s[512];
    tip(s, sizeof s, "%d problem%s, %ld measurement%s (%ld failed), %d winner%s on %s; source hash %s.", p1 - p0,
        p1 - p0 == 1 ? "" : "s", rows, rows == 1 ? "" : "s", failed, w1 - w0, w1 - w0 == 1 ? "" : "s",
        d ? d->name : "?", key->source);
    kt_html_escape(r->out, s);
    fprintf(r->out, "</p>\n");
    if (w1 > w0) {
        plot_winners(r, r->ws + w0, w1 - w0);
        winners_table(r, r->ws + w0, w1 - w0);
        char why[256] = "";
        if (plot_roofline(r, r->ws + w0, w1 - w0, why, sizeof why)) {
            fprintf(r->out, "<p>");
            kt_html_escape(r->out, why);
            fprintf(r->out, "</p>\n");
        }
        plot_buckets(r, r->ws + w0, w1 - w0);
    }
    for (int i = p0; i < p1; i++)
        if (plot_problem(r, &r->probs[i])) return -1;
    return 0;
}

static int page(report *r, const kt_report_options *o) {
    FILE *out = r->out;
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    fprintf(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kt report: ");
    kt_html_escape(out, o->db_path);
    fprintf(out, "</title><style>%s</style></head><body>\n<h1>kt report: ", style);
    kt_html_escape(out, o->db_path);
    fprintf(
        out,
        "</h1>\n<p>%d measurements of %d problems, %d winners. Written %s. Hover a mark for its numbers.</p>\n<nav>",
        r->n_ms, r->n_probs, r->n_ws, date);
    for (int i = 0; i < r->n_probs; i++) {
        const meas *m = &r->ms[r->probs[i].first];
        if (i && !strcmp(r->ms[r->probs[i - 1].first].family, m->family)) continue;
        fprintf(out, "<a href=\"#");
        kt_html_escape(out, m->family);
        fprintf(out, "\">");
        kt_html_escape(out, m->family);
        fprintf(out, "</a>");
    }
    fprintf(out, "<a href=\"#provenance\">provenance</a></nav>\n");
    for (int i = 0, start = 0; i <= r->n_probs; i++) {
        if (i < r->n_probs && i > start) {
            const meas *a = &r->ms[r->probs[start].first], *b = &r->ms[r->probs[i].first];
            if (a->device_id == b->device_id && !strcmp(a->family, b->family) && !strcmp(a->source, b->source))
                continue;
        }
        if (i > start && family_section(r, start, i)) return -1;
        start = i;
    }
    if (provenance(r, o->bench_json, o->n_bench_json)) return -1;
    fprintf(out, "<p class=\"mono\">");
    kt_html_escape(out, o->cmdline ? o->cmdline : "kt report");
    fprintf(out, "</p>\n</body></html>\n");
    return 0;
}

/* Opens path read-only and checks it is a kt database. */
static int open_db(const char *path, sqlite3 **db) {
    if (access(path, R_OK)) return kt_fail("cannot read database '%s': no such file", path);
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return kt_fail("cannot open '%s'", path);
    sqlite3_stmt *st;
    int ok =
        sqlite3_prepare_v2(*db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return ok ? 0 : kt_fail("'%s' is not a kt database", path);
}

int kt_report_write(const kt_report_options *o, int *n_plots) {
    report r = {0};
    char *text = NULL, path[4096];
    size_t len = 0;
    if (!o->out_dir) return kt_fail("kt report needs -o DIR");
    int rc = open_db(o->db_path, &r.db) || load(&r, o->bench_json, o->n_bench_json);
    if (!rc && !(r.out = open_memstream(&text, &len))) rc = kt_fail("out of memory");
    if (!rc) rc = page(&r, o);
    if (r.out) fclose(r.out);
    snprintf(path, sizeof path, "%s/index.html", o->out_dir);
    if (!rc) rc = kt_mkdirs(o->out_dir) || kt_write_file_atomic(path, text, len) ? -1 : 0;
    if (n_plots) *n_plots = r.n_plots;
    free(text);
    free(r.dev);
    free(r.ms);
    free(r.ws);
    free(r.bench);
    free(r.probs);
    sqlite3_close(r.db);
    return rc;
}
