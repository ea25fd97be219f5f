/* test_moe_route.c — CPU tests of the moe_route family: the f32 router arithmetic against
 * float64 (kernels/common/moe_router.h), the tie rule and V3's group limit on crafted tokens,
 * that the fill's routing follows its distribution, the invariants of the reference routing
 * and alignment (every slot once, padding -1, counts and tiles exact) over every router,
 * distribution and M of the GPU test, and bad keys. */
#include "../../kernels/common/moe_layout.h"
#include "../../kernels/common/moe_router.h"
#include "../../kernels/moe_route.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Distance in f32 ulps between f and the exact value x (at x's magnitude). */
static double ulps(float f, double x) {
    double ulp = ldexp(1.0, ilogb(x == 0 ? 1e-38 : x) - 23);
    return fabs((double)f - x) / ulp;
}

KT_TEST(moe_router_scores_within_4_ulp) {
    double worst_sig = 0, worst_sp = 0, worst_exp = 0;
    uint64_t rng = 5;
    for (int i = 0; i < 200000; i++) {
        float x = i < 61440 ? (float)(i - 30720) / 1024.0f : 80.0f * kt_rng_uniform(&rng);
        worst_sig = fmax(worst_sig, ulps(kt_moe_sigmoid(x), kt_moe_sigmoid_f64(x)));
        worst_sp = fmax(worst_sp, ulps(kt_moe_sqrt_softplus(x), kt_moe_sqrt_softplus_f64(x)));
        worst_exp = fmax(worst_exp, ulps(kt_mr_exp(x), exp((double)x)));
    }
    printf("  router scores: worst %.2f ulp (sigmoid), %.2f (sqrt softplus), %.2f (exp)\n", worst_sig, worst_sp,
           worst_exp);
    EXPECT(worst_sig <= 4 && worst_sp <= 4 && worst_exp <= 4);
}

/* The scores' division and square root (integer, mul and fma steps: the same bits on the GPU):
 * a / d within an ulp of the exact quotient and the correctly rounded one but for ~1 in 10^6,
 * for d in [1, 2^125] (the sigmoid's 1 + e^x reaches 2^125.5 at the clamp, log1p's denominators
 * are in [1, 2.5]); sqrt within an ulp for every normal x and +inf kept; sqrt(softplus(x))
 * exactly sqrt(x) above torch's threshold 20. */
KT_TEST(moe_router_division_and_sqrt) {
    long wrong_div = 0, wrong_thr = 0, n_div = 0;
    double worst_sqrt = 0, worst_div = 0;
    for (uint32_t b = 0x3f800000u; b < 0x7e400000u; b += 409, n_div++) {
        float d = kt_mr_bits_to_float(b), a = kt_mr_bits_to_float(0x3f800000u | (b * 2654435761u) >> 9); /* [1, 2) */
        wrong_div += kt_mr_div(a, d) != a / d;
        worst_div = fmax(worst_div, ulps(kt_mr_div(a, d), (double)a / (double)d));
    }
    for (uint32_t b = 0x00800000u; b < 0x7f800000u; b += 4099) {
        float x = kt_mr_bits_to_float(b);
        worst_sqrt = fmax(worst_sqrt, ulps(kt_mr_sqrt(x), sqrt((double)x)));
        if (x > 20.0f) wrong_thr += kt_moe_sqrt_softplus(x) != kt_mr_sqrt(x);
    }
    printf("  division: worst %.2f ulp, %ld of %ld not correctly rounded; sqrt: worst %.2f ulp; threshold: %ld "
           "differ\n",
           worst_div, wrong_div, n_div, worst_sqrt, wrong_thr);
    EXPECT(worst_div <= 1.0 && wrong_div * 100000 <= n_div && worst_sqrt <= 1.0 && wrong_thr == 0 &&
           kt_mr_sqrt(INFINITY) == INFINITY);
}

/* The kernel's 64-bit choice keys order (value, expert) pairs as the reference's comparator
 * does: larger values first, equal values by the lower expert, -0 (made +0) equal to +0. */
