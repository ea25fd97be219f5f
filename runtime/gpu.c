/* gpu.c — GPU access through the driver API loaded at run time: device discovery,
 * primary contexts, module loading and kernel launch. Nothing here links libcuda,
 * so `kt` runs its CPU commands on machines without a GPU. */
#include "cu.h"
#include "kt.h"

#include <dlfcn.h>
#include <string.h>

kt_cu_api kt_cu;
static int gpu_state; /* 0 untried, 1 ready, -1 unavailable */
static char gpu_error[512];

static const char *cu_error_string(int status) {
    const char *s = NULL;
    if (gpu_state != 1 || kt_cu.cuGetErrorString((CUresult)status, &s) != CUDA_SUCCESS || !s)
        return "unknown CUDA error";
    return s;
}

int kt_status_CU(int status, const char *call, const char *file, int line) {
    if (status == CUDA_SUCCESS) return 0;
    return kt_status_fail("CUDA", cu_error_string(status), status, call, file, line);
}

int kt_gpu_init(void) {
    if (gpu_state == 1) return 0;
    if (gpu_state == -1) return kt_fail("%s", gpu_error);
    gpu_state = -1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(gpu_error, sizeof gpu_error,
                 "no CUDA driver on this machine (libcuda.so.1: %s): this command needs an NVIDIA GPU", dlerror());
        return kt_fail("%s", gpu_error);
    }
#define KT_CU_LOAD(fn)                                                                                                 \
    if (!(*(void **)&kt_cu.fn = dlsym(lib, KT_STR(fn)))) {                                                             \
        snprintf(gpu_error, sizeof gpu_error, "CUDA driver too old: it lacks %s", KT_STR(fn));                         \
        return kt_fail("%s", gpu_error);                                                                               \
    }
    KT_CU_FUNCTIONS(KT_CU_LOAD)
#undef KT_CU_LOAD
    CUresult r = kt_cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *s = "unknown";
        kt_cu.cuGetErrorString(r, &s);
        snprintf(gpu_error, sizeof gpu_error, "cuInit failed (%s): this command needs a working NVIDIA GPU", s);
        return kt_fail("%s", gpu_error);
    }
    gpu_state = 1;
    return 0;
}

int kt_gpu_count(void) {
    int n = 0;
    if (kt_gpu_init() || kt_cu.cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    return n;
}

static int current_arch, current_smem_optin;
static kt_device_info current_info;

const kt_device_info *kt_gpu_current(void) { return &current_info; }

void kt_gpu_db_device(const kt_device_info *info, kt_db_device *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", info->name);
    out->cc = info->cc_major * 10 + info->cc_minor;
    out->sm_count = info->sm_count;
    out->driver_version = info->driver_version;
    out->nvrtc_version = kt_nvrtc_version();
}

int kt_gpu_open(int ordinal, kt_device_info *info) {
    if (kt_gpu_init()) return -1;
    int n = kt_gpu_count();
    if (ordinal < 0 || ordinal >= n) return kt_fail("no CUDA device %d (this machine has %d)", ordinal, n);
    CUdevice dev;
    CUcontext ctx;
    KT_CHECK(CU, kt_cu.cuDeviceGet(&dev, ordinal));
    KT_CHECK(CU, kt_cu.cuDevicePrimaryCtxRetain(&ctx, dev));
    KT_CHECK(CU, kt_cu.cuCtxSetCurrent(ctx));
    kt_device_info d = {0};
    int l2 = 0, smem = 0;
    KT_CHECK(CU, kt_cu.cuDeviceGetName(d.name, sizeof d.name, dev));
    KT_CHECK(CU, kt_cu.cuDeviceGetAttribute(&d.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    KT_CHECK(CU, kt_cu.cuDeviceGetAttribute(&d.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    KT_CHECK(CU, kt_cu.cuDeviceGetAttribute(&d.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    KT_CHECK(CU, kt_cu.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    KT_CHECK(CU, kt_cu.cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    KT_CHECK(CU, kt_cu.cuDriverGetVersion(&d.driver_version));
    KT_CHECK(CU, kt_cu.cuDeviceTotalMem(&d.mem_bytes, dev));
    d.l2_bytes = (size_t)l2;
    d.smem_per_block_optin = (size_t)smem;
    current_arch = d.cc_major * 10 + d.cc_minor;
    current_smem_optin = smem;
    current_info = d;
    if (info) *info = d;
    return 0;
}

int kt_gpu_arch(void) { return current_arch; }

int kt_module_load_kernels(const char *name, const char *const *kernels, const kt_cubin *cubin, kt_module *m) {
    memset(m, 0, sizeof *m);
    CUmodule mod;
    KT_CHECK(CU, kt_cu.cuModuleLoadData(&mod, cubin->image));
    m->module = mod;
    memcpy(m->variant_id, cubin->variant_id, sizeof m->variant_id);
    for (int k = 0; kernels[k]; k++) {
        CUfunction fn;
        CUresult r = kt_cu.cuModuleGetFunction(&fn, mod, kernels[k]);
        if (r != CUDA_SUCCESS) {
            kt_cu.cuModuleUnload(mod);
            m->module = NULL;
            return kt_fail("%s: kernel %s missing from module: %s", name, kernels[k], cu_error_string(r));
        }
        /* Let every kernel use all the opt-in shared memory its static part leaves; each
         * launch asks for its own size (over 48 KB needs this opt-in). */
        int static_smem = 0;
        r = kt_cu.cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
        if (r == CUDA_SUCCESS)
            r = kt_cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         current_smem_optin - static_smem);
        if (r != CUDA_SUCCESS) {
            kt_cu.cuModuleUnload(mod);
            m->module = NULL;
            return kt_fail("%s: cannot raise the shared-memory limit of %s: %s", name, kernels[k], cu_error_string(r));
        }
        m->fn[k] = fn;
    }
    return 0;
}

int kt_module_load(const kt_family *f, const kt_config *c, const kt_cubin *cubin, kt_module *m) {
    if (kt_module_load_kernels(f->name, f->kernels, cubin, m)) return -1;
    m->family = f;
    m->config = *c;
    return 0;
}

void kt_module_unload(kt_module *m) {
    if (m->module) kt_cu.cuModuleUnload((CUmodule)m->module);
    m->module = NULL;
}

int kt_launch_kernel(const kt_module *m, int k, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                     void *stream, void **args) {
    KT_CHECK(CU,
             kt_cu.cuLaunchKernel((CUfunction)m->fn[k], gx, gy, gz, block, 1, 1, smem, (CUstream)stream, args, NULL));
    return 0;
}

int kt_launch_kernel_pdl(const kt_module *m, int k, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                         unsigned smem, void *stream, void **args) {
    CUlaunchAttribute pdl = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
    pdl.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg = {.gridDimX = gx,
                          .gridDimY = gy,
                          .gridDimZ = gz,
                          .blockDimX = block,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .sharedMemBytes = smem,
                          .hStream = (CUstream)stream,
                          .attrs = &pdl,
                          .numAttrs = 1};
    KT_CHECK(CU, kt_cu.cuLaunchKernelEx(&cfg, (CUfunction)m->fn[k], args, NULL));
    return 0;
}
