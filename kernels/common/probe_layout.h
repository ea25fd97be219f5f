/* probe_layout.h — the probe family's layout (kernels/probe.cu, kernels/probe.c), valid C
 * and CUDA C++: each of a problem's B rows holds KT_PROBE_SLOTS int32 indices into N values
 * (-1: an unused slot), and LAYOUT says which value an index names. */
#ifndef KT_PROBE_LAYOUT_H
#define KT_PROBE_LAYOUT_H

#ifdef __CUDACC__
#define KT_PROBE_FN static __host__ __device__ __forceinline__
#else
#define KT_PROBE_FN static inline
#endif

#define KT_PROBE_SLOTS 8
enum { KT_PROBE_V3, KT_PROBE_V4 }; /* the LAYOUT categories, in the family's order */

/* The value index slot index idx names under layout, of n values. */
KT_PROBE_FN long kt_probe_source(int layout, long n, long idx) { return layout == KT_PROBE_V4 ? n - 1 - idx : idx; }

#endif
