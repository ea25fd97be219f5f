/* model.c — reads a DeepSeek-V4 or V3.2 config.json strictly (cJSON) into kt_model_config,
 * lists the tensors the decode step needs under their checkpoint names, and reads MXFP4 routed
 * experts into moe_gemm's layout (runtime/model.h). Legacy field names that released configs
 * ship (compress_ratios, num_hash_layers, qk_rope_head_dim, compress_rate_csa/hca,
 * rope_scaling, first_k_dense_replace) are folded in as transformers folds them. */
#include "model.h"

#include "../kernels/common/moe_layout.h"
#include "kt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Reads number field `key` of o into *v: absent -> def (required: def < 0 fails); present but
 * not a number (or not an integer when integral) -> fails naming the field. */
static int get_num(const char *file, const cJSON *o, const char *key, double def, int integral, double *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it || cJSON_IsNull(it)) {
        if (def < 0) return kt_fail("%s: missing field %s", file, key);
        *v = def;
        return 0;
    }
    if (!cJSON_IsNumber(it)) return kt_fail("%s: %s: expected a number", file, key);
    if (integral && (it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 1e12))
        return kt_fail("%s: %s: expected an integer, got %g", file, key, it->valuedouble);
    *v = it->valuedouble;
    return 0;
}

static int get_long(const char *file, const cJSON *o, const char *key, long def, long *v) {
    double d;
    if (get_num(file, o, key, (double)def, 1, &d)) return -1;
    *v = (long)d;
    return 0;
}

static int get_double(const char *file, const cJSON *o, const char *key, double def, double *v) {
    return get_num(file, o, key, def, 0, v);
}

static int parse_attn(const char *file, const char *s, kt_attn_type *t) {
    if (!strcmp(s, "sliding_attention"))
        *t = KT_ATTN_SLIDING;
    else if (!strcmp(s, "compressed_sparse_attention"))
        *t = KT_ATTN_CSA;
    else if (!strcmp(s, "heavily_compressed_attention"))
        *t = KT_ATTN_HCA;
    else
        return kt_fail("%s: layer_types: unknown attention type '%s'", file, s);
    return 0;
}

/* layer_types (names) or the legacy compress_ratios (0 / 4 / 128 per layer); neither: the
 * transformers default (2 HCA, then CSA and HCA interleaved). */
static int parse_layer_types(const char *file, const cJSON *o, kt_model_config *c) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(o, "layer_types");
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(o, "compress_ratios");
    const cJSON *list = lt && !cJSON_IsNull(lt) ? lt : cr && !cJSON_IsNull(cr) ? cr : NULL;
    const char *key = list == lt ? "layer_types" : "compress_ratios";
    if (!list) {
        for (long i = 0; i < c->n_layers; i++) c->attn[i] = i < 2 || i % 2 == 0 ? KT_ATTN_HCA : KT_ATTN_CSA;
        return 0;
    }
    if (!cJSON_IsArray(list)) return kt_fail("%s: %s: expected a list", file, key);
    if (cJSON_GetArraySize(list) < c->n_layers)
        return kt_fail("%s: %s has %d entries, num_hidden_layers is %ld", file, key, cJSON_GetArraySize(list),
                       c->n_layers);
    for (long i = 0; i < c->n_layers; i++) {
        const cJSON *e = cJSON_GetArrayItem(list, (int)i);
        if (list == lt) {
            if (!cJSON_IsString(e)) return kt_fail("%s: layer_types[%ld]: expected a string", file, i);
            if (parse_attn(file, e->valuestring, &c->attn[i])) return -1;
        } else {
            int r = cJSON_IsNumber(e) ? e->valueint : -1;
            if (r != 0 && r != 4 && r != 128) return kt_fail("%s: compress_ratios[%ld]: expected 0, 4 or 128", file, i);
            c->attn[i] = r == 0 ? KT_ATTN_SLIDING : r == 4 ? KT_ATTN_CSA : KT_ATTN_HCA;
        }
    }
    return 0;
}

/* The MLP of each layer: mlp_layer_types by name (names[k] -> kinds[k]), or where the list is
 * absent the first `first_key` (default 3) layers kinds[0] and the rest kinds[1] (V4: hash-routed
 * then MoE by num_hash_layers; V3.2: dense then MoE by first_k_dense_replace). */
static int parse_mlp_types(const char *file, const cJSON *o, kt_model_config *c, const char *first_key,
                           const char *const names[2], const kt_mlp_type kinds[2]) {
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(o, "mlp_layer_types");
    if (!ml || cJSON_IsNull(ml)) {
        long n_first;
        if (get_long(file, o, first_key, 3, &n_first)) return -1;
        for (long i = 0; i < c->n_layers; i++) c->mlp[i] = kinds[i < n_first ? 0 : 1];
        return 0;
    }
    if (!cJSON_IsArray(ml) || cJSON_GetArraySize(ml) < c->n_layers)
        return kt_fail("%s: mlp_layer_types: expected a list of num_hidden_layers (%ld) names", file, c->n_layers);
    for (long i = 0; i < c->n_layers; i++) {
        const cJSON *e = cJSON_GetArrayItem(ml, (int)i);
        if (!cJSON_IsString(e)) return kt_fail("%s: mlp_layer_types[%ld]: expected a string", file, i);
        int k = !strcmp(e->valuestring, names[0]) ? 0 : !strcmp(e->valuestring, names[1]) ? 1 : -1;
        if (k < 0)
            return kt_fail("%s: mlp_layer_types[%ld]: unknown MLP type '%s' (%s, %s)", file, i, e->valuestring,
                           names[0], names[1]);
        c->mlp[i] = kinds[k];
    }
    return 0;
}

