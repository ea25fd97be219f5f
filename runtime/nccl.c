/* nccl.c — NCCL loaded at run time and its status checker (KT_CHECK(NCCL, ...) reports
 * NCCL's own message once the library is loaded). */
#include "nccl.h"
#include "kt.h"

#include <dlfcn.h>
#include <stdio.h>

kt_nccl_api kt_nccl;
static int nccl_state; /* 0 untried, 1 ready, -1 unavailable */
static char nccl_error[512];

int kt_nccl_init(void) {
    if (nccl_state == 1) return 0;
    if (nccl_state == -1) return kt_fail("%s", nccl_error);
    nccl_state = -1;
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(nccl_error, sizeof nccl_error, "NCCL is not installed (libnccl.so.2: %s): this command needs it",
                 dlerror());
        return kt_fail("%s", nccl_error);
    }
#define KT_NCCL_LOAD(fn)                                                                                               \
    if (!(*(void **)&kt_nccl.fn = dlsym(lib, KT_STR(fn)))) {                                                           \
        snprintf(nccl_error, sizeof nccl_error, "NCCL too old: libnccl.so.2 lacks %s", KT_STR(fn));                    \
        return kt_fail("%s", nccl_error);                                                                              \
    }
    KT_NCCL_FUNCTIONS(KT_NCCL_LOAD)
#undef KT_NCCL_LOAD
    nccl_state = 1;
    return 0;
}

int kt_nccl_version(void) {
    int v = -1;
    if (kt_nccl_init() || kt_nccl.ncclGetVersion(&v) != ncclSuccess) return -1;
    return v;
}

int kt_status_NCCL(int status, const char *call, const char *file, int line) {
    if (status == ncclSuccess) return 0;
    const char *msg = nccl_state == 1 ? kt_nccl.ncclGetErrorString((ncclResult_t)status) : "NCCL not loaded";
    return kt_status_fail("NCCL", msg, status, call, file, line);
}
