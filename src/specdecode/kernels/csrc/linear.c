/* y = x @ w.T for the linear layers of a decoder, fp32 arithmetic, any instruction set (simd.h).
 *
 * Weights are packed in panels of VL output rows, the rows past O zero, in one of four formats:
 *   F32, BF16  [P = ceil(O / VL)][I][VL] numbers (bf16 widened to fp32 in registers, exactly);
 *   Q8         [P][I / 32] blocks of: VL fp16 scales d, then 32 x VL int8 q (k-major): w = d q;
 *   Q4         [P][I / 32] blocks of: VL fp16 scales d, VL fp16 offsets m, then 16 x VL bytes,
 *              byte (j, lane) holding q[2j] in its low and q[2j + 1] in its high nibble: w = d q + m
 * (kernels/quant.py makes them from GGUF's blocks). A block format's weights are dequantized in
 * registers, each with one rounding (fma(q, d, m)), and multiplied in fp32 like the others.
 *
 * A tile holds `rows` rows of x against `nb` panels in rows x nb vector accumulators: for every
 * k it makes nb weight vectors once and multiplies them with a broadcast x[t][k] of every row, so
 * there are no horizontal sums and each weight byte is read from memory once per step for up to
 * ROWS_PER_TILE rows (steps of a few tokens cost about what one costs when the bytes, not the
 * multiplications, bound them). Longer inputs (prefill) loop tiles of rows over a panel group
 * that stays in cache.
 *
 * Every output y[t][o] is one chain of multiply-adds over k = 0..I-1 in order, whatever T, the
 * tile or the thread: a token's result is bitwise the same scored alone, in a verification step
 * or in a prefill.
 */
#include "kernels.h"
#include "simd.h"
#include "threads.h"

enum format { F32, BF16, Q8, Q4 };
#define BLOCK 32 /* k-steps per scale of the block formats */

/* bytes of one block of a panel, and where its parts start */
#define Q8_BLOCK (2 * VL + BLOCK * VL)
#define Q4_BLOCK (4 * VL + BLOCK / 2 * VL)

/* the weight vector of panel `panel` (its first byte) at k, given its block's scales */
ALWAYS_INLINE vf load_weights(const int fmt, const void *w, int64_t I, int64_t p, int64_t k,
                              vf d, vf m) {
    if (fmt == F32) return vload((const float *)w + (p * I + k) * VL);
    if (fmt == BF16) return vload_bf16((const uint16_t *)w + (p * I + k) * VL);
    const int64_t blocks = I / BLOCK, b = k / BLOCK, j = k % BLOCK;
    if (fmt == Q8) {
        const int8_t *q = (const int8_t *)w + (p * blocks + b) * Q8_BLOCK + 2 * VL + j * VL;
        return vmul(vload_s8(q), d);
    }
    const uint8_t *q = (const uint8_t *)w + (p * blocks + b) * Q4_BLOCK + 4 * VL + j / 2 * VL;
    return vfma(vload_nibbles(q, j & 1), d, m);
}

/* the scales d (and offsets m) of panel p's block holding k */
ALWAYS_INLINE void load_scales(const int fmt, const void *w, int64_t I, int64_t p, int64_t k,
                               vf *d, vf *m) {
    const int64_t blocks = I / BLOCK, b = k / BLOCK;
    if (fmt == Q8) {
        *d = vload_f16((const uint16_t *)((const uint8_t *)w + (p * blocks + b) * Q8_BLOCK));
        *m = vzero();
    } else if (fmt == Q4) {
        const uint8_t *block = (const uint8_t *)w + (p * blocks + b) * Q4_BLOCK;
        *d = vload_f16((const uint16_t *)block);
        *m = vload_f16((const uint16_t *)(block + 2 * VL));
    }
}

/* rows 0..rows-1 of x against panels p..p+nb-1; rows, nb and fmt are constants after inlining,
 * so the accumulators live in registers */
