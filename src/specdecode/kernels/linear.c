/* y = x @ w.T for the linear layers of a decoder, AVX-512, fp32 arithmetic.
 *
 * x: [T, I] fp32 row-major; y: [T, O] fp32 row-major; w packed in panels of 16 output rows,
 * [P = ceil(O / 16)][I][16], fp32 or bf16 (widened to fp32 in registers, which is exact: a bf16
 * number is the upper half of an fp32 one), the rows past O zero.
 *
 * A tile holds T_TILE rows of x against NB panels in T_TILE x NB accumulators of 16 outputs each:
 * for every k it loads NB 16-wide weight vectors once and multiplies them with a broadcast x[t][k]
 * of every row, so no horizontal sums are needed and each weight byte is read from memory once
 * per step for up to 8 rows (steps of 1..8 tokens cost about the same: the bytes, not the FMAs,
 * bound them on 2 cores). Longer inputs (prefill) loop tiles of 8 rows over a panel group that
 * stays in cache.
 * Every output y[t][o] is one chain of FMAs over k = 0..I-1 in order, whatever T, the tile or the
 * thread: a token's result is bitwise the same scored alone, in a verification step or in a
 * prefill, which keeps speculative and plain greedy decoding token-identical.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#define ROWS_PER_TILE 8
/* panels per tile: as many as the 32 vector registers hold accumulators for */
#define PANELS_FOR(T) ((T) <= 6 ? 4 : 3)

static inline __m512 load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 load_bf16(const uint16_t *p) {
    __m256i half = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* tile_<W>(T_TILE, NB, x, w, y, I, O, p): rows 0..T_TILE-1 of x against panels p..p+NB-1 */
#define DEFINE_TILE(W, WTYPE) \
static inline __attribute__((always_inline)) void tile_##W( \
        const int T_TILE, const int NB, const float *x, const WTYPE *w, float *y, \
        int64_t I, int64_t O, int64_t p) { \
    __m512 acc[ROWS_PER_TILE][4]; \
    for (int t = 0; t < T_TILE; t++) \
        for (int b = 0; b < NB; b++) acc[t][b] = _mm512_setzero_ps(); \
    const WTYPE *panels = w + p * I * 16; \
    for (int64_t k = 0; k < I; k++) { \
        __m512 wk[4]; \
        for (int b = 0; b < NB; b++) wk[b] = load_##W(panels + (b * I + k) * 16); \
        for (int t = 0; t < T_TILE; t++) { \
            __m512 xk = _mm512_set1_ps(x[t * I + k]); \
            for (int b = 0; b < NB; b++) acc[t][b] = _mm512_fmadd_ps(xk, wk[b], acc[t][b]); \
        } \
    } \
    for (int b = 0; b < NB; b++) { \
        int64_t o = (p + b) * 16; \
        __mmask16 m = o + 16 <= O ? 0xFFFF : (__mmask16)((1u << (O - o)) - 1); \
        for (int t = 0; t < T_TILE; t++) _mm512_mask_storeu_ps(y + t * O + o, m, acc[t][b]); \
    } \
}
DEFINE_TILE(f32, float)
DEFINE_TILE(bf16, uint16_t)

/* one instance per tile height, so the accumulators live in registers; a short last group of
 * panels (nb < PANELS_FOR) goes one panel at a time */
#define CASE(N, W) case N: \
    if (nb == PANELS_FOR(N)) tile_##W(N, PANELS_FOR(N), xr, w, yr, I, O, p); \
    else for (int b = 0; b < nb; b++) tile_##W(N, 1, xr, w, yr, I, O, p + b); \
    break;

/* Output panels are split evenly between `threads` threads. Returns 0, or 1 for T < 1. */
#define DEFINE_LINEAR(W, WTYPE) \
int linear_##W(const float *x, const WTYPE *w, float *y, int64_t T, int64_t I, int64_t O, \
               int threads) { \
    if (T < 1) return 1; \
    const int64_t P = (O + 15) / 16, tile = T < ROWS_PER_TILE ? T : ROWS_PER_TILE; \
    const int64_t group = PANELS_FOR(tile); \
    _Pragma("omp parallel num_threads(threads)") \
    { \
        int64_t n = omp_get_num_threads(), i = omp_get_thread_num(); \
        int64_t chunk = (P + n - 1) / n; \
        int64_t p_begin = i * chunk, p_end = p_begin + chunk < P ? p_begin + chunk : P; \
        for (int64_t p = p_begin; p < p_end; p += group) { \
            int nb = p + group <= p_end ? group : p_end - p; \
            for (int64_t r = 0; r < T; r += tile) { \
                const float *xr = x + r * I; \
                float *yr = y + r * O; \
                switch (T - r < tile ? T - r : tile) { \
                    CASE(1, W) CASE(2, W) CASE(3, W) CASE(4, W) \
                    CASE(5, W) CASE(6, W) CASE(7, W) CASE(8, W) \
                } \
            } \
        } \
    } \
    return 0; \
}
DEFINE_LINEAR(f32, float)
DEFINE_LINEAR(bf16, uint16_t)
