/* jit.c — the NVRTC JIT: compiles an embedded source (a family's with a config's defines,
 * or a plain one such as the tuner's check kernel) for one arch into a cubin, through an
 * on-disk cache keyed by everything that changes the binary, and parses ptxas's report
 * (registers, spills, shared memory). */
#include "kt.h"

#include <errno.h>
#include <nvrtc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Options every variant is built with; part of the cache key. */
static const char *const base_options[] = {"-std=c++17", "--ptxas-options=-v", "-lineinfo", "-default-device"};
#define N_BASE_OPTIONS (int)(sizeof base_options / sizeof base_options[0])

int kt_status_NVRTC(int status, const char *call, const char *file, int line) {
    if (status == NVRTC_SUCCESS) return 0;
    return kt_status_fail("NVRTC", nvrtcGetErrorString((nvrtcResult)status), status, call, file, line);
}

int kt_nvrtc_version(void) {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return -1;
    return major * 1000 + minor * 10;
}

const char *kt_cache_dir(void) {
    static char dir[4096];
    const char *env = getenv("KT_CACHE_DIR"), *home = getenv("HOME");
    /* no HOME: no cache (a shared /tmp folder would let other users plant cubins) */
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/kt", home);
    else
        dir[0] = 0;
    return dir;
}

/* Says `what` on stderr the first time it happens in this process (compile threads share it). */
static void warn_once(atomic_int *said, const char *what) {
    if (!atomic_exchange(said, 1)) fprintf(stderr, "kt: %s\n", what);
}

/* Whether the cache folder can be used; the first time it cannot, says why once. */
static int cache_usable(void) {
    static atomic_int said;
    const char *dir = kt_cache_dir();
    char why[4400];
    if (!*dir) {
        warn_once(&said, "HOME and KT_CACHE_DIR are unset: no JIT cache, every variant is compiled afresh");
        return 0;
    }
    struct stat st;
    errno = 0;
    if (kt_mkdirs(dir) == 0 && !stat(dir, &st) && S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0) return 1;
    int not_folder = !stat(dir, &st) && !S_ISDIR(st.st_mode);
    snprintf(why, sizeof why, "JIT cache folder %s is unusable (%s): every variant is compiled afresh", dir,
             not_folder ? "not a folder" : strerror(errno));
    warn_once(&said, why);
    return 0;
}

const char *kt_arch_name(int arch) {
    switch (arch) {
        case 90:
            return "sm_90";
        case 901:
            return "sm_90a";
        case 100:
            return "sm_100";
        case 120:
            return "sm_120";
        case 1201:
            return "sm_120a";
        default:
            return NULL;
    }
}

int kt_arch_parse(const char *s) {
    /* not sm_89 or older: every kernel uses griddepcontrol (PDL) and clusters, sm_90's */
    static const int known[] = {90, 901, 100, 120, 1201};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(s, kt_arch_name(known[i]))) return known[i];
    return -1;
}

/* The id of compiling embedded `file` as `name` with `defines` for arch: the cache key. */
static void compile_id(const char *name, const char *file, const char *defines, int arch, char out[17]) {
    uint64_t h = kt_source_hash(file);
    h = kt_hash(name, strlen(name), h);
    h = kt_hash(defines, strlen(defines), h);
    for (int i = 0; i < N_BASE_OPTIONS; i++) h = kt_hash(base_options[i], strlen(base_options[i]), h);
    const char *an = kt_arch_name(arch);
    h = kt_hash(an, strlen(an), h);
    int v = kt_nvrtc_version();
    h = kt_hash(&v, sizeof v, h);
    kt_hex64(h, out);
}

void kt_variant_id(const kt_family *f, const kt_config *c, int arch, char out[17]) {
    char defines[1024];
    kt_config_defines(f, c, defines, sizeof defines);
    compile_id(f->name, f->source, defines, arch, out);
}

