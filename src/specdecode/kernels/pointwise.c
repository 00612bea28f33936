/* The element-wise parts of a decoder layer, AVX-512, fp32, one call each instead of 4-5 torch
 * operations (on a 135M model a step's ~60 norms and ~30 activations cost ~2 ms in torch's
 * dispatch alone). Rows are independent: a row's result does not depend on the others. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "exp.h"

/* out[t] = x[t] / sqrt(mean(x[t]²) + eps) · w for rows t of x: [T, H]; H a multiple of 16 */
int rms_norm(const float *x, const float *w, float *out, int64_t T, int64_t H, float eps) {
    if (H % 16) return 1;
    for (int64_t t = 0; t < T; t++) {
        const float *row = x + t * H;
        __m512 squares = _mm512_setzero_ps();
        for (int64_t i = 0; i < H; i += 16) {
            __m512 v = _mm512_loadu_ps(row + i);
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        const __m512 scale = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(squares) / H + eps));
        for (int64_t i = 0; i < H; i += 16)
            _mm512_storeu_ps(out + t * H + i, _mm512_mul_ps(
                _mm512_mul_ps(_mm512_loadu_ps(row + i), scale), _mm512_loadu_ps(w + i)));
    }
    return 0;
}

/* out[t] = silu(gate) · up = gate / (1 + e^-gate) · up, where gate_up[t] = [gate; up]:
 * gate_up: [T, 2 I], out: [T, I]; I a multiple of 16 */
int silu_mul(const float *gate_up, float *out, int64_t T, int64_t I) {
    if (I % 16) return 1;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < I; i += 16) {
            __m512 gate = _mm512_loadu_ps(gate_up + t * 2 * I + i);
            __m512 up = _mm512_loadu_ps(gate_up + t * 2 * I + I + i);
            __m512 silu = _mm512_div_ps(gate, _mm512_add_ps(one, exp512(_mm512_sub_ps(
                _mm512_setzero_ps(), gate))));
            _mm512_storeu_ps(out + t * I + i, _mm512_mul_ps(silu, up));
        }
    return 0;
}
