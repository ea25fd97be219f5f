/* main.c — runs every registered CPU test (or those whose name contains argv[1]; with
 * "-WORD", all but those whose name contains WORD; after --fast, as make test does, none of
 * the KT_TEST_SLOW ones), each line with its seconds, and ends with the plain "N passed, N
 * failed" line CI reads. */
#include "../../tuner/tuner.h"
#include "test.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

int kt_test_passed, kt_test_failed;

#define KT_MAX_TESTS 256
static struct {
    const char *name;
    kt_test_fn fn;
    int slow;
} tests[KT_MAX_TESTS];
static int n_tests;

void kt_test_register(const char *name, kt_test_fn fn, int slow) {
    if (n_tests == KT_MAX_TESTS) {
        fprintf(stderr, "too many tests\n");
        exit(2);
    }
    tests[n_tests].name = name;
    tests[n_tests].slow = slow;
    tests[n_tests++].fn = fn;
}

int main(int argc, char **argv) {
    kt_worker_main(argc, argv); /* sweeps under test re-execute this binary as their workers */
    const int fast = argc > 1 && !strcmp(argv[1], "--fast");
    if (fast) argc--, argv++;
    /* Tests point KT_CACHE_DIR and HOME elsewhere and unset them after; each test starts from
     * the suite's scratch values again, so no later test compiles into the user's ~/.cache. */
    static const char *const kept[] = {"KT_CACHE_DIR", "HOME"};
    char *suite[2];
    for (int v = 0; v < 2; v++) suite[v] = getenv(kept[v]) ? strdup(getenv(kept[v])) : NULL;
    for (int i = 0; i < n_tests; i++) {
        if (argc > 1 && argv[1][0] == '-' ? strstr(tests[i].name, argv[1] + 1) != NULL
                                          : argc > 1 && !strstr(tests[i].name, argv[1]))
            continue;
        if (fast && tests[i].slow) {
            printf("%-40s skipped (slow: make test-all)\n", tests[i].name);
            continue;
        }
        int before = kt_test_failed;
        for (int v = 0; v < 2; v++)
            if (suite[v]) setenv(kept[v], suite[v], 1);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        /* The seconds each test takes: what keeps make test under its 2 minutes is read here. */
        printf("%-40s %-6s %6.1f s\n", tests[i].name, kt_test_failed == before ? "ok" : "FAILED",
               (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", kt_test_passed, kt_test_failed);
    for (int v = 0; v < 2; v++) free(suite[v]);
    return kt_test_failed ? 1 : 0;
}
