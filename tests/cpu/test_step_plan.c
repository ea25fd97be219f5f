/* test_step_plan.c — CPU tests of the runtime step's plan (runtime/step_plan.c): for V4-Flash at
 * --tp-shapes 4 (B 1, 16, 64; context 8K and 32K; FP8 and MXFP4 experts, its 3 hash-routed
 * layers by moe_route HASH) every part runs its kt family, each problem
 * is the model's shape (passing the family's check_problem, its default config building for
 * sm_90 and sm_120 and fitting); a model a family cannot express keeps that part plain with the
 * reason; --plain-kernels keeps every part plain; the caches' addressing agrees between the
 * runtime's writes and the families' reads; DeepSeek-V3.2 (tests/gpu/runtime_v32.sh's tiny model at
 * the families' shapes and the release's): its problems (mla_indexer over every token, mla_decode
 * LAYOUT=V32, moe_route ROUTER=V3), the shapes they refuse, its caches' addressing.
 * tests/cpu/step_plan.sh compiles the problems. */
#include "../../kernels/common/indexer_layout.h"
#include "../../kernels/common/kv_v4.cuh"
#include "../../kernels/common/mla_layout.h"
#include "../../kernels/moe_gemm.h"
#include "kt.h"
#include "model.h"
#include "step_plan.h"
#include "test.h"

#include <string.h>

/* V4-Flash's config.json fields (transformers' DeepseekV4Config defaults for the rest). */
static const char *flash_config =
    "{\"model_type\":\"deepseek_v4\",\"vocab_size\":129280,\"hidden_size\":4096,\"num_hidden_layers\":43,"
    "\"num_attention_heads\":64,\"head_dim\":512,\"q_lora_rank\":1024,\"n_routed_experts\":256,"
    "\"num_experts_per_tok\":6,\"moe_intermediate_size\":2048,\"qk_rope_head_dim\":64}";

/* The config with one rank's shapes of a tp-way deployment (runtime/run.c's --tp-shapes). */
static void flash(int tp, kt_model_config *c) {
    EXPECT(kt_model_config_parse("config.json", flash_config, strlen(flash_config), c) == 0);
    c->n_heads /= tp, c->o_groups /= tp, c->moe_inter /= tp;
}

/* p has the shape s of family name (its own key names, via kt_format_shape) and batch B. */
static int shape_is(const char *name, const kt_problem *p, const char *s, int B) {
    char got[256];
    kt_format_shape(kt_family_find(name), p, got, sizeof got);
    if (strcmp(got, s) || p->m != B) fprintf(stderr, "  %s: %s B=%ld, expected %s B=%d\n", name, got, p->m, s, B);
    return !strcmp(got, s) && p->m == B;
}

