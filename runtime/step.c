/* step.c — the GPU decode step (step.h). Weights go to the device in kt's formats (GEMM weights
 * FP8 e4m3 with 128x128 scales, quantised at load from bf16/f32; the rest f32); each layer part
 * is a kt family's kernel served by kt_dispatch (fp8_gemm, act_quant, and where step_plan.c says
 * so mla_indexer, mla_decode, moe_route (V4 and the hash-routed layers' HASH), moe_gemm FP8 or
 * MXFP4, the checkpoint's experts' format) or a plain kernel of runtime/model.cu (the
 * simple reference path, all of it under `kt run --plain-kernels`; the README's "kt family vs
 * simple kernel" table says which); the step is captured once as a CUDA graph that reads the
 * position and tokens from device memory, and replayed every step. A second graph from the
 * family defaults gives the tuned-vs-default gain. */
#include "step.h"

#include "../kernels/common/indexer_layout.h"
#include "../kernels/common/kv_v4.cuh"
#include "../kernels/common/mla_layout.h"
#include "../kernels/moe_gemm.h"
#include "cu.h"
#include "kt.h"
#include "lt_gemv.h"
#include "model_ref.h"
#include "step_plan.h"
#include "tp.h"

#include <math.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// clang-format off
#define RT_KERNELS(X)                                                                                      \
    X(EMBED, rt_embed) X(HC_PRE, rt_hc_pre) X(GEMV_HC, rt_gemv_hc) X(GEMV_HC1, rt_gemv_hc1)                \
    X(HC_COMB, rt_hc_comb) X(RMSNORM, rt_rmsnorm_bf16)                                                      \
    X(Q_PREP, rt_q_prep) X(QKV_A, rt_qkv_a) X(COMP_EMIT, rt_comp_emit)                              \
    X(INDEX_SCORE, rt_index_score) X(TOPK, rt_topk) X(ATTENTION, rt_attention) X(UNGROUP, rt_ungroup)      \
    X(ROUTER, rt_router) X(MOE_UP, rt_moe_up) X(MOE_DOWN, rt_moe_down) X(MOE_COMBINE, rt_moe_combine)      \
    X(SWIGLU, rt_swiglu) X(ARGMAX, rt_argmax) X(GEMV, rt_gemv) X(GEMV_FIN, rt_gemv_fin)                  \
    X(FILL_F32, rt_fill_f32) X(FILL_E4M3, rt_fill_e4m3) X(FILL_I32, rt_fill_i32) X(LENGTHS, rt_lengths)       \
    X(INDEX_Q, rt_index_q) X(O_POST, rt_o_post) X(RMSNORM_F32, rt_rmsnorm_f32) X(RESIDUAL, rt_residual)       \
    X(V32_KV_APPEND, rt_v32_kv_append) X(V32_Q_ABSORB, rt_v32_q_absorb) X(V32_O_UP, rt_v32_o_up)              \
    X(V32_INDEX_K, rt_v32_index_k) X(V32_INDEX_Q, rt_v32_index_q) X(GEMV_FIN_BF16, rt_gemv_fin_bf16)         \
    X(GATE_COMB, rt_gate_comb) X(SCALE_COLS, rt_scale_cols) X(SEED_KV, rt_seed_kv)
// clang-format on
#define RT_ENUM(e, n) K_##e,
#define RT_NAME(e, n) #n,
enum { RT_KERNELS(RT_ENUM) N_RT };
static const char *const rt_names[N_RT] = {RT_KERNELS(RT_NAME)};

typedef unsigned long long dptr; /* CUdeviceptr */

typedef struct gemm_w {
    dptr codes, scales; /* e4m3 [n, k], f32 [n/128, k/128] */
    long n, k;
} gemm_w;

typedef struct comp_dev {
    dptr ape, norm; /* wkv and wg: rows of the layer's proj */
    dptr state;     /* the window's running softmax (rt_comp_fold): m, s, v planes, [B][overlap][width] each */
    long rate, width;
    int overlap;
} comp_dev;

typedef struct layer_dev {
    dptr hc_fn[2], hc_base[2], hc_scale[2], attn_norm, ffn_norm, q_norm, kv_norm, sink, gate, gate_bias, tid2eid,
        iwproj;  /* V4: the head weights inside proj; V3.2: its own */
    dptr gate_n; /* gate_beside: the gate's rows times ffn_norm (rt_gate_comb's projections' weights); else 0 */
    dptr proj; /* V4's compressed layers: the compressors' wkv, wg and the indexer's head weights, rows in that order */
    long proj_rows;
    gemm_w wq_a, wq_b, wkv, wo_a, wo_b, iwq_b, sh13,
        sh2;                 /* V4: wq_a holds wkv's rows, CSA wq_b the indexer's (V3.2: apart) */
    gemm_w wkvb, iwk;        /* V3.2: kv_b_proj (read by rt_v32_q_absorb / rt_v32_o_up), the indexer's wk */
    dptr ik_norm, ik_bias;   /* V3.2: the indexer's k_norm (LayerNorm) */
    dptr e13, e13s, e2, e2s; /* routed experts: [E][2I][D] (w1 | w3) and [E][D][I], FP8 or MXFP4 + scales */
    comp_dev comp, index;
    dptr win, ccache, ikeys, ikc, scores, idx;    /* ikeys f32 (rt_index_score), ikc paged e4m3 (mla_indexer) */
    unsigned long long wstride, cstride, kstride; /* per sequence: bytes, bytes, floats */
    long max_entries, cpages;                     /* compressed entries and their pages, per sequence */
} layer_dev;

/* A family kernel the step launches: (family, problem) resolved once per graph. */
typedef struct fam_k {
    const kt_family *f;
    kt_problem p;
    kt_module mod;
    kt_lookup_level level;
} fam_k;

/* Time of one op name in the profiled pass. */
typedef struct prof_row {
    const char *name;
    double ms;
    int calls;
} prof_row;

#define MAX_FAMS 96
/* side chains at once: a CSA layer's two compressors beside each other and the query (0, 1),
 * rt_hc_comb (2), a CSA layer's rt_q_prep beside its indexer (3), the MoE gate's projections of
 * the old streams (4) and of the attention block's output (5), a CSA layer's KV compressor after q_b
 * (6, csa_split) */
#define N_SIDES 7
#define MAX_EVENTS 8192

struct kt_step {
    kt_model_config c;
    int B;
    long ctx;
    kt_db *db;
    CUstream stream;
    CUstream side[N_SIDES], cur, back[N_SIDES]; /* streams for independent chains (side_begin), the one launched
                                                 * on, the one each side chain forked from */
    CUevent fork_ev[N_SIDES], join_ev[N_SIDES]; /* side_begin's and side_end's points */
    int sides;        /* side chains on (not with KT_STEP_ONE_STREAM=1, nor where a capture refused them) */
    int comb_pending; /* rt_hc_comb on side chain 2: joined before the next post step reads postcomb */
    int gate_inline;  /* KT_STEP_GATE_INLINE=1: gate_beside's step keeps the gate's GEMV of h (comparison) */
    int hc_spread; /* at B = 1 rt_gemv_hc1's module over all its blocks (rt_hc_spread; KT_STEP_HC_SPREAD=0: its last) */
    int gate_y_blocks; /* gate_y's blocks, about (KT_STEP_GATE_Y_BLOCKS; 128) */
    int csa_split;     /* at B = 1 a CSA layer's indexer projections in their own GEMV, the KV compressor's after q_b
                        * on side chain 6 (KT_STEP_CSA_SPLIT=0: one GEMV) */
    kt_lt_gemv
        *lt; /* at B >= KT_STEP_GEMV_LT_MIN_B (16) gemv's cuBLASLt TF32 matmuls; NULL: rt_gemv (KT_STEP_GEMV_LT=0) */
    int capturing; /* enqueue under stream capture (build_graph): no cuBLASLt set-up allowed */
    kt_module rt[N_RT];
    layer_dev *L;
    kt_model_tensor *list;
    int n_list;
    const kt_st_set *w;
    uint64_t seed;
    dptr embed, hh_fn, hh_base, hh_scale, norm, head, inv_main, inv_comp;
    dptr tok, pos, x, postcomb, hcmix, h, hq, hs, qa, qrq, qrs, q, qf, kvraw, iq, og, oa_g, oa, y_attn, eidx, ew, a_e,
        aq_e, as_e, y_e, gu, a_sh, y_sh, moe_out, yfin, logits, next, ik;
    dptr pcbuf[2]; /* postcomb's two buffers: a module writes the one its post step does not read */
    /* gate_beside: the projections of the old streams (go) and of the block output (gy), each with its
     * splits and tile counters; the post | comb the MoE module's post step read (gpc), its pre and r */
    dptr gopart, gocount, go, gypart, gycount, gy, gpc, gprn;
    dptr hcbar, hcss; /* hc_spread: rt_hc_spread's grid barrier (2 words) and partial sums (64 floats) */
    dptr gvpart, gvcount, cemit[2], ccount[2]; /* rt_gemv's split sums (gv_bytes) and tile counters (gv_tiles);
                                                * rt_comp_emit's entry [B][width] and counters [B], of the
                                                * KV compressor and the indexer's (beside each other) */
    size_t gv_tiles;
    dptr cpart; /* csa_split: the KV compressor's projections' splits (cpart_bytes) */
    size_t cpart_bytes;
    dptr xq, xs; /* qgemm's act_quant codes and scales above QGEMM_FUSED_MAX_M rows (xq_bytes codes) */
    size_t xq_bytes;
    dptr xbuf[2];          /* V4: the HC streams before and after a post step (x is one of them) */
    dptr post_yb, post_yf; /* the block output whose HC post step the next HC module's GEMV applies */
    int post_pending;
    size_t gv_bytes;
    /* the families' buffers: list lengths [3][B] (rt_lengths), mla_decode's lists, q, out and
     * partials; mla_indexer's q, weights, block table, logits and histograms; moe_route's gate logits and
     * alignment records, moe_gemm's intermediate, partials, counters and bf16 output */
    dptr lens, wlist, hlist, csa_len, sl_idx, sl_len, qb, ob, lse, apart, atick, itable, iqq, iw, ilogits, ihist, elog,
        ealign, he, hse, mpart, mcnt, moe_outb, no_shared;
    kt_step_plan plan;
    fam_k fams[2][MAX_FAMS];
    int n_fams[2], set, collecting;
    double dispatch_ms, prewarm_ms, rt_ms; /* start-up's kernel part: dispatches, parallel compiles, model.cu */
    int prewarmed;
    CUgraphExec graph[2];
    int n_graphs, graph_kernels[2]; /* kernel nodes of each graph: the step's launches */
    int profiling, n_events;
    CUevent ev[MAX_EVENTS];
    const char *ev_name[MAX_EVENTS];
    kt_tp *tp; /* NULL: no all-reduces */
    double weight_bytes, expert_bytes, resolve_ms;
    float *host_logits;
    dptr route_log;        /* the profiled step's expert ids, every layer's eidx [n_layers][B][top_k] */
    kt_moe_occupancy *occ; /* what each layer's tokens picked in the profiled step (8-slot tiles; NULL before it) */
};

/* The step's integer setting `name` from the environment: def when unset, clamped to [lo, hi]. */
static long env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    char *end;
    long x = v && *v ? strtol(v, &end, 10) : def;
    if (v && *v && *end) x = def;
    return x < lo ? lo : x > hi ? hi : x;
}

/* ------------------------------------------------------------ device memory */

/* *p = bytes of zeroed device memory. The zeroing runs on the legacy stream, which the step's
 * non-blocking streams do not wait for, so it is finished here: otherwise it could land on top of
 * a seeded fill launched right after (runs then differed from one another). */
static int dalloc(dptr *p, size_t bytes) {
    CUdeviceptr d;
    KT_CHECK(CU, kt_cu.cuMemAlloc(&d, bytes ? bytes : 16));
    KT_CHECK(CU, kt_cu.cuMemsetD8(d, 0, bytes ? bytes : 16));
    KT_CHECK(CU, kt_cu.cuCtxSynchronize());
    *p = d;
    return 0;
}

static int upload(dptr *p, const void *host, size_t bytes) {
    if (dalloc(p, bytes)) return -1;
    KT_CHECK(CU, kt_cu.cuMemcpyHtoD(*p, host, bytes));
    return 0;
}

/* Launches plain kernel k (a profiled op when profiling). */
static int prof_mark(kt_step *s, const char *name) {
    if (!s->profiling) return 0;
    if (s->n_events == MAX_EVENTS) return kt_fail("too many ops to profile");
    s->ev_name[s->n_events] = name;
    KT_CHECK(CU, kt_cu.cuEventRecord(s->ev[s->n_events++], s->stream));
    return 0;
}

/* Launches plain kernel k on grid (gx, gy, gz), named `name` in the profile and NVTX. */
static int rt_as(kt_step *s, int k, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                 unsigned smem, void **args) {
    if (s->collecting) return 0;
    if (prof_mark(s, name)) return -1;
    nvtxRangePushA(name);
    int rc = kt_launch_kernel_pdl(&s->rt[k], 0, gx, gy, gz, block, smem, s->cur, args); /* model.cu: rt_begin */
    nvtxRangePop();
    return rc;
}

static int rt(kt_step *s, int k, unsigned gx, unsigned gy, unsigned block, unsigned smem, void **args) {
    return rt_as(s, k, rt_names[k], gx, gy, 1, block, smem, args);
}

/* rt_gemv's splits of K (128-value chunks) for B x N outputs: enough blocks (`want`) to fill the
 * GPU, at most 32 (a consumer's warp sums them in one pass). */
static int gemv_splits_for(long B, long N, long K, long want) {
    long blocks = (B + 7) / 8 * ((N + 31) / 32), S = (want + blocks - 1) / blocks, kb = K / 128;
    S = S < kb ? S : kb, S = S < 32 ? S : 32;
    long per = (kb + S - 1) / S;
    return (int)((kb + per - 1) / per);
}
static int gemv_splits(long B, long N, long K) { return gemv_splits_for(B, N, K, 256); }

/* At B = 1 with the family MoE (V4), the MoE gate's logits without a GEMV after its HC module:
 * rt_gate_comb from projections made beside the chain (gate_old, gate_y), model.cu's algebra. */
static int gate_beside(const kt_step *s) {
    return s->B == 1 && s->c.arch == KT_ARCH_V4 && s->plan.family[KT_PART_MOE] && !s->gate_inline;
}

/* At B = 1 (V4) a CSA layer's projections of h in two GEMVs (csa_index_gemv, csa_kv_gemv), the KV
 * compressor's on side chain 6 after q_b (csa_kv_side); 0: one GEMV (comp_gemv). */
static int csa_split(const kt_step *s) { return s->B == 1 && s->c.arch == KT_ARCH_V4 ? s->csa_split : 0; }

/* The N x K f32 GEMV of every sequence's x (B x K) by rt_gemv (profiled as `name`) in `splits` splits of K:
 * with out, the plain result [B][N] there (split, its last blocks sum the splits: s->gvcount); else the
 * splits in `part` (`bytes` of scratch) for a consumer that sums them (rt_gemv_at; its rows N apart). */
static int gemv_in(kt_step *s, const char *name, dptr W, long N, long K, dptr x, dptr out, dptr part, size_t bytes,
                   int splits) {
    int B = s->B, n = (int)N, k = (int)K;
    int kc = (int)((K / 128 + splits - 1) / splits * 128);
    unsigned tx = (unsigned)(B + 7) / 8, ty = (unsigned)(N + 31) / 32;
    dptr fin = out && splits > 1 ? out : 0;
    if (out && splits == 1) part = out;
    if (K % 128 || (part != out && (size_t)splits * B * N * 4 > bytes) || (fin && (size_t)tx * ty > s->gv_tiles))
        return kt_fail("internal: rt_gemv %s: K %ld is not in 128s or its %d splits outgrow the scratch", name, K,
                       splits);
    void *a[] = {&W, &x, &part, &n, &k, &B, &kc}, *af[] = {&W, &x, &part, &fin, &s->gvcount, &n, &k, &B, &kc};
    return rt_as(s, fin ? K_GEMV_FIN : K_GEMV, name, tx, ty, (unsigned)splits, 256, 0, fin ? af : a);
}

/* gemv_in in gemv_splits' splits, the shared scratch s->gvpart (*S: the splits). */
static int gemv_rt(kt_step *s, const char *name, dptr W, long N, long K, dptr x, dptr out, int *S) {
    int splits = gemv_splits(s->B, N, K);
    if (S) *S = splits;
    return gemv_in(s, name, W, N, K, x, out, s->gvpart, s->gv_bytes, splits);
}

/* The same GEMV as one cuBLASLt matmul on the TF32 tensor cores (lt_gemv.h), with its plain result in out, or
 * (out 0) in s->gvpart as one split for its consumer (*S = 1 in gemv), named `name` in the profile and NVTX as rt_as
 * names its launches. The collecting walk sets each shape up (the heuristic), the eager step each stream's workspace,
 * so a capture only launches. Precision: x (and f32 weights; a checkpoint's bf16 ones TF32 holds exactly) rounded to
 * TF32's 10 mantissa bits, the products summed in f32: ~3e-4 relative an output (rms; ~1e-3 if a kernel truncates),
 * against the e4m3 rounding of every FP8 GEMM's input (~2e-2). PDL: cuBLASLt launches without the programmatic
 * attribute, so the matmul starts once the kernel before it has completed (that kernel's early trigger in rt_begin
 * starts only attributed launches; captured, an ordinary edge), and the kernel after it, attributed, waits in
 * rt_begin (griddepcontrol.wait) until the matmul has completed and flushed, whether cuBLASLt's kernel triggers early
 * or (implicitly) at its end: the chain's order holds on both sides of it. */
static int gemv_lt(kt_step *s, const char *name, dptr W, long N, long K, dptr x, dptr out) {
    kt_lt_mode mode = s->collecting ? KT_LT_PLAN : s->capturing ? KT_LT_CAPTURE : KT_LT_EAGER;
    if (!out && (size_t)s->B * (size_t)N * 4 > s->gv_bytes)
        return kt_fail("internal: the cuBLASLt GEMV %s: %d x %ld outgrows rt_gemv's scratch", name, s->B, N);
    if (mode == KT_LT_PLAN) return kt_lt_gemv_run(s->lt, W, x, out, N, K, s->B, s->cur, mode);
    if (prof_mark(s, name)) return -1;
    nvtxRangePushA(name);
    int rc = kt_lt_gemv_run(s->lt, W, x, out ? out : s->gvpart, N, K, s->B, s->cur, mode);
    nvtxRangePop();
    return rc;
}

