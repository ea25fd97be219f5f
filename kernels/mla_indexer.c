/* mla_indexer.c — host descriptor of the lightning indexer family (kernels/mla_indexer.cu):
 * per request b of length L_b, logits over its paged e4m3 K cache and their top-k as the
 * int32 index list mla_decode reads. Key: TOPK, CTX, DIST, VALUES (mla_indexer.h); batch B.
 * Inputs are seeded: lengths, a shuffled page pool and block tables, q, w and the cache.
 * Outputs: the logits (relative L2 against float64) and the index list, compared exactly:
 * the fills make every f32 logit exact (VALUES=grid: integer codes, power-of-two scales and
 * eighths as weights, all partial sums under 2^24), so the set is unique under the rule
 * "the k largest, ties to the lower position, listed by ascending position". */
#include "family_hooks.h"
#include "mla_indexer.h"

#include "../runtime/cu.h"
#include "common/indexer_layout.h"
#include "common/kt_arch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

extern const kt_family kt_family_mla_indexer;

enum { P_WARPS, P_NT, P_CTAS_PER_SM, P_SEL_THREADS, P_SEL_CLUSTER, P_MATH, P_STAGES, P_HIST, P_CHAINS, P_SEL_FAST };
enum { T_Q, T_W, T_CACHE, T_LENS, T_TABLE, T_LOGITS, T_INDEX, T_HIST };
enum { K_SCAN, K_SELECT, K_NAIVE, K_REFERENCE };
#define MAX_B 1024 /* the kernels' shared prefix arrays */
#define MAX_TOKENS (1L << 30)
#define REF_THREADS 256 /* the reference kernel: a CTA per 64 tokens of a request */
#define REF_TOKENS 64
#define SCAN_STATIC_SMEM 9360    /* the scan's static shared memory (ptxas): two prefix arrays, 32 sums */
#define SELECT_STATIC_SMEM 26816 /* the selection's static shared memory, at most (ptxas, sm_90 and sm_120) */
#define SM120_THREADS_PER_SM 1536

/* malloc for the hooks that have no error path (fill, reference): out of memory is one line
 * on stderr and exit 1 (the buffers they take are small beside the tensors they fill). */
static void *must_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "kt: mla_indexer: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static long topk_of(const kt_problem *p) { return p->dim[KT_IDX_KEY_TOPK]; }
static long ctx_of(const kt_problem *p) { return p->dim[KT_IDX_KEY_CTX]; }
static long tokens_of(const kt_problem *p) { return p->m * ctx_of(p); }               /* sum of L_b, by construction */
static long max_pages_of(const kt_problem *p) { return kt_idx_pages(2 * ctx_of(p)); } /* a row: L_b < 2 CTX */
static long pages_of(const kt_problem *p) { return kt_idx_pages(tokens_of(p)) + p->m; } /* >= sum pages(L_b) */

static int check_problem(const kt_problem *p, char *why, size_t n) {
    long k = topk_of(p), ctx = ctx_of(p), dist = p->dim[KT_IDX_KEY_DIST], values = p->dim[KT_IDX_KEY_VALUES];
    if (k < 1 || k > KT_IDX_MAX_TOPK)
        return snprintf(why, n, "TOPK=%ld: mla_indexer takes TOPK from 1 to %d", k, KT_IDX_MAX_TOPK), -1;
    if (dist < KT_IDX_DIST_EQUAL || dist > KT_IDX_DIST_RAGGED)
        return snprintf(why, n, "DIST #%ld: mla_indexer takes DIST=equal or ragged", dist), -1;
    if (values < KT_IDX_VALUES_GRID || values > KT_IDX_VALUES_EQUAL)
        return snprintf(why, n, "VALUES #%ld: mla_indexer takes VALUES=grid, tied or equal", values), -1;
    if (p->m < 1 || p->m > MAX_B) return snprintf(why, n, "B=%ld: mla_indexer takes B from 1 to %d", p->m, MAX_B), -1;
    if (ctx < 1 || p->m * 2 * ctx > MAX_TOKENS)
        return snprintf(why, n, "CTX=%ld, B=%ld: mla_indexer takes CTX >= 1 and B * 2 CTX <= 2^30", ctx, p->m), -1;
    return 0;
}