void kt_parse_ptxas_log(const char *log, kt_ptxas_report *r) {
    memset(r, 0, sizeof *r);
    for (const char *p = log; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        int a, b;
        const char *q;
        if ((q = strstr(p, "bytes stack frame")) && q - p < 200) {
            if (sscanf(p, "ptxas . %d bytes stack frame, %d bytes spill stores", &a, &b) == 2 ||
                sscanf(p, "ptxas         . %d bytes stack frame, %d bytes spill stores", &a, &b) == 2) {
                int loads = 0;
                const char *l = strstr(p, "spill stores,");
                if (l) sscanf(l, "spill stores, %d bytes spill loads", &loads);
                if (a > r->stack_bytes) r->stack_bytes = a;
                r->spill_bytes += b + loads;
            }
        }
        if ((q = strstr(p, "Used ")) && (!strchr(p, '\n') || q < strchr(p, '\n'))) {
            if (sscanf(q, "Used %d registers", &a) == 1 && a > r->registers) r->registers = a;
            const char *s = strstr(q, "bytes smem");
            const char *nl = strchr(q, '\n');
            if (s && (!nl || s < nl)) {
                const char *c = s;
                while (c > q && c[-1] == ' ') c--;
                while (c > q && c[-1] >= '0' && c[-1] <= '9') c--;
                if (sscanf(c, "%d", &a) == 1 && a > r->smem_bytes) r->smem_bytes = a;
            }
        }
    }
}

/* Cache file layout: magic, log length, cubin length, checksum, log, cubin. One file,
 * written atomically; the checksum (XXH3 of the key, log and cubin) is verified on every
 * read, so a damaged or edited entry (a flipped byte in .text, a changed spill count in the
 * log) is a miss, never a served binary. */
static const char cache_magic[8] = {'K', 'T', 'C', 'U', 'B', 'I', 'N', '2'};
#define CACHE_HEADER 32

static uint64_t cache_checksum(const char *key, const char *log, uint64_t log_len, const void *image,
                               uint64_t image_len) {
    uint64_t h = kt_hash(key, strlen(key), 0);
    h = kt_hash(log, log_len, h);
    return kt_hash(image, image_len, h);
}

/* Reads the entry at path for key: 0 when served, -1 on a miss (absent, other format, or
 * damaged: then said once on stderr). */
static int cache_read(const char *path, const char *key, kt_cubin *out) {
    static atomic_int said;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t log_len = 0, image_len = 0, sum = 0;
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, cache_magic, 8);
    int same_format = ok;
    ok = ok && fread(&log_len, 8, 1, f) == 1 && fread(&image_len, 8, 1, f) == 1 && fread(&sum, 8, 1, f) == 1 &&
         log_len < (1u << 24) && image_len < (1u << 30);
    char *log = ok ? malloc(log_len + 1) : NULL;
    void *image = ok ? malloc(image_len) : NULL;
    ok = ok && log && image && fread(log, 1, log_len, f) == log_len && fread(image, 1, image_len, f) == image_len &&
         fgetc(f) == EOF && cache_checksum(key, log, log_len, image, image_len) == sum;
    fclose(f);
    if (!ok) {
        char why[4400];
        snprintf(why, sizeof why, "JIT cache entry %s is damaged (checksum or length mismatch): recompiling it", path);
        if (same_format) warn_once(&said, why);
        free(log);
        free(image);
        return -1;
    }
    log[log_len] = 0;
    out->log = log;
    out->image = image;
    out->size = image_len;
    return 0;
}

static void cache_write(const char *path, const char *key, const kt_cubin *c) {
    uint64_t log_len = c->log ? strlen(c->log) : 0, image_len = c->size;
    uint64_t sum = cache_checksum(key, c->log ? c->log : "", log_len, c->image, image_len);
    size_t total = CACHE_HEADER + log_len + image_len;
    char *buf = malloc(total);
    if (!buf) return;
    memcpy(buf, cache_magic, 8);
    memcpy(buf + 8, &log_len, 8);
    memcpy(buf + 16, &image_len, 8);
    memcpy(buf + 24, &sum, 8);
    if (log_len) memcpy(buf + CACHE_HEADER, c->log, log_len);
    memcpy(buf + CACHE_HEADER + log_len, c->image, image_len);
    /* A cache that cannot be written only costs a recompile next time (said once). */
    if (kt_write_file_atomic(path, buf, total)) {
        static atomic_int said;
        char why[4400];
        snprintf(why, sizeof why, "cannot write the JIT cache (%s): every variant is compiled afresh", kt_error());
        warn_once(&said, why);
    }
    free(buf);
}

