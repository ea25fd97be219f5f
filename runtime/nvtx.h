/* nvtx.h — the NVTX ranges kt opens around the kernels it runs, so Nsight Compute
 * (`ncu --nvtx --nvtx-include`) and an Nsight Systems timeline find each one by name.
 * One scheme everywhere (profiles/README.md): four nested push/pop ranges of the default
 * domain, kt / <family> / <key> / <leaf>, written kt/<family>/<key>/<leaf>, where key is the
 * problem ("N=1536,K=4096,M=16": the shape text and the batch field) and leaf the config
 * ("TILE_N=64,...") or what else runs there ("cublaslt_fp8", "dispatch"). NVTX3 is
 * header-only: with no tool attached each call is a check of a null pointer, and kt
 * needs neither a GPU nor libnvToolsExt for it. */
#ifndef KT_NVTX_H
#define KT_NVTX_H
#include "kt.h"

/* The key of problem p as the ranges name it: its shape text, then its batch field. */
void kt_nvtx_key(const kt_family *f, const kt_problem *p, char *out, size_t n);
/* "kt/<family>/<key>/<leaf>/": the ranges of (f, p, leaf) as ncu --nvtx-include takes them. */
void kt_nvtx_filter(const kt_family *f, const kt_problem *p, const char *leaf, char *out, size_t n);
/* Opens the four ranges of (f, p, leaf) on this thread; kt_nvtx_pop closes them. */
void kt_nvtx_push(const kt_family *f, const kt_problem *p, const char *leaf);
void kt_nvtx_pop(void);

#endif
