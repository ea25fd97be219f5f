/* fp8_gemm.c — host descriptor of the FP8 block-scaled GEMM family (kernels/fp8_gemm.cu):
 * its tuning space and constraints, problem tensors, seeded inputs, the float64
 * reference, launch geometry and the bytes that set the floor. The parts quant_fp8_gemm
 * (the same kernel quantising its activations) shares are the kt_fp8_gemm_* functions. */
#include "../runtime/kt.h"
#include "common/kt_arch.h"
#include "fp8_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T_A = KT_FP8_GEMM_A, T_AS = KT_FP8_GEMM_AS, T_B = KT_FP8_GEMM_B, T_BS = KT_FP8_GEMM_BS, T_C = KT_FP8_GEMM_C };

/* sm_120's limits on every arch: the H200 stand-in's winners must build where kt ships. */
#define SHIP_LIMITS kt_arch_limits_of(KT_SHIP_ARCH)

/* Warp layout and shared memory of a config, as kernels/common/fp8_gemm.cuh derives them
 * (quant_a: the A tile holds bf16 activations and no per-token scales; smem: the split-K
 * receive region, then the pipeline's or the epilogue's; DIRECT's token slab may take more,
 * kt_fp8_gemm_smem). */
typedef struct layout {
    int threads, warps_n, frag_n, frag_m, recv, smem;
} layout;

static layout layout_of(const kt_config *c, int quant_a) {
    const int *v = c->v;
    layout l;
    l.threads = v[P_WARPS] * v[P_WARPS_K] * 32;
    l.warps_n = v[P_WARPS] / v[P_WARPS_M];
    l.frag_n = l.warps_n ? v[P_TILE_N] / l.warps_n / 16 : 0;
    l.frag_m = v[P_TILE_M] / v[P_WARPS_M] / 8;
    int kblocks = v[P_TILE_K] / 128;
    int scale_bytes = (((quant_a ? 0 : v[P_TILE_M] * kblocks) + kblocks) * 4 + 15) / 16 * 16;
    int stage = v[P_TILE_N] * v[P_TILE_K] + v[P_TILE_M] * v[P_TILE_K] * (quant_a ? 2 : 1) + scale_bytes;
    int pipe = v[P_DIRECT] ? 0 : v[P_STAGES] * stage;
    int red = v[P_TILE_M] * (v[P_TILE_N] + 4) * 4; /* the epilogue's f32 tile */
    /* split-K 2 pushes the peer's sums of a CTA's half of the tile to it, after an mbarrier */
    l.recv = v[P_SPLIT_K] == 2 ? (16 + (v[P_TILE_M] * v[P_TILE_N] / 4 + 1) / 2 * 16 + 127) / 128 * 128 : 0;
    l.smem = l.recv + (pipe > red ? pipe : red);
    return l;
}

int kt_fp8_gemm_smem(const kt_config *c, int quant_a, const kt_problem *p) {
    layout l = layout_of(c, quant_a);
    if (!c->v[P_DIRECT]) return l.smem;
    long KB = p->dim[1] / 128, split = c->v[P_SPLIT_K];
    long slab = l.recv + (KB + split - 1) / split * c->v[P_TILE_M] * (128 + 4); /* a token's k-block: codes, scale */
    return slab > l.smem ? (int)(slab < 1L << 30 ? slab : 1L << 30) : l.smem;
}

int kt_fp8_gemm_check_problem(const char *family, const kt_problem *p, char *why, size_t n) {
    long N = p->dim[0], K = p->dim[1];
    if (N % 128 || K % 128) {
        snprintf(why, n, "N=%ld, K=%ld: %s needs N and K to be multiples of 128 (the scale block)", N, K, family);
        return -1;
    }
    if (p->m < 1 || p->m > 65536) {
        snprintf(why, n, "M=%ld: %s supports M from 1 to 65536", p->m, family);
        return -1;
    }
    return 0;
}

static int check_problem(const kt_problem *p, char *why, size_t n) {
    return kt_fp8_gemm_check_problem("fp8_gemm", p, why, n);
}

