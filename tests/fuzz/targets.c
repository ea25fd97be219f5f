/* targets.c — libFuzzer targets for kt's parsers of user input, one per parser, chosen at
 * build time (make fuzz builds build/fuzz/fuzz_NAME with -DKT_FUZZ_NAME; tests/fuzz/run.sh
 * runs each for a bounded time from its corpus in tests/fuzz/corpus/NAME):
 *   shape      kt_parse_shape, then the size check (overflowing products) and a round trip
 *   config     kt_parse_config, with a round trip through kt_format_config
 *   where      kt_parse_where: whatever it accepts is a value of the named parameter
 *   int_list   kt_parse_int_list: whatever it accepts is positive and fits an int
 *   db_header  kt_db_open read-only of the bytes as a file (the header and schema checks),
 *              then kt_db_show of whatever it accepts
 * Text inputs are "FAMILY:TEXT" (no ':' or an unknown family: fp8_gemm). A property that
 * fails aborts, which libFuzzer reports as a crash with the input. */
#include "kt.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The input as a NUL-terminated string (malloc'd), and the family its prefix names. */
static char *text_of(const uint8_t *data, size_t size, const kt_family **f) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    char *colon = strchr(s, ':');
    *f = NULL;
    if (colon) {
        *colon = 0;
        *f = kt_family_find(s);
        memmove(s, colon + 1, strlen(colon + 1) + 1);
    }
    if (!*f) *f = kt_family_find("fp8_gemm");
    return s;
}

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) abort();                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const kt_family *f;
    char *s = text_of(data, size, &f);
#if defined(KT_FUZZ_shape)
    kt_problem p = {0}, back = {0};
    if (!kt_parse_shape(f, s, &p)) {
        char text[256], why[256];
        for (int i = 0; i < f->n_keys; i++)
            REQUIRE(f->keys[i].kind == KT_KEY_CATEGORY ? p.dim[i] >= 0 && f->keys[i].categories[p.dim[i]]
                                                       : p.dim[i] >= 1 && p.dim[i] <= KT_MAX_INT_VALUE);
        kt_format_shape(f, &p, text, sizeof text);
        REQUIRE(!kt_parse_shape(f, text, &back) && !memcmp(back.dim, p.dim, sizeof p.dim));
        for (long m = 1; m <= 1L << 30; m <<= 15) {
            p.m = m;
            if (!f->check_problem(&p, why, sizeof why)) kt_check_problem_size(f, &p, why, sizeof why);
        }
    }
#elif defined(KT_FUZZ_config)
    kt_config c, back;
    if (!kt_parse_config(f, s, &c)) {
        char text[512];
        kt_format_config(f, &c, text, sizeof text);
        REQUIRE(!kt_parse_config(f, text, &back) && !memcmp(&back, &c, sizeof c));
    }
#elif defined(KT_FUZZ_where)
    kt_config values;
    int fixed[KT_MAX_PARAMS];
    if (!kt_parse_where(f, s, &values, fixed))
        for (int i = 0; i < f->n_params; i++)
            REQUIRE(!fixed[i] || kt_param_value_index(&f->params[i], values.v[i]) >= 0);
#elif defined(KT_FUZZ_int_list)
    long v[32];
    int n = kt_parse_int_list(s, v, 32);
    REQUIRE(n >= -1 && n <= 32);
    for (int i = 0; i < n; i++) REQUIRE(v[i] >= 1 && v[i] <= KT_MAX_INT_VALUE);
#elif defined(KT_FUZZ_db_header)
    (void)f;
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "%s/kt_fuzz_db_%d.db", access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm",
                 (int)getpid());
    kt_db *db = NULL;
    FILE *in = fopen(path, "wb"); /* not kt_write_file_atomic: its fsync would bound the rate */
    int wrote = in && fwrite(data, 1, size, in) == size;
    if (in) fclose(in);
    if (wrote && !kt_db_open(path, 1, &db)) {
        FILE *out = fopen("/dev/null", "w");
        if (out) kt_db_show(db, out), fclose(out);
        kt_db_close(db);
    }
    char side[80];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
#else
#error "build with -DKT_FUZZ_NAME (shape, config, where, int_list, db_header)"
#endif
    free(s);
    return 0;
}
