/* y = x @ w.T for the linear layers of a decoder, fp32 arithmetic, any instruction set (simd.h).
 *
 * Weights are packed in panels of VL output rows, [P = ceil(O / VL)][I][VL], fp32, bf16 or fp16
 * (widened to fp32 in registers, exactly), the rows past O zero. (GGUF's block formats:
 * qlinear.c.)
 *
 * A tile holds `rows` rows of x against `nb` panels in rows x nb vector accumulators: for every
 * k it loads nb weight vectors once and multiplies them with a broadcast x[t][k] of every row, so
 * there are no horizontal sums and each weight byte is read from memory once per step for up to
 * ROWS_PER_TILE rows (steps of a few tokens cost about what one costs: the bytes, not the
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

enum format { F32, BF16, F16 };

ALWAYS_INLINE vf load_weights(const void *w, int64_t i, const int f) {
    return f == BF16 ? vload_bf16((const uint16_t *)w + i)
         : f == F16  ? vload_f16((const uint16_t *)w + i)
                     : vload((const float *)w + i);
}

/* rows 0..rows-1 of x against panels p..p+nb-1; rows, nb and f are constants after inlining,
 * so the accumulators live in registers */
ALWAYS_INLINE void tile(const int rows, const int nb, const int f, const float *x,
                        const void *w, float *y, int64_t I, int64_t O, int64_t p) {
    vf acc[ROWS_PER_TILE][MAX_PANELS];
    for (int t = 0; t < rows; t++)
        for (int b = 0; b < nb; b++) acc[t][b] = vzero();
    for (int64_t k = 0; k < I; k++) {
        vf wk[MAX_PANELS];
        for (int b = 0; b < nb; b++) wk[b] = load_weights(w, ((p + b) * I + k) * VL, f);
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

/* `rows` rows against `nb` panels with both as constants; nb <= PANELS_FOR(rows), because a
 * group holds PANELS_FOR(tile rows) panels and PANELS_FOR never grows with the rows */
#define PANELS(ROWS, NB) case NB: \
    if (NB <= PANELS_FOR(ROWS)) tile(ROWS, NB, f, xr, job->w, yr, I, O, p); \
    break;
_Static_assert(ROWS_PER_TILE <= 8 && MAX_PANELS <= 4, "add cases to TILE_ROWS and linear_share");
#define ROWS(R) TILE_ROWS(R, ROWS_PER_TILE)

/* this thread's share of the output panels, for every row of x */
ALWAYS_INLINE void linear_share(const struct linear_job *job, int thread, int threads,
                                const int f) {
    const int64_t T = job->T, I = job->I, O = job->O, P = (O + VL - 1) / VL;
    const int64_t rows = T < ROWS_PER_TILE ? T : ROWS_PER_TILE, group = PANELS_FOR(rows);
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
static void f16_task(void *job, int thread, int threads) { linear_share(job, thread, threads, F16); }

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

int linear_f16(const float *x, const uint16_t *w, float *y, int64_t T, int64_t I, int64_t O,
               int threads) {
    return linear(f16_task, x, w, y, T, I, O, threads);
}

const char *kernel_isa(void) { return ISA_NAME; }

int kernel_lanes(void) { return VL; }
