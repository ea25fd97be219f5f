/* test_allreduce.c — CPU tests of the NCCL all-reduce settings of schema 4: the size buckets,
 * the DB round trip (db/db_write.c kt_db_set_allreduce, db/db.c kt_db_allreduce_lookup), the
 * selection by bucket, bad rows refused on the way in and on the way out, the runtime's
 * reading of it (runtime/tp.c kt_tp_configure: NCCL_PROTO / NCCL_ALGO, no NCCL needed), the
 * merge, and older files read as they are. */
#include "kt.h"
#include "../../db/kt_db_write.h"
#include "../../runtime/tp.h"
#include "test.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const kt_db_device h200x = {"NVIDIA H200", 90, 132, 13000, 13000};

/* A temp folder with a writable DB, the device and a run (commit "c0ffee"). */
typedef struct ar_fixture {
    char dir[64], path[96];
    kt_db *db;
    long long device_id, run_id;
} ar_fixture;

static int ar_setup(ar_fixture *fx, const char *name) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/kt_test_ar_XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    snprintf(fx->path, sizeof fx->path, "%s/%s", fx->dir, name);
    if (kt_db_open(fx->path, 0, &fx->db) || kt_db_device_id(fx->db, &h200x, &fx->device_id) ||
        kt_db_run_begin(fx->db, fx->device_id, "c0ffee", "kt bench allreduce --test", &fx->run_id)) {
        fprintf(stderr, "ar_setup: %s\n", kt_error());
        return -1;
    }
    return 0;
}

static void ar_cleanup(ar_fixture *fx) {
    kt_db_close(fx->db);
    fx->db = NULL;
    const char *side[] = {"", "-wal", "-shm"};
    char p[160];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", fx->path, side[i]);
        unlink(p);
    }
    rmdir(fx->dir);
}

static kt_allreduce_row ar_row(const ar_fixture *fx, int world, size_t bytes, const char *proto, const char *algo,
                               double median_us) {
    kt_allreduce_row r = {.device_id = fx->device_id,
                          .run_id = fx->run_id,
                          .world = world,
                          .nccl_version = 22703,
                          .bytes = bytes,
                          .median_us = median_us,
                          .min_us = median_us * 0.95,
                          .max_us = median_us * 1.1,
                          .default_us = median_us * 1.3,
                          .floor_us = median_us / 2};
    snprintf(r.proto, sizeof r.proto, "%s", proto);
    snprintf(r.algo, sizeof r.algo, "%s", algo);
    return r;
}

static int ar_add(const ar_fixture *fx, int world, size_t bytes, const char *proto, const char *algo, double us) {
    kt_allreduce_row r = ar_row(fx, world, bytes, proto, algo, us);
    return kt_db_set_allreduce(fx->db, &r);
}

/* The setting served for (world, bytes) as "PROTO/ALGO@BUCKET:LEVEL", "default@BUCKET" or "ERR". */
static const char *served(kt_db *db, const kt_db_device *dev, int world, size_t bytes) {
    static char out[96];
    kt_allreduce_setting s;
    int rc = kt_db_allreduce_lookup(db, dev, world, bytes, &s);
    if (rc < 0)
        snprintf(out, sizeof out, "ERR");
    else if (rc)
        snprintf(out, sizeof out, "default@%ld", s.bytes_bucket);
    else
        snprintf(out, sizeof out, "%s/%s@%ld:%s", s.proto, s.algo, s.bytes_bucket,
                 s.level == KT_EXACT ? "exact" : "near");
    return out;
}

