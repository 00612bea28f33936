/* A model's decoder stack in one call: what `models/decoder.py` runs layer by layer in Python
 * (`NativeDecoder.run_segments`), with the same kernels in the same order, so the numbers are
 * bitwise the same; a step then crosses from Python to C once, not some eight times a layer.
 * Arguments and the model's description (`stack`): kernels.h.
 *
 * A layer, on the residual stream x (a norm the layer does not have is left out):
 *     h = rms_norm(x, input_norm)            (h = x where the layer has no input norm)
 *     qkv = head_norm(h @ qkv.T (+ bias))    (the q and k heads by their norms: Qwen3, Gemma)
 *     o = attention(qkv)                     (rotary embedding, cache write, softmax)
 *     x = x + rms_norm(o @ out.T (+ bias), attention_out_norm)              (Gemma)
 *     x = x + rms_norm(act_mul(rms_norm(x, ffn_norm) @ gate_up.T) @ down.T, ffn_out_norm)
 * act_mul: SwiGLU or GeGLU.
 * A matrix made of parts (q, k and v of a mixed-format file) is computed part by part, the parts'
 * columns side by side; a bias is added after the product, as torch adds it.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

enum { SWIGLU = 0, GEGLU = 1 }; /* the stack's activation */
/* a layer record's numbers before its matrices (kernels.h) */
enum { INPUT_NORM, ATTENTION_OUT_NORM, FFN_NORM, FFN_OUT_NORM, Q_NORM, K_NORM, WINDOW, ROPE,
       NORMS_AND_RULES };
_Static_assert(LAYER_RECORD == NORMS_AND_RULES + 4 * MATRIX_RECORD, "kernels.h's record");

/* y = x @ w.T for one part: [T, I] -> [T, rows] */
static int part(int64_t kind, const void *w, const float *x, float *y, int64_t T, int64_t I,
                int64_t rows, int threads) {
    if (kind == PART_F32) return linear_f32(x, w, y, T, I, rows, threads);
    if (kind == PART_BF16) return linear_bf16(x, w, y, T, I, rows, threads);
    if (kind == PART_F16) return linear_f16(x, w, y, T, I, rows, threads);
    return linear_quant(x, w, y, T, I, rows, (int)(kind - PART_BLOCKS), threads);
}

/* y = x @ m.T (+ bias) for the matrix described at m (kernels.h): [T, in] -> [T, out]; `spare`
 * holds a part's product while it is put in its columns */
static int matrix(const int64_t *m, const float *x, float *y, float *spare, int64_t T,
                  int threads) {
    const int64_t I = m[0], parts = m[1], out = m[3];
    const float *bias = (const float *)(intptr_t)m[2];
    if (parts < 1 || parts > MAX_PARTS) return 1;
    int status = 0;
    for (int64_t p = 0, column = 0; p < parts; p++) {
        const int64_t kind = m[4 + 3 * p], rows = m[5 + 3 * p];
        const void *w = (const void *)(intptr_t)m[6 + 3 * p];
        if (parts == 1) {
            status = part(kind, w, x, y, T, I, rows, threads);
            break;
        }
        status = part(kind, w, x, spare, T, I, rows, threads);
        if (status) return status; /* spare holds nothing to copy */
        for (int64_t t = 0; t < T; t++)
            memcpy(y + t * out + column, spare + t * rows, sizeof(float) * (size_t)rows);
        column += rows;
    }
    if (bias)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < out; o++) y[t * out + o] += bias[o];
    return status;
}

static void add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

