/* test_db.c — CPU tests of the winners database (db/db.c): schema creation and
 * versioning, measurements, winner selection, the lookup ladder, stale rows, bad files,
 * concurrent writers, export, and the M buckets. Each test works in its own temp folder. */
#include "kt.h"
#include "../../db/kt_db_write.h"
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const kt_db_device h200 = {"NVIDIA H200", 90, 132, 13000, 13000};

/* A fresh temp folder per test, removed (with its files) by cleanup(). */
typedef struct fixture {
    char dir[64];
    char path[96]; /* dir/kt.db */
    kt_db *db;
    long long device_id, run_id;
} fixture;

/* Creates the folder, a writable DB in it, the H200 device row and a run. */
static int setup(fixture *fx) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/kt_test_db_XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    snprintf(fx->path, sizeof fx->path, "%s/kt.db", fx->dir);
    if (kt_db_open(fx->path, 0, &fx->db) || kt_db_device_id(fx->db, &h200, &fx->device_id) ||
        kt_db_run_begin(fx->db, fx->device_id, "abc123", "kt tune --test", &fx->run_id)) {
        fprintf(stderr, "setup: %s\n", kt_error());
        return -1;
    }
    return 0;
}

static void cleanup(fixture *fx);

/* Sets fx up, or counts a failure and leaves the test (nothing after it could run). */
#define SETUP(fx)                                                                                                      \
    do {                                                                                                               \
        int ready_ = setup(&(fx)) == 0;                                                                                \
        EXPECT(ready_);                                                                                                \
        if (!ready_) {                                                                                                 \
            cleanup(&(fx));                                                                                            \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)

static void cleanup(fixture *fx) {
    kt_db_close(fx->db);
    fx->db = NULL;
    DIR *d = opendir(fx->dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char p[512];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", fx->dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(fx->dir);
}

/* A measurement of fixture's device and run. */
static kt_measurement row(const fixture *fx, const char *family, const char *hash, const char *variant,
                          const char *shape, long m, kt_status status, double median_us) {
    kt_measurement r;
    memset(&r, 0, sizeof r);
    r.run_id = fx->run_id;
    r.device_id = fx->device_id;
    r.family = family;
    snprintf(r.source_hash, sizeof r.source_hash, "%s", hash);
    snprintf(r.variant_id, sizeof r.variant_id, "%s", variant);
    snprintf(r.config, sizeof r.config, "CFG_%s", variant);
    snprintf(r.shape, sizeof r.shape, "%s", shape);
    r.m = m;
    r.status = status;
    r.median_us = median_us;
    r.min_us = median_us * 0.9;
    r.max_us = median_us * 1.1;
    r.rel_err = 1e-3;
    r.registers = 128;
    r.compile_ms = 250;
    if (status != KT_OK) snprintf(r.error, sizeof r.error, "failed: %s", kt_status_name(status));
    return r;
}

static int add(const fixture *fx, const char *family, const char *hash, const char *variant, const char *shape, long m,
               kt_status status, double median_us) {
    kt_measurement r = row(fx, family, hash, variant, shape, m, status, median_us);
    int rc = kt_db_add_measurement(fx->db, &r);
    if (rc) fprintf(stderr, "add: %s\n", kt_error());
    return rc;
}

static int error_has(const char *s) { return strstr(kt_error(), s) != NULL; }

/* fp8_gemm has no ladder of its own: the GEMM ladder, then powers of two. */
KT_TEST(db_gemm_buckets) {
    const kt_family *gemm = kt_family_find("fp8_gemm");
    EXPECT(kt_family_bucket(gemm, 1) == 1);
    EXPECT(kt_family_bucket(gemm, 2) == 2);
    EXPECT(kt_family_bucket(gemm, 3) == 4);
    EXPECT(kt_family_bucket(gemm, 17) == 24);
    EXPECT(kt_family_bucket(gemm, 24) == 24);
    EXPECT(kt_family_bucket(gemm, 25) == 32);
    EXPECT(kt_family_bucket(gemm, 100) == 128);
    EXPECT(kt_family_bucket(gemm, 1025) == 1536);
    EXPECT(kt_family_bucket(gemm, 4096) == 4096);
    EXPECT(kt_family_bucket(gemm, 4097) == 8192);
    EXPECT(kt_family_bucket(gemm, 5000) == 8192);
    EXPECT(kt_family_bucket(gemm, 70000) == 131072);
}

KT_TEST(db_names) {
    EXPECT(!strcmp(kt_status_name(KT_OK), "ok"));
    EXPECT(!strcmp(kt_status_name(KT_WRONG_RESULT), "wrong-result"));
    EXPECT(!strcmp(kt_status_name(KT_SKIPPED), "skipped"));
    EXPECT(!strcmp(kt_lookup_level_name(KT_NEAREST_SHAPE), "nearest-shape"));
    EXPECT(!strcmp(kt_lookup_level_name(KT_DEFAULT), "default"));
}

KT_TEST(db_schema_created) {
    fixture fx;
    SETUP(fx);
    kt_db_close(fx.db);
    fx.db = NULL;
    char buf[64];
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == KT_SCHEMA_VERSION);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                                       "('meta', 'devices', 'runs', 'measurements', 'winners')") == 5);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM sqlite_master WHERE type = 'index' "
                                       "AND name = 'measurements_unit'") == 1);
    kt_test_query(fx.path, "PRAGMA journal_mode", buf, sizeof buf);
    EXPECT(!strcmp(buf, "wal"));
    /* started_at is ISO-8601 UTC: 2025-01-31T12:34:56.789Z */
    kt_test_query(fx.path, "SELECT started_at FROM runs", buf, sizeof buf);
    EXPECT(strlen(buf) == 24 && buf[4] == '-' && buf[10] == 'T' && buf[13] == ':' && buf[23] == 'Z');
    kt_test_query(fx.path, "SELECT kt_commit || ' ' || cmdline FROM runs", buf, sizeof buf);
    EXPECT(!strcmp(buf, "abc123 kt tune --test"));
    cleanup(&fx);
}

