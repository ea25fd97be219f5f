/* test_core.c — CPU tests of the pieces under the tuner: fp8/bf16 conversions, shape and
 * config parsing, space enumeration and constraints, JIT cache keys and the cache itself,
 * the host references, the CPU compare of outputs with a reference, and NVRTC compiles of
 * every family (and the check kernel) for sm_120, sm_120a and sm_90. */
#include "../../kernels/fp8_gemm.h"
#include "../../tuner/tuner.h"
#include "test.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

KT_TEST(e4m3_all_codes_round_trip) {
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        float v = kt_e4m3_to_float((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            bad += !isnan(v);
            continue;
        }
        bad += kt_float_to_e4m3(v) != c;
    }
    EXPECT(bad == 0);
    EXPECT(kt_e4m3_to_float(0x7e) == 448.0f);
    EXPECT(kt_e4m3_to_float(0x08) == ldexpf(1, -6)); /* smallest normal */
    EXPECT(kt_e4m3_to_float(0x01) == ldexpf(1, -9)); /* smallest subnormal */
    EXPECT(kt_e4m3_to_float(0x38) == 1.0f);
    EXPECT(kt_e4m3_to_float(0xb8) == -1.0f);
}

KT_TEST(e4m3_rounding_and_saturation) {
    EXPECT(kt_float_to_e4m3(1.0625f) == 0x38); /* tie between 1 and 1.125 -> even */
    EXPECT(kt_float_to_e4m3(1.1875f) == 0x3a); /* tie between 1.125 and 1.25 -> even */
    EXPECT(kt_float_to_e4m3(1.07f) == 0x39);
    EXPECT(kt_float_to_e4m3(1000.0f) == 0x7e); /* saturates to 448 */
    EXPECT(kt_float_to_e4m3(-1000.0f) == 0xfe);
    EXPECT(kt_float_to_e4m3(ldexpf(1, -10)) == 0x00);     /* tie between 0 and 2^-9 -> even 0 */
    EXPECT(kt_float_to_e4m3(ldexpf(3, -10)) == 0x02);     /* 1.5 subnormal steps -> even 2 */
    EXPECT(kt_float_to_e4m3(ldexpf(15.5f, -10)) == 0x08); /* rounds up into the first normal binade */
}

/* Between every two neighbouring codes: the midpoint goes to the even code, the floats
 * just either side of it to the nearer code (the whole rounding function, both signs). */
KT_TEST(e4m3_rounding_at_every_midpoint) {
    int bad = 0;
    for (int c = 0; c < 0x7e; c++) {
        float lo = kt_e4m3_to_float((uint8_t)c), hi = kt_e4m3_to_float((uint8_t)(c + 1)), mid = (lo + hi) / 2;
        int even = c % 2 ? c + 1 : c;
        for (int s = 0; s < 2; s++) {
            float k = s ? -1.0f : 1.0f;
            uint8_t sg = s ? 0x80 : 0;
            bad += kt_float_to_e4m3(k * mid) != (sg | even);
            bad += kt_float_to_e4m3(k * nextafterf(mid, 0)) != (sg | c);
            bad += kt_float_to_e4m3(k * nextafterf(mid, INFINITY)) != (sg | (c + 1));
        }
    }
    EXPECT(bad == 0);
    EXPECT(kt_float_to_e4m3(nextafterf(448.0f, 0)) == 0x7e && kt_float_to_e4m3(INFINITY) == 0x7e);
    EXPECT(kt_float_to_e4m3(-0.0f) == 0x80 && kt_float_to_e4m3(NAN) == 0x7f);
}

KT_TEST(bf16_conversion) {
    EXPECT(kt_bf16_to_float(kt_float_to_bf16(1.0f)) == 1.0f);
    EXPECT(kt_float_to_bf16(1.0f + ldexpf(1, -8)) == kt_float_to_bf16(1.0f)); /* tie -> even */
    EXPECT(kt_float_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82);
    EXPECT(isnan(kt_bf16_to_float(kt_float_to_bf16(NAN))));
}

KT_TEST(grow_doubles_when_full) {
    size_t cap = 0;
    int *a = kt_grow(NULL, &cap, 0, sizeof *a);
    EXPECT(a && cap == 64);
    EXPECT(kt_grow(a, &cap, 63, sizeof *a) == a && cap == 64);
    a = kt_grow(a, &cap, 64, sizeof *a);
    EXPECT(a && cap == 128);
    if (a) a[127] = 1;
    free(a);
}

