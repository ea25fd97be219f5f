/* test_moe.c — CPU tests of the MoE layout and moe_gemm's host side: the reference alignment's
 * invariants, the routing distributions, the float64 reference on hand-made inputs, and the
 * configs an untuned problem gets (they build and fit). */
#include "../../kernels/common/moe_layout.h"
#include "../../kernels/common/moe_router.h"
#include "../../kernels/moe_gemm.h"
#include "../../kernels/moe_route.h"
#include "../../tuner/tuner.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every slot exactly once, in its expert's group, ascending; groups in expert order, padded with
 * -1 to whole tiles; tile_expert and n_tiles exact; nothing past the used tiles. */
static int alignment_ok(const int *ids, long M, long topk, long E, long TM, const int *rec) {
    const long padded = kt_moe_max_padded(M, topk, E, TM), tiles = padded / TM;
    const int *sorted = rec, *tile_expert = rec + KT_MOE_TILES(M, topk, E, TM);
    const int n_tiles = rec[KT_MOE_NTILES(M, topk, E, TM)];
    int ok = padded % TM == 0 && n_tiles >= 0 && n_tiles <= tiles;
    int *seen = calloc((size_t)(M * topk), sizeof(int)), *count = calloc((size_t)E, sizeof(int));
    long want_tiles = 0;
    for (long s = 0; s < M * topk; s++) count[ids[s]]++;
    for (long e = 0; e < E; e++) want_tiles += (count[e] + TM - 1) / TM;
    ok &= n_tiles == want_tiles;
    for (long t = 0; ok && t < tiles; t++) {
        if (t >= n_tiles) {
            ok &= tile_expert[t] == KT_MOE_PAD;
            for (long i = 0; i < TM; i++) ok &= sorted[t * TM + i] == KT_MOE_PAD;
            continue;
        }
        ok &= t == 0 || tile_expert[t] >= tile_expert[t - 1];
        ok &= sorted[t * TM] >= 0; /* a used tile starts with a slot */
        for (long i = 0; i < TM; i++) {
            int s = sorted[t * TM + i];
            if (s == KT_MOE_PAD) continue;
            ok &= s >= 0 && s < M * topk && ids[s] == tile_expert[t] && !seen[s]++;
            ok &= i == 0 || (sorted[t * TM + i - 1] != KT_MOE_PAD && sorted[t * TM + i - 1] < s);
        }
    }
    for (long s = 0; s < M * topk; s++) ok &= seen[s] == 1;
    free(seen);
    free(count);
    return ok;
}

KT_TEST(moe_alignment_reference_invariants) {
    const long Ms[] = {1, 5, 64, 300}, TMs[] = {8, 16, 64};
    for (int dist = 0; dist < 3; dist++)
        for (int mi = 0; mi < 4; mi++)
            for (int ti = 0; ti < 3; ti++) {
                long M = Ms[mi], topk = 6, E = 32, TM = TMs[ti];
                int *ids = malloc(sizeof(int) * (size_t)(M * topk));
                int *rec = malloc(sizeof(int) * (size_t)kt_moe_align_ints(M, topk, E, TM)), count[32];
                kt_moe_draw_routing(M, topk, E, dist, 7 + (uint64_t)mi, ids, NULL);
                int n = kt_moe_align_ref(ids, M, topk, E, TM, rec, count);
                EXPECT(n == rec[KT_MOE_NTILES(M, topk, E, TM)]);
                EXPECT(alignment_ok(ids, M, topk, E, TM, rec));
                /* the check can fail: a slot moved into a padding place, a tile's expert changed */
                int t0 = rec[0];
                rec[0] = KT_MOE_PAD;
                EXPECT(!alignment_ok(ids, M, topk, E, TM, rec));
                rec[0] = t0;
                rec[KT_MOE_TILES(M, topk, E, TM)] ^= 1;
                EXPECT(!alignment_ok(ids, M, topk, E, TM, rec));
                free(ids);
                free(rec);
            }
}