/* One rope kind from its parameter object (NULL: plain RoPE at default_theta). */
static int parse_rope(const char *file, const cJSON *p, double default_theta, kt_rope *r) {
    memset(r, 0, sizeof *r);
    r->theta = default_theta;
    r->attention_factor = 1.0;
    if (!p) return 0;
    if (!cJSON_IsObject(p)) return kt_fail("%s: rope_parameters: expected an object", file);
    if (get_double(file, p, "rope_theta", default_theta, &r->theta)) return -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(p, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "default";
    if (!strcmp(type, "default")) return 0;
    if (strcmp(type, "yarn"))
        return kt_fail("%s: rope_parameters: rope_type '%s' is not supported (default, yarn)", file, type);
    if (get_double(file, p, "factor", -1, &r->factor) || get_double(file, p, "beta_fast", 32, &r->beta_fast) ||
        get_double(file, p, "beta_slow", 1, &r->beta_slow) ||
        get_double(file, p, "attention_factor", 1.0, &r->attention_factor) ||
        get_double(file, p, "mscale_all_dim", 0, &r->mscale_all_dim) ||
        get_long(file, p, "original_max_position_embeddings", -1, &r->original_max_position))
        return -1;
    if (r->factor <= 0) return kt_fail("%s: rope_parameters: yarn factor must be > 0", file);
    return 0;
}

/* YaRN's magnitude correction, 0.1 m ln(factor) + 1 (1 for factor <= 1), as transformers. */
static double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * log(factor) + 1.0; }

/* V3.2's rope (one kind, flat rope_parameters or rope_scaling at rope_theta) and the parts of
 * it transformers derives: attention_factor (when absent: the mscale / mscale_all_dim ratio,
 * or mscale(factor) without them) and the softmax scale's mscale_all_dim^2 correction. */
static int parse_rope_v32(const char *file, const cJSON *o, kt_model_config *c) {
    double theta, mscale;
    if (get_double(file, o, "rope_theta", 10000, &theta)) return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(o, "rope_parameters");
    if (!rp || cJSON_IsNull(rp)) rp = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    if (rp && cJSON_IsNull(rp)) rp = NULL;
    kt_rope *r = &c->rope_main;
    if (parse_rope(file, rp, theta, r)) return -1;
    c->softmax_scale = 1.0 / sqrt((double)(c->qk_nope + c->rope_dim));
    if (r->factor <= 0) return 0;
    if (get_double(file, rp, "mscale", 0, &mscale)) return -1;
    if (!cJSON_GetObjectItemCaseSensitive(rp, "attention_factor"))
        r->attention_factor = mscale && r->mscale_all_dim
                                  ? yarn_mscale(r->factor, mscale) / yarn_mscale(r->factor, r->mscale_all_dim)
                                  : yarn_mscale(r->factor, 1);
    if (r->mscale_all_dim) c->softmax_scale *= pow(yarn_mscale(r->factor, r->mscale_all_dim), 2);
    return 0;
}

static int parse_ropes(const char *file, const cJSON *o, kt_model_config *c) {
    double theta, ctheta;
    if (get_double(file, o, "rope_theta", 10000, &theta) || get_double(file, o, "compress_rope_theta", 160000, &ctheta))
        return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(o, "rope_parameters");
    if (!rp || cJSON_IsNull(rp)) rp = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    if (rp && cJSON_IsNull(rp)) rp = NULL;
    const cJSON *main = rp ? cJSON_GetObjectItemCaseSensitive(rp, "main") : NULL;
    const cJSON *comp = rp ? cJSON_GetObjectItemCaseSensitive(rp, "compress") : NULL;
    if (main || comp)
        return parse_rope(file, main, theta, &c->rope_main) || parse_rope(file, comp, ctheta, &c->rope_compress) ? -1
                                                                                                                 : 0;
    /* flat form: yarn scaling applies to the compress rope only, at compress_rope_theta */
    if (parse_rope(file, NULL, theta, &c->rope_main) || parse_rope(file, rp, ctheta, &c->rope_compress)) return -1;
    c->rope_compress.theta = ctheta;
    return 0;
}

static int parse_compress_rates(const char *file, const cJSON *o, kt_model_config *c) {
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(o, "compress_rates");
    if (cr && !cJSON_IsNull(cr)) {
        if (!cJSON_IsObject(cr)) return kt_fail("%s: compress_rates: expected an object", file);
        return get_long(file, cr, "compressed_sparse_attention", 4, &c->csa_rate) ||
               get_long(file, cr, "heavily_compressed_attention", 128, &c->hca_rate);
    }
    return get_long(file, o, "compress_rate_csa", 4, &c->csa_rate) ||
           get_long(file, o, "compress_rate_hca", 128, &c->hca_rate);
}