/* The scan's ring in dynamic shared memory: STAGES slots a warp of NT x (32 lanes x 32 code
 * bytes + 32 scales) (kernels/mla_indexer.cu's ring_slot). */
static long scan_ring_bytes(const int *v) { return (long)v[P_WARPS] * v[P_STAGES] * v[P_NT] * (32 * 32 + 32 * 4); }

/* Threads of the scan kernel per SM and the registers a thread needs (ptxas, the ring's loads
 * holding none): MATH=0 124 at NT 1 on sm_120 (q's 64 code registers, a group's k and the
 * rest), ~24 more per n-tile; MATH=1 (q as 128 f16 registers) 178-188 at NT 1 unbounded, ~20
 * more per n-tile, and 168 without spills at 3 CTAs of 4 warps on sm_90 (STAGES=3), so the
 * estimate lets 12 such warps an SM be compiled (the sweep refuses a variant that spills);
 * CHAINS=2 holds a second accumulator per head tile (~16 more). HIST=1 adds each warp's 1 KB of
 * coarse counters to the shared memory.
 * The ring must fit one block's and CTAS_PER_SM blocks' shared memory (sm_120: 99 KB). */
static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    (void)arch; /* sm_120's limits on every arch: the H200 stand-in's winners must build where kt ships */
    const kt_arch_limits ship = kt_arch_limits_of(KT_SHIP_ARCH);
    const int *v = c->v;
    int per_sm = v[P_WARPS] * 32 * v[P_CTAS_PER_SM],
        need = (v[P_MATH] ? 148 + 20 * v[P_NT] : 100 + 24 * v[P_NT]) + (v[P_CHAINS] - 1) * 16;
    int have =
        ship.regs_per_block / per_sm < ship.regs_per_thread ? ship.regs_per_block / per_sm : ship.regs_per_thread;
    long smem = scan_ring_bytes(v) + SCAN_STATIC_SMEM + (v[P_HIST] ? v[P_WARPS] * KT_IDX_HIST_COARSE * 4 : 0);
    if (smem * v[P_CTAS_PER_SM] > ship.smem_per_block)
        return snprintf(why, n, "the scan's ring: %d CTAs of %ld bytes of shared memory an SM (sm_120: %d)",
                        v[P_CTAS_PER_SM], smem, ship.smem_per_block),
               -1;
    if (per_sm > SM120_THREADS_PER_SM) return snprintf(why, n, "%d threads per SM (sm_120 holds 1536)", per_sm), -1;
    if (v[P_SEL_CLUSTER] > 1 && v[P_SEL_THREADS] > 512) /* ptxas gives it 32 registers: it spills */
        return snprintf(why, n, "SEL_THREADS=%d in a cluster of %d: 512 at most", v[P_SEL_THREADS], v[P_SEL_CLUSTER]),
               -1;
    if (need > have)
        return snprintf(why, n, "needs ~%d registers per thread, %d threads an SM get %d", need, per_sm, have), -1;
    if (SELECT_STATIC_SMEM + kt_idx_staged_words(KT_IDX_STAGE_KEYS) * 4 > ship.smem_per_block) /* its staged keys */
        return snprintf(why, n, "the selection needs %d bytes of shared memory",
                        SELECT_STATIC_SMEM + kt_idx_staged_words(KT_IDX_STAGE_KEYS) * 4),
               -1;
    return 0;
}

/* The default config, the scan's math the GPU runs natively (e4m3 where its mma.sync is; f16
 * on sm_90, where it is emulated), and the selection's cluster the smallest whose slices of a
 * request (< 2 CTX keys) stage in shared memory, within one wave of B x cluster CTAs (2026-12-02
 * on the H200: at 8K x 1 one CTA takes 12.6 us, a cluster of 8 20.7; at 32K x 1, 39.2 and ~22). */
