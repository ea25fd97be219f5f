/* runtime_only.c — an application of libkt alone (tests/cpu/layout.sh links it with
 * -lnvrtc -lsqlite3 and no cuBLAS, no libktdev): opens a winners DB, looks a problem up and
 * dispatches it. Without a GPU kt_dispatch must fail with a message, not crash. */
#include "kt.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: runtime_only DB\n"), 2;
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_problem p;
    kt_db *db;
    if (!f || kt_parse_shape(f, "N=1536,K=4096", &p) || kt_db_open(argv[1], 0, &db))
        return fprintf(stderr, "runtime_only: %s\n", kt_error()), 1;
    p.m = 16;
    kt_db_device dev = {.name = "none", .cc = 120, .sm_count = 1};
    kt_winner w;
    int rc = kt_db_lookup(db, &dev, f, &p, &w);
    if (rc != 1 || w.level != KT_DEFAULT) return fprintf(stderr, "runtime_only: lookup gave %d\n", rc), 1;
    kt_module m;
    kt_lookup_level level;
    if (kt_dispatch(db, f, &p, &m, &level) == 0)
        kt_module_unload(&m);
    else if (!kt_error()[0])
        return fprintf(stderr, "runtime_only: dispatch failed without a message\n"), 1;
    kt_db_close(db);
    printf("runtime_only: lookup %s, default %s\n", kt_lookup_level_name(w.level), w.config);
    return 0;
}