/* Sizes kt's kernels and layouts need (128-multiples for FP8 GEMMs; the 512 = 448 + 64 KV layout). */
static int check_sizes(const char *file, const kt_model_config *c) {
    const struct {
        const char *name;
        long v, mult;
    } m[] = {{"hidden_size", c->hidden, 128},       {"q_lora_rank", c->q_lora, 128},
             {"o_lora_rank", c->o_lora, 128},       {"moe_intermediate_size", c->moe_inter, 128},
             {"index_head_dim", c->index_dim, 128}, {"vocab_size", c->vocab, 1},
             {"sliding_window", c->window, 1},      {"num_attention_heads", c->n_heads, 1}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (m[i].v <= 0 || m[i].v % m[i].mult)
            return kt_fail("%s: %s = %ld: kt needs a positive multiple of %ld", file, m[i].name, m[i].v, m[i].mult);
    if (c->head_dim != 512 || c->rope_dim != 64)
        return kt_fail("%s: head_dim %ld with %ld rope dims: kt's KV layout is V4's 448 nope + 64 rope", file,
                       c->head_dim, c->rope_dim);
    if (c->o_groups <= 0 || c->n_heads % c->o_groups || kt_model_group_in(c) % 128)
        return kt_fail("%s: o_groups = %ld must divide num_attention_heads (%ld) into 128-multiples", file, c->o_groups,
                       c->n_heads);
    if (c->top_k <= 0 || c->top_k > c->n_experts || c->n_experts > 1024)
        return kt_fail("%s: num_experts_per_tok = %ld of n_routed_experts = %ld", file, c->top_k, c->n_experts);
    if (c->hc_mult < 1 || c->hc_mult > 8 || c->hc_iters < 1)
        return kt_fail("%s: hc_mult = %ld (1-8), hc_sinkhorn_iters = %ld (>= 1)", file, c->hc_mult, c->hc_iters);
    if (c->csa_rate < 1 || c->hca_rate < 1 || c->index_heads < 1 || c->index_topk < 1 || c->index_dim <= c->rope_dim)
        return kt_fail("%s: compress rates, index_n_heads, index_topk must be >= 1 and index_head_dim > the rope dims",
                       file);
    if (c->n_shared != 0 && c->n_shared != 1)
        return kt_fail("%s: n_shared_experts = %ld: kt runs 0 or 1", file, c->n_shared);
    return 0;
}

static int parse_v4(const char *file, const cJSON *o, kt_model_config *c) {
    double prf;
    long rope_legacy;
    const char *scoring = "sqrtsoftplus";
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(o, "scoring_func");
    if (sf && !cJSON_IsString(sf)) return kt_fail("%s: scoring_func: expected a string", file);
    if (sf) scoring = sf->valuestring;
    if (strcmp(scoring, "sqrtsoftplus")) return kt_fail("%s: scoring_func '%s': kt runs sqrtsoftplus", file, scoring);
    if (get_long(file, o, "vocab_size", -1, &c->vocab) || get_long(file, o, "hidden_size", -1, &c->hidden) ||
        get_long(file, o, "num_hidden_layers", -1, &c->n_layers) ||
        get_long(file, o, "num_attention_heads", -1, &c->n_heads) || get_long(file, o, "head_dim", -1, &c->head_dim) ||
        get_long(file, o, "q_lora_rank", -1, &c->q_lora) || get_long(file, o, "o_groups", 8, &c->o_groups) ||
        get_long(file, o, "o_lora_rank", 1024, &c->o_lora) || get_long(file, o, "sliding_window", 128, &c->window) ||
        get_long(file, o, "index_n_heads", 64, &c->index_heads) ||
        get_long(file, o, "index_head_dim", 128, &c->index_dim) ||
        get_long(file, o, "index_topk", 512, &c->index_topk) ||
        get_long(file, o, "n_routed_experts", -1, &c->n_experts) ||
        get_long(file, o, "num_experts_per_tok", -1, &c->top_k) ||
        get_long(file, o, "n_shared_experts", 1, &c->n_shared) ||
        get_long(file, o, "moe_intermediate_size", -1, &c->moe_inter) ||
        get_double(file, o, "routed_scaling_factor", 1.5, &c->routed_scale) ||
        get_double(file, o, "swiglu_limit", 10, &c->swiglu_limit) ||
        get_double(file, o, "rms_norm_eps", 1e-6, &c->rms_eps) || get_long(file, o, "hc_mult", 4, &c->hc_mult) ||
        get_long(file, o, "hc_sinkhorn_iters", 20, &c->hc_iters) || get_double(file, o, "hc_eps", 1e-6, &c->hc_eps) ||
        get_long(file, o, "qk_rope_head_dim", 0, &rope_legacy) || get_double(file, o, "partial_rotary_factor", 0, &prf))
        return -1;
    if (c->n_layers < 1 || c->n_layers > KT_MODEL_MAX_LAYERS)
        return kt_fail("%s: num_hidden_layers = %ld: kt runs 1 to %d", file, c->n_layers, KT_MODEL_MAX_LAYERS);
    c->rope_dim = prf > 0 ? (long)(c->head_dim * prf) : rope_legacy > 0 ? rope_legacy : c->head_dim / 8;
    if (parse_layer_types(file, o, c) ||
        parse_mlp_types(file, o, c, "num_hash_layers", (const char *const[]){"hash_moe", "moe"},
                        (const kt_mlp_type[]){KT_MLP_HASH, KT_MLP_MOE}) ||
        parse_ropes(file, o, c) || parse_compress_rates(file, o, c))
        return -1;
    return check_sizes(file, c);
}

/* A string field that must be absent or one of the listed values (what kt implements). */
static int check_str(const char *file, const cJSON *o, const char *key, const char *want, const char *what) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsString(it)) return kt_fail("%s: %s: expected a string", file, key);
    if (strcmp(it->valuestring, want)) return kt_fail("%s: %s '%s': kt runs %s", file, key, it->valuestring, what);
    return 0;
}

