/* test_model_v32.c — CPU tests of DeepSeek-V3.2 as the runtime's second model: config.json read
 * strictly (MLA, indexer, V3 router, dense first layers, YaRN's scales; the release's legacy
 * names), the released checkpoint's tensor names and shapes, and the float64 host reference on
 * a tiny config (sequences independent, the indexer's top-k in effect, kt's formats close to the
 * exact math), and the GPU step's refusal naming what is missing. (The match with transformers'
 * DeepseekV32ForCausalLM is tests/gpu/runtime_v32.sh, which needs torch.) */
#include "kt.h"
#include "model_ref.h"
#include "run.h"
#include "step.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A tiny V3.2 as transformers' save_pretrained writes it (fields trimmed to what kt reads plus
 * a few it ignores). */
static const char *tiny_v32 =
    "{\"model_type\":\"deepseek_v32\",\"vocab_size\":256,\"hidden_size\":128,\"intermediate_size\":256,"
    "\"moe_intermediate_size\":128,\"num_hidden_layers\":3,\"num_attention_heads\":2,\"num_key_value_heads\":2,"
    "\"n_shared_experts\":1,\"n_routed_experts\":8,\"n_group\":2,\"topk_group\":1,\"num_experts_per_tok\":2,"
    "\"routed_scaling_factor\":2.5,\"kv_lora_rank\":512,\"q_lora_rank\":128,\"qk_rope_head_dim\":64,"
    "\"qk_nope_head_dim\":64,\"v_head_dim\":64,\"head_dim\":64,\"norm_topk_prob\":true,\"hidden_act\":\"silu\","
    "\"index_topk\":4,\"index_head_dim\":128,\"index_n_heads\":16,\"mlp_layer_types\":[\"dense\",\"sparse\",\"sparse\"]"
    ","
    "\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":10000.0,\"factor\":4.0,\"mscale\":1.0,"
    "\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":1024,\"beta_fast\":32.0,\"beta_slow\":1.0},"
    "\"tie_word_embeddings\":false,\"rms_norm_eps\":1e-06}";

/* tiny_v32 with `from` replaced by `to` and then from2 by to2 (NULL: one edit), parsed. */
static int parse_v32_edits(const char *from, const char *to, const char *from2, const char *to2, kt_model_config *c) {
    char buf[4096], buf2[4096];
    const char *at = strstr(tiny_v32, from);
    if (!at) return -2;
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - tiny_v32), tiny_v32, to, at + strlen(from));
    if (from2) {
        if (!(at = strstr(buf, from2))) return -2;
        snprintf(buf2, sizeof buf2, "%.*s%s%s", (int)(at - buf), buf, to2, at + strlen(from2));
        memcpy(buf, buf2, sizeof buf);
    }
    return kt_model_config_parse("config.json", buf, strlen(buf), c);
}
static int parse_v32_edited(const char *from, const char *to, kt_model_config *c) {
    return parse_v32_edits(from, to, NULL, NULL, c);
}

