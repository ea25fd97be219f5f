/* test_mla.c — the sparse MLA decode family without a GPU: FlashMLA's cache byte layouts
 * (a page built by hand, decoded byte by byte; the quantiser's bytes), the seeded inputs'
 * holes, empty and short requests, and the float64 reference's special rows. */
#include "../../kernels/common/mla_layout.h"
#include "../../kernels/mla_decode.h"
#include "../../runtime/kt.h"
#include "../../tuner/tuner.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A V4 page and a V32 page written byte by byte at FlashMLA's offsets decode to the values
 * put there, and the offsets are the documented ones. */
KT_TEST(mla_layout_decodes_a_hand_built_page) {
    EXPECT(KT_MLA_V4_PAGE_BYTES == 37440 && KT_MLA_V32_PAGE_BYTES == 64 * 656);
    EXPECT(kt_mla_token_bytes(KT_MLA_V4) == 584 && kt_mla_token_bytes(KT_MLA_V32) == 656);
    static uint8_t page[2 * 37440];
    memset(page, 0, sizeof page);
    /* V4, token 69 = page 1, offset 5: code 0x38 (1.0) at dim 70 (tile 1), scale byte 129
     * (4.0) for tile 1 in the footer, rope[2] = bf16 0x3fc0 (1.5), pad byte after 7 scales */
    uint8_t *p1 = page + 37440;
    p1[5 * 576 + 70] = 0x38;
    p1[5 * 576 + 70 + 1] = 0xb8; /* -1.0 at dim 71 */
    p1[64 * 576 + 5 * 8 + 1] = 129;
    p1[5 * 576 + 448 + 2 * 2] = 0xc0, p1[5 * 576 + 448 + 2 * 2 + 1] = 0x3f;
    EXPECT(kt_mla_value(KT_MLA_V4, page, 69, 70) == 4.0);
    EXPECT(kt_mla_value(KT_MLA_V4, page, 69, 71) == -4.0);
    EXPECT(kt_mla_value(KT_MLA_V4, page, 69, 448 + 2) == 1.5);
    EXPECT(kt_mla_value(KT_MLA_V4, page, 69, 0) == 0.0);
    EXPECT(kt_mla_scales_at(KT_MLA_V4, 69) == 37440 + 64 * 576 + 40);
    /* V32, token 3 of page 0: code 0x01 (the smallest subnormal, 2^-9) at dim 130 (tile 1),
     * f32 scale 0.5 in the token's second scale slot, rope[63] = bf16 0xc000 (-2) */
    static uint8_t v32[64 * 656];
    memset(v32, 0, sizeof v32);
    v32[3 * 656 + 130] = 0x01;
    float half = 0.5f;
    memcpy(v32 + 3 * 656 + 512 + 4, &half, 4);
    v32[3 * 656 + 528 + 126] = 0x00, v32[3 * 656 + 528 + 127] = 0xc0;
    EXPECT(kt_mla_value(KT_MLA_V32, v32, 3, 130) == ldexp(1.0, -10));
    EXPECT(kt_mla_value(KT_MLA_V32, v32, 3, 575) == -2.0);
    EXPECT(kt_mla_value(KT_MLA_V32, v32, 3, 129) == 0.0);
}

/* The quantiser writes FlashMLA's bytes: the ue8m0 scale of amax / 448 rounded up to a power
 * of two, the codes of x / scale, the rope's bf16 little-endian, V4's pad byte 0. */
