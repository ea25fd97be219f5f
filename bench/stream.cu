// stream.cu — the DRAM-read probe of `kt bench stream` (bench/stream.c): one kernel that only
// reads `words` 16-byte words (grid-stride, 4 loads in flight a thread) and keeps an XOR of them,
// timed as `kt bench` times a variant, gives the least time any kernel that must read that many
// bytes in one launch can take: the launch, the DRAM ramp and the grid's tail included. Modes:
// 0 a plain launch; 1 a programmatic dependent that waits for its predecessor before its first
// load (a kernel whose addresses come from the kernel before it: MoE's expert ids); 2 one that
// issues its loads first and waits only before its store (weights whose addresses are known).
// Compiled at run time by NVRTC: kt_compile_source("stream.cu").
#include "kt_device.cuh"

#define KT_STREAM_UNROLL 4

extern "C" __global__ void kt_dram_read(const uint4 *buf, unsigned long long words, int mode, unsigned *out) {
    if (mode == 1) kt_wait_producer();
    if (mode) kt_allow_consumer();
    const unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned x = 0;
    for (unsigned long long i = tid; i < words; i += KT_STREAM_UNROLL * stride) {
        uint4 v[KT_STREAM_UNROLL];
#pragma unroll
        for (int u = 0; u < KT_STREAM_UNROLL; u++) {
            const unsigned long long j = i + u * stride;
            v[u] = j < words ? kt_ldg_stream16(buf + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < KT_STREAM_UNROLL; u++) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (mode == 2) kt_wait_producer();
    out[tid] = x;
}
