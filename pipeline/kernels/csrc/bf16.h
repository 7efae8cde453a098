/* bfloat16 <-> float conversions shared by the CPU kernels (bit-exact with torch's). */
#ifndef STEPWISE_BF16_H
#define STEPWISE_BF16_H
#include <stdint.h>

typedef union {
  uint32_t u;
  float f;
} bits32;

static inline float bf16_to_f32(uint16_t x) {
  bits32 c;
  c.u = (uint32_t)x << 16;
  return c.f;
}

/* Round to nearest even, as torch's float -> bfloat16 conversion does. */
static inline uint16_t f32_to_bf16(float f) {
  bits32 c;
  c.f = f;
  if ((c.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((c.u >> 16) | 0x40u); /* NaN */
  c.u += 0x7fffu + ((c.u >> 16) & 1u);
  return (uint16_t)(c.u >> 16);
}

#endif
