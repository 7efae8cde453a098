/* fp32 linear on x86 CPUs: y = x W^T + b, x [M, K], W [N, K], y [M, N], all fp32.
 *
 * A decode step reads every weight once and multiplies it by a few rows: the weights' bytes
 * are the cost. oneDNN's fp32 GEMM (cpu_linear.PackedLinear) reached 72-76% of the AVX-512
 * host's streaming bandwidth at one row and 57-61% at eight (bench/RESULTS.md); this kernel
 * streams each weight panel once per call and keeps every row's sums in registers. There it
 * also led oneDNN up to 64 rows and tied at 256 (prefill chunks).
 *
 * Weights are packed once (linear_f32_pack) into panels of 16 output columns, k-major: for each
 * k the panel's 16 values, contiguous. The micro-kernel keeps R rows x P panels of sums in
 * registers (AVX-512: one zmm a panel, R <= 8, P = 3: 24 of 32 registers; AVX2 + FMA: two ymm
 * a panel, 2 R P <= 12 of 16), broadcasting x[r, k] from x itself. A thread takes a contiguous
 * range of panels and runs every row block over 3 panels at a time, so a panel read from memory
 * for the first rows is in cache for the rest.
 *
 * In the vector loops each output is one fp32 chain of FMAs over k in order, plus the bias,
 * whatever micro-kernel or thread its row and column fall in: a row's result does not depend
 * on the other rows of the call (the speculative verifying pass gives what one-row decoding
 * gives) nor on the thread count. (The portable loops, which the engine does not use, are
 * vectorized by gcc differently per row count.)
 *
 * linear_f32_simd() says which loop was built: 0 portable (no AVX2 + FMA, or STEPWISE_PORTABLE;
 * the caller keeps oneDNN there), 1 AVX2 + FMA, 2 AVX-512.
 * Built at first use by pipeline/kernels/cpu_build.py, like linear_bf16_cpu.c.
 */
#include <omp.h>
#include <stdint.h>

#if defined(STEPWISE_PORTABLE)
#define LF_SIMD 0
#elif defined(__AVX512F__)
#include <immintrin.h>
#define LF_SIMD 2
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LF_SIMD 1
#else
#define LF_SIMD 0
#endif

#define NR 16 /* output columns per packed panel (linear_cpu.py: PANEL) */
#define CHUNK 3 /* panels a row block runs over before the next row block */
#if LF_SIMD == 2
#define MAX_ROWS 8
#elif LF_SIMD == 1
#define MAX_ROWS 6
#else
#define MAX_ROWS 4
#endif
#define PARALLEL_MIN (1 << 17) /* multiply-adds below which one thread does it all */

int linear_f32_simd(void) { return LF_SIMD; }

/* w [N, K] (row stride K) -> packed (see the top), padding columns zero: N rounded up to whole
 * panels, times K values (linear_cpu.py's packed_size). */
void linear_f32_pack(const float *w, float *packed, int64_t n, int64_t k) {
  const int64_t panels = (n + NR - 1) / NR;
#pragma omp parallel for if (n * k >= PARALLEL_MIN)
  for (int64_t p = 0; p < panels; p++)
    for (int64_t kk = 0; kk < k; kk++)
      for (int c = 0; c < NR; c++) {
        const int64_t col = p * NR + c;
        packed[(p * k + kk) * NR + c] = col < n ? w[col * k + kk] : 0.f;
      }
}

/* Rows x[0 .. R) (row stride sx) against panels w[0 .. P) (panel stride k * NR) -> out (row
 * stride so), `cols` columns from the first panel's first (the rest are padding), + bias. */