KT_TEST(shape_and_config_parsing) {
    const kt_family *f = kt_family_find("fp8_gemm");
    EXPECT(f != NULL);
    kt_problem p = {0};
    EXPECT(kt_parse_shape(f, "N=1536,K=4096", &p) == 0 && p.dim[0] == 1536 && p.dim[1] == 4096);
    EXPECT(kt_parse_shape(f, "K=512,N=4096", &p) == 0 && p.dim[0] == 4096 && p.dim[1] == 512);
    EXPECT(kt_parse_shape(f, "N=1536", &p) < 0 && strstr(kt_error(), "K missing"));
    EXPECT(kt_parse_shape(f, "X=1,K=2", &p) < 0 && strstr(kt_error(), "unknown name 'X'"));
    EXPECT(kt_parse_shape(f, "N=abc,K=128", &p) < 0);
    EXPECT(kt_parse_shape(f, "N=0,K=128", &p) < 0);
    char why[256], s[128];
    EXPECT(kt_parse_shape(f, "N=100,K=128", &p) == 0);
    p.m = 1;
    EXPECT(f->check_problem(&p, why, sizeof why) < 0 && strstr(why, "multiples of 128"));
    kt_parse_shape(f, "N=1024,K=4096", &p);
    kt_format_shape(f, &p, s, sizeof s);
    EXPECT(!strcmp(s, "N=1024,K=4096"));
    kt_config c;
    EXPECT(kt_parse_config(f, "TILE_N=32,SPLIT_K=4", &c) == 0 && c.v[P_TILE_N] == 32 && c.v[P_SPLIT_K] == 4 &&
           c.v[P_TILE_M] == 16);
    kt_format_config(f, &c, s, sizeof s);
    kt_config back;
    EXPECT(kt_parse_config(f, s, &back) == 0 && !memcmp(&back, &c, sizeof c));
    EXPECT(kt_parse_config(f, "TILES=3", &c) < 0);
    long ms[8];
    EXPECT(kt_parse_int_list("1,16,64", ms, 8) == 3 && ms[2] == 64);
    EXPECT(kt_parse_int_list("1,,2", ms, 8) < 0);
    EXPECT(kt_parse_int_list("0", ms, 8) < 0);
    EXPECT(kt_family_find("nope") == NULL && strstr(kt_error(), "unknown family"));
}

/* Every integer kt reads goes through kt_parse_long: whole, in range, no wrap-around (a config
 * value of 2^32 + 64 was read as 64), no blanks; keys given twice and empty list elements are
 * errors; a problem whose sizes overflow or outgrow a GPU is refused with the reason. */
KT_TEST(strict_integer_parsing) {
    long v = -7;
    EXPECT(kt_parse_long("42", 0, 100, &v) == 0 && v == 42);
    EXPECT(kt_parse_long("-3", -5, 5, &v) == 0 && v == -3);
    const char *bad[] = {"", " 1", "1 ", "+1", "1x", "0x10", "99999999999999999999", "101", "--1", "1,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = -7;
        EXPECT(kt_parse_long(bad[i], 0, 100, &v) == -1 && v == -7);
    }
    EXPECT(kt_parse_long("4294967360", 0, KT_MAX_INT_VALUE, &v) == -1 && strstr(kt_error(), "out of range"));
    long ms[8];
    EXPECT(kt_parse_int_list("1,", ms, 8) == -1 && strstr(kt_error(), "empty element"));
    EXPECT(kt_parse_int_list(",1", ms, 8) == -1 && kt_parse_int_list("", ms, 8) == -1);
    EXPECT(kt_parse_int_list("1, 2", ms, 8) == -1 && kt_parse_int_list("4294967297", ms, 8) == -1);
    EXPECT(kt_parse_int_list("1,2,3", ms, 2) == -1 && kt_parse_int_list("7", ms, 1) == 1 && ms[0] == 7);
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_problem p = {0};
    kt_config c;
    int fixed[KT_MAX_PARAMS];
    EXPECT(kt_parse_shape(f, "N=1024,K=512,K=4096", &p) == -1 && strstr(kt_error(), "K given twice"));
    EXPECT(kt_parse_shape(f, "N=1024,K=4096,", &p) == -1);
    EXPECT(kt_parse_shape(f, "N= 1024,K=4096", &p) == -1 && kt_parse_shape(f, "N=1024 ,K=4096", &p) == -1);
    EXPECT(kt_parse_shape(f, "N=4294968320,K=4096", &p) == -1 && strstr(kt_error(), "from 0 to 2147483647"));
    EXPECT(kt_parse_config(f, "TILE_N=64,TILE_N=32", &c) == -1 && strstr(kt_error(), "TILE_N given twice"));
    EXPECT(kt_parse_config(f, "TILE_N=4294967360", &c) == -1);
    EXPECT(kt_parse_where(f, "DIRECT=1,DIRECT=0", &c, fixed) == -1 && strstr(kt_error(), "given twice"));
    EXPECT(kt_parse_where(f, "DIRECT=4294967297", &c, fixed) == -1);
    char why[256];
    EXPECT(kt_parse_shape(f, "N=2147483520,K=2147483520", &p) == 0);
    p.m = 1;
    EXPECT(kt_check_problem_size(f, &p, why, sizeof why) == -1 && strstr(why, "more than a GPU holds"));
    EXPECT(kt_parse_shape(f, "N=1024,K=4096", &p) == 0);
    p.m = 64;
    EXPECT(kt_check_problem_size(f, &p, why, sizeof why) == 0);
    const kt_family *st = kt_family_find("selftest");
    kt_problem big = {.n_dims = 1, .dim = {LONG_MAX / 2}, .m = 4};
    EXPECT(kt_check_problem_size(st, &big, why, sizeof why) == -1 && strstr(why, "overflows"));
}

