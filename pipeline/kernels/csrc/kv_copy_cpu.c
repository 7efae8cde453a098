/* Pool-to-pool KV block copy on CPU (copy_blocks_between in pipeline/kernels/kv_transfer.py).
 *
 * Both pools are [outer = layers x 2 x kv_heads, num_blocks, block] with rows of `block_bytes`
 * bytes; runs (src_start, dst_start, length) of consecutive blocks are each copied with one
 * memcpy per outer row. The torch reference issues one strided copy per run (a few tens of
 * microseconds each, and a scattered handoff is one run per block); here every row of every
 * run is a plain memcpy, split across torch's OpenMP threads when there is enough to copy.
 */
#include <stdint.h>
#include <string.h>

#define PARALLEL_MIN_BYTES (1 << 20)

/* Returns 0, or -1 if a run reaches outside either pool (nothing is copied then). */
int copy_block_runs(char *dst, const char *src, const int64_t *runs, int64_t num_runs,
                    int64_t outer, int64_t dst_blocks, int64_t src_blocks, int64_t block_bytes) {
  int64_t total = 0;
  for (int64_t r = 0; r < num_runs; r++) {
    const int64_t s = runs[3 * r], d = runs[3 * r + 1], n = runs[3 * r + 2];
    if (s < 0 || d < 0 || n < 0 || s + n > src_blocks || d + n > dst_blocks) return -1;
    total += n;
  }
  const int64_t dst_row = dst_blocks * block_bytes, src_row = src_blocks * block_bytes;
#pragma omp parallel for collapse(2) schedule(static) if (outer * total * block_bytes >= PARALLEL_MIN_BYTES)
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t r = 0; r < num_runs; r++) {
      const int64_t s = runs[3 * r], d = runs[3 * r + 1], n = runs[3 * r + 2];
      memcpy(dst + o * dst_row + d * block_bytes, src + o * src_row + s * block_bytes,
             (size_t)(n * block_bytes));
    }
  }
  return 0;
}
