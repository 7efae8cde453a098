/* The body of paged_attention_cpu.c for one element type, included once per type with
 * ELEM (the storage type) and SUFFIX (f32 | bf16) defined; load_row_SUFFIX and
 * store_row_SUFFIX convert rows of D elements to and from fp32. */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define NAME(x) CAT(x, SUFFIX)

#ifdef PA_SIMD
/* Row pointers of positions t0 .. t0 + n - 1 of a paged cache (head base h, block stride
 * sblk); rows[i] for i in [n, fill) repeat the last one, so a partial chunk reads valid memory. */
static inline void NAME(chunk_rows)(const ELEM *h, const int64_t *table, int64_t sblk,
                                    int64_t bs, int64_t t0, int64_t n, int64_t fill, int64_t d,
                                    const ELEM **rows) {
  int64_t j = t0 / bs, off = t0 % bs;
  for (int64_t i = 0; i < n; i++) {
    rows[i] = h + table[j] * sblk + off * d;
    if (++off == bs) off = 0, j++;
  }
  for (int64_t i = n; i < fill; i++) rows[i] = rows[n - 1];
}

/* scores[g * ctx + t] = scale * q_g . K[t], PA_LANES positions at a time (see the ISA's
 * header: paged_attention_avx512.h or paged_attention_avx2.h). */
#if defined(ELEM_IS_BF16) && !defined(__AVX512BF16__)
/* bf16 rows without vdpbf16ps are widened to fp32 once per chunk into `wide` (rows of D), not
 * once per query head of the group: the widening, not memory, bounded the kernel at G > 1. */
#define PA_WIDEN 1
static inline void pa_widen_rows(const uint16_t **rows, int64_t n, float *wide, int64_t d,
                                 const float **out) {
  for (int64_t i = 0; i < n; i++) {
    for (int64_t c = 0; c < d; c += PA_LANES) pa_storeu(wide + i * d + c, pa_load_bf16(rows[i] + c));
    out[i] = wide + i * d;
  }
}
#else
#define PA_WIDEN 0
#endif

static inline __attribute__((always_inline)) void NAME(qk_simd)(
    const ELEM *q, const ELEM *kh, const int64_t *table, int64_t ctx,
    const struct attn_shape *s, const float *qf, float *scores, float *wide, const int64_t d) {
  const ELEM *rows[PA_LANES];
  const pa_vec scale = pa_set1(s->scale);
  (void)wide;
  for (int64_t t0 = 0; t0 < ctx; t0 += PA_LANES) {
    const int64_t n = ctx - t0 < PA_LANES ? ctx - t0 : PA_LANES;
    NAME(chunk_rows)(kh, table, s->sk_blk, s->bs, t0, n, PA_LANES, d, rows);
#if PA_WIDEN
    const float *wrows[PA_LANES];
    pa_widen_rows(rows, PA_LANES, wide, d, wrows);
#endif
    for (int64_t g = 0; g < s->g_heads; g++) {
      pa_vec acc[PA_LANES];
#pragma GCC unroll 16
      for (int i = 0; i < PA_LANES; i++)
#if PA_WIDEN
        acc[i] = pa_dot_f32(qf + g * d, NULL, wrows[i], d);
#else
        acc[i] = NAME(pa_dot)(qf + g * d, q + g * s->sq_h, rows[i], d);
#endif
      pa_store_first(scores + g * ctx + t0, pa_mul(pa_reduce(acc), scale), n);
    }
  }
}

/* acc[g] = sum_t probs[g * ctx + t] * V[t], fp32, in registers per chunk of positions and
 * PA_COL_VECS vectors of columns (all of them on AVX-512). */