int kt_fp8_gemm_check_config(const kt_config *c, int quant_a, char *why, size_t n) {
    const int *v = c->v;
    layout l = layout_of(c, quant_a);
    if (v[P_WARPS] % v[P_WARPS_M] || v[P_TILE_N] % (l.warps_n * 16) || v[P_TILE_M] % (v[P_WARPS_M] * 8))
        return snprintf(why, n, "%dx%d warps do not tile %dx%d", l.warps_n, v[P_WARPS_M], v[P_TILE_N], v[P_TILE_M]), -1;
    if (4 % v[P_WARPS_K] || (v[P_WARPS_K] > 1 && v[P_TILE_K] != 128))
        return snprintf(why, n, "WARPS_K=%d needs TILE_K=128", v[P_WARPS_K]), -1;
    if (quant_a && !v[P_DIRECT] && v[P_WARPS_K] > 1)
        return snprintf(why, n, "WARPS_K=%d: the pipeline quantises in registers, each warp's k-block whole",
                        v[P_WARPS_K]),
               -1;
    if (l.threads > 1024) return snprintf(why, n, "%d threads per block", l.threads), -1;
    if (v[P_DIRECT] && (v[P_WARPS_M] != 1 || v[P_TILE_K] != 128))
        return snprintf(why, n, "DIRECT=1 takes WARPS_M=1, TILE_K=128"), -1;
    if (l.smem > SHIP_LIMITS.smem_per_block)
        return snprintf(why, n, "needs %d bytes of shared memory (> %d)", l.smem, SHIP_LIMITS.smem_per_block), -1;
    /* The running sums, this k-block's sums and the fragments feeding them, plus ~40 for
     * addresses, must fit the registers a thread gets at this block size, or ptxas spills.
     * PROMOTE=0 holds the whole warp tile's k-block sums (empirically ~16 per fragment all
     * told); PROMOTE=1 one token fragment's, with the k-block's weight fragments; DIRECT a
     * ring of STAGES k-blocks of weight fragments (16 registers each) and, as the pipeline
     * by PROMOTE, all token fragments' sums or one's. */
    int frags = l.frag_n * l.frag_m, ksteps = 4 / v[P_WARPS_K];
    if (v[P_PROMOTE] && l.frag_m < 2) return snprintf(why, n, "PROMOTE=1 is PROMOTE=0 with one token fragment"), -1;
    int need = v[P_DIRECT]    ? 17 * v[P_STAGES] * l.frag_n + 4 * frags + 4 * (v[P_PROMOTE] ? l.frag_n : frags) + 48
               : v[P_PROMOTE] ? 4 * frags + 4 * l.frag_n * (ksteps + 1) + 40
                              : 16 * frags + 40;
    /* the k-block's token operands and their scales; DIRECT: a batch of staged activations */
    if (quant_a) need += v[P_DIRECT] ? 24 : 10 * l.frag_m;
    const kt_arch_limits lim = SHIP_LIMITS;
    int have =
        lim.regs_per_block / l.threads < lim.regs_per_thread ? lim.regs_per_block / l.threads : lim.regs_per_thread;
    if (need > have)
        return snprintf(why, n, "needs ~%d registers per thread, %d threads get %d", need, l.threads, have), -1;
    return 0;
}

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    (void)arch; /* every arch kt targets has mma.sync e4m3, cp.async and clusters */
    return kt_fp8_gemm_check_config(c, 0, why, n);
}

int kt_fp8_gemm_config_fits(const kt_config *c, const kt_problem *p) {
    const int *v = c->v;
    long K = p->dim[1];
    return K % v[P_TILE_K] == 0 && v[P_SPLIT_K] <= K / v[P_TILE_K] &&
           kt_fp8_gemm_smem(c, 0, p) <= SHIP_LIMITS.smem_per_block;
}

