/* allreduce.c — `kt bench allreduce`: NCCL's all-reduce of the decode step's messages
 * (hidden x B bf16 per tensor-parallel all-reduce) over the GPUs of one host, timed for
 * every NCCL protocol/algorithm setting against the bytes a ring moves over the measured
 * bus bandwidth. NCCL reads its settings once per process, so each setting is timed in a
 * child process (this program re-executed with NCCL_PROTO/NCCL_ALGO set; NVLink
 * multicast always off, NCCL_NVLS_ENABLE=0); the parent keeps the best per size. */
#include "../runtime/cu.h"
#include "../runtime/nccl.h"
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 7                 /* timed rounds per size: median, min, max over them */
#define LAUNCHES 20              /* all-reduces per round */
#define BUSBW_BYTES (256u << 20) /* the message that measures the bus bandwidth */

/* The settings swept are kt_allreduce_settings (kt.h; [0] NCCL's own choice). */

/* One GPU's part: its context, stream, events and buffers. */
typedef struct rank {
    CUcontext ctx;
    CUstream stream;
    CUevent ev0, ev1;
    CUdeviceptr send, recv;
    ncclComm_t comm;
} rank;

static int use(const rank *r) {
    KT_CHECK(CU, kt_cu.cuCtxSetCurrent(r->ctx));
    return 0;
}

/* Small integers scaled by the rank, so a sum over up to 8 ranks is exact in bf16. */
static int fill_send(rank *r, int index, size_t count, uint64_t seed) {
    uint16_t *host = malloc(count * sizeof *host);
    if (!host) return kt_fail("out of memory");
    uint64_t rng = seed;
    for (size_t i = 0; i < count; i++) {
        int v = (int)(kt_rng_next(&rng) % 9) - 4;
        host[i] = kt_float_to_bf16((float)(v ? v : 1) * (float)(index + 1));
    }
    int rc = kt_status_CU(kt_cu.cuMemcpyHtoD(r->send, host, count * sizeof *host), "cuMemcpyHtoD", __FILE__, __LINE__);
    free(host);
    return rc;
}

static int setup_ranks(rank *ranks, int world, size_t max_bytes, uint64_t seed) {
    int devs[8];
    for (int d = 0; d < world; d++) {
        devs[d] = d;
        CUdevice dev;
        KT_CHECK(CU, kt_cu.cuDeviceGet(&dev, d));
        KT_CHECK(CU, kt_cu.cuDevicePrimaryCtxRetain(&ranks[d].ctx, dev));
        if (use(&ranks[d])) return -1;
        KT_CHECK(CU, kt_cu.cuStreamCreate(&ranks[d].stream, CU_STREAM_NON_BLOCKING));
        KT_CHECK(CU, kt_cu.cuEventCreate(&ranks[d].ev0, CU_EVENT_DEFAULT));
        KT_CHECK(CU, kt_cu.cuEventCreate(&ranks[d].ev1, CU_EVENT_DEFAULT));
        KT_CHECK(CU, kt_cu.cuMemAlloc(&ranks[d].send, max_bytes));
        KT_CHECK(CU, kt_cu.cuMemAlloc(&ranks[d].recv, max_bytes));
        if (fill_send(&ranks[d], d, max_bytes / 2, seed)) return -1;
    }
    ncclComm_t comms[8];
    KT_CHECK(NCCL, kt_nccl.ncclCommInitAll(comms, world, devs));
    for (int d = 0; d < world; d++) ranks[d].comm = comms[d];
    return 0;
}

static void free_ranks(rank *ranks, int world) {
    for (int d = 0; d < world; d++) {
        if (!ranks[d].ctx) continue;
        kt_cu.cuCtxSetCurrent(ranks[d].ctx);
        if (ranks[d].comm) kt_nccl.ncclCommDestroy(ranks[d].comm);
        if (ranks[d].send) kt_cu.cuMemFree(ranks[d].send);
        if (ranks[d].recv) kt_cu.cuMemFree(ranks[d].recv);
        if (ranks[d].ev0) kt_cu.cuEventDestroy(ranks[d].ev0);
        if (ranks[d].ev1) kt_cu.cuEventDestroy(ranks[d].ev1);
        if (ranks[d].stream) kt_cu.cuStreamDestroy(ranks[d].stream);
    }
}

/* One all-reduce of count bf16 on every rank, as one NCCL group. */
static int all_reduce(rank *ranks, int world, size_t count) {
    KT_CHECK(NCCL, kt_nccl.ncclGroupStart());
    for (int d = 0; d < world; d++)
        KT_CHECK(NCCL,
                 kt_nccl.ncclAllReduce((const void *)(uintptr_t)ranks[d].send, (void *)(uintptr_t)ranks[d].recv, count,
                                       ncclBfloat16, ncclSum, ranks[d].comm, (cudaStream_t)ranks[d].stream));
    KT_CHECK(NCCL, kt_nccl.ncclGroupEnd());
    return 0;
}