/* The f32 GEMV of every sequence's x (B x K) by W (N x K): with the lever (s->lt) gemv_lt where its N and K are
 * multiples of 4 (*S = 1: the result is one split), else gemv_rt (rt_gemv, *S its splits). */
static int gemv(kt_step *s, const char *name, dptr W, long N, long K, dptr x, dptr out, int *S) {
    if (!s->lt || N % 4 || K % 4) return gemv_rt(s, name, W, N, K, x, out, S);
    if (S) *S = 1;
    return gemv_lt(s, name, W, N, K, x, out);
}

/* rt_gemv_fin (or, bf16, rt_gemv_fin_bf16) of `seqs` sequences of x into out [seqs][N] in about
 * `blocks` blocks, with its own splits and tile counters (it runs on a side chain beside the step's GEMVs). */
static int gemv_own(kt_step *s, const char *name, int bf16, dptr W, long N, long K, dptr x, int seqs, long blocks,
                    dptr out, dptr part, dptr count) {
    int n = (int)N, k = (int)K, splits = gemv_splits_for(seqs, N, K, blocks);
    int kc = (int)((K / 128 + splits - 1) / splits * 128);
    if (K % 128 || seqs > 8 || splits > 32 || N > 32 * 32)
        return kt_fail("internal: rt_gemv %s: %d x %ld x %ld outgrows its scratch", name, seqs, N, K);
    void *a[] = {&W, &x, &part, &out, &count, &n, &k, &seqs, &kc};
    return rt_as(s, bf16 ? K_GEMV_FIN_BF16 : K_GEMV_FIN, name, 1, (unsigned)(N + 31) / 32, (unsigned)splits, 256, 0, a);
}

static int same_problem(const kt_problem *a, const kt_problem *b) {
    return a->n_dims == b->n_dims && a->m == b->m && !memcmp(a->dim, b->dim, sizeof a->dim);
}

/* The current set's kernel for (family, problem p), dispatched (and logged) the first time;
 * while collecting (the start-up's walk of the step) only listed, for compiling ahead. */
static fam_k *fam_p(kt_step *s, const char *family, const kt_problem *p) {
    fam_k *set = s->fams[s->set];
    for (int i = 0; i < s->n_fams[s->set]; i++)
        if (!strcmp(set[i].f->name, family) && same_problem(&set[i].p, p)) return &set[i];
    if (s->n_fams[s->set] == MAX_FAMS) return kt_fail("too many distinct kernels"), NULL;
    fam_k *k = &set[s->n_fams[s->set]];
    memset(k, 0, sizeof *k);
    if (!(k->f = kt_family_find(family))) return NULL;
    k->p = *p;
    double t0 = kt_now();
    int rc = s->collecting ? kt_dispatch_config(s->set == 0 ? s->db : NULL, k->f, &k->p, &k->mod.config, &k->level)
                           : kt_dispatch(s->set == 0 ? s->db : NULL, k->f, &k->p, &k->mod, &k->level);
    s->dispatch_ms += (kt_now() - t0) * 1e3;
    if (rc) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", kt_error());
        kt_fail("%s has no valid variant for this model's shape: %s", family, msg);
        return NULL;
    }
    s->n_fams[s->set]++;
    return k;
}

/* fam_p for the GEMM-like families keyed by (d0, d1) and batch m. */
static fam_k *fam(kt_step *s, const char *family, long d0, long d1, long m) {
    const kt_family *f = kt_family_find(family);
    if (!f) return NULL;
    kt_problem p = {.n_dims = f->n_keys, .dim = {d0, d1}, .m = m};
    return fam_p(s, family, &p);
}

/* Launches a family kernel on ptr[] (the family's tensor order), named kt/<family>/<key>/<config>. */
static int fam_launch(kt_step *s, fam_k *k, const dptr *ptr, int n) {
    if (!k) return -1;
    if (s->collecting) return 0;
    char name[512], shape[128], cfg[256];
    kt_format_shape(k->f, &k->p, shape, sizeof shape);
    kt_format_config(k->f, &k->mod.config, cfg, sizeof cfg);
    snprintf(name, sizeof name, "kt/%s/%s,M=%ld/%s", k->f->name, shape, k->p.m, cfg);
    if (prof_mark(s, k->f->name)) return -1;
    nvtxRangePushA(name);
    kt_launch l = {.mod = &k->mod, .config = &k->mod.config, .problem = &k->p, .stream = s->cur};
    for (int i = 0; i < n; i++) l.ptr[i] = ptr[i];
    int rc = k->f->launch(&l);
    nvtxRangePop();
    return rc;
}

/* act_quant: x bf16 [M, K] -> q e4m3, sc f32 [M, K/128]. */
static int quant(kt_step *s, dptr x, dptr q, dptr sc, long M, long K) {
    dptr p[3] = {x, q, sc};
    return fam_launch(s, fam(s, "act_quant", K, 0, M), p, 3);
}

/* Rows row0.. of w: their codes and scales. */
static dptr rows_codes(const gemm_w *w, long row0) { return w->codes + (dptr)(row0 * w->k); }
static dptr rows_scales(const gemm_w *w, long row0) { return w->scales + (dptr)((row0 / 128) * (w->k / 128) * 4); }

/* fp8_gemm: C bf16 [M, n] = A (codes, scales) x rows row0.. row0+n of w. */
static int gemm(kt_step *s, const gemm_w *w, long row0, long n, dptr A, dptr As, dptr C, long M) {
    dptr p[5] = {A, As, rows_codes(w, row0), rows_scales(w, row0), C};
    return fam_launch(s, fam(s, "fp8_gemm", n, w->k, M), p, 5);
}

/* The largest batch whose projections run quant_fp8_gemm: `kt bench`'s fused_us against
 * quant+kt_us (the act_quant + fp8_gemm pair, both tuned) on the H200 targets, the twelfth
 * session: the fused kernel faster at M = 1 for 4 of 5 shapes and at M = 16 for 3 of 5, the
 * pair from M = 64 on (the fused kernel's CTAs each quantise the whole activation tile). */
#define QGEMM_FUSED_MAX_M 16

/* The same GEMM of bf16 X [M, K] (an activation that feeds this GEMM only), act_quant'ed inside
 * by quant_fp8_gemm (one launch where act_quant + fp8_gemm were two) up to QGEMM_FUSED_MAX_M
 * rows, by act_quant into s->xq / s->xs and fp8_gemm above. */
static int qgemm(kt_step *s, const gemm_w *w, long row0, long n, dptr X, dptr C, long M) {
    if (M > QGEMM_FUSED_MAX_M) {
        if ((size_t)(M * w->k) > s->xq_bytes)
            return kt_fail("internal: act_quant of %ld x %ld outgrows its scratch", M, w->k);
        return quant(s, X, s->xq, s->xs, M, w->k) || gemm(s, w, row0, n, s->xq, s->xs, C, M) ? -1 : 0;
    }
    dptr p[4] = {X, rows_codes(w, row0), rows_scales(w, row0), C};
    return fam_launch(s, fam(s, "quant_fp8_gemm", n, w->k, M), p, 4);
}

/* ------------------------------------------------------------------ the step */

/* The tensor-parallel all-reduce of B x hidden values at buf (bf16 or f32), when a world is open. */
static int all_reduce(kt_step *s, dptr buf, int bf16) {
    if (!s->tp || s->collecting) return 0;
    if (prof_mark(s, "nccl_all_reduce")) return -1;
    return kt_tp_all_reduce(s->tp, buf, (size_t)s->B * s->c.hidden, bf16, s->stream);
}

/* A chain of the step that depends on what is enqueued so far and that nothing enqueues until
 * side_join needs: from side_begin to side_end it goes on side stream i, the launches after
 * side_end on the stream it forked from run beside it (at B = 1 a kernel fills few SMs: two chains
 * of them overlap their latencies), side_join makes the main stream wait for it. Side chain 1 may
 * fork from side chain 0 (a CSA layer's indexer compressor beside its KV compressor, both after
 * their projections' GEMV). The graph captures the forks and the joins. One step at a time; a
 * profiled step (an event between ops) and the walk of collect_ahead keep to one stream. */
static int side_begin(kt_step *s, int i) {
    if (!s->sides || s->profiling || s->collecting) return 0;
    KT_CHECK(CU, kt_cu.cuEventRecord(s->fork_ev[i], s->cur));
    KT_CHECK(CU, kt_cu.cuStreamWaitEvent(s->side[i], s->fork_ev[i], 0));
    s->back[i] = s->cur, s->cur = s->side[i];
    return 0;
}
static int side_end(kt_step *s, int i) {
    if (s->cur != s->side[i]) return 0;
    KT_CHECK(CU, kt_cu.cuEventRecord(s->join_ev[i], s->side[i]));
    s->cur = s->back[i];
    return 0;
}
static int side_join(kt_step *s, int i) {
    if (!s->sides || s->profiling || s->collecting) return 0;
    KT_CHECK(CU, kt_cu.cuStreamWaitEvent(s->stream, s->join_ev[i], 0));
    return 0;
}
/* The main stream waits for side chain i's fork point only (what its parent chain had done when
 * side_begin(i) forked it): a CSA layer's projections' GEMV, which side chain 1 forks after. */
static int side_join_fork(kt_step *s, int i) {
    if (!s->sides || s->profiling || s->collecting) return 0;
    KT_CHECK(CU, kt_cu.cuStreamWaitEvent(s->stream, s->fork_ev[i], 0));
    return 0;
}

/* Rows of the splits rt_gemv left in s->gvpart for a consumer: from `part`, S splits, rows ld apart. */
typedef struct gv_part {
    dptr part;
    int S, ld;
} gv_part;

/* A compressed layer's projections of h in one rt_gemv over L->proj (load_layer: its compressor's
 * wkv and wg, then, CSA, the indexer's compressor's and its head weights), into comp, index, iw. */
static int comp_gemv(kt_step *s, const layer_dev *L, int csa, gv_part *comp, gv_part *index, gv_part *iw) {
    long oc = L->comp.overlap * L->comp.width, oi = L->index.overlap * L->index.width, ld = L->proj_rows;
    int S;
    if (gemv(s, csa ? "rt_gemv/comp+index" : "rt_gemv/comp", L->proj, ld, s->c.hidden, s->h, 0, &S)) return -1;
    *comp = (gv_part){s->gvpart, S, (int)ld};
    *index = (gv_part){s->gvpart + (dptr)(2 * oc * 4), S, (int)ld};
    *iw = (gv_part){s->gvpart + (dptr)((2 * oc + 2 * oi) * 4), S, (int)ld};
    return 0;
}

/* csa_split: a CSA layer's projections of h in two rt_gemv in comp_gemv's splits, so each value is comp_gemv's
 * (the same k-ranges, and the indexer's rows start on a 32-row tile: the same lanes' sums): the indexer's
 * rows (its compressor's and head weights) into gvpart (csa_index_gemv), the KV compressor's into cpart
 * (csa_kv_gemv), each beside the query on its own side chain. */
static int csa_index_gemv(kt_step *s, const layer_dev *L, gv_part *index, gv_part *iw) {
    long oc = L->comp.overlap * L->comp.width, oi = L->index.overlap * L->index.width, D = s->c.hidden;
    long n = L->proj_rows - 2 * oc;
    int S = gemv_splits(s->B, L->proj_rows, D);
    if (gemv_in(s, "rt_gemv/index", L->proj + (dptr)(2 * oc * D * 4), n, D, s->h, 0, s->gvpart, s->gv_bytes, S))
        return -1;
    *index = (gv_part){s->gvpart, S, (int)n};
    *iw = (gv_part){s->gvpart + (dptr)(2 * oi * 4), S, (int)n};
    return 0;
}
static int csa_kv_gemv(kt_step *s, const layer_dev *L, gv_part *comp) {
    long oc = L->comp.overlap * L->comp.width, D = s->c.hidden;
    int S = gemv_splits(s->B, L->proj_rows, D);
    if (gemv_in(s, "rt_gemv/comp_kv", L->proj, 2 * oc, D, s->h, 0, s->cpart, s->cpart_bytes, S)) return -1;
    *comp = (gv_part){s->cpart, S, (int)(2 * oc)};
    return 0;
}

/* A compressor's step from its projections `in` into one of kvcache (V4 layout), keys (f32) or ikc (mla_indexer's
 * pages); `which` picks its scratch (0 the KV compressor, 1 the indexer's: they may run side by side). */
static int compressor(kt_step *s, const comp_dev *cd, const gv_part *in, dptr kvcache, dptr keys, dptr ikc,
                      unsigned long long stride, int which) {
    const kt_model_config *c = &s->c;
    int rate = (int)cd->rate, width = (int)cd->width, overlap = cd->overlap, R = (int)c->rope_dim;
    float eps = (float)c->rms_eps;
    void *a[] = {(void *)&in->part,
                 (void *)&in->S,
                 (void *)&in->ld,
                 (void *)&cd->ape,
                 (void *)&cd->state,
                 &s->cemit[which],
                 &s->ccount[which],
                 (void *)&cd->norm,
                 &s->inv_comp,
                 &s->pos,
                 &kvcache,
                 &keys,
                 &ikc,
                 &stride,
                 &width,
                 &overlap,
                 &rate,
                 &R,
                 &eps};
    return rt(s, K_COMP_EMIT, (unsigned)(width + 31) / 32, (unsigned)s->B, 256, 0, a);
}

/* The arguments of rt_hc_pre after x, the mixes' splits and their count (and of rt_gemv_hc's
 * fused module after the counter), in that order. */
typedef struct hc_args {
    dptr base, scale, norm, postcomb, h, hq, hs, gn; /* gn: the MoE gate's Wn for gate_y (B = 1), else 0 */
    int D, H, iters;
    float eps, hc_eps;
} hc_args;

/* model.cu's HC module: a block of RT_HC_THREADS (rt_hc_pre) or, fused into rt_gemv_hc1's last
 * block, RT_GV_THREADS, holding the H x D streams (at most RT_HC_HD) and the D norm weights (at
 * most RT_HC_D) in registers (model.cu's defines). */
#define RT_HC_THREADS 512
#define RT_GV_THREADS 256
#define RT_HC_HD 16384
#define RT_HC_D 4096
#define RT_QKV_NW 8
#define RT_ARGMAX_THREADS 1024 /* rt_argmax's block */

/* With side chains, a module's post and comb (Sinkhorn, rt_hc_comb) on side chain 2 from the
 * mixes its block (rt_gemv_hc1's last or rt_hc_pre) left in hcmix, beside the block that follows
 * (joined by hc_gemv_post, before the next post step reads them); 0 for the HC head. */
static dptr hc_mixout(const kt_step *s, const hc_args *m) { return m->postcomb && s->sides ? s->hcmix : 0; }
static int hc_comb(kt_step *s, const hc_args *m) {
    void *a[] = {&s->hcmix,     (void *)&m->base,  (void *)&m->scale, (void *)&m->postcomb,
                 (void *)&m->H, (void *)&m->iters, (void *)&m->hc_eps};
    s->comb_pending = 1;
    return side_begin(s, 2) || rt(s, K_HC_COMB, (unsigned)s->B, 1, 32, 0, a) || side_end(s, 2) ? -1 : 0;
}

/* gate_beside's projections of the MoE module's old streams, go[j] = Wn . x_j (the H streams the
 * attention module just made, as H sequences), on side chain 4 from there: nothing on the chain
 * waits for them until rt_gate_comb, a whole attention block later, so in 64 blocks (longer ones)
 * where the chain's GEMMs beside them would share 256's SMs. */
static int gate_old(kt_step *s, const layer_dev *L) {
    int D = (int)s->c.hidden, H = (int)s->c.hc_mult;
    return side_begin(s, 4) ||
                   gemv_own(s, "rt_gemv/gate_old", 0, L->gate_n, s->c.n_experts, D, s->x, H, 64, s->go, s->gopart,
                            s->gocount) ||
                   side_end(s, 4)
               ? -1
               : 0;
}

/* ... and of the attention block's output, gy = Wn . y (bf16), on side chain 5 beside the MoE module
 * (about s->gate_y_blocks blocks: it must end within that module's rt_gemv_hc1, whose 32 it shares the SMs with). */
static int gate_y(kt_step *s, const hc_args *m) {
    return side_begin(s, 5) ||
                   gemv_own(s, "rt_gemv/gate_y", 1, m->gn, s->c.n_experts, m->D, s->post_yb, 1, s->gate_y_blocks, s->gy,
                            s->gypart, s->gycount) ||
                   side_end(s, 5)
               ? -1
               : 0;
}

/* The HC mixes of the streams after a pending post step (hc_post) by rt_gemv_hc, which applies
 * it on the way into the other x buffer (then x): the mixes' splits in gvpart (*S); at B = 1
 * rt_gemv_hc1, whose last block also runs the HC module (rt_hc_pre's work): *fused 1. */
static int hc_gemv_post(kt_step *s, dptr fn, long nmix, const hc_args *m, int *S, int *fused) {
    int B = s->B, D = m->D, H = m->H, n = (int)nmix, K = H * D, one = B == 1;
    dptr mixout = hc_mixout(s, m);
    if (s->comb_pending && side_join(s, 2)) return -1;
    s->comb_pending = 0;
    int splits = gemv_splits(B, nmix, K), kc = (int)((K / 128 + splits - 1) / splits * 128);
    if (nmix > 32 || K % 128 || (size_t)splits * B * nmix * 4 > s->gv_bytes)
        return kt_fail("internal: rt_gemv_hc: %ld mixes of %d (at most 32 rows, K in 128s, %d splits in the scratch)",
                       nmix, K, splits);
    dptr old = s->x, x = s->x == s->xbuf[0] ? s->xbuf[1] : s->xbuf[0], prn = one && m->gn ? s->gprn : 0;
    if (prn && !s->post_yb) return kt_fail("internal: the MoE gate's block output is not bf16");
    if (prn && gate_y(s, m)) return -1;
    s->gpc = s->postcomb;
    /* the module over the blocks: each block's 128 columns, every column in one (D <= 128 splits) */
    dptr bar = one && s->hc_spread && D % 128 == 0 && D / 128 <= splits && splits <= 32 ? s->hcbar : 0;
    /* rt_gemv_hc takes the first 13 (the driver reads as many as the kernel has) */
    void *a[] = {&fn,
                 &old,
                 &x,
                 (void *)&s->postcomb,
                 &s->post_yb,
                 &s->post_yf,
                 &s->gvpart,
                 &n,
                 &K,
                 &B,
                 &kc,
                 &D,
                 &H,
                 &s->gvcount,
                 (void *)&m->base,
                 (void *)&m->scale,
                 (void *)&m->norm,
                 (void *)&m->postcomb,
                 (void *)&m->h,
                 (void *)&m->hq,
                 (void *)&m->hs,
                 (void *)&m->iters,
                 (void *)&m->eps,
                 (void *)&m->hc_eps,
                 &mixout,
                 &prn,
                 &bar,
                 &s->hcss};
    s->x = x, s->post_pending = 0, *S = splits, *fused = one;
    if (rt_as(s, one ? K_GEMV_HC1 : K_GEMV_HC, "rt_gemv_hc", (unsigned)(B + 7) / 8, 1, (unsigned)splits, RT_GV_THREADS,
              one ? (unsigned)(D * 4) : 0, a))
        return -1;
    return one && mixout ? hc_comb(s, m) : 0; /* B > 1: rt_hc_pre's (hc_mix) */
}