KT_TEST(model_step_plan_flash_tp4) {
    kt_model_config c;
    flash(4, &c);
    const int batches[] = {1, 16, 64};
    const long contexts[] = {8192, 32768};
    for (int bi = 0; bi < 3; bi++)
        for (int ci = 0; ci < 4; ci++) {
            int B = batches[bi], fmt = ci / 2;
            long ctx = contexts[ci % 2];
            const char *fn = fmt == KT_MOE_MXFP4 ? "mxfp4" : "fp8";
            kt_step_plan p;
            kt_step_plan_make(&c, B, ctx, 0, 1, fmt, &p);
            for (int i = 0; i < KT_N_PARTS; i++) {
                if (!p.family[i]) fprintf(stderr, "  %s plain: %s\n", kt_step_part_names[i], p.why[i]);
                EXPECT(p.family[i] == 1 && p.why[i][0] == 0);
            }
            char s[256];
            snprintf(s, sizeof s, "TOPK=512,CTX=%ld,DIST=equal,VALUES=grid", ctx / 4);
            EXPECT(shape_is("mla_indexer", &p.indexer, s, B));
            EXPECT(shape_is("mla_decode", &p.attn[KT_PLAN_CSA], "LAYOUT=V4,HQ=16,TOPK=512,SQ=1", B));
            snprintf(s, sizeof s, "LAYOUT=V4,HQ=16,TOPK=%ld,SQ=1", ctx / 128 + 1);
            EXPECT(shape_is("mla_decode", &p.attn[KT_PLAN_HCA], s, B));
            EXPECT(p.attn[KT_PLAN_SLIDING].n_dims == 0); /* V4-Flash's layers are all compressed */
            EXPECT(shape_is("moe_route", &p.route, "ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform", B));
            EXPECT(shape_is("moe_route", &p.route_hash, "ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform", B));
            snprintf(s, sizeof s, "FORMAT=%s,STAGE=gateup,E=256,N=1024,K=4096,TOPK=6,DIST=uniform", fn);
            EXPECT(shape_is("moe_gemm", &p.gateup, s, B));
            snprintf(s, sizeof s, "FORMAT=%s,STAGE=down,E=256,N=4096,K=512,TOPK=6,DIST=uniform", fn);
            EXPECT(shape_is("moe_gemm", &p.down, s, B) && p.experts == fmt);
            const kt_family *f[16];
            kt_problem probs[16];
            int n = kt_step_plan_problems(&p, f, probs, 16);
            EXPECT(n == 7);
            for (int i = 0; i < n; i++) {
                char why[256];
                EXPECT(f[i]->check_problem(&probs[i], why, sizeof why) == 0);
                const int archs[] = {90, 120};
                for (int a = 0; a < 2; a++) {
                    kt_config k = kt_default_config(f[i], &probs[i], 132, archs[a]);
                    EXPECT(f[i]->check_config(&k, archs[a], why, sizeof why) == 0 && f[i]->config_fits(&k, &probs[i]));
                }
            }
        }
}

KT_TEST(model_step_plan_fallbacks) {
    kt_model_config c;
    flash(4, &c);
    kt_step_plan p;
    kt_step_plan_make(&c, 4, 8192, 1, 1, KT_MOE_FP8, &p); /* --plain-kernels */
    for (int i = 0; i < KT_N_PARTS; i++) EXPECT(!p.family[i] && strstr(p.why[i], "--plain-kernels"));
    const kt_family *f[16];
    kt_problem probs[16];
    EXPECT(kt_step_plan_problems(&p, f, probs, 16) == 0);
    /* the shapes a family cannot take: each part plain with the reason, the others unaffected */
    kt_model_config d = c;
    d.index_heads = 4;
    kt_step_plan_make(&d, 4, 8192, 0, 1, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_INDEXER] && strstr(p.why[KT_PART_INDEXER], "64 heads") && p.family[KT_PART_ATTENTION] &&
           p.family[KT_PART_MOE]);
    d = c;
    d.n_heads = 2; /* mla_decode takes a multiple of 16 heads */
    kt_step_plan_make(&d, 4, 8192, 0, 1, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_ATTENTION] && strstr(p.why[KT_PART_ATTENTION], "HQ=2") && p.family[KT_PART_INDEXER]);
    d = c;
    d.window = 256;
    kt_step_plan_make(&d, 4, 8192, 0, 1, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_ATTENTION] && strstr(p.why[KT_PART_ATTENTION], "sliding_window 256"));
    d = c;
    d.n_experts = 8; /* moe_route takes a multiple of 32 experts */
    kt_step_plan_make(&d, 4, 8192, 0, 0, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_MOE] && strstr(p.why[KT_PART_MOE], "E=8") && p.family[KT_PART_ATTENTION]);
    d = c;
    d.routed_scale = 2.5;
    kt_step_plan_make(&d, 4, 8192, 0, 0, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_MOE] && strstr(p.why[KT_PART_MOE], "routed_scaling_factor 2.5"));
    d = c;
    kt_step_plan_make(&d, 4, 8192, 0, 0, KT_MOE_FP8, &p); /* a checkpoint's routing: zipf */
    EXPECT(p.family[KT_PART_MOE] && shape_is("moe_route", &p.route, "ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf", 4));
    for (long l = 0; l < d.n_layers; l++) d.mlp[l] = KT_MLP_MOE; /* no hash-routed layer: no HASH problem */
    kt_step_plan_make(&d, 4, 8192, 0, 0, KT_MOE_FP8, &p);
    EXPECT(p.family[KT_PART_MOE] && p.route.n_dims && !p.route_hash.n_dims);
}

