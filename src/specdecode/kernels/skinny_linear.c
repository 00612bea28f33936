/* y = x @ w.T for a few rows of x (a decoding or verification step), AVX-512.
 *
 * x: [T, I] fp32 row-major, w: [O, I] row-major, fp32 or bf16 (widened to fp32 in registers,
 * which is exact: a bf16 number is the upper half of an fp32 one), y: [T, O] fp32 row-major,
 * 1 <= T <= 16. All arithmetic is fp32 FMA.
 * Each weight row is read once from memory and multiplied with all T rows of x (which stay in
 * L1/L2), so the cost is the weight bytes for any T until the FMAs catch up (T ~ 4 in fp32).
 * Every output y[t][o] is the same sequence of operations (16-lane partial sums over k in order,
 * then one reduction) whatever T is: a token's result is bitwise the same scored alone or in a
 * batch of T, which keeps speculative and plain greedy decoding token-identical.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#define MAX_ROWS 16

static inline __m512 load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 load_f32_masked(__mmask16 m, const float *p) {
    return _mm512_maskz_loadu_ps(m, p);
}
static inline __m512 load_bf16(const uint16_t *p) {
    __m256i half = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
static inline __m512 load_bf16_masked(__mmask16 m, const uint16_t *p) {
    __m256i half = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* dot_rows_<W>(T, x, w, y, I, O, o_begin, o_end): outputs o_begin..o_end-1 of every row of x */
#define DEFINE_DOT_ROWS(W, WTYPE) \
static inline __attribute__((always_inline)) void dot_rows_##W( \
        const int T, const float *x, const WTYPE *w, float *y, int64_t I, int64_t O, \
        int64_t o_begin, int64_t o_end) { \
    for (int64_t o = o_begin; o < o_end; o++) { \
        const WTYPE *w_row = w + o * I; \
        __m512 acc[MAX_ROWS]; \
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps(); \
        int64_t k = 0; \
        for (; k + 16 <= I; k += 16) { \
            __m512 wk = load_##W(w_row + k); \
            for (int t = 0; t < T; t++) \
                acc[t] = _mm512_fmadd_ps(wk, _mm512_loadu_ps(x + t * I + k), acc[t]); \
        } \
        if (k < I) { /* the tail of a row whose length is not a multiple of 16 */ \
            __mmask16 m = (__mmask16)((1u << (I - k)) - 1); \
            __m512 wk = load_##W##_masked(m, w_row + k); \
            for (int t = 0; t < T; t++) \
                acc[t] = _mm512_fmadd_ps(wk, _mm512_maskz_loadu_ps(m, x + t * I + k), acc[t]); \
        } \
        for (int t = 0; t < T; t++) y[t * O + o] = _mm512_reduce_add_ps(acc[t]); \
    } \
}
DEFINE_DOT_ROWS(f32, float)
DEFINE_DOT_ROWS(bf16, uint16_t)

/* One instance per T and weight type, so the accumulators live in registers; output rows are
 * split evenly between `threads` threads. Returns 0, or 1 when T is out of range. */
#define CASE(N, W) case N: dot_rows_##W(N, x, w, y, I, O, o_begin, o_end); break;
#define DEFINE_SKINNY_LINEAR(W, WTYPE) \
int skinny_linear_##W(const float *x, const WTYPE *w, float *y, int64_t T, int64_t I, int64_t O, \
                      int threads) { \
    if (T < 1 || T > MAX_ROWS) return 1; \
    _Pragma("omp parallel num_threads(threads)") \
    { \
        int64_t n = omp_get_num_threads(), i = omp_get_thread_num(); \
        int64_t chunk = (O + n - 1) / n; \
        int64_t o_begin = i * chunk, o_end = o_begin + chunk < O ? o_begin + chunk : O; \
        if (o_begin < o_end) switch (T) { \
            CASE(1, W) CASE(2, W) CASE(3, W) CASE(4, W) CASE(5, W) CASE(6, W) CASE(7, W) \
            CASE(8, W) CASE(9, W) CASE(10, W) CASE(11, W) CASE(12, W) CASE(13, W) CASE(14, W) \
            CASE(15, W) CASE(16, W) \
        } \
    } \
    return 0; \
}
DEFINE_SKINNY_LINEAR(f32, float)
DEFINE_SKINNY_LINEAR(bf16, uint16_t)
