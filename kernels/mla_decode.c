/* mla_decode.c — host descriptor of the sparse MLA decode family (kernels/mla_decode.cu):
 * FlashMLA-compatible FP8 caches (kernels/common/mla_layout.h) written by kt's quantiser
 * from seeded latent vectors, index lists with -1 holes, short and empty requests, the
 * float64 reference, the tuning space, launch geometry, and the bytes and flops that set
 * the floor and the roof. Key: LAYOUT (category V32 = V3.2, V4), HQ, TOPK, SQ; batch B. */
#include "../runtime/kt.h"
#include "family_hooks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/kt_arch.h"
#include "common/mla_layout.h"
#include "mla_decode.h"

enum { D_LAYOUT, D_HQ, D_TOPK, D_SQ };
enum { LAYOUT_V32, LAYOUT_V4 }; /* the LAYOUT category's values, in `layouts` order */
static const char *const layouts[] = {"V32", "V4", NULL};
enum { P_HPC, P_CHUNK, P_SPLIT, P_STAGES, P_PATH, P_WPM, P_FUSE, P_MPW, P_PART };
enum { K_SPLIT_V32, K_SPLIT_V4, K_COMBINE, K_COMBINE_WIDE, K_REF_V32, K_REF_V4, K_NAIVE_V32, K_NAIVE_V4 };

/* The ship arch's shared memory per block (kernels/common/kt_arch.h): a problem fits where it ships. */
#define SMEM_LIMIT (kt_arch_limits_of(KT_SHIP_ARCH).smem_per_block)
#define MAX_CTAS 1024 /* the partials buffer holds this many CTAs' worth of splits */
/* The SPLIT values (slots a CTA takes): powers of two and, between them, splits that size a grid
 * to 2 or 3 CTAs an SM (V4 HQ 16 B = 64: 160 for 256 CTAs) */
#define SPLITS 32, 64, 96, 128, 160, 192, 256, 384, 512, 1024, 2048
#define N_SPLITS 11
static const int splits[N_SPLITS] = {SPLITS};

/* The tensors' positions: V3.2 has no window cache and no sinks. */
typedef struct tensor_ix {
    int q, kv, idx, len, kv2, idx2, len2, sink, out, lse, part, tick, n;
} tensor_ix;