int kt_fp8_gemm_hopeless(const kt_config *c, const kt_problem *p) {
    const int *v = c->v;
    long M = p->m, N = p->dim[0], K = p->dim[1];
    long m_tile_cap = 8;
    while (m_tile_cap < M) m_tile_cap *= 2;
    if (v[P_TILE_M] > m_tile_cap) return 1; /* token rows that are only padding */
    long tiles = N / v[P_TILE_N] * ((M + v[P_TILE_M] - 1) / v[P_TILE_M]);
    if (tiles * v[P_SPLIT_K] < 32) return 1;        /* leaves most SMs idle */
    if (v[P_SPLIT_K] > 1 && tiles >= 256) return 1; /* already two waves without splitting */
    long ktiles = K / v[P_TILE_K] / v[P_SPLIT_K];
    if (!v[P_DIRECT] && v[P_STAGES] > 2 && v[P_STAGES] - 2 >= ktiles) return 1; /* a shallower pipeline is the same */
    long warp_kblocks = (ktiles + v[P_WARPS_K] - 1) / v[P_WARPS_K];             /* DIRECT: a warp group's share */
    if (v[P_DIRECT] && v[P_STAGES] > 2 && v[P_STAGES] > warp_kblocks) return 1; /* ring slots no warp fills */
    /* At decode batch sizes a DIRECT ring that holds all of a warp's k-blocks (all its loads
     * in flight before the PDL wait) beat every shorter one where a warp had 4 k-blocks, on
     * the H200's exhaustive sweeps (up to 15% at M = 16-64). Not beyond: at (1024,4096)
     * M = 64 (8 a warp) a ring of 3 was 11% faster than one of 8, the whole CTA slice in
     * flight at once; at M = 256 the registers go to the sums. */
    if (v[P_DIRECT] && M <= 64 && v[P_STAGES] < warp_kblocks && warp_kblocks <= 4) return 1;
    if (v[P_WARPS_K] > 1 && v[P_TILE_M] > 32) return 1; /* K-split warps help only tiny M */
    layout l = layout_of(c, 0);
    if (M >= 128 && l.frag_n * l.frag_m < 4) return 1; /* ldmatrix-bound warp tiles */
    return 0;
}

void kt_fp8_gemm_default_for(const kt_problem *p, int sms, int quant_a, kt_config *c) {
    /* Tiles like the H200 sweeps' winners at each batch size (the register-ring path up to
     * M = 64, the pipeline beyond, as 2x2 warps above M = 256 where the 5 x 18 sweep's winners
     * are that config at 24 of 30 problems; the quantising kernel's pipeline above M = 16),
     * then split-K doubled while the CTAs cover less than half the SMs and each keeps two
     * k-tiles or more (on the H200's exhaustive recordings this rule is 1.10x the best config,
     * geometric mean of the 11 problems it can be looked up in, against 1.79x for
     * default_config; covering all SMs was worse), or while the token slab does not fit. */
    static const kt_config direct[] = {{{64, 8, 1, 128, 4, 1, 2, 4, 1, 0}},   {{64, 16, 1, 128, 4, 1, 2, 4, 1, 0}},
                                       {{128, 16, 1, 128, 8, 1, 1, 4, 1, 0}}, {{128, 32, 1, 128, 8, 1, 1, 4, 1, 1}},
                                       {{128, 64, 0, 128, 8, 2, 1, 3, 1, 0}}, {{128, 64, 0, 128, 4, 2, 1, 3, 1, 1}}};
    static const kt_config quant[] = {{{64, 8, 0, 256, 4, 1, 1, 2, 1, 0}},
                                      {{64, 16, 0, 256, 4, 2, 1, 2, 1, 0}},
                                      {{64, 32, 0, 256, 4, 4, 1, 2, 1, 0}},
                                      {{64, 32, 0, 256, 4, 4, 1, 2, 1, 0}},
                                      {{128, 32, 0, 128, 4, 4, 1, 3, 1, 0}}};
    long M = p->m, N = p->dim[0], K = p->dim[1];
    int band = M <= 8 ? 0 : M <= 16 ? 1 : M <= 32 ? 2 : M <= 64 ? 3 : M <= 256 ? 4 : 5;
    /* Few weight rows for the 128-row tiles of M 17-64 (under an eighth of the SMs' worth of
     * tiles, e.g. N = 1024): the 64x16 tile, not split-K 8 (at (1024,4096) M = 64 1.57x ->
     * 1.01x the best on the M = 64 recording; (1536,4096), 24 tiles, keeps 128x32: 1.00x). */
    if (!quant_a && (band == 2 || band == 3) && N / 128 * ((M + 31) / 32) * 8 < sms) band = 1;
    /* 2x2 warps only where there is a full wave of tiles (with fewer, the 8 warps were
     * 10-11% faster on the H200 at (1536,4096) M = 512 and (1024,4096) M = 1024) and K has
     * two k-tiles or more (with split-K, whose cluster epilogue needs registers too, or a
     * two-stage pipeline they spill on sm_90). */
    if (band == 5 && (N / 128 * ((M + 63) / 64) < sms || K < 256)) band = 4;
    *c = quant_a && band > 1 ? quant[band < 4 ? band : 4] : direct[band];
    int *v = c->v;
    if (K % v[P_TILE_K]) v[P_TILE_K] = 128;
    long tiles = N / v[P_TILE_N] * ((M + v[P_TILE_M] - 1) / v[P_TILE_M]), ktiles = K / v[P_TILE_K];
    while (v[P_SPLIT_K] < 8) {
        long next = 2 * v[P_SPLIT_K];
        int fill = 2 * tiles * v[P_SPLIT_K] < sms && 2 * next <= ktiles;
        int fit = !kt_fp8_gemm_config_fits(c, p) && next <= ktiles;
        if (!fill && !fit) break;
        v[P_SPLIT_K] = (int)next;
    }
    if (v[P_DIRECT] && !kt_fp8_gemm_config_fits(c, p)) { /* the token slab is too large */
        v[P_DIRECT] = 0;
        if (quant_a) v[P_WARPS_K] = 1; /* the pipeline quantises a warp's k-block whole */
    }
    /* a ring of no more k-blocks than a warp group has; a pipeline no deeper than its k-tiles */
    long cta_ktiles = ktiles / v[P_SPLIT_K], warp_kblocks = (cta_ktiles + v[P_WARPS_K] - 1) / v[P_WARPS_K];
    if (v[P_DIRECT] && v[P_STAGES] > warp_kblocks) v[P_STAGES] = warp_kblocks < 2 ? 2 : (int)warp_kblocks;
    if (!v[P_DIRECT] && v[P_STAGES] == 3 && cta_ktiles <= 1) v[P_STAGES] = 2;
}

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t M = p->m, N = p->dim[0], K = p->dim[1];
    t[T_A] = (kt_tensor_desc){"A", KT_E4M3, M * K, KT_INPUT};
    t[T_AS] = (kt_tensor_desc){"As", KT_F32, M * (K / 128), KT_INPUT};
    t[T_B] = (kt_tensor_desc){"B", KT_E4M3, N * K, KT_INPUT};
    t[T_BS] = (kt_tensor_desc){"Bs", KT_F32, (N / 128) * (K / 128), KT_INPUT};
    t[T_C] = (kt_tensor_desc){"C", KT_BF16, M * N, KT_OUTPUT};
    return 5;
}

