/* model_ref.c — the float64 host reference of the DeepSeek-V4 decode step (model_ref.h). One
 * token per sequence per step, as transformers 5.17's DeepseekV4ForCausalLM computes it with its
 * cache: hyper-connections (hc_mult streams, Sinkhorn-projected mixing), attention over the
 * sliding window plus compressed entries (CSA: overlapping windows of compress rate 4, the
 * lightning indexer's top-k; HCA: rate 128, all entries), per-head sinks, the grouped output
 * projection, hash-routed or sqrtsoftplus-routed MoE with a shared expert, the HC head and the
 * LM head. Slow on purpose: plain loops, for tiny configs. */
#include "model_ref.h"

#include "../kernels/fp8_gemm.h"
#include "kt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct named {
    char *name;
    float *v;      /* f32 values (GEMM weights after kt's quantisation in KT_REF_KT) */
    int32_t *i;    /* integer tables */
} named;

/* The compressor state of one (sequence, layer, compressor): the window being filled and, for
 * CSA, the previous window's first series. */
typedef struct comp_state {
    double *kv, *gate;       /* [rate][overlap * width] */
    double *prev_kv, *prev_gate; /* [rate][width] (CSA) */
    int has_prev;
    double *entries;         /* [max_entries][width] */
    long n_entries;
} comp_state;

typedef struct seq_layer {
    double *window;          /* [window][head_dim], slot = pos % window */
    comp_state comp, index;
} seq_layer;