KT_TEST(moe_routing_distributions) {
    const long M = 4000, E = 256;
    int *ids = malloc(sizeof(int) * (size_t)(M * 6));
    float *w = malloc(sizeof(float) * (size_t)(M * 6));
    long top_share[3] = {0};
    for (int dist = 0; dist < 3; dist++) {
        kt_moe_draw_routing(M, 6, E, dist, 99, ids, w);
        int distinct = 1, weights_ok = 1;
        long count[256] = {0};
        for (long m = 0; m < M; m++)
            for (int k = 0; k < 6; k++) {
                count[ids[m * 6 + k]]++;
                weights_ok &= w[m * 6 + k] >= 0.1f && w[m * 6 + k] < 0.4f;
                for (int j = 0; j < k; j++) distinct &= ids[m * 6 + j] != ids[m * 6 + k];
            }
        EXPECT(distinct && weights_ok);
        for (long e = 0; e < E; e++)
            if (count[e] > top_share[dist]) top_share[dist] = count[e];
    }
    /* uniform: the busiest expert near 6M/E = 94; Zipf 1.1: several times that; hot: every token */
    EXPECT(top_share[0] < 150);
    EXPECT(top_share[1] > 1000);
    EXPECT(top_share[2] == M);
    /* with top-2 the hot expert takes 25% of the slots */
    kt_moe_draw_routing(M, 2, E, KT_MOE_HOT, 5, ids, NULL);
    long count[256] = {0}, hot = 0;
    for (long s = 0; s < 2 * M; s++) count[ids[s]]++;
    for (long e = 0; e < E; e++) hot = count[e] > hot ? count[e] : hot;
    EXPECT(hot > 0.23 * 2 * M && hot < 0.28 * 2 * M);
    free(ids);
    free(w);
}

/* DIST=gate reproduces the synthetic V4-Flash step's occupancy (bench/NOTES.md, moe64): at B = 16 / 64 its
 * 40 routed layers touched 57.5 / 101.9 of 256 experts (the report's 59.1 / 108.7 a layer with the 3 hash-routed
 * ones, ~80 / ~199 each), so over 32 draws the mean touched lies within a few experts of those, the busiest expert
 * takes ~13 slots at M = 64 (8-slot tiles over 5% more than the experts) and at most ~8 at M = 16 (uniform: ~6 at 64,
 * ~200 touched: outside every range). moe_route's DIST=gate fill routed by the V4 reference gives the same ids. */
KT_TEST(moe_gate_routing_matches_the_step) {
    const long E = 256, K = 6, Ms[2] = {16, 64};
    const double lo[2] = {55.5, 98.0}, hi[2] = {60.0, 107.0};
    int ids[64 * 6], ref[64 * 6];
    float logits[64 * 256], bias[256];
    double w[6];
    for (int dist = KT_MOE_UNIFORM; dist <= KT_MOE_GATE; dist += KT_MOE_GATE) {
        for (int i = 0; i < 2; i++) {
            double touched = 0, busiest = 0, tiles = 0;
            int distinct = 1, same = 1;
            for (uint64_t s = 0; s < 32; s++) {
                kt_moe_draw_routing(Ms[i], K, E, dist, 100 + s, ids, NULL);
                kt_moe_occupancy o = kt_moe_occupancy_of(ids, Ms[i] * K, E, 8);
                touched += o.touched / 32.0, busiest += o.busiest / 32.0, tiles += o.tiles / 32.0;
                for (long m = 0; m < Ms[i]; m++)
                    for (long k = 0; k < K; k++)
                        for (long j = 0; j < k; j++) distinct &= ids[m * K + j] != ids[m * K + k];
                if (dist != KT_MOE_GATE) continue;
                kt_moe_route_fill(KT_MOE_ROUTER_V4, E, K, KT_MOE_DIST_GATE, Ms[i], 100 + s, logits, bias);
                for (long m = 0; m < Ms[i]; m++)
                    kt_moe_route_token_ref(KT_MOE_ROUTER_V4, E, K, logits + m * E, bias, ref + m * K, w);
                same &= !memcmp(ids, ref, sizeof(int) * (size_t)(Ms[i] * K));
            }
            int gate = dist == KT_MOE_GATE;
            fprintf(stderr, "  %s M=%ld: %.1f touched, busiest %.1f slots, %.1f tiles of 8\n", kt_moe_dist_names[dist],
                    Ms[i], touched, busiest, tiles);
            EXPECT(distinct && same);
            EXPECT(gate == (touched > lo[i] && touched < hi[i]));
            if (gate && i == 1) EXPECT(busiest > 11 && busiest < 16 && tiles > 1.05 * touched);
            if (gate && i == 0) EXPECT(busiest < 8 && tiles < 1.02 * touched);
        }
    }
}