KT_TEST(mla_quantiser_writes_flashmla_bytes) {
    float x[576];
    for (int i = 0; i < 576; i++) x[i] = 0.5f;
    x[3] = 3.5f;       /* tile 0: amax 3.5 -> 3.5 / 448 = 2^-7 exactly: scale 2^-7 */
    x[64 + 9] = -5.0f; /* V4 tile 1: 5 / 448 -> 2^-6 (rounded up) */
    x[448] = 1.5f;
    static uint8_t page[37440];
    memset(page, 0xaa, sizeof page);
    kt_mla_quantise_token(KT_MLA_V4, page, 2, x);
    EXPECT(page[2 * 576 + 3] == 0x7e);                                  /* 448 */
    EXPECT(page[2 * 576 + 0] == 0x68);                                  /* 0.5 / 2^-7 = 64 */
    EXPECT(page[2 * 576 + 64 + 9] == 0xfa);                             /* -5 / 2^-6 = -320 = -1.25 * 2^8 */
    EXPECT(page[2 * 576 + 64] == 0x60);                                 /* 0.5 / 2^-6 = 32 */
    EXPECT(page[64 * 576 + 2 * 8 + 0] == 120);                          /* 2^-7 */
    EXPECT(page[64 * 576 + 2 * 8 + 1] == 121);                          /* 2^-6 */
    EXPECT(page[64 * 576 + 2 * 8 + 2] == 118);                          /* tile 2: 0.5 / 448 -> 2^-9 */
    EXPECT(page[64 * 576 + 2 * 8 + 7] == 0);                            /* the pad */
    EXPECT(page[2 * 576 + 448] == 0xc0 && page[2 * 576 + 449] == 0x3f); /* 1.5 */
    EXPECT(page[3 * 576] == 0xaa);                                      /* the next token untouched */
    static uint8_t v32[64 * 656];
    kt_mla_quantise_token(KT_MLA_V32, v32, 1, x);
    float s0, s1;
    memcpy(&s0, v32 + 656 + 512, 4);
    memcpy(&s1, v32 + 656 + 516, 4);
    EXPECT(s0 == 0x1p-6f && s1 == 0x1p-9f); /* V32 tile 0 holds the -5: 2^-6; tile 1 only 0.5: 2^-9 */
    EXPECT(v32[656 + 3] == 0x76 && v32[656 + 528] == 0x00 && v32[656 + 529] == 0x3f); /* rope[0] = 0.5 */
    for (int d = 0; d < 576; d++) EXPECT(fabs(kt_mla_value(KT_MLA_V32, v32, 1, d) - x[d]) <= fabs(x[d]) / 16);
}

/* The reference of seeded inputs: request 2 (no slots) gets out 0 and lse +inf, full
 * requests a finite lse, and out rows are convex combinations (|out| <= max |v|). */
KT_TEST(mla_reference_special_rows) {
    const kt_family *f = kt_family_find("mla_decode");
    EXPECT(f != NULL);
    if (!f) return;
    kt_problem p;
    EXPECT(kt_parse_shape(f, "LAYOUT=V4,HQ=16,TOPK=40,SQ=2", &p) == 0);
    p.m = 7;
    char why[256];
    EXPECT(f->check_problem(&p, why, sizeof why) == 0);
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    void *host[KT_MAX_TENSORS] = {0};
    size_t n_ref = 0;
    for (int i = 0; i < n; i++) {
        host[i] = t[i].role == KT_INPUT ? calloc(t[i].count, kt_dtype_size(t[i].dtype)) : NULL;
        if (t[i].role == KT_OUTPUT) n_ref += t[i].count;
    }
    double *ref = calloc(n_ref, sizeof *ref);
    f->fill(&p, 42, host);
    f->reference(&p, host, ref);
    long HQ = 16, SQ = 2, out_n = 7 * SQ * HQ * 512;
    const double *lse = ref + out_n;
    for (long h = 0; h < HQ; h++) {
        EXPECT(isinf(lse[(2 * HQ + h) * SQ + 0]) && lse[(2 * HQ + h) * SQ + 0] > 0); /* request 2 */
        EXPECT(isinf(lse[(2 * HQ + h) * SQ + 1]));
        EXPECT(isinf(lse[(6 * HQ + h) * SQ + 1])); /* request 6's second query: all holes */
        EXPECT(isfinite(lse[(6 * HQ + h) * SQ + 0]));
        EXPECT(isfinite(lse[(0 * HQ + h) * SQ + 0]));
    }
    double worst = 0, nonzero = 0;
    for (long d = 0; d < 512; d++) {
        worst = fmax(worst, fabs(ref[(2 * SQ * HQ) * 512 + d]));
        nonzero += fabs(ref[d]);
    }
    EXPECT(worst == 0 && nonzero > 0);
    for (int i = 0; i < n; i++) free(host[i]);
    free(ref);
    /* bad keys: one clear reason */
    kt_problem bad = p;
    bad.dim[0] = 5;
    EXPECT(f->check_problem(&bad, why, sizeof why) == -1 && strstr(why, "LAYOUT"));
    bad = p, bad.dim[1] = 24;
    EXPECT(f->check_problem(&bad, why, sizeof why) == -1 && strstr(why, "HQ"));
    bad = p, bad.dim[2] = 4096;
    EXPECT(f->check_problem(&bad, why, sizeof why) == -1 && strstr(why, "TOPK"));
}

