/* test_sweep.c — CPU tests of the sweep that survives: whole sweeps of the selftest family
 * on the fake GPU (KT_FAKE_GPU=1: real NVRTC compiles, real worker processes, fake times)
 * with its planted faulting and hanging variants, on one and on two fake GPUs; the fast
 * strategy's mechanics on fp8_gemm's real pruned space (units per M within the caps, the
 * anchors' best timed between them, a planted optimum found by the local search, faults
 * in every phase); the winner rule with re-timings; the finalists a sweep re-times; and
 * kt_db_merge. The kill -9 resume and the shard + merge of whole sweeps (exhaustive and
 * fast) run through the CLI in sweep.sh. */
#include "../../tuner/tuner.h"
#include "test.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A temp folder per test (removed by done()), and one JIT cache for the whole file (removed
 * at exit) so each variant compiles once. */
typedef struct scratch {
    char dir[64];
    char db[96];
} scratch;

static char cache[64];

static void remove_cache(void) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    (void)!system(cmd);
}

static void begin(scratch *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/kt_test_sweep_XXXXXX");
    if (!mkdtemp(t->dir)) t->dir[0] = 0;
    snprintf(t->db, sizeof t->db, "%s/kt.db", t->dir);
    if (!cache[0]) {
        snprintf(cache, sizeof cache, "/tmp/kt_test_sweep_cache_%d", (int)getpid());
        atexit(remove_cache);
    }
    setenv("KT_CACHE_DIR", cache, 1);
    setenv("KT_FAKE_GPU", "1", 1);
    /* Long enough that honest fake work is never cut off on a loaded machine (a 0.2 s one
     * fired on a starved worker); the hanging variants still meet it. */
    setenv("KT_WATCHDOG_S", "2", 1);
    unsetenv("KT_FAKE_GPU_COUNT");
    unsetenv("KT_FAKE_DELAY_MS");
    unsetenv("KT_FAKE_TIME");
    unsetenv("KT_FAKE_BOWL");
}

static void done(scratch *t) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", t->dir);
    (void)!system(cmd);
    unsetenv("KT_FAKE_GPU");
    unsetenv("KT_FAKE_GPU_COUNT");
    unsetenv("KT_FAKE_TIME");
    unsetenv("KT_FAKE_BOWL");
    unsetenv("KT_WATCHDOG_S");
    unsetenv("KT_CACHE_DIR");
}

static int run_sweep(const kt_sweep_options *o, kt_sweep_report *r) {
    int rc = kt_sweep(o, r);
    if (rc) fprintf(stderr, "sweep: %s\n", kt_error());
    return rc;
}

/* The selftest sweep of N=4096 at M = 1 and 64 into db. */
static int sweep(const char *db, int max_workers, kt_sweep_report *r) {
    kt_sweep_options o = {.family = kt_family_find("selftest"),
                          .n_shapes = 1,
                          .n_ms = 2,
                          .db_path = db,
                          .strategy = "exhaustive",
                          .seed = 7,
                          .compile_threads = 2,
                          .quiet = 1,
                          .commit = "test",
                          .cmdline = "test_sweep",
                          .max_workers = max_workers};
    o.shapes[0] = (kt_problem){.n_dims = 1, .dim = {4096}};
    o.ms[0] = 1;
    o.ms[1] = 64;
    return run_sweep(&o, r);
}

/* Every (variant, M) with its status and first-pass median, in one string (for equality). */
static void rows_of(const char *db, char *out, size_t n) {
    kt_test_query(
        db,
        "SELECT group_concat(r, ';') FROM (SELECT variant_id || ' ' || shape || ' ' || m || ' ' || status || ' ' || "
        "ifnull(printf('%.4f', median_us), '-') AS r FROM measurements ORDER BY variant_id, shape, m)",
        out, n);
}

