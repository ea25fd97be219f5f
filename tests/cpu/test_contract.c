/* test_contract.c — CPU tests of the family contract (runtime/kt.h): per-output compares
 * (REL_L2 with infinities, EXACT, SET) and per-dtype poison by the rule the GPU check runs
 * too (kernels/common/kt_check.h), key fields with categories, the family's batch ladder
 * and work, the per-arch limits, the include-following source hash, and the probe family's
 * tensors, fill and reference checked on the host. */
#include "../../kernels/common/kt_arch.h"
#include "../../kernels/common/probe_layout.h"
#include "../../tuner/tuner.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kt_check_sums check_desc(const kt_tensor_desc *t, const void *out, const double *ref) {
    kt_check_sums s;
    kt_check_host(t, out, ref, &s);
    return s;
}

/* An i32 output the kernel left (partly) unwritten fails: its poison is INT32_MIN, which no
 * kernel may write, while -1 (the 0xff bytes of the float poison) is a legal value. */
KT_TEST(check_i32_unwritten_fails) {
    const double ref[4] = {3, -1, 7, 0};
    int32_t out[4];
    kt_poison_fill(KT_I32, out, 4);
    EXPECT(kt_is_poison(KT_I32, out, 0) && out[3] == INT32_MIN);
    out[0] = 3;
    out[1] = -1;
    out[3] = 0; /* out[2] never written */
    kt_tensor_desc exact = {"ids", KT_I32, 4, KT_OUTPUT, KT_CMP_EXACT};
    kt_check_sums s = check_desc(&exact, out, ref);
    EXPECT(s.bad == 1 && s.unwritten == 1 && s.bad_rank == 2);
    kt_tensor_desc rel = {"ids", KT_I32, 4, KT_OUTPUT};
    s = check_desc(&rel, out, ref);
    EXPECT(s.bad == 1 && s.unwritten == 1);
    out[2] = 7;
    s = check_desc(&exact, out, ref);
    EXPECT(s.bad == 0 && s.unwritten == 0 && s.diff2 == 0);
    out[2] = 8; /* EXACT: any difference fails */
    s = check_desc(&exact, out, ref);
    EXPECT(s.bad == 1 && s.unwritten == 0 && s.bad_rank == 2);
}

/* A reference +inf (the lse of a row with no valid slot) is matched by +inf and nothing
 * else; a finite reference replaced by an infinity fails; REL_L2 sums only finite pairs. */
KT_TEST(check_infinities_compare_as_values) {
    const double ref[3] = {INFINITY, 1.0, -2.0};
    kt_tensor_desc t = {"lse", KT_F32, 3, KT_OUTPUT};
    float out[3] = {INFINITY, 1.0f, -2.0f};
    kt_check_sums s = check_desc(&t, out, ref);
    EXPECT(s.bad == 0 && s.diff2 == 0 && s.ref2 == 5.0);
    const float finite[] = {0.0f, 1.0f, -1.0f, 3.4e38f, -3.4e38f, 1e-30f};
    for (size_t i = 0; i < sizeof finite / sizeof *finite; i++) {
        out[0] = finite[i];
        s = check_desc(&t, out, ref);
        EXPECT(s.bad == 1 && s.bad_rank == 3 && s.unwritten == 0);
    }
    out[0] = -INFINITY;
    EXPECT(check_desc(&t, out, ref).bad == 1);
    out[0] = INFINITY;
    out[2] = -INFINITY; /* finite -2 replaced by -inf */
    s = check_desc(&t, out, ref);
    EXPECT(s.bad == 1 && s.bad_rank == 1);
    out[2] = INFINITY;
    EXPECT(check_desc(&t, out, ref).bad == 1);
    /* bf16 infinities too */
    const uint16_t bf[3] = {0x7f80, kt_float_to_bf16(1.0f), 0xff80};
    kt_tensor_desc tb = {"lse", KT_BF16, 3, KT_OUTPUT};
    s = check_desc(&tb, bf, ref);
    EXPECT(s.bad == 1 && s.bad_rank == 1);
}

/* SET rows compare as multisets: a permutation passes, a changed element or a duplicate in
 * place of another fails, and only that row. */
