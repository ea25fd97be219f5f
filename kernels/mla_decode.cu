// mla_decode.cu — sparse MLA decode over FlashMLA-compatible FP8 caches (kernels/common/
// mla_layout.h): for each request b, query s and head h, softmax(scale * q . k) over the
// slots its index lists choose, times V, and the natural-log LSE; V4 adds the window cache to
// the same softmax and scales the output by the head's attention sink.
//   kt verify --family mla_decode --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=1 --m 1,64
//   kt verify --family mla_decode --shape LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 --m 1,64
// Split-KV: CTA (split, head group, b*SQ+s) takes SPLIT slots of the list and HPC heads, and
// writes unnormalised partial sums with their (max, sum) to the partials buffer; the combine
// kernel, launched as a programmatic dependent, merges the splits by LSE. Inside a CTA the
// slots go CHUNK at a time: all threads gather the chunk's token rows with cp.async into a
// ring of STAGES raw buffers (each token read once for all HPC heads), and WPM (4 or 8) warps
// per 16 heads run bf16 mma.sync m16n8k16: q . k split along the head dim (partial scores summed
// through shared memory), the online softmax by 2 * WPM threads a head, then p . v split along
// the output dims. The B operands: PATH 2 (the default) converts the ring's codes in registers
// (qk_regs, pv_regs), PATH 3 likewise with q . k's codes on the f16 mma; PATH 0 dequantises
// the oldest buffer into a bf16 tile first; PATH 1 (sm_120a) takes q . k's codes on the
// block-scaled e4m3 mma.
#include "kt_device.cuh"
#include "mla_layout.h"

#define INFINITY __int_as_float(0x7f800000)

// ---- the phase trace (KT_MLA_TRACE 1: a separate build, tests/gpu/mla21_builds.sh; 0 on main, where
// every tr_* call below compiles to nothing). Thread 0 of each split CTA stamps %globaltimer and
// clock64 at each phase into shared memory and, at its end, copies them into a ring of launches
// (TR_RING deep, a launch's number counted per CTA); every warp stamps its own end. The combine's CTAs
// stamp four phases. Thread 0 of split CTA 0 prints a launch TR_LAG launches back (all its CTAs long
// done, the printing launch and its neighbours not the one printed) once every TR_EVERY launches,
// TR_PRINTS times a module: `mla_tr` lines that tests/gpu/mla_trace.awk reduces.
#ifndef KT_MLA_TRACE
#define KT_MLA_TRACE 0
#endif
enum {
    TR_START,
    TR_WAITED,
    TR_LISTED,
    TR_CHUNK0, // chunk c: TR_CHUNK0 + 4c + (landed, q . k, softmax, p . v)
    TR_WRITTEN = TR_CHUNK0 + 16,
    TR_FENCED,
    TR_ARRIVED,
    TR_MERGED,
    TR_N
};
#if KT_MLA_TRACE
extern "C" __device__ int vprintf(const char *, const char *);
constexpr int TR_CTAS = 256, TR_RING = 32, TR_WARPS = 16, TR_EVERY = 64, TR_AT = 40, TR_LAG = 16, TR_PRINTS = 8;
struct tr_rec {
    unsigned long long t[TR_N];
    long long c[TR_N];
    unsigned long long wend[TR_WARPS];
};
__device__ tr_rec kt_tr_split[TR_RING][TR_CTAS];
__device__ unsigned long long kt_tr_comb[TR_RING][TR_CTAS][4]; // start, waited, weights, end
__device__ unsigned kt_tr_nsplit[TR_CTAS], kt_tr_ncomb[TR_CTAS], kt_tr_combgrid;
__shared__ unsigned long long kt_tr_t[TR_N];
__shared__ long long kt_tr_c[TR_N];
__device__ __forceinline__ unsigned long long tr_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ long long tr_clock() {
    long long c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    return c;
}
__device__ __forceinline__ int tr_cta() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }
__device__ __forceinline__ void tr_mark(int i) {
    if (threadIdx.x == 0) kt_tr_t[i] = tr_now(), kt_tr_c[i] = tr_clock();
}
// The split CTA's launch number (read by every warp's lane 0 at its start; used at its end).
__device__ __forceinline__ unsigned tr_begin() {
    if (threadIdx.x == 0)
        for (int i = 1; i < TR_N; i++) kt_tr_t[i] = 0;
    tr_mark(TR_START);
    return tr_cta() < TR_CTAS ? *(volatile unsigned *)&kt_tr_nsplit[tr_cta()] : 0u;
}
__device__ __forceinline__ long long tr_rel(unsigned long long t, unsigned long long ref) {
    return t ? (long long)(t - ref) : -1;
}
// Launch m's lines: L (its CTA counts, the previous launch's last combine end and the next's first
// split start), then S (ns from the launch's first split start) and K (cycles from the CTA's start)
// a split CTA, C a combine CTA.
__device__ __noinline__ void tr_print(unsigned m, int ncta) {
    const int ncomb = min((int)*(volatile unsigned *)&kt_tr_combgrid, TR_CTAS);
    const tr_rec *r = kt_tr_split[m % TR_RING], *nx = kt_tr_split[(m + 1) % TR_RING];
    unsigned long long ref = ~0ull, next = ~0ull, prev = 0;
    for (int i = 0; i < ncta; i++) ref = min(ref, r[i].t[0]), next = min(next, nx[i].t[0]);
    for (int i = 0; i < ncomb; i++) prev = max(prev, kt_tr_comb[(m - 1) % TR_RING][i][3]);
    long long a[32];
    a[0] = m, a[1] = ncta, a[2] = ncomb, a[3] = tr_rel(prev, ref), a[4] = tr_rel(next, ref);
    vprintf("mla_tr L %lld ctas %lld comb %lld prev_comb_end %lld next_split_start %lld\n", (const char *)a);
    for (int i = 0; i < ncta; i++) {
        unsigned long long wend = 0;
        for (int w = 0; w < TR_WARPS; w++) wend = max(wend, r[i].wend[w]);
        a[0] = m, a[1] = i;
        for (int k = 0; k < TR_N; k++) a[2 + k] = tr_rel(r[i].t[k], ref);
        a[2 + TR_N] = tr_rel(wend, ref);
        vprintf(
            "mla_tr S %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld "
            "%lld %lld %lld %lld %lld %lld %lld\n",
            (const char *)a);
        for (int k = 0; k < TR_N; k++) a[2 + k] = r[i].t[k] ? r[i].c[k] - r[i].c[0] : -1;
        vprintf(
            "mla_tr K %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld "
            "%lld %lld %lld %lld %lld %lld\n",
            (const char *)a);
    }
    for (int i = 0; i < ncomb; i++) {
        a[0] = m, a[1] = i;
        for (int k = 0; k < 4; k++) a[2 + k] = tr_rel(kt_tr_comb[m % TR_RING][i][k], ref);
        vprintf("mla_tr C %lld %lld %lld %lld %lld %lld\n", (const char *)a);
    }
}
// The split CTA's end: every warp's end stamp, thread 0's phases into the ring, the count, the print.
__device__ __forceinline__ void tr_end(unsigned n) {
    const int cta = tr_cta(), ncta = gridDim.x * gridDim.y * gridDim.z;
    if (cta >= TR_CTAS) return;
    tr_rec *r = &kt_tr_split[n % TR_RING][cta];
    if ((threadIdx.x & 31) == 0 && (threadIdx.x >> 5) < TR_WARPS) r->wend[threadIdx.x >> 5] = tr_now();
    if (threadIdx.x != 0) return;
    for (int i = 0; i < TR_N; i++) r->t[i] = kt_tr_t[i], r->c[i] = kt_tr_c[i];
    kt_tr_nsplit[cta] = n + 1;
    if (cta == 0 && n % TR_EVERY == TR_AT && n / TR_EVERY < TR_PRINTS && ncta <= TR_CTAS) {
        __threadfence();
        tr_print(n - TR_LAG, ncta);
    }
}
// The combine CTA's stamps, kept in registers until its end.
struct tr_comb {
    unsigned long long t[4];
    unsigned n;
    __device__ __forceinline__ void begin() {
        const int cta = tr_cta();
        n = cta < TR_CTAS ? *(volatile unsigned *)&kt_tr_ncomb[cta] : 0u;
        t[0] = tr_now(), t[1] = t[2] = 0;
    }
    __device__ __forceinline__ void mark(int i) { t[i] = tr_now(); }
    __device__ __forceinline__ void end() {
        const int cta = tr_cta();
        if (threadIdx.x != 0 || cta >= TR_CTAS) return;
        t[3] = tr_now();
        for (int i = 0; i < 4; i++) kt_tr_comb[n % TR_RING][cta][i] = t[i];
        kt_tr_ncomb[cta] = n + 1;
        if (cta == 0) kt_tr_combgrid = gridDim.x * gridDim.y * gridDim.z;
    }
};
#else
__device__ __forceinline__ void tr_mark(int) {}
__device__ __forceinline__ unsigned tr_begin() { return 0u; }
__device__ __forceinline__ void tr_end(unsigned) {}
struct tr_comb {
    __device__ __forceinline__ void begin() {}
    __device__ __forceinline__ void mark(int) {}
    __device__ __forceinline__ void end() {}
};
#endif

#ifndef KT_HPC
#define KT_HPC 16
#define KT_CHUNK 32
#define KT_SPLIT 128
#define KT_STAGES 2
#define KT_PATH 0
#define KT_WPM 4
#define KT_MPW 1
#define KT_FUSE 0
#define KT_PART 0
#endif