ALWAYS_INLINE void tile(const int rows, const int nb, const int fmt, const float *x,
                        const void *w, float *y, int64_t I, int64_t O, int64_t p) {
    vf acc[ROWS_PER_TILE][MAX_PANELS], d[MAX_PANELS], m[MAX_PANELS];
    for (int t = 0; t < rows; t++)
        for (int b = 0; b < nb; b++) acc[t][b] = vzero();
    for (int b = 0; b < nb; b++) d[b] = m[b] = vzero();
    for (int64_t k = 0; k < I; k++) {
        if (fmt >= Q8 && k % BLOCK == 0)
            for (int b = 0; b < nb; b++) load_scales(fmt, w, I, p + b, k, &d[b], &m[b]);
        vf wk[MAX_PANELS];
        for (int b = 0; b < nb; b++) wk[b] = load_weights(fmt, w, I, p + b, k, d[b], m[b]);
        for (int t = 0; t < rows; t++) {
            const vf xk = vset1(x[t * I + k]);
            for (int b = 0; b < nb; b++) acc[t][b] = vfma(xk, wk[b], acc[t][b]);
        }
    }
    for (int b = 0; b < nb; b++) {
        const int64_t o = (p + b) * VL;
        const int n = O - o < VL ? (int)(O - o) : VL;
        for (int t = 0; t < rows; t++) vstore_first(y + t * O + o, acc[t][b], n);
    }
}

struct linear_job {
    const float *x;
    const void *w;
    float *y;
    int64_t T, I, O;
};

/* panels per tile: the block formats keep scales (and offsets) in registers too */
#define GROUP(fmt, rows) ((fmt) >= Q8 ? QPANELS_FOR(rows) : PANELS_FOR(rows))

/* `rows` rows against `nb` panels with both as constants; nb <= GROUP(fmt, rows), because a
 * group holds GROUP(fmt, tile rows) panels and GROUP never grows with the rows */
#define PANELS(ROWS, NB) case NB: \
    if (NB <= GROUP(fmt, ROWS)) tile(ROWS, NB, fmt, xr, job->w, yr, I, O, p); \
    break;
#define ROWS(R) case R: \
    if (R <= ROWS_PER_TILE) \
        switch (nb) { PANELS(R, 1) PANELS(R, 2) PANELS(R, 3) PANELS(R, 4) } \
    break;

/* this thread's share of the output panels, for every row of x */
ALWAYS_INLINE void linear_share(const struct linear_job *job, int thread, int threads,
                                const int fmt) {
    const int64_t T = job->T, I = job->I, O = job->O, P = (O + VL - 1) / VL;
    const int64_t rows = T < ROWS_PER_TILE ? T : ROWS_PER_TILE, group = GROUP(fmt, rows);
    long long begin, end;
    share(P, thread, threads, &begin, &end);
    for (int64_t p = begin; p < end; p += group) {
        const int nb = p + group <= end ? (int)group : (int)(end - p);
        for (int64_t r = 0; r < T; r += rows) {
            const float *xr = job->x + r * I;
            float *yr = job->y + r * O;
            switch (T - r < rows ? T - r : rows) {
                ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8)
            }
        }
    }
}

static void f32_task(void *job, int thread, int threads) { linear_share(job, thread, threads, F32); }
static void bf16_task(void *job, int thread, int threads) { linear_share(job, thread, threads, BF16); }
static void q8_task(void *job, int thread, int threads) { linear_share(job, thread, threads, Q8); }
static void q4_task(void *job, int thread, int threads) { linear_share(job, thread, threads, Q4); }

static int linear(task_fn task, const float *x, const void *w, float *y, int64_t T, int64_t I,
                  int64_t O, int threads) {
    if (T < 1) return 1;
    struct linear_job job = {x, w, y, T, I, O};
    run_parallel(threads, task, &job);
    return 0;
}

int linear_f32(const float *x, const float *w, float *y, int64_t T, int64_t I, int64_t O,
               int threads) {
    return linear(f32_task, x, w, y, T, I, O, threads);
}

int linear_bf16(const float *x, const uint16_t *w, float *y, int64_t T, int64_t I, int64_t O,
                int threads) {
    return linear(bf16_task, x, w, y, T, I, O, threads);
}

int linear_q8(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
              int threads) {
    return I % BLOCK ? 2 : linear(q8_task, x, w, y, T, I, O, threads);
}

int linear_q4(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
              int threads) {
    return I % BLOCK ? 2 : linear(q4_task, x, w, y, T, I, O, threads);
}

const char *kernel_isa(void) { return ISA_NAME; }

int kernel_lanes(void) { return VL; }
