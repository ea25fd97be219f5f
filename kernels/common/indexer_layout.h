/* indexer_layout.h — the lightning indexer's paged K cache and its top-k keys, shared by the
 * host descriptor (kernels/mla_indexer.c) and the kernels (kernels/mla_indexer.cu): plain C,
 * valid in CUDA C++ (static inline functions and macros only).
 *
 * The cache is DeepGEMM's fp8_paged_mqa_logits layout (what vLLM and SGLang write): pages of
 * 64 tokens, each page 64 x 128 e4m3 codes (token-major) followed by the 64 tokens' f32
 * scales, 64 x 132 = 8448 bytes. A request's block table row maps its logical page t / 64
 * to a physical page; the index list mla_decode reads holds global ids page * 64 + t % 64. */
#ifndef KT_INDEXER_LAYOUT_H
#define KT_INDEXER_LAYOUT_H

#define KT_IDX_HEADS 64 /* indexer query heads (V3.2 and V4) */
#define KT_IDX_DIM 128  /* indexer head dim */
#define KT_IDX_PAGE 64  /* tokens per page */
#define KT_IDX_PAGE_BYTES (KT_IDX_PAGE * (KT_IDX_DIM + 4))
#define KT_IDX_MAX_TOPK 2048

/* Byte offset of token `slot` (0..63) of physical page `page`: its 128 codes, then its scale. */
static inline long long kt_idx_code_offset(long long page, int slot) {
    return page * KT_IDX_PAGE_BYTES + (long long)slot * KT_IDX_DIM;
}
static inline long long kt_idx_scale_offset(long long page, int slot) {
    return page * KT_IDX_PAGE_BYTES + KT_IDX_PAGE * KT_IDX_DIM + (long long)slot * 4;
}

/* Pages a request of len tokens takes (its block table row's used entries). */
static inline long long kt_idx_pages(long long len) { return (len + KT_IDX_PAGE - 1) / KT_IDX_PAGE; }

/* The order-preserving key of a logit's f32 bits: larger logit, larger key; -0 and +0 get
 * the key of +0 so that equal values tie. The top-k takes the k largest keys, ties to the
 * lowest position. */
static inline unsigned kt_idx_key(unsigned bits) {
    if ((bits & 0x7fffffffu) == 0) bits = 0;
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

/* The scan's groups [*first, *last) for warp gw of `warps` over `total` groups: an even split
 * of contiguous ranges, or, when there are no more groups than warps, group gw for warp gw, so
 * that the groups sit in the grid's first CTAs and the others end at once (a CTA placed late,
 * on an SM the kernel before still holds, then has no work; mla_indexer.cu). */
static inline void kt_idx_scan_range(long long gw, long long warps, long long total, int *first, int *last) {
    if (total <= warps) {
        *first = (int)(gw < total ? gw : total);
        *last = (int)(gw < total ? gw + 1 : total);
    } else {
        *first = (int)(gw * total / warps);
        *last = (int)((gw + 1) * total / warps);
    }
}

/* Keys a selection CTA stages in shared memory at most (68 KB padded), and the block table
 * entries of their pages it stages beside them. */
#define KT_IDX_STAGE_KEYS 16384
#define KT_IDX_STAGE_PAGES (KT_IDX_STAGE_KEYS / KT_IDX_PAGE + 2)

/* A selection CTA's staged keys in shared memory: key i at word i + i / 16 (one pad word per
 * 16), so that its ordered pass, where thread j reads keys 16 j .. 16 j + 15, hits 32 banks
 * instead of 2; n keys take kt_idx_staged_words(n) words. */
static inline int kt_idx_staged_index(int i) { return i + (i >> 4); }
static inline int kt_idx_staged_words(int n) { return n + (n >> 4) + 1; }

/* A selection CTA stages positions [lo, hi) of a request's logits in 16-byte loads: skew is
 * position lo's element offset in its 16 bytes (0..3); the vectors start at the first boundary,
 * kt_idx_stage_head (at most hi), and kt_idx_stage_vecs whole ones follow; the rest, those before
 * the head and after the vectors (kt_idx_stage_rest of them), are read one by one, the i-th at
 * kt_idx_stage_rest_pos. Together every position of [lo, hi) exactly once. */
static inline int kt_idx_stage_head(int lo, int hi, int skew) {
    int h = lo + (4 - skew) % 4;
    return h < hi ? h : hi;
}
static inline int kt_idx_stage_vecs(int head, int hi) { return (hi - head) / 4; }
static inline int kt_idx_stage_rest(int lo, int hi, int head) { return (head - lo) + (hi - head) % 4; }
static inline int kt_idx_stage_rest_pos(int lo, int head, int vecs, int i) {
    return i < head - lo ? lo + i : head + 4 * vecs + (i - (head - lo));
}

/* The radix select's digits, most significant first: 11 + 11 + 10 bits (0, 1, 2), so a
 * histogram holds 2048 counters (8 KB of shared memory). With the scan's histogram (HIST=1,
 * below) the top 16 bits are known first and digits 3 and 4 are the low 16 in 8 + 8.
 * Digit d of key k, and the bits above it. */
#define KT_IDX_DIGITS 3
#define KT_IDX_BINS 2048
static inline int kt_idx_digit_shift(int d) { return d == 0 ? 21 : d == 1 ? 10 : d == 3 ? 8 : 0; }
static inline int kt_idx_digit_bits(int d) { return d == 2 ? 10 : d >= 3 ? 8 : 11; }
static inline int kt_idx_digit_bins(int d) { return 1 << kt_idx_digit_bits(d); }
static inline unsigned kt_idx_digit(unsigned key, int d) {
    return (key >> kt_idx_digit_shift(d)) & (unsigned)(kt_idx_digit_bins(d) - 1);
}
/* 1 if key agrees with prefix on every bit above digit d (the candidates of pass d). */
static inline int kt_idx_matches(unsigned key, unsigned prefix, int d) {
    int s = kt_idx_digit_shift(d) + kt_idx_digit_bits(d);
    return s >= 32 || (key >> s) == (prefix >> s);
}

/* HIST=1: the scan counts each logit of a request longer than TOPK in that request's histogram
 * of its key's top 16 bits, KT_IDX_HIST_WORDS counters of a scratch tensor (zero between
 * launches: the selection, their only reader, zeroes what it used): 256 coarse counters of
 * bits 31..24, then 256 x 256 fine ones of bits 31..16. The selection reads the coarse
 * counters and one row of fine ones instead of a pass over the keys for them. */
#define KT_IDX_HIST_COARSE 256
#define KT_IDX_HIST_WORDS (KT_IDX_HIST_COARSE + 65536)
#define KT_IDX_HIST_MAX_B 16 /* requests the scratch holds (4.2 MB): HIST=1 is for small batches */
static inline int kt_idx_hist_coarse(unsigned key) { return (int)(key >> 24); }
static inline int kt_idx_hist_fine(unsigned key) { return KT_IDX_HIST_COARSE + (int)(key >> 16); }

#endif