KT_TEST(space_enumeration_and_constraints) {
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_config *list = NULL;
    int rejected = 0;
    int n = kt_space_enumerate(f, 120, NULL, NULL, &list, &rejected);
    long total = 1;
    for (int i = 0; i < f->n_params; i++) total *= f->params[i].n_values;
    EXPECT(n > 100 && rejected > 0 && n + rejected == total);
    char why[256];
    int all_valid = 1, has_default = 0;
    for (int i = 0; i < n; i++) {
        all_valid &= f->check_config(&list[i], 120, why, sizeof why) == 0;
        has_default |= !memcmp(&list[i], &f->default_config, sizeof(kt_config));
    }
    EXPECT(all_valid);
    EXPECT(has_default);
    kt_config big;
    kt_parse_config(f, "TILE_N=128,TILE_M=128,TILE_K=256,STAGES=6,WARPS=8", &big);
    EXPECT(f->check_config(&big, 120, why, sizeof why) < 0 && strstr(why, "shared memory"));
    kt_problem p = {.n_dims = 2, .dim = {4096, 512}, .m = 16};
    kt_config split;
    kt_parse_config(f, "TILE_K=256,SPLIT_K=3", &split);
    EXPECT(!f->config_fits(&split, &p)); /* 512/256 = 2 k-tiles < 3 splits */
    kt_parse_config(f, "TILE_K=256,SPLIT_K=2", &split);
    EXPECT(f->config_fits(&split, &p));
    p.m = 4096;
    EXPECT(f->config_fits(&split, &p)); /* cluster split-K needs no workspace at any M */
    EXPECT(f->hopeless(&split, &p));    /* ... but at 16384 tiles splitting is pointless */
    p.m = 1;
    kt_config wide;
    kt_parse_config(f, "TILE_M=64", &wide);
    EXPECT(f->config_fits(&wide, &p) && f->hopeless(&wide, &p)); /* 63 of 64 token rows padding */
    kt_config *fit = NULL;
    p.m = 16;
    int n_fit = kt_space_enumerate(f, 120, &p, NULL, &fit, NULL);
    EXPECT(n_fit > 0 && n_fit < n);
    /* Sampling is seeded: same seed, same pick; the default goes first. */
    kt_config *a = malloc(sizeof *a * n), *b = malloc(sizeof *b * n);
    memcpy(a, list, sizeof *a * n);
    memcpy(b, list, sizeof *b * n);
    EXPECT(kt_space_sample(f, a, n, 10, 7) == 10 && kt_space_sample(f, b, n, 10, 7) == 10);
    EXPECT(!memcmp(a, b, sizeof *a * 10));
    EXPECT(!memcmp(&a[0], &f->default_config, sizeof(kt_config)));
    free(a);
    free(b);
    free(fit);
    free(list);
}

KT_TEST(space_where_selects_a_part) {
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_config *all = NULL, *direct = NULL, *narrow = NULL, *none = NULL;
    int n_all = kt_space_enumerate(f, 120, NULL, NULL, &all, NULL);
    int n_direct = kt_space_enumerate(f, 120, NULL, "DIRECT=1", &direct, NULL);
    int n_narrow = kt_space_enumerate(f, 120, NULL, "DIRECT=1,TILE_M=16,SPLIT_K=2", &narrow, NULL);
    EXPECT(n_direct > 100 && n_direct < n_all && n_narrow > 0 && n_narrow < n_direct);
    int in_part = 1, count = 0;
    for (int i = 0; i < n_direct; i++) in_part &= direct[i].v[P_DIRECT] == 1;
    for (int i = 0; i < n_all; i++) count += all[i].v[P_DIRECT] == 1;
    EXPECT(in_part && count == n_direct); /* exactly the DIRECT=1 part of the full space */
    for (int i = 0; i < n_narrow; i++)
        in_part &= narrow[i].v[P_DIRECT] == 1 && narrow[i].v[P_TILE_M] == 16 && narrow[i].v[P_SPLIT_K] == 2;
    EXPECT(in_part);
    EXPECT(kt_space_enumerate(f, 120, NULL, "DIRECT=2", &none, NULL) == -1 &&
           strstr(kt_error(), "not one of its values"));
    EXPECT(kt_space_enumerate(f, 120, NULL, "TILE=64", &none, NULL) == -1 && strstr(kt_error(), "unknown name 'TILE'"));
    EXPECT(kt_space_enumerate(f, 120, NULL, "DIRECT", &none, NULL) == -1 && strstr(kt_error(), "NAME=VALUE"));
    /* parts separated by ';': their union, each config once, in the space's order; whole configs list themselves */
    kt_config *both = NULL, *listed = NULL;
    int n_m16 = kt_space_enumerate(f, 120, NULL, "TILE_M=16", &none, NULL);
    free(none);
    int n_both = kt_space_enumerate(f, 120, NULL, "DIRECT=1;TILE_M=16", &both, NULL), overlap = 0;
    for (int i = 0; i < n_all; i++) overlap += all[i].v[P_DIRECT] == 1 && all[i].v[P_TILE_M] == 16;
    EXPECT(n_both == n_direct + n_m16 - overlap && n_both < n_all);
    char a[256], b[256], two[600];
    kt_format_config(f, &all[3], a, sizeof a);
    kt_format_config(f, &all[1], b, sizeof b);
    snprintf(two, sizeof two, "%s;%s", a, b);
    EXPECT(kt_space_enumerate(f, 120, NULL, two, &listed, NULL) == 2 && !memcmp(&listed[0], &all[1], sizeof *listed) &&
           !memcmp(&listed[1], &all[3], sizeof *listed));
    EXPECT(kt_space_enumerate(f, 120, NULL, "DIRECT=1;TILE=64", &none, NULL) == -1 && strstr(kt_error(), "'TILE'"));
    free(both);
    free(listed);
    free(all);
    free(direct);
    free(narrow);
}

