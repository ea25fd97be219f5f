/* mla_layout.h — the byte layouts of the sparse-MLA FP8 KV caches, byte-compatible with
 * FlashMLA's (tests/quant.py: V32_FP8Sparse "656 bytes per token" and MODEL1_FP8Sparse
 * "584 bytes per token"), shared by the host (kernels/mla_decode.c: quantiser, reference)
 * and the device (kernels/mla_decode.cu). Plain C; valid in CUDA C++ under NVRTC.
 *
 * A cache is an array of pages of KT_MLA_PAGE tokens; token id = page * 64 + offset
 * (what the index lists hold; -1 = unused slot).
 *  V32 (DeepSeek V3.2): token t of a page at page_base + t * 656:
 *      512 e4m3 latent codes | 4 f32 scales (one per 128 codes) | 64 bf16 rope;
 *      K = the 576 dequantised values, V = the first 512.
 *  V4 (FlashMLA MODEL1): page_base + t * 576: 448 e4m3 codes | 64 bf16 rope; then a footer
 *      after the page's 64 tokens: page_base + 64 * 576 + t * 8: 7 ue8m0 scale bytes (one per
 *      64 codes, value 2^(byte - 127)) | 1 pad byte; the page is padded to a multiple of 576
 *      bytes (37440). K = V = the 512 dequantised values.
 * Scales are ue8m0-rounded in both (FlashMLA's quantiser: 2^ceil(log2(max(amax/448, 1e-4))));
 * V32 stores them as f32. */
#ifndef KT_MLA_LAYOUT_H
#define KT_MLA_LAYOUT_H

#ifdef __CUDACC__
#define KT_MLA_FN static __host__ __device__ __forceinline__
#else
#define KT_MLA_FN static inline
#endif

#define KT_MLA_PAGE 64
#define KT_MLA_ROPE 64
#define KT_MLA_DV 512          /* V width of both layouts (the output's row) */
#define KT_MLA_V4_WINDOW 128   /* V4's sliding-window cache: the last 128 raw tokens */
#define KT_MLA_MIN_SCALE 1e-4f /* FlashMLA's clamp of amax / 448 before the ue8m0 rounding */
#define KT_MLA_MAX_SPLITS 128  /* the splits of a query's slots the combine kernel merges */

/* The layout codes the kernels take (the problem's LAYOUT=V32 or LAYOUT=V4 category). */
#define KT_MLA_V32 32
#define KT_MLA_V4 4

/* V32: 656 bytes per token, tokens contiguous in the page. */
#define KT_MLA_V32_NOPE 512
#define KT_MLA_V32_TILE 128
#define KT_MLA_V32_TILES 4
#define KT_MLA_V32_DQK 576
#define KT_MLA_V32_TOKEN 656
#define KT_MLA_V32_SCALE_AT 512 /* byte offset of the 4 f32 scales in the token */
#define KT_MLA_V32_ROPE_AT 528  /* byte offset of the 64 bf16 rope values */
#define KT_MLA_V32_PAGE_BYTES (KT_MLA_PAGE * KT_MLA_V32_TOKEN)

/* V4: 576 data bytes per token, then the page's footer of 8 scale bytes per token. */
#define KT_MLA_V4_NOPE 448
#define KT_MLA_V4_TILE 64
#define KT_MLA_V4_TILES 7
#define KT_MLA_V4_DQK 512
#define KT_MLA_V4_DATA 576
#define KT_MLA_V4_ROPE_AT 448
#define KT_MLA_V4_SCALES 8
#define KT_MLA_V4_FOOTER_AT (KT_MLA_PAGE * KT_MLA_V4_DATA)
#define KT_MLA_V4_PAGE_BYTES                                                                                           \
    ((KT_MLA_PAGE * (KT_MLA_V4_DATA + KT_MLA_V4_SCALES) + KT_MLA_V4_DATA - 1) / KT_MLA_V4_DATA * KT_MLA_V4_DATA)

/* Softmax scales of the two models: V3.2's (DeepSeek's 192^-0.5 with its YaRN mscale) and
 * V4's 512^-0.5. */