static int sync_ranks(rank *ranks, int world) {
    for (int d = 0; d < world; d++) {
        if (use(&ranks[d])) return -1;
        KT_CHECK(CU, kt_cu.cuStreamSynchronize(ranks[d].stream));
    }
    return 0;
}

/* Rank 0's result must be the exact sum of every rank's input (fill_send's values). */
static int check_sum(rank *ranks, int world, size_t count, uint64_t seed) {
    uint16_t *got = malloc(count * sizeof *got);
    if (!got) return kt_fail("out of memory");
    int rc = use(&ranks[0]) ? -1
                            : kt_status_CU(kt_cu.cuMemcpyDtoH(got, ranks[0].recv, count * sizeof *got), "cuMemcpyDtoH",
                                           __FILE__, __LINE__);
    uint64_t rng = seed;
    float ranks_sum = (float)(world * (world + 1) / 2);
    for (size_t i = 0; i < count && !rc; i++) {
        int v = (int)(kt_rng_next(&rng) % 9) - 4;
        float want = (float)(v ? v : 1) * ranks_sum;
        if (kt_bf16_to_float(got[i]) != want)
            rc = kt_fail("all-reduce of %zu bf16 on %d GPUs: element %zu is %g, expected %g", count, world, i,
                         kt_bf16_to_float(got[i]), want);
    }
    free(got);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times all-reduces of count bf16: the slowest rank's time per all-reduce, per round. */
static int time_size(rank *ranks, int world, size_t count, double us[ROUNDS]) {
    for (int w = 0; w < 3; w++)
        if (all_reduce(ranks, world, count)) return -1;
    for (int r = 0; r < ROUNDS; r++) {
        if (sync_ranks(ranks, world)) return -1;
        for (int d = 0; d < world; d++)
            if (use(&ranks[d]) ||
                kt_status_CU(kt_cu.cuEventRecord(ranks[d].ev0, ranks[d].stream), "cuEventRecord", __FILE__, __LINE__))
                return -1;
        for (int i = 0; i < LAUNCHES; i++)
            if (all_reduce(ranks, world, count)) return -1;
        double worst = 0;
        for (int d = 0; d < world; d++) {
            float ms = 0;
            if (use(&ranks[d])) return -1;
            KT_CHECK(CU, kt_cu.cuEventRecord(ranks[d].ev1, ranks[d].stream));
            KT_CHECK(CU, kt_cu.cuEventSynchronize(ranks[d].ev1));
            KT_CHECK(CU, kt_cu.cuEventElapsedTime(&ms, ranks[d].ev0, ranks[d].ev1));
            if (ms * 1e3 / LAUNCHES > worst) worst = ms * 1e3 / LAUNCHES;
        }
        us[r] = worst;
    }
    qsort(us, ROUNDS, sizeof *us, cmp_double);
    return 0;
}

int kt_allreduce_child(int world, const size_t *bytes, int n_sizes, uint64_t seed) {
    if (kt_gpu_init() || kt_nccl_init()) return -1;
    if (world < 1 || world > 8 || world > kt_gpu_count())
        return kt_fail("--gpus %d: this machine has %d GPUs (1 to 8 are supported)", world, kt_gpu_count());
    rank ranks[8];
    memset(ranks, 0, sizeof ranks);
    size_t max_bytes = BUSBW_BYTES;
    for (int i = 0; i < n_sizes; i++)
        if (bytes[i] > max_bytes) max_bytes = bytes[i];
    int rc = setup_ranks(ranks, world, max_bytes, seed);
    for (int i = 0; i <= n_sizes && !rc; i++) {
        size_t b = i < n_sizes ? bytes[i] : BUSBW_BYTES; /* the bus bandwidth message last */
        double us[ROUNDS];
        rc = time_size(ranks, world, b / 2, us) || sync_ranks(ranks, world) || check_sum(ranks, world, b / 2, seed);
        if (!rc)
            printf("%s %zu %.3f %.3f %.3f\n", i < n_sizes ? "size" : "busbw", b, us[ROUNDS / 2], us[0], us[ROUNDS - 1]);
    }
    free_ranks(ranks, world);
    fflush(stdout);
    return rc;
}

/* One setting's times, as its child printed them. */
typedef struct setting_result {
    int ok;
    char error[256];
    double median_us[KT_ALLREDUCE_MAX_SIZES], min_us[KT_ALLREDUCE_MAX_SIZES], max_us[KT_ALLREDUCE_MAX_SIZES];
    double busbw_us;
} setting_result;

/* Runs the child for setting s and parses its lines into r. */
static int run_setting(const kt_allreduce_options *o, int s, setting_result *r) {
    int out[2];
    if (pipe(out)) return kt_fail("pipe: %s", strerror(errno));
    char world[16], seed[32], sizes[1024] = "";
    snprintf(world, sizeof world, "%d", o->world);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    for (int i = 0; i < o->n_sizes; i++)
        snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%zu", i ? "," : "", o->bytes[i]);
    pid_t pid = fork();
    if (pid < 0) return kt_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        if (*kt_allreduce_settings[s].proto) setenv("NCCL_PROTO", kt_allreduce_settings[s].proto, 1);
        if (*kt_allreduce_settings[s].algo) setenv("NCCL_ALGO", kt_allreduce_settings[s].algo, 1);
        execl("/proc/self/exe", "kt", "bench", "allreduce", "--child", "--gpus", world, "--bytes", sizes, "--seed",
              seed, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    char line[256];
    int n = 0;
    memset(r, 0, sizeof *r);
    while (f && fgets(line, sizeof line, f)) {
        char kind[16];
        size_t b;
        double med, lo, hi;
        if (sscanf(line, "%15s %zu %lf %lf %lf", kind, &b, &med, &lo, &hi) != 5) continue;
        if (!strcmp(kind, "busbw"))
            r->busbw_us = med;
        else if (n < o->n_sizes)
            r->median_us[n] = med, r->min_us[n] = lo, r->max_us[n++] = hi;
    }
    if (f) fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    r->ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && n == o->n_sizes && r->busbw_us > 0;
    if (!r->ok)
        snprintf(r->error, sizeof r->error, "child exited %d after %d of %d sizes", WEXITSTATUS(status), n, o->n_sizes);
    return 0;
}

static const char *setting_name(int s, char *out, size_t n) {
    if (!*kt_allreduce_settings[s].proto)
        snprintf(out, n, "default");
    else
        snprintf(out, n, "%s/%s", kt_allreduce_settings[s].proto, kt_allreduce_settings[s].algo);
    return out;
}

/* Bytes a ring all-reduce moves per rank over its link: 2 (n - 1) / n of the message. */
static double link_bytes(size_t bytes, int world) { return 2.0 * (world - 1) / world * (double)bytes; }

int kt_bench_allreduce(const kt_allreduce_options *o, kt_allreduce_best *best) {
    setting_result *res = calloc(KT_ALLREDUCE_N_SETTINGS, sizeof *res);
    if (!res) return kt_fail("out of memory");
    for (int s = 0; s < KT_ALLREDUCE_N_SETTINGS; s++)
        if (run_setting(o, s, &res[s])) return free(res), -1;
    if (!res[0].ok) {
        int rc = kt_fail("all-reduce with NCCL's default settings failed: %s", res[0].error);
        free(res);
        return rc;
    }
    /* bus bandwidth: the default setting's large message */
    double busbw = o->world > 1 ? link_bytes(BUSBW_BYTES, o->world) / (res[0].busbw_us * 1e-6) : 0;
    printf("all-reduce, %d GPU%s, NCCL %d, NVLink multicast off; bus bandwidth %.1f GB/s (%u MB message)\n", o->world,
           o->world > 1 ? "s" : "", kt_nccl_version(), busbw / 1e9, BUSBW_BYTES >> 20);
    if (o->world == 1) printf("(one GPU: nothing crosses a link, so there is no floor; NCCL copies locally)\n");
    printf("%10s %6s  %-12s %9s %9s %9s %7s\n", "bytes", "B", "best", "best_us", "default", "floor_us", "ratio");
    for (int i = 0; i < o->n_sizes; i++) {
        int b = 0;
        for (int s = 1; s < KT_ALLREDUCE_N_SETTINGS; s++)
            if (res[s].ok && res[s].median_us[i] < res[b].median_us[i] * (1 - KT_NOISE_BAND)) b = s;
        char name[32];
        double floor_us = busbw > 0 ? link_bytes(o->bytes[i], o->world) / busbw * 1e6 : 0;
        char ratio[16] = "-";
        if (floor_us > 0) snprintf(ratio, sizeof ratio, "%.2fx", res[b].median_us[i] / floor_us);
        printf("%10zu %6ld  %-12s %9.2f %9.2f %9.2f %7s\n", o->bytes[i], (long)(o->bytes[i] / 2 / o->hidden),
               setting_name(b, name, sizeof name), res[b].median_us[i], res[0].median_us[i], floor_us, ratio);
        best[i].bytes = o->bytes[i];
        best[i].median_us = res[b].median_us[i];
        best[i].min_us = res[b].min_us[i];
        best[i].max_us = res[b].max_us[i];
        best[i].floor_us = floor_us;
        best[i].default_us = res[0].median_us[i];
        best[i].nccl_version = kt_nccl_version();
        snprintf(best[i].proto, sizeof best[i].proto, "%s", kt_allreduce_settings[b].proto);
        snprintf(best[i].algo, sizeof best[i].algo, "%s", kt_allreduce_settings[b].algo);
    }
    for (int s = 0; s < KT_ALLREDUCE_N_SETTINGS; s++) {
        char name[32];
        if (!res[s].ok) printf("setting %s failed: %s\n", setting_name(s, name, sizeof name), res[s].error);
    }
    free(res);
    return 0;
}