static void default_for(const kt_problem *p, int sms, kt_config *c) {
    *c = kt_family_mla_indexer.default_config;
    if (kt_gpu_arch() != 90) c->v[P_MATH] = 0;
    while (c->v[P_SEL_CLUSTER] < 8 && 2 * ctx_of(p) > (long)KT_IDX_STAGE_KEYS * c->v[P_SEL_CLUSTER] &&
           p->m * 2 * c->v[P_SEL_CLUSTER] <= sms)
        c->v[P_SEL_CLUSTER] *= 2;
    if (c->v[P_SEL_CLUSTER] > 1) c->v[P_SEL_THREADS] = 512; /* check_config: clusters take 512 */
    if (p->m <= KT_IDX_HIST_MAX_B) c->v[P_HIST] = 1;        /* the scan's histogram: one pass fewer */
    /* HIST=1's selection with its loads batched and (one-CTA slices) the gather fused with the
     * ordered pass (2026-12-04 on the H200, the pair: 8K x 1 9.74 -> 8.97-8.99 us and 8K x 8
     * 15.13 -> 14.35-14.39 in two runs each; SEL_FAST=1 at 128K x 1 / 8 -0.8 / -1.2 us; at B = 64,
     * HIST=0, nothing: not taken there) */
    if (c->v[P_HIST]) c->v[P_SEL_FAST] = 2;
    /* past HIST=1's batches on sm_90 (the f16 path): four n-tiles a warp with a ring of 2 (16 mma
     * chains a warp; 2026-12-03 on the H200, B = 64: the pair -4.9% at 8K, -5.9% at 32K) */
    if (kt_gpu_arch() == 90 && p->m > KT_IDX_HIST_MAX_B) c->v[P_NT] = 4, c->v[P_STAGES] = 2;
}

/* HIST=1's scratch holds KT_IDX_HIST_MAX_B requests' histograms. */
static int config_fits(const kt_config *c, const kt_problem *p) { return !c->v[P_HIST] || p->m <= KT_IDX_HIST_MAX_B; }

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    size_t B = p->m;
    t[T_Q] = (kt_tensor_desc){"q", KT_E4M3, B * KT_IDX_HEADS * KT_IDX_DIM, KT_INPUT};
    t[T_W] = (kt_tensor_desc){"w", KT_F32, B * KT_IDX_HEADS, KT_INPUT};
    t[T_CACHE] = (kt_tensor_desc){"k_cache", KT_U8, (size_t)pages_of(p) * KT_IDX_PAGE_BYTES, KT_INPUT};
    t[T_LENS] = (kt_tensor_desc){"lens", KT_I32, B, KT_INPUT};
    t[T_TABLE] = (kt_tensor_desc){"block_table", KT_I32, B * (size_t)max_pages_of(p), KT_INPUT};
    t[T_LOGITS] = (kt_tensor_desc){"logits", KT_F32, (size_t)tokens_of(p), KT_OUTPUT};
    t[T_INDEX] = (kt_tensor_desc){"index", KT_I32, B * (size_t)topk_of(p), KT_OUTPUT, KT_CMP_EXACT};
    /* HIST=1's histograms (config_fits: B <= KT_IDX_HIST_MAX_B; one word for larger B) */
    t[T_HIST] =
        (kt_tensor_desc){"hist", KT_I32, B <= KT_IDX_HIST_MAX_B ? B * (size_t)KT_IDX_HIST_WORDS : 1, KT_SCRATCH};
    return 8;
}

void kt_mla_indexer_lengths(const kt_problem *p, uint64_t seed, int *lens) {
    long B = p->m, ctx = ctx_of(p), k = topk_of(p);
    uint64_t rng = seed ^ 0x6c656e73u;
    for (long b = 0; b < B; b++) lens[b] = (int)ctx;
    if (p->dim[KT_IDX_KEY_DIST] != KT_IDX_DIST_RAGGED) return;
    for (long b = 0; b + 1 < B; b += 2) {
        long d = (long)(kt_rng_next(&rng) % (uint64_t)ctx); /* 0 .. CTX-1: both lengths >= 1 */
        if (b == 0 && k < 2 * ctx) d = labs(ctx - k);       /* one of the pair is L = TOPK */
        if (b == 2) d = ctx - 1;                            /* L = 1 */
        int swap = (int)(kt_rng_next(&rng) & 1);
        lens[b + swap] = (int)(ctx - d);
        lens[b + 1 - swap] = (int)(ctx + d);
    }
}