KT_TEST(direct_variant_constraints) {
    const kt_family *f = kt_family_find("fp8_gemm"), *q = kt_family_find("quant_fp8_gemm");
    char why[256];
    kt_config c;
    kt_parse_config(f, "TILE_N=64,TILE_M=16,WARPS=4,STAGES=4,DIRECT=1", &c);
    EXPECT(f->check_config(&c, 120, why, sizeof why) == 0);
    EXPECT(q->check_config(&c, 120, why, sizeof why) == 0); /* quantised as the tokens are staged */
    kt_config split_warps = c;
    split_warps.v[P_WARPS_K] = 2;
    EXPECT(q->check_config(&split_warps, 120, why, sizeof why) == 0);
    split_warps.v[P_DIRECT] = 0; /* the pipeline quantises in registers: a warp's k-block whole */
    EXPECT(q->check_config(&split_warps, 120, why, sizeof why) != 0 && strstr(why, "each warp's k-block whole"));
    kt_config bad = c;
    bad.v[P_WARPS_M] = 2;
    EXPECT(f->check_config(&bad, 120, why, sizeof why) != 0 && strstr(why, "WARPS_M=1"));
    bad = c;
    bad.v[P_TILE_K] = 256;
    EXPECT(f->check_config(&bad, 120, why, sizeof why) != 0 && strstr(why, "TILE_K=128"));
    /* The token slab holds a CTA's k-range: 16 tokens x 56 k-blocks x 132 bytes = 118 KB at
     * K=7168 (more than sm_120's 99 KB), half of it with SPLIT_K=2. */
    kt_problem p = {.n_dims = 2, .dim = {2304, 7168}, .m = 16};
    EXPECT(kt_fp8_gemm_smem(&c, 0, &p) == 56 * 16 * 132 && !f->config_fits(&c, &p));
    /* SPLIT_K=2 puts the region that receives the peer's sums first: an mbarrier and half the
     * tile's 16 x 64 floats, rounded up to 128 bytes (2,064 -> 2,176). */
    c.v[P_SPLIT_K] = 2;
    EXPECT(kt_fp8_gemm_smem(&c, 0, &p) == 2176 + 28 * 16 * 132 && f->config_fits(&c, &p));
    /* The epilogue's f32 tile is the floor: 16 x (64 + 4) floats. */
    p.dim[1] = 256;
    EXPECT(kt_fp8_gemm_smem(&c, 0, &p) == 2176 + 16 * 68 * 4);
    c.v[P_SPLIT_K] = 4; /* pulls the others' sums instead: no receive region */
    EXPECT(kt_fp8_gemm_smem(&c, 0, &p) == 16 * 68 * 4);
    c.v[P_SPLIT_K] = 2;
    /* A register ring deeper than the k-blocks a warp gets is the same as a shallower one. */
    p.dim[1] = 512; /* 4 k-blocks: 2 per CTA of the split, 1 per warp group with WARPS_K=2 */
    c.v[P_WARPS_K] = 2;
    EXPECT(f->hopeless(&c, &p));
    c.v[P_STAGES] = 2;
    EXPECT(!f->hopeless(&c, &p));
    /* At M <= 64 a ring shorter than a warp group's k-blocks is pruned where those are at
     * most 4: K=1024, no split, 2 warp groups -> 4 k-blocks each. */
    p.dim[1] = 1024;
    c.v[P_SPLIT_K] = 1;
    EXPECT(f->hopeless(&c, &p));
    c.v[P_STAGES] = 4;
    EXPECT(!f->hopeless(&c, &p));
    c.v[P_STAGES] = 2; /* at M = 256 (a 64-token tile, one warp group: 8 k-blocks a warp) the sums need the registers */
    c.v[P_TILE_M] = 64;
    c.v[P_WARPS_K] = 1;
    p.m = 256;
    EXPECT(!f->hopeless(&c, &p));
    p.m = 64; /* 8 k-blocks a warp: short rings stay (at K=4096 one of 3 beat one of 8 by 11%) */
    EXPECT(!f->hopeless(&c, &p));
}

KT_TEST(variant_ids_hash_what_changes_the_binary) {
    const kt_family *f = kt_family_find("fp8_gemm"), *q = kt_family_find("act_quant");
    char a[17], b[17], c[17], d[17];
    kt_config other = f->default_config;
    other.v[5] = 2;
    kt_variant_id(f, &f->default_config, 120, a);
    kt_variant_id(f, &f->default_config, 120, b);
    kt_variant_id(f, &f->default_config, 90, c);
    kt_variant_id(f, &other, 120, d);
    EXPECT(!strcmp(a, b));
    EXPECT(strcmp(a, c) != 0);
    EXPECT(strcmp(a, d) != 0);
    EXPECT(strlen(a) == 16);
    EXPECT(kt_family_source_hash(f) != kt_family_source_hash(q));
}

static char *temp_dir(void) {
    static char dir[64];
    strcpy(dir, "/tmp/kt-test-XXXXXX");
    return mkdtemp(dir);
}

