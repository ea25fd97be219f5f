/* targets.c — libFuzzer targets for kt's parsers of user input, one per parser, chosen at
 * build time (make fuzz builds build/fuzz/fuzz_NAME with -DKT_FUZZ_NAME; tests/fuzz/run.sh
 * runs each for a bounded time from its corpus in tests/fuzz/corpus/NAME):
 *   shape      kt_parse_shape, then the size check (overflowing products) and a round trip
 *   config     kt_parse_config, with a round trip through kt_format_config
 *   where      kt_parse_where: whatever it accepts is a value of the named parameter
 *   int_list   kt_parse_int_list: whatever it accepts is positive and fits an int
 * shape, config, where and int_list also check each accepted value against the number its
 * text spells, read digit by digit here (spelled()): a parser that wraps (2^32 + 64 read as
 * 64), skips blanks, takes a key twice or an empty list element fails that check.
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

#ifndef KT_FUZZ_db_header
/* The number the text s[0..len) spells: an optional '-' then only digits, the value fitting a
 * long. Independent of kt's parser (no strtol), so the two can be compared. */
static int spelled(const char *s, size_t len, long *v) {
    size_t i = len && s[0] == '-';
    long x = 0;
    if (i == len) return -1;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, s[i] - '0', &x))
            return -1;
    }
    *v = s[0] == '-' ? -x : x;
    return 0;
}

#endif

#if defined(KT_FUZZ_shape) || defined(KT_FUZZ_config) || defined(KT_FUZZ_where)
/* Every NAME=VALUE element of an accepted s whose NAME is name must spell got (an accepted
 * text never holds a name twice, nor a value that is not the number stored). */
static void require_spelled(const char *s, const char *name, long got) {
    size_t n = strlen(name);
    for (const char *p = s; *p; p++) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        long v;
        if ((size_t)(end - p) > n && !strncmp(p, name, n) && p[n] == '=')
            REQUIRE(!spelled(p + n + 1, (size_t)(end - p - n - 1), &v) && v == got);
        p = *end ? end : end - 1;
    }
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const kt_family *f;
    char *s = text_of(data, size, &f);
#if defined(KT_FUZZ_shape)
    kt_problem p = {0}, back = {0};
    if (!kt_parse_shape(f, s, &p)) {
        char text[256], why[256];
        for (int i = 0; i < f->n_keys; i++) {
            REQUIRE(f->keys[i].kind == KT_KEY_CATEGORY ? p.dim[i] >= 0 && f->keys[i].categories[p.dim[i]]
                                                       : p.dim[i] >= 1 && p.dim[i] <= KT_MAX_INT_VALUE);
            if (f->keys[i].kind == KT_KEY_SIZE) require_spelled(s, f->keys[i].name, p.dim[i]);
        }
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
        for (int i = 0; i < f->n_params; i++) require_spelled(s, f->params[i].name, c.v[i]);
        kt_format_config(f, &c, text, sizeof text);
        REQUIRE(!kt_parse_config(f, text, &back) && !memcmp(&back, &c, sizeof c));
    }
#elif defined(KT_FUZZ_where)
    kt_config values;
    int fixed[KT_MAX_PARAMS];
    if (!kt_parse_where(f, s, &values, fixed))
        for (int i = 0; i < f->n_params; i++) {
            REQUIRE(!fixed[i] || kt_param_value_index(&f->params[i], values.v[i]) >= 0);
            if (fixed[i]) require_spelled(s, f->params[i].name, values.v[i]);
        }
#elif defined(KT_FUZZ_int_list)
    long v[32];
    int n = kt_parse_int_list(s, v, 32);
    REQUIRE(n >= -1 && n <= 32);
    const char *item = s;
    for (int i = 0; i < n; i++) {
        const char *end = strchr(item, ',');
        long spelt;
        if (!end) end = item + strlen(item);
        REQUIRE(v[i] >= 1 && v[i] <= KT_MAX_INT_VALUE);
        REQUIRE(!spelled(item, (size_t)(end - item), &spelt) && spelt == v[i]);
        REQUIRE(*end ? i < n - 1 && end[1] : i == n - 1); /* n elements, none empty */
        item = *end ? end + 1 : end;
    }
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
