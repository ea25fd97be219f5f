/* model.h — the bundled runtime's model description: a DeepSeek-V4 or DeepSeek-V3.2 config as
 * read from a Hugging Face config.json (transformers 5.17's DeepseekV4Config / DeepseekV32Config
 * fields), the layer list, and every tensor a decode step needs, with the names, dtypes and
 * shapes the released checkpoints and transformers' save_pretrained write (save_pretrained
 * converts back to the release names: V4 "model.layers.3.attn.wq_a.weight",
 * "model.layers.3.ffn.experts.7.w2.weight", "head.weight"; V3.2
 * "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "model.layers.3.mlp.experts.7.down_proj.weight",
 * "lm_head.weight").
 *
 * Weight formats: a GEMM weight ships as FP8 e4m3 [N, K] with a 128x128 block scale
 * [ceil(N/128), ceil(K/128)] named `weight_scale_inv` (F32) or, in the V4 release, `scale`
 * (F8_E8M0 or F32) (value = code * scale per block), or BF16/F32, which the loader quantises to
 * that format (scale = block amax / 448). V4's routed experts ship as MXFP4: `weight` I8/U8
 * [N, K/2] (two e2m1 codes a byte, even k in the low nibble) and `scale` (or `weight_scale_inv`)
 * F8_E8M0/U8 [N, K/32] (value 2^(s - 127)): the host reference uses them as they are
 * (kt_model_weight dequantises exactly) and kt_model_experts_mxfp4 lays them out for moe_gemm
 * (kernels/common/moe_layout.h). Norms, HC mixers, sinks, compressor and indexer projections,
 * the router and the head stay BF16/F32 and run as plain kernels. The math each tensor enters
 * is in runtime/model_ref.c (the float64 reference). */
#ifndef KT_MODEL_H
#define KT_MODEL_H

#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>

#define KT_MODEL_MAX_LAYERS 128

typedef enum kt_arch { KT_ARCH_V4 = 0, KT_ARCH_V32 } kt_arch;
/* V4's three attention types; DSA: V3.2's MLA over the cache's tokens the indexer selects. */
typedef enum kt_attn_type { KT_ATTN_SLIDING = 0, KT_ATTN_CSA, KT_ATTN_HCA, KT_ATTN_DSA } kt_attn_type;
/* V4: hash-routed or routed MoE; V3.2: a dense SwiGLU MLP (first layers) or the V3 MoE. */
typedef enum kt_mlp_type { KT_MLP_HASH = 0, KT_MLP_MOE, KT_MLP_DENSE } kt_mlp_type;

/* RoPE of one kind ("main": sliding layers, and every V3.2 layer; "compress": CSA/HCA layers,
 * their compressors and the indexer): theta and, for YaRN, its factor and the beta range
 * (factor 0: plain RoPE); attention_factor multiplies cos and sin (V3.2 applies it; YaRN's
 * mscale / mscale_all_dim ratio) and mscale_all_dim enters V3.2's softmax scale. */
typedef struct kt_rope {
    double theta, factor, beta_fast, beta_slow, attention_factor, mscale_all_dim;
    long original_max_position;
} kt_rope;

typedef struct kt_model_config {
    char model_type[32]; /* "deepseek_v4" or "deepseek_v32" (host reference only) */
    kt_arch arch;
    long vocab, hidden, n_layers;
    long head_rows; /* the LM head's rows (logits) this rank makes: vocab; vocab / N under --tp-shapes N */
    long n_heads, head_dim, rope_dim; /* rope_dim = head_dim * partial_rotary_factor, the trailing slice */
    long q_lora, o_groups, o_lora, window;
    long csa_rate, hca_rate, index_heads, index_dim, index_topk;
    long n_experts, top_k, n_shared, moe_inter;
    double routed_scale, swiglu_limit, rms_eps;
    long hc_mult, hc_iters;
    double hc_eps;
    kt_rope rope_main, rope_compress;
    /* V3.2 only: MLA (kv_lora latent + rope_dim shared key; per head qk_nope + rope_dim for q·k,
     * v_head for values), the softmax scale (qk^-0.5 with YaRN's mscale^2), the V3 router
     * (sigmoid + correction bias, top-2 sum per group, topk_group of n_group groups, top_k,
     * normalised when norm_topk, x routed_scale), the dense layers' intermediate size. V4 keeps
     * them 0. */
    long kv_lora, qk_nope, v_head, n_group, topk_group, inter;
    int norm_topk;
    double softmax_scale;
    kt_attn_type attn[KT_MODEL_MAX_LAYERS];
    kt_mlp_type mlp[KT_MODEL_MAX_LAYERS];
} kt_model_config;

