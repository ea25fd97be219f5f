/* test_model_mxfp4.c — CPU tests of MXFP4 routed experts in the runtime's model input: a
 * hand-built MXFP4 tensor decoded byte by byte (e2m1 pairs, ue8m0 scales) by the loader and laid
 * out for moe_gemm, malformed MXFP4 tensors refused with the file and tensor named, and the
 * float64 host reference on a tiny V4 whose experts are MXFP4 against the same model with the
 * experts' exact values in f32. */
#include "../../kernels/common/moe_layout.h"
#include "kt.h"
#include "model_ref.h"
#include "safetensors.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One tensor to write: safetensors dtype name, shape, bytes (owned). */
typedef struct st_out {
    char name[112];
    const char *dtype;
    int ndim;
    long shape[2];
    size_t bytes;
    uint8_t *data;
} st_out;

/* Writes tensors t[0..n) as one safetensors file (offsets in order). */
static void write_tensors(const char *path, const st_out *t, int n) {
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%ld", i ? "," : "",
                                t[i].name, t[i].dtype, t[i].shape[0]);
        if (t[i].ndim == 2) len += (size_t)snprintf(h + len, cap - len, ",%ld", t[i].shape[1]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].bytes);
        off += t[i].bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    FILE *f = fopen(path, "wb");
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, len, f);
    for (int i = 0; i < n; i++) fwrite(t[i].data, 1, t[i].bytes, f);
    fclose(f);
    free(h);
}

static st_out tensor(const char *name, const char *dtype, long d0, long d1, size_t elem) {
    st_out t = {.dtype = dtype, .ndim = d1 ? 2 : 1, .shape = {d0, d1}};
    snprintf(t.name, sizeof t.name, "%s", name);
    t.bytes = (size_t)d0 * (size_t)(d1 ? d1 : 1) * elem;
    t.data = malloc(t.bytes ? t.bytes : 1);
    return t;
}

/* MXFP4 codes and scales of an [n, k] matrix: seeded code bytes, scale bytes around 2^e0. */
static void mxfp4_pair(const char *weight, long n, long k, int e0, uint64_t *rng, st_out *codes, st_out *scales) {
    char sname[112];
    snprintf(sname, sizeof sname, "%.*sscale", (int)strlen(weight) - 6, weight);
    *codes = tensor(weight, "I8", n, k / 2, 1);
    *scales = tensor(sname, "F8_E8M0", n, k / 32, 1);
    for (size_t i = 0; i < codes->bytes; i++) codes->data[i] = (uint8_t)kt_rng_next(rng);
    for (size_t i = 0; i < scales->bytes; i++) scales->data[i] = (uint8_t)(127 + e0 + (int)(kt_rng_next(rng) % 3));
}

/* The e2m1 value of a nibble, from the OCP MX table (not kt's decoder). */
static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

static void tmp_path(char *out, size_t n, const char *what) {
    snprintf(out, n, "/tmp/kt_test_mxfp4_%d_%s.safetensors", (int)getpid(), what);
}

KT_TEST(mxfp4_tensor_decoded_byte_by_byte) {
    char path[128];
    tmp_path(path, sizeof path, "one");
    /* [2, 64]: codes [2, 32], scales [2, 2] = 2^0, 2^1, 2^-127 (s = 0), 2^3 */
    st_out t[2] = {tensor("blk.weight", "I8", 2, 32, 1), tensor("blk.scale", "F8_E8M0", 2, 2, 1)};
    for (int i = 0; i < 64; i++) t[0].data[i] = (uint8_t)(i * 37 + 11);
    t[0].data[0] = 0x9a; /* k = 0: 0xa = -1.0, k = 1: 0x9 = -0.5 */
    const uint8_t sc[4] = {127, 128, 0, 130};
    memcpy(t[1].data, sc, 4);
    write_tensors(path, t, 2);
    kt_st_set w;
    EXPECT(kt_st_open_file(&w, path) == 0);
    kt_model_tensor d = {.name = "blk.weight", .ndim = 2, .shape = {2, 64}, .kind = KT_W_GEMM};
    kt_model_config c = {0};
    float *v;
    int32_t *iv;
    EXPECT(kt_model_mxfp4(&w, &d, NULL, NULL) == 1);
    EXPECT(kt_model_weight(&c, &w, &d, &v, &iv) == 0 && v);
    EXPECT(v[0] == -1.0f && v[1] == -0.5f);
    long bad = 0;
    for (long n = 0; n < 2; n++)
        for (long k = 0; k < 64; k++) {
            uint8_t byte = t[0].data[n * 32 + k / 2];
            float want = e2m1[k % 2 ? byte >> 4 : byte & 15] * ldexpf(1.0f, sc[n * 2 + k / 32] - 127);
            bad += v[n * 64 + k] != want || signbit(v[n * 64 + k]) != signbit(want);
        }
    EXPECT(bad == 0);
    free(v);
    kt_st_close(&w);
    unlink(path);
    free(t[0].data), free(t[1].data);
}

