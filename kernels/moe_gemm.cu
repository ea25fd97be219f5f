// moe_gemm.cu — the MoE grouped GEMM family's kernels (host side: kernels/moe_gemm.c), e.g.
//   kt verify --family moe_gemm --shape FORMAT=1,STAGE=1,E=256,N=1024,K=4096,TOPK=6,DIST=1 --m 16
// A CTA owns one TM-slot tile of the alignment record (kernels/common/moe_layout.h: all its
// slots routed to one expert), TN of that expert's weight rows and a 1/SPLIT share of K; CTAs
// past the record's n_tiles exit (GATHER=1, down only: a CTA owns token m's topk slots instead,
// each slot's expert in turn, and combines them itself: kt verify --family moe_gemm --shape
// FORMAT=fp8,STAGE=down,E=32,N=1024,K=512,TOPK=6,DIST=hot --m 1,16 --config
// TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1,WIDE=1,GATHER=1). As in fp8_gemm's DIRECT
// path, the MMA runs swapped (weights the 16-row A operand of m16n8k32, tokens the 8-column B
// operand) and each warp streams its weight fragments from global memory into a ring of STAGES
// k-blocks of registers, while the CTA's tokens of its k-range are gathered by slot into shared
// memory once.
// Lane (g, t) feeds k-step j of a k-block with the 8 bytes (FP8) or 4 bytes (MXFP4: 8 e2m1) of
// k 32j+8t..32j+8t+7 of rows g and g+8, and the tokens' bytes of the same k: each mma k-step is
// one 32-wide group, the granularity of MXFP4's scales. WIDE=1 loads the same k-block with one
// 16-byte load a row a lane instead (a quad's four lanes: 64 contiguous bytes of the row, half
// or a quarter of the narrow loads' requests): FP8 in fp8_gemm DIRECT's k order (the tokens
// staged in the same order), MXFP4 as the 64 bytes of the k-block whose words the quad's lanes
// transpose among themselves into the narrow path's operands (quad_transpose), its ue8m0 scales
// staged once per CTA in shared memory beside the tokens. BF16=1 (MXFP4 with WIDE, sm_90 and
// sm_120) instead dequantises each lane's 32 codes, one 32-group, to bf16 with the group's scale
// folded in, and runs the bf16 mma m16n8k16 on them against the tokens turned into bf16 (both
// exact: kernels/common/mxfp4_bf16.cuh). MXFP4 otherwise runs on every arch by turning
// each code into the e4m3 code of its value / 64 (exact) and scaling each k-step's sums by the
// group's ue8m0 scale, or (NATIVE, sm_120a) as the 8-bit container of the block-scaled
// `mma.kind::mxf8f6f4` that applies the scales itself.
// Epilogues. GATEUP (weights [E, 2*inter, K]: a CTA's first TN/2 rows are gate columns c0.., the
// others the same up columns): SiLU(min(gate, 10)) * clamp(up, +-10), rounded to bf16 and
// requantised by act_quant's rule per 128 columns into h [slot, inter] e4m3 and hs [slot,
// inter/128]. DOWN: out[m] = shared[m] + sum_k w[m, k] * y[m*topk+k], y the slot's row.
// A CTA whose sums are not the whole of what its epilogue needs (split-K, GATEUP tiles under
// 128 columns, DOWN's k slots of a token in other experts' tiles) writes them to f32 partials
// [split][slot][row] and counts itself on a counter; the last CTA to arrive reads them back (in
// a fixed order: deterministic) and runs the epilogue, then resets the counter to zero.
// CLUSTER=1 (gate+up) makes those CTAs one thread-block cluster instead: the SwiGLU reads their
// sums from each other's shared memory after a cluster barrier, no partials, fence or counter
// (kt verify --family moe_gemm --shape FORMAT=fp8,STAGE=gateup,E=32,N=512,K=2048,TOPK=6,DIST=zipf
// --m 1,16 --config TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2,WIDE=1,CLUSTER=1).
#include "kt_device.cuh"
#include "moe_layout.h"
#include "mxfp4_bf16.cuh" // BF16=1's operands

#ifndef KT_TM
#define KT_TM 8
#define KT_TN 64
#define KT_WARPS_N 2
#define KT_WARPS_K 2
#define KT_STAGES 2
#define KT_SPLIT 1
#define KT_NATIVE 0
#define KT_WIDE 0
#define KT_BF16 0
#define KT_GATHER 0
#define KT_EARLY 0
#define KT_CLUSTER 0
#endif

constexpr int TM = KT_TM, TN = KT_TN, WARPS_N = KT_WARPS_N, WARPS_K = KT_WARPS_K, STAGES = KT_STAGES;
constexpr int SPLIT = KT_SPLIT, WARPS = WARPS_N * WARPS_K, THREADS = WARPS * 32;
constexpr bool WIDE = KT_WIDE == 1, BF16 = KT_BF16 == 1, GATHER = KT_GATHER == 1, EARLY = KT_EARLY == 1;
// CLUSTER (gate+up): the CTAs that share a 128-column quantisation group (256 / TN along x) and
// its split-K ranges (SPLIT along z) are one thread-block cluster, CTA (x, z) its rank
// x % CX + CX z, and the SwiGLU reads their sums from each other's shared memory.
#define KT_CX (KT_TN < 256 ? 256 / KT_TN : 1)
constexpr bool CLUSTER = KT_CLUSTER == 1;
constexpr int CX = KT_CX, CLUSTER_CTAS = CX * KT_SPLIT;
static_assert(!CLUSTER || (CLUSTER_CTAS >= 2 && CLUSTER_CTAS <= 8), "CLUSTER: 2 to 8 CTAs (the portable size)");
constexpr int WN = TN / WARPS_N, FRAG_N = WN / 16, FRAG_M = TM / 8;
constexpr int RED_LD = TN + 4; // the epilogue tile [TM][RED_LD] f32; the pad spreads its banks
constexpr float SWIGLU_LIMIT = 10.0f;
static_assert(TN % (16 * WARPS_N) == 0 && FRAG_N >= 1 && FRAG_N <= 4, "warps tile TN in fragments of 16");
static_assert(TM % 8 == 0 && THREADS <= 512, "token fragments of 8, at most 16 warps");