#define UNROLL _Pragma("GCC unroll 16")
#if LF_SIMD == 2
#define MICRO(R, P)                                                                          \
  static void micro_##R##_##P(const float *x, int64_t sx, const float *w, int64_t k,        \
                              float *out, int64_t so, int64_t cols, const float *bias) {    \
    __m512 s[R][P];                                                                          \
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) s[r][p] =          \
        _mm512_setzero_ps();                                                                 \
    for (int64_t kk = 0; kk < k; kk++) {                                                     \
      __m512 wv[P];                                                                          \
      UNROLL for (int p = 0; p < P; p++) wv[p] = _mm512_loadu_ps(w + (p * k + kk) * NR);     \
      UNROLL for (int r = 0; r < R; r++) {                                                   \
        const __m512 xv = _mm512_set1_ps(x[r * sx + kk]);                                    \
        UNROLL for (int p = 0; p < P; p++) s[r][p] = _mm512_fmadd_ps(xv, wv[p], s[r][p]);    \
      }                                                                                      \
    }                                                                                        \
    UNROLL for (int p = 0; p < P; p++) {                                                     \
      const int64_t left = cols - p * NR;                                                    \
      if (left <= 0) break;                                                                  \
      const __mmask16 m = left >= NR ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);   \
      const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + p * NR) : _mm512_setzero_ps(); \
      UNROLL for (int r = 0; r < R; r++)                                                     \
          _mm512_mask_storeu_ps(out + r * so + p * NR, m, _mm512_add_ps(s[r][p], b));        \
    }                                                                                        \
  }
#elif LF_SIMD == 1
#define MICRO(R, P)                                                                          \
  static void micro_##R##_##P(const float *x, int64_t sx, const float *w, int64_t k,        \
                              float *out, int64_t so, int64_t cols, const float *bias) {    \
    __m256 s[R][2 * P];                                                                      \
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int v = 0; v < 2 * P; v++) s[r][v] =      \
        _mm256_setzero_ps();                                                                 \
    for (int64_t kk = 0; kk < k; kk++) {                                                     \
      __m256 wv[2 * P];                                                                      \
      UNROLL for (int v = 0; v < 2 * P; v++) wv[v] =                                         \
          _mm256_loadu_ps(w + ((v / 2) * k + kk) * NR + (v % 2) * 8);                        \
      UNROLL for (int r = 0; r < R; r++) {                                                   \
        const __m256 xv = _mm256_broadcast_ss(x + r * sx + kk);                              \
        UNROLL for (int v = 0; v < 2 * P; v++) s[r][v] = _mm256_fmadd_ps(xv, wv[v], s[r][v]); \
      }                                                                                      \
    }                                                                                        \
    float row[2 * P * 8];                                                                    \
    UNROLL for (int r = 0; r < R; r++) {                                                     \
      UNROLL for (int v = 0; v < 2 * P; v++) _mm256_storeu_ps(row + v * 8, s[r][v]);         \
      const int64_t n = cols < P * NR ? cols : P * NR;                                       \
      for (int64_t c = 0; c < n; c++) out[r * so + c] = row[c] + (bias ? bias[c] : 0.f);     \
    }                                                                                        \
  }
#else
#define MICRO(R, P)                                                                          \
  static void micro_##R##_##P(const float *x, int64_t sx, const float *w, int64_t k,        \
                              float *out, int64_t so, int64_t cols, const float *bias) {    \
    float s[R][P * NR];                                                                      \
    for (int r = 0; r < R; r++)                                                              \
      for (int c = 0; c < P * NR; c++) s[r][c] = 0.f;                                        \
    for (int64_t kk = 0; kk < k; kk++)                                                       \
      for (int p = 0; p < P; p++)                                                            \
        for (int r = 0; r < R; r++)                                                          \
          for (int c = 0; c < NR; c++)                                                       \
            s[r][p * NR + c] += x[r * sx + kk] * w[(p * k + kk) * NR + c];                   \
    const int64_t n = cols < P * NR ? cols : P * NR;                                         \
    for (int r = 0; r < R; r++)                                                              \
      for (int64_t c = 0; c < n; c++) out[r * so + c] = s[r][c] + (bias ? bias[c] : 0.f);    \
  }
#endif

typedef void (*micro_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t,
                         int64_t, const float *);