void kt_fp8_gemm_fill_codes(uint8_t *x, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) x[i] = kt_float_to_e4m3(kt_rng_uniform(rng) * 448.0f);
}

void kt_fp8_gemm_fill_scales(float *s, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) s[i] = (1.25f + kt_rng_uniform(rng) * 0.75f) / 128.0f;
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    size_t M = p->m, N = p->dim[0], K = p->dim[1];
    uint64_t rng = seed;
    kt_fp8_gemm_fill_codes(host[T_A], M * K, &rng);
    kt_fp8_gemm_fill_scales(host[T_AS], M * (K / 128), &rng);
    kt_fp8_gemm_fill_codes(host[T_B], N * K, &rng);
    kt_fp8_gemm_fill_scales(host[T_BS], (N / 128) * (K / 128), &rng);
}

static void reference(const kt_problem *p, void *const *host, double *ref) {
    kt_fp8_gemm_reference_codes(p, host[T_A], host[T_AS], host[T_B], host[T_BS], ref);
}

void kt_fp8_gemm_reference_codes(const kt_problem *p, const uint8_t *A, const float *As, const uint8_t *B,
                                 const float *Bs, double *ref) {
    long M = p->m, N = p->dim[0], K = p->dim[1], KB = K / 128;
    double lut[256];
    for (int i = 0; i < 256; i++) lut[i] = kt_e4m3_to_float((uint8_t)i);
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++) {
            double total = 0;
            for (long kb = 0; kb < KB; kb++) {
                double s = 0;
                for (long k = kb * 128; k < kb * 128 + 128; k++) s += lut[A[m * K + k]] * lut[B[n * K + k]];
                total += s * As[m * KB + kb] * Bs[(n / 128) * KB + kb];
            }
            ref[m * N + n] = total;
        }
}

int kt_fp8_gemm_launch(const kt_launch *l, int quant_a, const uint64_t ptr[5]) {
    const int *v = l->config->v;
    layout lay = layout_of(l->config, quant_a);
    int M = (int)l->problem->m, N = (int)l->problem->dim[0], K = (int)l->problem->dim[1];
    uint64_t p[5];
    memcpy(p, ptr, sizeof p);
    void *args[] = {&p[0], &p[1], &p[2], &p[3], &p[4], &M, &N, &K};
    return kt_launch_kernel_pdl(l->mod, 0, N / v[P_TILE_N], (M + v[P_TILE_M] - 1) / v[P_TILE_M], v[P_SPLIT_K],
                                lay.threads, kt_fp8_gemm_smem(l->config, quant_a, l->problem), l->stream, args);
}