constexpr int HPC = KT_HPC, CHUNK = KT_CHUNK, SPLIT = KT_SPLIT, STAGES = KT_STAGES;
// PATH 0: the portable path (bf16 mma.sync on the dequantised tile; sm_90 and sm_120). PATH 1
// (sm_120a, V4 only): q . k's nope dims by the block-scaled e4m3 mma on the gathered codes.
// PATH 2 (portable): no tile; each warp turns the raw ring's codes into its bf16 mma B
// fragments in registers (q . k by ldmatrix, p . v by ldmatrix.trans), the scales applied to
// the q . k sums and folded into p: 40% less shared memory a CTA, one barrier less a chunk.
// PATH 3: PATH 2 with q . k's codes as f16 (one cvt per two codes, exact) on the f16 mma, q
// taken to f16 times a power of two per warp.
static_assert(KT_PATH >= 0 && KT_PATH <= 3, "PATH 0, 1, 2 or 3");
constexpr bool REGS = KT_PATH >= 2, F16_QK = KT_PATH == 3;
// FUSE 0: a combine kernel merges the splits, and the split kernel has no merge code (it grows the
// kernel 2x); else the host's a.fuse says how the split kernel merges (kt_mla_args, mla_layout.h).
constexpr int FUSE = KT_FUSE;
// PART: the partial sums' element in the partials buffer (kt_mla_ml_at, mla_layout.h): f32 (0), or
// bf16 (1: half the bytes the split CTAs store and the merge reads back; the (m, l) pairs stay f32).
static_assert(KT_PART == 0 || KT_PART == 1, "PART 0 (f32 partial sums) or 1 (bf16)");
#if KT_PART
typedef kt_u16 part_t;
#else
typedef float part_t;
#endif
constexpr int MF = HPC / 16;         // 16-head m-fragments per CTA
constexpr int MPW = KT_MPW;          // m-fragments a warp takes (PATHs 2, 3): 2 share each conversion
constexpr int WPM = KT_WPM;          // warps per group of MPW m-fragments: 4, 8 or 16
constexpr int KSPLIT = 4;            // q . k: the head dim in 4 slices...
constexpr int TSPLIT = WPM / KSPLIT; // ...times 1 or 2 groups of the chunk's tokens
constexpr int THREADS = MF / MPW * WPM * 32;
constexpr int TPR = THREADS / HPC;   // softmax threads per head row
constexpr int CPT = CHUNK / TPR;     // softmax columns per thread
constexpr int DPW = KT_MLA_DV / WPM; // p . v: output dims per warp
// PATH 2's p . v and its stores go in segments of 64 dims (32 at WPM 16: DPW 32), NFS n-fragments each
constexpr int SEG = DPW < 64 ? DPW : 64, NSEG = DPW / SEG, NFS = SEG / 8;
static_assert(WPM == 4 || WPM == 8 || WPM == 16, "4, 8 or 16 warps per 16 heads");
static_assert(WPM < 16 || (MPW == 1 && HPC == 16), "16 warps (512 threads) take 16 heads a CTA");
static_assert(MPW == 1 || (MPW == 2 && REGS && MF % 2 == 0), "2 m-fragments a warp: PATHs 2 and 3, 32 heads");
static_assert(CPT >= 1 && CHUNK % (8 * TSPLIT) == 0, "the chunk covers every softmax thread and token group");
static_assert(HPC % 16 == 0 && HPC <= 64, "heads per CTA: 16, 32 or 64");
static_assert(CHUNK % 16 == 0 && CHUNK <= 64 && SPLIT % CHUNK == 0, "chunks of 16-64 slots tile a split");
static_assert(STAGES >= 1 && STAGES <= 6, "1-6 raw buffers");
static_assert(!REGS || STAGES >= 2, "PATHs 2 and 3 read the chunk from the ring: 2+ raw buffers");

// The layouts as compile-time constants: head dim, codes, scale tile, the raw row a token
// takes in shared memory (V32: its 656 bytes; V4: 576 data bytes, then its 8 scale bytes).
template <int L> struct lay {
    static constexpr int DQK = L == KT_MLA_V32 ? KT_MLA_V32_DQK : KT_MLA_V4_DQK;
    static constexpr int NOPE = L == KT_MLA_V32 ? KT_MLA_V32_NOPE : KT_MLA_V4_NOPE;
    static constexpr int TILE = L == KT_MLA_V32 ? KT_MLA_V32_TILE : KT_MLA_V4_TILE;
    static constexpr int DATA = L == KT_MLA_V32 ? KT_MLA_V32_TOKEN : KT_MLA_V4_DATA;
    static constexpr int RAW_ROW = L == KT_MLA_V32 ? KT_MLA_V32_TOKEN : KT_MLA_V4_DATA + 16;
    static constexpr int SCALE_AT = L == KT_MLA_V32 ? KT_MLA_V32_SCALE_AT : KT_MLA_V4_DATA;
    static constexpr int ROPE_AT = L == KT_MLA_V32 ? KT_MLA_V32_ROPE_AT : KT_MLA_V4_ROPE_AT;
    static constexpr int TILES = NOPE / TILE;
    static constexpr int KT_LD = DQK * 2 + 16;  // bf16 tile row: an odd number of 16-byte units
    static constexpr int KSLICE = DQK / KSPLIT; // head dims of a warp's q . k
    static constexpr int KSTEPS = KSLICE / 16;
    static_assert(KSLICE % 16 == 0, "the head dim splits into 16-wide k-steps per warp");
    // shared memory: raw ring | bf16 tile (not PATH 2) | partial scores [WPM][HPC][CHUNK+4] f32 |
    // p [HPC][CHUNK+8] bf16 | PATH 2: p's factors [TILES][CHUNK] bf16 | the rescale factor per
    // head | the split's slot ids
    static constexpr int RAW_BYTES = STAGES * CHUNK * RAW_ROW;
    static constexpr int TILE_BYTES = REGS ? 0 : CHUNK * KT_LD;
    static constexpr int SP_LD = CHUNK + 4, P_LD = CHUNK + 8;
    static constexpr int SP_BYTES = KSPLIT * HPC * SP_LD * 4;
    static constexpr int P_BYTES = HPC * P_LD * 2;
    static constexpr int F_BYTES = REGS ? TILES * CHUNK * 2 : 0;
    static constexpr int SMEM = RAW_BYTES + TILE_BYTES + SP_BYTES + P_BYTES + F_BYTES + HPC * 4 + SPLIT * 4;
    static_assert(RAW_BYTES + TILE_BYTES >= (HPC * KT_MLA_MAX_SPLITS + HPC + 1) * 4,
                  "the fused merge's weights fit over the ring");
};

#if KT_PATH == 1
// D = (A * 2^(sa-127)) (16x32 e4m3, row) * (B * 2^(sb-127)) (32x8 e4m3, col) + D: sm_120a's
// block-scaled mma with one ue8m0 scale per A row and per B column for the 32-wide k-block.
// Scale bytes: A row g in lane (g, t=0), row g+8 in lane (g, t=1); B column g in lane (g, 0)
// (byte 0 of each register; the others' registers are ignored).
__device__ __forceinline__ void mma_mx(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1, kt_u32 sa,
                                       kt_u32 sb) {
    asm volatile("mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e4m3.e4m3.f32.ue8m0 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, {%10}, {%11,%12}, {%13}, {%14,%15};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sa), "h"((kt_u16)0),
                   "h"((kt_u16)0), "r"(sb), "h"((kt_u16)0), "h"((kt_u16)0));
}
#endif

