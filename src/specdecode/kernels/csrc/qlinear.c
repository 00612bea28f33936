/* y = x @ w.T for weights in GGUF's block formats, in integer dot products, any instruction set
 * (simd.h).
 *
 * The arithmetic is llama.cpp's, at a finer grain for x: each row of x is rounded per block of 32
 * values to 8 bits, x ~ dx qx with dx = max|x| / 127 and qx in [-127, 127]; a weight is
 * w = D u + w0 with u an unsigned integer of the format's bits, D and w0 per (sub-)block; so a
 * block's share of a product is
 *     sum(w x) ~ dx (D sum(u qx) + w0 sum(qx)),
 * sum(u qx) exact in 32-bit integers (vdot4), the rest in fp32. x is rounded row by row and the
 * integer sums have no order to change, so a row's result is bitwise the same whatever other rows
 * share the call.
 *
 * The formats and their packed layout: qformats.h.
 */
#include <math.h>
#include <stdlib.h>

#include "kernels.h"
#include "qformats.h"
#include "simd.h"
#include "threads.h"

/* rows of x a stream (below) takes at a time */
#define STREAM_ROWS 64
#ifndef QSTREAM_PANELS /* panels a stream unpacks at a time (an instruction set may set fewer) */
#define QSTREAM_PANELS QMAX_PANELS
#endif

#define FORMAT_NAME(name, ...) #name,
static const char *const FORMAT_NAMES[FORMATS] = {BLOCK_FORMATS(FORMAT_NAME)};

struct quantize_job {
    const float *x;
    struct xblock *out;
    int64_t count; /* blocks */
};

static void quantize_task(void *context, int thread, int threads) {
    const struct quantize_job *job = context;
    long long begin, end;
    share(job->count, thread, threads, &begin, &end);
    for (long long r = begin; r < end; r++) quantize_block(job->x + r * BLOCK, job->out + r);
}

/* where the integer sum of half h (lo, hi) of a row's block starts: minus the format's offset
 * times the sum of that half's q (of the whole block's, in lo, where the format has one scale a
 * block), so that the dot products finish it. The same integer as subtracting the offset after
 * them, one instruction a sum fewer (Q6_K and Q4_0 calls: docs/benchmarks/kernel-paths). */
ALWAYS_INLINE vi sum_start(const int f, const struct xblock *xb, int h) {
    if (!offset(f) || (halves(f) == 1 && h)) return viset1(0);
    return viset1(-offset(f) * xb->sum[halves(f) == 1 ? 0 : 1 + h]);
}

/* acc plus a block's share (or a half's, where the format has two scales) for one row: D dx (its
 * integer sum, started at sum_start), plus w0 dsum. Every tile adds a row's blocks in this one
 * way, so the row's result does not depend on which tile computed it. */
ALWAYS_INLINE vf scaled(const int f, vf acc, vi isum, vf D, vf w0, const struct xblock *xb) {
    acc = vfma(vcvt(isum), vmul(D, vset1(xb->d)), acc);
    return has_w0(f) ? vfma(w0, vset1(xb->dsum), acc) : acc;
}

/* block b's share of the `ahead` bytes at `next` asked into L2 (see tile): as many bytes as
 * the nb panels' block b occupies, a constant number of lines (a count known when compiling:
 * the loop unrolls, where a computed share cost an eighth of a 1-row call in loop overhead) */
ALWAYS_INLINE void prefetch_share(const int f, const int nb, const uint8_t *next, int64_t ahead,
                                  int64_t b) {
    if (!next) return;
    const int64_t share = nb * super_bytes(f) / blocks_per_super(f), start = b * share;
    for (int64_t byte = 0; byte < share; byte += 64)
        if (start + byte < ahead) __builtin_prefetch(next + start + byte, 0, 2);
}

/* A pass over the blocks of panels p..p+nb-1, in order: `pass_next` moves to the next block (b),
 * asks for its share of the `ahead` bytes of weights at `next` (see tile), and reads its scales (D
 * per half block, w0) and where its packed quants start; a super-block's headers and fp32 factors
 * are read at its first block. */
struct pass {
    const uint8_t *w, *next;
    int64_t p, ahead, blocks, supers, b;
    const uint8_t *headers[QMAX_PANELS];
    vf d[QMAX_PANELS], m[QMAX_PANELS];
    vf D[QMAX_PANELS][2], w0[QMAX_PANELS];
    const uint8_t *quants[QMAX_PANELS];
};