KT_TEST(allreduce_buckets) {
    EXPECT(kt_allreduce_bucket(1) == 1);
    EXPECT(kt_allreduce_bucket(2) == 2);
    EXPECT(kt_allreduce_bucket(3) == 4);
    EXPECT(kt_allreduce_bucket(8192) == 8192);
    EXPECT(kt_allreduce_bucket(8193) == 16384);
    EXPECT(kt_allreduce_bucket(14336) == 16384); /* hidden 7168 x B=1 bf16 */
    EXPECT(kt_allreduce_bucket((size_t)1 << 40) == 1L << 40);
    EXPECT(kt_allreduce_setting_known("", ""));
    EXPECT(kt_allreduce_setting_known("LL128", "Tree"));
    EXPECT(!kt_allreduce_setting_known("LL", ""));
    EXPECT(!kt_allreduce_setting_known("", "Ring"));
    EXPECT(!kt_allreduce_setting_known("ll", "ring"));
    EXPECT(!kt_allreduce_setting_known("LL;rm", "Ring"));
}

/* Stored rows come back with their provenance; a query is served its bucket's row, else the
 * nearest bucket's (ties: the larger), else NCCL's default; another world size or device
 * never borrows a row; a later run replaces a key's row. */
KT_TEST(allreduce_db_roundtrip_and_selection) {
    ar_fixture fx;
    EXPECT(ar_setup(&fx, "kt.db") == 0);
    EXPECT(ar_add(&fx, 4, 8192, "LL", "Ring", 10.5) == 0);      /* bucket 8192 */
    EXPECT(ar_add(&fx, 4, 131072, "LL128", "Ring", 20) == 0);   /* bucket 131072 */
    EXPECT(ar_add(&fx, 4, 1048576, "Simple", "Ring", 90) == 0); /* bucket 1048576 */
    EXPECT(ar_add(&fx, 2, 14336, "", "", 7) == 0);              /* bucket 16384: NCCL's own */
    kt_allreduce_setting s;
    EXPECT(kt_db_allreduce_lookup(fx.db, &h200x, 4, 8192, &s) == 0);
    EXPECT(!strcmp(s.proto, "LL") && !strcmp(s.algo, "Ring") && s.bytes_bucket == 8192 && s.level == KT_EXACT);
    EXPECT(s.median_us == 10.5 && fabs(s.default_us - 10.5 * 1.3) < 1e-9 && s.run_id == fx.run_id);
    EXPECT(!strcmp(s.run_commit, "c0ffee") && strlen(s.run_at) == 24 && s.run_at[23] == 'Z');
    EXPECT(!strcmp(served(fx.db, &h200x, 4, 6000), "LL/Ring@8192:exact")); /* 6000 -> bucket 8192 */
    EXPECT(!strcmp(served(fx.db, &h200x, 4, 12000), "LL/Ring@8192:near")); /* 16384: 1 from 8192 */
    EXPECT(!strcmp(served(fx.db, &h200x, 4, 524288), "Simple/Ring@1048576:near"));
    EXPECT(!strcmp(served(fx.db, &h200x, 4, 32768), "LL128/Ring@131072:near")); /* 2 from each: larger */
    EXPECT(!strcmp(served(fx.db, &h200x, 4, (size_t)1 << 30), "Simple/Ring@1048576:near"));
    EXPECT(!strcmp(served(fx.db, &h200x, 2, 16384), "/@16384:exact"));
    EXPECT(!strcmp(served(fx.db, &h200x, 8, 8192), "default@8192"));
    kt_db_device other = h200x;
    other.sm_count = 114;
    EXPECT(!strcmp(served(fx.db, &other, 4, 8192), "default@8192"));
    /* another driver of the same GPU is served (like kernel winners) */
    other = h200x;
    other.driver_version = 12090;
    EXPECT(!strcmp(served(fx.db, &other, 4, 8192), "LL/Ring@8192:exact"));
    EXPECT(!strcmp(served(NULL, &h200x, 4, 8192), "default@8192"));
    EXPECT(!strcmp(served(fx.db, &h200x, 0, 8192), "ERR"));
    /* a later run of the same key replaces the row */
    EXPECT(kt_db_run_begin(fx.db, fx.device_id, "beef", "kt bench allreduce", &fx.run_id) == 0);
    EXPECT(ar_add(&fx, 4, 5000, "Simple", "Tree", 9) == 0);
    EXPECT(!strcmp(served(fx.db, &h200x, 4, 8192), "Simple/Tree@8192:exact"));
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM allreduce_winners WHERE world = 4") == 3);
    EXPECT(kt_test_query_long(fx.path, "SELECT bytes FROM allreduce_winners WHERE bytes_bucket = 8192") == 5000);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM allreduce_winners WHERE floor_us IS NULL") == 0);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    EXPECT(kt_db_show(fx.db, out) == 0);
    fclose(out);
    EXPECT(text && strstr(text, "all-reduce settings") && strstr(text, "Simple/Tree") && strstr(text, "LL128/Ring") &&
           strstr(text, "default "));
    free(text);
    ar_cleanup(&fx);
}

