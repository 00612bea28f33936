/* The element-wise parts of a decoder layer, fp32, any instruction set (simd.h), one call each
 * instead of several torch operations (a step makes two norms and one activation per layer, so
 * torch's per-operation dispatch adds up). Rows are independent: a row's result does not depend
 * on the others. Arguments: kernels.h. */
#include <math.h>

#include "kernels.h"
#include "simd.h"

/* out = row / sqrt(mean(row²) + eps) · w for one row of n numbers (out may be row) */
static void norm_row(const float *row, const float *w, float *out, int64_t n, float eps) {
    vf squares = vzero();
    for (int64_t i = 0; i < n; i += VL) {
        const vf v = vload(row + i);
        squares = vfma(v, v, squares);
    }
    const vf scale = vset1(1.0f / sqrtf(vsum(squares) / (float)n + eps));
    for (int64_t i = 0; i < n; i += VL)
        vstore(out + i, vmul(vmul(vload(row + i), scale), vload(w + i)));
}

int rms_norm(const float *x, const float *w, float *out, int64_t T, int64_t H, float eps) {
    if (H % 16) return 1;
    for (int64_t t = 0; t < T; t++) norm_row(x + t * H, w, out + t * H, H, eps);
    return 0;
}

/* each q head by q_w and each k head by k_w, in place; the v heads as they are */
int head_norm(float *qkv, const float *q_w, const float *k_w, int64_t T, int64_t H, int64_t G,
              int64_t d, float eps) {
    if (d % 16 || H < 1 || G < 1) return 1;
    for (int64_t t = 0; t < T; t++) {
        float *row = qkv + t * (H + 2 * G) * d;
        for (int64_t h = 0; h < H + G; h++)
            norm_row(row + h * d, h < H ? q_w : k_w, row + h * d, d, eps);
    }
    return 0;
}

/* silu(gate) · up = gate / (1 + e^-gate) · up */
int silu_mul(const float *gate_up, float *out, int64_t T, int64_t I) {
    if (I % 16) return 1;
    const vf one = vset1(1.0f);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < I; i += VL) {
            const vf gate = vload(gate_up + t * 2 * I + i);
            const vf up = vload(gate_up + t * 2 * I + I + i);
            const vf silu = vdiv(gate, vadd(one, vexp(vsub(vzero(), gate))));
            vstore(out + t * I + i, vmul(silu, up));
        }
    return 0;
}

/* gelu(gate) · up with gelu's tanh form, 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g³))) (what
 * torch's gelu(approximate="tanh") computes, up to its last bits); an element at a time: the
 * same arithmetic for every row */
int gelu_mul(const float *gate_up, float *out, int64_t T, int64_t I) {
    if (I % 16) return 1;
    const float beta = 0.7978845608028654f, kappa = 0.044715f;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < I; i++) {
            const float g = gate_up[t * 2 * I + i], up = gate_up[t * 2 * I + I + i];
            const float inner = beta * (g + kappa * g * g * g);
            out[t * I + i] = 0.5f * g * (1.0f + tanhf(inner)) * up;
        }
    return 0;
}