/* The HC module before block `which` (0 attention, 1 MoE), into h and its act_quant codes hq /
 * hs (rt_hc_pre quantises: no act_quant launch); or, the HC head (postcomb and hq 0), into h
 * only. After a block (its post step pending) at B = 1, one launch: rt_gemv_hc does it all. */
static int hc_mix(kt_step *s, dptr fn, dptr base, dptr scale, dptr norm, dptr postcomb, dptr h, dptr hq, dptr hs,
                  dptr gn) {
    const kt_model_config *c = &s->c;
    hc_args m = {base,
                 scale,
                 norm,
                 postcomb,
                 h,
                 hq,
                 hs,
                 gn,
                 (int)c->hidden,
                 (int)c->hc_mult,
                 (int)c->hc_iters,
                 (float)c->rms_eps,
                 (float)c->hc_eps};
    long nmix = postcomb ? (2 + m.H) * m.H : m.H;
    int S, fused = 0;
    /* the first module's mixes (the others' are rt_gemv_hc's) stay on rt_gemv with the lever: one call a step, 24
     * rows (a tensor-core tile mostly empty), and rt_hc_pre's Sinkhorn exponentiates them */
    if (s->post_pending ? hc_gemv_post(s, fn, nmix, &m, &S, &fused)
                        : gemv_rt(s, "rt_gemv/hc", fn, nmix, (long)m.H * m.D, s->x, 0, &S))
        return -1;
    dptr mixout = hc_mixout(s, &m);
    void *a[] = {&s->x, &s->gvpart, &S,   &m.base, &m.scale, &m.norm, &m.postcomb, &m.h,
                 &m.hq, &m.hs,      &m.D, &m.H,    &m.iters, &m.eps,  &m.hc_eps,   &mixout};
    if (fused) return 0;
    if (rt(s, K_HC_PRE, (unsigned)s->B, 1, RT_HC_THREADS, (unsigned)(m.D * 4), a)) return -1;
    return mixout ? hc_comb(s, &m) : 0;
}

/* A module writes post | comb into the postcomb buffer its post step does not read (then the next
 * one's): rt_gate_comb reads the post step's (gpc) beside the module's rt_hc_comb, which writes. */
static int hc_pre(kt_step *s, layer_dev *L, int which, dptr norm) {
    dptr out = s->postcomb == s->pcbuf[0] ? s->pcbuf[1] : s->pcbuf[0], gn = which && gate_beside(s) ? L->gate_n : 0;
    if (hc_mix(s, L->hc_fn[which], L->hc_base[which], L->hc_scale[which], norm, out, s->h, s->hq, s->hs, gn)) return -1;
    s->postcomb = out;
    return 0;
}

/* The HC module after a block (y bf16 yb or f32 yf): x[k] = post[k] y + sum_j comb[j][k] x[j],
 * left to the next HC module's GEMV (hc_gemv: one launch fewer a block). */
static int hc_post(kt_step *s, dptr yb, dptr yf) {
    if (s->post_pending) return kt_fail("internal: two HC post steps without an HC module between them");
    s->post_yb = yb, s->post_yf = yf, s->post_pending = 1;
    return 0;
}

/* The CSA layer's indexer's compressor: the new key (on the compressed layer's side chain) into
 * mla_indexer's pages or rt_index_score's f32 keys. */
static int indexer_keys(kt_step *s, layer_dev *L, const gv_part *index) {
    return s->plan.family[KT_PART_INDEXER]
               ? compressor(s, &L->index, index, 0, 0, L->ikc, (unsigned long long)L->cpages, 1)
               : compressor(s, &L->index, index, 0, L->ikeys, 0, L->kstride, 1);
}

/* The CSA layer's indexer: the top-k entries into L->idx (cache-wide ids) by mla_indexer or by
 * rt_index_score + rt_topk, from the head weights' projections iw (side chain 0's GEMV) and the keys
 * (side chain 1); rt_index_q waits for the GEMV only, beside the keys' compressor. */
static int indexer(kt_step *s, layer_dev *L, const gv_part *iw) {
    const kt_model_config *c = &s->c;
    int IH = (int)c->index_heads, ID = (int)c->index_dim, R = (int)c->rope_dim;
    int rate = (int)c->csa_rate, topk = (int)c->index_topk, maxe = (int)L->max_entries,
        seq_ids = (int)kt_step_token_id(L->max_entries, 1, 0);
    void *wp[] = {(void *)&iw->part, (void *)&iw->S, (void *)&iw->ld}; /* the head weights' projections */
    /* the indexer's query: wq_b's GEMM's last IH x ID columns (the rows of q, ld apart) */
    int ld = (int)L->wq_b.n;
    dptr iq = s->q + (dptr)kt_model_q_dim(c) * 2;
    if (!s->plan.family[KT_PART_INDEXER]) {
        void *as[] = {&iq,        &ld,         wp[0], wp[1], wp[2], &L->ikeys, &s->inv_comp, &s->pos,
                      &L->scores, &L->kstride, &IH,   &ID,   &rate, &R,        &maxe};
        void *at[] = {&L->scores, &L->idx, &s->pos, &rate, &topk, &maxe, &seq_ids};
        return side_join(s, 1) || rt(s, K_INDEX_SCORE, (unsigned)s->B, 1, 256, (unsigned)(IH * ID * 4), as) ||
                       rt(s, K_TOPK, (unsigned)s->B, 1, 256, 0, at)
                   ? -1
                   : 0;
    }
    void *aq[] = {&iq, &ld, wp[0], wp[1], wp[2], &s->inv_comp, &s->pos, &s->iqq, &s->iw, &ID, &R};
    if (side_join_fork(s, 1) || rt(s, K_INDEX_Q, (unsigned)IH, (unsigned)s->B, 128, (unsigned)(ID * 4), aq) ||
        side_join(s, 1))
        return -1;
    dptr ptr[8] = {s->iqq, s->iw, L->ikc, s->lens + (dptr)(2 * s->B * 4), s->itable, s->ilogits, L->idx, s->ihist};
    return fam_launch(s, fam_p(s, "mla_indexer", &s->plan.indexer), ptr, 8);
}

/* Window + compressed attention into og (group order), by mla_decode (then rt_o_post) or rt_attention. */
static int attend(kt_step *s, layer_dev *L, int mode, dptr inv) {
    const kt_model_config *c = &s->c;
    int B = s->B, W = (int)c->window, R = (int)c->rope_dim, GI = (int)kt_model_group_in(c);
    int rate = (int)(mode == 2 ? c->hca_rate : c->csa_rate), topk = (int)c->index_topk, maxe = (int)L->max_entries;
    if (!s->plan.family[KT_PART_ATTENTION]) {
        void *aa[] = {&s->qf, &L->win, &L->wstride, &L->ccache, &L->cstride, &L->idx, &L->sink, &inv, &s->pos,
                      &s->og, &W,      &mode,       &rate,      &topk,       &R,      &GI,      &B};
        unsigned keys = (unsigned)(W + (maxe > topk ? maxe : topk));
        return rt(s, K_ATTENTION, (unsigned)c->n_heads, (unsigned)B, 256, keys * 4, aa);
    }
    /* mla_decode V4: the compressed list (sliding: empty; CSA: the indexer's, every slot
     * counted, -1 holes skipped; HCA: every entry, its length from rt_lengths), then the window;
     * mode is the plan's KT_PLAN_SLIDING / CSA / HCA index */
    dptr kv = mode ? L->ccache : L->win, idx = mode == 0 ? s->sl_idx : mode == 1 ? L->idx : s->hlist;
    dptr len = mode == 0 ? s->sl_len : mode == 1 ? s->csa_len : s->lens + (dptr)(B * 4);
    dptr ptr[12] = {s->qb, kv, idx, len, L->win, s->wlist, s->lens, L->sink, s->ob, s->lse, s->apart, s->atick};
    if (fam_launch(s, fam_p(s, "mla_decode", &s->plan.attn[mode]), ptr, 12)) return -1;
    void *ao[] = {&s->ob, &inv, &s->pos, &s->og, &R, &GI, &B};
    return rt(s, K_O_POST, (unsigned)c->n_heads, (unsigned)B, 128, 0, ao);
}

/* Group g of the grouped o_a: its rows of og (bf16 [G][B][GI]) through its rows of wo_a into oa_g. */
static int wo_a_group(kt_step *s, layer_dev *L, int g) {
    long B = s->B, GI = kt_model_group_in(&s->c), OL = s->c.o_lora;
    return qgemm(s, &L->wo_a, g * OL, OL, s->og + (dptr)(g * B * GI * 2), s->oa_g + (dptr)(g * B * OL * 2), B);
}

/* csa_split: a CSA layer's KV compressor (its projections' GEMV, then rt_comp_emit) on side chain 6,
 * forked after q_b: beside the indexer (rt_index_q, mla_indexer), joined before mla_decode. */
static int csa_kv_side(kt_step *s, layer_dev *L) {
    gv_part comp;
    return side_begin(s, 6) || csa_kv_gemv(s, L, &comp) ||
                   compressor(s, &L->comp, &comp, L->ccache, 0, 0, L->cstride, 0) || side_end(s, 6)
               ? -1
               : 0;
}

/* A compressed layer's compressors (their projections of h, one rt_gemv) on side chain 0, beside the
 * query's GEMMs: both start from hc_pre's h; a CSA layer's indexer's compressor on side chain 1, forked
 * after the projections' GEMV (its head weights' projections into *iw, for the indexer). csa_split: only
 * the indexer's projections' GEMV on side chain 0, the KV compressor left to csa_kv_side. */
static int compressors(kt_step *s, layer_dev *L, int mode, int split, gv_part *iw) {
    gv_part comp, index;
    if (!mode) return 0;
    if (side_begin(s, 0) ||
        (split ? csa_index_gemv(s, L, &index, iw) : comp_gemv(s, L, mode == 1, &comp, &index, iw)) ||
        (mode == 1 && (side_begin(s, 1) || indexer_keys(s, L, &index) || side_end(s, 1))) ||
        (!split && compressor(s, &L->comp, &comp, L->ccache, 0, 0, L->cstride, 0)))
        return -1;
    return side_end(s, 0);
}

static int attention(kt_step *s, long l) {
    const kt_model_config *c = &s->c;
    layer_dev *L = &s->L[l];
    int B = s->B, D = (int)c->hidden, HD = (int)c->head_dim, R = (int)c->rope_dim, QL = (int)c->q_lora;
    int W = (int)c->window, G = (int)c->o_groups, OL = (int)c->o_lora;
    int mode = c->attn[l] == KT_ATTN_CSA ? 1 : c->attn[l] == KT_ATTN_HCA ? 2 : 0;
    float eps = (float)c->rms_eps;
    dptr inv = mode ? s->inv_comp : s->inv_main, qf = s->plan.family[KT_PART_ATTENTION] ? 0 : s->qf;
    /* q_a and kv of h in one GEMM (wq_a holds wkv's rows after its own): rows [B][QL + HD]; then
     * q_a's norm (act_quant'ed for wq_b) and the KV's append in one launch */
    int ld = QL + HD;
    unsigned smem = (unsigned)(QL > KT_KV_DIM ? QL : KT_KV_DIM) * 4;
    void *an[] = {&s->qa, &ld,     &QL,     &L->q_norm,  &s->qrq, &s->qrs, &L->kv_norm,
                  &inv,   &s->pos, &L->win, &L->wstride, &W,      &R,      &eps};
    int qld = (int)L->wq_b.n; /* CSA: the indexer's query after the heads (wq_b holds its rows) */
    void *aq[] = {&s->q, &qld, &qf, &s->qb, &inv, &s->pos, &HD, &R, &eps};
    /* a compressed layer's compressors (their projections of h, one rt_gemv) on the side chain,
     * beside the query's GEMMs: both start from hc_pre's h */
    int split = mode == 1 ? csa_split(s) : 0;
    gv_part iwp;
    if (hc_pre(s, L, 0, L->attn_norm) || (gate_beside(s) && gate_old(s, L)) || compressors(s, L, mode, split, &iwp))
        return -1;
    /* a CSA layer's rt_q_prep (its output feeds mla_decode only) on side chain 3, beside the indexer,
     * which reads wq_b's output too (its own rows); the indexer joins the side chains it reads (its
     * keys' compressor, side chain 1), mla_decode the KV compressor's (0; with csa_split 6) and the prep */
    int qside = mode == 1;
    if (gemm(s, &L->wq_a, 0, ld, s->hq, s->hs, s->qa, B) || rt(s, K_QKV_A, (unsigned)B, 2, 256, smem, an) ||
        gemm(s, &L->wq_b, 0, L->wq_b.n, s->qrq, s->qrs, s->q, B))
        return -1;
    if (split && csa_kv_side(s, L)) return -1; /* the KV compressor beside the query prep and the indexer */
    if ((qside && side_begin(s, 3)) || rt(s, K_Q_PREP, (unsigned)c->n_heads, (unsigned)B, 128, 0, aq) ||
        (qside && side_end(s, 3)))
        return -1;
    if ((mode == 1 && (indexer(s, L, &iwp) || side_join(s, 3))) || (mode && side_join(s, 0)) ||
        (split && side_join(s, 6)) || attend(s, L, mode, inv))
        return -1;
    /* the grouped o_a; at B <= 16 the groups after the first on the side chain, beside it (each
     * quantises its rows inside quant_fp8_gemm; above, they would share qgemm's act_quant scratch) */
    int par = G > 1 && B <= QGEMM_FUSED_MAX_M;
    if (par && side_begin(s, 0)) return -1;
    for (int g = par; g < G; g++)
        if (wo_a_group(s, L, g)) return -1;
    if (par && (side_end(s, 0) || wo_a_group(s, L, 0) || side_join(s, 0))) return -1;
    /* the groups' outputs in token order: [G][B][OL] -> [B][G * OL], the same bytes at B = 1 */
    int total = G * B * OL;
    void *au[] = {&s->oa_g, &s->oa, &G, &B, &OL};
    if ((B > 1 && rt(s, K_UNGROUP, (unsigned)(total + 255) / 256, 1, 256, 0, au)) ||
        qgemm(s, &L->wo_b, 0, D, B > 1 ? s->oa : s->oa_g, s->y_attn, B))
        return -1;
    if (all_reduce(s, s->y_attn, 1)) return -1;
    return hc_post(s, s->y_attn, 0);
}

/* A SwiGLU MLP of hq/hs on the FP8 GEMMs (w13: gate rows then up rows; w2: down) into out
 * (bf16 [B, D]): the shared expert, V3.2's dense layers. */
static int swiglu_mlp(kt_step *s, const gemm_w *w13, const gemm_w *w2, dptr out) {
    int B = s->B, I = (int)w2->k;
    float limit = (float)s->c.swiglu_limit;
    void *as[] = {&s->gu, &s->a_sh, &I, &limit};
    return gemm(s, w13, 0, 2L * I, s->hq, s->hs, s->gu, B) ||
                   rt(s, K_SWIGLU, (unsigned)(I + 255) / 256, (unsigned)B, 256, 0, as) ||
                   qgemm(s, w2, 0, w2->n, s->a_sh, out, B)
               ? -1
               : 0;
}

/* The shared expert into y_sh (bf16 [B, D]); 0 without one (the caller passes no_shared). */
static int shared_expert(kt_step *s, layer_dev *L) {
    return s->c.n_shared ? swiglu_mlp(s, &L->sh13, &L->sh2, s->y_sh) : 0;
}

/* The plain MoE (FP8 experts): rt_router (tid2eid for hash-routed layers), the per-slot expert
 * kernels and rt_moe_combine, into moe_out (f32). */
static int moe_plain(kt_step *s, layer_dev *L, int hash) {
    const kt_model_config *c = &s->c;
    int B = s->B, D = (int)c->hidden, E = (int)c->n_experts, K = (int)c->top_k, I = (int)c->moe_inter;
    float scale = (float)c->routed_scale, limit = (float)c->swiglu_limit;
    dptr bias = hash ? 0 : L->gate_bias, t2e = hash ? L->tid2eid : 0, shared = c->n_shared ? s->y_sh : 0;
    int S = 0;
    void *ar[] = {&s->gvpart, &S, &bias, &t2e, &s->tok, &s->eidx, &s->ew, &E, &K, &scale};
    void *au[] = {&L->e13, &L->e13s, &s->hq, &s->hs, &s->eidx, &s->a_e, &I, &D, &K, &limit};
    void *ad[] = {&L->e2, &L->e2s, &s->aq_e, &s->as_e, &s->eidx, &s->y_e, &I, &D};
    void *ac[] = {&s->y_e, &s->ew, &shared, &s->moe_out, &K, &D};
    return gemv(s, "rt_gemv/router", L->gate, E, D, s->h, 0, &S) ||
                   rt(s, K_ROUTER, (unsigned)B, 1, 256, (unsigned)(E * 4), ar) ||
                   rt(s, K_MOE_UP, (unsigned)(I + 7) / 8, (unsigned)(B * K), 256, 0, au) ||
                   quant(s, s->a_e, s->aq_e, s->as_e, (long)B * K, I) ||
                   rt(s, K_MOE_DOWN, (unsigned)(D + 7) / 8, (unsigned)(B * K), 256, 0, ad) || shared_expert(s, L) ||
                   rt(s, K_MOE_COMBINE, (unsigned)(D + 255) / 256, (unsigned)B, 256, 0, ac)
               ? -1
               : 0;
}