static inline __attribute__((always_inline)) void NAME(pv_simd)(
    const ELEM *vh, const int64_t *table, int64_t ctx, const struct attn_shape *s,
    const float *probs, float *acc, float *wide, const int64_t d) {
  const ELEM *rows[PA_PV_CHUNK];
  const int64_t nv = d / PA_LANES;
  (void)wide;
  for (int64_t t0 = 0; t0 < ctx; t0 += PA_PV_CHUNK) {
    const int64_t n = ctx - t0 < PA_PV_CHUNK ? ctx - t0 : PA_PV_CHUNK;
    NAME(chunk_rows)(vh, table, s->sv_blk, s->bs, t0, n, n, d, rows);
#if PA_WIDEN
    const float *vrows[PA_PV_CHUNK];  /* the chunk in fp32, once for all G heads */
    pa_widen_rows(rows, n, wide, d, vrows);
#define PA_V_ROW(i) vrows[i]
#define PA_V_LOAD pa_load_f32
#else
#define PA_V_ROW(i) rows[i]
#define PA_V_LOAD NAME(pa_load)
#endif
    for (int64_t g = 0; g < s->g_heads; g++) {
      const float *pg = probs + g * ctx + t0;
      for (int64_t c0 = 0; c0 < nv; c0 += PA_COL_VECS) {
        const int64_t nc = nv - c0 < PA_COL_VECS ? nv - c0 : PA_COL_VECS;
        float *ag = acc + g * d + c0 * PA_LANES;
        pa_vec a[PA_COL_VECS];
        for (int64_t c = 0; c < nc; c++) a[c] = pa_loadu(ag + c * PA_LANES);
        for (int64_t i = 0; i < n; i++) {
          const pa_vec p = pa_set1(pg[i]);
          for (int64_t c = 0; c < nc; c++)
            a[c] = pa_fmadd(p, PA_V_LOAD(PA_V_ROW(i) + (c0 + c) * PA_LANES), a[c]);
        }
        for (int64_t c = 0; c < nc; c++) pa_storeu(ag + c * PA_LANES, a[c]);
      }
    }
#undef PA_V_ROW
#undef PA_V_LOAD
  }
}
#if defined(__AVX512BF16__) && defined(ELEM_IS_BF16)
#define PA_PV_PAIRS 1
/* acc[g] = sum_t bf16(probs[g * ctx + t]) * V[t] on vdpbf16ps, positions taken in pairs (t,
 * t + 1): each V row pair is interleaved (unpack lo/hi of 16-bit elements) so one instruction
 * adds both products of 16 columns. The probabilities are rounded to bf16, as the torch
 * reference rounds them before its matmul; products and sums are fp32. The accumulators hold
 * columns in the unpack order until the end. probs is overwritten (bf16 pairs, in place). */