KT_TEST(db_reopen_idempotent) {
    fixture fx;
    long long again = -1;
    SETUP(fx);
    EXPECT(add(&fx, "fam", "h", "v1", "N=1", 1, KT_OK, 5) == 0);
    kt_db_close(fx.db);
    fx.db = NULL;
    long objects = kt_test_query_long(fx.path, "SELECT count(*) FROM sqlite_master");
    for (int i = 0; i < 2; i++) {
        EXPECT(kt_db_open(fx.path, 0, &fx.db) == 0);
        EXPECT(kt_db_device_id(fx.db, &h200, &again) == 0);
        EXPECT(again == fx.device_id);
        kt_db_close(fx.db);
        fx.db = NULL;
    }
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM sqlite_master") == objects);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM devices") == 1);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements") == 1);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM meta") == 1);
    /* a closed writable DB is readable read-only (the runtime's mode), WAL and all */
    EXPECT(kt_db_open(fx.path, 1, &fx.db) == 0);
    EXPECT(fx.db && kt_db_find_measurement(fx.db, fx.device_id, "fam", "h", "v1", "N=1", 1, NULL, NULL) == 1);
    cleanup(&fx);
}

KT_TEST(db_device_rows) {
    fixture fx;
    long long other = -1;
    kt_db_device newer = h200;
    newer.driver_version = 13010;
    SETUP(fx);
    EXPECT(kt_db_device_id(fx.db, &newer, &other) == 0);
    EXPECT(other > 0 && other != fx.device_id);
    cleanup(&fx);
}

KT_TEST(db_measurement_roundtrip) {
    fixture fx;
    char buf[256];
    SETUP(fx);
    kt_measurement r =
        row(&fx, "fp8_gemm", "0123456789abcdef", "feedfacecafebeef", "N=1536,K=4096", 17, KT_WRONG_RESULT, 12.5);
    r.rel_err = 0.25;
    r.registers = 96;
    r.spill_bytes = 8;
    EXPECT(kt_db_add_measurement(fx.db, &r) == 0);
    /* committed on return: a second connection sees it while ours is still open */
    kt_test_query(
        fx.path,
        "SELECT printf('%d|%d|%s|%s|%s|%s|%s|%d|%s|%s|%.2f|%.3f|%.3f|%.2f|%d|%d|%.0f', run_id, device_id, "
        "family, source_hash, variant_id, config, shape, m, status, error, median_us, min_us, max_us, rel_err, "
        "registers, spill_bytes, compile_ms) FROM measurements",
        buf, sizeof buf);
    char want[256];
    snprintf(want, sizeof want,
             "%lld|%lld|fp8_gemm|0123456789abcdef|feedfacecafebeef|CFG_feedfacecafebeef|N=1536,K=4096|17|"
             "wrong-result|failed: wrong-result|12.50|11.250|13.750|0.25|96|8|250",
             fx.run_id, fx.device_id);
    EXPECT(!strcmp(buf, want));
    if (strcmp(buf, want)) fprintf(stderr, "  got  %s\n  want %s\n", buf, want);
    kt_test_query(fx.path, "SELECT created_at FROM measurements", buf, sizeof buf);
    EXPECT(strlen(buf) == 24 && buf[10] == 'T' && buf[23] == 'Z');
    /* an ok row gets no error text */
    EXPECT(add(&fx, "fp8_gemm", "0123456789abcdef", "v2", "N=1536,K=4096", 17, KT_OK, 3) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements WHERE variant_id = 'v2' AND error IS NULL") ==
           1);
    /* foreign keys are on: a measurement of an unknown run is refused */
    r.run_id = 999;
    snprintf(r.variant_id, sizeof r.variant_id, "v3");
    EXPECT(kt_db_add_measurement(fx.db, &r) == -1);
    EXPECT(error_has("FOREIGN KEY"));
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements") == 2);
    cleanup(&fx);
}

KT_TEST(db_find_measurement) {
    fixture fx;
    SETUP(fx);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v1", "N=64", 16, NULL, NULL) == 0);
    EXPECT(add(&fx, "fam", "h1", "v1", "N=64", 16, KT_COMPILE_ERROR, 0) == 0);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v1", "N=64", 16, NULL, NULL) == 1);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v1", "N=64", 15, NULL, NULL) == 0);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v2", "N=64", 16, NULL, NULL) == 0);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h2", "v1", "N=64", 16, NULL, NULL) == 0);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v1", "N=128", 16, NULL, NULL) == 0);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id + 1, "fam", "h1", "v1", "N=64", 16, NULL, NULL) == 0);
    /* a found row says how it went: a failure has no time, an ok row its median */
    kt_status st = KT_OK;
    double us = 0;
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v1", "N=64", 16, &st, &us) == 1);
    EXPECT(st == KT_COMPILE_ERROR && isnan(us));
    EXPECT(add(&fx, "fam", "h1", "v2", "N=64", 16, KT_OK, 7.5) == 0);
    EXPECT(kt_db_find_measurement(fx.db, fx.device_id, "fam", "h1", "v2", "N=64", 16, &st, &us) == 1);
    EXPECT(st == KT_OK && us == 7.5);
    cleanup(&fx);
}