static_assert(!BF16 || (WIDE && !KT_NATIVE), "BF16: MXFP4's 16-byte lanes, on the dequantising path");
static_assert(!GATHER || (TM == 8 && SPLIT == 1), "GATHER: a token's slots are one tile of 8, the whole of K");

#if KT_NATIVE && !defined(__CUDA_ARCH_FEAT_SM120_ALL)
#error "NATIVE=1 is the block-scaled mma of sm_120a"
#endif

enum { FMT_FP8, FMT_MXFP4 };

// ---------------------------------------------------------------- MXFP4 operands

// Four e2m1 codes (the low 16 bits, k ascending from the lowest nibble) -> one a byte, low nibble.
__device__ __forceinline__ kt_u32 e2m1x4_spread(kt_u32 x) {
    x &= 0xffffu;
    const kt_u32 t = (x | (x << 8)) & 0x00ff00ffu;
    return (t | (t << 4)) & 0x0f0f0f0fu;
}
// The e4m3 codes of the four values / 64: e2m1 s.e1e0.m is e4m3 s.000e1e0.m00 scaled by 2^-6
// (subnormals included), so the magnitude bits move up by two and the sign to bit 7.
__device__ __forceinline__ kt_u32 e2m1x4_as_e4m3(kt_u32 b) {
    return ((b & 0x07070707u) << 2) | ((b & 0x08080808u) << 4);
}
// ue8m0 byte `j` of s as a float, times 64 (undoing the 2^-6 above): 2^(s-127+6).
__device__ __forceinline__ float ue8m0_x64(kt_u32 s, int j) {
    return __uint_as_float(((s >> (8 * j)) & 0xffu) << 23) * 64.0f;
}

#if KT_NATIVE
// D = A (16x32 e2m1 in 8-bit containers, code in bits 5:2) * B (32x8 e4m3) + D, A's rows scaled
// by ue8m0 byte `j` of sa (lanes 4g and 4g+1 hold rows g and g+8: thread-id 0), B's by 1.
template <int J>
__device__ __forceinline__ void mma_mxf8f6f4(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1, kt_u32 sa) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e2m1.e4m3.f32.ue8m0 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, {%10}, {%11, 0}, {%12}, {0, 0};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sa), "n"(J), "r"(0x7f7f7f7fu));
}
#endif

// Lane t of each quad holds the words of bytes 16t..16t+15 of a 64-byte piece of a row; returns in
// w[j] word t of lane j's (bytes 16j+4t..16j+4t+3), what the narrow path's 4-byte load of k-step
// j reads: a 4x4 transpose across the quad, swapping the lane's bit b with the word's bit b.
__device__ __forceinline__ void quad_transpose(const uint4 &v, int t, kt_u32 (&w)[4]) {
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
#pragma unroll
    for (int m = 1; m <= 2; m *= 2) {
        const bool upper = t & m; // keeps the words whose bit is set, sends the others
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int lo = m == 1 ? 2 * k : k;
            const kt_u32 got = __shfl_xor_sync(0xffffffffu, upper ? w[lo] : w[lo + m], m);
            if (upper)
                w[lo] = got;
            else
                w[lo + m] = got;
        }
    }
}

// Reads f32 partials other CTAs wrote, from L2 (never a stale L1 line).
__device__ __forceinline__ float ld_cg(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}

