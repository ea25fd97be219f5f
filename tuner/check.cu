// check.cu — the tuner's verification on the GPU (tuner/measure.c): compares one output
// tensor with its float64 reference where both already are, so a check moves a few numbers
// to the host instead of the whole output (33M elements at M=4096, N=8192). Compiled at run
// time by NVRTC through the JIT cache like a family's source, but it is not a family:
// kt_compile_source("check.cu"). The rule per element or row is kernels/common/kt_check.h,
// which the CPU compare (kt_check_host) runs too.
#include "kt_check.h"

#define KT_CHECK_THREADS 256

// Sums of a warp's lanes into lane 0 (bad_rank: the largest).
__device__ __forceinline__ void kt_warp_sums(kt_check_sums &s) {
    for (int d = 16; d > 0; d /= 2) {
        s.diff2 += __shfl_down_sync(0xffffffffu, s.diff2, d);
        s.ref2 += __shfl_down_sync(0xffffffffu, s.ref2, d);
        s.bad += __shfl_down_sync(0xffffffffu, s.bad, d);
        s.unwritten += __shfl_down_sync(0xffffffffu, s.unwritten, d);
        unsigned long long r = __shfl_down_sync(0xffffffffu, s.bad_rank, d);
        s.bad_rank = r > s.bad_rank ? r : s.bad_rank;
    }
}

// Adds the units (elements, or rows of set_len for compare SET) of out[0..n) against
// ref[0..n) into *sums (zeroed by the host): a grid-stride loop per thread, a warp then block
// reduction, and one set of atomics per block.
extern "C" __global__ void __launch_bounds__(KT_CHECK_THREADS)
    kt_check(const void *out, int dtype, const double *ref, unsigned long long n, int compare,
             unsigned long long set_len, kt_check_sums *sums) {
    kt_check_sums s = {0, 0, 0, 0, 0};
    const unsigned long long units = kt_check_units(n, compare, set_len);
    const unsigned long long stride = (unsigned long long)gridDim.x * KT_CHECK_THREADS;
    for (unsigned long long u = (unsigned long long)blockIdx.x * KT_CHECK_THREADS + threadIdx.x; u < units; u += stride)
        kt_check_unit(out, dtype, ref, n, compare, set_len, u, &s);
    __shared__ kt_check_sums warps[KT_CHECK_THREADS / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    kt_warp_sums(s);
    if (lane == 0) warps[warp] = s;
    __syncthreads();
    if (warp) return;
    kt_check_sums zero = {0, 0, 0, 0, 0};
    s = lane < KT_CHECK_THREADS / 32 ? warps[lane] : zero;
    kt_warp_sums(s);
    if (lane) return;
    atomicAdd(&sums->diff2, s.diff2);
    atomicAdd(&sums->ref2, s.ref2);
    atomicAdd(&sums->bad, s.bad);
    atomicAdd(&sums->unwritten, s.unwritten);
    atomicMax(&sums->bad_rank, s.bad_rank);
}
