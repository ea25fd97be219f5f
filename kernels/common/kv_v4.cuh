// kv_v4.cuh — DeepSeek-V4's KV-cache byte layout (FlashMLA "MODEL1", 584 bytes a token), in
// plain C valid in host C11 and NVRTC CUDA C++ (../../shared/specs/sparse_mla_decode.md).
// Pages of 64 tokens; a page holds its 64 tokens' data (448 e4m3 "nope" values, then 64 bf16
// rope values: 576 bytes each), then a footer of 8 bytes per token: 7 ue8m0 scales (one per 64
// nope values, value = 2^(byte - 127)) and a pad byte. K = V = the dequantised 512 vector.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KT_KV_FN static __host__ __device__ __forceinline__
#else
#define KT_KV_FN static inline
#endif

#define KT_KV_PAGE 64
#define KT_KV_NOPE 448
#define KT_KV_ROPE 64
#define KT_KV_DIM (KT_KV_NOPE + KT_KV_ROPE)
#define KT_KV_DATA (KT_KV_NOPE + 2 * KT_KV_ROPE)      /* 576 */
#define KT_KV_SCALES 8                                /* 7 ue8m0 + 1 pad */
#define KT_KV_TOKEN_BYTES (KT_KV_DATA + KT_KV_SCALES) /* 584 */
#define KT_KV_PAGE_BYTES (KT_KV_PAGE * KT_KV_TOKEN_BYTES)

/* Bytes of a cache of n tokens (whole pages). */
KT_KV_FN unsigned long long kt_kv_bytes(long n) {
    return (unsigned long long)((n + KT_KV_PAGE - 1) / KT_KV_PAGE) * KT_KV_PAGE_BYTES;
}
/* Offset of token t's data (nope codes, then rope bf16) in its cache. */
KT_KV_FN unsigned long long kt_kv_data(long t) {
    return (unsigned long long)(t / KT_KV_PAGE) * KT_KV_PAGE_BYTES + (unsigned long long)(t % KT_KV_PAGE) * KT_KV_DATA;
}
/* Offset of token t's 8 scale bytes. */
KT_KV_FN unsigned long long kt_kv_scales(long t) {
    return (unsigned long long)(t / KT_KV_PAGE) * KT_KV_PAGE_BYTES + KT_KV_PAGE * KT_KV_DATA +
           (unsigned long long)(t % KT_KV_PAGE) * KT_KV_SCALES;
}