// The router's outputs (record, ids, weights): read before griddepcontrol.wait (EARLY) from L2,
// where a line an earlier kernel left in this SM's L1 cannot answer; after it, plain loads.
template <bool FROM_L2> __device__ __forceinline__ int ld_route(const int *p) {
    if constexpr (!FROM_L2) return *p;
    int v;
    asm volatile("ld.global.cg.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}
template <bool FROM_L2> __device__ __forceinline__ float ld_route(const float *p) {
    if constexpr (!FROM_L2) return *p;
    return ld_cg(p);
}

// ---------------------------------------------------------------- the kernel

// One warp's k-block of weight fragments: FP8 w8[i][j][r] (k-step j, rows g / g+8) and the
// fragment's block scale; MXFP4 w4[i][j][r] and the rows' four ue8m0 scales sc[i][r]. WIDE:
// w16[i][c][r], FP8's 16 bytes at 64c+16t of the k-block, MXFP4's at 16t (c = 0).
template <int FMT> struct kblock {
    uint2 w8[FMT == FMT_FP8 && !WIDE ? FRAG_N : 1][4][2];
    uint4 w16[WIDE ? FRAG_N : 1][FMT == FMT_FP8 ? 2 : 1][2];
    float bs[FRAG_N];
    kt_u32 w4[FMT == FMT_MXFP4 && !WIDE ? FRAG_N : 1][4][2];
    kt_u32 sc[FMT == FMT_MXFP4 && !WIDE ? FRAG_N : 1][2];
};

// The token slab: byte offset of 16-byte piece p (bytes 16p..16p+15 of the k-block) of token m in
// k-block kbl: [k-block][k-step][token][32 bytes], or (FP8 WIDE) DIRECT's [k-block][half][token]
// [64 bytes]; either way a warp's reads of one token fragment are contiguous. BF16: rows of 256
// bytes [k-block][token], the codes copied into a row's upper half, then made bf16 in place
// (tok_chunk).
constexpr int SLAB_ROW = BF16 ? 256 : 128; // bytes of one (k-block, token) in the slab
template <int FMT> __device__ __forceinline__ int slab_piece(int kbl, int m, int p) {
    if (FMT == FMT_MXFP4 && BF16) return ((kbl * TM + m) * 16 + 8 + p) * 16;
    if (FMT == FMT_FP8 && WIDE) return ((kbl * 2 + p / 4) * TM + m) * 64 + p % 4 * 16;
    return ((kbl * 4 + p / 2) * TM + m) * 32 + p % 2 * 16;
}

// BF16: the offset of the 16 bytes of token m's group t (k 32t..32t+31 of k-block kbl) that
// k-steps 2q and 2q+1 take, as bf16 pairs {b0, b1 of k-step 2q, b0, b1 of 2q+1}. Chunk q of
// group t sits at 4t + ((q + 2(t >> 1) + (m & 1)) & 3) of the row: the 8 lanes of each phase of
// a warp's 16-byte reads (groups 0-3 of tokens 2w and 2w+1) hit 8 different 16-byte bank groups.
__device__ __forceinline__ int tok_chunk(int kbl, int m, int t, int q) {
    return (kbl * TM + m) * SLAB_ROW + (4 * t + ((q + 2 * (t >> 1) + (m & 1)) & 3)) * 16;
}

// BF16: the codes of the tile's live tokens (a prefix of its rows: nv of them) made bf16 pairs in
// place, two rows a warp: each lane reads its 8 codes (k 8q.. of group t) from the row's upper
// half, the warp syncs, then it writes their pairs (e4m3x2_bf16) at tok_chunk. Padding rows are
// left as they are: an mma's token columns do not mix, and their sums are never stored.
__device__ __forceinline__ void tokens_to_bf16(kt_u8 *xs, int nkb, int nv, int warp, int lane) {
    const int t = (lane & 15) >> 2, q = lane & 3;
    for (int base = 2 * warp; base < nkb * nv; base += 2 * WARPS) {       // warp-uniform: __syncwarp
        const int row = base + (lane >> 4), kbl = row / nv, m = row % nv; // nv >= 1 here
        const bool live = row < nkb * nv;
        uint2 c = make_uint2(0, 0);
        if (live) c = *(const uint2 *)(xs + (kbl * TM + m) * SLAB_ROW + 128 + 32 * t + 8 * q);
        __syncwarp();
        uint4 b;
        b.x = e4m3x2_bf16(__byte_perm(c.x, c.y, 0x0400)); // bytes 0 and 4: k-step 2q's b0
        b.y = e4m3x2_bf16(__byte_perm(c.x, c.y, 0x0501));
        b.z = e4m3x2_bf16(__byte_perm(c.x, c.y, 0x0602)); // k-step 2q+1
        b.w = e4m3x2_bf16(__byte_perm(c.x, c.y, 0x0703));
        if (live) *(uint4 *)(xs + tok_chunk(kbl, m, t, q)) = b;
    }
}

template <int FMT, bool GATEUP>
__device__ __forceinline__ void moe_gemm(const kt_u8 *__restrict__ X, const float *__restrict__ Xs,
                                         const kt_u8 *__restrict__ W, const void *__restrict__ Ws,
                                         const int *__restrict__ ids, const float *__restrict__ topw,
                                         const kt_u16 *__restrict__ shared, const int *__restrict__ rec,
                                         void *__restrict__ out_, float *__restrict__ out_s, float *__restrict__ part,
                                         int *__restrict__ counter, int M, int topk, int E, int N, int K) {
    extern __shared__ __align__(128) kt_u8 smem[];
    __shared__ int slot_s[TM];
    __shared__ int last_s[TM + 1];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int wk = warp / WARPS_N, wn = warp % WARPS_N;
    const int tile = blockIdx.y, z = blockIdx.z, KB = K / 128, MT = M * topk;
    const long padded = kt_moe_max_padded(M, topk, E, TM);
    // EARLY (DOWN): the record, the ids and the weights are the router's, two launches back, and
    // complete before this grid starts (gate+up triggers its dependents only after its own wait
    // on the router), so a CTA reads its expert and streams its weights before it waits on the
    // gate+up GEMM: where it is resident while gate+up runs (a step), its DRAM reads overlap
    // gate+up's. Only the tokens, the partials and the counters need the wait.
    constexpr bool early = EARLY && !GATEUP;
    if constexpr (!early) {
        kt_wait_producer(); // the record and the tokens come from the kernels before
        kt_allow_consumer();
    }
    // Past n_tiles tile_expert is -1 (moe_layout.h): one load decides both the exit and the
    // expert, where reading n_tiles first put two round trips before the first weight load.
    // GATHER (DOWN): the CTA is token `tile`, its rows the token's topk slots, each its own
    // expert (lane k holds slot k's); it runs the k-blocks of every slot one after another
    // (units u: slot u / nkb, k-block u % nkb) and weights each slot's sums as it promotes them,
    // so the combine needs no partials and no other CTA.
    const int e =
        GATHER ? (lane < topk ? ld_route<early>(ids + tile * topk + lane) : 0) : ld_route<early>(rec + padded + tile);
    if (!GATHER && e < 0) return;
    const int kb0 = (int)((long)z * KB / SPLIT), nkb = (int)((long)(z + 1) * KB / SPLIT) - kb0;
    const int units = GATHER ? topk * nkb : nkb;
    // GATHER: the weights of the slots whose sums lane t holds (token columns 2t, 2t+1)
    const float w_lo = GATHER && 2 * t < topk ? ld_route<early>(topw + tile * topk + 2 * t) : 0.f,
                w_hi = GATHER && 2 * t + 1 < topk ? ld_route<early>(topw + tile * topk + 2 * t + 1) : 0.f;
    const int inter = N / 2;
    // CTA row r -> the expert's weight row (GATEUP: gate columns c0.., then the same up columns).
    const int c0 = GATEUP ? blockIdx.x * (TN / 2) : blockIdx.x * TN;
    auto wrow = [&](int r) { return GATEUP ? (r < TN / 2 ? c0 + r : inter + c0 + r - TN / 2) : c0 + r; };
    if (tid < TM) slot_s[tid] = GATHER ? (tid < topk ? tile * topk + tid : -1) : ld_route<early>(rec + tile * TM + tid);

    const long KH = FMT == FMT_FP8 ? K : K / 2; // bytes per weight row
    // Each warp's first STAGES k-blocks of weights (units wk, wk + WARPS_K, ...: k-blocks of the
    // range, GATHER (slot, k-block) pairs).
    auto load = [&](kblock<FMT> &kb, int u) {
        const int kbg = kb0 + (GATHER ? u % nkb : u), eu = GATHER ? __shfl_sync(0xffffffffu, e, u / nkb) : e;
#pragma unroll
        for (int i = 0; i < FRAG_N; i++) {
            const int r0 = wrow(wn * WN + i * 16);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const kt_u8 *row = W + ((long)eu * N + r0 + g + 8 * r) * KH;
                if constexpr (WIDE) {
#pragma unroll
                    for (int c = 0; c < (FMT == FMT_FP8 ? 2 : 1); c++)
                        kb.w16[i][c][r] =
                            kt_ldg_stream16(row + (FMT == FMT_FP8 ? kbg * 128 + 64 * c : kbg * 64) + 16 * t);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        if constexpr (FMT == FMT_FP8)
                            kb.w8[i][j][r] = kt_ldg_stream8(row + kbg * 128 + 32 * j + 8 * t);
                        else
                            kb.w4[i][j][r] = kt_ldg_stream4(row + kbg * 64 + 16 * j + 4 * t);
                    }
                }
                if constexpr (FMT == FMT_MXFP4 && !WIDE)
                    kb.sc[i][r] =
                        *(const kt_u32 *)((const kt_u8 *)Ws + ((long)eu * N + r0 + g + 8 * r) * (K / 32) + kbg * 4);
            }
            if constexpr (FMT == FMT_FP8) kb.bs[i] = ((const float *)Ws)[((long)eu * (N / 128) + r0 / 128) * KB + kbg];
        }
    };
    kblock<FMT> ring[STAGES];
#pragma unroll
    for (int s = 0; s < STAGES; s++)
        if (wk + s * WARPS_K < units) load(ring[s], wk + s * WARPS_K);
    if constexpr (early) {
        kt_wait_producer(); // the tokens (gate+up's h), partials and counters from here on
        kt_allow_consumer();
    }

    // The tile's tokens of this k-range (slab_piece's layout), padding rows zero, then their scales
    // [k-block][token]; MXFP4 WIDE: then the CTA rows' ue8m0 scales [row][nkb + 1] (4 a k-block;
    // the odd stride puts a fragment's 8 rows in 8 banks), GATHER every slot's expert's in turn.
    __syncthreads();
    kt_u8 *xs = smem;
    float *xs_s = (float *)(smem + nkb * TM * (FMT == FMT_MXFP4 ? SLAB_ROW : 128));
    kt_u32 *ws_s = (kt_u32 *)(xs_s + nkb * TM);
    const int ws_ld = nkb + 1;
    for (int i = tid; i < nkb * TM * 8; i += THREADS) {
        const int kbl = i / (TM * 8), m = i / 8 % TM, piece = i % 8, slot = slot_s[m];
        const long row = GATEUP ? slot / topk : slot;
        kt_cp_async16(kt_smem_addr(xs + slab_piece<FMT>(kbl, m, piece)),
                      slot >= 0 ? X + row * K + (long)(kb0 + kbl) * 128 + piece * 16 : X, slot >= 0 ? 16 : 0);
    }
    for (int i = tid; i < nkb * TM; i += THREADS) {
        const int kbl = i / TM, m = i % TM, slot = slot_s[m];
        const long row = GATEUP ? slot / topk : slot;
        kt_cp_async4(kt_smem_addr(xs_s + i), slot >= 0 ? Xs + row * KB + kb0 + kbl : Xs, slot >= 0 ? 4 : 0);
    }
    for (int i = tid; FMT == FMT_MXFP4 && WIDE && i < (GATHER ? topk : 1) * TN * nkb; i += THREADS) {
        const int r = GATHER ? i / nkb % TN : i / nkb, kbl = i % nkb,
                  eu = GATHER ? ids[tile * topk + i / (TN * nkb)] : e;
        kt_cp_async4(kt_smem_addr(ws_s + i / nkb * ws_ld + kbl),
                     (const kt_u8 *)Ws + ((long)eu * N + wrow(r)) * (K / 32) + (kb0 + kbl) * 4, 4);
    }
    kt_cp_async_commit();
    kt_cp_async_wait<0>();
    __syncthreads();
    if constexpr (FMT == FMT_MXFP4 && BF16) {
        int nv = 0; // live rows, a prefix of the tile (moe_layout.h pads each expert's group at its end)
        while (nv < TM && slot_s[nv] >= 0) nv++;
        tokens_to_bf16(xs, nkb, nv, warp, lane);
        __syncthreads();
    }

    float acc[FRAG_N][FRAG_M][4];
#pragma unroll
    for (int i = 0; i < FRAG_N; i++)
#pragma unroll
        for (int j = 0; j < FRAG_M; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

    // Adds token fragment jm's sums of k-block kbl into acc, promoted with the scales (GATHER:
    // only the current slot's column, times its routing weight).
    int slot_now = 0, ws_row0 = 0; // GATHER: the slot of the unit computed, its first row of ws_s
    auto promote = [&](const kblock<FMT> &kb, int kbl, int jm, const float(&sum)[FRAG_N][4]) {
        float2 sx = *(const float2 *)(xs_s + kbl * TM + jm * 8 + 2 * t);
        if constexpr (GATHER) sx.x *= 2 * t == slot_now ? w_lo : 0.f, sx.y *= 2 * t + 1 == slot_now ? w_hi : 0.f;
#pragma unroll
        for (int i = 0; i < FRAG_N; i++) {
            const float b = FMT == FMT_FP8 ? kb.bs[i] : 1.f;
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][jm][q] += sum[i][q] * (q & 1 ? sx.y : sx.x) * b;
        }
    };
    // FP8 WIDE: each token fragment's two 16-byte pieces against the fragments' in DIRECT's order.
    auto compute_fp8_wide = [&](const kblock<FMT> &kb, int kbl) {
#pragma unroll
        for (int jm = 0; jm < FRAG_M; jm++) {
            float sum[FRAG_N][4];
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const uint4 x = *(const uint4 *)(xs + slab_piece<FMT>(kbl, jm * 8 + g, 4 * c + t));
#pragma unroll
                for (int i = 0; i < FRAG_N; i++) kt_mma_e4m3_x16(sum[i], kb.w16[i][c][0], kb.w16[i][c][1], x, c == 0);
            }
            promote(kb, kbl, jm, sum);
        }
    };
    // One k-block on the k-step lanes: the weight operands of every fragment (MXFP4: converted once;
    // WIDE: transposed out of the 16-byte loads, the scales from shared memory), then for each
    // token fragment its four k-steps, promoted with the scales.
    auto compute_ksteps = [&](const kblock<FMT> &kb, int kbl) {
        kt_u32 a[FRAG_N][4][4], sc[FRAG_N][2];
#pragma unroll
        for (int i = 0; i < FRAG_N; i++) {
            if constexpr (FMT == FMT_MXFP4) {
                kt_u32 w4[4][2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    if constexpr (WIDE) {
                        kt_u32 w[4];
                        quad_transpose(kb.w16[i][0][r], t, w);
#pragma unroll
                        for (int j = 0; j < 4; j++) w4[j][r] = w[j];
                        sc[i][r] = ws_s[(ws_row0 + wn * WN + i * 16 + g + 8 * r) * ws_ld + kbl];
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; j++) w4[j][r] = kb.w4[i][j][r];
                        sc[i][r] = kb.sc[i][r];
                    }
                }
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            const kt_u32 b = e2m1x4_spread(w4[j][r] >> (16 * h));
                            a[i][j][2 * h + r] = KT_NATIVE ? b << 2 : e2m1x4_as_e4m3(b); // NATIVE: the container
                        }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    a[i][j][0] = kb.w8[i][j][0].x, a[i][j][1] = kb.w8[i][j][1].x;
                    a[i][j][2] = kb.w8[i][j][0].y, a[i][j][3] = kb.w8[i][j][1].y;
                }
            }
        }