static void winners_of(const char *db, char *out, size_t n) {
    kt_test_query(db,
                  "SELECT group_concat(r, ';') FROM (SELECT shape || ' ' || m_bucket || ' ' || variant_id || ' ' || "
                  "printf('%.4f', median_us) AS r FROM winners ORDER BY shape, m_bucket)",
                  out, n);
}

KT_TEST(sweep_survives_faults_and_hangs) {
    scratch t;
    begin(&t);
    kt_sweep_report r;
    EXPECT(sweep(t.db, 0, &r) == 0);
    /* 12 variants x 2 M: 6 fault (FAULT=1), 6 hang (HANG=1 only) and all recorded; 3 ok per M */
    EXPECT(r.workers == 1 && r.measured == 24 && r.faults == 18 && r.retimed == 2 && r.already == 0);
    EXPECT(!strcmp(r.device.name, "kt fake GPU") && r.device.cc_major == 12 && r.device.sm_count == 188);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM measurements") == 24);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM measurements WHERE config LIKE '%FAULT=1%' AND status = "
                                    "'launch-error' AND error LIKE 'worker fault: killed by signal 11%'") == 12);
    EXPECT(kt_test_query_long(t.db,
                              "SELECT count(*) FROM measurements WHERE config LIKE '%FAULT=0,HANG=1' AND status = "
                              "'launch-error' AND error = 'watchdog: no answer in 2 s'") == 6);
    EXPECT(kt_test_query_long(t.db,
                              "SELECT count(*) FROM measurements WHERE config LIKE '%FAULT=0,HANG=0' AND status = "
                              "'ok' AND rel_err = 1e-3 AND min_us < median_us AND median_us < max_us") == 6);
    /* one worker: ok rows after the first fault were measured by a restarted one (units of
     * compiled variants go first, so the first variant's two units may both precede it) */
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM measurements WHERE status = 'ok' AND id > "
                                    "(SELECT min(id) FROM measurements WHERE status = 'launch-error')") >= 4);
    /* each M re-timed its three ok variants once, as one group */
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM retimes r JOIN measurements m USING (variant_id, shape, m) "
                                    "WHERE m.status = 'ok' AND r.rounds = 5 AND r.min_us <= r.median_us "
                                    "AND r.median_us <= r.max_us") == 6);
    /* the winner is the fastest ok variant of the fake's time order (its times are 5% apart),
     * recorded with its re-timed median */
    for (int m = 1; m <= 64; m *= 64) {
        char want[64], got[64], q[512];
        snprintf(q, sizeof q,
                 "SELECT variant_id FROM measurements WHERE m = %d AND status = 'ok' ORDER BY median_us, variant_id "
                 "LIMIT 1",
                 m);
        kt_test_query(t.db, q, want, sizeof want);
        snprintf(q, sizeof q, "SELECT variant_id FROM winners WHERE m_bucket = %d", m);
        kt_test_query(t.db, q, got, sizeof got);
        EXPECT(strlen(want) == 16 && !strcmp(want, got));
        snprintf(q, sizeof q,
                 "SELECT count(*) FROM winners w JOIN retimes r USING (variant_id, shape) WHERE w.m_bucket = %d "
                 "AND r.m = %d AND w.median_us = r.median_us AND w.min_us = r.min_us AND w.config LIKE "
                 "'%%FAULT=0,HANG=0'",
                 m, m);
        EXPECT(kt_test_query_long(t.db, q) == 1);
    }
    /* the same sweep again measures nothing twice */
    EXPECT(sweep(t.db, 0, &r) == 0);
    EXPECT(r.measured == 0 && r.already == 24 && r.retimed == 0);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM measurements") == 24);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM retimes") == 6);
    done(&t);
}

