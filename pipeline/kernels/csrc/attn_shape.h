/* Shapes and strides (in elements) of one paged decode attention call; mirrored by ctypes in
 * paged_attention_cpu.py. Shared by paged_attention_cpu.c and decoder_cpu.c, which fills one
 * for the attention it calls in every layer. */
#ifndef STEPWISE_ATTN_SHAPE_H
#define STEPWISE_ATTN_SHAPE_H
#include <stdint.h>

struct attn_shape {
  int64_t b, kvh, g_heads, d, bs;
  int64_t sq_b, sq_h, so_b, so_h;  /* q and out: batch and head strides */
  int64_t sk_h, sk_blk, sv_h, sv_blk;  /* caches: head and block strides (rows of D are dense) */
  int64_t sbt, table_width;  /* block_tables: row stride, blocks per row */
  int64_t num_blocks;  /* blocks in the cache: every id read is checked against it */
  float scale;
};
#endif
