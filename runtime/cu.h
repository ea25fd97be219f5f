/* cu.h — the CUDA driver API as loaded at run time (dlopen of libcuda.so.1), so kt
 * starts on machines with no driver and says which command needs one.
 * Call driver functions as kt_cu.cuMemAlloc(...) after kt_gpu_init() succeeded. */
#ifndef KT_CU_H
#define KT_CU_H
#include <cuda.h>
#include <cudaProfiler.h>

/* Each entry is the header's name; cuda.h maps versioned ones (cuMemAlloc ->
 * cuMemAlloc_v2), so the table holds exactly the symbols a linked program would call. */
// clang-format off
#define KT_CU_FUNCTIONS(X)                                                                \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)  \
    X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain)                \
    X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuGetErrorString) X(cuGetErrorName)          \
    X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute)    \
    X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)          \
    X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuStreamCreate) \
    X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuStreamBeginCapture) X(cuStreamEndCapture) \
    X(cuGraphInstantiate) X(cuGraphGetNodes) X(cuGraphNodeGetType) X(cuGraphUpload) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) \
    X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)         \
    X(cuEventDestroy) X(cuMemGetInfo) X(cuProfilerStart) X(cuProfilerStop)
// clang-format on

#define KT_CU_MEMBER(fn) __typeof__(fn) *fn;
typedef struct kt_cu_api {
    KT_CU_FUNCTIONS(KT_CU_MEMBER)
} kt_cu_api;
#undef KT_CU_MEMBER

extern kt_cu_api kt_cu;
#endif
