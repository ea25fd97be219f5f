/* profile.c — `kt profile` (bench/profile.h): one variant verified and timed as the tuner
 * does, its floor and roof measured in the same run, then run --iters times inside its NVTX
 * ranges kt/<family>/<key>/<config> (runtime/nvtx.h) on the same seeded inputs and checked
 * again. With --ncu the command re-executes itself under Nsight Compute (clocks left alone,
 * only the kernels inside those ranges profiled, the sections of profiles/why_slow.ncu) and
 * prints what ncu measured beside the floor and roof. */
#include "profile.h"
#include "../runtime/nvtx.h"
#include "../tuner/tuner.h"
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_ITERS 100
#define UNDER_NCU_ENV "KT_PROFILE_UNDER_NCU" /* set for the re-executed command: run the loop only */
#define MAX_NCU_ARGS 96

/* The floor and roof of a problem on this GPU, measured now. */
typedef struct roof {
    double copy_bytes_per_s, mma_flops_per_s; /* NAN: not measured */
    double bytes, flops;
    double floor_us, mma_us, roof_us;
} roof;

static void measure_roof(const kt_family *f, const kt_problem *p, roof *r) {
    r->bytes = f->bytes(p);
    r->flops = f->flops ? f->flops(p) : NAN;
    r->copy_bytes_per_s = r->mma_flops_per_s = NAN;
    double at_8;
    if (kt_bench_copy_bandwidth(&r->copy_bytes_per_s)) r->copy_bytes_per_s = NAN;
    /* the rate of the mma the family uses (its roof); none: the roof is the floor */
    if (f->flops && f->mma != KT_MMA_NONE && kt_bench_mma_ceiling(f->mma, &r->mma_flops_per_s, &at_8))
        r->mma_flops_per_s = NAN;
    r->floor_us = r->bytes / r->copy_bytes_per_s * 1e6;
    r->mma_us = r->flops / r->mma_flops_per_s * 1e6;
    r->roof_us = isnan(r->mma_us) || r->mma_us < r->floor_us ? r->floor_us : r->mma_us;
}

static void print_roof(const roof *r, double us) {
    printf("  floor   %9.2f us  bytes %.4g / copy bandwidth %.3f TB/s (cuMemcpyDtoD)\n", r->floor_us, r->bytes,
           r->copy_bytes_per_s / 1e12);
    if (!isnan(r->flops))
        printf("  mma     %9.2f us  flops %.4g / e4m3 mma.sync ceiling %.0f TFLOP/s (bench/ceiling.cu)\n", r->mma_us,
               r->flops, r->mma_flops_per_s / 1e12);
    printf("  roof    %9.2f us  = max(floor, mma)\n", r->roof_us);
    printf("  kt      %9.2f us  = %.2fx the roof; %.3f TB/s of bytes()", us, us / r->roof_us, r->bytes / us / 1e6);
    if (!isnan(r->flops)) printf(", %.2f TFLOP/s of flops()", r->flops / us / 1e6);
    printf("\n");
}

/* The module to profile: --config compiled, or what dispatch serves from the DB. */
static int load_variant(const kt_profile_options *o, kt_module *mod) {
    const kt_family *f = o->family;
    if (!o->config) {
        kt_db *db = NULL;
        if (o->db_path && !access(o->db_path, R_OK) && kt_db_open(o->db_path, 1, &db)) return -1;
        kt_lookup_level level;
        int rc = kt_dispatch(db, f, &o->problem, mod, &level);
        if (db) kt_db_close(db);
        return rc;
    }
    kt_config c;
    char why[256];
    if (kt_parse_config(f, o->config, &c)) return -1;
    if (f->check_config(&c, kt_gpu_arch(), why, sizeof why)) return kt_fail("--config %s: %s", o->config, why);
    if (!f->config_fits(&c, &o->problem)) return kt_fail("--config %s does not fit this problem", o->config);
    kt_cubin cubin;
    if (kt_compile(f, &c, kt_gpu_arch(), &cubin)) return -1;
    int rc = kt_module_load(f, &c, &cubin, mod);
    kt_cubin_free(&cubin);
    return rc;
}

/* Poisons the outputs, runs iters launches of mod on problem p inside the variant's NVTX
 * ranges, and checks the last one's outputs against the reference. */
