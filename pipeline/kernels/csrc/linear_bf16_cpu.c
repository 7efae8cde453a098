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
 * STEPWISE_PORTABLE) the same packed layout runs in portable loops.
 *
 * With AVX-512 BF16 (AMD Zen 4 and later, Intel Cooper Lake / Sapphire Rapids) the multiplies
 * are vdpbf16ps: each fp32 lane adds the products of a pair of bf16 weights (k, k + 1) with a
 * pair of x, so x needs no fp32 copy and one instruction does 32 multiply-adds against the AVX2
 * loop's 8 (and its shift and mask). That build packs its own layout: per panel and pair of k,
 * 32-bit word c holds column c's weight at k (low half) and k + 1 (high half); an odd K's last
 * k follows as the panel's 16 values in column order, widened and FMA'd in fp32. Products of
 * bf16 are exact in fp32; vdpbf16ps adds the pair's two in turn and flushes subnormals (the
 * other loops keep them). A row's sums never depend on the other rows in the batch.
 *
 * linear_bf16_simd() says which was built (0 portable, 1 AVX2 + FMA, 2 NEON, 3 AVX-512 BF16).
 * The caller uses this kernel only where it has a vector path (elsewhere F.linear is the better
 * bf16 path), and before oneDNN only with AVX-512 BF16 (cpu_linear.py says why).
 * Built at first use by pipeline/kernels/cpu_build.py, like paged_attention_cpu.c.
 */
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"

#if defined(STEPWISE_PORTABLE)
#define LB_SIMD 0
#elif defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#include <string.h>
#define LB_SIMD 3
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

/* Where packed value `kk * NR + i` of a panel comes from: (column in the panel, k). */
#if LB_SIMD == 3
static inline void source(int64_t kk, int i, int64_t k, int *col, int64_t *from) {
  if (kk < (k & ~(int64_t)1)) { /* pairs of k: word i / 2 is column i / 2, k even then odd */
    const int64_t pair = kk / 2 * 2;
    const int idx = (int)((kk - pair) * NR + i);
    *col = idx / 2;
    *from = pair + idx % 2;
  } else { /* an odd K's last k: column order */
    *col = i;
    *from = kk;
  }
}
#else
static inline void source(int64_t kk, int i, int64_t k, int *col, int64_t *from) {
  (void)k; /* word i / 2 holds column i / 2 (low half) and i / 2 + 8 (high half) */
  *col = i / 2 + (i % 2) * (NR / 2);
  *from = kk;
}
#endif

/* w [N, K] (row stride K) -> packed (see the top), padding columns zero: N rounded up to whole
 * panels, times K values (linear_cpu.py's packed_size). */
void linear_bf16_pack(const uint16_t *w, uint16_t *packed, int64_t n, int64_t k) {
  const int64_t panels = (n + NR - 1) / NR;
#pragma omp parallel for if (n * k >= PARALLEL_MIN)
  for (int64_t p = 0; p < panels; p++) {
    uint16_t *dst = packed + p * k * NR;
    for (int64_t kk = 0; kk < k; kk++)
      for (int i = 0; i < NR; i++) {
        int c;
        int64_t from;
        source(kk, i, k, &c, &from);
        const int64_t col = p * NR + c;
        dst[kk * NR + i] = col < n ? w[col * k + from] : 0;
      }
  }
}

/* Sums of rows x[0 .. R) (row stride sx: bf16 for AVX-512 BF16, else an fp32 copy) against
 * panels w[0 .. P) (panel stride k * NR) into acc[r][p * NR + c], columns in natural order. */
#if LB_SIMD
#define UNROLL _Pragma("GCC unroll 16")
#endif
#if LB_SIMD == 3
#define MICRO(R, P)                                                                         \
  static void micro_##R##_##P(const uint16_t *x, int64_t sx, const uint16_t *w, int64_t k,  \
                              float *acc) {                                                 \
    __m512 s[R][P];                                                                         \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int p = 0; p < P; p++) s[r][p] = _mm512_setzero_ps();                     \
    const int64_t k2 = k & ~(int64_t)1;                                                     \
    for (int64_t kk = 0; kk < k2; kk += 2) {                                                \
      __m512bh wv[P];                                                                       \
      UNROLL for (int p = 0; p < P; p++)                                                    \
        wv[p] = (__m512bh)_mm512_loadu_si512(w + (p * k + kk) * NR);                        \
      UNROLL for (int r = 0; r < R; r++) {                                                  \
        int32_t pair;                                                                       \
        memcpy(&pair, x + r * sx + kk, sizeof pair);                                        \
        const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);                              \
        UNROLL for (int p = 0; p < P; p++) s[r][p] = _mm512_dpbf16_ps(s[r][p], xv, wv[p]);  \
      }                                                                                     \
    }                                                                                       \
    if (k & 1)                                                                              \
      UNROLL for (int p = 0; p < P; p++) {                                                  \
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + (p * k + k2) * NR));   \
        const __m512 wf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16)); \
        UNROLL for (int r = 0; r < R; r++)                                                  \
          s[r][p] = _mm512_fmadd_ps(_mm512_set1_ps(bf16_to_f32(x[r * sx + k2])), wf, s[r][p]); \
      }                                                                                     \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int p = 0; p < P; p++) _mm512_storeu_ps(acc + r * GROUP * NR + p * NR, s[r][p]); \
  }
#elif LB_SIMD == 1
/* (UNROLL: the loops over rows and panels are unrolled before gcc splits s[][] into
 * registers; else it keeps a copy on the stack and stores all of it every k.) */