/* V3.2's sizes kt's kernels and layouts need: mla_decode LAYOUT=V32's 512 latent + 64 rope,
 * 128-multiples for the FP8 GEMMs, a router whose groups hold the experts it picks. */
static int check_sizes_v32(const char *file, const kt_model_config *c) {
    const struct {
        const char *name;
        long v, mult;
    } m[] = {{"hidden_size", c->hidden, 128},
             {"q_lora_rank", c->q_lora, 128},
             {"moe_intermediate_size", c->moe_inter, 128},
             {"index_head_dim", c->index_dim, 128},
             {"vocab_size", c->vocab, 1},
             {"num_attention_heads", c->n_heads, 1},
             {"qk_nope_head_dim", c->qk_nope, 1},
             {"v_head_dim", c->v_head, 1}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (m[i].v <= 0 || m[i].v % m[i].mult)
            return kt_fail("%s: %s = %ld: kt needs a positive multiple of %ld", file, m[i].name, m[i].v, m[i].mult);
    if (c->kv_lora != 512 || c->rope_dim != 64)
        return kt_fail("%s: kv_lora_rank %ld with qk_rope_head_dim %ld: kt's V3.2 KV layout is 512 latent + 64 rope",
                       file, c->kv_lora, c->rope_dim);
    for (long i = 0; i < c->n_layers; i++)
        if (c->mlp[i] == KT_MLP_DENSE && (c->inter <= 0 || c->inter % 128))
            return kt_fail("%s: intermediate_size = %ld: kt needs a positive multiple of 128 (dense layers)", file,
                           c->inter);
    if (c->n_experts < 1 || c->n_experts > 1024 || c->n_group < 1 || c->n_experts % c->n_group ||
        c->n_experts / c->n_group < 2)
        return kt_fail(
            "%s: n_routed_experts = %ld in n_group = %ld groups: kt needs equal groups of 2 or more (1-1024 experts)",
            file, c->n_experts, c->n_group);
    if (c->topk_group < 1 || c->topk_group > c->n_group || c->top_k < 1 || c->top_k > 64 ||
        c->top_k > c->topk_group * (c->n_experts / c->n_group))
        return kt_fail("%s: num_experts_per_tok = %ld from topk_group = %ld of %ld groups of %ld experts", file,
                       c->top_k, c->topk_group, c->n_group, c->n_experts / c->n_group);
    if (c->index_heads < 1 || c->index_heads > 64 || c->index_topk < 1 || c->index_dim <= c->rope_dim)
        return kt_fail("%s: index_n_heads (1-64), index_topk (>= 1) and index_head_dim (> the rope dims)", file);
    if (c->n_shared < 0) return kt_fail("%s: n_shared_experts = %ld", file, c->n_shared);
    return 0;
}

/* DeepSeek-V3.2 (transformers' DeepseekV32Config; the released config.json's names). */
static int parse_v32(const char *file, const cJSON *o, kt_model_config *c) {
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(o, "norm_topk_prob");
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(o, "tie_word_embeddings");
    const cJSON *ql = cJSON_GetObjectItemCaseSensitive(o, "q_lora_rank");
    c->arch = KT_ARCH_V32;
    c->swiglu_limit = INFINITY; /* V3's SwiGLU has no clamp */
    if (check_str(file, o, "scoring_func", "sigmoid", "sigmoid") ||
        check_str(file, o, "topk_method", "noaux_tc", "noaux_tc") || check_str(file, o, "hidden_act", "silu", "silu"))
        return -1;
    if (nt && !cJSON_IsBool(nt)) return kt_fail("%s: norm_topk_prob: expected true or false", file);
    if (cJSON_IsTrue(tie)) return kt_fail("%s: tie_word_embeddings: kt reads a separate lm_head.weight", file);
    if (ql && cJSON_IsNull(ql)) return kt_fail("%s: q_lora_rank null: kt runs V3.2's low-rank query", file);
    c->norm_topk = !nt || cJSON_IsTrue(nt);
    if (get_long(file, o, "vocab_size", -1, &c->vocab) || get_long(file, o, "hidden_size", -1, &c->hidden) ||
        get_long(file, o, "num_hidden_layers", -1, &c->n_layers) ||
        get_long(file, o, "num_attention_heads", -1, &c->n_heads) ||
        get_long(file, o, "q_lora_rank", 1536, &c->q_lora) || get_long(file, o, "kv_lora_rank", 512, &c->kv_lora) ||
        get_long(file, o, "qk_rope_head_dim", 64, &c->rope_dim) ||
        get_long(file, o, "qk_nope_head_dim", 128, &c->qk_nope) || get_long(file, o, "v_head_dim", 128, &c->v_head) ||
        get_long(file, o, "index_n_heads", 64, &c->index_heads) ||
        get_long(file, o, "index_head_dim", 128, &c->index_dim) ||
        get_long(file, o, "index_topk", 2048, &c->index_topk) ||
        get_long(file, o, "n_routed_experts", -1, &c->n_experts) ||
        get_long(file, o, "num_experts_per_tok", -1, &c->top_k) || get_long(file, o, "n_group", 1, &c->n_group) ||
        get_long(file, o, "topk_group", 1, &c->topk_group) || get_long(file, o, "n_shared_experts", 1, &c->n_shared) ||
        get_long(file, o, "moe_intermediate_size", -1, &c->moe_inter) ||
        get_long(file, o, "intermediate_size", -1, &c->inter) ||
        get_double(file, o, "routed_scaling_factor", 2.5, &c->routed_scale) ||
        get_double(file, o, "rms_norm_eps", 1e-6, &c->rms_eps))
        return -1;
    if (c->n_layers < 1 || c->n_layers > KT_MODEL_MAX_LAYERS)
        return kt_fail("%s: num_hidden_layers = %ld: kt runs 1 to %d", file, c->n_layers, KT_MODEL_MAX_LAYERS);
    c->head_dim = c->qk_nope + c->rope_dim;
    for (long i = 0; i < c->n_layers; i++) c->attn[i] = KT_ATTN_DSA;
    if (parse_mlp_types(file, o, c, "first_k_dense_replace", (const char *const[]){"dense", "sparse"},
                        (const kt_mlp_type[]){KT_MLP_DENSE, KT_MLP_MOE}) ||
        parse_rope_v32(file, o, c))
        return -1;
    return check_sizes_v32(file, c);
}

int kt_model_config_parse(const char *name, const char *json, size_t len, kt_model_config *c) {
    memset(c, 0, sizeof *c);
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!o) return kt_fail("%s: not valid JSON", name);
    int rc;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    if (!cJSON_IsObject(o))
        rc = kt_fail("%s: expected a JSON object", name);
    else if (!cJSON_IsString(mt))
        rc = kt_fail("%s: missing field model_type", name);
    else if (!strcmp(mt->valuestring, "deepseek_v4"))
        rc = parse_v4(name, o, c);
    else if (!strcmp(mt->valuestring, "deepseek_v32"))
        rc = parse_v32(name, o, c);
    else
        rc = kt_fail("%s: model_type '%s': kt runs deepseek_v4 and deepseek_v32", name, mt->valuestring);
    if (!rc) snprintf(c->model_type, sizeof c->model_type, "%s", mt->valuestring);
    c->head_rows = c->vocab;
    cJSON_Delete(o);
    return rc;
}

