/* Runs one CPU kernel (chosen by -DCHECK_LINEAR, -DCHECK_LOGITS or -DCHECK_ATTENTION) on fixed
 * pseudo-random cases and prints every output, one number per line. Built twice for another
 * architecture, with its vector path and with -DSTEPWISE_PORTABLE, and run under an emulator
 * by tests/unit/kernels/test_cross_isa.py, which compares the two prints. */
#include <stdio.h>

#if defined(CHECK_LINEAR)
#include "linear_bf16_cpu.c"
#elif defined(CHECK_LOGITS)
#include "logits_stats_cpu.c"
#elif defined(CHECK_ATTENTION)
#include "paged_attention_cpu.c"
#endif

static uint32_t state = 12345u;
static float uniform(void) { /* in [-1, 1) */
  state = state * 1664525u + 1013904223u;
  return (float)(state >> 8) / (float)(1u << 23) - 1.f;
}
static uint16_t bf16_random(void) { return f32_to_bf16(uniform()); }

#if defined(CHECK_LINEAR)
int main(void) {
  static const int64_t cases[][4] = {/* m, n, k, bias */
                                     {1, 17, 96, 1}, {2, 64, 96, 0}, {3, 100, 7, 1},
                                     {4, 16, 33, 0}, {5, 200, 96, 1}, {6, 40, 96, 0},
                                     {7, 33, 64, 1}, {13, 100, 96, 0}, {100, 17, 96, 1}};
  printf("simd %d\n", linear_bf16_simd());
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t m = cases[c][0], n = cases[c][1], k = cases[c][2];
    uint16_t *x = malloc(2 * m * k), *w = malloc(2 * n * k), *b = malloc(2 * n),
             *out = malloc(2 * m * n), *packed = malloc(2 * ((n + NR - 1) / NR * NR * k));
    for (int64_t i = 0; i < m * k; i++) x[i] = bf16_random();
    for (int64_t i = 0; i < n * k; i++) w[i] = bf16_random();
    for (int64_t i = 0; i < n; i++) b[i] = bf16_random();
    linear_bf16_pack(w, packed, n, k);
    linear_bf16(x, packed, cases[c][3] ? b : 0, out, m, n, k, k, n);
    for (int64_t i = 0; i < m * n; i++) printf("%.9g\n", bf16_to_f32(out[i]));
    free(x), free(w), free(b), free(out), free(packed);
  }
  return 0;
}
#elif defined(CHECK_LOGITS)
int main(void) {
  static const int64_t widths[] = {1, 3, 4, 5, 7, 100, 1001};
  for (size_t c = 0; c < sizeof widths / sizeof widths[0]; c++) {
    const int64_t v = widths[c], s = 3;
    float *x = malloc(sizeof(float) * s * v), mp[3], ent[3], lse[3];
    int64_t arg[3];
    for (int64_t i = 0; i < s * v; i++) x[i] = 8.f * uniform();
    /* Row 1: ties, the first index wins: 5 and 53 share a lane (of 4 or 8), 5 and 50 do not. */
    if (v > 60) x[v + 5] = x[v + 50] = x[v + 53] = 9.f;
    logits_stats_f32(x, s, v, v, arg, mp, ent, lse);
    for (int r = 0; r < s; r++) printf("%lld\n%.9g\n%.9g\n%.9g\n", (long long)arg[r], mp[r], ent[r], lse[r]);
    free(x);
  }
  return 0;
}
#elif defined(CHECK_ATTENTION)
#define RUN(SUFFIX, ELEM, MAKE, READ)                                                          \
  {                                                                                            \
    ELEM *q = malloc(sizeof(ELEM) * nq), *k = malloc(sizeof(ELEM) * nkv),                      \
         *v = malloc(sizeof(ELEM) * nkv), *o = malloc(sizeof(ELEM) * nq);                      \
    for (int64_t i = 0; i < nq; i++) q[i] = MAKE;                                             \
    for (int64_t i = 0; i < nkv; i++) k[i] = MAKE, v[i] = MAKE;                               \
    const int rc = paged_decode_attention_##SUFFIX(q, k, v, tables, ctx, o, &s);               \
    printf("rc %d\n", rc);                                                                     \
    for (int64_t i = 0; i < nq; i++) printf("%.9g\n", READ(o[i]));                            \
    free(q), free(k), free(v), free(o);                                                        \
  }
#define AS_IS(x) (x)
int main(void) {
#ifdef PA_SIMD
  printf("lanes %d\n", PA_LANES);
#else
  printf("lanes 1\n");
#endif
  static const int64_t dims[] = {32, 64, 128, 24};
  const int64_t b = 4, kvh = 2, g = 2, bs = 16, width = 4, blocks = b * width;
  int64_t tables[4 * 4], ctx[4] = {1, 15, 17, 50};
  for (int64_t i = 0; i < b * width; i++) tables[i] = (i * 7 + 3) % blocks; /* scattered */
  for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
    const int64_t d = dims[c], nq = b * kvh * g * d, nkv = kvh * blocks * bs * d;
    struct attn_shape s = {b, kvh, g, d, bs, kvh * g * d, d, kvh * g * d, d,
                           blocks * bs * d, bs * d, blocks * bs * d, bs * d, width, width, blocks,
                           1.f / 8.f};
    RUN(f32, float, uniform(), AS_IS)
    RUN(bf16, uint16_t, bf16_random(), bf16_to_f32)
  }
  return 0;
}
#endif
