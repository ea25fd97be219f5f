// memory.cu — how fast the SMs pull bytes that are already on chip: from L2 (a buffer L2
// holds, read with L1 bypassed) and from the shared memory of the other CTAs of their cluster
// (distributed shared memory). `kt bench` times both once per run and prints them beside the
// copy floor: a decode GEMM whose CTAs each re-read the same weights from L2 is bound by the
// first; one whose cluster reads a weight tile from L2 once and shares it, by the second.
// Compiled at run time by NVRTC like ceiling.cu: kt_compile_source("memory.cu").
#include "kt_device.cuh"

// 16-byte words each thread keeps in flight.
#define KT_PROBE_UNROLL 4

// Reads the `words` 16-byte words of buf (a power of two) `passes` times, grid-stride, each
// pass from another start so that consecutive passes of a CTA touch other lines; out[thread]:
// an XOR of what it read, so no load is dead.
extern "C" __global__ void kt_l2_read(const uint4 *buf, unsigned words, int passes, unsigned *out) {
    const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    unsigned x = 0;
    for (int p = 0; p < passes; p++) {
        const unsigned start = (unsigned)p * (words / 8 + 4099);
        for (unsigned i = tid; i < words; i += KT_PROBE_UNROLL * stride) {
            uint4 v[KT_PROBE_UNROLL];
#pragma unroll
            for (int u = 0; u < KT_PROBE_UNROLL; u++)
                v[u] = kt_ldg_stream16(buf + ((start + i + u * stride) & (words - 1)));
#pragma unroll
            for (int u = 0; u < KT_PROBE_UNROLL; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
    }
    out[tid] = x;
}

#if __CUDA_ARCH__ >= 900 // thread-block clusters: not on sm_89, where only the L2 rate is probed
// Words of shared memory each CTA offers its cluster (32 KB).
#define KT_PROBE_SMEM_WORDS 2048

// Each CTA fills its shared memory, then every thread reads `words` 16-byte words (a multiple
// of KT_PROBE_UNROLL) from the other CTAs of its cluster in turn; out[thread]: an XOR of them.
template <int CLUSTER> __device__ __forceinline__ void dsmem_read(int words, unsigned *out) {
    __shared__ __align__(16) uint4 tile[KT_PROBE_SMEM_WORDS];
    const kt_u32 rank = kt_cluster_rank();
    for (int i = threadIdx.x; i < KT_PROBE_SMEM_WORDS; i += blockDim.x)
        tile[i] = make_uint4(i, rank, blockIdx.x, 0x3c3c3c3cu);
    kt_cluster_sync();
    const kt_u32 base = kt_smem_addr(tile);
    unsigned x = 0;
    for (int it = 0; it < words / KT_PROBE_UNROLL; it++) {
        const kt_u32 peer = kt_cluster_map(base, (rank + 1 + it % (CLUSTER - 1)) % CLUSTER);
        float4 v[KT_PROBE_UNROLL];
#pragma unroll
        for (int u = 0; u < KT_PROBE_UNROLL; u++)
            v[u] = kt_cluster_load4(
                peer + ((threadIdx.x + (it * KT_PROBE_UNROLL + u) * blockDim.x) % KT_PROBE_SMEM_WORDS) * 16);
#pragma unroll
        for (int u = 0; u < KT_PROBE_UNROLL; u++)
            x ^= __float_as_uint(v[u].x) ^ __float_as_uint(v[u].y) ^ __float_as_uint(v[u].z) ^ __float_as_uint(v[u].w);
    }
    kt_cluster_sync(); // no CTA leaves while the others still read its shared memory
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) kt_dsmem_read_2(int words, unsigned *out) {
    dsmem_read<2>(words, out);
}
extern "C" __global__ void __cluster_dims__(4, 1, 1) kt_dsmem_read_4(int words, unsigned *out) {
    dsmem_read<4>(words, out);
}
extern "C" __global__ void __cluster_dims__(8, 1, 1) kt_dsmem_read_8(int words, unsigned *out) {
    dsmem_read<8>(words, out);
}
#endif
