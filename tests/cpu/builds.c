/* builds.c — the CPU tests' shared check that configs build without spills (test.h). */
#include "../../tuner/tuner.h"
#include "test.h"
#include <stdlib.h>
#include <string.h>

void kt_test_expect_no_spills(const kt_family *f, const kt_config *configs, int n) {
    char dir[] = "/tmp/kt-test-builds-XXXXXX", cmd[128];
    EXPECT(mkdtemp(dir) != NULL);
    setenv("KT_CACHE_DIR", dir, 1);
    kt_compile_pool *pool = kt_compile_pool_start(f, configs, n, 90, 2);
    for (int i = 0; i < n; i++) {
        const kt_cubin *cb = kt_compile_pool_wait(pool, i, NULL);
        EXPECT(cb && cb->report.spill_bytes == 0 && cb->ship_spill_bytes == 0);
    }
    kt_compile_pool_free(pool);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
    unsetenv("KT_CACHE_DIR");
}