KT_TEST(model_step_addressing) {
    /* where the runtime's kernels write a token (sequence b's cache at b x its stride, slot t;
     * kv_v4.cuh) is where the families read it (the cache-wide id in their lists; mla_layout.h
     * for mla_decode, the block table for mla_indexer): for window, HCA and CSA capacities */
    EXPECT(KT_KV_PAGE_BYTES == 37440 && KT_KV_TOKEN_BYTES == 584 && KT_KV_PAGE_BYTES == KT_MLA_V4_PAGE_BYTES);
    const long caps[] = {16, 17, 64, 65, 128, 2049, 8193};
    for (int c = 0; c < 7; c++)
        for (long b = 0; b < 6; b += 5)
            for (long t = 0; t < caps[c]; t += t < 70 ? 1 : 61) {
                long id = kt_step_token_id(caps[c], b, t);
                unsigned long long base = b * kt_kv_bytes(caps[c]);
                EXPECT((unsigned long long)kt_mla_token_at(KT_MLA_V4, id) == base + kt_kv_data(t));
                EXPECT((unsigned long long)kt_mla_scales_at(KT_MLA_V4, id) == base + kt_kv_scales(t));
                /* the indexer: its list's id through the table, and the key's bytes */
                int page = kt_step_table_entry(caps[c], b, t / KT_IDX_PAGE);
                EXPECT(page >= 0 && (long)page * KT_IDX_PAGE + t % KT_IDX_PAGE == id);
                long pages = (caps[c] + 63) / 64; /* rt_comp_emit's page b * pages + t / 64 */
                EXPECT(kt_idx_code_offset(page, (int)(t % KT_IDX_PAGE)) ==
                       kt_idx_code_offset(b * pages + t / KT_IDX_PAGE, (int)(t % KT_IDX_PAGE)));
            }
    EXPECT(kt_step_table_entry(64, 3, 1) == -1 && kt_step_table_entry(65, 3, 1) == 7);
}

/* runtime_ref.py's v32fam: the tiny DeepseekV32 the GPU step runs (config.json as saved). */
static const char *v32fam_config =
    "{\"model_type\":\"deepseek_v32\",\"vocab_size\":512,\"hidden_size\":256,\"intermediate_size\":256,"
    "\"moe_intermediate_size\":128,\"num_hidden_layers\":3,\"num_attention_heads\":16,\"n_shared_experts\":1,"
    "\"n_routed_experts\":256,\"n_group\":8,\"topk_group\":4,\"num_experts_per_tok\":8,\"kv_lora_rank\":512,"
    "\"q_lora_rank\":128,\"qk_rope_head_dim\":64,\"qk_nope_head_dim\":128,\"v_head_dim\":128,\"index_topk\":16,"
    "\"index_head_dim\":128,\"index_n_heads\":64,\"mlp_layer_types\":[\"dense\",\"sparse\",\"sparse\"],"
    "\"routed_scaling_factor\":2.5,\"norm_topk_prob\":true,\"tie_word_embeddings\":false,\"rope_parameters\":{"
    "\"rope_type\":\"yarn\",\"rope_theta\":10000.0,\"factor\":40.0,\"mscale\":1.0,\"mscale_all_dim\":1.0,"
    "\"original_max_position_embeddings\":4096,\"beta_fast\":32.0,\"beta_slow\":1.0}}";

