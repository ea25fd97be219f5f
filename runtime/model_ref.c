/* model_ref.c — the float64 host reference of the DeepSeek-V4 and V3.2 decode steps
 * (model_ref.h). One token per sequence per step, as transformers 5.17's DeepseekV4ForCausalLM
 * computes it with its cache: hyper-connections (hc_mult streams, Sinkhorn-projected mixing),
 * attention over the sliding window plus compressed entries (CSA: overlapping windows of
 * compress rate 4, the lightning indexer's top-k; HCA: rate 128, all entries), per-head sinks,
 * the grouped output projection, hash-routed or sqrtsoftplus-routed MoE with a shared expert
 * (routed experts FP8, BF16 or MXFP4 as the checkpoint ships them), the HC head and the LM head;
 * or as DeepseekV32ForCausalLM does: MLA in its absorbed form (a 512 latent + 64 rope key per
 * token) over the tokens the indexer (LayerNorm'd keys, half-split RoPE) selects, a dense MLP
 * or the V3 router (sigmoid + correction bias, group-limited) with a shared expert. Slow on
 * purpose: plain loops, for tiny configs. */
#include "model_ref.h"

#include "../kernels/common/mla_layout.h"
#include "../kernels/common/moe_layout.h"
#include "../kernels/fp8_gemm.h"
#include "../kernels/mla_decode.h"
#include "kt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct named {
    char *name;
    float *v;   /* f32 values (GEMM weights after kt's quantisation in KT_REF_KT) */
    int32_t *i; /* integer tables */
} named;

/* The compressor state of one (sequence, layer, compressor): the window being filled and, for
 * CSA, the previous window's first series. */
typedef struct comp_state {
    double *kv, *gate;           /* [rate][overlap * width] */
    double *prev_kv, *prev_gate; /* [rate][width] (CSA) */
    int has_prev;
    double *entries; /* [max_entries][width] */
    long n_entries;
} comp_state;

typedef struct seq_layer {
    double *window; /* V4: [window][head_dim], slot = pos % window */
    comp_state comp, index;
    double *latent, *ikeys; /* V3.2: every token's [kv_lora + rope] MLA key and [index_dim] indexer key */
} seq_layer;

struct kt_model_ref {
    kt_model_config c;
    kt_ref_mode mode;
    int batch;
    long max_ctx;
    named *w;
    int n_w;
    seq_layer *state;            /* [batch][n_layers] */
    double *inv_main, *inv_comp; /* rope_dim / 2 inverse frequencies */
};

static int by_name(const void *a, const void *b) { return strcmp(((const named *)a)->name, ((const named *)b)->name); }

/* The weight called printf(fmt, ...); NULL only for a name the tensor list does not have. */
static const named *W(const kt_model_ref *m, const char *fmt, long l) {
    char name[128];
    snprintf(name, sizeof name, fmt, l);
    named key = {.name = name};
    return bsearch(&key, m->w, (size_t)m->n_w, sizeof key, by_name);
}
static const float *Wf(const kt_model_ref *m, const char *fmt, long l) { return W(m, fmt, l)->v; }

/* ------------------------------------------------------------- kt's formats */

static double round_bf16(double x) { return kt_bf16_to_float(kt_float_to_bf16((float)x)); }

void kt_quant_blocks(float *w, long n, long k, uint8_t *codes, float *scales) {
    long kb = (k + 127) / 128;
    for (long bn = 0; bn < (n + 127) / 128; bn++)
        for (long bk = 0; bk < kb; bk++) {
            float amax = 0;
            for (long r = bn * 128; r < n && r < bn * 128 + 128; r++)
                for (long col = bk * 128; col < k && col < bk * 128 + 128; col++)
                    amax = fmaxf(amax, fabsf(w[r * k + col]));
            float s = fmaxf(amax, 1e-10f) / 448.0f;
            if (scales) scales[bn * kb + bk] = s;
            for (long r = bn * 128; r < n && r < bn * 128 + 128; r++)
                for (long col = bk * 128; col < k && col < bk * 128 + 128; col++) {
                    uint8_t q = kt_float_to_e4m3(w[r * k + col] / s);
                    if (codes) codes[r * k + col] = q;
                    w[r * k + col] = kt_e4m3_to_float(q) * s;
                }
        }
}

void kt_quant_act(double *x, long k) {
    for (long g = 0; g < k / 128; g++) {
        uint16_t b[128];
        uint8_t q[128];
        for (int i = 0; i < 128; i++) b[i] = kt_float_to_bf16((float)x[g * 128 + i]);
        float s = kt_act_quant_group(b, q);
        for (int i = 0; i < 128; i++) x[g * 128 + i] = (double)(kt_e4m3_to_float(q[i]) * s);
    }
}

void kt_quant_kv(double *x, long head_dim, long rope_dim) {
    for (long g = 0; g < (head_dim - rope_dim) / 64; g++) {
        double amax = 0;
        for (int i = 0; i < 64; i++) amax = fmax(amax, fabs(x[g * 64 + i]));
        float s = amax > 0 ? ldexpf(1.0f, (int)ceil(log2(amax / 448.0))) : 1.0f;
        for (int i = 0; i < 64; i++)
            x[g * 64 + i] = (double)(kt_e4m3_to_float(kt_float_to_e4m3((float)(x[g * 64 + i] / s))) * s);
    }
    for (long i = head_dim - rope_dim; i < head_dim; i++) x[i] = round_bf16(x[i]);
}

/* ------------------------------------------------------------------ math */

/* y[n] = W[n, k] x[k]; in KT_REF_KT a GEMM weight's input is quantised as act_quant does and,
 * when round_out, its output rounded to bf16 (fp8_gemm writes bf16). */
static void linear(const kt_model_ref *m, const float *w, long n, long k, const double *x, double *y, int gemm,
                   int round_out) {
    double *xq = malloc((size_t)k * sizeof *xq);
    memcpy(xq, x, (size_t)k * sizeof *xq);
    if (gemm && m->mode == KT_REF_KT) kt_quant_act(xq, k);
    for (long i = 0; i < n; i++) {
        double s = 0;
        for (long j = 0; j < k; j++) s += (double)w[i * k + j] * xq[j];
        y[i] = gemm && round_out && m->mode == KT_REF_KT ? round_bf16(s) : s;
    }
    free(xq);
}

