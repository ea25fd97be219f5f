/* test_indexer.c — the mla_indexer family on the CPU: the radix select the GPU runs (in its C
 * form) against the sorting rule on ties, all-equal logits, L < k, L = k and signed zeros; the
 * cache's byte layout through a hand-built page; the ragged lengths; the claim that grid
 * inputs make f32 logits exact in any order; bad keys rejected. */
#include "../../kernels/common/indexer_layout.h"
#include "../../kernels/mla_indexer.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 1 if the radix select, HIST=1's selection (with the kernel's candidate cap, and with caps
 * that send it over every key) and the sorting rule agree on x[0..n) for k. */
static int radix_matches_sort(const float *x, int n, int k) {
    double *xd = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int *a = malloc(sizeof(int) * (size_t)k), *b = malloc(sizeof(int) * (size_t)k);
    for (int i = 0; i < n; i++) xd[i] = x[i];
    kt_mla_indexer_topk_sort(xd, n, k, a);
    kt_mla_indexer_topk_radix(x, n, k, b);
    int same = !memcmp(a, b, sizeof(int) * (size_t)k);
    const int caps[] = {4096, 1, 0};
    for (int c = 0; c < 3; c++) {
        memset(b, 0x7f, sizeof(int) * (size_t)k);
        kt_mla_indexer_topk_hist(x, n, k, caps[c], b);
        same &= !memcmp(a, b, sizeof(int) * (size_t)k);
    }
    free(xd), free(a), free(b);
    return same;
}

KT_TEST(indexer_radix_select_matches_the_rule) {
    enum { N = 5000 };
    static float x[N];
    uint64_t rng = 42;
    for (int i = 0; i < N; i++) x[i] = kt_rng_uniform(&rng) * 100.0f; /* distinct, both signs */
    EXPECT(radix_matches_sort(x, N, 2048));
    EXPECT(radix_matches_sort(x, N, 1));
    EXPECT(radix_matches_sort(x, N, N - 1));
    for (int i = 0; i < N; i++) x[i] = (float)(kt_rng_next(&rng) % 5); /* few values: ties at T */
    EXPECT(radix_matches_sort(x, N, 2048));
    EXPECT(radix_matches_sort(x, N, 512));
    for (int i = 0; i < N; i++) x[i] = 3.25f; /* all equal: the first k positions */
    EXPECT(radix_matches_sort(x, N, 2048));
    int first[4];
    kt_mla_indexer_topk_radix(x, N, 4, first);
    EXPECT(first[0] == 0 && first[3] == 3);
    for (int i = 0; i < N; i++) x[i] = (i % 3) ? 0.0f : -0.0f; /* +0 and -0 tie */
    EXPECT(radix_matches_sort(x, N, 100));
    kt_mla_indexer_topk_radix(x, N, 4, first);
    EXPECT(first[0] == 0 && first[1] == 1 && first[2] == 2 && first[3] == 3);
    for (int i = 0; i < N; i++) x[i] = ldexpf(1.0f + (float)(i % 7) / 8, (int)(kt_rng_next(&rng) % 60) - 30);
    EXPECT(radix_matches_sort(x, N, 1000));                                 /* keys that differ only in low digits */
    for (int i = 0; i < N; i++) x[i] = 1.0f + (float)(i % 1024) * 0x1p-23f; /* one top digit */
    EXPECT(radix_matches_sort(x, N, 700));
    for (int i = 0; i < 3000; i++) x[i] = -1.0f - (float)((i * 7) % 3000) * 0x1p-23f; /* one 16-bit bin, gathered */
    EXPECT(radix_matches_sort(x, 3000, 1000));
    for (int i = 0; i < N; i++) x[i] = (float)(i % 2 ? 1 : -1) * ldexpf(1.0f, (int)(kt_rng_next(&rng) % 200) - 100);
    EXPECT(radix_matches_sort(x, N, 2048)); /* powers of two: many coarse bins, ties in each */
}

KT_TEST(indexer_short_and_exact_lengths) {
    float x[2048];
    uint64_t rng = 7;
    for (int i = 0; i < 2048; i++) x[i] = kt_rng_uniform(&rng);
    int pos[2048];
    kt_mla_indexer_topk_radix(x, 2048, 2048, pos); /* L = k: every position in order */
    int in_order = 1;
    for (int i = 0; i < 2048; i++) in_order &= pos[i] == i;
    EXPECT(in_order);
    kt_mla_indexer_topk_radix(x, 100, 2048, pos); /* L < k: then -1 */
    EXPECT(pos[99] == 99 && pos[100] == -1 && pos[2047] == -1);
    EXPECT(radix_matches_sort(x, 2048, 2047)); /* L = k + 1 */
    EXPECT(radix_matches_sort(x, 1, 1));
    EXPECT(radix_matches_sort(x, 0, 16));
}