/* The MoE's gate logits into elog: rt_gate_comb of gate_old's and gate_y's projections (joined
 * here) with the module's pre and r (gate_beside), or the GEMV of h. */
static int gate_logits(kt_step *s, layer_dev *L) {
    int E = (int)s->c.n_experts, H = (int)s->c.hc_mult;
    if (!gate_beside(s)) return gemv(s, "rt_gemv/gate", L->gate, E, s->c.hidden, s->h, s->elog, NULL);
    void *a[] = {&s->go, &s->gy, &s->gpc, &s->gprn, &s->elog, &E, &H};
    return side_join(s, 4) || side_join(s, 5) ||
                   rt_as(s, K_GATE_COMB, "rt_gate_comb", (unsigned)(E + 255) / 256, 1, 1, 256, 0, a)
               ? -1
               : 0;
}

/* The family MoE: gate logits (rt_gemv), moe_route (V4 or V3 with the bias, or HASH: the
 * experts tid2eid[token]; ids, weights, alignment records), moe_gemm gate+up (SwiGLU, e4m3
 * requantised) and down (the weighted combine + the shared expert's output), into moe_outb
 * (bf16); the experts in the plan's format. */
static int moe_family(kt_step *s, layer_dev *L, int hash) {
    const kt_model_config *c = &s->c;
    dptr route[7] = {s->elog, L->gate_bias, s->eidx, s->ew, s->ealign, s->tok, L->tid2eid};
    dptr shared = c->n_shared ? s->y_sh : s->no_shared;
    dptr up[KT_MOE_T_COUNT] = {s->hq,  s->hs,     L->e13, L->e13s, s->eidx,  s->ew,
                               shared, s->ealign, s->he,  s->hse,  s->mpart, s->mcnt};
    dptr down[KT_MOE_T_COUNT] = {s->he,  s->hse,    L->e2,       L->e2s,   s->eidx,  s->ew,
                                 shared, s->ealign, s->moe_outb, s->mpart, s->mpart, s->mcnt};
    /* V4: the shared expert on the side chain beside the gate, the router and the gate+up GEMM
     * (the down GEMM's epilogue adds its output) */
    int side = s->c.arch == KT_ARCH_V4 && s->c.n_shared;
    return (side && (side_begin(s, 0) || shared_expert(s, L) || side_end(s, 0))) || gate_logits(s, L) ||
                   fam_launch(s, fam_p(s, "moe_route", hash ? &s->plan.route_hash : &s->plan.route), route, 7) ||
                   (!side && shared_expert(s, L)) ||
                   fam_launch(s, fam_p(s, "moe_gemm", &s->plan.gateup), up, KT_MOE_T_COUNT) ||
                   (side && side_join(s, 0)) || fam_launch(s, fam_p(s, "moe_gemm", &s->plan.down), down, KT_MOE_T_COUNT)
               ? -1
               : 0;
}

/* In the profiled step: layer l's expert ids into route_log, for the floor's count of the experts a step reads. */
static int log_routes(kt_step *s, long l) {
    if (!s->profiling) return 0;
    size_t n = (size_t)s->B * (size_t)s->c.top_k * 4;
    KT_CHECK(CU, kt_cu.cuMemcpyDtoDAsync(s->route_log + (dptr)(l * n), s->eidx, n, s->cur));
    return 0;
}

static int moe(kt_step *s, long l) {
    layer_dev *L = &s->L[l];
    int hash = s->c.mlp[l] == KT_MLP_HASH, family = s->plan.family[KT_PART_MOE];
    if (hc_pre(s, L, 1, L->ffn_norm) || (family ? moe_family(s, L, hash) : moe_plain(s, L, hash)) || log_routes(s, l))
        return -1;
    dptr out = family ? s->moe_outb : s->moe_out;
    if (all_reduce(s, out, family)) return -1;
    return family ? hc_post(s, out, 0) : hc_post(s, 0, out);
}

/* ------------------------------------------------------------- DeepSeek-V3.2 */
/* V3.2's layers (model_ref.c's step_v32): pre-norm residual blocks on an f32 stream x [B, D] (no
 * hyper-connections), MLA in its absorbed form over the indexer's top-k (mla_indexer, mla_decode
 * LAYOUT=V32), then a dense SwiGLU MLP (fp8_gemm) or the V3 MoE (moe_route ROUTER=V3, moe_gemm
 * with the shared experts). The families are V3.2's only path: it has no plain kernels. */

#define V32_SEQS 8  /* sequences a block of rt_v32_q_absorb / rt_v32_o_up takes (model.cu's RT_V32_SEQS) */
#define V32_HEADS 8 /* indexer heads a block of rt_v32_index_q takes (model.cu's RT_V32_HEADS) */

/* x's rmsnorm with w into h (f32) and hq / hs (its act_quant codes, by rt_rmsnorm_f32). */
static int norm_v32(kt_step *s, dptr w) {
    int D = (int)s->c.hidden;
    float eps = (float)s->c.rms_eps;
    void *a[] = {&s->x, &w, &s->h, &s->hq, &s->hs, &D, &eps};
    return rt(s, K_RMSNORM_F32, (unsigned)s->B, 1, 256, (unsigned)(D * 4), a);
}

/* x += y (a block's bf16 output). */
static int residual(kt_step *s, dptr y) {
    int D = (int)s->c.hidden;
    void *a[] = {&s->x, &y, &D};
    return rt(s, K_RESIDUAL, (unsigned)(D + 255) / 256, (unsigned)s->B, 256, 0, a);
}

/* The indexer: the new token's key (wk, k_norm, RoPE) into its pages, the query (wq_b of qr) and
 * head weights (of h) in mla_indexer's formats, then its top-k of tokens 0..pos into L->idx. */
static int indexer_v32(kt_step *s, layer_dev *L) {
    const kt_model_config *c = &s->c;
    int B = s->B, IH = (int)c->index_heads, ID = (int)c->index_dim, D = (int)c->hidden, R = (int)c->rope_dim;
    float af = (float)c->rope_main.attention_factor;
    long pages = L->cpages;
    if (gemm(s, &L->iwq_b, 0, (long)IH * ID, s->qrq, s->qrs, s->iq, B) ||
        gemm(s, &L->iwk, 0, ID, s->hq, s->hs, s->ik, B))
        return -1;
    void *ak[] = {&s->ik, &L->ik_norm, &L->ik_bias, &s->inv_main, &af, &s->pos, &L->ikc, &pages, &R};
    void *aq[] = {&s->iq, &s->h, &L->iwproj, &s->inv_main, &af, &s->pos, &s->iqq, &s->iw, &IH, &ID, &D, &R};
    if (rt(s, K_V32_INDEX_K, (unsigned)B, 1, 128, 0, ak) ||
        rt(s, K_V32_INDEX_Q, (unsigned)B, (unsigned)(IH + V32_HEADS - 1) / V32_HEADS, 256,
           (unsigned)(V32_HEADS * ID * 4), aq))
        return -1;
    dptr ptr[8] = {s->iqq, s->iw, L->ikc, s->lens + (dptr)(2 * B * 4), s->itable, s->ilogits, L->idx, s->ihist};
    return fam_launch(s, fam_p(s, "mla_indexer", &s->plan.indexer), ptr, 8);
}

/* MLA: q_a -> q_norm -> q_b; kv_a -> the cache (kv_norm, RoPE, V32 layout); the indexer; the
 * absorbed query, mla_decode over the top-k, the latent out through kv_b_proj's value rows,
 * o_proj, the residual. */
static int attention_v32(kt_step *s, long l) {
    const kt_model_config *c = &s->c;
    layer_dev *L = &s->L[l];
    int B = s->B, QL = (int)c->q_lora, H = (int)c->n_heads, NO = (int)c->qk_nope, VH = (int)c->v_head;
    int R = (int)c->rope_dim, ld = (int)L->wkv.n;
    float eps = (float)c->rms_eps, af = (float)c->rope_main.attention_factor;
    long pages = L->cpages;
    void *an[] = {&s->qa, &QL, &L->q_norm, &s->qrq, &s->qrs, &QL, &eps};
    if (norm_v32(s, L->attn_norm) || gemm(s, &L->wq_a, 0, QL, s->hq, s->hs, s->qa, B) ||
        rt(s, K_RMSNORM, (unsigned)B, 1, 256, (unsigned)(QL * 4), an) ||
        gemm(s, &L->wq_b, 0, (long)H * (NO + R), s->qrq, s->qrs, s->q, B) ||
        gemm(s, &L->wkv, 0, ld, s->hq, s->hs, s->kvraw, B))
        return -1;
    void *akv[] = {&s->kvraw, &ld, &L->kv_norm, &s->inv_main, &af, &s->pos, &L->ccache, &pages, &eps};
    void *aq[] = {&s->q, &L->wkvb.codes, &L->wkvb.scales, &s->inv_main, &af, &s->pos, &s->qb, &NO, &VH, &R, &B};
    void *ao[] = {&s->ob, &L->wkvb.codes, &L->wkvb.scales, &s->og, &NO, &VH, &B};
    unsigned bg = (unsigned)(B + V32_SEQS - 1) / V32_SEQS; /* model.cu's RT_V32_SEQS sequences a block */
    dptr ptr[8] = {s->qb, L->ccache, L->idx, s->csa_len, s->ob, s->lse, s->apart, s->atick};
    if (rt(s, K_V32_KV_APPEND, (unsigned)B, 1, 256, 0, akv) || indexer_v32(s, L) ||
        rt(s, K_V32_Q_ABSORB, (unsigned)H, bg, 256, 0, aq) ||
        fam_launch(s, fam_p(s, "mla_decode", &s->plan.attn[KT_PLAN_DSA]), ptr, 8) ||
        rt(s, K_V32_O_UP, (unsigned)H, bg, 256, 0, ao) || qgemm(s, &L->wo_b, 0, c->hidden, s->og, s->y_attn, B) ||
        all_reduce(s, s->y_attn, 1))
        return -1;
    return residual(s, s->y_attn);
}

/* The dense MLP (gate|up in sh13, down in sh2) or the V3 MoE (moe_family), then the residual. */
static int mlp_v32(kt_step *s, long l) {
    layer_dev *L = &s->L[l];
    int dense = s->c.mlp[l] == KT_MLP_DENSE;
    if (norm_v32(s, L->ffn_norm) ||
        (dense ? swiglu_mlp(s, &L->sh13, &L->sh2, s->y_sh) : moe_family(s, L, 0) || log_routes(s, l)))
        return -1;
    dptr out = dense ? s->y_sh : s->moe_outb;
    return all_reduce(s, out, 1) || residual(s, out) ? -1 : 0;
}

/* The layers, each in an NVTX range: attention then the feed-forward part. */
static int layers(kt_step *s, int (*attn)(kt_step *, long), int (*ffn)(kt_step *, long)) {
    for (long l = 0; l < s->c.n_layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "kt/layer/%ld", l);
        nvtxRangePushA(name);
        int rc = attn(s, l) || ffn(s, l);
        nvtxRangePop();
        if (rc) return -1;
    }
    return 0;
}

/* V3.2's step: embedding, the layers, final norm, LM head, greedy argmax. */
static int enqueue_v32(kt_step *s) {
    const kt_model_config *c = &s->c;
    int D = (int)c->hidden, V = (int)c->head_rows, B = s->B, one = 1;
    float eps = (float)c->rms_eps;
    dptr no_quant = 0;
    void *ae[] = {&s->embed, &s->tok, &s->x, &D};
    void *al0[] = {&s->pos, &s->lens, &one, &one, &one, &B}; /* lens[2][b] = pos + 1: every token indexed */
    void *an[] = {&s->x, &s->norm, &s->yfin, &no_quant, &no_quant, &D, &eps};
    void *am[] = {&s->logits, &s->next, &V};
    if (rt(s, K_EMBED, (unsigned)B, 1, 256, 0, ae) || rt(s, K_LENGTHS, (unsigned)(B + 63) / 64, 1, 64, 0, al0) ||
        layers(s, attention_v32, mlp_v32) || rt(s, K_RMSNORM_F32, (unsigned)B, 1, 256, (unsigned)(D * 4), an) ||
        gemv(s, "rt_gemv/head", s->head, V, D, s->yfin, s->logits, NULL) ||
        rt(s, K_ARGMAX, (unsigned)B, 1, RT_ARGMAX_THREADS, 0, am))
        return -1;
    return prof_mark(s, "end");
}

/* Enqueues the whole step on s->stream. */
static int enqueue(kt_step *s) {
    const kt_model_config *c = &s->c;
    int D = (int)c->hidden, H = (int)c->hc_mult, V = (int)c->head_rows;
    int W = (int)c->window, hr = (int)c->hca_rate, cr = (int)c->csa_rate, B = s->B;
    if (c->arch == KT_ARCH_V32) return enqueue_v32(s);
    s->x = s->xbuf[0]; /* every step (and capture) starts on the same buffer, nothing pending */
    s->post_pending = s->comb_pending = 0;
    void *ae[] = {&s->embed, &s->tok, &s->x, &D};
    void *al0[] = {&s->pos, &s->lens, &W, &hr, &cr, &B};
    if (rt(s, K_EMBED, (unsigned)B, (unsigned)H, 256, 0, ae) ||
        rt(s, K_LENGTHS, (unsigned)(B + 63) / 64, 1, 64, 0, al0) || layers(s, attention, moe))
        return -1;
    void *am[] = {&s->logits, &s->next, &V};
    if (hc_mix(s, s->hh_fn, s->hh_base, s->hh_scale, s->norm, 0, s->yfin, 0, 0, 0) ||
        gemv(s, "rt_gemv/head", s->head, V, D, s->yfin, s->logits, NULL) ||
        rt(s, K_ARGMAX, (unsigned)s->B, 1, RT_ARGMAX_THREADS, 0, am))
        return -1;
    return prof_mark(s, "end");
}

/* The kernel nodes of graph g (every launch of the step: plain kernels and the families'). */
static int count_kernels(CUgraph g, int *n) {
    size_t nodes = 0;
    KT_CHECK(CU, kt_cu.cuGraphGetNodes(g, NULL, &nodes));
    CUgraphNode *list = malloc((nodes ? nodes : 1) * sizeof *list);
    if (!list) return kt_fail("out of memory");
    int rc = kt_status_CU(kt_cu.cuGraphGetNodes(g, list, &nodes), "cuGraphGetNodes", __FILE__, __LINE__);
    *n = 0;
    for (size_t i = 0; i < nodes && !rc; i++) {
        CUgraphNodeType t;
        rc = kt_status_CU(kt_cu.cuGraphNodeGetType(list[i], &t), "cuGraphNodeGetType", __FILE__, __LINE__);
        *n += !rc && t == CU_GRAPH_NODE_TYPE_KERNEL;
    }
    free(list);
    return rc;
}