#pragma unroll
        for (int jm = 0; jm < FRAG_M; jm++) {
            float sum[FRAG_N][4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint2 x = *(const uint2 *)(xs + ((kbl * 4 + j) * TM + jm * 8 + g) * 32 + 8 * t);
#pragma unroll
                for (int i = 0; i < FRAG_N; i++) {
#if KT_NATIVE
                    if constexpr (FMT == FMT_MXFP4) {
                        if (j == 0) sum[i][0] = sum[i][1] = sum[i][2] = sum[i][3] = 0.f;
                        const kt_u32 sa = t & 1 ? sc[i][1] : sc[i][0];
                        if (j == 0)
                            mma_mxf8f6f4<0>(sum[i], a[i][j], x.x, x.y, sa);
                        else if (j == 1)
                            mma_mxf8f6f4<1>(sum[i], a[i][j], x.x, x.y, sa);
                        else if (j == 2)
                            mma_mxf8f6f4<2>(sum[i], a[i][j], x.x, x.y, sa);
                        else
                            mma_mxf8f6f4<3>(sum[i], a[i][j], x.x, x.y, sa);
                    } else
#endif
                        if constexpr (FMT == FMT_FP8) {
                        if (j == 0)
                            kt_mma_e4m3_first(sum[i], a[i][j], x.x, x.y);
                        else
                            kt_mma_e4m3(sum[i], a[i][j], x.x, x.y);
                    } else {
                        float d[4];
                        kt_mma_e4m3_first(d, a[i][j], x.x, x.y);
                        const float s0 = ue8m0_x64(sc[i][0], j), s1 = ue8m0_x64(sc[i][1], j);
#pragma unroll
                        for (int q = 0; q < 4; q++)
                            sum[i][q] = j ? fmaf(d[q], q < 2 ? s0 : s1, sum[i][q]) : d[q] * (q < 2 ? s0 : s1);
                    }
                }
            }
            promote(kb, kbl, jm, sum);
        }
    };
    // MXFP4 BF16: lane t's 16 bytes of a row are its group t (k 32t..32t+31 of the k-block), the
    // k-block 8 bf16 k-steps in kt_mxfp4_bf16_a's order, the tokens' the same.
    auto compute_bf16 = [&](const kblock<FMT> &kb, int kbl) {
        kt_u32 f[FRAG_N][2]; // the rows' scale factors
#pragma unroll
        for (int i = 0; i < FRAG_N; i++)
#pragma unroll
            for (int r = 0; r < 2; r++)
                f[i][r] =
                    ue8m0_bf16x2((ws_s[(ws_row0 + wn * WN + i * 16 + g + 8 * r) * ws_ld + kbl] >> (8 * t)) & 0xffu);
        // fragment i's A operand of k-step 2q+u
        auto weights = [&](int i, int q, int u, kt_u32(&a)[4]) { kt_mxfp4_bf16_a(kb.w16[i][0], f[i], q, u, a); };
        // One token fragment shares the conversions with nothing: each k-step's operands are made
        // where they are used (fewer live registers); several take all the k-block's at once.
        kt_u32 a_all[FRAG_M > 1 ? FRAG_N : 1][8][4];
#pragma unroll
        for (int i = 0; FRAG_M > 1 && i < FRAG_N; i++)
#pragma unroll
            for (int k = 0; k < 8; k++) weights(i, k / 2, k % 2, a_all[i][k]);
#pragma unroll
        for (int jm = 0; jm < FRAG_M; jm++) {
            uint4 x[4]; // the token pairs of k-steps 2q, 2q+1
#pragma unroll
            for (int q = 0; q < 4; q++) x[q] = *(const uint4 *)(xs + tok_chunk(kbl, jm * 8 + g, t, q));
            float sum[FRAG_N][4];
#pragma unroll
            for (int i = 0; i < FRAG_N; i++) sum[i][0] = sum[i][1] = sum[i][2] = sum[i][3] = 0.f;
#pragma unroll
            for (int q = 0; q < 4; q++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const kt_u32 b0 = u ? x[q].z : x[q].x, b1 = u ? x[q].w : x[q].y;
#pragma unroll
                    for (int i = 0; i < FRAG_N; i++) {
                        if constexpr (FRAG_M > 1) {
                            kt_mma_bf16(sum[i], a_all[i][2 * q + u], b0, b1);
                        } else {
                            kt_u32 a[4];
                            weights(i, q, u, a);
                            kt_mma_bf16(sum[i], a, b0, b1);
                        }
                    }
                }
            promote(kb, kbl, jm, sum);
        }
    };
    auto compute = [&](const kblock<FMT> &kb, int kbl) {
        if constexpr (FMT == FMT_FP8 && WIDE)
            compute_fp8_wide(kb, kbl);
        else if constexpr (FMT == FMT_MXFP4 && BF16)
            compute_bf16(kb, kbl);
        else
            compute_ksteps(kb, kbl);
    };
    for (int base = wk; base < units; base += STAGES * WARPS_K) {
#pragma unroll
        for (int s = 0; s < STAGES; s++) {
            const int u = base + s * WARPS_K;
            if (u >= units) break;
            if constexpr (GATHER) slot_now = u / nkb, ws_row0 = slot_now * TN;
            compute(ring[s], GATHER ? u % nkb : u);
            if (u + STAGES * WARPS_K < units) load(ring[s], u + STAGES * WARPS_K);
        }
    }
    __syncthreads(); // the token slab becomes the epilogue's tile

    // red[m][r]: warp groups add their sums one after another (a fixed order). Element q of
    // fragment (i, jm) is CTA row wn*WN + i*16 + g + (q>>1)*8 and token jm*8 + 2t + (q&1).
    float *red = (float *)smem;
