/* ARM NEON (AArch64 Advanced SIMD) pieces of paged_attention_cpu.c, used where gcc -march=native
 * targets aarch64 (every AArch64 CPU has NEON: Graviton, Ampere, Apple silicon under Linux).
 *
 * The same scheme as paged_attention_avx2.h at 4 lanes: 4 key positions at once, 4 lane-wise
 * partial dot products, one transpose-and-add (reduce: two rounds of pairwise adds) into the 4
 * scores. bf16 K/V rows are widened to fp32 (a shift of the zero-extended halves). With 32
 * vector registers, the V accumulators are kept 16 vectors (64 columns) at a time. */
#ifndef STEPWISE_PAGED_ATTENTION_NEON_H
#define STEPWISE_PAGED_ATTENTION_NEON_H
#include <arm_neon.h>

#define PA_SIMD 1
#define PA_LANES 4
#define PA_MAX_VECS 64  /* head_dim <= 256 */
#define PA_COL_VECS 16  /* V accumulators held in registers per pass over a chunk's rows */
#define PA_PV_CHUNK 64  /* V positions per pass over the G heads: 64 rows of D stay in L1 */

typedef float32x4_t pa_vec;
static inline float32x4_t pa_loadu(const float *p) { return vld1q_f32(p); }
static inline void pa_storeu(float *p, float32x4_t v) { vst1q_f32(p, v); }
static inline float32x4_t pa_set1(float x) { return vdupq_n_f32(x); }
static inline float32x4_t pa_mul(float32x4_t a, float32x4_t b) { return vmulq_f32(a, b); }
static inline float32x4_t pa_fmadd(float32x4_t a, float32x4_t b, float32x4_t c) {
  return vfmaq_f32(c, a, b);
}
/* Stores lanes 0 .. n - 1 of v (n <= 4). */
static inline void pa_store_first(float *p, float32x4_t v, int64_t n) {
  if (n == 4) {
    vst1q_f32(p, v);
    return;
  }
  float tmp[4];
  vst1q_f32(tmp, v);
  for (int64_t i = 0; i < n; i++) p[i] = tmp[i];
}

static inline float32x4_t pa_load_f32(const float *p) { return vld1q_f32(p); }
static inline float32x4_t pa_load_bf16(const uint16_t *p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

/* Lane i of the result is the sum of the 4 lanes of a[i]: pairwise adds of pairs, twice. */
static inline float32x4_t pa_reduce(const float32x4_t a[4]) {
  return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}

/* Lane-wise partial sums of q . k over D (a multiple of 4): qf is q in fp32. */
static inline float32x4_t pa_dot_f32(const float *qf, const float *qb, const float *k,
                                     int64_t d) {
  (void)qb;
  float32x4_t acc = vmulq_f32(vld1q_f32(qf), vld1q_f32(k));
  for (int64_t c = PA_LANES; c < d; c += PA_LANES)
    acc = vfmaq_f32(acc, vld1q_f32(qf + c), vld1q_f32(k + c));
  return acc;
}
/* (bf16 K rows are widened once per chunk and use pa_dot_f32: paged_attention_cpu_impl.h) */
#define PA_STEP_f32 4
#define PA_STEP_bf16 4

#endif