KT_TEST(db_winner_ignores_failures) {
    fixture fx;
    char buf[128];
    const char *winner = "SELECT variant_id || ' ' || printf('%.1f', median_us) || ' ' || m_bucket FROM winners "
                         "WHERE shape = 'N=64' AND m_bucket = 24";
    SETUP(fx);
    /* bucket 24 (m 17..24): v3/v4 fail but are faster; v5 is fastest but in another bucket */
    EXPECT(add(&fx, "fam", "h", "v1", "N=64", 24, KT_OK, 10) == 0);
    EXPECT(add(&fx, "fam", "h", "v2", "N=64", 20, KT_OK, 8) == 0);
    EXPECT(add(&fx, "fam", "h", "v3", "N=64", 24, KT_WRONG_RESULT, 1) == 0);
    EXPECT(add(&fx, "fam", "h", "v4", "N=64", 24, KT_COMPILE_ERROR, 0.5) == 0);
    EXPECT(add(&fx, "fam", "h", "v5", "N=64", 32, KT_OK, 2) == 0);
    EXPECT(add(&fx, "fam", "h", "v6", "N=128", 24, KT_OK, 3) == 0);
    EXPECT(add(&fx, "fam", "other", "v7", "N=64", 24, KT_OK, 3) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 17) == 0);
    kt_test_query(fx.path, winner, buf, sizeof buf);
    EXPECT(!strcmp(buf, "v2 8.0 24"));
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM winners") == 1);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM winners w JOIN measurements m ON m.id = w.measurement_id "
                                       "WHERE m.status = 'ok' AND m.variant_id = w.variant_id") == 1);
    /* v2 gives a wrong result at another m of the bucket: it is out, v1 wins */
    EXPECT(add(&fx, "fam", "h", "v2", "N=64", 18, KT_WRONG_RESULT, 7) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 18) == 0);
    kt_test_query(fx.path, winner, buf, sizeof buf);
    EXPECT(!strcmp(buf, "v1 10.0 24"));
    /* once every variant of the bucket has failed somewhere, the bucket has no winner */
    EXPECT(add(&fx, "fam", "h", "v1", "N=64", 22, KT_LAUNCH_ERROR, 0) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 22) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM winners") == 0);
    /* a bucket of failures only never gets a winner */
    EXPECT(add(&fx, "fam", "h", "v8", "N=64", 1, KT_WRONG_RESULT, 0.1) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 1) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM winners") == 0);
    cleanup(&fx);
}

/* Inserts an ok measurement of fp8_gemm at (N, K, m) and makes it its bucket's winner. */
static int win(const fixture *fx, const kt_family *f, const char *hash, const char *variant, long n, long k, long m,
               double median_us) {
    kt_problem p = {.n_dims = 2, .dim = {n, k}, .m = m};
    char shape[128];
    kt_format_shape(f, &p, shape, sizeof shape);
    if (add(fx, f->name, hash, variant, shape, m, KT_OK, median_us)) return -1;
    return kt_db_update_winner(fx->db, fx->device_id, f->name, hash, shape, m);
}

/* Looks up fp8_gemm at (N, K, m) on dev; returns the lookup's result. */
static int lookup(kt_db *db, const kt_db_device *dev, const kt_family *f, long n, long k, long m, kt_winner *w) {
    kt_problem p = {.n_dims = 2, .dim = {n, k}, .m = m};
    int rc = kt_db_lookup(db, dev, f, &p, w);
    if (rc < 0) fprintf(stderr, "lookup: %s\n", kt_error());
    return rc;
}