#define KT_MLA_V32_SM_SCALE 0.13523377f
#define KT_MLA_V4_SM_SCALE 0.044194173f

KT_MLA_FN int kt_mla_dqk(int layout) { return layout == KT_MLA_V32 ? KT_MLA_V32_DQK : KT_MLA_V4_DQK; }
KT_MLA_FN int kt_mla_nope(int layout) { return layout == KT_MLA_V32 ? KT_MLA_V32_NOPE : KT_MLA_V4_NOPE; }
KT_MLA_FN int kt_mla_tile(int layout) { return layout == KT_MLA_V32 ? KT_MLA_V32_TILE : KT_MLA_V4_TILE; }
KT_MLA_FN long kt_mla_page_bytes(int layout) {
    return layout == KT_MLA_V32 ? KT_MLA_V32_PAGE_BYTES : KT_MLA_V4_PAGE_BYTES;
}
/* Bytes a token takes in the cache (the floor's count): 656 or 584. */
KT_MLA_FN int kt_mla_token_bytes(int layout) {
    return layout == KT_MLA_V32 ? KT_MLA_V32_TOKEN : KT_MLA_V4_DATA + KT_MLA_V4_SCALES;
}
KT_MLA_FN float kt_mla_sm_scale(int layout) { return layout == KT_MLA_V32 ? KT_MLA_V32_SM_SCALE : KT_MLA_V4_SM_SCALE; }

/* Byte offset of token id's codes (then its rope, at +512 / +448 after the V32 scales or
 * directly) in the cache. */
KT_MLA_FN long kt_mla_token_at(int layout, long id) {
    long page = id / KT_MLA_PAGE, t = id % KT_MLA_PAGE;
    return layout == KT_MLA_V32 ? page * KT_MLA_V32_PAGE_BYTES + t * KT_MLA_V32_TOKEN
                                : page * KT_MLA_V4_PAGE_BYTES + t * KT_MLA_V4_DATA;
}
KT_MLA_FN long kt_mla_rope_at(int layout, long id) {
    return kt_mla_token_at(layout, id) + (layout == KT_MLA_V32 ? KT_MLA_V32_ROPE_AT : KT_MLA_V4_ROPE_AT);
}
/* Byte offset of token id's scales: 4 f32 (V32) or 7 ue8m0 bytes + pad (V4). */
KT_MLA_FN long kt_mla_scales_at(int layout, long id) {
    long page = id / KT_MLA_PAGE, t = id % KT_MLA_PAGE;
    return layout == KT_MLA_V32 ? page * KT_MLA_V32_PAGE_BYTES + t * KT_MLA_V32_TOKEN + KT_MLA_V32_SCALE_AT
                                : page * KT_MLA_V4_PAGE_BYTES + KT_MLA_V4_FOOTER_AT + t * KT_MLA_V4_SCALES;
}
/* The value of a ue8m0 scale byte, 2^(e - 127), by its bits (e = 0 and 255 are never written). */
KT_MLA_FN float kt_mla_ue8m0(unsigned char e) {
    union {
        unsigned u;
        float f;
    } v;
    v.u = (unsigned)e << 23;
    return v.f;
}

/* The exact value of e4m3 code c (FN: no infinities; 0x7f / 0xff are NaN, never written). */
KT_MLA_FN double kt_mla_e4m3(unsigned char c) {
    int e = (c >> 3) & 15, m = c & 7;
    union {
        unsigned long long u;
        double d;
    } p; /* 2^(e - 10), or 2^-9 for the subnormals */
    p.u = (unsigned long long)(e ? e - 10 + 1023 : 1023 - 9) << 52;
    double v = (e ? 8 + m : m) * p.d;
    return c & 0x80 ? -v : v;
}

/* The dequantised value of dim d (< kt_mla_dqk) of token id in cache: codes times their
 * scale, then the bf16 rope values. Exact in double (the references' path). */
