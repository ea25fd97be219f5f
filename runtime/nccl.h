/* nccl.h — NCCL as loaded at run time (dlopen of libnccl.so.2), like the CUDA driver in
 * cu.h, so kt starts where NCCL is absent and only its tensor-parallel and all-reduce paths
 * need it. Call functions as kt_nccl.ncclAllReduce(...) after kt_nccl_init() succeeded. */
#ifndef KT_NCCL_H
#define KT_NCCL_H
#include <nccl.h>

// clang-format off
#define KT_NCCL_FUNCTIONS(X)                                                                  \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetUniqueId) X(ncclCommInitAll)             \
    X(ncclCommInitRank) X(ncclCommDestroy) X(ncclAllReduce) X(ncclGroupStart) X(ncclGroupEnd)
// clang-format on

#define KT_NCCL_MEMBER(fn) __typeof__(fn) *fn;
typedef struct kt_nccl_api {
    KT_NCCL_FUNCTIONS(KT_NCCL_MEMBER)
} kt_nccl_api;
#undef KT_NCCL_MEMBER

extern kt_nccl_api kt_nccl;

/* Loads libnccl.so.2 once; -1 with a clear message if it is absent or too old. */
int kt_nccl_init(void);
/* NCCL version as major*10000+minor*100+patch (e.g. 22703); -1 if NCCL is unusable. */
int kt_nccl_version(void);
#endif