KT_TEST(sweep_spreads_over_fake_gpus) {
    scratch one, two;
    begin(&one);
    kt_sweep_report r;
    EXPECT(sweep(one.db, 0, &r) == 0 && r.workers == 1);
    begin(&two);
    setenv("KT_FAKE_GPU_COUNT", "3", 1);
    EXPECT(sweep(two.db, 2, &r) == 0); /* --workers 2 of 3 GPUs */
    EXPECT(r.workers == 2 && r.measured == 24 && r.faults == 18);
    char a[4096], b[4096];
    rows_of(one.db, a, sizeof a);
    rows_of(two.db, b, sizeof b);
    EXPECT(strlen(a) > 100 && !strcmp(a, b));
    winners_of(one.db, a, sizeof a);
    winners_of(two.db, b, sizeof b);
    EXPECT(strlen(a) > 20 && !strcmp(a, b));
    done(&one);
    done(&two);
}

KT_TEST(sweep_without_gpu_says_so) {
    scratch t;
    begin(&t);
    kt_sweep_options o = {.family = kt_family_find("selftest"),
                          .n_shapes = 1,
                          .n_ms = 1,
                          .db_path = t.db,
                          .strategy = "exhaustive",
                          .quiet = 1};
    o.shapes[0] = (kt_problem){.n_dims = 1, .dim = {4096}};
    o.ms[0] = 1;
    unsetenv("KT_FAKE_GPU");
    if (access("/dev/nvidiactl", F_OK)) { /* only on a machine without a driver */
        EXPECT(kt_sweep(&o, NULL) == -1);
        EXPECT(strstr(kt_error(), "GPU 0") && strstr(kt_error(), "needs"));
        EXPECT(access(t.db, F_OK) != 0); /* nothing written */
    }
    setenv("KT_FAKE_GPU", "1", 1);
    o.shard_index = o.shard_count = 2;
    EXPECT(kt_sweep(&o, NULL) == -1 && strstr(kt_error(), "shard 2/2"));
    o.shard_count = 0;
    o.shapes[0].dim[0] = 4097;
    EXPECT(kt_sweep(&o, NULL) == -1 && strstr(kt_error(), "multiple of 4"));
    done(&t);
}

/* ------------------------------------------------------------------ fast */

#define FAST_N 4096
#define FAST_K 2048
static const long fast_ms[] = {16, 24, 32, 48, 64}; /* anchors 16 and 64 (4x apart) */

/* A fast sweep of fp8_gemm at N=4096,K=2048 and fast_ms into db. */
static int fast_sweep(const char *db, int budget, kt_sweep_report *r) {
    kt_sweep_options o = {.family = kt_family_find("fp8_gemm"),
                          .n_shapes = 1,
                          .n_ms = 5,
                          .db_path = db,
                          .strategy = "fast",
                          .budget = budget,
                          .seed = 11,
                          .compile_threads = 2,
                          .quiet = 1,
                          .commit = "test",
                          .cmdline = "test_sweep fast"};
    o.shapes[0] = (kt_problem){.n_dims = 2, .dim = {FAST_N, FAST_K}};
    memcpy(o.ms, fast_ms, sizeof fast_ms);
    return run_sweep(&o, r);
}

static int is_anchor(long m) { return m == 16 || m == 64; }

/* How many (TILE_N, TILE_M, DIRECT) combinations have a config worth timing at M = m. */
static int fast_strata(long m) {
    const kt_family *fam = kt_family_find("fp8_gemm");
    kt_problem p = {.n_dims = 2, .dim = {FAST_N, FAST_K}, .m = m};
    kt_config *list = NULL;
    int n = kt_space_enumerate(fam, 120, &p, NULL, &list, NULL), strata = 0;
    char seen[4][5][2] = {{{0}}};
    for (int i = 0; i < n; i++) {
        const int *v = list[i].v;
        char *x = &seen[kt_param_value_index(&fam->params[0], v[0])][kt_param_value_index(&fam->params[1], v[1])][v[2]];
        if (!fam->hopeless(&list[i], &p) && !*x) *x = 1, strata++;
    }
    free(list);
    return strata;
}

/* 1 if the fast search's first sample at M = m also times the config dispatch would serve the
 * problem untuned (fp8_gemm's default_for, on the fake GPU's 188 SMs; written into cfg): one
 * worth timing there, in the sm_120 space, and not the default. */