KT_TEST(check_set_rows_as_multisets) {
    const double ref[8] = {5, 1, 9, -1, 2, 4, 6, 8};
    kt_tensor_desc t = {"ids", KT_I32, 8, KT_OUTPUT, KT_CMP_SET, 0, 4};
    int32_t out[8] = {-1, 9, 5, 1, 8, 6, 4, 2};
    kt_check_sums s = check_desc(&t, out, ref);
    EXPECT(s.bad == 0 && s.unwritten == 0);
    out[5] = 7;
    s = check_desc(&t, out, ref);
    EXPECT(s.bad == 1 && s.bad_rank == 4);
    out[5] = 6;
    out[1] = 5; /* {-1, 5, 5, 1} against {5, 1, 9, -1} */
    s = check_desc(&t, out, ref);
    EXPECT(s.bad == 1 && s.bad_rank == 8);
    out[1] = KT_POISON_I32;
    s = check_desc(&t, out, ref);
    EXPECT(s.bad == 1 && s.unwritten == 1);
    /* the same rows compared EXACT fail where the order differs */
    out[1] = 9;
    kt_tensor_desc exact = {"ids", KT_I32, 8, KT_OUTPUT, KT_CMP_EXACT};
    EXPECT(check_desc(&exact, out, ref).bad == 8);
}

KT_TEST(shape_text_with_categories) {
    const kt_family *f = kt_family_find("probe");
    EXPECT(f != NULL);
    if (!f) return;
    kt_problem p = {0};
    char s[128];
    EXPECT(kt_parse_shape(f, "LAYOUT=V4,N=4096", &p) == 0 && p.dim[0] == KT_PROBE_V4 && p.dim[1] == 4096);
    EXPECT(kt_parse_shape(f, "N=512,LAYOUT=V3", &p) == 0 && p.dim[0] == KT_PROBE_V3 && p.dim[1] == 512);
    kt_format_shape(f, &p, s, sizeof s);
    EXPECT(!strcmp(s, "LAYOUT=V3,N=512"));
    EXPECT(kt_parse_shape(f, "LAYOUT=V5,N=512", &p) < 0 && strstr(kt_error(), "LAYOUT is one of V3,V4, not 'V5'"));
    EXPECT(kt_parse_shape(f, "LAYOUT=1,N=512", &p) < 0);
    EXPECT(kt_parse_shape(f, "N=512", &p) < 0 && strstr(kt_error(), "LAYOUT missing"));
    EXPECT(kt_parse_shape(f, "LAYOUT=V4,N=0", &p) < 0 && strstr(kt_error(), "N must be positive"));
    long v;
    EXPECT(kt_parse_size("123", 3, &v) == 0 && v == 123);
    EXPECT(kt_parse_size("12x", 3, &v) < 0 && kt_parse_size("-1", 2, &v) < 0 && kt_parse_size("", 0, &v) < 0);
}

KT_TEST(family_batch_ladder_and_work) {
    const kt_family *probe = kt_family_find("probe"), *gemm = kt_family_find("fp8_gemm");
    EXPECT(probe && gemm);
    if (!probe || !gemm) return;
    EXPECT(kt_family_bucket(probe, 1) == 1 && kt_family_bucket(probe, 2) == 4 && kt_family_bucket(probe, 17) == 64);
    EXPECT(kt_family_bucket(probe, 4096) == 4096 && kt_family_bucket(probe, 5000) == 8192);
    EXPECT(kt_family_bucket(gemm, 17) == 24 && kt_family_bucket(NULL, 17) == 24);
    kt_problem p = {.n_dims = 2, .dim = {1536, 4096}, .m = 16};
    EXPECT(kt_family_work(gemm, &p) == 1536.0 * 4096 * 16); /* multiply-adds, as before */
    kt_problem q = {.n_dims = 2, .dim = {KT_PROBE_V4, 4096}, .m = 16};
    EXPECT(kt_family_work(probe, &q) == 16.0 * KT_PROBE_SLOTS);
}

KT_TEST(arch_limits_table) {
    EXPECT(kt_arch_limits_of(120).smem_per_block == 99 * 1024 && kt_arch_limits_of(90).smem_per_block == 227 * 1024);
    EXPECT(kt_arch_limits_of(1201).block_scaled_mma && !kt_arch_limits_of(120).block_scaled_mma &&
           !kt_arch_limits_of(90).block_scaled_mma);
    EXPECT(kt_arch_limits_of(90).griddepcontrol && !kt_arch_limits_of(89).griddepcontrol);
    EXPECT(kt_arch_limits_of(12345).smem_per_block == 99 * 1024); /* unknown: held to sm_120 */
}