KT_MLA_FN double kt_mla_value(int layout, const unsigned char *cache, long id, int d) {
    int nope = kt_mla_nope(layout);
    if (d >= nope) {
        const unsigned char *r = cache + kt_mla_rope_at(layout, id) + 2 * (d - nope);
        union {
            unsigned u;
            float f;
        } v;
        v.u = ((unsigned)r[0] | (unsigned)r[1] << 8) << 16;
        return v.f;
    }
    const unsigned char *s = cache + kt_mla_scales_at(layout, id);
    double scale;
    if (layout == KT_MLA_V32) {
        union {
            unsigned u;
            float f;
        } v;
        const unsigned char *b = s + 4 * (d / KT_MLA_V32_TILE);
        v.u = (unsigned)b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16 | (unsigned)b[3] << 24;
        scale = v.f;
    } else {
        scale = kt_mla_ue8m0(s[d / KT_MLA_V4_TILE]);
    }
    return kt_mla_e4m3(cache[kt_mla_token_at(layout, id) + d]) * scale;
}

/* The kernels' one argument (a struct passed by value: the host fills it with device
 * addresses). Index lists are int32 [B, SQ, TOPK] and, V4, [B, SQ, 128] for the window
 * cache; lengths int32 [B]: slot j of request b is used when j < len[b] and its id >= 0. */
typedef struct kt_mla_args {
    unsigned long long q;               /* bf16 [B, SQ, HQ, dqk] */
    unsigned long long kv, idx, len;    /* the (compressed) cache, its indices, their lengths */
    unsigned long long kv2, idx2, len2; /* V4: the sliding-window cache; 0 in V32 */
    unsigned long long sink;            /* V4: f32 [HQ] attention sinks; 0 in V32 */
    unsigned long long part;            /* partials: [B*SQ*HQ*nsplit][512] sums, then (m, l) pairs (kt_mla_ml_at) */
    unsigned long long out;             /* bf16 [B, SQ, HQ, 512] */
    unsigned long long lse;             /* f32 [B, HQ, SQ], natural log; +inf for a row with no slot */
    unsigned long long tick;            /* u32 [B*SQ][HQ/16][2] ticket counters (arrivals, departures) of the
                                           head groups, zero before a launch and left zero by it */
    int B, SQ, HQ, TOPK, nsplit;        /* nsplit: splits a query's slots are cut into */
    int fuse;                           /* who merges the splits: KT_MLA_FUSE_* */
} kt_mla_args;

/* Who merges a head group's splits by LSE: a combine kernel launched after the split kernel;
 * the group's last CTA to finish (a ticket on its arrival counter); or every CTA of the group,
 * a share each, once all have arrived (they wait for each other: only where the whole grid is
 * resident at once, one CTA an SM). */
#define KT_MLA_FUSE_NONE 0
#define KT_MLA_FUSE_LAST 1
#define KT_MLA_FUSE_ALL 2

/* The partials buffer of `rows` head rows (B * SQ * HQ) cut into nsplit splits: the splits'
 * unnormalised sums [rows][nsplit][512], f32 where the config's PART is 0 and bf16 where it is 1
 * (half the bytes stored and merged), then their f32 (m, l) pairs [rows][nsplit][2] at byte
 * kt_mla_ml_at (8-byte aligned: a row of sums is 2 or 1 KB). */
KT_MLA_FN long kt_mla_part_elem(int part) { return part ? 2 : 4; }
/* The sums' elements: where the (m, l) pairs start, counted in the sums' element. */
KT_MLA_FN long kt_mla_sums(long rows, int nsplit) { return rows * nsplit * KT_MLA_DV; }
KT_MLA_FN long kt_mla_ml_at(long rows, int nsplit, int part) {
    return kt_mla_sums(rows, nsplit) * kt_mla_part_elem(part);
}
KT_MLA_FN long kt_mla_part_bytes(long rows, int nsplit, int part) {
    return kt_mla_ml_at(rows, nsplit, part) + rows * nsplit * 8;
}

/* Ticket counters of a problem: two per query and 16 heads. */
KT_MLA_FN long kt_mla_tickets(long queries, int hq) { return queries * (hq / 16) * 2; }

/* Slots a request's query attends over: the top-k list, then V4's window. */
KT_MLA_FN int kt_mla_slots(int layout, int topk) { return topk + (layout == KT_MLA_V4 ? KT_MLA_V4_WINDOW : 0); }

#endif
