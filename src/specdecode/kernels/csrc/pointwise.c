/* The element-wise parts of a decoder layer, fp32, any instruction set (simd.h), one call each
 * instead of several torch operations (a step makes two norms and one activation per layer, so
 * torch's per-operation dispatch adds up). Rows are independent: a row's result does not depend
 * on the others. Arguments: kernels.h. */
#include <math.h>

#include "kernels.h"
#include "simd.h"

int rms_norm(const float *x, const float *w, float *out, int64_t T, int64_t H, float eps) {
    if (H % 16) return 1;
    for (int64_t t = 0; t < T; t++) {
        const float *row = x + t * H;
        vf squares = vzero();
        for (int64_t i = 0; i < H; i += VL) {
            const vf v = vload(row + i);
            squares = vfma(v, v, squares);
        }
        const vf scale = vset1(1.0f / sqrtf(vsum(squares) / (float)H + eps));
        for (int64_t i = 0; i < H; i += VL)
            vstore(out + t * H + i, vmul(vmul(vload(row + i), scale), vload(w + i)));
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