KT_TEST(model_step_plan_v32) {
    kt_model_config c;
    EXPECT(kt_model_config_parse("config.json", v32fam_config, strlen(v32fam_config), &c) == 0);
    kt_step_plan p;
    kt_step_plan_make(&c, 2, 32, 0, 0, KT_MOE_FP8, &p);
    for (int i = 0; i < KT_N_PARTS; i++) {
        if (!p.family[i]) fprintf(stderr, "  %s plain: %s\n", kt_step_part_names[i], p.why[i]);
        EXPECT(p.family[i] == 1);
    }
    EXPECT(shape_is("mla_indexer", &p.indexer, "TOPK=16,CTX=32,DIST=equal,VALUES=grid", 2));
    EXPECT(shape_is("mla_decode", &p.attn[KT_PLAN_DSA], "LAYOUT=V32,HQ=16,TOPK=16,SQ=1", 2));
    for (int m = 0; m < KT_PLAN_DSA; m++) EXPECT(p.attn[m].n_dims == 0);
    EXPECT(shape_is("moe_route", &p.route, "ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=zipf", 2));
    EXPECT(shape_is("moe_gemm", &p.gateup, "FORMAT=fp8,STAGE=gateup,E=256,N=256,K=256,TOPK=8,DIST=zipf", 2));
    EXPECT(shape_is("moe_gemm", &p.down, "FORMAT=fp8,STAGE=down,E=256,N=256,K=128,TOPK=8,DIST=zipf", 2));
    const kt_family *f[16];
    kt_problem probs[16];
    EXPECT(kt_step_plan_problems(&p, f, probs, 16) == 5);
    /* what the V3.2 families cannot take, each with its reason */
    kt_model_config d = c;
    d.softmax_scale *= 1.01; /* mla_decode V32's scale is a constant */
    kt_step_plan_make(&d, 2, 32, 0, 0, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_ATTENTION] && strstr(p.why[KT_PART_ATTENTION], "softmax scale") &&
           p.family[KT_PART_INDEXER]);
    d = c;
    d.n_group = 4;
    kt_step_plan_make(&d, 2, 32, 0, 0, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_MOE] && strstr(p.why[KT_PART_MOE], "n_group 4"));
    d = c;
    d.n_experts = 128, d.top_k = 4; /* moe_route V3 takes multiples of 256 */
    kt_step_plan_make(&d, 2, 32, 0, 0, KT_MOE_FP8, &p);
    EXPECT(!p.family[KT_PART_MOE] && strstr(p.why[KT_PART_MOE], "E=128"));
    /* the release's shapes: 128 heads, the indexer's top 2048 of every token */
    d = c;
    d.n_heads = 128, d.index_topk = 2048, d.hidden = 7168, d.moe_inter = 2048;
    kt_step_plan_make(&d, 64, 8192, 0, 1, KT_MOE_FP8, &p);
    EXPECT(p.family[0] && p.family[1] && p.family[2]);
    EXPECT(shape_is("mla_indexer", &p.indexer, "TOPK=2048,CTX=8192,DIST=equal,VALUES=grid", 64));
    EXPECT(shape_is("mla_decode", &p.attn[KT_PLAN_DSA], "LAYOUT=V32,HQ=128,TOPK=2048,SQ=1", 64));
    int n = kt_step_plan_problems(&p, f, probs, 16);
    for (int i = 0; i < n; i++) {
        char why[256];
        EXPECT(f[i]->check_problem(&probs[i], why, sizeof why) == 0);
        kt_config k = kt_default_config(f[i], &probs[i], 132, 90);
        EXPECT(f[i]->check_config(&k, 90, why, sizeof why) == 0 && f[i]->config_fits(&k, &probs[i]));
    }
}

KT_TEST(model_step_addressing_v32) {
    /* V3.2's caches hold every token: sequence b's token t is where rt_v32_kv_append writes it
     * (id b * ceil(ctx / 64) * 64 + t in mla_decode's V32 layout) and where mla_indexer's list
     * names it (its key at page b * ceil(ctx / 64) + t / 64 through the block table, the page
     * rt_v32_index_k writes) */
    const long ctxs[] = {8, 64, 65, 8192};
    for (int c = 0; c < 4; c++)
        for (long b = 0; b < 5; b += 4)
            for (long t = 0; t < ctxs[c]; t += t < 70 ? 1 : 97) {
                long pages = (ctxs[c] + 63) / 64, id = kt_step_token_id(ctxs[c], b, t);
                EXPECT(id == b * pages * KT_MLA_PAGE + t);
                EXPECT(kt_mla_token_at(KT_MLA_V32, id) == (b * pages + t / 64) * KT_MLA_V32_PAGE_BYTES + t % 64 * 656);
                int page = kt_step_table_entry(ctxs[c], b, t / KT_IDX_PAGE);
                EXPECT(page == b * pages + t / KT_IDX_PAGE && (long)page * KT_IDX_PAGE + t % KT_IDX_PAGE == id);
            }
}