/* Resolves every kernel of set `set` with one eager step, then captures the step as a graph. */
static int build_graph(kt_step *s, int set) {
    s->set = set;
    if (enqueue(s)) return -1;
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(s->stream));
    CUgraph g = NULL;
    KT_CHECK(CU, kt_cu.cuStreamBeginCapture(s->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    s->capturing = 1;
    int rc = enqueue(s);
    s->capturing = 0;
    CUresult end = kt_cu.cuStreamEndCapture(s->stream, &g);
    if (rc) return g ? kt_cu.cuGraphDestroy(g), -1 : -1;
    KT_CHECK(CU, end);
    rc = count_kernels(g, &s->graph_kernels[set]) ||
         kt_status_CU(kt_cu.cuGraphInstantiate(&s->graph[set], g, 0), "cuGraphInstantiate", __FILE__, __LINE__);
    kt_cu.cuGraphDestroy(g);
    if (rc) return -1;
    s->n_graphs = set + 1;
    return 0;
}

/* ---------------------------------------------------------------- weights */

static int by_name(const void *a, const void *b) {
    return strcmp(((const kt_model_tensor *)a)->name, ((const kt_model_tensor *)b)->name);
}

static const kt_model_tensor *desc(const kt_step *s, const char *fmt, long l, long e) {
    kt_model_tensor key;
    snprintf(key.name, sizeof key.name, fmt, l, e);
    const kt_model_tensor *d = bsearch(&key, s->list, (size_t)s->n_list, sizeof key, by_name);
    if (!d) kt_fail("internal: %s is not in the model's tensor list", key.name);
    return d;
}

static int fill(kt_step *s, int k, dptr p, unsigned long long n, float base, float amp, int mod) {
    unsigned long long seed = s->seed++;
    void *af[] = {&p, &n, &seed, &base, &amp};
    void *ai[] = {&p, &n, &seed, &mod};
    unsigned blocks = (unsigned)(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
    if (kt_launch_kernel(&s->rt[k], 0, blocks, 1, 1, 256, 0, s->stream, k == K_FILL_I32 ? ai : af)) return -1;
    return 0;
}

/* The first `rows` rows of a plain tensor (all where rows is 0) into device memory at out (allocated by
 * the caller): from the file or seeded. */
static int plain_rows_at(kt_step *s, dptr out, const char *fmt, long l, long rows) {
    const kt_model_tensor *d = desc(s, fmt, l, 0);
    if (!d) return -1;
    long k = d->ndim == 2 ? d->shape[1] : 1, n = (rows > 0 && rows < d->shape[0] ? rows : d->shape[0]) * k;
    s->weight_bytes += 4.0 * n;
    if (!s->w) {
        if (d->kind == KT_W_INDEX) return fill(s, K_FILL_I32, out, (unsigned long long)n, 0, 0, (int)s->c.n_experts);
        int is_norm = d->ndim == 1 && strstr(d->name, "weight");
        return fill(s, K_FILL_F32, out, (unsigned long long)n, is_norm ? 1.0f : 0.0f,
                    d->ndim == 1 ? 0.3f : (float)(1.0 / sqrt((double)k)), 0);
    }
    float *v;
    int32_t *iv;
    if (kt_model_weight(&s->c, s->w, d, &v, &iv)) return -1;
    int rc = kt_status_CU(kt_cu.cuMemcpyHtoD(out, v ? (void *)v : (void *)iv, (size_t)n * 4), "cuMemcpyHtoD", __FILE__,
                          __LINE__);
    free(v), free(iv);
    return rc ? -1 : 0;
}

static int plain_at(kt_step *s, dptr out, const char *fmt, long l) { return plain_rows_at(s, out, fmt, l, 0); }

/* A plain tensor (f32 on the device; int32 for expert tables), from the file or seeded. */
static int plain(kt_step *s, dptr *out, const char *fmt, long l) {
    const kt_model_tensor *d = desc(s, fmt, l, 0);
    return !d || dalloc(out, (size_t)(d->shape[0] * (d->ndim == 2 ? d->shape[1] : 1)) * 4) ? -1
                                                                                           : plain_at(s, *out, fmt, l);
}

/* The LM head's first head_rows rows (this rank's part of the vocabulary), f32. */
static int plain_head(kt_step *s, const char *name) {
    return dalloc(&s->head, (size_t)(s->c.head_rows * s->c.hidden) * 4) ||
           plain_rows_at(s, s->head, name, 0, s->c.head_rows);
}

/* A GEMM weight into rows row0.. of g (allocated by the caller when row0 > 0): FP8 codes and
 * 128x128 scales, quantised here from the checkpoint's values, or seeded codes with scales of
 * 1/(448 sqrt(k)). A last part of rows not a multiple of 128 (V3.2's kv_a, 576 rows) ends in a
 * partial block: g's rows past it stay zero (the same block scale: zeros add no amax). */
static int gemm_part(kt_step *s, gemm_w *g, long row0, const kt_model_tensor *d) {
    long n = d->shape[0], k = d->shape[1], kb = (k + 127) / 128, nb = (n + 127) / 128;
    if (k % 128 || row0 % 128 || row0 + nb * 128 > g->n)
        return kt_fail("%s: [%ld, %ld] at row %ld is not in 128x128 blocks", d->name, n, k, row0);
    dptr codes = g->codes + (dptr)(row0 * k), scales = g->scales + (dptr)((row0 / 128) * kb * 4);
    if (!s->w)
        return fill(s, K_FILL_E4M3, codes, (unsigned long long)(n * k), 0, 0, 0) ||
                       fill(s, K_FILL_F32, scales, (unsigned long long)(nb * kb),
                            (float)(1.0 / (448 * sqrt((double)k))), 0, 0)
                   ? -1
                   : 0;
    float *v;
    int32_t *iv;
    if (kt_model_weight(&s->c, s->w, d, &v, &iv)) return -1;
    uint8_t *q = malloc((size_t)(n * k));
    float *sc = malloc((size_t)(nb * kb) * sizeof *sc);
    kt_quant_blocks(v, n, k, q, sc);
    int rc = kt_status_CU(kt_cu.cuMemcpyHtoD(codes, q, (size_t)(n * k)), "cuMemcpyHtoD", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(scales, sc, (size_t)(nb * kb) * 4), "cuMemcpyHtoD", __FILE__, __LINE__);
    free(v), free(q), free(sc);
    return rc ? -1 : 0;
}

/* Allocates g for n rows of k and loads the listed parts (NULL-terminated formats) one below the other. */
static int gemm_load(kt_step *s, gemm_w *g, long n, long k, long l, const char *const *parts, int count_bytes) {
    g->n = n, g->k = k;
    if (dalloc(&g->codes, (size_t)(n * k)) || dalloc(&g->scales, (size_t)(n / 128 * (k / 128)) * 4)) return -1;
    if (count_bytes) s->weight_bytes += (double)n * k + n / 128.0 * (k / 128) * 4;
    long row = 0;
    for (int i = 0; parts[i]; i++) {
        const kt_model_tensor *d = desc(s, parts[i], l, 0);
        if (!d || gemm_part(s, g, row, d)) return -1;
        row += d->shape[0];
    }
    return 0;
}

/* A compressor's tensors; its wkv and wg as the rows of proj from row `at` (rows of hidden). */
static int load_comp(kt_step *s, comp_dev *cd, long l, const char *prefix, long rate, long width, int overlap,
                     dptr proj, long at) {
    char f[4][96];
    const char *names[4] = {"compressor.ape", "compressor.norm.weight", "compressor.wgate.weight",
                            "compressor.wkv.weight"};
    for (int i = 0; i < 4; i++) snprintf(f[i], sizeof f[i], "model.layers.%%ld.%s%s", prefix, names[i]);
    cd->rate = rate, cd->width = width, cd->overlap = overlap;
    size_t state = (size_t)(3 * s->B * overlap * width) * 4;
    dptr wkv = proj + (dptr)(at * s->c.hidden * 4), wg = wkv + (dptr)(overlap * width * s->c.hidden * 4);
    return plain(s, &cd->ape, f[0], l) || plain(s, &cd->norm, f[1], l) || plain_at(s, wg, f[2], l) ||
                   plain_at(s, wkv, f[3], l) || dalloc(&cd->state, state)
               ? -1
               : 0;
}

/* The ue8m0 scale of seeded MXFP4 codes along k: rt_fill_e4m3's bytes read as e2m1 pairs have
 * an RMS of ~4.3, so 2^(s-127) ~ 1 / (4.3 sqrt(3k)) gives the FP8 fill's U(-1, 1) / sqrt(k) RMS. */
static unsigned char seeded_mxfp4_scale(long k) { return (unsigned char)(127 - lround(log2(4.3 * sqrt(3.0 * k)))); }

/* Layer l's routed experts in moe_gemm's MXFP4 layout (kt_model_experts_mxfp4's: codes [E][2I][D/2]
 * w1 | w3 and [E][D][I/2], ue8m0 scales per 32 along K), or seeded: random codes (every byte is
 * an e2m1 pair) and one scale a matrix. */
static int load_experts_mxfp4(kt_step *s, layer_dev *L, long l) {
    const kt_model_config *c = &s->c;
    size_t I = (size_t)c->moe_inter, D = (size_t)c->hidden, gu = (size_t)c->n_experts * 2 * I * D,
           dn = (size_t)c->n_experts * D * I;
    if (dalloc(&L->e13, gu / 2) || dalloc(&L->e13s, gu / 32) || dalloc(&L->e2, dn / 2) || dalloc(&L->e2s, dn / 32))
        return -1;
    s->expert_bytes = 3.0 * I * D / 2 + 3.0 * I * D / 32;
    if (!s->w) {
        if (fill(s, K_FILL_E4M3, L->e13, gu / 2, 0, 0, 0) || fill(s, K_FILL_E4M3, L->e2, dn / 2, 0, 0, 0)) return -1;
        KT_CHECK(CU, kt_cu.cuMemsetD8Async(L->e13s, seeded_mxfp4_scale((long)D), gu / 32, s->stream));
        KT_CHECK(CU, kt_cu.cuMemsetD8Async(L->e2s, seeded_mxfp4_scale((long)I), dn / 32, s->stream));
        return 0;
    }
    uint8_t *h = malloc(gu / 2 + gu / 32 + dn / 2 + dn / 32);
    if (!h) return kt_fail("out of memory for layer %ld's MXFP4 experts", l);
    uint8_t *gs = h + gu / 2, *dc = gs + gu / 32, *ds = dc + dn / 2;
    int rc = kt_model_experts_mxfp4(c, s->w, l, h, gs, dc, ds) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(L->e13, h, gu / 2), "cuMemcpyHtoD", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(L->e13s, gs, gu / 32), "cuMemcpyHtoD", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(L->e2, dc, dn / 2), "cuMemcpyHtoD", __FILE__, __LINE__) ||
             kt_status_CU(kt_cu.cuMemcpyHtoD(L->e2s, ds, dn / 32), "cuMemcpyHtoD", __FILE__, __LINE__);
    free(h);
    return rc ? -1 : 0;
}

/* The routed experts of layer l in the plan's format: MXFP4 for moe_gemm, or FP8 packed for
 * moe_gemm and rt_moe_up / rt_moe_down alike. */
static int load_experts(kt_step *s, layer_dev *L, long l) {
    const kt_model_config *c = &s->c;
    long E = c->n_experts, I = c->moe_inter, D = c->hidden;
    gemm_w up = {0, 0, 2 * I, D}, down = {0, 0, D, I};
    if (s->plan.experts == KT_MOE_MXFP4) return load_experts_mxfp4(s, L, l);
    if (dalloc(&L->e13, (size_t)(E * 2 * I * D)) || dalloc(&L->e13s, (size_t)(E * (2 * I / 128) * (D / 128)) * 4) ||
        dalloc(&L->e2, (size_t)(E * D * I)) || dalloc(&L->e2s, (size_t)(E * (D / 128) * (I / 128)) * 4))
        return -1;
    s->expert_bytes = 3.0 * I * D + 3.0 * I * D / 16384 * 4;
    for (long e = 0; e < E; e++) {
        up.codes = L->e13 + (dptr)(e * 2 * I * D), up.scales = L->e13s + (dptr)(e * (2 * I / 128) * (D / 128) * 4);
        down.codes = L->e2 + (dptr)(e * D * I), down.scales = L->e2s + (dptr)(e * (D / 128) * (I / 128) * 4);
        char names[3][96]; /* gate (V4's w1), up (w3), down (w2): the model's own names */
        for (int which = 0; which < 3; which++) kt_model_expert_name(c, l, e, which, names[which], sizeof names[which]);
        const kt_model_tensor *w1 = desc(s, names[0], l, e), *w3 = desc(s, names[1], l, e),
                              *w2 = desc(s, names[2], l, e);
        if (!w1 || !w2 || !w3 || gemm_part(s, &up, 0, w1) || gemm_part(s, &up, I, w3) || gemm_part(s, &down, 0, w2))
            return -1;
    }
    return 0;
}

/* gate_beside's weights: the gate's rows times the MoE's norm weights, Wn = W diag(ffn_norm), made
 * on the device from the loaded ones (rt_scale_cols, on the stream that filled or uploaded them).
 * Not added to the byte floor (the model's bytes, not this path's): the step reads them in place of
 * the gate, twice (gate_old, then gate_y ~60 us later, from L2 where they stayed). */
static int gate_norm_rows(kt_step *s, layer_dev *L) {
    unsigned long long n = (unsigned long long)s->c.n_experts;
    int K = (int)s->c.hidden;
    void *a[] = {&L->gate_n, &L->gate, &L->ffn_norm, &n, &K};
    if (dalloc(&L->gate_n, (size_t)n * (size_t)K * 4)) return -1;
    return kt_launch_kernel(&s->rt[K_SCALE_COLS], 0, 1024, 1, 1, 256, 0, s->stream, a);
}

static int load_layer(kt_step *s, long l) {
    const kt_model_config *c = &s->c;
    layer_dev *L = &s->L[l];
    long D = c->hidden, HD = c->head_dim;
    int csa = c->attn[l] == KT_ATTN_CSA;
    /* wq_a and wkv both project h: one GEMM's rows, wq_a's then wkv's */
    static const char *const wq_a[] = {"model.layers.%ld.attn.wq_a.weight", "model.layers.%ld.attn.wkv.weight", NULL};
    /* a CSA layer's wq_b also holds the indexer's wq_b: both project q_a's norm */
    static const char *const wq_b[] = {"model.layers.%ld.attn.wq_b.weight", NULL};
    static const char *const wq_b_csa[] = {"model.layers.%ld.attn.wq_b.weight",
                                           "model.layers.%ld.attn.indexer.wq_b.weight", NULL};
    static const char *const wo_a[] = {"model.layers.%ld.attn.wo_a.weight", NULL};
    static const char *const wo_b[] = {"model.layers.%ld.attn.wo_b.weight", NULL};
    static const char *const sh13[] = {"model.layers.%ld.ffn.shared_experts.w1.weight",
                                       "model.layers.%ld.ffn.shared_experts.w3.weight", NULL};
    static const char *const sh2[] = {"model.layers.%ld.ffn.shared_experts.w2.weight", NULL};
    if (plain(s, &L->hc_fn[0], "model.layers.%ld.hc_attn_fn", l) ||
        plain(s, &L->hc_base[0], "model.layers.%ld.hc_attn_base", l) ||
        plain(s, &L->hc_scale[0], "model.layers.%ld.hc_attn_scale", l) ||
        plain(s, &L->hc_fn[1], "model.layers.%ld.hc_ffn_fn", l) ||
        plain(s, &L->hc_base[1], "model.layers.%ld.hc_ffn_base", l) ||
        plain(s, &L->hc_scale[1], "model.layers.%ld.hc_ffn_scale", l) ||
        plain(s, &L->attn_norm, "model.layers.%ld.attn_norm.weight", l) ||
        plain(s, &L->ffn_norm, "model.layers.%ld.ffn_norm.weight", l) ||
        plain(s, &L->q_norm, "model.layers.%ld.attn.q_norm.weight", l) ||
        plain(s, &L->kv_norm, "model.layers.%ld.attn.norm.weight", l) ||
        plain(s, &L->sink, "model.layers.%ld.attn.attn_sink", l) ||
        plain(s, &L->gate, "model.layers.%ld.ffn.gate.weight", l))
        return -1;
    if (c->mlp[l] == KT_MLP_HASH ? plain(s, &L->tid2eid, "model.layers.%ld.ffn.gate.tid2eid", l)
                                 : plain(s, &L->gate_bias, "model.layers.%ld.ffn.gate.bias", l))
        return -1;
    if (gate_beside(s) && gate_norm_rows(s, L)) return -1;
    if (gemm_load(s, &L->wq_a, c->q_lora + HD, D, l, wq_a, 1) ||
        gemm_load(s, &L->wq_b, kt_model_q_dim(c) + (csa ? c->index_heads * c->index_dim : 0), c->q_lora, l,
                  csa ? wq_b_csa : wq_b, 1) ||
        gemm_load(s, &L->wo_a, c->o_groups * c->o_lora, kt_model_group_in(c), l, wo_a, 1) ||
        gemm_load(s, &L->wo_b, D, c->o_groups * c->o_lora, l, wo_b, 1) || load_experts(s, L, l))
        return -1;
    if (c->n_shared &&
        (gemm_load(s, &L->sh13, 2 * c->moe_inter, D, l, sh13, 1) || gemm_load(s, &L->sh2, D, c->moe_inter, l, sh2, 1)))
        return -1;
    /* caches: the window ring, the compressed entries, the indexer's keys and its choices */
    L->wstride = kt_kv_bytes(c->window);
    if (dalloc(&L->win, L->wstride * (size_t)s->B)) return -1;
    long rate = c->attn[l] == KT_ATTN_HCA ? c->hca_rate : c->csa_rate;
    L->max_entries = kt_step_entries(s->ctx, rate);
    L->cpages = (L->max_entries + KT_KV_PAGE - 1) / KT_KV_PAGE;
    /* the projections of h (one rt_gemv: comp_gemv): the compressor's wkv and wg, then (CSA) the
     * indexer's compressor's and its head weights */
    long oc = (csa ? 2 : 1) * HD, oi = 2 * c->index_dim;
    L->proj_rows = 2 * oc + (csa ? 2 * oi + c->index_heads : 0);
    if (c->attn[l] != KT_ATTN_SLIDING) {
        L->cstride = kt_kv_bytes(L->max_entries);
        if (dalloc(&L->ccache, L->cstride * (size_t)s->B) || dalloc(&L->proj, (size_t)(L->proj_rows * D) * 4) ||
            load_comp(s, &L->comp, l, "attn.", rate, HD, csa ? 2 : 1, L->proj, 0))
            return -1;
    }
    if (csa) {
        L->kstride = (unsigned long long)(L->max_entries * c->index_dim);
        L->iwproj = L->proj + (dptr)((2 * oc + 2 * oi) * D * 4);
        if (load_comp(s, &L->index, l, "attn.indexer.", rate, c->index_dim, 2, L->proj, 2 * oc) ||
            plain_at(s, L->iwproj, "model.layers.%ld.attn.indexer.weights_proj.weight", l) ||
            dalloc(&L->idx, (size_t)(s->B * c->index_topk) * 4))
            return -1;
        /* the keys: mla_indexer's pages (page b * cpages + i of sequence b, the compressed
         * cache's numbering, so its index list addresses that cache), or rt_index_score's f32 */
        if (s->plan.family[KT_PART_INDEXER] ? dalloc(&L->ikc, (size_t)(s->B * L->cpages) * KT_IDX_PAGE_BYTES)
                                            : dalloc(&L->ikeys, L->kstride * 4 * (size_t)s->B) ||
                                                  dalloc(&L->scores, (size_t)(s->B * L->max_entries) * 4))
            return -1;
    }
    return 0;
}

/* V3.2's layer: norms, the MLA and indexer projections (kv_a padded to whole 128-row blocks), the
 * dense MLP in sh13 / sh2 or the router, experts and shared experts; the caches: every token's
 * MLA key in mla_decode's V32 layout and its indexer key in mla_indexer's pages (cpages pages a
 * sequence), the indexer's top-k. */
static int load_layer_v32(kt_step *s, long l) {
    const kt_model_config *c = &s->c;
    layer_dev *L = &s->L[l];
    long D = c->hidden, H = c->n_heads, QK = c->qk_nope + c->rope_dim, KV = c->kv_lora + c->rope_dim;
#define V32_W(name) ((const char *const[]){"model.layers.%ld." name ".weight", NULL})
    if (plain(s, &L->attn_norm, "model.layers.%ld.input_layernorm.weight", l) ||
        plain(s, &L->ffn_norm, "model.layers.%ld.post_attention_layernorm.weight", l) ||
        plain(s, &L->q_norm, "model.layers.%ld.self_attn.q_a_layernorm.weight", l) ||
        plain(s, &L->kv_norm, "model.layers.%ld.self_attn.kv_a_layernorm.weight", l) ||
        plain(s, &L->ik_norm, "model.layers.%ld.self_attn.indexer.k_norm.weight", l) ||
        plain(s, &L->ik_bias, "model.layers.%ld.self_attn.indexer.k_norm.bias", l) ||
        plain(s, &L->iwproj, "model.layers.%ld.self_attn.indexer.weights_proj.weight", l) ||
        gemm_load(s, &L->wq_a, c->q_lora, D, l, V32_W("self_attn.q_a_proj"), 1) ||
        gemm_load(s, &L->wq_b, H * QK, c->q_lora, l, V32_W("self_attn.q_b_proj"), 1) ||
        gemm_load(s, &L->wkv, (KV + 127) / 128 * 128, D, l, V32_W("self_attn.kv_a_proj_with_mqa"), 1) ||
        gemm_load(s, &L->wkvb, H * (c->qk_nope + c->v_head), c->kv_lora, l, V32_W("self_attn.kv_b_proj"), 1) ||
        gemm_load(s, &L->wo_b, D, H * c->v_head, l, V32_W("self_attn.o_proj"), 1) ||
        gemm_load(s, &L->iwq_b, c->index_heads * c->index_dim, c->q_lora, l, V32_W("self_attn.indexer.wq_b"), 1) ||
        gemm_load(s, &L->iwk, c->index_dim, D, l, V32_W("self_attn.indexer.wk"), 1))
        return -1;
    static const char *const dense13[] = {"model.layers.%ld.mlp.gate_proj.weight",
                                          "model.layers.%ld.mlp.up_proj.weight", NULL};
    static const char *const shared13[] = {"model.layers.%ld.mlp.shared_experts.gate_proj.weight",
                                           "model.layers.%ld.mlp.shared_experts.up_proj.weight", NULL};
    long I = c->mlp[l] == KT_MLP_DENSE ? c->inter : c->moe_inter * c->n_shared;
    if (c->mlp[l] == KT_MLP_DENSE
            ? gemm_load(s, &L->sh13, 2 * I, D, l, dense13, 1) ||
                  gemm_load(s, &L->sh2, D, I, l, V32_W("mlp.down_proj"), 1)
            : plain(s, &L->gate, "model.layers.%ld.mlp.gate.weight", l) ||
                  plain(s, &L->gate_bias, "model.layers.%ld.mlp.gate.e_score_correction_bias", l) ||
                  load_experts(s, L, l) ||
                  (c->n_shared && (gemm_load(s, &L->sh13, 2 * I, D, l, shared13, 1) ||
                                   gemm_load(s, &L->sh2, D, I, l, V32_W("mlp.shared_experts.down_proj"), 1))))
        return -1;
#undef V32_W
    L->max_entries = s->ctx;
    L->cpages = (s->ctx + KT_MLA_PAGE - 1) / KT_MLA_PAGE;
    size_t pages = (size_t)(s->B * L->cpages);
    return dalloc(&L->ccache, pages * KT_MLA_V32_PAGE_BYTES) || dalloc(&L->ikc, pages * KT_IDX_PAGE_BYTES) ||
                   dalloc(&L->idx, (size_t)(s->B * c->index_topk) * 4)
               ? -1
               : 0;
}

/* ------------------------------------------------------- seeded KV history */

/* model.cu's rt_seed_kv kinds (RT_SEED_*): the V4 layout, mla_indexer's pages, f32 keys, V3.2's MLA layout. */
enum { SEED_V4, SEED_IDX, SEED_F32, SEED_V32 };

/* Entries 0..n-1 of every sequence of one cache seeded by rt_seed_kv (kind's store, `stride` a sequence in the
 * kind's unit), rmsnorm'd with w (0: none). */
static int seed_cache(kt_step *s, int kind, dptr cache, dptr keys, unsigned long long stride, int width, dptr w,
                      long n) {
    if (n <= 0) return 0;
    unsigned long long seed = s->seed++;
    float eps = (float)s->c.rms_eps;
    void *a[] = {&cache, &keys, &kind, &stride, &width, &w, &seed, &eps};
    return kt_launch_kernel(&s->rt[K_SEED_KV], 0, (unsigned)n, (unsigned)s->B, 1, 256, 0, s->stream, a);
}

/* A compressor's window state (rt_comp_fold's running max, sum and gated sum), which a step that closes a window
 * reads: maxes in [-1, 1), as the gates of a normalised h are; sums about the window's series count, gated sums
 * within a third of them. */
static int seed_comp(kt_step *s, const comp_dev *cd) {
    unsigned long long n = (unsigned long long)(s->B * cd->overlap * cd->width);
    float series = (float)(cd->rate * cd->overlap);
    return fill(s, K_FILL_F32, cd->state, n, 0, 1, 0) || fill(s, K_FILL_F32, cd->state + n * 4, n, series, 0.5f, 0) ||
                   fill(s, K_FILL_F32, cd->state + 2 * n * 4, n, 0, series / 3, 0)
               ? -1
               : 0;
}

/* Layer l's caches for a step at P: its window ring (all W slots), the compressed entries and the indexer's keys
 * the step reads ((P + 1) / rate, rt_lengths' count; the last one, when P closes a window, the step writes
 * itself), and the compressors' window state. */
static int seed_layer(kt_step *s, const layer_dev *L, long P) {
    const kt_model_config *c = &s->c;
    if (c->arch == KT_ARCH_V32) /* every token 0..P: the MLA cache and the indexer's pages */
        return seed_cache(s, SEED_V32, L->ccache, 0, (unsigned long long)(L->cpages * KT_MLA_PAGE), KT_MLA_V32_DQK, 0,
                          P + 1) ||
                       seed_cache(s, SEED_IDX, L->ikc, 0, (unsigned long long)L->cpages, KT_IDX_DIM, 0, P + 1)
                   ? -1
                   : 0;
    if (seed_cache(s, SEED_V4, L->win, 0, L->wstride, KT_KV_DIM, L->kv_norm, c->window)) return -1;
    if (!L->ccache) return 0; /* a sliding layer: the window only */
    long n = (P + 1) / L->comp.rate;
    if (seed_cache(s, SEED_V4, L->ccache, 0, L->cstride, KT_KV_DIM, L->comp.norm, n) || seed_comp(s, &L->comp))
        return -1;
    if (!L->idx) return 0; /* HCA: no indexer */
    int ID = (int)L->index.width;
    return (L->ikc ? seed_cache(s, SEED_IDX, L->ikc, 0, (unsigned long long)L->cpages, ID, L->index.norm, n)
                   : seed_cache(s, SEED_F32, 0, L->ikeys, L->kstride, ID, L->index.norm, n)) ||
                   seed_comp(s, &L->index)
               ? -1
               : 0;
}

/* With --synthetic (KT_RUN_SEED_KV=0: off), every cache a step at the timed position P = context - 1 reads seeded once
 * at open, before the graph's capture and the first step (kt_step_report times that step; the decoded steps 0..S-1
 * overwrite their own entries and read nothing seeded), so TPOT is never timed on zeros (all-zero keys tie the
 * indexer's every score). A checkpoint's run ignores the switch: its prompt's steps write its caches. */
static int seed_kv(kt_step *s) {
    if (s->w || !env_long("KT_RUN_SEED_KV", 1, 0, 1)) return 0;
    long P = s->ctx - 1;
    for (long l = 0; l < s->c.n_layers; l++)
        if (seed_layer(s, &s->L[l], P)) return -1;
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(s->stream));
    fprintf(stderr, "kt run: KV caches seeded for positions 0..%ld (KT_RUN_SEED_KV=0: zeros)\n", P - 1);
    return 0;
}