KT_TEST(db_lookup_levels) {
    fixture fx;
    kt_winner w;
    char hash[17], def[256];
    const kt_family *f = kt_family_find("fp8_gemm");
    EXPECT(f != NULL);
    if (!f) return;
    kt_hex64(kt_family_source_hash(f), hash);
    kt_format_config(f, &f->default_config, def, sizeof def);
    SETUP(fx);
    EXPECT(win(&fx, f, hash, "a16", 1536, 4096, 16, 5.0) == 0);
    EXPECT(win(&fx, f, hash, "a64", 1536, 4096, 64, 9.0) == 0);
    EXPECT(win(&fx, f, hash, "b1", 7168, 4096, 1, 20.0) == 0);
    EXPECT(win(&fx, f, hash, "c8", 1536, 7168, 8, 7.0) == 0);
    /* the runtime's mode: a second, read-only connection */
    kt_db *ro = NULL;
    EXPECT(kt_db_open(fx.path, 1, &ro) == 0);
    if (!ro) {
        cleanup(&fx);
        return;
    }

    EXPECT(lookup(ro, &h200, f, 1536, 4096, 16, &w) == 0);
    EXPECT(w.level == KT_EXACT && !strcmp(w.variant_id, "a16") && !strcmp(w.config, "CFG_a16"));
    EXPECT(w.m_bucket == 16 && w.median_us == 5.0 && !strcmp(w.shape, "N=1536,K=4096"));
    /* m 13 is in bucket 16 too */
    EXPECT(lookup(ro, &h200, f, 1536, 4096, 13, &w) == 0);
    EXPECT(w.level == KT_EXACT && !strcmp(w.variant_id, "a16"));
    /* m 40 (bucket 48): 64 is nearer than 16 in log terms */
    EXPECT(lookup(ro, &h200, f, 1536, 4096, 40, &w) == 0);
    EXPECT(w.level == KT_NEAREST_M && !strcmp(w.variant_id, "a64") && w.m_bucket == 64);
    /* m 20 (bucket 24): 16 is nearer */
    EXPECT(lookup(ro, &h200, f, 1536, 4096, 20, &w) == 0);
    EXPECT(w.level == KT_NEAREST_M && !strcmp(w.variant_id, "a16"));
    /* m 32 is halfway between 16 and 64 in log terms: the larger bucket wins the tie */
    EXPECT(lookup(ro, &h200, f, 1536, 4096, 32, &w) == 0);
    EXPECT(w.level == KT_NEAREST_M && !strcmp(w.variant_id, "a64"));
    /* unseen N=3072,K=4096: N=1536 (log 2 away) is nearer than N=7168 and than K=7168 */
    EXPECT(lookup(ro, &h200, f, 3072, 4096, 64, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "a64") && !strcmp(w.shape, "N=1536,K=4096"));
    EXPECT(lookup(ro, &h200, f, 3072, 4096, 2, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "a16"));
    /* unseen N=6144,K=4096: N=7168 is nearest */
    EXPECT(lookup(ro, &h200, f, 6144, 4096, 64, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "b1"));
    /* a stored shape is the same shape however its string orders the dims */
    EXPECT(add(&fx, f->name, hash, "r16", "K=7168,N=3072", 16, KT_OK, 4.0) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, f->name, hash, "K=7168,N=3072", 16) == 0);
    EXPECT(lookup(ro, &h200, f, 3072, 7168, 16, &w) == 0);
    EXPECT(w.level == KT_EXACT && !strcmp(w.variant_id, "r16"));
    /* another driver version of the same GPU is the same device */
    kt_db_device newer = h200;
    newer.driver_version = 13050;
    EXPECT(lookup(ro, &newer, f, 1536, 4096, 16, &w) == 0);
    EXPECT(w.level == KT_EXACT && !strcmp(w.variant_id, "a16"));
    /* another GPU has nothing: the family default */
    kt_db_device other = {"NVIDIA RTX PRO 6000 Blackwell", 120, 188, 13000, 13000};
    EXPECT(lookup(ro, &other, f, 1536, 4096, 16, &w) == 1);
    EXPECT(w.level == KT_DEFAULT && !strcmp(w.config, def) && w.m_bucket == 16);
    other = h200;
    other.sm_count = 114;
    EXPECT(lookup(ro, &other, f, 1536, 4096, 16, &w) == 1);
    EXPECT(w.level == KT_DEFAULT);
    kt_db_close(ro);
    cleanup(&fx);
}

KT_TEST(db_lookup_stale_never_served) {
    fixture fx;
    kt_winner w;
    char hash[17];
    const kt_family *f = kt_family_find("fp8_gemm");
    EXPECT(f != NULL);
    if (!f) return;
    kt_hex64(kt_family_source_hash(f), hash);
    const char *stale = strcmp(hash, "0000000000000000") ? "0000000000000000" : "1111111111111111";
    SETUP(fx);
    /* only a stale row, even a fast exact one: the default */
    EXPECT(win(&fx, f, stale, "old", 1536, 4096, 16, 0.1) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM winners") == 1);
    EXPECT(lookup(fx.db, &h200, f, 1536, 4096, 16, &w) == 1);
    EXPECT(w.level == KT_DEFAULT && strcmp(w.variant_id, "old") != 0);
    /* a current row of another shape beats a stale exact row */
    EXPECT(win(&fx, f, hash, "new", 7168, 4096, 16, 5.0) == 0);
    EXPECT(lookup(fx.db, &h200, f, 1536, 4096, 16, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "new"));
    cleanup(&fx);
}

KT_TEST(db_readonly_missing) {
    kt_db *db = (kt_db *)1;
    char dir[] = "/tmp/kt_test_db_XXXXXX", path[64];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/missing.db", dir);
    EXPECT(kt_db_open(path, 1, &db) == -1);
    EXPECT(db == NULL);
    EXPECT(error_has("cannot open") && error_has(path) && error_has("no such file"));
    EXPECT(access(path, F_OK) != 0);
    rmdir(dir);
}

KT_TEST(db_garbage_file_refused) {
    fixture fx = {0};
    kt_db *db = (kt_db *)1;
    unsigned char junk[8192];
    uint64_t seed = 42;
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kt_test_db_XXXXXX");
    EXPECT(mkdtemp(fx.dir) != NULL);
    snprintf(fx.path, sizeof fx.path, "%s/garbage.db", fx.dir);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)kt_rng_next(&seed);
    EXPECT(kt_write_file_atomic(fx.path, junk, sizeof junk) == 0);
    for (int read_only = 0; read_only < 2; read_only++) {
        EXPECT(kt_db_open(fx.path, read_only, &db) == -1);
        EXPECT(db == NULL);
        EXPECT(error_has(fx.path) && error_has("file is not a database"));
    }
    /* the file is left exactly as it was */
    size_t len = 0;
    char *back = kt_read_file(fx.path, &len);
    EXPECT(back && len == sizeof junk && !memcmp(back, junk, len));
    free(back);
    cleanup(&fx);
}