/* The per-problem default on 132 SMs (the H200): V4 HQ 16 B = 64 takes two CTAs of 256 threads an
 * SM (WPM 8, SPLIT 160: 256 CTAs) where three of 128 (SPLIT 128: 320 CTAs, 56 SMs with three) left
 * the busiest SM more slots; B = 32 (a tie: 2 x 96 against 3 x 64), B = 1 and V3.2 HQ 16 B = 64
 * (already two an SM) keep theirs; V3.2 HQ 128 B = 1 (128 CTAs of 4 chunks) takes 16 warps a CTA,
 * the B = 1 grids of one chunk a CTA keep 8. */
KT_TEST(mla_default_fills_two_ctas_an_sm) {
    const kt_family *f = kt_family_find("mla_decode");
    struct {
        const char *shape;
        long m;
        const char *want;
    } cases[] = {
        {"LAYOUT=V4,HQ=16,TOPK=512,SQ=1", 64, "HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V4,HQ=64,TOPK=512,SQ=1", 16, "HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V4,HQ=16,TOPK=512,SQ=1", 32, "HPC=16,CHUNK=32,SPLIT=64,STAGES=2,PATH=2,WPM=4,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V4,HQ=16,TOPK=512,SQ=1", 1, "HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V32,HQ=16,TOPK=2048,SQ=1", 64, "HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V4,HQ=64,TOPK=512,SQ=1", 64, "HPC=16,CHUNK=64,SPLIT=1024,STAGES=2,PATH=2,WPM=8,FUSE=1,MPW=1,PART=0"},
        {"LAYOUT=V32,HQ=128,TOPK=2048,SQ=1", 1, "HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=16,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V32,HQ=16,TOPK=2048,SQ=1", 1, "HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,FUSE=0,MPW=1,PART=1"},
        {"LAYOUT=V4,HQ=64,TOPK=512,SQ=1", 1, "HPC=16,CHUNK=32,SPLIT=32,STAGES=2,PATH=2,WPM=8,FUSE=0,MPW=1,PART=1"},
    };
    for (int i = 0; i < 9; i++) {
        kt_problem p;
        EXPECT(kt_parse_shape(f, cases[i].shape, &p) == 0);
        p.m = cases[i].m;
        kt_config c = f->default_config;
        f->default_for(&p, 132, &c);
        char got[256], why[256];
        kt_format_config(f, &c, got, sizeof got);
        if (strcmp(got, cases[i].want))
            fprintf(stderr, "%s B=%ld: %s, want %s\n", cases[i].shape, p.m, got, cases[i].want);
        EXPECT(!strcmp(got, cases[i].want));
        EXPECT(f->check_config(&c, 120, why, sizeof why) == 0 && f->config_fits(&c, &p));
    }
}

/* WPM 16 (512 threads, 16 heads a CTA: q . k's slices over 4 token groups of 8, p . v 32 dims a warp)
 * is taken at HPC 16 and CHUNK 32 or 64 only, and 512 threads only there. */