#if LF_SIMD == 2
MICRO(1, 3) MICRO(2, 3) MICRO(3, 3) MICRO(4, 3) MICRO(5, 3) MICRO(6, 3) MICRO(7, 3) MICRO(8, 3)
MICRO(1, 1) MICRO(2, 1) MICRO(3, 1) MICRO(4, 1) MICRO(5, 1) MICRO(6, 1) MICRO(7, 1) MICRO(8, 1)
static const micro_fn WIDE[MAX_ROWS + 1] = {0,         micro_1_3, micro_2_3, micro_3_3, micro_4_3,
                                            micro_5_3, micro_6_3, micro_7_3, micro_8_3};
static const int WIDE_PANELS[MAX_ROWS + 1] = {0, 3, 3, 3, 3, 3, 3, 3, 3};
static const micro_fn ONE[MAX_ROWS + 1] = {0,         micro_1_1, micro_2_1, micro_3_1, micro_4_1,
                                           micro_5_1, micro_6_1, micro_7_1, micro_8_1};
#elif LF_SIMD == 1
MICRO(1, 3) MICRO(2, 3) MICRO(3, 2)
MICRO(1, 1) MICRO(2, 1) MICRO(3, 1) MICRO(4, 1) MICRO(5, 1) MICRO(6, 1)
static const micro_fn WIDE[MAX_ROWS + 1] = {0,         micro_1_3, micro_2_3, micro_3_2,
                                            micro_4_1, micro_5_1, micro_6_1};
static const int WIDE_PANELS[MAX_ROWS + 1] = {0, 3, 3, 2, 1, 1, 1};
static const micro_fn ONE[MAX_ROWS + 1] = {0,         micro_1_1, micro_2_1, micro_3_1,
                                           micro_4_1, micro_5_1, micro_6_1};
#else
MICRO(1, 1) MICRO(2, 1) MICRO(3, 1) MICRO(4, 1)
static const micro_fn ONE[MAX_ROWS + 1] = {0, micro_1_1, micro_2_1, micro_3_1, micro_4_1};
static const int WIDE_PANELS[MAX_ROWS + 1] = {0, 1, 1, 1, 1};
#define WIDE ONE
#endif

/* Panels [p0, p1) for every row, CHUNK panels at a time. */
static void panel_range(const float *x, const float *packed, const float *bias, float *out,
                        int64_t m, int64_t n, int64_t k, int64_t sx, int64_t so, int64_t p0,
                        int64_t p1) {
  for (int64_t q = p0; q < p1; q += CHUNK) {
    const int64_t end = p1 - q < CHUNK ? p1 : q + CHUNK;
    for (int64_t r0 = 0; r0 < m; r0 += MAX_ROWS) {
      const int rows = (int)(m - r0 < MAX_ROWS ? m - r0 : MAX_ROWS);
      const float *xr = x + r0 * sx;
      for (int64_t p = q; p < end;) {
        const int64_t c0 = p * NR;
        const float *w = packed + p * k * NR, *b = bias ? bias + c0 : 0;
        float *o = out + r0 * so + c0;
        if (end - p >= WIDE_PANELS[rows]) {
          WIDE[rows](xr, sx, w, k, o, so, n - c0, b);
          p += WIDE_PANELS[rows];
        } else {
          ONE[rows](xr, sx, w, k, o, so, n - c0, b);
          p += 1;
        }
      }
    }
  }
}

/* x [M, K] (row stride sx), packed (linear_f32_pack of W [N, K]), bias [N] or NULL ->
 * out [M, N] (row stride so). Each thread takes a contiguous range of whole panels. Returns 0
 * (the bf16 kernel's signature: it can fail to allocate; this one allocates nothing). */
int linear_f32(const float *x, const float *packed, const float *bias, float *out, int64_t m,
                int64_t n, int64_t k, int64_t sx, int64_t so) {
  if (m <= 0 || n <= 0) return 0;
  const int64_t panels = (n + NR - 1) / NR;
  if (m * n * k < PARALLEL_MIN) {
    panel_range(x, packed, bias, out, m, n, k, sx, so, 0, panels);
    return 0;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    panel_range(x, packed, bias, out, m, n, k, sx, so, panels * t / nt, panels * (t + 1) / nt);
  }
  return 0;
}
