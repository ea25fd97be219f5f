/* db.c — the winners database's read side (libkt, SQLite): opening with schema creation and
 * migration, the statement helpers db_write.c shares (db_internal.h), the lookup ladder the
 * runtime uses (exact -> nearest M -> nearest shape -> default), show and export. */
#include "db_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int kt_status_SQL(int status, const char *call, const char *file, int line) {
    if (status == SQLITE_OK || status == SQLITE_ROW || status == SQLITE_DONE) return 0;
    return kt_status_fail("SQLite", sqlite3_errstr(status), status, call, file, line);
}

/* Re-raises the error KT_CHECK just recorded with the DB path and SQLite's own detail
 * (sqlite3_errmsg names the table or syntax error; the status code alone does not). What
 * is wrong with the user's file (damaged, unreadable, read-only, disk full, locked) is said
 * of the file, without kt's source line; the rest are kt's bugs and keep it. */
int kt_db_fail(kt_db *db) {
    char first[2048];
    snprintf(first, sizeof first, "%s", kt_error());
    int code = sqlite3_errcode(db->h);
    const char *detail = sqlite3_errmsg(db->h);
    switch (code & 0xff) {
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
            return kt_fail("%s is damaged: %s", db->path, detail);
        case SQLITE_CANTOPEN:
            return kt_fail("cannot open %s: %s", db->path,
                           sqlite3_system_errno(db->h) ? strerror(sqlite3_system_errno(db->h)) : detail);
        case SQLITE_READONLY:
            return kt_fail("%s cannot be written here: %s", db->path, detail);
        case SQLITE_IOERR:
        case SQLITE_FULL:
        case SQLITE_PERM:
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
            return kt_fail("%s: %s", db->path, detail);
    }
    if (code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE || !strcmp(detail, sqlite3_errstr(code)))
        return kt_fail("%s (%s)", first, db->path);
    return kt_fail("%s (%s: %s)", first, db->path, detail);
}

/* How long a writer keeps retrying when another process holds the database (on top of
 * SQLite's own busy wait of BUSY_TIMEOUT_MS per attempt). */
#define BUSY_TIMEOUT_MS 10000
#define BUSY_RETRY_S 120.0

/* Whether the last failure on db's connection was another connection holding a lock. */
static int busy(kt_db *db) {
    int code = sqlite3_errcode(db->h) & 0xff;
    return code == SQLITE_BUSY || code == SQLITE_LOCKED;
}

/* Sleeps before retry `attempt`: 1, 2, 4 ... 64 ms, then 100 ms, plus up to 1 ms by pid so
 * processes that collided do not collide again in step. */
static void busy_sleep(int attempt) {
    long ms = attempt < 7 ? 1L << attempt : 100;
    struct timespec ts = {0, ms * 1000000L + (long)(getpid() % 1000) * 1000L};
    nanosleep(&ts, NULL);
}

static int bind(sqlite3_stmt *st, int index, const sql_arg *a) {
    switch (a->type) {
        case ARG_INT:
            return sqlite3_bind_int64(st, index, a->i);
        case ARG_REAL:
            return sqlite3_bind_double(st, index, a->d);
        default:
            return a->s ? sqlite3_bind_text(st, index, a->s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, index);
    }
}

/* Prepares text into *st, binds args to ?1..?n and hands every result row to row. */
static int step_all(sqlite3 *h, const char *text, sqlite3_stmt **st, const sql_arg *args, int n, row_fn row,
                    void *ctx) {
    KT_CHECK(SQL, sqlite3_prepare_v2(h, text, -1, st, NULL));
    for (int i = 0; i < n; i++) KT_CHECK(SQL, bind(*st, i + 1, &args[i]));
    for (;;) {
        int rc;
        KT_CHECK(SQL, rc = sqlite3_step(*st));
        if (rc == SQLITE_DONE) return 0;
        if (row && row(*st, ctx)) return -1;
    }
}

