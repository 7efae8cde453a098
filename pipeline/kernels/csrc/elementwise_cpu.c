/* Fused element-wise ops of the decoder layer on CPU: RMSNorm (with the residual add fused),
 * SiLU-and-multiply, rotary embeddings.
 *
 * Each replaces a chain of 4-8 torch ops (one pass over memory and one dispatch each) with a
 * single pass, and rounds where the torch references (pipeline/kernels/elementwise.py) round:
 * for bf16 every intermediate the reference holds in bf16 is rounded to bf16 here too, so the
 * two agree to an ulp or so (exp and summation order may differ). Rows are independent and
 * split across torch's OpenMP threads when there are enough of them.
 *
 * Built at first use by pipeline/kernels/cpu_build.py, like paged_attention_cpu.c.
 */
#include <math.h>
#include <stdint.h>

#include "bf16.h"

/* Below this many elements one thread does it all (a parallel region costs more). */
#define PARALLEL_MIN (1 << 15)

/* Element access for each storage type; R() rounds a float to what that type holds. */
#define LOAD_f32(p) (p)
#define STORE_f32(x) (x)
#define R_f32(x) (x)
#define LOAD_bf16(p) bf16_to_f32(p)
#define STORE_bf16(x) f32_to_bf16(x)
#define R_bf16(x) bf16_to_f32(f32_to_bf16(x))

#define ELEM float
#define SUFFIX f32
#include "elementwise_cpu_impl.h"
#undef ELEM
#undef SUFFIX

#define ELEM uint16_t
#define SUFFIX bf16
#include "elementwise_cpu_impl.h"
#undef ELEM
#undef SUFFIX
