/* Inverse-CDF sampling of softmax(x / T) per row on CPU (sample_torch in pipeline/kernels/
 * sample.py): the first index whose running sum of probabilities exceeds u times their total.
 *
 * The reference divides the row, takes its softmax, its cumulative sum and a binary search:
 * four [S, V] passes and three temporaries, about 180 us a row of a 49k vocabulary on this
 * host, where the row's statistics (logits_stats_cpu.c) take 20 us. A full batch of sixteen
 * with speculation samples 80 rows a step. Here nothing is allocated and each row is read
 * twice: once for its max, once for exp(x / T - max) summed per block of positions (the block
 * sums kept, a few KB on the stack); the block where the running sum passes u * total is then
 * found from the block sums, and only its positions' exponentials are computed again.
 * The running sum over the blocks is the total's own additions in the same order, so a block
 * is always found; within it the sums are added again one by one, and should rounding leave
 * them short of the target, the block's last position with a nonzero probability is taken.
 * Rows are split across torch's OpenMP threads; a row's pick never depends on the others.
 * Logits and temperatures are assumed finite, temperatures > 0 (the sampler's greedy rows
 * never come here).
 */
#include <math.h>
#include <stdint.h>

#define MAX_BLOCKS 1024
#define MIN_BLOCK 256

static float row_max(const float *x, int64_t v) {
  float m = x[0];
  for (int64_t i = 1; i < v; i++) m = x[i] > m ? x[i] : m;
  return m;
}

static float block_sum(const float *x, int64_t lo, int64_t hi, float inv, float m) {
  float acc = 0.f;
  for (int64_t i = lo; i < hi; i++) acc += expf(x[i] * inv - m);
  return acc;
}

/* x: [s, v] with row stride `stride` (v >= 1); temps, uniforms (in [0, 1)): [s]; out: [s]. */
void sample_f32(const float *x, int64_t s, int64_t v, int64_t stride, const float *temps,
                const float *uniforms, int64_t *out) {
  /* blocks of 256 positions, longer where the row would need more than MAX_BLOCKS of them */
  const int64_t bs = v <= (int64_t)MIN_BLOCK * MAX_BLOCKS ? MIN_BLOCK
                                                         : (v + MAX_BLOCKS - 1) / MAX_BLOCKS;
  const int64_t nb = (v + bs - 1) / bs;
#pragma omp parallel for schedule(static) if (s * v >= (1 << 16))
  for (int64_t r = 0; r < s; r++) {
    const float *xr = x + r * stride;
    const float inv = 1.f / temps[r];
    const float m = row_max(xr, v) * inv;
    float sums[MAX_BLOCKS];
    float total = 0.f;
    for (int64_t b = 0; b < nb; b++) {
      const int64_t hi = (b + 1) * bs < v ? (b + 1) * bs : v;
      sums[b] = block_sum(xr, b * bs, hi, inv, m);
      total += sums[b];
    }
    const float target = uniforms[r] * total;
    float run = 0.f;
    int64_t b = 0;
    while (b < nb && !(run + sums[b] > target)) run += sums[b++];
    if (b == nb) { /* u * total rounded up to the total: the last position with a probability */
      for (b = nb - 1; b > 0 && !(sums[b] > 0.f); b--) {}
      int64_t i = ((b + 1) * bs < v ? (b + 1) * bs : v) - 1;
      while (i > b * bs && !(expf(xr[i] * inv - m) > 0.f)) i--;
      out[r] = i;
      continue;
    }
    const int64_t hi = (b + 1) * bs < v ? (b + 1) * bs : v;
    int64_t pick = -1, last = b * bs;
    for (int64_t i = b * bs; i < hi; i++) {
      const float e = expf(xr[i] * inv - m);
      if (e > 0.f) last = i;
      run += e;
      if (run > target) {
        pick = i;
        break;
      }
    }
    out[r] = pick >= 0 ? pick : last;
  }
}
