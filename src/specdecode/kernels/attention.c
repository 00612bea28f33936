/* Rotary embedding, KV-cache write and attention of one decoder layer for T new rows, AVX-512.
 *
 * qkv: [T, (H + 2 G) d] fp32, the q/k/v projection of the new rows (H query heads, G kv heads);
 * q and k are rotated in place (the halves layout of HF Llama: x cos + rotate_half(x) sin with
 * the cos/sin rows of each row's position); k and v are written to the cache at start..start+T-1;
 * keys, values: the layer's cache [G, capacity, d]; mask: [T, start + T] bytes, 1 where a row may
 * attend, or NULL for causal (row t sees positions 0..start+t); out: [T, H d].
 * softmax(q kᵀ / sqrt(d)) v per row and head, in fp32, exact up to rounding; d a multiple of 16.
 * Each row's result depends only on its own query and the keys it sees, not on how many rows
 * share the call, like `linear.c`.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "exp.h"

static void rotate(float *x, const float *cos, const float *sin, int64_t d) {
    const int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cos[i] - b * sin[i];
        x[i + half] = b * cos[i + half] + a * sin[i + half];
    }
}

/* softmax(q · keys[j] / sqrt(d) over the visible j) · values -> out, for one row and head */
static void attend(const float *q, const float *keys, const float *values, const uint8_t *mask,
                   int64_t visible, int64_t d, float *scores, float *out) {
    const float scale = 1.0f / sqrtf((float)d);
    float max = -INFINITY;
    for (int64_t j = 0; j < visible; j++) {
        if (mask && !mask[j]) { scores[j] = -INFINITY; continue; }
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(keys + j * d + i), acc);
        scores[j] = _mm512_reduce_add_ps(acc) * scale;
        if (scores[j] > max) max = scores[j];
    }
    __m512 total = _mm512_setzero_ps();
    for (int64_t j = 0; j < visible; j += 16) { /* p_j = e^(s_j - max), 0 where masked */
        __mmask16 block = visible - j >= 16 ? 0xFFFF : (__mmask16)((1u << (visible - j)) - 1);
        __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), block, scores + j);
        __mmask16 seen = _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        __m512 p = _mm512_maskz_mov_ps(seen, exp512(_mm512_sub_ps(s, _mm512_set1_ps(max))));
        _mm512_mask_storeu_ps(scores + j, block, p);
        total = _mm512_add_ps(total, p);
    }
    const float norm = 1.0f / _mm512_reduce_add_ps(total);
    for (int64_t i = 0; i < d; i += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < visible; j++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(scores[j]), _mm512_loadu_ps(values + j * d + i), acc);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(acc, _mm512_set1_ps(norm)));
    }
}

int attention(float *qkv, float *keys, float *values, const float *cos, const float *sin,
              const int64_t *positions, const uint8_t *mask, float *out, int64_t T, int64_t start,
              int64_t H, int64_t G, int64_t d, int64_t capacity, int threads) {
    if (d % 16 || H % G || start + T > capacity) return 1;
    const int64_t width = (H + 2 * G) * d, end = start + T;
    for (int64_t t = 0; t < T; t++) { /* rotate q and k, then append k and v to the cache */
        float *row = qkv + t * width;
        for (int64_t h = 0; h < H + G; h++)
            rotate(row + h * d, cos + positions[t] * d, sin + positions[t] * d, d);
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < d; i++) {
                keys[(g * capacity + start + t) * d + i] = row[(H + g) * d + i];
                values[(g * capacity + start + t) * d + i] = row[(H + G + g) * d + i];
            }
    }
    int failed = 0;
    _Pragma("omp parallel num_threads(threads)")
    {
        float *scores = malloc(sizeof(float) * end);
        if (!scores) failed = 1;
        _Pragma("omp for schedule(static)")
        for (int64_t th = 0; th < T * H; th++) {
            if (!scores) continue;
            const int64_t t = th / H, h = th % H, g = h / (H / G);
            attend(qkv + t * width + h * d, keys + g * capacity * d, values + g * capacity * d,
                   mask ? mask + t * end : NULL, mask ? end : start + t + 1, d, scores,
                   out + t * H * d + h * d);
        }
        free(scores);
    }
    return failed ? 2 : 0;
}