int kt_model_config_read(const char *path, kt_model_config *c) {
    size_t len;
    char *text = kt_read_file(path, &len);
    if (!text) return -1;
    int rc = kt_model_config_parse(path, text, len, c);
    free(text);
    return rc;
}

/* Appends one tensor to the list (counting only when out is NULL). */
static void add(kt_model_tensor *out, int max, int *n, kt_weight_kind kind, long d0, long d1, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static void add(kt_model_tensor *out, int max, int *n, kt_weight_kind kind, long d0, long d1, const char *fmt, ...) {
    if (out && *n < max) {
        kt_model_tensor *t = &out[*n];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->name, sizeof t->name, fmt, ap);
        va_end(ap);
        t->ndim = d1 ? 2 : 1;
        t->shape[0] = d0;
        t->shape[1] = d1;
        t->kind = kind;
    }
    (*n)++;
}

/* A compressor's tensors (prefix "model.layers.L.attn." or "...attn.indexer."): width = the
 * entry size, overlap = 2 (CSA's two series) or 1 (HCA). */
static void add_compressor(const kt_model_config *c, kt_model_tensor *o, int max, int *n, const char *prefix, long rate,
                           long width, int overlap) {
    add(o, max, n, KT_W_PLAIN, rate, overlap * width, "%scompressor.ape", prefix);
    add(o, max, n, KT_W_PLAIN, width, 0, "%scompressor.norm.weight", prefix);
    add(o, max, n, KT_W_PLAIN, overlap * width, c->hidden, "%scompressor.wgate.weight", prefix);
    add(o, max, n, KT_W_PLAIN, overlap * width, c->hidden, "%scompressor.wkv.weight", prefix);
}