KT_TEST(mxfp4_experts_in_moe_gemm_layout) {
    /* layer 0 of a V4 with 4 experts, hidden 128, width 128: gate+up rows [0, I) w1 then w3 */
    kt_model_config c = {.arch = KT_ARCH_V4, .n_layers = 1, .n_experts = 4, .moe_inter = 128, .hidden = 128};
    long E = 4, I = 128, D = 128;
    st_out t[24];
    uint64_t rng = 41;
    for (long e = 0; e < E; e++)
        for (int which = 0; which < 3; which++) {
            char name[112];
            kt_model_expert_name(&c, 0, e, which, name, sizeof name);
            mxfp4_pair(name, which == 2 ? D : I, which == 2 ? I : D, -3, &rng, &t[(e * 3 + which) * 2],
                       &t[(e * 3 + which) * 2 + 1]);
        }
    char path[128];
    tmp_path(path, sizeof path, "experts");
    write_tensors(path, t, 24);
    kt_st_set w;
    EXPECT(kt_st_open_file(&w, path) == 0);
    size_t gu = (size_t)(E * 2 * I * D), dn = (size_t)(E * D * I);
    uint8_t *guc = malloc(gu / 2), *gus = malloc(gu / 32), *dnc = malloc(dn / 2), *dns = malloc(dn / 32);
    memset(guc, 0xee, gu / 2), memset(gus, 0xee, gu / 32), memset(dnc, 0xee, dn / 2), memset(dns, 0xee, dn / 32);
    EXPECT(kt_model_experts_are_mxfp4(&c, &w, 0) == 1);
    EXPECT(kt_model_experts_mxfp4(&c, &w, 0, guc, gus, dnc, dns) == 0);
    int same = 1;
    for (long e = 0; e < E; e++) {
        const st_out *w1 = &t[e * 6], *w3 = &t[e * 6 + 2], *w2 = &t[e * 6 + 4];
        size_t cb = (size_t)(I * D / 2), sb = (size_t)(I * D / 32);
        same &= !memcmp(guc + (size_t)e * 2 * cb, w1->data, cb) && !memcmp(guc + (size_t)e * 2 * cb + cb, w3->data, cb);
        same &=
            !memcmp(gus + (size_t)e * 2 * sb, w1[1].data, sb) && !memcmp(gus + (size_t)e * 2 * sb + sb, w3[1].data, sb);
        same &= !memcmp(dnc + (size_t)e * cb, w2->data, cb) && !memcmp(dns + (size_t)e * sb, w2[1].data, sb);
    }
    EXPECT(same);
    /* the layout's element decoder reads expert 2's up row 5, k = 77 as the checkpoint's bytes say */
    uint8_t byte = t[2 * 6 + 2].data[5 * 64 + 38], s = t[2 * 6 + 3].data[5 * 4 + 2];
    EXPECT(kt_moe_mxfp4_value(guc + 2 * 2 * I * D / 2, gus + 2 * 2 * I * D / 32, D, I + 5, 77) ==
           e2m1[byte >> 4] * ldexpf(1.0f, s - 127));
    kt_st_close(&w);
    unlink(path);
    for (int i = 0; i < 24; i++) free(t[i].data);
    free(guc), free(gus), free(dnc), free(dns);
}