/* Runs one SQL statement; the statement is finalized whatever happens. Outside a
 * transaction a statement that finds the database busy is retried (inside one, the whole
 * transaction is: kt_db_transaction()). */
int kt_db_sql(kt_db *db, const char *text, const sql_arg *args, int n, row_fn row, void *ctx) {
    double start = kt_now();
    for (int attempt = 0;; attempt++) {
        sqlite3_stmt *st = NULL;
        int rc = step_all(db->h, text, &st, args, n, row, ctx);
        int again = rc && sqlite3_get_autocommit(db->h) && busy(db) && kt_now() - start < BUSY_RETRY_S;
        if (rc && !again) rc = kt_db_fail(db);
        /* finalize only repeats the status of the last step, which was checked above */
        sqlite3_finalize(st);
        if (!again) return rc;
        busy_sleep(attempt);
    }
}

/* Runs a script of several statements (a migration step). */
static int exec_script(sqlite3 *h, const char *text) {
    KT_CHECK(SQL, sqlite3_exec(h, text, NULL, NULL, NULL));
    return 0;
}

/* Row callback: column 0 as an integer into *(long long *)ctx. */
int kt_db_row_int(sqlite3_stmt *st, void *ctx) {
    *(long long *)ctx = sqlite3_column_int64(st, 0);
    return 0;
}

/* Runs body inside BEGIN IMMEDIATE ... COMMIT: the write lock is taken up front (waiting
 * up to busy_timeout for other writers) so the transaction can never fail half-way with
 * SQLITE_BUSY; on any failure it is rolled back and the first error kept. */
int kt_db_transaction(kt_db *db, int (*body)(kt_db *, const void *), const void *ctx) {
    double start = kt_now();
    for (int attempt = 0;; attempt++) {
        if (kt_db_sql(db, "BEGIN IMMEDIATE", NO_ARGS, NULL, NULL)) return -1;
        if (!body(db, ctx) && !kt_db_sql(db, "COMMIT", NO_ARGS, NULL, NULL)) return 0;
        int again = busy(db) && kt_now() - start < BUSY_RETRY_S; /* e.g. a commit waiting on readers */
        /* SQLite may already have rolled back (e.g. on I/O errors); a failing ROLLBACK
         * would only hide the error that matters */
        if (!sqlite3_get_autocommit(db->h)) sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
        if (!again) return -1;
        busy_sleep(attempt);
    }
}

/* ------------------------------------------------------------------ buckets */

/* The registered family called name, or NULL (no error: an unknown family of a merged DB
 * buckets by the GEMM ladder). */
static const kt_family *family_named(const char *name) {
    for (int i = 0; name && i < kt_family_count(); i++)
        if (!strcmp(kt_family_at(i)->name, name)) return kt_family_at(i);
    return NULL;
}

/* The bucket of batch size m in family's ladder. */
long kt_db_bucket_of(const char *family, long m) { return kt_family_bucket(family_named(family), m); }

/* kt_db_bucket_of() as the SQL function kt_bucket(family, m), so winner queries bucket in SQL. */
static void sql_bucket(sqlite3_context *c, int argc, sqlite3_value **argv) {
    (void)argc;
    sqlite3_result_int64(
        c, kt_db_bucket_of((const char *)sqlite3_value_text(argv[0]), (long)sqlite3_value_int64(argv[1])));
}

/* --------------------------------------------------------- open, migrations */

/* Migration steps in order: step i takes a DB from schema version i to i + 1 (version 0
 * is an empty file). Each names an embedded file under db/ (the Makefile embeds every
 * .sql file there). A schema change appends a step and bumps KT_SCHEMA_VERSION in kt.h. */
static const char *const migrations[] = {"schema.sql", "schema_v2.sql", "schema_v3.sql", "schema_v4.sql"};
_Static_assert(sizeof migrations / sizeof *migrations == KT_SCHEMA_VERSION, "one migration step per schema version");