__device__ __forceinline__ void ldmatrix_x4_trans(kt_u32 addr, kt_u32 &r0, kt_u32 &r1, kt_u32 &r2, kt_u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// Two e4m3 codes (low byte first) -> floats, exactly (through f16, which holds every e4m3).
__device__ __forceinline__ float2 e4m3x2_to_f32(kt_u16 v) {
    const kt_u32 h = kt_e4m3x2_f16x2(v);
    float2 f;
    asm("{\n.reg .f16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}\n"
        : "=f"(f.x), "=f"(f.y)
        : "r"(h));
    return f;
}

__device__ __forceinline__ kt_u32 bf16x2(float lo, float hi) {
    kt_u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// A CTA's slot list in shared memory: the token id, WINDOW_BIT set for V4's window cache, or
// -1 for an unused slot; read once, so that the gather and the softmax wait on no global load.
constexpr int WINDOW_BIT = 1 << 30;

// Slot `slot` of query bs (= b * SQ + s): its token id and cache, or -1 if the slot is unused
// (past its list's length, or a -1 entry).
template <int L>
__device__ __forceinline__ long slot_token(const kt_mla_args &a, int bs, int slot, const kt_u8 *&cache) {
    // the entry and the length are loaded together (no load waits on the other)
    const int b = bs / a.SQ;
    if (L == KT_MLA_V4 && slot >= a.TOPK) {
        const int j = slot - a.TOPK;
        cache = (const kt_u8 *)a.kv2;
        const int id = ((const int *)a.idx2)[(long)bs * KT_MLA_V4_WINDOW + j], n = ((const int *)a.len2)[b];
        return j < n ? id : -1;
    }
    cache = (const kt_u8 *)a.kv;
    const int id = ((const int *)a.idx)[(long)bs * a.TOPK + slot], n = ((const int *)a.len)[b];
    return slot < n ? id : -1;
}

// Slot `slot` of query bs as a CTA's slot list holds it (WINDOW_BIT, -1), for slots [.., end).
template <int L> __device__ __forceinline__ int slot_id(const kt_mla_args &a, int bs, int slot, int end) {
    const kt_u8 *cache;
    const long id = slot < end ? slot_token<L>(a, bs, slot, cache) : -1;
    return id < 0 ? -1 : (int)id | (L == KT_MLA_V4 && slot >= a.TOPK ? WINDOW_BIT : 0);
}

// Starts the copies of the chunk whose slot ids are id_of(0..CHUNK) into raw buffer dst; unused
// slots are zero-filled (their scores are masked, their values then add nothing). GATHER_TPR
// threads share a row, each copying every GATHER_TPR-th 16-byte piece: a row's source address
// is worked out once per thread, not once per piece (the loop is issue-bound at 4-8 warps an SM).
constexpr int GATHER_TPR = 8;
static_assert(THREADS % GATHER_TPR == 0, "whole rows per pass");
// gather's ids from a CTA's slot list in shared memory
struct list_ids {
    const int *p;
    __device__ int operator()(int j) const { return p[j]; }
};
template <int L, class Ids> __device__ __forceinline__ void gather(const kt_mla_args &a, Ids id_of, kt_u8 *dst) {
    using T = lay<L>;
    constexpr int PIECES = T::DATA / 16, PER_THREAD = (PIECES + GATHER_TPR - 1) / GATHER_TPR;
    const int q = threadIdx.x % GATHER_TPR;
    for (int j = threadIdx.x / GATHER_TPR; j < CHUNK; j += THREADS / GATHER_TPR) {
        const int e = id_of(j);
        const kt_u8 *cache = (const kt_u8 *)(L == KT_MLA_V4 && e >= 0 && (e & WINDOW_BIT) ? a.kv2 : a.kv);
        const long id = e & (WINDOW_BIT - 1);
        const int bytes = e >= 0 ? 16 : 0, step = e >= 0 ? 16 * GATHER_TPR : 0;
        const kt_u8 *src = e >= 0 ? cache + kt_mla_token_at(L, id) + q * 16 : cache;
        const kt_u32 row = kt_smem_addr(dst + j * T::RAW_ROW) + q * 16;
#pragma unroll
        for (int k = 0; k < PER_THREAD; k++)
            if (q + k * GATHER_TPR < PIECES) kt_cp_async16(row + k * 16 * GATHER_TPR, src + k * step, bytes);
        if (L == KT_MLA_V4 && q == GATHER_TPR - 1) { // the token's 7 scale bytes + pad from the page footer
            const kt_u8 *sc = e >= 0 ? cache + kt_mla_scales_at(L, id) : cache;
            const kt_u32 at = kt_smem_addr(dst + j * T::RAW_ROW + T::SCALE_AT);
            kt_cp_async4(at, sc, e >= 0 ? 4 : 0);
            kt_cp_async4(at + 4, sc + (e >= 0 ? 4 : 0), e >= 0 ? 4 : 0);
        }
    }
}

// The scale of scale tile `tile` of a raw row.
template <int L> __device__ __forceinline__ float raw_tile_scale(const kt_u8 *row, int tile) {
    using T = lay<L>;
    if (L == KT_MLA_V32) return ((const float *)(row + T::SCALE_AT))[tile];
    return kt_mla_ue8m0(row[T::SCALE_AT + tile]);
}

// The scale of code group g (8 codes) of a raw row.
template <int L> __device__ __forceinline__ float raw_scale(const kt_u8 *row, int g) {
    return raw_tile_scale<L>(row, g * 8 / lay<L>::TILE);
}

// Raw chunk -> the bf16 tile [CHUNK][DQK]: codes times their scale, rope copied.
template <int L> __device__ __forceinline__ void dequantise(const kt_u8 *raw, kt_u8 *tile) {
    using T = lay<L>;
    constexpr int GROUPS = T::NOPE / 8, ITEMS = GROUPS + KT_MLA_ROPE * 2 / 16;
    for (int i = threadIdx.x; i < CHUNK * ITEMS; i += THREADS) {
        const int j = i / ITEMS, g = i % ITEMS;
        const kt_u8 *row = raw + j * T::RAW_ROW;
        uint4 *dst = (uint4 *)(tile + j * T::KT_LD + g * 16);
        if (g >= GROUPS) { // rope: 8 bf16
            *dst = *(const uint4 *)(row + T::ROPE_AT + (g - GROUPS) * 16);
            continue;
        }
        const uint2 c = *(const uint2 *)(row + g * 8);
        const float s = raw_scale<L>(row, g);
        const kt_u32 w[2] = {c.x, c.y};
        kt_u32 o[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 f = e4m3x2_to_f32((kt_u16)(w[k / 2] >> (16 * (k % 2))));
            o[k] = bf16x2(f.x * s, f.y * s);
        }
        *dst = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// This warp's q . k partial scores over its head-dim slice, for its token group of the
// chunk, into sp [HPC][SP_LD] (its slice's plane).
template <int L>
__device__ __forceinline__ void qk_partial(const kt_u32 (&qf)[lay<L>::KSTEPS][4], const kt_u8 *tile, float *sp, int mf,
                                           int ks, int tg) {
    using T = lay<L>;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const kt_u32 base = kt_smem_addr(tile) + (lane & 7) * T::KT_LD + (ks * T::KSLICE + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
    for (int nf = tg * (CHUNK / 8 / TSPLIT); nf < (tg + 1) * (CHUNK / 8 / TSPLIT); nf++) {
        float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < T::KSTEPS; kk++) {
            kt_u32 b0, b1;
            kt_ldmatrix_x2(base + nf * 8 * T::KT_LD + kk * 32, b0, b1);
            kt_mma_bf16(s, qf[kk], b0, b1);
        }
        float *r0 = sp + (mf * 16 + g) * T::SP_LD + nf * 8 + 2 * t;
        *(float2 *)r0 = make_float2(s[0], s[1]);
        *(float2 *)(r0 + 8 * T::SP_LD) = make_float2(s[2], s[3]);
    }
}

#if KT_PATH == 1
// PATH 1 (sm_120a, V4): q's nope dims quantised to e4m3 with a ue8m0 scale per head row and
// 64 dims (FlashMLA's rule, as the cache's), in the m16n8k32 A layout, with the scale bytes
// each lane supplies; the rope dims stay bf16 A fragments.
constexpr int MX_STEPS = 4; // 32-wide k-steps of a warp's 128-dim slice
struct q_mx {
    kt_u32 a[MX_STEPS][4];   // e4m3 codes
    kt_u32 sa[MX_STEPS / 2]; // ue8m0 scale byte of this lane's row (t = 0: row g, t = 1: row g+8)
    kt_u32 rope[4][4];       // slice 3: the 64 rope dims as bf16 m16n8k16 A fragments
};

// Quantises this warp's slice (dims ks * 128 ...) of its 16 heads' q from global memory.
__device__ __forceinline__ void load_q_mx(const kt_u16 *q, int ks, q_mx &f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int D = KT_MLA_V4_DQK;
#pragma unroll
    for (int blk = 0; blk < MX_STEPS / 2; blk++) { // 64-dim scale blocks of the slice
        const int d0 = ks * 128 + blk * 64;
        float v[2][16], amax[2] = {0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 2; r++) // rows g and g + 8: dims d0 + 32 h + 16 u + 4 t + e
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int d = d0 + (i / 8) * 32 + ((i / 4) % 2) * 16 + 4 * t + i % 4;
                v[r][i] = d < KT_MLA_V4_NOPE ? kt_bf16_to_f32(q[(g + 8 * r) * D + d]) : 0.f;
                amax[r] = fmaxf(amax[r], fabsf(v[r][i]));
            }
        kt_u32 e[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 1));
            amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 2));
            // 2^ceil(log2(max(amax / 448, 1e-4))) by its exponent bits
            const float sc = fmaxf(amax[r] / 448.f, KT_MLA_MIN_SCALE);
            const kt_u32 bits = __float_as_uint(sc);
            e[r] = (bits >> 23) + ((bits & 0x7fffffu) ? 1u : 0u);
            const float inv = __uint_as_float((254u - e[r]) << 23); // 1 / 2^(e - 127)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const float *x = &v[r][h * 8 + u * 4];
                    f.a[blk * 2 + h][r + 2 * u] = kt_f32x2_to_e4m3x2(x[0] * inv, x[1] * inv) |
                                                  (kt_u32)kt_f32x2_to_e4m3x2(x[2] * inv, x[3] * inv) << 16;
                }
        }
        f.sa[blk] = t == 0 ? e[0] : t == 1 ? e[1] : 127u;
    }
    const kt_u32 *q32 = (const kt_u32 *)q;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int c = (KT_MLA_V4_NOPE + kk * 16 + 2 * t) / 2;
        f.rope[kk][0] = q32[g * D / 2 + c];
        f.rope[kk][1] = q32[(g + 8) * D / 2 + c];
        f.rope[kk][2] = q32[g * D / 2 + c + 4];
        f.rope[kk][3] = q32[(g + 8) * D / 2 + c + 4];
    }
}

// PATH 1's q . k partial scores: the nope dims by the block-scaled mma straight from the
// chunk's raw rows (codes and footer scales as gathered: no dequantisation for q . k), the
// rope dims (slice 3) by bf16 mma from the tile.
__device__ __forceinline__ void qk_partial_mx(const q_mx &f, const kt_u8 *raw, const kt_u8 *tile, float *sp, int mf,
                                              int ks, int tg) {
    using T = lay<KT_MLA_V4>;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const kt_u32 rope_base = kt_smem_addr(tile) + (lane & 7) * T::KT_LD + (KT_MLA_V4_NOPE + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
    for (int nf = tg * (CHUNK / 8 / TSPLIT); nf < (tg + 1) * (CHUNK / 8 / TSPLIT); nf++) {
        float s[4] = {0.f, 0.f, 0.f, 0.f};
        const kt_u8 *row = raw + (nf * 8 + g) * T::RAW_ROW;
#pragma unroll
        for (int kk = 0; kk < MX_STEPS; kk++) {
            const int d = ks * 128 + kk * 32;
            if (d >= KT_MLA_V4_NOPE) break;
            const kt_u32 b0 = *(const kt_u32 *)(row + d + 4 * t), b1 = *(const kt_u32 *)(row + d + 16 + 4 * t);
            const kt_u32 sb = t == 0 ? row[T::SCALE_AT + d / KT_MLA_V4_TILE] : 127u;
            mma_mx(s, f.a[kk], b0, b1, f.sa[kk / 2], sb);
        }
        if (ks == KSPLIT - 1)
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                kt_u32 b0, b1;
                kt_ldmatrix_x2(rope_base + nf * 8 * T::KT_LD + kk * 32, b0, b1);
                kt_mma_bf16(s, f.rope[kk], b0, b1);
            }
        float *r0 = sp + (mf * 16 + g) * T::SP_LD + nf * 8 + 2 * t;
        *(float2 *)r0 = make_float2(s[0], s[1]);
        *(float2 *)(r0 + 8 * T::SP_LD) = make_float2(s[2], s[3]);
    }
}
#endif

// ---------------------------------------------------------------- PATH 2: fragments from the raw ring

// PATH 2's power-of-two biases: a code's B operand is its value times 2^-120 (kt_e4m3x2_bf16), q's
// code dims are taken times 2^60 and its rope dims times 2^-60, p times the token's scale times
// 2^60: every q . k and p . v sum is the true one times 2^-60, in f32's normal range.
constexpr float BIAS = 1152921504606846976.f;                          // 2^60
constexpr kt_u32 BF16X2_2P60 = 0x5d805d80u, BF16X2_2M60 = 0x21802180u; // bf16x2 2^60, 2^-60

// The first head dim of k-step kk of slice ks in PATH 2, and whether it is a rope dim: V4 dims
// 128 ks + 16 kk (slice 3's last four k-steps the rope); V32 scale tile ks's 128 dims, then
// rope dims 512 + 16 ks.
template <int L> __device__ __forceinline__ int regs_dim(int ks, int kk, bool &rope) {
    const int d = L == KT_MLA_V32 && kk == 8 ? KT_MLA_V32_NOPE + 16 * ks : 128 * ks + 16 * kk;
    rope = d >= lay<L>::NOPE;
    return d;
}

// PATH 2's q A fragments of slice ks as bf16 from q: code k-steps in the order ldmatrix gives
// the raw codes (lane t: dims 4t..4t+3 of the 16 as k 2t, 2t+1, 2t+8, 2t+9), rope k-steps in
// the plain order. Issued first thing, so that their round trip overlaps the slot list's.
template <int L>
__device__ __forceinline__ void fetch_q_regs(const kt_u16 *q16, int ks, kt_u32 (&qf)[lay<L>::KSTEPS][4]) {
    using T = lay<L>;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const kt_u32 *q = (const kt_u32 *)q16;
#pragma unroll
    for (int kk = 0; kk < T::KSTEPS; kk++) {
        bool rope;
        const int d = regs_dim<L>(ks, kk, rope);
        const int c0 = (d + (rope ? 2 * t : 4 * t)) / 2, c1 = c0 + (rope ? 4 : 1);
        qf[kk][0] = q[g * T::DQK / 2 + c0];
        qf[kk][1] = q[(g + 8) * T::DQK / 2 + c0];
        qf[kk][2] = q[g * T::DQK / 2 + c1];
        qf[kk][3] = q[(g + 8) * T::DQK / 2 + c1];
    }
}