KT_TEST(model_config_reads_v32) {
    kt_model_config c;
    EXPECT(kt_model_config_parse("config.json", tiny_v32, strlen(tiny_v32), &c) == 0);
    EXPECT(c.arch == KT_ARCH_V32 && !strcmp(c.model_type, "deepseek_v32") && c.n_layers == 3);
    EXPECT(c.kv_lora == 512 && c.rope_dim == 64 && c.qk_nope == 64 && c.v_head == 64 && c.head_dim == 128);
    EXPECT(c.mlp[0] == KT_MLP_DENSE && c.mlp[1] == KT_MLP_MOE && c.attn[2] == KT_ATTN_DSA && c.inter == 256);
    EXPECT(c.n_group == 2 && c.topk_group == 1 && c.top_k == 2 && c.norm_topk && c.routed_scale == 2.5);
    EXPECT(c.index_heads == 16 && c.index_topk == 4 && isinf(c.swiglu_limit));
    /* YaRN: softmax scale (nope + rope)^-0.5 * (0.1 ln 4 + 1)^2; mscale = mscale_all_dim: cos/sin x 1 */
    EXPECT(fabs(c.softmax_scale - pow(0.1 * log(4.0) + 1, 2) / sqrt(128.0)) < 1e-15);
    EXPECT(c.rope_main.factor == 4 && c.rope_main.attention_factor == 1.0 && c.rope_main.original_max_position == 1024);
    /* mscale 0.707 against mscale_all_dim 1: attention_factor is their mscales' ratio */
    EXPECT(parse_v32_edited("\"mscale\":1.0", "\"mscale\":0.707", &c) == 0 &&
           fabs(c.rope_main.attention_factor - (0.0707 * log(4.0) + 1) / (0.1 * log(4.0) + 1)) < 1e-15);
    /* the release's config.json: rope_scaling with "type", rope_theta outside it, first_k_dense_replace */
    EXPECT(parse_v32_edited(
               "\"mlp_layer_types\":[\"dense\",\"sparse\",\"sparse\"],\"rope_parameters\":{\"rope_type\":\"yarn\","
               "\"rope_theta\":10000.0,",
               "\"first_k_dense_replace\":2,\"rope_theta\":50000,\"scoring_func\":\"sigmoid\",\"topk_method\":"
               "\"noaux_tc\",\"rope_scaling\":{\"type\":\"yarn\",",
               &c) == 0);
    EXPECT(c.mlp[1] == KT_MLP_DENSE && c.mlp[2] == KT_MLP_MOE && c.rope_main.theta == 50000 && c.rope_main.factor == 4);
}