static int run_loop(kt_bench *b, const kt_module *mod, const kt_problem *p, const char *cfg, int iters) {
    if (kt_bench_poison(b)) return -1;
    kt_nvtx_push(mod->family, p, cfg);
    int rc = 0;
    for (int i = 0; i < iters && !rc; i++) rc = kt_bench_enqueue(b, mod, i);
    kt_nvtx_pop();
    double rel;
    char why[512];
    if (rc || kt_bench_check(b, &rel, why, sizeof why)) return -1;
    if (why[0]) return kt_fail("after the loop: %s", why);
    printf("  loop    %d launches inside the NVTX ranges, outputs checked after: rel_err %.3g\n", iters, rel);
    return 0;
}

/* Splits the embedded recipe profiles/why_slow.ncu (ncu arguments, # comments) into args. */
static int recipe_args(char *buf, size_t n, const char **args, int max) {
    size_t len;
    const char *text = kt_source_text("why_slow.ncu", &len);
    if (!text) return kt_fail("profiles/why_slow.ncu is not embedded in this build");
    if (len >= n) return kt_fail("profiles/why_slow.ncu is too long");
    memcpy(buf, text, len + 1);
    int count = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        for (char *save, *tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
            if (count == max) return kt_fail("profiles/why_slow.ncu has too many arguments");
            args[count++] = tok;
        }
    }
    return count;
}