// fetch_q_regs' fragments made the mma's: code k-steps times 2^60, rope k-steps times 2^-60.
// PATH 3's code k-steps are f16 instead, times 2^e with e making the warp's largest |q|
// 2^13-2^14 (e <= 100: 2^e stays a normal f32); the returned factor, 2^(-e-60), takes their sums
// to PATH 2's (1 in PATH 2).
template <int L> __device__ __forceinline__ float scale_q_regs(int ks, kt_u32 (&qf)[lay<L>::KSTEPS][4]) {
    using T = lay<L>;
    float amax = 0.f;
#pragma unroll
    for (int kk = 0; kk < T::KSTEPS; kk++) {
        bool rope;
        regs_dim<L>(ks, kk, rope);
#pragma unroll
        for (int r = 0; r < 4 && F16_QK && !rope; r++)
            amax = fmaxf(
                amax, fmaxf(fabsf(__uint_as_float(qf[kk][r] << 16)), fabsf(__uint_as_float(qf[kk][r] & 0xffff0000u))));
    }
    for (int o = 16; o > 0 && F16_QK; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const kt_u32 bits = __float_as_uint(amax);
    const int e = amax > 0.f ? min(100, 14 - ((int)(bits >> 23) - 127 + ((bits & 0x7fffffu) != 0))) : 0;
    const float up = __uint_as_float((kt_u32)(127 + e) << 23);
#pragma unroll
    for (int kk = 0; kk < T::KSTEPS; kk++) {
        bool rope;
        regs_dim<L>(ks, kk, rope);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            if (F16_QK && !rope) {
                const float lo = __uint_as_float(qf[kk][r] << 16) * up,
                            hi = __uint_as_float(qf[kk][r] & 0xffff0000u) * up;
                asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(qf[kk][r]) : "f"(hi), "f"(lo));
            } else {
                qf[kk][r] = kt_mul_bf16x2(qf[kk][r], rope ? BF16X2_2M60 : BF16X2_2P60);
            }
        }
    }
    return F16_QK ? __uint_as_float((kt_u32)max(1, min(254, 127 - e - 60)) << 23) : 1.f;
}

// PATH 2's q . k partial scores (times 2^-60) of this warp's slice for its token group, into
// sp, for its MPW m-fragments from mf0: per 8 tokens and 64 dims one ldmatrix.x4 of the raw
// rows, converted in registers once for all MPW fragments; each scale tile's sums times the
// tokens' scale; rope dims straight from the rows. Two groups of 8 tokens at a time: both
// groups' rows are loaded first and the k-steps are the outer loop, so that their mma chains
// interleave (more would spill at WPM 4); the first block's sums go to sp, the second's are added.
template <int L>
__device__ __forceinline__ void qk_regs(const kt_u32 (&qf)[MPW][lay<L>::KSTEPS][4], const float (&fq)[MPW],
                                        const kt_u8 *raw, float *sp, int mf0, int ks, int tg) {
    using T = lay<L>;
    constexpr int NF = CHUNK / 8 / TSPLIT, NG = NF < 2 ? NF : 2;
    static_assert(NF % NG == 0, "pairs of token groups");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, nf0 = tg * NF;
    const kt_u32 base = kt_smem_addr(raw) + (nf0 * 8 + (lane & 7)) * T::RAW_ROW + (lane >> 3) * 16;
#pragma unroll
    for (int blk = 0; blk < 2; blk++) { // 64 dims: 4 k-steps
        bool rope;
        const int d = regs_dim<L>(ks, 4 * blk, rope);
#pragma unroll
        for (int n = 0; n < NF; n += NG) {
            float v[MPW][NG][4];
            kt_u32 w[NG][4];
#pragma unroll
            for (int j = 0; j < MPW; j++)
#pragma unroll
                for (int u = 0; u < NG; u++) v[j][u][0] = v[j][u][1] = v[j][u][2] = v[j][u][3] = 0.f;
            const kt_u32 rows = base + n * 8 * T::RAW_ROW;
            if (rope) { // V4's slice 3: the bf16 rope dims, 32 at a time
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int u = 0; u < NG; u++)
                        kt_ldmatrix_x4(rows + u * 8 * T::RAW_ROW + T::ROPE_AT + h * 64, w[u][0], w[u][1], w[u][2],
                                       w[u][3]);
#pragma unroll
                    for (int i = 0; i < 2; i++)
#pragma unroll
                        for (int u = 0; u < NG; u++)
#pragma unroll
                            for (int j = 0; j < MPW; j++)
                                kt_mma_bf16(v[j][u], qf[j][4 * blk + 2 * h + i], w[u][2 * i], w[u][2 * i + 1]);
                }
            } else {
#pragma unroll
                for (int u = 0; u < NG; u++)
                    kt_ldmatrix_x4(rows + u * 8 * T::RAW_ROW + d, w[u][0], w[u][1], w[u][2], w[u][3]);
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int u = 0; u < NG; u++) {
                        const kt_u32 b0 =
                            F16_QK ? kt_e4m3x2_f16x2((kt_u16)w[u][i]) : kt_e4m3x2_bf16<KT_SEL_01>(w[u][i]);
                        const kt_u32 b1 =
                            F16_QK ? kt_e4m3x2_f16x2((kt_u16)(w[u][i] >> 16)) : kt_e4m3x2_bf16<KT_SEL_23>(w[u][i]);
#pragma unroll
                        for (int j = 0; j < MPW; j++)
                            if (F16_QK)
                                kt_mma_f16(v[j][u], qf[j][4 * blk + i], b0, b1);
                            else
                                kt_mma_bf16(v[j][u], qf[j][4 * blk + i], b0, b1);
                    }
#pragma unroll
                for (int u = 0; u < NG; u++) {
                    const kt_u8 *r0 = raw + ((nf0 + n + u) * 8 + 2 * t) * T::RAW_ROW; // columns 2t, 2t + 1
                    const float c0 = raw_tile_scale<L>(r0, d / T::TILE),
                                c1 = raw_tile_scale<L>(r0 + T::RAW_ROW, d / T::TILE);
#pragma unroll
                    for (int j = 0; j < MPW; j++)
                        v[j][u][0] *= c0 * fq[j], v[j][u][1] *= c1 * fq[j], v[j][u][2] *= c0 * fq[j],
                            v[j][u][3] *= c1 * fq[j];
                }
            }
#pragma unroll
            for (int u = 0; u < NG; u++) {
                if (L == KT_MLA_V32 && blk == 1) { // the slice's 16 rope dims
                    kt_ldmatrix_x2(rows + u * 8 * T::RAW_ROW + T::ROPE_AT + 32 * ks, w[u][0], w[u][1]);
#pragma unroll
                    for (int j = 0; j < MPW; j++) kt_mma_bf16(v[j][u], qf[j][T::KSTEPS - 1], w[u][0], w[u][1]);
                }
#pragma unroll
                for (int j = 0; j < MPW; j++) {
                    float2 *o0 = (float2 *)(sp + ((mf0 + j) * 16 + g) * T::SP_LD + (nf0 + n + u) * 8 + 2 * t),
                           *o1 = o0 + 4 * T::SP_LD;
                    if (blk == 1) {
                        const float2 a0 = *o0, a1 = *o1;
                        v[j][u][0] += a0.x, v[j][u][1] += a0.y, v[j][u][2] += a1.x, v[j][u][3] += a1.y;
                    }
                    *o0 = make_float2(v[j][u][0], v[j][u][1]);
                    *o1 = make_float2(v[j][u][2], v[j][u][3]);
                }
            }
        }
    }
}

// PATH 2: p's factor of each token and scale tile of the chunk, bf16 [TILES][CHUNK]: the
// token's scale times 2^60 (V4: 2^(e - 127) * 2^60 by its exponent bits, e <= 194).
template <int L> __device__ __forceinline__ void chunk_factors(const kt_u8 *raw, kt_u16 *fs) {
    using T = lay<L>;
    for (int i = threadIdx.x; i < T::TILES * CHUNK; i += THREADS) {
        const kt_u8 *row = raw + (i % CHUNK) * T::RAW_ROW;
        const int tile = i / CHUNK;
        fs[i] = L == KT_MLA_V4 ? (kt_u16)((row[T::SCALE_AT + tile] + 60) << 7)
                               : kt_f32_to_bf16(raw_tile_scale<L>(row, tile) * BIAS);
    }
}

// The p . v sums rescaled by their rows' factor before a chunk adds to them.
__device__ __forceinline__ void rescale(float (&acc)[DPW / 8][4], const float *alpha, int mf) {
    const int g = (threadIdx.x & 31) >> 2;
    const float f0 = alpha[mf * 16 + g], f1 = alpha[mf * 16 + g + 8];
#pragma unroll
    for (int nf = 0; nf < DPW / 8; nf++) {
        acc[nf][0] *= f0;
        acc[nf][1] *= f0;
        acc[nf][2] *= f1;
        acc[nf][3] *= f1;
    }
}