static tensor_ix tensor_ix_of(const kt_problem *p) {
    if (p->dim[D_LAYOUT] == LAYOUT_V32) return (tensor_ix){0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7, 8};
    return (tensor_ix){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
}

/* The layout code the kernels take (mla_layout.h) of the problem's LAYOUT category. */
static int layout_of(const kt_problem *p) { return p->dim[D_LAYOUT] == LAYOUT_V32 ? KT_MLA_V32 : KT_MLA_V4; }
static long queries(const kt_problem *p) { return p->m * p->dim[D_SQ]; }
static int slots_of(const kt_problem *p) { return kt_mla_slots(layout_of(p), (int)p->dim[D_TOPK]); }

/* The most splits a problem's partials buffer holds: MAX_CTAS CTAs of 16 heads, at most one
 * split per 32 slots, and no more than the combine merges. */
static long max_splits(const kt_problem *p) {
    long rows = queries(p) * (p->dim[D_HQ] / 16), by_ctas = (MAX_CTAS + rows - 1) / rows;
    long by_slots = (slots_of(p) + 31) / 32, n = by_ctas < by_slots ? by_ctas : by_slots;
    return n < KT_MLA_MAX_SPLITS ? n : KT_MLA_MAX_SPLITS;
}

/* ---------------------------------------------------------------- seeded inputs */

/* The lists' lengths of request b (deterministic, so bytes() counts exactly what is read):
 * every 8th request from the third has none (its rows get out 0, lse +inf), every 8th from
 * the sixth a short context; the rest the full lists. window: V4's window list. */
static int fill_len(const kt_problem *p, long b, int window) {
    int n = window ? KT_MLA_V4_WINDOW : (int)p->dim[D_TOPK];
    if (b % 8 == 2) return 0;
    if (b % 8 == 5) return 1 + (int)((b * 977 + (window ? 31 : 0)) % n);
    return n;
}

/* Whether slot j of query bs is a -1 hole: about 1 in 29 slots, and every slot of the second
 * query of every 8th request from the seventh (a row with no valid slot in a used request). */
static int fill_hole(const kt_problem *p, long bs, long j) {
    if (p->dim[D_SQ] > 1 && bs % p->dim[D_SQ] == 1 && (bs / p->dim[D_SQ]) % 8 == 6) return 1;
    return ((uint32_t)(bs * 2654435761u + (uint32_t)j * 40503u) >> 7) % 29 == 0;
}

/* Valid slots over all queries (what the kernel gathers). */
static double used_slots(const kt_problem *p) {
    double n = 0;
    int topk = (int)p->dim[D_TOPK], v4 = layout_of(p) == KT_MLA_V4;
    for (long bs = 0; bs < queries(p); bs++) {
        long b = bs / p->dim[D_SQ];
        for (int j = 0; j < fill_len(p, b, 0); j++) n += !fill_hole(p, bs, j);
        for (int j = 0; v4 && j < fill_len(p, b, 1); j++) n += !fill_hole(p, bs, topk + j);
    }
    return n;
}

/* Pages of a request's context in a cache: its list's length plus a page of tokens never
 * chosen (a kernel reading a wrong token reads real data). */
static long pages_per_request(int n) { return (n + KT_MLA_PAGE - 1) / KT_MLA_PAGE + 1; }

void kt_mla_quantise_token(int layout, uint8_t *cache, long id, const float *x) {
    int nope = kt_mla_nope(layout), tile = kt_mla_tile(layout);
    uint8_t *codes = cache + kt_mla_token_at(layout, id), *scales = cache + kt_mla_scales_at(layout, id);
    for (int t = 0; t < nope / tile; t++) {
        float amax = 0;
        for (int i = 0; i < tile; i++) amax = fmaxf(amax, fabsf(x[t * tile + i]));
        float s = exp2f(ceilf(log2f(fmaxf(amax / 448.0f, KT_MLA_MIN_SCALE))));
        for (int i = 0; i < tile; i++) codes[t * tile + i] = kt_float_to_e4m3(x[t * tile + i] / s);
        if (layout == KT_MLA_V32)
            memcpy(scales + 4 * t, &s, 4);
        else
            scales[t] = (uint8_t)(127 + (int)log2f(s));
    }
    if (layout == KT_MLA_V4) scales[nope / tile] = 0; /* the pad byte */
    uint8_t *rope = cache + kt_mla_rope_at(layout, id);
    for (int i = 0; i < KT_MLA_ROPE; i++) {
        uint16_t v = kt_float_to_bf16(x[nope + i]);
        rope[2 * i] = (uint8_t)v, rope[2 * i + 1] = (uint8_t)(v >> 8);
    }
}

/* A cache of `pages` pages of random latent vectors (magnitudes varying per scale tile so the
 * scales differ), quantised token by token. */
static void fill_cache(int layout, uint8_t *cache, long pages, uint64_t *rng) {
    memset(cache, 0, (size_t)(pages * kt_mla_page_bytes(layout)));
    float x[KT_MLA_V32_DQK];
    int nope = kt_mla_nope(layout), tile = kt_mla_tile(layout);
    for (long id = 0; id < pages * KT_MLA_PAGE; id++) {
        for (int t = 0; t < nope / tile; t++) {
            float mag = ldexpf(1.0f, (int)(kt_rng_next(rng) % 6) - 3);
            for (int i = 0; i < tile; i++) x[t * tile + i] = kt_rng_uniform(rng) * mag;
        }
        for (int i = 0; i < KT_MLA_ROPE; i++) x[nope + i] = kt_rng_uniform(rng);
        kt_mla_quantise_token(layout, cache, id, x);
    }
}

/* Index lists [queries][n] of distinct tokens of each request's own pages, -1 at the holes
 * (slot numbers from first_slot: the window list follows the top-k in a query's slots). */
static void fill_indices(const kt_problem *p, int32_t *idx, int n, int first_slot, uint64_t *rng) {
    long ctx = pages_per_request(n) * KT_MLA_PAGE;
    int32_t *perm = malloc(sizeof *perm * (size_t)ctx);
    if (!perm) return; /* host out of memory: the lists stay as allocated; the check fails */
    for (long bs = 0; bs < queries(p); bs++) {
        long b = bs / p->dim[D_SQ];
        for (long i = 0; i < ctx; i++) perm[i] = (int32_t)(b * ctx + i);
        for (int j = 0; j < n; j++) {
            long k = j + (long)(kt_rng_next(rng) % (uint64_t)(ctx - j));
            int32_t t = perm[j];
            perm[j] = perm[k], perm[k] = t;
            idx[bs * n + j] = fill_hole(p, bs, first_slot + j) ? -1 : perm[j];
        }
    }
    free(perm);
}

static void fill(const kt_problem *p, uint64_t seed, void *const *host) {
    tensor_ix ix = tensor_ix_of(p);
    int layout = layout_of(p), topk = (int)p->dim[D_TOPK];
    long B = p->m, nq = (long)queries(p) * p->dim[D_HQ] * kt_mla_dqk(layout);
    uint64_t rng = seed;
    uint16_t *q = host[ix.q];
    for (long i = 0; i < nq; i++) q[i] = kt_float_to_bf16(kt_rng_uniform(&rng) * 2.0f);
    fill_cache(layout, host[ix.kv], B * pages_per_request(topk), &rng);
    fill_indices(p, host[ix.idx], topk, 0, &rng);
    for (long b = 0; b < B; b++) ((int32_t *)host[ix.len])[b] = fill_len(p, b, 0);
    if (layout != KT_MLA_V4) return;
    fill_cache(layout, host[ix.kv2], B * pages_per_request(KT_MLA_V4_WINDOW), &rng);
    fill_indices(p, host[ix.idx2], KT_MLA_V4_WINDOW, topk, &rng);
    for (long b = 0; b < B; b++) ((int32_t *)host[ix.len2])[b] = fill_len(p, b, 1);
    float *sink = host[ix.sink];
    for (long h = 0; h < p->dim[D_HQ]; h++) sink[h] = kt_rng_uniform(&rng) * 3.0f;
}

/* ---------------------------------------------------------------- reference */

/* The token of slot j of query bs and its cache, or -1 (the kernels' slot_token). */
static long slot_token(const kt_problem *p, void *const *host, long bs, int j, const uint8_t **cache) {
    tensor_ix ix = tensor_ix_of(p);
    long b = bs / p->dim[D_SQ];
    int topk = (int)p->dim[D_TOPK];
    if (j >= topk) {
        *cache = host[ix.kv2];
        int w = j - topk;
        return w < ((int32_t *)host[ix.len2])[b] ? ((int32_t *)host[ix.idx2])[bs * KT_MLA_V4_WINDOW + w] : -1;
    }
    *cache = host[ix.kv];
    return j < ((int32_t *)host[ix.len])[b] ? ((int32_t *)host[ix.idx])[bs * topk + j] : -1;
}

/* out [B,SQ,HQ,512] then lse [B,HQ,SQ], in float64 from the cache bytes (each used token
 * dequantised once per query). */
static void reference(const kt_problem *p, void *const *host, double *ref) {
    tensor_ix ix = tensor_ix_of(p);
    int layout = layout_of(p), dqk = kt_mla_dqk(layout), slots = slots_of(p);
    long HQ = p->dim[D_HQ], SQ = p->dim[D_SQ], nq = queries(p);
    double *kv = malloc(sizeof(double) * (size_t)slots * dqk), *sc = malloc(sizeof(double) * (size_t)slots);
    int *used = malloc(sizeof(int) * (size_t)slots);
    if (!kv || !sc || !used) goto done; /* host out of memory: ref stays unset, the check fails */
    for (long bs = 0; bs < nq; bs++) {
        for (int j = 0; j < slots; j++) {
            const uint8_t *cache;
            long id = slot_token(p, host, bs, j, &cache);
            used[j] = id >= 0;
            for (int d = 0; used[j] && d < dqk; d++) kv[(long)j * dqk + d] = kt_mla_value(layout, cache, id, d);
        }
        for (long h = 0; h < HQ; h++) {
            const uint16_t *q = (const uint16_t *)host[ix.q] + (bs * HQ + h) * dqk;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < slots; j++) {
                sc[j] = -INFINITY;
                if (!used[j]) continue;
                double s = 0;
                for (int d = 0; d < dqk; d++) s += kt_bf16_to_float(q[d]) * kv[(long)j * dqk + d];
                sc[j] = s * kt_mla_sm_scale(layout);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < slots; j++) sum += used[j] ? exp(sc[j] - mx) : 0;
            double lse = sum > 0 ? mx + log(sum) : INFINITY, f = sum > 0 ? 1 / sum : 0;
            if (sum > 0 && ix.sink >= 0) f /= 1 + exp(((const float *)host[ix.sink])[h] - lse);
            double *o = ref + (bs * HQ + h) * KT_MLA_DV;
            for (int d = 0; d < KT_MLA_DV; d++) o[d] = 0;
            for (int j = 0; j < slots; j++) {
                if (!used[j]) continue;
                double w = exp(sc[j] - mx) * f;
                for (int d = 0; d < KT_MLA_DV; d++) o[d] += w * kv[(long)j * dqk + d];
            }
            ref[nq * HQ * KT_MLA_DV + ((bs / SQ) * HQ + h) * SQ + bs % SQ] = lse;
        }
    }
done:
    free(kv);
    free(sc);
    free(used);
}

