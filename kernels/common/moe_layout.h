/* moe_layout.h — the MoE alignment record that moe_route writes and moe_gemm reads, and the
 * expert weight layouts, valid in C and CUDA C++ (NVRTC includes it; plain C, no CUDA syntax).
 *
 * Routing (from the router): topk_ids int32 [M, topk] (expert of token m's k-th slot) and
 * topk_weights f32 [M, topk]. A slot is s = m * topk + k.
 *
 * Alignment for a token tile of TM rows (vLLM's moe_align_block_size, with fixed sizes so that
 * it is capturable in a CUDA graph and needs no host sync): one int32 buffer of
 * kt_moe_align_ints(M, topk, E, TM) elements holding three arrays at fixed offsets:
 *   sorted_slot [max_padded]  at KT_MOE_SORTED(...):  the slots grouped by expert, experts in
 *       ascending order, each expert's slots in ascending slot order, each expert's group padded
 *       with -1 to a multiple of TM; -1 after the last group too (padding is -1, never another
 *       negative value);
 *   tile_expert [max_tiles]   at KT_MOE_TILES(...):   the expert of each TM-row tile of
 *       sorted_slot (tile t covers sorted_slot[t*TM, t*TM+TM)), -1 past the last tile;
 *   n_tiles [1]               at KT_MOE_NTILES(...):  the number of tiles in use.
 * Only experts with at least one slot get tiles (so n_tiles = sum over touched experts of
 * ceil(count/TM)). max_padded = round_up(M*topk + E*(TM-1), TM) bounds every routing; the
 * grouped GEMM's grid is sized by max_tiles and its CTAs past n_tiles exit.
 * The content is a function of (topk_ids, E, TM) only: kt_moe_align_ref below is the
 * reference every producer must match exactly.
 *
 * Expert weights, [E, N, K] row-major per expert (rows n, K contiguous):
 *   FP8:   e4m3 codes, E*N*K bytes; scales f32 [E, N/128, K/128] (one per 128x128 block).
 *   MXFP4: e2m1 codes two per byte (k even in the low nibble), E*N*K/2 bytes; scales ue8m0
 *          [E, N, K/32] bytes (value 2^(s-127), one per 32 along K).
 * Gate+up weights are [E, 2*inter, hidden]: rows [0, inter) the gate, [inter, 2*inter) up. */
#ifndef KT_MOE_LAYOUT_H
#define KT_MOE_LAYOUT_H

#define KT_MOE_PAD (-1)

static inline long kt_moe_max_padded(long M, long topk, long E, long TM) {
    return (M * topk + E * (TM - 1) + TM - 1) / TM * TM;
}
static inline long kt_moe_max_tiles(long M, long topk, long E, long TM) {
    return kt_moe_max_padded(M, topk, E, TM) / TM;
}
/* Offsets (in int32 elements) of the three arrays in the record, and its size. */
#define KT_MOE_SORTED(M, topk, E, TM) 0L
#define KT_MOE_TILES(M, topk, E, TM) kt_moe_max_padded(M, topk, E, TM)
#define KT_MOE_NTILES(M, topk, E, TM) (kt_moe_max_padded(M, topk, E, TM) + kt_moe_max_tiles(M, topk, E, TM))
static inline long kt_moe_align_ints(long M, long topk, long E, long TM) { return KT_MOE_NTILES(M, topk, E, TM) + 1; }

/* The reference alignment of topk_ids [M*topk] (experts in [0, E)) into rec
 * [kt_moe_align_ints]; count is scratch of E ints. Returns n_tiles. */
static inline int kt_moe_align_ref(const int *topk_ids, long M, long topk, long E, long TM, int *rec, int *count) {
    const long padded = kt_moe_max_padded(M, topk, E, TM), tiles = padded / TM;
    int *sorted = rec + KT_MOE_SORTED(M, topk, E, TM), *tile_expert = rec + KT_MOE_TILES(M, topk, E, TM);
    for (long e = 0; e < E; e++) count[e] = 0;
    for (long s = 0; s < M * topk; s++) count[topk_ids[s]]++;
    for (long i = 0; i < padded; i++) sorted[i] = KT_MOE_PAD;
    for (long t = 0; t < tiles; t++) tile_expert[t] = KT_MOE_PAD;
    long pos = 0, n_tiles = 0;
    for (long e = 0; e < E; e++) {
        if (!count[e]) continue;
        long start = pos;
        for (long s = 0; s < M * topk; s++)
            if (topk_ids[s] == e) sorted[pos++] = (int)s;
        long used = (count[e] + TM - 1) / TM;
        for (long t = 0; t < used; t++) tile_expert[n_tiles + t] = (int)e;
        n_tiles += used;
        pos = start + used * TM;
    }
    rec[KT_MOE_NTILES(M, topk, E, TM)] = (int)n_tiles;
    return (int)n_tiles;
}

/* MXFP4 element (n, k) of one [N, K] matrix (codes [N, K/2], scales [N, K/32]): its e2m1 code
 * (bit 3 the sign, 2 exponent bits of bias 1, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6) times
 * the ue8m0 scale 2^(s - 127) (s = 0 is 2^-127, a float subnormal; 255 is NaN). The value kt's
 * loader, host reference and tests decode. */
static inline float kt_moe_mxfp4_value(const unsigned char *codes, const unsigned char *scales, long K, long n,
                                       long k) {
    const unsigned c = (codes[n * (K / 2) + k / 2] >> (k % 2 * 4)) & 15u, e = (c >> 1) & 3u,
                   s = scales[n * (K / 32) + k / 32];
    const float v = e ? (float)(2u | (c & 1u)) * (float)(1u << (e - 1u)) * 0.5f : (float)(c & 1u) * 0.5f;
    union {
        unsigned u;
        float f;
    } scale;
    scale.u = s == 255u ? 0x7fc00000u : s ? s << 23 : 0x00400000u;
    return (c & 8u ? -v : v) * scale.f;
}

#endif