// PATH 2's p . v over the chunk: MPW x 16 heads (from m-fragment mf0) x DPW output dims in
// 64-dim segments. Per 16 tokens and 32 dims one ldmatrix.x4.trans of the raw rows gives each
// lane two tokens' codes of dims 2g and 2g + 1: the B fragments of an even-dims and an odd-dims
// n-fragment (sums [4 * sg + q] hold dims 32 h + 16 (q / 2) + 4t + (q % 2) + {0, 2} of segment
// sg's half h), converted once for the MPW fragments; p's A fragments are taken times the
// tokens' factors for the segment's tile (V4's rope dims: times 2^-60).
template <int L>
__device__ __forceinline__ void pv_regs(float (&acc)[MPW][DPW / 8][4], const kt_u8 *raw, const kt_u16 *p,
                                        const kt_u16 *fs, const float *alpha, int mf0, int ds) {
    using T = lay<L>;
    const int lane = threadIdx.x & 31, t = lane & 3, mat = lane >> 3;
#pragma unroll
    for (int j = 0; j < MPW; j++) rescale(acc[j], alpha, mf0 + j);
    const kt_u32 pa = kt_smem_addr(p) + (mf0 * 16 + (mat & 1) * 8 + (lane & 7)) * T::P_LD * 2 + (mat >> 1) * 16;
    const kt_u32 va = kt_smem_addr(raw) + ((mat & 1) * 8 + (lane & 7)) * T::RAW_ROW + (mat >> 1) * 16;
#pragma unroll
    for (int kk = 0; kk < CHUNK / 16; kk++) {
        kt_u32 af[MPW][4];
#pragma unroll
        for (int j = 0; j < MPW; j++)
            kt_ldmatrix_x4(pa + j * 16 * T::P_LD * 2 + kk * 32, af[j][0], af[j][1], af[j][2], af[j][3]);
        const kt_u32 rows = va + kk * 16 * T::RAW_ROW;
#pragma unroll
        for (int sg = 0; sg < NSEG; sg++) {
            const int d = ds * DPW + sg * SEG;
            kt_u32 a[MPW][4];
            if (d >= T::NOPE) { // V4's rope dims: bf16 values (64-dim segments: all 64 of them, d = NOPE)
                const int rope_at = DPW < 64 ? (d - T::NOPE) * 2 : 0;
#pragma unroll
                for (int j = 0; j < MPW; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) a[j][e] = kt_mul_bf16x2(af[j][e], BF16X2_2M60);
#pragma unroll
                for (int nf = 0; nf < NFS; nf += 2) {
                    kt_u32 b0, b1, b2, b3;
                    ldmatrix_x4_trans(rows + T::ROPE_AT + rope_at + nf * 16, b0, b1, b2, b3);
#pragma unroll
                    for (int j = 0; j < MPW; j++) {
                        kt_mma_bf16(acc[j][sg * NFS + nf], a[j], b0, b1);
                        kt_mma_bf16(acc[j][sg * NFS + nf + 1], a[j], b2, b3);
                    }
                }
                continue;
            }
            const kt_u16 *f = fs + d / T::TILE * CHUNK + kk * 16 + 2 * t;
            const kt_u32 f01 = *(const kt_u32 *)f, f89 = *(const kt_u32 *)(f + 8);
#pragma unroll
            for (int j = 0; j < MPW; j++) {
                a[j][0] = kt_mul_bf16x2(af[j][0], f01), a[j][1] = kt_mul_bf16x2(af[j][1], f01);
                a[j][2] = kt_mul_bf16x2(af[j][2], f89), a[j][3] = kt_mul_bf16x2(af[j][3], f89);
            }
#pragma unroll
            for (int h = 0; h < SEG / 32; h++) {
                kt_u32 r[4];
                ldmatrix_x4_trans(rows + d + h * 32, r[0], r[1], r[2], r[3]);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const kt_u32 lo = r[q / 2 * 2], hi = r[q / 2 * 2 + 1];
                    const kt_u32 b0 = q % 2 ? kt_e4m3x2_bf16<KT_SEL_13>(lo) : kt_e4m3x2_bf16<KT_SEL_02>(lo);
                    const kt_u32 b1 = q % 2 ? kt_e4m3x2_bf16<KT_SEL_13>(hi) : kt_e4m3x2_bf16<KT_SEL_02>(hi);
#pragma unroll
                    for (int j = 0; j < MPW; j++) kt_mma_bf16(acc[j][sg * NFS + 4 * h + q], a[j], b0, b1);
                }
            }
        }
    }
}

// Stores 4 (or 2) consecutive dims of a row: f32 partial sums, or bf16 ones (PART 1) or output.
__device__ __forceinline__ void store4(float *r, float a, float b, float c, float d) {
    *(float4 *)r = make_float4(a, b, c, d);
}
__device__ __forceinline__ void store4(kt_u16 *r, float a, float b, float c, float d) {
    *(uint2 *)r = make_uint2(bf16x2(a, b), bf16x2(c, d));
}
__device__ __forceinline__ void store2(float *r, float a, float b) { *(float2 *)r = make_float2(a, b); }
__device__ __forceinline__ void store2(kt_u16 *r, float a, float b) { *(kt_u32 *)r = bf16x2(a, b); }

// PATH 2's p . v sums (times 2^60) of head rows g and g + 8 of an m-fragment, times the rows'
// factors f0 and f1, into row0 (row g's; row g + 8's row_stride elements on): the CTA's partial
// rows (part_t, factors 1) or, where it is the one split, the output (bf16, factors 1 / l and the
// sink); 16 (8) bytes a store, in pv_regs's dim order.
template <int L, typename T>
__device__ __forceinline__ void write_regs(const float (&acc)[DPW / 8][4], T *row0, long row_stride, int ds, float f0,
                                           float f1) {
    const int t = threadIdx.x & 3;
    f0 *= BIAS, f1 *= BIAS;
#pragma unroll
    for (int sg = 0; sg < NSEG; sg++) {
        const int d = ds * DPW + sg * SEG;
        const float(*o)[4] = acc + sg * NFS;
#pragma unroll
        for (int nf = 0; nf < NFS; nf++) {
            if (d >= lay<L>::NOPE) { // the rope dims' plain order
                T *r = row0 + d + nf * 8 + 2 * t;
                store2(r, o[nf][0] * f0, o[nf][1] * f0);
                store2(r + 8 * row_stride, o[nf][2] * f1, o[nf][3] * f1);
                continue;
            }
            if (nf % 2) continue; // written with its even partner
            const float *e = o[nf], *od = o[nf + 1];
            T *r = row0 + d + (nf / 4) * 32 + (nf / 2 % 2) * 16 + 4 * t;
            store4(r, e[0] * f0, od[0] * f0, e[1] * f0, od[1] * f0);
            store4(r + 8 * row_stride, e[2] * f1, od[2] * f1, e[3] * f1, od[3] * f1);
        }
    }
}

// Thread (head row, sub) of the online softmax over the chunk (TPR threads a row): sums the
// partial scores of its CPT columns, updates the row's running max m and sum l (log2 domain), writes p as bf16 and
// the factor the row's accumulators are rescaled by.
template <int L>
__device__ __forceinline__ void softmax_chunk(const int *ids, const float *sp, kt_u16 *p, float *alpha, float &m,
                                              float &l) {
    using T = lay<L>;
    const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    const float scale = kt_mla_sm_scale(L) * 1.4426950408889634f * (REGS ? BIAS : 1.f); // PATH 2: sums x 2^-60
    float s[CPT], cmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        const int col = sub * CPT + j;
        const bool used = ids[col] >= 0;
        float v = 0.f;
#pragma unroll
        for (int k = 0; k < KSPLIT; k++) v += sp[(k * HPC + row) * T::SP_LD + col];
        s[j] = used ? v * scale : -INFINITY;
        cmax = fmaxf(cmax, s[j]);
    }
#pragma unroll
    for (int o = 1; o < TPR; o *= 2) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
    const float m_new = fmaxf(m, cmax);
    const float f = m_new == -INFINITY ? 1.f : exp2f(m - m_new); // exp2(-inf) = 0: the first slots
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        const float e = s[j] == -INFINITY ? 0.f : exp2f(s[j] - m_new);
        sum += e;
        p[row * T::P_LD + sub * CPT + j] = kt_f32_to_bf16(e);
    }
#pragma unroll
    for (int o = 1; o < TPR; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    l = l * f + sum;
    m = m_new;
    if (sub == 0) alpha[row] = f;
}

// This warp's p . v over the chunk: its 16 heads x DPW output dims, rescaled first.
template <int L>
__device__ __forceinline__ void pv_chunk(float (&acc)[DPW / 8][4], const kt_u8 *tile, const kt_u16 *p,
                                         const float *alpha, int mf, int ds) {
    using T = lay<L>;
    const int lane = threadIdx.x & 31, mat = lane >> 3;
    rescale(acc, alpha, mf);
    const kt_u32 pa = kt_smem_addr(p) + (mf * 16 + (mat & 1) * 8 + (lane & 7)) * T::P_LD * 2 + (mat >> 1) * 16;
    const kt_u32 va = kt_smem_addr(tile) + ((mat & 1) * 8 + (lane & 7)) * T::KT_LD + (ds * DPW + (mat >> 1) * 8) * 2;
#pragma unroll
    for (int kk = 0; kk < CHUNK / 16; kk++) {
        kt_u32 af[4];
        kt_ldmatrix_x4(pa + kk * 32, af[0], af[1], af[2], af[3]);
#pragma unroll
        for (int nf = 0; nf < DPW / 8; nf += 2) {
            kt_u32 b0, b1, b2, b3;
            ldmatrix_x4_trans(va + kk * 16 * T::KT_LD + nf * 16, b0, b1, b2, b3);
            kt_mma_bf16(acc[nf], af, b0, b1);
            kt_mma_bf16(acc[nf + 1], af, b2, b3);
        }
    }
}

// PATH 2's chunk c: once chunk c has landed and every warp is done with chunk c - 1, the gather
// of chunk c + STAGES - 1 into c - 1's buffer, p's factors, q . k from the ring, the softmax,
// p . v from the ring (three barriers a chunk).
template <int L>
__device__ __forceinline__ void regs_chunk(const kt_mla_args &a, const int *ids, kt_u8 *raw, float *sp, kt_u16 *p,
                                           kt_u16 *fs, float *alpha, const kt_u32 (&qf)[MPW][lay<L>::KSTEPS][4],
                                           const float (&fq)[MPW], float (&acc)[MPW][DPW / 8][4], float &m, float &l,
                                           int c, int chunks) {
    using T = lay<L>;
    const int warp = threadIdx.x >> 5, mf = warp / WPM * MPW, wi = warp % WPM, ks = wi % KSPLIT, tg = wi / KSPLIT;
    kt_cp_async_wait<REGS ? STAGES - 2 : 0>();
    __syncthreads();
    if (c < 4) tr_mark(TR_CHUNK0 + 4 * c);
    const int next = c + STAGES - 1;
    if (next < chunks) gather<L>(a, list_ids{ids + next * CHUNK}, raw + (next % STAGES) * CHUNK * T::RAW_ROW);
    kt_cp_async_commit();
    const kt_u8 *buf = raw + (c % STAGES) * CHUNK * T::RAW_ROW;
    chunk_factors<L>(buf, fs);
    qk_regs<L>(qf, fq, buf, sp + ks * HPC * T::SP_LD, mf, ks, tg);
    __syncthreads();
    if (c < 4) tr_mark(TR_CHUNK0 + 4 * c + 1);
    softmax_chunk<L>(ids + c * CHUNK, sp, p, alpha, m, l);
    __syncthreads();
    if (c < 4) tr_mark(TR_CHUNK0 + 4 * c + 2);
    pv_regs<L>(acc, buf, p, fs, alpha, mf, wi);
    if (c < 4) tr_mark(TR_CHUNK0 + 4 * c + 3);
}

// ---------------------------------------------------------------- merging the splits by LSE

constexpr int ML_PER_LANE = KT_MLA_MAX_SPLITS / 32;