#pragma unroll
    for (int kg = 0; kg < WARPS_K; kg++) {
        if (wk == kg) {
#pragma unroll
            for (int i = 0; i < FRAG_N; i++)
#pragma unroll
                for (int jm = 0; jm < FRAG_M; jm++)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        float *dst = red + (jm * 8 + 2 * t + (q & 1)) * RED_LD + wn * WN + i * 16 + g + (q >> 1) * 8;
                        *dst = kg ? *dst + acc[i][jm][q] : acc[i][jm][q];
                    }
        }
        __syncthreads();
    }

    // GATEUP: the SwiGLU and requantisation of slot m's 128 columns [c128, c128 + 128), from
    // cols(m, c, g, u): the sums of gate columns c..c+3 into g, of the same up columns into u;
    // a warp per slot (this CTA's: rows first, first + step, ...), 4 columns a lane.
    auto swiglu_quant = [&](int c128, int first, int step, auto cols) {
        for (int m = first + warp; m < TM; m += step) {
            const int slot = slot_s[m];
            if (slot < 0) continue; // warp-uniform
            float h[4], amax = 0.f, gs[4], us[4];
            cols(m, c128 + lane * 4, gs, us);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float gate = fminf(gs[q], SWIGLU_LIMIT);
                const float up = fminf(fmaxf(us[q], -SWIGLU_LIMIT), SWIGLU_LIMIT);
                h[q] = kt_bf16_to_f32(kt_f32_to_bf16(gate / (1.0f + __expf(-gate)) * up));
                amax = fmaxf(amax, fabsf(h[q]));
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            const float scale = kt_quant_scale(amax), inv = __frcp_rn(scale);
            *(kt_u32 *)((kt_u8 *)out_ + (long)slot * inter + c128 + lane * 4) = kt_quant_codes4(h, scale, inv);
            if (lane == 0) out_s[(long)slot * (inter / 128) + c128 / 128] = scale;
        }
    };
    if constexpr (GATHER) { // out = shared + the slots' weighted sums, in slot order
        kt_u16 *out = (kt_u16 *)out_;
        for (int n = tid; n < TN; n += THREADS) {
            float v = kt_bf16_to_f32(shared[(long)tile * N + c0 + n]);
            for (int m = 0; m < topk; m++) v += red[m * RED_LD + n];
            out[(long)tile * N + c0 + n] = kt_f32_to_bf16(v);
        }
        return;
    }
    // cols() of swiglu_quant from sum(m, r), the sums of weight row r (gate: c, up: inter + c)
    auto by_row = [&](auto sum) {
        return [=](int m, int c, float(&gs)[4], float(&us)[4]) {
#pragma unroll
            for (int q = 0; q < 4; q++) gs[q] = sum(m, c + q), us[q] = sum(m, inter + c + q);
        };
    };
    if constexpr (GATEUP && TN == 256 && SPLIT == 1) {
        // the CTA has all 128 columns of gate and up: no trip through the partials
        swiglu_quant(c0, 0, WARPS, by_row([&](int m, int r) {
                         return red[m * RED_LD + (r < inter ? r - c0 : TN / 2 + r - inter - c0)];
                     }));
        return;
    }
    if constexpr (GATEUP && CLUSTER) {
        // The group's sums are in its CTAs' red[]: gate columns c..c+3 in CTA x-rank
        // (c - c128) / (TN / 2) (its rows c - c0 and TN / 2 + c - c0), split ranges added in z
        // order (the partials path's). The slots spread over the cluster's CTAs.
        kt_cluster_sync(); // every CTA's red[] complete and visible to the cluster
        const int c128 = c0 / 128 * 128, rank = (int)kt_cluster_rank();
        swiglu_quant(c128, rank * WARPS, CLUSTER_CTAS * WARPS, [&](int m, int c, float(&gs)[4], float(&us)[4]) {
            const int xr = (c - c128) / (TN / 2), r = c - c128 - xr * (TN / 2);
            const kt_u32 at = kt_smem_addr(red + m * RED_LD + r);
            float4 g = make_float4(0.f, 0.f, 0.f, 0.f), u = g;
#pragma unroll
            for (int zr = 0; zr < SPLIT; zr++) {
                const float4 a = kt_cluster_load4(kt_cluster_map(at, xr + CX * zr));
                const float4 b = kt_cluster_load4(kt_cluster_map(at + TN / 2 * 4, xr + CX * zr));
                g.x += a.x, g.y += a.y, g.z += a.z, g.w += a.w;
                u.x += b.x, u.y += b.y, u.z += b.z, u.w += b.w;
            }
            gs[0] = g.x, gs[1] = g.y, gs[2] = g.z, gs[3] = g.w;
            us[0] = u.x, us[1] = u.y, us[2] = u.z, us[3] = u.w;
        });
        kt_cluster_sync_relaxed(); // no CTA leaves while others still read its red[]
        return;
    }
    // Partials [z][slot][weight row], then count this CTA in.
    for (int i = tid; i < TM * (TN / 4); i += THREADS) {
        const int m = i / (TN / 4), r = i % (TN / 4) * 4, slot = slot_s[m];
        if (slot >= 0)
            *(float4 *)(part + ((long)z * MT + slot) * N + wrow(r)) = *(const float4 *)(red + m * RED_LD + r);
    }
    __threadfence();
    __syncthreads();
    if constexpr (GATEUP) {
        const int group = 256 / TN * SPLIT, c128 = c0 / 128 * 128;
        int *cnt = counter + tile * (inter / 128) + c0 / 128;
        if (tid == 0) last_s[0] = atomicAdd(cnt, 1) == group - 1;
        __syncthreads();
        if (!last_s[0]) return;
        __threadfence();
        swiglu_quant(c128, 0, WARPS, by_row([&](int m, int r) {
                         float v = 0.f;
                         for (int s = 0; s < SPLIT; s++) v += ld_cg(part + ((long)s * MT + slot_s[m]) * N + r);
                         return v;
                     }));
        if (tid == 0) *cnt = 0;
    } else {
        // A token's output columns [c0, c0 + TN) are complete when its topk slots' tiles of
        // all SPLIT k-ranges have arrived.
        if (tid < TM) {
            const int slot = slot_s[tid];
            int *cnt = counter + (long)(slot / topk) * (N / TN) + blockIdx.x;
            last_s[tid] = slot >= 0 && atomicAdd(cnt, 1) == topk * SPLIT - 1;
        }
        __syncthreads();
        __threadfence();
        kt_u16 *out = (kt_u16 *)out_;
        for (int m = 0; m < TM; m++) {
            if (!last_s[m]) continue;
            const int token = slot_s[m] / topk;
            for (int n = tid; n < TN; n += THREADS) {
                float v = kt_bf16_to_f32(shared[(long)token * N + c0 + n]);
                for (int k = 0; k < topk; k++) {
                    const int s = token * topk + k;
                    float y = 0.f;
                    for (int zz = 0; zz < SPLIT; zz++) y += ld_cg(part + ((long)zz * MT + s) * N + c0 + n);
                    v = fmaf(topw[s], y, v);
                }
                out[(long)token * N + c0 + n] = kt_f32_to_bf16(v);
            }
            if (tid == 0) counter[(long)token * (N / TN) + blockIdx.x] = 0;
        }
    }
}