KT_TEST(db_empty_file) {
    fixture fx = {0};
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kt_test_db_XXXXXX");
    EXPECT(mkdtemp(fx.dir) != NULL);
    snprintf(fx.path, sizeof fx.path, "%s/empty.db", fx.dir);
    EXPECT(kt_write_file_atomic(fx.path, "", 0) == 0);
    /* read-only cannot create the schema; writable treats an empty file as version 0 */
    EXPECT(kt_db_open(fx.path, 1, &fx.db) == -1);
    EXPECT(error_has(fx.path) && error_has("not a kt database (empty file)"));
    EXPECT(kt_db_open(fx.path, 0, &fx.db) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == KT_SCHEMA_VERSION);
    cleanup(&fx);
}

KT_TEST(db_foreign_sqlite_refused) {
    fixture fx = {0};
    kt_db *db = NULL;
    char buf[16];
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kt_test_db_XXXXXX");
    EXPECT(mkdtemp(fx.dir) != NULL);
    snprintf(fx.path, sizeof fx.path, "%s/other.db", fx.dir);
    sqlite3 *h;
    EXPECT(sqlite3_open(fx.path, &h) == SQLITE_OK);
    EXPECT(sqlite3_exec(h, "CREATE TABLE notes (text TEXT)", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    EXPECT(kt_db_open(fx.path, 0, &db) == -1);
    EXPECT(error_has(fx.path) && error_has("not a kt database"));
    /* untouched: no kt tables added, journal mode unchanged */
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM sqlite_master") == 1);
    kt_test_query(fx.path, "PRAGMA journal_mode", buf, sizeof buf);
    EXPECT(!strcmp(buf, "delete"));
    cleanup(&fx);
}

KT_TEST(db_future_version_refused) {
    fixture fx;
    char buf[16];
    SETUP(fx);
    kt_db_close(fx.db);
    fx.db = NULL;
    kt_test_query(fx.path, "UPDATE meta SET value = 99 WHERE key = 'schema_version'", buf, sizeof buf);
    EXPECT(!strcmp(buf, ""));
    for (int read_only = 0; read_only < 2; read_only++) {
        EXPECT(kt_db_open(fx.path, read_only, &fx.db) == -1);
        EXPECT(fx.db == NULL);
        EXPECT(error_has(fx.path) && error_has("schema version 99 is newer"));
    }
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == 99);
    cleanup(&fx);
}

/* A schema-2 file at fx->path (the embedded steps 0 and 1, as a v2 build wrote it) holding
 * the measurement rows of values (SQL), each (variant, m, status, median) of device 1, run
 * 1, fam/h/N=64; winners as given (bucket, measurement id). */
static int write_v2(const fixture *fx, const char *values, const char *winners) {
    sqlite3 *h;
    char sql[4096];
    int rc = sqlite3_open(fx->path, &h) != SQLITE_OK ||
             sqlite3_exec(h, kt_source_text("schema.sql", NULL), NULL, NULL, NULL) != SQLITE_OK ||
             sqlite3_exec(h, kt_source_text("schema_v2.sql", NULL), NULL, NULL, NULL) != SQLITE_OK;
    snprintf(sql, sizeof sql,
             "INSERT INTO meta VALUES ('schema_version', 2);"
             "INSERT INTO devices VALUES (1, 'NVIDIA H200', 90, 132, 13000, 13000);"
             "INSERT INTO runs (id, device_id) VALUES (1, 1);"
             "INSERT INTO measurements (run_id, device_id, family, source_hash, config, shape, variant_id, m, status, "
             "median_us) SELECT 1, 1, 'fam', 'h', 'CFG_' || column1, 'N=64', column1, column2, column3, column4 FROM "
             "(VALUES %s);"
             "INSERT INTO winners (device_id, family, source_hash, shape, m_bucket, variant_id, config, median_us, "
             "measurement_id) SELECT 1, 'fam', 'h', 'N=64', column1, m.variant_id, m.config, m.median_us, m.id FROM "
             "(VALUES %s) JOIN measurements m ON m.id = column2;",
             values, winners);
    rc = rc || sqlite3_exec(h, sql, NULL, NULL, NULL) != SQLITE_OK;
    if (rc) fprintf(stderr, "write_v2: %s\n", sqlite3_errmsg(h));
    sqlite3_close(h);
    return rc ? -1 : 0;
}

/* Opens fx->path writable (migrating it) with stderr captured into err. */
static int open_capturing(fixture *fx, char *err, size_t n) {
    char log[128];
    snprintf(log, sizeof log, "%s/stderr", fx->dir);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    int rc = kt_db_open(fx->path, 0, &fx->db);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    size_t len = 0;
    char *text = kt_read_file(log, &len);
    snprintf(err, n, "%s", text ? text : "");
    free(text);
    unlink(log);
    return rc;
}

/* v2 -> v3 on a file of several writers' duplicates: every row survives (kept, or moved to
 * measurements_folded), each unit keeps the row the v2 winner rule decided by, winners
 * follow their unit's kept row, the result is a valid v3 file, and stderr says what was
 * folded. Ids: a/1 launch-error 1, ok 2, ok 3; b/1 ok 4, ok 5; c/2 skipped 6, ok 7; d/2 ok 8;
 * a/2 ok 9, wrong-result 10. Winners: bucket 1 -> 5 (a duplicate), bucket 2 -> 7. */
KT_TEST(db_migrate_v2_duplicates) {
    fixture fx = {0};
    char buf[256], err[1024];
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kt_test_db_XXXXXX");
    EXPECT(mkdtemp(fx.dir) != NULL);
    snprintf(fx.path, sizeof fx.path, "%s/v2.db", fx.dir);
    EXPECT(write_v2(&fx,
                    "('a', 1, 'launch-error', NULL), ('a', 1, 'ok', 10), ('a', 1, 'ok', 9), ('b', 1, 'ok', 20), "
                    "('b', 1, 'ok', 21), ('c', 2, 'skipped', NULL), ('c', 2, 'ok', 5), ('d', 2, 'ok', 6), "
                    "('a', 2, 'ok', 8), ('a', 2, 'wrong-result', NULL)",
                    "(1, 5), (2, 7)") == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements") == 10);
    EXPECT(open_capturing(&fx, err, sizeof err) == 0);
    EXPECT(strstr(err, fx.path) && strstr(err, "5 duplicate rows of 4 units moved to its table measurements_folded"));
    kt_db_close(fx.db);
    fx.db = NULL;
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == KT_SCHEMA_VERSION);
    kt_test_query(fx.path, "PRAGMA integrity_check", buf, sizeof buf);
    EXPECT(!strcmp(buf, "ok"));
    kt_test_query(fx.path, "PRAGMA foreign_key_check", buf, sizeof buf);
    EXPECT(!strcmp(buf, ""));
    kt_test_query(fx.path, "SELECT group_concat(id) FROM (SELECT id FROM measurements ORDER BY id)", buf, sizeof buf);
    EXPECT(!strcmp(buf, "1,4,7,8,10"));
    kt_test_query(fx.path, "SELECT group_concat(id) FROM (SELECT id FROM measurements_folded ORDER BY id)", buf,
                  sizeof buf);
    EXPECT(!strcmp(buf, "2,3,5,6,9"));
    /* the folded rows keep their measured times */
    EXPECT(kt_test_query_long(fx.path, "SELECT sum(median_us) FROM measurements_folded") == 10 + 9 + 21 + 8);
    kt_test_query(fx.path,
                  "SELECT group_concat(measurement_id) FROM (SELECT measurement_id FROM winners ORDER BY m_bucket)",
                  buf, sizeof buf);
    EXPECT(!strcmp(buf, "4,7"));
    /* the unique key holds: a second row of a unit is refused (1), a new unit stored (0) */
    EXPECT(kt_db_open(fx.path, 0, &fx.db) == 0);
    fx.run_id = fx.device_id = 1;
    EXPECT(add(&fx, "fam", "h", "b", "N=64", 1, KT_OK, 3) == 1);
    EXPECT(add(&fx, "fam", "h", "e", "N=64", 1, KT_OK, 3) == 0);
    kt_db_close(fx.db);
    fx.db = NULL;
    cleanup(&fx);

    /* a v2 file without duplicates: no folded table, no message */
    EXPECT(mkdtemp(strcpy(fx.dir, "/tmp/kt_test_db_XXXXXX")) != NULL);
    snprintf(fx.path, sizeof fx.path, "%s/v2.db", fx.dir);
    EXPECT(write_v2(&fx, "('a', 1, 'ok', 10), ('b', 1, 'ok', 20)", "(1, 1)") == 0);
    EXPECT(open_capturing(&fx, err, sizeof err) == 0);
    EXPECT(!strstr(err, "folded"));
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM sqlite_master WHERE name = 'measurements_folded'") == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements") == 2);
    cleanup(&fx);
}