/* Bytes of tensor `name` of family's problem p (the family sizes its own buffers). */
static size_t fam_bytes(const char *family, const kt_problem *p, const char *name) {
    const kt_family *f = kt_family_find(family);
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f ? f->tensors(p, t) : 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].count * kt_dtype_size(t[i].dtype);
    return 0;
}

/* An int32 list of n values f(i) uploaded to *out. */
static int upload_ints(dptr *out, long n, int (*f)(const kt_step *, long), const kt_step *s) {
    int32_t *v = malloc((size_t)(n ? n : 1) * 4);
    if (!v) return kt_fail("out of memory");
    for (long i = 0; i < n; i++) v[i] = f(s, i);
    int rc = upload(out, v, (size_t)n * 4);
    free(v);
    return rc;
}

/* mla_indexer's block table row width, the family's: pages of 2 CTX (kernels/mla_indexer.c). */
static long table_width(const kt_step *s) { return kt_idx_pages(2 * s->plan.indexer.dim[1]); }
/* Keys a sequence's pages hold: V4's compressed entries, V3.2's every token. */
static long indexed_per_seq(const kt_step *s) {
    return s->c.arch == KT_ARCH_V32 ? s->ctx : kt_step_entries(s->ctx, s->c.csa_rate);
}
static int table_entry(const kt_step *s, long i) {
    return kt_step_table_entry(indexed_per_seq(s), i / table_width(s), i % table_width(s));
}

static int alloc_indexer(kt_step *s) {
    const kt_problem *p = &s->plan.indexer;
    return upload_ints(&s->itable, s->B * table_width(s), table_entry, s) ||
                   dalloc(&s->iqq, fam_bytes("mla_indexer", p, "q")) ||
                   dalloc(&s->iw, fam_bytes("mla_indexer", p, "w")) ||
                   dalloc(&s->ilogits, fam_bytes("mla_indexer", p, "logits")) ||
                   dalloc(&s->ihist, fam_bytes("mla_indexer", p, "hist")) /* zeroed; every layer leaves it so */
               ? -1
               : 0;
}

/* mla_decode's static lists: the window list of sequence b is its ring's slots (cache-wide ids
 * b * window pages * 64 + slot; the set is the window whatever the ring's order, the length
 * says how many are filled), -1 past the ring; HCA's list every entry of its cache (the length
 * counts the written ones); CSA's length the whole top-k (the indexer's -1 holes are skipped);
 * sliding layers' one-slot list empty. */
static int window_entry(const kt_step *s, long i) {
    long b = i / KT_MLA_V4_WINDOW, j = i % KT_MLA_V4_WINDOW;
    return j < s->c.window ? (int)kt_step_token_id(s->c.window, b, j) : -1;
}
static int hca_entry(const kt_step *s, long i) {
    long n = s->plan.attn[KT_PLAN_HCA].dim[2];
    return (int)kt_step_token_id(n, i / n, i % n);
}
static int csa_length(const kt_step *s, long i) { return (void)i, (int)s->c.index_topk; }
static int minus_one(const kt_step *s, long i) { return (void)s, (void)i, -1; }
static int zero(const kt_step *s, long i) { return (void)s, (void)i, 0; }

static int alloc_attention(kt_step *s) {
    size_t B = (size_t)s->B, QD = (size_t)kt_model_q_dim(&s->c), part = 0, tick = 0;
    for (int m = 0; m < KT_PLAN_MODES; m++) {
        size_t b = s->plan.attn[m].n_dims ? fam_bytes("mla_decode", &s->plan.attn[m], "partials") : 0;
        size_t t = s->plan.attn[m].n_dims ? fam_bytes("mla_decode", &s->plan.attn[m], "tickets") : 0;
        part = b > part ? b : part, tick = t > tick ? t : tick;
    }
    long hn = s->plan.attn[KT_PLAN_HCA].n_dims ? s->plan.attn[KT_PLAN_HCA].dim[2] : 0;
    return upload_ints(&s->wlist, s->B * KT_MLA_V4_WINDOW, window_entry, s) ||
                   upload_ints(&s->hlist, s->B * hn, hca_entry, s) || upload_ints(&s->csa_len, s->B, csa_length, s) ||
                   upload_ints(&s->sl_idx, s->B, minus_one, s) || upload_ints(&s->sl_len, s->B, zero, s) ||
                   dalloc(&s->qb, B * QD * 2) || dalloc(&s->ob, B * QD * 2) ||
                   dalloc(&s->lse, B * (size_t)s->c.n_heads * 4) || dalloc(&s->apart, part) ||
                   dalloc(&s->atick, tick) /* zeroed, and every launch leaves it so */
               ? -1
               : 0;
}

/* moe_route's and moe_gemm's buffers; one workspace and one set of counters serve both GEMMs
 * (they run one after the other and leave the counters zeroed, as kernels/moe_step.c shares them). */
static int alloc_moe(kt_step *s) {
    const kt_step_plan *p = &s->plan;
    size_t pg = fam_bytes("moe_gemm", &p->gateup, "partials"), pd = fam_bytes("moe_gemm", &p->down, "partials");
    size_t cg = fam_bytes("moe_gemm", &p->gateup, "counters"), cd = fam_bytes("moe_gemm", &p->down, "counters");
    size_t BD = (size_t)s->B * s->c.hidden;
    const kt_problem *route = p->route.n_dims ? &p->route : &p->route_hash; /* the same record sizes */
    return dalloc(&s->elog, (size_t)s->B * s->c.n_experts * 4) ||
                   dalloc(&s->ealign, fam_bytes("moe_route", route, "align")) ||
                   dalloc(&s->he, fam_bytes("moe_gemm", &p->gateup, "h")) ||
                   dalloc(&s->hse, fam_bytes("moe_gemm", &p->gateup, "hs")) || dalloc(&s->mpart, pg > pd ? pg : pd) ||
                   dalloc(&s->mcnt, cg > cd ? cg : cd) || dalloc(&s->moe_outb, BD * 2) || dalloc(&s->no_shared, BD * 2)
               ? -1
               : 0;
}

/* rt_gemv's scratch: the most split sums (S x B x N floats) of any GEMV of the step that leaves
 * them to its consumer (those with a plain output only when split). */
static size_t gemv_scratch(const kt_model_config *c, long B) {
    long H = c->hc_mult, D = c->hidden, HD = c->head_dim, ID = c->index_dim;
    long nk[][3] = {{(2 + H) * H, H * D, 0},
                    {H, H * D, 0},
                    {2 * HD, D, 0},
                    {4 * HD + 4 * ID + c->index_heads, D, 0}, /* a CSA layer's compressors + indexer weights */
                    {c->n_experts, D, 0},
                    {c->head_rows, D, 1}}; /* {N, K, plain output} */
    size_t most = 16;
    for (size_t i = 0; i < sizeof nk / sizeof nk[0]; i++) {
        if (nk[i][0] <= 0 || nk[i][1] < 128) continue; /* a projection this model lacks (V3.2: no HC) */
        long S = gemv_splits(B, nk[i][0], nk[i][1]);
        size_t bytes = (size_t)(S * B * nk[i][0]) * 4;
        if ((!nk[i][2] || S > 1) && bytes > most) most = bytes;
    }
    return most;
}

/* The scratch both models' steps share: rt_gemv's split sums and the tile counters of the GEMVs
 * with a plain output (the gate's and the LM head's rows at most), zeroed (the last block of a
 * tile leaves its counter at 0); qgemm's act_quant codes and scales above QGEMM_FUSED_MAX_M rows
 * (its K at most: V4's o_a group input and o_b's, the shared expert's, V3.2's o_proj and MLPs). */
static int alloc_scratch(kt_step *s) {
    const kt_model_config *c = &s->c;
    long rows = c->head_rows > c->n_experts ? c->head_rows : c->n_experts;
    long ks[] = {c->o_groups > 0 ? kt_model_group_in(c) : 0, /* V3.2 has no o_a groups */
                 c->o_groups * c->o_lora, c->moe_inter * (c->n_shared > 1 ? c->n_shared : 1), c->inter,
                 c->n_heads * c->v_head},
         k = 128;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) k = ks[i] > k ? ks[i] : k;
    s->gv_tiles = (size_t)((s->B + 7) / 8) * (size_t)((rows + 31) / 32);
    s->xq_bytes = s->B > QGEMM_FUSED_MAX_M ? (size_t)(s->B * k) : 0;
    size_t E = (size_t)c->n_experts, H = (size_t)c->hc_mult, tiles = (E + 31) / 32 * 4;
    if (s->B == 1 && (dalloc(&s->hcbar, 8) || dalloc(&s->hcss, 64 * 4))) return -1;
    long HD = c->head_dim, csa_rows = 4 * HD + 4 * c->index_dim + c->index_heads; /* gemv_scratch's CSA row */
    s->cpart_bytes = csa_split(s) && c->hidden >= 128 ? (size_t)gemv_splits(1, csa_rows, c->hidden) * 4 * HD * 4 : 0;
    if (s->cpart_bytes && dalloc(&s->cpart, s->cpart_bytes)) return -1;
    if (gate_beside(s) && (dalloc(&s->gopart, 32 * H * E * 4) || dalloc(&s->gocount, tiles) ||
                           dalloc(&s->go, H * E * 4) || dalloc(&s->gypart, 32 * E * 4) || dalloc(&s->gycount, tiles) ||
                           dalloc(&s->gy, E * 4) || dalloc(&s->gprn, (H + 1) * 4)))
        return -1;
    return dalloc(&s->gvpart, s->gv_bytes = gemv_scratch(c, s->B)) || dalloc(&s->gvcount, s->gv_tiles * 4) ||
                   dalloc(&s->xq, s->xq_bytes) || dalloc(&s->xs, s->xq_bytes / 128 * 4)
               ? -1
               : 0;
}

typedef struct dbuf {
    dptr *p;
    size_t bytes;
} dbuf;

static int alloc_bufs(const dbuf *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (dalloc(a[i].p, a[i].bytes)) return -1;
    return 0;
}

/* V3.2's activation buffers for B sequences (the families' through alloc_indexer and alloc_moe;
 * mla_decode's q, out and partials here: its q is the absorbed 576 a head). */
static int alloc_acts_v32(kt_step *s) {
    const kt_model_config *c = &s->c;
    size_t B = (size_t)s->B, D = (size_t)c->hidden, QL = (size_t)c->q_lora, H = (size_t)c->n_heads;
    size_t QK = (size_t)(c->qk_nope + c->rope_dim), VH = (size_t)c->v_head, ID = (size_t)c->index_dim;
    size_t IQ = (size_t)c->index_heads * ID, K = (size_t)c->top_k, KV = (size_t)s->L[0].wkv.n;
    size_t I = (size_t)(c->moe_inter * c->n_shared),
           part = fam_bytes("mla_decode", &s->plan.attn[KT_PLAN_DSA], "partials"),
           tick = fam_bytes("mla_decode", &s->plan.attn[KT_PLAN_DSA], "tickets");
    for (long l = 0; l < c->n_layers; l++)
        if (c->mlp[l] == KT_MLP_DENSE && (size_t)c->inter > I) I = (size_t)c->inter;
    const dbuf a[] = {{&s->tok, B * 4},
                      {&s->pos, 4},
                      {&s->x, B * D * 4},
                      {&s->h, B * D * 4},
                      {&s->hq, B * D},
                      {&s->hs, B * D / 128 * 4},
                      {&s->qa, B * QL * 2},
                      {&s->qrq, B * QL},
                      {&s->qrs, B * QL / 128 * 4},
                      {&s->q, B * H * QK * 2},
                      {&s->kvraw, B * KV * 2},
                      {&s->iq, B * IQ * 2},
                      {&s->ik, B * ID * 2},
                      {&s->qb, B * H * KT_MLA_V32_DQK * 2},
                      {&s->ob, B * H * KT_MLA_DV * 2},
                      {&s->lse, B * H * 4},
                      {&s->apart, part},
                      {&s->atick, tick}, /* zeroed, and every launch leaves it so */
                      {&s->og, B * H * VH * 2},
                      {&s->y_attn, B * D * 2},
                      {&s->eidx, B * K * 4},
                      {&s->ew, B * K * 4},
                      {&s->gu, B * 2 * I * 2},
                      {&s->a_sh, B * I * 2},
                      {&s->y_sh, B * D * 2},
                      {&s->yfin, B * D * 4},
                      {&s->logits, B * (size_t)c->head_rows * 4},
                      {&s->next, B * 4},
                      {&s->lens, 3 * B * 4}};
    return alloc_bufs(a, sizeof a / sizeof a[0]) || alloc_scratch(s) || upload_ints(&s->csa_len, s->B, csa_length, s) ||
                   alloc_indexer(s) || (s->plan.route.n_dims && alloc_moe(s))
               ? -1
               : 0;
}

