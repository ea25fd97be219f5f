/* stream.c — `kt bench stream` (bench.h): the least time one kernel that reads N bytes from DRAM
 * takes on this GPU (bench/stream.cu), timed as kt bench times a variant: a CUDA graph of
 * launches over a rotation of copies that L2 cannot hold, the median of its replays per launch.
 * Against the floor kt bench uses (bytes / the measured copy bandwidth) it gives the ratio no
 * kernel of that many bytes can beat here: where a family's target asks for less, the GPU's
 * launch, DRAM ramp and tail stop it, not the kernel. Each mode (plain; PDL waiting before the
 * loads; PDL loading before the wait) at 1, 2 and 4 CTAs of 512 threads an SM, the best kept. */
#include "bench.h"

#include "../runtime/cu.h"

#include <stdio.h>
#include <stdlib.h>

#define STREAM_ROTATION_BYTES ((size_t)512 << 20) /* copies of a size cover this: > 4x any L2 kt targets */
#define STREAM_MIN_LAUNCHES 32
#define STREAM_REPLAYS 15
#define STREAM_THREADS 512
#define STREAM_MODES 3

typedef struct stream_probe {
    kt_module mod;
    CUstream stream;
    CUevent start, stop;
    CUdeviceptr buf, out;
    size_t out_words;
} stream_probe;

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median us per launch of a graph of `launches` kt_dram_read launches (mode, ctas CTAs) over
 * `copies` copies of `bytes` each, after one warm-up replay. */