static int untuned_pick(long m, char *cfg, size_t n) {
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_problem p = {.n_dims = 2, .dim = {FAST_N, FAST_K}, .m = m};
    kt_config c;
    char why[256];
    f->default_for(&p, 188, &c);
    kt_format_config(f, &c, cfg, n);
    return !f->check_config(&c, 120, why, sizeof why) && f->config_fits(&c, &p) && !f->hopeless(&c, &p) &&
           memcmp(&c, &f->default_config, sizeof c);
}

KT_TEST(fast_sweep_caps_and_transfer) {
    scratch t;
    begin(&t);
    kt_sweep_report r;
    char q[512];
    EXPECT(fast_sweep(t.db, 12, &r) == 0);
    long rows = 0;
    for (int i = 0; i < 5; i++) {
        snprintf(q, sizeof q, "SELECT count(*) FROM measurements WHERE m = %ld", fast_ms[i]);
        long n = kt_test_query_long(t.db, q);
        rows += n;
        /* an anchor: the default, the untuned pick and 12 sampled, then the other anchor's 2
         * fastest samples and at most 12/2 of local search; between: 12 at most */
        EXPECT(is_anchor(fast_ms[i]) ? n >= 13 && n <= 22 : n >= 1 && n <= 12);
    }
    char pick[256];
    int first = 26 + untuned_pick(16, pick, sizeof pick) + untuned_pick(64, pick, sizeof pick);
    EXPECT(first > 26); /* the untuned pick is worth timing at one anchor at least */
    EXPECT(r.measured == rows && r.already == 0 && r.retimed == 5);
    EXPECT(r.by_phase[0] == first && r.by_phase[1] >= 1 && r.by_phase[1] <= 16 &&
           r.by_phase[0] + r.by_phase[1] + r.by_phase[2] == rows);
    EXPECT(r.space > 20 * rows); /* what exhaustive would time */
    /* the first sample is stratified by (TILE_N, TILE_M, DIRECT): each anchor timed as many
     * of those combinations as its 12 samples could cover */
    for (int a = 0; a < 5; a += 4) {
        int strata = fast_strata(fast_ms[a]);
        snprintf(q, sizeof q,
                 "SELECT count(DISTINCT substr(config, 1, instr(config, ',TILE_K'))) FROM measurements WHERE m = %ld",
                 fast_ms[a]);
        EXPECT(strata > 12 && kt_test_query_long(t.db, q) >= 12);
    }
    /* phase 3: each M between the anchors timed both anchors' 5 fastest that are worth timing there */
    const kt_family *f = kt_family_find("fp8_gemm");
    int checked = 0;
    for (int a = 0; a < 5; a += 4) {
        char top[2048];
        snprintf(q, sizeof q,
                 "SELECT group_concat(config, '|') FROM (SELECT config FROM measurements WHERE m = %ld AND "
                 "status = 'ok' ORDER BY median_us, variant_id LIMIT 5)",
                 fast_ms[a]);
        kt_test_query(t.db, q, top, sizeof top);
        for (char *save = NULL, *cfg = strtok_r(top, "|", &save); cfg; cfg = strtok_r(NULL, "|", &save)) {
            kt_config c;
            EXPECT(kt_parse_config(f, cfg, &c) == 0);
            for (int b = 1; b < 4; b++) {
                kt_problem p = {.n_dims = 2, .dim = {FAST_N, FAST_K}, .m = fast_ms[b]};
                if (!f->config_fits(&c, &p) || f->hopeless(&c, &p)) continue;
                snprintf(q, sizeof q, "SELECT count(*) FROM measurements WHERE m = %ld AND config = '%s'", fast_ms[b],
                         cfg);
                EXPECT(kt_test_query_long(t.db, q) == 1);
                checked++;
            }
        }
    }
    EXPECT(checked >= 10);
    /* the same sweep again finds every choice it makes in the database: nothing measured twice */
    EXPECT(fast_sweep(t.db, 12, &r) == 0);
    EXPECT(r.measured == 0 && r.already == rows && r.retimed == 0);
    done(&t);
}

