/* launch.c — `kt bench launch` (bench.h): the per-kernel time of a chain of N dependent tiny
 * kernels (bench/launch.cu) replayed as one CUDA graph, without and with PDL, at 1 block and
 * at one block per SM. The slope between a short and a long chain is the time a kernel node
 * costs when it does nothing (launch, the dependency's drain and the next grid's start);
 * the intercept is the graph launch's own. Each chain's counters are checked afterwards: every
 * block counted every replay's every kernel, so no PDL kernel overtook its predecessor. */
#include "bench.h"

#include "../runtime/cu.h"

#include <stdio.h>
#include <stdlib.h>

#define LAUNCH_SHORT 16
#define LAUNCH_REPS 20

typedef struct chain {
    kt_module mod;
    CUstream stream;
    CUdeviceptr count;
    CUevent start, stop;
} chain;

/* Mean ms of one replay of a graph of n kt_launch_tick(pdl) kernels of `blocks` blocks, after
 * one warm-up replay; -1 if a counter is not (1 + reps) x n after them. */
static int chain_ms(chain *c, int n, int blocks, int pdl, double *ms) {
    CUgraph g;
    CUgraphExec ge;
    void *args[] = {&c->count, &pdl};
    KT_CHECK(CU, kt_cu.cuMemsetD8Async(c->count, 0, (size_t)blocks * 4, c->stream));
    KT_CHECK(CU, kt_cu.cuStreamBeginCapture(c->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = (pdl ? kt_launch_kernel_pdl : kt_launch_kernel)(&c->mod, 0, (unsigned)blocks, 1, 1, 128, 0, c->stream,
                                                             args);
    CUresult end = kt_cu.cuStreamEndCapture(c->stream, &g);
    if (rc) return -1;
    KT_CHECK(CU, end);
    CUresult inst = kt_cu.cuGraphInstantiate(&ge, g, 0);
    kt_cu.cuGraphDestroy(g);
    KT_CHECK(CU, inst);
    float t = 0;
    rc = kt_status_CU(kt_cu.cuGraphLaunch(ge, c->stream), "cuGraphLaunch", __FILE__, __LINE__);
    rc = rc || kt_status_CU(kt_cu.cuEventRecord(c->start, c->stream), "cuEventRecord", __FILE__, __LINE__);
    for (int i = 0; i < LAUNCH_REPS && !rc; i++)
        rc = kt_status_CU(kt_cu.cuGraphLaunch(ge, c->stream), "cuGraphLaunch", __FILE__, __LINE__);
    rc = rc || kt_status_CU(kt_cu.cuEventRecord(c->stop, c->stream), "cuEventRecord", __FILE__, __LINE__) ||
         kt_status_CU(kt_cu.cuEventSynchronize(c->stop), "cuEventSynchronize", __FILE__, __LINE__) ||
         kt_status_CU(kt_cu.cuEventElapsedTime(&t, c->start, c->stop), "cuEventElapsedTime", __FILE__, __LINE__);
    kt_cu.cuGraphExecDestroy(ge);
    if (rc) return -1;
    *ms = t / LAUNCH_REPS;
    unsigned *host = malloc((size_t)blocks * 4), want = (unsigned)((1 + LAUNCH_REPS) * n);
    if (!host) return kt_fail("out of memory");
    rc = kt_status_CU(kt_cu.cuMemcpyDtoH(host, c->count, (size_t)blocks * 4), "cuMemcpyDtoH", __FILE__, __LINE__);
    for (int b = 0; b < blocks && !rc; b++)
        if (host[b] != want)
            rc = kt_fail("launch chain of %d (%d blocks, pdl %d): block %d counted %u of %u kernels", n, blocks, pdl, b,
                         host[b], want);
    free(host);
    return rc;
}

static int launch_run(chain *c, int n_long, const char *json_path) {
    static const char *const kernels[] = {"kt_launch_tick", NULL};
    kt_cubin cubin = {0};
    if (kt_compile_source("launch.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load_kernels("launch.cu", kernels, &cubin, &c->mod);
    kt_cubin_free(&cubin);
    if (rc) return -1;
    int sms = kt_gpu_current()->sm_count, grids[2] = {1, sms};
    KT_CHECK(CU, kt_cu.cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING));
    KT_CHECK(CU, kt_cu.cuEventCreate(&c->start, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuEventCreate(&c->stop, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&c->count, (size_t)sms * 4));
    FILE *f = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !f) return kt_fail("cannot write %s", json_path);
    if (f) fprintf(f, "{\"sms\": %d, \"short\": %d, \"long\": %d, \"rows\": [", sms, LAUNCH_SHORT, n_long);
    printf("kt bench launch: %d tiny dependent kernels in one CUDA graph (slope over %d..%d kernels, %d replays)\n",
           n_long, LAUNCH_SHORT, n_long, LAUNCH_REPS);
    printf("  %-6s %-6s %12s %12s %14s\n", "blocks", "pdl", "us/kernel", "graph us", "long chain us");
    for (int g = 0; g < 2 && !rc; g++)
        for (int pdl = 0; pdl < 2 && !rc; pdl++) {
            double a, b;
            if (chain_ms(c, LAUNCH_SHORT, grids[g], pdl, &a) || chain_ms(c, n_long, grids[g], pdl, &b)) rc = -1;
            if (rc) break;
            double per = (b - a) * 1e3 / (n_long - LAUNCH_SHORT), base = a * 1e3 - per * LAUNCH_SHORT;
            printf("  %-6d %-6s %12.3f %12.2f %14.1f\n", grids[g], pdl ? "yes" : "no", per, base, b * 1e3);
            if (f)
                fprintf(f,
                        "%s{\"blocks\": %d, \"pdl\": %d, \"us_per_kernel\": %.4f, \"graph_us\": %.3f, "
                        "\"long_us\": %.2f}",
                        g + pdl ? ", " : "", grids[g], pdl, per, base, b * 1e3);
        }
    if (f) fprintf(f, "]}\n"), fclose(f);
    return rc;
}

int kt_bench_graph_latency(int n_long, const char *json_path) {
    chain c = {0};
    int rc = launch_run(&c, n_long, json_path);
    if (c.count) kt_cu.cuMemFree(c.count);
    if (c.start) kt_cu.cuEventDestroy(c.start);
    if (c.stop) kt_cu.cuEventDestroy(c.stop);
    if (c.stream) kt_cu.cuStreamDestroy(c.stream);
    kt_module_unload(&c.mod);
    return rc;
}
