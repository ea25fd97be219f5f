/* kt_api.h — libkt's embedding API: what a serving stack calls to run kt's tuned kernels on its
 * own device tensors and streams (lib/libkt.so; python/kt_embed.py wraps it with ctypes).
 *
 *   kt_session *s;  kt_kernel *k;
 *   kt_session_open("kt.db", 0, &s);                       // DB read-only (NULL: family defaults)
 *   kt_session_kernel(s, "fp8_gemm", "N=1536,K=4096", 16, &k);   // the DB winner for the shape
 *   uint64_t ptr[5] = {A, As, B, Bs, C};                    // device addresses, family order
 *   kt_kernel_launch(k, ptr, 5, stream);                    // enqueued on the caller's CUstream
 *   kt_kernel_free(k);  kt_session_close(s);
 *
 * The session makes device `device`'s primary context current on the calling thread (the one
 * PyTorch and the serving stacks use). Every function returns 0, or -1 with kt_error(). */
#ifndef KT_API_H
#define KT_API_H

#include <stddef.h>
#include <stdint.h>

typedef struct kt_session kt_session;
typedef struct kt_kernel kt_kernel;

/* Opens device `device` and, when db_path is not NULL, the winners DB read-only. */
int kt_session_open(const char *db_path, int device, kt_session **out);
/* The kernel of `family` for shape text (e.g. "N=1536,K=4096") and batch m: the DB winner by
 * the lookup ladder (exact, nearest M bucket, nearest shape, family default), compiled through
 * the JIT cache and loaded; one stderr line says which and at what lookup level. */
int kt_session_kernel(kt_session *s, const char *family, const char *shape, long m, kt_kernel **out);
/* The kernel's tensors in launch order: how many, and the i-th's name, dtype name ("e4m3",
 * "bf16", "f32", "i32", "u8") and element count; NULL past the end. */
int kt_kernel_n_tensors(const kt_kernel *k);
const char *kt_kernel_tensor(const kt_kernel *k, int i, const char **dtype, size_t *count);
/* "fp8_gemm N=1536,K=4096 M=16 -> TILE_N=...,... (exact)". */
const char *kt_kernel_describe(const kt_kernel *k);
/* Enqueues the kernel on `stream` (a CUstream; NULL the legacy stream) over ptr[0..n), n being
 * kt_kernel_n_tensors. */
int kt_kernel_launch(const kt_kernel *k, const uint64_t *ptr, int n, void *stream);
void kt_kernel_free(kt_kernel *k);
void kt_session_close(kt_session *s);
/* The calling thread's last error message. */
const char *kt_api_error(void);

#endif
