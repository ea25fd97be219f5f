/* mla_decode.h — the sparse MLA decode family's quantiser, for the tests that build caches
 * by hand (the byte layouts are kernels/common/mla_layout.h). */
#ifndef KT_MLA_DECODE_H
#define KT_MLA_DECODE_H

#include <stdint.h>

/* Writes token id of a cache of `layout` from its dqk latent values x the way FlashMLA's
 * quantize_k_cache does: per scale tile s = 2^ceil(log2(max(amax / 448, 1e-4))), codes
 * e4m3(x / s), the rope as bf16 (V4: the footer's pad byte 0). */
void kt_mla_quantise_token(int layout, uint8_t *cache, long id, const float *x);

#endif
