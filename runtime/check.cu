// check.cu — the tuner's verification on the GPU (tuner/measure.c): compares one output
// tensor with its float64 reference where both already are, so a check moves a few numbers
// to the host instead of the whole output (33M elements at M=4096, N=8192). Compiled at run
// time by NVRTC through the JIT cache like a family's source, but it is not a family:
// kt_compile_source("check.cu"). The CPU compare (kt_check_host) adds up the same numbers.
#include "kt_device.cuh"

// One output tensor's sums; the host reads them as kt_check_sums (tuner/tuner.h), same layout.
struct kt_check_sums {
    double diff2;                // sum of (out - ref)^2 over the elements that are not NaN
    double ref2;                 // sum of ref^2 over the same elements
    unsigned long long nans;     // elements that are NaN: unwritten (still the poison) or invalid
    unsigned long long nan_rank; // n - the index of the first NaN (the largest wins), 0 if none
};

#define KT_CHECK_THREADS 256

// Element i of an output of dtype (kt_dtype: 0 e4m3, 1 bf16, 2 f32, 3 i32, 4 u8) as a double,
// exactly as the host converts it; NaN for NaN codes.
__device__ __forceinline__ double kt_output_element(const void *out, int dtype, unsigned long long i) {
    switch (dtype) {
    case 0: {
        kt_u8 c = ((const kt_u8 *)out)[i];
        return (c & 0x7f) == 0x7f ? __longlong_as_double(0x7ff8000000000000LL) : kt_e4m3_to_f64(c);
    }
    case 1: return kt_bf16_to_f32(((const kt_u16 *)out)[i]);
    case 2: return ((const float *)out)[i];
    case 3: { // INT32_MIN is the poison (CONTRACT.md): unwritten
        int v = ((const int *)out)[i];
        return v == (int)0x80000000 ? __longlong_as_double(0x7ff8000000000000LL) : (double)v;
    }
    default: return ((const kt_u8 *)out)[i];
    }
}

// Sums of a warp's lanes into lane 0 (nan_rank: the largest).
__device__ __forceinline__ void kt_warp_sums(kt_check_sums &s) {
    for (int d = 16; d > 0; d /= 2) {
        s.diff2 += __shfl_down_sync(0xffffffffu, s.diff2, d);
        s.ref2 += __shfl_down_sync(0xffffffffu, s.ref2, d);
        s.nans += __shfl_down_sync(0xffffffffu, s.nans, d);
        unsigned long long r = __shfl_down_sync(0xffffffffu, s.nan_rank, d);
        s.nan_rank = r > s.nan_rank ? r : s.nan_rank;
    }
}

// Adds out[0..n) against ref[0..n) into *sums (zeroed by the host): a grid-stride loop per
// thread, a warp then block reduction, and one set of atomics per block.
extern "C" __global__ void __launch_bounds__(KT_CHECK_THREADS)
    kt_check(const void *out, int dtype, const double *ref, unsigned long long n, kt_check_sums *sums) {
    kt_check_sums s = {0, 0, 0, 0};
    unsigned long long stride = (unsigned long long)gridDim.x * KT_CHECK_THREADS;
    for (unsigned long long i = (unsigned long long)blockIdx.x * KT_CHECK_THREADS + threadIdx.x; i < n; i += stride) {
        double o = kt_output_element(out, dtype, i), r = ref[i];
        if (o != o) {
            s.nans++;
            if (n - i > s.nan_rank) s.nan_rank = n - i;
            continue;
        }
        s.diff2 += (o - r) * (o - r);
        s.ref2 += r * r;
    }
    __shared__ kt_check_sums warps[KT_CHECK_THREADS / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    kt_warp_sums(s);
    if (lane == 0) warps[warp] = s;
    __syncthreads();
    if (warp) return;
    kt_check_sums zero = {0, 0, 0, 0};
    s = lane < KT_CHECK_THREADS / 32 ? warps[lane] : zero;
    kt_warp_sums(s);
    if (lane) return;
    atomicAdd(&sums->diff2, s.diff2);
    atomicAdd(&sums->ref2, s.ref2);
    atomicAdd(&sums->nans, s.nans);
    atomicMax(&sums->nan_rank, s.nan_rank);
}
