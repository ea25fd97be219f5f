/* test_badinput.c — bad input the library itself must answer with a clear error (issue 18):
 * a variant NVRTC cannot compile. (The CLI's answers to bad arguments, files and databases are
 * tests/cpu/cli.sh; a variant that faults or hangs, tests/cpu/test_sweep.c.) */
#include "kt.h"
#include "test.h"

#include <string.h>

/* selftest at VEC=3 (past its check_config, as a hand-edited DB row or --config on another
 * build could ask): the source's static_assert fails in NVRTC. kt_compile must return -1
 * naming the family, the config and NVRTC's reason, and hand back no cubin. */
KT_TEST(variant_that_fails_to_compile) {
    const kt_family *f = kt_family_find("selftest");
    kt_config c = f->default_config;
    c.v[0] = 3;
    kt_cubin cubin = {0};
    EXPECT(kt_compile(f, &c, 120, &cubin) == -1);
    EXPECT(strstr(kt_error(), "selftest") && strstr(kt_error(), "VEC=3") && strstr(kt_error(), "VEC is 1, 2 or 4"));
    EXPECT(cubin.image == NULL && cubin.size == 0);
}