/* Writes codes (dtype cd, [n, cb]) and scales (dtype sd, [n, sk], byte fill) named blk.*, and
 * reads blk.weight as d ([n, k], kind); returns kt_model_weight's rc. */
static int read_malformed(const char *cd, long cb, const char *sname, const char *sd, long sk, uint8_t fill, long n,
                          long k, kt_weight_kind kind, char *path, size_t np) {
    tmp_path(path, np, "bad");
    st_out t[2] = {tensor("blk.weight", cd, n, cb, 1), tensor(sname, sd, n, sk, strcmp(sd, "F32") ? 1 : 4)};
    memset(t[0].data, 0x21, t[0].bytes);
    memset(t[1].data, fill, t[1].bytes);
    write_tensors(path, t, 2);
    free(t[0].data), free(t[1].data);
    kt_st_set w;
    if (kt_st_open_file(&w, path)) return unlink(path), -2;
    kt_model_tensor d = {
        .name = "blk.weight", .ndim = kind == KT_W_GEMM ? 2 : 1, .shape = {n, kind == KT_W_GEMM ? k : 0}, .kind = kind};
    kt_model_config c = {0};
    float *v;
    int32_t *iv;
    int rc = kt_model_weight(&c, &w, &d, &v, &iv);
    free(v), free(iv);
    kt_st_close(&w);
    unlink(path);
    return rc;
}

#define REFUSED(call, text) EXPECT((call) == -1 && strstr(kt_error(), path) && strstr(kt_error(), text))

KT_TEST(mxfp4_malformed_refused) {
    char path[128];
    EXPECT(read_malformed("I8", 32, "blk.scale", "F8_E8M0", 2, 127, 2, 64, KT_W_GEMM, path, sizeof path) == 0);
    EXPECT(read_malformed("U8", 32, "blk.weight_scale_inv", "U8", 2, 127, 2, 64, KT_W_GEMM, path, sizeof path) == 0);
    REFUSED(read_malformed("I8", 64, "blk.scale", "F8_E8M0", 2, 127, 2, 64, KT_W_GEMM, path, sizeof path),
            "tensor blk.weight: shape [2,64], the config needs [2,32]");
    REFUSED(read_malformed("I8", 32, "blk.other", "F8_E8M0", 2, 127, 2, 64, KT_W_GEMM, path, sizeof path),
            "tensor blk.weight: MXFP4 codes without their ue8m0 scales");
    REFUSED(read_malformed("I8", 32, "blk.scale", "F32", 2, 0, 2, 64, KT_W_GEMM, path, sizeof path),
            "tensor blk.scale: dtype F32, MXFP4 scales are F8_E8M0");
    REFUSED(read_malformed("I8", 32, "blk.scale", "F8_E8M0", 4, 127, 2, 64, KT_W_GEMM, path, sizeof path),
            "tensor blk.scale: shape [2,4], the config needs [2,2]");
    REFUSED(read_malformed("I8", 32, "blk.scale", "F8_E8M0", 2, 0xff, 2, 64, KT_W_GEMM, path, sizeof path),
            "tensor blk.scale: scale 0 is 0xff (NaN in ue8m0)");
    REFUSED(read_malformed("I8", 24, "blk.scale", "F8_E8M0", 1, 127, 2, 48, KT_W_GEMM, path, sizeof path),
            "tensor blk.weight: MXFP4 needs K (48) in blocks of 32");
    REFUSED(read_malformed("I8", 0, "blk.scale", "F8_E8M0", 0, 127, 2, 0, KT_W_PLAIN, path, sizeof path),
            "tensor blk.weight: I8 codes where kt expects a bf16/f32 tensor");
}

/* ||a - b|| / ||b|| */
static double rel_l2(const double *a, const double *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / den);
}

