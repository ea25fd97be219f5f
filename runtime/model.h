/* model.h — the bundled runtime's model description: a DeepSeek-V4 config as read from a
 * Hugging Face config.json (transformers 5.17's DeepseekV4Config fields), the layer list, and
 * every tensor a decode step needs, with the names, dtypes and shapes the released checkpoints
 * and transformers' save_pretrained write (save_pretrained converts back to the release names:
 * "model.layers.3.attn.wq_a.weight", "model.layers.3.ffn.experts.7.w2.weight", "head.weight").
 *
 * Weight formats: a GEMM weight ships as FP8 e4m3 [N, K] with an F32 `weight_scale_inv`
 * [ceil(N/128), ceil(K/128)] (value = code * scale per 128x128 block), or BF16/F32, which the
 * loader quantises to that format (scale = block amax / 448); routed experts ship as MXFP4 in
 * the release (recognised, not loaded yet: the loader says so). Norms, HC mixers, sinks,
 * compressor and indexer projections, the router and the head stay BF16/F32 and run as plain
 * kernels. The math each tensor enters is in runtime/model_ref.c (the float64 reference). */
#ifndef KT_MODEL_H
#define KT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define KT_MODEL_MAX_LAYERS 128

typedef enum kt_attn_type { KT_ATTN_SLIDING = 0, KT_ATTN_CSA, KT_ATTN_HCA } kt_attn_type;
typedef enum kt_mlp_type { KT_MLP_HASH = 0, KT_MLP_MOE } kt_mlp_type;

/* RoPE of one kind ("main": sliding layers; "compress": CSA/HCA layers, their compressors and
 * the indexer): theta and, for YaRN, its factor and the beta range (factor 0: plain RoPE). */
typedef struct kt_rope {
    double theta, factor, beta_fast, beta_slow, attention_factor;
    long original_max_position;
} kt_rope;

typedef struct kt_model_config {
    char model_type[32];          /* "deepseek_v4" (runs) or "deepseek_v32" (read, not run) */
    long vocab, hidden, n_layers;
    long n_heads, head_dim, rope_dim; /* rope_dim = head_dim * partial_rotary_factor, the trailing slice */
    long q_lora, o_groups, o_lora, window;
    long csa_rate, hca_rate, index_heads, index_dim, index_topk;
    long n_experts, top_k, n_shared, moe_inter;
    double routed_scale, swiglu_limit, rms_eps;
    long hc_mult, hc_iters;
    double hc_eps;
    kt_rope rope_main, rope_compress;
    kt_attn_type attn[KT_MODEL_MAX_LAYERS];
    kt_mlp_type mlp[KT_MODEL_MAX_LAYERS];
} kt_model_config;

/* How a tensor is stored on the device and which kernel reads it. */
typedef enum kt_weight_kind {
    KT_W_GEMM = 0, /* FP8 e4m3 + 128x128 f32 scales: an FP8 GEMM family's B operand */
    KT_W_PLAIN,    /* f32 on the device: norms, mixers, small projections, head, embedding */
    KT_W_INDEX     /* integer table (tid2eid), int32 on the device */
} kt_weight_kind;

/* One tensor of the model: its checkpoint name, shape and kind. Experts are listed one by one
 * (as the checkpoint stores them). */
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

/* The kt-format per-layer sizes the runtime uses. */
static inline long kt_model_q_dim(const kt_model_config *c) { return c->n_heads * c->head_dim; }
static inline long kt_model_hc_mix(const kt_model_config *c) { return (2 + c->hc_mult) * c->hc_mult; }
static inline long kt_model_group_in(const kt_model_config *c) { return c->n_heads * c->head_dim / c->o_groups; }

#endif