/* Child of the concurrency test: waits on the start pipe (so every child opens the still
 * absent file at the same instant), then with its own connection creates or finds the
 * schema, its device and a run, and writes n units every child writes too and n of its own,
 * with a winner update every 25 and a re-timing of the shared finalists (so transactions of
 * every kind contend). Writes how many of its units another child had stored first to
 * report; exits 0 on success. */
static void writer(const fixture *fx, int child, int n, int start, int report) {
    fixture mine = *fx;
    char go;
    if (read(start, &go, 1) != 0) _exit(3); /* EOF: the parent closed the pipe, all start */
    int existed = 0;
    if (kt_db_open(fx->path, 0, &mine.db) || kt_db_device_id(mine.db, &h200, &mine.device_id) ||
        kt_db_run_begin(mine.db, mine.device_id, "abc123", "kt tune --concurrent", &mine.run_id)) {
        fprintf(stderr, "writer %d: %s\n", child, kt_error());
        _exit(1);
    }
    for (int i = 0; i < 2 * n; i++) {
        char variant[17];
        snprintf(variant, sizeof variant, "%08x%08x", i < n ? 0xffu : (unsigned)child, (unsigned)(i % n));
        kt_measurement r = row(&mine, "fam", "h", variant, i < n ? "N=64" : "N=128", 1 + i % 8, KT_OK, 1 + i % n);
        int rc = kt_db_add_measurement(mine.db, &r);
        existed += rc == 1;
        if (rc < 0 || (i % 25 == 24 && kt_db_update_winner(mine.db, mine.device_id, "fam", "h", r.shape, r.m))) {
            fprintf(stderr, "writer %d: %s\n", child, kt_error());
            _exit(1);
        }
    }
    /* as a sweep does: re-time the finalists unless their re-timing is stored already */
    kt_retime rt[2] = {{"", 5, 1.0, 0.9, 1.1}, {"", 5, 9.0, 8.9, 9.1}};
    char ids[2][17];
    int retimed = 0, nf = kt_db_finalists(mine.db, mine.device_id, "fam", "h", "N=64", 1, 2, ids, &retimed);
    for (int i = 0; i < nf; i++) memcpy(rt[i].variant_id, ids[i], 17);
    if (nf != 2 ||
        (!retimed && kt_db_add_retimes(mine.db, mine.run_id, mine.device_id, "fam", "h", "N=64", 1, rt, 2))) {
        fprintf(stderr, "writer %d: %s\n", child, kt_error());
        _exit(1);
    }
    kt_db_close(mine.db);
    _exit(write(report, &existed, sizeof existed) == sizeof existed ? 0 : 2);
}