/* ---------------------------------------------------------------- space and checks */

static int check_problem(const kt_problem *p, char *why, size_t n) {
    long L = p->dim[D_LAYOUT], HQ = p->dim[D_HQ], TOPK = p->dim[D_TOPK], SQ = p->dim[D_SQ];
    if (L != LAYOUT_V32 && L != LAYOUT_V4)
        return snprintf(why, n,
                        "LAYOUT=%ld: mla_decode knows LAYOUT=V32 (V3.2, 656 bytes a token) and LAYOUT=V4 (V4, 584)", L),
               -1;
    if (HQ % 16 || HQ > 128) return snprintf(why, n, "HQ=%ld: mla_decode takes a multiple of 16 up to 128", HQ), -1;
    if (TOPK > 2048) return snprintf(why, n, "TOPK=%ld: mla_decode takes a top-k up to 2048", TOPK), -1;
    if (SQ > 2) return snprintf(why, n, "SQ=%ld: mla_decode takes 1 or 2 queries a request (MTP)", SQ), -1;
    if (p->m < 1 || p->m > 1024) return snprintf(why, n, "B=%ld: mla_decode takes 1 to 1024 requests", p->m), -1;
    return 0;
}

/* Shared memory of a config for a layout (kernels/mla_decode.cu's lay<L>::SMEM): PATHs 2 and 3
 * have no bf16 tile, and p's factors per scale tile instead. */