/* Reads the schema version: 0 for an empty file; fails for a file that is not SQLite,
 * a SQLite file that is not a kt DB, or a DB newer than this build. */
static int schema_version(kt_db *db, int *version) {
    long long objects = 0, has_meta = 0, v = -1;
    /* the first read is where SQLite finds that the file is not a database at all */
    if (kt_db_sql(db, "SELECT count(*) FROM sqlite_master", NO_ARGS, kt_db_row_int, &objects))
        return sqlite3_errcode(db->h) == SQLITE_NOTADB
                   ? kt_fail("%s: not a kt database (file is not a database)", db->path)
                   : -1;
    if (kt_db_sql(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", NO_ARGS,
                  kt_db_row_int, &has_meta))
        return -1;
    if (!objects) {
        *version = 0;
        return 0;
    }
    if (has_meta && kt_db_sql(db, "SELECT value FROM meta WHERE key = 'schema_version' AND typeof(value) = 'integer'",
                              NO_ARGS, kt_db_row_int, &v))
        return -1;
    if (v < 1) return kt_fail("%s: not a kt database (no schema_version in a meta table)", db->path);
    if (v > KT_SCHEMA_VERSION)
        return kt_fail("%s: schema version %lld is newer than this build's %d; update kt", db->path, v,
                       KT_SCHEMA_VERSION);
    *version = (int)v;
    return 0;
}

/* After migration step 2 (schema_v3.sql): says how many duplicate measurements it moved to
 * measurements_folded, or drops that table when there were none (a file that had no
 * duplicates gets the same schema as a new one). */
static int report_folded(kt_db *db) {
    long long folded = 0, units = 0;
    if (kt_db_sql(db, "SELECT count(*) FROM measurements_folded", NO_ARGS, kt_db_row_int, &folded)) return -1;
    if (!folded) return kt_db_sql(db, "DROP TABLE measurements_folded", NO_ARGS, NULL, NULL);
    if (kt_db_sql(db,
                  "SELECT count(*) FROM (SELECT DISTINCT device_id, family, source_hash, shape, m, variant_id "
                  "FROM measurements_folded)",
                  NO_ARGS, kt_db_row_int, &units))
        return -1;
    fprintf(stderr,
            "kt: %s: schema 3 keeps one measurement per (device, family, hash, variant, shape, m): %lld duplicate "
            "rows of %lld units moved to its table measurements_folded (kept per unit: a wrong-result or "
            "launch-error row, else the first ok row, else the first)\n",
            db->path, folded, units);
    return 0;
}

/* Applies the missing migration steps. Runs under the write lock and re-reads the
 * version, so a concurrent opener that migrated first is not migrated again. */
static int migrate(kt_db *db, const void *unused) {
    (void)unused;
    int v;
    if (schema_version(db, &v)) return -1;
    for (; v < KT_SCHEMA_VERSION; v++) {
        const char *text = kt_source_text(migrations[v], NULL);
        if (!text) return kt_fail("%s: migration %s is not embedded in this binary", db->path, migrations[v]);
        if (exec_script(db->h, text)) return kt_db_fail(db);
        if (v + 1 == 3 && report_folded(db)) return -1;
        if (kt_db_sql(db, "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)",
                      ARGS(INT_ARG(v + 1)), NULL, NULL))
            return -1;
    }
    return 0;
}

/* Whether a reader of path must open it immutable: this user cannot create the -wal and
 * -shm files in its folder (a deployed DB owned by another user), and no -wal file holds
 * commits the main file lacks (then the file alone is the database). */