ALWAYS_INLINE struct pass pass_over(const int f, const uint8_t *w, int64_t I, int64_t p,
                                    const uint8_t *next, int64_t ahead) {
    struct pass s = {.w = w, .next = next, .p = p, .ahead = ahead, .blocks = I / BLOCK, .b = -1};
    s.supers = s.blocks / blocks_per_super(f);
    return s;
}

/* 0 past the last block */
ALWAYS_INLINE int pass_next(const int f, const int nb, struct pass *s) {
    const int64_t b = ++s->b, j = b % blocks_per_super(f);
    if (b >= s->blocks) return 0;
    prefetch_share(f, nb, s->next, s->ahead, b);
    for (int n = 0; n < nb; n++) {
        if (j == 0) {
            s->headers[n] =
                s->w + ((s->p + n) * s->supers + b / blocks_per_super(f)) * super_bytes(f);
            super_scales(f, s->headers[n], &s->d[n], &s->m[n]);
        }
        scales_of(f, s->headers[n], j, s->d[n], s->m[n], s->D[n], &s->w0[n]);
        s->quants[n] = s->headers[n] + VL * header_bytes(f) + j * VL * payload_bytes(f);
    }
    return 1;
}

/* a tile's fp32 sums: zeroed, and stored to rows 0..rows-1 of y (the panels' lanes that exist) */
ALWAYS_INLINE void zero_sums(vf acc[][QMAX_PANELS], int rows, int nb) {
    for (int t = 0; t < rows; t++)
        for (int n = 0; n < nb; n++) acc[t][n] = vzero();
}
ALWAYS_INLINE void store_sums(vf acc[][QMAX_PANELS], int rows, int nb, float *y, int64_t O,
                              int64_t p) {
    for (int n = 0; n < nb; n++) {
        const int64_t o = (p + n) * VL;
        const int lanes = O - o < VL ? (int)(O - o) : VL;
        for (int t = 0; t < rows; t++) vstore_first(y + t * O + o, acc[t][n], lanes);
    }
}

#ifdef VDOT_PAIRS16
/* a tile's integer sums of block b (isum[half][row][panel], zero on entry) where byte pairs are
 * summed in 16 bits: over runs of groups as in `dots`, widened once a run; a 4-bit format with one
 * scale per block sums lo and hi together, into isum[0] (|u x0 + u x1| <= 2 * 15 * 127, times 8 <
 * 2^15). The same integers as `dot` group by group, two instructions a group fewer. */
ALWAYS_INLINE void tile_sums16(const int f, const int rows, const int nb, const struct xblock *x,
                               int64_t blocks, int64_t b, const uint8_t *const quants[],
                               vi isum[2][QROWS_PER_TILE][QMAX_PANELS]) {
    const int run = bits(f) == 6 ? 2 : 4, both = bits(f) == 4 && halves(f) == 1;
    for (int g0 = 0; g0 < 4; g0 += run) {
        vi s[2][QROWS_PER_TILE][QMAX_PANELS];
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < rows; t++)
                for (int n = 0; n < nb; n++) s[h][t][n] = viset1(0);
        for (int g = g0; g < g0 + run; g++)
            for (int n = 0; n < nb; n++) {
                vi lo, hi;
                group(f, quants[n], g, &lo, &hi);
                for (int t = 0; t < rows; t++) {
                    const int8_t *q = x[t * blocks + b].q;
                    const vi a = vdot2_16(lo, vbroadcast4(q + 4 * g));
                    const vi c = vdot2_16(hi, vbroadcast4(q + 16 + 4 * g));
                    s[0][t][n] = vadd16(s[0][t][n], a);
                    s[both ? 0 : 1][t][n] = vadd16(s[both ? 0 : 1][t][n], c);
                }
            }
        for (int t = 0; t < rows; t++)
            for (int n = 0; n < nb; n++)
                for (int h = 0; h < 2 - both; h++)
                    isum[h][t][n] = vwiden16(isum[h][t][n], s[h][t][n]);
    }
}
#endif