/* The entries of folder dir (-1 if it cannot be read): a listing that cannot fail silently. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* Runs kt_compile with stderr going to a file; *said gets what it wrote there. */
static int compile_capturing(const kt_family *f, kt_cubin *out, char *said, size_t n) {
    char path[] = "/tmp/kt-test-stderr-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    int rc = kt_compile(f, &f->default_config, 120, out);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t len = 0;
    char *text = kt_read_file(path, &len);
    snprintf(said, n, "%s", text ? text : "");
    free(text);
    close(fd);
    unlink(path);
    return rc;
}

/* Overwrites the byte at offset of file path with its complement. */
static void flip_byte(const char *path, long offset) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(~c & 0xff, f);
    fclose(f);
}

/* A cache hit serves the same cubin and report; an entry with a flipped byte in the cubin,
 * an edited ptxas log, or garbage is a miss: recompiled, rewritten, said once on stderr.
 * Failed on the old cache (no checksum): the flipped cubin and the edited log were served
 * as cached. */
KT_TEST(jit_cache_hits_and_survives_corruption) {
    char *dir = temp_dir();
    setenv("KT_CACHE_DIR", dir, 1);
    const kt_family *f = kt_family_find("act_quant");
    kt_cubin first, second, flipped, edited, garbage;
    char said[4096], path[256];
    EXPECT(kt_compile(f, &f->default_config, 120, &first) == 0);
    EXPECT(!first.from_cache && first.size > 0 && first.report.registers > 0);
    EXPECT(kt_compile(f, &f->default_config, 120, &second) == 0);
    EXPECT(second.from_cache && second.size == first.size && !memcmp(first.image, second.image, first.size));
    EXPECT(second.report.registers == first.report.registers);
    snprintf(path, sizeof path, "%s/act_quant-%s.cubin", dir, first.variant_id);
    size_t good_len = 0;
    char *good = kt_read_file(path, &good_len);
    EXPECT(good && good_len > first.size && count_entries(dir) == 1); /* the entry, no temp file */
    /* one byte in the middle of the cubin (its code), then the register count in the log */
    flip_byte(path, (long)(good_len - first.size / 2));
    EXPECT(compile_capturing(f, &flipped, said, sizeof said) == 0);
    EXPECT(!flipped.from_cache && flipped.size == first.size && !memcmp(flipped.image, first.image, first.size));
    EXPECT(strstr(said, "is damaged") && strstr(said, path));
    kt_cubin again;
    EXPECT(kt_compile(f, &f->default_config, 120, &again) == 0); /* rewritten: a hit again */
    EXPECT(again.from_cache && again.size == first.size && !memcmp(again.image, first.image, first.size));
    kt_cubin_free(&again);
    char *used = good ? strstr(good + 32, "Used ") : NULL;
    EXPECT(used != NULL);
    if (used) flip_byte(path, (long)(used - good) + 5); /* a digit of "Used NN registers" */
    EXPECT(compile_capturing(f, &edited, said, sizeof said) == 0);
    EXPECT(!edited.from_cache && edited.report.registers == first.report.registers);
    EXPECT(!strstr(said, "is damaged")); /* said once per process */
    EXPECT(kt_write_file_atomic(path, "garbage", 7) == 0);
    EXPECT(kt_compile(f, &f->default_config, 120, &garbage) == 0);
    EXPECT(!garbage.from_cache && garbage.size == first.size);
    EXPECT(count_entries(dir) == 1);
    free(good);
    kt_cubin_free(&first);
    kt_cubin_free(&second);
    kt_cubin_free(&flipped);
    kt_cubin_free(&edited);
    kt_cubin_free(&garbage);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
    unsetenv("KT_CACHE_DIR");
}

KT_TEST(compile_error_is_reported) {
    char *dir = temp_dir();
    setenv("KT_CACHE_DIR", dir, 1);
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_config c;
    /* Bypasses check_config on purpose: the kernel's own static_assert must refuse it. */
    kt_parse_config(f, "TILE_N=128,TILE_M=128,TILE_K=256,STAGES=6,WARPS=8", &c);
    kt_cubin cb;
    EXPECT(kt_compile(f, &c, 120, &cb) < 0 && strstr(kt_error(), "99 KB"));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
    unsetenv("KT_CACHE_DIR");
}

KT_TEST(ptxas_report_parsing) {
    const char *log = "ptxas info    : Compiling entry function 'a' for 'sm_120'\n"
                      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
                      "ptxas info    : Used 96 registers, used 1 barriers, 4096 bytes smem\n"
                      "ptxas info    : Compiling entry function 'b' for 'sm_120'\n"
                      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                      "ptxas info    : Used 40 registers, used 0 barriers\n";
    kt_ptxas_report r;
    kt_parse_ptxas_log(log, &r);
    EXPECT(r.registers == 96);
    EXPECT(r.spill_bytes == 20);
    EXPECT(r.stack_bytes == 16);
    EXPECT(r.smem_bytes == 4096);
}

