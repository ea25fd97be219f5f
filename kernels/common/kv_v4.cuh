// kv_v4.cuh — DeepSeek-V4's KV-cache byte layout (FlashMLA "MODEL1", 584 bytes a token) as the
// runtime names it (runtime/step.c, runtime/model.cu), in plain C valid in host C11 and NVRTC
// CUDA C++ (../../shared/specs/sparse_mla_decode.md). The arithmetic is mla_layout.h's V4 layout,
// the one mla_decode reads, so a cache the runtime writes is the family's input byte for byte:
// pages of 64 tokens; a page holds its 64 tokens' data (448 e4m3 "nope" values, then 64 bf16
// rope values: 576 bytes each), then a footer of 8 bytes per token (7 ue8m0 scales, one per 64
// nope values, value = 2^(byte - 127), and a pad byte), the page padded to a multiple of 576
// bytes (37440). K = V = the dequantised 512 vector. Token id = page * 64 + slot.
#pragma once

#include "mla_layout.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KT_KV_FN static __host__ __device__ __forceinline__
#else
#define KT_KV_FN static inline
#endif

#define KT_KV_PAGE KT_MLA_PAGE
#define KT_KV_NOPE KT_MLA_V4_NOPE
#define KT_KV_ROPE KT_MLA_ROPE
#define KT_KV_DIM KT_MLA_V4_DQK
#define KT_KV_TOKEN_BYTES (KT_MLA_V4_DATA + KT_MLA_V4_SCALES) /* 584 */
#define KT_KV_PAGE_BYTES KT_MLA_V4_PAGE_BYTES

/* Bytes of a cache of n tokens (whole pages). */
KT_KV_FN unsigned long long kt_kv_bytes(long n) {
    return (unsigned long long)((n + KT_KV_PAGE - 1) / KT_KV_PAGE) * KT_KV_PAGE_BYTES;
}
/* Offset of token t's data (nope codes, then rope bf16) in its cache. */
KT_KV_FN unsigned long long kt_kv_data(long t) { return (unsigned long long)kt_mla_token_at(KT_MLA_V4, t); }
/* Offset of token t's 8 scale bytes. */
KT_KV_FN unsigned long long kt_kv_scales(long t) { return (unsigned long long)kt_mla_scales_at(KT_MLA_V4, t); }
