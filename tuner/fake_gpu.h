/* fake_gpu.h — the fake measuring backend a sweep's workers use under KT_FAKE_GPU=1, so the
 * CPU tests run whole sweeps without CUDA: a fake device ("kt fake GPU", cc 12.0,
 * KT_FAKE_GPU_COUNT of them, KT_FAKE_SMS SMs), deterministic times (KT_FAKE_TIME: hashed,
 * smooth around KT_FAKE_BOWL, or replayed from a recording), the selftest family's planted
 * faults and hangs for real, and KT_FAKE_DELAY_MS per job. worker.c serves jobs with it in
 * place of the GPU; nothing else uses it. */
#ifndef KT_FAKE_GPU_H
#define KT_FAKE_GPU_H
#include "tuner.h"

typedef struct kt_fake_gpu kt_fake_gpu;

/* The fake backend for family f when KT_FAKE_GPU=1 (*out), NULL (*out) when it is not set;
 * -1 when KT_FAKE_BOWL or KT_FAKE_TIME=replay:FILE cannot be read. */
int kt_fake_gpu_open(const kt_family *f, kt_fake_gpu **out);
/* The fake device and GPU count, as a real worker's hello reports them. */
void kt_fake_gpu_hello(kt_worker_hello *h);
/* Sleeps KT_FAKE_DELAY_MS: called once per job, before it is served. */
void kt_fake_gpu_delay(const kt_fake_gpu *g);
/* Variant (c, variant_id)'s time on p in re-timing round `round` (0: the first pass); -1 for a
 * config the replayed recording says failed. A planted FAULT=1 config raises SIGSEGV and a
 * HANG=1 config never returns, as on a GPU. */
double kt_fake_gpu_us(const kt_fake_gpu *g, const kt_problem *p, const kt_config *c, const char *variant_id, int round);
/* A measure job's answer in r (status, rel_err, timing[0], kept), as kt_fake_gpu_us times it. */
void kt_fake_gpu_measure(const kt_fake_gpu *g, const kt_problem *p, const kt_config *c, const char *variant_id,
                         kt_worker_result *r);
#endif