/* A problem small enough to check by hand: all codes 1.0, so each k-block sums to 128. */
KT_TEST(fp8_gemm_host_reference) {
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_problem p = {.n_dims = 2, .dim = {256, 256}, .m = 3};
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    void *host[KT_MAX_TENSORS];
    for (int i = 0; i < n; i++) host[i] = calloc(t[i].count, kt_dtype_size(t[i].dtype));
    memset(host[0], 0x38, t[0].count);
    memset(host[2], 0x38, t[2].count);
    float *As = host[1], *Bs = host[3];
    for (size_t i = 0; i < t[1].count; i++) As[i] = (float)(i + 1);
    for (size_t i = 0; i < t[3].count; i++) Bs[i] = 0.5f * (float)(i + 1);
    double *ref = malloc(sizeof(double) * p.m * p.dim[0]);
    f->reference(&p, host, ref);
    /* C[m][n] = sum_kb 128 * As[m][kb] * Bs[n/128][kb] */
    int ok = 1;
    for (int m = 0; m < 3; m++)
        for (int nn = 0; nn < 256; nn++) {
            double want = 0;
            for (int kb = 0; kb < 2; kb++) want += 128.0 * As[m * 2 + kb] * Bs[(nn / 128) * 2 + kb];
            ok &= fabs(ref[m * 256 + nn] - want) < 1e-9;
        }
    EXPECT(ok);
    /* Random inputs: the reference is linear in the activation scales. */
    f->fill(&p, 42, host);
    f->reference(&p, host, ref);
    double *ref2 = malloc(sizeof(double) * p.m * p.dim[0]);
    for (size_t i = 0; i < t[1].count; i++) As[i] *= 2;
    f->reference(&p, host, ref2);
    int linear = 1, nonzero = 0;
    for (int i = 0; i < 3 * 256; i++) {
        linear &= fabs(ref2[i] - 2 * ref[i]) <= 1e-9 * fabs(ref[i]) + 1e-12;
        nonzero += ref[i] != 0;
    }
    EXPECT(linear);
    EXPECT(nonzero > 700);
    for (int i = 0; i < n; i++) free(host[i]);
    free(ref);
    free(ref2);
}

KT_TEST(act_quant_host_reference) {
    const kt_family *f = kt_family_find("act_quant");
    kt_problem p = {.n_dims = 1, .dim = {256}, .m = 2};
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n = f->tensors(&p, t);
    EXPECT(n == 3);
    void *host[KT_MAX_TENSORS];
    for (int i = 0; i < n; i++) host[i] = calloc(t[i].count, kt_dtype_size(t[i].dtype));
    f->fill(&p, 5, host);
    double *ref = malloc(sizeof(double) * (512 + 4));
    f->reference(&p, host, ref);
    /* Every group's largest value maps to +-448 and every scale is amax / 448. */
    const uint16_t *x = host[0];
    int ok = 1;
    for (int g = 0; g < 4; g++) {
        double amax = 0, qmax = 0;
        for (int i = 0; i < 128; i++) {
            amax = fmax(amax, fabs(kt_bf16_to_float(x[g * 128 + i])));
            qmax = fmax(qmax, fabs(ref[g * 128 + i]));
        }
        ok &= qmax == 448.0 && fabs(ref[512 + g] - amax / 448.0) < 1e-6 * amax;
    }
    EXPECT(ok);
    for (int i = 0; i < n; i++) free(host[i]);
    free(ref);
}

/* The fused family's reference is the bf16 GEMM up to e4m3 rounding of the activations
 * (one scale per token per 128): within a few percent, where a scale taken from the wrong
 * group or token would be off by far more. */
KT_TEST(quant_fp8_gemm_host_reference) {
    const kt_family *f = kt_family_find("quant_fp8_gemm");
    kt_problem p = {.n_dims = 2, .dim = {256, 384}, .m = 5};
    kt_tensor_desc t[KT_MAX_TENSORS];
    EXPECT(f && f->tensors(&p, t) == 4);
    void *host[4];
    for (int i = 0; i < 4; i++) host[i] = calloc(t[i].count, kt_dtype_size(t[i].dtype));
    f->fill(&p, 11, host);
    double *ref = malloc(sizeof(double) * 5 * 256);
    f->reference(&p, host, ref);
    const uint16_t *X = host[0];
    const uint8_t *B = host[1];
    const float *Bs = host[2];
    double diff2 = 0, ref2 = 0;
    for (int m = 0; m < 5; m++)
        for (int n = 0; n < 256; n++) {
            double exact = 0;
            for (int k = 0; k < 384; k++)
                exact +=
                    kt_bf16_to_float(X[m * 384 + k]) * kt_e4m3_to_float(B[n * 384 + k]) * Bs[(n / 128) * 3 + k / 128];
            diff2 += (ref[m * 256 + n] - exact) * (ref[m * 256 + n] - exact);
            ref2 += exact * exact;
        }
    EXPECT(ref2 > 0 && sqrt(diff2 / ref2) < 0.05);
    EXPECT(sqrt(diff2 / ref2) > 1e-4); /* the activations really went through e4m3 */
    char why[128];
    kt_config c = f->default_config;
    EXPECT(f->check_config(&c, 120, why, sizeof why) == 0);
    c.v[P_WARPS_K] = 2; /* a warp would see part of a 128-group */
    EXPECT(f->check_config(&c, 120, why, sizeof why) != 0 && strstr(why, "k-block whole"));
    for (int i = 0; i < 4; i++) free(host[i]);
    free(ref);
}

/* The CPU compare (what the GPU's check kernel runs too, kernels/common/kt_check.h): sums
 * over the finite pairs, each dtype's poison (NaN codes; INT32_MIN for i32) counted as
 * unwritten and the first failing element located; -1 in an i32 output is a value. */
