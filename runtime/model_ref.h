/* model_ref.h — the float64 host reference of a DeepSeek-V4 or V3.2 decode step
 * (runtime/model_ref.c): the math of transformers' DeepseekV4ForCausalLM / DeepseekV32ForCausalLM
 * one token at a time, with kt's quantisation optionally applied at the points the GPU step
 * applies it, so the GPU step can be checked against it and it against transformers. */
#ifndef KT_MODEL_REF_H
#define KT_MODEL_REF_H

#include "model.h"
#include "safetensors.h"

typedef struct kt_model_ref kt_model_ref;

/* Which numbers the reference computes with. */
typedef enum kt_ref_mode {
    KT_REF_EXACT = 0, /* the checkpoint's weights as they are, everything in double */
    KT_REF_KT         /* kt's formats: FP8 GEMM weights (128x128 blocks; MXFP4 experts as they
                         are) and activations (1x128, from bf16), GEMM outputs in bf16, the KV
                         cache's e4m3 nope / bf16 rope (V3.2: mla_decode's V32 layout, its bf16
                         absorbed query and latent output: the formats its GPU step will use) */
} kt_ref_mode;

/* Loads the weights every layer needs from w (checked against c: name, shape, dtype), or, with
 * w NULL, seeded random weights of the same shapes; state for `batch` sequences of up to
 * max_ctx tokens. */
int kt_model_ref_open(const kt_model_config *c, const kt_st_set *w, uint64_t seed, kt_ref_mode mode, int batch,
                      long max_ctx, kt_model_ref **out);
/* One decode step: token[b] at position pos for every sequence; logits[b * head_rows + v]. */
int kt_model_ref_step(kt_model_ref *m, const int32_t *token, long pos, double *logits);
void kt_model_ref_close(kt_model_ref *m);

/* One tensor of the checkpoint as f32 (*v; an FP8 one dequantised with its weight_scale_inv)
 * or int32 (*iv, expert ids checked): checked against d (name, with or without the "model."
 * prefix; shape; dtype). malloc'd; -1 naming the file and tensor. */
int kt_model_weight(const kt_model_config *c, const kt_st_set *w, const kt_model_tensor *d, float **v, int32_t **iv);

/* The rope_dim / 2 inverse frequencies of rope r (YaRN when r->factor > 0). */
void kt_rope_inv_freq(const kt_rope *r, long rope_dim, double *inv);

/* The formats kt stores numbers in (shared by the reference, the loader and the tests):
 * e4m3 block quantisation of a [n, k] matrix in 128x128 blocks (in place: the values become
 * code * scale; scales[(n/128) * ceil(k/128)] written when not NULL, codes when not NULL). */
void kt_quant_blocks(float *w, long n, long k, uint8_t *codes, float *scales);
/* act_quant's rule on one activation vector (k a multiple of 128): bf16, then e4m3 per 128. */
void kt_quant_act(double *x, long k);
/* The KV layout's rounding of one 512 vector: 448 nope in e4m3 with a power-of-two scale per 64,
 * 64 rope in bf16. */
void kt_quant_kv(double *x, long head_dim, long rope_dim);

#endif