static int smem_of(const kt_config *c, int layout) {
    const int *v = c->v;
    int dqk = kt_mla_dqk(layout), regs = v[P_PATH] >= 2;
    int raw_row = layout == KT_MLA_V32 ? KT_MLA_V32_TOKEN : KT_MLA_V4_DATA + 16;
    int tile = regs ? 0 : v[P_CHUNK] * (dqk * 2 + 16);
    int factors = regs ? kt_mla_nope(layout) / kt_mla_tile(layout) * v[P_CHUNK] * 2 : 0;
    return v[P_STAGES] * v[P_CHUNK] * raw_row + tile + 4 * v[P_HPC] * (v[P_CHUNK] + 4) * 4 +
           v[P_HPC] * (v[P_CHUNK] + 8) * 2 + factors + v[P_HPC] * 4 + v[P_SPLIT] * 4;
}

/* Threads of the split kernel: WPM warps per MPW x 16 heads. */
static int threads_of(const kt_config *c) { return c->v[P_HPC] / 16 / c->v[P_MPW] * c->v[P_WPM] * 32; }

static int check_config(const kt_config *c, int arch, char *why, size_t n) {
    const int *v = c->v;
    if (v[P_SPLIT] % v[P_CHUNK])
        return snprintf(why, n, "SPLIT=%d is not whole chunks of %d", v[P_SPLIT], v[P_CHUNK]), -1;
    if (v[P_PATH] >= 2 && v[P_STAGES] < 2)
        return snprintf(why, n, "PATH=%d reads each chunk from the raw ring: STAGES=%d needs to be 2 or more",
                        v[P_PATH], v[P_STAGES]),
               -1;
    if (v[P_MPW] == 2 && (v[P_PATH] < 2 || v[P_HPC] % 32 || v[P_WPM] != 8))
        return snprintf(why, n, "MPW=2 (32 heads a warp) takes PATH 2 or 3, HPC 32 and WPM 8"), -1;
    if (v[P_WPM] == 16 && (v[P_HPC] != 16 || v[P_CHUNK] < 32))
        return snprintf(why, n, "WPM=16 (512 threads at 128 registers) takes HPC 16 and CHUNK 32 or 64"), -1;
    if (v[P_PATH] == 1 && !kt_arch_limits_of(arch).block_scaled_mma)
        return snprintf(why, n, "PATH=1 (the block-scaled mma) exists on sm_120a only, not %s", kt_arch_name(arch)), -1;
    /* q's fragments (36 registers at V3.2), the p . v sums (512 / WPM / 2) and ~60 more must fit
     * the registers a thread gets: 512 threads get 128 */
    if (threads_of(c) > (v[P_WPM] == 16 ? 512 : 256))
        return snprintf(why, n, "HPC=%d with WPM=%d is %d threads: too few registers each", v[P_HPC], v[P_WPM],
                        threads_of(c)),
               -1;
    /* the smaller layout's need: a config that fits neither is refused before compiling */
    int smem_limit = kt_arch_limits_of(arch).smem_per_block;
    if (smem_of(c, KT_MLA_V4) > smem_limit)
        return snprintf(why, n, "needs %d bytes of shared memory (> %d)", smem_of(c, KT_MLA_V4), smem_limit), -1;
    return 0;
}