#if KT_CLUSTER
#define KT_GATEUP_CLUSTER __cluster_dims__(KT_CX, 1, KT_SPLIT)
#else
#define KT_GATEUP_CLUSTER
#endif
#define KT_MOE_ENTRY(NAME, FMT, GATEUP, ATTR)                                                                          \
    extern "C" __global__ void ATTR __launch_bounds__(THREADS, 1)                                                      \
        NAME(const kt_u8 *X, const float *Xs, const kt_u8 *W, const void *Ws, const int *ids, const float *topw,       \
             const kt_u16 *shared, const int *rec, void *out, float *out_s, float *part, int *counter, int M,          \
             int topk, int E, int N, int K) {                                                                          \
        moe_gemm<FMT, GATEUP>(X, Xs, W, Ws, ids, topw, shared, rec, out, out_s, part, counter, M, topk, E, N, K);      \
    }
KT_MOE_ENTRY(moe_gemm_fp8_gateup, FMT_FP8, true, KT_GATEUP_CLUSTER)
KT_MOE_ENTRY(moe_gemm_fp8_down, FMT_FP8, false, )
KT_MOE_ENTRY(moe_gemm_mxfp4_gateup, FMT_MXFP4, true, KT_GATEUP_CLUSTER)
KT_MOE_ENTRY(moe_gemm_mxfp4_down, FMT_MXFP4, false, )