KT_TEST(model_config_refuses_bad_v32) {
    kt_model_config c;
    EXPECT(parse_v32_edited("\"kv_lora_rank\":512", "\"kv_lora_rank\":256", &c) == -1 &&
           strstr(kt_error(), "512 latent + 64 rope"));
    EXPECT(parse_v32_edited("\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", &c) == -1 &&
           strstr(kt_error(), "hidden_act 'gelu'"));
    EXPECT(parse_v32_edited("\"norm_topk_prob\":true", "\"scoring_func\":\"softmax\"", &c) == -1 &&
           strstr(kt_error(), "scoring_func 'softmax': kt runs sigmoid"));
    EXPECT(parse_v32_edited("\"n_group\":2", "\"n_group\":3", &c) == -1 && strstr(kt_error(), "n_group = 3"));
    EXPECT(parse_v32_edited("\"topk_group\":1", "\"topk_group\":3", &c) == -1 && strstr(kt_error(), "topk_group = 3"));
    EXPECT(parse_v32_edited("\"num_experts_per_tok\":2", "\"num_experts_per_tok\":5", &c) == -1 &&
           strstr(kt_error(), "num_experts_per_tok = 5 from topk_group = 1 of 2 groups of 4"));
    EXPECT(parse_v32_edited("\"sparse\",\"sparse\"]", "\"sparse\",\"moe\"]", &c) == -1 &&
           strstr(kt_error(), "unknown MLP type 'moe'"));
    EXPECT(parse_v32_edited("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":true", &c) == -1 &&
           strstr(kt_error(), "lm_head.weight"));
    EXPECT(parse_v32_edited("\"q_lora_rank\":128", "\"q_lora_rank\":null", &c) == -1 &&
           strstr(kt_error(), "q_lora_rank null"));
    EXPECT(parse_v32_edited("\"intermediate_size\":256,", "", &c) == -1 &&
           strstr(kt_error(), "missing field intermediate_size"));
    EXPECT(parse_v32_edited("\"norm_topk_prob\":true", "\"norm_topk_prob\":1", &c) == -1 &&
           strstr(kt_error(), "norm_topk_prob"));
}

/* The tensor called name in the list, or NULL. */
static const kt_model_tensor *find(const kt_model_tensor *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

KT_TEST(model_tensors_v32_release_names) {
    kt_model_config c;
    EXPECT(kt_model_config_parse("config.json", tiny_v32, strlen(tiny_v32), &c) == 0);
    int n = kt_model_tensors(&c, NULL, 0);
    /* embed, norm, head; per layer 14 attention + norms, then 3 dense or 2 router + 3 x (8 + 1) experts */
    EXPECT(n == 3 + 3 * 14 + 3 + 2 * (2 + 27));
    kt_model_tensor *t = malloc((size_t)n * sizeof *t);
    EXPECT(kt_model_tensors(&c, t, n) == n);
    const struct {
        const char *name;
        long d0, d1;
        kt_weight_kind kind;
    } want[] = {{"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 576, 128, KT_W_GEMM},
                {"model.layers.0.self_attn.kv_b_proj.weight", 2 * (64 + 64), 512, KT_W_GEMM},
                {"model.layers.0.self_attn.q_b_proj.weight", 2 * 128, 128, KT_W_GEMM},
                {"model.layers.0.self_attn.o_proj.weight", 128, 2 * 64, KT_W_GEMM},
                {"model.layers.0.self_attn.indexer.wq_b.weight", 16 * 128, 128, KT_W_GEMM},
                {"model.layers.0.self_attn.indexer.wk.weight", 128, 128, KT_W_GEMM},
                {"model.layers.0.self_attn.indexer.k_norm.bias", 128, 0, KT_W_PLAIN},
                {"model.layers.0.self_attn.indexer.weights_proj.weight", 16, 128, KT_W_PLAIN},
                {"model.layers.0.mlp.down_proj.weight", 128, 256, KT_W_GEMM},
                {"model.layers.2.mlp.gate.e_score_correction_bias", 8, 0, KT_W_PLAIN},
                {"model.layers.2.mlp.experts.7.down_proj.weight", 128, 128, KT_W_GEMM},
                {"model.layers.1.mlp.shared_experts.up_proj.weight", 128, 128, KT_W_GEMM},
                {"lm_head.weight", 256, 128, KT_W_PLAIN}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kt_model_tensor *x = find(t, n, want[i].name);
        EXPECT(x && x->shape[0] == want[i].d0 && x->shape[1] == want[i].d1 && x->kind == want[i].kind);
        if (!x) printf("missing %s\n", want[i].name);
    }
    EXPECT(!find(t, n, "model.layers.0.mlp.gate.weight") && !find(t, n, "model.layers.1.mlp.gate_proj.weight"));
    free(t);
}

/* ||a - b|| / ||b|| */
static double rel_l2(const double *a, const double *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / den);
}

/* 16 steps of refs[r] (batch 1 except refs[1], batch 2 fed the same tokens in slot 0); per-step
 * logits of the first sequence into out[r][step][vocab]. */
static void run_refs(kt_model_ref **refs, int n, long vocab, double **out) {
    uint64_t rng = 5;
    double *l = malloc((size_t)(2 * vocab) * sizeof *l);
    for (long t = 0; t < 16; t++) {
        int32_t tok[2] = {(int32_t)(kt_rng_next(&rng) % vocab), (int32_t)(kt_rng_next(&rng) % vocab)};
        for (int r = 0; r < n; r++) {
            for (long i = 0; i < 2 * vocab; i++) l[i] = NAN;
            EXPECT(kt_model_ref_step(refs[r], tok, t, l) == 0);
            memcpy(out[r] + t * vocab, l, (size_t)vocab * sizeof *l);
        }
    }
    free(l);
}

KT_TEST(model_ref_v32) {
    kt_model_config c, all, smooth;
    EXPECT(kt_model_config_parse("config.json", tiny_v32, strlen(tiny_v32), &c) == 0);
    EXPECT(parse_v32_edited("\"index_topk\":4", "\"index_topk\":64", &all) == 0);
    /* no discrete choice can flip: every token kept, every expert routed (one group) */
    EXPECT(parse_v32_edits("\"index_topk\":4", "\"index_topk\":64",
                           "\"n_group\":2,\"topk_group\":1,\"num_experts_per_tok\":2",
                           "\"n_group\":1,\"topk_group\":1,\"num_experts_per_tok\":8", &smooth) == 0);
    long V = c.vocab;
    kt_model_ref *r[5];
    EXPECT(kt_model_ref_open(&c, NULL, 11, KT_REF_EXACT, 1, 16, &r[0]) == 0);
    EXPECT(kt_model_ref_open(&c, NULL, 11, KT_REF_EXACT, 2, 16, &r[1]) == 0);
    EXPECT(kt_model_ref_open(&all, NULL, 11, KT_REF_EXACT, 1, 16, &r[2]) == 0);
    EXPECT(kt_model_ref_open(&smooth, NULL, 11, KT_REF_EXACT, 1, 16, &r[3]) == 0);
    EXPECT(kt_model_ref_open(&smooth, NULL, 11, KT_REF_KT, 1, 16, &r[4]) == 0);
    double *out[5];
    for (int i = 0; i < 5; i++) out[i] = malloc((size_t)(16 * V) * sizeof(double));
    run_refs(r, 5, V, out);
    /* a second sequence in the batch changes nothing of the first */
    EXPECT(!memcmp(out[0], out[1], (size_t)(16 * V) * sizeof(double)));
    /* the indexer's top 4: the same as keeping every token while there are at most 4, then not */
    int same_early = 1, differ_late = 1;
    for (long t = 0; t < 16; t++) {
        double d = rel_l2(out[0] + t * V, out[2] + t * V, V);
        if (t < 4)
            same_early &= d == 0;
        else
            differ_late &= d > 1e-6;
    }
    EXPECT(same_early && differ_late);
    /* kt's formats against the exact math where nothing can flip: measured 0.14 worst step
     * (FP8 weights and activations, bf16 GEMM outputs, the V32 KV layout; with the routed
     * config's top-k choices flipping it reaches 0.98) */
    double worst = 0;
    for (long t = 0; t < 16; t++) worst = fmax(worst, rel_l2(out[4] + t * V, out[3] + t * V, V));
    printf("model_ref v32: kt formats vs exact, worst step rel L2 %.4f\n", worst);
    EXPECT(worst > 1e-3 && worst < 0.2);
    for (int i = 0; i < 5; i++) kt_model_ref_close(r[i]), free(out[i]);
}

KT_TEST(step_refuses_v32) {
    /* kt run without --reference on a V3.2 its families cannot take (16 indexer heads; V3.2 has
     * no plain kernels): one line naming the part, the family's reason and the way out, before
     * any GPU is opened; --plain-kernels likewise */
    kt_model_config c;
    EXPECT(kt_model_config_parse("config.json", tiny_v32, strlen(tiny_v32), &c) == 0);
    kt_run_options o = {.batch = 1, .context = 8, .steps = 1};
    kt_step *s = NULL;
    EXPECT(kt_step_open(&c, NULL, &o, &s) == -1 && s == NULL && strstr(kt_error(), "V3.2's indexer") &&
           strstr(kt_error(), "64 heads of 128, the model has 16") && strstr(kt_error(), "--reference kt"));
    c.index_heads = 64;
    o.plain_kernels = 1;
    EXPECT(kt_step_open(&c, NULL, &o, &s) == -1 && s == NULL && strstr(kt_error(), "--plain-kernels"));
    o.plain_kernels = 0; /* 64 indexer heads: the attention's scale (YaRN factor 4), then its 2 heads */
    EXPECT(kt_step_open(&c, NULL, &o, &s) == -1 && s == NULL && strstr(kt_error(), "V3.2's attention") &&
           strstr(kt_error(), "softmax scale"));
    c.softmax_scale = 0.13523377;
    EXPECT(kt_step_open(&c, NULL, &o, &s) == -1 && s == NULL && strstr(kt_error(), "V3.2's attention") &&
           strstr(kt_error(), "HQ=2"));
}

KT_TEST(gemm_blocks_pad_v32) {
    /* the GPU step loads V3.2's kv_a (576 rows) into whole 128-row blocks, the rows past 576 zero:
     * the partial block's scale and codes are those of the 576-row quantisation (the host
     * reference's), and the padding's codes are zero */
    long n = 576, k = 256, np = 640;
    float *w = malloc(sizeof(float) * np * k), *wp = calloc((size_t)(np * k), sizeof(float));
    float s[5 * 2], sp[5 * 2];
    uint8_t *q = malloc((size_t)(n * k)), *qp = malloc((size_t)(np * k));
    uint64_t rng = 23;
    for (long i = 0; i < n * k; i++) wp[i] = w[i] = kt_rng_uniform(&rng) * (i < 512 * k ? 1.0f : 0.01f);
    kt_quant_blocks(w, n, k, q, s);
    kt_quant_blocks(wp, np, k, qp, sp);
    EXPECT(memcmp(s, sp, sizeof s) == 0 && memcmp(q, qp, (size_t)(n * k)) == 0);
    int zero = 1;
    for (long i = n * k; i < np * k; i++) zero &= qp[i] == 0;
    EXPECT(zero);
    free(w), free(wp), free(q), free(qp);
}