static int config_fits(const kt_config *c, const kt_problem *p) {
    const int *v = c->v;
    long nsplit = (slots_of(p) + v[P_SPLIT] - 1) / v[P_SPLIT];
    /* PATH 1 takes V4's ue8m0 scales as the mma's block scales */
    return p->dim[D_HQ] % v[P_HPC] == 0 && nsplit <= max_splits(p) && smem_of(c, layout_of(p)) <= SMEM_LIMIT &&
           (v[P_PATH] != 1 || layout_of(p) == KT_MLA_V4);
}

/* A fused launch of one split (PATH 2 / 3) writes the output itself: no partials, no merge. */
static int direct_write(const int *v, const kt_problem *p) {
    return v[P_FUSE] && v[P_PATH] >= 2 && slots_of(p) <= v[P_SPLIT];
}

static int hopeless(const kt_config *c, const kt_problem *p) {
    const int *v = c->v;
    /* a split longer than the list is the list; raw buffers beyond a split's chunks stay empty; the
     * direct write has no partials to store as bf16 (PART) */
    return (v[P_SPLIT] > 2 * slots_of(p) && v[P_SPLIT] > 64) ||
           (v[P_STAGES] > 2 && v[P_STAGES] > v[P_SPLIT] / v[P_CHUNK]) || (v[P_PART] && direct_write(v, p));
}

/* PATH 2 (no bf16 tile: three CTAs of 128 threads fit an SM); HPC 16 at small batches (more
 * CTAs), 32 where the head groups alone fill the SMs, and there 32 heads a warp (MPW 2, WPM 8: one
 * conversion for both m-fragments); the split the smallest that keeps the CTAs within about
 * three an SM (two at HPC 32), or one an SM where the queries' head groups are at most an eighth
 * of the SMs (B = 1: a CTA's first chunk is the time, and fewer splits merge faster: V3.2 HQ
 * 128's SPLIT 128); WPM 8 where the CTAs fit two of 256 threads an SM; a split of 16+ chunks of
 * 32 in chunks of 64, or else with a third raw buffer, where it fits; the output written by the
 * split kernel where a query's slots are one split (FUSE 1), else the combine kernel (FUSE 0:
 * FUSE 2 lost at B = 1 by 1.3-3.8 us, FUSE 1 at B = 64 by 6-22% even with its loads batched:
 * bench/NOTES.md, eighteenth session, mla18b; with a batch's loads all in flight and one thread's
 * release, FUSE 2 still lost at V4 B = 1 by 1.0-1.4 us and tied at V3.2 HQ 128, FUSE 1 at V4 HQ 16
 * B = 64 by 20%: twenty-fourth session, mla25). The tuned winners on the H200, bench/NOTES.md
 * fifteenth and sixteenth sessions. */
/* Where HPC 16's grid is three CTAs of 128 threads an SM (WPM 4): two of 256 (WPM 8, 16 warps an SM
 * where 12 ran) with the smallest split of the list within two an SM, if its busiest SM takes fewer
 * slots (CTAs there x the split): V4 HQ 16 B = 64's SPLIT 160 (256 CTAs, 2 x 160 slots) for 128 (320
 * CTAs: 56 SMs hold three, 3 x 128), 12% faster on the H200 (bench/NOTES.md, eighteenth session).
 * Returns the splits of the query's slots; c's SPLIT is set where the swap is made. */
