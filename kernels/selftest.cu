// selftest.cu — a tiny family the tests use to prove the sweep survives faults:
//   y[i] = 2 * x[i]   (f32, n = M * N elements, VEC per thread with one vector load)
// with two planted misbehaviours a sweep must record and survive: FAULT=1 writes through
// a wild pointer and traps (the CUDA context is lost), HANG=1 spins forever (only the
// sweep's watchdog ends it). The default (VEC=4, FAULT=0, HANG=0) is an honest kernel.
#include "kt_device.cuh"

#ifndef KT_VEC
#define KT_VEC 4
#define KT_FAULT 0
#define KT_HANG 0
#endif

constexpr int VEC = KT_VEC, THREADS = 256;
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 floats per thread");

struct alignas(4 * VEC) f32_vec {
    float v[VEC];
};

extern "C" __global__ void __launch_bounds__(THREADS)
    selftest(const float *__restrict__ x, float *__restrict__ y, long n) {
    if (KT_FAULT) {
        // An address no allocation has: the store faults, and the trap makes sure of it.
        *(volatile float *)(0x8ull << 40) = 1.0f;
        __trap();
    }
    if (KT_HANG) {
        // asm volatile has side effects, so the compiler may not drop the endless loop.
        for (;;) asm volatile("nanosleep.u32 1000;");
    }
    const long i = ((long)blockIdx.x * THREADS + threadIdx.x) * VEC;
    if (i >= n) return;
    f32_vec in = *(const f32_vec *)(x + i);
#pragma unroll
    for (int k = 0; k < VEC; k++) in.v[k] *= 2.0f;
    *(f32_vec *)(y + i) = in;
}