static const kt_family *family(void) { return kt_family_find("mla_indexer"); }

/* A page built byte by byte: request 0 (L = 3) on physical page 1; token t's first code is
 * t + 1, its scale 0.5; q's head 0 is (1, 0, ...), weight 1, other heads 0. */
KT_TEST(indexer_hand_built_page) {
    const kt_family *f = family();
    EXPECT(f != NULL);
    if (!f) return;
    kt_problem p = {0};
    EXPECT(kt_parse_shape(f, "TOPK=4,CTX=3,DIST=equal,VALUES=grid", &p) == 0);
    p.m = 1;
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    EXPECT(n == 8 && t[2].count == 2 * 8448 && t[4].count == 1 && t[5].count == 3 && t[6].count == 4);
    EXPECT(t[6].compare == KT_CMP_EXACT && t[6].dtype == KT_I32);
    EXPECT(t[7].role == KT_SCRATCH && t[7].count == KT_IDX_HIST_WORDS); /* HIST=1's histogram */
    uint8_t q[64 * 128] = {0}, cache[2 * 8448] = {0};
    float w[64] = {0};
    int lens[1] = {3}, table[1] = {1};
    q[0] = kt_float_to_e4m3(1.0f);
    w[0] = 1.0f;
    for (int s = 0; s < 3; s++) {
        cache[8448 + s * 128] = kt_float_to_e4m3((float)(s + 1));
        float half = 0.5f;
        memcpy(cache + 8448 + 64 * 128 + 4 * s, &half, 4);
    }
    EXPECT(kt_idx_code_offset(1, 2) == 8448 + 256 && kt_idx_scale_offset(1, 2) == 8448 + 8192 + 8);
    void *host[KT_MAX_TENSORS] = {q, w, cache, lens, table};
    double ref[3 + 4];
    f->reference(&p, host, ref);
    EXPECT(ref[0] == 0.5 && ref[1] == 1.0 && ref[2] == 1.5);
    EXPECT(ref[3] == 64 && ref[4] == 65 && ref[5] == 66 && ref[6] == -1); /* page 1: ids 64.. */
}

KT_TEST(indexer_ragged_lengths) {
    const kt_family *f = family();
    if (!f) return;
    kt_problem p = {0};
    EXPECT(kt_parse_shape(f, "TOPK=2048,CTX=8192,DIST=ragged,VALUES=grid", &p) == 0);
    for (long B = 1; B <= 64; B = B * 2 + 1) {
        p.m = B;
        int lens[64];
        kt_mla_indexer_lengths(&p, 99 + (uint64_t)B, lens);
        long sum = 0;
        int has_k = 0, has_one = 0, in_range = 1;
        for (long b = 0; b < B; b++) {
            sum += lens[b];
            has_k |= lens[b] == 2048;
            has_one |= lens[b] == 1;
            in_range &= lens[b] >= 1 && lens[b] < 2 * 8192;
        }
        EXPECT(sum == B * 8192 && in_range);
        EXPECT(B < 2 || has_k);
        EXPECT(B < 4 || has_one);
    }
}

/* Grid inputs: logits summed in f32 in another order (heads and dims reversed) equal the
 * float64 reference exactly, which is what lets the index list be compared exactly. */
KT_TEST(indexer_grid_logits_exact_in_f32) {
    const kt_family *f = family();
    if (!f) return;
    kt_problem p = {0};
    EXPECT(kt_parse_shape(f, "TOPK=16,CTX=200,DIST=ragged,VALUES=grid", &p) == 0);
    p.m = 3;
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    void *host[KT_MAX_TENSORS] = {0};
    for (int i = 0; i < n; i++) host[i] = calloc(t[i].count, kt_dtype_size(t[i].dtype));
    f->fill(&p, 1234, host);
    double *ref = malloc(sizeof(double) * (t[5].count + t[6].count));
    f->reference(&p, host, ref);
    const uint8_t *q = host[0], *cache = host[2];
    const float *w = host[1];
    const int *lens = host[3], *table = host[4];
    long mp = (long)(t[4].count / 3), off = 0, exact = 1, nonzero = 0;
    for (int b = 0; b < 3; off += lens[b++])
        for (int tok = 0; tok < lens[b]; tok++) {
            long page = table[b * mp + tok / 64];
            const uint8_t *k = cache + kt_idx_code_offset(page, tok % 64);
            float sum = 0, scale;
            memcpy(&scale, cache + kt_idx_scale_offset(page, tok % 64), 4);
            for (int h = 63; h >= 0; h--) {
                float dot = 0;
                for (int d = 127; d >= 0; d--)
                    dot += kt_e4m3_to_float(q[(b * 64 + h) * 128 + d]) * kt_e4m3_to_float(k[d]);
                sum += w[b * 64 + h] * fmaxf(dot, 0);
            }
            exact &= (double)(sum * scale) == ref[off + tok];
            nonzero += ref[off + tok] != 0;
        }
    EXPECT(exact);
    EXPECT(nonzero > 100);
    for (int i = 0; i < n; i++) free(host[i]);
    free(ref);
}