/* A problem's host tensors, zeroed, then filled by the family. */
typedef struct moe_case {
    const kt_family *f;
    kt_problem p;
    kt_tensor_desc t[KT_MAX_TENSORS];
    void *h[KT_MAX_TENSORS];
    int n;
    double *ref;
} moe_case;

static void case_open(moe_case *c, const long dims[7], long m) {
    c->f = kt_family_find("moe_gemm");
    c->p = (kt_problem){.n_dims = 7, .m = m};
    memcpy(c->p.dim, dims, 7 * sizeof(long));
    c->n = c->f->tensors(&c->p, c->t);
    size_t n_ref = 0;
    for (int i = 0; i < c->n; i++) {
        c->h[i] = calloc(c->t[i].count, kt_dtype_size(c->t[i].dtype));
        if (c->t[i].role == KT_OUTPUT) n_ref += c->t[i].count;
    }
    c->f->fill(&c->p, 1, c->h);
    c->ref = calloc(n_ref, sizeof(double));
}

static void case_close(moe_case *c) {
    for (int i = 0; i < c->n; i++) free(c->h[i]);
    free(c->ref);
}

/* Tensor order of moe_gemm (kernels/moe_gemm.c). */
enum { X, XS, W, WS, IDS, TOPW, SHARED };

KT_TEST(moe_gemm_reference_on_known_values) {
    /* MXFP4 down, one token, top-1: x = 1.0 at k = 1 only (scale 0.5); the expert's row 5 holds
     * 1.0 at k = 1 (the high nibble of byte 0) with the group's scale 2^1; the shared output 3 at
     * column 5; routing weight w: out[5] = 3 + w * 1 * 0.5 * 1 * 2, out elsewhere 0. */
    moe_case c;
    case_open(&c, (const long[7]){1, 1, 2, 128, 128, 1, 0}, 1);
    int e = ((int *)c.h[IDS])[0];
    memset(c.h[X], 0, 128);
    ((uint8_t *)c.h[X])[1] = kt_float_to_e4m3(1.0f);
    ((float *)c.h[XS])[0] = 0.5f;
    memset(c.h[W], 0, c.t[W].count);
    memset(c.h[WS], 127, c.t[WS].count);
    ((uint8_t *)c.h[W])[(e * 128 + 5) * 64] = 0x20;
    ((uint8_t *)c.h[WS])[(e * 128 + 5) * 4] = 128;
    memset(c.h[SHARED], 0, 128 * 2);
    ((uint16_t *)c.h[SHARED])[5] = kt_float_to_bf16(3.0f);
    float w = ((float *)c.h[TOPW])[0];
    c.f->reference(&c.p, c.h, c.ref);
    EXPECT(fabs(c.ref[5] - (3.0 + w)) < 1e-12);
    EXPECT(c.ref[4] == 0 && c.ref[6] == 0);
    case_close(&c);

    /* FP8 gate+up, one token, top-1, inter 128: x = 1.0 at k = 0 (scale 1); gate column 3 is 448
     * there (clipped to 10), up column 3 is 2 (block scales 1): h[3] = SiLU(10) * 2, alone in its
     * group, so its code is 448 and the group's scale bf16(h[3]) / 448; the others are 0. */
    case_open(&c, (const long[7]){0, 0, 2, 256, 128, 1, 0}, 1);
    e = ((int *)c.h[IDS])[0];
    memset(c.h[X], 0, 128);
    ((uint8_t *)c.h[X])[0] = kt_float_to_e4m3(1.0f);
    ((float *)c.h[XS])[0] = 1.0f;
    memset(c.h[W], 0, c.t[W].count);
    for (size_t i = 0; i < c.t[WS].count; i++) ((float *)c.h[WS])[i] = 1.0f;
    ((uint8_t *)c.h[W])[(e * 256 + 3) * 128] = kt_float_to_e4m3(448.0f);
    ((uint8_t *)c.h[W])[(e * 256 + 128 + 3) * 128] = kt_float_to_e4m3(2.0f);
    c.f->reference(&c.p, c.h, c.ref);
    double h = kt_bf16_to_float(kt_float_to_bf16((float)(10.0 / (1.0 + exp(-10.0)) * 2.0)));
    EXPECT(c.ref[3] == 448.0 && c.ref[2] == 0 && c.ref[4] == 0);
    EXPECT(fabs(c.ref[128] - (float)(h / 448.0)) < 1e-9);
    case_close(&c);
}

