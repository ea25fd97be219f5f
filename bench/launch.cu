// launch.cu — the graph-latency probe of `kt bench launch` (bench/launch.c): a chain of N tiny
// dependent kernels captured as one CUDA graph, with and without programmatic dependent launch
// (PDL), at 1 block and one block per SM, gives the per-launch floor a decode step of N kernels
// pays however little each kernel does. Compiled at run time by NVRTC: kt_compile_source("launch.cu").
#include "kt_device.cuh"

// One link of the chain: block b's thread 0 adds 1 to count[b] (a read-modify-write, so a
// kernel that overtook its predecessor would lose an increment: the host checks the totals).
// pdl != 0: launched as a programmatic dependent, it waits for the kernel before it and lets
// the next one launch first, as runtime/model.cu's rt_begin() does.
extern "C" __global__ void kt_launch_tick(unsigned *count, int pdl) {
    if (pdl) {
        kt_wait_producer();
        kt_allow_consumer();
    }
    if (threadIdx.x == 0) {
        volatile unsigned *c = count + blockIdx.x;
        *c = *c + 1;
    }
}
