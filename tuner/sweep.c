/* sweep.c — the sweep driver behind `kt tune`: for each shape it compiles the needed
 * variants once in a parallel pool (pipelined with measuring), verifies and times each
 * on every requested M, records every result as it is made, and updates the winners.
 * Already-measured (variant, shape, M) rows are skipped, so a killed sweep resumes. */
#include "tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct progress {
    long done, total;
    double start;
    int quiet;
} progress;

static void progress_show(progress *pr, const char *shape, long m, const char *config) {
    pr->done++;
    if (pr->quiet) return;
    double el = kt_now() - pr->start;
    double eta = pr->done ? el / pr->done * (pr->total - pr->done) : 0;
    fprintf(stderr, "\r[%ld/%ld] %s M=%ld %-60.60s %5.1fs elapsed, ETA %5.1fs", pr->done, pr->total, shape, m,
            config, el, eta);
    if (pr->done == pr->total) fprintf(stderr, "\n");
}

/* Measures one shape over every M of the request. */
static int sweep_shape(const kt_sweep_options *o, kt_db *db, long long device_id, long long run_id,
                       const char *source_hash, kt_problem shape, kt_config *list, int n, int arch,
                       progress *pr) {
    const kt_family *f = o->family;
    char shape_s[128];
    kt_format_shape(f, &shape, shape_s, sizeof shape_s);

    /* Which variants still need a measurement at some M (resume), and of how many. */
    kt_config *need = malloc(sizeof *need * (size_t)(n ? n : 1));
    int n_need = 0;
    for (int i = 0; i < n; i++) {
        char vid[17];
        kt_variant_id(f, &list[i], arch, vid);
        int wanted = 0, fits = 0;
        for (int j = 0; j < o->n_ms; j++) {
            kt_problem p = shape;
            p.m = o->ms[j];
            fits += f->config_fits(&list[i], &p);
            int have = f->config_fits(&list[i], &p)
                           ? kt_db_has_measurement(db, device_id, f->name, source_hash, vid, shape_s, p.m)
                           : 1;
            if (have < 0) {
                free(need);
                return -1;
            }
            wanted |= !have;
        }
        if (wanted) need[n_need++] = list[i];
        else pr->done += fits; /* all measured by an earlier, interrupted run */
    }
    kt_compile_pool *pool = kt_compile_pool_start(f, need, n_need, arch, o->compile_threads);
    kt_module *mods = calloc((size_t)(n_need ? n_need : 1), sizeof *mods);
    int rc = pool && mods ? 0 : kt_fail("out of memory");

    /* The reference kernel lives in every variant's module; the default config's serves. */
    kt_cubin ref_cubin = {0};
    kt_module ref_mod = {0};
    int have_ref = f->launch_reference && !kt_compile(f, &f->default_config, arch, &ref_cubin) &&
                   !kt_module_load(f, &f->default_config, &ref_cubin, &ref_mod);

    for (int j = 0; j < o->n_ms && !rc; j++) {
        kt_problem p = shape;
        p.m = o->ms[j];
        kt_bench *b = NULL;
        uint64_t seed = o->seed ^ kt_hash(shape_s, strlen(shape_s), (uint64_t)p.m);
        if (kt_bench_setup(f, &p, seed, have_ref ? &ref_mod : NULL, &b)) {
            rc = -1;
            kt_bench_free(b);
            break;
        }
        for (int i = 0; i < n_need && !rc; i++) {
            kt_measurement m = {0};
            m.run_id = run_id;
            m.device_id = device_id;
            m.family = f->name;
            snprintf(m.source_hash, sizeof m.source_hash, "%s", source_hash);
            kt_variant_id(f, &need[i], arch, m.variant_id);
            kt_format_config(f, &need[i], m.config, sizeof m.config);
            snprintf(m.shape, sizeof m.shape, "%s", shape_s);
            m.m = p.m;
            if (!f->config_fits(&need[i], &p)) continue;
            int have = kt_db_has_measurement(db, device_id, f->name, source_hash, m.variant_id, shape_s, p.m);
            if (have < 0) {
                rc = -1;
                break;
            }
            if (have) {
                pr->done++; /* measured by an earlier, interrupted run */
                continue;
            }
            const char *err = NULL;
            const kt_cubin *cubin = kt_compile_pool_wait(pool, i, &err);
            m.rel_err = m.median_us = m.min_us = m.max_us = NAN;
            if (!cubin) {
                m.status = KT_COMPILE_ERROR;
                snprintf(m.error, sizeof m.error, "%s", err ? err : "compile failed");
            } else {
                m.registers = cubin->report.registers;
                m.spill_bytes = cubin->report.spill_bytes;
                m.compile_ms = cubin->compile_ms;
                if (!mods[i].module && kt_module_load(f, &need[i], cubin, &mods[i])) {
                    m.status = KT_LAUNCH_ERROR;
                    snprintf(m.error, sizeof m.error, "%s", kt_error());
                } else if (kt_bench_variant(b, &mods[i], &m)) {
                    rc = -1; /* the context is lost; record what happened first */
                }
            }
            if (kt_db_add_measurement(db, &m)) rc = -1;
            progress_show(pr, shape_s, p.m, m.config);
        }
        kt_bench_free(b);
        if (kt_db_update_winner(db, device_id, f->name, source_hash, shape_s, p.m)) rc = -1;
    }
    for (int i = 0; i < n_need; i++) kt_module_unload(&mods[i]);
    if (have_ref) kt_module_unload(&ref_mod);
    kt_cubin_free(&ref_cubin);
    kt_compile_pool_free(pool);
    free(mods);
    free(need);
    return rc;
}

