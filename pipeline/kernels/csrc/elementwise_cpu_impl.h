/* The body of elementwise_cpu.c for one element type (ELEM, SUFFIX = f32 | bf16). */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define NAME(x) CAT(x, SUFFIX)
#define LOAD(p) CAT(LOAD, SUFFIX)(p)
#define STORE(x) CAT(STORE, SUFFIX)(x)
#define R(x) CAT(R, SUFFIX)(x)

/* out[t] = weight * dtype(x[t] * rsqrt(mean(x[t]^2) + eps)), the sum in fp32. With a
 * residual: residual[t] = dtype(x[t] + residual[t]) first, and that is what is normalised.
 * x, residual, out: [T, D] with row strides sx, sr, so; weight [D]. */
void NAME(rms_norm)(const ELEM *x, ELEM *residual, const ELEM *weight, ELEM *out, int64_t t,
                    int64_t d, int64_t sx, int64_t sr, int64_t so, float eps) {
#pragma omp parallel for if (t * d >= PARALLEL_MIN)
  for (int64_t i = 0; i < t; i++) {
    const ELEM *xi = x + i * sx;
    ELEM *oi = out + i * so;
    const ELEM *src = xi;
    if (residual != 0) {
      ELEM *ri = residual + i * sr;
      for (int64_t c = 0; c < d; c++) ri[c] = STORE(LOAD(xi[c]) + LOAD(ri[c]));
      src = ri;
    }
    float sq = 0.f;
    for (int64_t c = 0; c < d; c++) {
      const float v = LOAD(src[c]);
      sq += v * v;
    }
    const float inv = 1.f / sqrtf(sq / (float)d + eps);
    for (int64_t c = 0; c < d; c++) oi[c] = STORE(LOAD(weight[c]) * R(LOAD(src[c]) * inv));
  }
}

/* out[t] = silu(gate[t]) * up[t], where x[t] = [gate | up], each of width n; x [T, 2n] with
 * row stride sx, out [T, n] with row stride so. */
void NAME(silu_and_mul)(const ELEM *x, ELEM *out, int64_t t, int64_t n, int64_t sx,
                        int64_t so) {
#pragma omp parallel for if (t * n >= PARALLEL_MIN)
  for (int64_t i = 0; i < t; i++) {
    const ELEM *gate = x + i * sx, *up = gate + n;
    ELEM *oi = out + i * so;
    for (int64_t c = 0; c < n; c++) {
      const float g = LOAD(gate[c]);
      oi[c] = STORE(R(g / (1.f + expf(-g))) * LOAD(up[c]));
    }
  }
}

/* Rotate-half RoPE in place: x[t, h] = x * cos[t] + rotate_half(x) * sin[t], rounded as the
 * reference rounds (each product, then the sum). x [T, H, D] with token and head strides
 * st, sh (rows of D dense); cos, sin [T, D] dense. */
void NAME(rotary)(ELEM *x, const ELEM *cos, const ELEM *sin, int64_t t, int64_t h, int64_t d,
                  int64_t st, int64_t sh) {
  const int64_t half = d / 2;
#pragma omp parallel for if (t * h * d >= PARALLEL_MIN)
  for (int64_t i = 0; i < t; i++) {
    const ELEM *ci = cos + i * d, *si = sin + i * d;
    for (int64_t j = 0; j < h; j++) {
      ELEM *xr = x + i * st + j * sh;
      for (int64_t c = 0; c < half; c++) {
        const float a = LOAD(xr[c]), b = LOAD(xr[c + half]);
        const float lo = R(a * LOAD(ci[c])) + R(-b * LOAD(si[c]));
        const float hi = R(b * LOAD(ci[c + half])) + R(a * LOAD(si[c + half]));
        xr[c] = STORE(lo);
        xr[c + half] = STORE(hi);
      }
    }
  }
}

#undef R
#undef STORE
#undef LOAD
#undef NAME
#undef CAT
#undef CAT_
