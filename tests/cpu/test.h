/* test.h — the CPU test harness: EXPECT counts checks, each test file registers
 * its cases with KT_TEST, and tests/cpu/main.c runs them and prints "N passed, N failed". */
#ifndef KT_TEST_H
#define KT_TEST_H
#include <stdio.h>

extern int kt_test_passed, kt_test_failed;

/* Records one check; prints the failing expression with file:line. */
#define EXPECT(cond)                                                                                                   \
    do {                                                                                                               \
        if (cond)                                                                                                      \
            kt_test_passed++;                                                                                          \
        else {                                                                                                         \
            kt_test_failed++;                                                                                          \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                            \
        }                                                                                                              \
    } while (0)

/* The first column of the first row of SQL query q on the database file at path, through a
 * connection of its own, as text into out ("" if no row, "ERR" on error). */
void kt_test_query(const char *path, const char *q, char *out, size_t n);
/* The same as a number (-1 on error). */
long kt_test_query_long(const char *path, const char *q);

/* EXPECTs that every one of configs[n] of family f builds on sm_90 without spills, there and
 * on sm_120 (a compile pool for sm_90 builds each for the ship arch as well), through a scratch
 * JIT cache (KT_CACHE_DIR is unset after). */
struct kt_family;
struct kt_config;
void kt_test_expect_no_spills(const struct kt_family *f, const struct kt_config *configs, int n);

/* Defines a test case run by main.c (registered with a constructor); KT_TEST_SLOW one that
 * `test_cpu --fast` (make test) skips, for make test-all: whole-space NVRTC builds. */
typedef void (*kt_test_fn)(void);
void kt_test_register(const char *name, kt_test_fn fn, int slow);
#define KT_TEST_(name, slow)                                                                                           \
    static void name(void);                                                                                            \
    __attribute__((constructor)) static void name##_register(void) { kt_test_register(#name, name, slow); }            \
    static void name(void)
#define KT_TEST(name) KT_TEST_(name, 0)
#define KT_TEST_SLOW(name) KT_TEST_(name, 1)
#endif
