/* A Llama-family decoder stack's forward on CPU in one call: every layer's kernels called from
 * C, in the order and with the arguments the engine's modules give them (engine/model.py).
 *
 * Why: module by module, a layer is ten Python calls (module calls, views, argument checks,
 * ctypes conversions); on the R1-style reasoner (30 layers, fp32) a decode step of one sequence
 * took 44.0 ms that way and 26.7 ms through this driver (bench/decoder_stack.py,
 * bench/RESULTS.md). This is that loop in C. It
 * computes nothing itself: the kernels are the ones the modules call (linear_<t>_cpu,
 * elementwise_cpu, kv_store_cpu, paged_attention_cpu), reached through the function pointers
 * in `struct decoder_kernels` that decoder_cpu.py takes from their libraries, so each keeps its
 * own build (and its ISA), and the stack's result is theirs bit for bit. Pointers only, and
 * strides in elements (bytes for store_kv): one driver serves every element type.
 *
 * Built at first use by pipeline/kernels/cpu_build.py, like the kernels it calls.
 */
#include <stdint.h>
#include <string.h>

#include "attn_shape.h"

typedef void (*rms_norm_fn)(const void *x, void *residual, const void *weight, void *out,
                            int64_t t, int64_t d, int64_t sx, int64_t sr, int64_t so, float eps);
typedef int (*linear_fn)(const void *x, const void *packed, const void *bias, void *out,
                         int64_t m, int64_t n, int64_t k, int64_t sx, int64_t so);
typedef void (*silu_and_mul_fn)(const void *x, void *out, int64_t t, int64_t n, int64_t sx,
                                int64_t so);
typedef void (*rotary_fn)(void *x, const void *cos, const void *sin, int64_t t, int64_t h,
                          int64_t d, int64_t st, int64_t sh);
typedef int (*store_kv_fn)(char *k_cache, char *v_cache, const char *k, const char *v,
                           const int64_t *slots, int64_t t, int64_t kvh, int64_t num_slots,
                           int64_t row_bytes, int64_t cache_head, int64_t k_tok, int64_t k_head,
                           int64_t v_tok, int64_t v_head);
typedef int (*attention_fn)(const void *q, const void *k_cache, const void *v_cache,
                            const int64_t *block_tables, const int64_t *context_lens, void *out,
                            const struct attn_shape *s);

/* Mirrored by ctypes in decoder_cpu.py (all four structs). */
struct decoder_kernels {
  rms_norm_fn rms_norm;
  linear_fn linear;
  silu_and_mul_fn silu_and_mul;
  rotary_fn rotary;
  store_kv_fn store_kv;
  attention_fn attention;
};

/* One layer: norm weights, packed projections (bias or NULL), its K/V caches. */
struct decoder_layer {
  const void *input_norm, *post_norm;
  const void *qkv, *qkv_bias, *o, *o_bias, *gate_up, *gate_up_bias, *down, *down_bias;
  void *k_cache, *v_cache;
};

struct decoder_dims {
  int64_t layers, t, hidden, heads, kv_heads, head_dim, intermediate, elem_size;
  int64_t num_slots, cache_head;  /* slots per cache head; a head's stride in elements */
  float eps;
};

/* Work buffers, each dense [t, width]: x holds the embeddings on entry and the last layer's
 * MLP output on return, residual the residual stream before that output is added. */
struct decoder_buffers {
  void *x, *residual, *h, *qkv, *attn, *gate_up, *act;
  const void *cos, *sin;  /* [t, head_dim] */
  const int64_t *slots;   /* [t] */
  const int64_t *block_tables, *context_lens;  /* [t, table_width], [t] */
};

/* Errors: the failing kernel's code, offset so the wrapper knows which kernel it was. */
enum { DEC_OK = 0, DEC_STORE = -10, DEC_LINEAR = -20, DEC_ATTENTION = -30 };

#define AT(p, elems) ((char *)(p) + (elems) * es)

/* Returns DEC_OK, DEC_STORE (a slot out of range), DEC_LINEAR (no memory), or DEC_ATTENTION
 * plus the attention kernel's own code. *failed_layer says where. Attention's `s` carries the
 * caches' strides and block count, the same for every layer; its q and out strides are set
 * here. */
int decoder_forward(const struct decoder_kernels *kn, const struct decoder_layer *layers,
                    const struct decoder_dims *dm, const struct decoder_buffers *b,
                    struct attn_shape *s, int64_t *failed_layer) {
  const int64_t t = dm->t, hd = dm->hidden, d = dm->head_dim, es = dm->elem_size;
  const int64_t q_size = dm->heads * d, kv_size = dm->kv_heads * d;
  const int64_t w = q_size + 2 * kv_size, inter = dm->intermediate;
  s->b = t;
  s->sq_b = w, s->sq_h = d, s->so_b = q_size, s->so_h = d;
  char *k = AT(b->qkv, q_size), *v = AT(b->qkv, q_size + kv_size);
  for (int64_t l = 0; l < dm->layers; l++) {
    const struct decoder_layer *L = &layers[l];
    *failed_layer = l;
    if (l == 0) {  /* the residual stream starts as the embeddings */
      kn->rms_norm(b->x, 0, L->input_norm, b->h, t, hd, hd, 0, hd, dm->eps);
      memcpy(b->residual, b->x, (size_t)(t * hd * es));
    } else {
      kn->rms_norm(b->x, b->residual, L->input_norm, b->h, t, hd, hd, hd, hd, dm->eps);
    }
    if (kn->linear(b->h, L->qkv, L->qkv_bias, b->qkv, t, w, hd, hd, w)) return DEC_LINEAR;
    kn->rotary(b->qkv, b->cos, b->sin, t, dm->heads, d, w, d);
    kn->rotary(k, b->cos, b->sin, t, dm->kv_heads, d, w, d);
    if (kn->store_kv(L->k_cache, L->v_cache, k, v, b->slots, t, dm->kv_heads, dm->num_slots,
                     d * es, dm->cache_head * es, w * es, d * es, w * es, d * es))
      return DEC_STORE;
    int rc = kn->attention(b->qkv, L->k_cache, L->v_cache, b->block_tables, b->context_lens,
                           b->attn, s);
    if (rc) return DEC_ATTENTION + rc;
    if (kn->linear(b->attn, L->o, L->o_bias, b->h, t, hd, q_size, q_size, hd)) return DEC_LINEAR;
    /* x is free until the MLP writes it: the normed stream goes there. */
    kn->rms_norm(b->h, b->residual, L->post_norm, b->x, t, hd, hd, hd, hd, dm->eps);
    if (kn->linear(b->x, L->gate_up, L->gate_up_bias, b->gate_up, t, 2 * inter, hd, hd,
                   2 * inter))
      return DEC_LINEAR;
    kn->silu_and_mul(b->gate_up, b->act, t, inter, 2 * inter, inter);
    if (kn->linear(b->act, L->down, L->down_bias, b->x, t, hd, inter, inter, hd))
      return DEC_LINEAR;
  }
  *failed_layer = -1;
  return DEC_OK;
}