struct kt_model_ref {
    kt_model_config c;
    kt_ref_mode mode;
    int batch;
    long max_ctx;
    named *w;
    int n_w;
    seq_layer *state; /* [batch][n_layers] */
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
                for (long col = bk * 128; col < k && col < bk * 128 + 128; col++) amax = fmaxf(amax, fabsf(w[r * k + col]));
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
        for (int i = 0; i < 64; i++) x[g * 64 + i] = (double)(kt_e4m3_to_float(kt_float_to_e4m3((float)(x[g * 64 + i] / s))) * s);
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
        for (long j = 0; j < H; j++) sum += comb[i * H + j] = exp(mix[2 * H + i * H + j] * scale[2] + base[2 * H + i * H + j] - mx);
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

/* The lightning indexer: the top index_topk of the indexer's entries for this query (by
 * sum_h w_h relu(q_h . k) / sqrt(index_dim)), written to sel; returns how many. */
static long indexer(const kt_model_ref *m, seq_layer *sl, long l, const double *h, const double *qr, long pos, long *sel) {
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
    long k = n < c->index_topk ? n : c->index_topk;
    for (long j = 0; j < k; j++) { /* selection: the best not yet taken */
        long best = -1;
        for (long s = 0; s < n; s++)
            if (score[s] > -INFINITY && (best < 0 || score[s] > score[best])) best = s;
        sel[j] = best;
        score[best] = -INFINITY;
    }
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
    for (long g = 0; g < G; g++) linear(m, wo_a + g * c->o_lora * GI, c->o_lora, GI, o + g * GI, oa + g * c->o_lora, 1, 1);
    linear(m, Wf(m, "model.layers.%ld.attn.wo_b.weight", l), D, G * c->o_lora, oa, out, 1, 1);
    free(qr), free(q), free(keys), free(o), free(lg), free(oa);
}

/* One SwiGLU expert (w1 gate, w3 up, w2 down) with the swiglu clamp; acc += scale * out.
 * round_out: its GEMM outputs are bf16 (the shared expert runs on fp8_gemm). */
static void expert(const kt_model_ref *m, const char *p, const double *h, double scale, double *acc, int round_out) {
    const kt_model_config *c = &m->c;
    long I = c->moe_inter, D = c->hidden;
    char n1[128], n2[128], n3[128];
    snprintf(n1, sizeof n1, "%sw1.weight", p);
    snprintf(n2, sizeof n2, "%sw2.weight", p);
    snprintf(n3, sizeof n3, "%sw3.weight", p);
    double *g = malloc((size_t)I * sizeof *g), *u = malloc((size_t)I * sizeof *u), *y = malloc((size_t)D * sizeof *y);
    linear(m, W(m, n1, 0)->v, I, D, h, g, 1, round_out);
    linear(m, W(m, n3, 0)->v, I, D, h, u, 1, round_out);
    for (long i = 0; i < I; i++) {
        double gg = fmin(g[i], c->swiglu_limit), uu = fmax(fmin(u[i], c->swiglu_limit), -c->swiglu_limit);
        g[i] = gg / (1 + exp(-gg)) * uu;
    }
    linear(m, W(m, n2, 0)->v, D, I, g, y, 1, round_out);
    for (long d = 0; d < D; d++) acc[d] += scale * y[d];
    free(g), free(u), free(y);
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
    char p[96];
    for (long k = 0; k < K; k++) {
        snprintf(p, sizeof p, "model.layers.%ld.ffn.experts.%ld.", l, idx[k]);
        expert(m, p, h, score[idx[k]] / (wsum + 1e-20) * c->routed_scale, out, 0);
    }
    snprintf(p, sizeof p, "model.layers.%ld.ffn.shared_experts.", l);
    if (c->n_shared) expert(m, p, h, 1.0, out, 1);
    free(score);
}

int kt_model_ref_step(kt_model_ref *m, const int32_t *token, long pos, double *logits) {
    const kt_model_config *c = &m->c;
    long D = c->hidden, H = c->hc_mult;
    if (pos < 0 || pos >= m->max_ctx) return kt_fail("position %ld outside the context of %ld", pos, m->max_ctx);
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
        linear(m, Wf(m, "head.weight", 0), c->vocab, D, y, logits + b * c->vocab, 0, 0);
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

int kt_model_weight(const kt_model_config *c, const kt_st_set *w, const kt_model_tensor *d, float **v, int32_t **iv) {
    const kt_st_tensor *st;
    long n = d->shape[0], k = d->ndim == 2 ? d->shape[1] : 1;
    const char *name = d->name;
    char alt[128];
    *v = NULL, *iv = NULL;
    if (!kt_st_find(w, name) && !strncmp(name, "model.", 6) && kt_st_find(w, name + 6)) name = name + 6;
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
        return kt_fail("%s: tensor %s: %s (MXFP4 experts?): kt does not load MXFP4 weights yet", kt_st_file_of(w, st),
                       name, kt_st_dtype_name(st->dtype));
    *v = malloc((size_t)(n * k) * sizeof **v);
    if (kt_st_to_f32(w, st, *v)) return -1;
    if (st->dtype == KT_ST_F8_E4M3) { /* value = code * weight_scale_inv of its 128x128 block */
        const kt_st_tensor *sc;
        long sh[2] = {(n + 127) / 128, (k + 127) / 128};
        snprintf(alt, sizeof alt, "%.*sweight_scale_inv", (int)(strlen(name) - 6), name);
        float *s = malloc((size_t)(sh[0] * sh[1]) * sizeof *s);
        if (kt_st_get(w, alt, 2, sh, &sc) || kt_st_to_f32(w, sc, s)) return free(s), -1;
        for (long r = 0; r < n; r++)
            for (long col = 0; col < k; col++) (*v)[r * k + col] *= s[(r / 128) * sh[1] + col / 128];
        free(s);
    }
    return 0;
}

static int load_tensor(kt_model_ref *m, const kt_st_set *w, const kt_model_tensor *d, named *t) {
    if (kt_model_weight(&m->c, w, d, &t->v, &t->i)) return -1;
    if (d->kind == KT_W_GEMM && m->mode == KT_REF_KT) kt_quant_blocks(t->v, d->shape[0], d->shape[1], NULL, NULL);
    return 0;
}

/* Seeded weights of the tensor's shape: unit-ish norms, small projections, valid expert ids. */
static void synth_tensor(kt_model_ref *m, const kt_model_tensor *d, uint64_t *rng, named *t) {
    long n = d->shape[0], k = d->ndim == 2 ? d->shape[1] : 1;
    if (d->kind == KT_W_INDEX) {
        t->i = malloc((size_t)(n * k) * sizeof *t->i);
        for (long r = 0; r < n; r++)
            for (long j = 0; j < k; j++) t->i[r * k + j] = (int32_t)((r * 7 + j * 3 + kt_rng_next(rng) % 2) % m->c.n_experts);
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
        if (!w) synth_tensor(m, &list[i], &rng, &m->w[i]);
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
        sl->window = calloc((size_t)(c->window * c->head_dim), sizeof(double));
        long rate = c->attn[l] == KT_ATTN_HCA ? c->hca_rate : c->csa_rate;
        if (c->attn[l] != KT_ATTN_SLIDING)
            alloc_comp(&sl->comp, rate, c->head_dim, c->attn[l] == KT_ATTN_CSA ? 2 : 1, max_ctx / rate);
        if (c->attn[l] == KT_ATTN_CSA) alloc_comp(&sl->index, rate, c->index_dim, 2, max_ctx / rate);
    }
    *out = m;
    return 0;
}

static void free_comp(comp_state *s) { free(s->kv), free(s->gate), free(s->prev_kv), free(s->prev_gate), free(s->entries); }

void kt_model_ref_close(kt_model_ref *m) {
    if (!m) return;
    for (int i = 0; i < m->n_w; i++) free(m->w[i].name), free(m->w[i].v), free(m->w[i].i);
    if (m->state)
        for (long s = 0; s < m->batch * m->c.n_layers; s++)
            free(m->state[s].window), free_comp(&m->state[s].comp), free_comp(&m->state[s].index);
    free(m->w), free(m->state), free(m->inv_main), free(m->inv_comp), free(m);
}