KT_TEST(moe_router_choice_keys_order_as_the_tie_rule) {
    static const float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 0.5f, 1e-30f, -1e-30f, 3.0e38f, -INFINITY};
    uint64_t rng = 9;
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float a = values[kt_rng_next(&rng) % 10], b = values[kt_rng_next(&rng) % 10];
        if (i % 2) a = kt_rng_uniform(&rng), b = i % 4 == 1 ? a : kt_rng_uniform(&rng);
        a = kt_moe_choice(a, 0.0f), b = kt_moe_choice(b, 0.0f); /* -0 -> +0, as the router does */
        int ea = (int)(kt_rng_next(&rng) % 256), eb = (int)(kt_rng_next(&rng) % 256);
        if (ea == eb) continue;
        int first = a > b || (a == b && ea < eb);
        bad += first != (kt_moe_choice_key(a, ea) > kt_moe_choice_key(b, eb));
        bad += kt_moe_key_expert(kt_moe_choice_key(a, ea)) != ea || kt_moe_choice_key(a, ea) == 0;
    }
    EXPECT(bad == 0);
}

/* The kernel's row -> expert search of an alignment (experts without slots included) finds the
 * expert whose padded rows hold the row. */
KT_TEST(moe_align_row_search_finds_the_owner) {
    uint64_t rng = 21;
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        int E = 32 + (int)(kt_rng_next(&rng) % 225), TM = 1 << (kt_rng_next(&rng) % 7), count[256], start[257];
        for (int e = 0; e < E; e++) count[e] = kt_rng_next(&rng) % 3 ? 0 : (int)(kt_rng_next(&rng) % 40);
        count[trial % E] = 1 + trial % 5; /* at least one expert with slots */
        start[0] = 0;
        for (int e = 0; e < E; e++) start[e + 1] = start[e] + (count[e] + TM - 1) / TM * TM;
        for (long i = 0; i < start[E]; i++) {
            int e = kt_moe_expert_of_row(start, E, i);
            bad += !(count[e] > 0 && start[e] <= i && i < start[e + 1]);
        }
    }
    EXPECT(bad == 0);
}

/* Routes one token by the reference; ids and weights into the caller's arrays. */
static void route(int router, const float *logits, const float *bias, long topk, int *ids, double *w) {
    kt_moe_route_token_ref(router, 256, topk, logits, bias, ids, w);
}

KT_TEST(moe_router_ties_go_to_the_lower_expert) {
    float logits[256], bias[256] = {0};
    int ids[8];
    double w[8];
    for (int e = 0; e < 256; e++) logits[e] = 0.25f;
    route(KT_MOE_ROUTER_V4, logits, bias, 6, ids, w);
    int ok = 1;
    for (int k = 0; k < 6; k++) ok &= ids[k] == k && fabs(w[k] - 1.5 / 6) < 1e-12;
    EXPECT(ok);
    route(KT_MOE_ROUTER_V3, logits, bias, 8, ids, w);
    ok = 1;
    for (int k = 0; k < 8; k++) ok &= ids[k] == k && fabs(w[k] - 2.5 / 8) < 1e-12;
    EXPECT(ok);
    /* equal values later in the order: the chosen come out by value, equal ones by index */
    logits[200] = logits[100] = logits[150] = 2.0f;
    route(KT_MOE_ROUTER_V4, logits, bias, 6, ids, w);
    EXPECT(ids[0] == 100 && ids[1] == 150 && ids[2] == 200 && ids[3] == 0 && ids[5] == 2);
    /* V3: every choice value exactly 0 (0.5 - 0.5), as are the masked ones: experts 0-7 */
    for (int e = 0; e < 256; e++) logits[e] = 0.0f, bias[e] = -0.5f;
    route(KT_MOE_ROUTER_V3, logits, bias, 8, ids, w);
    ok = 1;
    for (int k = 0; k < 8; k++) ok &= ids[k] == k;
    EXPECT(ok);
}

