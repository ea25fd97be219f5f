/* kt_arch.h — what each GPU arch kt compiles for allows, one table for the host descriptors'
 * check_config (C) and the kernels (CUDA C++): shared memory per block (the opt-in maximum),
 * registers per thread, block-scaled mma (sm_120a only) and griddepcontrol (PDL, sm_90 on). */
#ifndef KT_ARCH_H
#define KT_ARCH_H

typedef struct kt_arch_limits {
    int arch;             /* kt's arch code: 89, 90, 100, 120, 1201 (sm_120a) */
    int smem_per_block;   /* bytes of shared memory one block may opt into */
    int regs_per_thread;  /* most registers ptxas gives one thread */
    int regs_per_block;   /* registers one block may hold */
    int block_scaled_mma; /* mma.sync with block scales (kind::mxf8f6f4 etc.) */
    int griddepcontrol;   /* griddepcontrol.wait / launch_dependents */
} kt_arch_limits;

/* The table, ending with a row of arch 0 whose limits are sm_120's (an unknown arch is held
 * to the smallest GPU kt ships for). */
#define KT_ARCH_TABLE                                                                                                  \
    {                                                                                                                  \
        {89, 99 * 1024, 255, 65536, 0, 0}, {90, 227 * 1024, 255, 65536, 0, 1}, {100, 227 * 1024, 255, 65536, 0, 1},    \
            {120, 99 * 1024, 255, 65536, 0, 1}, {1201, 99 * 1024, 255, 65536, 1, 1}, {                                 \
            0, 99 * 1024, 255, 65536, 0, 1                                                                             \
        }                                                                                                              \
    }

#ifdef __CUDACC__
#define KT_ARCH_FN static __host__ __device__ __forceinline__
#else
#define KT_ARCH_FN static inline
#endif

/* The limits of arch (the last row when unknown). */
KT_ARCH_FN kt_arch_limits kt_arch_limits_of(int arch) {
    const kt_arch_limits table[] = KT_ARCH_TABLE;
    int i = 0;
    while (table[i].arch && table[i].arch != arch) i++;
    return table[i];
}

#endif