static long two_an_sm(const kt_problem *p, long rows, int sms, long grid, kt_config *c) {
    for (int i = 0; i < N_SPLITS; i++) {
        long n = (slots_of(p) + splits[i] - 1) / splits[i];
        if (rows * n > 2L * sms || n > max_splits(p)) continue;
        if ((rows * n + sms - 1) / sms * splits[i] >= (grid + sms - 1) / sms * c->v[P_SPLIT]) break;
        c->v[P_SPLIT] = splits[i];
        return n;
    }
    return grid / rows;
}

static void default_for(const kt_problem *p, int sms, kt_config *c) {
    int *v = c->v;
    v[P_HPC] = p->dim[D_HQ] % 32 == 0 && queries(p) * p->dim[D_HQ] / 32 >= sms ? 32 : 16;
    v[P_CHUNK] = 32;
    v[P_STAGES] = 2;
    v[P_PATH] = 2;
    v[P_MPW] = v[P_HPC] == 32 ? 2 : 1;
    long rows = queries(p) * (p->dim[D_HQ] / v[P_HPC]);
    long ctas = 8 * rows <= sms ? sms : (v[P_HPC] == 16 ? 3 : 2) * sms;
    v[P_SPLIT] = 32;
    while (v[P_SPLIT] < 2048 && (rows * ((slots_of(p) + v[P_SPLIT] - 1) / v[P_SPLIT]) > ctas ||
                                 (slots_of(p) + v[P_SPLIT] - 1) / v[P_SPLIT] > max_splits(p)))
        v[P_SPLIT] *= 2;
    long grid = rows * ((slots_of(p) + v[P_SPLIT] - 1) / v[P_SPLIT]);
    if (ctas == 3L * sms && grid > 2L * sms) grid = rows * two_an_sm(p, rows, sms, grid, c);
    v[P_WPM] = v[P_MPW] == 2 || grid <= 2 * sms ? 8 : 4;
    /* one CTA an SM of 4+ chunks (V3.2 HQ 128 B = 1): 16 warps, 512 threads, which no SM holds two of
     * (two of 256 on one SM left the grid's last CTA 5 us behind the median: bench/NOTES.md, mla21) */
    if (v[P_HPC] == 16 && ctas == sms && grid <= sms && v[P_SPLIT] >= 4 * v[P_CHUNK]) v[P_WPM] = 16;
    v[P_FUSE] = grid == rows ? 1 : 0;
    /* the partial sums stored and merged as bf16 wherever there are partials (a fused launch of one
     * split writes its output itself): the H200, two rounds, V4 HQ 16 B = 1 7.72 -> 7.37 us, V4 HQ 64
     * B = 1 9.01 -> 8.35, V3.2 HQ 128 B = 1 15.30 -> 15.12, V4 HQ 16 B = 64 22.26 -> 20.46; out's rel
     * error 1.8e-3 -> 2.3e-3 (bench/NOTES.md, mla24) */
    v[P_PART] = !direct_write(v, p);
    if (v[P_SPLIT] < 16 * 32) return;
    v[P_CHUNK] = 64;
    if (smem_of(c, layout_of(p)) <= SMEM_LIMIT) return;
    v[P_CHUNK] = 32, v[P_STAGES] = 3;
    if (smem_of(c, layout_of(p)) > SMEM_LIMIT) v[P_STAGES] = 2;
}

/* ---------------------------------------------------------------- tensors and launch */