/* What an untuned problem gets (default_for) fits it and passes check_config on sm_120 and
 * sm_90: the distinct configs, up to 64, into distinct. */
static int moe_untuned_configs(const kt_family *f, kt_config *distinct) {
    static const long ms[] = {1, 2, 4, 16, 64, 100, 256, 1024, 4096};
    int n = 0;
    char why[256];
    for (int s = 0; s < f->n_target_shapes; s++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (int sms = 132; sms <= 188; sms += 56) {
                kt_problem p = {.n_dims = 7, .m = ms[mi]};
                memcpy(p.dim, f->target_shapes[s], sizeof p.dim);
                kt_config c;
                f->default_for(&p, sms, &c);
                int ok = !f->check_config(&c, 120, why, sizeof why) && !f->check_config(&c, 90, why, sizeof why) &&
                         f->config_fits(&c, &p);
                EXPECT(ok);
                int seen = 0;
                for (int i = 0; i < n; i++) seen |= !memcmp(&distinct[i], &c, sizeof c);
                if (!seen && n < 64) distinct[n++] = c;
            }
    return n;
}

/* Untuned problems get configs that fit; NATIVE=1 is refused off sm_120a. */
KT_TEST(moe_gemm_untuned_configs_fit) {
    const kt_family *f = kt_family_find("moe_gemm");
    kt_config distinct[64], native = f->default_config;
    char why[256];
    EXPECT(moe_untuned_configs(f, distinct) > 0);
    native.v[6] = 1;
    EXPECT(f->check_config(&native, 120, why, sizeof why) && f->check_config(&native, 90, why, sizeof why));
    EXPECT(!f->check_config(&native, 1201, why, sizeof why));
}

/* The new lanes' rules: BF16=1 (MXFP4 dequantised to bf16) needs WIDE=1 and NATIVE=0 on every
 * arch and fits MXFP4 problems only; MXFP4 WIDE=1 counts its weight scales in shared memory. */
KT_TEST(moe_gemm_wide_and_bf16_configs) {
    const kt_family *f = kt_family_find("moe_gemm");
    char why[256];
    kt_config c;
    EXPECT(!kt_parse_config(f, "WIDE=1,BF16=1", &c));
    EXPECT(!f->check_config(&c, 90, why, sizeof why) && !f->check_config(&c, 120, why, sizeof why));
    kt_problem mx = {.n_dims = 7, .m = 16, .dim = {1, 0, 32, 512, 2048, 6, 0}}, fp = mx;
    fp.dim[0] = 0;
    EXPECT(f->config_fits(&c, &mx) && !f->config_fits(&c, &fp));
    EXPECT(!kt_parse_config(f, "WIDE=0,BF16=1", &c));
    EXPECT(f->check_config(&c, 90, why, sizeof why) && strstr(why, "needs WIDE=1"));
    EXPECT(!kt_parse_config(f, "WIDE=1,BF16=1,NATIVE=1", &c));
    EXPECT(f->check_config(&c, 1201, why, sizeof why));
    /* K 4352 (34 k-blocks), 16 tokens, 256 rows: 71,808 bytes of tokens, + 35,840 of MXFP4's
     * scales with WIDE=1 (over sm_120's 99 KB); FP8 has no scales there. */
    kt_problem big = {.n_dims = 7, .m = 16, .dim = {1, 0, 8, 512, 4352, 6, 0}};
    EXPECT(!kt_parse_config(f, "TM=16,TN=256,WARPS_N=8,WARPS_K=1,STAGES=1,SPLIT=1,WIDE=0", &c));
    EXPECT(f->config_fits(&c, &big));
    c.v[7] = 1;
    EXPECT(!f->config_fits(&c, &big));
    big.dim[0] = 0;
    EXPECT(f->config_fits(&c, &big));
    /* BF16's tokens take 256 bytes a k-block as bf16: 32 k-blocks x 16 tokens = 133,120 bytes,
     * where the e4m3 path's 67,584 + 8,448 of scales fit. */
    kt_problem k4 = {.n_dims = 7, .m = 16, .dim = {1, 0, 8, 512, 4096, 6, 0}};
    EXPECT(!kt_parse_config(f, "TM=16,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,BF16=0", &c));
    EXPECT(f->config_fits(&c, &k4));
    c.v[8] = 1;
    EXPECT(!f->config_fits(&c, &k4));
}

/* GATHER=1 (a CTA per token: every slot's expert in turn, the combine in the CTA) takes a token's
 * slots as one tile of 8 over all of K (TM=8, SPLIT=1 on every arch), runs down only, top-k up
 * to 8; MXFP4 WIDE=1 stages every slot's expert's scales. */
KT_TEST(moe_gemm_gather_configs) {
    const kt_family *f = kt_family_find("moe_gemm");
    char why[256];
    kt_config c;
    EXPECT(!kt_parse_config(f, "TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,WIDE=1,GATHER=1", &c));
    EXPECT(!f->check_config(&c, 90, why, sizeof why) && !f->check_config(&c, 120, why, sizeof why));
    kt_problem down = {.n_dims = 7, .m = 1, .dim = {0, 1, 256, 4096, 512, 6, 0}}, up = down, mx = down, v3 = down;
    up.dim[1] = 0, up.dim[3] = 1024, up.dim[4] = 4096;
    mx.dim[0] = 1;
    v3.dim[5] = 9;
    EXPECT(f->config_fits(&c, &down) && f->config_fits(&c, &mx) && !f->config_fits(&c, &up) &&
           !f->config_fits(&c, &v3));
    /* MXFP4 WIDE=1 counts every slot's weight scales: K 4096, 256 rows, 6 slots: 33,792 bytes of
     * tokens + 6 x 33,792 of scales (over 99 KB), where one expert's 33,792 fit */
    kt_problem k4 = mx;
    k4.dim[4] = 4096;
    EXPECT(!kt_parse_config(f, "TM=8,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=1,WIDE=1,GATHER=1", &c));
    EXPECT(!f->config_fits(&c, &k4));
    c.v[9] = 0;
    EXPECT(f->config_fits(&c, &k4));
    EXPECT(!kt_parse_config(f, "TM=16,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,GATHER=1", &c));
    EXPECT(f->check_config(&c, 90, why, sizeof why) && strstr(why, "GATHER=1"));
    EXPECT(!kt_parse_config(f, "TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,GATHER=1", &c));
    EXPECT(f->check_config(&c, 120, why, sizeof why) && strstr(why, "SPLIT=1"));
}

/* EARLY=1 (the router's outputs and the weights read before the PDL wait) fits the down stage
 * only: gate+up's expert is its producer's output. CLUSTER=1 (gate+up's SwiGLU group and split
 * ranges one cluster) fits gate+up only, in 2 to 8 CTAs. Untuned V4-Flash decode at M = 1 gets
 * EARLY on down (6 experts' 12.6 MB fit L2) and CLUSTER on gate+up (192 CTAs, one wave, split-K
 * 2); at M = 16 neither (80 experts). */
KT_TEST(moe_gemm_early_and_cluster_configs) {
    const kt_family *f = kt_family_find("moe_gemm");
    char why[256];
    kt_config c;
    kt_problem down = {.n_dims = 7, .m = 1, .dim = {0, 1, 256, 4096, 512, 6, 0}}, up = down;
    up.dim[1] = 0, up.dim[3] = 1024, up.dim[4] = 4096;
    EXPECT(!kt_parse_config(f, "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=2,SPLIT=1,WIDE=1,EARLY=1", &c));
    EXPECT(!f->check_config(&c, 90, why, sizeof why) && !f->check_config(&c, 120, why, sizeof why));
    EXPECT(f->config_fits(&c, &down) && !f->config_fits(&c, &up));
    c.v[10] = 0;
    EXPECT(f->config_fits(&c, &up));
    EXPECT(!kt_parse_config(f, "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,WIDE=1,CLUSTER=1", &c));
    EXPECT(!f->check_config(&c, 90, why, sizeof why) && !f->check_config(&c, 1201, why, sizeof why));
    EXPECT(f->config_fits(&c, &up) && !f->config_fits(&c, &down));
    EXPECT(!kt_parse_config(f, "TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=4,WIDE=1,CLUSTER=1", &c));
    EXPECT(f->check_config(&c, 90, why, sizeof why) && strstr(why, "16 CTAs"));
    EXPECT(!kt_parse_config(f, "TM=8,TN=256,WARPS_N=8,WARPS_K=1,STAGES=2,SPLIT=1,WIDE=1,CLUSTER=1", &c));
    EXPECT(f->check_config(&c, 120, why, sizeof why) && strstr(why, "1 CTAs"));
    kt_config d;
    f->default_for(&up, 132, &d);
    EXPECT(d.v[10] == 0 && d.v[11] == 1 && d.v[5] == 2);
    EXPECT(d.v[2] == 4 && d.v[4] == 3); /* FP8's one-wave gate+up: 4 warps of 1 fragment, a ring of 3 */
    f->default_for(&down, 132, &d);
    EXPECT(d.v[10] == 1 && d.v[11] == 0);
    up.m = down.m = 16;
    f->default_for(&up, 132, &d);
    EXPECT(d.v[10] == 0 && d.v[11] == 0);
    f->default_for(&down, 132, &d);
    EXPECT(d.v[10] == 0 && d.v[11] == 0);
    EXPECT(d.v[1] == 64 && d.v[2] == 2 && d.v[3] == 1 && d.v[4] == 1); /* FP8 down streaming: no ring */
    /* MXFP4 down at M = 1: a CTA per 32 columns of the token across its 6 experts (GATHER=1, ring
     * 6, the bf16 mma); FP8 keeps its 64-row tiles; M = 2 neither */
    kt_problem mx = down;
    mx.m = 1, mx.dim[0] = 1;
    f->default_for(&mx, 132, &d);
    EXPECT(d.v[9] == 1 && d.v[1] == 32 && d.v[2] == 2 && d.v[3] == 4 && d.v[4] == 6 && d.v[8] == 1 && d.v[10] == 1);
    kt_problem mxup = up;
    mxup.m = 1, mxup.dim[0] = 1;
    f->default_for(&mxup, 132, &d); /* MXFP4's one-wave gate+up: 128 rows as 8 warps, a ring of 2 */
    EXPECT(d.v[11] == 1 && d.v[1] == 128 && d.v[2] == 8 && d.v[3] == 2 && d.v[4] == 2 && d.v[8] == 1);
    mx.m = 16;
    f->default_for(&mx, 132, &d); /* MXFP4 down streaming: 128 rows as 4 warps, one K group, ring 2 */
    EXPECT(d.v[9] == 0 && d.v[1] == 128 && d.v[2] == 4 && d.v[3] == 1 && d.v[4] == 2);
    down.m = 1;
    f->default_for(&down, 132, &d);
    EXPECT(d.v[9] == 0 && d.v[1] == 64);
    mx.m = 2;
    f->default_for(&mx, 132, &d);
    EXPECT(d.v[9] == 0);
}

/* ... and build on sm_90 and sm_120 without spills (make test-all: ~20 NVRTC builds). */
KT_TEST_SLOW(moe_gemm_untuned_configs_build_without_spills) {
    const kt_family *f = kt_family_find("moe_gemm");
    kt_config distinct[64];
    kt_test_expect_no_spills(f, distinct, moe_untuned_configs(f, distinct));
}
