/* y = x @ w.T for a few rows of x (a decoding or verification step), AVX-512.
 *
 * x: [T, I] fp32 row-major, w: [O, I] row-major (fp32, or bf16 on CPUs with AVX512-BF16, where x
 * is rounded to bf16 and products are summed in fp32), y: [T, O] fp32 row-major, 1 <= T <= 16.
 * Each weight row is read once from memory and multiplied with all T rows of x (which stay in
 * L1/L2), so the cost is the weight bytes for any T until the FMAs catch up (T ~ 4 in fp32).
 * Every output y[t][o] is the same sequence of operations (16-lane partial sums over k in order,
 * then one reduction) whatever T is: a token's result is bitwise the same scored alone or in a
 * batch of T, which keeps speculative and plain greedy decoding token-identical.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#define MAX_ROWS 16

static inline __attribute__((always_inline)) void dot_rows_f32(
        const int T, const float *x, const float *w, float *y, int64_t I, int64_t O,
        int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; o++) {
        const float *w_row = w + o * I;
        __m512 acc[MAX_ROWS];
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= I; k += 16) {
            __m512 wk = _mm512_loadu_ps(w_row + k);
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_fmadd_ps(wk, _mm512_loadu_ps(x + t * I + k), acc[t]);
        }
        if (k < I) { /* the tail of a row whose length is not a multiple of 16 */
            __mmask16 m = (__mmask16)((1u << (I - k)) - 1);
            __m512 wk = _mm512_maskz_loadu_ps(m, w_row + k);
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_fmadd_ps(wk, _mm512_maskz_loadu_ps(m, x + t * I + k), acc[t]);
        }
        for (int t = 0; t < T; t++) y[t * O + o] = _mm512_reduce_add_ps(acc[t]);
    }
}

#ifdef __AVX512BF16__
/* x rounded to bf16 (nearest even, as torch rounds), 32 values per instruction */
static void to_bf16(const float *x, uint16_t *out, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512(out + i, (__m512i)pair);
    }
    for (; i < n; i++) {
        __m256bh one = _mm512_cvtneps_pbh(_mm512_set1_ps(x[i]));
        out[i] = (uint16_t)_mm256_extract_epi16((__m256i)one, 0);
    }
}

/* bf16 pairs: one instruction multiplies 32 weights with 32 inputs into 16 fp32 lanes */
static inline __attribute__((always_inline)) void dot_rows_bf16(
        const int T, const uint16_t *x, const uint16_t *w, float *y, int64_t I, int64_t O,
        int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint16_t *w_row = w + o * I;
        __m512 acc[MAX_ROWS];
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= I; k += 32) {
            __m512bh wk = (__m512bh)_mm512_loadu_si512(w_row + k);
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_dpbf16_ps(acc[t], wk, (__m512bh)_mm512_loadu_si512(x + t * I + k));
        }
        if (k < I) {
            __mmask32 m = (__mmask32)((1ull << (I - k)) - 1);
            __m512bh wk = (__m512bh)_mm512_maskz_loadu_epi16(m, w_row + k);
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_dpbf16_ps(acc[t], wk,
                                          (__m512bh)_mm512_maskz_loadu_epi16(m, x + t * I + k));
        }
        for (int t = 0; t < T; t++) y[t * O + o] = _mm512_reduce_add_ps(acc[t]);
    }
}
#endif

/* One instance per T and dtype, so the accumulators live in registers. */
#define CASES(F) \
    F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15) F(16)
#define F32(N) case N: dot_rows_f32(N, x, w, y, I, O, o_begin, o_end); break;
#define BF16(N) case N: dot_rows_bf16(N, x, w, y, I, O, o_begin, o_end); break;

static void range_f32(int T, const float *x, const float *w, float *y, int64_t I, int64_t O,
                      int64_t o_begin, int64_t o_end) {
    switch (T) { CASES(F32) }
}

#ifdef __AVX512BF16__
static void range_bf16(int T, const uint16_t *x, const uint16_t *w, float *y, int64_t I,
                       int64_t O, int64_t o_begin, int64_t o_end) {
    switch (T) { CASES(BF16) }
}
#endif

/* Output rows are split evenly between `threads` threads. */
#define PARALLEL_OVER_ROWS(RANGE) \
    _Pragma("omp parallel num_threads(threads)") \
    { \
        int64_t n = omp_get_num_threads(), i = omp_get_thread_num(); \
        int64_t chunk = (O + n - 1) / n; \
        int64_t o_begin = i * chunk, o_end = o_begin + chunk < O ? o_begin + chunk : O; \
        if (o_begin < o_end) RANGE((int)T, x, w, y, I, O, o_begin, o_end); \
    }

/* Each returns 0, or 1 when it cannot run (T out of range, no bf16 instructions): nothing
 * written. */
int skinny_linear_f32(const float *x, const float *w, float *y, int64_t T, int64_t I, int64_t O,
                      int threads) {
    if (T < 1 || T > MAX_ROWS) return 1;
    PARALLEL_OVER_ROWS(range_f32)
    return 0;
}

int skinny_linear_bf16(const float *x_f32, const uint16_t *w, float *y, int64_t T, int64_t I,
                       int64_t O, int threads) {
#ifdef __AVX512BF16__
    if (T < 1 || T > MAX_ROWS) return 1;
    uint16_t *x = malloc(sizeof(uint16_t) * T * I);
    if (!x) return 1;
    to_bf16(x_f32, x, T * I);
    PARALLEL_OVER_ROWS(range_bf16)
    free(x);
    return 0;
#else
    return 1;
#endif
}

int has_bf16(void) {
#ifdef __AVX512BF16__
    return 1;
#else
    return 0;
#endif
}
