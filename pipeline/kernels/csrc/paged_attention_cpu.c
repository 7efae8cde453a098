/* Paged decode attention on CPU: one query token per sequence against its paged K/V.
 *
 * The same computation as paged_decode_attention_torch (pipeline/kernels/paged_attention.py),
 * without its gather: the torch path copies every sequence's blocks (padded to its group's
 * widest table) into a contiguous buffer per layer, then reads them again in two batched
 * matmuls. Here each (sequence, KV head) walks its own block table once for K and once for V,
 * reading every cached token once and nothing past its context. The G = H / KVH query heads
 * that share a KV head are done together, so each K/V row is loaded once for all of them.
 * Softmax and accumulation are in fp32; a row with context length 0 writes zeros.
 *
 * Compiled at first use by pipeline/kernels/cpu_build.py (gcc -O3 -march=native -ffast-math
 * -fopenmp). Its OpenMP calls resolve to the libgomp that torch has already loaded (the same
 * soname, libgomp.so.1), so it runs on torch's thread pool with torch.set_num_threads().
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
/* The vector pieces for the widest ISA this build targets (-march=native: the host's flags);
 * with neither, or with STEPWISE_PORTABLE defined (bench/cpu_kernels.py's baseline), the
 * portable loops of paged_attention_cpu_impl.h alone, vectorized by the compiler. */
#if defined(STEPWISE_PORTABLE)
#elif defined(__AVX512F__)
#include "paged_attention_avx512.h"
#elif defined(__AVX2__) && defined(__FMA__)
#include "paged_attention_avx2.h"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include "paged_attention_neon.h"
#endif
/* Rows of D in each thread's `row` scratch: a V chunk (or a K chunk) widened to fp32. */
#ifdef PA_SIMD
#define PA_ROWS (PA_PV_CHUNK > PA_LANES ? PA_PV_CHUNK : PA_LANES)
#else
#define PA_ROWS 1
#endif

#include "attn_shape.h"

/* Errors (nothing is written): the wrapper raises them as KernelArgumentError. */
enum { ATTN_OK = 0, ATTN_NO_MEMORY = -1, ATTN_BAD_CONTEXT = -2, ATTN_BAD_BLOCK = -3 };

/* Checks every row before any work: its context fits its table, and each block id it will
 * read lies in the cache (C would read out of bounds where torch raises). Sets *max_ctx. */
static int check_rows(const int64_t *block_tables, const int64_t *context_lens,
                      const struct attn_shape *s, int64_t *max_ctx) {
  *max_ctx = 0;
  for (int64_t i = 0; i < s->b; i++) {
    const int64_t ctx = context_lens[i];
    if (ctx < 0 || ctx > s->table_width * s->bs) return ATTN_BAD_CONTEXT;
    const int64_t *table = block_tables + i * s->sbt;
    for (int64_t j = 0; j < (ctx + s->bs - 1) / s->bs; j++)
      if (table[j] < 0 || table[j] >= s->num_blocks) return ATTN_BAD_BLOCK;
    *max_ctx = ctx > *max_ctx ? ctx : *max_ctx;
  }
  return ATTN_OK;
}

/* A row of K or V as fp32: fp32 rows are read in place, bf16 rows converted into `buf`. */
static inline const float *load_row_f32(const float *src, float *buf, int64_t d) {
  (void)buf;
  (void)d;
  return src;
}
static inline void store_row_f32(const float *src, float *dst, int64_t d) {
  memcpy(dst, src, (size_t)d * sizeof(float));
}
static inline const float *load_row_bf16(const uint16_t *src, float *buf, int64_t d) {
  /* Widen the bits (vectorizes to a zero-extend and a shift); -fno-strict-aliasing is set. */
  uint32_t *bits = (uint32_t *)buf;
  for (int64_t i = 0; i < d; i++) bits[i] = (uint32_t)src[i] << 16;
  return buf;
}
static inline void store_row_bf16(const float *src, uint16_t *dst, int64_t d) {
  for (int64_t i = 0; i < d; i++) dst[i] = f32_to_bf16(src[i]);
}

static void softmax_inplace(float *x, int64_t n) {
  float m = x[0];
  for (int64_t t = 1; t < n; t++) m = x[t] > m ? x[t] : m;
  float sum = 0.f;
  for (int64_t t = 0; t < n; t++) {
    x[t] = expf(x[t] - m);
    sum += x[t];
  }
  const float inv = 1.f / sum;
  for (int64_t t = 0; t < n; t++) x[t] *= inv;
}

#define ELEM float
#define SUFFIX f32
#include "paged_attention_cpu_impl.h"
#undef ELEM
#undef SUFFIX
#undef ELEM_IS_BF16

#define ELEM uint16_t
#define SUFFIX bf16
#define ELEM_IS_BF16
#include "paged_attention_cpu_impl.h"
#undef ELEM
#undef SUFFIX
#undef ELEM_IS_BF16