void kt_model_expert_name(const kt_model_config *c, long l, long e, int which, char *out, size_t n) {
    /* V4: w1 = gate, w3 = up, w2 = down (transformers fuses w1|w3 as gate_up_proj); V3.2: *_proj */
    static const char *const v4[] = {"w1", "w3", "w2"}, *const v32[] = {"gate_proj", "up_proj", "down_proj"};
    const char *block = c->arch == KT_ARCH_V32 ? "mlp" : "ffn", *w = (c->arch == KT_ARCH_V32 ? v32 : v4)[which];
    if (e < 0)
        snprintf(out, n, "model.layers.%ld.%s.shared_experts.%s.weight", l, block, w);
    else
        snprintf(out, n, "model.layers.%ld.%s.experts.%ld.%s.weight", l, block, e, w);
}

/* The shared experts' width: V4's one expert, V3.2's n_shared fused into one MLP. */
static long shared_inter(const kt_model_config *c) {
    return c->arch == KT_ARCH_V32 ? c->moe_inter * c->n_shared : c->moe_inter;
}

/* The routed experts of layer l, then its shared expert (gate, down, up each: V4's w1, w2, w3). */
static void add_experts(const kt_model_config *c, long l, kt_model_tensor *o, int max, int *n) {
    static const int order[3] = {0, 2, 1};
    char name[96];
    for (long e = 0; e < c->n_experts + (c->n_shared > 0); e++) {
        long I = e == c->n_experts ? shared_inter(c) : c->moe_inter;
        for (int i = 0; i < 3; i++) {
            int which = order[i];
            kt_model_expert_name(c, l, e == c->n_experts ? -1 : e, which, name, sizeof name);
            add(o, max, n, KT_W_GEMM, which == 2 ? c->hidden : I, which == 2 ? I : c->hidden, "%s", name);
        }
    }
}

static void add_layer(const kt_model_config *c, long l, kt_model_tensor *o, int max, int *n) {
    long D = c->hidden, mix = kt_model_hc_mix(c), HD = c->hc_mult * D;
    char p[64];
    snprintf(p, sizeof p, "model.layers.%ld.", l);
    add(o, max, n, KT_W_PLAIN, mix, HD, "%shc_attn_fn", p);
    add(o, max, n, KT_W_PLAIN, mix, 0, "%shc_attn_base", p);
    add(o, max, n, KT_W_PLAIN, 3, 0, "%shc_attn_scale", p);
    add(o, max, n, KT_W_PLAIN, D, 0, "%sattn_norm.weight", p);
    add(o, max, n, KT_W_GEMM, c->q_lora, D, "%sattn.wq_a.weight", p);
    add(o, max, n, KT_W_PLAIN, c->q_lora, 0, "%sattn.q_norm.weight", p);
    add(o, max, n, KT_W_GEMM, kt_model_q_dim(c), c->q_lora, "%sattn.wq_b.weight", p);
    add(o, max, n, KT_W_GEMM, c->head_dim, D, "%sattn.wkv.weight", p);
    add(o, max, n, KT_W_PLAIN, c->head_dim, 0, "%sattn.norm.weight", p);
    add(o, max, n, KT_W_PLAIN, c->n_heads, 0, "%sattn.attn_sink", p);
    char a[80];
    snprintf(a, sizeof a, "%sattn.", p);
    if (c->attn[l] == KT_ATTN_CSA) {
        add_compressor(c, o, max, n, a, c->csa_rate, c->head_dim, 2);
        snprintf(a, sizeof a, "%sattn.indexer.", p);
        add_compressor(c, o, max, n, a, c->csa_rate, c->index_dim, 2);
        add(o, max, n, KT_W_GEMM, c->index_heads * c->index_dim, c->q_lora, "%sattn.indexer.wq_b.weight", p);
        add(o, max, n, KT_W_PLAIN, c->index_heads, D, "%sattn.indexer.weights_proj.weight", p);
    } else if (c->attn[l] == KT_ATTN_HCA) {
        add_compressor(c, o, max, n, a, c->hca_rate, c->head_dim, 1);
    }
    add(o, max, n, KT_W_GEMM, c->o_groups * c->o_lora, kt_model_group_in(c), "%sattn.wo_a.weight", p);
    add(o, max, n, KT_W_GEMM, D, c->o_groups * c->o_lora, "%sattn.wo_b.weight", p);
    add(o, max, n, KT_W_PLAIN, mix, HD, "%shc_ffn_fn", p);
    add(o, max, n, KT_W_PLAIN, mix, 0, "%shc_ffn_base", p);
    add(o, max, n, KT_W_PLAIN, 3, 0, "%shc_ffn_scale", p);
    add(o, max, n, KT_W_PLAIN, D, 0, "%sffn_norm.weight", p);
    add(o, max, n, KT_W_PLAIN, c->n_experts, D, "%sffn.gate.weight", p);
    if (c->mlp[l] == KT_MLP_HASH)
        add(o, max, n, KT_W_INDEX, c->vocab, c->top_k, "%sffn.gate.tid2eid", p);
    else
        add(o, max, n, KT_W_PLAIN, c->n_experts, 0, "%sffn.gate.bias", p);
    add_experts(c, l, o, max, n);
}

