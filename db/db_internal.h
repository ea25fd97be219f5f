/* db_internal.h — what db/db.c (open, lookup, show, export: libkt) and db/db_write.c
 * (measurements, winners, re-timings, merge: libktdev) share; private to db/. */
#ifndef KT_DB_INTERNAL_H
#define KT_DB_INTERNAL_H
#include "kt.h"

#include <sqlite3.h>

struct kt_db {
    sqlite3 *h;
    char *path;
    int version; /* the file's schema version: KT_SCHEMA_VERSION, or older when opened read-only */
};

/* A bound parameter: every statement takes its parameters as an ARGS(...) list, so the
 * prepare / bind / step / finalize sequence lives in one place. */
typedef struct sql_arg {
    enum { ARG_INT, ARG_REAL, ARG_TEXT } type;
    long long i;
    double d;
    const char *s; /* NULL binds SQL NULL */
} sql_arg;
#define INT_ARG(x) ((sql_arg){.type = ARG_INT, .i = (x)})
#define REAL_ARG(x) ((sql_arg){.type = ARG_REAL, .d = (x)})
#define TEXT_ARG(x) ((sql_arg){.type = ARG_TEXT, .s = (x)})
#define ARGS(...) (const sql_arg[]){__VA_ARGS__}, (int)(sizeof((sql_arg[]){__VA_ARGS__}) / sizeof(sql_arg))
#define NO_ARGS NULL, 0

/* Receives one result row; returns 0 to go on, -1 (error set) to stop. */
typedef int (*row_fn)(sqlite3_stmt *st, void *ctx);

/* The statement helpers (db.c). kt_db_fail: re-raises the error of db's last statement with
 * its path (-1). kt_db_sql: runs text with args, calling row per result row. kt_db_transaction:
 * runs body in one write transaction, retried while busy. */
int kt_db_fail(kt_db *db);
int kt_db_sql(kt_db *db, const char *text, const sql_arg *args, int n, row_fn row, void *ctx);
/* A row_fn storing column 0 in *(long long *)ctx. */
int kt_db_row_int(sqlite3_stmt *st, void *ctx);
int kt_db_transaction(kt_db *db, int (*body)(kt_db *, const void *), const void *ctx);
/* The bucket of batch size m in the ladder of the family called family. */
long kt_db_bucket_of(const char *family, long m);
#endif