int kt_sweep(const kt_sweep_options *o) {
    const kt_family *f = o->family;
    char why[256];
    for (int s = 0; s < o->n_shapes; s++)
        for (int j = 0; j < o->n_ms; j++) {
            kt_problem p = o->shapes[s];
            p.m = o->ms[j];
            if (f->check_problem(&p, why, sizeof why)) return kt_fail("%s", why);
        }
    int arch = kt_gpu_arch();
    if (!kt_arch_name(arch)) return kt_fail("no JIT target for this GPU (compute capability %d)", arch);
    kt_db *db = NULL;
    if (kt_db_open(o->db_path, 0, &db)) return -1;
    kt_db_device dev;
    kt_gpu_db_device(kt_gpu_current(), &dev);
    long long device_id, run_id;
    char source_hash[17];
    kt_hex64(kt_family_source_hash(f), source_hash);
    kt_config *list = NULL;
    int rc = kt_db_device_id(db, &dev, &device_id) ||
             kt_db_run_begin(db, device_id, o->commit ? o->commit : "unknown", o->cmdline ? o->cmdline : "", &run_id);
    int n = rc ? -1 : kt_space_enumerate(f, arch, NULL, &list, NULL);
    if (n < 0) rc = -1;
    if (!rc && !strcmp(o->strategy, "random")) n = kt_space_sample(f, list, n, o->budget, o->seed);

    progress pr = {0, 0, kt_now(), o->quiet};
    for (int s = 0; s < o->n_shapes && !rc; s++)
        for (int j = 0; j < o->n_ms; j++) {
            kt_problem p = o->shapes[s];
            p.m = o->ms[j];
            for (int i = 0; i < n; i++) pr.total += f->config_fits(&list[i], &p);
        }
    for (int s = 0; s < o->n_shapes && !rc; s++)
        rc = sweep_shape(o, db, device_id, run_id, source_hash, o->shapes[s], list, n, arch, &pr);
    if (!o->quiet && pr.done != pr.total) fprintf(stderr, "\n");
    free(list);
    kt_db_close(db);
    return rc;
}