/* Activation buffers for B sequences. */
static int alloc_acts(kt_step *s) {
    const kt_model_config *c = &s->c;
    size_t B = (size_t)s->B, D = (size_t)c->hidden, H = (size_t)c->hc_mult, QL = (size_t)c->q_lora;
    size_t QD = (size_t)kt_model_q_dim(c), HD = (size_t)c->head_dim, G = (size_t)c->o_groups, OL = (size_t)c->o_lora;
    size_t K = (size_t)c->top_k, I = (size_t)c->moe_inter, ID = (size_t)(c->index_heads * c->index_dim);
    const dbuf a[] = {{&s->tok, B * 4},
                      {&s->pos, 4},
                      {&s->xbuf[0], B * H * D * 4},
                      {&s->xbuf[1], B * H * D * 4},
                      {&s->pcbuf[0], B * (H + H * H) * 4},
                      {&s->pcbuf[1], B * (H + H * H) * 4},
                      {&s->hcmix, B * (2 + H) * H * 4},
                      {&s->h, B * D * 4},
                      {&s->hq, B * D},
                      {&s->hs, B * D / 128 * 4},
                      {&s->qa, B * (QL + HD) * 2}, /* q_a and kv: the one GEMM's rows */
                      {&s->qrq, B * QL},
                      {&s->qrs, B * QL / 128 * 4},
                      {&s->q, B * (QD + ID) * 2}, /* CSA layers: the heads, then the indexer's query */
                      {&s->qf, B * QD * 4},
                      {&s->og, B * QD * 2},
                      {&s->oa_g, B * G * OL * 2},
                      {&s->oa, B * G * OL * 2},
                      {&s->y_attn, B * D * 2},
                      {&s->eidx, B * K * 4},
                      {&s->ew, B * K * 4},
                      {&s->a_e, B * K * I * 2},
                      {&s->aq_e, B * K * I},
                      {&s->as_e, B * K * I / 128 * 4},
                      {&s->y_e, B * K * D * 4},
                      {&s->gu, B * 2 * I * 2},
                      {&s->a_sh, B * I * 2},
                      {&s->y_sh, B * D * 2},
                      {&s->moe_out, B * D * 4},
                      {&s->yfin, B * D * 4},
                      {&s->logits, B * (size_t)c->head_rows * 4},
                      {&s->next, B * 4},
                      {&s->cemit[0], B * HD * 4}, /* the KV compressor's entry, then the indexer's */
                      {&s->cemit[1], B * (size_t)c->index_dim * 4},
                      {&s->ccount[0], B * 4},
                      {&s->ccount[1], B * 4}};
    return alloc_bufs(a, sizeof a / sizeof a[0]) || alloc_scratch(s) || dalloc(&s->lens, 3 * B * 4) ||
                   (s->plan.family[KT_PART_INDEXER] && alloc_indexer(s)) ||
                   (s->plan.family[KT_PART_ATTENTION] && alloc_attention(s)) ||
                   (s->plan.family[KT_PART_MOE] && alloc_moe(s))
               ? -1
               : 0;
}

/* The rope's inverse frequencies on the device (f32). */
static int upload_inv(const kt_rope *r, long rope_dim, dptr *out) {
    double inv[256];
    float v[256];
    kt_rope_inv_freq(r, rope_dim, inv);
    for (long i = 0; i < rope_dim / 2; i++) v[i] = (float)inv[i];
    return upload(out, v, (size_t)(rope_dim / 2) * 4);
}

/* Start-up's parallel compiles: the (family, config) pairs the step's walk collected, each
 * compiled into the JIT cache by one of a few threads (kt_compile is thread-safe: the tuner's
 * compile pool runs it the same way); the dispatches that follow load them from the cache. */
typedef struct prewarm {
    const kt_family *f[2 * MAX_FAMS];
    kt_config c[2 * MAX_FAMS];
    int n, next, arch;
    pthread_mutex_t lock;
} prewarm;

static void *prewarm_thread(void *arg) {
    prewarm *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        int i = w->next++;
        pthread_mutex_unlock(&w->lock);
        if (i >= w->n) return NULL;
        kt_cubin cubin; /* a failure is reported by the dispatch that compiles it again */
        if (!kt_compile(w->f[i], &w->c[i], w->arch, &cubin)) kt_cubin_free(&cubin);
    }
}

static int same_config(const kt_config *a, const kt_config *b) { return !memcmp(a, b, sizeof *a); }

/* Walks the step of each set without launching (fam_p only chooses configs), then compiles
 * the distinct (family, config) pairs in parallel. */
static int compile_ahead(kt_step *s, int sets) {
    double t0 = kt_now();
    static prewarm w;
    memset(&w, 0, sizeof w);
    w.arch = kt_gpu_arch();
    s->collecting = 1;
    for (int set = 0; set < sets; set++) {
        s->set = set;
        int rc = enqueue(s);
        for (int i = 0; !rc && i < s->n_fams[set]; i++) {
            const fam_k *k = &s->fams[set][i];
            int seen = 0;
            for (int j = 0; j < w.n && !seen; j++) seen = w.f[j] == k->f && same_config(&w.c[j], &k->mod.config);
            if (!seen) w.f[w.n] = k->f, w.c[w.n++] = k->mod.config;
        }
        s->n_fams[set] = 0;
        if (rc) return s->collecting = 0, -1;
    }
    s->collecting = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)(cpus < 1 ? 1 : cpus > 16 ? 16 : cpus);
    if (nt > w.n) nt = w.n;
    pthread_t th[16];
    pthread_mutex_init(&w.lock, NULL);
    int started = 0;
    while (started < nt && !pthread_create(&th[started], NULL, prewarm_thread, &w)) started++;
    if (!started) prewarm_thread(&w);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&w.lock);
    s->prewarm_ms = (kt_now() - t0) * 1e3;
    s->prewarmed = w.n;
    fprintf(
        stderr,
        "kt run: %d family kernels (both sets) compiled ahead in %.0f ms on %d threads (JIT cache hits are loads)\n",
        w.n, s->prewarm_ms, started ? started : 1);
    return 0;
}

/* The routed experts' format, moe_gemm's FORMAT index: the checkpoint's (every MoE layer's
 * experts MXFP4, or none), or --experts for seeded weights (default FP8); a --experts that
 * contradicts the checkpoint fails. */
static int experts_format(const kt_model_config *c, const kt_st_set *w, const char *want, int *fmt) {
    static const char *const stored[2] = {"not MXFP4 (loaded as FP8)", "MXFP4"};
    int asked = KT_MOE_FP8;
    while (want && kt_moe_format_names[asked] && strcmp(kt_moe_format_names[asked], want)) asked++;
    if (want && !kt_moe_format_names[asked]) return kt_fail("--experts %s: expected fp8 or mxfp4", want);
    *fmt = asked;
    for (long l = 0, first = -1; w && l < c->n_layers; l++) {
        if (c->mlp[l] == KT_MLP_DENSE) continue;
        int fp4 = kt_model_experts_are_mxfp4(c, w, l);
        if (fp4 < 0) return -1;
        if (first >= 0 && fp4 != *fmt)
            return kt_fail("layer %ld's routed experts are %s, layer %ld's %s: kt loads one format", l, stored[fp4],
                           first, stored[*fmt]);
        if (first < 0 && want && fp4 != asked)
            return kt_fail("--experts %s: the checkpoint's routed experts are %s (--experts chooses seeded ones)", want,
                           stored[fp4]);
        if (first < 0) first = l, *fmt = fp4;
    }
    return 0;
}

/* Logs which parts run a family and which stay plain (and why). */
static void log_plan(const kt_step *s) {
    int v32 = s->c.arch == KT_ARCH_V32;
    char moe[160];
    snprintf(moe, sizeof moe, "moe_route (%s) + moe_gemm (%s)",
             v32                                                 ? "ROUTER=V3"
             : s->plan.route.n_dims && s->plan.route_hash.n_dims ? "V4, HASH for the hash-routed layers"
             : s->plan.route_hash.n_dims                         ? "HASH"
                                                                 : "V4",
             kt_moe_format_names[s->plan.experts]);
    const char *const fams[2][KT_N_PARTS] = {{"mla_indexer", "mla_decode (LAYOUT=V4)", moe},
                                             {"mla_indexer (every token)", "mla_decode (LAYOUT=V32)", moe}};
    static const char *const plain[KT_N_PARTS] = {"rt_index_score + rt_topk", "rt_attention",
                                                  "rt_router + rt_moe_up/down/combine"};
    if (v32) {
        fprintf(stderr, "kt run: deepseek_v32: its parts run their kt families only (no plain reference kernels; "
                        "--plain-kernels is V4's)\n");
        if (s->plan.family[KT_PART_MOE])
            fprintf(stderr, "kt run: moe       moe_gemm clamps SwiGLU at 10 (V4's swiglu_limit), V3.2 has no clamp: "
                            "the same while |gate|, |up| < 10\n");
    }
    for (int i = 0; i < KT_N_PARTS; i++) {
        if (s->plan.family[i])
            fprintf(stderr, "kt run: %-9s kt family %s\n", kt_step_part_names[i], fams[v32][i]);
        else if (v32)
            fprintf(stderr, "kt run: %-9s no kt family (%s)\n", kt_step_part_names[i], s->plan.why[i]);
        else
            fprintf(stderr, "kt run: %-9s plain %s (%s)\n", kt_step_part_names[i], plain[i], s->plan.why[i]);
    }
}

static int load_rt(kt_step *s) {
    double t0 = kt_now();
    kt_cubin cubin;
    if (kt_compile_source("model.cu", kt_gpu_arch(), &cubin)) return -1;
    int rc = 0;
    for (int k = 0; k < N_RT && !rc; k++) {
        const char *names[] = {rt_names[k], NULL};
        rc = kt_module_load_kernels("model.cu", names, &cubin, &s->rt[k]);
    }
    kt_cubin_free(&cubin);
    s->rt_ms = (kt_now() - t0) * 1e3;
    if (!rc) fprintf(stderr, "kt: model.cu: %d plain kernels loaded (runtime/model.cu) in %.0f ms\n", N_RT, s->rt_ms);
    return rc;
}

/* V3.2 runs its indexer, attention and (with routed layers) MoE on their families only: -1 naming
 * the part a family cannot take (the plan's reason). */
static int v32_refuses(const kt_step_plan *p) {
    for (int i = 0; i < KT_N_PARTS; i++) {
        int needed = i != KT_PART_MOE || strcmp(p->why[i], "no routed MoE layer");
        if (!p->family[i] && needed)
            return kt_fail("deepseek_v32: kt's GPU step runs V3.2's %s on its kt family only (V3.2 has no plain "
                           "kernels): %s; the float64 host reference runs it: kt run --reference kt|exact",
                           kt_step_part_names[i], p->why[i]);
    }
    return 0;
}

/* V3.2's embedding, final norm, LM head, RoPE table and buffers. */
static int load_top_v32(kt_step *s) {
    return plain(s, &s->embed, "model.embed_tokens.weight", 0) || plain(s, &s->norm, "model.norm.weight", 0) ||
                   plain_head(s, "lm_head.weight") || upload_inv(&s->c.rope_main, s->c.rope_dim, &s->inv_main) ||
                   alloc_acts_v32(s)
               ? -1
               : 0;
}

/* The kernel part of start-up: model.cu's load, the compiles ahead, every dispatch (lookup, cache read, load). */
static double kernel_ms(const kt_step *s) { return s->rt_ms + s->prewarm_ms + s->dispatch_ms; }

int kt_step_open(const kt_model_config *c, const kt_st_set *w, const kt_run_options *o, kt_step **out) {
    if (c->index_heads > 64 || c->hc_mult > 8 || c->top_k > 64)
        return kt_fail("kt's plain kernels take index_n_heads <= 64, hc_mult <= 8, num_experts_per_tok <= 64");
    if (c->arch == KT_ARCH_V4 && (c->hc_mult * c->hidden > RT_HC_HD || c->hidden > RT_HC_D))
        return kt_fail("kt's HC module takes hc_mult x hidden_size <= %d and hidden_size <= %d (here %ld x %ld)",
                       RT_HC_HD, RT_HC_D, c->hc_mult, c->hidden);
    if (c->arch == KT_ARCH_V4 && c->q_lora > RT_QKV_NW * RT_GV_THREADS) /* rt_qkv_a's weights in registers */
        return kt_fail("kt's rt_qkv_a takes q_lora_rank <= %d (here %ld)", RT_QKV_NW * RT_GV_THREADS, c->q_lora);
    kt_step_plan plan; /* decided before the GPU opens: V3.2's refusal needs none */
    int experts = KT_MOE_FP8;
    if (experts_format(c, w, o->experts, &experts)) return -1;
    kt_step_plan_make(c, o->batch, o->context, o->plain_kernels, o->synthetic, experts, &plan);
    if (c->arch == KT_ARCH_V32 && v32_refuses(&plan)) return -1;
    kt_device_info info;
    if (kt_gpu_open(0, &info)) return -1;
    kt_step *s = calloc(1, sizeof *s);
    *out = s;
    s->c = *c;
    s->B = o->batch;
    s->ctx = o->context;
    s->w = w;
    s->seed = o->seed;
    s->plan = plan;
    log_plan(s);
    if (experts == KT_MOE_MXFP4 && !s->plan.family[KT_PART_MOE])
        return kt_fail("MXFP4 routed experts run on moe_gemm only (the plain rt_moe_up/down read FP8), and the MoE "
                       "part is plain here: %s",
                       s->plan.why[KT_PART_MOE]);
    if (o->db_path && kt_db_open(o->db_path, 1, &s->db)) return -1;
    KT_CHECK(CU, kt_cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < N_SIDES; i++) {
        KT_CHECK(CU, kt_cu.cuStreamCreate(&s->side[i], CU_STREAM_NON_BLOCKING));
        KT_CHECK(CU, kt_cu.cuEventCreate(&s->fork_ev[i], CU_EVENT_DISABLE_TIMING));
        KT_CHECK(CU, kt_cu.cuEventCreate(&s->join_ev[i], CU_EVENT_DISABLE_TIMING));
    }
    s->cur = s->stream;
    const char *one = getenv("KT_STEP_ONE_STREAM");
    s->sides = !(one && !strcmp(one, "1"));
    const char *gi = getenv("KT_STEP_GATE_INLINE");
    s->gate_inline = gi && !strcmp(gi, "1");
    const char *sp = getenv("KT_STEP_HC_SPREAD");
    s->hc_spread = !(sp && !strcmp(sp, "0"));
    s->gate_y_blocks = (int)env_long("KT_STEP_GATE_Y_BLOCKS", 128, 8, 1024);
    s->csa_split = (int)env_long("KT_STEP_CSA_SPLIT", 1, 0, 1);
    if (env_long("KT_STEP_GEMV_LT", 1, 0, 1) && s->B >= env_long("KT_STEP_GEMV_LT_MIN_B", 16, 2, KT_MAX_INT_VALUE)) {
        if (kt_lt_gemv_open(&s->lt)) return -1;
        fprintf(stderr, "kt run: the f32 GEMVs but the first HC module's (compressors, indexer weights, gate, LM "
                        "head) as cuBLASLt TF32 matmuls (at B >= KT_STEP_GEMV_LT_MIN_B; KT_STEP_GEMV_LT=0: rt_gemv)\n");
    }
    for (int i = 0; i < MAX_EVENTS; i++) KT_CHECK(CU, kt_cu.cuEventCreate(&s->ev[i], CU_EVENT_DEFAULT));
    if (load_rt(s)) return -1;
    kt_db_device dev;
    kt_gpu_db_device(&info, &dev);
    /* the setting of the step's bf16 all-reduce (hidden x B); the MoE's f32 one is twice that */
    if (o->tp && (kt_tp_configure(s->db, &dev, o->tp, (size_t)o->batch * (size_t)c->hidden * 2, NULL) ||
                  kt_tp_open(o->tp, 0, NULL, &s->tp)))
        return -1;
    if (s->tp) fprintf(stderr, "kt run: NCCL world of %d: the step all-reduces after attention and MoE\n", o->tp);
    s->n_list = kt_model_tensors(c, NULL, 0);
    s->list = malloc((size_t)s->n_list * sizeof *s->list);
    kt_model_tensors(c, s->list, s->n_list);
    qsort(s->list, (size_t)s->n_list, sizeof *s->list, by_name);
    s->L = calloc((size_t)c->n_layers, sizeof *s->L);
    double t0 = kt_now();
    for (long l = 0; l < c->n_layers; l++)
        if ((c->arch == KT_ARCH_V32 ? load_layer_v32 : load_layer)(s, l)) return -1;
    if (c->arch == KT_ARCH_V32
            ? load_top_v32(s)
            : (plain(s, &s->embed, "model.embed_tokens.weight", 0) || plain(s, &s->hh_fn, "model.hc_head.hc_fn", 0) ||
               plain(s, &s->hh_base, "model.hc_head.hc_base", 0) ||
               plain(s, &s->hh_scale, "model.hc_head.hc_scale", 0) || plain(s, &s->norm, "model.norm.weight", 0) ||
               plain_head(s, "head.weight") || upload_inv(&c->rope_main, c->rope_dim, &s->inv_main) ||
               upload_inv(&c->rope_compress, c->rope_dim, &s->inv_comp) || alloc_acts(s)))
        return -1;
    s->weight_bytes -= 4.0 * c->vocab * c->hidden; /* the embedding: only B rows are read */
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(s->stream));
    fprintf(stderr, "kt run: weights on the device in %.1f s (%.2f GB touched a step besides the routed experts)\n",
            kt_now() - t0, s->weight_bytes / 1e9);
    if (seed_kv(s)) return -1;
    double t1 = kt_now();
    if (compile_ahead(s, s->db ? 2 : 1)) return -1;
    s->dispatch_ms = 0;
    if (build_graph(s, 0)) {
        if (!s->sides) return -1;
        fprintf(stderr, "kt run: the step with side chains did not capture (%s): one stream\n", kt_error());
        s->sides = 0, s->cur = s->stream;
        if (build_graph(s, 0)) return -1;
    }
    fprintf(stderr, "kt run: %s\n",
            s->sides ? "side chains on second streams (the compressors beside the query's GEMMs and a CSA layer's "
                       "two beside each other, a CSA layer's query prep beside its indexer, the shared expert beside "
                       "the router, at B = 1 each HC module's Sinkhorn beside its block; KT_STEP_ONE_STREAM=1: one "
                       "stream)"
                     : "one stream");
    if (c->arch == KT_ARCH_V4 && s->B == 1 && s->plan.family[KT_PART_MOE])
        fprintf(stderr, "kt run: %s\n",
                s->gate_inline ? "the MoE gate's GEMV of h in line (KT_STEP_GATE_INLINE=1)"
                               : "the MoE gate's logits by rt_gate_comb from its projections of the old streams (after "
                                 "the attention module) and of the attention output (beside the MoE module); "
                                 "KT_STEP_GATE_INLINE=1: the GEMV of h");
    if (c->arch == KT_ARCH_V4 && s->B == 1)
        fprintf(stderr, "kt run: %s\n",
                s->hc_spread ? "each HC module over all its GEMV's blocks (rt_hc_spread; KT_STEP_HC_SPREAD=0: its last)"
                             : "each HC module in its GEMV's last block (KT_STEP_HC_SPREAD=0)");
    if (csa_split(s))
        fprintf(stderr, "kt run: a CSA layer's indexer projections in their own GEMV, its KV compressor beside the "
                        "indexer (KT_STEP_CSA_SPLIT=0: one GEMV)\n");
    s->resolve_ms = (kt_now() - t1) * 1e3;
    if (s->db && build_graph(s, 1)) return -1;
    fprintf(stderr, "kt run: %d kernels resolved and the step captured as one CUDA graph in %.0f ms%s\n",
            s->n_fams[0] + N_RT, s->resolve_ms, s->db ? " (and the family defaults' graph)" : "");
    fprintf(stderr,
            "kt run: kernel part of start-up %.0f ms (model.cu %.0f, compiles ahead %.0f, %d dispatches %.0f)\n",
            kernel_ms(s), s->rt_ms, s->prewarm_ms, s->n_fams[0] + s->n_fams[1], s->dispatch_ms);
    return 0;
}