static int open_immutable(const char *path) {
    char dir[4096], wal[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    snprintf(wal, sizeof wal, "%s-wal", path);
    struct stat st;
    return access(dir, W_OK) && (stat(wal, &st) || st.st_size == 0);
}

/* path as a file: URI with immutable=1 (%, ? and # escaped). */
static void immutable_uri(const char *path, char *out, size_t n) {
    size_t used = (size_t)snprintf(out, n, "file:");
    for (const char *p = path; *p && used + 4 < n; p++)
        used += strchr("%?#", *p) ? (size_t)snprintf(out + used, n - used, "%%%02X", (unsigned char)*p)
                                  : (size_t)snprintf(out + used, n - used, "%c", *p);
    snprintf(out + used, n - used, "?immutable=1");
}

/* Opens the connection with the settings every kt connection uses. */
static int open_handle(kt_db *db, int read_only) {
    int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    char uri[8400];
    if (read_only && open_immutable(db->path)) {
        immutable_uri(db->path, uri, sizeof uri);
        KT_CHECK(SQL, sqlite3_open_v2(uri, &db->h, flags | SQLITE_OPEN_URI, NULL));
    } else {
        KT_CHECK(SQL, sqlite3_open_v2(db->path, &db->h, flags, NULL));
    }
    KT_CHECK(SQL, sqlite3_busy_timeout(db->h, BUSY_TIMEOUT_MS));
    KT_CHECK(SQL, sqlite3_create_function_v2(db->h, "kt_bucket", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                             sql_bucket, NULL, NULL, NULL));
    return 0;
}

static int open_db(kt_db *db, int read_only) {
    int version;
    if (open_handle(db, read_only)) return kt_db_fail(db);
    if (kt_db_sql(db, "PRAGMA foreign_keys = ON", NO_ARGS, NULL, NULL)) return -1;
    /* In WAL mode NORMAL still loses no committed row when the process dies (kill -9);
     * only a power cut can drop the last commits. FULL would fsync every measurement. */
    if (!read_only && kt_db_sql(db, "PRAGMA synchronous = NORMAL", NO_ARGS, NULL, NULL)) return -1;
    /* Identify the file before writing anything to it: a foreign file stays untouched. */
    if (schema_version(db, &version)) return -1;
    db->version = version;
    if (version == KT_SCHEMA_VERSION) return 0;
    if (read_only && !version) return kt_fail("%s: not a kt database (empty file)", db->path);
    /* an older file read as it is: each later step only adds what its readers check for */
    if (read_only) return 0;
    db->version = KT_SCHEMA_VERSION;
    /* WAL lets readers (the runtime) work while a sweep writes; it persists in the file. */
    if (kt_db_sql(db, "PRAGMA journal_mode = WAL", NO_ARGS, NULL, NULL)) return -1;
    return kt_db_transaction(db, migrate, NULL);
}

int kt_db_open(const char *path, int read_only, kt_db **out) {
    *out = NULL;
    /* SQLite's own message for this case ("unable to open database file") hides the cause. */
    if (read_only && access(path, F_OK))
        return kt_fail("cannot open %s: %s", path, errno == ENOENT ? "no such file" : strerror(errno));
    struct stat st;
    if (!stat(path, &st) && S_ISDIR(st.st_mode)) return kt_fail("%s is a folder, not a database file", path);
    kt_db *db = calloc(1, sizeof *db);
    if (!db || !(db->path = strdup(path))) {
        free(db);
        return kt_fail("out of memory");
    }
    if (open_db(db, read_only)) {
        kt_db_close(db);
        return -1;
    }
    *out = db;
    return 0;
}

void kt_db_close(kt_db *db) {
    if (!db) return;
    /* every statement is finalized where it was run, so close cannot be busy */
    sqlite3_close(db->h);
    free(db->path);
    free(db);
}

const char *kt_lookup_level_name(kt_lookup_level l) {
    static const char *const names[] = {"exact", "nearest-m", "nearest-shape", "default"};
    return (unsigned)l < sizeof names / sizeof *names ? names[l] : "unknown";
}

/* The lookup ladder as one ordering: a candidate row is ranked by (level, shape
 * distance, M distance, larger bucket first); the best row overall is served. */
typedef struct lookup_ctx {
    const kt_family *f;
    const kt_problem *p;
    long bucket; /* the query's M bucket */
    int found;
    double shape_dist, m_dist; /* of the best row so far */
    kt_winner *w;
} lookup_ctx;

/* Sum over the size fields of |log(stored / query)|; -1 if the stored shape does not parse or
 * a category differs (never served across categories). */
static double shape_distance(const lookup_ctx *c, const char *stored) {
    kt_problem s;
    if (kt_parse_shape(c->f, stored, &s)) return -1;
    double d = 0;
    for (int i = 0; i < c->f->n_keys; i++) {
        if (c->f->keys[i].kind == KT_KEY_CATEGORY) {
            if (s.dim[i] != c->p->dim[i]) return -1;
            continue;
        }
        d += fabs(log((double)s.dim[i] / (double)c->p->dim[i]));
    }
    return d;
}

/* Whether a row ranks before the best so far. Distances within eps are equal (m halfway
 * between two buckets in log terms), and then the larger bucket wins; on a full tie the
 * best so far stays, and rows come newest first. */
static int ranks_before(const lookup_ctx *c, kt_lookup_level level, double shape_dist, double m_dist, long bucket) {
    const double eps = 1e-9;
    if (level != c->w->level) return level < c->w->level;
    if (fabs(shape_dist - c->shape_dist) > eps) return shape_dist < c->shape_dist;
    if (fabs(m_dist - c->m_dist) > eps) return m_dist < c->m_dist;
    return bucket > c->w->m_bucket;
}

static int lookup_row(sqlite3_stmt *st, void *ctx) {
    lookup_ctx *c = ctx;
    const char *shape = (const char *)sqlite3_column_text(st, 0);
    long bucket = (long)sqlite3_column_int64(st, 1);
    double shape_dist = shape_distance(c, shape), m_dist = fabs(log((double)bucket) - log((double)c->p->m));
    if (shape_dist < 0) return 0; /* not a shape of this family: never served */
    /* equal dims give exactly log(1) = 0, however the stored string orders them */
    kt_lookup_level level = shape_dist > 0 ? KT_NEAREST_SHAPE : bucket == c->bucket ? KT_EXACT : KT_NEAREST_M;
    if (c->found && !ranks_before(c, level, shape_dist, m_dist, bucket)) return 0;
    c->found = 1;
    c->shape_dist = shape_dist;
    c->m_dist = m_dist;
    snprintf(c->w->shape, sizeof c->w->shape, "%s", shape);
    c->w->m_bucket = bucket;
    snprintf(c->w->config, sizeof c->w->config, "%s", (const char *)sqlite3_column_text(st, 2));
    snprintf(c->w->variant_id, sizeof c->w->variant_id, "%s", (const char *)sqlite3_column_text(st, 3));
    c->w->median_us = sqlite3_column_double(st, 4);
    c->w->level = level;
    return 0;
}

int kt_db_lookup(kt_db *db, const kt_db_device *dev, const kt_family *f, const kt_problem *p, kt_winner *w) {
    char shape[128], hash[17];
    if (p->m < 1) return kt_fail("%s: lookup needs a positive %s (got %ld)", f->name, f->m_name, p->m);
    for (int i = 0; i < f->n_keys; i++)
        if (f->keys[i].kind == KT_KEY_SIZE && p->dim[i] < 1)
            return kt_fail("%s: lookup needs positive sizes (%s = %ld)", f->name, f->keys[i].name, p->dim[i]);
    kt_format_shape(f, p, shape, sizeof shape);
    kt_hex64(kt_family_source_hash(f), hash);
    memset(w, 0, sizeof *w);
    lookup_ctx c = {.f = f, .p = p, .bucket = kt_family_bucket(f, p->m), .w = w};
    /* any driver / NVRTC version of the device; the current source hash only (others are stale) */
    if (kt_db_sql(
            db,
            "SELECT w.shape, w.m_bucket, w.config, w.variant_id, w.median_us FROM winners w "
            "JOIN devices d ON d.id = w.device_id "
            "WHERE d.name = ?1 AND d.cc = ?2 AND d.sm_count = ?3 AND w.family = ?4 AND w.source_hash = ?5 "
            "ORDER BY w.updated_at DESC, w.device_id DESC",
            ARGS(TEXT_ARG(dev->name), INT_ARG(dev->cc), INT_ARG(dev->sm_count), TEXT_ARG(f->name), TEXT_ARG(hash)),
            lookup_row, &c))
        return -1;
    if (c.found) return 0;
    kt_format_config(f, &f->default_config, w->config, sizeof w->config);
    snprintf(w->shape, sizeof w->shape, "%s", shape);
    w->m_bucket = c.bucket;
    w->level = KT_DEFAULT;
    return 1;
}

/* ------------------------------------------------------ all-reduce settings */

long kt_allreduce_bucket(size_t bytes) {
    long b = 1;
    while ((size_t)b < bytes && b <= LONG_MAX / 2) b *= 2;
    return b;
}

const kt_nccl_setting kt_allreduce_settings[KT_ALLREDUCE_N_SETTINGS] = {
    {"", ""},          {"LL", "Ring"},     {"LL", "Tree"},     {"LL128", "Ring"},
    {"LL128", "Tree"}, {"Simple", "Ring"}, {"Simple", "Tree"},
};

int kt_allreduce_setting_known(const char *proto, const char *algo) {
    for (int i = 0; i < KT_ALLREDUCE_N_SETTINGS; i++)
        if (!strcmp(proto, kt_allreduce_settings[i].proto) && !strcmp(algo, kt_allreduce_settings[i].algo)) return 1;
    return 0;
}

/* The best all-reduce row so far of a lookup: ranked by |log2(bucket / query bucket)|, the
 * larger bucket on a tie. */
typedef struct allreduce_ctx {
    long bucket;
    double dist;
    int found;
    kt_allreduce_setting *s;
} allreduce_ctx;

static int allreduce_row(sqlite3_stmt *st, void *ctx) {
    allreduce_ctx *c = ctx;
    const char *proto = (const char *)sqlite3_column_text(st, 1), *algo = (const char *)sqlite3_column_text(st, 2);
    long bucket = (long)sqlite3_column_int64(st, 0);
    double median = sqlite3_column_double(st, 3);
    if (!proto || !algo || !kt_allreduce_setting_known(proto, algo) || bucket < 1 || !(median > 0)) {
        fprintf(stderr, "kt: all-reduce setting '%s/%s' (bucket %ld, %g us) is not one kt applies: row refused\n",
                proto ? proto : "NULL", algo ? algo : "NULL", bucket, median);
        return 0;
    }
    double dist = fabs(log2((double)bucket) - log2((double)c->bucket));
    if (c->found && (dist > c->dist + 1e-9 || (fabs(dist - c->dist) <= 1e-9 && bucket < c->s->bytes_bucket))) return 0;
    c->found = 1;
    c->dist = dist;
    kt_allreduce_setting *s = c->s;
    snprintf(s->proto, sizeof s->proto, "%s", proto);
    snprintf(s->algo, sizeof s->algo, "%s", algo);
    s->bytes_bucket = bucket;
    s->median_us = median;
    s->default_us = sqlite3_column_double(st, 4);
    s->run_id = sqlite3_column_int64(st, 5);
    snprintf(s->run_commit, sizeof s->run_commit, "%s",
             sqlite3_column_text(st, 6) ? (const char *)sqlite3_column_text(st, 6) : "");
    snprintf(s->run_at, sizeof s->run_at, "%s", (const char *)sqlite3_column_text(st, 7));
    s->level = bucket == c->bucket ? KT_EXACT : KT_NEAREST_M;
    return 0;
}

int kt_db_allreduce_lookup(kt_db *db, const kt_db_device *dev, int world, size_t bytes, kt_allreduce_setting *s) {
    if (world < 1 || world > 8) return kt_fail("all-reduce lookup: world size %d (1 to 8)", world);
    if (bytes < 1) return kt_fail("all-reduce lookup: an empty message");
    memset(s, 0, sizeof *s);
    allreduce_ctx c = {.bucket = kt_allreduce_bucket(bytes), .s = s};
    if (db && db->version >= 4 &&
        kt_db_sql(
            db,
            "SELECT a.bytes_bucket, a.proto, a.algo, a.median_us, a.default_us, a.run_id, r.kt_commit, r.started_at "
            "FROM allreduce_winners a JOIN devices d ON d.id = a.device_id JOIN runs r ON r.id = a.run_id "
            "WHERE d.name = ?1 AND d.cc = ?2 AND d.sm_count = ?3 AND a.world = ?4 "
            "ORDER BY a.updated_at DESC, a.device_id DESC",
            ARGS(TEXT_ARG(dev->name), INT_ARG(dev->cc), INT_ARG(dev->sm_count), INT_ARG(world)), allreduce_row, &c))
        return -1;
    if (c.found) return 0;
    s->bytes_bucket = c.bucket;
    s->level = KT_DEFAULT;
    return 1;
}

/* --------------------------------------------------------------------- show */

/* A query's result as text cells (header row first) with each column's width. */
typedef struct table {
    int n_cols;
    int width[16];
    char **cell;
    size_t n, cap;
} table;

static int table_push(table *t, const char *s) {
    char **cell = kt_grow(t->cell, &t->cap, t->n, sizeof *cell);
    if (!cell) return -1;
    t->cell = cell;
    if (!(t->cell[t->n] = strdup(s ? s : ""))) return kt_fail("out of memory");
    int col = (int)(t->n++ % t->n_cols), len = (int)strlen(s ? s : "");
    if (len > t->width[col]) t->width[col] = len;
    return 0;
}

static int table_row(sqlite3_stmt *st, void *ctx) {
    table *t = ctx;
    if (!t->n) {
        t->n_cols = sqlite3_column_count(st);
        if (t->n_cols > (int)(sizeof t->width / sizeof *t->width)) return kt_fail("show: too many columns");
        for (int i = 0; i < t->n_cols; i++)
            if (table_push(t, sqlite3_column_name(st, i))) return -1;
    }
    for (int i = 0; i < t->n_cols; i++)
        if (table_push(t, (const char *)sqlite3_column_text(st, i))) return -1;
    return 0;
}

/* Prints a titled query result as aligned columns, the header underlined. */
static int print_table(kt_db *db, FILE *out, const char *title, const char *query) {
    table t = {0};
    int rc = kt_db_sql(db, query, NO_ARGS, table_row, &t);
    if (!rc) {
        fprintf(out, "%s\n", title);
        if (!t.n)
            fprintf(out, "  (none)\n");
        else
            for (size_t r = 0; r < t.n / t.n_cols; r++) {
                for (int c = 0; c < t.n_cols; c++)
                    fprintf(out, "  %-*s", c == t.n_cols - 1 ? 0 : t.width[c], t.cell[r * t.n_cols + c]);
                fputc('\n', out);
                for (int c = 0; !r && c < t.n_cols; c++) {
                    fputs("  ", out);
                    for (int k = 0; k < t.width[c]; k++) fputc('-', out);
                }
                if (!r) fputc('\n', out);
            }
        fputc('\n', out);
    }
    for (size_t i = 0; i < t.n; i++) free(t.cell[i]);
    free(t.cell);
    return rc;
}

int kt_db_show(kt_db *db, FILE *out) {
    if (print_table(db, out, "devices",
                    "SELECT id, name, cc, sm_count AS sms, driver_version AS driver, nvrtc_version AS nvrtc "
                    "FROM devices ORDER BY id") ||
        print_table(db, out, "runs",
                    "SELECT r.id, r.started_at, d.name AS device, r.kt_commit, r.cmdline FROM runs r "
                    "JOIN devices d ON d.id = r.device_id ORDER BY r.id") ||
        print_table(db, out, "winners",
                    "SELECT d.name AS device, w.family, w.shape, w.m_bucket AS m_bucket, w.config, w.variant_id, "
                    "printf('%.2f', w.median_us) AS median_us, w.source_hash, w.updated_at FROM winners w "
                    "JOIN devices d ON d.id = w.device_id ORDER BY d.name, w.family, w.shape, w.m_bucket") ||
        print_table(db, out, "measurements",
                    "SELECT family, status, count(*) AS count FROM measurements "
                    "GROUP BY family, status ORDER BY family, status") ||
        (db->version >= 4 &&
         print_table(db, out, "all-reduce settings",
                     "SELECT d.name AS device, a.world, a.bytes_bucket, a.bytes, "
                     "CASE a.proto WHEN '' THEN 'default' ELSE a.proto || '/' || a.algo END AS setting, "
                     "printf('%.2f', a.median_us) AS median_us, printf('%.2f', a.default_us) AS default_us, "
                     "a.nccl_version AS nccl, a.run_id AS run, a.updated_at FROM allreduce_winners a "
                     "JOIN devices d ON d.id = a.device_id ORDER BY d.name, a.world, a.bytes_bucket")))
        return -1;
    return ferror(out) ? kt_fail("show: write failed") : 0;
}

/* ------------------------------------------------------------------- export */

typedef struct export_ctx {
    FILE *out;
    int csv;
    long rows;
} export_ctx;

static void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\r')
            fputs("\\r", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled. */
static void csv_field(FILE *out, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"') fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

static int export_row(sqlite3_stmt *st, void *ctx) {
    export_ctx *e = ctx;
    int n = sqlite3_column_count(st);
    if (e->csv && !e->rows)
        for (int i = 0; i < n; i++) {
            csv_field(e->out, sqlite3_column_name(st, i));
            fputs(i == n - 1 ? "\r\n" : ",", e->out);
        }
    if (!e->csv) fputs(e->rows ? ",\n  {" : "[\n  {", e->out);
    for (int i = 0; i < n; i++) {
        /* type first: reading a column as text converts it. NULL, and the non-finite
         * reals JSON cannot spell, become null / an empty field. */
        int type = sqlite3_column_type(st, i);
        int missing = type == SQLITE_NULL || (type == SQLITE_FLOAT && !isfinite(sqlite3_column_double(st, i)));
        const char *text = (const char *)sqlite3_column_text(st, i);
        if (e->csv) {
            if (!missing) csv_field(e->out, text);
            fputs(i == n - 1 ? "\r\n" : ",", e->out);
            continue;
        }
        if (i) fputs(", ", e->out);
        json_string(e->out, sqlite3_column_name(st, i));
        fputs(": ", e->out);
        if (missing)
            fputs("null", e->out);
        else if (type == SQLITE_TEXT)
            json_string(e->out, text);
        else
            fputs(text, e->out);
    }
    if (!e->csv) fputc('}', e->out);
    e->rows++;
    return 0;
}

int kt_db_export(kt_db *db, const char *format, FILE *out) {
    export_ctx e = {out, 0, 0};
    if (!strcmp(format, "csv"))
        e.csv = 1;
    else if (strcmp(format, "json"))
        return kt_fail("unknown export format '%s' (json or csv)", format);
    if (kt_db_sql(db,
                  "SELECT m.id, m.run_id, d.name AS device, d.cc, d.sm_count, d.driver_version, d.nvrtc_version, "
                  "m.family, m.source_hash, m.variant_id, m.config, m.shape, m.m, m.status, m.error, m.median_us, "
                  "m.min_us, m.max_us, m.rel_err, m.registers, m.spill_bytes, m.compile_ms, m.created_at "
                  "FROM measurements m JOIN devices d ON d.id = m.device_id ORDER BY m.id",
                  NO_ARGS, export_row, &e))
        return -1;
    if (!e.csv) fputs(e.rows ? "\n]\n" : "[]\n", out);
    return ferror(out) ? kt_fail("export: write failed") : 0;
}
