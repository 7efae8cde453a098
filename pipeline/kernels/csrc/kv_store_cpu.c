/* KV store on CPU (store_kv in pipeline/kernels/kv_store.py): each new token's K and V rows
 * written into its cache slot, a slot of -1 skipped.
 *
 * The torch reference costs a check for -1 slots (a sync), then per cache an index_copy_ of
 * the transposed rows, which copies them once more first: four to six ops and about 80 us a
 * layer at decode sizes, for a few kilobytes. Here every (token, head) row is one memcpy.
 *
 * Caches: [KVH, slots, D] (the [KVH, num_blocks, block_size, D] layout, its last three dims
 * dense), head stride `cache_head` bytes, rows of `row_bytes`. k, v: [T, KVH, D] with token and
 * head strides in bytes (the rows of D dense). Strides are in bytes, so one entry point serves
 * every element type.
 */
#include <stdint.h>
#include <string.h>

#define PARALLEL_MIN_BYTES (1 << 20)

/* Returns 0, or -1 if a slot is below -1 or past the cache (nothing is written then). */
int store_kv(char *k_cache, char *v_cache, const char *k, const char *v, const int64_t *slots,
             int64_t t, int64_t kvh, int64_t num_slots, int64_t row_bytes, int64_t cache_head,
             int64_t k_tok, int64_t k_head, int64_t v_tok, int64_t v_head) {
  for (int64_t i = 0; i < t; i++)
    if (slots[i] < -1 || slots[i] >= num_slots) return -1;
#pragma omp parallel for collapse(2) schedule(static) if (2 * t * kvh * row_bytes >= PARALLEL_MIN_BYTES)
  for (int64_t i = 0; i < t; i++) {
    for (int64_t h = 0; h < kvh; h++) {
      const int64_t s = slots[i];
      if (s < 0) continue;
      const int64_t at = h * cache_head + s * row_bytes;
      memcpy(k_cache + at, k + i * k_tok + h * k_head, (size_t)row_bytes);
      memcpy(v_cache + at, v + i * v_tok + h * v_head, (size_t)row_bytes);
    }
  }
  return 0;
}
