// probe.cu — the test family that proves the family contract (kernels/probe.c):
//   kt verify --family probe --shape LAYOUT=V4,N=4096 --m 1,24
// Per row b of B: lse[b] = the smallest value its valid slots name (+inf when it has none),
// ids[b] = its valid slot indices, then -1, in any order (compared as a set; REVERSE=1 writes
// them back to front).
#include "probe_layout.h"

#ifndef KT_THREADS
#define KT_THREADS 64
#define KT_REVERSE 0
#endif

// The row's smallest named value and its valid indices packed into ids (order by KT_REVERSE).
__device__ __forceinline__ void probe_row(const int *idx, const float *val, long n, int layout, float *lse, int *ids) {
    float best = __int_as_float(0x7f800000); // +inf: no valid slot
    int kept = 0;
    for (int j = 0; j < KT_PROBE_SLOTS; j++) {
        int i = idx[j];
        if (i < 0) continue;
        best = fminf(best, val[kt_probe_source(layout, n, i)]);
        ids[KT_REVERSE ? KT_PROBE_SLOTS - 1 - kept : kept] = i;
        kept++;
    }
    for (int j = kept; j < KT_PROBE_SLOTS; j++) ids[KT_REVERSE ? KT_PROBE_SLOTS - 1 - j : j] = -1;
    *lse = best;
}

extern "C" __global__ void __launch_bounds__(KT_THREADS)
    probe(const int *__restrict__ idx, const float *__restrict__ val, float *__restrict__ lse, int *__restrict__ ids,
          long rows, long n, int layout) {
    long b = (long)blockIdx.x * KT_THREADS + threadIdx.x;
    if (b < rows) probe_row(idx + b * KT_PROBE_SLOTS, val, n, layout, lse + b, ids + b * KT_PROBE_SLOTS);
}