KT_TEST(moe_router_v3_group_limit) {
    float logits[256], bias[256] = {0};
    int ids[8];
    double w[8];
    for (int e = 0; e < 256; e++) logits[e] = -4.0f;
    /* group 5's best expert beats everything, but its second is low: groups 0-3 each have two
     * good experts and win on the sum of the top two, so expert 170 is never chosen */
    logits[170] = 6.0f;
    for (int g = 0; g < 4; g++) logits[g * 32 + 3] = logits[g * 32 + 9] = 1.0f;
    route(KT_MOE_ROUTER_V3, logits, bias, 8, ids, w);
    int in = 0, has_170 = 0;
    for (int k = 0; k < 8; k++) {
        in += ids[k] < 128 && (ids[k] % 32 == 3 || ids[k] % 32 == 9);
        has_170 |= ids[k] == 170;
    }
    EXPECT(in == 8 && !has_170);
    /* V4 has no groups: 170 first */
    route(KT_MOE_ROUTER_V4, logits, bias, 6, ids, w);
    EXPECT(ids[0] == 170);
    /* masked experts compete at 0 (transformers' masked_fill(0.0)): with every choice value
     * negative, the first 8 experts outside the best groups (groups 4-7) win */
    for (int e = 0; e < 256; e++) logits[e] = 0.0f, bias[e] = -2.0f;
    route(KT_MOE_ROUTER_V3, logits, bias, 8, ids, w);
    int ok = 1;
    for (int k = 0; k < 8; k++) ok &= ids[k] == 128 + k && fabs(w[k] - 2.5 / 8) < 1e-12;
    EXPECT(ok);
}

/* The reference outputs of moe_route on its own fill: ids [M*K], weights [M*K], record. */
typedef struct routed {
    kt_problem p;
    float *logits, *bias;
    int *tokens, *table; /* HASH's inputs (one element for V4 and V3) */
    double *ref;
    long n_ref;
} routed;

static routed route_problem(int router, long K, long TM, long NTM, int dist, long M, uint64_t seed) {
    const kt_family *f = kt_family_find("moe_route");
    routed r = {.p = {.n_dims = KT_MR_KEYS, .dim = {router, 256, K, TM, NTM, dist}, .m = M}};
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&r.p, t);
    for (int i = 0; i < n; i++)
        if (t[i].role == KT_OUTPUT) r.n_ref += (long)t[i].count;
    r.logits = malloc(sizeof(float) * M * 256);
    r.bias = malloc(sizeof(float) * 256);
    r.tokens = malloc(sizeof(int) * t[5].count);
    r.table = malloc(sizeof(int) * t[6].count);
    r.ref = malloc(sizeof(double) * r.n_ref);
    void *host[KT_MAX_TENSORS] = {r.logits, r.bias, NULL, NULL, NULL, r.tokens, r.table};
    f->fill(&r.p, seed, host);
    f->reference(&r.p, host, r.ref);
    return r;
}

static void routed_free(routed *r) {
    free(r->logits);
    free(r->bias);
    free(r->tokens);
    free(r->table);
    free(r->ref);
}

/* Number of tokens routed to expert e. */
static long expert_count(const routed *r, int e) {
    long n = 0, K = r->p.dim[KT_MR_TOPK];
    for (long i = 0; i < r->p.m * K; i++) n += (int)r->ref[i] == e;
    return n;
}

static long busiest(const routed *r) {
    long most = 0;
    for (int e = 0; e < 256; e++) most = expert_count(r, e) > most ? expert_count(r, e) : most;
    return most;
}

KT_TEST(moe_route_fill_follows_its_distribution) {
    for (int router = 0; router < 3; router++) {
        long K = router == KT_MOE_ROUTER_V3 ? 8 : 6, M = 256;
        routed u = route_problem(router, K, 16, 1, KT_MOE_DIST_UNIFORM, M, 11);
        routed z = route_problem(router, K, 16, 1, KT_MOE_DIST_ZIPF, M, 11);
        routed h = route_problem(router, K, 16, 1, KT_MOE_DIST_HOT, M, 11);
        long ties = router == KT_MOE_ROUTER_HASH ? 0 : M / 16; /* the all-equal tokens route by bias alone */
        printf("  %s: busiest expert %ld (uniform), %ld (zipf), %ld (hot) of %ld tokens\n", kt_moe_router_names[router],
               busiest(&u), busiest(&z), busiest(&h), M);
        EXPECT(busiest(&h) >= M - ties);       /* the hot expert: every token but the tie tokens */
        EXPECT(busiest(&z) > 2 * busiest(&u)); /* Zipf's head far above uniform's */
        EXPECT(busiest(&u) < M / 8 + ties);
        routed_free(&u);
        routed_free(&z);
        routed_free(&h);
    }
}

