/* main.c — the `kt` command line (the only module that knows every other): devices, list, compile, tune, bench, db.
 * Each command checks its input and fails with one clear line and a non-zero exit; commands that need a GPU say so on
 * machines without one. */
#include "../bench/bench.h"
#include "../bench/profile.h"
#include "../report/report.h"
#include "../tuner/tuner.h"
#include "kt.h"
#include "run.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KT_COMMIT
#define KT_COMMIT "unknown"
#endif

static int die(const char *fmt, const char *arg) {
    fprintf(stderr, "kt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 1;
}

/* die() with two strings. */
static int die2(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "kt: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 1;
}

/* Options shared by the commands that take a family, shapes and batch sizes. */
typedef struct common {
    const kt_family *family;
    kt_problem shapes[32];
    int n_shapes;
    long ms[32];
    int n_ms;
    const char *db_path, *config, *json, *strategy, *arch, *format, *emit, *where;
    int budget, sample, threads, help;
    int shard_index, shard_count, workers; /* tune: --shard i/n, --workers N */
    int iters, ncu, quiet;                 /* profile: --iters N, --ncu; tune: --quiet */
    int db_given;                          /* --db was on the command line (not the default kt.db) */
    const char *out_dir, *bench_json[8];   /* report: -o DIR, --bench FILE... */
    int n_bench_json;
    uint64_t seed;
} common;

enum {
    O_FAMILY = 1000,
    O_SHAPE,
    O_M,
    O_DB,
    O_CONFIG,
    O_JSON,
    O_STRATEGY,
    O_BUDGET,
    O_ARCH,
    O_SAMPLE,
    O_SEED,
    O_THREADS,
    O_FORMAT,
    O_EMIT,
    O_SHARD,
    O_WORKERS,
    O_WHERE,
    O_ITERS,
    O_NCU,
    O_QUIET,
    O_BENCH
};

static const struct option long_options[] = {{"family", required_argument, 0, O_FAMILY},
                                             {"shape", required_argument, 0, O_SHAPE},
                                             {"m", required_argument, 0, O_M},
                                             {"db", required_argument, 0, O_DB},
                                             {"config", required_argument, 0, O_CONFIG},
                                             {"json", required_argument, 0, O_JSON},
                                             {"strategy", required_argument, 0, O_STRATEGY},
                                             {"budget", required_argument, 0, O_BUDGET},
                                             {"arch", required_argument, 0, O_ARCH},
                                             {"sample", required_argument, 0, O_SAMPLE},
                                             {"seed", required_argument, 0, O_SEED},
                                             {"threads", required_argument, 0, O_THREADS},
                                             {"format", required_argument, 0, O_FORMAT},
                                             {"emit", required_argument, 0, O_EMIT},
                                             {"shard", required_argument, 0, O_SHARD},
                                             {"workers", required_argument, 0, O_WORKERS},
                                             {"where", required_argument, 0, O_WHERE},
                                             {"iters", required_argument, 0, O_ITERS},
                                             {"ncu", no_argument, 0, O_NCU},
                                             {"quiet", no_argument, 0, O_QUIET},
                                             {"bench", required_argument, 0, O_BENCH},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};

/* Parses argv into c; shapes are parsed after the family is known. "targets" = the family's list. */
static int parse_common(int argc, char **argv, common *c) {
    const char *shape_args[32];
    int n_shape_args = 0;
    memset(c, 0, sizeof *c);
    c->db_path = "kt.db";
    c->strategy = "fast";
    c->seed = 20261129;
    c->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    optind = 1;
    opterr = 0;
    for (int o; (o = getopt_long(argc, argv, "ho:", long_options, NULL)) != -1;) {
        switch (o) {
            case O_FAMILY:
                if (!(c->family = kt_family_find(optarg))) return die("%s", kt_error());
                break;
            case O_SHAPE:
                if (n_shape_args == 32) return die("too many --shape options (max %s)", "32");
                shape_args[n_shape_args++] = optarg;
                break;
            case O_M:
                if ((c->n_ms = kt_parse_int_list(optarg, c->ms, 32)) < 0) return die("--m: %s", kt_error());
                break;
            case O_DB:
                c->db_path = optarg;
                c->db_given = 1;
                break;
            case O_CONFIG:
                c->config = optarg;
                break;
            case O_JSON:
                c->json = optarg;
                break;
            case O_STRATEGY:
                if (!kt_strategy_find(optarg))
                    return die("--strategy must be fast, exhaustive or random, not '%s'", optarg);
                c->strategy = optarg;
                break;
            case O_BUDGET:
            case O_SAMPLE:
            case O_ITERS:
            case O_THREADS: {
                const char *name = o == O_BUDGET   ? "--budget"
                                   : o == O_SAMPLE ? "--sample"
                                   : o == O_ITERS  ? "--iters"
                                                   : "--threads";
                long v = INT_MAX - 1; /* all: more than any space has (verify adds the default) */
                if ((o != O_SAMPLE || strcmp(optarg, "all")) && kt_parse_long(optarg, 1, 1000000, &v))
                    return die2("%s: %s", name, kt_error());
                *(o == O_BUDGET   ? &c->budget
                  : o == O_SAMPLE ? &c->sample
                  : o == O_ITERS  ? &c->iters
                                  : &c->threads) = (int)v;
                break;
            }
            case O_NCU:
                c->ncu = 1;
                break;
            case O_QUIET:
                c->quiet = 1;
                break;
            case 'o':
                c->out_dir = optarg;
                break;
            case O_BENCH:
                if (c->n_bench_json == 8) return die("too many --bench files (max %s)", "8");
                c->bench_json[c->n_bench_json++] = optarg;
                break;
            case O_SEED: {
                long v;
                if (kt_parse_long(optarg, 0, LONG_MAX, &v)) return die("--seed: %s", kt_error());
                c->seed = (uint64_t)v;
                break;
            }
            case O_ARCH:
                c->arch = optarg;
                break;
            case O_FORMAT:
                c->format = optarg;
                break;
            case O_EMIT:
                c->emit = optarg;
                break;
            case O_WHERE:
                c->where = optarg;
                break;
            case O_SHARD: {
                char i[32] = "", n[32] = "";
                const char *slash = strchr(optarg, '/');
                long vi = -1, vn = 0;
                if (slash && slash - optarg < (long)sizeof i && strlen(slash + 1) < sizeof n) {
                    snprintf(i, sizeof i, "%.*s", (int)(slash - optarg), optarg);
                    snprintf(n, sizeof n, "%s", slash + 1);
                }
                if (kt_parse_long(n, 1, 1000000, &vn) || kt_parse_long(i, 0, vn - 1, &vi))
                    return die("--shard wants i/n with 0 <= i < n (e.g. 0/4), not '%s'", optarg);
                c->shard_index = (int)vi;
                c->shard_count = (int)vn;
                break;
            }
            case O_WORKERS: {
                long v;
                if (kt_parse_long(optarg, 1, 64, &v)) return die("--workers wants 1 to 64 GPUs, not '%s'", optarg);
                c->workers = (int)v;
                break;
            }
            case 'h':
                c->help = 1;
                break;
            default:
                return die("unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) return die("unexpected argument '%s' (see --help)", argv[optind]);
    if (c->config && c->sample) return die("--sample and --config contradict each other: give one%s", "");
    if (c->config && c->where) return die("--where and --config contradict each other: give one%s", "");
    if (n_shape_args && !c->family) return die("--shape needs --family%s", "");
    for (int i = 0; i < n_shape_args; i++) {
        if (!strcmp(shape_args[i], "targets")) {
            for (int t = 0; t < c->family->n_target_shapes && c->n_shapes < 32; t++) {
                kt_problem *p = &c->shapes[c->n_shapes++];
                memset(p, 0, sizeof *p);
                p->n_dims = c->family->n_keys;
                memcpy(p->dim, c->family->target_shapes[t], sizeof p->dim);
            }
            continue;
        }
        if (kt_parse_shape(c->family, shape_args[i], &c->shapes[c->n_shapes])) return die("%s", kt_error());
        c->n_shapes++;
    }
    /* Every (shape, M) must be supported before any work starts. */
    for (int s = 0; s < c->n_shapes; s++)
        for (int j = 0; j < c->n_ms; j++) {
            kt_problem p = c->shapes[s];
            p.m = c->ms[j];
            char why[256];
            if (c->family->check_problem(&p, why, sizeof why) || kt_check_problem_size(c->family, &p, why, sizeof why))
                return die("%s", why);
        }
    return 0;
}

static int need_gpu(kt_device_info *info) {
    if (kt_gpu_init() || kt_gpu_open(0, info)) return die("%s", kt_error());
    return 0;
}

static int cmd_devices(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: kt devices\n  Lists the CUDA devices and the NVRTC version (needs a GPU driver).\n");
        return 0;
    }
    printf("NVRTC %d.%d, JIT cache %s\n", kt_nvrtc_version() / 1000, kt_nvrtc_version() % 1000 / 10,
           *kt_cache_dir() ? kt_cache_dir() : "(none: HOME unset)");
    if (kt_gpu_init()) return die("%s", kt_error());
    int n = kt_gpu_count();
    if (!n) return die("no CUDA devices found%s", "");
    for (int i = 0; i < n; i++) {
        kt_device_info d;
        if (kt_gpu_open(i, &d)) return die("%s", kt_error());
        printf("%d: %s  sm_%d%d  %d SMs  %zu GB  L2 %zu MB  smem/block %zu KB  driver %d.%d\n", i, d.name, d.cc_major,
               d.cc_minor, d.sm_count, d.mem_bytes >> 30, d.l2_bytes >> 20, d.smem_per_block_optin >> 10,
               d.driver_version / 1000, d.driver_version % 1000 / 10);
    }
    return 0;
}

/* A pipeline's line and, verbose, its stages and target shapes. */
static void print_pipeline(const kt_family *f, int verbose) {
    printf("%-15s %s\n", f->name, f->summary);
    if (!verbose) return;
    printf("  stages:");
    for (int s = 0; s < f->n_stages; s++) printf("%s %s", s ? " ->" : "", f->stages[s].family->name);
    printf("  (each its family's winner)\n  target shapes:");
    char shape[128];
    for (int t = 0; t < f->n_target_shapes; t++) {
        kt_problem p = {.n_dims = f->n_keys};
        memcpy(p.dim, f->target_shapes[t], sizeof p.dim);
        kt_format_shape(f, &p, shape, sizeof shape);
        printf(" %s", shape);
    }
    printf("\n");
}

static void print_family(const kt_family *f, int verbose) {
    if (f->n_stages) {
        print_pipeline(f, verbose);
        return;
    }
    long total = 1;
    for (int i = 0; i < f->n_params; i++) total *= f->params[i].n_values;
    kt_config *list = NULL;
    int n120 = kt_space_enumerate(f, 120, NULL, NULL, &list, NULL);
    free(list);
    printf("%-15s %s\n", f->name, f->summary);
    if (!verbose) return;
    printf("  shape keys:");
    for (int i = 0; i < f->n_keys; i++) {
        printf(" %s", f->keys[i].name);
        for (int j = 0; f->keys[i].kind == KT_KEY_CATEGORY && f->keys[i].categories[j]; j++)
            printf("%s%s", j ? "|" : "={", f->keys[i].categories[j]);
        if (f->keys[i].kind == KT_KEY_CATEGORY) printf("}");
    }
    printf("  (batch: %s)\n  parameters:\n", f->m_name);
    for (int i = 0; i < f->n_params; i++) {
        printf("    %-18s", f->params[i].name);
        for (int j = 0; j < f->params[i].n_values; j++) printf(" %d", f->params[i].values[j]);
        printf("\n");
    }
    char cfg[256];
    kt_format_config(f, &f->default_config, cfg, sizeof cfg);
    printf("  space: %ld points, %d valid for sm_120\n  default: %s%s\n  target shapes:", total, n120, cfg,
           f->default_for ? "\n           (an untuned problem gets one chosen for its M and the GPU's SMs; this where "
                            "that one does not fit)"
                          : "");
    for (int t = 0; t < f->n_target_shapes; t++) {
        kt_problem p = {.n_dims = f->n_keys};
        memcpy(p.dim, f->target_shapes[t], sizeof p.dim);
        kt_format_shape(f, &p, cfg, sizeof cfg);
        printf(" %s", cfg);
    }
    printf("\n");
}

static int cmd_list(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: kt list [FAMILY]\n  Lists the kernel families, or one family's space in detail.\n");
        return 0;
    }
    if (argc > 2) return die("usage: kt list [FAMILY]%s", "");
    if (argc == 2) {
        const kt_family *f = kt_family_find(argv[1]);
        if (!f) return die("%s", kt_error());
        print_family(f, 1);
        return 0;
    }
    for (int i = 0; i < kt_family_count(); i++) print_family(kt_family_at(i), 0);
    return 0;
}

/* Variants `kt compile` builds when given neither --sample nor --config: a whole space is
 * minutes of NVRTC and a large cache, which nobody should get without asking. */
#define COMPILE_SAMPLE 16

static int cmd_compile(int argc, char **argv) {
    common c;
    if (parse_common(argc, argv, &c)) return 1;
    if (c.help) {
        printf("usage: kt compile --family F [--arch sm_120|sm_120a|sm_90] [--sample N|all | --config C] [--seed S]\n"
               "                  [--where P=V,...] [--emit DIR]\n"
               "  NVRTC-compiles variants (no GPU needed) and prints ptxas's registers, spills and stack.\n"
               "  --arch defaults to sm_120 (sm_89 and older are not supported: the kernels need sm_90's\n"
               "  griddepcontrol and clusters); --sample defaults to %d seeded configs of the space (or\n"
               "  of its --where part), --sample all compiles every one (fp8_gemm: ~10,000, minutes);\n",
               COMPILE_SAMPLE);
        printf("  --where keeps the part of the space with those params at those values (e.g. DIRECT=1);\n"
               "  --emit writes each cubin to DIR/VARIANT.cubin (for cuobjdump -sass).\n"
               "  Exits non-zero if any variant fails to compile.\n");
        return 0;
    }
    if (!c.family) return die("compile needs --family (see kt list)%s", "");
    if (c.family->n_stages) return die("%s is a pipeline: compile its stages' families", c.family->name);
    int arch = kt_arch_parse(c.arch ? c.arch : "sm_120");
    if (arch < 0)
        return die("unknown --arch '%s' (sm_120, sm_120a or sm_90; sm_89 and older lack griddepcontrol)", c.arch);
    kt_config *list = NULL;
    int rejected = 0, n;
    if (c.config) {
        list = malloc(sizeof *list);
        if (kt_parse_config(c.family, c.config, list)) return die("%s", kt_error());
        char why[256];
        if (c.family->check_config(list, arch, why, sizeof why)) return die("config rejected: %s", why);
        n = 1;
    } else {
        if ((n = kt_space_enumerate(c.family, arch, NULL, c.where, &list, &rejected)) < 0) return die("%s", kt_error());
        int space = n;
        n = kt_space_sample(c.family, list, n, c.sample ? c.sample : COMPILE_SAMPLE, c.seed);
        if (!c.sample && n < space)
            fprintf(stderr, "kt: compiling a seeded sample of %d of the %d variants (--sample all for every one)\n", n,
                    space);
    }
    printf("%s for %s: %d variants (%d rejected by constraints before compiling)\n", c.family->name, kt_arch_name(arch),
           n, rejected);
    printf("%-16s %5s %6s %6s %9s %6s  %s\n", "variant", "regs", "spill", "stack", "compile", "cached", "config");
    fflush(stdout); /* the plan shows before minutes of compiling */
    kt_compile_pool *pool = kt_compile_pool_start(c.family, list, n, arch, c.threads);
    int failed = 0;
    double t0 = kt_now();
    for (int i = 0; i < n; i++) {
        const char *err;
        const kt_cubin *cb = kt_compile_pool_wait(pool, i, &err);
        char cfg[256];
        kt_format_config(c.family, &list[i], cfg, sizeof cfg);
        if (!cb) {
            failed++;
            printf("%-16s compile error: %s\n  %s\n", "-", cfg, err);
            continue;
        }
        printf("%-16s %5d %6d %6d %7.0fms %6s  %s\n", cb->variant_id, cb->report.registers, cb->report.spill_bytes,
               cb->report.stack_bytes, cb->compile_ms, cb->from_cache ? "yes" : "no", cfg);
        if (c.emit) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.cubin", c.emit, cb->variant_id);
            if (kt_mkdirs(c.emit) || kt_write_file_atomic(path, cb->image, cb->size)) {
                printf("cannot emit %s: %s\n", path, kt_error());
                failed++;
            }
        }
    }
    kt_compile_pool_free(pool);
    free(list);
    printf("%d compiled, %d failed in %.1fs\n", n - failed, failed, kt_now() - t0);
    return failed ? 1 : 0;
}

static char cmdline[4096];

static int cmd_tune(int argc, char **argv) {
    common c;
    if (parse_common(argc, argv, &c)) return 1;
    if (c.help) {
        printf("usage: kt tune --family F --shape N=..,K=.. [--shape ...|targets] --m 1,16,64 [--db kt.db]\n"
               "               [--strategy fast|exhaustive|random] [--budget N] [--seed S] [--threads T]\n"
               "               [--shard i/n] [--workers N] [--where P=V,...]\n"
               "  Compiles, verifies and times variants on the GPUs (one worker process each; --workers\n"
               "  caps how many); records each result in the database as it is made, re-times each\n"
               "  problem's fastest few interleaved and updates the winners. Which variants:\n"
               "    fast (default): per shape, anchor Ms (smallest, largest, at most 4x apart) time the\n"
               "      default, the config dispatch serves the problem untuned, and one config of each\n"
               "      tile shape and path (nearest the default where that is worth timing, else\n"
               "      seeded; --budget at most, default 40), then a local\n"
               "      search from the best (--budget/2 more, at M >= 128 --budget, and what the sample\n"
               "      left; at M 128-256 then all of the winner's tile shape); every other M times the\n"
               "      5 best of its two nearest anchors and walks from its own best (12 in all);\n"
               "    exhaustive: every config that fits and is not hopeless;\n"
               "    random: --budget of those (default 64) per (shape, M), one seeded shuffle.\n"
               "  A variant that faults or hangs (watchdog: KT_WATCHDOG_S, default 20 s) is recorded and\n"
               "  its worker restarted. Resumes an interrupted sweep (same command, same --seed).\n"
               "  --shard i/n measures every n-th (shape, M) only (fast: every n-th shape, whole), for\n"
               "  one machine of n; join the databases with kt db merge. --where P=V,... sweeps only the\n"
               "  configs with those params at those values (e.g. DIRECT=1); parts separated by ';' are a\n"
               "  union, so that parts naming every param with --strategy exhaustive time just those configs.\n");
        return 0;
    }
    if (!c.family || !c.n_shapes || !c.n_ms) return die("tune needs --family, --shape and --m (see --help)%s", "");
    /* No GPU check here: this process never touches CUDA, its workers do (and say why not). */
    int budget = c.budget ? c.budget : kt_strategy_find(c.strategy)->default_budget;
    kt_sweep_options o = {.family = c.family,
                          .n_shapes = c.n_shapes,
                          .n_ms = c.n_ms,
                          .db_path = c.db_path,
                          .strategy = c.strategy,
                          .budget = budget,
                          .seed = c.seed,
                          .compile_threads = c.threads,
                          .commit = KT_COMMIT,
                          .cmdline = cmdline,
                          .shard_index = c.shard_index,
                          .shard_count = c.shard_count,
                          .max_workers = c.workers,
                          .where = c.where,
                          .quiet = c.quiet};
    memcpy(o.shapes, c.shapes, sizeof o.shapes);
    memcpy(o.ms, c.ms, sizeof o.ms);
    double t0 = kt_now();
    kt_sweep_report r;
    if (kt_sweep(&o, &r)) return die("tune failed: %s", kt_error());
    fprintf(stderr,
            "kt: sweep done in %.1fs on %d x %s: %ld measured (phase 1/2/3: %ld/%ld/%ld; %ld faults), "
            "%ld problems re-timed, %ld already measured; %ld (config, shape, M) worth timing, %ld pruned as "
            "hopeless\n",
            kt_now() - t0, r.workers, r.device.name, r.measured, r.by_phase[0], r.by_phase[1], r.by_phase[2], r.faults,
            r.retimed, r.already, r.space, r.pruned);
    double busy = r.busy_s[KT_BUSY_SETUP] + r.busy_s[KT_BUSY_LOAD] + r.busy_s[KT_BUSY_CHECK] + r.busy_s[KT_BUSY_TIME];
    fprintf(stderr,
            "kt: workers' time: %.1fs problem setup (%ld set up), %.1fs module loads, %.1fs checks, %.1fs "
            "timing, %.1fs waiting for jobs\n",
            r.busy_s[KT_BUSY_SETUP], r.setups, r.busy_s[KT_BUSY_LOAD], r.busy_s[KT_BUSY_CHECK], r.busy_s[KT_BUSY_TIME],
            r.worker_s > busy ? r.worker_s - busy : 0);
    return 0;
}

/* Verifies one compiled config on bench b; prints a line; returns 1 if it failed. */
static int verify_one(const kt_family *f, kt_bench *b, const kt_config *cfg, const kt_cubin *cubin,
                      const char *compile_error, const char *shape, long m) {
    char cs[256];
    kt_format_config(f, cfg, cs, sizeof cs);
    kt_measurement r = {0};
    kt_module mod;
    if (!cubin) {
        printf("FAIL %s M=%ld %s: compile error: %s\n", shape, m, cs, compile_error);
        return 1;
    }
    if (kt_module_load(f, cfg, cubin, &mod)) {
        printf("FAIL %s M=%ld %s: %s\n", shape, m, cs, kt_error());
        return 1;
    }
    int lost = kt_bench_variant(b, &mod, &r);
    kt_module_unload(&mod);
    if (lost || r.status != KT_OK) {
        printf("FAIL %s M=%ld %s: %s: %s\n", shape, m, cs, kt_status_name(r.status), lost ? kt_error() : r.error);
        return 1;
    }
    printf("ok   %s M=%ld %s: rel_err %.6e, %.2f us\n", shape, m, cs, r.rel_err, r.median_us);
    return 0;
}

/* Verifies pipeline f's stages, each its family's winner in the DB (or default), run in order
 * on each (shape, M); prints a line each; returns how many failed, or -1 if the GPU failed. */
static int verify_pipeline(const kt_family *f, const common *c, kt_db *db, const kt_config *pinned,
                           unsigned pinned_mask, const kt_module *ref) {
    int failures = 0;
    for (int s = 0; s < c->n_shapes; s++)
        for (int j = 0; j < c->n_ms; j++) {
            kt_problem p = c->shapes[s];
            p.m = c->ms[j];
            char shape[128], stages[512] = "", cs[256];
            kt_format_shape(f, &p, shape, sizeof shape);
            kt_module mods[KT_MAX_STAGES];
            kt_bench *b = NULL;
            if (kt_pipeline_dispatch_pinned(db, f, &p, pinned, pinned_mask, mods)) return -1;
            for (int i = 0; i < f->n_stages; i++) {
                kt_format_config(f->stages[i].family, &mods[i].config, cs, sizeof cs);
                snprintf(stages + strlen(stages), sizeof stages - strlen(stages), "%s%s %s", i ? " -> " : "",
                         f->stages[i].family->name, cs);
            }
            kt_measurement r = {0};
            int lost =
                kt_bench_setup(f, &p, c->seed + (uint64_t)(s * 131 + j), ref, &b) || kt_bench_variant(b, mods, &r);
            kt_bench_free(b);
            kt_pipeline_unload(f, mods);
            if (lost || r.status != KT_OK) {
                printf("FAIL %s M=%ld %s: %s: %s\n", shape, p.m, stages, kt_status_name(r.status),
                       lost ? kt_error() : r.error);
                if (lost) return -1;
                failures++;
                continue;
            }
            printf("ok   %s M=%ld %s: rel_err %.6e, %.2f us\n", shape, p.m, stages, r.rel_err, r.median_us);
        }
    return failures;
}

static int cmd_verify(int argc, char **argv) {
    common c;
    if (parse_common(argc, argv, &c)) return 1;
    if (c.help) {
        printf("usage: kt verify --family F --shape N=..,K=..|targets --m 1,16 [--config C | --sample N] [--seed S]\n"
               "                 [--where P=V,...] [--db kt.db]\n"
               "  Checks the default config (or --config, or the default plus N seeded random configs; with\n"
               "  --where, N seeded configs with those params at those values) on\n"
               "  fresh random inputs against the float64 reference, outputs poisoned first. Exits 1 on any failure.\n"
               "  A pipeline (moe_step) runs its stages' DB winners; --config 'FAMILY:C;;C' pins stages (one part\n"
               "  a stage in order, as kt bench prints a row's; an empty part keeps that stage's winner).\n");
        return 0;
    }
    if (!c.family || !c.n_shapes || !c.n_ms) return die("verify needs --family, --shape and --m (see --help)%s", "");
    const kt_family *f = c.family;
    kt_config one, pinned[KT_MAX_STAGES];
    unsigned pinned_mask = 0;
    if (c.config &&
        (f->n_stages ? kt_parse_stage_configs(f, c.config, pinned, &pinned_mask) : kt_parse_config(f, c.config, &one)))
        return die("%s", kt_error());
    kt_device_info info;
    if (need_gpu(&info)) return 1;
    if (f->n_stages) {
        kt_db *db = NULL;
        kt_module ref = {0};
        /* the stages' winners from the DB; without one (no --db and no kt.db here) their defaults */
        if (!c.db_given && access(c.db_path, F_OK))
            fprintf(stderr, "kt: no %s here: %s's stages run their family defaults\n", c.db_path, f->name);
        else if (kt_db_open(c.db_path, 1, &db))
            return die("%s", kt_error());
        if (f->launch_reference && kt_reference_module(f, &ref)) return die("%s", kt_error());
        int failed = verify_pipeline(f, &c, db, pinned, pinned_mask, f->launch_reference ? &ref : NULL);
        kt_module_unload(&ref);
        kt_db_close(db);
        if (failed < 0) return die("%s", kt_error());
        printf("%d verified, %d failed\n", c.n_shapes * c.n_ms - failed, failed);
        return failed ? 1 : 0;
    }
    int arch = kt_gpu_arch(), failures = 0, checks = 0;
    kt_cubin ref_cubin;
    kt_module ref_mod;
    if (kt_compile(f, &f->default_config, arch, &ref_cubin) ||
        kt_module_load(f, &f->default_config, &ref_cubin, &ref_mod))
        return die("%s", kt_error());
    for (int s = 0; s < c.n_shapes; s++)
        for (int j = 0; j < c.n_ms; j++) {
            kt_problem p = c.shapes[s];
            p.m = c.ms[j];
            char shape[128];
            kt_format_shape(f, &p, shape, sizeof shape);
            kt_bench *b = NULL;
            if (kt_bench_setup(f, &p, c.seed + (uint64_t)(s * 131 + j), &ref_mod, &b)) {
                kt_bench_free(b);
                return die("%s", kt_error());
            }
            kt_config *list = NULL;
            int n = 1;
            if (c.config) {
                list = malloc(sizeof *list);
                list[0] = one;
            } else {
                if ((n = kt_space_enumerate(f, arch, &p, c.where, &list, NULL)) < 0) return die("%s", kt_error());
                /* Sample among the configs a sweep would time (the hopeless are pruned there too). */
                int kept = 0;
                for (int i = 0; i < n; i++)
                    if (!f->hopeless || !f->hopeless(&list[i], &p)) list[kept++] = list[i];
                n = kt_space_sample(f, list, kept, c.sample + 1, c.seed + (uint64_t)(s * 131 + j));
                if (!c.where && memcmp(&list[0], &f->default_config, sizeof one) &&
                    f->config_fits(&f->default_config, &p))
                    list[0] = f->default_config;
            }
            kt_compile_pool *pool = kt_compile_pool_start(f, list, n, arch, c.threads);
            for (int i = 0; i < n; i++, checks++) {
                const char *err = NULL;
                const kt_cubin *cubin = kt_compile_pool_wait(pool, i, &err);
                failures += verify_one(f, b, &list[i], cubin, err, shape, p.m);
            }
            kt_compile_pool_free(pool);
            free(list);
            kt_bench_free(b);
        }
    kt_module_unload(&ref_mod);
    kt_cubin_free(&ref_cubin);
    printf("%d verified, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}

/* Stores each size's best setting into db (opened writable before the bench, so a bad --db
 * fails first) as one run of GPU 0's device. */
static int store_allreduce(kt_db *db, const char *path, const kt_allreduce_options *o, const kt_allreduce_best *best) {
    kt_device_info info;
    kt_db_device dev;
    long long device_id, run_id;
    if (kt_gpu_open(0, &info)) return -1;
    kt_gpu_db_device(&info, &dev);
    if (kt_db_device_id(db, &dev, &device_id) || kt_db_run_begin(db, device_id, KT_COMMIT, cmdline, &run_id)) return -1;
    for (int i = 0; i < o->n_sizes; i++) {
        kt_allreduce_row r = {.device_id = device_id,
                              .run_id = run_id,
                              .world = o->world,
                              .nccl_version = best[i].nccl_version,
                              .bytes = best[i].bytes,
                              .median_us = best[i].median_us,
                              .min_us = best[i].min_us,
                              .max_us = best[i].max_us,
                              .default_us = best[i].default_us,
                              .floor_us = best[i].floor_us};
        snprintf(r.proto, sizeof r.proto, "%s", best[i].proto);
        snprintf(r.algo, sizeof r.algo, "%s", best[i].algo);
        if (kt_db_set_allreduce(db, &r)) return -1;
    }
    printf("%d sizes' best settings stored in %s (run %lld)\n", o->n_sizes, path, run_id);
    return 0;
}

/* What kt bench and kt profile check before they start: --config is a config of the family,
 * the database is readable where the variant comes from it (db_winner: kt bench without
 * --config; a --db given must be, kt.db may be absent: then the family defaults, as kt verify
 * does), and there is a GPU. 0, or 1 with the reason printed. */
static int check_variant_options(const common *c, int db_winner) {
    kt_config probe[KT_MAX_STAGES];
    unsigned pinned;
    const kt_family *f = c->family;
    if (c->config &&
        (f->n_stages ? kt_parse_stage_configs(f, c->config, probe, &pinned) : kt_parse_config(f, c->config, probe)))
        return die("%s", kt_error());
    int given = c->config && !f->n_stages; /* the variant given: no DB (a pipeline's unpinned stages read it) */
    int defaults = db_winner && !given && !c->db_given && access(c->db_path, F_OK);
    if (defaults)
        fprintf(stderr, "kt: no %s here: %s runs its family defaults\n", c->db_path, f->name);
    else if (db_winner && !given && access(c->db_path, R_OK))
        return die("cannot read database '%s' (tune first, or pass --config)", c->db_path);
    kt_device_info info;
    return need_gpu(&info);
}

/* kt bench allreduce: its own options (no family); --child is the per-setting process. */
static int cmd_bench_allreduce(int argc, char **argv) {
    static const struct option opts[] = {{"gpus", required_argument, 0, 'g'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"hidden", required_argument, 0, 'H'},
                                         {"bytes", required_argument, 0, 'B'},
                                         {"seed", required_argument, 0, 's'},
                                         {"child", no_argument, 0, 'c'},
                                         {"db", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    kt_allreduce_options o = {.world = 0, .hidden = 4096, .seed = 20261201};
    const char *db_path = NULL;
    long batch[KT_ALLREDUCE_MAX_SIZES] = {1, 2, 4, 8, 16, 32, 64, 128, 256}, list[KT_ALLREDUCE_MAX_SIZES];
    int n_batch = 9, child = 0, n;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
            case 'g':
                if (kt_parse_int_list(optarg, list, 1) != 1 || list[0] > 8)
                    return die("--gpus '%s': one count from 1 to 8", optarg);
                o.world = (int)list[0];
                break;
            case 'b':
                if ((n_batch = kt_parse_int_list(optarg, batch, KT_ALLREDUCE_MAX_SIZES)) < 0)
                    return die("--batch: %s", kt_error());
                break;
            case 'H':
                if (kt_parse_int_list(optarg, list, 1) != 1) return die("--hidden '%s': one positive size", optarg);
                o.hidden = list[0];
                break;
            case 'B':
                if ((n = kt_parse_int_list(optarg, list, KT_ALLREDUCE_MAX_SIZES)) < 0)
                    return die("--bytes: %s", kt_error());
                for (o.n_sizes = 0; o.n_sizes < n; o.n_sizes++) o.bytes[o.n_sizes] = (size_t)list[o.n_sizes];
                break;
            case 's':
                o.seed = strtoull(optarg, NULL, 10);
                break;
            case 'c':
                child = 1;
                break;
            case 'd':
                db_path = optarg;
                break;
            case 'h':
                printf("usage: kt bench allreduce [--gpus N] [--batch 1,16,64] [--hidden 4096] [--db kt.db]\n"
                       "  NCCL all-reduce of hidden x B bf16 over N GPUs of this host (default: all), each NCCL\n"
                       "  protocol/algorithm timed in its own process (NVLink multicast off), against the bytes a\n"
                       "  ring moves over the measured bus bandwidth; prints the best setting per size, and with\n"
                       "  --db stores it per (device, GPUs, size bucket), which kt run --tp applies at start.\n");
                return 0;
            default:
                return die("bench allreduce: unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (kt_gpu_init()) return die("%s", kt_error());
    if (!o.world) o.world = kt_gpu_count() < 8 ? kt_gpu_count() : 8;
    if (child) return kt_allreduce_child(o.world, o.bytes, o.n_sizes, o.seed) ? die("%s", kt_error()) : 0;
    for (o.n_sizes = 0; o.n_sizes < n_batch; o.n_sizes++) {
        if (batch[o.n_sizes] > (1L << 40) / o.hidden) return die("--batch %s: message too large", "x --hidden");
        o.bytes[o.n_sizes] = (size_t)(batch[o.n_sizes] * o.hidden * 2);
    }
    kt_allreduce_best best[KT_ALLREDUCE_MAX_SIZES];
    kt_db *db = NULL;
    if (db_path && kt_db_open(db_path, 0, &db)) return die("%s", kt_error());
    int rc = kt_bench_allreduce(&o, best)                   ? die("bench allreduce failed: %s", kt_error())
             : db && store_allreduce(db, db_path, &o, best) ? die("bench allreduce: %s", kt_error())
                                                            : 0;
    kt_db_close(db);
    return rc;
}

/* kt bench launch: the graph-latency probe (no family). */
static int cmd_bench_launch(int argc, char **argv) {
    static const struct option opts[] = {{"kernels", required_argument, 0, 'n'},
                                         {"json", required_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    long n = 1024;
    const char *json = NULL;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
            case 'n':
                if (kt_parse_int_list(optarg, &n, 1) != 1 || n <= 16 || n > 65536)
                    return die("--kernels '%s': one count from 17 to 65536 (the short chain is 16)", optarg);
                break;
            case 'j':
                json = optarg;
                break;
            case 'h':
                printf("usage: kt bench launch [--kernels 1024] [--json FILE]\n"
                       "  The per-kernel time of a chain of tiny dependent kernels replayed as one CUDA graph,\n"
                       "  without and with programmatic dependent launch, at 1 block and one block per SM: the\n"
                       "  floor a decode step of N kernels pays per launch.\n");
                return 0;
            default:
                return die("bench launch: unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    kt_device_info info;
    if (need_gpu(&info)) return 1;
    return kt_bench_graph_latency((int)n, json) ? die("bench launch failed: %s", kt_error()) : 0;
}

/* kt bench stream: the DRAM-read probe (no family). */
static int cmd_bench_stream(int argc, char **argv) {
    static const struct option opts[] = {{"kb", required_argument, 0, 'k'},
                                         {"json", required_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    long kb[32] = {1024, 2048, 4096, 8192, 12800, 16384, 25600, 51200, 102400};
    int n = 9;
    const char *json = NULL;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
            case 'k':
                if ((n = kt_parse_int_list(optarg, kb, 32)) < 0) return die("--kb: %s", kt_error());
                for (int i = 0; i < n; i++)
                    if (kb[i] < 64 || kb[i] > 2097152)
                        return die("--kb '%s': sizes from 64 to 2097152 KiB (2 GiB: the indexer scan at 128K x 64 "
                                   "reads 1.03 GiB)",
                                   optarg);
                break;
            case 'j':
                json = optarg;
                break;
            case 'h':
                printf(
                    "usage: kt bench stream [--kb 1024,4096,25600] [--json FILE]\n"
                    "  The median time one kernel that only reads N KiB from DRAM takes, timed as kt bench times\n"
                    "  a variant (plain launch, PDL waiting before its loads, PDL loading before its wait), against\n"
                    "  bytes / the copy bandwidth: the ratio to the floor no kernel of that many bytes can beat.\n");
                return 0;
            default:
                return die("bench stream: unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        }
    }
    double mb[32];
    for (int i = 0; i < n; i++) mb[i] = kb[i] / 1024.0;
    kt_device_info info;
    if (need_gpu(&info)) return 1;
    return kt_bench_dram_stream(mb, n, json) ? die("bench stream failed: %s", kt_error()) : 0;
}

static int cmd_bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "allreduce")) return cmd_bench_allreduce(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "launch")) return cmd_bench_launch(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "stream")) return cmd_bench_stream(argc - 1, argv + 1);
    common c;
    if (parse_common(argc, argv, &c)) return 1;
    if (c.help) {
        printf("usage: kt bench --family F --shape N=..,K=.. --m 1,16,64 [--db kt.db | --config C] [--json FILE]\n"
               "  Times the DB winner (or --config) and the baselines (cuBLASLt FP8, cuBLAS bf16) by the\n"
               "  same method, and prints the floor and the ratios. A pipeline's --config pins some of its\n"
               "  stages ('FAMILY:C;;C': one part a stage, empty for the DB's winner), the others from the DB.\n");
        return 0;
    }
    if (!c.family || !c.n_shapes || !c.n_ms) return die("bench needs --family, --shape and --m (see --help)%s", "");
    if (check_variant_options(&c, 1)) return 1;
    kt_bench_options o = {
        .family = c.family,
        .n_shapes = c.n_shapes,
        .n_ms = c.n_ms,
        .db_path = (c.config && !c.family->n_stages) || (!c.db_given && access(c.db_path, F_OK)) ? NULL : c.db_path,
        .config = c.config,
        .json_path = c.json,
        .seed = c.seed};
    memcpy(o.shapes, c.shapes, sizeof o.shapes);
    memcpy(o.ms, c.ms, sizeof o.ms);
    if (kt_bench_run(&o)) return die("bench failed: %s", kt_error());
    return 0;
}

static int cmd_profile(int argc, char **argv) {
    common c;
    if (parse_common(argc, argv, &c)) return 1;
    if (c.help) {
        printf("usage: kt profile --family F --shape N=..,K=.. --m B [--config C | --db kt.db] [--iters N] [--ncu]\n"
               "                  [--seed S]\n"
               "  Verifies and times one variant (--config, else the DB winner as dispatch serves it) on the\n"
               "  tuner's seeded inputs, measures its floor and roof, then runs it N times (100) inside the\n"
               "  NVTX ranges kt/<family>/<key>/<config> (profiles/README.md). --ncu re-runs the loop once\n"
               "  under Nsight Compute (KT_NCU or ncu on PATH; clocks left alone; the metric set of\n"
               "  profiles/why_slow.ncu) and prints DRAM and L2 throughput against peak, tensor pipe\n"
               "  utilisation, occupancy and the top warp stalls beside the floor and roof.\n");
        return 0;
    }
    if (!c.family || c.n_shapes != 1 || c.n_ms != 1)
        return die("profile needs --family, one --shape and one --m (see --help)%s", "");
    kt_profile_options o = {.family = c.family,
                            .problem = c.shapes[0],
                            .db_path = c.db_path,
                            .config = c.config,
                            .iters = c.iters,
                            .ncu = c.ncu,
                            .seed = c.seed};
    o.problem.m = c.ms[0];
    if (check_variant_options(&c, 0)) return 1;
    if (kt_profile_run(&o)) return die("profile failed: %s", kt_error());
    return 0;
}

static int cmd_report(int argc, char **argv) {
    common c;
    if (parse_common(argc, argv, &c)) return 1;
    if (c.help) {
        printf("usage: kt report [--db kt.db] -o DIR [--bench FILE.json ...]\n"
               "  Writes DIR/index.html: one self-contained page (no scripts, no network) of SVG plots of the\n"
               "  database: per problem every measured variant (failures with their reason), per family the\n"
               "  winners against floor, roof and baselines, a roofline and the winner over the batch\n"
               "  buckets, and the provenance of every run. Floors, roofs and baselines come from\n"
               "  `kt bench --json` files (--bench, up to 8) and the families' bytes() and flops().\n");
        return 0;
    }
    if (!c.out_dir) return die("report needs -o DIR (see --help)%s", "");
    kt_report_options o = {.db_path = c.db_path,
                           .out_dir = c.out_dir,
                           .bench_json = c.bench_json,
                           .n_bench_json = c.n_bench_json,
                           .cmdline = cmdline};
    int plots = 0;
    if (kt_report_write(&o, &plots)) return die("%s", kt_error());
    printf("wrote %s/index.html (%d plots)\n", c.out_dir, plots);
    return 0;
}

/* kt db merge --db OUT IN...: the inputs are positional, so it parses its own argv. */
static int cmd_db_merge(int argc, char **argv) {
    const char *out = NULL, *in[256];
    int n_in = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--db") && i + 1 < argc)
            out = argv[++i];
        else if (!strncmp(argv[i], "--db=", 5))
            out = argv[i] + 5;
        else if (argv[i][0] == '-')
            return die("unknown or incomplete option '%s' (see kt db --help)", argv[i]);
        else if (n_in == 256)
            return die("too many databases to merge at once (max %s)", "256");
        else
            in[n_in++] = argv[i];
    }
    if (!out || !n_in) return die("usage: kt db merge --db OUT.db IN.db [IN.db ...]%s", "");
    if (kt_db_merge_files(out, in, n_in)) return die("merge failed, %s", kt_error());
    for (int i = 0; i < n_in; i++) printf("merged %s into %s\n", in[i], out);
    return 0;
}

static int cmd_db(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: kt db show [--db FILE]\n       kt db export --format json|csv [--db FILE]\n"
               "       kt db merge --db OUT.db IN.db [IN.db ...]\n       kt db migrate [--db FILE]\n"
               "  Prints the database, exports every measurement, merges shard databases into OUT\n"
               "  (created if absent; measurements already there are kept, winners recomputed), or\n"
               "  brings a file of an older schema to this build's (read-only opens never migrate).\n");
        return argc < 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "merge")) return cmd_db_merge(argc - 1, argv + 1);
    common c;
    if (parse_common(argc - 1, argv + 1, &c)) return 1;
    if (strcmp(sub, "show") && strcmp(sub, "export") && strcmp(sub, "migrate"))
        return die("unknown db command '%s' (show, export, merge, migrate)", sub);
    if (!strcmp(sub, "export") && !c.format) return die("db export needs --format json|csv%s", "");
    if (access(c.db_path, R_OK)) return die("cannot read database '%s': no such file", c.db_path);
    kt_db *db;
    if (!strcmp(sub, "migrate")) { /* a writable open migrates, in one transaction */
        if (kt_db_open(c.db_path, 0, &db)) return die("%s", kt_error());
        kt_db_close(db);
        printf("%s: at this build's schema\n", c.db_path);
        return 0;
    }
    if (kt_db_open(c.db_path, 1, &db)) return die("%s", kt_error());
    int rc = !strcmp(sub, "show") ? kt_db_show(db, stdout) : kt_db_export(db, c.format, stdout);
    kt_db_close(db);
    return rc ? die("%s", kt_error()) : 0;
}

/* kt run: the bundled runtime's decode loop (runtime/run.c). */
static int cmd_run(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"synthetic", no_argument, 0, 'y'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"context", required_argument, 0, 'c'},
                                         {"steps", required_argument, 0, 's'},
                                         {"layers", required_argument, 0, 'l'},
                                         {"tp-shapes", required_argument, 0, 't'},
                                         {"db", required_argument, 0, 'd'},
                                         {"json", required_argument, 0, 'j'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"dump", required_argument, 0, 'u'},
                                         {"reference", required_argument, 0, 'r'},
                                         {"seed", required_argument, 0, 'e'},
                                         {"tp", required_argument, 0, 'n'},
                                         {"plain-kernels", no_argument, 0, 'P'},
                                         {"plan", required_argument, 0, 'A'},
                                         {"experts", required_argument, 0, 'X'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    kt_run_options o = {.batch = 1, .context = 4096, .steps = 8, .tp_shapes = 1, .seed = 20261201};
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        int bad_num = optarg && (*end || end == optarg);
        switch (c) {
            case 'm':
                o.model_dir = optarg;
                break;
            case 'y':
                o.synthetic = 1;
                break;
            case 'b':
                if (bad_num || v < 1 || v > 4096) return die("--batch: expected 1 to 4096, got '%s'", optarg);
                o.batch = (int)v;
                break;
            case 'c':
                if (bad_num || v < 1) return die("--context: expected a positive integer, got '%s'", optarg);
                o.context = v;
                break;
            case 's':
                if (bad_num || v < 0) return die("--steps: expected a non-negative integer, got '%s'", optarg);
                o.steps = v;
                break;
            case 'l':
                if (bad_num || v < 1) return die("--layers: expected a positive integer, got '%s'", optarg);
                o.layers = v;
                break;
            case 't':
                if (bad_num || v < 1 || v > 64) return die("--tp-shapes: expected 1 to 64, got '%s'", optarg);
                o.tp_shapes = (int)v;
                break;
            case 'e':
                if (bad_num) return die("--seed: expected an integer, got '%s'", optarg);
                o.seed = (uint64_t)v;
                break;
            case 'n':
                if (bad_num || v != 1)
                    return die(
                        "--tp: only world size 1 runs in one process today (2-8 GPUs are a separate issue), got '%s'",
                        optarg);
                o.tp = 1;
                break;
            case 'd':
                o.db_path = optarg;
                break;
            case 'P':
                o.plain_kernels = 1;
                break;
            case 'A': {
                int a = kt_arch_parse(optarg);
                if (a < 0) return die("--plan: expected sm_90, sm_120 or sm_120a, got '%s'", optarg);
                o.plan_arch = a;
                break;
            }
            case 'j':
                o.json_path = optarg;
                break;
            case 'p':
                o.prompt_path = optarg;
                break;
            case 'u':
                o.dump_path = optarg;
                break;
            case 'X':
                if (strcmp(optarg, "fp8") && strcmp(optarg, "mxfp4"))
                    return die("--experts: expected fp8 or mxfp4, got '%s'", optarg);
                o.experts = optarg;
                break;
            case 'r':
                if (strcmp(optarg, "exact") && strcmp(optarg, "kt"))
                    return die("--reference: expected exact or kt, got '%s'", optarg);
                o.reference = optarg;
                break;
            case 'h':
                printf("usage: kt run --model DIR [--synthetic] [--batch B] [--context L] [--steps S] [--layers N]\n"
                       "              [--tp-shapes N] [--db FILE] [--json FILE] [--prompt FILE] [--dump FILE]\n"
                       "              [--reference exact|kt] [--seed N] [--tp 1] [--plain-kernels] [--plan ARCH]\n"
                       "              [--experts fp8|mxfp4]\n"
                       "  Decodes B sequences: the prompt file's token ids (one line each; default a seeded token "
                       "each), then S\n"
                       "  greedy tokens, one step at a time, on the GPU from the DB's winners (family defaults\n"
                       "  without --db), or with --reference on the float64 host reference (exact: the weights as\n"
                       "  they are; kt: kt's FP8 formats). --dump writes every step's logits (f32 [step][B][vocab / N "
                       "under --tp-shapes N]).\n"
                       "  --tp 1 adds the tensor-parallel all-reduces over NCCL (loaded at run time; $KT_NCCL).\n"
                       "  --plain-kernels runs the simple reference kernels of runtime/model.cu where a kt family\n"
                       "  exists (indexer, attention, router and experts): the path to compare logits and TPOT with.\n"
                       "  --plan ARCH prints, without a GPU, which parts run a family and each family problem the\n"
                       "  step dispatches with the default config for ARCH (an H200's 132 SMs), one per line.\n"
                       "  --experts fp8|mxfp4 picks the routed experts' format of --synthetic weights and of --plan\n"
                       "  (default fp8): mxfp4 runs them through moe_gemm FORMAT=mxfp4, as V4-Flash ships them. A\n"
                       "  checkpoint's experts run in the format it stores (MXFP4: moe_gemm; FP8/BF16: FP8).\n");
                return 0;
            default:
                return die("unknown or incomplete option '%s' (see kt run --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) return die("unexpected argument '%s' (see kt run --help)", argv[optind]);
    if (!o.model_dir) return die("kt run needs --model DIR (a folder with config.json)%s", "");
    if (o.db_path && access(o.db_path, R_OK)) return die("cannot read database '%s': no such file", o.db_path);
    return kt_run(&o) ? die("%s", kt_error()) : 0;
}

static const struct {
    const char *name, *help;
    int (*run)(int, char **);
} commands[] = {
    {"devices", "list CUDA devices (needs a GPU)", cmd_devices},
    {"list", "list kernel families and their tuning spaces", cmd_list},
    {"compile", "NVRTC-compile variants for an arch, with ptxas reports (no GPU needed)", cmd_compile},
    {"verify", "check variants against the float64 reference on the GPU", cmd_verify},
    {"tune", "sweep variants on the GPU into the database", cmd_tune},
    {"bench", "time the tuned kernel against cuBLASLt/cuBLAS and the floor", cmd_bench},
    {"db", "show, export or merge databases", cmd_db},
    {"report", "write an HTML page of SVG plots of a database (no GPU needed)", cmd_report},
    {"profile", "run one variant in NVTX ranges, or under Nsight Compute (--ncu), beside its roof", cmd_profile},
    {"run", "decode a DeepSeek-V4 model folder from tuned winners (needs a GPU; --reference: host)", cmd_run},
};

int main(int argc, char **argv) {
    kt_worker_main(argc, argv); /* returns unless this process is a sweep's worker */
    /* line by line into files and pipes too: a command killed by a caller's timeout still
     * leaves every result line it printed (a verify's lines were lost whole that way) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t used = 0;
    for (int i = 0; i < argc && used < sizeof cmdline; i++)
        used += snprintf(cmdline + used, sizeof cmdline - used, "%s%s", i ? " " : "", argv[i]);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        printf("kt — tune and ship FP8 decode kernels for sm_120 (commit %s)\nusage: kt COMMAND [options]\n\n",
               KT_COMMIT);
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            printf("  %-8s %s\n", commands[i].name, commands[i].help);
        printf("\n`kt COMMAND --help` describes each command.\n");
        return argc < 2 ? 1 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    return die("unknown command '%s' (see kt --help)", argv[1]);
}