KT_TEST(mla_wpm16_config_rules) {
    const kt_family *f = kt_family_find("mla_decode");
    char why[256];
    kt_config c;
    const char *ok[] = {"HPC=16,CHUNK=32,SPLIT=32,PATH=2,WPM=16,MPW=1",
                        "HPC=16,CHUNK=64,SPLIT=1024,PATH=2,WPM=16,FUSE=1", "HPC=16,CHUNK=32,SPLIT=32,PATH=0,WPM=16"};
    const char *refused[] = {"HPC=32,CHUNK=32,SPLIT=32,PATH=2,WPM=16,MPW=1", "HPC=16,CHUNK=16,SPLIT=32,PATH=2,WPM=16",
                             "HPC=32,CHUNK=32,SPLIT=32,PATH=2,WPM=16,MPW=2", "HPC=64,CHUNK=32,SPLIT=32,PATH=2,WPM=8"};
    for (int i = 0; i < 3; i++) {
        EXPECT(kt_parse_config(f, ok[i], &c) == 0);
        if (f->check_config(&c, 120, why, sizeof why)) fprintf(stderr, "%s: %s\n", ok[i], why);
        EXPECT(f->check_config(&c, 120, why, sizeof why) == 0 && f->check_config(&c, 90, why, sizeof why) == 0);
    }
    for (int i = 0; i < 4; i++) {
        EXPECT(kt_parse_config(f, refused[i], &c) == 0);
        EXPECT(f->check_config(&c, 120, why, sizeof why) == -1);
    }
}

/* PART (the partial sums' element): 0 (f32) in default_config, 1 wherever default_for serves a launch
 * with partials (mla_default_fills_two_ctas_an_sm; the direct write keeps 0); PART 1's
 * bf16 sums take half the bytes, their (m, l) pairs right after them, inside the buffer the problem
 * declares (sized for PART 0); a fused launch of one split (the direct write: no partials) is not
 * timed with PART 1; the fused merge of many splits (FUSE 1 / 2) is. */
KT_TEST(mla_part_layout_and_rules) {
    const kt_family *f = kt_family_find("mla_decode");
    kt_config c;
    kt_problem p;
    EXPECT(kt_parse_config(f, "HPC=16", &c) == 0 && c.v[8] == 0 && !strcmp(f->params[8].name, "PART"));
    EXPECT(kt_mla_ml_at(16, 20, 1) * 2 == kt_mla_ml_at(16, 20, 0) && kt_mla_ml_at(16, 20, 0) == 16L * 20 * 512 * 4);
    EXPECT(kt_mla_part_bytes(16, 20, 1) == 16L * 20 * (512 * 2 + 8) && kt_mla_ml_at(3, 5, 1) % 8 == 0);
    EXPECT(kt_parse_shape(f, "LAYOUT=V4,HQ=16,TOPK=512,SQ=1", &p) == 0);
    p.m = 1;
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    EXPECT(n == 12 && !strcmp(t[10].name, "partials"));
    EXPECT(t[10].count * 4 == (size_t)kt_mla_part_bytes(16, 20, 0)); /* B = 1: 20 splits at most */
    EXPECT(kt_parse_config(f, "HPC=16,CHUNK=32,SPLIT=1024,PATH=2,WPM=8,FUSE=1,PART=1", &c) == 0);
    EXPECT(f->hopeless(&c, &p) == 1);
    c.v[8] = 0;
    EXPECT(f->hopeless(&c, &p) == 0);
    EXPECT(kt_parse_config(f, "HPC=16,CHUNK=32,SPLIT=32,PATH=2,WPM=8,FUSE=1,PART=1", &c) == 0);
    EXPECT(f->hopeless(&c, &p) == 0);
    char why[256];
    c.v[6] = 2; /* the fused merge of bf16 partials (FUSE 2) at B = 1: in the space on sm_90 */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == 0 && f->hopeless(&c, &p) == 0 && f->config_fits(&c, &p));
}

