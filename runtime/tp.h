/* tp.h — tensor parallelism for the runtime's decode step over NCCL, loaded at run time. One
 * process (or thread) per GPU; each holds one rank's shards and all-reduces the partial sums of
 * the attention output and the MoE output. Written and tested at world size 1 (`kt run --tp 1`);
 * runs on 2-8 GPUs are a separate issue. */
#ifndef KT_TP_H
#define KT_TP_H

#include "kt.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kt_tp kt_tp;

/* Chooses the NCCL setting for all-reduces of `bytes` over `world` GPUs of dev from db (may be
 * NULL): kt_db_allreduce_lookup()'s row, else NCCL's own choice. The choice goes into
 * NCCL_PROTO and NCCL_ALGO (NCCL reads them when the communicator is made, so call this before
 * kt_tp_open) unless either is set already: the user's setting wins and is kept. Logs the
 * lookup on stderr like the kernel lookups. *out (may be NULL) gets the row. 0, or -1 on a DB
 * error. Needs no NCCL and no GPU. */
int kt_tp_configure(kt_db *db, const kt_db_device *dev, int world, size_t bytes, kt_allreduce_setting *out);

/* Loads NCCL and joins rank `rank` of `world` (unique_id: ncclUniqueId bytes from rank 0; NULL
 * at world size 1, which makes its own). Needs the GPU context current. */
int kt_tp_open(int world, int rank, const void *unique_id, kt_tp **out);
/* Enqueues an in-place sum over the ranks of `count` bf16 (bf16 = 1) or f32 values at device
 * address buf on stream (capturable in a CUDA graph). */
int kt_tp_all_reduce(kt_tp *t, uint64_t buf, size_t count, int bf16, void *stream);
int kt_tp_world(const kt_tp *t);
void kt_tp_close(kt_tp *t);

#endif