/* How a tensor is stored on the device and which kernel reads it. */
typedef enum kt_weight_kind {
    KT_W_GEMM = 0, /* FP8 e4m3 + 128x128 f32 scales: an FP8 GEMM family's B operand */
    KT_W_PLAIN,    /* f32 on the device: norms, mixers, small projections, head, embedding */
    KT_W_INDEX     /* integer table (tid2eid), int32 on the device */
} kt_weight_kind;

/* One tensor of the model: its checkpoint name, logical shape ([N, K] for a GEMM weight, also
 * when the checkpoint packs it as MXFP4 [N, K/2]) and kind. Experts are listed one by one (as
 * the checkpoint stores them). */
typedef struct kt_model_tensor {
    char name[96];
    int ndim;
    long shape[2];
    kt_weight_kind kind;
} kt_model_tensor;

/* Reads DIR/config.json into c, strictly: a missing or mistyped field, an unknown layer type,
 * a layer list whose length is not num_hidden_layers, or sizes kt's kernels cannot run give -1
 * with the field named ("config.json: head_dim: ..."). */
int kt_model_config_read(const char *path, kt_model_config *c);
/* The same from JSON text (what the fuzz target and tests feed); name is for messages. */
int kt_model_config_parse(const char *name, const char *json, size_t len, kt_model_config *c);

/* The model's tensors in checkpoint order of use; returns how many were written (at most max),
 * or the count needed when out is NULL. */
int kt_model_tensors(const kt_model_config *c, kt_model_tensor *out, int max);

/* The checkpoint's name of listed tensor `name`: as listed, or without "model." where only that
 * form is in w (the releases drop the prefix). */
const char *kt_model_st_name(const kt_st_set *w, const char *name);
/* The block scales of GEMM weight `weight` ("X.weight"): "X.weight_scale_inv", else "X.scale"
 * (the V4 release's name); NULL if neither is in w. */
const kt_st_tensor *kt_model_scale_of(const kt_st_set *w, const char *weight);
/* The checkpoint name of layer l's expert e (e < 0: the shared expert) matrix `which`: 0 gate,
 * 1 up, 2 down (V4's w1, w3, w2; V3.2's gate_proj, up_proj, down_proj). */
void kt_model_expert_name(const kt_model_config *c, long l, long e, int which, char *out, size_t n);
/* How the checkpoint stores tensor d (a GEMM weight): 1 MXFP4 (codes I8/U8 [N, K/2] and its
 * scale F8_E8M0/U8 [N, K/32], `scale` or `weight_scale_inv`, every scale byte finite), 0 not
 * MXFP4 (FP8/BF16/F32: kt_model_weight reads it), -1 a malformed MXFP4 pair (the error names
 * the file and tensor). *codes / *scales (may be NULL) get the two tensors. Names are tried
 * with and without the "model." prefix, as kt_model_weight does. */
int kt_model_mxfp4(const kt_st_set *w, const kt_model_tensor *d, const kt_st_tensor **codes,
                   const kt_st_tensor **scales);
/* The routed experts of layer l, every one stored as MXFP4, in moe_gemm's MXFP4 layout
 * (kernels/common/moe_layout.h): gate+up codes [E, 2I, D/2] and scales [E, 2I, D/32] (rows
 * [0, I) w1, [I, 2I) w3), down codes [E, D, I/2] and scales [E, D, I/32]. -1 naming the file and
 * tensor if an expert is missing, not MXFP4 or malformed. */
int kt_model_experts_mxfp4(const kt_model_config *c, const kt_st_set *w, long l, uint8_t *gu_codes, uint8_t *gu_scales,
                           uint8_t *dn_codes, uint8_t *dn_scales);
/* Layer l's routed experts in the checkpoint: 1 when expert 0's w1 is MXFP4 (then every expert
 * must be), 0 otherwise, -1 on a malformed one. */
int kt_model_experts_are_mxfp4(const kt_model_config *c, const kt_st_set *w, long l);

/* The kt-format per-layer sizes the runtime uses. */
static inline long kt_model_q_dim(const kt_model_config *c) { return c->n_heads * c->head_dim; }
static inline long kt_model_hc_mix(const kt_model_config *c) { return (2 + c->hc_mult) * c->hc_mult; }
static inline long kt_model_group_in(const kt_model_config *c) { return c->n_heads * c->head_dim / c->o_groups; }

#endif
