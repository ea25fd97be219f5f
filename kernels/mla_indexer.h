/* mla_indexer.h — the host parts of the mla_indexer family (kernels/mla_indexer.c) that the
 * CPU tests call: the request lengths a problem's inputs get, the top-k rule by sorting (the
 * reference) and the radix select the GPU runs, written again in C. */
#ifndef KT_MLA_INDEXER_H
#define KT_MLA_INDEXER_H

#include "../runtime/kt.h"

/* The key fields: TOPK and CTX sizes, DIST and VALUES categories (the index of the name).
 * DIST: equal (every L_b = CTX), ragged (pairs CTX -+ d, so the sum stays B * CTX, one pair
 * holding L = TOPK and another L = 1). VALUES: grid (small-integer codes, power-of-two scales:
 * f32 logits exact in any order), tied (four distinct K rows), equal (one). */
enum { KT_IDX_KEY_TOPK, KT_IDX_KEY_CTX, KT_IDX_KEY_DIST, KT_IDX_KEY_VALUES };
enum { KT_IDX_DIST_EQUAL, KT_IDX_DIST_RAGGED };
enum { KT_IDX_VALUES_GRID, KT_IDX_VALUES_TIED, KT_IDX_VALUES_EQUAL };

/* The B request lengths of problem p drawn from seed (sum B * CTX whatever the seed). */
void kt_mla_indexer_lengths(const kt_problem *p, uint64_t seed, int *lens);
/* The top-k rule: pos[0..k) = the positions of the k largest of x[0..n) (ties: the lower
 * position), in ascending order; -1 after the first n when n < k. By sorting. */
void kt_mla_indexer_topk_sort(const double *x, int n, int k, int *pos);
/* The same by the radix select of kernels/mla_indexer.cu (f32 keys, 3 digits, ordered pass). */
void kt_mla_indexer_topk_radix(const float *x, int n, int k, int *pos);
/* The same by HIST=1's selection: the top 16 bits from the keys' histogram, then digits 3 and 4
 * over the keys with them (over every key where more than cap have them). */
void kt_mla_indexer_topk_hist(const float *x, int n, int k, int cap, int *pos);

#endif
