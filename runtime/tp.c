/* tp.c — the runtime's tensor-parallel path (tp.h): NCCL loaded at run time (dlopen of
 * libnccl.so.2, or $KT_NCCL), so kt starts without it; one communicator per process and the
 * in-place all-reduces the step enqueues after attention and after the MoE block. */
#include "tp.h"

#include "kt.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>

struct kt_tp {
    void *lib;
    ncclComm_t comm;
    int world, rank;
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error)(ncclResult_t);
};

/* NCCL status -> 0, or -1 with NCCL's own message. */
static int nccl_ok(const kt_tp *t, ncclResult_t r, const char *what) {
    return r == ncclSuccess ? 0 : kt_fail("%s: NCCL error %d: %s", what, (int)r, t->error ? t->error(r) : "?");
}

int kt_tp_open(int world, int rank, const void *unique_id, kt_tp **out) {
    if (world < 1 || rank < 0 || rank >= world) return kt_fail("tensor parallel: rank %d of world %d", rank, world);
    const char *path = getenv("KT_NCCL") ? getenv("KT_NCCL") : "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return kt_fail("tensor parallel needs NCCL: %s (set KT_NCCL to libnccl.so.2's path)", dlerror());
    kt_tp *t = calloc(1, sizeof *t);
    t->lib = lib, t->world = world, t->rank = rank;
    *(void **)&t->get_id = dlsym(lib, "ncclGetUniqueId");
    *(void **)&t->init_rank = dlsym(lib, "ncclCommInitRank");
    *(void **)&t->all_reduce = dlsym(lib, "ncclAllReduce");
    *(void **)&t->destroy = dlsym(lib, "ncclCommDestroy");
    *(void **)&t->error = dlsym(lib, "ncclGetErrorString");
    if (!t->get_id || !t->init_rank || !t->all_reduce || !t->destroy) {
        kt_tp_close(t);
        return kt_fail("%s lacks the NCCL functions kt needs (ncclCommInitRank, ncclAllReduce)", path);
    }
    ncclUniqueId id;
    if (unique_id) id = *(const ncclUniqueId *)unique_id;
    else if (world > 1) {
        kt_tp_close(t);
        return kt_fail("tensor parallel over %d ranks needs the rank-0 unique id", world);
    } else if (nccl_ok(t, t->get_id(&id), "ncclGetUniqueId")) return kt_tp_close(t), -1;
    if (nccl_ok(t, t->init_rank(&t->comm, world, id, rank), "ncclCommInitRank")) {
        t->comm = NULL;
        kt_tp_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

int kt_tp_all_reduce(kt_tp *t, uint64_t buf, size_t count, int bf16, void *stream) {
    return nccl_ok(t, t->all_reduce((const void *)buf, (void *)buf, count, bf16 ? ncclBfloat16 : ncclFloat32, ncclSum,
                                    t->comm, (cudaStream_t)stream),
                   "ncclAllReduce");
}

int kt_tp_world(const kt_tp *t) { return t->world; }

void kt_tp_close(kt_tp *t) {
    if (!t) return;
    if (t->comm) t->destroy(t->comm);
    if (t->lib) dlclose(t->lib);
    free(t);
}