/* Bad rows: refused by kt_db_set_allreduce naming the reason, by the schema's checks when
 * written around kt, and skipped by the lookup when a file holds one anyway. */
KT_TEST(allreduce_bad_rows_refused) {
    ar_fixture fx;
    EXPECT(ar_setup(&fx, "kt.db") == 0);
    kt_allreduce_row r;
    struct {
        int world;
        size_t bytes;
        const char *proto, *algo;
        double us;
        const char *why;
    } bad[] = {{0, 8192, "LL", "Ring", 5, "world size"},   {9, 8192, "LL", "Ring", 5, "world size"},
               {4, 0, "LL", "Ring", 5, "message size"},    {4, 8192, "LL", "", 5, "unknown NCCL"},
               {4, 8192, "XX", "Ring", 5, "unknown NCCL"}, {4, 8192, "LL", "Ring", NAN, "times"},
               {4, 8192, "LL", "Ring", -1, "times"},       {4, 8192, "LL", "Ring", INFINITY, "times"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = ar_row(&fx, bad[i].world, bad[i].bytes, bad[i].proto, bad[i].algo, bad[i].us);
        EXPECT(kt_db_set_allreduce(fx.db, &r) == -1 && strstr(kt_error(), bad[i].why) && strstr(kt_error(), "refused"));
    }
    r = ar_row(&fx, 4, 8192, "LL", "Ring", 5);
    r.min_us = 6; /* min above the median */
    EXPECT(kt_db_set_allreduce(fx.db, &r) == -1 && strstr(kt_error(), "min <= median"));
    r = ar_row(&fx, 4, 8192, "LL", "Ring", 5);
    r.nccl_version = 0;
    EXPECT(kt_db_set_allreduce(fx.db, &r) == -1 && strstr(kt_error(), "NCCL version"));
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM allreduce_winners") == 0);
    /* around kt: the schema refuses an unknown protocol and a bucket that is no power of two */
    char buf[64];
    kt_test_query(fx.path,
                  "INSERT INTO allreduce_winners (device_id, world, bytes_bucket, bytes, proto, algo, median_us, "
                  "min_us, max_us, default_us, nccl_version, run_id) VALUES (1, 4, 8192, 8192, 'XX', 'Ring', 5, 4, 6, "
                  "7, 22703, 1)",
                  buf, sizeof buf);
    EXPECT(!strcmp(buf, "ERR"));
    kt_test_query(fx.path,
                  "INSERT INTO allreduce_winners (device_id, world, bytes_bucket, bytes, proto, algo, median_us, "
                  "min_us, max_us, default_us, nccl_version, run_id) VALUES (1, 4, 12288, 12288, 'LL', 'Ring', 5, 4, "
                  "6, 7, 22703, 1)",
                  buf, sizeof buf);
    EXPECT(!strcmp(buf, "ERR"));
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM allreduce_winners") == 0);
    /* a file holding one anyway (checks off): the lookup refuses it and serves the next row */
    EXPECT(ar_add(&fx, 4, 65536, "LL128", "Tree", 12) == 0);
    sqlite3 *h;
    EXPECT(sqlite3_open(fx.path, &h) == SQLITE_OK);
    EXPECT(sqlite3_exec(h,
                        "PRAGMA ignore_check_constraints = ON; INSERT INTO allreduce_winners (device_id, world, "
                        "bytes_bucket, bytes, proto, algo, median_us, min_us, max_us, default_us, nccl_version, "
                        "run_id) VALUES (1, 4, 8192, 8192, 'LL;export X=1', 'Ring', 5, 4, 6, 7, 22703, 1)",
                        NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM allreduce_winners") == 2);
    EXPECT(!strcmp(served(fx.db, &h200x, 4, 8192), "LL128/Tree@65536:near"));
    ar_cleanup(&fx);
}

/* The runtime's start: kt_tp_configure puts the DB's setting into NCCL_PROTO / NCCL_ALGO,
 * leaves them unset for NCCL's own choice (no row, or a row of it), and keeps what the user
 * set. */
KT_TEST(allreduce_runtime_applies_setting) {
    ar_fixture fx;
    EXPECT(ar_setup(&fx, "kt.db") == 0);
    EXPECT(ar_add(&fx, 4, 8192, "LL", "Tree", 10) == 0);
    EXPECT(ar_add(&fx, 4, 1048576, "", "", 80) == 0);
    const char *saved_proto = getenv("NCCL_PROTO"), *saved_algo = getenv("NCCL_ALGO");
    char keep_proto[64] = "", keep_algo[64] = "";
    if (saved_proto) snprintf(keep_proto, sizeof keep_proto, "%s", saved_proto);
    if (saved_algo) snprintf(keep_algo, sizeof keep_algo, "%s", saved_algo);
    kt_allreduce_setting s;
    unsetenv("NCCL_PROTO");
    unsetenv("NCCL_ALGO");
    EXPECT(kt_tp_configure(fx.db, &h200x, 4, 4096 * 2, &s) == 0);
    EXPECT(getenv("NCCL_PROTO") && !strcmp(getenv("NCCL_PROTO"), "LL"));
    EXPECT(getenv("NCCL_ALGO") && !strcmp(getenv("NCCL_ALGO"), "Tree"));
    EXPECT(s.level == KT_EXACT && s.run_id == fx.run_id);
    unsetenv("NCCL_PROTO");
    unsetenv("NCCL_ALGO");
    EXPECT(kt_tp_configure(fx.db, &h200x, 4, 4096 * 2 * 128, &s) == 0); /* B=128: NCCL's own, stored */
    EXPECT(!getenv("NCCL_PROTO") && !getenv("NCCL_ALGO") && s.level == KT_EXACT);
    EXPECT(kt_tp_configure(fx.db, &h200x, 8, 8192, &s) == 0); /* no row for 8 GPUs */
    EXPECT(!getenv("NCCL_PROTO") && !getenv("NCCL_ALGO") && s.level == KT_DEFAULT);
    EXPECT(kt_tp_configure(NULL, &h200x, 4, 8192, &s) == 0 && s.level == KT_DEFAULT && !getenv("NCCL_PROTO"));
    setenv("NCCL_PROTO", "Simple", 1); /* the user's choice wins, and no ALGO is added to it */
    EXPECT(kt_tp_configure(fx.db, &h200x, 4, 8192, &s) == 0);
    EXPECT(!strcmp(getenv("NCCL_PROTO"), "Simple") && !getenv("NCCL_ALGO"));
    EXPECT(kt_tp_configure(fx.db, &h200x, 9, 8192, &s) == -1 && strstr(kt_error(), "world size 9"));
    unsetenv("NCCL_PROTO");
    if (*keep_proto) setenv("NCCL_PROTO", keep_proto, 1);
    if (*keep_algo) setenv("NCCL_ALGO", keep_algo, 1);
    ar_cleanup(&fx);
}

/* A schema-3 file (before the table): read-only it serves its kernel winners and no
 * all-reduce rows, show works; merging it is refused until it is migrated; opened writable
 * it becomes schema 4 with the empty table. */
KT_TEST(allreduce_older_file_readable) {
    ar_fixture fx = {0};
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kt_test_ar_XXXXXX");
    EXPECT(mkdtemp(fx.dir) != NULL);
    snprintf(fx.path, sizeof fx.path, "%s/v3.db", fx.dir);
    sqlite3 *h;
    EXPECT(sqlite3_open(fx.path, &h) == SQLITE_OK);
    const char *steps[] = {"schema.sql", "schema_v2.sql", "schema_v3.sql"};
    for (int i = 0; i < 3; i++) EXPECT(sqlite3_exec(h, kt_source_text(steps[i], NULL), NULL, NULL, NULL) == SQLITE_OK);
    EXPECT(sqlite3_exec(h,
                        "DROP TABLE measurements_folded; INSERT INTO meta VALUES ('schema_version', 3);"
                        "INSERT INTO devices VALUES (1, 'NVIDIA H200', 90, 132, 13000, 13000);"
                        "INSERT INTO runs (id, device_id) VALUES (1, 1);"
                        "INSERT INTO measurements (id, run_id, device_id, family, source_hash, variant_id, config, "
                        "shape, m, status, median_us) VALUES (1, 1, 1, 'selftest', 'h', 'v', 'C', 'N=64', 1, 'ok', 3);",
                        NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
    kt_db *ro = NULL;
    EXPECT(kt_db_open(fx.path, 1, &ro) == 0);
    EXPECT(ro && !strcmp(served(ro, &h200x, 4, 8192), "default@8192"));
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    EXPECT(ro && kt_db_show(ro, out) == 0);
    fclose(out);
    EXPECT(text && strstr(text, "measurements") && !strstr(text, "all-reduce"));
    free(text);
    kt_db_close(ro);
    ar_fixture dst;
    EXPECT(ar_setup(&dst, "dst.db") == 0);
    EXPECT(kt_db_merge(dst.db, fx.path) == -1 && strstr(kt_error(), "schema version 3 is older"));
    ar_cleanup(&dst);
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == 3);
    EXPECT(kt_db_open(fx.path, 0, &fx.db) == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT value FROM meta WHERE key = 'schema_version'") == KT_SCHEMA_VERSION);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM allreduce_winners") == 0);
    EXPECT(kt_test_query_long(fx.path, "SELECT count(*) FROM measurements") == 1);
    ar_cleanup(&fx);
}

/* kt db merge carries the settings: a key dst lacks is added, an older dst row replaced, a
 * newer one kept; the run it points at is dst's copy of src's run. */
KT_TEST(allreduce_merge) {
    ar_fixture a, b;
    EXPECT(ar_setup(&a, "a.db") == 0);
    EXPECT(ar_setup(&b, "b.db") == 0);
    EXPECT(ar_add(&a, 4, 8192, "LL", "Ring", 10) == 0);     /* older than b's 8192 row */
    EXPECT(ar_add(&a, 4, 65536, "LL128", "Ring", 12) == 0); /* newer than b's 65536 row (set below) */
    usleep(5000);
    EXPECT(ar_add(&b, 4, 8192, "Simple", "Tree", 9) == 0);
    EXPECT(ar_add(&b, 2, 8192, "LL", "Tree", 4) == 0);
    EXPECT(ar_add(&b, 4, 65536, "Simple", "Ring", 30) == 0);
    kt_test_query(b.path, "UPDATE allreduce_winners SET updated_at = '2000-01-01T00:00:00.000Z' WHERE bytes = 65536",
                  (char[8]){0}, 8);
    EXPECT(kt_db_merge(a.db, b.path) == 0);
    EXPECT(!strcmp(served(a.db, &h200x, 4, 8192), "Simple/Tree@8192:exact"));
    EXPECT(!strcmp(served(a.db, &h200x, 2, 8192), "LL/Tree@8192:exact"));
    EXPECT(!strcmp(served(a.db, &h200x, 4, 65536), "LL128/Ring@65536:exact"));
    EXPECT(kt_test_query_long(a.path, "SELECT count(*) FROM allreduce_winners a JOIN runs r ON r.id = a.run_id "
                                      "WHERE r.cmdline = 'kt bench allreduce --test'") == 3);
    EXPECT(kt_test_query_long(a.path, "SELECT count(DISTINCT run_id) FROM allreduce_winners") == 2);
    ar_cleanup(&a);
    ar_cleanup(&b);
}
