/* AVX2 + FMA pieces of paged_attention_cpu.c, used where gcc -march=native enables AVX2 and
 * FMA but not AVX-512F (most AMD Zen 1-3 and pre-Skylake-SP Intel hosts).
 *
 * The same scheme as paged_attention_avx512.h at 8 lanes: 8 key positions at once, 8
 * lane-wise partial dot products, one transpose-and-add (reduce8: two rounds of hadd and one
 * 128-bit swap) into the 8 scores. bf16 K/V rows are widened to fp32 (no vdpbf16ps here). With
 * 16 ymm registers, the V accumulators are kept 8 vectors (64 columns) at a time. */
#ifndef STEPWISE_PAGED_ATTENTION_AVX2_H
#define STEPWISE_PAGED_ATTENTION_AVX2_H
#include <immintrin.h>

#define PA_SIMD 1
#define PA_LANES 8
#define PA_MAX_VECS 32  /* head_dim <= 256 */
#define PA_COL_VECS 8   /* V accumulators held in registers per pass over a chunk's rows */
#define PA_PV_CHUNK 64  /* V positions per pass over the G heads: 64 rows of D stay in L1 */

typedef __m256 pa_vec;
static inline __m256 pa_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void pa_storeu(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
static inline __m256 pa_set1(float x) { return _mm256_set1_ps(x); }
static inline __m256 pa_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
static inline __m256 pa_fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
/* Stores lanes 0 .. n - 1 of v (n <= 8). */
static inline void pa_store_first(float *p, __m256 v, int64_t n) {
  const __m256i m =
      _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps(p, m, v);
}

static inline __m256 pa_load_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 pa_load_bf16(const uint16_t *p) {
  const __m128i x = _mm_loadu_si128((const __m128i *)p);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}

/* Lane i of the result is the sum of the 8 lanes of a[i]. hadd(a, b) gives, per 128-bit half,
 * (a0+a1, a2+a3, b0+b1, b2+b3); twice over four vectors that is each one's half-sum, low
 * halves in the low 128 bits and high halves in the high; the swap adds the halves. */
static inline __m256 pa_reduce(const __m256 a[8]) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* Lane-wise partial sums of q . k over D (a multiple of 8): qf is q in fp32. */
static inline __m256 pa_dot_f32(const float *qf, const float *qb, const float *k, int64_t d) {
  (void)qb;
  __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(qf), _mm256_loadu_ps(k));
  for (int64_t c = PA_LANES; c < d; c += PA_LANES)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(qf + c), _mm256_loadu_ps(k + c), acc);
  return acc;
}
/* (bf16 K rows are widened once per chunk and use pa_dot_f32: paged_attention_cpu_impl.h) */
#define PA_STEP_f32 8
#define PA_STEP_bf16 8

#endif