/* Runs argv (argv[0] on PATH) with its stdout into a malloc'd string *out; the exit status. */
static int capture(char *const *argv, char **out) {
    int fds[2];
    if (pipe(fds)) return kt_fail("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return kt_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "kt: cannot run %s: %s (install Nsight Compute, or set KT_NCU to its ncu)\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 1 << 16;
    char *s = malloc(cap);
    for (ssize_t got = 1; s && got > 0;) {
        if (len + 4096 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
        if (s) got = read(fds[0], s + len, cap - len - 1);
        if (s && got > 0) len += (size_t)got;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!s) return kt_fail("out of memory reading ncu's output");
    s[len] = 0;
    *out = s;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void print_summary(const kt_ncu_kernel *k, const roof *r, double kt_us) {
    kt_ncu_summary s;
    kt_ncu_summarize(k, &s);
    printf("ncu: %s (grid %.0f, block %.0f, %.0f registers)\n", k->name, s.grid, s.block, s.registers);
    printf("  duration   %9.2f us  (kt's timing %.2f us; floor %.2f us, roof %.2f us: %.2fx the roof)\n", s.duration_us,
           kt_us, r->floor_us, r->roof_us, s.duration_us / r->roof_us);
    printf("  DRAM       %8.1f %% of peak  %.4g bytes moved (bytes() %.4g), %.3f TB/s\n", s.dram_pct, s.dram_bytes,
           r->bytes, s.dram_bytes / s.duration_us / 1e6);
    printf("  L2         %8.1f %% of peak\n  SM         %8.1f %% of peak\n", s.l2_pct, s.sm_pct);
    printf("  tensor     %8.1f %% of peak  (%s)\n", s.tensor_pct, s.tensor_metric[0] ? s.tensor_metric : "n/a");
    printf("  occupancy  %8.1f %% achieved, %.1f %% theoretical (warps of peak)\n", s.occupancy_pct, s.theoretical_pct);
    printf("  stalls    ");
    for (int i = 0; i < s.n_stalls; i++)
        printf(" %s %.2f%s", s.stall[i], s.stall_cycles[i], i + 1 < s.n_stalls ? "," : "");
    printf("%s\n", s.n_stalls ? "  (cycles per issued instruction)" : " n/a");
}

/* Re-executes this profile (the loop only, once) under ncu, inside the variant's ranges,
 * and prints ncu's numbers beside the roof. */
static int run_ncu(const kt_profile_options *o, const kt_problem *p, const char *cfg, const roof *r, double kt_us) {
    const kt_family *f = o->family;
    char buf[8192], filter[512], shape[128], m[32], seed[32], self[4096];
    const char *args[MAX_NCU_ARGS];
    const char *ncu = getenv("KT_NCU") ? getenv("KT_NCU") : "ncu";
    int n = 0;
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len < 0) return kt_fail("cannot find this program: %s", strerror(errno));
    self[len] = 0;
    kt_nvtx_filter(f, p, cfg, filter, sizeof filter);
    /* KT_NCU_NVTX: another --nvtx-include (e.g. 'kt/', every kt range) for an ncu that reads
     * the nested names differently. */
    if (getenv("KT_NCU_NVTX")) snprintf(filter, sizeof filter, "%s", getenv("KT_NCU_NVTX"));
    kt_format_shape(f, p, shape, sizeof shape);
    snprintf(m, sizeof m, "%ld", p->m);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    const char *head[] = {ncu,   "--clock-control", "none", "--nvtx", "--nvtx-include", filter, "--csv", "--page",
                          "raw", "--print-units",   "base"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) args[n++] = head[i];
    int k = recipe_args(buf, sizeof buf, args + n, MAX_NCU_ARGS - n - 20);
    if (k < 0) return -1;
    n += k;
    const char *tail[] = {self, "profile",  "--family", f->name,   "--shape", shape,    "--m",
                          m,    "--config", cfg,        "--iters", "1",       "--seed", seed};
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++) args[n++] = tail[i];
    args[n] = NULL;
    printf("  ncu     ");
    for (int i = 0; i < n; i++) printf(" %s", args[i]);
    printf("\n");
    setenv(UNDER_NCU_ENV, "1", 1);
    char *out = NULL;
    int status = capture((char *const *)args, &out);
    unsetenv(UNDER_NCU_ENV);
    if (status < 0) return -1;
    /* ncu's messages and the profiled command's output go to stderr; the CSV is parsed. */
    for (const char *l = out; *l;) {
        const char *nl = strchr(l, '\n');
        int ln = nl ? (int)(nl - l) : (int)strlen(l);
        if (*l != '"') fprintf(stderr, "%.*s\n", ln, l);
        l += ln + (nl ? 1 : 0);
    }
    /* KT_NCU_LOG=FILE keeps ncu's whole output (its raw CSV) for a closer look. */
    if (getenv("KT_NCU_LOG") && kt_write_file_atomic(getenv("KT_NCU_LOG"), out, strlen(out)))
        fprintf(stderr, "kt: KT_NCU_LOG: %s\n", kt_error());
    kt_ncu_report rep;
    int rc = kt_ncu_parse(out, &rep);
    free(out);
    if (rc) return -1;
    if (status)
        rc = kt_fail("ncu exited with status %d", status);
    else if (!rep.n_kernels)
        rc = kt_fail("ncu profiled no kernel inside %s", filter);
    for (int i = 0; !rc && i < rep.n_kernels; i++) print_summary(&rep.kernels[i], r, kt_us);
    kt_ncu_free(&rep);
    return rc;
}

int kt_profile_run(const kt_profile_options *o) {
    const kt_family *f = o->family;
    const kt_problem *p = &o->problem;
    int iters = o->iters > 0 ? o->iters : DEFAULT_ITERS, under_ncu = getenv(UNDER_NCU_ENV) != NULL;
    char shape[128], cfg[256];
    kt_format_shape(f, p, shape, sizeof shape);
    kt_module mod = {0};
    if (load_variant(o, &mod)) return -1;
    kt_format_config(f, &mod.config, cfg, sizeof cfg);
    kt_bench *b = NULL;
    kt_measurement m = {0};
    roof r = {0};
    int rc = kt_bench_setup(f, p, kt_problem_seed(o->seed, shape, p->m), &mod, &b);
    if (!rc && !under_ncu) {
        printf("%s %s %s=%ld %s (variant %s)\n", f->name, shape, f->m_name, p->m, cfg, mod.variant_id);
        rc = kt_bench_variant(b, &mod, &m);
        if (!rc && m.status != KT_OK) rc = kt_fail("%s: %s", kt_status_name(m.status), m.error);
        if (!rc)
            printf("  checked rel_err %.3g; timed %.2f us (min %.2f, max %.2f)\n", m.rel_err, m.median_us, m.min_us,
                   m.max_us);
        if (!rc) measure_roof(f, p, &r);
        if (!rc) print_roof(&r, m.median_us);
    }
    if (!rc) rc = run_loop(b, &mod, p, cfg, iters);
    if (!rc && !under_ncu) {
        char filter[512];
        kt_nvtx_filter(f, p, cfg, filter, sizeof filter);
        printf("  ranges   %s (ncu --nvtx --nvtx-include '%s')\n", filter, filter);
    }
    kt_bench_free(b);
    kt_module_unload(&mod);
    if (!rc && o->ncu && !under_ncu) rc = run_ncu(o, p, cfg, &r, m.median_us);
    return rc;
}