KT_TEST(indexer_rejects_bad_keys) {
    const kt_family *f = family();
    if (!f) return;
    const char *bad[] = {"TOPK=4096,CTX=8192,DIST=equal,VALUES=grid",
                         "TOPK=2048,CTX=1073741824,DIST=equal,VALUES=grid"};
    char why[256];
    for (int i = 0; i < 2; i++) {
        kt_problem p = {0};
        EXPECT(kt_parse_shape(f, bad[i], &p) == 0);
        p.m = 1;
        EXPECT(f->check_problem(&p, why, sizeof why) == -1 && why[0]);
    }
    kt_problem p = {0}; /* categories by name only */
    EXPECT(kt_parse_shape(f, "TOPK=2048,CTX=8192,DIST=wide,VALUES=grid", &p) == -1);
    EXPECT(kt_parse_shape(f, "TOPK=2048,CTX=8192,DIST=equal,VALUES=3", &p) == -1);
    EXPECT(kt_parse_shape(f, "TOPK=2048,CTX=8192,DIST=equal,VALUES=grid", &p) == 0);
    p.m = 2000;
    EXPECT(f->check_problem(&p, why, sizeof why) == -1);
    p.m = 64;
    EXPECT(f->check_problem(&p, why, sizeof why) == 0);
}

/* The scan's configs: its ring of STAGES groups a warp must fit sm_120's 99 KB for one block and
 * for CTAS_PER_SM of them, the f16 path's 128 q registers leave no room for 3 CTAs of 8 warps'
 * worth of n-tiles, and without a GPU (arch 0) the default keeps the e4m3 path. */
KT_TEST(indexer_scan_configs_fit_sm120) {
    const kt_family *f = family();
    if (!f) return;
    char why[256];
    kt_config c;
    EXPECT(f->check_config(&f->default_config, 90, why, sizeof why) == 0);
    EXPECT(f->check_config(&f->default_config, 120, why, sizeof why) == 0);
    EXPECT(kt_parse_config(f, "WARPS=4,NT=2,CTAS_PER_SM=2,MATH=1,STAGES=4", &c) == 0); /* sm_90's default */
    EXPECT(f->check_config(&c, 120, why, sizeof why) == 0);
    EXPECT(kt_parse_config(f, "WARPS=8,NT=4,CTAS_PER_SM=1,STAGES=4", &c) == 0); /* 147 KB of ring */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1 && strstr(why, "ring"));
    EXPECT(kt_parse_config(f, "WARPS=4,NT=4,CTAS_PER_SM=2,STAGES=4", &c) == 0); /* 82 KB, twice */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1 && strstr(why, "ring"));
    EXPECT(kt_parse_config(f, "WARPS=4,NT=4,CTAS_PER_SM=2,STAGES=2", &c) == 0); /* 45 KB, twice */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == 0);
    EXPECT(kt_parse_config(f, "WARPS=4,NT=2,CTAS_PER_SM=3,MATH=1,STAGES=2", &c) == 0);
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1 && strstr(why, "registers"));
    EXPECT(kt_parse_config(f, "WARPS=8,NT=2,CTAS_PER_SM=2,MATH=1,STAGES=2", &c) == 0); /* 16 warps of 64 q heads */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1 && strstr(why, "registers"));
    EXPECT(kt_parse_config(f, "WARPS=4,NT=4,CTAS_PER_SM=2,STAGES=2,HIST=1", &c) == 0); /* 45 KB + 4 KB of counters */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == 0);
    EXPECT(kt_parse_config(f, "WARPS=8,NT=2,CTAS_PER_SM=2,STAGES=2,HIST=1", &c) == 0); /* 46 KB + 8 KB, twice */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1 && strstr(why, "ring"));
    kt_problem p = {0};
    EXPECT(kt_parse_shape(f, "TOPK=2048,CTX=8192,DIST=equal,VALUES=grid", &p) == 0);
    p.m = 16;
    f->default_for(&p, 132, &c);
    EXPECT(c.v[5] == 0 && c.v[4] == 1);            /* MATH=0 (no GPU open); 16K keys stage in one CTA */
    EXPECT(c.v[7] == 1 && f->config_fits(&c, &p)); /* HIST=1 up to KT_IDX_HIST_MAX_B requests */
    EXPECT(c.v[9] == 2);                           /* HIST=1: SEL_FAST=2 (measured faster) */
    p.m = KT_IDX_HIST_MAX_B + 1;
    EXPECT(!f->config_fits(&c, &p)); /* its scratch holds 16 */
    f->default_for(&p, 132, &c);
    EXPECT(c.v[7] == 0 && c.v[9] == 0 && f->config_fits(&c, &p)); /* HIST=0: SEL_FAST=0 (no gain measured) */
    EXPECT(kt_parse_shape(f, "TOPK=2048,CTX=32768,DIST=equal,VALUES=grid", &p) == 0);
    p.m = 1;
    f->default_for(&p, 132, &c);
    EXPECT(c.v[4] == 4 && c.v[3] == 512); /* < 64K keys in 4 slices of 16K */
    p.m = 64;
    f->default_for(&p, 132, &c);
    EXPECT(c.v[4] == 2);    /* one wave: 64 x 2 CTAs of 132 */
    c.v[1] = 4, c.v[6] = 2; /* what default_for takes on sm_90 past HIST=1's batches: NT=4, STAGES=2 */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == 0 && f->config_fits(&c, &p));
}

