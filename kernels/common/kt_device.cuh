// kt_device.cuh — device helpers shared by every family, written for what sm_120 has
// (and sm_89/sm_90 run): cp.async, ldmatrix, mma.sync e4m3 m16n8k32, fp8/bf16
// conversions. Compiled by NVRTC at run time; no CUDA headers are needed.
#pragma once

typedef unsigned char kt_u8;
typedef unsigned short kt_u16;
typedef unsigned int kt_u32;
typedef unsigned long long kt_u64;

// Shared-memory address of a generic pointer, for the PTX that takes .shared addresses.
__device__ __forceinline__ kt_u32 kt_smem_addr(const void *p) { return (kt_u32)__cvta_generic_to_shared(p); }

// 16-byte global->shared copy that bypasses L1; src_bytes < 16 zero-fills the rest.
__device__ __forceinline__ void kt_cp_async16(kt_u32 dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// 4-byte global->shared copy (scales); src_bytes 0 writes zero.
__device__ __forceinline__ void kt_cp_async4(kt_u32 dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// 16 bytes from global memory straight into registers, not kept in L1 (streamed weights).
// Issued where it is written, e.g. before a PDL wait: ptxas sinks a volatile ld.global.nc
// below griddepcontrol.wait (ACQBULK), a plain ld.global it leaves in place.
__device__ __forceinline__ uint4 kt_ldg_stream16(const void *p) {
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// 8 and 4 bytes the same way (MoE's weight fragments: one mma k-step of a row per lane).
__device__ __forceinline__ uint2 kt_ldg_stream8(const void *p) {
    uint2 v;
    asm volatile("ld.global.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ kt_u32 kt_ldg_stream4(const void *p) {
    kt_u32 v;
    asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}

// Non-binding prefetch of the 128-byte line at p into L2.
__device__ __forceinline__ void kt_prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

__device__ __forceinline__ void kt_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void kt_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices (8 rows of 16 bytes each) from shared memory; lane l gives
// the row address of matrix l/8.
__device__ __forceinline__ void kt_ldmatrix_x4(kt_u32 addr, kt_u32 &r0, kt_u32 &r1, kt_u32 &r2, kt_u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void kt_ldmatrix_x2(kt_u32 addr, kt_u32 &r0, kt_u32 &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}

// D = A(16x32 e4m3, row) * B(32x8 e4m3, col) + D, f32 accumulators.
__device__ __forceinline__ void kt_mma_e4m3(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A * B (the accumulator starts from zero: no register moves to clear it).
__device__ __forceinline__ void kt_mma_e4m3_first(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

// D = A(16x16 bf16, row) * B(16x8 bf16, col) + D, f32 accumulators.
__device__ __forceinline__ void kt_mma_bf16(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A(16x16 f16, row) * B(16x8 f16, col) + D, f32 accumulators.
__device__ __forceinline__ void kt_mma_f16(float (&d)[4], const kt_u32 (&a)[4], kt_u32 b0, kt_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// a * b on two bf16 lanes, rounded to nearest (exact where b is a power of two and the product
// is neither tiny nor huge; subnormal inputs are kept).
__device__ __forceinline__ kt_u32 kt_mul_bf16x2(kt_u32 a, kt_u32 b) {
    kt_u32 d;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// Two e4m3 codes of w as bf16x2 of their values times 2^-120, exactly (subnormal codes too):
// SEL (prmt) puts each chosen byte in a 16-bit lane with its sign replicated above it, << 4
// lines e4m3's exponent and mantissa up under bf16's, the mask keeps them and the sign. 3
// instructions per 2 codes, for the bf16 mma on raw codes where there is no e4m3 mma.sync (sm_90).
template <kt_u32 SEL> __device__ __forceinline__ kt_u32 kt_e4m3x2_bf16(kt_u32 w) {
    kt_u32 x;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(x) : "r"(w), "r"(0u), "n"(SEL));
    return (x << 4) & 0x87f087f0u;
}
constexpr kt_u32 KT_SEL_01 = 0x9180, KT_SEL_23 = 0xb3a2; // codes (0, 1), (2, 3) of a word
constexpr kt_u32 KT_SEL_02 = 0xa280, KT_SEL_13 = 0xb391; // codes (0, 2), (1, 3)

// Two e4m3 codes (low byte first) -> f16x2, exactly (one F2FP on sm_90).
__device__ __forceinline__ kt_u32 kt_e4m3x2_f16x2(kt_u16 v) {
    kt_u32 h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(v));
    return h;
}

// Two mma k-steps in fp8_gemm DIRECT's k order, from 16-byte loads: lo / hi hold 16 bytes of
// weight rows g / g+8 and x the tokens' 16 bytes of the same k (lane t's bytes 16t..16t+15 of a
// 64-byte piece). k-step h feeds mma k 4t+e from byte 8h+e and 16+4t+e from byte 8h+4+e, the
// same order for both operands, so the sums are the k-block's. first: d starts from zero.
__device__ __forceinline__ void kt_mma_e4m3_x16(float (&d)[4], const uint4 &lo, const uint4 &hi, const uint4 &x,
                                                bool first) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const kt_u32 a[4] = {h ? lo.z : lo.x, h ? hi.z : hi.x, h ? lo.w : lo.y, h ? hi.w : hi.y};
        if (first && h == 0)
            kt_mma_e4m3_first(d, a, x.x, x.y);
        else
            kt_mma_e4m3(d, a, h ? x.z : x.x, h ? x.w : x.y);
    }
}

// Round-to-nearest-even float -> bf16 bits (NaN stays NaN), the same rule as the host.
__device__ __forceinline__ kt_u16 kt_f32_to_bf16(float x) {
    kt_u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kt_u16)(u >> 16);
}

__device__ __forceinline__ float kt_bf16_to_f32(kt_u16 b) { return __uint_as_float(((kt_u32)b) << 16); }

// Two floats -> two e4m3 codes (round to nearest even, saturating to +-448), lo in the low byte.
__device__ __forceinline__ kt_u16 kt_f32x2_to_e4m3x2(float lo, float hi) {
    kt_u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// act_quant's rule for a 128-group (the fused quantising GEMM and MoE's gate+up epilogue): its scale from its max |x|,
// and the codes e4m3(x / scale) of four of its values packed low to high, x / scale by one Newton step on x * inv (inv
// = 1 / scale): the correctly rounded quotient but for rare last-bit cases, without the division's slow-path call.
__device__ __forceinline__ float kt_quant_scale(float amax) { return fmaxf(amax, 1e-10f) / 448.0f; }
__device__ __forceinline__ kt_u32 kt_quant_codes4(const float *x, float scale, float inv) {
    float q[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float q0 = x[e] * inv;
        q[e] = fmaf(fmaf(-q0, scale, x[e]), inv, q0);
    }
    return kt_f32x2_to_e4m3x2(q[0], q[1]) | ((kt_u32)kt_f32x2_to_e4m3x2(q[2], q[3]) << 16);
}

// Exact e4m3 -> double by its definition (the reference path: no hardware conversion).
__device__ __forceinline__ double kt_e4m3_to_f64(kt_u8 c) {
    int exp = (c >> 3) & 15, man = c & 7;
    double v = exp ? ldexp(1.0 + man / 8.0, exp - 7) : ldexp(man / 8.0, -6);
    return (c & 0x80) ? -v : v;
}

// Thread-block clusters (sm_90+, sm_120): rank in the cluster, full cluster barriers (the
// release/acquire one makes each CTA's shared-memory writes visible to the others) or its
// two halves, loads from another CTA's shared memory (distributed shared memory), and
// stores into it that complete on an mbarrier there, so that the receiver alone waits.
__device__ __forceinline__ kt_u32 kt_cluster_rank() {
    kt_u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ void kt_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// A cluster barrier that orders nothing: for a CTA's last one, which only keeps its shared
// memory alive until the others have read it. Their reads are complete when they arrive (each
// thread consumed the values it loaded before), and a release there would also wait for this
// CTA's global stores to be performed.
__device__ __forceinline__ void kt_cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}

// Address of the same shared-memory location in CTA `rank` of this cluster.
__device__ __forceinline__ kt_u32 kt_cluster_map(kt_u32 smem_addr, kt_u32 rank) {
    kt_u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(rank));
    return r;
}

__device__ __forceinline__ float4 kt_cluster_load4(kt_u32 cluster_addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(cluster_addr));
    return v;
}

// Makes this CTA's initialised mbarriers visible to the cluster and arrives at the cluster
// barrier without ordering anything else (no wait for outstanding memory operations).
__device__ __forceinline__ void kt_cluster_arrive_after_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\nbarrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}

// Waits until every CTA of the cluster has arrived.
__device__ __forceinline__ void kt_cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

// An mbarrier whose phase completes after one arrival and `bytes` of transactions: this
// thread's arrival is made here, the bytes come from other CTAs' kt_cluster_push4.
__device__ __forceinline__ void kt_mbar_init_expect(kt_u32 bar, kt_u32 bytes) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

// Stores 16 bytes at cluster address `dst` (another CTA's shared memory) and counts them
// on that CTA's mbarrier `bar` (a cluster address too) when they have landed.
__device__ __forceinline__ void kt_cluster_push4(kt_u32 dst, float4 v, kt_u32 bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1,%2,%3,%4}, [%5];\n" ::"r"(dst),
                 "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
                 : "memory");
}

// Waits for the phase of parity `parity` of this CTA's mbarrier `bar` to complete; what the
// cluster's pushes wrote is then visible.
__device__ __forceinline__ void kt_mbar_wait(kt_u32 bar, kt_u32 parity) {
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

// Programmatic dependent launch (sm_90+): wait until the kernel before this one in the
// stream has finished and its writes are visible (a no-op when launched without PDL), and
// let the next kernel start launching (its own wait still orders it after this one).
__device__ __forceinline__ void kt_wait_producer() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void kt_allow_consumer() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }
