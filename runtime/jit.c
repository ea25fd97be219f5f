/* jit.c — the NVRTC JIT: compiles an embedded source (a family's with a config's defines,
 * or a plain one such as the tuner's check kernel) for one arch into a cubin, through an
 * on-disk cache keyed by everything that changes the binary, and parses ptxas's report
 * (registers, spills, shared memory). */
#include "kt.h"

#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>

/* Options every variant is built with; part of the cache key. */
static const char *const base_options[] = {"-std=c++17", "--ptxas-options=-v", "-lineinfo",
                                           "-default-device"};
#define N_BASE_OPTIONS (int)(sizeof base_options / sizeof base_options[0])

int kt_nvrtc_version(void) {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return -1;
    return major * 1000 + minor * 10;
}

const char *kt_cache_dir(void) {
    static char dir[4096];
    const char *env = getenv("KT_CACHE_DIR");
    if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else snprintf(dir, sizeof dir, "%s/.cache/kt", getenv("HOME") ? getenv("HOME") : "/tmp");
    return dir;
}

const char *kt_arch_name(int arch) {
    switch (arch) {
    case 90: return "sm_90";
    case 901: return "sm_90a";
    case 89: return "sm_89";
    case 100: return "sm_100";
    case 120: return "sm_120";
    case 1201: return "sm_120a";
    default: return NULL;
    }
}

int kt_arch_parse(const char *s) {
    static const int known[] = {89, 90, 901, 100, 120, 1201};
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

/* Cache file layout: magic, log length, log, cubin. One file, written atomically. */
static const char cache_magic[8] = {'K', 'T', 'C', 'U', 'B', 'I', 'N', '1'};

static int cache_read(const char *path, kt_cubin *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t log_len = 0, image_len = 0;
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, cache_magic, 8) &&
             fread(&log_len, 8, 1, f) == 1 && fread(&image_len, 8, 1, f) == 1 &&
             log_len < (1u << 24) && image_len < (1u << 30);
    char *log = ok ? malloc(log_len + 1) : NULL;
    void *image = ok ? malloc(image_len) : NULL;
    ok = ok && log && image && fread(log, 1, log_len, f) == log_len &&
         fread(image, 1, image_len, f) == image_len;
    fclose(f);
    if (!ok) {
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

static void cache_write(const char *path, const kt_cubin *c) {
    uint64_t log_len = c->log ? strlen(c->log) : 0, image_len = c->size;
    size_t total = 8 + 16 + log_len + image_len;
    char *buf = malloc(total);
    if (!buf) return;
    memcpy(buf, cache_magic, 8);
    memcpy(buf + 8, &log_len, 8);
    memcpy(buf + 16, &image_len, 8);
    if (log_len) memcpy(buf + 24, c->log, log_len);
    memcpy(buf + 24 + log_len, c->image, image_len);
    /* A cache that cannot be written only costs a recompile next time. */
    if (kt_mkdirs(kt_cache_dir()) == 0) kt_write_file_atomic(path, buf, total);
    free(buf);
}

/* Compiles embedded `file` with `defines` (space-separated -D options) for arch. */
static int nvrtc_compile(const char *name, const char *file, const char *defines_in, int arch, kt_cubin *out) {
    size_t src_len;
    const char *src = kt_source_text(file, &src_len);
    if (!src) return kt_fail("%s: source %s is not embedded in this binary", name, file);
    extern const struct { const char *name; const char *text; size_t len; } kt_embedded[];
    const char *hdr_text[32], *hdr_name[32];
    int n_hdr = 0;
    for (int i = 0; kt_embedded[i].name && n_hdr < 32; i++) {
        size_t n = strlen(kt_embedded[i].name);
        /* kernels/common's headers: .cuh (CUDA) and .h (layouts shared with the host C) */
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
    for (char *tok = strtok_r(defines, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        opts[n_opts++] = tok;

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
        kt_fail("%s: NVRTC compile for %s failed (%s):\n%s", name, kt_arch_name(arch),
                nvrtcGetErrorString(r), out->log ? out->log : "");
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
    if (!kt_arch_name(arch)) return kt_fail("unknown arch %d", arch);
    if (kt_nvrtc_version() < 0) return kt_fail("NVRTC is not usable: is the CUDA toolkit installed?");
    compile_id(name, file, defines, arch, out->variant_id);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s-%s.cubin", kt_cache_dir(), name, out->variant_id);
    if (cache_read(path, out) == 0) {
        out->from_cache = 1;
    } else {
        if (nvrtc_compile(name, file, defines, arch, out)) {
            char *msg = strdup(kt_error());
            kt_cubin_free(out);
            kt_fail("%s", msg ? msg : "compile failed");
            free(msg);
            return -1;
        }
        cache_write(path, out);
    }
    kt_parse_ptxas_log(out->log, &out->report);
    return 0;
}

int kt_compile(const kt_family *f, const kt_config *c, int arch, kt_cubin *out) {
    char defines[1024];
    kt_config_defines(f, c, defines, sizeof defines);
    return compile_cached(f->name, f->source, defines, arch, out);
}

int kt_compile_source(const char *file, int arch, kt_cubin *out) { return compile_cached(file, file, "", arch, out); }

void kt_cubin_free(kt_cubin *c) {
    free(c->image);
    free(c->log);
    c->image = NULL;
    c->log = NULL;
}