static kt_check_sums check(kt_dtype t, const void *out, const double *ref, size_t n) {
    kt_tensor_desc d = {"t", t, n, KT_OUTPUT};
    kt_check_sums s;
    kt_check_host(&d, out, ref, &s);
    return s;
}

KT_TEST(check_sums_on_the_host) {
    const double ref[4] = {1.0, -2.0, 0.5, 3.0};
    kt_check_sums s;
    const uint8_t e4m3[4] = {kt_float_to_e4m3(1.0f), kt_float_to_e4m3(-2.5f), 0x7f, 0xff};
    s = check(KT_E4M3, e4m3, ref, 4);
    EXPECT(s.bad == 2 && s.unwritten == 2 && s.bad_rank == 2 && s.diff2 == 0.25 && s.ref2 == 5.0);
    const uint16_t bf16[4] = {kt_float_to_bf16(1.0f), kt_float_to_bf16(-2.0f), kt_float_to_bf16(0.75f), 0xffff};
    s = check(KT_BF16, bf16, ref, 4);
    EXPECT(s.bad == 1 && s.bad_rank == 1 && s.diff2 == 0.0625 && s.ref2 == 5.25);
    const float f32[4] = {1.0f, -2.0f, 0.5f, 3.5f};
    s = check(KT_F32, f32, ref, 4);
    EXPECT(s.bad == 0 && s.bad_rank == 0 && s.diff2 == 0.25 && s.ref2 == 14.25);
    const int32_t i32[4] = {1, -2, -1, 3}; /* -1: a legal value ("unused slot"), not the poison */
    s = check(KT_I32, i32, ref, 4);
    EXPECT(s.bad == 0 && s.diff2 == 2.25 && s.ref2 == 14.25);
    const uint8_t u8[4] = {1, 0, 0xff, 3};
    s = check(KT_U8, u8, ref, 4);
    EXPECT(s.bad == 0 && s.diff2 == 4.0 + 254.5 * 254.5 && s.ref2 == 14.25);
}

/* A pool compiling for the H200 stand-in (sm_90) reports what the same variant spills on
 * sm_120, where kt ships: this one fits sm_90's registers and spills 32 bytes on sm_120
 * (ptxas 13.0; it won a sweep on the H200). A pool for sm_120 itself compiles once. */