/* On a smooth bowl (KT_FAKE_TIME=smooth) the local search walks to the minimum, a config
 * 5 steps from the default and in neither anchor's random sample, so every M's winner is
 * the true optimum (zero regret) after timing a small fraction of what exhaustive would.
 * (Tied to fp8_gemm's space and this seed: if the space changes so that the sample holds
 * this config, plant another; of 30 random optima worth timing at all five Ms this search
 * finds 26 at all five, 2 at four and 2 nowhere.) */
KT_TEST(fast_sweep_walks_to_a_planted_optimum) {
    scratch t;
    begin(&t);
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_config bowl;
    char cfg[256], q[512];
    EXPECT(kt_parse_config(f, "TILE_N=32,TILE_M=16,WARPS=2,WARPS_M=2,STAGES=8", &bowl) == 0);
    kt_format_config(f, &bowl, cfg, sizeof cfg);
    setenv("KT_FAKE_TIME", "smooth", 1);
    setenv("KT_FAKE_BOWL", cfg, 1);
    kt_sweep_report r;
    EXPECT(fast_sweep(t.db, 40, &r) == 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM winners WHERE config = '%s'", cfg);
    EXPECT(kt_test_query_long(t.db, q) == 5);
    int first = 0;
    for (int a = 0; a < 5; a += 4) {
        /* phase 1 did not time it: the default (worth timing here, so it stands for its own
         * stratum), the untuned pick and one config of each other stratum */
        char pick[256];
        int n = 1 + untuned_pick(fast_ms[a], pick, sizeof pick) +
                (fast_strata(fast_ms[a]) - 1 < 40 ? fast_strata(fast_ms[a]) - 1 : 40);
        EXPECT(strcmp(pick, cfg) != 0);
        snprintf(q, sizeof q,
                 "SELECT count(*) FROM (SELECT config FROM measurements WHERE m = %ld ORDER BY id LIMIT %d) "
                 "WHERE config = '%s'",
                 fast_ms[a], n, cfg);
        EXPECT(kt_test_query_long(t.db, q) == 0);
        first += n;
    }
    EXPECT(r.by_phase[0] == first && r.measured * 50 < r.space);
    done(&t);
}

/* Where the default is not worth timing (M = 256: its warp tiles are too small), the first
 * sample takes the shuffle's first two configs of each stratum, never a third: the stratum
 * counts of the sample's rows say which. */
KT_TEST(fast_sweep_samples_strata_twice_where_the_default_is_pruned) {
    scratch t;
    begin(&t);
    const kt_family *f = kt_family_find("fp8_gemm");
    const int budget = 30;
    kt_problem p = {.n_dims = 2, .dim = {FAST_N, FAST_K}, .m = 256};
    EXPECT(f->hopeless(&f->default_config, &p));
    EXPECT(fast_strata(256) > budget / 2);
    kt_sweep_options o = {.family = f,
                          .n_shapes = 1,
                          .n_ms = 1,
                          .db_path = t.db,
                          .strategy = "fast",
                          .budget = budget,
                          .seed = 3,
                          .compile_threads = 2,
                          .quiet = 1};
    o.shapes[0] = (kt_problem){.n_dims = 2, .dim = {FAST_N, FAST_K}};
    o.ms[0] = 256;
    kt_sweep_report r;
    EXPECT(run_sweep(&o, &r) == 0);
    /* the default as a baseline, the untuned pick, then the sample */
    char q[2048], def[256], pick[256], from[1024];
    int first = 1 + untuned_pick(256, pick, sizeof pick) + budget;
    EXPECT(first == 2 + budget && r.by_phase[0] == first);
    kt_format_config(f, &f->default_config, def, sizeof def);
    snprintf(
        from, sizeof from,
        "(SELECT config FROM (SELECT config FROM measurements ORDER BY id LIMIT %d) WHERE config NOT IN ('%s', '%s'))",
        first, def, pick);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM measurements") > first); /* and a local search */
    snprintf(q, sizeof q, "SELECT count(DISTINCT substr(config, 1, instr(config, ',TILE_K'))) FROM %s", from);
    EXPECT(kt_test_query_long(t.db, q) >= budget / 2);
    snprintf(q, sizeof q,
             "SELECT max(n) FROM (SELECT count(*) AS n FROM %s GROUP BY substr(config, 1, instr(config, ',TILE_K')))",
             from);
    EXPECT(kt_test_query_long(t.db, q) == 2);
    done(&t);
}

/* Faulting and hanging variants in every phase (the selftest family's local search steps
 * onto FAULT=1 and HANG=1): recorded, workers restarted, honest winners at every M. */
KT_TEST(fast_sweep_survives_faults) {
    scratch t;
    begin(&t);
    kt_sweep_options o = {.family = kt_family_find("selftest"),
                          .n_shapes = 1,
                          .n_ms = 4,
                          .db_path = t.db,
                          .strategy = "fast",
                          .budget = 6,
                          .seed = 5,
                          .compile_threads = 2,
                          .quiet = 1};
    o.shapes[0] = (kt_problem){.n_dims = 1, .dim = {4096}};
    static const long ms[] = {1, 2, 4, 8}; /* anchors 1, 4, 8; 2 between */
    memcpy(o.ms, ms, sizeof ms);
    kt_sweep_report r;
    EXPECT(run_sweep(&o, &r) == 0);
    EXPECT(r.faults > 0 && r.by_phase[1] > 0 && r.by_phase[2] > 0 && r.retimed == 4);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM measurements WHERE status = 'launch-error'") == r.faults);
    EXPECT(kt_test_query_long(t.db, "SELECT count(*) FROM winners WHERE config LIKE '%FAULT=0,HANG=0'") == 4);
    done(&t);
}

/* ------------------------------------------------------- DB: rule, merge */

typedef struct fixture {
    scratch t;
    kt_db *db;
    long long device_id, run_id;
} fixture;

static const kt_db_device gpu = {"NVIDIA H200", 90, 132, 13000, 13000};

static int open_fixture(fixture *fx, const char *name) {
    begin(&fx->t);
    snprintf(fx->t.db, sizeof fx->t.db, "%s/%s", fx->t.dir, name);
    return kt_db_open(fx->t.db, 0, &fx->db) || kt_db_device_id(fx->db, &gpu, &fx->device_id) ||
           kt_db_run_begin(fx->db, fx->device_id, "abc", "kt tune --test", &fx->run_id);
}

static int add(const fixture *fx, const char *variant, long m, kt_status status, double median) {
    kt_measurement r = {.run_id = fx->run_id,
                        .device_id = fx->device_id,
                        .family = "fam",
                        .m = m,
                        .status = status,
                        .median_us = median,
                        .min_us = median * 0.9,
                        .max_us = median * 1.1};
    snprintf(r.source_hash, sizeof r.source_hash, "h");
    snprintf(r.variant_id, sizeof r.variant_id, "%s", variant);
    snprintf(r.config, sizeof r.config, "CFG_%s", variant);
    snprintf(r.shape, sizeof r.shape, "N=64");
    return kt_db_add_measurement(fx->db, &r);
}

static int retime(const fixture *fx, long long run_id, long m, int n, const kt_retime *r) {
    return kt_db_add_retimes(fx->db, run_id, fx->device_id, "fam", "h", "N=64", m, r, n) ||
           kt_db_update_winner(fx->db, fx->device_id, "fam", "h", "N=64", m);
}

static void winner(const fixture *fx, long bucket, char *out, size_t n) {
    char q[256];
    snprintf(q, sizeof q, "SELECT variant_id || ' ' || printf('%%.2f', median_us) FROM winners WHERE m_bucket = %ld",
             bucket);
    kt_test_query(fx->t.db, q, out, n);
}

KT_TEST(winner_rule_with_retimes) {
    fixture fx;
    char w[64], ids[3][17];
    int retimed = -1;
    EXPECT(open_fixture(&fx, "rule.db") == 0);
    /* first pass at m 16: d fastest, then a, b, c; e failed elsewhere in the bucket */
    EXPECT(add(&fx, "d", 16, KT_OK, 9.0) == 0 && add(&fx, "a", 16, KT_OK, 10.0) == 0 &&
           add(&fx, "b", 16, KT_OK, 10.5) == 0 && add(&fx, "c", 16, KT_OK, 12.0) == 0 &&
           add(&fx, "e", 16, KT_OK, 1.0) == 0 && add(&fx, "e", 13, KT_WRONG_RESULT, 1.0) == 0);
    EXPECT(kt_db_finalists(fx.db, fx.device_id, "fam", "h", "N=64", 16, 3, ids, &retimed) == 3);
    EXPECT(!strcmp(ids[0], "d") && !strcmp(ids[1], "a") && !strcmp(ids[2], "b") && retimed == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 16) == 0);
    winner(&fx, 16, w, sizeof w);
    EXPECT(!strcmp(w, "d 9.00")); /* no re-timing yet: first pass decides */
    /* re-timed: b is clearly fastest now; c was not re-timed, so it cannot win */
    kt_retime g1[3] = {{"d", 5, 11.0, 10.9, 11.1}, {"a", 5, 10.4, 10.3, 10.5}, {"b", 5, 9.5, 9.4, 9.6}};
    EXPECT(retime(&fx, fx.run_id, 16, 3, g1) == 0);
    winner(&fx, 16, w, sizeof w);
    EXPECT(!strcmp(w, "b 9.50"));
    EXPECT(kt_db_finalists(fx.db, fx.device_id, "fam", "h", "N=64", 16, 3, ids, &retimed) == 3 && retimed == 1);
    EXPECT(kt_test_query_long(fx.t.db, "SELECT count(*) FROM winners WHERE min_us = 9.4 AND max_us = 9.6") == 1);
    /* a later group decides: a within 1% of b ties with it, and a has the lower id */
    long long run2;
    EXPECT(kt_db_run_begin(fx.db, fx.device_id, "abc", "kt tune --again", &run2) == 0);
    kt_retime g2[2] = {{"a", 5, 10.05, 10.04, 10.06}, {"b", 5, 10.0, 9.99, 10.01}};
    EXPECT(retime(&fx, run2, 16, 2, g2) == 0);
    winner(&fx, 16, w, sizeof w);
    EXPECT(!strcmp(w, "a 10.05"));
    EXPECT(kt_db_finalists(fx.db, fx.device_id, "fam", "h", "N=64", 16, 3, ids, &retimed) == 3 && retimed == 0);
    /* apart by more than the band: the faster wins, even where a's fastest round beat
     * b's slowest (single rounds are noisier than their median) */
    long long run3;
    /* the store keeps a group another run stored at or after this run's start (the
     * timestamps' millisecond): run3 must start after run2's group, as real runs do */
    usleep(3000);
    EXPECT(kt_db_run_begin(fx.db, fx.device_id, "abc", "kt tune --third", &run3) == 0);
    kt_retime g3[2] = {{"a", 5, 10.3, 9.9, 10.6}, {"b", 5, 10.0, 9.8, 10.1}};
    EXPECT(retime(&fx, run3, 16, 2, g3) == 0);
    winner(&fx, 16, w, sizeof w);
    EXPECT(!strcmp(w, "b 10.00"));
    /* an m of the bucket without a re-timing competes on its first pass */
    EXPECT(add(&fx, "f", 15, KT_OK, 8.0) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 15) == 0);
    winner(&fx, 16, w, sizeof w);
    EXPECT(!strcmp(w, "f 8.00"));
    /* first-pass times within 1% tie as well; the lower id wins */
    EXPECT(add(&fx, "g", 1, KT_OK, 5.04) == 0 && add(&fx, "h", 1, KT_OK, 5.0) == 0 &&
           add(&fx, "i", 1, KT_OK, 5.2) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 1) == 0);
    winner(&fx, 1, w, sizeof w);
    EXPECT(!strcmp(w, "g 5.04"));
    /* a single ok variant has nothing to be re-timed against */
    EXPECT(kt_db_finalists(fx.db, fx.device_id, "fam", "h", "N=64", 15, 3, ids, &retimed) == 1);
    kt_db_close(fx.db);
    done(&fx.t);
}