int kt_fp8_gemm_launch_reference(const kt_launch *l, const uint64_t ptr[4], uint64_t ref) {
    int M = (int)l->problem->m, N = (int)l->problem->dim[0], K = (int)l->problem->dim[1];
    uint64_t p[4];
    memcpy(p, ptr, sizeof p);
    void *args[] = {&p[0], &p[1], &p[2], &p[3], &ref, &M, &N, &K};
    long total = (long)M * N;
    return kt_launch_kernel(l->ref_mod, 1, (unsigned)((total + 255) / 256), 1, 1, 256, 0, l->stream, args);
}

static int launch(const kt_launch *l) {
    uint64_t p[5] = {l->ptr[T_A], l->ptr[T_AS], l->ptr[T_B], l->ptr[T_BS], l->ptr[T_C]};
    return kt_fp8_gemm_launch(l, 0, p);
}

static int launch_reference(const kt_launch *l, uint64_t ref) {
    uint64_t p[4] = {l->ptr[T_A], l->ptr[T_AS], l->ptr[T_B], l->ptr[T_BS]};
    return kt_fp8_gemm_launch_reference(l, p, ref);
}

static double bytes(const kt_problem *p) {
    double M = p->m, N = p->dim[0], K = p->dim[1];
    return N * K + N * K / 16384 * 4 + M * K + M * K / 32 + 2 * M * N;
}

double kt_fp8_gemm_flops(const kt_problem *p) { return 2.0 * p->m * p->dim[0] * p->dim[1]; }

static void default_for(const kt_problem *p, int sms, kt_config *c) { kt_fp8_gemm_default_for(p, sms, 0, c); }

/* The vendor baselines of bench/baselines.c, by weak reference: a program without bench (the
 * runtime library) links without cuBLAS, and there they are NULL (bench says n/a). */
int kt_baseline_cublaslt_fp8_prepare(const kt_problem *p, void **state) __attribute__((weak));
int kt_baseline_cublaslt_fp8_choose(void *state, int i, int ran, const char **label, int *algo) __attribute__((weak));
int kt_baseline_cublaslt_fp8_enqueue(void *state, const kt_launch *l) __attribute__((weak));
void kt_baseline_cublaslt_fp8_release(void *state) __attribute__((weak));
int kt_baseline_cublas_bf16_prepare(const kt_problem *p, void **state) __attribute__((weak));
int kt_baseline_cublas_bf16_enqueue(void *state, const kt_launch *l) __attribute__((weak));
void kt_baseline_cublas_bf16_release(void *state) __attribute__((weak));
static const kt_baseline cublaslt_fp8 = {.name = "cublaslt_fp8",
                                         .prepare = kt_baseline_cublaslt_fp8_prepare,
                                         .choose = kt_baseline_cublaslt_fp8_choose,
                                         .enqueue = kt_baseline_cublaslt_fp8_enqueue,
                                         .release = kt_baseline_cublaslt_fp8_release};
static const kt_baseline cublas_bf16 = {.name = "cublas_bf16",
                                        .prepare = kt_baseline_cublas_bf16_prepare,
                                        .enqueue = kt_baseline_cublas_bf16_enqueue,
                                        .release = kt_baseline_cublas_bf16_release};
static const kt_baseline *const baselines[] = {&cublaslt_fp8, &cublas_bf16, NULL};

static const char *const kernel_names[] = {"fp8_gemm", "fp8_gemm_reference", NULL};
const long kt_fp8_gemm_targets[KT_FP8_GEMM_TARGETS][KT_MAX_DIMS] = {
    {1536, 4096}, {8192, 1024}, {1024, 4096}, {4096, 2048}, {4096, 512}};

const kt_family kt_family_fp8_gemm = {
    .name = "fp8_gemm",
    .summary = "FP8 e4m3 block-scaled GEMM (1x128 activation, 128x128 weight scales), bf16 out",
    .source = "fp8_gemm.cu",
    .kernels = kernel_names,
    KT_FP8_GEMM_FAMILY,
    .check_problem = check_problem,
    .check_config = check_config,
    .default_for = default_for,
    .tensors = tensors,
    .fill = fill,
    .reference = reference,
    .launch_reference = launch_reference,
    .launch = launch,
    .bytes = bytes,
    .baselines = baselines,
};