/* V3.2's layer: MLA with the indexer, then a dense MLP or the MoE (the release's names). */
static void add_layer_v32(const kt_model_config *c, long l, kt_model_tensor *o, int max, int *n) {
    long D = c->hidden, H = c->n_heads, IH = c->index_heads, ID = c->index_dim;
    char p[64];
    snprintf(p, sizeof p, "model.layers.%ld.", l);
    add(o, max, n, KT_W_PLAIN, D, 0, "%sinput_layernorm.weight", p);
    add(o, max, n, KT_W_GEMM, c->q_lora, D, "%sself_attn.q_a_proj.weight", p);
    add(o, max, n, KT_W_PLAIN, c->q_lora, 0, "%sself_attn.q_a_layernorm.weight", p);
    add(o, max, n, KT_W_GEMM, H * (c->qk_nope + c->rope_dim), c->q_lora, "%sself_attn.q_b_proj.weight", p);
    add(o, max, n, KT_W_GEMM, c->kv_lora + c->rope_dim, D, "%sself_attn.kv_a_proj_with_mqa.weight", p);
    add(o, max, n, KT_W_PLAIN, c->kv_lora, 0, "%sself_attn.kv_a_layernorm.weight", p);
    add(o, max, n, KT_W_GEMM, H * (c->qk_nope + c->v_head), c->kv_lora, "%sself_attn.kv_b_proj.weight", p);
    add(o, max, n, KT_W_GEMM, D, H * c->v_head, "%sself_attn.o_proj.weight", p);
    add(o, max, n, KT_W_GEMM, IH * ID, c->q_lora, "%sself_attn.indexer.wq_b.weight", p);
    add(o, max, n, KT_W_GEMM, ID, D, "%sself_attn.indexer.wk.weight", p);
    add(o, max, n, KT_W_PLAIN, ID, 0, "%sself_attn.indexer.k_norm.weight", p);
    add(o, max, n, KT_W_PLAIN, ID, 0, "%sself_attn.indexer.k_norm.bias", p);
    add(o, max, n, KT_W_PLAIN, IH, D, "%sself_attn.indexer.weights_proj.weight", p);
    add(o, max, n, KT_W_PLAIN, D, 0, "%spost_attention_layernorm.weight", p);
    if (c->mlp[l] == KT_MLP_DENSE) {
        add(o, max, n, KT_W_GEMM, c->inter, D, "%smlp.gate_proj.weight", p);
        add(o, max, n, KT_W_GEMM, c->inter, D, "%smlp.up_proj.weight", p);
        add(o, max, n, KT_W_GEMM, D, c->inter, "%smlp.down_proj.weight", p);
        return;
    }
    add(o, max, n, KT_W_PLAIN, c->n_experts, D, "%smlp.gate.weight", p);
    add(o, max, n, KT_W_PLAIN, c->n_experts, 0, "%smlp.gate.e_score_correction_bias", p);
    add_experts(c, l, o, max, n);
}

int kt_model_tensors(const kt_model_config *c, kt_model_tensor *out, int max) {
    int n = 0;
    add(out, max, &n, KT_W_PLAIN, c->vocab, c->hidden, "model.embed_tokens.weight");
    if (c->arch == KT_ARCH_V32) {
        for (long l = 0; l < c->n_layers; l++) add_layer_v32(c, l, out, max, &n);
        add(out, max, &n, KT_W_PLAIN, c->hidden, 0, "model.norm.weight");
        add(out, max, &n, KT_W_PLAIN, c->vocab, c->hidden, "lm_head.weight");
        return out ? (n < max ? n : max) : n;
    }
    for (long l = 0; l < c->n_layers; l++) add_layer(c, l, out, max, &n);
    add(out, max, &n, KT_W_PLAIN, c->hc_mult, c->hc_mult * c->hidden, "model.hc_head.hc_fn");
    add(out, max, &n, KT_W_PLAIN, c->hc_mult, 0, "model.hc_head.hc_base");
    add(out, max, &n, KT_W_PLAIN, 1, 0, "model.hc_head.hc_scale");
    add(out, max, &n, KT_W_PLAIN, c->hidden, 0, "model.norm.weight");
    add(out, max, &n, KT_W_PLAIN, c->vocab, c->hidden, "head.weight");
    return out ? (n < max ? n : max) : n;
}

/* ------------------------------------------------------------ checkpoint formats */

const char *kt_model_st_name(const kt_st_set *w, const char *name) {
    return !kt_st_find(w, name) && !strncmp(name, "model.", 6) && kt_st_find(w, name + 6) ? name + 6 : name;
}

const kt_st_tensor *kt_model_scale_of(const kt_st_set *w, const char *weight) {
    char alt[160];
    size_t stem =
        strlen(weight) > 6 && !strcmp(weight + strlen(weight) - 6, "weight") ? strlen(weight) - 6 : strlen(weight);
    snprintf(alt, sizeof alt, "%.*sweight_scale_inv", (int)stem, weight);
    const kt_st_tensor *t = kt_st_find(w, alt);
    if (t) return t;
    snprintf(alt, sizeof alt, "%.*sscale", (int)stem, weight);
    return kt_st_find(w, alt);
}

