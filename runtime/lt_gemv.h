/* lt_gemv.h — the decode step's f32 GEMVs over B sequences as cuBLASLt matmuls on the TF32 tensor cores
 * (KT_STEP_GEMV_LT=1, runtime/step.c's gemv): out[b][n] = sum_k W[n][k] x[b][k], W row-major N x K (rows of
 * several weights stacked are one W), x row-major B x K, out row-major B x N, all f32. cuBLASLt is loaded at run
 * time (dlopen, as NCCL in nccl.h), so libkt links no cuBLAS. One handle; per distinct (N, K, B) its descriptors
 * and the heuristic's algorithm, per stream a workspace, all made outside stream capture. */
#ifndef KT_LT_GEMV_H
#define KT_LT_GEMV_H

#include <cuda.h>

typedef struct kt_lt_gemv kt_lt_gemv;

/* What kt_lt_gemv_run does: set up a shape it has not met, no launch (KT_LT_PLAN: the step's collecting walk);
 * set up a new shape or stream, then launch (KT_LT_EAGER); launch only, -1 on a shape or stream an eager call has
 * not set up (KT_LT_CAPTURE: under stream capture, where the heuristic and cuMemAlloc must not run). */
typedef enum { KT_LT_PLAN, KT_LT_EAGER, KT_LT_CAPTURE } kt_lt_mode;

/* Loads cuBLASLt (libcublasLt.so.<the headers' major version>) and creates the handle (the GPU context current);
 * -1 with the reason where the library is absent. */
int kt_lt_gemv_open(kt_lt_gemv **out);
/* The GEMV above on stream st (W, x, out 256-byte aligned, as cuMemAlloc gives; N and K multiples of 4; N, K, B in
 * [1, 2^31)). */
int kt_lt_gemv_run(kt_lt_gemv *g, CUdeviceptr W, CUdeviceptr x, CUdeviceptr out, long N, long K, long B, CUstream st,
                   kt_lt_mode mode);
void kt_lt_gemv_close(kt_lt_gemv *g);
/* KT_CHECK(CUBLASLT, call)'s status checker (cuBLASLt's own message once loaded). */
int kt_status_CUBLASLT(int status, const char *call, const char *file, int line);

#endif