/* The invariants of a routing and its alignment record for tile TM at rec; 0 if all hold. */
static int check_record(const routed *r, long TM, const double *rec) {
    const long M = r->p.m, K = r->p.dim[KT_MR_TOPK], E = 256;
    const int router = (int)r->p.dim[KT_MR_ROUTER];
    const double *ids = r->ref, *w = r->ref + M * K;
    const long padded = kt_moe_max_padded(M, K, E, TM), tiles = padded / TM;
    long count[256] = {0}, seen_slot = 0, pads = 0;
    int bad = 0;
    for (long t = 0; t < M; t++) {
        double sum = 0;
        for (long k = 0; k < K; k++) {
            sum += w[t * K + k];
            for (long j = 0; j < k; j++) bad |= ids[t * K + j] == ids[t * K + k]; /* distinct experts */
        }
        bad |= fabs(sum - kt_moe_scale(router)) > 1e-9;
    }
    for (long i = 0; i < M * K; i++) count[(int)ids[i]]++;
    char *once = calloc((size_t)(M * K), 1);
    long row = 0, n_tiles = 0;
    for (int e = 0; e < E; e++) {
        if (!count[e]) continue;
        long prev = -1;
        for (long i = row; i < row + count[e]; i++) { /* the expert's slots, ascending */
            long s = (long)rec[i];
            bad |= s < 0 || s >= M * K || s <= prev || (int)ids[s] != e || once[s]++;
            prev = s;
            seen_slot++;
        }
        long used = (count[e] + TM - 1) / TM;
        for (long i = row + count[e]; i < row + used * TM; i++) bad |= rec[i] != KT_MOE_PAD, pads++;
        for (long t = 0; t < used; t++) bad |= rec[padded + n_tiles + t] != e;
        n_tiles += used;
        row += used * TM;
    }
    for (long i = row; i < padded; i++) bad |= rec[i] != KT_MOE_PAD;
    for (long t = n_tiles; t < tiles; t++) bad |= rec[padded + t] != KT_MOE_PAD;
    bad |= rec[padded + tiles] != n_tiles || seen_slot != M * K;
    free(once);
    return bad;
}

/* check_record on every record of r's output (tiles TM << i), each at its offset. */
static int check_routing(const routed *r) {
    const long M = r->p.m, K = r->p.dim[KT_MR_TOPK], TM = r->p.dim[KT_MR_TM];
    int bad = 0;
    for (int i = 0; i < r->p.dim[KT_MR_NTM]; i++)
        bad |= check_record(r, TM << i, r->ref + 2 * M * K + kt_moe_align_multi_offset(M, K, 256, TM, i));
    return bad;
}

KT_TEST(moe_route_reference_invariants) {
    static const long ms[] = {1, 4, 16, 64, 256};
    int bad = 0, cases = 0;
    for (int router = 0; router < 3; router++)
        for (int dist = 0; dist < 3; dist++)
            for (int i = 0; i < 5; i++)
                for (long TM = 8; TM <= 64; TM *= 8) { /* TM 8 with moe_gemm's 4 records, TM 64 alone */
                    long K = router == KT_MOE_ROUTER_V3 ? 8 : 6;
                    routed r = route_problem(router, K, TM, TM == 8 ? 4 : 1, dist, ms[i], 100 + i);
                    bad += check_routing(&r);
                    cases++;
                    routed_free(&r);
                }
    EXPECT(cases == 90 && bad == 0);
    /* the check catches a broken record: one slot moved into a padding row */
    routed r = route_problem(KT_MOE_ROUTER_V4, 6, 8, 4, KT_MOE_DIST_UNIFORM, 16, 3);
    double *rec = r.ref + 2 * 16 * 6 + kt_moe_align_multi_offset(16, 6, 256, 8, 3); /* the last record */
    EXPECT(check_routing(&r) == 0);
    rec[63] = rec[0];
    rec[0] = KT_MOE_PAD;
    EXPECT(check_routing(&r) != 0);
    routed_free(&r);
}

/* The hash router's reference against its definition (transformers' DeepseekV4 hash layers):
 * token t's experts are the table row of its token id, in the row's order, and its weights
 * sqrt(softplus(logit)) of those experts in float64, normalised, x 1.5. */
static int hash_mismatches(const routed *r) {
    const long M = r->p.m, K = r->p.dim[KT_MR_TOPK];
    int bad = 0;
    for (long t = 0; t < M; t++) {
        const int *row = r->table + (long)r->tokens[t] * K;
        double sum = 0;
        for (long k = 0; k < K; k++) sum += sqrt(log1p(exp((double)r->logits[t * 256 + row[k]])));
        for (long k = 0; k < K; k++) {
            double w = sqrt(log1p(exp((double)r->logits[t * 256 + row[k]]))) / sum * 1.5;
            bad += r->ref[t * K + k] != row[k] || fabs(r->ref[M * K + t * K + k] - w) > 1e-12 * w;
        }
    }
    return bad;
}

