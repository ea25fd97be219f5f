/* nvtx.c — kt's NVTX ranges (nvtx.h): the kt/<family>/<key>/<leaf> scheme over the CUDA
 * toolkit's header-only NVTX3. */
#include "nvtx.h"

#include <nvtx3/nvToolsExt.h>

void kt_nvtx_key(const kt_family *f, const kt_problem *p, char *out, size_t n) {
    char shape[128];
    kt_format_shape(f, p, shape, sizeof shape);
    snprintf(out, n, "%s,%s=%ld", shape, f->m_name, p->m);
}

void kt_nvtx_filter(const kt_family *f, const kt_problem *p, const char *leaf, char *out, size_t n) {
    char key[192];
    kt_nvtx_key(f, p, key, sizeof key);
    snprintf(out, n, "kt/%s/%s/%s/", f->name, key, leaf);
}

void kt_nvtx_push(const kt_family *f, const kt_problem *p, const char *leaf) {
    char key[192];
    kt_nvtx_key(f, p, key, sizeof key);
    nvtxRangePushA("kt");
    nvtxRangePushA(f->name);
    nvtxRangePushA(key);
    nvtxRangePushA(leaf);
}

void kt_nvtx_pop(void) {
    for (int i = 0; i < 4; i++) nvtxRangePop();
}