KT_TEST(compile_pool_reports_spills_on_the_ship_arch) {
    char *dir = temp_dir();
    setenv("KT_CACHE_DIR", dir, 1);
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_config c[2];
    EXPECT(kt_parse_config(f, "TILE_N=128,TILE_M=32,DIRECT=1,WARPS=4,STAGES=2,PROMOTE=0", &c[0]) == 0);
    c[1] = f->default_config;
    const int archs[] = {90, 120};
    for (int a = 0; a < 2; a++) {
        kt_compile_pool *pool = kt_compile_pool_start(f, c, 2, archs[a], 2);
        const kt_cubin *spilling = kt_compile_pool_wait(pool, 0, NULL), *plain = kt_compile_pool_wait(pool, 1, NULL);
        EXPECT(spilling && plain && plain->ship_spill_bytes == 0);
        if (spilling && archs[a] == 90) EXPECT(spilling->report.spill_bytes == 0 && spilling->ship_spill_bytes > 0);
        if (spilling && archs[a] == 120) EXPECT(spilling->report.spill_bytes > 0 && spilling->ship_spill_bytes == 0);
        kt_compile_pool_free(pool);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
    unsetenv("KT_CACHE_DIR");
}

/* What dispatch serves an untuned problem of GEMM family f: for the target, DeepSeek-V3 and
 * small shapes at every M bucket (and odd M) on GPUs of 132 and 188 SMs, a config that builds
 * for sm_120 and sm_90 and fits; at the real shapes one the sweep would time too, whose CTAs
 * cover half the SMs or more unless split-K is at its limit. Returns the distinct configs
 * served (up to 256) in distinct. */
static int untuned_configs(const kt_family *f, kt_config *distinct) {
    static const long shapes[][2] = {{1536, 4096}, {8192, 1024}, {1024, 4096}, {4096, 2048}, {4096, 512}, {1536, 7168},
                                     {4096, 7168}, {7168, 2048}, {2304, 7168}, {128, 128},   {256, 1536}};
    static const long ms[] = {1,  2,   3,   4,   8,   16,   17,   24,   32,   48,   64,
                              96, 100, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 5000};
    static const int sms[] = {132, 188};
    int n = 0;
    EXPECT(f && f->default_for);
    if (!f || !f->default_for) return 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (int gi = 0; gi < 2; gi++) {
                kt_problem p = {.n_dims = 2, .dim = {shapes[si][0], shapes[si][1]}, .m = ms[mi]};
                kt_config c;
                char why[256];
                f->default_for(&p, sms[gi], &c);
                int ok = !f->check_config(&c, 120, why, sizeof why) && !f->check_config(&c, 90, why, sizeof why) &&
                         f->config_fits(&c, &p);
                EXPECT(ok);
                if (!ok) fprintf(stderr, "  %s N=%ld K=%ld M=%ld: %s\n", f->name, p.dim[0], p.dim[1], p.m, why);
                if (shapes[si][0] >= 1024) {
                    const int *v = c.v;
                    long ctas = p.dim[0] / v[P_TILE_N] * ((p.m + v[P_TILE_M] - 1) / v[P_TILE_M]) * v[P_SPLIT_K];
                    EXPECT(!f->hopeless(&c, &p));
                    EXPECT(2 * ctas >= sms[gi] || v[P_SPLIT_K] == 8 || 4 * v[P_SPLIT_K] > p.dim[1] / v[P_TILE_K]);
                }
                int seen = 0;
                for (int i = 0; i < n; i++) seen |= !memcmp(&distinct[i], &c, sizeof c);
                if (!seen && n < 256) distinct[n++] = c;
            }
    return n;
}

static const char *const gemm_families[] = {"fp8_gemm", "quant_fp8_gemm"};

KT_TEST(untuned_problems_get_a_config_that_fits_and_fills) {
    kt_config distinct[256];
    for (int fi = 0; fi < 2; fi++) EXPECT(untuned_configs(kt_family_find(gemm_families[fi]), distinct) > 0);
}

/* None of the configs untuned problems get spills on sm_90 or sm_120 (the pool on sm_90
 * builds each for sm_120 as well): ~30 NVRTC builds per family on each arch. */
KT_TEST_SLOW(untuned_configs_never_spill) {
    for (int fi = 0; fi < 2; fi++) {
        const kt_family *f = kt_family_find(gemm_families[fi]);
        kt_config distinct[256];
        kt_test_expect_no_spills(f, distinct, untuned_configs(f, distinct));
    }
}

/* Compiles `count` configs of f drawn with `seed` from its space on arch, limited to `where`
 * (NULL: the whole space, whose sample starts with the default): how many failed to build,
 * -1 where the space has none; *first_spill: list[0]'s spill bytes, -1 if it failed. */
static int compile_sample(const kt_family *f, int arch, const char *where, int count, uint64_t seed, int *first_spill) {
    kt_config *list = NULL;
    int n = kt_space_enumerate(f, arch, NULL, where, &list, NULL), failures = 0;
    *first_spill = -1;
    if (n <= 0) {
        free(list);
        return -1;
    }
    n = kt_space_sample(f, list, n, count, seed);
    kt_compile_pool *pool = kt_compile_pool_start(f, list, n, arch, 2);
    for (int i = 0; i < n; i++) {
        const char *err;
        const kt_cubin *cb = kt_compile_pool_wait(pool, i, &err);
        if (!cb) {
            failures++;
            fprintf(stderr, "%s %s %s: %s\n", f->name, kt_arch_name(arch), where ? where : "", err);
        } else if (i == 0) {
            *first_spill = cb->report.spill_bytes;
        }
    }
    kt_compile_pool_free(pool);
    free(list);
    return failures;
}

/* Compiles a representative sample of every family, and the tuner's check kernel, for each
 * target arch: no errors, and the default variants and the check kernel do not spill (~200
 * NVRTC builds: make test-all only). */
KT_TEST_SLOW(nvrtc_compiles_every_family_and_source_for_every_arch) {
    char *dir = temp_dir();
    setenv("KT_CACHE_DIR", dir, 1);
    const int archs[] = {120, 1201, 90};
    int spill;
    for (int fi = 0; fi < kt_family_count(); fi++)
        for (int a = 0; a < 3 && !kt_family_at(fi)->n_stages; a++) { /* a pipeline has no source */
            EXPECT(compile_sample(kt_family_at(fi), archs[a], NULL, 4, 1234 + a, &spill) == 0);
            EXPECT(spill == 0); /* list[0] is the default config */
        }
    /* Every split-K reduction (SPLIT_K 2 pushes through an mbarrier, 4 and 8 pull after a
     * cluster barrier) on both GEMM paths of both GEMM families: sampled configs of each build. */
    static const char *const splits[][2] = {
        {"fp8_gemm", "DIRECT=0,SPLIT_K=2"},       {"fp8_gemm", "DIRECT=1,SPLIT_K=2"},
        {"fp8_gemm", "DIRECT=0,SPLIT_K=8"},       {"fp8_gemm", "DIRECT=1,SPLIT_K=4"},
        {"quant_fp8_gemm", "DIRECT=0,SPLIT_K=2"}, {"quant_fp8_gemm", "DIRECT=0,SPLIT_K=8"},
        {"quant_fp8_gemm", "DIRECT=1,SPLIT_K=2"}, {"quant_fp8_gemm", "DIRECT=1,SPLIT_K=4"}};
    for (int i = 0; i < 8; i++)
        for (int a = 0; a < 3; a++)
            EXPECT(compile_sample(kt_family_find(splits[i][0]), archs[a], splits[i][1], 2, 77 + i, &spill) == 0);
    /* The sources that are not families: the GPU compare and bench's probes. */
    static const char *const sources[] = {"check.cu", "ceiling.cu", "memory.cu", "launch.cu", "stream.cu"};
    for (int s = 0; s < 5; s++)
        for (int a = 0; a < 3; a++) {
            kt_cubin cubin;
            int rc = kt_compile_source(sources[s], archs[a], &cubin);
            if (rc) fprintf(stderr, "%s %s: %s\n", sources[s], kt_arch_name(archs[a]), kt_error());
            EXPECT(rc == 0 && cubin.report.spill_bytes == 0 && cubin.size > 0);
            kt_cubin_free(&cubin);
        }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
    unsetenv("KT_CACHE_DIR");
}
