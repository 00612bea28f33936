/* y = x @ w.T for a few rows of x (a decoding or verification step), fp32, AVX-512.
 *
 * x: [T, I] row-major, w: [O, I] row-major, y: [T, O] row-major, 1 <= T <= 16.
 * Each weight row is read once from memory and multiplied with all T rows of x (which stay in
 * L1/L2), so the cost is the weight bytes for any T until the FMAs catch up (T ~ 4 here).
 * Every output y[t][o] is the same sequence of operations (16-lane partial sums over k in order,
 * then one reduction) whatever T is: a token's result is bitwise the same scored alone or in a
 * batch of T, which keeps speculative and plain greedy decoding token-identical.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#define MAX_ROWS 16

static inline __attribute__((always_inline)) void dot_rows(
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

/* One instance per T, so the accumulators live in registers. */
#define DOT_ROWS(N) case N: dot_rows(N, x, w, y, I, O, o_begin, o_end); break;

static void dot_range(int T, const float *x, const float *w, float *y, int64_t I, int64_t O,
                      int64_t o_begin, int64_t o_end) {
    switch (T) {
        DOT_ROWS(1) DOT_ROWS(2) DOT_ROWS(3) DOT_ROWS(4) DOT_ROWS(5) DOT_ROWS(6) DOT_ROWS(7)
        DOT_ROWS(8) DOT_ROWS(9) DOT_ROWS(10) DOT_ROWS(11) DOT_ROWS(12) DOT_ROWS(13) DOT_ROWS(14)
        DOT_ROWS(15) DOT_ROWS(16)
    }
}

/* Returns 0, or 1 when T is out of range (nothing written). Output rows are split evenly
 * between `threads` threads. */
int skinny_linear(const float *x, const float *w, float *y, int64_t T, int64_t I, int64_t O,
                  int threads) {
    if (T < 1 || T > MAX_ROWS) return 1;
    #pragma omp parallel num_threads(threads)
    {
        int64_t n = omp_get_num_threads(), i = omp_get_thread_num();
        int64_t chunk = (O + n - 1) / n;
        int64_t o_begin = i * chunk, o_end = o_begin + chunk < O ? o_begin + chunk : O;
        if (o_begin < o_end) dot_range((int)T, x, w, y, I, O, o_begin, o_end);
    }
    return 0;
}