// ---------------------------------------------------------------- float64 references

// x [K] . row n of expert e, exact products summed in double per scale block.
__device__ double ref_dot(const kt_u8 *x, const float *xs, const kt_u8 *W, const void *Ws, int fmt, long e, long n,
                          int N, int K) {
    const int KB = K / 128;
    double total = 0;
    for (int kb = 0; kb < KB; kb++) {
        double blk = 0;
        if (fmt == FMT_FP8) {
            const kt_u8 *row = W + (e * N + n) * K + kb * 128;
            for (int k = 0; k < 128; k++) blk += kt_e4m3_to_f64(x[kb * 128 + k]) * kt_e4m3_to_f64(row[k]);
            blk *= (double)((const float *)Ws)[(e * (N / 128) + n / 128) * KB + kb];
        } else {
            const kt_u8 *row = W + ((e * N + n) * K + kb * 128) / 2;
            const kt_u8 *sc = (const kt_u8 *)Ws + (e * N + n) * (K / 32) + kb * 4;
            for (int gi = 0; gi < 4; gi++) {
                double s = 0;
                for (int k = 0; k < 32; k++) {
                    const int kk = gi * 32 + k, code = (row[kk / 2] >> (kk % 2 * 4)) & 15;
                    const int c = code & 7; // e2m1: c < 2 subnormal c/2, else 2^(c/2-1) * (1 + (c&1)/2)
                    const double mag = c < 2 ? c * 0.5 : (double)(1 << ((c >> 1) - 1)) * (c & 1 ? 1.5 : 1.0);
                    s += kt_e4m3_to_f64(x[kb * 128 + kk]) * (code & 8 ? -mag : mag);
                }
                blk += s * ldexp(1.0, sc[gi] - 127);
            }
        }
        total += blk * (double)xs[kb];
    }
    return total;
}