KT_TEST(moe_route_hash_reference) {
    routed r = route_problem(KT_MOE_ROUTER_HASH, 6, 8, 4, KT_MOE_DIST_ZIPF, 64, 21);
    long distinct_tokens = 0;
    for (long t = 0; t < 64; t++) {
        int seen = 0;
        for (long u = 0; u < t; u++) seen |= r.tokens[u] == r.tokens[t];
        distinct_tokens += !seen && r.tokens[t] >= 0 && r.tokens[t] < KT_MOE_HASH_ROWS;
    }
    EXPECT(distinct_tokens > 48); /* seeded tokens over the table's rows */
    EXPECT(hash_mismatches(&r) == 0 && check_routing(&r) == 0);
    r.tokens[7] = (r.tokens[7] + 1) % KT_MOE_HASH_ROWS; /* the check sees a token read from the wrong row */
    EXPECT(hash_mismatches(&r) != 0);
    routed_free(&r);
    /* the V4/V3 problems keep one-element tokens and table; HASH's are [M] and [rows, TOPK] */
    const kt_family *f = kt_family_find("moe_route");
    kt_tensor_desc t[KT_MAX_TENSORS];
    kt_problem p = {0};
    EXPECT(kt_parse_shape(f, "ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform", &p) == 0);
    p.m = 16;
    EXPECT(f->tensors(&p, t) == 7 && t[5].count == 16 && t[6].count == KT_MOE_HASH_ROWS * 6);
    p.dim[KT_MR_ROUTER] = KT_MOE_ROUTER_V4;
    EXPECT(f->tensors(&p, t) == 7 && t[5].count == 1 && t[6].count == 1);
    EXPECT(kt_family_find("moe_step") &&
           kt_parse_shape(kt_family_find("moe_step"), "ROUTER=HASH,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=uniform",
                          &p) == 0);
    char why[256];
    p.m = 4;
    EXPECT(kt_family_find("moe_step")->check_problem(&p, why, sizeof why) < 0 && strstr(why, "ROUTER=HASH"));
}

KT_TEST(moe_route_rejects_bad_keys) {
    const kt_family *f = kt_family_find("moe_route");
    kt_problem p = {0};
    char why[256];
    EXPECT(kt_parse_shape(f, "ROUTER=V3,E=128,TOPK=8,TM=16,NTM=1,DIST=uniform", &p) == 0);
    p.m = 4;
    EXPECT(f->check_problem(&p, why, sizeof why) < 0 && strstr(why, "multiple of 256"));
    EXPECT(kt_parse_shape(f, "ROUTER=V5,E=256,TOPK=8,TM=16,NTM=1,DIST=uniform", &p) < 0);
    EXPECT(kt_parse_shape(f, "ROUTER=V4,E=256,TOPK=17,TM=16,NTM=1,DIST=uniform", &p) == 0);
    EXPECT(f->check_problem(&p, why, sizeof why) < 0 && strstr(why, "TOPK=17"));
    EXPECT(kt_parse_shape(f, "ROUTER=V4,E=256,TOPK=6,TM=16,NTM=1,DIST=pareto", &p) < 0);
    EXPECT(kt_parse_shape(f, "ROUTER=V4,E=512,TOPK=6,TM=16,NTM=1,DIST=zipf", &p) == 0);
    p.m = 4;
    EXPECT(f->check_problem(&p, why, sizeof why) < 0 && strstr(why, "E=512"));
    EXPECT(kt_parse_shape(f, "ROUTER=V4,E=256,TOPK=6,TM=64,NTM=4,DIST=zipf", &p) == 0);
    EXPECT(f->check_problem(&p, why, sizeof why) < 0 && strstr(why, "NTM=4"));
    EXPECT(kt_parse_shape(f, "ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf", &p) == 0);
    p.m = 9000;
    EXPECT(f->check_problem(&p, why, sizeof why) < 0 && strstr(why, "M=9000"));
    p.m = 256;
    EXPECT(f->check_problem(&p, why, sizeof why) == 0);
    char s[128];
    kt_format_shape(f, &p, s, sizeof s);
    EXPECT(!strcmp(s, "ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf"));
}