// 4 consecutive partial sums as floats (the combine kernel: the grid before, plain loads); bf16 ones
// widened by their bits (exact).
__device__ __forceinline__ float4 bf16x4_f32(uint2 u) {
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ float4 ld_part4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ld_part4(const kt_u16 *p) { return bf16x4_f32(*(const uint2 *)p); }
// The launch's (m, l) pairs, after its partial sums (kt_mla_ml_at's byte, as part_t elements).
__device__ __forceinline__ float *ml_of(const kt_mla_args &a) {
    return (float *)((part_t *)a.part + kt_mla_sums((long)a.B * a.SQ * a.HQ, a.nsplit));
}

// The splits' weights of partial row `row` (its nsplit (m, l) pairs at ml) as this warp's lane k
// sees them: w[i] = 2^(m - mx) of split k + 32 i (0 for a split that saw no slot); returns the
// row's sum over its splits (0: no slot at all), mx its largest m. The combine kernel's: the pairs
// are the grid before's, waited for: plain loads the compiler may issue ahead of the partial sums'.
__device__ __forceinline__ float row_weights(const float *ml, long row, int nsplit, float (&w)[ML_PER_LANE],
                                             float &mx) {
    const int lane = threadIdx.x & 31;
    float l[ML_PER_LANE], sum = 0.f;
    mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ML_PER_LANE; i++) {
        const int k = lane + 32 * i;
        const float2 m2 = k >= nsplit ? make_float2(0.f, 0.f) : *(const float2 *)(ml + (row + k) * 2);
        w[i] = m2.y > 0.f ? m2.x : -INFINITY, l[i] = m2.y > 0.f ? m2.y : 0.f;
        mx = fmaxf(mx, w[i]);
    }
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
    for (int i = 0; i < ML_PER_LANE; i++) {
        w[i] = l[i] > 0.f ? exp2f(w[i] - mx) : 0.f;
        sum += w[i] * l[i];
    }
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum;
}

// Head h's natural-log LSE from row_weights' mx and sum (+inf for a row with no slot) and the
// factor its weighted sums take: 1 / sum, with V4's sink.
__device__ __forceinline__ float row_lse(const kt_mla_args &a, int h, float mx, float sum, float &f) {
    f = 0.f;
    if (sum <= 0.f) return INFINITY;
    const float lse = (mx + log2f(sum)) * 0.6931471805599453f;
    f = 1.f / sum;
    if (a.sink) f /= 1.f + expf(((const float *)a.sink)[h] - lse);
    return lse;
}

__device__ __forceinline__ void fence_acq_rel() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

__device__ __forceinline__ kt_u32 ld_acquire(const unsigned *p) {
    kt_u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The fused merge (a.fuse != FUSE_NONE): the CTAs of head group (bs, h0) merge its splits
// themselves, with no combine kernel after the grid. Once its partials are out, a CTA takes a
// ticket on the group's arrival counter; FUSE_LAST: the CTA that arrives last merges every row;
// FUSE_ALL: every CTA waits for all to arrive (the host asks for it only where the whole grid is
// resident at once), then merges its share of the group's (head, 4 dims) items. The splits'
// weights go to shared memory (over the ring, free by then), computed by a warp a head. The
// counters are left zero for the next launch: by the last arrival (FUSE_LAST) or the last
// departure (FUSE_ALL).
constexpr int MERGE_ITEMS = HPC * KT_MLA_DV / 4;
// o += w v, where a split without slots (w 0) left its sums unwritten: they are discarded
__device__ __forceinline__ void add_weighted(float (&o)[4], float w, float4 v) {
    o[0] += w == 0.f ? 0.f : w * v.x, o[1] += w == 0.f ? 0.f : w * v.y;
    o[2] += w == 0.f ? 0.f : w * v.z, o[3] += w == 0.f ? 0.f : w * v.w;
}
// Another CTA's partials, loaded past L1 (which is not coherent between SMs): the raw partial sums
// of a load (8 bytes of bf16, or 16 of f32) and their widening; the load predicated inside its asm
// (zeros where off), so that a batch's loads are one straight run, each into its own registers,
// none waiting on another (a load under a C condition compiled to a branch a load, or to loads
// into one register, each widened before the next issued: an L2 round trip a split; bench/NOTES.md,
// mla25).
#if KT_PART
typedef uint2 raw_t;
__device__ __forceinline__ uint2 ld_cg_if(const kt_u16 *p, bool on) {
    uint2 u;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %3, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "@q ld.global.cg.v2.u32 {%0,%1}, [%2];\n\t}\n"
                 : "=r"(u.x), "=r"(u.y)
                 : "l"(p), "r"((int)on));
    return u;
}
__device__ __forceinline__ float4 widen(uint2 u) { return bf16x4_f32(u); }
#else
typedef uint4 raw_t;
__device__ __forceinline__ uint4 ld_cg_if(const float *p, bool on) {
    uint4 u;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\t"
                 "mov.b32 %3, 0;\n\t@q ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];\n\t}\n"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p), "r"((int)on));
    return u;
}
__device__ __forceinline__ float4 widen(uint4 u) {
    return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
}
#endif
__device__ __forceinline__ float2 ld_cg2_if(const float *p, bool on) {
    float2 v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %3, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "@q ld.global.cg.v2.f32 {%0,%1}, [%2];\n\t}\n"
                 : "=f"(v.x), "=f"(v.y)
                 : "l"(p), "r"((int)on));
    return v;
}
// A batch of IPT items x SPB splits a thread, loaded in one run before any is widened; the adds
// read the weights at clamped indices, 0 past the last split or item (add_weighted then discards
// the zeros loaded there): no branch between the loads or in the adds.
template <int IPT, int SPB> struct merge_batch {
    raw_t v[IPT][SPB];
    __device__ __forceinline__ void load(const part_t *part, long prow, int n, int i, int hi, int k0) {
#pragma unroll
        for (int r = 0; r < IPT; r++) {
            const int it = i + r * THREADS;
            const part_t *row =
                part + (prow + (long)(it / (KT_MLA_DV / 4)) * n + k0) * KT_MLA_DV + it % (KT_MLA_DV / 4) * 4;
#pragma unroll
            for (int j = 0; j < SPB; j++) v[r][j] = ld_cg_if(row + (long)j * KT_MLA_DV, it < hi && k0 + j < n);
        }
    }
    __device__ __forceinline__ void add(float (&o)[IPT][4], const float *wt, int n, int i, int hi, int k0) const {
#pragma unroll
        for (int r = 0; r < IPT; r++) {
            const int it = i + r * THREADS;
            const float *w = wt + min(it, hi - 1) / (KT_MLA_DV / 4) * n;
#pragma unroll
            for (int j = 0; j < SPB; j++) {
                const float wk = w[min(k0 + j, n - 1)];
                add_weighted(o[r], it < hi && k0 + j < n ? wk : 0.f, widen(v[r][j]));
            }
        }
    }
};
// row_weights' reduction over (m, l) pairs already loaded (m2[i]: split lane + 32 i's)
__device__ __forceinline__ float pair_weights(const float2 (&m2)[ML_PER_LANE], float (&w)[ML_PER_LANE], float &mx) {
    float l[ML_PER_LANE], sum = 0.f;
    mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ML_PER_LANE; i++) {
        w[i] = m2[i].y > 0.f ? m2[i].x : -INFINITY, l[i] = m2[i].y > 0.f ? m2[i].y : 0.f;
        mx = fmaxf(mx, w[i]);
    }
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
    for (int i = 0; i < ML_PER_LANE; i++) {
        w[i] = l[i] > 0.f ? exp2f(w[i] - mx) : 0.f;
        sum += w[i] * l[i];
    }
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum;
}
// The splits' weights of the group's heads into wt [HPC][n] and their factors into fh (CTA `me`
// == `writer` writes the lse), a warp a head, every head's (m, l) loads of a warp in one run before
// any shuffle (a head's loads after the previous head's shuffles were a round trip a head).
__device__ __forceinline__ void merge_weights(const kt_mla_args &a, const float *ml, long prow, int n, float *wt,
                                              float *fh, int bs, int h0, bool writer) {
    constexpr int NW = THREADS / 32, HPW = (HPC + NW - 1) / NW;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float2 m2[HPW][ML_PER_LANE];
#pragma unroll
    for (int r = 0; r < HPW; r++)
#pragma unroll
        for (int i = 0; i < ML_PER_LANE; i++) {
            const int h = warp + r * NW, k = lane + 32 * i;
            m2[r][i] = ld_cg2_if(ml + (prow + (long)h * n + k) * 2, h < HPC && k < n);
        }
#pragma unroll
    for (int r = 0; r < HPW; r++) {
        const int h = warp + r * NW;
        if (h >= HPC) continue;
        float w[ML_PER_LANE], mx, f;
        const float sum = pair_weights(m2[r], w, mx);
#pragma unroll
        for (int i = 0; i < ML_PER_LANE; i++)
            if (lane + 32 * i < n) wt[h * n + lane + 32 * i] = w[i];
        const float lse = row_lse(a, h0 + h, mx, sum, f);
        if (lane == 0) fh[h] = f;
        if (lane == 0 && writer) ((float *)a.lse)[((long)(bs / a.SQ) * a.HQ + h0 + h) * a.SQ + bs % a.SQ] = lse;
    }
}
// Items lo..hi of the group's (head, 4 dims) outputs, merged over the n splits by the batches of
// merge_batch<IPT, SPB>; the first batch is in flight while merge_weights works out the weights.
template <int IPT, int SPB>
__device__ __forceinline__ void merge_items(const kt_mla_args &a, const part_t *part, const float *ml, long prow, int n,
                                            float *wt, float *fh, int bs, int h0, bool writer, int lo, int hi) {
    const int i0 = lo + threadIdx.x;
    merge_batch<IPT, SPB> b;
    b.load(part, prow, n, i0, hi, 0);
    merge_weights(a, ml, prow, n, wt, fh, bs, h0, writer);
    __syncthreads();
    for (int i = i0; i < hi; i += IPT * THREADS) {
        float o[IPT][4] = {};
        for (int k0 = 0; k0 < n; k0 += SPB) {
            if (i != i0 || k0 != 0) b.load(part, prow, n, i, hi, k0);
            b.add(o, wt, n, i, hi, k0);
        }
#pragma unroll
        for (int r = 0; r < IPT; r++) {
            const int it = i + r * THREADS, h = it / (KT_MLA_DV / 4), d = it % (KT_MLA_DV / 4) * 4;
            if (it >= hi) continue;
            const float f = fh[h];
            kt_u16 *out = (kt_u16 *)a.out + ((long)bs * a.HQ + h0 + h) * KT_MLA_DV + d;
            *(uint2 *)out = make_uint2(bf16x2(o[r][0] * f, o[r][1] * f), bf16x2(o[r][2] * f, o[r][3] * f));
        }
    }
}
// The arrival: thread 0 alone, after the CTA's barrier, releases the partials the barrier ordered
// before it (fence.acq_rel is cumulative), then takes its ticket; FUSE_LAST's acquire is thread 0's
// fence.acq_rel after its ticket, FUSE_ALL's its ld.acquire spin, then the barrier (no fence.sc a
// thread: MEMBAR.SC.GPU).
__device__ __forceinline__ void fused_merge(const kt_mla_args &a, kt_u8 *smem, int bs, int h0) {
    float *wt = (float *)smem, *fh = wt + HPC * a.nsplit; // weights [HPC][nsplit], 1/sum [HPC], ticket
    unsigned *cnt = (unsigned *)a.tick + ((long)bs * (a.HQ / 16) + h0 / 16) * 2;
    const int n = a.nsplit;
    const bool all = a.fuse == KT_MLA_FUSE_ALL;
    kt_cp_async_wait<0>();
    __syncthreads();
    tr_mark(TR_FENCED);
    if (threadIdx.x == 0) {
        fence_acq_rel(); // release: the partials the barrier ordered before thread 0
        if (all) {       // arrive (no ticket wanted: a RED), then wait for the others
            atomicAdd(cnt, 1u);
            while (ld_acquire(cnt) < (unsigned)n) __nanosleep(32);
        } else {
            ((unsigned *)fh)[HPC] = atomicAdd(cnt, 1u);
            fence_acq_rel(); // acquire: the others' partials after their arrivals
        }
    }
    __syncthreads();
    tr_mark(TR_ARRIVED);
    // FUSE_ALL: CTA `split` merges share `split` and split 0 writes the lse; FUSE_LAST: the last
    // to arrive merges all
    const int me = all ? (int)blockIdx.x : (int)((const unsigned *)fh)[HPC];
    if (!all && me != n - 1) return;
    const part_t *part = (const part_t *)a.part;
    const float *ml = ml_of(a);
    const long prow = ((long)bs * a.HQ + h0) * n;
    const int share = all ? (MERGE_ITEMS + n - 1) / n : MERGE_ITEMS;
    const int lo = all ? min(me * share, MERGE_ITEMS) : 0, hi = min(lo + share, MERGE_ITEMS);
    const bool writer = me == (all ? 0 : n - 1); // one CTA writes the lse
    // a thread's batch: 48 registers of raw sums (24 loads of bf16: 32 spilled at WPM 8), or 64 (16
    // of f32), as one item over all of a B = 1 query's 16-20 splits, or 4 items where the splits are
    // few (FUSE_LAST at B = 64's 4)
    constexpr int LOADS = KT_PART ? 24 : 16;
    if (n <= LOADS / 4)
        merge_items<4, LOADS / 4>(a, part, ml, prow, n, wt, fh, bs, h0, writer, lo, hi);
    else
        merge_items<1, LOADS>(a, part, ml, prow, n, wt, fh, bs, h0, writer, lo, hi);
    tr_mark(TR_MERGED);
    if (!all) { // every other CTA has arrived and gone
        if (threadIdx.x == 0) cnt[0] = 0;
        return;
    }
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(cnt + 1, 1u) == (unsigned)n - 1) cnt[0] = 0, cnt[1] = 0;
}