/* x * rsqrt(mean(x^2) + eps) (* weight when not NULL). */
static void rmsnorm(double *x, long n, const float *weight, double eps) {
    double ss = 0;
    for (long i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (long i = 0; i < n; i++) x[i] = x[i] * r * (weight ? (double)weight[i] : 1.0);
}

/* Interleaved RoPE on the trailing rope_dim channels of x at position pos (sign -1: inverse). */
static void rope(const kt_model_ref *m, const double *inv, double *x, long dim, double pos, double sign) {
    long R = m->c.rope_dim, base = dim - R;
    for (long i = 0; i < R / 2; i++) {
        double f = (double)(float)((float)pos * (float)inv[i]);
        double c = cos(f), s = sign * sin(f);
        double a = x[base + 2 * i], b = x[base + 2 * i + 1];
        x[base + 2 * i] = a * c - b * s;
        x[base + 2 * i + 1] = b * c + a * s;
    }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The HC module before a block: from the streams x[hc][D], the collapsed block input, and the
 * post weights and the Sinkhorn-projected comb matrix for after it. */
static void hc_pre(const kt_model_ref *m, const char *which, long l, const double *x, double *collapsed, double *post,
                   double *comb) {
    const kt_model_config *c = &m->c;
    long H = c->hc_mult, D = c->hidden, mixn = kt_model_hc_mix(c);
    char f[64], b[64], s[64];
    snprintf(f, sizeof f, "model.layers.%%ld.hc_%s_fn", which);
    snprintf(b, sizeof b, "model.layers.%%ld.hc_%s_base", which);
    snprintf(s, sizeof s, "model.layers.%%ld.hc_%s_scale", which);
    const float *fn = Wf(m, f, l), *base = Wf(m, b, l), *scale = Wf(m, s, l);
    double *flat = malloc((size_t)(H * D) * sizeof *flat), mix[8 * 10];
    memcpy(flat, x, (size_t)(H * D) * sizeof *flat);
    rmsnorm(flat, H * D, NULL, c->rms_eps);
    linear(m, fn, mixn, H * D, flat, mix, 0, 0);
    double pre[8];
    for (long i = 0; i < H; i++) {
        pre[i] = sigmoid(mix[i] * scale[0] + base[i]) + c->hc_eps;
        post[i] = 2 * sigmoid(mix[H + i] * scale[1] + base[H + i]);
    }
    for (long i = 0; i < H; i++) {
        double mx = -INFINITY, sum = 0;
        for (long j = 0; j < H; j++) mx = fmax(mx, mix[2 * H + i * H + j] * scale[2] + base[2 * H + i * H + j]);
        for (long j = 0; j < H; j++)
            sum += comb[i * H + j] = exp(mix[2 * H + i * H + j] * scale[2] + base[2 * H + i * H + j] - mx);
        for (long j = 0; j < H; j++) comb[i * H + j] = comb[i * H + j] / sum + c->hc_eps;
    }
    for (long it = 0; it < 2 * c->hc_iters - 1; it++) {
        int cols = it % 2 == 0; /* first a column pass, then row and column passes */
        for (long a = 0; a < H; a++) {
            double sum = 0;
            for (long bb = 0; bb < H; bb++) sum += cols ? comb[bb * H + a] : comb[a * H + bb];
            for (long bb = 0; bb < H; bb++) *(cols ? &comb[bb * H + a] : &comb[a * H + bb]) /= sum + c->hc_eps;
        }
    }
    for (long d = 0; d < D; d++) {
        double v = 0;
        for (long i = 0; i < H; i++) v += pre[i] * x[i * D + d];
        collapsed[d] = v;
    }
    free(flat);
}

/* The HC module after a block: x[k] = post[k] * y + sum_j comb[j][k] x[j]. */
static void hc_post(const kt_model_config *c, double *x, const double *y, const double *post, const double *comb) {
    long H = c->hc_mult, D = c->hidden;
    double *nx = malloc((size_t)(H * D) * sizeof *nx);
    for (long k = 0; k < H; k++)
        for (long d = 0; d < D; d++) {
            double v = post[k] * y[d];
            for (long j = 0; j < H; j++) v += comb[j * H + k] * x[j * D + d];
            nx[k * D + d] = v;
        }
    memcpy(x, nx, (size_t)(H * D) * sizeof *nx);
    free(nx);
}

/* One token into a compressor (prefix "...attn." or "...attn.indexer."): when it closes a window
 * of `rate` tokens, one entry (softmax-gated sum, norm, RoPE at the window's first position) is
 * appended. is_kv: the entry is stored in the KV layout. */
static void compress_step(const kt_model_ref *m, comp_state *st, long l, const char *prefix, long rate, long width,
                          int overlap, const double *h, long pos, int is_kv) {
    const kt_model_config *c = &m->c;
    char n_ape[96], n_norm[96], n_wg[96], n_wkv[96];
    snprintf(n_ape, sizeof n_ape, "%scompressor.ape", prefix);
    snprintf(n_norm, sizeof n_norm, "%scompressor.norm.weight", prefix);
    snprintf(n_wg, sizeof n_wg, "%scompressor.wgate.weight", prefix);
    snprintf(n_wkv, sizeof n_wkv, "%scompressor.wkv.weight", prefix);
    long ow = overlap * width, slot = pos % rate;
    const float *ape = Wf(m, n_ape, l);
    linear(m, Wf(m, n_wkv, l), ow, c->hidden, h, st->kv + slot * ow, 0, 0);
    linear(m, Wf(m, n_wg, l), ow, c->hidden, h, st->gate + slot * ow, 0, 0);
    for (long i = 0; i < ow; i++) st->gate[slot * ow + i] += ape[slot * ow + i];
    if (slot != rate - 1) return;
    double *e = st->entries + st->n_entries * width;
    for (long ch = 0; ch < width; ch++) {
        double mx = -INFINITY, sum = 0, v = 0;
        long cur = overlap == 2 ? width + ch : ch; /* CSA: this window's second series */
        for (long s = 0; s < rate; s++) mx = fmax(mx, st->gate[s * ow + cur]);
        if (overlap == 2 && st->has_prev)
            for (long s = 0; s < rate; s++) mx = fmax(mx, st->prev_gate[s * width + ch]);
        for (long s = 0; s < rate; s++) {
            double p = exp(st->gate[s * ow + cur] - mx);
            sum += p;
            v += p * st->kv[s * ow + cur];
        }
        if (overlap == 2 && st->has_prev)
            for (long s = 0; s < rate; s++) {
                double p = exp(st->prev_gate[s * width + ch] - mx);
                sum += p;
                v += p * st->prev_kv[s * width + ch];
            }
        e[ch] = v / sum;
    }
    if (overlap == 2) { /* this window's first series joins the next window's entry */
        for (long s = 0; s < rate; s++) {
            memcpy(st->prev_kv + s * width, st->kv + s * ow, (size_t)width * sizeof(double));
            memcpy(st->prev_gate + s * width, st->gate + s * ow, (size_t)width * sizeof(double));
        }
        st->has_prev = 1;
    }
    rmsnorm(e, width, Wf(m, n_norm, l), c->rms_eps);
    rope(m, m->inv_comp, e, width, (double)(st->n_entries * rate), 1);
    if (is_kv && m->mode == KT_REF_KT) kt_quant_kv(e, c->head_dim, c->rope_dim);
    st->n_entries++;
}

/* The indices of the k (at most n) largest of score[n] into sel, best first (ties: the lower
 * index); score is consumed. Returns how many. */
static long top_indices(double *score, long n, long k, long *sel) {
    if (k > n) k = n;
    for (long j = 0; j < k; j++) {
        long best = -1;
        for (long s = 0; s < n; s++)
            if (score[s] > -INFINITY && (best < 0 || score[s] > score[best])) best = s;
        sel[j] = best;
        score[best] = -INFINITY;
    }
    return k;
}

/* The lightning indexer: the top index_topk of the indexer's entries for this query (by
 * sum_h w_h relu(q_h . k) / sqrt(index_dim)), written to sel; returns how many. */
static long indexer(const kt_model_ref *m, seq_layer *sl, long l, const double *h, const double *qr, long pos,
                    long *sel) {
    const kt_model_config *c = &m->c;
    long IH = c->index_heads, ID = c->index_dim, n = sl->index.n_entries;
    double *q = malloc((size_t)(IH * ID) * sizeof *q), w[1024], *score = malloc((size_t)(n + 1) * sizeof *score);
    linear(m, Wf(m, "model.layers.%ld.attn.indexer.wq_b.weight", l), IH * ID, c->q_lora, qr, q, 1, 1);
    for (long i = 0; i < IH; i++) rope(m, m->inv_comp, q + i * ID, ID, (double)pos, 1);
    linear(m, Wf(m, "model.layers.%ld.attn.indexer.weights_proj.weight", l), IH, c->hidden, h, w, 0, 0);
    for (long s = 0; s < n; s++) {
        double t = 0;
        for (long i = 0; i < IH; i++) {
            double d = 0;
            for (long j = 0; j < ID; j++) d += q[i * ID + j] * sl->index.entries[s * ID + j];
            t += (d > 0 ? d : 0) / sqrt((double)ID) * w[i] / sqrt((double)IH);
        }
        score[s] = t;
    }
    long k = top_indices(score, n, c->index_topk, sel);
    free(q);
    free(score);
    return k;
}

/* Attention of one sequence's token (block input h) at pos; out[hidden]. */
static void attention(kt_model_ref *m, seq_layer *sl, long l, const double *h, long pos, double *out) {
    const kt_model_config *c = &m->c;
    long Hh = c->n_heads, HD = c->head_dim, D = c->hidden;
    const double *inv = c->attn[l] == KT_ATTN_SLIDING ? m->inv_main : m->inv_comp;
    double *qr = malloc((size_t)c->q_lora * sizeof *qr), *q = malloc((size_t)(Hh * HD) * sizeof *q);
    double *kv = sl->window + (pos % c->window) * HD;
    linear(m, Wf(m, "model.layers.%ld.attn.wq_a.weight", l), c->q_lora, D, h, qr, 1, 1);
    rmsnorm(qr, c->q_lora, Wf(m, "model.layers.%ld.attn.q_norm.weight", l), c->rms_eps);
    linear(m, Wf(m, "model.layers.%ld.attn.wq_b.weight", l), Hh * HD, c->q_lora, qr, q, 1, 1);
    for (long i = 0; i < Hh; i++) {
        rmsnorm(q + i * HD, HD, NULL, c->rms_eps);
        rope(m, inv, q + i * HD, HD, (double)pos, 1);
    }
    linear(m, Wf(m, "model.layers.%ld.attn.wkv.weight", l), HD, D, h, kv, 1, 1);
    rmsnorm(kv, HD, Wf(m, "model.layers.%ld.attn.norm.weight", l), c->rms_eps);
    rope(m, inv, kv, HD, (double)pos, 1);
    if (m->mode == KT_REF_KT) kt_quant_kv(kv, HD, c->rope_dim);
    /* the keys: the window's tokens, then the compressed entries the layer type allows */
    long n_keys = 0, maxk = c->window + m->max_ctx + 1;
    const double **keys = malloc((size_t)maxk * sizeof *keys);
    for (long p = pos - c->window + 1; p <= pos; p++)
        if (p >= 0) keys[n_keys++] = sl->window + (p % c->window) * HD;
    if (c->attn[l] == KT_ATTN_HCA) {
        compress_step(m, &sl->comp, l, "model.layers.%ld.attn.", c->hca_rate, HD, 1, h, pos, 1);
        for (long s = 0; s < sl->comp.n_entries; s++) keys[n_keys++] = sl->comp.entries + s * HD;
    } else if (c->attn[l] == KT_ATTN_CSA) {
        compress_step(m, &sl->comp, l, "model.layers.%ld.attn.", c->csa_rate, HD, 2, h, pos, 1);
        compress_step(m, &sl->index, l, "model.layers.%ld.attn.indexer.", c->csa_rate, c->index_dim, 2, h, pos, 0);
        long *sel = malloc((size_t)(sl->index.n_entries + 1) * sizeof *sel);
        long k = indexer(m, sl, l, h, qr, pos, sel);
        for (long j = 0; j < k; j++) keys[n_keys++] = sl->comp.entries + sel[j] * HD;
        free(sel);
    }
    const float *sink = Wf(m, "model.layers.%ld.attn.attn_sink", l);
    double *o = malloc((size_t)(Hh * HD) * sizeof *o), *lg = malloc((size_t)n_keys * sizeof *lg);
    for (long i = 0; i < Hh; i++) {
        double mx = sink[i], sum = 0;
        const double *qi = q + i * HD;
        for (long s = 0; s < n_keys; s++) {
            double d = 0;
            for (long j = 0; j < HD; j++) d += qi[j] * keys[s][j];
            lg[s] = d / sqrt((double)HD);
            mx = fmax(mx, lg[s]);
        }
        sum = exp(sink[i] - mx);
        for (long s = 0; s < n_keys; s++) sum += lg[s] = exp(lg[s] - mx);
        for (long j = 0; j < HD; j++) {
            double v = 0;
            for (long s = 0; s < n_keys; s++) v += lg[s] * keys[s][j];
            o[i * HD + j] = v / sum;
        }
        rope(m, inv, o + i * HD, HD, (double)pos, -1);
    }
    long G = c->o_groups, GI = kt_model_group_in(c);
    double *oa = malloc((size_t)(G * c->o_lora) * sizeof *oa);
    const float *wo_a = Wf(m, "model.layers.%ld.attn.wo_a.weight", l);
    for (long g = 0; g < G; g++)
        linear(m, wo_a + g * c->o_lora * GI, c->o_lora, GI, o + g * GI, oa + g * c->o_lora, 1, 1);
    linear(m, Wf(m, "model.layers.%ld.attn.wo_b.weight", l), D, G * c->o_lora, oa, out, 1, 1);
    free(qr), free(q), free(keys), free(o), free(lg), free(oa);
}

/* One SwiGLU MLP of width I (names: gate, up, down) with the swiglu clamp (V3.2: none);
 * acc += scale * out. round_out: its GEMM outputs are bf16 (the shared expert and V3.2's dense
 * MLP run on fp8_gemm). */
static void mlp(const kt_model_ref *m, char names[3][128], long I, const double *h, double scale, double *acc,
                int round_out) {
    const kt_model_config *c = &m->c;
    long D = c->hidden;
    double *g = malloc((size_t)I * sizeof *g), *u = malloc((size_t)I * sizeof *u), *y = malloc((size_t)D * sizeof *y);
    linear(m, W(m, names[0], 0)->v, I, D, h, g, 1, round_out);
    linear(m, W(m, names[1], 0)->v, I, D, h, u, 1, round_out);
    for (long i = 0; i < I; i++) {
        double gg = fmin(g[i], c->swiglu_limit), uu = fmax(fmin(u[i], c->swiglu_limit), -c->swiglu_limit);
        g[i] = gg / (1 + exp(-gg)) * uu;
    }
    linear(m, W(m, names[2], 0)->v, D, I, g, y, 1, round_out);
    for (long d = 0; d < D; d++) acc[d] += scale * y[d];
    free(g), free(u), free(y);
}

/* Routed expert e of layer l (e < 0: the shared expert, of width I). */
static void expert(const kt_model_ref *m, long l, long e, long I, const double *h, double scale, double *acc,
                   int round_out) {
    char names[3][128];
    for (int which = 0; which < 3; which++) kt_model_expert_name(&m->c, l, e, which, names[which], sizeof names[which]);
    mlp(m, names, I, h, scale, acc, round_out);
}

/* The MoE block: routed experts (hash table or sqrtsoftplus top-k with the bias) plus shared. */
static void moe(const kt_model_ref *m, long l, const double *h, int32_t token, double *out) {
    const kt_model_config *c = &m->c;
    long E = c->n_experts, K = c->top_k;
    double *score = malloc((size_t)E * sizeof *score), wsum = 0;
    long idx[64];
    linear(m, Wf(m, "model.layers.%ld.ffn.gate.weight", l), E, c->hidden, h, score, 0, 0);
    for (long e = 0; e < E; e++) score[e] = sqrt(score[e] > 20 ? score[e] : log1p(exp(score[e])));
    if (c->mlp[l] == KT_MLP_HASH) {
        const int32_t *t = W(m, "model.layers.%ld.ffn.gate.tid2eid", l)->i;
        for (long k = 0; k < K; k++) idx[k] = t[token * K + k];
    } else {
        const float *bias = Wf(m, "model.layers.%ld.ffn.gate.bias", l);
        int taken[1024] = {0};
        for (long k = 0; k < K; k++) {
            long best = -1;
            for (long e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || score[e] + bias[e] > score[best] + bias[best])) best = e;
            idx[k] = best;
            taken[best] = 1;
        }
    }
    for (long k = 0; k < K; k++) wsum += score[idx[k]];
    memset(out, 0, (size_t)c->hidden * sizeof *out);
    for (long k = 0; k < K; k++)
        expert(m, l, idx[k], c->moe_inter, h, score[idx[k]] / (wsum + 1e-20) * c->routed_scale, out, 0);
    if (c->n_shared) expert(m, l, -1, c->moe_inter, h, 1.0, out, 1);
    free(score);
}

/* ------------------------------------------------------------- DeepSeek-V3.2 */

/* Half-split ("rotate_half") RoPE on the leading rope_dim channels, V3.2's indexer: channel i
 * pairs with i + rope_dim / 2; cos and sin carry the rope's attention_factor. */
static void rope_half(const kt_model_ref *m, double *x, double pos) {
    long R = m->c.rope_dim;
    double af = m->c.rope_main.attention_factor;
    for (long i = 0; i < R / 2; i++) {
        double f = (double)(float)((float)pos * (float)m->inv_main[i]);
        double c = af * cos(f), s = af * sin(f), a = x[i], b = x[i + R / 2];
        x[i] = a * c - b * s;
        x[i + R / 2] = b * c + a * s;
    }
}

/* V3.2's MLA RoPE: interleaved pairs of the trailing rope_dim channels (transformers then
 * de-interleaves q and k alike, which no dot product sees), times the attention_factor. */
static void rope_v32(const kt_model_ref *m, double *x, long dim, double pos) {
    rope(m, m->inv_main, x, dim, pos, 1);
    for (long i = dim - m->c.rope_dim; i < dim; i++) x[i] *= m->c.rope_main.attention_factor;
}

/* LayerNorm (mean and biased variance, weight and bias): the indexer's k_norm. */
static void layernorm(double *x, long n, const float *weight, const float *bias, double eps) {
    double mean = 0, var = 0;
    for (long i = 0; i < n; i++) mean += x[i] / (double)n;
    for (long i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean) / (double)n;
    for (long i = 0; i < n; i++) x[i] = (x[i] - mean) / sqrt(var + eps) * weight[i] + bias[i];
}

/* kt's V3.2 KV layout (mla_decode LAYOUT=V32): the 512 latent in e4m3 with a power-of-two
 * scale per 128, the 64 rope in bf16, read back as the kernel reads them. */
static void quant_kv_v32(double *x) {
    static uint8_t page[KT_MLA_PAGE * KT_MLA_V32_TOKEN];
    float f[KT_MLA_V32_DQK];
    for (int i = 0; i < KT_MLA_V32_DQK; i++) f[i] = (float)x[i];
    kt_mla_quantise_token(KT_MLA_V32, page, 0, f);
    for (int i = 0; i < KT_MLA_V32_DQK; i++) x[i] = kt_mla_value(KT_MLA_V32, page, 0, i);
}

/* V3.2's indexer (DSA): the tokens 0..pos it selects for this query, by sum_h w_h relu(q_h . k
 * / sqrt(index_dim)) with w = weights_proj(h) / sqrt(index_n_heads); the token's own key is
 * appended first. Returns how many (min(index_topk, pos + 1)). */
static long indexer_v32(const kt_model_ref *m, seq_layer *sl, long l, const double *h, const double *qr, long pos,
                        long *sel) {
    const kt_model_config *c = &m->c;
    long IH = c->index_heads, ID = c->index_dim;
    double *q = malloc((size_t)(IH * ID) * sizeof *q), w[64], *score = malloc((size_t)(pos + 1) * sizeof *score);
    double *k = sl->ikeys + pos * ID;
    linear(m, Wf(m, "model.layers.%ld.self_attn.indexer.wq_b.weight", l), IH * ID, c->q_lora, qr, q, 1, 1);
    for (long i = 0; i < IH; i++) rope_half(m, q + i * ID, (double)pos);
    linear(m, Wf(m, "model.layers.%ld.self_attn.indexer.wk.weight", l), ID, c->hidden, h, k, 1, 1);
    layernorm(k, ID, Wf(m, "model.layers.%ld.self_attn.indexer.k_norm.weight", l),
              Wf(m, "model.layers.%ld.self_attn.indexer.k_norm.bias", l), 1e-6);
    rope_half(m, k, (double)pos);
    linear(m, Wf(m, "model.layers.%ld.self_attn.indexer.weights_proj.weight", l), IH, c->hidden, h, w, 0, 0);
    for (long t = 0; t <= pos; t++) {
        double sum = 0;
        for (long i = 0; i < IH; i++) {
            double d = 0;
            for (long j = 0; j < ID; j++) d += q[i * ID + j] * sl->ikeys[t * ID + j];
            d /= sqrt((double)ID);
            sum += w[i] / sqrt((double)IH) * (d > 0 ? d : 0);
        }
        score[t] = sum;
    }
    long n = top_indices(score, pos + 1, c->index_topk, sel);
    free(q), free(score);
    return n;
}

/* V3.2's attention of one token (block input h) at pos, in MLA's absorbed form: per head the
 * query's nope part through kv_b_proj's key rows becomes a 512 latent query, scored with the
 * rope part against every selected token's [latent | rope] key; the weighted latents go through
 * kv_b_proj's value rows, then o_proj. In KT_REF_KT the keys are in kt's V32 KV layout and the
 * absorbed query and the latent output in bf16 (mla_decode's q and out). */
static void attention_v32(const kt_model_ref *m, seq_layer *sl, long l, const double *h, long pos, double *out) {
    const kt_model_config *c = &m->c;
    long H = c->n_heads, NO = c->qk_nope, R = c->rope_dim, QK = NO + R, VH = c->v_head, L = c->kv_lora, KV = L + R;
    double *qr = malloc((size_t)c->q_lora * sizeof *qr), *q = malloc((size_t)(H * QK) * sizeof *q);
    double *e = sl->latent + pos * KV, *ql = malloc((size_t)KV * sizeof *ql), *ol = malloc((size_t)L * sizeof *ol);
    double *o = malloc((size_t)(H * VH) * sizeof *o), *p = malloc((size_t)(pos + 1) * sizeof *p);
    long *sel = malloc((size_t)(pos + 1) * sizeof *sel);
    linear(m, Wf(m, "model.layers.%ld.self_attn.q_a_proj.weight", l), c->q_lora, c->hidden, h, qr, 1, 1);
    rmsnorm(qr, c->q_lora, Wf(m, "model.layers.%ld.self_attn.q_a_layernorm.weight", l), c->rms_eps);
    linear(m, Wf(m, "model.layers.%ld.self_attn.q_b_proj.weight", l), H * QK, c->q_lora, qr, q, 1, 1);
    linear(m, Wf(m, "model.layers.%ld.self_attn.kv_a_proj_with_mqa.weight", l), KV, c->hidden, h, e, 1, 1);
    rmsnorm(e, L, Wf(m, "model.layers.%ld.self_attn.kv_a_layernorm.weight", l), c->rms_eps);
    rope_v32(m, e, KV, (double)pos);
    if (m->mode == KT_REF_KT) quant_kv_v32(e);
    long n = indexer_v32(m, sl, l, h, qr, pos, sel);
    const float *wkv = Wf(m, "model.layers.%ld.self_attn.kv_b_proj.weight", l); /* [H * (NO + VH), L] */
    for (long i = 0; i < H; i++) {
        double *qi = q + i * QK, mx = -INFINITY, sum = 0;
        rope_v32(m, qi, QK, (double)pos);
        for (long j = 0; j < L; j++) {
            double v = 0;
            for (long d = 0; d < NO; d++) v += qi[d] * (double)wkv[(i * (NO + VH) + d) * L + j];
            ql[j] = v;
        }
        for (long r = 0; r < R; r++) ql[L + r] = qi[NO + r];
        for (long j = 0; j < KV && m->mode == KT_REF_KT; j++) ql[j] = round_bf16(ql[j]);
        for (long s = 0; s < n; s++) {
            double d = 0;
            for (long j = 0; j < KV; j++) d += ql[j] * sl->latent[sel[s] * KV + j];
            p[s] = d * c->softmax_scale;
            mx = fmax(mx, p[s]);
        }
        for (long s = 0; s < n; s++) sum += p[s] = exp(p[s] - mx);
        for (long j = 0; j < L; j++) {
            double v = 0;
            for (long s = 0; s < n; s++) v += p[s] * sl->latent[sel[s] * KV + j];
            ol[j] = m->mode == KT_REF_KT ? round_bf16(v / sum) : v / sum;
        }
        for (long d = 0; d < VH; d++) {
            double v = 0;
            for (long j = 0; j < L; j++) v += ol[j] * (double)wkv[(i * (NO + VH) + NO + d) * L + j];
            o[i * VH + d] = v;
        }
    }
    linear(m, Wf(m, "model.layers.%ld.self_attn.o_proj.weight", l), c->hidden, H * VH, o, out, 1, 1);
    free(qr), free(q), free(ql), free(ol), free(o), free(p), free(sel);
}

/* V3.2's MoE: sigmoid scores; with the correction bias, the topk_group groups of the best
 * top-2 sums, then the top_k experts in them; weights = the scores (normalised when
 * norm_topk) x routed_scale; plus the shared experts. */
static void moe_v32(const kt_model_ref *m, long l, const double *h, double *out) {
    const kt_model_config *c = &m->c;
    long E = c->n_experts, G = c->n_group, per = E / G, idx[64], gsel[1024];
    double *score = malloc((size_t)E * sizeof *score), *choice = malloc((size_t)E * sizeof *choice), gscore[1024],
           wsum = 0;
    const float *bias = Wf(m, "model.layers.%ld.mlp.gate.e_score_correction_bias", l);
    linear(m, Wf(m, "model.layers.%ld.mlp.gate.weight", l), E, c->hidden, h, score, 0, 0);
    for (long e = 0; e < E; e++) choice[e] = (score[e] = sigmoid(score[e])) + bias[e];
    for (long g = 0; g < G; g++) {
        double a = -INFINITY, b = -INFINITY; /* the group's two best */
        for (long e = g * per; e < (g + 1) * per; e++)
            if (choice[e] > a)
                b = a, a = choice[e];
            else if (choice[e] > b)
                b = choice[e];
        gscore[g] = a + b;
    }
    long ng = top_indices(gscore, G, c->topk_group, gsel);
    double *masked = malloc((size_t)E * sizeof *masked);
    for (long e = 0; e < E; e++) masked[e] = -INFINITY;
    for (long j = 0; j < ng; j++)
        for (long e = gsel[j] * per; e < (gsel[j] + 1) * per; e++) masked[e] = choice[e];
    long K = top_indices(masked, E, c->top_k, idx);
    for (long k = 0; k < K; k++) wsum += score[idx[k]];
    memset(out, 0, (size_t)c->hidden * sizeof *out);
    for (long k = 0; k < K; k++)
        expert(m, l, idx[k], c->moe_inter, h,
               (c->norm_topk ? score[idx[k]] / (wsum + 1e-20) : score[idx[k]]) * c->routed_scale, out, 0);
    if (c->n_shared) expert(m, l, -1, c->moe_inter * c->n_shared, h, 1.0, out, 1);
    free(score), free(choice), free(masked);
}

/* One V3.2 decode step of every sequence: pre-norm residual layers, final norm, LM head. */
static int step_v32(kt_model_ref *m, const int32_t *token, long pos, double *logits) {
    const kt_model_config *c = &m->c;
    long D = c->hidden;
    double *x = malloc((size_t)D * sizeof *x), *col = malloc((size_t)D * sizeof *col),
           *y = malloc((size_t)D * sizeof *y);
    const float *embed = Wf(m, "model.embed_tokens.weight", 0);
    for (int b = 0; b < m->batch; b++) {
        if (token[b] < 0 || token[b] >= c->vocab)
            return free(x), free(col), free(y), kt_fail("token %d outside the vocabulary", token[b]);
        for (long d = 0; d < D; d++) x[d] = embed[token[b] * D + d];
        for (long l = 0; l < c->n_layers; l++) {
            memcpy(col, x, (size_t)D * sizeof *col);
            rmsnorm(col, D, Wf(m, "model.layers.%ld.input_layernorm.weight", l), c->rms_eps);
            attention_v32(m, &m->state[b * c->n_layers + l], l, col, pos, y);
            for (long d = 0; d < D; d++) x[d] += y[d];
            memcpy(col, x, (size_t)D * sizeof *col);
            rmsnorm(col, D, Wf(m, "model.layers.%ld.post_attention_layernorm.weight", l), c->rms_eps);
            if (c->mlp[l] == KT_MLP_DENSE) {
                char names[3][128];
                static const char *const which[3] = {"gate_proj", "up_proj", "down_proj"};
                for (int i = 0; i < 3; i++)
                    snprintf(names[i], sizeof names[i], "model.layers.%ld.mlp.%s.weight", l, which[i]);
                memset(y, 0, (size_t)D * sizeof *y);
                mlp(m, names, c->inter, col, 1.0, y, 1);
            } else {
                moe_v32(m, l, col, y);
            }
            for (long d = 0; d < D; d++) x[d] += y[d];
        }
        rmsnorm(x, D, Wf(m, "model.norm.weight", 0), c->rms_eps);
        linear(m, Wf(m, "lm_head.weight", 0), c->head_rows, D, x, logits + b * c->head_rows, 0, 0);
    }
    free(x), free(col), free(y);
    return 0;
}

int kt_model_ref_step(kt_model_ref *m, const int32_t *token, long pos, double *logits) {
    const kt_model_config *c = &m->c;
    long D = c->hidden, H = c->hc_mult;
    if (pos < 0 || pos >= m->max_ctx) return kt_fail("position %ld outside the context of %ld", pos, m->max_ctx);
    if (c->arch == KT_ARCH_V32) return step_v32(m, token, pos, logits);
    double *x = malloc((size_t)(H * D) * sizeof *x), *col = malloc((size_t)D * sizeof *col);
    double *y = malloc((size_t)D * sizeof *y), post[8], comb[64];
    const float *embed = Wf(m, "model.embed_tokens.weight", 0);
    for (int b = 0; b < m->batch; b++) {
        if (token[b] < 0 || token[b] >= c->vocab) return kt_fail("token %d outside the vocabulary", token[b]);
        for (long k = 0; k < H; k++)
            for (long d = 0; d < D; d++) x[k * D + d] = embed[token[b] * D + d];
        for (long l = 0; l < c->n_layers; l++) {
            seq_layer *sl = &m->state[b * c->n_layers + l];
            hc_pre(m, "attn", l, x, col, post, comb);
            rmsnorm(col, D, Wf(m, "model.layers.%ld.attn_norm.weight", l), c->rms_eps);
            attention(m, sl, l, col, pos, y);
            hc_post(c, x, y, post, comb);
            hc_pre(m, "ffn", l, x, col, post, comb);
            rmsnorm(col, D, Wf(m, "model.layers.%ld.ffn_norm.weight", l), c->rms_eps);
            moe(m, l, col, token[b], y);
            hc_post(c, x, y, post, comb);
        }
        /* the HC head: sigmoid-weighted collapse of the streams, then the final norm and the head */
        double *flat = malloc((size_t)(H * D) * sizeof *flat), mix[8];
        memcpy(flat, x, (size_t)(H * D) * sizeof *flat);
        rmsnorm(flat, H * D, NULL, c->rms_eps);
        linear(m, Wf(m, "model.hc_head.hc_fn", 0), H, H * D, flat, mix, 0, 0);
        const float *hb = Wf(m, "model.hc_head.hc_base", 0), *hs = Wf(m, "model.hc_head.hc_scale", 0);
        for (long d = 0; d < D; d++) y[d] = 0;
        for (long k = 0; k < H; k++) {
            double pre = sigmoid(mix[k] * hs[0] + hb[k]) + c->hc_eps;
            for (long d = 0; d < D; d++) y[d] += pre * x[k * D + d];
        }
        free(flat);
        rmsnorm(y, D, Wf(m, "model.norm.weight", 0), c->rms_eps);
        linear(m, Wf(m, "head.weight", 0), c->head_rows, D, y, logits + b * c->head_rows, 0, 0);
    }
    free(x), free(col), free(y);
    return 0;
}

/* ------------------------------------------------------------ loading */

/* Inverse frequencies of a rope (YaRN blends interpolated and extrapolated ones by a ramp, as
 * transformers' _compute_yarn_parameters does), in float32 steps like transformers. */
void kt_rope_inv_freq(const kt_rope *r, long rope_dim, double *inv) {
    long n = rope_dim / 2;
    for (long i = 0; i < n; i++) inv[i] = (double)(float)(1.0 / pow(r->theta, (double)(2 * i) / (double)rope_dim));
    if (r->factor <= 0) return;
    double L = (double)r->original_max_position, d = (double)rope_dim;
    double lo = floor(d * log(L / (r->beta_fast * 2 * M_PI)) / (2 * log(r->theta)));
    double hi = ceil(d * log(L / (r->beta_slow * 2 * M_PI)) / (2 * log(r->theta)));
    if (lo < 0) lo = 0;
    if (hi > d - 1) hi = d - 1;
    if (hi == lo) hi += 0.001;
    for (long i = 0; i < n; i++) {
        double ramp = fmin(fmax(((double)i - lo) / (hi - lo), 0), 1);
        inv[i] = inv[i] / r->factor * ramp + inv[i] * (1 - ramp);
    }
}

/* An MXFP4 matrix's exact values, e2m1 * 2^(s - 127), as moe_gemm reads them. */
static float *mxfp4_values(const kt_st_tensor *codes, const kt_st_tensor *scales, long n, long k) {
    float *v = malloc((size_t)(n * k) * sizeof *v);
    for (long r = 0; r < n; r++)
        for (long col = 0; col < k; col++) v[r * k + col] = kt_moe_mxfp4_value(codes->data, scales->data, k, r, col);
    return v;
}

int kt_model_weight(const kt_model_config *c, const kt_st_set *w, const kt_model_tensor *d, float **v, int32_t **iv) {
    const kt_st_tensor *st, *sc;
    long n = d->shape[0], k = d->ndim == 2 ? d->shape[1] : 1;
    const char *name = kt_model_st_name(w, d->name);
    *v = NULL, *iv = NULL;
    int fp4 = d->kind == KT_W_GEMM ? kt_model_mxfp4(w, d, &st, &sc) : 0;
    if (fp4 < 0) return -1;
    if (fp4) return *v = mxfp4_values(st, sc, n, k), 0;
    if (kt_st_get(w, name, d->ndim, d->shape, &st)) return -1;
    if (d->kind == KT_W_INDEX) {
        *iv = malloc((size_t)(n * k) * sizeof **iv);
        if (kt_st_to_i32(w, st, *iv)) return -1;
        for (long j = 0; j < n * k; j++)
            if ((*iv)[j] < 0 || (*iv)[j] >= c->n_experts)
                return kt_fail("%s: tensor %s: expert id %d outside 0..%ld", kt_st_file_of(w, st), name, (*iv)[j],
                               c->n_experts - 1);
        return 0;
    }
    if (st->dtype == KT_ST_F8_E4M3 && d->kind != KT_W_GEMM)
        return kt_fail("%s: tensor %s: F8_E4M3 where kt expects a bf16/f32 tensor", kt_st_file_of(w, st), name);
    if (st->dtype == KT_ST_U8 || st->dtype == KT_ST_I8)
        return kt_fail("%s: tensor %s: %s codes where kt expects a bf16/f32 tensor", kt_st_file_of(w, st), name,
                       kt_st_dtype_name(st->dtype));
    *v = malloc((size_t)(n * k) * sizeof **v);
    if (kt_st_to_f32(w, st, *v)) return -1;
    if (st->dtype == KT_ST_F8_E4M3) { /* value = code * the scale (weight_scale_inv or scale) of its 128x128 block */
        long sh[2] = {(n + 127) / 128, (k + 127) / 128};
        if (!(sc = kt_model_scale_of(w, name))) {
            free(*v), *v = NULL;
            return kt_fail("%s: tensor %s: F8_E4M3 without its block scales (weight_scale_inv or scale)",
                           kt_st_file_of(w, st), name);
        }
        float *s = malloc((size_t)(sh[0] * sh[1]) * sizeof *s);
        if (kt_st_get(w, sc->name, 2, sh, &sc) || kt_st_to_f32(w, sc, s)) return free(s), free(*v), *v = NULL, -1;
        for (long r = 0; r < n; r++)
            for (long col = 0; col < k; col++) (*v)[r * k + col] *= s[(r / 128) * sh[1] + col / 128];
        free(s);
    }
    return 0;
}

/* A checkpoint tensor; in KT_REF_KT a GEMM weight becomes kt's FP8 blocks, except an MXFP4 one,
 * which kt's grouped GEMM reads as it is. */
static int load_tensor(kt_model_ref *m, const kt_st_set *w, const kt_model_tensor *d, named *t) {
    if (kt_model_weight(&m->c, w, d, &t->v, &t->i)) return -1;
    if (d->kind == KT_W_GEMM && m->mode == KT_REF_KT && !kt_model_mxfp4(w, d, NULL, NULL))
        kt_quant_blocks(t->v, d->shape[0], d->shape[1], NULL, NULL);
    return 0;
}

/* Seeded weights of the tensor's shape: unit-ish norms, small projections, valid expert ids. */
static void synth_tensor(kt_model_ref *m, const kt_model_tensor *d, uint64_t *rng, named *t) {
    long n = d->shape[0], k = d->ndim == 2 ? d->shape[1] : 1;
    if (d->kind == KT_W_INDEX) {
        t->i = malloc((size_t)(n * k) * sizeof *t->i);
        for (long r = 0; r < n; r++)
            for (long j = 0; j < k; j++)
                t->i[r * k + j] = (int32_t)((r * 7 + j * 3 + kt_rng_next(rng) % 2) % m->c.n_experts);
        return;
    }
    t->v = malloc((size_t)(n * k) * sizeof *t->v);
    int is_norm = d->ndim == 1 && strstr(d->name, "weight");
    double amp = d->ndim == 1 ? 0.3 : 1.0 / sqrt((double)k);
    for (long j = 0; j < n * k; j++) t->v[j] = (is_norm ? 1.0f : 0.0f) + (float)amp * kt_rng_uniform(rng);
    if (d->kind == KT_W_GEMM && m->mode == KT_REF_KT) kt_quant_blocks(t->v, n, k, NULL, NULL);
}

static void alloc_comp(comp_state *s, long rate, long width, int overlap, long max_entries) {
    s->kv = calloc((size_t)(rate * overlap * width), sizeof(double));
    s->gate = calloc((size_t)(rate * overlap * width), sizeof(double));
    s->prev_kv = calloc((size_t)(rate * width), sizeof(double));
    s->prev_gate = calloc((size_t)(rate * width), sizeof(double));
    s->entries = calloc((size_t)((max_entries + 1) * width), sizeof(double));
}

int kt_model_ref_open(const kt_model_config *c, const kt_st_set *w, uint64_t seed, kt_ref_mode mode, int batch,
                      long max_ctx, kt_model_ref **out) {
    kt_model_ref *m = calloc(1, sizeof *m);
    m->c = *c;
    m->mode = mode;
    m->batch = batch;
    m->max_ctx = max_ctx;
    int n = kt_model_tensors(c, NULL, 0);
    kt_model_tensor *list = malloc((size_t)n * sizeof *list);
    kt_model_tensors(c, list, n);
    m->w = calloc((size_t)n, sizeof *m->w);
    m->n_w = n;
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) {
        m->w[i].name = strdup(list[i].name);
        if (!w)
            synth_tensor(m, &list[i], &rng, &m->w[i]);
        else if (load_tensor(m, w, &list[i], &m->w[i])) {
            free(list);
            kt_model_ref_close(m);
            return -1;
        }
    }
    free(list);
    qsort(m->w, (size_t)n, sizeof *m->w, by_name);
    m->inv_main = malloc((size_t)(c->rope_dim / 2) * sizeof(double));
    m->inv_comp = malloc((size_t)(c->rope_dim / 2) * sizeof(double));
    kt_rope_inv_freq(&c->rope_main, c->rope_dim, m->inv_main);
    kt_rope_inv_freq(&c->rope_compress, c->rope_dim, m->inv_comp);
    m->state = calloc((size_t)(batch * c->n_layers), sizeof *m->state);
    for (long s = 0; s < batch * c->n_layers; s++) {
        long l = s % c->n_layers;
        seq_layer *sl = &m->state[s];
        if (c->arch == KT_ARCH_V32) {
            sl->latent = calloc((size_t)(max_ctx * (c->kv_lora + c->rope_dim)), sizeof(double));
            sl->ikeys = calloc((size_t)(max_ctx * c->index_dim), sizeof(double));
            continue;
        }
        sl->window = calloc((size_t)(c->window * c->head_dim), sizeof(double));
        long rate = c->attn[l] == KT_ATTN_HCA ? c->hca_rate : c->csa_rate;
        if (c->attn[l] != KT_ATTN_SLIDING)
            alloc_comp(&sl->comp, rate, c->head_dim, c->attn[l] == KT_ATTN_CSA ? 2 : 1, max_ctx / rate);
        if (c->attn[l] == KT_ATTN_CSA) alloc_comp(&sl->index, rate, c->index_dim, 2, max_ctx / rate);
    }
    *out = m;
    return 0;
}

static void free_comp(comp_state *s) {
    free(s->kv), free(s->gate), free(s->prev_kv), free(s->prev_gate), free(s->entries);
}

void kt_model_ref_close(kt_model_ref *m) {
    if (!m) return;
    for (int i = 0; i < m->n_w; i++) free(m->w[i].name), free(m->w[i].v), free(m->w[i].i);
    if (m->state)
        for (long s = 0; s < m->batch * m->c.n_layers; s++)
            free(m->state[s].window), free_comp(&m->state[s].comp), free_comp(&m->state[s].index),
                free(m->state[s].latent), free(m->state[s].ikeys);
    free(m->w), free(m->state), free(m->inv_main), free(m->inv_comp), free(m);
}