int kt_step_run(kt_step *s, const int32_t *token, long pos, double *logits) {
    int p = (int)pos;
    long n = s->B * s->c.head_rows;
    KT_CHECK(CU, kt_cu.cuMemcpyHtoD(s->tok, token, (size_t)s->B * 4));
    KT_CHECK(CU, kt_cu.cuMemcpyHtoD(s->pos, &p, 4));
    KT_CHECK(CU, kt_cu.cuGraphLaunch(s->graph[0], s->stream));
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(s->stream));
    if (!s->host_logits) s->host_logits = malloc((size_t)n * sizeof(float));
    KT_CHECK(CU, kt_cu.cuMemcpyDtoH(s->host_logits, s->logits, (size_t)n * 4));
    for (long i = 0; i < n; i++) logits[i] = s->host_logits[i];
    return 0;
}

/* ------------------------------------------------------------------ report */

/* Mean ms of `reps` replays of graph g. */
static int time_graph(kt_step *s, CUgraphExec g, int reps, double *ms) {
    KT_CHECK(CU, kt_cu.cuGraphLaunch(g, s->stream));
    KT_CHECK(CU, kt_cu.cuEventRecord(s->ev[0], s->stream));
    for (int i = 0; i < reps; i++) KT_CHECK(CU, kt_cu.cuGraphLaunch(g, s->stream));
    KT_CHECK(CU, kt_cu.cuEventRecord(s->ev[1], s->stream));
    KT_CHECK(CU, kt_cu.cuEventSynchronize(s->ev[1]));
    float t;
    KT_CHECK(CU, kt_cu.cuEventElapsedTime(&t, s->ev[0], s->ev[1]));
    *ms = t / reps;
    return 0;
}

/* Each layer's ids in route_log (the experts in [0, E)) into s->occ: the distinct experts, the busiest one's slots
 * and the 8-slot tiles (moe_gemm's DIST=gate models this occupancy; dense layers: zeros). */
static int count_touched(kt_step *s) {
    const kt_model_config *c = &s->c;
    long n = s->B * c->top_k, E = c->n_experts;
    int32_t *ids = malloc((size_t)(c->n_layers * n) * sizeof *ids);
    if (!s->occ) s->occ = calloc((size_t)c->n_layers, sizeof *s->occ);
    if (!ids || !s->occ) return free(ids), kt_fail("out of host memory");
    int rc = kt_status_CU(kt_cu.cuMemcpyDtoH(ids, s->route_log, (size_t)(c->n_layers * n) * 4), "cuMemcpyDtoH",
                          __FILE__, __LINE__);
    for (long l = 0; l < c->n_layers && !rc; l++)
        s->occ[l] = c->mlp[l] == KT_MLP_DENSE ? (kt_moe_occupancy){0, 0, 0} : kt_moe_occupancy_of(ids + l * n, n, E, 8);
    free(ids);
    return rc ? -1 : 0;
}

/* One eager step with an event between ops: ms per op name into rows. */
static int profile(kt_step *s, prof_row *rows, int *n_rows) {
    if (!s->route_log && dalloc(&s->route_log, (size_t)(s->c.n_layers * s->B * s->c.top_k) * 4)) return -1;
    s->profiling = 1;
    s->n_events = 0;
    s->set = 0;
    int rc = enqueue(s);
    s->profiling = 0;
    if (rc) return -1;
    KT_CHECK(CU, kt_cu.cuStreamSynchronize(s->stream));
    if (count_touched(s)) return -1;
    *n_rows = 0;
    for (int i = 0; i + 1 < s->n_events; i++) {
        float ms;
        KT_CHECK(CU, kt_cu.cuEventElapsedTime(&ms, s->ev[i], s->ev[i + 1]));
        int r = 0;
        while (r < *n_rows && strcmp(rows[r].name, s->ev_name[i])) r++;
        if (r == *n_rows) rows[(*n_rows)++] = (prof_row){s->ev_name[i], 0, 0};
        rows[r].ms += ms;
        rows[r].calls++;
    }
    return 0;
}

/* Bytes a step at position pos must move: the weights it reads, the routed experts its tokens
 * pick (the distinct experts of each layer with experts in the profiled step, which runs the timed
 * step's inputs; before it, at most B*K), and the KV it reads. */
static double step_bytes(const kt_step *s, long pos) {
    const kt_model_config *c = &s->c;
    double most = (double)(s->B * c->top_k < c->n_experts ? s->B * c->top_k : c->n_experts);
    double kv = 0, experts = 0;
    for (long l = 0; l < c->n_layers; l++) {
        if (c->mlp[l] != KT_MLP_DENSE) experts += s->occ ? (double)s->occ[l].touched : most;
        if (c->attn[l] == KT_ATTN_DSA) { /* V3.2: the indexer reads every key, mla_decode its top-k */
            long n = pos + 1, k = n < c->index_topk ? n : c->index_topk;
            kv += (double)n * (KT_IDX_DIM + 4) + (double)k * KT_MLA_V32_TOKEN;
            continue;
        }
        long win = pos + 1 < c->window ? pos + 1 : c->window, comp = 0;
        if (c->attn[l] == KT_ATTN_HCA) comp = (pos + 1) / c->hca_rate;
        if (c->attn[l] == KT_ATTN_CSA) {
            long n = (pos + 1) / c->csa_rate;
            comp = n < c->index_topk ? n : c->index_topk;
            /* the indexer reads every key: mla_indexer's e4m3 codes + f32 scale, or f32 */
            kv += (double)n * (s->plan.family[KT_PART_INDEXER] ? KT_IDX_DIM + 4 : c->index_dim * 4);
        }
        kv += (double)(win + comp) * KT_KV_TOKEN_BYTES;
    }
    return s->weight_bytes + experts * s->expert_bytes + kv * s->B;
}

/* Device copy bandwidth (bytes read + written per second) over a 256 MB buffer. */
static int copy_bandwidth(double *bw) {
    size_t n = 256u << 20;
    dptr a, b;
    if (dalloc(&a, n) || dalloc(&b, n)) return -1;
    KT_CHECK(CU, kt_cu.cuMemcpyDtoD(b, a, n));
    KT_CHECK(CU, kt_cu.cuCtxSynchronize());
    double t0 = kt_now();
    for (int i = 0; i < 10; i++) KT_CHECK(CU, kt_cu.cuMemcpyDtoD(b, a, n));
    KT_CHECK(CU, kt_cu.cuCtxSynchronize());
    *bw = 2.0 * n * 10 / (kt_now() - t0);
    kt_cu.cuMemFree(a), kt_cu.cuMemFree(b);
    return 0;
}

/* The distinct routed experts a layer with experts read in the profiled step, on average. */
static double mean_touched(const kt_step *s) {
    double sum = 0, layers = 0;
    for (long l = 0; l < s->c.n_layers; l++)
        if (s->c.mlp[l] != KT_MLP_DENSE) sum += (double)s->occ[l].touched, layers++;
    return layers ? sum / layers : 0;
}

/* The mean occupancy of the profiled step's layers of MLP kind `kind` (routed or hash-routed) as a JSON object. */
static void occupancy_json(FILE *f, const kt_step *s, kt_mlp_type kind) {
    double t = 0, b = 0, tiles = 0;
    long n = 0;
    for (long l = 0; l < s->c.n_layers; l++)
        if (s->c.mlp[l] == kind)
            t += (double)s->occ[l].touched, b += (double)s->occ[l].busiest, tiles += (double)s->occ[l].tiles, n++;
    double d = n ? (double)n : 1.0;
    fprintf(f, "{\"layers\": %ld, \"touched\": %.2f, \"busiest\": %.2f, \"tiles8\": %.2f}", n, t / d, b / d, tiles / d);
}

/* KT_RUN_PROBE=path (a debug dump, for tests/gpu/seedkv.sh): after the profiled step at P, its logits and every
 * indexed layer's top-k lists, so a check can tell a real selection from all-zero logits' ties (the first k
 * entries): int32 B, head_rows, topk, lists, seq_ids (a sequence's cache-wide ids), then f32 logits [B][head_rows],
 * then int32 [lists][B][topk] (cache-wide ids, -1 holes). Unset: nothing. */
static int write_probe(const kt_step *s) {
    const char *path = getenv("KT_RUN_PROBE");
    if (!path || !*path) return 0;
    long V = s->c.head_rows, K = s->c.index_topk, lists = 0, seq_ids = 0;
    for (long l = 0; l < s->c.n_layers; l++)
        if (s->L[l].idx) lists++, seq_ids = seq_ids ? seq_ids : kt_step_token_id(s->L[l].max_entries, 1, 0);
    int32_t head[5] = {s->B, (int32_t)V, (int32_t)K, (int32_t)lists, (int32_t)seq_ids};
    size_t nl = (size_t)(s->B * V), ni = (size_t)(s->B * K);
    float *lg = malloc(nl * 4);
    int32_t *idx = malloc((ni ? ni : 1) * 4);
    FILE *f = fopen(path, "wb");
    int rc = !lg || !idx || !f ? kt_fail("KT_RUN_PROBE: cannot write %s", path) : 0;
    if (!rc) rc = kt_status_CU(kt_cu.cuMemcpyDtoH(lg, s->logits, nl * 4), "cuMemcpyDtoH", __FILE__, __LINE__);
    if (!rc && (fwrite(head, 4, 5, f) != 5 || fwrite(lg, 4, nl, f) != nl)) rc = kt_fail("writing %s failed", path);
    for (long l = 0; l < s->c.n_layers && !rc; l++) {
        if (!s->L[l].idx) continue;
        rc = kt_status_CU(kt_cu.cuMemcpyDtoH(idx, s->L[l].idx, ni * 4), "cuMemcpyDtoH", __FILE__, __LINE__);
        if (!rc && fwrite(idx, 4, ni, f) != ni) rc = kt_fail("writing %s failed", path);
    }
    if (f) fclose(f);
    free(lg), free(idx);
    if (!rc) fprintf(stderr, "kt run: the step at %ld's logits and %ld top-k lists in %s\n", s->ctx - 1, lists, path);
    return rc;
}

int kt_step_report(kt_step *s, const kt_run_options *o) {
    int p = (int)(s->ctx - 1), reps = 20;
    KT_CHECK(CU, kt_cu.cuMemcpyHtoD(s->pos, &p, 4)); /* time the step at the context's last position */
    double ms[2] = {0, 0}, bw;
    prof_row rows[64];
    int n_rows;
    for (int g = 0; g < s->n_graphs; g++)
        if (time_graph(s, s->graph[g], reps, &ms[g])) return -1;
    /* the eager step is the one a profiler started with --profile-from-start off sees (ncu: each
     * kernel of the step at the context's last position, tests/gpu/rt.sh) */
    KT_CHECK(CU, kt_cu.cuProfilerStart());
    int rc = profile(s, rows, &n_rows);
    KT_CHECK(CU, kt_cu.cuProfilerStop());
    if (rc || write_probe(s) || copy_bandwidth(&bw)) return -1;
    double bytes = step_bytes(s, p), floor_ms = bytes / bw * 1e3;
    int levels[4] = {0};
    for (int i = 0; i < s->n_fams[0]; i++) levels[s->fams[0][i].level]++;
    double touched = mean_touched(s);
    printf("kt run: B=%d context=%ld layers=%ld tp_shapes=%d: TPOT %.3f ms, %.0f tokens/s; floor %.3f ms (%.1f MB at "
           "%.0f GB/s; %.1f routed experts a MoE layer), %.2fx the floor\n",
           s->B, s->ctx, s->c.n_layers, o->tp_shapes, ms[0], s->B * 1e3 / ms[0], floor_ms, bytes / 1e6, bw / 1e9,
           touched, ms[0] / floor_ms);
    printf("kt run: the step's graph: %d kernels, %.2f us a kernel (%s)\n", s->graph_kernels[0],
           ms[0] * 1e3 / s->graph_kernels[0], s->sides ? "side chains on a second stream" : "one stream");
    if (s->n_graphs == 2)
        printf("kt run: tuned winners %.3f ms vs family defaults %.3f ms: %.1f%% saved\n", ms[0], ms[1],
               100 * (ms[1] - ms[0]) / ms[1]);
    else
        printf("kt run: no --db: every family ran its default (no tuned-vs-default figure)\n");
    printf("kt run: lookup levels: exact %d, nearest M %d, nearest shape %d, default %d\n", levels[0], levels[1],
           levels[2], levels[3]);
    printf("kt run: kernel part of start-up %.0f ms%s\n", kernel_ms(s), o->plain_kernels ? " (--plain-kernels)" : "");
    for (int i = 0; i < KT_N_PARTS; i++)
        printf("kt run: %-9s %s\n", kt_step_part_names[i], s->plan.family[i] ? "kt family" : "plain");
    printf("kt run: per-op time of one eager step (events between ops):\n");
    for (int r = 0; r < n_rows; r++) printf("  %-16s %8.3f ms  %5d calls\n", rows[r].name, rows[r].ms, rows[r].calls);
    if (!o->json_path) return 0;
    FILE *f = fopen(o->json_path, "w");
    if (!f) return kt_fail("cannot write %s", o->json_path);
    fprintf(f,
            "{\"tpot_ms\": %.4f, \"default_tpot_ms\": %.4f, \"tuned_gain_pct\": %.2f, \"floor_ms\": %.4f, "
            "\"floor_ratio\": %.3f, \"tokens_per_s\": %.1f, \"bytes\": %.0f, \"batch\": %d, \"context\": %ld, "
            "\"layers\": %ld, \"tp_shapes\": %d, \"kernels\": %d, \"side_chains\": %d, \"plain_kernels\": %d, "
            "\"experts\": \"%s\", \"experts_touched\": %.2f, "
            "\"kernel_start_ms\": %.1f, "
            "\"lookup\": {\"exact\": %d, \"nearest_m\": %d, \"nearest_shape\": %d, \"default\": %d}, \"parts\": {",
            ms[0], s->n_graphs == 2 ? ms[1] : ms[0], s->n_graphs == 2 ? 100 * (ms[1] - ms[0]) / ms[1] : 0.0, floor_ms,
            ms[0] / floor_ms, s->B * 1e3 / ms[0], bytes, s->B, s->ctx, s->c.n_layers, o->tp_shapes, s->graph_kernels[0],
            s->sides, o->plain_kernels, kt_moe_format_names[s->plan.experts], touched, kernel_ms(s), levels[0],
            levels[1], levels[2], levels[3]);
    for (int i = 0; i < KT_N_PARTS; i++)
        fprintf(f, "%s\"%s\": \"%s\"", i ? ", " : "", kt_step_part_names[i], s->plan.family[i] ? "family" : "plain");
    fprintf(f, "}, \"per_op_ms\": {");
    for (int r = 0; r < n_rows; r++) fprintf(f, "%s\"%s\": %.4f", r ? ", " : "", rows[r].name, rows[r].ms);
    fprintf(f, "}, \"per_op_calls\": {");
    for (int r = 0; r < n_rows; r++) fprintf(f, "%s\"%s\": %d", r ? ", " : "", rows[r].name, rows[r].calls);
    fprintf(f, "}, \"moe_occupancy\": {\"routed\": ");
    occupancy_json(f, s, KT_MLP_MOE);
    fprintf(f, ", \"hash\": ");
    occupancy_json(f, s, KT_MLP_HASH);
    fprintf(f, "}}\n");
    fclose(f);
    return 0;
}

void kt_step_close(kt_step *s) {
    if (!s) return;
    for (int g = 0; g < s->n_graphs; g++) kt_cu.cuGraphExecDestroy(s->graph[g]);
    for (int set = 0; set < 2; set++)
        for (int i = 0; i < s->n_fams[set]; i++) kt_module_unload(&s->fams[set][i].mod);
    for (int k = 0; k < N_RT; k++) kt_module_unload(&s->rt[k]);
    if (s->db) kt_db_close(s->db);
    kt_lt_gemv_close(s->lt);
    kt_tp_close(s->tp);
    free(s->L), free(s->list), free(s->host_logits), free(s->occ), free(s);
}