// Whether a launch is fused and of one split: then the split kernel writes the output itself (PATHs
// 2 and 3), with no partials.
__device__ __forceinline__ bool direct(const kt_mla_args &a) {
    return FUSE && REGS && a.fuse != KT_MLA_FUSE_NONE && a.nsplit == 1;
}

// The split kernel's body for layout L.
template <int L> __device__ __forceinline__ void split_kernel(const kt_mla_args &a) {
    using T = lay<L>;
    extern __shared__ __align__(128) kt_u8 smem[];
    kt_u8 *raw = smem, *tile = smem + T::RAW_BYTES;
    float *sp = (float *)(tile + T::TILE_BYTES);
    kt_u16 *p = (kt_u16 *)((kt_u8 *)sp + T::SP_BYTES), *fs = (kt_u16 *)((kt_u8 *)p + T::P_BYTES);
    float *alpha = (float *)((kt_u8 *)fs + T::F_BYTES);
    int *ids = (int *)(alpha + HPC);
    const int split = blockIdx.x, h0 = blockIdx.y * HPC, bs = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int mf = warp / WPM * MPW, wi = warp % WPM, ks = wi % KSPLIT, tg = wi / KSPLIT; // mf: the first of MPW
    constexpr bool MX = KT_PATH == 1 && L == KT_MLA_V4; // sm_120a's block-scaled q . k
    const int slots = kt_mla_slots(L, a.TOPK);
    const int begin = split * SPLIT, end = min(begin + SPLIT, slots);
    const long prow = ((long)bs * a.HQ + h0) * a.nsplit + split; // partial row of head h0
    part_t *part = (part_t *)a.part;
    float *ml = ml_of(a);
    const unsigned trn = tr_begin();
    kt_wait_producer(); // q and the index lists come from the kernels before
    tr_mark(TR_WAITED);
    kt_allow_consumer();
    // Three loads before the first mma, all in one round trip: q's fragments (PATH 2, 3), the
    // slot list with its lengths, and the same entries again for the first STAGES - 1 chunks'
    // gathers, which each gathering thread starts from its own loads, with no barrier before.
    const kt_u16 *q16 = (const kt_u16 *)a.q + ((long)bs * a.HQ + h0 + mf * 16) * T::DQK;
    kt_u32 qf[MPW][T::KSTEPS][4];
#pragma unroll
    for (int j = 0; j < MPW && REGS; j++) fetch_q_regs<L>(q16 + j * 16 * T::DQK, ks, qf[j]);
    const int chunks = (end - begin + CHUNK - 1) / CHUNK;
#pragma unroll
    for (int c = 0; c < STAGES - 1; c++) {
        const int from = begin + c * CHUNK;
        if (c < chunks)
            gather<L>(
                a, [&](int j) { return slot_id<L>(a, bs, from + j, end); }, raw + c * CHUNK * T::RAW_ROW);
        kt_cp_async_commit();
    }
    float m = -INFINITY, l = 0.f;
    int used = 0; // the split's slot ids, each entry loaded with its list's length (one round trip)
#pragma unroll 4
    for (int j = threadIdx.x; j < SPLIT; j += THREADS) {
        const int e = slot_id<L>(a, bs, begin + j, end);
        ids[j] = e;
        used |= e >= 0;
    }
    const bool any = __syncthreads_or(used);
    tr_mark(TR_LISTED);
    if (any) {
        // q's A fragments of this warp's 16 (MPW x 16) heads and head-dim slice, kept in registers
#if KT_PATH == 1
        q_mx qm;
        if (L == KT_MLA_V4) load_q_mx(q16, ks, qm);
#endif
        float fq[MPW];
        const kt_u32 *q = (const kt_u32 *)q16;
#pragma unroll
        for (int j = 0; j < MPW; j++) fq[j] = REGS ? scale_q_regs<L>(ks, qf[j]) : 1.f;
#pragma unroll
        for (int kk = 0; kk < T::KSTEPS && !MX && !REGS; kk++) {
            const int c = (ks * T::KSLICE + kk * 16 + 2 * t) / 2;
            qf[0][kk][0] = q[g * T::DQK / 2 + c];
            qf[0][kk][1] = q[(g + 8) * T::DQK / 2 + c];
            qf[0][kk][2] = q[g * T::DQK / 2 + c + 4];
            qf[0][kk][3] = q[(g + 8) * T::DQK / 2 + c + 4];
        }
        float acc[MPW][DPW / 8][4];
#pragma unroll
        for (int j = 0; j < MPW; j++)
#pragma unroll
            for (int nf = 0; nf < DPW / 8; nf++) acc[j][nf][0] = acc[j][nf][1] = acc[j][nf][2] = acc[j][nf][3] = 0.f;
        for (int c = 0; c < chunks && REGS; c++)
            regs_chunk<L>(a, ids, raw, sp, p, fs, alpha, qf, fq, acc, m, l, c, chunks);
        for (int c = 0; c < chunks && !REGS; c++) {
            const int next = c + STAGES - 1;
            if (next < chunks) gather<L>(a, list_ids{ids + next * CHUNK}, raw + (next % STAGES) * CHUNK * T::RAW_ROW);
            kt_cp_async_commit();
            kt_cp_async_wait<STAGES - 1>();
            __syncthreads();
            dequantise<L>(raw + (c % STAGES) * CHUNK * T::RAW_ROW, tile);
            __syncthreads();
#if KT_PATH == 1
            if (MX)
                qk_partial_mx(qm, raw + (c % STAGES) * CHUNK * T::RAW_ROW, tile, sp + ks * HPC * T::SP_LD, mf, ks, tg);
            else
#endif
                qk_partial<L>(qf[0], tile, sp + ks * HPC * T::SP_LD, mf, ks, tg);
            __syncthreads();
            softmax_chunk<L>(ids + c * CHUNK, sp, p, alpha, m, l);
            __syncthreads();
            pv_chunk<L>(acc[0], tile, p, alpha, mf, wi);
        }
        // (the combine reads a row's sums only where its l > 0)
        if (direct(a)) {     // the one split of a fused launch: the rows' factors through alpha (once every warp
            __syncthreads(); // has rescaled by it), the output straight
            if (threadIdx.x % TPR == 0) row_lse(a, h0 + threadIdx.x / TPR, m, l, alpha[threadIdx.x / TPR]);
            __syncthreads();
        }
#pragma unroll
        for (int j = 0; j < MPW && REGS; j++) {
            const int r = (mf + j) * 16 + g;
            if (direct(a))
                write_regs<L>(acc[j], (kt_u16 *)a.out + ((long)bs * a.HQ + h0 + r) * KT_MLA_DV, KT_MLA_DV, wi, alpha[r],
                              alpha[r + 8]);
            else
                write_regs<L>(acc[j], part + (prow + (long)r * a.nsplit) * KT_MLA_DV, a.nsplit * KT_MLA_DV, wi, 1.f,
                              1.f);
        }
        tr_mark(TR_WRITTEN);
#pragma unroll
        for (int nf = 0; nf < DPW / 8 && !REGS; nf++) {
            const int d = wi * DPW + nf * 8 + 2 * t;
            part_t *r0 = part + (prow + (long)(mf * 16 + g) * a.nsplit) * KT_MLA_DV + d;
            store2(r0, acc[0][nf][0], acc[0][nf][1]);
            store2(r0 + 8L * a.nsplit * KT_MLA_DV, acc[0][nf][2], acc[0][nf][3]);
        }
    } else {
        kt_cp_async_wait<0>(); // the first gathers (zero fills) land before the CTA leaves
        for (int i = threadIdx.x; i < HPC * KT_MLA_DV / 2 && direct(a); i += THREADS) // no slot: out 0
            ((kt_u32 *)a.out)[((long)bs * a.HQ + h0) * KT_MLA_DV / 2 + i] = 0u;
    }
    // every softmax thread of a head row holds its (m, l); the first writes them (direct: the lse)
    const int row = threadIdx.x / TPR;
    if (direct(a)) {
        float f;
        if (threadIdx.x % TPR == 0)
            ((float *)a.lse)[((long)(bs / a.SQ) * a.HQ + h0 + row) * a.SQ + bs % a.SQ] = row_lse(a, h0 + row, m, l, f);
        tr_end(trn);
        return;
    }
    if (threadIdx.x % TPR == 0) *(float2 *)(ml + (prow + (long)row * a.nsplit) * 2) = make_float2(m, l);
    if (FUSE && a.fuse != KT_MLA_FUSE_NONE) fused_merge(a, smem, bs, h0);
    tr_end(trn);
}