/* rows 0..rows-1 of x against panels p..p+nb-1 (rows, nb, f constants after inlining), for calls
 * of up to QROWS_PER_TILE rows: the rows' sums stay in registers. `next`:
 * the next `ahead` bytes of weights this thread will read (or NULL), requested a share per block
 * so that they arrive while this tile computes: from memory, the first tile of rows over a panel
 * group would otherwise wait for its weights, then compute, never both at once. They are asked
 * into L2, not L1 (locality 2): requests into L1 hold its few miss buffers and evict the tile's
 * own weights and x, and the tile then waits on both (docs/benchmarks/kernel-paths). */
ALWAYS_INLINE void tile(const int f, const int rows, const int nb, const struct xblock *x,
                        float *y, int64_t O, struct pass s) {
    vf acc[QROWS_PER_TILE][QMAX_PANELS];
    zero_sums(acc, rows, nb);
    while (pass_next(f, nb, &s)) {
        /* both halves' sums in one pass over the quants: each group is unpacked once; lo and
         * hi in separate sums (two dependency chains of 4 dot products, not one of 8), added
         * exactly where the format has one scale per block */
        vi isum[2][QROWS_PER_TILE][QMAX_PANELS];
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < rows; t++)
                for (int n = 0; n < nb; n++)
                    isum[h][t][n] = sum_start(f, &x[t * s.blocks + s.b], h);
#ifdef VDOT_PAIRS16
        if (bits(f) <= 6)
            tile_sums16(f, rows, nb, x, s.blocks, s.b, s.quants, isum);
        else
#endif
            for (int g = 0; g < 4; g++)
                for (int n = 0; n < nb; n++) {
                    vi lo, hi;
                    group(f, s.quants[n], g, &lo, &hi);
                    for (int t = 0; t < rows; t++) {
                        const int8_t *q = x[t * s.blocks + s.b].q;
                        isum[0][t][n] = dot(f, isum[0][t][n], lo, vbroadcast4(q + 4 * g));
                        isum[1][t][n] = dot(f, isum[1][t][n], hi, vbroadcast4(q + 16 + 4 * g));
                    }
                }
        for (int t = 0; t < rows; t++)
            for (int n = 0; n < nb; n++) {
                const struct xblock *xb = &x[t * s.blocks + s.b];
                if (halves(f) == 1)
                    acc[t][n] = scaled(f, acc[t][n], viadd(isum[0][t][n], isum[1][t][n]),
                                       s.D[n][0], s.w0[n], xb);
                else
                    for (int h = 0; h < 2; h++)
                        acc[t][n] = scaled(f, acc[t][n], isum[h][t][n], s.D[n][h], s.w0[n], xb);
            }
    }
    store_sums(acc, rows, nb, y, O, s.p);
}

/* rows 0..rows-1 (up to STREAM_ROWS, any number) of x against panels p..p+nb-1, for calls of
 * more rows than a tile holds: each block of weights is unpacked once for all the rows (a tile
 * unpacks it again for every QROWS_PER_TILE rows, and its unpacking and scales cost about as
 * much as its dot products), and the rows' fp32 sums wait in L1 between blocks. A row gets the
 * same operations in the same order as in a tile: bitwise the same result. */
ALWAYS_INLINE void stream(const int f, const int nb, const int rows, const struct xblock *x,
                          float *y, int64_t O, struct pass s) {
    vf acc[STREAM_ROWS][QMAX_PANELS];
    zero_sums(acc, rows, nb);
    while (pass_next(f, nb, &s)) {
        vi lo[QMAX_PANELS][4], hi[QMAX_PANELS][4];
        for (int n = 0; n < nb; n++)
            for (int g = 0; g < 4; g++) group(f, s.quants[n], g, &lo[n][g], &hi[n][g]);
        for (int t = 0; t < rows; t++) {
            const struct xblock *xb = &x[t * s.blocks + s.b];
            const vi start[2] = {sum_start(f, xb, 0), sum_start(f, xb, 1)}; /* every panel's */
            for (int n = 0; n < nb; n++) {
                /* lo and hi in separate sums (one per half where the format has two scales):
                 * two dependency chains of 4 dot products instead of one of 8 (measured: a
                 * single chain loses a quarter) */
                const vi isum[2] = {dots(f, start[0], lo[n], xb->q),
                                    dots(f, start[1], hi[n], xb->q + 16)};
                if (halves(f) == 1)
                    acc[t][n] =
                        scaled(f, acc[t][n], viadd(isum[0], isum[1]), s.D[n][0], s.w0[n], xb);
                else
                    for (int h = 0; h < 2; h++)
                        acc[t][n] = scaled(f, acc[t][n], isum[h], s.D[n][h], s.w0[n], xb);
            }
        }
    }
    store_sums(acc, rows, nb, y, O, s.p);
}

