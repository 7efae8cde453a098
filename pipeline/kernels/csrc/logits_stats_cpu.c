/* Per-row statistics of fp32 logits on CPU (logits_stats_torch in pipeline/kernels/
 * logits_stats.py): argmax (first of ties), max-probability, entropy (nats), log-sum-exp.
 *
 * The reference makes five passes over [S, V] and two [S, V] temporaries (logsumexp, softmax,
 * the product, its sum, max). Here each row is read twice and nothing is allocated: once for
 * its max and argmax, once for s = sum exp(x - m) and w = sum exp(x - m) * (x - m). Then
 * lse = m + log s, entropy = log s - w / s (the reference's lse - sum p x, without the
 * cancellation of two large terms), max_prob = 1 / s. A row of a 50k vocabulary is
 * 200 KB, so the second pass reads it from L2. Rows are split across torch's OpenMP threads.
 */
#include <math.h>
#include <stdint.h>

#if defined(__AVX512F__) && !defined(STEPWISE_PORTABLE)
#include <immintrin.h>

/* The maximum and the first index holding it: per-lane maxima with the index where each was
 * first seen (strictly greater replaces), then the lowest index among the lanes at the max. */
static void max_argmax(const float *x, int64_t v, float *max_out, int64_t *arg_out) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  __m512i idx = _mm512_setzero_si512(), at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  int64_t i = 0;
  for (; i + 16 <= v; i += 16) {
    const __m512 y = _mm512_loadu_ps(x + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(y, m, _CMP_GT_OQ);
    m = _mm512_mask_blend_ps(gt, m, y);
    idx = _mm512_mask_blend_epi32(gt, idx, at);
    at = _mm512_add_epi32(at, step);
  }
  float best = _mm512_reduce_max_ps(m);
  const __mmask16 hit = _mm512_cmp_ps_mask(m, _mm512_set1_ps(best), _CMP_EQ_OQ);
  int64_t arg = hit ? _mm512_mask_reduce_min_epi32(hit, idx) : 0;
  for (; i < v; i++)
    if (x[i] > best) best = x[i], arg = i;
  *max_out = best;
  *arg_out = arg;
}
#elif defined(__AVX2__) && !defined(STEPWISE_PORTABLE)
#include <immintrin.h>

/* The same scheme at 8 lanes: AVX2 has no mask registers, so the compare yields a lane mask
 * that blendv applies, and the lanes are reduced through memory (8 values, once per row). */
static void max_argmax(const float *x, int64_t v, float *max_out, int64_t *arg_out) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  __m256i idx = _mm256_setzero_si256(), at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  int64_t i = 0;
  for (; i + 8 <= v; i += 8) {
    const __m256 y = _mm256_loadu_ps(x + i);
    const __m256 gt = _mm256_cmp_ps(y, m, _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, y, gt);
    idx = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(idx), _mm256_castsi256_ps(at), gt));
    at = _mm256_add_epi32(at, step);
  }
  float lanes[8];
  int32_t where[8];
  _mm256_storeu_ps(lanes, m);
  _mm256_storeu_si256((__m256i *)where, idx);
  float best = lanes[0];
  int64_t arg = where[0];
  for (int k = 1; k < 8; k++)  /* the max, then the lowest index among the lanes holding it */
    if (lanes[k] > best || (lanes[k] == best && where[k] < arg)) best = lanes[k], arg = where[k];
  for (; i < v; i++)
    if (x[i] > best) best = x[i], arg = i;
  *max_out = best;
  *arg_out = arg;
}
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(STEPWISE_PORTABLE)
#include <arm_neon.h>

/* The same scheme at 4 lanes: the compare yields a lane mask that bsl applies; the max and
 * the lowest index among the lanes holding it come from across-lane reductions. */
static void max_argmax(const float *x, int64_t v, float *max_out, int64_t *arg_out) {
  float32x4_t m = vdupq_n_f32(-INFINITY);
  const uint32_t first[4] = {0, 1, 2, 3};
  uint32x4_t idx = vdupq_n_u32(0), at = vld1q_u32(first);
  const uint32x4_t step = vdupq_n_u32(4);
  int64_t i = 0;
  for (; i + 4 <= v; i += 4) {
    const float32x4_t y = vld1q_f32(x + i);
    const uint32x4_t gt = vcgtq_f32(y, m);
    m = vbslq_f32(gt, y, m);
    idx = vbslq_u32(gt, at, idx);
    at = vaddq_u32(at, step);
  }
  float best = vmaxvq_f32(m);
  const uint32x4_t hit = vceqq_f32(m, vdupq_n_f32(best));
  int64_t arg = vminvq_u32(vbslq_u32(hit, idx, vdupq_n_u32(UINT32_MAX)));
  for (; i < v; i++)
    if (x[i] > best) best = x[i], arg = i;
  *max_out = best;
  *arg_out = arg;
}
#else
static void max_argmax(const float *x, int64_t v, float *max_out, int64_t *arg_out) {
  float best = x[0];
  int64_t arg = 0;
  for (int64_t i = 1; i < v; i++)
    if (x[i] > best) best = x[i], arg = i;
  *max_out = best;
  *arg_out = arg;
}
#endif

/* x: [s, v] with row stride `stride` (v >= 1); outputs [s]. Logits are assumed finite. */
void logits_stats_f32(const float *x, int64_t s, int64_t v, int64_t stride, int64_t *argmax,
                      float *max_prob, float *entropy, float *lse) {
#pragma omp parallel for schedule(static) if (s * v >= (1 << 16))
  for (int64_t r = 0; r < s; r++) {
    const float *xr = x + r * stride;
    float m;
    max_argmax(xr, v, &m, &argmax[r]);
    float sum = 0.f, wsum = 0.f;
    for (int64_t i = 0; i < v; i++) {
      const float y = xr[i] - m, e = expf(y);
      sum += e;
      wsum += e * y;
    }
    lse[r] = m + logf(sum);
    entropy[r] = logf(sum) - wsum / sum;
    max_prob[r] = 1.f / sum;
  }
}