int kt_model_mxfp4(const kt_st_set *w, const kt_model_tensor *d, const kt_st_tensor **codes,
                   const kt_st_tensor **scales) {
    const char *name = kt_model_st_name(w, d->name);
    const kt_st_tensor *t = kt_st_find(w, name), *sc;
    if (!t) return kt_fail("%s: tensor %s is missing", w->n_files ? w->files[0].path : "(no files)", name);
    if (t->dtype != KT_ST_I8 && t->dtype != KT_ST_U8) return 0;
    const char *file = kt_st_file_of(w, t);
    if (d->kind != KT_W_GEMM || d->ndim != 2)
        return kt_fail("%s: tensor %s: %s codes (MXFP4) where kt expects a bf16/f32 tensor", file, name,
                       kt_st_dtype_name(t->dtype));
    long N = d->shape[0], K = d->shape[1], sh_codes[2] = {N, K / 2}, sh_scales[2] = {N, K / 32};
    if (K % 32) return kt_fail("%s: tensor %s: MXFP4 needs K (%ld) in blocks of 32", file, name, K);
    if (kt_st_get(w, name, 2, sh_codes, &t)) return -1;
    if (!(sc = kt_model_scale_of(w, name)))
        return kt_fail("%s: tensor %s: MXFP4 codes without their ue8m0 scales (%.*sscale or weight_scale_inv)", file,
                       name, (int)strlen(name) - 6, name);
    if (sc->dtype != KT_ST_F8_E8M0 && sc->dtype != KT_ST_U8)
        return kt_fail("%s: tensor %s: dtype %s, MXFP4 scales are F8_E8M0 (or U8) bytes", kt_st_file_of(w, sc),
                       sc->name, kt_st_dtype_name(sc->dtype));
    if (kt_st_get(w, sc->name, 2, sh_scales, &sc)) return -1;
    const uint8_t *b = sc->data;
    for (size_t i = 0; i < kt_st_numel(sc); i++)
        if (b[i] == 0xff)
            return kt_fail("%s: tensor %s: scale %zu is 0xff (NaN in ue8m0)", kt_st_file_of(w, sc), sc->name, i);
    if (codes) *codes = t;
    if (scales) *scales = sc;
    return 1;
}

/* Copies the MXFP4 matrix d ([rows, K]) to codes / scales at row offset row0 of a [*, K] block. */
static int copy_mxfp4(const kt_model_config *c, const kt_st_set *w, long l, long e, int which, uint8_t *codes,
                      uint8_t *scales) {
    kt_model_tensor d = {.ndim = 2, .kind = KT_W_GEMM};
    const kt_st_tensor *tc, *ts;
    kt_model_expert_name(c, l, e, which, d.name, sizeof d.name);
    d.shape[0] = which == 2 ? c->hidden : c->moe_inter;
    d.shape[1] = which == 2 ? c->moe_inter : c->hidden;
    int rc = kt_model_mxfp4(w, &d, &tc, &ts);
    if (rc < 0) return -1;
    if (!rc)
        return kt_fail(
            "%s: tensor %s: %s, not MXFP4: moe_gemm's MXFP4 layout needs every routed expert of layer %ld in MXFP4",
            kt_st_file_of(w, kt_st_find(w, kt_model_st_name(w, d.name))), d.name,
            kt_st_dtype_name(kt_st_find(w, kt_model_st_name(w, d.name))->dtype), l);
    memcpy(codes, tc->data, kt_st_numel(tc));
    memcpy(scales, ts->data, kt_st_numel(ts));
    return 0;
}

int kt_model_experts_mxfp4(const kt_model_config *c, const kt_st_set *w, long l, uint8_t *gu_codes, uint8_t *gu_scales,
                           uint8_t *dn_codes, uint8_t *dn_scales) {
    size_t I = (size_t)c->moe_inter, D = (size_t)c->hidden;
    for (long e = 0; e < c->n_experts; e++) {
        size_t x = (size_t)e;
        if (copy_mxfp4(c, w, l, e, 0, gu_codes + x * 2 * I * D / 2, gu_scales + x * 2 * I * D / 32) ||
            copy_mxfp4(c, w, l, e, 1, gu_codes + (x * 2 + 1) * I * D / 2, gu_scales + (x * 2 + 1) * I * D / 32) ||
            copy_mxfp4(c, w, l, e, 2, dn_codes + x * D * I / 2, dn_scales + x * D * I / 32))
            return -1;
    }
    return 0;
}

int kt_model_experts_are_mxfp4(const kt_model_config *c, const kt_st_set *w, long l) {
    kt_model_tensor d = {.ndim = 2, .kind = KT_W_GEMM, .shape = {c->moe_inter, c->hidden}};
    kt_model_expert_name(c, l, 0, 0, d.name, sizeof d.name);
    return kt_model_mxfp4(w, &d, NULL, NULL);
}