/* The sm_120a path (PATH=1) compiles and its SASS holds the block-scaled e4m3 mma
 * (QMMA.SF ... E4M3.E4M3.E8), with no spills; the portable builds for sm_120 (PATH 0, 2, 3)
 * have none of it and no spills either; PATH=1 is refused on sm_120 and sm_90 and on V3.2's f32 scales (two
 * mla_decode builds: make test-all). */
KT_TEST_SLOW(mla_sm120a_path_has_block_scaled_mma) {
    const kt_family *f = kt_family_find("mla_decode");
    char tool[512] = "", why[256];
    FILE *p = popen("bash tools/cuobjdump.sh", "r");
    if (p) {
        if (!fgets(tool, sizeof tool, p)) tool[0] = 0;
        pclose(p);
    }
    tool[strcspn(tool, "\n")] = 0;
    if (!tool[0]) fprintf(stderr, "no cuobjdump (tools/cuobjdump.sh): pip3 install nvidia-cuda-cuobjdump\n");
    EXPECT(tool[0] != 0);
    kt_config c;
    EXPECT(kt_parse_config(f, "PATH=1", &c) == 0);
    EXPECT(f->check_config(&c, 120, why, sizeof why) == -1 && strstr(why, "sm_120a"));
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1);
    EXPECT(f->check_config(&c, 1201, why, sizeof why) == 0);
    EXPECT(kt_parse_config(f, "PATH=2,STAGES=1", &c) == 0); /* PATH 2 reads the chunk from the ring */
    EXPECT(f->check_config(&c, 90, why, sizeof why) == -1 && strstr(why, "STAGES"));
    EXPECT(kt_parse_config(f, "PATH=1", &c) == 0);
    kt_problem v32, v4;
    EXPECT(kt_parse_shape(f, "LAYOUT=V32,HQ=16,TOPK=2048,SQ=1", &v32) == 0 &&
           kt_parse_shape(f, "LAYOUT=V4,HQ=16,TOPK=512,SQ=1", &v4) == 0);
    v32.m = v4.m = 1;
    EXPECT(!f->config_fits(&c, &v32) && f->config_fits(&c, &v4));
    const char *want[2] = {"QMMA.SF.16832.F32.E4M3.E4M3.E8", NULL};
    for (int path = 3; path >= 0 && tool[0]; path--) {
        const char *configs[] = {"PATH=0", "PATH=1", "PATH=2", "PATH=3"};
        EXPECT(kt_parse_config(f, configs[path], &c) == 0);
        kt_cubin cubin;
        int arch = path == 1 ? 1201 : 120;
        EXPECT(kt_compile(f, &c, arch, &cubin) == 0);
        EXPECT(cubin.report.spill_bytes == 0);
        char file[] = "/tmp/kt_mla_sass_XXXXXX", cmd[1024], line[512];
        int fd = mkstemp(file);
        EXPECT(fd >= 0 && write(fd, cubin.image, cubin.size) == (ssize_t)cubin.size);
        close(fd);
        snprintf(cmd, sizeof cmd, "'%s' -sass '%s' | grep -c 'QMMA.SF'", tool, file);
        long qmma = -1;
        if ((p = popen(cmd, "r"))) {
            if (fgets(line, sizeof line, p)) qmma = atol(line);
            pclose(p);
        }
        snprintf(cmd, sizeof cmd, "'%s' -sass '%s' | grep -c '%s'", tool, file,
                 path == 1 ? want[0] : "HMMA.16816.F32.BF16");
        long hits = -1;
        if ((p = popen(cmd, "r"))) {
            if (fgets(line, sizeof line, p)) hits = atol(line);
            pclose(p);
        }
        if (path == 1)
            EXPECT(qmma > 0 && hits > 0); /* the split kernel's q . k on the block-scaled mma */
        else
            EXPECT(qmma == 0 && hits > 0); /* the portable builds (PATH 0, 2, 3): bf16 (and f16) mma only */
        unlink(file);
        kt_cubin_free(&cubin);
    }
}
