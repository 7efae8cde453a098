/* The body of paged_attention_cpu.c for one element type, included once per type with
 * ELEM (the storage type) and SUFFIX (f32 | bf16) defined; load_row_SUFFIX and
 * store_row_SUFFIX convert rows of D elements to and from fp32. */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define NAME(x) CAT(x, SUFFIX)

/* One (sequence, KV head): scores of its G query heads, softmax, weighted sum of V.
 * Scratch: scores [G, ctx], qf [G, D], acc [G, D], row [D]. */
static inline __attribute__((always_inline)) void NAME(attend_body)(
    const ELEM *q, const ELEM *kh, const ELEM *vh, const int64_t *table, int64_t ctx, ELEM *out,
    const struct attn_shape *s, float *scores, float *qf, float *acc, float *row,
    const int64_t d) {
  const int64_t g_heads = s->g_heads, bs = s->bs;
  for (int64_t g = 0; g < g_heads; g++) {
    const float *qr = NAME(load_row)(q + g * s->sq_h, row, d);
    for (int64_t c = 0; c < d; c++) qf[g * d + c] = qr[c] * s->scale;
  }
  memset(acc, 0, (size_t)(g_heads * d) * sizeof(float));
  if (ctx > 0) {
    const int64_t nblk = (ctx + bs - 1) / bs;
    for (int64_t j = 0; j < nblk; j++) {  /* scores = q . K */
      const ELEM *kb = kh + table[j] * s->sk_blk;
      const int64_t n = ctx - j * bs < bs ? ctx - j * bs : bs;
      for (int64_t i = 0; i < n; i++) {
        const float *kr = NAME(load_row)(kb + i * d, row, d);
        for (int64_t g = 0; g < g_heads; g++) {
          const float *qg = qf + g * d;
          float dot = 0.f;
          for (int64_t c = 0; c < d; c++) dot += qg[c] * kr[c];
          scores[g * ctx + j * bs + i] = dot;
        }
      }
    }
    for (int64_t g = 0; g < g_heads; g++) softmax_inplace(scores + g * ctx, ctx);
    for (int64_t j = 0; j < nblk; j++) {  /* acc = probs . V */
      const ELEM *vb = vh + table[j] * s->sv_blk;
      const int64_t n = ctx - j * bs < bs ? ctx - j * bs : bs;
      for (int64_t i = 0; i < n; i++) {
        const float *vr = NAME(load_row)(vb + i * d, row, d);
        for (int64_t g = 0; g < g_heads; g++) {
          const float p = scores[g * ctx + j * bs + i];
          float *ag = acc + g * d;
          for (int64_t c = 0; c < d; c++) ag[c] += p * vr[c];
        }
      }
    }
  }
  for (int64_t g = 0; g < g_heads; g++) NAME(store_row)(acc + g * d, out + g * s->so_h, d);
}

/* The common head dims get a copy each with `d` a constant (unrolled, no remainder loops). */
static void NAME(attend_one)(const ELEM *q, const ELEM *kh, const ELEM *vh,
                             const int64_t *table, int64_t ctx, ELEM *out,
                             const struct attn_shape *s, float *scores, float *qf, float *acc,
                             float *row) {
  switch (s->d) {
    case 32:
      NAME(attend_body)(q, kh, vh, table, ctx, out, s, scores, qf, acc, row, 32);
      break;
    case 64:
      NAME(attend_body)(q, kh, vh, table, ctx, out, s, scores, qf, acc, row, 64);
      break;
    case 128:
      NAME(attend_body)(q, kh, vh, table, ctx, out, s, scores, qf, acc, row, 128);
      break;
    default:
      NAME(attend_body)(q, kh, vh, table, ctx, out, s, scores, qf, acc, row, s->d);
  }
}

/* q, out [B, H, D]; caches [KVH, blocks, bs, D]; block_tables [B, >= blocks]. Returns
 * ATTN_OK or an error of check_rows / ATTN_NO_MEMORY. */
int NAME(paged_decode_attention)(const ELEM *q, const ELEM *k_cache, const ELEM *v_cache,
                                 const int64_t *block_tables, const int64_t *context_lens,
                                 ELEM *out, const struct attn_shape *s) {
  int64_t max_ctx;
  int rc = check_rows(block_tables, context_lens, s, &max_ctx);
  if (rc != ATTN_OK) return rc;
  const int64_t g_heads = s->g_heads, d = s->d, ctx_cap = max_ctx > 0 ? max_ctx : 1;
  const size_t n_scratch = (size_t)(g_heads * ctx_cap + 2 * g_heads * d + d);
#pragma omp parallel
  {
    float *scratch = (float *)malloc(n_scratch * sizeof(float));
    if (scratch == NULL) {
#pragma omp atomic write
      rc = ATTN_NO_MEMORY;
    }
#pragma omp barrier
    if (rc == ATTN_OK) {
      float *qf = scratch + g_heads * ctx_cap;
#pragma omp for schedule(dynamic, 1)
      for (int64_t w = 0; w < s->b * s->kvh; w++) {
        const int64_t i = w / s->kvh, hk = w % s->kvh;
        NAME(attend_one)(q + i * s->sq_b + hk * g_heads * s->sq_h, k_cache + hk * s->sk_h,
                         v_cache + hk * s->sv_h, block_tables + i * s->sbt, context_lens[i],
                         out + i * s->so_b + hk * g_heads * s->so_h, s, scratch, qf,
                         qf + g_heads * d, qf + 2 * g_heads * d);
      }
    }
    free(scratch);
  }
  return rc;
}

#undef NAME
#undef CAT
#undef CAT_