/* Compiles embedded `file` with `defines` (space-separated -D options) for arch. */
static int nvrtc_compile(const char *name, const char *file, const char *defines_in, int arch, kt_cubin *out) {
    size_t src_len;
    const char *src = kt_source_text(file, &src_len);
    if (!src) return kt_fail("%s: source %s is not embedded in this binary", name, file);
    const kt_source_file *kt_embedded = kt_sources();
    const char *hdr_text[32], *hdr_name[32];
    int n_hdr = 0;
    for (int i = 0; kt_embedded[i].name && n_hdr < 32; i++) {
        size_t n = strlen(kt_embedded[i].name);
        if ((n > 4 && !strcmp(kt_embedded[i].name + n - 4, ".cuh")) ||
            (n > 2 && !strcmp(kt_embedded[i].name + n - 2, ".h"))) {
            hdr_text[n_hdr] = kt_embedded[i].text;
            hdr_name[n_hdr++] = kt_embedded[i].name;
        }
    }
    char defines[1024], arch_opt[64];
    snprintf(defines, sizeof defines, "%s", defines_in);
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", kt_arch_name(arch));
    const char *opts[KT_MAX_PARAMS + N_BASE_OPTIONS + 1];
    int n_opts = 0;
    for (int i = 0; i < N_BASE_OPTIONS; i++) opts[n_opts++] = base_options[i];
    opts[n_opts++] = arch_opt;
    /* Split the define string on spaces into separate options. */
    char *save = NULL;
    for (char *tok = strtok_r(defines, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) opts[n_opts++] = tok;

    nvrtcProgram prog;
    KT_CHECK(NVRTC, nvrtcCreateProgram(&prog, src, file, n_hdr, hdr_text, hdr_name));
    double t0 = kt_now();
    nvrtcResult r = nvrtcCompileProgram(prog, n_opts, opts);
    out->compile_ms = (kt_now() - t0) * 1e3;
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    out->log = malloc(log_size + 1);
    if (out->log) {
        nvrtcGetProgramLog(prog, out->log);
        out->log[log_size] = 0;
    }
    if (r != NVRTC_SUCCESS) {
        kt_fail("%s: NVRTC compile for %s failed (%s):\n%s", name, kt_arch_name(arch), nvrtcGetErrorString(r),
                out->log ? out->log : "");
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    size_t size = 0;
    int rc = 0;
    if (nvrtcGetCUBINSize(prog, &size) != NVRTC_SUCCESS || !(out->image = malloc(size)) ||
        nvrtcGetCUBIN(prog, out->image) != NVRTC_SUCCESS)
        rc = kt_fail("%s: cannot read the cubin from NVRTC", name);
    out->size = size;
    nvrtcDestroyProgram(&prog);
    return rc;
}

/* Compiles embedded `file` as `name` with `defines` for arch through the on-disk cache. */
static int compile_cached(const char *name, const char *file, const char *defines, int arch, kt_cubin *out) {
    memset(out, 0, sizeof *out);
    if (!kt_arch_name(arch)) return kt_fail("no JIT target for arch %d: kt's kernels need sm_90 or newer", arch);
    if (kt_nvrtc_version() < 0) return kt_fail("NVRTC is not usable: is the CUDA toolkit installed?");
    compile_id(name, file, defines, arch, out->variant_id);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s-%s.cubin", kt_cache_dir(), name, out->variant_id);
    int cache = cache_usable();
    if (cache && cache_read(path, out->variant_id, out) == 0) {
        out->from_cache = 1;
    } else {
        if (nvrtc_compile(name, file, defines, arch, out)) {
            char *msg = strdup(kt_error());
            kt_cubin_free(out);
            kt_fail("%s", msg ? msg : "compile failed");
            free(msg);
            return -1;
        }
        if (cache) cache_write(path, out->variant_id, out);
    }
    kt_parse_ptxas_log(out->log, &out->report);
    return 0;
}

int kt_compile(const kt_family *f, const kt_config *c, int arch, kt_cubin *out) {
    char defines[1024], cfg[256], why[2048];
    kt_config_defines(f, c, defines, sizeof defines);
    if (!compile_cached(f->name, f->source, defines, arch, out)) return 0;
    /* the error names the variant that failed, not the family alone */
    kt_format_config(f, c, cfg, sizeof cfg);
    snprintf(why, sizeof why, "%s", kt_error());
    size_t n = strlen(f->name);
    int prefixed = !strncmp(why, f->name, n) && why[n] == ':';
    return kt_fail("%s %s:%s%s", f->name, cfg, prefixed ? "" : " ", prefixed ? why + n + 1 : why);
}

int kt_compile_source(const char *file, int arch, kt_cubin *out) { return compile_cached(file, file, "", arch, out); }

void kt_cubin_free(kt_cubin *c) {
    free(c->image);
    free(c->log);
    c->image = NULL;
    c->log = NULL;
}