/* Seeded small-integer codes -7..7 (exact in e4m3), 16 from each 64-bit draw. */
static void fill_codes(uint8_t *x, size_t n, uint64_t *rng) {
    static uint8_t code[16];
    if (!code[1])
        for (int i = 0; i < 16; i++) code[i] = kt_float_to_e4m3((float)(i < 15 ? i - 7 : 0));
    for (size_t i = 0; i < n; i += 16) {
        uint64_t r = kt_rng_next(rng);
        for (size_t j = 0; j < 16 && i + j < n; j++) x[i + j] = code[(r >> (4 * j)) & 15];
    }
}

/* The cache: every slot of every page (unused slots too: the kernels read whole groups).
 * grid: random codes, scales 2^-(0..3); tied: each token one of four rows, scale 1/4; equal:
 * every token the same row. */
static void fill_cache(const kt_problem *p, uint8_t *cache, uint64_t *rng) {
    long pages = pages_of(p), values = p->dim[KT_IDX_KEY_VALUES];
    uint8_t pool[4][KT_IDX_DIM];
    fill_codes(&pool[0][0], sizeof pool, rng);
    for (long pg = 0; pg < pages; pg++)
        for (int s = 0; s < KT_IDX_PAGE; s++) {
            uint8_t *codes = cache + kt_idx_code_offset(pg, s);
            float scale = 0.25f;
            if (values == KT_IDX_VALUES_GRID) {
                fill_codes(codes, KT_IDX_DIM, rng);
                scale = ldexpf(1.0f, -(int)(kt_rng_next(rng) % 4));
            } else {
                memcpy(codes, pool[values == KT_IDX_VALUES_TIED ? kt_rng_next(rng) % 4 : 0], KT_IDX_DIM);
            }
            memcpy(cache + kt_idx_scale_offset(pg, s), &scale, 4);
        }
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    long B = p->m, mp = max_pages_of(p), pages = pages_of(p);
    uint64_t rng = seed;
    int *lens = host[T_LENS], *table = host[T_TABLE];
    kt_mla_indexer_lengths(p, seed, lens);
    int *perm = must_alloc(sizeof(int) * (size_t)pages);
    for (long i = 0; i < pages; i++) perm[i] = (int)i;
    for (long i = pages - 1; i > 0; i--) { /* a shuffled pool: block tables must be followed */
        long j = (long)(kt_rng_next(&rng) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    long next = 0;
    for (long b = 0; b < B; b++)
        for (long i = 0; i < mp; i++) table[b * mp + i] = i < kt_idx_pages(lens[b]) ? perm[next++] : -1;
    free(perm);
    fill_codes(host[T_Q], (size_t)B * KT_IDX_HEADS * KT_IDX_DIM, &rng);
    float *w = host[T_W];
    for (long i = 0; i < B * KT_IDX_HEADS; i++) { /* +-1/8 .. +-7/8 */
        uint64_t r = kt_rng_next(&rng);
        w[i] = (float)(1 + (int)(r % 7)) / 8.0f * ((r >> 8) & 1 ? -1.0f : 1.0f);
    }
    fill_cache(p, host[T_CACHE], &rng);
}

/* Float64 logits of request b's L_b tokens into ref[0..L_b). */
static void reference_logits(const kt_problem *p, void *const *host, int b, const double *lut, double *ref) {
    const uint8_t *q = (const uint8_t *)host[T_Q] + (size_t)b * KT_IDX_HEADS * KT_IDX_DIM, *cache = host[T_CACHE];
    const float *w = (const float *)host[T_W] + (size_t)b * KT_IDX_HEADS;
    const int L = ((const int *)host[T_LENS])[b];
    const int *row = (const int *)host[T_TABLE] + (size_t)b * max_pages_of(p);
    for (int t = 0; t < L; t++) {
        long page = row[t / KT_IDX_PAGE];
        const uint8_t *k = cache + kt_idx_code_offset(page, t % KT_IDX_PAGE);
        float scale;
        memcpy(&scale, cache + kt_idx_scale_offset(page, t % KT_IDX_PAGE), 4);
        double sum = 0;
        for (int h = 0; h < KT_IDX_HEADS; h++) {
            double dot = 0;
            for (int d = 0; d < KT_IDX_DIM; d++) dot += lut[q[h * KT_IDX_DIM + d]] * lut[k[d]];
            sum += w[h] * (dot > 0 ? dot : 0);
        }
        ref[t] = sum * scale;
    }
}

typedef struct ranked {
    double v;
    int pos;
} ranked;

static int by_value_then_position(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int by_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void kt_mla_indexer_topk_sort(const double *x, int n, int k, int *pos) {
    if (n <= k) {
        for (int i = 0; i < k; i++) pos[i] = i < n ? i : -1;
        return;
    }
    ranked *r = must_alloc(sizeof *r * (size_t)n);
    for (int i = 0; i < n; i++) r[i] = (ranked){x[i] == 0 ? 0.0 : x[i], i}; /* -0 ties with +0 */
    qsort(r, (size_t)n, sizeof *r, by_value_then_position);
    for (int i = 0; i < k; i++) pos[i] = r[i].pos;
    qsort(pos, (size_t)k, sizeof *pos, by_int);
    free(r);
}

static unsigned key_of(float x) {
    unsigned bits;
    memcpy(&bits, &x, 4);
    return kt_idx_key(bits);
}

/* The bin of counters c[0..bins) (walked from the top) holding the need-th largest; *need
 * becomes how many are still to take inside it (choose_bin, choose_bin_warp). */
static int choose_bin(const unsigned *c, int bins, unsigned *need) {
    unsigned cum = 0;
    int bin = bins - 1;
    while (bin > 0 && cum + c[bin] < *need) cum += c[bin--];
    *need -= cum;
    return bin;
}

/* write_selected, one thread: every key > T, then the first `need` == T by position, into
 * pos[0..k) (a wrong T writes no further: the tests then see a wrong list, not a crash). */
static void write_selected(const float *x, int n, int k, unsigned T, unsigned need, int *pos) {
    unsigned gt = 0, eq = 0, slot;
    for (int i = 0; i < n; i++) {
        unsigned key = key_of(x[i]);
        if (key > T)
            slot = gt++ + (eq < need ? eq : need);
        else if (key == T && eq < need)
            slot = gt + eq++;
        else {
            eq += key == T;
            continue;
        }
        if (slot < (unsigned)k) pos[slot] = i;
    }
}

/* Digits d0..d1's histograms of keys[0..n) under prefix (digit_histogram + choose_bin). */
static unsigned digit_passes(const unsigned *keys, int n, int d0, int d1, unsigned prefix, unsigned *need) {
    static unsigned hist[KT_IDX_BINS];
    for (int d = d0; d <= d1; d++) {
        memset(hist, 0, sizeof hist);
        for (int i = 0; i < n; i++)
            if (kt_idx_matches(keys[i], prefix, d)) hist[kt_idx_digit(keys[i], d)]++;
        prefix |= (unsigned)choose_bin(hist, kt_idx_digit_bins(d), need) << kt_idx_digit_shift(d);
    }
    return prefix;
}

void kt_mla_indexer_topk_radix(const float *x, int n, int k, int *pos) {
    if (n <= k) {
        for (int i = 0; i < k; i++) pos[i] = i < n ? i : -1;
        return;
    }
    unsigned *keys = must_alloc(sizeof(unsigned) * (size_t)n), need = (unsigned)k;
    for (int i = 0; i < n; i++) keys[i] = key_of(x[i]);
    unsigned T = digit_passes(keys, n, 0, KT_IDX_DIGITS - 1, 0, &need);
    write_selected(x, n, k, T, need, pos);
    free(keys);
}

void kt_mla_indexer_topk_hist(const float *x, int n, int k, int cap, int *pos) {
    if (n <= k) {
        for (int i = 0; i < k; i++) pos[i] = i < n ? i : -1;
        return;
    }
    unsigned *hb = must_alloc(sizeof(unsigned) * KT_IDX_HIST_WORDS), *cand = must_alloc(sizeof(unsigned) * (size_t)n);
    memset(hb, 0, sizeof(unsigned) * KT_IDX_HIST_WORDS);
    for (int i = 0; i < n; i++) { /* the scan's hist_add */
        hb[kt_idx_hist_coarse(key_of(x[i]))]++;
        hb[kt_idx_hist_fine(key_of(x[i]))]++;
    }
    unsigned need = (unsigned)k; /* choose_from_histogram */
    int cb = choose_bin(hb, KT_IDX_HIST_COARSE, &need);
    const unsigned *row = hb + KT_IDX_HIST_COARSE + cb * 256;
    int fb = choose_bin(row, 256, &need);
    unsigned prefix = (unsigned)cb << 24 | (unsigned)fb << 16, count = row[fb], m = 0;
    for (int i = 0; i < n; i++) /* gather_candidates, or (over cap) every key */
        if (count > (unsigned)cap || kt_idx_matches(key_of(x[i]), prefix, 3)) cand[m++] = key_of(x[i]);
    unsigned T = digit_passes(cand, (int)m, 3, 4, prefix, &need);
    write_selected(x, n, k, T, need, pos);
    free(hb);
    free(cand);
}

/* The index list of request b from its float64 logits: positions through its block table. */
static void reference_index(const kt_problem *p, void *const *host, int b, const double *logits, double *ref) {
    int k = (int)topk_of(p), L = ((const int *)host[T_LENS])[b];
    const int *row = (const int *)host[T_TABLE] + (size_t)b * max_pages_of(p);
    int *pos = must_alloc(sizeof(int) * (size_t)k);
    kt_mla_indexer_topk_sort(logits, L, k, pos);
    for (int i = 0; i < k; i++)
        ref[i] = pos[i] < 0 ? -1 : (double)row[pos[i] / KT_IDX_PAGE] * KT_IDX_PAGE + pos[i] % KT_IDX_PAGE;
    free(pos);
}

static void reference(const kt_problem *p, void *const *host, double *ref) {
    double lut[256];
    for (int i = 0; i < 256; i++) lut[i] = kt_e4m3_to_float((uint8_t)i);
    const int *lens = host[T_LENS];
    double *logits = ref, *index = ref + tokens_of(p);
    for (long b = 0, off = 0; b < p->m; off += lens[b++]) {
        reference_logits(p, host, (int)b, lut, logits + off);
        reference_index(p, host, (int)b, logits + off, index + b * topk_of(p));
    }
}

/* The GPU reference: float64 logits by mla_indexer_reference, then the index list on the
 * host from them (sorting is the rule's own statement; the kernel's select is what is checked). */
static int launch_reference(const kt_launch *l, uint64_t ref) {
    const kt_problem *p = l->problem;
    int B = (int)p->m, mp = (int)max_pages_of(p);
    uint64_t a[5] = {l->ptr[T_Q], l->ptr[T_W], l->ptr[T_CACHE], l->ptr[T_LENS], l->ptr[T_TABLE]};
    void *args[] = {&a[0], &a[1], &a[2], &a[3], &a[4], &mp, &B, &ref};
    unsigned tiles = (unsigned)((2 * ctx_of(p) + REF_TOKENS - 1) / REF_TOKENS); /* L_b < 2 CTX */
    if (kt_launch_kernel(l->ref_mod, K_REFERENCE, tiles, (unsigned)B, 1, REF_THREADS, 0, l->stream, args)) return -1;
    size_t n_logits = (size_t)tokens_of(p), n_index = (size_t)B * topk_of(p);
    void *host[KT_MAX_TENSORS] = {0};
    double *buf = malloc(sizeof(double) * (n_logits + n_index));
    host[T_LENS] = malloc(sizeof(int) * (size_t)B);
    host[T_TABLE] = malloc(sizeof(int) * (size_t)B * mp);
    int rc = !buf || !host[T_LENS] || !host[T_TABLE] ? kt_fail("out of memory") : 0;
    if (!rc) rc = kt_status_CU(kt_cu.cuStreamSynchronize(l->stream), "reference kernel", __FILE__, __LINE__);
    if (!rc)
        rc = kt_status_CU(kt_cu.cuMemcpyDtoH(buf, ref, sizeof(double) * n_logits), "cuMemcpyDtoH", __FILE__, __LINE__);
    if (!rc)
        rc = kt_status_CU(kt_cu.cuMemcpyDtoH(host[T_LENS], l->ptr[T_LENS], sizeof(int) * (size_t)B), "cuMemcpyDtoH",
                          __FILE__, __LINE__);
    if (!rc)
        rc = kt_status_CU(kt_cu.cuMemcpyDtoH(host[T_TABLE], l->ptr[T_TABLE], sizeof(int) * (size_t)B * mp),
                          "cuMemcpyDtoH", __FILE__, __LINE__);
    for (long b = 0, off = 0; !rc && b < B; off += ((int *)host[T_LENS])[b++])
        reference_index(p, host, (int)b, buf + off, buf + n_logits + b * topk_of(p));
    if (!rc)
        rc = kt_status_CU(kt_cu.cuMemcpyHtoD(ref + sizeof(double) * n_logits, buf + n_logits, sizeof(double) * n_index),
                          "cuMemcpyHtoD", __FILE__, __LINE__);
    free(buf);
    free(host[T_LENS]);
    free(host[T_TABLE]);
    return rc ? -1 : 0;
}

/* The scan kernel (the family's, or with naive the baseline's) into the logits output. */
static int launch_scan(const kt_launch *l, int naive) {
    const kt_problem *p = l->problem;
    int B = (int)p->m, mp = (int)max_pages_of(p), k = (int)topk_of(p);
    uint64_t a[7] = {l->ptr[T_Q],     l->ptr[T_W],      l->ptr[T_CACHE], l->ptr[T_LENS],
                     l->ptr[T_TABLE], l->ptr[T_LOGITS], l->ptr[T_HIST]};
    void *args[] = {&a[0], &a[1], &a[2], &a[3], &a[4], &mp, &B, &a[5], &a[6], &k};
    const int *v = l->mod->config.v, sms = kt_gpu_current()->sm_count;
    if (naive) return kt_launch_kernel(l->mod, K_NAIVE, (unsigned)sms * 4, 1, 1, 256, 0, l->stream, args);
    /* a programmatic dependent of the kernel before: its prologue (lens, the split, the first
     * block table entries) runs before its griddepcontrol.wait */
    return kt_launch_kernel_pdl(l->mod, K_SCAN, (unsigned)(sms * v[P_CTAS_PER_SM]), 1, 1, (unsigned)v[P_WARPS] * 32,
                                (unsigned)scan_ring_bytes(v), l->stream, args);
}

/* The selection kernel, a cluster of SEL_CLUSTER CTAs per request, over the logits output
 * (PDL: it waits for the scan). */
static int launch_select(const kt_launch *l) {
    const kt_problem *p = l->problem;
    const int *v = l->mod->config.v;
    int mp = (int)max_pages_of(p), k = (int)topk_of(p);
    long slice = (2 * ctx_of(p) + v[P_SEL_CLUSTER] - 1) / v[P_SEL_CLUSTER]; /* L_b < 2 CTX */
    int stage = (int)(slice < KT_IDX_STAGE_KEYS ? slice : KT_IDX_STAGE_KEYS);
    uint64_t a[5] = {l->ptr[T_LOGITS], l->ptr[T_LENS], l->ptr[T_TABLE], l->ptr[T_HIST], l->ptr[T_INDEX]};
    void *args[] = {&a[0], &a[1], &a[2], &mp, &k, &stage, &a[3], &a[4]};
    return kt_launch_kernel_pdl(l->mod, K_SELECT, (unsigned)(p->m * v[P_SEL_CLUSTER]), 1, 1, (unsigned)v[P_SEL_THREADS],
                                (unsigned)kt_idx_staged_words(stage) * 4, l->stream, args);
}

static int launch(const kt_launch *l) { return launch_scan(l, 0) || launch_select(l) ? -1 : 0; }

/* The baselines bench times beside the variant (on the default config's module): each kernel
 * alone (the selection reads the logits the variant's check left), and the straightforward
 * scan with the same selection. */
static int enqueue_scan(void *state, const kt_launch *l) { return (void)state, launch_scan(l, 0); }
static int enqueue_select(void *state, const kt_launch *l) { return (void)state, launch_select(l); }
static int enqueue_naive(void *state, const kt_launch *l) {
    (void)state;
    return launch_scan(l, 1) || launch_select(l) ? -1 : 0;
}
static const kt_baseline scan_only = {.name = "scan", .own = 1, .enqueue = enqueue_scan};
static const kt_baseline select_only = {.name = "select", .own = 1, .enqueue = enqueue_select};
static const kt_baseline naive = {.name = "naive", .enqueue = enqueue_naive};
static const kt_baseline *const baselines[] = {&scan_only, &select_only, &naive, NULL};

/* The floor's bytes: each token's 132 once, q and w, the block tables' used entries, the index
 * list written (the logits between the two kernels are not charged: a fused kernel needs none). */
static double bytes(const kt_problem *p) {
    double B = p->m, T = (double)tokens_of(p);
    return T * (KT_IDX_DIM + 4) + T / KT_IDX_PAGE * 4 + B * (KT_IDX_HEADS * KT_IDX_DIM + KT_IDX_HEADS * 4 + 4) +
           B * topk_of(p) * 4;
}

static double flops(const kt_problem *p) { return 2.0 * KT_IDX_HEADS * KT_IDX_DIM * tokens_of(p); }

static const char *const kernel_names[] = {"mla_indexer_scan", "mla_indexer_select", "mla_indexer_naive",
                                           "mla_indexer_reference", NULL};
/* V3.2 (top-k 2048) and V4 (512) at 8K, 32K and 128K tokens, equal lengths; a ragged batch of
 * the same sum (linearity in sum(L_b)). */
static const long target_shapes[][KT_MAX_DIMS] = {{2048, 8192, 0, 0}, {2048, 32768, 0, 0}, {2048, 131072, 0, 0},
                                                  {512, 8192, 0, 0},  {512, 32768, 0, 0},  {512, 131072, 0, 0},
                                                  {2048, 32768, 1, 0}};
static const char *const dist_names[] = {"equal", "ragged", NULL};
static const char *const values_names[] = {"grid", "tied", "equal", NULL};
/* requests per step: the decode batch sizes, then doubling */
static const long batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 0};

const kt_family kt_family_mla_indexer = {
    .name = "mla_indexer",
    .summary = "lightning indexer: paged e4m3 K logits (64 heads, relu, weights) and their top-k index list",
    .source = "mla_indexer.cu",
    .kernels = kernel_names,
    .n_keys = 4,
    .keys = {{"TOPK", KT_KEY_SIZE, NULL},
             {"CTX", KT_KEY_SIZE, NULL},
             {"DIST", KT_KEY_CATEGORY, dist_names},
             {"VALUES", KT_KEY_CATEGORY, values_names}},
    .m_name = "B",
    .batch_buckets = batch_buckets,
    .n_params = 10,
    .params = {{"WARPS", 2, {4, 8}},
               {"NT", 3, {1, 2, 4}},
               {"CTAS_PER_SM", 3, {1, 2, 3}},
               {"SEL_THREADS", 2, {512, 1024}},
               {"SEL_CLUSTER", 4, {1, 2, 4, 8}},
               {"MATH", 2, {0, 1}},
               {"STAGES", 3, {2, 3, 4}},
               {"HIST", 2, {0, 1}},
               {"CHAINS", 2, {1, 2}},
               /* the selection's staging loads together (1), and HIST=1's gather fused with the
                * ordered pass's read (2): the twenty-second session's levers, off (0) until a GPU
                * has measured them (bench/NOTES.md) */
               {"SEL_FAST", 3, {0, 1, 2}}},
    .strata_params = 3,
    /* 2 CTAs of 4 warps of two n-tiles an SM, a ring of 4 groups a warp (3 in flight: 48 KB an
     * SM), f16 math (the portable path: 202 registers on sm_90, 208 on sm_120, no spills; e4m3
     * at this shape: 148 on sm_120), so the scan-only baseline is the H200's served scan */
    .default_config = {{4, 2, 2, 1024, 1, 1, 4, 0, 1, 0}},
    .target_shapes = target_shapes,
    .n_target_shapes = 7,
    KT_FAMILY_HOOKS,
    .default_for = default_for,
    KT_FAMILY_GPU_REFERENCE(1 << 27),
    .tolerance = 1e-5,
    .flops = flops,
    /* the roof's mma rate is the bf16 one (issue 20's H200 roof): the f16 path runs at it on
     * sm_90, where the e4m3 mma.sync is emulated at about half of it */
    .mma = KT_MMA_BF16,
    .baselines = baselines,
};
