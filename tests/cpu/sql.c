/* sql.c — test helpers that read a kt database through a raw SQLite connection of their
 * own, so tests check what is on disk rather than what the DB layer says. */
#include "test.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

void kt_test_query(const char *path, const char *q, char *out, size_t n) {
    sqlite3 *h = NULL;
    sqlite3_stmt *st;
    snprintf(out, n, "ERR");
    if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(h, q, -1, &st, NULL) == SQLITE_OK) {
        int rc = sqlite3_step(st);
        const char *text = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
        if (rc == SQLITE_ROW)
            snprintf(out, n, "%s", text ? text : "NULL");
        else if (rc == SQLITE_DONE)
            out[0] = 0;
        sqlite3_finalize(st);
    }
    sqlite3_close(h);
}

long kt_test_query_long(const char *path, const char *q) {
    char out[64];
    kt_test_query(path, q, out, sizeof out);
    return strcmp(out, "ERR") ? atol(out) : -1;
}
