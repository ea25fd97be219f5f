/* tp.c — the runtime's tensor-parallel path (tp.h): the NCCL setting the DB holds for this
 * device, world size and message size (`kt bench allreduce --db`) applied before the
 * communicator is made; NCCL loaded at run time (dlopen of libnccl.so.2, or $KT_NCCL), so kt
 * starts without it; one communicator per process and the in-place all-reduces the step
 * enqueues after attention and after the MoE block. */
#include "tp.h"

#include "kt.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
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

int kt_tp_configure(kt_db *db, const kt_db_device *dev, int world, size_t bytes, kt_allreduce_setting *out) {
    kt_allreduce_setting s;
    int found = kt_db_allreduce_lookup(db, dev, world, bytes, &s);
    if (found < 0) return -1;
    const char *user_proto = getenv("NCCL_PROTO"), *user_algo = getenv("NCCL_ALGO");
    char what[512];
    if (found && !db)
        snprintf(what, sizeof what, "NCCL's own choice (default: no database)");
    else if (found)
        snprintf(what, sizeof what, "NCCL's own choice (default: no row for %d GPUs of %s)", world, dev->name);
    else
        snprintf(what, sizeof what, "%s%s%s (%s: bucket %ld, %.2f us vs %.2f default; run %lld, %s, %s)",
                 *s.proto ? s.proto : "NCCL's own choice", *s.proto ? "/" : "", s.algo,
                 s.level == KT_EXACT ? "exact" : "nearest size", s.bytes_bucket, s.median_us, s.default_us, s.run_id,
                 s.run_commit, s.run_at);
    if (user_proto || user_algo) {
        fprintf(stderr, "kt: all-reduce %zu B x %d GPUs -> NCCL_PROTO=%s NCCL_ALGO=%s as set by the user (kt's: %s)\n",
                bytes, world, user_proto ? user_proto : "(unset)", user_algo ? user_algo : "(unset)", what);
    } else {
        if (!found && *s.proto && (setenv("NCCL_PROTO", s.proto, 1) || setenv("NCCL_ALGO", s.algo, 1)))
            return kt_fail("setting NCCL_PROTO/NCCL_ALGO: out of memory");
        fprintf(stderr, "kt: all-reduce %zu B x %d GPUs -> %s\n", bytes, world, what);
    }
    if (out) *out = s;
    return 0;
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
    if (unique_id)
        id = *(const ncclUniqueId *)unique_id;
    else if (world > 1) {
        kt_tp_close(t);
        return kt_fail("tensor parallel over %d ranks needs the rank-0 unique id", world);
    } else if (nccl_ok(t, t->get_id(&id), "ncclGetUniqueId"))
        return kt_tp_close(t), -1;
    if (nccl_ok(t, t->init_rank(&t->comm, world, id, rank), "ncclCommInitRank")) {
        t->comm = NULL;
        kt_tp_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

int kt_tp_all_reduce(kt_tp *t, uint64_t buf, size_t count, int bf16, void *stream) {
    return nccl_ok(t,
                   t->all_reduce((const void *)buf, (void *)buf, count, bf16 ? ncclBfloat16 : ncclFloat32, ncclSum,
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