/* The selection's staged keys: distinct words inside kt_idx_staged_words(n), and the ordered
 * pass's reads (lane j of a warp reads key 16 j + i) on 32 distinct banks for every i. */
/* The selection's staging split (16-byte loads from the first boundary, the rest one by one)
 * reads every position of [lo, hi) exactly once, whatever lo's alignment and the length. */
KT_TEST(indexer_staging_covers_each_position_once) {
    int once = 1, inside = 1;
    for (int lo = 0; lo < 9; lo++)
        for (int len = 0; len <= 41; len++)
            for (int skew = 0; skew < 4; skew++) {
                int hi = lo + len, seen[64] = {0};
                int head = kt_idx_stage_head(lo, hi, skew), vecs = kt_idx_stage_vecs(head, hi);
                inside &= (skew + head - lo) % 4 == 0 || head == hi; /* the vectors start on a boundary */
                for (int v = 0; v < vecs; v++)
                    for (int j = 0; j < 4; j++) seen[head + 4 * v + j]++;
                for (int i = 0; i < kt_idx_stage_rest(lo, hi, head); i++) {
                    int p = kt_idx_stage_rest_pos(lo, head, vecs, i);
                    if (p < 0 || p >= 64)
                        inside = 0;
                    else
                        seen[p]++;
                }
                for (int p = 0; p < 64; p++) once &= seen[p] == (p >= lo && p < hi);
            }
    EXPECT(inside);
    EXPECT(once);
}

/* The scan's split (kt_idx_scan_range): every group to exactly one warp, each warp a contiguous
 * range in warp order, no range longer than the even split's longest (ceil(total / warps)), and
 * with no more groups than warps the groups in the first warps (the grid's first CTAs). */
KT_TEST(indexer_scan_split_covers_each_group_once) {
    int once = 1, ordered = 1, short_runs = 1, front = 1;
    const long long warps_of[] = {1, 7, 528, 1056};
    for (int w = 0; w < 4; w++)
        for (long long total = 0; total <= 2200; total += total < 40 ? 1 : 37) {
            long long warps = warps_of[w], next = 0, longest = (total + warps - 1) / warps;
            for (long long gw = 0; gw < warps; gw++) {
                int first, last;
                kt_idx_scan_range(gw, warps, total, &first, &last);
                if (first >= last) {
                    front &= total > warps || gw >= total;
                    continue;
                }
                once &= first == next; /* contiguous, no gap, no overlap */
                ordered &= first < last && last <= total;
                short_runs &= last - first <= longest;
                front &= total > warps || (first == gw && last == gw + 1);
                next = last;
            }
            once &= next == total;
        }
    EXPECT(once);
    EXPECT(ordered);
    EXPECT(short_runs);
    EXPECT(front);
}

KT_TEST(indexer_staged_keys_conflict_free) {
    enum { N = 16384 };
    static unsigned char used[N + N / 16 + 1];
    int distinct = 1, inside = 1, no_conflict = 1;
    for (int k = 0; k < N; k++) {
        int w = kt_idx_staged_index(k);
        inside &= w >= 0 && w < kt_idx_staged_words(N) && kt_idx_staged_index(k % 1000) < kt_idx_staged_words(1000);
        distinct &= !used[w];
        used[w] = 1;
    }
    for (int base = 0; base < N; base += 32 * 16)
        for (int i = 0; i < 16; i++) {
            unsigned banks = 0;
            for (int lane = 0; lane < 32; lane++) banks |= 1u << (kt_idx_staged_index(base + 16 * lane + i) % 32);
            no_conflict &= banks == 0xffffffffu;
        }
    EXPECT(distinct && inside);
    EXPECT(no_conflict);
}