// GATEUP, first pass: ref[slot * inter + c] = the bf16 SwiGLU of slot's column c.
extern "C" __global__ void moe_ref_gateup(const kt_u8 *X, const float *Xs, const kt_u8 *W, const void *Ws,
                                          const int *ids, const float *topw, const kt_u16 *shared, double *ref, int M,
                                          int topk, int E, int N, int K, int fmt) {
    (void)topw, (void)shared, (void)E;
    const int inter = N / 2;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)M * topk * inter) return;
    const long s = idx / inter, c = idx % inter, e = ids[s], tok = s / topk;
    double gate = ref_dot(X + tok * K, Xs + tok * (K / 128), W, Ws, fmt, e, c, N, K);
    double up = ref_dot(X + tok * K, Xs + tok * (K / 128), W, Ws, fmt, e, inter + c, N, K);
    gate = fmin(gate, (double)SWIGLU_LIMIT);
    up = fmin(fmax(up, -(double)SWIGLU_LIMIT), (double)SWIGLU_LIMIT);
    ref[idx] = kt_bf16_to_f32(kt_f32_to_bf16((float)(gate / (1.0 + exp(-gate)) * up)));
}

// GATEUP, second pass: each 128-group by act_quant's rule into code values and the scales after them.
extern "C" __global__ void moe_ref_quant(double *ref, int M, int topk, int N) {
    const int inter = N / 2, G = inter / 128;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x, MT = (long)M * topk;
    if (idx >= MT * G) return;
    double *h = ref + idx * 128; // group idx = slot * G + g covers columns [128 g, 128 g + 128) of the slot
    float amax = 0.f;
    for (int c = 0; c < 128; c++) amax = fmaxf(amax, fabsf((float)h[c]));
    const float scale = fmaxf(amax, 1e-10f) / 448.0f;
    for (int c = 0; c < 128; c++) h[c] = kt_e4m3_to_f64((kt_u8)(kt_f32x2_to_e4m3x2((float)h[c] / scale, 0.f) & 0xff));
    ref[MT * inter + idx] = scale;
}

// DOWN: ref[m * N + n] = shared + sum_k w * (slot's row . expert row n).
extern "C" __global__ void moe_ref_down(const kt_u8 *X, const float *Xs, const kt_u8 *W, const void *Ws, const int *ids,
                                        const float *topw, const kt_u16 *shared, double *ref, int M, int topk, int E,
                                        int N, int K, int fmt) {
    (void)E;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)M * N) return;
    const long m = idx / N, n = idx % N;
    double v = kt_bf16_to_f32(shared[idx]);
    for (int k = 0; k < topk; k++) {
        const long s = m * topk + k;
        v += (double)topw[s] * ref_dot(X + s * K, Xs + s * (K / 128), W, Ws, fmt, ids[s], n, N, K);
    }
    ref[idx] = v;
}