/* A copy of the embedded files with file `name`'s text replaced (the table is malloc'd). */
static kt_source_file *sources_touching(const char *name, const char *text) {
    int n = 0;
    while (kt_sources()[n].name) n++;
    kt_source_file *files = malloc(sizeof *files * (size_t)(n + 1));
    if (!files) return NULL;
    memcpy(files, kt_sources(), sizeof *files * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        if (!strcmp(files[i].name, name)) {
            files[i].text = text;
            files[i].len = strlen(text);
        }
    return files;
}

/* A source's hash covers the files it includes, transitively, and no others: touching the
 * probe family's header changes probe's hash and leaves the GEMM families' alone; touching
 * the GEMM kernel header changes both GEMM families' and not probe's. */
KT_TEST(source_hash_follows_includes) {
    const char *gemm = "fp8_gemm.cu", *fused = "quant_fp8_gemm.cu", *probe = "probe.cu";
    kt_source_file *same = sources_touching("none", "");
    kt_source_file *probe_h = sources_touching("probe_layout.h", "#define TOUCHED 1\n");
    kt_source_file *gemm_h = sources_touching("kt_device.cuh", "// touched\n");
    EXPECT(same && probe_h && gemm_h);
    if (same && probe_h && gemm_h) {
        EXPECT(kt_source_hash_in(same, gemm) == kt_source_hash(gemm));
        EXPECT(kt_source_hash_in(probe_h, gemm) == kt_source_hash(gemm));
        EXPECT(kt_source_hash_in(probe_h, fused) == kt_source_hash(fused));
        EXPECT(kt_source_hash_in(probe_h, probe) != kt_source_hash(probe));
        EXPECT(kt_source_hash_in(gemm_h, gemm) != kt_source_hash(gemm));
        EXPECT(kt_source_hash_in(gemm_h, fused) != kt_source_hash(fused));
        EXPECT(kt_source_hash_in(gemm_h, probe) == kt_source_hash(probe));
        EXPECT(kt_source_hash(gemm) != kt_source_hash(fused));
    }
    free(same);
    free(probe_h);
    free(gemm_h);
}

/* The probe family on the host: its reference has +inf rows and -1 slots; outputs made from
 * the reference (ids rows reversed, as REVERSE=1 writes them) pass every output's compare,
 * and each planted kernel bug fails its output. */
KT_TEST(probe_family_outputs_checked_on_the_host) {
    const kt_family *f = kt_family_find("probe");
    EXPECT(f != NULL);
    if (!f) return;
    kt_problem p;
    EXPECT(kt_parse_shape(f, "LAYOUT=V4,N=300", &p) == 0);
    p.m = 23;
    char why[256];
    EXPECT(f->check_problem(&p, why, sizeof why) == 0);
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    EXPECT(n == 4 && t[2].role == KT_OUTPUT && t[3].compare == KT_CMP_SET && t[3].set_len == KT_PROBE_SLOTS);
    void *host[KT_MAX_TENSORS] = {0};
    size_t n_ref = 0;
    for (int i = 0; i < n; i++) {
        host[i] = malloc(t[i].count * kt_dtype_size(t[i].dtype));
        if (t[i].role == KT_OUTPUT) n_ref += t[i].count;
    }
    double *ref = malloc(sizeof *ref * n_ref);
    f->fill(&p, 99, host);
    f->reference(&p, host, ref);
    long B = p.m, infs = 0, unused = 0;
    float *lse = host[2];
    int32_t *ids = host[3];
    for (long b = 0; b < B; b++) {
        infs += isinf(ref[b]) && ref[b] > 0;
        lse[b] = (float)ref[b];
        for (int j = 0; j < KT_PROBE_SLOTS; j++) {
            ids[b * KT_PROBE_SLOTS + j] = (int32_t)ref[B + b * KT_PROBE_SLOTS + KT_PROBE_SLOTS - 1 - j];
            unused += ids[b * KT_PROBE_SLOTS + j] == -1;
        }
    }
    EXPECT(infs >= 4 && unused > infs * KT_PROBE_SLOTS); /* rows 0, 5, 10, ... have no valid slot */
    EXPECT(check_desc(&t[2], lse, ref).bad == 0 && check_desc(&t[3], ids, ref + B).bad == 0);
    /* planted: an +inf row given a finite value; a row of ids left unwritten; a wrong index */
    lse[5] = 0.5f;
    EXPECT(check_desc(&t[2], lse, ref).bad == 1);
    lse[5] = INFINITY;
    kt_poison_fill(KT_I32, ids + 3 * KT_PROBE_SLOTS, KT_PROBE_SLOTS);
    kt_check_sums s = check_desc(&t[3], ids, ref + B);
    EXPECT(s.bad == 1 && s.unwritten == KT_PROBE_SLOTS);
    for (int j = 0; j < KT_PROBE_SLOTS; j++) ids[3 * KT_PROBE_SLOTS + j] = -1;
    EXPECT(check_desc(&t[3], ids, ref + B).bad == (ref[B + 3 * KT_PROBE_SLOTS] == -1 ? 0u : 1u));
    for (int i = 0; i < n; i++) free(host[i]);
    free(ref);
}

/* Every pipeline's stage tensors are the pipeline tensors its map names: the same dtype and
 * at least the size, a stage's input a pipeline input or intermediate (KT_TEMP), its output a
 * pipeline output or intermediate, its workspace a pipeline workspace; and each stage's family
 * is not itself a pipeline. */
KT_TEST(pipeline_stages_map_their_tensors) {
    int pipelines = 0;
    for (int fi = 0; fi < kt_family_count(); fi++) {
        const kt_family *f = kt_family_at(fi);
        if (!f->n_stages) continue;
        pipelines++;
        EXPECT(f->n_stages <= KT_MAX_STAGES && !f->source && !f->n_params);
        for (int t = 0; t < f->n_target_shapes; t++)
            for (long m = 1; m <= 256; m *= 16) {
                kt_problem p = {.n_dims = f->n_keys, .m = m};
                memcpy(p.dim, f->target_shapes[t], sizeof p.dim);
                kt_tensor_desc pt[KT_MAX_TENSORS], st[KT_MAX_TENSORS];
                int np = f->tensors(&p, pt);
                for (int s = 0; s < f->n_stages; s++) {
                    const kt_family *g = f->stages[s].family;
                    kt_problem sp;
                    kt_stage_problem(f, s, &p, &sp);
                    char why[256];
                    EXPECT(!g->n_stages && g->check_problem(&sp, why, sizeof why) == 0);
                    int ns = g->tensors(&sp, st);
                    for (int i = 0; i < ns; i++) {
                        int j = f->stages[s].tensor[i];
                        /* a stage may use the first elements of a larger pipeline buffer (a
                         * workspace sized for the largest stage, a placeholder it never reads) */
                        int role_ok = st[i].role == KT_SCRATCH ? pt[j].role == KT_SCRATCH
                                      : st[i].role == KT_TEMP  ? pt[j].role == KT_TEMP
                                                               : pt[j].role == KT_TEMP || pt[j].role == st[i].role;
                        int ok =
                            j >= 0 && j < np && pt[j].dtype == st[i].dtype && pt[j].count >= st[i].count && role_ok;
                        if (!ok) fprintf(stderr, "  %s stage %d (%s) tensor %s\n", f->name, s, g->name, st[i].name);
                        EXPECT(ok);
                    }
                }
            }
    }
    EXPECT(pipelines >= 1);
}

/* fp8_gemm names its baselines (their code is bench's: NULL hooks where it is not linked). */
KT_TEST(fp8_gemm_lists_its_baselines) {
    const kt_family *f = kt_family_find("fp8_gemm");
    EXPECT(f && f->baselines && f->baselines[0] && f->baselines[1] && !f->baselines[2]);
    if (!f || !f->baselines || !f->baselines[0] || !f->baselines[1]) return;
    EXPECT(!strcmp(f->baselines[0]->name, "cublaslt_fp8") && !strcmp(f->baselines[1]->name, "cublas_bf16"));
    EXPECT(f->mma == KT_MMA_E4M3 && !kt_family_find("act_quant")->baselines);
}
