/* bf16 linear on CPUs where oneDNN cannot pack bf16 (AVX2-only x86: AMD Zen 1-3, Intel before
 * Skylake-SP): y = x W^T + b, x [M, K], W [N, K], y [M, N], all bf16, sums in fp32.
 *
 * There torch's F.linear runs bf16 through generic loops at about 1 GB/s of weights for a
 * batch of 32 rows (bench/RESULTS.md), slower than fp32 although it reads half the bytes. Here
 * the weights stay bf16 in memory (a decode step reads every weight once: the bytes are the
 * cost) and are widened to fp32 in registers next to the FMAs.
 *
 * Weights are packed once (linear_bf16_pack) into panels of 16 output columns, k-major: for
 * each k the panel's 16 values, stored so that 32-bit word i holds column i in its low half
 * and column i + 8 in its high half. A 16-value load is then widened without a shuffle: a
 * 16-bit left shift gives columns 0-7 as fp32, a mask of the high halves columns 8-15. The
 * micro-kernel keeps R rows x P panels of fp32 sums in registers (2 R P <= 12 of AVX2's 16 ymm),
 * with each row's x[r, k] broadcast from an fp32 copy of x made once per call.
 * Work is split across torch's OpenMP threads by groups of panels.
 *
 * On AArch64 the same scheme runs on NEON (4 lanes, 32 registers). Without either (or with
 * STEPWISE_PORTABLE) the same packed layout runs in portable loops; linear_bf16_simd() says
 * which was built (0 portable, 1 AVX2 + FMA, 2 NEON), and the caller uses this kernel only where
 * it has the vector path (elsewhere F.linear is the better bf16 path).
 * Built at first use by pipeline/kernels/cpu_build.py, like paged_attention_cpu.c.
 */
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"

#if defined(STEPWISE_PORTABLE)
#define LB_SIMD 0
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LB_SIMD 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define LB_SIMD 2
#else
#define LB_SIMD 0
#endif

#define NR 16           /* output columns per packed panel (linear_cpu.py: PANEL) */
#define GROUP 4         /* panels per work item (64 columns) */
#define MAX_ROWS 6      /* rows per micro-kernel call */
#define PARALLEL_MIN (1 << 17) /* multiply-adds below which one thread does it all */

int linear_bf16_simd(void) { return LB_SIMD; }

/* w [N, K] (row stride K) -> packed (see the top), padding columns zero: N rounded up to whole
 * panels, times K values (linear_cpu.py's packed_size). */
void linear_bf16_pack(const uint16_t *w, uint16_t *packed, int64_t n, int64_t k) {
  const int64_t panels = (n + NR - 1) / NR;
#pragma omp parallel for if (n * k >= PARALLEL_MIN)
  for (int64_t p = 0; p < panels; p++) {
    uint16_t *dst = packed + p * k * NR;
    for (int64_t kk = 0; kk < k; kk++)
      for (int i = 0; i < NR / 2; i++)
        for (int half = 0; half < 2; half++) {
          const int64_t col = p * NR + i + half * (NR / 2);
          dst[kk * NR + 2 * i + half] = col < n ? w[col * k + kk] : 0;
        }
  }
}

/* Sums of rows xf[0 .. R) (fp32, row stride k) against panels w[0 .. P) (panel stride k * NR)
 * into acc[r][p * NR + c], columns in natural order. */
#if LB_SIMD
#define UNROLL _Pragma("GCC unroll 16")
#endif
#if LB_SIMD == 1
/* (UNROLL: the loops over rows and panels are unrolled before gcc splits s[][] into
 * registers; else it keeps a copy on the stack and stores all of it every k.) */
#define MICRO(R, P)                                                                         \
  static void micro_##R##_##P(const float *xf, const uint16_t *w, int64_t k, float *acc) {  \
    __m256 s[R][2 * P];                                                                     \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int v = 0; v < 2 * P; v++) s[r][v] = _mm256_setzero_ps();                 \
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);                               \
    for (int64_t kk = 0; kk < k; kk++) {                                                    \
      UNROLL for (int p = 0; p < P; p++) {                                                  \
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + (p * k + kk) * NR));   \
        const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));                 \
        const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(raw, high));                 \
        UNROLL for (int r = 0; r < R; r++) {                                                \
          const __m256 xv = _mm256_broadcast_ss(xf + r * k + kk);                           \
          s[r][2 * p] = _mm256_fmadd_ps(xv, lo, s[r][2 * p]);                               \
          s[r][2 * p + 1] = _mm256_fmadd_ps(xv, hi, s[r][2 * p + 1]);                       \
        }                                                                                   \
      }                                                                                     \
    }                                                                                       \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int v = 0; v < 2 * P; v++) _mm256_storeu_ps(acc + r * GROUP * NR + v * 8, s[r][v]);\
  }
#elif LB_SIMD == 2
/* NEON: 4 lanes, so a panel's 16 columns are 4 vectors: the low halves of words 0-3 and 4-7
 * (columns 0-3, 4-7), then their high halves (8-11, 12-15). 32 registers hold 6 x 4 sums. */
