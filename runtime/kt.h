/* kt.h — the public API of libkt: errors, shapes, kernel-family descriptors,
 * the NVRTC JIT, the GPU layer, the winners database and dispatch.
 * Every public symbol is prefixed kt_. Functions return 0 on success and -1 on
 * failure with the reason in kt_error(), unless their contract says otherwise. */
#ifndef KT_H
#define KT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------- errors */

/* The last error message of this thread ("file:line: what: api message"). */
const char *kt_error(void);
/* Sets the thread's error message (printf-style); always returns -1. */
int kt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A macro argument as a string after its expansion (a library's version macro, a driver symbol's name). */
#define KT_STR2(x) #x
#define KT_STR(x) KT_STR2(x)

/* One checking macro for every API's status: KT_CHECK(CU|NVRTC|CUBLAS|CUBLASLT|NCCL|SQL, call).
 * On failure it records "file:line: call: <the API's own message>" and makes the
 * enclosing function (which returns int) return -1. */
#define KT_CHECK(api, call)                                                                                            \
    do {                                                                                                               \
        if (kt_status_##api((int)(call), #call, __FILE__, __LINE__)) return -1;                                        \
    } while (0)
/* The status checkers behind KT_CHECK, each beside its API: 0 when status is success, else -1
 * with the error set. CU in gpu.c, NVRTC in jit.c, SQL in db/, NCCL in nccl.c, CUBLASLT (cuBLASLt
 * loaded at run time by the step's KT_STEP_GEMV_LT) in lt_gemv.c (declared in lt_gemv.h); CUBLAS is
 * the development library's (bench/baselines.c, declared in bench/bench.h). */
int kt_status_CU(int status, const char *call, const char *file, int line);
int kt_status_NVRTC(int status, const char *call, const char *file, int line);
int kt_status_NCCL(int status, const char *call, const char *file, int line);
int kt_status_SQL(int status, const char *call, const char *file, int line); /* OK/ROW/DONE pass */
/* What every checker writes: "file:line: call: API error N: msg"; always returns -1. */
int kt_status_fail(const char *api, const char *msg, int status, const char *call, const char *file, int line);

/* ------------------------------------------------------------- utilities */

/* 64-bit hash (XXH3) of a buffer, chained from seed. */
uint64_t kt_hash(const void *data, size_t len, uint64_t seed);
/* Writes the 16-hex-digit form of h into out[17]. */
void kt_hex64(uint64_t h, char out[17]);
/* Writes len bytes to path atomically (temp file in the same folder + rename). */
int kt_write_file_atomic(const char *path, const void *data, size_t len);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL with error set if unreadable. */
char *kt_read_file(const char *path, size_t *len);
/* Creates a folder and its parents (mkdir -p). */
int kt_mkdirs(const char *path);
/* Monotonic wall clock in seconds. */
double kt_now(void);
/* Seeded generator (splitmix64): next 64 bits, and a uniform float in [-1, 1). */
uint64_t kt_rng_next(uint64_t *state);
float kt_rng_uniform(uint64_t *state);
/* Parses a whole decimal integer in [lo, hi] into *out: no blanks, no sign but a leading '-',
 * nothing after the digits, no overflow; -1 with the reason otherwise. */
int kt_parse_long(const char *s, long lo, long hi, long *out);
/* The largest integer a list element, shape key or config value may be: what an int holds. */
#define KT_MAX_INT_VALUE 2147483647L
/* Parses a comma list of positive integers ("1,16,64") into out[max]; returns the count or -1
 * (an empty element, e.g. "1,", is an error). */
int kt_parse_int_list(const char *s, long *out, int max);
/* Makes room for element n of a malloc'd array of `size`-byte elements, *cap of them (doubled,
 * from 64, once n reaches it). Returns the array, moved or not; NULL with the error set if out
 * of memory (the old array is still valid). */
void *kt_grow(void *array, size_t *cap, size_t n, size_t size);

/* e4m3 (FN: no infinities, 0x7f/0xff NaN, max 448) and bf16 conversions, round-to-nearest-even. */
float kt_e4m3_to_float(uint8_t code);
uint8_t kt_float_to_e4m3(float x); /* saturates to +-448 */
float kt_bf16_to_float(uint16_t b);
uint16_t kt_float_to_bf16(float x);

/* ------------------------------------------------------ shapes, problems */

#define KT_MAX_DIMS 8
#define KT_MAX_PARAMS 12
#define KT_MAX_TENSORS 20 /* moe_step: 17 (inputs, output, the intermediates of three stages) */
#define KT_MAX_KERNELS 8
#define KT_MAX_STAGES 8

/* A problem: the family's key values (e.g. N, K; a category as the index of its name in the
 * key field's categories) plus the batch size m (tokens, requests: the family's m_name). */
typedef struct kt_problem {
    int n_dims;
    long dim[KT_MAX_DIMS];
    long m;
} kt_problem;

/* A field of a family's problem key. Sizes are compared by distance for the nearest-shape
 * lookup; categories (a cache layout, a weight format, a routing distribution) must match
 * exactly and never enter a distance. */
typedef enum kt_key_kind { KT_KEY_SIZE = 0, KT_KEY_CATEGORY } kt_key_kind;
typedef struct kt_key_field {
    const char *name; /* "N", "K", "LAYOUT", "HQ", "TOPK", "FORMAT", "DIST" */
    kt_key_kind kind;
    const char *const *categories; /* KT_KEY_CATEGORY: the value names, NULL-terminated */
} kt_key_field;

typedef enum kt_dtype { KT_E4M3, KT_BF16, KT_F32, KT_I32, KT_U8 } kt_dtype;
/* Bytes per element of a dtype. */
size_t kt_dtype_size(kt_dtype t);
const char *kt_dtype_name(kt_dtype t);

typedef enum kt_role {
    KT_INPUT,   /* read-only, filled by the family from a seed, rotated over copies when timing */
    KT_OUTPUT,  /* poisoned (kt_poison_byte) before each run, compared with the reference */
    KT_SCRATCH, /* workspace zeroed once at allocation; kernels must leave it zeroed */
    KT_TEMP,    /* a pipeline's intermediate or a workspace that needs no zeroing: allocated
                   once, never filled, poisoned or compared */
} kt_role;

/* How an output is compared with its float64 reference. Everywhere: a reference +-inf must
 * be matched by the same infinity, an infinite output where the reference is finite fails,
 * and an element still holding the poison fails as "unwritten". */
typedef enum kt_compare {
    KT_CMP_REL_L2 = 0, /* ||out - ref|| / ||ref|| over the finite pairs <= tolerance */
    KT_CMP_EXACT,      /* every element equal (ints, ids, counts) */
    KT_CMP_SET,        /* rows of set_len elements, each equal to its reference row as a multiset */
} kt_compare;

typedef struct kt_tensor_desc {
    const char *name;
    kt_dtype dtype;
    size_t count; /* elements */
    kt_role role;
    kt_compare compare; /* outputs */
    double tolerance;   /* REL_L2: the bound; 0 = the family's tolerance */
    size_t set_len;     /* SET: elements per row (e.g. the k of a top-k) */
} kt_tensor_desc;

/* Outputs are filled before a run with a poison no kernel may legally write, and an element
 * still holding it after the run fails as "unwritten": float types NaN (0xff bytes), i32
 * INT32_MIN (kernels never write it; -1 is the legal "unused slot"), u8 0xff (not detectable:
 * every byte is legal). */
#define KT_POISON_I32 INT32_MIN
/* Fills n elements of dtype t at host address p with the poison. */
void kt_poison_fill(kt_dtype t, void *p, size_t n);
/* 1 if element i of p (dtype t) is the poison (float types: any NaN; i32: INT32_MIN; u8: never,
 * every byte value is legal). */
int kt_is_poison(kt_dtype t, const void *p, size_t i);

/* A family's tuning parameter: name and the values the sweep may take. */
typedef struct kt_param {
    const char *name;
    int n_values;
    int values[16];
} kt_param;

/* One point of a family's space: a value per parameter, in the family's order. */
typedef struct kt_config {
    int v[KT_MAX_PARAMS];
} kt_config;

struct kt_module;
struct kt_launch;
struct kt_family;

/* A vendor or naive implementation `kt bench` times beside the family's variant. */
typedef struct kt_baseline {
    const char *name; /* "cublaslt_fp8", "cublas_bf16", "naive" */
    /* 1: a part of kt's own kernel timed alone (the indexer's scan or its selection): shown as
     * kt_NAME_us, never the best baseline kt is compared with. */
    int own;
    /* Optional: state for problem p (may leave *state NULL). */
    int (*prepare)(const kt_problem *p, void **state);
    /* Optional: makes alternative i of the baseline current (cuBLASLt's heuristic algorithms,
     * a fallback scale mode), told whether an earlier one ran (ran); *label (the baseline's
     * name unless set) and *algo (-1 unless set) say what it is. Returns 0, 1 when there is no
     * alternative i, -1 on error. bench times each and reports the fastest. */
    int (*choose)(void *state, int i, int ran, const char **label, int *algo);
    /* Enqueues one run on l->stream over the problem's tensors (l->ptr as the family's, the
     * rotation copy l->copy of l->copies); l->mod is the family's module (default config), so
     * a naive kernel of the family's own .cu (listed in kernels[]) can be launched. NULL: the
     * baseline is not linked into this program (n/a). */
    int (*enqueue)(void *state, const struct kt_launch *l);
    void (*release)(void *state); /* optional */
} kt_baseline;

/* One stage of a pipeline family: its family's dispatched winner (DB or default) runs it. */
typedef struct kt_stage {
    const struct kt_family *family;
    /* The stage's problem (key and batch) from the pipeline's. */
    void (*problem)(const kt_problem *pipeline, kt_problem *stage);
    int tensor[KT_MAX_TENSORS]; /* for each of the stage's tensors, the pipeline tensor it is */
} kt_stage;

/* Which mma rate `kt bench` divides flops() by for the roof. */
typedef enum kt_mma_kind { KT_MMA_NONE = 0, KT_MMA_BF16, KT_MMA_E4M3 } kt_mma_kind;

/* The GEMM batch ladder (kt_family.batch_buckets NULL): bucket upper bounds, 0-terminated. */
extern const long kt_gemm_buckets[];

/* A kernel family: everything the tuner, bench, tests and runtime know about it. */
typedef struct kt_family {
    const char *name;
    const char *summary;
    const char *source;         /* file name under kernels/, embedded in the binary */
    const char *const *kernels; /* entry points the module must export, NULL-terminated */
    int n_keys;                 /* the problem key's fields, e.g. {"N"}, {"K"} (sizes) */
    kt_key_field keys[KT_MAX_DIMS];
    const char *m_name; /* name of the batch dimension, e.g. "M" (tokens), "B" */
    /* Ascending batch bucket upper bounds, 0-terminated (beyond the last: doubling);
     * NULL: kt_gemm_buckets. */
    const long *batch_buckets;
    int n_params;
    kt_param params[KT_MAX_PARAMS];
    int strata_params;        /* the fast search's first sample covers the combinations of
                               * the first this many params (0: 2), the most telling first */
    kt_config default_config; /* served when the DB has nothing for the family */
    /* The fast search (tuner/search.h): from this batch size on an anchor's local search gets
     * its whole budget again, and anchors up to search_tile_sweep_to_m time all of their
     * winner's tile (the first strata_params); 0: never. */
    long search_full_budget_from_m, search_tile_sweep_to_m;
    const long (*target_shapes)[KT_MAX_DIMS]; /* shapes `make demo` sweeps */
    int n_target_shapes;

    /* 0 if the shape (and m) is supported, else -1 with the reason in why. */
    int (*check_problem)(const kt_problem *p, char *why, size_t n);
    /* 0 if the config can be built for arch (e.g. 120, 90): shared memory, registers,
     * divisibility; else -1 with why. Called before compiling. */
    int (*check_config)(const kt_config *c, int arch, char *why, size_t n);
    /* 0 if the config can run this problem (e.g. split-K <= number of k-blocks). */
    int (*config_fits)(const kt_config *c, const kt_problem *p);
    /* Optional: 1 if a config that fits is still not worth timing on this problem (e.g. a
     * token tile far larger than M); the sweep prunes it before compiling. */
    int (*hopeless)(const kt_config *c, const kt_problem *p);
    /* Optional: the config to serve problem p, on a GPU of `sms` SMs, when the database has
     * nothing for the family (e.g. a tile for its M and a split-K that fills the SMs); dispatch
     * falls back to default_config if it does not build or fit. */
    void (*default_for)(const kt_problem *p, int sms, kt_config *c);
    /* Declares the tensors of a problem; returns how many (<= KT_MAX_TENSORS). */
    int (*tensors)(const kt_problem *p, kt_tensor_desc *t);
    /* Fills the KT_INPUT tensors (host memory, indexed as declared) from seed. */
    void (*fill)(const kt_problem *p, uint64_t seed, void *const *host);
    /* Computes the expected value of every KT_OUTPUT element, in declaration order,
     * concatenated, in double, from the host inputs. */
    void (*reference)(const kt_problem *p, void *const *host, double *ref);
    /* Work (work(), or flops/2: the GEMM's multiply-adds) above which the tuner uses the GPU
     * reference kernel (0: never). */
    double gpu_reference_above;
    double (*work)(const kt_problem *p); /* optional */
    /* Enqueues the trusted GPU reference writing double ref[] (same order as reference()),
     * from l->ref_mod: a module (default config) of reference_family, or of this family. */
    int (*launch_reference)(const struct kt_launch *l, uint64_t ref_ptr);
    const struct kt_family *reference_family; /* NULL: this family */
    /* Enqueues the variant on l->stream. */
    int (*launch)(const struct kt_launch *l);
    /* Relative tolerance of ||out - ref|| / ||ref|| (REL_L2 outputs with tolerance 0). */
    double tolerance;
    /* Bytes that must move and flops that must be done (the floor). */
    double (*bytes)(const kt_problem *p);
    double (*flops)(const kt_problem *p);
    kt_mma_kind mma;                     /* the mma flops() run on, for the roof */
    const kt_baseline *const *baselines; /* NULL-terminated; may be NULL */
    /* A pipeline (n_stages > 0) has no source or params of its own: its tensors (inputs,
     * outputs, KT_TEMP intermediates), fill, reference and bytes are its own, and verify and
     * bench run each stage's dispatched winner in order, in one CUDA graph. */
    int n_stages;
    kt_stage stages[KT_MAX_STAGES];
    /* Optional: the input bytes one run reads, which sizes the rotation of input copies so
     * that L2 cannot serve them (NULL: all the inputs; MoE reads only the touched experts). */
    double (*rotation_bytes)(const kt_problem *p);
    /* Optional: extra `, "key": value` JSON fields of a bench row (e.g. touched experts). */
    void (*bench_fields)(const kt_problem *p, char *json, size_t n);
} kt_family;

/* The bucket batch size m falls in for family f: the least upper bound of its ladder at or
 * above m, past the last doubling from it. */
long kt_family_bucket(const kt_family *f, long m);
/* The size tuned work of p: f->work(p), or f->flops(p) / 2 when f has no work() (0 if neither). */
double kt_family_work(const kt_family *f, const kt_problem *p);

/* The registry: number of families and the i-th; lookup by name (NULL with error set). */
int kt_family_count(void);
const kt_family *kt_family_at(int i);
const kt_family *kt_family_find(const char *name);

/* Parses "N=1536,K=4096" or "LAYOUT=V4,HQ=64" against the family's key fields into p (m
 * untouched): sizes positive integers, categories one of their names. */
int kt_parse_shape(const kt_family *f, const char *s, kt_problem *p);
/* Parses a size value (a non-negative decimal integer, the whole of s[0..len)) into *v; -1 if
 * it is not one. The one place kt reads a number of a shape or config. */
int kt_parse_size(const char *s, size_t len, long *v);
/* The most bytes a problem's tensors may take: more than any GPU's memory (192 GB today). */
#define KT_MAX_PROBLEM_BYTES (256.0 * (1 << 30))
/* 0 if problem p's sizes multiply without overflow and its tensors fit KT_MAX_PROBLEM_BYTES,
 * else -1 with the reason in why (checked after f->check_problem, before any tensor is sized). */
int kt_check_problem_size(const kt_family *f, const kt_problem *p, char *why, size_t n);
/* Formats p's shape as "N=1536,K=4096" (categories by name) into out. */
void kt_format_shape(const kt_family *f, const kt_problem *p, char *out, size_t n);
/* Index of value in p's value list; -1 if it is not there. */
int kt_param_value_index(const kt_param *p, int value);
/* Parses "TILE_N=64,STAGES=4" (unnamed params keep default) into c. */
int kt_parse_config(const kt_family *f, const char *s, kt_config *c);
/* Parses "DIRECT=1,TILE_M=16" (a part of the space): fixed[i] = 1 and values->v[i] set
 * for each named param; fails on an unknown name or a value the param does not take. */
int kt_parse_where(const kt_family *f, const char *s, kt_config *values, int *fixed);
/* Formats c as "TILE_N=64,TILE_M=16,...". */
void kt_format_config(const kt_family *f, const kt_config *c, char *out, size_t n);
/* Formats c as NVRTC options "-DKT_TILE_N=64 -DKT_TILE_M=16 ..." into out. */
void kt_config_defines(const kt_family *f, const kt_config *c, char *out, size_t n);

/* ------------------------------------------------------------- sources */

/* Embedded file by base name (kernels/NAME, kernels/common/NAME, tuner/check.cu,
 * bench/ceiling.cu, db/NAME); NULL if absent. */
const char *kt_source_text(const char *name, size_t *len);
/* Hash of an embedded source file and, transitively, every embedded file it includes by
 * `#include "NAME"` (each once); other headers do not change it. */
uint64_t kt_source_hash(const char *file);
/* An embedded file; kt_sources() lists them all, ending with a NULL name. */
typedef struct kt_source_file {
    const char *name;
    const char *text;
    size_t len;
} kt_source_file;
const kt_source_file *kt_sources(void);
/* kt_source_hash over the files of files[] (ending with a NULL name) instead of the embedded ones. */
uint64_t kt_source_hash_in(const kt_source_file *files, const char *file);
/* kt_source_hash of a family's source. */
uint64_t kt_family_source_hash(const kt_family *f);

/* ----------------------------------------------------------------- JIT */

/* What ptxas reported for one kernel of a compiled variant. */
typedef struct kt_ptxas_report {
    int registers;
    int spill_bytes; /* spill stores + spill loads */
    int stack_bytes;
    int smem_bytes; /* static shared memory */
} kt_ptxas_report;

/* A compiled variant: the cubin and what it cost. */
typedef struct kt_cubin {
    char variant_id[17]; /* hash of (family, source hash, defines, options, arch, nvrtc version) */
    void *image;
    size_t size;
    kt_ptxas_report report; /* worst kernel of the module (max registers, max spills) */
    double compile_ms;      /* 0 when served from the cache */
    int from_cache;
    char *log;            /* compile log; malloc'd, may be NULL */
    int ship_spill_bytes; /* compile pool, built for an arch other than KT_SHIP_ARCH: the
                             same variant's spills there (-1: it does not build there) */
} kt_cubin;

/* The arch kt's kernels ship for; a sweep measuring on another GPU (the H200 stand-in)
 * checks its variants there too. */
#define KT_SHIP_ARCH 120

/* NVRTC version as major*1000+minor*10 (e.g. 13000); -1 if NVRTC is unusable. */
int kt_nvrtc_version(void);
/* Cache folder: $KT_CACHE_DIR or ~/.cache/kt; "" (no cache) when neither is set. A folder
 * that cannot be used, or an entry that fails its checksum, is said once on stderr. */
const char *kt_cache_dir(void);
/* Computes the variant id of (family, config, arch) without compiling. */
void kt_variant_id(const kt_family *f, const kt_config *c, int arch, char out[17]);
/* Compiles family f with config c for arch (120 = sm_120, 1201 = sm_120a, 90 = sm_90),
 * through the on-disk cache. On compile error returns -1 with the NVRTC log in kt_error(). */
int kt_compile(const kt_family *f, const kt_config *c, int arch, kt_cubin *out);
/* Compiles an embedded source that is not a family (e.g. "check.cu") for arch, without
 * defines, through the same cache; out->variant_id is its cache key. */
int kt_compile_source(const char *file, int arch, kt_cubin *out);
void kt_cubin_free(kt_cubin *c);
/* Parses a ptxas -v log into the worst-kernel report. */
void kt_parse_ptxas_log(const char *log, kt_ptxas_report *r);
/* "sm_120", "sm_120a", "sm_90" for 120, 1201, 90; parses the same names back (-1 if unknown). */
const char *kt_arch_name(int arch);
int kt_arch_parse(const char *s);

/* ----------------------------------------------------------------- GPU */

/* A device as the database keys it. */
typedef struct kt_db_device {
    char name[128];
    int cc; /* major*10+minor */
    int sm_count;
    int driver_version;
    int nvrtc_version;
} kt_db_device;

typedef struct kt_device_info {
    char name[128];
    int cc_major, cc_minor;
    int sm_count;
    int driver_version; /* e.g. 13000 */
    size_t l2_bytes;
    size_t smem_per_block_optin;
    size_t mem_bytes; /* device memory */
} kt_device_info;

/* Loads libcuda (dlopen) and initialises it. -1 with a clear "needs a GPU" message if absent. */
int kt_gpu_init(void);
/* Number of CUDA devices (0 if no driver). */
int kt_gpu_count(void);
/* Makes device ordinal current (primary context) and fills info. */
int kt_gpu_open(int ordinal, kt_device_info *info);
/* Arch code to compile for on the current device (e.g. 90, 120). */
int kt_gpu_arch(void);
/* Info of the device opened last by kt_gpu_open (zeroed if none). */
const kt_device_info *kt_gpu_current(void);
/* Device of the info as the database keys it (adds the NVRTC version). */
void kt_gpu_db_device(const kt_device_info *info, kt_db_device *out);

/* A loaded cubin with its kernel handles (CUmodule/CUfunction kept opaque). */
typedef struct kt_module {
    void *module;
    void *fn[KT_MAX_KERNELS];
    const kt_family *family;
    kt_config config;
    char variant_id[17];
} kt_module;
/* Loads a cubin's image into the current context and resolves the family's kernels. */
int kt_module_load(const kt_family *f, const kt_config *c, const kt_cubin *cubin, kt_module *m);
/* The same for a module that is not a family's (m->family NULL): resolves kernels[]
 * (NULL-terminated, at most KT_MAX_KERNELS) into m->fn; name is for errors. */
int kt_module_load_kernels(const char *name, const char *const *kernels, const kt_cubin *cubin, kt_module *m);
void kt_module_unload(kt_module *m);

/* Everything a family's launch() needs: its module, config, problem, tensors, stream. */
typedef struct kt_launch {
    const kt_module *mod; /* NULL for launch_reference(): ref kernels come via ref_mod */
    const kt_module *ref_mod;
    const kt_config *config;
    const kt_problem *problem;
    uint64_t ptr[KT_MAX_TENSORS]; /* device addresses, in the family's tensor order */
    void *stream;                 /* CUstream */
    int copy, copies;             /* the rotation copy ptr[] inputs are, of how many (0, 1: none) */
} kt_launch;
/* Launches kernel index k of module m: grid, block, dynamic shared memory, args (cuLaunchKernel). */
int kt_launch_kernel(const kt_module *m, int k, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                     void *stream, void **args);
/* The same, launched as a programmatic dependent (PDL): the kernel may start while the
 * previous kernel in the stream finishes, so it must execute griddepcontrol.wait before it
 * reads anything that kernel writes (kt_device.cuh: kt_wait_producer). */
int kt_launch_kernel_pdl(const kt_module *m, int k, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                         unsigned smem, void *stream, void **args);

/* ------------------------------------------------------------- database */

typedef struct kt_db kt_db;

/* Schema version this build writes and reads. */
#define KT_SCHEMA_VERSION 4

/* Opens (creating and migrating when writable) a winners DB. Read-only fails if absent, and
 * reads a file of an older schema as it is (what it lacks reads as empty: a deployed v3
 * file serves its kernel winners and no all-reduce settings); read-only in a folder this user cannot write (a deployed
 * DB) it opens the file immutable, creating no -wal/-shm beside it. A folder, a file that is not a kt database or a
 * damaged one gives -1 with a message naming the file. Every writer waits for the others (and retries when SQLite says
 * busy), so any number of processes may share one file. */
int kt_db_open(const char *path, int read_only, kt_db **out);
void kt_db_close(kt_db *db);

typedef enum kt_lookup_level { KT_EXACT, KT_NEAREST_M, KT_NEAREST_SHAPE, KT_DEFAULT } kt_lookup_level;
const char *kt_lookup_level_name(kt_lookup_level l);

/* A winner row as read back. */
typedef struct kt_winner {
    char config[256];
    char variant_id[17];
    char shape[128];
    long m_bucket;
    double median_us;
    kt_lookup_level level;
} kt_winner;

/* Finds the winner for (device, family, current source hash, problem): exact ->
 * nearest M bucket -> nearest shape on this device -> (returns 1) family default.
 * Returns 0 when a row was found, 1 when the caller should use the family default (w then
 * holds its config, level KT_DEFAULT), -1 on error. */
int kt_db_lookup(kt_db *db, const kt_db_device *dev, const kt_family *f, const kt_problem *p, kt_winner *w);

/* ------------------------------------------- NCCL all-reduce settings (schema 4) */

/* The size bucket of an all-reduce message: the smallest power of two >= bytes (bytes >= 1). */
long kt_allreduce_bucket(size_t bytes);
/* The NCCL settings `kt bench allreduce` sweeps and the runtime may apply: [0] is NCCL's own
 * choice ("", ""), then LL, LL128 and Simple with Ring and Tree. */
typedef struct kt_nccl_setting {
    const char *proto, *algo;
} kt_nccl_setting;
#define KT_ALLREDUCE_N_SETTINGS 7
extern const kt_nccl_setting kt_allreduce_settings[KT_ALLREDUCE_N_SETTINGS];
/* Whether (proto, algo) is one of kt_allreduce_settings. */
int kt_allreduce_setting_known(const char *proto, const char *algo);

/* An all-reduce setting as read back for (device, world, message size). */
typedef struct kt_allreduce_setting {
    char proto[16], algo[16]; /* "" = NCCL's own choice */
    long bytes_bucket;        /* of the row served (the query's own at KT_DEFAULT) */
    double median_us, default_us;
    long long run_id;
    char run_commit[64], run_at[32];
    kt_lookup_level level; /* KT_EXACT (same bucket), KT_NEAREST_M (nearest bucket), KT_DEFAULT */
} kt_allreduce_setting;

/* The best setting for all-reduces of `bytes` over `world` GPUs of dev (any driver / NVRTC
 * version): the row of the message's bucket, else of the nearest bucket by |log2| distance
 * (ties: the larger), else (returns 1) NCCL's own choice. A row of a setting kt does not know
 * (a file written by hand or another tool) is refused: skipped, and said on stderr. A file
 * older than schema 4 has no rows. Returns 0 when a row was found, 1 for the default, -1 on
 * error. */
int kt_db_allreduce_lookup(kt_db *db, const kt_db_device *dev, int world, size_t bytes, kt_allreduce_setting *s);

/* Prints every table (show) or exports measurements as json/csv to out. */
int kt_db_show(kt_db *db, FILE *out);
int kt_db_export(kt_db *db, const char *format, FILE *out);

/* ------------------------------------------------------------- dispatch */

/* Resolves (family, problem) to a loaded kernel of the DB winner (or default) on the
 * current device, compiling through the cache; logs the lookup level to stderr. */
int kt_dispatch(kt_db *db, const kt_family *f, const kt_problem *p, kt_module *out, kt_lookup_level *level);
/* The config kt_dispatch takes for p when the DB has none, on a GPU of sms SMs and arch: the
 * family's choice for p if it has one that builds and fits, else its default_config. */
kt_config kt_default_config(const kt_family *f, const kt_problem *p, int sms, int arch);
/* The config kt_dispatch would compile for (family, problem) and its lookup level, without
 * compiling (what a start-up compiles ahead, in parallel, before dispatching). */
int kt_dispatch_config(kt_db *db, const kt_family *f, const kt_problem *p, kt_config *c, kt_lookup_level *level);
/* The problem of pipeline f's stage s for the pipeline's problem p (key and batch). */
void kt_stage_problem(const kt_family *f, int s, const kt_problem *p, kt_problem *out);
/* kt_dispatch of every stage of pipeline f for p into mods[0..f->n_stages). On failure the
 * stages already loaded are unloaded. */
int kt_pipeline_dispatch(kt_db *db, const kt_family *f, const kt_problem *p, kt_module *mods);
/* Parses a pipeline's --config, "[FAMILY:]CONFIG;..." (one part a stage in order, as kt bench
 * prints a row's; an empty part: that stage's winner), into pinned[], bit s of *mask set where
 * stage s's config is given; -1 (kt_error) on a wrong count, family or config. */
int kt_parse_stage_configs(const kt_family *f, const char *text, kt_config *pinned, unsigned *mask);
/* kt_pipeline_dispatch with the stages in mask on pinned[s] (checked for this GPU and their
 * problem) instead of their winners. */
int kt_pipeline_dispatch_pinned(kt_db *db, const kt_family *f, const kt_problem *p, const kt_config *pinned,
                                unsigned mask, kt_module *mods);
void kt_pipeline_unload(const kt_family *f, kt_module *mods);
/* Enqueues pipeline f's stages in order on l->stream, each its family's launch() with mods[s],
 * its problem and its tensors taken from l->ptr by the stage's tensor map. */
int kt_pipeline_launch(const kt_family *f, const kt_module *mods, const kt_launch *l);

#endif