int decoder_layers(float *x, int64_t T, const int64_t *stack, const int64_t *layers,
                   int64_t n_layers, void *const *caches_k, void *const *caches_v,
                   const int64_t *capacity, const int64_t *starts, const int64_t *rows,
                   const uint8_t *const *masks, int64_t S, const float *const *cos,
                   const float *const *sin, int64_t tables, int64_t rope_rows,
                   const int64_t *positions, float eps, int kv_f16, int threads) {
    const int64_t hidden = stack[0], H = stack[1], G = stack[2], d = stack[3], inner = stack[4];
    const int64_t activation = stack[6];
    if (T < 1 || hidden < 1 || H < 1 || G < 1 || d < 1 || inner < 1) return 1;
    if (activation != SWIGLU && activation != GEGLU) return 1;
    uint32_t scale_bits = (uint32_t)stack[7];
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    for (int64_t l = 0; l < n_layers; l++) {
        if (layers[l] < 0 || layers[l] >= stack[5]) return 1;
        const int64_t *layer = stack + STACK_HEADER + layers[l] * LAYER_RECORD;
        if (!layer[FFN_NORM] || !layer[Q_NORM] != !layer[K_NORM] || layer[WINDOW] < 0 ||
            layer[ROPE] < 0 || layer[ROPE] >= tables)
            return 1;
    }
    for (int64_t s = 0; s < S; s++)
        if (rows[s] > ROW_INVARIANT_ROWS) return 1; /* a prefill's long chunk: not for this call */
    const int64_t qkv_width = (H + 2 * G) * d;
    const int64_t widest = 2 * inner > qkv_width ? 2 * inner : qkv_width;
    const int64_t middle = inner > H * d ? inner : H * d;
    /* h, qkv (or gate_up), attention's output (or the activation's), a product, a part's product */
    float *memory = malloc(sizeof(float) * (size_t)(T * (2 * hidden + 2 * widest + middle)));
    if (!memory) return 2;
    float *h = memory, *wide = h + T * hidden, *o = wide + T * widest, *y = o + T * middle;
    float *spare = y + T * hidden;
    int status = 0;
/* the first failing kernel ends the call: nothing after it reads what it did not write */
#define OR_STOP(call)                                                                              \
    if ((status = (call)) != 0) goto done
#define NORM(i) ((const float *)(intptr_t)layer[i])
    for (int64_t l = 0; l < n_layers; l++) {
        const int64_t *layer = stack + STACK_HEADER + layers[l] * LAYER_RECORD;
        const int64_t *qkv = layer + NORMS_AND_RULES, *out = qkv + MATRIX_RECORD;
        const int64_t *gate_up = out + MATRIX_RECORD, *down = gate_up + MATRIX_RECORD;
        const int64_t table = layer[ROPE];
        if (NORM(INPUT_NORM)) OR_STOP(rms_norm(x, NORM(INPUT_NORM), h, T, hidden, eps));
        OR_STOP(matrix(qkv, NORM(INPUT_NORM) ? h : x, wide, spare, T, threads));
        if (NORM(Q_NORM)) OR_STOP(head_norm(wide, NORM(Q_NORM), NORM(K_NORM), T, H, G, d, eps));
        OR_STOP(attention(wide, caches_k, caches_v, capacity, starts, rows, masks, S, layers[l],
                          cos[table], sin[table], rope_rows, positions, o, H, G, d,
                          layer[WINDOW], scale, kv_f16, threads));
        OR_STOP(matrix(out, o, y, spare, T, threads));
        if (NORM(ATTENTION_OUT_NORM))
            OR_STOP(rms_norm(y, NORM(ATTENTION_OUT_NORM), y, T, hidden, eps));
        add(x, y, T * hidden);
        OR_STOP(rms_norm(x, NORM(FFN_NORM), h, T, hidden, eps));
        OR_STOP(matrix(gate_up, h, wide, spare, T, threads));
        OR_STOP(activation == GEGLU ? gelu_mul(wide, o, T, inner) : silu_mul(wide, o, T, inner));
        OR_STOP(matrix(down, o, y, spare, T, threads));
        if (NORM(FFN_OUT_NORM)) OR_STOP(rms_norm(y, NORM(FFN_OUT_NORM), y, T, hidden, eps));
        add(x, y, T * hidden);
    }
#undef NORM
#undef OR_STOP
done:
    free(memory);
    return status;
}