// PATH 2's shared memory leaves room for several CTAs an SM: the registers are budgeted so that
// they do not stop it (168 a thread at WPM 4: 3 CTAs of 128 threads; 128 at WPM 8: 2 of 256;
// fewer spill); MPW 2 holds twice the q fragments and sums: one CTA an SM, 255 registers.
constexpr int MIN_CTAS = REGS ? 65536 / (THREADS * (MPW == 2 ? 255 : WPM == 4 ? 168 : 128)) : 1; // WPM 16: 1 of 512
extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS) mla_split_v32(const kt_mla_args a) {
    split_kernel<KT_MLA_V32>(a);
}
extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS) mla_split_v4(const kt_mla_args a) {
    split_kernel<KT_MLA_V4>(a);
}

// Merges the splits of head row (bs, h) by LSE into out and lse, with V4's sink (a.fuse ==
// FUSE_NONE). Block: 128 threads, 4 output dims each; grid (HQ, B * SQ). Every warp reduces the
// splits' (m, l) itself (row_weights) while the first G splits' partial sums are in flight, and
// a split's weight reaches the lanes by a shuffle: no barrier, no load waiting on another. G 8
// (few registers: a wave of CTAs at large B) or 32 (many splits at small B: fewer round trips).
// Launched as a programmatic dependent of the split kernel.

// Split k0 + i's partial sums of this thread's 4 dims (zeros past the last split); a split
// without slots left them unwritten: its weight 0 discards them.
template <int G> __device__ __forceinline__ void load_partials(float4 (&v)[G], const part_t *row, int k0, int nsplit) {
#pragma unroll
    for (int i = 0; i < G; i++)
        v[i] = k0 + i < nsplit ? ld_part4(row + (long)(k0 + i) * KT_MLA_DV) : make_float4(0.f, 0.f, 0.f, 0.f);
}

template <int G> __device__ __forceinline__ void combine_row(const kt_mla_args &a) {
    static_assert(32 % G == 0, "a group's weights lie in one register of the lanes");
    const int h = blockIdx.x, bs = blockIdx.y, d = threadIdx.x * 4;
    const float *ml = ml_of(a);
    const long row = ((long)bs * a.HQ + h) * a.nsplit;
    const part_t *sums = (const part_t *)a.part + row * KT_MLA_DV + d;
    tr_comb tc;
    tc.begin();
    kt_wait_producer();
    tc.mark(1);
    float4 v[G];
    load_partials<G>(v, sums, 0, a.nsplit);
    float w[ML_PER_LANE], mx;
    const float sum = row_weights(ml, row, a.nsplit, w, mx);
    tc.mark(2);
    // the next kernel's launch overlaps this tail (it still waits for this grid to complete); not
    // at the start, where its CTAs would take the slots of this grid's later ones at large B
    kt_allow_consumer();
    float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int q = 0; q < ML_PER_LANE; q++) // splits 32 q ...: their weights are the lanes' w[q]
#pragma unroll
        for (int g0 = 0; g0 < 32; g0 += G) { // ... G at a time
            if (32 * q + g0 >= a.nsplit) break;
            if (q || g0) load_partials<G>(v, sums, 32 * q + g0, a.nsplit);
#pragma unroll
            for (int i = 0; i < G; i++) {
                add_weighted(o, __shfl_sync(0xffffffffu, w[q], g0 + i), v[i]);
            }
        }
    float f;
    const float lse = row_lse(a, h, mx, sum, f);
    kt_u16 *out = (kt_u16 *)a.out + ((long)bs * a.HQ + h) * KT_MLA_DV + d;
    *(uint2 *)out = make_uint2(bf16x2(o[0] * f, o[1] * f), bf16x2(o[2] * f, o[3] * f));
    if (threadIdx.x == 0) ((float *)a.lse)[((long)(bs / a.SQ) * a.HQ + h) * a.SQ + bs % a.SQ] = lse;
    tc.end();
}

extern "C" __global__ void __launch_bounds__(128) mla_combine(const kt_mla_args a) { combine_row<8>(a); }
extern "C" __global__ void __launch_bounds__(128) mla_combine_wide(const kt_mla_args a) { combine_row<32>(a); }

// ---------------------------------------------------------------- references and baseline

// The float64 reference of head row (bs, h), written into ref (out [B,SQ,HQ,512], then lse
// [B,HQ,SQ]): every slot's score exactly, the LSE, then the weighted values. Block of 128
// threads per row; grid (HQ, B * SQ).
template <int L> __device__ __forceinline__ void reference_row(const kt_mla_args &a, double *ref) {
    constexpr int MAX_SLOTS = 2048 + KT_MLA_V4_WINDOW;
    __shared__ double sc[MAX_SLOTS], red[128];
    const int h = blockIdx.x, bs = blockIdx.y, tid = threadIdx.x, dqk = kt_mla_dqk(L);
    const int slots = kt_mla_slots(L, a.TOPK);
    const kt_u16 *qb = (const kt_u16 *)a.q + ((long)bs * a.HQ + h) * dqk;
    double mx = -INFINITY;
    for (int j = tid; j < slots; j += 128) {
        const kt_u8 *cache;
        const long id = slot_token<L>(a, bs, j, cache);
        double s = -INFINITY;
        if (id >= 0) {
            s = 0;
            for (int d = 0; d < dqk; d++) s += (double)kt_bf16_to_f32(qb[d]) * kt_mla_value(L, cache, id, d);
            s *= (double)kt_mla_sm_scale(L);
        }
        sc[j] = s;
        mx = fmax(mx, s);
    }
    red[tid] = mx;
    __syncthreads();
    for (int k = 64; k > 0; k /= 2) {
        if (tid < k) red[tid] = fmax(red[tid], red[tid + k]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    double sum = 0;
    for (int j = tid; j < slots; j += 128) sum += sc[j] == -INFINITY ? 0.0 : exp(sc[j] - mx);
    red[tid] = sum;
    __syncthreads();
    for (int k = 64; k > 0; k /= 2) {
        if (tid < k) red[tid] += red[tid + k];
        __syncthreads();
    }
    sum = red[0];
    const double lse = sum > 0 ? mx + log(sum) : INFINITY;
    double f = sum > 0 ? 1 / sum : 0;
    if (sum > 0 && a.sink) f /= 1 + exp((double)((const float *)a.sink)[h] - lse);
    for (int d = tid; d < KT_MLA_DV; d += 128) {
        double o = 0;
        for (int j = 0; j < slots; j++) {
            if (sc[j] == -INFINITY) continue;
            const kt_u8 *cache;
            const long id = slot_token<L>(a, bs, j, cache);
            o += exp(sc[j] - mx) * kt_mla_value(L, cache, id, d);
        }
        ref[((long)bs * a.HQ + h) * KT_MLA_DV + d] = o * f;
    }
    const int b = bs / a.SQ, s = bs % a.SQ;
    if (tid == 0) ref[(long)a.B * a.SQ * a.HQ * KT_MLA_DV + ((long)b * a.HQ + h) * a.SQ + s] = lse;
}

extern "C" __global__ void __launch_bounds__(128) mla_reference_v32(const kt_mla_args a, double *ref) {
    reference_row<KT_MLA_V32>(a, ref);
}
extern "C" __global__ void __launch_bounds__(128) mla_reference_v4(const kt_mla_args a, double *ref) {
    reference_row<KT_MLA_V4>(a, ref);
}

// The straightforward kernel `kt bench` times as the in-run baseline (no C library has
// sparse MLA decode): one block per (request, query, head) like the per-(batch, head) peers,
// the slots one after another, each score a block-wide sum, an online softmax in f32. Block
// of 128 threads; grid (HQ, B * SQ).
template <int L> __device__ __forceinline__ void naive_row(const kt_mla_args &a) {
    __shared__ float red[4];
    const int h = blockIdx.x, bs = blockIdx.y, tid = threadIdx.x, dqk = kt_mla_dqk(L);
    const kt_u16 *q = (const kt_u16 *)a.q + ((long)bs * a.HQ + h) * dqk;
    const int slots = kt_mla_slots(L, a.TOPK);
    float m = -INFINITY, l = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
    for (int j = 0; j < slots; j++) {
        const kt_u8 *cache;
        const long id = slot_token<L>(a, bs, j, cache);
        if (id < 0) continue;
        float v[5], s = 0.f;
        for (int k = 0; k < 5; k++) {
            const int d = tid + 128 * k;
            v[k] = d < dqk ? (float)kt_mla_value(L, cache, id, d) : 0.f;
            if (d < dqk) s += kt_bf16_to_f32(q[d]) * v[k];
        }
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        __syncthreads();
        if ((tid & 31) == 0) red[tid >> 5] = s;
        __syncthreads();
        s = (red[0] + red[1] + red[2] + red[3]) * kt_mla_sm_scale(L);
        const float m_new = fmaxf(m, s), f = expf(m - m_new), e = expf(s - m_new);
        l = l * f + e;
        for (int k = 0; k < 4; k++) o[k] = o[k] * f + e * v[k];
        m = m_new;
    }
    float lse = INFINITY, f = 0.f;
    if (l > 0.f) {
        lse = m + logf(l);
        f = 1.f / l;
        if (a.sink) f /= 1.f + expf(((const float *)a.sink)[h] - lse);
    }
    kt_u16 *out = (kt_u16 *)a.out + ((long)bs * a.HQ + h) * KT_MLA_DV;
    for (int k = 0; k < 4; k++) out[tid + 128 * k] = kt_f32_to_bf16(o[k] * f);
    const int b = bs / a.SQ, s = bs % a.SQ;
    if (tid == 0) ((float *)a.lse)[((long)b * a.HQ + h) * a.SQ + s] = lse;
}

extern "C" __global__ void __launch_bounds__(128) mla_naive_v32(const kt_mla_args a) { naive_row<KT_MLA_V32>(a); }
extern "C" __global__ void __launch_bounds__(128) mla_naive_v4(const kt_mla_args a) { naive_row<KT_MLA_V4>(a); }