static void NAME(pv_pairs)(const uint16_t *vh, const int64_t *table, int64_t ctx, int64_t g_heads,
                        int64_t sv_blk, int64_t bs, float *probs, float *acc, const int64_t d) {
  const uint16_t *rows[PA_PV_CHUNK];
  const int64_t nc = d / 32;
  for (int64_t g = 0; g < g_heads; g++) {
    /* In place: bf16 t (bytes 2t) overwrites only fp32 values already read (bytes >= 4t). */
    const float *p = probs + g * ctx;
    uint16_t *pb = (uint16_t *)(probs + g * ctx);
    for (int64_t t = 0; t < ctx; t += PA_LANES) {  /* round to nearest even, as torch */
      const __mmask16 m = ctx - t < PA_LANES ? (__mmask16)((1u << (ctx - t)) - 1u) : 0xffff;
      const __m256bh x = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, p + t));
      _mm256_mask_storeu_epi16(pb + t, m, (__m256i)x);
    }
    if (ctx % 2) pb[ctx] = 0;  /* the odd last position's partner weighs nothing */
  }
  for (int64_t t0 = 0; t0 < ctx; t0 += PA_PV_CHUNK) {
    const int64_t n = ctx - t0 < PA_PV_CHUNK ? ctx - t0 : PA_PV_CHUNK, np = (n + 1) / 2;
    NAME(chunk_rows)(vh, table, sv_blk, bs, t0, n, 2 * np, d, rows);
    for (int64_t g = 0; g < g_heads; g++) {
      __m512 a[PA_MAX_VECS];
      float *ag = acc + g * d;
      const uint32_t *pairs = (const uint32_t *)(probs + g * ctx) + t0 / 2;
      for (int64_t c = 0; c < 2 * nc; c++) a[c] = _mm512_loadu_ps(ag + c * PA_LANES);
      for (int64_t k = 0; k < np; k++) {
        const __m512bh pk = (__m512bh)_mm512_set1_epi32((int)pairs[k]);
        const uint16_t *r0 = rows[2 * k], *r1 = rows[2 * k + 1];
        for (int64_t c = 0; c < nc; c++) {
          const __m512i x0 = _mm512_loadu_si512(r0 + 32 * c), x1 = _mm512_loadu_si512(r1 + 32 * c);
          a[2 * c] = _mm512_dpbf16_ps(a[2 * c], pk, (__m512bh)_mm512_unpacklo_epi16(x0, x1));
          a[2 * c + 1] = _mm512_dpbf16_ps(a[2 * c + 1], pk, (__m512bh)_mm512_unpackhi_epi16(x0, x1));
        }
      }
      for (int64_t c = 0; c < 2 * nc; c++) _mm512_storeu_ps(ag + c * PA_LANES, a[c]);
    }
  }
  /* Unpack order -> column order: lo lane 4L + k is column 8L + k, hi lane 4L + k is 8L + 4 + k
   * (L: 128-bit lane, k < 4), within each 32 columns. */
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t g = 0; g < g_heads; g++)
    for (int64_t c = 0; c < nc; c++) {
      float *ac = acc + g * d + 32 * c;
      const __m512 lo = _mm512_loadu_ps(ac), hi = _mm512_loadu_ps(ac + PA_LANES);
      _mm512_storeu_ps(ac, _mm512_permutex2var_ps(lo, first, hi));
      _mm512_storeu_ps(ac + PA_LANES, _mm512_permutex2var_ps(lo, second, hi));
    }
}
#else
#define PA_PV_PAIRS 0
#endif
#define PA_VECTOR_D(d) ((d) % NAME(PA_STEP) == 0 && (d) <= PA_LANES * PA_MAX_VECS)
#else
#define PA_VECTOR_D(d) 0
#endif

/* One (sequence, KV head): scores of its G query heads, softmax, weighted sum of V.
 * Scratch: scores [G, ctx], qf [G, D], acc [G, D], row [PA_ROWS, D] (a row for the portable
 * loops; a chunk of rows widened to fp32 for the vector path). */
static inline __attribute__((always_inline)) void NAME(attend_body)(
    const ELEM *q, const ELEM *kh, const ELEM *vh, const int64_t *table, int64_t ctx, ELEM *out,
    const struct attn_shape *s, float *scores, float *qf, float *acc, float *row,
    const int64_t d) {
  const int64_t g_heads = s->g_heads, bs = s->bs;
  const int vector = PA_VECTOR_D(d);
  for (int64_t g = 0; g < g_heads; g++) {
    const float *qr = NAME(load_row)(q + g * s->sq_h, row, d);
    /* The vector path scales the scores; the portable one folds the scale into q. */
    const float scale = vector ? 1.f : s->scale;
    for (int64_t c = 0; c < d; c++) qf[g * d + c] = qr[c] * scale;
  }
  memset(acc, 0, (size_t)(g_heads * d) * sizeof(float));
  if (ctx > 0) {
    const int64_t nblk = (ctx + bs - 1) / bs;
#ifdef PA_SIMD
    if (vector) NAME(qk_simd)(q, kh, table, ctx, s, qf, scores, row, d);
    else
#endif
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
#if PA_PV_PAIRS
    if (vector && d % 32 == 0)
      NAME(pv_pairs)(vh, table, ctx, g_heads, s->sv_blk, bs, scores, acc, d);
    else
#endif
#ifdef PA_SIMD
    if (vector) NAME(pv_simd)(vh, table, ctx, s, scores, acc, row, d);
    else
#endif
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

#undef PA_VECTOR_D
#undef PA_PV_PAIRS
#undef PA_WIDEN

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
  const size_t n_scratch = (size_t)(g_heads * ctx_cap + 2 * g_heads * d + PA_ROWS * d);
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