#define MICRO(R, P)                                                                         \
  static void micro_##R##_##P(const float *xf, int64_t sx, const uint16_t *w, int64_t k,    \
                              float *acc) {                                                 \
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
          const __m256 xv = _mm256_broadcast_ss(xf + r * sx + kk);                           \
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
  static void micro_##R##_##P(const float *xf, int64_t sx, const uint16_t *w, int64_t k,    \
                              float *acc) {                                                 \
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
          const float32x4_t xv = vld1q_dup_f32(xf + r * sx + kk);                            \
          UNROLL for (int v = 0; v < 4; v++) s[r][4 * p + v] = vfmaq_f32(s[r][4 * p + v], xv, c[v]); \
        }                                                                                   \
      }                                                                                     \
    }                                                                                       \
    UNROLL for (int r = 0; r < R; r++)                                                      \
      UNROLL for (int v = 0; v < 4 * P; v++) vst1q_f32(acc + r * GROUP * NR + v * 4, s[r][v]); \
  }
#else
#define MICRO(R, P)                                                                         \
  static void micro_##R##_##P(const float *xf, int64_t sx, const uint16_t *w, int64_t k,    \
                              float *acc) {                                                 \
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
          for (int c = 0; c < NR; c++) s[r][p * NR + c] += xf[r * sx + kk] * col[c];         \
      }                                                                                     \
    for (int r = 0; r < R; r++)                                                             \
      for (int c = 0; c < P * NR; c++) acc[r * GROUP * NR + c] = s[r][c];                   \
  }
#endif

#if LB_SIMD == 3
/* 32 zmm: R x 4 sums, 4 weight vectors and a broadcast fit for every R up to 6. */
typedef uint16_t x_t; /* x as it comes: vdpbf16ps takes bf16 pairs */
MICRO(1, 4)
MICRO(2, 4)
MICRO(3, 4)
MICRO(4, 4)
MICRO(5, 4)
MICRO(6, 4)
MICRO(1, 1)
MICRO(2, 1)
MICRO(3, 1)
MICRO(4, 1)
MICRO(5, 1)
MICRO(6, 1)
typedef void (*micro_fn)(const x_t *, int64_t, const uint16_t *, int64_t, float *);
static const micro_fn WIDE[MAX_ROWS + 1] = {0, micro_1_4, micro_2_4, micro_3_4,
                                            micro_4_4, micro_5_4, micro_6_4};
static const int WIDE_PANELS[MAX_ROWS + 1] = {0, 4, 4, 4, 4, 4, 4};
#else
/* Panels per call for R rows: as many as keep 2 R P sums within 12 registers (and GROUP). */
typedef float x_t; /* an fp32 copy of x, made once per call */
MICRO(1, 4)
MICRO(1, 1)
MICRO(2, 2)
MICRO(2, 1)
MICRO(3, 2)
MICRO(3, 1)
MICRO(4, 1)
MICRO(5, 1)
MICRO(6, 1)
typedef void (*micro_fn)(const x_t *, int64_t, const uint16_t *, int64_t, float *);
static const micro_fn WIDE[MAX_ROWS + 1] = {0, micro_1_4, micro_2_2, micro_3_2,
                                            micro_4_1, micro_5_1, micro_6_1};
static const int WIDE_PANELS[MAX_ROWS + 1] = {0, 4, 2, 2, 1, 1, 1};
#endif
static const micro_fn ONE[MAX_ROWS + 1] = {0, micro_1_1, micro_2_1, micro_3_1,
                                           micro_4_1, micro_5_1, micro_6_1};

/* x [M, K] (row stride sx), packed (linear_bf16_pack of W [N, K]), bias [N] or NULL ->
 * out [M, N] (row stride so), each output rounded once from its fp32 sum (+ bias).
 * Returns 0, or -1 where the fp32 copy of x cannot be allocated (nothing is written). */
int linear_bf16(const uint16_t *x, const uint16_t *packed, const uint16_t *bias, uint16_t *out,
                int64_t m, int64_t n, int64_t k, int64_t sx, int64_t so) {
  if (m <= 0 || n <= 0) return 0;
  const int parallel = m * n * k >= PARALLEL_MIN;
#if LB_SIMD == 3
  const x_t *xs = x, *xf = 0; /* read as it is: no copy */
  const int64_t xstride = sx;
#else
  float *xf = malloc(sizeof(float) * (size_t)(m * k > 0 ? m * k : 1));
  if (xf == 0) return -1;
#pragma omp parallel for if (parallel && m * k >= PARALLEL_MIN / 8)
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < k; c++) xf[r * k + c] = bf16_to_f32(x[r * sx + c]);
  const x_t *xs = xf;
  const int64_t xstride = k;
#endif

  const int64_t panels = (n + NR - 1) / NR, groups = (panels + GROUP - 1) / GROUP;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t g = 0; g < groups; g++) {
    float acc[MAX_ROWS * GROUP * NR];
    const int64_t p0 = g * GROUP;
    const int64_t np = panels - p0 < GROUP ? panels - p0 : GROUP;
    for (int64_t r0 = 0; r0 < m; r0 += MAX_ROWS) {
      const int rows = (int)(m - r0 < MAX_ROWS ? m - r0 : MAX_ROWS);
      const x_t *xr = xs + r0 * xstride;
      for (int64_t p = 0; p < np;) {
        const uint16_t *w = packed + (p0 + p) * k * NR;
        float *a = acc + p * NR;
        if (np - p >= WIDE_PANELS[rows]) {
          WIDE[rows](xr, xstride, w, k, a);
          p += WIDE_PANELS[rows];
        } else {
          ONE[rows](xr, xstride, w, k, a);
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
  free((void *)xf);
  return 0;
}