/* Several processes started at the same instant on a file that does not exist yet (one
 * `kt tune` per GPU or shard against one shared database): none fails with "database is
 * locked", the schema is made once, each unit is stored once (the first commit wins, the
 * others are told it existed), the one device row and a run per process, one re-timing
 * group. Failed on the old code: the shared units were stored once per child (no unique
 * key) and two re-timing groups were kept. */
KT_TEST(db_concurrent_writers) {
    enum { CHILDREN = 6, N = 60 };
    fixture fx = {0};
    char buf[32];
    pid_t pid[CHILDREN];
    int start[2], report[2];
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kt_test_db_XXXXXX");
    EXPECT(mkdtemp(fx.dir) != NULL && pipe(start) == 0 && pipe(report) == 0);
    snprintf(fx.path, sizeof fx.path, "%s/fresh.db", fx.dir);
    fflush(NULL); /* children must not flush the parent's buffered output again */
    for (int c = 0; c < CHILDREN; c++)
        if ((pid[c] = fork()) == 0) {
            close(start[1]);
            writer(&fx, c, N, start[0], report[1]);
        }
    close(start[1]); /* every child's read returns now */
    close(start[0]);
    close(report[1]);
    int existed = 0, got = 0;
    for (int c = 0, e; c < CHILDREN; c++) got += read(report[0], &e, sizeof e) == sizeof e ? (existed += e, 1) : 0;
    close(report[0]);
    for (int c = 0; c < CHILDREN; c++) {
        int status = -1;
        EXPECT(pid[c] > 0 && waitpid(pid[c], &status, 0) == pid[c]);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT(got == CHILDREN && existed == (CHILDREN - 1) * N);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements") == N + CHILDREN * N);
    EXPECT(
        kt_test_query_long(fx.path, "SELECT count(*) FROM (SELECT DISTINCT variant_id, shape, m FROM measurements)") ==
        N + CHILDREN * N);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM devices") == 1);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM runs") == CHILDREN);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM retimes WHERE variant_id LIKE '000000ff%'") == 2);
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == KT_SCHEMA_VERSION);
    kt_test_query(fx.path, "PRAGMA integrity_check", buf, sizeof buf);
    EXPECT(!strcmp(buf, "ok"));
    cleanup(&fx);
}

/* Counts CSV records, honouring quoted fields that hold line breaks. */
static int csv_records(const char *s) {
    int n = 0, quoted = 0;
    for (; *s; s++) {
        if (*s == '"')
            quoted = !quoted;
        else if (*s == '\n' && !quoted)
            n++;
    }
    return n;
}

/* Counts JSON objects: '{' outside strings. */
static int json_objects(const char *s) {
    int n = 0, in_string = 0;
    for (; *s; s++) {
        if (in_string && *s == '\\')
            s++;
        else if (*s == '"')
            in_string = !in_string;
        else if (*s == '{' && !in_string)
            n++;
    }
    return n;
}

static char *export(kt_db *db, const char *format, int *rc) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    *rc = kt_db_export(db, format, out);
    fclose(out);
    return text;
}

