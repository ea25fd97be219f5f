/* test_step_plan.c — CPU tests of the runtime step's plan (runtime/step_plan.c): for V4-Flash at
 * --tp-shapes 4 (B 1, 16, 64; context 8K and 32K; FP8 and MXFP4 experts, its 3 hash-routed
 * layers by moe_route HASH) every part runs its kt family, each problem
 * is the model's shape (passing the family's check_problem, its default config building for
 * sm_90 and sm_120 and fitting); a model a family cannot express keeps that part plain with the
 * reason; --plain-kernels keeps every part plain; the caches' addressing agrees between the
 * runtime's writes and the families' reads. tests/cpu/step_plan.sh compiles the problems. */
#include "../../kernels/common/indexer_layout.h"
#include "../../kernels/common/kv_v4.cuh"
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