struct qlinear_job {
    const struct xblock *x;
    const uint8_t *w;
    float *y;
    int64_t T, I, O;
};

/* `rows` rows against `nb` panels, both constants; nb <= QPANELS_FOR(rows) as in linear.c */
#define PANELS(ROWS, NB) case NB: \
    if (NB <= QMAX_PANELS && NB <= QPANELS_FOR(ROWS)) \
        tile(f, ROWS, NB, xr, yr, O, pass_over(f, job->w, I, p, next, ahead)); \
    break;
_Static_assert(QROWS_PER_TILE <= 8 && QMAX_PANELS <= 4, "add cases to TILE_ROWS and qlinear_share");
#define ROWS(R) TILE_ROWS(R, QROWS_PER_TILE)
#define STREAMED(NB) case NB: \
    if (NB <= QSTREAM_PANELS) \
        stream(f, NB, n, xr, yr, O, pass_over(f, job->w, I, p, next, ahead)); \
    break;

/* this thread's share of the output panels, for every row of x */
ALWAYS_INLINE void qlinear_share(const struct qlinear_job *job, int thread, int threads,
                                 const int f) {
    const int64_t T = job->T, I = job->I, O = job->O, P = (O + VL - 1) / VL, blocks = I / BLOCK;
    const int streamed = T > QROWS_PER_TILE;
    const int64_t rows = streamed ? STREAM_ROWS : T < QROWS_PER_TILE ? T : QROWS_PER_TILE;
    const int64_t group = streamed ? QSTREAM_PANELS : QPANELS_FOR(rows);
    long long begin, end;
    share(P, thread, threads, &begin, &end);
    const int64_t panel_bytes = blocks / blocks_per_super(f) * super_bytes(f);
    for (int64_t p = begin; p < end; p += group) {
        const int nb = p + group <= end ? (int)group : (int)(end - p);
        const int64_t ahead = (end - p - nb < group ? end - p - nb : group) * panel_bytes;
        for (int64_t r = 0; r < T; r += rows) {
            const struct xblock *xr = job->x + r * blocks;
            float *yr = job->y + r * O;
            /* the first tile of rows brings the next panel group's weights in */
            const uint8_t *next = r == 0 && ahead > 0 ? job->w + (p + nb) * panel_bytes : NULL;
            const int n = T - r < rows ? (int)(T - r) : (int)rows;
            if (streamed) {
                switch (nb) { STREAMED(1) STREAMED(2) STREAMED(3) STREAMED(4) }
            } else {
                switch (n) { ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) }
            }
        }
    }
}

#define TASK(F, ...) \
    static void task_##F(void *job, int thread, int threads) { qlinear_share(job, thread, threads, F); }
#define TASK_ENTRY(F, ...) task_##F,
BLOCK_FORMATS(TASK)
static const task_fn TASKS[FORMATS] = {BLOCK_FORMATS(TASK_ENTRY)};

const char *kernel_format(int format) {
    return format >= 0 && format < FORMATS ? FORMAT_NAMES[format] : NULL;
}

int linear_quant(const float *x, const uint8_t *w, float *y, int64_t T, int64_t I, int64_t O,
                 int format, int threads) {
    if (T < 1 || format < 0 || format >= FORMATS) return 1;
    if (I % (BLOCK * blocks_per_super(format))) return 1;
#ifdef SPECDECODE_AMX
    if (T >= amx_min_rows(format) && amx_usable())
        return amx_linear(x, w, y, T, I, O, format, threads);
#endif
    struct xblock *xq = malloc(sizeof *xq * (size_t)(T * (I / BLOCK)));
    if (!xq) return 2;
    struct quantize_job rounding = {x, xq, T * (I / BLOCK)};
    /* a few rows take less than waking the threads */
    run_parallel(T > QROWS_PER_TILE ? threads : 1, quantize_task, &rounding);
    struct qlinear_job job = {xq, w, y, T, I, O};
    run_parallel(threads, TASKS[format], &job);
    free(xq);
    return 0;
}