KT_TEST(db_export) {
    fixture fx;
    int rc;
    SETUP(fx);
    char *text = export(fx.db, "json", &rc);
    EXPECT(rc == 0 && text && !strcmp(text, "[]\n"));
    free(text);
    EXPECT(add(&fx, "fam", "h", "v1", "N=64", 1, KT_OK, 1.5) == 0);
    EXPECT(add(&fx, "fam", "h", "v2", "N=64", 2, KT_SKIPPED, 0) == 0);
    kt_measurement r = row(&fx, "fam", "h", "v3", "N=64", 3, KT_COMPILE_ERROR, 0);
    snprintf(r.error, sizeof r.error, "line 1: \"x\", bad\nline 2:\ttab\\");
    EXPECT(kt_db_add_measurement(fx.db, &r) == 0);

    text = export(fx.db, "json", &rc);
    EXPECT(rc == 0 && text);
    if (text) {
        EXPECT(text[0] == '[' && json_objects(text) == 3);
        EXPECT(strstr(text, "\"error\": \"line 1: \\\"x\\\", bad\\nline 2:\\ttab\\\\\"") != NULL);
        EXPECT(strstr(text, "\"device\": \"NVIDIA H200\"") != NULL);
        EXPECT(strstr(text, "\"median_us\": 1.5") != NULL);
        EXPECT(strstr(text, "\"error\": null") != NULL);
    }
    free(text);

    text = export(fx.db, "csv", &rc);
    EXPECT(rc == 0 && text);
    if (text) {
        EXPECT(csv_records(text) == 4);
        EXPECT(!strncmp(text, "id,run_id,device,", 17));
        EXPECT(strstr(text, ",\"line 1: \"\"x\"\", bad\nline 2:\ttab\\\",") != NULL);
        EXPECT(strstr(text, ",NVIDIA H200,") != NULL);
    }
    free(text);

    text = export(fx.db, "xml", &rc);
    EXPECT(rc == -1 && error_has("unknown export format"));
    free(text);
    cleanup(&fx);
}

KT_TEST(db_show) {
    fixture fx;
    char *text = NULL;
    size_t len = 0;
    SETUP(fx);
    FILE *out = open_memstream(&text, &len);
    EXPECT(kt_db_show(fx.db, out) == 0);
    fclose(out);
    EXPECT(text && strstr(text, "winners\n  (none)\n") && strstr(text, "measurements\n  (none)\n"));
    free(text);
    EXPECT(add(&fx, "fam", "h", "v1", "N=64", 1, KT_OK, 1.5) == 0);
    EXPECT(add(&fx, "fam", "h", "v2", "N=64", 1, KT_WRONG_RESULT, 1) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "fam", "h", "N=64", 1) == 0);
    out = open_memstream(&text, &len);
    EXPECT(kt_db_show(fx.db, out) == 0);
    fclose(out);
    EXPECT(text && strstr(text, "NVIDIA H200") && strstr(text, "kt tune --test"));
    EXPECT(text && strstr(text, "CFG_v1") && strstr(text, "1.50"));
    EXPECT(text && strstr(text, "wrong-result"));
    free(text);
    cleanup(&fx);
}

/* Looks up probe at (LAYOUT, N, B) on the H200. */
static int probe_lookup(kt_db *db, const kt_family *f, const char *shape, long b, kt_winner *w) {
    kt_problem p;
    if (kt_parse_shape(f, shape, &p)) return -2;
    p.m = b;
    return kt_db_lookup(db, &h200, f, &p, w);
}

/* A categorical key field must match exactly (never the nearest); sizes go by distance
 * among rows of the same category; the batch buckets are the family's own (probe: 1, 4, 16,
 * 64, ...), in the winner rows too. */
KT_TEST(db_lookup_categories_and_family_buckets) {
    fixture fx;
    kt_winner w;
    char hash[17];
    const kt_family *f = kt_family_find("probe");
    EXPECT(f != NULL);
    if (!f) return;
    kt_hex64(kt_family_source_hash(f), hash);
    SETUP(fx);
    EXPECT(add(&fx, "probe", hash, "v4", "LAYOUT=V4,N=4096", 10, KT_OK, 3.0) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "probe", hash, "LAYOUT=V4,N=4096", 10) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT m_bucket FROM winners WHERE variant_id = 'v4'") == 16);
    EXPECT(probe_lookup(fx.db, f, "LAYOUT=V4,N=4096", 13, &w) == 0);
    EXPECT(w.level == KT_EXACT && !strcmp(w.variant_id, "v4") && w.m_bucket == 16);
    EXPECT(probe_lookup(fx.db, f, "LAYOUT=V4,N=4096", 30, &w) == 0); /* bucket 64: the nearest M */
    EXPECT(w.level == KT_NEAREST_M && !strcmp(w.variant_id, "v4"));
    EXPECT(probe_lookup(fx.db, f, "LAYOUT=V4,N=512", 16, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "v4"));
    /* the other layout at the very same sizes: never served, the default */
    EXPECT(probe_lookup(fx.db, f, "LAYOUT=V3,N=4096", 16, &w) == 1);
    EXPECT(w.level == KT_DEFAULT && strcmp(w.variant_id, "v4") != 0);
    /* with a V3 row far away in N, V3 is served that one, and V4 still its own */
    EXPECT(add(&fx, "probe", hash, "v3", "LAYOUT=V3,N=64", 16, KT_OK, 9.0) == 0);
    EXPECT(kt_db_update_winner(fx.db, fx.device_id, "probe", hash, "LAYOUT=V3,N=64", 16) == 0);
    EXPECT(probe_lookup(fx.db, f, "LAYOUT=V3,N=4096", 16, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "v3"));
    EXPECT(probe_lookup(fx.db, f, "LAYOUT=V4,N=64", 16, &w) == 0);
    EXPECT(w.level == KT_NEAREST_SHAPE && !strcmp(w.variant_id, "v4"));
    cleanup(&fx);
}