static int stream_us(stream_probe *p, size_t bytes, int copies, int mode, int ctas, double *us) {
    const int launches = copies < STREAM_MIN_LAUNCHES ? STREAM_MIN_LAUNCHES : copies;
    unsigned long long words = bytes / 16;
    CUgraph g;
    CUgraphExec ge;
    KT_CHECK(CU, kt_cu.cuStreamBeginCapture(p->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    int rc = 0;
    for (int i = 0; i < launches && !rc; i++) {
        CUdeviceptr src = p->buf + (size_t)(i % copies) * bytes;
        void *args[] = {&src, &words, &mode, &p->out};
        rc = (mode ? kt_launch_kernel_pdl : kt_launch_kernel)(&p->mod, 0, (unsigned)ctas, 1, 1, STREAM_THREADS, 0,
                                                              p->stream, args);
    }
    CUresult end = kt_cu.cuStreamEndCapture(p->stream, &g);
    if (rc) return -1;
    KT_CHECK(CU, end);
    CUresult inst = kt_cu.cuGraphInstantiate(&ge, g, 0);
    kt_cu.cuGraphDestroy(g);
    KT_CHECK(CU, inst);
    float ms[STREAM_REPLAYS + 1];
    for (int r = 0; r <= STREAM_REPLAYS && !rc; r++)
        rc =
            kt_status_CU(kt_cu.cuEventRecord(p->start, p->stream), "cuEventRecord", __FILE__, __LINE__) ||
            kt_status_CU(kt_cu.cuGraphLaunch(ge, p->stream), "cuGraphLaunch", __FILE__, __LINE__) ||
            kt_status_CU(kt_cu.cuEventRecord(p->stop, p->stream), "cuEventRecord", __FILE__, __LINE__) ||
            kt_status_CU(kt_cu.cuEventSynchronize(p->stop), "cuEventSynchronize", __FILE__, __LINE__) ||
            kt_status_CU(kt_cu.cuEventElapsedTime(&ms[r], p->start, p->stop), "cuEventElapsedTime", __FILE__, __LINE__);
    kt_cu.cuGraphExecDestroy(ge);
    if (rc) return -1;
    qsort(ms + 1, STREAM_REPLAYS, sizeof *ms, cmp_float); /* ms[0]: the warm-up */
    *us = ms[1 + STREAM_REPLAYS / 2] * 1e3 / launches;
    return 0;
}

/* One row: the best us of each mode over 1, 2, 4 CTAs an SM, and the CTAs an SM it took. */
static int stream_row(stream_probe *p, size_t bytes, double us[STREAM_MODES], int per_sm[STREAM_MODES]) {
    const int sms = kt_gpu_current()->sm_count;
    int copies = (int)((STREAM_ROTATION_BYTES + bytes - 1) / bytes);
    if (copies < 2) copies = 2;
    for (int m = 0; m < STREAM_MODES; m++) {
        us[m] = 1e30;
        for (int k = 1; k <= 4; k *= 2) {
            double t;
            if ((size_t)sms * k * STREAM_THREADS > p->out_words)
                return kt_fail("stream probe: %d CTAs exceed its output buffer", sms * k);
            if (stream_us(p, bytes, copies, m, sms * k, &t)) return -1;
            if (t < us[m]) us[m] = t, per_sm[m] = k;
        }
    }
    return 0;
}

static int stream_run(stream_probe *p, const double *mb, int n, const char *json_path) {
    static const char *const kernels[] = {"kt_dram_read", NULL};
    double copy_bps;
    if (kt_bench_copy_bandwidth(&copy_bps)) return -1;
    kt_cubin cubin = {0};
    if (kt_compile_source("stream.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load_kernels("stream.cu", kernels, &cubin, &p->mod);
    kt_cubin_free(&cubin);
    if (rc) return -1;
    double max_mb = 0;
    for (int i = 0; i < n; i++) max_mb = mb[i] > max_mb ? mb[i] : max_mb;
    const size_t max_bytes = (size_t)(max_mb * 1048576.0 + 15) / 16 * 16;
    size_t rotation = STREAM_ROTATION_BYTES > 2 * max_bytes ? STREAM_ROTATION_BYTES : 2 * max_bytes;
    p->out_words = (size_t)kt_gpu_current()->sm_count * 4 * STREAM_THREADS;
    KT_CHECK(CU, kt_cu.cuStreamCreate(&p->stream, CU_STREAM_NON_BLOCKING));
    KT_CHECK(CU, kt_cu.cuEventCreate(&p->start, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuEventCreate(&p->stop, CU_EVENT_DEFAULT));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&p->buf, rotation + max_bytes));
    KT_CHECK(CU, kt_cu.cuMemsetD8Async(p->buf, 0x5a, rotation + max_bytes, p->stream));
    KT_CHECK(CU, kt_cu.cuMemAlloc(&p->out, p->out_words * 4));
    FILE *f = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !f) return kt_fail("cannot write %s", json_path);
    printf("kt bench stream: one kernel reading N MB from DRAM, timed as kt bench times a variant; copy bandwidth "
           "%.3f TB/s, floor_us = bytes / it\n",
           copy_bps / 1e12);
    printf("  %8s %9s %10s %8s %10s %8s %10s %8s\n", "MB", "floor_us", "plain_us", "ratio", "pdl_wait", "ratio",
           "pdl_early", "ratio");
    if (f) fprintf(f, "{\"copy_bytes_per_s\": %.4g, \"rows\": [", copy_bps);
    for (int i = 0; i < n && !rc; i++) {
        const size_t bytes = (size_t)(mb[i] * 1048576.0 + 15) / 16 * 16;
        double us[STREAM_MODES], floor_us = (double)bytes / copy_bps * 1e6;
        int per_sm[STREAM_MODES];
        if ((rc = stream_row(p, bytes, us, per_sm))) break;
        printf("  %8.2f %9.2f %10.2f %8.2f %10.2f %8.2f %10.2f %8.2f\n", mb[i], floor_us, us[0], us[0] / floor_us,
               us[1], us[1] / floor_us, us[2], us[2] / floor_us);
        if (f)
            fprintf(f,
                    "%s{\"mb\": %.4g, \"floor_us\": %.4f, \"plain_us\": %.4f, \"pdl_wait_us\": %.4f, "
                    "\"pdl_early_us\": %.4f, \"ctas_per_sm\": [%d, %d, %d]}",
                    i ? ", " : "", mb[i], floor_us, us[0], us[1], us[2], per_sm[0], per_sm[1], per_sm[2]);
    }
    if (f) fprintf(f, "]}\n"), fclose(f);
    return rc;
}

int kt_bench_dram_stream(const double *mb, int n, const char *json_path) {
    stream_probe p = {0};
    int rc = stream_run(&p, mb, n, json_path);
    if (p.buf) kt_cu.cuMemFree(p.buf);
    if (p.out) kt_cu.cuMemFree(p.out);
    if (p.start) kt_cu.cuEventDestroy(p.start);
    if (p.stop) kt_cu.cuEventDestroy(p.stop);
    if (p.stream) kt_cu.cuStreamDestroy(p.stream);
    kt_module_unload(&p.mod);
    return rc;
}