/* The tiny V4 of test_model.c with every expert and entry selected (no top-k can flip). */
static const char *tiny_v4 =
    "{\"model_type\":\"deepseek_v4\",\"vocab_size\":256,\"hidden_size\":128,\"num_hidden_layers\":3,"
    "\"num_attention_heads\":1,\"head_dim\":512,\"q_lora_rank\":128,\"o_groups\":1,\"o_lora_rank\":128,"
    "\"sliding_window\":8,\"index_n_heads\":2,\"index_head_dim\":128,\"index_topk\":8,\"n_routed_experts\":2,"
    "\"num_experts_per_tok\":2,\"n_shared_experts\":1,\"moe_intermediate_size\":128,\"partial_rotary_factor\":0.125,"
    "\"compress_rates\":{\"compressed_sparse_attention\":4,\"heavily_compressed_attention\":8},"
    "\"layer_types\":[\"sliding_attention\",\"compressed_sparse_attention\",\"heavily_compressed_attention\"],"
    "\"mlp_layer_types\":[\"hash_moe\",\"moe\",\"moe\"],\"hc_mult\":4,\"hc_sinkhorn_iters\":20}";

/* Writes the model's tensors into dir/model.safetensors: seeded f32 (norms near 1, projections
 * ~1/sqrt(k)), expert ids in range, and the routed experts as seeded MXFP4 (mxfp4 = 1) or as
 * those MXFP4 values in f32 (mxfp4 = 0): the same numbers either way. */