KT_TEST(merge_copies_once_and_recomputes_winners) {
    fixture a, b;
    char w[64], buf[64];
    EXPECT(open_fixture(&a, "a.db") == 0);
    EXPECT(open_fixture(&b, "b.db") == 0);
    EXPECT(add(&a, "v1", 16, KT_OK, 10.0) == 0 && add(&a, "v2", 16, KT_OK, 12.0) == 0);
    EXPECT(kt_db_update_winner(a.db, a.device_id, "fam", "h", "N=64", 16) == 0);
    /* b: the same v1 row (kept from a), a faster v3, a re-timing, and another driver */
    EXPECT(add(&b, "v1", 16, KT_OK, 99.0) == 0 && add(&b, "v3", 16, KT_OK, 9.0) == 0);
    kt_retime g[2] = {{"v3", 5, 8.5, 8.4, 8.6}, {"v1", 5, 11.0, 10.9, 11.1}};
    EXPECT(retime(&b, b.run_id, 16, 2, g) == 0);
    kt_db_device newer = gpu;
    newer.driver_version = 13050;
    long long other;
    EXPECT(kt_db_device_id(b.db, &newer, &other) == 0);
    b.device_id = other;
    EXPECT(add(&b, "v9", 64, KT_OK, 30.0) == 0);
    kt_db_close(b.db);
    b.db = NULL;
    for (int twice = 0; twice < 2; twice++) {
        EXPECT(kt_db_merge(a.db, b.t.db) == 0);
        EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM measurements") == 4);
        EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM devices") == 2);
        EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM runs") == 2);
        EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM retimes") == 2);
    }
    kt_test_query(a.t.db, "SELECT median_us FROM measurements WHERE variant_id = 'v1'", buf, sizeof buf);
    EXPECT(!strcmp(buf, "10.0"));
    winner(&a, 16, w, sizeof w);
    EXPECT(!strcmp(w, "v3 8.50"));
    EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM winners w JOIN devices d ON d.id = w.device_id "
                                      "WHERE w.variant_id = 'v9' AND d.driver_version = 13050") == 1);
    EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM runs r JOIN devices d ON d.id = r.device_id "
                                      "WHERE r.cmdline = 'kt tune --test'") == 2);
    /* what cannot be merged says why and changes nothing */
    EXPECT(kt_db_merge(a.db, a.t.db) == -1 && strstr(kt_error(), "into itself"));
    char missing[128], junk[128];
    snprintf(missing, sizeof missing, "%s/none.db", a.t.dir);
    EXPECT(kt_db_merge(a.db, missing) == -1 && strstr(kt_error(), "cannot read") && strstr(kt_error(), "none.db"));
    snprintf(junk, sizeof junk, "%s/junk.db", a.t.dir);
    FILE *f = fopen(junk, "w");
    if (f) {
        fputs("not a database, just some text that is long enough to have a header.........", f);
        fclose(f);
    }
    EXPECT(kt_db_merge(a.db, junk) == -1 && strstr(kt_error(), "not a kt database"));
    EXPECT(kt_test_query_long(a.t.db, "SELECT count(*) FROM measurements") == 4);
    kt_db_close(a.db);
    done(&a.t);
    done(&b.t);
}