static int tensors(const kt_problem *p, kt_tensor_desc *t) {
    tensor_ix ix = tensor_ix_of(p);
    int layout = layout_of(p);
    size_t B = p->m, nq = queries(p), HQ = p->dim[D_HQ], topk = p->dim[D_TOPK];
    t[ix.q] = (kt_tensor_desc){"q", KT_BF16, nq * HQ * kt_mla_dqk(layout), KT_INPUT};
    t[ix.kv] = (kt_tensor_desc){"kv", KT_U8, B * pages_per_request((int)topk) * kt_mla_page_bytes(layout), KT_INPUT};
    t[ix.idx] = (kt_tensor_desc){"indices", KT_I32, nq * topk, KT_INPUT};
    t[ix.len] = (kt_tensor_desc){"lengths", KT_I32, B, KT_INPUT};
    if (layout == KT_MLA_V4) {
        t[ix.kv2] = (kt_tensor_desc){"window_kv", KT_U8,
                                     B * pages_per_request(KT_MLA_V4_WINDOW) * kt_mla_page_bytes(layout), KT_INPUT};
        t[ix.idx2] = (kt_tensor_desc){"window_indices", KT_I32, nq * KT_MLA_V4_WINDOW, KT_INPUT};
        t[ix.len2] = (kt_tensor_desc){"window_lengths", KT_I32, B, KT_INPUT};
        t[ix.sink] = (kt_tensor_desc){"sinks", KT_F32, HQ, KT_INPUT};
    }
    t[ix.out] = (kt_tensor_desc){"out", KT_BF16, nq * HQ * KT_MLA_DV, KT_OUTPUT};
    t[ix.lse] = (kt_tensor_desc){"lse", KT_F32, nq * HQ, KT_OUTPUT, KT_CMP_REL_L2, 1e-3};
    /* sized for PART 0's f32 sums: one buffer serves every config a sweep times on the problem
     * (PART 1's bf16 sums and their (m, l) pairs take the first kt_mla_part_bytes(.., 1) of it) */
    t[ix.part] = (kt_tensor_desc){"partials", KT_F32,
                                  (size_t)kt_mla_part_bytes((long)(nq * HQ), (int)max_splits(p), 0) / 4, KT_TEMP};
    t[ix.tick] = (kt_tensor_desc){"tickets", KT_I32, (size_t)kt_mla_tickets((long)nq, (int)HQ), KT_SCRATCH};
    return ix.n;
}

/* The kernels' argument for the tensors at ptr, with nsplit splits of split slots. */
static kt_mla_args args_of(const kt_launch *l, int split) {
    const kt_problem *p = l->problem;
    tensor_ix ix = tensor_ix_of(p);
    kt_mla_args a = {.q = l->ptr[ix.q],
                     .kv = l->ptr[ix.kv],
                     .idx = l->ptr[ix.idx],
                     .len = l->ptr[ix.len],
                     .part = l->ptr[ix.part],
                     .out = l->ptr[ix.out],
                     .lse = l->ptr[ix.lse],
                     .tick = l->ptr[ix.tick],
                     .B = (int)p->m,
                     .SQ = (int)p->dim[D_SQ],
                     .HQ = (int)p->dim[D_HQ],
                     .TOPK = (int)p->dim[D_TOPK],
                     .nsplit = (slots_of(p) + split - 1) / split};
    if (ix.kv2 >= 0) {
        a.kv2 = l->ptr[ix.kv2], a.idx2 = l->ptr[ix.idx2], a.len2 = l->ptr[ix.len2], a.sink = l->ptr[ix.sink];
    }
    return a;
}

/* FUSE 0: the split kernel, then the combine kernel; FUSE 1: the split kernel alone, each head
 * group's last CTA merging it; FUSE 2: every CTA of a group merging a share, where the grid fits
 * one CTA an SM (its CTAs wait for each other: all must be resident), else as FUSE 1. */
static int launch(const kt_launch *l) {
    const int *v = l->config->v;
    const kt_problem *p = l->problem;
    kt_mla_args a = args_of(l, v[P_SPLIT]);
    void *args[] = {&a};
    int v4 = layout_of(p) == KT_MLA_V4;
    if (a.nsplit > max_splits(p)) /* a --config the problem does not fit: its partials would overflow */
        return kt_fail("mla_decode: SPLIT=%d cuts the slots into %d splits, more than the partials hold (%ld)",
                       v[P_SPLIT], a.nsplit, max_splits(p));
    long grid = (long)a.nsplit * (a.HQ / v[P_HPC]) * queries(p);
    a.fuse = v[P_FUSE] == 0                                         ? KT_MLA_FUSE_NONE
             : v[P_FUSE] == 2 && grid <= kt_gpu_current()->sm_count ? KT_MLA_FUSE_ALL
                                                                    : KT_MLA_FUSE_LAST;
    if (kt_launch_kernel_pdl(l->mod, v4 ? K_SPLIT_V4 : K_SPLIT_V32, (unsigned)a.nsplit, (unsigned)(a.HQ / v[P_HPC]),
                             (unsigned)queries(p), (unsigned)threads_of(l->config),
                             (unsigned)smem_of(l->config, layout_of(p)), l->stream, args))
        return -1;
    if (a.fuse != KT_MLA_FUSE_NONE) return 0;
    /* the wide combine (32 splits' sums in flight, 150 registers) where there are more than 8 */
    return kt_launch_kernel_pdl(l->mod, a.nsplit > 8 ? K_COMBINE_WIDE : K_COMBINE, (unsigned)a.HQ, (unsigned)queries(p),
                                1, 128, 0, l->stream, args);
}