static void write_model(const kt_model_config *c, const char *dir, int mxfp4) {
    int n = kt_model_tensors(c, NULL, 0), m = 0;
    kt_model_tensor *list = malloc((size_t)n * sizeof *list);
    kt_model_tensors(c, list, n);
    st_out *t = malloc((size_t)(2 * n) * sizeof *t);
    uint64_t rng = 2024;
    for (int i = 0; i < n; i++) {
        const kt_model_tensor *d = &list[i];
        long k = d->ndim == 2 ? d->shape[1] : 1;
        if (d->kind == KT_W_INDEX) {
            t[m] = tensor(d->name, "I32", d->shape[0], d->shape[1], 4);
            for (long j = 0; j < d->shape[0] * k; j++)
                ((int32_t *)t[m].data)[j] = (int32_t)(kt_rng_next(&rng) % c->n_experts);
            m++;
        } else if (strstr(d->name, ".ffn.experts.")) {
            st_out codes, scales;
            mxfp4_pair(d->name, d->shape[0], k, -(int)round(log2(3 * sqrt((double)k))), &rng, &codes, &scales);
            if (mxfp4) {
                t[m++] = codes, t[m++] = scales;
                continue;
            }
            t[m] = tensor(d->name, "F32", d->shape[0], k, 4);
            for (long r = 0; r < d->shape[0]; r++)
                for (long j = 0; j < k; j++)
                    ((float *)t[m].data)[r * k + j] = kt_moe_mxfp4_value(codes.data, scales.data, k, r, j);
            m++;
            free(codes.data), free(scales.data);
        } else {
            t[m] = tensor(d->name, "F32", d->shape[0], d->ndim == 2 ? k : 0, 4);
            int is_norm = d->ndim == 1 && strstr(d->name, "weight");
            double amp = d->ndim == 1 ? 0.3 : 1.0 / sqrt((double)k);
            for (long j = 0; j < d->shape[0] * k; j++)
                ((float *)t[m].data)[j] = (is_norm ? 1.0f : 0.0f) + (float)amp * kt_rng_uniform(&rng);
            m++;
        }
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_tensors(path, t, m);
    for (int i = 0; i < m; i++) free(t[i].data);
    free(t), free(list);
}

/* Runs 20 steps of the reference on dir's weights; logits [20][vocab]. */
static int run_ref(const kt_model_config *c, const char *dir, kt_ref_mode mode, double *logits) {
    kt_st_set w;
    kt_model_ref *m = NULL;
    if (kt_st_open_dir(&w, dir)) return -1;
    int rc = kt_model_ref_open(c, &w, 7, mode, 1, 32, &m);
    uint64_t rng = 99;
    for (long t = 0; t < 20 && !rc; t++) {
        int32_t tok = (int32_t)(kt_rng_next(&rng) % c->vocab);
        rc = kt_model_ref_step(m, &tok, t, logits + t * c->vocab);
    }
    kt_model_ref_close(m);
    kt_st_close(&w);
    return rc;
}

KT_TEST(model_ref_mxfp4_experts) {
    kt_model_config c;
    EXPECT(kt_model_config_parse("config.json", tiny_v4, strlen(tiny_v4), &c) == 0);
    char a[] = "/tmp/kt_test_mx_XXXXXX", b[] = "/tmp/kt_test_bf_XXXXXX";
    EXPECT(mkdtemp(a) && mkdtemp(b));
    write_model(&c, a, 1);
    write_model(&c, b, 0);
    long n = 20 * c.vocab;
    double *ea = malloc((size_t)n * sizeof *ea), *eb = malloc((size_t)n * sizeof *eb);
    double *ka = malloc((size_t)n * sizeof *ka), *kb = malloc((size_t)n * sizeof *kb);
    for (long i = 0; i < n; i++) ea[i] = eb[i] = ka[i] = kb[i] = NAN;
    EXPECT(run_ref(&c, a, KT_REF_EXACT, ea) == 0 && run_ref(&c, b, KT_REF_EXACT, eb) == 0);
    EXPECT(run_ref(&c, a, KT_REF_KT, ka) == 0 && run_ref(&c, b, KT_REF_KT, kb) == 0);
    /* exact: MXFP4 decoded to the very numbers the f32 twin holds */
    EXPECT(!memcmp(ea, eb, (size_t)n * sizeof *ea));
    /* kt's formats: the MXFP4 experts stay as they are (moe_gemm reads them), the f32 twin's
     * become FP8 blocks, so the two differ; both stay near the exact math */
    double d_kt = rel_l2(ka, kb, n), d_a = rel_l2(ka, ea, n), d_b = rel_l2(kb, eb, n);
    printf("model_ref mxfp4: kt(mxfp4) vs kt(f32 twin) %.4f; kt vs exact %.4f (mxfp4), %.4f (twin)\n", d_kt, d_a, d_b);
    EXPECT(d_kt > 1e-4 && d_a < 0.3 && d_b < 0.3);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", a, b);
    EXPECT(system(cmd) == 0);
    free(ea), free(eb), free(ka), free(kb);
}

KT_TEST(fp8_weight_with_release_scale) {
    /* the V4 release names an FP8 weight's 128x128 block scales `scale`, stored as F8_E8M0:
     * [200, 256] e4m3 codes, scales [2, 2] = 2^-3, 2^0, 2^4, 2^-127 */
    char path[128];
    tmp_path(path, sizeof path, "fp8");
    st_out t[2] = {tensor("q.weight", "F8_E4M3", 200, 256, 1), tensor("q.scale", "F8_E8M0", 2, 2, 1)};
    uint64_t rng = 3;
    for (size_t i = 0; i < t[0].bytes; i++) t[0].data[i] = (uint8_t)(kt_rng_next(&rng) & 0x7e) | (uint8_t)(i % 2 << 7);
    const uint8_t sc[4] = {124, 127, 131, 0};
    memcpy(t[1].data, sc, 4);
    write_tensors(path, t, 2);
    kt_st_set w;
    EXPECT(kt_st_open_file(&w, path) == 0);
    kt_model_tensor d = {.name = "q.weight", .ndim = 2, .shape = {200, 256}, .kind = KT_W_GEMM};
    kt_model_config c = {0};
    float *v;
    int32_t *iv;
    EXPECT(kt_model_mxfp4(&w, &d, NULL, NULL) == 0 && kt_model_weight(&c, &w, &d, &v, &iv) == 0);
    long bad = 0;
    for (long r = 0; r < 200; r++)
        for (long k = 0; k < 256; k++)
            bad += v[r * 256 + k] !=
                   kt_e4m3_to_float(t[0].data[r * 256 + k]) * ldexpf(1.0f, sc[(r / 128) * 2 + k / 128] - 127);
    EXPECT(bad == 0);
    free(v);
    kt_st_close(&w);
    unlink(path);
    free(t[0].data), free(t[1].data);
}