#define MICRO(R, P)                                                                         \
  static void micro_##R##_##P(const float *xf, const uint16_t *w, int64_t k, float *acc) {  \
    float32x4_t s[R][4 * P];                                                                \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int v = 0; v < 4 * P; v++) s[r][v] = vdupq_n_f32(0.f);                    \
    const uint32x4_t high = vdupq_n_u32(0xffff0000u);                                       \
    for (int64_t kk = 0; kk < k; kk++) {                                                    \
      UNROLL for (int p = 0; p < P; p++) {                                                  \
        const uint32_t *wk = (const uint32_t *)(w + (p * k + kk) * NR);                     \
        const uint32x4_t a = vld1q_u32(wk), b = vld1q_u32(wk + 4);                          \
        const float32x4_t c[4] = {vreinterpretq_f32_u32(vshlq_n_u32(a, 16)),                \
                                  vreinterpretq_f32_u32(vshlq_n_u32(b, 16)),                \
                                  vreinterpretq_f32_u32(vandq_u32(a, high)),                \
                                  vreinterpretq_f32_u32(vandq_u32(b, high))};               \
        UNROLL for (int r = 0; r < R; r++) {                                                \
          const float32x4_t xv = vld1q_dup_f32(xf + r * k + kk);                            \
          UNROLL for (int v = 0; v < 4; v++) s[r][4 * p + v] = vfmaq_f32(s[r][4 * p + v], xv, c[v]); \
        }                                                                                   \
      }                                                                                     \
    }                                                                                       \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int v = 0; v < 4 * P; v++) vst1q_f32(acc + r * GROUP * NR + v * 4, s[r][v]); \
  }
#else
#define MICRO(R, P)                                                                         \
  static void micro_##R##_##P(const float *xf, const uint16_t *w, int64_t k, float *acc) {  \
    float s[R][P * NR];                                                                     \
    for (int r = 0; r < R; r++)                                                             \
      for (int c = 0; c < P * NR; c++) s[r][c] = 0.f;                                       \
    for (int64_t kk = 0; kk < k; kk++)                                                      \
      for (int p = 0; p < P; p++) {                                                         \
        const uint16_t *wk = w + (p * k + kk) * NR;                                         \
        float col[NR];                                                                      \
        for (int i = 0; i < NR / 2; i++) {                                                  \
          col[i] = bf16_to_f32(wk[2 * i]);                                                  \
          col[i + NR / 2] = bf16_to_f32(wk[2 * i + 1]);                                     \
        }                                                                                   \
        for (int r = 0; r < R; r++)                                                         \
          for (int c = 0; c < NR; c++) s[r][p * NR + c] += xf[r * k + kk] * col[c];         \
      }                                                                                     \
    for (int r = 0; r < R; r++)                                                             \
      for (int c = 0; c < P * NR; c++) acc[r * GROUP * NR + c] = s[r][c];                   \
  }
#endif

/* Panels per call for R rows: as many as keep 2 R P sums within 12 registers (and GROUP). */
MICRO(1, 4)
MICRO(1, 1)
MICRO(2, 2)
MICRO(2, 1)
MICRO(3, 2)
MICRO(3, 1)
MICRO(4, 1)
MICRO(5, 1)
MICRO(6, 1)

typedef void (*micro_fn)(const float *, const uint16_t *, int64_t, float *);
static const micro_fn WIDE[MAX_ROWS + 1] = {0, micro_1_4, micro_2_2, micro_3_2,
                                            micro_4_1, micro_5_1, micro_6_1};
static const int WIDE_PANELS[MAX_ROWS + 1] = {0, 4, 2, 2, 1, 1, 1};
static const micro_fn ONE[MAX_ROWS + 1] = {0, micro_1_1, micro_2_1, micro_3_1,
                                           micro_4_1, micro_5_1, micro_6_1};

/* x [M, K] (row stride sx), packed (linear_bf16_pack of W [N, K]), bias [N] or NULL ->
 * out [M, N] (row stride so), each output rounded once from its fp32 sum (+ bias).
 * Returns 0, or -1 where the fp32 copy of x cannot be allocated (nothing is written). */
int linear_bf16(const uint16_t *x, const uint16_t *packed, const uint16_t *bias, uint16_t *out,
                int64_t m, int64_t n, int64_t k, int64_t sx, int64_t so) {
  if (m <= 0 || n <= 0) return 0;
  float *xf = malloc(sizeof(float) * (size_t)(m * k > 0 ? m * k : 1));
  if (xf == 0) return -1;
  const int parallel = m * n * k >= PARALLEL_MIN;
#pragma omp parallel for if (parallel && m * k >= PARALLEL_MIN / 8)
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < k; c++) xf[r * k + c] = bf16_to_f32(x[r * sx + c]);

  const int64_t panels = (n + NR - 1) / NR, groups = (panels + GROUP - 1) / GROUP;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t g = 0; g < groups; g++) {
    float acc[MAX_ROWS * GROUP * NR];
    const int64_t p0 = g * GROUP;
    const int64_t np = panels - p0 < GROUP ? panels - p0 : GROUP;
    for (int64_t r0 = 0; r0 < m; r0 += MAX_ROWS) {
      const int rows = (int)(m - r0 < MAX_ROWS ? m - r0 : MAX_ROWS);
      const float *xr = xf + r0 * k;
      for (int64_t p = 0; p < np;) {
        const uint16_t *w = packed + (p0 + p) * k * NR;
        float *a = acc + p * NR;
        if (np - p >= WIDE_PANELS[rows]) {
          WIDE[rows](xr, w, k, a);
          p += WIDE_PANELS[rows];
        } else {
          ONE[rows](xr, w, k, a);
          p += 1;
        }
      }
      const int64_t c0 = p0 * NR;
      const int64_t cols = n - c0 < np * NR ? n - c0 : np * NR;
      for (int r = 0; r < rows; r++) {
        uint16_t *o = out + (r0 + r) * so + c0;
        const float *ar = acc + r * GROUP * NR;
        if (bias != 0)
          for (int64_t c = 0; c < cols; c++) o[c] = f32_to_bf16(ar[c] + bf16_to_f32(bias[c0 + c]));
        else
          for (int64_t c = 0; c < cols; c++) o[c] = f32_to_bf16(ar[c]);
      }
    }
  }
  free(xf);
  return 0;
}