static int launch_reference(const kt_launch *l, uint64_t ref) {
    kt_mla_args a = args_of(l, 2048);
    void *args[] = {&a, &ref};
    int v4 = layout_of(l->problem) == KT_MLA_V4;
    return kt_launch_kernel(l->ref_mod, v4 ? K_REF_V4 : K_REF_V32, (unsigned)a.HQ, (unsigned)queries(l->problem), 1,
                            128, 0, l->stream, args);
}

static int naive_enqueue(void *state, const kt_launch *l) {
    (void)state;
    kt_mla_args a = args_of(l, 2048);
    void *args[] = {&a};
    int v4 = layout_of(l->problem) == KT_MLA_V4;
    return kt_launch_kernel(l->mod, v4 ? K_NAIVE_V4 : K_NAIVE_V32, (unsigned)a.HQ, (unsigned)queries(l->problem), 1,
                            128, 0, l->stream, args);
}

static const kt_baseline naive = {.name = "naive", .enqueue = naive_enqueue};
static const kt_baseline *const baselines[] = {&naive, NULL};

/* Bytes that must move: the used tokens (656 or 584 bytes each), their index entries, q,
 * out and lse. */
static double bytes(const kt_problem *p) {
    int layout = layout_of(p);
    double nq = (double)queries(p), HQ = (double)p->dim[D_HQ];
    return used_slots(p) * (kt_mla_token_bytes(layout) + 4) + nq * HQ * (kt_mla_dqk(layout) * 2 + KT_MLA_DV * 2 + 4);
}

/* q . k over the head dim and p . v over 512, per head and used slot. */
static double flops(const kt_problem *p) {
    return 2.0 * p->dim[D_HQ] * used_slots(p) * (kt_mla_dqk(layout_of(p)) + KT_MLA_DV);
}

static const char *const kernel_names[] = {"mla_split_v32",    "mla_split_v4",      "mla_combine",
                                           "mla_combine_wide", "mla_reference_v32", "mla_reference_v4",
                                           "mla_naive_v32",    "mla_naive_v4",      NULL};
/* TARGETS.md's cases: V3.2 at 128 and 16 heads, V4 at 64 and 16 heads (top-k 512 + window). */
static const long target_shapes[][KT_MAX_DIMS] = {
    {LAYOUT_V32, 128, 2048, 1}, {LAYOUT_V32, 16, 2048, 1}, {LAYOUT_V4, 64, 512, 1}, {LAYOUT_V4, 16, 512, 1}};
/* Decode batches: requests per step. */
static const long batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 0};

const kt_family kt_family_mla_decode = {
    .name = "mla_decode",
    .summary = "sparse MLA decode over FlashMLA's FP8 caches (V3.2 656 B/token, V4 584 B/token + window, sinks)",
    .source = "mla_decode.cu",
    .kernels = kernel_names,
    .n_keys = 4,
    .keys = {{"LAYOUT", KT_KEY_CATEGORY, layouts}, {"HQ"}, {"TOPK"}, {"SQ"}},
    .m_name = "B",
    .batch_buckets = batch_buckets,
    .mma = KT_MMA_BF16,
    .n_params = 9,
    .params = {{"HPC", 2, {16, 32}},
               {"CHUNK", 3, {16, 32, 64}},
               {"SPLIT", N_SPLITS, {SPLITS}},
               {"STAGES", 5, {1, 2, 3, 4, 6}},
               {"PATH", 4, {0, 1, 2, 3}},
               {"WPM", 3, {4, 8, 16}},
               {"FUSE", 3, {0, 1, 2}},
               {"MPW", 2, {1, 2}},
               /* the partial sums as bf16 (1; the (m, l) pairs stay f32): half the bytes stored and
                * merged; default_for takes it wherever there are partials (bench/NOTES.md, mla24) */
               {"PART", 2, {0, 1}}},
    .strata_params = 3,
    .default_config = {{16, 32, 256, 2, 2, 4, 0, 1, 0}},
    .target_shapes = target_shapes,
    .n_target_shapes = 4,
    KT_FAMILY_HOOKS,
    .hopeless = hopeless,
    .default_for = default_for,
    KT_FAMILY_GPU_REFERENCE(1 << 25),
    .tolerance = 1e-2,
    .baselines = baselines,
    .flops = flops,
};
