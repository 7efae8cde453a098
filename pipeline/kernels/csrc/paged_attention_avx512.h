/* AVX-512 pieces of paged_attention_cpu.c, used where gcc -march=native enables AVX-512F.
 *
 * The portable loops in paged_attention_cpu_impl.h compute each score as one dot product and
 * reduce it across its vector lanes on its own: a chain of shuffles and adds per score, which
 * (not memory) bounded the kernel. Here 16 key positions are done at once: 16 lane-wise
 * partial dot products, then one transpose-and-add (pa_reduce) turns them into the 16 scores,
 * about a third of the shuffles. With AVX512_BF16, bf16 q . k runs on vdpbf16ps (products of
 * bf16 pairs, exact in fp32, summed in fp32) with no conversion of K; without it, K rows are
 * widened to fp32 once per chunk. V rows are widened to
 * fp32 and accumulated in registers over chunks of positions that stay in L1. */
#ifndef STEPWISE_PAGED_ATTENTION_AVX512_H
#define STEPWISE_PAGED_ATTENTION_AVX512_H
#include <immintrin.h>

#define PA_SIMD 1
#define PA_LANES 16
#define PA_MAX_VECS 16  /* head_dim <= 256 in registers */
#define PA_COL_VECS 16  /* V accumulators in registers: all of a row up to head_dim 256 */
#define PA_PV_CHUNK 64  /* V positions per pass over the G heads: 64 rows of D stay in L1 */

typedef __m512 pa_vec;
static inline __m512 pa_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void pa_storeu(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline __m512 pa_set1(float x) { return _mm512_set1_ps(x); }
static inline __m512 pa_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
static inline __m512 pa_fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
/* Stores lanes 0 .. n - 1 of v (n <= 16). */
static inline void pa_store_first(float *p, __m512 v, int64_t n) {
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
}

static inline __m512 pa_load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 pa_load_bf16(const uint16_t *p) {
  const __m256i x = _mm256_loadu_si256((const __m256i *)p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

/* Lane i of the result is the sum of the 16 lanes of a[i]. */
static inline __m512 pa_reduce(const __m512 a[16]) {
  __m512 x[8], y[4], z[2];
  for (int i = 0; i < 8; i++) /* lanes (a, b, a, b) per 128 bits: pairs folded */
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; i++) { /* (a, b, c, d) per 128 bits: each 128-bit lane summed */
    const __m512d p = _mm512_castps_pd(x[2 * i]), q = _mm512_castps_pd(x[2 * i + 1]);
    y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p, q)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(p, q)));
  }
  for (int i = 0; i < 2; i++) /* 128-bit lanes 0+1 and 2+3 of each */
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88),
                       _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
}

/* Lane-wise partial sums of q . k over D (a multiple of 16; of 32 for the bf16 pairs): qf is
 * q in fp32, qb the raw row (used by vdpbf16ps). */
static inline __m512 pa_dot_f32(const float *qf, const float *qb, const float *k, int64_t d) {
  (void)qb;
  __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qf), _mm512_loadu_ps(k));
  for (int64_t c = PA_LANES; c < d; c += PA_LANES)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(qf + c), _mm512_loadu_ps(k + c), acc);
  return acc;
}
#ifdef __AVX512BF16__
#define PA_STEP_bf16 32
static inline __m512 pa_dot_bf16(const float *qf, const uint16_t *qb, const uint16_t *k,
                                 int64_t d) {
  (void)qf;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; c += 32)
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(qb + c),
                           (__m512bh)_mm512_loadu_si512(k + c));
  return acc;
}
#else
#define PA_STEP_bf16 16  /* rows widened once per chunk, then pa_dot_f32 (impl.h's PA_WIDEN) */
#endif
#define PA_STEP_f32 16

#endif
